"""`njit_phases`: the inlined helpers' argument copies forwarded, results unchanged."""
from __future__ import annotations

import numpy as np
from numba import njit

from pimjax.lower.inline_njit import njit_phases


@njit(inline="always")
def _bump(a, b, c, i, x):
    """A phase-like helper: a pass over the banks, mutates two arrays, returns a scalar."""
    for j in range(a.shape[0]):
        if a[j] > x:
            b[j] = max(b[j], a[j])
    c[i] += x
    return a[i] * 2.0


def _loop(n):
    a, b, c = np.zeros(4), np.full(4, -1.0), np.ones(4)
    s = 0.0
    for i in range(n):
        if i % 3 == 0:
            s += _bump(a, b, c, i % 4, float(i))
        else:
            s += _bump(c, a, b, (i + 1) % 4, 0.5)
    return s, a, b, c


def _first(xs):
    """first = cur on the first pass, read on every pass: the copy's source (assigned once, in the
    loop) changes between the copy and later reads -- forwarding it would read the new value."""
    out = 0.0
    for i in range(xs.shape[0]):
        cur = xs[i:i + 1].copy()
        if i == 0:
            first = cur
        out = out * 3.0 + first[0] - cur[0]
    return out


def _calls(fn, *args):
    """NRT reference-count calls in the optimised LLVM IR of fn's first signature."""
    fn(*args)
    ir = fn.inspect_llvm(fn.signatures[0])
    return ir.count("call void @NRT_incref") + ir.count("call void @NRT_decref")


def test_same_results_as_njit_and_python():
    got_p, got_f = njit(_loop)(37), njit_phases()(_loop)(37)
    for x, y in zip(got_p, got_f):
        np.testing.assert_array_equal(x, y)
    # the Python form (the helper called as Python)
    a, b, c, s = np.zeros(4), np.full(4, -1.0), np.ones(4), 0.0
    for i in range(37):
        if i % 3 == 0:
            s += _bump.py_func(a, b, c, i % 4, float(i))
        else:
            s += _bump.py_func(c, a, b, (i + 1) % 4, 0.5)
    assert got_f[0] == s
    for x, y in zip(got_f[1:], (a, b, c)):
        np.testing.assert_array_equal(x, y)


def test_copies_forwarded():
    # the plain pipeline increfs / decrefs the array arguments of each inlined call that LLVM's reference
    # pruning cannot pair up (here 12 calls remain, 3 forwarded)
    assert _calls(njit_phases()(_loop), 5) < _calls(njit(_loop), 5)


def test_copy_of_a_variable_reassigned_in_the_loop_kept():
    xs = np.arange(1.0, 9.0) ** 2
    assert njit_phases()(_first)(xs) == _first(xs) != 0.0
