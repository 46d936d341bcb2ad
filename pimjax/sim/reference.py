"""The readable specification of the cycle model: a slow event model that
times every command of a record as the maximum over the DRAM timing rules
of `pimjax.hw.dram_rules.RULES` (a loop over the table), used by tests to
check the engines (`scan.scan_lanes`, `native._stream`).

A record (`timing.py`) issues commands of the table's kinds: a column
record an implicit PRE + ACT when its row is not open, then its `n`
columns; ACTAB / G_ACT an ACTAB (after an implicit PRE of the open banks);
PREA a PREA; a refresh between records a PREREF and a REF.  Each command
issues at

    max(floor, max over the rules r whose `next` holds its kind of
                   latest(r) + latency[r])

where latest(r) is the time of the latest (w-th latest for a window) earlier
command of r's family at r's level -- the addressed bank, its bank group or
the channel -- and r applies when that command's kind is in `prev` (and, for
`bank_group`, it went to the same / another bank group).  `History` keeps
those times.  What is not a DRAM constraint stays here as plain code:
commands issue in order (nothing after a refresh starts before it ends;
a WAIT record or a host sync point waits for every earlier record), the
AttAcc barrier, fixed latencies, and the report buckets and counts.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..hw.dram_rules import (
    ACTAB_END,
    FAW,
    KINDS,
    NEVER,
    PREA_END,
    PRECHARGES,
    REF0,
    REFI,
    REFW,
    RFC,
    RP_REF,
    RULES,
    SIDE_GAP,
    compile_rules,
)
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

ALL = -1   # `bank` of a command to every bank


@dataclass
class History:
    """The commands issued so far, as the rules look them up: per (scope,
    kind) the times of the last `depth` of them, newest last, with their bank
    group.  Scopes: ("bank", b), ("bankgroup", g), ("channel",)."""
    banks: int
    banks_per_bg: int
    depth: int = max(r.window for r in RULES)
    log: dict = field(default_factory=dict)

    def scope(self, level: str, bank: int) -> tuple:
        if level == "bank":
            return ("bank", bank)
        if level == "bankgroup":
            return ("bankgroup", bank // self.banks_per_bg)
        return ("channel",)

    def issue(self, kind: str, time: float, bank: int) -> None:
        """Record a command of `kind` at `time` to `bank` (ALL: every bank)."""
        banks = range(self.banks) if bank == ALL else [bank]
        bg = None if bank == ALL else bank // self.banks_per_bg
        scopes = {s for b in banks for s in (("bank", b), ("bankgroup", b // self.banks_per_bg))} | {("channel",)}
        for s in scopes:
            entries = self.log.setdefault((s, kind), [])
            entries.append((time, bg))
            del entries[:-self.depth]

    def latest(self, rule, bank: int):
        """(time, kind, bank group) of the command `rule` looks at -- the
        latest (the window-th latest) of its family at its level -- for a
        command to `bank`; None when there is none."""
        s = self.scope(rule.level, bank)
        found = [(tm, k, g) for k in rule.family for tm, g in self.log.get((s, k), ())]
        if rule.window == 1:
            return max(found, default=None)          # times differ: (time, kind, group) tuples order by time
        found.sort(key=lambda e: e[0], reverse=True)
        return found[rule.window - 1] if len(found) >= rule.window else None

    def forget(self, kinds) -> None:
        """Drop every bank's history of `kinds`."""
        for key in [key for key in self.log if key[0][0] == "bank" and key[1] in kinds]:
            del self.log[key]


_BY_NEXT = {kind: [(k, r) for k, r in enumerate(RULES) if kind in r.next] for kind in KINDS}


def applies(rule, kind: str, prev_kind: str, same_bg: bool) -> bool:
    """Whether `rule` constrains a `kind` command after a `prev_kind` one."""
    if kind not in rule.next or prev_kind not in rule.prev:
        return False
    return rule.bank_group is None or (rule.bank_group == "same") == same_bg


def earliest(h: History, lat: list, kind: str, bank: int, floor: float = NEVER,
             levels=("bank", "bankgroup", "channel")) -> float:
    """The earliest issue of a `kind` command to `bank` under every rule at
    `levels` (and `floor`): the table, read in a loop."""
    out = floor
    bg = bank // h.banks_per_bg
    for k, rule in _BY_NEXT[kind]:
        if rule.level not in levels:
            continue
        last = h.latest(rule, bank)
        if last is not None and applies(rule, kind, last[1], last[2] == bg):
            out = max(out, last[0] + lat[k])
    return out


def spacing(lat: list, kind: str, interleaved: bool) -> float:
    """The latency between consecutive `kind` commands of one record (to one
    bank; `interleaved`: to alternating bank groups, a host stream)."""
    out = 0.0
    for k, rule in enumerate(RULES):
        if kind in rule.family and applies(rule, kind, kind, not interleaved) \
                and not (interleaved and rule.level != "channel"):
            out = max(out, lat[k])
    return out


def completion(lat: list, kind: str) -> float:
    """A record's end after its last `kind` command (the table's END rules)."""
    return max(lat[k] for k, rule in enumerate(RULES) if applies(rule, "END", kind, True))


@dataclass
class Channel:
    """The in-order issue state that is not a DRAM constraint."""
    open_row: list
    t_issue: float = NEVER                         # latest issue of a column / side / fixed command
    t_bar: float = NEVER                           # floor set by the last BARRIER
    t_end: float = 0.0
    next_ref: float = 0.0
    ref_end: float = NEVER                         # end of the last refresh: a floor for every later record


def _precharge_all(h: History, ch: Channel, lat: list, kind: str, floor: float) -> float:
    """When a PREA / PREREF can close every open bank (closing a closed bank
    is a no-op, so only the open banks' rules apply)."""
    t = earliest(h, lat, kind, 0, floor, levels=("channel",))
    for b, row in enumerate(ch.open_row):
        if row >= 0:
            t = earliest(h, lat, kind, b, t, levels=("bank",))
    return t


def _refresh_waits(h: History, ch: Channel, lat: list, r: dict, banks: int) -> bool:
    """Whether a due refresh waits past record r: r is a single-bank column
    record that opens a row, and its ACT (timed without the refresh) can
    issue before every open bank may be precharged and within tRAS of the
    latest ACT (a wave of fresh activations).  The controller keeps
    issuing while the refresh waits for its precharges (DRAMSim2's
    CommandQueue: the refresh's PREs have priority only once issuable), so a
    wave of fresh activations -- HBM-PIM's park-out -- holds the refresh
    until it ends."""
    flags = CLASS_TABLE[r["op"]]
    b = min(max(r["bank"], 0), banks - 1)
    if not flags[COLUMN] or flags[ALLBANK] or r["row"] < 0 or ch.open_row[b] == r["row"]:
        return False
    start = _precharge_all(h, ch, lat, "PREREF", ch.next_ref)
    hh = History(h.banks, h.banks_per_bg, h.depth, {k: list(v) for k, v in h.log.items()})
    floor_t = max(0.0, ch.ref_end)
    if bool(flags[WAIT]) or r.get("sync", 0) == 1:
        floor_t = max(floor_t, ch.t_end)
    if ch.open_row[b] >= 0:
        hh.issue("PRE", earliest(hh, lat, "PRE", b, levels=("bank",)), b)
    acts = h.log.get((("channel",), "ACT"), ())
    fresh = max((tm for tm, _ in acts), default=NEVER) + lat[REFW]    # tREFW after the latest ACT
    return earliest(hh, lat, "ACT", b, floor_t) < min(start, fresh)


def simulate(records: list[dict], t: dict, banks: int, banks_per_bg: int, refresh: bool = True) -> dict:
    """Time a list of records (dicts with op, bank, row, n, phase, resident,
    pre, sync) under timing parameters t (cycles).  Returns the same buckets
    / end / counts as `scan.scan_stream`."""
    lat = [float(x) for x in compile_rules(t)]
    h = History(banks, banks_per_bg)
    ch = Channel([-1] * banks)
    ch.next_ref = lat[REF0] if lat[REF0] > 0 else lat[REFI]
    n_bg = max(1, banks // banks_per_bg)
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

        # 1. refresh between records: PREREF (like a PREA), REF tRP later,
        # the banks closed until tRFC after it
        if refresh and ch.t_end >= ch.next_ref and not _refresh_waits(h, ch, lat, r, banks):
            start = _precharge_all(h, ch, lat, "PREREF", ch.next_ref)
            h.issue("PREREF", start, ALL)
            t_ref = start + lat[RP_REF]       # tRP after its own precharge
            h.issue("REF", t_ref, ALL)
            ch.open_row = [-1] * banks
            missed = (ch.t_end - ch.next_ref) // lat[REFI]
            ch.next_ref += lat[REFI] * (1 + missed)
            ch.ref_end = t_ref + lat[RFC]
            counts[4] += 1
        # commands issue in order: nothing after a refresh starts before it ends
        floor_t = max(0.0, ch.ref_end)
        # a barrier (WAIT class or a host sync point) holds the whole record
        if bool(flags[WAIT]) or r.get("sync", 0) == 1:
            floor_t = max(floor_t, ch.t_end)

        end = ch.t_end
        if is_col:
            kind = ("PIM_WR" if write else "PIM_RD") if allbank else \
                ("BUFWR" if flags[BUFFER] else "WR") if write else "RD"
            b = min(max(r["bank"], 0), banks - 1)
            # 2. open the row if needed (a column with row < 0, a buffer
            # access such as Newton's GWRITE, opens none)
            need = r["row"] >= 0 and ch.open_row[b] != r["row"]
            if need:
                per_bank = banks if allbank else 1      # an all-bank column opens its row in every bank
                if ch.open_row[b] >= 0:
                    h.issue("PRE", earliest(h, lat, "PRE", b, levels=("bank",)), b)
                    counts[7] += per_bank
                h.issue("ACT", earliest(h, lat, "ACT", b, floor_t), b)
                ch.open_row[b] = r["row"]
                counts[0] += per_bank
            # 3. the first column, then n columns `spacing` apart
            t0 = earliest(h, lat, kind, b, floor_t)
            if flags[WAIT]:
                t0 = max(t0, ch.t_end)
            t0 = max(t0, ch.t_bar)            # a barrier holds columns until earlier commands issued
            t_last = t0 + (n - 1) * spacing(lat, kind, bool(flags[STREAM]))
            end = t_last + completion(lat, kind)
            h.issue(kind, t_last, b)
            counts[3 if allbank else 2 if write else 1] += n
            ch.t_issue = max(ch.t_issue, t_last)
        elif flags[SIDE]:
            b = min(max(r["bank"], 0), banks - 1)
            s0 = max(earliest(h, lat, "SIDE", b, floor_t), ch.t_bar)
            if flags[WAIT]:
                s0 = max(s0, ch.t_end)
            if flags[FIXED]:                  # n cycles of its own (SFM)
                end = s0 + n
                last = s0 + n - lat[SIDE_GAP]
            else:                             # one record = one bank group
                last = s0 + (n - 1) * spacing(lat, "SIDE", False)
                end = last + completion(lat, "SIDE")
            h.issue("SIDE", last, b)
            ch.t_issue = max(ch.t_issue, last)
        elif flags[FIXED]:
            f0 = max(earliest(h, lat, "FIXED", 0, floor_t, levels=("channel",)), ch.t_end, ch.t_bar)
            end = f0 + n
            ch.t_issue = max(ch.t_issue, f0 + n - 1)
        elif flags[BARRIER]:
            ch.t_bar = max(ch.t_bar, ch.t_issue + 1)
        elif flags[ACT_ALL]:
            # the open banks precharge first; every bank's rules then hold the ACTAB
            for b in range(banks):
                if ch.open_row[b] >= 0:
                    h.issue("PRE", earliest(h, lat, "PRE", b, levels=("bank",)), b)
            t_act = earliest(h, lat, "ACTAB", 0, floor_t, levels=("channel",))
            for b in range(banks):
                t_act = earliest(h, lat, "ACTAB", b, t_act, levels=("bank",))
            if flags[STAGGER]:          # one activation per bank group, tFAW apart
                t_act += (n_bg - 1) * lat[FAW]
            h.issue("ACTAB", t_act, ALL)
            ch.open_row = [r["row"]] * banks
            end = t_act + lat[ACTAB_END]
            counts[0] += banks                  # bank activations (Energy.act is per bank)
        elif flags[PRE_ALL]:
            t_pre = _precharge_all(h, ch, lat, "PREA", floor_t)
            # the engines keep one ready time per bank, which a PREA sets
            # afresh (a PREA with no open bank may issue before the last one)
            h.forget(PRECHARGES + ("REF",))
            h.issue("PREA", t_pre, ALL)
            ch.open_row = [-1] * banks
            end = t_pre + lat[PREA_END]
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
