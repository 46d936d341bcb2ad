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
# # DCC Fig. 9: DCC's gain over the default mapping as the batch grows
#
# DCC §V-A: the GEMV of an attention layer with 32 heads and input size 128, various output sizes,
# batch 1 → 8; DCC's speedup over HBM-PIM's and AttAcc's default mapping rises from 1.33 to 1.61
# (HBM-PIM) and from 1.14 to 1.33 (AttAcc). **Subset:** output sizes 512 and 1024 (the paper's are not
# stated), batches 1, 2, 4, 8; per batch the geometric mean over the output sizes.

# %% [markdown]
# **Systems.** DCC §V simulates an A100 beside PIM-enabled HBM3; its GPU model is 312 TFLOP/s FP16 and
# 3352 GB/s at 0.81 utilisation (five HBM3 cubes' worth of bandwidth; `dcc.md`) — in pimjax
# `pimjax.hw.host.a100("hbm3")`, passed explicitly as every system's host here so that a change of a
# preset's default host does not change these figures. DCC's trace generator models **one** HBM3 cube
# (16 channels × 64 banks; `dcc.md`), so the PIM side is one cube:
#
# * AttAcc: `get_backend("attacc", variant="bank-pc", stacks=1, host=a100("hbm3"))`.
# * HBM-PIM: `get_backend("hbm-pim", channels=64, host=a100("hbm3"))` — Samsung's Aquabolt-XL (HBM2
#   timing, 16 banks per pseudo-channel, one 16-lane FP16 unit per two banks): 64 pseudo-channels × 8
#   units = 512 units, as many as DCC's HBM-PIM cube (16 channels × 64 banks, a unit per two banks).
#
# **Residency** (DCC's kernel evaluation): the attention layer's GEMV keeps its matrix (the KV cache) in
# PIM and the host writes the 128-element query per call; ATTN keeps K and V; RED / VA / RELU operands
# come from the GPU and are rearranged into PIM every call. **Search**: the shipped predict-mode tuner
# (the cost model's top-8 drafts and the backend's baseline lowered and simulated, the fastest kept), not
# exhaustive search, to fit CI. **Averages** are geometric means over the cases.

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
systems = [dcc.attacc_system(), dcc.hbm_pim_system()]
fig9 = pd.concat([dcc.sweep(be, dcc.fig9_cases()) for be in systems], ignore_index=True)
fig9[["backend", "batch", "size", "pim_ns", "base_ns", "gpu_ns", "dcc_vs_base", "dcc_vs_gpu", "draft"]].round(3)

# %%
t9 = dcc.fig9_table(fig9)
fig, ax = plt.subplots(figsize=(7, 3.5))
for b, g in t9.groupby("backend"):
    line, = ax.plot(g.batch, g.ours, "o-", label=f"pimjax {b}")
    known = g.dropna(subset=["paper"])
    ax.plot(known.batch, known.paper, "s--", color=line.get_color(), label=f"DCC paper {b} (end points)")
ax.set_xscale("log", base=2); ax.set_xlabel("batch"); ax.set_ylabel("speedup over the default mapping (x)")
ax.set_title("Fig. 9: GEMV, 32 heads, input 128"); ax.legend(fontsize=7)
dcc.save(fig, "dcc_fig9", fig9, t9); plt.show()
t9.round(3)

# %%
for b, g in t9.groupby("backend"):
    g = g.set_index("batch")
    (p1, p8), (o1, o8) = g.paper[[1, 8]], g.ours[[1, 8]]
    hit = all(abs(o / p - 1) <= dcc.TOLERANCE for o, p in ((o1, p1), (o8, p8)))
    print(f"{b}: paper {p1:.2f} -> {p8:.2f} (x{p8 / p1:.2f}), ours {o1:.2f} -> {o8:.2f} (x{o8 / o1:.2f}); end points "
          + ("within 25 %" if hit else "miss") + f". Where the gains differ: {dcc.WHY_FIG9[b]}")
print(f"notebook ran in {time.perf_counter() - t_start:.0f} s")

# %% [markdown]
# ## Under the paper's configuration: DCC's own simulator
#
# The same cases under the "dcc" configurations (`get_backend("attacc" / "hbm-pim", simulator="dcc")`: DCC's
# Ramulator2 forks on its one HBM3 cube, ported cycle-exactly, `docs/dcc-simulator.md`), measured by
# `experiments/dcc_figures_dccsim.py` (a few minutes) and read from `experiments/data/dcc_figures_dccsim.json`.
# The baseline is DCC's: AttAcc's mapping in DCC's notation (`dcc.dcc_baseline_tiling`), the same on both
# backends as in the paper (§V point 4), timed by the fork; DCC's choice is the tuner's program on the "dcc"
# configuration or that baseline if faster (`dcc.run_case_dcc`).

# %%
from experiments import dcc_figures_dccsim as dccsim
fig9d = dccsim.load()["fig9"]
t9d = dcc.fig9_table(fig9d)
both9 = t9.rename(columns={"ours": "default"}).merge(
    t9d.rename(columns={"ours": "dcc"}).drop(columns="paper"), on=["backend", "batch"])
both9["default / paper"], both9["dcc / paper"] = both9.default / both9.paper, both9.dcc / both9.paper
both9 = both9[["backend", "batch", "paper", "default", "default / paper", "dcc", "dcc / paper"]]
both9.to_csv(os.path.join(ROOT, "experiments", "out", "dcc_fig9_configs.csv"), index=False)
for b, g in both9.groupby("backend"):
    g = g.set_index("batch")
    print(f"{b}: paper {g.paper[1]:.2f} -> {g.paper[8]:.2f}; default {g.default[1]:.2f} -> {g.default[8]:.2f}; "
          f"dcc {g.dcc[1]:.2f} -> {g.dcc[8]:.2f}")
both9.round(3)

# %% [markdown]
# Under DCC's simulator the HBM-PIM gain grows with the batch as the paper's does (DCC's baseline gives each
# bank 32 inputs of one column and replicates the query per bank, so a larger batch multiplies its host
# writes), while on AttAcc DCC's baseline is already the fastest program found beyond batch 1, as DCC's own
# artifact found on the GEMV shapes it sampled (`dcc.md`: the baseline was usually the best).

# %% [markdown]
# ## Checks
#
# What must hold whatever the cycle model's details: a row per backend and case the notebook set out to
# run, and a Fig. 9 point per backend and batch whose value is the geometric mean of that batch's cases,
# with the paper's end points at batches 1 and 8 only. Every time and speedup is finite and positive, and
# DCC's search never loses to the default mapping it starts from (the tuner simulates it and keeps the
# fastest: `dcc_vs_base` >= 1). More batch is more work: the GPU roofline and the default mapping's
# PIM time do not fall as the batch grows, and the GPU roofline is the same on both backends (same GPU,
# same ops).

# %%
import numpy as np
cases = dcc.fig9_cases()
assert [(r.backend, r.batch, r.size) for r in fig9.itertuples()] == \
    [(be.name, b, s) for be in systems for _, b, s in cases], "a row per backend and case, in order"
for col in ("pim_ns", "base_ns", "gpu_ns", "dcc_vs_base", "dcc_vs_gpu", "base_vs_gpu"):
    assert np.isfinite(fig9[col]).all() and (fig9[col] > 0).all(), col
assert (fig9.dcc_vs_base >= 1 - 1e-9).all(), fig9[fig9.dcc_vs_base < 1 - 1e-9]
assert np.allclose(fig9.dcc_vs_gpu, fig9.dcc_vs_base * fig9.base_vs_gpu, rtol=1e-9)
for (b, s), g in fig9.groupby(["backend", "size"]):
    g = g.sort_values("batch")
    assert g.gpu_ns.is_monotonic_increasing and g.base_ns.is_monotonic_increasing, (b, s)
gpu = fig9.pivot_table(index=["batch", "size"], columns="backend", values="gpu_ns")
assert np.allclose(gpu.min(axis=1), gpu.max(axis=1), rtol=1e-12)
assert sorted(zip(t9.backend, t9.batch)) == sorted({(r.backend, r.batch) for r in fig9.itertuples()})
for r in t9.itertuples():
    mine = fig9[(fig9.backend == r.backend) & (fig9.batch == r.batch)].dcc_vs_base
    assert np.isclose(r.ours, np.exp(np.log(mine).mean())) and r.ours >= 1 - 1e-9, r
    assert np.isnan(r.paper) == (r.batch not in (1, 8)), r
# the "dcc" configuration's cache: the same cases in the same order, DCC's choice never slower than DCC's
# baseline, and the table's dcc column the geometric mean of its batch's cases
assert [(r.backend, r.batch, r.size) for r in fig9d.itertuples()] == \
    [(be.name, b, s) for be in systems for _, b, s in cases]
assert (fig9d.dcc_vs_base >= 1 - 1e-9).all() and np.allclose(fig9d.dcc_vs_base, fig9d.base_ns / fig9d.pim_ns)
for r in both9.itertuples():
    mine = fig9d[(fig9d.backend == r.backend) & (fig9d.batch == r.batch)].dcc_vs_base
    assert np.isclose(r.dcc, np.exp(np.log(mine).mean())), r
# the figures themselves, against the values committed with the model (experiments/key_figures.py)
from experiments import key_figures
key_figures.check("dcc_fig9_batch", {f"{r.backend} batch {r.batch} dcc_vs_base": r.ours for r in t9.itertuples()}
                  | {f"{r.backend} {r.batch}x{r.size} dcc_vs_gpu": r.dcc_vs_gpu for r in fig9.itertuples()}
                  | {f"dcc {r.backend} batch {r.batch} dcc_vs_base": r.dcc for r in both9.itertuples()})
