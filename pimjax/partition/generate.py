"""DCC's data-centric schedule generator (§IV-B) for any PimGraph op.

Stages, each counted in `Stats`:

1. dimension sets from the op's index maps (`dimsets.py`);
2. data tiles: depth-first search with memoisation over (groups, cores per
   group) allocations per dimension set, recursing on the remaining groups
   and cores (`allocations`);
3. tiling drafts: one representative-mapping candidate per set;
4. pruning rules 1 (redundant), 2 (N-way SIMD alignment) and 3 (equal worst
   per-core performance per group) (`prune.py`);
5. knobs (reduction strategy, dataflow, KI/KO, command granularity,
   irregular-index strategy, UPMEM tasklets / WRAM tile, Newton buffers);
6. the backend resource verifier (`verify.py`).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Sequence

import numpy as np

from ..hw.core import Backend
from ..trace.ir import PimOp
from . import prune
from .dimsets import DimensionSet, dimension_sets
from .table import KNOB_COLUMNS, DraftTable, encode
from .verify import (
    infer_shapes,
    lengths_product,
    op_support,
    per_core_var_lengths,
    register_simd,
    resource_mask,
    shared_register_sets,
)

KI_KO = (1, 2, 4, 8)              # Korean paper §4.1: KI, KO in {1, 2, 4, 8}
UPMEM_TASKLETS = (8, 11, 16, 24)  # PrIM/ATiM grids; 11 = full pipeline (backends.md)
UPMEM_WRAM_TILES = (32, 64, 128, 256, 512, 1024, 2048)  # bytes; ATiM Table 3 range


@dataclass
class Stats:
    """How many drafts each stage produced and removed (for one op)."""
    dimension_sets: int = 0
    allocations: int = 0
    drafts: int = 0
    rule1_removed: int = 0
    rule2_removed: int = 0
    rule2_skipped: bool = False
    rule3_removed: int = 0
    knob_drafts: int = 0
    verifier_removed: int = 0
    final: int = 0
    reasons: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


# --------------------------------------------------------------------------
# stage 2: allocations
# --------------------------------------------------------------------------
def _divisors(n: int) -> tuple[int, ...]:
    return tuple(d for d in range(1, n + 1) if n % d == 0)


def allocations(limits: Sequence[int], groups: int, cores: int,
                memo: bool = True, divisors: bool = True) -> list[tuple[tuple[int, int], ...]]:
    """All (g_i, c_i) per dimension set with g_i * c_i <= limits[i] (no more
    tiles than values) and, by default, g_i / c_i dividing the groups / cores
    that remain (the presets' meshes are powers of two, so every split is
    even).  divisors=False enumerates DCC's artifact space instead: any
    prod g_i <= groups, prod c_i <= cores (reference/dcc.md) — ~20x larger,
    and every such tiling is a valid Draft too.

    Depth-first over the sets; the sub-problem (set index, remaining groups,
    remaining cores) recurs for many prefixes, so its solutions are memoised
    (DCC: "Memoization caches all valid allocation solutions for each
    subproblem")."""
    limits = tuple(limits)

    def solve(i: int, g_rem: int, c_rem: int):
        if i == len(limits):
            return ((),)
        out = []
        gs = _divisors(g_rem) if divisors else range(1, g_rem + 1)
        cs = _divisors(c_rem) if divisors else range(1, c_rem + 1)
        for g in gs:
            for c in cs:
                if g * c > limits[i]:
                    continue
                for rest in sub(i + 1, g_rem // g, c_rem // c):
                    out.append(((g, c),) + rest)
        return tuple(out)

    sub = lru_cache(maxsize=None)(solve) if memo else solve
    return list(sub(0, groups, cores))


# --------------------------------------------------------------------------
# stage 5: knobs
# --------------------------------------------------------------------------
def lane_candidates(op: PimOp, backend: Backend) -> tuple[str | None, ...]:
    """Loop variables that can be spread over the SIMD lanes: the variable of
    the innermost (host-contiguous) dimension of an operand or the result."""
    if backend.core.lanes <= 1:
        return (None,)
    out: dict[str, None] = {}
    if op.kind == "contraction":
        # PIM MAC units reduce along their lanes (HBM-PIM lane partials,
        # AttAcc / Newton adder trees): the lanes run along a reduction variable
        for k, acc in enumerate(op.operands):
            if k in set(op.body_operands) and acc.index_map:
                v = acc.index_map[-1].single_var
                if v is not None and v in op.reduction_vars:
                    out[v] = None
        return tuple(out) or tuple(op.reduction_vars[-1:]) or (None,)
    used = set(op.body_operands)
    for k, acc in enumerate(op.operands):
        if k in used and acc.index_map:
            v = acc.index_map[-1].single_var
            if v is not None:
                out[v] = None
    if op.result.index_map:
        v = op.result.index_map[-1].single_var
        if v is not None:
            out[v] = None
    return tuple(out) or (None,)


def _ceil_div(a, b):
    return -(-a // b)


def _knob_grid(op: PimOp, sets: Sequence[DimensionSet], backend: Backend) -> np.ndarray:
    """All knob combinations the backend offers for this kind of op, as a
    [K, len(KNOB_COLUMNS)] code array (validity per draft is masked later)."""
    core, group = backend.core, backend.group
    contraction = op.kind == "contraction"
    reds = [encode("complete", "reduction"), encode("host", "reduction")]
    if "accumulator" in group.units:
        reds.append(encode("group", "reduction"))
    dfs = [encode("os", "dataflow")] + ([encode("is", "dataflow")] if contraction else [])
    if register_simd(backend):
        kis = [k for k in KI_KO if k <= core.n_input_regs] if contraction else [1]
        kos = [k for k in KI_KO if k <= core.n_output_regs]
    else:
        kis, kos = [1], [1]
    grans = [encode("broadcast", "granularity")] if group.broadcast else []
    if group.per_core_commands or not group.broadcast:
        grans.append(encode("core", "granularity"))
    complex_sets = any(len(s.vars) > 1 for s in sets)
    irrs = [encode("expand", "irregular")] + ([encode("keep", "irregular")] if complex_sets else [])
    if core.tasklets > 1:
        tasklets = [t for t in UPMEM_TASKLETS if t <= core.tasklets]
        tiles = list(UPMEM_WRAM_TILES)
    else:
        tasklets, tiles = [1], [0]
    buffers = [b for b in (1, 2, 4) if b <= group.n_global_buffers] if contraction and \
        "global_buffer" in group.units else [1]
    grid = list(itertools.product(reds, dfs, kis, kos, grans, irrs, tasklets, tiles, buffers))
    return np.array(grid, dtype=np.int64)


@dataclass(frozen=True)
class _Rows:
    """Tilings (before knobs) as columns."""
    groups: np.ndarray   # [n, S]
    cores: np.ndarray    # [n, S]
    reps: np.ndarray     # [n, S]
    tile: np.ndarray     # [n, S]
    lane: np.ndarray     # [n]

    def take(self, idx) -> "_Rows":
        return _Rows(self.groups[idx], self.cores[idx], self.reps[idx], self.tile[idx], self.lane[idx])


# --------------------------------------------------------------------------
# the generator
# --------------------------------------------------------------------------
def drafts(op: PimOp, backend: Backend, prune_drafts: bool = True, *, memo: bool = True,
           stats: Stats | None = None, knobs: bool = True, shapes: dict | None = None,
           divisors: bool = True) -> DraftTable:
    """All tiling drafts of `op` on `backend` (DCC §IV-B) as a `DraftTable`
    (a read-only sequence of `Draft`).

    divisors: see `allocations` (False: DCC's artifact space).

    prune_drafts: apply pruning rules 1-3 (the resource verifier always runs).
    knobs: expand the knob space (False: default knobs, one entry per tiling
           and lane variable).
    stats: filled with per-stage counts when given.
    shapes: value id -> shape of the op's tensors (default: inferred from the
            index maps' value ranges).
    An op the backend cannot run yields an empty table (see `op_support`).

    Example:
        >>> table = drafts(graph.ops[0], get_backend("hbm-pim"))   # doctest: +SKIP
        >>> len(table), table[0].parts                              # doctest: +SKIP
    """
    st = stats if stats is not None else Stats()
    sets = dimension_sets(op)
    S = len(sets)
    st.dimension_sets = S
    lane_vars = lane_candidates(op, backend)
    ok, why = op_support(op, backend)
    if not ok:
        st.reasons["unsupported"] = why
        return _empty(lane_vars, S)
    ext = op.extents
    lengths = [[s.extent(r, ext)[1] for r in range(len(s.candidates))] for s in sets]
    allocs = allocations([max(ls) for ls in lengths], backend.n_groups, backend.cores_per_group,
                         memo=memo, divisors=divisors)
    st.allocations = len(allocs)

    # stage 3 + rule 1: representative-mapping candidates per set.  Rule 1 is
    # applied while enumerating (only the first candidate of each distinct
    # mapping function, and only candidate 0 for an unsplit set), so the
    # redundant drafts are counted but never built.
    rows_gc, rows_r = [], []
    n_all = 0
    kept: dict = {}             # rule 1 per (set, candidates, unsplit): allocations repeat them thousands of times
    per_set: dict = {}          # (set, units) -> (candidates that fit, those rule 1 keeps): likewise
    for alloc in allocs:
        valid, n_here = [], 1
        for i, (g, c) in enumerate(alloc):
            got = per_set.get((i, g * c))
            if got is None:
                v = [r for r, n in enumerate(lengths[i]) if g * c <= n]
                if prune_drafts:
                    key = (i, tuple(v), g * c == 1)
                    if key not in kept:
                        kept[key] = prune.rule1(sets[i], v, g * c)
                    got = per_set[(i, g * c)] = (len(v), kept[key])
                else:
                    got = per_set[(i, g * c)] = (len(v), v)
            n_here *= got[0]
            valid.append(got[1])
        n_all += n_here
        for reps in itertools.product(*valid):
            rows_gc.append(alloc)
            rows_r.append(reps)
    st.drafts = n_all
    st.rule1_removed = n_all - len(rows_gc)
    gc = np.array(rows_gc, dtype=np.int64).reshape(len(rows_gc), S, 2)
    R = np.array(rows_r, dtype=np.int64).reshape(len(rows_r), S)
    G, C = gc[..., 0], gc[..., 1]
    L = np.stack([np.asarray(lengths[i])[R[:, i]] for i in range(S)], axis=1) if S else \
        np.zeros((len(rows_gc), 0), np.int64)
    T = _ceil_div(L, G * C)

    nl = len(lane_vars)
    rows = _Rows(np.repeat(G, nl, 0), np.repeat(C, nl, 0), np.repeat(R, nl, 0), np.repeat(T, nl, 0),
                 np.tile(np.arange(nl), len(G)))
    # input registers written by group broadcast: no core split of the vector's sets.  A tiling
    # property, so it goes before rule 3 -- which keeps one tiling per class and would otherwise
    # keep a forbidden one and drop its allowed twin (the same set split over groups)
    shared = shared_register_sets(op, backend, shapes)
    if shared.any():
        rows = rows.take(np.flatnonzero(~((rows.cores > 1) & shared[None, :]).any(axis=1)))
    if prune_drafts:
        keep, skipped = prune.rule2(sets, lane_vars, rows.tile, rows.lane, backend.core.lanes)
        st.rule2_removed, st.rule2_skipped = int((~keep).sum()), skipped
        rows = rows.take(keep)
        keep = prune.rule3(sets, rows.groups, rows.cores, rows.reps, rows.tile, rows.lane)
        st.rule3_removed = len(rows.lane) - len(keep)
        rows = rows.take(keep)

    table = _expand_knobs(op, sets, backend, rows, lane_vars, knobs, shapes, st)
    st.final = len(table)
    return table


def _empty(lane_vars, S) -> DraftTable:
    z2 = np.zeros((0, S), np.int64)
    z1 = np.zeros(0, np.int64)
    return DraftTable(lane_vars, z2, z2, z2, z2, z1, *([z1] * len(KNOB_COLUMNS)))


def _expand_knobs(op, sets, backend, rows: _Rows, lane_vars, knobs: bool, shapes, st: Stats) -> DraftTable:
    """Cross the tilings with the knob grid, mask meaningless combinations
    (rule 1 on knobs) and resource violations (the verifier)."""
    n = len(rows.lane)
    core, group = backend.core, backend.group
    contraction = op.kind == "contraction"
    red = set(op.reduction_vars)
    grid = _knob_grid(op, sets, backend) if knobs else \
        np.array([[encode("complete", "reduction"), 0, 1, 1,
                   encode("broadcast" if group.broadcast else "core", "granularity"), 0,
                   1, 0, 1]], dtype=np.int64)
    K = grid.shape[0]
    kcol = {name: grid[:, j][None, :] for j, name in enumerate(KNOB_COLUMNS)}

    # per-row facts
    split = rows.groups * rows.cores > 1                                   # [n, S]
    red_set = np.array([bool(red & set(s.vars)) for s in sets], dtype=bool)
    partial = (split & red_set[None, :]).any(axis=1)
    within_group = ~((rows.groups > 1) & red_set[None, :]).any(axis=1)
    lens = per_core_var_lengths(op, sets, rows.reps, rows.tile)
    lane_arr = np.array([v if v is not None else "" for v in lane_vars])[rows.lane]
    lane_len = np.ones(n, np.int64)
    for v in op.extents:
        lane_len = np.where(lane_arr == v, lens[v], lane_len)
    lane_is_red = np.isin(lane_arr, list(red)) if red else np.zeros(n, bool)
    outs = lengths_product(lens, op.output_vars, n)
    elems = lengths_product(lens, op.extents, n)
    red_len = lengths_product(lens, op.reduction_vars, n)
    lanes = core.lanes
    uneven = ((rows.cores > 1) & ((rows.tile * rows.groups * rows.cores != _len_of(sets, op, rows))
                                  )).any(axis=1)
    complex_split = np.array([len(s.vars) > 1 for s in sets], bool)[None, :] & split
    complex_split = complex_split.any(axis=1)

    r = lambda a: a[:, None]  # noqa: E731 - per-row column against the knob grid
    valid = np.ones((n, K), dtype=bool)
    if knobs:
        valid &= np.where(r(partial), kcol["reduction"] != encode("complete", "reduction"),
                          kcol["reduction"] == encode("complete", "reduction"))
        valid &= (kcol["reduction"] != encode("group", "reduction")) | r(within_group)
        if register_simd(backend):
            reg_mac = contraction & lane_is_red
            ki_ok = (kcol["ki"] == 1) | (kcol["ki"] * lanes <= r(_ceil_div(lane_len, lanes) * lanes))
            valid &= np.where(r(reg_mac), ki_ok, kcol["ki"] == 1)
            ko_mac = (kcol["ko"] == 1) | (kcol["ko"] <= r(outs))
            ko_simd = (kcol["ko"] == 1) | (kcol["ko"] * lanes <= r(_ceil_div(elems, lanes) * lanes))
            valid &= np.where(r(reg_mac), ko_mac, ko_simd)
        if contraction:
            lanes_eff = lanes if register_simd(backend) else 1
            n_in = _ceil_div(r(red_len), kcol["ki"] * lanes_eff)
            n_out = _ceil_div(r(outs), kcol["ko"])
            valid &= (kcol["dataflow"] == encode("os", "dataflow")) | ((n_in > 1) & (n_out > 1))
        if group.broadcast:
            per_core = kcol["granularity"] == encode("core", "granularity")
            valid &= ~per_core | r(uneven & (rows.cores.prod(axis=1) > 1))
        valid &= (kcol["irregular"] == encode("expand", "irregular")) | r(complex_split)
    st.knob_drafts = int(valid.sum())

    # the verifier: registers and buffers are bounded by the grid; capacity and WRAM here
    fits, reasons = resource_mask(op, backend, lens, shapes or infer_shapes(op),
                                  kcol["tasklets"], kcol["wram_tile"])
    ok = valid & fits
    st.verifier_removed = int(valid.sum() - ok.sum())
    for why, mask in reasons.items():
        if (valid & ~mask).any():
            st.reasons[why] = int((valid & ~mask).sum())
    ri, ki = np.nonzero(ok)
    cols = {name: grid[ki, j] for j, name in enumerate(KNOB_COLUMNS)}
    return DraftTable(lane_vars, rows.groups[ri], rows.cores[ri], rows.reps[ri], rows.tile[ri],
                      rows.lane[ri], **cols)


def _len_of(sets, op, rows: _Rows) -> np.ndarray:
    """Value-range length L of each set's chosen mapping, [n, S]."""
    ext = op.extents
    out = np.zeros_like(rows.reps)
    for i, s in enumerate(sets):
        ls = np.array([s.extent(r, ext)[1] for r in range(len(s.candidates))])
        out[:, i] = ls[rows.reps[:, i]]
    return out
