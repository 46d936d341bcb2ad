"""PIMFlow's packed Newton mapping (`backends/newton/packed.py`) and its
artifact's controller (`backends/newton/fork.py`): values against jnp, command
counts against an independent port of the artifact's generator, the fork's
timing against times derived here from its rule table, and every row of
`../shared/reference/pimflow.csv`."""
from __future__ import annotations

import csv
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax

from pimjax.backends.newton import fork
from pimjax.backends.newton.packed import packed_drafts, packed_plan
from pimjax.backends.newton.reference import artifact_draft, filter_operand, layer_graph, reference_cycles
from pimjax.hw.presets import newton_config
from pimjax.lower import lower
from pimjax.lower.program import Op
from pimjax.sim.cycles import cycles
from pimjax.sim.execute import execute

REF_CSV = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "shared", "reference", "pimflow.csv")


def _backend(config="newton++", simulator="pimjax"):
    return newton_config(config, channels=16, total_channels=32, simulator=simulator)


def _row(H, W, C, F, K=1, stride=1):
    return dict(layer="t", H=H, W=W, C=C, F=F, K=K, stride=stride)


def _reference(row, x, w):
    """The layer in numpy / lax (float32): what the program must compute."""
    if int(row["H"]) == int(row["W"]) == int(row["K"]) == 1:
        return x @ w
    p = (int(row["K"]) - 1) // 2
    s = int(row["stride"])
    return np.asarray(lax.conv_general_dilated(x, w, (s, s), [(p, p), (p, p)],
                                               dimension_numbers=("NHWC", "HWIO", "NHWC")))


def _operands(op, shapes, rng):
    arrays = [rng.standard_normal(shapes[a.value]).astype(np.float32) for a in op.operands]
    by_value = {a.value: arr for a, arr in zip(op.operands, arrays)}
    return arrays, by_value


# --------------------------------------------------------------------------
# values
# --------------------------------------------------------------------------
@settings(max_examples=12, deadline=None)
@given(H=st.integers(1, 6), C=st.integers(1, 40), F=st.integers(1, 40), K=st.sampled_from([1, 3]),
       stride=st.sampled_from([1, 2]), seed=st.integers(0, 2 ** 16))
def test_packed_conv_values_equal_lax(H, C, F, K, stride, seed):
    row = _row(H, H + 1, C, F, K, stride)
    op, shapes = layer_graph(row)
    m = filter_operand(op)
    arrays, by_value = _operands(op, shapes, np.random.default_rng(seed))
    x = next(a for a in arrays if a.ndim == 4 and a.shape[0] == 1)
    w = arrays[m]
    if x.shape[1] != H:                 # the frontend padded the input: the operand is the padded image
        row = dict(row, K=1) if K == 1 else row
        want = np.asarray(lax.conv_general_dilated(x, w, (stride, stride), "VALID",
                                                   dimension_numbers=("NHWC", "HWIO", "NHWC")))
    else:
        want = _reference(row, x, w)
    be = _backend()
    for d in packed_drafts(op, be, shapes, matrix=m):
        prog = lower(op, d, be, shapes, matrix=m, resident=(m,))
        got = np.asarray(execute(prog, *arrays, arithmetic="wide"))
        scale = max(1e-6, float(np.abs(want).max()))
        assert np.abs(got - want).max() <= 1e-5 * scale, (d.pack, d.pack_rest)


@pytest.mark.parametrize("C,F,pixels", [(1280, 40, 1), (600, 16, 4), (144, 6, 1), (1000, 300, 2)])
def test_packed_fc_values_and_bf16(C, F, pixels):
    """FC layers (full chunks, a packed remainder, the partial-sum split of
    few units) in float32 exactly and in the backend's bf16 within its
    tolerance; the read-back of no bus time (the fork's) computes the same."""
    import jax
    import jax.numpy as jnp

    from pimjax.trace.frontend import make_graph
    graph = make_graph(lambda x, w: x @ w, jax.ShapeDtypeStruct((pixels, C), jnp.float16),
                       jax.ShapeDtypeStruct((C, F), jnp.float16))
    op = [o for o in graph.ops if o.kind == "contraction"][0]
    shapes = {i: v.shape for i, v in enumerate(graph.values)}
    arrays, by_value = _operands(op, shapes, np.random.default_rng(C + F))
    want = by_value[0] @ by_value[1]
    for sim in ("pimjax", "pimflow"):
        be = _backend(simulator=sim)
        drafts = packed_drafts(op, be, shapes, matrix=filter_operand(op))
        assert drafts
        for d in drafts[:3]:
            prog = lower(op, d, be, shapes, matrix=filter_operand(op))
            rr = np.asarray(prog.commands.n)[np.asarray(prog.commands.op) == Op.READRES]
            assert (rr == 0).all() if sim == "pimflow" else (rr > 0).all()
            wide = np.asarray(execute(prog, *arrays, arithmetic="wide"))
            assert np.abs(wide - want).max() <= 1e-5 * np.abs(want).max()
            bf = np.asarray(execute(prog, *arrays))
            assert np.abs(bf - want).max() <= 6e-2 * np.abs(want).max()


def test_missing_readres_gives_nan():
    """A dropped READRES (the record turned into a NOP) leaves its outputs NaN."""
    import dataclasses

    from pimjax.lower.program import RECORD_FIELDS, Records
    row = _row(4, 4, 24, 20)
    op, shapes = layer_graph(row)
    m = filter_operand(op)
    be = _backend()
    prog = lower(op, packed_drafts(op, be, shapes, matrix=m)[0], be, shapes, matrix=m)
    arrays, _ = _operands(op, shapes, np.random.default_rng(0))
    assert np.isfinite(np.asarray(execute(prog, *arrays, arithmetic="wide"))).all()
    op_ = np.asarray(prog.commands.op).copy()
    s, i = np.argwhere(op_ == Op.READRES)[3]
    op_[s, i] = Op.NOP
    rec = Records(**{f: (op_ if f == "op" else np.asarray(getattr(prog.commands, f))) for f in RECORD_FIELDS})
    y = np.asarray(execute(dataclasses.replace(prog, commands=rec), *arrays, arithmetic="wide"))
    assert np.isnan(y).any()


# --------------------------------------------------------------------------
# command counts: an independent port of the artifact's generator
# --------------------------------------------------------------------------
def _artifact_channel0(H, W, C, F, K, stride, groups):
    """Channel 0's (GWRITE, G_ACT groups, COMP, READRES) as PIMFlow's
    `pim/main.cc` generates them with `groups` channel groups on 16 channels
    (PimCodeGen's chunks and packing, GAct::split decided on 16 channels,
    policy_readres_auto's runs); written from the C++, not from packed.py."""
    p = (K - 1) // 2
    Ho, Wo = (H - K + 2 * p) // stride + 1, (W - K + 2 * p) // stride + 1
    ic = -(-C * K * K // 16) * 16
    row = -(-F // 16) * 16
    kinds = []                            # (loads, cols per readres, readres per G_ACT)
    if ic <= 512:
        fl = 512 // ic
        kinds.append((-(-Ho * Wo // fl), ic // 16, fl))
    else:
        kinds.append((Ho * Wo * (ic // 512), 32, 1))
        rem = ic - 512 * (ic // 512)
        if rem:
            fl = 512 // rem
            kinds.append((-(-Ho * Wo // fl), rem // 16, fl))
    r = row // 16
    out = np.zeros(4, np.int64)
    for loads, ncomp, nrr in kinds:
        if r * nrr <= 8:                  # GAct::split on the 16-channel pass
            factor = 16 // (r * nrr)
            ncomp, nrr = ncomp // factor, nrr * factor
        n = 16 // groups
        chunk = -(-loads // groups)
        mine = min(chunk, loads)          # channel 0 is in group 0
        units = r * nrr
        st_ = min(max(-(-units // n), 1), nrr)
        runs = list(range(0, units, st_))[::n]          # run starts of channel 0 (idx % n == 0)
        out += mine * np.array([1, len(runs), 0, 0])
        for j in runs:
            k = min(st_, units - j)
            out += mine * np.array([0, 0, k * ncomp, k])
    return out


@settings(max_examples=25, deadline=None)
@given(H=st.integers(1, 30), C=st.sampled_from([3, 8, 16, 24, 32, 40, 64, 96, 144, 160, 320, 384, 576]),
       F=st.integers(1, 300), K=st.sampled_from([1, 3]), groups=st.sampled_from([1, 2, 4]))
def test_counts_equal_the_artifact_generator(H, C, F, K, groups):
    row = _row(H, H, C, F, K)
    op, shapes = layer_graph(row)
    m = filter_operand(op)
    be = _backend()
    d = next(d for d in packed_drafts(op, be, shapes, matrix=m) if d.pack == groups
             and d.pack_rest in (0, groups))
    pl = packed_plan(op, d, be, shapes, m)
    split = any(len(p.pieces) > 1 for p in pl.parts)
    prog = lower(op, d, be, shapes, matrix=m, resident=(m,))
    o, n = np.asarray(prog.commands.op)[0], np.asarray(prog.commands.n)[0]
    gw = o == Op.GWRITE
    ours = np.array([int((gw & ~np.concatenate([[False], gw[:-1]])).sum()), int((o == Op.G_ACT).sum()),
                     int(n[o == Op.COMP].sum()), int((o == Op.READRES).sum())])
    theirs = _artifact_channel0(H, H, C, F, K, 1, groups)
    assert ours[[0, 1, 3]].tolist() == theirs[[0, 1, 3]].tolist()
    if split:       # the artifact drops the columns past factor * floor(cols / factor): ours computes them all
        assert theirs[2] <= ours[2]
    else:
        assert ours[2] == theirs[2]


# --------------------------------------------------------------------------
# the fork's controller
# --------------------------------------------------------------------------
def test_fork_times_a_load_from_its_rules():
    """One load (GWRITE, a G_ACT, two units of 2 COMPs + READRES) on the fork's
    controller, times derived from FORK_RULES' latencies and the timing."""
    be = _backend("newton++", "pimflow")
    t = be.timing
    row = _row(1, 2, 32, 16)                 # 2 pixels, 2 columns each, one row block
    op, shapes = layer_graph(dict(row, H=1, W=2, K=1))
    m = filter_operand(op)
    d = next(d for d in packed_drafts(op, be, shapes, matrix=m) if d.pack == 1)
    prog = lower(op, d, be, shapes, matrix=m, resident=(m,))
    rep = cycles(prog, be, refresh=False)
    # channel 0: GWRITE at 0; G_ACT0 at 1 (GWRITE -> G_ACT: 1 with latency hiding), G_ACT1..3 tFAW apart;
    # the COMPs tRCD after G_ACT3 and tRC + 16 after the GWRITE, tCCD_S apart; READRES 1 after its COMP
    g3 = 1 + 3 * t.tFAW
    c0 = max(g3 + t.tRCDRD, 0 + t.tRC + 16)
    o = np.asarray(prog.commands.op)
    assert ((o == Op.G_ACT).sum(axis=1) <= 1).all()           # one run per channel: 16 units over 16 channels
    units = int((o[0] == Op.READRES).sum())
    assert units == 1
    last = c0 + (2 * units - 1) * t.tCCD_S
    end = last + 1 + t.tCL + t.tBL                    # the last READRES, then its data
    assert float(rep.total_cycles - rep.merge) == pytest.approx(end)


def test_fork_rules_without_hiding_and_refresh():
    """Newton+ (no GWRITE latency hiding): a G_ACT waits 32 tCCD_S after the
    GWRITE; and a refresh due by a READRES costs the next G_ACT tRFC."""
    lat = fork.compile_fork(np.asarray(__import__("pimjax.hw.dram_rules", fromlist=["compile_rules"])
                                       .compile_rules(_backend("newton+", "pimflow").timing)))
    t = _backend("newton+").timing
    assert lat[fork.GW_ACT] == 32 * t.tCCD_S
    assert lat[fork.REF_ACT] == t.tRFC and lat[fork.F_REFI] == t.tREFI
    lat_h = fork.compile_fork(np.asarray(__import__("pimjax.hw.dram_rules", fromlist=["compile_rules"])
                                         .compile_rules(_backend("newton++", "pimflow").timing)))
    assert lat_h[fork.GW_ACT] == 1
    # a long layer: with refresh it takes longer, by about one tRFC per tREFI at most
    op, shapes = layer_graph(_row(28, 28, 64, 64))
    m = filter_operand(op)
    be = _backend("newton++", "pimflow")
    prog = lower(op, packed_drafts(op, be, shapes, matrix=m)[0], be, shapes, matrix=m, resident=(m,))
    on, off = cycles(prog, be), cycles(prog, be, refresh=False)
    a, b = float(on.total_cycles - on.merge), float(off.total_cycles - off.merge)
    assert b < a <= b * (1 + (t.tRFC + t.tRP + 2) / t.tREFI) + t.tRFC


def test_unknown_controller_is_refused():
    be = _backend()
    bad = be.replace(group=be.group.replace(controller="dramsim3"))
    op, shapes = layer_graph(_row(2, 2, 16, 16))
    m = filter_operand(op)
    prog = lower(op, packed_drafts(op, be, shapes, matrix=m)[0], be, shapes, matrix=m)
    with pytest.raises(ValueError, match="pimflow"):
        cycles(prog, bad)
    with pytest.raises(ValueError, match="simulator"):
        newton_config("newton++", simulator="ramulator2")


# --------------------------------------------------------------------------
# PIMFlow's own simulator, row by row
# --------------------------------------------------------------------------
def _ref_rows():
    if not os.path.exists(REF_CSV):
        pytest.skip("../shared/reference/pimflow.csv not beside the repository")
    with open(REF_CSV) as f:
        return list(csv.DictReader(f))


def test_every_reference_row_within_ten_percent():
    """The packed mapping's acceptance: every row's cycles and the command counts
    it gives within 10 % (the artifact's mapping, its controller)."""
    rows = _ref_rows()
    assert len(rows) >= 32
    worst = 0.0
    for r in rows:
        ours = reference_cycles(r)
        err = abs(ours["cycles"] / float(r["cycles"]) - 1)
        worst = max(worst, err)
        assert err <= 0.10, (r["layer"], r["config"], ours["cycles"], r["cycles"])
        for k in ("GWRITE", "G_ACT", "COMP", "READRES"):
            assert abs(ours[k] / float(r[k]) - 1) <= 0.10, (r["layer"], r["config"], k, ours[k], r[k])
    assert worst < 0.01            # the controller is the fork's: within a percent, not merely ten


def test_artifact_draft_is_the_fewest_gacts():
    """The reference picks, per part, the channel groups with the fewest
    G_ACTs on channel 0 -- MobileNet-V2's 1280 -> 1000 FC: 2 groups for its
    full chunks, 1 for the packed remainder (the artifact's 2 GWRITEs)."""
    op, shapes = layer_graph(_row(1, 1, 1280, 1000))
    be = _backend("newton++", "pimflow")
    d = artifact_draft(op, be, shapes, filter_operand(op))
    assert (d.pack, d.pack_rest) == (2, 1)


def test_stream_cycles_equal_the_simulated_program():
    """`stream_cycles` (the kernel records only, distinct channels once) is the
    simulated program's DRAM time under the fork's controller, on a conv, a
    two-part FC and a split layer."""
    from pimjax.backends.newton.packed import stream_cycles
    be = _backend("newton++", "pimflow")
    for row in (_row(20, 20, 24, 40), _row(1, 1, 1280, 200), _row(10, 10, 144, 24), _row(9, 9, 40, 30, 3, 2)):
        op, shapes = layer_graph(row)
        m = filter_operand(op)
        for d in packed_drafts(op, be, shapes, matrix=m)[:3]:
            rep = cycles(lower(op, d, be, shapes, matrix=m, resident=(m,)), be)
            assert stream_cycles(op, d, be, shapes, m) == pytest.approx(float(rep.total_cycles - rep.merge), abs=0.5)


def test_the_tuner_simulates_and_picks_packed_drafts():
    """Every mode simulates the family's packed drafts (`Family.extra_drafts`): on a squeeze-excite
    FC (144 -> 6, one pixel) with the weight in the banks the packed mapping beats every tiling the
    cost model ranks on the fork's controller; the choice's program computes the layer, and the
    report names the mapping."""
    from pimjax.partition.draft import describe_draft
    from pimjax.search.tuner import Tuner
    be = _backend("newton++", "pimflow")
    op, shapes = layer_graph(_row(1, 1, 144, 6))
    m = filter_operand(op)
    ch = Tuner().choose(op, be, shapes, matrix=m, resident=(m,))
    assert ch.draft.pack >= 1
    packed = [float(cycles(lower(op, d, be, shapes, matrix=m, resident=(m,)), be).total_cycles)
              for d in packed_drafts(op, be, shapes, matrix=m)]
    assert float(ch.report.total_cycles) == pytest.approx(min(packed), rel=1e-6)
    arrays, by_value = _operands(op, shapes, np.random.default_rng(3))
    want = by_value[0] @ by_value[1]
    got = np.asarray(execute(ch.program, *arrays, arithmetic="wide"))
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
    assert "PIMFlow's packed mapping" in describe_draft(op, ch.draft)
    exhaustive = Tuner(mode="exhaustive").choose(op, be, shapes, matrix=m, resident=(m,))
    assert exhaustive.draft.pack >= 1 and float(exhaustive.report.total_cycles) <= float(ch.report.total_cycles)


def test_no_dram_bound_under_the_forks_controller():
    """The Newton lower bound is derived from pimjax's DRAM rules; the fork charges less (no
    precharge before a G_ACT, no bus time for READRES), so under its controller the family gives
    no bound (no pruning) -- here a draft the DRAM bound would over-estimate is simulated faster."""
    from pimjax.backends.newton.bounds import lower_bound
    from pimjax.partition import drafts
    op, shapes = layer_graph(_row(1, 1, 1280, 500))
    m = filter_operand(op)
    dram, fork_be = _backend("newton++"), _backend("newton++", "pimflow")
    table = drafts(op, dram, shapes=shapes)
    assert lower_bound(op, table, fork_be, shapes, dict(matrix=m, resident=(m,))) is None
    b = lower_bound(op, table, dram, shapes, dict(matrix=m, resident=(m,)))
    over = [float(b[i]) / float(cycles(lower(op, table[i], fork_be, shapes, matrix=m, resident=(m,)),
                                      fork_be).total_cycles) for i in range(0, len(table), max(1, len(table) // 12))]
    assert max(over) > 1.0
