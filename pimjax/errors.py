"""Errors raised by pimjax (a leaf module every stage may import), and where a warning or an
error points: the first frame outside pimjax and jax (`is_internal`, `user_stacklevel`)."""
import functools
import os
import sys


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


PIMJAX_DIR = os.path.dirname(os.path.abspath(__file__))
_internal_cache: dict[str, bool] = {}


@functools.lru_cache(maxsize=None)
def internal_dirs() -> tuple[str, ...]:
    """The folders whose frames are not the user's: jax's, jaxlib's and pimjax's own (in that
    order, each ending in a separator)."""
    import jax
    import jaxlib
    return tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep for m in (jax, jaxlib)) + (PIMJAX_DIR + os.sep,)


def is_internal(filename: str) -> bool:
    """True for files inside jax, jaxlib or pimjax (not user code); "<frozen ...>" modules too."""
    hit = _internal_cache.get(filename)
    if hit is None:
        hit = _internal_cache[filename] = filename.startswith(internal_dirs()) or filename.startswith("<frozen")
    return hit


def user_stacklevel() -> int:
    """The `stacklevel` that makes a `warnings.warn` in the calling function point at the first
    frame outside pimjax and jax (`is_internal`): the user's line that called pimjax (Python 3.11
    has no `skip_file_prefixes`).  A warning raised with it names the user's file and line
    whatever depth of pimjax the call went through (a staged call, a transform, a study)."""
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and is_internal(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    return level
