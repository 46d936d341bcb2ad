"""SK hynix Newton / AiM and PIMFlow's Newton++: a MAC unit per bank fed
from a channel's global buffers (GWRITE, G_ACT, COMP, READRES).

    isa.py       its commands' DRAM timing classes
    lower.py     Draft -> Program (buffer loads, ganged activations, COMP, READRES)
    execute.py   the value interpreter of its records
    baseline.py  PIMFlow's command generator's mapping
    counts.py    per-group command counts of a draft (cost-model features)
    time.py      the phase times of a draft in closed form, under the DRAM rule table (cost-model features)
    packed.py    PIMFlow's packed mapping (its artifact's command generator) as drafts (`Draft.pack`)
    fork.py      PIMFlow's Ramulator fork as a controller (`newton(simulator="pimflow")`)
    reference.py the artifact's layers as programs, against `../shared/reference/pimflow.csv`
    walk.py      time.py's walk compiled (numba), bit-identical
    bounds.py    a lower bound on a draft's cycles (the exhaustive tuner's branch and bound)
"""
from .. import Family, register
from .isa import TIMING_CLASSES
from .fork import time_streams as fork_time_streams
from .packed import extra_drafts
from .baseline import newton_baseline
from .bounds import lower_bound
from .execute import execute_newton
from .lower import DEFAULT_OPTIONS, lower_newton

FAMILY = register(Family(
    name="newton", lower=lower_newton,
    # "buffer_reuse" is Newton's name for register_reuse
    options=frozenset(DEFAULT_OPTIONS) | {"result_dtype", "buffer_reuse"},
    timing_classes=TIMING_CLASSES,
    execute=execute_newton, baseline=newton_baseline, kernels=("gemv", "mmtv", "gemm", "conv"),
    controllers={"pimflow": fork_time_streams}, extra_drafts=extra_drafts, lower_bound=lower_bound))
