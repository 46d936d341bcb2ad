"""The native loop alone, side by side in one run (one thread, CPU time):

    python benchmarks/native_loop_bench.py [--before REV [--no-scan]] [--repeat 5]

1. `_stream` (the one-variant loop: `time_streams`, the tuner's path) against
   `_stream_v` at W = 1 (`time_streams_variants` of one timing): can the
   one-variant loop be `_stream_v` at one variant (issue 42)?  And
   `_stream_v` at W = 32 (a sweep's block), per (record x variant).
2. with `--before REV`: this tree's `_stream` / `_stream_v` against the
   same functions of `pimjax/sim/native.py` at git revision REV (loaded as a
   module beside this one), on the same records: what a change of the loop
   costs; and likewise the scan engine (`cycles.scan_lanes`, jitted, one
   lane per stream of the backend's first programs, wall time per step).

Records: the pooled streams (steady state and resident placement) of
lowered drafts -- hbm-pim (GEMV, VA, RED: single-bank and all-bank columns,
host streams) and AttAcc (GEMV: ACTAB / PREA, the side datapath,
barriers) -- refresh on, each backend's preset timing.  Reports ns per
record (best of `--repeat`), and the ratios.  Checks that every compared
loop gives the same results bit for bit.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import types

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)        # this checkout's pimjax, not an installed one

from at_revision import module_at, source_at  # noqa: E402  (benchmarks/at_revision.py)

from pimjax.hw import get_backend  # noqa: E402
from pimjax.kernels import kernel_op  # noqa: E402
from pimjax.lower import lower  # noqa: E402
from pimjax.partition import drafts  # noqa: E402
from pimjax.sim import native, native_variants  # noqa: E402
from pimjax.sim.cycles import _pool_streams  # noqa: E402
from pimjax.sim.scan import timing_vector  # noqa: E402

CASES = {"hbm-pim": (("gemv", [1024, 1024]), ("va", [1 << 16]), ("red", [256, 1024])),
         "attacc": (("gemv", [2048, 1024]),)}


def _records(name: str, per_case: int):
    be = get_backend(name, **({"system": "reference", "stacks": 1} if name == "attacc" else {}))
    rng = np.random.default_rng(0)
    progs = []
    for kernel, shape in CASES[name]:
        op, shapes = kernel_op(kernel, shape)
        table = drafts(op, be, shapes=shapes)
        for i in rng.choice(len(table), min(per_case, len(table)), replace=False):
            progs.append(lower(op, table[int(i)], be, shapes, resident=(0,)))
    rec, starts, stops, _ = _pool_streams(progs)
    rec = rec.copy()
    table = native.timing_table({k: float(v) for k, v in timing_vector(be.timing).items()})
    live = int((rec[3] > 0).sum())
    return be, rec, starts, stops, table, live


def this_tree():
    """This tree's native engine as one namespace: `sim/native.py` and the variants loop
    (`sim/native_variants.py`), one file in revisions before the split (what `_load_before` loads)."""
    return types.SimpleNamespace(**{**vars(native), **vars(native_variants)})


def _load_native_before(rev: str):
    """The native engine at `rev` as one namespace, as `this_tree`: `native.py`, and `native_variants.py` where
    `rev` has it (its `from .native import` pointed at the `native.py` of `rev`)."""
    mods = [_load_before(rev)]
    src = source_at(rev, "pimjax/sim/native_variants.py")
    if src is not None:
        mods.append(_load_before(rev, "native_variants", src.replace("from .native import", "from ._native_before import")))
    return types.SimpleNamespace(**{k: v for m in mods for k, v in vars(m).items()})


def _load_before(rev: str, module: str = "native", src: str | None = None):
    """pimjax/sim/<module>.py at `rev` (or the source `src`), imported as pimjax.sim._<module>_before."""
    return module_at(rev, f"pimjax/sim/{module}.py", f"pimjax.sim._{module}_before", src)


def _best(fns: dict, repeat: int, clock=time.process_time) -> dict:
    """Best-of-`repeat` seconds (`clock`: CPU time by default) of each fn,
    the fns taken in turn each round (so a busy moment of the box falls on
    all of them alike)."""
    best = {k: np.inf for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            t0 = clock()
            fn()
            best[k] = min(best[k], clock() - t0)
    return best


def _runs(mod, be, rec, starts, stops, table):
    """{loop: (fn, variants)}: fn times every stream (its results for the first variant)."""
    banks, per_bg = be.group.banks, be.group.banks_per_bank_group
    K = len(starts)
    wide = np.ascontiguousarray(np.repeat(table, WIDE, axis=0))

    def one():
        return mod.time_streams(rec, starts, stops, np.zeros(K, np.int64), table, banks, per_bg, True, threads=1)

    def v1():
        out = mod.time_streams_variants(rec, starts, stops, table, banks, per_bg, True, threads=1, block=1)
        return {k: v[0] for k, v in out.items()}

    def vw():
        out = mod.time_streams_variants(rec, starts, stops, wide, banks, per_bg, True, threads=1, block=WIDE)
        return {k: v[0] for k, v in out.items()}
    return {"_stream": (one, 1), "_stream_v (W = 1)": (v1, 1), f"_stream_v (W = {WIDE})": (vw, WIDE)}


WIDE = 32
"""Variants of the wide `_stream_v` run (its block: `native.BLOCK`); ns are per (record x variant)."""


def _scan_compare(rev: str, repeat: int) -> None:
    """Wall time per scan step of `cycles.scan_lanes`, this tree against `rev`, on hbm-pim's and AttAcc's
    lowered GEMV streams (one lane per stream), the two taken in turn each round."""
    import jax

    from pimjax.sim import cycles
    from pimjax.sim.cycles import program_arrays
    from pimjax.sim.scan import ALL_FEATURES
    mods = {"this tree": cycles, rev: _load_before(rev, "cycles")}
    print(f"\n{'backend':8} {'lanes x steps':>14}" + "".join(f" {m + ' us/step':>18}" for m in mods)
          + f" {'this / ' + rev:>18}")
    for name, (kernel, shape) in (("hbm-pim", ("gemv", [1024, 1024])), ("attacc", ("gemv", [2048, 1024]))):
        be = get_backend(name, **({"system": "reference", "stacks": 1} if name == "attacc" else {}))
        op, shapes = kernel_op(kernel, shape)
        table = drafts(op, be, shapes=shapes)
        arr = program_arrays(lower(op, table[len(table) // 2], be, shapes, resident=(0,)))["rec"]
        rec = {k: np.asarray(v) for k, v in arr.items()}
        t = {k: float(v) for k, v in timing_vector(be.timing).items()}
        g = be.group
        fns, outs = {}, []
        for m, mod in mods.items():
            f = jax.jit(lambda r, tt, mod=mod: mod.scan_lanes(r, tt, g.banks, g.banks_per_bank_group, True,
                                                              ALL_FEATURES))
            outs.append(jax.tree.map(np.asarray, f(rec, t)))      # compiles
            fns[m] = (lambda f=f: jax.block_until_ready(f(rec, t)))
        assert all(np.array_equal(outs[0][k], o[k]) for o in outs for k in outs[0])
        best = _best(fns, repeat, time.perf_counter)
        N, R = rec["op"].shape
        us = {m: best[m] / R * 1e6 for m in mods}
        print(f"{name:8} {f'{N} x {R}':>14}" + "".join(f" {us[m]:18.2f}" for m in mods)
              + f" {us['this tree'] / us[rev]:17.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", default=None, help="git revision whose native.py to compare against")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--per-case", type=int, default=24)
    ap.add_argument("--no-scan", action="store_true", help="with --before: the native loops only")
    args = ap.parse_args()
    mods = {"this tree": this_tree()}
    if args.before:
        mods[args.before] = _load_native_before(args.before)
    loops = ("_stream", "_stream_v (W = 1)", f"_stream_v (W = {WIDE})")
    head = f"{'backend':8} {'records':>9} {'loop':18}" + "".join(f" {m + ' ns/rec':>18}" for m in mods)
    head += f" {'/ _stream':>10}" + (f" {'this / ' + args.before:>18}" if args.before else "")
    print(head)
    for name in CASES:
        be, rec, starts, stops, table, live = _records(name, args.per_case)
        fns, ref, width = {}, None, {}
        for m, mod in mods.items():
            for k, (fn, w) in _runs(mod, be, rec, starts, stops, table).items():
                width[k] = w
                out = fn()                          # compiles; every loop gives the same results
                got = (out["end"].ravel(), out["buckets"].ravel(), out["counts"].ravel())
                if ref is None:
                    ref = got
                assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(ref, got)), (m, k)
                fns[m, k] = fn
        ns = {key: sec / (live * width[key[1]]) * 1e9 for key, sec in _best(fns, args.repeat).items()}
        for k in loops:
            row = f"{name:8} {live:9,} {k:18}" + "".join(f" {ns[m, k]:18.1f}" for m in mods)
            row += f" {ns['this tree', k] / ns['this tree', '_stream']:9.2f}x"
            if args.before:
                row += f" {ns['this tree', k] / ns[args.before, k]:17.2f}x"
            print(row)
    if args.before and not args.no_scan:
        _scan_compare(args.before, args.repeat)


if __name__ == "__main__":
    main()
