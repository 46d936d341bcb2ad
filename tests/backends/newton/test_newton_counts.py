"""Newton's closed-form command counts (`costmodel.newton_counts`) against
the lowering's own counts, on random power-of-two GEMV / MMTV shapes (every
group then runs the same stream, so the lowering's totals are G x ours)."""
import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pimjax.backends.newton.counts import _spans, newton_counts, newton_geometry
from pimjax.costmodel.dataset import try_lower
from pimjax.costmodel.kernels import case_drafts, make_case
from pimjax.hw.presets import get_backend
from pimjax.partition import dimension_sets
from pimjax.partition.table import from_drafts
from pimjax.partition.tiles import set_tilings
from pimjax.partition.verify import matrix_and_vector

BE = get_backend("newton")
# ours -> the lowering's name in Program.stats.commands
STATS = dict(loads="GWRITE", gwrite_cols="GWRITE_columns", g_act="G_ACT", comp="COMP_records",
             comp_cols="COMP", readres="READRES")


def _counts(case, table):
    op = case.op
    sets = dimension_sets(op)
    mi, vi = matrix_and_vector(op, case.shapes)
    vv = set(op.operands[vi].vars)
    geo = newton_geometry(op, vv, sets, table.reps, table.tile, table.groups, table.cores)
    return newton_counts(op, set(op.operands[mi].vars), vv, geo["lens"], geo["busy"], table.column("dataflow"),
                         table.column("buffers"), table.column("granularity") == 1, geo["passes"], BE)


pow2 = st.integers(0, 7).map(lambda e: 2 ** e)


@st.composite
def cases(draw):
    if draw(st.booleans()):
        return "gemv", (draw(pow2) * 4, draw(pow2) * 8)
    return "mmtv", (draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 2, 4, 8])), draw(pow2) * 2,
                    draw(st.sampled_from([16, 32, 64, 128])))


def _one_row(case, table, draft):
    """A one-draft table of `draft` (possibly not in `table`)."""
    tiles = np.array([[t.tile for t in set_tilings(case.op, dimension_sets(case.op), draft)]], np.int64)
    return from_drafts([draft], table.lane_vars, tiles)


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.integers(0, 2 ** 31 - 1))
def test_counts_match_the_lowering(kc, seed):
    """Every count equals the lowering's per group, for the preset's
    broadcast-granularity drafts and for the same drafts with per-core
    commands (a backend with per_core_commands generates those)."""
    kernel, shape = kc
    case = make_case(BE, kernel, shape)
    table = case_drafts(case, BE)
    checked = 0
    for i in np.random.default_rng(seed).choice(len(table), min(4, len(table)), replace=False):
        for gran in ("broadcast", "core"):
            draft = dataclasses.replace(table[int(i)], granularity=gran)
            prog = try_lower(case, draft, BE)
            if prog is None:
                continue
            cnt = {k: int(v[0]) for k, v in _counts(case, _one_row(case, table, draft)).items()}
            assert cnt["passes"] == prog.meta["passes"]
            for ours, theirs in STATS.items():
                assert cnt[ours] * prog.groups == prog.stats.commands[theirs], (ours, draft)
            col = BE.core.col_bytes
            assert cnt["readres_bursts"] * prog.groups * col == prog.stats.readback_bytes
            checked += 1
    assert checked >= 2


def test_rounds_of_a_small_mmtv():
    """Newton MMTV [1, 4, 64, 32] with every head in each bank (the sequence
    over 8 x 8 banks, the head dim over 2 groups) runs a GWRITE / G_ACT /
    READRES round per head: 4 loads where heads over groups need 1."""
    case = make_case(BE, "mmtv", (1, 4, 64, 32))
    table = case_drafts(case, BE)
    cnt = _counts(case, table)
    parts = [[(p.groups, p.cores) for p in table[i].parts] for i in range(len(table))]
    many = parts.index([(1, 1), (1, 1), (8, 8), (2, 1)])
    one = parts.index([(1, 1), (4, 1), (4, 1), (1, 1)])
    assert cnt["loads"][many] == 4 and cnt["readres"][many] == 4
    assert cnt["loads"][one] == 1


@given(st.integers(1, 50), st.integers(1, 12), st.integers(1, 32))
def test_spans_brute_force(n_loads, segs, per_row):
    """Rows touched by consecutive runs of segs segments, per_row a row."""
    brute = sum(((j * segs + segs - 1) // per_row) - (j * segs // per_row) + 1 for j in range(n_loads))
    assert int(_spans(n_loads, segs, per_row)) == brute


def _group_counts(prog) -> dict:
    """Per-group command counts read off the lowered records ([G] arrays each;
    a load is a run of consecutive GWRITE records, its PREA in between)."""
    from pimjax.lower.program import Op
    op, n = np.asarray(prog.commands.op), np.asarray(prog.commands.n)
    gw = op == Op.GWRITE
    starts = gw & ~np.pad(gw, ((0, 0), (1, 0)))[:, :-1]
    return dict(loads=starts.sum(1), gwrite_cols=gw.sum(1), g_act=(op == Op.G_ACT).sum(1),
                comp=(op == Op.COMP).sum(1), comp_cols=np.where(op == Op.COMP, n, 0).sum(1),
                readres=(op == Op.READRES).sum(1))


conv_shapes = st.tuples(st.sampled_from([5, 7, 8, 12, 14]), st.sampled_from([5, 7, 8, 14]),
                        st.sampled_from([3, 8, 16, 32, 64]), st.sampled_from([8, 16, 32]), st.sampled_from([1, 3]))


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conv_shapes, st.integers(0, 2 ** 31 - 1))
def test_conv_counts_match_the_lowering(shape, seed):
    """K x K convolutions: the closed-form counts of broadcast
    drafts, half of them tiling a halo set (h, kh) by a mapping that is not
    a single variable, equal the fullest group's counts of the lowered
    program and its passes.  The counts come from `newton_geometry`'s box
    (h widened by the halo, kh whole) and vector classes (one, except where
    an edge core's band cuts kh); the lowered ones from its records."""
    case = make_case(BE, "conv", shape)
    table = case_drafts(case, BE)
    op = case.op
    sets = dimension_sets(op)
    compound = [si for si, s in enumerate(sets) if len(s.vars) > 1]
    reps = np.asarray(table.reps)
    halo = np.zeros(len(table), bool)
    for si in compound:
        single = np.array([sets[si].mapping(r).single_var is None for r in range(len(sets[si].candidates))])
        halo |= single[reps[:, si]]
    bc = table.column("granularity") == 0
    rng = np.random.default_rng(seed)
    pick = []
    for pool in (np.nonzero(bc & halo)[0], np.nonzero(bc & ~halo)[0]):
        pick += list(rng.choice(pool, min(3, len(pool)), replace=False)) if len(pool) else []
    mi, vi = matrix_and_vector(op, case.shapes)
    vv = set(op.operands[vi].vars)
    sub = table.take(np.asarray(pick, np.int64))
    geo = newton_geometry(op, vv, sets, sub.reps, sub.tile, sub.groups, sub.cores)
    cnt = newton_counts(op, set(op.operands[mi].vars), vv, geo["lens"], geo["busy"], sub.column("dataflow"),
                        sub.column("buffers"), sub.column("granularity") == 1, geo["passes"], BE)
    checked = 0
    for j, i in enumerate(pick):
        prog = try_lower(case, table[int(i)], BE)
        if prog is None:
            continue
        assert int(cnt["passes"][j]) == prog.meta["passes"], table[int(i)]
        low = _group_counts(prog)
        for k, v in low.items():
            assert int(cnt[k][j]) == int(v.max()), (k, table[int(i)])
        checked += 1
    assert checked >= 2


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 300), st.integers(1, 13), st.sampled_from([3, 50, 10 ** 6, 2 ** 40]), st.integers(0, 2 ** 31))
def test_unique_rows_equal_numpys(n, m, high, seed):
    """`unique_rows` (one packed key per row) gives np.unique(axis=0)'s rows,
    order and inverse, also where the packed key would overflow (its fallback)."""
    from pimjax.backends.newton.counts import unique_rows
    a = np.random.default_rng(seed).integers(-5, high, size=(n, m))
    got, inv = unique_rows(a)
    want, want_inv = np.unique(a, axis=0, return_inverse=True)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(inv, np.asarray(want_inv).reshape(-1))
