"""Data tiles -> compute tiles (DCC §IV-B, step 4).

For dimension set `i` tiled as `DimPart(g_i, c_i, rep)`, the value range of
the representative mapping `m_i` (length `L_i`, minimum `lo_i`) is cut into
`g_i * c_i` data tiles of `t_i = ceil(L_i / (g_i c_i))` values.  An iteration
point `p` belongs to tile `tau_i = (m_i(p) - lo_i) // t_i`, i.e. group digit
`tau_i // c_i` and core digit `tau_i % c_i`.  The group (core) index of the
point is the mixed-radix number of its group (core) digits over the sets, the
first set most significant.  So every iteration point has exactly one owner
core: the compute tiles partition the iteration space by construction.

When the representative mapping is one loop variable the compute tile of a
core is a box (a loop range per variable, DCC's "loop range of the
variable"); for a compound mapping (`h + kh`) it is the band
`a <= h + kh < b`.  The indices a core needs of every tensor dimension are
then either expanded to a contiguous range or kept exactly (the two
strategies for irregular index sets).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from ..trace.affine import AffineExpr
from ..trace.ir import PimOp
from .dimsets import DimensionSet
from .draft import Draft


@dataclass(frozen=True)
class SetTiling:
    """Geometry of one tiled dimension set.

    mapping: the representative mapping function (offset-free).
    lo / length: its value range over the loop domain.
    tile: values per data tile, t = ceil(length / (groups * cores)).
    groups / cores: the DimPart's allocation.
    """
    mapping: AffineExpr
    lo: int
    length: int
    tile: int
    groups: int
    cores: int

    @property
    def used_tiles(self) -> int:
        """Tiles that hold at least one value (the others are idle)."""
        return -(-self.length // self.tile)


def set_tilings(op: PimOp, sets: Sequence[DimensionSet], draft: Draft) -> tuple[SetTiling, ...]:
    """Per dimension set tiling geometry of `draft`."""
    ext = op.extents
    out = []
    for s, part in zip(sets, draft.parts, strict=True):
        lo, length = s.extent(part.rep, ext)
        tile = -(-length // part.tiles)
        out.append(SetTiling(s.mapping(part.rep), lo, length, tile, part.groups, part.cores))
    return tuple(out)


def radix(values: Sequence[int]) -> tuple[int, ...]:
    """Mixed-radix strides of `values` (a tile count per level), first entry most
    significant: the stride of each level in a flat (group or core) index."""
    strides = []
    acc = 1
    for v in reversed(values):
        strides.append(acc)
        acc *= v
    return tuple(reversed(strides))


def owner(tilings: Sequence[SetTiling], env: Mapping[str, np.ndarray]):
    """(group, core) index arrays of the iteration points in `env`.

    env maps every loop variable to a broadcastable integer array."""
    gstr = radix([t.groups for t in tilings])
    cstr = radix([t.cores for t in tilings])
    group = 0
    core = 0
    for t, gs, cs in zip(tilings, gstr, cstr):
        val, _ = t.mapping.evaluate(env)
        tau = (val - t.lo) // t.tile
        group = group + (tau // t.cores) * gs
        core = core + (tau % t.cores) * cs
    return group, core


def loop_env(op: PimOp) -> dict[str, np.ndarray]:
    """Broadcast iotas over the whole loop domain (numpy; small ops only)."""
    n = len(op.loop_vars)
    env = {}
    for d, lv in enumerate(op.loop_vars):
        shape = [1] * n
        shape[d] = lv.extent
        env[lv.name] = np.arange(lv.extent).reshape(shape)
    return env


def tile_digits(tilings: Sequence[SetTiling], group: int, core: int) -> tuple[int, ...]:
    """The data-tile index tau_i of each set for core (`group`, `core`)."""
    gstr = radix([t.groups for t in tilings])
    cstr = radix([t.cores for t in tilings])
    taus = []
    for t, gs, cs in zip(tilings, gstr, cstr):
        gd = (group // gs) % t.groups
        cd = (core // cs) % t.cores
        taus.append(gd * t.cores + cd)
    return tuple(taus)


def var_ranges(op: PimOp, sets: Sequence[DimensionSet], tilings: Sequence[SetTiling],
               taus: Sequence[int]) -> dict[str, tuple[int, int]]:
    """Bounding loop ranges [start, stop) per variable of the compute tile
    with data-tile indices `taus`.

    Exact for sets whose mapping is a single variable (the compute tile is a
    box); for compound mappings the variables keep their full range and the
    band `a <= m(p) < b` (see `band`) selects the points."""
    ext = op.extents
    rng = {v: (0, e) for v, e in ext.items()}
    for s, t, tau in zip(sets, tilings, taus):
        var = t.mapping.single_var
        if var is None:
            continue
        a = t.lo + tau * t.tile
        rng[var] = (min(a, ext[var]), min(a + t.tile, ext[var]))
    return rng


def band(tiling: SetTiling, tau: int) -> tuple[int, int]:
    """[a, b) of representative-mapping values of data tile `tau`."""
    a = tiling.lo + tau * tiling.tile
    return a, min(a + tiling.tile, tiling.lo + tiling.length)
