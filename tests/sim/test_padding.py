"""The padded sizes the interpreters compile for (`sim.padding`)."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pimjax.sim.padding import fine, pow2


@given(st.integers(0, 1 << 40), st.sampled_from([1, 8, 16, 64, 4096]))
def test_pow2_is_the_next_power_of_two(n, least):
    p = pow2(n, least)
    assert p & (p - 1) == 0 and p >= max(n, least)
    assert p == least or p < 2 * max(n, 1)        # never a whole octave more than needed


@given(st.integers(0, 1 << 40))
def test_fine_pads_less_than_an_eighth(n):
    f = fine(n)
    assert max(n, 1) <= f
    if n > 16:
        assert f - n < pow2(n) / 16 < n / 8           # under one step of pow2(n) / 16
        assert f % (pow2(n) // 16) == 0 and f <= pow2(n)


def test_fine_sizes_of_one_octave():
    # (1024, 2048]: steps of 2048 / 16 = 128, eight sizes to compile
    assert sorted({fine(n) for n in range(1025, 2049)}) == list(range(1152, 2049, 128))
    assert fine(0) == fine(1) == 1 and fine(17) == 18
