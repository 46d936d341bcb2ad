"""HBM3 organisation, commands and the timing-constraint table of DCC's Ramulator2 forks, as data.

Source: ``A/src/dram/impl/HBM3-PIM.cpp`` (organisation preset ``HBM3_8Gb_2R`` with 16 channels, l.21;
timing preset ``HBM3_5.2Gbps``, l.35; ``populate_timingcons``, AttAcc fork l.363-501, HBM-PIM fork l.422 ff.,
which adds ``DUMMY`` to the data-movement group and serialises the custom ops) and
``A/src/addr_mapper/impl/hbm3_pim_linear_mappers.cpp`` (transaction offset, l.37).

DCC = SPIN-Research-Group/DCC @ 7ffb80e4f33e357177dc8ab148953c0484e1e322; ``A/`` = ``src/Ramulator2/AttAcc/``,
``H/`` = ``src/Ramulator2/HBMPIM/``.  Units: cycles are DRAM command-clock cycles of tCK = 0.769 ns
(HBM3 at 5.2 Gbps, ``A/src/dram/impl/HBM3-PIM.cpp`` l.304); addresses are bytes.

``TIMING_TABLE[fork]`` is a list of ``(level, preceding commands, following commands, latency [cycles],
window)``: after a preceding command is issued at a node of ``level``, a following command on the same node
may not issue before ``latency`` cycles have passed since the ``window``-th most recent preceding command
(window 1 = the last one; 4 = tFAW).  Every number is from the fork's source; none is fitted.
"""

# ----------------------------------------------------------------------------------------------
# Organisation (HBM3_8Gb_2R preset, channel=16; HBM3-PIM.cpp l.21) and timing (HBM3_5.2Gbps, l.35)
# ----------------------------------------------------------------------------------------------
N_CH, N_PCH, N_RANK, N_BG, N_BA, N_ROW_BITS, N_COL_BITS = 16, 2, 2, 4, 4, 14, 5
TX_OFFSET = 5            # log2(internal prefetch 8 * channel_width 32 / 8)  (hbm3_pim_linear_mappers.cpp l.37)

T = dict(nBL=2, nCL=19, nRCDRD=19, nRCDWR=19, nRP=19, nRAS=45, nRC=63, nWR=21, nRTPS=6, nRTPL=8,
         nCWL=6, nCCDS=2, nCCDL=4, nCCDAB=6, nCCDSB=6, nRRDS=2, nRRDL=4, nWTRS=8, nWTRL=11, nRTW=3,
         nFAW=39, nRFCSB=260, nREFI=5070, nRREFD=11)
TCK_PS = int(1e6 / (5200 / 4))                        # 769 ps  (HBM3-PIM.cpp l.304)
T["nRFC"] = (((350 * 1000) * 1000 // TCK_PS) + 974) // 1000   # 8Gb: 350 ns -> 456 (l.309-334, utils.cpp JEDEC_rounding)
READ_LATENCY = T["nCL"] + T["nBL"]

LV_CH, LV_PCH, LV_RANK, LV_BG, LV_BANK, LV_ROW, LV_COL = range(7)

CMDS = ["ACT", "PRE", "PREA", "PRESB", "PREPB", "RD", "WR", "REFab", "REFsb",
        "ACTAB", "ACTSB", "ACTPB", "MACAB", "MACSB", "MACPB", "WRGB", "MVSB", "MVGB", "SFM",
        "SETM", "SETH", "BARRIER", "DUMMY",
        "LD_OP1", "LD_OP2", "LD_OP3", "MUL_OP1", "MUL_OP2", "MUL_OP3", "ADD_OP1", "ADD_OP2", "ADD_OP3",
        "MAC_OP1", "MAC_OP2", "MAC_OP3", "WB_ACC", "WB_RES", "ACC_RESET", "RELU"]
C = {n: i for i, n in enumerate(CMDS)}
NC = len(CMDS)
CUSTOM_OPS = ["LD_OP1", "LD_OP2", "LD_OP3", "ADD_OP1", "ADD_OP2", "ADD_OP3",
              "MUL_OP1", "MUL_OP2", "MUL_OP3", "MAC_OP1", "MAC_OP2", "MAC_OP3"]

SCOPE = {"ACT": LV_ROW, "PRE": LV_BANK, "PREA": LV_CH, "PRESB": LV_BANK, "PREPB": LV_BANK,
         "RD": LV_COL, "WR": LV_COL, "REFab": LV_CH, "REFsb": LV_BANK,
         "ACTAB": LV_ROW, "ACTSB": LV_ROW, "ACTPB": LV_ROW, "MACAB": LV_COL, "MACSB": LV_COL, "MACPB": LV_COL,
         "WRGB": LV_BANK, "MVSB": LV_BANK, "MVGB": LV_BANK, "SFM": LV_CH, "SETM": LV_BANK, "SETH": LV_CH,
         "DUMMY": LV_CH, "ACC_RESET": LV_COL, "RELU": LV_COL, "WB_ACC": LV_COL, "WB_RES": LV_COL}
for _o in CUSTOM_OPS:
    SCOPE[_o] = LV_COL
SCOPE_L = [SCOPE.get(n, -1) for n in CMDS]
OPENING = {C[n] for n in ("ACT", "ACTAB", "ACTSB", "ACTPB")}
CLOSING = {C[n] for n in ("PRE", "PREA", "PRESB", "PREPB")}
ROW_TYPE = {C[n] for n in ("ACT", "PRE", "PREA", "REFab", "REFsb", "ACTAB", "ACTSB", "ACTPB")}
NO_TYPE = {C["BARRIER"]}            # get_command_type() == -1


def timing_table(fork):
    """Timing constraints of ``fork`` (``"attacc"`` or ``"hbmpim"``), latencies in cycles.

    The populate_timingcons() list of HBM3-PIM.cpp (AttAcc fork l.363-501; HBM-PIM fork adds DUMMY and
    the custom-op serialisation).  Entries: (level, preceding, following, latency, window)."""
    V = T
    dm = ["WRGB", "MVSB", "MVGB", "SFM", "RD", "WR"] + (["DUMMY"] if fork == "hbmpim" else [])
    t = [
        # PIM MAC all-bank
        (LV_CH, ["ACTAB"], ["ACTAB", "ACT", "PRE", "PREA", "REFab", "REFsb"], 2, 1),
        (LV_CH, ["MACAB"], ["MACAB"], V["nCCDAB"], 1),
        (LV_CH, ["ACTAB"], ["ACTAB"], V["nRC"], 1),
        (LV_CH, ["ACTAB"], ["MACAB"], V["nRCDRD"], 1),
        (LV_CH, ["ACTAB"], ["PREA"], V["nRAS"], 1),
        (LV_CH, ["MACAB"], ["PREA"], V["nRTPL"], 1),
        (LV_CH, ["PREA"], ["ACTAB"], V["nRP"], 1),
        (LV_PCH, ["ACTAB"], ["REFab"], V["nRC"], 1),
        (LV_PCH, ["PREA"], ["REFab"], V["nRP"], 1),
        (LV_PCH, ["REFab"], ["ACTAB"], V["nRFC"], 1),
        # same-bank
        (LV_CH, ["ACTSB"], ["ACTSB", "ACT", "PRE", "PREA", "PRESB", "REFab", "REFsb"], 2, 1),
        (LV_CH, ["MACSB"], ["MACSB"], V["nCCDSB"], 1),
        (LV_BANK, ["ACTSB"], ["ACTSB"], V["nRC"], 1),
        (LV_BANK, ["ACTSB"], ["MACSB"], V["nRCDRD"], 1),
        (LV_BANK, ["ACTSB"], ["PRESB"], V["nRAS"], 1),
        (LV_BANK, ["MACSB"], ["PRESB"], V["nRTPL"], 1),
        (LV_BANK, ["PRESB"], ["ACTSB"], V["nRP"], 1),
        (LV_PCH, ["ACTSB"], ["REFab"], V["nRC"], 1),
        (LV_PCH, ["PRESB"], ["REFab"], V["nRP"], 1),
        (LV_PCH, ["REFab"], ["ACTSB"], V["nRFC"], 1),
        # per-bank
        (LV_CH, ["ACTPB"], ["ACTPB", "ACT", "PRE", "PREA", "PREPB", "REFab", "REFsb"], 2, 1),
        (LV_CH, ["MACPB"], ["MACPB"], V["nBL"], 1),
        (LV_RANK, ["MACPB"], ["MACPB"], V["nCCDS"], 1),
        (LV_BG, ["MACPB"], ["MACPB"], V["nCCDL"], 1),
        (LV_BANK, ["ACTPB"], ["ACTPB"], V["nRC"], 1),
        (LV_BANK, ["ACTPB"], ["MACPB"], V["nRCDRD"], 1),
        (LV_BANK, ["ACTPB"], ["PREPB"], V["nRAS"], 1),
        (LV_BANK, ["MACPB"], ["PREPB"], V["nRTPL"], 1),
        (LV_BANK, ["PREPB"], ["ACTPB"], V["nRP"], 1),
        (LV_PCH, ["ACTPB"], ["REFab"], V["nRC"], 1),
        (LV_PCH, ["PREPB"], ["REFab"], V["nRP"], 1),
        (LV_PCH, ["REFab"], ["ACTPB"], V["nRFC"], 1),
        # data movement (DQ <-> GEMV unit)
        (LV_PCH, dm, dm, V["nBL"], 1),
        (LV_RANK, dm, dm, V["nCCDS"], 1),
        (LV_BG, dm, dm, V["nCCDL"], 1),
    ]
    if fork == "hbmpim":
        t += [(LV_CH, CUSTOM_OPS, CUSTOM_OPS, V["nBL"], 1),
              (LV_RANK, CUSTOM_OPS, CUSTOM_OPS, V["nCCDS"], 1),
              (LV_BG, CUSTOM_OPS, CUSTOM_OPS, V["nCCDL"], 1)]
    t += [
        (LV_CH, ["ACT"], ["ACT", "PRE", "PREA", "PRESB", "REFab", "REFsb"], 2, 1),
        (LV_PCH, ["RD"], ["RD"], V["nBL"], 1),
        (LV_PCH, ["WR"], ["WR"], V["nBL"], 1),
        (LV_PCH, ["RD"], ["PREA"], V["nRTPS"], 1),
        (LV_PCH, ["WR"], ["PREA"], V["nCWL"] + V["nBL"] + V["nWR"], 1),
        (LV_PCH, ["ACT"], ["PREA"], V["nRAS"], 1),
        (LV_PCH, ["PREA"], ["ACT"], V["nRP"], 1),
        (LV_PCH, ["ACT"], ["REFab"], V["nRC"], 1),
        (LV_PCH, ["PRE", "PREA"], ["REFab"], V["nRP"], 1),
        (LV_PCH, ["REFab"], ["ACT", "REFsb"], V["nRFC"], 1),
        (LV_RANK, ["ACT"], ["ACT"], V["nRRDS"], 1),
        (LV_RANK, ["ACT"], ["ACT"], V["nFAW"], 4),
        (LV_RANK, ["ACT"], ["REFsb"], V["nRRDS"] + 1, 1),
        (LV_RANK, ["REFsb"], ["REFsb"], V["nRREFD"], 1),
        (LV_RANK, ["REFsb"], ["ACT"], V["nRREFD"] - 1, 1),
        (LV_RANK, ["RD"], ["RD"], V["nCCDS"], 1),
        (LV_RANK, ["WR"], ["WR"], V["nCCDS"], 1),
        (LV_RANK, ["RD"], ["WR"], V["nCL"] + V["nBL"] + 2 - V["nCWL"], 1),
        (LV_RANK, ["WR"], ["RD"], V["nCWL"] + V["nBL"] + V["nWTRS"], 1),
        (LV_RANK, ["ACT"], ["ACT"], V["nRRDS"], 1),
        (LV_RANK, ["ACT"], ["ACT"], V["nFAW"], 4),
        (LV_RANK, ["ACT"], ["PREA"], V["nRAS"], 1),
        (LV_RANK, ["PREA"], ["ACT"], V["nRP"], 1),
        (LV_BG, ["RD"], ["RD"], V["nCCDL"], 1),
        (LV_BG, ["WR"], ["WR"], V["nCCDL"], 1),
        (LV_BG, ["WR"], ["RD"], V["nCWL"] + V["nBL"] + V["nWTRL"], 1),
        (LV_BG, ["ACT"], ["ACT"], V["nRRDL"], 1),
        (LV_BG, ["ACT"], ["REFsb"], V["nRRDL"] + 1, 1),
        (LV_BG, ["REFsb"], ["ACT"], V["nRRDL"] - 1, 1),
        (LV_BANK, ["ACT"], ["ACT"], V["nRC"], 1),
        (LV_BANK, ["ACT"], ["RD"], V["nRCDRD"], 1),
        (LV_BANK, ["ACT"], ["WR"], V["nRCDWR"], 1),
        (LV_BANK, ["ACT"], ["PRE"], V["nRAS"], 1),
        (LV_BANK, ["PRE"], ["ACT"], V["nRP"], 1),
        (LV_BANK, ["RD"], ["PRE"], V["nRTPL"], 1),
        (LV_BANK, ["WR"], ["PRE"], V["nCWL"] + V["nBL"] + V["nWR"], 1),
    ]
    return t



FORKS = ("attacc", "hbmpim")
TIMING_TABLE = {fork: timing_table(fork) for fork in FORKS}
