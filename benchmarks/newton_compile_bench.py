"""Compile-time speed on the Newton family (issue #41): three measures, side by side in one run.

    .venv/bin/python benchmarks/newton_compile_bench.py [--layer b14.project] [--all-layers]
                                                        [--skip-full] [--skip-llama] [--skip-cnn]
                                                        [--context 2048] [--cold-caches]

(1) `Tuner(mode="exhaustive").choose` of one MobileNet-V2 1 x 1 convolution
(`pimjax.models.cnn.cnn_layers("mobilenet-v2")`, the layer traced alone as
`pimjax.studies.pimflow.layer_op` does) on Newton++ (`newton_config("newton++",
channels=16, total_channels=32)`): the full search (`EXHAUSTIVE_BOUND =
False`: every draft lowered and simulated) next to the branch and bound
over `backends/newton/bounds.py` -- the same draft and cycles (checked),
seconds cold (the first search of the process: numba / XLA loading, the
lowering's per-shape caches) and warm (a fresh Tuner, nothing reused but
the process's compiled code).  `--all-layers` also runs the pruned search
on every 1 x 1 convolution of the model (warm).

(2) `pim_jit(make_layer(get_config("llama2-7b")), backend="newton")` of one
decoder layer (batch 1, a decode step at `--context` tokens;
ShapeDtypeStruct arguments), `.lower(...).compile()`: the default tuner
(predict mode, the shipped cost model), the default placement ("auto": on
newton's 32-channel memory PIMFlow's GPU / PIM / MD-DP modes, every GEMV's
nine shares tuned).

(3) `pim_jit(cnn.make_apply(mobilenet-v2 @ 224), backend=Newton++,
placement="auto")`, `.lower(params, x).compile()` (ShapeDtypeStructs).

(2) and (3) each run in a fresh process ("cold": an empty tuning cache,
nothing of (1) reused); the numba on-disk caches of pimjax's compiled
loops and the XLA persistent cache (`pimjax.api.enable_xla_cache`) are as
the machine has them -- warm after any earlier run -- unless
`--cold-caches`, which points both at empty temporary directories (numba
then compiles every loop the run reaches: minutes).  Printed: wall seconds
of the stages and the process's CPU seconds (user + sys, every thread:
the figure to compare on a loaded box).

Targets (issue #41): (1) the same optimum, pruned ≤ 5 s warm; (2) ≤ 60 s
cold; (3) ≤ 5 min cold.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)        # this checkout's pimjax (and experiments/), not an installed one
NEWTON_PP = dict(channels=16, total_channels=32)


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _layer(name: str):
    from pimjax.models.cnn import cnn_layers
    from pimjax.studies.pimflow import layer_op
    t = cnn_layers("mobilenet-v2")
    rows = t[t.name == name]
    if rows.empty:
        raise SystemExit(f"no layer {name!r} in mobilenet-v2 (1 x 1 convolutions: "
                         f"{', '.join(t[(t.K == 1) & (t.kind == 'conv')].name)})")
    return layer_op(rows.iloc[0])


def exhaustive(layer: str, full: bool, all_layers: bool) -> list[dict]:
    """(1): rows of the exhaustive searches of `layer` (and every 1 x 1 layer)."""
    import pimjax.search.strategy as S
    import pimjax.search.tuner as T
    from pimjax.hw.presets import newton_config
    from pimjax.models.cnn import cnn_layers
    be = newton_config("newton++", **NEWTON_PP)
    op, shapes = _layer(layer)

    def run(bound: bool):
        S.EXHAUSTIVE_BOUND = bound
        t0, c0 = time.perf_counter(), _cpu()
        c = T.Tuner(mode="exhaustive").choose(op, be, shapes)
        return c, time.perf_counter() - t0, _cpu() - c0

    rows = []
    cold, s_cold, cpu_cold = run(True)
    warm, s_warm, cpu_warm = run(True)
    for label, c, s, cpu in (("branch and bound, cold", cold, s_cold, cpu_cold),
                             ("branch and bound, warm", warm, s_warm, cpu_warm)):
        rows.append(dict(layer=layer, search=label, space=c.space, simulated=c.simulated, pruned=c.pruned,
                         seconds=s, cpu=cpu, cycles=float(c.report.total_cycles), draft=str(c.draft)))
    if full:
        f, s, cpu = run(False)
        rows.insert(0, dict(layer=layer, search="full (every draft)", space=f.space, simulated=f.simulated,
                            pruned=f.pruned, seconds=s, cpu=cpu, cycles=float(f.report.total_cycles),
                            draft=str(f.draft)))
        same = f.draft == warm.draft and float(f.report.total_cycles) == float(warm.report.total_cycles)
        for r in rows:
            r["same"] = same
    if all_layers:
        t = cnn_layers("mobilenet-v2")
        for name in t[(t.K == 1) & (t.kind == "conv")].name:
            if name == layer:
                continue
            op, shapes = _layer(name)
            S.EXHAUSTIVE_BOUND = True
            t0, c0 = time.perf_counter(), _cpu()
            c = T.Tuner(mode="exhaustive").choose(op, be, shapes)
            rows.append(dict(layer=name, search="branch and bound, warm", space=c.space, simulated=c.simulated,
                             pruned=c.pruned, seconds=time.perf_counter() - t0, cpu=_cpu() - c0,
                             cycles=float(c.report.total_cycles), draft=str(c.draft)))
    S.EXHAUSTIVE_BOUND = True
    return rows


def child(what: str, context: int) -> dict:
    """(2) or (3) in this (fresh) process: wall seconds of lower() and compile()."""
    t0, c0 = time.perf_counter(), _cpu()
    import pimjax
    if what == "llama":
        from pimjax.models.configs import get_config
        from pimjax.models.layers import layer_shapes, make_layer
        cfg = get_config("llama2-7b")
        f = pimjax.pim_jit(make_layer(cfg), backend="newton")
        args = layer_shapes(cfg, 1, context)
    else:
        from pimjax.hw.presets import newton_config
        from pimjax.models import cnn
        cfg = cnn.get_cnn_config("mobilenet-v2", 224)
        f = pimjax.pim_jit(cnn.make_apply(cfg), backend=newton_config("newton++", **NEWTON_PP), placement="auto")
        args = (cnn.param_shapes(cfg), cfg.input_spec())
    t1 = time.perf_counter()
    lowered = f.lower(*args)
    t2 = time.perf_counter()
    compiled = lowered.compile()
    t3 = time.perf_counter()
    ca = compiled.cost_analysis()
    placements = {}
    for o in ca["ops"]:
        placements[o["placement"]] = placements.get(o["placement"], 0) + 1
    return dict(what=what, imports=t1 - t0, lower=t2 - t1, compile=t3 - t2, total=t3 - t1, cpu=_cpu() - c0,
                total_ns=float(ca["total_ns"]), placements=placements,
                simulated=int(sum(p.choice.simulated for p in compiled.plans if p.choice is not None)))


def fresh(what: str, context: int, cold_caches: bool) -> dict:
    """`child(what)` in a new process (JSON on its last stdout line)."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    tmp = None
    if cold_caches:
        tmp = tempfile.mkdtemp(prefix="pimjax-cold-")
        env.update(NUMBA_CACHE_DIR=os.path.join(tmp, "numba"), PIMJAX_CACHE_DIR=tmp)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", what, "--context", str(context)],
                         env=env, capture_output=True, text=True, cwd=ROOT)
    if out.returncode:
        raise SystemExit(f"{what} failed:\n{out.stderr[-4000:]}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["process"] = time.perf_counter() - t0
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layer", default="b14.project", help="the 1 x 1 convolution of (1)")
    ap.add_argument("--all-layers", action="store_true", help="(1) pruned on every 1 x 1 convolution too")
    ap.add_argument("--skip-full", action="store_true", help="(1) without the full search")
    ap.add_argument("--skip-llama", action="store_true")
    ap.add_argument("--skip-cnn", action="store_true")
    ap.add_argument("--context", type=int, default=2048, help="(2)'s decode-step context length")
    ap.add_argument("--cold-caches", action="store_true", help="(2), (3) with empty numba and XLA disk caches")
    ap.add_argument("--child", choices=("llama", "cnn"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.context)))
        return 0
    from rich.console import Console
    from rich.table import Table
    console = Console(width=200)
    # (2) and (3) first, while this process has imported nothing heavy
    runs = []
    if not args.skip_llama:
        runs.append(("LLaMA-2 7B decoder layer, pim_jit on newton", fresh("llama", args.context, args.cold_caches),
                     60.0))
    if not args.skip_cnn:
        runs.append(("MobileNet-V2 224², pim_jit on Newton++, placement auto", fresh("cnn", args.context,
                                                                                   args.cold_caches), 300.0))
    rows = exhaustive(args.layer, not args.skip_full, args.all_layers)

    tab = Table(title="(1) exhaustive tuning of a MobileNet-V2 1 x 1 convolution on Newton++")
    for c in ("layer", "search", "drafts", "simulated", "pruned", "s (wall)", "s (CPU)", "cycles", "same optimum"):
        tab.add_column(c, justify="left" if c in ("layer", "search") else "right")
    for r in rows:
        tab.add_row(r["layer"], r["search"], f"{r['space']:,}", f"{r['simulated']:,}", f"{r['pruned']:,}",
                    f"{r['seconds']:.2f}", f"{r['cpu']:.2f}", f"{r['cycles']:,.3f}",
                    "" if "same" not in r else ("yes" if r["same"] else "NO"))
    console.print(tab)
    if rows:
        console.print(f"chosen ({rows[0]['layer']}): {rows[0]['draft']}")
    caches = "empty numba / XLA disk caches" if args.cold_caches else "numba / XLA disk caches as found (warm)"
    tab = Table(title=f"(2), (3) pim_jit compile, each in a fresh process, empty tuning cache; {caches}")
    for c in ("function", "imports s", "lower() s", "compile() s", "lower + compile s", "CPU s", "target",
              "drafts simulated", "placements", "total ns"):
        tab.add_column(c, justify="left" if c in ("function", "placements") else "right")
    for name, r, target in runs:
        ok = "✓" if r["total"] <= target else "✗"
        tab.add_row(name, f"{r['imports']:.1f}", f"{r['lower']:.1f}", f"{r['compile']:.1f}", f"{r['total']:.1f}",
                    f"{r['cpu']:.1f}", f"≤ {target:.0f} s {ok}", f"{r['simulated']:,}",
                    ", ".join(f"{k} {v}" for k, v in sorted(r["placements"].items())), f"{r['total_ns']:,.0f}")
    console.print(tab)
    import pimjax
    console.print(f"pimjax from {os.path.dirname(pimjax.__file__)}; load average at the end: "
                  f"{os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
