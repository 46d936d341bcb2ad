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
# # DCC Table II: how often the predictor picks the optimal draft
#
# DCC §V-D: for each case every draft is simulated (the true optimum) and the predictor's pick is
# compared with it: #Best (the pick is optimal) and, over the misses, the geometric mean of optimum /
# picked performance. `experiments/predictor_accuracy.py` computes the same table for pimjax's shipped
# Flax cost model on held-out shapes (`pimjax.costmodel.evaluate`).
#
# **Subset.** The full held-out set simulates every draft of ~90 cases (minutes to tens of minutes);
# this notebook runs a stated subset that fits CI — per row the smallest held-out shapes: three of RED /
# VA / RELU, one of GEMV and ATTN (`dcc.table2_cases`) — so its
# totals are far below the paper's 167–304 cases per row, and the percentages carry that sampling
# uncertainty. `python experiments/predictor_accuracy.py` runs the full set.

# %%
import os, sys, time
ROOT = os.path.abspath("..") if os.path.basename(os.getcwd()) == "experiments" else os.getcwd()
sys.path.insert(0, ROOT)            # this checkout's pimjax and experiments/
import pandas as pd
import matplotlib.pyplot as plt
from experiments import dcc_figures as dcc
pd.set_option("display.width", 200); pd.set_option("display.max_colwidth", 120)
t_start = time.perf_counter()

# %%
cases = dcc.table2_cases()
pd.DataFrame(cases)

# %%
results, table = dcc.table2_subset(cases)
table.round(4)

# %%
side = dcc.table2_compare(table)
fig, axes = plt.subplots(1, 2, figsize=(12, 3.5))
for ax, col, label in ((axes[0], "best_frac", "#Best (fraction of cases)"),
                       (axes[1], "subopt", "suboptimal performance (misses)")):
    x = range(len(side))
    ax.bar([i - 0.2 for i in x], side[f"paper {col}"], 0.4, label="DCC paper")
    ax.bar([i + 0.2 for i in x], side[f"ours {col}"], 0.4, label="pimjax (subset)")
    ax.set_xticks(list(x), side.row, rotation=30, fontsize=7); ax.set_ylim(0.5, 1.02); ax.set_title(label)
axes[0].legend(fontsize=7); plt.tight_layout(); dcc.save(fig, "dcc_table2", table, side); plt.show()
side.round(4)

# %% [markdown]
# **Where and why they differ.** The rows are different experiments: DCC's predictor is XGBoost ranking
# its unpruned draft space, trained per kernel on shapes like the test shapes; pimjax's is a Flax model
# ranking the pruned space (`pimjax.partition`), evaluated on held-out shapes it never saw, and a pick
# less than one command-clock cycle from the optimum counts as best. Our subset is a few cases per row,
# so one miss moves #Best by tens of percent. DCC's artifact (`dcc.md`) measured 15–19 % prediction error
# and picks 1.00–1.12× slower than the best on its own splits; the `mape` column is ours.

# %%
print(f"notebook ran in {time.perf_counter() - t_start:.0f} s")

# %% [markdown]
# ## Checks
#
# What must hold whatever the predictor's quality: every case of the subset lowered, so each DCC row has
# as many cases as the notebook chose for it, and the overall row is the sum of the rows. Per case the
# exhaustive optimum is no slower than the predicted top-k's best, which is no slower than the top-1
# pick (optimum <= top-k <= pick, so both relative performances lie in (0, 1], a best pick is a best
# top-k, a strict best is a best). Per row, #Best is a share in [0, 1] equal to best / total, the misses
# are total − best, the misses' mean is 1 exactly when there is none (a miss is slower than the tie
# margin) and never below the worst miss, and the comparison table holds the paper's rows with the
# paper's #Best shares in [0, 1].

# %%
import numpy as np
catalogue = {(b, c) for b, _, c in dcc.TABLE2_ROWS}
assert len(results) == len(cases) and all(r.lowered > 0 for r in results), "every case lowered"
for r in results:
    assert 0 < r.optimum <= r.chosen, (r.backend, r.kernel, r.shape, r.optimum, r.chosen)
    assert 0 < r.rel <= r.topk_rel <= 1 + 1e-12, (r.backend, r.kernel, r.shape, r.rel, r.topk_rel)
    assert (not r.best or r.topk_best) and (not r.best_strict or r.best), (r.backend, r.kernel, r.shape)
    assert np.isfinite(r.mape) and r.mape >= 0 and r.lowered <= r.drafts
rows = table[table.backend != "all"]
assert set(zip(rows.backend, rows.kernel)) == catalogue
for t in table.itertuples():
    mine = [c for c in cases if t.backend == "all" or (c["backend"], c["kernel"]) == (t.backend, t.kernel)]
    assert t.total == len(mine) > 0, t
    assert 0 <= t.best_frac <= 1 and np.isclose(t.best_frac, t.best / t.total) and t.misses == t.total - t.best, t
    assert t.best_strict <= t.best <= t.topk_best <= t.total, t
    assert 0 < t.worst <= t.subopt <= 1 and (t.subopt == 1) == (t.misses == 0), t
overall = table[table.backend == "all"].iloc[0]
for col in ("total", "best", "best_strict", "misses", "topk_best", "drafts"):
    assert overall[col] == rows[col].sum(), col
assert len(side) == len(dcc.PAPER_TABLE2) + 1 and side["paper best_frac"].between(0, 1).all()
assert side["ours best_frac"].between(0, 1).all() and (side["ours total"] > 0).all()
assert side["ours total"].iloc[-1] == side["ours total"].iloc[:-1].sum() == len(cases)
# the figures themselves, against the values committed with the model (experiments/key_figures.py)
from experiments import key_figures
key_figures.check("dcc_table2", {f"{r['row']} ours {col}": r[f"ours {col}"] for _, r in side.iterrows()
                                 for col in ("best_frac", "subopt")})
