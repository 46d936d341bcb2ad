"""Crash safety under SIGKILL (issue #44): 200 kills across the three stores pimjax keeps.

    .venv/bin/python benchmarks/crash_bench.py [--kills 200] [--seed 0] [--tear 0.25]

`tests/crash_harness.py`: forked workers write the tuning cache (`TuneCache.put`), the label
store (`LabelStore.append`, 16 labels a call) and `explore`'s results (a 60-point grid with a
cheap objective, resuming from the file), each reporting every completed entry on a file it
fsyncs before it goes on; each is SIGKILLed after a random 0-200 ms, alone or with a second
writer of the same file, and the store is read back by pimjax's own reader (a restart).  With
chance `--tear` a kill also leaves the bytes a kill inside write(2) would (a line's prefix; a
never-renamed temporary file of the tuning cache): a real kill lands there rarely.  Every 8
`explore` kills, a last `explore` on the file must evaluate exactly the points it lacks.

Columns: kills; entries completed (reported before the kill); lost (reported, then missing or
different); corrupted used (an entry the reader returned that is not what its id says); torn
injected / torn skipped (torn lines or temporary files the restart skipped, natural ones
included); reruns (an `explore` worker started a point already done) and resume wrong (the
last `explore` evaluated a point it had, or missed one it lacked).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)        # this checkout's pimjax and tests/, not an installed one


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tear", type=float, default=0.25)
    a = ap.parse_args()
    from tests.crash_harness import STORES, Harness
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)       # jax's note on os.fork (the workers use no jax)
        tally = Harness(tmp, seed=a.seed, tear=a.tear).run(
            a.kills, progress=lambda n, k: print(f"\r{n}/{k} kills", end="", file=sys.stderr, flush=True))
    print(file=sys.stderr)
    cols = ("kills", "completed", "lost", "corrupted_used", "torn_injected", "torn_skipped", "reruns",
            "resume_wrong")
    print(f"{a.kills} SIGKILLs, seed {a.seed}, tear {a.tear}, {time.perf_counter() - t0:.0f} s\n")
    print("| store       | " + " | ".join(cols) + " |")
    print("|-------------|" + "|".join("-" * (len(c) + 2) for c in cols) + "|")
    rows = [(s, tally[s]) for s in STORES]
    total = {c: sum(getattr(t, c) for _, t in rows) for c in cols}
    for name, t in rows + [("all", None)]:
        vals = [getattr(t, c) if t else total[c] for c in cols]
        print(f"| {name:<11} | " + " | ".join(f"{v:>{len(c)}}" for v, c in zip(vals, cols)) + " |")
    bad = total["lost"] + total["corrupted_used"] + total["reruns"] + total["resume_wrong"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
