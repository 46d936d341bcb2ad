"""ATiM's balanced evolutionary search vs plain evolutionary search.

    .venv/bin/python benchmarks/tune_bench.py [--seeds 5] [--budgets 16 32 64 128]
                                              [--op hbm-pim:gemv:8192x8192 ...] [--exhaustive]

`Tuner.evolutionary` with `balanced=True` (ATiM §5.2.3: for the first 40 %
of the trials the parents are drawn equally from drafts with and without an
rfactor reduction and ε decays from 0.5 to 0.05) and `balanced=False`
(parents: the top-8 measured drafts, ε = 0.05 throughout), for several trial
budgets (drafts lowered and simulated) and seeds, on ops with large draft
spaces.  Both run the tuner's own code with the shipped cost model ranking
the candidates; the only change is that a draft simulated once is not
simulated again in a later run (the cycle model is deterministic, so the
numbers are those of the searches' own `Measurer.simulate`: `lower` + `cycles_batch`).
A draft that fails to lower counts as infinitely slow (the plain Tuner
would raise `PimCompileError` for the whole op; their count is printed).

Reported: best simulated cycles found / reference, mean over the seeds
(1.000 = the reference), and how many seeds reached it (within one cycle).
The reference is the exhaustive optimum with `--exhaustive` (every draft
simulated, hours for these ops; labels cached by `costmodel.evaluate`),
otherwise the best draft simulated by any run of this script, which the
table says.  The default tuner (predict mode: the cost model's top 8
simulated) is shown for comparison.
"""
from __future__ import annotations

import argparse
import math
import time

import numpy as np
from rich.console import Console
from rich.table import Table

from pimjax.api import enable_xla_cache
from pimjax.costmodel.kernels import case_drafts, make_case
from pimjax.costmodel.predictor import load_default
from pimjax.errors import PimCompileError
from pimjax.hw import get_backend
from pimjax.lower import lower
from pimjax.search.strategy import Measurer, TopK
from pimjax.search.tuner import Tuner
from pimjax.sim.cycles import cycles_batch

DEFAULT_OPS = ("hbm-pim:gemv:8192x8192", "hbm-pim:mmtv:8x40x2048x128", "hbm-pim:red:256x16384")


class MemoTuner(Tuner):
    """The Tuner, with simulations (`MemoMeasurer`) and predictions shared
    between runs on one op."""

    def __init__(self, memo: dict, shared: dict, stats: dict, **kw):
        super().__init__(mode="evolutionary", measurer=MemoMeasurer(memo, stats), **kw)
        self.shared = shared

    def predict(self, op, table, backend, shapes):
        if "pred" not in self.shared:
            self.shared["pred"] = super().predict(op, table, backend, shapes)
        return self.shared["pred"]


class MemoMeasurer(Measurer):
    """Simulations shared between runs on one op (`memo`: draft -> simulated
    total cycles)."""

    def __init__(self, memo: dict, stats: dict):
        self.memo, self.stats = memo, stats

    def simulate(self, op, drafts, backend, shapes, lower_options, programs=None, lower_fn=lower):
        # drafts simulated before are not lowered again; the caller's
        # `programs` are not used, so lowering is timed here for every run
        todo, programs = [], []
        t0 = time.perf_counter()
        for d in drafts:
            if d in self.memo or d in todo:
                continue
            try:
                programs.append(lower_fn(op, d, backend, shapes, **lower_options))
                todo.append(d)
            except PimCompileError:
                self.memo[d] = math.inf
                self.stats["unlowerable"] += 1
        t1 = time.perf_counter()
        if programs:
            totals = np.asarray(cycles_batch(programs, backend).total_cycles, np.float64)
            self.memo.update(zip(todo, totals.tolist()))
        self.stats["lower_s"] += t1 - t0
        self.stats["sim_s"] += time.perf_counter() - t1
        return [None] * len(drafts), np.array([self.memo[d] for d in drafts]), lambda j: None


def parse_op(spec: str):
    backend, kernel, shape = spec.split(":")
    return backend, kernel, [int(v) for v in shape.split("x")]


def run_op(spec: str, budgets, seeds: int, use_exhaustive: bool, console: Console) -> dict:
    backend_name, kernel, shape = parse_op(spec)
    be = get_backend(backend_name)
    case = make_case(be, kernel, shape)
    table = case_drafts(case, be)
    model = load_default(backend_name)
    memo, shared = {}, {}
    stats = {"unlowerable": 0, "sim_s": 0.0, "lower_s": 0.0}
    t0 = time.perf_counter()
    found = {}                                # (balanced, budget) -> [best per seed]
    for budget in budgets:
        for balanced in (True, False):
            found[balanced, budget] = [
                MemoTuner(memo, shared, stats, model=model, seed=seed, balanced=balanced)
                .evolutionary(case.op, table, be, case.shapes, trials=budget).history[-1]
                for seed in range(seeds)]
    # the default tuner (predict mode: the predicted top 8 and the baseline mapping, simulated)
    t = MemoTuner(memo, shared, stats, model=model)
    choice = t.run(TopK(k=t.top_k), case.op, table, be, case.shapes)
    predict_best = memo[choice.draft]
    seconds = time.perf_counter() - t0
    ref, ref_kind = min(memo.values()), "best simulated by any run"
    if use_exhaustive:
        from pimjax.costmodel.evaluate import exhaustive
        console.print(f"[dim]{spec}: exhaustive simulation of {len(table):,} drafts...[/dim]")
        _, ex_table, cyc = exhaustive(be, kernel, shape)
        if len(ex_table) == len(table):
            ref, ref_kind = float(np.nanmin(cyc)), "exhaustive optimum"
    rfactor = float(np.mean(np.asarray(table.reduction) != 0))
    return {"spec": spec, "drafts": len(table), "rfactor": rfactor, "found": found, "ref": ref,
            "ref_kind": ref_kind, "predict": predict_best, "simulated": len(memo),
            "seconds": seconds, **stats}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--budgets", type=int, nargs="+", default=[16, 32, 64, 128])
    parser.add_argument("--op", action="append", help="backend:kernel:MxN..., repeatable")
    parser.add_argument("--exhaustive", action="store_true",
                        help="reference = exhaustive optimum (simulates every draft: hours)")
    opts = parser.parse_args()
    console = Console(width=150)
    xla_cache = enable_xla_cache()      # as pim_jit does: the scans' XLA compiles dominate a first run
    t_start = time.perf_counter()
    results = []
    for spec in opts.op or DEFAULT_OPS:
        console.print(f"[dim]{spec}...[/dim]")
        results.append(run_op(spec, opts.budgets, opts.seeds, opts.exhaustive, console))

    t = Table(title=f"Evolutionary search: best simulated cycles / reference, mean of {opts.seeds} seeds "
                    f"(1.000 = reference; seeds reaching it)")
    for col in ("op (drafts, rfactor share)", "reference", "trials", "balanced (ATiM)", "plain",
                "balanced hits", "plain hits"):
        t.add_column(col, justify="left" if col.startswith("op") else "right")
    for r in results:
        ref = r["ref"]
        label = f"{r['spec']} ({r['drafts']:,}, {r['rfactor']:.0%})"
        for k, budget in enumerate(opts.budgets):
            cells = []
            for balanced in (True, False):
                rel = np.array(r["found"][balanced, budget]) / ref
                cells.append((f"{rel.mean():.3f}", f"{int(np.sum(np.array(r['found'][balanced, budget]) - ref < 1.0))}"
                              f"/{len(rel)}"))
            t.add_row(label if k == 0 else "", f"{ref:,.0f} cyc" if k == 0 else
                      (r["ref_kind"] if k == 1 else ""), str(budget),
                      cells[0][0], cells[1][0], cells[0][1], cells[1][1])
        t.add_row("", "", "predict top-8", f"{r['predict'] / ref:.3f}", "", "", "", end_section=True)
    console.print(t)
    for r in results:
        console.print(f"{r['spec']}: {r['simulated']:,} distinct drafts simulated over all runs "
                      f"({r['simulated'] / r['drafts']:.0%} of the space), {r['unlowerable']} of them "
                      f"failed to lower; {r['seconds']:.0f} s ({r['lower_s']:.0f} s lowering, {r['sim_s']:.0f} s in "
                      f"cycles_batch incl. XLA compiles)")
    console.print(f"[dim]total {time.perf_counter() - t_start:.0f} s; persistent XLA cache: {xla_cache}[/dim]")


if __name__ == "__main__":
    main()
