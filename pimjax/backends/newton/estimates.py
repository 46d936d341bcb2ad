"""Newton's closed-form estimates for the cost model (`Family.estimates`):
per-group command counts (`counts.py`) and the command stream's phase times
(`time.py`'s walk under the DRAM rule table) of every draft of a table
(exact but for refresh: Newton's model is a residual over `est_t_total`).
"""
from __future__ import annotations

import numpy as np

from ...family.hooks import EstimateInputs
from ...partition.verify import matrix_and_vector
from .counts import newton_geometry, newton_plan, plan_counts
from .time import newton_phases


def _counts_and_phases(x: EstimateInputs):
    """(per-group command counts, phase times, READRES groups) of a
    contraction's drafts on a backend with a global buffer per group: the
    counts `plan_counts`' ([n] each), the phases `newton_phases`', and the
    groups' READRES summed over groups in units of the worst group's ([n]
    float); None for anything else (no Newton estimate)."""
    op, backend = x.op, x.backend
    if "global_buffer" not in backend.group.units or op.kind != "contraction":
        return None
    try:
        mi, vi = matrix_and_vector(op, x.shapes, x.matrix)
    except Exception:  # noqa: BLE001 - a contraction Newton cannot run (it will not lower)
        return None
    mv, vv = set(op.operands[mi].vars), set(op.operands[vi].vars)
    G, C, gran = x.groups, x.cores, x.granularity
    # the lowering's geometry: padded box lengths (a halo set tiled by its combined index widens
    # h by the halo and keeps every kh), vector classes and busy cores of the fullest group
    geo = newton_geometry(op, vv, x.sets, x.reps, x.tile, G, C)
    busy = geo["busy"]
    plan = newton_plan(op, mv, vv, geo["lens"], x.dataflow, x.buffers, geo["passes"], backend)
    counts = plan_counts(plan, busy, gran == 1, backend)
    # every group reads back its own classes' latches: along a set the vector reads, the groups
    # hold ceil(L / T) busy cores between them, against G x min(C, tiles) counted per group
    dims = {v for v in op.output_vars if v in vv} | set(op.reduction_vars)
    rb_groups = np.asarray(G, np.float64).prod(axis=1)
    for si, s in enumerate(x.sets):
        if dims & set(s.vars):
            rb_groups = rb_groups * x.used_tiles[:, si] / np.maximum(G[:, si] * busy[:, si], 1)
    return counts, newton_phases(plan, np.asarray(C).prod(axis=1), gran == 1, backend,
                                 busy=busy.prod(axis=1)), rb_groups


def newton_estimates(x: EstimateInputs) -> dict:
    """{counts, readback_bytes, t_readback, t_merge, t_rearr, t_compute} ([n];
    times in cycles of tCK) of a contraction's drafts, {} for other ops.

    Newton reads every latch back in READRES bursts and the host adds them
    up, so read-back bytes and the merge on the host roofline follow from
    the counts; the rearrangement, compute and read-back are the command
    stream's phases in closed form (NaN where the walk does not settle:
    those keep the count estimates and the generic ones)."""
    got = _counts_and_phases(x)
    if got is None:
        return {}
    nt, ph, rb_groups = got
    backend, op = x.backend, x.op
    core, t, host = backend.core, backend.timing, backend.system.host
    tck = float(t.tCK)
    out_elems = x.out_elems
    rb_bytes = nt["readres_bursts"] * rb_groups * core.col_bytes
    t_rb = nt["readres"] * float(t.tCL) + nt["readres_bursts"] * float(t.tBL)   # a read per READRES
    t_merge = host.time_ns(rb_bytes + out_elems * 4, rb_bytes / max(1, core.reg_bytes)
                           + (out_elems if op.epilogue is not None else 0.0)) / tck
    # the groups write channel-parallel through the host's staging buffer, which the host reads at
    # its memory bandwidth (the simulator's floor under the leading writes)
    ok = np.isfinite(ph["pre"])
    host_read = host.memory_ns(ph["wr_cols"] * core.col_bytes * x.groups_used) / tck
    lead = np.maximum(ph["pre"], host_read) if host.staging_buffer_bytes > 0 \
        else ph["pre"] * x.groups_used                 # without staging the groups write in turn
    return {"counts": nt, "readback_bytes": rb_bytes, "t_merge": t_merge,
            "t_rearr": np.where(ok, lead + ph["k_rearr"], x.t_rearr),
            "t_compute": np.where(ok, ph["compute"], x.t_compute),
            "t_readback": np.where(ok, ph["readback"], t_rb)}
