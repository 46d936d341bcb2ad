"""Baseline mappings, each expressed as a Draft and lowered like any other.

These are what speedups are measured against:

* hbm-pim — the Samsung simulator's mapping (`reference/hbm-pim.md`): GEMV
  outputs over all 64 pCH x 8 units (4096 per output tile, 8 GRF_B per
  unit), the input in 128-element tiles (8 GRF_A x 16 lanes), output
  stationary; elementwise and reductions over all units in tiles of 8 bursts.
* attacc, newton, upmem — added by their lowering modules (see
  `BASELINES`).

`baseline(op, backend)` returns the backend's baseline Draft for any op it
supports, or None.
"""
from __future__ import annotations

from typing import Callable

from ..hw.core import Backend
from ..trace.ir import PimOp
from .dimsets import dimension_sets
from .draft import DimPart, Draft
from .generate import lane_candidates

BASELINES: dict[str, Callable[[PimOp, Backend], Draft | None]] = {}


def register_baseline(name: str):
    def wrap(fn):
        BASELINES[name] = fn
        return fn
    return wrap


def baseline(op: PimOp, backend: Backend) -> Draft | None:
    """The backend's default mapping of `op` as a Draft (None if it has none)."""
    fn = BASELINES.get(backend.name)
    return None if fn is None else fn(op, backend)


def _largest_pow2_at_most(n: int, cap: int) -> int:
    p = 1
    while p * 2 <= min(n, cap):
        p *= 2
    return p


@register_baseline("hbm-pim")
def hbm_pim_baseline(op: PimOp, backend: Backend) -> Draft | None:
    """The Samsung simulator's mapping.

    The output (or, for elementwise ops, the iteration) set that the lanes
    do not run along is spread over every group and core; every other set
    stays on one core; KI = KO = 8.  For a GEMV y[M] = W[M x N] x[N] this is
    hbm-pim.md's baseline: 4096-output tiles over 64 pCH x 8 units, 128-input
    tiles, output-stationary."""
    if op.kind not in ("contraction", "elementwise", "reduction"):
        return None
    sets = dimension_sets(op)
    lanes = lane_candidates(op, backend)
    lane = lanes[0]
    G, C = backend.n_groups, backend.cores_per_group
    ext = op.extents
    parts = []
    placed = False
    for s in sets:
        length = s.extent(0, ext)[1]
        # outputs (not the lane-reduced set) spread; elementwise: the first set
        spread = not placed and not s.reduction and (op.kind == "elementwise" or lane not in s.vars)
        if spread:
            g = _largest_pow2_at_most(length, G)
            c = _largest_pow2_at_most(max(1, length // g), C)
            parts.append(DimPart(g, c, 0))
            placed = True
        else:
            parts.append(DimPart(1, 1, 0))
    ki = 8 if op.kind == "contraction" else 1
    return Draft(tuple(parts), reduction="complete", dataflow="os", ki=ki, ko=8, lane_var=lane)


def _largest_divisor_at_most(n: int, cap: int) -> int:
    return max(d for d in range(1, n + 1) if n % d == 0 and d <= max(1, cap))


@register_baseline("newton")
def newton_baseline(op: PimOp, backend: Backend) -> Draft | None:
    """Newton's own mapping (PIMFlow §2.1-2.2; its command generator
    `OutputNewtonTrace`): the matrix rows (the output variables only the
    matrix has) spread over the channels and then the banks, the largest set
    first; the reduction stays whole in a bank and streams through one global
    buffer in row-sized input chunks (GWRITE, then G_ACT / COMP / READRES over
    every matrix row of the chunk: input-stationary); one buffer (plain
    GWRITE), group-broadcast commands, no host reduction."""
    if op.kind != "contraction":
        return None
    from .verify import infer_shapes, matrix_and_vector, op_support
    if not op_support(op, backend)[0]:
        return None
    _, vi = matrix_and_vector(op, infer_shapes(op))
    vvars = set(op.operands[vi].vars)
    sets = dimension_sets(op)
    ext = op.extents
    lane = lane_candidates(op, backend)[0]
    rows = [i for i, s in enumerate(sets) if not s.reduction and not (set(s.vars) & vvars)]
    rows.sort(key=lambda i: -sets[i].extent(0, ext)[1])
    g_rem, c_rem = backend.n_groups, backend.cores_per_group
    alloc = {}
    for i in rows:
        length = sets[i].extent(0, ext)[1]
        g = _largest_divisor_at_most(g_rem, length)
        c = _largest_divisor_at_most(c_rem, length // g)
        alloc[i] = (g, c)
        g_rem, c_rem = g_rem // g, c_rem // c
    parts = tuple(DimPart(*alloc.get(i, (1, 1)), 0) for i in range(len(sets)))
    # input-stationary when a bank iterates several matrix rows over several chunks
    chunk = backend.group.global_buffer_bytes // max(1, backend.group.n_global_buffers) \
        // backend.core.elem_bytes
    red = 1
    for v in op.reduction_vars:
        red *= ext[v]
    outs = 1
    for i in rows:
        outs *= -(-sets[i].extent(0, ext)[1] // (alloc[i][0] * alloc[i][1]))
    dataflow = "is" if red > chunk and outs > 1 else "os"
    return Draft(parts, reduction="complete", dataflow=dataflow, lane_var=lane, buffers=1,
                 granularity="broadcast")
