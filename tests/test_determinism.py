"""Determinism: the same compile in two fresh processes under different
PYTHONHASHSEEDs gives the same drafts, command programs and simulated cycles on every backend
(`tests/determinism_probe.py` hashes them).  `explore` over 2 processes against the serial run:
`tests/studies/test_explore.py::test_two_local_processes_and_shards_give_the_serial_rows`."""
import os
import subprocess
import sys

import pytest

from tests.determinism_probe import BACKENDS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow          # two fresh processes: ~15-35 s on this box
def test_two_fresh_processes_with_other_hash_seeds_compile_the_same():
    procs = []
    for seed in ("0", "4242"):
        env = dict(os.environ, PYTHONHASHSEED=seed, PIMJAX_XLA_CACHE="0")
        procs.append(subprocess.Popen([sys.executable, "-W", "ignore", "-m", "tests.determinism_probe"],
                                      cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-2000:]
        outs.append(out.split("\n"))
    lines = [ln.split() for ln in outs[0] if ln.strip()]
    assert [ln[0] for ln in lines] == list(BACKENDS) and all(int(ln[1]) > 0 for ln in lines), lines
    assert outs[0] == outs[1]
