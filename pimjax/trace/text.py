"""Readable one-line-per-op rendering of a PimGraph.

    y[i] = relu(sum_k W[i,k] * x[k] + b[i])   i<4096 k<4096
    t0 = sort(x)   [host: data-dependent permutation: ...]
"""
from __future__ import annotations

from .affine import index_map_str
from .ir import GRAPH_VIEWS, Acc, Arg, Const, Expr, InBounds, PimGraph, PimOp, Prim

# binary infix operators: symbol and precedence (higher binds tighter)
_INFIX = {"add": ("+", 2), "sub": ("-", 2), "mul": ("*", 3), "div": ("/", 3),
          "eq": ("==", 1), "ne": ("!=", 1), "lt": ("<", 1), "le": ("<=", 1), "gt": (">", 1),
          "ge": (">=", 1), "and": ("&", 0), "or": ("|", 0), "xor": ("^", 0)}
_ATOM = 9
_REDUCE = {"add": "sum", "max": "max", "min": "min"}


def graph_text(graph: PimGraph) -> str:
    """All ops, one per line, in execution order."""
    return "\n".join(op_text(graph, op) for op in graph.ops)


def op_text(graph: PimGraph, op: PimOp) -> str:
    if op.kind == "host":
        res = ", ".join(graph.value_name(r.value) for r in op.results)
        args = ", ".join(graph.value_name(a.value) for a in op.operands)
        return f"{res} = {op.name}({args})   [host: {op.host.reason if op.host else ''}]"
    r = _Renderer(graph, op)
    rhs, prec = r.expr(op.body, None)
    if op.reduction_vars:
        red = ",".join(op.reduction_vars)
        red = red if len(op.reduction_vars) == 1 else "{" + red + "}"
        # `sum_k a * b + c` reads as (sum_k a*b) + c: the sum binds like `+`
        rhs, prec = f"{_REDUCE[op.combiner]}_{red} {_paren(rhs, prec, 3)}", 2
    where = ""
    if op.epilogue is not None:
        if op.reduction_vars and _count_acc(op.epilogue) > 1:
            # name the reduction once instead of repeating it
            where = f"  where acc = {rhs}"
            rhs, prec = r.expr(op.epilogue, ("acc", _ATOM))
        else:
            rhs, prec = r.expr(op.epilogue, (rhs, prec))
    lhs = index_map_str(graph.value_name(op.result.value), op.result.index_map)
    domain = " ".join(f"{lv.name}<{lv.extent}" for lv in op.loop_vars)
    fill = f"  (else {op.fill})" if op.fill is not None else ""
    return f"{lhs} = {rhs}{fill}{where}   {domain}".rstrip()


def _count_acc(e: Expr) -> int:
    if isinstance(e, Acc):
        return 1
    if isinstance(e, Prim):
        return sum(_count_acc(a) for a in e.args)
    return 0


def _paren(text: str, prec: int, need: int) -> str:
    return f"({text})" if prec < need else text


class _Renderer:
    def __init__(self, graph: PimGraph, op: PimOp):
        self.graph, self.op = graph, op

    def access(self, k: int) -> str:
        a = self.op.operands[k]
        return index_map_str(self.graph.value_name(a.value), a.index_map)

    def expr(self, e: Expr, acc) -> tuple[str, int]:
        """(text, precedence) of a body expression."""
        if isinstance(e, Arg):
            return self.access(e.index), _ATOM
        if isinstance(e, InBounds):
            return f"inbounds({self.access(e.index)})", _ATOM
        if isinstance(e, Const):
            return _const(e), _ATOM
        if isinstance(e, Acc):
            return acc if acc is not None else ("acc", _ATOM)
        if isinstance(e, Prim):
            return self.prim(e, acc)
        return repr(e), _ATOM

    def prim(self, e: Prim, acc) -> tuple[str, int]:
        args = [self.expr(a, acc) for a in e.args]
        if e.name in _INFIX and len(args) == 2:
            sym, prec = _INFIX[e.name]
            left = _paren(args[0][0], args[0][1], prec)
            # right operand of a non-associative op needs strictly higher precedence
            right = _paren(args[1][0], args[1][1], prec + (e.name in ("sub", "div")))
            return f"{left} {sym} {right}", prec
        if e.name == "max" and len(args) == 2:
            for x, y in ((e.args[0], 1), (e.args[1], 0)):
                if isinstance(x, Const) and x.value == 0:
                    return f"relu({args[y][0]})", _ATOM
        if e.name == "neg":
            return f"-{_paren(args[0][0], args[0][1], 4)}", 4
        if e.name == "integer_pow":
            return f"{_paren(args[0][0], args[0][1], _ATOM)}**{e.param('y')}", 5
        if e.name == "convert_element_type":
            return f"{e.param('new_dtype')}({args[0][0]})", _ATOM
        if e.name == "select_n" and len(args) == 3:
            return f"where({args[0][0]}, {args[2][0]}, {args[1][0]})", _ATOM
        if e.name == "logistic":
            return f"sigmoid({args[0][0]})", _ATOM
        return f"{e.name}({', '.join(a for a, _ in args)})", _ATOM


def _const(c: Const) -> str:
    v = c.value
    if isinstance(v, float) and v.is_integer():
        return str(int(v)) if abs(v) < 1e15 else repr(v)
    return repr(v) if not isinstance(v, float) else f"{v:g}"


GRAPH_VIEWS["text"] = graph_text             # PimGraph.as_text (ir.py imports no printer)
