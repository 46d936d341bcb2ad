"""What a Program's read-back means on the host: the columns a group's
records name, expanded one per column (`expand_runs`), and the host merge
of partial results into the op's result (`host_merge`, `finish`,
`epilogue_value`).  Every family's value interpreter (`pimjax/backends/*/
execute.py`) ends with these, so the merge is defined once."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..trace import evaluate as trace_eval
from .program import Program


def expand_runs(records, mask: np.ndarray) -> dict[str, np.ndarray]:
    """Expand the records selected by `mask` (stream 0) into one entry per
    column: fields plus `t` (column offset within its record)."""
    sel = {f: np.asarray(getattr(records, f))[0][mask[0]] for f in
           ("op", "bank", "row", "col", "n", "reg", "reg_step", "src", "aux", "arg", "core")}
    n = sel["n"]
    rep = np.repeat(np.arange(len(n)), n)
    t = np.arange(len(rep)) - np.repeat(np.cumsum(n) - n, n)
    out = {f: v[rep] for f, v in sel.items()}
    out["t"] = t
    out["col"] = out["col"] + t
    return out


def host_merge(program: Program, values: jax.Array, valid: np.ndarray, flat: np.ndarray,
               operands: list) -> jax.Array:
    """Merge partial results into the accumulator space and finish the op.

    values: [P] float32 partials, flat: [P] accumulator-space index, valid: [P].
    Output elements no valid partial reaches are NaN."""
    op = program.op
    layout = program.layouts[program.readback.layout]
    size = int(np.prod(layout.shape, dtype=np.int64))
    values = np.asarray(values, np.float64)
    seg = np.where(valid, flat, size)                      # invalid -> dropped segment
    comb = program.readback.combiner
    if comb == "add":
        acc = np.bincount(seg, weights=values, minlength=size + 1)[:size]
    else:
        acc = np.full(size + 1, -np.inf if comb == "max" else np.inf)
        (np.maximum if comb == "max" else np.minimum).at(acc, seg, values)
        acc = acc[:size]
    count = np.bincount(seg, minlength=size + 1)[:size]
    acc = jnp.asarray(np.where(count > 0, acc, np.nan).astype(np.float32).reshape(layout.shape))
    return finish(op, acc, operands, program.readback.epilogue_on_host,
                  program.meta["result_shape"], np.dtype(program.meta["result_dtype"]))


def finish(op, acc, operands: list, epilogue: bool, shape: tuple, dtype) -> jax.Array:
    """Apply the epilogue (when `epilogue`) to the float32 accumulator over
    the op's output variables, then write through the result map into an
    array of `shape` / `dtype`."""
    ext = op.extents
    out_vars = op.output_vars
    value = acc.astype(jnp.float32)
    if epilogue and op.epilogue is not None:
        value = epilogue_value(op, value, operands)
    return trace_eval._write(value.astype(dtype), op.result.index_map, out_vars, ext, tuple(shape),
                             dtype, op.fill)


def epilogue_value(op, acc, operands: list) -> jax.Array:
    """`op.epilogue` over the output variables with `Acc` = the merged
    accumulator rounded to the dtype the op's reduction has in jax (the
    body's dtype), and the operands in their own dtypes: the host finishes
    the op with jax's arithmetic, as `jax.jit` would after the reduction
    (float16 `W @ x + b` adds `b` in float16).

    acc: [output vars' extents] accumulator (float32 or int32)."""
    arg_dtypes = tuple(np.dtype(a.dtype) for a in operands)
    acc = jnp.asarray(acc).astype(trace_eval.expr_dtype(op.body, arg_dtypes))
    gathered = trace_eval._Gathered(op, [jnp.asarray(a) for a in operands], op.output_vars, op.extents)
    return trace_eval._broadcast_full(trace_eval.eval_expr(op.epilogue, gathered, acc),
                                      op.output_vars, op.extents)
