"""Draft features for the learned cost model (DCC §IV-D's coupled predictor).

`features_table(op, table, backend, shapes)` turns every draft of a
`DraftTable` into a fixed-length float32 vector, with numpy columns only
(10^5 drafts in well under 0.2 s); `features(op, draft, backend, shapes)`
is the same for one `Draft` (it builds a one-row table, so the numbers are
equal row by row).  `F == len(FEATURE_NAMES)` for every op kind and backend.

`op` is a `PimOp`, or for an AttAcc attention block the tuple of its six
ops (score, max, exp, sum, div, context; `lower.patterns.match_attention`),
whose drafts are drafts of the score op.

Feature groups (all sizes log2(1 + x) unless noted):

* shape   — op kind one-hots, iteration points, output / reduction
            elements, loop vars and dimension sets, input / result sizes.
* slots   — per dimension set, in a canonical op-level order (lane-carrying
            set, reduction sets, then output sets by extent; at most
            `SLOTS`, extra sets multiplied into the last): value-range
            length, groups, cores, per-core tile, padding waste, idle
            tiles, reduction / lane / compound flags.  Plus the per-core
            tiles sorted (draft-level) and padded to `SLOTS`.
* tiling  — groups / cores used (and fractions of the mesh), worst-core
            loop lengths (outputs, reduction, elements, lane variable),
            lane utilisation, footprint per core, capacity share; per
            operand the host-contiguous runs of a core's tile (`_runs`:
            how many separate pieces a transfer of it moves) and the
            shortest run in bytes.
* knobs   — one-hots of reduction, dataflow, ki, ko, granularity,
            irregular, tasklets, wram_tile, buffers; lane flags.
* hw      — lanes, mesh, registers, buffers, bank geometry, timing (tCK
            in ns, the rest in cycles), link / host bandwidths, UPMEM DPU.
* estimates — closed-form bytes and commands (rearrangement with and
            without replication, register / buffer writes, read-back,
            column commands, row activations, DMA), rough times in
            cycles per phase, and the register batches a streamed kernel
            works through (ko registers at a time) with the row switches
            they cost.  A family with a time model of its own replaces
            these with its closed form (`Family.estimates`, reached through
            the registry: UPMEM's DPU kernel and transfers, exact; Newton's
            per-group command counts -- the `est_nt_*` columns,
            `COUNT_COLUMNS` -- and its command stream's phases, exact but
            for refresh; both models are residuals over `est_t_total`).
            Elsewhere the estimates are features, never the answer: the MLP
            learns the map to simulated cycles.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..backends import EstimateInputs, family_of, has_family
from ..family.hooks import ESTIMATE_KEYS
from ..hw.core import Backend
from ..hw.dram_rules import CCD_AB, CCD_S, RCD_RD, RP, compile_rules
from ..partition import DraftTable, dimension_sets
from ..partition.draft import GRANULARITIES
from ..partition.generate import lane_candidates
from ..partition.table import from_drafts
from ..partition.tiles import set_tilings
from ..partition.verify import (
    footprint_elements,
    infer_shapes,
    lengths_product,
    matrix_and_vector,
    per_core_var_lengths,
)
from ..trace.ir import expr_prims

SLOTS = 4                                   # dimension-set slots (mmtv / attn / conv2d have 4-5)
KI_KO = (1, 2, 4, 8)
TASKLETS = (1, 8, 11, 16, 24)
WRAM_TILES = (0, 32, 64, 128, 256, 512, 1024, 2048)
BUFFERS = (1, 2, 4)
KINDS = ("contraction", "reduction", "elementwise", "attention")
# per-group command counts a family's estimate may give (`Family.estimates`' "counts"; the
# Newton family's `counts.py`): named est_nt_* since they were Newton's, and the shipped
# weights' feature names must stay as they are
COUNT_COLUMNS = ("passes", "loads", "gwrite_cols", "g_act", "comp", "comp_cols", "readres", "readres_bursts")
_SLOT_FIELDS = ("len", "groups", "cores", "tile", "waste", "idle", "reduction", "lane", "compound")

_SHAPE = (["kind_" + k for k in KINDS]
          + ["body_mul", "body_add", "body_max", "body_other", "instr_per_point"]
          + ["combiner_max", "points", "outputs", "reduction", "n_loop_vars", "n_sets",
             "in0_size", "in1_size", "in2_size", "result_size", "epilogue", "n_lane_candidates"])
_SLOT = [f"set{i}_{f}" for i in range(SLOTS) for f in _SLOT_FIELDS] + [f"tile_sorted{i}" for i in range(SLOTS)]
_TILING = ["groups_used", "cores_used", "total_cores", "groups_frac", "cores_frac", "cores_total_frac",
           "core_outputs", "core_reduction", "core_elements", "lane_len", "lane_util", "lane_cols",
           "footprint", "footprint_bytes", "capacity_frac", "waste_total", "red_split", "red_split_groups",
           "in0_core", "in1_core", "in2_core", "in0_copies", "in1_copies", "in2_copies",
           "in0_core_copies", "in1_core_copies", "in2_core_copies",
           "in0_runs", "in1_runs", "in2_runs", "out_runs", "min_run_bytes"]
_KNOBS = (["red_complete", "red_host", "red_group", "df_os", "df_is"]
          + [f"ki_{k}" for k in KI_KO] + [f"ko_{k}" for k in KI_KO]
          + ["gran_broadcast", "gran_core", "irr_expand", "irr_keep"]
          + [f"tasklets_{t}" for t in TASKLETS] + [f"wram_{w}" for w in WRAM_TILES]
          + [f"buffers_{b}" for b in BUFFERS]
          + ["lane_none", "lane_is_reduction", "log_ki", "log_ko", "log_tasklets", "log_wram"])
_HW = ["lanes", "n_groups", "cores_per_group", "banks", "banks_per_core", "rows", "cols", "col_bytes",
       "elem_bytes", "n_input_regs", "n_output_regs", "reg_bytes", "broadcast", "per_core_commands",
       "unit_softmax", "unit_accumulator", "unit_global_buffer", "n_global_buffers", "global_buffer_bytes",
       "programmable", "max_tasklets", "scratchpad", "tCK", "tCL", "tWL", "tBL", "tRCDRD", "tRCDWR", "tRP",
       "tRAS", "tCCD_S", "tCCD_L", "tCCD_AB", "tRRD_S", "tFAW", "tREFI", "link_bw", "readback_bw",
       "host_bw", "host_flops", "host_launch", "dpu_clock", "dma_bpc", "dma_latency"]
_EST = ["est_rearr_bytes", "est_rearr_unique_bytes", "est_rearr_bcast_bytes", "est_reg_writes",
        "est_out_reads", "est_readback_bytes", "est_merge_flops", "est_cols", "est_col_cmds",
        "est_rows", "est_dma", "est_in_blocks", "est_out_blocks", "est_blocks", "est_padded_macs",
        "est_block_pad", "est_vec_loads", "est_tasklet_outputs", "est_tasklet_points", "est_tasklet_dma",
        "est_t_rearr", "est_t_compute", "est_t_readback", "est_t_merge",
        "est_t_dpu", "est_t_total", "est_share_rearr", "est_share_compute", "est_share_readback",
        "est_reg_batches", "est_row_switches"] + [f"est_nt_{c}" for c in COUNT_COLUMNS]
FEATURE_NAMES: tuple[str, ...] = tuple(_SHAPE + _SLOT + _TILING + _KNOBS + _HW + _EST)
F = len(FEATURE_NAMES)


def is_time_estimate(name) -> bool:
    """Whether `name` is a closed-form time estimate among the features
    (est_t_*, cycles): what a residual model may correct (`CostModel(base=)`)."""
    return str(name).startswith("est_t_") and name in FEATURE_NAMES


def _l2(x) -> np.ndarray:
    """log2(1 + max(x, 0)) in float32 (the features' precision)."""
    x = np.asarray(x, np.float32)
    return np.log2(np.maximum(x, np.float32(0.0)) + np.float32(1.0))


def _cdiv(a, b):
    return -(-a // b)


def _split_target(op):
    """(op whose drafts these are, attention context op or None)."""
    if isinstance(op, (tuple, list)):
        return op[0], op[-1]
    return op, None


def _all_shapes(op, ctx, shapes):
    out = dict(infer_shapes(op))
    if ctx is not None:
        out.update(infer_shapes(ctx))
    if shapes:
        out.update({k: tuple(v) for k, v in shapes.items()})
    return out


@lru_cache(maxsize=64)
def _hw_vector(backend: Backend) -> np.ndarray:
    core, group, t, sysm = backend.core, backend.group, backend.timing, backend.system
    host = sysm.host
    f = float
    v = [_l2(core.lanes), _l2(backend.n_groups), _l2(group.cores_per_group), _l2(group.banks),
         _l2(core.banks_per_core), _l2(core.pim_rows or core.rows), _l2(core.cols), _l2(core.col_bytes),
         core.elem_bytes, _l2(core.n_input_regs), _l2(core.n_output_regs), _l2(core.reg_bytes),
         f(group.broadcast), f(group.per_core_commands), f("softmax" in group.units),
         f("accumulator" in group.units), f("global_buffer" in group.units), _l2(group.n_global_buffers),
         _l2(group.global_buffer_bytes), f(core.programmable), _l2(core.tasklets), _l2(core.scratchpad_bytes),
         f(t.tCK), _l2(t.tCL), _l2(t.tWL), _l2(t.tBL), _l2(t.tRCDRD), _l2(t.tRCDWR), _l2(t.tRP), _l2(t.tRAS),
         _l2(t.tCCD_S), _l2(t.tCCD_L), _l2(t.tCCD_AB), _l2(t.tRRD_S), _l2(t.tFAW), _l2(t.tREFI),
         _l2(sysm.link_bandwidth), _l2(sysm.readback_bandwidth), _l2(f(host.mem_bandwidth) / 1e9),
         _l2(f(host.peak_flops) / 1e12), _l2(host.launch_overhead_ns), f(t.dpu_clock_ghz),
         f(t.dma_bytes_per_cycle), _l2(t.dma_latency_cycles)]
    return np.array([float(x) for x in v], np.float64)


def _onehot(col: np.ndarray, values) -> list[np.ndarray]:
    return [col == v for v in values]      # bool rows; converted on write


class _OpInfo:
    """Op-level facts shared by every row (computed once per call)."""

    def __init__(self, op, ctx, lane_vars: tuple, shapes: dict, matrix: int | None = None):
        self.op, self.ctx = op, ctx
        self.matrix = matrix        # the operand kept in the banks (None: the larger, matrix_and_vector)
        if matrix is not None and op.kind == "contraction":
            matrix_and_vector(op, shapes, matrix)   # a bad index fails here, not in the silent fallbacks below
        self.sets = dimension_sets(op)
        self.lane_vars = tuple(lane_vars)
        ext = op.extents
        self.ext = ext
        red = set(op.reduction_vars)
        self.red = red
        # candidate value-range lengths per set: [S][R]
        self.cand_len = [np.array([s.extent(r, ext)[1] for r in range(len(s.candidates))], np.int64)
                         for s in self.sets]
        self.set_red = np.array([bool(red & set(s.vars)) for s in self.sets], bool)
        self.set_compound = np.array([len(s.vars) > 1 for s in self.sets], bool)
        # canonical slot order: the set holding the first lane candidate, then
        # reduction sets, then the others, each by decreasing extent
        lane0 = self.lane_vars[0] if self.lane_vars and self.lane_vars[0] is not None else None

        def key(i):
            s = self.sets[i]
            return (0 if (lane0 is not None and lane0 in s.vars) else 1,
                    0 if self.set_red[i] else 1, -int(self.cand_len[i].max()), i)
        self.order = sorted(range(len(self.sets)), key=key)
        # lane var -> set index per lane code
        self.lane_set = np.array([next((i for i, s in enumerate(self.sets) if v is not None and v in s.vars), -1)
                                  for v in self.lane_vars], np.int64)
        self.lane_red = np.array([v is not None and v in red for v in self.lane_vars], bool)
        self.lane_none = np.array([v is None for v in self.lane_vars], bool)
        # operands: inputs by size (largest first), the result
        used = sorted(set(op.body_operands) | set(op.epilogue_operands))
        self.shapes = shapes
        size = lambda acc: int(np.prod(shapes[acc.value], dtype=np.int64))  # noqa: E731
        ins = [op.operands[k] for k in used]
        if ctx is not None:       # attention: V is read by the context product with K's tiling
            ins = ins + [a for a in ctx.operands if a.value not in {o.value for o in op.results}]
        self.inputs = sorted(ins, key=size, reverse=True)[:3]
        self.in_sizes = [size(a) for a in self.inputs]
        self.result_size = size(op.result)
        self.points = int(np.prod(list(ext.values()), dtype=np.int64))
        self.outputs = int(np.prod([ext[v] for v in op.output_vars], dtype=np.int64))
        self.reduction = int(np.prod([ext[v] for v in op.reduction_vars], dtype=np.int64))
        prims = list(expr_prims(op.body)) if op.body is not None else []
        prims += list(expr_prims(op.epilogue)) if op.epilogue is not None else []
        if op.kind == "contraction":
            prims += ["mul", "add"]           # the body product and the combiner
        elif op.combiner is not None:
            prims += [op.combiner]
        self.n_mul = sum(p == "mul" for p in prims)
        self.n_add = sum(p in ("add", "sub", "neg") for p in prims)
        self.n_max = sum(p in ("max", "min") for p in prims)
        self.n_other = len(prims) - self.n_mul - self.n_add - self.n_max
        # rough scalar instructions per iteration point of an in-order core
        # (UPMEM: a 32-bit multiply is a ~32-step runtime call): loads + ops + loop
        self.instr = len(set(op.body_operands)) + 40 * self.n_mul + self.n_add + 2 * self.n_max \
            + 2 * self.n_other + 2
        self.attention = ctx is not None
        self.contraction = op.kind == "contraction"
        if self.contraction:
            try:
                m, v = matrix_and_vector(op, shapes, matrix)
                self.vector_vars = set(op.operands[v].vars)
            except Exception:  # noqa: BLE001 - a contraction with one operand
                self.vector_vars = set()
        else:
            self.vector_vars = set()

    def acc_vars(self, acc) -> set:
        return set(acc.vars)


def _expr_extent(expr, lens: dict, size: int, n: int) -> np.ndarray:
    """Distinct values of `expr` when its variables range over `lens` (the
    contiguous-expand count, capped by the dimension's size)."""
    if not expr.vars:
        return np.ones(n, np.int64)
    if not expr.is_linear:
        return np.full(n, size, np.int64)
    span = np.zeros(n, np.int64)
    for v, c in expr.terms:
        span = span + abs(c) * (lens[v] - 1)
    return np.minimum(span + 1, size)


def _runs(acc, lens: dict, shape, n: int) -> tuple[np.ndarray, np.ndarray]:
    """([n] runs, [n] elements per run) of one core's tile of an operand in
    its row-major host tensor: a run is a maximal host-contiguous piece (the
    trailing dimensions the tile covers whole, times the extent in the first
    one it cuts).  A tile cut in its last dimension moves as many pieces as
    it has rows, and every piece is a transfer call (UPMEM) or a partial
    column (DRAM PIM) of its own."""
    ext = [_expr_extent(e, lens, size, n) for e, size in zip(acc.index_map, shape)]
    run = np.ones(n, np.int64)
    whole = np.ones(n, bool)                   # every dimension after this one is covered whole
    for e, size in zip(reversed(ext), reversed(list(shape))):
        run = np.where(whole, run * e, run)
        whole = whole & (e >= size)
    total = np.ones(n, np.int64)
    for e in ext:
        total = total * e
    return _cdiv(total, np.maximum(run, 1)), run


def features_table(op, table: DraftTable, backend: Backend, shapes: dict | None = None,
                   matrix: int | None = None) -> np.ndarray:
    """[n, F] float32 features of every draft of `table` (see module docstring).

    op: the PimOp the table's drafts tile (or an attention block tuple).
    shapes: value id -> tensor shape (default: implied by the index maps).
    matrix: the contraction operand kept in the banks, as the lowering option
    of that name (None: the larger one, `partition.verify.matrix_and_vector`).
    """
    op_, ctx = _split_target(op)
    shapes = _all_shapes(op_, ctx, shapes)
    info = _OpInfo(op_, ctx, table.lane_vars, shapes, matrix)
    n = len(table)
    if n == 0:
        return np.zeros((0, F), np.float32)
    d = _Rows(np.asarray(table.groups, np.int64), np.asarray(table.cores, np.int64),
              np.asarray(table.reps, np.int64), np.asarray(table.tile, np.int64),
              np.asarray(table.lane, np.int64), n)
    cols, L, used_tiles = _shape_slot_cols(op_, info, d)
    tiling_cols, tl = _tiling_cols(op_, info, d, backend, shapes, L, used_tiles)
    cols += tiling_cols
    cols += _knob_cols(table, info, d)
    cols += list(_hw_vector(backend))          # ---- hardware
    cols += _estimate_cols(op_, info, d, table, backend, shapes, matrix, used_tiles, tl)
    assert len(cols) == F, (len(cols), F)
    # fill feature-major, then view as [n, F]: row writes are contiguous
    out = np.empty((F, n), np.float32)
    for j, c in enumerate(cols):
        out[j] = c
    return out.T


@dataclass(frozen=True, eq=False)
class _Rows:
    """A draft table's per-set columns as int64 arrays: groups / cores /
    reps / tile [n, S], lane [n], and n."""
    G: np.ndarray
    C: np.ndarray
    R: np.ndarray
    T: np.ndarray
    lane: np.ndarray
    n: int


@dataclass(frozen=True, eq=False)
class _Tiling:
    """The tiling section's per-draft quantities ([n] unless noted) the
    estimates read: groups / cores per group in use and their product,
    worst-core loop lengths (`lens`: var -> [n]) and outputs / reduction /
    elements, the lane variable's length, effective lanes and columns,
    column ops, footprint (elements), the reduction split, and per input
    (3, padded) its tile, distinct tiles, distinct tiles within a group."""
    g_used: np.ndarray
    c_used: np.ndarray
    total: np.ndarray
    lens: dict
    outs: np.ndarray
    redl: np.ndarray
    elems: np.ndarray
    lane_len: np.ndarray
    lane_eff: np.ndarray
    lane_cols: np.ndarray
    cols_core: np.ndarray
    foot: np.ndarray
    red_split: np.ndarray
    in_core: list
    in_copies: list
    in_core_copies: list


def _shape_slot_cols(op_, info: _OpInfo, d: _Rows) -> tuple[list, np.ndarray, np.ndarray]:
    """(the shape and slot columns, L [n, S] value-range lengths, used
    tiles [n, S]) of the drafts `d`."""
    G, C, R, T, lane, n = d.G, d.C, d.R, d.T, d.lane, d.n
    S = G.shape[1]
    cols: list[np.ndarray] = []
    ones = 1.0      # op-level columns are scalars, broadcast on write

    # ---- shape ------------------------------------------------------------
    kind = "attention" if info.attention else op_.kind
    cols += [ones * (kind == k) for k in KINDS]
    cols += [info.n_mul, info.n_add, info.n_max, info.n_other, _l2(info.instr)]
    cols += [ones * (op_.combiner == "max"), ones * _l2(info.points), ones * _l2(info.outputs),
             ones * _l2(info.reduction), ones * len(op_.loop_vars), ones * S]
    sizes = info.in_sizes + [0] * (3 - len(info.in_sizes))
    cols += [ones * _l2(s) for s in sizes]
    cols += [ones * _l2(info.result_size), ones * (op_.epilogue is not None), ones * len(info.lane_vars)]

    # ---- slots --------------------------------------------------------------
    L = np.stack([info.cand_len[i][R[:, i]] for i in range(S)], axis=1) if S else np.zeros((n, 0), np.int64)
    tiles = G * C
    used_tiles = _cdiv(L, np.maximum(T, 1))
    lane_set = info.lane_set[lane]
    slot_cols = np.zeros((SLOTS, len(_SLOT_FIELDS), n), np.float32)
    for slot, si in enumerate(info.order):
        j = min(slot, SLOTS - 1)
        merge = slot >= SLOTS
        vals = [_l2(L[:, si]), _l2(G[:, si]), _l2(C[:, si]), _l2(T[:, si]),
                (T[:, si] * tiles[:, si] - L[:, si]) / np.maximum(L[:, si], 1),
                (tiles[:, si] - used_tiles[:, si]) / np.maximum(tiles[:, si], 1),
                ones * info.set_red[si], (lane_set == si).astype(np.float64), ones * info.set_compound[si]]
        for f, v in enumerate(vals):
            # extra sets fold into the last slot: sizes add in log space, flags or
            slot_cols[j, f] = (slot_cols[j, f] + v) if (merge and f < 4) else \
                (np.maximum(slot_cols[j, f], v) if merge else v)
    cols += [slot_cols[j, f] for j in range(SLOTS) for f in range(len(_SLOT_FIELDS))]
    ts = -np.sort(-_l2(T), axis=1) if S else np.zeros((n, 0))
    ts = np.pad(ts, ((0, 0), (0, max(0, SLOTS - S))))[:, :SLOTS]
    cols += [ts[:, j] for j in range(SLOTS)]

    return cols, L, used_tiles


def _tiling_cols(op_, info: _OpInfo, d: _Rows, backend: Backend, shapes: dict, L, used_tiles
                 ) -> tuple[list, _Tiling]:
    """(the tiling columns, the `_Tiling` quantities the estimates read) of
    the drafts `d`."""
    G, C, R, T, lane, n = d.G, d.C, d.R, d.T, d.lane, d.n
    S = G.shape[1]
    core = backend.core
    lanes, eb = core.lanes, core.elem_bytes
    tiles = G * C
    cols: list[np.ndarray] = []
    # ---- tiling --------------------------------------------------------------
    g_used, c_used = np.ones(n, np.int64), np.ones(n, np.int64)
    for si in range(S):
        g_used, c_used = g_used * G[:, si], c_used * C[:, si]
    total = g_used * c_used
    lens = per_core_var_lengths(op_, info.sets, R, T)
    outs = lengths_product(lens, op_.output_vars, n)
    redl = lengths_product(lens, op_.reduction_vars, n)
    elems = outs * redl
    lane_len = np.ones(n, np.int64)
    for code, v in enumerate(info.lane_vars):
        if v is not None:
            lane_len = np.where(lane == code, lens[v], lane_len)
    lane_eff = np.where(info.lane_none[lane], 1, lanes)
    lane_cols = _cdiv(lane_len, lane_eff)
    lane_util = lane_len / (lane_cols * lane_eff)
    cols_core = lane_cols * (elems // np.maximum(lane_len, 1))        # column ops of the worst core
    foot = footprint_elements(op_, lens, shapes)
    cap = core.banks_per_core * core.pim_bank_bytes
    waste = np.ones(n, np.float32)
    for si in range(S):          # a loop over sets: prod(axis=1) over a short axis is slow
        waste = waste * (T[:, si] * tiles[:, si]).astype(np.float32) / np.maximum(L[:, si], 1)
    red_split = np.ones(n, np.int64)
    red_split_g = np.ones(n, np.int64)
    for si in range(S):
        if info.set_red[si]:
            red_split = red_split * np.minimum(tiles[:, si], used_tiles[:, si])
            red_split_g = red_split_g * G[:, si]
    in_core, in_copies, in_core_copies, in_runs = [], [], [], []
    for acc in info.inputs:
        shp = shapes[acc.value]
        fp = np.ones(n, np.int64)
        for e, size in zip(acc.index_map, shp):
            fp = fp * _expr_extent(e, lens, size, n)
        avars = set(acc.vars)
        dg, dc = np.ones(n, np.int64), np.ones(n, np.int64)
        for si, s in enumerate(info.sets):
            if avars & set(s.vars):
                dg, dc = dg * G[:, si], dc * C[:, si]
        in_core.append(fp)
        in_copies.append(dg * dc)               # distinct tiles of this input
        in_core_copies.append(dc)               # distinct tiles within one group
        in_runs.append(_runs(acc, lens, shp, n))
    while len(in_core) < 3:
        in_core.append(np.zeros(n, np.int64))
        in_copies.append(np.zeros(n, np.int64))
        in_core_copies.append(np.zeros(n, np.int64))
        in_runs.append((np.zeros(n, np.int64), np.zeros(n, np.int64)))
    out_runs = _runs(op_.result, lens, shapes[op_.result.value], n)
    run_elems = [r[1] for r in in_runs if r[1].any()] + [out_runs[1]]
    min_run_bytes = np.minimum.reduce(run_elems) * eb
    cols += [_l2(g_used), _l2(c_used), _l2(total), g_used / backend.n_groups,
             c_used / backend.cores_per_group, total / backend.n_cores, _l2(outs), _l2(redl), _l2(elems),
             _l2(lane_len), lane_util, _l2(lane_cols), _l2(foot), _l2(foot * eb), foot * eb / cap,
             np.log2(np.maximum(waste, 1.0)), _l2(red_split), _l2(red_split_g)]
    cols += [_l2(x) for x in in_core] + [_l2(x) for x in in_copies] + [_l2(x) for x in in_core_copies]
    cols += [_l2(r[0]) for r in in_runs] + [_l2(out_runs[0]), _l2(min_run_bytes)]

    return cols, _Tiling(g_used, c_used, total, lens, outs, redl, elems, lane_len, lane_eff, lane_cols,
                         cols_core, foot, red_split, in_core, in_copies, in_core_copies)


def _knob_cols(table: DraftTable, info: _OpInfo, d: _Rows) -> list:
    """The knob columns of the drafts: one-hots and logs of their codes."""
    lane = d.lane
    cols: list[np.ndarray] = []
    # ---- knobs -------------------------------------------------------------------
    red_k, df, ki, ko = (np.asarray(table.column(c)) for c in ("reduction", "dataflow", "ki", "ko"))
    gran, irr, tk, wt, buf = (np.asarray(table.column(c)) for c in
                              ("granularity", "irregular", "tasklets", "wram_tile", "buffers"))
    cols += _onehot(red_k, (0, 1, 2)) + _onehot(df, (0, 1)) + _onehot(ki, KI_KO) + _onehot(ko, KI_KO)
    cols += _onehot(gran, (0, 1)) + _onehot(irr, (0, 1)) + _onehot(tk, TASKLETS) + _onehot(wt, WRAM_TILES)
    cols += _onehot(buf, BUFFERS)
    cols += [info.lane_none[lane].astype(np.float64), info.lane_red[lane].astype(np.float64),
             np.log2(ki), np.log2(ko), np.log2(tk), _l2(wt)]

    return cols


def _estimate_cols(op_, info: _OpInfo, d: _Rows, table: DraftTable, backend: Backend, shapes: dict,
                   matrix: int | None, used_tiles, tl: _Tiling) -> list:
    """The closed-form estimate columns of the drafts: bytes, commands and
    per-phase cycles, the family's own estimates where it has them
    (`Family.estimates`), register batches and row switches, and the
    per-group command counts (`COUNT_COLUMNS`)."""
    G, C, R, T, lane, n = d.G, d.C, d.R, d.T, d.lane, d.n
    core, group, t = backend.core, backend.group, backend.timing
    lanes, eb = core.lanes, core.elem_bytes
    g_used, c_used, total, lens, outs, redl, elems = (tl.g_used, tl.c_used, tl.total, tl.lens, tl.outs, tl.redl,
                                                      tl.elems)
    lane_len, lane_eff, lane_cols, cols_core, foot = tl.lane_len, tl.lane_eff, tl.lane_cols, tl.cols_core, tl.foot
    red_split, in_core, in_copies, in_core_copies = tl.red_split, tl.in_core, tl.in_copies, tl.in_core_copies
    red_k, df, ki, ko = (np.asarray(table.column(c)) for c in ("reduction", "dataflow", "ki", "ko"))
    gran, tk, wt, buf = (np.asarray(table.column(c)) for c in ("granularity", "tasklets", "wram_tile", "buffers"))
    cols: list[np.ndarray] = []
    # ---- closed-form estimates ------------------------------------------------------
    # rearrangement: every core that needs an input tile gets it written (replicated),
    # or once per distinct tile, or once per group when a broadcast reaches its cores
    rearr = sum(in_core[k] * total for k in range(3)) * eb
    rearr_u = sum(in_core[k] * in_copies[k] for k in range(3)) * eb
    bcast = group.broadcast
    rearr_b = sum(in_core[k] * (g_used * (in_core_copies[k] if bcast else c_used)) for k in range(3)) * eb
    if op_.kind == "reduction" and has_family(backend) and family_of(backend).reduction_vector:
        # the ones vector a GEMV-only family reduces with: one lane-padded tile of the reduction
        # per core, written once per group when a broadcast reaches its cores, else per core
        # (per-core granularity: one command per unit)
        ones = _cdiv(redl, lane_eff) * lane_eff * eb
        rearr = rearr + ones * total
        rearr_u = rearr_u + ones
        rearr_b = rearr_b + ones * g_used * np.where(bcast & (gran == GRANULARITIES.index("broadcast")), 1, c_used)
    reg_simd = core.n_input_regs >= 2 and core.n_output_regs >= 2 and lanes > 1 and \
        "global_buffer" not in group.units
    # register / buffer writes (Korean paper: os rewrites inputs per output block, is once)
    vec_len = np.ones(n, np.int64)
    for v in info.vector_vars:
        if v in lens:
            vec_len = vec_len * lens[v]
    n_in = _cdiv(redl, ki * lane_eff)
    n_out = _cdiv(outs, ko)
    if info.contraction:
        reg_writes = np.where(df == 0, n_in * n_out * ki, n_in * ki).astype(np.float64)
        out_reads = np.where(df == 0, n_out, n_out * n_in).astype(np.float64)
        if not reg_simd:
            reg_writes = _cdiv(vec_len, lane_eff).astype(np.float64)
            out_reads = _cdiv(outs, lane_eff).astype(np.float64)
    else:
        reg_writes = np.zeros(n)
        out_reads = _cdiv(elems if op_.kind == "elementwise" else outs, lane_eff).astype(np.float64)
    # register / buffer blocking: input blocks of the reduction (ki registers of
    # `lanes`, or the GEMV / global buffer), output blocks of ko results
    if reg_simd:
        cap_in = ki * lane_eff
    elif "global_buffer" in group.units:
        cap_in = np.maximum(group.global_buffer_bytes // max(1, group.n_global_buffers) // eb, 1) * buf
    elif core.n_input_regs > 0:
        cap_in = np.full(n, core.n_input_regs * lane_eff, np.int64)
    else:
        cap_in = np.maximum(wt // max(1, eb), 1)
    blk_in = _cdiv(redl, cap_in) if info.contraction or op_.kind == "reduction" else np.ones(n, np.int64)
    blk_out = n_out
    blocks = blk_in * blk_out
    padded_macs = blk_in * _cdiv(cap_in, lane_eff) * blk_out * ko
    block_pad = blk_in * cap_in / np.maximum(redl, 1) - 1.0
    vec_loads = _cdiv(vec_len, cap_in) if info.contraction else np.zeros(n, np.int64)
    # UPMEM tasklets: outputs bound to tasklets, else reduction tiles spread over them
    tkn = np.maximum(tk, 1)
    tk_outs = _cdiv(outs, tkn)
    tk_points = np.where(outs >= tkn, tk_outs * redl, _cdiv(elems, tkn))
    tk_dma = _cdiv(foot * eb, np.maximum(wt, 1) * tkn) * (wt > 0)
    lane_partials = info.lane_red[lane] & reg_simd
    rb_elems = outs * total * np.where(lane_partials, lanes, 1)
    rb_elems = np.where(red_k == 2, outs * g_used * np.maximum(c_used // np.maximum(red_split, 1), 1), rb_elems)
    rb_bytes = rb_elems * (4 if core.dtype == "int32" else eb)
    merge_flops = np.where(red_split > 1, rb_elems, 0) + np.where(lane_partials, rb_elems, 0)
    col_cmds = cols_core * np.where(gran == 1, c_used, 1)
    row_bytes = core.cols * core.col_bytes
    rows = _cdiv(foot * eb, row_bytes)
    dma = np.where(wt > 0, _cdiv(foot * eb, np.maximum(wt, 1)), 0)
    tck = float(t.tCK)
    link = float(backend.system.link_bandwidth)
    rlink = float(backend.system.readback_bandwidth)
    par = np.maximum(g_used, 1)
    t_rearr = rearr_b / (link * par) / tck
    t_rb = rb_bytes / (rlink * par) / tck
    lat = compile_rules(t)          # the DRAM rules' latencies (hw.dram_rules)
    # a column command per all-bank slot, a row's ACT -> column and PRE -> ACT, a host column
    t_comp = (col_cmds * float(lat[CCD_AB]) + rows * float(lat[RCD_RD] + lat[RP])
              + (reg_writes + out_reads) * float(lat[CCD_S]))
    host = backend.system.host
    # the DRAM lowerings always read their results back and the host merges them (sim/cycles.py:
    # merged when readback_bytes > 0): it reads the read-back and writes the result (float32),
    # one add per 2-byte element read back (the lowerings' merge_flops), plus the epilogue
    out_elems = float(info.result_size)
    t_merge = np.where(rb_bytes > 0, host.time_ns(rb_bytes + out_elems * 4, rb_bytes / 2
                                                  + (out_elems if op_.epilogue is not None else 0.0)), 0.0) / tck
    # a family with a time model of its own prices the drafts in closed form (`Family.estimates`:
    # UPMEM's DPU kernel and transfers, Newton's command counts and stream phases)
    own = _family_estimates(op_, info, backend, shapes, matrix, G, C, R, T, used_tiles, lens, g_used, c_used,
                            red_k, df, gran, tk, wt, buf, foot, tk_points, dma, out_elems, t_rearr, t_comp)
    t_dpu = own.get("t_dpu", np.zeros(n))
    t_rearr = own.get("t_rearr", t_rearr)
    t_comp = own.get("t_compute", t_comp)
    t_rb = own.get("t_readback", t_rb)
    t_merge = own.get("t_merge", t_merge)
    rb_bytes = own.get("readback_bytes", rb_bytes)
    nt = own.get("counts")
    t_total = t_rearr + t_comp + t_rb + t_merge
    safe = np.maximum(t_total, 1e-9)
    # register batches: a streamed kernel works through a core's columns ko registers at a time
    # (elementwise: 2 x ko columns over the core's banks; reduction: ko accumulators; contraction:
    # the blocks), and each batch opens a row per operand stream -- the sources and the result
    # region sit in different rows of one bank -- so row switches scale with batches x streams.
    # (hbm-pim: VA on one tiling is 1 495 / 1 644 / 1 728 cycles at KO 8 / 4 / 2.)
    bpc = core.banks_per_core
    n_streams = sum((x > 0).astype(np.int64) for x in in_core) + 1
    # reduction accumulators: one per output, or 16 outputs along the lane variable per column
    out_cols = np.where(info.lane_red[lane], outs, outs // np.maximum(lane_len, 1) * lane_cols)
    if op_.kind == "elementwise":          # the lowering packs a core's elements densely
        batches = _cdiv(_cdiv(elems, lane_eff), ko * bpc) * bpc
        switches = batches * n_streams
    elif op_.kind == "reduction":
        batches = _cdiv(out_cols, ko)
        switches = batches * 2
    else:
        batches = blocks
        switches = blocks * 2
    cols += [_l2(rearr), _l2(rearr_u), _l2(rearr_b), _l2(reg_writes), _l2(out_reads), _l2(rb_bytes),
             _l2(merge_flops), _l2(cols_core), _l2(col_cmds), _l2(rows), _l2(dma), _l2(blk_in), _l2(blk_out),
             _l2(blocks), _l2(padded_macs), block_pad, _l2(vec_loads), _l2(tk_outs), _l2(tk_points), _l2(tk_dma),
             _l2(t_rearr), _l2(t_comp),
             _l2(t_rb), _l2(t_merge), _l2(t_dpu), _l2(t_total), t_rearr / safe, t_comp / safe, t_rb / safe,
             _l2(batches), _l2(switches)]
    cols += [_l2(nt[c]) if nt is not None and c in nt else 0.0 for c in COUNT_COLUMNS]
    return cols


def _family_estimates(op_, info, backend, shapes, matrix, G, C, R, T, used_tiles, lens, g_used, c_used,
                      red_k, df, gran, tk, wt, buf, foot, tk_points, dma, out_elems, t_rearr, t_comp) -> dict:
    """The family's own estimates of the table's drafts ({name: [n]},
    `Family.estimates`; {} when it has none): the arguments are
    `features_table`'s columns, gathered into an `EstimateInputs`.  A name
    outside `ESTIMATE_KEYS`, or a count outside `COUNT_COLUMNS`, is an error
    (a feature the model would never see)."""
    fn = family_of(backend).estimates if has_family(backend) else None
    if fn is None:
        return {}
    got = fn(EstimateInputs(
        op=op_, backend=backend, shapes=shapes, matrix=matrix, sets=tuple(info.sets),
        vector_vars=frozenset(info.vector_vars), groups=G, cores=C, reps=R, tile=T, used_tiles=used_tiles,
        lens=lens, groups_used=g_used, cores_used=c_used, reduction=red_k, dataflow=df, granularity=gran,
        tasklets=tk, wram_tile=wt, buffers=buf, footprint=foot, instr=float(info.instr),
        tasklet_points=tk_points, dma=dma, out_elems=out_elems, t_rearr=t_rearr, t_compute=t_comp))
    bad = set(got) - ESTIMATE_KEYS
    bad |= {f"counts[{c!r}]" for c in (got.get("counts") or {}) if c not in COUNT_COLUMNS}
    if bad:
        raise ValueError(f"{backend.family} family's estimates gave {sorted(bad)}: the cost model's features "
                         f"take {sorted(ESTIMATE_KEYS)} and counts among {COUNT_COLUMNS}")
    return got


def features(op, draft, backend: Backend, shapes: dict | None = None, matrix: int | None = None) -> np.ndarray:
    """[F] float32 features of one `Draft` of `op` (equal to its row of
    `features_table`; matrix: as there)."""
    op_, _ = _split_target(op)
    sets = dimension_sets(op_)
    tiles = np.array([[t.tile for t in set_tilings(op_, sets, draft)]], np.int64)
    lane_vars = lane_candidates(op_, backend)
    if draft.lane_var not in lane_vars:
        lane_vars = lane_vars + (draft.lane_var,)
    table = from_drafts([draft], lane_vars, tiles)
    return features_table(op, table, backend, shapes, matrix=matrix)[0]
