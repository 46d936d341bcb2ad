"""A hash over the cycle reports (and cost-model features) of a fixed set of
programs on every preset: the check that a refactor left behaviour
bit-identical.

    python experiments/report_hash.py            # one line per case + the total
    python experiments/report_hash.py --quick    # fewer drafts per case

Per (backend, kernel, shape) it lowers evenly spaced drafts of the pruned
draft space, times each with the native engine, the scan engine (a subset)
and the reference model (a smaller subset), featurises the whole draft table,
and hashes every field of every report and the feature matrix.  Run it before
and after a change; any differing line names the case that moved.
"""
from __future__ import annotations

import argparse
import hashlib
import sys

import numpy as np

CASES = {
    "hbm-pim": [("gemv", (512, 256)), ("gemv", (1000, 200)), ("red", (4, 4096)), ("va", (8192,)),
                ("relu", (3, 1000)), ("mmtv", (1, 12, 256, 64))],
    "attacc": [("gemv", (1024, 512)), ("red", (4, 2048)), ("mmtv", (1, 8, 256, 64)), ("attn", (1, 4, 128, 64))],
    "newton": [("gemv", (1024, 512)), ("gemv", (1000, 200)), ("mmtv", (1, 12, 256, 64)), ("gemm", (16, 64, 32)),
               ("conv", (7, 7, 32, 16, 1))],
    "upmem": [("gemv", (512, 256)), ("red", (4, 4096)), ("va", (8192,)), ("mmtv", (1, 4, 128, 32))],
}


# the systems the hash was taken on: AttAcc's reference-simulator stack (16 channels), pinned so a
# change of the preset's default system cannot move the hash silently
OPTIONS = {"attacc": dict(system="reference", stacks=1)}


def _digest(h, value) -> None:
    """Feed every leaf of a report (a pytree) into the hash, in a fixed order."""
    import jax
    leaves, tree = jax.tree_util.tree_flatten(value)
    h.update(str(tree).encode())
    for leaf in leaves:
        a = np.asarray(leaf)
        h.update(str(a.dtype).encode() + str(a.shape).encode())
        h.update(np.ascontiguousarray(a).tobytes())


def case_hash(backend_name: str, kernel: str, shape, per_case: int) -> tuple[str, int]:
    """(hex digest, programs timed) of one case."""
    from pimjax.costmodel.features import features_table
    from pimjax.costmodel.kernels import case_drafts, lower_case, make_case
    from pimjax.errors import PimCompileError
    from pimjax.hw import get_backend
    from pimjax.sim.cycles import cycles
    backend = get_backend(backend_name, **OPTIONS.get(backend_name, {}))
    case = make_case(backend, kernel, shape)
    table = case_drafts(case, backend)
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(features_table(case.target, table, backend, case.shapes)).tobytes())
    idx = np.unique(np.linspace(0, len(table) - 1, min(per_case, len(table))).astype(int))
    timed = 0
    for j, i in enumerate(idx):
        try:
            program = lower_case(case, table[int(i)], backend)
        except PimCompileError as err:
            h.update(f"skip {i}: {err}".encode())
            continue
        _digest(h, cycles(program, backend))
        _digest(h, cycles(program, backend, include_resident=True))
        if j % 4 == 0:
            _digest(h, cycles(program, backend, engine="scan"))
        if j % 8 == 0 and not backend.core.programmable:
            _digest(h, cycles(program, backend, refresh=False))
        timed += 1
    return h.hexdigest()[:16], timed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="8 drafts per case instead of 24")
    args = ap.parse_args(argv)
    per_case = 8 if args.quick else 24
    total = hashlib.sha256()
    for backend, cases in CASES.items():
        for kernel, shape in cases:
            digest, timed = case_hash(backend, kernel, shape, per_case)
            total.update(digest.encode())
            print(f"{backend:8s} {kernel:5s} {str(shape):22s} {timed:3d} programs  {digest}", flush=True)
    print(f"total {total.hexdigest()[:16]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
