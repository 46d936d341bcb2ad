"""PIMFlow's GPU + PIM modes on a compiled graph: `mixed_plans` runs Algorithm 1
(`search.mixed.execution_mode_search`) over the ops of a graph whose backend has a GPU
beside PIM (`System.cogpu`), rewriting the verified plans to "host" / "pim" / "md-dp";
`run_split` computes an md-dp op's values (its PIM part executed, the rest from the GPU).

`search/mixed.py` owns the search over node times; this module measures the node times of
a pim_jit graph (`op_node_times` per op) and turns the search's modes back into plans.
Times ns.
"""
from __future__ import annotations

from dataclasses import dataclass
from dataclasses import replace as dc_replace

import numpy as np

from ..partition.verify import infer_shapes
from ..search.mixed import (
    RATIOS,
    NodeTimes,
    execution_mode_search,
    op_node_times,
    result_vars,
    share_builder,
    split_var,
)
from ..sim.execute import execute
from ..sim.host import host_time
from .plans import gpu_words, host_bytes, in_place_ns, value_dtypes, value_shapes
from .residency import append_update

SPLIT_WITHIN = 8.0
"""An op is offered MD-DP splits only when its whole-op GPU (beside PIM) and PIM
times are within this factor of each other: PIMFlow §3 observation 2 -- a
split pays where "neither hardware outperforms the other by a crushing
margin"; at 8x the best split saves at most 1 / 9 of the faster device's time,
and skipping the others keeps the nine extra tunings per op off ops that
cannot gain."""


@dataclass(frozen=True)
class Split:
    """An MD-DP op's split, what `Compiled` executes: the PIM part computes
    the first `pim_rows` iterations of loop variable `var` (the result
    dimension `result_dim`) with `choice`'s program; the GPU computes the
    rest.  gpu_ns / pim_ns: the two parts' times, run at once."""
    var: str
    result_dim: int
    pim_rows: int
    choice: object
    gpu_ns: float
    pim_ns: float


def mixed_plans(graph, backend, tuner, plans: list) -> list:
    """Algorithm 1 on a compiled graph whose backend has a concurrent GPU
    (`System.cogpu`): every op a node, in program order -- host ops on the GPU
    beside PIM, PIM-capable ops also whole on PIM, and contractions whose two
    times are within `SPLIT_WITHIN` also split in 10 % steps (each share's PIM
    part tuned and simulated) -- then the plans rewritten to the search's
    modes ("host" / "pim" / "md-dp", each with `mixed_ns`, its time in the
    plan, and `gpu_share`).  If the GPU alone on every channel (PIM disabled,
    PIMFlow §5) beats the best GPU + PIM plan, every op goes to the GPU with
    that reason.  Fused attention blocks (AttAcc; no concurrent GPU) are left
    as they are: the graph is returned unchanged."""
    cogpu = backend.system.cogpu
    if cogpu is None or any(p.block for p in plans):
        return plans
    shapes, dtypes = value_shapes(graph), value_dtypes(graph)
    eb = host_bytes(graph, backend)
    order = sorted(plans, key=lambda q: q.index)
    nodes, parts = [], {}
    nan = np.full(len(RATIOS), np.nan)
    for p in order:
        op = p.op
        if p.in_place:                  # a KV cache's append: the update alone, as predict_plans times it
            g_full = in_place_ns(graph, op, append_update(op), backend, eb, host=cogpu)
        else:
            g_full = float(host_time(op, cogpu, shapes, eb))
        gpu = nan.copy()
        gpu[0], gpu[-1] = 0.0, g_full
        pim_t = nan.copy()
        pim_t[-1] = 0.0
        if p.choice is not None:
            pim_t[0] = float(p.choice.report.total_ns)
            var = split_var(op) if op.kind == "contraction" else None
            # an op reading a growing KV cache pays its appended rows per call (`sim.append`), a
            # charge the split shares' tunings do not carry: such ops run whole
            grows = p.proposal is not None and bool(p.proposal.append)
            if var is not None and not grows and max(g_full, pim_t[0]) <= SPLIT_WITHIN * min(g_full, pim_t[0]):
                node, choices = op_node_times(
                    f"{op.name}#{p.index}", share_builder(op, var), backend, tuner, resident=p.resident,
                    dtype_bytes=eb, with_choices=True, dtypes=dtypes, pim_whole=pim_t[0],
                    result_dtype=dtypes[op.result.value])
                gpu = np.where(np.isnan(node.gpu_ns), gpu, node.gpu_ns)
                pim_t[:-1] = np.where(np.isnan(node.pim_ns[:-1]), pim_t[:-1], node.pim_ns[:-1])
                parts[p.index] = (var, choices, node)
        nodes.append(NodeTimes(f"{op.name}#{p.index}", gpu, pim_t, None, "fc" if p.choice is not None else "other"))
    mixed = execution_mode_search(nodes, pipeline=False)
    gpu_only = float(sum(p.host_ns for p in order))
    words = gpu_words(backend)
    if gpu_only <= mixed.total_ns:
        why = (f"PIM disabled for this function: the {words} alone on every channel ({gpu_only:,.0f} ns) beats "
               f"the best GPU + PIM plan ({mixed.total_ns:,.0f} ns; the GPU beside PIM reads only its own "
               f"channels)")
        return [dc_replace(p, placement="host", reason=why, mixed_ns=p.host_ns, gpu_share=1.0) for p in order]
    out = []
    beside = f"{cogpu.name} beside PIM"
    for p, m, nd in zip(order, mixed.nodes, nodes):
        if m.mode == "gpu":
            why = f"on the {beside}: {nd.gpu_ns[-1]:,.0f} ns" + (
                f" (PIM {nd.pim_ns[0]:,.0f} ns)" if np.isfinite(nd.pim_ns[0]) else f"; {p.reason}")
            out.append(dc_replace(p, placement="host", reason=why, mixed_ns=float(nd.gpu_ns[-1]), gpu_share=1.0))
        elif m.mode == "pim":
            why = f"on PIM: {nd.pim_ns[0]:,.0f} ns beats the {beside} {nd.gpu_ns[-1]:,.0f} ns"
            if np.isfinite(nd.split_ns()[1:-1]).any():
                why += " and every split"
            out.append(dc_replace(p, placement="pim", reason=why, mixed_ns=float(nd.pim_ns[0]), gpu_share=0.0))
        else:
            var, choices, node = parts[p.index]
            i = int(np.argmin(np.abs(RATIOS - m.ratio)))
            choice = choices[float(RATIOS[i])]
            sub = choice.program.op
            dim = next(d for d, v in result_vars(sub) if v == var)
            split = Split(var, dim, sub.extents[var], choice, float(nd.gpu_ns[i]), float(nd.pim_ns[i]))
            why = (f"MD-DP: {m.ratio:.0%} of {var} on the {beside} ({nd.gpu_ns[i]:,.0f} ns) while PIM runs the "
                   f"other {1 - m.ratio:.0%} ({nd.pim_ns[i]:,.0f} ns); whole: GPU {nd.gpu_ns[-1]:,.0f} / PIM "
                   f"{nd.pim_ns[0]:,.0f} ns")
            out.append(dc_replace(p, placement="md-dp", reason=why, draft=choice.draft, program=choice.program,
                                  choice=choice, mixed_ns=float(m.segment_ns), gpu_share=float(m.ratio),
                                  split=split))
    return out


def run_split(split: Split, op, operands: list, host_result):
    """The values of an MD-DP op: its PIM part executed (`sim.execute`) on the
    operands' leading slices its index maps read, the rest of `host_result`
    (the op computed on the GPU) along the split dimension, concatenated."""
    sub = split.choice.program.op
    sub_shapes = infer_shapes(sub)
    pim_in = [np.asarray(x)[tuple(slice(0, s) for s in sub_shapes[a.value])] for x, a in zip(operands, op.operands)]
    pim_out = np.asarray(execute(split.choice.program, *pim_in, arithmetic="backend"))
    rest = np.take(np.asarray(host_result), np.arange(split.pim_rows, np.shape(host_result)[split.result_dim]),
                   axis=split.result_dim)
    return np.concatenate([pim_out.reshape(sub_shapes[sub.result.value]).astype(rest.dtype), rest],
                          axis=split.result_dim)


__all__ = ["SPLIT_WITHIN", "Split", "mixed_plans", "run_split"]
