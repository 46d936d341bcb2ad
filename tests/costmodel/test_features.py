"""Draft features: fixed length for every op kind and backend, the same
numbers from `features` (one Draft) and `features_table` (columns)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pimjax.backends import families, family_of
from pimjax.costmodel.dataset import row_of, table_from_rows
from pimjax.costmodel.features import FEATURE_NAMES, F, features, features_table
from pimjax.costmodel.kernels import case_drafts, make_case
from pimjax.hw.presets import get_backend
from pimjax.partition.generate import lane_candidates
from tests.helpers import slow_params

SHAPES = {"gemv": (96, 64), "red": (4, 300), "va": (1000,), "relu": (8, 40), "mmtv": (1, 2, 24, 32),
          "attn": (1, 2, 32, 16), "gemm": (8, 32, 16), "conv": (4, 4, 4, 8, 3)}
CASES = [(b, k) for b in families() for k in family_of(b).kernels]


# the heaviest cases (30 s and more each on 2 cores) run with the slow ones (CI runs them)
@pytest.mark.parametrize("backend,kernel", slow_params(CASES, {("newton", "gemv")}))
def test_fixed_length_and_row_equality(backend, kernel):
    be = get_backend(backend)
    case = make_case(be, kernel, SHAPES[kernel])
    table = case_drafts(case, be)
    assert len(table) > 0
    X = features_table(case.target, table, be, case.shapes)
    assert X.shape == (len(table), F) and len(FEATURE_NAMES) == F
    assert X.dtype == np.float32 and np.isfinite(X).all()
    rng = np.random.default_rng(0)
    for i in rng.choice(len(table), min(6, len(table)), replace=False):
        row = features(case.target, table[int(i)], be, case.shapes)
        assert row.shape == (F,)
        np.testing.assert_array_equal(row, X[int(i)])


def test_features_distinguish_drafts_and_backends():
    """Different tilings / knobs give different rows; the hardware block
    differs between backends for the same kernel."""
    rows = {}
    for b in ("hbm-pim", "attacc", "newton"):
        be = get_backend(b)
        case = make_case(be, "gemv", (256, 128))
        table = case_drafts(case, be)
        X = features_table(case.target, table, be, case.shapes)
        assert len(np.unique(X, axis=0)) > 0.9 * len(table)
        rows[b] = X[0]
    hw = [i for i, n in enumerate(FEATURE_NAMES) if n in ("lanes", "n_groups", "cores_per_group", "tCK")]
    assert not np.array_equal(rows["hbm-pim"][hw], rows["attacc"][hw])
    assert not np.array_equal(rows["attacc"][hw], rows["newton"][hw])


def test_features_monotone_in_allocation():
    """More groups for the same op -> fewer worst-core elements (the
    closed-form estimates move the right way)."""
    be = get_backend("hbm-pim")
    case = make_case(be, "va", (1 << 14,))
    table = case_drafts(case, be)
    X = features_table(case.target, table, be, case.shapes)
    g = X[:, FEATURE_NAMES.index("groups_used")]
    e = X[:, FEATURE_NAMES.index("core_elements")]
    c = X[:, FEATURE_NAMES.index("cores_used")]
    same_c = c == c.max()
    lo, hi = np.argmin(np.where(same_c, g, np.inf)), np.argmax(np.where(same_c, g, -np.inf))
    assert g[hi] > g[lo] and e[hi] < e[lo]


def test_record_rows_round_trip():
    be = get_backend("upmem")
    case = make_case(be, "red", (4, 256))
    table = case_drafts(case, be)
    idx = np.random.default_rng(1).choice(len(table), 20, replace=False)
    back = table_from_rows([row_of(table, int(i)) for i in idx], lane_candidates(case.op, be))
    assert [back[j] for j in range(len(idx))] == [table[int(i)] for i in idx]
    np.testing.assert_array_equal(features_table(case.op, back, be, case.shapes),
                                  features_table(case.op, table.take(idx), be, case.shapes))


def test_empty_table():
    be = get_backend("hbm-pim")
    case = make_case(be, "va", (64,))
    table = case_drafts(case, be).take(np.zeros(0, np.int64))
    assert features_table(case.op, table, be).shape == (0, F)


def _brute_runs(box, shape):
    """Maximal host-contiguous runs of a tile box[k] x ... anchored at the
    origin of a row-major tensor `shape`: (runs, elements in the first)."""
    idx = np.stack(np.meshgrid(*[np.arange(b) for b in box], indexing="ij"), -1).reshape(-1, len(box))
    lin = np.sort(np.ravel_multi_index(idx.T, shape))
    breaks = np.flatnonzero(np.diff(lin) != 1)
    first = (breaks[0] + 1) if breaks.size else lin.size
    return breaks.size + 1, first


@given(shape=st.lists(st.integers(1, 9), min_size=1, max_size=3).map(tuple), data=st.data())
@settings(max_examples=60, deadline=None)
def test_runs_match_a_brute_force_count(shape, data):
    """`_runs` (closed form over the index map) counts the host-contiguous
    pieces of a core's tile like enumerating its elements does."""
    from pimjax.costmodel.features import _runs
    from pimjax.kernels import kernel_op
    op, _ = kernel_op("va", list(shape))
    acc = op.operands[0]
    box = tuple(data.draw(st.integers(1, s)) for s in shape)
    # each index-map dimension of an elementwise op is one loop variable
    lens = {e.terms[0][0]: np.array([b]) for e, b in zip(acc.index_map, box)}
    runs, run = _runs(acc, lens, shape, 1)
    assert (int(runs[0]), int(run[0])) == _brute_runs(box, shape)


@pytest.mark.parametrize("kernel,shape", [("va", (1000,)), ("relu", (24, 1536)), ("red", (12, 4096)),
                                          ("red", (4, 300)), ("red", (40, 24)), ("va", (8, 40))])
def test_register_batches_match_the_lowering(kernel, shape):
    """`est_reg_batches` (closed form) is the number of ko-register batches
    the hbm-pim lowering streams a core's columns in: 2 x its tiles of
    2 x ko columns for an elementwise op, its accumulator batches for a
    reduction; `est_row_switches` is that times the operand streams (the
    sources and the result, each in its own rows)."""
    from pimjax.costmodel.dataset import try_lower
    be = get_backend("hbm-pim")
    case = make_case(be, kernel, shape)
    table = case_drafts(case, be)
    X = features_table(case.target, table, be, case.shapes)
    batches = np.round(2.0 ** X[:, FEATURE_NAMES.index("est_reg_batches")] - 1).astype(np.int64)
    switches = np.round(2.0 ** X[:, FEATURE_NAMES.index("est_row_switches")] - 1).astype(np.int64)
    streams = {"va": 3, "relu": 2, "red": 2}[kernel]
    checked, seen_ko, seen_lane = 0, [], []
    for i in np.random.default_rng(1).choice(len(table), min(60, len(table)), replace=False):
        p = try_lower(case, table[int(i)], be)
        if p is None:
            continue
        lowered = 2 * p.meta["tiles"] if kernel != "red" else p.meta["t_acc"]
        assert batches[i] == lowered, (table[int(i)], batches[i], lowered)
        assert switches[i] == batches[i] * streams
        seen_ko.append(table[int(i)].ko)
        seen_lane.append(table[int(i)].lane_var)
        checked += 1
    assert checked >= 5
    lanes = {c.lane_var for c in (table[j] for j in range(len(table)))}
    assert len(set(seen_ko)) > 1 and set(seen_lane) == lanes    # several KO, every lane variable


def test_a_gemv_only_family_prices_its_reduction_ones_vector(monkeypatch):
    """AttAcc reduces with a ones vector its lowering writes into the GEMV
    buffers (`Family.reduction_vector`): the estimate's group-broadcast
    write bytes grow by one lane-padded reduction tile per group, or per
    core on per-core-granularity drafts -- which send one WRGB per unit,
    twice the broadcast draft's on two cores (counted in the lowering)."""
    import dataclasses

    import pimjax.backends as backends
    from pimjax.costmodel.dataset import try_lower
    from pimjax.lower.program import Op, Phase
    be = get_backend("attacc")
    case = make_case(be, "red", (3000,))
    table = case_drafts(case, be)
    col = FEATURE_NAMES.index("est_rearr_bcast_bytes")
    with_vec = np.exp2(features_table(case.target, table, be, case.shapes)[:, col].astype(np.float64)) - 1
    fam = backends.family_of(be)
    monkeypatch.setitem(backends.FAMILIES, fam.name, dataclasses.replace(fam, reduction_vector=False))
    without = np.exp2(features_table(case.target, table, be, case.shapes)[:, col].astype(np.float64)) - 1
    g, c = table.groups_used, table.cores_used
    per_core = np.asarray(table.column("granularity")) == 1
    lanes, eb = be.core.lanes, 2
    redl = -(-3000 // (g * c))                              # the worst core's share of the reduction
    ones = -(-redl // lanes) * lanes * eb
    expect = ones * g * np.where(per_core, c, 1)
    np.testing.assert_allclose(with_vec - without, expect, rtol=2e-3)
    # the lowering: a per-core draft on 2 cores writes twice the broadcast twin's WRGB
    pick = {}
    for i in range(len(table)):
        d = table[i]
        if d.parts[0].groups == 16 and d.parts[0].cores == 2 and d.dataflow == "os":
            pick.setdefault(d.granularity, i)
    counts = {}
    for k, i in pick.items():
        p = try_lower(case, table[i], be)
        op, ph = np.asarray(p.commands.op)[0], np.asarray(p.commands.phase)[0]
        counts[k] = int(((op == Op.WRGB) & (ph == Phase.REARRANGE)).sum())
    assert counts["core"] == 2 * counts["broadcast"] > 0
    # families that reduce natively are untouched
    assert not backends.family_of(get_backend("hbm-pim")).reduction_vector


def test_a_familys_estimates_reach_the_features_through_its_hook(monkeypatch):
    """`Family.estimates` is the only way a family's closed form enters the
    features: without Newton's hook its count columns are zero and its time
    estimate the generic one; a hook naming an estimate the features do not
    have is an error, not a silent column."""
    import dataclasses

    import pimjax.backends as backends
    from pimjax.costmodel.features import COUNT_COLUMNS
    be = get_backend("newton", channels=2)
    case = make_case(be, "gemv", (96, 64))
    table = case_drafts(case, be)
    counts = [FEATURE_NAMES.index(f"est_nt_{c}") for c in COUNT_COLUMNS]
    total = FEATURE_NAMES.index("est_t_total")
    hooked = features_table(case.target, table, be, case.shapes)
    assert (hooked[:, counts] > 0).any()
    fam = backends.family_of(be)
    monkeypatch.setitem(backends.FAMILIES, fam.name, dataclasses.replace(fam, estimates=None))
    plain = features_table(case.target, table, be, case.shapes)
    assert not plain[:, counts].any() and not np.array_equal(plain[:, total], hooked[:, total])
    monkeypatch.setitem(backends.FAMILIES, fam.name, dataclasses.replace(fam, estimates=lambda x: {"t_bogus": 1.0}))
    with pytest.raises(ValueError, match="t_bogus"):
        features_table(case.target, table, be, case.shapes)
    monkeypatch.setitem(backends.FAMILIES, fam.name,
                        dataclasses.replace(fam, estimates=lambda x: {"counts": {"acts": np.ones(len(table))}}))
    with pytest.raises(ValueError, match="acts"):
        features_table(case.target, table, be, case.shapes)
