"""The native engine (`sim.native`, a compiled event loop) equals the slow
reference event model to the cycle on random programs of every DRAM-command
backend, one stream at a time and many streams (under several timing rows,
on several threads) at once; and the native and scan engines give the same
reports on lowered programs."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pimjax.hw import get_backend, stack_variants
from pimjax.sim.native import RECORD_FIELDS, time_streams, timing_table
from pimjax.sim.reference import simulate
from pimjax.sim.scan import timing_vector

from .test_cycles_reference import OPS, backend_of, record_lists


def _timing(backend_name, short_refresh):
    be = backend_of(backend_name)
    if short_refresh:   # frequent refreshes, so that small programs exercise them
        be = be.replace(timing=be.timing.replace(tREFI=97.0, tRFC=31.0, tREF0=0.0))
    return be, {k: float(v) for k, v in timing_vector(be.timing).items()}


def _flat(streams):
    rec = np.array([[r[f] for s in streams for r in s] for f in RECORD_FIELDS], np.int32).reshape(
        len(RECORD_FIELDS), -1)
    stops = np.cumsum([len(s) for s in streams])
    return rec, stops - [len(s) for s in streams], stops


def _assert_equal(out, k, ref):
    assert out["end"][k] == ref["end"]
    np.testing.assert_array_equal(out["buckets"][k], ref["buckets"])
    np.testing.assert_array_equal(out["counts"][k], ref["counts"])


@pytest.mark.parametrize("backend_name", sorted(OPS))
@settings(max_examples=220, deadline=None)
@given(data=st.data())
def test_native_equals_reference(backend_name, data):
    records = data.draw(record_lists(backend_name))
    refresh, short = data.draw(st.booleans()), data.draw(st.booleans())
    be, t = _timing(backend_name, short)
    ref = simulate(records, t, be.group.banks, be.group.banks_per_bank_group, refresh)
    rec, starts, stops = _flat([records])
    out = time_streams(rec, starts, stops, np.zeros(1, np.int64), timing_table(t), be.group.banks,
                       be.group.banks_per_bank_group, refresh)
    _assert_equal(out, 0, ref)


@pytest.mark.parametrize("backend_name", sorted(OPS))
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_many_streams_and_timings_equal_reference(backend_name, data):
    """Streams side by side, each under its own timing row, dealt to
    threads: each equals the reference model run alone."""
    streams = data.draw(st.lists(record_lists(backend_name), min_size=1, max_size=12))
    be, t = _timing(backend_name, True)
    rows = [dict(t, tRP=t["tRP"] + k, tFAW=t["tFAW"] + 2 * k, tCCD_L=t["tCCD_L"] + 0.5 * k) for k in range(3)]
    table = np.concatenate([timing_table(r) for r in rows])
    tix = np.array([data.draw(st.integers(0, 2)) for _ in streams], np.int64)
    rec, starts, stops = _flat(streams)
    for threads in (1, 3):
        out = time_streams(rec, starts, stops, tix, table, be.group.banks, be.group.banks_per_bank_group,
                           True, threads=threads)
        for k, records in enumerate(streams):
            ref = simulate(records, rows[tix[k]], be.group.banks, be.group.banks_per_bank_group, True)
            _assert_equal(out, k, ref)


def test_bad_arguments_raise():
    rec = np.zeros((len(RECORD_FIELDS), 4), np.int32)
    one = np.zeros(1, np.int64)
    table = timing_table({k: float(v) for k, v in timing_vector(get_backend("hbm-pim").timing).items()})
    with pytest.raises(ValueError, match="rec"):
        time_streams(rec[:3], one, one + 4, one, table, 16, 4, True)
    with pytest.raises(ValueError, match="timing rows"):
        time_streams(rec, one, one + 4, one + 1, table, 16, 4, True)
    for lo, hi in ((0, 5), (3, 2), (-1, 2)):                  # past the records, reversed, negative
        with pytest.raises(ValueError, match="streams must lie"):
            time_streams(rec, one + lo, one + hi, one, table, 16, 4, True)


# 35-60 s each: the three presets run with the slow cases (CI runs them), the hiding variant always
@pytest.mark.parametrize("backend_name", [pytest.param(b, marks=pytest.mark.slow) for b in ("hbm-pim", "attacc", "newton")]
                         + ["newton-gwh"])
def test_engines_agree_on_lowered_programs(backend_name):
    """Every report field of the two engines on lowered programs of three
    kernels (resident matrices), one program at a
    time with and without the resident placement, in a batch, and swept."""
    from pimjax.kernels import kernel_op
    from pimjax.lower import lower
    from pimjax.partition import drafts
    from pimjax.sim.cycles import cycles, cycles_batch, sweep

    be = get_backend(backend_name, channels=4) if backend_name not in ("attacc", "newton-gwh") else \
        get_backend("newton", channels=4, gwrite_hiding=True) if backend_name == "newton-gwh" else \
        get_backend(backend_name)
    rng = np.random.default_rng(3)
    progs = []
    for kernel, shape in (("gemv", [256, 512]), ("mmtv", [1, 4, 64, 32]), ("va", [1 << 12]), ("red", [16, 1024])):
        op, shapes = kernel_op(kernel, shape)
        table = drafts(op, be, shapes=shapes)          # Newton runs MACs only: no va / red drafts
        progs += [lower(op, table[int(i)], be, shapes, resident=(0,) if kernel == "gemv" else ())
                  for i in rng.choice(len(table), min(4, len(table)), replace=False)]
    assert len(progs) >= 8
    fields = ("total_cycles", "rearrangement", "compute", "readback", "merge", "resident_cycles",
              "kernel_cycles", "energy_pj", "bound")

    def same(a, b):
        for f in fields:
            np.testing.assert_array_equal(np.asarray(getattr(a, f)), np.asarray(getattr(b, f)), err_msg=f)
        for k in a.counts:
            np.testing.assert_array_equal(np.asarray(a.counts[k]), np.asarray(b.counts[k]), err_msg=k)

    # a program with a stream per group (the pooling of S > 1 streams): its own
    # stream next to a shorter copy of it
    import dataclasses

    from pimjax.lower.program import RECORD_FIELDS, Records
    c = progs[0].commands
    two = Records(**{f: np.concatenate([np.asarray(getattr(c, f)),
                                        np.pad(np.asarray(getattr(c, f))[:, :c.op.shape[1] // 2],
                                               ((0, 0), (0, c.op.shape[1] - c.op.shape[1] // 2)))])
                     for f in RECORD_FIELDS})
    progs.append(dataclasses.replace(progs[0], commands=two))
    same(cycles_batch(progs, be, engine="native"), cycles_batch(progs, be, engine="scan"))
    for p in progs[::3]:
        for inc in (False, True):
            same(cycles(p, be, include_resident=inc, engine="native"), cycles(p, be, include_resident=inc, engine="scan"))
    variants = stack_variants([be.timing.replace(tRP=float(be.timing.tRP) + k, tFAW=float(be.timing.tFAW) + 2 * k)
                               for k in range(3)])
    same(sweep(progs[:4], variants, be, engine="native"), sweep(progs[:4], variants, be, engine="scan"))


def test_engine_choice_is_checked():
    """A misspelt engine is an error on every entry point; a mesh sweep runs
    on the scan engine and refuses engine='native'."""
    import jax
    from jax.sharding import Mesh

    from pimjax.backends import baseline
    from pimjax.kernels import kernel_op
    from pimjax.lower import lower
    from pimjax.sim.cycles import cycles, cycles_batch, sweep

    be = get_backend("hbm-pim", channels=4)
    op, shapes = kernel_op("va", [4096])
    prog = lower(op, baseline(op, be), be, shapes)
    variants = stack_variants([be.timing])
    for call in (lambda: cycles(prog, be, engine="nativ"), lambda: cycles_batch([prog], be, engine="Scan"),
                 lambda: sweep(prog, variants, be, engine="fast")):
        with pytest.raises(ValueError, match="unknown cycle engine"):
            call()
    mesh = Mesh(np.array(jax.devices()[:1]), ("d",))
    with pytest.raises(ValueError, match="scan engine"):
        sweep(prog, variants, be, mesh=mesh, engine="native")
    np.testing.assert_array_equal(np.asarray(sweep(prog, variants, be, mesh=mesh).total_cycles),
                                  np.asarray(sweep(prog, variants, be).total_cycles))


def test_vmap_over_cycles_uses_the_scan_engine():
    """`jax.vmap` of `cycles` over Timing variants (the hw docstring's sweep
    by vmap) traces the timing, which only the scan engine can follow: the
    default picks it, and the numbers equal the native engine's one variant
    at a time; engine='native' under vmap is a clear error."""
    import jax

    from pimjax.backends import baseline
    from pimjax.kernels import kernel_op
    from pimjax.lower import lower
    from pimjax.sim.cycles import cycles

    be = get_backend("hbm-pim", channels=4)
    op, shapes = kernel_op("gemv", [256, 512])
    prog = lower(op, baseline(op, be), be, shapes)
    values = (10.0, 14.0, 18.0)
    stacked = stack_variants([be.timing.replace(tRP=v) for v in values])
    out = jax.vmap(lambda tm: cycles(prog, be.replace(timing=tm)).total_cycles)(stacked)
    expect = [float(cycles(prog, be.replace(timing=be.timing.replace(tRP=v)), engine="native").total_cycles)
              for v in values]
    np.testing.assert_array_equal(np.asarray(out), np.asarray(expect, np.float32))
    assert expect[0] < expect[2]
    with pytest.raises(ValueError, match="concrete timings"):
        jax.vmap(lambda tm: cycles(prog, be.replace(timing=tm), engine="native").total_cycles)(stacked)


@settings(max_examples=120, deadline=None)
@given(data=st.data())
def test_pack_program_equals_numpy(data):
    """`native.pack_program` (the compiled stream table of `_pool_streams`)
    writes what its numpy form `_pack_numpy` writes, for random [S, R]
    Records with resident placement, padding (n = 0), int64 / broadcast
    fields and a scalar or per-record sync, with and without
    `include_resident` (and a [1, R] field, which numpy broadcasts and the
    compiled loop must not read past)."""
    from pimjax.lower.program import Phase, Records
    from pimjax.sim.cycles import _fields32, _pack_numpy
    from pimjax.sim.native import pack_program
    from pimjax.sim.scan import SCAN_FIELDS
    S, R = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 40))
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1)))
    ints = lambda hi, dtype=np.int32: rng.integers(0, hi, (S, R)).astype(dtype)   # noqa: E731
    fields = dict(op=ints(12), bank=ints(16, np.int64), row=ints(1 << 14), col=ints(32), n=ints(4),
                  phase=ints(len(Phase)), reg=ints(8), reg_step=ints(2), src=ints(3), aux=ints(4),
                  arg=ints(9), core=ints(8),
                  resident=ints(2) if data.draw(st.booleans()) else np.broadcast_to(np.int32(0), (S, R)),
                  sync=ints(2) if data.draw(st.booleans()) else 0)
    if data.draw(st.booleans()):          # a field of one row, broadcast over the streams
        fields["phase"] = fields["phase"][:1]
    c = Records(**fields)
    for include_resident in (False, True):
        f, split = _fields32(c, include_resident)
        assert split == (not include_resident and bool((fields["resident"] == 1).any()))
        width = (2 if split else 1) * S * R
        got = np.full((len(SCAN_FIELDS), width + 3), -7, np.int32)
        ref = got.copy()
        pack_program(got, 3, *f, include_resident, split)
        _pack_numpy(ref, 3, c, include_resident, split)
        np.testing.assert_array_equal(got, ref)
        # the steady state never keeps resident work unless asked to; the placement keeps only it
        steady_n = got[3, 3:3 + S * R].reshape(S, R)
        if not include_resident:
            assert not steady_n[fields["resident"] == 1].any()
        if split:
            np.testing.assert_array_equal(got[3, 3 + S * R:].reshape(S, R),
                                          np.where(fields["resident"] == 1, fields["n"], 0))
