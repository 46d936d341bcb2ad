"""Per-core compute tiles of a draft as arrays (the lowering's view).

`core_tiles(op, draft)` evaluates the partitioner's tiling for every used
(group, core): the loop values each core iterates over (a contiguous range
per variable, the "expand" strategy; a compound representative mapping
keeps its band as an extra constraint) — everything the layouts, command
streams and host data are built from.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..partition.dimsets import dimension_sets
from ..partition.draft import Draft
from ..partition.tiles import radix, set_tilings
from ..trace.affine import AffineExpr
from ..trace.ir import PimOp


@dataclass(frozen=True)
class CoreTiles:
    """Compute tiles of all used cores.

    vars:   loop variables (op order).
    start, length: [G, C, V] loop range of every variable on every core.
    bands:  ((expr, lo[G, C], hi[G, C]), ...) for compound representative
            mappings: a point belongs to the core only if lo <= expr < hi.
    groups, cores: the mesh the draft uses (G = groups_used, C = cores_used).
    """
    vars: tuple[str, ...]
    start: np.ndarray
    length: np.ndarray
    bands: tuple
    groups: int
    cores: int

    def var_index(self, v: str) -> int:
        return self.vars.index(v)

    def box(self, vars_: tuple[str, ...]) -> tuple[int, ...]:
        """Padded local box: the largest per-core length of each variable."""
        return tuple(int(self.length[..., self.var_index(v)].max()) for v in vars_)

    def values(self, v: str, n: int | None = None) -> np.ndarray:
        """[G, C, n] loop values of `v` at local positions 0..n-1 (-1 beyond
        the core's length)."""
        i = self.var_index(v)
        n = int(self.length[..., i].max()) if n is None else n
        j = np.arange(n)
        vals = self.start[..., i, None] + j
        return np.where(j < self.length[..., i, None], vals, -1)


def core_tiles(op: PimOp, draft: Draft) -> CoreTiles:
    """Loop ranges (and bands) of every used core of `draft`.

    They depend on the draft's parts only (groups, cores and representative
    mapping per dimension set), which the knob variants of a tiling share:
    the result is cached per (op, parts), its arrays read-only."""
    return _core_tiles(op, draft.parts)


@lru_cache(maxsize=2048)
def _core_tiles(op: PimOp, parts: tuple) -> CoreTiles:
    tiles = _compute_core_tiles(op, Draft(parts=parts))
    for a in (tiles.start, tiles.length, *(x for _, lo, hi in tiles.bands for x in (lo, hi))):
        a.setflags(write=False)
    return tiles


def _compute_core_tiles(op: PimOp, draft: Draft) -> CoreTiles:
    """Every core's ranges at once, as [G, C] arrays: a core's data-tile
    digit of each set is its mixed-radix group / core digit (`tile_digits`),
    its band that tile's values (`band`), its loop range the band's (`band_box`
    for a compound mapping).  Sets are applied in order, a later one
    narrowing a variable an earlier set's band bounded, as `var_ranges`."""
    sets = dimension_sets(op)
    tilings = set_tilings(op, sets, draft)
    G, C = draft.groups_used, draft.cores_used
    names = tuple(lv.name for lv in op.loop_vars)
    ext = op.extents
    g = np.arange(G, dtype=np.int64)[:, None]
    c = np.arange(C, dtype=np.int64)[None, :]
    lo = {v: np.zeros((G, C), np.int64) for v in names}
    hi = {v: np.full((G, C), ext[v], np.int64) for v in names}
    bands = []
    gstr = radix([t.groups for t in tilings])
    cstr = radix([t.cores for t in tilings])
    for t, gs, cs in zip(tilings, gstr, cstr):
        tau = np.broadcast_to(((g // gs) % t.groups) * t.cores + (c // cs) % t.cores, (G, C))
        a = t.lo + tau * t.tile                                  # `band`, per core
        b = np.minimum(a + t.tile, t.lo + t.length)
        v = t.mapping.single_var
        if v is not None:
            lo[v] = np.minimum(a, ext[v])
            hi[v] = np.minimum(np.maximum(a, b), ext[v])
        else:
            bands.append((t.mapping, a, b))
            for w, (l, h) in band_box(t.mapping, a, b, ext).items():
                lo[w], hi[w] = l, h
    start = np.stack([lo[v] for v in names], axis=-1) if names else np.zeros((G, C, 0), np.int64)
    length = np.stack([np.maximum(0, hi[v] - lo[v]) for v in names], axis=-1) if names else \
        np.zeros((G, C, 0), np.int64)
    return CoreTiles(names, np.ascontiguousarray(start), np.ascontiguousarray(length), tuple(bands), G, C)


def band_box(expr: AffineExpr, a, b, ext: dict[str, int]) -> dict:
    """Bounding range (lo, hi) of each variable of `expr` over the points with
    a <= expr < b (the other variables free in their extents); a, b: ints or
    [G, C] arrays (one band per core), lo / hi alike."""
    out = {}
    for v, c in expr.terms:
        rest_lo = rest_hi = 0
        for w, d in expr.terms:
            if w != v:
                span = d * (ext[w] - 1)
                rest_lo += min(0, span)
                rest_hi += max(0, span)
        # a <= c*v + rest <= b - 1  with rest in [rest_lo, rest_hi]
        if c > 0:
            lo = -(-(a - rest_hi) // c)
            hi = (b - 1 - rest_lo) // c + 1
        else:
            lo = -(-(b - 1 - rest_lo) // c)
            hi = (a - rest_hi) // c + 1
        lo = np.maximum(0, lo)
        hi = np.minimum(ext[v], np.maximum(hi, 0))
        out[v] = (lo, np.maximum(hi, lo))                      # an empty range starts where it ends
    return out
