"""PIMFlow's Newton++ command optimisations (§4.1, §4.3.1): GWRITE latency
hiding (`newton(gwrite_hiding=True)`: rule BUF_ACT off), multiple global
buffers (`buffers=4`), and the channel scheduling of small layers (the
partition search's group allocation).

* a tiny PREA -> GWRITE x 32 -> G_ACT -> COMP program: the time hiding saves,
  derived here from the Timing parameters, on all three engines;
* the closed-form walk (`backends/newton/time.py`) equals lowering +
  simulation with hiding on (exactly, as without);
* hiding never makes a lowered program slower, and makes some faster.
"""
import numpy as np
import pytest

from pimjax.backends.newton.time import draft_plans, newton_phases
from pimjax.costmodel.dataset import try_lower
from pimjax.costmodel.kernels import case_drafts, make_case
from pimjax.hw.presets import NEWTON_CONFIGS, get_backend, newton_config
from pimjax.lower.program import Op, Phase
from pimjax.sim.cycles import cycles
from pimjax.sim.native import RECORD_FIELDS, time_streams, timing_table
from pimjax.sim.reference import simulate
from pimjax.sim.scan import timing_vector

OFF = get_backend("newton")
ON = get_backend("newton", gwrite_hiding=True)


def _record(op, bank=0, row=-1, n=1, phase=Phase.COMPUTE):
    return dict(op=int(op), bank=bank, row=row, n=n, phase=int(phase), resident=0, pre=0, sync=0)


def _tiny(cols: int, per_bg: int, n_bg: int) -> list:
    """PREA, a GWRITE per buffer column (bank groups alternating, as the
    lowering names them), one G_ACT of row 0 and a 32-column COMP."""
    recs = [_record(Op.PREA)]
    recs += [_record(Op.GWRITE, bank=(j % n_bg) * per_bg, phase=Phase.REARRANGE) for j in range(cols)]
    return recs + [_record(Op.G_ACT, row=0), _record(Op.COMP, row=0, n=32)]


def _three_engines(recs, be):
    """(end, buckets) of the reference model, the native loop and the scan (refresh off)."""
    import jax
    import jax.numpy as jnp

    from pimjax.sim.scan import features_of, scan_stream
    g = be.group
    t = {k: float(v) for k, v in timing_vector(be.timing).items()}
    ref = simulate(recs, t, g.banks, g.banks_per_bank_group, refresh=False)
    rec = np.array([[r[f] for r in recs] for f in RECORD_FIELDS], np.int32)
    nat = time_streams(rec, np.array([0]), np.array([len(recs)]), np.zeros(1, np.int64), timing_table(t),
                       g.banks, g.banks_per_bank_group, False)
    arr = {k: jnp.asarray([r[k] for r in recs], jnp.int32) for k in recs[0]}
    feats = features_of(np.asarray(arr["op"]))
    scan = jax.jit(lambda r, tt: scan_stream(r, tt, g.banks, g.banks_per_bank_group, False, feats))(
        arr, timing_vector(be.timing))
    return [ref["end"], float(nat["end"][0]), float(scan["end"])]


@pytest.mark.parametrize("cols", [32, 8, 2])
def test_tiny_gwrite_gact_program_saves_the_derived_time(cols):
    """Without hiding the G_ACT issues after the last GWRITE column; its four
    bank groups open (n_bg - 1) tFAW apart and the COMP follows tRCD later.
    With hiding the G_ACT issues tRP after the PREA, and the COMP waits only
    for the later of the banks (tRCD after it) and the buffer data (the
    write-to-read turnaround after the last GWRITE column)."""
    t = OFF.timing
    g = OFF.group
    n_bg = g.banks // g.banks_per_bank_group
    recs = _tiny(cols, g.banks_per_bank_group, n_bg)
    # PREA at 0; GWRITE columns from 0, tCCD_S apart (alternating bank groups)
    last_gw = (cols - 1) * t.tCCD_S
    stagger = (n_bg - 1) * t.tFAW
    # the COMP (bank 0, bank group 0) after the last GWRITE (bank group of column cols - 1)
    wtr = t.tWL + t.tBL + (t.tWTR_L if (cols - 1) % n_bg == 0 else t.tWTR_S)
    gap = t.tCCD_L if (cols - 1) % n_bg == 0 else t.tCCD_S
    comp_off = max(max(t.tRP, last_gw) + stagger + t.tRCDRD, last_gw + wtr, last_gw + gap)
    comp_on = max(t.tRP + stagger + t.tRCDRD, last_gw + wtr, last_gw + gap)
    tail = 32 * t.tCCD_AB                                  # 32 columns tCCD_AB apart + the last one's slot
    for end in _three_engines(recs, OFF):
        assert end == comp_off + tail
    for end in _three_engines(recs, ON):
        assert end == comp_on + tail
    saving = comp_off - comp_on
    if cols == 32:      # a full 1 KB buffer: the whole staggered activation hides under the GWRITEs
        assert saving == min(last_gw - t.tRP, stagger + t.tRCDRD - wtr) > 0


def test_options_and_named_configurations():
    """gwrite_hiding is a Timing switch (default off: the default preset is
    unchanged); it needs GPU-only channels; the named configurations are
    preset options."""
    assert float(OFF.timing.gwrite_hiding) == 0.0 and float(ON.timing.gwrite_hiding) == 1.0
    assert OFF.variant == "pimflow-gb4" and ON.variant == "pimflow-gb4-gwh"
    assert OFF.timing.replace(gwrite_hiding=1.0) == ON.timing
    with pytest.raises(ValueError, match="GPU-only channels"):
        get_backend("newton", channels=32, total_channels=32, gwrite_hiding=True)
    for name, opts in NEWTON_CONFIGS.items():
        be = newton_config(name)
        assert be.group.n_global_buffers == opts["buffers"]
        assert float(be.timing.gwrite_hiding) == float(opts["gwrite_hiding"])
    assert newton_config("newton++", channels=8).system.groups_per_device * \
        newton_config("newton++", channels=8).system.n_devices == 8
    with pytest.raises(ValueError, match="valid names"):
        newton_config("newton+++")


@pytest.mark.parametrize("backend,shape,seed", [
    (ON, (256, 2048), 0),
    (newton_config("newton+gw"), (512, 1024), 1),          # one 2 KB buffer: 64-column chunks
])
def test_closed_form_equals_simulator_with_hiding(backend, shape, seed):
    """The closed-form phases equal lowering + simulation (refresh off) with
    GWRITE latency hiding on, draft for draft; hiding never slows a lowered
    program and speeds some up."""
    case = make_case(backend, "gemv", shape)
    table = case_drafts(case, backend)
    broadcast = [i for i in range(len(table)) if table[i].granularity == "broadcast"]
    rows = np.random.default_rng(seed).permutation(broadcast)[:6]
    ph = newton_phases(*draft_plans(case.op, table.take(rows), case.shapes, backend), backend)
    off = backend.replace(timing=backend.timing.replace(gwrite_hiding=0.0))
    faster = 0
    for j, i in enumerate(rows):
        prog = try_lower(case, table[int(i)], backend)
        rep = cycles(prog, backend, refresh=False)
        assert float(rep.compute) == ph["compute"][j] and float(rep.readback) == ph["readback"][j]
        assert float(rep.rearrangement) == ph["pre"][j] + ph["k_rearr"][j]
        base = cycles(prog, off, refresh=False)
        assert float(rep.total_cycles) <= float(base.total_cycles)
        faster += float(rep.total_cycles) < float(base.total_cycles)
    assert faster >= 1


def test_steady_skip_with_hiding_equals_walking_every_command():
    """The steady-state skip stays exact with hiding on (the state it
    compares holds the last GWRITE and bank-array columns apart)."""
    plan = {"n_b": 2, "n_v": 5, "n_o": 37, "n_rc": 70, "cc": 32, "t_in": 3, "kv": 4, "ki": 1, "lo": 1,
            "is_flow": 0, "passes": 2}
    for is_flow in (0, 1):
        p = {q: np.array([v]) for q, v in dict(plan, is_flow=is_flow).items()}
        args = (p, np.array([16]), np.array([False]), ON)
        fast, slow = newton_phases(*args), newton_phases(*args, steady=False)
        for q in fast:
            assert fast[q][0] == slow[q][0], q


def test_small_layers_spread_over_every_channel():
    """PIMFlow §4.3.1's command scheduling of small (1x1) layers is the draft
    space's group allocation: a 1x1 CONV with fewer output channels (8) than
    PIM channels (16) is tuned onto all 16 -- the channels split its pixels
    (G_ACT / READRES granularity) or its reduction (COMP granularity), not
    only its output channels -- and runs faster there than tuned onto 8 or 4
    channels (tuned and simulated: `Tuner.choose`'s report)."""
    from pimjax.kernels import kernel_op
    from pimjax.search.tuner import Tuner
    op, shapes = kernel_op("conv", [7, 7, 64, 8, 1])       # loop vars n, h, w, f (8), c
    names = [lv.name for lv in op.loop_vars]
    ns = {}
    for channels in (16, 8, 4):
        c = Tuner().choose(op, newton_config("newton++", channels=channels), shapes, resident=(1,))
        groups = {v: p.groups for v, p in zip(names, c.draft.parts)}
        assert int(np.prod(list(groups.values()))) == channels          # every channel used
        if channels == 16:
            assert groups["f"] < 16 and np.prod([g for v, g in groups.items() if v != "f"]) > 1
        ns[channels] = float(c.report.total_ns)
    assert ns[16] < ns[8] < ns[4]
