"""IR invariant checker for PimGraph, run at the end of `make_graph` (and by
any later stage that rewrites a graph)."""
from __future__ import annotations

from .ir import KINDS, Acc, Arg, InBounds, PimGraph, PimOp, Prim, expr_args


class GraphInvariantError(ValueError):
    """A PimGraph violates an IR invariant (a bug in whoever built it)."""


def check_graph(graph: PimGraph) -> None:
    """Raise GraphInvariantError listing every violated invariant:

    - every value used is defined (input, constant or earlier op result)
      before use, and defined only once;
    - index-map arity equals the accessed value's rank (host ops: empty maps);
    - maps use only the op's loop variables; result maps only output vars;
    - reduction variables are loop variables, with a combiner;
    - body `Arg`/`InBounds` indices are in range; `Acc` only in epilogues;
    - epilogue operands use only output (non-reduction) variables.
    """
    problems: list[str] = []
    n = len(graph.values)
    defined = set(graph.inputs) | set(graph.constants)
    for vid in (*graph.inputs, *graph.constants):
        if not 0 <= vid < n:
            problems.append(f"input/constant value {vid} out of range")
    for pos, op in enumerate(graph.ops):
        where = f"op {pos} ({op.name}, {op.source or 'no source'})"
        for a in op.operands:
            if a.value not in defined:
                problems.append(f"{where}: reads value {a.value} before it is defined")
        problems += [f"{where}: {p}" for p in _check_op(graph, op)]
        for r in op.results:
            if r.value in defined:
                problems.append(f"{where}: redefines value {r.value}")
            defined.add(r.value)
    for vid in graph.outputs:
        if vid not in defined:
            problems.append(f"output value {vid} is never defined")
    if problems:
        raise GraphInvariantError("invalid PimGraph:\n  " + "\n  ".join(problems))


def _check_op(graph: PimGraph, op: PimOp) -> list[str]:
    problems: list[str] = []
    n = len(graph.values)
    for a in (*op.operands, *op.results):
        if not 0 <= a.value < n:
            return [f"access to unknown value {a.value}"]
    if op.kind not in KINDS:
        return [f"unknown kind {op.kind!r}"]
    if op.kind == "host":
        if op.host is None:
            problems.append("host op without HostCall")
        if any(a.index_map for a in (*op.operands, *op.results)):
            problems.append("host op accesses must have empty index maps")
        return problems
    names = [lv.name for lv in op.loop_vars]
    loop = set(names)
    if len(loop) != len(names):
        problems.append(f"duplicate loop variables {names}")
    out_vars = set(op.output_vars)
    for a in (*op.operands, *op.results):
        rank = len(graph.values[a.value].shape)
        if len(a.index_map) != rank:
            problems.append(f"map of {graph.value_name(a.value)} has arity "
                            f"{len(a.index_map)} != rank {rank}")
        extra = set(a.vars) - loop
        if extra:
            problems.append(f"map of {graph.value_name(a.value)} uses non-loop vars {extra}")
    if len(op.results) != 1:
        problems.append(f"{len(op.results)} results (PIM ops have one)")
    for r in op.results:
        if set(r.vars) - out_vars:
            problems.append(f"result map uses reduction vars {set(r.vars) - out_vars}")
    if set(op.reduction_vars) - loop:
        problems.append(f"reduction vars {set(op.reduction_vars) - loop} are not loop vars")
    if op.reduction_vars and op.combiner is None:
        problems.append("reduction without combiner")
    if op.body is None:
        problems.append("PIM op without body")
    else:
        problems += _check_expr(op.body, len(op.operands), allow_acc=False, what="body")
    if op.epilogue is not None:
        problems += _check_expr(op.epilogue, len(op.operands), allow_acc=True,
                                what="epilogue")
        for k in expr_args(op.epilogue):
            if k < len(op.operands) and set(op.operands[k].vars) - out_vars:
                problems.append(f"epilogue operand {k} uses reduction vars")
    return problems


def _check_expr(expr, n_operands: int, allow_acc: bool, what: str) -> list[str]:
    if isinstance(expr, (Arg, InBounds)):
        if not 0 <= expr.index < n_operands:
            return [f"{what} reads operand {expr.index} of {n_operands}"]
        return []
    if isinstance(expr, Acc):
        return [] if allow_acc else [f"Acc used in {what}"]
    if isinstance(expr, Prim):
        out = []
        for a in expr.args:
            out += _check_expr(a, n_operands, allow_acc, what)
        return out
    return []
