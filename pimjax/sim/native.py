"""The native engine of the cycle model: the timing semantics of
`timing.py` as one compiled event loop per record stream (numba), on the
host's cores.

Why a second engine.  The `lax.scan` of `scan.scan_lanes` is the
vectorised JAX model: it runs wherever JAX runs (an accelerator, a mesh of
devices) and `vmap`s over timing variants.  On XLA:CPU each scan step is a
chain of ~30 small fusions with a floor of ~3 us whatever the lane count
(benchmarks/README.md, measured over several sessions), and a stream is a
serial chain of steps: the scan cannot go below ~3 us per record of the
longest stream.  A record here costs tens of nanoseconds, so the same
semantics run 10-50x faster on the CPU -- what the tuner, the labeller, the
exhaustive search and CPU sweeps need.  Both engines time the same
streams of a Program's records (steady state and resident placement) and
feed the same `_combine` (per-program breakdown, energy, bound); tests hold
both to the reference model (`reference.py`) to the cycle.

Times are float64 here (the scan's are float32), so fractional swept
timings do not drift; with integer timings the two engines agree exactly.

Every latency comes from the DRAM rule table (`hw.dram_rules`), compiled
by `timing_table` into one float64 [N_LAT, CHAIN] table per timing variant
and indexed by the phases' reads (`hw.dram_phases`: PRE_AFTER_ACT, GAP_L,
ACT_WINDOW, ..., each the index of the rule it resolves to); the few
latencies this loop added term by term when it wrote the rules out
(read -> write, write -> read, a column's completion) it still adds term by
term from their chains, so every result rounds as before.  The loop follows
`reference.simulate` rule by rule, with the bank objects as arrays: per bank the open row, last ACT / read / write and ready time;
per bank group the last ACT and last data-movement command; the tFAW window
of the last four ACTs; and the channel scalars.

Many timing variants at once are `native_variants.py`'s (what `cycles.sweep` uses for V > 1
rows).
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit

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
    WR_AFTER_ACT,
    WR_AFTER_RD,
    column_gap,
    column_spacing,
)
from ..hw.dram_rules import CHAIN, CHAIN_LEN, N_LAT, NEVER, PARAMS, compile_chains
from ..lower.inline_njit import njit_phases
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
    PRE_ALL,
    SIDE,
    STAGGER,
    STREAM,
    WAIT,
    WRITE,
)

# record fields, rows of the [8, M] record table
RECORD_FIELDS = ("op", "bank", "row", "n", "phase", "resident", "pre", "sync")
READBACK, REARRANGE = int(Phase.READBACK), int(Phase.REARRANGE)     # module constants: numba folds them


# terms of the chains the loop adds one by one (module constants: numba folds them; the two
# write -> read turnarounds have one length)
N_RTW, N_WTR = CHAIN_LEN[WR_AFTER_RD], CHAIN_LEN[RD_AFTER_WR_L]
N_RD_END, N_WR_END = CHAIN_LEN[END_RD], CHAIN_LEN[END_WR]
assert CHAIN_LEN[RD_AFTER_WR_S] == N_WTR


@njit(nogil=True, cache=True, inline="always")
def _after(x, chains, k, n):
    """x + chains[k, 0] + ... + chains[k, n - 1], left to right (rule k's
    latency added term by term, rounding as the rule written out would; no
    array view, which would cost a reference count in the loop)."""
    for j in range(n):
        x += chains[k, j]
    return x


@njit(nogil=True, cache=True, inline="always")
def record_bucket(rec, i):
    """The report bucket record i's time goes to: resident placement,
    leading rearrangement, read-back, rearrangement, compute."""
    if rec[5, i] == 1:
        return 4
    if rec[6, i] == 1:
        return 0
    if rec[4, i] == READBACK:
        return 3
    if rec[4, i] == REARRANGE:
        return 1
    return 2


@njit(nogil=True, cache=True, inline="always")
def record_kind(rec, i, cls):
    """What both loops decode of record i first: (opcode, its count n as a
    float, whether it is a column, a write, an all-bank record)."""
    op = rec[0, i]
    return op, float(rec[3, i]), cls[op, COLUMN] == 1, cls[op, WRITE] == 1, cls[op, ALLBANK] == 1


@njit(nogil=True, cache=True, inline="always")
def record_counts(cls, op, n, is_col, write, allbank, counts):
    """The commands a record adds whatever the timing, into counts [8]:
    columns read [1], written [2], all-bank [3]; data-bus transfers [5];
    commands [6] (n for columns and side records, else one; none for a
    barrier)."""
    if is_col:
        counts[3 if allbank else (2 if write else 1)] += n
    if cls[op, DATA_BUS] == 1:
        counts[5] += n
    if cls[op, BARRIER] != 1:
        counts[6] += n if (is_col or cls[op, SIDE] == 1) else 1.0


@njit(nogil=True, cache=True, inline="always")
def _pre_ready(t, b_act, b_rd, b_wr, b):
    """Phase row open: when bank b may be precharged (tRAS after its ACT,
    tRTP after its last read, the write recovery after its last write)."""
    return max(b_act[b] + t[PRE_AFTER_ACT], b_rd[b] + t[PRE_AFTER_RD], b_wr[b] + t[PRE_AFTER_WR])


@njit(nogil=True, cache=True, inline="always")
def _oldest(faw):
    """The oldest of the last four ACTs (the tFAW window's slot to replace)."""
    k = 0
    for j in range(1, 4):
        if faw[j] < faw[k]:
            k = j
    return k


@njit(nogil=True, cache=True, inline="always")
def _activation(t, ready, b_act, bg_act, last_act, faw, b, bg, k):
    """Phase row open: an ACT of bank b no earlier than `ready`, tRC after
    its last ACT, tRRD after the bank group's / channel's, in the window."""
    return max(ready, b_act[b] + t[ACT_AFTER_ACT], bg_act[bg] + t[ACT_AFTER_ACT_BG], last_act + t[ACT_AFTER_ACT_CH],
               faw[k] + t[ACT_WINDOW])


@njit(nogil=True, cache=True, inline="always")
def _column_end(t, chains, t_last, allbank, write):
    """Phase end of a column record: its data back / in, or its slot."""
    if allbank:
        return t_last + t[END_AB]
    if write:
        return _after(t_last, chains, END_WR, N_WR_END)
    return _after(t_last, chains, END_RD, N_RD_END)


@njit(nogil=True, cache=True, inline="always")
def _refresh(t, rec, i, cls, op, banks, per_bg, open_row, b_act, b_rd, b_wr, b_ready, bg_act, faw, last_act, last_col,
             last_allbank, ref_end, next_ref, t_end, wr_pre, is_col, allbank, counts):
    """Phase refresh of `_stream`, due before record i (t_end >= next_ref):
    every open bank precharged (like PREA: tRTP_L after an all-bank MAC),
    all banks busy for tRP + tRFC.  Returns (next_ref, ref_end)."""
    start = next_ref
    if last_allbank:
        start = max(start, last_col + t[PREALL_AFTER_AB])
    for b in range(banks):
        if open_row[b] >= 0:
            start = max(start, b_act[b] + t[PRE_AFTER_ACT], b_rd[b] + t[PRE_AFTER_RD], b_wr[b] + wr_pre)
    # a due refresh waits past a wave of fresh activations: a single-bank record whose ACT
    # can issue within tREFW of the last ACT and before every open bank may be precharged
    # (the controller keeps issuing while the refresh waits for its PREs; timing.py, 1)
    b0 = min(max(rec[1, i], 0), banks - 1)
    row0 = rec[2, i]
    if is_col and not allbank and row0 >= 0 and open_row[b0] != row0:
        if open_row[b0] >= 0:
            ready0 = _pre_ready(t, b_act, b_rd, b_wr, b0) + t[ACT_AFTER_PRE]
        else:
            ready0 = b_ready[b0]
        ready0 = max(ready0, ref_end, 0.0)
        if cls[op, WAIT] == 1 or rec[7, i] == 1:
            ready0 = max(ready0, t_end)
        act0 = _activation(t, ready0, b_act, bg_act, last_act, faw, b0, b0 // per_bg, _oldest(faw))
        if act0 < min(start, last_act + t[REF_WAVE]):
            return next_ref, ref_end
    end_ref = start + t[REF_AFTER_PREREF] + t[ACT_AFTER_REF]
    for b in range(banks):
        open_row[b] = -1
        b_ready[b] = max(b_ready[b], end_ref)
    missed = np.floor((t_end - next_ref) / t[REF_INTERVAL])
    counts[4] += 1.0
    return next_ref + t[REF_INTERVAL] * (1.0 + missed), end_ref


@njit(nogil=True, cache=True, inline="always")
def _row_open(t, open_row, b_act, b_rd, b_wr, b_ready, bg_act, faw, last_act, b, bg, row, floor_t, per_bank, counts):
    """Phase row open of `_stream`: the implicit PRE (if another row is
    open) and ACT of row `row` in bank b for a column record; per_bank: the
    banks it stands for.  Returns the channel's last ACT."""
    if open_row[b] >= 0:
        ready = _pre_ready(t, b_act, b_rd, b_wr, b) + t[ACT_AFTER_PRE]
        counts[7] += per_bank
    else:
        ready = b_ready[b]
    ready = max(ready, floor_t)
    k = _oldest(faw)
    t_act = _activation(t, ready, b_act, bg_act, last_act, faw, b, bg, k)
    open_row[b] = row
    b_act[b] = t_act
    bg_act[bg] = t_act
    last_act = max(last_act, t_act)
    faw[k] = t_act
    counts[0] += per_bank
    return last_act


@njit(nogil=True, cache=True, inline="always")
def _column(t, chains, cls, op, n, b_act, b, bg, write, allbank, need, floor_t, t_end, t_bar, last_col, last_rd,
            last_wr, last_col_bg, last_wr_bg, last_allbank):
    """Phase column of `_stream`: the first column (tRCD after the ACT, the
    gap after the last column, the read / write turnaround, in order), then
    n columns `spacing` apart; and phase end.  Returns (the last column's
    time, the record's end)."""
    rcd = t[WR_AFTER_ACT] if write else t[RD_AFTER_ACT]
    col_ready = b_act[b] + rcd if need else max(b_act[b] + rcd, floor_t)
    gap = t[column_gap(last_allbank, allbank, bg == last_col_bg)]
    t0 = max(col_ready, last_col + gap)
    if write:
        t0 = max(t0, _after(last_rd, chains, WR_AFTER_RD, N_RTW))
    else:
        wtr = RD_AFTER_WR_L if bg == last_wr_bg else RD_AFTER_WR_S
        t0 = max(t0, _after(last_wr, chains, wtr, N_WTR))
    if cls[op, WAIT] == 1:
        t0 = max(t0, t_end)
    t0 = max(t0, t_bar)
    spacing = t[column_spacing(allbank, cls[op, STREAM] == 1)]
    t_last = t0 + (n - 1.0) * spacing
    return t_last, _column_end(t, chains, t_last, allbank, write)


@njit(nogil=True, cache=True, inline="always")
def _side(t, cls, op, n, bg, side_bg, last_side, floor_t, t_end, t_bar):
    """Phase side of `_stream`: a record of AttAcc's data-movement datapath
    (one record = one bank group), fixed-latency or n transfers; and phase
    end.  Returns (the record's end, its last transfer)."""
    gap = t[SIDE_AFTER_SIDE]
    s0 = max(max(last_side + gap, floor_t), max(side_bg[bg] + t[SIDE_AFTER_SIDE_BG], t_bar))
    if cls[op, WAIT] == 1:
        s0 = max(s0, t_end)
    if cls[op, FIXED] == 1:
        end = s0 + n
        last_side = s0 + n - gap
    else:
        last_side = s0 + (n - 1.0) * max(gap, t[SIDE_AFTER_SIDE_BG])     # one record = one bank group
        end = last_side + t[END_SIDE]
    side_bg[bg] = last_side
    return end, last_side


@njit(nogil=True, cache=True, inline="always")
def _act_all(t, cls, op, banks, n_bg, row, open_row, b_act, b_rd, b_wr, b_ready, floor_t, last_arr, last_buf, counts):
    """Phase all-bank of `_stream`, ACTAB: row `row` opened in every bank;
    and phase end.  Returns the record's end."""
    # after the last column [COL_ORDER], the last GWRITE's only under ACTAB_AFTER_BUF
    t_act = max(floor_t, max(last_arr + t[ACTAB_AFTER_COL], last_buf + t[ACTAB_AFTER_BUF]))
    for b in range(banks):
        ready = _pre_ready(t, b_act, b_rd, b_wr, b) + t[ACT_AFTER_PRE] if open_row[b] >= 0 else b_ready[b]
        t_act = max(t_act, ready, b_act[b] + t[ACT_AFTER_ACT])
    if cls[op, STAGGER] == 1:          # one activation per bank group, tFAW apart
        t_act += (n_bg - 1) * t[ACT_WINDOW]
    for b in range(banks):
        open_row[b] = row
        b_act[b] = t_act
    counts[0] += float(banks)
    return t_act + t[END_ACTAB]


@njit(nogil=True, cache=True, inline="always")
def _pre_all(t, banks, open_row, b_act, b_rd, b_wr, b_ready, floor_t, last_col, last_allbank, wr_pre, counts):
    """Phase all-bank of `_stream`, PREA: every open bank precharged; and
    phase end.  Returns the record's end."""
    # in order after the last column [PREA_AFTER_COL: 0]; tRTP_L after an all-bank one (>= 0)
    t_pre = max(floor_t, last_col + (t[PREALL_AFTER_AB] if last_allbank else t[PREA_AFTER_COL]))
    for b in range(banks):
        if open_row[b] >= 0:
            t_pre = max(t_pre, b_act[b] + t[PRE_AFTER_ACT], b_rd[b] + t[PRE_AFTER_RD], b_wr[b] + wr_pre)
    for b in range(banks):
        open_row[b] = -1
        b_ready[b] = t_pre + t[ACT_AFTER_PRE]
    counts[7] += float(banks)
    return t_pre + t[END_PREA]


@njit_phases(nogil=True, cache=True)
def _stream(rec, lo, hi, t, chains, cls, banks, per_bg, refresh, buckets, counts):
    """Time records lo:hi of `rec` ([8, M] int32, RECORD_FIELDS) with the
    latencies t [N_LAT] and their chains [N_LAT, CHAIN] (`dram_rules.compile_chains`,
    cycles), read through the phases' rule indices (`hw.dram_phases`).  Adds the time of each record to
    buckets [5] and the commands to counts [8]; returns the end time.  Each
    phase is a helper inlined here (`njit_phases`: the code compiled is the
    loop written out); the comments number them as `hw.dram_phases.PHASES`
    (1 refresh, 2 row open, 3 column, 4 all-bank, 5 side, 6 end)."""
    n_bg = max(1, banks // per_bg)
    open_row = np.full(banks, -1, np.int64)
    b_act = np.full(banks, NEVER)
    b_rd = np.full(banks, NEVER)
    b_wr = np.full(banks, NEVER)
    b_ready = np.zeros(banks)
    bg_act = np.full(n_bg, NEVER)
    side_bg = np.full(n_bg, NEVER)
    faw = np.full(4, NEVER)
    last_act = last_col = last_rd = last_wr = last_side = t_issue = t_bar = ref_end = NEVER
    last_arr = last_buf = NEVER          # the latest bank-array column / global-buffer write (BUFWR)
    last_col_bg = last_wr_bg = -1
    last_allbank = False
    t_end = 0.0
    next_ref = t[REF_FIRST] if t[REF_FIRST] > 0 else t[REF_INTERVAL]
    wr_pre = t[PRE_AFTER_WR]
    for i in range(lo, hi):
        if rec[3, i] <= 0:
            continue
        op, n, is_col, write, allbank = record_kind(rec, i, cls)

        # 1. refresh between records
        if refresh and t_end >= next_ref:
            next_ref, ref_end = _refresh(t, rec, i, cls, op, banks, per_bg, open_row, b_act, b_rd, b_wr, b_ready,
                                         bg_act, faw, last_act, last_col, last_allbank, ref_end, next_ref, t_end,
                                         wr_pre, is_col, allbank, counts)
        floor_t = max(0.0, ref_end)      # commands issue in order
        if cls[op, WAIT] == 1 or rec[7, i] == 1:
            floor_t = max(floor_t, t_end)

        end = t_end
        if is_col:
            b = min(max(rec[1, i], 0), banks - 1)
            bg = b // per_bg
            row = rec[2, i]
            # 2. open the row if needed (row < 0: a buffer access opens none)
            need = row >= 0 and open_row[b] != row
            if need:
                per_bank = float(banks) if allbank else 1.0
                last_act = _row_open(t, open_row, b_act, b_rd, b_wr, b_ready, bg_act, faw, last_act, b, bg, row,
                                     floor_t, per_bank, counts)
            # 3. the first column, then n columns `spacing` apart; 6. its end
            t_last, end = _column(t, chains, cls, op, n, b_act, b, bg, write, allbank, need, floor_t, t_end, t_bar,
                                  last_col, last_rd, last_wr, last_col_bg, last_wr_bg, last_allbank)
            if write:
                b_wr[b] = t_last
                last_wr = t_last
                last_wr_bg = bg
            else:
                b_rd[b] = t_last
                last_rd = t_last
            last_col = t_last
            if cls[op, BUFFER] == 1:
                last_buf = t_last
            else:
                last_arr = t_last
            last_col_bg = bg
            last_allbank = allbank
            t_issue = max(t_issue, t_last)
        elif cls[op, SIDE] == 1:
            # 5. side
            end, last_side = _side(t, cls, op, n, min(max(rec[1, i], 0), banks - 1) // per_bg, side_bg, last_side,
                                   floor_t, t_end, t_bar)
            t_issue = max(t_issue, last_side)
        elif cls[op, FIXED] == 1:
            f0 = max(max(last_col + t[FIXED_AFTER_COL], t_end), max(floor_t, t_bar))
            end = f0 + n
            t_issue = max(t_issue, f0 + n - 1.0)
        elif cls[op, BARRIER] == 1:
            t_bar = max(t_bar, t_issue + 1.0)
        elif cls[op, ACT_ALL] == 1:
            # 4. all-bank
            end = _act_all(t, cls, op, banks, n_bg, rec[2, i], open_row, b_act, b_rd, b_wr, b_ready, floor_t,
                           last_arr, last_buf, counts)
        elif cls[op, PRE_ALL] == 1:
            end = _pre_all(t, banks, open_row, b_act, b_rd, b_wr, b_ready, floor_t, last_col, last_allbank, wr_pre,
                           counts)

        # 6. the time the record adds goes to its report bucket
        buckets[record_bucket(rec, i)] += max(end - t_end, 0.0)
        t_end = max(t_end, end)
        record_counts(cls, op, n, is_col, write, allbank, counts)
    return t_end


@njit(nogil=True, cache=True)
def _streams(rec, starts, stops, tix, table, chains, cls, banks, per_bg, refresh, buckets, end, counts):
    """`_stream` of every stream s = records starts[s]:stops[s] of `rec`
    under latencies table[tix[s]] and chains[tix[s]]; results into buckets [S, 5], end [S],
    counts [S, 8]."""
    for s in range(starts.shape[0]):
        end[s] = _stream(rec, starts[s], stops[s], table[tix[s]], chains[tix[s]], cls, banks, per_bg, refresh,
                         buckets[s], counts[s])


@njit(nogil=True, cache=True)
def pack_program(out, off, op, bank, row, n, phase, resident, sync, include_resident, split):
    """Write one program's record streams (fields [S, R], any strides) into
    the record table `out` ([8, M] int32, RECORD_FIELDS) at columns
    off : off + S * R, stream after stream; with `split` also its resident
    placement at the next S * R columns (n kept only on resident records,
    which the steady state drops).  One pass: `pre` marks the records
    before the first live record that is neither rearrangement nor dropped
    resident placement.  (`cycles._pack_numpy` is the same in numpy.)"""
    S, R = op.shape
    for s in range(S):
        seen = False
        for r in range(R):
            c = off + s * R + r
            res = resident[s, r] == 1
            live = n[s, r]
            if phase[s, r] != REARRANGE and live > 0 and (include_resident or not res):
                seen = True
            out[0, c] = op[s, r]
            out[1, c] = bank[s, r]
            out[2, c] = row[s, r]
            out[3, c] = 0 if (split and res) else live
            out[4, c] = phase[s, r]
            out[5, c] = 0 if include_resident else (1 if res else 0)
            out[6, c] = 0 if seen else 1
            out[7, c] = sync[s, r]
            if split:
                c2 = c + S * R
                for f in range(8):
                    out[f, c2] = out[f, c]
                out[3, c2] = live if res else 0


THREADS = max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)))
"""Threads that time streams at once (the loop releases the GIL)."""


def timing_table(t: dict) -> np.ndarray:
    """[V, N_LAT, CHAIN] float64 latency chains (`dram_rules.compile_chains`)
    from `scan.timing_vector`-style leaves (scalars, or [V] arrays for V
    variants)."""
    leaves = {f: np.atleast_1d(np.asarray(t[f], np.float64)) for f in PARAMS}
    if max(v.size for v in leaves.values()) > 16:       # a sweep: compiled each time, not kept
        return np.ascontiguousarray(compile_chains(leaves).reshape(-1, N_LAT, CHAIN))
    key = tuple((f, v.shape, v.tobytes()) for f, v in leaves.items())
    table = _TABLES.get(key)
    if table is None:                   # compiled once per timing (the tuner times one backend many times)
        if len(_TABLES) >= 64:
            _TABLES.clear()
        table = _TABLES[key] = np.ascontiguousarray(compile_chains(leaves).reshape(-1, N_LAT, CHAIN))
        table.setflags(write=False)
    return table


_TABLES: dict = {}


def checked_chains(table, who: str, min_rows: int = 0) -> np.ndarray:
    """table as contiguous float64 [V, N_LAT, CHAIN] latency chains
    (`timing_table`), V >= min_rows; else a ValueError naming `who`."""
    chains = np.ascontiguousarray(table, np.float64)
    if chains.ndim != 3 or chains.shape[1:] != (N_LAT, CHAIN) or chains.shape[0] < min_rows:
        raise ValueError(f"{who}: table [V, {N_LAT}, {CHAIN}] expected (`timing_table`), got {chains.shape}")
    return chains


def latencies(chains: np.ndarray) -> np.ndarray:
    """[..., N_LAT] each rule's latency: its chain [..., N_LAT, CHAIN] summed
    in order (the order the loops' `_after` adds a chain's terms in)."""
    lat = chains[..., 0]
    for j in range(1, CHAIN):
        lat = lat + chains[..., j]
    return lat


def time_streams(rec: np.ndarray, starts: np.ndarray, stops: np.ndarray, tix: np.ndarray, table: np.ndarray,
                 banks: int, per_bg: int, refresh: bool, threads: int | None = None) -> dict:
    """Time S record streams.

    rec:    [8, M] int32 records (rows RECORD_FIELDS), streams side by side;
    starts, stops: [S] int64, stream s is rec[:, starts[s]:stops[s]];
    tix:    [S] int64, stream s runs under timing row table[tix[s]];
    table:  [V, N_LAT, CHAIN] float64 latency chains (`timing_table`), cycles.
    Returns {"buckets": [S, 5], "end": [S], "counts": [S, 8]} float64, as
    `scan.scan_lanes` (buckets: leading rearrangement, rearrangement in
    the kernel, compute, read-back, resident placement).  Streams are dealt
    to `threads` threads (default THREADS) in contiguous slices of about
    equal record counts."""
    rec = np.ascontiguousarray(rec, np.int32)
    starts, stops, tix = (np.ascontiguousarray(a, np.int64) for a in (starts, stops, tix))
    chains = checked_chains(table, "time_streams")
    table = latencies(chains)
    S = starts.shape[0]
    if rec.shape[0] != len(RECORD_FIELDS) or stops.shape != (S,) or tix.shape != (S,):
        raise ValueError(f"time_streams: rec [{len(RECORD_FIELDS)}, M] and starts / stops / tix [S] expected, "
                         f"got {rec.shape}, {starts.shape}, {stops.shape}, {tix.shape}")
    # the loop is compiled without bounds checks: a bad index would read past the arrays
    if S and (starts.min() < 0 or (stops < starts).any() or stops.max() > rec.shape[1]):
        raise ValueError(f"time_streams: streams must lie in the {rec.shape[1]} records (0 <= start <= stop)")
    if S and (tix.min() < 0 or tix.max() >= table.shape[0]):
        raise ValueError(f"time_streams: timing rows 0..{table.shape[0] - 1}, got {tix.min()}..{tix.max()}")
    buckets, end, counts = np.zeros((S, 5)), np.zeros(S), np.zeros((S, 8))
    cls = np.ascontiguousarray(CLASS_TABLE, np.int32)

    def part(a, b):
        _streams(rec, starts[a:b], stops[a:b], tix[a:b], table, chains, cls, banks, per_bg, bool(refresh),
                 buckets[a:b], end[a:b], counts[a:b])
    in_threads(part, np.cumsum(stops - starts), threads)
    return {"buckets": buckets, "end": end, "counts": counts}


def in_threads(part, work: np.ndarray, threads: int | None = None, min_parallel: int = 20_000) -> None:
    """part(a, b) over items a:b of n (work [n]: the items' cumulative work):
    once over all of them with one thread, fewer than two items or less work
    than `min_parallel` (a thread pool would cost more than it saves); else
    over contiguous slices of about equal work on `threads` threads (default
    THREADS), the loops releasing the GIL."""
    n = len(work)
    threads = THREADS if threads is None else max(1, int(threads))
    total = int(work[-1]) if n else 0
    if threads == 1 or n < 2 or total < min_parallel:
        part(0, n)
        return
    cuts = np.unique(np.searchsorted(work, np.arange(1, threads) * total / threads))
    edges = [0, *[int(c) for c in cuts if 0 < c < n], n]
    with ThreadPoolExecutor(len(edges) - 1) as pool:
        list(pool.map(lambda k: part(edges[k], edges[k + 1]), range(len(edges) - 1)))



