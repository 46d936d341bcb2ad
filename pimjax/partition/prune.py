"""DCC's draft pruning rules (§IV-B, step 3), on draft columns.

Rule 1 removes redundant drafts: the same data tiles with equivalent
representative mappings (the same mapping function, or any mapping of a set
that is not split at all).  Rule 2 speculatively removes drafts whose
per-core length of the SIMD-lane dimension set is not a multiple of the
N-way SIMD width; it is skipped when no draft satisfies it or the backend has
no multi-data instructions.  Rule 3 keeps one draft among those whose groups
all have the same worst per-core performance, estimated from the per-core
length (data-tile size) of each dimension set.

Each rule keeps the first draft of an equivalence class, so the generator's
order (preferred representative mappings first) decides which survives.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .dimsets import DimensionSet


def rule1(s: DimensionSet, reps: Sequence[int], tiles: int) -> list[int]:
    """Rule 1 on one dimension set: of the candidate representative mappings
    `reps` keep the first per distinct mapping function; a set cut into a
    single tile needs only one candidate (all are equivalent)."""
    if tiles == 1:
        return list(reps[:1])
    seen = set()
    out = []
    for r in reps:
        m = s.mapping(r)
        if m not in seen:
            seen.add(m)
            out.append(r)
    return out


def lane_sets(sets: Sequence[DimensionSet], lane_vars: Sequence[str | None]) -> np.ndarray:
    """Index of the dimension set holding each lane variable (-1 for None)."""
    out = []
    for v in lane_vars:
        out.append(next((i for i, s in enumerate(sets) if v in s.vars), -1) if v is not None else -1)
    return np.array(out, dtype=np.int64)


def rule2(sets: Sequence[DimensionSet], lane_vars: Sequence[str | None], tile: np.ndarray,
          lane: np.ndarray, lanes: int) -> tuple[np.ndarray, bool]:
    """Keep-mask of drafts whose lane set's per-core length is a multiple of
    `lanes` (N-way SIMD).  tile: [n, S] per-core lengths; lane: [n] codes.

    Returns (keep, skipped); skipped when the rule does not apply (no SIMD, or
    no draft with a lane variable satisfies it)."""
    n = lane.shape[0]
    if lanes <= 1 or n == 0:
        return np.ones(n, bool), True
    ls = lane_sets(sets, lane_vars)[lane]
    has_lane = ls >= 0
    t = np.where(has_lane, tile[np.arange(n), np.maximum(ls, 0)], 0)
    aligned = ~has_lane | (t % lanes == 0)
    if not (aligned & has_lane).any():
        return np.ones(n, bool), True
    return aligned, False


def rule3(sets: Sequence[DimensionSet], groups: np.ndarray, cores: np.ndarray, reps: np.ndarray,
          tile: np.ndarray, lane: np.ndarray) -> np.ndarray:
    """Indices (ascending) of the drafts rule 3 keeps: the first per
    (mapping function and per-core length of every set, groups used, cores
    used per group, lane variable).

    With one data-tile size per set every core of a group has the same worst
    case, so drafts that agree on all of these perform the same per group."""
    n = lane.shape[0]
    if n == 0:
        return np.zeros(0, np.int64)
    mapping_id = np.empty_like(reps)
    for i, s in enumerate(sets):
        ids = {}
        table = np.array([ids.setdefault(s.mapping(r), len(ids)) for r in range(len(s.candidates))])
        mapping_id[:, i] = table[reps[:, i]]
    key = np.concatenate([mapping_id, tile, groups.prod(1, keepdims=True),
                          cores.prod(1, keepdims=True), lane[:, None]], axis=1)
    _, first = np.unique(key, axis=0, return_index=True)
    return np.sort(first)
