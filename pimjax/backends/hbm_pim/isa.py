"""HBM-PIM's commands and their timing classes (`pimjax.sim.timing`): the
all-bank modes are timed as commands to bank 0 / 1 of bank group 0."""
from ...lower.program import Op

# opcode -> the names of its timing-class flags (`pimjax.sim.timing.FLAG_NAMES`)
TIMING_CLASSES = {
    # HAB-mode writes (mode changes, CRF program, GRF / SRF writes): timed as a WR to bank 0 / 1
    Op.AB_WR: ("column", "write", "data_bus"),
    Op.PIM_RD: ("column", "allbank"),               # executes the next CRF instruction in every unit
    Op.PIM_WR: ("column", "write", "allbank"),      # stores a GRF into every unit's bank
}

SRF_SLOTS = 16              # one 256-bit SRF: 16 FP16 scalars


class Crf:
    """CRF instruction codes carried in `aux` of PIM_RD / PIM_WR / AB_WR
    records; `reg` is the first register, `reg_step` its increment per
    column, `arg` the SRF slot or host-data row."""
    MAC = 1        # GRF_B[L % ko] += GRF_A[arg + L // ko] * bank  (reg = L0, reg_step = ko)
    FILL = 2       # R[reg + t] = bank
    FILL_RELU = 3  # R[reg + t] = relu(bank)
    ADD = 4        # R[reg + t] += bank
    MUL = 5        # R[reg + t] *= bank
    MAD = 6        # R[reg + t] = bank * SRF[arg] + R[reg + t]
    MULS = 7       # R[reg + t] = bank * SRF[arg]
    MOV_RELU = 8   # R[reg + t] = relu(R[reg + t])   (triggered by a column read)
    SUB = 9        # R[reg + t] -= bank
    RSUB = 10      # R[reg + t] = bank - R[reg + t]
    ADDS = 11      # R[reg + t] = bank + SRF[arg]          (ADD GRF, BANK, SRF)
    SADD = 12      # R[reg + t] += SRF[arg]  (ADD GRF, GRF, SRF; triggered by a column read)
    STORE = 20     # bank = R[reg + t]              (PIM_WR)
    HOST_REG = 30  # R[reg + t] = host_data[src][arg + t]          (AB_WR)
    HOST_SRF = 34  # SRF = the op's scalars (Program.meta["srf"])   (AB_WR)
    PROGRAM = 31   # CRF program write (timing only)
    MODE = 32      # mode change (timing only; HAB->HAB_PIM also zeroes GRF_B)
    ZERO_B = 33    # mode change that zeroes GRF_B
