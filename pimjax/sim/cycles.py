"""`cycles`: the time interpreter of PIM command programs.

A `jax.lax.scan` over the command records of each group's stream
(`scan_lanes`: many streams side by side as the lanes of one scan, several
back to back in a lane) carrying per-bank state (open row, ACT time,
earliest precharge, ready time), per-bank-group and per-group command
state, the tFAW window of four activations and the refresh deadline; the
semantics are in `timing.py`, the DRAM timing constraints in the rule table
`hw.dram_rules` (whose compiled latencies the step reads), and
`reference.py` applies that table, slowly and obviously, in a loop.  Timing
parameters are array leaves of `Timing` and may differ per lane, which is how `sweep` times many variants in one scan.
`cycles_batch` pools the streams of many programs into lanes
(`_pack_lanes`); compiles are per (lanes, length) bucket.

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

import heapq
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from ..hw.core import Backend, Timing, check_timing_batch
from ..hw.dram_phases import (ACT_AFTER_ACT, ACT_AFTER_ACT_BG, ACT_AFTER_ACT_CH, ACT_AFTER_PRE, ACT_AFTER_REF,
                               ACT_WINDOW, ACTAB_AFTER_BUF, ACTAB_AFTER_COL, END_AB, END_ACTAB, END_PREA, END_RD,
                               END_SIDE, END_WR, FIXED_AFTER_COL, GAP_AB, GAP_AB_L, GAP_AB_S, GAP_L, GAP_S,
                               PRE_AFTER_ACT, PRE_AFTER_RD, PRE_AFTER_WR, PREA_AFTER_COL, PREALL_AFTER_AB,
                               RD_AFTER_ACT, RD_AFTER_WR_L, RD_AFTER_WR_S, REF_AFTER_PREREF, REF_FIRST, REF_INTERVAL,
                               REF_WAVE, SIDE_AFTER_SIDE, SIDE_AFTER_SIDE_BG, SPACE_AB, SPACE_L, SPACE_S,
                               WR_AFTER_ACT, WR_AFTER_RD)
from ..hw.dram_rules import CHAIN, N_LAT, NEVER, compile_chains, compile_rules
from ..lower.program import Phase, Program, Records
from ..family import family_of, has_family
from .engines import check_banks, check_programs, resolve_engine
from .padding import fine, pow2
from .report import BOUNDS, CycleReport
from .timing import (ACT_ALL, ALLBANK, BARRIER, BUFFER, CLASS_TABLE, COLUMN, DATA_BUS, FIXED, N_FLAGS, PRE_ALL,
                     SIDE, STAGGER, STREAM, WAIT, WRITE)

SCAN_FIELDS = ("op", "bank", "row", "n", "phase", "resident", "pre", "sync")


def timing_vector(t: Timing) -> dict:
    """{field: float32 jax scalar / array} of a Timing's dynamic fields.  A
    timing of plain numbers (a preset's) is converted once and kept: the
    tuner times one backend dozens of times per layer, and two dozen
    `jnp.asarray` calls cost ~10 ms each time."""
    values = [getattr(t, f) for f in t._dynamic_fields]
    if not all(isinstance(v, (int, float, np.integer, np.floating)) for v in values):
        return {f: jnp.asarray(v, jnp.float32) for f, v in zip(t._dynamic_fields, values)}
    key = tuple(zip(t._dynamic_fields, (float(v) for v in values)))
    out = _TIMING_VECTORS.get(key)
    if out is None:
        if len(_TIMING_VECTORS) >= 256:
            _TIMING_VECTORS.clear()
        out = _TIMING_VECTORS[key] = {f: jnp.asarray(v, jnp.float32) for f, v in zip(t._dynamic_fields, values)}
    return dict(out)


_TIMING_VECTORS: dict = {}


VALID = N_FLAGS      # bit of a record's packed flags set when n > 0
LAST = N_FLAGS + 1   # bit set on the last record of a stream in a lane (`scan_lanes`)
TABLES = ("open_row", "t_act", "pre_ok", "t_ready", "bg_act", "side_bg", "faw")   # the scan's [*, N] bank state


def flag_of(bits, k):
    """Bit k of packed record flags, as bool."""
    return (bits >> k) & 1 == 1


def _record_facts(rec: dict) -> dict:
    """The scan's per-record inputs, [R, N] each, computed for the whole
    block at once (outside the loop): the record's timing-class flags packed
    into one int32 bit set (bit k = column k of CLASS_TABLE; WAIT also set by
    a host sync point; bit VALID when n > 0), bank, row and repeat count."""
    flags = jnp.asarray(CLASS_TABLE)[rec["op"]]                      # [R, N, N_FLAGS]
    bits = jnp.sum(flags << jnp.arange(N_FLAGS, dtype=jnp.int32)[None, None, :], axis=-1)
    bits = bits | jnp.where(rec["sync"] == 1, 1 << WAIT, 0) | jnp.where(rec["n"] > 0, 1 << VALID, 0)
    return dict(bits=bits.astype(jnp.int32), bank=rec["bank"], row=rec["row"],
                n=rec["n"].astype(jnp.float32))


def _record_counts(rec: dict, banks: int) -> jnp.ndarray:
    """[R, N, 8] command counts of each of [R, N] records, the parts that do
    not depend on timing (the scan adds implicit ACT / PRE and REF).  ACT
    and PRE count bank activations / precharges: an all-bank ACTAB, G_ACT
    or PREA counts once per bank of the group (Energy.act / pre are per
    bank)."""
    flags = jnp.asarray(CLASS_TABLE)[rec["op"]] == 1                 # [R, N, N_FLAGS]
    valid = rec["n"] > 0
    n = rec["n"].astype(jnp.float32)
    f = lambda k: flags[..., k]                                       # noqa: E731
    is_col, side = f(COLUMN) & valid, f(SIDE) & valid
    rd_col, wr_col = is_col & ~f(WRITE), is_col & f(WRITE)
    per_record = [
        jnp.where(f(ACT_ALL) & valid, float(banks), 0.0),                            # 0 bank ACTs
        jnp.where(rd_col & ~f(ALLBANK), n, 0.0),                                    # 1 RD columns
        jnp.where(wr_col & ~f(ALLBANK), n, 0.0),                                    # 2 WR columns
        jnp.where(is_col & f(ALLBANK), n, 0.0),                                     # 3 PIM columns
        jnp.zeros_like(n),                                                          # 4 REF
        jnp.where(f(DATA_BUS) & valid, n, 0.0),                                     # 5 data-bus bursts
        jnp.where(valid & ~f(BARRIER), jnp.where(is_col | side, n, 1.0), 0.0),      # 6 commands
        jnp.where(f(PRE_ALL) & valid, float(banks), 0.0)]                           # 7 bank PREs
    return jnp.stack(per_record, axis=-1)


def _bucket_of(rec: dict) -> jnp.ndarray:
    """[R, N] report bucket of each record: 0 leading rearrangement, 1
    rearrangement inside the kernel, 2 compute, 3 read-back, 4 resident."""
    return jnp.where(rec["resident"] == 1, 4,
                     jnp.where(rec["pre"] == 1, 0,
                               jnp.where(rec["phase"] == Phase.READBACK, 3,
                                         jnp.where(rec["phase"] == Phase.REARRANGE, 1, 2))))


def features_of(ops: np.ndarray) -> tuple[str, ...]:
    """Timing features a set of opcodes uses (static: the scan is built
    without the branches a program cannot take)."""
    flags = CLASS_TABLE[np.unique(np.asarray(ops))]
    out = []
    for name, k in (("act_all", ACT_ALL), ("pre_all", PRE_ALL), ("side", SIDE), ("fixed", FIXED),
                    ("barrier", BARRIER)):
        if flags[:, k].any():
            out.append(name)
    return tuple(out)


ALL_FEATURES = ("act_all", "pre_all", "side", "fixed", "barrier")


def _rows(fn, a):
    """fn-reduction of a [K, N] array over its K rows -> [1, N], as K - 1
    elementwise ops: XLA fuses them with their producers, where a reduce over
    the major axis is a separate, slow loop on the CPU."""
    out = a[0:1]
    for k in range(1, a.shape[0]):
        out = fn(out, a[k:k + 1])
    return out


def _first(hit):
    """[K, N] bool -> the first True row of each column only (an argmin
    one-hot, elementwise)."""
    seen = jnp.zeros_like(hit[0:1])
    rows = []
    for k in range(hit.shape[0]):
        rows.append(hit[k:k + 1] & ~seen)
        seen = seen | hit[k:k + 1]
    return jnp.concatenate(rows)


class _Scan:
    """What every phase of a `scan_lanes` step reads: the latencies as [1, N]
    rows (L[k]: rule k, `hw.dram_phases` names the reads), the turnarounds'
    chains, the geometry, the features in use, and the initial state."""

    def __init__(self, t: dict, N: int, banks: int, banks_per_bg: int, refresh: bool, features: tuple):
        f32, i32 = jnp.float32, jnp.int32
        self.N, self.banks, self.per_bg, self.n_bg = N, banks, banks_per_bg, max(1, banks // banks_per_bg)
        self.refresh, self.features = refresh, features
        # the DRAM rules' latencies (`hw.dram_rules`), [1, N] rows
        lat = compile_rules(t, f32)
        self.L = [lat[..., k] for k in range(N_LAT)]
        # the turnarounds as chains of terms: added term by term, they round as the
        # rules written out (last_rd + tCL + tBL + tRTRS - tWL) did
        chains = compile_chains(t, f32)
        self.C = {k: [chains[..., k, j] for j in range(CHAIN)] for k in (WR_AFTER_RD, RD_AFTER_WR_L, RD_AFTER_WR_S)}
        self.bank_ids = jnp.arange(banks, dtype=i32)[:, None]
        self.bg_ids = jnp.arange(self.n_bg, dtype=i32)[:, None]
        self.zero, self.no = jnp.zeros((1, N), f32), jnp.zeros((1, N), bool)
        self.one = t["tCK"] / t["tCK"]            # 1, but not a constant XLA can fold
        L, never, no, zero = self.L, self.never, self.no, self.zero
        self.initial = dict(
            open_row=jnp.full((banks, N), -1, i32), t_act=never(banks), pre_ok=never(banks),
            t_ready=jnp.zeros((banks, N), f32), bg_act=never(self.n_bg), side_bg=never(self.n_bg), faw=never(4),
            pre_open=never(),
            last_act=never(), last_col=never(), last_col_bg=jnp.full((1, N), -1, i32), last_allbank=no,
            last_arr=never(), last_buf=never(),      # the last bank-array column / GWRITE (BUFWR) column
            last_rd=never(), last_wr=never(), last_wr_bg=jnp.full((1, N), -1, i32), last_side=never(),
            t_issue=never(), t_bar=never(), t_end=zero, ref_end=never(),
            next_ref=jnp.where(L[REF_FIRST] > 0, L[REF_FIRST], L[REF_INTERVAL]),
            # the previous record's bank-state updates, for `_scan_apply` (a NOP to start)
            u_bank=jnp.zeros((1, N), i32), u_row=jnp.zeros((1, N), i32), u_col=no, u_need=no, u_side=no,
            u_act_all=no, u_pre_all=no, u_t_all=zero, u_t_act=zero, u_pre=zero, u_r_end=never(), u_reset=no)

    def never(self, rows: int = 1):
        return jnp.full((rows, self.N), NEVER, jnp.float32)

    def keep(self, v):
        """v, computed once: a division by a run-time 1 is an op XLA counts
        as expensive, so it materialises v instead of fusing (recomputing)
        it into each of the many rows that use it."""
        return v / self.one


def _at(v, i):
    """v[i[n], n]: a [K, N] table's row i of each lane."""
    return jnp.take_along_axis(v, i, axis=0)


def _scan_apply(c: _Scan, s: dict) -> dict:
    """(c) the previous record's updates of the [banks, N] / [n_bg, N] /
    [4, N] state, from the u_* rows it left in the loop state."""
    L = c.L
    oh = s["u_bank"] == c.bank_ids
    ohg = jax.lax.div(s["u_bank"], c.per_bg) == c.bg_ids
    col, need, act_all, pre_all = oh & s["u_col"], oh & s["u_need"], s["u_act_all"], s["u_pre_all"]
    new = dict(s)
    reset = s["u_reset"]
    # refresh (u_r_end = NEVER without one) closes every bank, a column
    # opens its row, ACTAB opens `u_row` in every bank and PREA closes them
    new["open_row"] = jnp.where(reset | pre_all, -1, jnp.where(
        act_all | (col & (s["u_row"] >= 0)), s["u_row"], jnp.where(s["u_r_end"] > NEVER, -1, s["open_row"])))
    new["t_act"] = jnp.where(reset, NEVER, jnp.where(act_all, s["u_t_all"],
                                                      jnp.where(need, s["u_t_act"], s["t_act"])))
    new["pre_ok"] = jnp.where(reset, NEVER, jnp.where(
        act_all, jnp.maximum(s["pre_ok"], s["u_t_all"] + L[PRE_AFTER_ACT]),
        jnp.where(col, s["u_pre"], s["pre_ok"])))
    new["t_ready"] = jnp.where(reset, 0.0, jnp.where(pre_all, s["u_t_all"] + L[ACT_AFTER_PRE],
                                                      jnp.maximum(s["t_ready"], s["u_r_end"])))
    new["bg_act"] = jnp.where(reset, NEVER, jnp.where(ohg & s["u_need"], s["u_t_act"], s["bg_act"]))
    new["faw"] = jnp.where(reset, NEVER, jnp.where(s["u_need"] & _first(s["faw"] == _rows(jnp.minimum, s["faw"])),
                                                    s["u_t_act"], s["faw"]))
    if "side" in c.features:
        new["side_bg"] = jnp.where(reset, NEVER, jnp.where(ohg & s["u_side"], s["last_side"], s["side_bg"]))
    return new


def _scan_record(c: _Scan, s: dict, x: dict) -> dict:
    """(a) the record's class flags and the state of its bank / bank group."""
    flag = partial(flag_of, x["bits"])
    valid = flag(VALID)
    bank = jnp.clip(x["bank"], 0, c.banks - 1)
    bg = jax.lax.div(bank, c.per_bg)
    return dict(flag=flag, valid=valid, n=x["n"], row=x["row"], bank=bank, bg=bg,
                is_col=flag(COLUMN) & valid, write=flag(WRITE), allbank=flag(ALLBANK),
                act_all=flag(ACT_ALL) & valid, pre_all=flag(PRE_ALL) & valid,
                side=flag(SIDE) & valid, fixed=flag(FIXED), wait=flag(WAIT),
                row_b=_at(s["open_row"], bank), pre_b=_at(s["pre_ok"], bank), ready_b=_at(s["t_ready"], bank),
                t_act_b=_at(s["t_act"], bank), bg_act_b=_at(s["bg_act"], bg))


def _scan_refresh(c: _Scan, s: dict, g: dict) -> dict:
    """Phase refresh, at a record boundary: every bank closed and busy until
    r_end, and -- commands issue in order -- nothing after it starts before
    r_end, whichever record it fell on (a barrier or a data movement record
    does not touch the banks itself).  Then the record's floor (a barrier:
    every earlier record ended)."""
    L, zero = c.L, c.zero
    floor_t, do_ref, r_end, next_ref, ref_end = zero, c.no, c.never(), s["next_ref"], s["ref_end"]
    if c.refresh:
        do_ref = g["valid"] & (s["t_end"] >= s["next_ref"])
        # the refresh precharges like a PREA (tRTP_L after an all-bank MAC)
        after_mac = jnp.where(s["last_allbank"], s["last_col"] + L[PREALL_AFTER_AB], NEVER)
        r_start = jnp.maximum(jnp.maximum(s["next_ref"], s["pre_open"]), after_mac)
        # a due refresh waits past a wave of fresh activations: a single-bank record whose ACT
        # can issue within tREFW of the last ACT and before every open bank may be precharged
        # (the controller keeps issuing while the refresh waits for its PREs; timing.py, 1)
        open0 = g["row_b"] >= 0
        need0 = g["is_col"] & ~g["allbank"] & (g["row"] >= 0) & (jnp.where(open0, g["row_b"], -1) != g["row"])
        ready0 = jnp.maximum(jnp.where(open0, g["pre_b"] + L[ACT_AFTER_PRE], g["ready_b"]),
                             jnp.maximum(zero, s["ref_end"]))
        ready0 = jnp.where(g["wait"], jnp.maximum(ready0, s["t_end"]), ready0)
        act0 = _activation(c, s, g, ready0)
        do_ref = do_ref & ~(need0 & (act0 < jnp.minimum(r_start, s["last_act"] + L[REF_WAVE])))
        r_end = r_start + L[REF_AFTER_PREREF] + L[ACT_AFTER_REF]
        missed = jnp.floor((s["t_end"] - s["next_ref"]) / L[REF_INTERVAL])
        next_ref = jnp.where(do_ref, next_ref + L[REF_INTERVAL] * (1.0 + missed), next_ref)
        ref_end = jnp.where(do_ref, r_end, ref_end)
        floor_t = jnp.maximum(zero, ref_end)
        r_end = jnp.where(do_ref, r_end, NEVER)
    # a barrier (WAIT class or a host sync point): nothing of this record
    # -- row commands included -- before every earlier record has ended
    floor_t = c.keep(jnp.where(g["wait"], jnp.maximum(floor_t, s["t_end"]), floor_t))
    return dict(do_ref=do_ref, r_end=r_end, next_ref=next_ref, ref_end=ref_end, floor_t=floor_t,
                pre_open=jnp.where(do_ref, NEVER, s["pre_open"]))


def _activation(c: _Scan, s: dict, g: dict, ready):
    """Phase row open: an ACT of the record's bank no earlier than `ready`
    (its precharge done), tRC after its last ACT, tRRD after the bank
    group's / channel's, and within the tFAW window."""
    L = c.L
    return jnp.maximum(jnp.maximum(jnp.maximum(ready, g["t_act_b"] + L[ACT_AFTER_ACT]),
                                   g["bg_act_b"] + L[ACT_AFTER_ACT_BG]),
                       jnp.maximum(s["last_act"] + L[ACT_AFTER_ACT_CH], _rows(jnp.minimum, s["faw"]) + L[ACT_WINDOW]))


def _scan_row_open(c: _Scan, s: dict, g: dict, r: dict) -> dict:
    """Phase row open: the implicit PRE + ACT of a column record to a
    closed / other row."""
    is_open = (g["row_b"] >= 0) & ~r["do_ref"]
    need = g["is_col"] & (g["row"] >= 0) & (jnp.where(is_open, g["row_b"], -1) != g["row"])
    ready_b = jnp.where(is_open, g["pre_b"] + c.L[ACT_AFTER_PRE], jnp.maximum(g["ready_b"], r["r_end"]))
    ready_b = jnp.maximum(ready_b, r["floor_t"])
    return dict(is_open=is_open, need=need, t_act=c.keep(_activation(c, s, g, ready_b)))


def _scan_all_bank(c: _Scan, s: dict, g: dict, r: dict) -> tuple:
    """Phase all-bank: (ACTAB / G_ACT time, PREA time)."""
    L, zero = c.L, c.zero
    t_actall = t_preall = zero
    floor_t = r["floor_t"]
    if "act_all" in c.features:
        opened = s["open_row"] >= 0
        ready_all = jnp.where(r["do_ref"], jnp.maximum(_rows(jnp.maximum, s["t_ready"]), r["r_end"]),
                              _rows(jnp.maximum, jnp.where(opened, s["pre_ok"] + L[ACT_AFTER_PRE], s["t_ready"])))
        ready_all = jnp.maximum(ready_all, _rows(jnp.maximum, s["t_act"]) + L[ACT_AFTER_ACT])   # ACT -> ACT: tRC
        # after the last column [COL_ORDER]; after the last GWRITE only under BUF_ACT
        after_cols = jnp.maximum(s["last_arr"] + L[ACTAB_AFTER_COL], s["last_buf"] + L[ACTAB_AFTER_BUF])
        t_actall = jnp.maximum(ready_all, jnp.maximum(floor_t, after_cols))
        # staggered (per bank group, tFAW apart): the last group opens last
        t_actall = t_actall + jnp.where(g["flag"](STAGGER), (c.n_bg - 1) * L[ACT_WINDOW], 0.0)
    if "pre_all" in c.features:
        # in order after the last column [PREA_AFTER_COL: 0]; tRTP_L after an all-bank one (>= 0)
        last_col_pre = s["last_col"] + jnp.where(s["last_allbank"], L[PREALL_AFTER_AB], L[PREA_AFTER_COL])
        t_preall = jnp.maximum(r["pre_open"], jnp.maximum(floor_t, last_col_pre))
    return t_actall, t_preall


def _scan_column(c: _Scan, s: dict, g: dict, r: dict, o: dict) -> tuple:
    """Phase column: (the record's last column, its end -- phase end of a
    column record)."""
    L, C = c.L, c.C
    write, allbank, bg, n = g["write"], g["allbank"], g["bg"], g["n"]
    rcd = jnp.where(write, L[WR_AFTER_ACT], L[RD_AFTER_ACT])
    col_ready = jnp.where(o["need"], o["t_act"] + rcd, jnp.maximum(g["t_act_b"] + rcd, r["floor_t"]))
    same_col_bg = bg == s["last_col_bg"]
    spacing_prev = jnp.where(s["last_allbank"],
                             jnp.where(allbank, L[GAP_AB], jnp.where(same_col_bg, L[GAP_AB_L], L[GAP_AB_S])),
                             jnp.where(same_col_bg, L[GAP_L], L[GAP_S]))
    t0 = jnp.maximum(col_ready, s["last_col"] + spacing_prev)
    rd_to_wr = s["last_rd"]
    wr_to_rd = s["last_wr"]
    same_bg = bg == s["last_wr_bg"]
    for j in range(CHAIN):
        rd_to_wr = rd_to_wr + C[WR_AFTER_RD][j]
        wr_to_rd = wr_to_rd + jnp.where(same_bg, C[RD_AFTER_WR_L][j], C[RD_AFTER_WR_S][j])
    t0 = jnp.where(write, jnp.maximum(t0, rd_to_wr), jnp.maximum(t0, wr_to_rd))
    t0 = jnp.where(g["wait"], jnp.maximum(t0, s["t_end"]), t0)
    t0 = jnp.maximum(t0, s["t_bar"])
    spacing = jnp.where(allbank, L[SPACE_AB], jnp.where(g["flag"](STREAM), L[SPACE_S], L[SPACE_L]))
    t_last = c.keep(t0 + (n - 1.0) * spacing)
    col_end = jnp.where(allbank, t_last + L[END_AB], t_last + jnp.where(write, L[END_WR], L[END_RD]))
    return t_last, col_end


def _scan_side(c: _Scan, s: dict, g: dict, r: dict) -> dict:
    """Phase side: AttAcc's data-movement datapath, and fixed latencies."""
    L, zero, n = c.L, c.zero, g["n"]
    side_gap = L[SIDE_AFTER_SIDE]
    s0 = side_last = side_end = f0 = zero
    if "side" in c.features:
        s0 = jnp.maximum(jnp.maximum(s["last_side"] + side_gap, r["floor_t"]),
                         jnp.maximum(_at(s["side_bg"], g["bg"]) + L[SIDE_AFTER_SIDE_BG], s["t_bar"]))
        s0 = jnp.where(g["wait"], jnp.maximum(s0, s["t_end"]), s0)
        side_last = s0 + (n - 1.0) * jnp.maximum(side_gap, L[SIDE_AFTER_SIDE_BG])
        side_end = jnp.where(g["fixed"], s0 + n, side_last + L[END_SIDE])
    fixed_plain = g["fixed"] & ~g["side"] & g["valid"]
    if "fixed" in c.features:
        f0 = jnp.maximum(jnp.maximum(s["last_col"] + L[FIXED_AFTER_COL], s["t_end"]),
                         jnp.maximum(r["floor_t"], s["t_bar"]))
    return dict(s0=s0, side_last=side_last, side_end=side_end, fixed_plain=fixed_plain, f0=f0,
                side_new=jnp.where(g["side"], jnp.where(g["fixed"], s0 + n - side_gap, side_last), s["last_side"]))


def _scan_end(c: _Scan, s: dict, g: dict, col_end, sd: dict, t_actall, t_preall):
    """Phase end: the record's end time, by its class."""
    L, n = c.L, g["n"]
    end = jnp.where(g["is_col"], col_end,
                    jnp.where(g["side"], sd["side_end"],
                              jnp.where(sd["fixed_plain"], sd["f0"] + n,
                                        jnp.where(g["act_all"], t_actall + L[END_ACTAB],
                                                  jnp.where(g["pre_all"], t_preall + L[END_PREA], s["t_end"])))))
    return c.keep(jnp.where(g["valid"], end, s["t_end"]))


def _scan_update(c: _Scan, s: dict, g: dict, r: dict, o: dict, t_last, sd: dict, t_actall, t_preall, end) -> tuple:
    """The state after the record (the bank tables one step late, through
    u_* rows: `_scan_apply`) and the scan's output row (its end time and the
    timing-dependent command counts)."""
    L, features = c.L, c.features
    is_col, write, need, is_open = g["is_col"], g["write"], o["need"], o["is_open"]
    act_all, pre_all, side, bg = g["act_all"], g["pre_all"], g["side"], g["bg"]
    # the bank's earliest precharge after this record (a running max:
    # see `scan_lanes`)
    pre_col = jnp.maximum(jnp.maximum(g["pre_b"], jnp.where(need, o["t_act"] + L[PRE_AFTER_ACT], NEVER)),
                          t_last + jnp.where(write, L[PRE_AFTER_WR], L[PRE_AFTER_RD]))
    new = dict(s)
    pre_open = jnp.where(is_col & (is_open | need), jnp.maximum(r["pre_open"], pre_col), r["pre_open"])
    if "act_all" in features:     # every bank opens: pre_ok = max(pre_ok, t_actall + tRAS)
        pre_open = jnp.where(act_all, jnp.maximum(_rows(jnp.maximum, s["pre_ok"]), t_actall + L[PRE_AFTER_ACT]),
                             pre_open)
    new["pre_open"] = jnp.where(pre_all, NEVER, pre_open)
    rd_col, wr_col = is_col & ~write, is_col & write
    new["last_act"] = jnp.where(need, jnp.maximum(s["last_act"], o["t_act"]), s["last_act"])
    new["last_col"] = jnp.where(is_col, t_last, s["last_col"])
    if "act_all" in features:
        buf = g["flag"](BUFFER)
        new["last_arr"] = jnp.where(is_col & ~buf, t_last, s["last_arr"])
        new["last_buf"] = jnp.where(is_col & buf, t_last, s["last_buf"])
    new["last_col_bg"] = jnp.where(is_col, bg, s["last_col_bg"])
    new["last_allbank"] = jnp.where(is_col, g["allbank"], s["last_allbank"])
    new["last_rd"] = jnp.where(rd_col, t_last, s["last_rd"])
    new["last_wr"] = jnp.where(wr_col, t_last, s["last_wr"])
    new["last_wr_bg"] = jnp.where(wr_col, bg, s["last_wr_bg"])
    if "side" in features:
        new["last_side"] = sd["side_new"]
    if "barrier" in features:
        issued = jnp.where(is_col, t_last, jnp.where(side, sd["side_new"],
                                                      jnp.where(sd["fixed_plain"], sd["f0"] + g["n"] - 1.0, NEVER)))
        new["t_issue"] = jnp.maximum(s["t_issue"], issued)
        new["t_bar"] = jnp.where(g["flag"](BARRIER) & g["valid"], jnp.maximum(s["t_bar"], s["t_issue"] + 1.0),
                                 s["t_bar"])
    new["t_end"] = jnp.maximum(s["t_end"], end)
    new["next_ref"] = r["next_ref"]
    if c.refresh:
        new["ref_end"] = r["ref_end"]
    new.update(u_bank=g["bank"], u_row=g["row"], u_col=is_col, u_need=need, u_t_act=o["t_act"], u_pre=pre_col,
               u_r_end=r["r_end"])
    if "side" in features:
        new["u_side"] = side
    if "act_all" in features or "pre_all" in features:
        new.update(u_act_all=act_all, u_pre_all=pre_all, u_t_all=jnp.where(act_all, t_actall, t_preall))
    # the end time and the timing-dependent command counts (implicit ACT,
    # REF, implicit PRE) as bits of one row
    ys = jnp.concatenate([new["t_end"], jnp.where(need, 1.0, 0.0) + jnp.where(r["do_ref"], 2.0, 0.0)
                          + jnp.where(need & is_open, 4.0, 0.0)])
    # after the last record of a stream the lane starts over from the
    # initial state (the bank tables through `_scan_apply`, from u_reset)
    last = g["flag"](LAST)
    # (rows this step never changes -- those of timing features the
    # records do not use -- stay loop-invariant, which XLA hoists)
    new = {k: v if k in TABLES or v is s[k] else jnp.where(last, c.initial[k], v) for k, v in new.items()}
    new["u_reset"] = last
    return new, ys


def _scan_step(c: _Scan, s: dict, x: dict) -> tuple:
    """One record of every lane, phase by phase (`hw.dram_phases`)."""
    s = _scan_apply(c, s)
    g = _scan_record(c, s, x)
    r = _scan_refresh(c, s, g)
    o = _scan_row_open(c, s, g, r)
    t_actall, t_preall = _scan_all_bank(c, s, g, r)
    t_last, col_end = _scan_column(c, s, g, r, o)
    sd = _scan_side(c, s, g, r)
    end = _scan_end(c, s, g, col_end, sd, t_actall, t_preall)
    return _scan_update(c, s, g, r, o, t_last, sd, t_actall, t_preall, end)


def scan_lanes(rec: dict, t: dict, banks: int, banks_per_bg: int, refresh: bool,
               features: tuple[str, ...] = ALL_FEATURES, *, n_streams: int | None = None) -> dict:
    """Time many independent record streams in N lanes (semantics:
    `timing.py`).

    rec: SCAN_FIELDS int arrays [N, R], plus optionally "sid" [N, R]: the
         stream each record belongs to (-1: padding).  A lane runs its
         streams one after another, each from the initial state (a record
         whose sid differs from the one before starts a stream).  Without
         "sid", lane i is stream i.
    t:   timing leaves in cycles, scalars or [N] (one timing per lane).
    n_streams: number of streams (sids 0 .. n_streams - 1; default N).
    Returns {"buckets": [n_streams, 5] time per report bucket (see
    `_bucket_of`), "end": [n_streams] end time, "counts": [n_streams, 8]
    command counts}.

    The state is struct-of-arrays with the stream axis last: per-bank fields
    [banks, N], per-bank-group fields [n_bg, N], per-stream fields [1, N]
    rows, so every step is a few elementwise passes over contiguous
    N-vectors (SIMD lanes on the CPU).  Each step (a) gathers the state of
    the record's bank, (b) computes the record's times on [1, N] rows and
    (c) writes the bank state back through one-hot selects -- one step late
    (`_scan_apply`), from values carried in the loop state: fused into a
    [banks, N] update, the record's times would be recomputed for every
    bank.  `features` names the timing classes the records use beyond plain
    / all-bank columns (see `features_of`); the step leaves out the others.

    A bank's earliest precharge (`pre_ok`: tRAS after its ACT, tRTP after
    a read, tWL + tBL + tWR after a write) is kept as one running maximum
    rather than three times: it equals the reference model's maximum of the
    three, since an ACT comes after every earlier ACT of the bank.  So is
    `pre_open`, the latest of them over the open banks (what refresh and
    PREA wait for): banks close only all together (PREA, refresh) or to
    reopen at once (a row miss)."""
    N = rec["op"].shape[0]
    f32, i32 = jnp.float32, jnp.int32
    # per-stream values are [1, N] rows (same rank as the [banks, N] fields)
    t = {k: jnp.broadcast_to(jnp.asarray(v, f32), (N,))[None, :] for k, v in t.items()}
    c = _Scan(t, N, banks, banks_per_bg, refresh, features)
    R = rec["op"].shape[1]
    sid = rec["sid"] if "sid" in rec else jnp.broadcast_to(jnp.arange(N, dtype=i32)[:, None], (N, R))
    n_streams = N if n_streams is None else n_streams
    recT = {k: jnp.asarray(v).T for k, v in rec.items() if k != "sid"}   # [R, N]
    sidT = jnp.asarray(sid).T
    start = sidT != jnp.concatenate([jnp.full((1, N), -2, i32), sidT[:-1]])
    facts = _record_facts(recT)
    last = sidT != jnp.concatenate([sidT[1:], jnp.full((1, N), -2, i32)])
    facts["bits"] = facts["bits"] | jnp.where(last, 1 << LAST, 0)
    xs = jax.tree.map(lambda v: v[:, None, :], facts)                  # [R, 1, N]
    # no unrolling: an unrolled body would fuse one record's times into the
    # next record's [banks, N] updates again (see `_scan_apply`)
    _, ys = jax.lax.scan(partial(_scan_step, c), c.initial, xs)         # [R, 2, N]
    ends, dyn = ys[:, 0, :], ys[:, 1, :].astype(i32)
    # the time a record adds is its end minus the latest earlier end (0 at
    # the start of a stream)
    delta = ends - jnp.where(start, 0.0, jnp.concatenate([jnp.zeros((1, N), f32), ends[:-1]]))
    bucket = _bucket_of(recT)
    # an all-bank column's implicit ACT / PRE opens / closes its row in every bank
    per_bank = jnp.where(jnp.asarray(CLASS_TABLE)[recT["op"], ALLBANK] == 1, float(banks), 1.0)
    one_row = jnp.ones_like(per_bank)
    seg = jnp.where(sidT >= 0, sidT, n_streams).ravel()              # padding -> a dropped segment
    per_record = jnp.concatenate(
        [jnp.stack([jnp.where(bucket == k, delta, 0.0) for k in range(5)], axis=-1),
         _record_counts(recT, banks).at[..., jnp.array([0, 4, 7])].add(
             jnp.stack([(dyn >> k) & 1 for k in range(3)], axis=-1).astype(f32)
             * jnp.stack([per_bank, one_row, per_bank], axis=-1))],
        axis=-1)                                                       # [R, N, 13]
    sums = jax.ops.segment_sum(per_record.reshape(-1, 13), seg, num_segments=n_streams + 1)[:n_streams]
    end = jax.ops.segment_max(ends.ravel(), seg, num_segments=n_streams + 1)[:n_streams]
    return {"buckets": sums[:, :5], "end": jnp.maximum(end, 0.0), "counts": sums[:, 5:]}


def scan_stream(rec: dict, t: dict, banks: int, banks_per_bg: int, refresh: bool,
                features: tuple[str, ...] = ALL_FEATURES) -> dict:
    """`scan_lanes` of one stream: rec SCAN_FIELDS arrays [R], t scalars.
    Returns buckets [5], end [] and counts [8]."""
    out = scan_lanes({k: jnp.asarray(v)[None] for k, v in rec.items()}, t, banks, banks_per_bg,
                       refresh, features)
    return jax.tree.map(lambda v: v[0], out)


def _stream_arrays(records: Records, include_resident: bool) -> dict:
    """Scan inputs [S, R] from a Records: the `pre` flag of the leading
    rearrangement segment; resident records keep their flag (their time goes
    to its own bucket) unless `include_resident`, which times them as
    ordinary rearrangement."""
    arr = {f: np.asarray(getattr(records, f)) for f in ("op", "bank", "row", "n", "phase", "resident")}
    arr["sync"] = np.broadcast_to(np.asarray(records.sync), arr["op"].shape)
    if include_resident:
        arr["resident"] = np.zeros_like(arr["resident"])
    non_pre = (arr["phase"] != Phase.REARRANGE) & (arr["n"] > 0) & (arr["resident"] == 0)
    arr["pre"] = (np.cumsum(non_pre, axis=1) == 0).astype(np.int32)
    return {k: v.astype(np.int32) for k, v in arr.items()}


def program_arrays(program: Program, include_resident: bool = False, steady: bool = True) -> dict:
    """Everything `cycles` needs from a Program, as numpy arrays (a pytree
    that can be stacked across programs after padding with `pad_arrays`).

    steady: drop the resident placement from the stream (the steady state
    starts with resident operands already in place); it is timed separately.
    """
    rec = _stream_arrays(program.commands, include_resident)
    res = dict(rec)
    if steady and not include_resident:
        rec = dict(rec, n=np.where(rec["resident"] == 1, 0, rec["n"]))
        res["n"] = np.where(res["resident"] == 1, res["n"], 0)
    else:
        res["n"] = np.zeros_like(res["n"])
    return {"rec": _compact({k: rec[k] for k in SCAN_FIELDS}),
            "res": _compact({k: res[k] for k in SCAN_FIELDS}),
            **_program_scalars(program, include_resident)}


def _program_scalars(program: Program, include_resident: bool = False) -> dict:
    """The per-program numbers `_combine` reads besides the streams (SCALARS)."""
    st = program.stats
    S = program.commands.op.shape[0]
    return {
        "scale": np.float32(program.groups if S == 1 else 1),
        "parallel": np.bool_(program.parallel_rearrangement),
        # the host reads what it rearranges: a floor under the transfer (resident operands too)
        "pre_bytes": np.float32(st.rearrange_bytes + (st.resident_bytes if include_resident else 0.0)),
        "res_bytes": np.float32(0.0 if include_resident else st.resident_bytes),
        "merge_bytes": np.float32(st.readback_bytes + st.result_bytes),
        "merge_flops": np.float32(st.merge_flops),
        "merged": np.bool_(st.readback_bytes > 0 or st.merge_flops > 0),
        "cores": np.float32(program.cores),
    }


COARSE_UNTIL = 16384


def _bucket(n: int, coarse: bool = False) -> int:
    """Record lengths are padded to a power of two so that batches of
    different programs share compiled scans; `coarse` (the tuner's small
    batches): to a power of four up to COARSE_UNTIL records, since a compile
    costs seconds and scanning up to 4x padding of a short stream
    milliseconds.  Beyond MAX_STEPS (one stream longer than a lane block),
    to a multiple of a sixteenth of a power of two: there the padding is
    scanned, not compiled."""
    p2 = pow2(n, 64)
    if coarse and p2 <= COARSE_UNTIL:
        return p2 if p2.bit_length() % 2 == 1 else 2 * p2      # 64 * 4^k
    return fine(n) if n > MAX_STEPS else p2


def _compact(rec: dict) -> dict:
    """Drop records with n = 0 (padding, or resident placement left out of
    the steady state): they change nothing, and a shorter stream is a shorter
    scan.  Streams are re-padded to their longest (at least one record).
    The fields are compacted as one stacked [F, S, R] table (one mask, not
    one per field)."""
    live = rec["n"] > 0
    counts = live.sum(axis=1)
    if (counts == counts[0]).all() and live[:, :counts[0]].all():     # already compact: a slice
        return {k: v[:, :max(1, int(counts[0]))] for k, v in rec.items()}
    table = np.stack(list(rec.values()))
    if live.shape[0] == 1:                                              # one stream: a mask
        packed = table[:, :, live[0]]
    else:
        packed = np.zeros(table.shape[:2] + (max(1, int(counts.max())),), table.dtype)
        for i in range(live.shape[0]):
            packed[:, i, :counts[i]] = table[:, i, live[i]]
    return dict(zip(rec, packed))


def pad_arrays(arrs: list[dict], coarse: bool = False) -> dict:
    """Stack program arrays, padding record streams (and missing streams)
    with NOP records, which take no time, to one [S, R] (R a power of two)."""
    out = {}
    # One length for both streams, so `_scan_programs` scans them as lanes of
    # one scan (an XLA compile of the scan costs seconds; two scan bodies
    # cost twice that, and two length buckets multiply the compiled shapes).
    # Without any resident placement in the batch the resident stream is
    # empty ([.., 0]) and not scanned at all.
    any_res = any(bool((a["res"]["n"] > 0).any()) for a in arrs)
    R = _bucket(max(a[key]["op"].shape[1] for a in arrs for key in (("rec", "res") if any_res else ("rec",))),
                coarse)
    for key in ("rec", "res"):
        S = max(a[key]["op"].shape[0] for a in arrs)
        RK = R if (key == "rec" or any_res) else 0

        def pad(x):
            return np.pad(x[:, :RK], ((0, S - x.shape[0]), (0, RK - min(RK, x.shape[1]))))
        out[key] = {f: np.stack([pad(a[key][f]) for a in arrs]) for f in SCAN_FIELDS}
    for key in SCALARS:
        out[key] = np.stack([a[key] for a in arrs])
    return out


STREAM_BLOCK = 256
"""Streams per scan.  The step's state ([banks, N] per-bank tables and
[1, N] rows) stays in the CPU's L2 cache up to a few hundred streams;
larger sets are scanned in blocks of this many (`_scan_chunked`) and a
step of fewer pays a fixed per-fusion cost for little work."""


def _scan_chunked(streams: dict, t: dict, geo: tuple) -> dict:
    """`scan_lanes` of [N, R] streams, one per lane (t leaves [N]), in blocks of at most
    STREAM_BLOCK streams, one after another (`lax.map`)."""
    banks, per_bg, refresh, features = geo
    N = streams["op"].shape[0]
    if N <= STREAM_BLOCK:
        return scan_lanes(streams, t, banks, per_bg, refresh, features)
    C = -(-N // STREAM_BLOCK)
    pad = C * STREAM_BLOCK - N                              # NOP streams (n = 0), timing of the last

    def blocks(x, mode):
        x = jnp.pad(x, ((0, pad),) + ((0, 0),) * (x.ndim - 1), mode=mode)
        return x.reshape((C, STREAM_BLOCK) + x.shape[1:])
    out = jax.lax.map(lambda b: scan_lanes(b[0], b[1], banks, per_bg, refresh, features),
                      ({f: blocks(v, "constant") for f, v in streams.items()},
                       {k: blocks(v, "edge") for k, v in t.items()}))
    return jax.tree.map(lambda x: x.reshape((C * STREAM_BLOCK,) + x.shape[2:])[:N], out)


def _scan_programs(arr: dict, t: dict, geo: tuple):
    """Scan the record streams of P padded programs (`pad_arrays`, leading
    [P]) as one [P * S (+ P * S resident), R] block of streams; t: timing
    leaves, scalars or [P].  Returns the scan outputs with [P, S] leading
    axes and the resident-placement time per stream [P, S]."""
    banks, per_bg, refresh, features = geo
    P, S = arr["rec"]["op"].shape[:2]
    R_res = arr["res"]["op"].shape[2]
    t_stream = {k: jnp.repeat(jnp.broadcast_to(jnp.asarray(v, jnp.float32), (P,)), S) for k, v in t.items()}

    def flat(streams):
        return {f: streams[f].reshape(P * S, -1) for f in SCAN_FIELDS}

    def scan(streams, tt):
        return _scan_chunked(streams, tt, geo)

    if R_res == 0:                          # no resident placement in the batch (pad_arrays)
        out, resident = scan(flat(arr["rec"]), t_stream), jnp.zeros((P * S,), jnp.float32)
    else:                                   # pad_arrays gave both one length: one scan
        both = scan({f: jnp.concatenate([flat(arr["rec"])[f], flat(arr["res"])[f]]) for f in SCAN_FIELDS},
                    {k: jnp.concatenate([v, v]) for k, v in t_stream.items()})
        out = jax.tree.map(lambda x: x[:P * S], both)
        resident = both["buckets"][P * S:, 4]
    out = jax.tree.map(lambda x: x.reshape((P, S) + x.shape[1:]), out)
    return out, resident.reshape(P, S)


def _time_programs(arr: dict, t: dict, energy, host, geo: tuple) -> CycleReport:
    """CycleReports [P] of P padded programs (pure jnp); t: timing leaves,
    scalars or [P] (one timing variant per program)."""
    out, resident = _scan_programs(arr, t, geo)
    return _combine_programs(arr, out, resident, t, energy, host)


def _combine_programs(arr: dict, out: dict, resident, t: dict, energy, host) -> CycleReport:
    """`_combine` of P programs: out leaves [P, S, ...], resident [P, S],
    t leaves scalars or [P]."""
    P = resident.shape[0]
    t_prog = {k: jnp.broadcast_to(jnp.asarray(v, jnp.float32), (P,)) for k, v in t.items()}
    return jax.vmap(lambda a, o, r, tt: _combine(a, o, r, tt, energy, host))(arr, out, resident, t_prog)


def _combine(arr: dict, out: dict, resident, t: dict, e, host) -> CycleReport:
    b = out["buckets"]                                     # [S, 5]
    pre, k_rearr, k_comp, rback = (b[:, i] for i in range(4))
    scale = arr["scale"]
    tck = t["tCK"]
    host_read = host.memory_ns(arr["pre_bytes"]) / tck
    host_read_res = host.memory_ns(arr["res_bytes"]) / tck
    rearr_pre = jnp.where(arr["parallel"], jnp.maximum(jnp.max(pre), host_read), jnp.sum(pre) * scale)
    kernel = k_rearr + k_comp
    g = jnp.argmax(kernel)
    readback = jnp.max(rback)
    merge = jnp.where(arr["merged"], host.time_ns(arr["merge_bytes"], arr["merge_flops"]), 0.0) / tck
    rearrangement = rearr_pre + k_rearr[g]
    total = rearrangement + k_comp[g] + readback + merge
    counts = jnp.sum(out["counts"], axis=0) * scale
    energy = (counts[0] * e.act + counts[7] * e.pre + counts[1] * e.rd + counts[2] * e.wr
              + counts[3] * arr["cores"] * (e.pim_op + e.rd) + counts[4] * e.refresh
              + counts[5] * 32.0 * e.io_byte)
    safe = jnp.maximum(total, 1.0)
    util = jnp.stack([jnp.max(out["counts"][:, 6]) / safe,
                      jnp.max(out["counts"][:, 3]) * t["tCCD_AB"] / safe,
                      jnp.max(out["counts"][:, 5]) * t["tBL"] / safe,
                      rearrangement / safe, merge / safe])
    names = ("ACT", "RD", "WR", "PIM", "REF", "bursts", "commands", "PRE")   # ACT / PRE: per bank
    return CycleReport(total_cycles=total, total_ns=total * tck, rearrangement=rearrangement,
                       compute=k_comp[g], readback=readback, merge=merge,
                       resident_cycles=jnp.where(arr["parallel"], jnp.maximum(jnp.max(resident), host_read_res),
                                                 jnp.sum(resident) * scale),
                       kernel_cycles=jnp.max(kernel), bound=jnp.argmax(util), utilisation=util,
                       energy_pj=energy, counts={n: counts[i] for i, n in enumerate(names)})


def _geo(backend: Backend, refresh: bool, arrs) -> tuple:
    """Static scan configuration: geometry, refresh, and the timing features
    the programs' records use (union over `arrs`, program_arrays dicts)."""
    ops = np.concatenate([np.asarray(a["rec"]["op"]).ravel() for a in arrs] +
                         [np.asarray(a["res"]["op"]).ravel() for a in arrs])
    return (backend.group.banks, backend.group.banks_per_bank_group, bool(refresh), features_of(ops))


@partial(jax.jit, static_argnames=("geo",))
def _time_batch(arr, t, energy, host, geo):
    return _time_programs(arr, t, energy, host, geo)


@partial(jax.jit, static_argnames=("geo",))
def _time_sweep(arr, t, energy, host, geo):
    """[T, P] reports: every program under every timing variant, scanned as
    one block of T * P programs (one timing per program)."""
    T = next(iter(t.values())).shape[0]
    P = arr["cores"].shape[0]
    tiled = jax.tree.map(lambda x: jnp.tile(x, (T,) + (1,) * (x.ndim - 1)), arr)
    rep = _time_programs(tiled, {k: jnp.repeat(v, P) for k, v in t.items()}, energy, host, geo)
    return jax.tree.map(lambda x: x.reshape((T, P) + x.shape[1:]), rep)


def cycles(program: Program, backend: Backend, *, include_resident: bool = False,
           refresh: bool = True, engine: str | None = None) -> CycleReport:
    """Time of `program` on `backend` (see module docstring).

    include_resident: time the one-time placement of resident operands as
    ordinary rearrangement (first call); by default it is reported only as
    `resident_cycles` and the steady state starts with the data in place.
    engine: "native" or "scan" (default DEFAULT_ENGINE); the same numbers.

    Example:
        >>> rep = cycles(program, get_backend("hbm-pim"))      # doctest: +SKIP
        >>> rep.total_cycles, rep.breakdown()                   # doctest: +SKIP
    """
    check_programs([program], backend)
    engine = resolve_engine(engine, backend.timing)
    model = _own_model(backend)
    if model is not None:           # e.g. DPUs run their own instruction streams: UPMEM's time model
        return model(program, backend, include_resident=include_resident, refresh=refresh, engine=engine)
    check_banks([program], backend)
    t = timing_vector(backend.timing)
    if engine == "native" or _controller(backend) is not None:
        return report_at(_native_reports([program], t, backend, refresh, include_resident=include_resident), 0)
    arr = program_arrays(program, include_resident)
    rep = _time_batch(pad_arrays([arr]), t, backend.energy, backend.system.host, _geo(backend, refresh, [arr]))
    return report_at(rep, 0)


def _controller(backend: Backend):
    """The stream timer of the group's controller when it is not pimjax's
    DRAM model (`Group.controller`; the family's `controllers`, with
    `sim.native.time_streams`'s signature), else None.  Such a controller
    runs on the host (the native path): a JAX transform over its timing, or
    `engine="scan"`, is refused where it would be needed."""
    name = backend.group.controller
    if name == "dram":
        return None
    timer = family_of(backend).controllers.get(name) if has_family(backend) else None
    if timer is None:
        offered = sorted(family_of(backend).controllers) if has_family(backend) else []
        raise ValueError(f"{backend.name}: Group.controller={name!r} is not offered by its family (offered: "
                         f"['dram'] + {offered})")
    if any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(backend.timing)):
        raise ValueError(f"{backend.name}: the {name!r} controller times concrete timings on the host; under "
                         "jax.vmap / jax.jit over the Timing use pimjax.sim.cycles.sweep")
    return timer


def _own_model(backend: Backend):
    """The family's own time model (UPMEM's DPU pipeline), or None: the DRAM
    engines time the records (also for a backend no family implements)."""
    return family_of(backend).cycles if has_family(backend) else None


SMALL_BATCH = 64
BATCH_SIZES = (4, 16, 64, 256)
SWEEP_CHUNK = 4096
"""Programs per `_combine` dispatch of a large sweep (one more compile)."""
SCALARS = ("scale", "parallel", "pre_bytes", "res_bytes", "merge_bytes", "merge_flops", "merged", "cores")


def _batch_size(k: int, sizes: tuple = BATCH_SIZES) -> int:
    """Batches are padded to a few fixed sizes (they share compiles)."""
    return next((b for b in sizes if b >= k), k)


def report_at(report: CycleReport, i: int) -> CycleReport:
    """Program `i`'s CycleReport out of a batched one (cycles_batch)."""
    return jax.tree.map(lambda x: x[i], report)


def cycles_pooled(program: Program, backend: Backend) -> CycleReport:
    """`cycles(program, backend)` through the batched scan, so it reuses the
    XLA compilations of the tuner's batches (a cold compile of the scan
    costs seconds); the same numbers."""
    if _own_model(backend):
        return cycles(program, backend)
    return report_at(cycles_batch([program], backend), 0)


@partial(jax.jit, static_argnames=("geo", "n_streams"))
def _scan_block(lanes: dict, t: dict, geo: tuple, n_streams: int) -> dict:
    banks, per_bg, refresh, features = geo
    return scan_lanes(lanes, t, banks, per_bg, refresh, features, n_streams=n_streams)


_combine_batch = jax.jit(_combine_programs)
LANE_SIZES = (16, 32, 64, 128, 256)
MAX_STEPS = 8192
"""Longest scan of a lane block unless one stream is longer."""
MAX_BLOCK = 1 << 22
"""Lanes x steps of a block, at most (unless one stream is longer): bounds
its per-record arrays (13 floats of sums per record, 4 of inputs)."""


def _pack_lanes(lengths: np.ndarray, coarse: bool, lanes: int = STREAM_BLOCK) -> list[tuple[int, int, list]]:
    """Blocks of lanes for the streams of the given lengths (index into
    `lengths`; empty streams are left out): [(N lanes, T steps, [[stream,
    ...] per lane])].  A lane runs its streams back to back, so a block's
    scan is T >= the longest stream steps of N lanes; streams are dealt
    longest first to the least-loaded lane (LPT), and N is about total /
    longest (more lanes than that add per-step work without shortening the
    scan).  T is padded to a power of two (four if `coarse`), N to
    LANE_SIZES: blocks share compiled scans."""
    order = [int(k) for k in np.argsort(-lengths, kind="stable") if lengths[k] > 0]
    blocks = []
    while order:
        L0, M = int(lengths[order[0]]), int(sum(int(lengths[k]) for k in order))
        n = _batch_size(min(lanes, -(-M // L0), max(1, MAX_BLOCK // L0)), LANE_SIZES)
        T = _bucket(max(L0, min(-(-M // n), MAX_STEPS)), coarse)
        load = [(0, j) for j in range(n)]
        assign: list[list] = [[] for _ in range(n)]
        rest = []
        for k in order:
            used, j = heapq.heappop(load)
            if used + lengths[k] <= T:
                assign[j].append(k)
                used += int(lengths[k])
            else:
                rest.append(k)
            heapq.heappush(load, (used, j))
        blocks.append((n, T, assign))
        order = rest
    return blocks


SCAN_THREADS = max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                           else (os.cpu_count() or 1)))
"""Lane blocks scanned at once.  One XLA:CPU scan keeps one core busy (its
steps are a chain of small fusions); jax releases the GIL while it runs, so
two blocks on two threads take 1.2-1.8x less wall time than one after the
other (benchmarks/README.md)."""


def _split_blocks(blocks: list, parts: int) -> list:
    """Each block of n >= 32 lanes as up to `parts` blocks of n / k lanes
    (k <= parts a power of two, n / k >= 16) and the same length: the same
    lanes, scanned by k threads instead of one."""
    out = []
    for n, T, assign in blocks:
        k = 1
        while 2 * k <= parts and n // (2 * k) >= LANE_SIZES[0]:       # lane counts stay powers of two
            k *= 2
        m = n // k
        out += [(m, T, part) for part in (assign[j * m:(j + 1) * m] for j in range(k)) if any(part)]
    return out


def cycles_batch(programs: list[Program], backend: Backend, *, refresh: bool = True,
                 batch: int = STREAM_BLOCK, coarse: bool | None = None,
                 threads: int | None = None, engine: str | None = None) -> CycleReport:
    """CycleReports of many programs at once; every field has a leading
    [len(programs)] axis in the input order.

    The record streams of all programs (one per group, and one per group for
    the resident placement) are pooled and packed into lanes of at most
    `batch` lanes per scan (`_pack_lanes`, `scan_lanes`); the per-program
    reports are then combined in one vmapped call.

    coarse: pad lengths to powers of four (up to COARSE_UNTIL): fewer
    compiles, up to 4x the scanning.  Default: for a small set (at most
    SMALL_BATCH programs, e.g. the tuner's top-k).
    threads: lane blocks scanned concurrently (default SCAN_THREADS), or
    the native engine's threads; the numbers do not depend on it.
    engine: "native" (default DEFAULT_ENGINE: every stream timed by the
    compiled event loop, `sim.native`; `batch` and `coarse` do not apply) or
    "scan" (the lane-packed lax.scan); the same numbers."""
    check_programs(programs, backend)
    engine = resolve_engine(engine)
    if _own_model(backend):          # UPMEM's DPU model: one report per program, stacked
        reps = [cycles(p, backend, refresh=refresh, engine=engine) for p in programs]
        return jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *reps)
    check_banks(programs, backend)
    if engine == "native" or _controller(backend) is not None:
        return _native_reports(programs, timing_vector(backend.timing), backend, refresh, threads)
    arrs = [program_arrays(p) for p in programs]
    coarse = len(programs) <= SMALL_BATCH if coarse is None else coarse
    t = timing_vector(backend.timing)
    geo = _geo(backend, refresh, arrs)
    P, S = len(arrs), max(a["rec"]["op"].shape[0] for a in arrs)
    # the streams: (program, kind, stream) and live record count
    who = [(i, kind, s) for i, a in enumerate(arrs) for kind in ("rec", "res") for s in range(a[kind]["n"].shape[0])]
    lengths = np.array([int((arrs[i][kind]["n"][s] > 0).sum()) for i, kind, s in who], np.int64)
    buckets, counts = np.zeros((P, S, 5), np.float32), np.zeros((P, S, 8), np.float32)
    end, resident = np.zeros((P, S), np.float32), np.zeros((P, S), np.float32)
    threads = SCAN_THREADS if threads is None else max(1, int(threads))

    def block_inputs(n, T, assign):
        block = {f: np.zeros((n, T), np.int32) for f in SCAN_FIELDS}
        block["sid"] = np.full((n, T), -1, np.int32)
        ids = [k for lane in assign for k in lane]
        local = {k: m for m, k in enumerate(ids)}
        for j, lane in enumerate(assign):
            off = 0
            for k in lane:
                i, kind, s = who[k]
                L = int(lengths[k])                          # live records come first (`_compact`)
                for f in SCAN_FIELDS:
                    block[f][j, off:off + L] = arrs[i][kind][f][s, :L]
                block["sid"][j, off:off + L] = local[k]
                off += L
        return block, ids

    def scan(spec):
        block, ids = block_inputs(*spec)
        return ids, jax.tree.map(np.asarray, _scan_block(block, t, geo, _batch_size(len(ids), LANE_SIZES)))

    blocks = _pack_lanes(lengths, coarse, batch)
    if threads > 1:
        blocks = _split_blocks(blocks, threads)
    if threads > 1 and len(blocks) > 1:
        with ThreadPoolExecutor(threads) as pool:
            results = list(pool.map(scan, blocks))
    else:
        results = [scan(b) for b in blocks]
    for ids, out in results:
        for m, k in enumerate(ids):
            i, kind, s = who[k]
            if kind == "rec":
                buckets[i, s], end[i, s], counts[i, s] = out["buckets"][m], out["end"][m], out["counts"][m]
            else:
                resident[i, s] = out["buckets"][m, 4]
    return _combine_chunks(arrs, {"buckets": buckets, "end": end, "counts": counts}, resident, t, backend)


def _combine_chunks(arrs: list[dict], out: dict, resident: np.ndarray, t: dict, backend: Backend) -> CycleReport:
    """CycleReports [P] from the per-stream results of P programs (out
    leaves [P, S, ...], resident [P, S]; arrs: their `program_arrays` or
    `_program_scalars`, or those stacked: {SCALARS key: [P, ...]}):
    `_combine` in padded chunks of 256 programs (they share compiles), of
    SWEEP_CHUNK where there are more than 4 of those (a sweep's variants x
    programs: 1 000 variants of 14 programs took 55 dispatches of ~20 ms).
    t: timing leaves, scalars or [P]."""
    scal = arrs if isinstance(arrs, dict) else {k: np.stack([a[k] for a in arrs]) for k in SCALARS}
    P = len(next(iter(scal.values())))
    per_prog = {k for k, v in t.items() if np.ndim(v) > 0}
    chunk, sizes = (256, BATCH_SIZES) if P <= 4 * 256 else (SWEEP_CHUNK, BATCH_SIZES + (SWEEP_CHUNK,))
    parts = []
    for lo in range(0, P, chunk):
        hi = min(P, lo + chunk)
        pad = _batch_size(hi - lo, sizes) - (hi - lo)
        # padded with copies of the chunk's last row (one repeat, not a list of `pad` one-row slices)
        take = lambda x: np.concatenate([x[lo:hi], np.repeat(x[hi - 1:hi], pad, axis=0)]) if pad else x[lo:hi]  # noqa: E731
        tt = {k: take(np.asarray(v)) if k in per_prog else v for k, v in t.items()}
        rep = _combine_batch(jax.tree.map(take, scal), jax.tree.map(take, out), take(resident), tt,
                             backend.energy, backend.system.host)
        parts.append(jax.tree.map(lambda x: np.asarray(x)[:hi - lo], rep))
    return jax.tree.map(lambda *xs: np.concatenate(xs), *parts)


def _fields32(c: Records, include_resident: bool):
    """The [S, R] int32 fields `native.pack_program` reads (views, no copies
    where they already are int32; every field broadcast to [S, R], as numpy
    assignment would: the compiled loop does not check bounds)."""
    S, R = c.op.shape
    f = [np.asarray(getattr(c, k)) for k in ("op", "bank", "row", "n", "phase", "resident", "sync")]
    f = [np.broadcast_to(x if x.dtype == np.int32 else x.astype(np.int32), (S, R)) for x in f]
    split = not include_resident and bool((f[5] == 1).any())
    return f, split


def _pack_numpy(out: np.ndarray, off: int, c: Records, include_resident: bool, split: bool) -> None:
    """`native.pack_program` in numpy (the reference its test compares)."""
    S, R = c.op.shape
    block = out[:, off:off + S * R].reshape(len(SCAN_FIELDS), S, R)
    resident = np.asarray(c.resident) == 1
    for j, f in enumerate(("op", "bank", "row", "n", "phase")):
        block[j] = getattr(c, f)
    block[5] = 0 if include_resident else resident
    block[7] = np.broadcast_to(np.asarray(c.sync), (S, R))
    n = block[3]
    # the leading rearrangement: records before the first live non-rearrangement one
    block[6] = np.cumsum((block[4] != Phase.REARRANGE) & (n > 0) & ~(resident & ~include_resident),
                         axis=1) == 0
    if split:
        res = out[:, off + S * R:off + 2 * S * R].reshape(len(SCAN_FIELDS), S, R)
        res[...] = block
        res[3] = np.where(resident, n, 0)
        n[resident] = 0


_ARENA = threading.local()
ARENA_MAX = 1 << 24          # entries (64 MB) a thread keeps for reuse


def _arena(size: int) -> np.ndarray:
    """A 1-D int32 scratch buffer of at least `size` entries, kept per thread
    and reused: a fresh 32 MB table per 1 M-record batch paid its page
    faults again every batch (the Labeller times ~100 such batches for one
    exhaustive GEMV search)."""
    if size > ARENA_MAX:                   # a one-off big batch: not kept alive
        return np.empty(size, np.int32)
    buf = getattr(_ARENA, "buf", None)
    if buf is None or buf.size < size:
        buf = _ARENA.buf = np.empty(min(ARENA_MAX, max(size, 1 << 20)), np.int32)
    return buf


def _pool_streams(programs: list[Program], include_resident: bool = False, scratch: bool = False):
    """The record streams of P programs side by side, for the native engine,
    built straight from their Records in one compiled pass per program
    (`native.pack_program`; no compaction: the loop skips records with
    n = 0).  Per program its S streams, the steady state ("rec": resident
    placement dropped, as `program_arrays`) and, when it has resident
    records, their one-time placement ("res").  scratch: write into this
    thread's reusable buffer (valid until its next call on the thread).

    Returns rec [8, M] int32 (rows SCAN_FIELDS), starts / stops [K] and
    who [K] = (program, "rec" | "res", stream)."""
    from .native import pack_program
    parts = [(i, p.commands) + _fields32(p.commands, include_resident) for i, p in enumerate(programs)]
    sizes = [int(np.prod(c.op.shape)) * (2 if split else 1) for _, c, _, split in parts]
    total = sum(sizes)
    width = len(SCAN_FIELDS)
    rec = (_arena(width * total)[:width * total].reshape(width, total) if scratch
           else np.empty((width, total), np.int32))
    who, starts, stops = [], [], []
    off = 0
    for (i, c, f, split), size in zip(parts, sizes):
        S, R = c.op.shape
        pack_program(rec, off, *f, include_resident, split)
        for kind, base in (("rec", off), ("res", off + S * R))[:2 if split else 1]:
            for st in range(S):
                who.append((i, kind, st))
                starts.append(base + st * R)
                stops.append(base + st * R + R)
        off += size
    return rec, np.asarray(starts, np.int64), np.asarray(stops, np.int64), who


def _timing_key(seg: np.ndarray) -> bytes:
    """What the event loop's result depends on in a stream seg [8, R] (rows
    SCAN_FIELDS): its live records (n > 0: the loop skips the others), with
    their rows renamed by first appearance.  Why renaming keeps the timing:
    the loop compares rows only with each other (is the bank's open row the
    record's row?) and with 0 (row < 0: a buffer access, no row), so any
    one-to-one renaming of the rows >= 0 times alike: two channels reading
    the same pattern at other rows, or a stream and its copy with dead
    records left in, are timed once."""
    seg = seg[:, seg[3] > 0]
    rows = seg[2]
    real = rows >= 0
    if real.any():
        vals, first_at, which = np.unique(rows[real], return_index=True, return_inverse=True)
        rank = np.empty(len(vals), np.int32)
        rank[np.argsort(first_at, kind="stable")] = np.arange(len(vals), dtype=np.int32)
        seg = seg.copy()
        seg[2, real] = rank[which]
    return seg.tobytes()


def _distinct_streams(rec: np.ndarray, starts: np.ndarray, stops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first stream of each distinct timing [U], distinct index of every
    stream [K]) of the streams rec[:, starts[k]:stops[k]]: streams of equal
    `_timing_key` time alike under every timing."""
    seen: dict = {}
    first, inv = [], np.empty(len(starts), np.int64)
    for k, (a, b) in enumerate(zip(starts.tolist(), stops.tolist())):
        key = _timing_key(rec[:, a:b])
        u = seen.get(key)
        if u is None:
            u = seen[key] = len(first)
            first.append(k)
        inv[k] = u
    return np.asarray(first, np.int64), inv


def _native_outputs(programs: list[Program], table: np.ndarray, backend: Backend, refresh: bool,
                    threads: int | None = None, include_resident: bool = False):
    """Per-stream results of P programs under each of V timing rows
    (table [V, F], `native.timing_table`): out leaves [V, P, S, ...] float32
    and the resident placement time [V, P, S]."""
    from .native import time_streams, time_streams_sweep
    rec, starts, stops, who = _pool_streams(programs, include_resident, scratch=True)
    V, P, K = table.shape[0], len(programs), len(who)
    S = max(p.commands.op.shape[0] for p in programs)
    banks, per_bg = backend.group.banks, backend.group.banks_per_bank_group
    own = _controller(backend)
    if own is not None:  # the family's controller: every (variant, stream) pair, stream after stream
        tix = np.repeat(np.arange(V, dtype=np.int64), K)
        res = own(rec, np.tile(starts, V), np.tile(stops, V), tix, table, banks, per_bg, refresh, threads)
    elif V == 1:        # one timing (the tuner's path): each stream once, by the one-variant loop
        res = time_streams(rec, starts, stops, np.zeros(K, np.int64), table, banks, per_bg, refresh, threads)
    else:
        # a stream's result depends only on its records and the timing rows they read: equal streams (the
        # q / k / v projections of a layer, channels that run alike) are timed once; each distinct stream
        # runs under its distinct variants (`time_streams_sweep`: variants equal on the rows it reads are one
        # run) all at once (its records decoded once per block of variants)
        first, inv = _distinct_streams(rec, starts, stops)
        res = time_streams_sweep(rec, starts[first], stops[first], table, banks, per_bg, refresh, threads)
        # [V, U, ...] -> [V * K, ...], each stream given its distinct run
        res = {k: v[:, inv].reshape((V * K,) + v.shape[2:]) for k, v in res.items()}
    out = {"buckets": np.zeros((V, P, S, 5), np.float32), "end": np.zeros((V, P, S), np.float32),
           "counts": np.zeros((V, P, S, 8), np.float32)}
    resident = np.zeros((V, P, S), np.float32)
    if K:
        prog, stream = np.array([w[0] for w in who]), np.array([w[2] for w in who])
        is_rec = np.array([w[1] == "rec" for w in who])
        r = {k: v.reshape((V, K) + v.shape[1:]) for k, v in res.items()}
        for k in out:
            out[k][:, prog[is_rec], stream[is_rec]] = r[k][:, is_rec]
        resident[:, prog[~is_rec], stream[~is_rec]] = r["buckets"][:, ~is_rec, 4]
    return out, resident


def _native_reports(programs: list[Program], t: dict, backend: Backend, refresh: bool,
                    threads: int | None = None, include_resident: bool = False) -> CycleReport:
    """CycleReports [P] of P programs under one timing, by the native engine."""
    from .native import timing_table
    out, resident = _native_outputs(programs, timing_table(t), backend, refresh, threads, include_resident)
    scalars = [_program_scalars(p, include_resident) for p in programs]
    return _combine_chunks(scalars, jax.tree.map(lambda x: x[0], out), resident[0], t, backend)


def sweep(programs, timings: Timing, backend: Backend, *, mesh=None, refresh: bool = True,
          engine: str | None = None) -> CycleReport:
    """Time programs under a batch of timing variants: fields [T, P].

    programs: a Program or a list of them (padded to one length).
    timings:  a `Timing` whose leaves have a leading [T] axis (see
              `pimjax.hw.stack_variants`).
    mesh:     optional `jax.sharding.Mesh` with one axis; the timing batch is
              sharded over its devices (multi-device / multi-host JAX) and
              timed by the scan engine, which runs on every JAX device.
    engine:   without a mesh, "native" (default DEFAULT_ENGINE: every
              (variant, stream) pair timed by the compiled event loop) or
              "scan" (one vmapped lax.scan over the variants).
    """
    progs = programs if isinstance(programs, (list, tuple)) else [programs]
    check_programs(progs, backend)
    if _own_model(backend):
        own = family_of(backend).sweep
        where = f"{own.__module__}.{own.__name__}" if own is not None else "pimjax.backends.family_of(backend).sweep"
        raise ValueError(f"{backend.name} has its own time model, whose variants are whole backends: use "
                         f"{where}(program, stack_variants([backend, ...]))")
    check_banks(progs, backend)
    t = timing_vector(check_timing_batch(timings))       # one leading [T] axis on every leaf
    if mesh is not None:
        if engine not in (None, "scan"):
            raise ValueError(f"a sweep over a device mesh runs on the scan engine (engine='scan' or None), got "
                             f"engine={engine!r}; the native engine runs on this host's cores (mesh=None)")
        engine = "scan"
    if resolve_engine(engine) == "native" or (mesh is None and _controller(backend) is not None):
        from .native import timing_table
        out, resident = _native_outputs(progs, timing_table(t), backend, refresh)
        T, P = out["end"].shape[:2]
        flat = lambda x: x.reshape((T * P,) + x.shape[2:])          # noqa: E731  [T, P] -> [T * P]
        scal = [_program_scalars(p) for p in progs]
        scal = {k: np.tile(np.stack([a[k] for a in scal]), (T,) + (1,) * (np.ndim(scal[0][k]))) for k in SCALARS}
        rep = _combine_chunks(scal, jax.tree.map(flat, out), flat(resident),
                              {k: np.repeat(np.asarray(v), P) for k, v in t.items()}, backend)
        rep = jax.tree.map(lambda x: x.reshape((T, P) + x.shape[1:]), rep)
        return rep if isinstance(programs, (list, tuple)) else jax.tree.map(lambda x: x[:, 0], rep)
    arrs = [program_arrays(p) for p in progs]
    arr = pad_arrays(arrs)
    if mesh is not None:
        from jax.sharding import NamedSharding, PartitionSpec
        if len(mesh.axis_names) != 1:
            raise ValueError(f"sweep shards the variants over a mesh of one axis; got axes {mesh.axis_names} "
                             "(jax.make_mesh((n,), ('variants',)))")
        axis = mesh.axis_names[0]
        n = len(mesh.devices.flat)
        T = next(iter(t.values())).shape[0]
        if T % n:
            raise ValueError(f"{T} timing variants do not divide over {n} devices")
        sh = NamedSharding(mesh, PartitionSpec(axis))
        t = {k: jax.device_put(v, sh) for k, v in t.items()}
    out = _time_sweep(arr, t, backend.energy, backend.system.host, _geo(backend, refresh, arrs))
    if not isinstance(programs, (list, tuple)):
        out = jax.tree.map(lambda x: x[:, 0], out)
    return out

