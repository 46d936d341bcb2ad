"""Mutable state used while translating one jaxpr into a PimGraph.

The translation rules (`rules.py`) see jaxpr variables as *atoms*:

- `Ref(vid)`:  a materialised graph value;
- `Lit(value, dtype)`: a scalar literal, which becomes `Const` in a body;
- `View(base, exprs, shape)`: a pure re-indexing (broadcast_in_dim,
  transpose, squeeze, unit-dim reshape) of a `Ref` or `Lit` that has not been
  materialised.  `exprs` gives, for every dimension of the base, its index as
  an affine expression of placeholder variables `@0, @1, ...` (one per
  dimension of the view).  A consumer with an einsum body folds the view into
  its own index map by substituting its map for the placeholders; any other
  consumer materialises the view as a layout op (once; cached).

Everything here is internal to `make_graph`; the result is frozen `PimOp`s.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np

from .affine import AffineExpr
from .ir import Access, Arg, Const, Expr, LoopVar, PimOp, ValueInfo

ZERO = AffineExpr.constant(0)
PLACEHOLDERS = tuple(f"@{d}" for d in range(64))
PH_EXPRS = tuple(AffineExpr.var(p) for p in PLACEHOLDERS)


@dataclass(frozen=True)
class Ref:
    """A materialised graph value."""
    vid: int


@dataclass(frozen=True, eq=False)
class Lit:
    """A scalar literal (python scalar + dtype name).  Literals are equal
    when their bits are: -0.0 is not 0.0 (1 / -0.0 is -inf), and a NaN
    equals itself, so memo tables keyed by literals stay right."""
    value: Any
    dtype: str

    def _key(self) -> tuple:
        try:
            return (self.dtype, np.asarray(self.value, dtype=np.dtype(self.dtype)).tobytes())
        except (TypeError, ValueError):
            return (self.dtype, repr(self.value))

    def __eq__(self, other) -> bool:
        return isinstance(other, Lit) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


@dataclass(frozen=True)
class View:
    """A re-indexing of `base` (see module docstring).

    exprs: one expression per base dimension over `@d` placeholders (view dims).
    shape/dtype: of the view.  `prim`/`source` only label a materialised op.
    """
    base: Ref | Lit
    exprs: tuple[AffineExpr, ...]
    shape: tuple[int, ...]
    dtype: str
    prim: str = field(default="broadcast_in_dim", compare=False)
    source: object = field(default="", compare=False)


Atom = Ref | Lit | View


def compose(exprs: tuple[AffineExpr, ...], index_map: tuple[AffineExpr, ...]
            ) -> tuple[AffineExpr, ...]:
    """Substitute `index_map[d]` for placeholder `@d` in every expression.

    A placeholder standing alone is replaced verbatim (so quasi-affine maps
    such as reshape's `(4*i + j) // 2` pass through); a scaled or offset
    placeholder needs a linear replacement, else ValueError."""
    out = []
    for e in exprs:
        if not e.terms:
            out.append(e)
            continue
        v = e.single_var
        if v is not None:
            out.append(index_map[int(v[1:])])
        else:
            out.append(e.substitute({PLACEHOLDERS[d]: m for d, m in enumerate(index_map)}))
    return tuple(out)


@functools.lru_cache(maxsize=None)
def identity_map(names: tuple[str, ...]) -> tuple[AffineExpr, ...]:
    """`(AffineExpr.var(n) for n in names)`, cached (expressions are immutable)."""
    return tuple(AffineExpr.var(n) for n in names)


def loop_vars(names, extents) -> tuple[LoopVar, ...]:
    return tuple(LoopVar(n, int(e)) for n, e in zip(names, extents))


_DTYPE_NAMES: dict = {}


def dtype_name(dtype) -> str:
    """'float32' etc.; cached because str(np.dtype) is slow on the hot path."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        # jax's extended dtypes (PRNG keys, `key<fry>`) are no numpy dtype:
        # their values only flow between host ops, by name
        extended = jax.dtypes.issubdtype(dtype, jax.dtypes.extended)
        name = _DTYPE_NAMES[dtype] = str(dtype) if extended else str(np.dtype(dtype))
    return name


class Operands:
    """Collects the operand accesses of one op, de-duplicating equal ones.

    `read(atom, index_map)` returns the body expression for the atom read at
    `index_map` (one expression per atom dimension): `Arg(k)` or a `Const`."""

    __slots__ = ("builder", "accesses", "_index")

    def __init__(self, builder: "Builder"):
        self.builder = builder
        self.accesses: list[Access] = []
        self._index: dict[tuple, int] = {}

    def read(self, atom: Atom, index_map: tuple[AffineExpr, ...]) -> Expr:
        if isinstance(atom, Lit):
            return Const(atom.value, atom.dtype)
        if isinstance(atom, View):
            if isinstance(atom.base, Lit):
                return Const(atom.base.value, atom.base.dtype)
            try:
                vid, imap = atom.base.vid, compose(atom.exprs, index_map)
            except ValueError:  # not expressible: read the materialised view
                vid, imap = self.builder.materialize(atom), index_map
        else:
            vid, imap = atom.vid, tuple(index_map)
        return Arg(self.add(Access(vid, imap)))

    def add(self, access: Access) -> int:
        key = (access.value, access.index_map)
        k = self._index.get(key)
        if k is None:
            k = len(self.accesses)
            self.accesses.append(access)
            self._index[key] = k
        return k


class Builder:
    """Values, ops and constants of the graph under construction."""

    def __init__(self):
        self.values: list[ValueInfo] = []
        self.ops: list[PimOp] = []
        self.constants: dict[int, np.ndarray] = {}
        self.effectful: set[int] = set()        # op indices never removed as dead
        self._views: dict[View, int] = {}
        self._literals: dict[Lit, int] = {}
        self._const_ids: dict[int, tuple] = {}
        # where the eqn being translated comes from: a str or a lazily
        # resolved object with `resolve() -> "file:line"` (see frontend.py)
        self.source: object = ""

    # -- values -------------------------------------------------------------
    def new_value(self, shape, dtype, name: str = "") -> int:
        self.values.append(ValueInfo(tuple(int(s) for s in shape), dtype_name(dtype), name))
        return len(self.values) - 1

    def constant(self, array) -> int:
        arr = np.asarray(array)
        vid = self.new_value(arr.shape, arr.dtype)
        self.constants[vid] = arr
        return vid

    def constant_ref(self, array) -> Ref:
        """A Ref to a closed-over constant, one value per distinct array object
        (a jitted helper called in every layer shares its constants)."""
        hit = self._const_ids.get(id(array))
        if hit is None or hit[0] is not array:
            hit = self._const_ids[id(array)] = (array, self.constant(array))
        return Ref(hit[1])

    def emit(self, op: PimOp, effectful: bool = False) -> None:
        if effectful:
            self.effectful.add(len(self.ops))
        self.ops.append(op)

    # -- atoms --------------------------------------------------------------
    def value_of(self, atom: Atom) -> int:
        """A graph value id holding `atom` (materialising views/literals)."""
        if isinstance(atom, Ref):
            return atom.vid
        if isinstance(atom, Lit):
            vid = self._literals.get(atom)
            if vid is None:
                vid = self.constant(np.asarray(atom.value, dtype=np.dtype(atom.dtype)))
                self._literals[atom] = vid
            return vid
        return self.materialize(atom)

    def materialize(self, view: View) -> int:
        """Emit (once) a layout op computing `view`; return its value id."""
        vid = self._views.get(view)
        if vid is not None:
            return vid
        names = pool_names("elem", len(view.shape))
        ids = identity_map(names)
        ops = Operands(self)
        body = ops.read(view, ids)
        vid = self.new_value(view.shape, view.dtype)
        self.emit(PimOp(view.prim, "layout", loop_vars(names, view.shape),
                        tuple(ops.accesses), (Access(vid, ids),), body=body,
                        source=view.source or self.source))
        self._views[view] = vid
        return vid


# Readable loop-variable names by role; `fresh_names` falls back to `i0, i1..`.
NAME_POOLS = {
    "elem": ("i", "j", "k", "l", "m", "n", "o", "p"),     # elementwise / layout dims
    "keep": ("i", "j", "m", "n", "o", "p", "q"),          # kept dims of a reduction
    "red": ("k", "l", "r", "s", "t", "u"),                # reduced dims
    "batch": ("b", "h", "g", "e"),                        # dot_general batch dims
    "free": ("i", "j", "m", "n", "o", "p", "q"),          # dot_general free dims (out order)
    "contract": ("k", "l", "r", "u"),                     # dot_general contracting dims
}


@functools.lru_cache(maxsize=None)
def pool_names(pool: str, count: int) -> tuple[str, ...]:
    """The first `count` names of a pool (cached `fresh_names(pool, count, set())`)."""
    return fresh_names(pool, count, set())


def fresh_names(pool: str, count: int, taken: set[str]) -> tuple[str, ...]:
    """`count` names from `NAME_POOLS[pool]` not in `taken` (which is updated)."""
    out: list[str] = []
    for name in NAME_POOLS[pool]:
        if len(out) == count:
            break
        if name not in taken:
            out.append(name)
            taken.add(name)
    n = 0
    while len(out) < count:
        name = f"{NAME_POOLS[pool][0]}{n}"
        n += 1
        if name not in taken:
            out.append(name)
            taken.add(name)
    return tuple(out)
