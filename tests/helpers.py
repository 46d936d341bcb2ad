"""Assertions shared by the tests."""
from __future__ import annotations

import jax
import numpy as np


def assert_trees_close(got, want, *, rtol: float, atol: float = 0.0, atol_scaled: bool = False,
                       same_dtype: bool = True) -> None:
    """`got` equals `want` as pytrees: the same tree structure (a missing or
    extra output fails), then per leaf the same shape and dtype, then values
    within `rtol` / `atol` (np.testing.assert_allclose, compared in float64).

    atol_scaled: the absolute tolerance is atol * max(1, max |want leaf|).
    same_dtype: False compares only the dtype's kind (float / int / bool ...),
    for two sources that compute the same numbers at different widths
    (numpy's float64 and jax's float32 without x64)."""
    got_leaves, got_tree = jax.tree_util.tree_flatten_with_path(got)
    want_leaves, want_tree = jax.tree_util.tree_flatten_with_path(want)
    assert got_tree == want_tree, f"tree structure differs:\n  got  {got_tree}\n  want {want_tree}"
    for (path, g), (_, w) in zip(got_leaves, want_leaves):
        where = jax.tree_util.keystr(path) or "leaf"
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, f"{where}: shape {g.shape} != {w.shape}"
        if same_dtype:
            assert g.dtype == w.dtype, f"{where}: dtype {g.dtype} != {w.dtype}"
        else:
            assert g.dtype.kind == w.dtype.kind, f"{where}: dtype {g.dtype} is not of {w.dtype}'s kind"
        wide = np.complex128 if "c" in (g.dtype.kind, w.dtype.kind) else np.float64
        g64, w64 = g.astype(wide), w.astype(wide)
        scale = max(1.0, float(np.max(np.abs(w64)))) if atol_scaled and w64.size else 1.0
        np.testing.assert_allclose(g64, w64, rtol=rtol, atol=atol * scale, err_msg=where)


def slow_params(values, heavy):
    """`values` for `pytest.mark.parametrize` with those in `heavy` marked slow: `make test`
    keeps the others (the property still checked on every push), CI's `make test-slow` runs the
    heavy ones too.  A value is a parameter or a tuple of them."""
    import pytest
    return [pytest.param(*(v if isinstance(v, tuple) else (v,)), marks=pytest.mark.slow) if v in heavy else v
            for v in values]
