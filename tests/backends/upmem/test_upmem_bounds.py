"""UPMEM's lower bound on a draft's cycles (`backends/upmem/bounds.py`) and
the exhaustive searches' branch and bound over it.

The bound is checked against lowering + UPMEM's time model on random shapes
and drafts of every UPMEM kernel: never above the simulated total.  The
pruned exhaustive tuner search is checked against the full one: the same
draft and cycles, fewer drafts lowered."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pimjax.backends import family_of
from pimjax.backends.upmem.bounds import lower_bound
from pimjax.backends.upmem.lower import PRIM_OPTIONS
from pimjax.costmodel.dataset import try_lower
from pimjax.costmodel.kernels import case_drafts, make_case
from pimjax.errors import PimCompileError
from pimjax.hw import get_backend
from pimjax.lower import lower
from pimjax.partition import drafts
from pimjax.partition.verify import infer_shapes
from pimjax.search.tuner import Tuner
from pimjax.sim.cycles import cycles
from pimjax.trace import make_graph
from tests.backends.hbm_pim.test_hbm_pim_bounds import check_pruned_search_is_the_full_one
from tests.helpers import slow_params

BACKEND = get_backend("upmem", dpus=256)

SHAPES = {"gemv": lambda a, b, c: (a, b), "mmtv": lambda a, b, c: (1, c, a, b),
          "red": lambda a, b, c: (a * b,), "va": lambda a, b, c: (a, b), "relu": lambda a, b, c: (a * c,)}


OPTIONS = [{}, PRIM_OPTIONS, {"elem_bytes": 8}, {"boundary": "element"}, {"boundary": "tile", "rows_per_block": 3},
           {"resident": (0,)}, {"tasklet_split": "outputs", "acc_in_wram": True}]


@settings(max_examples=20, deadline=None)
@given(kernel=st.sampled_from(sorted(SHAPES)), a=st.integers(1, 400), b=st.integers(1, 300),
       c=st.integers(1, 6), seed=st.integers(0, 2 ** 16), opt=st.integers(0, len(OPTIONS) - 1))
def test_bound_never_exceeds_the_simulated_total(kernel, a, b, c, seed, opt):
    """Below the simulated total under every lowering option set, and below
    the report's own pipeline time (its instructions, one a DPU cycle)."""
    options = OPTIONS[opt]
    case = make_case(BACKEND, kernel, SHAPES[kernel](a, b, c))
    table = case_drafts(case, BACKEND)
    bound = lower_bound(case.op, table, BACKEND, case.shapes, options)
    assert bound is not None and bound.shape == (len(table),) and np.all(bound > 0)
    rng = np.random.default_rng(seed)
    pick = rng.choice(len(table), min(8, len(table)), replace=False)
    # the drafts the branch and bound simulates first: the smallest bounds, where it is tightest
    pick = np.unique(np.concatenate([pick, np.argsort(bound, kind="stable")[:3]]))
    t = BACKEND.timing
    for i in pick:
        try:
            prog = lower(case.op, table[int(i)], BACKEND, case.shapes, **options)
        except PimCompileError:
            continue
        rep = cycles(prog, BACKEND)
        pipeline = float(rep.counts["instructions"]) / t.dpu_clock_ghz / t.tCK
        assert bound[i] <= pipeline * (1 + 1e-9) and pipeline <= float(rep.total_cycles) * (1 + 1e-6)


@pytest.mark.parametrize("kernel,shape", [("gemv", (4096, 512)), ("va", (65536,)), ("red", (65536,)),
                                          ("mmtv", (1, 8, 128, 64))])
def test_bound_is_close_to_the_pipeline_time_on_even_tiles(kernel, shape):
    """On shapes the DPUs divide evenly the bound is the instructions' time
    less the per-tile and set-up instructions: within 1.5x of it (measured
    1.00-1.33x), so it prunes."""
    case = make_case(BACKEND, kernel, shape)
    table = case_drafts(case, BACKEND)
    bound = lower_bound(case.op, table, BACKEND, case.shapes)
    t = BACKEND.timing
    for i in np.random.default_rng(0).choice(len(table), 12, replace=False):
        prog = try_lower(case, table[int(i)], BACKEND)
        if prog is None:
            continue
        pipeline = float(cycles(prog, BACKEND).counts["instructions"]) / t.dpu_clock_ghz / t.tCK
        assert 1.0 <= pipeline / bound[i] <= 1.5


def test_no_bound_for_a_body_the_dpu_cannot_run():
    """abs has no DPU instruction sequence: no bound, and the exhaustive
    tuner says no draft lowers (None) instead of raising."""
    op = make_graph(lambda x: jnp.abs(x), np.zeros(4096, np.int32)).ops[0]
    backend = get_backend("upmem", dpus=64)
    shapes = infer_shapes(op)
    table = drafts(op, backend, shapes=shapes)
    assert len(table) and lower_bound(op, table, backend, shapes) is None
    assert Tuner(mode="exhaustive").choose(op, backend, shapes) is None


# the heaviest cases (30 s and more each on 2 cores) run with the slow ones (CI runs them)
@pytest.mark.parametrize("kernel,shape", slow_params([("gemv", (300, 64)), ("va", (3000,))], {("gemv", (300, 64))}))
def test_pruned_exhaustive_search_picks_what_the_full_one_picks(kernel, shape, monkeypatch):
    check_pruned_search_is_the_full_one(make_case(BACKEND, kernel, shape), BACKEND, monkeypatch)


def test_the_family_registers_it():
    assert family_of(BACKEND).lower_bound is lower_bound
