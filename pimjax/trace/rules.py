"""Translation rules: one function per jax primitive, jaxpr eqn -> PimOps.

`TRACE_RULES[name](builder, eqn, atoms) -> list[Atom]` emits zero or more ops
into the builder and returns one atom per eqn output.  Primitives without a
rule become host ops (`host_rule`) with a reason from `HOST_REASONS`.

Pure re-indexings (broadcast_in_dim, transpose, squeeze, unit-dim reshape,
stop_gradient) emit nothing: they return a `View` that consumers fold into
their index maps (see builder.py).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from .affine import AffineExpr
from .builder import (
    PH_EXPRS,
    ZERO,
    Atom,
    Builder,
    Lit,
    Operands,
    Ref,
    View,
    compose,
    dtype_name,
    fresh_names,
    identity_map,
    loop_vars,
    pool_names,
)
from .ir import Access, Arg, Expr, HostCall, InBounds, PimOp, Prim

Rule = Callable[[Builder, object, list], list]
TRACE_RULES: dict[str, Rule] = {}


def register(*names: str):
    def deco(fn: Rule) -> Rule:
        for n in names:
            TRACE_RULES[n] = fn
        return fn
    return deco


def _shape(v) -> tuple[int, ...]:
    return tuple(getattr(v.aval, "shape", ()))


def _dtype(v) -> str:
    return dtype_name(v.aval.dtype)


def hashable_params(params: dict) -> tuple[tuple[str, object], ...]:
    """Sorted (key, value) pairs with lists turned into tuples (for `Prim`)."""
    def fix(v):
        return tuple(fix(x) for x in v) if isinstance(v, (list, tuple)) else v
    return tuple(sorted((k, fix(v)) for k, v in params.items()))


def cast(expr: Expr, from_dtype: str, to_dtype: str) -> Expr:
    """`expr` converted to `to_dtype` (no-op when the dtypes agree)."""
    if from_dtype == to_dtype:
        return expr
    return Prim("convert_element_type", (expr,),
                (("new_dtype", np.dtype(to_dtype)), ("sharding", None), ("weak_type", False)))


# --------------------------------------------------------------------------
# host fallback
# --------------------------------------------------------------------------
_DATA_DEPENDENT = "data-dependent indexing: addresses depend on runtime values"
_SCAN = "prefix scan: outputs depend on each other, not an independent-output loop nest"
_CONTROL = "control flow over sub-programs (loop/branch) runs on the host"
_RANDOM = "random number generation runs on the host"
_LINALG = "dense factorisation/solve with sequential dependences"
HOST_REASONS: dict[str, str] = {
    "sort": "data-dependent permutation: a sort has no affine index map",
    "argmax": "index-valued reduction needs a (value, index) combiner; PIM combiners are add/max/min",
    "argmin": "index-valued reduction needs a (value, index) combiner; PIM combiners are add/max/min",
    "top_k": "data-dependent selection (top-k) has no affine index map",
    "iota": "index generator: its values come from loop indices, not from tensor data",
    "reduce_prod": "product reduction: PIM combiners are add/max/min",
    "reduce_xor": "xor reduction: PIM combiners are add/max/min",
    "reduce_window_sum": "windowed reduction (pooling) is not lowered to a loop nest yet",
    "reduce_window_max": "windowed reduction (pooling) is not lowered to a loop nest yet",
    "reduce_window_min": "windowed reduction (pooling) is not lowered to a loop nest yet",
    "reduce_window": "windowed reduction (pooling) is not lowered to a loop nest yet",
    "reduce": "generic reduction with a user-defined combiner jaxpr",
    "conv_general_dilated": "batch_group_count != 1 (grouped weight-gradient convolution)",
    **{p: _DATA_DEPENDENT for p in ("gather", "scatter", "scatter_add", "scatter_mul",
                                     "scatter_min", "scatter_max", "dynamic_slice",
                                     "dynamic_update_slice")},
    **{p: _SCAN for p in ("cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp")},
    **{p: _CONTROL for p in ("while", "scan", "cond")},
    **{p: _RANDOM for p in ("random_bits", "random_seed", "random_split", "random_fold_in",
                            "random_wrap", "random_unwrap", "threefry2x32", "rng_uniform",
                            "rng_bit_generator")},
    **{p: _LINALG for p in ("cholesky", "lu", "qr", "svd", "eig", "eigh", "triangular_solve",
                            "custom_linear_solve", "linear_solve", "tridiagonal_solve")},
}


def host_rule(b: Builder, eqn, atoms: list, reason: str | None = None) -> list:
    """Emit a host op: the primitive runs as-is on whole values."""
    name = eqn.primitive.name
    if reason is None:
        reason = HOST_REASONS.get(name, f"no PIM rule for primitive '{name}'")
    operands = tuple(Access(b.value_of(a), ()) for a in atoms)
    results = tuple(Access(b.new_value(_shape(v), v.aval.dtype), ()) for v in eqn.outvars)
    b.emit(PimOp(name, "host", (), operands, results, source=b.source,
                 host=HostCall(eqn.primitive, dict(eqn.params), reason)),
           effectful=bool(eqn.effects))
    return [Ref(r.value) for r in results]


def _emit(b: Builder, name: str, kind: str, names, extents, ops: Operands, result_shape,
          result_dtype, result_map, body: Expr, reduction_vars=(), combiner=None) -> Ref:
    vid = b.new_value(result_shape, result_dtype)
    b.emit(PimOp(name, kind, loop_vars(names, extents), tuple(ops.accesses),
                 (Access(vid, tuple(result_map)),), tuple(reduction_vars), combiner, body,
                 source=b.source))
    return Ref(vid)


def _gather(b: Builder, name: str, x, imap, names, shape, dtype) -> Ref:
    """A layout op out[names] = x[imap] over `shape` (reshape, slice, split, tile, rev: one read through an
    index map)."""
    ops = Operands(b)
    body = ops.read(x, imap)
    return _emit(b, name, "layout", names, shape, ops, shape, dtype, identity_map(names), body)


# --------------------------------------------------------------------------
# elementwise
# --------------------------------------------------------------------------
ELEMENTWISE = (
    # unary
    "neg", "abs", "sign", "floor", "ceil", "round", "is_finite", "exp", "exp2", "expm1",
    "log", "log1p", "tanh", "logistic", "sin", "cos", "tan", "asin", "acos", "atan", "sinh",
    "cosh", "asinh", "acosh", "atanh", "sqrt", "rsqrt", "cbrt", "square", "integer_pow",
    "erf", "erfc", "erf_inv", "lgamma", "digamma", "not", "convert_element_type",
    "reduce_precision", "copy", "population_count", "clz",
    # binary
    "add", "sub", "mul", "div", "rem", "pow", "max", "min", "atan2", "nextafter", "and", "or",
    "xor", "eq", "ne", "lt", "le", "gt", "ge", "shift_left", "shift_right_arithmetic",
    "shift_right_logical",
    # n-ary
    "select_n", "clamp",
)


# primitives that are another elementwise primitive under a different name
ELEMENTWISE_ALIASES = {"add_any": "add"}   # add_any: gradient accumulation


@register(*ELEMENTWISE, *ELEMENTWISE_ALIASES)
def elementwise_rule(b: Builder, eqn, atoms: list) -> list:
    """out[i,j,..] = prim(operands broadcast to out), operands of equal rank
    with size-1 dims (index 0) or 0-d."""
    name = ELEMENTWISE_ALIASES.get(eqn.primitive.name, eqn.primitive.name)
    out = eqn.outvars[0]
    shape, dtype = _shape(out), _dtype(out)
    if all(isinstance(a, Lit) for a in atoms) and not shape:
        return [_fold_constant(eqn, atoms)]
    names = pool_names("elem", len(shape))
    ids = identity_map(names)
    ops = Operands(b)
    args = []
    for atom, v in zip(atoms, eqn.invars):
        s = _shape(v)
        if s == shape:
            imap = ids
        elif not s:
            imap = ()
        elif len(s) == len(shape) and all(a in (1, o) for a, o in zip(s, shape)):
            imap = tuple(e if a == o else ZERO for e, a, o in zip(ids, s, shape))
        else:
            return host_rule(b, eqn, atoms, f"unsupported broadcast {s} -> {shape}")
        args.append(ops.read(atom, imap))
    body = Prim(name, tuple(args), hashable_params(eqn.params))
    return [_emit(b, name, "elementwise", names, shape, ops, shape, dtype, ids, body)]


_FOLDED: dict[tuple, Lit] = {}
FOLDED_KEPT = 4096          # folded constants kept (cleared past it: a long run traces many functions)


def _fold_constant(eqn, atoms: list[Lit]) -> Lit:
    """Evaluate a scalar elementwise primitive on literals at trace time
    (memoised: an eager bind costs far more than translating an eqn)."""
    dtype = _dtype(eqn.outvars[0])
    key = (eqn.primitive.name, tuple(atoms), hashable_params(eqn.params), dtype)
    try:
        hit = _FOLDED.get(key)
    except TypeError:      # an unhashable parameter: just don't memoise
        key, hit = None, None
    if hit is None:
        args = [np.asarray(a.value, dtype=np.dtype(a.dtype)) for a in atoms]
        value = np.asarray(eqn.primitive.bind(*args, **eqn.params))
        hit = Lit(value.item(), dtype)
        if key is not None:
            if len(_FOLDED) >= FOLDED_KEPT:
                _FOLDED.clear()
            _FOLDED[key] = hit
    return hit


# --------------------------------------------------------------------------
# views: pure re-indexings folded into consumers
# --------------------------------------------------------------------------
def make_view(b: Builder, atom: Atom, xexprs: tuple[AffineExpr, ...], shape, dtype: str,
              prim: str) -> Atom:
    """A view of `atom`; `xexprs[d]` indexes atom dim d by view placeholders."""
    shape = tuple(int(s) for s in shape)
    if isinstance(atom, Lit):
        return View(atom, (), shape, dtype, prim, b.source)
    if isinstance(atom, View):
        base = atom.base
        exprs = () if isinstance(base, Lit) else compose(atom.exprs, xexprs)
    else:
        base, exprs = atom, tuple(xexprs)
    if (isinstance(base, Ref) and b.values[base.vid].shape == shape
            and exprs == PH_EXPRS[:len(shape)]):
        return base   # identity re-indexing
    return View(base, exprs, shape, dtype, prim, b.source)


@register("broadcast_in_dim")
def broadcast_rule(b: Builder, eqn, atoms: list) -> list:
    shape = tuple(eqn.params["shape"])
    xs = _shape(eqn.invars[0])
    bdims = eqn.params["broadcast_dimensions"]
    xexprs = tuple(ZERO if xs[i] == 1 and shape[d] != 1 else PH_EXPRS[d]
                   for i, d in enumerate(bdims))
    return [make_view(b, atoms[0], xexprs, shape, _dtype(eqn.outvars[0]), "broadcast_in_dim")]


@register("transpose")
def transpose_rule(b: Builder, eqn, atoms: list) -> list:
    perm = eqn.params["permutation"]
    xexprs = [ZERO] * len(perm)
    for j, src in enumerate(perm):
        xexprs[src] = PH_EXPRS[j]
    out = eqn.outvars[0]
    return [make_view(b, atoms[0], tuple(xexprs), _shape(out), _dtype(out), "transpose")]


@register("squeeze")
def squeeze_rule(b: Builder, eqn, atoms: list) -> list:
    xs = _shape(eqn.invars[0])
    dims = {d % len(xs) for d in eqn.params["dimensions"]}
    xexprs, j = [], 0
    for i in range(len(xs)):
        if i in dims:
            xexprs.append(ZERO)
        else:
            xexprs.append(PH_EXPRS[j])
            j += 1
    out = eqn.outvars[0]
    return [make_view(b, atoms[0], tuple(xexprs), _shape(out), _dtype(out), "squeeze")]


@register("stop_gradient")
def identity_rule(b: Builder, eqn, atoms: list) -> list:
    return [atoms[0]]


@register("reshape")
def reshape_rule(b: Builder, eqn, atoms: list) -> list:
    """Unit-dim reshapes are views; others a layout op with `//`,`%` maps."""
    if eqn.params.get("dimensions") is not None:
        return host_rule(b, eqn, atoms, "reshape with a dimensions permutation")
    xs, out = _shape(eqn.invars[0]), eqn.outvars[0]
    os_ = _shape(out)
    x_nz = [d for d, n in enumerate(xs) if n != 1]
    o_nz = [d for d, n in enumerate(os_) if n != 1]
    if [xs[d] for d in x_nz] == [os_[d] for d in o_nz]:
        xexprs = [ZERO] * len(xs)
        for xd, od in zip(x_nz, o_nz):
            xexprs[xd] = PH_EXPRS[od]
        return [make_view(b, atoms[0], tuple(xexprs), os_, _dtype(out), "reshape")]
    names = pool_names("elem", len(os_))
    return [_gather(b, "reshape", atoms[0], reshape_map(xs, os_, names), names, os_, _dtype(out))]


def reshape_map(in_shape, out_shape, out_names) -> tuple[AffineExpr, ...]:
    """Index map of a row-major reshape's input over the output variables.

    Dimensions are grouped into minimal runs with equal products, so a split
    or merge of neighbouring dims stays local: (a, b*c) <- (a, b, c) gives
    (i, j // c, j % c)."""
    ext = dict(zip(out_names, out_shape))
    imap = [ZERO] * len(in_shape)
    xi = [d for d, n in enumerate(in_shape) if n != 1]
    oi = [d for d, n in enumerate(out_shape) if n != 1]
    a = c = 0
    while a < len(xi):
        gi, go = [xi[a]], [oi[c]]
        pi, po = in_shape[xi[a]], out_shape[oi[c]]
        a, c = a + 1, c + 1
        while pi != po:
            if pi < po:
                gi.append(xi[a]); pi *= in_shape[xi[a]]; a += 1
            else:
                go.append(oi[c]); po *= out_shape[oi[c]]; c += 1
        coeffs, stride = {}, 1
        for d in reversed(go):
            coeffs[out_names[d]] = stride
            stride *= out_shape[d]
        flat = AffineExpr.linear(dict(reversed(list(coeffs.items()))))
        instride = pi
        for t, d in enumerate(gi):
            instride //= in_shape[d]
            e = AffineExpr(flat.terms, 0, instride, in_shape[d] if t else 0)
            imap[d] = simplify(e, ext)
    return tuple(imap)


def simplify(e: AffineExpr, extents) -> AffineExpr:
    """Drop divisions/moduli that are provably no-ops or exactly separable.

    `(q*i + j) // q` -> `i` and `(q*i + j) % q` -> `j` when `0 <= j < q`."""
    if e.exact:
        return e
    terms, const = list(e.terms), e.const
    if e.div > 1:
        keep = [(v, c) for v, c in terms if c % e.div]
        rest = AffineExpr(tuple(keep), const)
        lo, hi = rest.value_range(extents)
        if lo >= 0 and hi < e.div:
            terms = [(v, c // e.div) for v, c in terms if c % e.div == 0]
            const = 0
        else:
            return e
    if e.mod:
        keep = tuple((v, c) for v, c in terms if c % e.mod)
        lo, hi = AffineExpr(keep, const).value_range(extents)
        if lo >= 0 and hi < e.mod:
            return AffineExpr(keep, const)
        return AffineExpr(tuple(terms), const, 1, e.mod)
    return AffineExpr(tuple(terms), const)


# --------------------------------------------------------------------------
# layout ops with index maps
# --------------------------------------------------------------------------
@register("slice")
def slice_rule(b: Builder, eqn, atoms: list) -> list:
    p = eqn.params
    out = eqn.outvars[0]
    shape = _shape(out)
    strides = p["strides"] or (1,) * len(shape)
    names = pool_names("elem", len(shape))
    imap = tuple(AffineExpr(((n, int(s)),), int(st))
                 for n, s, st in zip(names, strides, p["start_indices"]))
    return [_gather(b, "slice", atoms[0], imap, names, shape, _dtype(out))]


@register("split")
def split_rule(b: Builder, eqn, atoms: list) -> list:
    """One slice-like layout op per piece: out_k[.., i, ..] = x[.., i + offset_k, ..]."""
    axis = eqn.params["axis"]
    outs, offset = [], 0
    for v in eqn.outvars:
        shape = _shape(v)
        names = pool_names("elem", len(shape))
        imap = tuple(AffineExpr(((n, 1),), offset) if d == axis else AffineExpr.var(n)
                     for d, n in enumerate(names))
        outs.append(_gather(b, "split", atoms[0], imap, names, shape, _dtype(v)))
        offset += shape[axis]
    return outs


@register("tile")
def tile_rule(b: Builder, eqn, atoms: list) -> list:
    """out[.., i, ..] = x[.., i % n, ..] along every repeated dim."""
    out = eqn.outvars[0]
    shape, xs = _shape(out), _shape(eqn.invars[0])
    names = pool_names("elem", len(shape))
    imap = tuple(AffineExpr(((n, 1),), 0, 1, s) if s != o else AffineExpr.var(n)
                 for n, s, o in zip(names, xs, shape))
    return [_gather(b, "tile", atoms[0], imap, names, shape, _dtype(out))]


@register("rev")
def rev_rule(b: Builder, eqn, atoms: list) -> list:
    out = eqn.outvars[0]
    shape = _shape(out)
    names = pool_names("elem", len(shape))
    dims = set(eqn.params["dimensions"])
    imap = tuple(AffineExpr(((n, -1),), s - 1) if d in dims else AffineExpr.var(n)
                 for d, (n, s) in enumerate(zip(names, shape)))
    return [_gather(b, "rev", atoms[0], imap, names, shape, _dtype(out))]


@register("pad")
def pad_rule(b: Builder, eqn, atoms: list) -> list:
    out = eqn.outvars[0]
    return [pad_op(b, atoms[0], atoms[1], eqn.params["padding_config"], _shape(out),
                   _dtype(out))]


def _bounded_read(b: Builder, ops: Operands, atom: Atom, index_map: tuple) -> Arg:
    """Read `atom` through `index_map` so that the read's in-bounds mask
    (`InBounds`, and the 0 an out-of-bounds gather reads) is `atom`'s own:
    a literal, or a view that broadcasts, slices or offsets its base, is
    materialised first -- read through its base, a broadcast dimension is
    in bounds everywhere and a slice's neighbours are in bounds too, so a
    pad or a concatenation would show base data where it has other values.
    A view that only permutes its whole base reads through it."""
    if isinstance(atom, Lit) or (isinstance(atom, View) and not _whole_permutation(b, atom)):
        atom = Ref(b.value_of(atom))
    return ops.read(atom, index_map)


def _whole_permutation(b: Builder, view: View) -> bool:
    """`view` is its base with the dimensions permuted (same extents)."""
    if not isinstance(view.base, Ref):
        return False
    base_shape = b.values[view.base.vid].shape
    if len(view.exprs) != len(view.shape) or len(base_shape) != len(view.shape):
        return False
    dims = []
    for e, extent in zip(view.exprs, base_shape):
        v = e.single_var
        if v is None or e != AffineExpr.var(v) or not v.startswith("@"):
            return False
        d = int(v[1:])
        if view.shape[d] != extent:
            return False
        dims.append(d)
    return sorted(dims) == list(range(len(view.shape)))


def pad_op(b: Builder, x: Atom, pad_value: Atom, config, out_shape, dtype: str) -> Ref:
    """Gather-with-fill pad: out[i] = x[(i - lo) / (interior + 1)] where in
    bounds and exact, else `pad_value`."""
    names = pool_names("elem", len(out_shape))
    imap = []
    for n, (lo, _hi, interior) in zip(names, config):
        lo, interior = int(lo), int(interior)
        if interior:
            imap.append(AffineExpr(((n, 1),), -lo, interior + 1, 0, exact=True))
        else:
            imap.append(AffineExpr(((n, 1),), -lo))
    ops = Operands(b)
    arg = _bounded_read(b, ops, x, tuple(imap))
    if isinstance(pad_value, Lit) and pad_value.value == 0 and not np.signbit(pad_value.value):
        body = arg      # out-of-bounds gathers read (+)0 already
    else:
        body = Prim("select_n", (InBounds(arg.index), ops.read(pad_value, ()), arg))
    return _emit(b, "pad", "layout", names, out_shape, ops, out_shape, dtype,
                 identity_map(names), body)


@register("concatenate")
def concatenate_rule(b: Builder, eqn, atoms: list) -> list:
    """out[.., i, ..] = x_k[.., i - offset_k, ..] for the k whose range holds i."""
    dim = eqn.params["dimension"]
    out = eqn.outvars[0]
    shape = _shape(out)
    names = pool_names("elem", len(shape))
    ids = identity_map(names)
    ops = Operands(b)
    args, offset = [], 0
    for atom, v in zip(atoms, eqn.invars):
        imap = list(ids)
        imap[dim] = AffineExpr(((names[dim], 1),), -offset)
        args.append(_bounded_read(b, ops, atom, tuple(imap)))
        offset += _shape(v)[dim]
    body = args[-1]
    for arg in reversed(args[:-1]):
        body = Prim("select_n", (InBounds(arg.index), body, arg))
    return [_emit(b, "concatenate", "layout", names, shape, ops, shape, _dtype(out), ids,
                  body)]


# --------------------------------------------------------------------------
# reductions and contractions
# --------------------------------------------------------------------------
_COMBINER = {"reduce_sum": "add", "reduce_max": "max", "reduce_min": "min",
             "reduce_or": "max", "reduce_and": "min"}


@register(*_COMBINER)
def reduce_rule(b: Builder, eqn, atoms: list) -> list:
    """out[kept] = combine_{reduced} x[all]; loop order kept dims, then reduced."""
    name = eqn.primitive.name
    x, out = eqn.invars[0], eqn.outvars[0]
    if name in ("reduce_or", "reduce_and") and _dtype(x) != "bool":
        return host_rule(b, eqn, atoms, "bitwise integer reduction: PIM combiners are add/max/min")
    xs = _shape(x)
    axes = {a % len(xs) for a in eqn.params["axes"]}
    taken: set[str] = set()
    red = iter(fresh_names("red", len(axes), taken))
    keep = iter(fresh_names("keep", len(xs) - len(axes), taken))
    names = [next(red) if d in axes else next(keep) for d in range(len(xs))]
    kept = [n for d, n in enumerate(names) if d not in axes]
    reduced = [n for d, n in enumerate(names) if d in axes]
    ext = dict(zip(names, xs))
    ops = Operands(b)
    body = ops.read(atoms[0], identity_map(tuple(names)))
    order = kept + reduced
    return [_emit(b, name, "reduction", order, [ext[n] for n in order], ops, _shape(out),
                  _dtype(out), identity_map(tuple(kept)), body, reduced, _COMBINER[name])]


@register("dot_general")
def dot_general_rule(b: Builder, eqn, atoms: list) -> list:
    """out[batch, lhs free, rhs free] = sum_contract lhs * rhs (in the out dtype)."""
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    lhs, rhs, out = eqn.invars[0], eqn.invars[1], eqn.outvars[0]
    ls, rs = _shape(lhs), _shape(rhs)
    lfree = [d for d in range(len(ls)) if d not in lc and d not in lb]
    rfree = [d for d in range(len(rs)) if d not in rc and d not in rb]
    taken: set[str] = set()
    bn = fresh_names("batch", len(lb), taken)
    free = fresh_names("free", len(lfree) + len(rfree), taken)
    ln, rn = free[:len(lfree)], free[len(lfree):]
    cn = fresh_names("contract", len(lc), taken)
    lmap: list = [None] * len(ls)
    rmap: list = [None] * len(rs)
    ext: dict[str, int] = {}
    for n, dl, dr in zip(bn, lb, rb):
        lmap[dl], rmap[dr], ext[n] = n, n, ls[dl]
    for n, dl, dr in zip(cn, lc, rc):
        lmap[dl], rmap[dr], ext[n] = n, n, ls[dl]
    for n, d in zip(ln, lfree):
        lmap[d], ext[n] = n, ls[d]
    for n, d in zip(rn, rfree):
        rmap[d], ext[n] = n, rs[d]
    ops = Operands(b)
    dt = _dtype(out)
    a = cast(ops.read(atoms[0], identity_map(tuple(lmap))), _dtype(lhs), dt)
    c = cast(ops.read(atoms[1], identity_map(tuple(rmap))), _dtype(rhs), dt)
    order = (*bn, *ln, *rn, *cn)
    return [_emit(b, "dot_general", "contraction", order, [ext[n] for n in order], ops,
                  _shape(out), dt, identity_map((*bn, *ln, *rn)), Prim("mul", (a, c)), cn,
                  "add")]


_SPATIAL = {1: ("w",), 2: ("h", "w"), 3: ("d", "h", "w")}


@register("conv_general_dilated")
def conv_rule(b: Builder, eqn, atoms: list) -> list:
    """Convolution as `pad` (padding, lhs dilation) + an im2col contraction

        y[n, h, w, f] = sum_{kh,kw,c} x[n, s*h + r*kh, s*w + r*kw, c] * W[kh, kw, c, f]

    With feature groups G the output feature splits into (g, fo), so
    f = Fo*g + fo and the input channel is Cg*g + c: every map stays affine."""
    p = eqn.params
    if p["batch_group_count"] != 1:
        return host_rule(b, eqn, atoms)
    lhs, rhs, out = eqn.invars[0], eqn.invars[1], eqn.outvars[0]
    ls, rs, os_ = _shape(lhs), _shape(rhs), _shape(out)
    dn = p["dimension_numbers"]
    lspec, rspec, ospec = dn.lhs_spec, dn.rhs_spec, dn.out_spec
    nsp = len(ls) - 2
    x = atoms[0]
    pads, ldil = p["padding"], p["lhs_dilation"]
    if any(lo or hi for lo, hi in pads) or any(d != 1 for d in ldil):
        config = [(0, 0, 0)] * len(ls)
        padded = list(ls)
        for s in range(nsp):
            d = lspec[2 + s]
            lo, hi = pads[s]
            config[d] = (int(lo), int(hi), int(ldil[s]) - 1)
            padded[d] = ls[d] + lo + hi + (ls[d] - 1) * (ldil[s] - 1)
        x = pad_op(b, x, Lit(0, _dtype(lhs)), config, tuple(padded), _dtype(lhs))
    G = int(p["feature_group_count"])
    F, Cg = os_[ospec[1]], rs[rspec[1]]
    Fo = F // G
    sp = _SPATIAL.get(nsp, tuple(f"s{i}" for i in range(nsp)))
    names: list[str] = ["n", *sp]
    ext = {"n": os_[ospec[0]], **{n: os_[ospec[2 + s]] for s, n in enumerate(sp)}}
    var = AffineExpr.var
    if G == 1:
        names.append("f")
        ext["f"] = F
        fexpr, cin_lhs, cin_rhs = var("f"), var("c"), var("c")
    else:
        names.append("g")
        ext["g"] = G
        fexpr = AffineExpr.linear({"g": Fo, "fo": 1 if Fo > 1 else 0})
        if Fo > 1:
            names.append("fo")
            ext["fo"] = Fo
        cin_lhs = AffineExpr.linear({"g": Cg, "c": 1 if Cg > 1 else 0})
        cin_rhs = var("c") if Cg > 1 else ZERO
    red: list[str] = []
    kexprs = []
    for s, n in enumerate(sp):
        k = rs[rspec[2 + s]]
        if k > 1:        # a 1-wide kernel dim is index 0, not a loop variable
            red.append("k" + n)
            ext["k" + n] = k
            kexprs.append(var("k" + n))
        else:
            kexprs.append(ZERO)
    if G == 1 or Cg > 1:
        red.append("c")
        ext["c"] = Cg
    names += red
    lmap: list = [None] * len(ls)
    rmap: list = [None] * len(rs)
    omap: list = [None] * len(os_)
    lmap[lspec[0]], lmap[lspec[1]] = var("n"), cin_lhs
    rmap[rspec[0]], rmap[rspec[1]] = fexpr, cin_rhs
    omap[ospec[0]], omap[ospec[1]] = var("n"), fexpr
    strides, rdil = p["window_strides"], p["rhs_dilation"]
    for s, n in enumerate(sp):
        coeffs = {n: int(strides[s])}
        if kexprs[s].terms:       # s*h + r*kh
            coeffs[kexprs[s].vars[0]] = int(rdil[s])
        lmap[lspec[2 + s]] = AffineExpr.linear(coeffs)
        rmap[rspec[2 + s]] = kexprs[s]
        omap[ospec[2 + s]] = var(n)
    ops = Operands(b)
    dt = _dtype(out)
    a = cast(ops.read(x, tuple(lmap)), _dtype(lhs), dt)
    c = cast(ops.read(atoms[1], tuple(rmap)), _dtype(rhs), dt)
    return [_emit(b, "conv_general_dilated", "contraction", names, [ext[n] for n in names],
                  ops, os_, dt, omap, Prim("mul", (a, c)), red, "add")]
