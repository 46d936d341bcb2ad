"""Programs the differential fuzzer (`pimjax.testing.fuzz`) found
failing, kept as they came out of `make fuzz` (already small), with the
seeds that made them: each must give only the allowed outcomes now."""
from __future__ import annotations

import numpy as np

from pimjax.precision import check_values
from pimjax.testing import fuzz
from pimjax.testing.fuzz import ArgSpec, FuzzProgram

# seed 10074: exp of an fp16 dot_general whose running sum overflowed.  The units gave NaN where
# jax.jit (float32) gives inf, and the per-call check passed it silently: it counted only
# positions where jax's result was finite.  Fixed in pimjax/precision.py (check_values).
EXP_OF_OVERFLOWED_DOT = FuzzProgram(
    "dot",
    'def program(a0, p, a2):\n    v0 = lax.dot_general(a0, p["w1"], (((0,), (0,)), ((), ())))\n'
    '    v1 = jnp.exp(v0)\n    v2 = jnp.maximum(v1, a2)\n    return v2\n',
    ("a0", "p", "a2"),
    (ArgSpec(("a0",), (7, 4), "float32", mag=300.0), ArgSpec(("p", "w1"), (7, 7), "float32", mag=300.0),
     ArgSpec(("a2",), (4, 1), "float32", mag=300.0)))

# seed 10036: fp16 GQA attention whose scores reach fp16's range edge.  jax.jit's fused program
# turns two scores into inf (then NaN through the softmax) where jax op by op -- and pimjax on
# every backend -- stays finite.  Not a pimjax bug: the fuzzer now accepts jax op by op as the
# reference where jax.jit's rounding differs (`fuzz.EAGER`).
FP16_EDGE_ATTENTION = FuzzProgram(
    "attention",
    'def program(a0, a1, a2):\n    v0 = jnp.repeat(a1, 2, axis=1)\n    v1 = jnp.repeat(a2, 2, axis=1)\n'
    '    v2 = jnp.einsum("bhd,bhnd->bhn", a0, v0) * 0.707107\n'
    '    v3 = lax.broadcasted_iota(jnp.int32, v2.shape, 2)\n    v4 = jnp.where(v3 < 24, v2, -jnp.inf)\n'
    '    v5 = jax.nn.softmax(v4, axis=-1)\n    v6 = jnp.einsum("bhn,bhnd->bhd", v5, v1)\n    return v6\n',
    ("a0", "a1", "a2"),
    (ArgSpec(("a0",), (2, 6, 2), "float16", mag=300.0), ArgSpec(("a1",), (2, 3, 48, 2), "float16", mag=300.0),
     ArgSpec(("a2",), (2, 3, 48, 2), "float16", mag=300.0)))


# seed 10267: an fp16 dot_general + add on newton under placement="auto", planned MD-DP (PIMFlow's
# GPU / PIM split).  One result past 65504 came back inf with no PrecisionWarning: the MD-DP path
# skipped the per-call value check the PIM path runs.  Fixed in pimjax/api.py (Compiled.__call__).
MDDP_FP16_OVERFLOW = FuzzProgram(
    "dot",
    'def program(a0, p, a2):\n    v0 = lax.dot_general(a0, p["w1"], (((0,), (0,)), ((), ())))\n'
    '    v1 = v0 + a2\n    return v1\n',
    ("a0", "p", "a2"),
    (ArgSpec(("a0",), (48, 100), "float16", mag=300.0), ArgSpec(("p", "w1"), (48, 13), "float16", mag=300.0),
     ArgSpec(("a2",), (100, 13), "float16", mag=300.0)))


# seed 33170: an fp16 two-layer MLP.  The first GEMM (K = 1) overflows to inf in some rows, as in
# jax; in another row the second GEMM's fp16 running sum overflowed to +inf and -inf, NaN where
# jax.jit (float32 sums) gives -inf.  The per-call check passed it silently: it skipped a result
# whenever any operand element was inf.  Fixed in pimjax/precision.py (check_values: with jax's
# result at hand, the positions where it differs count whatever the operands hold).
MLP_OVERFLOW_NEXT_TO_INF = FuzzProgram(
    "mlp",
    "def program(a0, a1, a2):\n    v0 = a0 @ a1\n    v1 = jax.nn.relu(v0)\n    v2 = v1 @ a2\n    return v2\n",
    ("a0", "a1", "a2"),
    (ArgSpec(("a0",), (5, 1), "float16", mag=300.0), ArgSpec(("a1",), (1, 8), "float16", mag=300.0),
     ArgSpec(("a2",), (8, 8), "float16", mag=300.0)))


# seed 38502: an fp16 two-layer MLP on Newton (bf16 units: 8 significant bits for fp16's 11).  One
# result's terms (|v1| up to 64 832 times |a2| up to 300: 8.4e6 in all) cancel to -2 749 in jax; the
# bf16 units give +3 456 -- what jax gives on every value rounded to bf16 -- under the compile-time
# conversion warning, which named only the range.  Not a pimjax bug: the warning now states the
# precision, and the fuzzer counts a difference that jax at the units' precision reproduces as
# "precision" (`fuzz.at_unit_precision`).
MLP_CANCELS_IN_BF16 = FuzzProgram(
    "mlp",
    "def program(a0, a1, a2):\n    v0 = a0 @ a1\n    v1 = jax.nn.relu(v0)\n    v2 = v1 @ a2.T\n    return v2\n",
    ("a0", "a1", "a2"),
    (ArgSpec(("a0",), (2, 1), "float16", mag=300.0), ArgSpec(("a1",), (1, 17), "float16", mag=300.0),
     ArgSpec(("a2",), (129, 17), "float16", mag=300.0)))


def test_bf16_cancellation_is_the_stated_conversion():
    import ml_dtypes
    prog, args = MLP_CANCELS_IN_BF16, MLP_CANCELS_IN_BF16.make_args(38502)
    want, scale = fuzz.reference_of(prog, 38502)
    bf16 = fuzz.at_unit_precision(prog.fn, np.dtype(ml_dtypes.bfloat16))(*args)
    assert fuzz.compare(bf16, want, 6e-2, scale)            # a real difference, made by the rounding alone
    r = fuzz.check(prog, "newton", "prefer_pim", seed=38502, tuner=fuzz.flat_tuner(), timeout_s=None)
    assert r.outcome == "precision" and "jax at bfloat16 precision agrees" in r.detail, r
    assert "converted to the units' type" in r.detail, r


def test_overflow_beside_an_inf_operand_is_flagged():
    res = fuzz.check_all(MLP_OVERFLOW_NEXT_TO_INF, seed=33170, backends=("hbm-pim", "attacc"),
                         placements=("prefer_pim",), tuner=fuzz.flat_tuner(), timeout_s=None)
    for r in res.values():
        assert r.outcome == "precision" and "inf / NaN value(s) where jax's differ" in r.detail, res
    # check_values on its own: an inf operand no longer hides a differing position; without jax's
    # result nothing is said (the operand's inf may carry into the result, as in jax)
    x = np.array([np.inf, 1.0], np.float16)
    got = np.array([np.inf, np.nan], np.float16)
    ev = check_values([x], got, np.dtype(np.float16), reference=lambda: np.array([np.inf, -np.inf], np.float32))
    assert ev == ["result: 1 inf / NaN value(s) where jax's differ (the float16 arithmetic overflowed, "
                  "e.g. a running sum above 65504)"], ev
    assert check_values([x], got, np.dtype(np.float16)) == []


def test_mddp_overflow_is_flagged():
    import warnings

    import pimjax
    f = pimjax.pim_jit(MDDP_FP16_OVERFLOW.fn, backend="newton", placement="auto", **fuzz.BACKEND_OPTIONS["newton"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f(*MDDP_FP16_OVERFLOW.make_args(10267))
    assert [o.placement for o in f.compiles()[0].report().ops] == ["md-dp"]      # the path under test
    r = fuzz.check(MDDP_FP16_OVERFLOW, "newton", "auto", seed=10267, timeout_s=None)
    assert r.outcome == "precision" and "inf / NaN value(s) from finite operands" in r.detail, r


# seed 10290: an fp16 convolution with values of +-300.  Its products (up to 90 000) overflowed
# float16 in pimjax's evaluator (a conv's affine maps miss the einsum path), so a host-placed conv
# (upmem) returned inf where jax (float32 products and sums, one rounding) gives 28 910, and the PIM
# check on hbm-pim compared with that inf and said nothing.  Fixed in pimjax/trace/evaluate.py.
FP16_CONV_PRODUCTS = FuzzProgram(
    "conv",
    'def program(a0, a1):\n    v0 = lax.conv_general_dilated(a0, a1, (1, 1), "VALID", feature_group_count=1, '
    'dimension_numbers=("NCHW", "OIHW", "NCHW"))\n    return v0\n',
    ("a0", "a1"),
    (ArgSpec(("a0",), (1, 1, 8, 5), "float16", mag=300.0), ArgSpec(("a1",), (4, 1, 3, 2), "float16", mag=300.0)))


def test_fp16_conv_products_match_jax_on_the_host_and_are_flagged_on_pim():
    res = fuzz.check_all(FP16_CONV_PRODUCTS, seed=10290, backends=("upmem", "hbm-pim"),
                         placements=("prefer_pim",), tuner=fuzz.flat_tuner(), timeout_s=None)
    assert res[("upmem", "prefer_pim")].outcome == "equal", res            # host: jax's values
    hbm = res[("hbm-pim", "prefer_pim")]
    assert hbm.on_pim and hbm.outcome == "precision" and "conv_general_dilated" in hbm.detail, hbm


# seed 20031: an int8 elementwise chain on upmem (int32 DPUs).  jax wraps a0 + 3 + a1 at int8 before
# the minimum; the DPU interpreter kept the int32 sum (146, not -110), so the minimum picked the
# other operand: -56 where jax gives -107, silently.  Fixed in pimjax/backends/upmem/execute.py.
INT8_WRAP_BEFORE_MIN = FuzzProgram(
    "elementwise",
    "def program(a0, a1, a2):\n    v0 = a0 + 3\n    v1 = a1 + v0\n    v2 = jnp.minimum(v1, a2)\n"
    "    v3 = v2 + 3\n    return v3\n",
    ("a0", "a1", "a2"),
    (ArgSpec(("a0",), (4,), "int8", mag=300.0), ArgSpec(("a1",), (4,), "int8", mag=300.0),
     ArgSpec(("a2",), (1,), "int8", mag=300.0)))


def test_int8_wraps_before_a_minimum_on_upmem():
    r = fuzz.check(INT8_WRAP_BEFORE_MIN, "upmem", "prefer_pim", seed=20031, tuner=fuzz.flat_tuner(),
                   timeout_s=None)
    assert r.outcome == "equal" and r.on_pim == 1, r


def test_nan_where_jax_has_inf_is_flagged():
    """check_values on its own: a NaN result where jax's is inf counts; an
    inf jax gives too does not."""
    x = np.ones(3, np.float32)
    ev = check_values([x], np.array([np.nan, np.inf, 1.0], np.float16), np.dtype(np.float16),
                      reference=lambda: np.array([np.inf, np.inf, 1.0], np.float32))
    assert ev == [next(e for e in ev if e.startswith("result: 1 inf / NaN value(s)"))], ev


def test_exp_of_overflowed_dot_is_a_stated_precision_loss():
    r = fuzz.check(EXP_OF_OVERFLOWED_DOT, "attacc", "prefer_pim", seed=10074, tuner=fuzz.flat_tuner(),
                   timeout_s=None)
    assert r.outcome == "precision" and "inf / NaN value(s) from finite operands" in r.detail, r


def test_fp16_edge_attention_gives_only_allowed_outcomes():
    """Whichever way this machine's XLA rounds the fused program: on one CPU jax.jit turns two
    more scores into inf (NaN through the softmax) than jax op by op does, on another it does not.  What pimjax
    guarantees is jax op by op; the fuzzer's EAGER detail must say exactly when jax.jit differed."""
    import jax

    from pimjax.hw.presets import get_backend
    from pimjax.precision import tolerance
    res = fuzz.check_all(FP16_EDGE_ATTENTION, seed=10036, backends=("hbm-pim", "upmem"),
                         tuner=fuzz.flat_tuner(), timeout_s=None)
    assert all(r.outcome in fuzz.OK_OUTCOMES for r in res.values()), res
    upmem = get_backend("upmem", **fuzz.BACKEND_OPTIONS["upmem"])
    rtol = tolerance(upmem, [a.dtype for a in FP16_EDGE_ATTENTION.args if a.kind == "normal"])
    jitted, scale = fuzz.reference_of(FP16_EDGE_ATTENTION, 10036)
    with jax.disable_jit():
        eager = FP16_EDGE_ATTENTION.fn(*jax.tree_util.tree_map(
            jax.numpy.asarray, FP16_EDGE_ATTENTION.make_args(10036)))
    jit_differs = bool(fuzz.compare(jitted, eager, rtol, scale))
    # upmem places none of this fp16 attention on its DPUs: the host evaluates it op by op, equal to jax op by op
    r = res[("upmem", "prefer_pim")]
    assert r.outcome == "equal", r
    assert r.detail.startswith(fuzz.EAGER) == jit_differs, (r, jit_differs)
