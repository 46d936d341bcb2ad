"""Each timing constraint of `sim.cycles` in isolation, with the expected
numbers derived here from the timing parameters (semantics: sim/timing.py)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pimjax.hw import get_backend, stack_variants
from pimjax.lower.program import Op, Phase
from pimjax.sim.scan import scan_stream, timing_vector

BE = get_backend("hbm-pim")
T = {k: float(v) for k, v in timing_vector(BE.timing).items()}


def run(records, refresh=False, timing=None):
    """End time of a record list on one pseudo-channel (refresh off by default)."""
    t = timing_vector(timing or BE.timing)
    fields = ("op", "bank", "row", "n", "phase", "resident", "pre", "sync")
    arr = {f: jnp.asarray([r.get(f, 0) if f != "phase" else r.get(f, int(Phase.COMPUTE))
                           for r in records], jnp.int32) for f in fields}
    out = scan_stream(arr, t, BE.group.banks, BE.group.banks_per_bank_group, refresh)
    return float(out["end"]), np.asarray(out["counts"])


def rd(bank, row, n=1, **kw):
    return dict(op=int(Op.RD), bank=bank, row=row, n=n, **kw)


def wr(bank, row, n=1, **kw):
    return dict(op=int(Op.WR), bank=bank, row=row, n=n, **kw)


def test_first_read_activates_the_row():
    end, counts = run([rd(0, 5)])
    assert end == T["tRCDRD"] + T["tCL"] + T["tBL"]           # ACT at 0, RD at tRCD
    assert counts[0] == 1                                      # one ACT


def test_row_hit_costs_tccd():
    one, _ = run([rd(0, 5)])
    two, counts = run([rd(0, 5), rd(0, 5)])
    assert two - one == T["tCCD_L"]                            # same bank (group): tCCD_L
    assert counts[0] == 1                                      # no second ACT
    other_bg, _ = run([rd(0, 5), rd(4, 5)])                    # bank 4 is in bank group 1
    # the second bank's own ACT (tRRD_S after the first) + tRCD bounds its read
    assert other_bg == max(T["tCCD_S"] + T["tRCDRD"],
                           T["tRRD_S"] + T["tRCDRD"]) + T["tCL"] + T["tBL"]


def test_repeat_count_spaces_columns():
    end, counts = run([rd(0, 5, n=8)])
    assert end == T["tRCDRD"] + 7 * T["tCCD_L"] + T["tCL"] + T["tBL"]
    assert counts[1] == 8
    streamed, _ = run([dict(op=int(Op.RD_S), bank=0, row=5, n=8)])
    assert streamed == T["tRCDRD"] + 7 * T["tCCD_S"] + T["tCL"] + T["tBL"]


def test_row_miss_costs_precharge_and_activate():
    # RD row 5 at tRCD; PRE at max(ACT + tRAS, RD + tRTP); ACT row 6 tRP later; RD tRCD later
    end, counts = run([rd(0, 5), rd(0, 6)])
    t_rd1 = T["tRCDRD"]
    t_pre = max(0 + T["tRAS"], t_rd1 + T["tRTP_S"])
    assert end == max(t_pre + T["tRP"], T["tRC"]) + T["tRCDRD"] + T["tCL"] + T["tBL"]
    assert counts[0] == 2 and counts[7] == 1


def test_write_recovery_before_precharge():
    end, _ = run([wr(0, 5), rd(0, 6)])
    t_wr = T["tRCDWR"]
    t_pre = max(T["tRAS"], t_wr + T["tWL"] + T["tBL"] + T["tWR"])
    assert end == t_pre + T["tRP"] + T["tRCDRD"] + T["tCL"] + T["tBL"]


def test_read_write_turnarounds():
    rw, _ = run([rd(0, 5), wr(0, 5)])
    t_wr = T["tRCDRD"] + T["tCL"] + T["tBL"] + T["tRTRS"] - T["tWL"]
    assert rw == t_wr + T["tWL"] + T["tBL"]
    wr_rd, _ = run([wr(0, 5), rd(0, 5)])
    t_rd = T["tRCDWR"] + T["tWL"] + T["tBL"] + T["tWTR_L"]       # same bank group: tWTR_L
    assert wr_rd == t_rd + T["tCL"] + T["tBL"]


def test_fifth_activate_inside_tfaw_waits():
    be = BE.replace(timing=BE.timing.replace(tFAW=40.0, tRRD_S=2.0, tRRD_L=2.0))
    t = {k: float(v) for k, v in timing_vector(be.timing).items()}
    # five reads to five banks in different bank groups where possible
    recs = [rd(b, 1) for b in (0, 4, 8, 12, 1)]
    end, counts = run(recs, timing=be.timing)
    acts = [0.0, 2.0, 4.0, 6.0]                                  # tRRD_S apart
    fifth = max(acts[-1] + t["tRRD_S"], acts[0] + t["tFAW"])     # the fifth waits for tFAW
    assert counts[0] == 5
    assert end == fifth + t["tRCDRD"] + t["tCL"] + t["tBL"]


def test_all_bank_pim_columns_are_tccd_ab_apart():
    recs = [dict(op=int(Op.PIM_RD), bank=0, row=3, n=32)]
    end, counts = run(recs)
    assert end == T["tRCDRD"] + 31 * T["tCCD_AB"] + T["tCCD_AB"]
    assert counts[3] == 32 and counts[5] == 0                    # no external data bus


def test_refresh_blocks_for_trp_plus_trfc():
    be = BE.replace(timing=BE.timing.replace(tREFI=100.0, tREF0=0.0, tRFC=50.0))
    t = {k: float(v) for k, v in timing_vector(be.timing).items()}
    recs = [rd(0, 5, n=30), rd(0, 5)]          # the first ends after the 100-cycle deadline
    end, counts = run(recs, refresh=True, timing=be.timing)
    t_last = t["tRCDRD"] + 29 * t["tCCD_L"]
    first_end = t_last + t["tCL"] + t["tBL"]
    assert first_end >= 100
    ref_start = max(100.0, max(0 + t["tRAS"], t_last + t["tRTP_S"]))
    ref_end = ref_start + t["tRP"] + t["tRFC"]
    assert counts[4] == 1
    assert end == ref_end + t["tRCDRD"] + t["tCL"] + t["tBL"]    # row closed: ACT again


def test_sync_holds_row_commands_until_everything_ended():
    free, _ = run([rd(0, 5, n=4), rd(4, 7)])
    synced, _ = run([rd(0, 5, n=4), rd(4, 7, sync=1)])
    first_end = T["tRCDRD"] + 3 * T["tCCD_L"] + T["tCL"] + T["tBL"]
    assert synced == first_end + T["tRCDRD"] + T["tCL"] + T["tBL"]
    assert free < synced


def test_vmap_over_timing_variants():
    variants = stack_variants([BE.timing.replace(tRP=float(v)) for v in (14, 20, 26)])
    t = timing_vector(variants)
    recs = [rd(0, 5), rd(0, 6)]
    fields = ("op", "bank", "row", "n", "phase", "resident", "pre", "sync")
    arr = {f: jnp.asarray([r.get(f, 0) for r in recs], jnp.int32) for f in fields}
    ends = jax.vmap(lambda tt: scan_stream(arr, tt, 16, 4, False)["end"])(t)
    t_pre = max(T["tRAS"], T["tRCDRD"] + T["tRTP_S"])
    expect = [max(t_pre + v, T["tRC"]) + T["tRCDRD"] + T["tCL"] + T["tBL"] for v in (14, 20, 26)]
    assert len(set(expect)) == 3                     # tRC does not hide the tRP variants
    np.testing.assert_array_equal(np.asarray(ends), np.asarray(expect, np.float32))


@pytest.mark.parametrize("middle", [[], [Op.BARRIER]])
def test_refresh_on_a_barrier_still_blocks_the_banks(middle):
    """The refresh deadline passes during the first MAC run; the next record
    (a BARRIER that touches no bank, or the PREA itself) takes the refresh,
    and the PREA and the second ACTAB wait until it ends: the program is
    longer by the refresh's tRP + tRFC, with or without the barrier."""
    be = get_backend("attacc")
    timing = be.timing.replace(tREFI=1000.0, tREF0=100.0, tRFC=50.0)
    t = {k: float(v) for k, v in timing_vector(timing).items()}
    recs = ([dict(op=int(Op.ACTAB), row=0, n=1), dict(op=int(Op.MACAB), row=0, n=32)]
            + [dict(op=int(op), n=1) for op in middle]
            + [dict(op=int(Op.PREA), n=1), dict(op=int(Op.ACTAB), row=1, n=1),
               dict(op=int(Op.MACAB), row=1, n=32)])
    fields = ("op", "bank", "row", "n", "phase", "resident", "pre", "sync")
    arr = {f: jnp.asarray([r.get(f, 0) if f != "phase" else int(Phase.COMPUTE) for r in recs], jnp.int32)
           for f in fields}
    geo = (be.group.banks, be.group.banks_per_bank_group)
    off = scan_stream(arr, timing_vector(timing), *geo, False)
    on = scan_stream(arr, timing_vector(timing), *geo, True)
    first_end = t["tRCDRD"] + 32 * t["tCCD_AB"]
    assert first_end >= 100 and float(on["counts"][4]) == 1
    # refresh: all banks precharged at max(deadline, tRAS after the ACTAB, tRTP_L after the last MAC)
    ref_start = max(100.0, t["tRAS"], t["tRCDRD"] + 31 * t["tCCD_AB"] + t["tRTP_L"])
    ref_end = ref_start + t["tRP"] + t["tRFC"]
    # after it: the PREA (banks already closed), tRP, the ACTAB, tRCD, 32 MACs
    assert float(on["end"]) == ref_end + t["tRP"] + t["tRCDRD"] + 32 * t["tCCD_AB"]
    assert float(on["end"]) > float(off["end"])


def test_trc_spaces_two_activations_of_a_bank():
    """ACT -> ACT of one bank waits tRC even when tRAS + tRP is shorter."""
    timing = BE.timing.replace(tRC=float(T["tRAS"] + T["tRP"] + 40))
    t = {k: float(v) for k, v in timing_vector(timing).items()}
    end, _ = run([rd(0, 5), rd(0, 6)], timing=timing)
    t_pre = max(t["tRAS"], t["tRCDRD"] + t["tRTP_S"])
    assert t_pre + t["tRP"] < t["tRC"]
    assert end == t["tRC"] + t["tRCDRD"] + t["tCL"] + t["tBL"]
    # ACTAB after ACTAB: tRC after the first
    be = get_backend("attacc")
    timing = be.timing.replace(tRC=200.0)
    recs = [dict(op=int(Op.ACTAB), row=0, n=1), dict(op=int(Op.PREA), n=1), dict(op=int(Op.ACTAB), row=1, n=1)]
    fields = ("op", "bank", "row", "n", "phase", "resident", "pre", "sync")
    arr = {f: jnp.asarray([r.get(f, 0) if f != "phase" else int(Phase.COMPUTE) for r in recs], jnp.int32)
           for f in fields}
    out = scan_stream(arr, timing_vector(timing), be.group.banks, be.group.banks_per_bank_group, False)
    assert float(out["end"]) == 200.0 + float(timing.tRCDRD)


def test_all_bank_activations_count_and_cost_per_bank():
    """ACTAB / PREA open / close every bank: counts and energy per bank."""
    be = get_backend("attacc")
    recs = [dict(op=int(Op.ACTAB), row=0, n=1), dict(op=int(Op.MACAB), row=0, n=4), dict(op=int(Op.PREA), n=1)]
    fields = ("op", "bank", "row", "n", "phase", "resident", "pre", "sync")
    arr = {f: jnp.asarray([r.get(f, 0) if f != "phase" else int(Phase.COMPUTE) for r in recs], jnp.int32)
           for f in fields}
    out = scan_stream(arr, timing_vector(be.timing), be.group.banks, be.group.banks_per_bank_group, False)
    counts = np.asarray(out["counts"])
    assert counts[0] == be.group.banks and counts[7] == be.group.banks and counts[3] == 4


def _three_engines(recs, timing, refresh=True):
    """(end, REF count) of one record list on the scan, the native engine and
    the reference model."""
    from pimjax.sim.native import RECORD_FIELDS, time_streams, timing_table
    from pimjax.sim.reference import simulate
    t = {k: float(v) for k, v in timing_vector(timing).items()}
    full = [{f: r.get(f, int(Phase.COMPUTE) if f == "phase" else 0)
             for f in ("op", "bank", "row", "n", "phase", "resident", "pre", "sync")} for r in recs]
    scan_end, scan_counts = run(recs, refresh=refresh, timing=timing)
    ref = simulate(full, t, BE.group.banks, BE.group.banks_per_bank_group, refresh)
    rec = np.array([[r[f] for r in full] for f in RECORD_FIELDS], np.int32)
    nat = time_streams(rec, np.zeros(1, np.int64), np.array([len(full)]), np.zeros(1, np.int64), timing_table(t),
                       BE.group.banks, BE.group.banks_per_bank_group, refresh)
    out = {(scan_end, float(scan_counts[4])), (float(ref["end"]), float(ref["counts"][4])),
           (float(nat["end"][0]), float(nat["counts"][0][4]))}
    assert len(out) == 1, out
    return out.pop()


def test_refresh_waits_past_a_wave_of_fresh_activations():
    """A refresh falls due during a wave of single-bank reads, each opening a
    bank of another bank group tRRD_S after the last (HBM-PIM's park-out):
    every open bank was activated less than tRAS ago, so its precharge cannot
    issue yet and the controller keeps issuing the wave (the Samsung
    simulator's DRAMSim2 controller: the refresh's PREs take priority only
    once issuable); the refresh comes after the last command, outside the
    run: the wave takes as long as without refresh."""
    timing = BE.timing.replace(tREFI=1000.0, tREF0=20.0, tRFC=50.0)
    t = {k: float(v) for k, v in timing_vector(timing).items()}
    wave = [rd(b, 9) for b in (0, 4, 8, 12)]
    assert 3 * t["tRRD_S"] < t["tREFW"]                             # a fresh wave (tREFW = tRAS)
    no_ref, _ = run(wave, timing=timing)
    assert no_ref > 20.0                                            # the deadline falls inside it
    assert _three_engines(wave, timing) == (no_ref, 0.0)
    # a record that opens no row (a hit on bank 0) takes it: all banks precharged tRAS after the
    # wave's last ACT, tRP + tRFC, then bank 0 activates its row again
    end, refs = _three_engines(wave + [rd(0, 9)], timing)
    last_act = 3 * t["tRRD_S"]
    assert refs == 1.0
    assert end == last_act + t["tRAS"] + t["tRP"] + t["tRFC"] + t["tRCDRD"] + t["tCL"] + t["tBL"]


def test_refresh_does_not_wait_for_activations_tras_apart():
    """Activations spaced at least tREFW apart are no wave: a refresh due
    before such a record is taken there (it only waits for the open banks'
    precharges); with tREFW = 0 (a controller whose refresh holds every
    later request: Ramulator's) the refresh never waits for a wave."""
    timing = BE.timing.replace(tREFI=1000.0, tREF0=20.0, tRFC=50.0, tRRD_S=float(T["tREFW"]),
                               tRRD_L=float(T["tREFW"]), tFAW=float(4 * T["tREFW"]))
    t = {k: float(v) for k, v in timing_vector(timing).items()}
    end, refs = _three_engines([rd(0, 9), rd(4, 9)], timing)
    assert refs == 1.0
    # bank 0 precharged at max(deadline, tRAS after its ACT, tRTP after its read); bank 4 opens after
    assert end == max(20.0, t["tRAS"], t["tRCDRD"] + t["tRTP_S"]) + t["tRP"] + t["tRFC"] \
        + t["tRCDRD"] + t["tCL"] + t["tBL"]
    blocking = BE.timing.replace(tREFI=1000.0, tREF0=20.0, tRFC=50.0, tREFW=0.0)
    wave = [rd(b, 9) for b in (0, 4, 8, 12)]
    _, refs = _three_engines(wave, blocking)
    assert refs == 1.0
