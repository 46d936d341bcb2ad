"""Lowering to SK hynix Newton / AiM command programs (GDDR6 PIM).

Newton runs contractions only (PIMFlow §2.1): `y[.., o] = sum_r M[.., o, r] *
v[.., r]` with the large operand M in the banks and the small operand v in
the channel's global buffer(s).  A GEMV sequence (GEMV, MMTV, batched
products, GEMM as a sequence of GEMVs, convolutions through the frontend's
im2col contraction, PIMFlow §2.2) runs as

    GWRITE   host -> global buffer: an input chunk (GWRITE_2 / GWRITE_4 write
             two / four buffers with one command, PIMFlow §4.1)
    G_ACT    open one row in every bank of the channel
    COMP     column MAC in all activated banks: 16 bf16 multipliers and a
             reduction tree per bank add the dot product of the row's column
             with the matching buffer column into a result latch
    READRES  the host reads the result latches of the banks

Per group (= channel) the program is one command stream; a core is a bank.
Group-broadcast commands (G_ACT / COMP / READRES to all banks) run every bank
on the same offsets, so every bank's tile is padded to the largest one;
`granularity == "core"` uses single-bank commands instead (a COMP to one bank
activates its row implicitly, READRES reads one bank), skipping the padding.

Layout (Korean paper §3.4, "data blocks" = DRAM columns): the reduction of
every output is flattened (lane variable innermost) into columns of 16 bf16;
output o's columns are cut into input chunks of CC <= buffer columns; the
*segment* (batch b, output o, chunk i) is a run of CC columns in the bank.
With the data-block layout on, segments are ordered as the dataflow visits
them and never straddle a DRAM row (several short segments share a row, so
one G_ACT serves several outputs); off, the tile is stored in host order
(output-major, reduction contiguous), so segments straddle rows.

Registers (Korean paper §3.2; Newton's registers are its global buffers and
result latches): with `draft.buffers = k` one GWRITE_k fills k buffers, with
k input vectors of the same chunk (PIMFlow's command reuse: one G_ACT serves k
vectors) or, for a single vector, k consecutive chunks.  Latches beyond the k
vectors block outputs (KO-style): lo outputs accumulate in their own latches
before one READRES.  With register reuse on, GWRITE is issued only when the
buffer contents change and READRES only when the latches hold final (os) or
per-load partial (is) results; off, every G_ACT step re-writes the buffer and
reads its partial back.

Input vectors that differ between the banks of a channel (a draft that
splits the vector's dimension sets over cores) cannot share one buffer: the
cores are grouped into *classes* of equal vector needs and the kernel runs
once per class (a *pass*).  Broadcast passes compute in every bank (the
other classes' banks produce discarded products); per-core passes only
command the class's banks.

Command scheduling across channels (PIMFlow §4.3) is the draft's group
allocation: output sets over groups distribute work at G_ACT / READRES
granularity, reduction sets over groups at COMP granularity (partials merged
on the host, `reduction="host"`); every group runs its stream in parallel.

Records (fields not listed are 0):

    WR       bank, row, col, n=1, src=M layout, core, resident, phase REARRANGE
             (WR_S, a streamed run of n columns in one row, for large placements)
    PREA     close every bank before a GWRITE (the buffer write does not
             touch the banks; closing them keeps the timed bank state honest)
    GWRITE   one record per 32 B column: bank = a closed bank of alternating
             bank groups (timing only), row -1, reg = buffer column
             (buffer * buf_cols + column), arg = host-data row, aux = buffers
             written by the command, src = v layout, phase REARRANGE
    G_ACT    row (all banks)
    COMP     bank (0 for broadcast), row, col, n columns, reg = first buffer
             column, arg = latch, core (-1 = all banks)
    READRES  bank / row (an open row: timing only), n = bursts, reg = host
             result slot, aux = latches read (from 0), core, phase READBACK

READRES moves `reg_bytes` (4: the float32 latch) per latch per bank:
broadcast 16 banks x latches, per-core one bank's latches, in 32 B bursts.

Timing on the shared cycle scan (`sim/cycles.py`, `sim/timing.py`), and what
it does not express (PIMFlow's Ramulator fork, `src/GDDR6.cpp`, differs):

* G_ACT is one all-bank activation (`act_all`): tRCD to the first COMP, the
  previous row's tRAS / tRTP + tRP before it, but no tFAW / tRRD.  PIMFlow
  issues G_ACT0..3 (one per bank group) nFAW apart, i.e. 3 tFAW = 51 more
  cycles per row on Table 1's clock — missing: an activation class that
  opens the banks of one bank group and counts them in the tFAW window.
* GWRITE is a host column write to the global buffer (timing class
  `buffer`, kind BUFWR: data bus, tCCD_S apart across bank groups,
  write->read turnaround before the first COMP); a G_ACT waits for its last
  column (rule BUF_ACT) unless `Timing.gwrite_hiding` (PIMFlow's GWRITE
  latency hiding, `newton(gwrite_hiding=True)`) switches that rule off: the
  G_ACT then issues while the buffer is written.
* READRES is a data-bus read that waits for every earlier record (the COMPs
  must finish); it has to name an open row (latches need none).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ...errors import PimCompileError
from ...hw.core import Backend
from ...lower.context import LowerContext
from ...lower.layout import acc_space, global_index, lane_order, tile_layout, value_shapes
from ...lower.program import (
    RECORD_FIELDS,
    LazyArray,
    LazyPositions,
    Op,
    Phase,
    Program,
    Readback,
    RecordBuilder,
    TensorLayout,
    stack_streams,
)
from ...lower.stats import lowered_program
from ...lower.tiles import CoreTiles, core_tiles
from ...partition.draft import Draft
from ...partition.verify import matrix_and_vector
from ...trace.affine import AffineExpr
from ...trace.ir import Arg, PimOp, Prim, strip_converts
from .commands import (
    R_LAYOUT,
    V_LAYOUT,
    bank_runs,
    flat_index,
    gw_banks,
    newton_stats,
    readres_bursts,
    rearrange,
)

# matrix: the operand index kept in the banks (None: the larger, `partition.verify.matrix_and_vector`)
DEFAULT_OPTIONS = dict(register_reuse=True, data_block_layout=True, channel_parallel=True,
                       resident=(), result_dtype="float32", matrix=None)


# --------------------------------------------------------------------------
# geometry shared by every group
# --------------------------------------------------------------------------
@dataclass
class _Plan:
    """Padded per-core geometry (all counts per core, padded box)."""
    mi: int
    vi: int
    o_b: list            # batch output vars (in M and v)
    o_v: list            # vector-only output vars (GEMM columns, conv filters / pixels)
    o_m: list            # matrix-only output vars (GEMV rows)
    red: list            # reduction vars, lane variable innermost
    box: dict            # var -> padded local length
    n_b: int
    n_v: int
    n_o: int
    n_r: int
    n_rc: int            # columns per output (ceil(n_r / 16))
    buf_cols: int        # columns per global buffer
    cc: int              # columns per input chunk
    t_in: int            # chunks per output
    kv: int              # input vectors per buffer load
    ki: int              # chunks per buffer load
    lo: int              # outputs per latch block
    n_vg: int
    n_ig: int
    n_ob: int
    slots: int           # partial results per output
    dataflow: str
    reuse: bool
    seg_base: np.ndarray  # [n_b, n_o, t_in] first flat bank column of each segment
    seg_cols: np.ndarray  # [t_in] columns of each chunk
    m_rows: int
    lanes: int            # multipliers per bank, elements per column (backend.core.lanes)

    @property
    def latches(self) -> int:
        return self.kv * self.lo

    def q(self, p: int, b: int, vg: int, ob: int, sl: int) -> int:
        """Host result slot of a READRES."""
        return (((p * self.n_b + b) * self.n_vg + vg) * self.n_ob + ob) * self.slots + sl


def _pow2_floor(n: int) -> int:
    p = 1
    while p * 2 <= n:
        p *= 2
    return p


def _plan(op: PimOp, draft: Draft, backend: Backend, tiles: CoreTiles, shapes: dict, opts: dict) -> _Plan:
    mi, vi = matrix_and_vector(op, shapes, opts["matrix"])
    M, V = op.operands[mi], op.operands[vi]
    mvars, vvars = set(M.vars), set(V.vars)
    outs = list(op.output_vars)
    red = list(lane_order([lv.name for lv in op.loop_vars if lv.name in op.reduction_vars], draft.lane_var))
    o_b = [v for v in outs if v in mvars and v in vvars]
    o_v = [v for v in outs if v in vvars and v not in mvars]
    o_m = [v for v in outs if v not in vvars]
    box = dict(zip(tiles.vars, tiles.box(tiles.vars)))
    prod = lambda vs: int(np.prod([box[v] for v in vs], dtype=np.int64))  # noqa: E731
    n_b, n_v, n_o, n_r = prod(o_b), prod(o_v), prod(o_m), prod(red)
    group = backend.group
    n_buf = max(1, group.n_global_buffers)
    k = draft.buffers
    if k > n_buf:
        raise PimCompileError(f"newton: draft uses {k} global buffers, the channel has {n_buf}")
    n_latch = max(1, backend.core.n_output_regs)
    col_bytes = backend.core.col_bytes
    buf_cols = group.global_buffer_bytes // n_buf // col_bytes
    if buf_cols < 1:
        raise PimCompileError("newton: global buffer smaller than one column")
    lanes = backend.core.lanes
    n_rc = max(1, -(-n_r // lanes))
    cc = min(n_rc, buf_cols)
    t_in = -(-n_rc // cc)
    reuse = bool(opts["register_reuse"])
    kv = min(_pow2_floor(k), _pow2_floor(max(1, n_v)))
    ki = min(_pow2_floor(max(1, k // kv)), _pow2_floor(t_in)) if reuse else 1
    lo = min(max(1, n_latch // kv), n_o) if reuse else 1
    if kv * lo > n_latch:
        raise PimCompileError(f"newton: {kv * lo} latches needed, a bank has {n_latch}")
    dataflow = draft.dataflow if t_in > 1 else "os"   # one chunk: both orders coincide
    n_vg, n_ig, n_ob = -(-n_v // kv), -(-t_in // ki), -(-n_o // lo)
    slots = 1 if (reuse and dataflow == "os") else n_ig
    seg_cols = np.minimum(cc, n_rc - np.arange(t_in) * cc)
    seg_base, m_rows = segments(n_b, n_o, t_in, cc, n_rc, ki, lo, dataflow,
                                 bool(opts["data_block_layout"]), backend.core.cols)
    if m_rows > backend.core.rows:
        raise PimCompileError(f"newton: {m_rows} rows of matrix data per bank exceed the "
                              f"{backend.core.rows} rows of a bank")
    return _Plan(mi, vi, o_b, o_v, o_m, red, box, n_b, n_v, n_o, n_r, n_rc, buf_cols, cc, t_in, kv,
                 ki, lo, n_vg, n_ig, n_ob, slots, dataflow, reuse, seg_base, seg_cols, m_rows, lanes)


def segments(n_b, n_o, t_in, cc, n_rc, ki, lo, dataflow, blocked: bool, cols: int):
    """First flat bank column of every segment (b, o, i) ([n_b, n_o, t_in]
    int64, read-only: cached, drafts of one op share it) and the rows used."""
    return _segments_cached(int(n_b), int(n_o), int(t_in), int(cc), int(n_rc), int(ki), int(lo), str(dataflow),
                            bool(blocked), int(cols))


@lru_cache(maxsize=256)
def _segments_cached(n_b, n_o, t_in, cc, n_rc, ki, lo, dataflow, blocked: bool, cols: int):
    base, rows = _segments_of(n_b, n_o, t_in, cc, n_rc, ki, lo, dataflow, blocked, cols)
    base = np.asarray(base, np.int64)
    base.flags.writeable = False
    return base, rows


def _segments_of(n_b, n_o, t_in, cc, n_rc, ki, lo, dataflow, blocked: bool, cols: int):
    """First flat bank column of every segment (b, o, i) and the rows used.

    blocked (data-block layout): segments in the order the dataflow visits
    them — os: (b, o-block, chunk, o-in-block), is: (b, chunk-load, o-block,
    chunk-in-load, o-in-block) — each CC columns, never straddling a row
    (32 // CC per row, or row-aligned when CC > 32).  Otherwise host order:
    output-major, the reduction contiguous (segments may straddle rows)."""
    b, o, i = np.meshgrid(np.arange(n_b), np.arange(n_o), np.arange(t_in), indexing="ij")
    if not blocked:
        base = (b * n_o + o) * n_rc + i * cc
        total = n_b * n_o * n_rc
        return base, -(-total // cols)
    ob, ol = o // lo, o % lo
    lo_ob = np.minimum(lo, n_o - ob * lo)                # outputs of o's block (the last may be short)
    # each segment's place in the visit order (the rank of the sort key -- os (b, ob, i, ol), is
    # (b, ig, ob, ji, ol) -- in closed form: every block / chunk group before it is full)
    if dataflow == "os":
        rank = b * (n_o * t_in) + ob * (lo * t_in) + i * lo_ob + ol
    else:
        ig, ji = i // ki, i % ki
        ki_ig = np.minimum(ki, t_in - ig * ki)            # chunks of i's group (the last may be short)
        rank = b * (n_o * t_in) + ig * (ki * n_o) + ob * lo * ki_ig + ji * lo_ob + ol
    if cc <= cols:
        per_row = cols // cc
        base = (rank // per_row) * cols + (rank % per_row) * cc
        rows = -(-rank.size // per_row)
    else:
        rps = -(-cc // cols)
        base = rank * rps * cols
        rows = rank.size * rps
    return base, int(rows)


# --------------------------------------------------------------------------
# vector classes (cores of a group that need the same buffer contents)
# --------------------------------------------------------------------------
def _v_bands(tiles: CoreTiles, plan: _Plan):
    """Bands the vector's host data enforces (their vars are all vector-side loop dims)."""
    dims = set(plan.o_b + plan.o_v + plan.red)
    return [bd for bd in tiles.bands if set(bd[0].vars) <= dims]


def _check_bands(tiles: CoreTiles, plan: _Plan) -> None:
    m_dims = set(plan.o_b + plan.o_m + plan.red)
    v_dims = set(plan.o_b + plan.o_v + plan.red)
    r_dims = set(plan.o_b + plan.o_v + plan.o_m)
    for expr, _, _ in tiles.bands:
        vs = set(expr.vars)
        if not (vs <= m_dims or vs <= v_dims or vs <= r_dims):
            raise PimCompileError(f"newton: the band on {expr} constrains neither operand nor the result")


def _classes(tiles: CoreTiles, plan: _Plan, vvars: set) -> tuple[list[list[list[int]]], np.ndarray]:
    """Per group the vector classes (lists of cores, in core order) and the
    class index of every core ([G, C], -1 for cores without work)."""
    G, C = tiles.groups, tiles.cores
    dims = plan.o_b + plan.o_v + plan.red
    ks = [tiles.var_index(v) for v in dims]
    bands = _v_bands(tiles, plan)
    # the vector's data depends on where its own variables start, and on the
    # start of any variable a band it enforces reads; only the length of the rest
    located = set(vvars) | {v for expr, _, _ in bands for v in expr.vars}
    empty = (tiles.length == 0).any(axis=-1)
    out, kappa = [], np.full((G, C), -1, np.int64)
    for g in range(G):
        sig_to: dict = {}
        classes: list[list[int]] = []
        for c in range(C):
            if empty[g, c]:
                continue
            sig = tuple((int(tiles.start[g, c, k]) if v in located else 0, int(tiles.length[g, c, k]))
                        for v, k in zip(dims, ks))
            sig += tuple((int(lo[g, c]), int(hi[g, c])) for _, lo, hi in bands)
            if sig not in sig_to:
                sig_to[sig] = len(classes)
                classes.append([])
            classes[sig_to[sig]].append(c)
            kappa[g, c] = sig_to[sig]
        out.append(classes)
    return out, kappa


# --------------------------------------------------------------------------
# the command stream of one group
# --------------------------------------------------------------------------
class _Stream:
    """Builds one group's kernel (GWRITE / G_ACT / COMP / READRES / PREA).

    per_core: single-bank commands; classes: the group's vector classes;
    seg_ok [C, n_b, n_o, t_in]: core has matrix data in the segment;
    need [C, Q]: core has a valid result in host slot q."""

    def __init__(self, plan: _Plan, backend: Backend, classes, per_core: bool, seg_ok, need, cores: int):
        self.p = plan
        self.per_core = per_core
        self.classes = classes
        self.seg_ok = seg_ok
        self.need = need
        self.cores = cores
        self.cols = backend.core.cols
        per_bg = backend.group.banks_per_bank_group
        n_bg = max(1, backend.group.banks // per_bg)
        self.gw_banks = [g * per_bg for g in range(n_bg)]      # one bank per bank group
        self.rr_all = int(readres_bursts(backend, plan.latches, False))
        self.rr_one = int(readres_bursts(backend, plan.latches, True))
        self.b = RecordBuilder()
        self.open_all: int | None = None            # row G_ACT opened in every bank
        self.open_core: dict[int, int] = {}         # per-core activations
        self.loaded = None
        self.rows: list[tuple] = []                 # host-data rows: (pass, b, v, i, cc) or pads
        self.read_runs: dict[int, list] = {}        # bank -> [(first flat column, n)] COMP reads
        self.read_all: list = []                    # runs every bank reads (broadcast)
        self.count = dict(GWRITE=0, GWRITE_columns=0, G_ACT=0, COMP=0, COMP_records=0, READRES=0,
                          PREA=0)

    # -- commands -----------------------------------------------------------
    def _close_all(self) -> None:
        if self.open_all is not None or self.open_core:
            self.b.add(Op.PREA, bank=0, row=0, n=1)
            self.count["PREA"] += 1
        self.open_all, self.open_core = None, {}

    def load(self, p: int, bb: int, vg: int, ig: int) -> None:
        """GWRITE_k of the buffer load (pass, b, vector group, chunk group)."""
        pl = self.p
        key = (p, bb, vg, ig)
        if pl.reuse and key == self.loaded:
            return
        self._close_all()
        nbuf = pl.kv * pl.ki
        chunks = [ig * pl.ki + ji for ji in range(pl.ki) if ig * pl.ki + ji < pl.t_in]
        width = int(max(pl.seg_cols[i] for i in chunks))
        t = 0
        for j in range(nbuf):
            jv, ji = divmod(j, pl.ki)
            v, i = vg * pl.kv + jv, ig * pl.ki + ji
            for cc in range(width):
                ok = v < pl.n_v and i < pl.t_in
                self.rows.append((p, bb, v, i, cc) if ok else (-1, 0, 0, 0, 0))
                self.b.add(Op.GWRITE, bank=self.gw_banks[t % len(self.gw_banks)], row=-1, col=0, n=1,
                           reg=j * pl.buf_cols + cc, arg=len(self.rows) - 1, aux=nbuf, src=V_LAYOUT,
                           phase=Phase.REARRANGE)
                t += 1
        self.count["GWRITE"] += 1
        self.count["GWRITE_columns"] += t
        self.loaded = key

    def comp(self, bb: int, o: int, i: int, vg: int, ji: int, ol: int) -> None:
        """Activate the rows of segment (b, o, i) and MAC it with every vector
        of the load (buffer slot jv * ki + ji -> latch jv * lo + ol)."""
        pl = self.p
        jvs = [jv for jv in range(pl.kv) if vg * pl.kv + jv < pl.n_v]
        for row, col, n, off in bank_runs(int(pl.seg_base[bb, o, i]), int(pl.seg_cols[i]), self.cols):
            if self.per_core:
                for c in self._class_cores:
                    if not self.seg_ok[c, bb, o, i]:
                        continue
                    self.open_core[c] = row                 # implicit single-bank ACT
                    self.read_runs.setdefault(c, []).append((row * self.cols + col, n))
                    for jv in jvs:
                        self._comp(c, c, row, col, n, (jv * pl.ki + ji) * pl.buf_cols + off, jv * pl.lo + ol)
            else:
                if self.open_all != row:
                    self.b.add(Op.G_ACT, bank=0, row=row, n=1)
                    self.count["G_ACT"] += 1
                    self.open_all = row
                self.read_all.append((row * self.cols + col, n))
                for jv in jvs:
                    self._comp(0, -1, row, col, n, (jv * pl.ki + ji) * pl.buf_cols + off, jv * pl.lo + ol)

    def _comp(self, bank, core, row, col, n, reg, latch) -> None:
        # add(COMP, bank, row, col, n, reg, arg=latch, core) as one int tuple (the hottest record)
        self.b.add_row((_COMP, int(bank), int(row), int(col), int(n), _COMPUTE, int(reg), 0, -1, 0, int(latch),
                        int(core), 0, 0))
        self.count["COMP"] += n
        self.count["COMP_records"] += 1

    def readres(self, q: int) -> None:
        pl = self.p
        if self.per_core:
            for c in self._class_cores:
                if not self.need[c, q]:
                    continue
                self.b.add(Op.READRES, bank=c, row=self.open_core.get(c, -1), n=self.rr_one, reg=q,
                           aux=pl.latches, core=c, phase=Phase.READBACK)
                self.count["READRES"] += 1
        else:
            row = -1 if self.open_all is None else self.open_all
            self.b.add(Op.READRES, bank=0, row=row, n=self.rr_all, reg=q, aux=pl.latches, core=-1,
                       phase=Phase.READBACK)
            self.count["READRES"] += 1

    def reads(self) -> dict[int, np.ndarray]:
        """bank -> sorted unique flat columns the kernel's COMPs read."""
        def cols(runs):
            if not runs:
                return np.zeros(0, np.int64)
            a = np.asarray(runs, np.int64)
            idx = np.repeat(a[:, 0] - np.cumsum(a[:, 1]) + a[:, 1], a[:, 1]) + np.arange(a[:, 1].sum())
            seen = np.zeros(int(idx.max()) + 1, bool)
            seen[idx] = True
            return np.nonzero(seen)[0]
        if self.read_all:
            shared = cols(self.read_all)
            return {c: shared for c in range(self.cores)}
        return {c: cols(r) for c, r in self.read_runs.items()}

    # -- the loop nest ------------------------------------------------------
    def build(self) -> None:
        """One pass per vector class of the group."""
        pl = self.p
        for p in range(len(self.classes)):
            self._class_cores = self.classes[p]
            for bb in range(pl.n_b):
                for vg in range(pl.n_vg):
                    if pl.dataflow == "os":
                        self._os(p, bb, vg)
                    else:
                        self._is(p, bb, vg)

    def _step(self, p, bb, vg, ob, ig) -> None:
        """One buffer load's G_ACT / COMP steps for output block ob."""
        pl = self.p
        for ji in range(pl.ki):
            i = ig * pl.ki + ji
            if i >= pl.t_in:
                continue
            for ol in range(pl.lo):
                o = ob * pl.lo + ol
                if o >= pl.n_o:
                    continue
                if not pl.reuse:
                    self.load(p, bb, vg, ig)
                self.comp(bb, o, i, vg, ji, ol)
                if not pl.reuse:
                    self.readres(pl.q(p, bb, vg, ob, i))

    def _os(self, p, bb, vg) -> None:
        pl = self.p
        for ob in range(pl.n_ob):
            for ig in range(pl.n_ig):
                if pl.reuse:
                    self.load(p, bb, vg, ig)
                self._step(p, bb, vg, ob, ig)
            if pl.reuse:
                self.readres(pl.q(p, bb, vg, ob, 0))

    def _is(self, p, bb, vg) -> None:
        pl = self.p
        for ig in range(pl.n_ig):
            if pl.reuse:
                self.load(p, bb, vg, ig)
            for ob in range(pl.n_ob):
                self._step(p, bb, vg, ob, ig)
                if pl.reuse:
                    self.readres(pl.q(p, bb, vg, ob, ig))


# lower_newton writes the kernel records with the compiled walk (`native.stream`);
# False: with `_Stream` (the definition; tests compare the two)
NATIVE = True

_COUNT_NAMES = ("GWRITE", "GWRITE_columns", "G_ACT", "COMP", "COMP_records", "READRES", "PREA")


def group_stream(plan: _Plan, backend: Backend, classes, per_core: bool, seg_ok, need, cores: int,
                 native: bool = True):
    """One group's kernel: (records {field: [N] int32}, host-data rows ([R, 5]
    (pass, b, v, i, cc) or (-1, 0, 0, 0, 0) for padding: a list of tuples,
    or an int64 array when native), bank -> sorted flat columns the COMPs
    read, command counts).  Native records and rows are views of scratch
    arrays (`native.stream`), valid until the next call: copy what you keep.  `native` runs the compiled walk
    (`native.stream`), else `_Stream` (the readable definition).  A stream whose bound
    (`_stream_bound`, the scratch the compiled walk allocates) exceeds `MAX_STREAM_RECORDS` is a
    `PimCompileError` a search skips."""
    bound = _stream_bound(plan, classes, per_core, backend.core.cols)
    if bound[0] > MAX_STREAM_RECORDS:
        raise PimCompileError(f"newton: one group's command stream would hold up to {bound[0]:,} commands, over the "
                              f"{MAX_STREAM_RECORDS:,} pimjax lowers (memory); a draft over more groups or cores "
                              "divides it")
    if not native:
        st = _Stream(plan, backend, classes, per_core, seg_ok, need, cores)
        st.build()
        return st.b.build(), st.rows, st.reads(), dict(st.count)
    from . import native as nat
    prm = _native_params(plan, backend, per_core, cores)
    ptr = np.cumsum([0] + [len(c) for c in classes])
    flat = np.asarray([c for cl in classes for c in cl], np.int64)
    dummy = np.zeros((1, 1, 1, 1), bool)
    out, rows, runs, cnt = nat.stream(prm, plan.seg_base, plan.seg_cols, ptr, flat,
                                      seg_ok if per_core else dummy,
                                      need if per_core else np.zeros((1, 1), bool),
                                      gw_banks(backend), _NATIVE_CODES,
                                      bound=bound)
    records = {f: out[k] for k, f in enumerate(RECORD_FIELDS)}
    return records, rows, _read_columns(runs, cores), dict(zip(_COUNT_NAMES, map(int, cnt)))


_NATIVE_CODES = np.array([Op.PREA, Op.GWRITE, Op.G_ACT, Op.COMP, Op.READRES, Phase.REARRANGE,
                          Phase.COMPUTE, Phase.READBACK, V_LAYOUT], np.int64)


def _stream_bound(plan: _Plan, classes, per_core: bool, cols: int) -> tuple[int, int, int]:
    """Upper bounds on one group's (records, host rows, read runs), so the
    compiled walk writes its arrays in one pass: per (pass, b, vector group)
    every segment (o, i) is one step of at most R row runs, each a G_ACT and
    kv COMPs per commanded bank, at most one READRES per bank; a load is a
    PREA and kv * ki * cc GWRITE columns."""
    r = -(-plan.cc // cols) + 1                              # row runs of one segment
    steps = plan.n_o * plan.t_in
    if not plan.reuse:
        loads = steps
    else:
        loads = plan.n_ob * plan.n_ig if plan.dataflow == "os" else plan.n_ig
    banks = [len(c) if per_core else 1 for c in classes]
    units = plan.n_b * plan.n_vg
    gw = loads * plan.kv * plan.ki * plan.cc
    records = units * sum(steps * (r * plan.kv * k + r + k) + loads + gw for k in banks)
    return records, units * len(classes) * gw, units * sum(steps * r * k for k in banks)


MAX_STREAM_RECORDS = 1 << 24   # a group's command stream pimjax lowers: 16.8 M records of `program.RECORD_FIELDS`
                                #   (~1 GB of int32 scratch and as much again for the program) -- VGG16's 224 x 224
                                #   x 64 CONV on one group would be 44 M commands and 23 GB in the search's batch


def _native_params(plan: _Plan, backend: Backend, per_core: bool, cores: int) -> np.ndarray:
    """`native._walk`'s prm vector."""
    return np.array([plan.n_b, plan.n_v, plan.n_o, plan.t_in, plan.kv, plan.ki, plan.lo, plan.n_vg,
                     plan.n_ig, plan.n_ob, plan.slots, plan.dataflow == "os", plan.reuse, per_core,
                     plan.buf_cols, backend.core.cols, int(readres_bursts(backend, plan.latches, False)),
                     int(readres_bursts(backend, plan.latches, True)), cores], np.int64)


def _sorted_columns(runs: np.ndarray) -> np.ndarray:
    """Sorted unique flat columns of (first column, n) runs [U, 2]."""
    if len(runs) == 0:
        return np.zeros(0, np.int64)
    from .native import sorted_columns
    return sorted_columns(np.ascontiguousarray(runs[:, 0]), np.ascontiguousarray(runs[:, 1]))


def _read_columns(runs: np.ndarray, cores: int) -> dict[int, np.ndarray]:
    """`_Stream.reads` from the compiled walk's read runs [U, 3] (bank or -1, first, n)."""
    if len(runs) and runs[0, 0] < 0:                 # broadcast: every bank reads the same
        shared = _sorted_columns(runs[:, 1:])
        return {c: shared for c in range(cores)}
    banks = runs[:, 0]
    return {int(c): _sorted_columns(runs[banks == c, 1:]) for c in np.unique(banks)}


_COMP, _COMPUTE = int(Op.COMP), int(Phase.COMPUTE)


# --------------------------------------------------------------------------
# layouts and host data
# --------------------------------------------------------------------------
def _m_layout(op, tiles, plan: _Plan, shapes, cols: int) -> TensorLayout:
    """Matrix tile: local (b, o, r) -> (0, row, col, lane) of its segment."""
    M = op.operands[plan.mi]

    def positions():
        b, o, r = np.meshgrid(np.arange(plan.n_b), np.arange(plan.n_o), np.arange(plan.n_r), indexing="ij")
        rc, lane = r // plan.lanes, r % plan.lanes
        i, cc = rc // plan.cc, rc % plan.cc
        flat = plan.seg_base[b, o, i] + cc
        return np.stack([np.zeros_like(flat), flat // cols, flat % cols, lane], -1).reshape(-1, 4)

    # where each matrix element lives: only `execute` reads it (computed on first use)
    pos = LazyPositions(positions, plan.n_b * plan.n_o * plan.n_r)
    m_vars = tuple(plan.o_b + plan.o_m + plan.red)
    return tile_layout(tiles, "M", plan.mi, m_vars, M.index_map, shapes[M.value], pos,
                       tuple(plan.box[v] for v in m_vars))


def _v_layout(op, tiles, plan: _Plan, shapes) -> TensorLayout:
    """Placeholder entry for the buffer operand (its data travels as host-data rows)."""
    V = op.operands[plan.vi]
    return tile_layout(tiles, "v", plan.vi, (), (), shapes[V.value], np.zeros((1, 4), np.int32), ())


def _r_layout(op, tiles, plan: _Plan, n_pass: int, kappa: np.ndarray) -> TensorLayout:
    """Results: local (b, v, o, slot, pass) -> (0, host slot q, latch, -1).
    A core's results are valid only in its own class's pass (a band on #pass)."""
    dims = [np.arange(plan.n_b), np.arange(plan.n_v), np.arange(plan.n_o), np.arange(plan.slots),
            np.arange(n_pass)]
    b, v, o, sl, p = np.meshgrid(*dims, indexing="ij")
    q = ((((p * plan.n_b + b) * plan.n_vg + v // plan.kv) * plan.n_ob + o // plan.lo) * plan.slots + sl)
    latch = (v % plan.kv) * plan.lo + o % plan.lo
    pos = np.stack([np.zeros_like(q), q, latch, -np.ones_like(q)], -1).reshape(-1, 4)
    r_vars = tuple(plan.o_b + plan.o_v + plan.o_m) + ("#slot", "#pass")
    rbox = tuple(plan.box[v] for v in plan.o_b + plan.o_v + plan.o_m) + (plan.slots, n_pass)
    lay = tile_layout(tiles, "acc", -1, r_vars, *acc_space(op), pos, rbox,
                      synthetic={"#slot": plan.slots, "#pass": n_pass})
    lo = np.where(kappa >= 0, kappa, 0)
    hi = np.where(kappa >= 0, kappa + 1, 0)
    bands = lay.bands + ((AffineExpr.var("#pass"), lo, hi),)
    return TensorLayout(lay.name, lay.operand, lay.vars, lay.start, lay.length, lay.box, lay.index_map,
                        lay.shape, lay.positions, bands, space="latch")


def _host_rows(op, tiles, plan: _Plan, rows: list, g: int, reps: list[int], shapes) -> np.ndarray:
    """[len(rows), lanes] flat indices of the vector operand for GWRITE host
    rows (pass, b, v, i, cc) of group g (-1: zero padding)."""
    V = op.operands[plan.vi]
    n = len(rows)
    if n == 0:
        return np.zeros((0, plan.lanes), np.int64)
    d = np.asarray(rows, np.int64)
    p, b, v, i, cc = d.T
    pad = p < 0
    c0 = np.asarray(reps, np.int64)[np.where(pad, 0, p)] if reps else np.zeros(n, np.int64)
    r = ((i * plan.cc + cc) * plan.lanes)[:, None] + np.arange(plan.lanes)[None, :]   # [n, lanes]
    valid = (r < plan.n_r) & ~pad[:, None]
    local = {}
    for vs, idx in ((plan.o_b, b), (plan.o_v, v)):
        if vs:
            for name, li in zip(vs, np.unravel_index(idx, [plan.box[x] for x in vs])):
                local[name] = np.broadcast_to(li[:, None], r.shape)
    if plan.red:
        rr = np.minimum(r, plan.n_r - 1)
        for name, li in zip(plan.red, np.unravel_index(rr, [plan.box[x] for x in plan.red])):
            local[name] = li
    env = {}
    for name, li in local.items():
        k = tiles.var_index(name)
        env[name] = tiles.start[g, c0, k][:, None] + li
        valid &= li < tiles.length[g, c0, k][:, None]
    for expr, lo, hi in _v_bands(tiles, plan):
        val, _ = expr.evaluate(env)
        valid &= (val >= lo[g, c0][:, None]) & (val < hi[g, c0][:, None])
    flat, ok = flat_index(V, shapes[V.value], env, r)
    return np.where(valid & ok, flat, -1)


# --------------------------------------------------------------------------
# the lowering
# --------------------------------------------------------------------------
def newton_options(op: PimOp, options: dict) -> dict:
    """`options` with Newton's defaults filled in (`buffer_reuse` read as `register_reuse`), after
    checking that `op` is what a Newton MAC computes: a sum of products of two operands (through
    value-preserving conversions).  Both lowerings (GEMV and packed) start here."""
    opts = {**DEFAULT_OPTIONS, **options}
    if "buffer_reuse" in options:                     # Newton's name for register reuse
        opts["register_reuse"] = options["buffer_reuse"]
    if op.kind != "contraction":
        raise PimCompileError(f"newton runs contractions only; {op.name} is a {op.kind} op")
    if op.combiner != "add" or not (isinstance(op.body, Prim) and op.body.name == "mul"
                                    and len(op.body_operands) == 2
                                    and all(isinstance(strip_converts(a), Arg) for a in op.body.args)):
        raise PimCompileError(f"newton MACs need a sum of products of two operands ({op.name})")
    return opts


def lower_newton(op: PimOp, draft: Draft, backend: Backend, shapes: dict | None = None, **options) -> Program:
    """Lower one contraction to a Newton / AiM program (see module docstring).

    options (all on by default): register_reuse (GWRITE only when the buffer
    contents change, READRES only when results are final), data_block_layout,
    channel_parallel (host->PIM writes of the groups overlap through the
    host's staging buffer), resident=(operand indices placed once, their
    writes flagged `resident`), result_dtype, matrix (the operand index kept
    in the banks; default None: the larger operand, `matrix_and_vector`).
    A packed draft (`draft.pack`) is PIMFlow's mapping: the family's hook
    (`backends/newton/__init__.py`) sends it to `packed.lower_packed`.

    Example:
        >>> prog = lower_newton(op, draft, get_backend("newton"))   # doctest: +SKIP
        >>> prog.stats.commands["G_ACT"]                             # doctest: +SKIP
    """
    opts = newton_options(op, options)
    if draft.pack:
        raise PimCompileError("newton: a packed draft is PIMFlow's mapping, lowered by packed.lower_packed")
    shapes = value_shapes(op, shapes)
    tiles = core_tiles(op, draft)
    plan = _plan(op, draft, backend, tiles, shapes, opts)
    _check_bands(tiles, plan)
    V = op.operands[plan.vi]
    classes, kappa = _classes(tiles, plan, set(V.vars))
    n_pass = max(1, max(len(c) for c in classes))
    per_core = draft.granularity == "core"
    G, C = tiles.groups, tiles.cores

    m_lay = _m_layout(op, tiles, plan, shapes, backend.core.cols)
    v_lay = _v_layout(op, tiles, plan, shapes)
    r_lay = _r_layout(op, tiles, plan, n_pass, kappa)
    Q = n_pass * plan.n_b * plan.n_vg * plan.n_ob * plan.slots
    if per_core:
        _, mvalid = global_index(m_lay)
        mv = mvalid.reshape(G, C, plan.n_b, plan.n_o, plan.n_r)
        pad = plan.t_in * plan.cc * plan.lanes - plan.n_r
        mv = np.pad(mv, ((0, 0),) * 4 + ((0, pad),)).reshape(G, C, plan.n_b, plan.n_o, plan.t_in, -1)
        seg_ok = mv.any(-1)
        _, rvalid = global_index(r_lay)
        need = np.zeros((G, C, Q), bool)
        qs = r_lay.positions[:, 1]
        for g in range(G):
            for c in range(C):
                need[g, c, np.unique(qs[rvalid[g, c]])] = True
    resident = plan.mi in set(opts["resident"])
    per_bg = backend.group.banks_per_bank_group

    cache: dict = {}
    streams, rows_per_group, counts = [], [], []
    for g in range(G):
        key = (len(classes[g]),) if not per_core else \
            (tuple(map(tuple, classes[g])), seg_ok[g].tobytes(), need[g].tobytes())
        if key not in cache:
            kern, rows, reads, count = group_stream(plan, backend, classes[g], per_core,
                                                    seg_ok[g] if per_core else None,
                                                    need[g] if per_core else None, C, native=NATIVE)
            pre = RecordBuilder()
            wr = rearrange(pre, reads, backend.core.cols, per_bg, resident)
            place = pre.build()
            # one new table (kern may be the compiled walk's scratch; rows too)
            rec = {f: np.concatenate([place[f], kern[f]]) for f in RECORD_FIELDS}
            cache[key] = (rec, np.array(rows) if NATIVE else rows, dict(count, WR=wr))
        rec, rows, cnt = cache[key]
        streams.append(rec)
        rows_per_group.append(rows)
        counts.append(cnt)
    shared = len(cache) == 1
    records = stack_streams(streams[:1] if shared else streams)

    n_rows = max(len(r) for r in rows_per_group)

    def host_rows():
        host = np.full((G, n_rows, plan.lanes), -1, np.int64)
        for g in range(G):
            reps = [cl[0] for cl in classes[g]]
            host[g, :len(rows_per_group[g])] = _host_rows(op, tiles, plan, rows_per_group[g], g, reps, shapes)
        return host

    # the vector elements each GWRITE carries: only `execute` reads them (computed on first use)
    host = LazyArray(host_rows, (G, n_rows, plan.lanes), np.int64)

    meta = dict(kind="newton-gemv", M=plan.mi, v=plan.vi, host_data_operands=(plan.vi,),
                cols=backend.core.cols, lanes=plan.lanes,          # bank geometry, for `execute`
                n_b=plan.n_b, n_v=plan.n_v, n_o=plan.n_o, n_r=plan.n_r, chunk_cols=plan.cc, t_in=plan.t_in,
                kv=plan.kv, ki=plan.ki, lo=plan.lo, slots=plan.slots, passes=n_pass, host_slots=Q,
                latches=max(1, backend.core.n_output_regs), buffer_columns=plan.buf_cols,
                buffers=max(1, backend.group.n_global_buffers), m_rows=plan.m_rows,
                dataflow=plan.dataflow, per_core=per_core,
                result_shape=tuple(shapes[op.result.value]), result_dtype=opts["result_dtype"])
    ctx = LowerContext(op, draft, backend, tiles, shapes, opts)
    scale = G if shared else 1
    # what the host receives: every READRES's latches at their width, whatever bus time the backend
    # charges for them (`Core.readres_bytes` may be 0: the fork's READRES is a command slot)
    rr = np.asarray(records.op) == Op.READRES
    if backend.core.readback_bus_bytes > 0:
        readback = int(np.asarray(records.n)[rr].sum()) * backend.core.col_bytes * scale   # the bursts on the bus
    else:
        banks = np.where(np.asarray(records.core)[rr] < 0, backend.group.cores_per_group, 1)
        readback = int((banks * np.asarray(records.aux)[rr]).sum()) * backend.core.reg_bytes * scale
    stats = newton_stats(ctx, records, counts, readback, scale)
    return lowered_program(ctx, (m_lay, v_lay, r_lay), records, (host,),
                           Readback(R_LAYOUT, combiner="add", lane_partials=False, epilogue_on_host=True),
                           stats, meta, G, C)
