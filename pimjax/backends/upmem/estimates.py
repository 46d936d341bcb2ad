"""UPMEM's closed-form estimates for the cost model (`Family.estimates`):
the DPU kernel's cycles and the host transfers of every draft of a table,
`dpu.py`'s closed form of the lowering under the DPU time model (exact: the
UPMEM model is a residual over `est_t_total`).
"""
from __future__ import annotations

import numpy as np

from ...errors import PimCompileError
from ...family.hooks import EstimateInputs
from .cycles import DEFAULT_LINK
from .dpu import dpu_kernel_cycles, transfer_ns
from .lower import kernel_constants


def _dpu_constants(op) -> dict | None:
    """`lower.kernel_constants` of the op, or None when the DPU code model
    has no instruction sequence for its body (it will not lower)."""
    try:
        return kernel_constants(op)
    except PimCompileError:
        return None


def upmem_estimates(x: EstimateInputs) -> dict:
    """{t_dpu, t_compute[, t_rearr, t_readback, t_merge]} ([n] cycles of tCK)
    of the drafts `x` describes: the DPU kernel (`dpu.dpu_kernel_cycles`, on
    the DPU clock, converted) plus the launch, and the host transfers,
    read-back and merge (`dpu.transfer_ns`).  A body the DPU code model
    cannot price (the draft will not lower) gets a rough instruction and
    DMA count instead, and keeps the generic transfer estimates."""
    op, backend = x.op, x.backend
    t = backend.timing
    tck = float(t.tCK)
    eb = backend.core.elem_bytes
    tk, wt = x.tasklets, x.wram_tile
    out = {}
    consts = _dpu_constants(op)
    if consts is None:       # a body the DPU code model cannot price (the draft will not lower)
        t_dpu = np.maximum(x.tasklet_points * float(x.instr) * 11.0, x.dma * float(t.dma_latency_cycles)
                           / np.maximum(tk, 1) + x.footprint * eb / float(t.dma_bytes_per_cycle))
    else:                    # the lowering's own schedule and transfers in closed form (dpu.py)
        t_dpu = dpu_kernel_cycles(op, x.lens, tk, wt, x.dataflow, backend, consts, x.vector_vars)
        xfer = transfer_ns(op, x.lens, x.shapes, x.groups * x.cores, x.sets, x.groups_used, x.cores_used, wt,
                           x.reduction, backend, consts)
        out["t_rearr"], out["t_readback"], out["t_merge"] = (v / tck for v in xfer)
    t_dpu = t_dpu / float(t.dpu_clock_ghz) / tck
    out["t_dpu"] = t_dpu
    out["t_compute"] = t_dpu + DEFAULT_LINK.launch_ns / tck
    return out
