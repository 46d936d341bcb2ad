"""UPMEM's lower bound on a draft's cycles (`backends/upmem/bounds.py`) and
the exhaustive searches' branch and bound over it.

The bound is checked against lowering + UPMEM's time model on random shapes
and drafts of every UPMEM kernel: never above the simulated total.  The
pruned exhaustive tuner search is checked against the full one: the same
draft and cycles, fewer drafts lowered."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import pimjax.search.tuner as tuner_mod
from pimjax.backends import family_of
from pimjax.backends.upmem.bounds import lower_bound
from pimjax.backends.upmem.lower import kernel_constants
from pimjax.costmodel.dataset import simulate, try_lower
from pimjax.costmodel.kernels import case_drafts, make_case
from pimjax.hw import get_backend
from pimjax.search.tuner import Tuner

BACKEND = get_backend("upmem", dpus=256)

SHAPES = {"gemv": lambda a, b, c: (a, b), "mmtv": lambda a, b, c: (1, c, a, b),
          "red": lambda a, b, c: (a * b,), "va": lambda a, b, c: (a, b), "relu": lambda a, b, c: (a * c,)}


@settings(max_examples=15, deadline=None)
@given(kernel=st.sampled_from(sorted(SHAPES)), a=st.integers(1, 400), b=st.integers(1, 300),
       c=st.integers(1, 6), seed=st.integers(0, 2 ** 16))
def test_bound_never_exceeds_the_simulated_total(kernel, a, b, c, seed):
    case = make_case(BACKEND, kernel, SHAPES[kernel](a, b, c))
    table = case_drafts(case, BACKEND)
    bound = lower_bound(case.op, table, BACKEND, case.shapes)
    assert bound is not None and bound.shape == (len(table),) and np.all(bound > 0)
    rng = np.random.default_rng(seed)
    pick = rng.choice(len(table), min(10, len(table)), replace=False)
    progs = [try_lower(case, table[int(i)], BACKEND) for i in pick]
    ok = [k for k, p in enumerate(progs) if p is not None]
    total = simulate([progs[k] for k in ok], BACKEND)[:, 0]
    assert np.all(bound[pick[ok]] <= total), (bound[pick[ok]], total)


def test_bound_is_the_pipeline_time_of_the_mean_dpu_share():
    """GEMV 4096 x 512: a draft over d DPUs has at least 4096 x 512 / d points
    on one DPU, point_cost instructions each, one a DPU cycle."""
    case = make_case(BACKEND, "gemv", (4096, 512))
    table = case_drafts(case, BACKEND)
    dpus = table.groups_used * table.cores_used
    i = int(np.argmax(dpus))
    pc = kernel_constants(case.op)["point_cost"]
    t = BACKEND.timing
    expect = max(math.ceil(4096 * 512 / dpus[i]), 1) * pc / t.dpu_clock_ghz / t.tCK
    assert lower_bound(case.op, table, BACKEND, case.shapes)[i] >= expect * (1 - 1e-12)
    # and the per-DPU tile's worst-case box is never below the mean share
    assert np.all(lower_bound(case.op, table, BACKEND, case.shapes)
                  >= np.ceil(4096 * 512 / dpus) * pc / t.dpu_clock_ghz / t.tCK * (1 - 1e-12))


@pytest.mark.parametrize("kernel,shape", [("gemv", (300, 64)), ("va", (3000,))])
def test_pruned_exhaustive_search_picks_what_the_full_one_picks(kernel, shape, monkeypatch):
    case = make_case(BACKEND, kernel, shape)
    monkeypatch.setattr(tuner_mod, "EXHAUSTIVE_BOUND", True)
    pruned = Tuner(mode="exhaustive").choose(case.op, BACKEND, case.shapes)
    monkeypatch.setattr(tuner_mod, "EXHAUSTIVE_BOUND", False)
    full = Tuner(mode="exhaustive").choose(case.op, BACKEND, case.shapes)
    assert pruned.draft == full.draft
    assert float(pruned.report.total_cycles) == float(full.report.total_cycles)
    assert full.pruned == 0 and pruned.pruned > 0
    assert pruned.simulated < full.simulated


def test_the_family_registers_it():
    assert family_of(BACKEND).lower_bound is lower_bound
