"""The per-call cost of appending to a resident operand (a KV cache).

DCC §IV-E: `pre_load` places a tensor in PIM memory once and "supports
partial updates of tensors in PIM memory with address offset".  A decode
step writes the new token's K / V rows into the resident cache at an
offset; the rest of the cache stays where it is.  A program lowered with
the cache resident (`resident=(k,)`) times the whole placement once
(`CycleReport.resident_cycles`); this module charges each call the share of
that placement the appended rows take.

Model (`append_factor`).  The placement writes, per group g, the elements
W_g of the resident operands that group holds (the layouts' local boxes:
`TensorLayout.start` / `length`, replicas included).  With the program's
channel-parallel rearrangement the groups are written at once, so the
placement takes T ~ max_g W_g, and an append that writes A_g elements into
group g takes T * max_g A_g / max_g W_g; without it the groups are written
in turn (T ~ sum_g W_g, the append T * sum_g A_g / sum_g W_g).  A_g comes
from the layout: the appended region is the update's box at a dynamic
offset along one axis of the operand (`Append.extents`), that axis a single
loop variable of the layout; A_g is averaged over every offset (a decode
step appends at each position in turn).  New rows that land in a few
groups therefore cost those groups' bandwidth, not the whole device's.
Where the layout cannot say (no layout of the operand, an update that is
not one box along one axis, an axis that is not one variable) the operand's
share is its `fraction` of the elements, spread like the whole.  Fixed
per-transfer latencies are scaled with the rest (the model is linear in
elements): a one-row append is charged that share of the placement, not
the latency of a lone write.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np


@dataclass(frozen=True)
class Append:
    """How a resident value grows each call.

    fraction: the fraction of its elements a call writes.
    extents:  the written box's extent per axis (the update's shape, at a
              dynamic offset along the axes where it is shorter), or None
              when the write is not one box (a scatter of other rank, a
              chain of appends).
    """
    fraction: float
    extents: tuple | None = None


def _held(layout) -> np.ndarray:
    """[G, C] elements each core holds of `layout` (synthetic partial-slot
    variables excluded; replicas counted: each is written)."""
    real = [j for j, v in enumerate(layout.vars) if not v.startswith("#")]
    if not real:
        return np.ones(layout.start.shape[:2])
    return np.prod(np.asarray(layout.length)[..., real].astype(np.float64), axis=-1)


def _appended(layout, app: Append, held: np.ndarray):
    """[P, G] elements of `layout` group g holds in the appended box at each
    of the P offsets, or None when the layout cannot say (module doc)."""
    if app.extents is None or len(app.extents) != len(layout.shape):
        return None
    partial = [a for a, (r, n) in enumerate(zip(app.extents, layout.shape)) if r < n]
    if len(partial) != 1:
        return None
    axis = partial[0]
    var = layout.index_map[axis].single_var
    if var is None or var not in layout.vars:
        return None
    j = layout.vars.index(var)
    start = np.asarray(layout.start)[..., j].astype(np.int64)          # [G, C]
    length = np.asarray(layout.length)[..., j].astype(np.int64)
    per_pos = np.where(length > 0, held / np.maximum(length, 1), 0.0)   # elements per position of the axis
    extent, rows = int(layout.shape[axis]), int(app.extents[axis])
    G = start.shape[0]
    cover = np.zeros((G, extent + 1))                                   # [G, position] elements held
    g_idx = np.broadcast_to(np.arange(G)[:, None], start.shape)
    lo, hi = np.clip(start, 0, extent), np.clip(start + length, 0, extent)
    np.add.at(cover, (g_idx, lo), per_pos)
    np.add.at(cover, (g_idx, hi), -per_pos)
    cover = np.cumsum(cover[:, :extent], axis=1)
    csum = np.concatenate([np.zeros((G, 1)), np.cumsum(cover, axis=1)], axis=1)
    offsets = np.arange(extent - rows + 1)
    return (csum[:, offsets + rows] - csum[:, offsets]).T              # [P, G]


def append_factor(program, append: dict, shapes: dict) -> float:
    """Cycles of one call's appends per cycle of the program's one-time
    placement (module doc).  append: {value id: Append} of the values its
    op reads; the op is `program.op` (a block's fused op) and its resident
    operands `program.options["resident"]`; shapes: value id -> shape."""
    op = program.op
    resident = [k for k in program.options.get("resident", ()) if k < len(op.operands)]
    mine = {k: append[op.operands[k].value] for k in resident if op.operands[k].value in append}
    if not mine:
        return 0.0
    layouts = {}
    for L in program.layouts:
        layouts.setdefault(L.operand, L)
    if any(k not in layouts for k in resident):           # no layout to weigh by: tensor sizes
        size = {k: float(np.prod(shapes[op.operands[k].value], dtype=np.float64)) for k in resident}
        whole = sum(size.values())
        return sum(size[k] * mine[k].fraction for k in mine) / whole if whole else 0.0
    held = {k: _held(layouts[k]) for k in resident}
    placed = sum(h.sum(axis=1) for h in held.values())     # [G] elements placed per group
    per_group = []                                        # [P or 1, G] per appended operand
    for k, app in mine.items():
        a = _appended(layouts[k], app, held[k])
        per_group.append(a if a is not None else app.fraction * held[k].sum(axis=1)[None, :])
    steps = min(a.shape[0] for a in per_group)
    added = sum(a[:steps] for a in per_group)             # [P, G]
    if program.parallel_rearrangement:
        top = float(placed.max())
        return float(added.max(axis=1).mean()) / top if top else 0.0
    whole = float(placed.sum())
    return float(added.sum(axis=1).mean()) / whole if whole else 0.0


def charge(report, factor: float, tck: float):
    """(report with `factor` x its placement added per call, those cycles):
    the cycles go to `rearrangement` and the totals (ns at `tck` ns per
    cycle); `resident_cycles` stays the one-time placement."""
    if report is None or not factor:
        return report, 0.0
    cyc = float(np.asarray(report.resident_cycles)) * factor
    if cyc == 0.0:
        return report, 0.0
    return replace(report, total_cycles=report.total_cycles + cyc, total_ns=report.total_ns + cyc * tck,
                   rearrangement=report.rearrangement + cyc), cyc


def charge_append(report, program, append: dict, shapes: dict, tck: float):
    """(report of `program` with its appends charged per call, append
    cycles): `charge(report, append_factor(program, append, shapes), tck)`."""
    return charge(report, append_factor(program, append, shapes), tck)
