"""The compiled record-assembly loops of the lowerings (`pimjax.lower.native`)
against their numpy definitions and small independent references."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pimjax.backends.hbm_pim.lower import GemvSequence, _column_runs, _kernel_slots, _runs, phys_row
from pimjax.lower.native import class_totals
from pimjax.lower.program import (
    RECORD_FIELDS,
    LazyArray,
    Op,
    Phase,
    Records,
    chunk,
    concat,
    select_slots,
    select_slots_numpy,
)
from pimjax.lower.stats import column_stats


@st.composite
def slot_lists(draw):
    """Random per-invocation slots: each a presence mask and a chunk whose
    fields are constants or arrays."""
    K = draw(st.integers(0, 40))
    S = draw(st.integers(1, 6))
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    slots = []
    for _ in range(S):
        fields = {}
        for f in RECORD_FIELDS[1:]:
            if rng.random() < 0.3:
                fields[f] = rng.integers(-5, 1 << 20, K)
            elif rng.random() < 0.5:
                fields[f] = int(rng.integers(-5, 100))
        present = rng.random(K) < draw(st.sampled_from([0.0, 0.5, 1.0]))
        slots.append((present, chunk(int(rng.integers(0, 40)), K, **fields)))
    return slots, K


@settings(max_examples=150, deadline=None)
@given(slot_lists())
def test_select_slots_equals_its_numpy_definition(case):
    slots, K = case
    got, want = select_slots(slots, K), select_slots_numpy(slots, K)
    for f in RECORD_FIELDS:
        np.testing.assert_array_equal(got[f], want[f], err_msg=f)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 300), max_size=60), st.sampled_from([1, 4, 32]))
def test_column_runs_equal_the_loop_definition(cols, per_row):
    flat = np.unique(np.asarray(cols, np.int64))          # sorted distinct columns, as lowerings pass them
    row, col, n = _runs(flat, per_row)
    ref = _column_runs(0, flat, per_row)                 # (bank, physical row, col, n, offset)
    assert [(int(phys_row(r)), int(c), int(k)) for r, c, k in zip(row, col, n)] == \
        [(r, c, k) for _, r, c, k, _ in ref]
    assert int(n.sum()) == len(flat)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**31), st.integers(0, 200))
def test_class_totals_equal_masked_sums(seed, R):
    rng = np.random.default_rng(seed)
    op = rng.integers(0, 42, R).astype(np.int32)
    phase = rng.integers(0, 3, R).astype(np.int32)
    res = rng.integers(0, 2, R).astype(np.int32)
    n = rng.integers(0, 50, R).astype(np.int32)
    columns, records, live = class_totals(op, phase, res, n, 42, 3)
    for o in range(42):
        assert records[o] == int((op == o).sum())
        for p in range(3):
            for r in (0, 1):
                assert columns[o, p, r] == int(n[(op == o) & (phase == p) & (res == r)].sum())
    assert live == int((n > 0).sum())


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 5), st.integers(1, 6), st.sampled_from([1, 2, 4, 8]),
       st.sampled_from([1, 2, 4, 8]), st.integers(0, 40), st.booleans(), st.booleans(), st.booleans(),
       st.sampled_from([(32, 0), (64, 0), (32, 4096), (64, 4096)]))
def test_gemv_sequence_equals_the_slot_definition(n_b, n_v, t_out, t_in, ki, ko, res_base, os_, reuse, order_is,
                                                  geometry):
    """The compiled emitter of the contraction's kernel records writes what
    the per-invocation slot construction (`_kernel_slots`) selects."""
    os_ = os_ or not reuse                       # without register reuse the dataflow is output-stationary
    order_is = order_is and not os_
    slots = 1 if (os_ and reuse) else t_in
    n_par = [-(-(t_in - p) // 2) for p in (0, 1)]
    seq = GemvSequence((n_b, n_v, t_out, t_in, ki, ko, n_par[0], n_par[1], res_base, slots), (os_, reuse, order_is),
                       geometry)
    got = concat(seq)
    want = concat(_kernel_slots(seq))
    assert len(seq) == len(want["op"])
    for f in RECORD_FIELDS:
        np.testing.assert_array_equal(got[f], want[f], err_msg=f)
    # an independent count: MAC column runs per invocation, frames and register writes
    K = n_b * n_v * t_out * t_in
    runs = -(-ki * ko // geometry[0])
    frames = n_b * n_v * t_out if slots == 1 else K
    assert int((got["op"] == Op.PIM_RD).sum()) == K * runs
    assert int((got["op"] == Op.PIM_WR).sum()) == frames
    writes = int(((got["op"] == Op.AB_WR) & (got["phase"] == Phase.REARRANGE)).sum())
    assert writes == (K if not reuse or (os_ and t_in > 1) else
                      n_b * n_v * (1 if os_ else t_in))


def test_lazy_array_builds_once_on_first_use():
    calls = []

    def build():
        calls.append(1)
        return np.arange(12)

    a = LazyArray(build, (3, 4), np.int64)
    assert a.shape == (3, 4) and a.ndim == 2 and a.dtype == np.int64 and len(a) == 3 and not calls
    np.testing.assert_array_equal(np.asarray(a), np.arange(12).reshape(3, 4))
    assert a[1, 2] == 6 and len(calls) == 1


def test_stats_count_columns_by_direction():
    """HBM-PIM's `column_stats` on a constructed stream: per-opcode columns and the bytes of
    each direction, counted by hand."""
    from types import SimpleNamespace
    rec = concat(chunk(Op.WR_S, 3, n=[4, 5, 6], phase=Phase.REARRANGE),
                 chunk(Op.WR, 1, n=2, phase=Phase.REARRANGE, resident=1),
                 chunk(Op.AB_WR, 2, n=8, phase=Phase.REARRANGE),
                 chunk(Op.PIM_RD, 4, n=32),
                 chunk(Op.RD_S, 2, n=[3, 0], phase=Phase.READBACK))
    records = Records(**{f: v.reshape(1, -1) for f, v in rec.items()})

    class Result:
        value = 0
    ctx = SimpleNamespace(tiles=SimpleNamespace(groups=2), backend=SimpleNamespace(core=SimpleNamespace(col_bytes=32)),
                          shapes={0: (5,)}, op=SimpleNamespace(result=Result, epilogue=None))
    s = column_stats(ctx, records, registers=(Op.AB_WR,), reads=(Op.RD_S, Op.RD), phased=True)
    assert s.commands == {"WR_S": 30, "WR": 4, "AB_WR": 32, "PIM_RD": 256, "RD_S": 6}
    assert s.records == 11
    assert s.rearrange_bytes == 15 * 32 * 2 and s.resident_bytes == 2 * 32 * 2
    assert s.register_bytes == 16 * 32 * 2 and s.readback_bytes == 3 * 32 * 2
    assert s.merge_flops == 3 * 32 * 2 // 2 and s.result_bytes == 20
