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
# # Serving LLaMA-2 70B on 8 A100s + AttAcc stacks: throughput within a latency target
#
# `pimjax.studies.decode` times one request's decode loop. Serving asks another question: under a
# stream of requests, how many tokens per second does a GPU + PIM system deliver while every request
# still gets its tokens fast enough (time per output token, TPOT), and how much memory is left for KV
# caches? `pimjax.studies.serve` answers it (issue 43): a request trace, a scheduler (continuous
# batching, chunked prefill), paged KV caches in the PIM stacks beside the resident weights, and step
# times from compiled kernels — each request's attention compiled per context bucket on its own bank
# partition, the GEMMs on the GPU model, two all-reduces per layer under tensor parallelism.
#
# **System** (one of 8 tensor-parallel shards): `get_backend("attacc", system="attacc")` — an AttAcc of
# 5 HBM3 stacks (80 channels, a 16-lane GEMV unit per bank, power-constrained) beside an A100 with
# HBM3 on AttAcc's own A100a model; NVLink3 all-reduces; AttAcc's GPU kernels (`gpu_kernels="fused"`);
# GPU and PIM overlapped by AttAcc's `--pipeopt` rule. **Scheduler:** continuous batching, decode first
# with prefill chunks (2 048 tokens a step), at most 128 requests in flight, 16-token KV blocks, the
# youngest request preempted when a partition is full. **Trace:** Poisson arrivals, prompts uniform
# 128–2 048, outputs uniform 32–512 tokens.
#
# **Placements:** `gpu` (GPU alone), `attacc-full` (AttAcc: attention on PIM with its open-source
# mapping — every query head with its own K/V, as AttAcc's simulator has no grouped-query attention —
# and the FFN split between GPU and PIM), `full+dcc` (the attention, QKV and projection with pimjax's
# tuned programs, the FFN split on the tuned programs) and `pimjax` (`pim_jit`'s own placement: every op
# where its tuned program beats the GPU; the GQA cache stored once).

# %%
import json, os, sys, time
ROOT = os.path.abspath("..") if os.path.basename(os.getcwd()) == "experiments" else os.getcwd()
sys.path.insert(0, ROOT)
import warnings; warnings.simplefilter("ignore")
import pandas as pd
import matplotlib.pyplot as plt
from IPython.display import display
import pimjax
from pimjax.studies.dse import grid
from pimjax.studies import serve
from pimjax.studies.serving import ServingObjective, fixed, poisson_requests, uniform
pd.set_option("display.width", 200)
t_start = time.perf_counter()
data = json.load(open(os.path.join(ROOT, "experiments", "data", "serving_curve.json")))
curve = pd.DataFrame(data["curve"])
cross = pd.DataFrame(data["crossover"])
print(data["model"], data["backend"], data["setup"], data["trace"])

# %% [markdown]
# ## The throughput–latency curve
#
# Each point is one trace (600 requests) at one arrival rate. Below saturation every system delivers
# what arrives; the difference is the time per output token. At saturation the throughput is what the
# system can sustain — here bounded by the prefill on the GPU (the prompts are 4× the outputs), which
# PIM does not speed up.

# %%
table = curve.pivot(index="rate", columns="placement", values=["tokens_per_s", "tpot_ms_p99"]).round(1)
table.columns = [f"{p} {'tok/s' if k == 'tokens_per_s' else 'p99 TPOT ms'}" for k, p in table.columns]
order = [f"{p} {m}" for p in ["gpu", "attacc-full", "full+dcc", "pimjax"] for m in ("tok/s", "p99 TPOT ms")]
table = table[[c for c in order if c in table.columns]]
table.index.name = "arrival rate (req/s)"
table

# %%
fig, ax = plt.subplots(1, 2, figsize=(12, 4))
for pl, g in curve.groupby("placement", sort=False):
    ax[0].plot(g["tpot_ms_p99"], g["tokens_per_s"], "o-", label=pl)
    ax[1].plot(g["rate"], g["ttft_ms_p99"] / 1e3, "o-", label=pl)
ax[0].set_xlabel("p99 time per output token (ms)"); ax[0].set_ylabel("output tokens / s")
ax[0].set_xscale("log"); ax[0].set_title("throughput vs latency (each point: an arrival rate)")
ax[1].set_xlabel("arrival rate (req/s)"); ax[1].set_ylabel("p99 time to first token (s)"); ax[1].set_yscale("log")
ax[0].legend(); plt.tight_layout()

# %%
# throughput within a p99 TPOT target: the highest rate each system sustains under it
for target in (30.0, 50.0, 100.0):
    best = {pl: g.loc[g["tpot_ms_p99"] <= target, "tokens_per_s"].max() for pl, g in curve.groupby("placement")}
    print(f"p99 TPOT <= {target:5.0f} ms:", {k: (round(v) if v == v else None) for k, v in best.items()})

# %% [markdown]
# ## Where PIM attention stops paying
#
# One decode step of B requests, all at the same context: per layer, the PIM attention (the slowest
# bank partition, its requests one after another) against the GPU's batched attention over the same
# caches, and each system's time per output token. `decode_batch_*` is how many requests the step
# held: fewer than B when their KV caches did not fit (the rest waited) — AttAcc's mapping stores every
# query head's K / V, 8× LLaMA-2 70B's grouped-query cache.

# %%
cols = ["context", "batch", "pim_attention_us_attacc-full", "pim_attention_us_pimjax", "gpu_attention_us",
        "tpot_ms_gpu", "tpot_ms_attacc-full", "tpot_ms_full+dcc", "tpot_ms_pimjax", "decode_batch_gpu",
        "decode_batch_attacc-full", "decode_batch_pimjax"]
display(cross[[c for c in cols if c in cross.columns]].round(2))
for L, g in cross.groupby("context"):
    for pl in ("attacc-full", "pimjax"):
        gain = g["gpu_attention_us"] / g[f"pim_attention_us_{pl}"]
        worse = g[gain <= 1.0]
        print(f"context {L}, {pl}: PIM attention / GPU attention gain {gain.iloc[0]:.1f}x at batch 1, "
              f"{gain.iloc[-1]:.2f}x at batch {int(g['batch'].iloc[-1])}; PIM no faster from batch",
              int(worse["batch"].min()) if len(worse) else f"> {int(g['batch'].max())} (never in this sweep)")

# %% [markdown]
# In this model PIM attention never becomes slower than the GPU's: its gain falls from 7–14× at
# batch 1 (the A100a's attention kernel is a thread block per product: a few heads leave most SMs
# idle) to 1.3–1.7× at 256 requests and 1.4–1.5× at 1 024, where the requests outnumber the 80 channels and
# queue in their partitions while the GPU's kernel fills its SMs. With grouped-query attention the
# tuned PIM programs read the shared K / V once per query head — the PIM's 9× internal bandwidth is
# spent on 8× the reads. What does stop AttAcc-style PIM is memory: its per-query-head KV fits 100
# requests at 2 048 tokens (200 at 1 024) beside the weights, so past that batch the extra requests
# wait and its time per token stays flat while its throughput stops growing.

# %%
fig, ax = plt.subplots(1, 2, figsize=(12, 4))
for L, g in cross.groupby("context"):
    ax[0].plot(g["batch"], g["gpu_attention_us"], "k-o", alpha=0.4 + 0.3 * (L > 1024), label=f"GPU, L={L}")
    for pl, m in (("attacc-full", "s"), ("pimjax", "^")):
        ax[0].plot(g["batch"], g[f"pim_attention_us_{pl}"], f"-{m}", label=f"PIM {pl}, L={L}")
    for pl in ("gpu", "attacc-full", "full+dcc", "pimjax"):
        ax[1].plot(g["batch"], g[f"tpot_ms_{pl}"], "-o", label=f"{pl}, L={L}")
for a in ax:
    a.set_xscale("log", base=2); a.set_xlabel("batch (requests at one context)")
ax[0].set_yscale("log"); ax[0].set_ylabel("attention per layer (us)"); ax[0].legend(fontsize=7)
ax[1].set_ylabel("time per output token (ms)"); ax[1].legend(fontsize=7); plt.tight_layout()

# %% [markdown]
# ## A live run
#
# A small trace served here (the cached curve above took minutes): 100 requests, shorter prompts, on
# the same system with pimjax's placement and GPU alone. `.requests` has one row per request, `.steps`
# one per scheduler step (batch size, KV occupancy), `.events` the memory events, `.summary()` the
# percentiles.

# %%
reqs = poisson_requests(100, rate=6.0, prompt=uniform(128, 512), output=uniform(16, 128), seed=1)
setup = dict(data["setup"], max_batch=64)
runs = {pl: serve("llama2-70b", "attacc", reqs, placement=pl, progress=False, **setup) for pl in ("gpu", "pimjax")}
pd.DataFrame({pl: r.summary() for pl, r in runs.items()})

# %%
res = runs["pimjax"]
display(res.requests.head())
print(res.layout)
fig, ax = plt.subplots(1, 2, figsize=(12, 3.5))
for pl, r in runs.items():
    ax[0].step(r.steps["t_s"], r.steps["batch"], where="post", label=pl)
    ax[1].step(r.steps["t_s"], 100 * r.steps["kv_occupancy"], where="post", label=pl)
ax[0].set_ylabel("requests in the step"); ax[1].set_ylabel("KV blocks allocated (% of capacity)")
for a in ax:
    a.set_xlabel("time (s)"); a.legend()
plt.tight_layout()

# %% [markdown]
# ## Goodput against the request rate
#
# The live run's lengths served at three arrival rates on the paper's system (`system="attacc"`, pimjax's
# placement; `pimjax.studies.serving.rate_sweep`): goodput counts only the requests that meet both SLOs, a
# 1 s time to first token and 50 ms per output token (DistServe's / vLLM's measure), in requests/s.

# %%
from pimjax.studies.serving import rate_sweep
sweep = rate_sweep("llama2-70b", "attacc", [2.0, 6.0, 18.0], requests=reqs, ttft_slo_ms=1000.0, tpot_slo_ms=50.0,
                   placement="pimjax", progress=False, **setup)
display(sweep[["rate", "requests_per_s", "goodput_requests_per_s", "ttft_ms_p99", "tpot_ms_p99"]].round(2))
fig, ax = plt.subplots(figsize=(5, 3.2))
ax.plot(sweep.rate, sweep.requests_per_s, "o-", label="served")
ax.plot(sweep.rate, sweep.goodput_requests_per_s, "s--", label="goodput (TTFT 1 s, TPOT 50 ms)")
ax.set_xlabel("arrival rate (requests/s)"); ax.set_ylabel("requests/s"); ax.legend(fontsize=8)
plt.tight_layout()

# %% [markdown]
# ## Design-space exploration with a serving objective
#
# A serving run is an objective `pimjax.explore` optimises (`ServingObjective`): each design point —
# stacks × PIM level here — is compiled for itself and serves the same trace; the rows carry tokens/s
# and the goodput within a p99 TPOT target (tokens/s of the requests within it; 0 when the p99 misses).

# %%
small = poisson_requests(40, rate=8.0, prompt=fixed(256), output=fixed(32), seed=2)
options = {k: v for k, v in data["setup"].items() if k != "system"}      # system= is the grid's (a preset option)
obj = ServingObjective("llama2-70b", small, tpot_p99_ms=40.0, **dict(options, placement="attacc-full", max_batch=16))
df = pimjax.explore(obj, backends=grid("attacc", system=["attacc"], stacks=[3, 5], variant=["bank-pc", "bg-pc"]),
                    progress=False)
df[["point", "tokens_per_s", "tpot_ms_p99", "goodput_tokens_per_s", "meets_slo", "kv_blocks", "tuning_s"]]

# %%
print(f"notebook ran in {time.perf_counter() - t_start:.0f} s")

# %% [markdown]
# ## Checks
#
# What must hold whatever the step costs. **The cached curve:** a point per placement and rate; a time
# to first token is within the request's end-to-end latency, so the p99s keep that order too; the
# output tokens per request (tokens/s over requests/s) lie within the trace's 32–512; the KV capacity is
# the system's, the same at every rate, and never over-filled, the mean batch within `max_batch`.
# **The crossover:** a decode step holds no more requests than it was given, and the attention (PIM and
# GPU) does not get faster with more requests or a longer context. **The live run:** every request of
# the trace finishes with its own prompt and output length, in the order arrival ≤ admission ≤ first
# token ≤ finish (TTFT ≤ latency); the throughput is the output tokens over the span from the first
# arrival to the last token, from the same run's columns; both placements serve the same tokens; no step
# holds more than `max_batch` requests or more KV blocks than the layout has. **The serving DSE:** a row
# per design point; goodput never exceeds throughput, and it is positive when the p99 TPOT meets the
# target and 0 when it misses; the KV capacity grows with the stacks and does not depend on the PIM level.

# %%
import numpy as np
rates = sorted(curve.rate.unique())
assert len(curve) == curve.placement.nunique() * len(rates) == 4 * len(rates)
assert (curve.ttft_ms_p99 <= curve.latency_ms_p99).all() and (curve.ttft_ms_p50 <= curve.ttft_ms_p99).all()
assert (curve.tpot_ms_p50 <= curve.tpot_ms_p99).all()
per_req = curve.tokens_per_s / curve.requests_per_s
assert per_req.between(*data["trace"]["output"]).all(), per_req
assert curve.peak_kv_occupancy.between(0, 1).all() and (curve.mean_batch <= data["setup"]["max_batch"]).all()
assert (curve.groupby("placement").kv_blocks.nunique() == 1).all()
for pl in ("gpu", "attacc-full", "full+dcc", "pimjax"):
    assert (cross[f"decode_batch_{pl}"] <= cross.batch).all() and (cross[f"decode_batch_{pl}"] >= 1).all(), pl
for L, g in cross.groupby("context"):
    g = g.sort_values("batch")
    for col in ("gpu_attention_us", "pim_attention_us_attacc-full", "pim_attention_us_pimjax"):
        assert g[col].is_monotonic_increasing, (L, col)
att = cross.pivot_table(index="batch", columns="context", values=["gpu_attention_us", "pim_attention_us_pimjax"])
for col in ("gpu_attention_us", "pim_attention_us_pimjax"):
    assert (att[col][2048] >= att[col][1024]).all(), col

for pl, r in runs.items():
    q, s, summ = r.requests, r.steps, r.summary()
    assert len(q) == len(reqs.arrival_s) and np.isfinite(q.finish_s).all(), (pl, "every request finishes")
    assert (q.prompt_len.to_numpy() == reqs.prompt_len).all() and (q.output_len.to_numpy() == reqs.output_len).all()
    assert (q.arrival_s <= q.admit_s).all() and (q.admit_s <= q.first_token_s).all()
    assert (q.first_token_s <= q.finish_s).all() and (q.ttft_ms <= q.latency_ms).all(), pl
    span = q.finish_s.max() - q.arrival_s.min()
    assert summ.output_tokens == q.output_len.sum() == reqs.output_len.sum()
    assert np.isclose(summ.tokens_per_s, q.output_len.sum() / span), pl
    assert (s.batch <= setup["max_batch"]).all() and s.kv_occupancy.between(0, 1).all()
    assert (s.kv_blocks <= r.layout.blocks_per_partition * r.layout.partitions).all(), pl

assert len(df) == 4 and set(df.point) == {f"system=attacc,stacks={n},variant={v}" for n in (3, 5)
                                          for v in ("bank-pc", "bg-pc")}
assert (df.goodput_tokens_per_s <= df.tokens_per_s * (1 + 1e-12)).all()
assert (df.meets_slo == (df.tpot_ms_p99 <= 40.0)).all()
assert (df.loc[~df.meets_slo, "goodput_tokens_per_s"] == 0).all() and (df.loc[df.meets_slo, "goodput_tokens_per_s"] > 0).all()
kv = df.assign(stacks=df.point.str.extract(r"stacks=(\d)", expand=False).astype(int)).groupby("stacks").kv_blocks
assert (kv.nunique() == 1).all() and kv.first()[5] > kv.first()[3]
assert len(sweep) == 3 and (sweep.goodput_requests_per_s <= sweep.requests_per_s * (1 + 1e-9)).all()
assert (sweep.goodput_requests_per_s >= 0).all()
# the figures themselves, against the values committed with the model (experiments/key_figures.py)
from experiments import key_figures
key_figures.check("serving", {f"live {pl} {m}": getattr(r.summary(), m) for pl, r in runs.items()
                              for m in ("tokens_per_s", "ttft_ms_p99", "tpot_ms_p99")}
                  | {f"dse {r.point} goodput": r.goodput_tokens_per_s for r in df.itertuples()})
