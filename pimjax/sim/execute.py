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

import jax
import numpy as np

from ..family import family_of
from ..lower.program import Program


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
    fn = family_of(program.family).execute
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
