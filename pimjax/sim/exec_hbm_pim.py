"""Value interpretation of HBM-PIM programs (see `lower/hbm_pim.py`).

State of one pseudo-channel: its banks [2 * units, rows, 32 columns, 16
lanes] and the register file of every unit [units, 17, 16] (GRF_A[0..7],
GRF_B[0..7], SRF).  A `lax.scan` runs the expanded all-bank commands of the
shared stream; every unit reads the column of its own even or odd bank.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..lower.hbm_pim import GRF_B, N_REGS, SRF, Crf
from ..lower.program import Op, Phase, Program
from .execute import expand_runs, host_merge, layout_values, register

_DTYPES = {"backend": jnp.float16, "wide": jnp.float32}


def _bank_image(program: Program, lid: int, arrays, dtype, rows, cols: dict):
    """A layout's values scattered into bank shape [G, banks, rows, 32, 16]:
    zero on the columns the host writes (`cols`, padding), values at the
    layout's positions, NaN elsewhere."""
    G, C = program.groups, program.cores
    lay = program.layouts[lid]
    img = jnp.full((G, 2 * C, len(rows), 32, 16), jnp.nan, dtype)
    img = img.at[:, cols["bank"], cols["row"], cols["col"]].set(jnp.zeros((), dtype))
    vals = layout_values(lay, arrays[lay.operand], dtype)                # [G, C, N]
    pos = lay.positions
    bank = 2 * np.arange(C)[:, None] + pos[None, :, 0]                    # [C, N]
    prow = np.searchsorted(rows, pos[None, :, 1])
    return img.at[:, bank, prow, pos[None, :, 2], pos[None, :, 3]].set(vals)


@register("hbm-pim")
def execute_hbm_pim(program: Program, arrays, arithmetic: str):
    dtype = _DTYPES[arithmetic]
    rec = program.commands
    if rec.shape[0] != 1:
        raise NotImplementedError("hbm-pim programs share one stream across groups")
    G, C = program.groups, program.cores
    op_ = np.asarray(rec.op)
    src = np.asarray(rec.src)
    host_wr = (op_ == Op.WR) | (op_ == Op.WR_S)
    host_rd = (op_ == Op.RD) | (op_ == Op.RD_S)
    data = (op_ == Op.PIM_RD) | (op_ == Op.PIM_WR) | ((host_wr | host_rd) & (src >= 0))
    # physical rows in use, compacted to a dense row axis of the bank memory
    rows = np.unique(np.concatenate([np.asarray(rec.row)[data]] +
                                    [lay.positions[:, 1] for lay in program.layouts if lay.vars]))

    # 1. host writes of layouts into the banks (rearrangement)
    mem = jnp.full((G, 2 * C, len(rows), 32, 16), jnp.nan, dtype)
    wr = host_wr & (src >= 0)
    cols = expand_runs(rec, wr)
    cols["row"] = np.searchsorted(rows, cols["row"])
    for lid in np.unique(cols["src"]):
        m = cols["src"] == lid
        sel = {k: v[m] for k, v in cols.items()}
        img = _bank_image(program, int(lid), arrays, dtype, rows, sel)
        mem = mem.at[:, sel["bank"], sel["row"], sel["col"]].set(
            img[:, sel["bank"], sel["row"], sel["col"]])

    # 2. the kernel: all-bank commands in order
    kern = (op_ == Op.AB_WR) | (op_ == Op.PIM_RD) | (op_ == Op.PIM_WR)
    steps = expand_runs(rec, kern)
    steps["row"] = np.searchsorted(rows, steps["row"])   # config-row commands never touch mem
    mac = steps["aux"] == Crf.MAC
    L = steps["reg"] + steps["t"]
    ko = np.maximum(steps["reg_step"], 1)
    dst = np.where(mac, GRF_B + L % ko, steps["reg"] + steps["t"] * steps["reg_step"])
    ra = np.where(mac, steps["arg"] + L // ko, steps["arg"])
    hrow = np.where(steps["aux"] == Crf.HOST_REG, steps["arg"] + steps["t"], 0)
    host = _host_values(program, arrays, dtype)                          # [G, rows, 16]
    hv = host[:, hrow] if host.shape[1] else jnp.zeros((G, len(hrow), 16), dtype)
    srf = _srf_values(program, arrays, dtype)
    xs = dict(code=jnp.asarray(steps["aux"], jnp.int32), store=jnp.asarray(steps["op"] == Op.PIM_WR),
              par=jnp.asarray(steps["bank"] % 2, jnp.int32), row=jnp.asarray(steps["row"], jnp.int32),
              col=jnp.asarray(steps["col"], jnp.int32), dst=jnp.asarray(dst, jnp.int32),
              ra=jnp.asarray(ra, jnp.int32))
    mem = _run_kernel(mem, xs, hv, srf, C, dtype)

    # 3. read-back: the host sees only the columns its RD records read
    rd = host_rd & (src >= 0) & (np.asarray(rec.phase) == Phase.READBACK)
    rcols = expand_runs(rec, rd)
    rcols["row"] = np.searchsorted(rows, rcols["row"])
    seen = np.zeros((2 * C, len(rows), 32), bool)
    seen[rcols["bank"], rcols["row"], rcols["col"]] = True
    host_view = jnp.where(jnp.asarray(seen)[None, :, :, :, None], mem.astype(jnp.float32), jnp.nan)

    # 4. host merge: decode the result layout, sum lane / slot / core partials
    lay = program.layouts[program.readback.layout]
    from ..lower.layout import global_index
    flat, valid = global_index(lay)                                      # [G, C, N]
    pos = lay.positions
    bank = 2 * np.arange(C)[:, None] + pos[None, :, 0]
    colv = host_view[:, bank, np.searchsorted(rows, pos[None, :, 1]), pos[None, :, 2]]  # [G, C, N, 16]
    lane = pos[:, 3]
    if program.readback.lane_partials:
        vals = jnp.sum(colv, axis=-1)
    else:
        vals = jnp.take_along_axis(colv, jnp.asarray(np.maximum(lane, 0))[None, None, :, None], -1)[..., 0]
    return host_merge(program, vals.reshape(-1), valid.reshape(-1), flat.reshape(-1), arrays)


def _host_values(program: Program, arrays, dtype):
    """Values of host-data table 0 ([G, rows, 16]; -1 -> 0)."""
    if not program.host_data or program.host_data[0].shape[1] == 0:
        return jnp.zeros((program.groups, 0, 16), dtype)
    idx = program.host_data[0]
    k = program.meta["host_data_operands"][0]
    vals = jnp.ravel(arrays[k]).astype(dtype)[np.maximum(idx, 0)]
    return jnp.where(idx >= 0, vals, jnp.zeros((), dtype))


def _srf_values(program: Program, arrays, dtype):
    """The 16 SRF scalars: constants and 0-d operands of the body."""
    srf = jnp.zeros(16, dtype)
    for slot, (kind, v) in enumerate(program.meta.get("srf", ())):
        val = jnp.asarray(v, dtype) if kind == "const" else jnp.ravel(arrays[v]).astype(dtype)[0]
        srf = srf.at[slot].set(val)
    return srf


def _run_kernel(mem, xs, hv, srf, C: int, dtype):
    """Scan the expanded all-bank commands of every group (vmapped)."""
    units = jnp.arange(C)
    zero = jnp.zeros((), dtype)

    def step(carry, x):
        regs, m = carry
        x, h = x
        col = m[2 * units + x["par"], x["row"], x["col"]]               # [C, 16]
        cur = regs[:, x["dst"]]
        a = regs[:, x["ra"]]
        s = regs[:, SRF, jnp.clip(x["ra"], 0, 15)][:, None]
        code = x["code"]
        new = jnp.select(
            [code == Crf.MAC, code == Crf.FILL, code == Crf.FILL_RELU, code == Crf.ADD,
             code == Crf.SUB, code == Crf.RSUB, code == Crf.MUL, code == Crf.MAD, code == Crf.MULS,
             code == Crf.MOV_RELU, code == Crf.HOST_REG],
            [cur + a * col, col, jnp.maximum(col, zero), cur + col, cur - col, col - cur, cur * col,
             col * s + cur, col * s, jnp.maximum(cur, zero), jnp.broadcast_to(h, cur.shape)],
            cur)
        writes_reg = ~x["store"] & (code != Crf.HOST_SRF) & (code != Crf.ZERO_B) & \
            (code != Crf.PROGRAM) & (code != Crf.MODE)
        regs = jnp.where(writes_reg, regs.at[:, x["dst"]].set(new), regs)
        regs = jnp.where(code == Crf.ZERO_B, regs.at[:, GRF_B:GRF_B + 8].set(zero), regs)
        regs = jnp.where(code == Crf.HOST_SRF, regs.at[:, SRF].set(srf), regs)
        m = jnp.where(x["store"], m.at[2 * units + x["par"], x["row"], x["col"]].set(cur), m)
        return (regs, m), None

    def run_group(m, h):
        regs = jnp.zeros((C, N_REGS, 16), dtype)
        (_, m), _ = jax.lax.scan(step, (regs, m), (xs, h))
        return m

    return jax.jit(jax.vmap(run_group))(mem, hv)
