"""Untraceable functions raise PimTraceError naming the original error and the
user's source line; broken graphs are caught by the invariant checker."""
from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pimjax
from pimjax.errors import PimTraceError
from pimjax.trace import Acc, Access, Arg, GraphInvariantError, LoopVar, PimGraph, PimOp, Prim, ValueInfo, check_graph
from pimjax.trace.affine import AffineExpr


def _line_of(fn, text: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def python_branch(x):
    if x.sum() > 0:  # Python control flow on a traced value
        return x
    return -x


def data_dependent_shape(x):
    return jnp.nonzero(x)[0] * 2


def int_of_tracer(x):
    n = int(x[0])
    return x * n


@pytest.mark.parametrize("fn, code, original", [
    (python_branch, "if x.sum() > 0:", "TracerBoolConversionError"),
    (data_dependent_shape, "return jnp.nonzero(x)[0] * 2", "jnp.nonzero"),
    (int_of_tracer, "n = int(x[0])", "ConcretizationTypeError"),
])
def test_untraceable_function_raises_pim_trace_error(fn, code, original):
    with pytest.raises(PimTraceError) as info:
        pimjax.make_graph(fn, np.ones(4, np.float32))
    msg = str(info.value)
    assert original in msg
    assert f"test_errors.py:{_line_of(fn, code)}" in msg
    assert code in msg
    assert isinstance(info.value.__cause__, jax.errors.JAXTypeError)


def test_original_error_text_is_kept():
    with pytest.raises(PimTraceError) as info:
        pimjax.make_graph(python_branch, np.ones(4, np.float32))
    assert str(info.value.__cause__).splitlines()[0] in str(info.value)


def _gemv_graph(**op_changes) -> PimGraph:
    values = (ValueInfo((4, 3), "float32", "W"), ValueInfo((3,), "float32", "x"),
              ValueInfo((4,), "float32", "y"))
    i, k = AffineExpr.var("i"), AffineExpr.var("k")
    fields = dict(name="dot_general", kind="contraction",
                  loop_vars=(LoopVar("i", 4), LoopVar("k", 3)),
                  operands=(Access(0, (i, k)), Access(1, (k,))), results=(Access(2, (i,)),),
                  reduction_vars=("k",), combiner="add", body=Prim("mul", (Arg(0), Arg(1))))
    fields.update(op_changes)
    return PimGraph(values, (0, 1), (2,), (PimOp(**fields),))


def test_checker_accepts_a_valid_graph_and_it_evaluates():
    g = _gemv_graph()
    check_graph(g)
    W, x = np.arange(12, dtype=np.float32).reshape(4, 3), np.ones(3, np.float32)
    np.testing.assert_allclose(g.evaluate(W, x), W @ x)


@pytest.mark.parametrize("changes, problem", [
    (dict(operands=(Access(0, (AffineExpr.var("i"),)), Access(1, (AffineExpr.var("k"),)))),
     "arity 1 != rank 2"),
    (dict(operands=(Access(0, (AffineExpr.var("i"), AffineExpr.var("z"))),
                    Access(1, (AffineExpr.var("k"),)))), "non-loop vars"),
    (dict(reduction_vars=("q",)), "not loop vars"),
    (dict(operands=(Access(0, (AffineExpr.var("i"), AffineExpr.var("k"))),
                    Access(5, (AffineExpr.var("k"),)))), "unknown value"),
    (dict(results=(Access(2, (AffineExpr.var("k"),)),)), "result map uses reduction vars"),
    (dict(epilogue=Prim("add", (Acc(), Arg(1)))), "epilogue operand 1 uses reduction vars"),
    (dict(body=Prim("mul", (Acc(), Arg(1)))), "Acc used in body"),
    (dict(body=Prim("mul", (Arg(0), Arg(7)))), "reads operand 7"),
])
def test_checker_rejects_broken_graphs(changes, problem):
    with pytest.raises(GraphInvariantError, match=problem):
        check_graph(_gemv_graph(**changes))


def test_checker_rejects_use_before_definition():
    g = _gemv_graph(results=(Access(3, (AffineExpr.var("i"),)),))
    op = g.ops[0]
    consumer = PimOp("neg", "elementwise", (LoopVar("i", 4),), (Access(3, (AffineExpr.var("i"),)),),
                     (Access(2, (AffineExpr.var("i"),)),), body=Prim("neg", (Arg(0),)))
    values = g.values + (ValueInfo((4,), "float32", "t0"),)
    bad = PimGraph(values, g.inputs, (2,), (consumer, op))
    with pytest.raises(GraphInvariantError, match="before it is defined"):
        check_graph(bad)
