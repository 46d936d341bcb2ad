"""A lower bound on the simulated cycles of every UPMEM draft of a table,
from the table alone (no lowering): what lets an exhaustive search skip the
drafts that cannot win (`search/strategy.py`'s `Exhaustive` and `costmodel/evaluate.py`,
branch and bound).

Why it is a bound.  `cycles_upmem` prices the kernel at max(slowest
tasklet, instructions issued, DMA time) DPU cycles, and the pipeline issues
at most one instruction a cycle, so the compute phase -- and the total,
which adds transfers, read-back and merge -- lasts at least

    I / dpu_clock_ghz / tCK                      command-clock cycles

where I counts the instructions of the DPU the records describe.  That is
the largest DPU tile (`lower.py`), and every one of its compute points
issues `point_cost` instructions (`kernel_constants`: loads, the body,
loop and combine; tile, DMA and set-up instructions come on top), so

    I >= point_cost x max(ceil(P / dpus), prod_v L_v)

with P the op's iteration points (every point runs on some DPU, so one DPU
has at least the mean), dpus the draft's ranks x DPUs per rank, and L_v the
worst DPU's loop length of variable v: the data tile for a set's
single-variable mapping, 1 under a compound one (a length the bound never
overestimates).  Host transfers, DMA waits and the launch are left out, so
the bound stays below the simulated total (`tests/backends/upmem/test_upmem_bounds.py`
checks it on random shapes and drafts of every UPMEM kernel).  On a GEMV
13 824 x 5 120 (12 432 drafts) it leaves 576 to simulate.
"""
from __future__ import annotations

import numpy as np

from ...errors import PimCompileError
from ...hw.core import Backend
from ...partition.dimsets import dimension_sets
from ...partition.table import DraftTable
from ...partition.verify import per_core_var_lengths
from ...trace.ir import PimOp
from .lower import kernel_constants


def lower_bound(op: PimOp, table: DraftTable, backend: Backend, shapes: dict | None = None,
                options: dict | None = None) -> np.ndarray | None:
    """[n] float64: command-clock cycles no draft of `table` can beat when
    lowered with `options` (`lower_upmem`'s) and simulated (see the module
    docstring); None for an op `lower_upmem` does not lower (another kind,
    or a body the DPU has no instruction sequence for).

    shapes: unused (the bound needs the iteration space only); kept for the
    `Family.lower_bound` signature."""
    if not isinstance(op, PimOp) or op.kind not in ("contraction", "elementwise", "reduction"):
        return None
    try:
        pc = kernel_constants(op, **(options or {}))["point_cost"]
    except PimCompileError:        # a body the DPU cannot run: no draft lowers, the search says so
        return None
    ext = op.extents
    worst = per_core_var_lengths(op, dimension_sets(op), np.asarray(table.reps, np.int64),
                                 np.asarray(table.tile, np.int64), compound="one")
    box = np.ones(len(table), np.int64)
    for v in ext:
        box = box * worst[v]
    points = int(np.prod([int(e) for e in ext.values()], dtype=np.int64))
    dpus = np.asarray(table.groups_used, np.int64) * np.asarray(table.cores_used, np.int64)
    per_dpu = np.maximum(-(-points // np.maximum(dpus, 1)), box)
    t = backend.timing
    return per_dpu.astype(np.float64) * pc / float(t.dpu_clock_ghz) / float(t.tCK)


__all__ = ["lower_bound"]
