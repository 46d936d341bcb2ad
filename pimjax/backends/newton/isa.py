"""Newton / AiM's commands and their timing classes (`pimjax.sim.timing`)."""
from ...lower.program import Op

# opcode -> the names of its timing-class flags (`pimjax.sim.timing.FLAG_NAMES`)
TIMING_CLASSES = {
    Op.GWRITE: ("column", "write", "data_bus", "buffer"),     # host -> global buffer (kind BUFWR)
    # PIMFlow issues G_ACT as G_ACT0..3, one per bank group, tFAW apart
    Op.G_ACT: ("act_all", "stagger"),
    Op.COMP: ("column", "allbank"),                 # column MAC in all activated banks
    Op.READRES: ("column", "data_bus", "wait"),     # read the result latches (after every COMP)
}
