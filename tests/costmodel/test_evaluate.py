"""Table II's labelling by branch and bound (`costmodel/evaluate.py`):
the same optimum and the same predictor verdicts as labelling every draft,
the skipped drafts marked, labelled on demand and cached."""
from __future__ import annotations

import numpy as np
import pytest

from pimjax.costmodel.evaluate import evaluate_case, exhaustive, label_pruned
from pimjax.costmodel.predictor import load_default
from pimjax.hw import get_backend

# 1 296 drafts, labelled in full in seconds; below PRUNE_ABOVE, so the re-reads of a pruned cache
# ask for prune=True (the default labels a space this small in full)
BACKEND = get_backend("upmem", dpus=64)
SHAPE = (240, 48)


@pytest.fixture(scope="module")
def full_and_pruned(tmp_path_factory):
    d = tmp_path_factory.mktemp("labels")
    _, table, full = exhaustive(BACKEND, "gemv", SHAPE, cache_dir=str(d / "full"), prune=False)
    _, _, pruned = exhaustive(BACKEND, "gemv", SHAPE, cache_dir=str(d / "pruned"), prune=True)
    return d, table, full, pruned


def test_branch_and_bound_finds_the_exhaustive_optimum(full_and_pruned):
    _, table, full, pruned = full_and_pruned
    assert not np.isposinf(full).any()
    skipped = np.isposinf(pruned)
    assert skipped.sum() > len(table) // 4           # here transfers weigh: 56 % pruned
    done = ~skipped
    # what it simulated is what the full labelling simulated, failures included
    np.testing.assert_array_equal(np.isnan(pruned[done]), np.isnan(full[done]))
    ok = done & ~np.isnan(full)
    np.testing.assert_allclose(pruned[ok], full[ok], rtol=1e-12)
    assert np.nanmin(pruned[done]) == np.nanmin(full)
    # every skipped draft is slower than the optimum (or does not lower)
    assert np.all(np.isnan(full[skipped]) | (full[skipped] >= np.nanmin(full)))


def test_evaluate_case_gives_the_full_verdicts_and_labels_its_picks(full_and_pruned):
    d, table, full, _ = full_and_pruned
    model = load_default("upmem")
    a = evaluate_case(model, BACKEND, "gemv", SHAPE, top_k=4, cache_dir=str(d / "full"), prune=False)
    b = evaluate_case(model, BACKEND, "gemv", SHAPE, top_k=4, cache_dir=str(d / "pruned"), prune=True)
    assert (a.optimum, a.chosen, a.best, a.topk_best, a.topk_rel) == (b.optimum, b.chosen, b.best,
                                                                       b.topk_best, b.topk_rel)
    assert a.extra["pruned"] == 0 and b.extra["pruned"] > 0
    assert b.lowered + b.extra["pruned"] + int(np.isnan(full).sum()) >= len(table)
    # the picks it simulated on demand went into the cache
    _, _, cached = exhaustive(BACKEND, "gemv", SHAPE, cache_dir=str(d / "pruned"), prune=True)
    assert int(np.isposinf(cached).sum()) == b.extra["pruned"]


class _Ranks:
    """A stand-in predictor that ranks the drafts in a given order (its
    predicted cycles: the rank)."""

    def __init__(self, order):
        self.pred = np.empty(len(order))
        self.pred[np.asarray(order)] = np.arange(len(order), dtype=np.float64)

    def predict(self, X):
        assert len(X) == len(self.pred)
        return self.pred


def test_skipped_drafts_the_predictor_ranks_first_are_simulated(full_and_pruned, tmp_path):
    """A predictor that puts skipped drafts (and one that fails to lower)
    on top: evaluate_case simulates them on demand, so its choice and its
    top-k are the full labelling's."""
    _, table, full, pruned = full_and_pruned
    skipped = np.nonzero(np.isposinf(pruned))[0]
    failed = np.nonzero(np.isnan(full))[0]
    head = np.concatenate([failed[:1], skipped[::97][:6]])
    order = np.concatenate([head, np.setdiff1d(np.arange(len(table)), head)])
    model = _Ranks(order)
    exhaustive(BACKEND, "gemv", SHAPE, cache_dir=str(tmp_path), prune=True)
    got = evaluate_case(model, BACKEND, "gemv", SHAPE, top_k=4, cache_dir=str(tmp_path), prune=True)
    ok = order[~np.isnan(full[order])]
    assert got.chosen == full[ok[0]] and got.optimum == np.nanmin(full)
    assert got.topk_rel == np.nanmin(full) / full[ok[:4]].min()
    assert got.extra["pruned"] < int(np.isposinf(pruned).sum())
    _, _, cached = exhaustive(BACKEND, "gemv", SHAPE, cache_dir=str(tmp_path), prune=True)
    np.testing.assert_allclose(cached[ok[:4]], full[ok[:4]], rtol=1e-12)


def test_label_pruned_fills_only_skipped_drafts(full_and_pruned, tmp_path):
    _, table, full, pruned = full_and_pruned
    case, _, cyc = exhaustive(BACKEND, "gemv", SHAPE, cache_dir=str(tmp_path), prune=True)
    skipped = np.nonzero(np.isposinf(cyc))[0][:5]
    kept = cyc[~np.isposinf(cyc)].copy()
    label_pruned(case, table, cyc, skipped, BACKEND, cache_dir=str(tmp_path))
    np.testing.assert_allclose(cyc[skipped], full[skipped], rtol=1e-12, equal_nan=True)
    before = ~np.isposinf(pruned)
    before[skipped] = False
    np.testing.assert_array_equal(cyc[before], kept[np.isin(np.nonzero(~np.isposinf(pruned))[0],
                                                            np.nonzero(before)[0])])
    _, _, again = exhaustive(BACKEND, "gemv", SHAPE, cache_dir=str(tmp_path), prune=True)
    np.testing.assert_array_equal(again, cyc)
