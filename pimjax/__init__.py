"""pimjax: a JAX-traced compiler and simulator for near-bank DRAM PIM.

Public names are re-exported flat here; see README.md for a tour."""
from .errors import PimCompileError, PimTraceError
from .trace import PimGraph, make_graph
from .hw import get_backend, list_backends
from .partition import Draft, drafts
from .lower import lower
from .sim.execute import execute
from .sim.cycles import cycles, cycles_batch, sweep
from .sim.host import host_time
from .costmodel.tune import Tuner
from .api import pim_jit

__all__ = ["PimCompileError", "PimTraceError", "PimGraph", "make_graph", "get_backend", "list_backends",
           "Draft", "drafts", "lower", "execute", "cycles", "cycles_batch", "sweep", "host_time", "Tuner",
           "pim_jit"]
__version__ = "0.1.0"
