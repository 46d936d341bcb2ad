"""The tuner: ATiM's balanced evolutionary search keeps its contract, the
JSON cache survives concurrent writers, stale entries and unwritable paths,
bad arguments are refused, drafts that do not lower are skipped, and predict
mode is never slower than the baseline mapping, above its threshold too."""
from __future__ import annotations

import functools
import json
import threading
import warnings

import numpy as np
import pytest

from pimjax.backends import baseline
from pimjax.costmodel.predictor import Predictor, load_default
from pimjax.errors import PimCompileError
from pimjax.hw import get_backend
from pimjax.kernels import kernel_op
from pimjax.lower import lower
from pimjax.partition import drafts
from pimjax.search.cache import TuneCache, draft_to_dict
from pimjax.search.tuner import Tuner
from pimjax.sim.cycles import cycles_batch

BE = get_backend("hbm-pim", channels=4)
OP, SHAPES = kernel_op("gemv", [64, 64])
TABLE = drafts(OP, BE, shapes=SHAPES)


class Flat:
    meta = {"backend": "hbm-pim"}

    def predict(self, features):
        return np.ones(len(features))


@functools.cache
def _exhaustive_cycles() -> np.ndarray:
    progs = [lower(OP, d, BE, SHAPES) for d in TABLE]
    return np.asarray(cycles_batch(progs, BE).total_cycles, np.float64)


def test_evolutionary_search_keeps_its_contract():
    """Exactly `trials` simulations, the best measured draft returned, a
    history that never gets worse, the same run under the same seed, and a
    stop at the space's size when trials exceed it."""
    t = Tuner(mode="evolutionary", model=Flat(), trials=20, seed=3)
    a = t.evolutionary(OP, TABLE, BE, SHAPES)
    b = Tuner(mode="evolutionary", model=Flat(), trials=20, seed=3).evolutionary(OP, TABLE, BE, SHAPES)
    assert a.simulated == 20 and a.draft == b.draft and a.history == b.history
    best = np.asarray(a.history, np.float64)
    assert np.all(np.diff(best) <= 0) and float(a.report.total_cycles) == pytest.approx(best[-1])
    everything = Tuner(mode="evolutionary", model=Flat(), trials=10 * len(TABLE)).evolutionary(OP, TABLE, BE, SHAPES)
    assert everything.simulated == len(TABLE)
    assert float(everything.report.total_cycles) == pytest.approx(_exhaustive_cycles().min())


def test_balanced_search_samples_both_reduction_strategies_early():
    """ATiM §5.2.3: the first 40 % of trials draw parents from complete and
    rfactor drafts alike, so both appear among the early measurements."""
    rfactor = np.asarray(TABLE.reduction) != 0
    assert rfactor.any() and (~rfactor).any()
    seen = []
    t = Tuner(mode="evolutionary", model=Flat(), trials=24, seed=0)
    orig = t.measurer.simulate

    def spy(op, ds, *a, **k):
        seen.extend(TABLE.index(d) for d in ds)
        return orig(op, ds, *a, **k)
    t.measurer.simulate = spy
    t.evolutionary(OP, TABLE, BE, SHAPES)
    early = np.asarray(seen[: int(0.4 * 24)])
    assert rfactor[early].any() and (~rfactor[early]).any()


@pytest.mark.parametrize("kw", [dict(trials=0), dict(trials=-1), dict(top_k=0), dict(top_k=2.5),
                                dict(threshold=True)])
def test_bad_tuner_arguments_are_refused(kw):
    with pytest.raises(ValueError, match="positive int"):
        Tuner(**kw)
    with pytest.raises(ValueError, match="trials"):
        Tuner(model=Flat()).evolutionary(OP, TABLE, BE, SHAPES, trials=0)


def test_concurrent_writers_keep_every_entry(tmp_path):
    path = str(tmp_path / "tune.json")
    record = {"draft": draft_to_dict(TABLE[0]), "predicted": 1.0, "cycles": 1.0, "space": 1, "mode": "predict"}
    caches = [TuneCache(path) for _ in range(4)]

    def work(c, w):
        for i in range(25):
            c.put(f"{w}-{i}", record)
    threads = [threading.Thread(target=work, args=(c, w)) for w, c in enumerate(caches)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(json.loads(open(path).read())) == 100
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_an_unwritable_cache_warns_and_keeps_the_choice_in_memory(tmp_path):
    folder = tmp_path / "adir"
    folder.mkdir()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = Tuner(model=Flat(), top_k=1, cache=str(folder))              # a directory, not a file
    with pytest.warns(RuntimeWarning, match="cannot be written"):
        choice = t.choose(OP, BE, SHAPES)
    assert choice is not None and len(t.cache) == 1


def test_a_stale_entry_is_dropped_alone_and_retuned(tmp_path):
    path = tmp_path / "tune.json"
    t = Tuner(model=Flat(), top_k=1, cache=str(path))
    first = t.choose(OP, BE, SHAPES)
    data = json.loads(path.read_text())
    (key, entry), = data.items()
    stale = dict(entry, draft=dict(entry["draft"], parts=entry["draft"]["parts"][:1]))   # wrong arity
    data = {key: stale, "other": {"draft": {"unknown_field": 1}}}
    path.write_text(json.dumps(data))
    with pytest.warns(RuntimeWarning, match="dropped 1 of 2"):
        t2 = Tuner(model=Flat(), top_k=1, cache=str(path))
    assert key in t2.cache.entries and "other" not in t2.cache.entries
    with pytest.warns(RuntimeWarning, match="no longer lowers"):
        again = t2.choose(OP, BE, SHAPES)
    assert not again.cached and again.draft == first.draft


def test_a_custom_lowering_does_not_leak_into_later_calls():
    calls = []

    def my_lower(op, draft, backend, shapes, **opts):
        calls.append(draft)
        return lower(op, draft, backend, shapes, **opts)
    t = Tuner(model=Flat(), top_k=2, include_baseline=False)
    t.choose(OP, BE, SHAPES, lower_fn=my_lower, tag="custom")
    n = len(calls)
    t.evolutionary(OP, TABLE, BE, SHAPES, trials=4)
    assert n == 2 and len(calls) == n


def test_model_files_are_checked(tmp_path):
    with pytest.warns(RuntimeWarning, match="trained for upmem"):
        Tuner(model=load_default("upmem"), top_k=1, include_baseline=False).choose(OP, BE, SHAPES)
    bad = tmp_path / "bad.msgpack"
    bad.write_bytes(b"\x93\x01\x02")
    with pytest.raises(ValueError, match="bad.msgpack: not a pimjax cost model"):
        Predictor.load(str(bad))


def test_a_shared_cache_answers_only_tuners_that_would_search_no_more(tmp_path):
    """A 1-trial evolutionary pick does not answer a default tuner, a top-2
    pick does not answer a top-8 tuner; the same settings and exhaustive
    entries do."""
    path = str(tmp_path / "tune.json")
    quick = Tuner(mode="evolutionary", model=Flat(), trials=1, cache=path).choose(OP, BE, SHAPES)
    assert quick.simulated == 1
    assert not Tuner(model=Flat(), top_k=2, cache=path, include_baseline=False).choose(OP, BE, SHAPES).cached
    assert Tuner(model=Flat(), top_k=2, cache=path, include_baseline=False).choose(OP, BE, SHAPES).cached
    assert not Tuner(model=Flat(), top_k=8, cache=path, include_baseline=False).choose(OP, BE, SHAPES).cached
    assert not Tuner(mode="exhaustive", cache=path).choose(OP, BE, SHAPES).cached
    for t in (Tuner(model=Flat(), top_k=8, cache=path), Tuner(mode="evolutionary", model=Flat(), trials=64, cache=path)):
        assert t.choose(OP, BE, SHAPES).cached                        # the exhaustive entry answers all


# --------------------------------------------------------------------------
# drafts that do not lower, and the baseline above the threshold
# --------------------------------------------------------------------------
SMALL_BE = get_backend("hbm-pim", channels=2)
SMALL_OP, SMALL_SHAPES = kernel_op("gemv", [16, 16])
SMALL = drafts(SMALL_OP, SMALL_BE, shapes=SMALL_SHAPES)
SMALL_ROW = {d: i for i, d in enumerate(SMALL)}


@functools.cache
def _small_cycles() -> np.ndarray:
    """Simulated total cycles of every draft of SMALL (the ground truth)."""
    progs = [lower(SMALL_OP, d, SMALL_BE, SMALL_SHAPES) for d in SMALL]
    return np.asarray(cycles_batch(progs, SMALL_BE).total_cycles, np.float64)


def _failing_on(bad: set, calls: list | None = None):
    """A lower_fn that raises PimCompileError for the drafts at rows `bad`
    of SMALL, as `lower` does for a draft the resource verifier let through
    but that does not fit; `calls` collects the rows it was asked for."""
    def lower_fn(op, draft, backend, shapes, **opts):
        row = SMALL_ROW.get(draft, -1)
        if calls is not None:
            calls.append(row)
        if row in bad:
            raise PimCompileError(f"draft {row} does not fit")
        return lower(op, draft, backend, shapes, **opts)
    return lower_fn


def _best_of(rows) -> int:
    rows = sorted(rows)
    return rows[int(np.argmin(_small_cycles()[rows]))]


def test_exhaustive_skips_drafts_that_do_not_lower():
    """The optimum and every even row fail: the pick is the best of the
    rest, which are all simulated; the failures are counted."""
    bad = {int(np.argmin(_small_cycles()))} | set(range(0, len(SMALL), 2))
    good = set(range(len(SMALL))) - bad
    choice = Tuner(mode="exhaustive").choose(SMALL_OP, SMALL_BE, SMALL_SHAPES, lower_fn=_failing_on(bad), tag="t")
    assert choice.draft == SMALL[_best_of(good)]
    assert float(choice.report.total_cycles) == pytest.approx(_small_cycles()[_best_of(good)])
    assert (choice.simulated, choice.failed) == (len(good), len(bad))
    assert choice.failure.endswith("does not fit")


def test_top_k_simulates_k_drafts_that_lower():
    """A flat prediction ranks the drafts in table order: rows 0, 2 and 4
    fail, so the top 3 that lower are rows 1, 3, 5, and nothing past row 5
    is lowered."""
    calls = []
    t = Tuner(model=Flat(), top_k=3, include_baseline=False)
    choice = t.choose(SMALL_OP, SMALL_BE, SMALL_SHAPES, lower_fn=_failing_on({0, 2, 4}, calls), tag="t")
    assert calls == [0, 1, 2, 3, 4, 5]
    assert choice.draft == SMALL[_best_of({1, 3, 5})]
    assert (choice.simulated, choice.failed, choice.failure) == (3, 3, "draft 0 does not fit")


def test_evolutionary_search_skips_drafts_that_do_not_lower_at_no_trial():
    bad = set(range(0, len(SMALL), 2))
    calls = []
    few = Tuner(mode="evolutionary", model=Flat(), trials=6, seed=1).choose(
        SMALL_OP, SMALL_BE, SMALL_SHAPES, lower_fn=_failing_on(bad, calls), tag="t")
    lowered = [r for r in calls if r not in bad]
    assert few.simulated == len(lowered) == 6 and few.failed == len(calls) - 6 and len(set(calls)) == len(calls)
    assert few.draft == SMALL[_best_of(lowered)]
    # more trials than drafts that lower: every one of them, then a stop
    everything = Tuner(mode="evolutionary", model=Flat(), trials=100).choose(
        SMALL_OP, SMALL_BE, SMALL_SHAPES, lower_fn=_failing_on(bad), tag="t")
    good = set(range(len(SMALL))) - bad
    assert (everything.simulated, everything.failed) == (len(good), len(bad))
    assert everything.draft == SMALL[_best_of(good)]


@pytest.mark.parametrize("mode", ["predict", "exhaustive", "evolutionary"])
def test_an_op_no_draft_of_which_lowers_has_no_choice(mode):
    """A GEMV whose every kept draft exceeds hbm-pim's 8192 PIM rows per
    bank in `lower` (the verifier's estimate lets them through): None, what
    pim_jit reads as "stays on the host", and nothing cached."""
    op, shapes = kernel_op("gemv", [8 * 4090, 2049])
    be = get_backend("hbm-pim", channels=1)
    assert len(drafts(op, be, shapes=shapes)) > 0
    with pytest.raises(PimCompileError, match="PIM rows"):
        lower(op, drafts(op, be, shapes=shapes)[0], be, shapes)
    t = Tuner(mode=mode, model=Flat())
    assert t.choose(op, be, shapes) is None and len(t.cache) == 0


def test_a_search_that_ran_out_of_lowerable_drafts_answers_from_the_cache():
    """Only rows 1 and 2 lower: a top-8 tuner simulated all it could, so its
    entry answers the same tuner next time (it used to need 8)."""
    lower_fn = _failing_on(set(range(len(SMALL))) - {1, 2})
    t = Tuner(model=Flat(), top_k=8, include_baseline=False)
    first = t.choose(SMALL_OP, SMALL_BE, SMALL_SHAPES, lower_fn=lower_fn, tag="t")
    assert (first.simulated, first.failed) == (2, len(SMALL) - 2)
    again = t.choose(SMALL_OP, SMALL_BE, SMALL_SHAPES, lower_fn=lower_fn, tag="t")
    assert again.cached and again.draft == first.draft == SMALL[_best_of({1, 2})]


class Adversarial(Tuner):
    """A tuner whose model ranks SMALL's drafts slowest first."""

    def predict(self, op, table, backend, shapes):
        assert len(table) == len(SMALL)
        return 1.0 / _small_cycles()


def _baseline_cycles() -> float:
    base = baseline(SMALL_OP, SMALL_BE)
    return float(cycles_batch([lower(SMALL_OP, base, SMALL_BE, SMALL_SHAPES)], SMALL_BE).total_cycles[0])


def test_predict_mode_is_never_slower_than_the_baseline_above_its_threshold():
    """Above `threshold` predict mode runs the evolutionary search; a 1-trial
    search misled by its model picks worse than the baseline mapping, and
    the baseline, simulated besides, wins (Choice.baseline set).  With
    enough trials the search's better pick stays."""
    base, base_cycles = baseline(SMALL_OP, SMALL_BE), _baseline_cycles()
    search = Adversarial(mode="evolutionary", model=Flat(), trials=1).choose(SMALL_OP, SMALL_BE, SMALL_SHAPES)
    assert float(search.report.total_cycles) > base_cycles          # the case the guarantee is for
    choice = Adversarial(model=Flat(), threshold=1, trials=1).choose(SMALL_OP, SMALL_BE, SMALL_SHAPES)
    assert choice.mode == "evolutionary" and choice.draft == base and choice.simulated == 2
    assert float(choice.report.total_cycles) == pytest.approx(base_cycles)
    assert float(choice.baseline.total_cycles) == pytest.approx(base_cycles)
    off = Adversarial(model=Flat(), threshold=1, trials=1, include_baseline=False).choose(
        SMALL_OP, SMALL_BE, SMALL_SHAPES)
    assert off.draft == search.draft and off.baseline is None
    full = Adversarial(model=Flat(), threshold=1, trials=len(SMALL)).choose(SMALL_OP, SMALL_BE, SMALL_SHAPES)
    assert _small_cycles().min() < base_cycles
    assert full.draft == SMALL[int(np.argmin(_small_cycles()))] and full.simulated == len(SMALL) + 1
    assert float(full.baseline.total_cycles) == pytest.approx(base_cycles)


@pytest.mark.parametrize("pipeline", [False, True])
@pytest.mark.parametrize("records, batch", [(1, 256), (1 << 21, 3)])
def test_exhaustive_in_small_batches_picks_the_first_fastest(monkeypatch, pipeline, records, batch):
    """The streamed exhaustive search (drafts lowered and simulated a batch
    at a time, on a worker thread or not) picks what one batch of every
    draft picks: the draft with the fewest simulated cycles, with its own
    program and report, every draft counted as simulated; among equals the
    first in table order (a lowering that gives every draft the same
    program makes them all equal)."""
    import pimjax.search.strategy as strategy
    monkeypatch.setattr(strategy, "EXHAUSTIVE_RECORDS", records)      # 1: one draft a batch
    monkeypatch.setattr(strategy, "EXHAUSTIVE_BATCH", batch)
    monkeypatch.setattr(strategy, "EXHAUSTIVE_PIPELINE", pipeline)
    tag = f"{records}-{batch}-{pipeline}"
    choice = Tuner(mode="exhaustive").choose(SMALL_OP, SMALL_BE, SMALL_SHAPES, tag=tag)
    cyc = _small_cycles()
    best = int(np.argmin(cyc))
    assert best > 0 and choice.draft == SMALL[best] and choice.program.draft == SMALL[best]
    assert float(choice.report.total_cycles) == cyc[best]
    assert (choice.simulated, choice.failed, choice.space) == (len(SMALL), 0, len(SMALL))

    def same_program(op, draft, backend, shapes, **opts):
        return lower(op, SMALL[best], backend, shapes, **opts)
    tied = Tuner(mode="exhaustive").choose(SMALL_OP, SMALL_BE, SMALL_SHAPES, lower_fn=same_program, tag=tag + "t")
    assert tied.draft == SMALL[0] and float(tied.report.total_cycles) == cyc[best]


def test_ops_of_one_key_proposed_together_share_one_predicted_space(monkeypatch):
    """A layer's q / k / v projections are proposed before any is verified: the second proposal of
    the same cache key reuses the first's draft table and predictions (predicted once), and both
    verify to the choice a fresh tuner makes alone."""
    tuner = Tuner()
    calls = []
    predict = Tuner.predict
    monkeypatch.setattr(Tuner, "predict", lambda self, *a: calls.append(1) or predict(self, *a))
    first = tuner.propose(OP, BE, SHAPES)
    second = tuner.propose(OP, BE, SHAPES)
    assert len(calls) == 1 and second.table is first.table and second.draft == first.draft
    assert np.array_equal(second.predicted, first.predicted) and second.key == first.key
    # a caller's `keep` mask is its own function: never answered from another proposal's space
    kept = tuner.propose(OP, BE, SHAPES, keep=lambda t: np.arange(len(t)) % 2 == 0)
    assert len(calls) == 2 and len(kept.table) == (len(first.table) + 1) // 2
    a, b = tuner.verify(first), tuner.verify(second)
    alone = Tuner().choose(OP, BE, SHAPES)
    assert a.draft == b.draft == alone.draft and float(a.report.total_cycles) == float(alone.report.total_cycles)


def test_matrix_option_reaches_the_features():
    """`matrix=` (the Newton operand kept in the banks) changes the program; the tuner's
    predictions must describe that program: with matrix= given they are the features of that
    placement (`features_table(..., matrix=)`), not the default's, and the chosen program keeps it."""
    import jax
    from jax import lax

    import pimjax
    from pimjax.costmodel.features import features_table
    from pimjax.hw.presets import get_backend
    from pimjax.partition import drafts
    be = get_backend("newton", channels=2)

    def conv(x, k):
        return lax.conv_general_dilated(x, k, (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    graph = pimjax.make_graph(conv, jax.ShapeDtypeStruct((1, 6, 6, 40), np.float32),
                              jax.ShapeDtypeStruct((1, 1, 40, 12), np.float32))
    (op,) = [o for o in graph.ops if o.kind == "contraction"]
    shapes = {v: info.shape for v, info in enumerate(graph.values)}
    x, w = op.body_operands[:2]                    # the activations are the larger: the default matrix
    table = drafts(op, be, shapes=shapes)
    tuner = Tuner()
    model = tuner.model_for(be)
    want = np.asarray(model.predict(features_table(op, table, be, shapes, matrix=w)))
    got = tuner._predict_table(op, table, be, shapes, {"matrix": w})
    np.testing.assert_array_equal(got, want)
    assert not np.array_equal(got, tuner._predict_table(op, table, be, shapes, {}))
    choice = tuner.choose(op, be, shapes, matrix=w)
    assert choice.program.meta["M"] == w

    class Store:                                   # what the online label store is handed
        rows: list = []

        def append(self, family, group, X, cycles):
            self.rows.append((group, np.asarray(X), np.asarray(cycles)))

    from pimjax.costmodel.features import features
    store = Store()
    labelled = Tuner(label_store=store).choose(op, be, shapes, matrix=w)
    (group, X, _), = store.rows
    assert group.endswith(f"|matrix={w}")          # never pooled with the default placement's labels
    # the stored rows are the simulated table drafts' features under the placement the programs ran
    # (the family's packed drafts, which the tuner also simulates and may choose, are no table rows:
    # the cost model is not taught them)
    # (the baseline mapping, simulated too, may lie outside the table)
    ran, default = features_table(op, table, be, shapes, matrix=w), features_table(op, table, be, shapes)
    in_ran = [any(np.array_equal(r, f) for f in ran) for r in X]
    assert sum(in_ran) >= min(len(table), Tuner().top_k)
    assert not all(any(np.array_equal(r, f) for f in default) for r in X)
    if not labelled.draft.pack:
        assert any(np.array_equal(r, features(op, labelled.draft, be, shapes, matrix=w)) for r in X)
