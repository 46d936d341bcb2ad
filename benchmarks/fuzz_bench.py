"""Fuzzer throughput (issue 44): programs / s of `pimjax.testing.fuzz` in one
process, the shipped cost model's tuner beside the flat stand-in (top-1
draft), each program on 4 backends x 2 placements with two calls.

    .venv/bin/python benchmarks/fuzz_bench.py [N] [--seed S]

The large runs are `make fuzz N=... FUZZ_ARGS="--workers W"`; their figures
are in benchmarks/README.md ("fuzz")."""
from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import time

from rich.console import Console
from rich.table import Table

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # this checkout's pimjax
from pimjax.testing import fuzz  # noqa: E402


def run(n: int, seed: int, tuner: str) -> tuple[float, collections.Counter]:
    """(seconds, Counter of outcomes) of programs seed .. seed + n - 1."""
    outcomes: collections.Counter = collections.Counter()
    t0 = time.perf_counter()
    for s in range(seed, seed + n):
        prog = fuzz.program(fuzz.RandomDraw(s))
        res = fuzz.check_all(prog, s, tuner=fuzz.flat_tuner() if tuner == "flat" else None)
        outcomes.update(r.outcome for r in res.values())
    return time.perf_counter() - t0, outcomes


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=int, nargs="?", default=8)
    ap.add_argument("--seed", type=int, default=500)
    ap.add_argument("--one", default=None, help="(internal) run one tuner here, print JSON")
    a = ap.parse_args()
    if a.one:
        fuzz._setup(None)       # strict promotion as in the tests; no persistent XLA cache
        fuzz.check_all(fuzz.program(fuzz.RandomDraw(0)), 0, tuner=fuzz.flat_tuner())   # imports, first compiles
        sec, out = run(a.n, a.seed, a.one)
        print(json.dumps(dict(sec=sec, out=out)))
        return
    table = Table(title=f"fuzz throughput: programs {a.seed}..{a.seed + a.n - 1}, one process")
    for col in ("tuner", "programs", "s", "programs / s", "runs / s", "outcomes"):
        table.add_column(col, justify="right" if col not in ("tuner", "outcomes") else "left")
    rates = {}
    for tuner in ("flat", "predict"):
        # each tuner in a fresh process: neither reuses the other's in-memory XLA compilations
        proc = subprocess.run([sys.executable, __file__, str(a.n), "--seed", str(a.seed), "--one", tuner],
                              capture_output=True, text=True, check=True)
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        sec, out = r["sec"], collections.Counter(r["out"])
        rates[tuner] = a.n / sec
        table.add_row(tuner, str(a.n), f"{sec:.1f}", f"{a.n / sec:.3f}", f"{sum(out.values()) / sec:.2f}",
                      ", ".join(f"{k} {v}" for k, v in sorted(out.items())))
    table.caption = f"flat / predict: {rates['flat'] / rates['predict']:.2f}x"
    Console().print(table)


if __name__ == "__main__":
    main()
