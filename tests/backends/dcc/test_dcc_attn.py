"""The port of DCC's fused attention generator (`traces.gen_attacc_attn`, the artifact's
gen_trace_AttAcc_ATTN.py).  The artifact CSV has no ATTN row, so these check the trace against the
generator's structure (command counts and order, derived here from its loops) and the two controllers
against each other, not cycles against the fork."""
from __future__ import annotations

import math
from collections import Counter

import pytest

from pimjax.backends.dcc import engine, gen_trace, predict, validate
from pimjax.backends.dcc.tiling import match_alignment

CASES = [((1, 8, 128, 512), [[8, 1, 1], [1, 4, 32], [2, 16, 16]]),
         ((1, 32, 128, 512), [[16, 1, 2], [1, 4, 32], [1, 16, 32]]),
         ((1, 11, 128, 300), [[4, 1, 3], [1, 8, 16], [4, 8, 10]])]


def _expected(tiling, mode):
    """Command counts of the artifact's loops (score_mac, context_mac, softmax, data_LD, data_Ret,
    run_attention with one iteration) for an aligned tiling."""
    T = match_alignment([list(t) for t in tiling])
    nB = T[0][1] * T[1][1] * T[2][1]
    nL = T[0][0] * T[1][0] * T[2][0]
    t0, t1, t2 = T[0][2], T[1][2], T[2][2]
    starts = sum(1 for p1 in range(t0) for p2 in range(t1) if (p1 * t1 + p2) % 16 == 0)
    flush = lambda n: sum(1 for p in range(n) if p % 16 == 15 or p == n - 1)     # noqa: E731
    P = math.ceil(t0 * t1 / 16)
    c = Counter()
    c["PIM_WR_GB"] = c["PIM_MV_GB"] = starts * nB * nL
    # run_attention adds the score MAC list and the context MAC list once per batch element
    c["PIM_MAC_AB"] = t0 * (t2 * math.ceil(t1 / 16) + t1 * math.ceil(t2 / 16)) * nL
    c["PIM_MV_SB"] = math.ceil(nB / 4) * nL * (flush(t2) + t0 * flush(t1))
    c["PIM_SFM"] = T[0][1] * 16
    c["ST"] = 2 * P * nB * nL
    rounds = flush(P)
    c["PIM_BARRIER"] = 16 * (2 + (2 * rounds if mode == "kernel" else 0))
    if mode == "kernel":
        c["LD"] = P * nB * nL
    return c


@pytest.mark.parametrize("shape,tiling", CASES)
@pytest.mark.parametrize("kernel,mode", [("attn_inference", "inference"), ("attn", "kernel")])
def test_attention_trace_counts(shape, tiling, kernel, mode):
    trace = gen_trace("attacc", kernel, tiling)
    assert Counter(n for n, _ in trace) == _expected(tiling, mode)
    names = [n for n, _ in trace]
    # query in before the score; softmax between the score's moves out and the context's moves in;
    # the results written back last
    first_mac, first_sfm = names.index("PIM_MAC_AB"), names.index("PIM_SFM")
    assert names.index("ST") < first_mac < first_sfm < names.index("PIM_MV_GB")
    assert names[-1] == "ST" and names[names.index("PIM_SFM"):].count("PIM_BARRIER") == 16


def test_attention_kernels_are_validated():
    assert validate("attacc", "attn", (1, 32, 128, 512), [[16, 1, 2], [1, 4, 32], [1, 16, 32]])
    with pytest.raises(ValueError, match="no trace generator for hbmpim/attn"):
        validate("hbmpim", "attn", (1, 32, 128, 512), [[16, 1, 2], [1, 4, 32], [1, 16, 32]])
    with pytest.raises(ValueError, match="covers"):
        validate("attacc", "attn_inference", (1, 32, 128, 512), [[16, 1, 1], [1, 4, 32], [1, 16, 32]])


def test_attention_compiled_controller_equals_the_python_one():
    """The fork's softmax (PIM_SFM, channel level) and GEMV-buffer moves (PIM_MV_GB) go through both
    controllers alike; the fused kernel costs more than its score GEMV alone."""
    shape, tiling = (1, 8, 128, 128), ((8, 1, 1), (1, 4, 32), (2, 16, 4))
    compiled = engine._run("attacc", "attn_inference", shape, tiling, True, False, True)
    python = engine._run("attacc", "attn_inference", shape, tiling, True, False, False)
    assert compiled == python
    assert compiled[0] == predict("attacc", "attn_inference", shape, [list(t) for t in tiling])
    assert compiled[4].get("SFM") and compiled[4].get("MVGB")
    assert compiled[0] > predict("attacc", "gemv", shape, [list(t) for t in tiling])
    with pytest.raises(ValueError, match="mode"):
        from pimjax.backends.dcc.traces import gen_attacc_attn
        gen_attacc_attn([list(t) for t in tiling], "training")
