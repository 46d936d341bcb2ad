"""DCC's Fig. 6, 7 and 9 under the paper's configuration: DCC's own simulator.

The notebooks `dcc_fig6_fig7_kernels` and `dcc_fig9_batch` run their cases under the default
(vendor-validated) configurations live; under the "dcc" configurations
(`get_backend("attacc" / "hbm-pim", simulator="dcc")`, DCC's Ramulator2 forks on one HBM3 cube,
`docs/dcc-simulator.md`) the same cases take a few minutes (the tuner lowers and times every
candidate it verifies through the fork), so this script measures them once and
`experiments/data/dcc_figures_dccsim.json` holds the rows; the notebooks read it.

Each case is `dcc_figures.run_case_dcc`: the shipped predict-mode tuner's program on the "dcc"
configuration beside DCC's baseline (AttAcc's mapping in DCC's notation) timed by the same fork,
DCC's choice the faster of the two; the GPU is DCC's GPU model (`dcc_figures.dcc_gpu()`).  ATTN is
timed on the port's fused-attention generator directly (`dcc_figures._run_attn_dcc`); RELU (no generator
ported) gives rows with NaN figures and the reason.

    PYTHONPATH=$PWD python experiments/dcc_figures_dccsim.py              # print the cached tables
    PYTHONPATH=$PWD python experiments/dcc_figures_dccsim.py --recompute  # measure (~10 min on 2 cores)
    PYTHONPATH=$PWD python experiments/dcc_figures_dccsim.py --recompute --only fig8   # Fig. 8's rows (~6 min)
    PYTHONPATH=$PWD python experiments/dcc_figures_dccsim.py --recompute --only red   # one kernel

`load()` returns {"fig6": DataFrame, "fig7": ..., "fig9": ..., "fig6_grid": ..., "fig7_grid": ...,
"fig8_gemv": ...} of the cached rows ("fig8_gemv": `dcc_fig8_artifact.fig8_gemv_cases`, the per-cube QKV and
projection GEMVs of DCC's Fig. 8 on the "dcc" AttAcc configuration; "fig8_attention": its attention on DCC's
fork, `dcc_fig8_artifact.fig8_attention_rows`; "fig8_e2e" / "fig8_e2e_free": Fig. 8 the artifact's way on them,
`experiments/dcc_fig8_artifact.fig8`, with that attention / the attention free).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data", "dcc_figures_dccsim.json")
FIGURES = {"fig6": ("attacc",), "fig7": ("hbm-pim",), "fig9": ("attacc", "hbm-pim"),
           "fig6_grid": ("attacc",), "fig7_grid": ("hbm-pim",)}
"""figure -> the backends its cases run on (in `cases` order); "_grid": the artifact's own case grid
(`dcc_figures.artifact_grid`), for the paper's averages."""


def cases(figure: str) -> list[tuple]:
    """(kernel, batch, size) of `figure`: the notebooks' own cases (`dcc_figures.fig6_cases` ...), or
    the artifact's grid (`dcc_figures.artifact_grid`) for "fig6_grid" / "fig7_grid"."""
    from experiments import dcc_figures as dcc
    return {"fig6": dcc.fig6_cases, "fig7": dcc.fig7_cases, "fig9": dcc.fig9_cases,
            "fig6_grid": lambda: dcc.artifact_grid("fig6"), "fig7_grid": lambda: dcc.artifact_grid("fig7")}[figure]()


def _clean(row: dict) -> dict:
    """JSON-safe: NaN -> None, numpy scalars -> Python."""
    out = {}
    for k, v in row.items():
        if hasattr(v, "item"):
            v = v.item()
        out[k] = None if isinstance(v, float) and math.isnan(v) else v
    return out


def measure(only: str | None = None, log=print) -> dict:
    """Run every case of every figure under the "dcc" configurations (a case shared by two figures
    is run once); the cache's content: {"rows": {figure: [row, ...]}, "seconds": ...}.
    only: a kernel name, to run that kernel's cases alone (the others are left out)."""
    from experiments import dcc_fig8_artifact as a8
    from experiments import dcc_figures as dcc
    from pimjax.search import Tuner
    tuner = Tuner()
    systems = {b: dcc.dcc_system(b) for b in ("attacc", "hbm-pim")}
    done: dict = {}
    out: dict = {}
    t0 = time.perf_counter()
    for fig, backends in FIGURES.items():
        out[fig] = []
        for b in backends:
            for k, batch, size in cases(fig):
                if only and k != only:      # (only="fig8": none of these)
                    continue
                key = (b, k, batch, size)
                if key not in done:
                    t = time.perf_counter()
                    done[key] = _clean(dcc.run_case_dcc(systems[b], k, batch, size, tuner))
                    done[key]["wall_s"] = round(time.perf_counter() - t, 2)
                    r = done[key]
                    ran = r["pim_ns"] is not None
                    log(f"  {b} {k} b{batch} {size}: " + (f"ours {r['pim_ns']:.0f} ns, DCC baseline {r['base_ns']:.0f} ns, "
                        f"GPU {r['gpu_ns']:.0f} ns" if ran else r["note"]) + f"  ({time.perf_counter() - t0:.0f} s)")
                out[fig].append(done[key])
    if not only or only == "fig8":
        out["fig8_gemv"] = []
        for case in a8.fig8_gemv_cases():
            r = _clean(a8.run_fig8_gemv(systems["attacc"], case, tuner))
            log(f"  fig8 {r['model']} b{r['batch']} {r['phase']} {r['dcc_shape']}: PIM {r['pim_ns']:.0f} ns "
                f"(tuner {r['tuned_ns']:.0f}, search {r['search_ns']:.0f} {r['search_tiling']}), "
                f"GPU (artifact) {r['gpu_artifact_ns']:.0f} ns  ({time.perf_counter() - t0:.0f} s)")
            out["fig8_gemv"].append(r)
        out["fig8_attention"] = [_clean(r) for r in a8.fig8_attention_rows(log)]
        # Fig. 8 the artifact's way on those kernels, and with the attention left out (free): an upper bound
        from experiments.dcc_fig8_artifact import fig8
        out["fig8_e2e"] = [_clean(r) for r in fig8(out["fig8_gemv"], out["fig8_attention"]).to_dict("records")]
        out["fig8_e2e_free"] = [_clean(r) for r in fig8(out["fig8_gemv"]).to_dict("records")]
        log(f"  fig8 end to end  ({time.perf_counter() - t0:.0f} s)")
    return {"rows": out, "seconds": round(time.perf_counter() - t0, 1),
            "configuration": {b: f"{s.name}/{s.variant}, host {s.system.host.name}" for b, s in systems.items()}}


def load(path: str = DATA) -> dict:
    """{figure: DataFrame of its cached rows} (NaN where a kernel has no trace)."""
    import pandas as pd
    with open(path) as f:
        data = json.load(f)
    kinds = {"pim_ns": float, "base_ns": float, "dcc_vs_base": float, "dcc_vs_gpu": float, "base_vs_gpu": float,
             "dcc_own_ns": float}
    out = {}
    for fig, rows in data["rows"].items():
        df = pd.DataFrame(rows)
        out[fig] = df.astype({k: v for k, v in kinds.items() if k in df.columns})   # None (no trace) -> NaN
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--recompute", action="store_true", help="measure and rewrite the cache")
    ap.add_argument("--only", help="with --recompute: one kernel's cases (gemv, red, va, ...), not written; or "
                    "fig8: Fig. 8's GEMVs alone, written into the existing cache")
    ap.add_argument("--out", default=DATA, help="the cache to write (default experiments/data/...)")
    args = ap.parse_args(argv)
    if args.recompute:
        data = measure(args.only)
        if args.only == "fig8" and os.path.exists(args.out):    # refresh Fig. 8's rows in the cache
            with open(args.out) as f:
                old = json.load(f)
            for k in ("fig8_gemv", "fig8_attention", "fig8_e2e", "fig8_e2e_free"):
                old["rows"][k] = data["rows"][k]
            data = old
        if not args.only or args.only == "fig8":
            with open(args.out, "w") as f:
                json.dump(data, f, indent=1)
            print(f"wrote {args.out} ({data['seconds']} s)")
    import pandas as pd
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        for fig, df in load(args.out if not args.only else DATA).items() if os.path.exists(args.out) else ():
            print(fig)
            if fig == "fig8_attention":
                continue
            if fig.startswith("fig8_e2e"):
                print(df.filter(regex="model|batch|lin|lout|speedup").round(3).to_string())
                continue
            cols = (["model", "batch", "phase", "dcc_shape", "pim_ns", "gpu_artifact_ns", "dcc_vs_gpu_artifact"]
                    if fig == "fig8_gemv" else ["backend", "kernel", "batch", "size", "pim_ns", "base_ns", "gpu_ns",
                                                "dcc_own_ns", "dcc_vs_base", "dcc_vs_gpu"])
            print(df[cols].round(3).to_string())
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(HERE))
    sys.exit(main())
