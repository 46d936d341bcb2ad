"""experiments/dcc_figures.py: the DCC figure helpers the notebooks call.
Small cases only; the notebooks themselves run in tests/test_notebooks.py."""
from __future__ import annotations

import math

import numpy as np
import pytest

pd = pytest.importorskip("pandas")

from experiments import dcc_command_classes as cc  # noqa: E402
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


# --------------------------------------------------------------------------
# the paper's configuration ("dcc" simulator) and the artifact's rules
# --------------------------------------------------------------------------
def test_dcc_candidates_match_the_artifacts_counts():
    """The port of DCC's 2-D candidate generator gives the candidate counts DCC's artifact reports
    (dcc.md, `n_tilings` of dcc-artifact.csv), its baseline among them, and only tilings DCC's
    rules allow (all 16 groups, >= 16 cores per group, or the baseline shape)."""
    for (b, n), want in {(1, 1024): 9, (1, 4096): 31, (4, 1024): 60, (4, 4096): 159}.items():
        cands = dcc.dcc_candidates_2d(b, n)
        assert len(cands) == want, (b, n, len(cands))
        assert dcc.dcc_baseline_tiling("red", b, n) in cands
        for (g0, c0, t0), (g1, c1, t1) in cands:
            assert g0 * g1 <= 16 and c0 * c1 <= 64 and t0 == -(-b // (g0 * c0)) and t1 == -(-n // (g1 * c1))
        assert len({(t[0][2], t[1][2]) for t in cands}) >= want - 1      # one tiling per chunk pair (+ baseline)


def test_dcc_baseline_tilings_are_the_artifacts():
    """AttAcc's mapping in DCC's notation, as the baseline rows of dcc-artifact.csv write it."""
    assert dcc.dcc_baseline_tiling("gemv", 1, 512) == [[16, 1, 2], [1, 4, 32], [1, 16, 32]]
    assert dcc.dcc_baseline_tiling("gemv", 4, 512) == [[16, 1, 8], [1, 4, 32], [1, 16, 32]]
    assert dcc.dcc_baseline_tiling("gemv", 1, 4096) == [[16, 1, 2], [1, 4, 32], [1, 16, 256]]
    assert dcc.dcc_baseline_tiling("red", 1, 4096) == [[1, 1, 1], [16, 64, 4]]
    assert dcc.dcc_baseline_tiling("va", 4, 4096) == [[4, 1, 1], [4, 64, 16]]
    with pytest.raises(ValueError, match="batch dividing 16"):
        dcc.dcc_baseline_tiling("red", 3, 4096)
    with pytest.raises(ValueError, match="gemv, red and va"):
        dcc.dcc_baseline_tiling("relu", 1, 4096)


def test_artifact_gpu_rule():
    """The artifact's GPU rule gives the paper's one stated single point from DCC's own cycles (RED
    (1, 4096) on AttAcc: best 215 cycles, 3.94x), scales with the five cubes' work, and refuses what
    it has no rule for."""
    assert dcc.artifact_gpu_ns("red", 1, 4096) / (215 * dcc.DCC_NS_PER_CYCLE) == pytest.approx(3.94, rel=0.01)
    # a RED of numOp = 5 blocks: its 2 x 4096 x 5 FP16 tile bytes over 5/108 of 0.81 x 3352 GB/s
    assert dcc.artifact_gpu_ns("red", 1, 4096) == pytest.approx(2 * 4096 * 5 * 2 / (3352e9 * 0.81 * 5 / 108) * 1e9,
                                                                rel=1e-3)
    assert dcc.artifact_gpu_ns("gemv", 4, 512) > dcc.artifact_gpu_ns("gemv", 1, 512)
    with pytest.raises(ValueError, match="no rule"):
        dcc.artifact_layer_ns("conv", 1, 1, 1, 1)
    with pytest.raises(ValueError, match="no GPU rule"):
        dcc.artifact_gpu_ns("conv", 1, 1)


def test_artifact_grid_and_fig8_cases():
    g6, g7 = dcc.artifact_grid("fig6"), dcc.artifact_grid("fig7")
    assert len(g6) == 8 + 8 + 6 and len(g7) == 8 + 3 * 9
    assert {b for k, b, _ in g6 if k == "gemv"} == {1, 2, 4, 8}       # batch x heads {1,4} x {32,64} over 32
    with pytest.raises(ValueError, match="figure"):
        dcc.artifact_grid("fig8")
    from experiments.dcc_fig8_artifact import fig8_gemv_cases
    cases = fig8_gemv_cases()
    assert len(cases) == 2 * 2 * 2
    qkv = [c for c in cases if c["model"] == "LLAMA-33B" and c["batch"] == 4 and c["phase"] == "qkv"][0]
    assert qkv["dcc_shape"] == (1, 42, 6656, 384)         # test_configs.py: ceil(batch * 10.4) heads per cube


def test_averages_and_compare_configs():
    df = pd.DataFrame([{"backend": "attacc", "kernel": "gemv", "dcc_vs_gpu": 2.0},
                       {"backend": "attacc", "kernel": "red", "dcc_vs_gpu": 4.0},
                       {"backend": "attacc", "kernel": "attn", "dcc_vs_gpu": math.nan}])
    t = dcc.averages_table({"x": df})
    r = t.iloc[0]
    assert r.cases == 2 and r.kernels == "gemv, red" and r.hmean == pytest.approx(8 / 3)
    assert r.gmean == pytest.approx(math.sqrt(8)) and r["hmean / v2"] == pytest.approx(8 / 3 / 3.92)
    c = dcc.compare_configs({("gemv", "m"): 2.0}, {"a": {("gemv", "m"): 3.0}, "b": {}})
    assert c["a / paper"].iloc[0] == 1.5 and math.isnan(c["b"].iloc[0])
    with pytest.raises(ValueError, match="backend"):
        dcc.dcc_system("upmem")


def test_dccsim_cache_is_current():
    """experiments/data/dcc_figures_dccsim.json holds a row per case of every figure, in the case
    functions' order (re-run `experiments/dcc_figures_dccsim.py --recompute` after changing them)."""
    from experiments import dcc_figures_dccsim as S
    data = S.load()
    for fig, backends in S.FIGURES.items():
        df = data[fig]
        want = [(b, k, bt, s) for b in backends for k, bt, s in S.cases(fig)]
        assert list(zip(df.backend, df.kernel, df.batch, df["size"])) == want, fig
    from experiments.dcc_fig8_artifact import fig8_gemv_cases
    assert len(data["fig8_gemv"]) == len(fig8_gemv_cases())


@pytest.mark.slow
def test_dccsim_cache_recomputes():
    """A sample of the cache recomputed under the "dcc" configurations: RED / VA on both backends
    and one GEMV, equal to the cached rows (the fork's cycles are deterministic)."""
    from experiments import dcc_figures_dccsim as S
    from pimjax.search import Tuner
    cached = pd.concat([S.load()["fig6"], S.load()["fig7"]])
    tuner = Tuner()
    for be, k, b, s in (("attacc", "red", 1, 4096), ("hbm-pim", "va", 4, 1024), ("attacc", "gemv", 1, 512)):
        r = dcc.run_case_dcc(dcc.dcc_system(be), k, b, s, tuner)
        c = cached.query("backend == @be and kernel == @k and batch == @b and size == @s").iloc[0]
        for col in ("base_ns", "dcc_own_ns", "gpu_ns"):       # the fork's cycles and the roofline: exact
            assert r[col] == pytest.approx(c[col], rel=1e-6), (be, k, b, s, col)
        # the tuner's pick: within key_figures' band (ties it may break either way on another machine)
        assert r["pim_ns"] == pytest.approx(c["pim_ns"], rel=0.05), (be, k, b, s)
    # Fig. 8: the end-to-end arithmetic on the cached kernels gives the cached figures
    from experiments.dcc_fig8_artifact import fig8
    data = S.load()
    e2e = fig8(data["fig8_gemv"].to_dict("records"), data["fig8_attention"].to_dict("records"))
    cols = [c for c in e2e.columns if c.endswith(("ms", "speedup"))]
    assert np.allclose(e2e[cols].to_numpy(float), data["fig8_e2e"][cols].to_numpy(float), rtol=1e-9)


def test_fig8_artifact_arithmetic():
    """The artifact's end-to-end arithmetic on two decode steps: the GPU system ignores the PIM inputs, a
    slower PIM attention slows every PIM system and only them, faster DCC GEMVs speed up only the +DCC
    systems, and the Full variants' FFN split makes them faster than the Base ones."""
    from experiments.dcc_fig8_artifact import fig8_setting
    gemv = {"qkv": 10_000.0, "proj": 3_000.0}
    free = fig8_setting("GPT-13B", 1, 128, 3, gemv)
    slow = fig8_setting("GPT-13B", 1, 128, 3, gemv, lambda L, dcc: 5_000.0)
    fast = fig8_setting("GPT-13B", 1, 128, 3, {"qkv": 1_000.0, "proj": 300.0})
    assert free["GPU"] == slow["GPU"] == fast["GPU"] > 0
    for s in ("Attacc_base", "Attacc_base+DCC", "Attacc_full", "Attacc_full+DCC"):
        assert slow[s] > free[s]
    assert fast["Attacc_base"] == free["Attacc_base"] and fast["Attacc_base+DCC"] < free["Attacc_base+DCC"]
    assert free["Attacc_full"] < free["Attacc_base"] and free["Attacc_full+DCC"] < free["Attacc_base+DCC"]


_CLASS_SIDES = (("dcc", "dcc total cycles"), ("default", "default total cycles"),
                ("default, dcc tiling", "default, dcc tiling total cycles"))


def test_command_class_cache_sums_to_totals():
    """experiments/data/dcc_command_classes.json: every case x command class, and on each side the
    classes sum to the simulated total (the split is by successive removal, exact by construction);
    ns = cycles x that side's tCK; DCC charges no mode change, the default HBM-PIM its frame."""
    df = cc.load_command_classes()
    assert list(zip(df.backend, df.kernel, df["class"])) == \
        [(b, k, c) for b, k, _, _ in cc.CLASS_CASES for c in cc.COMMAND_CLASSES]
    for (b, k), g in df.groupby(["backend", "kernel"], sort=False):
        for side, total in _CLASS_SIDES:
            if g[f"{side} cycles"].isna().all():          # DCC's tiling the default will not lower: says why
                assert side == "default, dcc tiling" and (g[f"{side} note"] != "").all(), (b, k)
                continue
            assert g[f"{side} cycles"].sum() == pytest.approx(g[total].iloc[0], abs=0.01), (b, k, side)
            assert (g[f"{side} cycles"] >= -0.5).all(), (b, k, side)
        assert np.allclose(g["dcc ns"], g["dcc cycles"] * g["dcc tCK ns"])
        assert np.allclose(g["default ns"], g["default cycles"] * g["default tCK ns"])
        mode = g[g["class"] == "mode changes"]
        assert (mode["dcc cycles"] == 0).all()
        assert bool((mode["default cycles"] > 0).all()) == (b == "hbm-pim"), (b, k)


def test_command_class_red_recomputes():
    """The HBM-PIM RED rows recomputed (a fraction of a second): equal to the cache; DCC's total is
    `predict`'s, the default's `baseline_breakdown`'s (an independent path through `cycles`)."""
    from pimjax.backends.dcc import predict
    live = cc.command_class_table([("hbm-pim", "red", 1, 4096)])
    cached = cc.load_command_classes().query("backend == 'hbm-pim' and kernel == 'red'")
    cols = ["dcc cycles", "dcc commands", "default cycles", "default commands"]
    assert np.allclose(live[cols].to_numpy(float), cached[cols].to_numpy(float), rtol=1e-6)
    assert live["dcc total cycles"].iloc[0] == predict("hbmpim", "red", (1, 4096), dcc.dcc_baseline_tiling("red", 1, 4096))
    bb = dcc.baseline_breakdown(dcc.hbm_pim_system(), "red", 1, 4096)
    assert live["default total cycles"].iloc[0] == pytest.approx(bb["cycles"], rel=1e-6)


def test_command_class_table_refuses_what_dcc_cannot_time():
    with pytest.raises(ValueError, match="no va"):
        cc.command_class_table([("attacc", "va", 1, 4096)])
    with pytest.raises(ValueError, match="backend must be"):
        cc.command_class_table([("upmem", "red", 1, 4096)])


@pytest.mark.slow
def test_command_class_cache_recomputes():
    """The whole command-class table recomputed equals the cache (re-run
    `experiments/dcc_command_classes.py` after changing either configuration)."""
    live, cached = cc.command_class_table(), cc.load_command_classes()
    num = [c for c in live.columns if c.endswith(("cycles", "commands", "ns"))]
    assert np.allclose(live[num].to_numpy(float), cached[num].to_numpy(float), rtol=1e-6, equal_nan=True)
    assert (live[["reference", "supports", "default draft"]].to_numpy() ==
            cached[["reference", "supports", "default draft"]].to_numpy()).all()
