"""pimjax: a JAX-traced compiler and simulator for near-bank DRAM PIM."""
from .errors import PimCompileError, PimTraceError

__all__ = ["PimCompileError", "PimTraceError"]
__version__ = "0.1.0"
