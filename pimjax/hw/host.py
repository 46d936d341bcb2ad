"""Host models: the GPU / CPU a PIM system is attached to and compared with.

Each function returns a `HostModel` (core.py) whose roofline is time = max(bytes /
(mem_bandwidth * bandwidth_efficiency), flops / (peak_flops * flops_efficiency)) +
launch_overhead_ns, and whose `model` names how baseline ops are timed (`gpu.py`:
"roofline", "dcc", "attacc", "occupancy" -- `GPU_MODEL_FACTORS` gives each model's
efficiencies and launch -- or "pimflow", PIMFlow's Accel-Sim RTX 2060 alone,
`pimflow_rtx2060`).  `paper_gpu(name)` is the GPU each paper compares with.
`gpu_on(gpu, GB/s, model)` is the GPU on a PIM system's own memory, the fair
partner the presets compare with (`System.gpu`).
Units: peak_flops in FLOP/s, mem_bandwidth in bytes/s, launch_overhead_ns in ns,
staging_buffer_bytes in bytes.  Every number carries its source; "assumption:" marks
values no source gives.

Reports must print `bandwidth_efficiency` and `flops_efficiency` next to any host time.

Example::

    >>> from pimjax.hw.host import a100
    >>> gpu = a100(memory="hbm3")          # the A100 of DCC's / AttAcc's evaluations
    >>> round(float(gpu.time_ns(2 * 4096 * 4096 + 2 * 4096 + 2 * 4096, 2 * 4096 * 4096)))
    12400
"""
from __future__ import annotations

import numpy as np

from . import energy_table as E
from .core import HostModel
from .gpu_library import LIB_LAUNCH_NS

# --------------------------------------------------------------------------
# NVIDIA A100-80GB (DCC and AttAcc baseline GPU)
# --------------------------------------------------------------------------
A100_PEAK_FP16_FLOPS = 312e12       # A100 datasheet: 312 TFLOP/s FP16 dense tensor (backends.md; AttAcc config.py A100a)
A100_HBM2E_BANDWIDTH = 2.039e12     # A100-80GB SXM datasheet: 2,039 GB/s HBM2e (backends.md: "2.04 TB/s")
A100_HBM3_BANDWIDTH = 3352e9        # AttAcc simulator src/config.py, GPUType.A100a: OFF_MEM_BW 3352 GB/s
                                    #   (= 5 HBM3 stacks x 670.4 GB/s); DCC's GPU model: "3352 GB/s x 0.81" (dcc.md)
A100_ON_HBM_PIM_BANDWIDTH = 64 * 16e9   # backends.md / hbm-pim.md: 64 pCH x 16 GB/s external (4 Aquabolt-XL
                                        #   stacks) -- the A100 attached to the HBM-PIM memory itself
A100_BW_EFFICIENCY = 0.81           # dcc.md: DCC's GPU model uses 0.81 bandwidth utilisation
A100_FLOPS_EFFICIENCY = 0.8         # AttAcc simulator src/config.py: SCALING_FACTOR['MAX_COMPUTE_UTIL'] = 0.8
A100_SMS = 108                      # A100 whitepaper: 108 SMs
A100_FP32_FLOPS = 19.5e12           # A100 datasheet: 19.5 TFLOP/s FP32 (CUDA cores; the "library" model's FP32 GEMM)
A100_SMEM_PER_SM = 164 * 1024       # A100 whitepaper: up to 164 KB shared memory per SM (of 192 KB L1/smem)

# Launch overhead, calibrated so the roofline reproduces AttAcc's own A100 model
# (attacc.md: "12.4 us for a 4096x4096 FP16 GEMV at batch 1" on its HBM3 "A100a"):
#   bytes  = W + x + y = 2*4096*4096 + 2*4096 + 2*4096 = 33,570,816 B
#   t_mem  = 33,570,816 B / (3352e9 B/s * 0.81)        = 12,364.3 ns
#   t_flop = 2*4096*4096 / (312e12 * 0.8)              =    134.4 ns  (< t_mem: memory bound)
#   launch = 12,400 - 12,364.3                         ≈     36 ns
# i.e. AttAcc's model has (almost) no fixed kernel cost; a real CUDA launch (~3-5 us)
# would put the roofline 25-40 % above AttAcc's figure, so we follow the reference.
A100_LAUNCH_NS = 36.0


A100_L1_PER_SM = 192 * 1024         # A100 whitepaper: 192 KB combined L1 / shared memory per SM
                                    #   (AttAcc config.py A100a: L1_CAP_PER_CORE 192 KB)
A100_L2 = 40 * 1024 * 1024          # A100 whitepaper: 40 MB L2 (AttAcc config.py A100a: L2_CAP_PER_DEVICE)

# The GPU models (pimjax/hw/gpu.py) as (bandwidth efficiency, FLOP/s efficiency, launch ns):
ATTACC_BW_EFFICIENCY = 0.85         # AttAcc simulator src/config.py: SCALING_FACTOR['MAX_OFF_MEM_BW_UTIL'] = 0.85
DCC_FLOPS_EFFICIENCY = 1.0          # dcc.md: DCC's GPU model names a bandwidth utilisation (0.81) and no
                                    #   compute utilisation: 312 TFLOP/s as is
OCC_LAUNCH_NS = 1000.0              # NVIDIA Technical Blog, "Getting Started with CUDA Graphs" (A. Gray, 2019),
                                    #   recalled, not in papers/: a 2.9 us kernel launched back to back in one
                                    #   stream takes 3.8 us each (launch overhead ~1 us once launches overlap
                                    #   execution; 9.6 us with a sync per launch).  The GPU-side floor, not the
                                    #   framework's (PyTorch eager adds more)
GPU_MODEL_FACTORS = {
    # model: (bandwidth efficiency, FLOP/s efficiency, launch ns)
    "roofline": (A100_BW_EFFICIENCY, A100_FLOPS_EFFICIENCY, A100_LAUNCH_NS),  # pimjax's calibrated roofline
    "dcc": (A100_BW_EFFICIENCY, DCC_FLOPS_EFFICIENCY, 0.0),    # dcc.md: 3352 GB/s x 0.81, 312 TFLOP/s; no launch
    "attacc": (ATTACC_BW_EFFICIENCY, A100_FLOPS_EFFICIENCY, 0.0),  # AttAcc devices.py: no fixed kernel cost
    "occupancy": (A100_BW_EFFICIENCY, A100_FLOPS_EFFICIENCY, OCC_LAUNCH_NS),  # DCC's / AttAcc's utilisations
                                                               #   + a launch; occupancy in gpu.py
    # the kernels' model (gpu_library.py): these defaults are the A100's; `gpus.gpu(name)` gives a measured
    # card its own fitted efficiencies and per-wave cost (hw/measured/fits.json)
    "library": (A100_BW_EFFICIENCY, A100_FLOPS_EFFICIENCY, LIB_LAUNCH_NS),
}


def _memory_bandwidth(memory, bandwidths: dict, who: str) -> tuple[float, str]:
    """(bytes/s, label) of a named memory or a bandwidth in bytes/s."""
    if isinstance(memory, str):
        if memory not in bandwidths:
            raise ValueError(f"{who}(memory={memory!r}): valid memories are {sorted(bandwidths)} "
                             f"or a bandwidth in bytes/s")
        return bandwidths[memory], memory
    bw = float(memory)
    if not (bw > 0 and np.isfinite(bw)):
        raise ValueError(f"{who}(memory={memory!r}): a bandwidth must be a positive number of bytes/s")
    return bw, f"{bw / 1e9:,.1f} GB/s"


def model_factors(model: str, who: str) -> tuple[float, float, float]:
    if model == "pimflow":
        raise ValueError(f"{who}(model='pimflow'): the model of PIMFlow's Accel-Sim RTX 2060 only "
                         "(`pimflow_rtx2060(channels)`); valid GPU models here are "
                         f"{list(GPU_MODEL_FACTORS)}")
    if model not in GPU_MODEL_FACTORS:
        raise ValueError(f"{who}(model={model!r}): valid GPU models are {list(GPU_MODEL_FACTORS)}")
    return GPU_MODEL_FACTORS[model]


# --------------------------------------------------------------------------
# GPU dynamic energy (`hw.gpu.gpu_energy_pj`): AttAcc's GPU ENERGY_TABLE
# --------------------------------------------------------------------------
# scale-snu/attacc_simulator src/config.py (commit c600051), ENERGY_TABLE['GPU'] (`energy_table`)
GPU_E_MEM_PJ_PER_BYTE = (E.E_ACT_PRE_PJ_PER_BIT + E.E_CELL_RDWR_PJ_PER_BIT + E.E_COL_TO_BGMUX + E.E_BGMUX_TO_GIO
                         + E.E_TSV + E.E_INTERPOSER) * 8     # 28.72 pJ/B: HBM's whole FGDRAM path
GPU_E_L2_PJ_PER_BYTE = E.E_L2_PJ_PER_BIT * 8
GPU_E_L1_PJ_PER_BYTE = E.E_L1_PJ_PER_BIT * 8
GPU_E_REG_PJ = E.E_REG_PJ
GPU_E_ALU_PJ_PER_MAC = E.E_ALU_PJ_PER_MAC
# static power: AttAcc models none; no source in reach gives one for the GPUs here (PIMFlow's
# AccelWattch RTX 2060 figure is not published in its text), so it is 0 -- GPU energies here are
# dynamic only (a `replace(static_power_w=...)` adds one, charged over the time)
GPU_STATIC_POWER_W = 0.0


def gpu_host(name: str, peak_flops: float, bw: float, factors: tuple, model: str, sms: int, smem_per_sm: int,
         l1_per_sm: int = 0, l2: int = 0) -> HostModel:
    """A GPU's HostModel: its peak, memory and SMs, the GPU model's (bandwidth
    efficiency, FLOP/s efficiency, launch ns), shared memory as the staging
    buffer, the caches AttAcc's tiling reads (0: not modelled), AttAcc's GPU
    energy table (every GPU here: AttAcc gives one table, for HBM; on a GDDR6
    card such as the RTX 2060 the memory figure is an assumption)."""
    bw_eff, flops_eff, launch = factors
    return HostModel(name=name, peak_flops=peak_flops, mem_bandwidth=bw, flops_efficiency=flops_eff,
                     bandwidth_efficiency=bw_eff, launch_overhead_ns=launch, staging_buffer_bytes=sms * smem_per_sm,
                     model=model, sms=sms, l1_bytes_per_sm=l1_per_sm, l2_bytes=l2,
                     e_mem_pj_per_byte=GPU_E_MEM_PJ_PER_BYTE, e_l2_pj_per_byte=GPU_E_L2_PJ_PER_BYTE,
                     e_l1_pj_per_byte=GPU_E_L1_PJ_PER_BYTE, e_reg_pj=GPU_E_REG_PJ,
                     e_alu_pj_per_mac=GPU_E_ALU_PJ_PER_MAC, static_power_w=GPU_STATIC_POWER_W)


def a100(memory="hbm2e", model: str = "roofline") -> HostModel:
    """NVIDIA A100-80GB on `memory`, timed by the GPU model `model`.

    memory="hbm2e" (default): the real A100-80GB SXM, 2.039 TB/s HBM2e.
    memory="hbm3": the A100 of DCC's and AttAcc's evaluations ("A100a"), whose
    memory is 5 HBM3 stacks at 670.4 GB/s = 3352 GB/s; use this one to compare
    against DCC / AttAcc speedups.
    memory="hbm-pim": the same GPU on the 4-stack HBM-PIM memory (64 pCH x
    16 GB/s = 1.024 TB/s), as the Samsung simulator's "non-PIM" figures
    (hbm-pim.md: GEMV 4096x4096 non-PIM 36,082 cycles vs 40.5 us here at 0.81
    utilisation).  Only the hbm3 variant can reproduce AttAcc's
    12.4 us 4096x4096 GEMV: on HBM2e the bandwidth floor alone is
    33.57 MB / 2.039 TB/s = 16.5 us (20.3 us at 0.81 utilisation).
    memory=<number>: any bandwidth in bytes/s -- the GPU on a PIM system's own
    memory (`gpu_on`), the fair pairing the presets use.

    model: "roofline" (default; bandwidth 0.81 (DCC), FLOP/s 0.8 (AttAcc),
    36 ns launch, calibrated below), "dcc" (DCC's: 0.81, 1.0, no launch),
    "attacc" (AttAcc's A100a system model: 0.85, 0.8, no launch, its tiling and
    SM utilisation) or "occupancy" (0.81, 0.8, a 1 us launch and SM occupancy);
    `pimjax/hw/gpu.py` has the models.  Staging buffer: shared memory,
    164 KB per SM x 108 SMs = 17,712 KB, the on-chip memory DCC reorganises
    data in before channel-parallel writes.
    """
    bw, label = _memory_bandwidth(memory, {"hbm2e": A100_HBM2E_BANDWIDTH, "hbm3": A100_HBM3_BANDWIDTH,
                                           "hbm-pim": A100_ON_HBM_PIM_BANDWIDTH}, "a100")
    return gpu_host(f"A100-80GB ({label})", A100_PEAK_FP16_FLOPS, bw, model_factors(model, "a100"), model,
                A100_SMS, A100_SMEM_PER_SM, A100_L1_PER_SM, A100_L2).replace(simt_flops=A100_FP32_FLOPS)
                                                                          # staging 18,137,088 B


# --------------------------------------------------------------------------
# NVIDIA H100 SXM5 80GB (the GPU real kernel times were measured on: benchmarks/gpu_kernels.py)
# --------------------------------------------------------------------------
H100_PEAK_FP16_FLOPS = 989.4e12     # H100 SXM5 datasheet: 989.4 TFLOP/s FP16 dense tensor (1,979 with sparsity)
H100_HBM3_BANDWIDTH = 3.35e12       # H100 SXM5 datasheet: 3.35 TB/s HBM3 (80 GB)
H100_SMS = 132                      # H100 whitepaper: 132 SMs on the SXM5 part (PyTorch reports 132 on our device)
H100_FP32_FLOPS = 66.9e12           # H100 SXM5 datasheet: 67 TFLOP/s FP32 (CUDA cores)
H100_SMEM_PER_SM = 228 * 1024       # H100 whitepaper / CUDA Programming Guide (cc 9.0): up to 228 KB shared per SM
H100_L1_PER_SM = 256 * 1024         # H100 whitepaper: 256 KB combined L1 / shared memory per SM
H100_L2 = 50 * 1024 * 1024          # H100 whitepaper: 50 MB L2


def h100(memory="hbm3", model: str = "roofline") -> HostModel:
    """NVIDIA H100 SXM5 80GB on `memory` ("hbm3": its own 3.35 TB/s, or a
    bandwidth in bytes/s), timed by the GPU model `model` (as `a100`: the
    models' efficiencies and launch cost are the A100's, `GPU_MODEL_FACTORS`).
    The GPU of the real kernel times in `benchmarks/gpu_kernels.py`; no paper
    evaluates PIM against it, so no preset pairs with it."""
    bw, label = _memory_bandwidth(memory, {"hbm3": H100_HBM3_BANDWIDTH}, "h100")
    return gpu_host(f"H100-SXM5 ({label})", H100_PEAK_FP16_FLOPS, bw, model_factors(model, "h100"), model,
                H100_SMS, H100_SMEM_PER_SM, H100_L1_PER_SM, H100_L2).replace(simt_flops=H100_FP32_FLOPS)


# --------------------------------------------------------------------------
# NVIDIA H200 SXM 141GB: the H100's GH100 die on HBM3e (a second GPU measured: benchmarks/gpu_kernels.py)
# --------------------------------------------------------------------------
H200_PEAK_FP16_FLOPS = H100_PEAK_FP16_FLOPS   # H200 datasheet: FP16 tensor 1,979 TFLOP/s with sparsity, as the H100
H200_HBM3E_BANDWIDTH = 4.8e12                 # H200 datasheet: 4.8 TB/s HBM3e (141 GB)
H200_SMS = H100_SMS                           # the same SXM5 part of GH100 (PyTorch reports 132 on our device)
H200_L2 = H100_L2                             # 50 MB as the H100's (NVIDIA H200 product brief lists no other);
                                              #   PyTorch reports 60 MB on our device: rotation uses that


def h200(memory="hbm3e", model: str = "roofline") -> HostModel:
    """NVIDIA H200 SXM 141GB on `memory` ("hbm3e": its own 4.8 TB/s, or a
    bandwidth in bytes/s), timed by the GPU model `model` (as `h100`: the
    same die and SM count, 1.43x the memory bandwidth).  The second GPU of
    the real kernel times in `benchmarks/gpu_kernels.py`; no paper pairs a
    PIM system with it."""
    bw, label = _memory_bandwidth(memory, {"hbm3e": H200_HBM3E_BANDWIDTH}, "h200")
    return gpu_host(f"H200-SXM ({label})", H200_PEAK_FP16_FLOPS, bw, model_factors(model, "h200"), model,
                H200_SMS, H100_SMEM_PER_SM, H100_L1_PER_SM, H200_L2).replace(simt_flops=H100_FP32_FLOPS)


# --------------------------------------------------------------------------
# dual-socket Intel Xeon Gold 5220R (ATiM's UPMEM host)
# --------------------------------------------------------------------------
XEON_SOCKETS = 2                    # ATiM §6: "dual-socket Intel Xeon Gold 5220R"
XEON_CORES_PER_SOCKET = 24          # Intel ark, Xeon Gold 5220R: 24 cores
XEON_BASE_GHZ = 2.2                 # Intel ark, Xeon Gold 5220R: 2.2 GHz base
XEON_FLOP_PER_CYCLE = 32            # assumption: one 512-bit FMA issued per cycle per core
                                    #   = 16 FP32 lanes x 2 FLOP (a second FMA port and turbo ignored;
                                    #   AVX-512 licence clocks are below base, so this is an upper bound)
XEON_MEM_CHANNELS = 6               # Intel ark, Xeon Gold 5220R: 6 DDR4 channels per socket
XEON_MT_PER_S = 2400e6              # assumption: DDR4-2400, the speed of the UPMEM DIMMs sharing the
                                    #   channels (ATiM artifact: "20 DDR4-2400 PIM modules"); ark allows 2666
XEON_BW_EFFICIENCY = 0.7            # assumption: typical STREAM-triad fraction of DDR4 peak on Cascade Lake
XEON_FLOPS_EFFICIENCY = 0.5         # assumption: host merge / reduction code is partly scalar
XEON_LAUNCH_NS = 2000.0             # assumption: OpenMP parallel-region fork/join on 48 cores, ~2 us


def xeon_gold_5220r() -> HostModel:
    """Dual-socket Xeon Gold 5220R roofline (the UPMEM host in ATiM §6).

    Peak 2 x 24 cores x 2.2 GHz x 32 FLOP/cycle = 3.379 TFLOP/s (FP32 / int32 SIMD);
    memory 2 sockets x 6 channels x 2400 MT/s x 8 B = 230.4 GB/s.  Efficiencies
    0.7 (bandwidth) and 0.5 (FLOP/s) are assumptions.  Staging buffer 0: a CPU
    has no software-controlled on-chip memory, so DCC-style rearrangement falls
    back to the backend's copy interface (UPMEM's dpu_push_xfer).
    """
    return HostModel(
        name="2x Xeon Gold 5220R",
        peak_flops=XEON_SOCKETS * XEON_CORES_PER_SOCKET * XEON_BASE_GHZ * 1e9 * XEON_FLOP_PER_CYCLE,
        mem_bandwidth=XEON_SOCKETS * XEON_MEM_CHANNELS * XEON_MT_PER_S * 8,
        flops_efficiency=XEON_FLOPS_EFFICIENCY,
        bandwidth_efficiency=XEON_BW_EFFICIENCY,
        launch_overhead_ns=XEON_LAUNCH_NS,
        staging_buffer_bytes=0,
    )


# --------------------------------------------------------------------------
# NVIDIA GeForce RTX 2060 (PIMFlow's GPU, simulated in Accel-Sim)
# --------------------------------------------------------------------------
RTX2060_SMS = 30                    # Turing TU106 in RTX 2060: 30 SMs (1920 CUDA cores)
RTX2060_TENSOR_CORES = 240          # RTX 2060: 240 tensor cores (8 per SM)
RTX2060_BOOST_GHZ = 1.68            # RTX 2060 reference boost clock 1680 MHz
RTX2060_FP16_FMA_PER_TC = 64        # Turing whitepaper: 64 FP16 FMA per tensor core per clock
RTX2060_BANDWIDTH = 336e9           # RTX 2060: 192-bit GDDR6 at 14 Gbps = 336 GB/s
RTX2060_SMEM_PER_SM = 64 * 1024     # Turing: at most 64 KB of the 96 KB L1/shared per SM as shared memory
RTX2060_BW_EFFICIENCY = 0.81        # assumption: DCC's GPU utilisation factor reused
RTX2060_FLOPS_EFFICIENCY = 0.8      # assumption: AttAcc's compute utilisation factor reused
RTX2060_LAUNCH_NS = A100_LAUNCH_NS  # assumption: same (calibrated, near-zero) fixed cost as the A100 model


def rtx2060(memory="gddr6", model: str = "roofline") -> HostModel:
    """NVIDIA GeForce RTX 2060 roofline (PIMFlow §5: Accel-Sim on an RTX 2060).

    Peak 240 tensor cores x 64 FMA x 2 FLOP x 1.68 GHz = 51.6 TFLOP/s FP16 with FP16
    accumulate (GeForce Turing runs FP32-accumulate at half rate, 25.8 TFLOP/s;
    CUDA-core FP32 is 6.45 TFLOP/s).  This roofline host keeps the FP16-accumulate peak: it
    is the Newton presets' host (the default configurations' reports, `report_hash`, stand
    on it); the measured-checked card (`hw.gpus.gpu("rtx2060")`, "library") times FP16
    products at the FP32-accumulate 25.8, the compute type PyTorch / cuDNN use.  Memory
    336 GB/s: the whole card; note that in PIMFlow's 32-channel memory only the 16
    non-PIM channels serve the GPU while PIM is enabled.  Staging buffer: 64 KB shared memory x 30 SMs = 1,920 KB.
    memory: "gddr6" (the card's 336 GB/s) or a bandwidth in bytes/s (`gpu_on`).
    model: a GPU model of `pimjax/hw/gpu.py` ("attacc" needs cache sizes the
    AttAcc simulator gives for A100 / H100 only, so it is refused here).
    """
    bw, label = _memory_bandwidth(memory, {"gddr6": RTX2060_BANDWIDTH}, "rtx2060")
    if model == "attacc":
        raise ValueError("rtx2060(model='attacc'): AttAcc's system model describes the A100a / H100 only")
    if model == "pimflow":
        raise ValueError("rtx2060(model='pimflow'): PIMFlow's GPU is configured by channel count, not a bandwidth: "
                         "use pimflow_rtx2060(channels)")
    factors = ((RTX2060_BW_EFFICIENCY, RTX2060_FLOPS_EFFICIENCY, RTX2060_LAUNCH_NS)
               if model == "roofline" else model_factors(model, "rtx2060"))
    return gpu_host("RTX 2060" if memory == "gddr6" else f"RTX 2060 ({label})",
                RTX2060_TENSOR_CORES * RTX2060_FP16_FMA_PER_TC * 2 * RTX2060_BOOST_GHZ * 1e9, bw, factors, model,
                RTX2060_SMS, RTX2060_SMEM_PER_SM)


# --------------------------------------------------------------------------
# PIMFlow's simulated RTX 2060: Accel-Sim with the artifact's SM75_RTX2060 configuration
# --------------------------------------------------------------------------
# Sources (read for their numbers, nothing copied):
#   gpgpusim.config = yongwonshin/PIMFlow_gpgpu-sim_distribution, branch 2023cgo-artifact,
#                     configs/tested-cfgs/SM75_RTX2060/gpgpusim.config
#   trace.config    = yongwonshin/PIMFlow_accel-sim-framework, branch 2023cgo-artifact,
#                     gpu-simulator/configs/tested-cfgs/SM75_RTX2060/trace.config
#   opcodes         = the same fork, gpu-simulator/ISA_Def/turing_opcode.h
#   channels        = yongwonshin/PIMFlow layerwise/sim.sh and pipeline/sim.sh ("-gpgpu_n_mem 32" for the
#                     GPU-only baseline, "-gpgpu_n_mem $((32-$N_CHANNEL))" beside N PIM channels) and the
#                     TVM fork's src/runtime/graph_executor/graph_executor.cc (chan = 32 for the "-org" run)
PIMFLOW_CORE_HZ = 1365e6            # gpgpusim.config -gpgpu_clock_domains 1365:1365:1365:3500.5 (core:icnt:L2:DRAM MHz)
PIMFLOW_DRAM_HZ = 3500.5e6          #   the same key, DRAM command clock
PIMFLOW_DRAM_BUS_BYTES = 2          # gpgpusim.config -gpgpu_dram_buswidth 2 (bytes per channel per beat)
PIMFLOW_DRAM_BEATS = 4              # gpgpusim.config -dram_data_command_freq_ratio 4 (GDDR6: 4 data beats per
                                    #   command clock)
PIMFLOW_CHANNEL_BANDWIDTH = PIMFLOW_DRAM_BUS_BYTES * PIMFLOW_DRAM_BEATS * PIMFLOW_DRAM_HZ   # 28.0 GB/s per channel
                                    #   (x 12 channels of the config's own -gpgpu_n_mem 12 = 336 GB/s, the real card's)
PIMFLOW_CHANNELS = 32               # PIMFlow §5 / sim.sh: -gpgpu_n_mem 32 for the GPU-only baseline
PIMFLOW_SMS = 30                    # gpgpusim.config -gpgpu_n_clusters 30, -gpgpu_n_cores_per_cluster 1
PIMFLOW_TENSOR_UNITS = 4            # trace.config -specialized_unit_3 1,4,16,4,4,TENSOR (4 units per SM); HMMA
                                    #   is SPECIALIZED_UNIT_3_OP (opcodes)
PIMFLOW_TENSOR_INIT_CYCLES = 16     # trace.config -trace_opcode_latency_initiation_spec_op_3 16,16 (a unit takes one
                                    #   HMMA per 16 cycles)
PIMFLOW_HMMA_MACS = 16 * 8 * 8      # Turing HMMA.1688 (cuDNN's "s1688" kernels): an m16n8k8 product, 1024 MACs per warp
PIMFLOW_SP_UNITS = 4                # gpgpusim.config -gpgpu_num_sp_units 4; FFMA / HFMA2 are SP_OP (opcodes)
PIMFLOW_SP_INIT_CYCLES = 2          # trace.config -trace_opcode_latency_initiation_sp 2,2 (a warp instruction per 2
                                    #   cycles)
PIMFLOW_WARP = 32                   # gpgpusim.config -gpgpu_shader_core_pipeline 1024:32 (warp size 32)
PIMFLOW_LAUNCH_CYCLES = 5000        # gpgpusim.config -gpgpu_kernel_launch_latency 5000 (core cycles before a kernel's
                                    #   first block; PIMFlow's --accel_sim_kernel_launch_latency default is 5010, but its
                                    #   sim.sh never passes it: the config file's 5000 is what Accel-Sim reads)
PIMFLOW_L2_PER_CHANNEL = 2 * 64 * 128 * 16   # -gpgpu_n_sub_partition_per_mchannel 2 x -gpgpu_cache:dl2 S:64:128:16
                                    #   (64 sets x 128 B lines x 16 ways = 128 KB per sub-partition): 256 KB per channel
PIMFLOW_L2_BYTES_PER_CYCLE = 2 * 32  # per channel: 2 sub-partitions, each one 32 B sector per L2 cycle (dl2 "S":
                                    #   sectored; the Accel-Sim tuner's hw_def/turing_RTX2060_hw_def.h: 2 L2 banks per
                                    #   channel, L2_BANK_WIDTH_in_BYTE 32)
PIMFLOW_MEM_LATENCY_CYCLES = 32 + 194 + 96   # gpgpusim.config -gpgpu_l1_latency 32 + -gpgpu_l2_rop_latency 194 +
                                    #   -dram_latency 96: a load's fixed path to DRAM and back, core cycles (the DRAM
                                    #   timing and the crossbar add a few more, not counted)
PIMFLOW_L1_MSHR_LINES = 256        # gpgpusim.config -gpgpu_cache:dl1 S:4:128:64,L:T:m:L:L,A:256:32,16:0,32: 256 MSHR
                                    #   entries (one per 128 B line, up to 32 merged requests each) per SM's L1D
PIMFLOW_L1_LINE = 128               #   ... S:4:128:...: 128 B lines
PIMFLOW_L1_PER_SM = 96 * 1024       # gpgpusim.config -gpgpu_unified_l1d_size 96 (KB, L1 + shared memory)
PIMFLOW_SMEM_PER_SM = 64 * 1024     # gpgpusim.config -gpgpu_shmem_size 65536


def pimflow_rtx2060(channels: int = PIMFLOW_CHANNELS) -> HostModel:
    """PIMFlow's GPU: the RTX 2060 its artifact simulates in Accel-Sim (configuration
    SM75_RTX2060 of its forks, constants and keys above), on `channels` GDDR6
    channels (32: the GPU-only baseline; 16: beside 16 PIM channels), timed by the
    "pimflow" model (`hw.gpu`: a kernel launch per kernel, cuDNN's tensor-core tiles on
    the configured SMs, each product followed by TVM's epilogue kernel).

    Derived: tensor peak 30 SMs x 4 units x 1024 MAC / 16 cycles x 2 x 1.365 GHz =
    20.97 TFLOP/s; CUDA cores 30 x 4 x 32 / 2 x 2 x 1.365 GHz = 5.24 TFLOP/s; memory
    channels x 2 B x 4 x 3500.5 MHz = channels x 28.0 GB/s (896.1 GB/s on 32); L2
    channels x 256 KB (8 MB on 32), channels x 64 B x 1.365 GHz; launch 5000 cycles =
    3663 ns; a DRAM round trip 322 cycles = 236 ns.  Efficiencies 1.0 (assumption: the
    simulator's configured rates; its DRAM scheduler and bank conflicts lose some).

    >>> round(pimflow_rtx2060().mem_bandwidth / 1e9, 1), round(pimflow_rtx2060().launch_overhead_ns)
    (896.1, 3663)
    """
    if not isinstance(channels, (int, np.integer)) or isinstance(channels, bool) or channels < 1:
        raise ValueError(f"pimflow_rtx2060(channels={channels!r}): a positive int (GDDR6 channels the GPU reads)")
    channels = int(channels)
    clock = PIMFLOW_CORE_HZ
    tensor = PIMFLOW_SMS * PIMFLOW_TENSOR_UNITS * PIMFLOW_HMMA_MACS / PIMFLOW_TENSOR_INIT_CYCLES * 2 * clock
    simt = PIMFLOW_SMS * PIMFLOW_SP_UNITS * PIMFLOW_WARP / PIMFLOW_SP_INIT_CYCLES * 2 * clock
    host = gpu_host(f"RTX 2060 (PIMFlow Accel-Sim, {channels} ch)", tensor, channels * PIMFLOW_CHANNEL_BANDWIDTH,
                (1.0, 1.0, PIMFLOW_LAUNCH_CYCLES / clock * 1e9), "roofline", PIMFLOW_SMS, PIMFLOW_SMEM_PER_SM,
                PIMFLOW_L1_PER_SM, channels * PIMFLOW_L2_PER_CHANNEL)
    return host.replace(model="pimflow", simt_flops=simt,
                        l2_bandwidth=channels * PIMFLOW_L2_BYTES_PER_CYCLE * clock,
                        mem_latency_ns=PIMFLOW_MEM_LATENCY_CYCLES / clock * 1e9,
                        sm_inflight_bytes=float(PIMFLOW_L1_MSHR_LINES * PIMFLOW_L1_LINE))


def gpu_on(gpu, bandwidth_GBps: float, model: str = "occupancy") -> HostModel:
    """The GPU `gpu` ("a100" / "rtx2060" or a builder) on a memory of
    `bandwidth_GBps` GB/s, timed by `model`: the fair partner of a PIM system
    whose external bandwidth is `bandwidth_GBps` (PIM and GPU read the same
    memory).  `pimjax.hw.presets` pairs every DRAM preset this way.

    >>> gpu_on("a100", 665.6).mem_bandwidth      # one AttAcc HBM3 stack
    665600000000.0
    """
    build = HOSTS[gpu] if isinstance(gpu, str) else gpu
    return build(memory=float(bandwidth_GBps) * 1e9, model=model)


HOSTS = {"a100": a100, "h100": h100, "h200": h200, "xeon_gold_5220r": xeon_gold_5220r, "rtx2060": rtx2060}


# --------------------------------------------------------------------------
# each paper's GPU, by name
# --------------------------------------------------------------------------
PAPER_GPUS = {
    # PIMFlow (CGO'23) §5: Accel-Sim's RTX 2060 on the 32-channel GDDR6 memory, GPU alone
    "pimflow": lambda: pimflow_rtx2060(PIMFLOW_CHANNELS),
    # DCC §V / dcc.md: an A100 on 5 HBM3 cubes, "312 TFLOP/s FP16 and 3352 GB/s x 0.81 utilisation"
    "dcc": lambda: a100("hbm3", model="dcc"),
    # AttAcc: the simulator's A100a (src/config.py: 3352 GB/s, 108 SMs, 40 MB L2) on its system model
    "attacc": lambda: a100("hbm3", model="attacc"),
}
"""The GPU each paper compares PIM with, as that paper evaluates it (`paper_gpu`)."""


def paper_gpu(name: str) -> HostModel:
    """The GPU the paper `name` compares PIM with, as it evaluates it: "pimflow"
    (`pimflow_rtx2060()`: the Accel-Sim RTX 2060 on 32 channels), "dcc"
    (`a100("hbm3", model="dcc")`) or "attacc" (`a100("hbm3", model="attacc")`).
    The presets pair the same models with the GPU on their own PIM memory
    (`gpu=` option); this is the paper's own machine, e.g. for its tables.

    >>> paper_gpu("dcc").model, paper_gpu("pimflow").sms
    ('dcc', 30)
    """
    if name not in PAPER_GPUS:
        raise ValueError(f"paper_gpu({name!r}): valid papers are {sorted(PAPER_GPUS)}")
    return PAPER_GPUS[name]()
