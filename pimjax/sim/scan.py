"""The scan engine: a `jax.lax.scan` over the command records of each group's stream
(`scan_lanes`: many streams side by side as the lanes of one scan, several back to back in a
lane) carrying per-bank state (open row, ACT time, earliest precharge, ready time), per-bank-group
and per-group command state, the tFAW window of four activations and the refresh deadline.

The semantics are in `timing.py`, the DRAM timing constraints in the rule table `hw.dram_rules`
(whose compiled latencies the step reads); `reference.py` applies that table, slowly and
obviously, in a loop, and `native.py` is the compiled (numba) engine for the same records.
Timing parameters are array leaves of `Timing` and may differ per lane, which is how
`cycles.sweep` times many variants in one scan.  `cycles.py` holds the entry points.
"""
from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from ..hw.core import Timing
from ..hw.dram_phases import (
    ACT_AFTER_ACT,
    ACT_AFTER_ACT_BG,
    ACT_AFTER_ACT_CH,
    ACT_AFTER_PRE,
    ACT_AFTER_REF,
    ACT_WINDOW,
    ACTAB_AFTER_BUF,
    ACTAB_AFTER_COL,
    END_AB,
    END_ACTAB,
    END_PREA,
    END_RD,
    END_SIDE,
    END_WR,
    FIXED_AFTER_COL,
    GAP_AB,
    GAP_AB_L,
    GAP_AB_S,
    GAP_L,
    GAP_S,
    PRE_AFTER_ACT,
    PRE_AFTER_RD,
    PRE_AFTER_WR,
    PREA_AFTER_COL,
    PREALL_AFTER_AB,
    RD_AFTER_ACT,
    RD_AFTER_WR_L,
    RD_AFTER_WR_S,
    REF_AFTER_PREREF,
    REF_FIRST,
    REF_INTERVAL,
    REF_WAVE,
    SIDE_AFTER_SIDE,
    SIDE_AFTER_SIDE_BG,
    SPACE_AB,
    SPACE_L,
    SPACE_S,
    WR_AFTER_ACT,
    WR_AFTER_RD,
)
from ..hw.dram_rules import CHAIN, N_LAT, NEVER, compile_chains, compile_rules
from ..lower.program import Phase
from .timing import (
    ACT_ALL,
    ALLBANK,
    BARRIER,
    BUFFER,
    CLASS_TABLE,
    COLUMN,
    DATA_BUS,
    FIXED,
    N_FLAGS,
    PRE_ALL,
    SIDE,
    STAGGER,
    STREAM,
    WAIT,
    WRITE,
)

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
    """`scan_lanes` of one stream: rec SCAN_FIELDS int arrays [R], t timing
    scalars (cycles).  Returns buckets [5] (cycles per report bucket), end []
    (cycles) and counts [8] (commands).

    The records are padded to the next power of two (at least 16) with
    records of no stream (sid -1, which `scan_lanes` drops from every sum)
    and timed by one compiled scan per length bucket: a test or a notebook
    that times many short streams one by one would otherwise trace and
    compile a new scan for every call (1-3 s each on the CPU)."""
    R = int(np.shape(rec["op"])[0])
    L = max(16, 1 << max(R - 1, 0).bit_length())
    padded = {k: jnp.pad(jnp.asarray(v, jnp.int32), (0, L - R)) for k, v in rec.items()}
    sid = jnp.where(jnp.arange(L) < R, 0, -1).astype(jnp.int32)
    return _scan_one(padded, sid, t, banks, banks_per_bg, refresh, tuple(features))


@partial(jax.jit, static_argnames=("banks", "banks_per_bg", "refresh", "features"))
def _scan_one(rec: dict, sid: jnp.ndarray, t: dict, banks: int, banks_per_bg: int, refresh: bool,
              features: tuple[str, ...]) -> dict:
    """`scan_lanes` of one padded stream (see `scan_stream`)."""
    lanes = {k: v[None] for k, v in rec.items()} | {"sid": sid[None]}
    out = scan_lanes(lanes, t, banks, banks_per_bg, refresh, features, n_streams=1)
    return jax.tree.map(lambda v: v[0], out)
