"""The GPU-only (host) baseline: every op's time on the host roofline.

`host_time(op, host)` is what the op costs when it runs on the host (GPU
or CPU) instead of PIM: the roofline of `HostModel.time_ns` with the bytes
of every operand read once and the result written once, and the op's
arithmetic (a multiply-add per contraction point = 2 FLOP; one FLOP per
body primitive per point otherwise).  The efficiency factors of the host
model are part of its definition (see `pimjax/hw/host.py`).
"""
from __future__ import annotations

import numpy as np

from ..hw.core import HostModel, as_float
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


def host_time(op: PimOp, host: HostModel, shapes: dict | None = None,
              dtype_bytes: dict | int = 2):
    """Time of `op` on the host roofline in ns.

    shapes: value id -> shape (default: implied by the index maps);
    dtype_bytes: bytes per element, one number or a dict by value id (ids
    missing from a dict count 4 B).  The default 2 (FP16) is applied
    whatever the graph's dtypes are -- a PimOp carries none, they live in
    the PimGraph's values -- so an int32 / float32 op timed with the default
    is charged half its bytes.  Pass the element size you mean
    (`pimjax.api` passes `api.host_bytes`: each value's own size, floats
    capped at the backend's element).

    Returns a float for a concrete host; under `jax.vmap` / `jax.jit` over
    stacked hosts (`pimjax.hw.stack_variants`) the roofline's array, so a
    sweep of host models is one vmapped call.

    Example:
        >>> host_time(graph.ops[0], a100(memory="hbm3"), shapes)   # doctest: +SKIP
        12400.0
    """
    if shapes is None:
        from ..partition.verify import infer_shapes
        shapes = infer_shapes(op)
    # traced, or a concrete stack of hosts: one time per variant
    return as_float(host.time_ns(op_bytes(op, shapes, dtype_bytes), op_flops(op)))
