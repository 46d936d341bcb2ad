"""Value interpretation of UPMEM programs (see `backends/upmem/lower.py`).

State: the MRAM of every DPU as words, `mram[D, W]` (D = ranks x DPUs per
rank, W = 32-bit words), with a written-mask `ok[D, W]`.  Nothing reaches
MRAM except through the program's records:

1. host -> MRAM: `XFER_H2D` records copy the local positions they name of
   their layout (parallel: every DPU of every rank; serial: the named DPU of
   every rank; broadcast: DPU 0's data to every DPU) into MRAM.  Positions
   outside the tensor or the DPU's tile are never written.
2. the kernel: every `DPU_EXEC` record computes the compute points it names
   on every DPU, reading each operand word from MRAM through the caching
   tile the tasklet's most recent `DMA_RD` of that operand brought into WRAM
   (a word outside that tile reads as unwritten); ELEMENTWISE points yield
   one value each, REDUCE points are combined per output slot (segment
   sums over the points), MERGE folds the tasklets' partial slots.  A
   `DMA_WR` stores the slots it covers into MRAM if their last contributing
   EXEC (or MERGE) came before it.  An output whose valid points were not
   all computed exactly once is marked unwritten.
3. MRAM -> host: `XFER_D2H` records read result words; the host merges
   partials (rfactor, per-tasklet partials) with the op's combiner, applies
   the epilogue and writes through the result map.

Vectorised numpy: record ranges are expanded into index arrays (the
program structure is static), values move with gathers and segment
reductions (`ufunc.at`) over the DPUs' points; there is no Python loop
over records (only over layouts, operands and (tasklet, operand) pairs).
numpy rather than jnp because every draft has its own shapes and an XLA
compile per draft would dominate; int32 arithmetic wraps exactly as on the
DPU (sums accumulate in int64 and wrap when cast back, which is the same
modulo 2^32), float32 stays float32.  The result is returned as a jax
array.

Arithmetic: "backend" = int32, as the DPU computes (wrap-around on
overflow, exact for integer inputs; UPMEM has no FPU, so floating inputs
must hold integral values — they are converted, otherwise ValueError);
"wide" = float32 throughout (to check a program's structure with float
inputs).  Unwritten / unread data: NaN in "wide"; in "backend" the result
is int32, so `execute` raises `ValueError` naming how many result elements
the program failed to produce.
"""
from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from ...lower.layout import global_index
from ...lower.merge import epilogue_value
from ...lower.program import Op, Program, TensorLayout
from ...trace import evaluate as trace_eval
from ...trace.ir import Arg, Const, Prim
from .lower import Exec, Xfer, mram_address


def _words(layout: TensorLayout, local: np.ndarray) -> np.ndarray:
    """MRAM word index of local positions of a layout."""
    return (mram_address(layout.positions[np.asarray(local, np.int64)]) // 4).astype(np.int64)


def _convert_inputs(arrays, arithmetic: str):
    out = []
    for a in arrays:
        if isinstance(a, jax.core.Tracer):
            raise ValueError("the upmem interpreter needs concrete arrays (it is not traceable)")
        a = np.asarray(a)
        if arithmetic == "wide":
            out.append(a.astype(np.float32))
            continue
        if np.issubdtype(a.dtype, np.floating) and not np.all(a == np.round(a)):
            raise ValueError("upmem DPUs have no floating-point unit: floating inputs must hold "
                             "integral values (or use arithmetic='wide')")
        out.append(a.astype(np.int64).astype(np.int32))
    return out


def _layout_values(layout: TensorLayout, array: np.ndarray):
    """([G, C, N] values, [G, C, N] valid) of a layout's local boxes."""
    flat, valid = global_index(layout)
    vals = np.ravel(array)[flat] if array.size else np.zeros(flat.shape, array.dtype)
    return np.where(valid, vals, 0).astype(array.dtype), valid


def _expand(rec: dict, mask: np.ndarray, eb: int, size: int):
    """Local positions of transfer records: (record idx, position) pairs."""
    idx = np.flatnonzero(mask)
    if idx.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    per = np.maximum(rec["n"][idx] // eb, 1)
    cnt = rec["aux"][idx]
    tot = per * cnt
    r = np.repeat(idx, tot)
    k = np.arange(tot.sum()) - np.repeat(np.cumsum(tot) - tot, tot)
    per_r = np.repeat(per, tot)
    pos = rec["arg"][r] + (k // per_r) * rec["reg_step"][r] + k % per_r
    keep = pos < size
    return r[keep], pos[keep]


def _reaches(rec: dict, r: np.ndarray, G: int, C: int) -> np.ndarray:
    """[D, len(r)] which DPUs (rank-major) each expanded transfer entry reaches."""
    core = rec["core"][r]
    hit = (core[None, :] < 0) | (core[None, :] == np.arange(C)[:, None])      # [C, E]
    return np.broadcast_to(hit[None], (G, C, len(r))).reshape(G * C, len(r))


def _data_dtype(expr, dts):
    """The dtype jax computes a body node in: its operands' (a constant is
    weakly typed: None), a conversion's target."""
    if isinstance(expr, Arg):
        return np.dtype(dts[expr.index])
    if isinstance(expr, Prim):
        if expr.name == "convert_element_type":
            return np.dtype(expr.param("new_dtype"))
        return next((d for d in (_data_dtype(x, dts) for x in expr.args) if d is not None), None)
    return None


def _eval_body(expr, get, dtype, dts=None):
    """Evaluate a body expression over [D, P] operand arrays (numpy, `dtype`).
    dts: the operands' own dtypes; an int8 / int16 node's value wraps to its
    width after each add / sub / mul / neg, as jax's does (a min of a wrapped
    sum differs from a min of the int32 sum: fuzz seed 20031)."""
    if isinstance(expr, Arg):
        return get(expr.index)
    if isinstance(expr, Const):
        v = expr.value
        if dtype == np.int32 and float(v) != int(v):
            raise ValueError(f"upmem: non-integer constant {v} in integer arithmetic")
        return np.asarray(v).astype(dtype)
    if isinstance(expr, Prim):
        a = [_eval_body(x, get, dtype, dts) for x in expr.args]
        n = expr.name
        narrow = _data_dtype(expr, dts) if dts is not None and dtype == np.int32 else None
        wrap = narrow is not None and narrow.kind in "iu" and narrow.itemsize < 4

        def fit(r):
            return r.astype(narrow).astype(dtype) if wrap else r.astype(dtype)
        with np.errstate(over="ignore"):
            if n in ("add", "add_any"):
                return fit(a[0] + a[1])
            if n == "sub":
                return fit(a[0] - a[1])
            if n == "mul":
                return fit(a[0] * a[1])
            if n == "neg":
                return fit(-a[0])
        if n == "max":
            return np.maximum(a[0], a[1])
        if n == "min":
            return np.minimum(a[0], a[1])
        if n in ("convert_element_type", "copy", "copy_p", "reduce_precision"):
            return fit(a[0])
    raise ValueError(f"upmem executor: unsupported body expression {expr!r}")


def _identity(comb: str, dtype):
    if comb == "add":
        return np.zeros((), dtype)
    if dtype == np.float32:
        return np.asarray(-np.inf if comb == "max" else np.inf, dtype)
    info = np.iinfo(dtype)
    return np.asarray(info.min if comb == "max" else info.max, dtype)


def _segment(values: np.ndarray, seg: np.ndarray, num: int, comb: str, dtype) -> np.ndarray:
    """Combine values [P, D] by segment along axis 0 -> [num, D] (int32 sums wrap)."""
    shape = (num,) + values.shape[1:]
    if comb == "add":
        acc_t = np.int64 if dtype == np.int32 else dtype
        acc = np.zeros(shape, acc_t)
        np.add.at(acc, seg, values.astype(acc_t))
        return acc.astype(dtype)
    acc = np.full(shape, _identity(comb, dtype), dtype)
    (np.maximum if comb == "max" else np.minimum).at(acc, seg, values)
    return acc


def _last_before(rec_mask: np.ndarray) -> np.ndarray:
    """For every record index e, the largest index <= e where rec_mask holds (-1 if none)."""
    idx = np.where(rec_mask, np.arange(rec_mask.size), -1)
    return np.maximum.accumulate(idx) if idx.size else idx


@dataclass(frozen=True)
class _Machine:
    """The static facts every phase reads: the program, its records expanded to int64
    columns (`rec[field][e]`), each record's MRAM byte address, and the DPU grid
    (G ranks x C DPUs = D DPUs, eb bytes per element)."""
    program: Program
    rec: dict
    addr: np.ndarray
    G: int
    C: int
    eb: int

    @property
    def D(self) -> int:
        return self.G * self.C


@dataclass(frozen=True)
class _Points:
    """The compute points the kernel's EXEC records name, one entry per executed point
    (P of them): the record `pr` that runs it, its local index `pts` in the points
    layout, its tasklet and output slot, its coordinates per loop variable, its output
    local index `o_of`; `pvalid[D, P_all]` is every DPU's loop bound."""
    pr: np.ndarray
    pts: np.ndarray
    task: np.ndarray
    slot: np.ndarray
    cmap: dict
    o_of: np.ndarray
    P_all: int
    pvalid: np.ndarray


def execute_upmem(program: Program, arrays, arithmetic: str):
    """Run `program` on the operand `arrays` (the op's operands, any shapes the program
    was lowered for); returns the result as a jax array of `meta["result_shape"]`.
    The phases below are the hardware's: host -> MRAM transfers, the DPU kernel
    (EXEC / MERGE / DMA_WR), MRAM -> host transfers, the host's merge of partials."""
    meta = program.meta
    dtype = np.int32 if arithmetic == "backend" else np.float32
    given = arrays                       # the epilogue reads the operands in their own dtypes
    arrays = _convert_inputs(arrays, arithmetic)
    rec = {f: np.asarray(getattr(program.commands, f))[0].astype(np.int64)
           for f in ("op", "n", "aux", "arg", "reg", "reg_step", "core", "src", "bank", "row", "col")}
    m = _Machine(program, rec, rec["row"] * 1024 + rec["col"] * 8, program.groups, program.cores,
                 meta["elem_bytes"])
    W = max(1, meta["mram_bytes"] // 4)
    mram = np.zeros((m.D, W), dtype)
    ok = np.zeros((m.D, W), bool)
    _host_to_mram(m, arrays, mram, ok)
    pt = _kernel_points(m)
    dts = [np.asarray(a).dtype for a in given]    # the operands' own dtypes: int8 arithmetic wraps as jax's
    acc, acc_ok, last_exec = _kernel_accumulate(m, pt, mram, ok, dtype, dts)
    _dma_write_result(m, acc, acc_ok, last_exec, mram, ok)
    host_vals, host_ok = _mram_to_host(m, mram, ok)
    merged, merged_ok = _host_merge(m, host_vals, host_ok, dtype)
    return _finish(program, merged, merged_ok, given, dtype, arithmetic)


def _host_to_mram(m: _Machine, arrays, mram: np.ndarray, ok: np.ndarray) -> None:
    """Phase 1, XFER_H2D: write the local positions each transfer names into `mram[D, W]`
    (in place) and mark them in `ok`; a broadcast delivers DPU 0's data to every DPU,
    but never over a DPU's own data."""
    program, rec, eb, D = m.program, m.rec, m.eb, m.D
    h2d = (rec["op"] == Op.XFER_H2D) & (rec["src"] >= 0)
    for lid in np.unique(rec["src"][h2d]):
        lay = program.layouts[int(lid)]
        r, pos = _expand(rec, h2d & (rec["src"] == lid), eb, lay.size)
        if r.size == 0:
            continue
        vals, valid = _layout_values(lay, arrays[lay.operand])
        vals, valid = vals.reshape(D, -1), valid.reshape(D, -1)
        reach = _reaches(rec, r, m.G, m.C)                                   # [D, E]
        bc = rec["reg"][r] == Xfer.BROADCAST
        uniq, inv = np.unique(pos, return_inverse=True)
        own = np.zeros((len(uniq), D), bool)                                 # a DPU's own data
        np.logical_or.at(own, inv, (reach & ~bc[None, :]).T)
        cast = np.zeros((len(uniq), D), bool)                                # DPU 0's data, broadcast
        np.logical_or.at(cast, inv, (reach & bc[None, :]).T)
        own, cast = own.T & valid[:, uniq], cast.T & ~own.T & valid[:1, uniq]
        words = _words(lay, uniq)
        mram[:, words] = np.where(own, vals[:, uniq], np.where(cast, vals[:1, uniq], mram[:, words]))
        ok[:, words] |= own | cast


def _kernel_points(m: _Machine) -> _Points:
    """Phase 2a: expand the ELEMENTWISE / REDUCE EXEC records into the points they compute
    (a record runs `row` consecutive points from `arg`; points past the layout are dropped)."""
    meta, rec = m.program.meta, m.rec
    pts_lay: TensorLayout = meta["points"]
    geo = meta["geometry"]
    is_exec = (rec["op"] == Op.DPU_EXEC) & np.isin(rec["aux"], (Exec.ELEMENTWISE, Exec.REDUCE))
    e_idx = np.flatnonzero(is_exec)
    cnt = rec["row"][e_idx]
    P_all = int(np.prod(pts_lay.box, dtype=np.int64)) if pts_lay.box else 1
    pr = np.repeat(e_idx, cnt)                                             # record of each executed point
    pts = rec["arg"][pr] + np.arange(cnt.sum()) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    inside = (pts >= 0) & (pts < P_all)
    pr, pts = pr[inside], pts[inside]
    _, pvalid = global_index(pts_lay)                                      # [G, C, P_all]
    coords = np.unravel_index(pts, pts_lay.box) if pts_lay.box else ()
    n_out_pt = geo.Rout * geo.Rin
    o_of = pts if meta["kind"] == "elementwise" else pts // n_out_pt       # output local index
    return _Points(pr, pts, rec["reg"][pr], rec["bank"][pr], dict(zip(pts_lay.vars, coords)), o_of,
                   P_all, pvalid.reshape(m.D, P_all))


def _operand_words(m: _Machine, pt: _Points, mram: np.ndarray, ok: np.ndarray, k: int):
    """Operand k's value and written-mask at every point, `[D, P]` each: the MRAM word is
    readable only inside the tile the tasklet's most recent DMA_RD of that operand
    brought into WRAM (the WRAM cache the kernel actually reads)."""
    meta, rec, D = m.program.meta, m.rec, m.D
    lay = m.program.layouts[meta["layout_of"][k]]
    P = pt.pts.size
    if not lay.vars:                                                    # scalar kernel argument
        w = _words(lay, np.zeros(1, np.int64))
        return (np.broadcast_to(mram[:, w], (D, P)), np.broadcast_to(ok[:, w], (D, P)))
    local = np.zeros(P, np.int64)
    for v, b in zip(lay.vars, lay.box):
        local = local * b + pt.cmap[v]
    w = _words(lay, local)
    lid = meta["layout_of"][k]
    dma_rd = rec["op"] == Op.DMA_RD
    covered = np.zeros(P, bool)
    byte = mram_address(lay.positions[local])
    for t in np.unique(pt.task):
        last = _last_before(dma_rd & (rec["reg"] == t) & (rec["src"] == lid))
        sel = pt.task == t
        L = last[pt.pr[sel]]
        lo = m.addr[np.maximum(L, 0)]
        hi = lo + rec["n"][np.maximum(L, 0)]
        covered[sel] = (L >= 0) & (byte[sel] >= lo) & (byte[sel] + m.eb <= hi)
    return mram[:, w], ok[:, w] & covered[None, :]


def _kernel_accumulate(m: _Machine, pt: _Points, mram: np.ndarray, ok: np.ndarray, dtype, dts: list):
    """Phase 2b, the EXEC / MERGE records: evaluate the body at every point and combine
    per (tasklet slot, output) entry.  Returns `acc[D, n_slot, n_out]`, its written-mask
    (an output whose valid points were not each computed exactly once is unwritten) and
    `last_exec[n_slot, n_out]`, the last record contributing to each entry (for DMA_WR).
    dts: the operands' dtypes as given (`_eval_body` wraps narrow integer arithmetic to them)."""
    program, meta, rec, D = m.program, m.program.meta, m.rec, m.D
    op = program.op
    res: TensorLayout = program.layouts[meta["result_layout"]]
    pts, pvalid = pt.pts, pt.pvalid
    cache = {}

    def get(k):
        if k not in cache:
            cache[k] = _operand_words(m, pt, mram, ok, k)
        return cache[k][0]

    value = _eval_body(op.body, get, dtype, dts) if pts.size else np.zeros((D, 0), dtype)
    value = np.broadcast_to(np.asarray(value, dtype), (D, pts.size))
    v_ok = np.ones((D, pts.size), bool)
    for k in op.body_operands:
        get(k)
        v_ok = v_ok & cache[k][1]
    active = pvalid[:, pts]                                                 # [D, P] per-DPU loop bounds
    # every valid point of an output must be computed exactly once
    times = np.bincount(pts, minlength=pt.P_all)
    bad_pt = pvalid & (times != 1)[None, :]
    elementwise = meta["kind"] == "elementwise"
    geo = meta["geometry"]
    n_out = res.size // max(1, meta["partial_slots"])
    all_o = np.arange(pt.P_all) if elementwise else np.arange(pt.P_all) // (geo.Rout * geo.Rin)
    incomplete = np.zeros((n_out, D), bool)
    np.logical_or.at(incomplete, all_o, bad_pt.T)
    incomplete = incomplete.T

    comb = op.combiner or "add"
    n_slot = meta["tasklets"] if meta["split_reduction"] else 1
    seg = pt.slot * n_out + pt.o_of                                         # (slot, output) entry
    contrib = np.where(active, value, _identity(comb, dtype))
    bad = ~v_ok & active
    if elementwise:
        acc = np.zeros((D, n_slot * n_out), dtype)
        acc[:, seg] = contrib
        acc_ok = np.ones((D, n_slot * n_out), bool)
        acc_ok[:, seg] = ~bad
    else:
        acc = _segment(contrib.T, seg, n_slot * n_out, comb, dtype).T
        bad_seg = np.zeros((n_slot * n_out, D), bool)
        np.logical_or.at(bad_seg, seg, bad.T)
        acc_ok = ~bad_seg.T
    acc = acc.reshape(D, n_slot, n_out)
    acc_ok = acc_ok.reshape(D, n_slot, n_out)
    last_exec = np.full(n_slot * n_out, -1, np.int64)
    np.maximum.at(last_exec, seg, pt.pr)
    last_exec = last_exec.reshape(n_slot, n_out)
    merge = np.flatnonzero((rec["op"] == Op.DPU_EXEC) & (rec["aux"] == Exec.MERGE))
    if merge.size:                     # tasklet 0 folds every tasklet's partial into slot 0
        mi = int(merge[0])
        done = (last_exec < mi).all(axis=0)
        if comb == "add":
            folded = acc.astype(np.int64 if dtype == np.int32 else dtype).sum(axis=1).astype(dtype)
        else:
            folded = acc.max(axis=1) if comb == "max" else acc.min(axis=1)
        acc[:, 0] = folded
        acc_ok[:, 0] = acc_ok.all(axis=1) & done[None, :]
        last_exec[0] = mi
    return acc, acc_ok & ~incomplete[:, None, :], last_exec


def _dma_write_result(m: _Machine, acc, acc_ok, last_exec, mram: np.ndarray, ok: np.ndarray) -> None:
    """Phase 2c, DMA_WR: WRAM slots -> MRAM words of the result layout (in place; a later
    write of the same position wins, and a slot counts as written only if its last
    contributing EXEC / MERGE came before the write)."""
    meta, rec, eb = m.program.meta, m.rec, m.eb
    res: TensorLayout = m.program.layouts[meta["result_layout"]]
    n_slot, n_out = last_exec.shape
    wr = (rec["op"] == Op.DMA_WR) & (rec["src"] == meta["result_layout"])
    widx = np.flatnonzero(wr)
    per = np.maximum(rec["n"][widx] // eb, 1)
    wr_r = np.repeat(widx, per)
    wpos = rec["arg"][wr_r] + np.arange(per.sum()) - np.repeat(np.cumsum(per) - per, per)
    wslot = rec["bank"][wr_r]
    split_slots = meta["partial_slots"] > 1
    o_w = wpos - wslot * n_out if split_slots else wpos
    src_slot = wslot if split_slots else np.zeros_like(wslot)
    keep = (wpos < res.size) & (o_w >= 0) & (o_w < n_out) & (src_slot < n_slot)
    wr_r, wpos, src_slot, o_w = wr_r[keep], wpos[keep], src_slot[keep], o_w[keep]
    order = np.argsort(wr_r, kind="stable")[::-1]
    _, first = np.unique(wpos[order], return_index=True)
    take = order[first]
    wr_r, wpos, src_slot, o_w = wr_r[take], wpos[take], src_slot[take], o_w[take]
    # accumulators start at the combiner's identity (ACC_INIT); a slot nothing contributed to is
    # that identity, a missing contribution is caught by `incomplete`
    fresh = last_exec[src_slot, o_w] < wr_r
    words = _words(res, wpos)
    mram[:, words] = acc[:, src_slot, o_w]
    ok[:, words] = acc_ok[:, src_slot, o_w] & fresh[None, :]


def _mram_to_host(m: _Machine, mram: np.ndarray, ok: np.ndarray):
    """Phase 3, XFER_D2H: every DPU's result words `[D, res.size]` and whether a transfer
    actually read each one (a word no D2H reached is unread)."""
    meta, rec, D = m.program.meta, m.rec, m.D
    res: TensorLayout = m.program.layouts[meta["result_layout"]]
    d2h = (rec["op"] == Op.XFER_D2H) & (rec["src"] == meta["result_layout"])
    r, pos = _expand(rec, d2h, m.eb, res.size)
    seen = np.zeros((res.size, D), bool)
    np.logical_or.at(seen, pos, _reaches(rec, r, m.G, m.C).T)
    rw = _words(res, np.arange(res.size))
    return mram[:, rw], ok[:, rw] & seen.T


def _host_merge(m: _Machine, host_vals: np.ndarray, host_ok: np.ndarray, dtype):
    """Phase 4: the host folds the DPUs' partials (rfactor, per-tasklet partials) with the
    op's combiner into the result shape; an element is valid only if some DPU produced it
    and every contributing word was written and read."""
    program = m.program
    res: TensorLayout = program.layouts[program.meta["result_layout"]]
    comb = program.op.combiner or "add"
    flat, valid = global_index(res)
    flat, valid = flat.reshape(-1), valid.reshape(-1)
    size = int(np.prod(res.shape, dtype=np.int64)) if res.shape else 1
    segm = np.where(valid, flat, size)
    hv = np.where(valid, host_vals.reshape(-1), _identity(comb, dtype)).astype(dtype)
    merged = _segment(hv, segm, size + 1, comb, dtype)[:size]
    bad_m = np.zeros(size + 1, bool)
    np.logical_or.at(bad_m, segm, ~host_ok.reshape(-1) & valid)
    merged_ok = ~bad_m[:size] & (np.bincount(segm, minlength=size + 1)[:size] > 0)
    return merged.reshape(res.shape), merged_ok.reshape(res.shape)


def _finish(program: Program, acc, acc_ok, operands, dtype, arithmetic: str):
    """Epilogue over the accumulator space (in the execution dtype), then the
    write through the result map; unwritten elements NaN ("wide") or an
    error ("backend")."""
    op = program.op
    ext = op.extents
    out_vars = op.output_vars
    value = jnp.asarray(acc)
    if op.epilogue is not None:
        value = epilogue_value(op, value, operands).astype(dtype)
    shape = tuple(program.meta["result_shape"])
    if arithmetic == "wide":
        value = jnp.where(jnp.asarray(acc_ok), value, jnp.nan)
        return trace_eval._write(value.astype(jnp.float32), op.result.index_map, out_vars, ext, shape,
                                 jnp.float32, op.fill)
    missing = int((~np.asarray(acc_ok)).sum())
    if missing:
        raise ValueError(f"upmem program for {op.name} left {missing} result element(s) unwritten or "
                         "unread (a transfer, DMA or compute record is missing)")
    out_dtype = np.dtype(program.meta.get("result_dtype", "int32"))
    return trace_eval._write(value.astype(out_dtype), op.result.index_map, out_vars, ext, shape,
                             out_dtype, op.fill)
