"""PIMFlow's Ramulator fork as a timing engine: the controller semantics of
`newton(simulator="pimflow")` (`Group.controller = "pimflow"`).

PIMFlow's artifact times its Newton command traces with a Ramulator fork
(`src/GDDR6.cpp` lines 349-386, `src/Controller.{h,cpp}`), and
`../shared/reference/pimflow.csv` holds what it measured.  Its controller is
not pimjax's DRAM model (`hw.dram_rules`, the default `Group.controller =
"dram"`): it issues the channel's PIM commands in order from one queue (FCFS),
one command per cycle, under a handful of command-to-command latencies, and
keeps no bank state for them.  This module declares those latencies as data
(`FORK_RULES`, each cited to the fork's source) and times a Newton program's
record streams under them, with the same outputs as the DRAM engines
(`sim.native.time_streams`: per-stream report buckets, end time, counts), so
`sim.cycles` builds its report the same way.

How a Newton program's records map to the fork's commands:

* a run of consecutive GWRITE records (one buffer load) is one GWRITE
  command (the fork's GWRITE / GWRITE_2 / GWRITE_4: one command, no data-bus
  time of its own);
* G_ACT is G_ACT0..3, one per bank group (the fork's trace format);
* a COMP record of n columns is n COMP commands; READRES is one command (a
  slot: the fork charges it no bus time; `Core.readres_bytes = 0` gives it
  n = 0, so it is timed here whatever its n);
* PREA records are dropped: the fork's G_ACT leaves open banks open and
  charges no precharge (its lambda opens only closed banks), and it issues
  PREA only before a refresh;
* host writes (WR / WR_S, the placement of a non-resident matrix: the fork
  has none) are column writes one tCCD_S apart.

Refresh (`src/Refresh.cpp`, `Controller::tick`): a refresh falls due every
tREFI cycles; the controller serves due refreshes only right after it
issued a READRES (its `refresh_mode`), as a PREA (when a bank is open) and
a REF tRP later; the next G_ACT0 waits tRFC after the REF, other commands
do not wait for it.  The stream ends when the last READRES's data is back
(tCL + tBL after it, the fork's `readres_latency`).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ...hw.dram_rules import BUF_ACT, CCD_S, FAW, NEVER, RC, RCD_RD, RD_END, REFI, RFC, RP
from ...lower.program import Op, Phase

# the fork's command kinds
KINDS = ("GWRITE", "G_ACT", "COMP", "READRES", "PREA", "REF", "WR")

FORK_RULES = (
    # (name, preceding, following, latency over the Timing fields; "gw": 1 with GWRITE latency
    #  hiding, else 32 tCCD_S -- GDDR6.cpp: c = 32 * nCCDS under RAMULATOR_DISABLE_GWRITE_LATENCY_HIDING)
    ("GW_GW", "GWRITE", "GWRITE", "gw"),                 # GDDR6.cpp: GWRITE -> GWRITE c
    ("GW_ACT", "GWRITE", "G_ACT", "gw"),                 # GWRITE -> G_ACT0..3 c
    ("GW_COMP", "GWRITE", "COMP", "tRC + 16"),           # GWRITE -> COMP nRC + 16
    ("PREA_ACT", "PREA", "G_ACT", "tRP"),                # PREA -> G_ACT0 nRP
    ("ACT_ACT", "G_ACT", "G_ACT", "tFAW"),               # G_ACT0 -> G_ACT1 -> G_ACT2 -> G_ACT3 nFAW
    ("ACT_COMP", "G_ACT", "COMP", "tRCDRD"),             # G_ACTi -> COMP nRCDR
    ("COMP_COMP", "COMP", "COMP", "tCCD_S"),             # COMP -> COMP nCCDS
    ("COMP_RR", "COMP", "READRES", "1"),                 # COMP -> READRES 1
    ("RR_GW", "READRES", "GWRITE", "6"),                 # READRES -> GWRITE 6
    ("REF_ACT", "REF", "G_ACT", "tRFC"),                 # REF -> G_ACT0 nRFC
    ("PREA_REF", "PREA", "REF", "tRP"),                  # PREA -> REF nRP (Ramulator's rank-level rule)
    ("REF_REF", "REF", "REF", "tRFC"),                   # REF -> REF nRFC
    ("WR_WR", "WR", "WR", "tCCD_S"),                     # host column writes (no fork rule: the bus rate)
    ("RR_END", "READRES", "END", "tCL + tBL"),           # Newton READRES depart: clk + nCL + nBL
)
"""The fork's Newton controller as data: each command issues no earlier than
`latency` cycles after the latest earlier command of kind `preceding` (and
one cycle after the previous command of the channel)."""
N_FORK = len(FORK_RULES) + 1
(GW_GW, GW_ACT, GW_COMP, PREA_ACT, ACT_ACT, ACT_COMP, COMP_COMP, COMP_RR, RR_GW, REF_ACT, PREA_REF, REF_REF,
 WR_WR, RR_END, F_REFI) = range(N_FORK)


def compile_fork(lat: np.ndarray) -> np.ndarray:
    """[..., N_FORK] float64 fork latencies (FORK_RULES order, then tREFI)
    from compiled DRAM rule latencies [..., N_LAT] (`dram_rules.compile_rules`:
    the Timing fields read back from the rules that hold them alone)."""
    lat = np.asarray(lat, np.float64)
    hiding = lat[..., BUF_ACT] <= NEVER / 2           # BUF_ACT is switched off by Timing.gwrite_hiding
    p = dict(tRC=lat[..., RC], tRP=lat[..., RP], tFAW=lat[..., FAW], tRCDRD=lat[..., RCD_RD],
             tCCD_S=lat[..., CCD_S], tRFC=lat[..., RFC], tCL_tBL=lat[..., RD_END])
    gw = np.where(hiding, 1.0, 32.0 * p["tCCD_S"])
    vals = dict(GW_GW=gw, GW_ACT=gw, GW_COMP=p["tRC"] + 16.0, PREA_ACT=p["tRP"], ACT_ACT=p["tFAW"],
                ACT_COMP=p["tRCDRD"], COMP_COMP=p["tCCD_S"], COMP_RR=np.ones_like(gw), RR_GW=6.0 + 0.0 * gw,
                REF_ACT=p["tRFC"], PREA_REF=p["tRP"], REF_REF=p["tRFC"], WR_WR=p["tCCD_S"], RR_END=p["tCL_tBL"])
    out = np.stack([np.broadcast_to(vals[r[0]], gw.shape) for r in FORK_RULES] + [lat[..., REFI]], -1)
    return np.ascontiguousarray(out, np.float64)


_GWRITE, _G_ACT, _COMP, _READRES, _PREA = int(Op.GWRITE), int(Op.G_ACT), int(Op.COMP), int(Op.READRES), int(Op.PREA)
_WR, _WR_S = int(Op.WR), int(Op.WR_S)
_READBACK, _REARRANGE = int(Phase.READBACK), int(Phase.REARRANGE)


@njit(nogil=True, cache=True)
def _stream(rec, seg_lo, seg_hi, seg_rep, f, banks, bank_groups, refresh, buckets, counts):
    """Time the records of `rec` ([8, M], `sim.native.RECORD_FIELDS`) that
    segments k = seg_lo[k]:seg_hi[k] give, each run seg_rep[k] times in turn
    (a stream is one segment run once; a packed channel, its per-load
    template run once per load), under fork latencies f [N_FORK]; adds each
    command's time to buckets [5] (as the DRAM engines) and the commands to
    counts [8]; returns the end time."""
    t = -1.0                                   # the latest issue: one command per cycle
    l_gw = l_rr = l_comp = l_ref = l_prea = l_wr = NEVER
    l_act = np.full(bank_groups, NEVER)
    opened = False
    prev_gw = False
    t_end = 0.0
    next_ref = f[F_REFI]
    for k in range(seg_lo.shape[0]):
        for _ in range(seg_rep[k]):
            for i in range(seg_lo[k], seg_hi[k]):
                op = rec[0, i]
                n = rec[3, i]
                if n <= 0 and op != _READRES:          # padding, resident placement dropped from the steady state
                    continue
                end = t_end
                if op == _GWRITE:
                    if not prev_gw:                    # a load's columns are one command
                        t = max(t + 1.0, max(l_gw + f[GW_GW], l_rr + f[RR_GW]))
                        l_gw = t
                        end = t + 1.0
                        counts[6] += 1.0
                    counts[5] += n
                    prev_gw = True
                else:
                    prev_gw = False
                    if op == _G_ACT:
                        t = max(t + 1.0, max(max(l_gw + f[GW_ACT], l_ref + f[REF_ACT]), l_prea + f[PREA_ACT]))
                        l_act[0] = t
                        for g in range(1, bank_groups):
                            t = max(t + 1.0, max(l_act[g - 1] + f[ACT_ACT], l_gw + f[GW_ACT]))
                            l_act[g] = t
                        opened = True
                        end = t + 1.0
                        counts[0] += banks
                        counts[6] += bank_groups
                    elif op == _COMP:
                        ready = max(l_gw + f[GW_COMP], l_act.max() + f[ACT_COMP])
                        for _ in range(n):
                            t = max(t + 1.0, max(l_comp + f[COMP_COMP], ready))
                            l_comp = t
                        end = t + 1.0
                        counts[3] += n
                        counts[6] += n
                    elif op == _READRES:
                        t = max(t + 1.0, l_comp + f[COMP_RR])
                        l_rr = t
                        end = t + f[RR_END]
                        counts[6] += 1.0
                        if refresh:
                            due = 0
                            while t >= next_ref:
                                due += 1
                                next_ref += f[F_REFI]
                            if due > 0:
                                if opened:
                                    t = t + 1.0
                                    l_prea = t
                                    opened = False
                                    counts[7] += banks
                                    counts[6] += 1.0
                                for _ in range(due):
                                    t = max(t + 1.0, max(l_prea + f[PREA_REF], l_ref + f[REF_REF]))
                                    l_ref = t
                                    counts[4] += 1.0
                                    counts[6] += 1.0
                    elif op == _WR or op == _WR_S:
                        for _ in range(n):
                            t = max(t + 1.0, l_wr + f[WR_WR])
                            l_wr = t
                        end = t + 1.0
                        counts[2] += n
                        counts[5] += n
                        counts[6] += n
                    else:
                        continue                       # PREA and the rest: the fork issues none
                delta = max(end - t_end, 0.0)
                if rec[5, i] == 1:
                    buckets[4] += delta
                elif rec[6, i] == 1:
                    buckets[0] += delta
                elif rec[4, i] == _READBACK:
                    buckets[3] += delta
                elif rec[4, i] == _REARRANGE:
                    buckets[1] += delta
                else:
                    buckets[2] += delta
                t_end = max(t_end, end)
    return t_end


@njit(nogil=True, cache=True)
def _streams(rec, starts, stops, tix, table, banks, bank_groups, refresh, buckets, end, counts):
    one = np.ones(1, np.int64)
    for s in range(starts.shape[0]):
        end[s] = _stream(rec, starts[s:s + 1], stops[s:s + 1], one, table[tix[s]], banks, bank_groups, refresh,
                         buckets[s], counts[s])


def time_repeated(rec: np.ndarray, seg_lo, seg_hi, seg_rep, table: np.ndarray, banks: int, per_bg: int,
                  refresh: bool = True) -> float:
    """End time of one stream given as template segments of `rec` ([8, M]),
    segment k = rec[:, seg_lo[k]:seg_hi[k]] run seg_rep[k] times in turn,
    under the fork's controller (`table`: `native.timing_table`'s chains, one
    timing row).  The same as timing the segments written out (a packed
    channel's loads repeat one template; `packed.stream_cycles`), without
    writing them out."""
    from ...sim.native import latencies
    f = compile_fork(latencies(np.asarray(table, np.float64)))[0]
    buckets, counts = np.zeros(5), np.zeros(8)
    return float(_stream(np.ascontiguousarray(rec, np.int32), *(np.ascontiguousarray(a, np.int64) for a in
                                                                (seg_lo, seg_hi, seg_rep)),
                         f, int(banks), max(1, int(banks) // max(1, int(per_bg))), bool(refresh), buckets, counts))


def time_streams(rec: np.ndarray, starts: np.ndarray, stops: np.ndarray, tix: np.ndarray, table: np.ndarray,
                 banks: int, per_bg: int, refresh: bool, threads: int | None = None) -> dict:
    """`sim.native.time_streams` under the fork's controller: the same
    arguments (table: the DRAM latency chains [V, N_LAT, CHAIN] of
    `native.timing_table`, from which the fork's latencies are compiled) and
    outputs ({"buckets": [S, 5], "end": [S], "counts": [S, 8]})."""
    from ...sim.native import latencies
    rec = np.ascontiguousarray(rec, np.int32)
    starts, stops, tix = (np.ascontiguousarray(a, np.int64) for a in (starts, stops, tix))
    S = starts.shape[0]
    if S and (starts.min() < 0 or (stops < starts).any() or stops.max() > rec.shape[1]):
        raise ValueError(f"fork time_streams: streams must lie in the {rec.shape[1]} records")
    f = compile_fork(latencies(np.asarray(table, np.float64)))
    if S and (tix.min() < 0 or tix.max() >= f.shape[0]):
        raise ValueError(f"fork time_streams: timing rows 0..{f.shape[0] - 1}, got {tix.min()}..{tix.max()}")
    buckets, end, counts = np.zeros((S, 5)), np.zeros(S), np.zeros((S, 8))
    _streams(rec, starts, stops, tix, f, int(banks), max(1, int(banks) // max(1, int(per_bg))), bool(refresh),
             buckets, end, counts)
    return {"buckets": buckets, "end": end, "counts": counts}
