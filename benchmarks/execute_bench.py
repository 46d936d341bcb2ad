"""Lowering and execution time, and repeat compression, side by side.

    python benchmarks/execute_bench.py

* GEMV 4096x4096 on hbm-pim (the baseline draft): lowering time, execution
  time of `sim.execute` after JIT warm-up (fp16 backend arithmetic), record
  counts with repeat compression vs one record per column command;
* the batch-8 attention step (8 x 40 heads, L 2048, d 128: score, softmax
  and context as one program) on attacc, its baseline draft.
Targets: lowering and execution each <= 1 s after warm-up; the GEMV under
50 000 records.
"""
from __future__ import annotations

import time

import jax
import numpy as np

from pimjax.hw import get_backend
from pimjax.costmodel.kernels import lower_case, make_case
from pimjax.kernels import FUNCTIONS as case_functions
from pimjax.kernels import arg_shapes
from pimjax.kernels import kernel_op
from pimjax.lower import lower
from pimjax.backends import baseline
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


if __name__ == "__main__":
    main()
