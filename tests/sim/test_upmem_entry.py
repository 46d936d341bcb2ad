"""The UPMEM time model's entry points refuse what they cannot time honestly:
a program lowered for another backend, a backend whose cores are not DPUs,
and (for the sweep) a backend that is not a stacked batch of variants.  Each
case used to return numbers (or an IndexError)."""
from __future__ import annotations

import pytest

from pimjax.backends import baseline
from pimjax.backends.upmem.cycles import cycles_upmem, sweep_upmem
from pimjax.hw import get_backend, stack_variants
from pimjax.lower import lower
from tests.partition.helpers import gemv, vadd

UPMEM = get_backend("upmem", dpus=64)
HBM = get_backend("hbm-pim", channels=4)


@pytest.fixture(scope="module")
def programs():
    up_op, hbm_op = vadd(4096), gemv(64, 64)
    return lower(up_op, baseline(up_op, UPMEM), UPMEM), lower(hbm_op, baseline(hbm_op, HBM), HBM)


def test_sweep_refuses_a_program_of_another_backend(programs):
    _, hbm_prog = programs
    with pytest.raises(ValueError, match="lowered for hbm-pim cannot be timed on upmem"):
        sweep_upmem(hbm_prog, stack_variants([UPMEM, UPMEM]))


def test_sweep_refuses_a_backend_that_is_not_upmem(programs):
    up_prog, hbm_prog = programs
    with pytest.raises(ValueError, match="lowered for upmem cannot be timed on hbm-pim"):
        sweep_upmem(up_prog, stack_variants([HBM, HBM]))
    with pytest.raises(ValueError, match="times UPMEM"):
        sweep_upmem(hbm_prog, stack_variants([HBM, HBM]))


def test_cycles_refuses_a_backend_that_is_not_upmem(programs):
    up_prog, hbm_prog = programs
    with pytest.raises(ValueError, match="lowered for upmem cannot be timed on hbm-pim"):
        cycles_upmem(up_prog, HBM)
    with pytest.raises(ValueError, match="times UPMEM"):
        cycles_upmem(hbm_prog, HBM)
    # named upmem but with command-driven cores: not a DPU, whatever the name says
    not_dpus = UPMEM.replace(core=UPMEM.core.replace(programmable=False))
    with pytest.raises(ValueError, match="times UPMEM"):
        cycles_upmem(up_prog, not_dpus)


def test_sweep_needs_a_stacked_batch(programs):
    up_prog, _ = programs
    with pytest.raises(ValueError, match="leading.*stack_variants|cycles_upmem"):
        sweep_upmem(up_prog, UPMEM)                              # one backend, not a batch
    half = stack_variants([UPMEM, UPMEM]).replace(energy=UPMEM.energy)
    with pytest.raises(ValueError, match="leading"):
        sweep_upmem(up_prog, half)                               # some leaves unstacked


def test_valid_calls_still_time(programs):
    up_prog, _ = programs
    one = cycles_upmem(up_prog, UPMEM)
    slow = UPMEM.replace(timing=UPMEM.timing.replace(dpu_clock_ghz=0.175))
    rep = sweep_upmem(up_prog, stack_variants([UPMEM, slow]))
    assert float(rep.total_cycles[0]) == pytest.approx(float(one.total_cycles), rel=1e-6)
    assert float(rep.compute[1]) > float(rep.compute[0])        # half the DPU clock, a longer kernel
