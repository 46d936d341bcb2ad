"""experiments/dcc_figures.py: the DCC figure helpers the notebooks call.
Small cases only; the notebooks themselves run in tests/test_notebooks.py."""
from __future__ import annotations

import math

import numpy as np
import pytest

pd = pytest.importorskip("pandas")

from experiments import dcc_figures as dcc  # noqa: E402


def test_systems_are_dccs():
    a, h = dcc.attacc_system(), dcc.hbm_pim_system()
    for be in (a, h):
        assert be.system.host.mem_bandwidth == 3352e9 and be.system.host.bandwidth_efficiency == 0.81
        assert be.system.host.peak_flops == 312e12
    assert a.n_groups == 16 and a.cores_per_group == 64           # one HBM3 cube, DCC's 16 x 64
    assert h.n_groups * h.cores_per_group == 512                  # as many units as DCC's HBM-PIM cube
    assert dcc.attacc_system(stacks=5).n_groups == 80               # the paper's five PIM cubes


def test_cubes_table():
    one = pd.DataFrame([{"kernel": "gemv", "batch": 4, "size": 2048, "base_vs_gpu": 1.7, "dcc_vs_gpu": 1.8},
                        {"kernel": "red", "batch": 1, "size": 4096, "base_vs_gpu": 0.1, "dcc_vs_gpu": 0.2}])
    five = pd.DataFrame([{"kernel": "gemv", "batch": 4, "size": 2048, "base_vs_gpu": 6.4, "dcc_vs_gpu": 6.5}])
    t = dcc.cubes_table(one, five)
    assert len(t) == 1 and t["base_vs_gpu 1 cube"].iloc[0] == 1.7 and t["base_vs_gpu 5 cubes"].iloc[0] == 6.4
    assert t["paper base_vs_gpu (average)"].iloc[0] == 7.65


def test_roofline_is_bytes_over_dccs_bandwidth():
    """RED 1 x 4096 at FP16 on DCC's GPU: (4096 + 1) x 2 B over 3352 GB/s x 0.81, plus the launch."""
    from pimjax.hw.host import A100_LAUNCH_NS
    want = 2 * (4096 + 1) / (3352e9 * 0.81) * 1e9 + A100_LAUNCH_NS
    assert dcc.roofline_ns("red", 1, 4096) == pytest.approx(want)
    t = dcc.implied_gpu_table()
    row = t[(t.backend == "attacc") & (t.kernel == "red")].iloc[0]
    assert row["implied GPU ns"] == pytest.approx(3.94 * 215 * 0.769)        # dcc.md best cycles x the paper's 3.94
    assert row["implied / roofline"] == pytest.approx(3.94 * 215 * 0.769 / want)


def test_run_case_figures_are_consistent():
    """base_ns is the backend's baseline program simulated (an independent lowering
    here: nothing is resident for RED), pim_ns the tuner's choice, which never loses
    to the baseline it also simulated; gpu_ns the roofline of the same op."""
    be = dcc.attacc_system()
    r = dcc.run_case(be, "red", 1, 1024)
    b = dcc.baseline_breakdown(be, "red", 1, 1024)
    assert r["base_ns"] == pytest.approx(b["cycles"] * float(be.timing.tCK))
    assert b["cycles"] == pytest.approx(b["rearrangement"] + b["compute"] + b["readback"] + b["merge"])
    assert r["pim_ns"] <= r["base_ns"] * (1 + 1e-9)
    assert r["gpu_ns"] == pytest.approx(dcc.roofline_ns("red", 1, 1024))
    assert r["dcc_vs_base"] == pytest.approx(r["base_ns"] / r["pim_ns"])
    assert r["dcc_vs_gpu"] == pytest.approx(r["gpu_ns"] / r["pim_ns"])
    assert r["base_vs_gpu"] == pytest.approx(r["gpu_ns"] / r["base_ns"])


def test_attacc_distribution_on_hbm_pim():
    """AttAcc's distribution lowers on HBM-PIM for RED (its time is that draft's
    program) and is refused, with the reason, where HBM-PIM cannot run it."""
    from pimjax.backends.attacc.baseline import attacc_baseline
    from pimjax.kernels import kernel_op
    from pimjax.lower import lower
    from pimjax.sim.cycles import cycles_pooled
    h = dcc.hbm_pim_system()
    r = dcc.run_case(h, "red", 1, 1024, attacc_distribution=True)
    op, shapes = kernel_op("red", [1, 1024])
    want = float(cycles_pooled(lower(op, attacc_baseline(op, h), h, shapes), h).total_ns)
    assert r["attacc_ns"] == pytest.approx(want) and r["attacc_note"] == ""
    assert r["dcc_vs_attacc_dist"] == pytest.approx(want / r["pim_ns"])
    v = dcc.run_case(h, "va", 1, 1024, attacc_distribution=True)
    assert math.isnan(v["attacc_ns"]) and "no mapping" in v["attacc_note"]


def test_summarise_and_compare():
    df = pd.DataFrame([
        {"kernel": "red", "batch": 1, "size": 1024, "base_vs_gpu": 0.5, "dcc_vs_base": 2.0, "dcc_vs_gpu": 1.0},
        {"kernel": "red", "batch": 1, "size": 4096, "base_vs_gpu": 2.0, "dcc_vs_base": 4.0, "dcc_vs_gpu": 8.0},
        {"kernel": "gemv", "batch": 4, "size": 512, "base_vs_gpu": 3.0, "dcc_vs_base": 1.0, "dcc_vs_gpu": 3.0},
    ])
    s = dcc.summarise(df)
    assert s[("red", "base_vs_gpu")] == pytest.approx(1.0)                  # sqrt(0.5 * 2)
    assert s[("red", "dcc_vs_base_max")] == 4.0
    assert s[("all", "dcc_vs_gpu")] == pytest.approx((1.0 * 8.0 * 3.0) ** (1 / 3))
    assert s[("red 1024", "base_vs_gpu")] == pytest.approx(0.5) and s[("red 1x4096", "dcc_vs_gpu")] == pytest.approx(8.0)
    paper = {("red", "base_vs_gpu"): 1.2, ("red", "dcc_vs_base"): 1.0, ("va", "dcc_vs_gpu"): 2.0}
    t = dcc.compare(s, paper, {("red", "dcc_vs_base"): "a reason", ("red", "base_vs_gpu"): "unused"})
    assert list(t["within 25%"]) == [True, False, False]                  # 1/1.2 = 0.83; 2.83 / 1; missing
    assert list(t["why it differs"]) == ["", "a reason", ""]
    assert math.isnan(t["ours"].iloc[2])


def test_table2_cases_and_compare():
    cases = dcc.table2_cases()
    rows = {(c["backend"], c["kernel"]) for c in cases}
    assert rows == {(b, k) for b, _, k in dcc.TABLE2_ROWS}
    for b, _, k in dcc.TABLE2_ROWS:
        mine = [c for c in cases if (c["backend"], c["kernel"]) == (b, k)]
        assert len(mine) == (1 if k in ("mmtv", "attn") else 3)
        sizes = [int(np.prod(c["shape"])) for c in mine]
        assert sizes == sorted(sizes)
    table = pd.DataFrame([{"backend": "attacc", "kernel": "mmtv", "total": 4, "best_frac": 0.75, "subopt": 0.9},
                          {"backend": "all", "kernel": "all", "total": 4, "best_frac": 0.75, "subopt": 0.9}])
    side = dcc.table2_compare(table)
    g = side[side.row == "attacc+gemv"].iloc[0]
    assert g["paper best_frac"] == pytest.approx(290 / 304) and g["ours best_frac"] == 0.75
    assert side[side.row == "hbm-pim+va"].iloc[0]["ours total"] == 0
    assert side[side.row == "all"].iloc[0]["paper total"] == 272 + 304 + 167 + 304 + 167 * 3


def test_plots_and_save(tmp_path, monkeypatch):
    """The plot helpers draw one bar per paper figure and per case, and save
    writes the PNG and the tables where it says."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    table = dcc.compare({("red", "dcc_vs_base"): 1.4}, {("red", "dcc_vs_base"): 1.5, ("va", "dcc_vs_base"): 1.7})
    cases = pd.DataFrame([{"kernel": "red", "batch": 1, "size": 1024, "base_vs_gpu": 0.1, "dcc_vs_gpu": 0.3}])
    fig, axes = plt.subplots(1, 2)
    assert len(dcc.plot_compare(table, "t", axes[0]).patches) == 2 * len(table)
    assert len(dcc.plot_cases(cases, "t", axes[1]).patches) == 2 * len(cases)
    monkeypatch.setattr(dcc, "__file__", str(tmp_path / "dcc_figures.py"))
    png = dcc.save(fig, "x", table, cases)
    plt.close(fig)
    assert png == str(tmp_path / "out" / "x.png") and (tmp_path / "out" / "x.png").stat().st_size > 0
    assert pd.read_csv(tmp_path / "out" / "x-1.csv").shape == cases.shape
    assert len(pd.read_csv(tmp_path / "out" / "x.csv")) == len(table)
