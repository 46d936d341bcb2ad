"""A lower bound on the simulated cycles of every Newton draft of a
contraction, from the draft table alone (no lowering): what lets the
exhaustive tuner skip drafts that cannot win (`search/strategy.py`'s `Exhaustive`, branch and
bound), as `hbm_pim/bounds.py` and `upmem/bounds.py` do for theirs.

Why it is a bound.  The simulated total is rearr_pre + kernel[g] +
readback + merge (`sim.cycles._combine`), with rearr_pre >= every group's
leading rearrangement, kernel[g] the largest kernel and readback the
largest read-back: so it is at least the end of any one group's command
stream (the sum of that stream's buckets), refresh only delaying it.  A
group's stream issues, in order (`lower.py`), the host writes of every bank
column its COMPs read (unless the matrix is resident), a first buffer load
(GWRITE columns), then COMPs (all-bank class, MAC columns), G_ACTs, later
loads and READRES bursts.  `hw.dram_rules` spaces any two consecutive
column commands of a channel at least

    g = min(tCCD_AB, tCCD_L, tCCD_S)     (the `among=COLUMNS` rules cover every pair)

apart, so the W host-write columns and the first load's GW columns, all
issued before the first COMP, put it at (W + GW) g or later.  Two
consecutive COMP columns with no other command between are tCCD_AB apart
(CCD_AB).  Between the last COMP column of one row and the first of the
next, a broadcast stream issues a G_ACT, which waits for bank 0's
precharge (its last read + tRTP, then tRP; a PREA in between waits as
long), is staggered over the bank groups ((bank groups - 1) tFAW) and
precedes the COMP by tRCDRD, so each of the S = G_ACTs - 1 such gaps spans

    D = tRTP_S + tRP + (bank groups - 1) tFAW + tRCDRD

A READRES between two COMPs of one row waits for the COMP's slot
(tCCD_AB), reads rr bursts tCCD_L apart, and the next COMP follows its last
burst by a column gap: D_rr = tCCD_AB + (rr - 1) tCCD_L + min(tCCD_L,
tCCD_S).  At most one READRES sits between two COMPs, so of the R READRES
of the stream at least R' = R - S - 1 sit inside a row (the last one ends
the stream).  After the last COMP the stream ends no earlier than its slot
(tCCD_AB) and a READRES of rr bursts tCCD_L apart and its data (tCL + tBL).
So a broadcast stream of K COMP columns lasts at least

    (W + GW) g + (K - 1 - S - R') tCCD_AB + S D + R' D_rr
        + tCCD_AB + (rr - 1) tCCD_L + tCL + tBL

with the counts of `counts.plan_counts` (K = COMP columns, S + 1 = G_ACTs,
R = READRES: the lowering's own per group, `tests/backends/newton/test_newton_counts.py`),
W = banks x columns read (every bank of a broadcast draft holds the padded
box's n_b n_o n_rc columns), GW = kv ki cc (the first load: kv vectors x ki
chunks of cc columns).  With register reuse or the data-block layout off
those counts do not hold: S = R' = 0, GW = kv cc, rr = 1 (smaller counts of
the same streams).

Single-bank (per-core) drafts skip a core's segments without matrix data,
so their bound counts only what group 0's cores must compute: core c holds
its data tile (the set's first tiles, `lower.tiles`), and its COMPs read at
least NB_c NO_c ceil(R_c / lanes) columns (its batch x matrix-output
lengths x the columns its reduction elements fill) for each of the n_v
vectors of the padded box; the host writes those columns too.  A core
whose tile is empty along any variable (more cores than a vector-only
set's tiles) has no work and counts nothing.  Their
stream lasts at least (W + GW + K - 1) g + tCCD_AB.  Where a core's tile is
not a plain box of the matrix (a set mapped by a compound index, a matrix
indexed by one: a convolution's halo) the bound is 0 (no pruning), and so
for drafts of a kind this module does not know (a `pack` column > 0).

After the streams, the host merges what the READRES read back and the
result (`sim.cycles._combine`: `host.time_ns` of the read-back and result
bytes and an add per value read back): at least every group with work
(a non-empty first tile) reading its per-pass READRES bursts (broadcast
drafts with their exact counts; single-bank and other drafts: the result
bytes alone), taken a hair (1e-5) under the float64 value, as the
simulator computes it in float32.

The read-back's host time, refresh and every other command are left out,
so the bound stays below the simulated total
(`tests/backends/newton/test_newton_bounds.py` checks it on random shapes and
drafts).  At the best draft it is 0.70-0.82 of the simulated total on
MobileNet-V2's 1 x 1 convolutions on Newton++ (the search then simulates
8-112 of their 2 880-6 612 drafts) and 0.80 on GEMVs 4096 x 4096 and
11008 x 4096 on newton (66 of ~700); `benchmarks/newton_compile_bench.py`.
"""
from __future__ import annotations

import numpy as np

from ...hw.core import Backend
from ...hw.dram_rules import (
    AB_END,
    CCD_AB,
    CCD_L,
    CCD_L_AB,
    CCD_S,
    CCD_S_AB,
    FAW,
    RCD_RD,
    RD_END,
    RP,
    RTP,
    compile_rules,
)
from ...lower.layout import value_shapes
from ...partition.dimsets import dimension_sets
from ...partition.table import DraftTable
from ...partition.verify import matrix_and_vector
from ...trace.ir import PimOp
from .commands import readres_bursts
from .counts import plan_counts
from .lower import DEFAULT_OPTIONS
from .time import draft_plans


def spacings(backend: Backend) -> dict:
    """The latencies the bound adds (cycles): "g" the least spacing of two
    consecutive column commands, "row" the least gap D between the last COMP
    of a row and the first of the next (module docstring), "ab" tCCD_AB,
    "burst" tCCD_L (a READRES's bursts), "data" tCL + tBL (its data)."""
    lat = compile_rules(backend.timing)
    n_bg = max(1, backend.group.banks // backend.group.banks_per_bank_group)
    g = min(float(lat[k]) for k in (CCD_AB, CCD_L, CCD_S, CCD_L_AB, CCD_S_AB))
    row = float(lat[RTP]) + float(lat[RP]) + (n_bg - 1) * float(lat[FAW]) + float(lat[RCD_RD])
    return dict(g=g, row=max(row, g), ab=float(lat[CCD_AB]), burst=float(lat[CCD_L]), data=float(lat[RD_END]),
                ab_end=float(lat[AB_END]), to_comp=min(float(lat[CCD_L]), float(lat[CCD_S])))


def lower_bound(op: PimOp, table: DraftTable, backend: Backend, shapes: dict | None = None,
                options: dict | None = None) -> np.ndarray | None:
    """[n] float64: command-clock cycles no draft of `table` can beat when
    lowered with `options` (`lower_newton`'s: matrix, resident,
    register_reuse / buffer_reuse, data_block_layout) and simulated (see the
    module docstring); 0 where the bound does not apply (single-bank drafts
    of a halo tiling, drafts with a `pack` knob); None for an op
    `lower_newton` does not lower (not a contraction of two operands), and
    for a backend timed by another controller than pimjax's DRAM rules
    (`Group.controller`: PIMFlow's fork charges no precharge before a G_ACT
    and no bus time to a READRES, so these gaps are no bound there)."""
    if not isinstance(op, PimOp) or op.kind != "contraction" or len(op.body_operands) < 2:
        return None
    if backend.group.controller != "dram":
        return None
    opts = {**DEFAULT_OPTIONS, **(options or {})}
    if "buffer_reuse" in opts:                         # Newton's name for register reuse
        opts["register_reuse"] = opts["buffer_reuse"]
    shapes = value_shapes(op, shapes)
    n = len(table)
    if n == 0:
        return np.zeros(0)
    plan, banks, per_core = draft_plans(op, table, shapes, backend, matrix=opts["matrix"])
    mi, _ = matrix_and_vector(op, shapes, opts["matrix"])
    resident = mi in set(opts["resident"])
    exact = bool(opts["register_reuse"]) and bool(opts["data_block_layout"])
    sp = spacings(backend)
    pl = {k: np.asarray(v, np.int64) for k, v in plan.items()}
    kv, ki, cc, lo = pl["kv"], pl["ki"], pl["cc"], pl["lo"]
    gw = kv * cc * (ki if opts["register_reuse"] else 1)           # the first load's GWRITE columns

    # broadcast: every bank holds the padded box; the lowering's own counts per group
    cnt = plan_counts(plan, np.asarray(table.cores, np.int64), np.zeros(n, bool), backend)
    k_bc = cnt["comp_cols"].astype(np.float64)
    w_bc = 0 if resident else banks * pl["n_b"] * pl["n_o"] * pl["n_rc"]
    s_bc = np.maximum(cnt["g_act"] - 1, 0) if exact else np.zeros(n, np.int64)
    rr = readres_bursts(backend, kv * lo, False) if exact else np.ones(n, np.int64)
    # READRES between two COMPs of one row: at most one per row switch, and the last ends the stream
    r_mid = np.maximum(cnt["readres"] - s_bc - 1, 0) if exact else np.zeros(n, np.int64)
    d_rr = sp["ab_end"] + (rr - 1) * sp["burst"] + sp["to_comp"]            # COMP, READRES, COMP
    bc = ((w_bc + gw) * sp["g"] + (k_bc - 1 - s_bc - r_mid) * sp["ab"] + s_bc * sp["row"] + r_mid * d_rr
          + sp["ab_end"] + (rr - 1) * sp["burst"] + sp["data"])

    # single-bank: what group 0's cores must compute
    k_pc, plain = _group0_columns(op, table, shapes, mi, backend.core.lanes)
    w_pc = 0 if resident else k_pc
    pc = (w_pc + gw + pl["n_v"] * k_pc - 1) * sp["g"] + sp["ab"]
    pc = np.where(plain & (k_pc > 0), pc, 0.0)

    # the host's merge of what the READRES read back (broadcast counts exact: every group with work
    # reads its per-pass count at least once) and of the result: after the streams, on the host roofline
    bursts = np.where(per_core | (not exact), 0, cnt["readres_bursts"] // np.maximum(pl["passes"], 1))
    readback = bursts * _groups_with_work(op, table) * backend.core.col_bytes
    out = np.where(per_core, pc, bc) + _merge(op, shapes, readback, backend)
    pack = getattr(table, "pack", None)
    if pack is not None:                    # a packed mapping (PIMFlow's): a stream this bound does not know
        out = np.where(np.asarray(pack) > 0, 0.0, out)
    return np.maximum(out, 0.0)


def _groups_with_work(op: PimOp, table: DraftTable) -> np.ndarray:
    """[n] int64: groups holding a non-empty data tile (every group's first
    tile starts inside its set's range: ceil(length / (cores x tile)) of a
    set's groups, all of them under a compound mapping counted as 1)."""
    ext = op.extents
    n = len(table)
    reps = np.asarray(table.reps, np.int64)
    tile = np.asarray(table.tile, np.int64)
    cores = np.asarray(table.cores, np.int64)
    groups = np.asarray(table.groups, np.int64)
    out = np.ones(n, np.int64)
    for si, s in enumerate(dimension_sets(op)):
        busy = np.ones(n, np.int64)
        for r in range(len(s.candidates)):
            rows = reps[:, si] == r
            if not rows.any() or s.mapping(r).single_var is None:
                continue
            _, length = s.extent(r, ext)
            per = np.maximum(cores[rows, si] * tile[rows, si], 1)
            busy[rows] = np.clip(-(-length // per), 1, groups[rows, si])
        out = out * busy
    return out


def _merge(op: PimOp, shapes: dict, readback: np.ndarray, backend: Backend) -> np.ndarray:
    """[n] cycles: the host merge `sim.cycles` adds after the streams
    (`host.time_ns` of the read-back and result bytes and one add per value
    read back, plus the epilogue), for at least `readback` bytes read back;
    a hair under it (the simulator computes it in float32)."""
    out_elems = int(np.prod(shapes[op.result.value], dtype=np.int64))
    host = backend.system.host
    flops = readback // max(1, backend.core.reg_bytes) + (out_elems if op.epilogue is not None else 0)
    ns = host.time_ns(np.asarray(readback + out_elems * 4, np.float64), np.asarray(flops, np.float64))
    return np.asarray(ns, np.float64) / float(backend.timing.tCK) * (1.0 - 1e-5)


def _group0_columns(op: PimOp, table: DraftTable, shapes: dict, mi: int, lanes: int) -> tuple[np.ndarray,
                                                                                              np.ndarray]:
    """([n] int64, [n] bool): the bank columns group 0's cores hold matrix
    data in, summed over its cores -- sum_c NB_c NO_c ceil(R_c / lanes) with
    core c's loop lengths (its data tile, every set's tiles in group 0 being
    the set's first ones) -- and whether that count holds (every set a
    single variable mapped by itself, the matrix indexed by plain
    variables; elsewhere a core's tile is not a box of matrix data)."""
    ext = op.extents
    n = len(table)
    sets = dimension_sets(op)
    reps = np.asarray(table.reps, np.int64)
    tile = np.asarray(table.tile, np.int64)
    cores = np.asarray(table.cores, np.int64)
    M = op.operands[mi]
    mvars = set(M.vars)
    # every matrix index a loop variable or a constant: a core's box of loop values is a box of matrix data
    plain = np.full(n, all(e.single_var is not None or not e.vars for e in M.index_map))
    C = int(cores.prod(axis=1).max()) if n else 1
    k = np.arange(C)[None, :]                                   # core of group 0
    valid = k < cores.prod(axis=1)[:, None]
    lens = {v: np.broadcast_to(np.int64(e), (n, C)).copy() for v, e in ext.items()}
    stride = np.ones(n, np.int64)
    for si, s in enumerate(sets):
        digit = (k // stride[:, None]) % cores[:, si:si + 1]
        stride = stride * cores[:, si]
        for r in range(len(s.candidates)):
            rows = reps[:, si] == r
            if not rows.any():
                continue
            v = s.mapping(r).single_var
            if v is None or len(s.vars) != 1:
                plain &= ~rows
                continue
            lo, length = s.extent(r, ext)
            a = lo + digit[rows] * tile[rows, si][:, None]
            b = np.minimum(a + tile[rows, si][:, None], lo + length)
            lens[v][rows] = np.maximum(np.minimum(np.maximum(a, b), ext[v]) - np.minimum(a, ext[v]), 0)
    outs = list(op.output_vars)
    red = set(op.reduction_vars)

    def prod(vs):
        p = np.ones((n, C), np.int64)
        for v in vs:
            p = p * lens[v]
        return p
    nb_no = prod([v for v in outs if v in mvars])
    r_c = prod([v for v in ext if v in red])
    # a core whose tile is empty along any variable (a vector-only one included: a GEMM's output
    # columns over more cores than it has) has no iteration point, and the lowering gives it no
    # command: its matrix columns are neither written nor read
    work = prod(list(ext)) > 0
    cols = np.where(valid & work, nb_no * (-(-r_c // lanes)), 0).sum(axis=1)
    return cols.astype(np.int64), plain


__all__ = ["lower_bound", "spacings"]
