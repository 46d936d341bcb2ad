"""Third-party models through `pim_jit` on every backend.

How a model is passed: the function takes the model's parameters as a
pytree argument (pim_jit traces any pytree of arrays) and rebuilds the
model inside --

* haiku:   `net = hk.without_apply_rng(hk.transform(f))`, `params =
           net.init(key, x)`, `pim_jit(lambda params, x: net.apply(params, x))`;
* equinox: `arrays, static = eqx.partition(model, eqx.is_array)`,
           `pim_jit(lambda arrays, x: eqx.combine(arrays, static)(x))`;
* flax.nnx decode: `graphdef, state = nnx.split(model)` after
           `model.init_cache(...)`; the KV cache and its index live in
           `state`, so the step returns the new state with the output,
           `pim_jit(lambda state, x: step(graphdef, state, x))` with
           `m = nnx.merge(graphdef, state); y = m(x); return y, nnx.state(m)`,
           and the caller feeds the returned state to the next step.

Each is compared with `jax.jit` of the same function within the backend's
tolerance (tests/test_api.py `TOL`), under placement="prefer_pim" so every
op a backend supports runs on PIM.  UPMEM computes integers only: these
float models stay on its host and every op's reason says so.
"""
from __future__ import annotations

import warnings

import jax
import numpy as np
import pytest

from pimjax import pim_jit
from tests.test_api import SMALL, TOL, _close, tuner

BACKENDS = sorted(SMALL)


def _compile_and_check(fn, args, backend):
    compiled = pim_jit(fn, backend=backend, tuner=tuner(), placement="prefer_pim",
                       **SMALL[backend]).lower(*args).compile()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = compiled(*args)
    want = jax.jit(fn)(*args)
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
    _close(got, want, TOL[backend])
    plans = compiled.plans
    assert all(p.reason for p in plans)
    contractions = [p for p in plans if p.op.kind == "contraction"]
    assert contractions
    if backend == "upmem":        # no FPU: the float products stay on the host, and say why
        assert all(p.placement == "host" and "integers only" in p.reason for p in contractions)
    else:
        assert all(p.placement == "pim" for p in contractions)
    return compiled, got


@pytest.mark.parametrize("backend", BACKENDS)
def test_haiku_mlp(backend):
    hk = pytest.importorskip("haiku")
    net = hk.without_apply_rng(hk.transform(lambda x: hk.nets.MLP([32, 16])(x)))
    x = jax.random.normal(jax.random.key(0), (64,))
    params = net.init(jax.random.key(1), x)
    _compile_and_check(lambda params, x: net.apply(params, x), (params, x), backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_equinox_mlp(backend):
    eqx = pytest.importorskip("equinox")
    model = eqx.nn.MLP(64, 16, 32, 2, key=jax.random.key(2))
    arrays, static = eqx.partition(model, eqx.is_array)
    x = jax.random.normal(jax.random.key(3), (64,))
    _compile_and_check(lambda arrays, x: eqx.combine(arrays, static)(x), (arrays, x), backend)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_flax_nnx_multihead_attention_decode(backend):
    """One token at a time through nnx.MultiHeadAttention(decode=True): the
    projections are GEMVs, the cache update (dynamic_update_slice at the
    runtime cache index) and the causal mask stay on the host; on AttAcc
    the masked block is not fused (its score / context products run as
    GEMVs) and says why.  Three steps, each from the state the previous
    pim_jit step returned (compiled once: the cache index is a value)."""
    from flax import nnx
    B, E, heads, max_len = 2, 32, 2, 16
    model = nnx.MultiHeadAttention(num_heads=heads, in_features=E, qkv_features=E, out_features=E,
                                   decode=True, rngs=nnx.Rngs(0))
    model.init_cache((B, max_len, E))
    graphdef, state = nnx.split(model)

    def step(state, x):
        m = nnx.merge(graphdef, state)
        y = m(x)
        return y, nnx.state(m)

    compiled = None
    for t in range(3):
        x = jax.random.normal(jax.random.key(10 + t), (B, 1, E))
        if compiled is None:
            compiled, (y, new_state) = _compile_and_check(step, (state, x), backend)
        else:
            y, new_state = _call(compiled, state, x, backend, step)
        assert y.shape == (B, 1, E)
        assert int(np.asarray(new_state["cache_index"][...])) == t + 1
        state = new_state
    if backend == "attacc":
        why = [p.reason for p in compiled.plans if "not fused as an attention block" in p.reason]
        assert len(why) == 6 and all("a mask (where)" in w for w in why)


def _call(compiled, state, x, backend, step):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = compiled(state, x)
    _close(got, jax.jit(step)(state, x), TOL[backend])
    return got


@pytest.mark.slow
def test_flax_nnx_decode_auto_placement_on_attacc():
    """placement="auto" (the default) on the masked decode block: no error
    (it raised PimCompileError before the unfusable block fell back), the
    values of jax.jit, and the block's ops say why it was not fused."""
    from flax import nnx
    model = nnx.MultiHeadAttention(num_heads=2, in_features=32, qkv_features=32, out_features=32,
                                   decode=True, rngs=nnx.Rngs(0))
    model.init_cache((1, 16, 32))
    graphdef, state = nnx.split(model)

    def step(state, x):
        m = nnx.merge(graphdef, state)
        return m(x), nnx.state(m)

    x = jax.random.normal(jax.random.key(4), (1, 1, 32))
    compiled = pim_jit(step, backend="attacc", tuner=tuner(), **SMALL["attacc"]).lower(state, x).compile()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _close(compiled(state, x), jax.jit(step)(state, x), TOL["attacc"])
    assert sum("not fused as an attention block" in p.reason for p in compiled.plans) == 6
