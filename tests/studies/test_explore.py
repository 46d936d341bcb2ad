"""pimjax.explore (pimjax/studies/dse.py): structural points tuned for themselves, timing variants on their programs, resume."""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pimjax.studies.dse import COLUMNS, explore, grid


def gemv(W, x):
    return W @ x


ARGS = (jax.ShapeDtypeStruct((1024, 512), jnp.float16), jax.ShapeDtypeStruct((512,), jnp.float16))


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("explore") / "points.jsonl")
    points = grid("hbm-pim", channels=[16, 64])
    base = points["channels=64"].timing
    variants = [base, base.replace(tRP=2 * base.tRP, tRCDRD=2 * base.tRCDRD)]
    df = explore(gemv, *ARGS, backends=points, timings={"channels=64": variants}, results=path, progress=False)
    return df, path, points, variants


def test_one_row_per_point_and_variant(swept):
    df, path, points, _ = swept
    assert list(df.columns) == list(COLUMNS)
    assert list(df["point"]) == ["channels=16", "channels=64", "channels=64", "channels=64"]
    assert list(df["timing"].fillna(-1)) == [-1, -1, 0, 1]
    assert list(df["reused_programs"]) == [False, False, True, True]
    tuned = df[df["timing"].isna()].set_index("point")
    # every point tuned for itself: 4x the channels is faster, and on a GPU of 4x the bandwidth
    assert tuned.loc["channels=64", "total_ns"] < tuned.loc["channels=16", "total_ns"]
    bw = {k: float(b.system.baseline.mem_bandwidth) for k, b in points.items()}
    assert bw["channels=64"] == pytest.approx(4 * bw["channels=16"])
    assert tuned.loc["channels=16", "gpu_ns"] > tuned.loc["channels=64", "gpu_ns"]
    assert (tuned["speedup_gpu"] == tuned["gpu_ns"] / tuned["total_ns"]).all()
    assert all("@pim" in p for p in tuned["placements"]) and (tuned["simulated_drafts"] > 0).all()


def test_timing_variants_reuse_the_points_programs(swept):
    df, _, points, variants = swept
    rows = df[df["point"] == "channels=64"].reset_index(drop=True)
    # variant 0 is the preset timing: the point's own figure; variant 1 (slower rows) costs more
    assert rows.loc[1, "total_ns"] == pytest.approx(rows.loc[0, "total_ns"], rel=1e-6)
    assert rows.loc[2, "total_ns"] > rows.loc[1, "total_ns"]
    assert rows.loc[2, "drafts"] == rows.loc[0, "drafts"]


def test_resume_skips_finished_points(swept, monkeypatch):
    df, path, points, variants = swept
    with open(path) as fh:
        assert len([json.loads(line) for line in fh]) == len(df)
    import pimjax.api
    monkeypatch.setattr(pimjax.api, "pim_jit", lambda *a, **k: pytest.fail("a finished point was compiled again"))
    again = explore(gemv, *ARGS, backends=points, timings={"channels=64": variants}, results=path, progress=False)
    np.testing.assert_allclose(again["total_ns"], df["total_ns"])


def test_bad_points_are_named():
    with pytest.raises(TypeError, match=r"not a pimjax Backend \(build points with pimjax.studies.dse.grid"):
        explore(gemv, *ARGS, backends={"x": "hbm-pim"}, progress=False)
    with pytest.raises(ValueError, match="unknown points"):
        explore(gemv, *ARGS, backends=grid("hbm-pim", channels=[16]), timings={"nope": []}, progress=False)
    with pytest.raises(ValueError, match="non-empty list"):
        grid("hbm-pim", channels=16)


def test_two_local_processes_and_shards_give_the_serial_rows(swept, tmp_path):
    """The multi-process path on this box: two spawned workers compile the two points, and two
    shards (as two jax.distributed processes would take them) split the space; both give the rows
    the serial run gave (each point's tuning is deterministic)."""
    df, _, points, _ = swept
    serial = df[df["timing"].isna()].set_index("point")["total_ns"]
    path = str(tmp_path / "parallel.jsonl")
    par = explore(gemv, *ARGS, backends=points, results=path, progress=False, processes=2)
    assert list(par["point"]) == ["channels=16", "channels=64"]
    np.testing.assert_allclose(par.set_index("point")["total_ns"], serial[par["point"]], rtol=1e-9)
    same = [c for c in COLUMNS if c not in ("tuning_s", "timing")]   # every figure, draft and placement, exactly
    assert par[same].to_dict("records") == df[df["timing"].isna()][same].to_dict("records")
    halves = [explore(gemv, *ARGS, backends=points, progress=False, shard=(i, 2)) for i in range(2)]
    assert [list(h["point"]) for h in halves] == [["channels=16"], ["channels=64"]]
    with pytest.raises(ValueError, match="shard"):
        explore(gemv, *ARGS, backends=points, progress=False, shard=(2, 2))


def test_evolve_finds_the_grid_optimum_of_a_mixed_space(tmp_path):
    """Structural (channels) and timing (tRCDRD) axes together: the evolutionary search reaches the
    best point of the full grid without exploring all of it (the grid itself is explored from the
    same results file, so it costs nothing more)."""
    from pimjax.studies.dse import evolve, point_backend
    small = (jax.ShapeDtypeStruct((256, 256), jnp.float16), jax.ShapeDtypeStruct((256,), jnp.float16))
    t0 = float(point_backend("hbm-pim", {}).timing.tRCDRD)
    axes = {"channels": [16, 32, 64], "timing.tRCDRD": [t0, 2 * t0, 4 * t0]}
    path = str(tmp_path / "evolve.jsonl")
    found = evolve(gemv, *small, name="hbm-pim", axes=axes, population=4, generations=3, seed=1,
                   results=path, progress=False)
    assert len(found) < 9 and found["generation"].max() <= 2
    assert list(found["total_ns"]) == sorted(found["total_ns"])          # best first
    full = explore(gemv, *small, backends={f"channels={c},timing.tRCDRD={t}":
                                           point_backend("hbm-pim", {"channels": c, "timing.tRCDRD": t})
                                           for c in axes["channels"] for t in axes["timing.tRCDRD"]},
                   results=path, progress=False)
    assert found["total_ns"].iloc[0] == pytest.approx(full["total_ns"].min())
    assert found["channels"].iloc[0] == 64 and found["timing.tRCDRD"].iloc[0] == t0
    with pytest.raises(ValueError, match="has no field"):
        point_backend("hbm-pim", {"timing.nope": 1.0})


def test_explore_on_one_backend_equals_pim_jit(swept):
    import pimjax
    df, _, points, _ = swept
    be = points["channels=16"]
    ca = pimjax.pim_jit(gemv, backend=be).lower(*ARGS).compile().cost_analysis()
    row = df[(df["point"] == "channels=16") & df["timing"].isna()].iloc[0]
    assert row["total_ns"] == pytest.approx(ca["total_ns"]) and row["gpu_ns"] == pytest.approx(ca["gpu_ns"])
    assert row["drafts"] == "; ".join(f"{o['index']}:{o['draft']}" for o in ca["ops"] if o["draft"])


def test_a_structural_change_flips_the_best_draft(swept):
    """The mapping tuned at 16 channels is not the best at 64: re-timed there it is slower than the
    64-channel point's own pick, both simulated here."""
    import pimjax
    from pimjax.lower import lower
    from pimjax.sim.cycles import cycles
    df, _, points, _ = swept
    picks = {}
    for label in ("channels=16", "channels=64"):
        c = pimjax.pim_jit(gemv, backend=points[label]).lower(*ARGS).compile()
        (p,) = [q for q in c.plans if q.placement == "pim"]
        picks[label] = p
    small, big = picks["channels=16"], picks["channels=64"]
    assert small.draft != big.draft
    shapes = {i: v.shape for i, v in enumerate(pimjax.make_graph(gemv, *ARGS).values)}
    be = points["channels=64"]
    own = float(cycles(lower(big.op, big.draft, be, shapes, resident=big.resident), be).total_cycles)
    moved = float(cycles(lower(small.op, small.draft, be, shapes, resident=small.resident), be).total_cycles)
    assert own == pytest.approx(float(big.choice.report.total_cycles), rel=1e-6)
    assert own < moved


def test_timing_variants_sharded_over_a_mesh_equal_the_host_sweep(swept):
    """mesh=: the variants go through sweep's sharded scan engine (one CPU device here; the
    sharding itself is tested in tests/sim/test_sweep.py); same rows as the native sweep."""
    from jax.sharding import Mesh
    df, _, points, variants = swept
    one = {"channels=64": points["channels=64"]}
    mesh = Mesh(np.array(jax.devices()[:1]), ("d",))
    got = explore(gemv, *ARGS, backends=one, timings={"channels=64": variants}, progress=False, mesh=mesh)
    want = df[df["point"] == "channels=64"]
    np.testing.assert_allclose(got["total_ns"], want["total_ns"], rtol=1e-5)


def test_the_preset_timing_variant_reproduces_the_points_energy(swept):
    df, _, _, _ = swept
    rows = df[df["point"] == "channels=64"].reset_index(drop=True)
    assert rows.loc[1, "energy_pj"] == pytest.approx(rows.loc[0, "energy_pj"], rel=1e-6)
    assert rows.loc[1, "pim_ns"] == pytest.approx(rows.loc[0, "pim_ns"], rel=1e-6)


def test_resident_is_pim_jits():
    """explore(resident=) compiles each point as pim_jit(resident=) does: decode attention with its
    K / V resident runs on AttAcc's PIM, the same figures as pim_jit's."""
    import pimjax
    from pimjax.models.layers import decode_attention

    def attention(q, k_cache, v_cache):
        return decode_attention(q, k_cache, v_cache, 1)

    S = jax.ShapeDtypeStruct
    args = (S((1, 2, 64), jnp.float16), S((1, 2, 64, 64), jnp.float16), S((1, 2, 64, 64), jnp.float16))
    be = pimjax.hw.get_backend("attacc", stacks=1)
    df = explore(attention, *args, backends={"bank": be}, resident=("k_cache", "v_cache"), progress=False)
    ca = pimjax.pim_jit(attention, backend=be, resident=("k_cache", "v_cache")).lower(*args).compile().cost_analysis()
    assert "@pim" in df["placements"].iloc[0]
    assert df["total_ns"].iloc[0] == pytest.approx(ca["total_ns"]) and df["energy_pj"].iloc[0] == pytest.approx(ca["energy_pj"])


def test_a_fixed_gpu_gives_one_gpu_time_across_the_points(swept):
    """By default each point's GPU sits on that point's memory (the rows say which); with gpu= one GPU
    is the baseline of every point: one GPU-only time, one name in every row."""
    from pimjax.hw.gpus import gpu
    df, _, points, _ = swept
    own = df[df["timing"].isna()]
    assert own["gpu_GBps"].tolist() == [256.0, 1024.0]                   # 16 / 64 pCH x 16 GB/s
    assert own["gpu_ns"].nunique() == 2 and all("A100" in g for g in own["gpu"])
    assert own["pim_memory_GiB"].tolist() == [2.0, 8.0]
    for fixed in ("h100", gpu("h100")):
        held = explore(gemv, *ARGS, backends=points, progress=False, gpu=fixed)
        assert held["gpu_ns"].nunique() == 1 and held["gpu"].nunique() == 1
        assert held["gpu"].iloc[0].startswith("H100") and (held["gpu_model"] == "library").all()
        assert held["gpu_GBps"].iloc[0] == pytest.approx(3350.0)
        np.testing.assert_allclose(held["speedup_gpu"], held["gpu_ns"] / held["total_ns"])
    with pytest.raises(ValueError, match=r"gpu='h1000'.*a GPU by name \['a100'"):
        explore(gemv, *ARGS, backends=points, progress=False, gpu="h1000")


def test_progress_off_a_terminal_is_plain_lines(capsys):
    """Output not a terminal (a log, a pipe): one line as a stage starts and one as it ends, never
    the blank lines of a bar that cannot redraw."""
    from pimjax.studies.progress import track
    explore(gemv, *ARGS, backends=grid("hbm-pim", channels=[16]), progress=True)
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("pimjax explore: 1 points: 0/1 start") and "1/1 done" in err[-1]
    assert all(line.strip() for line in err)
    assert list(track(range(3), 3, "stage")) == [0, 1, 2]
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("pimjax stage: 0/3 start") and err[-1].startswith("pimjax stage: 3/3 done")
