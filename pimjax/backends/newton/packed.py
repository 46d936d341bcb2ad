"""PIMFlow's packed Newton mapping (its artifact's command generator), as drafts.

PIMFlow's public artifact (`pim/main.cc`: `PimCodeGen`, `Command::policy_auto`)
maps a CONV / FC layer onto 16 Newton channels differently from pimjax's
DCC-style tilings (`lower.py`), and `../shared/reference/pimflow.csv` holds its
Ramulator fork's cycles for that mapping.  A draft with `Draft.pack = n >= 1`
selects it; `lower_packed` builds its program, which `execute_newton` runs for
real values and `sim.cycles` times, like every other draft.

The op is `y[v, o] = sum_r M[o, r] * V[v, r]`: M (the filter, or whichever
operand the `matrix` option keeps in the banks) has the output variables only
it carries (o: output channels, F of them), V the others (v: pixels, P of
them), r the reduction (i_c elements, C K K for a convolution), flattened with
the lane variable innermost into columns of `lanes` (16) elements.  No batch
variable (one both operands carry): such ops keep the tiled mapping.

* **Chunks and packing.**  A bank row holds W = min(row columns, buffer
  columns) = 32 columns (512 bf16).  A reduction of n_rc <= W columns is one
  chunk of cc = n_rc columns; fl = floor(W / cc) pixels share one buffer load
  (one GWRITE of fl cc columns), pixel s of a load at buffer columns
  [s cc, (s + 1) cc).  A wider reduction is cut into n_rc // W full chunks
  (fl = 1) plus a packed remainder chunk; each chunk kind is a *part*, its
  loads ordered chunk-major (every pixel block of chunk 0, then chunk 1 ...).
* **Units.**  A load's work is R = ceil(F / banks) row blocks (output channel
  o = r banks + bank) times fl pixels: R fl *units*, one READRES each (the
  16 banks' latch, one pixel's 16 output channels).  The filter row block r is
  repeated along the bank row at the columns of each pixel slot it serves,
  so the COMPs of unit (r, s) read bank columns [s cc, (s + 1) cc) against
  the same buffer columns and one activated row serves every unit of a run.
* **Partial sums.**  When the 16 channels have too few units (R fl <= 8), each
  unit's cc columns are split into f = 16 // (R fl) pieces, each its own
  COMPs and READRES (partials the host adds) -- the artifact's `GAct::split`,
  decided with all 16 channels and kept for every n below.
* **Channel groups** (`Draft.pack` = n, n <= global buffers, PIMFlow's
  GWRITE_n): the channels form n groups of m = G / n; group i takes a
  contiguous 1/n of every part's loads, and each of its channels receives
  every load of the group (one GWRITE).  Per load the group's R fl f units
  are dealt in runs of st = min(max(ceil(units / m), 1), fl f) consecutive
  units (row-block major), run k to the group's channel k mod m, each run
  one G_ACT -- so a run may cross row blocks: its row holds, at each unit's
  columns, that unit's row block (distinct columns, since a run never holds
  more units than a row block has).

What the artifact does and this mapping does not (read from its code): it
issues `gact.at(k)`'s COMPs for every run (the first row block's), and its
split drops the COMPs past f floor(cc / f) of a unit (`chunk = n_comp /
factor`, with an offset bug); here every unit computes its own columns, all
of them, so results are exact and the COMP count can exceed the artifact's
by the dropped columns.  It picks n per layer part by the fewest G_ACTs on
channel 0; here n is one draft knob for every part (`reference.py` picks it
the artifact's way for the validation rows).

Records per channel (fields not listed are 0; see `lower.py` for the ISA):
PREA before every load but the first, the load's GWRITE columns (one record
per column, bank groups alternating, reg = buffer column, arg = host-data
row, aux = 1), then per run a G_ACT (its row) and per unit a COMP (bank 0,
row, col = first column of the unit, n columns, reg = the same buffer column,
latch 0, core -1) and a READRES (latch 0 of every bank, n = its bursts,
`commands.readres_bursts`, reg = host slot).  The filter copies are placed by
host writes first (resident when `resident` names M).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import PimCompileError
from ...hw.core import Backend
from ...lower.context import LowerContext
from ...lower.layout import acc_space, lane_order, value_shapes
from ...lower.program import (
    RECORD_FIELDS,
    LazyArray,
    Op,
    Phase,
    Program,
    Readback,
    RecordBuilder,
    TensorLayout,
    stack_streams,
)
from ...lower.stats import lowered_program
from ...partition.draft import DimPart, Draft
from ...partition.verify import matrix_and_vector
from ...trace.ir import PimOp
from .commands import flat_index, gw_banks, newton_stats, readres_bursts, rearrange

PACK_GROUPS = (1, 2, 4)
"""Channel-group counts n of the artifact's `policy_auto` (GWRITE, GWRITE_2, GWRITE_4)."""


@dataclass(frozen=True)
class Part:
    """One chunk kind of the reduction (module docstring): `chunks` chunks of
    `cc` columns each, the first at reduction column `col0`; `fl` pixels per
    load, `blocks` = ceil(P / fl) loads per chunk; a unit's columns cut into
    `pieces` ((first, end) column offsets inside a pixel's cc columns); `n`
    channel groups."""
    col0: int
    cc: int
    chunks: int
    fl: int
    blocks: int
    pieces: tuple
    n: int

    @property
    def loads(self) -> int:
        return self.chunks * self.blocks


@dataclass(frozen=True)
class PackedPlan:
    """The packed mapping of one op on one backend (module docstring)."""
    mi: int
    vi: int
    o_m: tuple           # M-only output vars (output channels), op order
    o_v: tuple           # V-only output vars (pixels), op order
    red: tuple           # reduction vars, lane variable innermost
    F: int               # outputs of M (rows of the filter matrix)
    P: int               # vectors (pixels)
    n_r: int             # reduction elements
    lanes: int
    W: int               # columns per load / per bank row
    R: int               # row blocks ceil(F / banks)
    G: int
    C: int
    parts: tuple         # Part, ...

    def m(self, part: Part) -> int:
        """Channels per group of `part`."""
        return self.G // part.n

    def units(self, part: Part) -> int:
        return self.R * part.fl * len(part.pieces)

    def run_length(self, part: Part) -> int:
        """st: units per G_ACT (the artifact's READRES stride)."""
        per_row = part.fl * len(part.pieces)
        return min(max(-(-self.units(part) // self.m(part)), 1), per_row)

    def runs(self, part: Part) -> int:
        return -(-self.units(part) // self.run_length(part))

    def group_loads(self, part: Part, i: int) -> range:
        """Loads of `part` that channel group i takes (contiguous)."""
        per = -(-part.loads // part.n)
        return range(min(i * per, part.loads), min((i + 1) * per, part.loads))

    def channel_runs(self, part: Part, c: int) -> np.ndarray:
        """Runs of `part` that channel c executes on every load of its group."""
        return np.arange(c % self.m(part), self.runs(part), self.m(part))


def packable(op: PimOp, shapes: dict, matrix: int | None = None) -> str:
    """'' when the packed mapping can run `op` (a contraction sum M * V with
    no variable both operands carry), else why not."""
    if op.kind != "contraction" or op.combiner != "add":
        return "the packed mapping runs contractions (a sum of products)"
    try:
        mi, vi = matrix_and_vector(op, shapes, matrix)
    except PimCompileError as e:
        return str(e)
    mv, vv = set(op.operands[mi].vars), set(op.operands[vi].vars)
    both = [v for v in op.output_vars if v in mv and v in vv]
    if both:
        return f"the packed mapping has no batch dimension ({', '.join(both)} is in both operands)"
    return ""


def packed_plan(op: PimOp, draft: Draft, backend: Backend, shapes: dict, matrix: int | None = None) -> PackedPlan:
    """The geometry of `draft` (pack = n >= 1) on `backend` (module docstring)."""
    why = packable(op, shapes, matrix)
    if why:
        raise PimCompileError(f"newton: {op.name}: {why}")
    G, C = backend.n_groups, backend.cores_per_group
    n_buf = max(1, backend.group.n_global_buffers)
    for n in {int(draft.pack), int(draft.pack_rest or draft.pack)}:
        if n < 1 or n > n_buf or G % n:
            raise PimCompileError(f"newton: packed mapping with {n} channel groups needs n <= {n_buf} global "
                                  f"buffers dividing the {G} channels")
    mi, vi = matrix_and_vector(op, shapes, matrix)
    mv, vv = set(op.operands[mi].vars), set(op.operands[vi].vars)
    ext = op.extents
    o_m = tuple(v for v in op.output_vars if v in mv)
    o_v = tuple(v for v in op.output_vars if v in vv)
    if set(o_m) & set(o_v) or len(o_m) + len(o_v) != len(op.output_vars):
        # PIMFlow packs a CONV / FC: every output index belongs to the filter or to the pixel side;
        # a batched product (attention heads on both operands) has no packed mapping
        raise PimCompileError(f"newton: {op.name}: the packed mapping needs each output index on exactly one "
                              f"operand (a batched product is not a CONV / FC)")
    red = tuple(lane_order([lv.name for lv in op.loop_vars if lv.name in op.reduction_vars], draft.lane_var))
    prod = lambda vs: int(np.prod([ext[v] for v in vs], dtype=np.int64))  # noqa: E731
    F, P, n_r = prod(o_m), prod(o_v), prod(red)
    lanes = backend.core.lanes
    buf_cols = backend.group.global_buffer_bytes // n_buf // backend.core.col_bytes
    W = min(backend.core.cols, buf_cols)
    if W < 1:
        raise PimCompileError("newton: global buffer smaller than one column")
    n_rc = -(-n_r // lanes)
    R = -(-F // C)
    kinds = []
    rest = int(draft.pack_rest or draft.pack)
    if n_rc <= W:
        kinds.append((0, n_rc, 1, int(draft.pack)))
    else:
        full, rem = divmod(n_rc, W)
        kinds.append((0, W, full, int(draft.pack)))
        if rem:
            kinds.append((full * W, rem, 1, rest))
    parts = []
    for col0, cc, chunks, n in kinds:
        fl = W // cc
        # the artifact's split: decided with every channel (its n = 1 pass), kept for every n
        f = G // (R * fl) if R * fl <= G // 2 else 1
        f = max(1, min(f, cc))
        edges = np.linspace(0, cc, f + 1).round().astype(int)
        pieces = tuple((int(a), int(b)) for a, b in zip(edges[:-1], edges[1:]) if b > a)
        parts.append(Part(col0, cc, chunks, fl, -(-P // fl), pieces, n))
    plan = PackedPlan(mi, vi, o_m, o_v, red, F, P, n_r, lanes, W, R, G, C, tuple(parts))
    rows = sum(p.chunks * -(-plan.runs(p) // plan.m(p)) for p in parts)
    if rows > backend.core.rows:
        raise PimCompileError(f"newton: the packed mapping needs {rows} rows per bank, a bank has "
                              f"{backend.core.rows}")
    return plan


def packed_drafts(op: PimOp, backend: Backend, shapes: dict | None = None, matrix: int | None = None,
                  lane_var: str | None = None) -> list[Draft]:
    """The packed drafts of `op`: one per channel-group count n in {1, 2, 4}
    the backend allows, or per pair of counts (full chunks, packed
    remainder) when the reduction has both; none when the op cannot be
    packed.  Their `parts` are all (1, 1): the packed lowering reads none."""
    shapes = value_shapes(op, shapes)
    if packable(op, shapes, matrix):
        return []
    from ...partition.dimsets import dimension_sets
    sets = dimension_sets(op)
    red = [lv.name for lv in op.loop_vars if lv.name in op.reduction_vars]
    lane = lane_var if lane_var is not None else (red[-1] if red else None)
    n_buf = max(1, backend.group.n_global_buffers)
    ns = [n for n in PACK_GROUPS if n <= n_buf and backend.n_groups % n == 0]
    lanes, W = backend.core.lanes, min(backend.core.cols, backend.group.global_buffer_bytes // n_buf
                                       // backend.core.col_bytes)
    ext = op.extents
    n_rc = -(-int(np.prod([ext[v] for v in red], dtype=np.int64)) // lanes)
    two = n_rc > W and n_rc % W > 0                   # full chunks and a packed remainder: n of each
    parts = tuple(DimPart(1, 1, 0) for _ in sets)
    return [Draft(parts, lane_var=lane, pack=n, pack_rest=(r if two else 0))
            for n in ns for r in (ns if two else [0])]


def extra_drafts(op: PimOp, backend: Backend, shapes: dict | None = None, options: dict | None = None) -> list[Draft]:
    """`Family.extra_drafts`: the packed drafts of `op` under the lowering
    `options` (their `matrix` choice)."""
    return packed_drafts(op, backend, shapes, matrix=(options or {}).get("matrix"))


# --------------------------------------------------------------------------
# the channel programs
# --------------------------------------------------------------------------
def _unit_fields(plan: PackedPlan, part: Part, run_ids: np.ndarray):
    """Per unit of the runs `run_ids` (in order): run position, row block r,
    slot s, piece (first, end) column offsets.  Returns arrays."""
    st = plan.run_length(part)
    U = plan.units(part)
    npc = len(part.pieces)
    u = (run_ids[:, None] * st + np.arange(st)[None, :]).reshape(-1)
    run_pos = np.repeat(np.arange(len(run_ids)), st)
    keep = u < U
    u, run_pos = u[keep], run_pos[keep]
    r, rest = np.divmod(u, part.fl * npc)
    s, p = np.divmod(rest, npc)
    pc = np.asarray(part.pieces, np.int64).reshape(-1, 2)
    return run_pos, r, s, pc[p, 0], pc[p, 1]


def _load_template(part: Part, run_pos, runs: int, s, p0, p1, bursts: int):
    """One load's records on a channel, as arrays (op, row = the run's index,
    col, n, reg, arg): PREA, the load's GWRITE columns (reg = arg = buffer
    column), then per run a G_ACT and per unit of it a COMP (its columns,
    reg = the same buffer column) and a READRES (reg = the unit's index).
    run_pos / s / p0 / p1: `_unit_fields` of the channel's runs."""
    ncols = part.fl * part.cc
    k = len(s)
    col = (s * part.cc + p0).astype(np.int64)
    # per run: G_ACT, then (COMP, READRES) per unit; positions after the PREA and the GWRITEs
    unit_base = 1 + ncols + run_pos + 1 + 2 * np.arange(k)       # each run adds its G_ACT before its units
    T = 1 + ncols + runs + 2 * k
    op_ = np.empty(T, np.int32)
    row = np.zeros(T, np.int64)
    cols = np.zeros(T, np.int64)
    n = np.ones(T, np.int64)
    reg = np.zeros(T, np.int64)
    arg = np.zeros(T, np.int64)
    op_[0] = Op.PREA
    gw = np.arange(1, 1 + ncols)
    op_[gw], row[gw], reg[gw], arg[gw] = Op.GWRITE, -1, gw - 1, gw - 1
    unit_start = np.searchsorted(run_pos, np.arange(runs))
    act = 1 + ncols + np.arange(runs) + 2 * unit_start
    op_[act], row[act] = Op.G_ACT, np.arange(runs)
    op_[unit_base], row[unit_base], cols[unit_base] = Op.COMP, run_pos, col
    n[unit_base], reg[unit_base] = p1 - p0, col
    rr = unit_base + 1
    op_[rr], row[rr], n[rr], reg[rr] = Op.READRES, run_pos, bursts, np.arange(k)
    return op_, row, cols, n, reg, arg


def channel_stream(plan: PackedPlan, c: int, bursts: int, gw_banks: list[int]):
    """Channel c's kernel: (records {field: [N] int32}, host rows [H, 3]
    (part, load, buffer column), result slots [Q, 6] (part, load, r, s,
    piece columns) of every READRES, its bank rows [R, 2] (part, chunk), the
    row block of the unit at each column of each row [R, W] (-1: unused),
    counts)."""
    recs: list[dict] = []
    host, slots, rows, reads = [], [], [], []
    counts = dict(GWRITE=0, GWRITE_columns=0, G_ACT=0, COMP=0, COMP_records=0, READRES=0, PREA=0)
    row_base = 0
    q_base = 0
    first = True
    for pi, part in enumerate(plan.parts):
        runs = plan.channel_runs(part, c)
        loads = np.asarray(plan.group_loads(part, c // plan.m(part)), np.int64)
        if len(runs) == 0 or len(loads) == 0:       # no rows of this part in this channel
            continue
        run_pos, r, s, p0, p1 = _unit_fields(plan, part, runs)
        k = len(r)                                   # units per load on this channel
        ncols = part.fl * part.cc
        chunk_of = loads // part.blocks
        kinds, t_row, t_col, t_n, t_reg, t_arg = _load_template(part, run_pos, len(runs), s, p0, p1, bursts)
        T = len(kinds)
        L = len(loads)
        li = np.repeat(np.arange(L), T)
        op_ = np.tile(kinds, L)
        row_t = np.tile(t_row, L)
        is_row = (op_ == Op.G_ACT) | (op_ == Op.COMP) | (op_ == Op.READRES)
        row = np.where(is_row, row_base + np.repeat(chunk_of, T) * len(runs) + row_t, row_t)
        reg = np.tile(t_reg, L)
        arg = np.tile(t_arg, L)
        is_gw = op_ == Op.GWRITE
        is_rr = op_ == Op.READRES
        host_base = sum(len(h) for h in host)
        arg = np.where(is_gw, host_base + li * ncols + arg, arg)
        reg = np.where(is_rr, q_base + li * k + reg, reg)
        gw_idx = np.cumsum(is_gw) - 1
        bank = np.where(is_gw, np.asarray(gw_banks, np.int64)[gw_idx % len(gw_banks)], 0)
        keep = np.ones(len(op_), bool)
        if first:
            keep[0] = False                           # no row is open before the first load
        n_ = np.tile(t_n, L)
        fields = dict(op=op_, bank=bank, row=row, col=np.tile(t_col, L), n=n_,
                      phase=np.where(is_gw, int(Phase.REARRANGE), np.where(is_rr, int(Phase.READBACK),
                                                                            int(Phase.COMPUTE))),
                      reg=reg, reg_step=0, src=np.where(is_gw, 1, -1), aux=np.where(is_gw | is_rr, 1, 0),
                      arg=arg, core=-1, resident=0, sync=0)
        recs.append({f: np.broadcast_to(np.asarray(fields[f]), op_.shape)[keep].astype(np.int32)
                     for f in RECORD_FIELDS})
        first = False
        counts["GWRITE"] += L
        counts["GWRITE_columns"] += L * ncols
        counts["G_ACT"] += L * len(runs)
        counts["COMP"] += L * int((p1 - p0).sum())
        counts["COMP_records"] += L * k
        counts["READRES"] += L * k
        host.append(np.stack([np.full(L * ncols, pi), np.repeat(loads, ncols), np.tile(np.arange(ncols), L)], -1))
        slots.append(np.stack([np.full(L * k, pi), np.repeat(loads, k), np.tile(r, L), np.tile(s, L),
                               np.tile(p0, L), np.tile(p1, L)], -1))
        # the bank rows, chunk-major then run (G_ACT row = row_base + chunk x runs + run position), and
        # the row block r of the unit at each column: the same for every chunk of the part
        nrow = part.chunks * len(runs)
        rows.append(np.stack([np.full(nrow, pi), np.repeat(np.arange(part.chunks), len(runs))], -1))
        width = p1 - p0
        col = np.repeat(s * part.cc + p0, width) + np.arange(int(width.sum())) - np.repeat(np.cumsum(width) - width,
                                                                                          width)
        table = np.full((len(runs), plan.W), -1, np.int64)
        table[np.repeat(run_pos, width), col] = np.repeat(r, width)
        reads.append(np.tile(table, (part.chunks, 1)))
        row_base += nrow
        q_base += L * k
    if recs:
        rec = {f: np.concatenate([x[f] for x in recs]) for f in RECORD_FIELDS}
    else:
        rec = {f: np.zeros(0, np.int32) for f in RECORD_FIELDS}
    counts["PREA"] = int((rec["op"] == Op.PREA).sum())
    rows = np.concatenate(rows) if rows else np.zeros((0, 2), np.int64)
    rblk = np.concatenate(reads) if reads else np.zeros((0, plan.W), np.int64)
    return (rec, np.concatenate(host) if host else np.zeros((0, 3), np.int64),
            np.concatenate(slots) if slots else np.zeros((0, 6), np.int64), rows, rblk, counts)


# --------------------------------------------------------------------------
# index maps: bank contents, buffer contents, results
# --------------------------------------------------------------------------
def _unravel(vars_, ext, index: np.ndarray) -> dict:
    if not vars_:
        return {}
    return dict(zip(vars_, np.unravel_index(np.minimum(index, int(np.prod([ext[v] for v in vars_])) - 1),
                                            [ext[v] for v in vars_])))


def _chunk_base(part: Part, chunk):
    """First reduction column of `chunk` of `part`."""
    return part.col0 + np.asarray(chunk) * part.cc


class _Maps:
    """Value maps of a packed program (what `execute_newton` reads): the matrix
    element behind a bank lane, the vector elements of each GWRITE column, the
    accumulator element of each READRES of each bank."""

    def __init__(self, op: PimOp, plan: PackedPlan, shapes: dict, channels: list):
        self.op, self.plan, self.shapes, self.channels = op, plan, shapes, channels
        self.ext = op.extents

    def _m(self, o, e):
        pl, op = self.plan, self.op
        env = {**_unravel(pl.o_m, self.ext, o), **_unravel(pl.red, self.ext, e)}
        M = op.operands[pl.mi]
        flat, ok = flat_index(M, self.shapes[M.value], env, o)
        return np.where(ok & (o < pl.F) & (e < pl.n_r), flat, -1)

    def m_index(self, g: int, bank: np.ndarray, row: np.ndarray, col: np.ndarray) -> np.ndarray:
        """[N, lanes] flat matrix index of bank lanes (bank, row, col) of channel g
        (-1: padding, -2: nothing placed there)."""
        pl = self.plan
        table, rows = self.channels[g]["rblk"], self.channels[g]["rows"]
        bank, row, col = (np.asarray(x, np.int64) for x in (bank, row, col))
        ok = (row >= 0) & (row < len(rows)) & (col >= 0) & (col < pl.W)
        rr, cc = np.where(ok, row, 0), np.where(ok, col, 0)
        r = np.where(ok, table[rr, cc], -1) if len(rows) else np.full(len(row), -1)
        placed = r >= 0
        part_i = rows[rr, 0] if len(rows) else np.zeros_like(rr)
        chunk = rows[rr, 1] if len(rows) else np.zeros_like(rr)
        out = np.full((len(row), pl.lanes), -2, np.int64)
        for pi, part in enumerate(pl.parts):
            sel = placed & (part_i == pi)
            if not sel.any():
                continue
            rcol = _chunk_base(part, chunk[sel]) + cc[sel] % part.cc
            e = rcol[:, None] * pl.lanes + np.arange(pl.lanes)[None, :]
            o = np.broadcast_to((r[sel] * pl.C + bank[sel])[:, None], e.shape)
            out[sel] = self._m(o, e)
        return out

    def host_rows(self) -> np.ndarray:
        """[G, H, lanes] flat vector index of every GWRITE column (-1: zero)."""
        pl, op = self.plan, self.op
        H = max(len(ch["host"]) for ch in self.channels)
        out = np.full((pl.G, max(H, 1), pl.lanes), -1, np.int64)
        V = op.operands[pl.vi]
        for g, ch in enumerate(self.channels):
            h = ch["host"]
            if not len(h):
                continue
            for pi, part in enumerate(pl.parts):
                sel = h[:, 0] == pi
                if not sel.any():
                    continue
                load, bcol = h[sel, 1], h[sel, 2]
                chunk, block = np.divmod(load, part.blocks)
                pix = block * part.fl + bcol // part.cc
                e = (_chunk_base(part, chunk) + bcol % part.cc)[:, None] * pl.lanes + np.arange(pl.lanes)[None, :]
                v = np.broadcast_to(pix[:, None], e.shape)
                env = {**_unravel(pl.o_v, self.ext, v), **_unravel(pl.red, self.ext, e)}
                flat, ok = flat_index(V, self.shapes[V.value], env, v)
                out[g, np.nonzero(sel)[0]] = np.where(ok & (v < pl.P) & (e < pl.n_r), flat, -1)
        return out

    def result_map(self) -> np.ndarray:
        """[G, Q, C] accumulator-space flat index of READRES slot q's bank c
        (-1: a padding output or pixel)."""
        pl, op = self.plan, self.op
        Q = max(len(ch["slots"]) for ch in self.channels)
        out = np.full((pl.G, max(Q, 1), pl.C), -1, np.int64)
        for g, ch in enumerate(self.channels):
            sl = ch["slots"]
            if not len(sl):
                continue
            part_i, load, r, s = sl[:, 0], sl[:, 1], sl[:, 2], sl[:, 3]
            fl = np.asarray([p.fl for p in pl.parts])[part_i]
            blocks = np.asarray([p.blocks for p in pl.parts])[part_i]
            pix = (load % blocks) * fl + s
            o = r[:, None] * pl.C + np.arange(pl.C)[None, :]
            v = np.broadcast_to(pix[:, None], o.shape)
            env = {**_unravel(pl.o_m, self.ext, o), **_unravel(pl.o_v, self.ext, v)}
            idx = np.zeros(o.shape, np.int64)
            for var in op.output_vars:
                idx = idx * self.ext[var] + env[var]
            out[g, :len(sl)] = np.where((o < pl.F) & (v < pl.P), idx, -1)
        return out


def _placeholder(name: str, operand: int, shape, G: int, C: int, index_map=(), vars_=()) -> TensorLayout:
    """A layout entry that names an operand and its shape (the packed mapping's
    placement is `_Maps`'s, not a tile rule)."""
    z = np.zeros((G, C, 0), np.int64)
    return TensorLayout(name, operand, tuple(vars_), z, z, (), tuple(index_map), tuple(shape),
                        np.zeros((1, 4), np.int32), ())


def lower_packed(op: PimOp, draft: Draft, backend: Backend, shapes: dict | None = None, **opts) -> Program:
    """Lower `op` with PIMFlow's packed mapping (`draft.pack` channel groups;
    module docstring).  opts: `lower.lower_newton`'s (matrix, resident,
    result_dtype; register_reuse / data_block_layout / channel_parallel as
    there)."""
    shapes = value_shapes(op, shapes)
    plan = packed_plan(op, draft, backend, shapes, opts.get("matrix"))
    bursts = int(readres_bursts(backend, 1, False))
    banks_gw = gw_banks(backend)
    resident = plan.mi in set(opts.get("resident", ()))
    per_bg = backend.group.banks_per_bank_group
    cols = backend.core.cols
    streams, channels, counts = [], [], []
    for c in range(plan.G):
        rec, host, slots, rows, rblk, cnt = channel_stream(plan, c, bursts, banks_gw)
        rr, cc = np.nonzero(rblk >= 0)
        flat = rr * cols + cc                       # sorted: the columns the COMPs read, row by row
        pre = RecordBuilder()
        wr = rearrange(pre, {b: flat for b in range(plan.C)}, cols, per_bg, resident) if len(flat) else 0
        place = pre.build()
        streams.append({f: np.concatenate([place[f], rec[f]]) for f in RECORD_FIELDS})
        channels.append(dict(rows=rows, rblk=rblk, host=host, slots=slots))
        counts.append(dict(cnt, WR=wr))
    records = stack_streams(streams)
    maps = _Maps(op, plan, shapes, channels)
    H = max(max(len(ch["host"]) for ch in channels), 1)
    Q = max(max(len(ch["slots"]) for ch in channels), 1)
    host = LazyArray(maps.host_rows, (plan.G, H, plan.lanes), np.int64)
    result_map = LazyArray(maps.result_map, (plan.G, Q, plan.C), np.int64)
    M, V = op.operands[plan.mi], op.operands[plan.vi]
    idx_map, acc_shape = acc_space(op)
    layouts = (_placeholder("M", plan.mi, shapes[M.value], plan.G, plan.C),
               _placeholder("v", plan.vi, shapes[V.value], plan.G, plan.C),
               _placeholder("acc", -1, acc_shape, plan.G, plan.C, idx_map))
    rows_max = max(len(ch["rows"]) for ch in channels)
    meta = dict(kind="newton-packed", M=plan.mi, v=plan.vi, host_data_operands=(plan.vi,), cols=cols,
                lanes=plan.lanes, n_o=plan.F, n_v=plan.P, n_r=plan.n_r, passes=1, host_slots=Q, latches=1,
                buffer_columns=plan.W, buffers=max(1, backend.group.n_global_buffers), m_rows=rows_max,
                parts=[dict(columns=p.cc, chunks=p.chunks, pixels_per_load=p.fl, pieces=len(p.pieces),
                            channel_groups=p.n) for p in plan.parts],
                m_index=maps.m_index, result_map=result_map, per_core=False,
                result_shape=tuple(shapes[op.result.value]), result_dtype=opts.get("result_dtype", "float32"))
    ctx = LowerContext(op, draft, backend, None, shapes, opts)
    # the host receives every READRES's latches, whatever the bus time the backend charges for them
    readback = sum(c["READRES"] for c in counts) * backend.cores_per_group * backend.core.reg_bytes
    return lowered_program(ctx, layouts, records, (host,),
                           Readback(2, combiner="add", lane_partials=False, epilogue_on_host=True),
                           newton_stats(ctx, records, counts, readback), meta, plan.G, plan.C)


def stream_cycles(op: PimOp, draft: Draft, backend: Backend, shapes: dict | None = None,
                  matrix: int | None = None, refresh: bool = True) -> float:
    """Cycles of the slowest channel stream of `draft`'s program with the
    matrix resident, from the kernel records alone: no placement, no value
    maps, each distinct channel stream timed once by the backend's
    controller (`Group.controller`; the DRAM engines' `time_streams` for
    "dram").  Under the "pimflow" controller it is what `sim.cycles` gives for
    `lower_packed`'s program minus the host merge (the artifact's figure;
    tested equal); under "dram" the report adds the read-back's host link
    time to it.  The PIMFlow study times thousands of layer shares with it."""
    from ...backends import family_of
    from ...sim.native import time_streams, timing_table
    from ...sim.scan import timing_vector
    shapes = value_shapes(op, shapes)
    plan = packed_plan(op, draft, backend, shapes, matrix)
    bursts = int(readres_bursts(backend, 1, False))
    gw = gw_banks(backend)
    seen: dict = {}
    for c in range(plan.G):
        key = tuple((c % plan.m(p), len(plan.group_loads(p, c // plan.m(p)))) for p in plan.parts)
        seen.setdefault(key, c)
    table = timing_table(timing_vector(backend.timing))
    banks, per_bg = backend.group.banks, backend.group.banks_per_bank_group
    if backend.group.controller == "pimflow":
        # the fork keeps no bank state: a channel is its per-load templates, each run once per load
        from .fork import time_repeated
        ends = []
        for c in seen.values():
            recs, lo, hi, rep = [], [], [], []
            at = 0
            for p in plan.parts:
                runs = plan.channel_runs(p, c)
                loads = len(plan.group_loads(p, c // plan.m(p)))
                if len(runs) == 0 or loads == 0:
                    continue
                run_pos, _, s_, p0, p1 = _unit_fields(plan, p, runs)
                op_, _, _, n_, _, _ = _load_template(p, run_pos, len(runs), s_, p0, p1, bursts)
                phase = np.where(op_ == Op.GWRITE, int(Phase.REARRANGE),
                                 np.where(op_ == Op.READRES, int(Phase.READBACK), int(Phase.COMPUTE)))
                z = np.zeros_like(n_)
                recs.append(np.stack([op_, z, z, n_, phase, z, z, z]))
                lo.append(at)
                hi.append(at + len(op_))
                rep.append(loads)
                at += len(op_)
            if recs:
                ends.append(time_repeated(np.concatenate(recs, axis=1), lo, hi, rep, table, banks, per_bg, refresh))
        return float(max(ends, default=0.0))
    streams = []
    for c in seen.values():
        rec = channel_stream(plan, c, bursts, gw)[0]
        kern = rec["phase"] != int(Phase.REARRANGE)
        first = int(np.argmax(kern)) if kern.any() else len(kern)
        pre = np.zeros(len(kern), np.int32)
        pre[:first] = 1
        streams.append(np.stack([rec["op"], rec["bank"], rec["row"], rec["n"], rec["phase"],
                                 np.zeros_like(pre), pre, rec["sync"]]).astype(np.int32))
    lengths = np.array([s.shape[1] for s in streams], np.int64)
    stops = np.cumsum(lengths)
    starts = stops - lengths
    timer = time_streams if backend.group.controller == "dram" else \
        family_of(backend).controllers[backend.group.controller]
    res = timer(np.concatenate(streams, axis=1), starts, stops, np.zeros(len(streams), np.int64),
                table, banks, per_bg, refresh)
    return float(np.max(res["end"]))
