"""Errors raised by pimjax (a leaf module every stage may import)."""


class PimTraceError(Exception):
    """A function cannot be traced into a PimGraph (Python control flow on
    traced values, data-dependent shapes, ...).  The message carries the
    original error and the user's source line."""


class PimCompileError(Exception):
    """An op cannot be compiled for the requested PIM backend (unsupported
    primitive forced onto PIM, capacity exceeded, ...)."""
