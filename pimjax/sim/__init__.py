"""The two interpreters of a Program: execute (values) and cycles (time).

The functions live in their modules (`pimjax.sim.execute.execute`,
`pimjax.sim.cycles.cycles`; top level `pimjax.execute`, `pimjax.cycles`):
nothing here shadows a submodule, so `pimjax.sim.execute` is the module."""
from . import exec_attacc  # noqa: F401  (registers the executor)
from . import exec_hbm_pim  # noqa: F401  (registers the executor)
from . import exec_newton  # noqa: F401  (registers the executor)
from . import exec_upmem  # noqa: F401  (registers the executor)
from . import execute  # noqa: F401  (the module, not its function)

__all__ = ["execute"]
