"""How far the cost model's closed-form estimates are from the simulator.

    python experiments/estimate_spread.py [--cache DIR] [--backend NAME|all] [--out DIR]

Reads the labelled training records of the cost model (`--cache`, the JSON
lines `python -m pimjax.costmodel.train` writes: every draft with its
simulated total and phase cycles), featurises them, and compares each
phase's closed-form estimate (`est_t_rearr`, `est_t_compute`,
`est_t_readback`, `est_t_merge`, `est_t_total`; features.py) with the
simulated cycles.  Per backend and phase:

  spread   within-shape standard deviation of ln(simulated / estimated)
           (root mean of the per-shape variances): what matters for ranking
           the drafts of one op; a constant factor per shape does not count
  median   median simulated / estimated over all drafts (the scale error)
  exact    share of drafts whose estimate is within 0.1 % of the simulator
  picks    share of shapes where the draft with the smallest estimated
           total is optimal among the labelled drafts (less than one cycle
           slower) -- the estimate used alone as a predictor

This is why UPMEM's model is a residual over its estimate (dpu.py mirrors
the simulator: spread ~0, picks 100 %) and the DRAM backends' are not
(their estimates are rooflines and counts: median scale 1.3-8x, within-shape
spread 0.2-0.8 per phase; the table is in pimjax/costmodel/README.md).
Writes <out>/estimate_spread.json.  Exits 2 when no labelled record is found.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from pimjax.costmodel.evaluate import TIE_CYCLES  # noqa: E402  (less than one cycle slower is optimal)

PHASES = ("rearr", "compute", "readback", "merge")    # the est_t_* feature suffixes
EXACT = 1e-3        # |ln(sim / est)| below this counts as exact


def spread(sim: np.ndarray, est: np.ndarray, group: np.ndarray) -> dict:
    """Agreement of estimated and simulated cycles of one phase.

    sim, est: [n] cycles (drafts where either is <= 0 are left out: a phase
    the draft does not have); group: [n] shape id of each draft.
    Returns {"drafts", "spread", "median", "exact"} (NaN when no draft has
    the phase); `spread` over shapes with at least two such drafts."""
    sim, est, group = (np.asarray(a) for a in (sim, est, group))
    ok = (sim > 0) & (est > 0)
    if not ok.any():
        return {"drafts": 0, "spread": float("nan"), "median": float("nan"), "exact": float("nan")}
    lr = np.log(sim[ok] / est[ok])
    g = group[ok]
    var = [np.var(lr[g == k]) for k in np.unique(g) if np.count_nonzero(g == k) > 1]
    return {"drafts": int(ok.sum()), "spread": float(np.sqrt(np.mean(var))) if var else float("nan"),
            "median": float(np.exp(np.median(lr))), "exact": float(np.mean(np.abs(lr) < EXACT))}


def picks(sim_total: np.ndarray, est_total: np.ndarray, group: np.ndarray) -> float:
    """Share of shapes whose smallest estimated total is optimal among the
    labelled drafts (sim_total, est_total, group: [n])."""
    sim_total, est_total, group = (np.asarray(a) for a in (sim_total, est_total, group))
    hits = []
    for k in np.unique(group):
        s, e = sim_total[group == k], est_total[group == k]
        hits.append(s[np.argmin(e)] - s.min() < TIE_CYCLES)
    return float(np.mean(hits)) if hits else float("nan")


def backend_report(records: list[dict], backend) -> dict | None:
    """Per-phase `spread` and the estimate's `picks` of one backend's labelled
    records (None when there are none)."""
    from pimjax.costmodel.dataset import featurise
    from pimjax.costmodel.features import FEATURE_NAMES

    X, y, g, keys, P = featurise(records, backend, phases=True)
    if len(y) == 0:
        return None
    names = list(FEATURE_NAMES)
    est = lambda c: 2.0 ** X[:, names.index(c)].astype(np.float64) - 1.0    # noqa: E731 (features are log2(1 + x))
    out = {"drafts": int(len(y)), "shapes": len(keys)}
    for j, ph in enumerate(PHASES):
        out[ph] = spread(P[:, j], est(f"est_t_{ph}"), g)
    out["total"] = spread(y, est("est_t_total"), g)
    out["picks"] = picks(y, est("est_t_total"), g)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", default=os.environ.get("PIMJAX_COSTMODEL_CACHE", "/tmp/costmodel"),
                    help="directory of records-<backend>.jsonl (the training label cache)")
    ap.add_argument("--backend", default="all", help="comma list of backends, or all")
    ap.add_argument("--out", default=os.path.join(HERE, "out"))
    args = ap.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    from pimjax.costmodel.dataset import read_records, records_path
    from pimjax.hw.presets import get_backend

    names = ("hbm-pim", "attacc", "newton", "upmem") if args.backend == "all" else \
        tuple(b.strip() for b in args.backend.split(","))
    console = Console(width=max(120, Console().width))
    reports = {}
    for name in names:
        backend = get_backend(name)          # an unknown name fails here, before any work
        path = records_path(name, args.cache)
        if not os.path.exists(path):
            console.print(f"{name}: no label cache at {path} (python -m pimjax.costmodel.train --cache ...)")
            continue
        console.print(f"{name}: featurising {path} ...")
        rep = backend_report(read_records(path), backend)
        if rep is not None:
            reports[name] = rep
    if not reports:
        console.print("no labelled records found")
        return 2
    table = Table(title="closed-form estimates vs the simulator (training labels)")
    for col in ("backend", "drafts", "shapes", "phase", "spread", "median sim/est", "exact", "est picks optimum"):
        table.add_column(col, justify="right")
    for name, rep in reports.items():
        for ph in PHASES + ("total",):
            s = rep[ph]
            table.add_row(name, str(rep["drafts"]), str(rep["shapes"]), ph, f"{s['spread']:.3f}",
                          f"{s['median']:.2f}", f"{100 * s['exact']:.0f} %",
                          f"{100 * rep['picks']:.0f} %" if ph == "total" else "")
    console.print(table)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "estimate_spread.json"), "w") as f:
        json.dump(reports, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
