"""Value interpretation of HBM-PIM programs (see `backends/hbm_pim/lower.py`).

State of one pseudo-channel: its banks [banks_per_unit * units, rows, cols,
lanes] and the register file of every unit [units, 17, lanes] (GRF_A[0..7],
GRF_B[0..7], SRF); cols, lanes and banks_per_unit come from the backend
through `Program.meta`.  A `lax.scan` runs the expanded all-bank commands of
the shared stream; every unit reads the column of its own even or odd bank
(with one bank per unit, the column of its one bank: the lowering put the
odd parity's rows in the bank's upper half).
"""
from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from ...lower.layout import global_index
from ...lower.merge import expand_runs, host_merge
from ...lower.program import Op, Phase, Program, side_cache
from ...sim.padding import pow2
from .isa import Crf
from .lower import GRF_B, N_REGS, SRF

_DTYPES = {"backend": np.float16, "wide": np.float32}


def _unit_banks(program: Program, parity):
    """Index into the memory's bank axis of every unit's parity [C, ...]:
    2 * unit + parity for an even / odd bank pair, the unit for one bank."""
    C = program.cores
    if program.meta.get("banks_per_unit", 2) == 2:
        return 2 * np.arange(C)[:, None] + np.asarray(parity)[None, :]
    return np.broadcast_to(np.arange(C)[:, None], (C, len(parity)))


def _write_plan(program: Program, rows: np.ndarray, cols: dict, shape: tuple) -> list:
    """Where the host writes put operand values in the bank memory.

    shape: the (padded) memory [G', banks', rows', cols, lanes].  Returns, per
    host-written layout in record order, (operand, dst, code): dst the flat
    memory index of every lane of the columns the layout's records write,
    code the operand's flat element there or -1 (padding, written as 0).
    Value-independent, so computed once per program (`program.meta`)."""
    G, C = program.groups, program.cores
    n_cols, lanes = shape[3], shape[4]
    size = int(np.prod(shape))
    plan = []
    for lid in np.unique(cols["src"]):
        m = cols["src"] == lid
        bank_c, row_c, col_c = cols["bank"][m], cols["row"][m], cols["col"][m]
        lay = program.layouts[int(lid)]
        # int32 codes where the tensor's flat indices fit (half the memory
        # traffic of the image: 0.5 GB for an 8192 x 8192 GEMV in int64)
        wide = int(np.prod(lay.shape, dtype=np.int64)) >= 2**31
        code = np.full((G, program.meta["banks_per_unit"] * C, len(rows), n_cols, lanes), -1,
                       np.int64 if wide else np.int32)
        flat, valid = global_index(lay)                                  # [G, C, N]
        pos = lay.positions
        bank = _unit_banks(program, pos[:, 0])                           # [C, N]
        prow = np.searchsorted(rows, pos[None, :, 1])
        code[:, bank, prow, pos[None, :, 2], pos[None, :, 3]] = np.where(valid, flat, -1)
        dst = np.ravel_multi_index((np.arange(G)[:, None, None], bank_c[None, :, None], row_c[None, :, None],
                                    col_c[None, :, None], np.arange(lanes)[None, None, :]),
                                   shape).ravel()                        # [G, n, lanes] lanes of the columns
        code = code[:, bank_c, row_c, col_c].ravel()
        # int32 where it fits: the plan of a 4096 x 4096 GEMV is 2 x 16.8 M entries
        small = size < 2**31 and code.max(initial=0) < 2**31
        plan.append((lay.operand, dst.astype(np.int32) if small else dst,
                     code.astype(np.int32) if small else code))
    return plan


def execute_hbm_pim(program: Program, arrays, arithmetic: str):
    dtype = _DTYPES[arithmetic]
    rec = program.commands
    if rec.shape[0] != 1:
        raise NotImplementedError("hbm-pim programs share one stream across groups")
    G, C = program.groups, program.cores
    n_cols, lanes = program.meta["cols"], program.meta["lanes"]
    bpu = program.meta["banks_per_unit"]
    op_ = np.asarray(rec.op)
    src = np.asarray(rec.src)
    host_wr = (op_ == Op.WR) | (op_ == Op.WR_S)
    host_rd = (op_ == Op.RD) | (op_ == Op.RD_S)
    data = (op_ == Op.PIM_RD) | (op_ == Op.PIM_WR) | ((host_wr | host_rd) & (src >= 0))
    # physical rows in use, compacted to a dense row axis of the bank memory
    rows = np.unique(np.concatenate([np.asarray(rec.row)[data]] +
                                    [lay.positions[:, 1] for lay in program.layouts if lay.vars]))

    # 1. host writes of layouts into the banks (rearrangement), into memory
    # padded to powers of two (few distinct shapes, few compiles; the padding
    # computes on NaNs nobody reads)
    Gp, Cp, Rp = pow2(G), pow2(C), pow2(len(rows))
    shape = (Gp, bpu * Cp, Rp, n_cols, lanes)
    plan = side_cache(program).get("write_plan")
    if plan is None:
        cols = expand_runs(rec, host_wr & (src >= 0))
        cols["row"] = np.searchsorted(rows, cols["row"])
        plan = side_cache(program)["write_plan"] = _write_plan(program, rows, cols, shape)
    mem = np.full(shape, np.nan, dtype)
    flat_mem = mem.reshape(-1)
    values = _OperandValues(arrays, dtype)
    for operand, dst, code in plan:
        vals = values[operand]
        flat_mem[dst] = np.where(code >= 0, vals[np.maximum(code, 0)], np.zeros((), dtype))

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
    host = _host_values(program, values, dtype)                          # [G, rows, lanes]
    hv = host[:, hrow] if host.shape[1] else np.zeros((G, len(hrow), lanes), dtype)
    srf = _srf_values(program, values, dtype)
    # pad the step stream to a power of two with no-op steps (one compile
    # per length bucket instead of one per program)
    n_steps = len(dst)
    pad = pow2(n_steps, 16) - n_steps
    padded = lambda a, v=0: np.concatenate([np.asarray(a), np.full(pad, v, np.asarray(a).dtype)])  # noqa: E731
    xs = dict(code=jnp.asarray(padded(steps["aux"], Crf.MODE), jnp.int32),
              store=jnp.asarray(padded(steps["op"] == Op.PIM_WR, False)),
              par=jnp.asarray(padded(steps["bank"] % 2 if bpu == 2 else 0 * steps["bank"]), jnp.int32),
              row=jnp.asarray(padded(steps["row"]), jnp.int32),
              col=jnp.asarray(padded(steps["col"]), jnp.int32), dst=jnp.asarray(padded(dst), jnp.int32),
              ra=jnp.asarray(padded(ra), jnp.int32))
    hv = np.concatenate([hv, np.zeros((G, pad, lanes), dtype)], axis=1)
    hvp = np.zeros((Gp,) + hv.shape[1:], dtype)
    hvp[:G] = hv
    mem = np.asarray(_run_kernel(mem, xs, hvp, srf, C=Cp, bpu=bpu,
                                 dtype=np.dtype(dtype).name))[:G, :bpu * C, :len(rows)]

    # 3. read-back: the host sees only the columns its RD records read
    rd = host_rd & (src >= 0) & (np.asarray(rec.phase) == Phase.READBACK)
    rcols = expand_runs(rec, rd)
    rcols["row"] = np.searchsorted(rows, rcols["row"])
    seen = np.zeros((bpu * C, len(rows), n_cols), bool)
    seen[rcols["bank"], rcols["row"], rcols["col"]] = True
    host_view = np.where(seen[None, :, :, :, None], mem.astype(np.float32), np.nan)

    # 4. host merge: decode the result layout, sum lane / slot / core partials
    lay = program.layouts[program.readback.layout]
    flat, valid = global_index(lay)                                      # [G, C, N]
    pos = lay.positions
    bank = _unit_banks(program, pos[:, 0])
    colv = host_view[:, bank, np.searchsorted(rows, pos[None, :, 1]), pos[None, :, 2]]  # [G, C, N, lanes]
    lane = pos[:, 3]
    if program.readback.lane_partials:
        vals = np.sum(colv, axis=-1)          # the host sums the lane partials (float32)
    else:
        vals = np.take_along_axis(colv, np.maximum(lane, 0)[None, None, :, None], -1)[..., 0]
    return host_merge(program, vals.reshape(-1), valid.reshape(-1), flat.reshape(-1), arrays)


class _OperandValues(dict):
    """operand index -> its values flattened in the backend's dtype,
    converted on first use (an operand several layouts or the host-data
    rows read is converted once)."""

    def __init__(self, arrays, dtype):
        super().__init__()
        self.arrays, self.dtype = arrays, dtype

    def __missing__(self, k):
        self[k] = np.ravel(np.asarray(self.arrays[k])).astype(self.dtype)
        return self[k]


def _host_values(program: Program, values: _OperandValues, dtype):
    """Values of host-data table 0 ([G, rows, lanes]; -1 -> 0)."""
    if not program.host_data or program.host_data[0].shape[1] == 0:
        return np.zeros((program.groups, 0, program.meta["lanes"]), dtype)
    idx = np.asarray(program.host_data[0])
    k = program.meta["host_data_operands"][0]
    vals = values[k][np.maximum(idx, 0)]
    return np.where(idx >= 0, vals, np.zeros((), dtype))


def _srf_values(program: Program, values: _OperandValues, dtype):
    """The SRF scalars (one register: `lanes` entries, SRF_SLOTS used):
    constants ("const", c) and 0-d operands s of the body, ("arg", k) for s
    or ("arg", k, c, power) for c * s**power."""
    srf = np.zeros(program.meta["lanes"], dtype)
    for slot, (kind, v, *scaled) in enumerate(program.meta.get("srf", ())):
        if kind == "const":
            srf[slot] = v
        else:
            c, power = scaled or (1.0, 1)
            srf[slot] = c * np.float64(values[v][0]) ** power
    return srf


@partial(jax.jit, static_argnames=("C", "bpu", "dtype"))
def _run_kernel(mem, xs, hv, srf, C: int, bpu: int, dtype: str):
    """Scan the expanded all-bank commands of every group (vmapped); bpu
    banks per unit (mem's bank axis is bpu * C)."""
    dtype = jnp.dtype(dtype)
    units = bpu * jnp.arange(C)
    lanes = mem.shape[-1]
    zero = jnp.zeros((), dtype)

    def step(carry, x):
        regs, m = carry
        x, h = x
        col = m[units + x["par"], x["row"], x["col"]]                   # [C, lanes]
        cur = regs[:, x["dst"]]
        a = regs[:, x["ra"]]
        s = regs[:, SRF, jnp.clip(x["ra"], 0, lanes - 1)][:, None]
        code = x["code"]
        new = jnp.select(
            [code == Crf.MAC, code == Crf.FILL, code == Crf.FILL_RELU, code == Crf.ADD,
             code == Crf.SUB, code == Crf.RSUB, code == Crf.MUL, code == Crf.MAD, code == Crf.MULS,
             code == Crf.ADDS, code == Crf.SADD, code == Crf.MOV_RELU, code == Crf.HOST_REG],
            [cur + a * col, col, jnp.maximum(col, zero), cur + col, cur - col, col - cur, cur * col,
             col * s + cur, col * s, col + s, cur + s, jnp.maximum(cur, zero), jnp.broadcast_to(h, cur.shape)],
            cur)
        writes_reg = ~x["store"] & (code != Crf.HOST_SRF) & (code != Crf.ZERO_B) & \
            (code != Crf.PROGRAM) & (code != Crf.MODE)
        # every update writes one column / register unconditionally (the old
        # value when the step does not write it): XLA updates the carry in
        # place instead of copying the whole bank memory every step
        regs = regs.at[:, x["dst"]].set(jnp.where(writes_reg, new, cur))
        zb = regs[:, GRF_B:GRF_B + 8]
        regs = regs.at[:, GRF_B:GRF_B + 8].set(jnp.where(code == Crf.ZERO_B, zero, zb))
        regs = regs.at[:, SRF].set(jnp.where(code == Crf.HOST_SRF, srf, regs[:, SRF]))
        m = m.at[units + x["par"], x["row"], x["col"]].set(jnp.where(x["store"], cur, col))
        return (regs, m), None

    def run_group(m, h):
        regs = jnp.zeros((C, N_REGS, lanes), dtype)
        (_, m), _ = jax.lax.scan(step, (regs, m), (xs, h))
        return m

    return jax.vmap(run_group)(mem, hv)
