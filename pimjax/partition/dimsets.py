"""Dimension-set construction (DCC §IV-B, step 1).

Every tensor dimension an op touches has a *mapping function*: the affine
expression of its index map (`h + kh` for a convolution input row).  Tensor
dimensions whose mapping functions share a loop variable must be tiled
together, so they form one *complex dimension set*; the others form simple
sets.  A dimension set's candidate *representative mappings* are its distinct
linear mapping functions: tiling the range of that expression over groups and
cores assigns every iteration point to exactly one core.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..trace.affine import AffineExpr
from ..trace.ir import PimOp

RESULT = -1  # operand index used for the op's result in TensorDim


@dataclass(frozen=True)
class TensorDim:
    """Dimension `dim` of operand `operand` (RESULT = -1 for the result)."""
    operand: int
    dim: int
    expr: AffineExpr


@dataclass(frozen=True)
class DimensionSet:
    """A set of tensor dimensions linked by shared loop variables.

    vars:     the loop variables of the set, in loop order.
    dims:     the tensor dimensions in the set.
    candidates: candidate representative mappings: assignments of a mapping
              function to a tensor dimension (DCC), linear ones only, the
              preferred first (a single output variable if any).  Several
              candidates may carry the same function (W[i,k] and y[i] both
              map `i`): pruning rule 1 removes those duplicates.
    reduction: True when some variable of the set is a reduction variable.
    """
    vars: tuple[str, ...]
    dims: tuple[TensorDim, ...]
    candidates: tuple[TensorDim, ...]
    reduction: bool

    def mapping(self, rep: int) -> AffineExpr:
        """The mapping function of candidate `rep`, without its constant offset
        (an offset shifts the range but does not change the tiling)."""
        return AffineExpr(self.candidates[rep].expr.terms, 0)

    def extent(self, rep: int, extents: dict[str, int]) -> tuple[int, int]:
        """(low, length) of candidate `rep`'s value range over the loop domain."""
        lo, hi = self.mapping(rep).value_range(extents)
        return lo, hi - lo + 1


def _accesses(op: PimOp):
    """(operand index, Access) for the operands the op reads and its result."""
    used = set(op.body_operands) | set(op.epilogue_operands)
    for k, acc in enumerate(op.operands):
        if k in used:
            yield k, acc
    yield RESULT, op.result


def dimension_sets(op: PimOp) -> tuple[DimensionSet, ...]:
    """Group the op's tensor dimensions into dimension sets.

    Union-find over loop variables: the variables of one mapping function are
    joined.  Loop variables that no tensor dimension uses form their own set
    (mapping = the variable), so every loop variable belongs to one set.
    Sets are ordered by their first loop variable.

    Kept per op (the result is immutable): every lowering and check of a
    draft asks for its op's sets, a few hundred times per op when tuning.
    """
    return _dimension_sets(op)


@lru_cache(maxsize=4096)
def _dimension_sets(op: PimOp) -> tuple[DimensionSet, ...]:
    order = [lv.name for lv in op.loop_vars]
    parent = {v: v for v in order}

    def find(v):
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    dims: list[TensorDim] = []
    for k, acc in _accesses(op):
        for d, expr in enumerate(acc.index_map):
            if not expr.vars:
                continue  # constant index: nothing to tile
            dims.append(TensorDim(k, d, expr))
            first = find(expr.vars[0])
            for v in expr.vars[1:]:
                parent[find(v)] = first

    roots: dict[str, list[str]] = {}
    for v in order:
        roots.setdefault(find(v), []).append(v)
    sets = []
    for members in sorted(roots.values(), key=lambda m: order.index(m[0])):
        mset = set(members)
        sdims = tuple(td for td in dims if set(td.expr.vars) & mset)
        sets.append(DimensionSet(tuple(members), sdims, _candidates(op, members, sdims),
                                 bool(mset & set(op.reduction_vars))))
    return tuple(sets)


def _candidates(op: PimOp, members: list[str], dims: tuple[TensorDim, ...]) -> tuple[TensorDim, ...]:
    """Linear tensor dimensions of the set as representative-mapping candidates.

    Preference: single output variables (tiling the result gives complete
    outputs), then other single variables, then compound expressions.  A set
    without any linear dimension (only reshaped accesses) falls back to its
    loop variables, recorded with operand index RESULT and dim -1."""
    cands = [td for td in dims if td.expr.is_linear]
    if not cands:
        cands = [TensorDim(RESULT, -1, AffineExpr.var(v)) for v in members]
    out_vars = set(op.output_vars)
    order = [lv.name for lv in op.loop_vars]

    def rank(td: TensorDim):
        single = AffineExpr(td.expr.terms, 0).single_var
        if single is not None:
            return (0 if single in out_vars else 1, order.index(single), td.operand != RESULT)
        return (2, len(td.expr.terms), td.operand != RESULT)

    return tuple(sorted(cands, key=rank))
