"""The tuner: ATiM's balanced evolutionary search keeps its contract, the
JSON cache survives concurrent writers, stale entries and unwritable paths,
and bad arguments are refused."""
from __future__ import annotations

import json
import threading
import warnings

import numpy as np
import pytest

from pimjax.costmodel.predictor import Predictor, load_default
from pimjax.costmodel.tune import Tuner, TuneCache, draft_to_dict
from pimjax.hw import get_backend
from pimjax.kernels import kernel_op
from pimjax.lower import lower
from pimjax.partition import drafts
from pimjax.sim.cycles import cycles_batch

BE = get_backend("hbm-pim", channels=4)
OP, SHAPES = kernel_op("gemv", [64, 64])
TABLE = drafts(OP, BE, shapes=SHAPES)


class Flat:
    meta = {"backend": "hbm-pim"}

    def predict(self, features):
        return np.ones(len(features))


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
    orig = t._simulate

    def spy(op, ds, *a, **k):
        seen.extend(TABLE.index(d) for d in ds)
        return orig(op, ds, *a, **k)
    t._simulate = spy
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
