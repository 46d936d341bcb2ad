"""jaxpr -> PimGraph (see README.md in this folder)."""
from .affine import AffineExpr
from .ir import (Access, Acc, Arg, Const, HostCall, InBounds, LoopVar, PimGraph, PimOp, Prim,
                 ValueInfo)

__all__ = ["AffineExpr", "Access", "Acc", "Arg", "Const", "HostCall", "InBounds", "LoopVar",
           "PimGraph", "PimOp", "Prim", "ValueInfo"]
