"""`cycles` (the lax.scan) equals the slow reference event model to the
cycle on random programs, for every DRAM-command backend."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pimjax.hw import get_backend
from pimjax.lower.program import Op, Phase
from pimjax.sim.reference import simulate
from pimjax.sim.scan import features_of, scan_stream, timing_vector
from pimjax.sim.timing import CLASS_TABLE, COLUMN

OPS = {
    "hbm-pim": [Op.RD, Op.WR, Op.RD_S, Op.WR_S, Op.AB_WR, Op.PIM_RD, Op.PIM_WR, Op.NOP],
    "attacc": [Op.ACTAB, Op.PREA, Op.MACAB, Op.MACSB, Op.MACBK, Op.WRGB, Op.MVSB, Op.SFM, Op.MVGB,
               Op.RDACC, Op.BARRIER, Op.RD, Op.WR],
    "newton": [Op.G_ACT, Op.COMP, Op.GWRITE, Op.READRES, Op.RD, Op.WR],
}
# newton with GWRITE latency hiding: rule BUF_ACT switched off (`Timing.gwrite_hiding`)
OPS["newton-gwh"] = OPS["newton"]


def backend_of(name):
    """The preset a test name stands for ("newton-gwh": newton with GWRITE latency hiding)."""
    return get_backend("newton", gwrite_hiding=True) if name == "newton-gwh" else get_backend(name)


def record_lists(backend_name):
    be = backend_of(backend_name)
    banks = be.group.banks
    rec = st.fixed_dictionaries({
        "op": st.sampled_from([int(o) for o in OPS[backend_name]]),
        "bank": st.integers(0, banks - 1),
        "row": st.integers(-1, 3),   # -1: a column that opens no row (Newton GWRITE)
        "n": st.integers(0, 9),
        "phase": st.sampled_from([int(p) for p in Phase]),
        "resident": st.sampled_from([0, 0, 0, 1]),
        "pre": st.sampled_from([0, 0, 1]),
        "sync": st.sampled_from([0, 0, 0, 1]),
    })
    # row -1 (no row) is a column-only notion (timing.py): ACTAB / G_ACT name a row
    rec = rec.map(lambda r: r if r["row"] >= 0 or CLASS_TABLE[r["op"], COLUMN] else {**r, "row": 0})
    return st.lists(rec, min_size=1, max_size=60)


def run_both(records, backend_name, refresh, short_refresh):
    be = backend_of(backend_name)
    if short_refresh:  # make refreshes frequent so small programs exercise them
        be = be.replace(timing=be.timing.replace(tREFI=97.0, tRFC=31.0, tREF0=0.0))
    t = timing_vector(be.timing)
    tf = {k: float(v) for k, v in t.items()}
    ref = simulate(records, tf, be.group.banks, be.group.banks_per_bank_group, refresh)
    pad = 64 - len(records)   # one length -> one compile; NOP records (n = 0) change nothing
    arr = {k: jnp.asarray([r[k] for r in records] + [0] * pad, jnp.int32) for k in records[0]}
    # the scan specialised to the timing features these records use
    feats = features_of(np.asarray(arr["op"]))
    out = _jitted(be.group.banks, be.group.banks_per_bank_group, refresh, feats)(arr, t)
    return ref, out


_CACHE = {}


def _jitted(banks, per_bg, refresh, feats):
    key = (banks, per_bg, refresh, feats)
    if key not in _CACHE:
        _CACHE[key] = jax.jit(lambda r, t: scan_stream(r, t, banks, per_bg, refresh, feats))
    return _CACHE[key]


# attacc's streams are the longest (~1-2 min per test on 2 cores): those run with the slow cases
# (`make test-slow`, CI); the native engine's agreement with the reference on attacc programs stays in
# `make test` (tests/sim/test_native.py)
# attacc's streams and the hiding variant's (newton's op set again, 15-20 s) run with the slow cases
BACKENDS = [pytest.param(b, marks=pytest.mark.slow) if b in ("attacc", "newton-gwh") else b for b in sorted(OPS)]

@pytest.mark.parametrize("backend_name", BACKENDS)
@settings(max_examples=220)
@given(data=st.data())
def test_scan_equals_reference(backend_name, data):
    records = data.draw(record_lists(backend_name))
    refresh = data.draw(st.booleans())
    short = data.draw(st.booleans())
    ref, out = run_both(records, backend_name, refresh, short)
    assert float(out["end"]) == ref["end"]
    np.testing.assert_array_equal(np.asarray(out["buckets"]), np.asarray(ref["buckets"], np.float32))
    np.testing.assert_array_equal(np.asarray(out["counts"]), np.asarray(ref["counts"], np.float32))


_LANES = {}


@pytest.mark.parametrize("backend_name", BACKENDS)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_streams_packed_in_lanes_equal_reference(backend_name, data):
    """`scan_lanes` runs several streams back to back in one lane, each from
    the initial state: every stream's result equals the reference model's
    for that stream alone, whatever shares its lane."""
    from pimjax.sim.scan import scan_lanes
    be = backend_of(backend_name)
    streams = data.draw(st.lists(record_lists(backend_name), min_size=1, max_size=5))
    refresh = data.draw(st.booleans())
    lane_of = [data.draw(st.integers(0, 1)) for _ in streams]
    t = timing_vector(be.timing)
    tf = {k: float(v) for k, v in t.items()}
    T = 320                                     # 5 streams of <= 60 records fit in one lane
    arr = {k: np.zeros((2, T), np.int32) for k in streams[0][0]}
    arr["sid"] = np.full((2, T), -1, np.int32)
    off = [0, 0]
    for sid, (recs, lane) in enumerate(zip(streams, lane_of)):
        for r in recs:
            for k, v in r.items():
                arr[k][lane, off[lane]] = v
            arr["sid"][lane, off[lane]] = sid
            off[lane] += 1
    feats = features_of(arr["op"])
    key = (backend_name, refresh, feats)
    if key not in _LANES:
        _LANES[key] = jax.jit(lambda r, t: scan_lanes(r, t, be.group.banks, be.group.banks_per_bank_group,
                                                      refresh, feats, n_streams=5))
    out = _LANES[key]({k: jnp.asarray(v) for k, v in arr.items()}, t)
    for sid, recs in enumerate(streams):
        ref = simulate(recs, tf, be.group.banks, be.group.banks_per_bank_group, refresh)
        assert float(out["end"][sid]) == ref["end"]
        np.testing.assert_array_equal(np.asarray(out["buckets"][sid]), np.asarray(ref["buckets"], np.float32))
        np.testing.assert_array_equal(np.asarray(out["counts"][sid]), np.asarray(ref["counts"], np.float32))
