"""Bad input to `lower` and `execute` fails loudly on every backend
(DESIGN.md "Bad input"): a wrong-shape operand, a draft that uses more groups
or cores than the backend has, an unknown option, a resident entry that is
not an operand index; and ops no lowering runs have no drafts."""
from __future__ import annotations

import numpy as np
import pytest

import pimjax
from pimjax.backends import baseline
from pimjax.errors import PimCompileError
from pimjax.hw import get_backend
from pimjax.lower import lower
from pimjax.partition import DimPart, Draft, drafts, op_support
from pimjax.partition.verify import verify
from pimjax.sim.execute import execute

BACKENDS = {"hbm-pim": dict(channels=4), "attacc": dict(channels=2), "newton": dict(channels=2),
            "upmem": dict(dpus=64)}


def _gemv(dtype):
    rng = np.random.default_rng(0)
    W = rng.integers(-3, 3, (37, 13)).astype(dtype)
    x = rng.integers(-3, 3, 13).astype(dtype)
    return W, x, pimjax.make_graph(lambda W, x: W @ x, W, x).ops[0]


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_execute_refuses_operands_of_another_shape(name):
    be = get_backend(name, **BACKENDS[name])
    W, x, op = _gemv(np.int32 if name == "upmem" else np.float32)
    program = lower(op, baseline(op, be), be)
    np.testing.assert_allclose(np.asarray(execute(program, W, x, arithmetic="wide"), np.float64), W @ x)
    for args in ((W.T.copy(), x), (W[:, :12], x[:12]), (W, np.r_[x, x[:2]])):
        with pytest.raises(TypeError, match="lowered for"):
            execute(program, *args, arithmetic="wide")


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_drafts_beyond_the_backend_are_refused(name):
    be = get_backend(name, **BACKENDS[name])
    _, _, op = _gemv(np.int32 if name == "upmem" else np.float32)
    too_many_groups = Draft((DimPart(2 * be.n_groups, 1), DimPart(1, 1)), lane_var="k")
    too_many_cores = Draft((DimPart(1, 2 * be.cores_per_group), DimPart(1, 1)), lane_var="k")
    wrong_parts = Draft((DimPart(1, 1),), lane_var="k")
    for d, what in ((too_many_groups, "groups"), (too_many_cores, "cores"), (wrong_parts, "parts")):
        assert what in verify(op, d, be)
        with pytest.raises(PimCompileError, match=what):
            lower(op, d, be)


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_unknown_options_and_bad_resident_entries(name):
    be = get_backend(name, **BACKENDS[name])
    _, _, op = _gemv(np.int32 if name == "upmem" else np.float32)
    d = baseline(op, be)
    with pytest.raises(TypeError, match="registr_reuse"):
        lower(op, d, be, registr_reuse=False)
    for bad in ((7,), ("W",), (True,), (-1,)):
        with pytest.raises(ValueError, match="operand index"):
            lower(op, d, be, resident=bad)
    assert lower(op, d, be, resident=(0,)).stats.resident_bytes > 0


def test_elementwise_ops_attacc_cannot_run_have_no_drafts():
    a = np.ones(37, np.float32)
    op = pimjax.make_graph(lambda a, b: a + b, a, a).ops[0]
    be = get_backend("attacc", channels=2)
    ok, why = op_support(op, be)
    assert not ok and "GEMV" in why and len(drafts(op, be)) == 0
    assert op_support(op, get_backend("hbm-pim"))[0]


def test_a_lane_variable_the_op_does_not_have_is_refused():
    be = get_backend("newton", **BACKENDS["newton"])
    _, _, op = _gemv(np.float32)
    d = baseline(op, be).replace(lane_var="zz")
    assert "zz" in verify(op, d, be)
    with pytest.raises(PimCompileError, match="zz"):
        lower(op, d, be)


def test_upmem_reports_name_its_own_bottlenecks():
    from pimjax.sim.cycles import cycles
    be = get_backend("upmem", **BACKENDS["upmem"])
    W, x, op = _gemv(np.int32)
    rep = cycles(lower(op, baseline(op, be), be), be)
    assert rep.bound_name(programmable=True) in ("DPU pipeline", "MRAM DMA", "host link", "host")
    assert set(rep.to_dict(programmable=True)["utilisation"]) >= {"DPU pipeline", "MRAM DMA"}
