"""Quasi-affine index expressions over named loop variables.

An index map of a PimOp operand is a tuple of `AffineExpr`, one per tensor
dimension.  Most are plain affine (`i`, `h + kh`, `2*h + kh`); reshapes need
the quasi-affine form `((sum c_v * v + const) // div) % mod`, and interior
padding (strided scatter) needs an *exact* division, where points that do not
divide evenly read nothing (they are out of bounds).

This is the representation DCC's schedule generator works on (DCC §IV-B,
"Dimension Set Construction"): a tensor dimension's *mapping function*.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np


@dataclass(frozen=True)
class AffineExpr:
    """`((sum(coeff * var) + const) // div) % mod`, all integers.

    terms: ((var, coeff), ...) with non-zero coefficients, in first-use order.
    div:   floor divisor (1 = none); with `exact=True` the division must be
           exact, otherwise the point is out of bounds (interior padding).
    mod:   modulus (0 = none).
    """

    terms: tuple[tuple[str, int], ...] = ()
    const: int = 0
    div: int = 1
    mod: int = 0
    exact: bool = False

    def __post_init__(self):
        if self.div < 1:
            raise ValueError(f"AffineExpr.div must be >= 1, got {self.div}")
        if self.mod < 0:
            raise ValueError(f"AffineExpr.mod must be >= 0, got {self.mod}")
        if any(c == 0 for _, c in self.terms):
            object.__setattr__(self, "terms", tuple((v, c) for v, c in self.terms if c != 0))

    # -- constructors -------------------------------------------------------
    @staticmethod
    def var(name: str, coeff: int = 1) -> "AffineExpr":
        return AffineExpr(((name, coeff),))

    @staticmethod
    def constant(value: int) -> "AffineExpr":
        return AffineExpr((), int(value))

    @staticmethod
    def linear(coeffs: Mapping[str, int], const: int = 0) -> "AffineExpr":
        return AffineExpr(tuple((v, int(c)) for v, c in coeffs.items() if c != 0), int(const))

    # -- queries ------------------------------------------------------------
    @property
    def vars(self) -> tuple[str, ...]:
        return tuple(v for v, _ in self.terms)

    @property
    def is_linear(self) -> bool:
        """True when there is no division or modulus (plain affine)."""
        return self.div == 1 and self.mod == 0

    @property
    def single_var(self) -> str | None:
        """The variable when the expression is exactly `v` (coefficient 1, no offset)."""
        if self.is_linear and self.const == 0 and len(self.terms) == 1 and self.terms[0][1] == 1:
            return self.terms[0][0]
        return None

    def coeff(self, var: str) -> int:
        return dict(self.terms).get(var, 0)

    def value_range(self, extents: Mapping[str, int]) -> tuple[int, int]:
        """Inclusive (min, max) of the expression over `0 <= v < extents[v]`."""
        lo = hi = self.const
        for v, c in self.terms:
            span = c * (extents[v] - 1)
            lo += min(0, span)
            hi += max(0, span)
        if self.div > 1:
            lo, hi = lo // self.div, hi // self.div
        if self.mod:
            if hi - lo + 1 >= self.mod or (lo // self.mod) != (hi // self.mod):
                lo, hi = 0, self.mod - 1
            else:
                lo, hi = lo % self.mod, hi % self.mod
        return lo, hi

    # -- algebra ------------------------------------------------------------
    def substitute(self, env: Mapping[str, "AffineExpr"]) -> "AffineExpr":
        """Replace variables by linear expressions (only for a linear `self`
        or linear replacements of its terms); used to fold layout ops into
        their consumers' index maps."""
        coeffs: dict[str, int] = {}
        const = self.const
        for v, c in self.terms:
            rep = env.get(v, AffineExpr.var(v))
            if not rep.is_linear:
                raise ValueError(f"cannot substitute non-linear {rep} into {self}")
            for rv, rc in rep.terms:
                coeffs[rv] = coeffs.get(rv, 0) + c * rc
            const += c * rep.const
        return AffineExpr(tuple((v, c) for v, c in coeffs.items() if c != 0), const,
                          self.div, self.mod, self.exact)

    def rename(self, mapping: Mapping[str, str]) -> "AffineExpr":
        return AffineExpr(tuple((mapping.get(v, v), c) for v, c in self.terms),
                          self.const, self.div, self.mod, self.exact)

    # -- evaluation ---------------------------------------------------------
    def evaluate(self, env: Mapping[str, np.ndarray]):
        """Evaluate on broadcastable integer arrays (numpy or jax).

        Returns `(index, exact_ok)` where `exact_ok` is None unless `exact`
        is set, in which case it is a boolean mask of the points whose
        division was exact.
        """
        acc = self.const
        for v, c in self.terms:
            acc = acc + (env[v] if c == 1 else c * env[v])
        ok = None
        if self.div > 1:
            if self.exact:
                ok = (acc % self.div) == 0
            acc = acc // self.div
        if self.mod:
            acc = acc % self.mod
        return acc, ok

    def __str__(self) -> str:
        parts: list[str] = []
        for v, c in self.terms:
            sign = "-" if c < 0 else "+"
            mag = abs(c)
            body = v if mag == 1 else f"{mag}*{v}"
            parts.append(f"{sign} {body}")
        if self.const or not parts:
            parts.append(f"{'-' if self.const < 0 else '+'} {abs(self.const)}")
        text = " ".join(parts)
        text = text[2:] if text.startswith("+ ") else "-" + text[2:]
        simple = len(parts) == 1 and not text.startswith("-")   # no parens around `i`
        if self.div > 1:
            text = f"{text if simple else f'({text})'} {'/' if self.exact else '//'} {self.div}"
            simple = False
        if self.mod:
            text = f"{text if simple else f'({text})'} % {self.mod}"
        return text

    def __repr__(self) -> str:
        return f"AffineExpr({self})"


def index_map_str(tensor: str, index_map: tuple[AffineExpr, ...]) -> str:
    """`W[i,k]`-style rendering of an access."""
    if not index_map:
        return tensor
    return f"{tensor}[{','.join(str(e) for e in index_map)}]"
