"""A slow, obviously correct event model of the timing semantics in
`timing.py`, in plain Python, used only by tests to check `cycles`.

One `Bank` object per bank and a `Channel` with the group-wide state; every
record is handled by readable code that follows the numbered rules of the
`timing.py` docstring one by one.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..hw.dram_rules import NEVER
from ..lower.program import Phase
from .timing import (ACT_ALL, ALLBANK, BARRIER, CLASS_TABLE, COLUMN, DATA_BUS, FIXED, PRE_ALL, SIDE, STAGGER,
                     STREAM, WAIT, WRITE)



@dataclass
class Bank:
    open_row: int = -1
    t_act: float = NEVER
    t_rd: float = NEVER
    t_wr: float = NEVER
    t_ready: float = 0.0

    def earliest_precharge(self, t) -> float:
        return max(self.t_act + t["tRAS"], self.t_rd + t["tRTP_S"],
                   self.t_wr + t["tWL"] + t["tBL"] + t["tWR"])


@dataclass
class Channel:
    banks: list
    banks_per_bg: int
    bg_act: list
    last_act: float = NEVER
    acts: list = field(default_factory=lambda: [NEVER] * 4)   # the tFAW window
    last_col: float = NEVER
    last_col_bg: int = -1
    last_allbank: bool = False
    last_rd: float = NEVER
    last_rd_bg: int = -1
    last_wr: float = NEVER
    last_wr_bg: int = -1
    last_side: float = NEVER
    side_bg: list = field(default_factory=list)    # last data-movement command per bank group
    t_issue: float = NEVER                         # latest issue of a column / side / fixed command
    t_bar: float = NEVER                           # floor set by the last BARRIER
    t_end: float = 0.0
    next_ref: float = 0.0
    ref_end: float = NEVER                         # end of the last refresh: a floor for every later record


def simulate(records: list[dict], t: dict, banks: int, banks_per_bg: int, refresh: bool = True) -> dict:
    """Time a list of records (dicts with op, bank, row, n, phase, resident,
    pre).  Returns the same buckets / end / counts as `cycles.scan_stream`."""
    ch = Channel([Bank() for _ in range(banks)], banks_per_bg, [NEVER] * max(1, banks // banks_per_bg))
    ch.next_ref = t["tREF0"] if t["tREF0"] > 0 else t["tREFI"]
    ch.side_bg = [NEVER] * max(1, banks // banks_per_bg)
    buckets = [0.0] * 5
    counts = [0.0] * 8
    for r in records:
        flags = CLASS_TABLE[r["op"]]
        if r["n"] <= 0:
            continue
        n = float(r["n"])
        is_col = bool(flags[COLUMN])
        write = bool(flags[WRITE])
        allbank = bool(flags[ALLBANK])

        # 1. refresh between records
        floor_t = 0.0
        if refresh and ch.t_end >= ch.next_ref:
            open_banks = [bk for bk in ch.banks if bk.open_row >= 0]
            # precharged like a PREA: tRTP_L after an all-bank MAC
            after_mac = ch.last_col + t["tRTP_L"] if ch.last_allbank else NEVER
            start = max([ch.next_ref, after_mac] + [bk.earliest_precharge(t) for bk in open_banks])
            end_ref = start + t["tRP"] + t["tRFC"]
            for bk in ch.banks:
                bk.open_row = -1
                bk.t_ready = max(bk.t_ready, end_ref)
            missed = (ch.t_end - ch.next_ref) // t["tREFI"]
            ch.next_ref += t["tREFI"] * (1 + missed)
            ch.ref_end = end_ref
            counts[4] += 1
        # commands issue in order: nothing after a refresh starts before it ends
        floor_t = max(floor_t, ch.ref_end)
        # a barrier (WAIT class or a host sync point) holds the whole record
        wait = bool(flags[WAIT]) or r.get("sync", 0) == 1
        if wait:
            floor_t = max(floor_t, ch.t_end)

        end = ch.t_end
        if is_col:
            # 2. open the row if needed
            b = min(max(r["bank"], 0), banks - 1)
            bank = ch.banks[b]
            bg = b // banks_per_bg
            # a column with row < 0 (a buffer access, e.g. Newton GWRITE) opens no row
            need = r["row"] >= 0 and bank.open_row != r["row"]
            if need:
                per_bank = banks if allbank else 1      # an all-bank column opens its row in every bank
                if bank.open_row >= 0:
                    ready = bank.earliest_precharge(t) + t["tRP"]
                    counts[7] += per_bank
                else:
                    ready = bank.t_ready
                ready = max(ready, floor_t)
                t_act = max(ready, bank.t_act + t["tRC"], ch.bg_act[bg] + t["tRRD_L"], ch.last_act + t["tRRD_S"],
                            min(ch.acts) + t["tFAW"])
                bank.open_row, bank.t_act = r["row"], t_act
                ch.bg_act[bg] = t_act
                ch.last_act = max(ch.last_act, t_act)
                ch.acts[ch.acts.index(min(ch.acts))] = t_act
                counts[0] += per_bank
            rcd = t["tRCDWR"] if write else t["tRCDRD"]
            col_ready = bank.t_act + rcd if need else max(bank.t_act + rcd, floor_t)
            # 3. the first column
            if allbank and ch.last_allbank:
                gap = t["tCCD_AB"]
            elif bg == ch.last_col_bg:
                gap = t["tCCD_L"]
            else:
                gap = t["tCCD_S"]
            t0 = max(col_ready, ch.last_col + gap)
            if write:
                t0 = max(t0, ch.last_rd + t["tCL"] + t["tBL"] + t["tRTRS"] - t["tWL"])
            else:
                wtr = t["tWTR_L"] if bg == ch.last_wr_bg else t["tWTR_S"]
                t0 = max(t0, ch.last_wr + t["tWL"] + t["tBL"] + wtr)
            if flags[WAIT]:
                t0 = max(t0, ch.t_end)
            t0 = max(t0, ch.t_bar)            # a barrier holds columns until earlier commands issued
            if allbank:
                spacing = t["tCCD_AB"]
            elif flags[STREAM]:
                spacing = t["tCCD_S"]       # interleaved with other bank groups' runs
            else:
                spacing = t["tCCD_L"]
            t_last = t0 + (n - 1) * spacing
            if allbank:
                end = t_last + t["tCCD_AB"]
            elif write:
                end = t_last + t["tWL"] + t["tBL"]
            else:
                end = t_last + t["tCL"] + t["tBL"]
            if write:
                bank.t_wr = t_last
                ch.last_wr, ch.last_wr_bg = t_last, bg
                counts[3 if allbank else 2] += n
            else:
                bank.t_rd = t_last
                ch.last_rd, ch.last_rd_bg = t_last, bg
                counts[3 if allbank else 1] += n
            ch.last_col, ch.last_col_bg, ch.last_allbank = t_last, bg, allbank
            ch.t_issue = max(ch.t_issue, t_last)
        elif flags[SIDE]:
            bg = min(max(r["bank"], 0), banks - 1) // banks_per_bg
            gap = max(t["tBL"], t["tCCD_S"])
            # the data bus of the channel, tCCD_L within the bank group, the barrier
            s0 = max(ch.last_side + gap, floor_t, ch.side_bg[bg] + t["tCCD_L"], ch.t_bar)
            if flags[WAIT]:
                s0 = max(s0, ch.t_end)
            if flags[FIXED]:
                end = s0 + n
                ch.last_side = s0 + n - gap
            else:
                ch.last_side = s0 + (n - 1) * max(gap, t["tCCD_L"])   # one record = one bank group
                end = ch.last_side + gap
            ch.side_bg[bg] = ch.last_side
            ch.t_issue = max(ch.t_issue, ch.last_side)
        elif flags[FIXED]:
            f0 = max(ch.last_col, ch.t_end, floor_t, ch.t_bar)
            end = f0 + n
            ch.t_issue = max(ch.t_issue, f0 + n - 1)
        elif flags[BARRIER]:
            ch.t_bar = max(ch.t_bar, ch.t_issue + 1)
        elif flags[ACT_ALL]:
            ready = [bk.earliest_precharge(t) + t["tRP"] if bk.open_row >= 0 else bk.t_ready
                     for bk in ch.banks]
            t_act = max(max(ready), max(bk.t_act for bk in ch.banks) + t["tRC"], floor_t, ch.last_col)
            n_bg = len(ch.bg_act)
            if flags[STAGGER]:          # one activation per bank group, tFAW apart
                t_act += (n_bg - 1) * t["tFAW"]
            for bk in ch.banks:
                bk.open_row, bk.t_act = r["row"], t_act
            end = t_act + t["tRCDRD"]
            counts[0] += banks                  # bank activations (Energy.act is per bank)
        elif flags[PRE_ALL]:
            opened = [bk.earliest_precharge(t) for bk in ch.banks if bk.open_row >= 0]
            # an all-bank MAC needs tRTP_L before PREA (attacc.md MACAB -> PREA)
            last_col = ch.last_col + (t["tRTP_L"] if ch.last_allbank else 0.0)
            t_pre = max([NEVER] + opened + [floor_t, last_col])
            for bk in ch.banks:
                bk.open_row = -1
                bk.t_ready = t_pre + t["tRP"]
            end = t_pre + t["tRP"]
            counts[7] += banks

        # 4. attribute the added time to the record's bucket
        delta = max(end - ch.t_end, 0.0)
        if r["resident"] == 1:
            buckets[4] += delta
        elif r["pre"] == 1:
            buckets[0] += delta
        elif r["phase"] == Phase.READBACK:
            buckets[3] += delta
        elif r["phase"] == Phase.REARRANGE:
            buckets[1] += delta
        else:
            buckets[2] += delta
        ch.t_end = max(ch.t_end, end)
        if flags[DATA_BUS]:
            counts[5] += n
        if not flags[BARRIER]:
            counts[6] += n if (is_col or flags[SIDE]) else 1.0
    return {"buckets": buckets, "end": ch.t_end, "counts": counts}
