"""PIMFlow Fig. 14: the PIM-command optimisations against Newton+.

PIMFlow §6.2: "GWRITE latency hiding provides a 9 % speedup on its own while
multiple global buffers provide a 14 % speedup against Newton+.  PIMFlow
achieves a 22 % speedup on average by combining them."  This script times
the PIM-candidate CONV layers of a CNN (default MobileNet-V2 at 224 x 224,
`pimjax.models.cnn_layers`; each distinct shape once, weighted by how often
the model has it) on PIM alone under the four configurations of
`pimjax.hw.presets.NEWTON_CONFIGS`:

    newton+    one global buffer (Newton's 2 KB), no GWRITE latency hiding
    newton+gw  + GWRITE latency hiding (a G_ACT issues while the buffer is written)
    newton+gb  + four 1 KB global buffers (GWRITE_4: one G_ACT serves four inputs)
    newton++   both

How a layer is timed: its op is the NHWC 'SAME' convolution of the layer's
output size (`pimjax.kernels` "conv" [Ho, Wo, C, F, K]; a strided layer as
the stride-1 convolution with its output and MACs), weights resident in PIM
(placed once, PIMFlow §2.2).  The tuner (`Tuner.choose`) picks the draft
once per buffer count (newton+ and newton+gb); the chosen program is then
simulated (`sim.cycles`, refresh on) under the configuration without and
with hiding.  Hiding changes the timing rules, not the command stream, so
the with-hiding time is that of the draft tuned without it: an upper bound
on the tuned time (a lower bound on the gain).

Speedup of a configuration = (sum over layers of count x Newton+ ns) / (same
sum under the configuration) - 1: the model's PIM CONV time when every
candidate layer runs on PIM.  The geometric mean of the per-layer speedups is
reported beside it, and the weighted speedup with refresh off: refresh in the
cycle model falls at record boundaries and skips deadlines a long record
jumps over, so a schedule that shifts by a few cycles can gain or lose one
refresh (tRP + tRFC = 361 cycles) per channel -- noise of the size of GWRITE
hiding's gain on a small layer.  With refresh off every engine is monotone,
and hiding is never slower.

    PYTHONPATH=$PWD python experiments/pimflow_fig14.py            # cached table
    PYTHONPATH=$PWD python experiments/pimflow_fig14.py --recompute # measure (minutes)
    PYTHONPATH=$PWD python experiments/pimflow_fig14.py --recompute --quick   # 6 layers

The cache is experiments/data/pimflow_fig14.json; `fig14_table()` returns the
table as a pandas DataFrame (for the PIMFlow notebook).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data", "pimflow_fig14.json")

PAPER = {"newton+gw": 9.0, "newton+gb": 14.0, "newton++": 22.0}
"""PIMFlow §6.2 / Fig. 14: speedup over Newton+ in % (GW, GB, GW + GB)."""
CONFIGS = ("newton+", "newton+gw", "newton+gb", "newton++")
LABELS = {"newton+": "Newton+", "newton+gw": "GWRITE latency hiding (GW)",
          "newton+gb": "multiple global buffers (GB)", "newton++": "both (Newton++)"}
NOREF = "/norefresh"
"""Suffix of a configuration's time with refresh off."""
QUICK = 6
"""Layers of the --quick run: evenly spaced over the model's distinct shapes."""


def layer_set(model: str = "mobilenet-v2", quick: bool = False) -> list[dict]:
    """The model's PIM-candidate CONV layers (groups 1, i.e. not depthwise) as
    distinct shapes: [{"shape": [Ho, Wo, C, F, K], "count": n, "names": [...]}],
    in model order.  quick: `QUICK` of them, evenly spaced."""
    from pimjax.models import cnn_layers
    df = cnn_layers(model)
    rows = df[(df.kind == "conv") & (df.groups == 1) & df.pim_candidate]
    shapes: dict = {}
    for r in rows.itertuples():
        key = (int(r.Ho), int(r.Wo), int(r.C), int(r.F), int(r.K))
        shapes.setdefault(key, []).append(str(r.name))
    out = [{"shape": list(k), "count": len(v), "names": v} for k, v in shapes.items()]
    if quick and len(out) > QUICK:
        step = (len(out) - 1) / (QUICK - 1)
        out = [out[round(i * step)] for i in range(QUICK)]
    return out


def time_layer(shape: list[int]) -> dict:
    """{config: ns} of one CONV layer [Ho, Wo, C, F, K] (see the module
    docstring; refresh on), {config + "/norefresh": ns} with refresh off, and
    the tuned drafts' channels used ("groups_gb1" / "_gb4")."""
    import numpy as np

    from pimjax.hw.presets import newton_config
    from pimjax.kernels import kernel_op
    from pimjax.search.tuner import Tuner
    from pimjax.sim.cycles import cycles
    op, shapes = kernel_op("conv", list(shape))
    out = {}
    for tuned_on, hidden in (("newton+", "newton+gw"), ("newton+gb", "newton++")):
        be = newton_config(tuned_on)
        choice = Tuner().choose(op, be, shapes, resident=(1,))
        if choice is None:
            raise RuntimeError(f"conv {shape}: no draft lowers on {tuned_on}")
        for name in (tuned_on, hidden):
            b = newton_config(name)
            out[name] = float(cycles(choice.program, b).total_ns)
            out[name + NOREF] = float(cycles(choice.program, b, refresh=False).total_ns)
        out[f"groups_gb{be.group.n_global_buffers}"] = int(np.prod([p.groups for p in choice.draft.parts]))
    return out


def measure(model: str = "mobilenet-v2", quick: bool = False, log=print) -> dict:
    """Time every layer of `layer_set(model, quick)`; the cache's content."""
    layers = layer_set(model, quick)
    t0 = time.perf_counter()
    for k, lay in enumerate(layers):
        lay.update(time_layer(lay["shape"]))
        log(f"  [{k + 1}/{len(layers)}] conv {lay['shape']} x{lay['count']}: "
            + "  ".join(f"{c} {lay[c]:,.0f} ns" for c in CONFIGS) + f"  ({time.perf_counter() - t0:.0f} s)")
    return {"model": model, "quick": quick, "configs": list(CONFIGS), "paper_pct": PAPER, "layers": layers,
            "seconds": round(time.perf_counter() - t0, 1)}


def summarise(data: dict, suffix: str = "") -> dict:
    """{config: (weighted speedup %, geometric-mean per-layer speedup %)} over
    Newton+ (suffix NOREF: of the refresh-off times)."""
    layers = data["layers"]
    base = sum(l["count"] * l["newton+" + suffix] for l in layers)
    out = {}
    for c in CONFIGS[1:]:
        total = sum(l["count"] * l[c + suffix] for l in layers)
        geo = math.exp(sum(math.log(l["newton+" + suffix] / l[c + suffix]) for l in layers) / len(layers))
        out[c] = (100.0 * (base / total - 1.0), 100.0 * (geo - 1.0))
    return out


def fig14_table(path: str = DATA):
    """Fig. 14 as a DataFrame: per optimisation (rows GW, GB, GW + GB) our
    speedup over Newton+ in % (the model's weighted PIM CONV time, the
    geometric mean over its distinct layers, and the weighted time with
    refresh off) beside the paper's.  Reads the cache written by
    `--recompute`."""
    import pandas as pd
    with open(path) as f:
        data = json.load(f)
    s, n = summarise(data), summarise(data, NOREF)
    return pd.DataFrame([{"config": c, "optimisation": LABELS[c], "ours_pct": round(s[c][0], 1),
                          "ours_geomean_pct": round(s[c][1], 1), "ours_norefresh_pct": round(n[c][0], 1),
                          "paper_pct": data["paper_pct"][c]}
                         for c in CONFIGS[1:]]).set_index("config")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recompute", action="store_true", help="measure instead of reading the cache")
    ap.add_argument("--quick", action="store_true", help=f"with --recompute: {QUICK} layers only")
    ap.add_argument("--model", default="mobilenet-v2")
    ap.add_argument("--out", default=DATA, help="the cache (JSON)")
    args = ap.parse_args(argv)
    if args.recompute:
        data = measure(args.model, args.quick)
        os.makedirs(os.path.dirname(args.out), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(data, f, indent=1)
        print(f"wrote {args.out} ({data['seconds']} s)")
    elif not os.path.exists(args.out):
        print(f"no cache at {args.out}: run with --recompute", file=sys.stderr)
        return 2
    with open(args.out) as f:
        data = json.load(f)
    print(f"PIMFlow Fig. 14 -- {data['model']} PIM-candidate CONV layers ({len(data['layers'])} distinct"
          f"{', quick' if data['quick'] else ''}), speedup over Newton+:")
    print(fig14_table(args.out).to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
