"""Check `sim.cycles` against figures measured on trusted PIM simulators.

    python experiments/validate_reference.py --csv ../shared/reference/hbm-pim.csv [--tolerance 0.10]

Reads a reference CSV (`backend,variant,kernel,shape,channels,refresh,metric,
cycles`), builds each row's configuration (channel count, refresh on/off)
and the reference simulator's own mapping as a Draft, computes our cycles
and prints ours vs. theirs with the relative error per row.  Exits non-zero
when any row is outside the tolerance.

Kernels: `gemv` (shape `MxN`: M outputs x N inputs), elementwise `add`,
`mul`, `relu` (shape = element count), `attention` (`h{heads}_d{dim}_L{len}`,
AttAcc).  Metrics: `pim` (frame + kernel, operands resident), `readback`
(the host reading the partial results), `nonpim` (the host streaming all
operands from the same memory, no PIM).
"""
from __future__ import annotations

import argparse
import csv
import re
import sys

import jax
import jax.numpy as jnp

from pimjax.hw import get_backend
from pimjax.lower import lower
from pimjax.lower.host_stream import host_stream_program
from pimjax.partition.baselines import baseline
from pimjax.sim.cycles import cycles
from pimjax.trace.frontend import make_graph

KERNELS = {
    "gemv": lambda W, x: W @ x,
    "add": lambda a, b: a + b,
    "mul": lambda a, b: a * b,
    "relu": lambda a: jnp.maximum(a, jnp.zeros((), a.dtype)),
}


def kernel_op(kernel: str, shape: str):
    """(PimOp, graph) of a reference kernel with its CSV shape (fp16)."""
    f16 = jnp.float16
    if kernel == "gemv":
        m, n = (int(v) for v in shape.lower().split("x"))
        args = (jax.ShapeDtypeStruct((m, n), f16), jax.ShapeDtypeStruct((n,), f16))
    elif kernel in ("add", "mul"):
        e = int(shape)
        args = (jax.ShapeDtypeStruct((e,), f16),) * 2
    elif kernel == "relu":
        args = (jax.ShapeDtypeStruct((int(shape),), f16),)
    else:
        raise ValueError(f"unknown kernel {kernel!r}; expected one of {sorted(KERNELS)} or attention")
    graph = make_graph(KERNELS[kernel], *args)
    pim_ops = [op for op in graph.ops if op.kind != "host"]
    if len(pim_ops) != 1:
        raise ValueError(f"{kernel} traced to {len(pim_ops)} ops")
    return pim_ops[0], graph


def backend_for(row: dict):
    name = row["backend"]
    channels = int(row["channels"])
    if name == "hbm-pim":
        return get_backend("hbm-pim", channels=channels)
    if name == "attacc":
        return get_backend("attacc", variant=row["variant"], channels=channels)
    raise ValueError(f"no reference configuration for backend {name!r}")


def our_cycles(row: dict) -> float:
    """Our cycles for one CSV row (in the reference's clock)."""
    refresh = row["refresh"].strip().lower() in ("yes", "true", "1", "on")
    if row["backend"] == "attacc":             # AttAcc builds its simulator's own sequences
        from pimjax.lower import attacc
        program, be = attacc.reference_program(row)
        rep = cycles(program, be, refresh=refresh)
        return float({"pim": rep.kernel_cycles, "readback": rep.readback,
                      "nonpim": rep.total_cycles}[row["metric"]])
    be = backend_for(row)
    op, graph = kernel_op(row["kernel"], row["shape"])
    shapes = {i: v.shape for i, v in enumerate(graph.values)}
    if row["metric"] == "nonpim":
        rep = cycles(host_stream_program(op, be, shapes), be, refresh=refresh)
        return float(rep.total_cycles)
    draft = baseline(op, be)
    resident = tuple(k for k in range(len(op.operands)) if op.operands[k].index_map)
    program = lower(op, draft, be, shapes, resident=resident)
    rep = cycles(program, be, refresh=refresh)
    if row["metric"] == "pim":
        return float(rep.kernel_cycles)
    if row["metric"] == "readback":
        return float(rep.readback)
    raise ValueError(f"unknown metric {row['metric']!r}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", required=True, help="reference CSV (see ../shared/reference/*.csv)")
    ap.add_argument("--tolerance", type=float, default=0.10, help="max relative error per row")
    args = ap.parse_args(argv)
    with open(args.csv) as f:
        rows = list(csv.DictReader(f))
    print(f"{'backend':8} {'variant':10} {'kernel':10} {'shape':18} {'ch':>3} {'ref':>4} "
          f"{'metric':9} {'theirs':>9} {'ours':>9} {'error':>7}")
    worst = 0.0
    failed = 0
    for row in rows:
        theirs = float(row["cycles"])
        ours = our_cycles(row)
        err = (ours - theirs) / theirs
        worst = max(worst, abs(err))
        bad = abs(err) > args.tolerance
        failed += bad
        print(f"{row['backend']:8} {row['variant']:10} {row['kernel']:10} {row['shape']:18} "
              f"{row['channels']:>3} {row['refresh']:>4} {row['metric']:9} {theirs:9.0f} {ours:9.0f} "
              f"{err:+7.1%}{'  <-- outside tolerance' if bad else ''}")
    print(f"\n{len(rows)} rows, worst |error| {worst:.1%}, {failed} outside ±{args.tolerance:.0%}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
