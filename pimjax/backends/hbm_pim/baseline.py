"""HBM-PIM's baseline mapping (the Samsung simulator's), as a Draft."""
from __future__ import annotations

from ...hw.core import Backend
from ...partition.baselines import largest_pow2_at_most
from ...partition.dimsets import dimension_sets
from ...partition.draft import DimPart, Draft
from ...partition.generate import lane_candidates
from ...trace.ir import PimOp


def hbm_pim_baseline(op: PimOp, backend: Backend) -> Draft | None:
    """The Samsung simulator's mapping.

    The output sets (for elementwise ops every set; never the set the lanes
    reduce along) are spread over every group and core, the largest first,
    each taking the powers of two of groups and then cores that the ones
    before left; every other set stays on one core; KI = KO = 8 (or the
    unit's registers, when it has fewer).  For a GEMV
    y[M] = W[M x N] x[N] this is hbm-pim.md's baseline: 4096-output tiles
    over 64 pCH x 8 units, 128-input tiles, output-stationary; a
    contraction's outputs fill KO registers of a unit, then the units, then
    the groups, as the simulator places them (M = 1024: 16 pCH x 8 units x
    8 outputs, the other pCH idle -- the simulator pads them); an
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
    from ...partition.verify import shared_register_sets
    vector_sets = shared_register_sets(op, backend, per_core=False)   # the lowering broadcasts (lower.py)
    if op.kind == "reduction":       # units the outputs leave idle take slices of the reduction
        spread += sorted((i for i, s in enumerate(sets) if s.reduction), key=lambda i: -sets[i].extent(0, ext)[1])
    # the Samsung simulator fills all 8 GRF_A / GRF_B: every register the unit has, up to 8
    ko = min(8, max(1, backend.core.n_output_regs))
    g_rem, c_rem = backend.n_groups, backend.cores_per_group
    alloc = {}
    for i in spread:
        length = sets[i].extent(0, ext)[1]
        if op.kind == "contraction" and not sets[i].reduction and not vector_sets[i]:
            # a GEMV's outputs fill the unit's KO GRF_B, then the units of a pCH, then the pCH
            # (PIMKernel::preloadGemv / readResult walk unit, bank group, pCH): M < 4096 leaves
            # whole pCH idle rather than every unit partly filled
            c = largest_pow2_at_most(max(1, length // ko), c_rem)
            g = largest_pow2_at_most(max(1, length // (ko * c)), g_rem)
        else:
            g = largest_pow2_at_most(length, g_rem)
            # input registers are written by group broadcast: a set the vector depends on stays whole
            # in the cores of a group (the generator's rule for register-SIMD contractions)
            c = 1 if vector_sets[i] else largest_pow2_at_most(max(1, length // g), c_rem)
        alloc[i] = (g, c)
        g_rem, c_rem = g_rem // g, c_rem // c
    parts = [DimPart(*alloc.get(i, (1, 1)), 0) for i in range(len(sets))]
    partial = any(sets[i].reduction and g * c > 1 for i, (g, c) in alloc.items())
    ki = min(8, max(1, backend.core.n_input_regs)) if op.kind == "contraction" else 1
    return Draft(tuple(parts), reduction="host" if partial else "complete", dataflow="os", ki=ki, ko=ko,
                 lane_var=lane)
