"""Lowering and execution time, and repeat compression, side by side.

    python benchmarks/execute_bench.py

* GEMV 4096x4096 on hbm-pim (the baseline draft): lowering time, execution
  time of `sim.execute` after JIT warm-up (fp16 backend arithmetic), record
  counts with repeat compression vs one record per column command;
* the batch-8 attention step (8 x 40 heads, L 2048, d 128) on attacc when
  its lowering is available.
Targets: lowering and execution each <= 1 s after warm-up; the GEMV under
50 000 records.
"""
from __future__ import annotations

import time

import jax
import numpy as np

from pimjax.hw import get_backend
from pimjax.kernels import kernel_graph, kernel_op
from pimjax.lower import lower
from pimjax.partition.baselines import baseline
from pimjax.sim import execute


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
    try:
        from pimjax.lower import attacc
    except ImportError:
        print("attacc lowering not available")
        return
    att = get_backend("attacc")
    graph = kernel_graph("attn", [8, 40, 2048, 128])
    if not hasattr(attacc, "lower_graph_attention"):
        print("attacc attention lowering entry point not found")
        return
    t0 = time.perf_counter()
    progs = attacc.lower_graph_attention(graph, att)
    t_lower = time.perf_counter() - t0
    arrays = [rng.standard_normal(v.shape).astype(np.float32) for v in (graph.values[i] for i in graph.inputs)]
    t_exec = best_of(lambda: attacc.execute_graph_attention(progs, graph, arrays), repeat=1)
    for p in progs:
        report("attention 8x40xL2048xd128, attacc", t_lower, t_exec, p)


if __name__ == "__main__":
    main()
