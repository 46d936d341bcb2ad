"""Padded sizes shared by the interpreters: XLA compiles once per array
shape, so tables and scans are padded to a few sizes that many programs
share."""
from __future__ import annotations


def pow2(n: int, least: int = 1) -> int:
    """The next power of two >= n (n <= 1 -> 1), at least `least`."""
    return max(least, 1 << max(0, int(n) - 1).bit_length())


def fine(n: int, parts: int = 16) -> int:
    """n rounded up to a multiple of pow2(n) / parts: less than 2n / parts
    of padding, where a power of two could nearly double a large array,
    and still only parts / 2 sizes per octave to compile."""
    step = max(1, pow2(n, parts) // parts)
    return -(-max(int(n), 1) // step) * step
