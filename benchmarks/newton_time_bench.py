"""Newton's closed-form phase times: the steady-state skip vs walking every command.

    .venv/bin/python benchmarks/newton_time_bench.py [--op gemv:4096x4096 ...]

`costmodel.newton_time.newton_phases` walks each draft's command stream
once per distinct per-group plan; identical stretches (write rounds,
output blocks, vector groups, passes) are added without walking them once
two consecutive periods cost the same (`steady=True`, what the features
use).  Per op: the drafts and their distinct plans, the time to price every
draft both ways (memo cleared before each), the speed-up, the largest
difference between the two (0: the skip is exact on these streams), and the
drafts left to the count estimates (their walk with the skip timed more than
`max_walked` column records without settling; the reference has no budget).
"""
from __future__ import annotations

import argparse
import time

import numpy as np
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--op", nargs="*", default=list(DEFAULT_OPS), help="kernel:AxBx... (newton kernels)")
    args = ap.parse_args()
    be = get_backend("newton")
    table = Table(title="newton_time: steady-state skip vs every command")
    for c in ("op", "drafts", "plans", "skip s", "every command s", "speed-up", "max |diff| cycles", "not walked"):
        table.add_column(c, justify="right")
    for spec in args.op:
        kernel, dims = spec.split(":")
        shape = tuple(int(x) for x in dims.split("x"))
        plan, banks, per_core = plans(kernel, shape, be)
        keys = {tuple(int(plan[k][i]) for k in newton_time.PLAN_KEYS) + (int(banks[i]), bool(per_core[i]))
                for i in range(len(banks))}
        t_skip, fast = timed(plan, banks, per_core, be, True)
        t_all, slow = timed(plan, banks, per_core, be, False)
        diff = max(float(np.nanmax(np.abs(fast[k] - slow[k]), initial=0.0)) for k in fast)
        unwalked = int(np.isnan(fast["compute"]).sum())     # over the walk's budget
        table.add_row(spec, str(len(banks)), str(len(keys)), f"{t_skip:.2f}", f"{t_all:.2f}",
                      f"{t_all / max(t_skip, 1e-9):.1f}x", f"{diff:g}", str(unwalked))
    Console().print(table)


if __name__ == "__main__":
    main()
