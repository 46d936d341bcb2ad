"""Batched and swept cycles equal single-program cycles; the sweep shards
over JAX devices (4 CPU devices in a subprocess)."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from pimjax.hw import get_backend, stack_variants
from pimjax.lower import lower
from pimjax.partition import drafts
from pimjax.sim.cycles import cycles, cycles_batch, sweep
from pimjax.sim.engines import ENGINES
from tests.partition.helpers import gemv, vadd


def _programs():
    be = get_backend("hbm-pim", channels=8)
    out = []
    for op in (gemv(256, 512), vadd(8192)):
        table = drafts(op, be)
        rng = np.random.default_rng(0)
        out += [lower(op, table[int(i)], be) for i in rng.choice(len(table), 5, replace=False)]
    return be, out


@pytest.mark.parametrize("engine", ENGINES)
def test_batch_equals_single(engine):
    """Each engine's batch equals the other engine's single programs."""
    be, progs = _programs()
    batch = cycles_batch(progs, be, engine=engine)
    other = next(e for e in ENGINES if e != engine)
    single = [cycles(p, be, engine=other) for p in progs]
    np.testing.assert_array_equal(np.asarray(batch.total_cycles),
                                  np.asarray([s.total_cycles for s in single]))
    np.testing.assert_array_equal(np.asarray(batch.compute), np.asarray([s.compute for s in single]))


@pytest.mark.parametrize("engine", ENGINES)
def test_batch_on_threads_equals_one_thread(engine):
    """Blocks scanned on two threads (several blocks: at most 16 lanes
    each), or streams timed by the native engine on two threads, give the
    numbers of one thread and of `cycles`."""
    be, progs = _programs()
    one = cycles_batch(progs, be, batch=16, threads=1, engine=engine)
    two = cycles_batch(progs, be, batch=16, threads=2, engine=engine)
    for field in ("total_cycles", "rearrangement", "compute", "readback", "energy_pj"):
        np.testing.assert_array_equal(np.asarray(getattr(one, field)), np.asarray(getattr(two, field)))
    np.testing.assert_array_equal(np.asarray(two.total_cycles), [float(cycles(p, be).total_cycles) for p in progs])


@pytest.mark.parametrize("engine", ENGINES)
def test_batch_with_resident_operands_equals_single(engine):
    """Resident placement is scanned as extra streams of the same batched
    scan; mixed with programs without any, the figures stay those of
    `cycles` one program at a time, `resident_cycles` included."""
    be = get_backend("hbm-pim", channels=8)
    op = gemv(256, 512)
    table = drafts(op, be)
    idx = np.random.default_rng(1).choice(len(table), 4, replace=False)
    progs = [lower(op, table[int(i)], be, resident=(0,) if k % 2 == 0 else ()) for k, i in enumerate(idx)]
    for batch_of in (progs, progs[1::2]):                    # mixed; none resident
        batch = cycles_batch(batch_of, be, engine=engine)
        single = [cycles(p, be, engine=engine) for p in batch_of]
        for field in ("total_cycles", "rearrangement", "compute", "readback", "resident_cycles"):
            np.testing.assert_array_equal(np.asarray(getattr(batch, field)),
                                          np.asarray([getattr(r, field) for r in single]), err_msg=field)
    assert all(float(cycles(p, be).resident_cycles) > 0 for p in progs[::2])


@pytest.mark.parametrize("engine", ENGINES)
def test_sweep_over_timing_variants_equals_replaced_backends(engine):
    be, progs = _programs()
    values = [10.0, 14.0, 18.0, 22.0]
    variants = stack_variants([be.timing.replace(tRCDRD=v) for v in values])
    out = sweep(progs[:3], variants, be, engine=engine)
    assert np.asarray(out.total_cycles).shape == (4, 3)
    for i, v in enumerate(values):
        bv = be.replace(timing=be.timing.replace(tRCDRD=v))
        expect = [float(cycles(p, bv).total_cycles) for p in progs[:3]]
        np.testing.assert_array_equal(np.asarray(out.total_cycles)[i], np.asarray(expect, np.float32))
    # slower activation -> not faster
    assert np.all(np.diff(np.asarray(out.total_cycles), axis=0) >= 0)


def test_sweep_times_equal_streams_once_and_gives_each_program_its_figures():
    """Programs repeated in a sweep (a layer's q / k / v projections) share their streams: the engine
    times each distinct stream once, under all the variants together, and every program still gets the figures `cycles`
    gives it under each variant -- also past the 4 x 256 programs where the combine switches chunk."""
    from pimjax.sim import native_variants as native
    be, progs = _programs()
    batch = [progs[0], progs[5], progs[0], progs[1], progs[5]]      # two distinct GEMV / VA programs repeated
    values = [10.0, 14.0, 18.0]
    out = sweep(batch, stack_variants([be.timing.replace(tRCDRD=v) for v in values]), be, engine="native")
    for i, v in enumerate(values):
        bv = be.replace(timing=be.timing.replace(tRCDRD=v))
        for field in ("total_cycles", "compute", "energy_pj"):
            np.testing.assert_array_equal(np.asarray(getattr(out, field))[i],
                                          np.asarray([float(getattr(cycles(p, bv), field)) for p in batch],
                                                     np.float32), err_msg=field)
    timed = []
    real = native.time_streams_variants
    try:
        native.time_streams_variants = lambda rec, starts, stops, table, *a, **k: (
            timed.append((len(starts), table.shape[0])), real(rec, starts, stops, table, *a, **k))[1]
        many = stack_variants([be.timing.replace(tRCDRD=10.0 + 0.01 * k) for k in range(400)])
        big = sweep(batch, many, be, engine="native")                # 2 000 programs: the large-chunk combine
    finally:
        native.time_streams_variants = real
    streams = {id(p): p.commands.op.shape[0] for p in batch}
    distinct = sum(streams[id(p)] for p in (progs[0], progs[5], progs[1]))
    assert timed == [(distinct, 400)]             # each distinct stream once, under all 400 rows together
    np.testing.assert_array_equal(np.asarray(big.total_cycles)[:, 0], np.asarray(big.total_cycles)[:, 2])
    np.testing.assert_array_equal(np.asarray(big.total_cycles)[0], np.asarray(out.total_cycles)[0])


def test_sweep_shards_over_four_devices():
    code = textwrap.dedent("""
        import numpy as np, jax
        from jax.sharding import Mesh
        from pimjax.hw import get_backend, stack_variants
        from pimjax.lower import lower
        from pimjax.backends import baseline
        from pimjax.sim.cycles import sweep
        from tests.partition.helpers import gemv
        assert len(jax.devices()) == 4, jax.devices()
        be = get_backend("hbm-pim", channels=4)
        op = gemv(512, 512)
        prog = lower(op, baseline(op, be), be)
        variants = stack_variants([be.timing.replace(tRP=float(v)) for v in range(10, 18)])
        mesh = Mesh(np.array(jax.devices()), ("d",))
        sharded = sweep(prog, variants, be, mesh=mesh)     # the scan engine, sharded
        plain = sweep(prog, variants, be)                  # the native engine, this host
        assert isinstance(plain.total_cycles, np.ndarray)
        assert len(sharded.total_cycles.sharding.device_set) == 4, sharded.total_cycles.sharding
        np.testing.assert_array_equal(np.asarray(sharded.total_cycles), np.asarray(plain.total_cycles))
        print("ok", np.asarray(sharded.total_cycles))
    """)
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
    root = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    res = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.startswith("ok")


def test_stack_variants_promotes_and_refuses_ints_that_would_wrap():
    """Variants are stacked on the host: an int leaf in one variant and a float in another stack as
    floats (as jnp.stack promoted them), and an int that 32-bit JAX would wrap is refused by name."""
    be = get_backend("hbm-pim", channels=8)
    mixed = stack_variants([be.timing.replace(tRP=14), be.timing.replace(tRP=14.5)])
    np.testing.assert_array_equal(np.asarray(mixed.tRP), [14.0, 14.5])
    host = be.system.host
    with pytest.raises(OverflowError, match="do not fit"):
        stack_variants([host.replace(mem_bandwidth=448 * 10**9), host.replace(mem_bandwidth=449 * 10**9)])
    ok = stack_variants([host.replace(mem_bandwidth=448e9), host.replace(mem_bandwidth=449e9)])
    np.testing.assert_allclose(np.asarray(ok.mem_bandwidth), [448e9, 449e9], rtol=1e-6)
