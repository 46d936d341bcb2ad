"""DCC's simulator, ported (`pimjax/backends/dcc`), against DCC's own artifact
(`../shared/reference/dcc-artifact.csv`, the cycles SPIN-Research-Group/DCC @ 7ffb80e reports per
tiling) on a fast sample: every RED / VA row and a few small GEMV rows (the compiled controller; the
Python one in the coupled row and `test_dcc_backend.py`'s comparison); the whole CSV is
`experiments/dcc_reference.py` (a few minutes).  Also the port's errors for tilings the artifact cannot run."""
from __future__ import annotations

import json

import pytest

from experiments import dcc_reference
from pimjax.backends.dcc import predict, validate, wraps
from tests.backends.dcc.helpers import artifact_rows

TOLERANCE = 0.10
# small GEMV rows (< 0.5 s each): (backend, shape, tiling)
GEMV_SAMPLE = [("attacc", "1,32,128,512", [[1, 32, 1], [2, 2, 32], [6, 1, 86]]),
               ("attacc", "1,32,128,512", [[1, 16, 2], [2, 4, 16], [8, 1, 64]]),
               ("hbmpim", "1,32,128,512", [[16, 1, 2], [1, 4, 32], [1, 16, 32]])]


def _key(backend, kernel, shape, tiling):
    return (backend, kernel, shape.replace(" ", ""), json.dumps(tiling, separators=(",", ":")))


@pytest.fixture(scope="module")
def sample():
    """{(backend, kernel, shape, tiling): (ours, theirs)} for every RED / VA row and the GEMV sample."""
    rows = artifact_rows()
    want = {_key(b, "gemv", s, t) for b, s, t in GEMV_SAMPLE}
    out = {}
    for r in rows:
        k = _key(r["backend"], r["kernel"], r["shape"], json.loads(r["tiling"]))
        if r["kernel"] in ("red", "va") or k in want:
            out[k] = (dcc_reference.run_row(r), int(r["cycles"]))
    assert want <= set(out), want - set(out)
    return out


def test_sample_within_ten_percent(sample):
    assert len(sample) >= 231 + len(GEMV_SAMPLE)
    bad = [(k, o, t) for k, (o, t) in sample.items() if abs(o - t) / t > TOLERANCE]
    assert not bad, bad[:5]
    # in fact cycle-exact on this sample
    assert all(o == t for o, t in sample.values())


def test_best_tiling_matches_on_every_red_va_group(sample):
    groups = {}
    for (b, k, s, _), (o, t) in sample.items():
        if k in ("red", "va"):                      # every row of these groups is sampled
            groups.setdefault((b, k, s), []).append((o, t))
    assert len(groups) == 8
    for g, ot in groups.items():
        ours_best = min(range(len(ot)), key=lambda i: ot[i][0])
        assert ot[ours_best][1] == min(t for _, t in ot), g


def test_spearman_on_attacc_red_4x4096(sample):
    ot = [v for k, v in sample.items() if k[:3] == ("attacc", "red", "4,4096")]
    assert len(ot) == 62
    assert dcc_reference.spearman([o for o, _ in ot], [t for _, t in ot]) > 0.95


def test_coupled_makes_a_wrapping_row_exact():
    """An HBM-PIM GEMV tiling whose rounded-up channels wrap: 1 cycle off with the busiest channel alone,
    exact with all 16 channels behind the shared frontend (~10 s)."""
    rows = artifact_rows()
    t = [[1, 11, 3], [7, 1, 19], [2, 5, 52]]
    theirs = [int(r["cycles"]) for r in rows
              if _key(r["backend"], r["kernel"], r["shape"], json.loads(r["tiling"])) == _key("hbmpim", "gemv", "1,32,128,512", t)]
    assert theirs == [12514]
    assert wraps(t)
    assert predict("hbmpim", "gemv", [1, 32, 128, 512], t, coupled="auto") == 12514


def test_report_last_line(sample, capsys):
    rows = [r for r in artifact_rows() if r["backend"] == "hbmpim" and r["kernel"] == "va" and r["shape"] == "1,4096"]
    _, bad, summary = dcc_reference.check(rows, 10.0)
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert bad == 0 and summary["same_best"] == 1
    assert last == "15 rows, worst |error| 0.00 %, 0 outside ±10 %; median Spearman 1.000, same best 1/1"


@pytest.mark.parametrize("backend,kernel,shape,tiling,why", [
    ("attacc", "va", [1, 4096], [[1, 1, 1], [16, 16, 16]], "no trace generator for attacc/va"),
    ("upmem", "gemv", [1, 32, 128, 512], [[16, 1, 2], [1, 4, 32], [1, 16, 32]], "no trace generator"),
    ("hbmpim", "red", [1, 4096], [[1, 1, 1], [16, 16, 16], [1, 1, 1]], "takes 2 [g, c, t] triples"),
    ("attacc", "gemv", [1, 32, 128, 512], [[16, 1, 2], [1, 4, 32]], "takes 3 [g, c, t] triples"),
    ("hbmpim", "red", [1, 4096], [[1, 1, 1], [16, 0, 16]], "c = 0 must be positive"),
    ("hbmpim", "red", [1, 4096], [[1, 1, -1], [16, 16, 16]], "t = -1 must be positive"),
    ("hbmpim", "red", [1, 4096], [[1, 1, 1], [16, 16]], "has 2 entries, not 3"),
    ("hbmpim", "red", [1, 4096], [[1, 1, 1], [16, 16, 1.5]], "is not an integer"),
    ("hbmpim", "red", [1, 4096], [[1, 1, 1], [16, 16, 8]], "covers 2048 < 4096"),
    ("hbmpim", "red", [1, 4096, 1], [[1, 1, 1], [16, 16, 16]], "shape of 2 entries"),
    ("attacc", "red", [1, 4096], [[2, 1, 1], [16, 16, 16]], "32 groups"),
])
def test_bad_tiling_says_why(backend, kernel, shape, tiling, why):
    with pytest.raises(ValueError, match=why.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        predict(backend, kernel, shape, tiling)
    with pytest.raises(ValueError):
        validate(backend, kernel, shape, tiling)


def test_coupled_argument_checked():
    with pytest.raises(ValueError, match="coupled"):
        predict("hbmpim", "red", [1, 4096], [[1, 1, 1], [16, 16, 16]], coupled="sometimes")


def test_tiling_not_modified():
    t = [[1, 1, 1], [9, 13, 36]]
    predict("hbmpim", "red", [1, 4096], t)
    assert t == [[1, 1, 1], [9, 13, 36]]
