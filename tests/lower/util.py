"""Helpers for the lowering tests: per-op operands of a traced function and
an independent reference output of one op (the graph evaluator)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from pimjax.trace.evaluate import evaluate_op
from pimjax.trace.frontend import make_graph
from pimjax.trace.ir import PimGraph, ValueInfo


def graph_ops(fn, args):
    """[(op, shapes, operand arrays)] for every op of fn's graph, with the
    operands computed by evaluating the graph up to that op."""
    graph = make_graph(fn, *args)
    env = {}
    leaves = jax.tree_util.tree_leaves(args)
    for vid, leaf in zip(graph.inputs, leaves):
        env[vid] = jnp.asarray(leaf)
    for vid, c in graph.constants.items():
        env[vid] = jnp.asarray(c)
    shapes = {i: v.shape for i, v in enumerate(graph.values)}
    out = []
    for op in graph.ops:
        operands = [np.asarray(env[a.value]) for a in op.operands]
        for r, val in zip(op.results, evaluate_op(graph, op, [env[a.value] for a in op.operands])):
            env[r.value] = val
        out.append((op, shapes, operands))
    return out


def reference_output(op, operands):
    """The op evaluated on its own from its description (float32)."""
    values = {}
    for acc, arr in zip(op.operands, operands):
        values[acc.value] = ValueInfo(tuple(np.shape(arr)), str(np.asarray(arr).dtype), f"v{acc.value}")
    ext = op.extents
    shape = tuple(e.value_range(ext)[1] + 1 for e in op.result.index_map)
    values[op.result.value] = ValueInfo(shape, "float32", "y")
    n = max(values) + 1
    infos = tuple(values.get(i, ValueInfo((1,), "float32", f"u{i}")) for i in range(n))
    graph = PimGraph(infos, (), (), (op,))
    return evaluate_op(graph, op, [jnp.asarray(a) for a in operands])[0]
