"""The kernels a GPU runs for a traced graph: the GPU-only baseline fused as the libraries fuse it.

`sim.host.host_time` times one `PimOp` as one kernel.  A traced layer's ops are finer than a
GPU's kernels: jnp's RMSNorm traces to a squaring map, a row sum and a scaling map (three ops,
three launches, the row written and re-read twice), where vLLM, Apex and XLA's fusions run one
kernel that reads the row and writes the result.  `gpu_kernels` groups the ops the way the
libraries do, on the GPU models that describe library kernels (`hw.gpu.FUSING_GPU_MODELS`:
"library" and the measured "profile"):

- **maps and row reductions** joined by a producer-consumer edge are one kernel (XLA's loop and
  input fusion; the fused norm / softmax kernels of vLLM and Apex), when the rows agree: a map
  feeds a reduction whose inputs it writes, a reduction feeds a map over its rows or over the
  elements it reduced, and rows are at most `MAX_FUSED_ROW` long.  The kernel reads the values it does not make and writes those another
  kernel (or the caller) reads; what stays inside is never written to memory.  It is timed as
  `hw.gpu.elementwise_ns` with kind "softmax" (an `exp` among its primitives), "norm" (a map
  after a row reduction), "reduce" or "act".
- **a contraction** is its library GEMM (`host_time`).  Its traced epilogue runs in the GEMM's
  epilogue (cuBLASLt's bias / activation epilogues, beta * C for a residual) unless it reads a
  whole output-sized operand through something other than an add: SiLU(gate) * up then runs as
  its own map kernel after the GEMM (vLLM's `silu_and_mul`), charged to the same op.
- **host and layout ops** are kernels of their own.

On the papers' own GPU models ("roofline", "dcc", "attacc", "pimflow") and "occupancy" every op
is its own kernel, as those models were defined and checked.

`op_gpu_ns` is each op's share of the kernels it belongs to (a kernel's time split over its ops in
proportion to their stand-alone `host_time`), so the shares of a graph add up to its fused
GPU-only time.  When a plan moves one op of a fused kernel to PIM, the ops left on the GPU keep
their shares: the kernel is not re-fused around the hole (an approximation the report states).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..hw.core import HostModel
from ..hw.gpu import FUSING_GPU_MODELS, conv_algorithm
from ..trace.ir import PimGraph, PimOp, expr_args, expr_prims
from .host import PRODUCT_KINDS, host_time, op_kernel

# the longest row a fused norm / softmax kernel keeps in one thread block (vLLM's and Apex's norm kernels
# and XLA's row-reduction fusions loop a block over rows up to 64 K elements); a longer reduction (a whole
# tensor's sum) ends its kernel, and what reads its result is another launch
MAX_FUSED_ROW = 65536

# epilogue primitives a GEMM library applies in its epilogue whatever operand they read
# (beta * C adds a full-sized operand; cuBLASLt adds a bias and converts the result)
_GEMM_EPILOGUE_FREE = frozenset({"add", "sub", "convert_element_type"})


@dataclass(frozen=True)
class GpuKernel:
    """One kernel of the GPU-only run.

    name: its ops' primitives joined by "+" (a contraction's separate epilogue map: its
    epilogue's primitives; a convolution: its primitive and, in brackets, the algorithm its GPU
    model runs, `hw.gpu.conv_algorithm`); ops: the graph op indices it runs; kind: "gemm",
    "conv", "act", "norm", "softmax", "reduce" or "copy"; ns: its time on the GPU model."""
    name: str
    ops: tuple[int, ...]
    kind: str
    ns: float


def fuses(host: HostModel) -> bool:
    """Whether `host`'s GPU model fuses a graph's ops into library kernels (`FUSING_GPU_MODELS`)."""
    return host.model in FUSING_GPU_MODELS


def _numel(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _op_label(op: PimOp) -> str:
    return "+".join((op.name,) + tuple(op.fused))


def _product_label(op: PimOp, host: HostModel, kernel: tuple) -> str:
    """A library product kernel's name: its primitive, a convolution's with the algorithm `host`'s
    model runs it as (cuDNN's pick)."""
    kind, args = kernel
    return f"{op.name} [{conv_algorithm(host, **args)}]" if kind == "conv" else op.name


def conv_pick(kernel: GpuKernel) -> str | None:
    """The algorithm a "conv" kernel runs as cuDNN's pick (`_product_label`'s bracket), None for any
    other kernel and for a convolution its GPU model times as its im2col product."""
    if kernel.kind != "conv" or not kernel.name.endswith("]"):
        return None
    algorithm = kernel.name[kernel.name.rindex("[") + 1:-1]
    return None if algorithm == "im2col_gemm" else algorithm


def _separate_epilogue(op: PimOp, shapes: dict) -> bool:
    """Whether a contraction's traced epilogue is a map kernel of its own after the GEMM: it
    reads an operand as large as the result (not a broadcast bias) through a primitive the
    GEMM libraries' epilogues do not apply (SiLU(gate) * up, a gating multiply)."""
    if op.kind != "contraction" or op.epilogue is None:
        return False
    out = _numel(shapes[op.result.value])
    full = [k for k in expr_args(op.epilogue)
            if k < len(op.operands) and _numel(shapes[op.operands[k].value]) >= out]
    return bool(full) and any(p not in _GEMM_EPILOGUE_FREE for p in expr_prims(op.epilogue))


def _groups(graph: PimGraph, args: list) -> list[list[int]]:
    """Op indices grouped into fused map / row-reduction kernels (graph order within a group)."""
    parent = list(range(len(graph.ops)))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    producer = {r.value: i for i, op in enumerate(graph.ops) for r in op.results}
    fusable = [op.kind in ("elementwise", "reduction") for op in graph.ops]
    for j, op in enumerate(graph.ops):
        if not fusable[j]:
            continue
        for a in op.operands:
            i = producer.get(a.value)
            if i is None or not fusable[i] or find(i) == find(j):
                continue
            oi, ri = args[i]["outputs"], args[i]["reduction"]
            oj, rj = args[j]["outputs"], args[j]["reduction"]
            if max(ri, rj) > MAX_FUSED_ROW:
                rows_agree = False
            elif ri > 1 and rj > 1:
                rows_agree = oi == oj * rj           # a reduction of a reduction's rows
            elif ri > 1:
                rows_agree = oj in (oi, oi * ri)     # a map over the rows or over the reduced elements
            elif rj > 1:
                rows_agree = oi in (oj * rj, oj)     # a map writing the reduction's inputs (or its rows)
            else:
                rows_agree = True                    # map into map: XLA's loop fusion
            if rows_agree:
                parent[find(i)] = find(j)
    groups: dict[int, list[int]] = {}
    for i in range(len(graph.ops)):
        groups.setdefault(find(i), []).append(i)
    return sorted(groups.values(), key=lambda g: g[0])


def _fused_kernel(graph: PimGraph, members: list[int], host: HostModel, shapes: dict, dtype_bytes,
                  args: list) -> GpuKernel:
    """A fused group of maps / row reductions as one `elementwise_ns` kernel."""
    ops = [graph.ops[i] for i in members]
    inside = {r.value for op in ops for r in op.results}
    later = {a.value for j, op in enumerate(graph.ops) if j not in members for a in op.operands}
    escapes = {v for v in inside if v in later or v in graph.outputs}
    reads = {a.value for op in ops for a in op.operands if a.value not in inside}

    moved = sum(_numel(shapes[v]) * _elem_bytes(dtype_bytes, v) for v in reads | escapes)
    red = [i for i in members if args[i]["reduction"] > 1]
    prims = {p for op in ops for p in (op.name, *op.fused)}
    if red:
        rows, length = args[red[0]]["outputs"], args[red[0]]["reduction"]
        after_red = any(i > red[0] and args[i]["reduction"] == 1 for i in members)
        kind = "softmax" if "exp" in prims else ("norm" if after_red else "reduce")
    else:
        rows, length = max(args[i]["outputs"] for i in members), 1
        kind = "act"
    flops = sum(args[i]["flops"] for i in members)
    ns = float(host.elementwise_ns(moved, flops, outputs=rows, reduction=length, kind=kind))
    return GpuKernel("+".join(_op_label(op) for op in ops), tuple(members), kind, ns)


def gpu_kernels(graph: PimGraph, host: HostModel, shapes: dict | None = None,
                dtype_bytes: dict | int = 2) -> tuple[GpuKernel, ...]:
    """The kernels of `graph`'s GPU-only run on `host`, in launch order.

    shapes: value id -> shape (default: the graph's values); dtype_bytes: bytes per element,
    one number or a dict by value id (as `host_time`; `pimjax.plan` passes `plan.host_bytes`).
    On a fusing model (`fuses(host)`) maps and row reductions are grouped and a contraction's
    non-library epilogue is a kernel of its own (the module docstring); elsewhere every op is
    one kernel timed by `host_time`.  ns are the host model's."""
    shapes = _shapes(graph, shapes)
    return _kernels(graph, host, shapes, dtype_bytes, _alone(graph, host, shapes, dtype_bytes))


def _shapes(graph: PimGraph, shapes: dict | None) -> dict:
    return {i: v.shape for i, v in enumerate(graph.values)} if shapes is None else shapes


def _alone(graph, host, shapes, dtype_bytes) -> np.ndarray:
    """Every op's stand-alone `host_time`, ns."""
    return np.array([float(host_time(op, host, shapes, dtype_bytes)) for op in graph.ops])


def _elem_bytes(dtype_bytes, v) -> int:
    return dtype_bytes.get(v, 4) if isinstance(dtype_bytes, dict) else dtype_bytes


def _kernels(graph, host, shapes, dtype_bytes, alone) -> tuple[GpuKernel, ...]:
    kinds = [op_kernel(op, shapes, dtype_bytes) for op in graph.ops]
    # a kernel's kind: "gemm" / "conv" for a product, else the elementwise kind `op_kernel` gives it
    kind_of = [k if k in PRODUCT_KINDS else a["kind"] for k, a in kinds]
    if not fuses(host):
        return tuple(GpuKernel(_op_label(op), (i,), kind_of[i], float(alone[i])) for i, op in enumerate(graph.ops))
    args = [a if op.kind in ("elementwise", "reduction") else None for op, (_, a) in zip(graph.ops, kinds)]
    kernels = []
    for members in _groups(graph, args):
        i = members[0]
        op = graph.ops[i]
        if op.kind in ("elementwise", "reduction"):
            kernels.append(_fused_kernel(graph, members, host, shapes, dtype_bytes, args))
            continue
        kind = kind_of[i]
        kernels.append(GpuKernel(_product_label(op, host, kinds[i]) if kind in PRODUCT_KINDS else _op_label(op), (i,),
                                 kind, float(alone[i])))
        if kind in PRODUCT_KINDS and _separate_epilogue(op, shapes):
            # the epilogue's map reads the GEMM's result and its other operands, writes the result
            out = _numel(shapes[op.result.value])
            extra = {op.operands[k].value for k in expr_args(op.epilogue) if k < len(op.operands)}
            moved = 2 * out * _elem_bytes(dtype_bytes, op.result.value) + \
                sum(_numel(shapes[v]) * _elem_bytes(dtype_bytes, v) for v in extra)
            epi = tuple(expr_prims(op.epilogue))
            ns = float(host.elementwise_ns(moved, out * len(epi), outputs=out, reduction=1, kind="act"))
            kernels.append(GpuKernel("+".join(dict.fromkeys(epi)), (i,), "act", ns))
    return tuple(sorted(kernels, key=lambda k: k.ops[0]))


def op_gpu_ns(graph: PimGraph, host: HostModel, shapes: dict | None = None, dtype_bytes: dict | int = 2,
              kernels: tuple[GpuKernel, ...] | None = None) -> np.ndarray:
    """Each op's share of the GPU-only run, ns, shape (len(graph.ops),): every kernel's time
    split over its ops in proportion to their stand-alone `host_time` (evenly when those are
    all 0).  Sums to the kernels' total.  kernels: `gpu_kernels`' answer, if already at hand."""
    shapes = _shapes(graph, shapes)
    alone = _alone(graph, host, shapes, dtype_bytes)
    if kernels is None:
        kernels = _kernels(graph, host, shapes, dtype_bytes, alone)
    share = np.zeros(len(graph.ops))
    for k in kernels:
        idx = np.array(k.ops)
        w = alone[idx]
        w = w / w.sum() if w.sum() > 0 else np.full(len(idx), 1.0 / len(idx))
        share[idx] += k.ns * w
    return share
