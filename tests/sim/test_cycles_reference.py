"""`cycles` (the lax.scan) equals the slow reference event model to the
cycle on random programs, for every DRAM-command backend."""
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from pimjax.hw import get_backend
from pimjax.lower.program import Op, Phase
import jax

from pimjax.sim.cycles import _timing_vector, features_of, scan_stream
from pimjax.sim.reference import simulate

OPS = {
    "hbm-pim": [Op.RD, Op.WR, Op.RD_S, Op.WR_S, Op.AB_WR, Op.PIM_RD, Op.PIM_WR, Op.NOP],
    "attacc": [Op.ACTAB, Op.PREA, Op.MACAB, Op.MACSB, Op.MACBK, Op.WRGB, Op.MVSB, Op.SFM, Op.MVGB,
               Op.RDACC, Op.BARRIER, Op.RD, Op.WR],
    "newton": [Op.G_ACT, Op.COMP, Op.GWRITE, Op.READRES, Op.RD, Op.WR],
}


def record_lists(backend_name):
    be = get_backend(backend_name)
    banks = be.group.banks
    rec = st.fixed_dictionaries({
        "op": st.sampled_from([int(o) for o in OPS[backend_name]]),
        "bank": st.integers(0, banks - 1),
        "row": st.integers(0, 3),
        "n": st.integers(0, 9),
        "phase": st.sampled_from([int(p) for p in Phase]),
        "resident": st.sampled_from([0, 0, 0, 1]),
        "pre": st.sampled_from([0, 0, 1]),
        "sync": st.sampled_from([0, 0, 0, 1]),
    })
    return st.lists(rec, min_size=1, max_size=60)


def run_both(records, backend_name, refresh, short_refresh):
    be = get_backend(backend_name)
    if short_refresh:  # make refreshes frequent so small programs exercise them
        be = be.replace(timing=be.timing.replace(tREFI=97.0, tRFC=31.0, tREF0=0.0))
    t = _timing_vector(be.timing)
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


@pytest.mark.parametrize("backend_name", sorted(OPS))
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
