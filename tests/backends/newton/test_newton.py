"""Newton / AiM: lowering (lower/newton.py), value interpreter
(sim/exec_newton.py), timing on the cycle scan, and the baseline mapping.

Values: every op kind Newton runs (GEMV, MMTV, batched matmul, GEMM as a
GEMV sequence, 1x1 and 3x3 convolutions through the frontend's im2col
contraction), traced from jnp, for the baseline draft and a seeded sample of
the partitioner's drafts, against the jnp reference:

* arithmetic="wide" (float32 everywhere): |y - ref| <= 1e-5 |ref| + 1e-5 S,
  S = sum_r |M_r v_r| per output (float32 rtol 1e-5; the S term is the same
  relative tolerance on the summands, where a sum cancels);
* arithmetic="backend" (bf16 operands, float32 products / tree / latches):
  with u = 2^-8 the unit roundoff of bf16 (8 significand bits) and
  g_K = K 2^-24 / (1 - K 2^-24) the float32 summation bound for K terms,
  rounding both operands gives |M~ v~ - M v| <= (2u + u^2) |M v| (the product
  of two bf16 values is exact in float32), and any order of float32
  additions of K terms (tree, latch, host merge) adds <= g_K sum |M~ v~|;
  the reference itself is a float32 sum (another g_K S).  So
      |y - ref| <= (2u + u^2 + 2 g_K (1 + u)^2) S.
"""
from __future__ import annotations

import dataclasses
import functools
import zlib

import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import pimjax
from pimjax.backends import baseline
from pimjax.errors import PimCompileError
from pimjax.hw import get_backend
from pimjax.lower import Op, lower
from pimjax.lower.program import RECORD_FIELDS, Records
from pimjax.partition import DimPart, Draft, drafts
from pimjax.partition.verify import verify
from pimjax.sim.cycles import cycles
from pimjax.sim.execute import execute
from tests.helpers import slow_params
from tests.partition import helpers as H

BE = get_backend("newton")
U_BF16 = 2.0 ** -8


def _conv(x, k):
    return lax.conv_general_dilated(x, k, (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"))


# name -> (jnp function, operand shapes); reductions > 512 exercise several
# input chunks, small ones several segments per DRAM row
CASES = {
    "gemv": (lambda W, x: W @ x, [(40, 1100), (1100,)]),
    "mmtv": (lambda A, x: jnp.einsum("bik,bk->bi", A, x), [(3, 10, 200), (3, 200)]),
    "batched_matmul": (lambda A, B: jnp.matmul(A, B), [(3, 6, 130), (3, 130, 5)]),
    "gemm": (lambda A, B: A @ B, [(24, 600), (600, 6)]),
    "conv1x1": (_conv, [(1, 6, 6, 40), (1, 1, 40, 12)]),
    "conv3x3": (_conv, [(1, 7, 7, 8), (3, 3, 8, 6)]),
}


@functools.lru_cache(maxsize=None)
def case(name: str):
    """(op, operand arrays in op order, reference, S = sum |M v|, K = reduction length)."""
    fn, shapes = CASES[name]
    rng = np.random.default_rng(zlib.crc32(name.encode()))     # not hash(): PYTHONHASHSEED varies per process
    args = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    graph = pimjax.make_graph(fn, *args)
    (op,) = [o for o in graph.ops if o.kind == "contraction"]
    by_value = dict(zip(graph.inputs, args))
    operands = [by_value[a.value] for a in op.operands]
    ref = np.asarray(fn(*args))
    scale = np.asarray(fn(*[np.abs(a) for a in args]))
    K = int(np.prod([op.extents[v] for v in op.reduction_vars]))
    return op, operands, ref, scale, K


def close(y, ref, S, msg="") -> None:
    """float32 rtol 1e-5 on the result and on the summands' magnitude S."""
    assert y.shape == ref.shape and np.isfinite(y).all(), msg
    np.testing.assert_array_less(np.abs(y - ref), 1e-5 * np.abs(ref) + 1e-5 * S + 1e-30, err_msg=msg)


def check_values(prog, name: str, backend_too: bool = True) -> None:
    op, operands, ref, S, K = case(name)
    y = np.asarray(execute(prog, *operands, arithmetic="wide"))
    close(y, ref, S, f"wide {name} {prog.draft}")
    if backend_too:
        yb = np.asarray(execute(prog, *operands, arithmetic="backend"))
        g = K * 2.0 ** -24 / (1 - K * 2.0 ** -24)
        bound = (2 * U_BF16 + U_BF16 ** 2 + 2 * g * (1 + U_BF16) ** 2) * S
        assert np.isfinite(yb).all()
        np.testing.assert_array_less(np.abs(yb - ref), bound * (1 + 1e-6) + 1e-30,
                                     err_msg=f"backend {name} {prog.draft}")


def sample(name: str, n: int, seed: int = 0):
    op = case(name)[0]
    table = drafts(op, BE)
    idx = np.random.default_rng(seed).choice(len(table), size=min(n, len(table)), replace=False)
    return [table[int(i)] for i in idx]


# --------------------------------------------------------------------------
# values
# --------------------------------------------------------------------------
# the heaviest cases (30 s and more each on 2 cores) run with the slow ones (CI runs them)
@pytest.mark.parametrize("name", slow_params(list(CASES), {"gemv"}))
def test_baseline_draft(name):
    op = case(name)[0]
    d = baseline(op, BE)
    assert d is not None and verify(op, d, BE) == ""
    assert d.buffers == 1 and d.granularity == "broadcast" and d.reduction == "complete"
    # the reduction stays whole in a bank: only output sets are spread
    assert d.groups_used * d.cores_used > 1
    check_values(lower(op, d, BE), name)


@pytest.mark.parametrize("name", list(CASES))
def test_sampled_drafts(name):
    for d in sample(name, 10, seed=1):
        check_values(lower(case(name)[0], d, BE), name)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_hundred_drafts(name):
    """A seeded sample of 100 of the partitioner's drafts per op."""
    for d in sample(name, 100, seed=2):
        check_values(lower(case(name)[0], d, BE), name)


# the corpus functions whose graphs hold a contraction
CORPUS_CONTRACTIONS = ["gemv", "gemv_bias_relu", "gemm", "batched_matmul", "attn_scores", "attn_context",
                       "ttv", "mmtv", "cinm_abcd", "cinm_ab", "cinm_abc", "bf16_matmul", "mlp2", "gelu_mlp",
                       "nested_calls", "gpt_decode_attention", "conv1x1_nhwc", "conv3x3_nhwc", "conv3x3_nchw",
                       "depthwise_conv", "grouped_conv_relu", "strided_dilated_conv", "transposed_conv"]


@pytest.mark.slow
@pytest.mark.parametrize("name", CORPUS_CONTRACTIONS)
def test_corpus_contractions(name):
    """Every contraction the frontend makes of the test corpus (epilogues,
    attention, CINM's, bf16 inputs, strided / dilated / transposed / grouped
    convolutions; the graph's shapes passed to `lower`) runs on Newton:
    baseline + 2 sampled drafts, wide values."""
    import jax

    from pimjax.trace.evaluate import evaluate_op
    from tests import corpus
    fn, make = {n: (f, m) for n, f, m in corpus.CORPUS}[name]
    args = make()
    graph = pimjax.make_graph(fn, *args)
    env = dict(zip(graph.inputs, [jnp.asarray(x) for x in jax.tree_util.tree_leaves(args)]))
    env.update({v: jnp.asarray(c) for v, c in graph.constants.items()})
    shapes = {v: info.shape for v, info in enumerate(graph.values)}
    ran = 0
    for op in graph.ops:
        operands = [env[a.value] for a in op.operands]
        outs = evaluate_op(graph, op, operands)
        env.update({r.value: v for r, v in zip(op.results, outs)})
        if op.kind != "contraction":
            continue
        ref = np.asarray(outs[0], np.float32)
        mags = [jnp.abs(x.astype(jnp.float32)) if jnp.issubdtype(x.dtype, jnp.floating) else x for x in operands]
        S = np.abs(np.asarray(evaluate_op(graph, dataclasses.replace(op, epilogue=None), mags)[0], np.float32))
        table = drafts(op, BE, shapes=shapes)
        idx = np.random.default_rng(7).choice(len(table), size=min(2, len(table)), replace=False)
        for d in [baseline(op, BE)] + [table[int(i)] for i in idx]:
            y = np.asarray(execute(lower(op, d, BE, shapes=shapes), *operands, arithmetic="wide"), np.float32)
            if op.epilogue is None:
                close(y, ref, S, f"{name} {d}")
            else:                                # the epilogue (bias, ReLU, ...) runs on the host
                np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))
        ran += 1
    assert ran


@pytest.mark.parametrize("name", ["conv1x1", "conv3x3"])
def test_either_operand_in_the_banks_keeps_values(name):
    """`matrix=` puts either operand in the banks: on conv1x1 the activations
    are the larger operand (the default matrix) and the filter the smaller,
    on conv3x3 the reverse; both placements execute to jnp's values, and
    the default is the larger operand."""
    op, operands, ref, S, K = case(name)
    sizes = [a.size for a in operands]
    larger = op.body_operands[0] if sizes[op.body_operands[0]] >= sizes[op.body_operands[1]] else op.body_operands[1]
    d = baseline(op, BE)
    assert lower(op, d, BE).meta["M"] == larger
    for m in op.body_operands[:2]:
        for dr in [d] + sample(name, 4, seed=5):
            prog = lower(op, dr, BE, matrix=m)
            assert prog.meta["M"] == m and prog.meta["v"] != m
            check_values(prog, name, backend_too=False)
    with pytest.raises(ValueError, match="matrix"):
        lower(op, d, BE, matrix=len(op.operands))


def test_operand_shapes_are_checked():
    op, operands, ref, S, K = case("gemv")
    prog = lower(op, baseline(op, BE), BE)
    with pytest.raises(TypeError, match="shape"):
        execute(prog, operands[0][:, :-1], operands[1][:-1], arithmetic="wide")


@pytest.mark.parametrize("option", ["register_reuse", "data_block_layout", "channel_parallel"])
@pytest.mark.parametrize("name", ["gemv", "conv1x1"])
def test_options_off_keep_values(name, option):
    op = case(name)[0]
    for d in [baseline(op, BE)] + sample(name, 3, seed=3):
        check_values(lower(op, d, BE, **{option: False}), name, backend_too=False)


def test_data_block_layout_aligns_segments_to_rows():
    """Input-stationary GEMV, 1100 inputs per output = 69 columns in chunks of
    32, 32, 5.  Blocked, every chunk segment sits in one DRAM row in the order
    the loop visits them: one G_ACT per (chunk, output).  Off, the tile is in
    host order (output-major, 69 columns per output), so segments straddle
    rows and the chunk-outer loop jumps between outputs: more activations
    for the same COMPs."""
    op = H.gemv(16 * 4, 1100)
    d = Draft((DimPart(1, 16, 0), DimPart(1, 1, 0)), lane_var="k", dataflow="is")
    on, off = lower(op, d, BE), lower(op, d, BE, data_block_layout=False)
    assert on.stats.commands["COMP"] == off.stats.commands["COMP"] == 4 * 69
    assert on.stats.commands["G_ACT"] == 4 * 3
    assert off.stats.commands["G_ACT"] > on.stats.commands["G_ACT"]
    runs = np.asarray(on.commands.n)[np.asarray(on.commands.op) == Op.COMP]
    assert sorted(set(runs.tolist())) == [5, 32]         # blocked: a segment is one COMP record
    _gemv_values(op, on)
    _gemv_values(op, off)


# --------------------------------------------------------------------------
# command counts of the optimisations
# --------------------------------------------------------------------------
def _gemv_values(op, prog):
    rng = np.random.default_rng(5)
    W = rng.standard_normal((op.extents["i"], op.extents["k"])).astype(np.float32)
    x = rng.standard_normal(op.extents["k"]).astype(np.float32)
    y = np.asarray(execute(prog, W, x, arithmetic="wide"))
    close(y, W @ x, np.abs(W) @ np.abs(x))


def test_buffer_reuse_cuts_gwrites_and_readres():
    """One channel, 16 banks x n_o = 8 outputs, t_in = 4 chunks of 512, one
    buffer, 4 latches (lo = 4): without reuse every (output, chunk) step
    writes the buffer and reads its partial; output-stationary reuse writes
    each chunk once per latch block of 4 outputs and reads once per block;
    input-stationary writes each chunk once and reads per (chunk, block)."""
    n_o, t_in, lo = 8, 4, BE.core.n_output_regs
    op = H.gemv(16 * n_o, 512 * t_in)
    d = Draft((DimPart(1, 16, 0), DimPart(1, 1, 0)), lane_var="k", buffers=1)
    none = lower(op, d, BE, register_reuse=False).stats.commands
    os_ = lower(op, d, BE).stats.commands
    is_ = lower(op, d.replace(dataflow="is"), BE).stats.commands
    assert none["GWRITE"] == n_o * t_in and none["READRES"] == n_o * t_in
    assert os_["GWRITE"] == (n_o // lo) * t_in and os_["READRES"] == n_o // lo
    assert is_["GWRITE"] == t_in and is_["READRES"] == t_in * (n_o // lo)
    assert none["GWRITE"] // os_["GWRITE"] == lo and none["GWRITE"] // is_["GWRITE"] == n_o
    assert none["COMP"] == os_["COMP"] == is_["COMP"] == n_o * t_in * 32     # broadcast columns
    for kw in ({}, {"register_reuse": False}):
        for dd in (d, d.replace(dataflow="is")):
            _gemv_values(op, lower(op, dd, BE, **kw))


def test_gwrite4_cuts_gacts_for_four_vectors():
    """GEMM y[i, j] = W[i, :] . X[:, j] with 4 input vectors j: with four
    buffers one GWRITE_4 fills them and one G_ACT serves all four vectors
    (PIMFlow §4.1), a 4x cut of G_ACTs vs one buffer.  Input-stationary, the
    buffer traffic stays the same while GWRITE commands drop 4x too."""
    op = H.contraction({"i": 64, "j": 4, "k": 1024}, [(H.V("i"), H.V("k")), (H.V("k"), H.V("j"))],
                       (H.V("i"), H.V("j")), ["k"])
    base = Draft((DimPart(1, 16, 0), DimPart(1, 1, 0), DimPart(1, 1, 0)), lane_var="k", dataflow="is")
    one, four = lower(op, base.replace(buffers=1), BE), lower(op, base.replace(buffers=4), BE)
    c1, c4 = one.stats.commands, four.stats.commands
    assert c1["G_ACT"] == 4 * c4["G_ACT"]
    assert c1["GWRITE"] == 4 * c4["GWRITE"] and c1["GWRITE_columns"] == c4["GWRITE_columns"]
    assert c1["COMP"] == c4["COMP"]
    gw = np.asarray(four.commands.op) == Op.GWRITE
    assert (np.asarray(four.commands.aux)[gw] == 4).all()          # GWRITE_4
    rng = np.random.default_rng(6)
    W = rng.standard_normal((64, 1024)).astype(np.float32)
    X = rng.standard_normal((1024, 4)).astype(np.float32)
    for prog in (one, four):
        y = np.asarray(execute(prog, W, X, arithmetic="wide"))
        close(y, W @ X, np.abs(W) @ np.abs(X))


def test_broadcast_cuts_records_by_cores_per_group():
    """Group-broadcast COMP / READRES serve the 16 banks at once; per-core
    commands issue one per bank (and activate rows per bank, no G_ACT)."""
    op = H.gemv(16 * 4, 1024)
    d = Draft((DimPart(1, 16, 0), DimPart(1, 1, 0)), lane_var="k")
    bc, pc = lower(op, d, BE), lower(op, d.replace(granularity="core"), BE)
    cb, cp = bc.stats.commands, pc.stats.commands
    C = BE.cores_per_group
    assert cp["COMP_records"] == C * cb["COMP_records"] and cp["COMP"] == C * cb["COMP"]
    assert cp["READRES"] == C * cb["READRES"]
    assert cp["G_ACT"] == 0 and cb["G_ACT"] > 0
    # the records themselves: one COMP / READRES record per bank instead of one per channel
    recs = lambda p, o: int(((np.asarray(p.commands.op) == o) & (np.asarray(p.commands.n) > 0)).sum())  # noqa: E731
    assert recs(pc, Op.COMP) == C * recs(bc, Op.COMP) and recs(pc, Op.READRES) == C * recs(bc, Op.READRES)
    _gemv_values(op, bc)
    _gemv_values(op, pc)


def test_resident_matrix_leaves_the_steady_state():
    op = H.gemv(256, 1024)
    d = Draft((DimPart(4, 16, 0), DimPart(1, 1, 0)), lane_var="k")
    plain, res = lower(op, d, BE), lower(op, d, BE, resident=(0,))
    rec = res.commands
    wr = np.isin(np.asarray(rec.op), [Op.WR, Op.WR_S])
    assert wr.any() and (np.asarray(rec.resident)[wr] == 1).all()
    assert (np.asarray(plain.commands.resident) == 0).all()
    assert res.stats.resident_bytes == plain.stats.rearrange_bytes > 0
    assert res.stats.rearrange_bytes == 0
    rp, rr = cycles(plain, BE, refresh=False), cycles(res, BE, refresh=False)
    gw_cols = res.stats.commands["GWRITE_columns"]
    # the steady state writes only the global buffers (GWRITE is a host column write)
    assert float(rr.counts["WR"]) == gw_cols
    assert float(rp.counts["WR"]) == gw_cols + plain.stats.commands["WR"]
    assert float(rr.resident_cycles) > 0 and float(rr.rearrangement) < float(rp.rearrangement)
    assert float(rr.compute) == float(rp.compute)           # the kernel itself is unchanged
    _gemv_values(op, res)


# --------------------------------------------------------------------------
# timing from first principles
# --------------------------------------------------------------------------
def test_tiny_program_cycles_from_timing_parameters():
    """One channel, 16 banks x 4 outputs, one 512-input chunk, matrix resident:
    GWRITE x 32, then per output row G_ACT + 32 COMP, then one READRES of the
    4 latches of 16 banks.  Derived by hand from the preset's parameters
    (refresh off) — the scan must agree exactly."""
    op = H.gemv(64, 512)
    d = Draft((DimPart(1, 16, 0), DimPart(1, 1, 0)), lane_var="k", buffers=1)
    prog = lower(op, d, BE, resident=(0,))
    rec = prog.commands
    live = (np.asarray(rec.n)[0] > 0) & (np.asarray(rec.resident)[0] == 0)
    ops = [Op(o) for o in np.asarray(rec.op)[0][live]]
    assert ops == [Op.GWRITE] * 32 + [Op.G_ACT, Op.COMP] * 4 + [Op.READRES]
    bursts = int(np.asarray(rec.n)[0][live][-1])
    assert bursts == 16 * 4 * BE.core.reg_bytes // BE.core.col_bytes     # 16 banks x 4 fp32 latches

    t = {k: float(getattr(BE.timing, k)) for k in BE.timing._dynamic_fields}
    # GWRITE columns alternate bank groups (banks 0, 4, 8, 12): tCCD_S apart
    gw_bank = [(j % 4) * 4 for j in range(32)]
    gw_t = [j * t["tCCD_S"] for j in range(32)]
    gw_last = gw_t[-1]
    gw_end = gw_last + t["tWL"] + t["tBL"]
    t_wr = {b: max(tt for bb, tt in zip(gw_bank, gw_t) if bb == b) for b in set(gw_bank)}
    # G_ACT0..3 (one per bank group) are tFAW apart: the last group opens 3 tFAW later
    stagger = (BE.group.bank_groups - 1) * t["tFAW"]
    # row 0: G_ACT waits for the last column issued; COMP waits tRCD and write->read
    act = gw_last + stagger
    comp = max(act + t["tRCDRD"], gw_last + t["tCCD_S"], gw_last + t["tWL"] + t["tBL"] + t["tWTR_S"])
    last = comp + 31 * t["tCCD_AB"]
    for _ in range(3):
        # next row: precharge after tRAS / tRTP (COMP reads bank 0) / write recovery, then tRP
        pre = max(act + t["tRAS"], last + t["tRTP_S"],
                  max(tw + t["tWL"] + t["tBL"] + t["tWR"] for tw in t_wr.values()))
        act = max(pre + t["tRP"], last) + stagger
        comp = max(act + t["tRCDRD"], last + t["tCCD_AB"])
        last = comp + 31 * t["tCCD_AB"]
    comp_end = last + t["tCCD_AB"]
    rr0 = max(act + t["tRCDRD"], last + t["tCCD_L"], comp_end)          # READRES waits for the COMPs
    end = rr0 + (bursts - 1) * t["tCCD_L"] + t["tCL"] + t["tBL"]

    rep = cycles(prog, BE, refresh=False)
    assert float(rep.rearrangement) == gw_end
    assert float(rep.rearrangement + rep.compute) == comp_end
    assert float(rep.total_cycles - rep.merge) == end
    # with PIMFlow Table 1's numbers: a row costs tRCD + 31 tCCD + tRTP + tRP = 86 cycles
    assert 31 * t["tCCD_AB"] + t["tRCDRD"] + t["tRTP_S"] + t["tRP"] == 86.0


def test_gemv_4096_cycles_plausible():
    """GEMV 4096 x 4096 on the baseline mapping, matrix resident, refresh off:
    every bank runs 128 rows (16 outputs x 8 chunks) of 32 COMPs, the rows in
    series (an all-bank G_ACT per row).  COMP-bound time is 128 x 32 x tCCD;
    a row cannot start before the previous one's last COMP + tRTP + tRP +
    tRCD + the 3 tFAW of the staggered G_ACT0..3; on top come the buffer
    loads and the read-backs."""
    op = H.gemv(4096, 4096)
    d = baseline(op, BE)
    prog = lower(op, d, BE, resident=(0,))
    st = prog.stats.commands
    G = prog.groups
    rows, loads, reads = st["G_ACT"] // G, st["GWRITE"] // G, st["READRES"] // G
    assert rows == 128 and st["COMP"] // G == 128 * 32
    t = {k: float(getattr(BE.timing, k)) for k in BE.timing._dynamic_fields}
    period = (t["tRCDRD"] + 31 * t["tCCD_AB"] + t["tRTP_S"] + t["tRP"]
              + (BE.group.bank_groups - 1) * t["tFAW"])       # G_ACT0..3, tFAW apart
    comp_bound = rows * 32 * t["tCCD_AB"]
    bursts = int(np.asarray(prog.commands.n)[np.asarray(prog.commands.op) == Op.READRES].max())
    load = 32 * t["tCCD_S"] + t["tWL"] + t["tBL"] + t["tWTR_L"] + t["tRP"] + t["tRCDRD"]
    read = (bursts - 1) * t["tCCD_L"] + t["tCL"] + t["tBL"] + t["tCCD_L"] + t["tCCD_AB"]
    rep = cycles(prog, BE, refresh=False)
    pim = float(rep.total_cycles - rep.merge)
    assert comp_bound < rows * period <= pim <= rows * period + loads * load + reads * read
    # the rows dominate: buffer loads and read-backs add under 10 % to them
    # (a row is 64 cycles of COMPs + 73 of tRCD, tRTP, tRP and the G_ACT stagger)
    assert pim < 1.1 * rows * period


# --------------------------------------------------------------------------
# the interpreter's guards
# --------------------------------------------------------------------------
def _drop(prog, opcode):
    """The program with the middle record of `opcode` removed (a NOP of n = 0,
    as padding is: a READRES of n = 0 is a read-back of no bus time, not a gap)."""
    op_ = np.asarray(prog.commands.op)
    idx = np.nonzero(op_[0] == opcode)[0]
    n = np.asarray(prog.commands.n).copy()
    op_ = op_.copy()
    n[0, idx[len(idx) // 2]] = 0
    op_[0, idx[len(idx) // 2]] = Op.NOP
    new = {"n": n, "op": op_}
    rec = Records(**{f: new.get(f, np.asarray(getattr(prog.commands, f))) for f in RECORD_FIELDS})
    return dataclasses.replace(prog, commands=rec)


@pytest.mark.parametrize("granularity", ["broadcast", "core"])
def test_missing_records_give_nan(granularity):
    op, operands, ref, S, K = case("gemv")
    d = Draft((DimPart(2, 4, 0), DimPart(1, 1, 0)), lane_var="k", granularity=granularity)
    prog = lower(op, d, BE)
    assert np.isfinite(np.asarray(execute(prog, *operands, arithmetic="wide"))).all()
    dropped = [Op.GWRITE, Op.READRES, Op.WR] + ([Op.G_ACT] if granularity == "broadcast" else [])
    for o in dropped:
        y = np.asarray(execute(_drop(prog, o), *operands, arithmetic="wide"))
        assert np.isnan(y).any(), o.name


def test_rejects_what_newton_cannot_run():
    with pytest.raises(PimCompileError, match="contractions only"):
        lower(H.vadd(64), Draft((DimPart(1, 1, 0),), lane_var="i"), BE)
    small = get_backend("newton", buffers=1)
    op = H.gemv(64, 512)
    with pytest.raises(PimCompileError, match="global buffers"):
        lower(op, Draft((DimPart(1, 16, 0), DimPart(1, 1, 0)), lane_var="k", buffers=4), small)


def test_a_draft_whose_stream_exceeds_the_lowering_limit_is_a_compile_error_a_search_skips(monkeypatch):
    """`MAX_STREAM_RECORDS`: a group's stream over it is refused before its scratch is allocated
    (VGG16's 224 x 224 x 64 CONV on one group: 44 M commands), by a PimCompileError naming the limit;
    at the limit it lowers.  The bound is the one the compiled walk allocates (`_stream_bound`)."""
    from pimjax.backends.newton import lower as newton_lower
    from pimjax.errors import PimCompileError
    from pimjax.hw import get_backend
    from pimjax.kernels import kernel_op
    from pimjax.lower import lower
    from pimjax.partition import drafts
    be = get_backend("newton")
    op, shapes = kernel_op("gemv", [256, 512])
    d = drafts(op, be, shapes=shapes)[0]
    bounds = []
    real = newton_lower._stream_bound
    monkeypatch.setattr(newton_lower, "_stream_bound", lambda *a: bounds.append(real(*a)[0]) or real(*a))
    lower(op, d, be, shapes)
    most = max(bounds)
    monkeypatch.setattr(newton_lower, "MAX_STREAM_RECORDS", most)
    lower(op, d, be, shapes)
    monkeypatch.setattr(newton_lower, "MAX_STREAM_RECORDS", most - 1)
    with pytest.raises(PimCompileError, match="command stream"):
        lower(op, d, be, shapes)
