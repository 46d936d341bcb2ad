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
    """PIMFlow (CNNs on GPU + PIM): Fig. 9, Table 2, Fig. 12, Fig. 13 from experiments/pimflow.py's caches."""
    return [
        ("md", """\
# PIMFlow: CNN inference on a GPU + PIM memory (Fig. 9, Table 2, Fig. 12, Fig. 13)

PIMFlow (`../shared/papers/pimflow-cnn-gpu-pim.txt` §4–§6) runs a CNN's CONV / FC layers on an RTX 2060
and Newton PIM units *at the same time*: 16 of a 32-channel GDDR6 memory are PIM-enabled, the GPU keeps
the other 16. Per layer it chooses GPU, PIM, an MD-DP split (10 % steps) or a pipelined subgraph
(Algorithm 1). Here the same search (`pimjax.search.mixed.execution_mode_search`) on pimjax's models:

* **System**: `pf.backend_for(config)` = `hw.presets.newton_config(config, channels=16,
  total_channels=32)`: PIMFlow's Newton++ (4 global buffers + GWRITE latency hiding, which the 16
  GPU-only channels allow) for every mode but Newton+, which runs on Newton+ (one buffer, no hiding),
  as in the paper. The GPU baseline is the RTX 2060 (`hw.host.rtx2060`, "occupancy" kernel model) on
  all 32 channels, the GPU beside PIM on the 16 GPU-only ones.
* **Layers**: `pimjax.models.cnn` (224 × 224, batch 1, fp16): each CONV / DW / FC traced alone.
* **PIM time**: the closed-form command walk (`backends/newton/time.py`) + refresh + host merge over a
  sampled cut of the draft space, not tuning by full simulation (5–135 s per layer; this is ~100
  layers × 19 shares × 2 placements). Validated below against lowering + full simulation.
* **Placement** (which operand stays in the banks, the lowering option `matrix=`): every layer and
  every MD-DP share is timed with the input activations in the banks (pimjax's default where they are
  the larger operand) and with the filter there (PIMFlow §2.2: filters placed in advance, resident;
  the activations streamed through GWRITE); the faster is kept and named in the cache.
* **MD-DP** along output rows (no merge copy: PIMFlow's memory optimiser) or output channels (one copy
  of the output to interleave the two parts in NHWC), the better per node.
* **Modes**: Newton+ and Newton++ (whole layers on PIM where faster, on their configurations),
  PIMFlow-md, PIMFlow-pl (the 1x1-DW, DW-1x1, 1x1-DW-1x1 subgraphs of `cnn.find_patterns`, 2 stages),
  PIMFlow (both), the last three on Newton++.

The per-layer times come from `experiments/data/pimflow_layers.json` (`python experiments/pimflow.py`
recomputes it, ~40 min in one process on the shared 2-core box); this notebook recomputes a sample of layers to check it."""),
        ("code", """\
import os, sys, time
ROOT = os.path.abspath("..") if os.path.basename(os.getcwd()) == "experiments" else os.getcwd()
sys.path.insert(0, ROOT)
import numpy as np, pandas as pd
import matplotlib.pyplot as plt
from experiments import pimflow as pf
pd.set_option("display.width", 200); pd.set_option("display.max_colwidth", 200)
t_start = time.perf_counter()
data = pf.load_cache()
models = [m for m in pf.MODELS if pf.cache_key(m, pf.PIM_CHANNELS) in data["layers"]]
print("cached:", sorted(data["layers"]), "| settings:", data["meta"])"""),
        ("md", """\
**The cache, recomputed on a sample.** Three layers of MobileNet-V2 (the smallest candidate CONV, the
head's 1x1 CONV and the FC) and one depthwise layer: the GPU times from the GPU model and the whole-layer PIM
times (Newton++ and Newton+, both placements, the faster kept) from the closed-form walk again, which
must equal the cached ones."""),
        ("code", """\
from pimjax.models import cnn
from pimjax.sim.host import host_time
backend, plus = pf.backend_for(pf.PIMFLOW_CONFIG), pf.backend_for("newton+")
table = cnn.cnn_layers("mobilenet-v2")
recs = data["layers"][pf.cache_key("mobilenet-v2", pf.PIM_CHANNELS)]
cand = table[table.pim_candidate]
sample = [int(cand[cand.kind == "conv"].sort_values("macs").index[0]), int(cand.index[-2]), int(cand.index[-1]),
          int(table.index[table.kind == "dwconv"][0])]
rows = []
for i in sample:
    row = table.iloc[i].to_dict(); op, shapes = pf.layer_op(row); r = recs[i]
    gpu = float(host_time(op, backend.system.gpu, shapes, 2)); co = float(host_time(op, backend.system.cogpu, shapes, 2))
    pp = pf.pim_time_placed(op, shapes, backend) if r["candidate"] else dict(ns=float("nan"), matrix=None)
    pl = pf.pim_time_placed(op, shapes, plus)["ns"] if r["candidate"] else float("nan")
    rows.append(dict(layer=r["name"], gpu_ns=gpu, cached_gpu=r["gpu_ns"], cogpu_ns=co, cached_cogpu=r["cogpu_ns"],
                     pim_ns=pp["ns"], cached_pim=r["variants"]["rows"]["pim"][0] if r["candidate"] else float("nan"),
                     in_banks=pp["matrix"], cached_in_banks=r[pf.PIMFLOW_CONFIG]["matrix"] if r["candidate"] else None,
                     newtonp_ns=pl, cached_newtonp=r["newton+"]["ns"] if r["candidate"] else float("nan")))
check = pd.DataFrame(rows)
assert np.allclose(check.gpu_ns, check.cached_gpu, rtol=1e-9) and np.allclose(check.cogpu_ns, check.cached_cogpu, rtol=1e-9)
assert np.allclose(check.pim_ns, check.cached_pim, rtol=1e-9, equal_nan=True)
assert np.allclose(check.newtonp_ns, check.cached_newtonp, rtol=1e-9, equal_nan=True)
assert (check.in_banks.fillna("-") == check.cached_in_banks.fillna("-")).all()   # None: not a PIM candidate
check.round(0)"""),
        ("md", """\
**The fast PIM time against full simulation** (`pf.validate`, stored in the cache): the estimate, the
same draft lowered and simulated by `pimjax.sim` (refresh placed command by command), and the
predict-mode tuner's pick (the cost model's top 8 lowered and simulated). `tests/test_pimflow.py`
asserts the same (2 %, + 200 ns where the filter is resident) on small layers, under both placements
on Newton++. On the four checked layers (Newton++, each under its faster placement, which the tuner
is given as `matrix=`) the estimate matches the simulation of its draft within 0.5 %; the gap to the
tuner's pick is the cost of walking a 48-draft sample of the cut space instead of ranking every
draft (0–15 % here): our PIM times are upper bounds, and the conclusions below would hold with PIM
a third faster."""),
        ("code", """\
val = pd.DataFrame(data.get("validation", []))
if len(val):
    display(val[["name", "shape", "est_ns", "sim_ns", "tuned_ns", "rel_err", "gap", "est_s", "sim_s", "tune_s"]].round(3))
else:
    print("no validation stored: python experiments/pimflow.py --validate 4")"""),
        ("md", """\
## Fig. 9: CONV layers and end to end, normalised to the GPU

Time / GPU-baseline time (lower is better). CONV: the PIM-candidate CONV layers (a pipelined segment
that holds one counts whole). The paper's text gives only a few of Fig. 9's bars (its figure's bars are
not in the text): PIMFlow's CONV speedup for ENetB0 (43 %) and VGG16 (17 %), their end-to-end speedups
(+27 % and +5 % on top: 70 % and 22 %), the mean over the models (CONV 30 %, end to end 34 %), "up to
82 %" end to end, and 38 / 41 / 43 % for PIMFlow-md / -pl / PIMFlow averaged over ENetB0, MBNetV2 and
MnasNet. "Speedup s" is read as T_GPU / T = 1 + s (normalised time 1 / (1 + s)); the paper does not
define it. Markers: the paper's values where given."""),
        ("code", """\
df = pf.fig9(data, models)
wide = df.pivot(index="model", columns="mode", values=["conv", "e2e"])[[(k, m) for k in ("conv", "e2e") for m in pf.MODES]]
inv = {v: k for k, v in pf.LABELS.items()}
fig, axes = plt.subplots(1, 2, figsize=(13, 3.6))
for ax, col, paper in ((axes[0], "conv", pf.PAPER["conv_speedup"]), (axes[1], "e2e", pf.PAPER["e2e_speedup"])):
    labels = [pf.LABELS[m] for m in models]; x = np.arange(len(labels))
    for j, mode in enumerate(pf.MODES):
        ax.bar(x + (j - 2) * 0.16, [wide.loc[l, (col, mode)] for l in labels], 0.16, label=mode)
    for k, l in enumerate(labels):
        if inv[l] in paper:
            ax.plot(x[k] + 0.4, 1 / (1 + paper[inv[l]]), "k*", ms=10, label="paper PIMFlow" if k == 0 or "paper PIMFlow" not in [h.get_label() for h in ax.lines] else None)
    ax.axhline(1.0, color="grey", lw=0.8); ax.set_xticks(x, labels); ax.set_title(f"{col}: time / GPU"); ax.set_yscale("log")
axes[0].legend(fontsize=7); plt.tight_layout(); plt.show()
wide.round(3)"""),
        ("code", """\
side = pf.fig9_vs_paper(df)
side.round(3)"""),
        ("md", """\
**Why ours misses the paper's speedups** (every end-to-end miss here is far beyond 15 percentage
points, in the same direction: PIM rarely pays on our models). The per-layer table below shows why: on
our models a CONV layer on the 16 PIM channels takes several times as long as on the 16 GPU-only
channels (Newton++, the faster placement: median 5.5× MBNetV2, 5.8× MnasNet, 9.6× ResNet50, 16×
VGG16; ENetB0's median 1.7× comes from its many squeeze-excite FC layers), where the paper finds the
two "within a close range" for pointwise CONVs (§3). The modelling differences behind it, largest first:

1. **Our GPU is a roofline with wave quantisation ("occupancy" model), not Accel-Sim running cuDNN.**
   A GEMM runs as the fastest of its tiled kernels (tiles 128 × 128 down to 32 × 32, split-K; with the
   operands counted once and no per-tile cost the most-occupying tile wins, an optimistic bound on a
   library's pick that no measured GEMM has checked yet), so small mobile-CNN kernels keep the SMs busy and reach a
   large fraction of the 448 / 224 GB/s in our model; cycle-level
   simulation of real cuDNN kernels (implicit GEMM tiles, im2col traffic, L2 misses, launch gaps) is
   much slower on them, which is what left room for PIM in the paper.
2. **Which operand sits in the banks — now searched, and not the cause.** Every layer and MD-DP share
   is timed with the filter in the banks (PIMFlow §2.2) and with the activations there (pimjax's
   default where they are larger); the placement table above shows the faster one cuts the candidates'
   summed PIM time 1.04–1.07× (mobile CNNs), 1.24× (ResNet50) and 1.40× (VGG16) against the
   larger-operand rule, yet the end-to-end times move by at most 0.01–0.02: the GPU floor (item 4)
   dominates. The faster placement differs from the larger-operand rule on 11 / 5 / 8 / 17 / 6 of the
   36 / 66 / 36 / 54 / 16 candidates (MBNetV2 / ENetB0 / MnasNet / ResNet50 / VGG16); the filter wins
   on 4 of ResNet50's 17 and 2 of VGG16's 13 K × K layers and on no stem. On
   the early, wide layers of the mobile CNNs the activations stay the faster matrix under our command
   model (MobileNet-V2's b3.expand, 56 × 56 × 24 → 144 on Newton++: 47 µs with the activations in the
   banks, 320 µs with the filter there and the 3 136 pixel vectors streamed through GWRITE), so
   PIMFlow's fixed choice would be slower here, not faster.
3. **Newton++ (4 global buffers + GWRITE latency hiding) is used** for every mode but Newton+, as in
   the paper; Newton+ (one buffer, no hiding) is 1.15–1.6× slower per PIM layer here (median per model;
   our Fig. 14 below:
   the buffers gain more, hiding less, than the paper's).
4. **Half the GPU bandwidth in every PIM mode.** As in the paper, GPU layers run on the 16 GPU-only
   channels while PIM is on (1.69–1.82× the baseline's time here); with PIM this slow, the lost
   bandwidth costs more than PIM saves, so every mode is slower than the GPU baseline. PIMFlow lets an
   application disable PIM (§5: then all channels serve the GPU); `pim_jit` does so
   (`search.mixed.mixed_plans`), which would give 1.00 here.
5. The PIM times of the MD-DP shares walk only 4 drafts per placement with the whole layer's knobs
   (capped by the larger shares' times), an upper bound; see `experiments/pimflow.py`. The GPU model's
   share times still step where a product's two sides reach 64 and the GEMV-style kernel (a warp per
   output) gives way to the tiled GEMM (≈ 1.2× on BERT's FC, below), which the MD-DP search exploits
   where it happens.
6. **Pipelining is timed but never pays.** A pipelined 1x1-DW(-1x1) block runs its depthwise CONV's
   row chunks on the GPU beside PIM and its 1x1 CONVs' chunks on PIM; with PIM several times slower,
   a pipelined block takes a median 1.9–2.3× (per model; never below 1.2×) the time of its nodes each
   in their best single mode, so Algorithm 1 never picks one and PIMFlow-pl equals Newton++."""),
        ("code", """\
per_layer = []
for m in models:
    for r in data["layers"][pf.cache_key(m, pf.PIM_CHANNELS)]:
        if r.get("variants"):
            per_layer.append(dict(model=pf.LABELS[m], layer=r["name"], K=r["K"], gpu_all_ns=r["gpu_ns"],
                                  gpu_beside_ns=r["cogpu_ns"], pim_ns=r["variants"]["rows"]["pim"][0],
                                  in_banks=r[pf.PIMFLOW_CONFIG]["matrix"], newtonp_ns=r["newton+"]["ns"]))
per_layer = pd.DataFrame(per_layer)
per_layer["pim / gpu beside"] = per_layer.pim_ns / per_layer.gpu_beside_ns
per_layer["newton+ / newton++"] = per_layer.newtonp_ns / per_layer.pim_ns
for m in models:        # the floor of every PIM mode if PIM did nothing: the GPU on half the channels
    r = data["layers"][pf.cache_key(m, pf.PIM_CHANNELS)]
    print(f"{pf.LABELS[m]}: GPU on the 16 GPU-only channels / GPU on 32: "
          f"{sum(x['cogpu_ns'] for x in r) / sum(x['gpu_ns'] for x in r):.2f}")
display(per_layer.groupby("model")["pim / gpu beside"].describe()[["count", "min", "25%", "50%", "75%", "max"]].round(2))
print("layers where PIM beats the GPU beside it:", int((per_layer["pim / gpu beside"] < 1).sum()), "of", len(per_layer))
display(per_layer.groupby("model")["newton+ / newton++"].median().round(2).to_frame("median Newton+ / Newton++ PIM time"))"""),
        ("md", """\
**Which operand sits in the banks** (`pf.placements`): per model, the PIM-candidate layers whose faster
whole-layer placement puts the filter in the banks (on Newton++ and on Newton+), those where the faster
placement is not pimjax's default (the larger operand), and the candidates' summed Newton++ PIM time
under the default rule against the faster placement. PIMFlow always places the filters (§2.2)."""),
        ("code", """\
display(pf.placements(data, models).round(3))
mat = [(pf.LABELS[m], r["name"], share, v["matrix"][i]) for m in models
       for r in data["layers"][pf.cache_key(m, pf.PIM_CHANNELS)] if r.get("variants")
       for name, v in r["variants"].items() for i, share in enumerate(1 - np.arange(11) / 10) if v["matrix"][i]]
mat = pd.DataFrame(mat, columns=["model", "layer", "pim_share", "in_banks"])
print("MD-DP shares (all variants) with the filter in the banks:",
      f"{(mat.in_banks == 'filter').mean():.0%} of {len(mat)}")"""),
        ("md", """\
## Table 2: MD-DP split ratios of the PIM-candidate layers

Share of the PIM-candidate layers (all models pooled) at each GPU share of PIMFlow-md's plan, beside
the paper's Table 2 (58 % split, 41 % wholly on PIM, 0 % wholly on the GPU). Then which split each
candidate takes (output rows or output channels)."""),
        ("code", """\
t2 = pf.table2(data, models)
split = t2[(t2.gpu_ratio > 0) & (t2.gpu_ratio < 1)][["ours", "paper"]].sum()
print(f"split: ours {split.ours:.0%}, paper {split.paper:.0%}; wholly on PIM: ours {t2.ours.iloc[0]:.0%}, "
      f"paper {t2.paper.iloc[0]:.0%}; wholly on the GPU: ours {t2.ours.iloc[-1]:.0%}, paper {t2.paper.iloc[-1]:.0%}")
display(t2.set_index("gpu_ratio").T.round(3))
pf.split_variants(data, models)"""),
        ("md", """\
**Why the ratios sit at the other end from the paper's.** A split pays where neither device wins by a
crushing margin (PIMFlow §3). With our PIM several times slower than the GPU beside it on CONV layers
(the per-layer table above), a split saves little: our search splits 19 % of the candidates (paper
58 %), 15 of those 19 points with 10 % on PIM (3 with 20 %, 1 with 90 %), and leaves 63 % wholly on the
GPU (paper 0 %). The layers
wholly on PIM (18 %, paper 41 %) are the FC layers (the classifier and EfficientNet's squeeze-excite
FCs), whose weights stay resident in the banks; no CONV layer goes wholly to PIM. (Before the GPU model
picked its GEMM tile, a one-size 128 × 128 tile left most SMs idle on mid-sized CONVs, and 50 % of the
candidates were split, at 70–90 % on the GPU: the split share tracked the GPU model's idle SMs, not PIM.)"""),
        ("md", """\
## Fig. 12: energy, normalised to the GPU

Energy / GPU-baseline energy per model and mode (`experiments/data/pimflow_energy.json`, filled by
`python experiments/pimflow.py --energy` in about 2 min from the time cache: the plans are the
time-optimal ones of Fig. 9, energy plays no part in choosing them).

* **GPU** (`hw.gpu.gpu_energy_pj`, constants in the `HostModel`, `hw/host.py`): AttAcc's GPU energy
  table (scale-snu/attacc_simulator `src/config.py` ENERGY_TABLE, `devices.py` `_get_energy`):
  28.72 pJ per byte of memory traffic (its HBM path, FGDRAM's per-bit figures: **GDDR6 has no figure
  in our sources, so the HBM path is used for the RTX 2060's GDDR6 — an assumption**; GDDR6's
  off-chip I/O is longer than an interposer, so the GPU's memory energy is more likely under- than
  overstated), 2.4 / 1.28 pJ per byte through L2 / L1, 0.0675 pJ per register access (3 per MAC),
  0.32 pJ per MAC. Bytes: the traffic the GPU time model counts (each operand once, the result once),
  passed once through L2 and L1 — AttAcc also charges a GEMM's tile re-reads there, which our
  occupancy model does not count, so the GPU's on-chip energy is a lower bound.
* **PIM**: the program behind each plan's PIM time (the same draft the closed-form walk picked, its
  time equal to the time cache's: checked for every program) lowered and simulated; its
  `CycleReport.energy_pj` from the preset's per-command energies (`hw.presets._dram_energy`: AttAcc's
  FGDRAM per-bit figures, GDDR6 off-chip I/O not modelled). A share capped by a larger share's time
  runs that share's program. The filter, where it is the resident matrix, is placed once (not charged).
* **Static power: not modelled** (`HostModel.static_power_w` = 0). PIMFlow measures the GPU with
  AccelWattch (static power included); no source in reach gives the RTX 2060's, and we do not invent
  one. Direction: every CNN mode here is *slower* than the GPU baseline (Fig. 9), so static power
  would add to their energy — the omission makes every PIM mode look better than it is (the paper's
  own sentence: ResNet50 and VGG16 lose energy to GPU static power). The break-even table below gives
  the static power at which each mode's energy equals the GPU's. PIM's DRAM background power is not
  modelled either. With a static power set, it accrues over each run's whole end-to-end time (the GPU
  idles while PIM works)."""),
        ("code", """\
energy = pf.load_cache(pf.ENERGY_CACHE)
f12 = pf.fig12(energy)
emodels = [pf.LABELS[m] for m in pf.ENERGY_MODELS if pf.cache_key(m, pf.PIM_CHANNELS) in energy["models"]]
modes = ("GPU",) + pf.MODES
fig, ax = plt.subplots(figsize=(12, 3.6)); x = np.arange(len(emodels))
for j, mode in enumerate(modes):
    g = f12[f12["mode"] == mode].set_index("model").loc[emodels]
    ax.bar(x + (j - 2.5) * 0.14, g.energy, 0.14, label=mode)
for mode, mk in (("Newton++", "v"), ("PIMFlow", "*")):      # the paper gives only the means over the 5 CNNs
    ax.axhline(1 - pf.PAPER_ENERGY["saving_vs_gpu"][mode], ls=":", color="k" if mode == "PIMFlow" else "grey", lw=1,
               label=f"paper: {mode}, mean of the 5 CNNs ({1 - pf.PAPER_ENERGY['saving_vs_gpu'][mode]:.2f})")
ax.axhline(1.0, color="grey", lw=0.8); ax.set_xticks(x, emodels); ax.set_ylabel("energy / GPU"); ax.legend(fontsize=7, ncol=2)
plt.tight_layout(); plt.show()
display(f12.pivot(index="model", columns="mode", values="energy")[list(modes)].loc[emodels].round(3))
display(f12.pivot(index="model", columns="mode", values="pim")[list(pf.MODES)].loc[emodels].round(3)
        .rename(columns=lambda c: c + " (PIM part)"))"""),
        ("md", """\
**The energy cache, recomputed on a sample**: MobileNet-V2's smallest cached PIM program and its
smallest MD-DP share (the draft picked again, lowered and simulated; its time must equal the time
cache's, its energy the cached one) and VGG16's GPU-baseline energy summed again over its nodes."""),
        ("code", """\
from pimjax.search.mixed import share_builder
e_mb = energy["models"][pf.cache_key("mobilenet-v2", pf.PIM_CHANNELS)]
tab = pf.model_table("mobilenet-v2")
checks = []
for pick in ("whole", "share"):
    its = {k: v for k, v in e_mb["pim_items"].items() if (k.split("|")[2] == "whole") == (pick == "whole")
           and k.split("|")[1] == pf.PIMFLOW_CONFIG}
    key = min(its, key=lambda k: its[k]["sim_ns"])
    name, config, var, share, placement = key.split("|")
    op, shapes = pf.layer_op(tab[tab.name == name].iloc[0].to_dict())
    be = pf.backend_for(config)
    if var == "whole":
        got = pf.pim_energy(op, shapes, be, placement)
    else:
        like = pf.pim_energy(op, shapes, be, placement)["knobs"]
        o, sh = share_builder(op, var)(float(share))
        got = pf.pim_energy(o, sh, be, placement, like=like)
    checks.append(dict(program=key, ns=got["ns"], cached_ns=its[key]["cached_ns"], pj=got["pj"], cached_pj=its[key]["pj"]))
checks = pd.DataFrame(checks)
assert np.allclose(checks.ns, checks.cached_ns, rtol=1e-9) and np.allclose(checks.pj, checks.cached_pj, rtol=1e-6)
host = pf.backend_for(pf.PIMFLOW_CONFIG).system.gpu
vt, vr = pf.model_table("vgg-16").to_dict("records"), energy["models"][pf.cache_key("vgg-16", pf.PIM_CHANNELS)]
gpu_pj = sum(pf._other_pj(host, t) if t["kind"] == "other" else pf.gpu_dynamic_pj(*pf.layer_op(t), host) for t in vt)
assert np.isclose(gpu_pj, vr["GPU"]["gpu_pj"], rtol=1e-9)
print(f"VGG16 GPU baseline: {gpu_pj / 1e9:.2f} mJ dynamic (cached {vr['GPU']['gpu_pj'] / 1e9:.2f} mJ)")
checks"""),
        ("md", """\
**Ours beside the paper's.** The text gives only means over the five CNNs (Fig. 12's bars are not in
the text): Newton++ and PIMFlow use 18 % and 26 % less energy than the GPU, Newton++ 17 % less than
Newton+ (attributed to fewer bank activations), ResNet50 / VGG16 limited or negative gains (GPU static
power). The last row compares Newton++ with Newton+ on the *same* layers (every candidate wholly on
PIM under each configuration), which isolates the command optimisations from the plans' choice of
layers."""),
        ("code", """\
side = pf.fig12_vs_paper(f12)
le = pf.layer_energy(energy)
cnn_le = le[le.model.isin([pf.LABELS[m] for m in pf.MODELS])]
same = float((1 - cnn_le.sum_npp_over_np).mean())
side = pd.concat([side, pd.DataFrame([dict(figure="Newton++ saving vs Newton+, same layers wholly on PIM (mean of 5 CNNs)",
                                           ours=same, paper=pf.PAPER_ENERGY["newtonpp_vs_newtonp"],
                                           miss_pp=100 * (same - pf.PAPER_ENERGY["newtonpp_vs_newtonp"]))])], ignore_index=True)
display(side.round(3))
display(le.round(3))
print("GPU static power (W) at which each mode's energy equals the GPU's (NaN: none):")
display(pf.breakeven_static_w(energy).round(1))"""),
        ("md", """\
**Why ours misses** (the savings against the GPU by 9 and 24 points; Newton++ against Newton+ in
the plans by 17 points, but within 1 point on the same layers):

1. **PIM is slower here (Fig. 9), so the plans put few layers on PIM.** Newton+ and Newton++ put the
   same layers there (the FC layers, whose saving is all of theirs), so in the plans they use the same
   energy; layer for layer Newton++ uses 12–18 % less energy than Newton+ (summed; median per layer
   0.85–0.96 ×): the paper's 17 %, which it credits to fewer bank activations, reproduced on the same
   layers. PIMFlow's MD-DP shares put CONV work on PIM, which costs more than on the GPU (item 2).
2. **A candidate layer wholly on PIM costs 2–13 × its GPU dynamic energy** (median per model; ENetB0's
   2.1 × thanks to its squeeze-excite FC layers), an FC layer with its weights resident less (BERT
   1 × 3: 0.44 ×). Newton's COMP reads a 32 B column in each of the
   16 banks (0.44 pJ/b from the cells + the MAC path) for every group of 4 filter vectors: a 1x1 CONV
   with the activations in the banks re-reads them F / 4 times from the cells, and the host writes them
   there first; the GPU reads them from DRAM once (28.7 pJ/B) and — in our model — keeps the reuse
   on chip for free beyond one L2 / L1 pass (a lower bound, item 4). MobileNet-V2's b3.expand
   (56 × 56 × 24 → 144, Newton++, activations in the banks): 175 µJ on PIM, 61 % of it COMP reads,
   against 40 µJ on the GPU. The paper's PIM energy (CACTI 7 with parameters from [54]) and its
   plans (41 % of the candidates wholly on PIM, Table 2) give PIM the savings; ours do not.
3. **No static power** (above): the CNNs' PIM modes are 1.04–1.8 × slower than the GPU here, so their
   energy would grow with any static power: the mobile CNNs' and ResNet50's Newton+ / Newton++ savings
   (1.5–3.7 %) vanish above 0.2–0.3 W, VGG16's 33 % (the FC layers on PIM, weights resident) above
   ~91–96 W — the paper's "limited or negative gains" for VGG16 / ResNet50, reached through the
   missing term.
4. **The GPU's on-chip energy is a lower bound** (one L2 / L1 pass per byte, no tile re-reads), and its
   memory figure is HBM's for GDDR6: both understate the GPU's energy, so both understate PIM's savings.
5. BERT 1 × 64's PIMFlow (FC time 0.84 × Newton++'s, energy 1.49 ×) inherits the GPU-model step of the
   BERT section below: the time gain is the GEMV / GEMM kernel step, and the energy pays for the PIM
   share."""),
        ("md", """\
## Fig. 13: GPU / PIM channel division

End-to-end time / GPU baseline (all 32 channels) for 8, 16 and 24 PIM channels of 32 (ENetB0 and
ResNet50, the models the paper's text discusses; row splits only, to bound the computation; a
configuration missing from the cache is left out). The paper finds PIMFlow best at 16 PIM channels and
Newton+ / Newton++ hurt more by the lost GPU channels. Ours is best at the fewest PIM channels: with
PIM rarely faster than the GPU on a CONV layer, every channel given to PIM is bandwidth the GPU loses
(our GPU model is bandwidth-bound on most of these layers, where the paper's Fig. 3 finds the
compute-intensive models "not noticeably impacted" by halving the GPU's channels). PIMFlow's splits
help more than Newton+'s whole-layer offload as PIM gets more channels (equal for ResNet50 at 8),
as the paper finds."""),
        ("code", """\
f13 = pf.fig13(data)
if len(f13):
    fig, ax = plt.subplots(figsize=(6, 3.2))
    for (m, mode), g in f13.groupby(["model", "mode"]):
        ax.plot(g.pim_channels, g.e2e, "o-" if mode == "PIMFlow" else "s--", label=f"{m} {mode}")
    ax.set_xlabel("PIM channels (of 32)"); ax.set_ylabel("time / GPU"); ax.axhline(1, color="grey", lw=0.8)
    ax.legend(fontsize=7); plt.tight_layout(); plt.show()
    display(f13.pivot(index=["model", "mode"], columns="pim_channels", values="e2e").round(3))
else:
    print("no Fig. 13 configurations cached")"""),
        ("md", """\
## BERT-base's FC layers (PIMFlow §6.4)

BERT-base (`pimjax.models.cnn`, 12 layers, d 768, FFN 3072) at 1 × 3 and 1 × 64 tokens: its FC layers
(Q, K, V, O, FFN up / down) are the PIM candidates; attention matmuls, softmax, norms and adds stay on
the GPU. The paper: PIMFlow performs the same as Newton++ at 1 × 3 and gives 32 % extra speedup over
Newton++ at 1 × 64 by running the FC layers in MD-DP mode (its text does not say whether end to end
or FC only; both are shown).

Ours: at 1 × 3 every FC layer runs wholly on PIM (the weights resident in the banks, 1.6× faster than
the GPU on its FC layers) and PIMFlow equals Newton++, as in the paper. At 1 × 64 PIM is ~5× slower
than the GPU beside it per FC layer and Newton++ keeps them on the GPU; PIMFlow's extra speedup over
it (20 % on the FC layers, 15 % end to end; paper 32 %) comes from **a step in our GPU model, not from
PIM's work**: the "occupancy" model runs a product with fewer than 64 rows as a GEMV-style kernel (a
warp per output, `hw.gpu.OCC_GEMM_MIN`, an assumption) and a larger one as a tiled GEMM, so
64 × 768 → 768 takes 10.5 µs on the 16 GPU-only channels and 58 tokens 8.5 µs; MD-DP's 90 % GPU share
(58 tokens) lands under the threshold. (With one 128 × 128 tile size, before the GPU model picked its
tile, the step was 38.9 against 8.5 µs and PIMFlow's gain 2.6×.)"""),
        ("code", """\
bt = pf.bert(data)
display(bt.set_index("model").T.round(3)) if len(bt) else print("BERT not cached")"""),
        ("md", """\
## Fig. 14: the Newton++ command optimisations

GWRITE latency hiding and multiple global buffers, each alone and together, against Newton+ (paper: 9 %,
14 % and 22 %), on MobileNet-V2's 20 distinct PIM-candidate CONV shapes, from the cache of
`experiments/pimflow_fig14.py` (`--recompute` re-measures, about 10 min). Why ours differ (that script
keeps the default placement, the larger operand in the banks; the preset gives one result latch per buffer):
`experiments/README.md`."""),
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
