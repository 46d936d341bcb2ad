"""Speed of the cycle model, side by side in one run.

    python benchmarks/cycles_bench.py [--before REV] [--repeat 3]

1. command records simulated per second: `cycles_batch` on 256 programs
   with each engine -- "native" (the compiled event loop, `sim.native`,
   the default) and "scan" (the lane-packed lax.scan) -- vs the pure-Python
   reference event model;
2. a sweep of 10 000 timing variants of one 4096x4096 GEMV program, each
   engine;
3. the hbm-pim baseline program of a 4096x4096 GEMV (64 pCH) after warm-up,
   each engine, next to the Samsung simulator's 3.1 s for the same program
   (reference/hbm-pim.md).
Targets: >= 10 M records/s batched; the GEMV >= 100x faster than 3.1 s;
the 10 000-variant sweep <= 10 s.
4. with `--before REV`: the native engine's measures of 1-3 again, this
   tree's loops (`sim/native.py`'s `_streams` / `_streams_v`) against REV's
   (loaded as a module beside this one, swapped in), taken in turn each
   round, best of `--repeat`: what a change of the loops costs.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

import jax
import numpy as np

from pimjax.backends import baseline
from pimjax.hw import get_backend, stack_variants
from pimjax.kernels import kernel_op
from pimjax.lower import lower
from pimjax.partition import drafts
from pimjax.sim.cycles import cycles, cycles_batch, program_arrays, sweep
from pimjax.sim.engines import ENGINES
from pimjax.sim.reference import simulate
from pimjax.sim.scan import timing_vector


def best_of(fn, repeat=3):
    fn()                                                   # warm-up / compile
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
    return min(times)


@contextlib.contextmanager
def _loops_of(mod):
    """`sim.native`'s stream loops replaced by those of module `mod` (same signatures)."""
    from pimjax.sim import native, native_variants
    saved = native._streams, native_variants._streams_v
    native._streams, native_variants._streams_v = mod._streams, mod._streams_v
    try:
        yield
    finally:
        native._streams, native_variants._streams_v = saved


def _native_compare(rev: str, repeat: int, cases: dict) -> None:
    """4.: each case {name: fn} timed with this tree's loops and with REV's, in turn, best of `repeat`."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from native_loop_bench import _load_before, this_tree
    mods = {"this tree": this_tree(), rev: _load_before(rev)}
    best = {(m, c): np.inf for m in mods for c in cases}
    for m, mod in mods.items():                   # compile both, and check they agree
        with _loops_of(mod):
            got = [np.asarray(fn()) for fn in cases.values()]
        if m == "this tree":
            want = got
        assert all(np.array_equal(a, b) for a, b in zip(want, got)), m
    for r in range(repeat):
        for c, fn in cases.items():
            for m, mod in list(mods.items())[::1 if r % 2 else -1]:      # the first of a pair alternates
                with _loops_of(mod):
                    t0 = time.perf_counter()
                    jax.block_until_ready(fn())
                    best[m, c] = min(best[m, c], time.perf_counter() - t0)
    print(f"\nnative engine, this tree's loops against {rev}'s (s, best of {repeat}):")
    print(f"{'measure':40} {'this tree':>10} {rev:>10} {'ratio':>7}")
    for c in cases:
        a, b = best["this tree", c], best[rev, c]
        print(f"{c:40} {a:10.4f} {b:10.4f} {a / b:6.3f}x")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", default=None, help="git revision whose sim/native.py loops to compare against")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    be = get_backend("hbm-pim", channels=16)
    rng = np.random.default_rng(0)
    progs = []
    for kernel, shape in (("gemv", [1024, 1024]), ("va", [1 << 16]), ("red", [256, 1024]),
                          ("gemv", [512, 2048])):
        op, shapes = kernel_op(kernel, shape)
        table = drafts(op, be, shapes=shapes)
        progs += [lower(op, table[int(i)], be, shapes, resident=(0,)) for i in rng.choice(len(table), 64)]
    # every record the batch simulates: the steady-state streams and the
    # one-time placement of the resident operands (timed as its own stream)
    def live(prog):
        a = program_arrays(prog)
        return [int(x) for key in ("rec", "res") for x in (a[key]["n"] > 0).sum(axis=1) if x]
    lengths = [n for p in progs for n in live(p)]
    n_records = sum(lengths)
    t_batch = {e: best_of(lambda: cycles_batch(progs, be, engine=e).total_cycles) for e in ENGINES}
    # the same kernels with no stream much longer than the rest: the lanes
    # of one scan stay busy (above, one 35 k-record stream is a serial chain
    # that bounds the whole scan)
    even = [p for p in progs if max(live(p)) <= 4096]
    even = (even * (1024 // len(even) + 1))[:1024]
    n_even = sum(sum(live(p)) for p in even)
    t_even = {e: best_of(lambda: cycles_batch(even, be, engine=e).total_cycles) for e in ENGINES}
    # reference model on a sample (it is slow), per record
    t = {k: float(v) for k, v in timing_vector(be.timing).items()}
    sample = progs[:16]
    ref_records = 0
    t0 = time.perf_counter()
    for p in sample:
        arr = program_arrays(p)["rec"]
        recs = [{k: int(arr[k][0, i]) for k in arr} for i in range(arr["op"].shape[1])]
        ref_records += sum(1 for r in recs if r["n"] > 0)
        simulate(recs, t, be.group.banks, be.group.banks_per_bank_group, True)
    t_ref = time.perf_counter() - t0
    ref_rate = ref_records / t_ref

    big = get_backend("hbm-pim")
    op, shapes = kernel_op("gemv", [4096, 4096])
    prog = lower(op, baseline(op, big), big, shapes, resident=(0,))
    t_one = {e: best_of(lambda: cycles(prog, big, engine=e).total_cycles) for e in ENGINES}
    variants = stack_variants([big.timing.replace(tRP=float(10 + i % 9), tRCDRD=float(10 + i % 7))
                               for i in range(10_000)])
    t_sweep = {e: best_of(lambda: sweep(prog, variants, big, engine=e).total_cycles, repeat=1) for e in ENGINES}

    print(f"{'measure':58} {'native':>14} {'scan':>14} {'native/scan':>12}")
    rows = [("records/s, cycles_batch of 256 programs", n_records / t_batch["native"],
             n_records / t_batch["scan"], True),
            ("records/s, 1024 streams <= 4096 records", n_even / t_even["native"], n_even / t_even["scan"], True),
            ("GEMV 4096x4096 baseline (64 pCH), one program, s", t_one["native"], t_one["scan"], False),
            ("sweep of 10 000 timing variants of that GEMV, s", t_sweep["native"], t_sweep["scan"], False)]
    for name, a, b, rate in rows:
        fmt = "14,.0f" if rate else "14.4f"
        print(f"{name:58} {a:{fmt}} {b:{fmt}} {(a / b if rate else b / a):11.1f}x")
    print(f"{'records/s, pure-Python reference model':58} {ref_rate:14,.0f}")
    for e in ENGINES:
        print(f"{e:>6}: batch {n_records / t_batch[e] / ref_rate:,.0f}x the reference model; "
              f"GEMV program {3.1 / t_one[e]:,.0f}x faster than the Samsung simulator's 3.1 s")
    print(f"longest stream of the 256-program batch: {max(lengths):,} records")
    print(f"\nrecords: {n_records:,} in the batch ({len(progs)} programs), "
          f"{int(program_arrays(prog)['rec']['n'].astype(bool).sum()):,} in the GEMV program")
    if args.before:
        _native_compare(args.before, args.repeat, {
            "cycles_batch, 256 programs": lambda: cycles_batch(progs, be, engine="native").total_cycles,
            "cycles_batch, 1024 streams <= 4096": lambda: cycles_batch(even, be, engine="native").total_cycles,
            "GEMV 4096x4096 baseline program": lambda: cycles(prog, big, engine="native").total_cycles,
            "sweep of 10 000 variants": lambda: sweep(prog, variants, big, engine="native").total_cycles})


if __name__ == "__main__":
    main()
