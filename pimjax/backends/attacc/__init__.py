"""AttAcc: GEMV units at the bank, bank-group or buffer level of HBM3 and a
softmax unit per channel, for attention.

    isa.py       its commands' DRAM timing classes
    geometry.py   the three PIM levels' geometry and the tables the record streams share
    stream.py     the record stream (emitter, GEMV plans, placement, softmax buffer, the Program)
    lower.py      Draft -> Program for GEMVs and reductions (`lower_attacc`)
    attention.py  Draft -> Program for the fused score -> softmax -> context block
    execute.py    the value interpreter of its records
    baseline.py   AttAcc's open-source mapping
    reference.py  the AttAcc simulator's own programs (validation)

`simulator="dcc"` (`Group.controller = "dcc"`): DCC's AttAcc fork times the programs
(`backends/dcc/`, shared with hbm-pim).
"""
from ...family.hooks import EVAL_ELEM, EVAL_GEMV, EVAL_MMTV
from ...lower.patterns import match_attention
from .. import ControllerModel, Family, TrainingShapes, register
from ..dcc.engine import dcc_lowering, dcc_timer
from .attention import attention_op, lower_attention
from .baseline import attacc_baseline
from .execute import execute_attacc
from .geometry import DEFAULT_OPTIONS
from .isa import TIMING_CLASSES
from .lower import lower_attacc


def attention_blocks(graph) -> dict:
    """{first op index: block op indices} of the score -> softmax ->
    context blocks (`patterns.match_attention`); `attention_op` refuses
    those AttAcc's softmax unit cannot run (a mask or bias in the score
    epilogue: see `attention._epilogue_scale`)."""
    return {b[0]: b for b in match_attention(graph)}


FAMILY = register(Family(
    name="attacc", lower=dcc_lowering(lower_attacc, "attacc"), options=frozenset(DEFAULT_OPTIONS) | {"result_dtype"},
    timing_classes=TIMING_CLASSES,
    execute=execute_attacc, baseline=attacc_baseline, kernels=("gemv", "red", "mmtv", "attn"),
    attention_blocks=attention_blocks, lower_block=dcc_lowering(lower_attention, "attacc"),
    block_operands=attention_op, reduction_vector=True,
    # simulator="dcc": DCC's AttAcc Ramulator2 fork times the draft's tiling (`backends/dcc/engine.py`)
    program_controllers={"dcc": dcc_timer("attacc")},
    # its cost model is trained on the fork's labels, on the kernels DCC has traces for (no VA on AttAcc)
    controller_models={"dcc": ControllerModel(options={"simulator": "dcc"}, kernels=("gemv", "mmtv", "red"))},
    training_shapes=TrainingShapes(
        shapes_per_kernel=32,
        heldout={"gemv": EVAL_GEMV + ((1024, 1024), (2048, 512)), "red": EVAL_ELEM, "mmtv": EVAL_MMTV,
                 "attn": EVAL_MMTV},
        train_hw=({"stacks": 5}, {"variant": "bg-pc"}, {"variant": "buffer-pc"}),
        heldout_hw=({"stacks": 2}, {"variant": "bg-npc"}, {"variant": "bank-npc", "stacks": 3}),
        members=5, broad_top=2)))
