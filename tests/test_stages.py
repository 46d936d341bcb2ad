"""The stages as jax's: `lower()` partitions and predicts only (no program
lowered, nothing simulated), `compile()` searches; one cost_analysis schema
for both; no public function shadows a subpackage; the top-level exports."""
from __future__ import annotations

import importlib
import json
import pkgutil
import types

import jax
import numpy as np
import pytest

import pimjax
from tests.test_api import tuner


def _forbid_lowering_and_simulation(monkeypatch):
    """Every way to a program or a simulated figure raises."""
    import dataclasses

    import pimjax.api as api
    import pimjax.backends as backends
    import pimjax.lower as lower_pkg
    import pimjax.report as report
    import pimjax.search.strategy as strategy
    import pimjax.search.tuner as tune
    import pimjax.sim.cycles as sim_cycles
    from pimjax.lower.program import Program

    def boom(*args, **kwargs):
        raise AssertionError("lower() lowered a program or simulated")
    monkeypatch.setattr(Program, "__init__", boom)
    for mod, names in ((tune, ("lower", "cycles_pooled")), (strategy, ("lower", "cycles", "cycles_batch")),
                       (api, ("execute",)), (report, ("lower", "cycles_pooled")),
                       (lower_pkg, ("lower",)),
                       (sim_cycles, ("cycles", "cycles_batch", "cycles_pooled"))):
        for name in names:
            monkeypatch.setattr(mod, name, boom)
    for name in backends.families():
        fam = backends.FAMILIES[name]
        hooks = {k: boom for k in ("lower", "lower_block", "execute", "cycles") if getattr(fam, k) is not None}
        monkeypatch.setitem(backends.FAMILIES, name, dataclasses.replace(fam, **hooks))


def _gemv_relu():
    W = np.random.default_rng(0).standard_normal((128, 256)).astype(np.float32)
    x = np.random.default_rng(1).standard_normal(256).astype(np.float32)
    return (lambda W, x: jax.nn.relu(W @ x)), (W, x)


def test_lower_neither_lowers_programs_nor_simulates(monkeypatch):
    fn, args = _gemv_relu()
    f = pimjax.pim_jit(fn, backend="hbm-pim", tuner=tuner(), placement="prefer_pim", channels=4)
    with monkeypatch.context() as m:
        _forbid_lowering_and_simulation(m)
        lowered = f.lower(*args)
        pred = lowered.cost_analysis()
        text = lowered.as_text()
        json.dumps(pred, allow_nan=False)
        with pytest.raises(AssertionError, match="lowered a program"):
            lowered.compile()                         # the search needs them: it is in compile()
    assert pred["figures"] == "predicted" and pred["pim_cycles"] is not None
    assert "predicted cycles" in text
    plan = lowered.plans[0]
    assert plan.program is None and plan.choice is None and plan.proposal is not None
    assert plan.draft == plan.proposal.draft and plan.predicted_cycles == plan.proposal.predicted_cycles

    compiled = lowered.compile()                      # monkeypatches undone: the search runs
    assert lowered.compile().plans is compiled.plans  # once per Lowered
    sim = compiled.cost_analysis()
    assert sim["figures"] == "simulated"
    cp = compiled.plans[0]
    assert cp.program is not None and cp.choice.simulated >= 1
    assert sim["ops"][0]["cycles"] == float(cp.choice.report.total_cycles)
    # one schema: the same keys at the top and per op, `figures` says which
    assert set(pred) == set(sim) and set(pred["ops"][0]) == set(sim["ops"][0])
    assert pred["ops"][0]["cycles"] == pytest.approx(plan.predicted_cycles)
    assert pred["ops"][0]["compute_cycles"] is None and sim["ops"][0]["compute_cycles"] is not None
    assert sim["pim_cycles"] == pytest.approx(sum(o["cycles"] for o in sim["ops"] if o["placement"] == "pim"))
    assert sim["total_ns"] == pytest.approx(sim["pim_ns"] + sim["host_ns"])


def test_placement_is_predicted_at_lower_and_decided_on_simulated_figures_at_compile():
    """The stand-in model predicts 1 cycle per draft: PIM wins on the
    predicted figures; the simulation says the GPU roofline wins."""
    fn, args = _gemv_relu()
    lowered = pimjax.pim_jit(fn, backend="hbm-pim", tuner=tuner(), channels=4).lower(*args)
    assert lowered.plans[0].placement == "pim" and "PIM (predicted 1 ns) beats" in lowered.plans[0].reason
    assert lowered.cost_analysis()["pim_cycles"] == 1.0
    compiled = lowered.compile()
    assert compiled.plans[0].placement == "host" and "beats PIM" in compiled.plans[0].reason
    sim = compiled.cost_analysis()
    assert sim["pim_cycles"] == 0 and sim["host_ns"] == sim["total_ns"] == sim["gpu_ns"]


def test_calling_equals_the_stages_and_plan():
    """f(*args) runs trace -> lower -> compile: the same choices and cycles as
    the stages by hand and as `pimjax.plan.plan` (both stages at once)."""
    from pimjax.plan import plan
    fn, args = _gemv_relu()
    f = pimjax.pim_jit(fn, backend="hbm-pim", tuner=tuner(), channels=4)
    y = f(*args)
    (compiled,) = f._compiled.values()
    by_hand = pimjax.pim_jit(fn, backend="hbm-pim", tuner=tuner(), channels=4).lower(*args).compile()
    traced = f.trace(*args)
    both = plan(traced.graph, f.backend, tuner(), traced._resident_ids(), f.placement)
    for plans in (by_hand.plans, both):
        assert [(p.placement, p.reason, p.draft) for p in plans] == \
               [(p.placement, p.reason, p.draft) for p in compiled.plans]
        assert [float(p.choice.report.total_cycles) for p in plans if p.choice] == \
               [float(p.choice.report.total_cycles) for p in compiled.plans if p.choice]
    np.testing.assert_array_equal(np.asarray(by_hand(*args)), np.asarray(y))


def test_no_function_shadows_a_subpackage():
    lower_program = importlib.import_module("pimjax.lower.program")
    assert isinstance(lower_program, types.ModuleType)
    sim_execute = importlib.import_module("pimjax.sim.execute")
    assert isinstance(sim_execute, types.ModuleType)
    assert isinstance(pimjax.lower, types.ModuleType) and isinstance(pimjax.sim.execute, types.ModuleType)
    assert pimjax.lower.lower is pimjax.lower_program
    assert sim_execute.execute is pimjax.execute
    from pimjax.sim.execute import execute
    assert callable(execute) and not isinstance(execute, types.ModuleType)
    # every module of the package is what its parent's attribute of that name holds
    for info in pkgutil.walk_packages(pimjax.__path__, "pimjax."):
        mod = importlib.import_module(info.name)
        parent, _, leaf = info.name.rpartition(".")
        assert getattr(importlib.import_module(parent), leaf) is mod, f"{info.name} is shadowed"


def test_top_level_exports():
    import pimjax.api
    import pimjax.hw
    import pimjax.report
    from pimjax import (
        Backend,
        Compiled,
        Core,
        CycleReport,
        Energy,
        Group,
        Lowered,
        OpPlan,
        OpReport,
        PimFunction,
        Program,
        Report,
        System,
        Timing,
        Traced,
        lower_program,
    )
    assert PimFunction is pimjax.api.PimFunction and Traced is pimjax.api.Traced
    assert Lowered is pimjax.api.Lowered and Compiled is pimjax.api.Compiled and OpPlan is pimjax.api.OpPlan
    assert (Backend, System, Group, Core, Timing, Energy) == (pimjax.hw.Backend, pimjax.hw.System, pimjax.hw.Group,
                                                              pimjax.hw.Core, pimjax.hw.Timing, pimjax.hw.Energy)
    assert Report is pimjax.report.Report and OpReport is pimjax.report.OpReport
    assert Program.__module__ == "pimjax.lower.program" and CycleReport.__module__ == "pimjax.sim.report"
    assert callable(lower_program)
    for name in pimjax.__all__:
        assert hasattr(pimjax, name), name
        assert not isinstance(getattr(pimjax, name), types.ModuleType), name
