"""UPMEM's two engines, each named explicitly (never PIMJAX_CYCLES_ENGINE's
default): the vectorised numpy form ("native", `cycles_upmem._totals`) and
the jitted lax.scan ("scan") give the same reports; the tasklet
clocks' barrier levelling on a constructed stream, derived by hand."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pimjax.backends.upmem.cycles import cycles_upmem, dispatch_interval
from pimjax.backends.upmem.lower import Sync
from pimjax.costmodel.dataset import try_lower
from pimjax.costmodel.kernels import case_drafts, make_case
from pimjax.hw import get_backend
from pimjax.lower.program import Op, Phase, Records, chunk, concat
from pimjax.sim.cycles import cycles
from tests.helpers import assert_trees_close

UPMEM = get_backend("upmem")
CASES = {k: make_case(UPMEM, k, s) for k, s in
         (("gemv", [256, 96]), ("red", [8, 1000]), ("va", [3000]), ("mmtv", [1, 4, 64, 32]))}
TABLES = {k: case_drafts(c, UPMEM) for k, c in CASES.items()}


def _close(a, b, rtol=1e-5):
    """The same report fields (tree structure) and shapes; the native engine computes in numpy's
    float64 / int64 and the scan in jax's float32 / int32, so dtypes agree in kind, not width."""
    assert_trees_close(a, b, rtol=rtol, atol=1e-3, same_dtype=False)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(CASES)), st.integers(0, 10**6), st.booleans())
def test_engines_agree_on_lowered_programs(kernel, pick, resident):
    table = TABLES[kernel]
    program = try_lower(CASES[kernel], table[pick % len(table)], UPMEM)
    assume(program is not None)
    native = cycles_upmem(program, UPMEM, engine="native", include_resident=resident)
    scan = cycles_upmem(program, UPMEM, engine="scan", include_resident=resident)
    _close(native, scan)
    assert int(native.bound) == int(scan.bound)
    # sim.cycles' entry runs UPMEM's own model with the engine it is named: the same report, dtypes included
    for engine, rep in (("native", native), ("scan", scan)):
        assert_trees_close(cycles(program, UPMEM, engine=engine, include_resident=resident), rep, rtol=0.0)


def _with_records(program, rec: dict):
    commands = Records(**{f: v.reshape(1, -1) for f, v in rec.items()})
    return dataclasses.replace(program, commands=commands)


def test_barrier_levels_the_tasklet_clocks():
    """Slot 0 runs 10 instructions, slot 1 three, then a barrier, then slot 1
    five more: the kernel lasts (10 + 5) dispatch intervals -- slot 1's
    second batch starts at slot 0's finish, not at its own 3."""
    base = try_lower(CASES["va"], TABLES["va"][0], UPMEM)
    d = dispatch_interval(UPMEM)
    rec = concat(chunk(Op.DPU_EXEC, 1, n=10, reg=0), chunk(Op.DPU_EXEC, 1, n=3, reg=1),
                 chunk(Op.LAUNCH, 1, aux=Sync.BARRIER, n=0), chunk(Op.DPU_EXEC, 1, n=5, reg=1))
    prog = _with_records(base, rec)
    for engine in ("native", "scan"):
        rep = cycles_upmem(prog, UPMEM, engine=engine)
        assert float(rep.counts["kernel_dpu_cycles"]) == pytest.approx(15 * d), engine
        assert float(rep.counts["instructions"]) == 18, engine
    # without the barrier the slots run independently: slot 0's 10 batches are the longest
    rec_nb = concat(chunk(Op.DPU_EXEC, 1, n=10, reg=0), chunk(Op.DPU_EXEC, 1, n=3, reg=1),
                    chunk(Op.DPU_EXEC, 1, n=5, reg=1))
    for engine in ("native", "scan"):
        rep = cycles_upmem(_with_records(base, rec_nb), UPMEM, engine=engine)
        assert float(rep.counts["kernel_dpu_cycles"]) == pytest.approx(10 * d), engine


def test_dma_adds_latency_plus_bytes_over_bandwidth_to_its_slot():
    base = try_lower(CASES["va"], TABLES["va"][0], UPMEM)
    t = UPMEM.timing
    rec = concat(chunk(Op.DMA_RD, 2, n=[256, 512], reg=[2, 2], phase=Phase.COMPUTE))
    expect = 2 * t.dma_latency_cycles + (256 + 512) / t.dma_bytes_per_cycle
    for engine in ("native", "scan"):
        rep = cycles_upmem(_with_records(base, rec), UPMEM, engine=engine)
        assert float(rep.counts["kernel_dpu_cycles"]) == pytest.approx(expect, rel=1e-6)
        assert float(rep.counts["dma_bytes"]) == 768


def test_engine_argument_is_checked():
    base = try_lower(CASES["va"], TABLES["va"][0], UPMEM)
    with pytest.raises(ValueError, match="engine"):
        cycles_upmem(base, UPMEM, engine="fast")
