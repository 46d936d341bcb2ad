"""The DRAM timing constraints of every command-driven backend, declared once
as data (Ramulator 2.1 style), and their compilation to a dense latency
vector that every timing engine reads.

Each `Rule` says: a command of a kind in `next` issues no earlier than
`latency` cycles after the latest earlier command of a kind in `prev` at
`level`.  The engines (`sim/cycles.py`'s scan, `sim/native.py`'s compiled
loop, `backends/newton/time.py`'s closed-form walk) keep the state these
rules look at in their own data structures, but take every latency from
`compile_rules(timing)[..., RULE]`; `sim/reference.py` is the readable
specification: it times each command as the maximum over the rules of
this table, in a loop over `RULES`.

Command kinds (`KINDS`).  A record of `sim/timing.py` issues some of:

    ACT     a row activation of one bank (implicit, before a column record
            to a closed / other row)
    ACTAB   an all-bank activation (ACTAB, Newton G_ACT): ACT in every bank,
            outside the tRRD / tFAW bookkeeping of single-bank ACTs
    PRE     a precharge of one bank (implicit, before its ACT)
    PREA    a precharge of every bank (PREA)
    PREREF  the precharge of every bank a refresh starts with
    REF     the refresh itself
    RD, WR  column read / write of one bank (host access, MACBK...)
    BUFWR   a column write to a channel's global buffer (Newton GWRITE): a
            WR on the data bus and the column pipeline (every column rule
            treats it as one), which touches no bank
    PIM_RD, PIM_WR  all-bank column commands (MACAB, COMP, PIM_RD / PIM_WR)
    SIDE    a data-movement command on AttAcc's separate datapath
    FIXED   a fixed-latency command (AttAcc SFM)
    END     not a command: when a record's work is done (its data is back,
            its rows are open / closed) -- the record's end time

Levels.  Where the latest `prev` command is looked up:

    bank       the latest `prev` command to the addressed bank (a
               precharge rule applies only to banks that are open: closing
               a closed bank is a no-op);
    bankgroup  the latest `prev` command to the addressed bank group;
    channel    the latest `prev` command to the channel (the PIM group's
               banks: a channel / pseudo-channel); with `window=w` the w-th
               latest (tFAW: the fourth-last ACT).

`among` (channel level) names a family of kinds: the rule looks at the
latest command of the family and applies only when that one's kind is in
`prev`; `bank_group` = "same" / "other" restricts it further to a latest
command that went to the same / another bank group as the next one.  So
the column spacing is decided by the previous column command alone (tCCD_AB
between two all-bank commands, else tCCD_L within a bank group, tCCD_S
across), not -- as Ramulator's bank-group level would -- by the latest
column to the next one's bank group.

`unless` names a 0 / 1 `Timing` field that switches the rule off: where it
is 1 the rule's compiled latency is `NEVER`, so it never binds (a hardware
option as data: `Timing.gwrite_hiding` drops BUF_ACT, the G_ACT's wait for
the GWRITEs before it -- PIMFlow §4.1's GWRITE latency hiding).

A latency is an expression over `Timing` fields: `+`, `-`, `*`, numbers
and `max(...)`.  `compile_rules` evaluates them left to right in the dtype
and with the leading axes of the timing leaves (numpy floats or jnp
arrays, vmappable), so an engine adding a compiled latency to a time does
the same arithmetic wherever it runs.

Not constraints but read with them (`SCHEDULE`): the refresh interval
`tREFI`, the first refresh deadline `tREF0` (0: tREFI) and `tREFW`, the
window after an ACT in which a due refresh lets further activations go
first (`sim/timing.py`, 1).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

import numpy as np

NEVER = -1.0e7
""""Long ago": the time of a command that was never issued (float32-exact,
far below any latency's reach)."""

KINDS = ("ACT", "ACTAB", "PRE", "PREA", "PREREF", "REF", "RD", "WR", "BUFWR", "PIM_RD", "PIM_WR", "SIDE", "FIXED",
         "END")
LEVELS = ("bank", "bankgroup", "channel")

# families of kinds
ACTS = ("ACT", "ACTAB")
PRECHARGES = ("PRE", "PREA", "PREREF")
READS = ("RD", "PIM_RD")
WRITES = ("WR", "BUFWR", "PIM_WR")
BANK_COLUMNS = ("RD", "WR", "BUFWR")
ALLBANK_COLUMNS = ("PIM_RD", "PIM_WR")
COLUMNS = BANK_COLUMNS + ALLBANK_COLUMNS
ARRAY_COLUMNS = ("RD", "WR") + ALLBANK_COLUMNS      # the columns that touch the banks (not BUFWR)


@dataclass(frozen=True)
class Rule:
    """`next` issues >= latest `prev` at `level` + `latency` (see the module
    docstring for `window`, `among`, `bank_group` and `unless`)."""
    name: str
    level: str
    prev: tuple[str, ...]
    next: tuple[str, ...]
    latency: str
    window: int = 1
    among: tuple[str, ...] | None = None
    bank_group: str | None = None
    unless: str | None = None
    note: str = ""

    @property
    def family(self) -> tuple[str, ...]:
        """The kinds whose latest command the rule looks at."""
        return self.among if self.among is not None else self.prev


RULES: tuple[Rule, ...] = (
    # ---- precharge: when a bank may close (open banks only) ------------------------------------
    Rule("RAS", "bank", ACTS, PRECHARGES, "tRAS", note="ACT -> PRE"),
    Rule("RTP", "bank", READS, PRECHARGES, "tRTP_S", note="read -> PRE"),
    Rule("WR_PRE", "bank", WRITES, PRECHARGES, "tWL + tBL + tWR", note="write recovery"),
    Rule("RTP_AB", "channel", ALLBANK_COLUMNS, ("PREA", "PREREF"), "tRTP_L", among=COLUMNS,
         note="an all-bank MAC before a PREA (attacc.md MACAB -> PREA nRTP_L)"),
    # ---- activation ------------------------------------------------------------------------------
    Rule("RP", "bank", PRECHARGES, ACTS, "tRP", note="PRE -> ACT"),
    Rule("RP_REF", "channel", ("PREREF",), ("REF",), "tRP", note="a refresh's REF, tRP after its own precharge"),
    Rule("RFC", "bank", ("REF",), ACTS, "tRFC", note="refresh -> ACT"),
    Rule("RC", "bank", ACTS, ACTS, "tRC", note="ACT -> ACT, one bank"),
    Rule("RRD_L", "bankgroup", ("ACT",), ("ACT",), "tRRD_L"),
    Rule("RRD_S", "channel", ("ACT",), ("ACT",), "tRRD_S"),
    Rule("FAW", "channel", ("ACT",), ("ACT",), "tFAW", window=4,
         note="four activations per window; Newton / AiM's G_ACT0..3 (STAGGER) are one per bank group, "
              "tFAW apart"),
    # ---- columns ---------------------------------------------------------------------------------
    Rule("RCD_RD", "bank", ACTS, READS, "tRCDRD"),
    Rule("RCD_WR", "bank", ACTS, WRITES, "tRCDWR"),
    Rule("CCD_AB", "channel", ALLBANK_COLUMNS, ALLBANK_COLUMNS, "tCCD_AB", among=COLUMNS,
         note="all-bank -> all-bank column: the MAC cadence"),
    Rule("CCD_L", "channel", BANK_COLUMNS, COLUMNS, "tCCD_L", among=COLUMNS, bank_group="same"),
    Rule("CCD_L_AB", "channel", ALLBANK_COLUMNS, BANK_COLUMNS, "tCCD_L", among=COLUMNS, bank_group="same"),
    Rule("CCD_S", "channel", BANK_COLUMNS, COLUMNS, "tCCD_S", among=COLUMNS, bank_group="other"),
    Rule("CCD_S_AB", "channel", ALLBANK_COLUMNS, BANK_COLUMNS, "tCCD_S", among=COLUMNS, bank_group="other"),
    Rule("RTW", "channel", READS, WRITES, "tCL + tBL + tRTRS - tWL", note="read -> write turnaround"),
    Rule("WTR_L", "channel", WRITES, READS, "tWL + tBL + tWTR_L", bank_group="same",
         note="write -> read turnaround"),
    Rule("WTR_S", "channel", WRITES, READS, "tWL + tBL + tWTR_S", bank_group="other"),
    Rule("COL_ORDER", "channel", ARRAY_COLUMNS, ("ACTAB", "PREA", "FIXED"), "0",
         note="issued in order after the last column"),
    Rule("BUF_ORDER", "channel", ("BUFWR",), ("PREA", "FIXED"), "0",
         note="issued in order after the last global-buffer write"),
    Rule("BUF_ACT", "channel", ("BUFWR",), ("ACTAB",), "0", unless="gwrite_hiding",
         note="a G_ACT waits for the GWRITEs before it; off with GWRITE latency hiding (PIMFlow §4.1: "
              "the G_ACT issues while the buffer is written)"),
    # ---- AttAcc's data-movement datapath -----------------------------------------------------------
    Rule("SIDE_GAP", "channel", ("SIDE",), ("SIDE",), "max(tBL, tCCD_S)", note="the channel's data bus"),
    Rule("SIDE_BG", "bankgroup", ("SIDE",), ("SIDE",), "tCCD_L"),
    # ---- completion: when a record's work is done --------------------------------------------------
    Rule("RD_END", "channel", ("RD",), ("END",), "tCL + tBL", note="read data back"),
    Rule("WR_END", "channel", ("WR", "BUFWR"), ("END",), "tWL + tBL", note="write data in"),
    Rule("AB_END", "channel", ALLBANK_COLUMNS, ("END",), "tCCD_AB", note="an all-bank command's slot"),
    Rule("ACTAB_END", "channel", ("ACTAB",), ("END",), "tRCDRD", note="the rows are readable"),
    Rule("PREA_END", "channel", ("PREA",), ("END",), "tRP", note="the banks are closed"),
    Rule("SIDE_END", "channel", ("SIDE",), ("END",), "max(tBL, tCCD_S)"),
)

SCHEDULE: tuple[tuple[str, str], ...] = (("REFI", "tREFI"), ("REF0", "tREF0"), ("REFW", "tREFW"))
"""Entries of the compiled vector that are not constraints: (name, expression)."""

NAMES = tuple(r.name for r in RULES) + tuple(n for n, _ in SCHEDULE)
# indices into the compiled vector (module constants: numba folds them)
(RAS, RTP, WR_PRE, RTP_AB, RP, RP_REF, RFC, RC, RRD_L, RRD_S, FAW, RCD_RD, RCD_WR, CCD_AB, CCD_L, CCD_L_AB, CCD_S,
 CCD_S_AB, RTW, WTR_L, WTR_S, COL_ORDER, BUF_ORDER, BUF_ACT, SIDE_GAP, SIDE_BG, RD_END, WR_END, AB_END, ACTAB_END,
 PREA_END, SIDE_END, REFI, REF0, REFW) = range(len(NAMES))
N_LAT = len(NAMES)


def _parse(expr: str):
    tree = ast.parse(expr, mode="eval").body
    names = set()

    def check(node):
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult)):
            check(node.left)
            check(node.right)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "max" \
                and node.args and not node.keywords:
            for a in node.args:
                check(a)
        elif isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            pass
        else:
            raise ValueError(f"dram_rules: unsupported latency expression {expr!r} ({ast.dump(node)})")
    check(tree)
    return tree, names


_EXPRS = tuple(_parse(r.latency) for r in RULES) + tuple(_parse(e) for _, e in SCHEDULE)
_SWITCHES = tuple(r.unless for r in RULES if r.unless is not None)
PARAMS = tuple(sorted(set().union(*(names for _, names in _EXPRS), _SWITCHES)))
"""The Timing fields the rules read (latencies and `unless` switches)."""


def _check_table() -> None:
    from .core import Timing
    fields = set(Timing.__dataclass_fields__)
    for r, (_, names) in zip(RULES, _EXPRS):
        if r.level not in LEVELS:
            raise ValueError(f"rule {r.name}: level {r.level!r} not in {LEVELS}")
        for k in r.prev + r.next + (r.among or ()):
            if k not in KINDS:
                raise ValueError(f"rule {r.name}: unknown command kind {k!r} (kinds: {KINDS})")
        if r.among is not None and not set(r.prev) <= set(r.among):
            raise ValueError(f"rule {r.name}: prev {r.prev} must lie in among {r.among}")
        if r.bank_group not in (None, "same", "other") or (r.bank_group and r.level != "channel"):
            raise ValueError(f"rule {r.name}: bank_group is 'same' / 'other' on a channel-level rule")
        if r.window < 1 or (r.window > 1 and r.level != "channel"):
            raise ValueError(f"rule {r.name}: a window applies to a channel-level rule")
        unknown = (names | ({r.unless} if r.unless else set())) - fields
        if unknown:
            raise ValueError(f"rule {r.name}: {sorted(unknown)} are not Timing fields")
    if len(set(NAMES)) != len(NAMES):
        raise ValueError("dram_rules: rule names must be unique")


_check_table()


def _is_jax(v) -> bool:
    return type(v).__module__.startswith("jax") or hasattr(v, "aval")


def compile_rules(t, dtype=None, rules=None):
    """The dense latency vector of `RULES` (then `SCHEDULE`): [..., N_LAT],
    entry k the latency of rule k (index constants RAS, RP, ... FAW, ...).
    rules: another table of `Rule`s to compile instead of `RULES` (an
    edited table, as `hw.dram_phases.derive` resolves one): [..., len(rules)
    + len(SCHEDULE)].

    t: a `Timing` or a mapping of its fields (any of them; at least
    `PARAMS`) to numbers, numpy arrays or jnp arrays / tracers; leaves with
    leading axes (stacked variants) broadcast together and give a
    [..., N_LAT] result.  Each expression is evaluated left to right on the
    leaves (cast to `dtype` when given, e.g. float32 for the scan), with jnp
    when any leaf is a jax value, else numpy."""
    get = (lambda f: t[f]) if hasattr(t, "keys") else (lambda f: getattr(t, f))
    table, exprs, params = (RULES, _EXPRS, PARAMS) if rules is None else _table(rules)
    raw = {f: get(f) for f in params}
    use_jax = any(_is_jax(v) for v in raw.values())
    if use_jax:
        import jax.numpy as xp
    else:
        xp = np
    vals = {f: xp.asarray(v) if dtype is None else xp.asarray(v, dtype) for f, v in raw.items()}
    shape = np.broadcast_shapes(*(np.shape(v) for v in vals.values()))
    out_dtype = xp.result_type(*(v.dtype for v in vals.values())) if dtype is None else dtype

    def ev(node):
        if isinstance(node, ast.BinOp):
            a, b = ev(node.left), ev(node.right)
            return a + b if isinstance(node.op, ast.Add) else a - b if isinstance(node.op, ast.Sub) else a * b
        if isinstance(node, ast.Call):
            out = ev(node.args[0])
            for a in node.args[1:]:
                out = xp.maximum(out, ev(a))
            return out
        if isinstance(node, ast.Name):
            return vals[node.id]
        return xp.asarray(node.value, out_dtype)
    cols = [xp.broadcast_to(xp.asarray(ev(tree), out_dtype), shape) for tree, _ in exprs]
    # a rule switched off by its `unless` field (1) never binds: its latency is "long ago"
    for k, r in enumerate(table):
        if r.unless is not None:
            cols[k] = xp.where(vals[r.unless] != 0, xp.asarray(NEVER, out_dtype), cols[k]).astype(out_dtype)
    return xp.stack(cols, axis=-1)


def _table(rules) -> tuple:
    """(rules, parsed expressions then SCHEDULE's, the Timing fields they read) of an edited table."""
    rules = tuple(rules)
    exprs = tuple(_parse(r.latency) for r in rules) + tuple(_parse(e) for _, e in SCHEDULE)
    params = set().union(*(names for _, names in exprs), (r.unless for r in rules if r.unless is not None))
    return rules, exprs, tuple(sorted(params))


def _terms(node) -> list:
    """A left-to-right sum `a + b + c - d` as its signed terms [(+1, a), (+1, b),
    (+1, c), (-1, d)]; any other expression is one term."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        return _terms(node.left) + [(1 if isinstance(node.op, ast.Add) else -1, node.right)]
    return [(1, node)]


def _chain_len(tree) -> int:
    terms = _terms(tree)
    return len(terms) if all(isinstance(n, ast.Name) for _, n in terms) else 1


CHAIN_LEN = tuple(_chain_len(tree) for tree, _ in _EXPRS)
"""Terms in each entry's chain (`compile_chains`; the rest of the row is zeros)."""
CHAIN = max(CHAIN_LEN)
"""Terms of the longest latency chain."""


def compile_chains(t, dtype=None):
    """The latencies as chains of terms: [..., N_LAT, CHAIN], row k the signed
    terms of rule k's expression when it is a sum (`tCL + tBL + tRTRS - tWL`
    -> [tCL, tBL, tRTRS, -tWL]), else its value, padded with zeros.  An engine
    that adds a latency to a time term by term (time + c[0] + c[1] + ...)
    rounds exactly as `time + tCL + tBL + tRTRS - tWL` written out does: the
    float32 scan keeps the evaluation order it had when it restated the rule.
    Same arguments as `compile_rules`."""
    summed = compile_rules(t, dtype)
    xp = np if isinstance(summed, np.ndarray) else __import__("jax").numpy
    get = (lambda f: t[f]) if hasattr(t, "keys") else (lambda f: getattr(t, f))
    vals = {f: xp.asarray(get(f)) if dtype is None else xp.asarray(get(f), dtype) for f in PARAMS}
    zero = xp.zeros_like(summed[..., 0])
    rows = []
    for k, (tree, _) in enumerate(_EXPRS):
        terms = _terms(tree)
        if CHAIN_LEN[k] > 1 or isinstance(tree, ast.Name):
            col = [xp.broadcast_to(vals[n.id] if sign > 0 else -vals[n.id], zero.shape).astype(zero.dtype)
                   for sign, n in terms]
        else:
            col = [summed[..., k]]
        rows.append(xp.stack(col + [zero] * (CHAIN - len(col)), axis=-1))
    return xp.stack(rows, axis=-2)


def rules_table() -> str:
    """The table as text (level, prev -> next, latency), one rule a line."""
    lines = []
    for r in RULES:
        where = r.level + (f" [{r.bank_group} bank group]" if r.bank_group else "") + \
            (f" window {r.window}" if r.window > 1 else "")
        off = f"  (off where {r.unless} = 1)" if r.unless else ""
        lines.append(f"{r.name:10s} {where:30s} {','.join(r.prev):22s} -> {','.join(r.next):24s} {r.latency}{off}")
    return "\n".join(lines)
