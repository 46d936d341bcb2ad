"""Errors raised by pimjax (a leaf module every stage may import)."""


class PimTraceError(Exception):
    """A function cannot be traced into a PimGraph (Python control flow on
    traced values, data-dependent shapes, ...).  The message carries the
    original error and the user's source line."""


class PimCompileError(Exception):
    """An op cannot be compiled for the requested PIM backend (unsupported
    primitive forced onto PIM, capacity exceeded, ...)."""


class PrecisionWarning(UserWarning):
    """Data converted to a PIM unit's narrower type (float32 on fp16 units), or
    values the unit's type cannot hold (overflow to inf, underflow to 0, an
    overflowed running sum): see `pimjax.precision`."""
