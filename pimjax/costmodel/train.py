"""Train the shipped cost models: `python -m pimjax.costmodel.train [--backend NAME|all]`.

NAME is a model name (`configs.model_names()`): a family's ("hbm-pim") or a
controller configuration's ("hbm-pim.dcc": `get_backend("hbm-pim",
simulator="dcc")`, labelled by DCC's fork, on the kernels it times
(`ControllerModel.kernels`) and on its family's preset broad cases of those).

Per backend:

1. round 1 — label random drafts (and the closed-form estimate's best) of
   seeded random shapes of every kernel the backend runs
   (`dataset.generate`; records cached as JSON lines under --cache), and
   (`TrainingShapes.broad_top` > 0: all but UPMEM) sampled drafts of the shipped models'
   shapes on the preset and structural variants (`broad.py`'s train split);
2. fit a first model (`--steps1` Adam steps);
3. round 2 — label the drafts that model ranks best per training shape
   (its own hard cases, what the tuner's top-k would simulate);
4. continue fitting on everything (`--steps2`) and write
   `pimjax/costmodel/weights/<backend>.msgpack` plus a `.json` summary;
   the model-driven rounds' picks, predicted before they were labelled,
   size the uncertainty the predictor reports (`predictor.sigma_floor`).

The label cache is a pure memo: re-running reuses its labels, so only
training time is paid, and which drafts are labelled and trained on never
depends on what it holds, so a run from an empty cache gives the same
weights.
After a change of the lowering or the time model, `--relabel` first
simulates every cached record again (`dataset.relabel`: same drafts, new
labels).
Training stops at a fixed number of steps (deterministic), or earlier at
--seconds of training per backend.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import TYPE_CHECKING

import numpy as np

from ..backends import family_of

if TYPE_CHECKING:
    from .predictor import Predictor

# residual models (`CostModel(base=...)`): the network learns log(cycles / estimate) where a
# closed-form estimate prices the backend's drafts from the draft alone.  UPMEM's and Newton's
# (`Family.estimates`: the lowering's transfers and tasklet schedule under the DPU time model;
# the command stream under the timing rules) equal the simulated cycles all but refresh;
# hbm-pim's and attacc's are rough.  Every family is one: a network alone extrapolates
# badly on shapes beyond the training range (AttAcc GEMVs 7-30x off), a residual clipped
# to the training range falls back on an estimate that scales with the shape and the hardware
# (`Predictor`'s bound).
BASE = "est_t_total"

# Per family (`Family.training_shapes`, `family.hooks.TrainingShapes`): the ensemble members
# (`members`: five for HBM-PIM and AttAcc, whose networks correct rough estimates and whose
# two-member spread was a poor uncertainty; two for Newton and UPMEM) and the drafts per broad
# train case in each model-driven round (`broad_top`: 0 for UPMEM, whose estimate walks the
# lowering exactly, so its residual has nothing to learn there).


# the settings of `make train` (the CLI's defaults), which a model trained at first use
# (`train.load_for`) takes too
DEFAULTS = {"steps1": 2000, "steps2": 5000, "seconds": 900.0, "model_top": [10, 10], "seed": 0}


def _arg(check):
    """An argparse `type` from check(text) -> value (ValueError when bad):
    a bad value is a usage error (exit 2, the message on stderr) before
    anything is labelled or written; `--out` defaults to the shipped
    weights, which a 0-step run must never replace."""
    def parse(text: str):
        try:
            return check(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None    # argparse prints it as it is
    return parse


def _int_at_least(text: str, low: int) -> int:
    try:
        v = int(text)
    except ValueError:
        raise ValueError(f"{text!r} is not an integer") from None
    if v < low:
        raise ValueError(f"{text!r} must be >= {low}")
    return v


def _number(text: str, allow_zero: bool) -> float:
    v = float(text)                       # ValueError for 'abc'
    if not np.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        raise ValueError(f"{text!r} must be a finite number {'>=' if allow_zero else '>'} 0")
    return v


def positive_int(text: str) -> int:
    """An int >= 1 (steps, ensemble members, drafts per round)."""
    return _int_at_least(text, 1)


def non_negative_int(text: str) -> int:
    """An int >= 0 (a seed: numpy's generators refuse negative ones)."""
    return _int_at_least(text, 0)


def positive_float(text: str) -> float:
    """A finite number > 0 (seconds, the ranking hinge scale tau)."""
    return _number(text, allow_zero=False)


def non_negative_float(text: str) -> float:
    """A finite number >= 0 (the ranking margin, in log-cycles)."""
    return _number(text, allow_zero=True)


def model_top_list(text: str) -> list[int]:
    """'10,10' -> [10, 10]: drafts per training shape of each model-driven
    labelling round ('' for none)."""
    items = [t.strip() for t in text.split(",")] if text.strip() else []
    try:
        return [positive_int(t) for t in items]
    except ValueError as err:
        raise ValueError(f"--model-top {text!r}: a comma list of ints >= 1 ({err})") from None


def check_train_args(steps2, seconds, model_top) -> None:
    """ValueError for the settings of `train_backend` that CostModel does
    not check when it is built (steps1, seed, members and the ranking
    hyper-parameters it does): they would fail only after minutes of
    labelling, or train nothing and still save weights marked fitted."""
    from .model import check_positive_int, check_seconds
    check_positive_int("steps2", steps2)
    for top in model_top:
        check_positive_int("model_top entries", top)
    if check_seconds(seconds) is None:          # the time cap is split between the fits
        raise ValueError("seconds must be a positive number, got None")


def _jax_cache(cache: str) -> None:
    import jax
    os.makedirs(cache, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", os.path.join(cache, "jax_cache"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)


def train_backend(name: str, *, cache: str, out_dir: str, steps1: int, steps2: int, seconds: float,
                  model_top: list[int], seed: int, members: int | None = None, console=None, broad_random: int = 4,
                  broad_top: int | None = None, **hp) -> dict:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from . import dataset as ds
    from .broad import broad_cases
    from .configs import model_backend, split
    from .model import CostModel
    from .predictor import sigma_floor

    check_train_args(steps2, seconds, model_top)
    family, controller = split(name)        # a family's model, or a controller's ("hbm-pim.dcc", configs.py)
    members = family_of(family).training_shapes.members if members is None else members
    broad_top = family_of(family).training_shapes.broad_top if broad_top is None else broad_top
    # built before any labelling, so a bad hyper-parameter fails in seconds, not after minutes
    model = CostModel(seed=seed, steps=steps1, seconds=seconds, members=members, **hp)
    backend = model_backend(name)
    plan = ds.plan_of(name)
    cases = ds.training_cases(name, plan, seed=seed)
    # the shipped models' shapes on the preset and structural variants (`broad.py`'s train split),
    # sampled sparsely: their spaces are too large, and their drafts too slow, for the random plan;
    # a controller's configuration has no structural variants (DCC's one cube): its family's preset
    # cases of the kernels it times, on the configuration
    kernels = ds.supported_kernels(name)
    broad = [(c["kernel"], tuple(c["shape"]), c["hw"]) for c in broad_cases("train")
             if c["backend"] == family and (controller is None or (not c["hw"] and c["kernel"] in kernels))] \
        if broad_top else []
    bplan = ds.Plan(random_per_case=broad_random, estimate_per_case=2, dense_drafts=broad_random)
    path = ds.records_path(name, cache)
    summary: dict = {"backend": name, "cases": len(cases), "broad_cases": len(broad), "seed": seed}

    cols = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[msg]}"))
    with Progress(*cols, console=console, transient=False) as bar:
        t0 = time.time()
        task = bar.add_task(f"{name}: label round 1", total=len(cases), msg="")
        recs = ds.generate(backend, cases, plan, seed=seed, path=path,
                           progress=lambda i, n, m: bar.update(task, completed=i, msg=m))
        if broad:
            taskb = bar.add_task(f"{name}: label round 1, model shapes", total=len(broad), msg="")
            # prior: a model shape that is also a random training shape takes other drafts of it
            recs += ds.generate(backend, broad, bplan, seed=seed, path=path, prior=recs,
                                progress=lambda i, n, m: bar.update(taskb, completed=i, msg=m))
        summary["round1_seconds"] = round(time.time() - t0, 1)
        X, y, g, keys = ds.featurise(recs, backend)
        summary["round1_rows"] = int(len(y))

        fits, fit_seconds, label_seconds = [], 0.0, summary["round1_seconds"]
        calib: list[tuple[np.ndarray, np.ndarray]] = []        # (log error, ensemble spread) per round
        for r, top in enumerate(model_top, start=2):
            fit = bar.add_task(f"{name}: fit round {r - 1}", total=steps1, msg="")
            t_fit = time.time()
            fits.append(model.update(X, y, g, steps=steps1, seconds=max(1.0, seconds - fit_seconds) / 3,
                                     progress=lambda i, n, loss, fit=fit: bar.update(
                                         fit, completed=i, msg=f"loss {loss:.4f}")))
            fit_seconds += time.time() - t_fit
            t1 = time.time()
            task2 = bar.add_task(f"{name}: label round {r}", total=len(cases), msg="")
            new = ds.generate(backend, cases, plan, seed=seed, path=path, model=model, model_top=top,
                              prior=recs,
                              progress=lambda i, n, m, task2=task2: bar.update(task2, completed=i, msg=m))
            if broad:
                new += ds.generate(backend, broad, bplan, seed=seed, path=path, model=model,
                                   model_top=min(top, broad_top), prior=recs + new)
            # out of sample: the model that picked these drafts has not seen their labels yet
            Xn, yn, _, _ = ds.featurise(new, backend)
            if len(yn):
                logs = model.member_logs(Xn)
                calib.append((np.log(yn) - logs.mean(axis=0), logs.std(axis=0)))
            recs += new
            label_seconds += time.time() - t1
            X, y, g, keys = ds.featurise(recs, backend)
        summary["label_seconds"] = round(label_seconds, 1)
        summary["rows"] = int(len(y))
        summary["groups"] = int(len(keys))
        summary["failed_lowerings"] = int(sum(r.get("cycles") is None for r in recs))
        summary["sources"] = {s: sum(r.get("source") == s for r in recs) for s in ("random", "estimate", "model")}

        fit2 = bar.add_task(f"{name}: final fit", total=steps2, msg="")
        t_fit = time.time()
        fits.append(model.update(X, y, g, steps=steps2, seconds=max(1.0, seconds - fit_seconds),
                                 progress=lambda i, n, loss: bar.update(fit2, completed=i, msg=f"loss {loss:.4f}")))
        fit_seconds += time.time() - t_fit
    summary["train_seconds"] = round(fit_seconds, 1)
    summary["fit"] = fits
    # training-set quality: top-1 hit rate over the training cases and the fit error
    pred = model.predict(X)
    hits, rels = [], []
    for k in np.unique(g):
        m = g == k
        c, p = y[m], pred[m]
        hits.append(c[np.argmin(p)] <= c.min() * (1 + 1e-6))
        rels.append(c.min() / c[np.argmin(p)])
    summary["train_top1"] = float(np.mean(hits))
    summary["train_rel"] = float(np.exp(np.mean(np.log(rels))))
    summary["train_mape"] = float(np.mean(np.abs(pred - y) / y))
    # the reported uncertainty: the ensemble's spread widened by the floor that makes +-2 sigma hold
    # COVERAGE of the model-round picks, predicted before they were labelled (`predictor.sigma_floor`)
    err = np.concatenate([e for e, _ in calib]) if calib else np.zeros(0)
    spread = np.concatenate([s for _, s in calib]) if calib else np.zeros(0)
    summary["sigma_floor"] = sigma_floor(err, spread)
    summary["calibration_drafts"] = int(err.size)
    summary["calibration_mape"] = float(np.mean(np.abs(np.expm1(-err)))) if err.size else None
    summary["spread_coverage"] = float(np.mean(np.abs(err) <= 2 * spread)) if err.size else None
    model.meta.update({"backend": name, "variant": backend.variant, "rows": summary["rows"],
                       "groups": summary["groups"], "trained": time.strftime("%Y-%m-%d"),
                       "sigma_floor": summary["sigma_floor"]})
    os.makedirs(out_dir, exist_ok=True)
    wpath = os.path.join(out_dir, f"{name}.msgpack")
    model.save(wpath)
    from ..durable import atomic_write
    atomic_write(os.path.join(out_dir, f"{name}.json"), json.dumps(summary, indent=1, sort_keys=True))
    summary["weights"] = wpath
    summary["weights_bytes"] = os.path.getsize(wpath)
    return summary


def load_for(backend) -> "Predictor":
    """The model that ranks `backend`'s drafts (a Backend or a model name;
    `configs.model_name`): the shipped weights; else, for a controller's
    configuration (`Family.controller_models`) that ships none, weights
    trained at first use on that controller's labels (`train.train_backend`
    with `train.DEFAULTS`: minutes, once, with a warning) and kept under
    `user_weights_dir()` for later processes.  A family without shipped
    weights is a FileNotFoundError, as `load_default`."""
    from .configs import SEP, model_name, split
    from .predictor import Predictor, load_default, user_weights_dir
    name = model_name(backend)
    try:
        return load_default(name)
    except FileNotFoundError:
        if SEP not in name:                 # a family (or an unknown name): nothing to train here
            raise
    split(name)                             # a ValueError for a name no family's controller has
    out = user_weights_dir()
    path = os.path.join(out, f"{name}.msgpack")
    if not os.path.isfile(path):
        import warnings

        from ..errors import user_stacklevel
        warnings.warn(f"no shipped cost model for {name!r}: training one on its controller's labels "
                      f"(minutes, once; kept at {path})", RuntimeWarning, stacklevel=user_stacklevel())
        from .dataset import CACHE_DIR
        train_backend(name, cache=CACHE_DIR, out_dir=out, **DEFAULTS)
    return Predictor.load(path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="all",
                    help="a comma list of cost models (configs.model_names(): hbm-pim, attacc, newton, upmem, "
                         "and the DCC configurations' attacc.dcc, hbm-pim.dcc) or all")
    ap.add_argument("--cache", default=os.environ.get("PIMJAX_COSTMODEL_CACHE", "/tmp/costmodel"),
                    help="labelled records (JSON lines) and the XLA compile cache")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "weights"),
                    help="directory for <backend>.msgpack/.json (default: the package's shipped weights, "
                         "which `make train` reproduces; give another directory to keep them)")
    ap.add_argument("--steps1", type=_arg(positive_int), default=DEFAULTS["steps1"],
                    help="Adam steps before each model-driven round")
    ap.add_argument("--steps2", type=_arg(positive_int), default=DEFAULTS["steps2"], help="Adam steps of the final fit")
    ap.add_argument("--seconds", type=_arg(positive_float), default=DEFAULTS["seconds"],
                    help="training time cap per backend (a guard: the steps decide, so the weights are "
                         "reproducible on a loaded box; 60 s stopped a fit at 200 of 5 000 steps there)")
    ap.add_argument("--model-top", type=_arg(model_top_list), default=DEFAULTS["model_top"],
                    help="drafts per training shape labelled in each model-driven round (comma list)")
    ap.add_argument("--seed", type=_arg(non_negative_int), default=DEFAULTS["seed"])
    ap.add_argument("--members", type=_arg(positive_int), default=None,
                    help="ensemble members, their log-cycles averaged (default: the family's "
                         "TrainingShapes.members)")
    ap.add_argument("--margin", type=_arg(non_negative_float), default=None,
                    help="ranking pairs: only drafts more than this apart in log-cycles (model default 0.01)")
    ap.add_argument("--tau", type=_arg(positive_float), default=None,
                    help="ranking hinge scale in log-cycles (default 0.02)")
    ap.add_argument("--base", default="auto",
                    help="residual model over this closed-form estimate feature: a feature name, 'none', or "
                         f"'auto' ({BASE})")
    ap.add_argument("--broad-random", type=_arg(positive_int), default=4,
                    help="random drafts per case of the models' shapes and hardware variants (broad.py)")
    ap.add_argument("--broad-top", type=_arg(non_negative_int), default=None,
                    help="drafts per such case in each model-driven round (0: leave those cases out; "
                         "default: the family's TrainingShapes.broad_top)")
    ap.add_argument("--relabel", action="store_true",
                    help="first simulate every cached record again (after a change of the time model)")
    args = ap.parse_args(argv)
    from .features import is_time_estimate
    if args.base not in ("auto", "none") and not is_time_estimate(args.base):
        ap.error(f"--base {args.base!r}: not a time estimate feature (est_t_total, est_t_compute, ...), "
                 "'auto' or 'none'")
    from rich.console import Console
    from rich.table import Table
    console = Console(width=max(120, Console().width))
    _jax_cache(args.cache)
    from .configs import model_backend, model_names
    names = tuple(model_names()) if args.backend == "all" else tuple(args.backend.split(","))
    bad = [n for n in names if n not in model_names()]
    if bad:
        console.print(f"[red]unknown backend(s) {bad}; choose from {model_names()} or all")
        return 2
    rows = []
    for name in names:
        if args.relabel:
            from .dataset import records_path, relabel
            t0 = time.time()
            n, changed = relabel(model_backend(name), records_path(name, args.cache))
            console.print(f"{name}: relabelled {n} records in {time.time() - t0:.0f} s, {changed} labels changed")
        s = train_backend(name, cache=args.cache, out_dir=args.out, steps1=args.steps1, steps2=args.steps2,
                          seconds=args.seconds, model_top=args.model_top,
                          seed=args.seed, members=args.members, console=console,
                          broad_random=args.broad_random,
                          broad_top=args.broad_top,
                          base=BASE if args.base == "auto" else (None if args.base == "none" else args.base),
                          **{k: v for k, v in (("margin", args.margin), ("tau", args.tau)) if v is not None})
        rows.append(s)
        console.print(f"{name}: {s['rows']} labelled drafts over {s['groups']} shapes; labelling "
                      f"{s['label_seconds']:.0f} s, training {s['train_seconds']:.1f} s, "
                      f"final loss {s['fit'][-1]['loss']:.4f}; weights {s['weights']} "
                      f"({s['weights_bytes'] // 1024} KB)")
    t = Table(title="cost model training (train-set figures)")
    for c in ("backend", "shapes", "drafts", "label s", "train s", "loss", "mse", "rank", "top-1", "rel", "MAPE"):
        t.add_column(c, justify="right")
    for s in rows:
        f = s["fit"][-1]
        t.add_row(s["backend"], str(s["groups"]), str(s["rows"]),
                  f"{s['label_seconds']:.0f}", f"{s['train_seconds']:.1f}",
                  f"{f['loss']:.4f}", f"{f['mse']:.4f}", f"{f['rank']:.4f}", f"{s['train_top1']:.1%}",
                  f"{s['train_rel']:.3f}", f"{s['train_mape']:.1%}")
    console.print(t)
    return 0


if __name__ == "__main__":
    sys.exit(main())
