"""Compiled (numba) record assembly of AttAcc's GEMV programs.

Why.  The exhaustive search lowers every draft of an op; a GEMV
20480 x 5120 draft on AttAcc has up to ~10^6 records (one WRGB per buffer
entry and pseudo-channel, one MVSB per adder tree and block) and its route
tables one row per data-movement command.  `lower._gemv_program`'s Python
form builds them a command at a time (seconds per draft); here one pass
writes them (milliseconds).  The Python form stays in `lower.py` as the
readable definition (`_gemv_program(..., native=False)`, and the
`granularity == "core"` drafts) and `tests/backends/attacc/test_attacc_native.py`
holds the two bit-identical.

Record fields are written in `program.RECORD_FIELDS` order.
"""
from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.typed import Dict

from ...lower.inline_njit import njit_phases
from ...lower.native import put_record

# level codes of `Geometry.level`
BANK, BG, BUFFER = 0, 1, 2


@njit(nogil=True, cache=True)
def host_ids(vidx, ucls, KI):
    """Host data rows of a GEMV's vector, numbered as `_Tables.host_row`
    numbers them in the Python form: in the order the loads first ask for
    them ((b, v, input tile i), then unit c, then entry e of the tile), equal
    contents (over every group) sharing one id.

    vidx [G, K, n_b, n_v, E, 16] int64: the rows of each unit class;
    ucls [C]: a unit's class.  Returns (ids [C, n_b, n_v, E] int64,
    rep [n_host, 4] int64: (class, b, v, e) of each id's first request,
    ok).  ok is False when two different rows hash alike (the caller then
    falls back to the Python form); equal hashes are always checked
    element-wise, so the numbering is exact.
    """
    G, K, n_b, n_v, E, L = vidx.shape
    C = ucls.shape[0]
    ids = np.full((C, n_b, n_v, E), -1, np.int64)
    known = np.full((K, n_b, n_v, E), -1, np.int64)     # a class's row id, once asked for
    rep = np.empty((K * n_b * n_v * E, 4), np.int64)
    seen = Dict.empty(key_type=types.int64, value_type=types.int64)
    n = 0
    t_in = (E + KI - 1) // KI
    for b in range(n_b):
        for v in range(n_v):
            for i in range(t_in):
                for c in range(C):
                    u = ucls[c]
                    for e in range(KI * i, min(E, KI * i + KI)):
                        if known[u, b, v, e] >= 0:
                            ids[c, b, v, e] = known[u, b, v, e]
                            continue
                        h = np.uint64(1469598103934665603)
                        for g in range(G):
                            for l in range(L):
                                h = (h ^ np.uint64(vidx[g, u, b, v, e, l] & 0xFFFFFFFFFFFF)) * np.uint64(1099511628211)
                        key = np.int64(h >> np.uint64(1))
                        if key in seen:
                            k = seen[key]
                            u0, b0, v0, e0 = rep[k, 0], rep[k, 1], rep[k, 2], rep[k, 3]
                            for g in range(G):
                                for l in range(L):
                                    if vidx[g, u, b, v, e, l] != vidx[g, u0, b0, v0, e0, l]:
                                        return ids, rep[:0], False
                        else:
                            k = n
                            seen[key] = k
                            rep[k, 0], rep[k, 1], rep[k, 2], rep[k, 3] = u, b, v, e
                            n += 1
                        known[u, b, v, e] = k
                        ids[c, b, v, e] = k
    return ids, rep[:n].copy(), True


@njit(nogil=True, cache=True, inline="always")
def _rec(out, p, write, op, bank, row, col, n, phase, reg, reg_step, src, aux, arg, sync):
    """Record p (core -1, resident 0); returns p + 1."""
    if write:
        put_record(out, p, op, bank, row, col, n, phase, reg, reg_step, src, aux, arg, -1, 0, sync)
    return p + 1


@njit(nogil=True, cache=True)
def _bg_order(banks, m, banks_per_bg, order):
    """`geometry.bg_interleave` of commands 0..m-1 with address banks
    `banks`: round-robin over the bank groups in order of first appearance.
    Writes the command order to order[:m]."""
    qrank = np.full(64, -1, np.int64)       # bank group -> queue rank
    nq = 0
    pos = np.empty(m, np.int64)             # place within its queue
    cnt = np.zeros(64, np.int64)
    rank = np.empty(m, np.int64)
    for t in range(m):
        q = banks[t] // banks_per_bg
        if qrank[q] < 0:
            qrank[q] = nq
            nq += 1
        rank[t] = qrank[q]
        pos[t] = cnt[q]
        cnt[q] += 1
    key = pos * 64 + rank                   # (place, queue rank): the round-robin order
    idx = np.argsort(key, kind="mergesort")
    for t in range(m):
        order[t] = idx[t]


@njit(nogil=True, cache=True, inline="always")
def _gemv_steps(n_b, n_v, t_out, t_in, chunk, traverse_is):
    """The plan's steps in the Python form's order: (b, v, j, i) [S] each,
    whether step k drains its output block, whether it completes it."""
    S = n_b * n_v * t_out * t_in
    sb_ = np.empty(S, np.int64)
    sv_ = np.empty(S, np.int64)
    sj_ = np.empty(S, np.int64)
    si_ = np.empty(S, np.int64)
    sdr = np.empty(S, np.bool_)
    scp = np.empty(S, np.bool_)
    k = 0
    for b in range(n_b):
        for v in range(n_v):
            for j0 in range(0, t_out, chunk):
                j1 = min(t_out, j0 + chunk)
                if traverse_is:
                    for i in range(t_in):
                        for j in range(j0, j1):
                            sb_[k], sv_[k], sj_[k], si_[k] = b, v, j, i
                            sdr[k], scp[k] = True, i == t_in - 1
                            k += 1
                else:
                    for j in range(j0, j1):
                        for i in range(t_in):
                            sb_[k], sv_[k], sj_[k], si_[k] = b, v, j, i
                            sdr[k], scp[k] = i == t_in - 1, i == t_in - 1
                            k += 1
    return sb_, sv_, sj_, si_, sdr, scp


@njit(nogil=True, cache=True, inline="always")
def _flush(out, p, write, rb, h, pend_row, pend_item, n_pend, BARRIER, RDACC, READB, final):
    """sb.flush: a barrier, then an RDACC per completed softmax-buffer row
    (the last flush syncs the host on its first); returns (p, h)."""
    p = _rec(out, p, write, BARRIER, 0, 0, 0, 1, READB, 0, 0, -1, 0, 0, 0)
    for q in range(n_pend):
        if write:
            rb[h, 0], rb[h, 1], rb[h, 2], rb[h, 3] = (pend_item[q, 0], pend_item[q, 1], pend_item[q, 2],
                                                      pend_item[q, 3])
        p = _rec(out, p, write, RDACC, (h % 16) * 4, 0, 0, 1, READB, pend_row[q], 0, 1, 0, h,
                 1 if (final and q == 0) else 0)
        h += 1
    return p, h


@njit(nogil=True, cache=True, inline="always")
def _drain_items(pch, cluster, row_of, C, P, item_c, n_item, unit_item):
    """`_drain_commands`' items: per pCH one (adder tree, row) per command,
    in order of first appearance; unit c's item into unit_item[c, 0].
    Returns the commands (the most items of a pCH)."""
    for q in range(P):
        n_item[q] = 0
    for c in range(C):
        q = pch[c]
        t = -1
        for y in range(n_item[q]):
            c0 = item_c[q, y]
            if cluster[c0] == cluster[c] and row_of[c0] == row_of[c]:
                t = y
                break
        if t < 0:
            t = n_item[q]
            item_c[q, t] = c
            n_item[q] += 1
        unit_item[c, 0] = t
    m = 0
    for q in range(P):
        m = max(m, n_item[q])
    return m


@njit(nogil=True, cache=True, inline="always")
def _load_items(ids, b, v, e0, ke, pch, C, P, item_c, item_e, n_item, n_e, e_unit, e_item, unit_item):
    """A load's items per pCH: distinct (row id, entry), in order of first
    appearance (unit, entry); a unit's entry joins the item of an earlier
    unit of its pCH with the same row id (unit_item[c, e]).  Returns the
    commands (the most items of a pCH)."""
    for q in range(P):
        n_item[q] = 0
    for c in range(C):
        q = pch[c]
        for e in range(ke):
            s = ids[c, b, v, e0 + e]
            t = -1
            for y in range(n_e[q, e]):
                if ids[e_unit[q, e, y], b, v, e0 + e] == s:
                    t = e_item[q, e, y]
                    break
            if t < 0:
                t = n_item[q]
                item_c[q, t] = c
                item_e[q, t] = e
                n_item[q] += 1
                e_unit[q, e, n_e[q, e]] = c
                e_item[q, e, n_e[q, e]] = t
                n_e[q, e] += 1
            unit_item[c, e] = t
    m = 0
    for q in range(P):
        m = max(m, n_item[q])
        for e in range(ke):
            n_e[q, e] = 0
    return m


@njit(nogil=True, cache=True, inline="always")
def _name_banks(cmd_bank, m, P, n_item, item_c, core_base):
    """Command t's bank: the first unit of the first pCH with a t-th item."""
    for t in range(m):
        cmd_bank[t] = -1
    for q in range(P):
        for t in range(n_item[q]):
            if cmd_bank[t] < 0:
                cmd_bank[t] = core_base[item_c[q, t]]


@njit(nogil=True, cache=True, inline="always")
def _macs(out, p, write, v0, end, ke, mode, seg, level, open_row, mac_op, PREA, ACTAB, COMP, base):
    """The MAC records of one block (columns v0:end, in segments), opening
    each row with PREA + ACTAB at bank level; returns (p, open_row)."""
    rstep = ke if mode == 0 else 0
    x = v0
    while x < end:
        n = min(end, (x // seg + 1) * seg) - x
        if level == 0:
            row, tb = x // 32, 0
        elif level == 1:
            row, tb = x // 128, (x // 32) % 4
        else:
            row, tb = x // 1024, 0
        if level == 0 and open_row != row:
            if open_row != -1:
                p = _rec(out, p, write, PREA, 0, 0, 0, 1, COMP, 0, 0, -1, 0, 0, 0)
            p = _rec(out, p, write, ACTAB, 0, row, 0, 1, COMP, 0, 0, -1, 0, 0, 0)
            open_row = row
        p = _rec(out, p, write, mac_op, tb, row, x % seg, n, COMP, x - v0, rstep, -1, mode, base, 0)
        x += n
    return p, open_row


@njit(nogil=True, cache=True, inline="always")
def _scratch(C, KI, P):
    """`gemv_stream`'s scratch for one load / drain: per command its bank,
    route source / destination per unit, its place in bank-group order; per
    pCH its items' first unit and entry, their count; per unit its row;
    per pCH and entry the items so far (count, units, items); per unit and
    entry its item."""
    maxcmd = C * KI + C
    return (np.empty(maxcmd, np.int64), np.empty((maxcmd, C), np.int64), np.empty((maxcmd, C), np.int64),
            np.empty(maxcmd, np.int64), np.empty((P, C * KI + C), np.int64), np.empty((P, C * KI + C), np.int64),
            np.zeros(P, np.int64), np.empty(C, np.int64), np.zeros((P, KI), np.int64), np.empty((P, KI, C), np.int64),
            np.empty((P, KI, C), np.int64), np.empty((C, KI), np.int64))


@njit(nogil=True, cache=True, inline="always")
def _sb_rows(out, p, write, rb, h, free, fresh, sbrow, b, v, j, sb_cap, n_cls, pend_row, pend_item, n_pend, used_max,
             BARRIER, RDACC, READB):
    """Drain: softmax-buffer rows for output block (b, v, j), one per
    result class, flushing the completed rows first when too few are free.
    Returns (p, h, n_pend, used_max, ok); not ok: the buffer overflows (the
    Python form raises PimCompileError)."""
    nfree = 0
    for x in range(sb_cap):
        nfree += free[x]
    if nfree < n_cls and n_pend > 0:
        # sb.flush(em, 1): a barrier, RDACC per completed row, rows released
        p, h = _flush(out, p, write, rb, h, pend_row, pend_item, n_pend, BARRIER, RDACC, READB, False)
        for q in range(n_pend):
            free[pend_row[q]] = True
        n_pend = 0
        nfree = 0
        for x in range(sb_cap):
            nfree += free[x]
    if n_cls > nfree:
        return p, h, n_pend, used_max, False
    got = 0
    for x in range(sb_cap):
        if got == n_cls:
            break
        if free[x]:
            free[x] = False
            fresh[x] = True
            sbrow[b, v, j, got] = x
            used_max = max(used_max, x + 1)
            got += 1
    return p, h, n_pend, used_max, True


@njit(nogil=True, cache=True, inline="always")
def _drain_records(out, p, write, wroutes, r, m, C, P, n_item, item_c, core_base, unit_item, row_of, cmd_bank,
                   cmd_dst, bpbg, order, rsrc, rdst, fresh, MVSB, COMP):
    """Drain: the m MVSB commands (`_drain_items`) in bank-group order, and
    their route rows (destination rows; a source of 1 on a row's first
    write) when wroutes.  Returns (p, r)."""
    _name_banks(cmd_bank, m, P, n_item, item_c, core_base)
    if wroutes:
        for t in range(m):
            for c in range(C):
                cmd_dst[t, c] = -1
        for c in range(C):
            cmd_dst[unit_item[c, 0], c] = row_of[c]
    _bg_order(cmd_bank, m, bpbg, order)
    for t in range(m):
        o = order[t]
        if wroutes:
            for c in range(C):
                d = cmd_dst[o, c]
                rsrc[r, c] = 1 if (d >= 0 and fresh[d]) else -1
                rdst[r, c] = d
            for c in range(C):
                d = cmd_dst[o, c]
                if d >= 0:
                    fresh[d] = False
        p = _rec(out, p, write, MVSB, cmd_bank[o], 0, 0, 1, COMP, 0, 0, -1, 0, r, 0)
        r += 1
    return p, r


@njit(nogil=True, cache=True, inline="always")
def _load_records(out, p, write, wroutes, r, m, C, P, n_item, item_c, core_base, unit_item, ids, b, v, e0, ke, lbase,
                  cmd_bank, cmd_src, cmd_dst, bpbg, order, rsrc, rdst, WRGB, REARR):
    """Load: the m WRGB commands (`_load_items`) of entries e0 : e0 + ke of
    (b, v) in bank-group order, and their route rows (host row id, buffer
    entry lbase + e) when wroutes.  Returns (p, r)."""
    _name_banks(cmd_bank, m, P, n_item, item_c, core_base)
    if wroutes:
        for t in range(m):
            for c in range(C):
                cmd_src[t, c] = -1
                cmd_dst[t, c] = 0
        for c in range(C):
            for e in range(ke):
                t = unit_item[c, e]
                cmd_src[t, c] = ids[c, b, v, e0 + e]
                cmd_dst[t, c] = lbase + e
    _bg_order(cmd_bank, m, bpbg, order)
    for t in range(m):
        o = order[t]
        if wroutes:
            for c in range(C):
                rsrc[r, c] = cmd_src[o, c]
                rdst[r, c] = cmd_dst[o, c]
        p = _rec(out, p, write, WRGB, cmd_bank[o], 0, 0, 1, REARR, 0, 0, 0, 0, r, 0)
        r += 1
    return p, r


@njit_phases(nogil=True, cache=True)
def gemv_stream(prm, start, size, ids, pch, core_base, cluster, cls, out, rsrc, rdst, rb):
    """The kernel records of `lower._gemv_program` after the placement and
    its barrier (broadcast granularity), written when out has columns.

    prm   [n_b, n_v, t_out, t_in, KI, E, n_o, chunk, traverse_is, reuse,
           prefetch, n_cls, sb_cap, mode, level, seg, banks_per_bg, C,
           mac_op, op codes BARRIER, WRGB, MVSB, RDACC, ACTAB, PREA,
           phases REARRANGE, COMPUTE, READBACK]
    start [n_b, t_out, t_in], size [t_out, t_in]: the plan's blocks
    ids   [C, n_b, n_v, E] host row ids (`host_ids`)
    pch, core_base, cluster, cls [C]: a unit's pseudo-channel, first bank,
          adder tree and result class (0..n_cls-1 in sorted class order)
    out   [14, N] records; rsrc / rdst [R, C] route rows; rb [H, 4] the
          read-back rows' (class, b, v, j).  Each is written when it has
          rows (records and rb: out has columns); with none, a count.
    Returns (records, routes, read-back rows, softmax-buffer rows used).
    A step's phases (load, MACs, drain, flush) are helpers inlined here.
    """
    (n_b, n_v, t_out, t_in, KI, E, _n_o, chunk, traverse_is, reuse, prefetch, n_cls, sb_cap, mode, level,
     seg, bpbg, C, mac_op, BARRIER, WRGB, MVSB, RDACC, ACTAB, PREA, REARR, COMP, READB) = (
        prm[0], prm[1], prm[2], prm[3], prm[4], prm[5], prm[6], prm[7], prm[8], prm[9], prm[10], prm[11],
        prm[12], prm[13], prm[14], prm[15], prm[16], prm[17], prm[18], prm[19], prm[20], prm[21], prm[22],
        prm[23], prm[24], prm[25], prm[26], prm[27])
    write = out.shape[1] > 0                # the records
    wroutes = rsrc.shape[0] > 0             # the route rows (only `execute` reads them)
    # the steps (as the Python form lists them)
    sb_, sv_, sj_, si_, sdr, scp = _gemv_steps(n_b, n_v, t_out, t_in, chunk, traverse_is)
    S = sb_.shape[0]
    # state
    p = 0                                   # records
    r = 0                                   # routes
    h = 0                                   # read-back rows
    free = np.ones(sb_cap, np.bool_)
    fresh = np.zeros(sb_cap, np.bool_)
    used_max = 0
    pend_row = np.empty(sb_cap, np.int64)
    pend_item = np.empty((sb_cap, 4), np.int64)
    n_pend = 0
    sbrow = np.full((n_b, n_v, t_out, n_cls), -1, np.int64)
    open_row = -1
    P = 0
    for c in range(C):
        P = max(P, pch[c] + 1)
    # scratch for one load / drain
    (cmd_bank, cmd_src, cmd_dst, order, item_c, item_e, n_item, row_of, n_e, e_unit, e_item,
     unit_item) = _scratch(C, KI, P)

    prefetched = np.full(S + 1, -1, np.int64)
    region = 0
    base = 0
    pending = -1
    for k in range(S + 1):
        # ---- one iteration of the Python form's step loop; k == S: the tail ----
        if k == S:
            if pending < 0:
                break
            p = _rec(out, p, write, BARRIER, 0, 0, 0, 1, COMP, 0, 0, -1, 0, 0, 0)
        elif k == 0:
            pass
        else:
            p = _rec(out, p, write, BARRIER, 0, 0, 0, 1, COMP, 0, 0, -1, 0, 0, 0)
        # the pending drain, then this step's load
        for stage in range(3):
            if stage == 0:
                if k == 0 or pending < 0:
                    continue
                # ---- drain(b, v, j, complete) of step `pending` ----
                b, v, j, cp = sb_[pending], sv_[pending], sj_[pending], scp[pending]
                pending = -1
                if sbrow[b, v, j, 0] < 0:
                    p, h, n_pend, used_max, ok = _sb_rows(out, p, write, rb, h, free, fresh, sbrow, b, v, j, sb_cap,
                                                          n_cls, pend_row, pend_item, n_pend, used_max, BARRIER,
                                                          RDACC, READB)
                    if not ok:
                        return -1, -1, -1, -1       # the Python form raises PimCompileError
                for c in range(C):
                    row_of[c] = sbrow[b, v, j, cls[c]]
                # _drain_commands: per pCH, one (adder tree, row) per command
                m = _drain_items(pch, cluster, row_of, C, P, item_c, n_item, unit_item)
                if not write and not wroutes:       # counting: m commands, m routes
                    p += m
                    r += m
                    if cp:
                        for a in range(n_cls):
                            pend_row[n_pend] = sbrow[b, v, j, a]
                            n_pend += 1
                    continue
                p, r = _drain_records(out, p, write, wroutes, r, m, C, P, n_item, item_c, core_base, unit_item,
                                      row_of, cmd_bank, cmd_dst, bpbg, order, rsrc, rdst, fresh, MVSB, COMP)
                if cp:
                    for a in range(n_cls):
                        pend_row[n_pend] = sbrow[b, v, j, a]
                        pend_item[n_pend, 0], pend_item[n_pend, 1] = a, b
                        pend_item[n_pend, 2], pend_item[n_pend, 3] = v, j
                        n_pend += 1
                continue
            if k == S:
                continue
            # ---- stage 1: this step's load (k == 0, or a new key not prefetched); stage 2: MACs ----
            if stage == 1:
                if k == 0:
                    lk, lbase = 0, 0
                else:
                    new_load = (not reuse) or (sb_[k] != sb_[k - 1] or sv_[k] != sv_[k - 1] or si_[k] != si_[k - 1])
                    if not new_load:
                        continue
                    if prefetched[k] >= 0:
                        base = prefetched[k]
                        continue
                    base = 0
                    lk, lbase = k, 0
            else:
                # ---- MACs of the block, then the next step's prefetch, then the drain is pending ----
                b, v, j, i = sb_[k], sv_[k], sj_[k], si_[k]
                v0 = start[b, j, i]
                p, open_row = _macs(out, p, write, v0, v0 + size[j, i], min(KI, E - KI * i), mode, seg, level,
                                    open_row, mac_op, PREA, ACTAB, COMP, base)
                lk = -1
                if prefetch and k + 1 < S:
                    if (not reuse) or (sb_[k + 1] != sb_[k] or sv_[k + 1] != sv_[k] or si_[k + 1] != si_[k]):
                        region ^= 1
                        prefetched[k + 1] = region * KI
                        lk, lbase = k + 1, region * KI
                if sdr[k]:
                    pending = k
                if lk < 0:
                    continue
            # ---- emit_load(lk, lbase): WRGB commands, one row per pCH each ----
            b, v, i = sb_[lk], sv_[lk], si_[lk]
            ke = min(KI, E - KI * i)
            e0 = KI * i
            m = _load_items(ids, b, v, e0, ke, pch, C, P, item_c, item_e, n_item, n_e, e_unit, e_item, unit_item)
            if not write and not wroutes:           # counting: m commands, m routes
                p += m
                r += m
                if stage == 1:
                    p += 1
                continue
            p, r = _load_records(out, p, write, wroutes, r, m, C, P, n_item, item_c, core_base, unit_item, ids, b, v,
                                 e0, ke, lbase, cmd_bank, cmd_src, cmd_dst, bpbg, order, rsrc, rdst, WRGB, REARR)
            if stage == 1:
                p = _rec(out, p, write, BARRIER, 0, 0, 0, 1, COMP, 0, 0, -1, 0, 0, 0)
    # the final sb.flush(em, 1, final=True)
    if n_pend > 0:
        p, h = _flush(out, p, write, rb, h, pend_row, pend_item, n_pend, BARRIER, RDACC, READB, True)
    return p, r, h, used_max


@njit(nogil=True, cache=True)
def placement_order(run_bic, n_per_bic, bank_rank, core_base, cores):
    """Record order of `stream.place_matrix`: for k = 0, 1, ...: every bank
    (in bank_rank order) that has a k-th run -- core c's bank
    core_base[c] + bic holds the runs of that bic, in order.

    run_bic [R] the runs' bic, sorted; n_per_bic [B] runs per bic;
    bank_rank [64] a bank's place in `program.bank_order` (-1 unused).
    Returns (core [N], run [N]) int64: each record's core and run."""
    B = n_per_bic.shape[0]
    first = np.zeros(B + 1, np.int64)
    for x in range(B):
        first[x + 1] = first[x] + n_per_bic[x]
    # banks in bank_order, each with its (core, bic)
    nb = bank_rank.shape[0]
    bank_core = np.full(nb, -1, np.int64)
    bank_bic = np.full(nb, -1, np.int64)
    for c in range(cores):
        for x in range(B):
            if n_per_bic[x] > 0:
                bk = core_base[c] + run_bic[first[x]]
                bank_core[bank_rank[bk]] = c
                bank_bic[bank_rank[bk]] = x
    maxk = 0
    for x in range(B):
        maxk = max(maxk, n_per_bic[x])
    N = cores * first[B]
    core = np.empty(N, np.int64)
    run = np.empty(N, np.int64)
    p = 0
    for k in range(maxk):
        for t in range(nb):
            x = bank_bic[t]
            if x >= 0 and k < n_per_bic[x]:
                core[p] = bank_core[t]
                run[p] = first[x] + k
                p += 1
    return core, run


@njit(nogil=True, cache=True)
def load_commands(ids, dst, pch, core_base, banks_per_bg):
    """`stream.load_commands` (broadcast granularity) when every unit asks
    for entries dst[e] (distinct) of rows ids[c, e]: per pCH its distinct
    (row, entry) items in order of first appearance (unit, entry), command t
    carrying every pCH's t-th item, named by the first pCH's first unit;
    then round-robin over bank groups.  Returns (bank [m], src [m, C],
    dst [m, C]) int64 in issue order (src -1 / dst 0 where a unit takes
    nothing)."""
    C, ke = ids.shape
    P = 0
    for c in range(C):
        P = max(P, pch[c] + 1)
    item_c = np.empty((P, C * ke), np.int64)
    item_e = np.empty((P, C * ke), np.int64)
    n_item = np.zeros(P, np.int64)
    n_e = np.zeros((P, ke), np.int64)
    e_unit = np.empty((P, ke, C), np.int64)
    e_item = np.empty((P, ke, C), np.int64)
    unit_item = np.empty((C, ke), np.int64)
    ids4 = np.ascontiguousarray(ids).reshape(C, 1, 1, ke)       # one (b, v), entries 0..ke-1
    m = _load_items(ids4, 0, 0, 0, ke, pch, C, P, item_c, item_e, n_item, n_e, e_unit, e_item, unit_item)
    bank = np.empty(m, np.int64)
    _name_banks(bank, m, P, n_item, item_c, core_base)
    src = np.full((m, C), -1, np.int64)
    dd = np.zeros((m, C), np.int64)
    for c in range(C):
        for e in range(ke):
            t = unit_item[c, e]
            src[t, c] = ids[c, e]
            dd[t, c] = dst[e]
    order = np.empty(m, np.int64)
    _bg_order(bank, m, banks_per_bg, order)
    return bank[order], src[order], dd[order]
