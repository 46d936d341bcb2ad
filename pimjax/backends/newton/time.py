"""Newton's phase times in closed form from the draft alone (nothing is lowered).

The Newton lowering's command stream of a group is regular: the host
writes every bank column the kernel reads (one column per bank in turn,
bank groups alternating), then per buffer load a PREA and the GWRITE
columns, per matrix row a G_ACT, per segment and vector a COMP of the
segment's columns, per latch block a READRES.  `newton_plan` gives the
loop bounds; `backends.newton.lower.segments` the data-block layout (which rows the
segments sit in).  This module walks that loop nest at command level and
applies `sim/timing.py`'s rules to the few commands it issues, with the
state those rules read for them (per bank: open row, last ACT / read /
write; the tFAW window; the channel's last column, read and write):

    rearrangement  host column writes: a round of one column per bank costs
                   a column gap per bank (tCCD_S across bank groups, tCCD_L
                   inside one), except rounds that open a row, where every
                   bank's ACT waits for its precharge (tWR after its last
                   write, tRP) and the ACTs are tRRD / tFAW apart
    kernel         PREA + GWRITE columns per load (the first load's count as
                   leading rearrangement, as the simulator buckets them),
                   G_ACT (tRC, precharge after tRAS / tRTP, (bank groups - 1)
                   tFAW of staggered activations, after the last column --
                   after the last GWRITE column only under rule ACTAB_AFTER_BUF,
                   off with GWRITE latency hiding),
                   COMPs tCCD_AB apart after tRCD and the write-to-read
                   turnaround, READRES after everything before it;
                   single-bank (per-core) drafts: no G_ACT, a COMP per
                   core of the pass's class, each opening its bank's row
                   (an ACT under tRRD / tFAW), a READRES per core
    read-back      the READRES bursts, tCCD_L apart, and their latency

The stream is a repetition -- rounds of host writes, output blocks, units
of (pass, b, vector group) -- and its timing settles into a steady state:
once a period of identical commands leaves the timing state as the
previous one left it (relative to the stream's end), every further
identical period adds the same time, so they are added without walking
them (`_run_units`; exact, the rules being deterministic).  That keeps a
4096 x 4096 GEMV's 720 drafts near 1.5 s (29 s walking every command).
A buffer load's GWRITE columns settle the same way inside the load
(`_Channel.gwrite_run`).  A walk that times more than a budget of column
records without settling gives up (NaN): the budget bounds the work, not
the stream's length (a 224 x 224 x 3 -> 64 per-core draft of 6.5 M COMP
records settles within a few thousand).

Assumes the lowering's defaults (register reuse, data-block layout).

Refresh is left out (the simulator inserts tRP + tRFC every tREFI; on the
held-out and validation cases ranking by the refresh-free simulated time
picks the same drafts, measured in the costmodel README), and so are the
host floor and the merge (`features.py` adds them on the host roofline).
Single-bank drafts are walked as if every core of a class held every
segment, busy // passes cores a class (as the counts take them): the lowering skips a
core's segments without matrix data and READRES of latches it does not
need (the edges of a halo-widened box), so there the walk is approximate
(0.99-1.31 x the simulated time on the VGG-16 layers of the broad held-out
set, where a count-based estimate is 0.78-6.2 x).
Checked against lowering + simulation without refresh by
`tests/backends/newton/test_newton_time.py`.

Why: Newton's near-ties are trades of tens of cycles between these phases
(16 GWRITE columns against 12 cycles of read-back), which no count feature
resolves; UPMEM's were closed the same way (`dpu.py`).
"""
from __future__ import annotations

from functools import lru_cache
from math import gcd

import numpy as np

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
    SPACE_S,
    WR_AFTER_ACT,
    WR_AFTER_RD,
    column_gap,
    column_spacing,
)
from ...hw.dram_rules import NEVER, PARAMS, compile_chains, compile_rules
from ...lower.program import Op, bank_order, streamed
from ...partition import dimension_sets
from ...partition.verify import matrix_and_vector
from .commands import bank_runs, readres_bursts, row_runs
from .counts import newton_geometry, newton_plan, unique_rows
from .lower import segments

PLAN_KEYS = ("n_b", "n_v", "n_o", "n_rc", "cc", "t_in", "kv", "ki", "lo", "is_flow", "passes")
# the simulator's buckets of a group's time (cycles.py): leading rearrangement, rearrangement
# inside the kernel (GWRITE), compute, read-back
PRE, K_REARR, COMPUTE, READBACK = range(4)
# the timing parameters the rules read, refresh left out (`_walk`'s horizon sums them)
RULE_FIELDS = tuple(f for f in PARAMS if f not in ("tREFI", "tRFC", "tREF0", "tREFW"))


def _after(x: float, chain) -> float:
    """x + chain[0] + chain[1] + ..., left to right."""
    for c in chain:
        x += c
    return x


def _compiled(t: dict) -> tuple:
    """(latencies [N_LAT], chains [N_LAT][CHAIN]) of `hw.dram_rules` for timing t, as floats."""
    return ([float(x) for x in compile_rules(t)], [[float(x) for x in row] for row in compile_chains(t)])


class _Unsettled(Exception):
    """A walk ran past its budget of column records (a stream that does not settle)."""


class _Channel:
    """The timing state the Newton commands read (timing.py's rules 2-4),
    with the latencies of `hw.dram_rules` (compiled from t); `budget`: the
    column records it may time before raising `_Unsettled`."""

    def __init__(self, t: dict, banks: int, per_bg: int, compiled: tuple | None = None, budget: float = np.inf):
        self.budget = budget
        # compiled: `_compiled(t)`, passed by a caller that walks many drafts under one timing
        L, C = compiled if compiled is not None else _compiled(t)
        self.L = list(L)
        # latencies this walk adds term by term (as the rules written out did)
        self.C = [list(row) for row in C]
        self.per_bg = per_bg
        self.open = [-1] * banks
        self.act = [NEVER] * banks
        self.rd = [NEVER] * banks
        self.wr = [NEVER] * banks
        self.ready = [0.0] * banks
        self.bg_act = [NEVER] * max(1, banks // per_bg)
        self.last_act = NEVER
        self.faw = [NEVER] * 4
        self.last_col, self.last_bg, self.last_ab = NEVER, -1, False
        self.last_arr, self.last_buf = NEVER, NEVER     # the last bank-array column / GWRITE column
        self.last_rd, self.last_wr, self.last_wr_bg = NEVER, NEVER, -1
        self.end = 0.0

    def shift(self, dt: float) -> None:
        """Move every time of the state on by dt (a skipped steady-state stretch)."""
        for a in (self.act, self.rd, self.wr, self.ready, self.bg_act, self.faw):
            for k in range(len(a)):
                if a[k] > NEVER / 2:
                    a[k] += dt
        self.last_act = self.last_act + dt if self.last_act > NEVER / 2 else self.last_act
        for f in ("last_col", "last_arr", "last_buf", "last_rd", "last_wr", "end"):
            v = getattr(self, f)
            setattr(self, f, v + dt if v > NEVER / 2 else v)

    def snapshot(self, horizon: float) -> tuple:
        """The state relative to the stream's end, times older than `horizon`
        cycles folded into "long ago" (no rule reaches that far back), open
        rows as flags: two equal snapshots mean equal futures under equal
        commands."""
        e = self.end

        def rel(v):
            return -np.inf if v < e - horizon else v - e
        arrays = tuple(tuple(rel(v) for v in a) for a in (self.act, self.rd, self.wr, self.ready, self.bg_act))
        return arrays + (tuple(sorted(rel(v) for v in self.faw)), tuple(o >= 0 for o in self.open),
                         rel(self.last_act), rel(self.last_col), rel(self.last_arr), rel(self.last_buf),
                         rel(self.last_rd), rel(self.last_wr),
                         self.last_bg, self.last_ab, self.last_wr_bg)

    def _pre_ok(self, b: int) -> float:
        L = self.L
        return max(self.act[b] + L[PRE_AFTER_ACT], self.rd[b] + L[PRE_AFTER_RD],
                   _after(self.wr[b], self.C[PRE_AFTER_WR]))

    def _advance(self, end: float) -> float:
        d = max(end - self.end, 0.0)
        self.end = max(self.end, end)
        return d

    def column(self, b: int, row: int, n: int, write: bool, allbank: bool, wait: bool = False,
               spacing: float | None = None, buffer: bool = False) -> float:
        """A column record (WR, GWRITE, COMP, READRES; `buffer`: a GWRITE, a
        global-buffer write); returns the time it adds."""
        self.budget -= 1
        if self.budget < 0:
            raise _Unsettled
        L = self.L
        bg = b // self.per_bg
        need = row >= 0 and self.open[b] != row
        if need:                        # PRE (if open) + ACT under tRC / tRRD / tFAW
            ready = self._pre_ok(b) + L[ACT_AFTER_PRE] if self.open[b] >= 0 else self.ready[b]
            a = max(ready, self.act[b] + L[ACT_AFTER_ACT], self.bg_act[bg] + L[ACT_AFTER_ACT_BG],
                    self.last_act + L[ACT_AFTER_ACT_CH],
                    min(self.faw) + L[ACT_WINDOW])
            self.open[b], self.act[b], self.bg_act[bg] = row, a, a
            self.last_act = max(self.last_act, a)
            self.faw[self.faw.index(min(self.faw))] = a
        rcd = L[WR_AFTER_ACT] if write else L[RD_AFTER_ACT]
        t0 = self.act[b] + rcd if need else max(self.act[b] + rcd, 0.0)
        gap = L[column_gap(self.last_ab, allbank, bg == self.last_bg)]
        t0 = max(t0, self.last_col + gap)
        if write:
            t0 = max(t0, _after(self.last_rd, self.C[WR_AFTER_RD]))
        else:
            t0 = max(t0, _after(self.last_wr, self.C[RD_AFTER_WR_L if bg == self.last_wr_bg else RD_AFTER_WR_S]))
        if wait:
            t0 = max(t0, self.end)
        sp = L[column_spacing(allbank, False)] if (allbank or spacing is None) else spacing
        last = t0 + (n - 1) * sp
        if allbank:
            end = last + L[END_AB]
        elif write:
            end = _after(last, self.C[END_WR])
        else:
            end = _after(last, self.C[END_RD])
        if write:
            self.wr[b], self.last_wr, self.last_wr_bg = last, last, bg
        else:
            self.rd[b], self.last_rd = last, last
        self.last_col, self.last_bg, self.last_ab = last, bg, allbank
        if buffer:
            self.last_buf = last
        else:
            self.last_arr = last
        return self._advance(end)

    def gwrite_run(self, banks: list, count: int) -> float:
        """`count` GWRITE columns (global-buffer writes, no row) to banks[j %
        len(banks)] in turn; returns the time they add.  Once a whole round
        of the banks issued at the column gap after its predecessor, every
        further column does too: what else bounds a buffer write (its bank's
        ACT + tRCD, the read-to-write turnaround) is fixed during the run
        and already below the rising column time, so the rest is added in
        closed form (exact; a load writes up to kv ki cc = 128 columns)."""
        nb, d, steady, j = len(banks), 0.0, 0, 0
        bgs = [b // self.per_bg for b in banks]
        # the gap between two columns of the run: one bank group, or every column in another one
        gap = self.L[GAP_L] if nb == 1 else (self.L[GAP_S] if len(set(bgs)) == nb else None)
        while j < count:
            before = self.last_col
            d += self.column(banks[j % nb], -1, 1, True, False, buffer=True)
            j += 1
            steady = steady + 1 if (j > 1 and gap is not None and self.last_col == before + gap) else 0
            if steady >= nb and j < count:
                r = count - j                   # the rest, each one column gap after the last
                last = self.last_col + r * gap
                for q in range(min(nb, count)):
                    self.wr[banks[(count - 1 - q) % nb]] = last - q * gap
                bg = bgs[(count - 1) % nb]
                self.last_col = self.last_wr = self.last_buf = last
                self.last_bg = self.last_wr_bg = bg
                return d + self._advance(_after(last, self.C[END_WR]))
        return d

    def prea(self) -> float:
        L = self.L
        opened = [self._pre_ok(b) for b in range(len(self.open)) if self.open[b] >= 0]
        # in order after the last column [PREA_AFTER_COL: 0]; tRTP_L after an all-bank one (>= 0)
        t_pre = max(opened + [0.0, self.last_col + (L[PREALL_AFTER_AB] if self.last_ab else L[PREA_AFTER_COL])])
        for b in range(len(self.open)):
            self.open[b], self.ready[b] = -1, t_pre + L[ACT_AFTER_PRE]
        return self._advance(t_pre + L[END_PREA])

    def g_act(self, row: int, stagger: float) -> float:
        L = self.L
        ready = max(self._pre_ok(b) + L[ACT_AFTER_PRE] if self.open[b] >= 0 else self.ready[b]
                    for b in range(len(self.open)))
        # after the last column; after the last GWRITE only under ACTAB_AFTER_BUF (off: GWRITE latency hiding)
        a = max(ready, max(self.act) + L[ACT_AFTER_ACT],
                max(self.last_arr + L[ACTAB_AFTER_COL], self.last_buf + L[ACTAB_AFTER_BUF])) + stagger
        for b in range(len(self.open)):
            self.open[b], self.act[b] = row, a
        return self._advance(a + L[END_ACTAB])


UNIT_PERIODS = 4096
"""The longest period of units `_walk` looks for (a pass of units: b x vector groups)."""


def _period(sig: list, most: int = 64) -> int:
    """Smallest p <= most with sig[1:] p-periodic (1 when there is none)."""
    for p in range(1, min(most, len(sig)) + 1):
        if sig[1 + p:] == sig[1:len(sig) - p]:
            return p
    return 1


def _run_units(units: list, sig: list, run, buckets: list, state_of, shift=None, period: int = 1,
               steady: bool = True) -> None:
    """Run `units` in order (run(u) adds to buckets), skipping steady stretches.

    sig[k]: what distinguishes unit k's commands (equal signatures, equal
    commands up to row numbers); state_of(): the timing state relative to
    the stream's end.  When a period of units leaves the state as the
    previous period left it (shifted by its time) and the next periods have
    the same signatures, each of them adds the same time again: the rules
    are deterministic and see the same inputs.  Those periods are added
    without running them (`shift(dt, last)` moves the state on by their
    total and to where the last skipped unit leaves it; kernel units need
    none, as every one starts by closing the rows and nothing reads an
    absolute time).  steady=False runs every unit (the benchmark's
    reference)."""
    n = len(units)
    if not steady:
        for u in units:
            run(u)
        return
    k = 0
    prev = None
    while k < n:
        if k + period > n:
            for u in units[k:]:
                run(u)
            return
        before = list(buckets)
        for u in units[k:k + period]:
            run(u)
        k += period
        snap = state_of()
        same = k >= 2 * period and sig[k - 2 * period:k - period] == sig[k - period:k]
        if prev is not None and same and snap == prev:
            delta = [x - y for x, y in zip(buckets, before)]
            reps = 0
            while k + (reps + 1) * period <= n and \
                    sig[k + reps * period:k + (reps + 1) * period] == sig[k - period:k]:
                reps += 1
            if reps:
                for j in range(len(buckets)):
                    buckets[j] += reps * delta[j]
                k += reps * period
                if shift is not None:
                    shift(reps * sum(delta), units[k - 1])
            prev = None
            continue
        prev = snap


def _host_writes(ch: _Channel, buckets: list, seg_base, seg_cols, t_in: int, cc: int, cols: int, banks_used: int,
                 per_bg: int, interleave_limit: int, horizon: float, steady: bool) -> np.ndarray:
    """`_walk`'s leading rearrangement: the host writes every column a COMP
    reads (flat column indices, returned), the banks in turn, in rounds
    (skipping steady stretches), then a PREA; adds their time to
    buckets[PRE]."""
    read = np.zeros(int(seg_base.max()) + cc + 1, bool)
    for i in range(t_in):
        base = seg_base[:, :, i].ravel()
        idx = (base[:, None] + np.arange(int(seg_cols[i]))[None, :]).ravel()
        read[idx] = True
    flat = np.nonzero(read)[0]
    order = bank_order(list(range(banks_used)), per_bg)
    if len(flat) * banks_used <= interleave_limit:     # one column per record
        spans = [(int(r), 1) for r in flat // cols]
        spacing = None
    else:                                               # runs inside a row, streamed across bank groups
        first, lengths = row_runs(flat, cols)
        spans = [(int(r), int(m)) for r, m in zip(first // cols, lengths)]
        spacing = ch.L[SPACE_S] if streamed(Op.WR, order, per_bg) == Op.WR_S else None

    def write_round(span):
        r, m = span
        for b in order:
            buckets[PRE] += ch.column(b, r, m, True, False, spacing=spacing)
    # a round's signature: its width and whether it opens a row (a row holds up to `cols` columns)
    round_sig = [(m, k == 0 or r != spans[k - 1][0]) for k, (r, m) in enumerate(spans)]

    def skip_rounds(dt, last):
        ch.shift(dt)
        for b in order:                 # every bank wrote the last skipped round's row
            ch.open[b] = last[0]
    _run_units(spans, round_sig, write_round, buckets, lambda: ch.snapshot(horizon), skip_rounds,
               period=_period(round_sig), steady=steady)
    buckets[PRE] += ch.prea()
    return flat


def _walk(key: tuple, banks_used: int, t: dict, banks: int, per_bg: int, cols: int,
          n_bg: int, rr_bursts: int, interleave_limit: int, steady: bool = True,
          compiled: tuple | None = None, class_cores: int = 0,
          budget: float = np.inf) -> tuple[float, float, float, float, int]:
    """(leading rearrangement, rearrangement inside the kernel, compute,
    read-back) cycles of one group's stream, refresh left out, and the
    columns the host writes to the group (compiled: `_compiled(t)`, if the
    caller has it).

    class_cores > 0: single-bank (per-core) commands, each pass commanding
    `class_cores` banks (0, 1, ...: which ones moves tRRD_L / tRRD_S
    between their ACTs, and little else: COMPs are all-bank class, READRES
    waits for everything): per segment run, a
    COMP per bank and vector, each opening the bank's row itself (an ACT
    under tRRD / tFAW, no G_ACT), and a READRES per bank.  Every bank of a
    class is taken to hold every segment: the lowering skips a bank's
    segments without matrix data (the edges of a halo-widened box) and
    READRES of latches it does not need, so the walk is approximate there
    (mostly above; a skipped READRES can leave a PREA waiting tRTP_AB).
    budget: column records to time at most
    (`_Unsettled` past it)."""
    n_b, n_v, n_o, n_rc, cc, t_in, kv, ki, lo, is_flow, passes = key
    n_vg, n_ig, n_ob = -(-n_v // kv), -(-t_in // ki), -(-n_o // lo)
    dataflow = "is" if is_flow else "os"
    seg_base, _ = segments(n_b, n_o, t_in, cc, n_rc, ki, lo, dataflow, True, cols)
    seg_cols = np.minimum(cc, n_rc - np.arange(t_in) * cc)
    ch = _Channel(t, banks, per_bg, compiled, budget)
    # no timing rule looks further back than the sum of the constraints (and the G_ACT stagger)
    horizon = 4.0 * (sum(t[k] for k in RULE_FIELDS) + n_bg * ch.L[ACT_WINDOW])
    # ---- host writes of every column a COMP reads, the banks in turn -----------------
    buckets = [0.0, 0.0, 0.0, 0.0]
    flat = _host_writes(ch, buckets, seg_base, seg_cols, t_in, cc, cols, banks_used, per_bg, interleave_limit,
                        horizon, steady)
    # ---- the kernel -----------------------------------------------------------------------
    gw_banks = [g * per_bg for g in range(n_bg)]
    per_row = max(1, cols // max(1, cc))                 # segments a row holds
    stagger = (n_bg - 1) * ch.L[ACT_WINDOW]
    # single-bank passes command banks 0 .. class_cores - 1 (which banks a class holds moves mainly
    # tRRD_L / tRRD_S between its ACTs; the same banks every pass lets equal passes be skipped)
    state = {"loaded": None, "open": None, "pre": True, "banks": list(range(min(class_cores, banks)))}

    def kernel_state():
        return ch.snapshot(horizon), state["open"] is None, state["pre"]

    def add(k, d):
        # GWRITEs before the first G_ACT still count as leading rearrangement (the `pre` flag)
        buckets[PRE if (state["pre"] and k == K_REARR) else k] += d

    def load(p, bb, vg, ig):
        if state["loaded"] == (p, bb, vg, ig):
            return
        if state["open"] is not None:
            add(COMPUTE, ch.prea())
            state["open"] = None
        chunks = [ig * ki + ji for ji in range(ki) if ig * ki + ji < t_in]
        width = int(max(seg_cols[i] for i in chunks))
        add(K_REARR, ch.gwrite_run(gw_banks, kv * ki * width))
        state["loaded"] = (p, bb, vg, ig)

    def comp(bb, o, i, vg):
        jvs = min(kv, n_v - vg * kv)
        for row, _, m, _ in bank_runs(int(seg_base[bb, o, i]), int(seg_cols[i]), cols):   # a run per row
            if class_cores:             # single-bank COMPs: each opens its own bank's row
                for b in state["banks"]:
                    for _ in range(jvs):
                        add(COMPUTE, ch.column(b, row, m, False, True))
                state["open"] = row
                state["pre"] = False
                continue
            if state["open"] != row:
                add(COMPUTE, ch.g_act(row, stagger))
                state["open"] = row
                state["pre"] = False
            for _ in range(jvs):
                add(COMPUTE, ch.column(0, row, m, False, True))

    def readres():
        if class_cores:                 # each bank's latches, from its open row
            for b in state["banks"]:
                add(READBACK, ch.column(b, ch.open[b], rr_bursts, False, False, wait=True))
            return
        row = -1 if state["open"] is None else state["open"]
        add(READBACK, ch.column(0, row, rr_bursts, False, False, wait=True))

    def step(bb, vg, ob, ig):
        for i in range(ig * ki, min(t_in, (ig + 1) * ki)):      # the group's chunks x the block's outputs
            for o in range(ob * lo, min(n_o, (ob + 1) * lo)):
                comp(bb, o, i, vg)

    def last_row(bb, ob, i_last):
        """Row of the last segment block ob visits (its last output, chunk i_last)."""
        return (int(seg_base[bb, min(n_o, (ob + 1) * lo) - 1, i_last]) + int(seg_cols[i_last]) - 1) // cols

    def blocks(bb, body, seg_per_block, block_sig, i_last):
        """body(ob) for every output block, skipping steady stretches: blocks
        repeat their rows' pattern every per_row / gcd(segments, per_row) blocks."""
        period = per_row // gcd(seg_per_block, per_row)

        def skip(dt, ob):
            ch.shift(dt)
            state["open"] = last_row(bb, ob, i_last)
            for b in range(banks):      # the banks the block's COMPs opened hold its last row
                if ch.open[b] >= 0:
                    ch.open[b] = state["open"]
        _run_units(list(range(n_ob)), block_sig, body, buckets, kernel_state, skip, period=period, steady=steady)

    def unit(u):
        p, bb, vg = u
        outs = [min(lo, n_o - ob * lo) for ob in range(n_ob)]
        if not is_flow:
            def os_block(ob):
                for ig in range(n_ig):
                    load(p, bb, vg, ig)
                    step(bb, vg, ob, ig)
                readres()
            # a block loads its chunks unless one load serves them all (then only the first)
            blocks(bb, os_block, lo * t_in, [(outs[ob], n_ig > 1 or ob == 0) for ob in range(n_ob)], t_in - 1)
        else:
            for ig in range(n_ig):
                load(p, bb, vg, ig)

                def is_block(ob, ig=ig):
                    step(bb, vg, ob, ig)
                    readres()
                last_i = min(t_in, (ig + 1) * ki) - 1
                blocks(bb, is_block, lo * (last_i - ig * ki + 1), outs, last_i)

    # units (pass, b, vector group) each start with a buffer load (a PREA closes the rows) and
    # read their b's segments: alike when they hold as many vectors (the last vector group may
    # be partial) and their b's segments sit alike in the rows (b's first segment at the same
    # place in a row: always when every b fills whole rows)
    units = [(p, bb, vg) for p in range(passes) for bb in range(n_b) for vg in range(n_vg)]
    unit_sig = [(min(kv, n_v - vg * kv), (bb * n_o * t_in) % per_row) for _, bb, vg in units]
    unit(units[0])              # its leading GWRITEs count as leading rearrangement: alone
    # compared a period of units at a time: a b whose segments end mid-row alternates the next b's
    # place in the row (b's signatures 0, 16, 0, 16, ...), which unit-by-unit never repeats
    # (smallest period over the whole sequence: with several passes of b's whose place in the row cycles, a pass)
    _run_units(units[1:], unit_sig[1:], unit, buckets, kernel_state, period=_period(unit_sig[1:], UNIT_PERIODS),
               steady=steady)
    return (*buckets, int(len(flat) * banks_used))


# `_cached` walks with the compiled form (`walk.walk`); False: with `_walk` (the definition; tests compare the two)
NATIVE = True


def _walk_native(key: tuple, banks_used: int, t: dict, banks: int, per_bg: int, cols: int,
                 n_bg: int, rr_bursts: int, interleave_limit: int, steady: bool = True,
                 compiled: tuple | None = None, class_cores: int = 0,
                 budget: float = np.inf, consts: tuple | None = None) -> tuple[float, float, float, float, int]:
    """`_walk` (same arguments, same result, `_Unsettled` past the budget),
    its loops compiled (`walk.py`): the set-up here, the walk there.
    consts: `_native_consts(t, compiled, n_bg)`, from a caller that walks
    many plans under one timing."""
    from .walk import walk
    n_b, n_v, n_o, n_rc, cc, t_in, kv, ki, lo, is_flow, passes = key
    seg_base, seg_cols, first, lengths, n_read, flat = _layout_reads(n_b, n_o, t_in, cc, n_rc, ki, lo, bool(is_flow),
                                                                     cols)
    L, C, horizon = consts if consts is not None else _native_consts(t, compiled, n_bg)
    order, stream = _write_order(banks_used, per_bg)
    if n_read * banks_used <= interleave_limit:        # one column per record
        if flat is None:                                # (a limit above the lowering's)
            flat = np.repeat(first - np.cumsum(lengths) + lengths, lengths) + np.arange(n_read)
        span_row, span_len = flat // cols, np.ones(n_read, np.int64)
        spacing = np.nan
    else:                                               # runs inside a row, streamed across bank groups
        span_row, span_len = first // cols, lengths
        spacing = float(L[SPACE_S]) if stream else np.nan
    buckets, unsettled = walk(n_b, n_v, n_o, n_rc, cc, t_in, kv, ki, lo, bool(is_flow), passes, seg_base, seg_cols,
                              span_row, span_len, order, spacing, L, C, banks, per_bg, cols, n_bg, rr_bursts,
                              class_cores, horizon, bool(steady), float(budget), UNIT_PERIODS)
    if unsettled:
        raise _Unsettled
    return (*(float(x) for x in buckets), int(n_read * banks_used))


def _native_consts(t: dict, compiled: tuple | None, n_bg: int) -> tuple:
    """(latencies [N_LAT], chains [N_LAT, CHAIN] as float64 arrays, `_walk`'s horizon) of timing t."""
    L, C = compiled if compiled is not None else _compiled(t)
    L, C = np.asarray(L, np.float64), np.asarray(C, np.float64)
    return L, C, float(4.0 * (sum(t[k] for k in RULE_FIELDS) + n_bg * float(L[ACT_WINDOW])))


@lru_cache(maxsize=256)
def _write_order(banks_used: int, per_bg: int) -> tuple[np.ndarray, bool]:
    """The banks in the host's write order (`bank_order`) and whether its
    runs stream across bank groups (`streamed`)."""
    order = bank_order(list(range(banks_used)), per_bg)
    out = np.asarray(order, np.int64)
    out.flags.writeable = False
    return out, streamed(Op.WR, order, per_bg) == Op.WR_S


@lru_cache(maxsize=4096)
def _layout_reads(n_b, n_o, t_in, cc, n_rc, ki, lo, is_flow: bool, cols):
    """The data-block layout of a plan and the columns its COMPs read, which
    walks of one geometry share (other vectors, passes, banks): (seg_base
    [n_b, n_o, t_in], seg_cols [t_in], the read columns' row runs -- first
    flat column [R], length [R] (`commands.row_runs`) -- and how many columns
    they hold, and those columns one by one when they are few (else None)).
    Read-only arrays."""
    from .walk import read_runs
    seg_base, _ = segments(n_b, n_o, t_in, cc, n_rc, ki, lo, "is" if is_flow else "os", True, cols)
    seg_cols = np.minimum(cc, n_rc - np.arange(t_in) * cc).astype(np.int64)
    first, lengths = read_runs(seg_base, seg_cols, cols)
    n = int(lengths.sum())
    # every column, for walks that write one column per record (a few thousand at most)
    flat = np.repeat(first - np.cumsum(lengths) + lengths, lengths) + np.arange(n) if n <= 4096 else None
    for a in (seg_cols, first, lengths, flat):
        if a is not None:
            a.flags.writeable = False
    return seg_base, seg_cols, first, lengths, n, flat


def newton_phases(plan: dict, banks_used, per_core, backend, max_walked: int = 400_000,
                  steady: bool = True, busy=None) -> dict:
    """Per-group phase cycles of Newton drafts, refresh left out ([n] float64
    each: "pre" leading rearrangement, "k_rearr" GWRITE time inside the
    kernel, "compute", "readback", and "wr_cols" the host columns written;
    NaN for a stream whose walk times more than `max_walked` column records,
    one that does not settle into a steady state -- a bound on the work,
    where the size of the stream is none: 6.5 M COMP records settle after a
    few thousand).

    plan: `newton_plan`'s arrays; banks_used [n]: cores per group of the
    draft (the host writes every one of a broadcast draft); per_core [n]
    bool: single-bank commands, to busy // passes cores a pass, the host
    writing the busy ones (busy [n]: the fullest group's cores with work,
    default banks_used); steady=False walks every command (slow; the reference of
    `benchmarks/newton_time_bench.py`)."""
    from .commands import INTERLEAVE_LIMIT
    t = {f: float(getattr(backend.timing, f)) for f in backend.timing._dynamic_fields}
    g = backend.group
    banks, per_bg = g.banks, g.banks_per_bank_group
    n_bg = max(1, banks // per_bg)
    cols = backend.core.cols
    n = len(banks_used)
    out = {k: np.full(n, np.nan) for k in ("pre", "k_rearr", "compute", "readback", "wr_cols")}
    busy = np.asarray(banks_used if busy is None else busy, np.int64)
    # single-bank drafts write only the cores that COMP (`lower._Stream.reads`), broadcast ones every core
    banks_used = np.where(np.asarray(per_core, bool), busy, np.asarray(banks_used, np.int64))
    # cores a single-bank pass commands (0: broadcast): the classes share the busy cores, as
    # the counts (`newton_counts`) take them
    m = np.where(np.asarray(per_core, bool), np.maximum(busy // np.maximum(np.asarray(plan["passes"], np.int64), 1), 1),
                 0)
    keys = np.stack([np.asarray(plan[k], np.int64) for k in PLAN_KEYS]
                    + [np.asarray(banks_used, np.int64), m], 1)
    walk = _cached(t, banks, per_bg, cols, n_bg, backend, INTERLEAVE_LIMIT, steady, max_walked)
    # one walk per distinct plan (a table of thousands of drafts has a few hundred)
    uniq, inv = unique_rows(keys)
    got = np.full((len(uniq), 5), np.nan)
    for u, key in enumerate(uniq.tolist()):
        res = walk(tuple(key))
        if res is not None:
            got[u] = res
    got = got[np.asarray(inv).reshape(-1)]
    for j, name in enumerate(("pre", "k_rearr", "compute", "readback", "wr_cols")):
        out[name][:] = got[:, j]
    return out


_WALKS: dict = {}


def _cached(t, banks, per_bg, cols, n_bg, backend, limit, steady=True, budget=np.inf):
    """One memoised walk per backend timing, core and group (drafts of one shape share plans;
    the tuner and the labeller featurise the same shapes again); a walk
    past `budget` column records gives None."""
    # the whole Core and Group (frozen, hashed by value): the walk reads the geometry and, through
    # `readres_bursts`, the read-back width -- a key of chosen fields once missed `readres_bytes`, so a
    # variant without read-back bus time handed its walks to the backend timed next
    key = (tuple(sorted(t.items())), backend.core, backend.group, n_bg, limit, steady, budget)
    if key not in _WALKS:
        if len(_WALKS) >= 8:            # a timing sweep: keep the memory bounded
            _WALKS.clear()
        compiled = _compiled(t)         # once per timing, not per draft
        consts = _native_consts(t, compiled, n_bg)

        @lru_cache(maxsize=65536)
        def walk(k):
            pk = dict(zip(PLAN_KEYS, k))
            rr = int(readres_bursts(backend, pk["kv"] * pk["lo"], k[-1] > 0))
            try:
                if NATIVE:
                    return _walk_native(k[:len(PLAN_KEYS)], k[-2], t, banks, per_bg, cols, n_bg, rr, limit, steady,
                                        compiled, class_cores=k[-1], budget=budget, consts=consts)
                return _walk(k[:len(PLAN_KEYS)], k[-2], t, banks, per_bg, cols, n_bg, rr, limit, steady, compiled,
                             class_cores=k[-1], budget=budget)
            except _Unsettled:
                return None
        _WALKS[key] = walk
    return _WALKS[key]


def draft_plans(op, table, shapes, backend, matrix: int | None = None) -> tuple[dict, np.ndarray, np.ndarray]:
    """`newton_phases`' inputs for every draft of `table`: (plan, cores per
    group [n]: as drafted for broadcast drafts, the busy ones for per-core
    drafts, as `features._newton` passes them; per-core flags [n]).  matrix: the
    operand kept in the banks, as the lowering option (None: the larger)."""
    sets = dimension_sets(op)
    mi, vi = matrix_and_vector(op, shapes, matrix)
    cores = np.asarray(table.cores)
    vv = set(op.operands[vi].vars)
    geo = newton_geometry(op, vv, sets, table.reps, table.tile, table.groups, cores)
    plan = newton_plan(op, set(op.operands[mi].vars), vv, geo["lens"], table.column("dataflow"),
                       table.column("buffers"), geo["passes"], backend)
    per_core = table.column("granularity") == 1
    return plan, np.where(per_core, geo["busy"].prod(axis=1), cores.prod(axis=1)), per_core
