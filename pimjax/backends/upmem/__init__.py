"""UPMEM DPUs: a programmable in-order core per bank (integers only) with
its own instruction stream, WRAM scratchpad and MRAM DMA.

    isa.py       its commands' DRAM timing classes
    lower.py     Draft -> Program (host transfers, DPU kernel records)
    execute.py   the value interpreter of its records
    baseline.py  PrIM's mapping (and its grid over DPU counts)
    bounds.py    a lower bound on a draft's cycles (branch and bound)
    cycles.py    its own time model (DPU pipeline, MRAM DMA, host link)
    dpu.py       the DPU kernel's cycles in closed form (cost-model features)
    estimates.py dpu.py's closed form as the cost model's estimates (`Family.estimates`)
"""
from ...family.hooks import EVAL_ELEM
from .. import Family, TrainingShapes, register
from .baseline import upmem_baseline
from .bounds import lower_bound
from .cycles import cycles_upmem, sweep_upmem
from .estimates import upmem_estimates
from .execute import execute_upmem
from .isa import TIMING_CLASSES
from .lower import DEFAULT_OPTIONS, lower_upmem

FAMILY = register(Family(
    name="upmem", lower=lower_upmem, options=frozenset(DEFAULT_OPTIONS) | {"result_dtype"},
    timing_classes=TIMING_CLASSES,
    execute=execute_upmem, baseline=upmem_baseline, kernels=("gemv", "red", "va", "relu", "mmtv"),
    integer=True, cycles=cycles_upmem, sweep=sweep_upmem, lower_bound=lower_bound,
    estimates=upmem_estimates,
    training_shapes=TrainingShapes(
        shapes_per_kernel=32,
        heldout={"gemv": ((128, 128), (1000, 200)), "red": EVAL_ELEM[:6], "va": EVAL_ELEM[:6],
                 "relu": EVAL_ELEM[:6], "mmtv": ((1, 4, 64, 32),)},
        train_hw=({"dpus": 512},), heldout_hw=({"dpus": 1024}, {"dpus": 2560}),
        # its estimate walks the lowering exactly: a residual has nothing to learn on the broad cases
        members=2, broad_top=0)))
