"""Reference evaluator: run a PimGraph with jnp from the op descriptions alone.

For a PIM op over loop variables `v_1..v_n` (the *domain*):

1. gather every operand over the variables its map uses: the map's
   AffineExprs are evaluated (in numpy) on broadcast iotas, out-of-bounds or
   non-exact points read 0 and are recorded in an in-bounds mask;
2. evaluate the body with every array broadcast to the domain's rank;
3. reduce the reduction variables with the combiner;
4. apply the epilogue over the output variables (`Acc` = reduced value);
5. write through the result map (a transpose when it is a permutation,
   otherwise a scatter into an array filled with `fill`).

Contractions whose body is `mul` of two plain operand reads (optionally
converted) and whose maps are single variables use `jnp.einsum` instead.
Host ops are the only ones that run a jax primitive as a whole (`bind`).
Every dtype change is explicit, so the evaluator works under
`jax_numpy_dtype_promotion="strict"` and `jax_numpy_rank_promotion="raise"`.
"""
from __future__ import annotations

import string
from functools import lru_cache, partial

import jax
import jax.extend.core as jcore
import jax.numpy as jnp
import numpy as np

from .affine import AffineExpr
from .builder import dtype_name
from .ir import GRAPH_VIEWS, Acc, Arg, Const, Expr, InBounds, PimGraph, PimOp, Prim

# Primitives whose impl needs a parameter a hand-built body may omit.
_ACCURACY = ("exp", "exp2", "log", "log1p", "expm1", "tanh", "logistic", "sin", "cos", "tan",
             "sqrt", "rsqrt", "cbrt")
PARAM_DEFAULTS: dict[str, dict] = {
    **{p: {"accuracy": None} for p in _ACCURACY},
    "convert_element_type": {"weak_type": False, "sharding": None},
    "round": {"rounding_method": 0},
}
_PRIMITIVES: dict[str, object] = {}


def primitive(name: str):
    """The jax primitive called `name` (from jax.extend.core.primitives)."""
    p = _PRIMITIVES.get(name)
    if p is None:
        p = getattr(jcore.primitives, f"{name}_p", None)
        if p is None:
            raise NotImplementedError(f"no jax primitive named {name!r} to evaluate a body")
        _PRIMITIVES[name] = p
    return p


def evaluate_graph(graph: PimGraph, *args, jit: bool = True):
    """Run `graph` on the traced function's (pytree) arguments and return its
    (pytree) result, as `jnp` arrays.

    With `jit=True` the interpretation is staged into one XLA computation
    (one compile instead of one per eager op; the values are the same)."""
    leaves = jax.tree_util.tree_leaves(args)
    if len(leaves) != len(graph.inputs):
        raise TypeError(f"{graph.fn_name or 'graph'} expects {len(graph.inputs)} array "
                        f"leaves, got {len(leaves)}")
    arrays = []
    for vid, leaf in zip(graph.inputs, leaves):
        info = graph.values[vid]
        arr = jnp.asarray(leaf)
        if arr.shape != info.shape:
            raise TypeError(f"argument {info.name}: expected shape {info.shape}, got {arr.shape}")
        arrays.append(arr if dtype_name(arr.dtype) == info.dtype else arr.astype(info.dtype))
    run = jax.jit(lambda xs: _run(graph, xs)) if jit else (lambda xs: _run(graph, xs))
    outs = run(arrays)
    if graph.out_tree is None:
        return outs[0] if len(outs) == 1 else tuple(outs)
    return jax.tree_util.tree_unflatten(graph.out_tree, outs)


def _run(graph: PimGraph, arrays: list) -> list:
    env: dict[int, jax.Array] = dict(zip(graph.inputs, arrays))
    for vid, const in graph.constants.items():
        env[vid] = jnp.asarray(const)
    for op in graph.ops:
        outs = evaluate_op(graph, op, [env[a.value] for a in op.operands])
        for r, val in zip(op.results, outs):
            info = graph.values[r.value]
            if val.shape != info.shape or dtype_name(val.dtype) != info.dtype:
                raise AssertionError(f"op {op.name} ({op.source}) produced "
                                     f"{val.dtype}{list(val.shape)} for {info.name}: "
                                     f"{info.dtype}{list(info.shape)}")
            env[r.value] = val
    return [env[v] for v in graph.outputs]


def evaluate_op(graph: PimGraph, op: PimOp, operands: list) -> list:
    """Results of one op given its operand arrays (in `op.operands` order)."""
    if op.kind == "host":
        out = op.host.primitive.bind(*operands, **op.host.params)
        return list(out) if op.host.primitive.multiple_results else [out]
    shape = graph.values[op.result.value].shape
    dtype = graph.values[op.result.value].dtype
    ext = op.extents
    out_vars = op.output_vars
    value = _einsum_fast_path(op, operands)
    if value is None:
        domain = tuple(lv.name for lv in op.loop_vars)
        narrow, wide = _widened(op, operands)
        gathered = _Gathered(op, wide, domain, ext)
        value = _broadcast_full(eval_expr(op.body, gathered, None), domain, ext)
        if op.reduction_vars:
            axes = tuple(domain.index(v) for v in op.reduction_vars)
            value = _reduce(value, axes, op.combiner)
        if narrow is not None:
            value = value.astype(narrow)
    if op.epilogue is not None:
        gathered = _Gathered(op, operands, out_vars, ext)
        value = _broadcast_full(eval_expr(op.epilogue, gathered, value), out_vars, ext)
    return [_write(value, op.result.index_map, out_vars, ext, shape, dtype, op.fill)]


# --------------------------------------------------------------------------
# gathers
# --------------------------------------------------------------------------
def _iotas(domain, ext, used) -> dict[str, np.ndarray]:
    rank = len(domain)
    out = {}
    for pos, v in enumerate(domain):
        if v in used:
            shape = [1] * rank
            shape[pos] = ext[v]
            out[v] = np.arange(ext[v], dtype=np.int64).reshape(shape)
    return out


def gather(arr, index_map: tuple[AffineExpr, ...], domain: tuple[str, ...], ext):
    """`arr` read at `index_map` over `domain`: (values, in-bounds mask or None).

    Both have rank len(domain), with size 1 along domain variables the map
    does not use.  Out-of-bounds (or non-exact) points read 0."""
    rank = len(domain)
    if not index_map:
        return jnp.reshape(arr, (1,) * rank), None
    names = [e.single_var for e in index_map]
    if None not in names and len(set(names)) == len(names) and all(
            ext[n] == s for n, s in zip(names, arr.shape)):
        # a permutation: transpose, then insert unit dims for unused vars
        order = sorted(range(len(names)), key=lambda d: domain.index(names[d]))
        moved = jnp.transpose(arr, order) if order != list(range(len(order))) else arr
        shape = [ext[v] if v in names else 1 for v in domain]
        return jnp.reshape(moved, shape), None
    used = {v for e in index_map for v in e.vars}
    iotas = _iotas(domain, ext, used)
    bshape = [ext[v] if v in used else 1 for v in domain]
    idx, mask = [], np.ones(bshape, dtype=bool)
    for e, size in zip(index_map, arr.shape):
        i, ok = e.evaluate(iotas)
        i = np.broadcast_to(np.asarray(i, dtype=np.int64), bshape)
        mask &= (i >= 0) & (i < size)
        if ok is not None:
            mask &= np.broadcast_to(ok, bshape)
        idx.append(np.clip(i, 0, size - 1))
    vals = arr[tuple(idx)]
    if mask.all():
        return vals, None
    return jnp.where(mask, vals, jnp.zeros((), arr.dtype)), mask


class _Gathered:
    """Lazily gathered operands of one op over one domain."""

    def __init__(self, op: PimOp, operands, domain, ext):
        self.op, self.operands, self.domain, self.ext = op, operands, domain, ext
        self.cache: dict[int, tuple] = {}

    def get(self, k: int):
        hit = self.cache.get(k)
        if hit is None:
            hit = self.cache[k] = gather(self.operands[k], self.op.operands[k].index_map,
                                         self.domain, self.ext)
        return hit


# --------------------------------------------------------------------------
# scalar bodies
# --------------------------------------------------------------------------
def eval_expr(expr: Expr, gathered: _Gathered, acc):
    """Evaluate a body/epilogue; arrays have the domain's rank (or are 0-d)."""
    if isinstance(expr, Arg):
        return gathered.get(expr.index)[0]
    if isinstance(expr, InBounds):
        vals, mask = gathered.get(expr.index)
        if mask is None:
            return jnp.ones((1,) * len(gathered.domain), dtype=bool)
        return jnp.asarray(mask)
    if isinstance(expr, Const):
        return jnp.asarray(expr.value, dtype=expr.dtype)
    if isinstance(expr, Acc):
        if acc is None:
            raise ValueError("Acc outside an epilogue")
        return acc
    if isinstance(expr, Prim):
        args = [eval_expr(a, gathered, acc) for a in expr.args]
        shape = jnp.broadcast_shapes(*[a.shape for a in args])
        args = [a if a.shape == shape else jnp.broadcast_to(a, shape) for a in args]
        params = {**PARAM_DEFAULTS.get(expr.name, {}), **dict(expr.params)}
        return primitive(expr.name).bind(*args, **params)
    raise TypeError(f"unknown body expression {expr!r}")


def expr_dtype(expr: Expr, arg_dtypes: tuple, acc_dtype=None) -> np.dtype:
    """The dtype `eval_expr` gives `expr` when operand k has dtype
    `arg_dtypes[k]` and `Acc` has `acc_dtype` (jax's rules, via
    `jax.eval_shape` of each primitive on 0-d values; nothing is computed).

    Example:
        >>> expr_dtype(Prim("add", (Arg(0), Arg(1))), ("float16", "float16"))   # doctest: +SKIP
        dtype('float16')
    """
    return _expr_dtype(expr, tuple(str(np.dtype(d)) for d in arg_dtypes),
                       None if acc_dtype is None else str(np.dtype(acc_dtype)))


class _ScalarReads:
    """`_Gathered` stand-in for `expr_dtype`: operand k read as one 0-d value."""
    domain = ()

    def __init__(self, values):
        self.values = values

    def get(self, k):
        return self.values[k], None


@lru_cache(maxsize=4096)
def _expr_dtype(expr: Expr, arg_dtypes: tuple, acc_dtype) -> np.dtype:
    specs = [jax.ShapeDtypeStruct((), d) for d in arg_dtypes]
    acc = None if acc_dtype is None else jax.ShapeDtypeStruct((), acc_dtype)
    out = jax.eval_shape(lambda xs, a: eval_expr(expr, _ScalarReads(xs), a), specs, acc)
    return np.dtype(out.dtype)


def _broadcast_full(value, domain, ext):
    shape = tuple(ext[v] for v in domain)
    return value if value.shape == shape else jnp.broadcast_to(value, shape)


def _reduce(value, axes, combiner: str):
    if combiner == "add":
        return jnp.sum(value, axis=axes, dtype=value.dtype)
    if combiner == "max":
        return jnp.max(value, axis=axes)
    if combiner == "min":
        return jnp.min(value, axis=axes)
    raise ValueError(f"unknown combiner {combiner!r}")


def _widened(op: PimOp, operands) -> tuple:
    """(16-bit dtype, operands in float32) for a sum of products of two
    float16 / bfloat16 reads (a convolution's affine maps miss the einsum
    path), else (None, operands): XLA multiplies and accumulates those in
    float32 and rounds once, where products in float16 overflow past 65504
    (fuzz seed 10290: 300 x 300 read inf, jax 28 910)."""
    body = op.body
    if not (op.reduction_vars and op.combiner == "add" and isinstance(body, Prim) and body.name == "mul"
            and len(body.args) == 2):
        return None, operands
    reads = [_plain_read(a) for a in body.args]
    if None in reads or any(t is not None for _, t in reads):
        return None, operands
    dts = {np.dtype(operands[k].dtype) for k, _ in reads}
    if len(dts) != 1 or dts.pop().name not in ("float16", "bfloat16"):
        return None, operands
    narrow = operands[reads[0][0]].dtype
    idx = {k for k, _ in reads}
    return narrow, [jnp.asarray(x, jnp.float32) if k in idx else x for k, x in enumerate(operands)]


# --------------------------------------------------------------------------
# einsum fast path
# --------------------------------------------------------------------------
def _plain_read(expr: Expr):
    """(operand index, dtype to convert to or None) for `Arg` / `convert(Arg)`."""
    if isinstance(expr, Arg):
        return expr.index, None
    if (isinstance(expr, Prim) and expr.name == "convert_element_type"
            and isinstance(expr.args[0], Arg)):
        return expr.args[0].index, np.dtype(expr.param("new_dtype"))
    return None


def _einsum_fast_path(op: PimOp, operands):
    """Pre-epilogue value over the output vars via jnp.einsum, or None."""
    body = op.body
    if not (op.combiner in ("add", None) and isinstance(body, Prim) and body.name == "mul"
            and len(body.args) == 2):
        return None
    reads = [_plain_read(a) for a in body.args]
    if None in reads:
        return None
    names = [lv.name for lv in op.loop_vars]
    if len(names) > len(string.ascii_letters):
        return None
    letter = dict(zip(names, string.ascii_letters))
    ext = op.extents
    specs, arrays = [], []
    for k, to_dtype in reads:
        imap = op.operands[k].index_map
        vs = [e.single_var for e in imap]
        arr = operands[k]
        if None in vs or any(ext[v] != s for v, s in zip(vs, arr.shape)):
            return None
        specs.append("".join(letter[v] for v in vs))
        arrays.append(arr if to_dtype is None else arr.astype(to_dtype))
    if arrays[0].dtype != arrays[1].dtype:
        return None
    out = "".join(letter[v] for v in op.output_vars)
    if set(out) - set(specs[0]) - set(specs[1]):
        return None          # an output dimension no operand has (0-d operands broadcast): not an einsum
    return _einsum2(*arrays, spec=f"{specs[0]},{specs[1]}->{out}")


@partial(jax.jit, static_argnames=("spec",))
def _einsum2(a, b, spec: str):
    """jnp.einsum of two operands under jit: its contraction path (opt_einsum,
    ~0.2 ms) is found once per (spec, shapes) at trace time, not per call."""
    return jnp.einsum(spec, a, b, preferred_element_type=a.dtype)


# --------------------------------------------------------------------------
# result write
# --------------------------------------------------------------------------
def _write(value, result_map, out_vars, ext, shape, dtype, fill):
    """Place `value` (over `out_vars`) into the result array via its map."""
    names = [e.single_var for e in result_map]
    plain = [n for n in names if n is not None]
    if (sorted(plain) == sorted(out_vars)
            and all(ext[n] == s for n, s in zip(names, shape) if n is not None)
            and all(n is not None or (not e.terms and e.const == 0 and s == 1)
                    for n, e, s in zip(names, result_map, shape))):
        # a permutation, plus constant-0 unit dims
        perm = [out_vars.index(n) for n in plain]
        moved = value if perm == sorted(perm) else jnp.transpose(value, perm)
        return jnp.reshape(moved, shape)
    iotas = _iotas(out_vars, ext, set(out_vars))
    full = tuple(ext[v] for v in out_vars)
    mask = np.ones(full, dtype=bool)
    idx = []
    for e, size in zip(result_map, shape):
        i, ok = e.evaluate(iotas)
        i = np.broadcast_to(np.asarray(i, dtype=np.int64), full)
        good = (i >= 0) & (i < size)
        if ok is not None:
            good &= np.broadcast_to(ok, full)
        mask &= good
        idx.append(i)
    # masked-out points get an out-of-range index and are dropped
    idx = tuple(np.where(mask, i, size) for i, size in zip(idx, shape))
    base = jnp.full(shape, 0 if fill is None else fill, dtype=dtype)
    return base.at[idx].set(value, mode="drop")


GRAPH_VIEWS["evaluate"] = evaluate_graph     # PimGraph.evaluate (ir.py imports no interpreter)
