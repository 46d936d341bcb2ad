"""Newton's closed-form phase times (`costmodel.newton_time`, through the
features' estimates) against lowering + simulation with refresh off, on
random GEMV / MMTV / GEMM shapes (powers of two and ragged sizes) and drafts."""
import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pimjax.costmodel.dataset import _try_lower
from pimjax.costmodel.features import FEATURE_NAMES, features_table
from pimjax.costmodel.kernels import case_drafts, make_case
from pimjax.costmodel.newton_counts import newton_plan
from pimjax.costmodel.newton_time import newton_phases
from pimjax.hw.presets import get_backend
from pimjax.partition import dimension_sets
from pimjax.partition.verify import matrix_and_vector, per_core_var_lengths
from pimjax.sim.cycles import cycles

BE = get_backend("newton")
EST = [list(FEATURE_NAMES).index(f"est_t_{p}") for p in ("rearr", "compute", "readback")]

size = st.one_of(st.integers(0, 6).map(lambda e: 2 ** e), st.integers(3, 70))


@st.composite
def cases(draw):
    kernel = draw(st.sampled_from(["gemv", "gemv", "mmtv", "mmtv", "gemm"]))
    if kernel == "gemv":
        return "gemv", (draw(size) * 4, draw(size) * 8)
    if kernel == "gemm":
        return "gemm", (draw(st.integers(1, 24)), draw(size) * 8, draw(st.integers(1, 40)))
    return "mmtv", (draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 2, 3, 4, 8])), draw(size) * 2,
                    draw(st.sampled_from([16, 32, 48, 64])))


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.integers(0, 2 ** 31 - 1))
def test_phases_match_the_simulator_without_refresh(kc, seed):
    """Rearrangement, compute and read-back of broadcast drafts equal the
    simulated ones (refresh off) within the features' float32 precision."""
    kernel, shape = kc
    case = make_case(BE, kernel, shape)
    table = case_drafts(case, BE)
    broadcast = [i for i in range(len(table)) if table[i].granularity == "broadcast"]
    rows = np.random.default_rng(seed).permutation(broadcast)[:12]
    est = 2.0 ** features_table(case.target, table.take(rows), BE, case.shapes)[:, EST].astype(np.float64) - 1
    checked = 0
    for j, i in enumerate(rows):
        prog = _try_lower(case, table[int(i)], BE)
        if prog is None:
            continue
        rep = cycles(prog, BE, refresh=False)
        sim = np.array([float(rep.rearrangement), float(rep.compute), float(rep.readback)])
        np.testing.assert_allclose(est[j], sim, rtol=2e-3, atol=0.5, err_msg=str(table[int(i)]))
        checked += 1
        if checked == 4:
            break
    assert checked >= 1


def test_gemv_phases_by_hand():
    """GEMV [256, 1024], rows over 4 x 16 banks, the reduction over 4 groups
    (the held-out optimum): 1 024 host columns per group, one round of 16
    GWRITE columns, two rows of two 16-column COMPs, one READRES."""
    case = make_case(BE, "gemv", (256, 1024))
    table = case_drafts(case, BE)
    parts = [[(p.groups, p.cores) for p in table[i].parts] for i in range(len(table))]
    i = next(k for k, p in enumerate(parts) if p == [(4, 16), (4, 1)] and table[k].dataflow == "os"
             and table[k].buffers == 1 and table[k].granularity == "broadcast")
    op = case.op
    sets = dimension_sets(op)
    one = table.take(np.array([i]))
    lens = per_core_var_lengths(op, sets, np.asarray(one.reps), np.asarray(one.tile))
    mi, vi = matrix_and_vector(op, case.shapes)
    plan = newton_plan(op, set(op.operands[mi].vars), set(op.operands[vi].vars), lens, sets,
                       np.asarray(one.cores), one.column("dataflow"), one.column("buffers"), BE)
    ph = newton_phases(plan, np.asarray(one.cores).prod(axis=1), np.array([False]), BE)
    assert int(ph["wr_cols"][0]) == 16 * 64
    t = BE.timing
    # the kernel after the leading writes: G_ACT (staggered over 4 bank groups), two COMPs of
    # 16 columns tCCD_AB apart, the second row's G_ACT after tRTP + tRP, two COMPs, READRES
    g_act1 = 3 * t.tFAW + t.tRCDRD                          # 62, less the overlap with the GWRITEs
    comp_row = 2 * 16 * t.tCCD_AB                           # 64
    g_act2 = t.tRTP_S + t.tRP + 3 * t.tFAW + t.tRCDRD       # 75 after the last COMP column
    assert ph["compute"][0] == pytest.approx(g_act1 - 9 + comp_row + g_act2 - 2 + comp_row)
    # READRES of 16 banks x 4 latches x 4 B = 8 bursts, tCCD_L apart, after the last COMP
    assert ph["readback"][0] == pytest.approx(t.tCCD_L - t.tCCD_AB + 7 * t.tCCD_L + t.tCL + t.tBL)
    prog = _try_lower(case, table[i], BE)
    rep = cycles(prog, BE, refresh=False)
    assert float(rep.compute) == ph["compute"][0] and float(rep.readback) == ph["readback"][0]


def test_single_bank_drafts_are_left_to_the_counts():
    """Per-core (single-bank) drafts get NaN phases: the features keep the
    count-based estimates for them."""
    case = make_case(BE, "gemv", (128, 128))
    table = case_drafts(case, BE)
    i = next(k for k in range(len(table)) if table[k].granularity == "broadcast")
    draft = dataclasses.replace(table[i], granularity="core")
    assert draft.granularity == "core"
    op = case.op
    sets = dimension_sets(op)
    one = table.take(np.array([i, i]))
    lens = per_core_var_lengths(op, sets, np.asarray(one.reps), np.asarray(one.tile))
    mi, vi = matrix_and_vector(op, case.shapes)
    plan = newton_plan(op, set(op.operands[mi].vars), set(op.operands[vi].vars), lens, sets,
                       np.asarray(one.cores), one.column("dataflow"), one.column("buffers"), BE)
    ph = newton_phases(plan, np.asarray(one.cores).prod(axis=1), np.array([False, True]), BE)
    assert np.isfinite(ph["compute"][0]) and np.isnan(ph["compute"][1])
