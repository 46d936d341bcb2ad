"""Lowering GEMVs to AttAcc command programs: contractions (GEMV, MMTV, batched products, GEMM
as GEMV sequences, im2col convolutions) and add-reductions (a GEMV with a ones vector) via
`lower_attacc`; score -> softmax -> context is `attention.py`'s `lower_attention`.  The machine
model is `geometry.py`'s docstring; the record stream both share is `stream.py`.

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

which `tests/backends/attacc/test_attacc.py` checks (with the same bound composed
through the softmax for attention).  "wide" mode runs all of it in float32.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ...errors import PimCompileError
from ...hw.core import Backend
from ...lower.layout import acc_space, global_index, lane_order, tile_layout, value_shapes
from ...lower.program import RECORD_FIELDS, LazyArray, LazyPositions, Op, Phase, Program, Readback, TensorLayout
from ...lower.tiles import CoreTiles, core_tiles
from ...partition.draft import Draft
from ...partition.verify import matrix_and_vector
from ...trace.ir import Arg, PimOp, Prim, strip_converts
from . import native
from .geometry import DEFAULT_OPTIONS, HOST_ONE, LANES, MACMODE, TREE, Geometry, Tables
from .stream import (
    Emitter,
    GemvPlan,
    SoftmaxBuffer,
    finish_program,
    gemv_plan,
    matrix_positions,
    place_matrix,
    unique_rows,
    unit_classes,
)


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


def plain_arg(e) -> int | None:
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
                and plain_arg(body.args[0]) is not None and plain_arg(body.args[1]) is not None
                and plain_arg(body.args[0]) != plain_arg(body.args[1])):
            raise PimCompileError(f"attacc GEMV units need a product of two operands ({op.name})")
        mi, vi = matrix_and_vector(op, shapes)
        M, V = op.operands[mi], op.operands[vi]
        o_b, o_v, o_m, red = _split_vars(op, set(M.vars), set(V.vars))
    else:
        # RED as a GEMV with a ones vector (how DCC runs reductions on AttAcc)
        if plain_arg(op.body) is None:
            raise PimCompileError(f"attacc reductions need a plain operand body ({op.name})")
        mi, vi = plain_arg(op.body), None
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


def _gemv_layouts(op: PimOp, tiles: CoreTiles, shapes: dict, ro: _GemvRoles, gp: GemvPlan, geo: Geometry,
                  box: dict, n: tuple):
    """The program's layouts and host index tables, n = (n_b, n_v, n_o, n_r) per-unit extents:
    the matrix layout (positions computed on first use), the result layout (descriptive:
    a softmax-buffer slot per local output), flat result indices per unit class
    `flat_o[G, classes, n_b, n_v, t_out * 16]` (-1 past n_o) with `ocls[C]`, and the vector's host indices
    padded to whole GB entries `vidx[G, classes, n_b, n_v, E, 16]` (-1: padding,
    HOST_ONE: the ones vector of a reduction) with `vcls[C]`."""
    G, C = tiles.groups, tiles.cores
    n_b, n_v, n_o, n_r = n
    o_b, o_v, o_m, red = ro.o_b, ro.o_v, ro.o_m, ro.red
    M = op.operands[ro.mi]
    m_vars = tuple(o_b + o_m + red)
    # where each matrix element lives: only `execute` reads it (computed on first use)
    m_pos = LazyPositions(lambda: matrix_positions(gp, geo, 0), n_b * n_o * n_r)
    m_layout = tile_layout(tiles, "M", ro.mi, m_vars, M.index_map, shapes[M.value], m_pos,
                           tuple(box[v] for v in m_vars))
    r_vars = tuple(o_b + o_v + o_m)
    rbox = tuple(box[v] for v in r_vars)
    rop = np.arange(int(np.prod(rbox, dtype=np.int64))) % max(1, n_o)
    r_pos = np.stack([np.zeros_like(rop), np.zeros_like(rop), rop // LANES, rop % LANES], -1)
    res_layout = tile_layout(tiles, "acc", -1, r_vars, *acc_space(op), r_pos, rbox)
    res_layout = TensorLayout(**{**res_layout.__dict__, "space": "softmax"})
    # flat result / vector indices per unit class (units with equal ranges hold equal indices)
    flat_o, ocls = _class_index(res_layout, last=n_o, pad=gp.t_out * LANES - n_o)
    flat_o = flat_o.reshape(G, -1, n_b, n_v, gp.t_out * LANES)          # [G, classes, n_b, n_v, t_out * 16]

    # host data: the vector (or ones) per core, instance, entry
    if ro.vi is not None:
        V = op.operands[ro.vi]
        v_vars = tuple(o_b + o_v + red)
        vlay = tile_layout(tiles, "v", ro.vi, v_vars, V.index_map, shapes[V.value],
                           np.zeros((1, 4), np.int32), tuple(box[v] for v in v_vars))
        vidx, vcls = _class_index(vlay, last=n_r, pad=gp.E * LANES - n_r)
    else:
        vidx, vcls = np.full((G, 1, n_b, n_v, n_r), HOST_ONE, np.int64), np.zeros(C, np.int64)
        vidx = np.pad(vidx, ((0, 0),) * 4 + ((0, gp.E * LANES - n_r),), constant_values=-1)
    vidx = vidx.reshape(G, -1, n_b, n_v, gp.E, LANES)
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
    gp = gemv_plan(mode, n_b, n_v, n_o, n_r, cap, order_is, opts["gb_tile"])
    rows_needed = -(-gp.v_total // (geo.seg if geo.level != "bg" else 128))
    if rows_needed > backend.core.rows:
        raise PimCompileError(f"attacc: {rows_needed} rows of matrix data per bank exceed {backend.core.rows}")
    m_layout, res_layout, r_vars, flat_o, ocls, vidx, vcls = _gemv_layouts(op, tiles, shapes, ro, gp, geo, box, n)

    tables = Tables(C, G)
    em = Emitter(geo, draft.granularity, tables, C)
    resident = set(opts["resident"])
    place_matrix(em, geo, 0, gp.v_total, 0, C, ro.mi in resident)
    em.barrier()                                                         # the kernel starts after placement

    cls = np.arange(C) if draft.reduction == "host" else unit_classes(tiles, list(r_vars))
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
            return finish_program(op, draft, backend, tiles, shapes, [m_layout, res_layout], em, host, meta, opts, readback)
        # the compiled form declined: the Python form decides, from a fresh placement
        em = Emitter(geo, draft.granularity, tables, C)
        place_matrix(em, geo, 0, gp.v_total, 0, C, ro.mi in resident)
        em.barrier()
    # per unit (the compiled form reads the per-class tables; copying them out per unit
    # cost ~5 ms a draft there)
    sb = _gemv_records(em, tables, gp, vidx[:, vcls], flat_o[:, ocls], cls, opts, traverse_is, reuse, mode,
                       cap, C, G)
    route_src, route_dst, host = tables.arrays()
    meta = dict(head, route_src=route_src, route_dst=route_dst, readback_map=sb.readback_map(),
                sb_rows=max(1, sb.used_max), **tail)
    return finish_program(op, draft, backend, tiles, shapes, [m_layout, res_layout], em, host, meta, opts, readback)


def _gemv_steps(gp: GemvPlan, n_b: int, n_v: int, traverse_is: bool, chunk: int) -> list:
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


def _gemv_records(em: Emitter, tables: Tables, gp: GemvPlan, vidx: np.ndarray, flat_o: np.ndarray,
                  cls: np.ndarray, opts: dict, traverse_is: bool, reuse: bool, mode: int, cap: int,
                  C: int, G: int) -> "SoftmaxBuffer":
    """The Python emitter's kernel records after placement: per step a GB load (WRGB, into
    the other half of the GB ahead of time when it fits: prefetch), the MACs, and the
    drain of finished blocks into softmax-buffer rows (issued after the next step's
    barrier so it overlaps).  vidx [G, C, n_b, n_v, E, 16] and flat_o [G, C, n_b, n_v, t_out * 16]
    are per unit; units of one class `cls[c]` share a softmax-buffer row.  Returns the
    flushed softmax buffer (its read-back map and peak rows)."""
    cls_ids = sorted(int(k) for k in np.unique(cls))
    rep = {k: int(np.nonzero(cls == k)[0][0]) for k in cls_ids}
    n_cls = len(cls_ids)
    sb = SoftmaxBuffer(opts["sb_rows"], G)
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
            def pending(b=b, v=v, j=j, complete=complete):     # this step's drain, bound now, issued later
                return drain(b, v, j, complete)
    if pending:
        em.barrier()
        pending()
    sb.flush(em, 1, final=True)
    return sb


def _class_index(layout: TensorLayout, last: int = 1, pad: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """`global_index` (-1 where invalid) of one unit per class of units whose
    ranges and bands agree in every group -- they hold the same indices:
    ([G, classes, prod(box) // last, last + pad] int64: each run of `last`
    positions followed by `pad` -1s; class of each unit [C]).

    Units of different groups often hold the same indices too (a vector every
    group reads whole): `global_index` runs once per distinct (group, unit)
    range and the table is gathered from those rows (42 M positions of a
    LLaMA-2-70B GEMV's vector took 2 s per lowering computed group by group)."""
    G, C = layout.start.shape[:2]
    parts = [layout.start, layout.length] + [x[..., None] for _, lo, hi in layout.bands for x in (lo, hi)]
    ranges = np.concatenate(parts, -1)                                   # [G, C, k]
    ufirst, ucls = unique_rows(ranges.reshape(G * C, -1))                # distinct (group, unit) ranges
    ucls = ucls.reshape(G, C)
    first, cls = unique_rows(np.ascontiguousarray(ucls.T))               # units equal in every group

    def pick(a):                                                         # [G, C, ...] -> [1, U, ...]
        return a.reshape((1, G * C) + a.shape[2:])[:, ufirst]
    sub = replace(layout, start=pick(layout.start), length=pick(layout.length),
                  bands=tuple((e, pick(lo), pick(hi)) for e, lo, hi in layout.bands))
    flat, valid = global_index(sub)                                      # [1, U, P]
    rows = np.where(valid[0], flat[0], -1).reshape(len(ufirst), -1, last)
    if pad:      # before the gather: padding the gathered table cost more than computing it
        rows = np.pad(rows, ((0, 0), (0, 0), (0, pad)), constant_values=-1)
    return rows[ucls[:, first]], cls.reshape(-1)


def _take_rows(table: np.ndarray, at: np.ndarray) -> np.ndarray:
    """`table[:, at[:, 0], at[:, 1], at[:, 2], at[:, 3], :]` of a table [G, a, b, c, d, 16] and
    indices at [n, 4]: [G, n, 16]."""
    flat = np.ravel_multi_index(tuple(np.asarray(at, np.int64).T), table.shape[1:5])
    return table.reshape(table.shape[0], -1, table.shape[5])[:, flat]


def _gemv_native(em: Emitter, geo: Geometry, gp: GemvPlan, vidx: np.ndarray, vcls: np.ndarray, flat_o: np.ndarray,
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
    # one flat take per table: numpy's four-array fancy index over [G, K, n_b, n_v, E, 16] was a fifth of
    # a LLaMA-2-70B serving study's lowering time
    host = _take_rows(vidx, rep) if len(rep) else np.zeros((G, 0, LANES), np.int64)
    # read-back rows: the class representative's outputs of block j (-1 past the last output)
    padded = flat_o.reshape(flat_o.shape[:4] + (gp.t_out, LANES))
    _, first = np.unique(cls, return_index=True)                        # a result class's first unit
    readback = _take_rows(padded, np.column_stack([ocls[first[rb[:, 0]]], rb[:, 1:4]])) if h else \
        np.zeros((G, 0, LANES), np.int64)
    return host, dict(route_src=rsrc, route_dst=rdst, readback_map=readback, sb_rows=max(1, int(used)))
