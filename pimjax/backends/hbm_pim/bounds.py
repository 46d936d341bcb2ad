"""A lower bound on the simulated cycles of every draft of a contraction,
from the draft table alone (no lowering): what lets the exhaustive tuner
skip drafts that cannot win (`search/strategy.py`'s `Exhaustive`, branch and bound).

Why it is a bound.  Every group (pCH) runs one shared command stream, in
order (`lower.py`: the matrix's host writes, then the frame and the GEMV
sequence, then the read-back), and `hw.dram_rules` spaces any two
consecutive column commands of a channel at least

    g      = min(tCCD_S, tCCD_L, tCCD_AB)   whatever their kinds and banks
    g_same = min(tCCD_L, tCCD_AB)           within one bank group

apart (the `among=COLUMNS` rules cover every pair of a bank column and an
all-bank column).  The GEMV sequence's commands (GRF writes, MACs, GRF_B
stores) are all timed to banks 0 / 1 (`isa.py`), one bank group when it holds
two banks or more (else g_same is taken as g), so W host writes followed
by K sequence commands span at least W g + (K - 1) g_same cycles, and the
program's total (rearrangement, kernel, read-back, then the host's merge;
refresh only delays) is no shorter.  W and K count columns the
contraction's lowering always issues, in closed form from the tiling
(`_contraction`'s own numbers):

    W  host writes of the matrix    cores x n_b x t_out x t_in x KI x KO   (0 if resident)
    K  MACs (all-bank)              n_b x n_v x t_out x t_in x KI x KO
       + GRF_B stores (all-bank)    n_b x n_v x slots x t_out x KO

with t_in = ceil(n_r / (KI lanes)), t_out = ceil(n_o / KO) and the worst
core's loop lengths n_b / n_v / n_o / n_r.  A variable of a set with a
single-variable mapping has the worst-core length min(extent, tile); one of
a compound mapping counts 1 (a length the bound never overestimates).  The
register writes, read-back and frame are left out, so the bound stays below
the simulated total (`tests/backends/hbm_pim/test_hbm_pim_bounds.py` checks it on
random shapes).  On the GEMV 20480 x 5120 it is 0.6-0.9 of the simulated
total and exceeds the best draft's total on most of the space.
"""
from __future__ import annotations

import numpy as np

from ...hw.core import Backend
from ...hw.dram_rules import CCD_AB, CCD_L, CCD_L_AB, CCD_S, CCD_S_AB, compile_rules
from ...lower.layout import value_shapes
from ...partition.dimsets import dimension_sets
from ...partition.draft import DATAFLOWS
from ...partition.table import DraftTable
from ...partition.verify import matrix_and_vector, per_core_var_lengths
from ...trace.ir import PimOp
from .lower import DEFAULT_OPTIONS


def column_gaps(backend: Backend) -> tuple[float, float]:
    """(g, g_same): the least spacing of two consecutive column commands of a
    channel, and of two to one bank group, under the backend's timing (cycles).
    The sequence's commands go to banks 0 and 1: one bank group only when a
    bank group holds two banks or more, else g_same is g."""
    lat = compile_rules(backend.timing)
    same = min(float(lat[k]) for k in (CCD_L, CCD_AB, CCD_L_AB))
    g = min(same, float(lat[CCD_S]), float(lat[CCD_S_AB]))
    return g, (same if backend.group.banks_per_bank_group >= 2 else g)


def lower_bound(op: PimOp, table: DraftTable, backend: Backend, shapes: dict | None = None,
                options: dict | None = None) -> np.ndarray | None:
    """[n] float64: a lower bound on the simulated total cycles of each draft
    of `table` (see the module docstring), or None when `op` is not a
    contraction this bound covers.  0 where a draft puts the lanes outside the
    reduction (its lowering raises; the tuner then lowers it as before).

    options: the lowering options the drafts will be lowered with
    (`resident`, `register_reuse`; defaults as `lower_hbm_pim`)."""
    if not isinstance(op, PimOp) or op.kind != "contraction" or len(op.body_operands) < 2:
        return None
    if backend.group.controller != "dram":      # DCC's fork (simulator="dcc"): not this DRAM bound
        return None
    opts = {**DEFAULT_OPTIONS, **(options or {})}
    shapes = value_shapes(op, shapes)
    mi, vi = matrix_and_vector(op, shapes)
    mvars, vvars = set(op.operands[mi].vars), set(op.operands[vi].vars)
    n = len(table)
    sets = dimension_sets(op)
    # worst-core loop length per variable: exact for single-variable mappings, 1 for compound ones
    box = per_core_var_lengths(op, sets, np.asarray(table.reps, np.int64), np.asarray(table.tile, np.int64),
                               compound="one")

    def prod(vs):
        out = np.ones(n, np.int64)
        for v in vs:
            out = out * box[v]
        return out
    outs = list(op.output_vars)
    n_b = prod([v for v in outs if v in mvars and v in vvars])
    n_v = prod([v for v in outs if v in vvars and v not in mvars])
    n_o = prod([v for v in outs if v not in vvars])
    n_r = prod(op.reduction_vars)
    lanes = backend.core.lanes
    ki, ko = (np.asarray(table.column(c), np.int64) for c in ("ki", "ko"))
    reuse = bool(opts["register_reuse"])
    os_ = (np.asarray(table.column("dataflow")) == DATAFLOWS.index("os")) | (not reuse)
    t_in = -(-n_r // (ki * lanes))
    t_out = -(-n_o // ko)
    slots = np.where(os_ & reuse, 1, t_in)
    cores = np.prod(np.asarray(table.cores, np.int64), axis=1)
    macs = n_b * n_v * t_out * t_in * ki * ko
    writes = 0 if mi in set(opts["resident"]) else cores * n_b * t_out * t_in * ki * ko
    stores = n_b * n_v * slots * t_out * ko
    g, g_same = column_gaps(backend)
    bound = writes * g + np.maximum(macs + stores - 1, 0).astype(np.float64) * g_same
    lane_red = np.array([v in set(op.reduction_vars) for v in table.lane_vars], bool)
    return np.where(lane_red[np.asarray(table.lane, np.int64)], bound, 0.0)
