"""DCC Table II under both configurations: the default one and DCC's simulator ("dcc").

    python experiments/dcc_table2_configs.py [--config default,dcc] [--cache DIR] [--top-k 8]

For each configuration and each of DCC's two backends, every held-out case
(`pimjax.costmodel.kernels.default_cases`, never trained on) of the kernels
DCC's Table II has rows for (DCC's GEMV is the attention layer's, `mmtv`;
`experiments/dcc_figures.TABLE2_ROWS`) and that the configuration times is
evaluated as `pimjax.costmodel.evaluate.evaluate_case` does: every draft
lowered and simulated (the optimum), the configuration's cost model
(`pimjax.costmodel.train.load_for`: the family's model on the default
configuration, the one trained on DCC's fork's labels on "dcc") ranks them.
The plain GEMV `W @ x` (`gemv`) is evaluated too, as an extra row: DCC's
generator times it as the same GEMV.  "dcc" times GEMV, RED and VA only
(`Family.controller_models`): its ATTN and RELU rows are absent.

With "dcc", the same cases ranked by the families' models (trained on the default engines' labels, what
the tuner used on "dcc" before it had models of its own) are written too, as "dcc-family-model".

Writes experiments/data/dcc_table2.json: per configuration the cases (their
`CaseResult`s), the `table2` rows, the model's name and its training
summary, and the seconds taken; `experiments/notebooks/dcc_table2.py` reads
it.  Exhaustive labels are cached under --cache (per backend variant), so a
second run only ranks.  Exits 1 when a case fails.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

OUT = os.path.join(HERE, "data", "dcc_table2.json")
FAMILIES = ("attacc", "hbm-pim")                        # DCC's two backends
CONFIGS = {"default": {}, "dcc": {"simulator": "dcc"}}  # configuration -> preset options
# the dcc configuration's cases ranked by the family's model (trained on the default engines' labels),
# as the tuner ranked them before the dcc configuration had models of its own: why it needs them
BEFORE = "dcc-family-model"


def config_cases(config: str, kernels=None) -> list[dict]:
    """The held-out cases of `config` ("default" | "dcc"): per DCC backend the
    `default_cases` of Table II's kernels and `gemv` that the configuration's
    cost model covers (`costmodel.kernels.supported_kernels`), in that order."""
    from experiments.dcc_figures import TABLE2_ROWS
    from pimjax.costmodel.kernels import default_cases, supported_kernels
    from pimjax.hw.presets import get_backend
    if config not in CONFIGS:
        raise ValueError(f"configuration {config!r}: expected one of {list(CONFIGS)}")
    want = kernels or ({k for _, _, k in TABLE2_ROWS} | {"gemv"})
    out = []
    for fam in FAMILIES:
        covered = supported_kernels(get_backend(fam, **CONFIGS[config]))
        out += [c for c in default_cases() if c["backend"] == fam and c["kernel"] in want
                and c["kernel"] in covered]
    return out


def evaluate_config(config: str, cases: list[dict], cache: str | None, top_k: int = 8, log=print,
                    family_model: bool = False) -> dict:
    """{"model": {family: model name}, "training": {family: weights summary}, "cases": [...],
    "table": `table2` rows, "seconds"} of one configuration; family_model: rank with the family's
    model whatever the configuration's is."""
    from pimjax.costmodel.configs import model_name
    from pimjax.costmodel.evaluate import evaluate_case, table2
    from pimjax.costmodel.predictor import weights_path
    from pimjax.costmodel.train import load_for
    from pimjax.hw.presets import get_backend
    t0 = time.time()
    backends = {f: get_backend(f, **CONFIGS[config]) for f in FAMILIES}
    models = {f: load_for(f if family_model else b) for f, b in backends.items()}
    results = []
    for i, c in enumerate(cases):
        r = evaluate_case(models[c["backend"]], backends[c["backend"]], c["kernel"], c["shape"], top_k=top_k,
                          cache_dir=cache)
        results.append(r)
        log(f"[{config} {i + 1}/{len(cases)}] {r.backend:8s} {r.kernel:5s} {str(r.shape):20s} {r.drafts:6d} drafts "
            f"({r.lowered} lowered)  top-1 {'best' if r.best else f'{r.rel:.3f}':>6s}  "
            f"top-{top_k} {'best' if r.topk_best else f'{r.topk_rel:.3f}':>6s}  {r.seconds:5.1f} s")
    training = {}
    for f, b in backends.items():
        summary = weights_path(f if family_model else model_name(b)).replace(".msgpack", ".json")
        if os.path.exists(summary):
            with open(summary) as fh:
                s = json.load(fh)
            training[f] = {k: s.get(k) for k in ("rows", "groups", "cases", "broad_cases", "label_seconds",
                                                 "train_seconds", "round1_seconds", "train_top1")}
    return {"model": {f: f if family_model else model_name(b) for f, b in backends.items()}, "training": training,
            "cases": [dict(asdict(r), config=config) for r in results], "table": table2(results),
            "seconds": round(time.time() - t0, 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="default,dcc", help="comma list of: " + ", ".join(CONFIGS))
    ap.add_argument("--cache", default=os.environ.get("PIMJAX_COSTMODEL_CACHE", "/tmp/costmodel"),
                    help="exhaustive labels (per backend variant and case)")
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args(argv)
    configs = [c for c in args.config.split(",") if c]
    bad = [c for c in configs if c not in CONFIGS]
    if bad or not configs:
        ap.error(f"--config {args.config!r}: choose from {list(CONFIGS)}")
    if args.top_k < 1:
        ap.error("--top-k must be at least 1")
    data = {}
    if os.path.exists(args.out):                # keep the configurations not rerun
        with open(args.out) as fh:
            data = json.load(fh)
    failed = []
    for config in configs + ([BEFORE] if "dcc" in configs else []):
        try:
            if config == BEFORE:
                data[config] = evaluate_config("dcc", config_cases("dcc"), args.cache, args.top_k, family_model=True)
            else:
                data[config] = evaluate_config(config, config_cases(config), args.cache, args.top_k)
        except Exception as err:  # noqa: BLE001 - reported, the other configuration still runs
            failed.append(f"{config}: {type(err).__name__}: {err}")
            print(failed[-1], file=sys.stderr)
            continue
        for row in data[config]["table"]:
            print(f"{config:8s} {row['backend']}+{row['kernel']:5s} total {row['total']:3d}  "
                  f"#Best {row['best']:3d} ({row['best_frac']:.1%})  subopt {row['subopt']:.4f} "
                  f"({row['misses']} misses)  top-k best {row['topk_best']}")
    data["top_k"] = args.top_k
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)
        fh.write("\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
