"""Cases a review of the frontend found wrong or crashing, each checked
against `jax.jit` exactly (host ops; values, dtypes, signs):

* concatenate / pad read a view through its base, so a broadcast or sliced
  view was "in bounds" where the result has other values (multi-index
  gathers and scatters are built from such concatenations);
* concatenate / pad of a literal crashed;
* -0.0 and 0.0 literals were one memo entry;
* PRNG key dtypes (`key<fry>`) have no numpy dtype;
* a contraction against a constant-filled array (`ones @ x`) crashed pim_jit.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import pimjax

X = jnp.arange(12.0).reshape(3, 4)
C = jnp.array([10.0, 20.0, 30.0, 40.0])
I, J = jnp.array([2, 0]), jnp.array([3, 1])

CASES = {
    "gather with two index arrays": (lambda x, i, j: x[i, j], (X, I, J)),
    "scatter-set with two index arrays": (lambda x, i, j: x.at[i, j].set(-1.0), (X, I, J)),
    "scatter-add with two index arrays": (lambda x, i, j: x.at[i, j].add(5.0), (X, I, J)),
    "gather rows and a slice": (lambda x, i: x[i, 1:3], (X, I)),
    "diagonal with an offset": (lambda x: jnp.diagonal(x, 1), (X,)),
    "concatenate a broadcast row (CLS token)": (lambda c, x: jnp.concatenate([c[None], x]), (C, X)),
    "concatenate a slice before another array": (lambda c, x: jnp.concatenate([c[:-1], x[0]]), (C, X)),
    "concatenate transposes": (lambda x: jnp.concatenate([x.T, x.T]), (X,)),
    "pad a broadcast row": (lambda c: jnp.pad(c[None], ((1, 0), (0, 0))), (C,)),
    "edge pad": (lambda c: jnp.pad(c, 1, mode="edge"), (C,)),
    "maximum pad": (lambda c: jnp.pad(c, 1, mode="maximum"), (C,)),
    "causal shift (concatenate a literal)": (lambda c: jnp.concatenate([jnp.zeros(1), c[:-1]]), (C,)),
    "strided .at[].set": (lambda x: x.at[:, ::2].set(0.0), (X,)),
    "zero pad of a literal array": (lambda c: c + jnp.pad(jnp.ones(2), 1), (C,)),
    "pad with per-side constants": (lambda x: jnp.pad(x, ((1, 2), (0, 1)), constant_values=((1.0, 2.0), (3.0, 4.0))),
                                    (X,)),
    "linear-ramp pad": (lambda x: jnp.pad(x, 1, mode="linear_ramp"), (X,)),
    "pad with -0.0": (lambda c: 1 / jnp.pad(c, 1, constant_values=-0.0), (C,)),
    "+0.0 and -0.0 literals": (lambda c: (c * lax.div(np.float32(1), np.float32(0)),
                                          c * lax.div(np.float32(1), np.float32(-0.0)), jnp.float32(-0.0)), (C,)),
    "PRNG normal": (lambda k: jax.random.normal(k, (4,)), (jax.random.PRNGKey(0),)),
    "dropout mask": (lambda k, x: jnp.where(jax.random.bernoulli(k, 0.5, x.shape), x / 0.5, 0.0),
                     (jax.random.PRNGKey(1), X)),
    "typed key in and out": (lambda k: jax.random.split(k), (jax.random.key(2),)),
    "ones @ x": (lambda c: jnp.ones((2, 4)) @ c, (C,)),
    "x @ x": (lambda c: c @ c, (C,)),
}


def _same(got, want):
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        if jnp.issubdtype(w.dtype, jax.dtypes.extended):
            g, w = jax.random.key_data(g), jax.random.key_data(w)
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
        np.testing.assert_array_equal(np.signbit(np.asarray(g, np.float64)), np.signbit(np.asarray(w, np.float64)))


@pytest.mark.parametrize("name", sorted(CASES))
def test_graph_and_pim_jit_equal_jax_jit(name):
    fn, args = CASES[name]
    want = jax.jit(fn)(*args)
    _same(pimjax.make_graph(fn, *args).evaluate(*args), want)
    _same(pimjax.pim_jit(fn, backend="hbm-pim", channels=4)(*args), want)
