"""AttAcc lowering + value interpreter + timing (`pimjax/lower/attacc.py`,
`pimjax/sim/exec_attacc.py`).

Values: for every op kind AttAcc runs (GEMV, MMTV, batched matmul, GEMM as
a GEMV sequence, im2col convolution, add-reduction, attention score ->
softmax -> context) the baseline draft and a seeded sample of at least 100
drafts of `drafts(op, backend)` (plus mac-mode variants of the lane knob)
are lowered and executed:

* "wide" equals `PimGraph.evaluate` to float32 accuracy:
  |y - ref| <= 1e-5 * (|ref| + sum_k |m_k v_k|)   (rtol 1e-5; the second term
  absorbs the summation-order rounding of outputs that cancel to ~0);
* "backend" (FP16) stays within the bound derived in the lowering's
  docstring: |y - ref| <= (K + 8) 2^-11 sum_k |m_k v_k| (K = reduction
  length); for attention the bound is composed through the softmax (see
  `attention_bound`).

Structure: group broadcast cuts MAC records by the cores-per-group factor
vs bank-level commands; buffer reuse cuts WRGB by the number of output
blocks; resident operands leave the steady state; the baseline command
sequences follow attacc.md's per-head table.  Timing: the rows of
`reference/attacc.csv` within 10 %.
"""
from __future__ import annotations

import csv
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax

import pimjax
from pimjax.backends import baseline
from pimjax.backends.attacc import execute as EA
from pimjax.backends.attacc.attention import lower_attention
from pimjax.backends.attacc.execute import batch_dims, execute_batch
from pimjax.backends.attacc.geometry import TREE
from pimjax.backends.attacc.reference import reference_program
from pimjax.errors import PimCompileError
from pimjax.hw import get_backend, stack_variants
from pimjax.lower import lower
from pimjax.lower.patterns import match_attention
from pimjax.lower.program import Op, side_cache
from pimjax.partition import drafts
from pimjax.partition.dimsets import dimension_sets
from pimjax.partition.verify import matrix_and_vector
from pimjax.sim.cycles import cycles, sweep
from pimjax.sim.execute import execute
from tests.helpers import slow_params

U16 = 2.0 ** -11                    # FP16 unit roundoff
BE = get_backend("attacc", channels=2)   # 2 channels x 64 units: group and core splits, small programs
N_SAMPLE = 100
REFERENCE_CSV = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "shared", "reference", "attacc.csv")


def _graph(fn, *shapes, seed=0):
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    g = pimjax.make_graph(fn, *arrays)
    return g, arrays, {i: v.shape for i, v in enumerate(g.values)}


def _attention(q, K, V):
    s = jnp.einsum("hd,hnd->hn", q, K) / jnp.sqrt(jnp.float32(q.shape[-1]))
    return jnp.einsum("hn,hnd->hd", jax.nn.softmax(s, axis=-1), V)


OPS = {
    "gemv": (lambda W, x: W @ x, [(40, 36), (36,)]),
    "mmtv": (lambda A, x: jnp.einsum("bik,bk->bi", A, x), [(3, 20, 24), (3, 24)]),
    "batched_matmul": (lambda A, B: jnp.matmul(A, B), [(2, 5, 20), (2, 20, 3)]),
    "gemm": (lambda A, B: A @ B, [(10, 28), (28, 3)]),
    "red": (lambda x: jnp.sum(x, axis=1), [(6, 40)]),
    "conv_im2col": (lambda x, k: lax.conv_general_dilated(x, k, (1, 1), "VALID",
                                                          dimension_numbers=("NHWC", "HWIO", "NHWC")),
                    [(1, 5, 5, 2), (3, 3, 2, 3)]),
}


def _sample(table, n, seed):
    rng = np.random.default_rng(seed)
    idx = rng.choice(len(table), size=min(n, len(table)), replace=False)
    return [table[int(i)] for i in sorted(idx)]


def _mac_mode_variants(op, ds, n, shapes):
    """Drafts with the lanes along a matrix-only output variable (mac mode)."""
    outs = list(op.output_vars)
    if op.kind == "contraction":
        mi, vi = matrix_and_vector(op, shapes)
        vvars = set(op.operands[vi].vars)
        outs = [v for v in outs if v in op.operands[mi].vars and v not in vvars]
    return [d.replace(lane_var=outs[-1]) for d in ds[:n]] if outs else []


def _run_all(programs, arrays, dims):
    """Both arithmetics of every program in one batched call."""
    ys = execute_batch(programs + programs, *arrays,
                       arithmetic=["wide"] * len(programs) + ["backend"] * len(programs), dims=dims)
    return [np.asarray(y) for y in ys[:len(programs)]], [np.asarray(y) for y in ys[len(programs):]]


def _check(name, ys_wide, ys_back, ref, mag, K, drafts_):
    wide_tol = 1e-5 * (np.abs(ref) + mag)
    back_tol = (K + 8) * U16 * mag + 1e-30
    for d, yw, yb in zip(drafts_, ys_wide, ys_back):
        assert np.all(np.abs(yw - ref) <= wide_tol), f"{name} wide {d}: {np.abs(yw - ref).max()}"
        assert np.all(np.abs(yb - ref) <= back_tol), f"{name} backend {d}: {np.abs(yb - ref).max()}"


def attention_bound(q, K, V, scale):
    """Per-output FP16 bound composed through the softmax (float64 numpy):
    score errors eps_n = scale (D + 8) u sum_d |q_d k_nd| perturb p_n by at
    most p_n (e^{2 eps} - 1 + u); the context adds (L + 8) u sum_n p_n |v_n|."""
    q, K, V = (np.asarray(a, np.float64) for a in (q, K, V))
    H, L, D = K.shape
    s = np.einsum("hd,hnd->hn", q, K) * scale
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    eps = (scale * (D + 8) * U16 * np.einsum("hd,hnd->hn", np.abs(q), np.abs(K))).max(-1)   # [H]
    dp = np.expm1(2 * eps) + U16
    pv = np.einsum("hn,hnd->hd", p, np.abs(V))
    return dp[:, None] * pv + (L + 8) * U16 * (1 + dp[:, None]) * pv + 1e-30


def _attention_case(H=3, L=24, D=16, seed=7):
    g, arrays, shapes = _graph(_attention, (H, D), (H, L, D), (H, L, D), seed=seed)
    blocks = match_attention(g)
    assert blocks == [tuple(range(6))]
    return g, arrays, shapes, [g.ops[i] for i in blocks[0]]


def _attention_ok(d, sets, n_var, dk_var):
    return all(p.groups == 1 for p, s in zip(d.parts, sets) if n_var in s.vars or dk_var in s.vars)


@pytest.fixture(scope="module")
def lowered():
    """Every op's baseline + sampled drafts, lowered once, and one set of
    padded interpreter dimensions so every batch shares one compile."""
    cases = {}
    for name, (fn, shapes_) in OPS.items():
        g, arrays, shapes = _graph(fn, *shapes_, seed=len(name))
        op = g.ops[0]
        table = drafts(op, BE, shapes=shapes)
        sample = _sample(table, N_SAMPLE, seed=len(name))
        ds = [baseline(op, BE)] + sample + _mac_mode_variants(op, sample, 10, shapes)
        cases[name] = (g, arrays, ds, [lower(op, d, BE, shapes) for d in ds], len(table))
    g, arrays, shapes, ops = _attention_case()
    score = ops[0]
    n_var, dk_var = score.result.index_map[-1].single_var, score.reduction_vars[0]
    sets = dimension_sets(score)
    ok = [d for d in drafts(score, BE, shapes=shapes) if _attention_ok(d, sets, n_var, dk_var)]
    ds = [baseline(score, BE)] + _sample(ok, N_SAMPLE, seed=3)
    cases["attention"] = (g, arrays, ds, [lower_attention(ops, d, BE, shapes) for d in ds], len(ok))
    extra = _special_programs()
    dims = batch_dims([p for c in cases.values() for p in c[3]] + [p for v in extra.values() for p in v])
    return cases, dims, extra


def _special_programs():
    """The GEMV programs the structure tests compare (lowered in the fixture
    so they share the interpreter's compile)."""
    g, arrays, shapes = _graph(*OPS["gemv"][:1], *OPS["gemv"][1])
    op = g.ops[0]
    d = baseline(op, BE)
    one = d.replace(parts=tuple(p.__class__(1, 1) for p in d.parts), reduction="complete")
    return {
        "granularity": [lower(op, d, BE, shapes), lower(op, d.replace(granularity="core"), BE, shapes)],
        "reuse": [lower(op, one, BE, shapes), lower(op, one, BE, shapes, register_reuse=False),
                  lower(op, one.replace(dataflow="is"), BE, shapes, gb_tile=1),
                  lower(op, one.replace(dataflow="os"), BE, shapes, gb_tile=1)],
        "reduction": [lower(op, d, BE, shapes), lower(op, d.replace(reduction="host"), BE, shapes)],
        "resident": [lower(op, d, BE, shapes), lower(op, d, BE, shapes, resident=(0,))],
        "layout": [lower(op, one.replace(dataflow="is"), BE, shapes, gb_tile=1),
                   lower(op, one.replace(dataflow="is"), BE, shapes, gb_tile=1, data_block_layout=False)],
    }


# the heaviest cases (30 s and more each on 2 cores) run with the slow ones (CI runs them)
@pytest.mark.parametrize("name", slow_params(sorted(OPS), {"batched_matmul"}))
def test_values_baseline_and_sampled_drafts(name, lowered):
    cases, dims, _ = lowered
    g, arrays, ds, progs, n_table = cases[name]
    op = g.ops[0]
    assert len(g.ops) == 1
    assert len(ds) >= min(N_SAMPLE, n_table) + 1
    ref = np.asarray(g.evaluate(*arrays))
    mag = np.asarray(g.evaluate(*[np.abs(a) for a in arrays]))          # sum_k |m_k v_k|
    K = int(np.prod([op.extents[v] for v in op.reduction_vars]))
    wide, back = _run_all(progs, arrays, dims)
    _check(name, wide, back, ref, mag, K, ds)


def test_execute_public_path():
    """`pimjax.sim.execute` on a baseline program, both arithmetics."""
    g, arrays, shapes = _graph(*OPS["gemv"][:1], *OPS["gemv"][1])
    op = g.ops[0]
    prog = lower(op, baseline(op, BE), BE, shapes)
    ref = np.asarray(g.evaluate(*arrays))
    mag = np.asarray(g.evaluate(*[np.abs(a) for a in arrays]))
    _check("gemv", [np.asarray(execute(prog, *arrays, arithmetic="wide"))],
           [np.asarray(execute(prog, *arrays, arithmetic="backend"))], ref, mag, 36, [prog.draft])


def test_repeated_execute_reuses_tables_not_values():
    """A program's padded device tables are kept after the first call; a
    second call with other operands must compute with those operands."""
    g, arrays, shapes = _graph(*OPS["gemv"][:1], *OPS["gemv"][1])
    op = g.ops[0]
    prog = lower(op, baseline(op, BE), BE, shapes)
    first = np.asarray(execute(prog, *arrays, arithmetic="wide"))
    assert any(isinstance(k, tuple) and k[0] == "exec_device" for k in side_cache(prog))
    assert not any(isinstance(k, tuple) or str(k).startswith("_exec") for k in prog.meta)   # Program untouched
    other = [a[::-1].copy() * 2.0 for a in arrays]
    again = np.asarray(execute(prog, *other, arithmetic="wide"))
    np.testing.assert_allclose(first, np.asarray(g.evaluate(*arrays)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(again, np.asarray(g.evaluate(*other)), rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------
# attention: score -> softmax -> context as one program
# --------------------------------------------------------------------------
def test_attention_values_baseline_and_sampled_drafts(lowered):
    cases, dims, _ = lowered
    g, arrays, ds, progs, n_ok = cases["attention"]
    q, K, V = arrays
    ref = np.asarray(g.evaluate(*arrays))
    bound = attention_bound(q, K, V, 1.0 / np.sqrt(q.shape[-1]))
    assert progs[0].meta["pipelined"] and len(ds) >= min(N_SAMPLE, n_ok) + 1
    wide, back = _run_all(progs, arrays, dims)
    for d, w, b in zip(ds, wide, back):
        assert np.all(np.abs(w - ref) <= 1e-5 * (np.abs(ref) + np.abs(V).max())), f"wide {d}"
        assert np.all(np.abs(b - ref) <= bound), f"backend {d}: {np.abs(b - ref).max()}"


def test_attention_rejects_split_sequence_and_finds_corpus_block():
    g, arrays, shapes, ops = _attention_case()
    sets = dimension_sets(ops[0])
    n_var = ops[0].result.index_map[-1].single_var
    parts = tuple(p.__class__(2 if n_var in s.vars else 1, 1) for p, s in zip(baseline(ops[0], BE).parts, sets))
    with pytest.raises(PimCompileError, match="one channel"):
        lower_attention(ops, baseline(ops[0], BE).replace(parts=parts), BE, shapes)
    from tests.corpus import CORPUS
    name, fn, args = next(c for c in CORPUS if c[0] == "gpt_decode_attention")
    gg = pimjax.make_graph(fn, *args())
    assert len(match_attention(gg)) == 1
    name, fn, args = next(c for c in CORPUS if c[0] == "softmax")
    assert match_attention(pimjax.make_graph(fn, *args())) == []


def test_attacc_rejects_what_its_units_cannot_run():
    g, arrays, shapes = _graph(lambda x: jnp.max(x, axis=1), (4, 32))
    with pytest.raises(PimCompileError):
        lower(g.ops[0], baseline(g.ops[0], get_backend("hbm-pim")), BE, shapes)
    g, arrays, shapes = _graph(lambda a, b: a + b, (64,), (64,))
    assert baseline(g.ops[0], BE) is None
    with pytest.raises(PimCompileError):
        lower(g.ops[0], baseline(g.ops[0], get_backend("hbm-pim")), BE, shapes)


# --------------------------------------------------------------------------
# structure: broadcast vs bank-level commands, buffer reuse, residency
# --------------------------------------------------------------------------
def _count(program, *ops):
    o, n = np.asarray(program.commands.op)[0], np.asarray(program.commands.n)[0]
    return int(sum(int((n[o == int(x)] > 0).sum()) for x in ops))


def _columns(program, *ops):
    o, n = np.asarray(program.commands.op)[0], np.asarray(program.commands.n)[0]
    return int(sum(int(n[o == int(x)].sum()) for x in ops))


def test_group_broadcast_cuts_mac_records_by_cores_per_group(lowered):
    _, dims, extra = lowered
    bc, pc = extra["granularity"]
    C = bc.draft.cores_used
    assert C == 64
    assert _count(pc, Op.MACBK) == C * _count(bc, Op.MACAB)
    assert _columns(pc, Op.MACBK) == C * _columns(bc, Op.MACAB)
    # buffer loads: one WRGB per unit and row instead of one per pCH and row
    assert _count(pc, Op.WRGB) > _count(bc, Op.WRGB)
    g, arrays, _ = _graph(*OPS["gemv"][:1], *OPS["gemv"][1])
    y = execute_batch([bc, pc], *arrays, arithmetic="wide", dims=dims)
    np.testing.assert_allclose(np.asarray(y[0]), np.asarray(y[1]), rtol=1e-5, atol=1e-5)


def test_buffer_reuse_cuts_wrgb_by_output_blocks(lowered):
    _, dims, extra = lowered
    reuse, fresh, is_, os_ = extra["reuse"]                 # 40 outputs, K = 36 (3 entries), one unit
    gp = reuse.meta["gemv"]
    assert (gp.t_in, gp.t_out) == (1, 3)                    # one input tile, 3 blocks of 16 outputs
    assert _columns(fresh, Op.WRGB) == gp.t_out * _columns(reuse, Op.WRGB)
    # input-stationary with several tiles writes every tile once per vector,
    # output-stationary once per output block
    assert is_.meta["gemv"].t_in == 3
    assert _columns(os_, Op.WRGB) == os_.meta["gemv"].t_out * _columns(is_, Op.WRGB)
    g, arrays, _ = _graph(*OPS["gemv"][:1], *OPS["gemv"][1])
    y = execute_batch([reuse, fresh, is_, os_], *arrays, arithmetic="wide", dims=dims)
    for yy in y[1:]:
        np.testing.assert_allclose(np.asarray(yy), np.asarray(y[0]), rtol=1e-5, atol=1e-5)


def test_data_block_layout_follows_the_dataflow(lowered):
    _, dims, extra = lowered
    matched, host_order = extra["layout"]                   # input-stationary over 3 tiles x 3 blocks
    rows = lambda p: _count(p, Op.ACTAB)                    # noqa: E731  (one all-bank ACT per row opened)
    assert rows(matched) == -(-matched.meta["gemv"].v_total // 32) < rows(host_order)
    assert float(cycles(matched, BE).kernel_cycles) < float(cycles(host_order, BE).kernel_cycles)
    g, arrays, _ = _graph(*OPS["gemv"][:1], *OPS["gemv"][1])
    y = execute_batch([matched, host_order], *arrays, arithmetic="wide", dims=dims)
    np.testing.assert_allclose(np.asarray(y[0]), np.asarray(y[1]), rtol=1e-5, atol=1e-5)


def test_resident_operands_leave_the_steady_state(lowered):
    _, dims, extra = lowered
    plain, res = extra["resident"]
    r = np.asarray(res.commands.resident)[0]
    o = np.asarray(res.commands.op)[0]
    placement = (Op.WR, Op.WR_S)                            # streamed when the banks span bank groups
    assert np.all(np.isin(o[r == 1], placement))
    assert (r == 1).sum() == sum(_count(plain, op) for op in placement)
    assert res.stats.rearrange_bytes == 0 and res.stats.resident_bytes == plain.stats.rearrange_bytes
    cp, cr = cycles(plain, BE), cycles(res, BE)
    assert float(cr.rearrangement) < float(cp.rearrangement)
    assert float(cr.resident_cycles) > 0
    # the kernel no longer waits for (nor closes the rows of) the host's placement writes
    assert float(cr.kernel_cycles) <= float(cp.kernel_cycles)
    g, arrays, _ = _graph(*OPS["gemv"][:1], *OPS["gemv"][1])
    y = execute_batch([res], *arrays, arithmetic="wide", dims=dims)[0]
    np.testing.assert_allclose(np.asarray(y), arrays[0] @ arrays[1], rtol=1e-5, atol=1e-4)


def test_group_reduction_merges_partials_in_the_channel(lowered):
    _, dims, extra = lowered
    grp, host = extra["reduction"]                          # k split over the 4 banks of a bank group
    assert grp.draft.reduction == "group"
    assert host.stats.readback_bytes == 4 * grp.stats.readback_bytes
    g, arrays, _ = _graph(*OPS["gemv"][:1], *OPS["gemv"][1])
    y = execute_batch([grp, host], *arrays, arithmetic="wide", dims=dims)
    np.testing.assert_allclose(np.asarray(y[0]), np.asarray(y[1]), rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------
# the reference's command sequences (attacc.md per-head table)
# --------------------------------------------------------------------------
@pytest.mark.parametrize("level", ["bank", "bg", "buffer"])
def test_baseline_attention_follows_the_per_head_table(level):
    H, D, L = 16, 128, 512
    prog, be = reference_program({"variant": f"{level}-pc", "kernel": "attention", "shape": f"h{H}_d{D}_L{L}",
                                  "channels": 16, "refresh": "yes"})
    c = lambda *ops: _columns(prog, *ops)                           # noqa: E731  (per channel: one head)
    cd = lambda a, b: -(-a // b)                                    # noqa: E731
    if level == "bank":
        want = dict(WRGB=D // 16, MAC=2 * cd(L, 16) * cd(D, 64), MVSB=8 * cd(L, 256) + 8 * cd(D, 64),
                    MVGB=8 * cd(L, 256))
    elif level == "bg":
        want = dict(WRGB=cd(D, 16), MAC=2 * cd(L, 16) * cd(D, 16), MVSB=8 * cd(L, 256) + 2 * cd(D, 16),
                    MVGB=8 * cd(L, 256))
    else:
        want = dict(WRGB=cd(D, 16), MAC=2 * cd(L, 2) * cd(D, 16), MVSB=cd(L, 32) + cd(D, 16), MVGB=cd(L, 32))
    got = dict(WRGB=c(Op.WRGB), MAC=c(Op.MACAB, Op.MACSB, Op.MACPB), MVSB=c(Op.MVSB), MVGB=c(Op.MVGB))
    assert got == want
    assert c(Op.SFM) == 1
    if level == "bank":       # one 1 KB row = 32 MACABs, then PREA, ACTAB
        assert c(Op.ACTAB) == c(Op.MACAB) // 32 and c(Op.PREA) == c(Op.ACTAB) - 1


def test_baseline_gemv_follows_the_extension():
    N = K = 1024
    prog, be = reference_program({"variant": "bank-pc", "kernel": "gemv", "shape": f"{N}x{K}",
                                  "channels": 16, "refresh": "yes"})
    rows_per_bg = N // 16 // 16                             # N over 16 channels, then 16 bank groups
    assert _columns(prog, Op.WRGB) == K // 16
    assert _columns(prog, Op.MACAB) == rows_per_bg * K // 64
    assert _columns(prog, Op.MVSB) == 8 * -(-rows_per_bg // 16)     # 8 MVSBs per 16 rows of a bank group


# --------------------------------------------------------------------------
# timing: the reference figures
# --------------------------------------------------------------------------
def test_reference_rows_within_ten_percent():
    with open(REFERENCE_CSV) as f:
        rows = [r for r in csv.DictReader(f) if r["backend"] == "attacc" and r["metric"] == "pim"]
    assert len(rows) >= 7
    built = [reference_program(r) for r in rows]
    progs = [p for p, _ in built]
    # one compile: every row's timing as a variant of one sweep (same static geometry)
    timings = stack_variants([be.timing for _, be in built])
    rep = sweep(progs, timings, built[0][1])
    ours = np.asarray(rep.kernel_cycles)[np.arange(len(rows)), np.arange(len(rows))]
    theirs = np.array([float(r["cycles"]) for r in rows])
    err = np.abs(ours - theirs) / theirs
    assert np.all(err < 0.10), dict(zip([r["shape"] for r in rows], np.round(err, 3)))


# --------------------------------------------------------------------------
# the interpreter's own structure: MAC-run segments and the value buffer
# --------------------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 1), st.integers(0, 40), st.integers(0, 40)),
                min_size=1, max_size=200))
def test_segments_cover_the_steps_in_order(steps):
    """Every step is in exactly one segment, in order; a MAC segment is at
    most RUN steps of one mode (its kind says which), an RDACC segment at
    most RUN reads of distinct accumulator rows into distinct host rows,
    anything else one step of its own kind; runs are cut only when they
    must be."""
    kind, mode, sbrow, hrow = (np.array(c, np.int32) for c in zip(*steps))
    seg = EA._segments(kind, mode, sbrow, hrow)
    ends = seg["start"] + seg["len"]
    assert seg["start"][0] == 0 and ends[-1] == len(kind) and np.all(ends[:-1] == seg["start"][1:])
    for k, s, n in zip(seg["kind"], seg["start"], seg["len"]):
        part = slice(s, s + n)
        nxt = s + n if s + n < len(kind) else None
        if k in (EA.K_MAC, EA.K_TREE):
            assert 1 <= n <= EA.RUN and np.all(kind[part] == EA.K_MAC)
            assert np.all(mode[part] == mode[s]) and (k == EA.K_TREE) == (mode[s] == TREE)
            if n < EA.RUN and nxt is not None:
                assert kind[nxt] != EA.K_MAC or mode[nxt] != mode[s]
        elif k == EA.K_RDACC:
            assert 1 <= n <= EA.RUN and np.all(kind[part] == EA.K_RDACC)
            assert len(set(sbrow[part])) == n and len(set(hrow[part])) == n
            if n < EA.RUN and nxt is not None:
                assert kind[nxt] != EA.K_RDACC or sbrow[nxt] in sbrow[part] or hrow[nxt] in hrow[part]
        else:
            assert n == 1 and kind[s] == k


def test_side_rows_give_the_row_gathers_values(monkeypatch):
    """Bank columns whose lanes are not one 16-wide slice of the value buffer
    (padding lanes, e.g.) are copied into side rows when the buffer is
    packed; the others are read as slices.  Forcing every column down the
    side path must leave the results bit for bit unchanged, and right."""
    g, arrays, shapes, ops = _attention_case()
    gg, garrays, gshapes = _graph(*OPS["gemv"][:1], *OPS["gemv"][1])
    cases = [(g, lambda: lower_attention(ops, baseline(ops[0], BE), BE, shapes), arrays),
             (gg, lambda: lower(gg.ops[0], baseline(gg.ops[0], BE), BE, gshapes), garrays)]
    want, natural = [], []
    for _, make, a in cases:
        prog = make()
        want.append([np.asarray(execute(prog, *a, arithmetic=m)) for m in ("wide", "backend")])
        natural.append(EA._prepare(prog)["side"].shape[0])

    def all_side(code):
        n = code.shape[0] * code.shape[1]
        return -1 - np.arange(n).reshape(code.shape[:2]), code.reshape(n, -1).astype(np.int64)

    monkeypatch.setattr(EA, "_slot_rows", all_side)
    for (graph, make, a), w, n_nat in zip(cases, want, natural):
        prog = make()                                    # fresh: no cached tables
        got = [np.asarray(execute(prog, *a, arithmetic=m)) for m in ("wide", "backend")]
        assert EA._prepare(prog)["side"].shape[0] == EA._prepare(prog)["base"].size > n_nat
        ref = np.asarray(graph.evaluate(*a))
        np.testing.assert_allclose(got[0], ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
        for x, y in zip(got, w):
            np.testing.assert_array_equal(x, y)


# --------------------------------------------------------------------------
# one K / V partition per head (the reference's trace generator)
# --------------------------------------------------------------------------
def _attention_block(H, D, L, channels):
    be = get_backend("attacc", variant="bank-npc", channels=channels)
    f32 = jnp.float32
    g = pimjax.make_graph(_attention, jax.ShapeDtypeStruct((H, D), f32), jax.ShapeDtypeStruct((H, L, D), f32),
                                jax.ShapeDtypeStruct((H, L, D), f32))
    ops = [g.ops[i] for i in match_attention(g)[0]]
    return be, ops, {i: v.shape for i, v in enumerate(g.values)}


def test_head_rows_cost_one_row_switch_per_head_and_phase():
    """At L = 128 a head's K (and V) is 16 columns of each bank: packed, two
    pipelined heads share one 1 KB row per phase; with `head_rows` (AttAcc's
    generator: one partition per head) each head opens its own, one more row
    switch per phase and pair: PREA tRTP_L after the last MAC, ACTAB tRP
    later, the next MAC tRCD after it, instead of tCCD_AB after the last MAC.
    The generator's pair loop gives the second head the first head's context
    addresses (its open row): the reference program (`trace_generator_pairs`)
    pays only the score phase's switch."""
    be, ops, shapes = _attention_block(32, 128, 128, 16)          # 2 heads per channel: one pair
    d = baseline(ops[0], be)
    t = be.timing

    def kc(**o):
        return float(cycles(lower_attention(ops, d, be, shapes, resident=(1, 2), **o), be).kernel_cycles)
    packed, rows, ref = kc(), kc(head_rows=True), kc(head_rows=True, trace_generator_pairs=True)
    switch = t.tRTP_L + t.tRP + t.tRCDRD - t.tCCD_AB
    assert rows - packed == 2 * switch
    assert ref - packed == switch
    prog, _ = reference_program({"variant": "bank-npc", "kernel": "attention", "shape": "h32_d128_L128",
                                 "channels": 16, "refresh": "yes"})
    assert float(cycles(prog, be).kernel_cycles) == ref


def test_head_rows_values():
    """Row-aligned heads (`head_rows`) compute the same attention."""
    g, arrays, shapes, ops = _attention_case()
    prog = lower_attention(ops, baseline(ops[0], BE), BE, shapes, head_rows=True)
    assert prog.meta["pipelined"]
    ref = np.asarray(g.evaluate(*arrays))
    got = np.asarray(execute(prog, *arrays, arithmetic="wide"))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * float(np.abs(arrays[2]).max()))


def test_an_attention_draft_of_more_units_than_the_backend_has_is_refused():
    """A block is lowered by the family directly (not through `lower`'s checks): a draft tuned for 64
    bank-level units per channel, lowered for 16 bank-group units, is a PimCompileError (it used to
    index past the placement tables)."""
    import jax
    import jax.numpy as jnp

    import pimjax
    from pimjax.backends import family_of
    from pimjax.errors import PimCompileError
    from pimjax.models.layers import decode_attention

    def attention(q, k_cache, v_cache):
        return decode_attention(q, k_cache, v_cache, 1)

    S = jax.ShapeDtypeStruct
    args = (S((1, 4, 64), jnp.float16), S((1, 4, 256, 64), jnp.float16), S((1, 4, 256, 64), jnp.float16))
    bank = pimjax.hw.get_backend("attacc", variant="bank-pc", stacks=1)
    c = pimjax.pim_jit(attention, backend=bank, resident=("k_cache", "v_cache")).lower(*args).compile()
    (p,) = [q for q in c.plans if q.block]
    cores = int(np.prod([d.cores for d in p.draft.parts]))
    bg = pimjax.hw.get_backend("attacc", variant="bg-pc", stacks=1)
    assert cores > bg.cores_per_group          # the bank-level pick uses more units than a bank-group channel has
    pr = p.proposal
    with pytest.raises(PimCompileError, match="cores per group"):
        family_of(bg).lower_block(p.choice.program.meta["block_ops"], p.draft, bg, pr.shapes, **pr.lower_options)


def test_small_programs_share_one_interpreter_size():
    """Small programs of different shapes pad to the one `SMALL` size class
    (one compiled interpreter) and still compute jnp's values; a program
    past any of the class's dimensions keeps its own power-of-two buckets."""
    from pimjax.backends.attacc import execute as ax
    from pimjax.costmodel.kernels import lower_case, make_case
    from pimjax.sim.execute import execute
    be = get_backend("attacc", channels=2)
    rng = np.random.default_rng(0)
    dims = []
    for kernel, shape in (("gemv", [64, 48]), ("gemv", [31, 17]), ("red", [5, 1000])):
        case = make_case(be, kernel, shape)
        prog = lower_case(case, baseline(case.op, be), be)
        need = ax._buckets([ax._prepare(prog)])
        assert all(need[k] <= v for k, v in ax.SMALL.items())
        dims.append(ax._dims([ax._prepare(prog)]))
        args = [rng.standard_normal(s).astype(np.float32) for s in
                ([shape, shape[1:]] if kernel == "gemv" else [shape])]
        want = args[0] @ args[1] if kernel == "gemv" else args[0].sum(-1)
        np.testing.assert_allclose(np.asarray(execute(prog, *args, arithmetic="wide")), want, rtol=1e-5, atol=1e-4)
    assert dims[0] == dims[1] == dims[2] and all(dims[0][k] == v for k, v in ax.SMALL.items())
    case = make_case(be, "gemv", [512, 256])            # 131 072 operand elements: past SMALL["V"]
    big = ax._prepare(lower_case(case, baseline(case.op, be), be))
    assert ax._buckets([big])["V"] > ax.SMALL["V"] and ax._dims([big]) == ax._buckets([big])
