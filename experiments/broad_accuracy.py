"""Predicted against simulated cycles on the broad held-out set (issue #29).

    python experiments/broad_accuracy.py [--backend NAME,...] [--weights DIR] [--per-case 4]

The cases are `costmodel.broad.broad_cases("heldout")`: LLaMA-2 13B / 33B /
70B GEMVs (up to 28 672 x 8 192), decode attention, elementwise ops and
VGG-16 convolutions, on each preset and on structural variants never
trained on (each family's `TrainingShapes.heldout_hw`, `broad.variants`).  Their draft spaces are too large to
simulate exhaustively here, so per case `--per-case` uniformly random
drafts plus the two the closed-form estimate ranks best are labelled
(seeded: the same drafts every run, whichever weights are judged), cached
as JSON lines under --cache (`broad-heldout-<backend>.jsonl`).

Per backend x kernel, split into the preset and its variants: MAPE of the
predicted cycles over the labelled drafts, the share of drafts whose
simulated cycles fall inside the predicted +-2 sigma band (the ensemble
spread, `Predictor.predict_full`), the share flagged as extrapolating, and
"sample top-1": cases whose predicted best among the labelled drafts is
their simulated best.  Writes experiments/out/broad_accuracy.json (every
draft's predicted and simulated cycles, what the notebook plots).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))


def label_heldout(name: str, cache: str, per_case: int, progress=None) -> list[dict]:
    """Labelled records of the held-out broad cases of backend `name`."""
    from pimjax.costmodel import dataset as ds
    from pimjax.costmodel.broad import broad_cases
    from pimjax.hw.presets import get_backend
    cases = [(c["kernel"], tuple(c["shape"]), c["hw"]) for c in broad_cases("heldout") if c["backend"] == name]
    plan = ds.Plan(random_per_case=per_case, estimate_per_case=2, dense_drafts=per_case)
    path = os.path.join(cache, f"broad-heldout-{name}.jsonl")
    return ds.generate(get_backend(name), cases, plan, seed=29, path=path, progress=progress)


def evaluate(name: str, records: list[dict], model) -> list[dict]:
    """Per labelled draft: case key, kernel, variant flag, simulated and
    predicted cycles, the spread and the extrapolation flag."""
    from pimjax.costmodel import dataset as ds
    from pimjax.hw.presets import get_backend
    X, y, g, keys = ds.featurise(records, get_backend(name))
    full = model.predict_full(X) if hasattr(model, "predict_full") else None
    pred = full["cycles"] if full is not None else model.predict(X)
    # the records in featurise's order (by case key, then file order), for their draft rows
    by_case: dict = {}
    for r in records:
        if r.get("cycles") is not None and r["backend"] == name:
            by_case.setdefault(ds._case_key(name, r["kernel"], r["shape"], r.get("hw")), []).append(r)
    ordered = [r for _, rs in sorted(by_case.items()) for r in rs]
    assert len(ordered) == len(y)
    out = []
    for i in range(len(y)):
        key = keys[g[i]]
        parts = key.split("|")
        out.append({"backend": name, "kernel": parts[1], "shape": parts[2], "hw": parts[3] if len(parts) > 3 else "",
                    "case": key, "record": ordered[i], "sim": float(y[i]), "pred": float(pred[i]),
                    "sigma": float(full["sigma"][i]) if full is not None else float("nan"),
                    "extrapolating": bool(full["extrapolating"][i]) if full is not None else None})
    return out


def summarise(rows: list[dict]) -> list[dict]:
    """Per backend x kernel x {preset, variant} and per backend: drafts,
    cases, MAPE, in-band share, extrapolating share, sample top-1."""
    import itertools
    groups = {}
    for r in rows:
        v = "variant" if r["hw"] else "preset"
        for key in ((r["backend"], r["kernel"], v), (r["backend"], "all", "all"), ("all", "all", "all")):
            groups.setdefault(key, []).append(r)
    out = []
    for key in sorted(groups, key=lambda k: (k[0] == "all", k[0], k[1] == "all", k[1], k[2])):
        rs = groups[key]
        sim = np.array([r["sim"] for r in rs])
        pred = np.array([r["pred"] for r in rs])
        sig = np.array([r["sigma"] for r in rs])
        band = np.abs(np.log(pred / sim)) <= 2 * sig
        cases = {}
        for r in rs:
            cases.setdefault(r["case"], []).append(r)
        top1 = [min(c, key=lambda r: r["pred"])["sim"] <= min(r["sim"] for r in c) * (1 + 1e-6)
                for c in cases.values() if len(c) > 1]
        ext = [r["extrapolating"] for r in rs if r["extrapolating"] is not None]
        out.append({"backend": key[0], "kernel": key[1], "hw": key[2], "drafts": len(rs), "cases": len(cases),
                    "mape": float(np.mean(np.abs(pred - sim) / sim)),
                    "median_ape": float(np.median(np.abs(pred - sim) / sim)),
                    "worst_ape": float(np.max(np.abs(pred - sim) / sim)),
                    "in_band": float(np.mean(band)) if np.isfinite(sig).all() else float("nan"),
                    "extrapolating": float(np.mean(ext)) if ext else float("nan"),
                    "sample_top1": float(np.mean(top1)) if top1 else float("nan")})
    del itertools
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="all")
    ap.add_argument("--weights", help="directory of <backend>.msgpack (default: the shipped weights)")
    ap.add_argument("--cache", default=os.environ.get("PIMJAX_COSTMODEL_CACHE", "/tmp/costmodel"))
    ap.add_argument("--per-case", type=int, default=4, help="random drafts per case (plus the estimate's best 2)")
    ap.add_argument("--out", default=os.path.join(HERE, "out", "broad_accuracy.json"))
    ap.add_argument("--label-only", action="store_true")
    args = ap.parse_args(argv)
    from pimjax.backends import families
    from pimjax.costmodel.predictor import Predictor, load_default
    names = tuple(families()) if args.backend == "all" else tuple(args.backend.split(","))
    rows, timing = [], {}
    for name in names:
        t0 = time.time()
        recs = label_heldout(name, args.cache, args.per_case,
                             progress=lambda i, n, m: print(f"  {name} [{i}/{n}] {m}", flush=True))
        timing[name] = round(time.time() - t0, 1)
        print(f"{name}: {sum(r.get('cycles') is not None for r in recs)} labelled drafts, {timing[name]} s",
              flush=True)
        if args.label_only:
            continue
        model = Predictor.load(os.path.join(args.weights, f"{name}.msgpack")) if args.weights else load_default(name)
        rows += evaluate(name, recs, model)
    if args.label_only:
        return 0
    table = summarise(rows)
    for t in table:
        print(f"{t['backend']:8s} {t['kernel']:5s} {t['hw']:8s} cases {t['cases']:4d} drafts {t['drafts']:5d} "
              f"MAPE {t['mape']:8.1%} median {t['median_ape']:7.1%} worst {t['worst_ape']:8.1%} "
              f"in 2-sigma {t['in_band']:6.1%} extrap {t['extrapolating']:6.1%} sample top-1 {t['sample_top1']:6.1%}")
    # the draft rows of the 12 fastest drafts only (what the notebook re-checks): the file stays small
    keep = {id(r) for r in sorted(rows, key=lambda r: r["sim"])[:12]}
    for r in rows:
        if id(r) not in keep:
            r.pop("record")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"table": table, "drafts": rows, "label_seconds": timing,
                   "weights": args.weights or "shipped"}, f, indent=0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
