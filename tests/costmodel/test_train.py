"""The training CLI and `train_backend` refuse bad settings before any
labelling or writing (`--out` defaults to the shipped weights)."""
from __future__ import annotations

import pytest

from pimjax.costmodel import dataset
from pimjax.costmodel.train import main, model_top_list, train_backend


@pytest.mark.parametrize("argv,message", [
    (["--model-top", "abc"], "--model-top 'abc': a comma list of ints >= 1"),
    (["--model-top", "10,-1"], "'-1' must be >= 1"),
    (["--members", "0"], "argument --members: '0' must be >= 1"),
    (["--seed", "-1"], "argument --seed: '-1' must be >= 0"),
    (["--steps1", "-5", "--steps2", "-5"], "argument --steps1: '-5' must be >= 1"),
    (["--steps2", "0"], "argument --steps2: '0' must be >= 1"),
    (["--seconds", "0"], "argument --seconds: '0' must be a finite number > 0"),
    (["--seconds", "nan"], "argument --seconds: 'nan' must be a finite number > 0"),
    (["--tau", "0"], "argument --tau: '0' must be a finite number > 0"),
    (["--margin", "-0.1"], "argument --margin: '-0.1' must be a finite number >= 0"),
    (["--base", "est_nothing"], "--base 'est_nothing': not a time estimate feature"),
    (["--base", "est_reg_batches"], "--base 'est_reg_batches': not a time estimate feature"),
])
def test_bad_cli_values_are_usage_errors(argv, message, tmp_path, capsys):
    """Exit code 2 with argparse's message naming the option, and nothing
    written to --out or the label cache."""
    out, cache = tmp_path / "weights", tmp_path / "cache"
    with pytest.raises(SystemExit) as exit_:
        main(argv + ["--out", str(out), "--cache", str(cache)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not out.exists() and not cache.exists()


def test_model_top_lists():
    assert model_top_list("10,10") == [10, 10]
    assert model_top_list(" 4, 8 ") == [4, 8]
    assert model_top_list("") == []                      # no model-driven round


@pytest.mark.parametrize("kw,match", [(dict(steps1=-5), "steps"), (dict(steps2=0), "steps2"),
                                      (dict(members=0), "members"), (dict(seed=-1), "seed"),
                                      (dict(model_top=[10, 0]), "model_top"),
                                      (dict(seconds=None), "seconds")])
def test_train_backend_refuses_bad_settings_before_labelling(kw, match, tmp_path, monkeypatch):
    def no_labelling(*args, **kwargs):
        raise AssertionError("labelling started")
    monkeypatch.setattr(dataset, "training_cases", no_labelling)
    monkeypatch.setattr(dataset, "generate", no_labelling)
    settings = {**dict(steps1=5, steps2=5, seconds=1.0, model_top=[10], seed=0, members=1), **kw}
    with pytest.raises(ValueError, match=match):
        train_backend("hbm-pim", cache=str(tmp_path), out_dir=str(tmp_path / "weights"), **settings)
    assert not (tmp_path / "weights").exists()


@pytest.mark.parametrize("name", ["hbm-pim", "upmem"])
def test_train_backend_takes_the_familys_ensemble_size_by_default(name, tmp_path, monkeypatch):
    """members=None (the CLI's default) is the family's
    `TrainingShapes.members`: the ensemble `make train` reproduces."""
    import pimjax.costmodel.model as model_mod
    from pimjax.backends import family_of
    want = family_of(name).training_shapes.members
    built = {}

    class Stop(Exception):
        pass

    def capture(**kw):
        built.update(kw)
        raise Stop
    monkeypatch.setattr(model_mod, "CostModel", capture)
    with pytest.raises(Stop):
        train_backend(name, cache=str(tmp_path), out_dir=str(tmp_path / "w"), steps1=5, steps2=5, seconds=1.0,
                      model_top=[10], seed=0)
    assert built["members"] == want
