"""pimjax: a JAX-traced compiler and simulator for near-bank DRAM PIM.

Public names are re-exported flat here; see README.md for a tour.  No name
here shadows a subpackage: `pimjax.lower` is the lowering subpackage (its
function is `pimjax.lower.lower`, here `lower_program`), `pimjax.sim` the
simulator (`pimjax.sim.execute` the module, `pimjax.execute` its function).  The studies
users call are here too (`explore`, `serve`, `decode`); the rest of each study stays in
`pimjax.studies`."""
from .api import Compiled, Lowered, OpPlan, PimFunction, Traced, pim_jit
from .errors import PimCompileError, PimTraceError, PrecisionWarning
from .hw import Backend, Core, Energy, Group, HostModel, System, Timing, get_backend, list_backends
from .lower import Program
from .lower import lower as lower_program
from .partition import Draft, drafts
from .report import OpReport, Report
from .search.tuner import Choice, Proposal, Tuner
from .sim.cycles import cycles, cycles_batch, sweep
from .sim.execute import execute
from .sim.host import host_time
from .sim.report import CycleReport
from .studies.dse import explore
from .studies.inference import decode
from .studies.serving import serve
from .trace import PimGraph, make_graph

__all__ = ["PimCompileError", "PimTraceError", "PrecisionWarning", "PimGraph", "make_graph",
           "Backend", "System", "Group", "Core", "Timing", "Energy", "HostModel", "get_backend", "list_backends",
           "Draft", "drafts", "Program", "lower_program", "execute", "cycles", "cycles_batch", "sweep",
           "CycleReport", "host_time", "Tuner", "Proposal", "Choice",
           "pim_jit", "PimFunction", "Traced", "Lowered", "Compiled", "OpPlan", "Report", "OpReport", "explore",
           "serve", "decode"]
__version__ = "0.1.0"
