"""AttAcc's machine as the lowerings see it (HBM3 + GEMV units + a softmax / accumulator unit
per channel; `../shared/reference/attacc.md`): the geometry of the three PIM levels and the
tables the record streams share (routes, host-data rows).

Machine model (per group = channel; what `execute.py` executes and `sim/cycles.py`
times):

* banks: 64 per channel (2 pCH x 2 SID x 4 bank groups x 4 banks), 16384
  rows x 32 columns x 32 B.  A *core* is a 16-lane FP16 GEMV unit: one per
  bank ("bank" level, MACAB), per bank group ("bg", MACSB on bank b of every
  bank group) or per pseudo-channel ("buffer", MACPB; consecutive commands
  rotate over the pCH's 32 banks, bank groups first, as the reference's
  buffer-level trace does).  A program addresses a core's memory through
  *virtual columns* v (see `Geometry.address`).
* GEMV buffer per unit: `core.n_input_regs` entries x 16 lanes, written by
  WRGB (host data) or MVGB (from the softmax buffer).
* accumulator per unit: 16 FP16 slots.  A MAC column either
  - "tree" (adder-tree mode, lanes along a reduction variable): slot
    `u // reg_step` += dot(column, buffer entry `arg + u % reg_step`), or
  - "mac" (lanes along an output variable): all 16 slots += column x the
    buffer scalar `arg * 16 + u`,
  where u = `reg` + the column's offset in its record.  Accumulators are
  double-buffered, so a block's MVSB may overlap the next block's MACs (as
  the reference schedules them); in a record stream the drain is written
  before the next block's MACs.
* MVSB drains accumulators into the channel's softmax buffer through the
  adder tree of one (pCH, SID): each command moves one 16-lane row per pCH
  and *adds* it into a softmax-buffer row (the channel accumulator: the
  `reduction == "group"` merge).  SFM runs a softmax over a masked set of
  softmax-buffer positions; RDACC copies softmax-buffer rows to the host.
* Every WRGB / MVGB / MVSB command carries one 16-lane row per pCH; the
  units of a pCH that need the same row at the same entry share it
  (group broadcast); `granularity == "core"` gives one command per unit and
  bank-level MACs (MACBK) instead of MACAB / MACSB / MACPB.
* BARRIER records order data movement against MACs exactly like the
  reference's PIM_BARRIER; ACTAB / PREA (bank level) are explicit, the
  bank-group and buffer levels open rows implicitly per bank.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ...errors import PimCompileError
from ...hw.core import Backend
from ...lower.program import Op

# Hardware facts the AttAcc lowering and executor are built around (the address
# maps of the three levels, the adder-tree clusters, the executor's jitted
# shapes).  `Geometry.of` reads the Backend and refuses one that differs.
LANES = 16                 # attacc.md: 16 FP16 lanes per unit (core.lanes)
COLS = 32                  # attacc.md: 32 columns per row (core.cols)
BANKS_PER_BG = 4           # attacc.md: 4 banks per bank group (group.banks_per_bank_group)
BANK_GROUPS = 16           # attacc.md: 16 bank groups per channel, 2 pCH x 2 SID x 4 (group.bank_groups)
TREE, MACMODE = 0, 1            # MAC aux: adder-tree / mac mode
# assumption: a softmax buffer of 8192 FP16 (512 rows of 16) per channel.  attacc.md implies
# L FP16 per head (the trace generator's maxlen 4096) and the reference pipelines two heads.
SB_ROWS = 512
HOST_ONE = -2                   # host-data index meaning the constant 1.0 (RED's ones vector)

DEFAULT_OPTIONS = dict(register_reuse=True, data_block_layout=True, channel_parallel=True,
                       resident=(), result_dtype="float32", sb_rows=SB_ROWS, gb_tile=None, head_rows=False)



# --------------------------------------------------------------------------
# geometry of the three PIM levels
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class Geometry:
    """Where a core's memory is and how commands address it.

    level: "bank" | "bg" | "buffer"; cores: units per channel;
    banks_per_core: banks a unit owns (1, 4, 32); banks_per_bg: the
    group's banks per bank group (the host's interleaving order)."""
    level: str
    cores: int
    banks_per_core: int
    banks_per_bg: int = BANKS_PER_BG

    @classmethod
    def of(cls, backend: Backend) -> "Geometry":
        level = backend.variant.split("-")[0]
        if level not in ("bank", "bg", "buffer"):
            raise PimCompileError(f"attacc: unknown PIM level {level!r}")
        core, group = backend.core, backend.group
        for where, name, got, want in (("core", "lanes", core.lanes, LANES), ("core", "cols", core.cols, COLS),
                                       ("group", "banks_per_bank_group", group.banks_per_bank_group, BANKS_PER_BG),
                                       ("group", "bank_groups", group.bank_groups, BANK_GROUPS)):
            if got != want:
                raise PimCompileError(f"attacc family: the lowering's address maps need {where}.{name} = {want} "
                                      f"(HBM3 AttAcc), got {got}")
        return cls(level, group.cores_per_group, core.banks_per_core, group.banks_per_bank_group)

    @property
    def seg(self) -> int:
        """Virtual columns per addressing segment (one record at most)."""
        return 1024 if self.level == "buffer" else 32

    @property
    def mac_op(self) -> Op:
        return {"bank": Op.MACAB, "bg": Op.MACSB, "buffer": Op.MACPB}[self.level]

    def core_base(self, c) -> np.ndarray:
        """First physical bank (0..63 in the channel) of core `c`."""
        return np.asarray(c) * self.banks_per_core

    def unit_tables(self, C: int) -> tuple[list, list, list]:
        """(first bank, pCH, adder tree) of units 0..C-1 as Python ints (the
        per-command loops of the Python form index them)."""
        return _unit_tables(self, C)


    @property
    def row_span(self) -> int:
        """Virtual columns per DRAM row of a unit (`address`: bank 32, bg
        4 banks x 32, buffer 32 banks x 32)."""
        return {"bank": 32, "bg": 128, "buffer": 1024}[self.level]

    def row_of(self, v: int) -> int:
        """`address(v)[1]` for one int."""
        return v // self.row_span

    def pch(self, c) -> np.ndarray:
        return self.core_base(c) // 32

    def cluster(self, c) -> np.ndarray:
        """The adder tree a unit drains through: its (pCH, SID) (bank / bg
        level) or its pCH (buffer level)."""
        return self.core_base(c) // (32 if self.level == "buffer" else 16)

    def address(self, v):
        """(bank within the core, row, column) of virtual column(s) v.

        bank: a bank's columns in row order; bg: rows of 32 columns rotate
        over the 4 banks of the bank group (the reference's MACSB layout);
        buffer: consecutive columns rotate over the pCH's 8 bank groups,
        then its 4 banks, then columns (the reference's MACPB layout)."""
        v = np.asarray(v, np.int64)
        if self.level == "bank":
            return np.zeros_like(v), v // 32, v % 32
        if self.level == "bg":
            return (v // 32) % 4, v // 128, v % 32
        return (v % 8) * 4 + (v // 8) % 4, v // 1024, (v // 32) % 32

    def record_col(self, v: int) -> int:
        """The `col` field of a MAC record starting at virtual column v."""
        return int(v % self.seg)

    def timed_bank(self, v: int, core: int | None = None) -> int:
        """The bank a MAC record is timed on: bank 0 for MACAB / MACPB, bank b
        of bank group 0 for MACSB, the core's own bank for MACBK."""
        bic = int(self.address(v)[0])
        if core is None:
            return bic if self.level == "bg" else 0
        return int(self.core_base(core)) + (bic if self.level != "buffer" else 0)

    def phys(self, c, v) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(physical bank, row, column) of virtual column v of core c."""
        bic, row, col = self.address(v)
        return self.core_base(c) + bic, row, col


@lru_cache(maxsize=64)
def _unit_tables(geo: Geometry, C: int) -> tuple[list, list, list]:
    base = [c * geo.banks_per_core for c in range(C)]
    return base, [b // 32 for b in base], [b // (32 if geo.level == "buffer" else 16) for b in base]


# --------------------------------------------------------------------------
# tables shared by the streams: routes and host data rows
# --------------------------------------------------------------------------
class Tables:
    """Route rows (per unit: source, destination) of WRGB / MVGB / MVSB
    commands and the host data rows WRGB sends."""

    def __init__(self, C: int, G: int):
        self.C, self.G = C, G
        self.src: list[np.ndarray] = []
        self.dst: list[np.ndarray] = []
        self.host: list[np.ndarray] = []
        self._host_ids: dict[bytes, int] = {}

    def route(self, src: np.ndarray, dst: np.ndarray) -> int:
        self.src.append(np.asarray(src, np.int32))
        self.dst.append(np.asarray(dst, np.int32))
        return len(self.src) - 1

    def host_row(self, idx: np.ndarray) -> int:
        """Id of the host data row with flat indices `idx` ([G, 16]; -1 = 0,
        -2 = 1.0), shared when equal."""
        idx = np.ascontiguousarray(idx, np.int64)
        key = idx.tobytes()
        hid = self._host_ids.get(key)
        if hid is None:
            hid = len(self.host)
            self.host.append(idx)
            self._host_ids[key] = hid
        return hid

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        C, G = self.C, self.G
        src = np.stack(self.src) if self.src else np.zeros((0, C), np.int32)
        dst = np.stack(self.dst) if self.dst else np.zeros((0, C), np.int32)
        host = np.stack(self.host, 1) if self.host else np.zeros((G, 0, LANES), np.int64)
        return src, dst, host


def bg_interleave(cmds: list, bank_of, banks_per_bg: int) -> list:
    """Order data-movement commands round-robin over bank groups, the order
    the reference's FCFS-ready scheduler issues them in (tCCD_S apart
    instead of tCCD_L within a bank group)."""
    by_bg: dict[int, list] = {}
    for c in cmds:
        by_bg.setdefault(int(bank_of(c)) // banks_per_bg, []).append(c)
    out = []
    queues = list(by_bg.values())
    i = 0
    while any(queues):
        q = queues[i % len(queues)]
        if q:
            out.append(q.pop(0))
        i += 1
    return out


