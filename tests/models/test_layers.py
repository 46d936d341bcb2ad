"""A small-config decoder layer through pim_jit equals jax.jit; the phases of its ops."""
import jax
import numpy as np
import pytest

from pimjax import pim_jit
from pimjax.models.configs import get_config
from pimjax.models.layers import layer_shapes, make_layer, random_layer_args
from pimjax.studies.inference import input_phases, op_phases
from pimjax.trace.frontend import make_graph

TINY = dict(d_model=64, n_heads=2, d_ff=128)


def tiny(name, **extra):
    cfg = get_config(name)
    return cfg.scaled(**TINY, n_kv_heads=extra.pop("n_kv_heads", 2), **extra)


def _rel_err(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.max(np.abs(got - want)) / max(1e-6, float(np.max(np.abs(want)))))


@pytest.mark.parametrize("name,append,backend", [
    # each value check executes PIM programs: the first in a module XLA-compiles attacc's interpreter (~70 s)
    pytest.param("llama2-7b", True, "attacc", marks=pytest.mark.slow),
    pytest.param("gpt3-13b", False, "attacc", marks=pytest.mark.slow),
    pytest.param("llama2-7b", False, "hbm-pim", marks=pytest.mark.slow)])
def test_tiny_layer_matches_jit(name, append, backend):
    cfg = tiny(name)
    layer = make_layer(cfg, append=append)
    args = random_layer_args(cfg, batch=1, context=16, seed=3)
    want = jax.jit(layer)(*args)
    f = pim_jit(layer, backend=backend, resident=("params",) if append else ("params", "k_cache", "v_cache"),
                placement="prefer_pim")
    got = f(*args)
    rep = f.lower(*args).compile().report()
    assert sum(o.placement == "pim" for o in rep.ops) >= 4        # the GEMVs (and attention) ran as PIM programs
    for g, w in zip(got, want):
        assert g.shape == w.shape
        assert _rel_err(g, w) < 3e-2


@pytest.mark.slow
def test_grouped_query_layer_matches_jit():
    cfg = tiny("llama2-70b", n_kv_heads=1)          # 2 query heads share one KV head
    layer = make_layer(cfg)
    args = random_layer_args(cfg, batch=2, context=16, seed=5)
    want = jax.jit(layer)(*args)
    got = pim_jit(layer, backend="attacc", resident=("params",))(*args)
    for g, w in zip(got, want):
        assert _rel_err(g, w) < 3e-2


def test_both_forms_compute_the_same_layer():
    """append=False with the caches already holding this token's K / V equals append=True."""
    cfg = tiny("llama2-7b")
    args = random_layer_args(cfg, batch=1, context=8, seed=1)
    y, kc, vc = jax.jit(make_layer(cfg))(*args)
    y2, k_new, v_new = jax.jit(make_layer(cfg, append=False))(args[0], args[1], kc, vc, args[4])
    # the same products in two graphs that XLA fuses apart (one writes K / V into the cache): equal
    # here, but which dot emitter and summation order each graph gets is XLA's choice and the CPU's
    # (vector width), so the two are held to a few fp16 roundings of the output's scale, not to the bit
    # (K / V of the new token moved by +-2 ulp move y by under 1e-3 of max |y| here)
    assert y2.dtype == y.dtype and y2.shape == y.shape
    y32, y2_32 = np.asarray(y, np.float32), np.asarray(y2, np.float32)
    np.testing.assert_allclose(y2_32, y32, rtol=2.0 ** -8, atol=2.0 ** -8 * float(np.abs(y32).max()))
    # the K projection of the new token: the same products in two graphs that XLA fuses apart (one
    # writes them into the cache), so the fp16 results may differ in their last bits (2 ulp seen here,
    # on the commit before this session's too), never more than a few roundings
    k_old, k_new = np.asarray(kc)[:, :, -1].astype(np.float32), np.asarray(k_new).astype(np.float32)
    np.testing.assert_allclose(k_new, k_old, rtol=2.0 ** -8, atol=2.0 ** -14)


@pytest.mark.parametrize("name", ["gpt3-13b", "llama2-7b"])
def test_op_phases(name):
    cfg = tiny(name)
    layer = make_layer(cfg, append=False)
    args = layer_shapes(cfg, 1, 64)
    g = make_graph(layer, *args)
    phases = op_phases(g, input_phases(g, args))
    names = {p: [op.name for op, ph in zip(g.ops, phases) if ph == p] for p in set(phases)}
    gemvs = lambda p: sum(n == "dot_general" for n in names.get(p, []))  # noqa: E731
    assert gemvs("qkv") == 3 and gemvs("proj") == 1 and gemvs("attention") == 2
    assert gemvs("ffn") == (3 if cfg.ffn == "swiglu" else 2)
    # the softmax sits between score and context; the norms' reductions are "other"
    assert {"reduce_max", "reduce_sum"} <= set(names["attention"])
    assert "reduce_sum" in names["other"] and "dot_general" not in names["other"]
    if cfg.rope:
        assert {"cos", "sin"} <= set(names["other"])


def test_only_attention_depends_on_the_context():
    """Why decode compiles the layer once: every other op has the same shapes at any context."""
    cfg = tiny("llama2-7b")
    layer = make_layer(cfg, append=False)
    sig = {}
    for L in (64, 80):
        args = layer_shapes(cfg, 2, L)
        g = make_graph(layer, *args)
        phases = op_phases(g, input_phases(g, args))
        sig[L] = [(op.name, tuple(g.values[a.value].shape for a in op.operands), ph)
                  for op, ph in zip(g.ops, phases)]
    assert len(sig[64]) == len(sig[80])
    differ = [a[2] for a, b in zip(sig[64], sig[80]) if a != b]
    assert differ and set(differ) == {"attention"}


def test_prefill_matches_token_by_token_decode():
    """The prefill's last position equals decoding the prompt one token at a time (its K / V the cache)."""
    from pimjax.models.layers import make_prefill
    cfg = tiny("llama2-7b")
    params, _, _, _, _ = random_layer_args(cfg, batch=1, context=4, seed=2)
    xs = np.random.default_rng(0).standard_normal((1, 5, cfg.d_model)).astype(np.float16)
    y, k, v = jax.jit(make_prefill(cfg))(params, xs)
    step = jax.jit(make_layer(cfg))
    kc = np.zeros((1, cfg.n_kv_heads, 5, cfg.head_dim), np.float16)
    vc = kc.copy()
    for t in range(5):
        # the decode layer attends over the whole cache: keep only the filled rows
        yt, kc2, vc2 = step(params, xs[:, t], kc[:, :, :t + 1], vc[:, :, :t + 1], np.int32(t))
        kc[:, :, :t + 1], vc[:, :, :t + 1] = np.asarray(kc2), np.asarray(vc2)
    assert _rel_err(yt, np.asarray(y)[:, -1]) < 2e-2
    assert _rel_err(kc, k) < 2e-2
