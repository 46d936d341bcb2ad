"""The decode loop: per-phase sums equal independent totals; contexts, buckets and tuning."""

import numpy as np
import pytest

from pimjax import pim_jit
from pimjax.models.configs import get_config
from pimjax.models.layers import layer_shapes, make_layer
from pimjax.search.tuner import Tuner
from pimjax.studies.inference import PHASES, RESIDENT, SYSTEMS, decode, gpu_attention_ns

CFG = get_config("gpt3-13b").scaled(d_model=128, n_heads=2, n_kv_heads=2, d_ff=256, n_layers=3)
# the consistency checks run on the roofline GPU model, where the decode loop's attention is
# the attention ops' own GPU times (on the kernel models it is `attention_ns`: test below)
GPU = "roofline"


@pytest.fixture(scope="module")
def run():
    tuner = Tuner()
    return tuner, decode(CFG, "attacc", batch=1, prompt=31, tokens=4, l_bucket=16, tuner=tuner, gpu=GPU)


def test_steps_follow_attaccs_contexts(run):
    _, res = run
    # tokens 2..N are decode steps at contexts Lin + 1 ... Lin + N - 1
    assert [L for L, _ in res.steps] == [32, 33, 34]
    assert sorted(res.attention) == [32, 48]          # 16-token KV blocks: two attention compiles
    assert res.tuning_s > 0 and res.verify_s > 0


def test_phase_sums_equal_independent_totals(run):
    tuner, res = run
    # at the context of the layer compile (32, a bucket edge): the GPU-only total is the
    # layer's own GPU roofline, and pimjax's is pim_jit's "auto" placement of the same layer
    L, times = res.steps[0]
    args = layer_shapes(CFG, 1, L)
    auto = pim_jit(make_layer(CFG, append=False), backend=res_backend(res), resident=RESIDENT, tuner=tuner)
    rep = auto.lower(*args).compile().report()
    assert sum(times["gpu"].values()) == pytest.approx(rep.gpu_ns * CFG.n_layers, rel=1e-6)
    assert sum(times["pimjax"].values()) == pytest.approx(rep.total_ns * CFG.n_layers, rel=1e-6)


def test_per_token_is_the_mean_of_steps(run):
    _, res = run
    per = res.per_token()
    for s in SYSTEMS:
        want = np.mean([sum(t[s].values()) for _, t in res.steps])
        assert sum(per[s].values()) == pytest.approx(want)
        assert res.totals()[s] == pytest.approx(want)
    df = res.table()
    assert list(df.columns[:5]) == list(PHASES)
    assert df["total"].to_numpy() == pytest.approx(df[list(PHASES)].sum(axis=1).to_numpy())


def test_systems_differ_only_where_they_place_differently(run):
    _, res = run
    for L, t in res.steps:
        g = t["gpu"]
        # AttAcc-Base changes only the attention; the GPU's attention is the roofline at exactly L
        assert {p for p in PHASES if t["attacc-base"][p] != g[p]} <= {"attention"}
        assert g["attention"] == pytest.approx(gpu_attention_ns(CFG, 1, L, res_backend(res)) * CFG.n_layers)
        assert {p for p in PHASES if t["attacc-full"][p] != t["attacc-base"][p]} <= {"ffn"}
        assert t["attacc-full"]["ffn"] <= g["ffn"]
        for s in ("base+dcc", "pimjax"):          # PIM only where it beats the GPU
            assert all(t[s][p] <= g[p] * (1 + 1e-9) for p in PHASES if p != "attention")


def test_gpu_attention_interpolates_exactly():
    from pimjax.hw.presets import get_backend
    from pimjax.studies.inference import GpuAttention
    be = get_backend("attacc", gpu=GPU)
    for cfg, batch in ((CFG, 1), (get_config("llama2-70b"), 4)):
        gpu = GpuAttention(cfg, batch, be)
        for L in (2, 33, 129, 2049):
            assert gpu(L) == pytest.approx(gpu_attention_ns(cfg, batch, L, be), rel=1e-12)


@pytest.mark.parametrize("model", ["occupancy", "attacc"])
def test_gpu_attention_on_kernel_models_is_three_kernels(model):
    """On the kernel GPU models the decode's attention is score, one softmax and
    context kernels (`HostModel.attention_ns`), not jnp's five softmax ops each
    charged as a kernel: less than the ops' sum, more than the score GEMV alone."""
    from pimjax.hw.presets import get_backend
    from pimjax.studies.inference import GpuAttention
    be = get_backend("attacc", gpu=model)
    host = be.system.baseline
    gpu = GpuAttention(CFG, 2, be)
    for L in (33, 2049):
        want = host.attention_ns(CFG.n_heads, CFG.head_dim, L, 2)
        assert gpu(L) == pytest.approx(want, rel=1e-12)
        assert host.gemm_ns(1, L, CFG.head_dim, batch=2 * CFG.n_heads) < want < gpu_attention_ns(CFG, 2, L, be)


def res_backend(res):
    from pimjax.hw.presets import get_backend
    return get_backend("attacc", gpu=GPU)


def test_bad_arguments():
    with pytest.raises(ValueError, match="tokens"):
        decode(CFG, tokens=1)
    with pytest.raises(ValueError, match="ffn_pim_fraction"):
        decode(CFG, ffn_pim_fraction=1.5)


def test_prefill_on_the_gpu(run):
    from pimjax.hw.presets import get_backend
    from pimjax.studies.inference import prefill_gpu_ns
    _, res = run
    be = get_backend("attacc", gpu=GPU)
    assert res.prefill_ns == pytest.approx(prefill_gpu_ns(CFG, 1, 31, be))
    # the prompt's 31 tokens read the weights once: cheaper than 31 decode steps, dearer than one
    step = sum(res.steps[0][1]["gpu"].values())
    assert step < res.prefill_ns < 31 * step


def test_conversions_are_recorded_not_warned():
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")                   # a PrecisionWarning would fail the test
        res = decode(CFG, "attacc", batch=1, prompt=15, tokens=2, l_bucket=16, tuner=Tuner(), gpu=GPU)
    assert res.conversions and all("float32 -> float16" in c for c in res.conversions)
