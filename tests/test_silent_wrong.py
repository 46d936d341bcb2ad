"""Issue #28 "Nothing silently wrong": each silently wrong or unclear case
becomes a correct result, a reported conversion, or a clear early error."""
from __future__ import annotations

import numpy as np
import pytest
import jax
import jax.numpy as jnp

import pimjax
from pimjax.errors import PimCompileError
from pimjax.hw import get_backend
from pimjax.lower import lower
from pimjax.partition import op_support
from pimjax.backends import baseline
from pimjax.sim.execute import execute

SMALL = {"hbm-pim": dict(channels=4), "attacc": dict(channels=2), "newton": dict(channels=2),
         "upmem": dict(dpus=64)}


# --- 2. complex data never runs on PIM ------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(SMALL))
def test_op_support_refuses_complex_on_every_backend(name):
    W = np.ones((16, 8), np.complex64)
    x = np.ones(8, np.complex64)
    op = pimjax.make_graph(lambda W, x: W @ x, W, x).ops[0]
    be = get_backend(name, **SMALL[name])
    ok, why = op_support(op, be, dtype=["complex64", "complex64", "complex64"])
    assert not ok and "complex64" in why and "imaginary" in why
    # a complex constant in the body is evidence enough
    op2 = pimjax.make_graph(lambda x: x * (1 + 2j), x).ops[0]
    ok2, why2 = op_support(op2, be)
    assert not ok2 and "complex" in why2


def test_complex_gemv_on_upmem_runs_on_the_host_with_a_reason():
    rng = np.random.default_rng(0)
    W = (rng.normal(size=(32, 16)) + 1j * rng.normal(size=(32, 16))).astype(np.complex64)
    x = (rng.normal(size=16) + 1j * rng.normal(size=16)).astype(np.complex64)
    f = pimjax.pim_jit(lambda W, x: W @ x, backend="upmem", dpus=64, placement="prefer_pim")
    np.testing.assert_allclose(np.asarray(f(W, x)), np.asarray(jax.jit(lambda W, x: W @ x)(W, x)),
                               rtol=1e-5, atol=1e-5)
    rows = f.lower(W, x).compile().cost_analysis()["ops"]
    assert rows[0]["placement"] == "host" and "complex64" in rows[0]["reason"]
    forced = pimjax.pim_jit(lambda W, x: W @ x, backend="upmem", dpus=64, placement="pim")
    with pytest.raises(PimCompileError, match="complex64 data: upmem units have no complex arithmetic"):
        forced(W, x)


# --- 3. deep graphs -----------------------------------------------------------------------------
def _chain(n):
    def f(x):
        for i in range(n):
            x = x * 1.001 + 0.001 if i % 2 else jnp.maximum(x, -1.0)
        return x
    return f


def test_a_600_op_chain_matches_jit():
    from pimjax.trace.fusion import MAX_FUSED_DEPTH
    from pimjax.trace.ir import expr_depth
    fn = _chain(600)
    x = np.linspace(-2, 2, 512, dtype=np.float32)
    f = pimjax.pim_jit(fn, backend="hbm-pim", channels=4, placement="prefer_pim")
    want = np.asarray(jax.jit(fn)(x))
    np.testing.assert_allclose(np.asarray(f(x)), want, rtol=3e-2, atol=3e-2 * np.abs(want).max())
    graph = f.lower(x).graph
    assert len(graph.ops) > 1 and all(expr_depth(op.body) <= MAX_FUSED_DEPTH for op in graph.ops)
    assert jnp.allclose(graph.evaluate(x), want, rtol=1e-5)


def test_expr_depth_is_iterative():
    from pimjax.trace.ir import Arg, Prim, expr_depth
    e = Arg(0)
    for _ in range(5000):
        e = Prim("neg", (e,))
    assert expr_depth(e) == 5001


# --- 4. lower checks shapes against the op's extents ---------------------------------------------
@pytest.mark.parametrize("name", sorted(SMALL))
def test_lower_refuses_shapes_that_disagree_with_the_extents(name):
    be = get_backend(name, **SMALL[name])
    dt = np.int32 if name == "upmem" else np.float32
    W, x = np.ones((37, 13), dt), np.ones(13, dt)
    g = pimjax.make_graph(lambda W, x: W @ x, W, x)
    op = g.ops[0]
    d = baseline(op, be)
    good = {i: v.shape for i, v in enumerate(g.values)}
    lower(op, d, be, good)                             # the graph's own shapes lower
    wv = op.operands[0].value
    with pytest.raises(ValueError, match=r"operand 0 .* has shape \(40, 13\) in shapes, but the op's "
                                         r"extents .* imply \(37, 13\)"):
        lower(op, d, be, {**good, wv: (40, 13)})
    with pytest.raises(ValueError, match=r"indexes it with 2 dimensions"):
        lower(op, d, be, {**good, wv: (37 * 13,)})
    with pytest.raises(ValueError, match="result .* imply"):
        lower(op, d, be, {**good, op.result.value: (36,)})
    with pytest.raises(ValueError, match="shapes has no entry for operand 1"):
        lower(op, d, be, {wv: (37, 13)})


# --- 5. hardware validation covers the engines' arithmetic ------------------------------------
@pytest.mark.parametrize("name", sorted(SMALL))
def test_timings_the_engines_cannot_hold_are_refused_naming_the_field(name):
    be = get_backend(name, **SMALL[name])
    with pytest.raises(ValueError, match=r"Timing\.tRCDRD = 1e\+40 overflows float32"):
        be.timing.replace(tRCDRD=1e40)
    with pytest.raises(ValueError, match=r"Timing\.tFAW = 1000000000\.0 cycles exceeds 16777216"):
        be.timing.replace(tFAW=1e9)
    with pytest.raises(ValueError, match=r"Timing\.tCK = 1e-40 is below float32's smallest normal"):
        be.timing.replace(tCK=1e-40)
    with pytest.raises(ValueError, match=r"Energy\.act = 1e\+40 overflows float32"):
        be.energy.replace(act=1e40)
    t = be.timing.replace(tRCDRD=2.0 ** 24)         # the largest latency still held to the cycle
    assert float(t.tRCDRD) == 2 ** 24


def test_cycles_of_a_long_latency_stay_finite():
    be = get_backend("hbm-pim", channels=4)
    W, x = np.ones((64, 256), np.float32), np.ones(256, np.float32)
    op = pimjax.make_graph(lambda W, x: W @ x, W, x).ops[0]
    p = lower(op, baseline(op, be), be)
    slow = be.replace(timing=be.timing.replace(tRCDRD=1e6))
    c0, c1 = float(pimjax.cycles(p, be).total_cycles), float(pimjax.cycles(p, slow).total_cycles)
    assert np.isfinite(c1) and c1 > c0 + 1e6
