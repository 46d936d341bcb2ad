"""Closed-form command counts of `backends/newton/lower.py`'s kernel, per group, for
every draft of a table at once (nothing is lowered).

A Newton / AiM group runs one command stream: per vector class of its
cores (a *pass*), per batch index and vector group, buffer loads (GWRITE
of `kv x ki` buffers, after a PREA), G_ACT of each matrix row the COMPs
read, COMP column MACs, and READRES of the latches.  Which of these a
draft issues how often follows from its plan (`newton._plan`: the padded
per-core box split into batch / vector-only / matrix-only outputs and the
reduction, chunks of `cc` columns, `kv` vectors and `ki` chunks per load,
`lo` outputs per latch block) and the data-block layout (segments packed
`cols // cc` per row in visit order, so a load's G_ACTs are the rows its
consecutive segments span):

    loads     os: n_b n_vg n_ob n_ig (n_b n_vg when one chunk group: the
              buffer keeps its contents across output blocks); is: n_b n_vg n_ig
    GWRITE    columns: loads x kv x ki x cc (the last chunk group may be narrower)
    COMP      records: n_b n_v n_o t_in (one per segment and vector), columns n_b n_v n_o n_rc
    G_ACT     rows spanned by each load's run of consecutive segments, per vector group
    READRES   os: n_b n_vg n_ob; is: n_b n_vg n_ig n_ob, each reading the
              latches of every bank (broadcast) or of one bank in 32 B bursts

The per-core box and the passes are the lowering's own (`newton_geometry`:
`lower.tiles`' bands for a halo set tiled by its combined index, the vector
classes of the fullest group), not `partition.verify.per_core_var_lengths`'
extents (those price VGG-16 3 x 3 drafts up to 38x over).

times the passes (broadcast granularity; per-core granularity commands a
class's cores one by one, so COMP and READRES also scale with the cores of
a class).  Why: a small MMTV on Newton that keeps several heads per bank
runs one GWRITE / G_ACT / COMP / READRES round per head, and no other
feature counts rounds (Newton MMTV [1, 4, 64, 32]: 274 compute cycles for
4 rounds against 96 for one).  The counts are features; the network learns
what a round costs.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from .commands import readres_bursts


def _cdiv(a, b):
    """Ceiling division, elementwise (int64; a divisor below 1 counts as 1)."""
    return -(-np.asarray(a, np.int64) // np.maximum(np.asarray(b, np.int64), 1))


COUNTS = ("passes", "loads", "gwrite_cols", "g_act", "comp", "comp_cols", "readres", "readres_bursts")


def unique_rows(a) -> tuple[np.ndarray, np.ndarray]:
    """`np.unique(a, axis=0, return_inverse=True)` of an int [n, m] array
    (the same rows in the same order, and each row's index among them),
    faster: the columns' offsets from their minima packed into one int64
    key (mixed radix, the first column most significant: the rows' order),
    then a 1-D unique; np.unique's own way when the ranges overflow 62 bits."""
    a = np.asarray(a, np.int64)
    n, m = a.shape
    if n == 0:
        return a[:0], np.zeros(0, np.int64)
    lo = a.min(axis=0)
    radix = a.max(axis=0) - lo + 1
    if float(np.prod(radix.astype(np.float64))) >= 2.0 ** 62:
        uniq, inv = np.unique(a, axis=0, return_inverse=True)
        return uniq, np.asarray(inv).reshape(-1)
    code = np.zeros(n, np.int64)
    for j in range(m):
        code = code * radix[j] + (a[:, j] - lo[j])
    _, first, inv = np.unique(code, return_index=True, return_inverse=True)
    return a[first], np.asarray(inv).reshape(-1)


def _pow2_floor(n):
    n = np.maximum(np.asarray(n, np.int64), 1)
    return (2 ** np.floor(np.log2(n))).astype(np.int64)


def _spans(n_loads, segs, per_row):
    """Rows spanned by n_loads consecutive runs of `segs` segments each,
    packed `per_row` to a row: sum_j (floor((j s + s - 1) / r) - floor(j s / r) + 1)
    = floor(N s / r) + N - floor(N / (r / gcd(s, r)))."""
    N, s, r = (np.asarray(a, np.int64) for a in (n_loads, segs, per_row))
    r = np.maximum(r, 1)
    return N * s // r + N - N // (r // np.gcd(s, r))


def _ragged_spans(n_b: int, n_o: int, t_in: int, lo: int, ki: int, is_flow: bool, per_row: int) -> int:
    """Rows spanned by the runs of consecutive segments the loads of one vector
    group read (each load starts with every row closed), when the loads do not
    all read as many segments: os, per b, output block ob x chunk group ig
    (lo_ob x ki_ig segments); is, per b, chunk group ig (n_o x ki_ig)."""
    n_ob, n_ig = -(-n_o // lo), -(-t_in // ki)
    lo_ob = np.minimum(lo, n_o - np.arange(n_ob) * lo)
    ki_ig = np.minimum(ki, t_in - np.arange(n_ig) * ki)
    per_b = (n_o * ki_ig) if is_flow else (lo_ob[:, None] * ki_ig[None, :]).ravel()
    s = np.tile(per_b, n_b).astype(np.int64)
    p = np.concatenate([[0], np.cumsum(s)[:-1]])
    return int(((p + s - 1) // per_row - p // per_row + 1).sum())


@lru_cache(maxsize=4096)
def _ragged_cached(*key) -> int:
    return _ragged_spans(*key)


def newton_geometry(op, vvars: set, sets, reps, tile, groups, cores) -> dict:
    """The lowering's per-core geometry of every draft ([n] int64 each):
    "lens" (var -> padded box length, `lower.tiles.CoreTiles.box`), "passes"
    (vector classes of the fullest group, `lower._classes`) and
    "busy" ([n, S]: cores with work of the fullest group along each set).

    vvars: loop vars of the vector operand; reps / tile / groups / cores
    [n, S]: each set's mapping candidate, data-tile length, groups and cores.

    Why not `partition.verify.per_core_var_lengths`: a convolution's halo set
    (h, kh) tiled by its combined index h + kh gives a core every h of its
    band widened by the halo (tile + K - 1) and every kh, where that
    function keeps the extents; and the cores of a group then hold the same
    filter rows (one vector class) except the edge cores, whose band cuts kh.
    Both follow `lower.tiles._compute_core_tiles` here, per distinct (set,
    candidate, tile, groups, cores) -- a table has few -- by walking the
    set's tiles tau = group digit x cores + core digit."""
    from ...lower.tiles import band_box
    ext = op.extents
    reps, tile, groups, cores = (np.asarray(a, np.int64) for a in (reps, tile, groups, cores))
    n = reps.shape[0]
    outs = list(op.output_vars)
    dims = {v for v in outs if v in vvars} | set(op.reduction_vars)
    # a band is part of a core's vector signature only when every variable it reads is a vector dim
    lens = {v: np.full(n, e, np.int64) for v, e in ext.items()}
    passes = np.ones(n, np.int64)
    busy = np.ones((n, len(sets)), np.int64)
    for si, s in enumerate(sets):
        key = np.stack([reps[:, si], tile[:, si], groups[:, si], cores[:, si]], 1)
        uniq, inv = unique_rows(key)
        svars = list(s.vars)
        for u, (r, t, g, c) in enumerate(uniq.tolist()):
            m = s.mapping(r)
            lo, length = s.extent(r, ext)
            tau = np.arange(g * c, dtype=np.int64)
            a = lo + tau * t
            b = np.minimum(a + t, lo + length)
            rng = {v: (np.zeros_like(tau), np.full_like(tau, ext[v])) for v in svars}
            v1 = m.single_var
            if v1 is not None:
                rng[v1] = (np.minimum(a, ext[v1]), np.minimum(np.maximum(a, b), ext[v1]))
                band = None
            else:
                rng.update(band_box(m, a, b, ext))
                band = (a, b) if set(m.vars) <= dims else None
            ln = {v: np.maximum(0, h - l) for v, (l, h) in rng.items()}
            rows = inv == u
            for v in svars:
                lens[v][rows] = int(ln[v].max())
            full = np.all([ln[v] > 0 for v in svars], axis=0)
            sig = [tuple((int(rng[v][0][k]) if (v in vvars or band is not None) else 0, int(ln[v][k]))
                         for v in svars if v in dims)
                   + ((int(band[0][k]), int(band[1][k])) if band is not None else ())
                   for k in range(len(tau))]
            cl = bz = 1
            for gd in range(g):
                ks = [k for k in range(gd * c, gd * c + c) if full[k]]
                cl = max(cl, len({sig[k] for k in ks}))
                bz = max(bz, len(ks))
            passes[rows] *= cl
            busy[rows, si] = bz
    return dict(lens=lens, passes=passes, busy=busy)


def newton_plan(op, mvars: set, vvars: set, lens: dict, dataflow, buffers, passes, backend) -> dict:
    """`newton._plan`'s per-core geometry for every draft at once ([n] int64
    each; is_flow bool): n_b / n_v / n_o (batch, vector-only, matrix-only
    outputs), n_r, n_rc (columns per output), cc (columns per chunk), t_in
    (chunks per output), kv / ki / lo (vectors and chunks per load, outputs
    per latch block), n_vg / n_ig / n_ob and passes (vector classes).

    mvars / vvars: loop vars of the matrix and the vector operand; lens:
    worst-core loop lengths (var -> [n]); dataflow [n] (0 os, 1 is);
    buffers [n] (global buffers per load); passes [n]: the vector classes
    (`newton_geometry`: cores of a group that hold different vectors)."""
    core, group = backend.core, backend.group
    outs = list(op.output_vars)
    red = [v for v in (lv.name for lv in op.loop_vars) if v in op.reduction_vars]
    n = len(dataflow)

    def prod(vs):
        p = np.ones(n, np.int64)
        for v in vs:
            p = p * lens[v]
        return p
    n_b = prod([v for v in outs if v in mvars and v in vvars])
    n_v = prod([v for v in outs if v in vvars and v not in mvars])
    n_o = prod([v for v in outs if v not in vvars])
    n_r = prod(red)
    n_buf = max(1, group.n_global_buffers)
    buf_cols = max(1, group.global_buffer_bytes // n_buf // core.col_bytes)
    n_rc = np.maximum(1, _cdiv(n_r, core.lanes))
    cc = np.minimum(n_rc, buf_cols)
    t_in = _cdiv(n_rc, cc)
    k = np.asarray(buffers, np.int64)
    kv = np.minimum(_pow2_floor(k), _pow2_floor(np.maximum(1, n_v)))
    ki = np.minimum(_pow2_floor(np.maximum(1, k // kv)), _pow2_floor(t_in))
    lo = np.minimum(np.maximum(1, max(1, core.n_output_regs) // kv), n_o)
    is_flow = (np.asarray(dataflow) == 1) & (t_in > 1)
    passes = np.asarray(passes, np.int64)
    return dict(n_b=n_b, n_v=n_v, n_o=n_o, n_r=n_r, n_rc=n_rc, cc=cc, t_in=t_in, kv=kv, ki=ki, lo=lo,
                n_vg=_cdiv(n_v, kv), n_ig=_cdiv(t_in, ki), n_ob=_cdiv(n_o, lo), is_flow=is_flow,
                passes=passes)


def newton_counts(op, mvars: set, vvars: set, lens: dict, cores, dataflow, buffers, per_core, passes,
                  backend) -> dict:
    """Per-group command counts ([n] int64 each, keys COUNTS) of Newton drafts
    (arguments as `newton_plan`; cores [n, S]: busy cores per group along each
    set; per_core [n] bool: single-bank commands)."""
    pl = newton_plan(op, mvars, vvars, lens, dataflow, buffers, passes, backend)
    return plan_counts(pl, cores, per_core, backend)


def plan_counts(pl: dict, cores, per_core, backend) -> dict:
    """`newton_counts` from `newton_plan`'s arrays `pl` (cores [n, S] per
    group along each set, per_core [n] bool), for a caller that has the plan."""
    core = backend.core
    n_b, n_v, n_o, n_rc, cc, t_in = (pl[k] for k in ("n_b", "n_v", "n_o", "n_rc", "cc", "t_in"))
    kv, ki, lo, is_flow, passes = (pl[k] for k in ("kv", "ki", "lo", "is_flow", "passes"))
    n_vg, n_ig, n_ob = pl["n_vg"], pl["n_ig"], pl["n_ob"]
    loads_b = np.where(is_flow, n_ig, np.where(n_ig > 1, n_ob * n_ig, 1))       # per (b, vg)
    loads = n_b * n_vg * loads_b
    # GWRITE width: every chunk group cc wide, except a last group holding only a partial chunk
    last_cols = n_rc - (t_in - 1) * cc
    lone_last = (t_in - (n_ig - 1) * ki) == 1
    width_sum = (n_ig - 1) * cc + np.where(lone_last, last_cols, cc)             # over one pass of ig
    gw_per_b = np.where(is_flow, width_sum, np.where(n_ig > 1, n_ob * width_sum, cc))
    gwrite_cols = n_b * n_vg * kv * ki * gw_per_b
    comp = n_b * n_v * n_o * t_in
    comp_cols = n_b * n_v * n_o * n_rc
    # G_ACT: a load's segments are consecutive in the data-block order (b-major), so the
    # loads of one vector group tile the bank's segments; each vector group re-reads them
    cols = core.cols
    per_row = np.maximum(cols // np.maximum(cc, 1), 1)
    rps = _cdiv(cc, cols)                                                        # rows per segment
    segs = (n_o * t_in) // np.maximum(loads_b, 1)
    g_act = np.where(cc <= cols, n_vg * _spans(n_b * loads_b, segs, per_row), 0)
    # loads of unequal runs (a last output block of fewer than lo outputs, a last chunk group of
    # fewer than ki chunks: a halo-widened box is rarely a multiple of either): walk the runs
    ragged = (cc <= cols) & (n_ig > 1) & (((n_o % np.maximum(lo, 1)) != 0) | ((t_in % np.maximum(ki, 1)) != 0))
    for i in np.nonzero(ragged)[0]:
        g_act[i] = n_vg[i] * _ragged_cached(int(n_b[i]), int(n_o[i]), int(t_in[i]), int(lo[i]), int(ki[i]),
                                           bool(is_flow[i]), int(per_row[i]))
    # a segment wider than a row sits row-aligned: its chunk's columns over `cols` rows each
    last_rows = _cdiv(last_cols, cols)
    wide = n_vg * n_b * n_o * ((t_in - 1) * rps + last_rows)
    g_act = np.where(cc <= cols, g_act, wide)
    readres = n_b * n_vg * n_ob * np.where(is_flow, n_ig, 1)
    out = dict(passes=passes, loads=passes * loads, gwrite_cols=passes * gwrite_cols,
               g_act=passes * g_act, comp=passes * comp, comp_cols=passes * comp_cols,
               readres=passes * readres)
    # per-core granularity: COMPs and READRESs go to each core of a class, no G_ACT
    pc = np.asarray(per_core, bool)
    class_cores = np.maximum(np.asarray(cores).prod(axis=1) // np.maximum(passes, 1), 1)
    out["comp"] = np.where(pc, out["comp"] * class_cores, out["comp"])
    out["comp_cols"] = np.where(pc, out["comp_cols"] * class_cores, out["comp_cols"])
    out["readres"] = np.where(pc, out["readres"] * class_cores, out["readres"])
    out["g_act"] = np.where(pc, 0, out["g_act"])
    bursts = readres_bursts(backend, kv * lo, pc)
    out["readres_bursts"] = out["readres"] * bursts
    return out
