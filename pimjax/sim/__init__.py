"""The two interpreters of a Program: execute (values) and cycles (time)."""
from . import exec_attacc  # noqa: F401  (registers the executor)
from . import exec_hbm_pim  # noqa: F401  (registers the executor)
from . import exec_newton  # noqa: F401  (registers the executor)
from . import exec_upmem  # noqa: F401  (registers the executor)
from .execute import execute

__all__ = ["execute"]
