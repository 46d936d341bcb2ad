"""Backend families: one folder each, one registry.

A `Backend` (`pimjax.hw`) describes hardware: counts, geometry, timing,
energy.  Its `family` names the *implementation* that knows how to program
that hardware: the lowering of drafts to command programs, the value
interpreter of those programs, the baseline mapping speedups are measured
against, the kernels its cost model is trained on, and (UPMEM) a time model
of its own.  Each family lives in one folder:

=============  ===========================================================
folder         family
=============  ===========================================================
`hbm_pim/`     "hbm-pim": Samsung HBM-PIM, a SIMD unit per bank pair
`attacc/`      "attacc": AttAcc's GEMV units and softmax unit (attention)
`newton/`      "newton": SK hynix Newton / AiM and PIMFlow's Newton++
`upmem/`       "upmem": UPMEM DPUs (their own instruction streams)
=============  ===========================================================

`dcc/` is not a family: DCC's simulator (its trace generators and
Ramulator2 forks), the "dcc" program controller the attacc and hbm-pim
families offer (`simulator="dcc"`).

Generic code never tests a backend's name: it asks `family_of(backend)`
for the family's `Family` record and calls what it holds.  A user-defined
backend is a `Backend` whose `family` is one of these (e.g.
`get_backend("hbm-pim").replace(name="lpddr5x-pim", ...)`): every stage then
works on it, with the hardware constants read from the Backend.  A new
family is a folder whose `__init__.py` builds a `Family` and calls
`register` (or a user's module doing the same); `FAMILY_MODULES` lists the
folders loaded on first use.
"""
from __future__ import annotations

from ..family import (  # noqa: F401
    FAMILIES,
    FAMILY_MODULES,
    PACKAGE,
    ControllerModel,
    EstimateInputs,
    Family,
    TrainingShapes,
    families,
    family_of,
    has_family,
    missing_family,
    own_time_model,
    register,
)


def baseline(op, backend):
    """The backend's default mapping of `op` as a Draft, by its family (None
    if it has none; a contraction of one tensor, `ones @ x`, has none: no
    vector operand)."""
    if op.kind == "contraction" and len(op.body_operands) < 2:
        return None
    return family_of(backend).baseline(op, backend)


__all__ = ["Family", "FAMILIES", "FAMILY_MODULES", "register", "families", "family_of", "has_family", "missing_family",
           "baseline", "own_time_model", "EstimateInputs", "TrainingShapes",
           "ControllerModel"]
