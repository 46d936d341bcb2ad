"""Compiled (numba) form of `time._walk`: one group's Newton stream timed in
closed form, the same walk command for command and float for float.

Why.  The cost model featurises every draft of an op (`costmodel.features`
-> `time.newton_phases`), one walk per distinct per-group plan; a LLaMA-2 7B
decoder layer on newton needs ~16 500 of them (its GEMVs and their MD-DP
shares), and the Python walk -- a method call per column record, a tuple
snapshot per round -- took 38 ms each: 630 of the layer's 673 s compile.
Here the walk's state is one flat array and its loops are compiled.

What stays the same.  `time._walk` is the readable definition (`time.NATIVE
= False` walks with it) and `tests/backends/newton/test_newton_walk.py` holds the
two bit-identical on random plans, knobs and backend variants.  Every time
is float64 and every sum is taken in the order the Python walk takes it
(latency chains term by term, `max` of the same operands, the steady-state
skip's `reps * delta`), so the phases are the same floats, not close ones.

State (`_state`): one float64 array, per bank its last ACT, read and write,
its ready time after a PREA and its open row (-1 closed; row numbers are
exact in float64), the bank groups' last ACT, the tFAW window's four ACTs,
the channel scalars (`_LAST_ACT` ...), the simulator's four buckets and the
kernel's state (the loaded buffer, the row G_ACT opened, the "leading"
flag).  One array, not a dozen, and the helpers compiled without numba's
reference counting (`_nrt=False`: they allocate nothing, and `walk`, which
owns every array, outlives their calls): a call between compiled functions
otherwise increments and decrements a count per array argument -- atomic
operations that took 40 % of the walk (gdb samples in NRT_incref /
NRT_decref), making one call per column record.  Inlining the helpers
instead (`inline="always"`) gained less and took 9 minutes to compile.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ...hw.dram_phases import (
    ACT_AFTER_ACT,
    ACT_AFTER_ACT_BG,
    ACT_AFTER_ACT_CH,
    ACT_AFTER_PRE,
    ACT_WINDOW,
    ACTAB_AFTER_BUF,
    ACTAB_AFTER_COL,
    END_AB,
    END_ACTAB,
    END_PREA,
    END_RD,
    END_WR,
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
    WR_AFTER_ACT,
    WR_AFTER_RD,
    column_gap,
    column_spacing,
)
from ...hw.dram_rules import NEVER

# channel scalars, from the start of the scalar block (`_o_s`)
(_LAST_ACT, _LAST_COL, _LAST_BG, _LAST_AB, _LAST_ARR, _LAST_BUF, _LAST_RD, _LAST_WR, _LAST_WR_BG, _END,
 _BUDGET, _UNSETTLED,
 # the simulator's buckets (time.py's PRE, K_REARR, COMPUTE, READBACK)
 _PRE, _K_REARR, _COMPUTE, _READBACK,
 # kernel: the loaded buffer (pass, b, vector group, chunk group; -1 none), the row G_ACT opened
 # (-1 none), whether GWRITEs still count as leading rearrangement (1 until the first G_ACT / COMP)
 _LOADED, _LOADED_B, _LOADED_VG, _LOADED_IG, _OPEN, _LEADING, _NS) = range(23)


@njit(cache=True, nogil=True, inline="always")
def _o_s(nb, nbg):
    """Offset of the scalar block: after act / rd / wr / ready / open per bank, the bank groups' ACTs, tFAW."""
    return 5 * nb + nbg + 4


@njit(cache=True, nogil=True, inline="always")
def _after(x, C, k):
    """x + C[k, 0] + C[k, 1] + ..., left to right (`time._after`)."""
    for j in range(C.shape[1]):
        x += C[k, j]
    return x


@njit(cache=True, nogil=True, inline="always")
def _pre_ok(st, L, C, nb, b):
    return max(max(st[b] + L[PRE_AFTER_ACT], st[nb + b] + L[PRE_AFTER_RD]), _after(st[2 * nb + b], C, PRE_AFTER_WR))


@njit(cache=True, nogil=True, inline="always")
def _advance(st, s, end):
    d = max(end - st[s + _END], 0.0)
    st[s + _END] = max(st[s + _END], end)
    return d


@njit(cache=True, nogil=True, _nrt=False)
def _column(st, L, C, nb, nbg, per_bg, b, row, n, write, allbank, wait, spacing, buffer):
    """`time._Channel.column`: a column record; the time it adds.  spacing:
    NaN for None.  Past the budget it sets the unsettled flag and adds
    nothing (the callers' loops stop)."""
    s = _o_s(nb, nbg)
    st[s + _BUDGET] -= 1.0
    if st[s + _BUDGET] < 0.0:
        st[s + _UNSETTLED] = 1.0
        return 0.0
    bg = b // per_bg
    o_open, o_bga, o_faw = 4 * nb, 5 * nb, 5 * nb + nbg
    need = row >= 0 and st[o_open + b] != row
    if need:                        # PRE (if open) + ACT under tRC / tRRD / tFAW
        if st[o_open + b] >= 0:
            ready = _pre_ok(st, L, C, nb, b) + L[ACT_AFTER_PRE]
        else:
            ready = st[3 * nb + b]
        mf, kf = st[o_faw], 0
        for q in range(1, 4):
            if st[o_faw + q] < mf:
                mf, kf = st[o_faw + q], q
        a = max(max(max(max(ready, st[b] + L[ACT_AFTER_ACT]), st[o_bga + bg] + L[ACT_AFTER_ACT_BG]),
                    st[s + _LAST_ACT] + L[ACT_AFTER_ACT_CH]),
                mf + L[ACT_WINDOW])
        st[o_open + b] = row
        st[b] = a
        st[o_bga + bg] = a
        st[s + _LAST_ACT] = max(st[s + _LAST_ACT], a)
        st[o_faw + kf] = a
    rcd = L[WR_AFTER_ACT] if write else L[RD_AFTER_ACT]
    if need:
        t0 = st[b] + rcd
    else:
        t0 = max(st[b] + rcd, 0.0)
    gap = L[column_gap(st[s + _LAST_AB] != 0.0, allbank, bg == st[s + _LAST_BG])]
    t0 = max(t0, st[s + _LAST_COL] + gap)
    if write:
        t0 = max(t0, _after(st[s + _LAST_RD], C, WR_AFTER_RD))
    else:
        t0 = max(t0, _after(st[s + _LAST_WR], C, RD_AFTER_WR_L if bg == st[s + _LAST_WR_BG] else RD_AFTER_WR_S))
    if wait:
        t0 = max(t0, st[s + _END])
    sp = L[column_spacing(allbank, False)] if (allbank or np.isnan(spacing)) else spacing
    last = t0 + (n - 1) * sp
    if allbank:
        end = last + L[END_AB]
    elif write:
        end = _after(last, C, END_WR)
    else:
        end = _after(last, C, END_RD)
    if write:
        st[2 * nb + b] = last
        st[s + _LAST_WR] = last
        st[s + _LAST_WR_BG] = bg
    else:
        st[nb + b] = last
        st[s + _LAST_RD] = last
    st[s + _LAST_COL] = last
    st[s + _LAST_BG] = bg
    st[s + _LAST_AB] = 1.0 if allbank else 0.0
    if buffer:
        st[s + _LAST_BUF] = last
    else:
        st[s + _LAST_ARR] = last
    return _advance(st, s, end)


@njit(cache=True, nogil=True, _nrt=False)
def _gwrite_run(st, L, C, nb, nbg, per_bg, count):
    """`time._Channel.gwrite_run` on the GWRITE banks (one per bank group,
    `g * per_bg`): `count` columns in turn, the steady rest in closed form."""
    s = _o_s(nb, nbg)
    d = 0.0
    steady = 0
    j = 0
    # every GWRITE bank in its own bank group: the run's gap is tCCD_S (tCCD_L with one bank)
    gap = L[GAP_L] if nbg == 1 else L[GAP_S]
    while j < count:
        before = st[s + _LAST_COL]
        d += _column(st, L, C, nb, nbg, per_bg, (j % nbg) * per_bg, -1, 1, True, False, False, np.nan, True)
        if st[s + _UNSETTLED] != 0.0:
            return d
        j += 1
        if j > 1 and st[s + _LAST_COL] == before + gap:
            steady += 1
        else:
            steady = 0
        if steady >= nbg and j < count:
            r = count - j
            last = st[s + _LAST_COL] + r * gap
            for q in range(min(nbg, count)):
                st[2 * nb + ((count - 1 - q) % nbg) * per_bg] = last - q * gap
            bg = (count - 1) % nbg
            st[s + _LAST_COL] = last
            st[s + _LAST_WR] = last
            st[s + _LAST_BUF] = last
            st[s + _LAST_BG] = bg
            st[s + _LAST_WR_BG] = bg
            return d + _advance(st, s, _after(last, C, END_WR))
    return d


@njit(cache=True, nogil=True, _nrt=False)
def _prea(st, L, C, nb, nbg):
    """`time._Channel.prea`: close every bank."""
    s = _o_s(nb, nbg)
    t_pre = 0.0
    for b in range(nb):
        if st[4 * nb + b] >= 0:
            t_pre = max(t_pre, _pre_ok(st, L, C, nb, b))
    # in order after the last column [PREA_AFTER_COL: 0]; tRTP_L after an all-bank one (>= 0)
    t_pre = max(t_pre, st[s + _LAST_COL] + (L[PREALL_AFTER_AB] if st[s + _LAST_AB] != 0.0 else L[PREA_AFTER_COL]))
    for b in range(nb):
        st[4 * nb + b] = -1.0
        st[3 * nb + b] = t_pre + L[ACT_AFTER_PRE]
    return _advance(st, s, t_pre + L[END_PREA])


@njit(cache=True, nogil=True, _nrt=False)
def _g_act(st, L, C, nb, nbg, row, stagger):
    """`time._Channel.g_act`: open `row` in every bank."""
    s = _o_s(nb, nbg)
    ready = 0.0
    act_max = 0.0
    for b in range(nb):
        r = _pre_ok(st, L, C, nb, b) + L[ACT_AFTER_PRE] if st[4 * nb + b] >= 0 else st[3 * nb + b]
        ready = r if b == 0 else max(ready, r)
        act_max = st[b] if b == 0 else max(act_max, st[b])
    a = max(max(ready, act_max + L[ACT_AFTER_ACT]),
            max(st[s + _LAST_ARR] + L[ACTAB_AFTER_COL], st[s + _LAST_BUF] + L[ACTAB_AFTER_BUF])) + stagger
    for b in range(nb):
        st[4 * nb + b] = row
        st[b] = a
    return _advance(st, s, a + L[END_ACTAB])


@njit(cache=True, nogil=True, inline="always")
def _moved(v, dt):
    return v + dt if v > NEVER / 2 else v


@njit(cache=True, nogil=True, _nrt=False)
def _shift(st, nb, nbg, dt):
    """`time._Channel.shift`: every time of the state on by dt."""
    s = _o_s(nb, nbg)
    for k in range(4 * nb):                                  # act, rd, wr, ready
        st[k] = _moved(st[k], dt)
    for k in range(5 * nb, 5 * nb + nbg + 4):                # bank groups' ACTs, tFAW
        st[k] = _moved(st[k], dt)
    for k in (_LAST_ACT, _LAST_COL, _LAST_ARR, _LAST_BUF, _LAST_RD, _LAST_WR, _END):
        st[s + k] = _moved(st[s + k], dt)


@njit(cache=True, nogil=True, inline="always")
def _rel(v, e, horizon):
    return -np.inf if v < e - horizon else v - e


@njit(cache=True, nogil=True, _nrt=False)
def _snapshot(st, nb, nbg, horizon, kernel, out):
    """`time._Channel.snapshot` into out (its tuple's floats, equal exactly
    when the tuples are); kernel: with `kernel_state`'s "no row open" and
    "leading" flags.  Returns the entries written."""
    s = _o_s(nb, nbg)
    e = st[s + _END]
    p = 0
    for k in range(4 * nb):                                  # act, rd, wr, ready
        out[p] = _rel(st[k], e, horizon)
        p += 1
    for k in range(nbg):
        out[p] = _rel(st[5 * nb + k], e, horizon)
        p += 1
    o_faw = 5 * nb + nbg
    f0, f1 = _rel(st[o_faw], e, horizon), _rel(st[o_faw + 1], e, horizon)
    f2, f3 = _rel(st[o_faw + 2], e, horizon), _rel(st[o_faw + 3], e, horizon)
    # the window sorted (a network of five compare-exchanges)
    if f1 < f0:
        f0, f1 = f1, f0
    if f3 < f2:
        f2, f3 = f3, f2
    if f2 < f0:
        f0, f2 = f2, f0
    if f3 < f1:
        f1, f3 = f3, f1
    if f2 < f1:
        f1, f2 = f2, f1
    out[p], out[p + 1], out[p + 2], out[p + 3] = f0, f1, f2, f3
    p += 4
    for b in range(nb):
        out[p] = 1.0 if st[4 * nb + b] >= 0 else 0.0
        p += 1
    for k in (_LAST_ACT, _LAST_COL, _LAST_ARR, _LAST_BUF, _LAST_RD, _LAST_WR):
        out[p] = _rel(st[s + k], e, horizon)
        p += 1
    out[p] = st[s + _LAST_BG]
    out[p + 1] = st[s + _LAST_AB]
    out[p + 2] = st[s + _LAST_WR_BG]
    p += 3
    if kernel:
        out[p] = 1.0 if st[s + _OPEN] < 0 else 0.0
        out[p + 1] = st[s + _LEADING]
        p += 2
    return p


@njit(cache=True, nogil=True, inline="always")
def _same(a, b, n):
    for k in range(n):
        if a[k] != b[k]:
            return False
    return True


@njit(cache=True, nogil=True, inline="always")
def _sig_equal(sig, a, b, n):
    """sig[a:a + n] == sig[b:b + n] (rows of an int signature table)."""
    for k in range(n):
        for c in range(sig.shape[1]):
            if sig[a + k, c] != sig[b + k, c]:
                return False
    return True


@njit(cache=True, nogil=True, _nrt=False)
def period_of(sig, most):
    """`time._period`: smallest p <= most with sig[1:] p-periodic (1 when none)."""
    n = sig.shape[0]
    for p in range(1, min(most, n) + 1):
        if n - 1 - p <= 0 or _sig_equal(sig, 1 + p, 1, n - 1 - p):
            return p
    return 1


# --------------------------------------------------------------------------
# the kernel (`time._walk`'s closures; their state in st)
# --------------------------------------------------------------------------
@njit(cache=True, nogil=True, inline="always")
def _add(st, s, k, d):
    # GWRITEs before the first G_ACT still count as leading rearrangement
    if st[s + _LEADING] != 0.0 and k == _K_REARR:
        st[s + _PRE] += d
    else:
        st[s + k] += d


@njit(cache=True, nogil=True, _nrt=False)
def _load(st, L, C, geo, seg_cols, p, bb, vg, ig):
    """`time._walk.load`: the buffer load (pass, b, vector group, chunk group)."""
    nb, nbg, per_bg, n_v, n_o, t_in, kv, ki, lo, cols, class_cores, stagger, rr, per_row = geo
    s = _o_s(nb, nbg)
    if st[s + _LOADED] == p and st[s + _LOADED_B] == bb and st[s + _LOADED_VG] == vg and st[s + _LOADED_IG] == ig:
        return
    if st[s + _OPEN] >= 0:
        _add(st, s, _COMPUTE, _prea(st, L, C, nb, nbg))
        st[s + _OPEN] = -1.0
    width = 0
    for ji in range(ki):
        i = ig * ki + ji
        if i < t_in and seg_cols[i] > width:
            width = seg_cols[i]
    _add(st, s, _K_REARR, _gwrite_run(st, L, C, nb, nbg, per_bg, kv * ki * width))
    st[s + _LOADED], st[s + _LOADED_B], st[s + _LOADED_VG], st[s + _LOADED_IG] = p, bb, vg, ig


@njit(cache=True, nogil=True, _nrt=False)
def _comp(st, L, C, geo, seg_base, seg_cols, bb, o, i, vg):
    """`time._walk.comp`: segment (b, o, i) with every vector of the load."""
    nb, nbg, per_bg, n_v, n_o, t_in, kv, ki, lo, cols, class_cores, stagger, rr, per_row = geo
    s = _o_s(nb, nbg)
    jvs = min(kv, n_v - vg * kv)
    base, ncols = seg_base[bb, o, i], seg_cols[i]
    off = 0
    while off < ncols:                      # a run per row (`commands.bank_runs`)
        row, col = (base + off) // cols, (base + off) % cols
        m = min(ncols - off, cols - col)
        off += m
        if class_cores:                     # single-bank COMPs: each opens its own bank's row
            for b in range(min(class_cores, nb)):
                for _ in range(jvs):
                    _add(st, s, _COMPUTE, _column(st, L, C, nb, nbg, per_bg, b, row, m, False, True, False, np.nan,
                                                  False))
                    if st[s + _UNSETTLED] != 0.0:
                        return
            st[s + _OPEN] = row
            st[s + _LEADING] = 0.0
            continue
        if st[s + _OPEN] != row:
            _add(st, s, _COMPUTE, _g_act(st, L, C, nb, nbg, row, stagger))
            st[s + _OPEN] = row
            st[s + _LEADING] = 0.0
        for _ in range(jvs):
            _add(st, s, _COMPUTE, _column(st, L, C, nb, nbg, per_bg, 0, row, m, False, True, False, np.nan, False))
            if st[s + _UNSETTLED] != 0.0:
                return


@njit(cache=True, nogil=True, _nrt=False)
def _readres(st, L, C, geo):
    """`time._walk.readres`."""
    nb, nbg, per_bg, n_v, n_o, t_in, kv, ki, lo, cols, class_cores, stagger, rr, per_row = geo
    s = _o_s(nb, nbg)
    if class_cores:                         # each bank's latches, from its open row
        for b in range(min(class_cores, nb)):
            _add(st, s, _READBACK, _column(st, L, C, nb, nbg, per_bg, b, int(st[4 * nb + b]), rr, False, False, True,
                                           np.nan, False))
        return
    _add(st, s, _READBACK, _column(st, L, C, nb, nbg, per_bg, 0, int(st[s + _OPEN]), rr, False, False, True, np.nan,
                                   False))


@njit(cache=True, nogil=True, _nrt=False)
def _block(st, L, C, geo, seg_base, seg_cols, p, bb, vg, ob, ig, is_flow, n_ig):
    """One output block: os -- every chunk group's load and steps, then the
    READRES; is -- chunk group ig's steps, then the READRES (`time._walk`'s
    os_block / is_block)."""
    nb, nbg, per_bg, n_v, n_o, t_in, kv, ki, lo, cols, class_cores, stagger, rr, per_row = geo
    s = _o_s(nb, nbg)
    for jg in range(n_ig):
        if is_flow and jg != ig:
            continue
        if not is_flow:
            _load(st, L, C, geo, seg_cols, p, bb, vg, jg)
        for i in range(jg * ki, min(t_in, (jg + 1) * ki)):        # `step`: the group's chunks x the block's outputs
            for o in range(ob * lo, min(n_o, (ob + 1) * lo)):
                _comp(st, L, C, geo, seg_base, seg_cols, bb, o, i, vg)
                if st[s + _UNSETTLED] != 0.0:
                    return
    _readres(st, L, C, geo)


@njit(cache=True, nogil=True, inline="always")
def _buckets(st, s):
    """The four buckets (a period's start, for `_settle`)."""
    return st[s + _PRE], st[s + _K_REARR], st[s + _COMPUTE], st[s + _READBACK]


@njit(cache=True, nogil=True, inline="always")
def _stretch_end(k, n, period, steady):
    """The units to run from k: a period, or the rest (steady off, or less than a period left)."""
    return n if (not steady or k + period > n) else k + period


@njit(cache=True, nogil=True, inline="always")
def _settle(st, nb, nbg, horizon, kernel, shift, sig, k, hi, n, period, steady, before, prev, snap_a, snap_b):
    """`time._run_units`' test after units k .. hi - 1 ran (a stretch of
    `_stretch_end`): when that period left the state (`_snapshot`, with the
    kernel's flags if `kernel`) as the previous period left it and the next
    periods have its signatures (sig [n, *]), each of them adds the
    period's growth of the buckets since `before` again, without running
    (`shift`: the state's times move on by their total too).
    prev: where the previous period's snapshot is (0: none, 1: snap_b, 2:
    snap_a; this one goes into the other).  Returns (the next unit to run,
    the new prev); past hi when periods were skipped."""
    if not steady or hi - k < period:       # the rest of the units: nothing follows
        return hi, prev
    into_b = prev == 2
    new, old = (snap_b, snap_a) if into_b else (snap_a, snap_b)
    m = _snapshot(st, nb, nbg, horizon, kernel, new)
    same = hi >= 2 * period and _sig_equal(sig, hi - 2 * period, hi - period, period)
    if not (prev != 0 and same and _same(new, old, m)):
        return hi, 1 if into_b else 2
    reps = 0
    while hi + (reps + 1) * period <= n and _sig_equal(sig, hi + reps * period, hi - period, period):
        reps += 1
    if reps:
        s = _o_s(nb, nbg)
        total = 0.0
        for j, b in ((_PRE, before[0]), (_K_REARR, before[1]), (_COMPUTE, before[2]), (_READBACK, before[3])):
            delta = st[s + j] - b
            st[s + j] += reps * delta
            total += delta                  # as `_run_units` sums its delta (from 0, in bucket order)
        if shift:
            _shift(st, nb, nbg, reps * total)
    return hi + reps * period, 0


@njit(cache=True, nogil=True, _nrt=False)
def _blocks(st, L, C, geo, seg_base, seg_cols, p, bb, vg, ig, is_flow, n_ig, n_ob, seg_per_block, bsig, i_last,
            horizon, steady, snap_a, snap_b):
    """`time._walk.blocks`: every output block, skipping steady stretches
    (`_settle` with period per_row // gcd(segments, per_row))."""
    nb, nbg, per_bg, n_v, n_o, t_in, kv, ki, lo, cols, class_cores, stagger, rr, per_row = geo
    s = _o_s(nb, nbg)
    a, b_ = seg_per_block, per_row
    while b_:
        a, b_ = b_, a % b_
    period = per_row // a
    k, prev = 0, 0
    while k < n_ob:
        hi, before = _stretch_end(k, n_ob, period, steady), _buckets(st, s)
        for ob in range(k, hi):
            _block(st, L, C, geo, seg_base, seg_cols, p, bb, vg, ob, ig, is_flow, n_ig)
            if st[s + _UNSETTLED] != 0.0:
                return
        k, prev = _settle(st, nb, nbg, horizon, True, True, bsig, k, hi, n_ob, period, steady, before, prev, snap_a,
                          snap_b)
        if k > hi:                          # the banks the block's COMPs opened hold its last row
            row = (seg_base[bb, min(n_o, k * lo) - 1, i_last] + seg_cols[i_last] - 1) // cols
            st[s + _OPEN] = row
            for bank in range(nb):
                if st[4 * nb + bank] >= 0:
                    st[4 * nb + bank] = row


@njit(cache=True, nogil=True, _nrt=False)
def _unit(st, L, C, geo, seg_base, seg_cols, p, bb, vg, n_ig, n_ob, is_flow, horizon, steady, bsig_os, bsig_is,
          snap_a, snap_b):
    """`time._walk.unit`: one (pass, b, vector group)."""
    nb, nbg, per_bg, n_v, n_o, t_in, kv, ki, lo, cols, class_cores, stagger, rr, per_row = geo
    s = _o_s(nb, nbg)
    if not is_flow:
        _blocks(st, L, C, geo, seg_base, seg_cols, p, bb, vg, 0, False, n_ig, n_ob, lo * t_in, bsig_os, t_in - 1,
                horizon, steady, snap_a, snap_b)
        return
    for ig in range(n_ig):
        _load(st, L, C, geo, seg_cols, p, bb, vg, ig)
        if st[s + _UNSETTLED] != 0.0:
            return
        last_i = min(t_in, (ig + 1) * ki) - 1
        _blocks(st, L, C, geo, seg_base, seg_cols, p, bb, vg, ig, True, n_ig, n_ob, lo * (last_i - ig * ki + 1),
                bsig_is, last_i, horizon, steady, snap_a, snap_b)
        if st[s + _UNSETTLED] != 0.0:
            return


@njit(cache=True, nogil=True)
def walk(n_b, n_v, n_o, n_rc, cc, t_in, kv, ki, lo, is_flow, passes, seg_base, seg_cols,
         span_row, span_len, order, spacing, L, C, banks, per_bg, cols, n_bg, rr, class_cores, horizon, steady,
         budget, unit_periods):
    """`time._walk` after its set-up: ([4] the leading rearrangement,
    rearrangement inside the kernel, compute and read-back cycles, whether
    the walk ran past `budget` column records -- then the times mean nothing).

    seg_base [n_b, n_o, t_in] / seg_cols [t_in]: the data-block layout;
    span_row / span_len [S]: the host-write rounds (a row, the columns each
    bank writes in it); order: the banks in write order; spacing: the
    streamed writes' column gap (NaN: none, tCCD_L); L [N_LAT] / C [N_LAT,
    CHAIN]: the compiled rules and their chains; banks / per_bg / n_bg / cols:
    the channel; rr: READRES bursts; class_cores: banks a single-bank pass
    commands (0: broadcast); horizon: how far back a rule reaches (cycles);
    steady: skip steady stretches (False: walk every command); unit_periods:
    the longest period of units to look for (`time.UNIT_PERIODS`)."""
    nb, nbg = banks, max(1, n_bg)
    s = _o_s(nb, nbg)
    st = np.full(s + _NS, NEVER)
    st[3 * nb:5 * nb] = 0.0                 # ready at 0
    st[4 * nb:5 * nb] = -1.0                # every bank closed
    st[s + _LAST_BG], st[s + _LAST_AB], st[s + _LAST_WR_BG], st[s + _END] = -1.0, 0.0, -1.0, 0.0
    st[s + _BUDGET], st[s + _UNSETTLED] = budget, 0.0
    st[s + _PRE:s + _READBACK + 1] = 0.0
    st[s + _LOADED:s + _OPEN + 1] = -1.0
    st[s + _LEADING] = 1.0
    size = 5 * nb + nbg + 16
    # the snapshots a skip compares: the rounds' / units' pair, and the blocks' (nested in a unit)
    snap_a, snap_b, snap_c, snap_d = np.empty(size), np.empty(size), np.empty(size), np.empty(size)
    # ---- host writes of every column a COMP reads, the banks in turn -------------------------
    n = span_row.shape[0]
    # a round's signature: its width and whether it opens a row
    rsig = np.empty((n, 2), np.int64)
    for k in range(n):
        rsig[k, 0] = span_len[k]
        rsig[k, 1] = 1 if (k == 0 or span_row[k] != span_row[k - 1]) else 0
    period = period_of(rsig, 64) if steady else 1
    k, prev = 0, 0
    while k < n:
        hi, before = _stretch_end(k, n, period, steady), _buckets(st, s)
        for u in range(k, hi):
            for b in order:
                st[s + _PRE] += _column(st, L, C, nb, nbg, per_bg, b, span_row[u], span_len[u], True, False, False,
                                        spacing, False)
            if st[s + _UNSETTLED] != 0.0:
                return st[s + _PRE:s + _READBACK + 1].copy(), True
        k, prev = _settle(st, nb, nbg, horizon, False, True, rsig, k, hi, n, period, steady, before, prev, snap_a,
                          snap_b)
        if k > hi:
            for b in order:                 # every bank wrote the last skipped round's row
                st[4 * nb + b] = span_row[k - 1]
    st[s + _PRE] += _prea(st, L, C, nb, nbg)
    # ---- the kernel -------------------------------------------------------------------------
    stagger = (nbg - 1) * L[ACT_WINDOW]
    per_row = max(1, cols // max(1, cc))                 # segments a row holds
    geo = (nb, nbg, per_bg, n_v, n_o, t_in, kv, ki, lo, cols, class_cores, stagger, rr, per_row)
    n_vg, n_ig, n_ob = -(-n_v // kv), -(-t_in // ki), -(-n_o // lo)
    # output blocks' signatures: os (outputs, loads its chunks), is (outputs)
    bsig_os = np.empty((n_ob, 2), np.int64)
    bsig_is = np.empty((n_ob, 1), np.int64)
    for ob in range(n_ob):
        bsig_os[ob, 0] = min(lo, n_o - ob * lo)
        bsig_is[ob, 0] = bsig_os[ob, 0]
        bsig_os[ob, 1] = 1 if (n_ig > 1 or ob == 0) else 0
    n_units = passes * n_b * n_vg
    # a unit's signature: the vectors it holds, where its b's first segment sits in a row
    usig = np.empty((n_units, 2), np.int64)
    for u in range(n_units):
        bb, vg = (u // n_vg) % n_b, u % n_vg
        usig[u, 0] = min(kv, n_v - vg * kv)
        usig[u, 1] = (bb * n_o * t_in) % per_row
    # the first unit alone (its leading GWRITEs count as leading rearrangement)
    _unit(st, L, C, geo, seg_base, seg_cols, 0, 0, 0, n_ig, n_ob, is_flow, horizon, steady, bsig_os, bsig_is,
          snap_c, snap_d)
    if st[s + _UNSETTLED] != 0.0:
        return st[s + _PRE:s + _READBACK + 1].copy(), True
    # units 1 .. n_units - 1: `_run_units(units[1:], ..., period=_period(unit_sig[1:]))`, no shift (a unit
    # starts by closing the rows, and nothing reads an absolute time)
    sig1 = usig[1:]
    n1 = n_units - 1
    period = period_of(sig1, unit_periods) if steady else 1
    k, prev = 0, 0
    while k < n1:
        hi, before = _stretch_end(k, n1, period, steady), _buckets(st, s)
        for u in range(1 + k, 1 + hi):
            _unit(st, L, C, geo, seg_base, seg_cols, u // (n_b * n_vg), (u // n_vg) % n_b, u % n_vg, n_ig, n_ob,
                  is_flow, horizon, steady, bsig_os, bsig_is, snap_c, snap_d)
            if st[s + _UNSETTLED] != 0.0:
                return st[s + _PRE:s + _READBACK + 1].copy(), True
        k, prev = _settle(st, nb, nbg, horizon, True, False, sig1, k, hi, n1, period, steady, before, prev, snap_a,
                          snap_b)
    return st[s + _PRE:s + _READBACK + 1].copy(), False


@njit(cache=True, nogil=True)
def read_runs(seg_base, seg_cols, cols):
    """The flat bank columns the COMPs read -- the union of every segment's
    run [seg_base[b, o, i], + seg_cols[i]) -- as `commands.row_runs` gives them
    (maximal runs of consecutive columns inside one row): (first flat column
    [R], length [R]) int64, in column order; the columns read are sum(length).
    Merged from the segments' intervals, so no per-column array."""
    n_b, n_o, t_in = seg_base.shape
    n = n_b * n_o * t_in
    start = np.empty(n, np.int64)
    stop = np.empty(n, np.int64)
    k = 0
    for b in range(n_b):
        for o in range(n_o):
            for i in range(t_in):
                start[k] = seg_base[b, o, i]
                stop[k] = seg_base[b, o, i] + seg_cols[i]
                k += 1
    idx = np.argsort(start, kind="mergesort")
    first = np.empty(n + 2, np.int64)       # grown below when runs cross rows
    length = np.empty_like(first)
    r = 0
    k = 0
    while k < n:
        lo_, hi_ = start[idx[k]], stop[idx[k]]
        k += 1
        while k < n and start[idx[k]] <= hi_:               # overlapping or adjacent: one run of columns
            hi_ = max(hi_, stop[idx[k]])
            k += 1
        c = lo_
        while c < hi_:                                       # cut at row ends
            e = min(hi_, (c // cols + 1) * cols)
            if r == first.shape[0]:
                grown = np.empty(2 * r, np.int64)
                grown[:r] = first
                first = grown
                grown = np.empty(2 * r, np.int64)
                grown[:r] = length
                length = grown
            first[r] = c
            length[r] = e - c
            r += 1
            c = e
    return first[:r].copy(), length[:r].copy()
