"""The compiled walk (`backends/newton/walk.py`) against its readable
definition (`backends/newton/time._walk`): the same phase times, float for
float, on random plans of every knob (dataflow, buffers, latch blocks,
passes, single-bank classes, ragged chunks), on backends whose timing moves
different rules (Newton's default, one 2 KB buffer, Newton++ with GWRITE
latency hiding, a smaller channel), with the steady-state skip on and off,
and the same verdict when a walk runs past its budget."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pimjax.backends.newton import time as nt
from pimjax.backends.newton.commands import INTERLEAVE_LIMIT, readres_bursts, row_runs
from pimjax.backends.newton.walk import read_runs
from pimjax.costmodel.kernels import case_drafts, make_case
from pimjax.hw.presets import get_backend, newton_config

BACKENDS = {
    "newton": get_backend("newton"),
    "newton-1buf": get_backend("newton", buffers=1),
    "newton++": newton_config("newton++", channels=16, total_channels=32),
    "newton-8ch": get_backend("newton", channels=8, total_channels=16),
}


def _p2(x: int) -> int:
    return 1 << (max(1, x).bit_length() - 1)


@st.composite
def plans(draw):
    """(backend name, plan key, banks written, class cores, steady, budget) as `newton_phases` forms them."""
    name = draw(st.sampled_from(sorted(BACKENDS)))
    be = BACKENDS[name]
    n_b, n_v = draw(st.integers(1, 3)), draw(st.integers(1, 6))
    n_o, n_rc = draw(st.integers(1, 300)), draw(st.integers(1, 400))
    buf_cols = be.group.global_buffer_bytes // max(1, be.group.n_global_buffers) // be.core.col_bytes
    k = min(draw(st.sampled_from([1, 2, 4])), max(1, be.group.n_global_buffers))
    cc = min(n_rc, buf_cols)
    t_in = -(-n_rc // cc)
    kv = min(_p2(k), _p2(n_v))
    ki = min(_p2(max(1, k // kv)), _p2(t_in))
    lo = min(max(1, be.core.n_output_regs // kv), n_o)
    is_flow = int(draw(st.booleans()) and t_in > 1)
    key = (n_b, n_v, n_o, n_rc, cc, t_in, kv, ki, lo, is_flow, draw(st.integers(1, 3)))
    banks = min(draw(st.sampled_from([1, 3, 8, 16])), be.group.banks)
    class_cores = draw(st.sampled_from([0, 0, 0, 1, 2, 4]))
    steady = draw(st.booleans()) or n_o * n_rc > 4000       # walking every command: small streams only
    budget = draw(st.sampled_from([np.inf, np.inf, 300.0, 5000.0]))
    return name, key, banks, class_cores, steady, budget


def _walk(fn, name, key, banks_used, class_cores, steady, budget):
    be = BACKENDS[name]
    t = {f: float(getattr(be.timing, f)) for f in be.timing._dynamic_fields}
    g = be.group
    rr = int(readres_bursts(be, key[6] * key[8], class_cores > 0))
    try:
        return fn(key, banks_used, t, g.banks, g.banks_per_bank_group, be.core.cols,
                  max(1, g.banks // g.banks_per_bank_group), rr, INTERLEAVE_LIMIT, steady, nt._compiled(t),
                  class_cores=class_cores, budget=budget)
    except nt._Unsettled:
        return "unsettled"


@settings(max_examples=150, deadline=None)
@given(plans())
def test_compiled_walk_equals_the_definition(p):
    """Bit-identical phases and host columns (or both past the budget)."""
    assert _walk(nt._walk_native, *p) == _walk(nt._walk, *p)


@pytest.mark.parametrize("key,banks,class_cores", [
    # depthwise-convolution plans of MobileNet-V2's MD-DP shares: many b's whose segments end mid-row,
    # several passes (units settle a pass at a time), single-bank and broadcast
    ((120, 1, 21, 1, 1, 1, 1, 1, 4, 0, 16), 16, 1),
    ((120, 1, 30, 1, 1, 1, 1, 1, 4, 0, 8), 16, 0),
    ((144, 1, 560, 1, 1, 1, 1, 1, 4, 0, 4), 4, 1),
    ((48, 1, 87, 1, 1, 1, 1, 1, 4, 0, 2), 16, 8),
])
def test_long_unit_sequences_equal_the_definition_and_every_command(key, banks, class_cores):
    """Plans of hundreds of units: the compiled walk equals the Python one,
    and the steady-state skip equals walking every command."""
    args = ("newton++", key, banks, class_cores)
    fast = _walk(nt._walk_native, *args, True, np.inf)
    assert fast == _walk(nt._walk, *args, True, np.inf)
    assert fast == _walk(nt._walk_native, *args, False, np.inf)


@pytest.mark.parametrize("kernel,shape,backend", [
    ("gemv", (1000, 200), "newton"),
    ("mmtv", (1, 12, 256, 64), "newton++"),
    ("conv", (7, 7, 16, 8, 3), "newton"),          # single-bank drafts (halo-widened boxes)
    ("gemm", (16, 64, 32), "newton-1buf"),
])
def test_phases_of_a_draft_table_equal_the_definition(kernel, shape, backend, monkeypatch):
    """`newton_phases` of every draft of an op, walked compiled and in
    Python: the same arrays (NaN where both ran past the budget)."""
    be = BACKENDS[backend]
    case = make_case(be, kernel, shape)
    table = case_drafts(case, be)
    args = nt.draft_plans(case.op, table, case.shapes, be)
    out = {}
    for native in (True, False):
        monkeypatch.setattr(nt, "NATIVE", native)
        nt._WALKS.clear()
        out[native] = nt.newton_phases(*args, be)
    nt._WALKS.clear()
    for k in out[True]:
        np.testing.assert_array_equal(out[True][k], out[False][k], err_msg=k)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3), st.integers(1, 40), st.integers(1, 6), st.integers(1, 70), st.sampled_from([1, 2, 4]),
       st.booleans(), st.booleans(), st.sampled_from([8, 32, 64]))
def test_read_runs_equal_the_column_bitmap(n_b, n_o, t_in, n_rc_extra, ki, is_flow, blocked, cols):
    """The columns a plan's COMPs read, merged from segment intervals, are
    `row_runs` of the columns marked one by one (the Python walk's way)."""
    from pimjax.backends.newton.lower import segments as _segments
    cc = min(32, n_rc_extra)
    n_rc = (t_in - 1) * cc + n_rc_extra if n_rc_extra <= cc else t_in * cc
    t_in = -(-n_rc // cc)
    seg_base, _ = _segments(n_b, n_o, t_in, cc, n_rc, min(ki, t_in), 2, "is" if is_flow else "os", blocked, cols)
    seg_cols = np.minimum(cc, n_rc - np.arange(t_in) * cc).astype(np.int64)
    read = np.zeros(int(seg_base.max()) + cc + 1, bool)
    for i in range(t_in):
        read[(seg_base[:, :, i].ravel()[:, None] + np.arange(int(seg_cols[i]))[None, :]).ravel()] = True
    first, length = read_runs(np.ascontiguousarray(seg_base), seg_cols, cols)
    want_first, want_length = row_runs(np.nonzero(read)[0], cols)
    np.testing.assert_array_equal(first, want_first)
    np.testing.assert_array_equal(length, want_length)


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 3), st.integers(1, 60), st.integers(1, 8), st.integers(1, 70), st.sampled_from([1, 2, 4]),
       st.integers(1, 4), st.sampled_from(["os", "is"]), st.sampled_from([8, 32]))
def test_segment_ranks_in_closed_form_equal_the_sorted_visit_order(n_b, n_o, t_in, cc, ki, lo, dataflow, cols):
    """`lower._segments_of`'s data-block layout (each segment's rank in the
    dataflow's visit order, in closed form) is the rank of the visit order's
    sort key -- os (b, o-block, chunk, o in block), is (b, chunk group,
    o-block, chunk in group, o in block) -- with short last blocks / groups."""
    from pimjax.backends.newton.lower import _segments_of
    n_rc = (t_in - 1) * cc + 1
    b, o, i = np.meshgrid(np.arange(n_b), np.arange(n_o), np.arange(t_in), indexing="ij")
    key = (b, o // lo, i, o % lo) if dataflow == "os" else (b, i // ki, o // lo, i % ki, o % lo)
    order = np.lexsort(tuple(reversed([k.ravel() for k in key])))
    rank = np.empty(order.size, np.int64)
    rank[order] = np.arange(order.size)
    rank = rank.reshape(b.shape)
    base, rows = _segments_of(n_b, n_o, t_in, cc, n_rc, ki, lo, dataflow, True, cols)
    if cc <= cols:
        per_row = cols // cc
        np.testing.assert_array_equal(base, (rank // per_row) * cols + (rank % per_row) * cc)
        assert rows == -(-rank.size // per_row)
    else:
        np.testing.assert_array_equal(base, rank * (-(-cc // cols)) * cols)


def test_memoised_walks_are_per_core():
    """A backend variant that differs only in its read-back width (no READRES
    bus time, as PIMFlow's fork) gets walks of its own: timing it first leaves
    the other backend's phases as a fresh walk gives them (the memo key once
    lacked `Core.readres_bytes`, an order-dependent failure of the suite)."""
    be = BACKENDS["newton"]
    other = be.replace(core=be.core.replace(readres_bytes=0))
    assert other.core.readback_bus_bytes != be.core.readback_bus_bytes
    case = make_case(be, "gemv", (512, 1024))
    args = nt.draft_plans(case.op, case_drafts(case, be), case.shapes, be)
    nt._WALKS.clear()
    fresh = nt.newton_phases(*args, be)
    nt._WALKS.clear()
    no_bus = nt.newton_phases(*args, other)
    after = nt.newton_phases(*args, be)
    nt._WALKS.clear()
    assert not np.array_equal(no_bus["readback"], fresh["readback"], equal_nan=True)   # the variant differs
    for k in fresh:
        np.testing.assert_array_equal(after[k], fresh[k], err_msg=k)
