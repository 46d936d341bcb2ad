"""Newton's lower bound on a draft's cycles (`backends/newton/bounds.py`)
and the exhaustive tuner's branch and bound over it.

The bound is checked against lowering + simulation (the tuner's own engine,
refresh on) on random GEMV / MMTV / GEMM / 1 x 1 and 3 x 3 convolution
shapes and drafts, broadcast and single-bank, on Newton and Newton++, with
either operand in the banks, the matrix resident, register reuse or the
data-block layout off: never above the simulated total.  The pruned
exhaustive search is checked against the full one (`EXHAUSTIVE_BOUND =
False`): the same draft and the same cycles, fewer drafts lowered."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from pimjax.backends import family_of
from pimjax.backends.newton.bounds import lower_bound, spacings
from pimjax.backends.newton.counts import plan_counts
from pimjax.backends.newton.time import draft_plans
from pimjax.costmodel.kernels import case_drafts, make_case
from pimjax.errors import PimCompileError
from pimjax.hw import get_backend
from pimjax.hw.presets import newton_config
from pimjax.lower import lower
from pimjax.sim.cycles import cycles, cycles_batch
from tests.backends.hbm_pim.test_hbm_pim_bounds import check_pruned_search_is_the_full_one

BACKENDS = {"newton": get_backend("newton"), "newton++": newton_config("newton++", channels=16, total_channels=32)}


def _bound_vs_simulated(backend, kernel, shape, seed, n=10, options=None, per_core=False):
    """(bound, simulated total) of up to n random drafts of the case that lower
    (per_core: single-bank drafts only).  A case without such a draft, or
    whose sampled drafts all fail to lower, is no example (hypothesis
    `assume`): it draws another, and fails the test if too many are
    rejected, rather than passing it with nothing checked."""
    case = make_case(backend, kernel, shape)
    table = case_drafts(case, backend)
    bound = lower_bound(case.op, table, backend, case.shapes, options)
    assert bound is not None and bound.shape == (len(table),)
    assert np.all(bound >= 0)
    pool = np.arange(len(table))
    if per_core:
        pool = pool[table.column("granularity") == 1]
        assume(len(pool) > 0)
    rows, programs = [], []
    for i in np.random.default_rng(seed).choice(pool, min(n, len(pool)), replace=False):
        try:
            programs.append(lower(case.op, table[int(i)], backend, case.shapes, **(options or {})))
        except PimCompileError:
            continue
        rows.append(int(i))
    assume(len(programs) > 0)
    total = np.asarray(cycles_batch(programs, backend).total_cycles, np.float64)
    return bound[rows], total


@st.composite
def cases(draw):
    kernel = draw(st.sampled_from(["gemv", "mmtv", "gemm", "conv1", "conv3"]))
    a, b = draw(st.integers(3, 300)), draw(st.integers(3, 300))
    if kernel == "gemv":
        return "gemv", (a, b)
    if kernel == "mmtv":
        return "mmtv", (1, draw(st.integers(1, 6)), a, draw(st.integers(3, 80)))
    if kernel == "gemm":
        return "gemm", (draw(st.integers(1, 24)), b, draw(st.integers(1, 40)))
    hw = draw(st.integers(3, 14))
    return "conv", (hw, hw, draw(st.integers(3, 64)), draw(st.integers(3, 64)), 1 if kernel == "conv1" else 3)


@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(sorted(BACKENDS)), kc=cases(), seed=st.integers(0, 2 ** 16),
       option=st.sampled_from(["", "", "matrix", "resident", "register_reuse", "data_block_layout"]),
       per_core=st.booleans())
# a single-bank draft with 8 cores over a GEMM's 9 output columns in tiles of 2: 3 cores idle, whose
# matrix columns the bound once counted (1 673 against 1 645 simulated cycles)
@example(name="newton", kc=("gemm", (17, 33, 9)), seed=0, option="", per_core=False)
def test_bound_never_exceeds_the_simulated_total(name, kc, seed, option, per_core):
    kernel, shape = kc
    options = {"": None, "matrix": {"matrix": 1}, "resident": {"resident": (0, 1)},
               "register_reuse": {"register_reuse": False}, "data_block_layout": {"data_block_layout": False}}[option]
    bound, total = _bound_vs_simulated(BACKENDS[name], kernel, shape, seed, options=options, per_core=per_core)
    assert len(bound) == len(total) > 0
    assert np.all(bound <= total), (bound, total)


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_bound_of_every_draft_of_a_1x1_conv(name):
    """Every draft of a small 1 x 1 convolution (both granularities): the
    bound stays below the simulated total and is positive where it applies."""
    backend = BACKENDS[name]
    case = make_case(backend, "conv", (7, 7, 48, 24, 1))
    table = case_drafts(case, backend)
    bound = lower_bound(case.op, table, backend, case.shapes)
    assert (bound > 0).all()
    rows = np.arange(0, len(table), max(1, len(table) // 150))
    programs = [lower(case.op, table[int(i)], backend, case.shapes) for i in rows]
    total = np.asarray(cycles_batch(programs, backend).total_cycles, np.float64)
    assert np.all(bound[rows] <= total)
    assert np.median(bound[rows] / total) > 0.4          # a bound that prunes, not a token one


def test_bound_of_a_known_tiling():
    """GEMV [256, 1024], rows over 4 x 16 banks and the reduction over 4
    groups (`test_newton_time.test_gemv_phases_by_hand`'s draft): per group
    64 columns (4 rows x 16) in each of 16 banks written by the host, one
    load of 16 GWRITE columns (one vector, one 16-column chunk), 64 COMP
    columns over two G_ACTs (one row switch), a READRES of 8 bursts, then
    the host's merge of 16 groups' read-back."""
    be = BACKENDS["newton"]
    case = make_case(be, "gemv", (256, 1024))
    table = case_drafts(case, be)
    parts = [[(p.groups, p.cores) for p in table[i].parts] for i in range(len(table))]
    i = next(k for k, p in enumerate(parts) if p == [(4, 16), (4, 1)] and table[k].dataflow == "os"
             and table[k].buffers == 1 and table[k].granularity == "broadcast")
    plan, banks, _ = draft_plans(case.op, table.take(np.array([i])), case.shapes, be)
    cnt = plan_counts(plan, np.asarray(table.cores)[[i]], np.zeros(1, bool), be)
    assert (int(cnt["comp_cols"][0]), int(cnt["g_act"][0])) == (64, 2)
    sp = spacings(be)
    t = be.timing
    w, gw = 16 * 64, int(plan["kv"][0] * plan["ki"][0] * plan["cc"][0])
    assert int(cnt["readres"][0]) == 1                  # after the last COMP: no READRES inside a row
    expect = (w + gw) * sp["g"] + (64 - 1 - 1) * t.tCCD_AB + sp["row"] + t.tCCD_AB + 7 * t.tCCD_L + t.tCL + t.tBL
    assert sp["row"] == t.tRTP_S + t.tRP + 3 * t.tFAW + t.tRCDRD
    # the host merge: 16 groups read 8 bursts of 32 B each, one add per 4-byte value, the 256 results
    readback = 16 * 8 * be.core.col_bytes
    merge = be.system.host.time_ns(readback + 256 * 4, readback // 4) / t.tCK
    rep = cycles(lower(case.op, table[i], be, case.shapes), be)
    assert float(rep.merge) == pytest.approx(merge, rel=1e-6)         # what the simulator adds
    assert lower_bound(case.op, table, be, case.shapes)[i] == pytest.approx(expect + merge, rel=1e-6)


@pytest.mark.parametrize("name,kernel,shape", [
    ("newton++", "conv", (7, 7, 96, 24, 1)),      # a MobileNet-V2-like 1 x 1 projection
    ("newton", "gemv", (777, 333)),
])
def test_pruned_exhaustive_search_picks_what_the_full_one_picks(name, kernel, shape, monkeypatch):
    backend = BACKENDS[name]
    check_pruned_search_is_the_full_one(make_case(backend, kernel, shape), backend, monkeypatch)


class _Packed:
    """A draft table with a `pack` column (a knob this bound does not know)."""

    def __init__(self, table, pack):
        self._t, self.pack = table, pack

    def __len__(self):
        return len(self._t)

    def __getattr__(self, name):
        return getattr(self._t, name)


def test_packed_drafts_are_not_pruned():
    be = BACKENDS["newton"]
    case = make_case(be, "gemv", (512, 256))
    table = case_drafts(case, be)
    pack = np.arange(len(table)) % 2
    bound = lower_bound(case.op, _Packed(table, pack), be, case.shapes)
    assert np.all(bound[pack > 0] == 0) and np.all(bound[pack == 0] > 0)


def test_registered_and_none_for_other_kinds():
    be = BACKENDS["newton"]
    assert family_of(be).lower_bound is lower_bound
    red = make_case(get_backend("hbm-pim"), "red", (4, 512))
    assert lower_bound(red.op, case_drafts(red, get_backend("hbm-pim")), be, red.shapes) is None
