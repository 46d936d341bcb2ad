"""The GPU-only (host) baseline: every op's time on the host's model.

`host_time(op, host)` is what the op costs when it runs on the host (GPU
or CPU) instead of PIM, on the host's time model (`HostModel.model`,
`pimjax/hw/gpu.py`).  On "roofline" (and "dcc"): `HostModel.time_ns` with the
bytes of every operand read once and the result written once, and the op's
arithmetic (a multiply-add per contraction point = 2 FLOP; one FLOP per
body primitive per point otherwise).  On the other models an op is the
kernel `pimjax.hw.gpu` times without a graph: a contraction is
`gemm_ns(m, n, k, batch)` (`op_gemm_shape`), anything else `elementwise_ns`
with its outputs and the elements folded into each, so a graph's figures and
an LLM layer table built from `gemm_ns` / `attention_ns` agree.  The
efficiency factors of the host model are part of its definition (see
`pimjax/hw/host.py`).
"""
from __future__ import annotations

import numpy as np

from ..hw.core import HostModel, as_float
from ..hw.gpu import conv_view
from ..trace.ir import PimOp, expr_prims


def op_bytes(op: PimOp, shapes: dict, dtype_bytes: dict | int = 2) -> int:
    """Bytes an op moves on the host: each distinct operand once + the result.

    dtype_bytes: bytes per element, one number for every value or a dict by
    value id (ids missing from it count 4 B).  The default 2 (FP16) is not
    read from the graph (see `host_time`): pass the element size you mean.
    """
    def nbytes(vid):
        eb = dtype_bytes.get(vid, 4) if isinstance(dtype_bytes, dict) else dtype_bytes
        return int(np.prod(shapes[vid], dtype=np.int64)) * eb
    seen = {a.value for a in op.operands}
    return sum(nbytes(v) for v in seen) + sum(nbytes(r.value) for r in op.results)


def op_flops(op: PimOp) -> int:
    """Arithmetic of an op in FLOP (MAC = 2)."""
    if op.kind in ("host", "layout"):
        return 0
    points = op.iteration_points
    if op.kind == "contraction":
        flops = 2 * points
    else:
        flops = points * max(1, len(list(expr_prims(op.body))) if op.body is not None else 1)
    if op.epilogue is not None:
        outs = int(np.prod([op.extents[v] for v in op.output_vars], dtype=np.int64))
        flops += outs * len(list(expr_prims(op.epilogue)))
    return int(flops)


def op_gemm_shape(op: PimOp) -> dict | None:
    """{m, n, k, batch} of a contraction as `pimjax.hw.gpu.gemm_ns` reads it:
    k the reduced extents, batch the output extents both product operands
    index, m / n the output extents only one of them indexes (m the smaller);
    None when the op is not a two-operand contraction."""
    if op.kind != "contraction" or not op.reduction_vars:
        return None
    body = [op.operands[i] for i in op.body_operands] if op.body is not None else list(op.operands)
    body = [a for a in body if a.index_map]
    if len(body) != 2:
        return None
    ext = op.extents
    a, b = (set(x.vars) for x in body)
    prod = lambda vs: int(np.prod([ext[v] for v in vs], dtype=np.int64)) if vs else 1  # noqa: E731
    out = [v for v in op.output_vars if v not in op.reduction_vars]
    batch = prod([v for v in out if v in a and v in b])
    m = prod([v for v in out if v in a and v not in b]) * prod([v for v in out if v not in a and v not in b])
    n = prod([v for v in out if v in b and v not in a])
    m, n = min(m, n), max(m, n)
    return {"m": m, "n": n, "k": prod(list(op.reduction_vars)), "batch": batch}


def op_conv_shape(op: PimOp) -> dict | None:
    """{n, h, w, c, f, kh, kw, stride, groups} of a traced 2-D (or 1-D: w = kw = 1) convolution
    as `pimjax.hw.gpu.conv_ns` reads it, None for any other op (a 1 x 1 convolution, which
    traces to a plain product; a dilated, transposed or strided-unequally one, left to
    `op_gemm_shape`'s im2col view).

    A convolution is a two-operand contraction (`op_gemm_shape`) one of whose operands, the input,
    is read at `stride * o + r` in one or two dimensions: o an output variable, r a reduced one
    (the window).  n: the output variables only the input indexes, beyond the windowed ones; the
    groups: those both operands index; f / groups: those only the filter indexes; c / groups:
    the reduced ones both index, beyond the windows; h, w: the input rows and columns the
    windows read, (o - 1) x stride + r (a traced graph pads its input in an op of its own)."""
    if op_gemm_shape(op) is None:
        return None
    body = [op.operands[i] for i in op.body_operands] if op.body is not None else list(op.operands)
    body = [a for a in body if a.index_map]
    red = set(op.reduction_vars)
    # a feature-grouped convolution's channel indices (the input's Cg * g + c, the filter's Fo * g + fo,
    # `trace.rules.conv_rule`) are sums too: the group g, an output both operands index, is no window's
    grouped = set(body[0].vars) & set(body[1].vars) - red
    windowed = [[e for e in a.index_map if len(e.terms) > 1 and not grouped & set(e.vars)] for a in body]
    if sum(bool(w) for w in windowed) != 1:
        return None
    x, filt = (body[0], body[1]) if windowed[0] else (body[1], body[0])
    ext = op.extents
    spatial, strides = [], set()
    for e in windowed[0] or windowed[1]:
        if not e.is_linear or len(e.terms) != 2:
            return None
        outs = [(v, c) for v, c in e.terms if v not in red]
        wins = [(v, c) for v, c in e.terms if v in red]
        if len(outs) != 1 or len(wins) != 1 or wins[0][1] != 1 or outs[0][1] < 1:
            return None                     # a dilated window or an unusual index: the im2col view times it
        spatial.append((outs[0][0], wins[0][0]))
        strides.add(outs[0][1])
    if any(len(e.terms) == 1 and e.terms[0][1] > 1 for e in x.index_map):
        return None                         # a strided dimension of kernel 1 (x[2 w]): the im2col view times it
    if len({v for pair in spatial for v in pair}) != 2 * len(spatial):
        return None                         # a variable in two windows (x[o + r, o + r']): no convolution's
    if len(spatial) > 2 or len(strides) != 1:
        return None
    stride = strides.pop()
    in_x, in_f = set(x.vars), set(filt.vars)
    used = {v for pair in spatial for v in pair}
    prod = lambda vs: int(np.prod([ext[v] for v in vs], dtype=np.int64)) if vs else 1  # noqa: E731
    rest = [v for v in ext if v not in used]
    if any(v in red and not (v in in_x and v in in_f) for v in rest) or \
            any(v not in in_x and v not in in_f for v in rest):
        return None                         # a reduction only one operand reads, or a broadcast output
    groups = prod([v for v in rest if v not in red and v in in_x and v in in_f])
    c = prod([v for v in rest if v in red]) * groups
    f = prod([v for v in rest if v not in red and v in in_f and v not in in_x]) * groups
    n = prod([v for v in rest if v not in red and v in in_x and v not in in_f])
    (oh, kh), (ow, kw) = [(ext[o], ext[r]) for o, r in spatial] + [(1, 1)] * (2 - len(spatial))
    return {"n": n, "h": (oh - 1) * stride + kh, "w": (ow - 1) * stride + kw, "c": c, "f": f, "kh": kh, "kw": kw,
            "stride": stride, "groups": groups}


# the product kernels `op_kernel` gives (a GEMM, a convolution): timed by the GPU models' product entries, and
# either may run its epilogue (`sim.gpu_kernels`)
PRODUCT_KINDS = ("gemm", "conv")


def host_time(op: PimOp, host: HostModel, shapes: dict | None = None,
              dtype_bytes: dict | int = 2):
    """Time of `op` on the host roofline in ns.

    shapes: value id -> shape (default: implied by the index maps);
    dtype_bytes: bytes per element, one number or a dict by value id (ids
    missing from a dict count 4 B).  The default 2 (FP16) is applied
    whatever the graph's dtypes are -- a PimOp carries none, they live in
    the PimGraph's values -- so an int32 / float32 op timed with the default
    is charged half its bytes.  Pass the element size you mean
    (`pimjax.plan` passes `plan.host_bytes`: each value's own size, floats
    capped at the backend's element).

    Returns a float for a concrete host; on the "roofline" / "dcc" models,
    under `jax.vmap` / `jax.jit` over stacked hosts
    (`pimjax.hw.stack_variants`), the roofline's array, so a sweep of host
    models is one vmapped call (the "occupancy" / "attacc" kernel models need
    concrete hosts).

    Example:
        >>> host_time(graph.ops[0], a100(memory="hbm3"), shapes)   # doctest: +SKIP
        12400.0
    """
    if shapes is None:
        from ..partition.verify import infer_shapes
        shapes = infer_shapes(op)
    if host.model in ("roofline", "dcc"):
        # traced, or a concrete stack of hosts: one time per variant
        return as_float(host.time_ns(op_bytes(op, shapes, dtype_bytes), op_flops(op)))
    # the kernel models (hw/gpu.py) take concrete hosts
    kind, args = op_kernel(op, shapes, dtype_bytes)
    if kind in PRODUCT_KINDS:
        # the "pimflow" model reads the operands' real bytes (a convolution's input, not its im2col view)
        real = float(op_bytes(op, shapes, dtype_bytes)) if host.model == "pimflow" else None
        return (host.gemm_ns if kind == "gemm" else host.conv_ns)(**args, operand_bytes=real)
    return host.elementwise_ns(**args)


def op_kernel(op: PimOp, shapes: dict, dtype_bytes: dict | int = 2) -> tuple[str, dict]:
    """The kernel a GPU model times for `op`: ("conv", conv_ns's n, h, w, c, f, kh, kw, stride,
    groups, elem_bytes) for a convolution (`op_conv_shape`), ("gemm", gemm_ns's m, n, k, batch,
    elem_bytes) for another two-operand contraction, else ("elementwise", elementwise_ns's
    bytes_moved, flops, outputs, reduction, kind)."""
    gemm = op_gemm_shape(op)
    if gemm is not None:
        first = op.operands[op.body_operands[0]].value if op.body is not None else op.operands[0].value
        eb = dtype_bytes.get(first, 4) if isinstance(dtype_bytes, dict) else dtype_bytes
        conv = op_conv_shape(op)
        if conv is not None and conv_view(**conv) != gemm:
            conv = None         # a reading that disagrees with the op's own product: keep the product (every model
                                #   without a convolution entry must time exactly what it timed before)
        return ("gemm", dict(gemm, elem_bytes=eb)) if conv is None else ("conv", dict(conv, elem_bytes=eb))
    ext = op.extents
    if op.loop_vars:
        outputs = int(np.prod([ext[v] for v in op.output_vars], dtype=np.int64)) if op.output_vars else 1
        reduction = int(np.prod([ext[v] for v in op.reduction_vars], dtype=np.int64)) if op.reduction_vars else 1
    else:                  # host / layout ops read and write whole values
        outputs = sum(int(np.prod(shapes[r.value], dtype=np.int64)) for r in op.results)
        reduction = 1
    kind = "copy" if op.kind in ("host", "layout") else ("reduce" if reduction > 1 else "act")
    return "elementwise", dict(bytes_moved=op_bytes(op, shapes, dtype_bytes), flops=op_flops(op), outputs=outputs,
                               reduction=reduction, kind=kind)


def host_time_source(op: PimOp, host: HostModel, shapes: dict | None = None, dtype_bytes: dict | int = 2) -> str:
    """Where `host_time`'s figure of `op` comes from: on a measured-profile GPU
    (`hw.profile`, model "profile") "measured", "interpolated" or "model" (its analytic model
    filled it); "model" on every other host."""
    if host.model != "profile":
        return "model"
    from ..hw.profile import profile_source
    if shapes is None:
        from ..partition.verify import infer_shapes
        shapes = infer_shapes(op)
    kind, args = op_kernel(op, shapes, dtype_bytes)
    args.pop("flops", None)
    return profile_source(host, kind, **args)


def host_energy(op: PimOp, host: HostModel, shapes: dict | None = None, dtype_bytes: dict | int = 2,
                ns: float | None = None) -> float:
    """pJ of `op` on the host (`hw.gpu.gpu_energy_pj`): its `op_bytes` (the operand traffic
    `host_time` counts; a split-K GEMM's partial sums, which its time adds, not charged),
    `op_flops` / 2 MACs, 3 register accesses per MAC of a contraction and one per byte
    of any other op (AttAcc), static power over `ns` (default `host_time` of the op)."""
    from ..hw.gpu import gpu_energy_pj
    if shapes is None:
        from ..partition.verify import infer_shapes
        shapes = infer_shapes(op)
    nbytes = float(op_bytes(op, shapes, dtype_bytes))
    macs = float(op_flops(op)) / 2.0
    t = float(host_time(op, host, shapes, dtype_bytes)) if ns is None else float(ns)
    reg = None if op.kind == "contraction" else nbytes
    return gpu_energy_pj(host, nbytes, macs, t, reg_accesses=reg)
