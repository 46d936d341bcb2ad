"""The backend-family registry: the `Family` record of what a family
implements, and `register` / `family_of`, through which generic code reaches
a family (it never tests a backend's name).

A `Backend` (`pimjax.hw`) describes hardware; its `family` names the
implementation that programs it, one folder under `pimjax/backends/`
(lowering, value interpreter, timing hooks, baseline, estimates).  The
folders register themselves when imported; `family_of` imports the
`FAMILY_MODULES` of `PACKAGE` by name on first use.  So the registry sits at
the bottom of the import graph (`lower`, `sim` and the cost model dispatch
through it) while the families sit above the generic engines they use
(`sim.native`, `sim.cycles`): no import runs upward.  `hooks.py` holds the
records generic code and a family exchange through two hooks.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import PimCompileError
from .hooks import ControllerModel, EstimateInputs, TrainingShapes


@dataclass(frozen=True)
class Family:
    """What one backend family implements (see the module docstring).

    name:     the family's name (`Backend.family`).
    lower:    (op, draft, backend, shapes, **options) -> Program.
    options:  the lowering options `lower` knows (a typo is an error).
    execute:  (program, arrays, arithmetic) -> result array: the value
              interpreter of the family's command records.
    baseline: (op, backend) -> Draft | None: the default mapping speedups
              are measured against.
    kernels:  the kernel names (`costmodel.kernels`) its cost model covers.
    integer:  its cores compute integers only (kernels trace int32 data).
    cycles:   (program, backend, *, include_resident, refresh, engine) ->
              CycleReport when the family has a time model of its own
              (UPMEM's DPU pipeline), else None: the DRAM timing engines.
    sweep:    (program, backends_stacked, **kw) -> CycleReport: the own time
              model over stacked variants (None: the engines' `sweep`).
    attention_blocks: graph -> {first op index: block op indices} of the
              candidate attention blocks the family may fuse into one
              program (AttAcc's softmax unit), or None.
    lower_block: (ops, draft, backend, shapes, **options) -> Program for
              such a block, or None.
    block_operands: ops -> the fused block's PimOp (its operands are the
              block's inputs), or None; raises PimCompileError (the reason)
              for a candidate the hardware cannot fuse, whose ops `api` then
              plans one by one.
    timing_classes: {opcode: names of its timing-class flags} of the
              family's own commands (its `isa.py`), which the DRAM engines
              read (`pimjax.sim.timing.CLASS_TABLE`).
    reduction_vector: the family runs a reduction as a GEMV with a constant
              ones vector the host writes into the units' buffers (AttAcc's
              GEMV units): no operand of the op, so the cost model's
              closed-form estimate adds those writes.
    controllers: {name: time_streams} of the command-timing semantics the
              family offers besides pimjax's DRAM engines, chosen by
              `Group.controller` (newton: "pimflow", PIMFlow's Ramulator
              fork): each has `sim.native.time_streams`'s signature.
    extra_drafts: (op, backend, shapes, options) -> [Draft] the family's
              own fixed mappings beside the generated draft space (newton:
              PIMFlow's packed mapping); the tuner simulates every one of
              them (the cost model has not learnt them).
    program_controllers: {name: timer} of controllers that time a whole
              program rather than its record streams, chosen by
              `Group.controller` like `controllers` (attacc and hbm-pim:
              "dcc", DCC's Ramulator2 forks replaying the trace DCC's
              generator writes for the draft's tiling, `backends/dcc/`):
              each has `cycles`' signature and stands in for it.
    controller_models: {controller name: `hooks.ControllerModel`} of the
              program controllers whose configurations have a cost model of
              their own (`costmodel.configs.model_name`: "<family>.<controller>",
              trained on that controller's labels); a controller not listed
              ranks with the family's model.
    lower_bound: (op, table, backend, shapes, options) -> [n] cycles no
              draft of `table` can beat when simulated, or None (no bound
              for this op): the exhaustive tuner's branch and bound skips
              the drafts whose bound exceeds the best total found.
    estimates: (`hooks.EstimateInputs`) -> {name: [n] array} of the
              family's own closed-form estimates of a draft table, each
              replacing the cost model's generic one of that name
              (`hooks.ESTIMATE_KEYS`; {} when it has none for the op), or
              None: the generic estimates alone (`costmodel.features`).
    training_shapes: `hooks.TrainingShapes`, what its cost model is
              trained and judged on (`costmodel.kernels`, `.dataset`,
              `.broad`, `.train`).
    """
    name: str
    lower: Callable
    options: frozenset
    execute: Callable
    baseline: Callable
    kernels: tuple
    integer: bool = False
    cycles: Callable | None = None
    sweep: Callable | None = None
    attention_blocks: Callable | None = None
    lower_block: Callable | None = None
    block_operands: Callable | None = None
    timing_classes: dict = field(default_factory=dict)
    lower_bound: Callable | None = None
    reduction_vector: bool = False
    controllers: dict = field(default_factory=dict)
    extra_drafts: Callable | None = None
    program_controllers: dict = field(default_factory=dict)
    controller_models: dict = field(default_factory=dict)
    estimates: Callable | None = None
    training_shapes: TrainingShapes = field(default_factory=TrainingShapes)


FAMILIES: dict[str, Family] = {}
# the folders registered on first use (a user's family registers itself)
FAMILY_MODULES = ("hbm_pim", "attacc", "newton", "upmem")
# where they are: found by name on first use, as a plugin registry finds its plugins (jax's
# backends, tinygrad's devices), so nothing below the families imports their code
PACKAGE = "pimjax.backends"
_loaded = False


def register(family: Family) -> Family:
    """Register (or replace) a family under `family.name`."""
    if not isinstance(family, Family):
        raise TypeError(f"register takes a Family, got {type(family).__name__}")
    FAMILIES[family.name] = family
    return family


def _load() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        for mod in FAMILY_MODULES:
            importlib.import_module(f"{PACKAGE}.{mod}")


def families() -> list[str]:
    """The registered family names, sorted."""
    _load()
    return sorted(FAMILIES)


def own_time_model(backend: Any) -> bool:
    """Whether `backend`'s programs are timed one at a time by a time model
    of their own (`Family.cycles`: UPMEM's DPU pipeline; or the program
    controller `Group.controller` names, `Family.program_controllers`: DCC's
    forks) rather than the batched DRAM engines; False for a backend no
    family implements."""
    return own_timer(backend) is not None


def own_timer(backend: Any) -> Callable | None:
    """The `cycles`-shaped timer of `backend`'s own time model (see
    `own_time_model`), or None: the DRAM engines time its record streams."""
    if not has_family(backend):
        return None
    fam = family_of(backend)
    if fam.cycles is not None:
        return fam.cycles
    group = getattr(backend, "group", None)
    return fam.program_controllers.get(getattr(group, "controller", None))


def family_of(backend: Any) -> Family:
    """The `Family` implementing `backend` (a Backend, or a family name).

    Raises PimCompileError naming the backend and the registered families
    when none implements it (a Backend built by hand with a new `family`)."""
    why = missing_family(backend)
    if why:
        raise PimCompileError(why)
    return FAMILIES[backend if isinstance(backend, str) else backend.family]


def missing_family(backend: Any) -> str:
    """Why no family implements `backend` ("" when one does): the reason a
    backend built by hand with an unregistered `family` runs on the host."""
    _load()
    name = backend if isinstance(backend, str) else backend.family
    if name in FAMILIES:
        return ""
    who = name if isinstance(backend, str) else f"{backend.name!r} (family {name!r})"
    return (f"no backend family implements {who}; registered families: {sorted(FAMILIES)}. "
            "Build a backend on one of them, e.g. get_backend('hbm-pim').replace(name=...)")


def has_family(backend: Any) -> bool:
    """Whether a family implements `backend` (no error)."""
    return not missing_family(backend)


__all__ = ["Family", "FAMILIES", "FAMILY_MODULES", "PACKAGE", "register", "families", "family_of", "has_family",
           "missing_family", "own_time_model", "own_timer", "EstimateInputs", "TrainingShapes",
           "ControllerModel"]
