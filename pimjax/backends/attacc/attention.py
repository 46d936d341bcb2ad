"""Lowering attention to one AttAcc program: score -> softmax -> context (the AttAcc pipeline),
`lower_attention` over the ops `lower.patterns.match_attention` finds (`attention_op` builds the
fused op the program stands for).  The GEMV plans, placement and record stream are `stream.py`'s.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import PimCompileError
from ...hw.core import Backend
from ...lower.layout import acc_space, global_index, tile_layout
from ...lower.patterns import dim_map, score_seq_dim
from ...lower.program import LazyPositions, Op, Phase, Program, Readback, TensorLayout
from ...lower.tiles import CoreTiles, core_tiles
from ...partition.dimsets import dimension_sets
from ...partition.draft import Draft
from ...trace.ir import Acc, Access, Const, LoopVar, PimOp, Prim
from .geometry import DEFAULT_OPTIONS, LANES, MACMODE, TREE, Geometry, Tables
from .lower import plain_arg
from .stream import (
    Emitter,
    GemvPlan,
    SoftmaxBuffer,
    finish_program,
    gemv_plan,
    load_commands,
    matrix_positions,
    place_matrix,
    unit_classes,
)

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
    a, b = plain_arg(body.args[0]), plain_arg(body.args[1])
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
    gs = gemv_plan(TREE, int(k_store.max()) + 1, 1, n_n, n_d, cap, lay_is(-(-n_d // LANES)),
               opts["gb_tile"], align).shared(k_store)
    gc = gemv_plan(MACMODE, int(v_store.max()) + 1, 1, n_d, n_n, cap, lay_is(-(-n_n // LANES)),
               opts["gb_tile"], align).shared(v_store)
    rows_k = int(geo.address(max(gs.v_total - 1, 0))[1]) + 1
    if rows_k + int(geo.address(max(gc.v_total - 1, 0))[1]) + 1 > backend.core.rows:
        raise PimCompileError("attacc attention: K and V exceed the rows of a bank")
    k_layout, v_layout, res_layout, flat_o, qidx = _attention_layouts(at, ts, tx, shapes, box, gs, gc, geo,
                                                                      rows_k)

    tables = Tables(C, G)
    em = Emitter(geo, draft.granularity, tables, C)
    resident = set(opts["resident"])
    place_matrix(em, geo, 0, gs.v_total, 0, C, 1 in resident)
    place_matrix(em, geo, 1, gc.v_total, rows_k, C, 2 in resident)
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
    return finish_program(at.fused, draft, backend, ts, shapes, [k_layout, v_layout, res_layout], em, host, meta, opts,
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


def _attention_layouts(at: _Attention, ts: CoreTiles, tx: CoreTiles, shapes: dict, box: dict, gs: GemvPlan,
                       gc: GemvPlan, geo: Geometry, rows_k: int):
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
    k_pos = LazyPositions(lambda: matrix_positions(gs, geo, 0), gs.n_b * gs.n_o * gs.n_r)
    v_pos = LazyPositions(lambda: matrix_positions(gc, geo, rows_k), gc.n_b * gc.n_o * gc.n_r)
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
    em: Emitter
    tables: Tables
    geo: Geometry
    gs: GemvPlan
    gc: GemvPlan
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
    sb: "SoftmaxBuffer"
    srows: dict
    crows: dict
    sfm_specs: list
    host_ids: dict


def _head_steps(at: _Attention, draft: Draft, ts: CoreTiles, tx: CoreTiles, opts: dict, em: Emitter,
                tables: Tables, gs: GemvPlan, gc: GemvPlan, rows_k: int, qidx: np.ndarray,
                flat_o: np.ndarray) -> _HeadSteps:
    """The unit classes of the score and context GEMVs and a fresh softmax buffer."""
    s2c = {s: c for c, s in at.c2s.items()}
    C = ts.cores
    # the softmax needs whole scores: head-dim partials always merge in the channel accumulator
    cls_s = unit_classes(ts, at.bh + [at.n])
    cls_c = np.arange(C) if draft.reduction == "host" else unit_classes(tx, [s2c[v] for v in at.bh] + [s2c[at.dk]])
    ids_s, ids_c = sorted(set(cls_s.tolist())), sorted(set(cls_c.tolist()))
    rep_s = {k: int(np.nonzero(cls_s == k)[0][0]) for k in ids_s}
    rep_c = {k: int(np.nonzero(cls_c == k)[0][0]) for k in ids_c}
    heads = unit_classes(ts, at.bh)                                          # units of one head (per step)
    n_len = {k: int(ts.length[0, rep_s[k], ts.var_index(at.n)]) for k in ids_s}
    # unit -> position of its class in ids_s / ids_c: a drain's per-unit rows by one gather
    # (a list over the units per drain cost O(C) in Python, thousands of times per program)
    pos_s, pos_c = np.searchsorted(ids_s, cls_s), np.searchsorted(ids_c, cls_c)
    return _HeadSteps(em, tables, em.geo, gs, gc, rows_k, qidx, flat_o, cls_s, ids_s, ids_c, rep_c, pos_s, pos_c,
                      heads, n_len, at.scale, C, ts.groups, SoftmaxBuffer(opts["sb_rows"], ts.groups),
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
    return load_commands(h.geo, need, h.em.gran, h.C)


def _p_cmds(h: _HeadSteps, k, i, base):
    """MVGB commands moving the softmaxed scores P (tile i of head k) into the GBs from `base`."""
    gc = h.gc
    need = {c: [(h.srows[k][(int(h.cls_s[c]), e)], base + e - gc.KI * i)
                for e in range(gc.KI * i, gc.KI * i + gc.ke(i))] for c in range(h.C)}
    return load_commands(h.geo, need, h.em.gran, h.C)


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
