"""Lowering and execution time, and repeat compression, side by side.

    python benchmarks/execute_bench.py

* GEMV 4096x4096 on hbm-pim (the baseline draft): lowering time, execution
  time of `sim.execute` after JIT warm-up (fp16 backend arithmetic), record
  counts with repeat compression vs one record per column command;
* the batch-8 attention step (8 x 40 heads, L 2048, d 128: score, softmax
  and context as one program) on attacc, its baseline draft;
* 16 small attacc ops of distinct shapes (GEMVs, row reductions), each lowered
  and run once cold and then warm, with the interpreter's small-program
  size class (`attacc.execute.SMALL`) and with per-dimension buckets alone,
  side by side.
Targets: lowering and execution each <= 1 s after warm-up; the GEMV under
50 000 records; the small ops' cold total >= 2x faster with the class, their
warm calls within 1 ms of the buckets'.
"""
from __future__ import annotations

import time

import jax
import numpy as np

from pimjax.backends import baseline
from pimjax.costmodel.kernels import lower_case, make_case
from pimjax.hw import get_backend
from pimjax.kernels import FUNCTIONS as case_functions
from pimjax.kernels import arg_shapes, kernel_op
from pimjax.lower import lower
from pimjax.sim.execute import execute


def best_of(fn, repeat=3):
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
    return min(times)


def expanded(program) -> int:
    """Records without repeat compression: one per column command."""
    n = np.asarray(program.commands.n)
    return int(n[n > 0].sum())


def report(name, lower_s, exec_s, program):
    compressed = int((np.asarray(program.commands.n) > 0).sum())
    print(f"{name:40} {lower_s:9.3f} {exec_s:9.3f} {compressed:12,} {expanded(program):14,} "
          f"{expanded(program) / max(compressed, 1):8.1f}x")


def main() -> None:
    print(f"{'program':40} {'lower s':>9} {'exec s':>9} {'records':>12} {'uncompressed':>14} {'ratio':>9}")
    be = get_backend("hbm-pim")
    op, shapes = kernel_op("gemv", [4096, 4096])
    d = baseline(op, be)
    lower_s = best_of(lambda: lower(op, d, be, shapes))
    prog = lower(op, d, be, shapes)
    rng = np.random.default_rng(0)
    W = rng.standard_normal((4096, 4096)).astype(np.float32)
    x = rng.standard_normal(4096).astype(np.float32)
    exec_s = best_of(lambda: execute(prog, W, x))
    report("GEMV 4096x4096, hbm-pim baseline", lower_s, exec_s, prog)
    res = lower(op, d, be, shapes, resident=(0,))
    report("  same, weights resident (steady state)", lower_s, exec_s,
           res.__class__(**{**res.__dict__, "commands": res.commands.select(
               np.asarray(res.commands.resident) == 0)}))
    # the batch-8 attention step: score -> softmax -> context as one AttAcc program
    att = get_backend("attacc")
    case = make_case(att, "attn", [8, 40, 2048, 128])
    d = baseline(case.op, att)
    t_lower = best_of(lambda: lower_case(case, d, att), repeat=1)
    prog = lower_case(case, d, att)
    q, K, V = (rng.standard_normal(s).astype(np.float32) * 0.5 for s in arg_shapes("attn", case.shape))
    t_exec = best_of(lambda: execute(prog, q, K, V))
    report("attention 8x40 heads, L 2048, d 128, attacc", t_lower, t_exec, prog)
    want = np.asarray(jax.jit(case_functions["attn"])(q, K, V))
    got = np.asarray(execute(prog, q, K, V))
    print(f"attention: max |PIM - jax.jit| / max |jax.jit| = "
          f"{np.abs(got - want).max() / np.abs(want).max():.1e} (fp16 backend arithmetic)")


def small_ops() -> None:
    """The small-program class against per-dimension buckets: cold (trace +
    XLA compile + run) and warm per-call time of 16 small ops."""
    from pimjax.backends.attacc import execute as attacc_execute
    att = get_backend("attacc", channels=2)
    rng = np.random.default_rng(1)
    shapes = [("gemv", [m, k]) for m, k in ((64, 48), (100, 37), (129, 64), (200, 100), (48, 257), (512, 256),
                                             (31, 17), (96, 160))]
    shapes += [("red", [m, n]) for m, n in ((100, 129), (7, 300), (64, 64), (33, 48), (256, 12), (5, 1000),
                                                (128, 96), (17, 17))]
    small = attacc_execute.SMALL
    out = {}
    # the class first: whatever warms up in the process favours the buckets that run second
    for mode, cls in (("size class", small), ("buckets only", {})):
        attacc_execute.SMALL = cls
        cases = []
        for kernel, shape in shapes:        # lowered per mode: a program keeps its padded tables
            case = make_case(att, kernel, shape)
            prog = lower_case(case, baseline(case.op, att), att)
            args = [rng.standard_normal(s).astype(np.float32) for s in arg_shapes(kernel, case.shape)]
            cases.append((prog, args))
        t0 = time.perf_counter()
        for prog, args in cases:
            jax.block_until_ready(execute(prog, *args))
        cold = time.perf_counter() - t0
        warm = [best_of(lambda: execute(prog, *args), repeat=5) for prog, args in cases]
        out[mode] = (cold, 1e3 * float(np.median(warm)), 1e3 * max(warm))
    attacc_execute.SMALL = small
    print(f"\n{'16 small attacc ops':40} {'cold s':>9} {'warm ms (median / max)':>24}")
    for mode, (cold, med, mx) in out.items():
        print(f"{mode:40} {cold:9.2f} {med:11.2f} / {mx:.2f}")
    print(f"cold: buckets / class = {out['buckets only'][0] / out['size class'][0]:.1f}x")


if __name__ == "__main__":
    main()
    small_ops()
