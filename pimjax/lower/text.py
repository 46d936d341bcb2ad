"""`Program.as_text()`: a readable listing of a command program.

A header with the record counts per opcode and the bytes moved per
direction, then the records of stream 0 with repeat compression: a record's
`n` columns print as one line (`col 0..31`), and consecutive records that
differ only in their addresses collapse into one line with a count.
"""
from __future__ import annotations

import numpy as np

from .program import PROGRAM_TEXT, Op, Phase, Program

PHASE_NAMES = {int(p): p.name.lower() for p in Phase}


def _op_name(code: int) -> str:
    try:
        return Op(int(code)).name
    except ValueError:
        return f"op{int(code)}"


def program_text(program: Program, max_lines: int = 60) -> str:
    """Header + compressed listing (at most `max_lines` listing lines)."""
    rec = program.commands
    op = np.asarray(rec.op)
    n = np.asarray(rec.n)
    live = n > 0
    S, R = op.shape
    lines = [f"program for {program.op.name} on {program.backend_name}: "
             f"{program.groups} groups x {program.cores} cores, {S} stream(s), "
             f"{int(live.sum())} records"]
    counts = {}
    for code in np.unique(op[live]):
        m = live & (op == code)
        counts[_op_name(code)] = (int(m.sum()), int(n[m].sum()))
    lines.append("  records (columns): " + ", ".join(f"{k} {r} ({c})" for k, (r, c) in sorted(counts.items())))
    st = program.stats
    moved = [(k, getattr(st, k)) for k in ("rearrange_bytes", "resident_bytes", "register_bytes",
                                           "readback_bytes", "host_bytes") if getattr(st, k)]
    if moved:
        lines.append("  bytes moved: " + ", ".join(f"{k.replace('_bytes', '')} {v:,}" for k, v in moved))
    # listing of stream 0 with run compression
    fields = {f: np.asarray(getattr(rec, f))[0] for f in ("op", "bank", "row", "col", "n", "phase", "aux", "core")}
    shown = 0
    i = 0
    idx = np.flatnonzero(fields["n"] > 0)
    while i < len(idx) and shown < max_lines:
        r = idx[i]
        j = i + 1
        while (j < len(idx) and fields["op"][idx[j]] == fields["op"][r] and fields["aux"][idx[j]] == fields["aux"][r]
               and fields["phase"][idx[j]] == fields["phase"][r] and fields["n"][idx[j]] == fields["n"][r]):
            j += 1
        count = j - i
        col = int(fields["col"][r])
        span = f"col {col}" if fields["n"][r] == 1 else f"col {col}..{col + int(fields['n'][r]) - 1}"
        where = f"bank {int(fields['bank'][r])} row {int(fields['row'][r]):#x} {span}"
        core = f" core {int(fields['core'][r])}" if fields["core"][r] >= 0 else ""
        rep = f"   x{count} records" if count > 1 else ""
        lines.append(f"  {_op_name(fields['op'][r]):8} {where}{core} aux {int(fields['aux'][r])} "
                     f"[{PHASE_NAMES.get(int(fields['phase'][r]), '?')}]{rep}")
        shown += 1
        i = j
    if i < len(idx):
        lines.append(f"  ... {len(idx) - i} more records")
    return "\n".join(lines)


PROGRAM_TEXT.append(program_text)
