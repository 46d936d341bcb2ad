"""Samsung HBM-PIM (Aquabolt-XL): a 16-lane fp16 SIMD unit per bank pair,
programmed through all-bank-mode column commands and a CRF microkernel.

    isa.py       its commands' DRAM timing classes
    lower.py     Draft -> Program (the SIMD unit's microkernel, GRF blocking)
    srf.py       the elementwise body compiler (CRF steps, SRF coefficients)
    execute.py   the value interpreter of its records
    baseline.py  the Samsung simulator's mapping
    bounds.py    a lower bound on a contraction draft's cycles (exhaustive tuning's pruning)
"""
from ...family.hooks import EVAL_ELEM, EVAL_GEMV, EVAL_MMTV
from .. import ControllerModel, Family, TrainingShapes, register
from ..dcc.engine import broadcast_registers_draft, dcc_lowering, dcc_timer
from .baseline import hbm_pim_baseline
from .bounds import lower_bound
from .execute import execute_hbm_pim
from .isa import TIMING_CLASSES
from .lower import DEFAULT_OPTIONS, lower_hbm_pim

FAMILY = register(Family(
    name="hbm-pim", lower=dcc_lowering(lower_hbm_pim, "hbmpim", broadcast_registers_draft), options=frozenset(DEFAULT_OPTIONS) | {"result_dtype"},
    timing_classes=TIMING_CLASSES,
    execute=execute_hbm_pim, baseline=hbm_pim_baseline, kernels=("gemv", "red", "va", "relu", "mmtv"),
    lower_bound=lower_bound,
    # simulator="dcc": DCC's HBM-PIM Ramulator2 fork times the draft's tiling (`backends/dcc/engine.py`)
    program_controllers={"dcc": dcc_timer("hbmpim")},
    # its cost model is trained on the fork's labels, on the kernels DCC has traces for
    controller_models={"dcc": ControllerModel(options={"simulator": "dcc"}, kernels=("gemv", "mmtv", "red", "va"))},
    training_shapes=TrainingShapes(
        shapes_per_kernel=40,
        heldout={"gemv": EVAL_GEMV, "red": EVAL_ELEM, "va": EVAL_ELEM, "relu": EVAL_ELEM, "mmtv": EVAL_MMTV},
        train_hw=({"channels": 16}, {"channels": 32}), heldout_hw=({"channels": 48}, {"channels": 8}),
        # five members: two networks' spread was a poor uncertainty over a rough estimate (costmodel/README)
        members=5, broad_top=2)))
