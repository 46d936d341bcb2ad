"""Compiled (numba) inner loops of the lowerings: the record-assembly steps
whose numpy form makes several passes over every record.

Why.  The exhaustive search lowers thousands of drafts of one op, and a
GEMV 4096x4096 draft on HBM-PIM has up to a million records; in numpy the
interleaving of per-invocation record slots (`program.select_slots`) fills a
[fields, invocations, slots] table column by column and then selects from
it -- two passes with strided writes, a third of the lowering time.  Here
each output record is written once.  The results are bit-identical to the
numpy forms, which stay in `program.py` as the readable definition and are
checked against these in `tests/lower/test_native_lowering.py`.
"""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(nogil=True, cache=True)
def interleave(mask, scalars, source, arrays, out):
    """Write the records of per-invocation slots, invocation-major, to out.

    mask     [K, S] bool   slot j present in invocation i
    scalars  [S, F] int32  the value of field f in slot j when source < 0
    source   [S, F] int64  row of `arrays` holding field f of slot j, or -1
    arrays   [A, K] int32  the fields that vary over invocations
    out      [F, N] int32  N = mask.sum(): for i = 0..K-1, its present
                           slots in slot order (a view into a stream's
                           record table, so the records are written once)
    """
    K, S = mask.shape
    F = scalars.shape[1]
    N = out.shape[1]
    ii = np.empty(N, np.int32)         # invocation and slot of every output record
    jj = np.empty(N, np.int32)
    p = 0
    for i in range(K):
        for j in range(S):
            if mask[i, j]:
                ii[p] = i
                jj[p] = j
                p += 1
    for f in range(F):                 # one field at a time: sequential writes
        row = out[f]
        constant, same = True, True
        for j in range(S):
            constant &= source[j, f] < 0
            same &= scalars[j, f] == scalars[0, f]
        if constant and same:          # one value in every slot (phase, core, ...)
            row[:] = scalars[0, f] if S > 0 else 0
        elif constant:                 # one value per slot (op, aux, ...)
            for p in range(N):
                row[p] = scalars[jj[p], f]
        else:
            for p in range(N):
                j = jj[p]
                s = source[j, f]
                row[p] = scalars[j, f] if s < 0 else arrays[s, ii[p]]


@njit(nogil=True, cache=True)
def column_runs(flat, cols):
    """(row, col, n) [R] int64 each: the runs of consecutive column indices
    of `flat` [L] int64 (flat = row * cols + col) that stay inside one row."""
    L = flat.shape[0]
    row = np.empty(L, np.int64)
    col = np.empty(L, np.int64)
    n = np.empty(L, np.int64)
    r = -1
    for i in range(L):
        v = flat[i]
        if r >= 0 and v == flat[i - 1] + 1 and v % cols != 0:
            n[r] += 1
        else:
            r += 1
            row[r] = v // cols
            col[r] = v % cols
            n[r] = 1
    return row[:r + 1].copy(), col[:r + 1].copy(), n[:r + 1].copy()


@njit(nogil=True, cache=True)
def class_totals(op, phase, resident, n, n_ops, n_phases):
    """One pass over records (flat [R] int32 arrays): (columns [n_ops,
    n_phases, 2] int64 -- the sum of n per opcode, phase and resident flag
    --, records [n_ops] int64 -- how many records have each opcode --, and
    the number of records with n > 0)."""
    columns = np.zeros((n_ops, n_phases, 2), np.int64)
    records = np.zeros(n_ops, np.int64)
    live = 0
    for r in range(op.shape[0]):
        o = op[r]
        columns[o, phase[r], 1 if resident[r] != 0 else 0] += n[r]
        records[o] += 1
        live += n[r] > 0
    return columns, records, live


@njit(nogil=True, cache=True, inline="always")
def put_record(out, p, op, bank, row, col, n, phase, reg, reg_step, src, aux, arg, core, resident, sync):
    """Record p of out [14, N] in `program.RECORD_FIELDS` order: the one
    writer every family's compiled record assembly uses (hbm-pim here,
    `backends/attacc/native.py`, `backends/newton/native.py`)."""
    out[0, p] = op
    out[1, p] = bank
    out[2, p] = row
    out[3, p] = col
    out[4, p] = n
    out[5, p] = phase
    out[6, p] = reg
    out[7, p] = reg_step
    out[8, p] = src
    out[9, p] = aux
    out[10, p] = arg
    out[11, p] = core
    out[12, p] = resident
    out[13, p] = sync


@njit(nogil=True, cache=True, inline="always")
def _put(out, p, op, bank, row, col, n, phase, reg, reg_step, src, aux, arg):
    """Record p of out [14, N] (core -1, resident 0, sync 0 -- `chunk`'s defaults)."""
    put_record(out, p, op, bank, row, col, n, phase, reg, reg_step, src, aux, arg, -1, 0, 0)


@njit(nogil=True, cache=True, inline="always")
def _phys_row(r):
    """`hbm_pim.phys_row` for one int (numba cannot call the numpy form)."""
    return (r & 0xFFF) | ((r >> 12) << 13)


@njit(nogil=True, cache=True)
def gemv_sequence(shape, flags, codes, order, geometry, out):
    """The kernel records of `hbm_pim._contraction` (a sequence of GEMVs
    per core: per invocation (b, v, j, i) the frame entry, the GRF_A write,
    the MAC column runs over the block, the GRF_B store and the frame exit),
    written to out [14, N] when it has N > 0 columns; returns N.  The
    numpy form is `hbm_pim._kernel_slots` (tests hold the two equal).

    shape  [n_b, n_v, t_out, t_in, ki, ko, n_par0, n_par1, res_base, slots]
    flags  [output_stationary, reuse, order_is]
    codes  [AB_WR, PIM_RD, PIM_WR, CONF_ROW, GRF_A_COL, GRF_A, GRF_B,
            ZERO_B, MODE, HOST_REG, MAC, STORE, REARRANGE, COMPUTE]
    order  [t_in] the input tiles' order within an output tile (os)
    geometry [cols, half]: columns per row; half 0 for an even / odd bank
           pair, else parity 1's first logical row in the unit's one bank
           (all-bank commands then address bank 0)
    """
    n_b, n_v, t_out, t_in, ki, ko, n_par0, n_par1, res_base, slots = (
        shape[0], shape[1], shape[2], shape[3], shape[4], shape[5], shape[6], shape[7], shape[8], shape[9])
    os_, reuse, order_is = flags[0] != 0, flags[1] != 0, flags[2] != 0
    AB_WR, PIM_RD, PIM_WR, CONF, GA_COL, GA, GB, ZERO_B, MODE, HOST, MAC, STORE, REARR, COMP = (
        codes[0], codes[1], codes[2], codes[3], codes[4], codes[5], codes[6], codes[7], codes[8], codes[9],
        codes[10], codes[11], codes[12], codes[13])
    write_out = out.shape[1] > 0
    cols, half = geometry[0], geometry[1]
    bursts = ki * ko
    runs = (bursts + cols - 1) // cols
    per_run = min(bursts, cols)
    one_frame = os_ and reuse                     # output-stationary with reuse: slots == 1
    A = t_out if os_ else t_in
    C = t_in if os_ else t_out
    p = 0
    prev_key = -1
    started = False
    for b in range(n_b):
        for v in range(n_v):
            for a in range(A):
                for c in range(C):
                    if os_:
                        j, i = a, order[c]
                    else:
                        j, i = c, a
                    key = (b * n_v + v) * t_in + i
                    write = (not reuse) or (not started) or key != prev_key
                    prev_key, started = key, True
                    if one_frame:
                        first, last, ss = c == 0, c == C - 1, 0
                    else:
                        first, last, ss = True, True, i
                    if first:
                        if write_out:
                            _put(out, p, AB_WR, 0, CONF, 0, 1, COMP, 0, 0, -1, ZERO_B, 0)
                        p += 1
                    if write:
                        if write_out:
                            _put(out, p, AB_WR, 1, CONF, GA_COL, ki, REARR, GA, 1, 0, HOST, key * ki)
                        p += 1
                    npar = n_par0 if i % 2 == 0 else n_par1
                    if order_is:
                        block = ((b * npar + i // 2) * t_out + j) * bursts
                    else:
                        block = ((b * t_out + j) * npar + i // 2) * bursts
                    par = i % 2
                    for r in range(runs):
                        if write_out:
                            start = block + r * cols
                            _put(out, p, PIM_RD, par if half == 0 else 0, _phys_row(start // cols + par * half),
                                 start % cols, per_run, COMP, r * cols, ko, 0, MAC, GA)
                        p += 1
                    if last:
                        if write_out:
                            f = (((b * n_v + v) * slots + ss) * t_out + j) * ko + res_base * cols
                            _put(out, p, PIM_WR, 1 if half == 0 else 0, _phys_row(f // cols + half), f % cols, ko,
                                 COMP, GB, 1, 2, STORE, 0)
                            _put(out, p + 1, AB_WR, 0, CONF, 0, 1, COMP, 0, 0, -1, MODE, 0)
                        p += 2
    return p
