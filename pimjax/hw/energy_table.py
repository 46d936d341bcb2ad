"""AttAcc's energy table: the one owner of its per-bit DRAM figures and its GPU's per-level energies.

scale-snu/attacc_simulator `src/config.py` (commit c600051), ENERGY_TABLE, citing FGDRAM (O'Connor et
al., MICRO 2017) for the DRAM path.  `presets._dram_energy` builds the PIM presets' per-command
energies from the per-bit figures; `host._gpu` builds the GPUs' `HostModel` energy fields from the
same path plus the GPU's on-chip levels (devices.py `_get_energy` charges mem / l2 / l1 per byte of
each level's traffic, 'reg' per register access -- its reg traffic is m n k per operand, not
multiplied by the element size -- and 'alu' per MAC, get_flops() / 2).
"""
# DRAM path, pJ per bit
E_ACT_PRE_PJ_PER_BIT = 0.11   # cell activation + precharge, per bit of an (assumed fully read) row
E_CELL_RDWR_PJ_PER_BIT = 0.44 # cell read/write, per bit moved out of / into the sense amplifiers
E_COL_TO_BGMUX = 1.01         # column decoder -> bank-group mux
E_BGMUX_TO_GIO = 1.23         # bank-group mux -> global I/O mux
E_TSV = 0.5                   # through-silicon via
E_INTERPOSER = 0.3            # silicon-interposer I/O
E_ALU_PJ_PER_MAC = 0.32       # ENERGY_TABLE 'alu', pJ per MAC (FLOP/2)

# the GPU's levels
E_L2_PJ_PER_BIT = 0.3         # 'l2'
E_L1_PJ_PER_BIT = 0.16        # 'l1' ("4-way cache, ref: arxiv 1509.02308")
E_REG_PJ = 0.0675             # 'reg', per access
