"""Host rooflines: the A100 calibrated to AttAcc's GEMV figure, CPU and RTX 2060."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pimjax.hw import a100, get_backend, rtx2060, xeon_gold_5220r

N = K = 4096
GEMV_BYTES = 2 * N * K + 2 * K + 2 * N      # FP16 weights + input vector + output vector
GEMV_FLOPS = 2 * N * K


def test_a100_gemv_matches_attacc_within_10_percent():
    # attacc.md: AttAcc's own A100 model gives 12.4 us for a 4096x4096 FP16 GEMV, batch 1
    gpu = a100(memory="hbm3")
    t = float(gpu.time_ns(GEMV_BYTES, GEMV_FLOPS))
    assert t == pytest.approx(12_400, rel=0.10)
    # memory bound: the bandwidth term dominates and uses DCC's 3352 GB/s x 0.81
    t_mem = GEMV_BYTES / (3352e9 * 0.81) * 1e9
    t_flop = GEMV_FLOPS / (312e12 * 0.8) * 1e9
    assert t_flop < t_mem
    assert t == pytest.approx(t_mem + gpu.launch_overhead_ns, rel=1e-5)


def test_a100_hbm2e_is_the_real_part():
    gpu = a100()
    assert gpu.mem_bandwidth == pytest.approx(2.04e12, rel=0.01)
    assert gpu.peak_flops == 312e12
    t = float(gpu.time_ns(GEMV_BYTES, GEMV_FLOPS))
    # on HBM2e the bandwidth floor alone exceeds AttAcc's 12.4 us
    assert GEMV_BYTES / 2.039e12 * 1e9 > 12_400
    assert t == pytest.approx(GEMV_BYTES / (2.039e12 * 0.81) * 1e9 + gpu.launch_overhead_ns, rel=1e-5)
    with pytest.raises(ValueError, match="hbm2e"):
        a100(memory="ddr5")


def test_a100_staging_buffer_is_shared_memory():
    assert a100().staging_buffer_bytes == 164 * 1024 * 108


def test_attacc_default_host_is_dccs_gpu():
    h = get_backend("attacc").system.host
    assert h.mem_bandwidth == 3352e9 and h.bandwidth_efficiency == 0.81


def test_hbm_pim_default_host_reads_the_pim_memory():
    """The hbm-pim host is the GPU on the 64-pCH HBM-PIM memory itself: its
    4096 x 4096 GEMV roofline lands near the Samsung simulator's "non-PIM"
    figure for that memory (hbm-pim.md: 36,082 cycles of 1 ns)."""
    be = get_backend("hbm-pim")
    h = be.system.host
    assert h.mem_bandwidth == pytest.approx(be.system.n_groups * float(be.system.link_bandwidth) * 1e9)
    t = float(h.time_ns(2 * 4096 * 4096 + 4 * 4096, 2 * 4096 * 4096))
    assert 36_082 < t < 1.2 * 36_082          # 0.81 utilisation vs the simulator's streaming


def test_xeon_roofline():
    cpu = xeon_gold_5220r()
    assert cpu.staging_buffer_bytes == 0
    assert cpu.peak_flops == pytest.approx(2 * 24 * 2.2e9 * 32)
    assert cpu.mem_bandwidth == pytest.approx(2 * 6 * 2400e6 * 8)
    # streaming 1 GB is memory bound
    t = float(cpu.time_ns(1e9, 1e8))
    assert t == pytest.approx(1e9 / (cpu.mem_bandwidth * cpu.bandwidth_efficiency) * 1e9
                              + cpu.launch_overhead_ns, rel=1e-5)


def test_rtx2060_roofline():
    gpu = rtx2060()
    assert gpu.mem_bandwidth == pytest.approx(192 / 8 * 14e9)
    assert gpu.peak_flops == pytest.approx(240 * 64 * 2 * 1.68e9)
    assert gpu.staging_buffer_bytes == 30 * 64 * 1024
    # a compute-bound GEMM: 2*1024^3 FLOP over 6 MB
    t = float(gpu.time_ns(3 * 2 * 1024 * 1024, 2 * 1024**3))
    assert t == pytest.approx(2 * 1024**3 / (gpu.peak_flops * gpu.flops_efficiency) * 1e9
                              + gpu.launch_overhead_ns, rel=1e-5)


def test_host_time_vmaps_over_sizes():
    gpu = a100("hbm3")
    sizes = jnp.asarray([1e6, 1e7, 1e8], dtype=jnp.float32)
    got = jax.vmap(lambda b: gpu.time_ns(b, 2.0 * b))(sizes)
    want = np.asarray(sizes) / (3352e9 * 0.81) * 1e9 + gpu.launch_overhead_ns
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5)


@pytest.mark.parametrize("module", ["pimjax.hw.host", "pimjax.hw.presets", "pimjax.hw.peaks"])
def test_docstring_examples_run(module):
    import doctest
    import importlib
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


def test_host_time_is_a_float_and_vmaps_over_stacked_hosts():
    """sim.host.host_time used to float() the roofline, so it could not be
    vmapped over stacked host variants (HostModel.time_ns could)."""
    from pimjax.hw import stack_variants
    from pimjax.sim.host import host_time
    from tests.partition.helpers import gemv

    M, K = 512, 256
    op = gemv(M, K)
    gpu = a100("hbm3")
    hosts = [gpu, gpu.replace(mem_bandwidth=gpu.mem_bandwidth / 2), gpu.replace(launch_overhead_ns=1000.0)]

    def roofline(h, eb):
        nbytes = eb * (M * K + K + M)                   # matrix + vector read once, result written once
        return max(nbytes / (h.mem_bandwidth * h.bandwidth_efficiency),
                   2 * M * K / (h.peak_flops * h.flops_efficiency)) * 1e9 + h.launch_overhead_ns

    one = host_time(op, gpu)
    assert type(one) is float and one == pytest.approx(roofline(gpu, 2), rel=1e-6)
    got = jax.vmap(lambda h: host_time(op, h, dtype_bytes=4))(stack_variants(hosts))
    np.testing.assert_allclose(np.asarray(got), [roofline(h, 4) for h in hosts], rtol=1e-5)
    # a concrete stack (no vmap) gives one time per variant
    np.testing.assert_allclose(np.asarray(host_time(op, stack_variants(hosts))),
                               [roofline(h, 2) for h in hosts], rtol=1e-5)


def test_host_time_default_element_size_is_two_bytes_whatever_the_dtype():
    """The documented default: dtype_bytes=2 is applied, not read from the graph."""
    from pimjax.partition.verify import infer_shapes
    from pimjax.sim.host import host_time, op_bytes
    from tests.partition.helpers import gemv

    op = gemv(64, 32)
    shapes = infer_shapes(op)
    assert op_bytes(op, shapes) == 2 * (64 * 32 + 32 + 64)
    assert op_bytes(op, shapes, 4) == 4 * (64 * 32 + 32 + 64)
    assert op_bytes(op, shapes, np.int64(4)) == 4 * (64 * 32 + 32 + 64)    # numpy ints are numbers too
    assert op_bytes(op, shapes, {0: 4}) == 4 * (64 * 32 + 32 + 64)         # missing ids count 4 B
    slow = xeon_gold_5220r()
    assert host_time(op, slow) == host_time(op, slow, dtype_bytes=2)
