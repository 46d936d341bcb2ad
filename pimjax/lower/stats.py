"""The one builder of what a lowering returns: a program's `ProgramStats` and the `Program`.

Every family's lowering ends in `program_stats` (the counts the family measured from its records,
the result's size and merge work derived here the same way for all) and `lowered_program` (the
`Program` itself), so a reader (`report`, `sim.cycles`, `lower.text`, UPMEM's cycles) reads one
typed record instead of a dict whose keys each family spells.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

import numpy as np

from .native import class_totals
from .program import Op, Phase, Program, ProgramStats, Readback, Records

if TYPE_CHECKING:
    from .context import LowerContext


def program_stats(ctx: LowerContext, *, records: int, commands: Mapping[str, int] | None = None,
                  rearrange_bytes: int = 0, resident_bytes: int = 0, register_bytes: int = 0,
                  readback_bytes: int = 0, merge_adds: int = 0, element_bytes: int = 4,
                  merged: bool = True, h2d_bytes: int | None = None, d2h_bytes: int | None = None,
                  extra: Mapping[str, int] | None = None, result_shape: tuple | None = None) -> ProgramStats:
    """The `ProgramStats` of `ctx.op`'s program from the counts its family measured.

    merge_adds:    host adds of the partials read back (the family knows its partial width).
    element_bytes: bytes per result element the host writes.
    merged:        whether the host merges at all (False: result_bytes is 0).
    The result's element count (`result_shape`, default from `ctx.shapes`) sizes result_bytes,
    and an epilogue adds one flop per output to merge_flops."""
    shape = ctx.shapes[ctx.op.result.value] if result_shape is None else result_shape
    out_elems = int(np.prod(shape, dtype=np.int64))
    epilogue = out_elems if ctx.op.epilogue is not None else 0
    return ProgramStats(
        records=int(records), commands=dict(commands or {}),
        rearrange_bytes=int(rearrange_bytes), resident_bytes=int(resident_bytes),
        register_bytes=int(register_bytes), readback_bytes=int(readback_bytes),
        result_bytes=out_elems * element_bytes if merged else 0,
        merge_flops=int(merge_adds) + epilogue,
        h2d_bytes=int(rearrange_bytes + resident_bytes + register_bytes if h2d_bytes is None else h2d_bytes),
        d2h_bytes=int(readback_bytes if d2h_bytes is None else d2h_bytes),
        extra=dict(extra or {}))


@dataclass(frozen=True)
class ColumnTotals:
    """Columns of a program's records per (opcode, phase, resident), from one compiled pass.

    per:     int64 [ops, phases, 2] columns (a record stands for `n` columns).
    present: per opcode, whether any record has it.
    live:    records with n > 0."""
    per: np.ndarray
    present: np.ndarray
    live: int

    def columns(self, ops, phase: Phase | None = None, resident=(0, 1)) -> int:
        """Columns of the opcodes `ops` in `phase` (None: every phase), resident flags `resident`."""
        if not len(ops):
            return 0
        sel = self.per[list(ops)] if phase is None else self.per[list(ops), int(phase)][:, None]
        return int(sum(int(sel[:, :, r].sum()) for r in resident))

    def commands(self, groups: int) -> dict[str, int]:
        """Opcode name -> columns over every group (a shared stream counted once per group)."""
        return {Op(o).name: int(self.per[o].sum()) * groups for o in np.flatnonzero(self.present) if o != Op.NOP}


def column_totals(records: Records) -> ColumnTotals:
    """The `ColumnTotals` of `records` (any stream shape: counted over all streams)."""
    flat = [np.ascontiguousarray(np.asarray(getattr(records, f)).reshape(-1), np.int32)
            for f in ("op", "phase", "resident", "n")]
    n_ops = max(int(flat[0].max(initial=0)), max(Op)) + 1
    per, present, live = class_totals(*flat, n_ops, len(Phase))
    return ColumnTotals(per, present, int(live))


def column_stats(ctx: LowerContext, records: Records, *, writes=(Op.WR_S, Op.WR), registers=(),
                 reads=(), phased: bool = False, result_shape: tuple | None = None) -> ProgramStats:
    """The `ProgramStats` of a column-command program (HBM-PIM, AttAcc) from its records alone.

    writes / registers / reads: the opcodes whose columns (`col_bytes` each, every group) are the
    operand writes, the register / buffer writes and the read-back.  phased: count writes and
    registers only in `Phase.REARRANGE` and reads only in `Phase.READBACK` (HBM-PIM's host
    columns serve several phases); else every phase.  The host adds one partial per 2 bytes read
    back (16-bit partials), then the epilogue."""
    t = column_totals(records)
    G, colb = ctx.tiles.groups, ctx.backend.core.col_bytes
    wr_phase, rd_phase = (Phase.REARRANGE, Phase.READBACK) if phased else (None, None)
    readback_bytes = t.columns(reads, rd_phase) * colb * G
    return program_stats(ctx, records=t.live, commands=t.commands(G),
                         rearrange_bytes=t.columns(writes, wr_phase, (0,)) * colb * G,
                         resident_bytes=t.columns(writes, wr_phase, (1,)) * colb * G,
                         register_bytes=t.columns(registers, wr_phase) * colb * G,
                         readback_bytes=readback_bytes, merge_adds=readback_bytes // 2,
                         result_shape=result_shape)


def lowered_program(ctx: LowerContext, layouts, records: Records, host_data, readback: Readback,
                    stats: ProgramStats, meta: dict, groups: int | None = None,
                    cores: int | None = None, parallel: bool | None = None) -> Program:
    """The `Program` of `ctx`'s lowering: the one place a family's parts become a Program.

    layouts: the program's `TensorLayout`s; host_data: per stream host-data rows; groups / cores
    default to `ctx.tiles`'.  parallel: whether host -> PIM transfers of different groups overlap;
    by default when the options ask for channel-parallel rearrangement and the host has a staging
    buffer to do it through (UPMEM says its own: `bank_parallel`)."""
    if parallel is None:
        staging = ctx.backend.system.host.staging_buffer_bytes > 0
        parallel = bool(ctx.options.get("channel_parallel", True) and staging)
    return Program(ctx.backend.name, ctx.op, ctx.draft, tuple(layouts), records, tuple(host_data), readback,
                   ctx.tiles.groups if groups is None else groups, ctx.tiles.cores if cores is None else cores,
                   parallel_rearrangement=bool(parallel),
                   options=dict(ctx.options), stats=stats, meta=meta, family=ctx.backend.family)


__all__ = ["ProgramStats", "program_stats", "ColumnTotals", "column_totals", "column_stats", "lowered_program"]
