"""UPMEM's baseline mapping (PrIM's), as a Draft."""
from __future__ import annotations

from ...hw.core import Backend
from ...partition.baselines import largest_pow2_at_most
from ...partition.dimsets import dimension_sets
from ...partition.draft import DimPart, Draft
from ...trace.ir import PimOp

# PrIM's defaults (Gomez-Luna et al. 2022, PrIM Makefiles: NR_TASKLETS ?= 16, BL ?= 10, i.e.
# 1024-byte MRAM<->WRAM blocks -- the UPMEM programming guide's recommendation, which ATiM §7.1
# says PrIM follows for every workload; ATiM Table 3 lists only PrIM's DPU counts, chosen by grid search).
UPMEM_PRIM_TASKLETS = 16
UPMEM_PRIM_WRAM_TILE = 1024


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
    `upmem_baseline_grid`.  Use the lowering switches `backends.upmem.lower.PRIM_OPTIONS`
    to reproduce PrIM's hand-written kernels.
    """
    from ...partition.verify import op_support
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
        c = largest_pow2_at_most(length, c_rem)
        g = largest_pow2_at_most(max(1, length // c), g_rem)
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
