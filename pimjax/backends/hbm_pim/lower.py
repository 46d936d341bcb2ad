"""Lowering to Samsung HBM-PIM (FIMDRAM) command programs.

The command sequences follow the public Samsung PIM simulator
(`../shared/reference/hbm-pim.md`): a fixed frame (park-in, SB->HAB, CRF
program, HAB->HAB_PIM ... HAB_PIM->HAB, HAB->SB, park-out) around the
kernel body, in which every all-bank-PIM column command executes the next
CRF instruction in all 8 units of the pseudo-channel.

Kernels (per group = pCH; all groups run one shared stream):

* contraction `sum_r M[.., o, r] * v[.., r]` — a sequence of GEMVs.  M (the
  larger operand) is pre-placed in the units' even/odd banks in KI x KO
  blocks (burst L of a block holds M[o = L % KO][16 inputs of L // KO]); v is
  broadcast into GRF_A by the host, 16 lanes per register; MACs accumulate
  16 lane partials per output in GRF_B, which is stored into the odd bank and
  read back by the host, which sums the lanes and any partial slots.
* elementwise — every operand column is streamed through a CRF program
  (FILL / ADD / MUL / MAD with SRF scalars / MOV-ReLU) into GRF_A (even bank)
  or GRF_B (odd bank) and stored back; the host reads the result.
* reduction (add) — columns of one output are FILLed then ADDed into one
  register; lane partials are summed by the host.

Optimisations (each an option, on by default): register reuse (Korean
paper §3.2: write GRF_A only when its inputs change; store / read GRF_B only
when final), the data-block layout matching the dataflow (§3.4), resident
operands (DCC `pre_load`), channel-parallel rearrangement (DCC §IV-C).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ...errors import PimCompileError
from ...hw.core import Backend
from ...lower.context import LowerContext
from ...lower.layout import acc_space, lane_order, tile_layout, value_shapes
from ...lower.native import column_runs, gemv_sequence
from ...lower.program import (
    RECORD_FIELDS,
    LazyArray,
    LazyPositions,
    Op,
    Phase,
    Program,
    Readback,
    RecordBuilder,
    SlotTable,
    TensorLayout,
    bank_order,
    bank_order_key,
    chunk,
    concat,
    record_count,
    stack_streams,
    streamed,
)
from ...lower.stats import column_stats, lowered_program
from ...lower.tiles import CoreTiles, core_tiles
from ...partition.draft import Draft
from ...partition.verify import matrix_and_vector, register_split_error
from ...trace.ir import PimOp
from .isa import Crf
from .srf import body_error, compile_elementwise

# rows of the mode / configuration frame (hbm-pim.md)
PARK_ROW = 0x1000
SB_TO_HAB_ROW = 0x17FF
HAB_TO_SB_ROW = 0x1FFF
CONF_ROW = 0x3FFF
DATA_ROWS = 0x2000          # logical data rows: the 8192 rows with bit 12 clear


def phys_row(r):
    """Physical row of logical data row `r`: skip the rows with bit 12 set
    (they address the mode / register frames, never the banks)."""
    r = np.asarray(r)
    return (r & 0xFFF) | ((r >> 12) << 13)
GRF_A_COL = 8               # row 0x3fff columns 8-15 -> GRF_A[0..7]
GRF_B_COL = 24              # columns 24-31 -> GRF_B[0..7]
SRF_COL = 1

# register file of one unit in `execute`: GRF_A[0..7], GRF_B[0..7], SRF
GRF_A, GRF_B, SRF = 0, 8, 16
N_REGS = 17
GRF_SIZE = 8                # GRF_A and GRF_B hold 8 registers each (ISA)


def logical_row(r):
    """Logical data row of physical row `r` (the inverse of `phys_row`)."""
    r = np.asarray(r)
    return (r & 0xFFF) | ((r >> 13) << 12)


@dataclass(frozen=True)
class Geometry:
    """The hardware facts a lowering reads from the Backend (never module
    constants): columns per row, lanes per column, banks per bank group,
    banks of the group and banks per unit.

    A unit computes on an even / odd bank pair (its "parities").  With two
    banks per unit (the hbm-pim preset) parity p is bank 2 * unit + p; with
    one bank per unit (config="ko", LPDDR5X-PIM-like variants) both parities
    live in the unit's one bank, parity 1 in the upper half of the data rows
    (logical row + `half`), and the all-bank commands address bank 0.

    Flat column indices handed to the helpers below are parity-relative
    (row * cols + col inside the parity's rows); `flat_base` turns them into
    the bank's logical flat columns."""
    cols: int
    lanes: int
    banks_per_bg: int
    banks: int
    banks_per_unit: int
    data_rows: int                # logical data rows of one parity

    @staticmethod
    def of(backend: Backend) -> "Geometry":
        core, group = backend.core, backend.group
        bpu = core.banks_per_core
        if bpu not in (1, 2):
            raise PimCompileError(f"hbm-pim family: a unit reads an even/odd bank pair (2 banks) or "
                                  f"one bank holding both; banks_per_core must be 1 or 2, got {bpu}")
        if GRF_B_COL + GRF_SIZE > core.cols or SRF_COL >= core.cols:
            raise PimCompileError(f"hbm-pim family: the register frame (columns {GRF_A_COL}-{GRF_B_COL + GRF_SIZE - 1} "
                                  f"of row {CONF_ROW:#x}) needs cols >= {GRF_B_COL + GRF_SIZE}, got core.cols={core.cols}")
        if group.banks < 2:
            raise PimCompileError(f"hbm-pim family: the mode frame addresses banks 0 and 1; the group has "
                                  f"{group.banks} bank(s)")
        return Geometry(cols=core.cols, lanes=core.lanes, banks_per_bg=group.banks_per_bank_group,
                        banks=group.banks, banks_per_unit=bpu,
                        data_rows=DATA_ROWS if bpu == 2 else DATA_ROWS // 2)

    @property
    def pair(self) -> bool:
        """Whether the two parities are two banks (else one bank, two row ranges)."""
        return self.banks_per_unit == 2

    def ab_bank(self, parity):
        """The bank field of an all-bank command on a parity."""
        return parity if self.pair else 0 * np.asarray(parity)

    def host_bank(self, core, parity):
        """The bank of a unit's parity (single-bank host commands)."""
        return 2 * core + parity if self.pair else core

    def flat_base(self, parity):
        """Logical flat column of a parity's first column in its bank."""
        return 0 if self.pair else np.asarray(parity) * (self.data_rows * self.cols)

    def row_base(self, parity):
        """Logical row of a parity's first row in its bank."""
        return 0 if self.pair else np.asarray(parity) * self.data_rows

    def position(self, parity, flat):
        """(physical row, col) of parity-relative flat columns."""
        flat = np.asarray(flat)
        return phys_row(flat // self.cols + self.row_base(parity)), flat % self.cols


DEFAULT_OPTIONS = dict(register_reuse=True, data_block_layout=True, channel_parallel=True,
                       resident=(), frame=True, result_dtype="float32")


@dataclass(frozen=True)
class _Ctx(LowerContext):
    """`LowerContext` and the channel's bank geometry."""
    geom: Geometry


def lower_hbm_pim(op: PimOp, draft: Draft, backend: Backend, shapes: dict | None = None,
                  **options) -> Program:
    """Lower one op to an HBM-PIM program (see module docstring)."""
    opts = {**DEFAULT_OPTIONS, **options}
    geom = Geometry.of(backend)
    if max(draft.ki, draft.ko) > GRF_SIZE:
        raise PimCompileError(f"hbm-pim family: GRF_A / GRF_B hold {GRF_SIZE} registers, the draft needs "
                              f"ki={draft.ki}, ko={draft.ko}")
    if op.kind == "elementwise" and (why := body_error(op)):
        # a body the units cannot run fails every draft alike: said before the draft's tiles are
        # built, once per op (the tuner tries each draft of such an op; a LLaMA layer's RoPE has ~400)
        raise PimCompileError(why)
    ctx = _Ctx(op, draft, backend, core_tiles(op, draft), value_shapes(op, shapes), opts, geom)
    if op.kind == "contraction":
        return _contraction(ctx)
    if op.kind == "elementwise":
        return _elementwise(ctx)
    if op.kind == "reduction":
        return _reduction(ctx)
    raise PimCompileError(f"hbm-pim cannot run a {op.kind} op ({op.name})")


# --------------------------------------------------------------------------
# shared pieces
# --------------------------------------------------------------------------
def _frame_open(b: RecordBuilder, banks: int, per_bg: int) -> None:
    """Park-in, SB->HAB and the CRF program (hbm-pim.md "Fixed frame")."""
    b.extend(_frame_records("open", banks, per_bg))


def _frame_close(b: RecordBuilder, banks: int, per_bg: int) -> None:
    """HAB->SB and park-out."""
    b.extend(_frame_records("close", banks, per_bg))


@functools.lru_cache(maxsize=None)
def _frame_records(which: str, banks: int, per_bg: int) -> dict[str, np.ndarray]:
    """The records of the fixed frame (read-only arrays, built once per bank
    count: every lowering emits the same records).
    The park reads touch every bank of the group, in the bank-group
    interleaved order the controller issues them (`bank_order`); the SB->HAB
    writes go to banks 0 and 1 of the lower and the upper half of the banks
    (0, 8, 1, 9 on 16 banks).  The park rows do not stay open: the
    controller closes a row with no pending hit (the reference's open-page
    policy), and in HAB / HAB_PIM mode every ACT / PRE reaches all even or
    odd banks -- the records time all-bank commands on banks 0 / 1, so a
    PREA after the park-in says that the other banks hold no open row when
    the park-out activates each of them (and lets a refresh that falls due
    during the park-out wait for it, as the reference's controller does)."""
    b = RecordBuilder()
    park = bank_order(range(banks), per_bg)
    if which == "open":
        for bank in park:
            b.add(Op.RD, bank=bank, row=PARK_ROW, col=0, aux=Crf.MODE)
        b.add(Op.PREA, bank=0, row=0, col=0, n=1, aux=Crf.MODE)
        half = banks // 2
        for bank in (0, half, 1, half + 1) if banks >= 4 else (0, 1):
            b.add(Op.WR, bank=bank, row=SB_TO_HAB_ROW, col=31, aux=Crf.MODE)
        b.add(Op.AB_WR, bank=1, row=CONF_ROW, col=4, aux=Crf.PROGRAM)
    else:
        for bank in (0, 1):
            b.add(Op.WR, bank=bank, row=HAB_TO_SB_ROW, col=0, aux=Crf.MODE)
        for bank in park:
            b.add(Op.RD, bank=bank, row=PARK_ROW, col=0, aux=Crf.MODE)
    records = b.build()
    for a in records.values():
        a.flags.writeable = False
    return records


def _enter_pim(b: RecordBuilder) -> None:
    b.add(Op.AB_WR, bank=0, row=CONF_ROW, col=0, aux=Crf.ZERO_B)


def _exit_pim(b: RecordBuilder) -> None:
    b.add(Op.AB_WR, bank=0, row=CONF_ROW, col=0, aux=Crf.MODE)


def _column_runs(bank: int, flat_cols: np.ndarray, cols: int):
    """Split consecutive bank-column indices into (bank, row, col, n, offset)
    runs that stay inside one row (cols columns per row)."""
    runs = []
    i = 0
    flat_cols = np.asarray(flat_cols)
    while i < len(flat_cols):
        start = int(flat_cols[i])
        row, col = divmod(start, cols)
        n = 1
        while (i + n < len(flat_cols) and flat_cols[i + n] == start + n and col + n < cols):
            n += 1
        runs.append((bank, int(phys_row(row)), col, n, i))
        i += n
    return runs


def _parity_runs(geom: Geometry, parity: int, flat_cols: np.ndarray):
    """`_column_runs` of parity-relative columns for an all-bank command on
    `parity`: (bank field, physical row, col, n, offset)."""
    return _column_runs(int(geom.ab_bank(parity)), np.asarray(flat_cols) + geom.flat_base(parity), geom.cols)


# Up to this many columns per group a host transfer is emitted column by
# column in the controller's interleaved order (exact, row activations
# exposed); larger transfers use runs (repeat compression: one record per
# bank row; streamed, columns tCCD_S apart, when the banks span two bank
# groups or more -- `program.streamed`).
INTERLEAVE_LIMIT = 4096


def _runs(flat: np.ndarray, cols: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row, col, n) of the runs of consecutive column indices inside one row
    (`_column_runs` as arrays; compiled, `native.column_runs`)."""
    return column_runs(np.ascontiguousarray(flat, np.int64), cols)


def _unique_columns(flat) -> np.ndarray:
    """Sorted distinct column indices, as `np.unique`, but fast on what the
    lowering passes: ranges that are already strictly increasing (returned
    as they are) and bounded non-negative indices (a mask).  `np.unique`
    took 20 ms a call, half the lowering time of a GEMV 4096² draft."""
    flat = np.asarray(flat, np.int64)
    if flat.size < 2 or bool(np.all(flat[1:] > flat[:-1])):
        return flat
    lo, hi = int(flat.min()), int(flat.max())
    if lo >= 0 and hi < 4 * flat.size + (1 << 16):
        seen = np.zeros(hi + 1, bool)
        seen[flat] = True
        return np.flatnonzero(seen)
    return np.unique(flat)


def _host_columns(b: RecordBuilder, op: Op, phase: Phase, layout_id: int, region: dict[int, np.ndarray],
                  cores: int, geom: Geometry, resident: bool = False) -> None:
    """Host column transfers (single-bank) of a region of every core.

    region: bank parity -> parity-relative flat column indices (row * cols
    + col).  Like a
    memory controller the host interleaves the banks, in an order that
    alternates bank groups, so a stream over two bank groups or more runs at
    tCCD_S (the link bandwidth), one inside a bank group at tCCD_L.  Small
    transfers are emitted column by column in that order; larger ones
    (repeat compression) as one run per bank row, the runs round-robin over
    the banks.  With one bank per unit the two parities of a unit are one
    bank's columns (parity 0's, then parity 1's)."""
    cols, per_bg = geom.cols, geom.banks_per_bg
    targets = []
    flats = {int(bank_sel): _unique_columns(flat) for bank_sel, flat in region.items()}
    if not geom.pair and flats:
        # one bank per unit: one target per unit, its columns the parities' in turn
        flats = {0: np.concatenate([flat + geom.flat_base(sel) for sel, flat in sorted(flats.items())])}
    for bank_sel, flat in flats.items():
        for core in range(cores):
            targets.append((geom.host_bank(core, bank_sel), core, bank_sel))
    if not targets:
        return
    # in bank_order (the target banks are distinct, so this is the same order)
    targets.sort(key=lambda t: bank_order_key(t[0], per_bg))
    total = sum(len(flats[t[2]]) for t in targets)
    per_column = total <= INTERLEAVE_LIMIT
    code = op if per_column else streamed(op, [t[0] for t in targets], per_bg)
    # every core transfers the same columns of its bank: the runs once per bank parity
    runs = {sel: (flat // cols, flat % cols, np.ones(len(flat), np.int64)) if per_column else _runs(flat, cols)
            for sel, flat in flats.items()}
    lengths = {len(r[0]) for r in runs.values()}
    if len(lengths) == 1:
        # round-robin over equal run counts: a [runs, targets] transpose
        L, T = lengths.pop(), len(targets)
        c = {"bank": np.broadcast_to([t[0] for t in targets], (L, T)),
             "core": np.broadcast_to([t[1] for t in targets], (L, T))}
        for k, f in enumerate(("row", "col", "n")):
            c[f] = np.stack([runs[t[2]][k] for t in targets], 1)
        c = {f: v.reshape(-1) for f, v in c.items()}
    else:
        cols = {k: [] for k in ("bank", "core", "row", "col", "n", "i", "t")}
        for t, (bank, core, sel) in enumerate(targets):
            row, col, n = runs[sel]
            cols["bank"].append(np.full(len(row), bank))
            cols["core"].append(np.full(len(row), core))
            cols["row"].append(row)
            cols["col"].append(col)
            cols["n"].append(n)
            cols["i"].append(np.arange(len(row)))
            cols["t"].append(np.full(len(row), t))
        c = {k: np.concatenate(v) for k, v in cols.items()}
        idx = np.lexsort((c["t"], c["i"]))             # round-robin: run i of every bank, in bank order
        c = {f: c[f][idx] for f in ("bank", "core", "row", "col", "n")}
    recs = chunk(code, len(c["bank"]), bank=c["bank"], row=phys_row(c["row"]), col=c["col"],
                 n=c["n"], phase=phase, src=layout_id, core=c["core"], resident=int(resident))
    b.extend(recs)


def _rearrange(b: RecordBuilder, layout_id: int, region: dict[int, np.ndarray], cores: int,
               resident: bool, geom: Geometry) -> None:
    """Host writes of a layout's region: every column the kernel reads,
    padding included (padding instead of boundary checks)."""
    _host_columns(b, Op.WR, Phase.REARRANGE, layout_id, region, cores, geom, resident)


# a contraction's read-back records per (n_b, n_v, n_o, slots, t_out, ko, res_base, cores, geometry):
# drafts of one op share them (built once, copied into each program's table by `_concat`)
_READBACKS: dict = {}


@functools.lru_cache(maxsize=16)
def _dense_rearrange(layout_id: int, sizes: tuple, cores: int, resident: bool, geom: Geometry) -> dict:
    """`_rearrange` of the regions {parity: columns 0 .. count - 1} (sizes:
    ((parity, count), ...)) as read-only record arrays.  A contraction's
    matrix region is always such a prefix, and the drafts of one op share a
    few of them (10 lengths over 180 drafts of a GEMV 20480 x 5120): built
    once, copied into each program's table by `_concat`."""
    b = RecordBuilder()
    _rearrange(b, layout_id, {p: np.arange(count) for p, count in sizes}, cores, resident, geom)
    records = b.build()
    for a in records.values():
        a.flags.writeable = False
    return records


def _readback(b: RecordBuilder, layout_id: int, layout: TensorLayout, cores: int, geom: Geometry) -> None:
    """Host reads of the result region, one SB RD per used column per core."""
    pos = np.asarray(layout.positions)
    bank = pos[:, 0]
    row = logical_row(pos[:, 1].astype(np.int64)) - geom.row_base(bank)     # parity-relative
    flat = row * geom.cols + pos[:, 2]
    if len(pos) and bank.min() == bank.max():      # one bank parity (a contraction's results)
        region = {int(bank[0]): _unique_columns(flat)}
    else:
        region = {int(p): _unique_columns(flat[bank == p]) for p in np.unique(bank)}
    _host_columns(b, Op.RD, Phase.READBACK, layout_id, region, cores, geom)


def _program(ctx: _Ctx, layouts, streams, host_data, readback: Readback, meta: dict) -> Program:
    records = stack_streams(streams)
    g = ctx.geom
    # the hardware facts `execute` needs (it sees only the Program)
    meta = dict(meta, result_shape=tuple(ctx.shapes[ctx.op.result.value]),
                result_dtype=ctx.options.get("result_dtype", "float32"),
                cols=g.cols, lanes=g.lanes, banks_per_unit=g.banks_per_unit)
    return lowered_program(ctx, layouts, records, host_data, readback,
                           column_stats(ctx, records, registers=(Op.AB_WR,), reads=(Op.RD_S, Op.RD), phased=True),
                           meta)


def _host_rows(values_idx: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Host-data rows: flat indices with -1 where invalid."""
    return np.where(valid, values_idx, -1).astype(np.int64)


# --------------------------------------------------------------------------
# contraction: a sequence of GEMVs per core
# --------------------------------------------------------------------------
def _contraction(ctx: _Ctx) -> Program:
    op, draft, tiles = ctx.op, ctx.draft, ctx.tiles
    if draft.lane_var not in op.reduction_vars:
        raise PimCompileError("hbm-pim MACs need the lanes along a reduction variable")
    # this lowering writes the input registers by group broadcast, whatever per-core commands the
    # hardware has (DCC's HBM-PIM, `simulator="dcc"`, has them: `backends/dcc/engine.py` lowers such
    # drafts' values from a broadcast one)
    split = register_split_error(op, draft, ctx.backend, ctx.shapes, per_core=False)
    if split:
        # the input registers are written once per group: cores needing other vectors would read
        # their neighbours' (a wrong result, not an error, if lowered)
        raise PimCompileError(f"hbm-pim: {split}")
    mi, vi = matrix_and_vector(op, ctx.shapes)
    M, V = op.operands[mi], op.operands[vi]
    mvars, vvars = set(M.vars), set(V.vars)
    outs = [v for v in op.output_vars]
    red = lane_order([v for v in (lv.name for lv in op.loop_vars) if v in op.reduction_vars], draft.lane_var)
    o_b = [v for v in outs if v in mvars and v in vvars]     # batch: both operands
    o_v = [v for v in outs if v in vvars and v not in mvars]  # GEMM columns: vector only
    o_m = [v for v in outs if v not in vvars]                 # GEMV rows: matrix only
    geom = ctx.geom
    lanes, ki, ko = geom.lanes, draft.ki, draft.ko
    xi = ki * lanes
    box = dict(zip(tiles.vars, (int(tiles.length[..., k].max()) for k in range(len(tiles.vars)))))
    n_b = int(np.prod([box[v] for v in o_b], dtype=np.int64))
    n_v = int(np.prod([box[v] for v in o_v], dtype=np.int64))
    n_o = int(np.prod([box[v] for v in o_m], dtype=np.int64))
    n_r = int(np.prod([box[v] for v in red], dtype=np.int64))
    t_in, t_out = -(-n_r // xi), -(-n_o // ko)
    reuse = ctx.options["register_reuse"]
    dataflow = draft.dataflow if reuse else "os"
    # partial slots per output: one per input tile unless outputs stay in GRF_B
    slots = 1 if (dataflow == "os" and reuse) else t_in
    bursts = ki * ko

    # --- M: KI x KO blocks, block (b, j, i) in bank i % 2 -------------------
    order_is = dataflow == "is" and ctx.options["data_block_layout"]
    n_par = [-(-(t_in - p) // 2) for p in (0, 1)]    # input tiles per bank parity

    def block_index(bb, jj, ii):
        return _block_index(bb, jj, ii, n_par, t_out, order_is)

    counters = [n_b * t_out * n_par[p] for p in (0, 1)]
    if (bursts % geom.cols) if bursts > geom.cols else (geom.cols % bursts):
        raise PimCompileError(f"hbm-pim: a {ki} x {ko} register block ({bursts} columns) does not tile "
                              f"rows of core.cols={geom.cols} columns")
    m_rows = [-(-counters[p] * bursts // geom.cols) for p in (0, 1)]
    if max(m_rows) > geom.data_rows:
        raise PimCompileError(f"hbm-pim: {max(m_rows)} rows of matrix data per bank exceed "
                              f"the {geom.data_rows} PIM rows")
    m_vars = tuple(o_b + o_m + list(red))

    def m_positions():
        b_idx, o_idx, r_idx = np.meshgrid(np.arange(n_b), np.arange(n_o), np.arange(n_r), indexing="ij")
        j, oo = o_idx // ko, o_idx % ko
        i, rem = r_idx // xi, r_idx % xi
        kk, lane = rem // lanes, rem % lanes
        flat = block_index(b_idx, j, i) * bursts + kk * ko + oo
        return np.stack([i % 2, *geom.position(i % 2, flat), lane], -1).reshape(-1, 4)

    m_pos = LazyPositions(m_positions, n_b * n_o * n_r)
    mbox = tuple(box[v] for v in m_vars)
    m_layout = tile_layout(tiles, "M", mi, m_vars, M.index_map, ctx.shapes[M.value], m_pos, mbox)

    # --- result: GRF_B stores into the odd bank, one column per output -----
    res_base = m_rows[1]
    res_rows = -(-n_b * n_v * slots * t_out * ko // geom.cols)
    if res_base + res_rows > geom.data_rows:
        raise PimCompileError(f"hbm-pim: {res_base + res_rows} rows of matrix data and results per bank "
                              f"exceed the {geom.data_rows} PIM rows")
    r_vars = tuple(o_b + o_v + o_m) + (("#slot",) if slots > 1 else ())
    rb, rv, ro, rs = np.meshgrid(np.arange(n_b), np.arange(n_v), np.arange(n_o), np.arange(slots),
                                 indexing="ij")
    rflat = (((rb * n_v + rv) * slots + rs) * t_out + ro // ko) * ko + ro % ko
    r_pos = np.stack([np.ones_like(rflat), *geom.position(1, res_base * geom.cols + rflat),
                      -np.ones_like(rflat)], -1)
    r_pos = r_pos.reshape(-1, 4)
    rbox = tuple(box[v] for v in o_b + o_v + o_m) + ((slots,) if slots > 1 else ())
    res_layout = tile_layout(tiles, "acc", -1, r_vars, *acc_space(op), r_pos, rbox,
                             synthetic={"#slot": slots} if slots > 1 else None)

    # --- host data: the vector operand, one row per GRF_A register write ----
    v_rows = _vector_rows(ctx, V, o_b, o_v, red, n_r, xi, lanes)

    # --- the command stream (shared by all groups) ---------------------------
    seq = GemvSequence((n_b, n_v, t_out, t_in, ki, ko, n_par[0], n_par[1], res_base, slots),
                       (dataflow == "os", bool(reuse), bool(order_is)),
                       (geom.cols, 0 if geom.pair else geom.data_rows))
    frame = ctx.options["frame"]
    kernel = (_frame_records("open", geom.banks, geom.banks_per_bg) if frame else None, seq,
              _frame_records("close", geom.banks, geom.banks_per_bg) if frame else None)     # written once, in _concat

    resident = mi in set(ctx.options["resident"])
    pre = _dense_rearrange(0, tuple((p, counters[p] * bursts) for p in (0, 1) if counters[p]), tiles.cores,
                           resident, geom)
    # the read-back records: a function of the result layout, which these numbers and the geometry fix
    post_key = (n_b, n_v, n_o, slots, t_out, ko, res_base, tiles.cores, geom)
    post = _READBACKS.get(post_key)
    if post is None:
        b = RecordBuilder()
        _readback(b, 2, res_layout, tiles.cores, geom)
        post = b.build()
        for a in post.values():
            a.flags.writeable = False
        if len(_READBACKS) >= 64:
            _READBACKS.clear()
        _READBACKS[post_key] = post
    stream = _concat(pre, kernel, post)
    layouts = [m_layout, _vector_layout(tiles, V, vi, ctx.shapes), res_layout]
    rb_ = Readback(2, combiner="add", lane_partials=True, epilogue_on_host=True)
    meta = dict(kind="gemv-sequence", M=mi, v=vi, host_data_operands=(vi,), n_b=n_b, n_v=n_v, n_o=n_o, n_r=n_r, t_in=t_in,
                t_out=t_out, slots=slots, ki=ki, ko=ko)
    return _program(ctx, layouts, [stream], [v_rows], rb_, meta)


def _block_index(bb, jj, ii, n_par, t_out: int, order_is: bool):
    """Position of matrix block (b, j, i) among the blocks of its bank
    (parity i % 2): blocks are stored in the order the dataflow visits them
    (n_par: input tiles per bank parity)."""
    np_ = np.where(np.asarray(ii) % 2 == 0, n_par[0], n_par[1])
    if order_is:
        return (bb * np_ + ii // 2) * t_out + jj
    return (bb * t_out + jj) * np_ + ii // 2


@dataclass(frozen=True)
class GemvSequence:
    """The kernel records of a contraction (`_contraction`): per invocation
    (b, v, j, i) in loop order, the frame entry (ZERO_B), the GRF_A write
    when the inputs change, the MAC column runs over block (b, j, i), and
    the GRF_B store and frame exit after an output tile's last input tile.
    Written in place by `program.concat` (compiled, `native.gemv_sequence`;
    `_kernel_slots` gives the same records in numpy).

    shape: (n_b, n_v, t_out, t_in, ki, ko, n_par0, n_par1, res_base, slots)
    flags: (output_stationary, register_reuse, order_is)
    geometry: (cols, half): columns per row, and 0 when the parities are
    an even / odd bank pair, else the logical row of parity 1's data in the
    unit's one bank (all-bank commands then address bank 0)"""
    shape: tuple
    flags: tuple
    geometry: tuple

    def _run(self, out: np.ndarray) -> int:
        return int(gemv_sequence(np.asarray(self.shape, np.int64), np.asarray(self.flags, np.int64),
                                 _SEQUENCE_CODES, np.asarray(_even_then_odd(self.shape[3]), np.int64),
                                 np.asarray(self.geometry, np.int64), out))

    @functools.cached_property
    def size(self) -> int:
        """The number of records (a counting pass of the emitter)."""
        return self._run(np.zeros((len(RECORD_FIELDS), 0), np.int32))

    def __len__(self) -> int:
        return self.size

    def write(self, out: np.ndarray) -> None:
        self._run(out)


_SEQUENCE_CODES = np.array([Op.AB_WR, Op.PIM_RD, Op.PIM_WR, CONF_ROW, GRF_A_COL, GRF_A, GRF_B, Crf.ZERO_B,
                            Crf.MODE, Crf.HOST_REG, Crf.MAC, Crf.STORE, Phase.REARRANGE, Phase.COMPUTE],
                           np.int64)


def _kernel_slots(seq: GemvSequence) -> SlotTable:
    """`GemvSequence`'s records in numpy (per-invocation slots), the
    readable definition the compiled emitter is tested against."""
    n_b, n_v, t_out, t_in, ki, ko, n_par0, n_par1, res_base, slots = seq.shape
    output_stationary, reuse, order_is = seq.flags
    cols, half = seq.geometry
    n_par, bursts = (n_par0, n_par1), ki * ko
    # one row per kernel invocation (b, v, j, i) in loop order
    if output_stationary:
        order = np.array(_even_then_odd(t_in))
        bb, vv, jj, ii = (a.reshape(-1) for a in np.meshgrid(np.arange(n_b), np.arange(n_v),
                                                               np.arange(t_out), order, indexing="ij"))
    else:
        bb, vv, ii, jj = (a.reshape(-1) for a in np.meshgrid(np.arange(n_b), np.arange(n_v),
                                                               np.arange(t_in), np.arange(t_out),
                                                               indexing="ij"))
    K = len(bb)
    key = (bb * n_v + vv) * t_in + ii
    # register reuse: write GRF_A only when the invocation's inputs differ from the last ones
    write = np.ones(K, bool) if not reuse else np.concatenate([[True], key[1:] != key[:-1]])
    if slots == 1:        # output-stationary with reuse: one frame per output tile
        first_i = np.concatenate([[True], (jj[1:] != jj[:-1]) | (bb[1:] != bb[:-1]) | (vv[1:] != vv[:-1])])
        last_i = np.concatenate([first_i[1:], [True]])
        ss = np.zeros(K, np.int64)
    else:                 # a frame per invocation; partial slot = input tile
        first_i = last_i = np.ones(K, bool)
        ss = ii
    enter = chunk(Op.AB_WR, K, bank=0, row=CONF_ROW, col=0, aux=Crf.ZERO_B)
    exit_ = chunk(Op.AB_WR, K, bank=0, row=CONF_ROW, col=0, aux=Crf.MODE)
    wr = chunk(Op.AB_WR, K, bank=1, row=CONF_ROW, col=GRF_A_COL, n=ki, reg=GRF_A, reg_step=1, src=0,
               aux=Crf.HOST_REG, arg=key * ki, phase=Phase.REARRANGE)
    slot_list = [(first_i, enter), (write, wr)]
    block = _block_index(bb, jj, ii, n_par, t_out, order_is) * bursts
    per_run = min(bursts, cols)
    par = ii % 2
    for r in range(-(-bursts // cols)):      # a block spans bursts / cols rows (aligned)
        start = block + r * cols
        slot_list.append((np.ones(K, bool), chunk(Op.PIM_RD, K, bank=par if half == 0 else 0 * par,
                                                  row=phys_row(start // cols + par * half),
                                                  col=start % cols, n=per_run, reg=r * cols, reg_step=ko,
                                                  aux=Crf.MAC, src=0, arg=GRF_A)))
    first = (((bb * n_v + vv) * slots + ss) * t_out + jj) * ko + res_base * cols
    slot_list.append((last_i, chunk(Op.PIM_WR, K, bank=1 if half == 0 else 0, row=phys_row(first // cols + half),
                                    col=first % cols,
                                    n=ko, reg=GRF_B, reg_step=1, aux=Crf.STORE, src=2)))
    slot_list.append((last_i, exit_))
    return SlotTable.of(slot_list, K)


def _even_then_odd(t_in: int):
    """Input tiles in the reference's order: every even tile, then every odd
    one (the CRF runs MAC EVEN_BANK, JUMP, MAC ODD_BANK, JUMP)."""
    return list(range(0, t_in, 2)) + list(range(1, t_in, 2))


def _vector_layout(tiles: CoreTiles, V, vi: int, shapes) -> TensorLayout:
    """Placeholder layout entry for the register operand (its data travels
    as host-data rows, see `_vector_rows`)."""
    return tile_layout(tiles, "v", vi, (), (), shapes[V.value], np.zeros((1, 4), np.int32), ())


def _vector_rows(ctx: _Ctx, V, o_b, o_v, red, n_r, xi, lanes) -> LazyArray:
    """Host-data rows for GRF_A writes [G, n_bv * t_in * ki, 16]: for every
    (batch b, column v, input tile i) and register kk, the 16 global flat
    indices of the vector operand (-1 for padding / out-of-band).  Built on
    first use (`execute`; timing never reads them).

    All cores of a group share these registers (broadcast), so the data is
    taken from core 0 of each group; the partitioner guarantees the cores of
    a group agree (no core split of the vector's dimension sets)."""
    box = dict(zip(ctx.tiles.vars, (int(ctx.tiles.length[..., k].max()) for k in range(len(ctx.tiles.vars)))))
    n_bv = int(np.prod([box[v] for v in list(o_b) + list(o_v)], dtype=np.int64))
    shape = (ctx.tiles.groups, n_bv * -(-n_r // xi) * (xi // lanes), lanes)
    return LazyArray(lambda: _vector_rows_now(ctx, V, o_b, o_v, red, n_r, xi, lanes), shape, np.int64)


def _vector_rows_now(ctx: _Ctx, V, o_b, o_v, red, n_r, xi, lanes) -> np.ndarray:
    """The table of `_vector_rows`."""
    tiles = ctx.tiles
    box = dict(zip(tiles.vars, (int(tiles.length[..., k].max()) for k in range(len(tiles.vars)))))
    dims = list(o_b) + list(o_v) + list(red)
    sizes = [box[v] for v in dims]
    G = tiles.groups
    grids = np.meshgrid(*[np.arange(s) for s in sizes], indexing="ij") if dims else []
    env = {}
    valid = np.ones((G,) + tuple(sizes), bool)
    for v, grid in zip(dims, grids):
        k = tiles.var_index(v)
        start = tiles.start[:, 0, k].reshape((G,) + (1,) * len(dims))
        length = tiles.length[:, 0, k].reshape((G,) + (1,) * len(dims))
        env[v] = start + grid[None]
        valid &= grid[None] < length
    # variables the vector does not depend on are irrelevant; bands restrict points
    for expr, lo, hi in tiles.bands:
        if set(expr.vars) <= set(env):
            val, _ = expr.evaluate(env)
            valid &= (val >= lo[:, 0].reshape((G,) + (1,) * len(dims))) & \
                     (val < hi[:, 0].reshape((G,) + (1,) * len(dims)))
    shape = ctx.shapes[V.value]
    flat = np.zeros_like(valid, dtype=np.int64)
    stride = 1
    for expr, size in reversed(list(zip(V.index_map, shape))):
        full = {v: env.get(v, np.zeros((1,) * (1 + len(dims)), np.int64)) for v in expr.vars}
        idx, _ = expr.evaluate(full)
        idx = np.broadcast_to(idx, valid.shape)
        valid &= (idx >= 0) & (idx < size)
        flat = flat + np.clip(idx, 0, size - 1) * stride
        stride *= size
    n_bv = int(np.prod(sizes[:len(o_b) + len(o_v)], dtype=np.int64))
    flat = flat.reshape(G, n_bv, n_r)
    valid = valid.reshape(G, n_bv, n_r)
    t_in = -(-n_r // xi)
    pad = t_in * xi - n_r
    flat = np.pad(flat, ((0, 0), (0, 0), (0, pad)))
    valid = np.pad(valid, ((0, 0), (0, 0), (0, pad)))
    rows = _host_rows(flat, valid).reshape(G, n_bv * t_in * (xi // lanes), lanes)
    return rows


def _concat(pre, kernel, post) -> dict[str, np.ndarray]:
    """Rearrangement, kernel and read-back records (RecordBuilders or record
    dicts; the kernel may be a tuple of record dicts and writers such as
    `GemvSequence`), back to back, in one copy.  The kernel and the read-back start at host
    synchronisation points: the host launches the kernel once its data is
    written and reads results once the kernel has finished."""
    def parts_of(p):
        if isinstance(p, RecordBuilder):
            return [p.build()]
        return [q for q in p if q is not None] if isinstance(p, tuple) else [p]
    sections = [parts_of(p) for p in (pre, kernel, post)]
    sizes = [sum(record_count(q) for q in section) for section in sections]
    records = concat(*(q for section in sections for q in section))
    for start, size in ((sizes[0], sizes[1]), (sizes[0] + sizes[1], sizes[2])):
        if size:
            records["sync"][start] = 1
    return records


# --------------------------------------------------------------------------
# elementwise: a CRF program streamed over every operand column
# --------------------------------------------------------------------------
def _elementwise(ctx: _Ctx) -> Program:
    op, draft, tiles = ctx.op, ctx.draft, ctx.tiles
    scalar_ops = op.scalar_operands
    steps, consts = compile_elementwise(op, scalar_ops)
    if len(consts) > ctx.geom.lanes:
        raise PimCompileError(f"hbm-pim: the body needs {len(consts)} scalars, the SRF register holds "
                              f"core.lanes={ctx.geom.lanes}")
    loop = lane_order(tiles.vars, draft.lane_var)
    box = tiles.box(loop)
    n = int(np.prod(box, dtype=np.int64))
    geom = ctx.geom
    lanes, ko, cols = geom.lanes, draft.ko, geom.cols
    n_cols = -(-n // lanes)
    t = -(-n_cols // (2 * ko))                    # tiles of 2 x ko columns (even + odd bank)
    col = np.arange(n) // lanes
    tile, par, burst = col // (2 * ko), (col // ko) % 2, col % ko
    region_rows = -(-t * ko // cols)
    bank_ops = sorted({s[1] for s in steps if s[1] is not None})
    layouts, bases = [], {}
    for slot, k in enumerate(bank_ops + [-1]):
        base = slot * region_rows
        if base + region_rows > geom.data_rows:
            raise PimCompileError("hbm-pim: elementwise operands exceed the PIM rows of a bank")
        bflat = base * cols + tile * ko + burst
        pos = np.stack([par, *geom.position(par, bflat), np.arange(n) % lanes], -1)
        if k >= 0:
            acc = op.operands[k]
            layouts.append(tile_layout(tiles, f"x{k}", k, loop, acc.index_map, ctx.shapes[acc.value], pos, box))
        else:
            layouts.append(tile_layout(tiles, "acc", -1, loop, *acc_space(op), pos, box))
        bases[k] = base

    b = RecordBuilder()
    if ctx.options["frame"]:
        _frame_open(b, ctx.geom.banks, ctx.geom.banks_per_bg)
    if consts:
        b.add(Op.AB_WR, bank=1, row=CONF_ROW, col=SRF_COL, n=1, reg=SRF, aux=Crf.HOST_SRF)
    _enter_pim(b)
    lid = {k: i for i, k in enumerate(bank_ops + [-1])}
    for tt in range(t):
        for p in (0, 1):
            reg = GRF_A if p == 0 else GRF_B
            first = tt * ko
            for code, k, slot in steps:
                src_k = k if k is not None else steps[0][1]      # MOV_RELU re-reads a column
                for bank, row, c0, nn, off in _parity_runs(geom, p, bases[src_k] * cols + first + np.arange(ko)):
                    b.add(Op.PIM_RD, bank=bank, row=row, col=c0, n=nn, reg=reg + off, reg_step=1, aux=code,
                          src=lid[src_k], arg=0 if slot is None else slot)
            for bank, row, c0, nn, off in _parity_runs(geom, p, bases[-1] * cols + first + np.arange(ko)):
                b.add(Op.PIM_WR, bank=bank, row=row, col=c0, n=nn, reg=reg + off, reg_step=1, aux=Crf.STORE,
                      src=lid[-1])
    _exit_pim(b)
    if ctx.options["frame"]:
        _frame_close(b, ctx.geom.banks, ctx.geom.banks_per_bg)
    pre = RecordBuilder()
    resident = set(ctx.options["resident"])
    for k in bank_ops:
        region = {p: bases[k] * cols + np.arange(t * ko) for p in (0, 1)}
        _rearrange(pre, lid[k], region, tiles.cores, k in resident, geom)
    post = RecordBuilder()
    _readback(post, lid[-1], layouts[lid[-1]], tiles.cores, geom)
    host_data = [np.zeros((tiles.groups, 0, lanes), np.int64)]
    meta = dict(kind="elementwise", steps=steps, srf=consts, tiles=t, ko=ko)
    return _program(ctx, layouts, [_concat(pre, b, post)], host_data,
                    Readback(lid[-1], combiner="add", lane_partials=False, epilogue_on_host=False), meta)


# --------------------------------------------------------------------------
# reduction (add): FILL then ADD the columns of each output into a register
# --------------------------------------------------------------------------
def _reduction(ctx: _Ctx) -> Program:
    op, draft, tiles = ctx.op, ctx.draft, ctx.tiles
    if op.combiner != "add":
        raise PimCompileError(f"hbm-pim has no {op.combiner} instruction")
    geom = ctx.geom
    lanes, ko, cols = geom.lanes, draft.ko, geom.cols
    lane = draft.lane_var
    lane_red = lane in op.reduction_vars
    outs = [v for v in tiles.vars if v not in op.reduction_vars]
    reds = [v for v in tiles.vars if v in op.reduction_vars]
    if lane_red:
        acc_vars = outs
        step_vars = lane_order(reds, lane)
    else:
        acc_vars = lane_order(outs, lane)
        step_vars = reds
    box = dict(zip(tiles.vars, tiles.box(tiles.vars)))
    # columns: an accumulator owns ceil(n_step / lanes) columns (lane along a
    # reduction var) or the lane var groups `lanes` accumulators into one column
    if lane_red:
        n_acc = int(np.prod([box[v] for v in acc_vars], dtype=np.int64))
        n_step = int(np.prod([box[v] for v in step_vars], dtype=np.int64))
        cols_per_acc = -(-n_step // lanes)
        n_colacc = n_acc
    else:
        other = [v for v in acc_vars if v != lane]
        n_lane = box[lane]
        n_other = int(np.prod([box[v] for v in other], dtype=np.int64))
        n_colacc = n_other * -(-n_lane // lanes)
        n_step = int(np.prod([box[v] for v in step_vars], dtype=np.int64))
        cols_per_acc = n_step
    t_acc = -(-n_colacc // ko)                 # register batches of ko accumulators
    # x layout: column (batch j, step s, register o) in bank j % 2
    x_vars = tuple(acc_vars) + tuple(step_vars) if lane_red else tuple(
        [v for v in acc_vars if v != lane]) + tuple(step_vars) + (lane,)
    x_box = tuple(box[v] for v in x_vars)
    grids = np.meshgrid(*[np.arange(s) for s in x_box], indexing="ij")
    if lane_red:
        a_i = np.ravel_multi_index([g for g in grids[:len(acc_vars)]], [box[v] for v in acc_vars]) \
            if acc_vars else np.zeros_like(grids[0])
        s_i = np.ravel_multi_index([g for g in grids[len(acc_vars):]], [box[v] for v in step_vars])
        colacc, step, ln = a_i, s_i // lanes, s_i % lanes
    else:
        no = len(acc_vars) - 1
        o_i = np.ravel_multi_index([g for g in grids[:no]], [box[v] for v in acc_vars if v != lane]) \
            if no else np.zeros_like(grids[0])
        step = np.ravel_multi_index([g for g in grids[no:no + len(step_vars)]], [box[v] for v in step_vars]) \
            if step_vars else np.zeros_like(grids[0])
        lv = grids[-1]
        colacc, ln = o_i * -(-box[lane] // lanes) + lv // lanes, lv % lanes
    jb, o = colacc // ko, colacc % ko
    bank_sel = jb % 2
    per_bank_batch = jb // 2
    xflat = (per_bank_batch * cols_per_acc + step) * ko + o
    x_pos = np.stack([bank_sel, *geom.position(bank_sel, xflat), ln], -1).reshape(-1, 4)
    x_rows = -(-(-(-t_acc // 2)) * cols_per_acc * ko // cols)
    x_layout = tile_layout(tiles, "x", 0, x_vars, tuple(op.operands[0].index_map),
                           ctx.shapes[op.operands[0].value], x_pos, x_box)
    # result: one column per accumulator register, in bank j % 2 after x
    r_vars = tuple(acc_vars) if lane_red else tuple([v for v in acc_vars if v != lane]) + (lane,)
    r_box = tuple(box[v] for v in r_vars)
    rg = np.meshgrid(*[np.arange(s) for s in r_box], indexing="ij")
    if lane_red:
        ca = np.ravel_multi_index(rg, r_box) if r_box else np.zeros((), np.int64)
        rl = -np.ones_like(ca)
    else:
        no = len(r_vars) - 1
        oi = np.ravel_multi_index(rg[:no], r_box[:no]) if no else np.zeros_like(rg[0])
        ca, rl = oi * -(-box[lane] // lanes) + rg[-1] // lanes, rg[-1] % lanes
    rj, ro = ca // ko, ca % ko
    rflat = (x_rows * cols) + (rj // 2) * ko + ro
    r_pos = np.stack([rj % 2, *geom.position(rj % 2, rflat), rl], -1).reshape(-1, 4)
    if x_rows + -(-(-(-t_acc // 2)) * ko // cols) > geom.data_rows:
        raise PimCompileError("hbm-pim: reduction operands and results exceed the PIM rows of a bank")
    res_layout = tile_layout(tiles, "acc", -1, r_vars, *acc_space(op), r_pos, r_box)

    b = RecordBuilder()
    if ctx.options["frame"]:
        _frame_open(b, ctx.geom.banks, ctx.geom.banks_per_bg)
    _enter_pim(b)
    for jb_ in range(t_acc):
        p = jb_ % 2
        reg = GRF_A if p == 0 else GRF_B
        for s in range(cols_per_acc):
            first = ((jb_ // 2) * cols_per_acc + s) * ko
            code = Crf.FILL if s == 0 else Crf.ADD
            for bank, row, c0, nn, off in _parity_runs(geom, p, first + np.arange(ko)):
                b.add(Op.PIM_RD, bank=bank, row=row, col=c0, n=nn, reg=reg + off, reg_step=1, aux=code, src=0)
        first = x_rows * cols + (jb_ // 2) * ko
        for bank, row, c0, nn, off in _parity_runs(geom, p, first + np.arange(ko)):
            b.add(Op.PIM_WR, bank=bank, row=row, col=c0, n=nn, reg=reg + off, reg_step=1, aux=Crf.STORE, src=1)
    _exit_pim(b)
    if ctx.options["frame"]:
        _frame_close(b, ctx.geom.banks, ctx.geom.banks_per_bg)
    pre = RecordBuilder()
    region = {p: np.arange(-(-(t_acc - p) // 2) * cols_per_acc * ko) for p in (0, 1) if t_acc > p}
    _rearrange(pre, 0, region, tiles.cores, 0 in set(ctx.options["resident"]), geom)
    post = RecordBuilder()
    _readback(post, 1, res_layout, tiles.cores, geom)
    meta = dict(kind="reduction", t_acc=t_acc, cols_per_acc=cols_per_acc, ko=ko)
    return _program(ctx, [x_layout, res_layout], [_concat(pre, b, post)],
                    [np.zeros((tiles.groups, 0, lanes), np.int64)],
                    Readback(1, combiner="add", lane_partials=lane_red, epilogue_on_host=True), meta)
