"""The PimGraph IR: operations as loop nests in einsum form.

A `PimOp` is a loop nest over named loop variables.  Every operand and the
result is an `Access`: a graph value and an index map (one `AffineExpr` per
tensor dimension).  The op computes, for every point of the iteration space,

    acc[result_map(p)]  (combiner)=  body(operands at p)      over reduction vars
    value[result_map]  =  epilogue(acc, epilogue operands)

so `y[i] = relu(sum_k W[i,k] * x[k] + b[i])` is one contraction with
body `mul(Arg(0), Arg(1))`, combiner `add`, reduction var `k` and epilogue
`max(add(Acc, Arg(2)), 0)`.  Operands used by the epilogue index only the
result's (non-reduction) variables.

Layout ops (transpose, reshape, pad, slice, concatenate, ...) are the same
form without reduction; a gather outside an operand's bounds reads zero and
`InBounds(k)` tells the body whether operand k's read was in bounds (that is
how pad and concatenate select between pieces).  Host ops keep the primitive
and its parameters and say why they are not PIM ops.

Kinds: contraction | reduction | elementwise | layout | host.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

from .affine import AffineExpr

KINDS = ("contraction", "reduction", "elementwise", "layout", "host")
COMBINERS = ("add", "max", "min")


# --------------------------------------------------------------------------
# scalar body expressions
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class Arg:
    """The value of operand `index` at the current iteration point."""
    index: int


@dataclass(frozen=True)
class Acc:
    """The reduced accumulator (only inside an epilogue)."""


@dataclass(frozen=True)
class Const:
    value: float | int | bool
    dtype: str


@dataclass(frozen=True)
class InBounds:
    """True where operand `index`'s gather at this point was in bounds."""
    index: int


@dataclass(frozen=True)
class Prim:
    """An elementwise primitive applied to sub-expressions.

    `name` is a jax primitive name (`add`, `exp`, `integer_pow`, ...);
    `params` a sorted tuple of hashable (key, value) pairs (e.g. `(("y", 2),)`).
    """
    name: str
    args: tuple["Expr", ...]
    params: tuple[tuple[str, Any], ...] = ()

    def param(self, key: str, default=None):
        return dict(self.params).get(key, default)


Expr = Arg | Acc | Const | InBounds | Prim


# conversions that keep an operand's value (a bf16 operand widened to float32 before the multiply
# is what a bf16 MAC does): what a lowering looks through to find the operand read
VALUE_PRESERVING = ("convert_element_type", "copy", "copy_p")


def strip_converts(expr: Expr) -> Expr:
    """`expr` with its outer value-preserving unary conversions removed (`VALUE_PRESERVING`):
    the `Arg` an operand read is under its converts, or the first other node."""
    while isinstance(expr, Prim) and expr.name in VALUE_PRESERVING and len(expr.args) == 1:
        expr = expr.args[0]
    return expr


def expr_args(expr: Expr) -> set[int]:
    """Operand indices an expression reads."""
    if isinstance(expr, (Arg, InBounds)):
        return {expr.index}
    if isinstance(expr, Prim):
        out: set[int] = set()
        for a in expr.args:
            out |= expr_args(a)
        return out
    return set()


def expr_prims(expr: Expr) -> Iterator[str]:
    """All primitive names used by an expression (pre-order)."""
    if isinstance(expr, Prim):
        yield expr.name
        for a in expr.args:
            yield from expr_prims(a)


def expr_depth(expr: Expr | None) -> int:
    """Nesting depth of an expression (a leaf is 1, None 0); iterative, so
    it measures expressions deeper than Python's recursion limit."""
    if expr is None:
        return 0
    best, stack = 0, [(expr, 1)]
    while stack:
        e, d = stack.pop()
        best = max(best, d)
        if isinstance(e, Prim):
            stack.extend((a, d + 1) for a in e.args)
    return best


def map_args(expr: Expr, fn) -> Expr:
    """Rebuild `expr` with every `Arg`/`InBounds` index replaced by `fn(index)`.

    `fn` returns either an int (new operand index) or an `Expr` to splice in
    (only meaningful for `Arg`)."""
    if isinstance(expr, Arg):
        new = fn(expr.index)
        return Arg(new) if isinstance(new, int) else new
    if isinstance(expr, InBounds):
        new = fn(expr.index)
        if not isinstance(new, int):
            raise ValueError("InBounds can only be re-indexed")
        return InBounds(new)
    if isinstance(expr, Prim):
        return Prim(expr.name, tuple(map_args(a, fn) for a in expr.args), expr.params)
    return expr


def replace_acc(expr: Expr, new: Expr) -> Expr:
    """Substitute `new` for `Acc` in an epilogue."""
    if isinstance(expr, Acc):
        return new
    if isinstance(expr, Prim):
        return Prim(expr.name, tuple(replace_acc(a, new) for a in expr.args), expr.params)
    return expr


# --------------------------------------------------------------------------
# ops and graph
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class LoopVar:
    name: str
    extent: int

    def __post_init__(self):
        if self.extent < 1:
            raise ValueError(f"loop variable {self.name} has extent {self.extent} < 1")


@dataclass(frozen=True)
class Access:
    """A graph value read or written through an index map."""
    value: int
    index_map: tuple[AffineExpr, ...]

    @property
    def vars(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for e in self.index_map:
            for v in e.vars:
                seen[v] = None
        return tuple(seen)


@dataclass(frozen=True)
class HostCall:
    """How a host op runs: the jax primitive and its parameters."""
    primitive: Any = field(compare=False, hash=False)
    params: dict = field(compare=False, hash=False, default_factory=dict)
    reason: str = ""


@dataclass(frozen=True)
class ValueInfo:
    shape: tuple[int, ...]
    dtype: str
    name: str

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1


@dataclass(frozen=True)
class PimOp:
    """One operation of a PimGraph (see module docstring for semantics).

    name:      the (first) jax primitive, e.g. "dot_general", "reduce_max".
    kind:      contraction | reduction | elementwise | layout | host.
    loop_vars: the iteration domain, outer to inner.
    operands:  accesses read by `body` (and by `epilogue`).
    results:   one access for PIM-describable ops; host ops may have several.
    reduction_vars / combiner: reduced loop variables and "add" | "max" | "min".
    body:      per-point scalar expression over `Arg`s.
    epilogue:  scalar expression over `Acc` and `Arg`s applied after the
               reduction (None means just `Acc`); fused elementwise consumers.
    fill:      value of result elements no iteration point writes (scatter-form
               layout ops); None when every element is written.
    source:    "file:line" of the user code that created the op.
    host:      HostCall for host ops (primitive, params, reason).  Host ops
               have no loop variables and their accesses have empty index
               maps: they read and write whole values.
    """

    name: str
    kind: str
    loop_vars: tuple[LoopVar, ...]
    operands: tuple[Access, ...]
    results: tuple[Access, ...]
    reduction_vars: tuple[str, ...] = ()
    combiner: str | None = None
    body: Expr | None = None
    epilogue: Expr | None = None
    fill: float | None = None
    source: str = ""
    host: HostCall | None = None
    fused: tuple[str, ...] = ()

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown op kind {self.kind!r}; expected one of {KINDS}")
        if self.combiner is not None and self.combiner not in COMBINERS:
            raise ValueError(f"unknown combiner {self.combiner!r}; expected one of {COMBINERS}")

    @property
    def result(self) -> Access:
        if len(self.results) != 1:
            raise ValueError(f"op {self.name} has {len(self.results)} results")
        return self.results[0]

    @property
    def extents(self) -> dict[str, int]:
        return {lv.name: lv.extent for lv in self.loop_vars}

    @property
    def output_vars(self) -> tuple[str, ...]:
        return tuple(lv.name for lv in self.loop_vars if lv.name not in self.reduction_vars)

    @property
    def body_operands(self) -> tuple[int, ...]:
        return tuple(sorted(expr_args(self.body))) if self.body is not None else ()

    @property
    def scalar_operands(self) -> frozenset[int]:
        """Operands with an empty index map: one value for every iteration point."""
        return frozenset(k for k, a in enumerate(self.operands) if not a.index_map)

    @property
    def epilogue_operands(self) -> tuple[int, ...]:
        if self.epilogue is None:
            return ()
        return tuple(sorted(expr_args(self.epilogue) - set(self.body_operands)))

    @property
    def iteration_points(self) -> int:
        return int(np.prod([lv.extent for lv in self.loop_vars], dtype=np.int64))


# PimGraph.evaluate / as_text are evaluate.py's `evaluate_graph` and text.py's `graph_text`, which
# build on this module: they register themselves here (the package imports both), so this module
# imports neither
GRAPH_VIEWS: dict = {}


@dataclass(frozen=True)
class PimGraph:
    """A traced function: values, ops in topological order, inputs/outputs.

    values:    ValueInfo per value id (ids are indices into this tuple).
    inputs:    value ids of the flattened function arguments.
    outputs:   value ids of the flattened results.
    constants: value id -> numpy array for closed-over constants and literals.
    """

    values: tuple[ValueInfo, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    ops: tuple[PimOp, ...]
    constants: dict = field(default_factory=dict, compare=False, hash=False)
    in_tree: Any = field(default=None, compare=False, hash=False)
    out_tree: Any = field(default=None, compare=False, hash=False)
    fn_name: str = ""

    def value_name(self, vid: int) -> str:
        return self.values[vid].name

    def producer(self, vid: int) -> PimOp | None:
        for op in self.ops:
            if any(r.value == vid for r in op.results):
                return op
        return None

    def consumers(self, vid: int) -> list[PimOp]:
        return [op for op in self.ops if any(a.value == vid for a in op.operands)]

    def ops_of_kind(self, kind: str) -> list[PimOp]:
        return [op for op in self.ops if op.kind == kind]

    def evaluate(self, *args):
        """Run the graph with jnp from the op descriptions alone.

        Takes the same (pytree) arguments as the traced function and returns
        its (pytree) result.  Index maps, reductions and scalar bodies are
        interpreted; only host ops call their jax primitive (`evaluate.py`)."""
        return GRAPH_VIEWS["evaluate"](self, *args)

    def as_text(self) -> str:
        """One readable line per op, e.g.
        `y[i] = relu(sum_k W[i,k] * x[k] + b[i])   i<4096 k<4096` (`text.py`)."""
        return GRAPH_VIEWS["text"](self)

    def __str__(self) -> str:
        return self.as_text()

