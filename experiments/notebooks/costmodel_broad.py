# ---
# jupyter:
#   jupytext:
#     notebook_metadata_filter: -jupytext.text_representation.jupytext_version
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # The cost model on shapes and hardware it never saw (issue #29)
#
# `experiments/broad_accuracy.py` labels sampled drafts of the broad held-out set
# (`pimjax.costmodel.broad.broad_cases("heldout")`: LLaMA-2 13B / 33B / 70B GEMVs up to 28 672 × 8 192,
# decode attention, elementwise ops, VGG-16 convolutions, each on the preset and on structural hardware
# variants no model was trained on) and compares the shipped models' predicted cycles with the simulated
# ones. Labelling them takes tens of minutes, so this notebook plots the cached result
# (`experiments/data/broad_accuracy.json`) and re-checks a sample: three cached drafts are featurised and
# predicted again, and the smallest is lowered and simulated again.

# %%
import json, os, sys, time
ROOT = os.path.abspath("..") if os.path.basename(os.getcwd()) == "experiments" else os.getcwd()
sys.path.insert(0, ROOT)
import pandas as pd
import matplotlib.pyplot as plt
from pimjax.costmodel import dataset as ds
from pimjax.costmodel.broad import backend_of
from pimjax.costmodel.kernels import make_case
from pimjax.costmodel.predictor import load_default
from pimjax.partition.generate import lane_candidates
from pimjax.costmodel.features import features_table
t_start = time.perf_counter()
with open(os.path.join(ROOT, "experiments", "data", "broad_accuracy.json")) as f:
    data = json.load(f)
table = pd.DataFrame(data["table"])
table[table.kernel == "all"].round(3)

# %%
df = pd.DataFrame(data["drafts"])
fig, ax = plt.subplots(figsize=(6, 5))
for (name, variant), d in df.groupby([df.backend, df.hw != ""]):
    ax.scatter(d.sim, d.pred, s=8, marker="x" if variant else "o", alpha=0.6,
               label=f"{name} {'variants' if variant else 'preset'}")
lim = [df[["sim", "pred"]].min().min() * 0.8, df[["sim", "pred"]].max().max() * 1.25]
ax.plot(lim, lim, "k-", lw=0.8)
for f in (0.85, 1.15):
    ax.plot(lim, [lim[0] * f, lim[1] * f], "k:", lw=0.6)
ax.set_xscale("log"); ax.set_yscale("log"); ax.set_xlim(lim); ax.set_ylim(lim)
ax.set_xlabel("simulated cycles"); ax.set_ylabel("predicted cycles"); ax.legend(fontsize=7)
ax.set_title("held-out shapes and hardware variants (dotted: +-15 %)"); plt.tight_layout(); plt.show()
table[table.kernel != "all"].round(3)

# %%
# re-check a sample against the current code: the prediction from the cached draft, and one simulation
sample = sorted((r for r in data["drafts"] if "record" in r), key=lambda r: r["sim"])[:3]
for r in sample:
    rec = r["record"]
    be = backend_of(rec["backend"], rec.get("hw"))
    case = make_case(be, rec["kernel"], rec["shape"])
    table1 = ds.table_from_rows([rec["row"]], lane_candidates(case.op, be))
    pred = load_default(rec["backend"]).predict(features_table(case.target, table1, be, case.shapes))[0]
    print(rec["backend"], rec["kernel"], rec["shape"], rec.get("hw", {}), f"predicted {pred:,.0f} (cached "
          f"{r['pred']:,.0f}), simulated {r['sim']:,.0f}")
    if r is sample[0]:
        sim = ds.label(case, table1, [0], be)[0, 0]
        assert abs(sim - r["sim"]) <= 1e-6 * r["sim"] + 1.0, (sim, r["sim"])
        print(f"  simulated again: {sim:,.0f}")

# %%
print(f"notebook ran in {time.perf_counter() - t_start:.0f} s")
