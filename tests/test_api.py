"""pim_jit: values equal jax.jit on the corpus for every backend, the staged
API, the tuning cache, placement decisions and resident arguments.

The tuner here uses a stand-in cost model that predicts the same cycles
for every draft (so the top-k are simply the first drafts): these tests are
about the API, not about the predictor (tests/costmodel judges that)."""
from __future__ import annotations

import json
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pimjax import PimCompileError, get_backend, make_graph, pim_jit
from pimjax.backends import baseline
from pimjax.lower import lower
from pimjax.search.tuner import Tuner
from pimjax.sim.cycles import cycles
from tests.corpus import CORPUS
from tests.helpers import assert_trees_close


class FlatModel:
    """Predicts the same cycles for every draft."""

    def predict(self, features):
        return np.ones(len(features))


def tuner(cache=None, top_k=2):
    return Tuner(model=FlatModel(), top_k=top_k, cache=cache, include_baseline=False)


class ParallelFirst(Tuner):
    """Ranks drafts by how many cores they use (most first)."""

    def predict(self, op, table, backend, shapes):
        return 1.0 / (table.groups_used * table.cores_used)


SMALL = {"hbm-pim": dict(channels=4), "attacc": dict(channels=2), "newton": dict(channels=2),
         "upmem": dict(dpus=64)}
# relative tolerance of the backend arithmetic on the corpus' sizes (fp16 / bf16 accumulation of
# up to a few hundred terms; upmem runs float ops on the host, so it is exact)
TOL = {"hbm-pim": 3e-2, "attacc": 3e-2, "newton": 6e-2, "upmem": 1e-5}


def _close(got, want, tol):
    """The same pytree, shapes and dtypes as `want`; values within tol (relative, and absolute
    at the scale of max(1, max |want|))."""
    assert_trees_close(got, want, rtol=tol, atol=tol, atol_scaled=True)


@pytest.mark.slow
@pytest.mark.parametrize("backend", sorted(SMALL))
def test_corpus_equals_jax_jit_on_every_backend(backend):
    """Every supported op on PIM (placement="prefer_pim"); the others stay
    on the host and the report says why."""
    on_pim = 0
    for name, fn, make in CORPUS:
        args = make()
        f = pim_jit(fn, backend=backend, tuner=tuner(), placement="prefer_pim", **SMALL[backend])
        compiled = f.lower(*args).compile()
        _close(compiled(*args), jax.jit(fn)(*args), TOL[backend])
        rep = compiled.report()
        on_pim += sum(o.placement == "pim" for o in rep.ops)
        for o in rep.ops:
            assert o.reason, f"{name}: op {o.index} has no placement reason"
    if backend == "upmem":        # no FPU: every float op stays on the host, and says so
        assert on_pim == 0
    else:
        assert on_pim > 0


def test_integer_kernels_run_on_upmem_exactly():
    rng = np.random.default_rng(0)
    W = rng.integers(-50, 50, (64, 96)).astype(np.int32)
    x = rng.integers(-50, 50, 96).astype(np.int32)
    b = rng.integers(-50, 50, 64).astype(np.int32)
    fn = lambda W, x, b: W @ x + b          # noqa: E731
    compiled = pim_jit(fn, backend="upmem", tuner=tuner(), placement="prefer_pim",
                       dpus=64).lower(W, x, b).compile()
    assert compiled.report().ops[0].placement == "pim"
    np.testing.assert_array_equal(np.asarray(compiled(W, x, b)), np.asarray(jax.jit(fn)(W, x, b)))
    f32 = pim_jit(fn, backend="upmem", tuner=tuner(), dpus=64).lower(
        W.astype(np.float32), x.astype(np.float32), b.astype(np.float32))
    assert f32.plans[0].placement == "host" and "float" in f32.plans[0].reason.lower()


def test_staged_api_and_cost_analysis():
    W = np.random.default_rng(0).standard_normal((128, 256)).astype(np.float32)
    x = np.random.default_rng(1).standard_normal(256).astype(np.float32)
    f = pim_jit(lambda W, x: jax.nn.relu(W @ x), backend="hbm-pim", tuner=tuner(),
                placement="prefer_pim", channels=4)
    traced = f.trace(W, x)
    assert len(traced.graph.ops) == 1 and "relu" in traced.as_text()
    lowered = traced.lower()
    text = lowered.as_text()
    assert "PIM (hbm-pim)" in text and "predicted cycles" in text and "records" not in text
    pred = lowered.cost_analysis()
    assert pred["figures"] == "predicted"
    assert set(pred) >= {"pim_cycles", "pim_ns", "host_ns", "total_ns", "clock_ghz", "ops"}
    compiled = lowered.compile()
    assert "records" in compiled.as_text()
    sim = compiled.cost_analysis()
    assert sim["figures"] == "simulated"
    assert set(sim) >= {"total_ns", "gpu_ns", "speedup_gpu", "resident_ns", "energy_pj", "ops"}
    assert set(sim) == set(pred) and set(sim["ops"][0]) == set(pred["ops"][0])
    op = sim["ops"][0]
    parts = [op[f"{k}_cycles"] for k in ("rearrangement", "compute", "readback", "merge")]
    assert op["cycles"] == pytest.approx(sum(parts), rel=1e-5)
    assert op["ns"] == pytest.approx(op["cycles"] / sim["clock_ghz"], rel=1e-5)
    _close(compiled(W, x), jax.nn.relu(W @ x), TOL["hbm-pim"])
    assert "hbm-pim" in str(compiled.report())


def test_numpy_and_jax_arguments_give_the_same_jax_arrays():
    """numpy arguments reach the PIM executor as numpy (no device copy); the
    results are jax arrays either way, also an argument returned as is and a
    float64 argument cast to the compiled float32."""
    W = np.random.default_rng(2).standard_normal((64, 128))
    x = np.random.default_rng(3).standard_normal(128).astype(np.float32)
    f = pim_jit(lambda W, x: (jnp.tanh(W @ x), x), backend="hbm-pim", tuner=tuner(),
                placement="prefer_pim", channels=4)
    y_np, x_np = f(W, x)
    y_jax, x_jax = f(jnp.asarray(W, jnp.float32), jnp.asarray(x))
    for out in (y_np, x_np, y_jax, x_jax):
        assert isinstance(out, jax.Array) and out.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(y_np), np.asarray(y_jax))
    np.testing.assert_array_equal(np.asarray(x_np), x)
    _close(y_np, jnp.tanh(jnp.asarray(W, jnp.float32) @ x), TOL["hbm-pim"])


def test_wrong_shapes_raise_a_per_argument_type_error():
    W = np.ones((64, 32), np.float32)
    x = np.ones(32, np.float32)
    compiled = pim_jit(lambda W, x: W @ x, tuner=tuner(), channels=4).lower(W, x).compile()
    with pytest.raises(TypeError, match=r"argument W: compiled for float32\[64, 32\], got float32\[8, 32\]"):
        compiled(np.ones((8, 32), np.float32), x)
    with pytest.raises(TypeError, match="argument x"):
        compiled(W, np.ones(16, np.float32))


class BaselineLast(Tuner):
    """Ranks the backend's baseline mapping last of all drafts."""

    def predict(self, op, table, backend, shapes):
        pred = np.zeros(len(table))
        pred[table.index(baseline(op, backend))] = 1.0
        return pred


def test_tuner_never_picks_worse_than_the_baseline():
    """The baseline is simulated beside the predicted top-k: a model that
    ranks it last still cannot make the tuner pick something slower."""
    graph = make_graph(lambda W, x: W @ x, np.ones((256, 512), np.float32), np.ones(512, np.float32))
    op = graph.ops[0]
    be = get_backend("hbm-pim", channels=4)
    shapes = {i: v.shape for i, v in enumerate(graph.values)}
    t = BaselineLast(top_k=1)
    choice = t.choose(op, be, shapes)
    base = cycles(lower(op, baseline(op, be), be, shapes), be)
    assert choice.simulated == 2
    assert float(choice.report.total_cycles) <= float(base.total_cycles)
    alone = BaselineLast(top_k=1, include_baseline=False).choose(op, be, shapes)
    assert alone.simulated == 1 and alone.draft != baseline(op, be)


def test_cache_hit_miss_new_shape_and_corrupted_file(tmp_path):
    path = tmp_path / "tune.json"
    t = tuner(cache=str(path))
    W = np.ones((64, 128), np.float32)
    x = np.ones(128, np.float32)
    f = pim_jit(lambda W, x: W @ x, tuner=t, placement="prefer_pim", channels=4)
    first = f.lower(W, x).compile().plans[0].choice
    assert not first.cached and first.simulated == 2 and len(t.cache) == 1
    again = pim_jit(lambda W, x: W @ x, tuner=t, placement="prefer_pim", channels=4).lower(W, x).compile()
    assert again.plans[0].choice.cached and again.plans[0].draft == first.draft       # hit
    assert json.loads(path.read_text())                                              # on disk
    f(W[:32], x)                                                  # a new shape: tuned on the fly
    assert len(t.cache) == 2
    reread = tuner(cache=str(path))                               # a fresh process reads the file
    assert len(reread.cache) == 2
    path.write_text("{ not json")
    with pytest.warns(RuntimeWarning, match="unreadable"):
        broken = tuner(cache=str(path))
    assert len(broken.cache) == 0
    res = pim_jit(lambda W, x: W @ x, tuner=broken, placement="prefer_pim", channels=4).lower(W, x).compile()
    assert not res.plans[0].choice.cached                         # recompiled, not a crash
    assert len(json.loads(path.read_text())) == 1                 # and the file rewritten


def test_placement_goes_each_way():
    rng = np.random.default_rng(0)
    # a tiny GEMV: the GPU roofline (36 ns launch) beats the PIM frame overhead -> host
    # (the default "occupancy" GPU model's 1 us launch loses to PIM here)
    small = pim_jit(lambda W, x: W @ x, backend="hbm-pim", tuner=tuner(), channels=4, gpu="roofline")
    lw = small.lower(np.ones((16, 16), np.float32), np.ones(16, np.float32)).compile()
    assert lw.plans[0].placement == "host" and "beats PIM" in lw.plans[0].reason
    # a 4096 x 4096 GEMV with resident weights on AttAcc: PIM beats the GPU roofline
    W = rng.standard_normal((4096, 4096)).astype(np.float16)
    x = rng.standard_normal(4096).astype(np.float16)
    big = pim_jit(lambda W, x: W @ x, backend="attacc", tuner=ParallelFirst(top_k=4), resident=("W",))
    lb = big.lower(W, x).compile()
    assert lb.plans[0].placement == "pim" and "beats the" in lb.plans[0].reason
    choice = lb.plans[0].choice
    assert float(choice.report.total_ns) < lb.plans[0].host_ns


def test_placement_pim_refuses_unsupported_primitives():
    f = pim_jit(lambda x: jnp.sort(x), tuner=tuner(), placement="pim", channels=4)
    with pytest.raises(PimCompileError, match="sort"):
        f.lower(np.ones(16, np.float32))
    auto = pim_jit(lambda x: jnp.sort(x), tuner=tuner(), channels=4).lower(np.ones(16, np.float32))
    assert auto.plans[0].placement == "host" and "sort" in auto.as_text()


def test_resident_weights_are_paid_once_and_reported_separately():
    rng = np.random.default_rng(0)
    W = rng.standard_normal((1024, 1024)).astype(np.float32)
    x = rng.standard_normal(1024).astype(np.float32)
    kw = dict(backend="hbm-pim", tuner=tuner(), placement="prefer_pim", channels=16)
    moving = pim_jit(lambda W, x: W @ x, **kw).lower(W, x).compile().report()
    resident = pim_jit(lambda W, x: W @ x, resident=("W",), **kw).lower(W, x).compile().report()
    assert moving.resident_ns == 0 and resident.resident_ns > 0
    assert resident.total_ns < moving.total_ns
    assert resident.ops[0].rearrangement < moving.ops[0].rearrangement
    with pytest.raises(ValueError, match="not an argument"):
        pim_jit(lambda W, x: W @ x, resident=("V",), **kw).lower(W, x)


def test_attention_block_is_one_attacc_program():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((4, 32)).astype(np.float32)
    K = rng.standard_normal((4, 64, 32)).astype(np.float32)
    V = rng.standard_normal((4, 64, 32)).astype(np.float32)

    def attn(q, K, V):
        s = jnp.einsum("hd,hnd->hn", q, K) / jnp.sqrt(jnp.float32(32))
        return jnp.einsum("hn,hnd->hd", jax.nn.softmax(s, axis=-1), V)
    compiled = pim_jit(attn, backend="attacc", tuner=tuner(), placement="prefer_pim",
                       channels=2).lower(q, K, V).compile()
    rep = compiled.report()
    assert [o.placement for o in rep.ops].count("pim") == 1
    assert any(o.name == "attention" for o in rep.ops)
    assert sum(o.placement == "fused" for o in rep.ops) == 5
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _close(compiled(q, K, V), attn(q, K, V), TOL["attacc"])


def test_report_derived_figures_follow_the_program_and_the_peaks():
    """Bytes each way are the program's per-call transfers (resident placement
    excluded, UPMEM too), operand bytes every operand once plus the result at
    the backend's element size, and the bandwidths follow from the times."""
    from pimjax.hw import derived_peaks
    rng = np.random.default_rng(1)
    W = rng.standard_normal((512, 256)).astype(np.float32)
    x = rng.standard_normal(256).astype(np.float32)
    kw = dict(backend="hbm-pim", tuner=tuner(), placement="prefer_pim", channels=4)
    c = pim_jit(lambda W, x: W @ x, **kw).lower(W, x).compile()
    o = c.report().ops[0]
    st = c.plans[0].choice.program.stats
    assert o.operand_bytes == 2 * (512 * 256 + 256 + 512)
    assert o.to_pim_bytes == st.rearrange_bytes + st.register_bytes > 512 * 256 * 2
    assert o.from_pim_bytes == st.readback_bytes > 0
    peaks = derived_peaks(get_backend("hbm-pim", channels=4))
    ns_per_cycle = o.ns / o.cycles
    assert o.effective_GBps == pytest.approx(o.operand_bytes / o.ns)
    assert o.internal_pct == pytest.approx(100 * o.operand_bytes / (o.compute * ns_per_cycle)
                                           / peaks["internal_bandwidth_GBps"])
    link_ns = (o.rearrangement + o.readback) * ns_per_cycle
    assert o.link_GBps == pytest.approx((o.to_pim_bytes + o.from_pim_bytes) / link_ns)
    at_peak = (o.to_pim_bytes / peaks["external_bandwidth_GBps"]
               + o.from_pim_bytes / peaks["readback_bandwidth_GBps"])
    assert o.link_pct == pytest.approx(100 * at_peak / link_ns) and 0 < o.link_pct <= 100
    d = c.report().to_dict()["ops"][0]
    assert d["operand_bytes"] == o.operand_bytes and d["internal_pct"] == pytest.approx(o.internal_pct)

    # UPMEM: a resident matrix leaves the per-call host -> DPU bytes
    Wi = rng.integers(-50, 50, (256, 128)).astype(np.int32)
    xi = rng.integers(-50, 50, 128).astype(np.int32)
    kw = dict(backend="upmem", tuner=tuner(), placement="prefer_pim", dpus=64)
    moving = pim_jit(lambda W, x: W @ x, **kw).lower(Wi, xi).compile()
    kept = pim_jit(lambda W, x: W @ x, resident=("W",), **kw).lower(Wi, xi).compile()
    pm, pk = (c.plans[0].choice.program for c in (moving, kept))
    assert pm.draft == pk.draft
    assert pk.stats.resident_bytes >= 4 * 256 * 128 and pm.stats.resident_bytes == 0
    assert pk.stats.rearrange_bytes + pk.stats.resident_bytes == pk.stats.h2d_bytes
    assert moving.report().ops[0].to_pim_bytes - kept.report().ops[0].to_pim_bytes == pk.stats.resident_bytes


def test_host_roofline_charges_each_value_at_its_own_size():
    """int32 data left on hbm-pim's host moves 4 B per element, int8 on
    UPMEM's host 1 B; float32 on the fp16 backend is charged at fp16 (equal
    precision with the PIM result)."""
    n = 1 << 16
    for backend, dtype, size in (("hbm-pim", np.int32, 4), ("upmem", np.int8, 1), ("hbm-pim", np.float32, 2)):
        a = np.ones(n, dtype)
        f = pim_jit(lambda a, b: a + b, backend=backend, tuner=tuner(), **SMALL[backend])
        o = f.lower(a, a).compile().report().ops[0]
        base = f.backend.system.baseline          # the GPU on the same memory (hbm-pim), the CPU (upmem)
        want = (base.time_ns(3 * n * size, n) if base.model == "roofline"
                else base.elementwise_ns(3 * n * size, n, outputs=n))
        assert o.gpu_ns == pytest.approx(want), (backend, dtype)
