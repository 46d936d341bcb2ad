"""GPU models (hw/gpu.py) and the systems the presets compare PIM with.

The AttAcc-model figures are checked against attacc.md (the AttAcc simulator's
own end-to-end run: GPT-3 13B decode on 8 A100a, tensor-parallel 8), and in
closed form from the model's parameters; fair pairing against `derived_peaks`.
"""
import math

import numpy as np
import pytest

from pimjax.hw import (
    GPU_MODELS,
    a100,
    derived_peaks,
    describe_system,
    gemm_ns,
    get_backend,
    gpu_on,
    gpu_time,
    rtx2060,
    system_line,
)
from pimjax.hw.gpu import wave_utilisation
from pimjax.hw.host import pimflow_rtx2060

# GPT-3 13B (attacc.md / AttAcc config.py make_model_config): 40 layers, d_model 5120, 40 heads x 128,
# FFN 4 x d_model; tensor-parallel 8 -> 5 heads, 640 model columns per GPU; batch 1, FP16
LAYERS, D_MODEL, HEADS, D_HEAD, TP = 40, 5120, 40, 128, 8
ATTACC_ATTENTION_NS = {129: 2_543, 513: 10_053, 2049: 40_096}   # attacc.md: attention per layer, 8 x A100a
ATTACC_FC_MS_PER_TOKEN = 1.212                                  # attacc.md: FC (QKV + proj + FFN), 40 layers


def _attacc_gpu():
    return a100("hbm3", model="attacc")       # AttAcc's A100a: 3352 GB/s (config.py OFF_MEM_BW_PER_DEVICE)


@pytest.mark.parametrize("L", sorted(ATTACC_ATTENTION_NS))
def test_attacc_model_attention_matches_attacc_md(L):
    """5 heads per GPU: score (1 x L over d 128) and context (1 x 128 over L), batched by head."""
    gpu = _attacc_gpu()
    h = HEADS // TP
    t = gemm_ns(gpu, 1, L, D_HEAD, batch=h) + gemm_ns(gpu, 1, D_HEAD, L, batch=h)
    assert t == pytest.approx(ATTACC_ATTENTION_NS[L], rel=0.10)
    assert gpu.attention_ns(h, D_HEAD, L, softmax=False) == pytest.approx(t)
    # the same figure in closed form from the model's parameters: one thread block per head, so
    # 5 of 108 SMs' share of 3352 GB/s x 0.85; each operand read once (m = 1: the L2 tile holds it)
    util = h / 108
    bw = 3352e9 * 0.85 * util
    score = h * (D_HEAD + L * D_HEAD + L) * 2 / bw * 1e9
    context = h * (L + D_HEAD * L + D_HEAD) * 2 / bw * 1e9
    assert t == pytest.approx(score + context, rel=1e-9)
    # the GPU of AttAcc's system preset: the A100 on the same 5 stacks (3328 GB/s, attacc.md's 665.6
    # GB/s per stack; AttAcc's config.py says 670.4) -- within the same 10 %
    preset = get_backend("attacc", system="attacc").system.baseline
    assert preset.model == "attacc"
    assert preset.attention_ns(h, D_HEAD, L, softmax=False) == pytest.approx(ATTACC_ATTENTION_NS[L], rel=0.10)


def test_attacc_model_fc_matches_attacc_md():
    gpu = _attacc_gpu()
    cols = D_MODEL // TP
    per_layer = (gemm_ns(gpu, 1, 3 * cols, D_MODEL)           # QKV
                 + gemm_ns(gpu, 1, D_MODEL, cols)             # output projection
                 + gemm_ns(gpu, 1, 4 * cols, D_MODEL)         # FFN up
                 + gemm_ns(gpu, 1, D_MODEL, 4 * cols))        # FFN down
    assert LAYERS * per_layer / 1e6 == pytest.approx(ATTACC_FC_MS_PER_TOKEN, rel=0.10)
    # attacc.md: the same model's 4096 x 4096 FP16 GEMV at batch 1 is 12.4 us
    assert gemm_ns(gpu, 1, 4096, 4096) == pytest.approx(12_400, rel=0.10)


def test_attacc_model_allreduce_and_act_norm_match_attacc_md():
    """attacc.md: all-reduce 3.400 ms and activation + norms 0.883 ms per token (40 layers): two
    all-reduces of the 5120-wide FP16 row per layer on 8 GPUs, a GELU over 4 x 640 and two layer
    norms over 5120 (AttAcc's ACT / NORM bytes: in + out, and in + in + out)."""
    from pimjax.hw import allreduce_ns, elementwise_ns
    gpu = _attacc_gpu()
    ar = LAYERS * 2 * allreduce_ns(gpu, D_MODEL * 2, TP)
    assert ar / 1e6 == pytest.approx(3.400, rel=0.10)
    assert allreduce_ns(gpu, D_MODEL * 2, TP) == pytest.approx(7 * (6060 + 0.009 * D_MODEL * 2 / TP))
    ff = 4 * D_MODEL // TP
    act = elementwise_ns(gpu, 2 * ff * 2, 8 * ff, outputs=ff, kind="act")
    norm = elementwise_ns(gpu, 3 * D_MODEL * 2, 5 * D_MODEL, outputs=D_MODEL, kind="norm")
    assert LAYERS * (act + 2 * norm) / 1e6 == pytest.approx(0.883, rel=0.10)
    assert allreduce_ns(gpu, 1 << 20, 1) == 0.0


def test_attacc_model_fc_occupancy_follows_its_tiles():
    """An FC layer's thread blocks are its L1 tiles: QKV (1 x 1920 over 5120) fills 240 blocks of
    1 x 8 -> 240 / 324 of the SMs' time; the bandwidth term is the weights + vector + output."""
    gpu = _attacc_gpu()
    n, k = 3 * (D_MODEL // TP), D_MODEL
    util = wave_utilisation(math.ceil(n / 8), 108)
    assert util == pytest.approx(240 / 324)
    bytes_ = (n * k + k * math.ceil(n / n) + n) * 2
    assert gemm_ns(gpu, 1, n, k) == pytest.approx(bytes_ / (3352e9 * 0.85 * util) * 1e9, rel=1e-9)


def test_occupancy_model_launch_and_waves():
    """The default model: a GEMV is a warp per output (8 per 256-thread block), the SMs' share
    follows the waves of blocks, plus a 1 us launch."""
    gpu = a100("hbm3", model="occupancy")
    n = k = 4096
    blocks = n // 8
    util = blocks / (math.ceil(blocks / 108) * 108)
    want = (n * k + k + n) * 2 / (3352e9 * 0.81 * util) * 1e9 + 1000.0
    assert gemm_ns(gpu, 1, n, k) == pytest.approx(want, rel=1e-9)
    # few heads cannot fill the GPU: 5 heads' context GEMV (640 outputs, 80 blocks) runs at 80/108
    ctx = gemm_ns(gpu, 1, D_HEAD, 2049, batch=5)
    assert ctx == pytest.approx(5 * (2049 + D_HEAD * 2049 + D_HEAD) * 2 / (3352e9 * 0.81 * 80 / 108) * 1e9
                                + 1000.0, rel=1e-9)
    # slower than the roofline (36 ns launches, full bandwidth) at every L; at long L faster than
    # AttAcc's (a block per head: 5 / 108 of the bandwidth), at short L its three 1 us launches dominate
    roof, att = a100("hbm3"), _attacc_gpu()
    for L in ATTACC_ATTENTION_NS:
        assert roof.attention_ns(5, D_HEAD, L) < gpu.attention_ns(5, D_HEAD, L)
    assert gpu.attention_ns(5, D_HEAD, 2049) < att.attention_ns(5, D_HEAD, 2049)
    assert gpu.attention_ns(5, D_HEAD, 129) > 3 * 1000.0


def test_occupancy_model_gemm_picks_its_tile_and_split():
    """A GEMM (m, n >= 64) is the fastest of its tiled kernels: a block per (tile, k slice); a split
    of k adds its FP32 partial sums (written and read) and a reduction launch.  Derived here for
    BERT's 64-token FC on the RTX 2060 (30 SMs): a 128 x 128 tile would give 6 blocks (a fifth of the
    SMs), 32 x 32 tiles 48."""
    from pimjax.hw import get_backend
    gpu = get_backend("newton").system.gpu
    bw, fl, launch = (float(gpu.mem_bandwidth * gpu.bandwidth_efficiency),
                      float(gpu.peak_flops * gpu.flops_efficiency), float(gpu.launch_overhead_ns))
    m, n, k = 64, 768, 768
    base = (m * k + k * n + m * n) * 2

    def kernel(tm, tn, s):
        blocks = math.ceil(m / tm) * math.ceil(n / tn) * s
        util = blocks / (math.ceil(blocks / gpu.sms) * gpu.sms)
        extra = 2.0 * s * m * n * 4 if s > 1 else 0.0
        t = max((base + extra) / (bw * util), 2.0 * m * n * k / (fl * util)) * 1e9 + launch
        return t + (launch if s > 1 else 0.0)

    tiles = [(128, 128), (128, 64), (64, 128), (64, 64), (64, 32), (32, 64), (32, 32)]
    want = min(kernel(tm, tn, s) for tm, tn in tiles for s in (1, 2, 4, 8, 16))
    assert gemm_ns(gpu, m, n, k) == pytest.approx(want, rel=1e-9)
    assert want < kernel(128, 128, 1) / 3            # the one-tile-size model's 6 blocks
    # a long k on a small output: 4 tiles fill 4 of 30 SMs, so split-K pays despite its partials
    m, n, k = 64, 64, 8192
    base = (m * k + k * n + m * n) * 2
    split = min(kernel(tm, tn, s) for tm, tn in tiles for s in (2, 4, 8, 16))
    assert split < min(kernel(tm, tn, 1) for tm, tn in tiles)
    assert gemm_ns(gpu, m, n, k) == pytest.approx(split, rel=1e-9)
    # k = 48 holds one 32-deep step: no split is allowed
    m, n, k = 64, 64, 48
    base = (m * k + k * n + m * n) * 2
    assert gemm_ns(gpu, m, n, k) == pytest.approx(min(kernel(tm, tn, 1) for tm, tn in tiles), rel=1e-9)
    # no cliff where the GEMV kernel (a warp per output) gives way to the tiled GEMM
    for n_, k_ in ((768, 768), (3072, 768), (768, 3072)):
        assert gemm_ns(gpu, 64, n_, k_) < 1.3 * gemm_ns(gpu, 63, n_, k_)


def test_dcc_and_roofline_models_are_the_roofline():
    dcc = a100("hbm3", model="dcc")            # dcc.md: 312 TFLOP/s, 3352 GB/s x 0.81
    bytes_ = (4096 * 4096 + 2 * 4096) * 2
    assert gemm_ns(dcc, 1, 4096, 4096) == pytest.approx(bytes_ / (3352e9 * 0.81) * 1e9, rel=1e-9)
    assert dcc.flops_efficiency == 1.0 and dcc.launch_overhead_ns == 0.0
    roof = a100("hbm3")
    assert gpu_time(roof, "gemv", n=4096, k=4096) == pytest.approx(float(roof.time_ns(bytes_, 2 * 4096 * 4096)))


def test_host_time_on_graph_ops_is_the_same_model():
    """pim_jit's per-op GPU time and gemm_ns agree: a traced score GEMV of 5 heads is
    gemm_ns(1, L, d, batch=5) on every model."""
    import jax.numpy as jnp

    from pimjax import make_graph
    from pimjax.sim.host import host_time, op_gemm_shape
    L = 513
    q = np.ones((5, D_HEAD), np.float16)
    K = np.ones((5, L, D_HEAD), np.float16)
    g = make_graph(lambda q, K: jnp.einsum("hd,hld->hl", q, K), q, K)
    op = next(o for o in g.ops if o.kind == "contraction")
    assert op_gemm_shape(op) == {"m": 1, "n": L, "k": D_HEAD, "batch": 5}
    shapes = {i: v.shape for i, v in enumerate(g.values)}
    from pimjax.hw.profile import GpuProfile, profile_host
    measured = GpuProfile("one point", ((1, L, D_HEAD, 5, 2),), (4321.0,))
    for model in GPU_MODELS:
        gpu = (pimflow_rtx2060() if model == "pimflow" else
               profile_host(a100("hbm3", model="library"), measured) if model == "profile" else
               a100("hbm3", model=model))
        assert host_time(op, gpu, shapes, 2) == pytest.approx(gemm_ns(gpu, 1, L, D_HEAD, batch=5)), model
        if model == "profile":           # the measured point, plus the launch the table leaves out
            assert gemm_ns(gpu, 1, L, D_HEAD, batch=5) == 4321.0 + float(gpu.launch_overhead_ns)


FAIR = [("hbm-pim", {}), ("hbm-pim", dict(channels=16)), ("attacc", {}), ("attacc", dict(stacks=2)),
        ("attacc", dict(system="dcc")), ("attacc", dict(system="attacc")), ("attacc", dict(channels=2)),
        ("attacc", dict(system="dcc", stacks=3)), ("newton", {}), ("newton", dict(clock="aim", channels=8)),
        ("newton", dict(total_channels=16))]


@pytest.mark.parametrize("name,opts", FAIR)
def test_vs_gpu_reads_the_same_memory(name, opts):
    """"vs GPU" compares PIM with the GPU on the PIM system's own memory: the baseline's
    bandwidth is the PIM system's external bandwidth, whatever the stack / channel count."""
    b = get_backend(name, **opts)
    ext = float(derived_peaks(b)["external_bandwidth_GBps"])
    # a system with a concurrent GPU (newton's PIMFlow memory): the baseline reads the GPU-only channels too
    gpu_only = 0.0 if b.system.cogpu is None else b.system.cogpu.mem_bandwidth / 1e9
    assert b.system.baseline.mem_bandwidth / 1e9 == pytest.approx(ext + gpu_only, rel=1e-9)
    assert describe_system(b)["same_memory"]
    assert "NOT the PIM system's memory" not in system_line(b)


def test_attacc_systems():
    ref, dcc, att = (get_backend("attacc", system=s) for s in ("reference", "dcc", "attacc"))
    assert ref.n_groups == 16 and dcc.n_groups == att.n_groups == 80        # 1 / 5 HBM3 stacks
    assert ref.system.baseline.model == "occupancy"
    assert dcc.system.baseline.model == "dcc" and att.system.baseline.model == "attacc"
    assert float(derived_peaks(dcc)["external_bandwidth_GBps"]) == pytest.approx(5 * 665.6)
    assert get_backend("attacc") == ref           # the default is the reference simulator's stack
    # the PIM programs' own host work (read-back, merge) and the cost-model features keep the host
    assert ref.system.host == a100("hbm3")
    with pytest.raises(ValueError, match="system"):
        get_backend("attacc", system="dgx")


def test_gpu_option_and_host_option():
    b = get_backend("attacc", gpu="roofline")
    assert b.system.baseline.model == "roofline" and b.system.baseline.mem_bandwidth == pytest.approx(665.6e9)
    mine = a100("hbm2e", model="dcc")
    assert get_backend("hbm-pim", gpu=mine).system.baseline is mine
    # host= alone: the comparison is with that host (it was before System.gpu existed)
    h = a100("hbm3")
    assert get_backend("hbm-pim", host=h).system.baseline is h
    with pytest.raises(ValueError, match="gpu"):
        get_backend("newton", gpu="fast")
    with pytest.raises(ValueError, match="model"):
        a100(model="magic")
    with pytest.raises(ValueError, match="A100a"):
        rtx2060(model="attacc")
    assert gpu_on("rtx2060", 224.0).mem_bandwidth == pytest.approx(224e9)


def test_report_header_states_the_system():
    import jax

    from pimjax import pim_jit
    f = pim_jit(lambda W, x: jax.nn.relu(W @ x), backend="attacc", channels=2)
    W, x = np.ones((64, 128), np.float16), np.ones(128, np.float16)
    rep = f.lower(W, x).report()
    d = rep.to_dict()["system"]
    assert d["groups"] == 2 and d["external_GBps"] == pytest.approx(2 * 41.6)
    assert d["gpu"]["model"] == "occupancy" and d["gpu"]["bandwidth_GBps"] == pytest.approx(2 * 41.6)
    assert d["gpu"]["bandwidth_efficiency"] == pytest.approx(0.81) and d["same_memory"]
    text = rep.as_text()
    assert "external 83.2 GB/s" in text and "occupancy model" in text and "launch 1,000 ns" in text


def test_newton_is_pimflows_channel_grouped_memory():
    """PIMFlow §4.1 / §5: 32 GDDR6 channels, 16 PIM-enabled; the baseline GPU reads all 32, the GPU
    beside PIM only its 16; per-channel bandwidth from the timing (one 32 B burst per tBL)."""
    b = get_backend("newton")
    per_channel = float(derived_peaks(b)["external_bandwidth_GBps"]) / b.n_groups
    assert b.n_groups == 16
    assert b.system.baseline.mem_bandwidth / 1e9 == pytest.approx(32 * per_channel)
    assert b.system.cogpu.mem_bandwidth / 1e9 == pytest.approx(16 * per_channel)
    assert b.system.cogpu.model == b.system.baseline.model == "occupancy"
    assert "beside PIM: RTX 2060" in system_line(b)
    b8 = get_backend("newton", channels=8)                 # a configurable share: 8 PIM + 24 GPU-only
    assert b8.system.cogpu.mem_bandwidth / 1e9 == pytest.approx(24 * per_channel)
    assert get_backend("newton", total_channels=16).system.cogpu is None     # every channel PIM
    with pytest.raises(ValueError, match="total_channels"):
        get_backend("newton", channels=16, total_channels=8)


def test_gpu_by_name_and_its_timing_model_apart():
    from pimjax.hw import gpus
    from pimjax.hw.gpu import GENERIC_GPU_MODELS
    from pimjax.hw.host import h100
    b = get_backend("attacc", system="attacc", gpu="h100", gpu_model="roofline")
    g = b.system.baseline
    assert g.name.startswith("H100") and g.model == "roofline" and g.mem_bandwidth == pytest.approx(3328e9)
    assert get_backend("attacc", gpu="h200").system.baseline.name.startswith("H200")
    assert get_backend("newton", gpu="t4").system.cogpu.name.startswith("T4")          # beside PIM: the same card
    # a timing model as gpu= (the older spelling) and as gpu_model= give the same GPU
    assert get_backend("attacc", gpu="roofline").system.gpu == get_backend("attacc", gpu_model="roofline").system.gpu
    # the default is unchanged
    assert get_backend("attacc").system.gpu == get_backend("attacc", gpu="a100").system.gpu
    # each preset's error lists exactly what it accepts: "pimflow" only where taken
    for name in ("attacc", "hbm-pim"):
        with pytest.raises(ValueError) as err:
            get_backend(name, gpu="h1000")
        assert str(list(GENERIC_GPU_MODELS)) in str(err.value) and "'pimflow'" not in str(err.value)
        assert str(sorted(gpus.GPU_SPECS)) in str(err.value)
    with pytest.raises(ValueError, match=r"'library', 'pimflow'\]") as err:
        get_backend("newton", gpu="h1000")
    assert "'attacc'" not in str(err.value).split("timing model")[1]
    with pytest.raises(ValueError, match="newton preset only"):
        get_backend("attacc", gpu_model="pimflow")
    assert get_backend("newton", gpu_model="pimflow").system.gpu.model == "pimflow"
    # host= alone: System.gpu is that host, so a script reading its name works
    b = get_backend("attacc", host=h100())
    assert b.system.gpu is b.system.host and b.system.gpu.name == b.system.baseline.name
