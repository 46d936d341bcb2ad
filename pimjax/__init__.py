"""pimjax: a JAX-traced compiler and simulator for near-bank DRAM PIM."""
from .errors import PimCompileError, PimTraceError
from .trace import PimGraph, make_graph

__all__ = ["PimCompileError", "PimTraceError", "PimGraph", "make_graph"]
__version__ = "0.1.0"
