"""Newton's closed-form command counts (`costmodel.newton_counts`) against
the lowering's own counts, on random power-of-two GEMV / MMTV shapes (every
group then runs the same stream, so the lowering's totals are G x ours)."""
import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pimjax.costmodel.dataset import try_lower
from pimjax.costmodel.kernels import case_drafts, make_case
from pimjax.backends.newton.counts import _spans, newton_counts
from pimjax.hw.presets import get_backend
from pimjax.partition import dimension_sets
from pimjax.partition.table import from_drafts
from pimjax.partition.tiles import set_tilings
from pimjax.partition.verify import matrix_and_vector, per_core_var_lengths

BE = get_backend("newton")
# ours -> the lowering's name in Program.stats["commands"]
STATS = dict(loads="GWRITE", gwrite_cols="GWRITE_columns", g_act="G_ACT", comp="COMP_records",
             comp_cols="COMP", readres="READRES")


def _counts(case, table):
    op = case.op
    sets = dimension_sets(op)
    lens = per_core_var_lengths(op, sets, np.asarray(table.reps), np.asarray(table.tile))
    mi, vi = matrix_and_vector(op, case.shapes)
    return newton_counts(op, set(op.operands[mi].vars), set(op.operands[vi].vars), lens, sets,
                         np.asarray(table.cores), table.column("dataflow"), table.column("buffers"),
                         table.column("granularity") == 1, BE)


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
                assert cnt[ours] * prog.groups == prog.stats["commands"][theirs], (ours, draft)
            col = BE.core.col_bytes
            assert cnt["readres_bursts"] * prog.groups * col == prog.stats["readback_bytes"]
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
