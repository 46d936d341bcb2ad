"""Compiled (numba) command stream of Newton's GEMV programs.

Why.  The exhaustive search lowers every draft of an op; a GEMV
20480 x 5120 draft on Newton has up to ~10^5 COMP records per group, and
`lower._Stream` (the readable definition, kept for the tests) makes one
Python call per COMP run -- about half a second per draft.  Here one
compiled walk of the same loop nest writes the records into a
preallocated int table (milliseconds).  `tests/backends/newton/test_newton_native.py`
holds the two record-for-record identical.

The walk runs once, writing into per-thread scratch sized by an upper
bound on the records / host rows / read runs (`_stream_bound`), then copied
into the program's table; only when the bound is short does a counting walk
(`write=False`) size the arrays first.
"""
from __future__ import annotations

import threading

import numpy as np
from numba import njit

from ...lower.native import put_record

# the record fields in `program.RECORD_FIELDS` order
_F = 14


@njit(nogil=True, cache=True, inline="always")
def _rec(out, p, write, op, bank, row, col, n, phase, reg, src, aux, arg, core):
    """Record p (reg_step, resident, sync 0) when it fits; returns p + 1."""
    if write and p < out.shape[1]:
        put_record(out, p, op, bank, row, col, n, phase, reg, 0, src, aux, arg, core, 0, 0)
    return p + 1


# state slots of a walk
_P, _NR, _NU, _OPEN_ALL, _ANY_CORE, _LOADED = 0, 1, 2, 3, 4, 5


@njit(nogil=True, cache=True, inline="always")
def _load(st, prm, seg_cols, gw_banks, codes, out, rows, cnt, write, open_core, ps, bb, vg, ig):
    """`_Stream.load`: GWRITE_k of the buffer load (pass, b, vector group, chunk group)."""
    n_v, t_in, kv, ki, reuse, buf_cols = prm[1], prm[3], prm[4], prm[5], prm[12] != 0, prm[14]
    if (reuse and st[_LOADED] == ps and st[_LOADED + 1] == bb and st[_LOADED + 2] == vg
            and st[_LOADED + 3] == ig):
        return
    p = st[_P]
    if st[_OPEN_ALL] >= 0 or st[_ANY_CORE] != 0:               # close every bank
        p = _rec(out, p, write, codes[0], 0, 0, 0, 1, codes[6], 0, -1, 0, 0, -1)
        cnt[6] += 1
    st[_OPEN_ALL] = -1
    if st[_ANY_CORE] != 0:
        open_core[:] = -1
        st[_ANY_CORE] = 0
    nbuf = kv * ki
    width = 0
    for jj in range(ki):
        ic = ig * ki + jj
        if ic < t_in and seg_cols[ic] > width:
            width = seg_cols[ic]
    n_gw = gw_banks.shape[0]
    nr = st[_NR]
    t = 0
    for j in range(nbuf):
        v = vg * kv + j // ki
        i = ig * ki + j % ki
        ok = v < n_v and i < t_in
        for cc in range(width):
            if write and nr < rows.shape[0]:
                if ok:
                    rows[nr, 0], rows[nr, 1], rows[nr, 2], rows[nr, 3], rows[nr, 4] = ps, bb, v, i, cc
                else:
                    rows[nr, 0], rows[nr, 1], rows[nr, 2], rows[nr, 3], rows[nr, 4] = -1, 0, 0, 0, 0
            p = _rec(out, p, write, codes[1], gw_banks[t % n_gw], -1, 0, 1, codes[5], j * buf_cols + cc,
                     codes[8], nbuf, nr, -1)
            nr += 1
            t += 1
    cnt[0] += 1
    cnt[1] += t
    st[_P], st[_NR] = p, nr
    st[_LOADED], st[_LOADED + 1], st[_LOADED + 2], st[_LOADED + 3] = ps, bb, vg, ig


@njit(nogil=True, cache=True, inline="always")
def _comp(st, prm, seg_row, seg_col, seg_cols, cls_cores, c0, c1, seg_ok, codes, out, runs, cnt, write, open_core,
          bb, o, i, vg, ji, ol):
    """`_Stream.comp`: the rows of segment (b, o, i), MACed with every vector of the load."""
    n_v, kv, ki, lo, per_core, buf_cols, cols = prm[1], prm[4], prm[5], prm[6], prm[13] != 0, prm[14], prm[15]
    G_ACT, COMP, COMPUTE = codes[2], codes[3], codes[6]
    p, nu = st[_P], st[_NU]
    ncols = seg_cols[i]
    row = seg_row[bb, o, i] - 1
    col = seg_col[bb, o, i]
    off = 0
    while off < ncols:
        row += 1                                   # the segment's next row (from column 0 after the first)
        if off > 0:
            col = 0
        n = min(ncols - off, cols - col)
        if per_core:
            for k in range(c0, c1):
                c = cls_cores[k]
                if not seg_ok[c, bb, o, i]:
                    continue
                open_core[c] = row                       # implicit single-bank ACT
                st[_ANY_CORE] = 1
                if write and nu < runs.shape[0]:
                    runs[nu, 0], runs[nu, 1], runs[nu, 2] = c, row * cols + col, n
                nu += 1
                for jv in range(kv):
                    if vg * kv + jv < n_v:
                        p = _rec(out, p, write, COMP, c, row, col, n, COMPUTE, (jv * ki + ji) * buf_cols + off,
                                 -1, 0, jv * lo + ol, c)
                        cnt[3] += n
                        cnt[4] += 1
        else:
            if st[_OPEN_ALL] != row:
                p = _rec(out, p, write, G_ACT, 0, row, 0, 1, COMPUTE, 0, -1, 0, 0, -1)
                cnt[2] += 1
                st[_OPEN_ALL] = row
            if write and nu < runs.shape[0]:
                runs[nu, 0], runs[nu, 1], runs[nu, 2] = -1, row * cols + col, n
            nu += 1
            for jv in range(kv):
                if vg * kv + jv < n_v:
                    p = _rec(out, p, write, COMP, 0, row, col, n, COMPUTE, (jv * ki + ji) * buf_cols + off,
                             -1, 0, jv * lo + ol, -1)
                    cnt[3] += n
                    cnt[4] += 1
        off += n
    st[_P], st[_NU] = p, nu


@njit(nogil=True, cache=True, inline="always")
def _readres(st, prm, cls_cores, c0, c1, need, codes, out, cnt, write, open_core, q):
    """`_Stream.readres` of host slot q."""
    latches, per_core, rr_all, rr_one = prm[4] * prm[6], prm[13] != 0, prm[16], prm[17]
    READRES, READBACK = codes[4], codes[7]
    p = st[_P]
    if per_core:
        for k in range(c0, c1):
            c = cls_cores[k]
            if need[c, q]:
                p = _rec(out, p, write, READRES, c, open_core[c], 0, rr_one, READBACK, q, -1, latches, 0, c)
                cnt[5] += 1
    else:
        p = _rec(out, p, write, READRES, 0, st[_OPEN_ALL], 0, rr_all, READBACK, q, -1, latches, 0, -1)
        cnt[5] += 1
    st[_P] = p


@njit(nogil=True, cache=True)
def _walk(prm, seg_base, seg_cols, cls_ptr, cls_cores, seg_ok, need, gw_banks, codes,
          out, rows, runs, cnt, write):
    """`_Stream.build` of one group: one pass per vector class.

    prm      [n_b, n_v, n_o, t_in, kv, ki, lo, n_vg, n_ig, n_ob, slots, is_os,
              reuse, per_core, buf_cols, cols, rr_all, rr_one, cores]
    seg_base [n_b, n_o, t_in], seg_cols [t_in]: the plan's segments
    cls_ptr  [n_pass + 1], cls_cores: the vector classes' cores (CSR)
    seg_ok   [C, n_b, n_o, t_in], need [C, Q] (per-core drafts; else unused)
    gw_banks the GWRITE banks (one per bank group)
    codes    [PREA, GWRITE, G_ACT, COMP, READRES, REARRANGE, COMPUTE,
              READBACK, V_LAYOUT]
    out      [14, N] records; rows [R, 5] host-data rows (pass, b, v, i, cc;
             -1, 0, 0, 0, 0 for padding); runs [U, 3] (bank or -1 for every
             bank, first flat column, n) of the COMP reads; written when `write`.
    cnt      [7] GWRITE, GWRITE_columns, G_ACT, COMP, COMP_records,
             READRES, PREA (accumulated).
    Returns (records, host rows, read runs).
    """
    n_b, n_o, t_in = prm[0], prm[2], prm[3]
    ki, lo, n_vg, n_ig, n_ob, slots = prm[5], prm[6], prm[7], prm[8], prm[9], prm[10]
    is_os, reuse, cores = prm[11] != 0, prm[12] != 0, prm[18]
    st = np.zeros(_LOADED + 4, np.int64)
    st[_OPEN_ALL] = -1
    st[_LOADED:] = -1
    open_core = np.full(max(cores, 1), -1, np.int64)
    seg_row = seg_base // prm[15]                  # (row, column) of every segment's first column
    seg_col = seg_base - seg_row * prm[15]
    for ps in range(cls_ptr.shape[0] - 1):
        c0, c1 = cls_ptr[ps], cls_ptr[ps + 1]
        for bb in range(n_b):
            for vg in range(n_vg):
                for a in range(n_ob if is_os else n_ig):
                    if not is_os and reuse:
                        _load(st, prm, seg_cols, gw_banks, codes, out, rows, cnt, write, open_core, ps, bb, vg, a)
                    for z in range(n_ig if is_os else n_ob):
                        ob, ig = (a, z) if is_os else (z, a)
                        if is_os and reuse:
                            _load(st, prm, seg_cols, gw_banks, codes, out, rows, cnt, write, open_core,
                                  ps, bb, vg, ig)
                        for ji in range(ki):                           # `_Stream._step`
                            i = ig * ki + ji
                            if i >= t_in:
                                continue
                            for ol in range(lo):
                                o = ob * lo + ol
                                if o >= n_o:
                                    continue
                                if not reuse:
                                    _load(st, prm, seg_cols, gw_banks, codes, out, rows, cnt, write, open_core,
                                          ps, bb, vg, ig)
                                _comp(st, prm, seg_row, seg_col, seg_cols, cls_cores, c0, c1, seg_ok, codes, out, runs,
                                      cnt, write, open_core, bb, o, i, vg, ji, ol)
                                if not reuse:
                                    q = (((ps * n_b + bb) * n_vg + vg) * n_ob + ob) * slots + i
                                    _readres(st, prm, cls_cores, c0, c1, need, codes, out, cnt, write, open_core, q)
                        if not is_os and reuse:
                            q = (((ps * n_b + bb) * n_vg + vg) * n_ob + ob) * slots + ig
                            _readres(st, prm, cls_cores, c0, c1, need, codes, out, cnt, write, open_core, q)
                    if is_os and reuse:
                        q = (((ps * n_b + bb) * n_vg + vg) * n_ob + a) * slots
                        _readres(st, prm, cls_cores, c0, c1, need, codes, out, cnt, write, open_core, q)
    return st[_P], st[_NR], st[_NU]


@njit(nogil=True, cache=True)
def sorted_columns(first, n):
    """Sorted unique flat columns of the runs [first[u], first[u] + n[u])."""
    top = 0
    for u in range(first.shape[0]):
        if n[u] > 0 and first[u] + n[u] > top:
            top = first[u] + n[u]
    seen = np.zeros(top, np.bool_)
    m = 0
    for u in range(first.shape[0]):
        for k in range(first[u], first[u] + n[u]):
            if not seen[k]:
                seen[k] = True
                m += 1
    out = np.empty(m, np.int64)
    j = 0
    for k in range(top):
        if seen[k]:
            out[j] = k
            j += 1
    return out


_local = threading.local()
# scratch arrays beyond this many bytes are not kept between calls
SCRATCH_LIMIT = 1 << 28


def _scratch(name: str, shape: tuple, dtype) -> np.ndarray:
    """A C-contiguous [shape] array of this thread's scratch `name` (grown
    when too small; contents undefined)."""
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    buf = getattr(_local, name, None)
    if buf is None or buf.size < size:
        buf = np.empty(max(size, 1), np.uint8)
        if size <= SCRATCH_LIMIT:
            setattr(_local, name, buf)
    return buf[:size].view(dtype).reshape(shape)


def stream(prm, seg_base, seg_cols, cls_ptr, cls_cores, seg_ok, need, gw_banks, codes, bound=None):
    """The records ([14, N] int32), host rows ([R, 5] int64), COMP read runs
    ([U, 3] int64: bank or -1, first flat column, n) and command counts
    ([7] int64) of one group's kernel; arguments as `_walk`'s.

    bound: (records, rows, runs) at least as many as the walk writes: one
    walk into this thread's scratch arrays of that size, and the results
    are views of them, valid until the next call (copy what you keep);
    when short, or None, a counting walk sizes fresh arrays first.  Why the
    scratch: the records are written once more anyway (placement + kernel
    into one table), and on a busy host first-touch page faults of a fresh
    table cost more than the walk itself."""
    args = (np.ascontiguousarray(prm, np.int64), np.ascontiguousarray(seg_base, np.int64),
            np.ascontiguousarray(seg_cols, np.int64), np.ascontiguousarray(cls_ptr, np.int64),
            np.ascontiguousarray(cls_cores, np.int64), np.ascontiguousarray(seg_ok, np.bool_),
            np.ascontiguousarray(need, np.bool_), np.ascontiguousarray(gw_banks, np.int64),
            np.ascontiguousarray(codes, np.int64))
    if bound is not None:
        out = _scratch("out", (_F, int(bound[0])), np.int32)
        rows = _scratch("rows", (int(bound[1]), 5), np.int64)
        runs = _scratch("runs", (int(bound[2]), 3), np.int64)
        cnt = np.zeros(7, np.int64)
        n, nr, nu = _walk(*args, out, rows, runs, cnt, True)
        if n <= out.shape[1] and nr <= rows.shape[0] and nu <= runs.shape[0]:
            return out[:, :n], rows[:nr], runs[:nu], cnt
    cnt = np.zeros(7, np.int64)
    n, nr, nu = _walk(*args, np.zeros((_F, 0), np.int32), np.zeros((0, 5), np.int64),
                      np.zeros((0, 3), np.int64), cnt, False)
    out = np.empty((_F, n), np.int32)
    rows = np.empty((nr, 5), np.int64)
    runs = np.empty((nu, 3), np.int64)
    cnt = np.zeros(7, np.int64)
    _walk(*args, out, rows, runs, cnt, True)
    return out, rows, runs, cnt
