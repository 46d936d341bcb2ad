"""experiments/key_figures.py: the notebooks' headline figures held to committed values."""
from __future__ import annotations

import json

import pytest

from experiments import key_figures


@pytest.fixture
def store(tmp_path, monkeypatch):
    path = tmp_path / "key_figures.json"
    monkeypatch.setattr(key_figures, "PATH", path)
    monkeypatch.delenv(key_figures.ENV, raising=False)
    return path


def test_write_then_check_within_the_band(store, monkeypatch):
    monkeypatch.setenv(key_figures.ENV, "write")
    key_figures.check("nb", {"a": 2.0, "b": 10.0})
    assert json.loads(store.read_text()) == {"nb": {"a": 2.0, "b": 10.0}}
    monkeypatch.delenv(key_figures.ENV)
    inside = 1 + 0.9 * key_figures.RTOL
    assert key_figures.check("nb", {"a": 2.0 * inside, "b": 10.0 / inside}) == {"a": 2.0 * inside, "b": 10.0 / inside}


def test_a_figure_outside_the_band_names_itself(store, monkeypatch):
    monkeypatch.setenv(key_figures.ENV, "write")
    key_figures.check("nb", {"a": 2.0, "b": 10.0})
    monkeypatch.delenv(key_figures.ENV)
    with pytest.raises(AssertionError, match=r"1 key figure\(s\) outside.*b: 11"):
        key_figures.check("nb", {"a": 2.0, "b": 10.0 * (1 + 2 * key_figures.RTOL)})


def test_missing_extra_and_unrecorded_figures_fail(store, monkeypatch):
    monkeypatch.setenv(key_figures.ENV, "write")
    key_figures.check("nb", {"a": 1.0})
    monkeypatch.delenv(key_figures.ENV)
    with pytest.raises(AssertionError, match="differ from the committed"):
        key_figures.check("nb", {"a": 1.0, "extra": 1.0})
    with pytest.raises(AssertionError, match="differ from the committed"):
        key_figures.check("nb", {})
    with pytest.raises(AssertionError, match="no committed key figures"):
        key_figures.check("other", {"a": 1.0})
    with pytest.raises(AssertionError, match="finite"):
        key_figures.check("nb", {"a": float("nan")})


def test_every_checking_notebook_has_committed_figures():
    """The notebooks that call `key_figures.check` have their figures in the committed file."""
    from pathlib import Path
    root = Path(__file__).resolve().parents[1] / "experiments" / "notebooks"
    calling = sorted(p.stem for p in root.glob("*.py") if "key_figures.check(" in p.read_text())
    assert calling, "no notebook checks its key figures"
    committed = json.loads(key_figures.PATH.read_text())
    assert set(calling) <= set(committed), set(calling) - set(committed)
    assert all(committed[n] for n in calling)
