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
