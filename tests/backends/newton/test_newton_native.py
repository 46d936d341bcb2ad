"""Newton's compiled command stream (`backends/newton/native.py`) against the
Python form it replaces (`lower._Stream`): every record (the placement, built
from the columns the COMPs read, included), host-data row and command count equal, over drafts of several kernels and shapes
(broadcast and per-core granularity, both dataflows, register reuse on and
off)."""
from __future__ import annotations

import numpy as np
import pytest

from pimjax.backends.newton import lower as L
from pimjax.backends.newton.commands import rearrange
from pimjax.costmodel.kernels import case_drafts, make_case
from pimjax.errors import PimCompileError
from pimjax.hw import get_backend
from pimjax.lower.program import RECORD_FIELDS

CASES = [("gemv", (1000, 200)), ("gemv", (1024, 512)), ("mmtv", (2, 8, 100, 64)), ("gemm", (16, 64, 32)),
         ("gemv", (4096, 1568))]


def _lowered(case, draft, be, native, monkeypatch, **options):
    monkeypatch.setattr(L, "NATIVE", native)
    try:
        return L.lower_newton(case.op, draft, be, case.shapes, **options)
    except PimCompileError as err:
        return err


def _same_program(a, b):
    for f in RECORD_FIELDS:
        np.testing.assert_array_equal(np.asarray(getattr(a.commands, f)), np.asarray(getattr(b.commands, f)),
                                      err_msg=f)
    np.testing.assert_array_equal(np.asarray(a.host_data[0]), np.asarray(b.host_data[0]))
    assert a.stats == b.stats


@pytest.mark.parametrize("kernel,shape", CASES)
def test_compiled_stream_equals_the_python_form(kernel, shape, monkeypatch):
    be = get_backend("newton")
    case = make_case(be, kernel, shape)
    table = case_drafts(case, be)
    compared = 0
    for i in np.unique(np.linspace(0, len(table) - 1, 10).astype(int)):
        draft = table[int(i)]
        a, b = (_lowered(case, draft, be, flag, monkeypatch) for flag in (True, False))
        if isinstance(a, Exception) or isinstance(b, Exception):
            assert type(a) is type(b) and str(a) == str(b)
            continue
        compared += 1
        _same_program(a, b)
    assert compared >= 4


@pytest.mark.parametrize("options", [dict(register_reuse=False), dict(data_block_layout=False)])
def test_compiled_stream_with_options_off(options, monkeypatch):
    be = get_backend("newton")
    case = make_case(be, "gemv", (1000, 200))
    table = case_drafts(case, be)
    compared = 0
    for i in np.unique(np.linspace(0, len(table) - 1, 6).astype(int)):
        a, b = (_lowered(case, table[int(i)], be, flag, monkeypatch, **options) for flag in (True, False))
        if isinstance(a, Exception):
            assert type(a) is type(b)
            continue
        compared += 1
        _same_program(a, b)
    assert compared >= 3


@pytest.mark.parametrize("granularity", ["broadcast", "core"])
@pytest.mark.parametrize("dataflow", ["os", "is"])
def test_compiled_stream_per_granularity_and_dataflow(granularity, dataflow, monkeypatch):
    """Drafts of each granularity (broadcast / single-bank commands) and dataflow,
    on a GEMV whose reduction spans several input chunks (so `is` differs from `os`)."""
    be = get_backend("newton")
    case = make_case(be, "gemv", (512, 4096))
    compared = 0
    table = [d for d in case_drafts(case, be) if d.dataflow == dataflow]
    for k in np.unique(np.linspace(0, len(table) - 1, 8).astype(int)):
        draft = table[int(k)].replace(granularity=granularity)
        a, b = (_lowered(case, draft, be, flag, monkeypatch) for flag in (True, False))
        if isinstance(a, Exception):
            assert type(a) is type(b)
            continue
        _same_program(a, b)
        compared += 1
        if compared == 3:
            break
    assert compared >= 1


@pytest.mark.parametrize("resident", [False, True])
def test_broadcast_placement_equals_the_per_bank_form(resident):
    """`_rearrange`'s broadcast shortcut (every bank reads the same columns:
    one set of row runs, tiled over the banks) against its per-bank form
    (the same columns as distinct arrays)."""
    from pimjax.lower.program import RecordBuilder
    be = get_backend("newton")
    cols, per_bg = be.core.cols, be.group.banks_per_bank_group
    rng = np.random.default_rng(0)
    flat = np.unique(rng.integers(0, 40 * cols, 6000))          # > INTERLEAVE_LIMIT columns in all
    shared = {c: flat for c in range(be.group.cores_per_group)}
    copies = {c: flat.copy() for c in shared}
    out = []
    for reads in (shared, copies):
        b = RecordBuilder()
        n = rearrange(b, reads, cols, per_bg, resident)
        out.append((n, b.build()))
    assert out[0][0] == out[1][0] == len(flat) * len(shared)
    for f in RECORD_FIELDS:
        np.testing.assert_array_equal(out[0][1][f], out[1][1][f], err_msg=f)
