"""Newton's baseline mapping (PIMFlow's command generator), as a Draft."""
from __future__ import annotations

from ...hw.core import Backend
from ...partition.baselines import largest_divisor_at_most
from ...partition.dimsets import dimension_sets
from ...partition.draft import DimPart, Draft
from ...partition.generate import lane_candidates
from ...trace.ir import PimOp


def newton_baseline(op: PimOp, backend: Backend) -> Draft | None:
    """Newton's own mapping (PIMFlow §2.1-2.2; its command generator
    `OutputNewtonTrace`): the matrix rows (the output variables only the
    matrix has) spread over the channels and then the banks, the largest set
    first; the reduction stays whole in a bank and streams through one global
    buffer in row-sized input chunks (GWRITE, then G_ACT / COMP / READRES over
    every matrix row of the chunk: input-stationary); one buffer (plain
    GWRITE), group-broadcast commands, no host reduction."""
    if op.kind != "contraction":
        return None
    from ...partition.verify import infer_shapes, matrix_and_vector, op_support
    if not op_support(op, backend)[0]:
        return None
    _, vi = matrix_and_vector(op, infer_shapes(op))
    vvars = set(op.operands[vi].vars)
    sets = dimension_sets(op)
    ext = op.extents
    lane = lane_candidates(op, backend)[0]
    rows = [i for i, s in enumerate(sets) if not s.reduction and not (set(s.vars) & vvars)]
    rows.sort(key=lambda i: -sets[i].extent(0, ext)[1])
    g_rem, c_rem = backend.n_groups, backend.cores_per_group
    alloc = {}
    for i in rows:
        length = sets[i].extent(0, ext)[1]
        g = largest_divisor_at_most(g_rem, length)
        c = largest_divisor_at_most(c_rem, length // g)
        alloc[i] = (g, c)
        g_rem, c_rem = g_rem // g, c_rem // c
    parts = tuple(DimPart(*alloc.get(i, (1, 1)), 0) for i in range(len(sets)))
    # input-stationary when a bank iterates several matrix rows over several chunks
    chunk = backend.group.global_buffer_bytes // max(1, backend.group.n_global_buffers) \
        // backend.core.elem_bytes
    red = 1
    for v in op.reduction_vars:
        red *= ext[v]
    outs = 1
    for i in rows:
        outs *= -(-sets[i].extent(0, ext)[1] // (alloc[i][0] * alloc[i][1]))
    dataflow = "is" if red > chunk and outs > 1 else "os"
    return Draft(parts, reduction="complete", dataflow=dataflow, lane_var=lane, buffers=1,
                 granularity="broadcast")
