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
