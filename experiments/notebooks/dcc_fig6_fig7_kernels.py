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
# # DCC Fig. 6 and Fig. 7: kernel speedups over the GPU and over the default mapping
#
# DCC §V-A: AttAcc (Fig. 6: GEMV, RED, ATTN) and HBM-PIM (Fig. 7: GEMV, RED, VA, RELU), each with its
# default mapping and with DCC's search, against the GPU, "varying the batch size, number of heads and
# tensor sizes". The paper's text gives averages and a few single points, not the per-case bars, so we
# compare averages. GEMV and ATTN use input (head) size 128 and 32 heads (Fig. 9's layer); the tensor
# size is the output length (tokens). **Subset:** batch 1 and 4; GEMV outputs 512 and 2048, ATTN 512 and
# 1024, RED / VA / RELU lengths 1024, 2048, 4096 — the paper's full grids are not stated and a larger
# grid does not fit the CI budget (ATTN at 4096 tokens alone compiles for about a minute).

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

# %% [markdown]
# ## Fig. 6: AttAcc

# %%
attacc = dcc.attacc_system()
print(attacc.name, attacc.variant, f"{attacc.n_groups} channels x {attacc.cores_per_group} units;",
      "host", attacc.system.host.name)
fig6 = dcc.sweep(attacc, dcc.fig6_cases())
fig6.drop(columns=["draft"]).round(3)

# %%
fig, axes = plt.subplots(1, 2, figsize=(15, 3.8))
dcc.plot_cases(fig6, "Fig. 6 (pimjax): AttAcc over the GPU, per case", axes[0])
table6 = dcc.compare(dcc.summarise(fig6), dcc.PAPER_FIG6, dcc.WHY)
dcc.plot_compare(table6, "Fig. 6: DCC paper vs pimjax (averages)", axes[1])
plt.tight_layout(); dcc.save(fig, "dcc_fig6", fig6, table6); plt.show()
table6.round(3)

# %% [markdown]
# ## Fig. 7: HBM-PIM

# %% [markdown]
# pimjax's HBM-PIM baseline is the Samsung simulator's mapping (`pimjax.backends.baseline`). DCC's
# HBM-PIM comparison point is AttAcc's data distribution (§V, comparison point 4); `attacc_ns` lowers
# that distribution on HBM-PIM where it can run: RED. For GEMV it splits the query over the units of a
# pseudo-channel, which HBM-PIM's broadcast register writes cannot do, and VA / RELU have no AttAcc
# mapping (AttAcc has no units for them), so those rows say why in `attacc_note`.

# %%
hbm = dcc.hbm_pim_system()
print(hbm.name, f"{hbm.n_groups} pseudo-channels x {hbm.cores_per_group} units;", "host", hbm.system.host.name)
fig7 = dcc.sweep(hbm, dcc.fig7_cases(), attacc_distribution=True)
fig7.drop(columns=["draft"]).round(3)

# %%
fig, axes = plt.subplots(1, 2, figsize=(15, 3.8))
dcc.plot_cases(fig7, "Fig. 7 (pimjax): HBM-PIM over the GPU, per case", axes[0])
table7 = dcc.compare(dcc.summarise(fig7), dcc.PAPER_FIG7, {**dcc.WHY, **dcc.WHY_FIG7})
dcc.plot_compare(table7, "Fig. 7: DCC paper vs pimjax (averages)", axes[1])
plt.tight_layout(); dcc.save(fig, "dcc_fig7", fig7, table7); plt.show()
table7.round(3)

# %% [markdown]
# ## Why the GPU comparisons differ: what DCC's own numbers imply about its GPU
#
# `dcc.md` gives DCC's artifact's simulated cycles (0.769 ns) for a few cases. Dividing them into the
# paper's speedups gives the GPU time the paper must have used, which we set beside the roofline of DCC's
# stated GPU model (`a100("hbm3")`).

# %%
dcc.implied_gpu_table().round(2)

# %% [markdown]
# DCC's trace generator models one cube, but §V's system has five PIM-enabled HBM3 devices. With AttAcc on
# five cubes (`attacc_system(stacks=5)`, the same GPU) for a few Fig. 6 cases:

# %%
five = dcc.sweep(dcc.attacc_system(stacks=5), [("gemv", 4, 2048), ("attn", 4, 512), ("red", 1, 4096)])
dcc.cubes_table(fig6, five).round(2)

# %% [markdown]
# The baselines themselves also differ. DCC's artifact simulates AttAcc's RED baseline at (1, 4096) in 357
# cycles and HBM-PIM's in 593 (`dcc.md`); ours, lowered and simulated with their breakdown:

# %%
pd.DataFrame([dcc.baseline_breakdown(attacc, "red", 1, 4096), dcc.baseline_breakdown(hbm, "red", 1, 4096)]).round(1)

# %% [markdown]
# ## Under the paper's configuration: DCC's own simulator
#
# The same cases under the "dcc" configurations, `get_backend("attacc" / "hbm-pim", simulator="dcc")`:
# DCC's Ramulator2 forks on its one HBM3 cube (16 channels × 64 banks, 5.2 Gbps), ported cycle-exactly
# (`docs/dcc-simulator.md`), beside DCC's GPU model (`dcc.dcc_gpu()`). They take a few minutes, so
# `experiments/dcc_figures_dccsim.py --recompute` measures them once and this notebook reads
# `experiments/data/dcc_figures_dccsim.json`. Per case (`dcc.run_case_dcc`):
#
# * **baseline** = DCC's: AttAcc's mapping in DCC's notation (`dcc.dcc_baseline_tiling`), timed by the fork;
# * **pimjax search** = the shipped tuner's program on the "dcc" configuration, or that baseline if faster;
# * **DCC's search** = for RED / VA, every candidate of DCC's own space (`dcc.dcc_candidates_2d`, a port of
#   its `generate_configs.py`: 9-159 tilings) timed by the fork, its best kept (`dcc_exhaustive_2d`); for
#   GEMV (thousands of candidates) the pimjax search stands in;
# * ATTN: the "dcc" configuration does not lower pimjax's attention block as DCC's fused kernel, so the port's
#   ATTN generator (`pimjax.backends.dcc.traces.gen_attacc_attn`, "kernel" mode; the artifact CSV has no ATTN
#   row to check it against) is timed on the fork directly: DCC's baseline, and a local search from it in
#   DCC's notation (`dcc.dcc_gemv_local_search`) as DCC's search, for both columns;
# * RELU (HBM-PIM) has no trace in the port (the artifact's RELU generator is not ported): its rows are NaN with
#   the reason in `note`, and the averages leave them out.
#
# **Two GPUs.** DCC's GPU model (the roofline of `a100("hbm3")`, five cubes' bandwidth) is what pimjax
# compares with. The paper's "over GPU" numbers come from another rule, the artifact's (`src/run_kernels.py`,
# `src/inference/devices.py`; here `dcc.artifact_gpu_ns`): the GPU runs **five times the case** ("batch *= 5
# # for 5 hbm cubes") against **one cube's** PIM time, on a tiled model whose bandwidth and FLOP/s are scaled
# by thread-block occupancy (numOp blocks over 108 SMs: a batch-1 RED of 5 blocks gets 5/108 of the
# bandwidth) and which reads a RED's ones vector too. With it, the paper's own single point is recovered from
# the artifact's cycles: RED (1, 4096) on AttAcc, DCC's best 215 cycles, gives 3.94x (paper: 3.94x; printed
# below).

# %%
from experiments import dcc_figures_dccsim as dccsim
sim = dccsim.load()
fig6d, fig7d = sim["fig6"], sim["fig7"]
print("RED (1, 4096) on AttAcc, DCC's best (215 cycles) over the artifact's GPU rule: "
      f"{dcc.artifact_gpu_ns('red', 1, 4096) / (215 * dcc.DCC_NS_PER_CYCLE):.3f}x (paper 3.94x)")
show = ["backend", "kernel", "batch", "size", "pim_ns", "dcc_own_ns", "base_ns", "gpu_ns", "dcc_vs_base",
        "dcc_vs_gpu", "dcc_own_tiling", "note"]
pd.concat([fig6d, fig7d])[show].round(3)

# %% [markdown]
# Fig. 6 and Fig. 7 with a column per configuration: the default (above), the "dcc" configuration with
# pimjax's search and DCC's GPU model, and the "dcc" configuration with DCC's search and the artifact's GPU
# rule (the paper's way). `/ paper` is ours over the paper's.

# %%
def columns(default, dccsim_rows):
    return {"default": dcc.summarise(default),
            "dcc": dcc.summarise(dccsim_rows),
            "dcc, DCC's search, artifact's GPU": dcc.summarise(dcc.artifact_gpu_view(dcc.dcc_search_view(dccsim_rows)))}

both6 = dcc.compare_configs(dcc.PAPER_FIG6, columns(fig6, fig6d))
both7 = dcc.compare_configs(dcc.PAPER_FIG7, columns(fig7, fig7d))
for name, t in (("dcc_fig6_configs", both6), ("dcc_fig7_configs", both7)):
    t.to_csv(os.path.join(ROOT, "experiments", "out", f"{name}.csv"), index=False)
both6.round(3)

# %%
both7.round(3)

# %% [markdown]
# ### The paper's averages: DCC over the GPU, all kernel cases
#
# The abstract's average speedup over the GPU: 5.75x (AttAcc) and 2.7x (HBM-PIM) in the first version, 3.92x
# and 2.21x in the revised one (arXiv 2511.15503v2, which also gives 4.52x end to end where v1 gives 4.88x).
# Neither says which mean or which cases; the artifact's figure script plots each kernel's **harmonic** mean
# over its grid (`src/plot/kernels.json`: GEMV / ATTN batch 1, 4 × heads 32, 64 × outputs 512, 4096; RED
# batch 1, 4 on AttAcc, RED / VA / RELU batch 1, 2, 4 on HBM-PIM, lengths 1024-4096; `dcc.artifact_grid`).
# Below: that grid under the "dcc" configuration (from the cache), and this notebook's cases under the
# default, each with DCC's GPU model and with the artifact's GPU rule; `hmean / v2` is how close each comes
# to the revised average.

# %%
grid = pd.concat([sim["fig6_grid"], sim["fig7_grid"]], ignore_index=True)
default_cases = pd.concat([fig6, fig7], ignore_index=True)
averages = dcc.averages_table({
    "default, notebook cases, DCC's GPU model": default_cases,
    "default, notebook cases, artifact's GPU rule": dcc.artifact_gpu_view(default_cases),
    "dcc, artifact grid, pimjax search, DCC's GPU model": grid,
    "dcc, artifact grid, pimjax search, artifact's GPU rule": dcc.artifact_gpu_view(grid),
    "dcc, artifact grid, DCC's search, artifact's GPU rule": dcc.artifact_gpu_view(dcc.dcc_search_view(grid)),
})
averages.to_csv(os.path.join(ROOT, "experiments", "out", "dcc_fig6_fig7_averages.csv"), index=False)
averages.round(3)

# %% [markdown]
# Reading the tables.
#
# * **DCC's GPU model**: no configuration comes near the paper's speedups over the GPU -- one cube against a GPU
#   with five cubes' bandwidth.
# * **The paper's way** (the "dcc" configuration, DCC's own search, the artifact's GPU rule) reproduces every
#   RED / VA figure of Fig. 6 and 7 the text states within 3 % (RED over the baseline 1.50 / max 1.66,
#   RED 1024 over the GPU 0.59, RED 1 × 4096 3.94; HBM-PIM RED 2.08 vs 2.11, VA 1.66 vs 1.69, over the GPU
#   1.49 vs 1.51 and 2.25 vs 2.29, RED 1024-2048 0.505 vs 0.51 and 2.23 vs 2.27), ATTN's gain over the
#   baseline within 10 % (1.36 vs 1.24, max 1.53 vs 1.57) and GEMV / ATTN over the GPU within 25 % (6.1 vs
#   7.65, 7.9 vs 10.4; HBM-PIM GEMV 4.7 vs 5.63). The GEMV gains over the baseline stay low (1.06 vs 1.28,
#   1.21 vs 1.57): for GEMV the tuner's pick stands in for DCC's search, and DCC's baseline is usually the
#   fastest it finds, as in DCC's artifact (`dcc.md`). RELU is not ported.
# * **The averages over all kernel cases** (the artifact's grid, harmonic mean), the paper's way: 3.71x on
#   AttAcc against the revised 3.92x (0.95) and 2.03x on HBM-PIM against 2.21x (0.92, RELU missing). With
#   pimjax's search in place of DCC's they are higher (5.1x, 3.2x): pimjax's tuner finds RED / VA tilings DCC's
#   pruning drops (fewer than 16 cores per group, e.g. `[[1,1,1],[16,8,32]]`, 132 cycles against DCC's best
#   215 at RED (1, 4096)).
# * **The default configuration** is far from all of these under DCC's GPU model, and, under the artifact's GPU
#   rule, at 0.83 of v2's AttAcc average and 0.27 of its HBM-PIM one (Samsung's HBM2 machine, not DCC's cube).

# %%
print("misses and their modelling difference:")
for t in (table6, table7):
    for _, r in t[~t["within 25%"]].iterrows():
        print(f"- {r.kernel} {r.metric}: paper {r.paper:.2f}, ours {r.ours:.2f}. {r['why it differs']}")
print(f"notebook ran in {time.perf_counter() - t_start:.0f} s")

# %% [markdown]
# ## The disagreement explained: command class by command class
#
# Why the two simulators of "the same" HBM3-PIM disagree (issue 51: AttAcc RED 2.6x, HBM-PIM VA up to 12x
# apart). For GEMV (1, 32, 128, 512), RED (1, 4096) and VA (1, 4096) (VA on HBM-PIM only: DCC's AttAcc fork has
# no VA), each simulator's time and commands per command class: **DCC's fork** at DCC's baseline tiling
# (`cc.dcc_command_classes`), the **default configuration** (`dcc.attacc_system()` / `dcc.hbm_pim_system()`)
# with its own baseline mapping and, where it lowers, with DCC's tiling as a draft (`cc.default_command_classes`),
# and what the reference simulator does for the class -- Samsung's PIMSimulator for HBM-PIM
# (`../shared/reference/hbm-pim.md`), AttAcc's for AttAcc (`attacc.md`) -- i.e. which of the two it supports.
# Times in ns: DCC's clock is 0.769 ns, the default HBM-PIM's 1 ns (Samsung's), the default AttAcc's 0.769 ns.
#
# **How the time is split (measured, both sides sum to their simulated total exactly).** DCC: refresh is the
# total minus the total with the fork's refresh off; the refresh-free run splits at its first and last PIM command
# (host writes before, MAC / all-bank between, read-back after, barrier drains included); the forks have no mode
# changes. Default: classes removed one after another, each charged what its removal saves -- refresh
# (`refresh=False`), then the mode-change records (HBM-PIM's frame: park reads, SB<->HAB, CRF program,
# HAB<->HAB_PIM, made NOPs); the rest split by the report's phase buckets (host writes = rearrangement,
# MAC / all-bank = compute, read-back = readback + host merge); charging the frame as the drop of the compute
# phase alone would give it 422 / 479 / 407 cycles instead of 377 / 492 / 420 (GEMV / RED / VA: the frame's
# removal moves 58 cycles of GEMV's GRF_A writes into the leading rearrangement and 13 off the read-back).
# Commands: column and PIM commands on all channels (row commands ACT / PRE / ACTAB / PREA not counted).
# `experiments/dcc_command_classes.py` writes the table (a few seconds) to
# `experiments/data/dcc_command_classes.json`, read here.

# %%
from experiments import dcc_command_classes as cc
classes = cc.load_command_classes()
view = classes.assign(case=classes.kernel.str.upper() + " " + classes["shape"] + ", " + classes.backend)
view[["case", "class", "dcc ns", "dcc commands", "default ns", "default commands", "default merge cycles",
      "default, dcc tiling ns", "default, dcc tiling commands", "supports"]].round(1)

# %%
totals = view.groupby("case", sort=False).agg(**{
    "dcc ns": ("dcc ns", "sum"), "default ns": ("default ns", "sum"),
    "default, dcc tiling ns": ("default, dcc tiling ns", lambda x: x.sum(min_count=1))})
totals["default / dcc"] = totals["default ns"] / totals["dcc ns"]
print("not lowered on the default:", *sorted(set(classes["default, dcc tiling note"]) - {""}))
totals.round(2)

# %% [markdown]
# Reading the table.
#
# * **HBM-PIM is two machines.** Samsung's simulator charges the mode-change frame on every kernel; DCC's fork
#   has no mode changes. In the default the frame costs 377-492 ns per kernel, about DCC's whole RED / VA
#   (456 / 361 ns). Samsung's simulator issues PIM ops as all-bank column commands tCCD_L = 4 apart, one per
#   8 units; DCC's fork issues one command per bank per op, 2 cycles each on the channel -- so DCC's GEMV MACs
#   take 1 949 ns against the default's 1 344 ns. On VA the default is the slower (325 vs 98 ns): 48 all-bank
#   FILL / ADD / store commands per pseudo-channel, changing rows as Samsung's do (every 8 column commands,
#   `hbm-pim.md`), against DCC's 96 per-bank commands per channel at 2 cycles each. Read-back: Samsung's host reads each output's 32 B burst and sums the lanes (the default);
#   DCC's trace writes (ST) the result columns to every bank. On every HBM-PIM class where the two differ,
#   Samsung's simulator supports the default; DCC's numbers are of its HBM3 cube with per-bank units, not of
#   Samsung's machine.
# * **Host writes decide RED / VA**: DCC writes 1 024-2 048 columns over 16 channels x 64 banks in parallel
#   (159-211 ns); the default's AttAcc RED puts the whole length on one channel (499 ns) and its HBM-PIM VA
#   writes 16 384 columns (608 ns). Samsung's PIM figures start with ADD's operands in the banks, so neither
#   side's per-call writes are checked there. For GEMV, DCC stages the query through LD + ST into every bank
#   (583-625 ns); AttAcc's simulator and the default write it straight into the GEMV buffers (WRGB, 23 ns) and
#   Samsung's and the default broadcast it into GRF_A (300 ns).
# * **AttAcc agrees on the MAC commands** (MACAB nCCDAB = 6, the same row switches): DCC's MAC class is
#   larger (906 vs 691 ns) because it also holds its WRGB, run per batch element between barriers. AttAcc's
#   simulator lists no host read-back (the sequence ends in the softmax buffer), so neither DCC's ST nor the
#   default's RDACC + host merge is checked by it.
# * **Refresh** is every ~3.9 us on both (5 070 x 0.769 ns, 3 900 x 1 ns); only the default HBM-PIM GEMV meets
#   one (361 ns), because Samsung's second rank is due at tREF0 = 1 950 ns (staggered), DCC's first refresh
#   only after 3.9 us, past its 2.8 us kernel.

# %% [markdown]
# ## Checks
#
# What must hold whatever the cycle model's details. Each table has a row per case the notebook set out
# to run, and every time and speedup is finite and positive. DCC's search never loses to the baseline
# mapping it starts from: the tuner simulates that mapping too and keeps the fastest, so `dcc_vs_base`
# >= 1. The speedups compose (`dcc_vs_gpu` = `dcc_vs_base` × `base_vs_gpu`). The GPU roofline depends
# only on the ops and DCC's GPU: the same case costs the same on both figures' GPUs and more with a
# longer tensor or a larger batch. A baseline's cycles are the sum of its phases. On HBM-PIM, AttAcc's
# distribution lowers for RED only (the NaNs carry their reason). Five cubes beside the same GPU speed up
# the bandwidth-bound GEMV / ATTN over one cube. DCC's own cycles imply a GPU slower than its stated
# roofline, and each comparison row's "within 25%" agrees with its ratio. The command-class table has a row
# per case and class, and each side's classes sum to its simulated total.

# %%
import math
import numpy as np
for df, cases in ((fig6, dcc.fig6_cases()), (fig7, dcc.fig7_cases())):
    assert list(zip(df.kernel, df.batch, df["size"])) == cases, "a row per case, in order"
    for col in ("pim_ns", "base_ns", "gpu_ns", "dcc_vs_base", "dcc_vs_gpu", "base_vs_gpu"):
        assert np.isfinite(df[col]).all() and (df[col] > 0).all(), col
    assert (df.dcc_vs_base >= 1 - 1e-9).all(), df[df.dcc_vs_base < 1 - 1e-9]
    assert np.allclose(df.dcc_vs_gpu, df.dcc_vs_base * df.base_vs_gpu, rtol=1e-9)
    assert df.rearrangement_pct.between(0, 100).all()
    for (k, b), g in df.groupby(["kernel", "batch"]):
        assert g.sort_values("size").gpu_ns.is_monotonic_increasing, ("gpu vs size", k, b)
    for (k, s), g in df.groupby(["kernel", "size"]):
        assert g.sort_values("batch").gpu_ns.is_monotonic_increasing, ("gpu vs batch", k, s)
both = fig6.merge(fig7, on=["kernel", "batch", "size"], suffixes=("_6", "_7"))
assert len(both) > 0 and np.allclose(both.gpu_ns_6, both.gpu_ns_7, rtol=1e-12)
ran = fig7[np.isfinite(fig7.attacc_ns)]
assert set(ran.kernel) == {"red"} and (fig7.attacc_note == "").equals(np.isfinite(fig7.attacc_ns))
assert (ran.attacc_ns > 0).all() and np.allclose(ran.dcc_vs_attacc_dist, ran.attacc_ns / ran.pim_ns)
cubes = dcc.cubes_table(fig6, five)
assert len(cubes) == len(five) == 3
for _, r in cubes[cubes.kernel.isin(["gemv", "attn"])].iterrows():
    assert r["base_vs_gpu 5 cubes"] > r["base_vs_gpu 1 cube"] and r["dcc_vs_gpu 5 cubes"] > r["dcc_vs_gpu 1 cube"], r
for be in (attacc, hbm):
    b = dcc.baseline_breakdown(be, "red", 1, 4096)
    parts = b["rearrangement"] + b["compute"] + b["readback"] + b["merge"]
    assert b["cycles"] > 0 and math.isclose(b["cycles"], parts, rel_tol=1e-6), b
assert (dcc.implied_gpu_table()["implied / roofline"] > 1).all()
for t, paper in ((table6, dcc.PAPER_FIG6), (table7, dcc.PAPER_FIG7)):
    assert len(t) == len(paper) and t.ours.notna().all()
    assert ((abs(t["ours/paper"] - 1) <= dcc.TOLERANCE) == t["within 25%"]).all()
    assert (t.loc[~t["within 25%"], "why it differs"] != "").all(), "every miss says why"
# the "dcc" configuration's cache: a row per case in the notebook's order; NaN exactly where the port has
# no trace; DCC's choice never loses to DCC's baseline (it is among the candidates); the cached baselines
# and DCC's own bests are the artifact's cycles where dcc.md gives them (DCC_ARTIFACT)
for df, cases, be in ((fig6d, dcc.fig6_cases(), "attacc"), (fig7d, dcc.fig7_cases(), "hbm-pim")):
    assert list(zip(df.kernel, df.batch, df["size"])) == cases and set(df.backend) == {be}
    missing = np.array([dcc.dcc_trace_missing(be, k) != "" for k in df.kernel])
    assert (np.isnan(df.pim_ns) == missing).all() and (df.note[missing] != "").all()
    ran = df[~missing]
    assert (ran.dcc_vs_base >= 1 - 1e-9).all() and (ran.dcc_own_ns <= ran.base_ns * (1 + 1e-9)).all()
    assert np.allclose(ran.dcc_vs_gpu, ran.gpu_ns / ran.pim_ns)
for be, k, b, size, base, best, *_ in dcc.DCC_ARTIFACT:
    if k == "gemv":
        continue
    r = pd.concat([fig6d, fig7d, grid]).query("backend == @be and kernel == @k and batch == @b and size == @size")
    assert len(r) and np.allclose(r.base_ns / dcc.DCC_NS_PER_CYCLE, base) and \
        np.allclose(r.dcc_own_ns / dcc.DCC_NS_PER_CYCLE, best), (be, k, b, size, r[["base_ns", "dcc_own_ns"]])
assert list(zip(sim["fig6_grid"].kernel, sim["fig6_grid"].batch, sim["fig6_grid"]["size"])) == dcc.artifact_grid("fig6")
assert list(zip(sim["fig7_grid"].kernel, sim["fig7_grid"].batch, sim["fig7_grid"]["size"])) == dcc.artifact_grid("fig7")
# the command-class table: every case x class, and each side's classes sum to its simulated total
assert list(zip(classes.backend, classes.kernel, classes["class"])) == \
    [(b, k, c) for b, k, _, _ in cc.CLASS_CASES for c in cc.COMMAND_CLASSES]
for _, g in classes.groupby(["backend", "kernel"]):
    assert math.isclose(g["dcc cycles"].sum(), g["dcc total cycles"].iloc[0], abs_tol=0.01)
    assert math.isclose(g["default cycles"].sum(), g["default total cycles"].iloc[0], abs_tol=0.01)
# the artifact's GPU rule gives the paper's one stated single point from the artifact's own cycles
assert abs(dcc.artifact_gpu_ns("red", 1, 4096) / (215 * dcc.DCC_NS_PER_CYCLE) / 3.94 - 1) < 0.01
for t in (both6, both7):
    for c in ("default", "dcc", "dcc, DCC's search, artifact's GPU"):
        assert np.allclose(t[f"{c} / paper"], t[c] / t.paper, equal_nan=True)
# the figures themselves, against the values committed with the model (experiments/key_figures.py)
from experiments import key_figures
finite = lambda d: {k: v for k, v in d.items() if np.isfinite(v)}    # noqa: E731
key_figures.check("dcc_fig6_fig7_kernels", {f"fig{n} {r.kernel} {r.metric}": r.ours
                                            for n, t in ((6, table6), (7, table7)) for r in t.itertuples()}
                  | finite({f"dcc fig{n} {r['kernel']} {r['metric']} | {c}": r[c]
                            for n, t in ((6, both6), (7, both7)) for r in t.to_dict("records")
                            for c in ("dcc", "dcc, DCC's search, artifact's GPU")})
                  | {f"average {r.backend} | {r.configuration}": r.hmean for r in averages.itertuples()})
