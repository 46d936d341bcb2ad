"""Derived peaks against the published figures (backends.md), each expected value
derived here from the documented organisation, not copied from derived_peaks."""
import jax
import numpy as np
import pytest

from pimjax.hw import derived_peaks, get_backend, stack_variants

WITHIN_5 = dict(rel=0.05)


def test_hbm_pim_peaks():
    p = derived_peaks(get_backend("hbm-pim"))
    tck_ns = 1.0                                   # hbm-pim.md: 1 GHz
    # 128 FP16 MAC lanes per pCH (8 units x 16) per 4-cycle all-bank column command, 64 pCH
    assert p["pim_macs_per_cycle"] == pytest.approx(64 * 8 * 16 / 4, **WITHIN_5)
    assert p["pim_macs_per_cycle"] == pytest.approx(2048, **WITHIN_5)
    assert p["pim_flops"] == pytest.approx(4.1e12, **WITHIN_5)            # "≈ 4.1 TFLOP/s at 1 GHz"
    # internal: 8 units x 32 B = 256 B per 4 cycles per pCH
    assert p["internal_bandwidth_GBps"] == pytest.approx(64 * 256 / 4 / tck_ns, **WITHIN_5)
    assert p["internal_bandwidth_GBps"] == pytest.approx(4.1e3, **WITHIN_5)  # "≈ 4.1 TB/s"
    # external: 64-bit bus, BL4 -> 32 B per 2 cycles = 16 B/cycle per pCH -> 1024 B/cycle
    assert p["external_bandwidth_GBps"] == pytest.approx(1024 / tck_ns, **WITHIN_5)
    assert p["readback_bandwidth_GBps"] == p["external_bandwidth_GBps"]
    assert (p["n_groups"], p["n_cores"]) == (64, 512)
    assert p["capacity_bytes"] == 64 * 16 * 16384 * 32 * 32


def test_hbm_pim_ko_peaks():
    p = derived_peaks(get_backend("hbm-pim", config="ko"))
    assert p["pim_macs_per_cycle"] == pytest.approx(16 * 16 * 16 / 4)
    assert p["capacity_bytes"] == 16 * 16 * 16384 * 32 * 32  # NCH x NP x NB x NRO x NCO x Scol


@pytest.mark.parametrize("variant,units_per_channel,spacing", [
    ("bank-pc", 64, 6), ("bank-npc", 64, 4), ("bg-pc", 16, 6), ("bg-npc", 16, 4),
    ("buffer-pc", 2, 2), ("buffer-npc", 2, 2)])
def test_attacc_peaks(variant, units_per_channel, spacing):
    p = derived_peaks(get_backend("attacc", variant=variant))
    tck = 0.769                                     # attacc.md
    # bank level: 64 banks x 16 lanes per 6 cycles per channel (MACAB), 16 channels per stack
    assert p["pim_macs_per_cycle_per_group"] == pytest.approx(units_per_channel * 16 / spacing, **WITHIN_5)
    assert p["pim_macs_per_cycle"] == pytest.approx(16 * units_per_channel * 16 / spacing, **WITHIN_5)
    assert p["internal_bandwidth_GBps"] == pytest.approx(16 * units_per_channel * 32 / spacing / tck, **WITHIN_5)
    # external: 32 B / (2 x 0.769 ns) per pCH x 32 pCH = 665.6 GB/s per stack
    assert p["external_bandwidth_GBps"] == pytest.approx(32 / (2 * tck) * 32, **WITHIN_5)
    assert p["external_bandwidth_GBps"] == pytest.approx(665.6, **WITHIN_5)
    assert p["pim_clock_ghz"] == pytest.approx(1.3, **WITHIN_5)


def test_attacc_buffer_level_is_external_bandwidth():
    p = derived_peaks(get_backend("attacc", variant="buffer-pc"))
    # attacc.md: MACPB reads 32 B per pCH every nBL, "i.e. external bandwidth"
    assert p["internal_bandwidth_GBps"] == pytest.approx(p["external_bandwidth_GBps"])


def test_attacc_dcc_system_of_five_stacks():
    p = derived_peaks(get_backend("attacc", stacks=5))
    assert p["external_bandwidth_GBps"] == pytest.approx(5 * 665.6, **WITHIN_5)
    # DCC §V: "5 PIM-enabled HBM devices, corresponding to 80GB"
    assert p["capacity_bytes"] == 80 * 2**30
    assert p["n_cores"] == 5 * 16 * 64


def test_newton_aim_matches_isscc_1tflops_per_chip():
    b = get_backend("newton", clock="aim")
    p = derived_peaks(b)
    chips = b.system.n_devices
    # AiM ISSCC'22: 1 TFLOPS per chip at 16 Gb/s: 2 channels x 16 banks x 16 MAC x 2 FLOP x 1 GHz
    assert p["pim_flops"] / chips == pytest.approx(2 * 16 * 16 * 2 * 1e9, **WITHIN_5)
    assert p["pim_flops"] / chips == pytest.approx(1e12, **WITHIN_5)
    # 16 Gb/s x 16 DQ / 8 = 32 GB/s per channel
    assert p["external_bandwidth_GBps"] / b.n_groups == pytest.approx(16 * 16 / 8, **WITHIN_5)


def test_newton_pimflow_peaks_from_table1():
    p = derived_peaks(get_backend("newton"))
    tck = 8 / 7                                     # PIMFlow's GDDR6_3500 clock
    # one COMP every tCCD = 2 cycles drives 16 banks x 16 multipliers, 16 PIM channels
    assert p["pim_flops"] == pytest.approx(16 * 16 * 16 * 2 / (2 * tck) * 1e9, rel=1e-6)
    # PIMFlow's simulated clock is slower than AiM's 16 Gb/s part: 224 vs 512 GFLOP/s per channel
    assert p["pim_flops"] / 16 == pytest.approx(224e9, rel=1e-6)
    assert p["internal_bandwidth_GBps"] == pytest.approx(16 * 16 * 32 / (2 * tck), rel=1e-6)
    assert p["external_bandwidth_GBps"] == pytest.approx(16 * 32 / (2 * tck), rel=1e-6)


def test_upmem_peaks():
    p = derived_peaks(get_backend("upmem"))
    # 2048 DPUs x 350 MHz, one instruction per cycle (>= 11 tasklets)
    assert p["pim_ops_per_s"] == pytest.approx(2048 * 350e6, **WITHIN_5)
    # MRAM->WRAM DMA theoretical 2 B/cycle per DPU
    assert p["internal_bandwidth_GBps"] == pytest.approx(2048 * 2 * 0.35, **WITHIN_5)
    assert p["capacity_bytes"] == 2048 * 64 * 2**20
    assert p["external_bandwidth_GBps"] == pytest.approx(32 * 6.68)
    assert p["readback_bandwidth_GBps"] == pytest.approx(32 * 4.74)
    assert p["pim_clock_ghz"] == pytest.approx(0.35)


def test_peak_keys_documented():
    keys = {"internal_bandwidth_GBps", "pim_flops", "pim_macs_per_cycle", "external_bandwidth_GBps",
            "capacity_bytes", "n_groups", "n_cores"}
    for name in ("hbm-pim", "attacc", "newton", "upmem"):
        assert keys <= set(derived_peaks(get_backend(name)))


@pytest.mark.parametrize("level,pj_per_bit", [("bank", 0.11 + 0.44), ("bg", 0.11 + 0.44 + 1.01),
                                              ("buffer", 0.11 + 0.44 + 1.01 + 1.23 + 0.5)])
def test_attacc_energy_matches_attaccs_per_byte_table(level, pj_per_bit):
    # AttAcc config.py: ENERGY_TABLE['PIM'][BA/BG/BUFFER]['mem'] in pJ per byte reaching the unit
    b = get_backend("attacc", variant=f"{level}-pc")
    e, c = b.energy, b.core
    alu = 0.32 * c.lanes                                 # 'alu' pJ per MAC x 16 lanes
    per_column = e.act / c.cols + e.rd + (e.pim_op - alu)  # one fully-read row amortised over its columns
    assert per_column / c.col_bytes == pytest.approx(pj_per_bit * 8)
    # host path: cell + col->BGmux->GIO->TSV->interposer = AttAcc's GPU 'mem' minus nothing on the GPU side
    assert (e.act / c.cols + e.rd) / c.col_bytes + e.io_byte == pytest.approx(
        (0.11 + 0.44 + 1.01 + 1.23 + 0.5 + 0.3) * 8)


# --------------------------------------------------------------------------
# external bandwidth follows the timing of command-driven backends
# --------------------------------------------------------------------------
def _with_timing(b, **changes):
    return b.replace(timing=b.timing.replace(**changes))


def test_external_bandwidth_follows_tck_for_command_driven_backends():
    """System.link_bandwidth is the preset's value at the preset tCK; the DRAM
    model times host transfers as bursts of the (new) timing, and so must the
    peak (it used to report 1024 GB/s at tCK = 2 ns)."""
    b = get_backend("hbm-pim")
    p = derived_peaks(_with_timing(b, tCK=2.0))
    # 64 pCH x one 32 B burst per 2 cycles of 2 ns
    assert p["external_bandwidth_GBps"] == pytest.approx(64 * 32 / (2 * 2.0))
    assert p["readback_bandwidth_GBps"] == pytest.approx(64 * 32 / (2 * 2.0))
    assert p["internal_over_external"] == pytest.approx((64 * 256 / 4 / 2.0) / (64 * 32 / 4.0))
    # AttAcc: 2 pCH buses per channel, 16 channels; newton at AiM's clock with tCK doubled
    a = derived_peaks(_with_timing(get_backend("attacc"), tCK=2 / 1.3))
    assert a["external_bandwidth_GBps"] == pytest.approx(16 * 2 * 32 / (2 * 2 / 1.3))
    assert a["external_bandwidth_GBps"] == pytest.approx(665.6 / 2, **WITHIN_5)
    n = derived_peaks(_with_timing(get_backend("newton", clock="aim"), tCK=1.0))
    assert n["external_bandwidth_GBps"] == pytest.approx(16 * 32 / 2.0)


@pytest.mark.parametrize("changes,cycles_per_burst", [(dict(tBL=4.0), 4.0), (dict(tCCD_S=3.0), 3.0),
                                                      (dict(tBL=1.0, tCCD_S=1.0), 1.0)])
def test_external_bandwidth_is_one_burst_per_max_tbl_tccd_s(changes, cycles_per_burst):
    b = get_backend("hbm-pim", channels=4)
    p = derived_peaks(_with_timing(b, **changes))
    assert p["external_bandwidth_GBps"] == pytest.approx(4 * 32 / (cycles_per_burst * 1.0))


def test_upmem_external_bandwidth_is_the_system_leaf():
    """UPMEM's time model reads System.link_bandwidth / readback_bandwidth:
    so does the peak, and the DRAM command clock does not enter it."""
    u = get_backend("upmem", dpus=128)
    v = u.replace(system=u.system.replace(link_bandwidth=3.0, readback_bandwidth=1.5),
                  timing=u.timing.replace(tCK=2.0))
    p = derived_peaks(v)
    assert p["external_bandwidth_GBps"] == pytest.approx(2 * 3.0)
    assert p["readback_bandwidth_GBps"] == pytest.approx(2 * 1.5)


def test_preset_link_leaves_equal_the_bus_bandwidth_at_their_timing():
    from pimjax.hw.peaks import bus_bandwidth, link_bandwidths
    for name, opts in [("hbm-pim", {}), ("hbm-pim", {"config": "ko"}), ("attacc", {}),
                       ("attacc", {"variant": "buffer-npc"}), ("newton", {}), ("newton", {"clock": "aim"})]:
        b = get_backend(name, **opts)
        assert isinstance(b.system.link_bandwidth, float)          # presets keep Python floats
        assert b.system.link_bandwidth == bus_bandwidth(b.core.col_bytes, b.group.data_buses, b.timing)
        assert link_bandwidths(b) == (b.system.link_bandwidth, b.system.readback_bandwidth)


def test_external_bandwidth_vmaps_over_tck_and_keeps_a_batch_of_one():
    b = get_backend("hbm-pim", channels=4)
    batch = stack_variants([_with_timing(b, tCK=t) for t in (1.0, 2.0, 4.0)])
    got = jax.vmap(lambda x: derived_peaks(x)["external_bandwidth_GBps"])(batch)
    np.testing.assert_allclose(np.asarray(got), [4 * 16 / t for t in (1.0, 2.0, 4.0)], rtol=1e-6)
    one = derived_peaks(stack_variants([b]))
    assert np.shape(one["external_bandwidth_GBps"]) == (1,)


def test_external_bandwidth_bounds_the_dram_models_host_stream():
    """The DRAM cycle model times a host stream with bursts of the backend's
    timing: doubling tCK doubles its read-back time and halves the peak, and
    the achieved bandwidth stays below the peak."""
    from pimjax.lower.host_stream import host_stream_program
    from pimjax.sim.cycles import cycles
    from tests.partition.helpers import gemv

    b = get_backend("hbm-pim", channels=4)
    slow = _with_timing(b, tCK=2.0)
    op = gemv(256, 256)
    prog = host_stream_program(op, b)
    read_bytes = 2 * (256 * 256 + 256)                     # FP16 matrix + vector, read once
    ns = [float(cycles(prog, x).readback) * float(x.timing.tCK) for x in (b, slow)]
    peaks = [derived_peaks(x)["readback_bandwidth_GBps"] for x in (b, slow)]
    assert ns[1] == pytest.approx(2 * ns[0])
    assert peaks[1] == pytest.approx(peaks[0] / 2)
    for t, peak in zip(ns, peaks):
        assert read_bytes / t <= peak
        assert read_bytes / t > 0.5 * peak                 # a streamed read runs near the bus rate
