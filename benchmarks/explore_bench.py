"""Design-space exploration throughput: tuned structural points per minute, and what timing variants add.

    .venv/bin/python benchmarks/explore_bench.py [--backend hbm-pim] [--axis channels=8,16,32,64]
                                                 [--shape 4096x4096] [--variants 100] [--processes 1]

`pimjax.explore` of a GEMV y = W x (fp16, the shape given) over the structural points of one
preset option (each point tuned for itself: a fresh Tuner, predict mode), then again with
`--variants` timing variants per point (tRCDRD scaled 1.0 .. 2.0, re-timed on each point's own
programs by `sim.sweep`).  Prints points per minute and the variants' extra time as a ratio,
both timed after a warm-up pass (every point still tuned afresh: a new Tuner each time).
Target (issue #27): 1 000 points of a LLaMA-2-7B decode layer in <= 15 min (>= 67 points / min),
1 000 variants per point in <= 20 % extra time.
"""
from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
from rich.console import Console
from rich.table import Table


def gemv(W, x):
    return W @ x


def main() -> None:
    import pimjax
    from pimjax.dse import grid
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="hbm-pim")
    ap.add_argument("--axis", default="channels=8,16,32,64")
    ap.add_argument("--shape", default="4096x4096")
    ap.add_argument("--variants", type=int, default=100)
    ap.add_argument("--processes", type=int, default=1)
    a = ap.parse_args()
    key, values = a.axis.split("=")
    points = grid(a.backend, **{key: [int(v) for v in values.split(",")]})
    m, n = (int(v) for v in a.shape.split("x"))
    args = (jax.ShapeDtypeStruct((m, n), jnp.float16), jax.ShapeDtypeStruct((n,), jnp.float16))
    # a first pass fills the process's first-use caches (XLA, numba, draft tables): both timed
    # passes below then see the same warm process, so their difference is the variants
    pimjax.explore(gemv, *args, backends=points, progress=False, processes=a.processes)
    t0 = time.perf_counter()
    pimjax.explore(gemv, *args, backends=points, progress=False, processes=a.processes)
    tuned = time.perf_counter() - t0
    timings = {}
    for label, be in points.items():
        t = be.timing
        timings[label] = [t.replace(tRCDRD=float(t.tRCDRD) * (1.0 + i / max(1, a.variants - 1)))
                          for i in range(a.variants)]
    t0 = time.perf_counter()
    df = pimjax.explore(gemv, *args, backends=points, timings=timings, progress=False, processes=a.processes)
    both = time.perf_counter() - t0
    tab = Table(title=f"explore: {a.backend} {a.axis}, GEMV {a.shape}, {a.processes} process(es)")
    for col in ("points", "tuned s", "points / min", f"+ {a.variants} variants / point s", "variants' extra",
                "rows"):
        tab.add_column(col, justify="right")
    k = len(points)
    tab.add_row(str(k), f"{tuned:.1f}", f"{60 * k / tuned:.1f}", f"{both:.1f}", f"{both / tuned - 1:+.0%}",
                str(len(df)))
    Console().print(tab)


if __name__ == "__main__":
    main()
