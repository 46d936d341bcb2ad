"""Baseline mappings, each expressed as a Draft and lowered like any other.

These are what speedups are measured against:

* hbm-pim — the Samsung simulator's mapping (`reference/hbm-pim.md`): GEMV
  outputs over all 64 pCH x 8 units (4096 per output tile, 8 GRF_B per
  unit), the input in 128-element tiles (8 GRF_A x 16 lanes), output
  stationary; elementwise and reductions over all units in tiles of 8 bursts.
* attacc, newton, upmem — added by their lowering modules (see
  `BASELINES`).

`baseline(op, backend)` returns the backend's baseline Draft for any op it
supports, or None.
"""
from __future__ import annotations

from typing import Callable

from ..hw.core import Backend
from ..trace.ir import PimOp
from .dimsets import dimension_sets
from .draft import DimPart, Draft
from .generate import lane_candidates

BASELINES: dict[str, Callable[[PimOp, Backend], Draft | None]] = {}


def register_baseline(name: str):
    def wrap(fn):
        BASELINES[name] = fn
        return fn
    return wrap


def baseline(op: PimOp, backend: Backend) -> Draft | None:
    """The backend's default mapping of `op` as a Draft (None if it has none;
    a contraction of one tensor, `ones @ x`, has none: no vector operand)."""
    fn = BASELINES.get(backend.name)
    if fn is None or (op.kind == "contraction" and len(op.body_operands) < 2):
        return None
    return fn(op, backend)


def _largest_pow2_at_most(n: int, cap: int) -> int:
    p = 1
    while p * 2 <= min(n, cap):
        p *= 2
    return p


@register_baseline("hbm-pim")
def hbm_pim_baseline(op: PimOp, backend: Backend) -> Draft | None:
    """The Samsung simulator's mapping.

    The output sets (for elementwise ops every set; never the set the lanes
    reduce along) are spread over every group and core, the largest first,
    each taking the powers of two of groups and then cores that the ones
    before left; every other set stays on one core; KI = KO = 8.  For a GEMV
    y[M] = W[M x N] x[N] this is hbm-pim.md's baseline: 4096-output tiles
    over 64 pCH x 8 units, 128-input tiles, output-stationary; an
    elementwise op of shape [1, n] spreads its n like a vector of n.  The
    Samsung simulator has no reduction kernel: a reduction spreads its
    outputs first and its reduced set over the units they leave idle, each
    unit's partial merged on the host."""
    if op.kind not in ("contraction", "elementwise", "reduction"):
        return None
    sets = dimension_sets(op)
    lane = lane_candidates(op, backend)[0]
    ext = op.extents
    spread = [i for i, s in enumerate(sets)
              if not s.reduction and (op.kind == "elementwise" or lane not in s.vars)]
    spread.sort(key=lambda i: -sets[i].extent(0, ext)[1])      # stable: ties keep the loop order
    from .verify import shared_register_sets
    vector_sets = shared_register_sets(op, backend)
    if op.kind == "reduction":       # units the outputs leave idle take slices of the reduction
        spread += sorted((i for i, s in enumerate(sets) if s.reduction), key=lambda i: -sets[i].extent(0, ext)[1])
    g_rem, c_rem = backend.n_groups, backend.cores_per_group
    alloc = {}
    for i in spread:
        length = sets[i].extent(0, ext)[1]
        g = _largest_pow2_at_most(length, g_rem)
        # input registers are written by group broadcast: a set the vector depends on stays whole
        # in the cores of a group (the generator's rule for register-SIMD contractions)
        c = 1 if vector_sets[i] else _largest_pow2_at_most(max(1, length // g), c_rem)
        alloc[i] = (g, c)
        g_rem, c_rem = g_rem // g, c_rem // c
    parts = [DimPart(*alloc.get(i, (1, 1)), 0) for i in range(len(sets))]
    partial = any(sets[i].reduction and g * c > 1 for i, (g, c) in alloc.items())
    ki = 8 if op.kind == "contraction" else 1
    return Draft(tuple(parts), reduction="host" if partial else "complete", dataflow="os", ki=ki, ko=8,
                 lane_var=lane)


def _largest_divisor_at_most(n: int, cap: int) -> int:
    return max(d for d in range(1, n + 1) if n % d == 0 and d <= max(1, cap))


@register_baseline("newton")
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
    from .verify import infer_shapes, matrix_and_vector, op_support
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
        g = _largest_divisor_at_most(g_rem, length)
        c = _largest_divisor_at_most(c_rem, length // g)
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


# PrIM's defaults (Gomez-Luna et al. 2022, PrIM Makefiles: NR_TASKLETS ?= 16, BL ?= 10, i.e.
# 1024-byte MRAM<->WRAM blocks -- the UPMEM programming guide's recommendation, which ATiM §7.1
# says PrIM follows for every workload; ATiM Table 3 lists only PrIM's DPU counts, chosen by grid search).
UPMEM_PRIM_TASKLETS = 16
UPMEM_PRIM_WRAM_TILE = 1024


@register_baseline("upmem")
def upmem_baseline(op: PimOp, backend: Backend, dpus: int | None = None) -> Draft | None:
    """PrIM's mapping (the PrIM-style baseline of ATiM §6).

    1-D tiling of the output rows over the DPUs (outputs only, no rfactor):
    the output dimension sets, outermost first, take as many DPUs as they
    have rows (PrIM GEMV tiles the rows; PrIM-style TTV flattens the outer
    loops, MMTV distributes DPUs over the outer loop dimension); elementwise
    ops tile their iteration space 1-D.  An op with a single output (RED)
    splits its input over the DPUs and the host sums the DPUs' results, as
    PrIM's RED does.  16 tasklets, 1024-byte WRAM tiles, output-stationary
    (PrIM GEMV re-reads the vector block for every row).

    dpus: DPUs to use (a power of two; default: as many as the rows allow,
    at most the backend's).  ATiM grid-searched PrIM's DPU count; see
    `upmem_baseline_grid`.  Use the lowering switches `lower.upmem.PRIM_OPTIONS`
    to reproduce PrIM's hand-written kernels.
    """
    from .verify import op_support
    if op.kind not in ("contraction", "elementwise", "reduction") or not backend.core.programmable:
        return None
    if not op_support(op, backend)[0]:
        return None
    sets = dimension_sets(op)
    ext = op.extents
    budget = backend.n_cores if dpus is None else int(dpus)
    if budget < 1 or budget & (budget - 1) or budget > backend.n_cores:
        raise ValueError(f"upmem baseline: dpus={dpus} must be a power of two <= {backend.n_cores}")
    out_sets = [i for i, s in enumerate(sets) if not s.reduction]
    rows = 1
    for i in out_sets:
        rows *= sets[i].extent(0, ext)[1]
    spread = out_sets if rows > 1 or op.kind == "elementwise" else \
        [i for i, s in enumerate(sets) if s.reduction][:1]           # RED: split the input
    reduction = "complete" if rows > 1 or op.kind == "elementwise" else "host"
    c_rem = min(backend.cores_per_group, budget)
    g_rem = min(backend.n_groups, budget // c_rem)
    alloc = {}
    for i in spread:
        length = sets[i].extent(0, ext)[1]
        c = _largest_pow2_at_most(length, c_rem)
        g = _largest_pow2_at_most(max(1, length // c), g_rem)
        alloc[i] = (g, c)
        c_rem //= c
        g_rem //= g
    parts = tuple(DimPart(*alloc.get(i, (1, 1)), 0) for i in range(len(sets)))
    return Draft(parts, reduction=reduction, dataflow="os", tasklets=UPMEM_PRIM_TASKLETS,
                 wram_tile=UPMEM_PRIM_WRAM_TILE, lane_var=None, granularity="core")


def upmem_baseline_grid(op: PimOp, backend: Backend, min_dpus: int = 64) -> list[Draft]:
    """PrIM baselines for every power-of-two DPU count from `min_dpus` up to
    the backend's (ATiM §6: PrIM's DPU count "selected via grid search");
    distinct drafts only."""
    out: list[Draft] = []
    n = min_dpus
    while n <= backend.n_cores:
        d = upmem_baseline(op, backend, dpus=n)
        if d is not None and d not in out:
            out.append(d)
        n *= 2
    return out


@register_baseline("attacc")
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
    from .verify import infer_shapes, matrix_and_vector
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
