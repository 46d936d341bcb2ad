"""UPMEM's host transfer runs (`backends/upmem/lower.py::_host_runs`): the
block-by-block form for linear index maps against the element-by-element
walk over the whole box, on random layouts -- transposed, strided and
broadcast maps, padded and partly real boxes, synthetic slot variables --
and the lazily built position table."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pimjax.backends.upmem.lower import _base, _Consecutive, _group_runs, _host_runs, _host_runs_walk, _positions
from pimjax.lower.program import TensorLayout
from pimjax.trace.affine import AffineExpr


@st.composite
def layouts(draw):
    V = draw(st.integers(1, 4))
    names = [f"v{k}" for k in range(V)]
    if draw(st.booleans()) and V > 1:
        names[0] = "#t"                                  # a partial-slot dimension
    box = [draw(st.integers(1, 6)) for _ in range(V)]
    real = [draw(st.integers(1, b)) for b in box]
    start = [0 if v.startswith("#") else draw(st.integers(0, 5)) for v in names]
    data = [v for v in names if not v.startswith("#")]
    dims = draw(st.integers(1, 3))
    index_map, shape = [], []
    for _ in range(dims):
        used = draw(st.lists(st.sampled_from(data), unique=True, max_size=2))
        coefs = {v: draw(st.sampled_from([1, 1, 2, 3])) for v in used}
        const = draw(st.integers(0, 2))
        e = AffineExpr.linear(coefs, const)
        hi = const + sum(c * (start[names.index(v)] + box[names.index(v)] - 1) for v, c in coefs.items())
        index_map.append(e)
        shape.append(hi + 1 + draw(st.integers(0, 3)))
    if draw(st.booleans()):                              # a host order that is not the box order
        perm = draw(st.permutations(range(dims)))
        index_map = [index_map[i] for i in perm]
        shape = [shape[i] for i in perm]
    n = int(np.prod(box))
    base = 8 * draw(st.integers(0, 4))
    return TensorLayout("x", 0, tuple(names), np.array(start, np.int64).reshape(1, 1, V),
                        np.array(real, np.int64).reshape(1, 1, V), tuple(box), tuple(index_map), tuple(shape),
                        _Consecutive(base, n, 4))


@settings(max_examples=400, deadline=None)
@given(layouts())
def test_block_runs_equal_the_element_walk(layout):
    assert _host_runs(layout, 4, True) == _host_runs_walk(layout, 4)


def test_a_gemv_tile_is_one_run_per_row_or_one_for_whole_rows():
    # rows i (stride 64 in the host), columns k (stride 1): 10 x 48 real of a 10 x 64 box
    e_i, e_k = AffineExpr.var("i"), AffineExpr.var("k")
    lay = TensorLayout("m", 0, ("i", "k"), np.zeros((1, 1, 2), np.int64), np.array([[[10, 48]]]), (10, 64),
                       (e_i, e_k), (100, 64), _Consecutive(0, 640, 4))
    assert _host_runs(lay, 4, True) == [(0, 48, 10, 64)]
    whole = TensorLayout("m", 0, ("i", "k"), np.zeros((1, 1, 2), np.int64), np.array([[[10, 64]]]), (10, 64),
                         (e_i, e_k), (100, 64), _Consecutive(0, 640, 4))
    assert _host_runs(whole, 4, True) == [(0, 640, 1, 1)]
    assert _host_runs(whole, 4, False) == [(0, 1, 640, 1)]


def test_group_runs_is_greedy_left_to_right():
    # equal lengths; strides 10, 10, then 5, 5: the third run breaks the first group's stride
    assert _group_runs(np.array([0, 10, 20, 25, 30]), np.full(5, 2)) == [(0, 2, 3, 10), (25, 2, 2, 5)]
    assert _group_runs(np.array([0, 10, 15, 20]), np.full(4, 2)) == [(0, 2, 2, 10), (15, 2, 2, 5)]
    assert _group_runs(np.array([0, 4, 8]), np.array([2, 3, 3])) == [(0, 2, 1, 1), (4, 3, 2, 4)]
    assert _group_runs(np.zeros(0, np.int64), np.zeros(0, np.int64)) == []


def test_positions_are_built_only_when_read():
    pos = _Consecutive(64, 1 << 22, 4)
    assert pos._array is None and pos.shape == (1 << 22, 4)
    lay = TensorLayout("x", 0, ("i",), np.zeros((1, 1, 1), np.int64), np.array([[[1 << 22]]]), (1 << 22,),
                       (AffineExpr.var("i"),), (1 << 22,), pos)
    assert _base(lay) == 64 and pos._array is None
    np.testing.assert_array_equal(pos[:3], _positions(64, 3, 4))


def test_a_box_smaller_than_its_lengths_is_refused():
    lay = TensorLayout("x", 0, ("i",), np.zeros((1, 1, 1), np.int64), np.array([[[12]]]), (8,),
                       (AffineExpr.var("i"),), (16,), _Consecutive(0, 8, 4))
    with pytest.raises(ValueError, match="exceed the box"):
        _host_runs(lay, 4, True)
