"""Lowering to AttAcc command programs (HBM3 + GEMV units + a softmax /
accumulator unit per channel; `../shared/reference/attacc.md`).

Machine model (per group = channel; what `sim/exec_attacc.py` executes and
`sim/cycles.py` times):

* banks: 64 per channel (2 pCH x 2 SID x 4 bank groups x 4 banks), 16384
  rows x 32 columns x 32 B.  A *core* is a 16-lane FP16 GEMV unit: one per
  bank ("bank" level, MACAB), per bank group ("bg", MACSB on bank b of every
  bank group) or per pseudo-channel ("buffer", MACPB; consecutive commands
  rotate over the pCH's 32 banks, bank groups first, as the reference's
  buffer-level trace does).  A program addresses a core's memory through
  *virtual columns* v (see `Geometry.address`).
* GEMV buffer per unit: `core.n_input_regs` entries x 16 lanes, written by
  WRGB (host data) or MVGB (from the softmax buffer).
* accumulator per unit: 16 FP16 slots.  A MAC column either
  - "tree" (adder-tree mode, lanes along a reduction variable): slot
    `u // reg_step` += dot(column, buffer entry `arg + u % reg_step`), or
  - "mac" (lanes along an output variable): all 16 slots += column x the
    buffer scalar `arg * 16 + u`,
  where u = `reg` + the column's offset in its record.  Accumulators are
  double-buffered, so a block's MVSB may overlap the next block's MACs (as
  the reference schedules them); in a record stream the drain is written
  before the next block's MACs.
* MVSB drains accumulators into the channel's softmax buffer through the
  adder tree of one (pCH, SID): each command moves one 16-lane row per pCH
  and *adds* it into a softmax-buffer row (the channel accumulator: the
  `reduction == "group"` merge).  SFM runs a softmax over a masked set of
  softmax-buffer positions; RDACC copies softmax-buffer rows to the host.
* Every WRGB / MVGB / MVSB command carries one 16-lane row per pCH; the
  units of a pCH that need the same row at the same entry share it
  (group broadcast); `granularity == "core"` gives one command per unit and
  bank-level MACs (MACBK) instead of MACAB / MACSB / MACPB.
* BARRIER records order data movement against MACs exactly like the
  reference's PIM_BARRIER; ACTAB / PREA (bank level) are explicit, the
  bank-group and buffer levels open rows implicitly per bank.

Ops: contractions (GEMV, MMTV, batched products, GEMM as GEMV sequences,
im2col convolutions) and add-reductions (a GEMV with a ones vector) via
`lower_attacc`; score -> softmax -> context via `lower_attention`.

Options (on by default): register_reuse (write the GEMV buffer only when
its contents change; double-buffer it when two tiles fit), data_block_layout
(matrix columns in the order the dataflow reads them), resident (operand
indices placed once, their WR_S records get resident=1), channel_parallel.

Arithmetic ("backend" mode): FP16 products, a 4-level FP16 adder tree, FP16
accumulation in the unit and in the softmax buffer; the softmax unit
computes in float32 and rounds its output to FP16.  With unit roundoff
u = 2^-11, an output that sums K products through the tree (log2 16 = 4
levels), at most K sequential accumulator / buffer additions and the
rounding of both inputs has, to first order,

    |y_backend - y| <= (K + 8) * u * sum_k |m_k v_k|,

which `tests/backends/test_attacc.py` checks (with the same bound composed
through the softmax for attention).  "wide" mode runs all of it in float32.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from ...errors import PimCompileError
from ...hw.core import Backend
from ...partition.dimsets import dimension_sets
from ...partition.draft import Draft
from ...partition.verify import matrix_and_vector
from ...trace.ir import Access, Acc, Arg, Const, LoopVar, PimOp, Prim, strip_converts
from ...lower.layout import acc_space, global_index, lane_order, tile_layout, value_shapes
from ...lower.patterns import dim_map, score_seq_dim
from ...lower.program import (RECORD_FIELDS, LazyArray, LazyPositions, Op, Phase, Program, Readback, RecordBuilder,
                              Records, TensorLayout, chunk, stack_streams, streamed)
from ...lower.context import LowerContext
from ...lower.stats import column_stats, lowered_program
from . import native
from ...lower.tiles import CoreTiles, core_tiles

# Hardware facts the AttAcc lowering and executor are built around (the address
# maps of the three levels, the adder-tree clusters, the executor's jitted
# shapes).  `Geometry.of` reads the Backend and refuses one that differs.
LANES = 16                 # attacc.md: 16 FP16 lanes per unit (core.lanes)
COLS = 32                  # attacc.md: 32 columns per row (core.cols)
BANKS_PER_BG = 4           # attacc.md: 4 banks per bank group (group.banks_per_bank_group)
BANK_GROUPS = 16           # attacc.md: 16 bank groups per channel, 2 pCH x 2 SID x 4 (group.bank_groups)
TREE, MACMODE = 0, 1            # MAC aux: adder-tree / mac mode
# assumption: a softmax buffer of 8192 FP16 (512 rows of 16) per channel.  attacc.md implies
# L FP16 per head (the trace generator's maxlen 4096) and the reference pipelines two heads.
SB_ROWS = 512
HOST_ONE = -2                   # host-data index meaning the constant 1.0 (RED's ones vector)

DEFAULT_OPTIONS = dict(register_reuse=True, data_block_layout=True, channel_parallel=True,
                       resident=(), result_dtype="float32", sb_rows=SB_ROWS, gb_tile=None, head_rows=False)


# --------------------------------------------------------------------------
# geometry of the three PIM levels
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class Geometry:
    """Where a core's memory is and how commands address it.

    level: "bank" | "bg" | "buffer"; cores: units per channel;
    banks_per_core: banks a unit owns (1, 4, 32); banks_per_bg: the
    group's banks per bank group (the host's interleaving order)."""
    level: str
    cores: int
    banks_per_core: int
    banks_per_bg: int = BANKS_PER_BG

    @classmethod
    def of(cls, backend: Backend) -> "Geometry":
        level = backend.variant.split("-")[0]
        if level not in ("bank", "bg", "buffer"):
            raise PimCompileError(f"attacc: unknown PIM level {level!r}")
        core, group = backend.core, backend.group
        for where, name, got, want in (("core", "lanes", core.lanes, LANES), ("core", "cols", core.cols, COLS),
                                       ("group", "banks_per_bank_group", group.banks_per_bank_group, BANKS_PER_BG),
                                       ("group", "bank_groups", group.bank_groups, BANK_GROUPS)):
            if got != want:
                raise PimCompileError(f"attacc family: the lowering's address maps need {where}.{name} = {want} "
                                      f"(HBM3 AttAcc), got {got}")
        return cls(level, group.cores_per_group, core.banks_per_core, group.banks_per_bank_group)

    @property
    def seg(self) -> int:
        """Virtual columns per addressing segment (one record at most)."""
        return 1024 if self.level == "buffer" else 32

    @property
    def mac_op(self) -> Op:
        return {"bank": Op.MACAB, "bg": Op.MACSB, "buffer": Op.MACPB}[self.level]

    def core_base(self, c) -> np.ndarray:
        """First physical bank (0..63 in the channel) of core `c`."""
        return np.asarray(c) * self.banks_per_core

    def unit_tables(self, C: int) -> tuple[list, list, list]:
        """(first bank, pCH, adder tree) of units 0..C-1 as Python ints (the
        per-command loops of the Python form index them)."""
        return _unit_tables(self, C)


    @property
    def row_span(self) -> int:
        """Virtual columns per DRAM row of a unit (`address`: bank 32, bg
        4 banks x 32, buffer 32 banks x 32)."""
        return {"bank": 32, "bg": 128, "buffer": 1024}[self.level]

    def row_of(self, v: int) -> int:
        """`address(v)[1]` for one int."""
        return v // self.row_span

    def pch(self, c) -> np.ndarray:
        return self.core_base(c) // 32

    def cluster(self, c) -> np.ndarray:
        """The adder tree a unit drains through: its (pCH, SID) (bank / bg
        level) or its pCH (buffer level)."""
        return self.core_base(c) // (32 if self.level == "buffer" else 16)

    def address(self, v):
        """(bank within the core, row, column) of virtual column(s) v.

        bank: a bank's columns in row order; bg: rows of 32 columns rotate
        over the 4 banks of the bank group (the reference's MACSB layout);
        buffer: consecutive columns rotate over the pCH's 8 bank groups,
        then its 4 banks, then columns (the reference's MACPB layout)."""
        v = np.asarray(v, np.int64)
        if self.level == "bank":
            return np.zeros_like(v), v // 32, v % 32
        if self.level == "bg":
            return (v // 32) % 4, v // 128, v % 32
        return (v % 8) * 4 + (v // 8) % 4, v // 1024, (v // 32) % 32

    def record_col(self, v: int) -> int:
        """The `col` field of a MAC record starting at virtual column v."""
        return int(v % self.seg)

    def timed_bank(self, v: int, core: int | None = None) -> int:
        """The bank a MAC record is timed on: bank 0 for MACAB / MACPB, bank b
        of bank group 0 for MACSB, the core's own bank for MACBK."""
        bic = int(self.address(v)[0])
        if core is None:
            return bic if self.level == "bg" else 0
        return int(self.core_base(core)) + (bic if self.level != "buffer" else 0)

    def phys(self, c, v) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(physical bank, row, column) of virtual column v of core c."""
        bic, row, col = self.address(v)
        return self.core_base(c) + bic, row, col


@lru_cache(maxsize=64)
def _unit_tables(geo: Geometry, C: int) -> tuple[list, list, list]:
    base = [c * geo.banks_per_core for c in range(C)]
    return base, [b // 32 for b in base], [b // (32 if geo.level == "buffer" else 16) for b in base]


# --------------------------------------------------------------------------
# tables shared by the streams: routes and host data rows
# --------------------------------------------------------------------------
class _Tables:
    """Route rows (per unit: source, destination) of WRGB / MVGB / MVSB
    commands and the host data rows WRGB sends."""

    def __init__(self, C: int, G: int):
        self.C, self.G = C, G
        self.src: list[np.ndarray] = []
        self.dst: list[np.ndarray] = []
        self.host: list[np.ndarray] = []
        self._host_ids: dict[bytes, int] = {}

    def route(self, src: np.ndarray, dst: np.ndarray) -> int:
        self.src.append(np.asarray(src, np.int32))
        self.dst.append(np.asarray(dst, np.int32))
        return len(self.src) - 1

    def host_row(self, idx: np.ndarray) -> int:
        """Id of the host data row with flat indices `idx` ([G, 16]; -1 = 0,
        -2 = 1.0), shared when equal."""
        idx = np.ascontiguousarray(idx, np.int64)
        key = idx.tobytes()
        hid = self._host_ids.get(key)
        if hid is None:
            hid = len(self.host)
            self.host.append(idx)
            self._host_ids[key] = hid
        return hid

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        C, G = self.C, self.G
        src = np.stack(self.src) if self.src else np.zeros((0, C), np.int32)
        dst = np.stack(self.dst) if self.dst else np.zeros((0, C), np.int32)
        host = np.stack(self.host, 1) if self.host else np.zeros((G, 0, LANES), np.int64)
        return src, dst, host


def _bg_interleave(cmds: list, bank_of, banks_per_bg: int) -> list:
    """Order data-movement commands round-robin over bank groups, the order
    the reference's FCFS-ready scheduler issues them in (tCCD_S apart
    instead of tCCD_L within a bank group)."""
    by_bg: dict[int, list] = {}
    for c in cmds:
        by_bg.setdefault(int(bank_of(c)) // banks_per_bg, []).append(c)
    out = []
    queues = list(by_bg.values())
    i = 0
    while any(queues):
        q = queues[i % len(queues)]
        if q:
            out.append(q.pop(0))
        i += 1
    return out


# --------------------------------------------------------------------------
# the record stream
# --------------------------------------------------------------------------
class _Emitter:
    """Appends records to the (shared) stream; tracks the open row for the
    explicit ACTAB / PREA of bank-level broadcast MACs."""

    def __init__(self, geo: Geometry, granularity: str, tables: _Tables, cores: int):
        self.geo, self.gran, self.t, self.C = geo, granularity, tables, cores
        self.b = RecordBuilder()
        self.open_row: int | None = None

    def barrier(self, phase=Phase.COMPUTE):
        self.b.add(Op.BARRIER, n=1, phase=phase)

    def macs(self, v0: int, count: int, row_base: int, mode: int, reg_step: int, arg: int):
        """MAC columns v0 .. v0+count-1 of every unit, split at segment
        boundaries (u counts from v0)."""
        geo = self.geo
        v, end = int(v0), int(v0) + int(count)
        mac, bg, COMPUTE = int(geo.mac_op), geo.level == "bg", int(Phase.COMPUTE)
        mode, reg_step, arg = int(mode), int(reg_step), int(arg)
        while v < end:
            n = min(end, (v // geo.seg + 1) * geo.seg) - v
            row = geo.row_of(v) + row_base
            col = v % geo.seg
            if self.gran == "core":
                for c in range(self.C):
                    self.b.add(Op.MACBK, bank=geo.timed_bank(v, c), row=row, col=col, n=n, aux=mode,
                               reg=v - v0, reg_step=reg_step, arg=arg, core=c)
            else:
                if geo.level == "bank" and self.open_row != row:
                    if self.open_row is not None:
                        self.b.add(Op.PREA, n=1)
                    self.b.add(Op.ACTAB, row=row, n=1)
                    self.open_row = row
                # add(mac_op, bank, row, col, n, aux=mode, reg=v - v0, reg_step, arg), as ints
                self.b.add_row((mac, (v // 32) % 4 if bg else 0, row, col, n, COMPUTE, v - v0, reg_step, -1, mode,
                                arg, -1, 0, 0))
            v += n

    def side(self, op: Op, bank: int, arg: int = 0, phase=Phase.COMPUTE, aux: int = 0, reg: int = 0,
             src: int = -1, n: int = 1):
        self.b.add_row((int(op), int(bank), 0, 0, int(n), int(phase), int(reg), 0, int(src), int(aux), int(arg), -1,
                        0, 0))

    def load(self, op: Op, need: dict[int, list[tuple[int, int]]], phase, src: int = -1) -> int:
        """Buffer loads (WRGB / MVGB): `need[c]` = [(source row, entry)].
        Returns the number of commands."""
        cmds = _load_commands(self.geo, need, self.gran, self.C)
        for bank, s, d in cmds:
            self.side(op, bank, arg=self.t.route(s, d), phase=phase, src=src)
        return len(cmds)

    def drain(self, rows: np.ndarray, sb: "_SoftmaxBuffer") -> int:
        """MVSB of every unit with rows[c] >= 0 into softmax-buffer row rows[c].
        The first MVSB into a freshly allocated row overwrites it (route
        source 1), later ones add (the channel accumulator)."""
        cmds = _drain_commands(self.geo, rows, self.gran, self.C)
        fresh = sb.fresh
        for bank, d, written, all_fresh in cmds:
            new = [r for r in written if r in fresh]
            if not new:                  # every target already written: the accumulator adds
                src = _constant_route(-1, len(d))
            elif len(new) == len(written):
                src = all_fresh
            else:
                src = np.where(np.isin(d, new), 1, -1)
            self.side(Op.MVSB, bank, arg=self.t.route(src, d))
            fresh.difference_update(written)
        return len(cmds)


def _load_commands(geo: Geometry, need: dict, gran: str, C: int, compiled: bool = True) -> list:
    """(address bank, src[C], dst[C]) per command: one row per pCH per
    command, shared by the pCH's units that need it at the same entry
    (`compiled`: by `native.load_commands` when every unit asks for the same
    entries; the loop below is its definition)."""
    cmds = []
    if gran == "core":
        for c in range(C):
            for s, d in need.get(c, ()):
                src, dst = np.full(C, -1), np.zeros(C, np.int64)
                src[c], dst[c] = s, d
                cmds.append((int(geo.core_base(c)), src, dst))
        return _bg_interleave(cmds, lambda x: x[0], geo.banks_per_bg)
    base, pch, _ = geo.unit_tables(C)
    fast = _load_arrays(need, C) if compiled else None
    if fast is not None:                 # every unit asks for the same distinct entries: compiled
        banks, src, dst = native.load_commands(*fast, np.asarray(pch, np.int64), np.asarray(base, np.int64),
                                               geo.banks_per_bg)
        return list(zip(banks.tolist(), src, dst))
    per_pch: dict[int, dict[tuple[int, int], list[int]]] = {}
    for c in range(C):
        for s, d in need.get(c, ()):
            per_pch.setdefault(pch[c], {}).setdefault((s, d), []).append(c)
    lists = [list(v.items()) for _, v in sorted(per_pch.items())]
    for m in range(max((len(x) for x in lists), default=0)):
        src, dst = np.full(C, -1), np.zeros(C, np.int64)
        bank = None
        for items in lists:
            if m < len(items):
                (s, d), units = items[m]
                src[units], dst[units] = s, d
                if bank is None:
                    bank = base[min(units)]
        cmds.append((bank, src, dst))
    return _bg_interleave(cmds, lambda x: x[0], geo.banks_per_bg)


def _load_arrays(need: dict, C: int):
    """(ids [C, k], entries [k]) int64 when every unit 0..C-1 asks for the
    same k distinct entries (in the same order), else None."""
    first = need.get(0)
    if not first:
        return None
    dst = [d for _, d in first]
    if len(set(dst)) != len(dst):
        return None
    ids = np.empty((C, len(dst)), np.int64)
    for c in range(C):
        pairs = need.get(c)
        if pairs is None or len(pairs) != len(dst) or [d for _, d in pairs] != dst:
            return None
        ids[c] = [s_ for s_, _ in pairs]
    return ids, np.asarray(dst, np.int64)


def _drain_commands(geo: Geometry, rows: np.ndarray, gran: str, C: int) -> list:
    """(address bank, dst[C], rows written, route source if all are fresh
    [C]) per MVSB: per pCH, one (SID, row) adder-tree output per command
    (read-only arrays: drains with the same rows recur
    head after head, the answers are cached)."""
    rows = np.asarray(rows)
    key = (geo, gran, C, rows.dtype.str, rows.tobytes())
    hit = _DRAINS.get(key)
    if hit is None:
        if len(_DRAINS) > 4096:
            _DRAINS.clear()
        hit = []
        for bank, d in _drain_commands_now(geo, rows, gran, C):
            d.setflags(write=False)
            # the rows it writes and its route source when all are fresh (per-unit lists cost O(C))
            src = np.where(d >= 0, 1, -1).astype(np.int32)
            src.setflags(write=False)
            hit.append((bank, d, sorted(set(d[d >= 0].tolist())), src))
        _DRAINS[key] = hit
    return hit


_DRAINS: dict = {}


@lru_cache(maxsize=256)
def _constant_route(value: int, C: int) -> np.ndarray:
    out = np.full(C, value, np.int32)
    out.setflags(write=False)
    return out


def _drain_commands_now(geo: Geometry, rows: np.ndarray, gran: str, C: int) -> list:
    if gran == "core":
        out = []
        for c in np.nonzero(rows >= 0)[0]:
            d = np.full(C, -1)
            d[c] = rows[c]
            out.append((int(geo.core_base(c)), d))
        return _bg_interleave(out, lambda x: x[0], geo.banks_per_bg)
    base, pch, cluster = geo.unit_tables(C)
    per_pch: dict[int, dict[tuple[int, int], list[int]]] = {}
    for c, r in enumerate(rows.tolist()):
        if r >= 0:
            per_pch.setdefault(pch[c], {}).setdefault((cluster[c], r), []).append(c)
    lists = [list(v.items()) for _, v in sorted(per_pch.items())]
    out = []
    for m in range(max((len(x) for x in lists), default=0)):
        d = np.full(C, -1)
        bank = None
        for items in lists:
            if m < len(items):
                (_, r), units = items[m]
                d[units] = r
                if bank is None:
                    bank = base[min(units)]
        out.append((bank, d))
    return _bg_interleave(out, lambda x: x[0], geo.banks_per_bg)


# --------------------------------------------------------------------------
# GEMV plans: blocks of matrix columns, buffer tiles, layouts
# --------------------------------------------------------------------------
@dataclass
class _Gemv:
    """One GEMV sequence per core (all cores share offsets).

    mode: TREE / MACMODE; n_b: batch instances (M and v differ), n_v:
    GEMM columns (v differs, M re-read), n_o / n_r: outputs / reduction
    points per instance (flattened, the lane variable innermost);
    E: buffer entries per instance, KI: entries per tile, t_in / t_out:
    input tiles / output blocks of 16; start[b, j, i] / size[j, i]: virtual
    columns of each block."""
    mode: int
    n_b: int
    n_v: int
    n_o: int
    n_r: int
    E: int
    KI: int
    t_in: int
    t_out: int
    start: np.ndarray
    size: np.ndarray
    order_is: bool
    n_store: int | None = None   # distinct matrices stored (< n_b when instances share one: GQA)
    stride: int | None = None    # virtual columns from one instance to the next (None: size.sum())

    @property
    def v_total(self) -> int:
        step = int(self.size.sum()) if self.stride is None else self.stride
        return step * (self.n_b if self.n_store is None else self.n_store)

    def shared(self, which: np.ndarray) -> "_Gemv":
        """The plan with instance b reading stored matrix `which[b]` (the
        query heads of one KV head read its K / V once stored)."""
        n_store = int(which.max()) + 1 if len(which) else 0
        return _Gemv(self.mode, len(which), self.n_v, self.n_o, self.n_r, self.E, self.KI, self.t_in,
                     self.t_out, self.start[which], self.size, self.order_is, n_store, self.stride)

    def ke(self, i: int) -> int:
        """Entries of input tile i."""
        return min(self.KI, self.E - self.KI * i)

    def outs(self, j: int) -> int:
        return min(LANES, self.n_o - LANES * j)

    def reg_step(self, i: int) -> int:
        return self.ke(i) if self.mode == TREE else 0


def _plan(mode: int, n_b: int, n_v: int, n_o: int, n_r: int, cap: int, order_is: bool,
          gb_tile: int | None = None, align: int = 1) -> _Gemv:
    """align: instances start at multiples of this many virtual columns
    (a unit's DRAM row, `Geometry.row_span`, for the reference's one
    partition per head; 1: packed back to back)."""
    E = max(1, -(-n_r // LANES))
    KI = min(E, cap if gb_tile is None else min(cap, gb_tile))
    t_in = -(-E // KI)
    t_out = max(1, -(-n_o // LANES))
    j, i = np.arange(t_out)[:, None], np.arange(t_in)[None, :]
    ke = np.minimum(KI, E - KI * i)
    if mode == TREE:
        size = np.minimum(LANES, n_o - LANES * j) * ke                 # [t_out, t_in]
    else:
        size = np.broadcast_to(np.minimum(LANES * KI, n_r - LANES * KI * i), (t_out, t_in))
    size = np.ascontiguousarray(size, np.int64)
    # blocks in the dataflow's order (input tiles outer for "is"), instances one after another
    seq = size.T if order_is else size
    ends = np.cumsum(seq.reshape(-1)).reshape(seq.shape)
    first = ends - seq
    one = first.T if order_is else first
    stride = -(-int(size.sum()) // align) * align
    start = (one[None] + np.arange(n_b)[:, None, None] * stride).astype(np.int64)
    return _Gemv(mode, n_b, n_v, n_o, n_r, E, KI, t_in, t_out, start, size, order_is,
                 stride=None if align == 1 else stride)


def _matrix_positions(gp: _Gemv, geo: Geometry, row_base: int) -> np.ndarray:
    """[n_b * n_o * n_r, 4] (bank in core, row, column, lane) of the matrix
    operand's local elements, C order over (b, o, r)."""
    b, o, r = np.meshgrid(np.arange(gp.n_b), np.arange(gp.n_o), np.arange(gp.n_r), indexing="ij")
    j = o // LANES
    if gp.mode == TREE:
        e = r // LANES
        i = e // gp.KI
        ke = np.minimum(gp.KI, gp.E - gp.KI * i)
        v = gp.start[b, j, i] + (o % LANES) * ke + e % gp.KI
        lane = r % LANES
    else:
        i = r // (LANES * gp.KI)
        v = gp.start[b, j, i] + r % (LANES * gp.KI)
        lane = o % LANES
    bic, row, col = geo.address(v)
    return np.stack([bic, row + row_base, col, lane], -1).reshape(-1, 4).astype(np.int32)


@lru_cache(maxsize=16)
def _placement_runs(geo: Geometry, v_total: int, cores: int) -> tuple[np.ndarray, ...]:
    """(bank, row, columns, core) [N] of `_placement`'s records in order
    (rows before the region's row_base) and their opcode.  Drafts of one op share them (the
    virtual columns per unit repeat): cached, read-only."""
    # one run per (bank in core, row): every address map is one-to-one and puts a bank row's
    # columns 0..n-1 at its n virtual columns (checked: each column is below its row's count), so
    # the runs are the (bic, row) pairs in order, each from column 0
    bic, row, col = geo.address(np.arange(v_total))
    rows = int(row.max()) + 1
    key = bic * rows + row
    count = np.bincount(key)
    if not np.all(col < count[key]):
        raise AssertionError("attacc placement: an address map leaves gaps in a bank row")
    live = np.nonzero(count)[0]
    r_bic, r_row, lens = live // rows, live % rows, count[live]
    n_per_bic = np.bincount(r_bic)
    banks = np.arange(64)
    rank = np.full(64, -1, np.int64)
    rank[np.lexsort((banks // geo.banks_per_bg, banks % geo.banks_per_bg))] = np.arange(64)
    core, run = native.placement_order(r_bic, n_per_bic, rank, geo.core_base(np.arange(cores)).astype(np.int64),
                                       cores)
    out = (geo.core_base(core) + r_bic[run], r_row[run], lens[run], core)
    for x in out:
        x.setflags(write=False)
    return out + (streamed(Op.WR, np.unique(out[0]), geo.banks_per_bg),)


def _placement(em: _Emitter, geo: Geometry, layout_id: int, v_total: int, row_base: int,
               cores: int, resident: bool) -> None:
    """Host writes (runs, one per bank row) of the virtual columns
    0 .. v_total-1 of every core, interleaved over bank groups (streamed
    WR_S when the banks span two bank groups or more: `program.streamed`)."""
    if v_total <= 0 or cores <= 0:
        return
    bank, r_row, lens, core, code = _placement_runs(geo, v_total, cores)
    em.b.extend(chunk(code, len(core), bank=bank, row=r_row + row_base, col=0, n=lens,
                      phase=int(Phase.REARRANGE), src=layout_id, core=core, resident=int(resident)))


# --------------------------------------------------------------------------
# softmax-buffer rows and read-back
# --------------------------------------------------------------------------
class _SoftmaxBuffer:
    """Row allocation in the channel's softmax buffer and the read-back map.

    rows are tagged with (class representative core, output positions);
    `flush` reads completed rows back (RDACC) and frees them."""

    def __init__(self, capacity: int, G: int):
        self.cap = capacity
        self.free = list(range(capacity))
        self.used_max = 0
        self.G = G
        self.pending: list[tuple[int, np.ndarray]] = []     # (row, flat[G, 16])
        self.fresh: set[int] = set()                         # allocated, not yet written
        self.readback: list[np.ndarray] = []                 # per host row: flat[G, 16]

    def alloc(self, n: int) -> list[int]:
        if n > len(self.free):
            raise PimCompileError(f"attacc: {n} softmax-buffer rows needed, {len(self.free)} free "
                                  f"of {self.cap}")
        rows, self.free = self.free[:n], self.free[n:]
        self.fresh |= set(rows)
        self.used_max = max(self.used_max, max(rows) + 1 if rows else 0)
        return rows

    def release(self, rows) -> None:
        self.free = sorted(set(self.free) | set(rows))

    def result_row(self, row: int, flat: np.ndarray) -> None:
        """Mark `row` as holding results (flat output indices [G, 16], -1 none)."""
        self.pending.append((row, flat))

    def flush(self, em: _Emitter, layout_id: int, final: bool = False) -> None:
        """Read the completed rows back (RDACC, after a barrier).  The final
        read-back is a host synchronisation point: the host reads after the
        kernel has ended."""
        if not self.pending:
            return
        em.barrier(Phase.READBACK)
        for k, (row, flat) in enumerate(self.pending):
            h = len(self.readback)
            self.readback.append(flat)
            em.b.add(Op.RDACC, bank=(h % 16) * 4, reg=row, arg=h, phase=Phase.READBACK, src=layout_id,
                     sync=int(final and k == 0))
        self.release([r for r, _ in self.pending])
        self.pending = []

    def readback_map(self) -> np.ndarray:
        if not self.readback:
            return np.zeros((self.G, 0, LANES), np.int64)
        return np.stack(self.readback, 1)


def _classes(tiles: CoreTiles, vars_: list[str]) -> np.ndarray:
    """[C] class id per core: cores whose ranges of `vars_` agree in every
    group (they compute the same outputs / need the same data)."""
    idx = [tiles.var_index(v) for v in vars_]
    if not idx:
        return np.zeros(tiles.cores, np.int64)
    key = np.concatenate([tiles.start[:, :, idx], tiles.length[:, :, idx]], -1)   # [G, C, 2V]
    key = np.transpose(key, (1, 0, 2)).reshape(tiles.cores, -1)
    return _unique_rows(key)[1]


def _out_flat(tiles: CoreTiles, name: str, vars_: tuple, index_map, shape) -> tuple[np.ndarray, np.ndarray]:
    """[G, C, prod(box)] flat result indices / validity over `vars_` (C order)."""
    lay = tile_layout(tiles, name, -1, vars_, index_map, shape, np.zeros((1, 4), np.int32))
    return global_index(lay)


# --------------------------------------------------------------------------
# lowering entry points
# --------------------------------------------------------------------------
def lower_attacc(op: PimOp, draft: Draft, backend: Backend, shapes: dict | None = None,
                 **options) -> Program:
    """Lower one contraction or add-reduction to an AttAcc program (see the
    module docstring); raises PimCompileError for anything else.

    op: a PimOp (contraction `sum M * v` or add-reduction); draft: its tiling
    (`draft.lane_var` a reduction variable: adder tree; a matrix-only output
    variable: mac mode); shapes: value id -> shape (default: from the index
    maps); options: DEFAULT_OPTIONS (register_reuse, data_block_layout,
    channel_parallel, resident=(operand indices), sb_rows, gb_tile = buffer
    entries per input tile).  Returns a Program with one stream shared by
    all groups (S = 1); times are in command-clock cycles of the backend.

    Example:
        >>> g = pimjax.make_graph(lambda W, x: W @ x, W, x)           # doctest: +SKIP
        >>> be = get_backend("attacc")                                 # doctest: +SKIP
        >>> p = lower_attacc(g.ops[0], baseline(g.ops[0], be), be)     # doctest: +SKIP
        >>> execute(p, W, x), cycles(p, be).kernel_cycles              # doctest: +SKIP
    """
    opts = {**DEFAULT_OPTIONS, **options}
    if backend.family != "attacc":
        raise PimCompileError(f"lower_attacc needs an attacc backend, got {backend.name}")
    if op.kind == "contraction":
        return _gemv_program(op, draft, backend, value_shapes(op, shapes), opts)
    if op.kind == "reduction":
        if op.combiner != "add":
            raise PimCompileError(f"attacc has no {op.combiner} reduction (GEMV units only add)")
        return _gemv_program(op, draft, backend, value_shapes(op, shapes), opts)
    raise PimCompileError(f"attacc cannot run a {op.kind} op ({op.name}): its units only do GEMVs")


def _plain_arg(e) -> int | None:
    """Operand index of `e` if it is an operand read (through converts)."""
    e = strip_converts(e)
    return e.index if isinstance(e, Arg) else None


def _split_vars(op: PimOp, mvars: set, vvars: set):
    """(batch, GEMM-column, matrix-row, reduction) variables of a contraction
    `sum M * v`: batch in both operands, columns only in v, rows only in M."""
    outs = list(op.output_vars)
    red = [lv.name for lv in op.loop_vars if lv.name in op.reduction_vars]
    o_b = [v for v in outs if v in mvars and v in vvars]
    o_v = [v for v in outs if v in vvars and v not in mvars]
    o_m = [v for v in outs if v not in vvars]
    return o_b, o_v, o_m, red


@dataclass(frozen=True)
class _GemvRoles:
    """Which operand is the bank-resident matrix (mi) and which the host-streamed vector
    (vi; None for a reduction, run as a GEMV with a ones vector), the op's variables by
    role (o_b: batch outputs of both, o_v: vector-only outputs, o_m: matrix-only outputs,
    red: reduction variables, the lane variable last in o_m or red) and the unit mode
    (TREE: the lane reduces through the adder tree; MACMODE: the lane is an output)."""
    mi: int
    vi: int | None
    o_b: list
    o_v: list
    o_m: list
    red: list
    mode: int


def _gemv_roles(op: PimOp, draft: Draft, shapes: dict) -> _GemvRoles:
    """The GEMV reading of `op` (a two-operand product or a plain reduction), or
    PimCompileError naming why the units cannot run it."""
    if op.kind == "contraction":
        body = op.body
        if not (isinstance(body, Prim) and body.name == "mul" and len(body.args) == 2
                and _plain_arg(body.args[0]) is not None and _plain_arg(body.args[1]) is not None
                and _plain_arg(body.args[0]) != _plain_arg(body.args[1])):
            raise PimCompileError(f"attacc GEMV units need a product of two operands ({op.name})")
        mi, vi = matrix_and_vector(op, shapes)
        M, V = op.operands[mi], op.operands[vi]
        o_b, o_v, o_m, red = _split_vars(op, set(M.vars), set(V.vars))
    else:
        # RED as a GEMV with a ones vector (how DCC runs reductions on AttAcc)
        if _plain_arg(op.body) is None:
            raise PimCompileError(f"attacc reductions need a plain operand body ({op.name})")
        mi, vi = _plain_arg(op.body), None
        o_b, o_v, o_m = [], [], list(op.output_vars)
        red = [lv.name for lv in op.loop_vars if lv.name in op.reduction_vars]
    lane = draft.lane_var
    if lane in red:
        mode = TREE
        red = list(lane_order(red, lane))
    elif lane in o_m:
        mode = MACMODE
        o_m = list(lane_order(o_m, lane))
    else:
        raise PimCompileError(f"attacc: lane variable {lane!r} must be a reduction variable (adder tree) "
                              f"or a matrix-only output variable (mac mode) of {op.name}")
    return _GemvRoles(mi, vi, o_b, o_v, o_m, red, mode)


def _gemv_layouts(op: PimOp, tiles: CoreTiles, shapes: dict, ro: _GemvRoles, gp: _Gemv, geo: Geometry,
                  box: dict, n: tuple):
    """The program's layouts and host index tables, n = (n_b, n_v, n_o, n_r) per-unit extents:
    the matrix layout (positions computed on first use), the result layout (descriptive:
    a softmax-buffer slot per local output), flat result indices per unit class
    `flat_o[G, classes, n_b, n_v, n_o]` with `ocls[C]`, and the vector's host indices
    padded to whole GB entries `vidx[G, classes, n_b, n_v, E, 16]` (-1: padding,
    HOST_ONE: the ones vector of a reduction) with `vcls[C]`."""
    G, C = tiles.groups, tiles.cores
    n_b, n_v, n_o, n_r = n
    o_b, o_v, o_m, red = ro.o_b, ro.o_v, ro.o_m, ro.red
    M = op.operands[ro.mi]
    m_vars = tuple(o_b + o_m + red)
    # where each matrix element lives: only `execute` reads it (computed on first use)
    m_pos = LazyPositions(lambda: _matrix_positions(gp, geo, 0), n_b * n_o * n_r)
    m_layout = tile_layout(tiles, "M", ro.mi, m_vars, M.index_map, shapes[M.value], m_pos,
                           tuple(box[v] for v in m_vars))
    r_vars = tuple(o_b + o_v + o_m)
    rbox = tuple(box[v] for v in r_vars)
    rop = np.arange(int(np.prod(rbox, dtype=np.int64))) % max(1, n_o)
    r_pos = np.stack([np.zeros_like(rop), np.zeros_like(rop), rop // LANES, rop % LANES], -1)
    res_layout = tile_layout(tiles, "acc", -1, r_vars, *acc_space(op), r_pos, rbox)
    res_layout = TensorLayout(**{**res_layout.__dict__, "space": "softmax"})
    # flat result / vector indices per unit class (units with equal ranges hold equal indices)
    flat_o, ocls = _class_index(res_layout)
    flat_o = flat_o.reshape(G, -1, n_b, n_v, n_o)                      # [G, classes, n_b, n_v, n_o]

    # host data: the vector (or ones) per core, instance, entry
    if ro.vi is not None:
        V = op.operands[ro.vi]
        v_vars = tuple(o_b + o_v + red)
        vlay = tile_layout(tiles, "v", ro.vi, v_vars, V.index_map, shapes[V.value],
                           np.zeros((1, 4), np.int32), tuple(box[v] for v in v_vars))
        vidx, vcls = _class_index(vlay)
        vidx = vidx.reshape(G, -1, n_b, n_v, n_r)
    else:
        vidx, vcls = np.full((G, 1, n_b, n_v, n_r), HOST_ONE, np.int64), np.zeros(C, np.int64)
    pad = gp.E * LANES - n_r
    vidx = np.pad(vidx, ((0, 0),) * 4 + ((0, pad),), constant_values=-1).reshape(G, -1, n_b, n_v, gp.E, LANES)
    return m_layout, res_layout, r_vars, flat_o, ocls, vidx, vcls


def _gemv_program(op: PimOp, draft: Draft, backend: Backend, shapes: dict, opts: dict,
                  use_native: bool = True) -> Program:
    """The AttAcc program of a GEMV (or reduction) `op` under `draft`: the matrix placed
    in the banks, the vector streamed into the GBs, MACs, drains to the softmax buffer and
    the host's read-back.  The compiled (native) emitter is tried first for bank /
    bank-group granularity; the Python emitter (`_gemv_records`) is the reference."""
    geo = Geometry.of(backend)
    tiles = core_tiles(op, draft)
    G, C = tiles.groups, tiles.cores
    ro = _gemv_roles(op, draft, shapes)
    mode = ro.mode
    box = dict(zip(tiles.vars, tiles.box(tiles.vars)))
    prod = lambda vs: int(np.prod([box[v] for v in vs], dtype=np.int64))  # noqa: E731
    n = n_b, n_v, n_o, n_r = prod(ro.o_b), prod(ro.o_v), prod(ro.o_m), prod(ro.red)
    reuse = opts["register_reuse"]
    traverse_is = draft.dataflow == "is"
    # the data-block layout stores the matrix in the order the dataflow reads
    # it; without it the columns stay in the output-major (host) order
    order_is = traverse_is and bool(opts["data_block_layout"])
    cap = backend.core.n_input_regs
    gp = _plan(mode, n_b, n_v, n_o, n_r, cap, order_is, opts["gb_tile"])
    rows_needed = -(-gp.v_total // (geo.seg if geo.level != "bg" else 128))
    if rows_needed > backend.core.rows:
        raise PimCompileError(f"attacc: {rows_needed} rows of matrix data per bank exceed {backend.core.rows}")
    m_layout, res_layout, r_vars, flat_o, ocls, vidx, vcls = _gemv_layouts(op, tiles, shapes, ro, gp, geo, box, n)

    tables = _Tables(C, G)
    em = _Emitter(geo, draft.granularity, tables, C)
    resident = set(opts["resident"])
    _placement(em, geo, 0, gp.v_total, 0, C, ro.mi in resident)
    em.barrier()                                                         # the kernel starts after placement

    cls = np.arange(C) if draft.reduction == "host" else _classes(tiles, list(r_vars))
    # meta = head, what the emitter produced, tail (in this key order, as both emitters always wrote it)
    head = dict(kind=op.kind, geometry=geo, mode=mode)
    tail = dict(gb_entries=cap, host_data_operands=(ro.vi,), sfm=(), gemv=gp,
                operand_shapes={k: tuple(shapes[a.value]) for k, a in enumerate(op.operands)},
                result_shape=tuple(shapes[op.result.value]), result_dtype=opts["result_dtype"])
    readback = Readback(1, combiner="add", lane_partials=False, epilogue_on_host=True)
    if use_native and draft.granularity != "core":
        done = _gemv_native(em, geo, gp, vidx, vcls, flat_o, ocls, cls, opts, traverse_is, reuse, mode, cap, C, G)
        if done is not None:
            host, meta_n = done
            meta = dict(head, **meta_n, **tail)
            return _program(op, draft, backend, tiles, shapes, [m_layout, res_layout], em, host, meta, opts, readback)
        # the compiled form declined: the Python form decides, from a fresh placement
        em = _Emitter(geo, draft.granularity, tables, C)
        _placement(em, geo, 0, gp.v_total, 0, C, ro.mi in resident)
        em.barrier()
    # per unit (the compiled form reads the per-class tables; copying them out per unit
    # cost ~5 ms a draft there)
    sb = _gemv_records(em, tables, gp, vidx[:, vcls], flat_o[:, ocls], cls, opts, traverse_is, reuse, mode,
                       cap, C, G)
    route_src, route_dst, host = tables.arrays()
    meta = dict(head, route_src=route_src, route_dst=route_dst, readback_map=sb.readback_map(),
                sb_rows=max(1, sb.used_max), **tail)
    return _program(op, draft, backend, tiles, shapes, [m_layout, res_layout], em, host, meta, opts, readback)


def _gemv_steps(gp: _Gemv, n_b: int, n_v: int, traverse_is: bool, chunk: int) -> list:
    """The GEMV's schedule, steps (load key, b, v, j, i, drain, complete): output-stationary
    keeps a block's sums in the accumulator over the input tiles; input-stationary drains
    every (block, tile) and the softmax buffer adds the partials.  Output blocks go in
    chunks of `chunk` whose softmax-buffer rows fit."""
    steps = []
    for b in range(n_b):
        for v in range(n_v):
            for j0 in range(0, gp.t_out, chunk):
                js = range(j0, min(gp.t_out, j0 + chunk))
                if traverse_is:
                    steps += [((b, v, i), b, v, j, i, True, i == gp.t_in - 1)
                              for i in range(gp.t_in) for j in js]
                else:
                    steps += [((b, v, i), b, v, j, i, i == gp.t_in - 1, i == gp.t_in - 1)
                              for j in js for i in range(gp.t_in)]
    return steps


def _gemv_records(em: _Emitter, tables: _Tables, gp: _Gemv, vidx: np.ndarray, flat_o: np.ndarray,
                  cls: np.ndarray, opts: dict, traverse_is: bool, reuse: bool, mode: int, cap: int,
                  C: int, G: int) -> "_SoftmaxBuffer":
    """The Python emitter's kernel records after placement: per step a GB load (WRGB, into
    the other half of the GB ahead of time when it fits: prefetch), the MACs, and the
    drain of finished blocks into softmax-buffer rows (issued after the next step's
    barrier so it overlaps).  vidx [G, C, n_b, n_v, E, 16] and flat_o [G, C, n_b, n_v, n_o]
    are per unit; units of one class `cls[c]` share a softmax-buffer row.  Returns the
    flushed softmax buffer (its read-back map and peak rows)."""
    cls_ids = sorted(int(k) for k in np.unique(cls))
    rep = {k: int(np.nonzero(cls == k)[0][0]) for k in cls_ids}
    n_cls = len(cls_ids)
    sb = _SoftmaxBuffer(opts["sb_rows"], G)
    if n_cls > sb.cap:
        raise PimCompileError(f"attacc: {n_cls} partial-result rows per block exceed the softmax buffer")
    host_ids: dict = {}

    def host_id(c, b, v, e):
        key = (c, b, v, e)
        if key not in host_ids:
            host_ids[key] = tables.host_row(vidx[:, c, b, v, e])
        return host_ids[key]

    steps = _gemv_steps(gp, flat_o.shape[2], flat_o.shape[3], traverse_is, max(1, sb.cap // n_cls))
    prefetch = reuse and 2 * gp.KI <= cap
    sbrows: dict = {}

    def new_load(k):
        return k == 0 or not reuse or steps[k][0] != steps[k - 1][0]

    def emit_load(k, base):
        (b, v, i) = steps[k][0]
        need = {c: [(host_id(c, b, v, gp.KI * i + e), base + e) for e in range(gp.ke(i))] for c in range(C)}
        em.load(Op.WRGB, need, Phase.REARRANGE, src=0)

    def drain(b, v, j, complete):
        key = (b, v, j)
        if key not in sbrows:
            if len(sb.free) < n_cls:
                sb.flush(em, 1)
            sbrows[key] = sb.alloc(n_cls)
        rows = dict(zip(cls_ids, sbrows[key]))
        em.drain(np.array([rows[int(cls[c])] for c in range(C)]), sb)
        if complete:
            for k in cls_ids:
                flat = np.full((G, LANES), -1, np.int64)
                outs = gp.outs(j)
                flat[:, :outs] = flat_o[:, rep[k], b, v, LANES * j:LANES * j + outs]
                sb.result_row(rows[k], flat)

    pending = None
    region, base = 0, 0
    prefetched: dict[int, int] = {}
    for k, (key, b, v, j, i, drains, complete) in enumerate(steps):
        if k == 0:
            emit_load(0, 0)
            em.barrier()
        else:
            em.barrier()
            if pending:
                pending()
                pending = None
            if new_load(k):
                if k in prefetched:
                    base = prefetched[k]
                else:
                    base = 0
                    emit_load(k, base)
                    em.barrier()
        em.macs(int(gp.start[b, j, i]), int(gp.size[j, i]), 0, mode, gp.reg_step(i), base)
        if prefetch and k + 1 < len(steps) and new_load(k + 1):
            region ^= 1
            prefetched[k + 1] = region * gp.KI
            emit_load(k + 1, prefetched[k + 1])
        if drains:
            pending = (lambda b=b, v=v, j=j, complete=complete: drain(b, v, j, complete))
    if pending:
        em.barrier()
        pending()
    sb.flush(em, 1, final=True)
    return sb


def _unique_rows(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`np.unique(key, axis=0, return_index=True, return_inverse=True)[1:]`
    for a 2-D integer `key` [C, k]: (first row of each distinct row, in
    lexicographic order [D]; class of each row [C]), by one stable lexsort
    (np.unique's structured-view sort took ~3 ms per call here)."""
    C = key.shape[0]
    if C == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = np.lexsort(key.T[::-1]) if key.shape[1] else np.arange(C)
    srt = key[order]
    new = np.ones(C, bool)
    new[1:] = (srt[1:] != srt[:-1]).any(axis=1)
    cls = np.empty(C, np.int64)
    cls[order] = np.cumsum(new) - 1
    return order[new], cls


def _class_index(layout: TensorLayout) -> tuple[np.ndarray, np.ndarray]:
    """`global_index` (-1 where invalid) of one unit per class of units whose
    ranges and bands agree in every group -- they hold the same indices:
    ([G, classes, prod(box)] int64, class of each unit [C])."""
    G, C = layout.start.shape[:2]
    parts = [layout.start, layout.length] + [x[..., None] for _, lo, hi in layout.bands for x in (lo, hi)]
    key = np.transpose(np.concatenate(parts, -1), (1, 0, 2)).reshape(C, -1)
    first, cls = _unique_rows(key)
    sub = replace(layout, start=layout.start[:, first], length=layout.length[:, first],
                  bands=tuple((e, lo[:, first], hi[:, first]) for e, lo, hi in layout.bands))
    flat, valid = global_index(sub)
    return np.where(valid, flat, -1), cls.reshape(-1)


def _gemv_native(em: _Emitter, geo: Geometry, gp: _Gemv, vidx: np.ndarray, vcls: np.ndarray, flat_o: np.ndarray,
                 ocls: np.ndarray, cls: np.ndarray, opts: dict, traverse_is: bool, reuse: bool, mode: int, cap: int,
                 C: int, G: int):
    """The kernel records of `_gemv_program` (broadcast granularity) by the
    compiled `native.gemv_stream`, appended to `em`: (host rows [G, n, 16],
    the meta entries route_src / route_dst / readback_map / sb_rows), or None
    when the compiled form declines (a host-row hash collision, a softmax
    buffer overflow): the Python form then runs and decides."""
    ids, rep, ok = native.host_ids(np.ascontiguousarray(vidx), vcls.astype(np.int64), gp.KI)
    if not ok:
        return None
    n_cls = int(cls.max()) + 1
    chunk_ = max(1, int(opts["sb_rows"]) // n_cls)
    base = geo.core_base(np.arange(C)).astype(np.int64)
    pch = base // 32
    cluster = base // (32 if geo.level == "buffer" else 16)
    level = {"bank": native.BANK, "bg": native.BG, "buffer": native.BUFFER}[geo.level]
    prm = np.array([gp.n_b, gp.n_v, gp.t_out, gp.t_in, gp.KI, gp.E, gp.n_o, chunk_, traverse_is, reuse,
                    reuse and 2 * gp.KI <= cap, n_cls, opts["sb_rows"], mode, level, geo.seg,
                    geo.banks_per_bg, C, geo.mac_op, Op.BARRIER, Op.WRGB, Op.MVSB, Op.RDACC, Op.ACTAB, Op.PREA,
                    Phase.REARRANGE, Phase.COMPUTE, Phase.READBACK], np.int64)
    start = np.ascontiguousarray(gp.start, np.int64)
    size = np.ascontiguousarray(gp.size, np.int64)
    cls = np.ascontiguousarray(cls, np.int64)
    args = (prm, start, size, ids, pch, base, cluster, cls)
    n, r, h, used = native.gemv_stream(*args, np.zeros((14, 0), np.int32), np.zeros((0, C), np.int32),
                                       np.zeros((0, C), np.int32), np.zeros((0, 4), np.int64))
    if n < 0:
        return None
    out = np.empty((14, n), np.int32)
    rb = np.empty((h, 4), np.int64)
    none = np.zeros((0, C), np.int32)
    native.gemv_stream(*args, out, none, none, rb)
    em.b.extend(dict(zip(RECORD_FIELDS, out)))

    def routes():
        # the route rows (which unit takes which row where): only `execute` reads them
        rsrc, rdst = np.empty((r, C), np.int32), np.empty((r, C), np.int32)
        native.gemv_stream(*args, np.zeros((14, 0), np.int32), rsrc, rdst, np.zeros((0, 4), np.int64))
        return rsrc, rdst

    both: list = []
    rsrc = LazyArray(lambda: (both.append(routes()) if not both else None) or both[0][0], (r, C), np.int32)
    rdst = LazyArray(lambda: (both.append(routes()) if not both else None) or both[0][1], (r, C), np.int32)
    host = vidx[:, rep[:, 0], rep[:, 1], rep[:, 2], rep[:, 3], :] if len(rep) else np.zeros((G, 0, LANES), np.int64)
    # read-back rows: the class representative's outputs of block j (-1 past the last output)
    padded = np.pad(flat_o, ((0, 0),) * 4 + ((0, gp.t_out * LANES - gp.n_o),), constant_values=-1)
    padded = padded.reshape(flat_o.shape[:4] + (gp.t_out, LANES))
    _, first = np.unique(cls, return_index=True)                        # a result class's first unit
    readback = padded[:, ocls[first[rb[:, 0]]], rb[:, 1], rb[:, 2], rb[:, 3], :] if h else \
        np.zeros((G, 0, LANES), np.int64)
    return host, dict(route_src=rsrc, route_dst=rdst, readback_map=readback, sb_rows=max(1, int(used)))


def _program(op, draft, backend, tiles, shapes, layouts, em: _Emitter, host, meta, opts, readback) -> Program:
    ctx = LowerContext(op, draft, backend, tiles, shapes, opts)
    records = stack_streams([em.b.build()])
    stats = column_stats(ctx, records, registers=(Op.WRGB,), reads=(Op.RDACC,), result_shape=meta["result_shape"])
    return lowered_program(ctx, layouts, records, (host,), readback, stats, meta)


# --------------------------------------------------------------------------
# attention: score -> softmax -> context as one program (the AttAcc pipeline)
# --------------------------------------------------------------------------
# float conversions around the softmax are the unit's own datapath: FP16
# scores in, a float32 softmax, FP16 probabilities out (`s.astype(float32)`
# and `p.astype(float16)` around jax's softmax fuse; a bf16 block's converts
# are its dtype, which AttAcc computes in FP16 as it does every bf16 op); an
# integer conversion (rounding the scores) is not something the unit does
_UNIT_FLOATS = ("float16", "bfloat16", "float32", "float64")


def _unit_convert(e) -> bool:
    return (isinstance(e, Prim) and e.name == "convert_element_type" and len(e.args) == 1
            and str(np.dtype(e.param("new_dtype", "float32"))) in _UNIT_FLOATS)


def _strip_unit_converts(e):
    while _unit_convert(e):
        e = e.args[0]
    return e


def _epilogue_scale(op: PimOp) -> float:
    """The constant the score epilogue multiplies the accumulator by (1 / c
    for `acc / c`; float conversions around either are the unit's own).
    Anything else -- a mask (`where`), an additive bias, a scale read from
    an array -- is no work for AttAcc's softmax unit, which only scales by
    a constant before its softmax: PimCompileError saying so."""
    ep = op.epilogue
    if ep is None:
        return 1.0
    e = _strip_unit_converts(ep)
    if isinstance(e, Acc):
        return 1.0
    if isinstance(e, Prim) and len(e.args) == 2:
        a, b = (_strip_unit_converts(x) for x in e.args)
        if e.name == "div" and isinstance(a, Acc) and isinstance(b, Const):
            return 1.0 / float(b.value)
        if e.name == "mul" and isinstance(a, Acc) and isinstance(b, Const):
            return float(b.value)
        if e.name == "mul" and isinstance(b, Acc) and isinstance(a, Const):
            return float(a.value)
    raise PimCompileError(f"attacc attention: the score epilogue ({_epilogue_words(ep)}) is not a scale "
                          "by a constant, the only thing AttAcc's softmax unit applies before its softmax")


def _epilogue_words(e) -> str:
    """What a score epilogue does, in words (for the reason a block is not fused)."""
    names, arrays = set(), 0
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, Prim):
            names.add({"select_n": "a mask (where)", "add": "an addition", "sub": "a subtraction"}
                      .get(x.name, x.name))
            stack.extend(x.args)
        elif not isinstance(x, (Acc, Const)):
            arrays += 1
    names.discard("convert_element_type")
    reads = f", reading {arrays} array operand{'s' * (arrays != 1)}" if arrays else ""
    return ", ".join(sorted(names)) + reads


def _two_operands(op: PimOp) -> tuple[int, int]:
    body = op.body
    if not (isinstance(body, Prim) and body.name == "mul" and len(body.args) == 2):
        raise PimCompileError(f"attacc attention: {op.name} is not a product of two operands")
    a, b = _plain_arg(body.args[0]), _plain_arg(body.args[1])
    if a is None or b is None or a == b:
        raise PimCompileError(f"attacc attention: {op.name} is not a product of two operands")
    return a, b


@dataclass
class _Attention:
    """The pieces of an attention block in the score op's variables."""
    fused: PimOp
    S: PimOp
    X: PimOp
    qi: int
    ki: int
    vi: int
    bh: list           # score batch (head) vars, loop order
    n: str             # score sequence var
    dk: str            # score reduction var
    c2s: dict          # context var -> score var
    scale: float


def _attention_parts(block_ops) -> _Attention:
    if len(block_ops) not in (6, 7):
        raise PimCompileError("attacc attention: a block is (score, max, exp, [convert,] sum, div, context)")
    S, D, X = block_ops[0], block_ops[-2], block_ops[-1]
    for o in block_ops[1:-1]:
        stack = [o.body, o.epilogue]
        while stack:
            e = stack.pop()
            if isinstance(e, Prim):
                if e.name == "convert_element_type" and not _unit_convert(e):
                    raise PimCompileError(f"attacc attention: {o.name} converts to {e.param('new_dtype')}; "
                                          "the softmax unit computes in float32 and writes FP16")
                stack.extend(e.args)
    if X.epilogue is not None:
        raise PimCompileError("attacc attention: an epilogue after the context product stays on the host")
    a, b = _two_operands(S)
    res_vars = [e.single_var for e in S.result.index_map]
    if None in res_vars:
        raise PimCompileError("attacc attention: the score must be indexed by plain variables")
    ds = score_seq_dim(block_ops)
    if ds is None:
        raise PimCompileError("attacc attention: the softmax must reduce one dim of the score")
    n = res_vars[ds]
    ki, qi = (a, b) if n in S.operands[a].vars else (b, a)
    if n in S.operands[qi].vars or len(S.reduction_vars) != 1:
        raise PimCompileError("attacc attention: the score must be q . K over one head dimension")
    dk = S.reduction_vars[0]
    bh = [v for v in (lv.name for lv in S.loop_vars) if v in res_vars and v != n]
    c1, c2 = _two_operands(X)
    pi, vi = (c1, c2) if X.operands[c1].value == D.result.value else (c2, c1)
    if X.operands[pi].value != D.result.value:
        raise PimCompileError("attacc attention: the context must read the softmax output")
    p_vars = [e.single_var for e in X.operands[pi].index_map]
    if None in p_vars or len(p_vars) != len(res_vars):
        raise PimCompileError("attacc attention: the context must read p with plain variables")
    # p's dims -> the score's, through the exp and div reads (jax folds transposes into them)
    e_from_s, p_from_e = dim_map(block_ops[2], S.result.value), dim_map(D, block_ops[2].result.value)
    if e_from_s is None or p_from_e is None or None in p_from_e or None in (e_from_s[j] for j in p_from_e):
        raise PimCompileError("attacc attention: the softmax must read the score element for element")
    c2s = {p_vars[i]: res_vars[e_from_s[j]] for i, j in enumerate(p_from_e)}
    dv = [v for v in X.operands[vi].vars if v not in p_vars]
    if len(dv) != 1 or X.extents[dv[0]] != S.extents[dk]:
        raise PimCompileError("attacc attention: V needs one value dimension of K's head size")
    c2s[dv[0]] = dk
    if set(c2s) != set(X.extents):
        raise PimCompileError("attacc attention: unexpected context loop variables")
    # the fused op: context loop nest + the score's head dimension
    s2c = {s: c for c, s in c2s.items()}
    dk_name = dk if dk not in X.extents else dk + "_k"
    s2c_full = {**s2c, dk: dk_name}
    ren = lambda acc: Access(acc.value, tuple(e.rename(s2c_full) for e in acc.index_map))  # noqa: E731
    fused = PimOp("attention", "contraction", tuple(X.loop_vars) + (LoopVar(dk_name, S.extents[dk]),),
                  (ren(S.operands[qi]), ren(S.operands[ki]), X.operands[vi]), X.results,
                  (X.reduction_vars[0], dk_name), "add", None, None, source=S.source,
                  fused=tuple(op.name for op in block_ops))
    return _Attention(fused, S, X, qi, ki, vi, bh, n, dk, c2s, _epilogue_scale(S))


def _stored_instance(bh: list, box: dict, read: set) -> np.ndarray:
    """[head steps] the stored matrix each head step (C order over the
    `bh` variables' local extents) reads: the ravelled index over the
    variables the matrix reads, so steps differing only in others share."""
    ext = [int(box[v]) for v in bh]
    if not bh:
        return np.zeros(1, np.int64)
    coords = np.unravel_index(np.arange(int(np.prod(ext, dtype=np.int64))), ext)
    keep = [i for i, v in enumerate(bh) if v in read]
    if not keep:
        return np.zeros(len(coords[0]), np.int64)
    return np.ravel_multi_index(tuple(coords[i] for i in keep), tuple(ext[i] for i in keep)).astype(np.int64)


def attention_op(block_ops) -> PimOp:
    """The fused PimOp of an attention block: the context loop nest plus the
    score's head dimension, operands (q, K, V) (PimCompileError when the
    block is not one AttAcc fuses)."""
    return _attention_parts(block_ops).fused


def lower_attention(block_ops, draft: Draft, backend: Backend, shapes: dict | None = None,
                    **options) -> Program:
    """One AttAcc program for an attention block (score, max, exp, sum, div,
    context ops as found by `patterns.match_attention`).

    draft: a Draft of the score op (its dimension sets); the sequence and
    head-dim sets must stay in one group (the softmax runs per channel).
    The context product reuses the score's tiles (the same unit holds
    K[n, d] and V[n, d]); lanes run along the head dimension (adder tree for
    the score, mac mode for the context).  Heads a unit holds run as head
    steps; two steps are software-pipelined like the reference (the next
    head's score overlaps this head's softmax and context) when the GEMV
    and softmax buffers hold both.  Option `head_rows=True`: every stored
    head's K and V start on a DRAM row of their own (AttAcc's trace
    generator; packed by default).

    The program's op is a fused contraction with operands (q, K, V) and the
    context result; `execute(program, q, K, V)` returns the context.
    """
    opts = {**DEFAULT_OPTIONS, **options}
    if backend.family != "attacc":
        raise PimCompileError(f"lower_attention needs an attacc backend, got {backend.name}")
    at = _attention_parts(block_ops)
    S, X = at.S, at.X
    from ...partition.verify import mesh_error
    if wrong := mesh_error(S, draft, backend):
        # what `lower` checks of every op's draft; a block is lowered here directly, and a draft of
        # more units than the backend has would index past the placement tables (a crash, not an error)
        raise PimCompileError(f"{backend.name}: {wrong}")
    if shapes is None:
        from ...partition.verify import infer_shapes
        shapes = {}
        for o in block_ops:
            shapes.update(infer_shapes(o))
    sets = dimension_sets(S)
    for si, s in enumerate(sets):
        if (at.n in s.vars or at.dk in s.vars) and draft.parts[si].groups > 1:
            raise PimCompileError("attacc attention: a head's sequence and head dim must stay in one channel")
    geo = Geometry.of(backend)
    ts = core_tiles(S, draft)
    G, C = ts.groups, ts.cores
    xv = tuple(lv.name for lv in X.loop_vars)
    idx = [ts.var_index(at.c2s[v]) for v in xv]
    tx = CoreTiles(xv, ts.start[:, :, idx], ts.length[:, :, idx], (), G, C)
    bh, n, dk = at.bh, at.n, at.dk
    box = dict(zip(ts.vars, ts.box(ts.vars)))
    n_b = int(np.prod([box[v] for v in bh], dtype=np.int64))
    n_n, n_d = box[n], box[dk]
    cap = backend.core.n_input_regs
    lay_is = lambda E: bool(opts["data_block_layout"]) and -(-E // cap) > 1  # noqa: E731
    K, V = S.operands[at.ki], X.operands[at.vi]
    # grouped-query attention: head steps that differ only in variables K
    # (V) does not read -- the query heads of one KV head -- read one stored
    # copy of K (V): the unit runs a score / context GEMV per query head over
    # the same rows
    k_store = _stored_instance(bh, box, set(K.vars))
    v_store = _stored_instance(bh, box, {at.c2s[v] for v in V.vars})
    # head_rows: every stored head's K and V start on a DRAM row of their own, as AttAcc's trace
    # generator lays them out (one partition per head, sized for its maxlen); packed (the
    # default), two short heads share a row and the second one's MACs hit the open row
    align = geo.row_span if opts["head_rows"] else 1
    gs = _plan(TREE, int(k_store.max()) + 1, 1, n_n, n_d, cap, lay_is(-(-n_d // LANES)),
               opts["gb_tile"], align).shared(k_store)
    gc = _plan(MACMODE, int(v_store.max()) + 1, 1, n_d, n_n, cap, lay_is(-(-n_n // LANES)),
               opts["gb_tile"], align).shared(v_store)
    rows_k = int(geo.address(max(gs.v_total - 1, 0))[1]) + 1
    if rows_k + int(geo.address(max(gc.v_total - 1, 0))[1]) + 1 > backend.core.rows:
        raise PimCompileError("attacc attention: K and V exceed the rows of a bank")
    k_layout, v_layout, res_layout, flat_o, qidx = _attention_layouts(at, ts, tx, shapes, box, gs, gc, geo,
                                                                      rows_k)

    tables = _Tables(C, G)
    em = _Emitter(geo, draft.granularity, tables, C)
    resident = set(opts["resident"])
    _placement(em, geo, 0, gs.v_total, 0, C, 1 in resident)
    _placement(em, geo, 1, gc.v_total, rows_k, C, 2 in resident)
    em.barrier()

    hs = _head_steps(at, draft, ts, tx, opts, em, tables, gs, gc, rows_k, qidx, flat_o)
    pipelined = _emit_heads(hs, n_b, cap, opts)
    sb = hs.sb
    sb.flush(em, 2, final=True)

    route_src, route_dst, host = tables.arrays()
    meta = dict(kind="attention", geometry=geo, route_src=route_src, route_dst=route_dst,
                readback_map=sb.readback_map(), sb_rows=max(1, sb.used_max), gb_entries=cap,
                host_data_operands=(0,), sfm=tuple((m[:max(1, sb.used_max)], s) for m, s in hs.sfm_specs),
                score=gs, context=gc, pipelined=pipelined, block_ops=tuple(block_ops),
                operand_shapes={k: tuple(shapes[a.value]) for k, a in enumerate(at.fused.operands)},
                result_shape=tuple(shapes[X.result.value]), result_dtype=opts["result_dtype"])
    return _program(at.fused, draft, backend, ts, shapes, [k_layout, v_layout, res_layout], em, host, meta, opts,
                    Readback(2, combiner="add", lane_partials=False, epilogue_on_host=True))


def _emit_heads(hs: "_HeadSteps", n_b: int, cap: int, opts: dict) -> bool:
    """The records of the n_b head steps, in pairs when the GBs (`cap` entries) and the
    softmax buffer hold two heads' q, P and score / context rows at once (the reference's
    software pipeline), else one by one.  Returns whether pairs were used."""
    gs, gc = hs.gs, hs.gc
    pipelined = (gs.t_in == 1 and gc.t_in == 1 and 2 * gs.E <= cap and 2 * gc.E <= cap
                 and gs.E + gc.E <= cap and opts["register_reuse"]
                 and 2 * len(hs.ids_s) * gs.t_out + 2 * len(hs.ids_c) * gc.t_out <= hs.sb.cap)
    k = 0
    while k < n_b:
        if pipelined and k + 1 < n_b:
            _head_pair(hs, k, k + 1, cap, bool(opts.get("trace_generator_pairs")))
            k += 2
        else:
            _head_single(hs, k)
            k += 1
    return pipelined


def _attention_layouts(at: _Attention, ts: CoreTiles, tx: CoreTiles, shapes: dict, box: dict, gs: _Gemv,
                       gc: _Gemv, geo: Geometry, rows_k: int):
    """The block's layouts and host index tables: K's and V's bank layouts (V's rows
    after K's `rows_k`; positions computed on first use), the context result layout
    (descriptive: a softmax-buffer slot per local output), the flat result index per
    unit and head step `flat_o[G, C, n_b, n_d]` (-1: none) and q's host indices padded
    to whole GB entries `qidx[G, C, n_b, E, 16]` (-1: padding)."""
    S, X = at.S, at.X
    G, C = ts.groups, ts.cores
    s2c = {s: c for c, s in at.c2s.items()}
    bh, n, dk = at.bh, at.n, at.dk
    bh_c, n_c, dv = [s2c[v] for v in bh], s2c[n], s2c[dk]
    n_b = int(np.prod([box[v] for v in bh], dtype=np.int64))
    n_d = box[dk]
    K, V, q = S.operands[at.ki], X.operands[at.vi], S.operands[at.qi]
    k_vars, v_vars = tuple(bh + [n, dk]), tuple(bh_c + [dv, n_c])
    # where K's and V's elements live: only `execute` reads it (computed on first use)
    k_pos = LazyPositions(lambda: _matrix_positions(gs, geo, 0), gs.n_b * gs.n_o * gs.n_r)
    v_pos = LazyPositions(lambda: _matrix_positions(gc, geo, rows_k), gc.n_b * gc.n_o * gc.n_r)
    k_layout = tile_layout(ts, "K", 1, k_vars, K.index_map, shapes[K.value], k_pos, tuple(box[v] for v in k_vars))
    v_layout = tile_layout(tx, "V", 2, v_vars, V.index_map, shapes[V.value], v_pos,
                           tuple(box[at.c2s[v]] for v in v_vars))
    r_vars = tuple(bh_c + [dv])
    rbox = tuple(box[at.c2s[v]] for v in r_vars)
    ro = np.arange(int(np.prod(rbox, dtype=np.int64))) % max(1, n_d)
    r_pos = np.stack([np.zeros_like(ro), np.zeros_like(ro), ro // LANES, ro % LANES], -1)
    res_layout = tile_layout(tx, "acc", -1, r_vars, *acc_space(at.fused), r_pos, rbox)
    res_layout = TensorLayout(**{**res_layout.__dict__, "space": "softmax"})
    flat_o, valid_o = global_index(res_layout)
    flat_o = np.where(valid_o, flat_o, -1).reshape(G, C, n_b, n_d)
    qlay = tile_layout(ts, "q", 0, tuple(bh + [dk]), q.index_map, shapes[q.value], np.zeros((1, 4), np.int32),
                       tuple(box[v] for v in bh + [dk]))
    qf, qv = global_index(qlay)
    qidx = np.where(qv, qf, -1).reshape(G, C, n_b, n_d)
    qidx = np.pad(qidx, ((0, 0), (0, 0), (0, 0), (0, gs.E * LANES - n_d)), constant_values=-1)
    return k_layout, v_layout, res_layout, flat_o, qidx.reshape(G, C, n_b, gs.E, LANES)


@dataclass(frozen=True)
class _HeadSteps:
    """What the head steps' record emission shares.  Static: the emitter and its tables,
    the score (gs) and context (gc) GEMV plans, V's first row `rows_k`, q's host indices
    `qidx[G, C, n_b, E, 16]`, the result's flat indices `flat_o[G, C, n_b, n_d]`, the
    units' score / context classes (`cls_*[C]`, sorted ids `ids_*`, a representative unit
    `rep_c` and each unit's class position `pos_*`), the head of each unit and each score
    class's sequence length (the softmax masks), the softmax scale.  Running (mutated in
    place as heads are emitted): the softmax buffer `sb`, the score / context rows each
    head step holds (`srows` / `crows`: step -> {(class, block): row}), the SFM masks
    emitted so far and the host rows of q already written (`host_ids`)."""
    em: _Emitter
    tables: _Tables
    geo: Geometry
    gs: _Gemv
    gc: _Gemv
    rows_k: int
    qidx: np.ndarray
    flat_o: np.ndarray
    cls_s: np.ndarray
    ids_s: list
    ids_c: list
    rep_c: dict
    pos_s: np.ndarray
    pos_c: np.ndarray
    heads: np.ndarray
    n_len: dict
    scale: float
    C: int
    G: int
    sb: "_SoftmaxBuffer"
    srows: dict
    crows: dict
    sfm_specs: list
    host_ids: dict


def _head_steps(at: _Attention, draft: Draft, ts: CoreTiles, tx: CoreTiles, opts: dict, em: _Emitter,
                tables: _Tables, gs: _Gemv, gc: _Gemv, rows_k: int, qidx: np.ndarray,
                flat_o: np.ndarray) -> _HeadSteps:
    """The unit classes of the score and context GEMVs and a fresh softmax buffer."""
    s2c = {s: c for c, s in at.c2s.items()}
    C = ts.cores
    # the softmax needs whole scores: head-dim partials always merge in the channel accumulator
    cls_s = _classes(ts, at.bh + [at.n])
    cls_c = np.arange(C) if draft.reduction == "host" else _classes(tx, [s2c[v] for v in at.bh] + [s2c[at.dk]])
    ids_s, ids_c = sorted(set(cls_s.tolist())), sorted(set(cls_c.tolist()))
    rep_s = {k: int(np.nonzero(cls_s == k)[0][0]) for k in ids_s}
    rep_c = {k: int(np.nonzero(cls_c == k)[0][0]) for k in ids_c}
    heads = _classes(ts, at.bh)                                          # units of one head (per step)
    n_len = {k: int(ts.length[0, rep_s[k], ts.var_index(at.n)]) for k in ids_s}
    # unit -> position of its class in ids_s / ids_c: a drain's per-unit rows by one gather
    # (a list over the units per drain cost O(C) in Python, thousands of times per program)
    pos_s, pos_c = np.searchsorted(ids_s, cls_s), np.searchsorted(ids_c, cls_c)
    return _HeadSteps(em, tables, em.geo, gs, gc, rows_k, qidx, flat_o, cls_s, ids_s, ids_c, rep_c, pos_s, pos_c,
                      heads, n_len, at.scale, C, ts.groups, _SoftmaxBuffer(opts["sb_rows"], ts.groups),
                      {}, {}, [], {})


def _q_host_row(h: _HeadSteps, c: int, k: int, e: int) -> int:
    """The host row holding unit c's q entry e of head step k (written once, then reused)."""
    if (c, k, e) not in h.host_ids:
        h.host_ids[(c, k, e)] = h.tables.host_row(h.qidx[:, c, k, e])
    return h.host_ids[(c, k, e)]


def _alloc_score(h: _HeadSteps, k: int) -> None:
    """Softmax-buffer rows for head step k's scores (one per score class and output block)."""
    rows = h.sb.alloc(len(h.ids_s) * h.gs.t_out)
    h.srows[k] = {(cl, j): rows[a * h.gs.t_out + j] for a, cl in enumerate(h.ids_s) for j in range(h.gs.t_out)}


def _alloc_ctx(h: _HeadSteps, k: int) -> None:
    """Softmax-buffer rows for head step k's context (flushing finished rows if short)."""
    if len(h.sb.free) < len(h.ids_c) * h.gc.t_out:
        h.sb.flush(h.em, 2)
    rows = h.sb.alloc(len(h.ids_c) * h.gc.t_out)
    h.crows[k] = {(cl, j): rows[a * h.gc.t_out + j] for a, cl in enumerate(h.ids_c) for j in range(h.gc.t_out)}


def _score_block(h: _HeadSteps, k, j, i, base):
    """Score phase, output block j / input tile i of head k: adder-tree MACs of K rows with q in GB."""
    gs = h.gs
    return lambda: h.em.macs(int(gs.start[k, j, i]), int(gs.size[j, i]), 0, TREE, gs.reg_step(i), base)


def _ctx_block(h: _HeadSteps, k, j, i, base):
    """Context phase, output block j / input tile i of head k: mac-mode MACs of V rows with P in GB."""
    gc = h.gc
    return lambda: h.em.macs(int(gc.start[k, j, i]), int(gc.size[j, i]), h.rows_k, MACMODE, 0, base)


def _score_drain(h: _HeadSteps, k, j):
    """MVSB of score block j into head k's score rows."""
    return lambda: h.em.drain(np.array([h.srows[k][(cl, j)] for cl in h.ids_s])[h.pos_s], h.sb)


def _ctx_drain(h: _HeadSteps, k, j, complete):
    """MVSB of context block j into head k's context rows; once complete, the rows are results."""
    def f():
        h.em.drain(np.array([h.crows[k][(cl, j)] for cl in h.ids_c])[h.pos_c], h.sb)
        if complete:
            for cl in h.ids_c:
                flat = np.full((h.G, LANES), -1, np.int64)
                outs = h.gc.outs(j)
                flat[:, :outs] = h.flat_o[:, h.rep_c[cl], k, LANES * j:LANES * j + outs]
                h.sb.result_row(h.crows[k][(cl, j)], flat)
    return f


def _q_cmds(h: _HeadSteps, k, i, base):
    """WRGB commands writing q's tile i of head k into the GBs from entry `base`."""
    gs = h.gs
    need = {c: [(_q_host_row(h, c, k, e), base + e - gs.KI * i) for e in range(gs.KI * i, gs.KI * i + gs.ke(i))]
            for c in range(h.C)}
    return _load_commands(h.geo, need, h.em.gran, h.C)


def _p_cmds(h: _HeadSteps, k, i, base):
    """MVGB commands moving the softmaxed scores P (tile i of head k) into the GBs from `base`."""
    gc = h.gc
    need = {c: [(h.srows[k][(int(h.cls_s[c]), e)], base + e - gc.KI * i)
                for e in range(gc.KI * i, gc.KI * i + gc.ke(i))] for c in range(h.C)}
    return _load_commands(h.geo, need, h.em.gran, h.C)


def _emit_moves(h: _HeadSteps, op_, cmds, phase=Phase.COMPUTE, src=-1):
    """The side records of (bank, source, destination) load commands."""
    for bank, s_, d_ in cmds:
        h.em.side(op_, bank, arg=h.tables.route(s_, d_), phase=phase, src=src)


def _softmax(h: _HeadSteps, k):
    """Softmax phase of head k: one SFM per head over its valid score lanes."""
    def f():
        for hg in sorted(set(h.heads.tolist())):
            mask = np.zeros((h.sb.cap, LANES), bool)
            for cl in sorted({int(h.cls_s[c]) for c in np.nonzero(h.heads == hg)[0]}):
                for j in range(h.gs.t_out):
                    valid = np.arange(LANES) + LANES * j < h.n_len[cl]
                    mask[h.srows[k][(cl, j)]] |= valid
            h.sfm_specs.append((mask, h.scale))
            h.em.side(Op.SFM, 0, aux=len(h.sfm_specs) - 1)
    return f


def _gemv_phase(h: _HeadSteps, blocks, drains, fillers):
    """A GEMV's blocks, each drained one barrier later (overlapping the next block's MACs),
    with `fillers[j]` (loads / softmax of another head) issued in segment j."""
    L = len(blocks)
    for j in range(L + 1):
        if j > 0:
            drains[j - 1]()
        if j < L:
            blocks[j]()
        for f in fillers.get(j, ()):
            f()
        if j < L:
            h.em.barrier()


def _spread(h: _HeadSteps, cmds, first: int, L: int, op_, phase_=Phase.COMPUTE, src=-1) -> dict:
    """Commands spread over segments first .. L-1 (the reference's strides)."""
    parts = np.array_split(np.arange(len(cmds)), max(1, L - first))
    return {first + a: [lambda ix=ix: _emit_moves(h, op_, [cmds[t] for t in ix], phase_, src)]
            for a, ix in enumerate(parts) if len(ix)}


def _merge_fillers(*ds):
    out: dict = {}
    for d in ds:
        for k_, v_ in d.items():
            out.setdefault(k_, []).extend(v_)
    return out


def _head_single(h: _HeadSteps, k: int) -> None:
    """Head step k alone: score (q loads, MACs, drains), softmax, context (P moves, MACs, drains)."""
    gs, gc, em = h.gs, h.gc, h.em
    _alloc_score(h, k)
    for i in range(gs.t_in):
        _emit_moves(h, Op.WRGB, _q_cmds(h, k, i, 0), Phase.REARRANGE, 0)
        em.barrier()
        _gemv_phase(h, [_score_block(h, k, j, i, 0) for j in range(gs.t_out)],
                    [_score_drain(h, k, j) for j in range(gs.t_out)], {})
    _softmax(h, k)()
    _alloc_ctx(h, k)
    for i in range(gc.t_in):
        _emit_moves(h, Op.MVGB, _p_cmds(h, k, i, 0))
        em.barrier()
        _gemv_phase(h, [_ctx_block(h, k, j, i, 0) for j in range(gc.t_out)],
                    [_ctx_drain(h, k, j, i == gc.t_in - 1) for j in range(gc.t_out)], {})
    h.sb.release(h.srows.pop(k).values())


def _head_pair(h: _HeadSteps, k0: int, k1: int, cap: int, trace_generator_pairs: bool) -> None:
    """Head steps k0, k1 software-pipelined as the reference does: k1's score overlaps
    k0's softmax and P moves, k0's context overlaps k1's softmax and P moves (q of the
    two heads in the top of the GB, P in the bottom)."""
    gs, gc, em = h.gs, h.gc, h.em
    Eq, Ep = gs.E, gc.E
    qb = (cap - Eq, cap - 2 * Eq)
    pb = (0, Ep)
    _alloc_score(h, k0)
    _alloc_score(h, k1)
    Ls, Lc = gs.t_out, gc.t_out
    _emit_moves(h, Op.WRGB, _q_cmds(h, k0, 0, qb[0]), Phase.REARRANGE, 0)
    em.barrier()
    _gemv_phase(h, [_score_block(h, k0, j, 0, qb[0]) for j in range(Ls)], [_score_drain(h, k0, j) for j in range(Ls)],
                _spread(h, _q_cmds(h, k1, 0, qb[1]), 0, Ls, Op.WRGB, Phase.REARRANGE, 0))
    p0 = _p_cmds(h, k0, 0, pb[0])
    _gemv_phase(h, [_score_block(h, k1, j, 0, qb[1]) for j in range(Ls)], [_score_drain(h, k1, j) for j in range(Ls)],
                _merge_fillers({0: [_softmax(h, k0)]}, _spread(h, p0, Ls // 2, Ls, Op.MVGB)))
    _alloc_ctx(h, k0)
    _alloc_ctx(h, k1)
    h.sb.release(h.srows.pop(k0).values())
    p1 = _p_cmds(h, k1, 0, pb[1])
    _gemv_phase(h, [_ctx_block(h, k0, j, 0, pb[0]) for j in range(Lc)], [_ctx_drain(h, k0, j, True) for j in range(Lc)],
                _merge_fillers({0: [_softmax(h, k1)]}, _spread(h, p1, Lc // 2, Lc, Op.MVGB)))
    h.sb.release(h.srows.pop(k1).values())
    # the trace generator's pair loop emits the FIRST head's context MACs for the second head
    # ("Head1: Context" reuses cmd_context_mac[i]): timing-only replica, see `reference_program`
    kv = k0 if trace_generator_pairs else k1
    _gemv_phase(h, [_ctx_block(h, kv, j, 0, pb[1]) for j in range(Lc)],
                [_ctx_drain(h, k1, j, True) for j in range(Lc)], {})


# --------------------------------------------------------------------------
# validation against the AttAcc simulator figures (reference/attacc.csv)
# --------------------------------------------------------------------------
