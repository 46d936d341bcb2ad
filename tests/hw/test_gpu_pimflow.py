"""The "pimflow" GPU model: PIMFlow's Accel-Sim RTX 2060 (hw.host.pimflow_rtx2060, hw.gpu),
the named paper GPUs (hw.host.paper_gpu) and the GPU the report says it compared with.

Expectations are derived here from the Accel-Sim configuration's own numbers (restated below
from the artifact's gpgpusim.config / trace.config), never read back from the model."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pimjax.hw import gpu
from pimjax.hw.core import HostModel
from pimjax.hw.host import a100, paper_gpu, pimflow_rtx2060, rtx2060

# the artifact's configuration (SM75_RTX2060), restated: the test's independent parameters
CORE_HZ = 1365e6                     # -gpgpu_clock_domains 1365:...
DRAM_HZ = 3500.5e6                   #   ...:3500.5
SMS = 30                             # -gpgpu_n_clusters 30
TENSOR_MACS_PER_CYCLE_SM = 4 * 1024 / 16   # 4 TENSOR units, an m16n8k8 HMMA each per 16 cycles
SIMT_FMA_PER_CYCLE_SM = 4 * 32 / 2   # 4 SP units, a warp instruction each per 2 cycles
LAUNCH_CYCLES = 5000                 # -gpgpu_kernel_launch_latency 5000
LATENCY_CYCLES = 32 + 194 + 96       # L1 + L2 ROP + DRAM latencies
CHANNEL_BPS = 2 * 4 * DRAM_HZ        # 2 B bus x 4 beats per command clock
L2_PER_CHANNEL = 2 * 64 * 128 * 16   # 2 sub-partitions x 64 sets x 128 B x 16 ways
LAUNCH_NS = LAUNCH_CYCLES / CORE_HZ * 1e9
LAT_NS = LATENCY_CYCLES / CORE_HZ * 1e9
KERNEL_NS = LAUNCH_NS + LAT_NS       # what any kernel costs before its body


@pytest.mark.parametrize("channels", [32, 16, 12])
def test_host_is_the_accel_sim_configuration(channels):
    h = pimflow_rtx2060(channels)
    assert h.model == "pimflow" and h.sms == SMS
    assert h.peak_flops == pytest.approx(SMS * TENSOR_MACS_PER_CYCLE_SM * 2 * CORE_HZ)      # 20.97 TFLOP/s
    assert h.simt_flops == pytest.approx(SMS * SIMT_FMA_PER_CYCLE_SM * 2 * CORE_HZ)          # 5.24 TFLOP/s
    assert h.mem_bandwidth == pytest.approx(channels * CHANNEL_BPS)
    assert h.l2_bytes == channels * L2_PER_CHANNEL
    assert h.launch_overhead_ns == pytest.approx(LAUNCH_NS) and h.mem_latency_ns == pytest.approx(LAT_NS)
    assert (h.bandwidth_efficiency, h.flops_efficiency) == (1.0, 1.0)
    if channels == 12:          # the configuration's own 12 channels are the real card's 336 GB/s, 3 MB L2
        assert h.mem_bandwidth == pytest.approx(336e9, rel=1e-3) and h.l2_bytes == 3 * 1024 * 1024


def test_bad_options_name_the_option():
    for bad in (0, -1, 2.5, True, "32"):
        with pytest.raises(ValueError, match="channels"):
            pimflow_rtx2060(bad)
    with pytest.raises(ValueError, match="pimflow_rtx2060"):
        rtx2060(model="pimflow")
    with pytest.raises(ValueError, match="occupancy"):          # lists the models an A100 takes
        a100(model="pimflow")
    with pytest.raises(ValueError, match="simt_flops"):         # the model needs its configured fields
        HostModel("x", 1e12, 1e11, 1.0, 1.0, 0.0, model="pimflow", sms=30, l2_bytes=1 << 20)
    with pytest.raises(ValueError, match="attacc"):
        paper_gpu("newton")


def test_paper_gpus():
    assert paper_gpu("pimflow") == pimflow_rtx2060(32)
    assert paper_gpu("dcc") == a100("hbm3", model="dcc")
    att = paper_gpu("attacc")
    assert att == a100("hbm3", model="attacc") and att.mem_bandwidth == pytest.approx(3352e9)


def test_a_tiny_map_is_one_kernel():
    h = pimflow_rtx2060()
    bytes_ = 4.0
    t = gpu.elementwise_ns(h, bytes_, 1.0, outputs=1)
    # one block: one SM streams the 4 bytes at what its L1 MSHRs keep in flight per DRAM round trip
    # (Little's law: 256 lines of 128 B per 322-cycle trip, gpgpusim.config), far below the memory's rate
    per_sm = 256 * 128 / (322 / 1.365e9)
    assert per_sm < h.mem_bandwidth
    assert t == pytest.approx(KERNEL_NS + bytes_ / per_sm * 1e9)
    # and so on half the channels the same: one SM's loads in flight do not depend on the channels
    assert gpu.elementwise_ns(pimflow_rtx2060(16), bytes_, 1.0, outputs=1) == pytest.approx(t)


def test_a_gemv_is_the_product_kernel_and_its_epilogue():
    """cuBLAS's GEMV on the CUDA cores (a warp per output, 8 warps a block), then TVM's bias kernel
    (1024 threads x 2 FP16 a block) reading the result from L2 and writing it to DRAM."""
    h = pimflow_rtx2060()
    n, k, eb = 4096, 4096, 2
    per_sm = 256 * 128 / (322 / 1.365e9)          # an SM's loads in flight per DRAM round trip (Little's law)

    def bw(util):                                 # the memory's rate, or what the busy SMs keep in flight
        return min(h.mem_bandwidth, util * SMS * per_sm)
    blocks = math.ceil(n / 8)
    util = blocks / (math.ceil(blocks / SMS) * SMS)
    product = max((n * k + k + n) * eb / bw(util), 2.0 * n * k / (h.simt_flops * util)) * 1e9
    eblocks = math.ceil(n / 2048)
    eutil = eblocks / (math.ceil(eblocks / SMS) * SMS)
    epilogue = max(n * eb / bw(eutil), 2 * n * eb / h.l2_bandwidth, n / (h.simt_flops * eutil)) * 1e9
    assert gpu.gemm_ns(h, 1, n, k) == pytest.approx(2 * KERNEL_NS + product + epilogue)


def test_a_large_gemm_runs_at_the_configured_tensor_peak():
    """4096^3: cuDNN-sized tiles keep every SM's tensor units busy but the last wave's (>= 97 %)."""
    h = pimflow_rtx2060()
    m = n = k = 4096
    t = gpu.gemm_ns(h, m, n, k)
    ideal = 2.0 * m * n * k / h.peak_flops * 1e9
    assert ideal < t - 2 * KERNEL_NS < ideal / 0.97 + 100e3     # + the epilogue (32 MB at 896 GB/s: ~40 us)
    # compute bound: half the channels cost only the epilogue's bandwidth
    t16 = gpu.gemm_ns(pimflow_rtx2060(16), m, n, k)
    assert 1.0 <= t16 / t < 1.02


def test_half_the_channels_double_a_bandwidth_bound_kernel_only():
    """A weight GEMV streams its bytes: its body takes twice as long on 16 channels, and the
    launches do not change -- the GPU beside PIM is slower only where the kernel is memory-bound."""
    h32, h16 = pimflow_rtx2060(32), pimflow_rtx2060(16)
    n, k = 16384, 8192
    body32 = gpu.gemm_ns(h32, 1, n, k) - 2 * KERNEL_NS
    body16 = gpu.gemm_ns(h16, 1, n, k) - 2 * KERNEL_NS
    assert body16 / body32 == pytest.approx(2.0, rel=1e-6)


def test_operands_overflowing_l2_are_re_read_from_dram():
    """The same product with and without room for its operands in L2: with 1 channel (256 KB of
    L2) every tile load of a 64 MB product misses; the operand bytes passed in decide it."""
    h = pimflow_rtx2060(1)
    m, n, k = 4096, 4096, 4096
    fits = gpu.gemm_ns(h, m, n, k, operand_bytes=1024.0 + 2 * m * n)       # tiny operands: they fit
    spills = gpu.gemm_ns(h, m, n, k)                                       # 64 MB of operands
    assert spills > 2 * fits


def test_operand_bytes_is_read_by_the_pimflow_model_only():
    for model in gpu.GENERIC_GPU_MODELS:
        h = a100("hbm3", model=model)
        assert gpu.gemm_ns(h, 64, 256, 512, operand_bytes=1.0) == gpu.gemm_ns(h, 64, 256, 512)


def test_host_time_of_a_convolution_reads_its_real_operand_bytes():
    """A 3 x 3 convolution's input is 9 x smaller than its im2col view: host_time passes the
    operands' real bytes (op_bytes) to the pimflow model."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    from pimjax import make_graph
    from pimjax.sim.host import host_time, op_bytes, op_gemm_shape
    H = W = 56
    C = F = 64
    g = make_graph(lambda x, w: lax.conv_general_dilated(x, w, (1, 1), [(1, 1), (1, 1)],
                                                         dimension_numbers=("NHWC", "HWIO", "NHWC")),
                   jax.ShapeDtypeStruct((1, H, W, C), jnp.float16), jax.ShapeDtypeStruct((3, 3, C, F), jnp.float16))
    op = next(o for o in g.ops if o.kind == "contraction")
    shapes = {i: v.shape for i, v in enumerate(g.values)}
    real = ((H + 2) * (W + 2) * C + 9 * C * F + H * W * F) * 2    # the op reads the padded input
    assert op_bytes(op, shapes, 2) == real
    h = pimflow_rtx2060()
    assert host_time(op, h, shapes, 2) == pytest.approx(gpu.gemm_ns(h, **op_gemm_shape(op), operand_bytes=real))


@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 4096), n=st.integers(1, 4096), k=st.integers(1, 4096), batch=st.integers(1, 64),
       channels=st.sampled_from([8, 16, 32]))
def test_product_bounds_on_random_shapes(m, n, k, batch, channels):
    """Any product: two kernels (library + epilogue), never faster than its tensor-core FLOP
    or its compulsory DRAM bytes allow, never slower on fewer channels, never faster with a
    longer contraction."""
    h = pimflow_rtx2060(channels)
    t = gpu.gemm_ns(h, m, n, k, batch)
    flops = 2.0 * batch * m * n * k
    compulsory = batch * (m * k + k * n + 2 * m * n) * 2       # operands in, result out and its epilogue's write
    assert t >= 2 * KERNEL_NS + flops / h.peak_flops * 1e9 - 1e-6
    assert t >= 2 * KERNEL_NS + compulsory / h.mem_bandwidth * 1e9 - 1e-6
    assert gpu.gemm_ns(pimflow_rtx2060(channels // 2), m, n, k, batch) >= t - 1e-6
    assert gpu.gemm_ns(h, m, n, 2 * k, batch) >= t - 1e-6


def test_newton_pairs_with_pimflows_gpu():
    """newton_config(..., gpu="pimflow"): the baseline is PIMFlow's GPU on all 32 channels, the GPU
    beside PIM the same on the 16 GPU-only channels; other presets refuse it, naming the valid models."""
    from pimjax.hw.presets import get_backend, newton_config
    b = newton_config("newton++", channels=16, total_channels=32, gpu="pimflow")
    assert b.system.gpu == pimflow_rtx2060(32) and b.system.cogpu == pimflow_rtx2060(16)
    b8 = get_backend("newton", channels=8, gpu="pimflow")
    assert b8.system.cogpu == pimflow_rtx2060(24)
    assert get_backend("newton").system.gpu.model == "occupancy"        # the default is unchanged
    for name in ("hbm-pim", "attacc"):
        with pytest.raises(ValueError, match="occupancy"):
            get_backend(name, gpu="pimflow")


def test_report_names_the_gpu_it_compared_with():
    import jax

    from pimjax import pim_jit
    W, x = np.ones((64, 128), np.float16), np.ones(128, np.float16)
    for opts, model, name in ((dict(backend="attacc", channels=2), "occupancy", "A100"),
                              (dict(backend="newton", channels=2, total_channels=2, gpu="pimflow"), "pimflow",
                               "PIMFlow Accel-Sim, 2 ch")):
        rep = pim_jit(lambda W, x: jax.nn.relu(W @ x), **opts).lower(W, x).report()
        d = rep.to_dict()
        assert d["gpu_model"] == model and name in d["gpu"]
        assert d["gpu"] == d["system"]["gpu"]["name"]
        assert f"({model} model)" in rep.as_text()


def test_checked_rtx2060_runs_fp16_products_at_the_fp32_accumulate_rate_accel_sim_models():
    """The measured-checked RTX 2060 (`gpus.gpu("rtx2060")`) times FP16 products at the FP32-accumulate
    tensor rate GeForce Turing runs at half its FP16-accumulate peak: 240 tensor cores x 64 FMA x 2 FLOP
    x 1.68 GHz / 2.  Per clock and SM that is the rate PIMFlow's Accel-Sim configuration models (4 units,
    an m16n8k8 HMMA each per 16 cycles): the two GPUs differ in their clocks and kernels, not their tensor
    units."""
    from pimjax.hw.gpus import gpu as card
    tensor_cores, fma, boost_hz = 240, 64, 1.68e9          # Turing whitepaper: RTX 2060 (TU106)
    fp16_accumulate = tensor_cores * fma * 2 * boost_hz
    h = card("rtx2060", model="library")
    assert h.peak_flops == pytest.approx(fp16_accumulate / 2, rel=1e-9)
    # per clock and SM, the Accel-Sim host's own rate (read from it, not restated)
    sim = pimflow_rtx2060(12)
    assert h.peak_flops / (h.sms * boost_hz) == pytest.approx(sim.peak_flops / (SMS * CORE_HZ), rel=1e-9)
    # the roofline preset host keeps the FP16-accumulate peak (the default configurations stand on it)
    assert rtx2060().peak_flops == pytest.approx(2 * h.peak_flops, rel=1e-9)
