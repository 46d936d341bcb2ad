"""Building and reading `TensorLayout`s (numpy; shared by all backends).

A layout places the local box of loop variables of every core; these
helpers compute, for every local position, the global tensor element it
holds (`global_index`), and build the shared position table from a
linearisation of the box (`linear_positions`).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..trace.ir import PimOp
from .program import LazyPositions, TensorLayout
from .tiles import CoreTiles


def local_grid(layout: TensorLayout) -> list[np.ndarray]:
    """Broadcastable local position index per var over [G, C, *box]."""
    nv = len(layout.vars)
    out = []
    for k, n in enumerate(layout.box):
        shape = [1, 1] + [1] * nv
        shape[2 + k] = n
        out.append(np.arange(n).reshape(shape))
    return out


def global_index(layout: TensorLayout) -> tuple[np.ndarray, np.ndarray]:
    """(flat tensor index, valid) arrays of shape [G, C, prod(box)].

    Invalid positions (padding beyond a core's length, outside a band, or
    outside the tensor) have index 0 and valid False."""
    G, C = layout.start.shape[:2]
    nv = len(layout.vars)
    grid = local_grid(layout)
    env = {}
    valid = np.ones((G, C) + layout.box, bool)
    for k, v in enumerate(layout.vars):
        start = layout.start[:, :, k].reshape((G, C) + (1,) * nv)
        length = layout.length[:, :, k].reshape((G, C) + (1,) * nv)
        env[v] = start + grid[k]
        valid &= grid[k] < length
    for expr, lo, hi in layout.bands:
        val, _ = expr.evaluate(env)
        valid &= (val >= lo.reshape((G, C) + (1,) * nv)) & (val < hi.reshape((G, C) + (1,) * nv))
    # each index stays at its own broadcastable shape (e.g. [G, C, n, 1] for
    # a row index) until the sum: clipping and scaling full-size copies cost
    # seconds for a 64 M-element matrix
    flat = np.zeros((), np.int64)
    stride = 1
    for expr, size in reversed(list(zip(layout.index_map, layout.shape))):
        idx, ok = expr.evaluate(env)
        idx = np.asarray(idx, np.int64)
        valid &= (idx >= 0) & (idx < size)
        if ok is not None:
            valid &= ok
        flat = flat + np.clip(idx, 0, size - 1) * stride
        stride *= size
    flat = np.where(valid, flat, 0)
    return flat.reshape(G, C, -1), valid.reshape(G, C, -1)


def tile_layout(tiles: CoreTiles, name: str, operand: int, vars_: Sequence[str],
                index_map: tuple, shape: tuple, positions: np.ndarray,
                box: tuple[int, ...] | None = None, synthetic: dict[str, int] | None = None) -> TensorLayout:
    """A layout over the cores' loop ranges of `vars_`.

    synthetic: extra local dimensions (name -> length) numbering partial
    slots; they have start 0 and their full length on every core."""
    synthetic = synthetic or {}
    G, C = tiles.groups, tiles.cores
    starts, lengths, sizes = [], [], []
    for k, v in enumerate(vars_):
        if v in synthetic:
            starts.append(np.zeros((G, C), np.int64))
            lengths.append(np.full((G, C), synthetic[v], np.int64))
            sizes.append(synthetic[v])
        else:
            i = tiles.var_index(v)
            starts.append(tiles.start[:, :, i])
            lengths.append(tiles.length[:, :, i])
            sizes.append(int(tiles.length[:, :, i].max()) if box is None else box[k])
    bands = tuple(b for b in tiles.bands if set(b[0].vars) <= set(vars_))
    st = np.stack(starts, -1) if starts else np.zeros((G, C, 0), np.int64)
    ln = np.stack(lengths, -1) if lengths else np.zeros((G, C, 0), np.int64)
    pos = positions if isinstance(positions, LazyPositions) else np.asarray(positions, np.int32)
    return TensorLayout(name, operand, tuple(vars_), st, ln, tuple(sizes), tuple(index_map),
                        tuple(shape), pos, bands)


def acc_space(op: PimOp) -> tuple[tuple, tuple]:
    """(index map, shape) of the accumulator space: the grid of the op's
    output variables, where partial results are merged before the epilogue
    and the write through the result map (`sim.execute.finish`)."""
    from ..trace.affine import AffineExpr
    ext = op.extents
    return (tuple(AffineExpr.var(v) for v in op.output_vars),
            tuple(ext[v] for v in op.output_vars))


def value_shapes(op: PimOp, graph_shapes: dict | None = None) -> dict[int, tuple]:
    """Shape of every tensor the op touches (from the graph when given,
    else implied by the index maps)."""
    if graph_shapes is not None:
        return graph_shapes
    from ..partition.verify import infer_shapes
    return infer_shapes(op)


def lane_order(vars_: Sequence[str], lane_var: str | None) -> tuple[str, ...]:
    """`vars_` with the lane variable moved innermost."""
    vs = [v for v in vars_ if v != lane_var]
    if lane_var is not None and lane_var in vars_:
        vs.append(lane_var)
    return tuple(vs)
