"""Write the research notebooks (`experiments/dcc_*.ipynb`, `experiments/pimflow_cnn.ipynb`,
`experiments/dse.ipynb`) from the cell sources below, without outputs.

    python experiments/make_notebooks.py          # rewrite them
    python experiments/make_notebooks.py --check  # exit 1 if a notebook differs from its source here

The notebooks hold little code: the systems, cases, paper numbers and
comparisons live in `experiments/dcc_figures.py` (tested in
tests/test_dcc_figures.py); `tests/test_notebooks.py` executes every
notebook.  Edit the cells here, not in the .ipynb.
"""
from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

SETUP = """\
import os, sys, time
ROOT = os.path.abspath("..") if os.path.basename(os.getcwd()) == "experiments" else os.getcwd()
sys.path.insert(0, ROOT)            # this checkout's pimjax and experiments/
import pandas as pd
import matplotlib.pyplot as plt
from experiments import dcc_figures as dcc
pd.set_option("display.width", 200); pd.set_option("display.max_colwidth", 120)
t_start = time.perf_counter()"""

SYSTEMS_MD = """\
**Systems.** DCC §V simulates an A100 beside PIM-enabled HBM3; its GPU model is 312 TFLOP/s FP16 and
3352 GB/s at 0.81 utilisation (five HBM3 cubes' worth of bandwidth; `dcc.md`) — in pimjax
`pimjax.hw.host.a100("hbm3")`, passed explicitly as every system's host here so that a change of a
preset's default host does not change these figures. DCC's trace generator models **one** HBM3 cube
(16 channels × 64 banks; `dcc.md`), so the PIM side is one cube:

* AttAcc: `get_backend("attacc", variant="bank-pc", stacks=1, host=a100("hbm3"))`.
* HBM-PIM: `get_backend("hbm-pim", channels=64, host=a100("hbm3"))` — Samsung's Aquabolt-XL (HBM2
  timing, 16 banks per pseudo-channel, one 16-lane FP16 unit per two banks): 64 pseudo-channels × 8
  units = 512 units, as many as DCC's HBM-PIM cube (16 channels × 64 banks, a unit per two banks).

**Residency** (DCC's kernel evaluation): the attention layer's GEMV keeps its matrix (the KV cache) in
PIM and the host writes the 128-element query per call; ATTN keeps K and V; RED / VA / RELU operands
come from the GPU and are rearranged into PIM every call. **Search**: the shipped predict-mode tuner
(the cost model's top-8 drafts and the backend's baseline lowered and simulated, the fastest kept), not
exhaustive search, to fit CI. **Averages** are geometric means over the cases."""


def fig67_cells() -> list[tuple[str, str]]:
    return [
        ("md", """\
# DCC Fig. 6 and Fig. 7: kernel speedups over the GPU and over the default mapping

DCC §V-A: AttAcc (Fig. 6: GEMV, RED, ATTN) and HBM-PIM (Fig. 7: GEMV, RED, VA, RELU), each with its
default mapping and with DCC's search, against the GPU, "varying the batch size, number of heads and
tensor sizes". The paper's text gives averages and a few single points, not the per-case bars, so we
compare averages. GEMV and ATTN use input (head) size 128 and 32 heads (Fig. 9's layer); the tensor
size is the output length (tokens). **Subset:** batch 1 and 4; GEMV outputs 512 and 2048, ATTN 512 and
1024, RED / VA / RELU lengths 1024, 2048, 4096 — the paper's full grids are not stated and a larger
grid does not fit the CI budget (ATTN at 4096 tokens alone compiles for about a minute)."""),
        ("md", SYSTEMS_MD),
        ("code", SETUP),
        ("md", "## Fig. 6: AttAcc"),
        ("code", """\
attacc = dcc.attacc_system()
print(attacc.name, attacc.variant, f"{attacc.n_groups} channels x {attacc.cores_per_group} units;",
      "host", attacc.system.host.name)
fig6 = dcc.sweep(attacc, dcc.fig6_cases())
fig6.drop(columns=["draft"]).round(3)"""),
        ("code", """\
fig, axes = plt.subplots(1, 2, figsize=(15, 3.8))
dcc.plot_cases(fig6, "Fig. 6 (pimjax): AttAcc over the GPU, per case", axes[0])
table6 = dcc.compare(dcc.summarise(fig6), dcc.PAPER_FIG6, dcc.WHY)
dcc.plot_compare(table6, "Fig. 6: DCC paper vs pimjax (averages)", axes[1])
plt.tight_layout(); dcc.save(fig, "dcc_fig6", fig6, table6); plt.show()
table6.round(3)"""),
        ("md", "## Fig. 7: HBM-PIM"),
        ("md", """\
pimjax's HBM-PIM baseline is the Samsung simulator's mapping (`pimjax.backends.baseline`). DCC's
HBM-PIM comparison point is AttAcc's data distribution (§V, comparison point 4); `attacc_ns` lowers
that distribution on HBM-PIM where it can run: RED. For GEMV it splits the query over the units of a
pseudo-channel, which HBM-PIM's broadcast register writes cannot do, and VA / RELU have no AttAcc
mapping (AttAcc has no units for them), so those rows say why in `attacc_note`."""),
        ("code", """\
hbm = dcc.hbm_pim_system()
print(hbm.name, f"{hbm.n_groups} pseudo-channels x {hbm.cores_per_group} units;", "host", hbm.system.host.name)
fig7 = dcc.sweep(hbm, dcc.fig7_cases(), attacc_distribution=True)
fig7.drop(columns=["draft"]).round(3)"""),
        ("code", """\
fig, axes = plt.subplots(1, 2, figsize=(15, 3.8))
dcc.plot_cases(fig7, "Fig. 7 (pimjax): HBM-PIM over the GPU, per case", axes[0])
table7 = dcc.compare(dcc.summarise(fig7), dcc.PAPER_FIG7, {**dcc.WHY, **dcc.WHY_FIG7})
dcc.plot_compare(table7, "Fig. 7: DCC paper vs pimjax (averages)", axes[1])
plt.tight_layout(); dcc.save(fig, "dcc_fig7", fig7, table7); plt.show()
table7.round(3)"""),
        ("md", """\
## Why the GPU comparisons differ: what DCC's own numbers imply about its GPU

`dcc.md` gives DCC's artifact's simulated cycles (0.769 ns) for a few cases. Dividing them into the
paper's speedups gives the GPU time the paper must have used, which we set beside the roofline of DCC's
stated GPU model (`a100("hbm3")`)."""),
        ("code", "dcc.implied_gpu_table().round(2)"),
        ("md", """\
DCC's trace generator models one cube, but §V's system has five PIM-enabled HBM3 devices. With AttAcc on
five cubes (`attacc_system(stacks=5)`, the same GPU) for a few Fig. 6 cases:"""),
        ("code", """\
five = dcc.sweep(dcc.attacc_system(stacks=5), [("gemv", 4, 2048), ("attn", 4, 512), ("red", 1, 4096)])
dcc.cubes_table(fig6, five).round(2)"""),
        ("md", """\
The baselines themselves also differ. DCC's artifact simulates AttAcc's RED baseline at (1, 4096) in 357
cycles and HBM-PIM's in 593 (`dcc.md`); ours, lowered and simulated with their breakdown:"""),
        ("code", """\
pd.DataFrame([dcc.baseline_breakdown(attacc, "red", 1, 4096), dcc.baseline_breakdown(hbm, "red", 1, 4096)]).round(1)"""),
        ("code", """\
print("misses and their modelling difference:")
for t in (table6, table7):
    for _, r in t[~t["within 25%"]].iterrows():
        print(f"- {r.kernel} {r.metric}: paper {r.paper:.2f}, ours {r.ours:.2f}. {r['why it differs']}")
print(f"notebook ran in {time.perf_counter() - t_start:.0f} s")"""),
    ]


def fig9_cells() -> list[tuple[str, str]]:
    return [
        ("md", """\
# DCC Fig. 9: DCC's gain over the default mapping as the batch grows

DCC §V-A: the GEMV of an attention layer with 32 heads and input size 128, various output sizes,
batch 1 → 8; DCC's speedup over HBM-PIM's and AttAcc's default mapping rises from 1.33 to 1.61
(HBM-PIM) and from 1.14 to 1.33 (AttAcc). **Subset:** output sizes 512 and 1024 (the paper's are not
stated), batches 1, 2, 4, 8; per batch the geometric mean over the output sizes."""),
        ("md", SYSTEMS_MD),
        ("code", SETUP),
        ("code", """\
systems = [dcc.attacc_system(), dcc.hbm_pim_system()]
fig9 = pd.concat([dcc.sweep(be, dcc.fig9_cases()) for be in systems], ignore_index=True)
fig9[["backend", "batch", "size", "pim_ns", "base_ns", "gpu_ns", "dcc_vs_base", "dcc_vs_gpu", "draft"]].round(3)"""),
        ("code", """\
t9 = dcc.fig9_table(fig9)
fig, ax = plt.subplots(figsize=(7, 3.5))
for b, g in t9.groupby("backend"):
    line, = ax.plot(g.batch, g.ours, "o-", label=f"pimjax {b}")
    known = g.dropna(subset=["paper"])
    ax.plot(known.batch, known.paper, "s--", color=line.get_color(), label=f"DCC paper {b} (end points)")
ax.set_xscale("log", base=2); ax.set_xlabel("batch"); ax.set_ylabel("speedup over the default mapping (x)")
ax.set_title("Fig. 9: GEMV, 32 heads, input 128"); ax.legend(fontsize=7)
dcc.save(fig, "dcc_fig9", fig9, t9); plt.show()
t9.round(3)"""),
        ("code", """\
for b, g in t9.groupby("backend"):
    g = g.set_index("batch")
    (p1, p8), (o1, o8) = g.paper[[1, 8]], g.ours[[1, 8]]
    hit = all(abs(o / p - 1) <= dcc.TOLERANCE for o, p in ((o1, p1), (o8, p8)))
    print(f"{b}: paper {p1:.2f} -> {p8:.2f} (x{p8 / p1:.2f}), ours {o1:.2f} -> {o8:.2f} (x{o8 / o1:.2f}); end points "
          + ("within 25 %" if hit else "miss") + f". Where the gains differ: {dcc.WHY_FIG9[b]}")
print(f"notebook ran in {time.perf_counter() - t_start:.0f} s")"""),
    ]


def table2_cells() -> list[tuple[str, str]]:
    return [
        ("md", """\
# DCC Table II: how often the predictor picks the optimal draft

DCC §V-D: for each case every draft is simulated (the true optimum) and the predictor's pick is
compared with it: #Best (the pick is optimal) and, over the misses, the geometric mean of optimum /
picked performance. `experiments/predictor_accuracy.py` computes the same table for pimjax's shipped
Flax cost model on held-out shapes (`pimjax.costmodel.evaluate`).

**Subset.** The full held-out set simulates every draft of ~90 cases (minutes to tens of minutes);
this notebook runs a stated subset that fits CI — per row the smallest held-out shapes: three of RED /
VA / RELU, one of GEMV and ATTN (`dcc.table2_cases`) — so its
totals are far below the paper's 167–304 cases per row, and the percentages carry that sampling
uncertainty. `python experiments/predictor_accuracy.py` runs the full set."""),
        ("code", SETUP),
        ("code", """\
cases = dcc.table2_cases()
pd.DataFrame(cases)"""),
        ("code", """\
results, table = dcc.table2_subset(cases)
table.round(4)"""),
        ("code", """\
side = dcc.table2_compare(table)
fig, axes = plt.subplots(1, 2, figsize=(12, 3.5))
for ax, col, label in ((axes[0], "best_frac", "#Best (fraction of cases)"),
                       (axes[1], "subopt", "suboptimal performance (misses)")):
    x = range(len(side))
    ax.bar([i - 0.2 for i in x], side[f"paper {col}"], 0.4, label="DCC paper")
    ax.bar([i + 0.2 for i in x], side[f"ours {col}"], 0.4, label="pimjax (subset)")
    ax.set_xticks(list(x), side.row, rotation=30, fontsize=7); ax.set_ylim(0.5, 1.02); ax.set_title(label)
axes[0].legend(fontsize=7); plt.tight_layout(); dcc.save(fig, "dcc_table2", table, side); plt.show()
side.round(4)"""),
        ("md", """\
**Where and why they differ.** The rows are different experiments: DCC's predictor is XGBoost ranking
its unpruned draft space, trained per kernel on shapes like the test shapes; pimjax's is a Flax model
ranking the pruned space (`pimjax.partition`), evaluated on held-out shapes it never saw, and a pick
less than one command-clock cycle from the optimum counts as best. Our subset is a few cases per row,
so one miss moves #Best by tens of percent. DCC's artifact (`dcc.md`) measured 15–19 % prediction error
and picks 1.00–1.12× slower than the best on its own splits; the `mape` column is ours."""),
        ("code", 'print(f"notebook ran in {time.perf_counter() - t_start:.0f} s")'),
    ]


DSE_SETUP = """\
import os, sys, time, warnings
ROOT = os.path.abspath("..") if os.path.basename(os.getcwd()) == "experiments" else os.getcwd()
sys.path.insert(0, ROOT)            # this checkout's pimjax and experiments/
import numpy as np
import pandas as pd
import matplotlib.pyplot as plt
from experiments import dse_sweeps as dse
warnings.simplefilter("ignore")     # the layer's float32 norms' PrecisionWarning, once per point
pd.set_option("display.width", 200); pd.set_option("display.max_colwidth", 80)
t_start = time.perf_counter()"""


def dse_cells() -> list[tuple[str, str]]:
    return [
        ("md", """\
# Design-space exploration: hardware and mapping searched together (issue #27)

`pimjax.explore(fn, *args, backends=...)` tunes every structural design point for itself (a fresh
predict-mode tuner: the cost model's top-8 drafts and the backend's baseline lowered and simulated per
op) and returns one row per point: time, PIM energy, the GPU-only time on the same memory system, the
placement and draft of every op. Four questions, each a sweep computed by `experiments/dse_sweeps.py`
and cached in `experiments/data/dse_*.jsonl` (the full sweeps take minutes; this notebook reads them and
recomputes one point of each to check the cache):

1. AttAcc's PIM level (bank / bank-group / buffer, power-constrained or not) on LLaMA-2 decode attention;
2. stacks × units per channel × GEMV-buffer size for a LLaMA-2-7B decode layer: the Pareto front of time
   against energy and a unit-count area proxy;
3. which PIM family for which model, all beside the same GPU;
4. how far the mapping tuned at the preset is from the mapping tuned at each point."""),
        ("code", DSE_SETUP),
        ("md", """\
## 1. AttAcc's PIM levels on LLaMA-2-7B decode attention

One HBM3 stack (16 channels; `attacc(variant=..., stacks=1)`), batch 1, 32 heads × 128, K / V resident
in PIM (`resident=("k_cache", "v_cache")`), at contexts 512 and 2048. A bank-level unit per bank (64
per channel), one per bank group (16) or one per pseudo-channel on the buffer die (2); "pc" spaces the
all-bank MACs by tCCD_AB = 6 cycles for the power budget, "npc" by 4. AttAcc's paper argues for the
bank level from the public simulator's runs; its attention rows (attacc.md, one stack, cycles of 0.769
ns) are set beside ours on the same shapes — ours is the tuned draft, the simulator runs its own
mapping."""),
        ("code", """\
levels = dse.load("levels")
levels["variant"] = levels["point"].str.split().str[-1]
levels["context"] = levels["point"].str.extract(r"L=(\d+)", expand=False).astype(int)
llama = levels[levels["point"].str.startswith("llama")]
t1 = llama.pivot_table(index="variant", columns="context", values="total_ns").rename(columns=lambda c: f"L {c} ns")
t1 = t1.join(llama[llama.context == 2048].set_index("variant")[["energy_pj", "speedup_gpu"]])
t1 = t1.loc[[v for v in ["bank-pc", "bank-npc", "bg-pc", "bg-npc", "buffer-pc", "buffer-npc"] if v in t1.index]]
t1["vs bank-pc (L 2048)"] = t1["L 2048 ns"] / t1.loc["bank-pc", "L 2048 ns"]
t1.round(3)"""),
        ("code", """\
tck = 1 / 1.3                                   # attacc.md: 1.3 GHz command clock
sim = pd.DataFrame(dse.ATTACC_SIM, columns=["variant", "heads", "context", "simulator cycles"])
sim["point"] = [f"sim h={h} L={c} {v}" for v, h, c, _ in dse.ATTACC_SIM]
sim = sim.merge(levels[["point", "total_ns"]], on="point")
sim["pimjax tuned cycles"] = sim["total_ns"] / tck
sim["pimjax / simulator"] = sim["pimjax tuned cycles"] / sim["simulator cycles"]
fig, axes = plt.subplots(1, 2, figsize=(13, 3.6))
t1[["L 512 ns", "L 2048 ns"]].div(1e3).plot.bar(ax=axes[0], rot=0)
axes[0].set_ylabel("attention µs (one layer)"); axes[0].set_title("pimjax: LLaMA-2-7B decode attention per level")
x = np.arange(len(sim)); lab = [f"{v}\\nh{h} L{c}" for v, h, c in zip(sim.variant, sim.heads, sim.context)]
axes[1].bar(x - 0.2, sim["simulator cycles"], 0.4, label="AttAcc simulator (its mapping)")
axes[1].bar(x + 0.2, sim["pimjax tuned cycles"], 0.4, label="pimjax (tuned draft)")
axes[1].set_xticks(x, lab, fontsize=7); axes[1].set_yscale("log"); axes[1].set_ylabel("PIM cycles")
axes[1].legend(fontsize=7); axes[1].set_title("the simulator's attention rows beside ours")
plt.tight_layout(); plt.show()
sim.drop(columns=["point", "total_ns"]).round(3)"""),
        ("code", """\
row, new = dse.check_sample("levels", "llama L=512 bg-npc")       # recomputed now: equals the cache
print(f"recomputed llama L=512 bg-npc: {new.total_ns:,.1f} ns (cached {row.total_ns:,.1f})")"""),
        ("md", """\
## 2. Stacks × units per channel × GEMV buffer: a LLaMA-2-7B decode layer

AttAcc (`dse.structural_point`): 1–5 HBM3 stacks, 64 / 16 / 2 units per channel (bank / bank-group /
buffer level, power-constrained), 4–32 GEMV-buffer entries of 32 B per unit (the preset: 16). One
decoder layer, batch 1, L 2048, weights and KV cache resident; the GPU-only baseline is an A100 on the
same stacks. Area proxy: the unit count (and the buffer bytes). The Pareto front is the set of points
no other point beats in both time and energy (★); with the unit count as a third objective the front
grows (○)."""),
        ("code", """\
st = dse.load("structure")
st = st[st["timing"].isna()].copy()
for k in ("stacks", "units", "buffer"):
    st[k] = st["point"].str.extract(rf"{k}=(\\d+)").astype(int)
st["total_units"] = st["stacks"] * 16 * st["units"]
st["buffer_kib"] = st["total_units"] * st["buffer"] * 32 / 1024
st["time_us"] = st["total_ns"] / 1e3; st["energy_uj"] = st["energy_pj"] / 1e6
st["front"] = dse.pareto(st, ["total_ns", "energy_pj"])
st["front_area"] = dse.pareto(st, ["total_ns", "energy_pj", "total_units"])
print(f"{len(st)} points, tuned in {st.tuning_s.sum():.0f} s in all when the sweep ran "
      f"({60 * len(st) / st.tuning_s.sum():.0f} points / min)")
pareto_table = st[st.front].sort_values("total_ns")[["point", "time_us", "energy_uj", "speedup_gpu", "total_units",
                                                      "buffer_kib"]]
pareto_table.round(3)"""),
        ("code", """\
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
st.pivot_table(index=["units", "buffer"], columns="stacks", values="time_us").round(1)"""),
        ("code", """\
row, new = dse.check_sample("structure", "stacks=2,units=16,buffer=8")   # recomputed now: equals the cache
print(f"recomputed stacks=2,units=16,buffer=8: {new.total_ns:,.1f} ns in {new.tuning_s:.1f} s "
      f"(cached {row.total_ns:,.1f} ns)")"""),
        ("md", """\
## 3. Which PIM family for which model, beside the same GPU

Every family's preset with the same A100 (DCC's GPU model, `a100("hbm3")`) as the GPU-only baseline and
as the processor of the ops left off PIM: HBM-PIM (64 pseudo-channels), AttAcc (5 stacks), Newton (16 of
32 GDDR6 channels with PIM) and UPMEM (2048 DPUs; its preset has no separate GPU, so the A100 is its
host — an assumption). Models: LLaMA-2-7B and GPT-3 13B decode layers (batch 1, L 2048) and the
BERT-base encoder (64 tokens, batch 1: GEMMs, not GEMVs). `speedup_gpu` is the GPU-only time over the
time with each op where it is faster (`placement="auto"`). Each row's `tuning_s` is the time its point took
to tune when the cache was written (`python experiments/dse_sweeps.py --only families` recomputes missing rows)."""),
        ("code", """\
fam = dse.load("families")
fam["model"] = fam["point"].str.split(" on ").str[0]; fam["family"] = fam["point"].str.split(" on ").str[1]
fam["pim ops"] = fam["placements"].str.count("@pim") + fam["placements"].str.count("@md-dp")
t3 = fam.pivot_table(index="model", columns="family", values="speedup_gpu")
ax = t3.plot.bar(figsize=(9, 3.5), rot=0); ax.axhline(1, color="k", lw=0.6)
ax.set_ylabel("speedup over the A100 alone"); ax.set_title("which family for which model"); plt.show()
best = t3.idxmax(axis=1).rename("best family").to_frame().join(t3.max(axis=1).rename("speedup"))
display(t3.round(3)); best.round(3)"""),
        ("md", """\
## 4. The preset's mapping moved to every point

Each point of sweep 2 again: its PIM ops' own drafts (tuned at the point) against the drafts tuned at
the preset structure (one stack, 64 bank-level units per channel, 16 buffer entries), both lowered and
simulated at the point (steady state, the placement of appended KV rows not charged). An op whose
preset draft does not fit the point (more groups or cores than it has, a buffer too small) is counted
as unfit: the preset's mapping cannot run there at all."""),
        ("code", """\
tr = dse.load("transfer")
for k in ("stacks", "units", "buffer"):
    tr[k] = tr["point"].str.extract(rf"{k}=(\\d+)").astype(int)
tr["preset draft / own"] = tr["preset_draft_ns"] / tr["own_ns"]
fig, ax = plt.subplots(figsize=(8, 3.5))
for (u, b), g in tr[tr.buffer.isin([4, 16])].groupby(["units", "buffer"]):
    g = g.sort_values("stacks"); ax.plot(g.stacks, g["preset draft / own"], "o-", label=f"{u} units, buffer {b}")
ax.axhline(1, color="k", lw=0.6); ax.set_xlabel("stacks"); ax.set_ylabel("preset's drafts / point's own (time)")
ax.set_title("how far the preset's mapping is from each point's"); ax.legend(fontsize=7); plt.show()
tr.pivot_table(index=["units", "buffer"], columns="stacks", values="preset draft / own").round(3)"""),
        ("code", """\
tr.pivot_table(index=["units", "buffer"], columns="stacks", values="unfit_ops", aggfunc="sum")"""),
        ("code", 'print(f"notebook ran in {time.perf_counter() - t_start:.0f} s")'),
    ]


def pimflow_cells() -> list[tuple[str, str]]:
    """PIMFlow (CNNs on GPU + PIM): its simulator row by row, Fig. 9, Table 2, Fig. 12, Fig. 13 (issue 41)."""
    return [
        ("md", """\
# PIMFlow: CNN inference on a GPU + PIM memory (Fig. 9, Table 2, Fig. 12, Fig. 13)

PIMFlow (`../shared/papers/pimflow-cnn-gpu-pim.txt` §4–§6) runs a CNN's CONV / FC layers on an RTX 2060
and Newton PIM units *at the same time*: 16 of a 32-channel GDDR6 memory are PIM-enabled, the GPU keeps
the other 16. Per layer it chooses GPU, PIM, an MD-DP split (10 % steps) or a pipelined subgraph
(Algorithm 1). Here the same search (`pimjax.search.mixed.execution_mode_search`) on pimjax's models,
with each side timed as PIMFlow's own artifact times it:

* **PIM**: PIMFlow's mapping (`pimjax/backends/newton/packed.py`: the filter resident in the banks,
  output pixels packed into each 1 KB buffer load with the filter repeated along the bank row,
  channel groups, partial sums where a layer has few output blocks), every channel-group choice of
  every layer share timed on its Ramulator fork's controller (`newton(simulator="pimflow")`,
  `backends/newton/fork.py`), the fastest kept. The first section holds it to the artifact's own
  cycles.
* **GPU**, two models side by side: PIMFlow's simulated RTX 2060 (`gpu="pimflow"`,
  `hw.host.pimflow_rtx2060`: the artifact's Accel-Sim configuration, 1 365 MHz, 5 000-cycle launch,
  cuDNN's tensor-core tiles, a TVM epilogue kernel after each product, 28 GB/s and 256 KB of L2 per
  channel) and pimjax's default "occupancy" model. The baseline GPU has all 32 channels, the GPU beside
  PIM the 16 GPU-only ones.
* **Configurations**: Newton++ (4 global buffers + GWRITE latency hiding) for every mode but Newton+
  (one buffer, no hiding), as the paper's Fig. 9. Layers from `pimjax.models.cnn` (224 × 224, batch 1).

The per-layer times come from `experiments/data/pimflow_layers.json` (`python experiments/pimflow.py
--recompute --energy` recomputes both caches in about 5 minutes); this notebook recomputes samples to
check them."""),
        ("code", """\
import os, sys, time
ROOT = os.path.abspath("..") if os.path.basename(os.getcwd()) == "experiments" else os.getcwd()
sys.path.insert(0, ROOT)
import numpy as np, pandas as pd
import matplotlib.pyplot as plt
from experiments import pimflow as pf
from pimjax.studies import pimflow as pfm
pd.set_option("display.width", 200); pd.set_option("display.max_colwidth", 200)
t_start = time.perf_counter()
data = pf.load_cache()
GPUS = pfm.GPU_BASELINES
models = [m for m in pfm.MODELS if pf.cache_key(m, pfm.PIM_CHANNELS) in data["layers"]]
print("cached:", len(data["layers"]), "model configurations | settings:", data["meta"]["pim"])"""),
        ("md", """\
## PIMFlow's own simulator, layer by layer

`../shared/reference/pimflow.csv`: the artifact's command generator and Ramulator fork run on eight
layers of the five CNNs under its four configurations, cycles of the slowest of the 16 PIM channels
(DRAM clock) and that channel's commands. Ours: the same mapping lowered by pimjax
(`backends/newton/reference.py`) and timed by `sim.cycles` on the fork's controller
(`experiments/pimflow_reference.py` prints the same table; a row passes within 10 %)."""),
        ("code", """\
import csv
from experiments import pimflow_reference
path = os.path.join(ROOT, "..", "shared", "reference", "pimflow.csv")
if os.path.exists(path):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    table, bad = pimflow_reference.check(rows, 0.10, out=open(os.devnull, "w"))
    ref = pd.DataFrame(table)
    for k in pimflow_reference.COUNTS:
        ref[k] = ref[f"{k}_ours"].astype(float) / ref[f"{k}_theirs"].astype(float)
    print(f"{len(ref)} rows, {bad} outside 10 %; cycles ours / theirs {(ref.ours / ref.theirs).min():.4f} .. "
          f"{(ref.ours / ref.theirs).max():.4f}; command counts ours / theirs "
          f"{ref[list(pimflow_reference.COUNTS)].min().min():.3f} .. {ref[list(pimflow_reference.COUNTS)].max().max():.3f}")
    assert bad == 0
    display(ref[["layer", "config", "theirs", "ours", "error", "channel_groups"] + list(pimflow_reference.COUNTS)].round(4))
else:
    print("../shared/reference/pimflow.csv is not beside the repository")"""),
        ("md", """\
## The GPU baselines

Per model, the GPU alone on all 32 channels (the "vs GPU" baseline) and on the 16 GPU-only channels
(beside PIM), under both GPU models (`pf.gpu_totals`): the CONV / FC nodes as PIMFlow's per-layer
profiles time them, and the network as one run. PIMFlow's README gives MobileNet-V2's: 1 064 µs for the
CONV nodes (`-m=stat --conv_only`: 1.365 × 388 549.76 / 0.365 cycles at 1 365 MHz) and 1 059 µs end to
end (`GPU CYCLE: 1445620`)."""),
        ("code", """\
tot = pf.gpu_totals()
display(tot.round(2))
mb = tot[(tot.model == "mobilenet-v2") & (tot.gpu == "pimflow")].iloc[0]
print(f"MobileNet-V2 on PIMFlow's GPU: CONV nodes {mb.conv_us_32:.0f} us ({mb.conv_us_32 / 1064 - 1:+.0%} of 1 064), "
      f"network {mb.e2e_us_32:.0f} us ({mb.e2e_us_32 / 1059 - 1:+.0%} of 1 059)")"""),
        ("md", """\
**The cache, recomputed on a sample.** Three layers of MobileNet-V2 (the smallest candidate CONV, the
head's 1x1 CONV and the FC) and one depthwise layer: the GPU times from each GPU model and the
whole-layer PIM times (Newton++ and Newton+) from PIMFlow's mapping on the fork again, which must equal
the cached ones."""),
        ("code", """\
from pimjax.models import cnn
from pimjax.sim.host import host_time
table = cnn.cnn_layers("mobilenet-v2")
cand = table[table.pim_candidate]
sample = [int(cand[cand.kind == "conv"].sort_values("macs").index[0]), int(cand.index[-2]), int(cand.index[-1]),
          int(table.index[table.kind == "dwconv"][0])]
rows = []
for gpu in GPUS:
    backend, plus = pfm.backend_for(pfm.PIMFLOW_CONFIG, gpu=gpu), pfm.backend_for("newton+", gpu=gpu)
    recs = data["layers"][pf.cache_key("mobilenet-v2", pfm.PIM_CHANNELS, gpu)]
    for i in sample:
        row = table.iloc[i].to_dict(); op, shapes = pfm.layer_op(row); r = recs[i]
        g = lambda h: float(host_time(op, h, shapes, 2)) + pfm.profile_layout_ns(h, op, shapes)
        pim = pfm.pim_time(op, shapes, backend)[0] if r["candidate"] else float("nan")
        npl = pfm.pim_time(op, shapes, plus)[0] if r["candidate"] else float("nan")
        rows.append(dict(gpu_model=gpu, layer=r["name"], gpu_ns=g(backend.system.gpu), cached_gpu=r["gpu_ns"],
                         cogpu_ns=g(backend.system.cogpu), cached_cogpu=r["cogpu_ns"], pim_ns=pim,
                         cached_pim=r["variants"]["rows"]["pim"][0] if r["candidate"] else float("nan"),
                         newtonp_ns=npl, cached_newtonp=r["newton+"]["ns"] if r["candidate"] else float("nan")))
check = pd.DataFrame(rows)
assert np.allclose(check.gpu_ns, check.cached_gpu, rtol=1e-9) and np.allclose(check.cogpu_ns, check.cached_cogpu, rtol=1e-9)
assert np.allclose(check.pim_ns, check.cached_pim, rtol=1e-9, equal_nan=True)
assert np.allclose(check.newtonp_ns, check.cached_newtonp, rtol=1e-9, equal_nan=True)
check.round(0)"""),
        ("md", """\
**PIMFlow's mapping against full simulation and against pimjax's own search** (`pf.validate`, stored in
the cache): `pim_time` (the best packed draft, timed from its channels' templates) equals its program
lowered and simulated; pimjax's tuner (its cost model's top 8 tilings, the packed drafts and the
baseline, with the filter and with the activations in the banks) finds faster programs on the same
controller (a negative gap). The reproduction keeps PIMFlow's mapping: it is the paper's."""),
        ("code", """\
val = pd.DataFrame(data.get("validation", []))
if len(val):
    display(val[["name", "shape", "est_ns", "sim_ns", "rel_err", "tuned_ns", "tuned_matrix", "gap", "est_s", "tune_s"]].round(3))
    assert (val.rel_err.abs() < 1e-6).all()
else:
    print("no validation stored: python experiments/pimflow.py --validate 4")"""),
        ("md", """\
## Fig. 9: CONV layers and end to end, normalised to the GPU

Time / GPU-baseline time (lower is better) under each GPU model. CONV: the PIM-candidate CONV layers (a
pipelined segment that holds one counts whole). The paper's text gives only a few of Fig. 9's bars:
PIMFlow's CONV speedup for ENetB0 (43 %) and VGG16 (17 %), their end-to-end speedups (+27 % and +5 % on
top: 70 % and 22 %), the means over the models (CONV 30 %, end to end 34 %) and 38 / 41 / 43 % for
PIMFlow-md / -pl / PIMFlow averaged over ENetB0, MBNetV2 and MnasNet (end to end). "Speedup s" is read
as T_GPU / T = 1 + s. Stars: the paper's PIMFlow values where given."""),
        ("code", """\
inv = {v: k for k, v in pf.LABELS.items()}
fig, axes = plt.subplots(2, 2, figsize=(13, 6.4))
f9 = {}
for row_axes, gpu in zip(axes, GPUS):
    df = pf.fig9(data, models, gpu); f9[gpu] = df
    wide = df.pivot(index="model", columns="mode", values=["conv", "e2e"])
    for ax, col, paper in ((row_axes[0], "conv", pf.PAPER["conv_speedup"]), (row_axes[1], "e2e", pf.PAPER["e2e_speedup"])):
        labels = [pf.LABELS[m] for m in models]; x = np.arange(len(labels))
        for j, mode in enumerate(pfm.MODES):
            ax.bar(x + (j - 2) * 0.16, [wide.loc[l, (col, mode)] for l in labels], 0.16, label=mode)
        for k, l in enumerate(labels):
            if inv[l] in paper:
                ax.plot(x[k] + 0.4, 1 / (1 + paper[inv[l]]), "k*", ms=10)
        ax.axhline(1.0, color="grey", lw=0.8); ax.set_xticks(x, labels); ax.set_yscale("log")
        ax.set_title(f"{col}: time / GPU ({gpu} GPU model)")
axes[0][0].legend(fontsize=7); plt.tight_layout(); plt.show()
for gpu in GPUS:
    print(f"GPU model {gpu!r}:")
    display(f9[gpu].pivot(index="model", columns="mode", values=["conv", "e2e"]).round(3))"""),
        ("code", """\
for gpu in GPUS:
    print(f"PIMFlow's speedups beside the paper's, GPU model {gpu!r}:")
    display(pf.fig9_vs_paper(f9[gpu]).round(3))"""),
        ("md", """\
**Against the paper, with PIMFlow's GPU** (the bands of issue 41's acceptance: the paper's sign on
every model; ENetB0 and VGG16 within 15 points of +70 % and +22 %; the mobile mean within 15 points of
+43 %; Table 2's split share within 15 points of 58 %):"""),
        ("code", """\
g = f9["pimflow"].set_index(["model", "mode"])
sp = {m: 1 / g.loc[(pf.LABELS[m], "PIMFlow"), "e2e"] - 1 for m in models}
t2p = pf.table2(data, models, gpu="pimflow")
split_share = t2p.ours[(t2p.gpu_ratio > 0) & (t2p.gpu_ratio < 1)].sum()
mobile = np.mean([sp[m] for m in ("efficientnet-b0", "mobilenet-v2", "mnasnet1_0")])
acc = pd.DataFrame([
    dict(figure="PIMFlow e2e speedup > 0 on every model", ours=min(sp.values()), paper=0.0, band=None,
         holds=all(v > 0 for v in sp.values())),
    dict(figure="ENetB0 e2e speedup", ours=sp["efficientnet-b0"], paper=0.70, band=0.15,
         holds=abs(sp["efficientnet-b0"] - 0.70) <= 0.15),
    dict(figure="VGG16 e2e speedup", ours=sp["vgg-16"], paper=0.22, band=0.15, holds=abs(sp["vgg-16"] - 0.22) <= 0.15),
    dict(figure="mobile mean e2e speedup (ENetB0, MBNetV2, MnasNet)", ours=mobile, paper=0.43, band=0.15,
         holds=abs(mobile - 0.43) <= 0.15),
    dict(figure="Table 2: share of candidates split", ours=split_share, paper=0.58, band=0.15,
         holds=abs(split_share - 0.58) <= 0.15)])
acc["miss_pp"] = 100 * (acc.ours - acc.paper)
acc.round(3)"""),
        ("md", """\
**What reproduces and what does not.**

* **The PIM side is the artifact's**: every row of `pimflow.csv` within 0.22 % with every command
  count exact, and on the five CNNs' 93 distinct CONV / FC layers × 4 configurations within −0.6 /
  +3.8 % of an independent port of the artifact (`backends/newton/README.md`); COMP counts differ only
  where the artifact's partial-sum split drops products.
* **The GPU model decides the sign.** With PIMFlow's simulated RTX 2060 every model gains and the mean
  end-to-end speedup is near the paper's 34 %; with pimjax's occupancy model (a roofline of the real
  card's peaks, the convolutions' im2col operands streamed) every PIM mode is slower than the GPU: the
  reversal of the earlier reproduction was the GPU model, as the artifact's layer data said.
* **Where ours misses the bands**: the mobile CNNs gain more than the paper and VGG16 less. The
  artifact's README gives one per-layer check: MobileNet-V2's CONV nodes (its conv-only statistic,
  depthwise CONVs included) speed up 1.365× under Newton++ and 1.48× under PIMFlow, ours 1.55× and
  1.63× from the same per-layer PIM cycles (the table below computes them), so our GPU gives its
  PIM-candidate layers ~35 % more time to lose than Accel-Sim did while the CONV total matches
  (+3.5 %). The tile model is the assumption behind it: cuDNN's three large Turing tiles keep the
  late 7 × 7 / 14 × 14 layers (m = 49 / 196 pixels) on 1–2 SMs (57 µs for 7 × 7 × 960 → 160, PIM 13 µs),
  where split-K variants would cut them but would also take the network time to −39 % of the README's
  (outside its band) and ENetB0 to +33 %. Without the artifact's per-layer GPU cycles (its `data.zip`
  on Zenodo, out of reach here) or measured cuDNN kernels (`benchmarks/gpu_kernels.py`, ready for a GPU)
  the distribution cannot be pinned; VGG16's 3 × 3 CONVs need the simulated GPU ~2× slower than peak
  for MD-DP to pay (its PIM share takes ~10× the GPU's time here)."""),
        ("code", """\
recs = data["layers"][pf.cache_key("mobilenet-v2", pfm.PIM_CHANNELS)]
res = pfm.run_modes("mobilenet-v2", recs)
conv_nodes = sum(r["gpu_ns"] for r in recs if r["kind"] in ("conv", "dwconv", "fc"))
rows = []
for mode, readme in (("Newton++", 1.365), ("PIMFlow-md", 1.436), ("PIMFlow-pl", 1.413), ("PIMFlow", 1.481)):
    saved = res["GPU"]["conv_" + mode] - res[mode]["conv_ns"]
    rows.append(dict(mode=mode, ours=conv_nodes / (conv_nodes - saved), artifact_readme=readme, saved_us=saved / 1e3,
                     artifact_saved_us=(1 - 1 / readme) * 1064))
pd.DataFrame(rows).round(3)"""),
        ("code", """\
per_layer = []
for gpu in GPUS:
    for m in models:
        for r in data["layers"][pf.cache_key(m, pfm.PIM_CHANNELS, gpu)]:
            if r.get("variants"):
                per_layer.append(dict(gpu_model=gpu, model=pf.LABELS[m], layer=r["name"], K=r["K"],
                                      gpu_beside_ns=r["cogpu_ns"], pim_ns=r[pfm.PIMFLOW_CONFIG]["ns"],
                                      newtonp_ns=r["newton+"]["ns"]))
per_layer = pd.DataFrame(per_layer)
per_layer["pim / gpu beside"] = per_layer.pim_ns / per_layer.gpu_beside_ns
display(per_layer.groupby(["gpu_model", "model"])["pim / gpu beside"].describe()[["count", "25%", "50%", "75%"]].round(2))
print("candidates where PIM beats the GPU beside it (whole layers, Newton++):",
      per_layer.groupby("gpu_model").apply(lambda d: f"{int((d['pim / gpu beside'] < 1).sum())} of {len(d)}").to_dict())"""),
        ("md", """\
## Table 2: MD-DP split ratios of the PIM-candidate layers

Share of the PIM-candidate layers (all models pooled) at each GPU share of PIMFlow-md's plan, beside
the paper's Table 2 (58 % split, 41 % wholly on PIM, 0 % wholly on the GPU), under each GPU model.
Then which split each candidate takes (output rows or output channels)."""),
        ("code", """\
for gpu in GPUS:
    t2 = pf.table2(data, models, gpu=gpu)
    split = t2[(t2.gpu_ratio > 0) & (t2.gpu_ratio < 1)][["ours", "paper"]].sum()
    print(f"{gpu}: split ours {split.ours:.0%} (paper {split.paper:.0%}); wholly on PIM ours {t2.ours.iloc[0]:.0%} "
          f"(paper {t2.paper.iloc[0]:.0%}); wholly on the GPU ours {t2.ours.iloc[-1]:.0%} (paper {t2.paper.iloc[-1]:.0%})")
    display(t2.set_index("gpu_ratio").T.round(3))
pf.split_variants(data, models)"""),
        ("md", """\
## Fig. 12: energy, normalised to the GPU (PIMFlow's GPU)

Energy / GPU-baseline energy per model and mode (`experiments/data/pimflow_energy.json`, filled by
`python experiments/pimflow.py --energy` from the time cache: the plans are the time-optimal ones of
Fig. 9 on PIMFlow's GPU, energy plays no part in choosing them). GPU: `hw.gpu.gpu_energy_pj` (AttAcc's
GPU energy table, its HBM memory path reused for GDDR6 — an assumption; one L2 / L1 pass per byte, a
lower bound on chip); static power not modelled (no source gives the RTX 2060's). PIM: the program
behind each plan's PIM time (PIMFlow's packed draft) lowered and simulated on the fork's controller,
`CycleReport.energy_pj` from the preset's per-command energies (AttAcc's FGDRAM per-bit figures).
The paper gives only means over the five CNNs (Newton++ 18 %, PIMFlow 26 % less than the GPU).

Ours spends *more* energy than the GPU wherever a plan runs CONV work on PIM: PIMFlow's mapping
activates a row of all 16 banks for every run of units and re-reads the repeated filter copies for
every pixel block, and each activation and column read carries the FGDRAM per-bit energy, where the
GPU reads the filter once. The FC layers with resident weights still save (BERT 1 × 3). The paper's
PIM energy (CACTI 7, parameters from [54]) is not in our sources; the per-layer table shows where the
PIM energy goes."""),
        ("code", """\
energy = pf.load_cache(pf.ENERGY_CACHE)
f12 = pf.fig12(energy)
emodels = [pf.LABELS[m] for m in pf.ENERGY_MODELS if pf.cache_key(m, pfm.PIM_CHANNELS) in energy["models"]]
modes = ("GPU",) + pfm.MODES
fig, ax = plt.subplots(figsize=(12, 3.6)); x = np.arange(len(emodels))
for j, mode in enumerate(modes):
    gg = f12[f12["mode"] == mode].set_index("model").loc[emodels]
    ax.bar(x + (j - 2.5) * 0.14, gg.energy, 0.14, label=mode)
for mode in ("Newton++", "PIMFlow"):
    ax.axhline(1 - pf.PAPER_ENERGY["saving_vs_gpu"][mode], ls=":", color="k" if mode == "PIMFlow" else "grey", lw=1,
               label=f"paper: {mode}, mean of the 5 CNNs")
ax.axhline(1.0, color="grey", lw=0.8); ax.set_xticks(x, emodels); ax.set_ylabel("energy / GPU"); ax.set_yscale("log")
ax.legend(fontsize=7, ncol=2); plt.tight_layout(); plt.show()
display(f12.pivot(index="model", columns="mode", values="energy")[list(modes)].loc[emodels].round(3))
display(pf.fig12_vs_paper(f12).round(3))
display(pf.layer_energy(energy).round(3))"""),
        ("md", """\
**The energy cache, recomputed on a sample**: MobileNet-V2's smallest cached whole-layer PIM program
(the draft picked again, lowered and simulated; its time must equal the time cache's, its energy the
cached one)."""),
        ("code", """\
e_mb = energy["models"][pf.cache_key("mobilenet-v2", pfm.PIM_CHANNELS)]
tab = pfm.model_table("mobilenet-v2")
its = {k: v for k, v in e_mb["pim_items"].items() if k.split("|")[2] == "whole" and k.split("|")[1] == pfm.PIMFLOW_CONFIG}
key = min(its, key=lambda k: its[k]["sim_ns"])
name, config, var, share, placement = key.split("|")
op, shapes = pfm.layer_op(tab[tab.name == name].iloc[0].to_dict())
got = pfm.pim_energy(op, shapes, pfm.backend_for(config), placement)
assert np.isclose(got["ns"], its[key]["cached_ns"], rtol=1e-9) and np.isclose(got["pj"], its[key]["pj"], rtol=1e-6)
print(f"{key}: {got['ns']:,.0f} ns (cached {its[key]['cached_ns']:,.0f}), {got['pj'] / 1e6:,.2f} uJ (cached {its[key]['pj'] / 1e6:,.2f})")"""),
        ("md", """\
## Fig. 13: GPU / PIM channel division

End-to-end time / GPU baseline (all 32 channels) for 8, 16 and 24 PIM channels of 32 (ENetB0 and
ResNet50, the models the paper's text discusses; row splits only), under each GPU model. The paper
finds PIMFlow best at 16 PIM channels, and Newton+ hurt more by the lost GPU channels."""),
        ("code", """\
fig, axes = plt.subplots(1, 2, figsize=(11, 3.2))
for ax, gpu in zip(axes, GPUS):
    f13 = pf.fig13(data, gpu=gpu)
    for (m, mode), gg in f13.groupby(["model", "mode"]):
        ax.plot(gg.pim_channels, gg.e2e, "o-" if mode == "PIMFlow" else "s--", label=f"{m} {mode}")
    ax.set_xlabel("PIM channels (of 32)"); ax.set_ylabel("time / GPU"); ax.axhline(1, color="grey", lw=0.8)
    ax.set_title(f"{gpu} GPU model"); ax.legend(fontsize=7)
    print(gpu); display(f13.pivot(index=["model", "mode"], columns="pim_channels", values="e2e").round(3))
plt.tight_layout(); plt.show()"""),
        ("md", """\
## BERT-base's FC layers (PIMFlow §6.4)

BERT-base (`pimjax.models.cnn`, 12 layers, d 768, FFN 3072) at 1 × 3 and 1 × 64 tokens: its FC layers
(Q, K, V, O, FFN up / down) are the PIM candidates; attention matmuls, softmax, norms and adds stay on
the GPU. The paper: PIMFlow performs the same as Newton++ at 1 × 3 and gives 32 % extra speedup over
Newton++ at 1 × 64 by running the FC layers in MD-DP mode."""),
        ("code", """\
for gpu in GPUS:
    bt = pf.bert(data, gpu=gpu)
    print(gpu); display(bt.set_index("model").T.round(3)) if len(bt) else print("BERT not cached")"""),
        ("md", """\
## Fig. 14: the Newton++ command optimisations

GWRITE latency hiding and multiple global buffers, each alone and together, against Newton+ (paper: 9 %,
14 % and 22 %), on MobileNet-V2's 20 distinct PIM-candidate CONV shapes, from the cache of
`experiments/pimflow_fig14.py` (pimjax's own DRAM model and tilings; `--recompute` re-measures).
On the artifact's controller and mapping, the same four configurations are the columns of
`pimflow.csv` (first section)."""),
        ("code", """\
from experiments.pimflow_fig14 import fig14_table
display(fig14_table())"""),
        ("code", 'print(f"notebook ran in {time.perf_counter() - t_start:.0f} s")'),
    ]


def broad_cells() -> list[tuple[str, str]]:
    return [
        ("md", """\
# The cost model on shapes and hardware it never saw (issue #29)

`experiments/broad_accuracy.py` labels sampled drafts of the broad held-out set
(`pimjax.costmodel.broad.broad_cases("heldout")`: LLaMA-2 13B / 33B / 70B GEMVs up to 28 672 × 8 192,
decode attention, elementwise ops, VGG-16 convolutions, each on the preset and on structural hardware
variants no model was trained on) and compares the shipped models' predicted cycles with the simulated
ones. Labelling them takes tens of minutes, so this notebook plots the cached result
(`experiments/data/broad_accuracy.json`) and re-checks a sample: three cached drafts are featurised and
predicted again, and the smallest is lowered and simulated again."""),
        ("code", """\
import json, os, sys, time
ROOT = os.path.abspath("..") if os.path.basename(os.getcwd()) == "experiments" else os.getcwd()
sys.path.insert(0, ROOT)
import numpy as np
import pandas as pd
import matplotlib.pyplot as plt
t_start = time.perf_counter()
with open(os.path.join(ROOT, "experiments", "data", "broad_accuracy.json")) as f:
    data = json.load(f)
table = pd.DataFrame(data["table"])
table[table.kernel == "all"].round(3)"""),
        ("code", """\
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
table[table.kernel != "all"].round(3)"""),
        ("code", """\
# re-check a sample against the current code: the prediction from the cached draft, and one simulation
from pimjax.costmodel import dataset as ds
from pimjax.costmodel.broad import backend_of
from pimjax.costmodel.kernels import make_case
from pimjax.costmodel.predictor import load_default
from pimjax.partition.generate import lane_candidates
from pimjax.costmodel.features import features_table
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
        print(f"  simulated again: {sim:,.0f}")"""),
        ("code", 'print(f"notebook ran in {time.perf_counter() - t_start:.0f} s")'),
    ]


NOTEBOOKS = {"dcc_fig6_fig7_kernels.ipynb": fig67_cells, "dcc_fig9_batch.ipynb": fig9_cells,
             "dcc_table2.ipynb": table2_cells, "pimflow_cnn.ipynb": pimflow_cells, "dse.ipynb": dse_cells,
             "costmodel_broad.ipynb": broad_cells}


def build(cells):
    import nbformat
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_markdown_cell(src) if kind == "md" else nbformat.v4.new_code_cell(src)
                for kind, src in cells]
    for i, c in enumerate(nb.cells):      # stable ids: regenerating gives the same file
        c["id"] = f"cell-{i}"
    return nb


def main(argv=None) -> int:
    import nbformat
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="exit 1 when a notebook differs from its source")
    args = ap.parse_args(argv)
    stale = []
    for name, cells in NOTEBOOKS.items():
        path = os.path.join(HERE, name)
        text = nbformat.writes(build(cells()))
        if args.check:
            if not os.path.exists(path) or open(path).read() != text:
                stale.append(name)
        else:
            with open(path, "w") as f:
                f.write(text)
    if stale:
        print("stale notebooks (run python experiments/make_notebooks.py):", ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
