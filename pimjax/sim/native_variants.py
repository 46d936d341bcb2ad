"""The native engine for many timing variants of the same streams at once (a sweep's V rows):
`native.py`'s `_stream` with every piece of state that depends on the timing given a trailing
axis of W variants.

Many timing variants at once (`time_streams_variants`, what `cycles.sweep`
uses for V > 1 rows).  A sweep times the same streams under V timings;
`_stream` per (stream, variant) pair decodes every record V times.
`_stream_v` advances a block of W = BLOCK variants of one stream together,
record by record: the record is decoded once (op, class flags, bank, row,
n, its report bucket, which rule spaces its columns -- all set by the
records alone, as are the last column's bank group and kind), then an
inner loop over the variants advances each one's state, laid out
struct-of-arrays with the variant axis last ([banks, W] per-bank tables,
[W] channel scalars, latencies [N_LAT, W]) so that the inner loop reads
contiguously.  What depends on the timing stays per variant, control flow
included: a refresh falls at a time that depends on the timing, closes the
rows then, and so decides which later records open a row in that variant
(the refresh itself, `_refresh_v`, runs only for the variants it is due
in).  The all-bank commands (ACTAB, PREA) pass over the banks with
the variants inner.  Every variant performs `_stream`'s float operations in
`_stream`'s order, so the results are bit-identical (the tests compare the
two loops on random streams and timing tables and on lowered programs).
The one-variant path (`time_streams`, the tuner's) is unchanged.
"""
from __future__ import annotations

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
    GAP_AB,
    GAP_AB_L,
    GAP_AB_S,
    GAP_L,
    GAP_S,
    PHASE_ROWS,
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
    column_gap,
    column_spacing,
)
from ..hw.dram_rules import CHAIN, N_LAT, NEVER
from ..lower.inline_njit import njit_phases
from .native import (
    N_RD_END,
    N_RTW,
    N_WR_END,
    N_WTR,
    RECORD_FIELDS,
    checked_chains,
    in_threads,
    latencies,
    record_bucket,
    record_counts,
    record_kind,
)
from .timing import (
    ACT_ALL,
    BARRIER,
    BUFFER,
    CLASS_TABLE,
    COLUMN,
    FIXED,
    PRE_ALL,
    SIDE,
    STAGGER,
    STREAM,
    WAIT,
    WRITE,
)

# ---------------------------------------------------------------------------------------------------------
# Many timing variants of one stream at once (a sweep's V rows): `_stream` with every piece of state that
# depends on the timing given a trailing axis of W variants


@njit(nogil=True, cache=True, inline="always")
def _precharge_ready(t, b_act, b_rd, b_wr, b, v):
    """When bank b of variant v may be precharged (tRAS after its ACT, tRTP
    after its last read, the write recovery after its last write)."""
    return max(b_act[b, v] + t[PRE_AFTER_ACT, v], b_rd[b, v] + t[PRE_AFTER_RD, v], b_wr[b, v] + t[PRE_AFTER_WR, v])


@njit(nogil=True, cache=True, inline="always")
def _refresh_v(v, t, banks, per_bg, open_row, b_act, b_rd, b_wr, b_ready, bg_act, faw, last_act, last_col,
               ref_end, next_ref, t_end, counts, last_allbank, is_col, allbank, row, b, wait):
    """Phase refresh of `_stream` (`_refresh`, when due) for variant v of
    `_stream_v`'s state."""
    start = next_ref[v]
    if last_allbank:
        start = max(start, last_col[v] + t[PREALL_AFTER_AB, v])
    for bb in range(banks):
        if open_row[bb, v] >= 0:
            start = max(start, _precharge_ready(t, b_act, b_rd, b_wr, bb, v))
    # a due refresh waits past a wave of fresh activations (`_stream`, 1)
    if is_col and not allbank and row >= 0 and open_row[b, v] != row:
        if open_row[b, v] >= 0:
            ready0 = _precharge_ready(t, b_act, b_rd, b_wr, b, v) + t[ACT_AFTER_PRE, v]
        else:
            ready0 = b_ready[b, v]
        ready0 = max(ready0, ref_end[v], 0.0)
        if wait:
            ready0 = max(ready0, t_end[v])
        k0 = 0
        for j in range(1, 4):
            if faw[j, v] < faw[k0, v]:
                k0 = j
        act0 = max(ready0, b_act[b, v] + t[ACT_AFTER_ACT, v], bg_act[b // per_bg, v] + t[ACT_AFTER_ACT_BG, v],
                   last_act[v] + t[ACT_AFTER_ACT_CH, v], faw[k0, v] + t[ACT_WINDOW, v])
        if act0 < min(start, last_act[v] + t[REF_WAVE, v]):
            return
    end_ref = start + t[REF_AFTER_PREREF, v] + t[ACT_AFTER_REF, v]
    for bb in range(banks):
        open_row[bb, v] = -1
        b_ready[bb, v] = max(b_ready[bb, v], end_ref)
    missed = np.floor((t_end[v] - next_ref[v]) / t[REF_INTERVAL, v])
    next_ref[v] += t[REF_INTERVAL, v] * (1.0 + missed)
    ref_end[v] = end_ref
    counts[4, v] += 1.0


@njit(nogil=True, cache=True, inline="always")
def _all_bank_v(t, act_all, stagger, W, banks, n_bg, row, wait, last_allbank, kb, open_row, b_act, b_rd, b_wr, b_ready,
                ref_end, last_arr, last_buf, last_col, t_end, tmp, buckets, counts):
    """Phases all-bank and end of `_stream_v`: an ACTAB (act_all) or a PREA
    passes over the banks, banks outer, variants inner (contiguous); each
    variant's max over the banks still in bank order, as `_stream`."""
    for v in range(W):
        f = max(0.0, ref_end[v])
        if wait:
            f = max(f, t_end[v])
        if act_all:         # after the last column [COL_ORDER], the last GWRITE's only under ACTAB_AFTER_BUF
            tmp[v] = max(f, max(last_arr[v] + t[ACTAB_AFTER_COL, v], last_buf[v] + t[ACTAB_AFTER_BUF, v]))
        else:
            tmp[v] = max(f, last_col[v] + (t[PREALL_AFTER_AB, v] if last_allbank else t[PREA_AFTER_COL, v]))
    if act_all:
        for bb in range(banks):
            for v in range(W):
                ready = _precharge_ready(t, b_act, b_rd, b_wr, bb, v) + t[ACT_AFTER_PRE, v]
                ready = ready if open_row[bb, v] >= 0 else b_ready[bb, v]
                tmp[v] = max(tmp[v], ready, b_act[bb, v] + t[ACT_AFTER_ACT, v])
        if stagger:          # one activation per bank group, tFAW apart
            for v in range(W):
                tmp[v] += (n_bg - 1) * t[ACT_WINDOW, v]
        for bb in range(banks):
            for v in range(W):
                open_row[bb, v] = row
                b_act[bb, v] = tmp[v]
    else:
        for bb in range(banks):
            for v in range(W):
                if open_row[bb, v] >= 0:
                    tmp[v] = max(tmp[v], _precharge_ready(t, b_act, b_rd, b_wr, bb, v))
        for bb in range(banks):
            for v in range(W):
                open_row[bb, v] = -1
                b_ready[bb, v] = tmp[v] + t[ACT_AFTER_PRE, v]
    for v in range(W):
        if act_all:
            e = tmp[v] + t[END_ACTAB, v]
            counts[0, v] += float(banks)
        else:
            e = tmp[v] + t[END_PREA, v]
            counts[7, v] += float(banks)
        buckets[kb, v] += max(e - t_end[v], 0.0)
        t_end[v] = max(t_end[v], e)


@njit(nogil=True, cache=True, inline="always")
def _row_open_v(t, v, b, bg, row, f, per_bank, open_row, b_act, b_rd, b_wr, b_ready, bg_act, faw, last_act, counts):
    """Phase row open of `_stream_v` for variant v: the implicit PRE (if
    another row is open) and ACT of row `row` in bank b, no earlier than f.
    Returns the ACT's time."""
    if open_row[b, v] >= 0:
        ready = _precharge_ready(t, b_act, b_rd, b_wr, b, v) + t[ACT_AFTER_PRE, v]
        counts[7, v] += per_bank
    else:
        ready = b_ready[b, v]
    ready = max(ready, f)
    k = 0                                   # the oldest of the last four ACTs
    for j in range(1, 4):
        k = j if faw[j, v] < faw[k, v] else k
    t_act = max(ready, b_act[b, v] + t[ACT_AFTER_ACT, v], bg_act[bg, v] + t[ACT_AFTER_ACT_BG, v],
                last_act[v] + t[ACT_AFTER_ACT_CH, v], faw[k, v] + t[ACT_WINDOW, v])
    open_row[b, v] = row
    b_act[b, v] = t_act
    bg_act[bg, v] = t_act
    last_act[v] = max(last_act[v], t_act)
    faw[k, v] = t_act
    counts[0, v] += per_bank
    return t_act


@njit(nogil=True, cache=True, inline="always")
def _column_v(t, chains, v, b, n, write, allbank, buffer, op_wait, col_ready, te, gap_k, wtr, sp_k, kb, b_rd, b_wr,
              last_col, last_rd, last_wr, last_arr, last_buf, t_issue, t_bar, buckets, t_end):
    """Phases column and end of `_stream_v` for variant v: the first column
    no earlier than col_ready (te: the variant's end so far), then n columns
    `spacing` apart; the record's time into its bucket kb."""
    t0 = max(col_ready, last_col[v] + t[gap_k, v])
    if write:
        x = last_rd[v]
        for j in range(N_RTW):
            x += chains[WR_AFTER_RD, j, v]
    else:
        x = last_wr[v]
        for j in range(N_WTR):
            x += chains[wtr, j, v]
    t0 = max(t0, x)
    if op_wait:
        t0 = max(t0, te)
    t0 = max(t0, t_bar[v])
    t_last = t0 + (n - 1.0) * t[sp_k, v]
    if allbank:
        e = t_last + t[END_AB, v]
    elif write:
        e = t_last
        for j in range(N_WR_END):
            e += chains[END_WR, j, v]
    else:
        e = t_last
        for j in range(N_RD_END):
            e += chains[END_RD, j, v]
    if write:
        b_wr[b, v] = t_last
        last_wr[v] = t_last
    else:
        b_rd[b, v] = t_last
        last_rd[v] = t_last
    last_col[v] = t_last
    if buffer:
        last_buf[v] = t_last
    else:
        last_arr[v] = t_last
    t_issue[v] = max(t_issue[v], t_last)
    buckets[kb, v] += max(e - te, 0.0)
    t_end[v] = max(te, e)


@njit(nogil=True, cache=True, inline="always")
def _side_v(t, W, bg, n, wait, op_wait, fixed, kb, last_side, side_bg, t_issue, t_bar, ref_end, t_end, buckets):
    """Phases side and end of `_stream_v`: a record of the data-movement
    datapath (one record = one bank group), fixed-latency or n transfers."""
    for v in range(W):
        te = t_end[v]
        f = max(0.0, ref_end[v])
        if wait:
            f = max(f, te)
        gap = t[SIDE_AFTER_SIDE, v]
        s0 = max(max(last_side[v] + gap, f), max(side_bg[bg, v] + t[SIDE_AFTER_SIDE_BG, v], t_bar[v]))
        if op_wait:
            s0 = max(s0, te)
        if fixed:
            e = s0 + n
            ls = s0 + n - gap
        else:
            ls = s0 + (n - 1.0) * max(gap, t[SIDE_AFTER_SIDE_BG, v])     # one record = one bank group
            e = ls + t[END_SIDE, v]
        last_side[v] = ls
        side_bg[bg, v] = ls
        t_issue[v] = max(t_issue[v], ls)
        buckets[kb, v] += max(e - te, 0.0)
        t_end[v] = max(te, e)


@njit(nogil=True, cache=True, inline="always")
def _fixed_v(t, W, n, wait, kb, last_col, t_issue, t_bar, ref_end, t_end, buckets):
    """Phases side (a fixed-latency record: n cycles after the last column)
    and end of `_stream_v`."""
    for v in range(W):
        te = t_end[v]
        f = max(0.0, ref_end[v])
        if wait:
            f = max(f, te)
        f0 = max(max(last_col[v] + t[FIXED_AFTER_COL, v], te), max(f, t_bar[v]))
        e = f0 + n
        t_issue[v] = max(t_issue[v], f0 + n - 1.0)
        buckets[kb, v] += max(e - te, 0.0)
        t_end[v] = max(te, e)


@njit_phases(nogil=True, cache=True)
def _stream_v(rec, lo, hi, t, chains, cls, banks, per_bg, refresh, buckets, counts, t_end):
    """`_stream` of records lo:hi of `rec` under W timing variants at once,
    record by record: each record is decoded once (op, class, bank, row, n,
    its bucket, the rule that spaces its columns), then every variant's
    state advances in an inner loop over the variants, each operation as
    `_stream` does it, so every result is bit-identical to W `_stream`
    calls.  The state a refresh touches is per variant (a refresh closes
    the rows at a time that depends on the timing, so which records open a
    row differs by variant); the state only the records set (the last
    column's bank group and kind) is shared.  Each phase is a helper
    inlined here, as in `_stream`.

    t: [N_LAT, W] float64 latencies, chains: [N_LAT, CHAIN, W] their chains
    (the variant axis last: the inner loop reads them contiguously).
    Adds into buckets [5, W] and counts [8, W]; writes the end times into
    t_end [W] (which must hold zeros).
"""
    W = t.shape[1]
    n_bg = max(1, banks // per_bg)
    open_row = np.full((banks, W), -1, np.int64)
    b_act = np.full((banks, W), NEVER)
    b_rd = np.full((banks, W), NEVER)
    b_wr = np.full((banks, W), NEVER)
    b_ready = np.zeros((banks, W))
    bg_act = np.full((n_bg, W), NEVER)
    side_bg = np.full((n_bg, W), NEVER)
    faw = np.full((4, W), NEVER)
    last_act = np.full(W, NEVER)
    last_col = np.full(W, NEVER)
    last_rd = np.full(W, NEVER)
    last_wr = np.full(W, NEVER)
    last_side = np.full(W, NEVER)
    t_issue = np.full(W, NEVER)
    t_bar = np.full(W, NEVER)
    ref_end = np.full(W, NEVER)
    last_arr = np.full(W, NEVER)
    last_buf = np.full(W, NEVER)
    tmp = np.zeros(W)
    next_ref = np.empty(W)
    for v in range(W):
        next_ref[v] = t[REF_FIRST, v] if t[REF_FIRST, v] > 0 else t[REF_INTERVAL, v]
    # set by the records alone: the same in every variant
    last_col_bg = last_wr_bg = -1
    last_allbank = False
    # the counts every variant adds alike (columns, data bus, commands): summed once, in the same order
    alike = np.zeros(8)
    for i in range(lo, hi):
        if rec[3, i] <= 0:
            continue
        op, n, is_col, write, allbank = record_kind(rec, i, cls)
        op_wait = cls[op, WAIT] == 1
        wait = op_wait or rec[7, i] == 1
        side = cls[op, SIDE] == 1
        fixed = cls[op, FIXED] == 1
        barrier = cls[op, BARRIER] == 1
        act_all = cls[op, ACT_ALL] == 1
        pre_all = cls[op, PRE_ALL] == 1
        b = min(max(rec[1, i], 0), banks - 1)
        bg = b // per_bg
        row = rec[2, i]
        kb = record_bucket(rec, i)            # 6.'s report bucket
        # 1. refresh between records, for the variants it is due in (an inlined per-variant branch: rare)
        if refresh:
            for v in range(W):
                if t_end[v] >= next_ref[v]:
                    _refresh_v(v, t, banks, per_bg, open_row, b_act, b_rd, b_wr, b_ready, bg_act, faw,
                               last_act, last_col, ref_end, next_ref, t_end, counts, last_allbank, is_col, allbank,
                               row, b, wait)
        if act_all or pre_all:
            # 4. all-bank
            _all_bank_v(t, act_all, cls[op, STAGGER] == 1, W, banks, n_bg, row, wait, last_allbank, kb, open_row,
                        b_act, b_rd, b_wr, b_ready, ref_end, last_arr, last_buf, last_col, t_end, tmp, buckets, counts)
        elif is_col:
            # what `_stream` decides from the record alone, decided once
            per_bank = float(banks) if allbank else 1.0
            rcd_k = WR_AFTER_ACT if write else RD_AFTER_ACT
            gap_k = column_gap(last_allbank, allbank, bg == last_col_bg)
            wtr = RD_AFTER_WR_L if bg == last_wr_bg else RD_AFTER_WR_S
            sp_k = column_spacing(allbank, cls[op, STREAM] == 1)
            buffer = cls[op, BUFFER] == 1
            # need_any: some variant must open the column's row (most records: none or all of them, which
            # differ only past their refreshes), so the loop's row test is skipped when none
            need_any = False
            if row >= 0:
                for v in range(W):
                    if open_row[b, v] != row:
                        need_any = True
                        break
            for v in range(W):
                te = t_end[v]
                f = max(0.0, ref_end[v])         # commands issue in order
                if wait:
                    f = max(f, te)
                # 2. open the row if needed (which variants need it differs once their refreshes fall apart)
                if need_any and open_row[b, v] != row:
                    t_act = _row_open_v(t, v, b, bg, row, f, per_bank, open_row, b_act, b_rd, b_wr, b_ready, bg_act,
                                        faw, last_act, counts)
                    col_ready = t_act + t[rcd_k, v]
                else:
                    col_ready = max(b_act[b, v] + t[rcd_k, v], f)
                # 3. the first column, then n columns `spacing` apart; 6. the end
                _column_v(t, chains, v, b, n, write, allbank, buffer, op_wait, col_ready, te, gap_k, wtr, sp_k, kb,
                          b_rd, b_wr, last_col, last_rd, last_wr, last_arr, last_buf, t_issue, t_bar, buckets, t_end)
        elif side:
            # 5. side
            _side_v(t, W, bg, n, wait, op_wait, fixed, kb, last_side, side_bg, t_issue, t_bar, ref_end, t_end, buckets)
        elif fixed:
            _fixed_v(t, W, n, wait, kb, last_col, t_issue, t_bar, ref_end, t_end, buckets)
        else:
            # a barrier (or a record of no kind) adds no time: e = t_end, whose 0 (NaN past an
            # infinite end, as in `_stream`) still goes to the bucket
            for v in range(W):
                if barrier:
                    t_bar[v] = max(t_bar[v], t_issue[v] + 1.0)
                te = t_end[v]
                buckets[kb, v] += max(te - te, 0.0)
        if is_col:
            if write:
                last_wr_bg = bg
            last_col_bg = bg
            last_allbank = allbank
        record_counts(cls, op, n, is_col, write, allbank, alike)
    for v in range(W):
        for j in (1, 2, 3, 5, 6):
            counts[j, v] += alike[j]


@njit(nogil=True, cache=True)
def _streams_v(rec, starts, stops, items_u, items_b, t, chains, cls, banks, per_bg, refresh, buckets, end, counts):
    """`_stream_v` of work items k: stream items_u[k] (records
    starts[u]:stops[u] of `rec`) under variant block items_b[k] (latencies
    t[b] [N_LAT, W], chains[b] [N_LAT, CHAIN, W]); results into
    buckets[b, u] [5, W], end[b, u] [W], counts[b, u] [8, W]."""
    for k in range(items_u.shape[0]):
        u, b = items_u[k], items_b[k]
        _stream_v(rec, starts[u], stops[u], t[b], chains[b], cls, banks, per_bg, refresh, buckets[b, u], counts[b, u],
                  end[b, u])


BLOCK = 32
"""Variants a `_stream_v` call advances together: enough to spread a record's decoding thin, few enough that its
[banks, BLOCK] float64 tables stay near the core (16 banks: 24 KB in L1; AttAcc's 64: 96 KB); 16-128 measured
within ~10 % of each other."""


def time_streams_variants(rec: np.ndarray, starts: np.ndarray, stops: np.ndarray, table: np.ndarray,
                          banks: int, per_bg: int, refresh: bool, threads: int | None = None,
                          block: int | None = None, min_parallel: int = 20_000) -> dict:
    """Time U record streams under every one of V timing rows: what
    `time_streams` gives for the U * V (stream, row) pairs, bit for bit,
    with each stream's records decoded once per block of variants.

    rec:    [8, M] int32 records (rows RECORD_FIELDS), streams side by side;
    starts, stops: [U] int64, stream u is rec[:, starts[u]:stops[u]];
    table:  [V, N_LAT, CHAIN] float64 latency chains (`timing_table`), cycles.
    Returns {"buckets": [V, U, 5], "end": [V, U], "counts": [V, U, 8]}
    float64 (row-major as `time_streams` of the pairs ordered variant by
    variant).  The variants go in blocks of `block` (default BLOCK; the
    last is padded with copies of row V - 1, whose results are dropped);
    the (stream, block) items are dealt to `threads` threads (default
    THREADS) in contiguous slices of about equal record counts, when the
    work (records x variants) reaches `min_parallel` (below it a thread
    pool costs more than it saves)."""
    rec = np.ascontiguousarray(rec, np.int32)
    starts, stops = (np.ascontiguousarray(a, np.int64) for a in (starts, stops))
    chains = checked_chains(table, "time_streams_variants", min_rows=1)
    U, V = starts.shape[0], chains.shape[0]
    if rec.shape[0] != len(RECORD_FIELDS) or stops.shape != (U,):
        raise ValueError(f"time_streams_variants: rec [{len(RECORD_FIELDS)}, M] and starts / stops [U] expected, "
                         f"got {rec.shape}, {starts.shape}, {stops.shape}")
    # the loop is compiled without bounds checks: a bad index would read past the arrays
    if U and (starts.min() < 0 or (stops < starts).any() or stops.max() > rec.shape[1]):
        raise ValueError(f"time_streams_variants: streams must lie in the {rec.shape[1]} records "
                         "(0 <= start <= stop)")
    lat = latencies(chains)
    NB = -(-V // max(1, min(int(block or BLOCK), V)))
    W = -(-V // NB)                 # blocks of equal width: the padding stays below NB (V = 33: 2 x 17, not 2 x 32)
    pad = np.minimum(np.arange(NB * W), V - 1)            # the last block padded with row V - 1
    t = np.ascontiguousarray(lat[pad].reshape(NB, W, N_LAT).transpose(0, 2, 1))
    ch = np.ascontiguousarray(chains[pad].reshape(NB, W, N_LAT, CHAIN).transpose(0, 2, 3, 1))
    buckets, end, counts = np.zeros((NB, U, 5, W)), np.zeros((NB, U, W)), np.zeros((NB, U, 8, W))
    cls = np.ascontiguousarray(CLASS_TABLE, np.int32)
    items_u = np.tile(np.arange(U, dtype=np.int64), NB)
    items_b = np.repeat(np.arange(NB, dtype=np.int64), U)

    def part(a, b):
        _streams_v(rec, starts, stops, items_u[a:b], items_b[a:b], t, ch, cls, banks, per_bg, bool(refresh), buckets,
                   end, counts)
    in_threads(part, np.cumsum((stops - starts)[items_u] * W), threads, min_parallel)
    # [NB, U, ..., W] -> [V, U, ...]
    return {"buckets": buckets.transpose(0, 3, 1, 2).reshape(NB * W, U, 5)[:V],
            "end": end.transpose(0, 2, 1).reshape(NB * W, U)[:V],
            "counts": counts.transpose(0, 3, 1, 2).reshape(NB * W, U, 8)[:V]}


# ---------------------------------------------------------------------------------------------------------
# A sweep's variants that a stream cannot tell apart: timed once


def _op_rows() -> np.ndarray:
    """[n_ops, N_LAT] bool: the latencies (rows of the timing table, with
    their chains) that `_stream` / `_stream_v` may read for a record of each
    opcode (every kind the opcode has; a column always counted with the row
    it may have to open: precharge, tRC, tRRD, tFAW).  A superset by
    construction: the test perturbs every row outside it and finds the
    results unchanged bit for bit."""
    # opening a row (2.)
    act = (PRE_AFTER_ACT, PRE_AFTER_RD, PRE_AFTER_WR, ACT_AFTER_PRE, ACT_AFTER_ACT, ACT_AFTER_ACT_BG, ACT_AFTER_ACT_CH,
           ACT_WINDOW)
    rows = np.zeros((CLASS_TABLE.shape[0], N_LAT), bool)
    for op in range(CLASS_TABLE.shape[0]):
        c = CLASS_TABLE[op]
        use = []
        if c[COLUMN]:
            use += act + (GAP_L, GAP_S, GAP_AB, GAP_AB_L, GAP_AB_S, SPACE_L, SPACE_S, SPACE_AB, END_AB)
            use += (WR_AFTER_ACT, WR_AFTER_RD, END_WR) if c[WRITE] else \
                (RD_AFTER_ACT, RD_AFTER_WR_L, RD_AFTER_WR_S, END_RD)
        if c[SIDE]:
            use += (SIDE_AFTER_SIDE, SIDE_AFTER_SIDE_BG, END_SIDE)
        if c[FIXED]:
            use += (FIXED_AFTER_COL,)
        if c[ACT_ALL]:
            use += (ACTAB_AFTER_BUF, ACTAB_AFTER_COL, PRE_AFTER_ACT, PRE_AFTER_RD, PRE_AFTER_WR, ACT_AFTER_PRE,
                    ACT_AFTER_ACT, ACT_WINDOW, END_ACTAB)
        if c[PRE_ALL]:
            use += (PREALL_AFTER_AB, PREA_AFTER_COL, PRE_AFTER_ACT, PRE_AFTER_RD, PRE_AFTER_WR, ACT_AFTER_PRE, END_PREA)
        rows[op, list(use)] = True
    return rows


OP_ROWS = _op_rows()
# what a refresh reads (1.: its schedule, the precharges it waits for, the activation wave it lets pass)
REFRESH_ROWS = np.zeros(N_LAT, bool)
# (the refresh phase's reads and the row-open ones its wave test reads: `hw.dram_phases`)
REFRESH_ROWS[np.union1d(PHASE_ROWS["refresh"], PHASE_ROWS["row_open"])] = True


def latency_rows(rec: np.ndarray, starts: np.ndarray, stops: np.ndarray, refresh: bool) -> np.ndarray:
    """[U, N_LAT] bool: the timing-table rows each stream rec[:, starts[u]:
    stops[u]] may read (`OP_ROWS` of its live records' opcodes, and what a
    refresh reads when refresh is on and the stream has a live record).
    Two timings equal on a stream's rows give it the same results."""
    out = np.zeros((len(starts), N_LAT), bool)
    for u, (a, b) in enumerate(zip(np.asarray(starts).tolist(), np.asarray(stops).tolist())):
        ops = rec[0, a:b][rec[3, a:b] > 0]
        if ops.size:
            out[u] = OP_ROWS[np.unique(ops)].any(axis=0)
            out[u] |= bool(refresh) & REFRESH_ROWS
    return out


def time_streams_sweep(rec: np.ndarray, starts: np.ndarray, stops: np.ndarray, table: np.ndarray,
                       banks: int, per_bg: int, refresh: bool, threads: int | None = None) -> dict:
    """`time_streams_variants` (same arguments and results, bit for bit),
    with each stream timed once per distinct timing of the rows it reads
    (`latency_rows`): a sweep of tRCDRD leaves a stream without reads as it
    is, so its V variants are one run.  Streams that read the same rows
    are timed together, under their distinct variants."""
    chains = checked_chains(table, "time_streams_sweep", min_rows=1)
    starts, stops = (np.ascontiguousarray(a, np.int64) for a in (starts, stops))
    V, U = chains.shape[0], len(starts)
    out = {"buckets": np.zeros((V, U, 5)), "end": np.zeros((V, U)), "counts": np.zeros((V, U, 8))}
    if U == 0:
        return out
    rows = latency_rows(rec, starts, stops, refresh)
    masks, group = np.unique(rows, axis=0, return_inverse=True)
    for g, mask in enumerate(masks):
        us = np.flatnonzero(group.ravel() == g)
        # the variants' read rows as raw bytes: equal bytes time alike (0.0 and -0.0 stay apart)
        sub = np.ascontiguousarray(chains[:, mask, :].reshape(V, -1))
        keys = sub.view(np.dtype((np.void, sub.shape[1] * 8))).ravel() if sub.shape[1] else np.zeros(V, "V8")
        _, first, inv = np.unique(keys, return_index=True, return_inverse=True)
        res = time_streams_variants(rec, starts[us], stops[us], chains[first], banks, per_bg, refresh, threads)
        for k in out:
            out[k][:, us] = res[k][inv.ravel()]
    return out
