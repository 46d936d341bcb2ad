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
def interleave(mask, scalars, source, arrays):
    """Records of per-invocation slots, invocation-major.

    mask     [K, S] bool   slot j present in invocation i
    scalars  [S, F] int32  the value of field f in slot j when source < 0
    source   [S, F] int64  row of `arrays` holding field f of slot j, or -1
    arrays   [A, K] int32  the fields that vary over invocations
    returns  [F, N] int32  N = mask.sum(): for i = 0..K-1, its present
                           slots in slot order
    """
    K, S = mask.shape
    F = scalars.shape[1]
    total = 0
    for i in range(K):
        for j in range(S):
            if mask[i, j]:
                total += 1
    out = np.empty((F, total), np.int32)
    p = 0
    for i in range(K):
        for j in range(S):
            if mask[i, j]:
                for f in range(F):
                    s = source[j, f]
                    out[f, p] = scalars[j, f] if s < 0 else arrays[s, i]
                p += 1
    return out


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
