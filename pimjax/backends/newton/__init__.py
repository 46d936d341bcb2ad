"""SK hynix Newton / AiM and PIMFlow's Newton++: a MAC unit per bank fed
from a channel's global buffers (GWRITE, G_ACT, COMP, READRES).

    isa.py       its commands' DRAM timing classes
    lower.py     Draft -> Program (buffer loads, ganged activations, COMP, READRES)
    commands.py  the command helpers both lowerings (lower.py, packed.py) share, and the program's statistics
    execute.py   the value interpreter of its records
    baseline.py  PIMFlow's command generator's mapping
    counts.py    per-group command counts of a draft (cost-model features)
    time.py      the phase times of a draft in closed form, under the DRAM rule table (cost-model features)
    packed.py    PIMFlow's packed mapping (its artifact's command generator) as drafts (`Draft.pack`)
    fork.py      PIMFlow's Ramulator fork as a controller (`newton(simulator="pimflow")`)
    reference.py the artifact's layers as programs, against `../shared/reference/pimflow.csv`
    walk.py      time.py's walk compiled (numba), bit-identical
    bounds.py    a lower bound on a draft's cycles (the exhaustive tuner's branch and bound)
    estimates.py counts.py's and time.py's closed form as the cost model's estimates (`Family.estimates`)
"""
from ...family.hooks import EVAL_GEMV, EVAL_MMTV
from .. import Family, TrainingShapes, register
from .baseline import newton_baseline
from .bounds import lower_bound
from .estimates import newton_estimates
from .execute import execute_newton
from .fork import time_streams as fork_time_streams
from .isa import TIMING_CLASSES
from .lower import DEFAULT_OPTIONS, lower_newton, newton_options
from .packed import extra_drafts, lower_packed


def lower_any(op, draft, backend, shapes=None, **options):
    """Newton's lowering of `op` under `draft` (a `Program`): PIMFlow's packed mapping
    (`packed.lower_packed`) for a packed draft (`draft.pack`, its own geometry), else the GEMV
    lowering (`lower.lower_newton`).  Options as `lower_newton`'s."""
    if draft.pack:
        return lower_packed(op, draft, backend, shapes, **newton_options(op, options))
    return lower_newton(op, draft, backend, shapes, **options)


FAMILY = register(Family(
    name="newton", lower=lower_any,
    # "buffer_reuse" is Newton's name for register_reuse
    options=frozenset(DEFAULT_OPTIONS) | {"result_dtype", "buffer_reuse"},
    timing_classes=TIMING_CLASSES,
    execute=execute_newton, baseline=newton_baseline, kernels=("gemv", "mmtv", "gemm", "conv"),
    controllers={"pimflow": fork_time_streams}, extra_drafts=extra_drafts, lower_bound=lower_bound,
    estimates=newton_estimates,
    training_shapes=TrainingShapes(
        shapes_per_kernel=32,
        heldout={"gemv": EVAL_GEMV + ((1024, 1024), (2048, 512)), "mmtv": EVAL_MMTV[:4]},
        train_hw=({"channels": 8}, {"buffers": 1}), heldout_hw=({"channels": 4}, {"buffers": 2}),
        # broad cases: without them the model is 54 % off on an unseen LLM GEMV on 4 channels
        members=2, broad_top=2)))
