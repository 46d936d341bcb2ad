"""Which cost model ranks a Backend's drafts: the registry of model names.

A family's preset configuration ranks with the family's model (named as the
family, "hbm-pim").  A configuration whose programs one of the family's
program controllers times (a simulator of its own: `get_backend("hbm-pim",
simulator="dcc")`, `Group.controller = "dcc"`) and that the family lists in
`Family.controller_models` has a model of its own, trained on that
controller's labels: "<family>.<controller>" ("hbm-pim.dcc").  The family's
model was trained on the default engines' cycles, which rank those drafts
differently (on hbm-pim/dcc's GEMV (1, 32, 128, 512) its pick took 2.3x the
optimum).  Everything here is read from the family registry
(`pimjax.family`): no family's name is written in this module.
"""
from __future__ import annotations

from ..backends import families, family_of, has_family
from ..hw.core import Backend

SEP = "."           # "<family>.<controller>": a family name never holds one


def _controller_model(backend: Backend):
    """(controller, `hooks.ControllerModel`) of `backend`'s group controller
    when its family gives it a model of its own, else None."""
    if not has_family(backend):
        return None
    controller = getattr(backend.group, "controller", None)
    spec = family_of(backend).controller_models.get(controller)
    return None if spec is None else (controller, spec)


def model_name(backend: Backend | str) -> str:
    """The name of the cost model that ranks `backend`'s drafts (a Backend;
    a string is returned as it is): "<family>.<controller>" when its group's
    controller has a model of its own (`Family.controller_models`), else
    its family's name."""
    if isinstance(backend, str):
        return backend
    cm = _controller_model(backend)
    return backend.family if cm is None else f"{backend.family}{SEP}{cm[0]}"


def split(name: str) -> tuple[str, str | None]:
    """(family, controller or None) of a model name; ValueError naming the
    known models for a name no registered family or controller model has."""
    if not isinstance(name, str):
        raise TypeError(f"a cost model name is a string, got {type(name).__name__}")
    family, _, controller = name.partition(SEP)
    if family not in families() or (controller and controller not in family_of(family).controller_models):
        raise ValueError(f"no cost model named {name!r}; known: {model_names()}")
    return family, controller or None


def model_names() -> list[str]:
    """Every model name: the families' and their controller models', sorted."""
    out = []
    for f in families():
        out.append(f)
        out += [f"{f}{SEP}{c}" for c in sorted(family_of(f).controller_models)]
    return out


def model_backend(name: str) -> Backend:
    """The preset configuration a model is trained for: `get_backend(family,
    **ControllerModel.options)` (the family's preset for a family name)."""
    from ..hw.presets import get_backend
    family, controller = split(name)
    options = {} if controller is None else dict(family_of(family).controller_models[controller].options)
    return get_backend(family, **options)


def model_kernels(name: Backend | str) -> tuple:
    """The kernels the model of `name` (a model name or a Backend) is trained
    and judged on: `ControllerModel.kernels`, else `Family.kernels`; () for a
    backend no family implements."""
    if not isinstance(name, str):
        if not has_family(name):
            return ()
        name = model_name(name)
    elif SEP not in name and not has_family(name):
        return ()
    family, controller = split(name)
    fam = family_of(family)
    return fam.kernels if controller is None else tuple(fam.controller_models[controller].kernels)
