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
# # Design-space exploration: hardware and mapping searched together (issue #27)
#
# `pimjax.explore(fn, *args, backends=...)` tunes every structural design point for itself (a fresh
# predict-mode tuner: the cost model's top-8 drafts and the backend's baseline lowered and simulated per
# op) and returns one row per point: time, PIM energy, the GPU-only time on the same memory system, the
# placement and draft of every op. Four questions, each a sweep computed by `experiments/dse_sweeps.py`
# and cached in `experiments/data/dse_*.jsonl` (the full sweeps take minutes; this notebook reads them and
# recomputes one point of each to check the cache):
#
# 1. AttAcc's PIM level (bank / bank-group / buffer, power-constrained or not) on LLaMA-2 decode attention;
# 2. stacks × units per channel × GEMV-buffer size for a LLaMA-2-7B decode layer: the Pareto front of time
#    against energy and a unit-count area proxy;
# 3. which PIM family for which model, all beside the same GPU;
# 4. how far the mapping tuned at the preset is from the mapping tuned at each point.

# %%
import os, sys, time, warnings
ROOT = os.path.abspath("..") if os.path.basename(os.getcwd()) == "experiments" else os.getcwd()
sys.path.insert(0, ROOT)            # this checkout's pimjax and experiments/
import numpy as np
import pandas as pd
import matplotlib.pyplot as plt
from IPython.display import display
from experiments import dse_sweeps as dse
warnings.simplefilter("ignore")     # the layer's float32 norms' PrecisionWarning, once per point
pd.set_option("display.width", 200); pd.set_option("display.max_colwidth", 80)
t_start = time.perf_counter()

# %% [markdown]
# ## 1. AttAcc's PIM levels on LLaMA-2-7B decode attention
#
# One HBM3 stack (16 channels; `attacc(variant=..., stacks=1)`), batch 1, 32 heads × 128, K / V resident
# in PIM (`resident=("k_cache", "v_cache")`), at contexts 512 and 2048. A bank-level unit per bank (64
# per channel), one per bank group (16) or one per pseudo-channel on the buffer die (2); "pc" spaces the
# all-bank MACs by tCCD_AB = 6 cycles for the power budget, "npc" by 4. AttAcc's paper argues for the
# bank level from the public simulator's runs; its attention rows (attacc.md, one stack, cycles of 0.769
# ns) are set beside ours on the same shapes — ours is the tuned draft, the simulator runs its own
# mapping.

# %%
levels = dse.load("levels")
levels["variant"] = levels["point"].str.split().str[-1]
levels["context"] = levels["point"].str.extract(r"L=(\d+)", expand=False).astype(int)
llama = levels[levels["point"].str.startswith("llama")]
t1 = llama.pivot_table(index="variant", columns="context", values="total_ns").rename(columns=lambda c: f"L {c} ns")
t1 = t1.join(llama[llama.context == 2048].set_index("variant")[["energy_pj", "speedup_gpu"]])
t1 = t1.loc[[v for v in ["bank-pc", "bank-npc", "bg-pc", "bg-npc", "buffer-pc", "buffer-npc"] if v in t1.index]]
t1["vs bank-pc (L 2048)"] = t1["L 2048 ns"] / t1.loc["bank-pc", "L 2048 ns"]
t1.round(3)

# %%
tck = 1 / 1.3                                   # attacc.md: 1.3 GHz command clock
sim = pd.DataFrame(dse.ATTACC_SIM, columns=["variant", "heads", "context", "simulator cycles"])
sim["point"] = [f"sim h={h} L={c} {v}" for v, h, c, _ in dse.ATTACC_SIM]
sim = sim.merge(levels[["point", "total_ns"]], on="point")
sim["pimjax tuned cycles"] = sim["total_ns"] / tck
sim["pimjax / simulator"] = sim["pimjax tuned cycles"] / sim["simulator cycles"]
fig, axes = plt.subplots(1, 2, figsize=(13, 3.6))
t1[["L 512 ns", "L 2048 ns"]].div(1e3).plot.bar(ax=axes[0], rot=0)
axes[0].set_ylabel("attention µs (one layer)"); axes[0].set_title("pimjax: LLaMA-2-7B decode attention per level")
x = np.arange(len(sim)); lab = [f"{v}\nh{h} L{c}" for v, h, c in zip(sim.variant, sim.heads, sim.context)]
axes[1].bar(x - 0.2, sim["simulator cycles"], 0.4, label="AttAcc simulator (its mapping)")
axes[1].bar(x + 0.2, sim["pimjax tuned cycles"], 0.4, label="pimjax (tuned draft)")
axes[1].set_xticks(x, lab, fontsize=7); axes[1].set_yscale("log"); axes[1].set_ylabel("PIM cycles")
axes[1].legend(fontsize=7); axes[1].set_title("the simulator's attention rows beside ours")
plt.tight_layout(); plt.show()
sim.drop(columns=["point", "total_ns"]).round(3)

# %%
row, new = dse.check_sample("levels", "llama L=512 bg-npc")       # recomputed now: equals the cache
print(f"recomputed llama L=512 bg-npc: {new.total_ns:,.1f} ns (cached {row.total_ns:,.1f})")

# %% [markdown]
# ## 2. Stacks × units per channel × GEMV buffer: a LLaMA-2-7B decode layer
#
# AttAcc (`dse.structural_point`): 1–5 HBM3 stacks, 64 / 16 / 2 units per channel (bank / bank-group /
# buffer level, power-constrained), 4–32 GEMV-buffer entries of 32 B per unit (the preset: 16). One
# decoder layer, batch 1, L 2048, weights and KV cache resident; the GPU-only baseline is an A100 on the
# same stacks. Area proxy: the unit count (and the buffer bytes). The Pareto front is the set of points
# no other point beats in both time and energy (★); with the unit count as a third objective the front
# grows (○).

# %%
st = dse.load("structure")
st = st[st["timing"].isna()].copy()
for k in ("stacks", "units", "buffer"):
    st[k] = st["point"].str.extract(rf"{k}=(\d+)").astype(int)
st["total_units"] = st["stacks"] * 16 * st["units"]
st["buffer_kib"] = st["total_units"] * st["buffer"] * 32 / 1024
st["time_us"] = st["total_ns"] / 1e3; st["energy_uj"] = st["energy_pj"] / 1e6
st["front"] = dse.pareto(st, ["total_ns", "energy_pj"])
st["front_area"] = dse.pareto(st, ["total_ns", "energy_pj", "total_units"])
print(f"{len(st)} points, tuned in {st.tuning_s.sum():.0f} s in all when the sweep ran "
      f"({60 * len(st) / st.tuning_s.sum():.0f} points / min)")
pareto_table = st[st.front].sort_values("total_ns")[["point", "time_us", "energy_uj", "speedup_gpu", "total_units",
                                                      "buffer_kib"]]
pareto_table.round(3)

# %%
fig, axes = plt.subplots(1, 2, figsize=(13, 4.2))
ax = axes[0]
for u, m in zip((64, 16, 2), "o^s"):
    g = st[st.units == u]
    sc = ax.scatter(g.time_us, g.energy_uj, c=g.stacks, cmap="viridis", marker=m, s=14 + 3 * g.buffer,
                    label=f"{u} units / channel", vmin=1, vmax=5)
f = st[st.front].sort_values("time_us")
ax.plot(f.time_us, f.energy_uj, "r*-", ms=10, label="Pareto front (time, energy)")
a = st[st.front_area & ~st.front]
ax.scatter(a.time_us, a.energy_uj, facecolors="none", edgecolors="k", s=80, label="+ front with unit count")
ax.set_xscale("log"); ax.set_yscale("log"); ax.set_xlabel("layer time µs"); ax.set_ylabel("PIM energy µJ")
fig.colorbar(sc, ax=ax, label="stacks"); ax.legend(fontsize=7); ax.set_title("LLaMA-2-7B decode layer on AttAcc")
ax = axes[1]
for u, m in zip((64, 16, 2), "o^s"):
    g = st[(st.units == u) & (st.buffer == 16)].sort_values("stacks")
    ax.plot(g.total_units, g.speedup_gpu, m + "-", label=f"{u} units / channel, buffer 16")
ax.set_xscale("log"); ax.set_xlabel("PIM units (area proxy)"); ax.set_ylabel("speedup over the GPU on the same stacks")
ax.legend(fontsize=7); ax.set_title("speedup against the unit count"); plt.tight_layout(); plt.show()
st.pivot_table(index=["units", "buffer"], columns="stacks", values="time_us").round(1)

# %%
row, new = dse.check_sample("structure", "stacks=2,units=16,buffer=8")   # recomputed now: equals the cache
print(f"recomputed stacks=2,units=16,buffer=8: {new.total_ns:,.1f} ns in {new.tuning_s:.1f} s "
      f"(cached {row.total_ns:,.1f} ns)")

# %% [markdown]
# ## 3. Which PIM family for which model, beside the same GPU
#
# Every family's preset with the same A100 (DCC's GPU model, `a100("hbm3")`) as the GPU-only baseline and
# as the processor of the ops left off PIM: HBM-PIM (64 pseudo-channels), AttAcc (5 stacks), Newton (16 of
# 32 GDDR6 channels with PIM) and UPMEM (2048 DPUs; its preset has no separate GPU, so the A100 is its
# host — an assumption). Models: LLaMA-2-7B and GPT-3 13B decode layers (batch 1, L 2048) and the
# BERT-base encoder (64 tokens, batch 1: GEMMs, not GEMVs). `speedup_gpu` is the GPU-only time over the
# time with each op where it is faster (`placement="auto"`). Each row's `tuning_s` is the time its point took
# to tune when the cache was written (`python experiments/dse_sweeps.py --only families` recomputes missing rows).

# %%
fam = dse.load("families")
fam["model"] = fam["point"].str.split(" on ").str[0]; fam["family"] = fam["point"].str.split(" on ").str[1]
fam["pim ops"] = fam["placements"].str.count("@pim") + fam["placements"].str.count("@md-dp")
t3 = fam.pivot_table(index="model", columns="family", values="speedup_gpu")
ax = t3.plot.bar(figsize=(9, 3.5), rot=0); ax.axhline(1, color="k", lw=0.6)
ax.set_ylabel("speedup over the A100 alone"); ax.set_title("which family for which model"); plt.show()
best = t3.idxmax(axis=1).rename("best family").to_frame().join(t3.max(axis=1).rename("speedup"))
display(t3.round(3)); best.round(3)

# %% [markdown]
# ## 4. The preset's mapping moved to every point
#
# Each point of sweep 2 again: its PIM ops' own drafts (tuned at the point) against the drafts tuned at
# the preset structure (one stack, 64 bank-level units per channel, 16 buffer entries), both lowered and
# simulated at the point (steady state, the placement of appended KV rows not charged). An op whose
# preset draft does not fit the point (more groups or cores than it has, a buffer too small) is counted
# as unfit: the preset's mapping cannot run there at all.

# %%
tr = dse.load("transfer")
for k in ("stacks", "units", "buffer"):
    tr[k] = tr["point"].str.extract(rf"{k}=(\d+)").astype(int)
tr["preset draft / own"] = tr["preset_draft_ns"] / tr["own_ns"]
fig, ax = plt.subplots(figsize=(8, 3.5))
for (u, b), g in tr[tr.buffer.isin([4, 16])].groupby(["units", "buffer"]):
    g = g.sort_values("stacks"); ax.plot(g.stacks, g["preset draft / own"], "o-", label=f"{u} units, buffer {b}")
ax.axhline(1, color="k", lw=0.6); ax.set_xlabel("stacks"); ax.set_ylabel("preset's drafts / point's own (time)")
ax.set_title("how far the preset's mapping is from each point's"); ax.legend(fontsize=7); plt.show()
tr.pivot_table(index=["units", "buffer"], columns="stacks", values="preset draft / own").round(3)

# %%
tr.pivot_table(index=["units", "buffer"], columns="stacks", values="unfit_ops", aggfunc="sum")

# %%
print(f"notebook ran in {time.perf_counter() - t_start:.0f} s")

# %% [markdown]
# ## Checks
#
# What must hold whatever the cycle model's details. **Levels:** a row per AttAcc variant and context and
# per simulator row; a longer context takes longer on every variant; at every context the bank level is
# the fastest power-constrained one and the bank-group level beats the buffer die (more units, more
# internal bandwidth), and dropping the power constraint (npc: MACs spaced by 4 cycles, not 6) never
# makes a level slower. **Structure:** a row per point of the 5 × 3 × 4 grid; the time is PIM plus GPU
# and the speedup the GPU-only time over it; the GPU-only time depends on the stacks alone and falls as
# they grow (more bandwidth on a memory-bound decode layer), and so does the point's own time at every
# level and buffer size; more units per channel is faster at every stack count. The Pareto fronts are
# what they claim: no point beats a front point in every objective, and every other point is beaten by
# a front point. **Families:** a row per model and family, and placing each op where it is faster never
# loses to the GPU alone (speedup >= 1; exactly 1 when no op is on PIM). **Transfer:** a row per grid
# point; at the preset structure the preset's drafts are the point's own.

# %%
def dominated_by(x, y):        # y no worse than x in every objective, strictly better in one
    return bool(np.all(y <= x) and np.any(y < x))

assert len(levels) == 2 * 6 + len(dse.ATTACC_SIM) and (levels.total_ns > 0).all()
lt = llama.pivot_table(index="variant", columns="context", values="total_ns")
assert lt.shape == (6, 2) and (lt[2048] > lt[512]).all()
for L in (512, 2048):
    v = lt[L]
    assert v["bank-pc"] < v["bg-pc"] < v["buffer-pc"], v
    for lvl in ("bank", "bg", "buffer"):
        assert v[f"{lvl}-npc"] <= v[f"{lvl}-pc"] * (1 + 1e-9), (L, lvl)
assert np.allclose(levels.speedup_gpu, levels.gpu_ns / levels.total_ns)

assert len(st) == len(dse.STACKS) * len(dse.LEVELS) * len(dse.BUFFERS) == st.point.nunique()
assert np.allclose(st.total_ns, st.pim_ns + st.host_ns) and np.allclose(st.speedup_gpu, st.gpu_ns / st.total_ns)
gpu_by_stacks = st.groupby("stacks").gpu_ns
assert np.allclose(gpu_by_stacks.min(), gpu_by_stacks.max()) and gpu_by_stacks.first().is_monotonic_decreasing
for (u, b), g in st.groupby(["units", "buffer"]):
    assert g.sort_values("stacks").total_ns.diff().dropna().lt(0).all(), ("more stacks is faster", u, b)
for (s, b), g in st.groupby(["stacks", "buffer"]):
    assert g.sort_values("units").total_ns.diff().dropna().lt(0).all(), ("more units is faster", s, b)
for mask, cols in ((st.front, ["total_ns", "energy_pj"]), (st.front_area, ["total_ns", "energy_pj", "total_units"])):
    x = st[cols].to_numpy(np.float64)
    on, off = x[mask.to_numpy()], x[~mask.to_numpy()]
    assert len(on) and not any(dominated_by(p, q) for p in on for q in x)
    assert all(any(dominated_by(p, q) for q in on) for p in off)
assert st.loc[st.total_ns.idxmin(), "front"] and st.loc[st.energy_pj.idxmin(), "front"]

assert len(fam) == len(dse.FAMILY_MODELS) * 4 and set(fam.family) == {"hbm-pim", "attacc", "newton", "upmem"}
assert (fam.speedup_gpu >= 1 - 1e-9).all() and np.allclose(fam.speedup_gpu, fam.gpu_ns / fam.total_ns)
assert np.allclose(fam.loc[fam["pim ops"] == 0, "speedup_gpu"], 1.0)

assert sorted(tr.point) == sorted(st.point)
assert (tr[["own_ns", "preset_draft_ns"]] >= 0).all().all()
assert (tr[["same_draft_ops", "other_draft_ops", "unfit_ops"]] >= 0).all().all()
at_preset = tr.set_index("point").loc[dse.PRESET]
assert at_preset.preset_draft_ns == at_preset.own_ns > 0 and at_preset.other_draft_ops == at_preset.unfit_ops == 0
