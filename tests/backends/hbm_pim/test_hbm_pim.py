"""HBM-PIM programs compute what the PimGraph computes.

For every op kind HBM-PIM runs (GEMV, MMTV, TTV, batched products, GEMM as
GEMV sequences, conv via im2col, VA, GEVA, RELU, RED and host epilogues),
the baseline draft and a random sample of drafts are lowered and executed:
`arithmetic="wide"` equals the graph evaluator at float32 rtol 1e-5, and
`arithmetic="backend"` (fp16) stays within the error bound derived in
`fp16_bound`.  Then the optimisations change what they should.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pimjax.backends import baseline
from pimjax.backends.hbm_pim.lower import _unique_columns
from pimjax.hw import get_backend
from pimjax.lower import lower
from pimjax.lower.program import Op
from pimjax.partition import drafts
from pimjax.partition.verify import op_support
from pimjax.sim.cycles import cycles
from pimjax.sim.execute import execute
from tests.corpus import CORPUS
from tests.helpers import slow_params
from tests.lower.util import graph_ops, reference_output

BACKEND = get_backend("hbm-pim", channels=4)
U16 = 2.0 ** -11          # unit roundoff of fp16

KINDS = ["gemv", "gemv_bias_relu", "gemm", "batched_matmul", "attn_scores", "attn_context", "ttv",
         "mmtv", "va", "geva", "red_vector", "red_rows", "mean_rows", "conv1x1_nhwc",
         "conv3x3_nhwc", "cinm_abc", "mlp2"]


def fp16_bound(op, operands, draft):
    """Elementwise |fp16 result - exact| bound.

    Inputs are rounded to fp16 (relative U16 each), every product and every
    accumulation step in a lane rounds once more (relative U16), and the
    host sums lanes and partial slots in float32.  With n the longest chain
    of roundings an output sees (the per-lane accumulation length plus the
    conversions and body operations), the classic bound is
    |err| <= n * U16 * (the op evaluated on |inputs|), plus an absolute
    floor for results that cancel to ~0."""
    ext = op.extents
    red = int(np.prod([ext[v] for v in op.reduction_vars])) if op.reduction_vars else 1
    n_ops = 4 + 3 * len(op.fused)
    n = red // 16 + red % 16 + n_ops + 2
    mag = np.abs(np.asarray(reference_output(op, [np.abs(a) for a in operands]), np.float64))
    return n * U16 * mag + 1e-3


def _check_op(op, shapes, operands, expect, draft):
    program = lower(op, draft, BACKEND, shapes)
    wide = np.asarray(execute(program, *operands, arithmetic="wide"), np.float64)
    np.testing.assert_allclose(wide, expect, rtol=1e-5, atol=1e-5,
                               err_msg=f"wide result differs for {draft}")
    fp16 = np.asarray(execute(program, *operands, arithmetic="backend"), np.float64)
    bound = fp16_bound(op, operands, draft)
    assert np.all(np.abs(fp16 - expect) <= bound), f"fp16 error above the bound for {draft}"


def _cases(names):
    for name, fn, make in CORPUS:
        if name not in names:
            continue
        for op, shapes, operands in graph_ops(fn, make()):
            if not op_support(op, BACKEND)[0]:
                continue
            yield name, op, shapes, operands


# the heaviest cases (30 s and more each on 2 cores) run with the slow ones (CI runs them)
@pytest.mark.parametrize("name", slow_params(KINDS, {"gemv", "gemm", "batched_matmul", "attn_scores", "attn_context", "ttv",
                                                   "va", "red_vector", "red_rows", "mean_rows", "conv1x1_nhwc",
                                                   "conv3x3_nhwc", "mlp2"}))
def test_baseline_and_random_drafts(name):
    rng = np.random.default_rng(0)
    found = False
    for _, op, shapes, operands in _cases([name]):
        found = True
        expect = np.asarray(reference_output(op, operands), np.float64)
        table = drafts(op, BACKEND, shapes=shapes)
        base = baseline(op, BACKEND)
        _check_op(op, shapes, operands, expect, base)
        # 5 sampled drafts per kind here; test_hundred_random_drafts (slow: make test-slow, CI) takes 100
        for i in rng.choice(len(table), min(5, len(table)), replace=False):
            _check_op(op, shapes, operands, expect, table[int(i)])
    assert found, f"{name} has no HBM-PIM op"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gemv", "mmtv", "ttv", "geva", "va", "red_rows", "gemv_bias_relu",
                                  "conv3x3_nhwc", "gemm"])
def test_hundred_random_drafts(name):
    rng = np.random.default_rng(1)
    for _, op, shapes, operands in _cases([name]):
        expect = np.asarray(reference_output(op, operands), np.float64)
        table = drafts(op, BACKEND, shapes=shapes)
        for i in rng.choice(len(table), min(100, len(table)), replace=False):
            program = lower(op, table[int(i)], BACKEND, shapes)
            wide = np.asarray(execute(program, *operands, arithmetic="wide"), np.float64)
            np.testing.assert_allclose(wide, expect, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------
# optimisations change what they should
# --------------------------------------------------------------------------
def _gemv_program(M, N, **options):
    from tests.partition.helpers import gemv
    op = gemv(M, N)
    be = get_backend("hbm-pim")
    draft = baseline(op, be)
    return op, be, draft


def _count(program, op, aux=None):
    rec = program.commands
    mask = (np.asarray(rec.op) == op) & (np.asarray(rec.n) > 0)
    if aux is not None:
        mask &= np.asarray(rec.aux) == aux
    return int(np.asarray(rec.n)[mask].sum())


def test_register_reuse_cuts_register_writes_and_readbacks():
    """Korean paper §3.2.  GEMV 2048 x 2048 on a 16-group x 8-unit draft with
    KI = KO = 8: T_in = 16 input tiles, T_out = 2 output tiles per unit.
    Output-stationary with reuse writes GRF_A T_out * T_in times and stores
    GRF_B once per output tile; without reuse every kernel stores its partial
    outputs, T_in times more, and the host reads them all back."""
    from pimjax.backends.hbm_pim.lower import Crf
    from pimjax.partition.draft import DimPart, Draft
    from tests.partition.helpers import gemv
    op = gemv(2048, 2048)
    be = get_backend("hbm-pim", channels=16)
    d = Draft((DimPart(16, 8, 0), DimPart(1, 1, 0)), ki=8, ko=8, lane_var="k")
    t_in, t_out = 2048 // 128, 2048 // (16 * 8 * 8)
    reuse = lower(op, d, be)
    plain = lower(op, d, be, register_reuse=False)
    assert _count(reuse, Op.AB_WR, Crf.HOST_REG) == t_out * t_in * 8
    assert _count(plain, Op.PIM_WR) == t_in * _count(reuse, Op.PIM_WR)
    rb = lambda p: _count(p, Op.RD) + _count(p, Op.RD_S)  # noqa: E731
    frame = 32   # park-in / park-out reads of the frame
    assert rb(plain) - frame == t_in * (rb(reuse) - frame)
    # input-stationary with reuse writes each input tile once
    is_ = lower(op, d.replace(dataflow="is"), be)
    assert _count(is_, Op.AB_WR, Crf.HOST_REG) == t_in * 8


def test_resident_weights_leave_the_steady_state():
    from tests.partition.helpers import gemv
    op = gemv(1024, 1024)
    be = get_backend("hbm-pim", channels=16)
    d = baseline(op, be)
    moving = lower(op, d, be)
    resident = lower(op, d, be, resident=(0,))
    r_moving, r_res = cycles(moving, be), cycles(resident, be)
    assert float(r_res.resident_cycles) > 0 and float(r_moving.resident_cycles) == 0
    assert float(r_res.rearrangement) < float(r_moving.rearrangement)
    # the placement is the same work, paid once: about what the moving program spends on it
    assert float(r_res.resident_cycles) == pytest.approx(
        float(r_moving.rearrangement) - float(r_res.rearrangement), rel=0.1)
    assert float(r_res.compute) == pytest.approx(float(r_moving.compute), rel=0.02)


def test_data_block_layout_matches_dataflow():
    """Korean paper §3.4: the blocks are stored in the order the dataflow
    reads them.  With an input-stationary dataflow and the layout on, the MAC
    stream walks the matrix region sequentially (block after block); with the
    layout off (blocks in output-stationary order) it jumps by T_in / 2
    blocks between consecutive kernels."""
    from pimjax.partition.draft import DimPart, Draft
    from tests.partition.helpers import gemv
    op = gemv(2048, 2048)
    be = get_backend("hbm-pim", channels=16)
    d = Draft((DimPart(16, 8, 0), DimPart(1, 1, 0)), ki=2, ko=2, dataflow="is", lane_var="k")

    def even_bank_walk(program):
        rec = program.commands
        m = (np.asarray(rec.op)[0] == Op.PIM_RD) & (np.asarray(rec.bank)[0] == 0)
        rows = np.asarray(rec.row)[0][m]
        logical = (rows & 0xFFF) | ((rows >> 13) << 12)
        return logical * 32 + np.asarray(rec.col)[0][m]

    on = even_bank_walk(lower(op, d, be))
    off = even_bank_walk(lower(op, d, be, data_block_layout=False))
    bursts = d.ki * d.ko
    assert np.all(np.diff(on) == bursts)                      # sequential
    t_in = 2048 // (d.ki * 16)
    assert np.any(np.diff(off) == (t_in // 2) * bursts)       # jumps over the other tiles
    assert sorted(on) == sorted(off)                          # same blocks, other order


@settings(max_examples=300, deadline=None)
@given(st.one_of(
    st.lists(st.integers(0, 3000), max_size=300),                       # bounded: the mask path
    st.lists(st.integers(-5, 10**9), max_size=50),                      # sparse / negative: np.unique
    st.builds(lambda a, n, k: list(range(a, a + n * k, k)),             # increasing ranges: as they are
              st.integers(0, 10**6), st.integers(0, 200), st.integers(1, 40))))
def test_unique_columns_equals_np_unique(values):
    got = _unique_columns(np.array(values, np.int64))
    want = np.unique(np.array(values, np.int64))
    assert got.dtype == want.dtype and np.array_equal(got, want)


def _host_write_time(cores: int, columns: int) -> tuple[float, set]:
    """(cycles, opcodes) of the host writing `columns` columns into each of
    the two banks of `cores` PIM units (one pseudo-channel, refresh off)."""
    from pimjax.backends.hbm_pim.lower import Geometry, _host_columns
    from pimjax.lower.program import Phase, RecordBuilder
    from pimjax.sim.scan import scan_stream, timing_vector
    be = get_backend("hbm-pim")
    b = RecordBuilder()
    flat = np.arange(columns)
    _host_columns(b, Op.WR, Phase.REARRANGE, 0, {0: flat, 1: flat}, cores, Geometry.of(be))
    rec = b.build()
    arr = {f: np.asarray(rec[f], np.int32) for f in ("op", "bank", "row", "n", "phase", "resident")}
    arr["pre"] = np.zeros_like(arr["op"])
    arr["sync"] = np.zeros_like(arr["op"])
    out = scan_stream(arr, timing_vector(be.timing), be.group.banks, be.group.banks_per_bank_group, False)
    return float(out["end"]), set(np.unique(arr["op"]).tolist())


# the heaviest cases (30 s and more each on 2 cores) run with the slow ones (CI runs them)
@pytest.mark.parametrize("cores", slow_params([1, 2, 4], {1, 4}))
def test_bulk_host_writes_are_timed_like_column_by_column_ones(cores):
    """A transfer above INTERLEAVE_LIMIT columns is emitted as runs (one
    record per bank row); it must cost per column what the column-by-column
    emission of the same banks costs, up to the row activations the runs
    hide: tCCD_L apart inside one bank group (cores 0-1 use banks 0-3),
    between tCCD_S and tCCD_L when the banks span bank groups."""
    from pimjax.backends.hbm_pim.lower import INTERLEAVE_LIMIT
    t = get_backend("hbm-pim").timing
    small = INTERLEAVE_LIMIT // (2 * cores)                 # column by column
    large = 2 * small + 64                                  # runs
    t_small, ops_small = _host_write_time(cores, small)
    t_large, ops_large = _host_write_time(cores, large)
    per_small, per_large = t_small / (2 * cores * small), t_large / (2 * cores * large)
    assert ops_small == {int(Op.WR)}
    if cores <= 2:                                          # one bank group
        assert ops_large == {int(Op.WR)}
        assert t.tCCD_L <= per_large <= per_small
    else:
        assert ops_large == {int(Op.WR_S)}
        assert t.tCCD_S <= per_large < t.tCCD_L
        assert t.tCCD_S <= per_small
    assert per_large <= per_small <= 1.25 * per_large       # no jump at the limit


def test_streamed_needs_two_bank_groups():
    """`program.streamed`: RD_S / WR_S only when the banks span two bank
    groups (4 banks per group here), the plain opcode otherwise."""
    from pimjax.lower.program import streamed
    assert streamed(Op.WR, [0, 1, 2, 3], 4) == Op.WR
    assert streamed(Op.RD, [5], 4) == Op.RD
    assert streamed(Op.WR, [0, 4], 4) == Op.WR_S
    assert streamed(Op.RD, [3, 4], 4) == Op.RD_S
    assert streamed(Op.WR, [0, 8], 8) == Op.WR_S and streamed(Op.WR, [0, 7], 8) == Op.WR


def test_baseline_spreads_the_large_set_whatever_its_position():
    """The baseline fills every unit: an elementwise op of shape [1, n] or
    [2, n/2] is mapped like the vector of n (same cycles), a reduction to one
    value spreads its reduced set with host-merged partials, and a GEMM keeps
    the sets the input vector depends on whole inside a group's cores (group
    broadcast of the input registers) — and still computes the product."""
    from pimjax.kernels import kernel_op
    be = get_backend("hbm-pim")
    units = be.n_groups * be.cores_per_group
    times = []
    for shape in ([1 << 16], [1, 1 << 16], [2, 1 << 15]):
        op, shapes = kernel_op("va", shape)
        d = baseline(op, be)
        assert np.prod([[p.groups, p.cores] for p in d.parts]) == units
        times.append(float(cycles(lower(op, d, be, shapes), be).total_cycles))
    assert times[0] == times[1] == times[2]
    op, shapes = kernel_op("red", [1, 4096])
    d = baseline(op, be)
    assert d.reduction == "host" and np.prod([[p.groups, p.cores] for p in d.parts]) == units
    for name, fn, make in CORPUS:
        if name != "gemm":
            continue
        for op, shapes, operands in graph_ops(fn, make()):
            d = baseline(op, BACKEND)
            assert d.parts[0].groups * d.parts[0].cores > 1 and d.parts[1].cores == 1
            _check_op(op, shapes, operands, reference_output(op, operands), d)


# (body, the same body on magnitudes: every term's |value| added -- what
# fp16 rounding errors scale with)
LINEAR_BODIES = {
    "3a+b": (lambda a, b: 3 * a + b, lambda a, b: 3 * a + b),
    "b+0.5a": (lambda a, b: b + a * 0.5, lambda a, b: b + a * 0.5),
    "a-3": (lambda a, b: a - 3, lambda a, b: a + 3),
    "2-a": (lambda a, b: 2 - a, lambda a, b: 2 + a),
    "b-2a": (lambda a, b: b - 2 * a, lambda a, b: b + 2 * a),
    "3a-b/2+1": (lambda a, b: 3 * a - b / 2 + 1, lambda a, b: 3 * a + b / 2 + 1),
    "-(a+b)/4": (lambda a, b: -(a + b) * 0.25, lambda a, b: (a + b) * 0.25),
    "ab+1": (lambda a, b: a * b + 1, lambda a, b: a * b + 1),
    "a/4+b/4": (lambda a, b: a / 4 + b / 4, lambda a, b: a / 4 + b / 4),
}


@pytest.mark.parametrize("name", list(LINEAR_BODIES))
def test_linear_bodies_with_literals_run_on_pim(name):
    """Literal factors and constants: `3*a + b` is MULS + MAD with factor 1,
    `a - 3` ADDS with -3 in the SRF, `3*a - b/2 + 1` MULS + MAD + SADD, where
    the body compiler used to refuse the literal and every draft failed to
    lower.  Every draft's program is executed and compared with jnp: exactly
    in wide arithmetic, within a few fp16 roundings of the terms' magnitude
    in the backend's."""
    fn, magnitude = LINEAR_BODIES[name]
    rng = np.random.default_rng(5)
    a, b = (rng.standard_normal(1000).astype(np.float32) for _ in range(2))
    (op, shapes, operands), = graph_ops(fn, (a, b))
    table = drafts(op, BACKEND)
    assert len(table) > 0
    expect = np.asarray(fn(a, b), np.float64)
    bound = 8 * U16 * magnitude(np.abs(a).astype(np.float64), np.abs(b).astype(np.float64)) + 1e-3
    for d in table:
        program = lower(op, d, BACKEND, shapes)
        wide = np.asarray(execute(program, *operands, arithmetic="wide"), np.float64)
        np.testing.assert_allclose(wide, expect, rtol=1e-5, atol=1e-5, err_msg=f"{name}: {d}")
        fp16 = np.asarray(execute(program, *operands, arithmetic="backend"), np.float64)
        assert np.all(np.abs(fp16 - expect) <= bound), f"{name}: fp16 error above the bound for {d}"


def test_shared_rearrangement_and_readback_records_lower_the_same_programs():
    """A contraction's matrix rearrangement and read-back records are built
    once per the numbers that fix them and shared by the drafts of an op:
    every draft lowers to the same records with the caches cold as warm
    (and a cached table cannot be written through)."""
    import pimjax.backends.hbm_pim.lower as hbm_lower
    from pimjax.errors import PimCompileError
    from pimjax.kernels import kernel_op
    from pimjax.lower.program import RECORD_FIELDS
    op, shapes = kernel_op("gemv", [1000, 200])
    table = drafts(op, BACKEND, shapes=shapes)
    warm, cold = [], []
    for i in range(0, len(table), max(1, len(table) // 40)):
        for out in (warm, cold):
            if out is cold:
                hbm_lower._READBACKS.clear()
                hbm_lower._dense_rearrange.cache_clear()
            try:
                p = lower(op, table[i], BACKEND, shapes)
            except PimCompileError:
                continue
            out.append([np.asarray(getattr(p.commands, f)).copy() for f in RECORD_FIELDS])
    assert len(warm) == len(cold) > 10
    for a, b in zip(warm, cold):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
    shared = next(iter(hbm_lower._READBACKS.values()))
    with pytest.raises(ValueError):
        shared["row"][0] = 0


# --------------------------------------------------------------------------
# the Samsung simulator's placement and frame
# --------------------------------------------------------------------------
def _gemv_op(M, N):
    import jax

    from pimjax.trace.frontend import make_graph
    g = make_graph(lambda W, x: W @ x, jax.ShapeDtypeStruct((M, N), jnp.float16),
                   jax.ShapeDtypeStruct((N,), jnp.float16))
    return g.ops[0], {i: v.shape for i, v in enumerate(g.values)}


@pytest.mark.parametrize("M", [8, 64, 1024, 4096, 16384])
def test_baseline_gemv_outputs_fill_registers_then_units_then_pch(M):
    """PIMKernel::preloadGemv / readResult place output o of a 4096-output
    tile in GRF_B o % 8 of unit (o // 8) % 8 of pCH o // 64: a GEMV of
    M < 4096 outputs uses M / 64 pCH fully, not every pCH partly."""
    be = get_backend("hbm-pim", channels=64)
    op, _ = _gemv_op(M, 256)
    d = baseline(op, be)
    ko, C, G = d.ko, be.cores_per_group, be.n_groups
    cores = min(C, max(1, M // ko))
    groups = min(G, max(1, M // (ko * cores)))
    from pimjax.partition.dimsets import dimension_sets
    out = [p for p, s in zip(d.parts, dimension_sets(op)) if not s.reduction][0]
    assert (out.groups, out.cores) == (groups, cores)


def test_refresh_due_in_the_park_out_waits_for_its_end():
    """The park-out activates the 16 banks tRRD apart (the HAB -> SB PREs left
    every bank closed), less than tRAS apart: a refresh falling due there is
    issued after the last read, outside the timed kernel (the Samsung
    simulator's RELU on 1 M elements on 64 pCH: 2042 cycles, refresh
    deadline at 1950); one falling due in the kernel body costs tRP + tRFC
    at least."""
    be0 = get_backend("hbm-pim", channels=4)
    import jax

    from pimjax.trace.frontend import make_graph
    g = make_graph(lambda a: jnp.maximum(a, jnp.zeros((), a.dtype)),
                   jax.ShapeDtypeStruct((4 * 2048 * 4,), jnp.float16))
    op = g.ops[0]
    shapes = {i: v.shape for i, v in enumerate(g.values)}
    prog = lower(op, baseline(op, be0), be0, shapes, resident=(0,))
    t0 = float(cycles(prog, be0, refresh=False).kernel_cycles)
    # the park-out is the last 16 reads: its ACTs span at least 15 tRRD_S
    late = be0.replace(timing=be0.timing.replace(tREF0=t0 - 8 * be0.timing.tRRD_S))
    assert float(cycles(prog, late).kernel_cycles) == t0
    mid = be0.replace(timing=be0.timing.replace(tREF0=t0 / 2))
    assert float(cycles(prog, mid).kernel_cycles) >= t0 + be0.timing.tRFC
