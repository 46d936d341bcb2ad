"""Hardware facts reach the lowerings from the Backend.

User-defined variants of the presets -- one bank per HBM-PIM unit (the
preset's config="ko", an LPDDR5X-PIM-like backend with 2 KB rows), other
bank-group shapes -- either lower and compute what the graph computes, with
every record addressing a bank the group has, or are refused with a
PimCompileError naming the field."""
from __future__ import annotations

import numpy as np
import pytest

from pimjax.backends import baseline
from pimjax.errors import PimCompileError
from pimjax.hw import get_backend
from pimjax.lower import lower
from pimjax.partition import drafts
from pimjax.partition.verify import op_support
from pimjax.sim.execute import execute
from tests.backends.hbm_pim.test_hbm_pim import fp16_bound
from tests.corpus import CORPUS
from tests.helpers import slow_params
from tests.lower.util import graph_ops, reference_output


def _hbm_variants():
    be = get_backend("hbm-pim", channels=8)
    core, group = be.core, be.group
    return {
        "ko": get_backend("hbm-pim", config="ko", channels=4),
        # 8 channels x 16 banks, 2 KB rows = 64 columns of 32 B, a 16 x fp16 unit per bank
        "lpddr5x": be.replace(name="lpddr5x-pim", core=core.replace(banks_per_core=1, cols=64),
                              group=group.replace(cores_per_group=16)),
        "bg2x8": be.replace(group=group.replace(bank_groups=2, banks_per_bank_group=8)),
    }


def _ops(backend, names):
    for name, fn, make in CORPUS:
        if name in names:
            for op, shapes, operands in graph_ops(fn, make()):
                if op_support(op, backend)[0]:
                    yield name, op, shapes, operands


# 25-35 s each on 2 cores: make test keeps one variant per op, every variant at least once; CI's slow
# set runs the other eight
_HBM_VARIANT_CASES = [(n, v) for n in ("gemv", "va", "gemv_bias_relu", "red_rows") for v in ("ko", "lpddr5x", "bg2x8")]


@pytest.mark.parametrize("name,variant", slow_params(_HBM_VARIANT_CASES, set(_HBM_VARIANT_CASES) - {
    ("gemv", "ko"), ("va", "bg2x8"), ("gemv_bias_relu", "lpddr5x"), ("red_rows", "ko")}))
def test_hbm_pim_variants_compute_what_the_graph_computes(variant, name):
    backend = _hbm_variants()[variant]
    rng = np.random.default_rng(0)
    found = False
    for _, op, shapes, operands in _ops(backend, [name]):
        found = True
        expect = np.asarray(reference_output(op, operands), np.float64)
        table = drafts(op, backend, shapes=shapes)
        picks = [baseline(op, backend)] + [table[int(i)] for i in rng.choice(len(table), min(4, len(table)),
                                                                              replace=False)]
        for draft in picks:
            program = lower(op, draft, backend, shapes)
            assert int(np.asarray(program.commands.bank).max()) < backend.group.banks
            assert int(np.asarray(program.commands.bank).min()) >= 0
            wide = np.asarray(execute(program, *operands, arithmetic="wide"), np.float64)
            np.testing.assert_allclose(wide, expect, rtol=1e-5, atol=1e-5, err_msg=f"{variant} {draft}")
            fp16 = np.asarray(execute(program, *operands, arithmetic="backend"), np.float64)
            assert np.all(np.abs(fp16 - expect) <= fp16_bound(op, operands, draft)), f"{variant} {draft}"
    assert found


def test_hbm_pim_one_bank_units_keep_both_parities_in_one_bank():
    """With one bank per unit the kernel's all-bank commands address bank 0
    and the odd parity's data sits in the upper half of the data rows."""
    from pimjax.lower.program import Op
    from tests.partition.helpers import gemv
    backend = _hbm_variants()["ko"]
    op = gemv(256, 512)
    program = lower(op, baseline(op, backend), backend)
    rec = program.commands
    kern = np.isin(np.asarray(rec.op), [Op.PIM_RD, Op.PIM_WR])
    assert set(np.asarray(rec.bank)[kern].tolist()) == {0}
    assert np.asarray(rec.row)[kern].max() >= 0x2000            # logical row 4096 and up: parity 1
    host = np.isin(np.asarray(rec.op), [Op.WR, Op.WR_S, Op.RD, Op.RD_S]) & (np.asarray(rec.src) >= 0)
    assert set(np.asarray(rec.bank)[host].tolist()) <= set(range(backend.group.cores_per_group))


def test_hbm_pim_refuses_a_row_without_the_register_frame():
    from tests.partition.helpers import gemv
    be = get_backend("hbm-pim", channels=4)
    small = be.replace(core=be.core.replace(cols=16))
    op = gemv(64, 64)
    with pytest.raises(PimCompileError, match="cols"):
        lower(op, baseline(op, be), small)


def _gemv_case(M=256, N=384):
    from tests.partition.helpers import gemv
    rng = np.random.default_rng(0)
    W = rng.standard_normal((M, N)).astype(np.float32)
    x = rng.standard_normal(N).astype(np.float32)
    return gemv(M, N), W, x


@pytest.mark.parametrize("variant", ["bg2x8", "lanes8"])
def test_newton_variants_compute_what_the_graph_computes(variant):
    """Newton reads banks per bank group, columns and lanes from the Backend
    (the executor from Program.meta)."""
    be = get_backend("newton", channels=4)
    backend = {"bg2x8": be.replace(group=be.group.replace(bank_groups=2, banks_per_bank_group=8)),
               "lanes8": be.replace(core=be.core.replace(lanes=8))}[variant]
    op, W, x = _gemv_case()
    table = drafts(op, backend)
    for draft in [baseline(op, backend)] + [table[i] for i in range(0, len(table), max(1, len(table) // 3))]:
        program = lower(op, draft, backend)
        assert int(np.asarray(program.commands.bank).max()) < backend.group.banks
        wide = np.asarray(execute(program, W, x, arithmetic="wide"), np.float64)
        np.testing.assert_allclose(wide, W.astype(np.float64) @ x, rtol=1e-5, atol=1e-4, err_msg=f"{draft}")


@pytest.mark.parametrize("change, field", [
    (lambda be: be.replace(group=be.group.replace(bank_groups=8, banks_per_bank_group=8)), "banks_per_bank_group"),
    (lambda be: be.replace(core=be.core.replace(lanes=8)), "core.lanes"),
])
def test_attacc_refuses_geometry_it_cannot_map(change, field):
    """AttAcc's address maps and executor shapes are built for HBM3 (16
    lanes, 32 columns, 16 bank groups of 4 banks): another geometry is
    refused by name, not lowered wrong."""
    backend = change(get_backend("attacc", channels=2))
    op, W, x = _gemv_case()
    with pytest.raises(PimCompileError, match=field):
        lower(op, baseline(op, backend), backend)
