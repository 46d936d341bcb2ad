"""Search strategies as objects (`search.strategy`): a `Tuner` runs the
strategy object it is given, every search measures through its one
`Measurer`, and `Exhaustive`'s knobs per object give the pick the module
constants give."""
from __future__ import annotations

import numpy as np
import pytest

from pimjax.hw import get_backend
from pimjax.kernels import kernel_op
from pimjax.lower import lower
from pimjax.partition import drafts
from pimjax.search.strategy import Evolutionary, Exhaustive, Measurer, Strategy, TopK
from pimjax.search.tuner import Tuner
from pimjax.sim.cycles import cycles_batch
from tests.search.test_tuner import Flat

BE = get_backend("hbm-pim", channels=2)
OP, SHAPES = kernel_op("gemv", [48, 40])
TABLE = drafts(OP, BE, shapes=SHAPES)


class Counting(Measurer):
    """Counts every draft a search simulates and how many of them lowered."""

    def __init__(self):
        self.simulated, self.lowered = 0, 0

    def simulate(self, op, drafts, backend, shapes, lower_options, programs=None, lower_fn=lower):
        out = super().simulate(op, drafts, backend, shapes, lower_options, programs, lower_fn)
        self.simulated += len(drafts)
        self.lowered += int(np.isfinite(out[1]).sum())
        return out


def _truth() -> np.ndarray:
    return np.asarray(cycles_batch([lower(OP, d, BE, SHAPES) for d in TABLE], BE).total_cycles, np.float64)


def test_mode_names_and_objects_build_the_same_strategies():
    assert isinstance(Tuner().strategy, TopK) and Tuner().strategy.k == 8
    assert isinstance(Tuner(mode="exhaustive").strategy, Exhaustive)
    t = Tuner(mode="evolutionary", trials=5, seed=2)
    assert isinstance(t.strategy, Evolutionary) and (t.strategy.trials, t.strategy.seed) == (5, 2)
    own = TopK(k=3, include_baseline=False)
    t = Tuner(mode=own, model=Flat())
    assert t.strategy is own and (t.mode, t.top_k, t.include_baseline) == ("predict", 3, False)
    evo = Evolutionary(trials=7, seed=4)
    t = Tuner(mode=evo)
    assert t.strategy is evo and (t.mode, t.trials, t.seed) == ("evolutionary", 7, 4)
    with pytest.raises(ValueError, match="tuner mode"):
        Tuner(mode="random")
    with pytest.raises(ValueError, match="trials"):
        Evolutionary(trials=0)


def test_every_simulation_goes_through_the_tuners_measurer():
    """Predict mode: the measurer sees exactly the drafts the Choice counts
    as simulated (the top-k and the baseline, one batch), no more."""
    m = Counting()
    choice = Tuner(model=Flat(), top_k=4, measurer=m).choose(OP, BE, SHAPES)
    assert choice.simulated == m.lowered and 4 <= m.simulated <= 5
    m = Counting()
    choice = Tuner(mode="exhaustive", measurer=m).choose(OP, BE, SHAPES, tag="counted")
    assert m.lowered == choice.simulated and choice.simulated + choice.pruned == len(TABLE)


def test_exhaustive_knobs_per_object_keep_the_full_searchs_pick():
    """Branch and bound off, on, and in one-draft batches without the worker
    thread: one pick, the simulated optimum (first of equals), and only the
    bounded search prunes."""
    cyc = _truth()
    best = int(np.argmin(cyc))
    picks = []
    for strategy in (Exhaustive(bound=False), Exhaustive(bound=True),
                     Exhaustive(bound=True, batch=1, pipeline=False, first=1)):
        c = Tuner(mode=strategy).run(strategy, OP, TABLE, BE, SHAPES)
        picks.append((c.draft, float(c.report.total_cycles), c.pruned, c.simulated))
    assert {p[0] for p in picks} == {TABLE[best]}
    assert {p[1] for p in picks} == {cyc[best]}
    assert picks[0][2] == 0 and picks[0][3] == len(TABLE)
    assert all(p[2] + p[3] == len(TABLE) for p in picks)


def test_a_strategy_of_ones_own_is_run_and_cached_under_its_name():
    """A user's Strategy subclass is what `verify` runs; its pick is cached
    under its name and answers a second tuner of the same strategy -- unless
    that tuner checks picks against the baseline mapping and this one is
    slower (the cache's claim check: dropped with a warning, re-tuned)."""
    class First(Strategy):
        name = "first"
        effort = 1

        def search(self, task, measurer, database=None):
            from pimjax.search.strategy import Choice
            progs, totals, report = measurer.simulate(task.op, [task.table[0]], task.backend, task.shapes,
                                                      task.lower_options, lower_fn=task.lower_fn)
            return Choice(task.table[0], progs[0], report(0), float("nan"), 1, len(task.table), self.name)
    t = Tuner(mode=First(), model=Flat())
    c = t.choose(OP, BE, SHAPES)
    assert c.draft == TABLE[0] and c.mode == "first" and not c.cached
    again = Tuner(mode=First(), model=Flat(), cache=t.cache, include_baseline=False).choose(OP, BE, SHAPES)
    assert again.cached and again.draft == TABLE[0]
    assert float(c.report.total_cycles) > _truth().min()           # a poor pick: not the optimum
    with pytest.warns(RuntimeWarning, match="slower than the baseline"):
        checked = Tuner(mode=First(), model=Flat(), cache=t.cache).choose(OP, BE, SHAPES)
    assert not checked.cached


@pytest.mark.parametrize("max_records", [1, 1 << 30])
def test_fastest_streams_drafts_in_bounded_batches_and_keeps_the_simulated_optimum(max_records):
    """`Measurer.fastest` (what `with_extras` runs on the family's fixed mappings): one-draft
    batches (max_records 1) and one batch give the batch simulation's own argmin, first of equals."""
    cyc = _truth()
    some = list(range(0, len(TABLE), max(1, len(TABLE) // 12)))
    m = Counting()
    j, total, program, report, count = m.fastest(OP, [TABLE[i] for i in some], BE, SHAPES, {},
                                                 max_records=max_records)
    assert some[j] == some[int(np.argmin(cyc[some]))] and total == cyc[some].min()
    assert count == len(some) == m.simulated and float(report.total_cycles) == total
    assert program.draft == TABLE[some[j]]


def test_fastest_skips_a_draft_whose_simulation_is_not_finite():
    """A draft simulated to +inf (none should be; `Measurer.simulate`'s totals for a lowering error) is
    neither picked nor counted."""
    cyc = _truth()
    order = list(np.argsort(cyc)[:3])                  # the best three, the best first

    class Poisoned(Measurer):
        def simulate(self, op, drafts, backend, shapes, lower_options, programs=None, lower_fn=lower):
            progs, totals, report = super().simulate(op, drafts, backend, shapes, lower_options, programs, lower_fn)
            totals = np.where([d == TABLE[order[0]] for d in drafts], np.inf, totals)
            return progs, totals, report
    j, total, _, _, count = Poisoned().fastest(OP, [TABLE[i] for i in order], BE, SHAPES, {}, max_records=1)
    assert order[j] == order[1] and total == cyc[order[1]] and count == 2
