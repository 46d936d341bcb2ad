"""PIMFlow's mixed-parallel modes and Algorithm 1 (`pimjax.search.mixed`)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pimjax.search.mixed import (
    PIPELINE_PATTERNS,
    RATIOS,
    NodeTimes,
    execution_mode_search,
    op_node_times,
    optimal_split,
    pipeline_devices,
    pipeline_ns,
    share_builder,
    split_var,
)


def linear(name, g, p, kind="fc", fixed_g=0.0, fixed_p=0.0, pim=True):
    """A node whose GPU share r takes fixed_g + r g and whose PIM share 1 - r takes fixed_p + (1 - r) p."""
    gpu = np.where(RATIOS > 0, fixed_g + RATIOS * g, 0.0)
    pim_ns = np.where(RATIOS < 1, fixed_p + (1 - RATIOS) * p, 0.0) if pim else \
        np.where(RATIOS < 1, np.nan, 0.0)
    return NodeTimes(name, gpu, pim_ns, kind=kind)


def test_node_times_validate():
    with pytest.raises(ValueError, match="one time per share"):
        NodeTimes("x", np.zeros(5), np.zeros(11))
    with pytest.raises(ValueError, match="must be 0"):
        NodeTimes("x", np.ones(11), np.zeros(11))
    n = linear("dw", 10.0, 0.0, kind="dwconv", pim=False)
    assert not n.candidate and linear("fc", 1.0, 1.0).candidate


@pytest.mark.parametrize("g,p", [(100.0, 100.0), (100.0, 300.0), (300.0, 100.0), (100.0, 2000.0), (2000.0, 50.0)])
def test_optimal_split_balances_the_two_devices(g, p):
    """Linear times: the best 10 % step is the grid point nearest the balance r* = p / (g + p)."""
    r, t = optimal_split(linear("n", g, p))
    want = min(max(rr * g, (1 - rr) * p) for rr in RATIOS)
    assert t == pytest.approx(want)
    assert abs(r - p / (g + p)) <= 0.1 + 1e-9
    # without MD-DP only the two ends are allowed
    r0, t0 = optimal_split(linear("n", g, p), md_dp=False)
    assert r0 in (0.0, 1.0) and t0 == pytest.approx(min(g, p))


def test_pipeline_two_nodes_two_stages():
    """PIM node then GPU node, 2 chunks: PIM chunk 1 overlaps GPU chunk 0 (Fig. 5)."""
    a, b = 40.0, 70.0                      # each node's half on its device
    pim_first = linear("pw", 1e9, 2 * a, kind="conv1x1")
    gpu_next = linear("dw", 2 * b, 0.0, kind="dwconv", pim=False)
    assert pipeline_devices([pim_first, gpu_next]) == ["pim", "gpu"]
    t = pipeline_ns([pim_first, gpu_next], ["pim", "gpu"], stages=2)
    assert t == pytest.approx(max(2 * a, a + b) + b)      # PIM: [0,a],[a,2a]; GPU: [a,a+b],[max(2a,a+b), +b]
    assert t < 2 * a + 2 * b                               # beats running them one after the other
    with pytest.raises(ValueError, match="stages"):
        pipeline_ns([pim_first], ["pim"], stages=3)


def _brute_force(nodes, md_dp=True, pipeline=True, stages=2):
    """Every segmentation of the chain into single nodes and pattern-matching pipelines."""
    n = len(nodes)
    single = [optimal_split(nd, md_dp)[1] if nd.candidate else nd.gpu_ns[-1] for nd in nodes]
    best = {n: 0.0}
    for i in range(n - 1, -1, -1):
        opts = [single[i] + best[i + 1]]
        if pipeline:
            for pat in PIPELINE_PATTERNS:
                l = len(pat)
                if i + l <= n and tuple(nd.kind for nd in nodes[i:i + l]) == pat:
                    seg = nodes[i:i + l]
                    opts.append(pipeline_ns(seg, pipeline_devices(seg), stages) + best[i + l])
        best[i] = min(opts)
    return best[0]


node_st = st.tuples(st.sampled_from(["fc", "conv1x1", "dwconv", "conv", "other"]),
                    st.floats(1.0, 500.0), st.floats(1.0, 500.0), st.floats(0.0, 50.0), st.floats(0.0, 50.0))


@settings(max_examples=60, deadline=None)
@given(st.lists(node_st, min_size=1, max_size=8), st.booleans(), st.booleans())
def test_algorithm_1_is_the_optimum_of_every_segmentation(spec, md_dp, pipeline):
    nodes = [linear(f"n{i}", g, p, kind=k, fixed_g=fg, fixed_p=fp, pim=k not in ("dwconv", "other"))
             for i, (k, g, p, fg, fp) in enumerate(spec)]
    plan = execution_mode_search(nodes, md_dp=md_dp, pipeline=pipeline)
    assert plan.total_ns == pytest.approx(_brute_force(nodes, md_dp, pipeline))
    # the plan's segments add up to its total, and every node has a mode
    segs = {}
    for i, m in enumerate(plan.nodes):
        assert m.mode in ("gpu", "pim", "md-dp", "pipeline")
        segs[m.segment or (i, 1)] = m.segment_ns
        if m.mode == "md-dp":
            assert md_dp and 0 < m.ratio < 1
        if m.mode == "pipeline":
            assert pipeline
        if not nodes[i].candidate:
            assert m.mode in ("gpu", "pipeline") and m.ratio == 1.0
    assert sum(segs.values()) == pytest.approx(plan.total_ns)
    assert plan.table.shape == (len(nodes), len(nodes) + 1)


def test_gpu_only_and_offload_only_mechanisms():
    nodes = [linear("a", 100.0, 100.0), linear("b", 50.0, 400.0), linear("c", 30.0, 0.0, kind="other", pim=False)]
    gpu_only = execution_mode_search(nodes, offload=False)
    assert gpu_only.total_ns == pytest.approx(180.0) and {m.mode for m in gpu_only.nodes} == {"gpu"}
    newton_plus = execution_mode_search(nodes, md_dp=False, pipeline=False)     # whole nodes only
    assert newton_plus.total_ns == pytest.approx(100.0 + 50.0 + 30.0)
    assert {m.mode for m in newton_plus.nodes} <= {"gpu", "pim"}
    full = execution_mode_search(nodes)
    best = [min(max(r * g, (1 - r) * p) for r in RATIOS) for g, p in ((100.0, 100.0), (50.0, 400.0))]
    ratio = [float(RATIOS[np.argmin([max(r * g, (1 - r) * p) for r in RATIOS])]) for g, p in ((100.0, 100.0),
                                                                                             (50.0, 400.0))]
    assert full.total_ns == pytest.approx(sum(best) + 30.0)
    assert [m.mode for m in full.nodes] == ["md-dp", "md-dp", "gpu"]
    df = full.to_dataframe()
    assert list(df["gpu_share"]) == ratio + [1.0]
    share = full.split_share([nd.candidate for nd in nodes])
    assert share[ratio[0]] == pytest.approx(0.5) and share[ratio[1]] == pytest.approx(0.5)
    assert sum(share.values()) == pytest.approx(1.0)


def test_no_offload_means_gpu_only_even_with_pipelines():
    nodes = [linear("pw", 100.0, 10.0, kind="conv1x1"), linear("dw", 50.0, 0.0, kind="dwconv", pim=False)]
    plan = execution_mode_search(nodes, offload=False)
    assert {m.mode for m in plan.nodes} == {"gpu"} and plan.total_ns == pytest.approx(150.0)
    assert execution_mode_search(nodes).total_ns < 150.0


def test_long_chains_backtrack_without_recursion():
    nodes = [linear(f"n{i}", 10.0 + i % 7, 12.0, kind=("conv1x1", "dwconv")[i % 2], pim=i % 2 == 0)
             for i in range(400)]
    plan = execution_mode_search(nodes)
    assert len(plan.nodes) == 400 and all(m is not None for m in plan.nodes)


def test_op_node_times_needs_a_concurrent_gpu():
    from pimjax.hw.presets import get_backend
    from pimjax.kernels import kernel_op
    with pytest.raises(ValueError, match="no concurrent GPU"):
        op_node_times("x", lambda s: kernel_op("gemv", [64, 64]), get_backend("newton", total_channels=16))


N_ROWS, K_COLS = 1024, 256


@pytest.fixture(scope="module")
def balanced():
    """(backend, tuner, build): newton whose concurrent GPU (a roofline on a chosen bandwidth) takes
    exactly as long for half of a 1024 x 256 GEMV as PIM's simulated half."""
    from pimjax.hw.host import gpu_on
    from pimjax.hw.presets import get_backend
    from pimjax.kernels import kernel_op
    from pimjax.search.tuner import Tuner
    from pimjax.sim.host import host_time

    backend = get_backend("newton")
    tuner = Tuner(top_k=2)
    build = share_builder(kernel_op("gemv", [N_ROWS, K_COLS])[0])
    half_op, half_shapes = build(0.5)
    pim_half = float(tuner.choose(half_op, backend, half_shapes, resident=(0,)).report.total_ns)
    probe = gpu_on("rtx2060", 100.0, model="roofline")
    launch, eff = float(probe.launch_overhead_ns), float(probe.bandwidth_efficiency)
    bytes_half = (float(host_time(half_op, probe, half_shapes)) - launch) * 100.0 * eff
    cogpu = gpu_on("rtx2060", bytes_half / ((pim_half - launch) * eff), model="roofline")
    backend = backend.replace(system=backend.system.replace(cogpu=cogpu))
    assert float(host_time(half_op, cogpu, half_shapes)) == pytest.approx(pim_half, rel=1e-9)
    return backend, tuner, build


def test_two_node_graph_best_plan_is_an_even_split_with_both_devices_busy(balanced):
    """Two GEMVs on newton.  Half a node on the concurrent GPU takes exactly as long as the other
    half simulated on PIM; PIM time rises with its share and GPU time with its own, so 50/50 is
    the optimum and the plan's time is max(GPU half, PIM half) per node, both devices busy."""
    backend, tuner, build = balanced
    nodes = [op_node_times(f"gemv{j}", build, backend, tuner) for j in range(2)]
    g, p = nodes[0].gpu_ns, nodes[0].pim_ns
    assert np.all(np.diff(g) > 0) and np.all(np.diff(p[:-1]) < 0)     # monotone in the share
    plan = execution_mode_search(nodes)
    assert [(m.mode, m.ratio) for m in plan.nodes] == [("md-dp", 0.5), ("md-dp", 0.5)]
    assert plan.total_ns == pytest.approx(2 * max(g[5], p[5]))
    assert g[5] == pytest.approx(p[5], rel=1e-6)                       # both busy the whole node
    assert plan.total_ns < 2 * min(g[-1], p[0])                          # beats either device alone


def test_pim_jit_splits_and_computes_both_parts(balanced):
    """The same two GEMVs through pim_jit: Algorithm 1 runs at compile time, each op is split
    50/50, the report says so, and the values (PIM rows from the simulated program, GPU rows
    from the GPU) equal jax.jit's."""
    import jax
    import jax.numpy as jnp

    import pimjax
    backend, tuner, _ = balanced

    def two(W1, W2, x):
        return W1 @ x, W2 @ x

    rng = np.random.default_rng(0)
    W1, W2 = (jnp.asarray(rng.standard_normal((N_ROWS, K_COLS)), jnp.bfloat16) for _ in range(2))
    x = jnp.asarray(rng.standard_normal(K_COLS), jnp.bfloat16)
    f = pimjax.pim_jit(two, backend=backend, tuner=tuner, resident=("W1", "W2"))
    got = f(W1, W2, x)
    want = jax.jit(two)(W1, W2, x)
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32), rtol=2e-2, atol=0.25)
    compiled = f.lower(W1, W2, x).compile()
    rep = compiled.cost_analysis()
    ops = [o for o in rep["ops"] if o["placement"] != "host" or o["name"] == "dot_general"]
    assert [(o["placement"], o["gpu_share"]) for o in ops] == [("md-dp", 0.5), ("md-dp", 0.5)]
    assert "MD-DP: 50% of" in ops[0]["reason"] and "PIM: 512 of 1024" in ops[0]["draft"]
    splits = [p.split for p in compiled.plans if p.placement == "md-dp"]
    for o, sp in zip(ops, splits):          # both parts at once: the slower one
        assert o["ns"] == pytest.approx(max(sp.gpu_ns, sp.pim_ns)) and sp.pim_rows == N_ROWS // 2
    assert rep["split_ns"] == pytest.approx(sum(o["ns"] for o in ops))
    assert rep["total_ns"] == pytest.approx(rep["pim_ns"] + rep["host_ns"] + rep["split_ns"])
    assert rep["speedup_gpu"] > 1
    # the PIM rows come from the PIM program: with a poisoned GPU result they survive, the rest not
    from pimjax.plan.mixed import run_split
    p = next(q for q in compiled.plans if q.placement == "md-dp")
    operands = [W1 if p.op.operands[0].value == compiled.graph.inputs[0] else W2, x]
    out = run_split(p.split, p.op, operands, np.full(N_ROWS, np.nan, np.float32))
    assert np.isfinite(out[:N_ROWS // 2]).all() and np.isnan(out[N_ROWS // 2:]).all()
    np.testing.assert_allclose(out[:N_ROWS // 2], np.asarray(want[0], np.float32)[:N_ROWS // 2]
                               if operands[0] is W1 else np.asarray(want[1], np.float32)[:N_ROWS // 2],
                               rtol=2e-2, atol=0.25)


@pytest.mark.parametrize("H,K", [(8, 3), (9, 1), (7, 5)])
def test_share_builder_splits_conv_rows_with_their_halo(H, K):
    """PIMFlow splits a CONV along the output rows H; the input slice then needs K - 1 halo rows."""
    from pimjax.kernels import kernel_op
    op, shapes = kernel_op("conv", [H, 6, 4, 5, K])
    assert split_var(op) == "h"
    build = share_builder(op)
    x = op.operands[0].value                            # the (padded) input the op reads
    for share in RATIOS[1:]:
        sub, sh = build(float(share))
        rows = int(np.ceil(share * H - 1e-9))
        assert sub.extents["h"] == rows and sh[op.result.value] == (1, rows, 6, 5)
        assert sh[x][1] == rows + K - 1 and sh[x][2:] == shapes[x][2:]
    assert build(1.0)[1][x] == shapes[x]


def test_share_builder_splits_a_gemv_by_outputs():
    from pimjax.kernels import kernel_op
    op, _ = kernel_op("gemv", [100, 32])
    sub, sh = share_builder(op)(0.3)
    assert sh[op.operands[0].value] == (30, 32) and sh[op.result.value] == (30,)
    red, _ = kernel_op("red", [1, 64])
    with pytest.raises(ValueError, match="no output variable"):
        share_builder(red)


def test_split_vars_rows_and_channels():
    """A CONV splits along output rows (H) or output channels (F); a GEMV has one output variable."""
    from pimjax.kernels import kernel_op
    from pimjax.search.mixed import result_vars, split_vars
    op, _ = kernel_op("conv", [8, 6, 4, 5, 3])
    vs = split_vars(op)
    assert vs["rows"] == "h" == split_var(op)
    dims = {v: d for d, v in result_vars(op)}
    assert dims[vs["channels"]] == len(op.result.index_map) - 1 and op.extents[vs["channels"]] == 5
    sub, sh = share_builder(op, vs["channels"])(0.4)
    assert sh[op.result.value] == (1, 8, 6, 2)                       # ceil(0.4 x 5) channels, every row
    gv, _ = kernel_op("gemv", [100, 32])
    assert list(split_vars(gv)) == ["rows"]


def test_choose_split_takes_the_faster_variant():
    from pimjax.search.mixed import choose_split
    rows = linear("n", 100.0, 100.0)                                  # best split 50
    chans = linear("n", 100.0, 100.0, fixed_g=30.0)                   # every split pays 30 more on the GPU
    assert choose_split({"rows": rows, "channels": chans})[0] == "rows"
    assert choose_split({"rows": chans, "channels": rows})[0] == "channels"
    with pytest.raises(ValueError):
        choose_split({})


def test_explicit_pipeline_segments():
    """segments= restricts pipelining to the given chains: the kinds alone would also pipeline
    (1, 2), which the caller rules out (e.g. a node whose output has a second consumer)."""
    nodes = [linear("pw", 1e9, 20.0, kind="conv1x1"), linear("dw", 40.0, 0.0, kind="dwconv", pim=False),
             linear("pw2", 1e9, 20.0, kind="conv1x1")]
    free = execution_mode_search(nodes, md_dp=False)
    only_first = execution_mode_search(nodes, md_dp=False, segments=[(0, 2)])
    none = execution_mode_search(nodes, md_dp=False, segments=[])
    assert none.total_ns == pytest.approx(20.0 + 40.0 + 20.0)
    assert only_first.total_ns == pytest.approx(pipeline_ns(nodes[:2], ["pim", "gpu"]) + 20.0)
    assert free.total_ns <= only_first.total_ns <= none.total_ns
    assert [m.mode for m in only_first.nodes] == ["pipeline", "pipeline", "pim"]
    with pytest.raises(ValueError, match="segment"):
        execution_mode_search(nodes, segments=[(2, 2)])
