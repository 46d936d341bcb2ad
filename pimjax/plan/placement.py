"""The two planning stages of `pim_jit`: `predict_plans` (what `Lowered` holds: per op its
support, draft space, predicted best draft and the placement on the predicted figures) and
`verify_plans` (what `Compiled` holds: the proposals lowered and simulated, the placement on
the simulated figures, PIMFlow's modes on a system with a concurrent GPU); `plan` is both.

Times ns (PIM: `report.total_ns`, or the predicted cycles x tCK; host: the roofline of
`System.baseline`, `sim.host.host_time` with `host_bytes`).
"""
from __future__ import annotations

from dataclasses import replace

from ..backends import missing_family
from ..errors import PimCompileError
from ..hw.core import Backend
from ..partition.verify import op_support
from ..search.tuner import Tuner
from ..trace.ir import PimGraph
from .attention import attention_blocks, graph_gpu_ns, note_unfused, predict_attention, verify_attention
from .mixed import mixed_plans
from .plans import OpPlan, gpu_words, host_bytes, in_place_ns, predicted_placement, refuse, value_dtypes, value_shapes
from .residency import append_update


def predict_plans(graph: PimGraph, backend: Backend, tuner: Tuner, resident_ids: set = frozenset(),
                  placement: str = "auto", appends: dict | None = None) -> list[OpPlan]:
    """The lower stage: per op, host or PIM support (refusals of
    placement="pim" for ops the backend cannot run), the draft space and
    the cost model's prediction (`Tuner.propose`), and the placement on the
    predicted figures.  No program is lowered and nothing is simulated.

    resident_ids: value ids whose placement is paid once; appends: {value
    id: `sim.append.Append`} of the resident values an append makes
    (`Residency`): the append writes only its update on the host (in place,
    GPU-only run alike) and the proposals of the ops that read them carry
    the fractions (`Proposal.append`: each call pays that share of the
    placement)."""
    shapes, dtypes = value_shapes(graph), value_dtypes(graph)
    eb = host_bytes(graph, backend)
    tck = float(backend.timing.tCK)
    appends = appends or {}
    plans = []
    blocks, unfused = attention_blocks(graph, backend)
    in_block = {i for b in blocks.values() for i in b}
    gpu_ns = graph_gpu_ns(graph, backend, shapes)     # each op's share of the GPU's kernels, once per graph
    for i, op in enumerate(graph.ops):
        if i in blocks:
            block = predict_attention(graph, blocks[i], backend, tuner, shapes, dtypes, resident_ids, gpu_ns,
                                       placement)
            reads = {a.value for j in blocks[i] for a in graph.ops[j].operands}
            plans += [_with_appends(p, reads, appends) for p in block]
            continue
        if i in in_block:
            continue
        h_ns = float(gpu_ns[i])
        upd = append_update(op)
        in_place = upd is not None and upd[2] in appends
        if in_place:
            h_ns = in_place_ns(graph, op, upd, backend, eb)
        if op.kind in ("host", "layout"):
            why = op.host.reason if op.host is not None else "layout op: data movement stays on the host"
            if in_place:
                why += "; writes in place into a resident value (the update only)"
            if placement == "pim" and op.kind == "host":
                refuse(op, backend, why)
            plans.append(OpPlan(i, op, "host", why, h_ns, in_place=in_place))
            continue
        # a reduction's or contraction's epilogue runs at the host merge (every family's read-back:
        # `Readback.epilogue_on_host`), so an operand only it reads (a causal mask's int32 iota)
        # never reaches the PIM units' arithmetic
        body = set(op.body_operands) if op.kind in ("reduction", "contraction") else set(range(len(op.operands)))
        data = [dtypes[a.value] for k, a in enumerate(op.operands) if a.index_map and k in body] + \
            [dtypes[op.result.value]]
        ok, why = op_support(op, backend, dtype=data)
        if ok and (no_family := missing_family(backend)):
            ok, why = False, no_family
        if not ok:
            if placement == "pim":
                refuse(op, backend, f"{unfused[i]}; {why}" if i in unfused else why)
            plans.append(OpPlan(i, op, "host", why, h_ns))
            continue
        res = tuple(k for k, a in enumerate(op.operands) if a.value in resident_ids)
        opts = {"resident": res, "result_dtype": dtypes[op.result.value]}
        try:
            proposal = tuner.propose(op, backend, shapes, dtypes, **opts)
            why = "no draft fits the backend's resources and lowers"
        except PimCompileError as err:
            proposal, why = None, f"cannot lower: {err}"
        if proposal is None:
            if placement == "pim":
                refuse(op, backend, f"{unfused[i]}; {why}" if i in unfused else why)
            plans.append(OpPlan(i, op, "host", why, h_ns))
            continue
        where, why = predicted_placement(proposal.predicted_cycles * tck, h_ns, placement, backend)
        plans.append(_with_appends(OpPlan(i, op, where, why, h_ns, proposal.draft, None,
                                          proposal.predicted_cycles, None, res, proposal=proposal),
                                   {a.value for a in op.operands}, appends))
    return note_unfused(plans, unfused)


def _with_appends(p: OpPlan, reads: set, appends: dict) -> OpPlan:
    """`p` with its proposal carrying the append fractions of the values it
    reads (`Proposal.append`)."""
    mine = {v: f for v, f in appends.items() if v in reads}
    if p.proposal is None or not mine:
        return p
    return replace(p, proposal=replace(p.proposal, append=mine))


def verify_plans(graph: PimGraph, backend: Backend, tuner: Tuner, plans: list[OpPlan],
                 placement: str = "auto") -> list[OpPlan]:
    """The compile stage: every proposal of `plans` (`predict_plans`)
    verified -- the top-k lowered and simulated (`Tuner.verify`) -- and the
    placement decided on the simulated figures (`pimjax.api`'s docstring);
    plans without a proposal (host ops) come back as they are."""
    shapes = value_shapes(graph)
    carriers = {i: p for p in plans if p.block and p.proposal is not None for i in p.block}
    share = graph_gpu_ns(graph, backend, shapes) if carriers else None
    out = []
    for p in plans:
        if p.index in carriers:
            if carriers[p.index] is p:
                out += verify_attention(graph, p, backend, tuner, shapes, share, placement)
            continue
        if p.proposal is None:
            out.append(p)
            continue
        op, h_ns, res = p.op, p.host_ns, p.resident
        try:
            choice = tuner.verify(p.proposal)
            why = "no draft fits the backend's resources and lowers"
        except PimCompileError as err:
            choice, why = None, f"cannot lower: {err}"
        if choice is None:
            if placement == "pim":
                refuse(op, backend, why)
            out.append(OpPlan(p.index, op, "host", why, h_ns))
            continue
        pim_ns = float(choice.report.total_ns)
        if placement != "auto":
            why = (f"placement={placement!r}: on PIM ({pim_ns:,.0f} ns; the "
                   f"{gpu_words(backend)} {h_ns:,.0f} ns)")
            out.append(OpPlan(p.index, op, "pim", why, h_ns, choice.draft, choice.program,
                              choice.predicted_cycles, choice, res, proposal=p.proposal))
            continue
        if pim_ns < h_ns:
            where, why = "pim", (f"PIM {pim_ns:,.0f} ns (rearrangement included) beats the "
                                 f"{gpu_words(backend)} {h_ns:,.0f} ns")
        else:
            where, why = "host", (f"{gpu_words(backend)} {h_ns:,.0f} ns beats "
                                  f"PIM {pim_ns:,.0f} ns (rearrangement included)")
        out.append(OpPlan(p.index, op, where, why, h_ns, choice.draft, choice.program,
                          choice.predicted_cycles, choice, res, proposal=p.proposal))
    out = note_unfused(out, attention_blocks(graph, backend)[1])
    if placement == "auto" and backend.system.cogpu is not None:
        out = mixed_plans(graph, backend, tuner, out)
    return out


def plan(graph: PimGraph, backend: Backend, tuner: Tuner, resident_ids: set = frozenset(),
         placement: str = "auto", appends: dict | None = None) -> list[OpPlan]:
    """Placement, draft and program of every op (`pimjax.api`'s docstring): both
    stages at once, `verify_plans(predict_plans(...))`."""
    return verify_plans(graph, backend, tuner,
                        predict_plans(graph, backend, tuner, resident_ids, placement, appends), placement)


__all__ = ["predict_plans", "verify_plans", "plan"]
