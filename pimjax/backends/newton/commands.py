"""Newton's command helpers that the GEMV lowering (`lower.py`) and PIMFlow's packed mapping
(`packed.py`) share: the GWRITE banks, READRES bursts, row runs of bank columns, the host's
placement writes (`rearrange`), operand index arithmetic and the program's statistics.

A file of its own so that both lowerings import it and neither imports the other.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ...hw.core import Backend
from ...lower.context import LowerContext
from ...lower.program import Op, Phase, RecordBuilder, Records, bank_order, chunk, streamed
from ...lower.stats import ProgramStats, program_stats

M_LAYOUT, V_LAYOUT, R_LAYOUT = 0, 1, 2


def gw_banks(backend: Backend) -> list[int]:
    """The GWRITE banks: one per bank group (timing only)."""
    per_bg = backend.group.banks_per_bank_group
    return [g * per_bg for g in range(max(1, backend.group.banks // per_bg))]


def readres_bursts(backend: Backend, latches, one_bank):
    """32 B bursts of one READRES: every bank's latches (broadcast) or one
    bank's (`one_bank`), `Core.readback_bus_bytes` each (ints or numpy
    arrays); 0 where the read-back takes no bus time (the READRES record then
    has n = 0: the timing engines skip it, `execute` still reads it)."""
    banks = np.where(one_bank, 1, backend.group.cores_per_group)
    bus = backend.core.readback_bus_bytes
    if bus == 0:                     # a command slot, no bus time (PIMFlow's fork): a record of no columns
        return np.zeros_like(np.asarray(latches * banks))
    return np.maximum(1, -(-(banks * bus * np.asarray(latches)) // backend.core.col_bytes))


def row_runs(flat: np.ndarray, cols: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted flat bank columns as runs of consecutive columns inside one row:
    (first column, length) of each."""
    brk = np.nonzero((np.diff(flat) != 1) | (flat[1:] // cols != flat[:-1] // cols))[0] + 1
    starts = np.concatenate([[0], brk])
    return flat[starts], np.diff(np.concatenate([starts, [len(flat)]]))


@lru_cache(maxsize=65536)
def bank_runs(base: int, ncols: int, cols: int):
    """Flat bank columns [base, base + ncols) as (row, col, n, offset) runs inside rows
    (a tuple, cached: segments of one draft repeat the same runs)."""
    out = []
    off = 0
    while off < ncols:
        row, col = divmod(base + off, cols)
        n = min(ncols - off, cols - col)
        out.append((row, col, n, off))
        off += n
    return tuple(out)


# Up to this many columns per group the host writes column by column in the
# controller's bank-group-interleaved order; larger placements use runs (one
# record per bank row; streamed WR_S, columns tCCD_S apart, when the banks
# span two bank groups or more: `program.streamed`) — the policy of the
# HBM-PIM lowering, so both backends time bulk placement alike.
INTERLEAVE_LIMIT = 4096


def rearrange(b: RecordBuilder, reads: dict, cols: int, per_bg: int, resident: bool) -> int:
    """Host writes of every bank column the kernel reads (padding included:
    zeros instead of boundary checks), the banks taken in turn in an order
    that alternates bank groups.  Returns the columns written."""
    order = bank_order(list(reads), per_bg)
    shared = all(reads[c] is reads[order[0]] for c in order)     # one array for every bank (broadcast)
    lists = [np.asarray(reads[c], np.int64) for c in order]
    n = sum(len(x) for x in lists)
    if n == 0:
        return 0
    if n > INTERLEAVE_LIMIT and shared:
        # broadcast: every bank reads the same columns -- one set of row runs,
        # unit t of every bank (in bank order) then unit t + 1
        first, cnt = row_runs(lists[0], cols)
        nb = len(order)
        bank = np.tile(np.asarray(order, np.int64), len(first))
        add_many(b, streamed(Op.WR, order, per_bg), bank=bank, row=np.repeat(first // cols, nb),
                  col=np.repeat(first % cols, nb), n=np.repeat(cnt, nb), phase=Phase.REARRANGE, src=M_LAYOUT,
                  core=bank, resident=int(resident))
        b.add(Op.PREA, bank=0, row=0, n=1, phase=Phase.REARRANGE, resident=int(resident))
        return n
    if n <= INTERLEAVE_LIMIT:
        units = [(c, x, np.ones_like(x)) for c, x in zip(order, lists)]       # one column each
        op = Op.WR
    else:
        units = []
        for c, x in zip(order, lists):                                        # runs inside a row
            units.append((c, *row_runs(x, cols)))
        op = streamed(Op.WR, order, per_bg)
    bank = np.concatenate([np.full(len(u[1]), u[0]) for u in units])
    flat = np.concatenate([u[1] for u in units])
    cnt = np.concatenate([u[2] for u in units])
    turn = np.concatenate([np.arange(len(u[1])) for u in units])
    rank = np.concatenate([np.full(len(u[1]), k) for k, u in enumerate(units)])
    o = np.lexsort((rank, turn))                 # unit t of every bank, then unit t + 1
    add_many(b, op, bank=bank[o], row=flat[o] // cols, col=flat[o] % cols, n=cnt[o],
              phase=Phase.REARRANGE, src=M_LAYOUT, core=bank[o], resident=int(resident))
    # close the written rows: the kernel starts (GWRITE) with every bank precharged
    b.add(Op.PREA, bank=0, row=0, n=1, phase=Phase.REARRANGE, resident=int(resident))
    return n


def add_many(b: RecordBuilder, op: Op, **fields) -> None:
    """Append a batch of records (array or scalar fields; defaults as `RecordBuilder.add`)."""
    b.extend(chunk(op, **fields))


def flat_index(operand, shape, env: dict, like: np.ndarray):
    """(flat index, valid) of `operand`'s elements at the loop values `env`
    (arrays broadcastable to `like`; a variable the map reads and `env` lacks
    is 0): its index map evaluated per dimension, out-of-range and inexact
    (floordiv) points invalid."""
    flat = np.zeros(like.shape, np.int64)
    valid = np.ones(like.shape, bool)
    stride = 1
    for expr, size in reversed(list(zip(operand.index_map, shape))):
        full = {x: env.get(x, np.zeros_like(like)) for x in expr.vars}
        idx, ok = expr.evaluate(full)
        idx = np.broadcast_to(idx, like.shape)
        valid &= (idx >= 0) & (idx < size)
        if ok is not None:
            valid &= np.broadcast_to(ok, like.shape)
        flat = flat + np.clip(idx, 0, size - 1) * stride
        stride *= size
    return flat, valid



def newton_stats(ctx: LowerContext, records: Records, counts: list[dict], readback_bytes: int,
                 scale: int = 1) -> ProgramStats:
    """The `ProgramStats` of a Newton program (GEMV or packed).

    counts: per stream, the emitter's command counts (GWRITE = commands, GWRITE_columns = 32 B
    bursts, COMP = column commands, COMP_records, G_ACT, READRES, PREA, WR = host column writes),
    summed over the streams.  readback_bytes: what the host receives (the family's READRES
    latches at their width, whatever bus time the backend charges for them).  scale: groups a
    record stands for (a stream shared by every group: the group count)."""
    colb = ctx.backend.core.col_bytes
    total = {k: sum(c[k] for c in counts) for k in counts[0]}
    op_ = np.asarray(records.op)
    n = np.asarray(records.n)
    res = np.asarray(records.resident)
    wr = (op_ == Op.WR) | (op_ == Op.WR_S)
    return program_stats(ctx, records=int((n > 0).sum()), commands=total,
                         rearrange_bytes=int(n[wr & (res == 0)].sum()) * colb * scale,
                         resident_bytes=int(n[wr & (res == 1)].sum()) * colb * scale,
                         register_bytes=total["GWRITE_columns"] * colb,
                         readback_bytes=readback_bytes,
                         # one add per latch value read back, then the epilogue
                         merge_adds=readback_bytes // max(1, ctx.backend.core.reg_bytes))


__all__ = ["M_LAYOUT", "V_LAYOUT", "R_LAYOUT", "gw_banks", "readres_bursts", "row_runs", "bank_runs",
           "INTERLEAVE_LIMIT", "rearrange", "add_many", "flat_index", "newton_stats"]
