"""jaxpr -> PimGraph (see README.md in this folder)."""
from .affine import AffineExpr
from .check import GraphInvariantError, check_graph
from .evaluate import evaluate_graph
from .frontend import make_graph
from .ir import Acc, Access, Arg, Const, HostCall, InBounds, LoopVar, PimGraph, PimOp, Prim, ValueInfo
from .text import graph_text

__all__ = ["AffineExpr", "Access", "Acc", "Arg", "Const", "GraphInvariantError", "HostCall",
           "InBounds", "LoopVar", "PimGraph", "PimOp", "Prim", "ValueInfo", "check_graph",
           "evaluate_graph", "graph_text", "make_graph"]
