"""Property tests: random dot_general dimension numbers, random broadcasting
elementwise chains and random reductions trace to the expected single op and
evaluate to the function's value."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st
from jax import lax

import pimjax
from pimjax.trace.ir import expr_prims

sizes = st.integers(1, 5)


def _close(got, want):
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)


@st.composite
def dot_problems(draw):
    """(lhs shape, rhs shape, dimension_numbers, role sizes)."""
    nb, nc, nl, nr = (draw(st.integers(0, 2)) for _ in range(4))
    b = [draw(sizes) for _ in range(nb)]
    c = [draw(sizes) for _ in range(nc)]
    lf = [draw(sizes) for _ in range(nl)]
    rf = [draw(sizes) for _ in range(nr)]
    # place each role's dims at random positions of lhs and rhs
    lroles = [("b", i) for i in range(nb)] + [("c", i) for i in range(nc)] + [("f", i) for i in range(nl)]
    rroles = [("b", i) for i in range(nb)] + [("c", i) for i in range(nc)] + [("f", i) for i in range(nr)]
    lroles = draw(st.permutations(lroles))
    rroles = draw(st.permutations(rroles))
    size = {"b": b, "c": c}
    lshape = tuple(size[r][i] if r in size else lf[i] for r, i in lroles)
    rshape = tuple(size[r][i] if r in size else rf[i] for r, i in rroles)
    def pos(roles, r, i):
        return roles.index((r, i))
    dims = (((tuple(pos(lroles, "c", i) for i in range(nc)), tuple(pos(rroles, "c", i) for i in range(nc))),
             (tuple(pos(lroles, "b", i) for i in range(nb)), tuple(pos(rroles, "b", i) for i in range(nb)))))
    return lshape, rshape, dims, (b, c, lf, rf)


@settings(max_examples=40)
@given(dot_problems(), st.integers(0, 2**31 - 1))
def test_random_dot_general(problem, seed):
    lshape, rshape, dims, (b, c, lf, rf) = problem
    rng = np.random.default_rng(seed)
    lhs = rng.standard_normal(lshape).astype(np.float32)
    rhs = rng.standard_normal(rshape).astype(np.float32)

    def f(x, y):
        return lax.dot_general(x, y, dims)

    g = pimjax.make_graph(f, lhs, rhs)
    assert [op.kind for op in g.ops] == ["contraction"]
    op = g.ops[0]
    assert sorted(op.extents[v] for v in op.reduction_vars) == sorted(c)
    assert sorted(lv.extent for lv in op.loop_vars) == sorted(b + c + lf + rf)
    assert op.combiner == "add"
    _close(g.evaluate(lhs, rhs), jax.jit(f)(lhs, rhs))


_BINARY = {"add": jnp.add, "sub": jnp.subtract, "mul": jnp.multiply, "max": jnp.maximum,
           "min": jnp.minimum}
_UNARY = {"tanh": jnp.tanh, "abs": jnp.abs, "neg": jnp.negative, "logistic": lambda x: 1 / (1 + jnp.exp(-x))}


@st.composite
def chains(draw):
    """An output shape, operand shapes with broadcast dims, and an op chain."""
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    n = draw(st.integers(2, 4))
    operands = []
    for _ in range(n):
        keep = draw(st.lists(st.booleans(), min_size=len(shape), max_size=len(shape)))
        style = draw(st.sampled_from(["drop", "unit", "transpose"]))
        operands.append((tuple(k for k in keep), style))
    steps = [(draw(st.sampled_from(sorted(_BINARY))), draw(st.sampled_from([None, *sorted(_UNARY)])))
             for _ in range(n - 1)]
    return shape, operands, steps


def _operand(shape, keep, style, rng):
    """Array and a function broadcasting it to `shape` in the given style."""
    kept = [d for d in range(len(shape)) if keep[d]]
    if style == "unit":        # same rank, size-1 dims, explicit broadcast_to
        arr = rng.standard_normal(tuple(s if k else 1 for s, k in zip(shape, keep)))
        return arr.astype(np.float32), lambda x: jnp.broadcast_to(x, shape)
    if style == "transpose" and len(kept) > 1:   # stored transposed, then broadcast
        arr = rng.standard_normal(tuple(shape[d] for d in reversed(kept)))
        return arr.astype(np.float32), lambda x: lax.broadcast_in_dim(x.T, shape, tuple(kept))
    arr = rng.standard_normal(tuple(shape[d] for d in kept))
    return arr.astype(np.float32), lambda x: lax.broadcast_in_dim(x, shape, tuple(kept))


@settings(max_examples=40)
@given(chains(), st.integers(0, 2**31 - 1))
# two 0-d operands broadcast to the output: the product has an output
# dimension neither operand has (the einsum fast path of the evaluator
# built ",->a" and crashed)
@example(chain=((1,), [((False,), "drop"), ((False,), "drop")], [("mul", None)]), seed=0)
def test_random_broadcasting_chain_is_one_op(chain, seed):
    shape, operands, steps = chain
    rng = np.random.default_rng(seed)
    arrays, bcasts = zip(*[_operand(shape, keep, style, rng) for keep, style in operands])

    def f(*xs):
        acc = bcasts[0](xs[0])
        for (binary, unary), bc, x in zip(steps, bcasts[1:], xs[1:]):
            acc = _BINARY[binary](acc, bc(x))
            if unary is not None:
                acc = _UNARY[unary](acc)
        return acc

    g = pimjax.make_graph(f, *arrays)
    assert [op.kind for op in g.ops] == ["elementwise"], g.as_text()
    op = g.ops[0]
    assert g.values[op.result.value].shape == shape
    # one Arg per input (views folded into index maps), never a layout op
    assert sorted(g.value_name(a.value) for a in op.operands) == sorted(
        g.value_name(v) for v in g.inputs)
    assert len(list(expr_prims(op.body))) >= len(steps)
    _close(g.evaluate(*arrays), jax.jit(f)(*arrays))


@settings(max_examples=30)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=4), st.data(),
       st.sampled_from(["sum", "max", "min"]), st.integers(0, 2**31 - 1))
def test_random_reduction(shape, data, kind, seed):
    axes = tuple(sorted(data.draw(st.sets(st.integers(0, len(shape) - 1), min_size=1))))
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    fn = {"sum": jnp.sum, "max": jnp.max, "min": jnp.min}[kind]

    def f(x):
        return fn(x, axis=axes)

    g = pimjax.make_graph(f, x)
    assert [op.kind for op in g.ops] == ["reduction"]
    op = g.ops[0]
    assert op.combiner == {"sum": "add", "max": "max", "min": "min"}[kind]
    assert sorted(op.extents[v] for v in op.reduction_vars) == sorted(shape[a] for a in axes)
    _close(g.evaluate(x), jax.jit(f)(x))


@settings(max_examples=30)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=4), st.data(), st.integers(0, 2**31 - 1))
def test_random_reshape_roundtrip(shape, data, seed):
    """Any reshape's quasi-affine map gathers the row-major element order."""
    size = int(np.prod(shape))
    divisors = [d for d in range(1, size + 1) if size % d == 0]
    a = data.draw(st.sampled_from(divisors))
    b = data.draw(st.sampled_from([d for d in divisors if (size // a) % d == 0]))
    new = (a, b, size // (a * b))
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)

    def f(x):
        return jnp.reshape(x, new)

    g = pimjax.make_graph(f, x)
    assert all(op.kind == "layout" for op in g.ops)
    _close(g.evaluate(x), jax.jit(f)(x))
