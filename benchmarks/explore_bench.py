"""Design-space exploration throughput: tuned structural points per minute, and what timing variants add.

    .venv/bin/python benchmarks/explore_bench.py [--backend hbm-pim] [--axis channels=8,16,32,64 ...]
                                                 [--core n_input_regs=4,8 ...] [--every N]
                                                 [--shape 4096x4096 | --model llama2-7b [--context 2048]]
                                                 [--variants 100] [--vary tRCDRD] [--processes 1]
                                                 [--warmup all|first] [--profile OUT.prof]

`pimjax.explore` of a GEMV y = W x (fp16, the shape given), or with `--model` of one decoder layer of
that model (`pimjax.models.layers`, batch 1, a decode step at `--context` tokens), over the structural
points of the product of preset options (`--axis`, repeated) and `Core` fields (`--core`), each point
tuned for itself (a fresh Tuner, predict mode), then again
with `--variants` timing variants per point (`--vary`, default tRCDRD, scaled 1.0 .. 2.0, re-timed on
each point's own programs by `sim.sweep`; 0: skipped).  Prints points per minute (wall clock, and the process's CPU
time, which other jobs on a shared machine disturb less) and the variants' extra time as a ratio
(the variants pass's wall clock less the tuned pass's; and, with one process, the variants' own work
-- `dse._timing_rows`: stacking, the sweep, the rows -- timed in process, which the re-tuning's
run-to-run spread does not blur),
both timed after a warm-up pass (every point still tuned afresh: a new Tuner each time) over every
point (`--warmup all`) or over the first only (`first`: the others unseen, as in a sweep), then the
first point with its variants (the sweep's first-use compiles, paid once per process).  `--profile` writes cProfile stats of the tuned pass.
Target (issue #27): 1 000 points of a LLaMA-2-7B decode layer in <= 15 min (>= 67 points / min),
1 000 variants per point in <= 20 % extra time.
"""
from __future__ import annotations

import argparse
import os
import time
import warnings

import jax
import jax.numpy as jnp
from rich.console import Console
from rich.table import Table


def gemv(W, x):
    return W @ x


def model_layer(params, x, k_cache, v_cache, pos):
    """The decoder layer of the model named by $PIMJAX_BENCH_MODEL (module level, with the layer's own
    argument names, so that `processes=N`'s spawned workers import it and residency sees the names)."""
    import os

    from pimjax.models.configs import get_config
    from pimjax.models.layers import make_layer
    return make_layer(get_config(os.environ["PIMJAX_BENCH_MODEL"]))(params, x, k_cache, v_cache, pos)


def _llama_layer(name: str, context: int):
    import os

    from pimjax.models.configs import get_config
    from pimjax.models.layers import layer_shapes
    os.environ["PIMJAX_BENCH_MODEL"] = name          # read by model_layer, here and in spawned workers
    return model_layer, layer_shapes(get_config(name), 1, context)


def _values(spec: str) -> tuple[str, list]:
    key, values = spec.split("=")
    return key, [int(v) if v.isdigit() else v for v in values.split(",")]


def structural_grid(backend: str, axes: list[str], core: list[str]) -> dict:
    """{label: Backend}: the product of preset options `axes` ("key=v1,v2") and of `Core` fields `core`
    ("field=v1,v2", set with `Core.replace` on each preset point)."""
    import itertools

    from pimjax.studies.dse import grid
    base = grid(backend, **dict(_values(x) for x in axes))
    fields = [_values(x) for x in core]
    out = {}
    for label, be in base.items():
        for combo in itertools.product(*(v for _, v in fields)):
            changes = {k: v for (k, _), v in zip(fields, combo)}
            tag = ",".join(f"{k}={v}" for k, v in changes.items())
            out[f"{label},{tag}" if tag else label] = be.replace(core=be.core.replace(**changes)) if changes else be
    return out


def main() -> None:
    import pimjax
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="hbm-pim")
    ap.add_argument("--axis", action="append", default=None,
                    help="a preset option and its values, e.g. stacks=1,2,4; repeat for a grid (default "
                         "channels=8,16,32,64)")
    ap.add_argument("--core", action="append", default=[],
                    help="a `Core` field and its values, e.g. n_input_regs=4,8,16 (AttAcc's GEMV buffer "
                         "entries); crossed with the --axis grid")
    ap.add_argument("--every", type=int, default=1, help="keep every n-th point of the grid (a sample of it)")
    ap.add_argument("--shape", default="4096x4096")
    ap.add_argument("--model", default=None, help="a pimjax.models config: explore its decoder layer")
    ap.add_argument("--context", type=int, default=2048)
    ap.add_argument("--variants", type=int, default=100)
    ap.add_argument("--vary", default="tRCDRD",
                    help="the Timing field the variants scale 1.0 .. 2.0 (a stream whose records never read it "
                         "is timed once for all variants: tRP / tFAW, which every row opening reads, show the "
                         "engine without that saving)")
    ap.add_argument("--processes", type=int, default=1)
    ap.add_argument("--profile", default=None)
    ap.add_argument("--warmup", choices=("all", "first"), default="all")
    a = ap.parse_args()
    points = structural_grid(a.backend, a.axis or ["channels=8,16,32,64"], a.core)
    points = dict(list(points.items())[::a.every])
    if a.model:
        fn, args = _llama_layer(a.model, a.context)
        what = f"{a.model} decode layer (L {a.context})"
        warnings.simplefilter("ignore")          # the layer's float32 norms' PrecisionWarning, once per point
        os.environ["PYTHONWARNINGS"] = "ignore"  # and in `processes=N`'s spawned workers
    else:
        m, n = (int(v) for v in a.shape.split("x"))
        fn, args = gemv, (jax.ShapeDtypeStruct((m, n), jnp.float16), jax.ShapeDtypeStruct((n,), jnp.float16))
        what = f"GEMV {a.shape}"
    # a first pass fills the process's first-use caches (XLA, numba): "all" over every point, so that
    # both timed passes see the same warm process and their difference is the variants; "first" over
    # the first point only, so that the tuned pass meets the other points unseen (as a sweep of new
    # points does: per-op caches such as the core tiles of (op, draft) stay cold for them)
    warm = points if a.warmup == "all" else dict([next(iter(points.items()))])
    pimjax.explore(fn, *args, backends=warm, progress=False)
    timings = {}
    for label, be in points.items():
        t = be.timing
        timings[label] = [t.replace(**{a.vary: float(getattr(t, a.vary)) * (1.0 + i / max(1, a.variants - 1))})
                          for i in range(a.variants)]
    if a.variants:      # and the sweep's first-use compiles (its combine at the batch sizes of V variants), once
        first = next(iter(points))
        pimjax.explore(fn, *args, backends={first: points[first]}, timings={first: timings[first]}, progress=False)
    prof = None
    if a.profile:
        import cProfile
        prof = cProfile.Profile()
        prof.enable()
    t0, c0 = time.perf_counter(), time.process_time()
    pimjax.explore(fn, *args, backends=points, progress=False, processes=a.processes)
    tuned, cpu = time.perf_counter() - t0, time.process_time() - c0
    if prof is not None:
        prof.disable()
        prof.dump_stats(a.profile)
    both, rows = float("nan"), len(points)
    if a.variants:
        # the variants' own work (stacking, `sim.sweep`, the rows), timed in process: the pass's wall
        # clock less the tuned pass's also holds the re-tuning's run-to-run spread (+-10 % on a loaded box)
        import pimjax.studies.dse as dse
        real, own = dse._timing_rows, [0.0]

        def timed_rows(*args_, **kw):
            t1 = time.perf_counter()
            out = real(*args_, **kw)
            own[0] += time.perf_counter() - t1
            return out
        dse._timing_rows = timed_rows
        t0 = time.perf_counter()
        try:
            df = pimjax.explore(fn, *args, backends=points, timings=timings, progress=False, processes=a.processes)
        finally:
            dse._timing_rows = real
        both, rows = time.perf_counter() - t0, len(df)
    axes = " × ".join((a.axis or ["channels=8,16,32,64"]) + a.core)
    vary = f", variants of {a.vary}" if a.variants else ""
    tab = Table(title=f"explore: {a.backend} {axes}, {what}, {a.processes} process(es){vary}")
    for col in ("points", "tuned s", "points / min", "s / point", "CPU s / point",
                f"+ {a.variants} variants s", "variants' extra", "variants' own s / point", "own / tuned", "rows"):
        tab.add_column(col, justify="right")
    k = len(points)
    # with worker processes the parent's CPU time is not the work's: shown only for one process
    cpu_pp = f"{cpu / k:.2f}" if a.processes == 1 else "—"
    # with worker processes the variants' own time is spent in the workers: shown only for one process
    own_pp = f"{own[0] / k:.3f}" if a.variants and a.processes == 1 else "—"
    own_ratio = f"{own[0] / tuned:+.0%}" if a.variants and a.processes == 1 else "—"
    tab.add_row(str(k), f"{tuned:.1f}", f"{60 * k / tuned:.1f}", f"{tuned / k:.2f}", cpu_pp,
                f"{both:.1f}", f"{both / tuned - 1:+.0%}" if a.variants else "—", own_pp, own_ratio, str(rows))
    Console().print(tab)


if __name__ == "__main__":
    main()
