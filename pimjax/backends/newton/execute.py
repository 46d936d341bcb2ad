"""Value interpretation of Newton / AiM programs (see `backends/newton/lower.py`).

State of one channel: its banks [C, rows, cols, lanes] (the backend's
core.cols and core.lanes, carried in `Program.meta`), the global buffer
columns [buffers x buffer columns, lanes], the open row of every
bank and the result latches [C, latches].  The records act on it as:

* WR / WR_S (src = a layout)  the host writes those columns of the layout into the
                        bank (layout values, zeros on padding lanes);
* GWRITE                buffer column `reg` <- host-data row `arg` (-1 = zeros);
* G_ACT / PREA          open `row` in every bank / close every bank;
* COMP (core -1)        every bank: latch[arg] += sum over the lanes of
                        bank[open row, col] * buffer[reg]  (per column);
  COMP (core c)         bank c only, opening `row` first (a single-bank
                        command activates its row, as the timing model does);
* READRES               the host receives latches [0, aux) of the banks
                        (all, or bank `core`) into its result slot `reg`;
                        reading clears them.

Nothing is read that was not written: banks and buffers start as NaN, a
COMP in a bank whose open row is not the record's row contributes NaN, a
latch value no READRES delivered is NaN, so a lowering that forgets a
transfer, an activation or a read-back produces NaN, not a plausible number.

Evaluation is vectorised instead of stepping a machine: the sequential
dependencies of the stream (which GWRITE last filled a buffer column, which
row is open, which READRES ends a latch's accumulation) are resolved with
sorted searches over the expanded records (numpy, per stream), and the
arithmetic is one gather per operand and a segment sum per latch epoch (jnp,
all groups at once).  No Python loop over commands.

Arithmetic ("backend"): operands are rounded to bfloat16 (AiM's BF16 MAC
datapath); a product of two bf16 values is exact in float32 (8 + 8
significand bits), and the reduction tree and the result latch accumulate in
float32.  Assumption: no source gives AiM's accumulator width; we take the
FP32 latch of the preset (`Core.reg_bytes = 4`).  "wide": float32 throughout.
"""
from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from ...lower.layout import global_index
from ...lower.merge import finish
from ...lower.program import Op, Program
from ...sim.padding import pow2

_DTYPES = {"backend": jnp.bfloat16, "wide": jnp.float32}
_FIELDS = ("op", "bank", "row", "col", "n", "reg", "arg", "aux", "core", "src")


def _expand(rec, s: int) -> dict[str, np.ndarray]:
    """Records of stream s with n > 0, one entry per column; `t` = column
    offset in its record, `rid` = record index, `tau` = stream position."""
    f = {k: np.asarray(getattr(rec, k))[s] for k in _FIELDS}
    keep = (f["n"] > 0) | (f["op"] == Op.READRES)     # a READRES of no bus time (n = 0) still reads
    f = {k: v[keep] for k, v in f.items()}
    n = np.where(f["op"] == Op.READRES, 1, f["n"])      # READRES acts once, whatever its bursts
    rep = np.repeat(np.arange(len(n)), n)
    t = np.arange(len(rep)) - np.repeat(np.cumsum(n) - n, n)
    out = {k: v[rep] for k, v in f.items()}
    out["t"], out["rid"], out["tau"] = t, rep, np.arange(len(rep))
    return out


def _last_before(ev_key: np.ndarray, ev_val: np.ndarray, q_key: np.ndarray, default) -> np.ndarray:
    """For every query key, the value of the largest event key below it (same
    high part is the caller's job); `default` when there is none."""
    order = np.argsort(ev_key, kind="stable")
    ks, vs = ev_key[order], ev_val[order]
    j = np.searchsorted(ks, q_key, side="left") - 1
    return np.where(j >= 0, vs[np.maximum(j, 0)], default), np.where(j >= 0, ks[np.maximum(j, 0)], -1)


def _resolve(rec, s: int, C: int, L: int, Q: int, buf_cols: int) -> dict:
    """Numpy bookkeeping of stream s: per COMP column the bank row read in
    every bank, the host-data row in the buffer column, and the latch slot
    (q, c, latch) its product ends up in; plus which slots were delivered."""
    e = _expand(rec, s)
    T = len(e["tau"]) + 1
    op = e["op"]
    # host writes of the matrix layout: (bank, row, col) written
    wr = ((op == Op.WR) | (op == Op.WR_S)) & (e["src"] >= 0)
    written = np.stack([e["bank"][wr], e["row"][wr], e["col"][wr] + e["t"][wr]], -1)
    comp = np.nonzero(op == Op.COMP)[0]
    tau = e["tau"][comp]
    core = e["core"][comp]
    row = e["row"][comp]
    col = e["col"][comp] + e["t"][comp]
    bufcol = e["reg"][comp] + e["t"][comp]
    latch = e["arg"][comp]
    K = len(comp)

    # open row of every bank at every COMP: the latest G_ACT / PREA (all banks)
    # or single-bank COMP (its bank) before it
    gl = np.nonzero((op == Op.G_ACT) | (op == Op.PREA))[0]
    gl_row = np.where(op[gl] == Op.G_ACT, e["row"][gl], -1)
    open_row = np.full((K, C), -1, np.int64)
    per = core >= 0
    for c in range(C):      # a loop over banks (<= 16), not over commands
        own = comp[per & (core == c)]
        ev_t = np.concatenate([e["tau"][gl], e["tau"][own]])
        ev_r = np.concatenate([gl_row, e["row"][own]])
        r, _ = _last_before(ev_t, ev_r, tau, -1)
        open_row[:, c] = r
    active = (core[:, None] < 0) | (core[:, None] == np.arange(C)[None, :])      # [K, C]
    open_row = np.where(per[:, None], row[:, None], open_row)                   # single-bank: own row
    bad = active & (open_row != row[:, None])                                    # wrong / closed row

    # buffer column contents: the latest GWRITE to that column before the COMP,
    # provided it belongs to the latest GWRITE command (a run of consecutive
    # GWRITE records) that wrote the column's buffer — a column that command
    # left out is undefined, not the previous load's data
    isgw = op == Op.GWRITE
    run = np.cumsum(isgw & ~np.concatenate([[False], isgw[:-1]]))
    gw = np.nonzero(isgw)[0]
    gcol = (e["reg"][gw] + e["t"][gw]).astype(np.int64)
    grow = e["arg"][gw] + e["t"][gw]
    qcol = bufcol.astype(np.int64)
    h, k = _last_before(gcol * T + e["tau"][gw], grow, qcol * T + tau, -1)
    r1, _ = _last_before(gcol * T + e["tau"][gw], run[gw], qcol * T + tau, -1)
    gbuf, qbuf = gcol // buf_cols, qcol // buf_cols
    r2, k2 = _last_before(gbuf * T + e["tau"][gw], run[gw], qbuf * T + tau, -2)
    ok = (k >= 0) & (k // T == qcol) & (k2 >= 0) & (k2 // T == qbuf) & (r1 == r2)
    hrow = np.where(ok, h, -1)                                                   # -1: undefined

    # latch epochs: the first READRES after the COMP covering (bank, latch)
    rr = np.nonzero(op == Op.READRES)[0]
    cover = ((e["core"][rr][:, None, None] < 0) | (e["core"][rr][:, None, None] == np.arange(C)[None, :, None])) \
        & (np.arange(L)[None, None, :] < e["aux"][rr][:, None, None])             # [RR, C, L]
    ri, ev_c, ev_l = (x.astype(np.int64) for x in np.nonzero(cover))
    ev_t = e["tau"][rr][ri].astype(np.int64)
    slot = (e["reg"][rr][ri].astype(np.int64) * C + ev_c) * L + ev_l               # host (q, bank, latch)
    dump = Q * C * L
    last = np.full(dump + 1, -1, np.int64)                                        # a slot read twice
    np.maximum.at(last, slot, ev_t)                                               # keeps the last read
    kk, cc = np.nonzero(active)                                                   # the computing banks
    target = np.full(len(kk), dump, np.int64)
    if len(slot) and len(kk):
        ev_key = (ev_c * L + ev_l) * T + ev_t
        order = np.argsort(ev_key)
        ks, ks_slot, ks_t = ev_key[order], slot[order], ev_t[order]
        q_key = (cc * L + latch[kk]) * T + tau[kk]
        j = np.searchsorted(ks, q_key, side="right")
        jj = np.minimum(j, len(ks) - 1)
        hit = (j < len(ks)) & (ks[jj] // T == q_key // T) & (ks_t[jj] == last[ks_slot[jj]])
        target = np.where(hit, ks_slot[jj], dump)
    delivered = np.zeros(dump, bool)
    delivered[slot] = True
    return dict(K=K, k=kk, c=cc, row=open_row[kk, cc], col=col[kk], hrow=hrow, bad=bad[kk, cc],
                target=target, delivered=delivered, written=written)


def _placed(m: np.ndarray, r: dict, cols: int) -> np.ndarray:
    """[A, lanes] matrix indices `m` of the (COMP column, bank) pairs of `r`
    with -2 (NaN) wherever the host never wrote that bank column."""
    w = r["written"]
    if not len(w):
        return np.full_like(m, -2)
    rows = int(max(w[:, 1].max(), max(r["row"].max(initial=0), 0))) + 1
    key = lambda b, row, col: (np.asarray(b, np.int64) * rows + row) * cols + col   # noqa: E731
    ok = np.isin(key(r["c"], np.maximum(r["row"], 0), r["col"]), key(w[:, 0], w[:, 1], w[:, 2]))
    return np.where(ok[:, None], m, -2)


def _index_image(program: Program, written_per_stream, rows: int) -> np.ndarray:
    """[G, C, rows, cols, lanes] flat index into the matrix operand of every
    bank lane: -2 where the host never wrote (NaN), -1 on written padding (zero)."""
    G, C = program.groups, program.cores
    lay = program.layouts[0]
    flat, valid = global_index(lay)                                       # [G, C, N]
    pos = lay.positions
    img = np.full((G, C, rows, program.meta["cols"], program.meta["lanes"]), -2, np.int64)
    for s, w in enumerate(written_per_stream):
        gs = slice(None) if len(written_per_stream) == 1 else slice(s, s + 1)
        img[gs, w[:, 0], w[:, 1], w[:, 2]] = -1
    cols = img[:, :, pos[:, 1], pos[:, 2], pos[:, 3]]                     # [G, C, N]
    img[:, :, pos[:, 1], pos[:, 2], pos[:, 3]] = np.where(cols == -1, np.where(valid, flat, -1), cols)
    return img


@partial(jax.jit, static_argnames=("size",))
def _latches(m_flat, v_flat, midx, vtab, e2k, bad, target, delivered, rb_idx, acc_idx, size):
    """The arithmetic: per COMP column and bank the lanes' dot product of
    bank data and buffer data, summed per latch epoch (segment); the values
    of the read-back positions; their sum per output element (the host
    merge of partials over slots and cores, `size` accumulator elements,
    NaN where no partial arrives).  Shapes (one padded length B): midx [B, lanes]
    matrix indices of each (COMP column, bank) pair, vtab [B, lanes] vector
    indices of each COMP column's buffer column, e2k [B] pair -> column,
    bad / target [B], delivered [B] (the last segment is the dump), rb_idx /
    acc_idx [B] (acc_idx = size drops the position).  Index -1: zero, -2: NaN."""
    dt = m_flat.dtype
    nan = jnp.asarray(jnp.nan, dt)

    def gather(flat, idx):
        x = flat[jnp.maximum(idx, 0)]
        return jnp.where(idx >= 0, x, jnp.where(idx == -1, jnp.zeros((), dt), nan))
    # bf16 x bf16 is exact in float32; the reduction tree and the latch add in float32
    buf = gather(v_flat, vtab)[e2k]
    prod = jnp.sum(gather(m_flat, midx).astype(jnp.float32) * buf.astype(jnp.float32), -1)
    prod = jnp.where(bad, jnp.float32(jnp.nan), prod)
    seg = jax.ops.segment_sum(prod, target, num_segments=delivered.shape[0])
    seg = jnp.where(delivered, seg, jnp.float32(jnp.nan))
    vals = seg[rb_idx]
    acc = jax.ops.segment_sum(vals, acc_idx, num_segments=size + 1)[:size]
    count = jax.ops.segment_sum(jnp.ones_like(vals), acc_idx, num_segments=size + 1)[:size]
    return jnp.where(count > 0, acc, jnp.float32(jnp.nan))


def execute_newton(program: Program, arrays, arithmetic: str):
    """Values of a Newton program (see module docstring): [result shape]."""
    dtype = _DTYPES[arithmetic]
    # operand shapes: checked by `execute`
    rec = program.commands
    S = rec.shape[0]
    G, C = program.groups, program.cores
    L = int(program.meta["latches"])
    Q = int(program.meta["host_slots"])
    QCL = Q * C * L
    res = [_resolve(rec, s, C, L, Q, int(program.meta["buffer_columns"])) for s in range(S)]
    m_index = program.meta.get("m_index")      # a mapping that is no tile rule (PIMFlow's packed one)
    if m_index is None:
        rows = max(int(program.layouts[0].positions[:, 1].max()) + 1,
                   max((int(r["written"][:, 1].max()) + 1 if len(r["written"]) else 1) for r in res))
        img = _index_image(program, [r["written"] for r in res], rows)
    host = program.host_data[0]                                          # [G, H, 16]

    # the active (COMP column, bank) pairs of every group, padded to one length
    parts = []
    k0 = 0
    for g in range(G):              # a loop over groups; every stream's columns at once
        r = res[0 if S == 1 else g]
        if m_index is None:
            m = img[g, r["c"], np.maximum(r["row"], 0), r["col"]]                    # [A, 16]
        else:
            m = _placed(m_index(g, r["c"], r["row"], r["col"]), r, program.meta["cols"])
        v = np.where((r["hrow"] >= 0)[:, None], host[g, np.maximum(r["hrow"], 0)], -2)  # [K, 16]
        tgt = np.where(r["target"] < QCL, g * QCL + r["target"], G * QCL)
        parts.append((m, v, r["k"] + k0, r["bad"], tgt))
        k0 += r["K"]
    E = sum(len(p[0]) for p in parts)
    NS0 = G * QCL + 1
    rmap = program.meta.get("result_map")
    P0 = int(G * C * program.layouts[program.readback.layout].size) if rmap is None else int(np.prod(rmap.shape))
    # one padded length for all index spaces: a single compile serves many programs
    B = pow2(max(E, NS0, P0, k0), 1 << 12)      # programs of similar size share a compile

    def cat(i, fill, tail=()):
        out = np.full((B,) + tail, fill, np.int32)
        n = 0
        for p in parts:
            out[n:n + len(p[i])] = p[i]
            n += len(p[i])
        return out
    lanes = int(program.meta["lanes"])
    midx, vtab, e2k, tgt = cat(0, -1, (lanes,)), cat(1, -1, (lanes,)), cat(2, 0), cat(4, G * QCL)
    bad = cat(3, 0).astype(bool)
    delivered = np.zeros(B, bool)
    delivered[:G * QCL] = np.concatenate([r["delivered"] for r in res] * (G if S == 1 else 1))
    NS = B

    # the read-back: result layout (0, slot q, latch, -1) of every core
    lay = program.layouts[program.readback.layout]
    if rmap is None:
        flat, valid = global_index(lay)                                  # [G, C, N]
        pos = lay.positions
        rb = (np.arange(G)[:, None, None] * QCL + (pos[None, None, :, 1] * C + np.arange(C)[None, :, None]) * L
              + pos[None, None, :, 2])
    else:                       # [G, Q, C]: slot q's bank c -> accumulator element (latch 0)
        rm = np.asarray(rmap)
        q, c = np.arange(rm.shape[1]), np.arange(C)
        rb = np.arange(G)[:, None, None] * QCL + (q[None, :, None] * C + c[None, None, :]) * L
        flat, valid = np.maximum(rm, 0), rm >= 0
    P = rb.size
    rb = np.concatenate([rb.reshape(-1), np.full(B - P, NS - 1)])
    valid = np.concatenate([valid.reshape(-1), np.zeros(B - P, bool)])
    flat = np.concatenate([flat.reshape(-1), np.zeros(B - P, np.int64)])
    m_flat = jnp.ravel(arrays[program.layouts[0].operand]).astype(dtype)
    v_flat = jnp.ravel(arrays[program.meta["host_data_operands"][0]]).astype(dtype)
    size = int(np.prod(lay.shape, dtype=np.int64))
    acc = _latches(m_flat, v_flat, midx, vtab, e2k, bad, tgt, delivered, rb.astype(np.int32),
                   np.where(valid, flat, size).astype(np.int32), size)     # numpy in: no staging compiles
    # the epilogue and the write through the result map, as `host_merge` finishes
    return finish(program.op, acc.reshape(lay.shape), arrays, program.readback.epilogue_on_host,
                  program.meta["result_shape"], np.dtype(program.meta["result_dtype"]))
