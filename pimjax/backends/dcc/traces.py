"""DCC's trace generators, ported: (backend, kernel, tiling) -> the list of (request, byte address).

Sources: ``src/attacc_trace_gen/gen_trace_AttAcc_GEMV.py`` (mode "kernel"), ``gen_trace_AttAcc_RED.py``,
``gen_trace_AttAcc_ATTN.py`` (both modes; unchecked: the artifact CSV has no ATTN row),
``src/hbmpim_trace_gen/gen_trace_HBMPIM_GEMV.py``, ``gen_trace_HBMPIM_RED.py``, ``gen_trace_HBMPIM_VA.py``
and ``src/generate_configs.py:match_alignment``.  The port emits the same commands, in the same order, at the
same addresses as the originals (checked byte for byte on 68 rows of the artifact CSV).  The address map
is ``A/src/addr_mapper/impl/hbm3_pim_linear_mappers.cpp`` (``HBM3PIMMap::apply``, l.64-74).

DCC = SPIN-Research-Group/DCC @ 7ffb80e4f33e357177dc8ab148953c0484e1e322; ``A/`` = ``src/Ramulator2/AttAcc/``,
``H/`` = ``src/Ramulator2/HBMPIM/``.  Units: cycles are DRAM command-clock cycles of tCK = 0.769 ns
(HBM3 at 5.2 Gbps, ``A/src/dram/impl/HBM3-PIM.cpp`` l.304); addresses are bytes.
"""
import math

from .tiling import match_alignment
from .timing import N_CH, TX_OFFSET

# ----------------------------------------------------------------------------------------------
# Trace generators (ports of DCC's src/*_trace_gen/*.py; same command order and addresses)
# ----------------------------------------------------------------------------------------------
N_MAC, N_GRF, PREFETCH, DATA = 16, 8, 32, 2
GS_COL = PREFETCH
GS_ROW = 32 * GS_COL
GS_BA = (1 << 14) * GS_ROW
GS_BG = 4 * GS_BA
GS_CH = 2 * 2 * 4 * GS_BG



def _barrier():
    return [("PIM_BARRIER", l * GS_CH) for l in range(N_CH)]


def _fit_iterations(tiling, ret_dim: int) -> tuple[int, int, int, int, int]:
    """The generators' split of the first triple's per-core tile into iterations whose matrix, vector
    and result fit one bank's PIM region (GS_BA bytes): (iterations, iteration size, vector, matrix,
    result bytes), the sizes rounded up to PREFETCH.  ret_dim: the triple whose tile sizes the result
    (GEMV: 2, the output; ATTN: 1, d_head).  Where no split fits, the last one tried, and one iteration
    more than the tile's rows (the generators' loop counter as it leaves the loop)."""
    def total_size(num_itr):
        itr = math.ceil(tiling[0][2] / num_itr)
        mat = math.ceil(itr * tiling[1][2] * tiling[2][2] * DATA / PREFETCH) * PREFETCH
        vec = math.ceil(itr * tiling[1][2] * DATA / PREFETCH) * PREFETCH
        ret = math.ceil(itr * tiling[ret_dim][2] * DATA / PREFETCH) * PREFETCH
        return itr, vec, mat, ret
    num_itr = 1
    sizes = total_size(1)
    while num_itr <= tiling[0][2]:
        sizes = total_size(num_itr)
        if sum(sizes[1:]) <= GS_BA:
            break
        num_itr += 1
    return (num_itr,) + sizes


def gen_attacc_gemv(tiling):
    """attacc_trace_gen/gen_trace_AttAcc_GEMV.py, mode "kernel" (gemv_single)."""
    tiling = [list(x) for x in tiling]
    num_itr, tiling[0][2], vs, ms, rs = _fit_iterations(tiling, ret_dim=2)
    Tt = match_alignment(tiling)
    Vec_addr, Mat_addr, Ret_addr = 0, ms, ms + vs     # GEMV(real_tiling, Mat_addr, Key_addr, Ret_addr)
    nB = Tt[0][1] * Tt[1][1] * Tt[2][1]
    nL = Tt[0][0] * Tt[1][0] * Tt[2][0]
    ld = []
    P = math.ceil(Tt[0][2] * Tt[1][2] / N_MAC)
    last = 0
    for pos in range(P):
        for b in range(nB):
            for l in range(nL):
                ld.append(("LD", Vec_addr + l * GS_CH + b * GS_BA + pos * PREFETCH))
        if pos % 16 == 0 or pos + 1 == P:
            for b in range(nB):
                for sp in range(last, pos + 1):
                    for l in range(nL):
                        ld.append(("ST", Vec_addr + l * GS_CH + b * GS_BA + sp * PREFETCH))
            last = pos + 1
    ret = []
    for pos in range(math.ceil(Tt[0][2] * Tt[2][2] / N_MAC)):
        for b in range(nB):
            for l in range(nL):
                ret.append(("ST", Ret_addr + l * GS_CH + b * GS_BA + pos * PREFETCH))
    wrgb = _gb_fills("PIM_WR_GB", Tt, nB, nL, Vec_addr)
    mac = []
    for p2 in range(Tt[2][2]):
        for p1 in range(math.ceil(Tt[1][2] / N_MAC)):
            pos = p1 * Tt[2][2] + p2
            for l in range(nL):
                mac.append(("PIM_MAC_AB", Mat_addr + l * GS_CH + pos * GS_COL))
        if p2 % N_MAC == N_MAC - 1 or p2 == Tt[2][2] - 1:
            for bg in range(math.ceil(nB / 4)):
                for l in range(nL):
                    mac.append(("PIM_MV_SB", Ret_addr + l * GS_CH + bg * GS_BG))
    bar = _barrier()
    out = []
    for _ in range(num_itr):
        out += ld + bar
        for j in range(Tt[0][2]):
            out += wrgb[j] + bar + mac + bar
        out += bar + ret
    return out


def gen_attacc_red(tiling):
    """attacc_trace_gen/gen_trace_AttAcc_RED.py."""
    tiling = [list(x) for x in tiling]
    def total_size(num_itr):
        itr = math.ceil(tiling[0][2] / num_itr)
        v = math.ceil(itr * tiling[1][2] * DATA / PREFETCH) * PREFETCH
        return itr, v, v
    num_itr = 1
    itr_size, vs, rs = total_size(1)
    while num_itr <= tiling[0][2]:
        itr_size, vs, rs = total_size(num_itr)
        if vs + rs <= GS_BA:
            break
        num_itr += 1
    tiling[0][2] = itr_size
    Tt = match_alignment(tiling)
    Vec_addr = PREFETCH
    Ret_addr = Vec_addr + vs
    nB = Tt[0][1] * Tt[1][1]
    nL = Tt[0][0] * Tt[1][0]
    P = math.ceil(Tt[0][2] * Tt[1][2] / N_MAC)
    ld = [("ST", Vec_addr + l * GS_CH + b * GS_BA + p * PREFETCH) for p in range(P) for b in range(nB) for l in range(nL)]
    ret = [("ST", Ret_addr + l * GS_CH + b * GS_BA + p * PREFETCH) for p in range(P) for b in range(nB) for l in range(nL)]
    wrgb = [("PIM_WR_GB", l * GS_CH + b * GS_BA) for b in range(nB) for l in range(nL)]
    mac = [("PIM_MAC_AB", Vec_addr + l * GS_CH + p * GS_COL) for p in range(math.ceil(Tt[1][2] / N_MAC)) for l in range(nL)]
    mvsb = [("PIM_MV_SB", Ret_addr + l * GS_CH + bg * GS_BG) for bg in range(math.ceil(nB / 4)) for l in range(nL)]
    bar = _barrier()
    out = []
    for _ in range(num_itr):
        out += ld + bar + wrgb
        for j in range(Tt[0][2]):
            out += mac + mvsb
        out += bar + ret
    return out


def _even_odd(Tt, nB, nL, modulo):
    ev, od = [], []
    for b in range(nB):
        for l in range(nL):
            if b % modulo == 0:
                ev.append(l * GS_CH + b * GS_BA)
            elif b % modulo == 1:
                od.append(l * GS_CH + b * GS_BA)
    return ev, od


def gen_hbmpim_gemv(tiling):
    """hbmpim_trace_gen/gen_trace_HBMPIM_GEMV.py."""
    tiling = [list(x) for x in tiling]
    num_itr, tiling[0][2], vs, ms, rs = _fit_iterations(tiling, ret_dim=2)
    Tt = match_alignment(tiling)
    Vec_addr, Mat_addr, Ret_addr = 0, ms, ms + vs     # GEMV(real_tiling, Mat_addr, Key_addr, Ret_addr)
    nB = Tt[0][1] * Tt[1][1] * Tt[2][1]
    nL = Tt[0][0] * Tt[1][0] * Tt[2][0]
    bar = _barrier()
    ld = []
    P = math.ceil(Tt[0][2] * Tt[1][2] / N_MAC)
    last = 0
    for pos in range(P):
        for b in range(nB):
            for l in range(nL):
                ld.append(("LD", Vec_addr + l * GS_CH + b * GS_BA + pos * PREFETCH))
        if pos % 16 == 15 or pos + 1 == P:
            ld += bar
            for b in range(nB):
                for sp in range(last, pos + 1):
                    for l in range(nL):
                        ld.append(("ST", Vec_addr + l * GS_CH + b * GS_BA + sp * PREFETCH))
            last = pos + 1
            ld += bar
    ev, od = _even_odd(Tt, nB, nL, 2)
    no = math.ceil(Tt[2][2] / N_MAC)
    ni = math.ceil(Tt[1][2] / N_MAC)

    def half(bases, pis, pos_):
        cm = []
        for ogs in range(0, no, N_GRF):
            oge = int(min(ogs + N_GRF, no))
            for po in range(ogs, oge):
                for bb in bases:
                    cm.append(("PIM_ACC_RESET", bb))
            for igs in range(Tt[1][2]):
                if igs % (N_GRF * N_MAC) != 0:
                    continue
                ige = int(min(igs + N_GRF, ni))
                for pi in range(igs, ige):
                    for bb in bases:
                        cm.append(("PIM_LD_OP1", Vec_addr + bb + (pis + pi) * DATA))
                for po in range(ogs, oge):
                    for pi in range(igs, ige):
                        pm = pos_ + pi * Tt[1][2] + po * N_MAC
                        for k, bb in enumerate(bases):
                            if k % 2 == 0:
                                cm.append(("PIM_MAC_OP1", Mat_addr + bb + pm * DATA))
                for po in range(ogs, oge):
                    for bb in bases:
                        cm.append(("PIM_WB_ACC", Ret_addr + bb + po * PREFETCH))
        return cm
    g = []
    for it in range(Tt[0][2]):
        g += half(ev, it * Tt[1][2], it * (Tt[1][2] * Tt[2][2]))
        g += half(od, it * Tt[1][2], it * (Tt[1][2] * Tt[2][2]))
    g += bar
    ret = [("ST", Ret_addr + l * GS_CH + b * GS_BA + p * PREFETCH)
           for p in range(math.ceil(Tt[0][2] * Tt[2][2] / N_MAC)) for b in range(nB) for l in range(nL)]
    one = ld + g + ret
    return one * num_itr


def gen_hbmpim_red(tiling):
    """hbmpim_trace_gen/gen_trace_HBMPIM_RED.py."""
    tiling = [list(x) for x in tiling]
    def total_size(num_itr):
        itr = math.ceil(tiling[0][2] / num_itr)
        v = math.ceil(itr * tiling[1][2] * DATA / PREFETCH) * PREFETCH
        return itr, v, v
    num_itr = 1
    itr_size, vs, rs = total_size(1)
    while num_itr <= tiling[0][2]:
        itr_size, vs, rs = total_size(num_itr)
        if vs + rs <= GS_BA:
            break
        num_itr += 1
    tiling[0][2] = itr_size
    Tt = match_alignment(tiling)
    Vec_addr, Ret_addr = 0, vs
    bar = _barrier()
    nB = Tt[0][1] * Tt[1][1]
    nL = Tt[0][0] * Tt[1][0]
    P = math.ceil(Tt[0][2] * Tt[1][2] / N_MAC)
    ld = [("ST", Vec_addr + l * GS_CH + b * GS_BA + p * PREFETCH) for p in range(P) for b in range(nB) for l in range(nL)] + bar
    ev, od = _even_odd(Tt, nB, nL, 4)
    ni = math.ceil(Tt[1][2] / N_MAC)

    def half(bases, pis, full):
        cm = []
        for igs in range(0, ni, N_GRF):
            ige = int(min(igs + N_GRF, ni))
            for pi in range(igs, ige):
                for bb in bases:
                    cm.append(("PIM_MAC_OP1", Vec_addr + bb + (pis + pi) * DATA))
        for pi in range(4):
            for bb in bases:
                cm.append(("PIM_MAC_OP1", Vec_addr + bb + pi * DATA))
        if full:
            for bb in bases:
                cm.append(("PIM_WB_RES", Ret_addr + bb + pis * DATA))
        return cm
    r = []
    for it in range(Tt[0][2]):
        full = (it % N_GRF == N_GRF - 1) or (it == Tt[0][2] - 1)
        r += half(ev, it * Tt[1][2], full)
        r += half(od, it * Tt[1][2], full)
    r += bar
    ret = [("ST", Ret_addr + l * GS_CH + b * GS_BA + p * PREFETCH) for p in range(P) for b in range(nB) for l in range(nL)]
    return (ld + r + ret) * num_itr


def gen_hbmpim_va(tiling):
    """hbmpim_trace_gen/gen_trace_HBMPIM_VA.py."""
    tiling = [list(x) for x in tiling]
    def total_size(num_itr):
        itr = math.ceil(tiling[0][2] / num_itr)
        v = math.ceil(itr * tiling[1][2] * DATA / PREFETCH) * PREFETCH
        return itr, v
    num_itr = 1
    itr_size, vs = total_size(1)
    while num_itr <= tiling[0][2]:
        itr_size, vs = total_size(num_itr)
        if vs * 3 <= GS_BA:
            break
        num_itr += 1
    tiling[0][2] = itr_size
    Tt = match_alignment(tiling)
    V1, V2, R = 0, vs, 2 * vs
    bar = _barrier()
    nB = Tt[0][1] * Tt[1][1]
    nL = Tt[0][0] * Tt[1][0]
    P = math.ceil(Tt[0][2] * Tt[1][2] / N_MAC)
    ld = [("LD", V1 + l * GS_CH + b * GS_BA + p * PREFETCH) for p in range(P) for b in range(nB) for l in range(nL)] + bar
    ld += [("LD", V2 + l * GS_CH + b * GS_BA + p * PREFETCH) for p in range(P) for b in range(nB) for l in range(nL)] + bar
    ev, od = _even_odd(Tt, nB, nL, 4)
    ni = math.ceil(Tt[1][2] / N_MAC)

    def half(bases, pis):
        cm = []
        for igs in range(0, ni, N_GRF):
            ige = int(min(igs + N_GRF, ni))
            for pi in range(igs, ige):
                for bb in bases:
                    cm.append(("PIM_LD_OP1", V1 + bb + (pis + pi) * DATA))
            for pi in range(igs, ige):
                for bb in bases:
                    cm.append(("PIM_ADD_OP1", V2 + bb + (pis + pi) * DATA))
            for pi in range(igs, ige):
                for bb in bases:
                    cm.append(("PIM_WB_RES", R + bb + (pis + pi) * DATA))
        return cm
    v = []
    for it in range(Tt[0][2]):
        v += half(ev, it * Tt[1][2])
        v += half(od, it * Tt[1][2])
    v += bar
    ret = [("ST", R + l * GS_CH + b * GS_BA + p * PREFETCH) for p in range(P) for b in range(nB) for l in range(nL)]
    return (ld + v + ret) * num_itr


def _gb_fills(cmd: str, Tt, nB: int, nL: int, vec_addr: int) -> list:
    """The GEMV and ATTN generators' global-buffer fills, per row p1 of the first triple's tile: one
    `cmd` (PIM_WR_GB for a GEMV and ATTN's score GEMV, PIM_MV_GB for its context GEMV) per bank and
    core group at every N_MAC-th input position of the row."""
    out = []
    for p1 in range(Tt[0][2]):
        w = []
        for p2 in range(Tt[1][2]):
            pos = p1 * Tt[1][2] + p2
            if pos % N_MAC == 0:
                w += [(cmd, vec_addr + l * GS_CH + b * GS_BA + pos) for b in range(nB) for l in range(nL)]
        out.append(w)
    return out


def gen_attacc_attn(tiling, mode="inference"):
    """attacc_trace_gen/gen_trace_AttAcc_ATTN.py (``run_attention`` / ``attention``): the fused attention
    kernel, score GEMV (K resident), softmax on the channel's unit, context GEMV (V resident), for DCC's
    ``[batch*heads, d_head, seq_len]`` tiling.  ``mode``: ``"inference"`` (``attn_inference``, Fig. 8: the
    query written by the host, ST only) or ``"kernel"`` (``attn_single``, Fig. 6: LD then ST in rounds of 16
    columns between barriers).  Not checked against the fork's binary: ``dcc-artifact.csv`` has no ATTN rows."""
    if mode not in ("inference", "kernel"):
        raise ValueError(f"gen_attacc_attn: mode must be 'inference' or 'kernel', not {mode!r}")
    tiling = [list(x) for x in tiling]
    num_itr, tiling[0][2], vs, ms, rs = _fit_iterations(tiling, ret_dim=1)   # Ret_size: d_head (l.281)
    # attention(real_tiling, Mat_addr=0, Key_addr, Ret_addr): its Vec_addr is 0, its Mat_addr the key offset
    Vec_addr, Mat_addr, Ret_addr = 0, ms, ms + vs
    Tt = match_alignment(tiling)
    nB = Tt[0][1] * Tt[1][1] * Tt[2][1]
    nL = Tt[0][0] * Tt[1][0] * Tt[2][0]
    bar = _barrier()
    # score_mac
    s_wrgb = _gb_fills("PIM_WR_GB", Tt, nB, nL, Vec_addr)
    s_mac, s_mvsb = [], []
    kc = math.ceil(Tt[1][2] / N_MAC)
    for p2 in range(Tt[2][2]):
        for p1 in range(kc):
            s_mac += [("PIM_MAC_AB", Mat_addr + l * GS_CH + (p1 + p2 * kc) * GS_COL) for l in range(nL)]
        if p2 % N_MAC == N_MAC - 1 or p2 == Tt[2][2] - 1:
            s_mvsb += [("PIM_MV_SB", l * GS_CH + bg * GS_BG) for bg in range(math.ceil(nB / 4)) for l in range(nL)]
    # context_mac
    c_mvgb = _gb_fills("PIM_MV_GB", Tt, nB, nL, Vec_addr)
    c_mac = []
    lc = math.ceil(Tt[2][2] / N_MAC)
    for p2 in range(Tt[1][2]):
        for p1 in range(lc):
            c_mac += [("PIM_MAC_AB", Mat_addr + l * GS_CH + (p1 + p2 * lc) * GS_COL) for l in range(nL)]
        if p2 % N_MAC == N_MAC - 1 or p2 == Tt[1][2] - 1:
            c_mac += [("PIM_MV_SB", Ret_addr + l * GS_CH + bg * GS_BG) for bg in range(math.ceil(nB / 4))
                      for l in range(nL)]
    # softmax: one PIM_SFM per core group of a channel, on all 16 channels (valid_channel = n_channel)
    sfm = [("PIM_SFM", l * GS_CH + pos * (64 // Tt[0][1]) * GS_BA) for pos in range(Tt[0][1]) for l in range(N_CH)]
    # data_LD (the query) and data_Ret
    P = math.ceil(Tt[0][2] * Tt[1][2] / N_MAC)
    ld = []
    if mode == "kernel":
        last = 0
        for pos in range(P):
            ld += [("LD", Vec_addr + l * GS_CH + b * GS_BA + pos * PREFETCH) for b in range(nB) for l in range(nL)]
            if pos % 16 == 15 or pos + 1 == P:
                ld += bar
                ld += [("ST", Vec_addr + l * GS_CH + b * GS_BA + sp * PREFETCH) for b in range(nB)
                       for sp in range(last, pos + 1) for l in range(nL)]
                last = pos + 1
                ld += bar
    else:
        ld = [("ST", Vec_addr + l * GS_CH + b * GS_BA + pos * PREFETCH) for pos in range(P) for b in range(nB)
              for l in range(nL)]
    ret = [("ST", Ret_addr + l * GS_CH + b * GS_BA + pos * PREFETCH) for pos in range(P) for b in range(nB)
           for l in range(nL)]
    # run_attention's assembly, iterations in pairs (every iteration's lists are the same)
    T0 = tiling[0][2]
    out = []
    for itr in range(0, num_itr, 2):
        nxt = itr + 1 < num_itr
        out += ld + (ld if nxt else []) + bar
        for j in range(T0):
            out += s_wrgb[j] + s_mac
        out += s_mvsb
        if nxt:
            for j in range(T0):
                out += s_wrgb[j]
            out += bar
            for j in range(T0):
                out += s_mac
        out += sfm
        for j in range(T0):
            out += c_mvgb[j]
        if nxt:
            out += s_mvsb + bar
        for j in range(T0):
            out += c_mac
        if nxt:
            out += sfm + bar
            for j in range(T0):
                out += c_mvgb[j] + c_mac
        out += bar + ret + (ret if nxt else [])
    return out


GENERATORS = {("attacc", "gemv"): gen_attacc_gemv, ("attacc", "red"): gen_attacc_red,
              ("hbmpim", "gemv"): gen_hbmpim_gemv, ("hbmpim", "red"): gen_hbmpim_red,
              ("hbmpim", "va"): gen_hbmpim_va,
              ("attacc", "attn"): lambda t: gen_attacc_attn(t, "kernel"),
              ("attacc", "attn_inference"): gen_attacc_attn}


def gen_trace(backend, kernel, tiling):
    """The trace DCC writes for ``tiling`` on ``backend``/``kernel``: a list of ``(request name, byte
    address)``, ``"PIM_BARRIER"`` entries included (one per channel).  No validation (see
    ``tiling.validate``); the caller's tiling is not modified."""
    return GENERATORS[(backend, kernel)](tiling)


# request type name in the trace -> final command (m_request_translations)

REQ_FINAL = {"LD": "RD", "ST": "WR", "PIM_MAC_AB": "MACAB", "PIM_WR_GB": "WRGB", "PIM_MV_SB": "MVSB",
             "PIM_BARRIER": "BARRIER", "PIM_MV_GB": "MVGB", "PIM_SFM": "SFM", "PIM_LD_OP1": "LD_OP1", "PIM_ADD_OP1": "ADD_OP1",
             "PIM_MAC_OP1": "MAC_OP1", "PIM_WB_ACC": "WB_ACC", "PIM_WB_RES": "WB_RES",
             "PIM_ACC_RESET": "ACC_RESET"}


def map_addr(addr):
    """Byte address -> (channel, pseudo-channel, rank, bank group, bank, row, column). HBM3PIMMap::apply (hbm3_pim_linear_mappers.cpp l.64-74): Co, Ro, Ba, BG, Ra, Pch, Ch from the LSBs."""
    a = addr >> TX_OFFSET
    col = a & 31; a >>= 5
    row = a & ((1 << 14) - 1); a >>= 14
    ba = a & 3; a >>= 2
    bg = a & 3; a >>= 2
    ra = a & 1; a >>= 1
    pc = a & 1; a >>= 1
    ch = a & 15
    return (ch, pc, ra, bg, ba, row, col)



def channel_loads(trace):
    """Requests per physical channel of ``trace`` (barriers not counted): a list of 16 ints."""
    cnt = [0] * N_CH
    for name, addr in trace:
        if name != "PIM_BARRIER":
            cnt[map_addr(addr)[0]] += 1
    return cnt

