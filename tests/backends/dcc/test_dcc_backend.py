"""DCC's simulator as a named configuration (issue 51, deliverable 2): `get_backend("attacc" /
"hbm-pim", simulator="dcc")` on DCC's one HBM3 cube, timed through the Backend API against DCC's
artifact (`../shared/reference/dcc-artifact.csv`): a fast sample here, every row in the slow
test; `pim_jit` and the tuner on it equal `jax.jit`; what DCC cannot time is refused with the
reason."""
from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from experiments import dcc_reference
from pimjax import PimCompileError, make_graph, pim_jit
from pimjax.backends.dcc import engine, predict
from pimjax.backends.dcc.tiling import lower_tiling, pimjax_shape, to_draft
from pimjax.hw import get_backend
from pimjax.kernels import kernel_op
from pimjax.lower import lower
from pimjax.partition import drafts
from pimjax.sim.cycles import cycles, sweep
from pimjax.sim.execute import execute
from tests.backends.dcc.helpers import artifact_rows
from tests.test_api import TOL, _close, tuner

TOLERANCE = 0.10
# (fork, kernel, shape, tiling): small GEMV rows, the two baselines among them; the second
# hbm-pim row splits the vector over cores (lowered for values from a broadcast draft)
GEMV_SAMPLE = [("attacc", "1,32,128,512", [[1, 16, 2], [2, 4, 16], [8, 1, 64]]),
               ("attacc", "1,32,128,512", [[16, 1, 2], [1, 4, 32], [1, 16, 32]]),
               ("hbmpim", "1,32,128,512", [[16, 1, 2], [1, 4, 32], [1, 16, 32]])]
# whole groups of RED / VA rows (each row < 0.2 s)
GROUP_SAMPLE = [("attacc", "red", "1,4096"), ("hbmpim", "va", "1,4096"), ("hbmpim", "red", "1,1024")]


def _is(r, fork, kernel, shape, tiling=None):
    return (r["backend"], r["kernel"], r["shape"].replace(" ", "")) == (fork, kernel, shape) and \
        (tiling is None or json.loads(r["tiling"]) == tiling)


@pytest.fixture(scope="module")
def dcc_attacc():
    return get_backend("attacc", simulator="dcc")


@pytest.fixture(scope="module")
def dcc_hbm_pim():
    return get_backend("hbm-pim", simulator="dcc")


def test_the_configurations_are_dccs_cube(dcc_attacc, dcc_hbm_pim):
    for be in (dcc_attacc, dcc_hbm_pim):
        assert be.group.controller == "dcc" and be.variant.endswith("-dccsim")
        assert (be.n_groups, be.cores_per_group, be.group.banks, be.core.banks_per_core) == (16, 64, 64, 1)
        assert float(be.timing.tCK) == pytest.approx(0.769, abs=1e-3)
        engine.check_backend(be)
    # the defaults do not move
    assert get_backend("attacc").group.controller == "dram" and get_backend("attacc").variant == "bank-pc"
    hp = get_backend("hbm-pim")
    assert (hp.group.controller, hp.n_groups, hp.cores_per_group, float(hp.timing.tCK)) == ("dram", 64, 8, 1.0)
    assert not hp.group.per_core_commands


@pytest.mark.parametrize("name,options,why", [
    ("attacc", dict(simulator="ramulator"), "valid values are"),
    ("attacc", dict(simulator="dcc", stacks=5), "one HBM3 cube"),
    ("attacc", dict(simulator="dcc", variant="bg-pc"), "one HBM3 cube"),
    ("hbm-pim", dict(simulator="dcc", channels=64), "one HBM3 cube"),
    ("hbm-pim", dict(simulator="dcc", config="ko"), "one HBM3 cube"),
    ("hbm-pim", dict(simulator="pimflow"), "valid values are"),
])
def test_bad_options_say_why(name, options, why):
    with pytest.raises(ValueError, match=why):
        get_backend(name, **options)


@pytest.fixture(scope="module")
def sample():
    """{(fork, kernel, shape, tiling): (ours through the Backend API, theirs)}."""
    rows = artifact_rows()
    out = {}
    for r in rows:
        if any(_is(r, f, "gemv", s, t) for f, s, t in GEMV_SAMPLE) or any(_is(r, *g) for g in GROUP_SAMPLE):
            out[(r["backend"], r["kernel"], r["shape"], r["tiling"])] = (dcc_reference.run_row_backend(r),
                                                                          int(r["cycles"]))
    return out


def test_sample_through_the_backend_within_ten_percent(sample):
    assert len(sample) == len(GEMV_SAMPLE) + 12 + 15 + 5
    bad = [(k, o, t) for k, (o, t) in sample.items() if abs(o - t) / t > TOLERANCE]
    assert not bad, bad[:5]
    assert all(o == t for o, t in sample.values())          # in fact cycle-exact on this sample
    for g in GROUP_SAMPLE:                                   # every row of these groups: the same best
        ot = [v for k, v in sample.items() if k[:3] == g]
        assert ot[min(range(len(ot)), key=lambda i: ot[i][0])][1] == min(t for _, t in ot), g


@pytest.mark.slow
def test_every_row_through_the_backend():
    """All 614 rows (~2-8 min): the 603 pimjax expresses as drafts within 10 % (in fact exact), the 11
    others (batch*heads chunks straddling batch elements) refused with the reason."""
    table, bad, summary = dcc_reference.check(artifact_rows(), 100 * TOLERANCE, via_backend=True)
    assert summary["rows"] == 603 and bad == 11
    assert all(abs(t["error_pct"]) <= 100 * TOLERANCE for t in table)
    assert summary["worst"] == 0.0
    assert summary["same_best"] == summary["groups"] == 14


def test_report_phases_sum_to_dccs_cycles(dcc_attacc):
    program = lower_tiling("gemv", [1, 32, 128, 512], [[16, 1, 2], [1, 4, 32], [1, 16, 32]], dcc_attacc, "attacc")
    rep = cycles(program, dcc_attacc)
    b = rep.breakdown()
    assert float(rep.total_cycles) == 2336 == sum(b.values())
    assert b["merge"] == 0 and b["rearrangement"] > 0 and b["compute"] > 0 and b["readback"] > 0
    assert float(rep.total_ns) == pytest.approx(2336 * float(dcc_attacc.timing.tCK))
    # the busiest channel issues 256 host reads and 256 + 256 host writes (docs/dcc-simulator.md)
    assert float(rep.counts["RD"]) % 256 == 0 and float(rep.counts["WR"]) > 0
    # memoised per (fork, kernel, shape, tiling)
    hits = engine._run.cache_info().hits
    assert float(cycles(program, dcc_attacc).total_cycles) == 2336
    assert engine._run.cache_info().hits == hits + 1


def test_hbm_pim_vector_split_values_from_a_broadcast_draft(dcc_hbm_pim):
    """DCC's HBM-PIM loads each bank's own input; this family broadcasts input registers, so a
    draft splitting the vector over cores computes its values from a broadcast draft and is timed
    as requested."""
    shape, tiling = [1, 32, 128, 512], [[16, 2, 1], [1, 1, 128], [1, 17, 31]]   # h over 2 cores
    op, shapes = kernel_op("mmtv", pimjax_shape("gemv", shape))
    draft = to_draft("gemv", shape, tiling, "hbmpim")
    program = lower(op, draft, dcc_hbm_pim, shapes)
    assert program.draft == draft
    sub = program.meta["dcc_values_draft"]
    assert sub != draft and all(p.cores == 1 for p in sub.parts[:2] + sub.parts[3:])
    assert "group broadcast" in program.meta["dcc_values_reason"]
    rng = np.random.default_rng(0)
    A = rng.standard_normal(shapes[0]).astype(np.float16)
    x = rng.standard_normal(shapes[1]).astype(np.float16)
    y = np.asarray(execute(program, A, x), np.float64)
    ref = np.einsum("bhnd,bhd->bhn", A.astype(np.float64), x.astype(np.float64))
    np.testing.assert_allclose(y, ref, rtol=3e-2, atol=3e-2 * np.abs(ref).max())
    assert float(cycles(program, dcc_hbm_pim).total_cycles) == predict("hbmpim", "gemv", shape, tiling)


def test_pim_jit_and_the_tuner_on_the_dcc_configuration(dcc_attacc):
    """A small GEMV through pim_jit and the tuner: jax.jit's numbers, and the op's cycles are DCC's
    for the tiling the tuner chose."""
    rng = np.random.default_rng(1)
    W = rng.standard_normal((256, 64)).astype(np.float16)
    x = rng.standard_normal(64).astype(np.float16)
    fn = lambda W, x: W @ x                                      # noqa: E731
    compiled = pim_jit(fn, backend=dcc_attacc, tuner=tuner(), placement="prefer_pim").lower(W, x).compile()
    _close(compiled(W, x), jax.jit(fn)(W, x), TOL["attacc"])
    plan = compiled.plans[0]
    assert plan.placement == "pim"
    kernel, shape, tiling = engine.dcc_problem(plan.program.op, plan.program.draft, "attacc")
    assert (kernel, shape) == ("gemv", (1, 1, 64, 256))
    assert float(cycles(plan.program, dcc_attacc).total_cycles) == predict("attacc", kernel, shape, tiling)


def test_va_through_pim_jit_on_dcc_hbm_pim(dcc_hbm_pim):
    rng = np.random.default_rng(2)
    a = rng.standard_normal((4, 4096)).astype(np.float16)
    b = rng.standard_normal((4, 4096)).astype(np.float16)
    fn = lambda a, b: a + b                                      # noqa: E731
    compiled = pim_jit(fn, backend=dcc_hbm_pim, tuner=tuner(), placement="prefer_pim").lower(a, b).compile()
    _close(compiled(a, b), jax.jit(fn)(a, b), TOL["hbm-pim"])
    assert compiled.plans[0].placement == "pim"


def test_what_dcc_cannot_time_is_refused_with_the_reason(dcc_attacc, dcc_hbm_pim):
    # an op DCC's artifact has no trace for: refused at lowering; pim_jit keeps it on the host
    relu = make_graph(lambda a: jax.numpy.maximum(a, 0), np.ones((4096,), np.float16))
    op = relu.ops[0]
    table = drafts(op, dcc_hbm_pim)
    with pytest.raises(PimCompileError, match="DCC's simulator cannot time"):
        lower(op, table[0], dcc_hbm_pim)
    a = np.ones((8, 64), np.float16)
    fn = lambda a: jax.numpy.maximum(a, 0)                       # noqa: E731
    compiled = pim_jit(fn, backend=dcc_hbm_pim, tuner=tuner(), placement="prefer_pim").lower(a).compile()
    assert compiled.plans[0].placement == "host"
    np.testing.assert_array_equal(np.asarray(compiled(a)), np.asarray(jax.jit(fn)(a)))
    # an epilogue (a fused elementwise consumer) DCC's GEMV has not
    g = make_graph(lambda W, x: 2 * (W @ x), np.ones((64, 32), np.float16), np.ones(32, np.float16))
    with pytest.raises(PimCompileError, match="epilogue"):
        engine.dcc_problem(g.ops[0], drafts(g.ops[0], dcc_attacc)[0], "attacc")
    # VA on AttAcc: its fork has no VA generator
    va, _ = kernel_op("va", [1, 4096])
    with pytest.raises(PimCompileError, match="no trace generator for attacc/va"):
        engine.dcc_problem(va, to_draft("va", [1, 4096], [[1, 1, 1], [16, 16, 16]]), "attacc")
    # a timing other than the fork's table, or a sweep over timings: refused
    program = lower_tiling("red", [1, 4096], [[1, 1, 1], [16, 16, 16]], dcc_attacc, "attacc")
    slower = dcc_attacc.replace(timing=dcc_attacc.timing.replace(tRCDRD=25.0))
    with pytest.raises(ValueError, match="tRCDRD=25"):
        cycles(program, slower)
    with pytest.raises(ValueError, match="no timing variants to sweep"):
        sweep([program], dcc_attacc.timing, dcc_attacc)


@pytest.mark.parametrize("fork,kernel,shape,tiling", [
    ("attacc", "gemv", (1, 32, 128, 4096), ((16, 1, 2), (1, 4, 32), (1, 16, 256))),   # two refreshes inside
    ("hbmpim", "gemv", (1, 32, 128, 512), ((16, 1, 2), (1, 4, 32), (1, 16, 32))),
    ("attacc", "gemv", (1, 32, 128, 512), ((1, 16, 2), (2, 4, 16), (8, 1, 64))),
    ("hbmpim", "red", (4, 4096), ((1, 4, 1), (16, 4, 64))),
    ("hbmpim", "va", (4, 4096), ((3, 1, 2), (3, 17, 81))),
    ("attacc", "red", (4, 4096), ((1, 4, 1), (16, 4, 64))),
])
def test_the_compiled_controller_equals_the_python_one(fork, kernel, shape, tiling):
    """`native.py` against `controller.py` (the readable port): cycles, phases, command counts."""
    compiled = engine._run(fork, kernel, shape, tiling, True, False, True)
    python = engine._run(fork, kernel, shape, tiling, True, False, False)
    assert compiled == python
    assert compiled[0] == predict(fork, kernel, shape, [list(t) for t in tiling])


def test_a_batched_gemv_through_pim_jit_on_dcc_hbm_pim(dcc_hbm_pim):
    """The shipped model's pick on DCC's HBM-PIM may split the vector over cores (DCC's fork loads
    each bank's own input): jax.jit's numbers still, and DCC's cycles for the tiling picked."""
    rng = np.random.default_rng(3)
    A = rng.standard_normal((1, 8, 256, 64)).astype(np.float16)
    x = rng.standard_normal((1, 8, 64)).astype(np.float16)
    fn = lambda A, x: jax.numpy.einsum("bhnd,bhd->bhn", A, x)    # noqa: E731
    compiled = pim_jit(fn, backend=dcc_hbm_pim, placement="prefer_pim").lower(A, x).compile()
    _close(compiled(A, x), jax.jit(fn)(A, x), TOL["hbm-pim"])
    program = compiled.plans[0].program
    kernel, shape, tiling = engine.dcc_problem(program.op, program.draft, "hbmpim")
    assert (kernel, shape) == ("gemv", (1, 8, 64, 256))
    assert float(cycles(program, dcc_hbm_pim).total_cycles) == predict("hbmpim", kernel, shape, tiling)


def test_explore_takes_the_dcc_configurations(dcc_attacc):
    from pimjax.studies.dse import explore
    rng = np.random.default_rng(4)
    W = rng.standard_normal((512, 128)).astype(np.float16)
    x = rng.standard_normal(128).astype(np.float16)
    df = explore(lambda W, x: W @ x, W, x, backends={"attacc-dcc": dcc_attacc}, progress=False)
    row = df.iloc[0]
    assert row["variant"] == "bank-pc-dccsim" and row["placements"] == "0:dot_general@pim"
    assert row["pim_ns"] > 0 and row["total_ns"] == pytest.approx(row["pim_ns"] + row["host_ns"])


def test_a_wrapping_tiling_is_exact_with_all_channels_compiled(dcc_hbm_pim):
    """A tiling whose rounded-up channels wrap: the busiest channel alone is 1 cycle off the artifact
    (12 514), all 16 behind the shared frontend (the default, `engine.COUPLED = "auto"`) exact -- the
    compiled coupled run equals the Python one (`controller.simulate_coupled`, checked in
    `test_dcc_reference.py`)."""
    shape, tiling = [1, 32, 128, 512], [[1, 11, 3], [7, 1, 19], [2, 5, 52]]
    alone = engine.dcc_cycles("hbmpim", "gemv", shape, tiling, coupled=False)
    both = engine.dcc_cycles("hbmpim", "gemv", shape, tiling, coupled="auto")
    assert abs(alone["total"] - 12514) == 1 and both["total"] == 12514
    assert sum(both[k] for k in ("rearrangement", "compute", "readback")) == 12514
