"""Backend presets: HBM-PIM, AttAcc, Newton/AiM and UPMEM as validated `Backend`s.

`get_backend(name, **options)` builds one; `list_backends()` names them.  Every number
carries its source beside it:

* `hbm-pim.md` / `attacc.md` / `backends.md` / `dcc.md` — the measured reference
  simulators in `shared/reference/`;
* papers by section (DCC §V, ATiM §2.1, PIMFlow Table 1, the Korean paper §4.1);
* simulator source where a paper is silent (AttAcc's `HBM3-PIM.cpp` / `config.py`,
  PIMFlow's Ramulator fork `src/GDDR6.h`, Ramulator 2's `DDR4.cpp`);
* `assumption:` where no source gives the number — always said explicitly.

Conventions: all timing values are command-clock cycles of `tCK` ns (UPMEM's DPU
work is in cycles of `dpu_clock_ghz`); `tBL` is the data-bus occupancy of one burst
in cycles (BL/2 for a DDR bus), as Ramulator's nBL; bandwidths are bytes per ns
(= GB/s) per group; energies are pJ.  All leaves are Python floats, so stacked
variants are float32 arrays and strict dtype promotion never mixes int and float.

Example::

    >>> from pimjax.hw import get_backend, list_backends
    >>> list_backends()
    ['hbm-pim', 'attacc', 'newton', 'upmem']
    >>> get_backend("attacc", variant="bg-npc")
    Backend(attacc/bg-npc: 16 groups x 16 cores, 16 x float16 lanes)
"""
from __future__ import annotations

import inspect
import math
from typing import Callable

from . import gpus
from .core import Backend, Core, Energy, Group, HostModel, System, Timing, is_int
from .energy_table import (
    E_ACT_PRE_PJ_PER_BIT,
    E_ALU_PJ_PER_MAC,
    E_BGMUX_TO_GIO,
    E_CELL_RDWR_PJ_PER_BIT,
    E_COL_TO_BGMUX,
    E_INTERPOSER,
    E_TSV,
)
from .gpu import GENERIC_GPU_MODELS
from .gpus import GPU_SPECS
from .host import a100, gpu_on, pimflow_rtx2060, rtx2060, xeon_gold_5220r
from .peaks import bus_bandwidth

_PRESETS: dict[str, Callable[..., Backend]] = {}


def _preset(name: str):
    def wrap(fn):
        _PRESETS[name] = fn
        return fn
    return wrap


def list_backends() -> list[str]:
    """Names accepted by `get_backend`, in a fixed order."""
    return list(_PRESETS)


def preset_options(name: str) -> list[str]:
    """The options the preset `name` takes, in its signature's order (ValueError
    for an unknown name, listing the valid ones)."""
    if name not in _PRESETS:
        raise ValueError(f"unknown backend {name!r}; valid backends: {list_backends()}")
    return list(inspect.signature(_PRESETS[name]).parameters)


def get_backend(name: str, **options) -> Backend:
    """Build the preset `name` with `options` (see each preset's docstring).

    Raises ValueError for an unknown name (listing the valid ones), an unknown
    option (listing the preset's options) or an invalid option value.

    >>> get_backend("hbm-pim").n_cores
    512
    >>> get_backend("upmem", dpus=2560).n_groups
    40
    """
    if name not in _PRESETS:
        raise ValueError(f"unknown backend {name!r}; valid backends: {list_backends()}")
    builder = _PRESETS[name]
    valid = [p for p in inspect.signature(builder).parameters]
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ValueError(f"backend {name!r} has no option(s) {unknown}; valid options: {valid}")
    return builder(**options)


def _split_groups(name: str, channels: int, per_device: int) -> tuple[int, int]:
    """(n_devices, groups_per_device) for `channels` groups, `per_device` per device."""
    if not is_int(channels) or channels < 1:
        raise ValueError(f"{name} option channels must be a positive int, got {channels!r}")
    channels = int(channels)
    if channels <= per_device:
        return 1, channels
    if channels % per_device:
        raise ValueError(f"{name} option channels={channels} must be <= {per_device} or a multiple "
                         f"of {per_device} (groups per device)")
    return channels // per_device, per_device


def _check_host(name: str, host) -> None:
    if host is not None and not isinstance(host, HostModel):
        raise ValueError(f"{name} option host must be a HostModel, got {type(host).__name__}")


DEFAULT_GPU_MODEL = "occupancy"   # hw/gpu.py: launch cost + SM occupancy, each constant cited in host.py / gpu.py


def _baseline_gpu(name: str, gpu, host, build, external_GBps: float, default: str = DEFAULT_GPU_MODEL,
                  gpu_model: str | None = None, models: tuple = GENERIC_GPU_MODELS):
    """`System.gpu` of a DRAM preset: the GPU "vs GPU" compares with (read it
    as `System.baseline`).

    gpu: a GPU by name (`hw.gpus.GPU_SPECS`: "a100", "h100", "h200",
    "rtx2060", ...) on the PIM system's own memory (`external_GBps`, so both
    read the same memory), None for the preset's own GPU (`build`) there, a
    GPU timing model name (`models`: the older spelling of `gpu_model`), or a
    HostModel (used as is: e.g. `hw.gpus.gpu("h100")`, the card on its own
    memory).  gpu_model: the timing model (`models`; default: the preset's
    `default`, "library" -- the one fitted on measured kernels -- when named).
    With `host=` and neither, the comparison is with that host (`System.gpu`
    is that host).
    """
    accepted = (f"a GPU by name {sorted(GPU_SPECS)} (on this PIM system's memory; gpu_model= picks its timing "
                f"model), a GPU timing model {list(models)} for the preset's {build} (gpu_model's older spelling), "
                f"or a HostModel (e.g. pimjax.hw.gpus.gpu('h100'): the card on its own memory)")
    if gpu_model is not None and gpu_model not in models:
        extra = (" (PIMFlow's Accel-Sim RTX 2060 pairs with the newton preset only)" if gpu_model == "pimflow"
                 else "")
        raise ValueError(f"{name} option gpu_model={gpu_model!r}{extra}: valid GPU timing models here are "
                         f"{list(models)}")
    if isinstance(gpu, HostModel):
        if gpu_model is not None:
            raise ValueError(f"{name} options gpu=<HostModel> and gpu_model={gpu_model!r}: a HostModel carries its "
                             f"own timing model (HostModel.model); pass one or the other")
        return gpu
    card, model = build, gpu_model
    if gpu is None:
        if host is not None and gpu_model is None:
            return host
    elif isinstance(gpu, str) and gpu in GPU_SPECS:
        card = gpu
    elif isinstance(gpu, str) and gpu in models:
        if gpu_model is not None and gpu_model != gpu:
            raise ValueError(f"{name} options gpu={gpu!r} (a timing model) and gpu_model={gpu_model!r} disagree; "
                             f"gpu= takes {accepted}")
        model = gpu
    elif gpu == "pimflow":
        raise ValueError(f"{name} option gpu='pimflow': PIMFlow's Accel-Sim RTX 2060 pairs with the newton preset "
                         f"only; gpu= here takes {accepted}")
    else:
        raise ValueError(f"{name} option gpu={gpu!r}: gpu= takes {accepted}")
    if model is None:
        model = default
    if model == "library" and isinstance(card, str) and card in GPU_SPECS:
        # the card with its constants fitted on measured kernels (`hw.gpus.gpu`), on the PIM system's memory
        return gpus.gpu(card, "library", memory=float(external_GBps) * 1e9)
    if card == build:
        return gpu_on(build, external_GBps, model=model)
    return gpus.gpu(card, model, memory=float(external_GBps) * 1e9)


# --------------------------------------------------------------------------
# energy: AttAcc's per-bit figures (FGDRAM, MICRO'17), per command
# --------------------------------------------------------------------------
# AttAcc simulator src/config.py, citing FGDRAM (O'Connor et al., MICRO 2017), pJ per bit: `energy_table`
# (the E_* names imported above)


def _dram_energy(row_bytes: int, col_bytes: int, lanes: int, unit_path_pj_per_bit: float,
                 io_pj_per_bit: float) -> Energy:
    """Per-command energies from the per-bit figures above.

    unit_path_pj_per_bit: wire energy from the bank's sense amplifiers to the PIM unit
    (0 at the bank, + col->BG mux at the bank-group level, + GIO + TSV on the buffer die),
    charged to `pim_op` together with the unit's MACs.
    """
    bits = 8 * col_bytes
    return Energy(
        act=E_ACT_PRE_PJ_PER_BIT * 8 * row_bytes,          # ACT+PRE pair charged on ACT
        pre=0.0,                                          # included in act (FGDRAM gives the pair)
        rd=E_CELL_RDWR_PJ_PER_BIT * bits,
        wr=E_CELL_RDWR_PJ_PER_BIT * bits,
        pim_op=unit_path_pj_per_bit * bits + E_ALU_PJ_PER_MAC * lanes,
        io_byte=io_pj_per_bit * 8,
        refresh=0.0,                                      # assumption: refresh energy not modelled
    )


# HBM path from a bank's column I/O to the host: col->BGmux->GIO->TSV->interposer
_HBM_IO_PJ_PER_BIT = E_COL_TO_BGMUX + E_BGMUX_TO_GIO + E_TSV + E_INTERPOSER  # 3.04 pJ/b


# --------------------------------------------------------------------------
# hbm-pim: Samsung HBM-PIM / FIMDRAM (hbm-pim.md, the public PIMSimulator)
# --------------------------------------------------------------------------
HBM_PIM_PCH_PER_STACK = 16    # hbm-pim.md: 64 pCH = 4 stacks x 16


def _hbm_pim_timing() -> Timing:
    return Timing(
        tCK=1.0,        # hbm-pim.md: tCK = 1 ns (1 GHz command clock)
        tCL=20.0,       # hbm-pim.md: CL=20
        tWL=8.0,        # hbm-pim.md: WL=8
        tBL=2.0,        # hbm-pim.md: BL=4 beats on a DDR bus = 2 cycles per 32 B burst
                        #   (the reference's own formulas use BL/2: WR->PRE = WL+BL/2+tWR = 26)
        tRCDRD=14.0,    # hbm-pim.md: tRCDRD=14
        tRCDWR=10.0,    # hbm-pim.md: tRCDWR=10
        tRP=14.0,       # hbm-pim.md: tRP=14
        tRAS=33.0,      # hbm-pim.md: tRAS=33
        tRC=47.0,       # hbm-pim.md: tRC=47
        tCCD_S=2.0,     # hbm-pim.md: tCCD_S=2
        tCCD_L=4.0,     # hbm-pim.md: tCCD_L=4
        tCCD_AB=4.0,    # hbm-pim.md: all-bank PIM column commands are timed as bank-group-0
                        #   commands, i.e. tCCD_L = 4 apart
        tRRD_S=4.0,     # hbm-pim.md: tRRD_S=4
        tRRD_L=6.0,     # hbm-pim.md: tRRD_L=6 (all-bank ACTs are tRRD_L apart)
        tFAW=16.0,      # hbm-pim.md: tFAW=16 (declared, not enforced by the reference)
        tWR=16.0,       # hbm-pim.md: tWR=16
        tRTP_S=4.0,     # hbm-pim.md: tRTP_S=4
        tRTP_L=5.0,     # hbm-pim.md: tRTP_L=5
        tWTR_S=4.0,     # hbm-pim.md: tWTR_S=4
        tWTR_L=9.0,     # hbm-pim.md: tWTR_L=9
        tRTRS=1.0,      # hbm-pim.md: tRTRS=1
        tREFI=3900.0,   # hbm-pim.md: tREFI=3900
        # hbm-pim.md: "two ranks are modelled, staggered" -- DRAMSim2 starts rank i's
        # refresh countdown at tREFI / ranks * (i + 1), so rank 0 (the data) at tREFI / 2
        tREF0=1950.0,
        tRFC=350.0,     # hbm-pim.md: tRFC=350 (all-bank refresh)
        # PIMSimulator CommandQueue::process_refresh issues the refresh's PREs once issuable
        # (tRAS after a bank's ACT) and process_command keeps issuing meanwhile: a due refresh
        # waits past activations less than tRAS apart (the park-out: REF after its last read)
        tREFW=33.0,     # = tRAS
    )


@_preset("hbm-pim")
def hbm_pim(*, channels: int | None = None, config: str = "default",
            host: HostModel | None = None, gpu=None, gpu_model: str | None = None,
            simulator: str = "pimjax") -> Backend:
    """Samsung HBM-PIM (FIMDRAM / Aquabolt-XL) as simulated by Samsung's PIMSimulator.

    Group = pseudo-channel (pCH); core = one PIM unit on an even/odd bank pair.

    channels: number of pCH groups (default 64 = 4 stacks x 16, the reference); must be
        <= 16 or a multiple of 16.
    config: "default" (hbm-pim.md) or "ko" — the Korean paper's simplified configuration
        (§4.1: NCH=16 channels, NP=16 PIM units per channel, NB=1 bank per unit,
        NCO=32, NRO=16384, Scol=32 B; default channels 16).
    host: HostModel override (default: an A100 on this HBM-PIM memory,
    `a100("hbm-pim")`, 1.024 TB/s; DCC's 5-cube HBM3 GPU is `a100("hbm3")`).
    gpu: what "vs GPU" compares with (`System.gpu`; read `System.baseline`): a GPU by
        name (`hw.gpus.GPU_SPECS`: "a100", "h100", ...; default the A100) on this PIM
        memory (channels x 16 GB/s: 1.024 TB/s at 64 pCH), or a HostModel (as is); with
        `host=` and no `gpu`, that host.  A GPU timing model name is taken too (the older
        spelling of gpu_model).
    gpu_model: its timing model (`hw.gpu.GENERIC_GPU_MODELS`; default "occupancy").
    simulator: "pimjax" (default) or "dcc": DCC's HBM-PIM, the machine of its Ramulator2 fork
        with HBM-PIM units (SPIN-Research-Group/DCC, `src/Ramulator2/HBMPIM`), against which
        `../shared/reference/dcc-artifact.csv` was measured: AttAcc's HBM3 cube (16 channels x 64
        banks, 5.2 Gbps, tCK 0.769 ns; group = channel, core = one unit per bank, GRF 8 + 8), not
        Samsung's.  Its controller (`Group.controller = "dcc"`, `backends/dcc/engine.py`) times a
        program by replaying the trace DCC's generator writes for the draft's tiling (GEMV, RED,
        VA); values still come from this family's lowering.  Default host and GPU: DCC's A100 on
        HBM3 (`a100("hbm3")`).
    """
    configs = ("default", "ko")
    if config not in configs:
        raise ValueError(f"hbm-pim option config={config!r}: valid configs are {list(configs)}")
    if simulator not in DCC_SIMULATORS:
        raise ValueError(f"hbm-pim option simulator={simulator!r}: valid values are {list(DCC_SIMULATORS)}")
    if simulator == "dcc" and (config != "default" or channels not in (None, 16)):
        raise ValueError(f"hbm-pim option simulator='dcc' is DCC's one HBM3 cube of 16 channels: config='default', "
                         f"channels=16, not config={config!r}, channels={channels!r}")
    _check_host("hbm-pim", host)
    if channels is None:
        channels = 64 if config == "default" else 16   # hbm-pim.md: 64 pCH / Korean §4.1: NCH = 16
    if simulator == "dcc":
        channels = 16                       # DCC's HBM-PIM fork: HBM3_8Gb_2R with channel=16 (dcc_sim/timing.py)
    n_devices, per_device = _split_groups("hbm-pim", channels, HBM_PIM_PCH_PER_STACK)
    timing = _hbm_pim_timing() if simulator != "dcc" else _attacc_timing("bank", "pc")  # DCC: the fork's
    col_bytes = 32                          # hbm-pim.md: 32 columns x 32 B per 1 KB row; Korean §4.1: Scol = 32
    if simulator == "dcc":
        cores, banks_per_core = 64, 1       # DCC's HBM-PIM fork: a unit per bank, 64 banks per channel
        notes = ("simulator=dcc: DCC's HBM-PIM Ramulator2 fork (AttAcc's HBM3 cube with per-bank HBM-PIM "
                 "units) times the draft's DCC tiling (GEMV, RED, VA); its traces hold the matrix in the banks "
                 "(a per-call matrix placement is not timed) and merge nothing on the host",)
    elif config == "default":
        cores, banks_per_core = 8, 2        # hbm-pim.md: 8 PIM units per pCH, one per even/odd bank pair
        notes = ()
    else:
        cores, banks_per_core = 16, 1       # Korean §4.1: NP = 16 units per channel, NB = 1 bank per unit
        notes = ("ko: timing, lanes and link of the hbm-pim reference reused (assumption: the Korean "
                 "paper's DRAMsim3 timing is not given)",)
    core = Core(
        banks_per_core=banks_per_core,
        lanes=16,                           # hbm-pim.md: 16 FP16 lanes per unit (256-bit)
        dtype="float16",                    # hbm-pim.md: FP16 SIMD
        n_input_regs=8,                     # hbm-pim.md: GRF_A[8]; Korean §4.2: KI in {1,2,4,8}
        n_output_regs=8,                    # hbm-pim.md: GRF_B[8]; Korean §4.2: KO in {1,2,4,8}
        reg_bytes=32,                       # hbm-pim.md: 256-bit GRF entries
        ops=frozenset({"add", "mul", "mac", "mad", "mov", "relu"}),  # hbm-pim.md ISA: ADD MUL MAC MAD MOV FILL(ReLU)
        rows=16384,                         # hbm-pim.md: 16384 rows; Korean §4.1: NRO = 16384
        # hbm-pim.md: rows with bit 12 set never reach the banks (Samsung's; DCC's fork: every row)
        pim_rows=8192 if simulator != "dcc" else 0,
        cols=32,                            # hbm-pim.md: 32 columns per row; Korean §4.1: NCO = 32
        col_bytes=col_bytes,
        instruction_bytes=32 * 4,           # hbm-pim.md: 32-entry CRF; assumption: 32-bit instruction words
    )
    group = Group(
        cores_per_group=cores,
        units=(),
        broadcast=True,                     # hbm-pim.md: HAB_PIM column commands drive all 8 units
        # hbm-pim.md: PIM instructions execute only in HAB_PIM mode; DCC's fork issues per-bank op
        # commands, each bank loading its own input (gen_trace_HBMPIM_GEMV.py: PIM_LD_OP1 per bank)
        per_core_commands=simulator == "dcc",
        # hbm-pim.md: 16 banks per pCH = 4 bank groups x 4; DCC's fork: HBM3, 16 bank groups x 4 per channel
        bank_groups=4 if simulator != "dcc" else 16,
        banks_per_bank_group=4,
        data_buses=1 if simulator != "dcc" else 2,   # DCC's fork: HBM3's 2 pseudo-channels per channel
        controller="dcc" if simulator == "dcc" else "dram",
    )
    system = System(
        # the host reads the same 64-pCH memory the PIM units compute in (hbm-pim.md's
        # "non-PIM" baseline); DCC compared against a 5-cube HBM3 A100 instead (dcc.md)
        host=host if host is not None else a100("hbm-pim" if simulator != "dcc" else "hbm3"),
        n_devices=n_devices,
        groups_per_device=per_device,
        # hbm-pim.md: 32 B per 2-cycle burst = 16 GB/s per pCH.  The DRAM cycle model does not read
        # it (host transfers are timed as column commands): peaks.bus_bandwidth follows the timing
        link_bandwidth=bus_bandwidth(col_bytes, group.data_buses, timing),
        # the A100 reading this same memory (the Samsung simulator's "non-PIM" figures, hbm-pim.md)
        gpu=_baseline_gpu("hbm-pim", gpu, host, "a100",
                          channels * bus_bandwidth(col_bytes, group.data_buses, timing), gpu_model=gpu_model),
    )
    energy = _dram_energy(row_bytes=32 * col_bytes, col_bytes=col_bytes, lanes=16,
                          unit_path_pj_per_bit=0.0,            # assumption: the unit sits at the bank I/O
                          io_pj_per_bit=_HBM_IO_PJ_PER_BIT)    # assumption: AttAcc's HBM3 figures for HBM2
    return Backend(name="hbm-pim", variant=config + ("-dccsim" if simulator == "dcc" else ""), system=system,
                   group=group, core=core,
                   timing=timing, energy=energy,
                   notes=notes + ("energy: AttAcc's FGDRAM per-bit figures reused for HBM2 (assumption)",))


# --------------------------------------------------------------------------
# attacc: AttAcc on HBM3 (attacc.md, the public attacc_simulator on Ramulator 2)
# --------------------------------------------------------------------------
ATTACC_CHANNELS_PER_STACK = 16    # attacc.md: one stack = 16 channels
ATTACC_PCH_PER_CHANNEL = 2        # attacc.md: 2 pseudo-channels per channel
ATTACC_LEVELS = {                 # attacc.md PIM levels: (cores per channel, banks per core)
    "bank": (64, 1),              #   a 16-lane GEMV unit per bank (MACAB, 2 KB per command)
    "bg": (16, 4),                #   one unit per bank group (MACSB, 512 B per command)
    "buffer": (2, 32),            #   one unit per pseudo-channel on the buffer die (MACPB, 64 B per command)
}
ATTACC_VARIANTS = tuple(f"{lvl}-{pc}" for lvl in ATTACC_LEVELS for pc in ("pc", "npc"))


def _attacc_timing(level: str, power: str) -> Timing:
    if level == "buffer":
        mac_spacing = 2.0   # HBM3-PIM.cpp: MACPB->MACPB = nBL at channel level (nCCDAB/nCCDSB do not apply),
                            #   attacc.md: "at buffer level MACPB issue every nBL"; pc and npc coincide
    else:
        mac_spacing = 6.0 if power == "pc" else 4.0  # attacc.md: nCCDAB = nCCDSB = 6 ("pc") or 4 ("npc")
    return Timing(
        tCK=1.0 / 1.3,      # attacc.md: command clock 1.3 GHz (tCK = 0.769 ns; 5.2 Gbps per pin)
        tCL=19.0,           # attacc.md: nCL=19
        tWL=6.0,            # attacc.md: nCWL=6
        tBL=2.0,            # attacc.md: nBL=2 (a 32 B burst occupies a pCH bus 2 cycles)
        tRCDRD=19.0,        # attacc.md: nRCDRD=19
        tRCDWR=19.0,        # attacc.md: nRCDWR=19
        tRP=19.0,           # attacc.md: nRP=19
        tRAS=45.0,          # attacc.md: nRAS=45
        tRC=63.0,           # attacc.md: nRC=63
        tCCD_S=2.0,         # attacc.md: nCCD_S=2
        tCCD_L=4.0,         # attacc.md: nCCD_L=4
        tCCD_AB=mac_spacing,
        tRRD_S=2.0,         # attacc.md: nRRD_S=2
        tRRD_L=4.0,         # attacc.md: nRRD_L=4
        tFAW=39.0,          # attacc.md: nFAW=39 (not applied to PIM activations)
        tWR=21.0,           # attacc.md: nWR=21
        tRTP_S=6.0,         # attacc.md: nRTP_S=6
        tRTP_L=8.0,         # attacc.md: nRTP_L=8
        tWTR_S=8.0,         # attacc.md: nWTR_S=8
        tWTR_L=11.0,        # attacc.md: nWTR_L=11
        tRTRS=2.0,          # HBM3-PIM.cpp: RD->WR = nCL + nBL + 2 - nCWL, so the "+2" plays tRTRS's role in
                            #   RL + tBL + tRTRS - WL; attacc.md's nRTW=3 is declared but unused by the reference
        tREFI=5070.0,       # attacc.md: nREFI=5070
        tRFC=456.0,         # attacc.md: nRFC=456
    )


ATTACC_SYSTEMS = {                # system: (default stacks, default GPU model)
    "reference": (1, DEFAULT_GPU_MODEL),  # attacc.md: the reference simulator's one stack (validation rows)
    "dcc": (5, "dcc"),            # DCC §V / dcc.md: 5 HBM3 cubes, GPU 312 TFLOP/s, 3352 GB/s x 0.81
    "attacc": (5, "attacc"),      # attacc.md end-to-end: one AttAcc of 5 HBM3 stacks per A100a, its system model
}


@_preset("attacc")
def attacc(*, variant: str = "bank-pc", stacks: int | None = None, channels: int | None = None,
           host: HostModel | None = None, system: str = "reference", gpu=None,
           gpu_model: str | None = None, simulator: str = "pimjax") -> Backend:
    """AttAcc (HBM3 with a GEMV unit per bank and a softmax unit per channel).

    Group = channel (2 pseudo-channels, 64 banks); core = a 16-lane FP16 GEMV unit.

    variant: "<level>-<power>", level in {bank, bg, buffer} (one unit per bank / bank group /
        pseudo-channel), power "pc" (power-constrained MAC spacing 6, default) or "npc" (4).
    system: the system around the PIM memory: "reference" (default: the reference
        simulator's single stack, which attacc.md / attacc.csv measure; the GPU on that one
        stack), "dcc" (DCC §V: 5 HBM3 stacks, the A100 on the same 5 stacks, DCC's GPU
        model) or "attacc" (AttAcc's system: 5 stacks per A100a, the AttAcc simulator's
        GPU model).  It sets the default `stacks` and `gpu`.
    stacks: HBM3 stacks (default: the system's, 1 or 5).
    channels: total channel count override (<= 16 or a multiple of 16), for validation rows.
    host: HostModel override (default: DCC's / AttAcc's A100 with HBM3, `a100("hbm3")`): the
        processor whose roofline times the PIM programs' read-back and merge.
    gpu: what "vs GPU" compares with (`System.gpu`; read `System.baseline`): a GPU by name
        (`hw.gpus.GPU_SPECS`: "a100", "h100", "h200", ...; default the A100) on this PIM
        memory (stacks x 665.6 GB/s), or a HostModel (as is, e.g. `hw.gpus.gpu("h100")` on
        its own memory); with `host=` and no `gpu`, that host.  A GPU timing model name is
        taken too (the older spelling of gpu_model).
    gpu_model: its timing model (`hw.gpu.GENERIC_GPU_MODELS`; default: the system's --
        "occupancy", DCC's "dcc" or AttAcc's "attacc").
    simulator: "pimjax" (default) or "dcc": the semantics of DCC's Ramulator2 fork of AttAcc
        (SPIN-Research-Group/DCC, `src/Ramulator2/AttAcc`), against which
        `../shared/reference/dcc-artifact.csv` was measured, on its one HBM3 cube (16 channels x
        64 banks, 5.2 Gbps; variant "bank-pc", one stack).  Its controller
        (`Group.controller = "dcc"`, `backends/dcc/engine.py`) times a program by replaying the
        trace DCC's generator writes for the draft's tiling (GEMV and RED only); values still
        come from this family's lowering.
    """
    if simulator not in DCC_SIMULATORS:
        raise ValueError(f"attacc option simulator={simulator!r}: valid values are {list(DCC_SIMULATORS)}")
    if simulator == "dcc":
        if variant != "bank-pc" or (stacks is not None and stacks != 1) or (channels is not None and channels != 16):
            raise ValueError(f"attacc option simulator='dcc' is DCC's one HBM3 cube (16 channels x 64 banks, a GEMV "
                             f"unit per bank, nCCDAB 6): variant='bank-pc', stacks=1, channels=16, not variant="
                             f"{variant!r}, stacks={stacks!r}, channels={channels!r}")
        stacks = 1
    if system not in ATTACC_SYSTEMS:
        raise ValueError(f"attacc option system={system!r}: valid systems are {list(ATTACC_SYSTEMS)}")
    if stacks is None and channels is None:
        stacks = ATTACC_SYSTEMS[system][0]
    if variant not in ATTACC_VARIANTS:
        raise ValueError(f"attacc option variant={variant!r}: valid variants are {list(ATTACC_VARIANTS)}")
    _check_host("attacc", host)
    if stacks is not None and (not is_int(stacks) or stacks < 1):
        raise ValueError(f"attacc option stacks must be a positive int, got {stacks!r}")
    if channels is None:
        channels = ATTACC_CHANNELS_PER_STACK * (1 if stacks is None else stacks)
    n_devices, per_device = _split_groups("attacc", channels, ATTACC_CHANNELS_PER_STACK)
    if stacks is not None and n_devices != stacks:
        raise ValueError(f"attacc options stacks={stacks} and channels={channels} disagree "
                         f"({ATTACC_CHANNELS_PER_STACK} channels per stack)")
    level, power = variant.split("-")
    cores, banks_per_core = ATTACC_LEVELS[level]
    timing = _attacc_timing(level, power)
    col_bytes = 32                       # attacc.md: 16384 rows x 32 columns x 32 B (1 KB row)
    core = Core(
        banks_per_core=banks_per_core,
        lanes=16,                        # attacc.md: 16 FP16 lanes per unit
        dtype="float16",
        n_input_regs=16,                 # assumption: GEMV buffer of 16 x 32 B entries per unit, the most the
                                         #   reference trace generator fills (context phase: max_L/256 = 16 columns)
        n_output_regs=1,                 # assumption: one 32 B accumulator (16 FP16 results) per unit; the trace
                                         #   generator moves results out (MVSB) after every 16 outputs
        reg_bytes=32,
        ops=frozenset({"gemv", "mac"}),  # attacc.md: GEMV units (MACAB/MACSB/MACPB); softmax is a group unit
        rows=16384,                      # attacc.md: 16384 rows
        cols=32,                         # attacc.md: 32 columns
        col_bytes=col_bytes,
    )
    group = Group(
        cores_per_group=cores,
        units=("softmax", "accumulator"),  # attacc.md: softmax unit + softmax buffer per channel; partial sums
                                           #   reduced in an adder tree (DCC §V: "a softmax unit per channel")
        broadcast=True,                    # attacc.md: MACAB / MACSB / MACPB drive all units of the channel
        bank_groups=16,                    # attacc.md: 16 bank groups per channel (2 pCH x 2 SID x 4)
        banks_per_bank_group=4,            # attacc.md: 4 banks per bank group -> 64 banks per channel
        data_buses=ATTACC_PCH_PER_CHANNEL,  # attacc.md: each pseudo-channel has its own 32 B data bus
        # simulator="dcc": DCC's AttAcc fork times the draft's tiling (`backends/dcc/engine.py`)
        controller="dcc" if simulator == "dcc" else "dram",
    )
    system = System(
        host=host if host is not None else a100("hbm3"),  # dcc.md / AttAcc config.py: A100 with 5 HBM3 stacks
        n_devices=n_devices,
        groups_per_device=per_device,
        # attacc.md: 32 B / (2 x 0.769 ns) per pCH x 2 pCH = 41.6 GB/s per channel (665.6 GB/s per stack)
        link_bandwidth=bus_bandwidth(col_bytes, group.data_buses, timing),
        # the A100 on the same stacks: AttAcc's A100a reads its 5 AttAcc stacks (attacc.md), DCC's too (dcc.md)
        gpu=_baseline_gpu("attacc", gpu, host, "a100",
                          channels * bus_bandwidth(col_bytes, group.data_buses, timing),
                          default=ATTACC_SYSTEMS[system][1], gpu_model=gpu_model),
    )
    unit_path = {"bank": 0.0,                                         # AttAcc config.py, PIMType.BA
                 "bg": E_COL_TO_BGMUX,                                # PIMType.BG adds col->BG mux
                 "buffer": E_COL_TO_BGMUX + E_BGMUX_TO_GIO + E_TSV}[level]  # PIMType.BUFFER adds GIO + TSV
    energy = _dram_energy(row_bytes=32 * col_bytes, col_bytes=col_bytes, lanes=16,
                          unit_path_pj_per_bit=unit_path, io_pj_per_bit=_HBM_IO_PJ_PER_BIT)
    notes = ("softmax unit: only its data-bus occupancy is charged (attacc.md)",)
    if level == "buffer":
        notes += ("buffer level: MACPB spacing is nBL=2 in both pc and npc (HBM3-PIM.cpp)",)
    if simulator == "dcc":
        notes += ("simulator=dcc: DCC's AttAcc Ramulator2 fork times the draft's DCC tiling (GEMV, RED); its traces "
                  "hold the matrix in the banks (a per-call matrix placement is not timed) and merge nothing on "
                  "the host",)
    return Backend(name="attacc", variant=variant + ("-dccsim" if simulator == "dcc" else ""), system=system,
                   group=group, core=core, timing=timing, energy=energy, notes=notes)


DCC_SIMULATORS = ("pimjax", "dcc")
"""`attacc(simulator=...)` / `hbm_pim(simulator=...)`: pimjax's DRAM semantics, or those of DCC's
Ramulator2 forks (SPIN-Research-Group/DCC @ 7ffb80e) on their one HBM3 cube."""


# --------------------------------------------------------------------------
# newton: SK hynix Newton / AiM on GDDR6 (PIMFlow §2.1, §4.1, Table 1)
# --------------------------------------------------------------------------
NEWTON_CHANNELS_PER_CHIP = 2      # AiM ISSCC'22 (Lee et al. 2022, PIMFlow [38]): a GDDR6 chip has 2 x16 channels
NEWTON_BUFFER_BYTES = {           # total global-buffer bytes per channel by number of buffers:
    1: 2048,                      #   Newton [26]: one 2 KB global buffer (backends.md)
    2: 2048,                      #   AiM [38]: two buffers; assumption: 2 x 1 KB (one 32-column row of inputs each)
    4: 4096,                      #   PIMFlow Table 1 / §7: 4 KB per channel, four buffers (1 KB each)
}
PIMFLOW_TCK = 8.0 / 7.0           # PIMFlow Ramulator fork src/GDDR6.h, speed entry GDDR6_3500: tCK = 8/7 ns
                                  #   (875 MHz command clock); its nCL/nRCDR/nRP/nRAS/nBL/nCCDS = 11/11/11/25/2/2
                                  #   are exactly PIMFlow Table 1, so Table 1's cycles are of this clock
AIM_TCK = 0.5                     # AiM ISSCC'22: 16 Gb/s/pin GDDR6; the command clock CK runs at 1/8 of the
                                  #   data rate = 2 GHz (a BL16 burst of a x16 channel = 32 B in 2 CK)


def _newton_timing(clock: str) -> Timing:
    # PIMFlow Table 1 ("in clock cycles") and, for what Table 1 omits, the same GDDR6_3500
    # speed entry of PIMFlow's Ramulator fork (src/GDDR6.h) that Table 1 was taken from.
    cycles = dict(
        tCL=11.0,        # PIMFlow Table 1: tCL 11
        tWL=7.0,         # PIMFlow GDDR6.h GDDR6_3500: nCWL 7
        tBL=2.0,         # PIMFlow Table 1: tBL 2
        tRCDRD=11.0,     # PIMFlow Table 1: tRCD 11
        tRCDWR=9.0,      # PIMFlow GDDR6.h GDDR6_3500: nRCDW 9
        tRP=11.0,        # PIMFlow Table 1: tRP 11
        tRAS=25.0,       # PIMFlow Table 1: tRAS 25
        tRC=35.0,        # PIMFlow GDDR6.h GDDR6_3500: nRC 35
        tCCD_S=2.0,      # PIMFlow Table 1: tCCD 2 (nCCDS)
        tCCD_L=3.0,      # PIMFlow GDDR6.h GDDR6_3500: nCCDL 3
        tCCD_AB=2.0,     # PIMFlow GDDR6.cpp: COMP->COMP = nCCDS (all activated banks MAC one column)
        tRRD_S=5.0,      # PIMFlow GDDR6.h GDDR6_3500: nRRD 5 (one value, used for S and L)
        tRRD_L=5.0,
        tFAW=17.0,       # PIMFlow GDDR6.h GDDR6_3500: nFAW 17 (also G_ACT0->G_ACT1->... spacing in GDDR6.cpp)
        tWR=8.0,         # PIMFlow GDDR6.h GDDR6_3500: nWR 8
        tRTP_S=2.0,      # PIMFlow GDDR6.h GDDR6_3500: nRTP 2 (one value)
        tRTP_L=2.0,
        tWTR_S=4.0,      # PIMFlow GDDR6.h GDDR6_3500: nWTR 4 (one value)
        tWTR_L=4.0,
        tRTRS=2.0,       # PIMFlow GDDR6.cpp: RD->WR = nCL + nCCDS + 2 - nCWL; the "+2" is tRTRS's role
        tREFI=1900.0,    # PIMFlow GDDR6.cpp: nREFI = REFIS_TABLE[GDDR6_3500] = 1900
        tRFC=350.0,      # PIMFlow GDDR6.cpp: nRFC = RFC_TABLE[8 Gb][GDDR6_3500] = 350 ("using DDR3 values")
    )
    if clock == "pimflow":
        return Timing(tCK=PIMFLOW_TCK, **cycles)
    # "aim": same absolute array latencies (ns) at AiM's 2 GHz clock, rounded up to whole
    # cycles; burst / column cadence and bus turnaround (tBL, tCCD_*, tRTRS) stay in cycles
    # (BL16 = 2 CK at any rate).  assumption: PIMFlow's ns latencies hold for the 16 Gb/s part.
    per_cycle = ("tBL", "tCCD_S", "tCCD_L", "tCCD_AB", "tRTRS")
    scaled = {k: (v if k in per_cycle else float(math.ceil(v * PIMFLOW_TCK / AIM_TCK - 1e-9)))
              for k, v in cycles.items()}
    return Timing(tCK=AIM_TCK, **scaled)


@_preset("newton")
def newton(*, channels: int = 16, total_channels: int = 32, buffers: int = 4, clock: str = "pimflow",
           host: HostModel | None = None, gpu=None, gwrite_hiding: bool = False,
           simulator: str = "pimjax", gpu_model: str | None = None) -> Backend:
    """SK hynix Newton / AiM on GDDR6, as configured in PIMFlow.

    Group = channel (16 banks, global buffer(s)); core = one bank with 16 BF16 multipliers
    and a reduction tree.

    channels: PIM channels (default 16: PIMFlow §6, 16 PIM-enabled of 32); <= 2 or even.
    total_channels: the GDDR6 memory's channels (default 32, PIMFlow §5-6); the
        total_channels - channels others are GPU-only.  PIMFlow's system: "vs GPU"
        compares with the GPU-only baseline on every channel (`System.gpu`), and
        while PIM runs the GPU runs beside it on its own channels (`System.cogpu`,
        PIMFlow §4.1's channel grouping; None when every channel is PIM).
    buffers: global buffers per channel, 1 (Newton, 2 KB), 2 (AiM, 2 x 1 KB) or 4 (PIMFlow,
        4 KB; default).
    clock: "pimflow" (default, tCK = 8/7 ns, the clock of PIMFlow Table 1's cycles) or "aim"
        (tCK = 0.5 ns, AiM ISSCC'22 16 Gb/s/pin; reproduces its 1 TFLOPS per chip).
    host: HostModel override (default: PIMFlow's RTX 2060, `rtx2060()`).
    gpu: what "vs GPU" compares with (`System.gpu`): a GPU model name ("roofline", "dcc",
        "occupancy" (default)) for the RTX 2060 on all total_channels (x 14 GB/s at the
        "pimflow" clock: 448 GB/s for 32), "pimflow" for PIMFlow's own GPU -- the Accel-Sim
        RTX 2060 of its artifact on total_channels GDDR6 channels of 28 GB/s each (its
        configuration's data rate; `hw.host.pimflow_rtx2060`) --, or a HostModel; with
        `host=` and no `gpu`, that host.  The concurrent GPU (`System.cogpu`) is the same GPU
        on the GPU-only channels with the same GPU model (none with `host=` or a HostModel
        `gpu`: pass `System.cogpu` by `Backend.replace`).  A GPU by name
        (`hw.gpus.GPU_SPECS`: "rtx2060", "t4", "a100", ...) is that card on the same channels.
    gpu_model: the GPU's timing model ("roofline", "dcc", "occupancy" (default), "library",
        "pimflow"; "pimflow" = gpu="pimflow").
    gwrite_hiding: PIMFlow §4.1's GWRITE latency hiding (default off): a G_ACT issues without
        waiting for the GWRITEs before it (`Timing.gwrite_hiding`, rule BUF_ACT of
        `hw.dram_rules` off); the COMPs still wait for the buffer data (tWL + tBL + tWTR).
        "Data can be fetched from GPU channels while PIM channels activate memory rows", so it
        needs GPU-only channels (total_channels > channels).  `newton_config("newton++")` turns
        it on with four buffers.
    simulator: "pimjax" (default) or "pimflow": the semantics of PIMFlow's Ramulator fork
        (`src/GDDR6.cpp`, `src/Controller.cpp`), against which `../shared/reference/pimflow.csv`
        was measured.  Its controller (`Group.controller = "pimflow"`, `backends/newton/fork.py`)
        issues the PIM commands in order, one per cycle, under its own command-to-command
        latencies: a buffer load is one GWRITE command, G_ACT charges no precharge, a due refresh
        waits for the next READRES; and READRES is a command slot that puts nothing on the data
        bus (`Core.readres_bytes = 0`; default: the FP32 latches cross the bus, 64 B per READRES
        of 16 banks).
    """
    if gwrite_hiding not in (False, True):
        raise ValueError(f"newton option gwrite_hiding={gwrite_hiding!r}: a bool")
    if gwrite_hiding and is_int(total_channels) and total_channels <= channels:
        raise ValueError(f"newton option gwrite_hiding=True needs GPU-only channels to fetch the GWRITE data "
                         f"from while the PIM channels activate rows (PIMFlow §4.1): total_channels="
                         f"{total_channels} must exceed channels={channels}")
    if not is_int(buffers) or buffers not in NEWTON_BUFFER_BYTES:
        raise ValueError(f"newton option buffers={buffers!r}: valid values are {sorted(NEWTON_BUFFER_BYTES)}")
    if clock not in ("pimflow", "aim"):
        raise ValueError(f"newton option clock={clock!r}: valid clocks are ['aim', 'pimflow']")
    if simulator not in NEWTON_SIMULATORS:
        raise ValueError(f"newton option simulator={simulator!r}: valid values are {sorted(NEWTON_SIMULATORS)}")
    _check_host("newton", host)
    if gpu_model == "pimflow":
        if gpu not in (None, "pimflow", "rtx2060"):
            raise ValueError(f"newton options gpu={gpu!r} and gpu_model='pimflow': PIMFlow's model is of its "
                             f"RTX 2060 only")
        gpu, gpu_model = "pimflow", None
    elif gpu == "pimflow" and gpu_model is not None:
        raise ValueError(f"newton options gpu='pimflow' and gpu_model={gpu_model!r}: PIMFlow's GPU is timed by its "
                         f"own model; name another GPU, or leave gpu_model out")
    # the RTX 2060 has no "attacc" model (its cache sizes are the A100's / H100's: `hw.host.rtx2060`)
    newton_models = tuple(m for m in GENERIC_GPU_MODELS if m != "attacc") + ("pimflow",)
    n_devices, per_device = _split_groups("newton", channels, NEWTON_CHANNELS_PER_CHIP)
    if not is_int(total_channels) or total_channels < channels:
        raise ValueError(f"newton option total_channels={total_channels!r}: the memory's channels, an int >= "
                         f"channels={channels} (the PIM-enabled ones)")
    timing = _newton_timing(clock)
    if gwrite_hiding:
        timing = timing.replace(gwrite_hiding=1.0)
    col_bytes = 32                        # PIMFlow Table 1: 256-bit column I/O
    core = Core(
        banks_per_core=1,                 # PIMFlow §2.1: MAC logic per bank
        lanes=16,                         # PIMFlow §2.1 / Table 1: 16 multipliers per bank, one reduction tree
        dtype="bfloat16",                 # Newton / AiM: BF16 MACs
        n_input_regs=0,                   # inputs come from the channel's global buffer, not per-bank registers
        n_output_regs=buffers,            # PIMFlow §2.1: result latches; assumption: one per global buffer
                                          #   (GWRITE_4 + COMP produce 4 partial dot products per bank)
        reg_bytes=4,                      # assumption: FP32 accumulating latch (no source gives the width)
        ops=frozenset({"mac"}),           # PIMFlow §2.1: matrix-vector MAC only; "other operations are not supported"
                                          #   (no "gemv": sums as a GEMV with a ones vector are AttAcc's, not lowered here)
        rows=16384,                       # assumption: no paper gives it; matches the 1<<14 rows of the GDDR6_8Gb_x16
                                          #   org in PIMFlow's Ramulator fork
        cols=32,                          # PIMFlow Table 1: 32 column I/Os per row
        col_bytes=col_bytes,
        # READRES: the latches on the data bus (None: reg_bytes each); PIMFlow's Ramulator fork
        # times READRES as a command slot only (GDDR6.cpp: COMP -> READRES 1, no bus timing)
        readres_bytes=0 if simulator == "pimflow" else None,
    )
    group = Group(
        cores_per_group=16,               # PIMFlow Table 1: 16 banks, one core each
        units=("global_buffer",),         # PIMFlow §2.1: a global buffer per channel holds the small operand
        broadcast=True,                   # PIMFlow §4.1: G_ACT activates several banks, COMP MACs in all of them
        global_buffer_bytes=NEWTON_BUFFER_BYTES[buffers],
        n_global_buffers=buffers,
        bank_groups=4,                    # PIMFlow GDDR6.h: 4 bank groups x 4 banks (G_ACT0..3 = one per bank group)
        banks_per_bank_group=4,
        # simulator="pimflow": the fork's controller times the streams (`backends/newton/fork.py`)
        controller="pimflow" if simulator == "pimflow" else "dram",
    )
    system = System(
        host=host if host is not None else rtx2060(),  # PIMFlow §5: RTX 2060 (Accel-Sim)
        n_devices=n_devices,
        groups_per_device=per_device,
        # one 32 B burst per tBL cycles on the channel: 14 GB/s at 875 MHz, 32 GB/s at AiM's 2 GHz
        link_bandwidth=bus_bandwidth(col_bytes, group.data_buses, timing),
        # PIMFlow's baseline: the GPU alone on every channel of the memory (PIM ones included)
        # (gpu="pimflow": PIMFlow's Accel-Sim GPU, configured by its channel count)
        gpu=(pimflow_rtx2060(total_channels) if gpu == "pimflow" else
             _baseline_gpu("newton", gpu, host, "rtx2060",
                           total_channels * bus_bandwidth(col_bytes, group.data_buses, timing),
                           gpu_model=gpu_model, models=newton_models)),
        # PIMFlow §4.1: beside PIM, the GPU reads only the GPU-only channels
        cogpu=((pimflow_rtx2060(total_channels - channels) if gpu == "pimflow" else
                _baseline_gpu("newton", gpu, host, "rtx2060",
                              (total_channels - channels) * bus_bandwidth(col_bytes, group.data_buses, timing),
                              gpu_model=gpu_model, models=newton_models))
               if total_channels > channels and host is None and not isinstance(gpu, HostModel) else None),
    )
    energy = _dram_energy(row_bytes=32 * col_bytes, col_bytes=col_bytes, lanes=16,
                          unit_path_pj_per_bit=0.0,
                          io_pj_per_bit=E_COL_TO_BGMUX + E_BGMUX_TO_GIO)  # assumption: HBM on-die path; GDDR6
                                                                          #   off-chip I/O energy not modelled
    notes = ("energy: AttAcc's FGDRAM per-bit figures reused for GDDR6 (assumption)",
             "rows=16384 is an assumption (no paper gives the row count)")
    if clock == "aim":
        notes += ("clock=aim: PIMFlow's array latencies kept in ns at tCK=0.5 ns (assumption)",)
    return Backend(name="newton", variant=f"{clock}-gb{buffers}" + ("-gwh" if gwrite_hiding else "")
                   + ("-pimflowsim" if simulator == "pimflow" else ""),
                   system=system, group=group,
                   core=core, timing=timing, energy=energy, notes=notes)


NEWTON_SIMULATORS = ("pimjax", "pimflow")
"""`newton(simulator=...)`: pimjax's DRAM semantics, or those of PIMFlow's Ramulator fork."""

NEWTON_CONFIGS = {
    # PIMFlow §6: "Newton+: the baseline Newton [26] with offloading support for CONV and FC
    # layers ... and command scheduling for multiple channels" -- one global buffer (Newton's)
    "newton+": dict(buffers=1, gwrite_hiding=False),
    # "Newton++: Newton+ with the PIM command optimizations" (§4.1): four global buffers
    # (GWRITE_4 reusing each G_ACT) and GWRITE latency hiding
    "newton++": dict(buffers=4, gwrite_hiding=True),
    # Fig. 14's single optimisations
    "newton+gw": dict(buffers=1, gwrite_hiding=True),
    "newton+gb": dict(buffers=4, gwrite_hiding=False),
}
"""PIMFlow's named Newton configurations (Fig. 9 / Fig. 14): `newton` preset options."""


def newton_config(name: str, **options) -> Backend:
    """The `newton` preset as PIMFlow's configuration `name` (a key of
    `NEWTON_CONFIGS`: "newton+", "newton++", "newton+gw", "newton+gb");
    `options` pass on to `newton` (channels, clock, ...)."""
    if name not in NEWTON_CONFIGS:
        raise ValueError(f"newton configuration {name!r}: valid names are {sorted(NEWTON_CONFIGS)}")
    return newton(**{**NEWTON_CONFIGS[name], **options})


# --------------------------------------------------------------------------
# upmem: UPMEM DDR4 PIM (ATiM §2.1, §6; CINM §4.1; PrIM)
# --------------------------------------------------------------------------
UPMEM_DPUS_PER_RANK = 64          # backends.md / ATiM §6: 32 ranks x 64 = 2048 DPUs
UPMEM_MAX_DPUS = 2560             # ATiM §5.2.4: "up to 2560 DPUs"; backends.md
UPMEM_MRAM_BYTES = 64 << 20       # CINM §4.1 / backends.md: 64 MB MRAM per DPU (its bank)
UPMEM_CPU_DPU_GBPS = 6.68         # PrIM (Gomez-Luna et al., IEEE Access 2022), CPU-DPU transfer study: sustained parallel CPU->DPU
                                  #   transfer bandwidth of one rank (64 DPUs) -- recalled from PrIM, not in papers/
UPMEM_DPU_CPU_GBPS = 4.74         # PrIM, same study: sustained parallel DPU->CPU bandwidth of one rank -- recalled, idem


def _upmem_timing() -> Timing:
    # assumption: UPMEM MRAM banks follow DDR4-2400 speed bin R (16-16-16), the Ramulator 2
    # DDR4 preset "DDR4_2400R" with the x8 org tables (ATiM artifact: "DDR4-2400 PIM modules").
    return Timing(
        tCK=1.0 / 1.2,      # DDR4-2400: 1200 MHz command clock, 0.833 ns
        tCL=16.0,           # Ramulator2 DDR4_2400R: nCL 16
        tWL=12.0,           # Ramulator2 DDR4_2400R: nCWL 12
        tBL=4.0,            # Ramulator2 DDR4: nBL 4 (BL8 on a DDR bus)
        tRCDRD=16.0,        # Ramulator2 DDR4_2400R: nRCD 16
        tRCDWR=16.0,        # Ramulator2 DDR4_2400R: nRCD 16 (DDR4 has one tRCD)
        tRP=16.0,           # Ramulator2 DDR4_2400R: nRP 16
        tRAS=39.0,          # Ramulator2 DDR4_2400R: nRAS 39
        tRC=55.0,           # Ramulator2 DDR4_2400R: nRC 55
        tCCD_S=4.0,         # Ramulator2 DDR4_2400R: nCCDS 4
        tCCD_L=6.0,         # Ramulator2 DDR4_2400R: nCCDL 6
        tCCD_AB=6.0,        # no all-bank PIM commands on UPMEM; set to tCCD_L so formulas stay finite (unused)
        tRRD_S=4.0,         # Ramulator2 DDR4 x8 @2400: nRRDS 4
        tRRD_L=6.0,         # Ramulator2 DDR4 x8 @2400: nRRDL 6
        tFAW=26.0,          # Ramulator2 DDR4 x8 @2400: nFAW 26
        tWR=18.0,           # Ramulator2 DDR4_2400R: nWR 18
        tRTP_S=9.0,         # Ramulator2 DDR4_2400R: nRTP 9 (one value)
        tRTP_L=9.0,
        tWTR_S=3.0,         # Ramulator2 DDR4_2400R: nWTRS 3
        tWTR_L=9.0,         # Ramulator2 DDR4_2400R: nWTRL 9
        tRTRS=2.0,          # Ramulator2 DDR4: nCS 2 (rank switch)
        tREFI=9360.0,       # JEDEC DDR4 tREFI 7.8 us x 1.2 GHz
        tRFC=312.0,         # JEDEC DDR4 4 Gb tRFC1 260 ns x 1.2 GHz (a UPMEM chip: 8 x 64 MB = 4 Gb)
        dpu_clock_ghz=0.35,         # CINM §4.1 / backends.md: DPUs run at 350 MHz
        dma_bytes_per_cycle=2.0,    # backends.md: MRAM<->WRAM DMA, theoretical 2 B per DPU cycle
        dma_latency_cycles=77.0,    # PrIM MRAM microbenchmark: mram_read latency ~ 77 + 0.5 * bytes cycles (mram_write: 61);
                                    #   recalled from PrIM, not in papers/ -- verify before fitting to it
    )


@_preset("upmem")
def upmem(*, dpus: int = 2048, host: HostModel | None = None) -> Backend:
    """UPMEM DDR4 PIM: group = rank (64 DPUs), core = a DPU with its 64 MB MRAM bank.

    dpus: DPUs in the system (default 2048 = 32 ranks, ATiM's server); a multiple of 64,
        at most 2560.
    host: HostModel override (default: ATiM's dual Xeon Gold 5220R, `xeon_gold_5220r()`).
    """
    if not is_int(dpus) or dpus < UPMEM_DPUS_PER_RANK or dpus > UPMEM_MAX_DPUS \
            or dpus % UPMEM_DPUS_PER_RANK:
        raise ValueError(f"upmem option dpus={dpus!r} must be a multiple of {UPMEM_DPUS_PER_RANK} "
                         f"(DPUs per rank) between {UPMEM_DPUS_PER_RANK} and {UPMEM_MAX_DPUS}")
    _check_host("upmem", host)
    timing = _upmem_timing()
    col_bytes = 8                         # UPMEM SDK: MRAM DMA transfers are 8-byte aligned multiples of 8 B
    cols = 128                            # assumption: 1 KB MRAM row (DDR4 x8 page) = 128 x 8 B
    rows = UPMEM_MRAM_BYTES // (cols * col_bytes)  # 65536 rows -> rows x cols x col_bytes = 64 MB
    core = Core(
        banks_per_core=1,                 # ATiM §2.1: each DPU communicates directly with a single bank
        lanes=1,                          # scalar 32-bit in-order core
        dtype="int32",                    # backends.md: integer arithmetic, no FPU, no full 32x32 multiplier
        n_input_regs=0,                   # no compiler-managed PIM register file: operands are staged in WRAM
        n_output_regs=0,
        reg_bytes=0,
        scratchpad_bytes=64 * 1024,       # CINM §4.1 / backends.md: 64 KB WRAM
        ops=frozenset({"add", "sub", "mul", "mac", "max", "min", "relu", "mov", "gemv",
                       "neg", "abs", "cmp", "select"}),  # assumption: integer ops a DPU runs natively or in short
                                          #   sequences (mul via mul_step); div/exp/softmax are slow software routines
        rows=rows,
        cols=cols,
        col_bytes=col_bytes,
        tasklets=24,                      # ATiM §2.1: 24 threads ("tasklets") per DPU
        pipeline_depth=14,                # backends.md: 14-stage pipeline (full throughput needs >= 11 tasklets)
        programmable=True,                # a DPU runs its own program at dpu_clock_ghz
        instruction_bytes=24 * 1024,      # backends.md: 24 KB IRAM (CINM §4.1 says 4 kB; UPMEM SDK: 4096 x 48-bit)
    )
    group = Group(
        cores_per_group=UPMEM_DPUS_PER_RANK,
        units=(),
        broadcast=False,                  # no group-broadcast commands; parallel transfers are a System property
        bank_groups=8,                    # 8 PIM chips per rank (ATiM §2.1: eight DPUs per chip) ...
        banks_per_bank_group=8,           # ... x 8 DPU banks per chip = 64 banks per rank
    )
    system = System(
        host=host if host is not None else xeon_gold_5220r(),  # ATiM §6: dual-socket Xeon Gold 5220R
        n_devices=dpus // UPMEM_DPUS_PER_RANK,   # device = rank (a DIMM holds two)
        groups_per_device=1,
        link_bandwidth=UPMEM_CPU_DPU_GBPS,       # per rank; assumption: ranks transfer concurrently
        readback_bandwidth=UPMEM_DPU_CPU_GBPS,
    )
    energy = Energy(
        act=E_ACT_PRE_PJ_PER_BIT * 8 * cols * col_bytes,  # assumption: FGDRAM cell figures for DDR4
        pre=0.0,
        rd=E_CELL_RDWR_PJ_PER_BIT * 8 * col_bytes,
        wr=E_CELL_RDWR_PJ_PER_BIT * 8 * col_bytes,
        pim_op=0.0,       # assumption: DPU instruction energy not modelled (no source)
        io_byte=0.0,      # assumption: DDR4 channel I/O energy not modelled (no source)
        refresh=0.0,
    )
    notes = ("host link: PrIM rank-parallel bandwidths 6.68 (CPU->DPU) / 4.74 (DPU->CPU) GB/s, recalled",
             "MRAM timing: DDR4-2400R (assumption); DMA: 2 B/cycle theoretical",
             "energy: DPU and I/O energy not modelled")
    return Backend(name="upmem", variant="default", system=system, group=group, core=core,
                   timing=timing, energy=energy, notes=notes)
