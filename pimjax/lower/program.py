"""The PIM command program: one data structure, two interpreters.

A `Program` is what `lower` produces for one (op, draft, backend):

* `layouts`  — where each tensor lives in PIM memory, as a rule
  (`TensorLayout`): per (group, core) the global indices of the core's local
  box, and how the local box is linearised into (bank, row, column, lane).
* `commands` — per-group command records as a struct of arrays
  (`Records`): opcode, bank, row, first column, repeat count, phase,
  register fields, data-source fields.  One record with `n` > 1 stands for
  `n` column commands to consecutive columns of one open row.
  A stream shared by every group (a broadcast program) has a leading axis of
  1; otherwise the leading axis is the group.
* `host_data` — for records that carry host data into registers or buffers:
  per record row, the global flat indices of the elements sent (-1 = 0).
* `readback` — how the host turns what it read back into the op's result:
  which layout holds the partial results, and the merge (combiner over
  lanes / cores, then the epilogue).

`sim.execute` interprets the records for their values, `sim.cycles` for
their time; neither knows how the program was produced.
"""
from __future__ import annotations

import enum
import weakref
from dataclasses import dataclass, field
from typing import Any, Mapping

import jax
import numpy as np

from .native import interleave


class Op(enum.IntEnum):
    """Opcodes of all backends.  The timing class of each is in `TIMING_CLASS`."""
    NOP = 0
    # plain DRAM column commands (single bank, host data path)
    RD = 1            # host reads a column (read-back, park, mode frames)
    WR = 2            # host writes a column (rearrangement, mode frames)
    RD_S = 6          # streamed host read: a run to one bank, interleaved with other banks' runs
    WR_S = 7          # streamed host write (bulk rearrangement)
    # HBM-PIM (all-bank modes; timed as a command to bank 0/1 of bank group 0)
    AB_WR = 3         # all-bank write: mode changes, CRF program, GRF/SRF writes, GRF store
    PIM_RD = 4        # all-bank-PIM column read: executes the next CRF instruction in all units
    PIM_WR = 5        # all-bank-PIM column write: stores a GRF into every unit's bank
    # AttAcc
    ACTAB = 10        # activate one row in all banks of the channel
    PREA = 11         # precharge all banks
    MACAB = 12        # all-bank MAC column (bank level)
    MACSB = 13        # one bank of every bank group (bg level)
    MACPB = 14        # per pseudo-channel buffer-level MAC
    WRGB = 15         # host writes the GEMV buffers
    MVSB = 16         # GEMV results -> softmax buffer
    SFM = 17          # softmax on the softmax buffer
    MVGB = 18         # softmax buffer -> GEMV buffers
    RDACC = 19        # host reads the channel accumulator / softmax buffer
    BARRIER = 40      # AttAcc PIM_BARRIER: later column / data-movement commands wait for
                      #   every earlier one to issue (row commands pass it)
    MACBK = 41        # AttAcc bank-level MAC: one unit reads one column (DCC's per-core fallback)
    # Newton / AiM
    GWRITE = 20       # host -> global buffer (aux = number of buffers written)
    G_ACT = 21        # activate a row in the banks of the channel
    COMP = 22         # column MAC in all activated banks
    READRES = 23      # read the result latches
    # UPMEM
    XFER_H2D = 30     # host -> MRAM transfer (bytes in `n`)
    XFER_D2H = 31     # MRAM -> host transfer
    DMA_RD = 32       # MRAM -> WRAM DMA (bytes in `n`)
    DMA_WR = 33       # WRAM -> MRAM DMA
    DPU_EXEC = 34     # n instructions issued by the tasklets
    LAUNCH = 35       # kernel launch / barrier


class Phase(enum.IntEnum):
    """What a record's time is attributed to in the report."""
    REARRANGE = 0     # host -> PIM data movement
    COMPUTE = 1       # PIM compute (and its control frame)
    READBACK = 2      # PIM -> host


RECORD_FIELDS = ("op", "bank", "row", "col", "n", "phase", "reg", "reg_step", "src", "aux",
                 "arg", "core", "resident", "sync")


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class Records:
    """Command records, struct of arrays, each of shape [S, R] (S streams:
    1 when the stream is shared by all groups, else one per group).

    op:       Op code.
    bank:     target bank within the group (the timed bank for all-bank commands).
    row, col: DRAM row and first column.
    n:        repeat count (columns); 0 marks padding (a NOP), except on a
              Newton READRES, which reads its latches whatever its bursts:
              n = 0 is a read-back of no bus time (`Core.readres_bytes = 0`),
              which the DRAM engines skip.  For UPMEM transfers / DMA it is
              the byte count, for DPU_EXEC the instruction count.
    phase:    Phase of the record.
    reg:      first register / buffer entry / latch the command uses.
    reg_step: register increment per column (HBM-PIM "auto" addressing).
    src:      tensor (layout index) the data comes from / goes to; -1 none.
    aux:      opcode-specific sub-operation (HBM-PIM CRF instruction, Newton
              buffer count, ...).
    arg:      opcode-specific argument (host_data row, SRF slot, source
              register base, ...).
    core:     target core for per-core commands; -1 = every core of the group.
    resident: 1 for weight placement that a resident operand pays only once.
    sync:     1 at a host synchronisation point: the record (its row commands
              included) starts only after every earlier record has ended, e.g.
              the host reading results after the kernel has finished.
    """
    op: Any
    bank: Any
    row: Any
    col: Any
    n: Any
    phase: Any
    reg: Any
    reg_step: Any
    src: Any
    aux: Any
    arg: Any
    core: Any
    resident: Any
    sync: Any = 0

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(np.shape(self.op))

    def pad_to(self, length: int) -> "Records":
        """Pad every stream with NOP records (n = 0) to `length` records."""
        S, R = self.shape
        if R > length:
            raise ValueError(f"cannot pad {R} records to {length}")
        return Records(**{f: np.pad(np.asarray(getattr(self, f)), ((0, 0), (0, length - R)))
                          for f in RECORD_FIELDS})

    def select(self, mask) -> "Records":
        """Keep the records where `mask` ([S, R] or [R]) is true (numpy, per stream
        with equal counts)."""
        mask = np.broadcast_to(np.asarray(mask, bool), self.shape)
        counts = mask.sum(axis=1)
        if len(set(counts.tolist())) > 1:
            raise ValueError("select() needs the same number of kept records per stream")
        return Records(**{f: np.asarray(getattr(self, f))[mask].reshape(self.shape[0], -1)
                          for f in RECORD_FIELDS})


class RecordBuilder:
    """Appends records for one stream: single records (`add`, kept as
    Python ints) and vectorised chunks (`extend`, kept as arrays);
    `build()` concatenates them in order."""

    def __init__(self):
        self.parts: list[dict[str, np.ndarray]] = []
        self.rows: list[tuple] = []                       # single records not yet in `parts`

    def add(self, op: Op, *, bank=0, row=0, col=0, n=1, phase=Phase.COMPUTE, reg=0, reg_step=0,
            src=-1, aux=0, arg=0, core=-1, resident=0, sync=0) -> None:
        # one tuple per record (RECORD_FIELDS order), transposed once in `_flush`
        self.rows.append((int(op), int(bank), int(row), int(col), int(n), int(phase), int(reg), int(reg_step),
                          int(src), int(aux), int(arg), int(core), int(resident), int(sync)))

    def add_row(self, row: tuple) -> None:
        """Append one record given as a tuple of 14 Python ints in
        RECORD_FIELDS order (hot loops that already hold ints)."""
        self.rows.append(row)

    def _flush(self) -> None:
        if self.rows:
            table = np.array(self.rows, dtype=np.int32).T          # [fields, records]
            self.parts.append({f: np.ascontiguousarray(table[k]) for k, f in enumerate(RECORD_FIELDS)})
            self.rows = []

    def extend(self, records: dict[str, np.ndarray]) -> None:
        """Append a chunk of records (see `chunk`)."""
        self._flush()
        self.parts.append({f: np.asarray(records[f], np.int32) for f in RECORD_FIELDS})

    def __len__(self) -> int:
        return sum(len(p["op"]) for p in self.parts) + len(self.rows)

    def build(self) -> dict[str, np.ndarray]:
        self._flush()
        if len(self.parts) == 1:
            return dict(self.parts[0])
        return {f: np.concatenate([p[f] for p in self.parts]) if self.parts else np.zeros(0, np.int32)
                for f in RECORD_FIELDS}


_DEFAULTS = dict(bank=0, row=0, col=0, n=1, phase=int(Phase.COMPUTE), reg=0, reg_step=0, src=-1,
                 aux=0, arg=0, core=-1, resident=0, sync=0)


def chunk(op, count: int | None = None, **fields) -> dict[str, np.ndarray]:
    """Records as arrays (vectorised emission): every field is a scalar or an
    array of the chunk's length; missing fields take RecordBuilder's defaults."""
    arrays = {"op": op, **fields}
    if count is None:
        count = max((np.size(v) for v in arrays.values() if np.ndim(v) > 0), default=1)
    out = {}
    for f in RECORD_FIELDS:
        v = arrays.get(f, _DEFAULTS.get(f, 0))
        if np.ndim(v) == 0:          # most fields of a chunk are one value: a read-only view
            out[f] = constant_column(int(v), count)
        elif np.shape(v) == (count,):
            out[f] = np.asarray(v).astype(np.int32)
        else:
            out[f] = np.broadcast_to(np.asarray(v, dtype=np.int64), (count,)).astype(np.int32)
    return out


def constant_column(value: int, count: int, dtype=np.int32) -> np.ndarray:
    """[count] read-only view of one value (stride 0): what
    `np.broadcast_to` gives, at a third of its call overhead (a chunk has
    ~10 such fields and a lowering ~100 chunks)."""
    view = np.ndarray((count,), dtype, np.array(value, dtype), 0, (0,))
    view.flags.writeable = False
    return view


def bank_order_key(bank: int, banks_per_bg: int) -> tuple[int, int]:
    """Sort key of `bank_order`: the bank's place within its bank group
    first, then the group."""
    return bank % banks_per_bg, bank // banks_per_bg


def bank_order(banks, banks_per_bg: int) -> list:
    """Banks ordered so that consecutive ones alternate bank groups (bank b
    is in group b // banks_per_bg): the order a memory controller
    interleaves a host transfer in, so its columns need only tCCD_S apart
    (see `streamed`)."""
    return sorted(banks, key=lambda b: bank_order_key(b, banks_per_bg))


def streamed(op: Op, banks, banks_per_bg: int) -> Op:
    """The opcode of a bulk host transfer (runs of columns, one record per
    bank row) to `banks`: the streamed RD_S / WR_S, whose columns are timed
    tCCD_S apart, only when the banks span at least two bank groups -- the
    controller then alternates bank groups, and tCCD_L <= 2 tCCD_S on every
    preset, so the stream runs at tCCD_S.  Inside one bank group every
    column waits tCCD_L for the previous one whatever the order, so the
    runs are plain RD / WR records (tCCD_L apart), as a column-by-column
    transfer to the same banks is timed."""
    groups = {int(b) // banks_per_bg for b in banks}
    if len(groups) < 2:
        return op
    return {Op.RD: Op.RD_S, Op.WR: Op.WR_S}[op]


def record_count(part) -> int:
    """Records of a `concat` part: a record dict or a writer."""
    return len(part["op"]) if isinstance(part, dict) else len(part)


def concat(*chunks) -> dict[str, np.ndarray]:
    """Records of several chunks (RecordBuilder.build() dicts, or writers:
    objects with `len` and `write(out)`, as `SlotTable`), in order, written
    once into one [fields, records] table (the result's fields are its rows)."""
    parts = [c for c in chunks if c is not None]
    sizes = [record_count(c) for c in parts]
    out = np.empty((len(RECORD_FIELDS), sum(sizes)), np.int32)
    at = 0
    for c, n in zip(parts, sizes):
        if not isinstance(c, dict):              # a writer (SlotTable, hbm_pim.GemvSequence)
            c.write(out[:, at:at + n])
        else:
            for k, f in enumerate(RECORD_FIELDS):
                out[k, at:at + n] = c[f]
        at += n
    return dict(zip(RECORD_FIELDS, out))


@dataclass(frozen=True)
class SlotTable:
    """Per-invocation record slots, ready to interleave (`select_slots`):
    mask [K, S] bool, scalars [S, F] int32 and source [S, F] int64 (per slot
    and field a constant or a row of `arrays` [A, K] int32)."""
    mask: np.ndarray
    scalars: np.ndarray
    source: np.ndarray
    arrays: np.ndarray

    @staticmethod
    def of(slots: list[tuple[np.ndarray, dict]], count: int) -> "SlotTable":
        """From (present [K] bool, chunk of K records) pairs."""
        F, S = len(RECORD_FIELDS), len(slots)
        mask = np.empty((count, S), bool)
        scalars = np.zeros((S, F), np.int32)
        source = np.full((S, F), -1, np.int64)
        arrays = []
        for j, (present, c) in enumerate(slots):
            mask[:, j] = present
            for k, f in enumerate(RECORD_FIELDS):
                a = c[f]
                if a.strides == (0,) and count:      # a constant field (`chunk`'s stride-0 view)
                    scalars[j, k] = a[0]
                else:
                    source[j, k] = len(arrays)
                    arrays.append(a)
        table = np.stack(arrays).astype(np.int32, copy=False) if arrays else np.zeros((0, count), np.int32)
        return SlotTable(mask, scalars, source, table)

    def __len__(self) -> int:
        return int(np.count_nonzero(self.mask))

    def write(self, out: np.ndarray) -> None:
        """Fill out [F, len(self)] (compiled, `native.interleave`)."""
        interleave(self.mask, self.scalars, self.source, self.arrays, out)


def select_slots(slots: list[tuple[np.ndarray, dict]], count: int) -> dict[str, np.ndarray]:
    """Interleave per-invocation record slots: `slots` is a list of
    (present [K] bool, chunk of K records); the result lists, for invocation
    0..K-1 in order, its present slots in list order.  Compiled
    (`SlotTable`, which `concat` writes in place); `select_slots_numpy` is
    the same in numpy."""
    return concat(SlotTable.of(slots, count))


def select_slots_numpy(slots: list[tuple[np.ndarray, dict]], count: int) -> dict[str, np.ndarray]:
    """`select_slots` in numpy (the readable definition, used by tests)."""
    # one [fields, count, slots] table and one boolean selection of its
    # columns (a stack and a selection per field cost 14x the numpy calls)
    F, S = len(RECORD_FIELDS), len(slots)
    table = np.empty((F, count, S), np.int32)
    mask = np.empty((count, S), bool)
    for j, (present, c) in enumerate(slots):
        mask[:, j] = present
        for k, f in enumerate(RECORD_FIELDS):
            table[k, :, j] = c[f]
    picked = table.reshape(F, -1)[:, mask.reshape(-1)]              # [F, records], rows contiguous
    return dict(zip(RECORD_FIELDS, picked))


def stack_streams(streams: list[dict[str, np.ndarray]]) -> Records:
    """Stack per-group streams (padding with NOPs) into one Records."""
    R = max(len(s["op"]) for s in streams)
    if len(streams) == 1:          # one stream (shared by all groups): its arrays as [1, R] views
        return Records(**{f: np.asarray(streams[0][f], np.int32).reshape(1, R) for f in RECORD_FIELDS})
    out = {}
    for f in RECORD_FIELDS:
        out[f] = np.zeros((len(streams), R), np.int32)
        for i, s in enumerate(streams):
            out[f][i, :len(s[f])] = s[f]
    return Records(**out)


class LazyArray:
    """An array computed on first use: timing a program never needs where
    every matrix element lives or which vector element each register write
    carries, only `execute` does.  `shape` and `dtype` are known up front."""

    def __init__(self, fn, shape: tuple, dtype=np.int32):
        self._fn = fn
        self._array = None
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def materialize(self) -> np.ndarray:
        if self._array is None:
            self._array = np.asarray(self._fn(), self.dtype).reshape(self.shape)
            self._fn = None
        return self._array

    def __array__(self, dtype=None, copy=None):
        arr = self.materialize()
        return arr if dtype is None else arr.astype(dtype)

    def __getitem__(self, key):
        return self.materialize()[key]

    def __len__(self) -> int:
        return self.shape[0]


class LazyPositions(LazyArray):
    """A layout's position table [count, 4] (bank, row, column, lane),
    computed on first use."""

    def __init__(self, fn, count: int):
        super().__init__(fn, (count, 4), np.int32)


@dataclass(frozen=True)
class TensorLayout:
    """Where a tensor's elements live in PIM memory: the rule, not a table.

    Every core holds a *local box*: a range of each of the loop variables
    `vars` (the ones the data depends on).  Local position j of variable v on
    core (g, c) is loop value `start[g, c, v] + j` (valid while j < length).
    The element stored there is the tensor element `index_map(values)`; a
    broadcast operand is simply replicated.  Synthetic variables (names
    starting with "#") number partial-result slots and do not index the
    tensor.  `positions` maps every local flat position (C order over the
    padded box `box`) to (bank, row, column, lane) — one table shared by all
    cores, since group-broadcast commands need equal offsets in every core.
    A lane of -1 means the whole column holds lane partials of one element.

    bands: ((expr, lo[G, C], hi[G, C]), ...) extra validity constraints of
           compound representative mappings (lo <= expr(values) < hi).
    """
    name: str
    operand: int                      # PimOp operand index, -1 = the result
    vars: tuple[str, ...]
    start: np.ndarray                 # [G, C, V] int
    length: np.ndarray                # [G, C, V] int
    box: tuple[int, ...]              # padded local length per var
    index_map: tuple                  # AffineExprs over `vars` -> tensor index
    shape: tuple[int, ...]            # tensor shape
    positions: np.ndarray             # [prod(box), 4] int32: bank, row, col, lane
    bands: tuple = ()
    space: str = "bank"

    @property
    def size(self) -> int:
        return int(np.prod(self.box, dtype=np.int64))

    def rows(self) -> tuple[int, int]:
        """(first, last + 1) row the region occupies."""
        return int(self.positions[:, 1].min()), int(self.positions[:, 1].max()) + 1


@dataclass(frozen=True)
class Readback:
    """How the host assembles the op's result from what it read back.

    layout:    index into Program.layouts of the partial-result region.
    combiner:  how partials of one output element merge ("add", "max", "min").
    lane_partials: True when each lane holds a partial of the same output
              element (lanes along a reduction variable), merged on the host.
    epilogue_on_host: the op's epilogue runs in the host merge.
    """
    layout: int
    combiner: str = "add"
    lane_partials: bool = False
    epilogue_on_host: bool = True


@dataclass(frozen=True)
class ProgramStats:
    """Record counts and bytes per direction of one program, whole program (all groups).

    records:         live records (n > 0, or every record where the family counts them all).
    commands:        opcode name -> commands issued (a family may add its own counts, e.g.
                     Newton's `GWRITE_columns`).
    rearrange_bytes: host -> PIM operand bytes paid on every call.
    resident_bytes:  host -> PIM operand bytes a resident operand pays once.
    register_bytes:  host -> PIM bytes written into registers / buffers.
    readback_bytes:  PIM -> host bytes the host merges.
    result_bytes:    bytes of the op's result the host writes (4 per element unless the family
                     says otherwise; 0 when nothing is merged).
    merge_flops:     host flops of the merge (partial adds, then the epilogue per output).
    h2d_bytes:       every byte the host sends (default rearrange + resident + register).
    d2h_bytes:       every byte the host receives (default readback_bytes; UPMEM receives results
                     it does not merge).
    host_bytes:      bytes the host streams itself (the "non-PIM" host-stream program).
    extra:           a family's own counts no generic reader uses (UPMEM: instructions, DMA bytes,
                     per-DPU transfer sizes).
    """
    records: int = 0
    commands: Mapping[str, int] = field(default_factory=dict)
    rearrange_bytes: int = 0
    resident_bytes: int = 0
    register_bytes: int = 0
    readback_bytes: int = 0
    result_bytes: int = 0
    merge_flops: int = 0
    h2d_bytes: int = 0
    d2h_bytes: int = 0
    host_bytes: int = 0
    extra: Mapping[str, int] = field(default_factory=dict)



# Program.as_text is lower/text.py's `program_text`, which imports this module: it registers
# itself here (the package imports it), so program.py does not import text.py
PROGRAM_TEXT: list = []


@dataclass(frozen=True)
class Program:
    """A lowered (op, draft, backend).  See the module docstring.

    operands: Program tensor index -> PimOp operand index (-1 for the result).
    options:  the lowering options used (resident operands, optimisations).
    parallel_rearrangement: host->PIM transfers of different groups overlap
              (DCC channel-parallel rearrangement through the staging buffer);
              False: groups are written one after another.
    stats:    `ProgramStats`: record counts, bytes moved per direction (`lower.stats` builds it).
    backend_name / family: the Backend it was lowered for and the backend
              family (`pimjax.backends`) whose interpreter runs its records.
    """
    backend_name: str
    op: Any = field(repr=False)
    draft: Any
    layouts: tuple[TensorLayout, ...]
    commands: Records
    host_data: tuple[np.ndarray, ...]
    readback: Readback
    groups: int
    cores: int
    parallel_rearrangement: bool = True
    options: dict = field(default_factory=dict, compare=False)
    stats: ProgramStats = field(default_factory=ProgramStats, compare=False)
    meta: dict = field(default_factory=dict, compare=False)
    family: str = ""

    def as_text(self, max_lines: int = 60) -> str:
        """The program's records as readable text (`lower/text.py`)."""
        return PROGRAM_TEXT[0](self, max_lines)


# interpreters' per-program caches, kept beside the (frozen) Program rather than in it: keyed by
# the program's identity and dropped when the program is collected
_SIDE: dict[int, dict] = {}


def side_cache(program: Program) -> dict:
    """A dict an interpreter may fill with tables derived from `program`
    (which it must not mutate): the same dict for the program's lifetime."""
    key = id(program)
    cache = _SIDE.get(key)
    if cache is None:
        cache = _SIDE[key] = {}
        weakref.finalize(program, _SIDE.pop, key, None)
    return cache
