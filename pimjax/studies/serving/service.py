"""`serve`: a GPU + PIM system serving a stream of LLM requests.

    from pimjax.models import get_config
    from pimjax.studies import serve
    from pimjax.studies.serving import poisson_requests, uniform
    reqs = poisson_requests(200, rate=2.0, prompt=uniform(128, 2048), output=uniform(32, 512), seed=0)
    res = serve(get_config("llama2-70b"), backend="attacc", requests=reqs, system="attacc",
                placement="pimjax", tp=8, max_batch=64)
    res.requests      # one row per request: ttft_ms, tpot_ms, latency_ms, ...
    res.steps         # one row per step: batch, tokens, kv_occupancy, ...
    res.summary()     # tokens/s, requests/s, p50 / p90 / p99 of TTFT, TPOT, latency

What is modelled: `costs` (step times from compiled kernels, KV capacity)
and `engine` (the scheduler).  `backend` is ONE tensor-parallel shard's PIM
memory and GPU (e.g. attacc with system="attacc": one AttAcc of 5 HBM3 stacks
beside an A100); `tp` shards run in lockstep, joined by all-reduces.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ...hw.core import Backend, HostModel
from .costs import GPU_KERNELS, OVERLAPS, SYSTEMS, KVLayout, build_costs
from .engine import KV_POLICIES, PREFILL_POLICIES, SCHEDULERS, STEP_COLUMNS, simulate
from .requests import Requests

PERCENTILES = (50, 90, 99)
OPTIONS = ("placement", "prefill", "max_batch", "max_tokens", "block_size", "l_bucket", "kv_policy", "overlap",
           "tp", "link_GBps", "gpu_kernels", "partition", "ffn_pim_fraction", "host", "tuner", "cache", "top_k",
           "progress")


@dataclass(frozen=True)
class ServeOptions:
    """Everything `serve` takes besides the model, backend and trace (validated).

    placement: where ops run (`costs.SYSTEMS`, `decode`'s systems): "gpu",
      "attacc-base", "attacc-full", "base+dcc", "full+dcc", "pimjax" (default).
    scheduler: "continuous" (default) or "static"; prefill: "prefill-first"
      (default) or "decode-first" (chunked prefill).
    max_batch: requests in flight at most (1..); max_tokens: tokens per step
      (the budget; a longer prompt runs alone).
    block_size: tokens per KV block (paged); l_bucket: context granularity the
      PIM attention is compiled at (tokens).
    kv_policy: "preempt" (default; vLLM's recompute) or "wait" (reserve the
      whole context at admission).
    overlap: "serial" (default), "pipeline" (AttAcc --pipeopt) or "subbatch"
      (NeuPIMs).
    tp: tensor-parallel shards (GPUs); link_GBps: their all-reduce link
      (default NVLink3, 600 GB/s, AttAcc's config.py / the A100 whitepaper).
    gpu_kernels: "traced" (default: the traced layer's ops, as `decode`) or
      "fused" (AttAcc's layer list: fused QKV, one NORM / ACT kernel each).
    partition: channels per request partition (default `costs.kv_layout`'s).
    ffn_pim_fraction: the FFN split of attacc-full / full+dcc ("balanced" or
      a float in [0, 1]).
    host: a GPU HostModel replacing the backend's (`System.host` and `gpu`).
    tuner / cache / top_k: the tuner (a shared `Tuner`, or a new one with a
      TuneCache JSON `cache` path -- the serving tables go beside it, in
      `<cache>.serve.json` -- verifying the `top_k` predicted drafts).
    progress: rich progress bars.
    """
    placement: str = "pimjax"
    scheduler: str = "continuous"
    prefill: str = "prefill-first"
    max_batch: int = 64
    max_tokens: int = 2048
    block_size: int = 16
    l_bucket: int = 16
    kv_policy: str = "preempt"
    overlap: str = "serial"
    tp: int = 1
    link_GBps: float = 600.0
    gpu_kernels: str = "traced"
    partition: int | None = None
    ffn_pim_fraction: object = "balanced"
    host: HostModel | None = None
    tuner: object = None
    cache: str | None = None
    top_k: int = 8
    progress: bool = True

    def __post_init__(self):
        choices = {"placement": SYSTEMS, "scheduler": SCHEDULERS, "prefill": PREFILL_POLICIES,
                   "kv_policy": KV_POLICIES, "overlap": OVERLAPS, "gpu_kernels": GPU_KERNELS}
        for name, valid in choices.items():
            if getattr(self, name) not in valid:
                raise ValueError(f"serve: {name}={getattr(self, name)!r}; valid values are {list(valid)}")
        for name in ("max_batch", "max_tokens", "block_size", "l_bucket", "tp", "top_k"):
            v = getattr(self, name)
            if not (isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 1):
                raise ValueError(f"serve: {name} must be a positive int, got {v!r}")
        if not (np.isfinite(self.link_GBps) and self.link_GBps > 0):
            raise ValueError(f"serve: link_GBps must be > 0 (GB/s), got {self.link_GBps!r}")
        f = self.ffn_pim_fraction
        if f != "balanced" and not (isinstance(f, (int, float)) and 0.0 <= float(f) <= 1.0):
            raise ValueError(f"serve: ffn_pim_fraction must be 'balanced' or in [0, 1], got {f!r}")
        if self.host is not None and not isinstance(self.host, HostModel):
            raise ValueError(f"serve: host must be a HostModel, got {type(self.host).__name__}")


@dataclass(frozen=True)
class ServeResult:
    """What a serving run gives (DataFrames; times in seconds / ms).

    requests: one row per request -- arrival_s, prompt_len, output_len,
      admit_s, first_token_s, finish_s, queue_ms (arrival to admission),
      ttft_ms (arrival to first token), tpot_ms ((finish - first token) /
      (output_len - 1); NaN for one-token outputs), latency_ms (arrival to
      last token), preemptions.
    steps: one row per step -- t_s (start), ms, decodes, prefills,
      prefill_tokens, tokens (GEMM rows), batch (requests in the step), running
      (admitted after it), waiting, kv_blocks (allocated), kv_occupancy
      (kv_blocks / capacity), kv_tokens (stored), gpu_ms / pim_ms (busy).
    events: memory events -- t_s, kind ("kv_wait", "preempt"), request, blocks,
      free_blocks.
    layout: the `KVLayout` (capacity); options: the `ServeOptions`;
    compile_s / simulate_s: wall seconds building the step costs / running
    the scheduler; costs: the `StepCosts` (per-layer figures).
    """
    model: str
    backend: str
    requests: object
    steps: object
    events: object
    layout: KVLayout
    options: ServeOptions
    compile_s: float
    simulate_s: float
    costs: object = field(repr=False, default=None)

    def summary(self, tpot_slo_ms: float | None = None):
        """pandas Series: requests, makespan_s (first arrival to last token),
        output_tokens, tokens_per_s, requests_per_s, p50 / p90 / p99 and mean of
        ttft_ms, tpot_ms and latency_ms, mean_batch (time-weighted), max_batch,
        peak_kv_occupancy, preemptions, kv_waits; with `tpot_slo_ms`, also
        slo_attained (share of requests with TPOT within it, one-token ones
        count as met) and goodput_tokens_per_s (output tokens of those / makespan)."""
        import pandas as pd
        r, s = self.requests, self.steps
        span = float(r["finish_s"].max() - r["arrival_s"].min()) if len(r) else 0.0
        tokens = int(r["output_len"].sum())
        out = {"model": self.model, "backend": self.backend, "placement": self.options.placement,
               "scheduler": self.options.scheduler, "requests": len(r), "makespan_s": span,
               "output_tokens": tokens,
               "tokens_per_s": tokens / span if span > 0 else float("nan"),
               "requests_per_s": len(r) / span if span > 0 else float("nan")}
        for col in ("ttft_ms", "tpot_ms", "latency_ms"):
            v = r[col].to_numpy(np.float64)
            v = v[np.isfinite(v)]
            for q in PERCENTILES:
                out[f"{col}_p{q}"] = float(np.percentile(v, q)) if v.size else float("nan")
            out[f"{col}_mean"] = float(v.mean()) if v.size else float("nan")
        w = s["ms"].to_numpy(np.float64)
        out["mean_batch"] = float((s["batch"] * w).sum() / w.sum()) if w.sum() > 0 else float("nan")
        out["max_batch"] = int(s["batch"].max()) if len(s) else 0
        out["peak_kv_occupancy"] = float(s["kv_occupancy"].max()) if len(s) else 0.0
        out["preemptions"] = int((self.events["kind"] == "preempt").sum()) if len(self.events) else 0
        out["kv_waits"] = int((self.events["kind"] == "kv_wait").sum()) if len(self.events) else 0
        if tpot_slo_ms is not None:
            ok = ~(r["tpot_ms"] > tpot_slo_ms)          # NaN (one-token outputs) counts as met
            out["tpot_slo_ms"] = float(tpot_slo_ms)
            out["slo_attained"] = float(ok.mean()) if len(r) else float("nan")
            out["goodput_tokens_per_s"] = float(r.loc[ok, "output_len"].sum() / span) if span > 0 else float("nan")
        return pd.Series(out)


def _backend_of(backend, host, backend_options) -> Backend:
    from ...hw.presets import get_backend
    if isinstance(backend, Backend):
        if backend_options:
            raise ValueError(f"serve: backend options {sorted(backend_options)} need a preset name, "
                             f"not a Backend")
        b = backend
    elif isinstance(backend, str):
        b = get_backend(backend, **backend_options)
    else:
        raise ValueError(f"serve: backend must be a preset name or a Backend, got {type(backend).__name__}")
    if host is not None:
        b = b.replace(system=b.system.replace(host=host, gpu=host))
    return b


def check_fits(requests: Requests, layout: KVLayout) -> None:
    """ValueError naming the request and field when one request's KV cannot
    fit a partition even alone (it would wait forever)."""
    cap = layout.blocks_per_partition * layout.block_size
    bad = np.flatnonzero(requests.prompt_len > cap)
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"serve: requests.prompt_len[{i}] = {int(requests.prompt_len[i])} tokens exceeds the KV "
                         f"capacity of a partition ({cap} tokens = {layout.blocks_per_partition} blocks of "
                         f"{layout.block_size}; {layout.partition_channels} channels beside the weights)")
    final = requests.prompt_len + requests.output_len - 1
    bad = np.flatnonzero(final > cap)
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"serve: requests.output_len[{i}] = {int(requests.output_len[i])}: prompt + output - 1 = "
                         f"{int(final[i])} tokens exceeds the KV capacity of a partition ({cap} tokens)")


def serve(cfg, backend="attacc", requests: Requests | None = None, scheduler: str = "continuous",
          **options) -> ServeResult:
    """Serve `requests` with `cfg` on a GPU + PIM `backend`; returns a `ServeResult`.

    cfg: a `ModelConfig` or its name (`configs.get_config`); backend: a preset
    name (with the preset's options among `options`, e.g. stacks=5,
    system="attacc") or a `Backend` -- one tensor-parallel shard;
    requests: a `Requests` trace (`poisson_requests`, `requests_from`,
    `batch_requests`); scheduler: "continuous" or "static".  options: the
    `ServeOptions` fields (placement, prefill, max_batch, max_tokens,
    block_size, l_bucket, kv_policy, overlap, tp, link_GBps, gpu_kernels,
    partition, ffn_pim_fraction, host, tuner, cache, top_k, progress); any
    other keyword goes to the backend preset (ValueError if it takes none).

    Bad input raises ValueError naming the field: an unknown option, an
    invalid value, a request whose prompt (or whole context) exceeds a
    partition's KV capacity; lengths and arrival order are checked by
    `Requests` itself.

    >>> from pimjax.studies.serving import batch_requests
    >>> res = serve("gpt3-13b", "attacc", batch_requests(1, 128, 3), system="attacc", tp=8,
    ...             placement="gpu", progress=False)                        # doctest: +SKIP
    >>> res.requests[["ttft_ms", "tpot_ms"]]                               # doctest: +SKIP
    """
    from ...models.configs import ModelConfig, get_config
    from ...search.tuner import Tuner
    t0 = time.perf_counter()
    if isinstance(cfg, str):
        cfg = get_config(cfg)
    if not isinstance(cfg, ModelConfig):
        raise ValueError(f"serve: cfg must be a ModelConfig or a model name, got {type(cfg).__name__}")
    if not isinstance(requests, Requests):
        raise ValueError("serve: requests must be a pimjax.studies.serving.Requests (poisson_requests, "
                         f"requests_from, batch_requests), got {type(requests).__name__}")
    if len(requests) == 0:
        raise ValueError("serve: requests is empty")
    backend_options = {k: options.pop(k) for k in list(options) if k not in OPTIONS}
    opts = ServeOptions(scheduler=scheduler, **options)
    be = _backend_of(backend, opts.host, backend_options)
    tuner = opts.tuner if opts.tuner is not None else Tuner(top_k=opts.top_k, cache=opts.cache)
    lo = int((requests.prompt_len + 1).min())
    hi = max(requests.max_context, lo)
    costs = build_costs(cfg, be, system=opts.placement, tp=opts.tp, link_GBps=float(opts.link_GBps),
                        l_bucket=int(opts.l_bucket), block_size=int(opts.block_size), max_batch=int(opts.max_batch),
                        partition=opts.partition, overlap=opts.overlap, gpu_kernels=opts.gpu_kernels,
                        ffn_pim_fraction=opts.ffn_pim_fraction, contexts=(lo, hi), tuner=tuner,
                        cache_path=(opts.cache + ".serve.json") if opts.cache else None, progress=opts.progress)
    check_fits(requests, costs.layout)
    t1 = time.perf_counter()
    per, steps, events = simulate(requests, costs, scheduler=opts.scheduler, prefill=opts.prefill,
                                  max_batch=int(opts.max_batch), max_tokens=int(opts.max_tokens),
                                  kv_policy=opts.kv_policy if opts.scheduler == "continuous" else "wait",
                                  progress=opts.progress)
    t2 = time.perf_counter()
    return ServeResult(cfg.name, f"{be.name}/{be.variant}", _request_frame(requests, per),
                       _step_frame(steps, costs.layout), _event_frame(events), costs.layout, opts,
                       t1 - t0, t2 - t1, costs)


def _request_frame(requests: Requests, per: dict):
    df = requests.to_frame()
    arr = df["arrival_s"].to_numpy()
    df["admit_s"] = per["admit_ns"] / 1e9
    df["first_token_s"] = per["first_ns"] / 1e9
    df["finish_s"] = per["finish_ns"] / 1e9
    df["queue_ms"] = (df["admit_s"] - arr) * 1e3
    df["ttft_ms"] = (df["first_token_s"] - arr) * 1e3
    n = df["output_len"].to_numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        df["tpot_ms"] = np.where(n > 1, (df["finish_s"] - df["first_token_s"]) * 1e3 / np.maximum(n - 1, 1), np.nan)
    df["latency_ms"] = (df["finish_s"] - arr) * 1e3
    df["preemptions"] = per["preemptions"]
    return df


def _step_frame(steps: list, layout: KVLayout):
    import pandas as pd
    df = pd.DataFrame(steps, columns=list(STEP_COLUMNS))
    df.insert(0, "t_s", df.pop("t_ns") / 1e9)
    df.insert(1, "ms", df.pop("ns") / 1e6)
    df["kv_occupancy"] = df["kv_blocks"] / max(layout.total_blocks, 1)
    df["gpu_ms"] = df.pop("gpu_ns") / 1e6
    df["pim_ms"] = df.pop("pim_ns") / 1e6
    df.index.name = "step"
    return df


def _event_frame(events: list):
    import pandas as pd
    df = pd.DataFrame(events, columns=["t_ns", "kind", "request", "blocks", "free_blocks"])
    df.insert(0, "t_s", df.pop("t_ns") / 1e9)
    return df
