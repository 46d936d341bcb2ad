"""`execute`: the value interpreter of PIM command programs.

Data reaches PIM memory only through the program's records: host writes
(WR records naming a layout) copy the layout's columns into the banks,
register writes carry host-data rows, PIM commands compute in the units,
and the host sees only the columns its read-back records (RD naming the
result layout) read.  Bank memory starts as NaN, so a column a program
forgets to write, or a result it forgets to read, shows up as NaN in the
output instead of a silently right answer.

Per backend the compute records are interpreted by a `jax.lax.scan` over
the expanded column commands of a group (`vmap`-ped over groups); host
writes and read-backs are vectorised scatters / gathers.  Arithmetic is the
backend's ("backend": fp16 on hbm-pim and attacc, bf16 on newton, int32 on
upmem) or float32 ("wide", to check a program's structure exactly).  The
host merge of lane / slot / core partials runs in float32 in both modes;
the op's epilogue then runs as jax runs it after the reduction: on the
merged value rounded to the reduction's dtype, with the operands' dtypes.
"""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ..lower.program import Program
from ..trace import evaluate as trace_eval

EXECUTORS: dict[str, Callable] = {}


def register(name: str):
    def wrap(fn):
        EXECUTORS[name] = fn
        return fn
    return wrap


def execute(program: Program, *arrays, arithmetic: str = "backend"):
    """Run `program` on the op's operand arrays (in `op.operands` order) and
    return the op's result array.

    arithmetic: "backend" (the PIM data type) or "wide" (float32).

    Example:
        >>> y = execute(program, W, x, arithmetic="wide")       # doctest: +SKIP
    """
    if arithmetic not in ("backend", "wide"):
        raise ValueError(f"arithmetic must be 'backend' or 'wide', got {arithmetic!r}")
    op = program.op
    if len(arrays) != len(op.operands):
        raise TypeError(f"{op.name} program expects {len(op.operands)} operands, got {len(arrays)}")
    fn = EXECUTORS.get(program.backend_name)
    if fn is None:
        raise NotImplementedError(f"no executor for backend {program.backend_name!r}; "
                                  f"have {sorted(EXECUTORS)}")
    # numpy operands stay numpy: the executors place them with numpy or jnp
    # ops (both accept them), and a device copy of a big operand up front
    # cost 0.5 s per call on the batch-8 attention step
    arrays = [a if isinstance(a, (jax.Array, np.ndarray)) else np.asarray(a) for a in arrays]
    # the executors gather by flat index: an operand of another shape would be read wrongly, not fail
    want = dict(program.meta.get("operand_shapes", {}))          # {operand index: shape}
    want.update({lay.operand: tuple(lay.shape) for lay in program.layouts if 0 <= lay.operand < len(arrays)})
    for k, shape in sorted(want.items()):
        if tuple(np.shape(arrays[k])) != tuple(shape):
            raise TypeError(f"{op.name}: operand {k} has shape {tuple(np.shape(arrays[k]))}, the program was "
                            f"lowered for {tuple(shape)} (pass the graph's shapes to `lower`)")
    return fn(program, arrays, arithmetic)


# --------------------------------------------------------------------------
# shared helpers
# --------------------------------------------------------------------------
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
