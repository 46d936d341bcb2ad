"""The "non-PIM" program: the host streams every operand out of the same
memory and writes the result back, with no PIM compute (the `nonpim`
figure of the Samsung / AttAcc simulators, and a memory-bound GPU-only
reference on the PIM memory itself).

Host addresses interleave over all groups and, within a group, over its
banks in an order that alternates bank groups, one DRAM row (all columns)
per bank at a time — the streamed transfer records `RD_S` / `WR_S`.
"""
from __future__ import annotations

import numpy as np

from ..hw.core import Backend
from ..trace.ir import PimOp
from .layout import value_shapes
from .program import Op, Phase, Program, ProgramStats, Readback, RecordBuilder, stack_streams


def _alternating_banks(banks: int, per_bg: int) -> list[int]:
    """Bank order whose consecutive banks sit in different bank groups."""
    return sorted(range(banks), key=lambda b: (b % per_bg, b // per_bg))


def host_stream_program(op: PimOp, backend: Backend, shapes: dict | None = None,
                        elem_bytes: int | None = None) -> Program:
    """Read every operand of `op` and write its result through the memory of
    `backend` (all groups in parallel, the data spread evenly)."""
    shapes = value_shapes(op, shapes)
    eb = elem_bytes or backend.core.elem_bytes
    colb = backend.core.col_bytes
    cols_per_row = backend.core.cols
    G = backend.n_groups
    seen = set()
    in_bytes = 0
    for acc in op.operands:
        if acc.value not in seen:
            seen.add(acc.value)
            in_bytes += int(np.prod(shapes[acc.value], dtype=np.int64)) * eb
    out_bytes = int(np.prod(shapes[op.result.value], dtype=np.int64)) * eb
    banks = _alternating_banks(backend.group.banks, backend.group.banks_per_bank_group)
    b = RecordBuilder()
    for total, op_code, phase in ((in_bytes, Op.RD_S, Phase.READBACK), (out_bytes, Op.WR_S, Phase.REARRANGE)):
        cols = -(-total // (colb * G))                 # columns per group
        rows_per_bank = -(-cols // (cols_per_row * len(banks)))
        left = cols
        for row in range(rows_per_bank):
            for bank in banks:
                n = min(cols_per_row, left)
                if n <= 0:
                    break
                b.add(op_code, bank=bank, row=row, col=0, n=n, phase=phase)
                left -= n
    records = stack_streams([b.build()])
    stats = ProgramStats(records=len(b), host_bytes=in_bytes + out_bytes)
    return Program(backend.name, op, None, (), records, (), Readback(-1), G, 1,
                   parallel_rearrangement=True, stats=stats, meta={"kind": "host-stream"}, family=backend.family)
