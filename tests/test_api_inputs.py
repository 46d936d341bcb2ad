"""pim_jit on the inputs a first-time user passes: half precision and integer
data, Python scalars (weak types), 0-d ops, single-operand contractions,
keyword arguments, wrong dtypes / structures on a Compiled, and the
placement / report edge cases around them.  Every value is compared with
`jax.jit` of the same function."""
from __future__ import annotations

import json
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pimjax import PimCompileError, get_backend, make_graph, pim_jit
from pimjax.partition import op_support
from pimjax.search.cache import cache_key
from pimjax.search.tuner import Tuner
from tests.test_api import SMALL, TOL, FlatModel, _close, tuner

FLOAT_BACKENDS = ("hbm-pim", "attacc", "newton")


def _on(lowered) -> list[str]:
    return [p.placement for p in lowered.plans]


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16])
@pytest.mark.parametrize("backend", FLOAT_BACKENDS)
def test_half_precision_epilogue_runs_in_the_ops_dtype(backend, dtype):
    """relu(W @ x + b) in fp16 / bf16: the epilogue adds b in the op's dtype
    (as jax does after the reduction), so the result has jax's dtype and
    values, and no float32-vs-float16 primitive error."""
    rng = np.random.default_rng(0)
    W, x, b = (jnp.asarray(rng.standard_normal(s), dtype) for s in ((64, 32), (32,), (64,)))
    layer = lambda W, x, b: jax.nn.relu(W @ x + b)          # noqa: E731
    f = pim_jit(layer, backend=backend, tuner=tuner(), placement="prefer_pim", **SMALL[backend])
    assert _on(f.lower(W, x, b)) == ["pim"]
    got, want = f(W, x, b), jax.jit(layer)(W, x, b)
    assert got.dtype == want.dtype == dtype
    _close(got, want, 2 * TOL[backend])


@pytest.mark.parametrize("backend", FLOAT_BACKENDS)
def test_integer_data_stays_off_floating_point_units(backend):
    """int32 values beyond fp16's exact range: a float unit would round them
    (or overflow to NaN, which the int cast turns into 0), so the op runs on
    the host, exactly, and says why; placement="pim" refuses it."""
    rng = np.random.default_rng(1)
    W = jnp.asarray(rng.integers(-3000, 3000, (64, 32)), jnp.int32)
    x = jnp.asarray(rng.integers(-3000, 3000, 32), jnp.int32)
    f = pim_jit(lambda W, x: W @ x, backend=backend, tuner=tuner(), placement="prefer_pim", **SMALL[backend])
    plan = f.lower(W, x).plans[0]
    assert plan.placement == "host" and "int32" in plan.reason
    np.testing.assert_array_equal(np.asarray(f(W, x)), np.asarray(W @ x))
    with pytest.raises(PimCompileError, match="int32"):
        pim_jit(lambda W, x: W @ x, backend=backend, tuner=tuner(), placement="pim",
                **SMALL[backend]).lower(W, x)


def test_int8_epilogue_on_upmem_wraps_like_jax():
    """UPMEM accumulates in int32; the epilogue sees the accumulator in the
    op's int8, so max(W @ x, 0) wraps exactly as jax's int8 matmul does."""
    rng = np.random.default_rng(2)
    W = jnp.asarray(rng.integers(-100, 100, (64, 32)), jnp.int8)
    x = jnp.asarray(rng.integers(-100, 100, 32), jnp.int8)
    fn = lambda W, x: jnp.maximum(W @ x, 0)                 # noqa: E731
    f = pim_jit(fn, backend="upmem", tuner=tuner(), placement="prefer_pim", **SMALL["upmem"])
    assert _on(f.lower(W, x)) == ["pim"]
    got, want = f(W, x), jax.jit(fn)(W, x)
    assert got.dtype == jnp.int8
    assert int(jnp.max(jnp.abs(W.astype(jnp.int32) @ x.astype(jnp.int32)))) > 127   # it does wrap
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.parametrize("backend", sorted(SMALL))
def test_scalar_ops_and_python_scalars_fall_back_to_the_host(backend):
    dt = jnp.int32 if backend == "upmem" else jnp.float32
    f = pim_jit(lambda a, b: a * b, backend=backend, tuner=tuner(), placement="prefer_pim", **SMALL[backend])
    a, b = jnp.asarray(3, dt), jnp.asarray(5, dt)
    assert _on(f.lower(a, b)) == ["host"] and "scalar" in f.lower(a, b).plans[0].reason
    np.testing.assert_array_equal(np.asarray(f(a, b)), np.asarray(a * b))
    g = pim_jit(lambda x, s: x * s, backend=backend, tuner=tuner(), **SMALL[backend])
    x = jnp.arange(8, dtype=dt)
    np.testing.assert_array_equal(np.asarray(g(x, 2)), np.asarray(x * 2))


def test_single_operand_contraction_lowers_or_falls_back():
    """jax.grad of sum(W @ x) traces to y[i, j] = 1 * x[j], a contraction
    whose body reads one tensor; hbm-pim's register check assumed two."""
    x = jnp.asarray(np.random.default_rng(3).standard_normal(32), jnp.float32)
    fn = lambda W: jax.grad(lambda W: jnp.sum(W @ x))(W)     # noqa: E731
    W = jnp.ones((64, 32), jnp.float32)
    for backend in FLOAT_BACKENDS:
        f = pim_jit(fn, backend=backend, tuner=tuner(), placement="prefer_pim", **SMALL[backend])
        _close(f(W), jax.jit(fn)(W), TOL[backend])


def test_weak_typed_scalars_are_their_own_compile():
    """f(x16, 2.0) promotes to float16 and f(x16, np.float32(2)) to float32
    (jax's rules), whichever is called first."""
    x = jnp.ones(8, jnp.float16)
    f = pim_jit(lambda x, s: x * s, tuner=tuner(), channels=4)
    with jax.numpy_dtype_promotion("standard"):         # the suite runs strict; this is about promotion
        assert f(x, np.float32(2)).dtype == jnp.float32
        assert f(x, 2.0).dtype == jax.jit(lambda x, s: x * s)(x, 2.0).dtype == jnp.float16
        assert f(x, jnp.asarray(2.0)).dtype == jnp.float16            # a weakly typed jax array


def test_compiled_checks_dtype_and_structure():
    W, x, b = np.ones((8, 4), np.float32), np.ones(4, np.float32), np.ones(8, np.float32)
    c = pim_jit(lambda W, x, b: W @ x + b, tuner=tuner(), channels=4).lower(W, x, b).compile()
    with pytest.raises(TypeError, match=r"argument W: compiled for float32\[8, 4\], got int32\[8, 4\]"):
        c(W.astype(np.int32), x, b)
    with pytest.raises(TypeError, match="structure"):
        c((W, x), b)
    np.testing.assert_array_equal(np.asarray(c(W.astype(np.float64), x, b)), W @ x + b)   # canonicalised


def test_keyword_arguments_and_a_single_resident_name():
    W = np.random.default_rng(4).standard_normal((32, 16)).astype(np.float32)
    x = np.random.default_rng(5).standard_normal(16).astype(np.float32)
    f = pim_jit(lambda params, x, scale=1.0: scale * (params @ x), tuner=tuner(), resident="params",
                placement="prefer_pim", channels=4)
    assert f.resident == ("params",)
    _close(f(W, x=x), W @ x, TOL["hbm-pim"])
    _close(f(params=W, x=x), W @ x, TOL["hbm-pim"])
    with pytest.raises(TypeError, match="keyword-only"):
        pim_jit(lambda W, *, x: W @ x, tuner=tuner(), channels=4)(W, x=x)


def test_placement_pim_raises_when_the_backend_cannot_lower_the_op():
    """Newton runs contractions only (PIMFlow §2.1): a row sum is refused
    with placement="pim" and reported on the host otherwise."""
    A = np.ones((16, 32), np.float32)
    with pytest.raises(PimCompileError, match="reduce_sum"):
        pim_jit(lambda a: jnp.sum(a, 1), backend="newton", placement="pim", tuner=tuner(),
                **SMALL["newton"]).lower(A)
    ok, why = op_support(make_graph(lambda a: jnp.sum(a, 1), A).ops[0], get_backend("newton"))
    assert not ok and "add" in why


def test_op_support_reads_every_dtype_it_is_given():
    op = make_graph(lambda W, x: W @ x, np.ones((8, 4), np.float32), np.ones(4, np.float32)).ops[0]
    hbm, upmem = get_backend("hbm-pim"), get_backend("upmem")
    assert op_support(op, hbm, dtype=["float16", "float16", "float16"])[0]
    assert op_support(op, hbm, dtype=["float32", "bool", "float32"])[0]        # 0 / 1 are exact
    assert not op_support(op, hbm, dtype=["float32", "float32", "int32"])[0]   # an integer result
    assert not op_support(op, upmem, dtype=["int32", "bfloat16"])[0]           # bf16 is floating
    assert op_support(op, upmem, dtype="int8")[0]


def test_predicted_cycles_and_report_dict_have_no_silent_nans():
    """The baseline joins the tuner's candidates with its own prediction, an
    exhaustive tuner predicts nothing (None, not 0), and the dicts hold
    None where a figure does not exist (strict JSON)."""
    W, x = np.ones((64, 128), np.float32), np.ones(128, np.float32)
    kw = dict(placement="prefer_pim", channels=4)
    pred = pim_jit(lambda W, x: W @ x, tuner=Tuner(model=FlatModel(), top_k=1), **kw).lower(W, x)
    assert math.isfinite(pred.cost_analysis()["pim_cycles"])
    ex = pim_jit(lambda W, x: W @ x, tuner="exhaustive", **kw).lower(W, x)
    assert ex.cost_analysis()["pim_cycles"] is None and ex.cost_analysis()["figures"] == "predicted"
    assert "nan" not in str(ex.report())
    json.dumps(ex.cost_analysis(), allow_nan=False)
    assert "program for" in ex.compile().as_text() and "total" in ex.compile().as_text()
    rng = np.random.default_rng(0)
    q, K, V = (rng.standard_normal(s).astype(np.float32) for s in ((2, 16), (2, 32, 16), (2, 32, 16)))

    def attn(q, K, V):
        return jnp.einsum("hn,hnd->hd", jax.nn.softmax(jnp.einsum("hd,hnd->hn", q, K), axis=-1), V)
    lowered = pim_jit(attn, backend="attacc", tuner=tuner(), placement="prefer_pim",
                      channels=2).lower(q, K, V)
    assert "-> fused: in the attention block" in lowered.as_text()
    report = lowered.compile().report()
    d = report.to_dict()
    json.dumps(d, allow_nan=False)
    fused = [o for o in d["ops"] if o["placement"] == "fused"]
    assert fused and all(o["speedup_gpu"] is None for o in fused)
    assert "nan" not in str(report)


def test_tuning_cache_key_sees_the_whole_backend():
    """A swept timing is another hardware: another cache entry."""
    graph = make_graph(lambda W, x: W @ x, np.ones((64, 32), np.float32), np.ones(32, np.float32))
    op = graph.ops[0]
    shapes = {i: v.shape for i, v in enumerate(graph.values)}
    be = get_backend("hbm-pim", channels=4)
    same = cache_key(op, shapes, get_backend("hbm-pim", channels=4))
    assert cache_key(op, shapes, be) == same
    assert cache_key(op, shapes, be.replace(timing=be.timing.replace(tRP=be.timing.tRP + 1))) != same


def test_an_exhaustive_tuner_does_not_reuse_predicted_choices(tmp_path):
    path = str(tmp_path / "tune.json")
    W, x = np.ones((64, 128), np.float32), np.ones(128, np.float32)
    kw = dict(placement="prefer_pim", channels=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pim_jit(lambda W, x: W @ x, tuner=tuner(cache=path), **kw).lower(W, x).compile()
        ex = pim_jit(lambda W, x: W @ x, tuner=Tuner(mode="exhaustive", cache=path), **kw).lower(W, x).compile()
        assert not ex.plans[0].choice.cached
        again = pim_jit(lambda W, x: W @ x, tuner=tuner(cache=path), **kw).lower(W, x).compile()
    assert again.plans[0].choice.cached and again.plans[0].choice.mode == "exhaustive"


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16])
def test_half_precision_attention_is_one_attacc_program(dtype):
    """jax's fp16 / bf16 softmax sums a float32 copy of exp(s - m) (a convert
    op between exp and sum): the block still matches, as seven ops."""
    from pimjax.lower.patterns import match_attention
    rng = np.random.default_rng(6)
    q, K, V = (jnp.asarray(rng.standard_normal(s), dtype) for s in ((4, 32), (4, 64, 32), (4, 64, 32)))

    def attn(q, K, V):
        s = jnp.einsum("hd,hnd->hn", q, K) / jnp.sqrt(jnp.asarray(32, q.dtype))
        return jnp.einsum("hn,hnd->hd", jax.nn.softmax(s, axis=-1), V)
    graph = make_graph(attn, q, K, V)
    assert match_attention(graph) == [tuple(range(7))]
    assert graph.ops[3].kind == "elementwise"                    # the convert
    compiled = pim_jit(attn, backend="attacc", tuner=tuner(), placement="prefer_pim",
                       channels=2).lower(q, K, V).compile()
    assert [o.placement for o in compiled.report().ops] == ["fused"] * 6 + ["pim"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got, want = compiled(q, K, V), jax.jit(attn)(q, K, V)
    assert got.dtype == want.dtype == dtype
    _close(got, want, 2 * TOL["attacc"])


def test_a_convert_with_another_reader_breaks_the_attention_block():
    """The float32 copy of e feeding anything besides the sum is not the
    softmax pattern: no block (the ops run one by one)."""
    from pimjax.lower.patterns import match_attention
    sd = lambda *s: jax.ShapeDtypeStruct(s, jnp.float16)        # noqa: E731

    def attn(q, K, V, leak):
        s = jnp.einsum("hd,hnd->hn", q, K)
        e = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
        e32 = e.astype(jnp.float32)
        p = e / jnp.sum(e32, axis=-1, keepdims=True).astype(jnp.float16)
        o = jnp.einsum("hn,hnd->hd", p, V)
        return (o, e32) if leak else o
    args = sd(4, 32), sd(4, 64, 32), sd(4, 64, 32)
    assert match_attention(make_graph(lambda q, K, V: attn(q, K, V, False), *args)) == [tuple(range(7))]
    assert match_attention(make_graph(lambda q, K, V: attn(q, K, V, True), *args)) == []
