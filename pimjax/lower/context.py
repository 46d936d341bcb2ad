"""`LowerContext`: what every step of one family's lowering of one op reads.

A family's lowering (`pimjax/backends/<family>/lower.py`) threads one context through its
helpers instead of six arguments, and hands it to `lower.stats` to build the program and its
statistics; a family that needs more (HBM-PIM's bank geometry, UPMEM's element width and
boundary style) subclasses it with those fields.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..hw.core import Backend
    from ..partition.draft import Draft
    from ..trace.ir import PimOp
    from .tiles import CoreTiles


@dataclass(frozen=True)
class LowerContext:
    """One op's lowering under one draft.

    op:      the `trace.ir.PimOp` being lowered.
    draft:   its `partition.Draft` (None where a helper prices an op without one).
    backend: the `hw.Backend` (None likewise).
    tiles:   `lower.tiles.core_tiles(op, draft)`: each core's box of the loop space (None where a
             family tiles the op its own way, e.g. Newton's packed convolutions).
    shapes:  value id -> shape (`lower.layout.value_shapes`).
    options: the family's lowering options, defaults filled in.
    """
    op: PimOp
    draft: Draft | None
    backend: Backend | None
    tiles: CoreTiles | None
    shapes: dict[int, tuple[int, ...]]
    options: dict


__all__ = ["LowerContext"]
