"""One channel of DCC's Ramulator2 fork, compiled (numba): `controller.simulate_channel`'s loop
over arrays instead of objects, the same cycles (held equal by `tests/backends/dcc/`).

The Python controller (`controller.py`) is the readable port and the reference; this is the same
HBM3-PIM controller, PIM scheduler, AllBankHBM3 refresh and in-order frontend, rule for rule:
requests are indices into per-request arrays, the five request buffers are index arrays kept in
arrival order, the timing state is `ready[node, command]` over the channel's 87 nodes (channel,
2 pseudo-channels, 4 ranks, 16 bank groups, 64 banks) and the issue history a [node, command, 4]
window.  What it returns besides the count: issued commands per command (the busiest channel's
`counts`) and the clocks of the first and the last PIM command (the report's phases).
"""
from __future__ import annotations

from operator import itemgetter

import numpy as np
from numba import njit

from .controller import ALLBANK_OPS, ROWHIT_CMDS
from .timing import (
    CLOSING,
    NC,
    NO_TYPE,
    OPENING,
    READ_LATENCY,
    ROW_TYPE,
    SCOPE_L,
    TIMING_TABLE,
    TX_OFFSET,
    C,
    T,
)
from .traces import REQ_FINAL

N_NODES = 1 + 2 + 4 + 16 + 64
MAX_BUF = 32                     # ReqBuffer::max_size (enqueue accepts while size <= max_size)
ROWS_PER_BANK = 4                # depth of a bank's open-row set here (the fork's map; 1 row in practice)
K_BARRIER, K_REFAB, K_RD, K_WR, K_ACT, K_PRE, K_ACTAB, K_PREA, K_MACAB = (
    C["BARRIER"], C["REFab"], C["RD"], C["WR"], C["ACT"], C["PRE"], C["ACTAB"], C["PREA"], C["MACAB"])


def _mask(names_or_ids) -> np.ndarray:
    m = np.zeros(NC, np.bool_)
    for x in names_or_ids:
        m[C[x] if isinstance(x, str) else x] = True
    return m


def tables(fork: str) -> tuple:
    """The fork's constraint table as arrays: (start [5, NC], end [5, NC], following, latency,
    window) of the constraints each preceding command sets at each level, and win [5, NC] (the
    issue-history depth it needs)."""
    cons = [[[] for _ in range(NC)] for _ in range(5)]
    win = np.zeros((5, NC), np.int64)
    for lvl, pre, fol, lat, w in TIMING_TABLE[fork]:
        for p in pre:
            for f in fol:
                cons[lvl][C[p]].append((C[f], lat, w))
                win[lvl, C[p]] = max(win[lvl, C[p]], w)
    start, end = np.zeros((5, NC), np.int64), np.zeros((5, NC), np.int64)
    fol, lat, wnd = [], [], []
    for lvl in range(5):
        for c in range(NC):
            start[lvl, c] = len(fol)
            for f, la, w in cons[lvl][c]:
                fol.append(f); lat.append(la); wnd.append(w)
            end[lvl, c] = len(fol)
    return (start, end, np.array(fol, np.int64), np.array(lat, np.int64), np.array(wnd, np.int64), win)


def trace_arrays(trace) -> dict:
    """`trace` ((request name, byte address) pairs) as arrays: final command, address, and the
    address map's channel, pseudo-channel, rank, bank group, bank, row (`traces.map_addr`)."""
    names = list(map(itemgetter(0), trace))
    code = {k: C[REQ_FINAL[k]] for k in set(names)}
    final = np.fromiter(map(code.__getitem__, names), np.int64, len(names))
    addr = np.fromiter(map(itemgetter(1), trace), np.int64, len(trace))
    a = addr >> TX_OFFSET
    out = {"final": final, "addr": addr}
    a = a >> 5                                  # column
    out["row"] = a & ((1 << 14) - 1); a = a >> 14
    out["ba"] = a & 3; a = a >> 2
    out["bg"] = a & 3; a = a >> 2
    out["ra"] = a & 1; a = a >> 1
    out["pc"] = a & 1; a = a >> 1
    out["ch"] = a & 15
    return out


def channel_loads_of(arrays: dict) -> np.ndarray:
    """Requests per physical channel (barriers not counted), [16] (`traces.channel_loads`)."""
    live = arrays["final"] != K_BARRIER
    return np.bincount(arrays["ch"][live], minlength=16)


def channel_arrays(arrays: dict, ch: int) -> dict:
    """The requests on physical channel `ch`, in trace order (`controller.channel_requests`)."""
    keep = arrays["ch"] == ch
    return {k: np.ascontiguousarray(v[keep]) for k, v in arrays.items() if k != "ch"}


OPENING_M, CLOSING_M, ROW_TYPE_M, NO_TYPE_M = _mask(OPENING), _mask(CLOSING), _mask(ROW_TYPE), _mask(NO_TYPE)
ROWHIT_M, ALLBANK_M = _mask(ROWHIT_CMDS), _mask(ALLBANK_OPS)
SCOPE = np.array(SCOPE_L, np.int64)


PEND_CAP = 4096                  # reads in flight per channel (a ring)
CAP = 4096                       # entries per request buffer (the active and priority ones are unbounded)


@njit(cache=True, nogil=True)
def _tick(ch, clk, N, fin, cmd, nodes, nlev, bank, rrow, arrive, depart, pq, nreq, st, fp, counts,
          ready_all, hist_all, bo_all, br_all, bn_all, buf_all, blen_all, pend_all, sv_all, ab_all,
          start, end, fol, lat, wnd, win, scope, opening, closing, rowtype, notype, rowhit_m, allbank_m, pim_m,
          n_refi, read_latency):
    """HBM3PIMController::tick of channel `ch` at `clk` (`Channel.tick`): (did anything happen, error)."""
    ready, hist = ready_all[ch], hist_all[ch]
    bank_open, bank_rows, bank_nrows = bo_all[ch], br_all[ch], bn_all[ch]
    buf, blen, pend = buf_all[ch], blen_all[ch], pend_all[ch]
    sv, ab = sv_all[ch:ch + 1], ab_all[ch]
    p_head, p_tail, write_mode, is_pim, next_ref = st[ch, 0], st[ch, 1], st[ch, 2] != 0, st[ch, 3] != 0, st[ch, 4]
    n_req = nreq[0]
    err = 0
    did = False
    if p_head < p_tail and depart[pend[p_head % PEND_CAP]] <= clk:
        p_head += 1
        did = True
    if clk == next_ref:
        next_ref += n_refi
        for rr in range(2):
            if n_req >= N or blen[1] >= CAP:
                err = 2
                return False, err
            q = n_req
            n_req += 1
            fin[q] = K_REFAB
            cmd[q] = K_REFAB
            nodes[q, 0] = 0
            nodes[q, 1] = 1 + rr
            nlev[q] = 2
            bank[q] = -1
            buf[1, blen[1]] = q
            blen[1] += 1
        did = True
    npim0 = blen[4]
    first_cmd = -1
    for phase in range(2):
        # ============ schedule (phase 0) / schedule_sec (phase 1) ============
        found = False
        fbuf = -1
        req = -1
        # --- active buffer: exact pairwise compare (_best_general)
        a = -1
        if blen[0] > 0:
            for j in range(blen[0]):
                rq = buf[0, j]
                cmd[rq] = _preq(rq, fin, bank, rrow, bank_open, bank_rows, bank_nrows, allbank_m, pq, sv, ab)
            cand = buf[0, 0]
            for j in range(1, blen[0]):
                nx = buf[0, j]
                r1 = _ready_time(cand, cmd[cand], nodes, nlev, scope, ready) <= clk
                r2 = _ready_time(nx, cmd[nx], nodes, nlev, scope, ready) <= clk
                if r1 != r2:
                    if r1:
                        continue
                    if not _rowhit(nx, cmd, bank, rrow, bank_open, bank_rows, bank_nrows, rowhit_m):
                        hb = False
                        for jj in range(blen[0]):
                            o = buf[0, jj]
                            if bank[o] == bank[nx] and _rowhit(o, cmd, bank, rrow, bank_open, bank_rows,
                                                               bank_nrows, rowhit_m):
                                hb = True
                                break
                        if hb:
                            continue
                    cand = nx
                elif arrive[nx] < arrive[cand]:
                    cand = nx
            a = cand
        if phase == 0:
            req = a
            if a >= 0 and _ready_time(a, cmd[a], nodes, nlev, scope, ready) <= clk:
                found = True
                fbuf = 0
        else:
            if a >= 0 and _ready_time(a, cmd[a], nodes, nlev, scope, ready) <= clk and \
                    _differs(first_cmd, cmd[a], notype, rowtype):
                found = True
                fbuf = 0
                req = a
        stop = False
        if not found:
            if blen[1] > 0:
                fbuf = 1
                rq = buf[1, 0]
                cmd[rq] = _preq(rq, fin, bank, rrow, bank_open, bank_rows, bank_nrows, allbank_m, pq, sv, ab)
                if phase == 0:
                    req = rq
                    found = _ready_time(rq, cmd[rq], nodes, nlev, scope, ready) <= clk
                    if not found:
                        stop = True
                else:
                    if _differs(first_cmd, cmd[rq], notype, rowtype):
                        req = rq
                        found = _ready_time(rq, cmd[rq], nodes, nlev, scope, ready) <= clk
                        if not found:
                            stop = True
                            req = -1
            if not stop:
                is_pim = False
                if not found:
                    r = _best(4, True, buf, blen, fin, cmd, bank, rrow, nodes, nlev, scope, ready, bank_open,
                              bank_rows, bank_nrows, allbank_m, rowhit_m, opening, closing, clk, pq, sv, ab)
                    if phase == 0:
                        req = r
                        if r >= 0:
                            found = _ready_time(r, cmd[r], nodes, nlev, scope, ready) <= clk
                            fbuf = 4
                    elif r >= 0 and _differs(first_cmd, cmd[r], notype, rowtype):
                        req = r
                        found = _ready_time(r, cmd[r], nodes, nlev, scope, ready) <= clk
                        fbuf = 4
                    if found:
                        is_pim = True
                if not found:
                    # set_write_mode
                    if not write_mode:
                        if blen[3] > 0.8 * MAX_BUF or blen[2] == 0:
                            write_mode = True
                    else:
                        if blen[3] < 0.2 * MAX_BUF and blen[2] != 0:
                            write_mode = False
                    bi = 3 if write_mode else 2
                    r = _best(bi, False, buf, blen, fin, cmd, bank, rrow, nodes, nlev, scope, ready,
                              bank_open, bank_rows, bank_nrows, allbank_m, rowhit_m, opening, closing, clk, pq, sv, ab)
                    if phase == 0:
                        req = r
                        if r >= 0:
                            found = _ready_time(r, cmd[r], nodes, nlev, scope, ready) <= clk
                            fbuf = bi
                    elif r >= 0 and _differs(first_cmd, cmd[r], notype, rowtype):
                        req = r
                        found = _ready_time(r, cmd[r], nodes, nlev, scope, ready) <= clk
                        fbuf = bi
        if found and closing[cmd[req]] and blen[0] > 0:
            for j in range(blen[0]):
                if bank[buf[0, j]] == bank[req] and bank[req] >= 0:
                    found = False
                    break
        if found:
            # ============ _serve ============
            c = cmd[req]
            _issue(c, req, clk, nodes, nlev, start, end, fol, lat, wnd, win, hist, ready)
            counts[c] += 1
            if pim_m[c]:
                if fp[0] < 0:
                    fp[0] = clk
                fp[1] = clk
            if c == K_ACT or c == K_PRE or c == K_ACTAB or c == K_PREA:
                sv[0] += 1
            if c == K_ACT:
                if not _open_row(bank[req], rrow[req], bank_open, bank_rows, bank_nrows):
                    err = 3
                    return False, err
            elif c == K_PRE:
                b = bank[req]
                bank_open[b] = False
                bank_nrows[b] = 0
            elif c == K_ACTAB:
                for b in range(64):
                    if not _open_row(b, rrow[req], bank_open, bank_rows, bank_nrows):
                        err = 3
                        return False, err
            elif c == K_PREA:
                for b in range(64):
                    bank_open[b] = False
                    bank_nrows[b] = 0
            if c == fin[req]:
                if fin[req] == K_RD:
                    depart[req] = clk + read_latency
                    if p_tail - p_head >= PEND_CAP:
                        err = 2
                        return False, err
                    pend[p_tail % PEND_CAP] = req
                    p_tail += 1
                _remove(buf, blen, fbuf, req)
            elif (not is_pim) and opening[c]:
                if blen[0] >= CAP:
                    err = 2
                    return False, err
                buf[0, blen[0]] = req
                blen[0] += 1
                _remove(buf, blen, fbuf, req)
            did = True
        if phase == 0:
            first_cmd = cmd[req] if req >= 0 else -1
    if blen[4] != npim0:
        did = True
    st[ch, 0], st[ch, 1], st[ch, 2], st[ch, 3], st[ch, 4] = p_head, p_tail, write_mode, is_pim, next_ref
    nreq[0] = n_req
    return did, err


@njit(cache=True, nogil=True)
def _next_event(ch, clk, fin, cmd, nodes, nlev, bank, rrow, pq, st, depart, ready_all, bo_all, br_all, bn_all,
                buf_all, blen_all, pend_all, sv_all, ab_all, scope, allbank_m):
    """`Channel.next_event` of channel `ch`: the earliest clk something there could become ready."""
    ready, bank_open, bank_rows, bank_nrows = ready_all[ch], bo_all[ch], br_all[ch], bn_all[ch]
    buf, blen, pend, sv, ab = buf_all[ch], blen_all[ch], pend_all[ch], sv_all[ch:ch + 1], ab_all[ch]
    t = st[ch, 4]
    if st[ch, 0] < st[ch, 1] and depart[pend[st[ch, 0] % PEND_CAP]] < t:
        t = depart[pend[st[ch, 0] % PEND_CAP]]
    for bi in (0, 1, 4, 2, 3):
        for j in range(blen[bi]):
            rq = buf[bi, j]
            if fin[rq] == K_BARRIER:
                return clk + 1
            pc_ = _preq(rq, fin, bank, rrow, bank_open, bank_rows, bank_nrows, allbank_m, pq, sv, ab)
            rt = _ready_time(rq, pc_, nodes, nlev, scope, ready)
            if rt < t:
                t = rt
    return max(t, clk + 1)


@njit(cache=True, nogil=True)
def _simulate(final, addr, pc, ra, bg, ba, row, chan, n_ch, n_ref, start, end, fol, lat, wnd, win, scope, opening,
              closing, rowtype, notype, rowhit_m, allbank_m, pim_m, refresh, n_refi, read_latency, max_cycles):
    """`n_ch` channels behind the in-order frontend (request r goes to channel chan[r]; one channel:
    `controller.simulate_channel`, several: `simulate_coupled`).  Returns (memory_system_cycles,
    issued commands per command [64], clk of the first / last PIM command, error)."""
    n = final.shape[0]
    N = n + n_ref
    # per-request state (REFab requests are appended after the trace's)
    fin = np.empty(N, np.int64)
    fin[:n] = final
    nodes = np.full((N, 5), -1, np.int64)
    nlev = np.empty(N, np.int64)
    bank = np.full(N, -1, np.int64)
    rrow = np.zeros(N, np.int64)
    rrow[:n] = row
    for i in range(n):
        rk = pc[i] * 2 + ra[i]
        bgi = rk * 4 + bg[i]
        b = bgi * 4 + ba[i]
        nodes[i, 0] = 0
        nodes[i, 1] = 1 + pc[i]
        nodes[i, 2] = 3 + rk
        nodes[i, 3] = 7 + bgi
        nodes[i, 4] = 23 + b
        nlev[i] = 5
        bank[i] = b
    arrive = np.full(N, -1, np.int64)
    depart = np.full(N, -1, np.int64)
    cmd = fin.copy()
    nreq = np.full(1, n, np.int64)
    pq = np.full((N, 2), -1, np.int64)          # (bank-state version, prerequisite) memo of _preq
    # per-channel state
    sv_all = np.zeros(n_ch, np.int64)           # bank-state version
    ab_all = np.full((n_ch, 1 << 14, 2), -1, np.int64)    # (bank-state version, all_banks_row) memo per row
    ready_all = np.full((n_ch, N_NODES, 64), -1, np.int64)
    hist_all = np.full((n_ch, N_NODES, 64, 4), -1, np.int64)
    bo_all = np.zeros((n_ch, 64), np.bool_)
    br_all = np.full((n_ch, 64, ROWS_PER_BANK), -1, np.int64)
    bn_all = np.zeros((n_ch, 64), np.int64)
    buf_all = np.empty((n_ch, 5, CAP), np.int64)      # buffers: 0 active, 1 prio, 2 read, 3 write, 4 pim
    blen_all = np.zeros((n_ch, 5), np.int64)
    pend_all = np.empty((n_ch, PEND_CAP), np.int64)
    st = np.zeros((n_ch, 5), np.int64)          # p_head, p_tail, write_mode, is_pim, next_ref
    st[:, 4] = n_refi if refresh else np.int64(10) ** 15
    counts = np.zeros(64, np.int64)
    fp = np.full(2, -1, np.int64)
    clk = 0
    i_tr = 0
    while True:
        # ---- frontend: send in order while the target controller accepts (Channel.send)
        sent = False
        while i_tr < n:
            r = i_tr
            ch = chan[r]
            blen, buf = blen_all[ch], buf_all[ch]
            f = fin[r]
            if f == K_BARRIER and (blen[0] > 0 or blen[4] > 0 or blen[2] > 0 or blen[3] > 0):
                break
            if f == K_RD:
                fw = False
                for j in range(blen[3]):
                    if addr[buf[3, j]] == addr[r]:
                        fw = True
                        break
                if fw:
                    if st[ch, 1] - st[ch, 0] >= PEND_CAP:
                        return clk, counts, fp[0], fp[1], 2
                    depart[r] = clk + 1
                    pend_all[ch, st[ch, 1] % PEND_CAP] = r
                    st[ch, 1] += 1
                    i_tr += 1
                    sent = True
                    continue
            bi = 2 if f == K_RD else (3 if f == K_WR else 4)
            if blen[bi] > MAX_BUF:
                break
            arrive[r] = clk
            buf[bi, blen[bi]] = r
            blen[bi] += 1
            i_tr += 1
            sent = True
        # ---- every controller ticks
        clk += 1
        did = False
        for ch in range(n_ch):
            if n_ch > 1 and clk != st[ch, 4] and st[ch, 0] >= st[ch, 1] and blen_all[ch].sum() == 0:
                # an idle channel: its tick finds nothing to schedule; all it changes is the write-mode
                # hysteresis (no reads: write mode) and the PIM flag (reset)
                st[ch, 2] = 1
                st[ch, 3] = 0
                continue
            d, err = _tick(ch, clk, N, fin, cmd, nodes, nlev, bank, rrow, arrive, depart, pq, nreq, st, fp, counts,
                           ready_all, hist_all, bo_all, br_all, bn_all, buf_all, blen_all, pend_all, sv_all, ab_all,
                           start, end, fol, lat, wnd, win, scope, opening, closing, rowtype, notype, rowhit_m,
                           allbank_m, pim_m, n_refi, read_latency)
            if err:
                return clk, counts, fp[0], fp[1], err
            did = did or d
        # ---- done?
        busy = False
        for ch in range(n_ch):
            if blen_all[ch].sum() > 0 or st[ch, 0] < st[ch, 1]:
                busy = True
                break
        if i_tr >= n and not busy:
            return clk, counts, fp[0], fp[1], 0
        if not did and not sent:
            t = np.int64(10) ** 18
            for ch in range(n_ch):
                tc = _next_event(ch, clk, fin, cmd, nodes, nlev, bank, rrow, pq, st, depart, ready_all, bo_all,
                                 br_all, bn_all, buf_all, blen_all, pend_all, sv_all, ab_all, scope, allbank_m)
                if tc < t:
                    t = tc
            if t - 1 > clk:
                clk = t - 1
        if clk > max_cycles:
            return clk, counts, fp[0], fp[1], 1


@njit(cache=True, nogil=True)
def _has_row(b, r, bank_rows, bank_nrows):
    for k in range(bank_nrows[b]):
        if bank_rows[b, k] == r:
            return True
    return False


@njit(cache=True, nogil=True)
def _open_row(b, r, bank_open, bank_rows, bank_nrows):
    """Open row `r` of bank `b` (ACT, or one bank of an ACTAB): add it to the bank's open-row set;
    False when the set already holds ROWS_PER_BANK other rows (the caller's error 3)."""
    bank_open[b] = True
    if _has_row(b, r, bank_rows, bank_nrows):
        return True
    if bank_nrows[b] >= ROWS_PER_BANK:
        return False
    bank_rows[b, bank_nrows[b]] = r
    bank_nrows[b] += 1
    return True


@njit(cache=True, nogil=True)
def _preq(rq, fin, bank, rrow, bank_open, bank_rows, bank_nrows, allbank_m, pq, sv, ab):
    f = fin[rq]
    if f == K_REFAB:
        for b in range(64):
            if bank_open[b]:
                return K_PREA
        return f
    if f == K_RD or f == K_WR:
        b = bank[rq]
        if not bank_open[b]:
            return K_ACT
        return f if _has_row(b, rrow[rq], bank_rows, bank_nrows) else K_PRE
    if f == K_MACAB or allbank_m[f]:
        r = rrow[rq]
        if ab[r, 0] != sv[0]:
            v = -1
            for b in range(64):
                if not bank_open[b]:
                    v = K_ACTAB
                    break
                if not _has_row(b, r, bank_rows, bank_nrows):
                    v = K_PREA
                    break
            ab[r, 0] = sv[0]
            ab[r, 1] = v
        return f if ab[r, 1] < 0 else ab[r, 1]
    return f


@njit(cache=True, nogil=True)
def _ready_time(rq, c, nodes, nlev, scope, ready):
    k = nlev[rq]
    sc = scope[c]
    if sc >= 0 and sc + 1 < k:
        k = sc + 1
    t = -1
    for lv in range(k):
        v = ready[nodes[rq, lv], c]
        if v > t:
            t = v
    return t


@njit(cache=True, nogil=True)
def _rowhit(rq, cmd, bank, rrow, bank_open, bank_rows, bank_nrows, rowhit_m):
    c = cmd[rq]
    if rowhit_m[c] and bank[rq] >= 0:
        b = bank[rq]
        return bank_open[b] and _has_row(b, rrow[rq], bank_rows, bank_nrows)
    return False


@njit(cache=True, nogil=True)
def _differs(first, c2, notype, rowtype):
    if first < 0 or notype[first] or notype[c2]:
        return False
    return rowtype[first] != rowtype[c2]


@njit(cache=True, nogil=True)
def _remove(buf, blen, bi, rq):
    m = blen[bi]
    for j in range(m):
        if buf[bi, j] == rq:
            for jj in range(j, m - 1):
                buf[bi, jj] = buf[bi, jj + 1]
            blen[bi] = m - 1
            return


@njit(cache=True, nogil=True)
def _issue(c, rq, clk, nodes, nlev, start, end, fol, lat, wnd, win, hist, ready):
    for lv in range(nlev[rq]):
        node = nodes[rq, lv]
        w = win[lv, c]
        if w > 0:
            for j in range(w - 1, 0, -1):
                hist[node, c, j] = hist[node, c, j - 1]
            hist[node, c, 0] = clk
        for k in range(start[lv, c], end[lv, c]):
            past = hist[node, c, wnd[k] - 1] if w > 0 else clk
            if past < 0:
                continue
            fut = past + lat[k]
            if fut > ready[node, fol[k]]:
                ready[node, fol[k]] = fut


@njit(cache=True, nogil=True)
def _best(bi, is_pim_buf, buf, blen, fin, cmd, bank, rrow, nodes, nlev, scope, ready, bank_open, bank_rows,
          bank_nrows, allbank_m, rowhit_m, opening, closing, clk, pq, sv, ab):
    """PIM::get_best_request over buffer `bi` (not the active one), as `Channel.best`."""
    if blen[bi] == 0:
        return -1
    if is_pim_buf and fin[buf[bi, 0]] == K_BARRIER:
        _remove(buf, blen, bi, buf[bi, 0])
        if blen[bi] == 0:
            return -1
    cand = buf[bi, 0]
    cmd[cand] = _preq(cand, fin, bank, rrow, bank_open, bank_rows, bank_nrows, allbank_m, pq, sv, ab)
    if _ready_time(cand, cmd[cand], nodes, nlev, scope, ready) <= clk:
        return cand
    hit_done = False
    barrier = False
    for i in range(1, blen[bi]):
        nx = buf[bi, i]
        cmd[nx] = _preq(nx, fin, bank, rrow, bank_open, bank_rows, bank_nrows, allbank_m, pq, sv, ab)
        if is_pim_buf and fin[nx] == K_BARRIER:
            barrier = True
        if barrier and not (opening[cmd[nx]] or closing[cmd[nx]]):
            continue
        if _ready_time(nx, cmd[nx], nodes, nlev, scope, ready) <= clk:
            if not _rowhit(nx, cmd, bank, rrow, bank_open, bank_rows, bank_nrows, rowhit_m):
                if not hit_done:
                    hit_done = True
                    for j in range(blen[bi]):
                        o = buf[bi, j]
                        cmd[o] = _preq(o, fin, bank, rrow, bank_open, bank_rows, bank_nrows, allbank_m, pq, sv, ab)
                hb = False
                for j in range(blen[bi]):
                    o = buf[bi, j]
                    if bank[o] == bank[nx] and _rowhit(o, cmd, bank, rrow, bank_open, bank_rows, bank_nrows,
                                                       rowhit_m):
                        hb = True
                        break
                if hb:
                    continue
            return nx
    return cand


def simulate_channel_native(fork: str, req: dict, refresh: bool = True, max_cycles: int = 10 ** 8,
                            pim_commands=(), coupled: bool = False) -> tuple:
    """`controller.simulate_channel(fork, ...)` of one channel's requests (`channel_arrays`), compiled:
    (memory_system_cycles, issued commands per command [NC], clk of the first and the last command
    in `pim_commands` (-1 if none)).  coupled: `req` is the whole trace (`trace_arrays`) and all 16
    channels run behind the in-order frontend (`controller.simulate_coupled`); counts and clocks
    are then over all channels.  Raises RuntimeError on a runaway or an overflow."""
    start, end, fol, lat, wnd, win = _TABLES.get(fork) or _TABLES.setdefault(fork, tables(fork))
    n = len(req["final"])
    n_ch = 16 if coupled else 1
    n_ref = 2 * (max_cycles // T["nREFI"] + 1) if refresh else 0
    n_ref = n_ch * min(n_ref, 2 * (64 * n // T["nREFI"] + 16) + 4096)
    chan = np.ascontiguousarray(req["ch"]) if coupled else np.zeros(n, np.int64)
    pim_m = _mask(pim_commands)
    pad = lambda m: np.concatenate([m, np.zeros(64 - NC, np.bool_)])        # noqa: E731
    win64 = np.zeros((5, 64), np.int64)
    win64[:, :NC] = win
    start64, end64 = np.zeros((5, 64), np.int64), np.zeros((5, 64), np.int64)
    start64[:, :NC], end64[:, :NC] = start, end
    scope = np.full(64, -1, np.int64)
    scope[:NC] = SCOPE
    clk, counts, first, last, err = _simulate(
        req["final"], req["addr"], req["pc"], req["ra"], req["bg"], req["ba"], req["row"], chan, n_ch, int(n_ref),
        start64, end64, fol, lat, wnd, win64, scope, pad(OPENING_M), pad(CLOSING_M), pad(ROW_TYPE_M),
        pad(NO_TYPE_M), pad(ROWHIT_M), pad(ALLBANK_M), pad(pim_m), bool(refresh), int(T["nREFI"]),
        int(READ_LATENCY), int(max_cycles))
    if err:
        raise RuntimeError({1: "runaway", 2: "request buffer overflow", 3: "more than 4 open rows in a bank"}[err])
    return int(clk), counts[:NC].copy(), int(first), int(last)


_TABLES: dict = {}
