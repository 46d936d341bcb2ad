"""AttAcc's commands and their timing classes (`pimjax.sim.timing`): its data
movement (WRGB, MVSB, SFM, MVGB, RDACC) runs on a separate datapath and is
ordered by explicit BARRIER records (attacc.md), not by `wait`."""
from ...lower.program import Op

# opcode -> the names of its timing-class flags (`pimjax.sim.timing.FLAG_NAMES`)
TIMING_CLASSES = {
    Op.ACTAB: ("act_all",),
    Op.PREA: ("pre_all",),
    Op.MACAB: ("column", "allbank"),                # all-bank MAC (bank level)
    Op.MACSB: ("column", "allbank"),                # one bank of every bank group (bg level)
    Op.MACPB: ("column", "allbank"),                # buffer-level MAC per pseudo channel
    Op.WRGB: ("write", "data_bus", "side"),         # host writes the GEMV buffers
    Op.MVSB: ("side",),
    Op.SFM: ("side",),
    Op.MVGB: ("side",),
    Op.RDACC: ("data_bus", "side"),
    Op.BARRIER: ("barrier",),
    Op.MACBK: ("column",),                          # one bank's unit: a column read without the data bus
}
