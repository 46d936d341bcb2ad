"""The phases every DRAM timing engine is built from, each phase's latencies
derived from the rule table `hw.dram_rules.RULES` (Ramulator 2.1's
`populate_timingcons`: the table compiled once, here to rule indices).

An engine (`sim/native.py`'s loops, `sim/cycles.py`'s scan,
`backends/newton/time.py` and `walk.py`) times a record in the same named
phases:

    refresh   a due refresh between records: its precharge of the open
              banks, REF, the banks busy until tRFC after it
    row_open  a column record's implicit PRE + ACT of its bank
    column    the record's first column and the spacing of the rest
    all_bank  ACTAB / G_ACT and PREA over every bank
    side      AttAcc's data-movement datapath and fixed-latency records
    end       when the record's work is done (its END)

Each engine keeps, per level, the latest commands of a few families (per
bank: the last ACT, read, write, ready time; per bank group: the last ACT,
the last data movement; per channel: the last column and its bank group
and kind, the last read / write, the tFAW window...).  A phase reads
"latency of the rule that spaces a `next` command after that state's
command": a `Read`.  Which rule that is, is not written in the engines: it
is resolved here, once, from `RULES` -- the unique rule whose `next` holds
every kind the read covers, at the read's level and window, whose `prev`
holds every kind the engine's state slot may hold, with the read's bank
group relation and `among` family.  The engines index the compiled latency
vector (`dram_rules.compile_rules` / `compile_chains`) with the resolved
constants below (module constants: numba folds them).

So a table edit moves every engine: a latency expression changes the
compiled vector, a rule moved between reads (another level, other kinds)
changes the resolved index.  A rule no read resolves to is an error at
import naming it: a new rule is a table edit plus, at most, the phase that
reads it (and the state it needs).  A read that resolves to no rule, or to
two, is an error too (the engines apply one rule per read; the reference
model, `sim/reference.py`, walks the table itself, and the tests hold the
engines to it).

A read may cover several kinds at once (`next`, `prev` tuples) where the
engines do not tell them apart -- e.g. a column's tRCD is one read for RD,
PIM_RD (both "a read") -- and then every pair must resolve to one rule; or,
with `same_latency`, to rules of one latency expression (the engines read
one slot holding the latest of those kinds: max over kinds of latest +
latency = latest of all + latency when the latencies agree).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from .dram_rules import (
    ACTS,
    ALLBANK_COLUMNS,
    ARRAY_COLUMNS,
    BANK_COLUMNS,
    COLUMNS,
    N_LAT,
    PRECHARGES,
    READS,
    RULES,
    SCHEDULE,
    WRITES,
    Rule,
)

PHASES = ("refresh", "row_open", "column", "all_bank", "side", "end")


@dataclass(frozen=True)
class Read:
    """A phase's read: the latency of the rule that spaces a command of a
    kind in `next` after the latest command of a kind in `prev` at `level`
    (`window`: the w-th latest), for a command to the same / another bank
    group (`bank_group`; None: the engine does not tell them apart, so the
    rule must not either), the rule's `among` family as given."""
    name: str
    next: tuple[str, ...]
    level: str
    prev: tuple[str, ...]
    bank_group: str | None = None
    window: int = 1
    among: tuple[str, ...] | None = None
    same_latency: bool = False      # prev kinds may resolve to several rules of one latency expression


def _r(name, nxt, level, prev, **kw) -> Read:
    as_t = lambda x: (x,) if isinstance(x, str) else tuple(x)      # noqa: E731
    return Read(name, as_t(nxt), level, as_t(prev), **kw)


_PRECHARGE = (   # a bank's earliest precharge: tRAS after its ACT, tRTP after a read, write recovery
    _r("PRE_AFTER_ACT", PRECHARGES, "bank", ACTS),
    _r("PRE_AFTER_RD", PRECHARGES, "bank", READS),
    _r("PRE_AFTER_WR", PRECHARGES, "bank", WRITES),
)
_ACTIVATE = (    # an activation of one bank / every bank
    _r("ACT_AFTER_PRE", ACTS, "bank", PRECHARGES),
    _r("ACT_AFTER_REF", ACTS, "bank", "REF"),
    _r("ACT_AFTER_ACT", ACTS, "bank", ACTS),
)

READS_OF: dict[str, tuple[Read, ...]] = {
    "refresh": _PRECHARGE + (
        # a refresh's precharge after an all-bank column (as a PREA)
        _r("PREALL_AFTER_AB", ("PREA", "PREREF"), "channel", ALLBANK_COLUMNS, among=COLUMNS),
        _r("REF_AFTER_PREREF", "REF", "channel", "PREREF"),
        _r("ACT_AFTER_REF", ACTS, "bank", "REF"),
    ),
    "row_open": _PRECHARGE + _ACTIVATE + (
        _r("ACT_AFTER_ACT_BG", "ACT", "bankgroup", "ACT"),
        _r("ACT_AFTER_ACT_CH", "ACT", "channel", "ACT"),
        _r("ACT_WINDOW", "ACT", "channel", "ACT", window=4),
    ),
    "column": (
        _r("RD_AFTER_ACT", READS, "bank", ACTS),
        _r("WR_AFTER_ACT", WRITES, "bank", ACTS),
        # the gap after the channel's last column, by (its kind, this one's kind, bank groups)
        _r("GAP_L", COLUMNS, "channel", BANK_COLUMNS, bank_group="same", among=COLUMNS),
        _r("GAP_S", COLUMNS, "channel", BANK_COLUMNS, bank_group="other", among=COLUMNS),
        _r("GAP_AB", ALLBANK_COLUMNS, "channel", ALLBANK_COLUMNS, among=COLUMNS),
        _r("GAP_AB_L", BANK_COLUMNS, "channel", ALLBANK_COLUMNS, bank_group="same", among=COLUMNS),
        _r("GAP_AB_S", BANK_COLUMNS, "channel", ALLBANK_COLUMNS, bank_group="other", among=COLUMNS),
        # the spacing of a record's n columns: one kind after itself, to one bank (same bank group),
        # or streamed over alternating bank groups, or all-bank
        _r("SPACE_L", BANK_COLUMNS, "channel", BANK_COLUMNS, bank_group="same", among=COLUMNS),
        _r("SPACE_S", BANK_COLUMNS, "channel", BANK_COLUMNS, bank_group="other", among=COLUMNS),
        _r("SPACE_AB", ALLBANK_COLUMNS, "channel", ALLBANK_COLUMNS, among=COLUMNS),
        # turnarounds after the channel's last read / write
        _r("WR_AFTER_RD", WRITES, "channel", READS),
        _r("RD_AFTER_WR_L", READS, "channel", WRITES, bank_group="same"),
        _r("RD_AFTER_WR_S", READS, "channel", WRITES, bank_group="other"),
    ),
    "all_bank": _PRECHARGE + _ACTIVATE + (
        # ACTAB: in order after the last bank-array column, after the last global-buffer write under BUF_ACT
        _r("ACTAB_AFTER_COL", "ACTAB", "channel", ARRAY_COLUMNS),
        _r("ACTAB_AFTER_BUF", "ACTAB", "channel", "BUFWR"),
        _r("ACT_WINDOW", "ACT", "channel", "ACT", window=4),       # a staggered ACTAB: one per bank group
        # PREA: in order after the last column of any kind; tRTP_L after an all-bank one
        _r("PREA_AFTER_COL", "PREA", "channel", ARRAY_COLUMNS + ("BUFWR",), same_latency=True),
        _r("PREALL_AFTER_AB", ("PREA", "PREREF"), "channel", ALLBANK_COLUMNS, among=COLUMNS),
    ),
    "side": (
        _r("SIDE_AFTER_SIDE", "SIDE", "channel", "SIDE"),
        _r("SIDE_AFTER_SIDE_BG", "SIDE", "bankgroup", "SIDE"),
        # a fixed-latency record: in order after the last column of any kind
        _r("FIXED_AFTER_COL", "FIXED", "channel", ARRAY_COLUMNS + ("BUFWR",), same_latency=True),
    ),
    "end": (
        _r("END_RD", "END", "channel", "RD"),
        _r("END_WR", "END", "channel", ("WR", "BUFWR")),
        _r("END_AB", "END", "channel", ALLBANK_COLUMNS),
        _r("END_ACTAB", "END", "channel", "ACTAB"),
        _r("END_PREA", "END", "channel", "PREA"),
        _r("END_SIDE", "END", "channel", "SIDE"),
    ),
}
"""Per phase, what its engines read (a read shared by two phases is listed in each)."""


def _matches(rule: Rule, read: Read, nxt: str, prev: str) -> bool:
    if nxt not in rule.next or prev not in rule.prev or rule.level != read.level or rule.window != read.window:
        return False
    if rule.among != read.among:
        return False
    # a rule of one bank-group relation binds only reads of that relation; a read of either
    # relation takes a rule that binds both
    return rule.bank_group is None or rule.bank_group == read.bank_group


def resolve(read: Read, rules: tuple[Rule, ...] = RULES) -> int:
    """The index in `rules` of the one rule `read` takes (ValueError naming
    the read when no rule or several distinct ones match a (next, prev)
    pair, or when the pairs disagree)."""
    found = set()
    for nxt in read.next:
        for prev in read.prev:
            hit = [k for k, r in enumerate(rules) if _matches(r, read, nxt, prev)]
            if len(hit) != 1:
                what = "no rule" if not hit else f"rules {[rules[k].name for k in hit]}"
                raise ValueError(f"dram_phases: read {read.name} ({prev} -> {nxt} at {read.level}"
                                 f"{', ' + read.bank_group + ' bank group' if read.bank_group else ''}"
                                 f"{', window %d' % read.window if read.window > 1 else ''}) matches {what}; "
                                 "the engines apply exactly one")
            found.add(hit[0])
    if len(found) > 1:
        latencies = {rules[k].latency for k in found}
        unless = {rules[k].unless for k in found}
        if not read.same_latency or len(latencies) > 1 or len(unless) > 1:
            raise ValueError(f"dram_phases: read {read.name} takes rules {sorted(rules[k].name for k in found)} "
                             "for the kinds it does not tell apart; the engines apply one latency")
    return min(found)


def _covered(read: Read, rules: tuple[Rule, ...]) -> set[int]:
    """Every rule `read` stands for (one; a same-latency read: each of its kinds' rules)."""
    return {j for j, r in enumerate(rules) for nxt in read.next for prev in read.prev if _matches(r, read, nxt, prev)}


def derive(rules: tuple[Rule, ...] = RULES) -> dict[str, int]:
    """Every read's rule index in `rules` ({read name: index}); ValueError
    when a read is ambiguous (`resolve`), when one name resolves two ways
    in two phases, or when a rule is read by no phase."""
    out: dict[str, int] = {}
    used = set()
    for phase in PHASES:
        for read in READS_OF[phase]:
            k = resolve(read, rules)
            if out.setdefault(read.name, k) != k:
                raise ValueError(f"dram_phases: read {read.name} resolves differently in phase {phase}")
            used.update(_covered(read, rules))
    unread = [r.name for k, r in enumerate(rules) if k not in used]
    if unread:
        raise ValueError(f"dram_phases: rules {unread} are read by no phase; add a Read to the phase whose "
                         "command they constrain (and the engines' state it needs)")
    return out


PICKS = derive()
"""{read name: rule index} of `RULES`."""

# the resolved indices as module constants (numba folds them)
(PRE_AFTER_ACT, PRE_AFTER_RD, PRE_AFTER_WR, ACT_AFTER_PRE, ACT_AFTER_REF, ACT_AFTER_ACT, ACT_AFTER_ACT_BG,
 ACT_AFTER_ACT_CH, ACT_WINDOW, PREALL_AFTER_AB, REF_AFTER_PREREF, RD_AFTER_ACT, WR_AFTER_ACT, GAP_L, GAP_S, GAP_AB,
 GAP_AB_L, GAP_AB_S, SPACE_L, SPACE_S, SPACE_AB, WR_AFTER_RD, RD_AFTER_WR_L, RD_AFTER_WR_S, ACTAB_AFTER_COL,
 ACTAB_AFTER_BUF, PREA_AFTER_COL, SIDE_AFTER_SIDE, SIDE_AFTER_SIDE_BG, FIXED_AFTER_COL, END_RD, END_WR, END_AB,
 END_ACTAB, END_PREA, END_SIDE) = (
    PICKS[n] for n in (
        "PRE_AFTER_ACT", "PRE_AFTER_RD", "PRE_AFTER_WR", "ACT_AFTER_PRE", "ACT_AFTER_REF", "ACT_AFTER_ACT",
        "ACT_AFTER_ACT_BG", "ACT_AFTER_ACT_CH", "ACT_WINDOW", "PREALL_AFTER_AB", "REF_AFTER_PREREF", "RD_AFTER_ACT",
        "WR_AFTER_ACT", "GAP_L", "GAP_S", "GAP_AB", "GAP_AB_L", "GAP_AB_S", "SPACE_L", "SPACE_S", "SPACE_AB",
        "WR_AFTER_RD", "RD_AFTER_WR_L", "RD_AFTER_WR_S", "ACTAB_AFTER_COL", "ACTAB_AFTER_BUF", "PREA_AFTER_COL",
        "SIDE_AFTER_SIDE", "SIDE_AFTER_SIDE_BG", "FIXED_AFTER_COL", "END_RD", "END_WR", "END_AB", "END_ACTAB",
        "END_PREA", "END_SIDE"))
assert len(PICKS) == 36, sorted(PICKS)      # every read has its constant above

# the refresh schedule: entries of the compiled vector that are not rules
_SCHED = {n: len(RULES) + k for k, (n, _) in enumerate(SCHEDULE)}
REF_INTERVAL, REF_FIRST, REF_WAVE = _SCHED["REFI"], _SCHED["REF0"], _SCHED["REFW"]


@njit(nogil=True, cache=True, inline="always")
def column_gap(last_allbank, allbank, same_bg):
    """Phase column: the read that spaces a column after the channel's last
    column, by their kinds (all-bank or not) and bank groups (a rule index;
    compiled, and callable from Python)."""
    if last_allbank:
        return GAP_AB if allbank else (GAP_AB_L if same_bg else GAP_AB_S)
    return GAP_L if same_bg else GAP_S


@njit(nogil=True, cache=True, inline="always")
def column_spacing(allbank, streamed):
    """Phase column: the read that spaces a record's n columns: all-bank;
    to alternating bank groups (`streamed`, a host stream); to one bank."""
    return SPACE_AB if allbank else (SPACE_S if streamed else SPACE_L)


def _rows(phase: str) -> np.ndarray:
    idx = sorted(set().union(*(_covered(r, RULES) for r in READS_OF[phase])) | ({REF_INTERVAL, REF_FIRST, REF_WAVE}
                                                            if phase == "refresh" else set()))
    out = np.asarray(idx, np.int64)
    out.flags.writeable = False
    return out


PHASE_ROWS: dict[str, np.ndarray] = {p: _rows(p) for p in PHASES}
"""Per phase, the rows of the compiled latency vector it reads (every rule
its reads stand for, sorted, read-only): `compile_rules(t)[..., PHASE_ROWS[p]]` are its latencies."""


def phase_latencies(lat) -> dict[str, object]:
    """{phase: [..., k] latencies} from a compiled vector lat [..., N_LAT]
    (`dram_rules.compile_rules`, cycles), in `PHASE_ROWS[phase]` order."""
    if lat.shape[-1] != N_LAT:
        raise ValueError(f"phase_latencies: [..., {N_LAT}] compiled latencies expected, got {lat.shape}")
    return {p: lat[..., PHASE_ROWS[p]] for p in PHASES}
