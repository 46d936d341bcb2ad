"""A user-defined backend, built outside the package: an LPDDR5X-PIM after
AMD's PIMnast / GeniePIM, on the SIMD (HBM-PIM) family.

    .venv/bin/python experiments/lpddr5x_pim.py        # a GEMV through pim_jit, its report

Nothing here is registered with pimjax: `lpddr5x_pim()` builds a `Backend`
from the public hardware classes and names the family ("hbm-pim") whose
lowering, value interpreter, baseline and cost model program it.  Every
stage (`pim_jit`, `drafts`, `lower`, `execute`, `cycles`, `sweep`) then
works on it with the constants read from this Backend.

The system (GeniePIM's `Inputs/Configs/config.in`, AMD GeniePIM on GitHub):
1 device x 8 channels x 16 banks, 2 KB rows, a 256-bit SIMD unit per bank
(BANKS_PER_PIM_UNIT 1), 8 input and 4 output registers per unit, and the
DRAM timing `LPDDR5X/21/18/4.266667/42/18.13333333/12.00` (tRP, tRCDRD,
tCCD_L, tRAS, tRTW, tWTR in ns).  Those ns are LPDDR5-6400 cycles at
tCK = 1.25 ns: rounded up to whole cycles they are Ramulator 2's
`LPDDR5_6400` preset (nRPab 17, nRCD 15, nCCD 4, nRAS 34, nWTRL 10), which
supplies the parameters GeniePIM does not state (marked below).
"""
from __future__ import annotations

import math
import sys

from pimjax.hw import get_backend
from pimjax.hw.core import Backend, Core, Group, HostModel, System, Timing
from pimjax.hw.peaks import bus_bandwidth

TCK_NS = 1.25          # LPDDR5-6400: 800 MHz command clock (Ramulator 2 LPDDR5_6400 tCK_ps 1250)


def cycles_of(ns: float) -> float:
    """A DRAM constraint in ns as whole command-clock cycles (rounded up, as a
    memory controller programs it)."""
    return float(math.ceil(ns / TCK_NS - 1e-9))


def lpddr5x_timing() -> Timing:
    """LPDDR5X-PIM timing in command-clock cycles (tCK 1.25 ns)."""
    tCL, tWL, tBL = 20.0, 11.0, 4.0      # Ramulator 2 LPDDR5_6400: nCL 20, nCWL 11, nBL 4 (BL16, 32 B)
    tRTW = cycles_of(18.13333333)        # GeniePIM tRTW 18.13 ns -> 15
    return Timing(
        tCK=TCK_NS,
        tCL=tCL, tWL=tWL, tBL=tBL,
        tRCDRD=cycles_of(18.0),          # GeniePIM tRCD 18 ns -> 15
        tRCDWR=cycles_of(18.0),          # assumption: GeniePIM gives one tRCD
        tRP=cycles_of(21.0),             # GeniePIM tRP 21 ns -> 17
        tRAS=cycles_of(42.0),            # GeniePIM tRAS 42 ns -> 34
        tRC=30.0,                        # Ramulator 2 LPDDR5_6400 nRC 30 (< tRAS + tRP: the engines use both)
        tCCD_S=4.0,                      # Ramulator 2 LPDDR5_6400 nCCD 4 (one value for both)
        tCCD_L=cycles_of(4.266667),      # GeniePIM tCCD_L 4.27 ns -> 4
        tCCD_AB=cycles_of(4.266667),     # all-bank PIM commands timed as same-bank-group columns (as hbm-pim)
        tRRD_S=4.0, tRRD_L=4.0,          # Ramulator 2 LPDDR5_6400 nRRD 4
        tFAW=16.0,                       # Ramulator 2 LPDDR5_6400 nFAW 16
        tWR=28.0,                        # Ramulator 2 LPDDR5_6400 nWR 28
        tRTP_S=4.0, tRTP_L=4.0,          # Ramulator 2 LPDDR5_6400 nRTP 4
        tWTR_S=5.0,                      # Ramulator 2 LPDDR5_6400 nWTRS 5
        tWTR_L=cycles_of(12.0),          # GeniePIM tWTR 12 ns -> 10
        # read -> write turnaround tCL + tBL + tRTRS - tWL = GeniePIM's tRTW
        tRTRS=tRTW - (tCL + tBL - tWL),
        tREFI=cycles_of(3900.0),         # assumption: JEDEC all-bank refresh every 3.9 us
        tRFC=cycles_of(280.0),           # assumption: JEDEC LPDDR5 16 Gb tRFCab 280 ns
    )


def lpddr5x_pim(channels: int = 8) -> Backend:
    """The LPDDR5X-PIM backend (see the module docstring): `channels`
    channels of 16 banks, a 16-lane fp16 unit per bank, on the hbm-pim
    family.  The host is GeniePIM's IPU: 120 GB/s, 16.6 TFLOP/s at 16 bit."""
    base = get_backend("hbm-pim", channels=min(channels, 16))
    core = Core(
        banks_per_core=1,                 # GeniePIM BANKS_PER_PIM_UNIT_LIST=1
        lanes=16,                         # GeniePIM SIMD_WIDTH_LIST=256 (16 x fp16)
        dtype="float16",
        n_input_regs=8,                   # GeniePIM IRF_REGISTERS_PER_PIM_ALU_LIST=8
        n_output_regs=4,                  # GeniePIM ORF_REGISTERS_PER_PIM_ALU_LIST=4
        reg_bytes=32,                     # GeniePIM PIM_IRF_REGISTER_SIZE_LIST=256 bits
        ops=base.core.ops,                # the SIMD family's ISA
        rows=1 << 16,                     # Ramulator 2 LPDDR5X_16Gb_x16: 65 536 rows per bank
        pim_rows=1 << 15,                 # the family keeps half the rows for its register frames
        cols=64,                          # GeniePIM DRAM_ROW_SIZE_LIST=2048: 64 columns of 32 B
        col_bytes=32,                     # x16 channel, BL16: 32 B per column access
        instruction_bytes=base.core.instruction_bytes,
    )
    group = Group(cores_per_group=16, units=(), broadcast=True, per_core_commands=False,
                  bank_groups=4, banks_per_bank_group=4)      # LPDDR5X BG mode: 4 bank groups x 4 banks
    timing = lpddr5x_timing()
    host = HostModel(name="GeniePIM IPU", peak_flops=16.588e12, mem_bandwidth=120e9,   # config.in host
                     flops_efficiency=1.0, bandwidth_efficiency=1.0, launch_overhead_ns=0.0)
    system = System(host=host, n_devices=1, groups_per_device=channels,
                    link_bandwidth=bus_bandwidth(core.col_bytes, group.data_buses, timing))   # bytes / ns
    return Backend(name="lpddr5x-pim", variant="geniepim", family="hbm-pim", system=system, group=group,
                   core=core, timing=timing, energy=base.energy,
                   notes=("energy: the hbm-pim preset's per-command figures (assumption)",))


def main(argv=None) -> int:
    import numpy as np

    import pimjax
    be = lpddr5x_pim()
    rng = np.random.default_rng(0)
    W = rng.standard_normal((4096, 1024)).astype(np.float16)
    x = rng.standard_normal(1024).astype(np.float16)
    f = pimjax.pim_jit(lambda W, x: W @ x, backend=be, resident=("W",), placement="prefer_pim")
    compiled = f.lower(W, x).compile()
    y = compiled(W, x)
    want = W.astype(np.float32) @ x.astype(np.float32)
    print(be)
    print(compiled.report())
    print(f"max |PIM - float32| / max |y|: {float(np.max(np.abs(np.asarray(y, np.float32) - want))) / float(np.max(np.abs(want))):.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
