"""The experiment scripts' input contracts: every row / case is checked and a
bad one is named; an empty input is not a pass."""
from __future__ import annotations

import json

import numpy as np
import pytest

from experiments import pimflow_reference, predictor_accuracy, timing_sweep, validate_reference
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

    from pimjax.backends import baseline
    from pimjax.hw import get_backend
    from pimjax.kernels import kernel_op
    from pimjax.lower import lower
    from pimjax.search.tuner import Tuner
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


def test_estimate_spread_measures_within_shape_disagreement():
    """`spread` ignores a per-shape scale (it does not change a shape's
    ranking) but not a per-draft one; `picks` says whether the smallest
    estimate is the simulated optimum, shape by shape."""
    from experiments.estimate_spread import picks, spread

    sim = np.array([100.0, 200.0, 400.0, 50.0, 60.0])
    group = np.array([0, 0, 0, 1, 1])
    scaled = sim * np.where(group == 0, 2.0, 0.5)                      # a constant factor per shape
    s = spread(sim, scaled, group)
    assert s["spread"] == pytest.approx(0.0, abs=1e-12) and s["exact"] == 0.0 and s["drafts"] == 5
    assert spread(sim, sim, group)["exact"] == 1.0
    noisy = sim * np.array([1.0, 2.0, 1.0, 1.0, 1.0])                   # one draft off by 2x
    expected = np.sqrt(np.var(np.log([1.0, 0.5, 1.0])) / 2)            # shape 1 has zero variance
    assert spread(sim, noisy, group)["spread"] == pytest.approx(expected)
    assert spread(sim, np.zeros(5), group)["drafts"] == 0             # a phase no draft has
    assert picks(sim, scaled, group) == 1.0
    swapped = np.array([100.0, 200.0, 400.0, 60.0, 50.0])              # shape 1 estimated the wrong way round
    assert picks(sim, swapped, group) == 0.5


def test_estimate_spread_on_labelled_records(tmp_path):
    """The script featurises a label cache: UPMEM's closed form equals the
    simulator (spread 0, its smallest estimate optimal); no cache is exit 2."""
    from experiments import estimate_spread
    from pimjax.costmodel.dataset import append_records, records_path, row_of, simulate
    from pimjax.costmodel.kernels import case_drafts, lower_case, make_case
    from pimjax.hw.presets import get_backend

    assert estimate_spread.main(["--cache", str(tmp_path), "--backend", "upmem", "--out", str(tmp_path)]) == 2
    be = get_backend("upmem")
    case = make_case(be, "va", (1000,))
    table = case_drafts(case, be)
    idx = np.linspace(0, len(table) - 1, 6).astype(int)
    truth = simulate([lower_case(case, table[int(i)], be) for i in idx], be)
    append_records(records_path("upmem", str(tmp_path)),
                   [{"backend": "upmem", "kernel": "va", "shape": [1000], "row": row_of(table, int(i)),
                     "source": "random", "cycles": float(truth[k, 0]), "phases": [float(v) for v in truth[k, 1:]]}
                    for k, i in enumerate(idx)])
    assert estimate_spread.main(["--cache", str(tmp_path), "--backend", "upmem", "--out", str(tmp_path)]) == 0
    rep = json.loads((tmp_path / "estimate_spread.json").read_text())["upmem"]
    assert rep["drafts"] == 6 and rep["shapes"] == 1 and rep["picks"] == 1.0
    assert rep["total"]["spread"] < 1e-4 and rep["total"]["median"] == pytest.approx(1.0, rel=1e-4)


def test_gemv_readback_follows_the_simulators_read_path():
    """The reference's read-back reads one burst per output, 8 per unit, the
    units of a pCH, then the next pCH (PIMKernel::readResult), as a run of its
    own: the busiest pCH reads min(M, 64) bursts for M <= 4096, so the
    read-back takes the same time for M = 64 .. 4096; beyond, every 4096
    outputs add 64 bursts per pCH, streamed over alternating bank groups
    tCCD_S apart (a 16 384-output read-back meets no refresh in its run)."""
    from pimjax.hw import get_backend
    t = get_backend("hbm-pim").timing

    def rb(m):
        return validate_reference.our_cycles(_row(shape=f"{m}x1024", channels="64", metric="readback"))
    small = {m: rb(m) for m in (64, 1024, 4096)}
    assert len(set(small.values())) == 1
    assert rb(16384) - small[4096] == (256 - 64) * t.tCCD_S


def test_dse_sweeps_points_and_pareto():
    """dse_sweeps: a structural point reaches the Backend (stacks -> channels, units -> the level's
    units per channel, buffer -> GEMV buffer entries); the Pareto mask keeps exactly the rows no
    other row beats in every column and strictly in one."""
    import pandas as pd

    from experiments import dse_sweeps as d
    be = d.structural_point(2, 16, 8)
    assert (be.n_groups, be.cores_per_group, be.core.n_input_regs, be.variant) == (32, 16, 8, "bg-pc")
    assert d.area_proxy(be) == {"units": 512, "buffer_kib": 512 * 8 * be.core.reg_bytes / 1024}
    assert len(d.structure_grid()) == len(d.STACKS) * len(d.LEVELS) * len(d.BUFFERS)
    df = pd.DataFrame({"t": [1.0, 2.0, 3.0, 2.0, 1.0], "e": [3.0, 2.0, 1.0, 3.0, 3.0]})
    # (2, 3) is beaten by (2, 2); the two (1, 3) rows tie, neither beats the other
    assert list(d.pareto(df, ["t", "e"])) == [True, True, True, False, True]


def _fig14_json(tmp_path, layers):
    from experiments import pimflow_fig14 as F
    path = tmp_path / "fig14.json"
    path.write_text(json.dumps({"model": "m", "quick": False, "configs": list(F.CONFIGS), "paper_pct": F.PAPER,
                                "layers": layers, "seconds": 0}))
    return str(path)


def test_pimflow_fig14_table_weights_layers_by_count(tmp_path):
    """fig14_table: per optimisation the count-weighted speedup of the layers'
    total time and the geometric mean of the per-layer speedups, beside the
    paper's 9 / 14 / 22 %; derived here from two made-up layers."""
    from experiments import pimflow_fig14 as F
    a = {"newton+": 100.0, "newton+gw": 80.0, "newton+gb": 50.0, "newton++": 40.0}
    b = {"newton+": 200.0, "newton+gw": 200.0, "newton+gb": 100.0, "newton++": 100.0}
    layers = [dict(shape=[7, 7, 8, 8, 1], count=3, names=["a"], **a, **{k + F.NOREF: v / 2 for k, v in a.items()}),
              dict(shape=[7, 7, 8, 16, 1], count=1, names=["b"], **b, **{k + F.NOREF: v for k, v in b.items()})]
    df = F.fig14_table(_fig14_json(tmp_path, layers))
    assert list(df.index) == ["newton+gw", "newton+gb", "newton++"]
    assert df.loc["newton+gw", "ours_pct"] == round(100 * (500 / 440 - 1), 1)
    assert df.loc["newton++", "ours_pct"] == round(100 * (500 / 220 - 1), 1)
    assert df.loc["newton+gw", "ours_geomean_pct"] == round(100 * ((100 / 80) ** 0.5 - 1), 1)
    assert df.loc["newton+gw", "ours_norefresh_pct"] == round(100 * (350 / 320 - 1), 1)
    assert list(df["paper_pct"]) == [9.0, 14.0, 22.0]
    assert F.main(["--out", str(tmp_path / "missing.json")]) == 2          # no cache: says so


def test_pimflow_fig14_cache_is_current():
    """The committed cache covers the model's distinct PIM-candidate CONV
    shapes with their counts, every configuration timed, and hiding never
    slower than the same buffers without it."""
    from experiments import pimflow_fig14 as F
    with open(F.DATA) as f:
        data = json.load(f)
    layers = F.layer_set(data["model"], data["quick"])
    assert [(l["shape"], l["count"]) for l in data["layers"]] == [(l["shape"], l["count"]) for l in layers]
    noref = F.NOREF
    for l in data["layers"]:       # refresh off: hiding never slower (with it, a refresh may move)
        assert l["newton+gw" + noref] <= l["newton+" + noref] and l["newton++" + noref] <= l["newton+gb" + noref]
    assert len(F.fig14_table()) == 3


@pytest.mark.slow
def test_pimflow_fig14_recomputes_a_cached_layer():
    """One cached layer measured again gives the cached times."""
    from experiments import pimflow_fig14 as F
    with open(F.DATA) as f:
        data = json.load(f)
    lay = min(data["layers"], key=lambda l: l["shape"][0] * l["shape"][1] * l["shape"][2] * l["shape"][3])
    again = F.time_layer(lay["shape"])
    for c in F.CONFIGS:
        assert again[c] == pytest.approx(lay[c], rel=1e-6), c
        assert again[c + F.NOREF] == pytest.approx(lay[c + F.NOREF], rel=1e-6), c


PIMFLOW_HEADER = "layer,H,W,C,F,K,stride,config,buffers,gwrite_hiding,cycles,GWRITE,G_ACT,COMP,READRES\n"


def test_pimflow_reference_exit_codes(tmp_path, capsys):
    """PIMFlow's layer rows: ours within the tolerance passes, twice the cycles
    or a count off fails, a bad config is named and fails, no rows or no
    `cycles` column is 2; validate_reference hands such a file over."""
    from pimjax.backends.newton.reference import reference_cycles
    row = dict(layer="t", H=6, W=6, C=24, F=40, K=1, stride=1, config="newton++", buffers=4, gwrite_hiding=1)
    ours = reference_cycles(row)
    line = ("t,6,6,24,40,1,1,newton++,4,1,{c},{GWRITE},{G_ACT},{COMP},{READRES}\n"
            .format(c=ours["cycles"], **{k: ours[k] for k in ("GWRITE", "G_ACT", "COMP", "READRES")}))
    path = _csv(tmp_path, line, header=PIMFLOW_HEADER)
    assert pimflow_reference.main(["--csv", path, "--out", ""]) == 0
    assert validate_reference.main(["--csv", path]) == 0
    doubled = line.replace(f",{ours['cycles']},", f",{2 * ours['cycles']},")
    assert pimflow_reference.main(["--csv", _csv(tmp_path, doubled, header=PIMFLOW_HEADER), "--out", ""]) == 1
    off = line.rsplit(",", 1)[0] + f",{2 * ours['READRES']}\n"
    assert pimflow_reference.main(["--csv", _csv(tmp_path, off, header=PIMFLOW_HEADER), "--out", ""]) == 1
    bad = line.replace("newton++", "newton+++")
    assert pimflow_reference.main(["--csv", _csv(tmp_path, bad, header=PIMFLOW_HEADER), "--out", ""]) == 1
    assert "cannot be built" in capsys.readouterr().out
    assert pimflow_reference.main(["--csv", _csv(tmp_path, "", header=PIMFLOW_HEADER), "--out", ""]) == 2
    assert pimflow_reference.main(["--csv", _csv(tmp_path, line, header=PIMFLOW_HEADER.replace(",cycles", "")),
                                   "--out", ""]) == 2


def test_gpu_residual_bound_learns_a_shape_residual_and_not_noise():
    """A residual that is a function of the shape is corrected into the band on held-out rows;
    noise wider than the band is not; too few training rows is refused."""
    from experiments import gpu_residual_bound as B
    rng = np.random.default_rng(1)
    x = rng.integers(0, 8, size=(400, 2)).astype(float)
    shaped = 0.5 * np.sin(x[:, 0]) + 0.3 * x[:, 1] / 8          # up to +-0.8 in ln: far outside ln 1.25
    train, test = np.arange(400) % 2 == 0, np.arange(400) % 2 == 1
    assert np.mean(np.abs(shaped[test]) < np.log(1.25)) < 0.7
    assert B.corrected_share(x[train], shaped[train], x[test], shaped[test], k=1) == 1.0
    noise = rng.normal(0.0, 1.0, 400)
    assert B.corrected_share(x[train], noise[train], x[test], noise[test], k=5) < 0.5
    with pytest.raises(ValueError, match="fewer than k"):
        B.corrected_share(x[:2], shaped[:2], x[test], shaped[test], k=3)
