"""Backends as pytrees: vmap over timing variants, jit over whole backends,
validation on construction and on replace."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pimjax.hw import Core, Group, Timing, derived_peaks, get_backend, stack_variants


def _row_miss(b):
    """Closed-bank read latency in ns: precharge, activate, CAS."""
    t = b.timing
    return (t.tRP + t.tRCDRD + t.tCL) * t.tCK


@pytest.mark.parametrize("name", ["hbm-pim", "attacc", "newton", "upmem"])
def test_vmap_over_timing_variants_matches_numpy(name):
    base = get_backend(name)
    trps = np.arange(8, dtype=np.float32) + 10.0
    variants = [base.replace(timing=base.timing.replace(tRP=float(v))) for v in trps]
    batch = jax.tree.map(lambda *xs: jnp.stack(xs), *variants)
    assert batch.timing.tRP.shape == (8,)
    got = jax.vmap(_row_miss)(batch)
    t = base.timing
    want = (trps + np.float32(t.tRCDRD) + np.float32(t.tCL)) * np.float32(t.tCK)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)


def test_stack_variants_helper_and_static_mismatch():
    b = get_backend("hbm-pim")
    batch = stack_variants([b.replace(timing=b.timing.replace(tCCD_AB=float(s))) for s in (2, 4, 8)])
    macs = jax.vmap(lambda x: derived_peaks(x)["pim_macs_per_cycle"])(batch)
    np.testing.assert_allclose(np.asarray(macs), [64 * 8 * 16 / s for s in (2, 4, 8)])
    with pytest.raises(ValueError, match="static"):
        stack_variants([b, get_backend("hbm-pim", channels=16)])
    with pytest.raises(ValueError):
        stack_variants([])


def test_counts_are_static_and_timings_are_leaves():
    b = get_backend("attacc")
    leaves = jax.tree.leaves(b)
    # every leaf is a number (timing, bandwidth, energy, host roofline); no counts among them
    assert all(isinstance(x, float) for x in leaves)
    n_timing = len(jax.tree.leaves(b.timing))
    assert n_timing == len(Timing.__dataclass_fields__)
    paths = {jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(b)[0]}
    assert ".timing.tRP" in paths and ".system.link_bandwidth" in paths
    assert not any("cores_per_group" in p or "lanes" in p or "rows" in p for p in paths)


def test_jit_of_a_function_of_the_whole_backend():
    calls = []

    @jax.jit
    def gemv_stream_ns(b):
        calls.append(1)
        # static fields are Python values inside jit: usable for shapes and loop bounds
        cols_per_core = jnp.zeros((b.core.cols,))
        per_col = b.timing.tCCD_AB * b.timing.tCK
        return (cols_per_core.shape[0] * per_col + _row_miss(b)) / b.system.link_bandwidth

    for name in ("hbm-pim", "newton"):
        b = get_backend(name)
        t = b.timing
        want = (b.core.cols * t.tCCD_AB * t.tCK + (t.tRP + t.tRCDRD + t.tCL) * t.tCK) / b.system.link_bandwidth
        assert float(gemv_stream_ns(b)) == pytest.approx(want, rel=1e-6)
    # a variant with different leaves reuses the compiled function; new statics retrace
    b = get_backend("hbm-pim")
    n = len(calls)
    gemv_stream_ns(b.replace(timing=b.timing.replace(tRP=20.0)))
    assert len(calls) == n
    gemv_stream_ns(get_backend("hbm-pim", config="ko"))
    assert len(calls) == n + 1


def test_replace_makes_validated_variants():
    b = get_backend("hbm-pim")
    v = b.replace(timing=b.timing.replace(tRCDRD=16.0))
    assert v.timing.tRCDRD == 16.0 and b.timing.tRCDRD == 14.0     # original untouched (frozen)
    assert v.core == b.core and v.group == b.group
    with pytest.raises(ValueError, match="tRP"):
        b.timing.replace(tRP=-1.0)
    with pytest.raises(ValueError, match="no field"):
        b.timing.replace(tXYZ=1.0)
    # cross-level consistency is re-checked on Backend.replace
    with pytest.raises(ValueError, match="banks_per_core"):
        b.replace(core=b.core.replace(banks_per_core=1))
    # and a consistent change passes
    c = b.replace(core=b.core.replace(banks_per_core=1), group=b.group.replace(cores_per_group=16))
    assert c.n_cores == 64 * 16


def test_validation_names_the_field():
    b = get_backend("hbm-pim")
    with pytest.raises(ValueError, match="bank_groups"):
        b.group.replace(bank_groups=0)                      # zero banks
    with pytest.raises(ValueError, match="cores_per_group"):
        Group(cores_per_group=0)
    with pytest.raises(ValueError, match=r"Timing\.tCL"):
        b.timing.replace(tCL=-3.0)                           # negative timing
    with pytest.raises(ValueError, match=r"Timing\.tCK"):
        b.timing.replace(tCK=0.0)
    with pytest.raises(ValueError, match=r"Core\.cols must be a power of two"):
        b.core.replace(cols=30)                              # non-power-of-two columns
    with pytest.raises(ValueError, match=r"Core\.col_bytes"):
        b.core.replace(col_bytes=24)
    with pytest.raises(ValueError, match="link_bandwidth"):
        b.system.replace(link_bandwidth=0.0)
    with pytest.raises(ValueError, match="readback_bandwidth"):
        b.system.replace(readback_bandwidth=-1.0)
    with pytest.raises(ValueError, match="dtype"):
        b.core.replace(dtype="float8")
    with pytest.raises(ValueError, match="ops"):
        b.core.replace(ops=frozenset({"fft"}))


def test_readback_defaults_to_link_bandwidth():
    s = get_backend("attacc").system
    assert s.readback_bandwidth == s.link_bandwidth
    u = get_backend("upmem").system
    assert u.readback_bandwidth < u.link_bandwidth


def test_vmap_over_link_bandwidth_sweep():
    b = get_backend("upmem")
    bws = np.array([3.0, 6.68, 12.0], dtype=np.float32)
    batch = stack_variants([b.replace(system=b.system.replace(link_bandwidth=float(x))) for x in bws])
    mb = 64 * 2**20
    got = jax.vmap(lambda v: mb / v.system.link_bandwidth)(batch)     # ns to fill one rank's 64 MB
    np.testing.assert_allclose(np.asarray(got), mb / bws, rtol=1e-6)


def test_core_static_fields_include_new_ones():
    assert "programmable" in Core._static_fields and "instruction_bytes" in Core._static_fields
