"""Presets construct, validate and carry the organisation of their sources."""
import numpy as np
import pytest

from pimjax.hw import Backend, HostModel, get_backend, list_backends, rtx2060, xeon_gold_5220r

ATTACC_VARIANTS = ["bank-pc", "bank-npc", "bg-pc", "bg-npc", "buffer-pc", "buffer-npc"]

ALL_CONFIGS = (
    [("hbm-pim", {}), ("hbm-pim", {"config": "ko"}), ("hbm-pim", {"channels": 16}),
     ("hbm-pim", {"channels": 8}), ("hbm-pim", {"channels": 128}), ("hbm-pim", {"config": "ko", "channels": 32})]
    + [("attacc", {"variant": v}) for v in ATTACC_VARIANTS]
    + [("attacc", {"stacks": 5}), ("attacc", {"channels": 4}), ("attacc", {"channels": 32, "stacks": 2})]
    + [("newton", {"buffers": b, "clock": c}) for b in (1, 2, 4) for c in ("pimflow", "aim")]
    + [("newton", {"channels": 32}), ("newton", {"channels": 1})]
    + [("upmem", {}), ("upmem", {"dpus": 64}), ("upmem", {"dpus": 2560})]
)


def test_list_backends_has_the_four_presets():
    assert list_backends() == ["hbm-pim", "attacc", "newton", "upmem"]


@pytest.mark.parametrize("name,options", ALL_CONFIGS)
def test_every_preset_and_option_constructs_and_validates(name, options):
    b = get_backend(name, **options)
    assert isinstance(b, Backend) and b.name == name
    # the cores of a group own exactly its banks
    assert b.core.banks_per_core * b.group.cores_per_group == b.group.banks
    # re-running every level's validation on the built objects passes
    b.replace()
    b.system.replace(), b.group.replace(), b.core.replace(), b.timing.replace(), b.energy.replace()
    # every timing is a non-negative float (strict promotion never mixes int and float leaves)
    for f, v in vars(b.timing).items():
        assert isinstance(v, float) and v >= 0, f
    assert b.n_cores == b.n_groups * b.group.cores_per_group


def test_hbm_pim_organisation():
    b = get_backend("hbm-pim")
    assert (b.n_groups, b.system.n_devices, b.system.groups_per_device) == (64, 4, 16)
    assert (b.group.cores_per_group, b.core.banks_per_core, b.group.banks) == (8, 2, 16)
    assert (b.group.bank_groups, b.group.banks_per_bank_group) == (4, 4)
    c = b.core
    assert (c.lanes, c.dtype, c.n_input_regs, c.n_output_regs, c.reg_bytes) == (16, "float16", 8, 8, 32)
    assert c.ops == {"add", "mul", "mac", "mad", "mov", "relu"}
    assert (c.rows, c.cols, c.col_bytes) == (16384, 32, 32)
    assert b.group.broadcast and not c.programmable
    t = b.timing
    table = dict(tCK=1, tCL=20, tWL=8, tRCDRD=14, tRCDWR=10, tRP=14, tRAS=33, tRC=47, tCCD_S=2, tCCD_L=4,
                 tRRD_S=4, tRRD_L=6, tFAW=16, tRTP_S=4, tRTP_L=5, tWR=16, tWTR_S=4, tWTR_L=9, tRTRS=1,
                 tREFI=3900, tRFC=350, tCCD_AB=4)
    for k, v in table.items():
        assert getattr(t, k) == v, k
    # BL=4 beats on a DDR bus: the reference's WR->PRE = WL + BL/2 + tWR = 26 and RD->WR = 15
    assert t.tBL == 4 / 2
    assert t.tWL + t.tBL + t.tWR == 26
    assert t.tCL + t.tBL + t.tRTRS - t.tWL == 15
    assert t.tWL + t.tBL + t.tWTR_L == 19
    # 16 GB/s per pCH = 16 bytes per ns
    assert b.system.link_bandwidth == pytest.approx(16.0)


def test_hbm_pim_ko_is_the_korean_configuration():
    b = get_backend("hbm-pim", config="ko")
    assert b.variant == "ko"
    # §4.1: NCH = 16, NP = 16, NB = 1, NCO = 32, NRO = 16384, Scol = 32
    assert b.n_groups == 16
    assert b.group.cores_per_group == 16 and b.core.banks_per_core == 1
    assert b.group.bank_groups * b.group.banks_per_bank_group == 16
    assert (b.core.cols, b.core.rows, b.core.col_bytes) == (32, 16384, 32)


@pytest.mark.parametrize("channels,expected", [(64, (4, 16)), (16, (1, 16)), (8, (1, 8)), (1, (1, 1)),
                                               (128, (8, 16))])
def test_hbm_pim_channels_split_into_stacks(channels, expected):
    s = get_backend("hbm-pim", channels=channels).system
    assert (s.n_devices, s.groups_per_device) == expected


@pytest.mark.parametrize("channels", [24, 0, -16, 17, 2.5, True])
def test_hbm_pim_bad_channels_rejected(channels):
    with pytest.raises(ValueError, match="channels"):
        get_backend("hbm-pim", channels=channels)


@pytest.mark.parametrize("variant,cores,banks_per_core,mac_spacing", [
    ("bank-pc", 64, 1, 6), ("bank-npc", 64, 1, 4), ("bg-pc", 16, 4, 6), ("bg-npc", 16, 4, 4),
    ("buffer-pc", 2, 32, 2), ("buffer-npc", 2, 32, 2)])
def test_attacc_levels(variant, cores, banks_per_core, mac_spacing):
    b = get_backend("attacc", variant=variant)
    assert b.variant == variant
    assert b.group.cores_per_group == cores and b.core.banks_per_core == banks_per_core
    assert b.group.banks == 64 and (b.group.bank_groups, b.group.banks_per_bank_group) == (16, 4)
    assert b.timing.tCCD_AB == mac_spacing
    assert set(b.group.units) == {"softmax", "accumulator"}
    assert {"gemv", "mac"} <= b.core.ops and "softmax" not in b.core.ops


def test_attacc_timing_table():
    t = get_backend("attacc").timing
    assert t.tCK == pytest.approx(0.769, abs=5e-4)
    table = dict(tBL=2, tCL=19, tRCDRD=19, tRCDWR=19, tRP=19, tRAS=45, tRC=63, tWR=21, tRTP_S=6, tRTP_L=8,
                 tWL=6, tCCD_S=2, tCCD_L=4, tRRD_S=2, tRRD_L=4, tFAW=39, tWTR_S=8, tWTR_L=11, tREFI=5070,
                 tRFC=456)
    for k, v in table.items():
        assert getattr(t, k) == v, k


def test_attacc_stacks_and_channels():
    assert get_backend("attacc").n_groups == 16
    b5 = get_backend("attacc", stacks=5)
    assert (b5.system.n_devices, b5.n_groups) == (5, 80)
    assert get_backend("attacc", channels=4).n_groups == 4
    with pytest.raises(ValueError, match="disagree"):
        get_backend("attacc", stacks=2, channels=16)
    with pytest.raises(ValueError, match="stacks"):
        get_backend("attacc", stacks=0)


def test_attacc_bad_variant_lists_valid_ones():
    with pytest.raises(ValueError, match="bank-pc") as e:
        get_backend("attacc", variant="bank-xx")
    for v in ATTACC_VARIANTS:
        assert v in str(e.value)


def test_newton_pimflow_table1():
    b = get_backend("newton")
    assert b.variant == "pimflow-gb4"
    t = b.timing
    # PIMFlow Table 1: tBL 2, tCL 11, tRP 11, tRCD 11, tCCD 2, tRAS 25
    assert (t.tBL, t.tCL, t.tRP, t.tRCDRD, t.tCCD_S, t.tRAS) == (2, 11, 11, 11, 2, 25)
    assert t.tCK == pytest.approx(8 / 7)
    assert b.n_groups == 16 and b.group.cores_per_group == 16 and b.core.banks_per_core == 1
    assert (b.core.lanes, b.core.dtype, b.core.cols, b.core.col_bytes) == (16, "bfloat16", 32, 32)
    assert b.group.units == ("global_buffer",)
    assert (b.group.global_buffer_bytes, b.group.n_global_buffers) == (4096, 4)
    assert b.core.ops == {"mac"}
    assert b.system.host.name == rtx2060().name


@pytest.mark.parametrize("buffers,total", [(1, 2048), (2, 2048), (4, 4096)])
def test_newton_buffers(buffers, total):
    b = get_backend("newton", buffers=buffers)
    assert b.group.n_global_buffers == buffers and b.group.global_buffer_bytes == total
    assert b.core.n_output_regs == buffers


def test_newton_aim_clock_keeps_latencies_in_ns():
    p, a = get_backend("newton").timing, get_backend("newton", clock="aim").timing
    assert a.tCK == 0.5
    for k in ("tCL", "tRCDRD", "tRP", "tRAS", "tRC"):
        ns_p, ns_a = getattr(p, k) * p.tCK, getattr(a, k) * a.tCK
        assert ns_p <= ns_a < ns_p + a.tCK, k          # rounded up to whole cycles
    for k in ("tBL", "tCCD_S", "tCCD_L", "tCCD_AB"):
        assert getattr(a, k) == getattr(p, k), k


@pytest.mark.parametrize("options,match", [({"buffers": 3}, "buffers"), ({"clock": "fast"}, "clock"),
                                           ({"channels": 3}, "channels"), ({"buffers": 4.0}, "buffers"),
                                           ({"buffers": True}, "buffers")])
def test_newton_bad_options(options, match):
    with pytest.raises(ValueError, match=match):
        get_backend("newton", **options)


def test_upmem_organisation():
    b = get_backend("upmem")
    assert (b.n_groups, b.group.cores_per_group, b.n_cores) == (32, 64, 2048)
    c = b.core
    assert c.bank_bytes == 64 * 2**20 and c.col_bytes == 8
    assert (c.tasklets, c.pipeline_depth, c.scratchpad_bytes, c.instruction_bytes) == (24, 14, 65536, 24576)
    assert (c.lanes, c.dtype, c.banks_per_core, c.programmable) == (1, "int32", 1, True)
    assert not b.group.broadcast
    assert b.timing.dpu_clock_ghz == 0.35 and b.timing.dma_bytes_per_cycle == 2
    assert b.timing.tCK == pytest.approx(1 / 1.2)
    assert b.system.link_bandwidth > b.system.readback_bandwidth > 0
    assert b.system.host.name == xeon_gold_5220r().name
    assert b.system.host.staging_buffer_bytes == 0
    assert get_backend("upmem", dpus=2560).n_cores == 2560


def test_numpy_integers_are_integer_options():
    """Sizes from a numpy sweep grid are ints too."""
    assert get_backend("hbm-pim", channels=np.int64(16)).n_groups == 16
    assert get_backend("upmem", dpus=np.int32(128)).n_cores == 128


@pytest.mark.parametrize("dpus", [0, 100, 2048 + 64 * 9, 4096, "2048", True])
def test_upmem_bad_dpus(dpus):
    with pytest.raises(ValueError, match="dpus"):
        get_backend("upmem", dpus=dpus)


def test_unknown_backend_lists_valid_names():
    with pytest.raises(ValueError, match="unknown backend") as e:
        get_backend("hmc")
    for n in list_backends():
        assert n in str(e.value)


def test_unknown_option_lists_valid_options():
    with pytest.raises(ValueError, match="valid options") as e:
        get_backend("upmem", ranks=4)
    assert "dpus" in str(e.value)


def test_host_override():
    cpu = xeon_gold_5220r()
    b = get_backend("hbm-pim", host=cpu)
    assert b.system.host is cpu
    assert isinstance(get_backend("attacc").system.host, HostModel)
    with pytest.raises(ValueError, match="host"):
        get_backend("newton", host="rtx")


def test_presets_are_hashable_statics_and_equal_when_rebuilt():
    assert get_backend("attacc", variant="bg-pc") == get_backend("attacc", variant="bg-pc")
    hash(get_backend("newton").core), hash(get_backend("upmem").group)
