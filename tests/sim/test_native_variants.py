"""The native engine's many-variant loop (`native.time_streams_variants`:
each stream advanced under a block of timing variants at once) gives, bit
for bit, what the one-variant loop (`native.time_streams`, `_stream`) gives
for every (stream, variant) pair: on random record streams of every DRAM
backend under random timing tables (fractional latencies, tREFI and the
refresh timings varied per variant so that each variant refreshes at its
own records), with refresh on and off, and on lowered programs."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pimjax.hw import get_backend, stack_variants
from pimjax.hw.dram_rules import PARAMS, RCD_RD, RD_END
from pimjax.sim.cycles import _distinct_streams, _pool_streams, _timing_key, check_timing_batch
from pimjax.sim.native import RECORD_FIELDS, time_streams, timing_table
from pimjax.sim.native_variants import latency_rows, time_streams_sweep, time_streams_variants
from pimjax.sim.scan import timing_vector
from pimjax.sim.timing import ALLBANK, BARRIER, CLASS_TABLE, COLUMN, WRITE
from tests.helpers import slow_params

from .test_cycles_reference import OPS, backend_of, record_lists


def _flat(streams):
    """[8, M] records of the streams side by side, their starts and stops."""
    lens = [len(s) for s in streams]
    rec = np.array([[r[f] for s in streams for r in s] for f in RECORD_FIELDS], np.int32).reshape(
        len(RECORD_FIELDS), -1)
    stops = np.cumsum(lens).astype(np.int64)
    return rec, stops - np.asarray(lens, np.int64), stops


def _per_pair(rec, starts, stops, table, banks, per_bg, refresh):
    """The one-variant loop on every (variant, stream) pair, variant-major:
    leaves [V, U, ...]."""
    V, U = table.shape[0], len(starts)
    out = time_streams(rec, np.tile(starts, V), np.tile(stops, V), np.repeat(np.arange(V), U), table, banks, per_bg,
                       refresh)
    return {k: v.reshape((V, U) + v.shape[1:]) for k, v in out.items()}


def _assert_same(new, old):
    for k in ("end", "buckets", "counts"):
        assert new[k].shape == old[k].shape, k
        np.testing.assert_array_equal(new[k], old[k], err_msg=k)


# fields that are latencies (gwrite_hiding is a switch; tREF0 / tREFW 0 mean "none" on some presets);
# tREFI / tRFC are set apart below: `Timing` holds tREFI > tRFC > 0, which a sweep therefore keeps
_SCALED = [f for f in PARAMS if f not in ("gwrite_hiding", "tREFI", "tRFC")]


def _random_table(data, be, V):
    """[V, N_LAT, CHAIN] chains of V random timings around `be`'s: every
    latency scaled per variant by a random factor (fractional results
    included), tREFI short so that small streams refresh, at times that
    differ between the variants; or (same_refi) all with one tREFI and few
    latencies changed, so that many variants' refreshes fall due at the same
    record."""
    same_refi = data.draw(st.booleans())
    base = {k: float(v) for k, v in timing_vector(be.timing).items()}
    base.update(tREFI=97.0, tRFC=31.0, tREF0=0.0)      # the first refresh at tREFI: short streams refresh
    scale = st.sampled_from([0.0, 0.5, 0.75, 1.0, 1.0, 1.0, 1.25, 1.37, 2.0, 3.5])
    rows = []
    for _ in range(V):
        row = dict(base)
        for f in data.draw(st.lists(st.sampled_from(_SCALED), max_size=1 if same_refi else 8, unique=True)):
            row[f] = base[f] * data.draw(scale)
        if not same_refi:
            row["tREFI"] = max(row["tREFI"], 1.0) * data.draw(st.sampled_from([1.0, 0.5, 1.3, 2.71]))   # > 0
        rows.append(row)
    return np.concatenate([timing_table(r) for r in rows])


# attacc's 40 examples take 25-45 s on 2 cores: with the slow cases (CI runs them)
@pytest.mark.parametrize("backend_name", slow_params(sorted(OPS), {"attacc"}))
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_many_variants_equal_one_variant_loop(backend_name, data):
    """Random streams (some empty, records with n = 0 among them) under
    1..20 random timing rows, in blocks of 1..8 variants (the last block
    padded), on 1 or 2 threads: every (variant, stream) result equals the
    one-variant loop's."""
    be = backend_of(backend_name)
    streams = data.draw(st.lists(st.one_of(st.just([]), record_lists(backend_name)), min_size=1, max_size=5))
    V = data.draw(st.integers(1, 20))
    table = _random_table(data, be, V)
    refresh = data.draw(st.booleans())
    rec, starts, stops = _flat(streams)
    if rec.shape[1] == 0:
        rec = np.zeros((len(RECORD_FIELDS), 1), np.int32)
    banks, per_bg = be.group.banks, be.group.banks_per_bank_group
    old = _per_pair(rec, starts, stops, table, banks, per_bg, refresh)
    new = time_streams_variants(rec, starts, stops, table, banks, per_bg, refresh, block=data.draw(st.integers(1, 8)),
                                threads=data.draw(st.sampled_from([1, 2, 3])), min_parallel=0)   # threads split any work
    _assert_same(new, old)


@pytest.mark.parametrize("backend_name", sorted(OPS))
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_streams_with_renamed_rows_time_alike(backend_name, data):
    """A stream whose rows >= 0 are renamed one to one, with dead records
    (n = 0) put in among its records, times bit for bit as the stream itself
    under random timings, with refresh on and off: why a sweep times streams
    of one `_timing_key` once.  A renaming that merges two rows gets another
    key."""
    be = backend_of(backend_name)
    stream = data.draw(record_lists(backend_name))
    rows = sorted({r["row"] for r in stream if r["row"] >= 0})
    new_names = data.draw(st.lists(st.integers(0, 1 << 20), min_size=len(rows), max_size=len(rows), unique=True))
    rename = dict(zip(rows, new_names))
    other = [dict(r, row=rename.get(r["row"], r["row"])) for r in stream]
    for _ in range(data.draw(st.integers(0, 5))):         # dead records: the loop skips them
        dead = dict(data.draw(st.sampled_from(stream)), n=0, row=data.draw(st.integers(-1, 9)))
        other.insert(data.draw(st.integers(0, len(other))), dead)
    rec, starts, stops = _flat([stream, other])
    assert _timing_key(rec[:, starts[0]:stops[0]]) == _timing_key(rec[:, starts[1]:stops[1]])
    first, inv = _distinct_streams(rec, starts, stops)
    assert first.tolist() == [0] and inv.tolist() == [0, 0]
    table = _random_table(data, be, data.draw(st.integers(1, 4)))
    banks, per_bg = be.group.banks, be.group.banks_per_bank_group
    for refresh in (False, True):
        out = _per_pair(rec, starts, stops, table, banks, per_bg, refresh)
        for k in ("end", "buckets", "counts"):
            np.testing.assert_array_equal(out[k][:, 0], out[k][:, 1], err_msg=k)
    live_rows = [r["row"] for r in stream if r["row"] >= 0 and r["n"] > 0]
    if len(set(live_rows)) >= 2:                           # merge two live rows: not the same stream
        a, b = sorted(set(live_rows))[:2]
        merged = [dict(r, row=a if r["row"] == b else r["row"]) for r in stream]
        rec2, s2, e2 = _flat([stream, merged])
        assert _timing_key(rec2[:, s2[0]:e2[0]]) != _timing_key(rec2[:, s2[1]:e2[1]])


@pytest.mark.parametrize("backend_name", sorted(OPS))
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_rows_a_stream_does_not_read_change_nothing(backend_name, data):
    """`latency_rows` is a superset of what the loop reads: every other row
    of the timing table (each chain term) set to random values, the stream's
    results are the same bit for bit, with refresh on (short tREFI, so that
    it refreshes) and off."""
    be = backend_of(backend_name)
    streams = data.draw(st.lists(record_lists(backend_name), min_size=1, max_size=3))
    rec, starts, stops = _flat(streams)
    base = _random_table(data, be, 1)
    for refresh in (False, True):
        rows = latency_rows(rec, starts, stops, refresh)
        other = np.repeat(base, len(starts), axis=0)
        seed = data.draw(st.integers(0, 2 ** 31))
        for u in range(len(starts)):        # variant u: the rows stream u does not read, at random
            free = ~rows[u]
            other[u, free] = np.random.default_rng(seed + u).uniform(-5.0, 60.0, other[u, free].shape).round(2)
        table = np.concatenate([base, other])
        out = _per_pair(rec, starts, stops, table, be.group.banks, be.group.banks_per_bank_group, refresh)
        for u in range(len(starts)):
            for k in ("end", "buckets", "counts"):
                np.testing.assert_array_equal(out[k][1 + u, u], out[k][0, u], err_msg=f"{k}, refresh={refresh}")


@pytest.mark.parametrize("backend_name", sorted(OPS))
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_sweep_equals_one_variant_loop(backend_name, data):
    """`time_streams_sweep` (each stream timed once per distinct timing of
    the rows it reads) equals the one-variant loop on every (variant,
    stream) pair: random streams under random timings that differ in few
    fields (many variants then look alike to a stream)."""
    be = backend_of(backend_name)
    streams = data.draw(st.lists(st.one_of(st.just([]), record_lists(backend_name)), min_size=1, max_size=5))
    table = _random_table(data, be, data.draw(st.integers(1, 12)))
    refresh = data.draw(st.booleans())
    rec, starts, stops = _flat(streams)
    if rec.shape[1] == 0:
        rec = np.zeros((len(RECORD_FIELDS), 1), np.int32)
    banks, per_bg = be.group.banks, be.group.banks_per_bank_group
    _assert_same(time_streams_sweep(rec, starts, stops, table, banks, per_bg, refresh),
                 _per_pair(rec, starts, stops, table, banks, per_bg, refresh))


def test_a_read_timing_sweep_times_a_stream_without_reads_once(monkeypatch):
    """A sweep of tRCDRD: the streams of a lowered AttAcc GEMV that read
    run under every variant; those that only write (their records read no
    RCD_RD) run once and every variant gets that run."""
    from pimjax.sim import native_variants as native
    be = backend_of("attacc")
    rec, starts, stops, _ = _pool_streams(_lowered(be))
    t = be.timing
    V = 37
    table = timing_table(timing_vector(check_timing_batch(stack_variants(
        [t.replace(tRCDRD=float(t.tRCDRD) * (1.0 + i / V)) for i in range(V)]))))
    reads = latency_rows(rec, starts, stops, True)[:, RCD_RD]
    assert reads.any() and (~reads).any()          # both kinds of stream in the programs
    calls = []
    real = native.time_streams_variants
    monkeypatch.setattr(native, "time_streams_variants",
                        lambda r, s, e, tab, *a, **k: (calls.append((len(s), tab.shape[0])), real(r, s, e, tab, *a, **k))[1])
    out = time_streams_sweep(rec, starts, stops, table, be.group.banks, be.group.banks_per_bank_group, True)
    assert {v for _, v in calls} == {1, V}          # a run per stream group: all V variants, or one
    assert sum(n for n, v in calls if v == 1) == int((~reads).sum())
    assert sum(n for n, v in calls if v == V) == int(reads.sum())
    monkeypatch.undo()
    _assert_same(out, _per_pair(rec, starts, stops, table, be.group.banks, be.group.banks_per_bank_group, True))


def test_an_infinite_latency_and_an_int_refresh_flag_give_the_one_variant_loop():
    """A table with an infinite read-end latency: the many-variant loop and
    the sweep give what `_stream` gives (NaN in the bucket of the barrier that
    follows, inf end), and refresh given as 0 / 1 as as False / True."""
    be = backend_of("attacc")
    rd = next(int(o) for o in OPS["attacc"]
              if CLASS_TABLE[o, COLUMN] and not CLASS_TABLE[o, WRITE] and not CLASS_TABLE[o, ALLBANK])
    bar = next(int(o) for o in range(CLASS_TABLE.shape[0]) if CLASS_TABLE[o, BARRIER])
    recs = [dict(op=rd, bank=0, row=0, n=2, phase=2, resident=0, pre=0, sync=0),
            dict(op=bar, bank=0, row=0, n=1, phase=3, resident=0, pre=0, sync=0)]
    rec, starts, stops = _flat([recs])
    t = {k: float(v) for k, v in timing_vector(be.timing).items()}
    table = np.concatenate([timing_table(t), timing_table(t)])
    table[1, RD_END, 0] = np.inf
    banks, per_bg = be.group.banks, be.group.banks_per_bank_group
    old = _per_pair(rec, starts, stops, table, banks, per_bg, False)
    assert np.isnan(old["buckets"][1, 0]).any() and np.isinf(old["end"][1, 0])
    _assert_same(time_streams_variants(rec, starts, stops, table, banks, per_bg, False), old)
    for flag in (0, 1):
        _assert_same(time_streams_sweep(rec, starts, stops, table, banks, per_bg, flag),
                     _per_pair(rec, starts, stops, table, banks, per_bg, bool(flag)))


def test_identical_variants_refresh_together():
    """V copies of one timing: every variant's refresh falls due at the same
    record; each equals the one-variant loop."""
    be = backend_of("attacc")
    rec, starts, stops, _ = _pool_streams(_lowered(be)[:4])
    t = {k: float(v) for k, v in timing_vector(be.timing).items()}
    table = np.concatenate([timing_table(dict(t, tREFI=301.0))] * 11)
    banks, per_bg = be.group.banks, be.group.banks_per_bank_group
    old = _per_pair(rec, starts, stops, table, banks, per_bg, True)
    assert old["counts"][..., 4].sum() > 0               # it refreshes
    _assert_same(time_streams_variants(rec, starts, stops, table, banks, per_bg, True), old)


def _lowered(be):
    """Lowered GEMV / MMTV / VA / RED drafts of `be` (resident matrices)."""
    from pimjax.kernels import kernel_op
    from pimjax.lower import lower
    from pimjax.partition import drafts
    rng = np.random.default_rng(7)
    progs = []
    for kernel, shape in (("gemv", [512, 1024]), ("mmtv", [1, 4, 64, 32]), ("va", [1 << 12]), ("red", [16, 1024])):
        op, shapes = kernel_op(kernel, shape)
        table = drafts(op, be, shapes=shapes)          # Newton runs MACs only: no va / red drafts
        progs += [lower(op, table[int(i)], be, shapes, resident=(0,) if kernel == "gemv" else ())
                  for i in rng.choice(len(table), min(3, len(table)), replace=False)]
    return progs


def _variant_table(be, V):
    """V timings of `be` as a sweep varies them: tRCDRD, tRP and tFAW scaled
    (fractional), tREFI from 0.3x to 1.3x (each variant's refreshes fall
    at their own records)."""
    t = be.timing
    rows = [t.replace(tRCDRD=float(t.tRCDRD) * (1.0 + i / V), tRP=float(t.tRP) * (1.0 + 0.37 * (i % 3)),
                      tFAW=float(t.tFAW) + 0.5 * (i % 5), tREFI=float(t.tREFI) * (0.3 + i / V)) for i in range(V)]
    return timing_table(timing_vector(check_timing_batch(stack_variants(rows))))


@pytest.mark.parametrize("backend_name", ["hbm-pim", "attacc", "newton", "newton-gwh"])
def test_lowered_programs_equal_one_variant_loop(backend_name):
    """The distinct streams of lowered programs (steady state and resident
    placement) under 37 timing variants, refresh on and off, V = 1 too."""
    be = get_backend(backend_name, channels=4) if backend_name in ("hbm-pim", "newton") else backend_of(backend_name)
    rec, starts, stops, _ = _pool_streams(_lowered(be))
    first, _ = _distinct_streams(rec, starts, stops)
    s, e = starts[first], stops[first]
    table = _variant_table(be, 37)
    banks, per_bg = be.group.banks, be.group.banks_per_bank_group
    for refresh in (True, False):
        old = _per_pair(rec, s, e, table, banks, per_bg, refresh)
        _assert_same(time_streams_variants(rec, s, e, table, banks, per_bg, refresh), old)
        _assert_same(time_streams_variants(rec, s, e, table, banks, per_bg, refresh, threads=3, min_parallel=0), old)
        one = time_streams_variants(rec, s, e, table[:1], banks, per_bg, refresh)
        _assert_same(one, {k: v[:1] for k, v in old.items()})
        if refresh:
            ref = old
    # the variants refresh at their own times: their refresh counts differ, and so (rows closed by a
    # refresh reopen) do their activation counts -- the equality above compares distinct runs
    assert len(np.unique(ref["counts"][..., 4].sum(axis=1))) > 1
    assert len(np.unique(ref["counts"][..., 0].sum(axis=1))) > 1


@pytest.mark.slow
def test_llama_layer_programs_equal_one_variant_loop():
    """The AttAcc programs of a tuned LLaMA-2-7B decode layer (what
    `explore` sweeps), under 40 variants: every result equal."""
    from pimjax.api import pim_jit
    from pimjax.models.configs import get_config
    from pimjax.models.layers import layer_shapes, make_layer
    from pimjax.search.tuner import Tuner
    be = get_backend("attacc")
    cfg = get_config("llama2-7b")
    compiled = pim_jit(make_layer(cfg), backend=be, tuner=Tuner(mode="predict")).lower(
        *layer_shapes(cfg, 1, 2048)).compile()
    progs = [p.program for p in compiled.plans if p.placement == "pim"]
    assert progs
    rec, starts, stops, _ = _pool_streams(progs)
    first, _ = _distinct_streams(rec, starts, stops)
    s, e = starts[first], stops[first]
    table = _variant_table(be, 40)
    banks, per_bg = be.group.banks, be.group.banks_per_bank_group
    _assert_same(time_streams_variants(rec, s, e, table, banks, per_bg, True),
                 _per_pair(rec, s, e, table, banks, per_bg, True))


def test_bad_arguments_raise():
    rec = np.zeros((len(RECORD_FIELDS), 4), np.int32)
    one = np.zeros(1, np.int64)
    table = timing_table({k: float(v) for k, v in timing_vector(get_backend("hbm-pim").timing).items()})
    with pytest.raises(ValueError, match="rec"):
        time_streams_variants(rec[:3], one, one + 4, table, 16, 4, True)
    with pytest.raises(ValueError, match="table"):
        time_streams_variants(rec, one, one + 4, table[:, :3], 16, 4, True)
    for lo, hi in ((0, 5), (3, 2), (-1, 2)):                  # past the records, reversed, negative
        with pytest.raises(ValueError, match="streams must lie"):
            time_streams_variants(rec, one + lo, one + hi, table, 16, 4, True)


def test_an_opcode_is_one_command_kind(monkeypatch):
    """The two loops dispatch on the command kinds in different orders, so the class table refuses an
    opcode that is both an all-bank activation and a column (it would time differently in each)."""
    from pimjax.sim import timing
    op = next(iter(timing.GENERIC_CLASSES))
    monkeypatch.setattr(timing, "GENERIC_CLASSES", {**timing.GENERIC_CLASSES, op: ("act_all", "column")})
    with pytest.raises(ValueError, match="act_all"):
        timing.class_table()
    monkeypatch.setattr(timing, "GENERIC_CLASSES", {**timing.GENERIC_CLASSES, op: ("act_all", "stagger")})
    assert timing.class_table()[int(op), timing.ACT_ALL] == 1
