"""The DRAM timing-constraint table (`pimjax.hw.dram_rules`) and its compiler."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pimjax.hw import dram_rules as R
from pimjax.hw import get_backend, stack_variants


def _expected(t) -> dict:
    """Each rule's latency written out from the preset's Timing parameters."""
    g = lambda f: float(getattr(t, f))        # noqa: E731
    return {
        "RAS": g("tRAS"), "RTP": g("tRTP_S"), "WR_PRE": g("tWL") + g("tBL") + g("tWR"), "RTP_AB": g("tRTP_L"),
        "RP": g("tRP"), "RP_REF": g("tRP"), "RFC": g("tRFC"), "RC": g("tRC"), "RRD_L": g("tRRD_L"), "RRD_S": g("tRRD_S"),
        "FAW": g("tFAW"), "RCD_RD": g("tRCDRD"), "RCD_WR": g("tRCDWR"), "CCD_AB": g("tCCD_AB"),
        "CCD_L": g("tCCD_L"), "CCD_L_AB": g("tCCD_L"), "CCD_S": g("tCCD_S"), "CCD_S_AB": g("tCCD_S"),
        "RTW": g("tCL") + g("tBL") + g("tRTRS") - g("tWL"), "WTR_L": g("tWL") + g("tBL") + g("tWTR_L"),
        "WTR_S": g("tWL") + g("tBL") + g("tWTR_S"), "COL_ORDER": 0.0, "BUF_ORDER": 0.0,
        "BUF_ACT": R.NEVER if g("gwrite_hiding") else 0.0, "SIDE_GAP": max(g("tBL"), g("tCCD_S")),
        "SIDE_BG": g("tCCD_L"), "RD_END": g("tCL") + g("tBL"), "WR_END": g("tWL") + g("tBL"),
        "AB_END": g("tCCD_AB"), "ACTAB_END": g("tRCDRD"), "PREA_END": g("tRP"),
        "SIDE_END": max(g("tBL"), g("tCCD_S")), "REFI": g("tREFI"), "REF0": g("tREF0"), "REFW": g("tREFW")}


@pytest.mark.parametrize("name", ["hbm-pim", "attacc", "newton", "newton-gwh"])
def test_compiled_latencies_follow_the_parameters(name):
    t = (get_backend("newton", gwrite_hiding=True) if name == "newton-gwh" else get_backend(name)).timing
    lat = R.compile_rules(t)
    assert lat.shape == (R.N_LAT,) and lat.dtype == np.float64
    exp = _expected(t)
    assert set(exp) == set(R.NAMES)
    for k, n in enumerate(R.NAMES):
        assert lat[k] == exp[n], n
        assert getattr(R, n) == k               # the index constants follow the table


def test_float32_and_jax_evaluate_left_to_right():
    t = get_backend("attacc").timing.replace(tCL=13.3, tBL=2.7, tRTRS=1.1, tWL=9.9, tWR=7.7)
    f32 = {f: jnp.asarray(getattr(t, f), jnp.float32) for f in t._dynamic_fields}
    lat = R.compile_rules(f32)
    assert lat.dtype == jnp.float32
    assert lat[R.RTW] == f32["tCL"] + f32["tBL"] + f32["tRTRS"] - f32["tWL"]
    assert lat[R.WR_PRE] == f32["tWL"] + f32["tBL"] + f32["tWR"]
    lat64 = R.compile_rules({k: np.asarray(v, np.float64) for k, v in f32.items()})
    assert lat64.dtype == np.float64
    np.testing.assert_allclose(lat64, np.asarray(lat, np.float64), rtol=1e-6)


def test_batches_broadcast_and_vmap():
    base = get_backend("hbm-pim").timing
    batch = stack_variants([base.replace(tRP=float(v), tFAW=float(2 * v)) for v in range(10, 14)])
    lat = R.compile_rules(batch)
    assert lat.shape == (4, R.N_LAT)
    np.testing.assert_array_equal(lat[:, R.RP], [10, 11, 12, 13])
    np.testing.assert_array_equal(lat[:, R.FAW], [20, 22, 24, 26])
    np.testing.assert_array_equal(lat[:, R.RCD_RD], float(base.tRCDRD))
    v = jax.vmap(R.compile_rules)(jax.tree.map(jnp.asarray, batch))
    np.testing.assert_array_equal(np.asarray(v), np.asarray(lat, np.float32))
    jitted = jax.jit(lambda t: R.compile_rules(t)[..., R.WR_PRE])(jax.tree.map(jnp.asarray, batch))
    np.testing.assert_array_equal(jitted, lat[:, R.WR_PRE])
    # a mix of scalar and [T] leaves (a dict of some swept fields)
    mixed = {f: getattr(base, f) for f in R.PARAMS}
    mixed["tWR"] = np.array([1.0, 2.0, 3.0])
    assert R.compile_rules(mixed).shape == (3, R.N_LAT)


def test_table_is_well_formed():
    for r in R.RULES:
        assert r.level in R.LEVELS
        assert set(r.prev) <= set(r.family) and set(r.next) <= set(R.KINDS)
    with pytest.raises(ValueError, match="unsupported"):
        R._parse("tRP / 2")
    assert "tFAW" in R.rules_table()


def test_unless_switches_a_rule_off_per_variant():
    """BUF_ACT (a G_ACT after the GWRITEs) is off where Timing.gwrite_hiding
    is 1: "long ago" (never binds), in numpy and jnp, per stacked variant;
    no other rule moves."""
    base = get_backend("newton").timing
    batch = stack_variants([base, base.replace(gwrite_hiding=1.0)])
    for lat in (R.compile_rules(batch), np.asarray(jax.jit(R.compile_rules)(jax.tree.map(jnp.asarray, batch)))):
        assert lat[0, R.BUF_ACT] == 0.0 and lat[1, R.BUF_ACT] == R.NEVER
        others = [k for k in range(R.N_LAT) if k != R.BUF_ACT]
        np.testing.assert_array_equal(lat[0, others], lat[1, others])
    assert R.compile_chains(batch)[1, R.BUF_ACT, 0] == R.NEVER
    assert "off where gwrite_hiding" in R.rules_table()
    with pytest.raises(ValueError, match="0 or 1"):
        base.replace(gwrite_hiding=0.5)


def test_chains_hold_the_terms_in_order():
    t = get_backend("attacc").timing.replace(tCL=13.3, tBL=2.7, tRTRS=1.1, tWL=9.9)
    c = R.compile_chains(t)
    assert c.shape == (R.N_LAT, R.CHAIN)
    np.testing.assert_array_equal(c[R.RTW], [13.3, 2.7, 1.1, -9.9])
    np.testing.assert_array_equal(c[R.WTR_S], [9.9, 2.7, float(t.tWTR_S), 0.0])
    np.testing.assert_array_equal(c[R.SIDE_GAP], [max(2.7, float(t.tCCD_S)), 0, 0, 0])
    # summed left to right, a chain is the compiled latency
    total = c[:, 0]
    for j in range(1, R.CHAIN):
        total = total + c[:, j]
    np.testing.assert_array_equal(total, R.compile_rules(t))
    # float32, batched: time + terms one by one rounds as the rule written out
    f32 = {f: jnp.asarray([getattr(t, f)] * 2, jnp.float32) for f in t._dynamic_fields}
    cj = R.compile_chains(f32, jnp.float32)
    assert cj.shape == (2, R.N_LAT, R.CHAIN) and cj.dtype == jnp.float32
    x = jnp.float32(16777217.0 / 3)
    by_terms = x
    for j in range(R.CHAIN):
        by_terms = by_terms + cj[0, R.RTW, j]
    assert by_terms == x + f32["tCL"][0] + f32["tBL"][0] + f32["tRTRS"][0] - f32["tWL"][0]
