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
from ..partition.tiles import band, set_tilings, tile_digits
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
    sets = dimension_sets(op)
    tilings = set_tilings(op, sets, draft)
    G, C = draft.groups_used, draft.cores_used
    names = tuple(lv.name for lv in op.loop_vars)
    ext = op.extents
    start = np.zeros((G, C, len(names)), np.int64)
    length = np.zeros((G, C, len(names)), np.int64)
    band_lo = {i: np.zeros((G, C), np.int64) for i, t in enumerate(tilings) if t.mapping.single_var is None}
    band_hi = {i: np.zeros((G, C), np.int64) for i in band_lo}
    for g in range(G):
        for c in range(C):
            taus = tile_digits(tilings, g, c)
            rng = {v: (0, e) for v, e in ext.items()}
            for i, (t, tau) in enumerate(zip(tilings, taus)):
                a, b = band(t, tau)
                if t.mapping.single_var is not None:
                    v = t.mapping.single_var
                    rng[v] = (min(a, ext[v]), min(max(a, b), ext[v]))
                else:
                    band_lo[i][g, c], band_hi[i][g, c] = a, b
                    for v, lo_hi in _band_box(t.mapping, a, b, ext).items():
                        rng[v] = lo_hi
            for k, v in enumerate(names):
                lo, hi = rng[v]
                start[g, c, k] = lo
                length[g, c, k] = max(0, hi - lo)
    bands = tuple((tilings[i].mapping, band_lo[i], band_hi[i]) for i in band_lo)
    return CoreTiles(names, start, length, bands, G, C)


def _band_box(expr: AffineExpr, a: int, b: int, ext: dict[str, int]) -> dict[str, tuple[int, int]]:
    """Bounding range of each variable of `expr` over the points with
    a <= expr < b (the other variables free in their extents)."""
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
        out[v] = (max(0, lo), min(ext[v], max(hi, 0)))
        if out[v][1] < out[v][0]:
            out[v] = (out[v][0], out[v][0])
    return out
