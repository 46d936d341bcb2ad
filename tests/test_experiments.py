"""The experiment scripts' input contracts: every row / case is checked and a
bad one is named; an empty input is not a pass."""
from __future__ import annotations

import json

import pytest

from experiments import predictor_accuracy, timing_sweep, validate_reference
from pimjax.costmodel.evaluate import check_case

HEADER = "backend,variant,kernel,shape,channels,refresh,metric,cycles\n"


def _csv(tmp_path, body: str, header: str = HEADER) -> str:
    path = tmp_path / "ref.csv"
    path.write_text(header + body)
    return str(path)


def _row(**kw) -> dict:
    row = dict(backend="hbm-pim", variant="default", kernel="gemv", shape="64x64", channels="4",
               refresh="yes", metric="pim", cycles="1")
    row.update(kw)
    return row


def test_validate_reference_exit_codes(tmp_path, capsys):
    ours = validate_reference.our_cycles(_row())
    line = f"hbm-pim,default,gemv,64x64,4,yes,pim,{ours}\n"
    assert validate_reference.main(["--csv", _csv(tmp_path, line)]) == 0
    assert validate_reference.main(["--csv", _csv(tmp_path, line.replace(f"{ours}", f"{2 * ours}"))]) == 1
    # a bad row is named by its line, the good ones still run, and the run fails
    assert validate_reference.main(["--csv", _csv(tmp_path, line + "hbm-pim,default,gemv,64by64,4,yes,pim,9\n")]) == 1
    out = capsys.readouterr().out
    assert "line 3: ValueError" in out and "1 could not be computed" in out
    assert validate_reference.main(["--csv", _csv(tmp_path, "")]) == 2                       # header only
    assert validate_reference.main(["--csv", _csv(tmp_path, "", header="")]) == 2            # empty file
    assert validate_reference.main(["--csv", _csv(tmp_path, line, header=HEADER.replace(",cycles", ""))]) == 2
    spaced = HEADER.replace(",", ", ")                                                       # "a, b" headers
    assert validate_reference.main(["--csv", _csv(tmp_path, line.replace(",", ", "), header=spaced)]) == 0


@pytest.mark.parametrize("field, value, message", [
    ("metric", "latency", "metric"), ("refresh", "y", "refresh"), ("channels", "0", "channels"),
    ("cycles", "0", "positive"), ("variant", "bank-pc", "one variant"), ("backend", "newton", "backend"),
])
def test_validate_reference_rejects_bad_fields(field, value, message):
    with pytest.raises(ValueError, match=message):
        validate_reference.our_cycles(_row(**{field: value}))


def test_attacc_nonpim_is_the_host_streaming_the_operands():
    """`nonpim` is the host reading all operands from the same memory, no PIM
    (it was the PIM program's total): a 4096 x 4096 fp16 matrix is 32 MiB, far
    more than the PIM frame."""
    row = dict(backend="attacc", variant="bank-pc", kernel="gemv", shape="4096x4096", channels="16",
               refresh="yes", cycles="1")
    pim = validate_reference.our_cycles({**row, "metric": "pim"})
    nonpim = validate_reference.our_cycles({**row, "metric": "nonpim"})
    assert nonpim > 5 * pim


@pytest.mark.parametrize("case, message", [
    ({"backend": "hbmpim", "kernel": "gemv", "shape": [64, 64]}, "unknown backend"),
    ({"backend": "hbm-pim", "kernel": "gemmv", "shape": [64, 64]}, "unknown kernel"),
    ({"backend": "hbm-pim", "kernel": "gemv", "shape": [64]}, "2 sizes"),
    ({"backend": "hbm-pim", "kernel": "va", "shape": [0]}, "positive"),
    ({"backend": "hbm-pim", "kernel": "va"}, "missing shape"),
    ({"backend": "hbm-pim", "kernel": "va", "shape": "1024"}, "list of integers"),
    (["hbm-pim", "va", [1024]], "object"),
])
def test_predictor_accuracy_cases_are_checked_up_front(case, message):
    with pytest.raises(ValueError, match=message):
        check_case(case)


def test_predictor_accuracy_refuses_bad_or_empty_case_files(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"backend": "hbm-pim", "kernel": "va", "shape": [1024]},
                               {"backend": "hbmpim", "kernel": "va", "shape": [1024]}]))
    with pytest.raises(SystemExit) as exc:
        predictor_accuracy.main(["--cases", str(bad), "--cache", str(tmp_path / "c"), "--out", str(tmp_path)])
    assert exc.value.code == 2 and "case 2" in capsys.readouterr().err
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    assert predictor_accuracy.main(["--cases", str(empty), "--cache", str(tmp_path / "c"),
                                    "--out", str(tmp_path)]) == 2


def test_timing_sweep_writes_the_grid_each_point_as_cycles_gives(tmp_path, capsys):
    """Every CSV row is the baseline / tuned program timed by `cycles` on the
    backend with that (x, y) timing; bad parameters are usage errors."""
    import csv

    from pimjax.costmodel.tune import Tuner
    from pimjax.hw import get_backend
    from pimjax.kernels import kernel_op
    from pimjax.lower import lower
    from pimjax.partition.baselines import baseline
    from pimjax.sim.cycles import cycles

    args = ["--kernel", "red", "--shape", "8", "1024", "--x", "tRP", "10", "20", "--y", "tCCD_AB", "2", "6",
            "--n", "3", "--out", str(tmp_path)]
    assert timing_sweep.main(args) == 0
    rows = list(csv.DictReader(open(tmp_path / "timing_sweep_hbm-pim_red.csv")))
    assert len(rows) == 9
    be = get_backend("hbm-pim")
    op, shapes = kernel_op("red", [8, 1024])
    progs = [lower(op, baseline(op, be), be, shapes), Tuner("predict").choose(op, be, shapes).program]
    for r in rows[::4]:
        bv = be.replace(timing=be.timing.replace(tRP=float(r["tRP"]), tCCD_AB=float(r["tCCD_AB"])))
        got = [float(r["baseline_cycles"]), float(r["tuned_cycles"])]
        want = [float(cycles(p, bv).total_cycles) for p in progs]
        assert got == pytest.approx(want, abs=0.051)              # the CSV keeps one decimal
    assert (tmp_path / "timing_sweep_hbm-pim_red.png").stat().st_size > 0
    for bad in (["--x", "tBOGUS", "1", "2"], ["--x", "tRP", "5", "3"], ["--x", "tCCD_AB", "1", "2"], ["--n", "1"]):
        with pytest.raises(SystemExit) as e:
            timing_sweep.main(bad + ["--out", str(tmp_path)])
        assert e.value.code == 2
