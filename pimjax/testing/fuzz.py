"""A differential fuzzer: random `jnp` programs through `pim_jit` against `jax.jit` -- the
command line over the generator (`generate.py`: `program(draw)`) and the checker (`check.py`:
`check`, `check_all`), whose names it re-exports.

Run `python -m pimjax.testing.fuzz N` (or `make fuzz N=...`) for a run with a
progress bar and a table of outcome x backend x placement counts; a failure
prints `Program.reproducer()`, a script that replays it.  `--counts FILE`
rewrites the counts and the seeds done after every program (atomically), and
`--counts FILE --resume` continues that run where it stopped (a 10 000-program
run may span several sittings); `--counts FILE --log LOG --recheck` runs the
failures it logged again once they are fixed, and moves them to their new
outcome in the file (`recheck`).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from .check import (
    BACKEND_OPTIONS,
    BACKENDS,
    EAGER,
    FAIL_OUTCOMES,
    OK_OUTCOMES,
    OUTCOMES,
    PLACEMENTS,
    Result,
    at_unit_precision,
    check,
    check_all,
    compare,
    reference_of,
)
from .generate import DTYPES, KINDS, ArgSpec, FuzzProgram, HypothesisDraw, RandomDraw, program, programs


# --- the command line ----------------------------------------------------------------------------
def flat_tuner():
    """A tuner whose stand-in model predicts equal cycles for every draft
    (top-1: the first draft), for runs that want speed over the cost model."""
    from pimjax.search.tuner import Tuner

    class Flat:
        def predict(self, features):
            return np.ones(len(features))
    return Tuner(model=Flat(), top_k=1, include_baseline=False)


def _worker(task):
    seed, backends, placements, tuner, timeout_s = task
    t = time.perf_counter()
    prog = program(RandomDraw(seed))
    res = check_all(prog, seed, backends, placements, flat_tuner() if tuner == "flat" else tuner, timeout_s)
    return seed, prog, res, time.perf_counter() - t


def _init_worker(cache_dir):
    _setup(cache_dir)


def _setup(cache_dir):
    import jax
    jax.config.update("jax_numpy_dtype_promotion", "strict")
    jax.config.update("jax_numpy_rank_promotion", "allow")
    if cache_dir:       # the executor's many small XLA programs: kept between runs
        os.makedirs(cache_dir, exist_ok=True)
        jax.config.update("jax_compilation_cache_dir", cache_dir)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


def _keyed(d: dict) -> list[str]:
    """{(outcome, backend, placement): n} as the counts file writes it: "outcome|backend|placement=n"."""
    return ["|".join(k) + f"={v}" for k, v in sorted(d.items())]


def _unkeyed(rows: list[str]) -> dict:
    out = {}
    for row in rows:
        key, n = row.rsplit("=", 1)
        out[tuple(key.split("|"))] = int(n)
    return out


def _ranges(seeds: set) -> list[list[int]]:
    """Sorted seeds as [first, last] runs (a 10 000-program run's file stays small)."""
    out: list[list[int]] = []
    for s in sorted(seeds):
        if out and s == out[-1][1] + 1:
            out[-1][1] = s
        else:
            out.append([s, s])
    return out


def _seeds(ranges: list[list[int]]) -> set[int]:
    """The seeds of `_ranges`' [first, last] runs."""
    return {s for lo, hi in ranges for s in range(lo, hi + 1)}


def _resumed(path: str, run: dict) -> dict | None:
    """The state of the run `path` records, to continue (None: no file yet).
    `n` may differ (a run continued to more programs).  A file of another run
    (another first seed, backends, placements or tuner), or one
    without the seeds it has done (written before `--resume` existed), is a
    ValueError naming the difference: its counts cannot be added to."""
    import json
    if not os.path.exists(path):
        return None
    with open(path) as fh:
        old = json.load(fh)
    if "done" not in old:
        raise ValueError(f"{path} does not record which programs it ran: it cannot be resumed")
    # the same programs (first seed, backends, placements, tuner); n may grow: a run continued further
    diff = [f"{k} {old.get(k)!r} (now {v!r})" for k, v in run.items() if k != "n" and old.get(k) != v]
    if diff:
        raise ValueError(f"{path} records another run: " + ", ".join(diff))
    return dict(done=_seeds(old["done"]), seconds=float(old["seconds"]), counts=_unkeyed(old["counts"]),
                on_pim=_unkeyed(old["on_pim"]), eager=_unkeyed(old["eager"]),
                rechecked=old.get("rechecked", []))


def recheck(counts_path: str, log_path: str, timeout_s: float | None = 300.0, say=print) -> int:
    """Run again, on the code as it is now, the failures `log_path` (the
    `--log` JSON lines) records for the run `counts_path` holds, and move
    each from its old outcome to the new one in that file's counts, listing
    it under "rechecked" ({seed, backend, placement, was, now, detail}): a
    run's record after the bugs it found were fixed.  A failure already
    rechecked is skipped; lines of other runs' seeds or backends are
    ignored; "on_pim" is kept (a fix of a value does not move an op).
    Returns the number of failures the counts still hold (0: none)."""
    import json

    from pimjax.durable import atomic_write, read_records
    with open(counts_path) as fh:
        rec = json.load(fh)
    done = _seeds(rec.get("done", []))
    counts = _unkeyed(rec["counts"])
    rechecked = list(rec.get("rechecked", []))
    seen = {(r["seed"], r["backend"], r["placement"]) for r in rechecked}
    todo = []
    for row in read_records(log_path, "fuzz failure log"):     # a torn line (a killed run) skipped, warned
        key = (row["seed"], row["backend"], row["placement"])
        if (row["seed"] in done and row["backend"] in rec["backends"] and
                row["placement"] in rec["placements"] and key not in seen):
            seen.add(key)
            todo.append(row)
    tuner = flat_tuner() if rec["tuner"] == "flat" else None
    for row in todo:
        seed, b, p = row["seed"], row["backend"], row["placement"]
        prog = program(RandomDraw(seed))
        r = check(prog, b, p, seed, tuner, timeout_s)
        old = (row["outcome"], b, p)
        if counts.get(old, 0) < 1:
            raise ValueError(f"{counts_path} holds no {row['outcome']} on {b} {p} for seed {seed} of {log_path}")
        counts[old] -= 1
        counts[(r.outcome, b, p)] = counts.get((r.outcome, b, p), 0) + 1
        rechecked.append(dict(seed=seed, backend=b, placement=p, was=row["outcome"], now=r.outcome,
                              detail=r.detail[:300]))
        say(f"seed {seed} {b} {p}: {row['outcome']} -> {r.outcome}")
    rec.update(counts=_keyed({k: v for k, v in counts.items() if v}), rechecked=rechecked)
    atomic_write(counts_path, json.dumps(rec))
    return sum(v for k, v in counts.items() if k[0] in FAIL_OUTCOMES)


def main(argv=None) -> int:
    """`python -m pimjax.testing.fuzz N [--seed S] [--workers W] ...`: run
    programs S .. S+N-1, print the outcome table; exit 1 on any failure."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", type=int, nargs="?", default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--placements", default=",".join(PLACEMENTS))
    ap.add_argument("--tuner", default="predict", help="'predict' (the shipped cost model) or 'flat'")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--cache-dir", default=os.path.join(os.path.expanduser("~"), ".cache", "pimjax", "fuzz-xla"))
    ap.add_argument("--log", default=None, help="append one line per failure (checksummed JSON, "
                    "pimjax.durable.append_records) to this file")
    ap.add_argument("--counts", default=None, help="keep the running counts (JSON) in this file, "
                                                    "rewritten atomically after every program")
    ap.add_argument("--resume", action="store_true", help="with --counts: continue the run that file "
                    "records (same first seed, backends, placements, tuner; N may be larger), skipping the "
                    "programs it has done and adding to its counts")
    ap.add_argument("--recheck", action="store_true", help="with --counts and --log: run the failures the "
                    "log records for that run again on the current code, and move them to their new outcome "
                    "in the counts file (listed under 'rechecked')")
    a = ap.parse_args(argv)
    if a.resume and not a.counts:
        ap.error("--resume needs --counts FILE (the run to continue)")
    if a.recheck:
        if not (a.counts and a.log):
            ap.error("--recheck needs --counts FILE and --log FILE (the run, and its failures)")
        _setup(a.cache_dir)
        try:
            return 1 if recheck(a.counts, a.log, a.timeout) else 0
        except (OSError, ValueError, KeyError) as e:      # a file of another run, or not a run's record
            ap.error(f"--recheck: {type(e).__name__}: {e}")
    import json

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from pimjax.durable import append_records, atomic_write
    backends, placements = tuple(a.backends.split(",")), tuple(a.placements.split(","))
    tuner = None if a.tuner == "predict" else a.tuner
    run = dict(seed=a.seed, n=a.n, backends=list(backends), placements=list(placements), tuner=a.tuner)
    try:
        prior = _resumed(a.counts, run) if a.resume else None
    except ValueError as e:
        ap.error(str(e))
    done_seeds = set(prior["done"]) if prior else set()
    tasks = [(s, backends, placements, tuner, a.timeout) for s in range(a.seed, a.seed + a.n) if s not in done_seeds]
    console = Console()
    counts: dict = dict(prior["counts"]) if prior else {}
    pim_runs: dict = dict(prior["on_pim"]) if prior else {}
    eager_runs: dict = dict(prior["eager"]) if prior else {}
    failures = []
    before_s = prior["seconds"] if prior else 0.0
    if prior:
        console.print(f"resuming {a.counts}: {len(done_seeds)} of {a.n} programs done, {len(tasks)} to run")
    t0 = time.perf_counter()
    _setup(a.cache_dir)
    if a.workers > 1:
        import multiprocessing as mp
        pool = mp.get_context("spawn").Pool(a.workers, _init_worker, (a.cache_dir,), maxtasksperchild=200)
        results = pool.imap_unordered(_worker, tasks)
    else:
        pool, results = None, map(_worker, tasks)
    cols = (TextColumn("fuzz"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[rate]:.2f} prog/s  failures {task.fields[fails]}"))
    with Progress(*cols, console=console) as bar:
        job = bar.add_task("fuzz", total=a.n, completed=len(done_seeds), rate=0.0, fails=0)
        done = 0
        for seed, prog, res, _dt in results:
            done += 1
            done_seeds.add(seed)
            for (b, p), r in res.items():
                counts[(r.outcome, b, p)] = counts.get((r.outcome, b, p), 0) + 1
                pim_runs[(b, p)] = pim_runs.get((b, p), 0) + (r.on_pim > 0)
                if r.detail.startswith(EAGER):
                    eager_runs[(b, p)] = eager_runs.get((b, p), 0) + 1
                if r.outcome not in OK_OUTCOMES:
                    failures.append((seed, prog, b, p, r))
                    console.print(f"[red]FAIL[/] seed {seed} {prog.kind} {b} {p}: {r.outcome}: {r.detail}")
                    if a.log:       # checksummed lines: `--recheck` reads them back past a torn tail
                        append_records(a.log, [dict(seed=seed, kind=prog.kind, backend=b, placement=p,
                                                    outcome=r.outcome, detail=r.detail, source=prog.source)])
            bar.update(job, advance=1, rate=done / (time.perf_counter() - t0), fails=len(failures))
            if a.counts:            # a run stopped early keeps its figures, and `--resume` continues it
                atomic_write(a.counts, json.dumps(dict(
                    run, programs=len(done_seeds), done=_ranges(done_seeds),
                    seconds=before_s + time.perf_counter() - t0, workers=a.workers,
                    counts=_keyed(counts), on_pim=_keyed(pim_runs), eager=_keyed(eager_runs),
                    **({"rechecked": prior["rechecked"]} if prior and prior["rechecked"] else {}))))
    if pool is not None:
        pool.close()
    elapsed = before_s + time.perf_counter() - t0
    ran = len(done_seeds)
    table = Table(title=f"{ran} programs (seeds {a.seed}..{a.seed + a.n - 1}) in {elapsed:.0f} s: "
                        f"{ran / elapsed:.2f} programs/s, {a.workers} worker(s), tuner {a.tuner}"
                        + (" (resumed)" if prior else ""))
    table.add_column("backend")
    table.add_column("placement")
    shown = [o for o in OUTCOMES if o in OK_OUTCOMES or any(k[0] == o for k in counts)]
    for o in shown:
        table.add_column(o, justify="right")
    table.add_column("ran an op on PIM", justify="right")
    for b in backends:
        for p in placements:
            table.add_row(b, p, *(str(counts.get((o, b, p), 0)) for o in shown), str(pim_runs.get((b, p), 0)))
    eager = sum(v for k, v in eager_runs.items())
    if eager:
        table.caption = (f"{eager} 'equal' result(s) equal jax op by op where jax.jit's fused rounding differs: "
                         + ", ".join(f"{b} {p} {v}" for (b, p), v in sorted(eager_runs.items())))
    if counts.get(("invalid", "jax", "-")):
        table.add_row("jax", "-", f"{counts[('invalid', 'jax', '-')]} programs jax rejects (generator bugs)")
    console.print(table)
    for seed, prog, b, p, r in failures[:5]:
        console.print(f"--- seed {seed}, {b}, {p}: {r.outcome}\n{prog.reproducer(seed, b, p)}")
    # a resumed run's earlier sittings count too: their failures are in `counts`, not in `failures`
    return 1 if failures or any(k[0] in FAIL_OUTCOMES for k in counts) else 0


# the generator's and the checker's names, re-exported: `fuzz` is the one name a user imports
__all__ = ["BACKENDS", "PLACEMENTS", "BACKEND_OPTIONS", "OUTCOMES", "OK_OUTCOMES", "FAIL_OUTCOMES", "EAGER",
           "ArgSpec", "FuzzProgram", "DTYPES", "KINDS", "Result", "RandomDraw", "HypothesisDraw", "program",
           "programs", "check", "check_all", "compare", "reference_of", "at_unit_precision", "flat_tuner", "recheck",
           "main"]


if __name__ == "__main__":
    sys.exit(main())
