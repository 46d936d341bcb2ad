""""Nothing silently wrong": each silently wrong or unclear case
becomes a correct result, a reported conversion, or a clear early error."""
from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pimjax
from pimjax.backends import baseline
from pimjax.errors import PimCompileError, PrecisionWarning
from pimjax.hw import get_backend
from pimjax.lower import lower
from pimjax.partition import op_support
from tests.helpers import slow_params

SMALL = {"hbm-pim": dict(channels=4), "attacc": dict(channels=2), "newton": dict(channels=2),
         "upmem": dict(dpus=64)}


# --- 1. precision is never silently lost --------------------------------------------------------
def _gemv_fn(W, x):
    return W @ x


# the heaviest cases (30 s and more each on 2 cores) run with the slow ones (CI runs them)
@pytest.mark.parametrize("name,unit", slow_params([("hbm-pim", "float16"), ("newton", "bfloat16")], {("newton", "bfloat16")}))
def test_float32_on_half_units_is_a_stated_conversion(name, unit):
    rng = np.random.default_rng(1)
    W, x = rng.normal(size=(64, 256)).astype(np.float32), rng.normal(size=256).astype(np.float32)
    f = pimjax.pim_jit(_gemv_fn, backend=name, placement="prefer_pim", **SMALL[name])
    with pytest.warns(PrecisionWarning, match=rf"runs 1 op\(s\) on data converted.*dot_general at .*"
                                              rf"\(float32 -> {unit}\).*precision='strict'"):
        y = f(W, x)
    want = np.asarray(jax.jit(_gemv_fn)(W, x))
    np.testing.assert_allclose(np.asarray(y), want, atol=6e-2 * np.abs(want).max())
    c = f.compiles()[0]
    assert c.cost_analysis()["ops"][0]["precision"] == f"float32 -> {unit}"
    df = c.report().to_dataframe()
    assert df.loc[0, "precision"] == f"float32 -> {unit}" and df.loc[0, "saturation"] == ""
    assert f.lower(W, x).cost_analysis()["ops"][0]["precision"] == f"float32 -> {unit}"   # predicted too
    # data already in the units' type is no conversion: no warning, empty field
    W16, x16 = W.astype(unit), x.astype(unit)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrecisionWarning)
        f(W16, x16)
    assert f.lower(W16, x16).compile().cost_analysis()["ops"][0]["precision"] == ""


def test_strict_precision_refuses_a_conversion_naming_the_op():
    W, x = np.ones((64, 256), np.float32), np.ones(256, np.float32)
    f = pimjax.pim_jit(_gemv_fn, backend="hbm-pim", channels=4, placement="prefer_pim", precision="strict")
    with pytest.raises(PimCompileError, match=r"dot_general at .*test_silent_wrong.py.* cannot run on hbm-pim: "
                                              r"precision='strict': its float32 data would run converted "
                                              r"to float16"):
        f(W, x)
    y = f(W.astype(np.float16), x.astype(np.float16))        # no conversion: runs
    np.testing.assert_array_equal(np.asarray(y, np.float32), np.full(64, 256.0))
    with pytest.raises(ValueError, match="precision 'loose' not in"):
        pimjax.pim_jit(_gemv_fn, precision="loose")


def test_overflow_and_underflow_of_converted_operands_are_flagged():
    f = pimjax.pim_jit(lambda a, b: a + b, backend="hbm-pim", channels=4, placement="prefer_pim")
    big = np.full((64, 256), 70000.0, np.float32)
    big[0, 0] = 1.0
    with pytest.warns(PrecisionWarning, match=r"add at .*operand 0: 16383 value\(s\) above 65504 overflow "
                                              r"float16 \(inf\).*result: 16383 inf / NaN"):
        y = np.asarray(f(big, big))
    assert np.isinf(y[0, 1]) and y[0, 0] == 2.0    # the units' value, reported rather than hidden
    tiny = np.full((64, 256), 1e-9, np.float32)
    with pytest.warns(PrecisionWarning, match=r"operand 0: 16384 nonzero value\(s\) below 5.96e-08 "
                                              r"underflow to 0 in float16"):
        f(tiny, tiny)
    sat = f.compiles()[0].report().to_dataframe().loc[0, "saturation"]
    assert "overflow float16" in sat and "underflow to 0" in sat          # both calls' findings kept
    ok = np.full((64, 256), 3.0, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrecisionWarning)
        np.testing.assert_array_equal(np.asarray(f(ok, ok)), 6.0)


def test_operand_checks_remember_immutable_operands_only():
    from pimjax.precision import OperandChecks
    checks, unit = OperandChecks(), np.dtype(np.float16)
    a = np.ones((8, 8), np.float32)
    assert checks(a, unit) == []
    a[0, 0] = 1e6                                   # a writeable array changed in place: scanned again
    assert checks(a, unit) == ["1 value(s) above 65504 overflow float16 (inf)"]
    j = jnp.asarray(a)
    assert checks(j, unit) == checks(j, unit) == ["1 value(s) above 65504 overflow float16 (inf)"]
    assert checks(jnp.ones((8, 8)), unit) == []     # another array is another entry


def test_an_overflowing_fp16_running_sum_is_flagged():
    """Rows of +-60 000: every partial fits fp16 but the units' running sum
    passes 65 504 (NaN); jax.jit gives 0.  The value is flagged, not silent."""
    W = np.tile(np.array([60000.0, 60000.0, -60000.0, -60000.0], np.float32), (64, 64))
    x = np.ones(256, np.float32)
    want = np.asarray(jax.jit(_gemv_fn)(W, x))
    assert np.all(want == 0)
    f = pimjax.pim_jit(_gemv_fn, backend="hbm-pim", channels=4, placement="prefer_pim")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = np.asarray(f(W, x))
    bad = ~np.isfinite(y)
    msgs = [str(w.message) for w in caught if issubclass(w.category, PrecisionWarning)]
    if bad.any():
        assert any(f"result: {bad.sum()} inf / NaN value(s) from finite operands" in m for m in msgs), msgs
        assert "float16 arithmetic overflowed" in f.compiles()[0].cost_analysis()["ops"][0]["saturation"]
    else:                       # a lowering whose partial sums stay in range is right, not flagged
        np.testing.assert_allclose(y, want, atol=1e-3)


@pytest.mark.parametrize("fn,make", [
    (lambda a, b: a + b,
     lambda: (np.where(np.arange(64 * 256).reshape(64, 256) % 7 == 0, 60000.0, 1.5).astype(np.float16),
              np.where(np.arange(64 * 256).reshape(64, 256) % 7 == 0, 60000.0, 2.0).astype(np.float16))),
    (lambda W, x: W @ x,        # rows 0, 4, 8, ... sum to 80 254 > 65504: inf in jax's float16 result too
     lambda: (np.where((np.arange(64)[:, None] % 4 == 0) & (np.arange(256) < 2), 40000.0, 1.0)
              .astype(np.float16), np.ones(256, np.float16))),
], ids=["add", "gemv"])
def test_an_inf_jax_gives_too_is_not_flagged(fn, make):
    """float16 data on float16 units (no conversion): where jax's own float16
    result is inf, the units' inf is the right value, not a saturation."""
    args = make()
    want = np.asarray(jax.jit(fn)(*args))
    assert want.dtype == np.float16 and np.isposinf(want).any() and np.isfinite(want).any()
    f = pimjax.pim_jit(fn, backend="hbm-pim", channels=4, placement="prefer_pim")
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrecisionWarning)     # any saturation finding would raise here
        y = f(*args)
    rows = f.compiles()[0].cost_analysis()["ops"]
    assert [r["placement"] for r in rows] == ["pim"]           # the op really ran on the units
    assert rows[0]["saturation"] == "" and rows[0]["precision"] == ""
    assert f.compiles()[0].report().to_dataframe().loc[0, "saturation"] == ""
    assert y.dtype == want.dtype and y.shape == want.shape
    np.testing.assert_array_equal(np.asarray(y), want)        # small integers and inf: exact in float16


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
    # the split graph evaluates to the function's value, to a rounding per op of the chain: jax.jit contracts
    # x * 1.001 + 0.001 into one FMA where the CPU has them, and the graph matches it bit for bit only while
    # XLA fuses both the same way (jax op by op is 6x rtol 1e-5 off jax.jit beside the zero crossing here)
    eps = float(np.finfo(np.float32).eps)
    np.testing.assert_allclose(np.asarray(graph.evaluate(x)), want, rtol=1e-5,
                               atol=600 * eps * float(np.abs(want).max()))


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
    with pytest.raises(ValueError, match=r"operand 0 .* has shape \(30, 13\) in shapes, but the op's "
                                         r"extents \(i<37, k<13\) read up to \(37, 13\)"):
        lower(op, d, be, {**good, wv: (30, 13)})
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


# --- 6. caches and scripts ------------------------------------------------------------------------
def test_a_tampered_cache_entry_is_checked_dropped_and_retuned(tmp_path):
    import json

    from pimjax.kernels import kernel_op
    from pimjax.partition import drafts
    from pimjax.search.cache import draft_to_dict
    from pimjax.search.tuner import Tuner
    from pimjax.sim.cycles import cycles_batch
    be = get_backend("hbm-pim", channels=4)
    op, shapes = kernel_op("gemv", [64, 64])
    table = drafts(op, be, shapes=shapes)
    cyc = np.asarray(cycles_batch([lower(op, d, be, shapes) for d in table], be).total_cycles, np.float64)
    worst, best = table[int(np.argmax(cyc))], table[int(np.argmin(cyc))]
    base = float(pimjax.cycles(lower(op, baseline(op, be), be, shapes), be).total_cycles)
    assert cyc.max() > base          # the worst draft is slower than the baseline mapping
    path = tmp_path / "tune.json"
    t = Tuner(mode="exhaustive", cache=str(path))
    honest = t.choose(op, be, shapes)
    assert float(honest.report.total_cycles) == pytest.approx(min(cyc.min(), base))
    best = honest.draft
    (key, entry), = json.loads(path.read_text()).items()
    # 1. a terrible draft claimed exhaustive with 1 cycle: the cycles disagree
    path.write_text(json.dumps({key: dict(entry, draft=draft_to_dict(worst), cycles=1.0, mode="exhaustive")}))
    with pytest.warns(RuntimeWarning, match=r"tuning cache entry for dot_general is wrong \(it claims 1 cycles, "
                                            r"its draft simulates to .*\); dropped, tuning again"):
        again = Tuner(mode="exhaustive", cache=str(path)).choose(op, be, shapes)
    assert not again.cached and again.draft == best
    assert json.loads(path.read_text())[key]["cycles"] == pytest.approx(min(cyc.min(), base))   # rewritten
    # 2. the same draft with its true cycles, claimed exhaustive: slower than the baseline
    path.write_text(json.dumps({key: dict(entry, draft=draft_to_dict(worst), cycles=float(cyc.max()),
                                          mode="exhaustive")}))
    with pytest.warns(RuntimeWarning, match=r"exhaustive choice simulates to .* slower than the baseline"):
        again = Tuner(mode="exhaustive", cache=str(path)).choose(op, be, shapes)
    assert again.draft == best
    # 3. an honest entry answers from the cache, silently
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        hit = Tuner(mode="exhaustive", cache=str(path)).choose(op, be, shapes)
    assert hit.cached and hit.draft == best and hit.baseline is not None


def test_validate_reference_names_a_csv_that_is_not_utf8(tmp_path, capsys):
    from experiments import validate_reference
    bad = tmp_path / "latin1.csv"
    bad.write_bytes("backend,kernel\nhbm-pim,gemv caf\xe9\n".encode("latin-1"))
    assert validate_reference.main(["--csv", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: not UTF-8 text" in err and "save the CSV as UTF-8" in err
    assert validate_reference.main(["--csv", str(tmp_path / "absent.csv")]) == 2
    assert "absent.csv: cannot be read" in capsys.readouterr().err


# --- 7. errors name the user's mistake; transforms that used to fail work --------------------------
def test_an_unknown_keyword_is_named_not_the_missing_positional():
    def g(x, z=1.0):
        return x * z
    f = pimjax.pim_jit(g, backend="hbm-pim", channels=4)
    x = np.ones(8, np.float32)
    for call in (lambda: f(y=x), lambda: f(x, y=2.0), lambda: f.lower(x, y=2.0)):
        with pytest.raises(TypeError, match=r"pim_jit\(g\) got unexpected keyword argument\(s\) 'y'; "
                                            r"its parameters are x, z"):
            call()


def test_pim_jit_applied_under_a_transform_says_where_it_goes():
    x = np.ones(8, np.float32)
    with pytest.raises(TypeError, match=r"pim_jit needs a function, got a .*Tracer: apply pim_jit outside jax "
                                        r"transforms"):
        jax.jit(pimjax.pim_jit)(x)
    with pytest.raises(TypeError, match="pim_jit needs a function, got a ndarray"):
        pimjax.pim_jit(x)


def test_the_staged_api_and_linearize_under_transforms():
    W = np.random.default_rng(0).normal(size=(64, 128)).astype(np.float32) * 0.1
    x = np.ones(128, np.float32)

    def ref(W, x):
        return jnp.tanh(W @ x)
    f = pimjax.pim_jit(ref, backend="hbm-pim", channels=4, placement="prefer_pim")
    # jax.linearize: primal on PIM, the linear map of the jnp reference
    y, lin = jax.linearize(lambda x: f(W, x), x)
    y0, lin0 = jax.linearize(lambda x: ref(W, x), x)
    np.testing.assert_allclose(np.asarray(y), np.asarray(y0), atol=3e-2)
    np.testing.assert_allclose(np.asarray(lin(x)), np.asarray(lin0(x)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(jax.grad(lambda x: f(W, x).sum())(x)),
                               np.asarray(jax.grad(lambda x: ref(W, x).sum())(x)), rtol=1e-5, atol=1e-6)
    # f.lower inside jax.jit lowers for the tracers' shapes
    ns = jax.jit(lambda x: jnp.float32(f.lower(W, x).compile().cost_analysis()["pim_ns"]) + 0 * x.sum())(x)
    assert float(ns) == pytest.approx(f.lower(W, x).compile().cost_analysis()["pim_ns"])


def test_an_equinox_module_with_a_function_leaf_points_to_closing_over_or_filtering():
    eqx = pytest.importorskip("equinox")

    class Dense(eqx.Module):
        w: jax.Array
        act: object

        def __call__(self, x):
            return self.act(self.w @ x)
    m = Dense(jnp.ones((16, 8)), jax.nn.relu)
    f = pimjax.pim_jit(lambda m, x: m(x), backend="hbm-pim", channels=4)
    x = np.ones(8, np.float32)
    with pytest.raises(TypeError, match=r"argument args\[0\]\.act is a .*, not an array.*a function is not an "
                                        r"array: close over it.*equinox Dense.*eqx\.partition.*eqx\.filter"):
        f(m, x)
    arrays, static = eqx.partition(m, eqx.is_array)         # the way the message points to
    g = pimjax.pim_jit(lambda a, x: eqx.combine(a, static)(x), backend="hbm-pim", channels=4)
    np.testing.assert_allclose(np.asarray(g(arrays, x)), np.asarray(m(x)), rtol=3e-2)
