"""pim_jit inside jax transforms: jax.jit, jax.vmap, jax.grad (and jit of
grad, forward mode) give the values of the plain function under the same
transform, within the backend's arithmetic, with the ops really run on PIM
(placement "pim" in the compile's plans, and `sim.execute` called while the
transformed function runs); what cannot compose raises a clear error."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pimjax.api
from pimjax import pim_jit
from tests.test_api import SMALL, TOL, _close, tuner


def _data(m=64, k=128, batch=3):
    rng = np.random.default_rng(7)
    W = rng.standard_normal((m, k)).astype(np.float32)
    x = rng.standard_normal(k).astype(np.float32)
    xs = rng.standard_normal((batch, k)).astype(np.float32)
    return W, x, xs


def gemv_tanh(W, x):
    return jnp.tanh(W @ x)


def fma(a, b):
    return a * b + a


def _pim(fn, backend="hbm-pim"):
    return pim_jit(fn, backend=backend, tuner=tuner(), placement="prefer_pim", **SMALL[backend])


@pytest.fixture
def executions(monkeypatch):
    """The programs `Compiled.__call__` executes (sim.execute), in order."""
    seen = []
    real = pimjax.api.execute

    def counting(program, *operands, **kw):
        seen.append(program)
        return real(program, *operands, **kw)
    monkeypatch.setattr(pimjax.api, "execute", counting)
    return seen


def _on_pim(f, shapes):
    """The compile of `f` (vmapped versions included) for these input shapes,
    asserted to have an op placed on PIM."""
    for c in f.compiles():
        if [tuple(c.graph.values[v].shape) for v in c.graph.inputs] == [tuple(s) for s in shapes]:
            assert any(o.placement == "pim" for o in c.report().ops), c.lowered.as_text()
            return c
    raise AssertionError(f"no compile for {shapes}: {[c.graph.as_text() for c in f.compiles()]}")


@pytest.mark.parametrize("backend", ["hbm-pim", "newton", "upmem"])
def test_jit_equals_jax_jit(backend, executions):
    """A GEMV (with a tanh epilogue on hbm-pim; integers on UPMEM, whose
    DPUs have no FPU) inside jax.jit."""
    W, x, _ = _data()
    fn = gemv_tanh if backend == "hbm-pim" else (lambda W, x: W @ x)
    if backend == "upmem":
        W, x = (np.round(a * 20).astype(np.int32) for a in (W, x))
    f = _pim(fn, backend)
    got = jax.jit(f)(W, x)
    assert executions, "no PIM program ran inside jax.jit"
    assert isinstance(got, jax.Array) and got.shape == (64,) and got.dtype == W.dtype
    _close(got, jax.jit(fn)(W, x), TOL[backend])
    _on_pim(f, [W.shape, x.shape])
    # the same values as the eager call, and the compile is shared with it
    _close(got, f(W, x), 1e-6)
    assert len(f.compiles()) == 1
    # a Compiled composes with jit too
    compiled = f.lower(W, x).compile()
    _close(jax.jit(compiled)(W, x), got, 1e-6)


def test_vmap_folds_the_batch_into_the_traced_shapes(executions):
    """A GEMV vmapped over x is compiled as jax.vmap(fn) for x of shape
    [batch, k]: one compile, one program, the batch in its shapes."""
    W, _, xs = _data()
    f = _pim(gemv_tanh)
    vf = jax.vmap(f, in_axes=(None, 0))
    want = jax.jit(jax.vmap(gemv_tanh, in_axes=(None, 0)))(W, xs)
    _close(vf(W, xs), want, TOL["hbm-pim"])
    ran = len(executions)
    assert ran >= 1
    _close(jax.jit(vf)(W, xs), want, TOL["hbm-pim"])                # jit of vmap
    assert len(executions) == 2 * ran
    c = _on_pim(f, [W.shape, xs.shape])
    assert f.compiles() == [c]            # never compiled per example (nor for the unbatched shapes)


def test_vmap_of_an_elementwise_function_over_every_argument():
    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal((4, 256)).astype(np.float32) for _ in range(2))
    f = _pim(fma)
    _close(jax.vmap(f)(a, b), jax.jit(jax.vmap(fma))(a, b), TOL["hbm-pim"])
    _on_pim(f, [a.shape, b.shape])


def test_grad_forward_on_pim_backward_by_jax(executions):
    W, x, _ = _data()
    f = _pim(gemv_tanh)

    def loss(h):
        return lambda W, x: jnp.sum(h(W, x) ** 2)
    (val, grads) = jax.value_and_grad(loss(f), argnums=(0, 1))(W, x)
    assert executions, "the forward did not run on PIM"
    want_val, want_grads = jax.value_and_grad(loss(gemv_tanh), argnums=(0, 1))(W, x)
    _close(val, want_val, TOL["hbm-pim"])
    _close(grads, want_grads, TOL["hbm-pim"])
    _on_pim(f, [W.shape, x.shape])
    # jit of grad, and grad of a Compiled
    jg = jax.jit(jax.grad(loss(f), argnums=1))(W, x)
    _close(jg, want_grads[1], TOL["hbm-pim"])
    compiled = f.lower(W, x).compile()
    _close(jax.grad(loss(compiled), argnums=1)(W, x), want_grads[1], TOL["hbm-pim"])


def test_grad_of_vmap_and_vmap_of_grad():
    W, _, xs = _data()
    f = _pim(gemv_tanh)
    g = jax.grad(lambda W, xs: jnp.sum(jax.vmap(f, in_axes=(None, 0))(W, xs)))(W, xs)
    want = jax.grad(lambda W, xs: jnp.sum(jax.vmap(gemv_tanh, in_axes=(None, 0))(W, xs)))(W, xs)
    _close(g, want, TOL["hbm-pim"])
    per = jax.vmap(jax.grad(lambda W, x: jnp.sum(f(W, x)), argnums=1), in_axes=(None, 0))(W, xs)
    want = jax.vmap(jax.grad(lambda W, x: jnp.sum(gemv_tanh(W, x)), argnums=1), in_axes=(None, 0))(W, xs)
    _close(per, want, TOL["hbm-pim"])
    _on_pim(f, [W.shape, xs.shape])


def test_forward_mode_tangents_by_jax(executions):
    W, x, _ = _data()
    f = _pim(gemv_tanh)
    t = np.ones_like(x)
    y, dy = jax.jvp(lambda x: f(W, x), (x,), (t,))
    assert executions, "the primal did not run on PIM"
    y0, dy0 = jax.jvp(lambda x: gemv_tanh(W, x), (x,), (t,))
    _close(y, y0, TOL["hbm-pim"])
    _close(dy, dy0, TOL["hbm-pim"])
    _close(jax.jit(jax.jacfwd(f, argnums=1))(W, x), jax.jacfwd(gemv_tanh, argnums=1)(W, x), TOL["hbm-pim"])


def test_unknown_keyword_is_named():
    W, x, _ = _data()
    f = _pim(lambda W, x: W @ x)
    with pytest.raises(TypeError, match=r"pim_jit\(<lambda>\) got unexpected keyword argument\(s\) 'y'"):
        f(W, y=x)
    with pytest.raises(TypeError, match="'y'"):
        f.lower(W, x).compile()(W, y=x)
    with pytest.raises(TypeError, match="'y'"):
        jax.jit(lambda W, x: f(W, y=x))(W, x)


def test_a_non_array_leaf_is_named_eagerly_and_under_jit():
    W, x, _ = _data()
    f = _pim(lambda W, x: W @ x)
    with pytest.raises(TypeError, match=r"pim_jit\(<lambda>\): argument args\[1\] is a str, not an array"):
        f(W, "x")
    with pytest.raises(TypeError, match=r"pim_jit\(<lambda>\): argument args\[1\]\['k'\] is a object"):
        jax.jit(lambda W: f(W, {"k": object()}))(W)
