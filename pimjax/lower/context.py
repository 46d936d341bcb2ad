"""`LowerContext`: what every step of one family's lowering of one op reads.

A family's lowering (`pimjax/backends/<family>/lower.py`) threads one context through its
helpers instead of six arguments; a family that needs more (HBM-PIM's bank geometry, UPMEM's
element width and boundary style) subclasses it with those fields.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LowerContext:
    """One op's lowering under one draft.

    op:      the `trace.ir.PimOp` being lowered.
    draft:   its `partition.Draft` (None where a helper prices an op without one).
    backend: the `hw.Backend` (None likewise).
    tiles:   `lower.tiles.core_tiles(op, draft)`: each core's box of the loop space.
    shapes:  value id -> shape (`lower.layout.value_shapes`).
    options: the family's lowering options, defaults filled in.
    """
    op: Any
    draft: Any
    backend: Any
    tiles: Any
    shapes: dict
    options: dict


__all__ = ["LowerContext"]
