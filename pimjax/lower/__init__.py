"""Draft -> Program lowering (see README.md in this folder)."""
import dataclasses

import numpy as np

from ..errors import PimCompileError
from ..partition.verify import mesh_error
from .layout import value_shapes
from . import text  # noqa: F401  (registers Program.as_text)
from .program import Op, Phase, Program, Readback, Records, TensorLayout


def _check_call(op, draft, backend, options, known) -> None:
    """Bad input fails loudly: an option the backend's lowering does not know
    (a typo would lower with the default), resident entries that are not
    operand indices, a draft for another op or a larger backend."""
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(f"{backend.name} lowering has no option {', '.join(map(repr, unknown))}; "
                        f"it has {sorted(known)}")
    for k in options.get("resident", ()):
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 0 <= k < len(op.operands):
            raise ValueError(f"resident: {k!r} is not an operand index of {op.name} "
                             f"(0..{len(op.operands) - 1})")
    wrong = mesh_error(op, draft, backend)
    if wrong:
        raise PimCompileError(f"{backend.name}: {wrong}")


def lower(op, draft, backend, shapes=None, **options) -> Program:
    """Lower one PimOp under `draft` to a command program for `backend`,
    by the lowering of its family (`pimjax.backends`).

    shapes: value id -> shape (default: implied by the op's index maps).
    options: lowering switches (register_reuse, data_block_layout,
    channel_parallel, resident=(operand indices), ...), each on by default.
    """
    from ..backends import family_of        # the families import this package: resolved at call time
    family = family_of(backend)
    _check_call(op, draft, backend, options, family.options)
    program = family.lower(op, draft, backend, shapes, **options)
    # the operand shapes it was lowered for, which `execute` checks (not every operand has a layout:
    # AttAcc's vector goes straight to the global buffer)
    vs = value_shapes(op, shapes)
    if "operand_shapes" in program.meta:
        return program
    meta = {**program.meta, "operand_shapes": {k: tuple(vs[a.value]) for k, a in enumerate(op.operands)}}
    return dataclasses.replace(program, meta=meta)        # a Program is never mutated once built


__all__ = ["Op", "Phase", "Program", "Readback", "Records", "TensorLayout", "lower"]
