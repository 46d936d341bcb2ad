"""Step times of a serving step from compiled kernels, and where the KV caches fit.

A serving step processes T tokens: one per decoding request (at its own
context) plus the prompt chunks being prefilled.  Per decoder layer (all
layers are identical, so a step is `n_layers` times one layer, as in
`pimjax.studies.decode`), on one tensor-parallel shard (`ModelConfig.tensor_parallel`):

* **dense**: every op that does not read the KV cache (QKV / projection / FFN
  GEMMs, norms, activations, residuals, RoPE) for T tokens.  On the GPU (the
  backend's `System.baseline` host model, `pimjax.hw.gpu`):
  - `gpu_kernels="traced"` (default): the ops of the traced decode layer
    (`layers.make_layer`, what `decode` and `pim_jit` time), each op a kernel;
    an op's bytes, FLOPs and GEMM shape are affine in T, so two traces (T = 1,
    2) give every T exactly (`TracedDense`; tests check T = 5 against a trace).
  - `gpu_kernels="fused"`: the kernels a PyTorch GPU runs, AttAcc's layer list
    (`src/model.py`): one QKV GEMM, the projection, the FFN GEMMs, one NORM
    kernel per norm and one ACT kernel per activation (`kernel_table`); what
    AttAcc's measured ACT / NORM fits describe.
  On PIM (systems that place GEMVs there): the layer compiled with
  `pim_jit(placement="prefer_pim")` at T = 1, 2, 4, ... (`ladder`), tuned and
  baseline-mapping times per op (`inference.op_figures`), linear in T between
  the compiled points and beyond the last.
* **decode attention**: on PIM, each request's attention at its own context,
  compiled per context bucket (`l_bucket`) through the tuner cache on the
  request's *bank partition* (`KVLayout`): a partition holds its requests'
  KV caches and runs their attention one after another; partitions run in
  parallel (AttAcc's mapping: heads and batch entries round-robin over the
  channels).  On the GPU: one batched kernel over every request's cache
  (`inference.GpuAttention` at batch 1 scaled by the requests' contexts; on
  the kernel models `HostModel.attention_ns` at the mean context).
* **prefill attention**: on the GPU, a chunk of c queries over p + c keys
  (the full c x (p + c) score rectangle; a causal mask does not skip work in
  this model): score GEMM, softmax, context GEMM.
* **all-reduce**: tensor parallelism over `tp` GPUs costs two all-reduces of
  T x d_model elements per layer (Megatron: after the projection and the FFN),
  `hw.gpu.allreduce_ns` on a link of `link_GBps`.

Systems (`SYSTEMS`, as `decode`): which op runs where is `decode`'s rule per
system (`dense_system_ns`), at T tokens.  Overlap of GPU and PIM work in one
step (`overlap`): "serial" (one after the other), "pipeline" (AttAcc's
`--pipeopt` rule, `inference.pipelined_fc_saving`: the QKV / projection
GEMMs hidden behind the PIM attention but for one head's share; prefill
attention beside the decode attention) or "subbatch" (NeuPIMs: the batch in
two sub-batches, one's GEMMs on the GPU while the other's attention runs on
PIM, layer after layer).

Units: ns per layer unless said otherwise; bytes; tokens.
"""
from __future__ import annotations

import functools
import json
import time
from dataclasses import dataclass

import numpy as np

from ...hw.core import Backend, HostModel
from ..inference import compile_recording, split_ns

SYSTEMS = ("gpu", "attacc-base", "attacc-full", "base+dcc", "full+dcc", "pimjax")
PIM_ATTENTION = {"attacc-base": "baseline", "attacc-full": "baseline", "base+dcc": "tuned", "full+dcc": "tuned",
                 "pimjax": "tuned"}
LADDER_SYSTEMS = ("attacc-full", "base+dcc", "full+dcc", "pimjax")   # place dense GEMVs on PIM
SPLIT_SYSTEMS = ("attacc-full", "full+dcc")                          # split the FFN between GPU and PIM
OVERLAPS = ("serial", "pipeline", "subbatch")
GPU_KERNELS = ("traced", "fused")
LADDER_MAX = 64          # the largest T the dense layer is compiled at on PIM (beyond: linear in T)
PROBE = 64               # context of the traced layer when only its dense ops matter
DENSE_PHASES = ("qkv", "proj", "ffn", "other")


# --------------------------------------------------------------------------
# where the KV caches fit
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class KVLayout:
    """The KV cache of one tensor-parallel shard, in blocks, in the PIM memory.

    channels: PIM groups (channels) of the shard's backend; channel_bytes: the
    bytes PIM commands can use in one (`Group.banks` x `Core.pim_bank_bytes`);
    weight_bytes: the shard's resident weights, spread evenly over the
    channels; partition_channels / partitions: each request's KV and its
    attention live in one partition of that many channels (`partitions` of
    them; leftover channels hold weights only); kv_token_bytes: one token's K
    and V over all layers on this shard; block_size (tokens) / block_bytes:
    one paged-KV block; blocks_per_partition: blocks that fit beside the
    weights in one partition.
    """
    channels: int
    channel_bytes: int
    weight_bytes: float
    partition_channels: int
    partitions: int
    kv_token_bytes: int
    block_size: int
    block_bytes: int
    blocks_per_partition: int

    @property
    def total_blocks(self) -> int:
        return self.partitions * self.blocks_per_partition

    @property
    def kv_bytes(self) -> int:
        """Bytes the blocks of every partition hold."""
        return self.total_blocks * self.block_bytes

    def blocks(self, tokens: int) -> int:
        """Blocks `tokens` tokens of one request occupy."""
        return -(-int(tokens) // self.block_size)


def weight_bytes(cfg, tp: int, elem_bytes: int = 2) -> float:
    """Bytes of one shard's weights: its decoder layers (`tensor_parallel(tp)`:
    norms replicated) plus 1 / tp of the embeddings, LM head and final norm
    (vocabulary-parallel)."""
    shard = cfg.tensor_parallel(tp) if tp > 1 else cfg
    rest = cfg.n_params - cfg.n_layers * cfg.layer_params()
    return float(elem_bytes * (cfg.n_layers * shard.layer_params() + rest / tp))


def kv_layout(cfg, backend: Backend, *, tp: int = 1, block_size: int = 16, max_batch: int = 1,
              partition: int | None = None, stored_heads: int | None = None, shared: bool = False) -> KVLayout:
    """The `KVLayout` of `cfg` on `backend` (one shard of `tp`).

    Capacity per preset comes from its geometry: `Backend.n_groups` channels
    of `Group.banks` banks of `Core.pim_bank_bytes` (attacc: 16 channels x 64
    banks x 16384 rows x 1 KB = 16 GiB per HBM3 stack, attacc.md; hbm-pim:
    the PIM-usable rows only; newton / upmem likewise from their presets).
    Weights are resident (`resident="params"`, as `decode`) and spread over
    every channel; the rest of each channel holds KV blocks.

    partition: channels per partition; default: the channels divided among
    min(max_batch, channels // heads) requests (AttAcc's mapping gives each
    KV head of a batch entry its own channel while they last), so
    max_batch = 1 gives the whole memory to one request (`decode`'s layout).
    shared: one partition of every channel (the GPU reads any channel).
    stored_heads: KV heads stored per token (default the shard's KV heads).
    ValueError when the weights leave no room or a field is invalid.
    """
    if not (isinstance(block_size, int) and block_size >= 1):
        raise ValueError(f"serve: block_size must be a positive int (tokens), got {block_size!r}")
    shard = cfg.tensor_parallel(tp) if tp > 1 else cfg
    C = backend.n_groups
    channel_bytes = int(backend.group.banks * backend.core.pim_bank_bytes)
    eb = backend.core.elem_bytes
    w = weight_bytes(cfg, tp, eb)
    free = channel_bytes - w / C
    if free <= 0:
        raise ValueError(f"serve: the weights of one shard ({w / 2**30:.1f} GiB of {cfg.name} at tp={tp}) do not fit "
                         f"the PIM memory of {backend!r} ({C * channel_bytes / 2**30:.1f} GiB); add stacks / "
                         f"channels or raise tp")
    heads = stored_heads if stored_heads is not None else shard.n_kv_heads
    if partition is None:
        slots = 1 if shared else min(max_batch, max(1, C // heads))
        p = C // slots
    else:
        if not (isinstance(partition, int) and 1 <= partition <= C):
            raise ValueError(f"serve: partition must be an int in [1, {C}] (channels per request partition), "
                             f"got {partition!r}")
        p = partition
    token = 2 * shard.n_layers * heads * shard.head_dim * eb
    block = block_size * token
    per = int(p * free // block)
    return KVLayout(C, channel_bytes, w, p, C // p, token, block_size, block, per)


def partition_backend(backend: Backend, channels: int) -> Backend:
    """`backend` cut to `channels` groups (one request partition): the same
    device geometry and timing, fewer channels.  The backend itself when it
    has that many."""
    if channels == backend.n_groups:
        return backend
    gpd = backend.system.groups_per_device
    nd, g = (channels // gpd, gpd) if channels % gpd == 0 else (1, channels)
    return backend.replace(system=backend.system.replace(n_devices=nd, groups_per_device=g))


# --------------------------------------------------------------------------
# GPU figures of the dense ops
# --------------------------------------------------------------------------
class TracedDense:
    """GPU ns of each non-attention op of the traced decode layer at T tokens.

    The layer (`make_layer(cfg, append=False)`) is traced at batch 1 (T = 1
    exactly: a one-row batch can trace to fewer ops, e.g. a reshape of a
    single KV head folds away) and at batch 2 and 3: from there on every op's
    bytes, FLOPs, output elements and GEMM dimensions are affine in the batch,
    so `ns(T)` equals `host_time` of the layer traced at batch T (tests), on
    every host model.  `phases(T)` / `kinds(T)`: the ops' phases and kinds
    (their order is the traced graph's, attention ops left out).
    """

    def __init__(self, shard, backend: Backend, host: HostModel):
        from ...models.layers import make_layer
        self.host = host
        layer = make_layer(shard, append=False)
        one = self._trace(layer, shard, backend, 1)
        two, three = self._trace(layer, shard, backend, 2), self._trace(layer, shard, backend, 3)
        if len(two[2]) != len(three[2]) or two[0] != three[0]:
            raise AssertionError("the layer traced to different graphs at batch 2 and 3")
        self._one = one
        ops = []
        for i, (d2, d3) in enumerate(zip(two[2], three[2])):
            if d2[0] == "gemm":
                ops.append(("gemm", [(a, b - a) for a, b in zip(d2[1:5], d3[1:5])], d2[5],
                            (d2[6], d3[6] - d2[6]), (d2[7], d3[7] - d2[7])))
            else:
                if d2[2] != d3[2]:
                    raise AssertionError(f"op {i}: reduction length changed with the batch")
                ops.append(("elem", (d2[1], d3[1] - d2[1]), d2[2], d2[3], (d2[6], d3[6] - d2[6]),
                            (d2[7], d3[7] - d2[7])))
        self._many = (two[0], two[1], ops)
        self._cache: dict = {}

    @staticmethod
    def _trace(layer, shard, backend, B: int):
        """(phases, kinds, descriptors) of the non-attention ops traced at batch B."""
        from ...models.layers import layer_shapes
        from ...plan.plans import host_bytes
        from ...sim.host import op_bytes, op_flops, op_gemm_shape
        from ...trace.frontend import make_graph
        from ..inference import input_phases, op_phases
        args = layer_shapes(shard, B, PROBE)
        graph = make_graph(layer, *args)
        shapes = {i: v.shape for i, v in enumerate(graph.values)}
        eb = host_bytes(graph, backend)
        phases, kinds, rows = [], [], []
        for op, ph in zip(graph.ops, op_phases(graph, input_phases(graph, args))):
            if ph == "attention":
                continue                            # timed per context (decode attention)
            phases.append(ph)
            kinds.append(op.kind)
            nbytes, flops = float(op_bytes(op, shapes, eb)), float(op_flops(op))
            gemm = op_gemm_shape(op)
            if gemm is not None:
                first = op.operands[op.body_operands[0]].value if op.body is not None else op.operands[0].value
                rows.append(("gemm", gemm["m"], gemm["n"], gemm["k"], gemm["batch"], eb.get(first, 4), nbytes, flops))
                continue
            ext = op.extents
            if op.loop_vars:
                outputs = int(np.prod([ext[v] for v in op.output_vars], dtype=np.int64)) if op.output_vars else 1
                red = int(np.prod([ext[v] for v in op.reduction_vars], dtype=np.int64)) if op.reduction_vars else 1
            else:
                outputs = sum(int(np.prod(shapes[r.value], dtype=np.int64)) for r in op.results)
                red = 1
            kind = "copy" if op.kind in ("host", "layout") else ("reduce" if red > 1 else "act")
            rows.append(("elem", outputs, red, kind, 0, 0, nbytes, flops))
        return tuple(phases), tuple(kinds), rows

    def phases(self, T: int) -> tuple:
        """The phase of each op `ns(T)` times (T = 1 has its own op list)."""
        return self._one[0] if T == 1 else self._many[0]

    def kinds(self, T: int) -> tuple:
        """The kind (contraction, reduction, ...) of each op `ns(T)` times."""
        return self._one[1] if T == 1 else self._many[1]

    def ns(self, T: int) -> np.ndarray:
        """float64 [ops]: each non-attention op's GPU ns at T tokens (one layer)."""
        T = int(T)
        hit = self._cache.get(T)
        if hit is not None:
            return hit
        h = self.host
        if T == 1:
            ops = [(d[0], [(v, 0) for v in d[1:5]], d[5], (d[6], 0), (d[7], 0)) if d[0] == "gemm"
                   else (d[0], (d[1], 0), d[2], d[3], (d[6], 0), (d[7], 0)) for d in self._one[2]]
            x = 0
        else:
            ops, x = self._many[2], T - 2
        out = np.empty(len(ops))
        for j, d in enumerate(ops):
            (b0, db), (f0, df) = d[-2], d[-1]
            nbytes, flops = b0 + db * x, f0 + df * x
            if h.model in ("roofline", "dcc"):
                out[j] = float(np.asarray(h.time_ns(nbytes, flops)))
            elif d[0] == "gemm":
                m, n, k, batch = (int(round(a + b * x)) for a, b in d[1])
                m, n = min(m, n), max(m, n)
                out[j] = h.gemm_ns(m, n, k, batch, d[2], nbytes if h.model == "pimflow" else None)
            else:
                o0, do = d[1]
                out[j] = h.elementwise_ns(nbytes, flops, outputs=int(round(o0 + do * x)), reduction=d[2], kind=d[3])
        out.setflags(write=False)
        self._cache[T] = out
        return out


def kernel_table(shard, T: int, elem_bytes: int = 2) -> list[tuple]:
    """AttAcc's layer list (`src/model.py` `Transformer.build`, generation
    stage) for T tokens on one shard, without the attention and the
    all-reduces: [(name, phase, kind, shape)] with kind "gemm" (shape m, n, k)
    or "elementwise" (shape bytes, flops, outputs, reduction, op).  NORM:
    input, scale and output (3 T d elements), 5 FLOP each; ACT: input and
    output (a GLU: two inputs), 8 FLOP per element (GELU; SwiGLU 9)."""
    d, f, eb = shard.d_model, shard.d_ff, elem_bytes
    qkv = shard.q_dim + 2 * shard.kv_dim
    norm = ("elementwise", (3 * T * d * eb, 5.0 * T * d, T, d, "norm"))
    rows = [("norm1", "other", *norm), ("qkv", "qkv", "gemm", (T, qkv, d)),
            ("proj", "proj", "gemm", (T, d, shard.q_dim)), ("norm2", "other", *norm)]
    if shard.ffn == "swiglu":
        rows += [("ff_gate", "ffn", "gemm", (T, f, d)), ("ff_up", "ffn", "gemm", (T, f, d)),
                 ("glu", "ffn", "elementwise", (3 * T * f * eb, 9.0 * T * f, T * f, 1, "act")),
                 ("ff_down", "ffn", "gemm", (T, d, f))]
    else:
        rows += [("ff_up", "ffn", "gemm", (T, f, d)),
                 ("gelu", "ffn", "elementwise", (2 * T * f * eb, 8.0 * T * f, T * f, 1, "act")),
                 ("ff_down", "ffn", "gemm", (T, d, f))]
    return rows


def kernel_ns(host: HostModel, row: tuple, elem_bytes: int = 2) -> float:
    """ns of one `kernel_table` row on `host`'s model."""
    _, _, kind, shape = row
    if kind == "gemm":
        m, n, k = shape
        return float(host.gemm_ns(min(m, n), max(m, n), k, 1, elem_bytes))
    nbytes, flops, outputs, red, op = shape
    return float(host.elementwise_ns(nbytes, flops, outputs=outputs, reduction=red, kind=op))


# --------------------------------------------------------------------------
# the dense part of a layer, per system
# --------------------------------------------------------------------------
def dense_system_ns(system: str, phases, kinds, gpu, pim, base, fraction="balanced") -> dict:
    """{phase: ns} of the dense ops of one layer on `system`, op by op, by
    `decode`'s rules (`inference._system_times`): gpu / pim / base the ops' GPU,
    tuned-PIM and baseline-PIM ns (NaN: not on PIM)."""
    out = dict.fromkeys(DENSE_PHASES, 0.0)
    for ph, kind, g, p, b in zip(phases, kinds, gpu, pim, base):
        on_pim = np.isfinite(p)
        best = min(g, p) if on_pim else g
        ffn_gemv = ph == "ffn" and kind == "contraction" and on_pim
        if system in ("gpu", "attacc-base"):
            t = g
        elif system == "attacc-full":
            t = split_ns(g, b, fraction) if ffn_gemv else g
        elif system == "base+dcc":
            t = best if ph in ("qkv", "proj") else g
        elif system == "full+dcc":
            t = best if ph in ("qkv", "proj") else (split_ns(g, p, fraction) if ffn_gemv else g)
        else:
            t = best
        out[ph] += float(t)
    return out


# --------------------------------------------------------------------------
# the cost model
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class StepTime:
    """One step: ns (all layers) end to end, and the GPU / PIM busy ns in it."""
    ns: float
    gpu_ns: float
    pim_ns: float


class StepCosts:
    """Every figure a serving step needs, compiled once, then looked up.

    Built by `build_costs`; `step(ctx, part, chunks)` gives a step's time.
    att_tuned / att_base: float64 [buckets] one request's PIM attention (ns,
    one layer, on its partition) at bucket index b (context (b + 1) * l_bucket
    rounded up); NaN where not compiled or not on PIM.
    """

    def __init__(self, *, cfg, shard, backend, part_backend, host, system, tp, link_GBps, l_bucket, overlap,
                 gpu_kernels, ffn_pim_fraction, layout, dense_gpu, ladder, att_tuned, att_base, gpu_attention,
                 compile_s, compiled_buckets, conversions=()):
        self.conversions = tuple(conversions)      # the precision conversions of the compiled kernels
        self.cfg, self.shard, self.backend, self.part_backend = cfg, shard, backend, part_backend
        self.host, self.system, self.tp, self.link_GBps = host, system, tp, link_GBps
        self.l_bucket, self.overlap, self.gpu_kernels = l_bucket, overlap, gpu_kernels
        self.ffn_pim_fraction = ffn_pim_fraction
        self.layout, self.dense_gpu, self.ladder = layout, dense_gpu, ladder
        self.att_tuned, self.att_base, self.gpu_attention = att_tuned, att_base, gpu_attention
        self.compile_s, self.compiled_buckets = compile_s, compiled_buckets
        self.n_layers = shard.n_layers
        self.eb = backend.core.elem_bytes
        self.heads = shard.n_heads
        att = att_base if PIM_ATTENTION.get(system) == "baseline" else att_tuned
        self.att = att if system != "gpu" else None
        self.tuned_choice = PIM_ATTENTION.get(system) == "tuned"
        self._dense: dict = {}
        self._pre: dict = {}
        self._ar: dict = {}
        self._gatt: dict = {}

    # -- per-layer pieces ---------------------------------------------------
    def dense(self, T: int) -> tuple:
        """(total, qkv, proj) ns of the dense ops of one layer at T tokens (0 for T = 0)."""
        if T <= 0:
            return (0.0, 0.0, 0.0)
        hit = self._dense.get(T)
        if hit is None:
            hit = self._dense_at(T)
            self._dense[T] = hit
        return hit

    def _dense_at(self, T: int) -> tuple:
        sysname = self.system
        if self.gpu_kernels == "traced":
            g = self.dense_gpu.ns(T)
            pim, base = self._ladder_at(T, len(g))
            d = dense_system_ns(sysname, self.dense_gpu.phases(T), self.dense_gpu.kinds(T), g, pim, base,
                                self.ffn_pim_fraction)
        else:
            rows = kernel_table(self.shard, T, self.eb)
            gph = dict.fromkeys(DENSE_PHASES, 0.0)
            gemm = dict.fromkeys(DENSE_PHASES, 0.0)
            for r in rows:
                t = kernel_ns(self.host, r, self.eb)
                gph[r[1]] += t
                if r[2] == "gemm":
                    gemm[r[1]] += t
            d = dict(gph)
            if self.ladder is not None and sysname in LADDER_SYSTEMS:
                phases, kinds = self.ladder["phases"][T == 1], self.ladder["kinds"][T == 1]
                pim, base = self._ladder_at(T, len(phases))

                def total(vals, phase):
                    xs = [v for v, ph, k in zip(vals, phases, kinds) if ph == phase and k == "contraction"]
                    return float(np.sum(xs)) if xs and np.all(np.isfinite(xs)) else float("nan")
                for ph in ("qkv", "proj", "ffn"):
                    p_t, p_b = total(pim, ph), total(base, ph)
                    g = gemm[ph]
                    if sysname == "attacc-full" and ph == "ffn":
                        d[ph] = gph[ph] - g + split_ns(g, p_b, self.ffn_pim_fraction)
                    elif sysname == "full+dcc" and ph == "ffn":
                        d[ph] = gph[ph] - g + split_ns(g, p_t, self.ffn_pim_fraction)
                    elif (sysname in ("base+dcc", "full+dcc") and ph in ("qkv", "proj")) or sysname == "pimjax":
                        d[ph] = gph[ph] - g + (min(g, p_t) if np.isfinite(p_t) else g)
        return (float(sum(d.values())), float(d["qkv"]), float(d["proj"]))

    def _ladder_at(self, T: int, n: int) -> tuple:
        """(tuned, baseline) PIM ns per dense op at T tokens: the compiled
        ladder, exact at T = 1 (its own op list), for T >= 2 linear between
        the compiled points >= 2 (extrapolated from the last two; one point:
        proportional to T); NaN where the op is not on PIM, inf past the T
        where PIM lost everywhere (`ladder["stop"]`)."""
        nan = np.full(n, np.nan)
        lad = self.ladder
        if lad is None or self.system not in LADDER_SYSTEMS:
            return nan, nan
        if T == 1 and 1 in lad["points"]:
            p, b = lad["points"][1]
            return p, b
        if lad["stop"] is not None and T > lad["stop"]:
            return np.full(n, np.inf), np.full(n, np.inf)
        Ts = [t for t in sorted(lad["points"]) if t >= 2]
        if not Ts:                                    # only T = 1 compiled: its ops scaled (same op list?)
            p, b = lad["points"][1]
            if len(p) != n:
                return np.full(n, np.inf), np.full(n, np.inf)
            return p * T, b * T
        out = []
        for k in (0, 1):
            if len(Ts) == 1:
                out.append(lad["points"][Ts[0]][k] * T / Ts[0])
                continue
            j = min(max(int(np.searchsorted(Ts, T)), 1), len(Ts) - 1)
            t0, t1 = Ts[j - 1], Ts[j]
            v0, v1 = lad["points"][t0][k], lad["points"][t1][k]
            out.append(v0 + (T - t0) / (t1 - t0) * (v1 - v0))
        return out[0], out[1]

    def allreduce(self, T: int) -> float:
        """ns of one layer's two tensor-parallel all-reduces of T tokens (0 at tp = 1)."""
        if self.tp <= 1 or T <= 0:
            return 0.0
        hit = self._ar.get(T)
        if hit is None:
            from ...hw.gpu import allreduce_ns
            hit = 2.0 * allreduce_ns(self.host, T * self.shard.d_model * self.eb, self.tp, self.link_GBps)
            self._ar[T] = hit
        return hit

    def prefill_attention(self, c: int, p: int) -> float:
        """GPU ns of one layer's attention for a prompt chunk of c tokens after p cached ones."""
        key = (c, p)
        hit = self._pre.get(key)
        if hit is None:
            hit = prefill_attention_ns(self.host, self.shard, c, p, self.eb)
            self._pre[key] = hit
        return hit

    def gpu_decode_attention(self, B: int, ctx_sum: int) -> float:
        """GPU ns of one layer's decode attention for B requests whose contexts sum to ctx_sum."""
        key = (B, ctx_sum)
        hit = self._gatt.get(key)
        if hit is None:
            hit = self.gpu_attention(B, ctx_sum)
            self._gatt[key] = hit
        return hit

    def pim_times(self, ctx: np.ndarray) -> np.ndarray:
        """float64 [n]: each request's PIM attention ns (one layer) at its context."""
        b = (ctx + (self.l_bucket - 1)) // self.l_bucket - 1
        return self.att[b]

    # -- a step -------------------------------------------------------------
    def step(self, ctx: np.ndarray, part: np.ndarray, chunks: list) -> StepTime:
        """The time of one step (all layers): decoding requests at contexts
        `ctx` (int64 [n], this token's KV included) in partitions `part` (int64
        [n]), prompt chunks `chunks` [(tokens, cached tokens before them)]."""
        n = int(ctx.size)
        T = n + sum(c for c, _ in chunks)
        pre = sum(self.prefill_attention(c, p) for c, p in chunks)
        L = self.n_layers
        if n == 0:
            dense, _, _ = self.dense(T)
            g = dense + self.allreduce(T) + pre
            return StepTime(L * g, L * g, 0.0)
        if self.att is None:                                   # GPU only
            dense, _, _ = self.dense(T)
            g = dense + self.allreduce(T) + pre + self.gpu_decode_attention(n, int(ctx.sum()))
            return StepTime(L * g, L * g, 0.0)
        t = self.pim_times(ctx)
        on_pim = np.isfinite(t).all()
        pim = float(np.bincount(part, weights=t).max()) if on_pim else float("inf")
        if self.tuned_choice or not on_pim:
            gatt = self.gpu_decode_attention(n, int(ctx.sum()))
            if gatt <= pim:                                   # the GPU reads the caches faster this step
                dense, _, _ = self.dense(T)
                g = dense + self.allreduce(T) + pre + gatt
                return StepTime(L * g, L * g, 0.0)
        if self.overlap == "subbatch" and n > 1:
            return self._subbatch(ctx, part, t, chunks)
        dense, qkv, proj = self.dense(T)
        ar = self.allreduce(T)
        if self.overlap == "serial":
            layer = dense + ar + pre + pim
        else:                                                  # AttAcc's --pipeopt
            from ..inference import pipelined_fc_saving
            hidden = pipelined_fc_saving(qkv, proj, pim, self.heads)
            layer = dense - hidden + ar + max(pre, pim)
        return StepTime(L * layer, L * (dense + ar + pre), L * pim)

    def _subbatch(self, ctx, part, t, chunks) -> StepTime:
        """NeuPIMs' sub-batch interleaving: the decoding requests, ordered by
        partition and PIM time, dealt alternately into sub-batches A and B
        (each partition's load halved, or the partitions split in two when
        each holds one request); prompt chunks go to the side with fewer GPU
        tokens.  Per layer the GPU runs A's then B's dense work (GEMMs,
        all-reduces, prefill attention) while PIM runs A's then B's decode
        attention -- one PIM resource when A and B share a partition, two when
        their partitions are disjoint; each sub-batch's attention waits for
        its own GEMMs and its next GEMMs for its attention.  Per-layer phases:
        the first layer's QKV and the last layer's FFN are taken as whole
        dense phases."""
        order = np.lexsort((-t, part))
        sub = np.empty(order.size, np.int64)
        sub[order] = np.arange(order.size) % 2
        A, B = sub == 0, sub == 1
        pA = float(np.bincount(part[A], weights=t[A]).max())
        pB = float(np.bincount(part[B], weights=t[B]).max()) if B.any() else 0.0
        shared = bool(np.intersect1d(part[A], part[B]).size)
        nA, nB = int(A.sum()), int(B.sum())
        cA = cB = 0
        preA = preB = 0.0
        for c, p in chunks:
            if nA + cA <= nB + cB:
                cA, preA = cA + c, preA + self.prefill_attention(c, p)
            else:
                cB, preB = cB + c, preB + self.prefill_attention(c, p)
        gA = self.dense(nA + cA)[0] + self.allreduce(nA + cA) + preA
        gB = self.dense(nB + cB)[0] + self.allreduce(nB + cB) + preB
        gpu = ra = rb = 0.0
        pim_a = pim_b = 0.0
        for _ in range(self.n_layers):
            eA = max(gpu, ra) + gA
            ra = max(pim_a, eA) + pA
            pim_a = ra
            if shared:
                pim_b = pim_a
            gpu = max(eA, rb) + gB
            rb = max(pim_b, gpu) + pB
            pim_b = rb
            if shared:
                pim_a = pim_b
        return StepTime(max(ra, rb, gpu), self.n_layers * (gA + gB), self.n_layers * (pA + pB))


def prefill_attention_ns(host: HostModel, shard, c: int, p: int, eb: int = 2) -> float:
    """GPU ns of one layer's attention over a prompt chunk: c queries (H heads
    of d) against K = p + c keys of the shard's KV heads: score GEMM, a softmax
    over each of the H c rows (5 FLOP per element, AttAcc's count) and the
    context GEMM, the whole c x K rectangle (no causal skipping)."""
    H, Hkv, d = shard.n_heads, shard.n_kv_heads, shard.head_dim
    K = c + p
    if host.model in ("roofline", "dcc"):
        s_bytes = (c * H * d + K * Hkv * d + H * c * K) * eb
        x_bytes = 2 * H * c * K * eb
        o_bytes = (H * c * K + K * Hkv * d + c * H * d) * eb
        f = 2.0 * H * c * K * d
        return float(np.asarray(host.time_ns(s_bytes, f)) + np.asarray(host.time_ns(x_bytes, 5.0 * H * c * K))
                     + np.asarray(host.time_ns(o_bytes, f)))
    m, n = min(c, K), max(c, K)
    t = host.gemm_ns(m, n, d, H, eb) + host.gemm_ns(min(c, d), max(c, d), K, H, eb)
    t += host.elementwise_ns(2 * H * c * K * eb, 5.0 * H * c * K, outputs=H * c, reduction=K, kind="softmax")
    return float(t)


def make_gpu_attention(shard, backend: Backend, l_bucket: int):
    """f(B, ctx_sum) -> GPU ns of one layer's decode attention for B requests.

    Roofline models: `inference.GpuAttention`'s per-op affine terms at batch
    1, summed over the requests (each op's bytes and FLOPs are a request's
    own, affine in its context), one launch per op -- exact for any mix of
    contexts.  Kernel models: `HostModel.attention_ns` (score, fused softmax,
    context) for B requests at the mean context (exact at B = 1; for B > 1
    linear between multiples of `l_bucket`, each cached)."""
    from ..inference import GpuAttention
    ga = GpuAttention(shard, 1, backend)
    host = backend.system.baseline
    if host.model in ("roofline", "dcc"):
        terms = ga.terms
        probe = ga.probe

        def f(B: int, ctx_sum: int) -> float:
            dl = ctx_sum - B * probe
            return float(sum(np.asarray(host.time_ns(B * b0 + db * dl, B * f0 + df * dl))
                             for b0, db, f0, df in terms))
        return f

    @functools.lru_cache(maxsize=None)
    def at(B: int, L: int) -> float:
        return float(host.attention_ns(shard.n_heads, shard.head_dim, max(L, 2), B, kv_heads=shard.n_kv_heads))

    def f(B: int, ctx_sum: int) -> float:
        if B == 1:
            return at(1, ctx_sum)
        Lm = ctx_sum / B
        g = l_bucket
        lo = int(Lm // g) * g
        if lo == Lm:
            return at(B, lo)
        w = (Lm - lo) / g
        return (1 - w) * at(B, max(lo, g)) + w * at(B, lo + g)
    return f


# --------------------------------------------------------------------------
# compiling: the attention per bucket, the dense ladder
# --------------------------------------------------------------------------
def _progress(items, total: int, description: str, on: bool):
    from ..progress import track  # rich on a terminal, plain lines otherwise
    return track(items, total, f"serve: {description}", on) if on else items


def _table_key(**parts) -> str:
    import hashlib

    from ...search.cache import backend_fingerprint
    canon = {k: (backend_fingerprint(v) if isinstance(v, Backend) else repr(v)) for k, v in sorted(parts.items())}
    return hashlib.sha1(json.dumps(canon, sort_keys=True).encode()).hexdigest()


class TableCache:
    """Compiled serving figures (attention per bucket, the dense ladder) by key:
    in memory for the process (at most `MAX_ENTRIES`, the oldest evicted), and
    in a JSON file when `path` is given (`pimjax.durable`: written atomically,
    merged under a lock with what other processes saved; an unreadable file
    warns with a `CorruptStateWarning` and is recompiled)."""
    _memory: dict = {}
    MAX_ENTRIES = 1024

    def __init__(self, path: str | None = None):
        from ...durable import read_json
        self.path = path
        self.entries = TableCache._memory
        if path:
            data = read_json(path, "serving table cache")
            if isinstance(data, dict):
                self.entries.update(data)
                self._bound()

    def _bound(self) -> None:
        for k in list(self.entries)[:max(0, len(self.entries) - self.MAX_ENTRIES)]:
            del self.entries[k]

    def get(self, key: str):
        """The figures stored under `key` (a `_table_key` digest), or None."""
        return self.entries.get(key)

    def put(self, key: str, value) -> None:
        """Store JSON-able figures under `key` (in memory; `save` writes the file)."""
        self.entries.pop(key, None)
        self.entries[key] = value
        self._bound()

    def save(self) -> None:
        """Write every entry to `path`, merged with the entries other processes saved there
        (under `durable.locked`, replaced atomically); no-op without a path."""
        if not self.path:
            return
        import warnings

        from ...durable import atomic_write, locked, read_json, sweep_temporaries
        with locked(self.path):
            sweep_temporaries(self.path)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                disk = read_json(self.path, "serving table cache")
            merged = {**(disk if isinstance(disk, dict) else {}), **self.entries}
            merged = dict(list(merged.items())[-self.MAX_ENTRIES:])
            atomic_write(self.path, json.dumps(merged))


def _precision_key(precision: str) -> dict:
    # "convert" keeps the keys of the tables cached before `precision` existed
    return {} if precision == "convert" else {"precision": precision}


def attention_figures(shard, part_backend: Backend, buckets: list[int], tuner, *, mha: bool = False,
                      cache: TableCache | None = None, progress: bool = True, precision: str = "convert",
                      conversions: list | None = None) -> dict:
    """{bucketed context: (tuned ns, baseline ns)} of one request's attention
    (batch 1, the shard's heads) compiled on `part_backend` for each context
    in `buckets` -- DCC's dynamic re-tuning per new context (`decode`'s
    attention compile: drafts predicted for the new shape, the top-k and the
    baseline simulated; the tuner cache answers repeats).  mha: every query
    head with its own K / V (AttAcc's simulator has no grouped-query
    attention: its mapping of a GQA model)."""
    from ...api import pim_jit
    from ..inference import attention_fn, attention_of, attention_shapes, op_figures
    cfg = shard.scaled(n_kv_heads=shard.n_heads) if mha else shard
    key = _table_key(kind="attention", cfg=cfg, backend=part_backend, tuner=(tuner.mode, tuner.top_k),
                     **_precision_key(precision))
    have = (cache.get(key) if cache is not None else None) or {}
    todo = [L for L in buckets if str(L) not in have]
    if todo:
        f = pim_jit(attention_fn(cfg.n_heads // cfg.n_kv_heads), backend=part_backend,
                    resident=("k_cache", "v_cache"), tuner=tuner, placement="prefer_pim", precision=precision)
        conv = list(have.get("conversions", []))
        for L in _progress(todo, len(todo), f"attention x {len(todo)} contexts", progress):
            c = compile_recording(f.lower(*attention_shapes(cfg, 1, L)), conv)
            a = attention_of(op_figures(c, ["attention"] * len(c.plans), tuner), L, 0.0, 0.0, c.plans)
            have[str(L)] = [_num(a.pim_ns), _num(a.baseline_ns)]
        have["conversions"] = conv
        if cache is not None:
            cache.put(key, have)
    if conversions is not None:
        conversions.extend(c for c in have.get("conversions", []) if c not in conversions)
    return {L: tuple(_unnum(v) for v in have[str(L)]) for L in buckets}


def _num(x):
    return None if not np.isfinite(x) else float(x)


def _unnum(x):
    return float("nan") if x is None else float(x)


def dense_ladder(shard, backend: Backend, Ts: list[int], tuner, *, stop_when_gpu_wins: bool,
                 gpu: TracedDense, cache: TableCache | None = None, progress: bool = True,
                 precision: str = "convert", conversions: list | None = None) -> dict:
    """The decode layer compiled on PIM at T = each of `Ts` tokens: per
    non-attention op its tuned and baseline ns (NaN: not on PIM).  With
    `stop_when_gpu_wins`, the ladder stops after a T where no op's tuned PIM
    time beats its GPU time (`gpu_ns(T)`): PIM's GEMV time grows with T
    and the GPU's does not until it is compute-bound, so no larger T places a
    dense op on PIM (`stop`)."""
    from ...api import pim_jit
    from ...models.layers import layer_shapes, make_layer
    from ..inference import RESIDENT, input_phases, op_figures, op_phases
    key = _table_key(kind="ladder", cfg=shard, backend=backend, tuner=(tuner.mode, tuner.top_k),
                     **_precision_key(precision))
    have = (cache.get(key) if cache is not None else None) or {}
    conv = list(have.get("conversions", []))
    layer = make_layer(shard, append=False)
    points, phases, kinds = {}, {}, {}
    stop = None
    f = None
    for T in _progress(Ts, len(Ts), "dense layer on PIM", progress):
        rec = have.get(str(T))
        if rec is None:
            if f is None:
                f = pim_jit(layer, backend=backend, resident=RESIDENT, tuner=tuner, placement="prefer_pim",
                            precision=precision)
            args = layer_shapes(shard, T, PROBE)
            c = compile_recording(f.lower(*args), conv)
            blocks = {p.block[0]: p.block for p in c.plans if p.block}
            ph = op_phases(c.graph, input_phases(c.graph, args), blocks)
            ops = [o for o in op_figures(c, ph, tuner) if o.phase != "attention"]
            rec = {"phases": [o.phase for o in ops], "kinds": [o.kind for o in ops],
                   "pim": [_num(o.pim_ns) for o in ops], "base": [_num(o.baseline_ns) for o in ops]}
            have[str(T)] = rec
            have["conversions"] = conv
            if cache is not None:
                cache.put(key, have)
        want = gpu.phases(T)
        if tuple(rec["phases"]) != tuple(want):
            raise AssertionError(f"the layer compiled at T={T} and traced for the GPU differ: "
                                 f"{rec['phases']} vs {want}")
        phases[T == 1], kinds[T == 1] = tuple(rec["phases"]), tuple(rec["kinds"])
        points[T] = (np.array([_unnum(v) for v in rec["pim"]]), np.array([_unnum(v) for v in rec["base"]]))
        if stop_when_gpu_wins:
            pim = points[T][0]
            g = gpu.ns(T)
            ok = np.isfinite(pim)
            if ok.any() and not (pim[ok] < g[ok]).any():
                stop = T
                break
    if conversions is not None:
        conversions.extend(c for c in conv if c not in conversions)
    if False not in phases:                       # T >= 2 never compiled: the T = 1 lists stand in
        phases[False], kinds[False] = phases[True], kinds[True]
    return {"points": points, "phases": phases, "kinds": kinds, "stop": stop}


def ladder_points(max_T: int, limit: int = LADDER_MAX) -> list[int]:
    """T = 1, 2, 4, ... up to min(max_T, limit), and min(max_T, limit) itself."""
    top = max(1, min(int(max_T), limit))
    pts = [1]
    while pts[-1] * 2 <= top:
        pts.append(pts[-1] * 2)
    if pts[-1] != top:
        pts.append(top)
    return pts


def build_costs(cfg, backend: Backend, *, system: str, tp: int, link_GBps: float, l_bucket: int, block_size: int,
                max_batch: int, partition, overlap: str, gpu_kernels: str, ffn_pim_fraction, contexts: tuple,
                tuner, cache_path: str | None = None, progress: bool = True,
                precision: str = "convert") -> StepCosts:
    """Compile what `system` needs and return the `StepCosts` (see the module
    docstring).  contexts: (smallest, largest) decode context of the trace;
    the attention is compiled for every bucket between them.  precision:
    `pim_jit`'s; its conversions go to `StepCosts.conversions`, not warnings."""
    t0 = time.perf_counter()
    conversions: list = []
    shard = cfg.tensor_parallel(tp) if tp > 1 else cfg
    host = backend.system.baseline
    mha = system in ("attacc-base", "attacc-full") and shard.n_kv_heads < shard.n_heads
    layout = kv_layout(cfg, backend, tp=tp, block_size=block_size, max_batch=max_batch, partition=partition,
                       stored_heads=shard.n_heads if mha else None, shared=system == "gpu")
    part_backend = partition_backend(backend, layout.partition_channels)
    cache = TableCache(cache_path)
    dense_gpu = TracedDense(shard, backend, host) if gpu_kernels == "traced" or system in LADDER_SYSTEMS else None
    ladder = None
    if system in LADDER_SYSTEMS:
        Ts = ladder_points(max_batch)
        ladder = dense_ladder(shard, backend, Ts, tuner, stop_when_gpu_wins=system not in SPLIT_SYSTEMS,
                              gpu=dense_gpu, cache=cache, progress=progress, precision=precision,
                              conversions=conversions)
    lo, hi = contexts
    nb = -(-hi // l_bucket)
    att_tuned = np.full(nb, np.nan)
    att_base = np.full(nb, np.nan)
    compiled = 0
    if system != "gpu":
        first = -(-lo // l_bucket)
        buckets = [b * l_bucket for b in range(first, nb + 1)]
        figs = attention_figures(shard, part_backend, buckets, tuner, mha=mha, cache=cache, progress=progress,
                                 precision=precision, conversions=conversions)
        for L, (tuned, base) in figs.items():
            att_tuned[L // l_bucket - 1] = tuned
            att_base[L // l_bucket - 1] = base
        compiled = len(buckets)
    cache.save()
    for a in (att_tuned, att_base):
        a.setflags(write=False)
    return StepCosts(cfg=cfg, shard=shard, backend=backend, part_backend=part_backend, host=host, system=system,
                     tp=tp, link_GBps=link_GBps, l_bucket=l_bucket, overlap=overlap, gpu_kernels=gpu_kernels,
                     ffn_pim_fraction=ffn_pim_fraction, layout=layout, dense_gpu=dense_gpu, ladder=ladder,
                     att_tuned=att_tuned, att_base=att_base,
                     gpu_attention=make_gpu_attention(shard, backend, l_bucket),
                     compile_s=time.perf_counter() - t0, compiled_buckets=compiled, conversions=conversions)
