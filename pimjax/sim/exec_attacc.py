"""Value interpretation of AttAcc programs (see `lower/attacc.py`).

State of one channel: its 64 banks [64, rows, 32, 16] (NaN until a host
write record fills a column), the GEMV buffers [units, entries, 16] (NaN
until WRGB / MVGB writes them), the accumulators [units, 16], the softmax
buffer [rows, 16] with a written mask, and the host's read-back rows
[rows, 16] (NaN until RDACC reads them).  A `lax.scan` runs the expanded
commands of the shared stream; groups are `vmap`-ped.  Nothing reaches the
host except what RDACC records read; the host merge (segment sum over the
read-back map, then the op's epilogue) runs in float32.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..lower.attacc import HOST_ONE, LANES, TREE, Geometry
from ..lower.program import Op, Program
from .execute import expand_runs, host_merge, layout_values, register

_DTYPES = {"backend": jnp.float16, "wide": jnp.float32}
_MAC_OPS = (Op.MACAB, Op.MACSB, Op.MACPB, Op.MACBK)
# kinds of expanded commands in the scan
K_NONE, K_MAC, K_WRGB, K_MVGB, K_MVSB, K_SFM, K_RDACC = range(7)


def _memory(program: Program, arrays, dtype, geo: Geometry, rows: int):
    """[G, 64, rows, 32, 16] bank contents after the host writes."""
    G, C = program.groups, program.cores
    rec = program.commands
    op_ = np.asarray(rec.op)
    src = np.asarray(rec.src)
    wr = ((op_ == Op.WR) | (op_ == Op.WR_S)) & (src >= 0)
    cols = expand_runs(rec, wr)
    mem = jnp.full((G, 64, rows, 32, LANES), jnp.nan, dtype)
    for lid in np.unique(cols["src"]):
        m = cols["src"] == lid
        bank, row, col = cols["bank"][m], cols["row"][m], cols["col"][m]
        lay = program.layouts[int(lid)]
        img = jnp.full((G, 64, rows, 32, LANES), jnp.nan, dtype)
        img = img.at[:, bank, row, col].set(jnp.zeros((), dtype))          # padding columns are zero
        vals = layout_values(lay, arrays[lay.operand], dtype)               # [G, C, N]
        pos = lay.positions
        pbank = np.asarray(geo.core_base(np.arange(C)))[:, None] + pos[None, :, 0]
        img = img.at[:, pbank, pos[None, :, 1], pos[None, :, 2], pos[None, :, 3]].set(vals)
        mem = mem.at[:, bank, row, col].set(img[:, bank, row, col])
    return mem


def _steps(program: Program, geo: Geometry) -> dict:
    """Expanded kernel commands as numpy columns."""
    rec = program.commands
    op_ = np.asarray(rec.op)[0]
    kinds = {int(o): K_MAC for o in _MAC_OPS}
    kinds.update({int(Op.WRGB): K_WRGB, int(Op.MVGB): K_MVGB, int(Op.MVSB): K_MVSB,
                  int(Op.SFM): K_SFM, int(Op.RDACC): K_RDACC})
    sel = np.isin(op_, list(kinds))[None]
    e = expand_runs(rec, sel)
    kind = np.array([kinds[int(o)] for o in e["op"]], np.int32)
    t = e["t"]
    vcol = e["col"]                                   # record col + t
    if geo.level == "buffer":
        bic, _, col = geo.address(vcol)
    else:
        bic, col = e["bank"] % geo.banks_per_core, vcol
    return dict(kind=kind, core=e["core"], mode=e["aux"], bic=np.asarray(bic), row=e["row"],
                col=np.asarray(col), u=e["reg"] + t, rs=np.maximum(e["reg_step"], 1), arg=e["arg"],
                route=e["arg"] + t, sfm=e["aux"], sbrow=e["reg"] + t, hrow=e["arg"] + t)


def _tree_sum(p):
    """Pairwise sum over the last axis of 16 (the unit's adder tree), in p's dtype."""
    while p.shape[-1] > 1:
        h = p.shape[-1] // 2
        p = p[..., :h] + p[..., h:]
    return p[..., 0]


@register("attacc")
def execute_attacc(program: Program, arrays, arithmetic: str):
    dtype = _DTYPES[arithmetic]
    rec = program.commands
    if rec.shape[0] != 1:
        raise NotImplementedError("attacc programs share one stream across groups")
    meta = program.meta
    geo: Geometry = meta["geometry"]
    G, C = program.groups, program.cores
    st = _steps(program, geo)
    pos_rows = [int(lay.positions[:, 1].max()) + 1 for lay in program.layouts if lay.space == "bank"]
    rows = max([1] + pos_rows + [int(st["row"].max()) + 1 if len(st["row"]) else 1])
    mem = _memory(program, arrays, dtype, geo, rows)

    # host data rows (WRGB): flat indices -> values (-1 zero, -2 one)
    hidx = program.host_data[0]
    k = meta["host_data_operands"][0]
    if hidx.shape[1] == 0:
        host = jnp.zeros((G, 1, LANES), dtype)
    else:
        base = jnp.ravel(arrays[k]).astype(dtype)[np.maximum(hidx, 0)] if k is not None else \
            jnp.zeros(hidx.shape, dtype)
        host = jnp.where(hidx >= 0, base, jnp.where(hidx == HOST_ONE, jnp.ones((), dtype),
                                                    jnp.zeros((), dtype)))
    rsrc, rdst = meta["route_src"], meta["route_dst"]
    if rsrc.shape[0] == 0:
        rsrc, rdst = np.full((1, C), -1, np.int32), np.zeros((1, C), np.int32)
    S = int(meta["sb_rows"])
    sfm = meta["sfm"]
    masks = np.stack([m for m, _ in sfm]) if sfm else np.zeros((1, S, LANES), bool)
    masks = np.pad(masks, ((0, 0), (0, max(0, S - masks.shape[1])), (0, 0)))[:, :S]
    scales = np.array([s for _, s in sfm] if sfm else [1.0], np.float32)
    H = max(1, meta["readback_map"].shape[1])
    E = int(meta["gb_entries"])
    xs = {name: jnp.asarray(v, jnp.int32) for name, v in st.items()}
    out = _run(mem, host, xs, jnp.asarray(rsrc), jnp.asarray(rdst), jnp.asarray(masks),
               jnp.asarray(scales), np.asarray(geo.core_base(np.arange(C)), np.int32), C, E, S, H, dtype)
    values = out.astype(jnp.float32)                                     # [G, H, 16]
    flat = meta["readback_map"]
    if flat.shape[1] == 0:
        flat = np.full((G, 1, LANES), -1, np.int64)
    return host_merge(program, values.reshape(-1), (flat >= 0).reshape(-1), flat.reshape(-1), arrays)


def _run(mem, host, xs, rsrc, rdst, masks, scales, core_base, C, E, S, H, dtype):
    units = jnp.arange(C)
    zero = jnp.zeros((), dtype)
    nan = jnp.full((), jnp.nan, dtype)
    base = jnp.asarray(core_base)

    def step(carry, x, m, hst):
        gb, acc, sb, sbw, hb = carry
        kind = x["kind"]
        on = (x["core"] < 0) | (units == x["core"])                      # [C] units the command drives
        # --- MAC: every unit reads its column and accumulates ------------------
        col = m[base + x["bic"], x["row"], x["col"]]                      # [C, 16]
        rs = x["rs"]
        e_tree = jnp.clip(x["arg"] + x["u"] % rs, 0, E - 1)
        slot = jnp.clip(x["u"] // rs, 0, LANES - 1)
        dot = _tree_sum(col * gb[:, e_tree])                               # [C]
        acc_tree = acc.at[:, slot].add(dot)
        s = x["arg"] * LANES + x["u"]
        scal = gb[:, jnp.clip(s // LANES, 0, E - 1), s % LANES]           # [C]
        acc_mac = acc + col * scal[:, None]
        acc_new = jnp.where(x["mode"] == TREE, acc_tree, acc_mac)
        acc = jnp.where((kind == K_MAC) & on[:, None], acc_new, acc)
        # --- buffer loads: WRGB (host row) / MVGB (softmax-buffer row) ---------
        r = jnp.clip(x["route"], 0, rsrc.shape[0] - 1)
        src, dst = rsrc[r], jnp.clip(rdst[r], 0, E - 1)
        from_host = hst[jnp.clip(src, 0, hst.shape[0] - 1)]
        srow = jnp.clip(src, 0, S - 1)
        from_sb = jnp.where(sbw[srow][:, None], sb[srow], nan)
        val = jnp.where(kind == K_WRGB, from_host, from_sb)
        write = ((kind == K_WRGB) | (kind == K_MVGB)) & (src >= 0)
        gb = gb.at[units, dst].set(jnp.where(write[:, None], val, gb[units, dst]))
        # --- MVSB: adder tree + channel accumulator into the softmax buffer ---
        drained = (kind == K_MVSB) & (rdst[r] >= 0)
        drow = jnp.where(drained, jnp.clip(rdst[r], 0, S - 1), S)
        contrib = jax.ops.segment_sum(jnp.where(drained[:, None], acc, zero), drow, num_segments=S + 1)[:S]
        hit = jax.ops.segment_sum(drained.astype(jnp.int32), drow, num_segments=S + 1)[:S] > 0
        first = jax.ops.segment_sum((drained & (src == 1)).astype(jnp.int32), drow,
                                    num_segments=S + 1)[:S] > 0     # the first MVSB overwrites
        old = jnp.where(sbw[:, None] & ~first[:, None], sb, zero)
        sb = jnp.where(hit[:, None], old + contrib, sb)
        sbw = sbw | hit
        acc = jnp.where(drained[:, None], zero, acc)
        # --- SFM: softmax over a masked set of positions (float32 inside) -----
        mk = masks[jnp.clip(x["sfm"], 0, masks.shape[0] - 1)] & (kind == K_SFM)
        z = jnp.where(mk, sb.astype(jnp.float32) * scales[jnp.clip(x["sfm"], 0, scales.shape[0] - 1)],
                      -jnp.inf)
        zmax = jnp.max(z)
        ex = jnp.where(mk, jnp.exp(z - jnp.where(jnp.isfinite(zmax), zmax, 0.0)), 0.0)
        p = ex / jnp.maximum(jnp.sum(ex), jnp.finfo(jnp.float32).tiny)
        sb = jnp.where(mk, p.astype(dtype), sb)
        # --- RDACC: the host reads a softmax-buffer row -------------------------
        rd = kind == K_RDACC
        row = jnp.clip(x["sbrow"], 0, S - 1)
        h = jnp.clip(x["hrow"], 0, H - 1)
        hb = hb.at[h].set(jnp.where(rd, jnp.where(sbw[row], sb[row], nan), hb[h]))
        sbw = sbw.at[row].set(jnp.where(rd, False, sbw[row]))
        return (gb, acc, sb, sbw, hb), None

    def run_group(m, hst):
        init = (jnp.full((C, E, LANES), jnp.nan, dtype), jnp.zeros((C, LANES), dtype),
                jnp.zeros((S, LANES), dtype), jnp.zeros(S, bool), jnp.full((H, LANES), jnp.nan, dtype))
        (_, _, _, _, hb), _ = jax.lax.scan(lambda c, x: step(c, x, m, hst), init, xs)
        return hb

    return jax.jit(jax.vmap(run_group))(mem, host)
