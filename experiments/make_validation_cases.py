"""Write the validation cases of the cost model: shapes for choosing between
model variants (features, ensemble size, ...) without looking at the
held-out cases of `predictor_accuracy.py`, which are reported once for the
chosen variant.

    .venv/bin/python experiments/make_validation_cases.py [--out experiments/validation_cases.json]

Per backend and Table II kernel, shapes are drawn from the training
distribution (`dataset.sample_shape`, its own seed), never a training shape
(`dataset.training_cases`) nor a held-out one, and kept when the draft
space is small enough to simulate exhaustively.  Use the file with
`predictor_accuracy.py --cases FILE --weights DIR`.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
PER_KERNEL = {"hbm-pim": 4, "attacc": 4, "newton": 4, "upmem": 2}
MAX_DRAFTS = {"hbm-pim": 3000, "attacc": 3000, "newton": 3000, "upmem": 6000}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(HERE, "validation_cases.json"))
    ap.add_argument("--seed", type=int, default=2026)
    args = ap.parse_args(argv)
    from pimjax.costmodel.dataset import held_out, sample_shape, training_cases
    from pimjax.costmodel.evaluate import default_cases
    from pimjax.costmodel.kernels import case_drafts, make_case
    from pimjax.hw import get_backend

    kernels: dict[str, list[str]] = {}
    for c in default_cases():
        kernels.setdefault(c["backend"], [])
        if c["kernel"] not in kernels[c["backend"]]:
            kernels[c["backend"]].append(c["kernel"])
    out = []
    for b, ks in kernels.items():
        be = get_backend(b)
        trained = {(k, tuple(s)) for k, s in training_cases(b)}
        rng = np.random.default_rng([args.seed, sum(map(ord, b))])
        for k in ks:
            got, tries = [], 0
            while len(got) < PER_KERNEL[b] and tries < 200:
                tries += 1
                s = tuple(int(v) for v in sample_shape(k, b, rng))
                if (k, s) in trained or s in held_out(b, k) or s in got:
                    continue
                if not 0 < len(case_drafts(make_case(be, k, s), be)) <= MAX_DRAFTS[b]:
                    continue
                got.append(s)
            out += [{"backend": b, "kernel": k, "shape": list(s)} for s in got]
            print(b, k, got, flush=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=0)
    print(f"{len(out)} cases -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
