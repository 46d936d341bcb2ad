"""Legality: which ops a backend can run, and ATiM-style resource checks.

`op_support` says whether a backend's cores can run an op's body and
combiner at all (the placement stage keeps unsupported ops on the host and
reports the reason).  `verify` rejects drafts that do not fit the hardware:
registers, WRAM, global buffers and bank capacity — the role of ATiM's code
verifier (§5.2.4), applied before any draft is lowered or simulated.
"""
from __future__ import annotations

import math
from typing import Sequence

import jax.numpy as jnp
import numpy as np

from ..hw.core import Backend
from ..trace.ir import Const, PimOp, Prim
from .dimsets import DimensionSet, dimension_sets
from .draft import Draft
from .tiles import set_tilings

# Per-tasklet stack reserved in WRAM.  Assumption: the UPMEM SDK's default
# stack of a few hundred bytes per tasklet, rounded up to 1 KB for the
# runtime's buffers (ATiM's verifier likewise keeps a WRAM reserve).
UPMEM_STACK_BYTES = 1024

# primitive -> core operation needed to run it inside a PIM body
_PRIM_OPS = {
    "add": "add", "sub": "add", "mul": "mul", "max": "max", "min": "min",
    "neg": "mul", "convert_element_type": "mov", "copy": "mov", "copy_p": "mov",
}


def _body_ops(op: PimOp) -> set[str]:
    """Core operations an op's body and combiner need."""
    need: set[str] = set()
    if op.kind == "contraction":
        need.add("mac")
    elif op.kind == "reduction":
        need.add({"add": "add", "max": "max", "min": "min"}[op.combiner])
    if op.body is not None and op.kind != "contraction":
        need |= _expr_ops(op.body)
    return need


def _expr_ops(e) -> set[str]:
    """Core operations an expression needs; a division by a floating literal
    is a multiplication by its inverse (a * 0.25 for a / 4)."""
    if not isinstance(e, Prim):
        return set()
    args = e.args
    if e.name == "div" and len(args) == 2 and isinstance(args[1], Const) and "float" in str(args[1].dtype):
        name = "mul"
    else:
        name = _PRIM_OPS.get(e.name, e.name)
    return {name}.union(*(_expr_ops(a) for a in args))


def _is_float(dtype) -> bool:
    """Floating dtype, bfloat16 included (numpy calls ml_dtypes' bfloat16 kind "V")."""
    return bool(jnp.issubdtype(dtype, jnp.floating))


def _is_relu(expr) -> bool:
    return (isinstance(expr, Prim) and expr.name == "max"
            and any(getattr(a, "value", None) == 0 for a in expr.args))


def _dtype_evidence(op: PimOp, word: str) -> str | None:
    """The first type containing `word` ("float", "complex") that the op's
    expressions name (constants, converts), in expression order, or None.
    Iterative: fused expressions can be deep."""
    stack = [e for e in (op.epilogue, op.body) if e is not None]
    while stack:
        e = stack.pop()
        if isinstance(e, Const) and word in str(e.dtype):
            return str(e.dtype)
        if isinstance(e, Prim):
            nd = e.param("new_dtype")
            if e.name == "convert_element_type" and nd is not None and word in str(nd):
                return str(nd)
            stack.extend(reversed(e.args))
    return None


def _float_evidence(op: PimOp) -> str | None:
    """A floating-point type the op's expressions name (constants, converts), or None."""
    return _dtype_evidence(op, "float")


def _complex_evidence(op: PimOp) -> str | None:
    """A complex type the op's expressions name (constants, converts), or None."""
    return _dtype_evidence(op, "complex")


def op_support(op: PimOp, backend: Backend, dtype=None) -> tuple[bool, str]:
    """(True, reason-or-"") when `backend` can run `op` on PIM, else (False, reason).

    dtype: the data type of the op's operands and result (one dtype or a
    sequence of them), when the caller knows it.  A backend whose cores
    compute only integers (UPMEM: no FPU) runs an op only on integer data: a
    floating `dtype`, or floating constants / converts in the op's body when
    `dtype` is None, make it unsupported (host fallback); pass an integer
    `dtype` to say float-typed values are integers.  A backend whose cores
    compute in a floating type (fp16, bf16) runs no integer data (booleans,
    0 / 1, are exact): fp16 holds integers exactly only up to 2048 and
    overflows above 65504, so an int32 GEMV would come back rounded or NaN.
    An op with no loop variables (one scalar) has nothing to spread over
    cores: host.  Complex data (a complex `dtype`, or complex constants /
    converts in the body) runs on no backend: no family's units have
    complex arithmetic, and a real lowering would drop the imaginary part.

    >>> op_support(op, get_backend("upmem"), dtype="float32")   # doctest: +SKIP
    (False, 'upmem cores compute integers only (no FPU): float32 data stays on the host ...')
    """
    if op.kind in ("host", "layout"):
        why = op.host.reason if op.host is not None else "data movement stays on the host"
        return False, f"{op.kind} op: {why}"
    if not op.loop_vars:
        return False, "a scalar (0-d) op: nothing to spread over PIM cores"
    given = [] if dtype is None else [np.dtype(d) for d in
                                      (dtype if isinstance(dtype, (list, tuple)) else [dtype])]
    cplx = next((str(d) for d in given if np.issubdtype(d, np.complexfloating)), None) or _complex_evidence(op)
    if cplx:            # no family's units have complex arithmetic: a real lowering drops the imaginary part
        return False, (f"{cplx} data: {backend.name} units have no complex arithmetic (the imaginary part "
                       "would be dropped); it stays on the host")
    dtypes_int = backend.core.dtype.startswith("int")
    if op.kind == "elementwise" and op.body is not None and _is_relu(op.body):
        need = {"relu"}
    else:
        need = _body_ops(op)
    ops = backend.core.ops
    if "gemv" in ops:  # GEMV units (AttAcc) do dot products and sums (a ones vector)
        if op.kind == "elementwise" and not backend.core.programmable:
            return False, f"{backend.name} units only do GEMVs (dot products and sums): no elementwise op"
        ops = ops | {"mac", "add"}
    missing = sorted(need - ops)
    if missing:
        return False, f"{backend.name} cores have no {', '.join(missing)}"
    if op.kind == "contraction":
        if len(op.body_operands) < 2:
            return False, ("a contraction that reads one tensor (a constant factor or the tensor with itself) "
                           "has no vector operand for the PIM units")
        if not op.reduction_vars and "global_buffer" not in backend.group.units:
            # MAC units with an adder tree over their lanes (HBM-PIM, AttAcc) need a reduction; the
            # UPMEM lowering's kernels are reductions too.  Newton's global buffer broadcasts any operand.
            return False, f"a contraction without a reduction (an outer product): {backend.name} lowers " \
                          "contractions as reductions along the lanes / tasklets"
    if dtypes_int:
        floats = [d for d in given if _is_float(d)]
        if floats or (not given and _float_evidence(op)):
            what = str(floats[0]) if floats else _float_evidence(op)
            return False, (f"{backend.name} cores compute integers only (no FPU): {what} data stays on the "
                           "host (pass an integer dtype if the values are integers)")
        if not given:
            return True, "integer arithmetic (no floating type in the op; pass dtype to check the data)"
        return True, "integer arithmetic"
    exact = [d for d in given if not _is_float(d) and d != np.dtype(bool)]   # 0 / 1 are exact
    if exact:
        return False, (f"{backend.name} cores compute in {backend.core.dtype}: {exact[0]} data stays on the "
                       "host (it would come back rounded, or as NaN where it overflows)")
    return True, ""


def lengths_product(lens: dict, names, n: int) -> np.ndarray:
    """[n] int64: the product of lens[v] (`per_core_var_lengths`) over the variables `names` (1 for none),
    multiplied in their order."""
    out = np.ones(n, np.int64)
    for v in names:
        out = out * lens[v]
    return out


def per_core_var_lengths(op: PimOp, sets: Sequence[DimensionSet], reps: np.ndarray,
                         tile: np.ndarray, compound: str = "extent") -> dict[str, np.ndarray]:
    """Worst-core loop length of every variable, per row ([n] arrays): the
    data-tile length for a set's single-variable mapping.  A variable of a
    set with a compound mapping gets its extent (compound="extent": an upper
    bound, what a core may have to hold) or 1 (compound="one": a length never
    overestimated, what the backends' lower bounds on cycles use)."""
    if compound not in ("extent", "one"):
        raise ValueError(f"compound must be 'extent' or 'one', got {compound!r}")
    ext = op.extents
    n = reps.shape[0]
    out = {v: np.full(n, e, dtype=np.int64) for v, e in ext.items()}
    for si, s in enumerate(sets):
        for r in range(len(s.candidates)):
            v = s.mapping(r).single_var
            m = reps[:, si] == r
            if v is None:
                if compound == "one":
                    for u in s.vars:
                        if u in out:
                            out[u][m] = 1
                continue
            out[v][m] = np.minimum(ext[v], tile[m, si])
            if compound == "one":           # the set's other variables follow the mapped one
                for u in s.vars:
                    if u in out and u != v:
                        out[u][m] = 1
    return out


def _expr_extent(expr, lengths: dict[str, np.ndarray], size: int) -> np.ndarray:
    """Distinct values of `expr` per row when variables range over `lengths`
    (contiguous-expand count, capped by the tensor dimension's size)."""
    if not expr.vars:
        return np.ones_like(next(iter(lengths.values())))
    if not expr.is_linear:
        return np.full_like(next(iter(lengths.values())), size)
    span = 0
    for v, c in expr.terms:
        span = span + abs(c) * (lengths[v] - 1)
    return np.minimum(span + 1, size)


def footprint_elements(op: PimOp, lengths: dict[str, np.ndarray], shapes: dict[int, tuple]) -> np.ndarray:
    """Elements of all accessed tensors one worst-case core holds, per row."""
    used = set(op.body_operands) | set(op.epilogue_operands)
    accs = [a for k, a in enumerate(op.operands) if k in used] + [op.result]
    total = 0
    for acc in accs:
        shape = shapes[acc.value]
        n = 1
        for e, size in zip(acc.index_map, shape):
            n = n * _expr_extent(e, lengths, size)
        total = total + n
    return total


def matrix_and_vector(op: PimOp, shapes: dict, matrix: int | None = None) -> tuple[int, int]:
    """(M, v) operand indices of a contraction `sum M * v`: M stays in the
    banks; v is fed to the units (registers, GEMV or global buffers).

    matrix: None (default) picks the larger operand as M -- Newton's "one
    large operand with low reuse and one small operand"; an operand index
    (one of the two the body multiplies) places that operand in the banks
    instead, e.g. a CNN layer's filters even where its activations are
    larger (PIMFlow §2.2: the filters are placed in the cell array in
    advance, the input streamed through GWRITE).  This function is the one
    owner of the rule: lowerings, closed forms and features all ask it.
    A contraction whose body reads one tensor (the other factor folded to a
    constant, e.g. `ones @ x`) has no vector to feed the units:
    PimCompileError (the op stays on the host); a `matrix` that is not one
    of the two multiplied operands: ValueError."""
    if len(op.body_operands) < 2:
        from ..errors import PimCompileError
        raise PimCompileError(f"{op.name}: a contraction that reads one tensor (a constant factor, as in "
                              "`ones @ x`, or the tensor with itself, `x @ x`) has no vector operand for the "
                              "PIM units")
    a, b = op.body_operands[:2]
    if matrix is not None:
        if isinstance(matrix, bool) or not isinstance(matrix, (int, np.integer)) or int(matrix) not in (a, b):
            raise ValueError(f"matrix={matrix!r}: {op.name} multiplies operands {a} and {b}; the matrix "
                             "must be one of them")
        return (a, b) if int(matrix) == a else (b, a)
    size = lambda k: int(np.prod(shapes[op.operands[k].value], dtype=np.int64))  # noqa: E731
    return (a, b) if size(a) >= size(b) else (b, a)


def infer_shapes(op: PimOp) -> dict[int, tuple]:
    """Tensor shapes implied by the index maps (max index + 1 per dim)."""
    ext = op.extents
    shapes: dict[int, tuple] = {}
    for acc in list(op.operands) + list(op.results):
        shp = tuple(e.value_range(ext)[1] + 1 for e in acc.index_map)
        old = shapes.get(acc.value)
        shapes[acc.value] = shp if old is None else tuple(max(a, b) for a, b in zip(old, shp))
    return shapes


def resource_mask(op: PimOp, backend: Backend, lengths: dict[str, np.ndarray], shapes: dict,
                  tasklets: np.ndarray, wram_tile: np.ndarray) -> tuple[np.ndarray, dict]:
    """Which (draft, knob) pairs fit the backend: bank capacity per core and
    UPMEM WRAM.  lengths: per-row worst-core loop lengths ([n] arrays);
    tasklets / wram_tile: knob columns broadcastable against [n, 1].
    Returns (fits [n, K] bool, {reason: fits-for-that-reason mask})."""
    core = backend.core
    foot = footprint_elements(op, lengths, shapes)
    cap = (foot * core.elem_bytes <= core.banks_per_core * core.pim_bank_bytes)[:, None]
    reasons = {"capacity": cap}
    fits = cap
    if core.scratchpad_bytes:
        n_cached = len(set(op.body_operands) | set(op.epilogue_operands)) + 1
        wram = np.asarray(tasklets) * (n_cached * np.asarray(wram_tile) + UPMEM_STACK_BYTES)
        w_ok = (wram <= core.scratchpad_bytes) & (np.asarray(tasklets) <= core.tasklets)
        reasons["wram"] = w_ok
        fits = fits & w_ok
    return np.broadcast_to(fits, np.broadcast_shapes(fits.shape, np.shape(tasklets))), reasons


def register_simd(backend: Backend) -> bool:
    """Register-fed SIMD units (HBM-PIM, the Korean paper's generic PIM):
    inputs in input registers, accumulators in output registers."""
    core = backend.core
    return (core.n_input_regs >= 2 and core.n_output_regs >= 2 and core.lanes > 1
            and "global_buffer" not in backend.group.units)


def shared_register_sets(op: PimOp, backend: Backend, shapes: dict | None = None,
                         per_core: bool | None = None) -> np.ndarray:
    """[S] bool: dimension sets a draft may not split over the cores of a
    group.  On register-SIMD units without per-core commands the input
    registers are written by group broadcast, so every core of a group must
    need the same vector operand: no core split of a set the vector depends
    on (all False where the rule does not apply).  per_core: whether the
    registers can be written per core (default the backend's
    `Group.per_core_commands`; a lowering that always broadcasts passes
    False)."""
    sets = dimension_sets(op)
    per_core = backend.group.per_core_commands if per_core is None else per_core
    if not (op.kind == "contraction" and register_simd(backend) and not per_core
            and len(op.body_operands) > 1):
        return np.zeros(len(sets), bool)
    _, vec = matrix_and_vector(op, shapes or infer_shapes(op))
    vvars = set(op.operands[vec].vars)
    return np.array([bool(vvars & set(s.vars)) for s in sets], bool)


def register_split_error(op: PimOp, draft: Draft, backend: Backend, shapes: dict | None = None,
                         per_core: bool | None = None) -> str:
    """'' unless `draft` splits a set of `shared_register_sets` over a
    group's cores; then the rule it breaks."""
    shared = shared_register_sets(op, backend, shapes, per_core)
    split = [i for i, p in enumerate(draft.parts) if p.cores > 1 and shared[i]]
    if not split:
        return ""
    return (f"set {'/'.join(dimension_sets(op)[split[0]].vars)} of the vector operand is split over "
            f"{draft.parts[split[0]].cores} cores, but {backend.name} writes input registers by group "
            "broadcast (every core of a group needs the same vector)")


def mesh_error(op: PimOp, draft: Draft, backend: Backend) -> str:
    """'' when `draft` has one part per dimension set of `op`, a mapping
    index each set has, and uses at most the backend's groups and cores per
    group; else what is wrong (a draft built by hand, or for another op or
    a larger backend)."""
    sets = dimension_sets(op)
    if len(draft.parts) != len(sets):
        return f"the draft has {len(draft.parts)} parts for the {len(sets)} dimension sets of {op.name}"
    for s, p in zip(sets, draft.parts):
        if not 0 <= p.rep < len(s.candidates):
            return f"mapping {p.rep} of set {'/'.join(s.vars)} does not exist (it has {len(s.candidates)})"
    if draft.lane_var is not None and draft.lane_var not in op.extents:
        return f"lane variable {draft.lane_var!r} is not a loop variable of {op.name} ({sorted(op.extents)})"
    groups = math.prod(int(p.groups) for p in draft.parts)
    cores = math.prod(int(p.cores) for p in draft.parts)
    if groups > backend.n_groups:
        return f"the draft uses {groups} groups; {backend.name} has {backend.n_groups}"
    if cores > backend.cores_per_group:
        return f"the draft uses {cores} cores per group; {backend.name} has {backend.cores_per_group}"
    return ""


def verify(op: PimOp, draft: Draft, backend: Backend, shapes: dict | None = None) -> str:
    """'' when one `draft` fits `backend`'s resources, else the violated limit
    (ATiM's code verifier for a single draft, e.g. a baseline)."""
    core = backend.core
    wrong = mesh_error(op, draft, backend)
    if wrong:
        return wrong
    if draft.ki > max(1, core.n_input_regs):
        return f"ki={draft.ki} > {core.n_input_regs} input registers"
    if draft.ko > max(1, core.n_output_regs):
        return f"ko={draft.ko} > {core.n_output_regs} output registers"
    if draft.buffers > max(1, backend.group.n_global_buffers):
        return f"buffers={draft.buffers} > {backend.group.n_global_buffers} global buffers"
    sets = dimension_sets(op)
    split = register_split_error(op, draft, backend, shapes)
    if split:
        return split
    tilings = set_tilings(op, sets, draft)
    reps = np.array([[p.rep for p in draft.parts]], dtype=np.int64)
    tile = np.array([[t.tile for t in tilings]], dtype=np.int64)
    lengths = per_core_var_lengths(op, sets, reps, tile)
    _, reasons = resource_mask(op, backend, lengths, shapes or infer_shapes(op),
                               np.array([[draft.tasklets]]), np.array([[draft.wram_tile]]))
    for why, mask in reasons.items():
        if not mask.all():
            return f"{why}: the draft does not fit {backend.name}"
    return ""
