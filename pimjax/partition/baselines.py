"""Helpers the families' baseline mappings share (`pimjax/backends/<family>/
baseline.py`; `pimjax.backends.baseline(op, backend)` resolves a backend's
baseline through its family)."""
from __future__ import annotations


def largest_pow2_at_most(n: int, cap: int) -> int:
    """The largest power of two <= min(n, cap) (1 at least)."""
    p = 1
    while p * 2 <= min(n, cap):
        p *= 2
    return p


def largest_divisor_at_most(n: int, cap: int) -> int:
    """The largest divisor of n that is <= max(1, cap)."""
    return max(d for d in range(1, n + 1) if n % d == 0 and d <= max(1, cap))
