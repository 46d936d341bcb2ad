"""AttAcc's baseline mapping (its open-source simulator's), as a Draft."""
from __future__ import annotations

from ...hw.core import Backend
from ...partition.dimsets import dimension_sets
from ...partition.draft import DimPart, Draft
from ...trace.ir import PimOp


def attacc_baseline(op: PimOp, backend: Backend) -> Draft | None:
    """AttAcc's open-source mapping (attacc.md; DCC §V comparison point 2).

    Contractions: the heads / batch entries (variables of both operands and
    the result) go over the channels; the matrix operand's first remaining
    dimension over the channel's bank groups (16 at the bank and bg levels,
    the 2 pCH units at the buffer level) and its second over the banks of a
    bank group (4 at the bank level).  Without heads, the first dimension
    takes the channels too (attacc.md's plain GEMV extension: N over the 16
    channels, then over the bank groups; K over 4 banks x 16 lanes).  The
    lanes run along the second dimension: an adder tree when it is reduced
    (score q.K, GEMV), mac mode when it is an output (context V^T p).
    Add-reductions: batch over the channels, the length over all units of
    a channel (DCC's 2-D baseline).  Partial sums merge in the channel
    accumulator ("group") or, split over channels, on the host.  Input-
    stationary: the vector is written into the GEMV buffers once (K/16
    WRGBs, attacc.md), in buffer-sized tiles when it does not fit."""
    if op.kind not in ("contraction", "reduction") or (op.kind == "reduction" and op.combiner != "add"):
        return None
    from ...partition.verify import infer_shapes, matrix_and_vector
    sets = dimension_sets(op)
    set_of = {v: i for i, s in enumerate(sets) for v in s.vars}
    ext = op.extents
    G, C = backend.n_groups, backend.cores_per_group
    c1 = min(C, backend.group.bank_groups)
    c2 = max(1, C // c1)
    red = set(op.reduction_vars)
    alloc = {i: [1, 1] for i in range(len(sets))}
    if op.kind == "contraction":
        mi, vi = matrix_and_vector(op, infer_shapes(op))
        m_acc, v_vars = op.operands[mi], set(op.operands[vi].vars)
        batch = [e.single_var for e in m_acc.index_map
                 if e.single_var is not None and e.single_var in v_vars and e.single_var not in red]
        dims = [e for e in m_acc.index_map if not (e.single_var is not None and e.single_var in batch)]
        dim_vars = [e.vars[0] if e.single_var is None else e.single_var for e in dims if e.vars]
        first, second = (dim_vars + [None, None])[:2]
        lane = second if second is not None else (op.reduction_vars[-1] if op.reduction_vars else None)
    else:
        acc = op.operands[0]
        names = [e.single_var for e in acc.index_map]
        batch = [v for v in names if v is not None and v not in red]
        first = next((v for v in names if v in red), None)
        second = None
        lane = first
        c1, c2 = C, 1
    g_rem = G
    for v in reversed(batch):                       # heads over the channels (innermost first)
        g = min(g_rem, ext[v])
        alloc[set_of[v]][0] *= g
        g_rem //= g
    if first is not None:
        if not batch:
            alloc[set_of[first]][0] *= g_rem
        alloc[set_of[first]][1] *= c1
    if second is not None:
        alloc[set_of[second]][1] *= c2
    parts = tuple(DimPart(max(1, g), max(1, c), 0) for g, c in (alloc[i] for i in range(len(sets))))
    split_red = [parts[i] for i, s in enumerate(sets) if set(s.vars) & red and parts[i].tiles > 1]
    if not split_red:
        reduction = "complete"
    elif any(p.groups > 1 for p in split_red):
        reduction = "host"
    else:
        reduction = "group"
    return Draft(parts, reduction=reduction, dataflow="is", lane_var=lane, granularity="broadcast")
