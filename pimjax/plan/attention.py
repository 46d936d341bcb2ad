"""Fused-block planning: the attention blocks a family fuses (AttAcc's score -> softmax ->
context pipeline on its softmax unit), planned as one op at both stages.

`attention_blocks` finds the blocks the family accepts (and why the others are not
fused), `predict_attention` / `verify_attention` are the lower and compile stages of one
block (the plan of its last op carries the proposal and program, the others are "fused"),
`note_unfused` prefixes an unfused candidate's ops with why.  Times ns.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..backends import family_of, has_family
from ..errors import PimCompileError
from ..hw.core import Backend
from ..lower.patterns import score_seq_dim
from ..partition.dimsets import dimension_sets
from ..sim.gpu_kernels import op_gpu_ns
from ..trace.ir import PimGraph
from .plans import OpPlan, gpu_words, host_bytes, predicted_placement, refuse


def attention_blocks(graph: PimGraph, backend: Backend) -> tuple[dict[int, tuple], dict[int, str]]:
    """({first op index: block} of the attention blocks a backend fuses
    (AttAcc's score -> softmax -> context pipeline), {op index: why its
    block is not fused}).  A candidate the family's `block_operands`
    refuses (a mask or bias array in the score epilogue, ...) is no block:
    its ops are planned one by one (the score and context products as
    GEMVs, the softmax on the host) and their reasons say why."""
    family = family_of(backend) if has_family(backend) else None
    if family is None or family.attention_blocks is None:
        return {}, {}
    blocks, unfused = {}, {}
    for first, block in family.attention_blocks(graph).items():
        try:
            family.block_operands([graph.ops[i] for i in block])
        except PimCompileError as err:
            why = f"not fused as an attention block (ops {', '.join(map(str, block))}): {err}"
            unfused.update({i: why for i in block})
        else:
            blocks[first] = block
    return blocks, unfused


def note_unfused(plans: list, unfused: dict[int, str]) -> list:
    """`plans` with each op of an unfused attention block's reason prefixed
    by why the block was not fused."""
    return [replace(p, reason=f"{unfused[p.index]}; {p.reason}")
            if p.index in unfused and not p.reason.startswith(unfused[p.index]) else p for p in plans]


def graph_gpu_ns(graph: PimGraph, backend: Backend, shapes: dict) -> np.ndarray:
    """Each op's share of the GPU-only run's kernels, ns (`sim.gpu_kernels.op_gpu_ns` on
    `System.baseline` with `host_bytes`): computed once per graph and handed to the blocks."""
    return op_gpu_ns(graph, backend.system.baseline, shapes, host_bytes(graph, backend))


def attention_ops(graph: PimGraph, block: tuple, backend: Backend, share: np.ndarray):
    """(ops, the block's ns on the GPU, the fused op, {op index: its share of the GPU's kernels,
    ns}) of an attention block; share: `graph_gpu_ns` of the graph."""
    ops = [graph.ops[i] for i in block]
    gpu_ns = {i: float(share[i]) for i in block}
    return ops, sum(gpu_ns.values()), family_of(backend).block_operands(ops), gpu_ns   # fused: (q, K, V) -> context


def predict_attention(graph, block, backend, tuner, shapes, dtypes, resident_ids, share,
                       placement: str = "auto") -> list[OpPlan]:
    """The lower stage of an attention block: its drafts predicted (on the
    score op), the predicted placement; the plan of its last op carries
    the proposal.  share: `graph_gpu_ns` of the graph."""
    family = family_of(backend)
    ops, h_ns, fused, gpu_ns = attention_ops(graph, block, backend, share)
    score, ctx = ops[0], ops[-1]
    n_var = score.result.index_map[score_seq_dim(ops)].single_var      # the sequence the softmax reduces
    seq_sets = [i for i, s in enumerate(dimension_sets(score)) if n_var in s.vars or s.reduction]

    def keep(table):          # a head's sequence and head dim stay in one channel (the softmax unit)
        return np.all(table.groups[:, seq_sets] == 1, axis=1)

    def lower_block(op, draft, be, shp, **opts):
        return family.lower_block(ops, draft, be, shp, **opts)

    res = tuple(k for k, a in enumerate(fused.operands) if a.value in resident_ids)
    try:
        proposal = tuner.propose(score, backend, shapes, dtypes, lower_fn=lower_block, keep=keep,
                                 tag="attention", resident=res, result_dtype=dtypes[ctx.result.value])
    except PimCompileError as err:
        proposal, why = None, f"cannot lower the attention block: {err}"
    else:
        why = "no draft of the attention block fits"
    if proposal is None:
        if placement == "pim":
            refuse(score, backend, why)
        return [OpPlan(i, graph.ops[i], "host", why, float(gpu_ns[i]))
                for i in block]
    pred_ns = proposal.predicted_cycles * float(backend.timing.tCK)
    where, verdict = predicted_placement(pred_ns, h_ns, placement, backend, "the attention block on PIM")
    why = f"attention block (ops {', '.join(map(str, block))}): {verdict}"
    if where == "pim":
        last = OpPlan(block[-1], ctx, "pim", why, h_ns, proposal.draft, None, proposal.predicted_cycles,
                      None, res, block, proposal)
        return [OpPlan(i, graph.ops[i], "fused", f"in the attention block run at op {block[-1]}", 0.0)
                for i in block[:-1]] + [last]
    plans = [OpPlan(i, graph.ops[i], "host", why, float(gpu_ns[i]))
             for i in block]
    plans[-1] = replace(plans[-1], draft=proposal.draft, predicted_cycles=proposal.predicted_cycles,
                        resident=res, block=block, proposal=proposal)
    return plans


def verify_attention(graph, carrier: OpPlan, backend, tuner, shapes, share,
                     placement: str = "auto") -> list[OpPlan]:
    """The compile stage of an attention block: its proposal verified
    (lowered and simulated), the placement on the simulated figures.
    share: `graph_gpu_ns` of the graph."""
    block, res = carrier.block, carrier.resident
    ops, h_ns, _, gpu_ns = attention_ops(graph, block, backend, share)
    score, ctx = ops[0], ops[-1]
    try:
        choice = tuner.verify(carrier.proposal)
    except PimCompileError as err:
        choice, why = None, f"cannot lower the attention block: {err}"
    else:
        why = "no draft of the attention block fits"
    if choice is None and placement == "pim":
        refuse(score, backend, why)
    if choice is None or (placement == "auto" and float(choice.report.total_ns) >= h_ns):
        if choice is not None:
            why = (f"{gpu_words(backend)} {h_ns:,.0f} ns beats the attention block on "
                   f"PIM {float(choice.report.total_ns):,.0f} ns")
        return [OpPlan(i, graph.ops[i], "host", why, float(gpu_ns[i]))
                for i in block]
    # the block runs where its last op (the context product) stood
    pim_ns = float(choice.report.total_ns)
    verdict = (f"beats the {gpu_words(backend)} {h_ns:,.0f} ns" if pim_ns < h_ns else
               f"placement={placement!r} (the {gpu_words(backend)}: {h_ns:,.0f} ns)")
    last = OpPlan(block[-1], ctx, "pim",
                  f"attention block (ops {', '.join(map(str, block))}) on PIM {pim_ns:,.0f} ns {verdict}",
                  h_ns, choice.draft, choice.program, choice.predicted_cycles, choice, res, block,
                  carrier.proposal)
    rest = [OpPlan(i, graph.ops[i], "fused", f"in the attention block run at op {block[-1]}", 0.0)
            for i in block[:-1]]
    return rest + [last]


__all__ = ["attention_blocks", "note_unfused", "graph_gpu_ns", "attention_ops", "predict_attention", "verify_attention"]
