"""Exhaustive tuning at model scale: a GPT-3 13B FFN GEMV and an LLM decode attention block.

    .venv/bin/python benchmarks/model_scale_bench.py [--backends hbm-pim attacc newton]
                                                     [--shape 20480 5120] [--attn 1 40 2048 128]
                                                     [--attn-drafts 8] [--sample newton=40 ...]

(1) `Tuner(mode="exhaustive").choose` of y = W @ x, W 20480 x 5120 fp16 (the
kernel catalogue's `gemv`; GPT-3 13B's FFN up-projection, d_model 5120) on
each backend: every draft of the pruned space that can win lowered and
simulated (`cycles_batch`, the native engine), the fastest kept.  "pruned"
counts the drafts the branch and bound never lowered (their family's lower
bound on the cycles exceeded the best total found: HBM-PIM's
`backends/hbm_pim/bounds.py`).  Run twice in one
process: "cold" includes the one-time costs of a process (numba loading or
compiling the lowerings' and the cycle model's compiled loops, first-use
caches), "warm" is a second Tuner (its own memory cache, so nothing is
reused but the per-process compiled code and the lowerings' per-shape
caches).  Lowering and simulation are timed apart (the searches' own
`Measurer.lower_each` and `.simulate`; the search simulates a batch on a worker
thread while it lowers the next, so the two overlap and their sum exceeds
the total); "user + sys" is the process's CPU time over the run
(`getrusage`, every thread), the figure to compare on a loaded box.

(2) AttAcc's fused attention block (`lower_attention`: score, softmax,
context as one program) of one decode step, 40 heads x d 128 over L 2048
cached tokens: it is lowered for every new context length, so the figure is
seconds per draft lowered + simulated (evenly spaced drafts of the block's
space, best of two passes).

Targets: (1) warm ≤ 10 s per backend; (2) well under 0.5 s per draft.
"""
from __future__ import annotations

import argparse
import resource
import time

import numpy as np
from rich.console import Console
from rich.table import Table

from pimjax.costmodel.kernels import case_drafts, lower_case, make_case
from pimjax.errors import PimCompileError
from pimjax.hw import get_backend
from pimjax.lower import lower
from pimjax.search.strategy import Measurer
from pimjax.search.tuner import Tuner
from pimjax.sim.cycles import cycles_batch


class TimedMeasurer(Measurer):
    """The searches' Measurer, with its lowering and simulation timed apart."""

    def __init__(self):
        self.t = {"lower": 0.0, "sim": 0.0}

    def lower_each(self, *a, **k):
        t0 = time.perf_counter()
        out = super().lower_each(*a, **k)
        self.t["lower"] += time.perf_counter() - t0
        return out

    def simulate(self, op, drafts, backend, shapes, lower_options, programs=None, lower_fn=lower):
        if programs is None:             # lowered here: timed as lowering
            programs = self.lower_each(op, drafts, backend, shapes, lower_options, lower_fn)
        t0 = time.perf_counter()
        out = super().simulate(op, drafts, backend, shapes, lower_options, programs, lower_fn)
        # on the exhaustive search's worker thread: overlaps the lowering of the next batch
        self.t["sim"] += time.perf_counter() - t0
        return out


def tune(backend_name: str, shape, sample: int | None = None) -> dict:
    """The exhaustive Tuner's seconds; with `sample`, only that many evenly
    spaced drafts (the Tuner's `keep`), the seconds scaled to the whole
    space (marked "extrapolated")."""
    be = get_backend(backend_name)
    case = make_case(be, "gemv", shape)
    space = len(case_drafts(case, be))
    keep = None
    if sample is not None and sample < space:
        def keep(table, n=sample):
            mask = np.zeros(len(table), bool)
            mask[np.unique(np.linspace(0, len(table) - 1, n).astype(int))] = True
            return mask
    timed = TimedMeasurer()
    tuner = Tuner(mode="exhaustive", measurer=timed)
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    choice = tuner.choose(case.op, be, case.shapes, keep=keep)
    total = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)     # every thread of the process
    sim = timed.t["sim"]
    scale = space / choice.space
    return {"drafts": space, "timed": choice.space, "failed": round(choice.failed * scale),
            "pruned": round(choice.pruned * scale),
            "lower": timed.t["lower"] * scale, "sim": sim * scale, "total": total * scale, "cpu": cpu * scale,
            "best": float(choice.report.total_cycles), "extrapolated": scale > 1}


def attention(shape, n_drafts: int) -> dict:
    be = get_backend("attacc")
    case = make_case(be, "attn", shape)
    table = case_drafts(case, be)
    idx = np.unique(np.linspace(0, len(table) - 1, min(n_drafts, len(table))).astype(int))
    best = None
    for _ in range(2):
        t0 = time.perf_counter()
        progs = []
        for i in idx:
            try:
                progs.append(lower_case(case, table[int(i)], be))
            except PimCompileError:                  # e.g. K and V exceed a bank's rows: the Tuner skips it
                pass
        t1 = time.perf_counter()
        cycles_batch(progs, be)
        t2 = time.perf_counter()
        run = (t1 - t0, t2 - t1)
        best = run if best is None or sum(run) < sum(best) else best
    records = sum(int(p.stats.records) for p in progs)
    n = max(1, len(progs))                               # per draft that lowers (a failure costs little)
    return {"drafts": len(table), "timed": len(idx), "lowered": len(progs), "lower": best[0] / n, "sim": best[1] / n,
            "records": records / max(1, len(progs))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="*", default=["hbm-pim", "attacc", "newton"])
    parser.add_argument("--shape", type=int, nargs=2, default=[20480, 5120])
    parser.add_argument("--attn", type=int, nargs=4, default=[1, 40, 2048, 128])
    parser.add_argument("--attn-drafts", type=int, default=8)
    parser.add_argument("--sample", nargs="*", default=[], metavar="BACKEND=N",
                        help="time N evenly spaced drafts of BACKEND's space and scale to the whole space")
    opts = parser.parse_args()
    console = Console(width=150)
    t = Table(title=f"Exhaustive tuning of GEMV {opts.shape[0]} x {opts.shape[1]} fp16 (every draft lowered "
                    "and simulated; seconds)")
    for col in ("backend", "drafts (failed to lower, pruned)", "run", "lower s", "simulate s", "total s", "user + sys s",
                "per draft ms", "best cycles"):
        t.add_column(col, justify="left" if col in ("backend", "run") else "right")
    samples = dict(s.split("=") for s in opts.sample)
    for name in opts.backends:
        for run in ("cold", "warm"):
            console.print(f"[dim]{name} {run}...[/dim]")
            r = tune(name, opts.shape, int(samples[name]) if name in samples else None)
            how = f" [{r['timed']} timed, scaled]" if r["extrapolated"] else ""
            t.add_row(name if run == "cold" else "", f"{r['drafts']:,} ({r['failed']}, {r['pruned']})", run + how,
                      f"{r['lower']:.2f}", f"{r['sim']:.2f}", f"{r['total']:.2f}", f"{r['cpu']:.2f}",
                      f"{1000 * r['total'] / r['drafts']:.1f}",
                      f"{r['best']:,.0f}" + (" (of the sample)" if r["extrapolated"] else ""),
                      end_section=run == "warm")
    console.print(t)
    console.print(f"[dim]attention {opts.attn}...[/dim]")
    a = attention(opts.attn, opts.attn_drafts)
    console.print(f"attacc attention block {'x'.join(map(str, opts.attn))} (batch x heads x L x d): "
                  f"{a['drafts']} drafts, {a['timed']} timed ({a['lowered']} lower): {a['lower']:.3f} s lower + {a['sim']:.3f} s simulate "
                  f"= {a['lower'] + a['sim']:.3f} s per lowered draft ({a['records']:,.0f} records per program)")


if __name__ == "__main__":
    main()
