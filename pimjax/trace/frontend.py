"""`make_graph`: trace a jnp function with `jax.make_jaxpr` and translate the
jaxpr into a `PimGraph` (see README.md in this folder)."""
from __future__ import annotations

import gc
import inspect
import linecache
import os
import re
import traceback as pytraceback

import jax
import jax.extend.core as jcore
import numpy as np

from ..errors import PIMJAX_DIR, PimTraceError, internal_dirs, is_internal
from .builder import Atom, Builder, Lit, Ref
from .check import check_graph
from .fusion import dead_code
from .fusion import fuse as fuse_ops
from .ir import Access, PimGraph, PimOp, ValueInfo
from .rules import TRACE_RULES, host_rule

# Call-like primitives whose sub-jaxpr is inlined, and the param holding it.
INLINE_PARAMS = {
    "pjit": "jaxpr", "jit": "jaxpr", "closed_call": "call_jaxpr", "core_call": "call_jaxpr",
    "custom_jvp_call": "call_jaxpr", "custom_vjp_call": "call_jaxpr",
    "custom_vjp_call_jaxpr": "fun_jaxpr", "remat": "jaxpr", "remat2": "jaxpr",
    "checkpoint": "jaxpr",
}

# jax's tracing errors that mean "this function has no static dataflow graph".
TRACE_ERRORS = (jax.errors.ConcretizationTypeError, jax.errors.TracerBoolConversionError,
                jax.errors.TracerIntegerConversionError, jax.errors.TracerArrayConversionError,
                jax.errors.NonConcreteBooleanIndexError, jax.errors.UnexpectedTracerError)


def make_graph(fn, *example_args, fuse: bool = True) -> PimGraph:
    """Trace `fn(*example_args)` into a PimGraph.

    example_args: pytrees of arrays (or `jax.ShapeDtypeStruct`s); only shapes
    and dtypes matter.  Inputs are named after `fn`'s parameters (pytree
    leaves get `_key` suffixes), the output `y` (several: `y0, y1, ..`),
    intermediates `t0, t1, ..`.  `fuse=False` keeps one op per primitive.

    >>> import jax.numpy as jnp, pimjax
    >>> g = pimjax.make_graph(lambda W, x: W @ x, jnp.ones((64, 32)), jnp.ones(32))
    >>> print(g.as_text())
    y[i] = sum_k W[i,k] * x[k]   i<64 k<32

    Raises PimTraceError (with the user's source line) when `fn` cannot be
    traced to a static graph (Python control flow on traced values,
    data-dependent shapes)."""
    try:
        closed, out_shape = jax.make_jaxpr(fn, return_shape=True)(*example_args)
    except TRACE_ERRORS as err:
        raise PimTraceError(trace_error_message(err)) from err
    # The translation allocates many small acyclic objects; collector passes
    # over the (large) live jaxpr cost ~20% of its time, so pause them.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _build(fn, example_args, closed, out_shape, fuse)
    finally:
        if gc_was_enabled:
            gc.enable()


def _build(fn, example_args, closed, out_shape, fuse: bool) -> PimGraph:
    jaxpr = closed.jaxpr
    b = Builder()
    env: dict = {}
    inputs = []
    for v, name in zip(jaxpr.invars, input_names(fn, example_args)):
        vid = b.new_value(v.aval.shape, v.aval.dtype, name)
        env[v] = Ref(vid)
        inputs.append(vid)
    for v, c in zip(jaxpr.constvars, closed.consts):
        env[v] = b.constant_ref(c)
    translate(b, jaxpr, env)
    b.source = ""
    outputs = [b.value_of(read_atom(b, env, v)) for v in jaxpr.outvars]
    ops = dead_code(b.ops, outputs, b.effectful)
    if fuse:
        ops = fuse_ops(ops, outputs, [v.shape for v in b.values])
    graph = finalize(b, ops, inputs, outputs,
                     in_tree=jax.tree_util.tree_structure(example_args),
                     out_tree=jax.tree_util.tree_structure(out_shape),
                     fn_name=getattr(fn, "__name__", type(fn).__name__))
    check_graph(graph)
    return graph


# --------------------------------------------------------------------------
# jaxpr walk
# --------------------------------------------------------------------------
def read_atom(b: Builder, env: dict, v) -> Atom:
    if isinstance(v, jcore.Literal):
        val = np.asarray(v.val)
        if val.ndim == 0:
            return Lit(val.item(), str(np.dtype(v.aval.dtype)))
        return Ref(b.constant(val))
    return env[v]


def sub_jaxpr(eqn):
    """(jaxpr, consts) of an inlinable call primitive, else None."""
    key = INLINE_PARAMS.get(eqn.primitive.name)
    if key is None:
        return None
    sub = eqn.params.get(key)
    if isinstance(sub, jcore.ClosedJaxpr):
        return sub.jaxpr, sub.consts
    if isinstance(sub, jcore.Jaxpr):
        return sub, ()
    return None


def translate(b: Builder, jaxpr, env: dict, outer_source=None) -> None:
    """Translate every eqn of `jaxpr` (inlining calls), extending `env`.

    Tracebacks inside a called jaxpr stop at the call boundary, so inlined
    eqns without a user frame take the call site's (`outer_source`)."""
    rules = TRACE_RULES
    for eqn in jaxpr.eqns:
        atoms = [read_atom(b, env, v) for v in eqn.invars]
        source = SourceRef(eqn.source_info.traceback, outer_source)
        sub = sub_jaxpr(eqn)
        if sub is not None:
            inner, consts = sub
            inner_env = {v: b.constant_ref(c) for v, c in zip(inner.constvars, consts)}
            inner_env.update(zip(inner.invars, atoms))
            translate(b, inner, inner_env, source)
            outs = [read_atom(b, inner_env, v) for v in inner.outvars]
        else:
            b.source = source
            rule = rules.get(eqn.primitive.name)
            if rule is None or _has_empty(eqn):
                outs = host_rule(b, eqn, atoms,
                                 "zero-size array" if rule is not None else None)
            else:
                outs = rule(b, eqn, atoms)
        for v, a in zip(eqn.outvars, outs):
            if not isinstance(v, jcore.DropVar):
                env[v] = a


def _has_empty(eqn) -> bool:
    for v in (*eqn.invars, *eqn.outvars):
        if 0 in getattr(v.aval, "shape", ()):
            return True
    return False


# --------------------------------------------------------------------------
# source lines
# --------------------------------------------------------------------------
_JAX_DIRS = internal_dirs()[:2]
_MACHINERY = tuple(os.path.join(PIMJAX_DIR, d) + os.sep for d in ("trace", "plan", "search", "sim", "lower")) + (
    os.path.join(PIMJAX_DIR, "api.py"),)


def user_source(tb) -> str:
    """"file:line" of the innermost traceback frame outside jax and pimjax; for code pimjax
    itself wrote (a study's model, `pimjax/models`), the innermost frame of that code outside
    jax and pimjax's compiler machinery, so an op of pimjax's own model names its line there,
    not "?"."""
    if tb is None:
        return ""
    codes, lastis = tb.raw_frames()
    fallback = ""
    for code, lasti in zip(codes, lastis):
        name = code.co_filename
        if not is_internal(name):
            return f"{name}:{type(tb).code_addr2line(code, lasti)}"
        if not fallback and not name.startswith(_JAX_DIRS) and not name.startswith(_MACHINERY):
            fallback = f"{os.path.relpath(name, os.path.dirname(PIMJAX_DIR))}:{type(tb).code_addr2line(code, lasti)}"
    return fallback


class SourceRef:
    """An eqn's user source line, resolved only for ops that survive dead-code
    removal and fusion (most eqns are views or fused away).  `outer` is the
    call site's SourceRef: tracebacks inside a called jaxpr stop at the call."""

    __slots__ = ("tb", "outer", "_text")

    def __init__(self, tb, outer: "SourceRef | None"):
        self.tb, self.outer, self._text = tb, outer, None

    def resolve(self) -> str:
        if self._text is None:
            text = user_source(self.tb)
            if not text and self.outer is not None:
                text = self.outer.resolve()
            self._text = text
        return self._text


def resolve_source(source) -> str:
    return source if isinstance(source, str) else source.resolve()


def trace_error_message(err: BaseException) -> str:
    """The original error text plus the innermost user frame and its code."""
    where = ""
    for frame in reversed(pytraceback.extract_tb(err.__traceback__)):
        if not is_internal(frame.filename):
            code = frame.line or linecache.getline(frame.filename, frame.lineno).strip()
            where = f"{frame.filename}:{frame.lineno}: {code}"
            break
    head = f"cannot trace the function into a PimGraph ({type(err).__name__})"
    if where:
        head += f" at {where}"
    return f"{head}\n{err}"


# --------------------------------------------------------------------------
# naming and finalisation
# --------------------------------------------------------------------------
def input_names(fn, args) -> list[str]:
    """One name per flattened leaf: the parameter name, `_key` suffixed for
    pytree leaves (`params_w1`), `args0, args1, ..` for `*args`."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    positional = [p for p in params
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    var = next((p for p in params if p.kind == p.VAR_POSITIONAL), None)
    names = []
    for i, arg in enumerate(args):
        if i < len(positional):
            base = positional[i].name
        elif var is not None:
            base = f"{var.name}{i - len(positional)}"
        else:
            base = f"x{i}"
        for path, _ in jax.tree_util.tree_flatten_with_path(arg)[0]:
            if path:
                key = jax.tree_util.keystr(path, simple=True, separator="_")
                names.append(re.sub(r"\W", "_", f"{base}_{key}"))
            else:
                names.append(base)
    return names


def _unique(name: str, taken: set[str], *alternatives: str) -> str:
    for cand in (name, *alternatives):
        if cand not in taken:
            taken.add(cand)
            return cand
    n = 1
    while f"{name}_{n}" in taken:
        n += 1
    taken.add(f"{name}_{n}")
    return f"{name}_{n}"


def finalize(b: Builder, ops: list[PimOp], inputs, outputs, in_tree, out_tree,
             fn_name: str) -> PimGraph:
    """Renumber live values densely (inputs, then in op order) and name them."""
    new: dict[int, int] = {}
    order: list[int] = []

    def number(vid: int) -> int:
        nid = new.get(vid)
        if nid is None:
            nid = new[vid] = len(order)
            order.append(vid)
        return nid

    for vid in inputs:
        number(vid)
    renumbered = []
    for op in ops:
        operands = tuple(Access(number(a.value), a.index_map) for a in op.operands)
        results = tuple(Access(number(r.value), r.index_map) for r in op.results)
        renumbered.append(_with_accesses(op, operands, results))
    outs = tuple(number(v) for v in outputs)

    taken: set[str] = set()
    names: dict[int, str] = {}
    for vid in inputs:
        names[vid] = _unique(b.values[vid].name, taken)
    out_vids = list(dict.fromkeys(outputs))
    for k, vid in enumerate(out_vids):
        if vid not in names:
            names[vid] = (_unique("y", taken, "out") if len(outputs) == 1
                          else _unique(f"y{k}", taken, f"out{k}"))
    t = c = 0
    for vid in order:
        if vid in names:
            continue
        if vid in b.constants:
            while f"c{c}" in taken:
                c += 1
            names[vid] = _unique(f"c{c}", taken)
        else:
            while f"t{t}" in taken:
                t += 1
            names[vid] = _unique(f"t{t}", taken)
    values = tuple(ValueInfo(b.values[vid].shape, b.values[vid].dtype, names[vid])
                   for vid in order)
    constants = {new[vid]: arr for vid, arr in b.constants.items() if vid in new}
    return PimGraph(values, tuple(new[v] for v in inputs), outs, tuple(renumbered), constants,
                    in_tree, out_tree, fn_name)


def _with_accesses(op: PimOp, operands, results) -> PimOp:
    return PimOp(op.name, op.kind, op.loop_vars, operands, results, op.reduction_vars,
                 op.combiner, op.body, op.epilogue, op.fill, resolve_source(op.source),
                 op.host, op.fused)
