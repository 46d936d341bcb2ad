"""`cycles`: the time interpreter of PIM command programs.

A `jax.lax.scan` over the command records of each group (groups `vmap`-ped)
carrying per-bank state (open row, ACT time, last read / write, precharge
done), per-bank-group and per-group command state, the tFAW window of four
activations and the refresh deadline; the semantics are in `timing.py` and
are mirrored, slowly and obviously, by `reference.py`.  Timing parameters
are array leaves of `Timing`, so the scan `vmap`s over batches of programs
(padded to one length) and of timing variants; one compile per program
shape.

The per-group results combine into the program's time as

    rearrangement (host -> PIM before the kernel; max over groups when the
                   program rearranges channel-parallel through the host's
                   staging buffer, else their sum)
  + kernel        (max over groups; split into compute and the data
                   movement interleaved with it)
  + read-back     (max over groups)
  + host merge    (the host roofline: partial results + epilogue)
"""
from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from ..hw.core import Backend, Timing
from ..lower.program import Phase, Program, Records
from .report import BOUNDS, CycleReport
from .timing import (ACT_ALL, ALLBANK, CLASS_TABLE, COLUMN, DATA_BUS, FIXED, PRE_ALL, SIDE, WAIT,
                     WRITE)

NEVER = -1.0e7  # "long ago" for last-command times (float32-exact integers below 2^24)
SCAN_FIELDS = ("op", "bank", "row", "n", "phase", "resident", "pre")


def _timing_vector(t: Timing) -> dict:
    return {f: jnp.asarray(getattr(t, f), jnp.float32) for f in t._dynamic_fields}


def scan_stream(rec: dict, t: dict, banks: int, banks_per_bg: int, refresh: bool) -> dict:
    """Time one group's record stream.

    rec: [R] int arrays (SCAN_FIELDS); t: timing scalars (cycles).
    Returns per-stream sums: delta per bucket (pre, kernel-rearrange,
    kernel-compute, readback, resident), end time and command counts."""
    n_bg = max(1, banks // banks_per_bg)
    table = jnp.asarray(CLASS_TABLE)
    f32 = jnp.float32

    state = dict(
        open_row=jnp.full(banks, -1, jnp.int32), t_act=jnp.full(banks, NEVER, f32),
        t_rd=jnp.full(banks, NEVER, f32), t_wr=jnp.full(banks, NEVER, f32),
        t_ready=jnp.zeros(banks, f32), bg_act=jnp.full(n_bg, NEVER, f32),
        last_act=f32(NEVER), faw=jnp.full(4, NEVER, f32), last_col=f32(NEVER),
        last_col_bg=jnp.int32(-1), last_allbank=jnp.bool_(False), last_rd=f32(NEVER),
        last_rd_bg=jnp.int32(-1), last_wr=f32(NEVER), last_wr_bg=jnp.int32(-1),
        last_side=f32(NEVER), t_end=f32(0.0),
        next_ref=jnp.where(t["tREF0"] > 0, t["tREF0"], t["tREFI"]),
        buckets=jnp.zeros(5, f32), counts=jnp.zeros(8, f32))

    def pre_ok(s):
        """Earliest precharge time of every bank."""
        return jnp.maximum(jnp.maximum(s["t_act"] + t["tRAS"], s["t_rd"] + t["tRTP_S"]),
                           s["t_wr"] + t["tWL"] + t["tBL"] + t["tWR"])

    def step(s, r):
        flags = table[r["op"]]
        valid = r["n"] > 0
        is_col = (flags[COLUMN] == 1) & valid
        write = flags[WRITE] == 1
        allbank = flags[ALLBANK] == 1
        n = r["n"].astype(f32)

        # 1. refresh at a record boundary
        do_ref = refresh & valid & (s["t_end"] >= s["next_ref"])
        open_any = s["open_row"] >= 0
        r0 = jnp.maximum(s["next_ref"], jnp.max(jnp.where(open_any, pre_ok(s), NEVER)))
        r_end = r0 + t["tRP"] + t["tRFC"]
        missed = jnp.floor((s["t_end"] - s["next_ref"]) / t["tREFI"])
        s = dict(s,
                 open_row=jnp.where(do_ref, -1, s["open_row"]),
                 t_ready=jnp.where(do_ref, jnp.maximum(s["t_ready"], r_end), s["t_ready"]),
                 next_ref=jnp.where(do_ref, s["next_ref"] + t["tREFI"] * (1.0 + missed), s["next_ref"]))
        floor_t = jnp.where(do_ref, r_end, f32(0.0))

        # 2. rows: implicit PRE + ACT for a column command to a closed / other row
        b = jnp.clip(r["bank"], 0, banks - 1)
        bg = b // banks_per_bg
        is_open = s["open_row"][b] >= 0
        need = is_col & (s["open_row"][b] != r["row"])
        ready_b = jnp.where(is_open, pre_ok(s)[b] + t["tRP"], s["t_ready"][b])
        ready_b = jnp.maximum(ready_b, floor_t)
        t_act = jnp.maximum(jnp.maximum(ready_b, s["bg_act"][bg] + t["tRRD_L"]),
                            jnp.maximum(s["last_act"] + t["tRRD_S"], jnp.min(s["faw"]) + t["tFAW"]))

        # explicit all-bank ACT (ACTAB / G_ACT) and PREA
        act_all = (flags[ACT_ALL] == 1) & valid
        pre_all = (flags[PRE_ALL] == 1) & valid
        ready_all = jnp.where(s["open_row"] >= 0, pre_ok(s) + t["tRP"], s["t_ready"])
        t_actall = jnp.maximum(jnp.max(ready_all), jnp.maximum(floor_t, s["last_col"]))
        t_preall = jnp.maximum(jnp.max(jnp.where(s["open_row"] >= 0, pre_ok(s), NEVER)),
                               jnp.maximum(floor_t, s["last_col"]))

        # 3. columns
        rcd = jnp.where(write, t["tRCDWR"], t["tRCDRD"])
        col_ready = jnp.where(need, t_act + rcd, jnp.maximum(s["t_act"][b] + rcd, floor_t))
        spacing_prev = jnp.where(allbank & s["last_allbank"], t["tCCD_AB"],
                                 jnp.where(bg == s["last_col_bg"], t["tCCD_L"], t["tCCD_S"]))
        t0 = jnp.maximum(col_ready, s["last_col"] + spacing_prev)
        rd_to_wr = s["last_rd"] + t["tCL"] + t["tBL"] + t["tRTRS"] - t["tWL"]
        wr_to_rd = s["last_wr"] + t["tWL"] + t["tBL"] + jnp.where(bg == s["last_wr_bg"], t["tWTR_L"],
                                                                  t["tWTR_S"])
        t0 = jnp.where(write, jnp.maximum(t0, rd_to_wr), jnp.maximum(t0, wr_to_rd))
        wait = flags[WAIT] == 1
        t0 = jnp.where(wait, jnp.maximum(t0, s["t_end"]), t0)
        spacing = jnp.where(allbank, t["tCCD_AB"], t["tCCD_L"])
        t_last = t0 + (n - 1.0) * spacing
        col_end = t_last + jnp.where(write, t["tWL"] + t["tBL"], t["tCL"] + t["tBL"])
        col_end = jnp.where(allbank, t_last + t["tCCD_AB"], col_end)

        # side datapath (AttAcc data movement) and fixed latencies
        side = (flags[SIDE] == 1) & valid
        side_gap = jnp.maximum(t["tBL"], t["tCCD_S"])
        s0 = jnp.maximum(s["last_side"] + side_gap, floor_t)
        s0 = jnp.where(wait, jnp.maximum(s0, s["t_end"]), s0)
        fixed = (flags[FIXED] == 1) & valid
        side_last = s0 + (n - 1.0) * side_gap
        side_end = jnp.where(fixed, s0 + n, side_last + side_gap)
        fixed_plain = fixed & ~side
        f0 = jnp.maximum(jnp.maximum(s["last_col"], s["t_end"]), floor_t)

        end = jnp.where(is_col, col_end,
                        jnp.where(side, side_end,
                                  jnp.where(fixed_plain, f0 + n,
                                            jnp.where(act_all, t_actall + t["tRCDRD"],
                                                      jnp.where(pre_all, t_preall + t["tRP"], s["t_end"])))))
        end = jnp.where(valid, end, s["t_end"])
        delta = jnp.maximum(end - s["t_end"], 0.0)
        bucket = jnp.where(r["resident"] == 1, 4,
                           jnp.where(r["pre"] == 1, 0,
                                     jnp.where(r["phase"] == Phase.READBACK, 3,
                                               jnp.where(r["phase"] == Phase.REARRANGE, 1, 2))))

        # state updates
        new = dict(s)
        act_now = need
        new["open_row"] = jnp.where(act_all, jnp.full(banks, r["row"], jnp.int32),
                                    jnp.where(pre_all, -1,
                                              s["open_row"].at[b].set(jnp.where(is_col, r["row"],
                                                                                s["open_row"][b]))))
        new["t_act"] = jnp.where(act_all, jnp.full(banks, t_actall, f32),
                                 s["t_act"].at[b].set(jnp.where(act_now, t_act, s["t_act"][b])))
        new["t_ready"] = jnp.where(pre_all, jnp.full(banks, t_preall + t["tRP"], f32), s["t_ready"])
        new["bg_act"] = s["bg_act"].at[bg].set(jnp.where(act_now, t_act, s["bg_act"][bg]))
        new["last_act"] = jnp.where(act_now, jnp.maximum(s["last_act"], t_act), s["last_act"])
        oldest = jnp.argmin(s["faw"])
        new["faw"] = jnp.where(act_now, s["faw"].at[oldest].set(t_act), s["faw"])
        new["t_rd"] = jnp.where(is_col & ~write, s["t_rd"].at[b].set(t_last), s["t_rd"])
        new["t_wr"] = jnp.where(is_col & write, s["t_wr"].at[b].set(t_last), s["t_wr"])
        new["last_col"] = jnp.where(is_col, t_last, s["last_col"])
        new["last_col_bg"] = jnp.where(is_col, bg, s["last_col_bg"])
        new["last_allbank"] = jnp.where(is_col, allbank, s["last_allbank"])
        new["last_rd"] = jnp.where(is_col & ~write, t_last, s["last_rd"])
        new["last_rd_bg"] = jnp.where(is_col & ~write, bg, s["last_rd_bg"])
        new["last_wr"] = jnp.where(is_col & write, t_last, s["last_wr"])
        new["last_wr_bg"] = jnp.where(is_col & write, bg, s["last_wr_bg"])
        new["last_side"] = jnp.where(side, jnp.where(fixed, s0 + n - side_gap, side_last), s["last_side"])
        new["t_end"] = jnp.maximum(s["t_end"], end)
        new["buckets"] = s["buckets"].at[bucket].add(delta)
        data = flags[DATA_BUS] == 1
        add = jnp.stack([act_now.astype(f32) + act_all.astype(f32),          # 0 ACT
                         jnp.where(is_col & ~write & ~allbank, n, 0.0),       # 1 RD columns
                         jnp.where(is_col & write & ~allbank, n, 0.0),        # 2 WR columns
                         jnp.where(is_col & allbank, n, 0.0),                 # 3 PIM columns
                         do_ref.astype(f32),                                  # 4 REF
                         jnp.where(valid & data, n, 0.0),                     # 5 data-bus bursts
                         jnp.where(valid, jnp.where(is_col | side, n, 1.0), 0.0),  # 6 commands
                         pre_all.astype(f32) + (need & is_open).astype(f32)])  # 7 PRE
        new["counts"] = s["counts"] + add
        return new, None

    out, _ = jax.lax.scan(step, state, rec)
    return {"buckets": out["buckets"], "end": out["t_end"], "counts": out["counts"]}


def _stream_arrays(records: Records, include_resident: bool) -> dict:
    """Scan inputs [S, R] from a Records: resident records dropped unless
    asked for, and the `pre` flag of the leading rearrangement segment."""
    arr = {f: np.asarray(getattr(records, f)) for f in ("op", "bank", "row", "n", "phase", "resident")}
    if not include_resident:
        arr["n"] = np.where(arr["resident"] == 1, 0, arr["n"])
    non_pre = (arr["phase"] != Phase.REARRANGE) & (arr["n"] > 0)
    arr["pre"] = (np.cumsum(non_pre, axis=1) == 0).astype(np.int32)
    return {k: jnp.asarray(v, jnp.int32) for k, v in arr.items()}


@partial(jax.jit, static_argnames=("banks", "banks_per_bg", "refresh"))
def _scan_batch(rec: dict, t: dict, banks: int, banks_per_bg: int, refresh: bool):
    """vmap of scan_stream over streams [S, R]."""
    return jax.vmap(lambda r: scan_stream(r, t, banks, banks_per_bg, refresh))(rec)


def cycles(program: Program, backend: Backend, *, include_resident: bool = False,
           refresh: bool = True) -> CycleReport:
    """Time of `program` on `backend` (see module docstring).

    include_resident: also time the one-time placement of resident operands
    (their records are otherwise reported as `resident_cycles` only).

    Example:
        >>> rep = cycles(program, get_backend("hbm-pim"))      # doctest: +SKIP
        >>> rep.total_cycles, rep.breakdown()                   # doctest: +SKIP
    """
    t = _timing_vector(backend.timing)
    geo = (backend.group.banks, backend.group.banks_per_bank_group, refresh)
    rec = _stream_arrays(program.commands, include_resident)
    if include_resident:  # placement counted as ordinary rearrangement
        rec["resident"] = jnp.zeros_like(rec["resident"])
    out = _scan_batch({k: rec[k] for k in SCAN_FIELDS}, t, *geo)
    resident = None
    if not include_resident and np.asarray(program.commands.resident).any():
        # the one-time placement, timed on its own (steady state starts after it)
        only = _stream_arrays(program.commands, True)
        only["n"] = jnp.where(only["resident"] == 1, only["n"], 0)
        resident = _scan_batch({k: only[k] for k in SCAN_FIELDS}, t, *geo)["buckets"][:, 4]
    return combine(program, backend, out, t, resident)


def combine(program: Program, backend: Backend, out: dict, t: dict, resident=None) -> CycleReport:
    """Combine per-stream scan results into the program's CycleReport.

    resident: per-stream time of the resident placement ([S]) or None."""
    b = out["buckets"]                                     # [S, 5]
    pre, k_rearr, k_comp, rback = (b[:, i] for i in range(4))
    if resident is None:
        resident = jnp.zeros_like(pre)
    G = program.groups
    S = b.shape[0]
    scale = G if S == 1 else 1                             # a shared stream runs in every group
    host = backend.system.host
    tck = t["tCK"]
    pre_bytes = float(program.stats.get("rearrange_bytes", 0.0))
    if program.parallel_rearrangement:
        host_read = pre_bytes / (host.mem_bandwidth * host.bandwidth_efficiency) * 1e9 / tck
        rearr_pre = jnp.maximum(jnp.max(pre), host_read)
    else:
        rearr_pre = jnp.sum(pre) * scale
    kernel = k_rearr + k_comp
    g = jnp.argmax(kernel)
    k_rearr_g, k_comp_g = k_rearr[g], k_comp[g]
    readback = jnp.max(rback)
    merge = _merge_cycles(program, backend) / tck
    rearrangement = rearr_pre + k_rearr_g
    total = rearrangement + k_comp_g + readback + merge
    counts = jnp.sum(out["counts"], axis=0) * scale
    e = backend.energy
    cores = program.cores
    energy = (counts[0] * e.act + counts[7] * e.pre + counts[1] * e.rd + counts[2] * e.wr
              + counts[3] * cores * (e.pim_op + e.rd) + counts[4] * e.refresh
              + counts[5] * backend.core.col_bytes * e.io_byte)
    util = jnp.stack([jnp.max(out["counts"][:, 6]) / total,
                      jnp.max(out["counts"][:, 3]) * t["tCCD_AB"] / total,
                      jnp.max(out["counts"][:, 5]) * t["tBL"] / total,
                      rearrangement / total, merge / total])
    names = ("ACT", "RD", "WR", "PIM", "REF", "bursts", "commands", "PRE")
    return CycleReport(total_cycles=total, total_ns=total * tck, rearrangement=rearrangement,
                       compute=k_comp_g, readback=readback, merge=merge,
                       resident_cycles=(jnp.max(resident) if program.parallel_rearrangement
                                        else jnp.sum(resident) * scale),
                       kernel_cycles=jnp.max(kernel),
                       bound=jnp.argmax(util), utilisation=util, energy_pj=energy,
                       counts={n: counts[i] for i, n in enumerate(names)})


def _merge_cycles(program: Program, backend: Backend) -> float:
    """Host merge time in ns from the host roofline: read the partials,
    reduce them, apply the epilogue, write the result."""
    st = program.stats
    partial_bytes = st.get("readback_bytes", 0.0)
    out_bytes = st.get("result_bytes", 0.0)
    flops = st.get("merge_flops", 0.0)
    if partial_bytes == 0 and flops == 0:
        return 0.0
    return backend.system.host.time_ns(partial_bytes + out_bytes, flops)


assert len(BOUNDS) == 5
