"""Draft -> Program lowering (see README.md in this folder)."""
import dataclasses
import functools

import numpy as np

from ..errors import PimCompileError
from ..family import family_of
from ..partition.verify import mesh_error
from . import text  # noqa: F401  (registers Program.as_text)
from .layout import value_shapes
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


def shape_error(op, shapes) -> str:
    """'' when `shapes` (value id -> shape) agrees with `op`'s index maps,
    else what disagrees: a value the op touches that `shapes` lacks, a rank
    other than its index map's, or -- for a contraction / reduction /
    elementwise op -- an operand dimension smaller than its reads reach
    (max index + 1 over the loop extents: it would read out of bounds) or a
    result dimension other than the one the extents write.  Layout ops may
    gather out of bounds (pad, concatenate read zero there): only their
    ranks are checked.

    Kept per (op, shapes of the values it touches): the tuner lowers
    hundreds of drafts of one op with the same shapes."""
    touched = tuple((a.value, None if a.value not in shapes else tuple(int(d) for d in shapes[a.value]))
                    for a in (*op.operands, *op.results))
    return _shape_error(op, touched)


@functools.lru_cache(maxsize=4096)
def _shape_error(op, touched: tuple) -> str:
    return _shape_error_of(op, {v: s for v, s in touched if s is not None})


def _shape_error_of(op, shapes) -> str:
    from ..partition.verify import infer_shapes
    implied = infer_shapes(op)
    names = {v: n for v, n in ((a.value, f"operand {k}") for k, a in enumerate(op.operands))}
    names.update((r.value, "result" if len(op.results) == 1 else f"result {k}") for k, r in enumerate(op.results))
    for acc in list(op.operands) + list(op.results):
        v = acc.value
        if not acc.index_map:            # a scalar read, or a host op's whole value
            continue
        what = f"{names[v]} (value {v}) of {op.name}"
        if v not in shapes:
            return f"shapes has no entry for {what}"
        got = tuple(int(d) for d in shapes[v])
        if len(got) != len(acc.index_map):
            return (f"{what} has shape {got} in shapes, but the op indexes it with {len(acc.index_map)} "
                    f"dimensions (implied shape {implied[v]})")
        if op.kind == "layout":
            continue
        result = any(r.value == v for r in op.results)
        # operands may be read in part (a strided convolution skips the last rows), never out of bounds;
        # the result is written whole
        if (got != tuple(implied[v])) if result else any(g < i for g, i in zip(got, implied[v])):
            ext = ", ".join(f"{lv.name}<{lv.extent}" for lv in op.loop_vars)
            need = "imply" if result else "read up to"
            return f"{what} has shape {got} in shapes, but the op's extents ({ext}) {need} {tuple(implied[v])}"
    return ""


def lower(op, draft, backend, shapes=None, **options) -> Program:
    """Lower one PimOp under `draft` to a command program for `backend`,
    by the lowering of its family (`pimjax.backends`).

    shapes: value id -> shape (default: implied by the op's index maps);
    a shape that disagrees with the op's extents is a ValueError naming the
    value (`shape_error`).
    options: lowering switches (register_reuse, data_block_layout,
    channel_parallel, resident=(operand indices), ...), each on by default.
    """
    family = family_of(backend)
    _check_call(op, draft, backend, options, family.options)
    if shapes is not None and (wrong := shape_error(op, shapes)):
        raise ValueError(f"lower: {wrong}")
    program = family.lower(op, draft, backend, shapes, **options)
    # the operand shapes it was lowered for, which `execute` checks (not every operand has a layout:
    # AttAcc's vector goes straight to the global buffer)
    vs = value_shapes(op, shapes)
    if "operand_shapes" in program.meta:
        return program
    meta = {**program.meta, "operand_shapes": {k: tuple(vs[a.value]) for k, a in enumerate(op.operands)}}
    return dataclasses.replace(program, meta=meta)        # a Program is never mutated once built


__all__ = ["Op", "Phase", "Program", "Readback", "Records", "TensorLayout", "lower"]
