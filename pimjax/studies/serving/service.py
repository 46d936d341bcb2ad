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
WEIGHTS_WARN_SHARE = 0.75      # warn when one shard's weights fill more of the PIM memory than this
KV_WAIT_WARN_SHARE = 0.10      # warn when more requests than this waited for KV space or were preempted


class CapacityWarning(UserWarning):
    """A serving run limited by its PIM memory: the weights fill most of it, or
    requests often waited for KV space (`serve`)."""
OPTIONS = ("placement", "prefill", "max_batch", "max_tokens", "block_size", "l_bucket", "kv_policy", "overlap",
           "tp", "link_GBps", "gpu_kernels", "partition", "ffn_pim_fraction", "host", "tuner", "cache", "top_k",
           "progress", "precision")
PRECISIONS = ("convert", "strict")


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
    progress: progress bars (rich on a terminal, one plain line per stage
      otherwise).
    precision: "convert" (default: data wider than the PIM units' type runs
      converted to it; the conversions are recorded in
      `ServeResult.conversions`, never a PrecisionWarning) or "strict" (a
      conversion is a PimCompileError naming the op), as `pim_jit`'s.
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
    precision: str = "convert"

    def __post_init__(self):
        choices = {"placement": SYSTEMS, "scheduler": SCHEDULERS, "prefill": PREFILL_POLICIES,
                   "kv_policy": KV_POLICIES, "overlap": OVERLAPS, "gpu_kernels": GPU_KERNELS,
                   "precision": PRECISIONS}
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
    the scheduler; costs: the `StepCosts` (per-layer figures);
    token_times: per request, the time (s) of each generated token (`itl_ms`
    their gaps);
    conversions: what `precision="convert"` converted to the PIM units' type
    in the kernels this run compiled (`pim_jit`'s PrecisionWarning texts,
    recorded here instead of shown; kept with the cached tables).
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
    conversions: tuple = ()
    token_times: tuple = field(repr=False, default=())

    @property
    def itl_ms(self):
        """Inter-token latencies (ms): the gaps between consecutive tokens of
        each request (a decode step, and any prefill step or preemption that
        held the request back), every request's concatenated (float64 [n])."""
        gaps = [np.diff(t) * 1e3 for t in self.token_times if len(t) > 1]
        return np.concatenate(gaps) if gaps else np.zeros(0)

    @property
    def hardware(self) -> dict:
        """What was modelled, as plain numbers: gpu (`System.baseline`'s name:
        the GPU of the GPU-side ops and of placement="gpu"), gpu_model (its
        timing model, `hw.gpu.GPU_MODELS`), gpu_GBps (its memory bandwidth),
        pim (backend/variant), pim_memory_GiB (one tensor-parallel shard's PIM
        memory), weights_GiB / weights_share (one shard's resident weights and
        their share of that memory), kv_capacity_tokens (KV tokens that fit
        beside them, all partitions), tp."""
        lay = self.layout
        g = self.costs.host if self.costs is not None else None
        mem = lay.channels * lay.channel_bytes
        return {"gpu": g.name if g is not None else "", "gpu_model": g.model if g is not None else "",
                "gpu_GBps": float(np.asarray(g.mem_bandwidth).ravel()[0]) / 1e9 if g is not None else float("nan"),
                "pim": self.backend, "pim_memory_GiB": mem / 2**30, "weights_GiB": lay.weight_bytes / 2**30,
                "weights_share": lay.weight_bytes / mem if mem else float("nan"),
                "kv_capacity_tokens": lay.total_blocks * lay.block_size, "tp": self.options.tp}

    def describe(self) -> str:
        """`hardware` in one line (the summary's `hardware` entry)."""
        h = self.hardware
        return (f"{self.model} on {h['pim']} x tp {h['tp']}: {h['pim_memory_GiB']:,.4g} GiB PIM memory per shard "
                f"(weights {h['weights_GiB']:,.3g} GiB = {100 * h['weights_share']:.0f} %, KV capacity "
                f"{h['kv_capacity_tokens']:,} tokens) | GPU {h['gpu']}: {h['gpu_model']} model, "
                f"{h['gpu_GBps']:,.1f} GB/s")

    def summary(self, tpot_slo_ms: float | None = None, *, ttft_slo_ms: float | None = None,
                e2e_slo_ms: float | None = None):
        """pandas Series: what was modelled (`hardware`: gpu, gpu_model,
        gpu_GBps, pim, pim_memory_GiB, weights_GiB, weights_share,
        kv_capacity_tokens, tp; `describe()` as hardware), then requests,
        makespan_s (first arrival to last token), output_tokens, tokens_per_s,
        requests_per_s, p50 / p90 / p99 and mean of ttft_ms, tpot_ms,
        latency_ms and itl_ms (inter-token latency, over every token gap:
        `itl_ms`), mean_batch (time-weighted), max_batch, peak_kv_occupancy,
        preemptions, kv_waits.

        SLOs (ms; any of them, as vLLM's / DistServe's goodput): a request is
        good when its TTFT <= ttft_slo_ms, its TPOT <= tpot_slo_ms (a
        one-token output meets it) and its latency (arrival to last token)
        <= e2e_slo_ms.  With any SLO: ttft_slo_ms / tpot_slo_ms / e2e_slo_ms
        (the given ones), slo_attained (share of good requests),
        goodput_requests_per_s (good requests / makespan) and
        goodput_tokens_per_s (their output tokens / makespan)."""
        import pandas as pd
        r, s = self.requests, self.steps
        span = float(r["finish_s"].max() - r["arrival_s"].min()) if len(r) else 0.0
        tokens = int(r["output_len"].sum())
        out = {"model": self.model, "backend": self.backend, "placement": self.options.placement,
               "scheduler": self.options.scheduler, **self.hardware, "hardware": self.describe(),
               "requests": len(r), "makespan_s": span,
               "output_tokens": tokens,
               "tokens_per_s": tokens / span if span > 0 else float("nan"),
               "requests_per_s": len(r) / span if span > 0 else float("nan")}
        for col, v in (("ttft_ms", r["ttft_ms"]), ("tpot_ms", r["tpot_ms"]), ("latency_ms", r["latency_ms"]),
                       ("itl_ms", self.itl_ms)):
            v = np.asarray(v, np.float64)
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
        slos = {"ttft_slo_ms": (ttft_slo_ms, "ttft_ms"), "tpot_slo_ms": (tpot_slo_ms, "tpot_ms"),
                "e2e_slo_ms": (e2e_slo_ms, "latency_ms")}
        given = {k: v for k, v in slos.items() if v[0] is not None}
        for k, (slo, _) in given.items():
            if not (isinstance(slo, (int, float, np.number)) and np.isfinite(slo) and slo > 0):
                raise ValueError(f"summary: {k} must be > 0 (ms), got {slo!r}")
        if given:
            ok = np.ones(len(r), bool)
            for k, (slo, col) in given.items():
                ok &= ~(r[col].to_numpy(np.float64) > slo)          # NaN (a one-token TPOT) counts as met
                out[k] = float(slo)
            out["slo_attained"] = float(ok.mean()) if len(r) else float("nan")
            out["goodput_requests_per_s"] = float(ok.sum() / span) if span > 0 else float("nan")
            out["goodput_tokens_per_s"] = (float(r["output_len"].to_numpy()[ok].sum() / span) if span > 0
                                           else float("nan"))
        return pd.Series(out)


def _preset_options(backend) -> list[str]:
    """The options the preset `backend` takes ([] for a Backend or an unknown name)."""
    from ...hw.presets import list_backends, preset_options
    if isinstance(backend, str) and backend in list_backends():
        return preset_options(backend)
    return []


def check_options(backend, options: dict) -> None:
    """ValueError for a keyword neither `serve` nor the preset `backend` takes,
    with a "did you mean" over every option the call takes (serve's and the
    preset's)."""
    import difflib
    preset = _preset_options(backend)
    if isinstance(backend, str) and not preset:
        return                                     # an unknown preset: get_backend names the valid ones
    valid = ["requests", "scheduler", *OPTIONS]
    unknown = [k for k in options if k not in OPTIONS and k not in preset]
    if not unknown:
        return
    every = valid + [p for p in preset if p not in valid]
    hints = []
    for k in unknown:
        near = difflib.get_close_matches(k, every, n=1, cutoff=0.6)
        hints.append(f"{k!r} (did you mean {near[0]!r}?)" if near else repr(k))
    where = (f"nor the {backend!r} preset's ({preset})" if preset else
             "(backend options need a preset name, not a Backend)" if isinstance(backend, Backend) else "")
    raise ValueError(f"serve: unknown option(s) {', '.join(hints)}: not one of serve's ({valid}) {where}".rstrip())


def _backend_of(backend, host, backend_options) -> Backend:
    from ...hw.presets import get_backend
    if isinstance(backend, Backend):
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
          **options) -> ServeResult:          # requests: required (None is a TypeError naming it)
    """Serve `requests` with `cfg` on a GPU + PIM `backend`; returns a `ServeResult`.

    cfg: a `ModelConfig` or its name (`configs.get_config`); backend: a preset
    name (with the preset's options among `options`, e.g. stacks=5,
    system="attacc") or a `Backend` -- one tensor-parallel shard;
    requests: a `Requests` trace (`poisson_requests`, `requests_from`,
    `batch_requests`); scheduler: "continuous" or "static".  options: the
    `ServeOptions` fields (placement, prefill, max_batch, max_tokens,
    block_size, l_bucket, kv_policy, overlap, tp, link_GBps, gpu_kernels,
    partition, ffn_pim_fraction, host, tuner, cache, top_k, progress,
    precision); any other keyword goes to the backend preset.

    A missing `requests` is a TypeError.  Bad input raises ValueError naming
    the field: an unknown option (with a "did you mean" over serve's and the
    preset's options), an
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
    if requests is None:
        raise TypeError("serve() missing required argument 'requests': a pimjax.studies.serving.Requests trace "
                        "(poisson_requests, requests_from, batch_requests)")
    if not isinstance(requests, Requests):
        raise ValueError("serve: requests must be a pimjax.studies.serving.Requests (poisson_requests, "
                         f"requests_from, batch_requests), got {type(requests).__name__}")
    if len(requests) == 0:
        raise ValueError("serve: requests is empty")
    check_options(backend, options)
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
                        cache_path=(opts.cache + ".serve.json") if opts.cache else None, progress=opts.progress,
                        precision=opts.precision)
    check_fits(requests, costs.layout)
    t1 = time.perf_counter()
    per, steps, events = simulate(requests, costs, scheduler=opts.scheduler, prefill=opts.prefill,
                                  max_batch=int(opts.max_batch), max_tokens=int(opts.max_tokens),
                                  kv_policy=opts.kv_policy if opts.scheduler == "continuous" else "wait",
                                  progress=opts.progress)
    t2 = time.perf_counter()
    res = ServeResult(cfg.name, f"{be.name}/{be.variant}", _request_frame(requests, per),
                      _step_frame(steps, costs.layout), _event_frame(events), costs.layout, opts,
                      t1 - t0, t2 - t1, costs, tuple(costs.conversions),
                      tuple(t / 1e9 for t in per["token_ns"]))
    _warn_capacity(res)
    return res


def _warn_capacity(res: ServeResult) -> None:
    """CapacityWarning when the weights fill more than `WEIGHTS_WARN_SHARE`
    of the PIM memory, or more than `KV_WAIT_WARN_SHARE` of the requests
    waited for KV space or were preempted: the run measures the memory, and
    says so."""
    import warnings

    from ...errors import user_stacklevel
    h = res.hardware
    more = "more memory: a system with more stacks (attacc: system='attacc', stacks=), or a higher tp"
    if h["weights_share"] > WEIGHTS_WARN_SHARE:
        warnings.warn(f"serve: {res.model}'s weights ({h['weights_GiB']:,.3g} GiB per shard) fill "
                      f"{100 * h['weights_share']:.0f} % of the PIM memory ({h['pim_memory_GiB']:,.4g} GiB, "
                      f"{h['pim']}): {h['kv_capacity_tokens']:,} KV tokens remain, which caps the batch; {more}",
                      CapacityWarning, stacklevel=user_stacklevel())
    ev = res.events
    if len(ev) and len(res.requests):
        hit = ev.loc[ev["kind"].isin(("kv_wait", "preempt")), "request"].nunique()
        if hit > KV_WAIT_WARN_SHARE * len(res.requests):
            warnings.warn(f"serve: {hit} of {len(res.requests)} requests waited for KV space or were preempted "
                          f"(KV capacity {h['kv_capacity_tokens']:,} tokens on {h['pim_memory_GiB']:,.4g} GiB; "
                          f"events: res.events); {more}", CapacityWarning, stacklevel=user_stacklevel())


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


def rate_sweep(cfg, backend="attacc", rates=(1.0, 2.0, 4.0, 8.0), *, n: int = 200, prompt=None, output=None,
               seed: int = 0, requests: Requests | None = None, ttft_slo_ms: float | None = None,
               tpot_slo_ms: float | None = None, e2e_slo_ms: float | None = None, **options):
    """Goodput and latency against the request rate: one `serve` per rate in
    `rates` (requests/s), the same lengths at each; returns a pandas DataFrame,
    one row per rate (column `rate`, then `ServeResult.summary`'s columns with
    the SLOs given).

    The trace at each rate: `n` Poisson arrivals (`poisson_requests`, `seed`)
    with lengths from `prompt` / `output` (defaults: uniform 128..2048 /
    32..512), the same lengths at every rate; or `requests` (a trace): its
    lengths in its order, the arrivals re-drawn at each rate.  options:
    `serve`'s and the backend preset's (system="attacc", tp=, placement=, ...);
    one Tuner serves every rate (given as tuner=, or made once), so the
    kernels compile once (the serving tables are reused).

    >>> df = rate_sweep("llama2-7b", "attacc", [1, 2, 4], n=100, system="attacc",
    ...                 ttft_slo_ms=1000, tpot_slo_ms=100)                # doctest: +SKIP
    >>> df[["rate", "goodput_requests_per_s", "ttft_ms_p99", "tpot_ms_p99"]]  # doctest: +SKIP
    """
    import pandas as pd

    from ...search.tuner import Tuner
    from .requests import poisson_requests, uniform
    rates = [float(r) for r in np.atleast_1d(rates)]
    if not rates or not all(np.isfinite(r) and r > 0 for r in rates):
        raise ValueError(f"rate_sweep: rates must be > 0 requests/s, got {rates!r}")
    if requests is not None:
        if prompt is not None or output is not None:
            raise ValueError("rate_sweep: give requests= or prompt= / output=, not both")
        prompt_len, output_len = requests.prompt_len, requests.output_len
    else:
        base = poisson_requests(n, 1.0, prompt=prompt if prompt is not None else uniform(128, 2048),
                                output=output if output is not None else uniform(32, 512), seed=seed)
        prompt_len, output_len = base.prompt_len, base.output_len
    check_options(backend, options)
    if options.get("tuner") is None:
        options["tuner"] = Tuner(top_k=options.get("top_k", 8), cache=options.get("cache"))
    rows = []
    for rate in rates:
        gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=len(prompt_len))
        reqs = Requests(np.cumsum(gaps), prompt_len, output_len)
        res = serve(cfg, backend, reqs, **options)
        s = res.summary(tpot_slo_ms, ttft_slo_ms=ttft_slo_ms, e2e_slo_ms=e2e_slo_ms)
        rows.append({"rate": rate, **s.to_dict()})
    return pd.DataFrame(rows)
