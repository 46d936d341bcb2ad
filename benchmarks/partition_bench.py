"""Draft counts per stage and generation time, with and without memoisation.

    python benchmarks/partition_bench.py

Ops: GEMV 4096x4096 and 8192x8192, the attention-score MMTV (batch 8, 40
heads, 2048 tokens, d 128) and a 3x3 convolution (56x56x64 -> 64) on the
hbm-pim preset (64 pCH x 8 units), plus the DCC artifact's shapes on an
AttAcc-sized 16 x 64 mesh for comparison with its candidate counts
(reference/dcc.md).  Target: <= 0.5 s per op after pruning.
"""
from __future__ import annotations

import statistics
import time

import jax
import jax.numpy as jnp

from pimjax.hw import get_backend
from pimjax.partition import Stats, drafts
from pimjax.trace.frontend import make_graph


def _op(fn, *shapes):
    args = [jax.ShapeDtypeStruct(s, jnp.float16) for s in shapes]
    g = make_graph(fn, *args)
    return [op for op in g.ops if op.kind == "contraction" or op.kind == "elementwise"
            or op.kind == "reduction"][-1]


def conv3x3(x, w):
    return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


CASES = [
    ("GEMV 4096x4096", lambda: _op(lambda W, x: W @ x, (4096, 4096), (4096,))),
    ("GEMV 8192x8192", lambda: _op(lambda W, x: W @ x, (8192, 8192), (8192,))),
    ("MMTV score 8x40x2048x128", lambda: _op(lambda q, K: jnp.einsum("bhd,bhnd->bhn", q, K),
                                             (8, 40, 128), (8, 40, 2048, 128))),
    ("conv 3x3 56x56x64->64", lambda: _op(conv3x3, (1, 56, 56, 64), (3, 3, 64, 64))),
]

DCC_CASES = [   # reference/dcc.md candidate counts on 16 groups x 64 cores
    ("GEMV (1,32,128,512)", 1081, lambda: _op(lambda q, K: jnp.einsum("bhd,bhnd->bhn", q, K),
                                              (1, 32, 128), (1, 32, 512, 128))),
    ("GEMV (1,32,128,4096)", 2184, lambda: _op(lambda q, K: jnp.einsum("bhd,bhnd->bhn", q, K),
                                               (1, 32, 128), (1, 32, 4096, 128))),
    ("RED (1,1024)", 9, lambda: _op(lambda x: jnp.sum(x, axis=-1), (1, 1024))),
    ("RED (1,4096)", 31, lambda: _op(lambda x: jnp.sum(x, axis=-1), (1, 4096))),
    ("RED (4,4096)", 159, lambda: _op(lambda x: jnp.sum(x, axis=-1), (4, 4096))),
]


def timed(fn, repeat=3):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    be = get_backend("hbm-pim")
    print(f"{'op':28} {'sets':>4} {'allocs':>7} {'drafts':>8} {'-rule1':>8} {'-rule2':>7} {'-rule3':>7} "
          f"{'knobs':>8} {'-verify':>7} {'final':>7} {'memo s':>7} {'no-memo s':>9} {'tilings':>9}")
    for name, make in CASES:
        op = make()
        st = Stats()
        t_memo, _ = timed(lambda: drafts(op, be, stats=st))
        t_plain, _ = timed(lambda: drafts(op, be, memo=False), repeat=1)
        print(f"{name:28} {st.dimension_sets:4d} {st.allocations:7d} {st.drafts:8d} {st.rule1_removed:8d} "
              f"{st.rule2_removed:7d} {st.rule3_removed:7d} {st.knob_drafts:8d} {st.verifier_removed:7d} "
              f"{st.final:7d} {t_memo:7.3f} {t_plain:9.3f} {st.drafts:9d}")
    print("\nDCC artifact comparison (attacc preset: 16 channels x 64 banks; tilings = drafts before knobs)")
    att = get_backend("attacc")
    print(f"{'case':24} {'DCC candidates':>15} {'ours: pruned tilings':>21} {'+knobs':>7} "
          f"{'unpruned':>9} {'DCC space: pruned':>18} {'unpruned':>9}")
    for name, theirs, make in DCC_CASES:
        op = make()
        tilings = len(drafts(op, att, knobs=False))
        full = len(drafts(op, att))
        unpruned = len(drafts(op, att, prune_drafts=False, knobs=False))
        dcc_pruned = len(drafts(op, att, knobs=False, divisors=False))
        st = Stats()
        drafts(op, att, prune_drafts=False, knobs=False, divisors=False, stats=st)
        print(f"{name:24} {theirs:15d} {tilings:21d} {full:7d} {unpruned:9d} {dcc_pruned:18d} {st.drafts:9d}")


if __name__ == "__main__":
    main()
