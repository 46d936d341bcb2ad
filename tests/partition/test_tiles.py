"""Compute tiles partition the iteration space exactly once, and every
output element is produced exactly once after the reduction merge."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pimjax.partition import dimension_sets, drafts, set_tilings
from pimjax.partition.tiles import band, loop_env, owner, tile_digits, var_ranges

from .helpers import backend, conv1d, gemv, mmtv, rowsum, vadd

OPS = {
    "gemv": lambda d: gemv(d.draw(st.integers(1, 12)), d.draw(st.integers(1, 12))),
    "conv1d": lambda d: conv1d(d.draw(st.integers(1, 6)), d.draw(st.integers(1, 3)),
                               d.draw(st.integers(1, 3)), d.draw(st.integers(1, 3)),
                               d.draw(st.integers(1, 2))),
    "mmtv": lambda d: mmtv(*(d.draw(st.integers(1, 4)) for _ in range(4))),
    "vadd": lambda d: vadd(d.draw(st.integers(1, 40))),
    "rowsum": lambda d: rowsum(d.draw(st.integers(1, 6)), d.draw(st.integers(1, 9))),
}


def core_masks(op, draft):
    """Per (group, core) boolean masks over the loop domain, built from the
    compute tiles (loop ranges + bands) alone."""
    sets = dimension_sets(op)
    tilings = set_tilings(op, sets, draft)
    env = loop_env(op)
    shape = tuple(lv.extent for lv in op.loop_vars)
    masks = {}
    for g in range(draft.groups_used):
        for c in range(draft.cores_used):
            taus = tile_digits(tilings, g, c)
            rng = var_ranges(op, sets, tilings, taus)
            m = np.ones(shape, bool)
            for v, (a, b) in rng.items():
                m &= (env[v] >= a) & (env[v] < b)
            for t, tau in zip(tilings, taus):
                if t.mapping.single_var is None:
                    lo, hi = band(t, tau)
                    val, _ = t.mapping.evaluate(env)
                    m &= (val >= lo) & (val < hi)
            masks[(g, c)] = m
    return masks, env, tilings


def gathered(op, env, rng):
    vals = []
    shape = tuple(lv.extent for lv in op.loop_vars)
    for acc in op.operands:
        size = tuple(e.value_range(op.extents)[1] + 1 for e in acc.index_map)
        arr = rng.standard_normal(size)
        idx = tuple(np.broadcast_to(e.evaluate(env)[0], shape) for e in acc.index_map)
        vals.append(arr[idx] if idx else np.full(shape, arr))
    return vals


@settings(max_examples=60)
@given(st.data(), st.sampled_from(sorted(OPS)), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 4]))
def test_compute_tiles_cover_iteration_space_once(data, kind, G, C):
    op = OPS[kind](data)
    be = backend(groups=G, cores=C, accumulator=True)
    table = drafts(op, be, prune_drafts=data.draw(st.booleans()))
    assert len(table) > 0
    idx = data.draw(st.lists(st.integers(0, len(table) - 1), min_size=1, max_size=6))
    rng = np.random.default_rng(0)
    for i in idx:
        d = table[i]
        masks, env, tilings = core_masks(op, d)
        cover = sum(m.astype(int) for m in masks.values())
        assert (cover == 1).all(), f"{d} covers some points {cover.min()}..{cover.max()} times"
        g_own, c_own = owner(tilings, env)
        for (g, c), m in masks.items():          # owner() agrees with the tiles
            own = (np.broadcast_to(g_own, m.shape) == g) & (np.broadcast_to(c_own, m.shape) == c)
            assert (own == m).all()

        # every output element exactly once after the merge
        vals = gathered(op, env, rng)
        prod = vals[0] if op.kind != "contraction" else vals[0] * vals[1]
        if op.kind == "elementwise":
            prod = vals[0] + vals[1]
        out_shape = tuple(e.value_range(op.extents)[1] + 1 for e in op.result.index_map)
        ridx = tuple(np.broadcast_to(e.evaluate(env)[0], prod.shape) for e in op.result.index_map)
        expect = np.zeros(out_shape)
        np.add.at(expect, ridx, prod)
        merged = np.zeros(out_shape)
        producers = np.zeros(out_shape, int)
        for m in masks.values():
            part = np.zeros(out_shape)
            np.add.at(part, tuple(r[m] for r in ridx), prod[m])
            touched = np.zeros(out_shape, bool)
            touched[tuple(r[m] for r in ridx)] = True
            producers += touched
            merged += part                         # host / group merge of partials
        np.testing.assert_allclose(merged, expect, rtol=1e-12, atol=1e-12)
        if d.reduction == "complete":
            assert (producers <= 1).all(), "a complete draft split an output over cores"
        assert (producers >= 1).all()


@settings(max_examples=40, deadline=None)
@given(st.data(), st.sampled_from(sorted(OPS)), st.sampled_from([1, 2, 3, 4]), st.sampled_from([1, 2, 4]))
def test_core_tiles_of_all_cores_at_once_equal_each_core_alone(data, kind, G, C):
    """`lower.tiles.core_tiles` computes every core's loop ranges and bands as [G, C] arrays; each
    core's entries equal that core's own `tile_digits` -> `band` -> range, computed here one core at
    a time (a compound mapping's band bounding its variables as a box)."""
    from pimjax.lower.tiles import _compute_core_tiles
    op = OPS[kind](data)
    table = drafts(op, backend(G, C))
    if len(table) == 0:
        return
    draft = table[data.draw(st.integers(0, len(table) - 1))]
    tiles = _compute_core_tiles(op, draft)
    tilings = set_tilings(op, dimension_sets(op), draft)
    ext = op.extents
    names = [lv.name for lv in op.loop_vars]
    compound = [i for i, t in enumerate(tilings) if t.mapping.single_var is None]
    assert len(tiles.bands) == len(compound)
    for g in range(draft.groups_used):
        for c in range(draft.cores_used):
            rng = {v: (0, e) for v, e in ext.items()}
            for i, (t, tau) in enumerate(zip(tilings, tile_digits(tilings, g, c))):
                a, b = band(t, tau)
                if t.mapping.single_var is not None:
                    v = t.mapping.single_var
                    rng[v] = (min(a, ext[v]), min(max(a, b), ext[v]))
                    continue
                expr, lo, hi = tiles.bands[compound.index(i)]
                assert (int(lo[g, c]), int(hi[g, c])) == (a, b)
                for v, k in expr.terms:       # a <= k v + rest < b, rest over the other variables' extents
                    rest = [k2 * (ext[w] - 1) for w, k2 in expr.terms if w != v]
                    r_lo, r_hi = sum(min(0, x) for x in rest), sum(max(0, x) for x in rest)
                    vals = [x for x in range(ext[v]) if a - r_hi <= k * x <= b - 1 - r_lo]
                    rng[v] = (vals[0], vals[-1] + 1) if vals else (rng[v][0], rng[v][0])
            for j, v in enumerate(names):
                lo_v, hi_v = rng[v]
                assert tiles.start[g, c, j] == lo_v or hi_v <= lo_v
                assert tiles.length[g, c, j] == max(0, hi_v - lo_v)
