"""Online refinement (DCC §IV-D): opt-in label store fed by the
tuner's simulations, a bounded fine-tune of a copy of the shipped model,
the shipped weights untouched, a corrupted store recovered."""
import hashlib
import warnings

import numpy as np
import pytest

from pimjax.costmodel.features import F
from pimjax.costmodel.online import LabelStore, refine
from pimjax.costmodel.predictor import weights_path


def _digest(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_tuner_appends_its_simulations_and_refine_leaves_the_shipped_weights(tmp_path):
    import jax

    from pimjax import pim_jit
    from pimjax.search import Tuner
    store = LabelStore(str(tmp_path / "labels.jsonl"))
    rng = np.random.default_rng(0)
    W = rng.standard_normal((192, 96)).astype(np.float32)
    x = rng.standard_normal(96).astype(np.float32)
    f = pim_jit(lambda W, x: W @ x, backend="hbm-pim", tuner=Tuner(top_k=4, label_store=store),
                placement="prefer_pim")
    compiled = f.lower(W, x).compile()
    X, y, g = store.read("hbm-pim")
    sim = compiled.cost_analysis()["ops"][0]["cycles"]
    assert 4 <= len(y) <= 5 and X.shape == (len(y), F) and len(set(g.tolist())) == 1
    assert y.min() == pytest.approx(sim)          # the chosen draft's simulated cycles are among the labels
    before = _digest(weights_path("hbm-pim"))
    for target in ("hbm-pim", "attacc"):            # nor another family's shipped file
        with pytest.raises(ValueError, match="never writes the shipped weights"):
            refine("hbm-pim", store, weights_path(target), min_rows=1)
    with pytest.raises(ValueError, match="nothing to refine on"):
        refine("hbm-pim", store, str(tmp_path / "r.msgpack"), min_rows=100)
    model = refine("hbm-pim", store, str(tmp_path / "r.msgpack"), seconds=20, steps=30, min_rows=1)
    assert _digest(weights_path("hbm-pim")) == before
    assert model.meta["refined"]["rows"] == len(y)
    assert np.isfinite(model.predict(X)).all()
    del jax


def test_corrupted_store_is_set_aside_and_torn_lines_skipped(tmp_path):
    path = tmp_path / "labels.jsonl"
    store = LabelStore(str(path))
    X = np.zeros((3, F), np.float32)
    assert store.append("newton", "g", X, [10.0, np.nan, 30.0]) == 2
    with open(path, "a") as f:
        f.write('{"family": "newton", "x": [1, 2')          # a torn last line
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        X2, y2, _ = store.read("newton")
    assert y2.tolist() == [10.0, 30.0] and any("skipped 1" in str(m.message) for m in w)
    path.write_bytes(b"\xff\xfe garbage \x00")
    with pytest.warns(RuntimeWarning, match="corrupt"):
        _, y3, _ = store.read("newton")
    assert len(y3) == 0 and (tmp_path / "labels.jsonl.corrupt").exists() and not path.exists()
    assert store.append("newton", "g", X[:1], [5.0]) == 1 and store.read("newton")[1].tolist() == [5.0]
    # a bad byte inside a good file spoils its line, not the file
    with open(path, "ab") as f:
        f.write(b'{"family": "newton", "x": [\xff]}\n')
    with pytest.warns(RuntimeWarning, match="skipped 1"):
        assert store.read("newton")[1].tolist() == [5.0]
    # a second corrupted store is set aside beside the first, not over it
    path.write_bytes(b"not json at all\n")
    with pytest.warns(RuntimeWarning, match="corrupt.1"):
        store.read("newton")
    assert (tmp_path / "labels.jsonl.corrupt").read_bytes().startswith(b"\xff\xfe")
    assert (tmp_path / "labels.jsonl.corrupt.1").read_bytes() == b"not json at all\n"


def test_refining_weights_without_a_recorded_range_keeps_none(tmp_path, monkeypatch):
    """Weights saved before the training range was (a user's older files):
    a fine-tune on a few rows must not invent a range from those rows alone
    (it would clip every other prediction to their residuals and flag every
    other shape as extrapolating)."""
    from pimjax.costmodel import predictor
    from pimjax.costmodel.model import CostModel
    old = CostModel.load(weights_path("upmem"))
    old.x_min = old.x_max = old.bound = None             # as such a file loads
    base = tmp_path / "weights" / "upmem.msgpack"
    base.parent.mkdir()
    old.save(str(base))
    monkeypatch.setattr(predictor, "weights_path", lambda name: str(base))
    assert predictor.Predictor.load(str(base)).x_min is None
    store = LabelStore(str(tmp_path / "labels.jsonl"))
    X = np.random.default_rng(0).normal(0, 1, (8, F)).astype(np.float32)
    store.append("upmem", "g", X, np.linspace(100.0, 800.0, 8))
    model = refine("upmem", store, str(tmp_path / "r.msgpack"), seconds=10, steps=5, min_rows=1)
    assert model.x_min is None and model.bound is None
