"""The disagreement between DCC's simulator and pimjax's default configurations, command class by
command class (issue 51, item 4), for the DCC Fig. 6 / 7 notebook.

    python experiments/dcc_command_classes.py

Writes experiments/data/dcc_command_classes.json: `command_class_table()`'s
rows (GEMV (1, 32, 128, 512), RED (1, 4096) on AttAcc and HBM-PIM, VA (1, 4096) on HBM-PIM, x host
writes / mode changes / MAC / all-bank / read-back / refresh) and the seconds taken; the notebook
`experiments/notebooks/dcc_fig6_fig7_kernels.py` reads it (≈ 4 s with numba's cache warm, a minute
cold).  `tests/test_dcc_figures.py` recomputes it in a slow test.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from experiments.dcc_figures import (  # noqa: E402  (the repository root on the path first, as a script)
    CATALOGUE,
    DCC_FORK,
    RESIDENT,
    attacc_system,
    catalogue_shape,
    dcc_baseline_tiling,
    dcc_shape,
    dcc_trace_missing,
    hbm_pim_system,
)

OUT = os.path.join(HERE, "data", "dcc_command_classes.json")



COMMAND_CLASSES = ("host writes", "mode changes", "MAC / all-bank", "read-back", "refresh")
CLASS_CASES = (("attacc", "gemv", 1, 512), ("attacc", "red", 1, 4096),
               ("hbm-pim", "gemv", 1, 512), ("hbm-pim", "red", 1, 4096), ("hbm-pim", "va", 1, 4096))
"""(backend, kernel, batch, size) of the command-class table: GEMV (1, 32, 128, 512), RED (1, 4096) and
VA (1, 4096) in DCC's shapes; VA on HBM-PIM only (DCC's AttAcc fork has no VA generator)."""

# What the reference simulators do per class, and which configuration that supports: Samsung's
# PIMSimulator for HBM-PIM (../shared/reference/hbm-pim.md), AttAcc's simulator for AttAcc
# (../shared/reference/attacc.md).  Keys (backend, class) or (backend, class, kernel) for a
# kernel-specific entry; values (what the reference does, which of the two it supports).
REFERENCE_SAYS = {
    ("hbm-pim", "host writes", "gemv"): (
        "hbm-pim.md: weights pre-placed (not timed); the vector is broadcast into GRF_A by 8 WRs per 128 inputs "
        "(row 0x3fff), tCCD_L apart", "default (GRF_A broadcasts; DCC stages LD + ST into every bank)"),
    ("hbm-pim", "host writes"): (
        "hbm-pim.md: ADD / RELU operands 'already resident' in the PIM figure (a, b at rows 0, 128 of every "
        "bank); only the non-PIM run streams them", "neither (both write the operands per call here)"),
    ("hbm-pim", "mode changes"): (
        "hbm-pim.md: a fixed frame on every kernel -- park-in 16 RD, SB->HAB 4 WR, CRF 1 WR, HAB->HAB_PIM 1 WR, "
        "HAB_PIM->HAB 1 WR, HAB->SB 2 WR, park-out 16 RD", "default (DCC charges none)"),
    ("hbm-pim", "MAC / all-bank"): (
        "hbm-pim.md: one all-bank PIM column command drives all 8 units of a pCH, timed to bank 0/1 of bank "
        "group 0, so tCCD_L = 4 apart", "default (DCC issues a per-bank command per op, 2 cycles each)"),
    ("hbm-pim", "read-back"): (
        "hbm-pim.md: host single-bank RDs, one 32 B burst per output (16 lane partials), the host sums the "
        "lanes (181 cycles for GEMV, outside the PIM figure)", "default (DCC writes, ST, result columns)"),
    ("hbm-pim", "refresh"): (
        "hbm-pim.md: all-bank refresh, tRFC 350 every tREFI 3900 per rank (~364 cycles each, 1 ns)",
        "default's constants (DCC's fork: nRFC 456 every 5070 cycles of 0.769 ns); both charge refresh"),
    ("attacc", "host writes", "gemv"): (
        "attacc.md: the query goes from the host into the GEMV buffers by WRGB (d/16 per head per channel); "
        "K / V resident", "default (WRGB from the host; DCC stages LD + ST into every bank, then WRGB)"),
    ("attacc", "host writes"): (
        "attacc.md: no RED kernel; its plain GEMV writes x into the GEMV buffers (K/16 WRGB), W resident",
        "not covered"),
    ("attacc", "mode changes"): ("attacc.md: no mode-change command in the sequence", "both (none)"),
    ("attacc", "MAC / all-bank"): (
        "attacc.md: MACAB reads a column in all 64 banks, nCCDAB = 6 apart; 32 per row, then PREA, ACTAB; "
        "MVSB 8 per 256 outputs; WRGB / MVSB overlap the MACs",
        "both (the same MACAB / MVSB rules; DCC's class also holds its WRGB, barrier-separated per batch element)"),
    ("attacc", "read-back"): (
        "attacc.md: the sequence ends with MVSB into the softmax buffer; no host read-back is listed",
        "neither (DCC: ST to every bank; default: RDACC + host merge)"),
    ("attacc", "refresh"): (
        "attacc.md: one all-bank refresh per pCH every nREFI 5070, nRFC 456 (PREA first)",
        "both (same constants)"),
}

_ROW_CMDS = frozenset({"ACT", "PRE", "ACTAB", "PREA", "BARRIER", "NOP"})   # not counted: see command_class_table


def dcc_command_classes(backend_name: str, kernel: str, batch: int, size: int, tiling=None) -> dict:
    """DCC's fork on one case split by command class: {class: (cycles, commands)}, cycles of tCK
    0.769 ns, plus "total" (the fork's cycles with refresh).  `tiling`: DCC's (default
    `dcc_baseline_tiling`).

    Cycles: refresh = total - total with the fork's refresh off; the refresh-free run is split at its
    first and last PIM command (`engine.dcc_cycles`): host writes before, MAC / all-bank between,
    read-back after (its barrier drains included); mode changes 0 (the forks have none).  The classes sum
    to the total exactly.  Commands, all channels: the trace's requests (one fork command each, barriers
    left out), LD / ST before the first PIM request host writes, after the last read-back (a trace with
    LD / ST between them is a ValueError), PIM requests MAC / all-bank; refresh the busiest channel's REFab times the loaded channels.  Row commands (ACT,
    PRE, ACTAB, PREA) are not counted on either side."""
    from pimjax.backends.dcc.engine import dcc_cycles
    from pimjax.backends.dcc.traces import gen_trace
    fork = DCC_FORK[backend_name]
    shape = dcc_shape(kernel, batch, size)
    tiling = tiling if tiling is not None else dcc_baseline_tiling(kernel, batch, size)
    on, off = dcc_cycles(fork, kernel, shape, tiling), dcc_cycles(fork, kernel, shape, tiling, refresh=False)
    trace = [name for name, _ in gen_trace(fork, kernel, tiling) if name != "PIM_BARRIER"]
    pim = [i for i, name in enumerate(trace) if name.startswith("PIM_")]
    first, last = (pim[0], pim[-1]) if pim else (len(trace), len(trace))
    if any(name in ("LD", "ST") for name in trace[first:last]):
        raise ValueError(f"dcc_command_classes: {kernel} {tiling} has host accesses between PIM commands; "
                         "the split by the first and last PIM command does not separate them")
    host = sum(1 for name in trace[:first] if name in ("LD", "ST"))
    back = sum(1 for i, name in enumerate(trace) if name in ("LD", "ST") and i > last)
    return {"host writes": (off["rearrangement"], host), "mode changes": (0, 0),
            "MAC / all-bank": (off["compute"], len(pim)), "read-back": (off["readback"], back),
            "refresh": (on["total"] - off["total"], on["counts"].get("REFab", 0) * on["channels"]),
            "total": on["total"]}


def default_command_classes(program, backend) -> dict:
    """A pimjax program on a record-timed (default) configuration split by command class, measured:
    {class: (cycles, commands)} in the backend's tCK, plus "total" (`pimjax.sim.cycles`, refresh on).

    Cycles, by removing classes one after another (each class is what its removal saves, in this
    order): refresh = total - total with `refresh=False`; mode changes = that - the refresh-free total
    with the mode-change records made NOPs (n = 0; HBM-PIM's frame: the records whose `aux` is a
    `Crf.MODE` / `PROGRAM` / `ZERO_B` -- park reads, SB<->HAB writes, CRF program, HAB<->HAB_PIM; none
    on AttAcc); what is left is split by that last report's phase buckets: host writes =
    `rearrangement` (the REARRANGE records: bank writes, GRF_A / WRGB writes from the host, the host
    read of the operand), MAC / all-bank = `compute`, read-back = `readback` + `merge` (the host's
    reads and its sum of partials).  The classes sum to the total exactly; a class's share depends on
    the order where classes overlap (the frame's removal also moves where the leading rearrangement
    ends and the read-back's row state).  Commands, all
    groups: the live steady-state records' columns (`n`, resident placement left out) by the same
    classes, times the groups a shared stream stands for; refresh the report's REF; row commands
    (ACTAB, PREA, barriers) not counted."""
    from dataclasses import replace

    from pimjax.backends.hbm_pim.isa import Crf
    from pimjax.lower.program import Op, Phase
    from pimjax.sim.cycles import cycles
    c = program.commands
    op, phase, n, aux, res = (np.asarray(getattr(c, f)) for f in ("op", "phase", "n", "aux", "resident"))
    op, phase, aux, res = (np.broadcast_to(x, n.shape) for x in (op, phase, aux, res))
    mode = np.zeros(n.shape, bool)
    if backend.name == "hbm-pim":
        mode = np.isin(aux, [Crf.MODE, Crf.PROGRAM, Crf.ZERO_B]) & np.isin(op, [Op.RD, Op.WR, Op.AB_WR, Op.PREA])
    on = cycles(program, backend)
    off = cycles(program, backend, refresh=False)
    no_mode = cycles(replace(program, commands=replace(c, n=np.where(mode, 0, n))), backend, refresh=False) \
        if mode.any() else off
    mode_cyc = float(off.total_cycles) - float(no_mode.total_cycles)
    scale = program.groups if n.shape[0] == 1 else 1
    rows = {int(getattr(Op, x)) for x in _ROW_CMDS if hasattr(Op, x)}
    live = (n > 0) & (res == 0) & ~np.isin(op, list(rows))

    def count(mask) -> float:
        return float(n[live & mask].sum() * scale)

    return {"host writes": (float(no_mode.rearrangement), count(phase == Phase.REARRANGE)),
            "mode changes": (mode_cyc, count(mode)),
            "MAC / all-bank": (float(no_mode.compute), count((phase == Phase.COMPUTE) & ~mode)),
            "read-back": (float(no_mode.readback) + float(no_mode.merge), count(phase == Phase.READBACK)),
            "refresh": (float(on.total_cycles) - float(off.total_cycles), float(on.counts["REF"])),
            "total": float(on.total_cycles), "merge": float(no_mode.merge)}


def _default_program(backend, kernel: str, batch: int, size: int, dcc_tiling=None):
    """The default configuration's program of a case (its own baseline mapping, or DCC's tiling
    `dcc_tiling` as a draft, `tiling.to_draft`), GEMV matrix resident as in `RESIDENT`; and the draft
    in words.  Raises ValueError / PimCompileError when it does not lower."""
    from pimjax.backends import baseline
    from pimjax.backends.dcc.tiling import to_draft
    from pimjax.kernels import kernel_op
    from pimjax.lower import lower
    from pimjax.partition.draft import describe_draft
    op, shapes = kernel_op(CATALOGUE[kernel], catalogue_shape(kernel, batch, size))
    d = (baseline(op, backend) if dcc_tiling is None
         else to_draft(kernel, dcc_shape(kernel, batch, size), dcc_tiling, DCC_FORK[backend.name]))
    if d is None:
        raise ValueError(f"{backend.name} has no baseline mapping of {kernel}")
    return lower(op, d, backend, shapes, resident=RESIDENT[kernel]), describe_draft(op, d)


def command_class_table(cases=CLASS_CASES):
    """The disagreement explained (issue 51, item 4): one row per case of `cases` ((backend, kernel,
    batch, size)) x `COMMAND_CLASSES`, DCC's simulator beside the default configuration.

    Columns: "dcc cycles" / "dcc ns" / "dcc commands" (DCC's baseline tiling on its fork,
    `dcc_command_classes`, tCK "dcc tCK ns"); "default cycles" / "default ns" / "default commands"
    (the default configuration, `attacc_system()` / `hbm_pim_system()`, its own baseline mapping,
    `default_command_classes`, tCK "default tCK ns"; "default merge cycles" the host's sum of partials
    within read-back); the same three for DCC's baseline tiling lowered
    on the default ("default, dcc tiling ..."; NaN with the reason in "default, dcc tiling note" where
    it does not lower); "reference" (what Samsung's simulator, for HBM-PIM, or AttAcc's, for AttAcc,
    does for the class: `REFERENCE_SAYS`) and "supports" (which of the two configurations that is).
    Commands are column and PIM commands on all channels / groups (row commands not counted)."""
    import pandas as pd

    from pimjax.backends.dcc import TCK_NS
    from pimjax.errors import PimCompileError
    from pimjax.sim.cycles import cycles
    for name, kernel, _, _ in cases:
        if name not in DCC_FORK:
            raise ValueError(f"command_class_table: backend must be one of {sorted(DCC_FORK)}, not {name!r}")
        why = dcc_trace_missing(name, kernel)
        if why:
            raise ValueError(f"command_class_table: {name} {kernel}: {why}")
    systems = {"attacc": attacc_system(), "hbm-pim": hbm_pim_system()}
    rows = []
    for name, kernel, batch, size in cases:
        be = systems[name]
        tck = float(be.timing.tCK)
        tiling = dcc_baseline_tiling(kernel, batch, size)
        dcc_split = dcc_command_classes(name, kernel, batch, size, tiling)
        prog, draft = _default_program(be, kernel, batch, size)
        own = default_command_classes(prog, be)
        try:
            prog_t, _ = _default_program(be, kernel, batch, size, tiling)
            on_t, note = default_command_classes(prog_t, be), ""
        except (ValueError, PimCompileError) as err:
            on_t, note = None, str(err).splitlines()[0]
        for cls in COMMAND_CLASSES:
            ref = REFERENCE_SAYS.get((name, cls, kernel), REFERENCE_SAYS[(name, cls)])
            d_cyc, d_cnt = dcc_split[cls]
            o_cyc, o_cnt = own[cls]
            t_cyc, t_cnt = on_t[cls] if on_t else (math.nan, math.nan)
            rows.append({"backend": name, "kernel": kernel, "shape": str(dcc_shape(kernel, batch, size)),
                         "class": cls, "dcc tiling": str(tiling),
                         "dcc cycles": float(d_cyc), "dcc ns": float(d_cyc) * TCK_NS, "dcc commands": float(d_cnt),
                         "dcc total cycles": float(dcc_split["total"]),
                         "default draft": draft, "default cycles": o_cyc, "default ns": o_cyc * tck,
                         "default commands": o_cnt, "default total cycles": own["total"],
                         "default merge cycles": own["merge"] if cls == "read-back" else 0.0,
                         "default, dcc tiling cycles": t_cyc, "default, dcc tiling ns": t_cyc * tck,
                         "default, dcc tiling commands": t_cnt,
                         "default, dcc tiling total cycles": on_t["total"] if on_t else math.nan,
                         "default, dcc tiling note": note,
                         "dcc tCK ns": TCK_NS, "default tCK ns": tck, "reference": ref[0], "supports": ref[1]})
        # the split's own check: the default's total is `cycles`' total (refresh on)
        if abs(own["total"] - float(cycles(prog, be).total_cycles)) > 1e-3:
            raise RuntimeError("command_class_table: the default split lost its total")
    return pd.DataFrame(rows)


def load_command_classes(path: str | None = None):
    """`command_class_table()` as `main` cached it (a DataFrame; `path` default `OUT`)."""
    import pandas as pd
    with open(path or OUT) as f:
        return pd.DataFrame(json.load(f)["rows"])


def main() -> int:
    t0 = time.perf_counter()
    df = command_class_table()
    out = {"rows": json.loads(df.to_json(orient="records")), "seconds": round(time.perf_counter() - t0, 1)}
    with open(OUT, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"{len(df)} rows -> {OUT} ({out['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
