"""Newton's closed-form phase times: the steady-state skip vs walking every command.

    .venv/bin/python benchmarks/newton_time_bench.py [--op gemv:4096x4096 ...] [--walk compiled python both]
    .venv/bin/python benchmarks/newton_time_bench.py --before REV [--repeat 5] [--op ...]

`costmodel.newton_time.newton_phases` walks each draft's command stream
once per distinct per-group plan; identical stretches (write rounds,
output blocks, vector groups, passes) are added without walking them once
two consecutive periods cost the same (`steady=True`, what the features
use).  Per op: the drafts and their distinct plans, the time to price every
draft both ways (memo cleared before each), the speed-up, the largest
difference between the two (0: the skip is exact on these streams), and the
drafts left to the count estimates (their walk with the skip timed more than
`max_walked` column records without settling; the reference has no budget).
`--walk`: the compiled walk (`backends/newton/walk.py`, the default the
features use), its Python definition (`time._walk`, `time.NATIVE = False`),
or both, one after the other (the same numbers, checked).
`--before REV`: instead, the compiled walk of this tree against
`backends/newton/walk.py` at git revision REV (loaded beside it), with the
skip, the two taken in turn, best of `--repeat` (CPU time): what a change
of the walk costs; the results checked equal.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from at_revision import module_at  # benchmarks/at_revision.py
from rich.console import Console
from rich.table import Table

from pimjax.backends.newton import time as newton_time
from pimjax.costmodel.kernels import case_drafts, make_case
from pimjax.hw import get_backend

DEFAULT_OPS = ("gemv:1024x1024", "gemv:4096x4096", "mmtv:1x12x256x64", "mmtv:8x8x512x128", "gemm:64x512x256")


def plans(kernel: str, shape, be):
    """(plan, banks used, per-core flags) of every draft of one op."""
    case = make_case(be, kernel, shape)
    return newton_time.draft_plans(case.op, case_drafts(case, be), case.shapes, be)


def timed(plan, banks, per_core, be, steady: bool):
    newton_time._WALKS.clear()
    t0 = time.perf_counter()
    kw = {} if steady else {"max_walked": np.inf}       # the reference walks every command
    out = newton_time.newton_phases(plan, banks, per_core, be, steady=steady, **kw)
    return time.perf_counter() - t0, out


def compare(rev: str, ops, repeat: int) -> None:
    """This tree's compiled walk against `rev`'s, per op (every draft, memo cleared), best of `repeat`."""
    import pimjax.backends.newton.walk as this
    mods = {"this tree": this, rev: module_at(rev, "pimjax/backends/newton/walk.py", "pimjax.backends.newton._walk_before")}
    be = get_backend("newton")
    table = Table(title=f"newton walk: this tree vs {rev} (CPU s, best of {repeat})")
    for c in ("op", "drafts", "this tree s", f"{rev} s", "this / before"):
        table.add_column(c, justify="right")
    for spec in ops:
        kernel, dims = spec.split(":")
        plan, banks, per_core = plans(kernel, tuple(int(x) for x in dims.split("x")), be)
        best, outs = dict.fromkeys(mods, np.inf), {}
        for _ in range(repeat):
            for name, mod in mods.items():
                sys.modules["pimjax.backends.newton.walk"] = mod      # `_walk_native` imports it at each call
                try:
                    newton_time._WALKS.clear()
                    t0 = time.process_time()
                    outs[name] = newton_time.newton_phases(plan, banks, per_core, be)
                    best[name] = min(best[name], time.process_time() - t0)
                finally:
                    sys.modules["pimjax.backends.newton.walk"] = this
        for k in outs["this tree"]:
            np.testing.assert_array_equal(outs["this tree"][k], outs[rev][k], err_msg=f"{spec} {k}")
        table.add_row(spec, str(len(banks)), f"{best['this tree']:.3f}", f"{best[rev]:.3f}",
                      f"{best['this tree'] / best[rev]:.2f}x")
    Console().print(table)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--op", nargs="*", default=list(DEFAULT_OPS), help="kernel:AxBx... (newton kernels)")
    ap.add_argument("--walk", choices=("compiled", "python", "both"), default="compiled")
    ap.add_argument("--before", default=None, help="git revision whose walk.py to compare against")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    if args.before:
        compare(args.before, args.op, args.repeat)
        return
    be = get_backend("newton")
    table = Table(title="newton_time: steady-state skip vs every command")
    for c in ("op", "walk", "drafts", "plans", "skip s", "every command s", "speed-up", "max |diff| cycles",
              "not walked"):
        table.add_column(c, justify="right")
    walks = {"compiled": (True,), "python": (False,), "both": (True, False)}[args.walk]
    for spec in args.op:
        kernel, dims = spec.split(":")
        shape = tuple(int(x) for x in dims.split("x"))
        plan, banks, per_core = plans(kernel, shape, be)
        keys = {tuple(int(plan[k][i]) for k in newton_time.PLAN_KEYS) + (int(banks[i]), bool(per_core[i]))
                for i in range(len(banks))}
        got = []
        for native in walks:
            newton_time.NATIVE = native
            t_skip, fast = timed(plan, banks, per_core, be, True)
            t_all, slow = timed(plan, banks, per_core, be, False)
            got.append(fast)
            diff = max(float(np.nanmax(np.abs(fast[k] - slow[k]), initial=0.0)) for k in fast)
            unwalked = int(np.isnan(fast["compute"]).sum())     # over the walk's budget
            table.add_row(spec, "compiled" if native else "python", str(len(banks)), str(len(keys)), f"{t_skip:.2f}",
                          f"{t_all:.2f}", f"{t_all / max(t_skip, 1e-9):.1f}x", f"{diff:g}", str(unwalked))
        for other in got[1:]:
            for k in other:
                np.testing.assert_array_equal(got[0][k], other[k], err_msg=f"{spec} {k}: compiled != python")
    newton_time.NATIVE = True
    Console().print(table)


if __name__ == "__main__":
    main()
