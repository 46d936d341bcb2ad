"""AttAcc's compiled GEMV record assembly (`backends/attacc/native.py`)
against the Python form it replaces on hot paths (`_gemv_program(...,
use_native=False)`), and the vectorised placement against a loop over banks."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pimjax.backends.attacc import geometry as G
from pimjax.backends.attacc import lower as L
from pimjax.backends.attacc import native
from pimjax.backends.attacc import stream as S
from pimjax.costmodel.kernels import case_drafts, make_case
from pimjax.errors import PimCompileError
from pimjax.hw import get_backend
from pimjax.lower.layout import value_shapes
from pimjax.lower.program import RECORD_FIELDS, Op, Phase, bank_order, streamed

CASES = [("bank-pc", "gemv", (1000, 200)), ("bank-pc", "gemv", (1024, 512)), ("bg-npc", "mmtv", (2, 8, 100, 64)),
         ("buffer-pc", "gemv", (1024, 512)), ("bank-pc", "red", (4, 2048)), ("bank-pc", "gemm", (16, 64, 32))]


def _lowered(case, draft, be, use_native):
    try:
        return L._gemv_program(case.op, draft, be, value_shapes(case.op, case.shapes), dict(G.DEFAULT_OPTIONS),
                               use_native=use_native)
    except PimCompileError as err:
        return err


@pytest.mark.parametrize("variant,kernel,shape", CASES)
def test_compiled_gemv_program_equals_the_python_form(variant, kernel, shape):
    be = get_backend("attacc", variant=variant)
    case = make_case(be, kernel, shape)
    table = case_drafts(case, be)
    compared = 0
    for i in np.unique(np.linspace(0, len(table) - 1, 12).astype(int)):
        a, b = (_lowered(case, table[int(i)], be, flag) for flag in (True, False))
        if isinstance(a, Exception) or isinstance(b, Exception):
            assert type(a) is type(b) and str(a) == str(b)
            continue
        compared += 1
        for f in RECORD_FIELDS:
            np.testing.assert_array_equal(np.asarray(getattr(a.commands, f)), np.asarray(getattr(b.commands, f)),
                                          err_msg=f)
        for k in ("route_src", "route_dst", "readback_map"):
            x, y = np.asarray(a.meta[k]), np.asarray(b.meta[k])
            assert x.dtype == y.dtype and x.shape == y.shape, k
            np.testing.assert_array_equal(x, y, err_msg=k)
        assert a.meta["sb_rows"] == b.meta["sb_rows"]
        np.testing.assert_array_equal(a.host_data[0], b.host_data[0])
        assert a.host_data[0].dtype == b.host_data[0].dtype
        assert a.stats == b.stats
        for la, lb in zip(a.layouts, b.layouts):
            np.testing.assert_array_equal(np.asarray(la.positions), np.asarray(lb.positions))
    assert compared >= 4


def _placement_loop(geo, layout_id, v_total, row_base, cores, resident):
    """The placement as a loop (the former Python form): runs per bank row,
    per bank its runs core by core, banks interleaved in bank_order."""
    v = np.arange(v_total)
    bic, row, col = geo.address(v)
    row = row + row_base
    order = np.lexsort((col, row, bic))
    bic, row, col = bic[order], row[order], col[order]
    brk = np.ones(len(v), bool)
    brk[1:] = (bic[1:] != bic[:-1]) | (row[1:] != row[:-1]) | (col[1:] != col[:-1] + 1)
    starts = np.nonzero(brk)[0]
    lens = np.diff(np.append(starts, len(v)))
    runs = [(int(bic[s]), int(row[s]), int(col[s]), int(n)) for s, n in zip(starts, lens)]
    per_bank: dict = {}
    for c in range(cores):
        for r in runs:
            per_bank.setdefault(int(geo.core_base(c)) + r[0], []).append((c,) + r[1:])
    banks = bank_order(per_bank, geo.banks_per_bg)
    code = streamed(Op.WR, banks, geo.banks_per_bg)
    out = []
    for k in range(max((len(x) for x in per_bank.values()), default=0)):
        for bk in banks:
            if k < len(per_bank[bk]):
                c, rw, cl, n = per_bank[bk][k]
                out.append((int(code), bk, rw, cl, n, int(Phase.REARRANGE), 0, 0, layout_id, 0, 0, c, int(resident), 0))
    return out


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["bank-pc", "bg-npc", "buffer-pc"]), st.integers(0, 3000), st.integers(0, 40),
       st.integers(1, 64), st.booleans())
def test_placement_equals_the_loop_over_banks(variant, v_total, row_base, cores, resident):
    geo = G.Geometry.of(get_backend("attacc", variant=variant))
    cores = min(cores, geo.cores)
    em = S.Emitter(geo, "broadcast", G.Tables(cores, 1), cores)
    S.place_matrix(em, geo, 1, v_total, row_base, cores, resident)
    got = em.b.build()
    want = _placement_loop(geo, 1, v_total, row_base, cores, resident)
    assert [tuple(int(got[f][r]) for f in RECORD_FIELDS) for r in range(len(got["op"]))] == want


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 2**31), st.integers(1, 3), st.integers(1, 5), st.integers(1, 9), st.integers(1, 4))
def test_host_ids_number_rows_by_first_request(seed, G, K, E, KI):
    """`native.host_ids` against a dict over row contents, in the loads' order."""
    rng = np.random.default_rng(seed)
    C, n_b, n_v = int(rng.integers(1, 6)), int(rng.integers(1, 3)), int(rng.integers(1, 3))
    vidx = rng.integers(-2, 3, (G, K, n_b, n_v, E, 16)).astype(np.int64)     # few values: many equal rows
    vidx[:, :, :, :, ::2] = vidx[:, :1, :1, :1, :1]                          # ... and some identical ones
    ucls = rng.integers(0, K, C).astype(np.int64)
    ids, rep, ok = native.host_ids(vidx, ucls, KI)
    assert ok
    seen: dict = {}
    want = np.full((C, n_b, n_v, E), -1)
    for b in range(n_b):
        for v in range(n_v):
            for i in range(-(-E // KI)):
                for c in range(C):
                    for e in range(KI * i, min(E, KI * i + KI)):
                        want[c, b, v, e] = seen.setdefault(vidx[:, ucls[c], b, v, e].tobytes(), len(seen))
    np.testing.assert_array_equal(ids, want)
    assert len(rep) == len(seen)
    for k, (u, b, v, e) in enumerate(rep):
        assert seen[vidx[:, u, b, v, e].tobytes()] == k


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 2**31), st.sampled_from(["bank-pc", "bg-npc", "buffer-pc"]), st.integers(1, 64),
       st.integers(1, 8), st.integers(1, 6))
def test_compiled_load_commands_equal_the_loop(seed, variant, C, k, values):
    """`_load_commands` by `native.load_commands` vs its loop (shared rows per pCH)."""
    geo = G.Geometry.of(get_backend("attacc", variant=variant))
    C = min(C, geo.cores)
    rng = np.random.default_rng(seed)
    entries = rng.permutation(16)[:k] + int(rng.integers(0, 3))
    need = {c: [(int(rng.integers(0, values)), int(d)) for d in entries] for c in range(C)}
    got = S.load_commands(geo, need, "broadcast", C)
    want = S.load_commands(geo, need, "broadcast", C, compiled=False)
    assert len(got) == len(want)
    for (b1, s1, d1), (b2, s2, d2) in zip(got, want):
        assert b1 == b2
        np.testing.assert_array_equal(s1, s2)
        np.testing.assert_array_equal(d1, d2)
