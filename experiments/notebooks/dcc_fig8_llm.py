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
# # DCC Fig. 8: end-to-end LLM decode on AttAcc, per phase
#
# DCC (§V-B, Fig. 8) shows the normalised decode time of GPT-3 13B and LLaMA-2 33B, broken down into QKV
# generation, attention, projection, feed-forward and other, for the GPU, AttAcc-Base (attention on PIM),
# AttAcc-Full (attention plus part of the FFN on PIM, as AttAcc's `--ffopt`) and both with DCC.  Here the
# same systems with pimjax (`pimjax.studies.inference`): one decoder layer traced from `jax.ShapeDtypeStruct`s
# (no weights), placed op by op, the PIM ops lowered and simulated; the attention re-tuned for every new
# context length (16-token KV blocks) with the tuning time counted; the per-token figures are one layer x
# the layer count.
#
# System (DCC §V): one A100 with 5 PIM-enabled HBM3 stacks (`attacc` preset, `stacks=5`), the GPU on DCC's
# roofline (`a100("hbm3")`: 3352 GB/s x 0.81, 312 TFLOP/s x 0.8).  Settings: DCC's text does not list its
# token counts; its artifact does (`src/run_inference.py --all`): GPT-13B and LLaMA-33B at batch 1 and 4,
# each with (input, output) tokens (128, 2048), (2048, 128) and (2048, 2048) -- twelve settings, their mean
# being the paper's 4.88x (`dcc_fig8_artifact.FIG8_SETTINGS`).  Here, to keep the notebook short, batch 1 with a
# 2 048-token prompt (both models) and batch 4 with a 512-token prompt (LLaMA-2 33B), 16 output tokens each
# (one 16-token KV block of contexts): not the artifact's; `SETTINGS` below takes more.  The last section
# computes the figure under DCC's own configuration, at the artifact's settings.
#
# Two GPUs, each named where its figures appear:
# - **DCC's GPU model** (`a100("hbm3")`, "dcc" roofline): what the paper's speedups are over. "Other" is
#   every small op (norms, residuals, RoPE) at its 36 ns launch cost each, as jnp writes them.
# - **The measured-checked A100** (`gpu("a100", model="library", memory=3352e9)`): pimjax's "library" model
#   with the constants fitted on LLMCompass's measured A100-SXM4-80GB kernels (`pimjax/hw/measured`), on the
#   same 3352 GB/s of five HBM3 cubes.  Its GPU-only run is the kernels a GPU runs (`sim.gpu_kernels`: norms
#   and softmax fused, SiLU·mul after its GEMM, 2 µs a launch), and the PIM programs' host merges pay its
#   launch too.  Its measured / model ratios are the table at the end.
#
# Not modelled: the prefill, the LM head, collective communication, overlap of GPU and PIM work across
# phases.

# %%
import os, shutil, sys, tempfile, time
# run from experiments/ (Jupyter, nbclient) or the checkout root: this checkout's pimjax first
ROOT = os.path.dirname(os.getcwd()) if os.path.basename(os.getcwd()) == "experiments" else os.getcwd()
sys.path.insert(0, ROOT)
import numpy as np
import pandas as pd
import matplotlib.pyplot as plt
from IPython.display import display

from pimjax.hw.host import a100
from pimjax.hw.gpus import gpu
from pimjax.hw.gpu_check import class_table
from pimjax.models import get_config, PHASES
from pimjax.studies import decode
from pimjax.search.tuner import Tuner

# (model, batch, prompt, output tokens); ("gpt3-13b", 4, 512, 16) is in the committed cache too (it adds
# ~45 s here: its batch-4 GEMM programs are lowered again from the cached choices)
SETTINGS = [("gpt3-13b", 1, 2048, 16), ("llama2-33b", 1, 2048, 16), ("llama2-33b", 4, 512, 16)]
GPU = a100("hbm3")                  # DCC's GPU model; any pimjax.hw.core.HostModel plugs in here
CHECKED = gpu("a100", model="library", memory=3352e9)     # the measured-checked A100 on DCC's memory
GPUS = {"DCC's GPU model": GPU, "checked A100 (library)": CHECKED}
STACKS = 5

# the committed tuning cache, copied: a run adds entries to the copy, never to the repository
committed = os.path.join(ROOT, "experiments", "data", "dcc_fig8_tune.json")
OUT = os.path.join(ROOT, "experiments", "out")
os.makedirs(OUT, exist_ok=True)
cache = os.path.join(tempfile.mkdtemp(), "tune.json")
if os.path.exists(committed):
    shutil.copy(committed, cache)
tuner = Tuner(cache=cache)
SYSTEMS = ["gpu", "attacc-base", "attacc-full", "base+dcc", "full+dcc", "pimjax"]
LABELS = {"gpu": "GPU", "attacc-base": "AttAcc-Base", "attacc-full": "AttAcc-Full",
          "base+dcc": "Base+DCC (pimjax)", "full+dcc": "Full+DCC (pimjax)", "pimjax": "pimjax auto"}

# %%
runs = {}
t0 = time.perf_counter()
for label, host in GPUS.items():
    runs[label] = {(model, batch, prompt, tokens): decode(get_config(model), "attacc", host=host, stacks=STACKS,
                                                          batch=batch, prompt=prompt, tokens=tokens, tuner=tuner)
                   for model, batch, prompt, tokens in SETTINGS}
print(f"decoded {len(SETTINGS)} settings on {len(GPUS)} GPUs in {time.perf_counter() - t0:.0f} s")
results = runs["DCC's GPU model"]          # the paper's figures are over DCC's GPU model
for res in results.values():
    display(res.table().round(4))

# %% [markdown]
# ## Normalised time breakdown (GPU = 1), speedup over the GPU on top

# %%
rows = []
for (model, batch, prompt, tokens), res in results.items():
    per, gpu_total = res.per_token(), res.totals()["gpu"]
    for s in SYSTEMS:
        rows.append({"setting": f"{model} B{batch} {prompt}+{tokens}", "system": LABELS[s],
                     **{p: per[s][p] / gpu_total for p in PHASES}})
norm = pd.DataFrame(rows).set_index(["setting", "system"])
norm["total"] = norm.sum(axis=1)
norm["vs GPU"] = 1 / norm["total"]
display(norm.round(3))
norm.to_csv(os.path.join(OUT, "dcc_fig8_breakdown.csv"))

fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4), sharey=True)
axes = np.atleast_1d(axes)
colors = dict(zip(PHASES, ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8c8c8c"]))
for ax, setting in zip(axes, norm.index.get_level_values(0).unique()):
    sub = norm.loc[setting]
    bottom = np.zeros(len(sub))
    for p in PHASES:
        ax.bar(range(len(sub)), sub[p], bottom=bottom, color=colors[p], label=p)
        bottom += sub[p].to_numpy()
    for i, v in enumerate(sub["vs GPU"]):
        ax.text(i, bottom[i] + 0.02, f"{v:.2f}x", ha="center", fontsize=8)
    ax.set_xticks(range(len(sub)), sub.index, rotation=30, ha="right", fontsize=8)
    ax.set_title(setting)
axes[0].set_ylabel("time / GPU time")
axes[0].legend(fontsize=8)
fig.tight_layout()
fig.savefig(os.path.join(OUT, "dcc_fig8_breakdown.png"), dpi=120)
plt.show()

# %% [markdown]
# ## Tuning for new context lengths (DCC §IV-D), counted
#
# `drafts+predict s` is what DCC counts in its totals (draft generation and prediction for a new shape);
# `verify s` is pimjax's simulation of the predicted top-k (DCC profiles on its simulator instead).  The
# first entry of each setting is the whole layer's compile (every GEMV tuned once); later ones the attention
# alone at a new context length.

# %%
tune = pd.DataFrame([{"setting": f"{m} B{b} {p}+{t}", "layer compile s": r.compile_s,
                      "drafts+predict s": r.tuning_s, "verify s": r.verify_s,
                      "attention contexts compiled": len(r.attention), "wall s": r.wall_s,
                      "drafts+predict per output token, wall ms": 1e3 * r.tuning_s / (t - 1)}
                     for (m, b, p, t), r in results.items()]).set_index("setting")
display(tune.round(2))


# %% [markdown]
# ## Against DCC's published numbers (§V-B text)
#
# Averages are geometric means over the settings.  A row whose ratio is off by more than 15 % says why: the
# modelling difference behind it.

# %%
def gmean(xs):
    return float(np.exp(np.mean(np.log(xs))))

def phase_ratio(res, num, den, phases):
    per = res.per_token()
    return sum(per[num][p] for p in phases) / sum(per[den][p] for p in phases)

def base_mapping_vs_gpu(res, phases=("qkv", "proj")):
    ops = [o for o in res.layer_ops if o.phase in phases and o.kind == "contraction"]
    return sum(o.gpu_ns for o in ops) / sum(o.baseline_ns for o in ops)

def figures(R):
    return {
        "DCC over AttAcc-Base (avg)": gmean([phase_ratio(r, "attacc-base", "base+dcc", PHASES) for r in R]),
        "DCC over AttAcc-Full (avg)": gmean([phase_ratio(r, "attacc-full", "full+dcc", PHASES) for r in R]),
        "Base+DCC over GPU (avg)": gmean([phase_ratio(r, "gpu", "base+dcc", PHASES) for r in R]),
        "Full+DCC over GPU (avg)": gmean([phase_ratio(r, "gpu", "full+dcc", PHASES) for r in R]),
        "Full+DCC over GPU (max)": max(phase_ratio(r, "gpu", "full+dcc", PHASES) for r in R),
        "attention, DCC over AttAcc, GPT3-13B": gmean([phase_ratio(r, "attacc-base", "base+dcc", ["attention"])
                                                       for r in R if r.model == "gpt3-13b"]),
        "attention, DCC over AttAcc, LLaMA2-33B": gmean([phase_ratio(r, "attacc-base", "base+dcc", ["attention"])
                                                         for r in R if r.model == "llama2-33b"]),
        "QKV generation, DCC over GPU": gmean([phase_ratio(r, "gpu", "base+dcc", ["qkv"]) for r in R]),
        "projection, DCC over GPU": gmean([phase_ratio(r, "gpu", "base+dcc", ["proj"]) for r in R]),
        "QKV + projection, AttAcc's mapping over GPU": gmean([base_mapping_vs_gpu(r) for r in R]),
        }


ours = {label: figures(list(r.values())) for label, r in runs.items()}
paper = {"DCC over AttAcc-Base (avg)": 1.24, "DCC over AttAcc-Full (avg)": 1.86, "Base+DCC over GPU (avg)": 1.45,
         "Full+DCC over GPU (avg)": 4.88, "Full+DCC over GPU (max)": 7.71,
         "attention, DCC over AttAcc, GPT3-13B": 1.12, "attention, DCC over AttAcc, LLaMA2-33B": 1.16,
         "QKV generation, DCC over GPU": 3.21, "projection, DCC over GPU": 3.61,
         "QKV + projection, AttAcc's mapping over GPU": 1 / 1.25}
GEMV = ("our AttAcc GEMV programs on all 5 stacks (80 channels, weights resident) run near the PIM's internal "
        "bandwidth, ~9x the GPU's 0.81 x 3352 GB/s at batch 1 (~4.5x at batch 4, as GEMMs); DCC's abstraction is one HBM3 cube of 16 x 64 units "
        "(dcc.md), and its GEMV speedups over the GPU are ~3x")
ATT = ("the tuner keeps AttAcc's own attention mapping (tuned = baseline at every setting here): in our AttAcc "
       "model the query is broadcast to a channel's banks, while DCC's trace generator replicates it per bank "
       "(dcc.md), the cost DCC's tilings save (benchmarks/README.md, Reproductions: the same finding for Fig. 6's ATTN)")
why = {
    "DCC over AttAcc-Base (avg)": "QKV and projection on PIM gain more here: " + GEMV,
    "DCC over AttAcc-Full (avg)": "QKV and projection on PIM gain more here: " + GEMV,
    "Base+DCC over GPU (avg)": "QKV and projection on PIM gain more here: " + GEMV,
    "Full+DCC over GPU (avg)": "every GEMV on PIM gains more here: " + GEMV,
    "Full+DCC over GPU (max)": "every GEMV on PIM gains more here: " + GEMV,
    "attention, DCC over AttAcc, GPT3-13B": ATT,
    "attention, DCC over AttAcc, LLaMA2-33B": ATT,
    "QKV generation, DCC over GPU": GEMV,
    "projection, DCC over GPU": GEMV,
    "QKV + projection, AttAcc's mapping over GPU": ("AttAcc's mapping of a weight GEMV (rows over channels and "
        "bank groups, the input over banks) also runs near the internal bandwidth in our simulator on 5 stacks; "
        "DCC finds it 1.25x slower than the GPU -- " + GEMV),
}
cmp = pd.DataFrame({"DCC (paper)": paper, "pimjax, DCC's GPU model": ours["DCC's GPU model"],
                    "pimjax, checked A100": ours["checked A100 (library)"]})
cmp["pimjax / paper"] = cmp["pimjax, DCC's GPU model"] / cmp["DCC (paper)"]
cmp["why it differs"] = [why[k] if abs(np.log(v)) > np.log(1.15) else "" for k, v in cmp["pimjax / paper"].items()]
cmp.to_csv(os.path.join(OUT, "dcc_fig8_vs_paper.csv"))
with pd.option_context("display.max_colwidth", 400):
    display(cmp.round(3))


# %% [markdown]
# ## Which GPU: the checked A100 against its measurements
#
# The "library" model of the A100 used above, against LLMCompass's measured A100-SXM4-80GB kernels (the rows
# its constants were not fitted on; `pimjax.hw.gpu_check`): per op class, the median model / measured and the
# share of rows within 0.8-1.25.  DCC's GPU model is a roofline with no launch or wave cost; its figures are
# the paper's, not a GPU's.

# %%
checked = pd.DataFrame(class_table("library", gpus=("a100",)))
display(checked)

# %% [markdown]
# ## Under DCC's configuration: Fig. 8 the artifact's way on DCC's simulator
#
# How DCC's artifact builds Fig. 8 (`src/run_inference.py`, `src/inference/{model,system,devices}.py`):
#
# * **Five cubes, one simulated.** A PIM kernel's time is looked up in one cube's table at heads
#   ceil(heads × batch / 5) (`devices.py` `get_time_from_predictor`, `config.py` `num_hbm=5`): the five cubes
#   never interact, so the "dcc" configuration's one cube is the right machine; what Fig. 8 needs is that
#   split rule, not a five-cube simulator.
# * **QKV and projection per head.** With DCC (`model.py`, the `dcc` branch) QKV is a GEMV per head of input
#   hidden, output 3 × 128, and the projection one of input 128, output hidden; per cube DCC's GEMV
#   (1, ceil(H b / 5), input, output) -- at batch 4 four times the heads, the weights read once per sequence.
#   The "dcc" configuration times these (below; `dcc_fig8_artifact.fig8_gemv_cases`).
# * **Attention** is DCC's fused ATTN kernel (GEMV, softmax, GEMV: `gen_trace_AttAcc_ATTN.py`, "inference"
#   mode) at (1, ceil(H b / 5), 128, L) for every 16th context L. The pimjax "dcc" configuration cannot lower
#   pimjax's attention block as DCC's kernel, so the port's generator (`pimjax.backends.dcc.traces.
#   gen_attacc_attn`, added for this figure; the artifact CSV has no ATTN row, so it is checked against the
#   generator's structure, not against the fork's cycles) is timed on the fork directly
#   (`dcc_fig8_artifact.fig8_attention_rows`): DCC's baseline, and DCC's choice the faster of it and the tilings a
#   local search finds, every 128 tokens of context, linear in between.
# * **What is not simulated at all in DCC's Fig. 8**, and sets much of its 4.88x: the FFN on PIM of the Full
#   variants is a bandwidth split, not a PIM program (`system.py` `_ff_parallel`: the GPU's FFN time ×
#   GPU bandwidth / (GPU bandwidth + GPU bandwidth × PIM/GPU peak ratio / batch)); the Full variants also
#   overlap QKV / projection with the attention (`--pipeopt`, `_pipeline`); every norm and activation costs
#   the GPU a fixed 6.87 µs / 8.29 µs plus its bytes (`devices.py` `_mem_time`), on every system; and the
#   GPU is the artifact's tiled model with thread-block occupancy (`dcc_figures.artifact_layer_ns`), not the
#   roofline of `a100("hbm3")`. pimjax's decode above simulates the FFN share and models none of the
#   other three, which is where its Full+DCC departs from the paper's.
#
# The two GEMVs per cube, against the artifact's GPU time of the layer's FC (`experiments/dcc_figures_dccsim.py`,
# cached): the paper's phase speedups are 3.21x (QKV) and 3.61x (projection), averaged over its settings.

# %%
from experiments import dcc_fig8_artifact, dcc_figures, dcc_figures_dccsim as dccsim
gemv8 = dccsim.load()["fig8_gemv"]
display(gemv8[["model", "batch", "phase", "dcc_shape", "pim_ns", "pimjax_base_ns", "gpu_artifact_ns",
               "dcc_vs_gpu_artifact", "draft"]].round(2))
phase8 = pd.DataFrame([{"phase": ph, "paper": paper_x, "dcc": gmean(gemv8[gemv8.phase == ph].dcc_vs_gpu_artifact)}
                       for ph, paper_x in (("qkv", 3.21), ("proj", 3.61))])     # dcc: gmean over models x batch
phase8["dcc / paper"] = phase8.dcc / phase8.paper
display(phase8.round(3))

# %% [markdown]
# **Fig. 8 the artifact's way.** `experiments/dcc_fig8_artifact.py` ports the artifact's end-to-end
# arithmetic (the generation stage: per token and layer, each layer's time on its device, the FFN split and
# the pipelining of the Full variants, the GPU on the artifact's model) at the artifact's twelve settings,
# with QKV / projection on PIM from the "dcc" configuration (above: the faster of the tuner's program and a
# local search in DCC's notation, `dcc_figures.dcc_gemv_local_search`) and the attention on DCC's fork
# (above); beside it the same with the attention free, an upper bound on every PIM system's speedup.

# %%
cache8 = dccsim.load()
e2e, e2e_free = cache8["fig8_e2e"], cache8["fig8_e2e_free"]
display(e2e.filter(regex="model|batch|lin|lout|speedup").round(3))
SYS8 = ("Attacc_base", "Attacc_base+DCC", "Attacc_full", "Attacc_full+DCC")
fig8_dcc = pd.DataFrame({"paper": {"Attacc_base+DCC": 1.45, "Attacc_full+DCC": 4.88},
                         "dcc configuration": {s: float(e2e[f"{s} speedup"].mean()) for s in SYS8},
                         "attention free (bound)": {s: float(e2e_free[f"{s} speedup"].mean()) for s in SYS8}})
fig8_dcc.loc["DCC over AttAcc-Base"] = [1.24, *(fig8_dcc.loc["Attacc_base+DCC"] / fig8_dcc.loc["Attacc_base"])[1:]]
fig8_dcc.loc["DCC over AttAcc-Full"] = [1.86, *(fig8_dcc.loc["Attacc_full+DCC"] / fig8_dcc.loc["Attacc_full"])[1:]]
fig8_dcc.loc["Full+DCC max"] = [7.71, e2e["Attacc_full+DCC speedup"].max(), e2e_free["Attacc_full+DCC speedup"].max()]
fig8_dcc["dcc / paper"] = fig8_dcc["dcc configuration"] / fig8_dcc.paper
fig8_dcc.to_csv(os.path.join(OUT, "dcc_fig8_dcc_configuration.csv"))
display(fig8_dcc.round(3))     # means over the twelve settings; "DCC over ...": ratios of those means
full_dcc = e2e["Attacc_full+DCC speedup"]
print(f"Full+DCC over the GPU under DCC's configuration: mean {full_dcc.mean():.2f}x, max {full_dcc.max():.2f}x "
      f"(paper 4.88x / 7.71x); batch 1 {full_dcc[e2e.batch == 1].mean():.2f}x, batch 4 "
      f"{full_dcc[e2e.batch == 4].mean():.2f}x")

# %% [markdown]
# Reading it. Under DCC's configuration, at the artifact's settings and with its arithmetic, Full+DCC comes out
# 5.17x over the GPU on average against the paper's 4.88x (+6 %; the revised paper's 4.52x: +14 %), 7.68x at
# most against 7.71x (LLaMA-2 33B, batch 1, 2048 + 2048 tokens, as the revised paper says), Base+DCC 1.45x
# against 1.45x, and DCC over AttAcc-Base / -Full 1.23x / 1.97x against 1.24x / 1.86x. The attention on PIM
# moves the means by under 2 % (the attention-free bound is 5.18x): what sets Full+DCC is the QKV /
# projection GEMVs on one cube and the FFN's bandwidth split. At batch 4 DCC's per-head QKV GEMV on one cube
# (32 or 42 heads of 384 outputs) beats the GPU's whole FC by only 1.3-1.7x, so batch 4 gives 2.7-3.9x and batch 1
# 6.4-7.7x. Caveats: the attention comes from the port's ATTN generator, unchecked against the fork; DCC's
# predictor is replaced by the tuner and a local search (the GEMVs) and a baseline-plus-local search (the
# attention); the means are arithmetic over the twelve settings (the text does not say which mean).

# %% [markdown]
# ## Checks
#
# What must hold whatever the cycle model's details: each GPU's decode is slower than every PIM system, DCC's
# search never loses to the mapping it starts from, and the checked A100 -- the same memory as DCC's roofline at
# a lower, measured efficiency, with a launch per kernel -- is never faster than the roofline on the GPU-only
# run.

# %%
for label, R in runs.items():
    for key, res in R.items():
        per = res.per_token()
        tot = {s: sum(per[s][p] for p in PHASES) for s in SYSTEMS}
        assert tot["full+dcc"] <= tot["attacc-full"] * 1.001, (label, key, tot)
        assert tot["base+dcc"] <= tot["attacc-base"] * 1.001, (label, key, tot)
        assert tot["full+dcc"] < tot["gpu"], (label, key, tot)
for key in SETTINGS:
    dcc_gpu = sum(runs["DCC's GPU model"][key].per_token()["gpu"].values())
    lib_gpu = sum(runs["checked A100 (library)"][key].per_token()["gpu"].values())
    assert lib_gpu >= dcc_gpu, (key, lib_gpu, dcc_gpu)
assert set(checked["gpu"]) == {"a100"} and (checked["rows"] > 0).all()
# the "dcc" configuration's Fig. 8 GEMVs: DCC's per-cube cases in order, each on PIM with a finite time
assert [(r.model, r.batch, r.phase) for r in gemv8.itertuples()] == \
    [(c["model"], c["batch"], c["phase"]) for c in dcc_fig8_artifact.fig8_gemv_cases()]
assert np.isfinite(gemv8.pim_ns).all() and (gemv8.pim_ns > 0).all() and (gemv8.pim_ns <= gemv8.pimjax_base_ns).all()
assert np.allclose(gemv8.dcc_vs_gpu_artifact, gemv8.gpu_artifact_ns / gemv8.pim_ns)
assert (gemv8.pim_ns <= np.minimum(gemv8.tuned_ns, gemv8.search_ns) * (1 + 1e-9)).all()
# the artifact's twelve settings; the attention-free run bounds the one with DCC's attention; with DCC the
# Full system is faster than without at batch 1, and every PIM system beats the GPU
assert len(e2e) == len(e2e_free) == 12 and (e2e.filter(like="speedup") > 1).all().all()
assert (e2e_free.filter(like="speedup") >= e2e.filter(like="speedup") * (1 - 1e-9)).all().all()
b1 = e2e[e2e.batch == 1]
assert (b1["Attacc_full+DCC speedup"] > b1["Attacc_full speedup"]).all()
att8 = cache8["fig8_attention"]
assert (att8.dcc_ns <= att8.base_ns * (1 + 1e-9)).all() and (att8.base_ns > 0).all()
# the figures themselves, against the values committed with the model (experiments/key_figures.py)
from experiments import key_figures
key_figures.check("dcc_fig8_llm", {f"{k} | {col}": v for col in ("pimjax, DCC's GPU model", "pimjax, checked A100")
                                   for k, v in cmp[col].items()}
                  | {f"dcc configuration {r.phase} over GPU (artifact's rule)": r.dcc for r in phase8.itertuples()}
                  | {f"dcc configuration: {k} | {c}": v for c in ("dcc configuration", "attention free (bound)")
                     for k, v in fig8_dcc[c].items()})
