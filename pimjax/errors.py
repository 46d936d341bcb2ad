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


def _internal_dirs() -> tuple[str, ...]:
    import os

    import jax
    here = os.path.dirname(os.path.abspath(__file__))
    return (here + os.sep, os.path.dirname(os.path.abspath(jax.__file__)) + os.sep)


def user_stacklevel() -> int:
    """The `stacklevel` that makes a `warnings.warn` in the calling function point at the first
    frame outside pimjax and jax: the user's line that called pimjax (Python 3.11 has no
    `skip_file_prefixes`).  A warning raised with it names the user's file and line whatever
    depth of pimjax the call went through (a staged call, a transform, a study)."""
    import sys
    internal = _internal_dirs()
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and (frame.f_code.co_filename.startswith(internal)
                                        or frame.f_code.co_filename.startswith("<frozen")):
        frame, level = frame.f_back, level + 1
    return level
