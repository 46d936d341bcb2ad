"""The decode loop: per-phase times per generated token for GPU-only, AttAcc-Base,
AttAcc-Full and pimjax's tuned placement (DCC §V-B, Fig. 8).

    res = decode(get_config("gpt3-13b"), backend="attacc", stacks=5, batch=1, prompt=2048, tokens=128)
    res.per_token()          # {system: {phase: ns per token, all layers}}
    res.table()              # pandas DataFrame: system x phase, ms per token

What is traced and simulated.  N output tokens after an L-token prompt: the
prompt is processed on the GPU (prefill, not timed here) and gives the first
token; tokens 2..N are decode steps whose context (this token included) grows
L + 1 ... L + N - 1, as AttAcc's system model (`src/model.py`: `lin + stage`);
`prefill_ns` is the prompt on the GPU roofline (`layers.make_prefill`), apart.
All decoder layers of a model are identical, so ONE layer is traced and timed
and the per-token figures are that layer times `n_layers`.  In a layer only the
attention reads the KV cache, so only the attention changes with the context:
the layer (`layers.make_layer(cfg, append=False)`, weights and caches resident)
is compiled once per (model, batch) and gives every other op's figures; the
attention function alone is compiled for each new context length -- DCC's
"dynamic prediction" (§IV-D): draft generation and prediction for the new
shape (`pim_jit(...).lower()`), then pimjax's verification of the predicted
top-k by simulation (`.compile()`); both wall times are counted and reported
(`tuning_s`: generation + prediction, what DCC includes in its totals;
`verify_s`: the simulations).

The PIM attention is compiled for the context rounded up to `l_bucket` tokens:
the KV cache is kept in blocks of `l_bucket` rows (paged KV caches use 16-token
blocks, e.g. vLLM's default) and AttAcc's bank-level units read the sequence in
16-row steps anyway (attacc.md: ⌈L/16⌉ MACs per column), so the padded rows
cost the PIM what the hardware would; `l_bucket=1` compiles every context
exactly.  The GPU roofline reads exactly L rows.

Systems (`SYSTEMS`), each op of the layer placed as:

* ``gpu``          -- every op on the host roofline (`backend.system.baseline`).
* ``attacc-base``  -- the attention on PIM with the backend's baseline mapping
  (AttAcc's open-source mapping), everything else on the GPU.
* ``attacc-full``  -- attacc-base plus a fraction of every FFN GEMV on PIM with
  the baseline mapping, concurrent with the GPU's share (AttAcc's `--ffopt`:
  `_ff_parallel` splits the FFN between GPU and PIM by their bandwidths).
  `ffn_pim_fraction="balanced"` splits so both sides finish together on the
  simulated PIM time and the GPU roofline (t = t_gpu t_pim / (t_gpu + t_pim)); a
  float f gives max((1 - f) t_gpu, f t_pim).  Both assume the PIM time of a
  share scales with its rows.
* ``base+dcc``     -- attacc-base with the tuned attention and QKV / projection
  on PIM where the tuned program beats the GPU (DCC's Base+DCC bars).
* ``full+dcc``     -- base+dcc plus the FFN split of attacc-full on the tuned
  FFN programs (DCC's Full+DCC bars).
* ``pimjax``       -- pim_jit's own placement: every op on PIM where its tuned
  program (data rearrangement included) beats the GPU roofline.

Phases: `layers.PHASES`; an op's phase comes from what it reads (`op_phases`).
Not modelled: the LM head and embeddings, sampling, collective
communication (tensor-parallel all-reduces), kernel-launch costs beyond the
host model's `launch_overhead_ns`, and the overlap of GPU and PIM work across
phases in `decode` (AttAcc's `--pipeopt`: `attacc_end_to_end` applies AttAcc's
own rule, `pipelined_fc_saving`).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import jax
import numpy as np

from ..api import pim_jit
from ..hw.core import Backend, HostModel
from ..hw.presets import get_backend
from ..models.configs import ModelConfig
from ..models.layers import CACHE_PHASE, PARAM_PHASES, PHASES, decode_attention, layer_shapes, make_layer
from ..plan.plans import host_bytes
from ..search.tuner import Tuner
from ..sim.gpu_kernels import gpu_kernels
from ..trace.frontend import make_graph
from ..trace.ir import PimGraph

SYSTEMS = ("gpu", "attacc-base", "attacc-full", "base+dcc", "full+dcc", "pimjax")
RESIDENT = ("params", "k_cache", "v_cache")


# --------------------------------------------------------------------------
# phases of a traced layer
# --------------------------------------------------------------------------
def input_phases(graph: PimGraph, args: tuple) -> dict:
    """{input value id: phase} of `layer(params, x, k_cache, v_cache, pos)`'s
    arguments: parameters by `PARAM_PHASES`, the caches "attention"."""
    params = args[0]
    leaves = jax.tree_util.tree_flatten_with_path(params)[0]
    out = {}
    for (path, _), vid in zip(leaves, graph.inputs):
        out[vid] = PARAM_PHASES.get(path[0].key, "other")
    n = len(leaves)
    out[graph.inputs[n + 1]] = out[graph.inputs[n + 2]] = CACHE_PHASE
    return out


def op_phases(graph: PimGraph, in_phase: dict, blocks: dict | None = None) -> list[str]:
    """The phase of every op of `graph`.

    An op that reads a tagged input is an anchor of that input's phase (of
    its largest tagged operand where it reads several: a GEMV with a fused
    norm scale is its weight's).  Any other op lies between anchors: it takes
    phase P when an anchor of P precedes it (an ancestor) and another follows
    it (a descendant) -- the softmax between score and context is
    "attention", the activation between the FFN GEMVs "ffn"; else "other"
    (norms, residuals, RoPE).  `blocks` ({first: op indices}, fused attention
    blocks) share their ops' phase.
    """
    shapes = {i: int(np.prod(v.shape)) for i, v in enumerate(graph.values)}
    n = len(graph.ops)
    producer = {r.value: i for i, op in enumerate(graph.ops) for r in op.results}
    anchor: list = [None] * n
    for i, op in enumerate(graph.ops):
        tagged = [(shapes[a.value], in_phase[a.value]) for a in op.operands if a.value in in_phase]
        tagged = [t for t in tagged if t[1] != "other"] or tagged
        if tagged:
            anchor[i] = max(tagged)[1]
    before: list = [set() for _ in range(n)]          # phases of anchors among the ancestors
    for i, op in enumerate(graph.ops):
        for a in op.operands:
            j = producer.get(a.value)
            if j is not None:
                before[i] |= before[j] | ({anchor[j]} if anchor[j] else set())
    after: list = [set() for _ in range(n)]            # ... among the descendants
    consumers: dict = {}
    for i, op in enumerate(graph.ops):
        for a in op.operands:
            if a.value in producer:
                consumers.setdefault(producer[a.value], set()).add(i)
    for i in reversed(range(n)):
        for c in consumers.get(i, ()):
            after[i] |= after[c] | ({anchor[c]} if anchor[c] else set())
    out = []
    for i in range(n):
        if anchor[i]:
            out.append(anchor[i])
            continue
        common = [p for p in PHASES if p in before[i] and p in after[i] and p != "other"]
        out.append(common[0] if len(common) == 1 else "other")
    for block in (blocks or {}).values():
        tags = {out[i] for i in block} - {"other"}
        for i in block:
            out[i] = tags.pop() if len(tags) == 1 else out[i]
    return out


# --------------------------------------------------------------------------
# results
# --------------------------------------------------------------------------
@dataclass
class OpFigures:
    """One op of the layer: phase, GPU roofline ns, tuned PIM ns and the
    baseline mapping's ns (NaN where the op cannot run on PIM)."""
    index: int
    name: str
    phase: str
    kind: str
    gpu_ns: float
    pim_ns: float = float("nan")
    baseline_ns: float = float("nan")
    kernel_cycles: float = float("nan")            # PIM-side cycles, no host read-back / merge
    baseline_kernel_cycles: float = float("nan")


@dataclass
class AttentionFigures:
    """The attention block at one (bucketed) context length."""
    context: int
    pim_ns: float
    baseline_ns: float
    gpu_ns: float
    tuning_s: float = 0.0
    verify_s: float = 0.0
    drafts: int = 0
    simulated: int = 0
    kernel_cycles: float = float("nan")           # the tuned program's PIM-side cycles (no host read-back / merge)
    baseline_kernel_cycles: float = float("nan")  # the same of the baseline mapping (what Ramulator times)


@dataclass
class DecodeResult:
    """Per-token, per-phase times of every system (ns, all layers).

    steps: [(context, {system: {phase: ns}})] per decode step;
    layer_ops: the layer's op figures; attention: {bucketed context:
    AttentionFigures}; conversions: what precision="convert" converted to
    the PIM units' type (pim_jit's PrecisionWarning texts, recorded here
    instead of shown); tuning_s / verify_s: wall seconds of draft generation +
    prediction / of verification by simulation for new context lengths
    (the layer's own compile in `compile_s`); prefill_ns: the prompt on the
    GPU roofline (all layers; the first output token); wall_s: the whole call.
    """
    model: str
    backend: str
    host: str
    batch: int
    prompt: int
    tokens: int
    n_layers: int
    l_bucket: int
    ffn_pim_fraction: object
    steps: list = field(default_factory=list)
    layer_ops: list = field(default_factory=list)
    attention: dict = field(default_factory=dict)
    prefill_ns: float = float("nan")
    compile_s: float = 0.0
    tuning_s: float = 0.0
    verify_s: float = 0.0
    wall_s: float = 0.0
    conversions: list = field(default_factory=list)

    def per_token(self) -> dict:
        """{system: {phase: mean ns per generated token (decode steps), all layers}}."""
        out = {}
        for s in SYSTEMS:
            out[s] = {p: float(np.mean([st[1][s][p] for st in self.steps])) for p in PHASES}
        return out

    def totals(self) -> dict:
        """{system: mean ns per token}."""
        return {s: sum(v.values()) for s, v in self.per_token().items()}

    def speedups(self) -> dict:
        """{system: GPU time / system time} per token."""
        t = self.totals()
        return {s: t["gpu"] / v for s, v in t.items()}

    def table(self):
        """pandas DataFrame: systems x phases, ms per token, plus total and speedup over GPU."""
        import pandas as pd
        df = pd.DataFrame(self.per_token()).T[list(PHASES)] / 1e6
        df["total"] = df.sum(axis=1)
        df["vs GPU"] = df.loc["gpu", "total"] / df["total"]
        df.index.name = f"{self.model} B{self.batch} Lin{self.prompt} Lout{self.tokens} (ms/token)"
        return df


# --------------------------------------------------------------------------
# the driver
# --------------------------------------------------------------------------
def attention_fn(group: int):
    """A decode step's attention as a function of (q, k_cache, v_cache), `group` query heads per
    KV head (`models.layers.decode_attention`): what the studies trace and time."""
    def attention(q, k_cache, v_cache):
        return decode_attention(q, k_cache, v_cache, group)
    return attention


def attention_shapes(cfg: ModelConfig, batch: int, context: int, dtype=np.float16):
    """`attention_fn`'s argument shapes: q [batch, n_heads, head_dim] and the K / V caches
    [batch, n_kv_heads, context, head_dim], of `dtype`."""
    S = jax.ShapeDtypeStruct
    cache = S((batch, cfg.n_kv_heads, context, cfg.head_dim), dtype)
    return S((batch, cfg.n_heads, cfg.head_dim), dtype), cache, cache


def gpu_attention_ns(cfg: ModelConfig, batch: int, context: int, backend: Backend) -> float:
    """The attention at `context` on the host roofline (ns, one layer): its
    ops traced at this context and run as the GPU's kernels (`sim.gpu_kernels`)."""
    g = make_graph(attention_fn(cfg.n_heads // cfg.n_kv_heads), *attention_shapes(cfg, batch, context))
    shapes = {i: v.shape for i, v in enumerate(g.values)}
    eb = host_bytes(g, backend)
    return float(sum(k.ns for k in gpu_kernels(g, backend.system.baseline, shapes, eb)))


class GpuAttention:
    """`gpu_attention_ns` at any context from two traces.

    Every attention op's bytes and FLOPs are affine in the context L (each
    L-sized dimension is exactly L), so they are interpolated exactly from
    traces at two contexts and timed by the host model's own roofline
    (`HostModel.time_ns`, as `host_time`), op by op; a decode of 128 tokens
    traces twice instead of 127 times (tests check it against
    `gpu_attention_ns`).  On the kernel models ("occupancy", "attacc":
    `pimjax.hw.gpu`) it is `HostModel.attention_ns`: score, one fused softmax
    and context kernels, as AttAcc's system model counts them (jnp's softmax
    traces to five ops, which those models would each charge a kernel's fixed
    cost); with grouped-query attention each KV head's cache is read once for
    its group of queries (`kv_heads`, the traced GQA einsum's shapes)."""

    def __init__(self, cfg: ModelConfig, batch: int, backend: Backend, probe: int = 64):
        from ..sim.host import op_bytes, op_flops
        self.host = backend.system.baseline
        self.cfg, self.batch = cfg, batch
        per = []
        for L in (probe, 2 * probe):
            g = make_graph(attention_fn(cfg.n_heads // cfg.n_kv_heads), *attention_shapes(cfg, batch, L))
            shapes = {i: v.shape for i, v in enumerate(g.values)}
            eb = host_bytes(g, backend)
            per.append([(op_bytes(op, shapes, eb), op_flops(op)) for op in g.ops])
        if len(per[0]) != len(per[1]):
            raise AssertionError("the attention traced to different graphs at two contexts")
        self.probe = probe
        self.terms = [(b0, (b1 - b0) / probe, f0, (f1 - f0) / probe) for (b0, f0), (b1, f1) in zip(*per)]

    def __call__(self, context: int) -> float:
        if context < 2:        # a one-element softmax traces to other ops
            raise ValueError(f"GpuAttention: context must be >= 2, got {context}")
        if self.host.model not in ("roofline", "dcc"):
            # a kernel model (hw/gpu.py): the attention as the three kernels a GPU
            # runs (score, fused softmax, context), as AttAcc's system model times
            # it, not jnp's softmax pieces each charged as a kernel of its own
            return float(self.host.attention_ns(self.cfg.n_heads, self.cfg.head_dim, context, self.batch,
                                                kv_heads=self.cfg.n_kv_heads))
        dl = context - self.probe
        return float(sum(np.asarray(self.host.time_ns(b0 + db * dl, f0 + df * dl))
                         for b0, db, f0, df in self.terms))


def prefill_gpu_ns(cfg: ModelConfig, batch: int, prompt: int, backend: Backend) -> float:
    """The prefill of a `prompt`-token prompt on the host roofline (ns, all
    layers): `layers.make_prefill` traced from shapes and run as the GPU's kernels
    (`sim.gpu_kernels`)."""
    from ..models.layers import make_prefill, param_shapes
    x = jax.ShapeDtypeStruct((batch, prompt, cfg.d_model), np.float16)
    g = make_graph(make_prefill(cfg), param_shapes(cfg), x)
    shapes = {i: v.shape for i, v in enumerate(g.values)}
    eb = host_bytes(g, backend)
    return cfg.n_layers * float(sum(k.ns for k in gpu_kernels(g, backend.system.baseline, shapes, eb)))


def _baseline(plan, backend: Backend, graph, tuner: Tuner):
    """(ns, kernel cycles) of the backend's baseline mapping for a PIM plan.

    A freshly tuned op carries it (the tuner simulates the baseline beside
    the top-k); for a choice answered by the tuning cache it is lowered and
    simulated once, then kept in the same cache under the op's key plus
    "|baseline" (mode "baseline": a record no tuner takes as a decision)."""
    from ..backends import baseline as baseline_draft
    from ..report import baseline_report
    from ..search.cache import draft_to_dict
    if plan.choice is not None and plan.choice.baseline is not None:
        r = plan.choice.baseline
        return float(r.total_ns), float(r.kernel_cycles)
    key = plan.proposal.key + "|baseline" if plan.proposal is not None else None
    hit = tuner.cache.get(key) if key else None
    if hit is not None and "baseline_ns" in hit:
        return float(hit["baseline_ns"]), float(hit["baseline_kernel_cycles"])
    shapes = {i: v.shape for i, v in enumerate(graph.values)}
    r = baseline_report(plan, backend, shapes)
    if r is None:
        return float("nan"), float("nan")
    out = float(r.total_ns), float(r.kernel_cycles)
    if key:
        tuner.cache.put(key, {"draft": draft_to_dict(baseline_draft(plan.draft_op, backend)), "mode": "baseline",
                              "simulated": 0, "space": 0, "baseline_ns": out[0], "baseline_kernel_cycles": out[1]})
    return out


def op_figures(compiled, phases, tuner: Tuner) -> list[OpFigures]:
    """Per op of a compiled layer: phase, GPU roofline, tuned and baseline ns
    (read from the plans; a block's figures on its last op, fused ops 0)."""
    out = []
    for p, ph in zip(compiled.plans, phases):
        f = OpFigures(p.index, "attention" if p.block else p.op.name, ph, p.op.kind, float(p.host_ns))
        if p.placement == "pim":
            f.pim_ns = float(p.choice.report.total_ns)
            f.baseline_ns, f.baseline_kernel_cycles = _baseline(p, compiled.backend, compiled.graph, tuner)
            f.kernel_cycles = float(p.choice.report.kernel_cycles)
        out.append(f)
    return out


def attention_of(ops: list[OpFigures], context: int, tuning_s: float, verify_s: float,
                  plans) -> AttentionFigures:
    """The attention's figures: the fused block where the backend has one;
    else its ops one by one (score / context products on PIM, the softmax on
    the host: tuned = each op's faster of PIM and GPU, baseline = the
    baseline mapping where it runs on PIM); NaN where nothing runs on PIM."""
    att = [(o, p) for o, p in zip(ops, plans) if o.phase == "attention"]
    gpu = sum(o.gpu_ns for o, _ in att)
    nan = float("nan")
    blocks = [(o, p) for o, p in att if p.block and p.placement == "pim"]
    if blocks:
        o, p = blocks[0]
        return AttentionFigures(context, o.pim_ns, o.baseline_ns, o.gpu_ns, tuning_s, verify_s,
                                p.choice.space, p.choice.simulated, o.kernel_cycles, o.baseline_kernel_cycles)
    on_pim = [o for o, _ in att if np.isfinite(o.pim_ns)]
    if not on_pim:
        return AttentionFigures(context, nan, nan, gpu, tuning_s, verify_s)
    tuned = sum(min(o.pim_ns, o.gpu_ns) if np.isfinite(o.pim_ns) else o.gpu_ns for o, _ in att)
    base = sum(o.baseline_ns if np.isfinite(o.baseline_ns) else o.gpu_ns for o, _ in att)
    return AttentionFigures(context, tuned, base, gpu, tuning_s, verify_s,
                            kernel_cycles=sum(o.kernel_cycles for o in on_pim),
                            baseline_kernel_cycles=sum(o.baseline_kernel_cycles for o in on_pim))


def split_ns(t_gpu: float, t_pim: float, fraction) -> float:
    """ns of a GEMV split between GPU and PIM running at once (attacc-full; serving's steps too):
    "balanced" finishes both together, a float f puts f of the rows on PIM.  t_gpu / t_pim: ns of
    the whole GEMV on each; an infinite t_pim (no PIM mapping) leaves it on the GPU."""
    if not np.isfinite(t_pim):
        return t_gpu
    if fraction == "balanced":
        return t_gpu * t_pim / (t_gpu + t_pim)
    f = float(fraction)
    return max((1 - f) * t_gpu, f * t_pim)


def _system_times(ops: list[OpFigures], att: AttentionFigures, gpu_att: float, fraction) -> dict:
    """{system: {phase: ns}} of one layer at one context."""
    out = {s: dict.fromkeys(PHASES, 0.0) for s in SYSTEMS}
    for o in ops:
        if o.phase == "attention":
            continue                       # the block, below, at this context
        g, pim, base = o.gpu_ns, o.pim_ns, o.baseline_ns
        on_pim = np.isfinite(pim)
        best = min(g, pim) if on_pim else g
        out["gpu"][o.phase] += g
        out["attacc-base"][o.phase] += g
        ffn_gemv = o.phase == "ffn" and o.kind == "contraction" and on_pim
        out["attacc-full"][o.phase] += split_ns(g, base, fraction) if ffn_gemv else g
        dcc_pim = o.phase in ("qkv", "proj")
        out["base+dcc"][o.phase] += best if dcc_pim else g
        out["full+dcc"][o.phase] += best if dcc_pim else (split_ns(g, pim, fraction) if ffn_gemv else g)
        out["pimjax"][o.phase] += best
    # attention: the GPU reads exactly `context` rows; PIM runs the bucketed block
    pim_ok = np.isfinite(att.pim_ns)
    base = att.baseline_ns if np.isfinite(att.baseline_ns) else gpu_att
    tuned = min(att.pim_ns, gpu_att) if pim_ok else gpu_att
    for s in SYSTEMS:
        out[s]["attention"] = gpu_att if s == "gpu" else (base if s.startswith("attacc") else tuned)
    return out


def compile_recording(lowered, found: list):
    """`lowered.compile()`, its PrecisionWarnings (data converted to the units'
    type) appended to `found` instead of shown: a study records them in its
    result (`ServeResult.conversions`, `DecodeResult.conversions`); other warnings pass through."""
    import warnings

    from ..errors import PrecisionWarning
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = lowered.compile()
    for w in caught:
        if issubclass(w.category, PrecisionWarning):
            msg = str(w.message)
            if msg not in found:
                found.append(msg)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return out


def decode(cfg: ModelConfig, backend: str | Backend = "attacc", *, host: HostModel | None = None,
           batch: int = 1, prompt: int = 2048, tokens: int = 128, l_bucket: int = 16,
           ffn_pim_fraction="balanced", tuner: Tuner | None = None, cache: str | None = None,
           top_k: int = 8, precision: str = "convert", **backend_options) -> DecodeResult:
    """Time the decode of `tokens` output tokens after a `prompt`-token prompt
    (module docstring).

    cfg: the model (`configs.get_config`, or `cfg.tensor_parallel(tp)` for one
    GPU's share); backend: a preset name (with `backend_options`, e.g.
    stacks=5) or a Backend; host: the GPU model (a `HostModel`; default the
    backend's); batch: sequences decoded together (1-16); l_bucket: KV-cache
    block the PIM attention is compiled for (1: every context exactly);
    ffn_pim_fraction: attacc-full's FFN split ("balanced" or a float in
    [0, 1]); tuner / cache / top_k: the tuner (a shared `Tuner`, or one made
    with a TuneCache JSON path `cache` and `top_k` predicted drafts verified);
    precision: `pim_jit`'s ("convert": conversions recorded in
    `DecodeResult.conversions`, not warned; "strict": refused).
    """
    t_start = time.perf_counter()
    if not isinstance(backend, Backend):
        if host is not None:
            backend_options = dict(backend_options, host=host)
        backend = get_backend(backend, **backend_options)
    elif host is not None:
        backend = backend.replace(system=backend.system.replace(host=host, gpu=host))
    if tokens < 2:
        raise ValueError(f"decode: tokens must be >= 2 (the first comes from the prefill), got {tokens}")
    if not (isinstance(l_bucket, int) and l_bucket >= 1):
        raise ValueError(f"decode: l_bucket must be a positive int, got {l_bucket!r}")
    if ffn_pim_fraction != "balanced" and not 0.0 <= float(ffn_pim_fraction) <= 1.0:
        raise ValueError(f"decode: ffn_pim_fraction must be 'balanced' or in [0, 1], got {ffn_pim_fraction!r}")
    tuner = tuner if tuner is not None else Tuner(top_k=top_k, cache=cache)
    bucket = lambda L: int(math.ceil(L / l_bucket) * l_bucket)      # noqa: E731
    contexts = [prompt + s for s in range(1, tokens)]
    res = DecodeResult(cfg.name, backend.name, backend.system.baseline.name, batch, prompt, tokens, cfg.n_layers,
                       l_bucket, ffn_pim_fraction)

    # the layer, once: every op but the attention is the same at every context
    L0 = bucket(contexts[0])
    layer = make_layer(cfg, append=False)
    f = pim_jit(layer, backend=backend, resident=RESIDENT, tuner=tuner, placement="prefer_pim", precision=precision)
    args = layer_shapes(cfg, batch, L0)
    t0 = time.perf_counter()
    lowered = f.lower(*args)
    t1 = time.perf_counter()
    compiled = compile_recording(lowered, res.conversions)
    graph = compiled.graph
    blocks = {p.block[0]: p.block for p in compiled.plans if p.block}
    phases = op_phases(graph, input_phases(graph, args), blocks)
    res.layer_ops = op_figures(compiled, phases, tuner)      # with the baselines (simulated or cached)
    t2 = time.perf_counter()
    res.compile_s = t2 - t0
    res.attention[L0] = attention_of(res.layer_ops, L0, t1 - t0, t2 - t1, compiled.plans)
    gpu_attention = GpuAttention(cfg, batch, backend)

    attend = pim_jit(attention_fn(cfg.n_heads // cfg.n_kv_heads), backend=backend,
                     resident=("k_cache", "v_cache"), tuner=tuner, placement="prefer_pim", precision=precision)
    for L in contexts:
        Lb = bucket(L)
        if Lb not in res.attention:       # a new context length: drafts on the fly, then verified
            t0 = time.perf_counter()
            lowered = attend.lower(*attention_shapes(cfg, batch, Lb))
            t1 = time.perf_counter()
            c = compile_recording(lowered, res.conversions)
            t2 = time.perf_counter()
            ops = op_figures(c, ["attention"] * len(c.plans), tuner)
            res.attention[Lb] = attention_of(ops, Lb, t1 - t0, t2 - t1 + time.perf_counter() - t2, c.plans)
        times = _system_times(res.layer_ops, res.attention[Lb], gpu_attention(L), ffn_pim_fraction)
        res.steps.append((L, {s: {p: v * cfg.n_layers for p, v in d.items()} for s, d in times.items()}))
    res.prefill_ns = prefill_gpu_ns(cfg, batch, prompt, backend)
    res.tuning_s = sum(a.tuning_s for a in res.attention.values())
    res.verify_s = sum(a.verify_s for a in res.attention.values())
    res.wall_s = time.perf_counter() - t_start
    return res


# --------------------------------------------------------------------------
# AttAcc's system model, end to end (attacc.md: GPT-3 13B on 8 x A100a, TP 8)
# --------------------------------------------------------------------------
def attacc_end_to_end(lin: int, *, batch: int = 1, host: HostModel | None = None, tp: int = 8,
                      stacks: int = 5, model: str = "gpt3-13b", tuner: Tuner | None = None,
                      pipeline: bool = True) -> dict:
    """The parts of AttAcc's system model (`main.py --system dgx[-attacc]`) we
    model, for one generated token after `lin` prompt tokens (context lin + 1).

    One GPU's share of the layer under tensor parallelism `tp`
    (`ModelConfig.tensor_parallel`: GPT-3 13B / 8 = 5 heads, FFN 2560) on an
    AttAcc of `stacks` HBM3 stacks (5 per GPU in AttAcc's DGX; the baseline
    mapping puts each of the 5 x batch heads in its own channel), the GPU
    `host` (default AttAcc's own A100a model, `a100("hbm3", model="attacc")`).  Returns ns / ms:

      attention_pim_ns    one layer's attention on PIM, AttAcc's mapping, as the op
                          costs the layer (q written, context read back and merged by the host)
      attention_kernel_cycles  the same program's PIM-side cycles: what AttAcc's
                          Ramulator run times (its q / context transfers are its X2G
                          communication, not modelled here)
      attention_gpu_ns    one layer's attention on the GPU model
      fc_gpu_ms           QKV + projection + FFN per token, all layers, GPU only
      fc_attacc_ms        the same with AttAcc-Full's FFN split (`--ffopt`), less
                          the QKV / projection time hidden behind the attention
                          (`--pipeopt`, `pipeline=True`: `pipelined_fc_saving`)
      fc_hidden_ms        that hidden time
      gpu_ms, attacc_ms   attention + FC per token (all layers): the parts we model
      result              the `DecodeResult`

    Not modelled (so not in gpu_ms / attacc_ms): the all-reduces after the
    projection and the FFN, the activation and norm kernels' fixed costs
    (AttAcc's empirical 8.29 / 6.87 us per kernel), and `--pipeopt`'s overlap
    of the GPU-PIM transfers with the attention.
    """
    from ..hw.host import a100
    from ..models.configs import get_config
    cfg = get_config(model).tensor_parallel(tp)
    host = host if host is not None else a100("hbm3", model="attacc")      # the GPU model AttAcc's main.py uses
    res = decode(cfg, "attacc", host=host, stacks=stacks, batch=batch, prompt=lin, tokens=2, l_bucket=1,
                 tuner=tuner)
    (_, times), = res.steps
    n = cfg.n_layers
    fc = lambda s: sum(times[s][p] for p in ("qkv", "proj", "ffn")) / 1e6    # noqa: E731
    att = times["attacc-base"]["attention"]
    hidden = pipelined_fc_saving(times["attacc-full"]["qkv"], times["attacc-full"]["proj"], att,
                                 cfg.n_heads) if pipeline else 0.0
    return {"context": lin + 1,
            "attention_pim_ns": att / n,
            "attention_kernel_cycles": res.attention[lin + 1].baseline_kernel_cycles,
            "attention_gpu_ns": times["gpu"]["attention"] / n,
            "fc_gpu_ms": fc("gpu"), "fc_attacc_ms": fc("attacc-full") - hidden / 1e6,
            "fc_hidden_ms": hidden / 1e6,
            "gpu_ms": fc("gpu") + times["gpu"]["attention"] / 1e6,
            "attacc_ms": fc("attacc-full") - hidden / 1e6 + att / 1e6,
            "result": res}


def pipelined_fc_saving(qkv_ns: float, proj_ns: float, attention_ns: float, heads: int) -> float:
    """GPU time (ns) of the QKV and projection GEMMs hidden behind the PIM
    attention when the two are pipelined head by head, as AttAcc's system
    model does with `--pipeopt` (`src/system.py` `_pipeline`, level on): with
    `heads` heads per GPU the first head's share, 1 / heads, cannot overlap;
    if the attention is longer than the FC GEMMs they shrink to that share,
    otherwise the attention's overlappable part (1 - 1 / heads) of it is taken
    off them.  (AttAcc also overlaps its GPU-PIM transfers, which our
    attention's host read-back stands for; that part is not modelled.)"""
    if heads < 1:
        raise ValueError(f"pipelined_fc_saving: heads must be >= 1, got {heads}")
    first = 1.0 / heads
    fc_ns = qkv_ns + proj_ns
    if attention_ns > fc_ns:
        return fc_ns * (1.0 - first)
    return attention_ns * (1.0 - first)
