"""Lowering to UPMEM programs: host<->MRAM transfers and per-DPU tasklet work.

An UPMEM program (ATiM §2.1, §5.1-5.3; PrIM's programming model) is

1. host -> MRAM transfers (`XFER_H2D`): every operand's per-DPU data tile is
   written into its DPU's MRAM bank.  *Parallel* transfers push the same
   number of bytes to every DPU of a rank in one call (`dpu_push_xfer`),
   *serial* ones address one DPU at a time, a *broadcast* writes one buffer
   to every DPU (data all DPUs need).  *Bulk* transfers coalesce the
   host-contiguous runs of a tile into one transfer each (ATiM Fig. 7c);
   without bulk every element is its own transfer (Fig. 7b).
2. the kernel (`LAUNCH`, then per tasklet `DMA_RD` MRAM -> WRAM of one
   caching tile per operand, `DPU_EXEC` of the tile's instructions,
   `DMA_WR` WRAM -> MRAM of finished outputs).  Multi-level tiling as
   ATiM's: outputs are bound to tasklets, the innermost reduction loop is
   cut into caching tiles of `draft.wram_tile` bytes; when a DPU holds
   fewer outputs than tasklets the reduction tiles are spread over the
   tasklets instead and their partials merged on the DPU (or read back per
   tasklet, PrIM RED).
3. MRAM -> host transfers (`XFER_D2H`) of results, or of partial results
   when a reduction loop is split over DPUs (ATiM's rfactor), which the host
   reduces (`Readback`, merged on the host).  An op's epilogue (GEMV's
   alpha * Ax + beta * y) runs in that host merge; its operands never go to
   the DPUs (an epilogue on the DPU is not lowered yet).

All DPUs run one SPMD kernel, so the program is ONE record stream shared by
every rank (`commands` has a leading axis of 1) and, inside a rank, by every
DPU (`core = -1`; serial transfers name their DPU).  The kernel records
describe the largest DPU tile; smaller (boundary) tiles run the same code
with tighter loop bounds.

Record fields (see `Records`):

========  ==================================================================
XFER_*    src = layout, arg = first local position, n = bytes per transfer,
          aux = number of transfers (equal size, local start positions
          `reg_step` apart), reg = mode (XFER_PARALLEL / SERIAL /
          BROADCAST), core = DPU for serial transfers else -1,
          row / col = MRAM address of the first byte (1 KB rows, 8 B
          columns), resident = 1 for a resident operand's placement.
DMA_*     reg = tasklet, src = layout, n = bytes, row / col = MRAM address.
DPU_EXEC  reg = tasklet, n = instructions, aux = Exec code, arg = first
          compute point, row = number of points, bank = partial slot (the
          tasklet for split reductions), src = output layout.
LAUNCH    aux = Sync.LAUNCH (kernel boot) or Sync.BARRIER (all tasklets).
========  ==================================================================

Compute points: the kernel's iteration points on one DPU, numbered in the
C order of `meta["points"]` (a TensorLayout over output vars then reduction
vars, the innermost reduction var padded), so the value interpreter can
recompute which operand words each EXEC reads.

Instruction counts per compute point (UPMEM's in-order DPU, one instruction
per issue slot; counted from the op body, not measured):

* loads: one `lw` per array operand read from the WRAM tile; store: one `sw`
  per elementwise result;
* add / sub: 1 (2 for 8-byte elements: add + addc); neg 1; max / min 2
  (compare-and-jump + move); converts 0;
* multiply: the DPU has only 8x8-bit multipliers, so a 32-bit `*` is the
  runtime's `__mulsi3`: a call / operand swap / return overhead of
  `MUL_CALL` instructions plus one `mul_step` per significant bit of the
  multiplier (the loop exits when the remaining bits are zero; option
  `mul_bits`, default 32 = arbitrary int32 data).  A multiply by a
  compile-time constant is strength-reduced to `MUL_CONST` shifts / adds;
* loop overhead: 2 (index increment + conditional branch) per point;
* boundary checks (option `boundary`): "pad" — ATiM's padding + DMA-aware
  boundary-check elimination with loop-bound tightening: MRAM regions are
  allocated in multiples of the caching tile, DMAs have static full-tile
  sizes, no per-point check; "element" — TIR's default guarded loops: a
  compare + branch per point and dynamic DMA sizes; "tile" — PrIM's
  hand-written kernels: per-tile size computation (`TILE_BOUND`
  instructions), dynamic DMA sizes, unguarded inner loops;
* per caching tile `TILE_OVERHEAD`, per DMA `DMA_ISSUE`, per output of a
  reduction `ACC_INIT`; `acc_in_wram` (PrIM's `bufferC[pos] += ...` through
  a pointer the compiler cannot prove unaliased) adds a load + store per
  point.

Options (all switchable): bulk, bank_parallel, padding (alias for
boundary="pad" / "element"), boundary, broadcast, resident, elem_bytes
(8 approximates int64 data as int32 values with 8-byte storage),
mul_bits, acc_in_wram, rows_per_block (outputs per tasklet block: PrIM
GEMV's 8-byte output cache holds 2), tasklet_partials, tasklet_split
("auto": reduction tiles go over the tasklets when a DPU has fewer outputs
than tasklets; "outputs": only outputs are bound to tasklets; "prim":
outputs for contractions, auto for reductions), result_dtype.
`PRIM_OPTIONS` are the switches that make the baseline draft PrIM's code.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from ...errors import PimCompileError
from ...hw.core import Backend
from ...lower.context import LowerContext
from ...lower.layout import acc_space, tile_layout, value_shapes
from ...lower.program import RECORD_FIELDS, LazyPositions, Op, Phase, Program, Readback, Records, TensorLayout
from ...lower.stats import ProgramStats, lowered_program, program_stats
from ...lower.tiles import core_tiles
from ...partition.draft import Draft
from ...partition.verify import matrix_and_vector
from ...trace.ir import Arg, Const, PimOp, Prim

# --------------------------------------------------------------------------
# constants of the DPU code model (instructions; see module docstring)
# --------------------------------------------------------------------------
MUL_CALL = 5          # __mulsi3: call, operand swap test, init, result move, return (assumption)
MUL_CONST = 3         # constant multiply strength-reduced to shifts / adds (assumption)
LOOP = 2              # index increment + conditional branch per point
CHECK = 2             # compare + branch of a per-point boundary check
TILE_OVERHEAD = 3     # caching-tile loop: counter, branch, address update
TILE_BOUND = 4        # PrIM-style l_size = min(BLOCK, size - index) and its shift
DMA_ISSUE = 2         # address computation + ldma / sdma
ARG_LOADS = 4         # every tasklet loads the kernel's sizes and offsets into registers
ACC_INIT = 2          # zero the accumulator, store it to the WRAM output cache
MERGE_PER_PARTIAL = 3  # intra-DPU merge: lw of a tasklet's partial + add + handshake step
BARRIER_COST = 6      # barrier_wait: mutex acquire, counter update, release, test
DMA_MAX = 2048        # UPMEM SDK: mram_read / mram_write move at most 2048 B
DMA_ALIGN = 8         # UPMEM SDK: MRAM DMA addresses / sizes are multiples of 8 B
MRAM_ROW = 1024       # bytes per MRAM "row" of the position table (preset: 128 x 8 B columns)


class Xfer(enum.IntEnum):
    """Host transfer modes (record field `reg` of XFER_H2D / XFER_D2H)."""
    PARALLEL = 0      # dpu_push_xfer: same size to every DPU of a rank
    SERIAL = 1        # dpu_copy_to / from one DPU at a time
    BROADCAST = 2     # dpu_broadcast_to: one buffer to every DPU


class Exec(enum.IntEnum):
    """DPU_EXEC codes (record field `aux`)."""
    ELEMENTWISE = 1   # out[p] = body(operands[p]) for the points of the record
    REDUCE = 2        # acc[slot(p)] (combiner)= body(operands[p])
    MERGE = 3         # acc[:, slot 0] (combiner)= acc[:, slot t] for every tasklet t
    OVERHEAD = 4      # instructions without data effect (barrier, argument loads)


class Sync(enum.IntEnum):
    LAUNCH = 1        # boot the DPUs of every rank (dpu_launch)
    BARRIER = 2       # all tasklets of a DPU wait for each other


DEFAULT_OPTIONS = dict(bulk=True, bank_parallel=True, padding=True, boundary=None, broadcast=True,
                       resident=(), elem_bytes=4, mul_bits=32, acc_in_wram=False, rows_per_block=1,
                       tasklet_partials=False, tasklet_split="auto", result_dtype="int32")

# PrIM's hand-written kernels as switches on the baseline draft (PrIM source:
# VA/RED/GEMV dpu/task.c): per-block l_size bound computation, GEMV's
# `bufferC[pos] += bufferA[i] * bufferB[i]` through WRAM, its 8-byte output
# cache of 2 int32 rows per tasklet block, RED's read-back of every tasklet's
# result, GEMV's input data `rand() % 50` (6-bit multipliers) and its parallel
# (not broadcast) transfer of the vector to every DPU.
PRIM_OPTIONS = dict(boundary="tile", acc_in_wram=True, rows_per_block=2, tasklet_partials=True,
                    mul_bits=6, broadcast=False, tasklet_split="prim")


@dataclass(frozen=True)
class _Ctx(LowerContext):
    """`LowerContext`, the element width and the boundary-check style."""
    eb: int            # bytes per element in MRAM
    boundary: str      # "pad" | "element" | "tile"


def _boundary(opts: dict) -> str:
    """The boundary-check style the options ask for: `boundary`, or by
    default "pad" with padding on and per-element checks without."""
    return opts["boundary"] or ("pad" if opts["padding"] else "element")


def lower_upmem(op: PimOp, draft: Draft, backend: Backend, shapes: dict | None = None,
                **options) -> Program:
    """Lower one op under `draft` to an UPMEM program (see module docstring).

    op: contraction, elementwise or reduction PimOp (integer arithmetic).
    draft: groups = ranks, cores = DPUs per rank, tasklets, wram_tile (bytes),
        reduction "host" = ATiM's rfactor (partials merged on the host).
    options: see DEFAULT_OPTIONS / PRIM_OPTIONS.

    Example:
        >>> prog = lower_upmem(op, draft, get_backend("upmem"))      # doctest: +SKIP
        >>> prog.stats.h2d_bytes, prog.stats.extra["instructions"]     # doctest: +SKIP
    """
    unknown = set(options) - set(DEFAULT_OPTIONS)
    if unknown:
        raise TypeError(f"lower_upmem got unknown option(s) {sorted(unknown)}; "
                        f"valid: {sorted(DEFAULT_OPTIONS)}")
    opts = {**DEFAULT_OPTIONS, **options}
    boundary = _boundary(opts)
    if boundary not in ("pad", "element", "tile"):
        raise ValueError(f"boundary must be 'pad', 'element' or 'tile', got {boundary!r}")
    opts["boundary"] = boundary
    opts["padding"] = boundary == "pad"
    eb = int(opts["elem_bytes"])
    if eb not in (4, 8):
        raise ValueError(f"elem_bytes must be 4 or 8, got {eb}")
    if op.kind not in ("contraction", "elementwise", "reduction"):
        raise PimCompileError(f"upmem cannot run a {op.kind} op ({op.name})")
    if draft.wram_tile < DMA_ALIGN or draft.wram_tile % DMA_ALIGN or draft.wram_tile > DMA_MAX:
        raise PimCompileError(f"upmem: wram_tile={draft.wram_tile} B must be a multiple of "
                              f"{DMA_ALIGN} B and at most {DMA_MAX} B (one mram_read)")
    if draft.tasklets > backend.core.tasklets:
        raise PimCompileError(f"upmem: {draft.tasklets} tasklets > {backend.core.tasklets}")
    ctx = _Ctx(op, draft, backend, core_tiles(op, draft), value_shapes(op, shapes), opts, eb, boundary)
    return _lower(ctx)


# --------------------------------------------------------------------------
# geometry
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class _Geom:
    """The per-DPU kernel loop nest.

    out_vars: output loop vars (outer), red_vars: reduction vars (the last
    one is the chunked innermost loop).  box: padded box of out_vars +
    red_vars; O outputs, Rout outer reduction points, Rin the innermost
    (padded) reduction extent and Rin_len its largest real length.  For an
    elementwise op red_vars is empty and the innermost out var plays Rin's
    role (tiles run along the flattened box)."""
    out_vars: tuple
    red_vars: tuple
    box: tuple
    O: int
    Rout: int
    Rin: int
    Rin_len: int
    E: int

    @property
    def points(self) -> int:
        return self.O * self.Rout * self.Rin


def _roundup(a: int, b: int) -> int:
    return -(-a // b) * b


def _geometry(ctx: _Ctx) -> _Geom:
    op, tiles, eb = ctx.op, ctx.tiles, ctx.eb
    E = ctx.draft.wram_tile // eb
    names = tuple(lv.name for lv in op.loop_vars)
    red = tuple(v for v in names if v in op.reduction_vars)
    out = tuple(v for v in names if v not in op.reduction_vars)
    lengths = {v: int(tiles.length[..., tiles.var_index(v)].max()) for v in names}
    align = DMA_ALIGN // eb
    inner = red[-1] if red else out[-1]
    n_in = lengths[inner]
    pad_to = E if ctx.boundary == "pad" else align
    padded = dict(lengths)
    padded[inner] = _roundup(max(n_in, 1), pad_to)
    box = tuple(padded[v] for v in out + red)
    if red:
        O = int(np.prod([padded[v] for v in out], dtype=np.int64))
        Rout = int(np.prod([padded[v] for v in red[:-1]], dtype=np.int64))
        Rin = padded[inner]
    else:
        O = int(np.prod([padded[v] for v in out[:-1]], dtype=np.int64))
        Rout, Rin = 1, padded[inner]
    return _Geom(out, red, box, O, Rout, Rin, n_in, E)


# --------------------------------------------------------------------------
# layouts in MRAM
# --------------------------------------------------------------------------
def _positions(base: int, n: int, eb: int) -> np.ndarray:
    """(bank, row, col, lane) of n consecutive elements of eb bytes from `base`."""
    addr = base + eb * np.arange(n, dtype=np.int64)
    return np.stack([np.zeros_like(addr), addr // MRAM_ROW, (addr % MRAM_ROW) // 8, (addr % 8) // 4],
                    -1).astype(np.int32)


def mram_address(positions: np.ndarray) -> np.ndarray:
    """Byte address in MRAM of (bank, row, col, lane) rows (inverse of the table)."""
    p = np.asarray(positions, np.int64)
    return p[..., 1] * MRAM_ROW + p[..., 2] * 8 + p[..., 3] * 4


class _Consecutive(LazyPositions):
    """The position table of n consecutive elements from MRAM byte `base`,
    built only when something reads it (the value interpreter): timing a
    program needs the base address alone, and an LLM-sized draft's tiles
    hold millions of elements."""

    def __init__(self, base: int, n: int, eb: int):
        super().__init__(lambda: _positions(base, n, eb), n)
        self.base = int(base)


def _base(layout: TensorLayout) -> int:
    """MRAM byte address of a layout's local position 0."""
    pos = layout.positions
    return pos.base if isinstance(pos, _Consecutive) else int(mram_address(pos[:1])[0])


def _region(ctx: _Ctx, name: str, operand: int, vars_: tuple, index_map, shape, box: tuple,
            base: int, synthetic=None) -> TensorLayout:
    n = int(np.prod(box, dtype=np.int64)) if box else 1
    return tile_layout(ctx.tiles, name, operand, vars_, index_map, shape, _Consecutive(base, n, ctx.eb),
                       box, synthetic=synthetic)


# --------------------------------------------------------------------------
# instruction counts
# --------------------------------------------------------------------------
def _expr_cost(e, ctx: _Ctx, scalars: set) -> int:
    """Instructions to evaluate a body / epilogue expression per point (loads excluded)."""
    wide = 2 if ctx.eb == 8 else 1
    if isinstance(e, (Arg, Const)):
        return 0
    if not isinstance(e, Prim):
        raise PimCompileError(f"upmem: cannot run body expression {e!r}")
    args = e.args
    inner = sum(_expr_cost(a, ctx, scalars) for a in args)
    name = e.name
    if name in ("add", "sub", "add_any"):
        return inner + wide
    if name == "neg":
        return inner + wide
    if name in ("max", "min"):
        return inner + 2 * wide
    if name in ("convert_element_type", "copy", "copy_p", "reduce_precision"):
        return inner
    if name == "mul":
        if any(isinstance(a, Const) for a in args):
            return inner + MUL_CONST * wide
        return inner + (MUL_CALL + int(ctx.options["mul_bits"])) * (3 if ctx.eb == 8 else 1)
    raise PimCompileError(f"upmem: no instruction sequence for {name} (DPUs run integer "
                          "add/sub/mul/max/min; division and transcendental functions stay on the host)")


def _point_cost(ctx: _Ctx, n_arrays: int, scalars: set) -> int:
    op = ctx.op
    cost = n_arrays + _expr_cost(op.body, ctx, scalars) + LOOP
    if op.kind == "elementwise":
        cost += 1                                   # sw of the result
    else:
        cost += (2 if ctx.op.combiner != "add" else 1) * (2 if ctx.eb == 8 else 1)  # combine
        if ctx.options["acc_in_wram"]:
            cost += 2                               # lw + sw of bufferC[pos]
    if ctx.boundary == "element":
        cost += CHECK
    return cost


def _tile_cost(ctx: _Ctx) -> int:
    return TILE_OVERHEAD + (TILE_BOUND if ctx.boundary == "tile" else 0)


def kernel_constants(op: PimOp, **options) -> dict:
    """What the DPU code of `op` costs per point and per caching tile under
    the lowering's options (default: DEFAULT_OPTIONS), without lowering a
    draft: point_cost / tile_cost (instructions), arrays (operands streamed
    through WRAM), scalars (scalar arguments), elem_bytes, boundary.  The
    cost model's closed-form kernel estimate reads these, so it prices a
    point exactly as `lower_upmem` does."""
    opts = {**DEFAULT_OPTIONS, **options}
    boundary = _boundary(opts)
    ctx = _Ctx(op, None, None, None, {}, opts, int(opts["elem_bytes"]), boundary)
    scalars = op.scalar_operands
    arrays = 2 if op.kind == "contraction" else len([k for k in op.body_operands if k not in scalars])
    return dict(point_cost=_point_cost(ctx, arrays, scalars), tile_cost=_tile_cost(ctx), arrays=arrays,
                scalars=len(scalars & set(op.body_operands)), elem_bytes=ctx.eb, boundary=boundary)


# --------------------------------------------------------------------------
# record assembly: per-tasklet sequences interleaved by step
# --------------------------------------------------------------------------
class _Recs:
    """Records with an ordering key (step, tasklet, sub), kept as the values
    each `add` was given (scalars stay scalars) and materialised per field
    once, in `build`: a GEMV draft makes ~40 adds of 14 fields and 3 keys,
    and broadcasting every value at `add` time was most of its lowering.
    Arrays given to `add` are kept, not copied, until `build`."""

    def __init__(self):
        self.adds: list[dict] = []
        self.counts: list[int] = []

    def add(self, key, op, n, **fields):
        """Append len(n) records (arrays broadcast) with sort keys `key` ([3] arrays)."""
        n = np.atleast_1d(np.asarray(n, np.int64))
        vals = dict(op=int(op), n=n, phase=int(Phase.COMPUTE), src=-1, core=-1)
        vals.update({f: v if isinstance(v, (int, np.integer, np.ndarray)) else np.asarray(v)
                     for f, v in fields.items()})
        vals["_key"] = tuple(k if isinstance(k, (int, np.integer, np.ndarray)) else np.asarray(k) for k in key)
        self.adds.append(vals)
        self.counts.append(n.shape[0])

    def _field(self, values, starts: list[int]) -> np.ndarray:
        """[sum(counts)] int64 of one field's values: the scalars repeated in
        one call, then each array (length 1 or its add's count) assigned over
        its slice, which begins at starts[i] (numpy broadcasting)."""
        arrays = [i for i, v in enumerate(values) if isinstance(v, np.ndarray) and v.ndim]
        if not arrays:
            return np.repeat(np.asarray(values, np.int64), self.counts)
        base = list(values)
        for i in arrays:
            base[i] = 0
        out = np.repeat(np.asarray(base, np.int64), self.counts)
        for i in arrays:
            out[starts[i]:starts[i] + self.counts[i]] = values[i]
        return out

    def build(self, order: bool = True) -> dict:
        if not self.adds:
            return {f: np.zeros(0, np.int64) for f in RECORD_FIELDS}
        starts = np.cumsum([0] + self.counts[:-1]).tolist()
        # fields added to the record contract later default to 0
        cols = {f: self._field([a.get(f, 0) for a in self.adds], starts) for f in RECORD_FIELDS}
        if order:
            key = [self._field([a["_key"][k] for a in self.adds], starts) for k in range(3)]
            idx = np.lexsort(key[::-1])
            cols = {f: v[idx] for f, v in cols.items()}
        return cols


def _addr_fields(addr) -> dict:
    addr = np.asarray(addr, np.int64)
    return dict(row=addr // MRAM_ROW, col=(addr % MRAM_ROW) // 8)


# --------------------------------------------------------------------------
# host transfers
# --------------------------------------------------------------------------
def _host_runs(layout: TensorLayout, eb: int, bulk: bool) -> list[tuple[int, int, int, int]]:
    """Transfers of a layout's local box, the same for every DPU: groups of
    (first local position, elements per transfer, count, local stride).

    A run is a maximal range of local positions that is contiguous both in
    the host tensor (row-major) and in MRAM (a layout's positions are
    consecutive, `_region`); it is computed on the affine (unclipped) index
    of the first DPU, which every other DPU's tile translates.  Consecutive
    runs of one length and one start stride form a group.

    With linear index maps the host offset is affine in the box coordinates,
    so runs are found per *block* -- the innermost box dimensions that are
    contiguous in the host and wholly real -- not per element: a GEMV tile
    of R rows costs O(R), not O(R x row length).  Other maps (floordiv /
    mod) walk every element (`_host_runs_walk`, the reference the test
    checks the block form against)."""
    box = layout.box
    n = int(np.prod(box, dtype=np.int64)) if box else 1
    if not bulk:
        return [(0, 1, n, 1)]
    if not box or not all(e.is_linear for e in layout.index_map):
        return _host_runs_walk(layout, eb)
    starts, lens = _block_runs(layout)
    return _group_runs(starts, lens)


def _host_coefficients(layout: TensorLayout) -> tuple[int, np.ndarray]:
    """(offset, a): the host (row-major) offset of local box coordinates g is
    offset + a . g on the first DPU, for linear index maps; a synthetic slot
    variable steps past every tensor element (a separate element each)."""
    V = len(layout.vars)
    a = np.zeros(V, np.int64)
    offset = 0
    stride = 1
    col = {v: k for k, v in enumerate(layout.vars)}
    start = {v: int(layout.start[0, 0, k]) for k, v in enumerate(layout.vars)}
    for expr, size in reversed(list(zip(layout.index_map, layout.shape))):
        offset += (expr.const + sum(c * start[v] for v, c in expr.terms)) * stride
        for v, c in expr.terms:
            a[col[v]] += c * stride
        stride *= size
    n = int(np.prod(layout.box, dtype=np.int64))
    for k, v in enumerate(layout.vars):
        if v.startswith("#"):
            a[k] = stride * 2 + n
    return offset, a


def _block_runs(layout: TensorLayout) -> tuple[np.ndarray, np.ndarray]:
    """([r] first local position, [r] length) of every run, block by block.

    The block is the innermost dimensions m.. of the box: the last has host
    stride 1, and each outer one of them steps exactly over the block inside
    it (stride = the product of the inner box lengths) while every inner one
    is wholly real.  Within a block the real part, dimension m's first
    real_m values, is one contiguous run.  Two consecutive blocks join when
    both are real, the first is real to its end and the host offsets meet --
    as element by element, including joins across a broadcast dimension."""
    box = [int(b) for b in layout.box]
    D = len(box)
    real = [int(layout.length[..., k].max()) for k in range(D)]
    if min(real) <= 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if any(r > b for r, b in zip(real, box)):      # the lowering pads boxes to the lengths
        raise ValueError(f"layout {layout.name}: real lengths {real} exceed the box {box}")
    offset, a = _host_coefficients(layout)
    m, B = D, 1
    if a[D - 1] == 1:
        m, B = D - 1, box[D - 1]
        while m > 0 and real[m] == box[m] and a[m - 1] == B:
            m -= 1
            B *= box[m]
    L = real[m] * int(np.prod(box[m + 1:], dtype=np.int64)) if m < D else 1
    # the outer dimensions' grid, in C order: each point is one block
    lin = np.full(1, offset, np.int64)
    inside = np.ones(1, bool)
    for k in range(m):
        g = np.arange(box[k], dtype=np.int64)
        lin = (lin[:, None] + a[k] * g[None, :]).ravel()
        inside = (inside[:, None] & (g < real[k])[None, :]).ravel()
    join = np.zeros(lin.size, bool)
    if L == B and lin.size > 1:
        join[1:] = inside[1:] & inside[:-1] & (lin[1:] == lin[:-1] + L)
    head = inside & ~join
    first = np.flatnonzero(head)
    chain = np.cumsum(head)[inside] - 1                     # the run each real block belongs to
    lens = np.bincount(chain, minlength=first.size).astype(np.int64) * L
    return first * B, lens


def _group_runs(starts: np.ndarray, lens: np.ndarray) -> list[tuple[int, int, int, int]]:
    """Runs in groups, left to right: a group takes the next run while its
    length is the group's and (from its third run on) its start is the
    previous one's plus the stride of the group's first two starts."""
    r = starts.size
    if r == 0:
        return []
    d = np.zeros(r, np.int64)
    d[1:] = np.diff(starts)
    same_len = np.zeros(r, bool)
    same_len[1:] = lens[1:] == lens[:-1]
    same = same_len.copy()                 # run k continues a group already two runs long
    same[2:] &= d[2:] == d[1:-1]
    same[:2] = False
    # nxt[k]: the first k' >= k with same[k'] False (r where none)
    idx = np.where(~same, np.arange(r), r)
    nxt = np.minimum.accumulate(idx[::-1])[::-1]
    groups = []
    i = 0
    while i < r:
        if i + 1 < r and same_len[i + 1]:
            j = int(nxt[i + 2]) if i + 2 < r else r
            groups.append((int(starts[i]), int(lens[i]), j - i, int(d[i + 1])))
        else:
            j = i + 1
            groups.append((int(starts[i]), int(lens[i]), 1, 1))
        i = j
    return groups


def _host_runs_walk(layout: TensorLayout, eb: int) -> list[tuple[int, int, int, int]]:
    """`_host_runs` element by element over the whole box (any index map)."""
    box = layout.box
    n = int(np.prod(box, dtype=np.int64)) if box else 1
    real = tuple(int(layout.length[..., k].max()) for k in range(len(box)))
    grids = np.meshgrid(*[np.arange(b) for b in box], indexing="ij") if box else []
    env = {v: layout.start[0, 0, k] + g for k, (v, g) in enumerate(zip(layout.vars, grids))
           if not v.startswith("#")}
    inside = np.ones(box, bool)
    for k, g in enumerate(grids):
        inside &= g < real[k]
    lin = np.zeros(box, np.int64)
    stride = 1
    for expr, size in reversed(list(zip(layout.index_map, layout.shape))):
        idx, _ = expr.evaluate(env) if expr.vars else (np.full(box, expr.const), None)
        lin = lin + np.broadcast_to(idx, box) * stride
        stride *= size
    for k, v in enumerate(layout.vars):        # synthetic slots are separate elements
        if v.startswith("#"):
            lin = lin + grids[k] * (stride * 2 + n)
    lin, inside = lin.ravel(), inside.ravel()
    addr = mram_address(layout.positions)
    cont = (np.diff(lin) == 1) & (np.diff(addr) == eb) & inside[1:] & inside[:-1]
    starts = np.flatnonzero(np.concatenate([[True], ~cont]) & inside)
    if starts.size == 0:
        return []
    # run lengths: up to the next break (only inside positions are sent)
    brk = np.flatnonzero(np.concatenate([~cont, [True]]))
    ends = brk[np.searchsorted(brk, starts)] + 1
    return _group_runs(starts, ends - starts)


def _same_everywhere(layout: TensorLayout) -> bool:
    """True when every DPU holds the same elements of the tensor (broadcastable):
    the same loop ranges of the layout's variables and the same band limits
    (cheap: no per-element index arrays)."""
    same = (layout.start == layout.start[:1, :1]).all() and (layout.length == layout.length[:1, :1]).all()
    for _, lo, hi in layout.bands:
        same = same and (lo == lo[:1, :1]).all() and (hi == hi[:1, :1]).all()
    return bool(same)


def _transfers(ctx: _Ctx, recs: _Recs, layout_id: int, layout: TensorLayout, direction: Op,
               phase: Phase, step: int, resident: bool = False, per_dpu: bool = False) -> int:
    """Records moving a layout's tile of every DPU; returns bytes per DPU.

    per_dpu: the host side is a per-DPU staging buffer (partials), so the
    whole tile is one host-contiguous chunk."""
    eb = ctx.eb
    opts = ctx.options
    if per_dpu and opts["bulk"]:
        n = layout.size
        runs = [(0, n, 1, 1)]
    else:
        runs = _host_runs(layout, eb, opts["bulk"])
    base = _base(layout) if layout.size else 0
    bcast = (direction == Op.XFER_H2D and opts["broadcast"] and ctx.tiles.groups * ctx.tiles.cores > 1
             and _same_everywhere(layout))
    mode = Xfer.BROADCAST if bcast else (Xfer.PARALLEL if opts["bank_parallel"] else Xfer.SERIAL)
    total = 0
    for k, (first, length, count, stride) in enumerate(runs):
        nbytes = _roundup(length * eb, DMA_ALIGN)
        addr = base + first * eb
        fields = dict(src=layout_id, arg=first, aux=count, reg_step=stride, reg=int(mode),
                      phase=int(phase), resident=int(resident), **_addr_fields(addr))
        if mode == Xfer.SERIAL:
            cores = np.arange(ctx.tiles.cores)
            recs.add((step, k, cores), direction, np.full(len(cores), nbytes), core=cores, **fields)
        else:
            recs.add((step, k, 0), direction, nbytes, **fields)
        total += nbytes * count
    return total


# --------------------------------------------------------------------------
# the lowering
# --------------------------------------------------------------------------
def _lower(ctx: _Ctx) -> Program:
    op, draft, tiles, eb = ctx.op, ctx.draft, ctx.tiles, ctx.eb
    geo = _geometry(ctx)
    T = draft.tasklets
    scalars = op.scalar_operands
    body_ops = [k for k in op.body_operands if k not in scalars]
    if op.kind == "contraction" and len(body_ops) != 2:
        raise PimCompileError(f"upmem: contraction {op.name} needs two array operands in its body")
    if op.kind == "reduction" and op.combiner not in ("add", "max", "min"):
        raise PimCompileError(f"upmem: no {op.combiner} combiner")
    if op.kind == "contraction":
        # order operands as (matrix, vector): the vector is the one re-read per output
        mi, vi = matrix_and_vector(op, ctx.shapes)
        body_ops = [mi, vi]

    # ---- layouts: operands, scalar arguments, result / partials ------------
    layouts: list[TensorLayout] = []
    base = 0
    lid: dict[int, int] = {}
    pad_inner = dict(zip(geo.out_vars + geo.red_vars, geo.box))
    for k in body_ops:
        acc = op.operands[k]
        if op.kind == "elementwise":
            vars_ = geo.out_vars                     # replicated over the full iteration box
        else:
            vs = set(acc.vars)
            vars_ = tuple(v for v in geo.out_vars if v in vs) + tuple(v for v in geo.red_vars if v in vs)
        box = tuple(pad_inner[v] for v in vars_)
        lay = _region(ctx, f"x{k}", k, vars_, acc.index_map, ctx.shapes[acc.value], box, base)
        lid[k] = len(layouts)
        layouts.append(lay)
        base = _roundup(base + lay.size * eb, DMA_ALIGN)
    for k in sorted(scalars & set(op.body_operands)):
        acc = op.operands[k]
        lay = _region(ctx, f"arg{k}", k, (), (), ctx.shapes[acc.value], (), base)
        lid[k] = len(layouts)
        layouts.append(lay)
        base = _roundup(base + eb, DMA_ALIGN)
    split = ctx.options["tasklet_split"]
    if split not in ("auto", "outputs", "prim"):
        raise ValueError(f"tasklet_split must be 'auto', 'outputs' or 'prim', got {split!r}")
    if split == "prim":     # PrIM's GEMV binds only rows to tasklets; its RED splits the input
        split = "outputs" if op.kind == "contraction" else "auto"
    split_red = op.kind != "elementwise" and geo.O < T and split == "auto"
    partial_slots = T if (split_red and ctx.options["tasklet_partials"]) else 1
    if op.kind == "elementwise":
        rvars, rbox = geo.out_vars, geo.box
    else:
        rvars, rbox = geo.out_vars, tuple(pad_inner[v] for v in geo.out_vars)
    synthetic = None
    if partial_slots > 1:
        rvars, rbox = ("#t",) + rvars, (partial_slots,) + rbox
        synthetic = {"#t": partial_slots}
    res = _region(ctx, "acc", -1, rvars, *acc_space(op), rbox, base, synthetic)
    res_id = len(layouts)
    layouts.append(res)
    base = _roundup(base + res.size * eb, DMA_ALIGN)
    if base > ctx.backend.core.bank_bytes:
        raise PimCompileError(f"upmem: {base} B per DPU exceed the {ctx.backend.core.bank_bytes} B MRAM")
    points = tile_layout(tiles, "points", -2, geo.out_vars + geo.red_vars, (), (), np.zeros((1, 4), np.int32),
                         geo.box)

    # ---- host -> MRAM -------------------------------------------------------
    pre = _Recs()
    resident = set(ctx.options["resident"])
    h2d = res_b = 0
    # kernel arguments (sizes, offsets; PrIM's DPU_INPUT_ARGUMENTS): one small parallel transfer
    pre.add((0, 0, 0), Op.XFER_H2D, 16, reg=int(Xfer.PARALLEL if ctx.options["bank_parallel"] else Xfer.SERIAL),
            aux=1, phase=int(Phase.REARRANGE))
    for step, k in enumerate(body_ops + sorted(scalars & set(op.body_operands)), 1):
        nb = _transfers(ctx, pre, lid[k], layouts[lid[k]], Op.XFER_H2D, Phase.REARRANGE, step,
                        resident=k in resident)
        if k in resident:
            res_b += nb
        else:
            h2d += nb

    # ---- the kernel ------------------------------------------------------------
    ker = _Recs()
    ker.add((-2, 0, 0), Op.LAUNCH, 1, aux=int(Sync.LAUNCH))
    n_scal = len(scalars & set(op.body_operands))
    # every tasklet loads its arguments (sizes, scalars) into registers
    ker.add((-1, np.arange(T), 0), Op.DPU_EXEC, np.full(T, ARG_LOADS + n_scal), reg=np.arange(T), aux=int(Exec.OVERHEAD))
    pc = _point_cost(ctx, len(body_ops), scalars)
    info = dict(point_cost=pc)
    if op.kind == "elementwise":
        _kernel_elementwise(ctx, geo, ker, body_ops, lid, layouts, res, res_id, pc)
    elif split_red:
        _kernel_split_reduction(ctx, geo, ker, body_ops, lid, layouts, res, res_id, pc, partial_slots)
    else:
        _kernel_outputs(ctx, geo, ker, body_ops, lid, layouts, res, res_id, pc)

    # ---- MRAM -> host ---------------------------------------------------------
    post = _Recs()
    partials = draft.reduction == "host" or partial_slots > 1
    d2h = _transfers(ctx, post, res_id, res, Op.XFER_D2H, Phase.READBACK, 0, per_dpu=partials)

    streams = [pre.build(), ker.build(), post.build()]
    cols = {f: np.concatenate([s[f] for s in streams]).astype(np.int32)[None, :] for f in RECORD_FIELDS}
    records = Records(**cols)
    stats = _stats(ctx, records, h2d, res_b, d2h, partials)
    meta = dict(kind=op.kind, points=points, geometry=geo, body_operands=tuple(body_ops),
                scalar_operands=tuple(sorted(scalars & set(op.body_operands))), layout_of=lid,
                result_layout=res_id, partial_slots=partial_slots, split_reduction=split_red,
                elem_bytes=eb, mram_bytes=base, tasklets=T,
                result_shape=tuple(ctx.shapes[op.result.value]),
                result_dtype=ctx.options["result_dtype"], **info)
    readback = Readback(res_id, combiner=op.combiner or "add", lane_partials=False, epilogue_on_host=True)
    return lowered_program(ctx, layouts, records, (), readback, stats, meta,
                           parallel=bool(ctx.options["bank_parallel"]))


def _dma_bytes(ctx: _Ctx, elems) -> np.ndarray:
    """Bytes of a DMA of `elems` elements: the full static tile with padding,
    else the (8-byte aligned) dynamic size."""
    elems = np.asarray(elems, np.int64)
    if ctx.boundary == "pad":
        return np.full_like(elems, ctx.draft.wram_tile)
    return np.maximum(_roundup_arr(elems * ctx.eb, DMA_ALIGN), DMA_ALIGN)


def _roundup_arr(a, b):
    return -(-np.asarray(a) // b) * b


def _kernel_elementwise(ctx, geo: _Geom, ker: _Recs, body_ops, lid, layouts, res, res_id, pc):
    """Caching tiles of E points along the flattened box, round-robin over the
    tasklets (PrIM VA: byte_index += BLOCK_SIZE * NR_TASKLETS)."""
    T, E, eb = ctx.draft.tasklets, geo.E, ctx.eb
    total = (geo.O - 1) * geo.Rin + geo.Rin_len       # last point with real data + 1 (largest tile)
    n_tiles = -(-total // E)
    k = np.arange(n_tiles)
    first = k * E
    cnt = np.minimum(E, total - first)
    t, step = k % T, k // T
    dma = _dma_bytes(ctx, cnt)
    for j, kk in enumerate(body_ops):
        b0 = _base(layouts[lid[kk]])
        ker.add((step, t, j), Op.DMA_RD, dma, reg=t, src=lid[kk], arg=first, **_addr_fields(b0 + first * eb))
    ker.add((step, t, len(body_ops)), Op.DPU_EXEC, _tile_cost(ctx) + len(body_ops) * DMA_ISSUE + DMA_ISSUE
            + cnt * pc, reg=t, aux=int(Exec.ELEMENTWISE), arg=first, row=cnt, src=res_id)
    r0 = _base(res)
    ker.add((step, t, len(body_ops) + 1), Op.DMA_WR, dma, reg=t, src=res_id, arg=first,
            **_addr_fields(r0 + first * eb))


def _operand_local(layout: TensorLayout, geo: _Geom, o, ro, ri):
    """Local flat position in `layout` of compute point (o, ro, ri)."""
    box = dict(zip(geo.out_vars + geo.red_vars, geo.box))
    ob = [box[v] for v in geo.out_vars]
    rb = [box[v] for v in geo.red_vars[:-1]]
    oc = np.unravel_index(np.asarray(o), ob) if ob else ()
    rc = np.unravel_index(np.asarray(ro), rb) if rb else ()
    coords = dict(zip(geo.out_vars, oc))
    coords.update(zip(geo.red_vars[:-1], rc))
    if geo.red_vars:
        coords[geo.red_vars[-1]] = np.asarray(ri)
    flat = np.zeros(np.shape(o), np.int64)
    for v, b in zip(layout.vars, layout.box):
        flat = flat * b + (coords[v] if v in coords else 0)
    return flat


def _kernel_outputs(ctx, geo: _Geom, ker: _Recs, body_ops, lid, layouts, res, res_id, pc):
    """Outputs bound to tasklets (contiguous blocks of `rows_per_block`), the
    innermost reduction loop cut into caching tiles.  Dataflow "os" re-reads
    every operand tile per output (PrIM GEMV); "is" keeps the vector tile in
    WRAM for the whole output block (ATiM's caching location above the
    output loop)."""
    T, E, eb = ctx.draft.tasklets, geo.E, ctx.eb
    ob = max(1, int(ctx.options["rows_per_block"]))
    O = _real_outputs(ctx, geo)
    is_flow = ctx.draft.dataflow == "is"
    if is_flow:   # one block of accumulators per tasklet, at most one caching tile of them
        ob = max(ob, min(E, -(-O // T)))
    n_blocks = -(-O // ob)
    bpt = -(-n_blocks // T)                      # blocks per tasklet (contiguous ranges)
    nC = -(-geo.Rin_len // E)
    cstart = np.arange(nC) * E
    ccnt = np.minimum(E, geo.Rin_len - cstart)
    dma = _dma_bytes(ctx, ccnt)
    r0 = _base(res)
    tile_c = _tile_cost(ctx)
    mi = body_ops[0]
    vi = body_ops[1] if len(body_ops) > 1 else None
    bases = {k: _base(layouts[lid[k]]) for k in body_ops}
    # every tasklet at once: tasklet t owns the contiguous blocks t * bpt ..., so the
    # iterations in block-major loop order are each tasklet's sequence, one after another
    blocks = np.arange(n_blocks)
    if is_flow:   # loop order block, ro, c, o: the vector tile serves the block's outputs
        B, R, C_, I = np.meshgrid(blocks, np.arange(geo.Rout), np.arange(nC), np.arange(ob), indexing="ij")
    else:         # block, o, ro, c: every operand tile re-read per output (PrIM GEMV)
        B, I, R, C_ = np.meshgrid(blocks, np.arange(ob), np.arange(geo.Rout), np.arange(nC), indexing="ij")
    B, I, R, C_ = (a.ravel() for a in (B, I, R, C_))
    o = B * ob + I
    keep = o < O
    B, I, R, C_, o = B[keep], I[keep], R[keep], C_[keep], o[keep]
    t = B // bpt                                 # the tasklet of each iteration
    head = np.concatenate([[True], t[1:] != t[:-1]])          # a tasklet's first iteration
    step = np.arange(o.size) - np.maximum.accumulate(np.where(head, np.arange(o.size), 0))
    ri0 = cstart[C_]
    # matrix tile every iteration
    mloc = _operand_local(layouts[lid[mi]], geo, o, R, ri0)
    ker.add((step, t, 1), Op.DMA_RD, dma[C_], reg=t, src=lid[mi], **_addr_fields(bases[mi] + mloc * eb))
    if vi is not None:
        vloc = _operand_local(layouts[lid[vi]], geo, o, R, ri0)
        if is_flow:   # re-read only when the tile changes along a tasklet's sequence
            fresh = head | np.concatenate([[True], vloc[1:] != vloc[:-1]])
        else:
            fresh = np.ones(o.size, bool)
        ker.add((step[fresh], t[fresh], 0), Op.DMA_RD, dma[C_][fresh], reg=t[fresh], src=lid[vi],
                **_addr_fields(bases[vi] + vloc[fresh] * eb))
    first = (o * geo.Rout + R) * geo.Rin + ri0
    dmas = DMA_ISSUE * (1 + (vi is not None))
    first_of_out = (R == 0) & (C_ == 0)
    ker.add((step, t, 2), Op.DPU_EXEC, tile_c + dmas + ccnt[C_] * pc + ACC_INIT * first_of_out, reg=t,
            aux=int(Exec.REDUCE), arg=first, row=ccnt[C_], src=res_id)
    # write a block's outputs after its last iteration
    last = np.concatenate([B[1:] != B[:-1], [True]])
    bo = B[last] * ob
    nout = np.minimum(ob, O - bo)
    wbytes = np.maximum(_roundup_arr(nout * eb, DMA_ALIGN), DMA_ALIGN)
    ker.add((step[last], t[last], 3), Op.DMA_WR, wbytes, reg=t[last], src=res_id, arg=bo,
            **_addr_fields(r0 + bo * eb))


def _real_outputs(ctx, geo: _Geom) -> int:
    """Outputs of the largest DPU tile (real lengths, not the padded box)."""
    tiles = ctx.tiles
    n = 1
    for v in geo.out_vars:
        n *= int(tiles.length[..., tiles.var_index(v)].max())
    # outputs are numbered over the padded output box; the largest real index + 1
    box = dict(zip(geo.out_vars + geo.red_vars, geo.box))
    real = [int(tiles.length[..., tiles.var_index(v)].max()) for v in geo.out_vars]
    if not real:
        return 1
    last = np.ravel_multi_index([r - 1 for r in real], [box[v] for v in geo.out_vars])
    return int(last) + 1 if n else 0


def _kernel_split_reduction(ctx, geo: _Geom, ker: _Recs, body_ops, lid, layouts, res, res_id, pc, slots):
    """Fewer outputs than tasklets: the reduction tiles go round-robin over the
    tasklets (PrIM RED), each keeps private partials; then a barrier and
    tasklet 0 merges them (or every tasklet writes its own, PrIM's read-back
    of all tasklets' results)."""
    T, E, eb = ctx.draft.tasklets, geo.E, ctx.eb
    O = _real_outputs(ctx, geo)
    nC = -(-geo.Rin_len // E)
    o, R, C_ = (a.ravel() for a in np.meshgrid(np.arange(O), np.arange(geo.Rout), np.arange(nC), indexing="ij"))
    g = np.arange(o.size)
    t, step = g % T, g // T
    cstart = np.arange(nC) * E
    ccnt = np.minimum(E, geo.Rin_len - cstart)
    dma = _dma_bytes(ctx, ccnt)
    ri0 = cstart[C_]
    bases = {k: _base(layouts[lid[k]]) for k in body_ops}
    for j, k in enumerate(body_ops):
        loc = _operand_local(layouts[lid[k]], geo, o, R, ri0)
        ker.add((step, t, j), Op.DMA_RD, dma[C_], reg=t, src=lid[k], **_addr_fields(bases[k] + loc * eb))
    first = (o * geo.Rout + R) * geo.Rin + ri0
    ker.add((step, t, len(body_ops)), Op.DPU_EXEC, _tile_cost(ctx) + DMA_ISSUE * len(body_ops) + ccnt[C_] * pc,
            reg=t, aux=int(Exec.REDUCE), arg=first, row=ccnt[C_], bank=t, src=res_id)
    end = int(step.max()) + 1 if step.size else 0
    tt = np.arange(T)
    r0 = _base(res)
    # tasklet partials initialised once (ACC_INIT per output)
    ker.add((-1, tt, 1), Op.DPU_EXEC, np.full(T, ACC_INIT * O), reg=tt, aux=int(Exec.OVERHEAD))
    ker.add((end, 0, 0), Op.LAUNCH, 1, aux=int(Sync.BARRIER))
    ker.add((end, tt, 1), Op.DPU_EXEC, np.full(T, BARRIER_COST), reg=tt, aux=int(Exec.OVERHEAD))
    if slots > 1:
        nbytes = max(_roundup(O * eb, DMA_ALIGN), DMA_ALIGN)
        slot_size = res.size // slots
        ker.add((end + 1, tt, 0), Op.DMA_WR, np.full(T, nbytes), reg=tt, src=res_id, bank=tt,
                arg=tt * slot_size, **_addr_fields(r0 + tt * slot_size * eb))
    else:
        ker.add((end + 1, 0, 0), Op.DPU_EXEC, MERGE_PER_PARTIAL * (T - 1) * O + 2, reg=0, aux=int(Exec.MERGE),
                bank=T, src=res_id, row=O)
        nbytes = max(_roundup(O * eb, DMA_ALIGN), DMA_ALIGN)
        ker.add((end + 2, 0, 0), Op.DMA_WR, nbytes, reg=0, src=res_id, arg=0, **_addr_fields(r0))


# --------------------------------------------------------------------------
# statistics
# --------------------------------------------------------------------------
def _stats(ctx: _Ctx, rec: Records, h2d: int, res_b: int, d2h: int, partials: bool) -> ProgramStats:
    """The `ProgramStats` of an UPMEM program: transfers in bytes over every DPU, DPU
    instructions and DMA from the records; h2d / res_b / d2h: one DPU's transfer sizes.
    partials: the host merges per-DPU partial results."""
    op_ = np.asarray(rec.op)[0]
    n = np.asarray(rec.n)[0].astype(np.int64)
    aux = np.asarray(rec.aux)[0].astype(np.int64)
    mode = np.asarray(rec.reg)[0]
    core = np.asarray(rec.core)[0]
    G, C = ctx.tiles.groups, ctx.tiles.cores
    dpus = G * C

    resident = np.asarray(rec.resident)[0] == 1

    def xbytes(code, which=None):
        m = op_ == code
        if which is not None:                  # only the resident (True) / per-call (False) records
            m &= resident == which
        # parallel / broadcast records stand for every DPU; serial ones for one DPU per rank
        per = np.where(core[m] >= 0, G, dpus)
        return int((n[m] * aux[m] * per).sum())

    out_elems = int(np.prod(ctx.shapes[ctx.op.result.value], dtype=np.int64))
    d2h_total = xbytes(Op.XFER_D2H)
    partial_elems = d2h_total // ctx.eb
    merged = partials or ctx.op.epilogue is not None
    bcast = op_ == Op.XFER_H2D
    dma = (op_ == Op.DMA_RD) | (op_ == Op.DMA_WR)
    return program_stats(
        ctx, records=op_.size,
        rearrange_bytes=xbytes(Op.XFER_H2D, False), resident_bytes=xbytes(Op.XFER_H2D, True),
        readback_bytes=d2h_total if merged else 0,
        merge_adds=max(0, partial_elems - out_elems) if partials else 0,
        element_bytes=ctx.eb, merged=merged,
        h2d_bytes=xbytes(Op.XFER_H2D), d2h_bytes=d2h_total,
        extra={"h2d_bytes_per_dpu": h2d, "resident_bytes_per_dpu": res_b, "d2h_bytes_per_dpu": d2h,
               "broadcast_records": int((bcast & (mode == Xfer.BROADCAST)).sum()),
               "instructions": int(n[op_ == Op.DPU_EXEC].sum()),
               "dma_bytes": int(n[dma].sum()), "dma_records": int(dma.sum()), "dpus": dpus})


__all__ = ["lower_upmem", "DEFAULT_OPTIONS", "PRIM_OPTIONS", "Xfer", "Exec", "Sync", "mram_address"]
