"""HBM-PIM's lower bound on a contraction draft's cycles (`backends/hbm_pim/bounds.py`)
and the exhaustive tuner's branch and bound over it.

The bound is checked against lowering + simulation (the tuner's own engine)
on random shapes and drafts: never above the simulated total, with and
without the matrix resident.  The pruned exhaustive search is checked
against the full one (`EXHAUSTIVE_BOUND = False`): the same draft and the
same cycles, and it lowers fewer drafts."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pimjax.search.strategy as strategy_mod
from pimjax.backends import family_of
from pimjax.backends.hbm_pim.bounds import column_gaps, lower_bound
from pimjax.costmodel.kernels import case_drafts, make_case
from pimjax.errors import PimCompileError
from pimjax.hw import get_backend
from pimjax.hw.dram_rules import CCD_AB, CCD_L, CCD_S, compile_rules
from pimjax.lower import lower
from pimjax.search.tuner import Tuner
from pimjax.sim.cycles import cycles_batch

BACKEND = get_backend("hbm-pim", channels=4)


def _bound_vs_simulated(kernel, shape, seed, n=12, options=None):
    case = make_case(BACKEND, kernel, shape)
    table = case_drafts(case, BACKEND)
    bound = lower_bound(case.op, table, BACKEND, case.shapes, options)
    assert bound is not None and bound.shape == (len(table),)
    rng = np.random.default_rng(seed)
    rows, programs = [], []
    for i in rng.choice(len(table), min(n, len(table)), replace=False):
        try:
            programs.append(lower(case.op, table[int(i)], BACKEND, case.shapes, **(options or {})))
        except PimCompileError:
            continue
        rows.append(int(i))
    if not programs:
        return None
    total = np.asarray(cycles_batch(programs, BACKEND).total_cycles, np.float64)
    return bound[rows], total


@settings(max_examples=12, deadline=None)
@given(kernel=st.sampled_from(["gemv", "mmtv", "gemm"]), a=st.integers(3, 300), b=st.integers(3, 300),
       c=st.integers(1, 6), seed=st.integers(0, 2 ** 16), resident=st.booleans())
def test_bound_never_exceeds_the_simulated_total(kernel, a, b, c, seed, resident):
    shape = {"gemv": (a, b), "mmtv": (1, c, a, b), "gemm": (a, b, c)}[kernel]
    options = {"resident": (0, 1)} if resident else None     # either operand index may be the matrix
    got = _bound_vs_simulated(kernel, shape, seed, options=options)
    if got is None:
        return
    bound, total = got
    assert np.all(bound <= total), (bound, total)
    assert np.all(bound >= 0)


def test_bound_counts_the_writes_and_macs_of_a_known_tiling():
    """GEMV 1024 x 512 on one pCH, one unit, KI = KO = 1: 1024 x 512 / 16
    MACs and as many host writes, and one GRF_B store per output."""
    case = make_case(BACKEND, "gemv", (1024, 512))
    table = case_drafts(case, BACKEND)
    pick = [i for i in range(len(table))
            if np.prod(table.groups[i]) == 1 and np.prod(table.cores[i]) == 1 and table[i].ki == 1
            and table[i].ko == 1 and table[i].dataflow == "os" and table[i].lane_var == "k"]
    assert pick, "the space holds the one-unit draft"
    g, g_same = column_gaps(BACKEND)
    lanes = BACKEND.core.lanes
    macs = 1024 * (512 // lanes)
    expect = macs * g + (macs + 1024 - 1) * g_same
    assert lower_bound(case.op, table, BACKEND, case.shapes)[pick[0]] == pytest.approx(expect)
    lat = compile_rules(BACKEND.timing)
    assert g == min(lat[CCD_S], lat[CCD_L], lat[CCD_AB]) and g_same == min(lat[CCD_L], lat[CCD_AB])


def check_pruned_search_is_the_full_one(case, backend, monkeypatch) -> None:
    """The exhaustive tuner with branch and bound picks the draft (and the
    cycles) of the one that simulates every draft, and simulates fewer."""
    monkeypatch.setattr(strategy_mod, "EXHAUSTIVE_BOUND", True)
    pruned = Tuner(mode="exhaustive").choose(case.op, backend, case.shapes)
    monkeypatch.setattr(strategy_mod, "EXHAUSTIVE_BOUND", False)
    full = Tuner(mode="exhaustive").choose(case.op, backend, case.shapes)
    assert pruned.draft == full.draft
    assert float(pruned.report.total_cycles) == float(full.report.total_cycles)
    assert full.pruned == 0 and pruned.pruned > 0
    assert pruned.simulated < full.simulated


@pytest.mark.parametrize("shape", [(2048, 1000), (777, 333)])
def test_pruned_exhaustive_search_picks_what_the_full_one_picks(shape, monkeypatch):
    check_pruned_search_is_the_full_one(make_case(BACKEND, "gemv", shape), BACKEND, monkeypatch)


def test_no_bound_for_other_kinds_and_families():
    va = make_case(BACKEND, "va", (4096,))
    assert lower_bound(va.op, case_drafts(va, BACKEND), BACKEND, va.shapes) is None
    assert family_of(get_backend("attacc")).lower_bound is None
