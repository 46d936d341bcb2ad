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
