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


# --------------------------------------------------------------------------
# validation gaps found by review: each case used to be accepted
# --------------------------------------------------------------------------
@pytest.mark.parametrize("field", ["tRP", "tCK", "tREF0", "dma_latency_cycles"])
@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_timing_must_be_finite(field, bad):
    # an infinite time used to pass and turn a sweep's arithmetic into NaN
    t = get_backend("hbm-pim").timing
    with pytest.raises(ValueError, match=rf"Timing\.{field} must be"):
        t.replace(**{field: bad})


@pytest.mark.parametrize("changes", [dict(tCCD_AB=0.0), dict(tCCD_S=0.0, tCCD_L=0.0), dict(tCCD_L=0.0),
                                     dict(tCCD_S=0.0)])
def test_column_spacings_must_be_positive(changes):
    # zero spacing made MACs free and derived_peaks divide by zero
    t = get_backend("attacc").timing
    with pytest.raises(ValueError, match=r"Timing\.tCCD_\w+ must be positive"):
        t.replace(**changes)


def test_other_levels_refuse_non_finite_numbers():
    b = get_backend("hbm-pim")
    with pytest.raises(ValueError, match=r"System\.link_bandwidth must be a finite"):
        b.system.replace(link_bandwidth=float("inf"))
    with pytest.raises(ValueError, match=r"HostModel\.mem_bandwidth must be a finite"):
        b.system.host.replace(mem_bandwidth=float("inf"))
    with pytest.raises(ValueError, match=r"Energy\.act must be a finite"):
        b.energy.replace(act=float("inf"))


@pytest.mark.parametrize("level,bad", [("timing", None), ("timing", "energy"), ("energy", "timing"),
                                       ("system", "group"), ("core", None), ("group", 3)])
def test_backend_levels_must_be_of_their_class(level, bad):
    b = get_backend("hbm-pim")
    value = getattr(b, bad) if isinstance(bad, str) else bad
    with pytest.raises(ValueError, match=rf"Backend\.{level} must be a"):
        b.replace(**{level: value})


def test_system_host_must_be_a_host_model():
    s = get_backend("hbm-pim").system
    with pytest.raises(ValueError, match=r"System\.host must be a HostModel"):
        s.replace(host=None)


@pytest.mark.parametrize("level,field,value,message", [
    # int(32.5) == 32 used to make 32.5 columns a valid power of two
    ("core", "cols", 32.5, r"Core\.cols must be an int, got 32\.5"),
    ("core", "col_bytes", 32.0, r"Core\.col_bytes must be an int"),
    ("core", "rows", 16384.5, r"Core\.rows must be an int"),
    ("core", "lanes", True, r"Core\.lanes must be an int"),
    ("group", "cores_per_group", 8.0, r"Group\.cores_per_group must be an int"),
    ("group", "data_buses", 0, r"Group\.data_buses must be positive"),
    ("system", "n_devices", 4.0, r"System\.n_devices must be an int")])
def test_static_counts_must_be_ints(level, field, value, message):
    b = get_backend("hbm-pim")
    with pytest.raises(ValueError, match=message):
        getattr(b, level).replace(**{field: value})
    # numpy ints are ints
    assert b.core.replace(cols=np.int64(32)).cols == 32


def test_validation_checks_concrete_arrays_and_skips_tracers():
    b = get_backend("hbm-pim")
    t = b.timing
    # stacked variants are checked elementwise ...
    with pytest.raises(ValueError, match=r"Timing\.tRP must be a finite"):
        t.replace(tRP=jnp.asarray([14.0, jnp.inf]))
    with pytest.raises(ValueError, match=r"Timing\.tCCD_AB must be positive"):
        stack_variants([t, t]).replace(tCCD_AB=jnp.asarray([4.0, 0.0]))
    batch = stack_variants([b, b.replace(timing=t.replace(tRP=20.0))])
    assert batch.timing.tRP.shape == (2,)
    # ... and under vmap a replace with traced leaves still builds (nothing concrete to check)
    doubled = jax.vmap(lambda x: x.replace(timing=x.timing.replace(tRP=x.timing.tRP * 2)).timing.tRP)(batch)
    np.testing.assert_allclose(np.asarray(doubled), [28.0, 40.0])
    jitted = jax.jit(lambda x: x.replace(tCK=x.tCK * 2).tCK)(t)
    assert float(jitted) == 2.0


def test_check_timing_batch_says_what_to_pass():
    from pimjax.hw.core import batch_size, check_timing_batch
    b = get_backend("hbm-pim")
    ok = stack_variants([b.timing, b.timing.replace(tRP=20.0)])
    assert check_timing_batch(ok) is ok and batch_size(ok) == 2
    # a stacked whole backend (sweep used to fail with "float() argument ... 'System'")
    with pytest.raises(ValueError, match="stacked Timing, got a Backend"):
        check_timing_batch(stack_variants([b, b]))
    # a list of Timings (sweep used to fail with an AttributeError)
    with pytest.raises(ValueError, match=r"stack_variants\(timings\)"):
        check_timing_batch([b.timing, b.timing])
    with pytest.raises(ValueError, match="leading"):
        check_timing_batch(b.timing)                      # one Timing, not a batch
    with pytest.raises(ValueError, match="must be a Timing"):
        check_timing_batch({"tCK": [1.0]})
    # leaves stacked to different lengths
    with pytest.raises(ValueError, match="leading"):
        batch_size(ok.replace(tRP=jnp.asarray([1.0, 2.0, 3.0])), "timings")
