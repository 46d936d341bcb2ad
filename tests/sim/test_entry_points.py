"""The public timing entry points refuse what they cannot time honestly:
programs of another backend, UPMEM programs in the DRAM scan's sweep,
unstacked timing batches, refresh that leaves the banks no time."""
from __future__ import annotations

import numpy as np
import pytest

from pimjax.backends import baseline
from pimjax.backends.upmem.cycles import sweep_upmem
from pimjax.hw import get_backend, stack_variants
from pimjax.lower import lower
from pimjax.partition import drafts
from pimjax.sim.cycles import cycles, cycles_batch, sweep
from tests.partition.helpers import gemv, vadd


def _upmem_programs():
    be = get_backend("upmem", dpus=64)
    op = vadd(4096)
    table = drafts(op, be)
    idx = np.random.default_rng(0).choice(len(table), 3, replace=False)
    return be, [lower(op, table[int(i)], be) for i in idx]


def test_cycles_batch_on_upmem_uses_the_dpu_model():
    """cycles_batch used to run UPMEM programs through the DRAM scan (251
    cycles where the DPU model says 79 249)."""
    be, progs = _upmem_programs()
    batch = cycles_batch(progs, be)
    np.testing.assert_array_equal(np.asarray(batch.total_cycles),
                                  np.asarray([float(cycles(p, be).total_cycles) for p in progs]))


def test_sweep_on_upmem_points_to_sweep_upmem():
    be, progs = _upmem_programs()
    with pytest.raises(ValueError, match="sweep_upmem"):
        sweep(progs[0], stack_variants([be.timing, be.timing]), be)
    slow = be.replace(timing=be.timing.replace(dpu_clock_ghz=be.timing.dpu_clock_ghz / 2))
    rep = sweep_upmem(progs[0], stack_variants([be, slow]))
    assert float(rep.total_ns[1]) > float(rep.total_ns[0])          # a slower DPU clock costs time
    assert float(rep.total_cycles[0]) == pytest.approx(float(cycles(progs[0], be).total_cycles), rel=1e-6)


def test_programs_of_another_backend_are_refused():
    hbm, attacc = get_backend("hbm-pim", channels=4), get_backend("attacc", channels=2)
    op = gemv(256, 256)
    prog = lower(op, baseline(op, attacc), attacc)
    for time_it in (lambda: cycles(prog, hbm), lambda: cycles_batch([prog], hbm),
                    lambda: sweep(prog, stack_variants([hbm.timing]), hbm)):
        with pytest.raises(ValueError, match="lowered for attacc cannot be timed on hbm-pim"):
            time_it()
    with pytest.raises(ValueError, match="no programs"):
        cycles_batch([], hbm)


def test_sweep_needs_a_stacked_timing_batch():
    be = get_backend("hbm-pim", channels=4)
    op = gemv(64, 64)
    prog = lower(op, baseline(op, be), be)
    with pytest.raises(ValueError, match="leading"):
        sweep(prog, be.timing, be)                                  # one Timing, not a batch


@pytest.mark.parametrize("refi", [0.0, 100.0, 350.0])
def test_refresh_interval_must_exceed_the_refresh_time(refi):
    t = get_backend("hbm-pim").timing
    with pytest.raises(ValueError, match="tREFI"):
        t.replace(tREFI=refi, tRFC=350.0)
    assert float(t.replace(tREFI=351.0, tRFC=350.0).tREFI) == 351.0


def test_resident_placement_is_timed_like_the_same_transfer_per_call():
    """The one-time placement of a resident matrix costs at least the host's
    read of it (the floor per-call rearrangement has), and timing a resident
    program with `include_resident` equals the program lowered without
    residency: the same transfer either way."""
    from pimjax.kernels import kernel_op
    be = get_backend("hbm-pim", channels=4)
    op, shapes = kernel_op("gemv", (1024, 512))
    d = baseline(op, be)
    kept, moving = lower(op, d, be, shapes, resident=(0,)), lower(op, d, be, shapes)
    host = be.system.host
    floor = 1024 * 512 * 2 / (host.mem_bandwidth * host.bandwidth_efficiency) * 1e9 / float(be.timing.tCK)
    once = cycles(kept, be)
    assert float(once.resident_cycles) >= floor * (1 - 1e-6)
    assert float(cycles(kept, be, include_resident=True).total_cycles) == float(cycles(moving, be).total_cycles)
    assert float(once.total_cycles) < float(cycles(moving, be).total_cycles)
