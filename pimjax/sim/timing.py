"""Timing semantics of command records, shared by the engines (`cycles`'s
jax.lax.scan, `native`'s compiled loop) and the reference model
(`reference.py`, the readable specification).

The DRAM timing constraints themselves -- which command waits how long
after which, at which level -- are declared once, as data, in
`pimjax.hw.dram_rules.RULES` (Ramulator 2.1 style: level, preceding and
following command kinds, a latency expression over the `Timing`
parameters) and compiled by `dram_rules.compile_rules` into the latency
vector every engine reads; the parameter names below (tRCD, tFAW, ...) say
which rule applies, the table says what it is.  This module holds the
other half: which commands a record issues.

Every opcode has a *timing class* (a row of `CLASS_TABLE`), declared as data
the way Ramulator declares its command/constraint tables:

=========  ================================================================
column     one column command per repeat to (bank, row): opens the row if
           needed (PRE + ACT), then issues `n` columns `spacing` apart
write      column writes (WR->RD and RD->WR turnaround apply)
allbank    an all-bank / PIM column command: consecutive ones are tCCD_AB
           apart and it does not use the external data bus
data_bus   occupies the group's data bus (host reads / writes)
act_all    ACTAB / G_ACT: opens `row` (>= 0) in every bank (tRC between them)
pre_all    PREA: closes every bank
fixed      a fixed latency (cycles in `n`), e.g. AttAcc SFM
side       a data-movement command on a separate datapath (AttAcc WRGB /
           MVSB / MVGB / SFM): consecutive ones are max(tBL, tCCD_S) apart
           and they do not block the column pipeline
wait       the command waits until every earlier record has ended (a
           barrier on a data dependency, e.g. MVSB after the score MACs)
stagger    an all-bank activation issued as one activation per bank group,
           tFAW apart (Newton / AiM G_ACT0..3, PIMFlow): the banks are ready
           (n_bank_groups - 1) * tFAW later than one simultaneous activation
stream     a host transfer run whose columns the controller interleaves
           with the runs to other bank groups: its columns are tCCD_S apart
           (the link bandwidth) instead of tCCD_L
buffer     a write column to the channel's global buffer (Newton GWRITE):
           command kind BUFWR, timed as a WR, except that a G_ACT waits
           for it only under rule BUF_ACT (off with GWRITE latency hiding)
barrier    AttAcc PIM_BARRIER: no time of its own; every later column,
           data-movement (side) and fixed command issues at least one cycle
           after the latest issue of any earlier such command.  Row
           commands (explicit or implicit ACT / PRE) pass it.
=========  ================================================================

Side commands (AttAcc data movement) additionally keep tCCD_L between
two commands to the same bank group (`bank` names the addressed bank);
the `n` commands of one record go to one bank group, so they are
max(tBL, tCCD_S, tCCD_L) apart.  A PREA after an all-bank column command
waits tRTP_L after it (AttAcc MACAB -> PREA nRTP_L).

Semantics of one record (all times in command-clock cycles, in order; each
"after" is a rule of `dram_rules.RULES`, named in brackets):

1. refresh: when the previous record ended at or after the refresh
   deadline, all banks are precharged at max(deadline, every bank's
   earliest precharge, tRTP_L after an all-bank MAC as for PREA) and are unavailable for tRP + tRFC; deadlines that
   passed while the group was idle are skipped.  Commands issue in order,
   so no later record -- whatever its class: a barrier or a data-movement
   record the refresh fell on does not touch the banks -- starts before the
   refresh ends.  Except: the refresh waits past a single-bank column
   record that opens a row when that ACT (timed without the refresh) can
   issue both before every open bank may be precharged and within tRAS of
   the latest ACT -- a wave of fresh activations, such as HBM-PIM's
   park-out.  The reference's controller (DRAMSim2's CommandQueue) gives
   the refresh's precharges priority only once they are issuable and keeps
   issuing meanwhile, so such a wave holds the refresh until it ends; one
   still due after the last record falls outside the run.
2. row: a column record to a bank whose open row differs (and a row >= 0:
   a record with row < 0, a buffer access such as Newton's GWRITE, issues
   on the bank as it is) precharges it at
   max(tRAS after its ACT [RAS], tRTP after its last read [RTP], tWL + tBL
   + tWR after its last write [WR_PRE]) and activates `row` tRP later [RP],
   also respecting tRC after the bank's last ACT [RC], tRRD_L / tRRD_S
   after the last ACT in the bank group / group [RRD_L, RRD_S] and tFAW
   after the fourth-last ACT [FAW] (an all-bank ACT: tRC after the latest
   ACT of any bank).  Row commands do not wait for earlier column commands
   to other banks (HBM's separate row bus; the controller looks ahead).
3. column: the first column issues at the latest of: tRCD after the ACT
   [RCD_RD, RCD_WR]; the previous record's last column + spacing (tCCD_AB
   between all-bank commands [CCD_AB], else tCCD_L in the same bank group,
   tCCD_S across [CCD_L, CCD_S]); read->write tCL + tBL + tRTRS - tWL after
   the last read [RTW]; write->read tWL + tBL + tWTR_L/S after the last
   write [WTR_L, WTR_S].  The record's `n` columns are `spacing` apart
   (tCCD_AB all-bank, tCCD_L same bank).
4. the record ends at its last column + its completion latency (tCL + tBL
   for reads, tWL + tBL for writes, tCCD_AB all-bank [RD_END, WR_END,
   AB_END]); the time it adds to the program is its end minus the latest
   earlier end (attributed to its phase).
"""
from __future__ import annotations

import numpy as np

from ..lower.program import Op

# columns of the class table
COLUMN, WRITE, ALLBANK, DATA_BUS, ACT_ALL, PRE_ALL, FIXED, SIDE, WAIT, STREAM, BARRIER, STAGGER, BUFFER = range(13)
N_FLAGS = 13
FLAG_NAMES = ("column", "write", "allbank", "data_bus", "act_all", "pre_all", "fixed", "side", "wait", "stream",
              "barrier", "stagger", "buffer")

# the timing classes of the commands every family shares (host column reads and writes); each
# family declares its own commands' classes in its folder (`pimjax/backends/<family>/isa.py`,
# `Family.timing_classes`), by the names of FLAG_NAMES
GENERIC_CLASSES: dict[int, tuple[str, ...]] = {
    Op.NOP: (),
    Op.RD: ("column", "data_bus"),
    Op.WR: ("column", "write", "data_bus"),
    Op.RD_S: ("column", "data_bus", "stream"),
    Op.WR_S: ("column", "write", "data_bus", "stream"),
}


def class_table() -> np.ndarray:
    """[max opcode + 1, N_FLAGS] int32 timing-class flags: the shared
    commands' and every registered family's (`Family.timing_classes`); an
    opcode no one declares has no class (all zero, like NOP)."""
    from ..family import FAMILIES, families
    families()                                      # load the registered families
    classes = dict(GENERIC_CLASSES)
    for fam in FAMILIES.values():
        for op, names in fam.timing_classes.items():
            if op in classes and classes[op] != tuple(names):
                raise ValueError(f"opcode {Op(op).name}: family {fam.name} declares timing class {names}, "
                                 f"another declares {classes[op]}")
            classes[op] = tuple(names)
    for o, names in classes.items():
        # the native loops dispatch on these in different orders (`_stream`: columns first, `_stream_v`:
        # the all-bank commands first); an opcode holding two of them would time differently in each
        whole = {"act_all", "pre_all"} & set(names)
        if whole and len({"column", "side", "fixed", "barrier", "act_all", "pre_all"} & set(names)) > 1:
            raise ValueError(f"opcode {Op(o).name}: timing classes {tuple(names)} combine {sorted(whole)} with "
                             "another command kind (column / side / fixed / barrier): give it one")
    n = max(int(o) for o in Op) + 1
    t = np.zeros((n, N_FLAGS), np.int32)
    for o, names in classes.items():
        for name in names:
            t[int(o), FLAG_NAMES.index(name)] = 1
    return t


CLASS_TABLE = class_table()
