"""Crash safety: workers writing the tuning cache, the label store and `explore`'s
results are SIGKILLed at random points, one at a time and two at once on one file; after each
restart nothing they reported complete is lost, nothing corrupted is used, torn writes are
skipped, and `explore` resumes with exactly the points it lacks (`tests/crash_harness.py`;
200 kills: `benchmarks/crash_bench.py`)."""
import sys
import warnings

import pytest

from tests.crash_harness import STORES, Harness


@pytest.mark.skipif(sys.platform != "linux", reason="fork + SIGKILL harness")
def test_kills_lose_nothing_completed_and_use_nothing_corrupted(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)        # jax's note on os.fork (the workers use no jax)
        tally = Harness(str(tmp_path), seed=7, tear=0.5).run(kills=18)
    for store in STORES:
        t = tally[store]
        assert t.kills == 6 and t.completed > 0, (store, t)
        assert (t.lost, t.corrupted_used, t.reruns, t.resume_wrong) == (0, 0, 0, 0), (store, t)
        assert t.torn_skipped >= t.torn_injected, (store, t)
    assert sum(tally[s].torn_injected for s in STORES) > 0
