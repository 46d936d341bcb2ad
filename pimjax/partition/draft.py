"""Tiling drafts (DCC §IV-B) with the knobs of ATiM and the Korean paper.

A `Draft` has one `DimPart` per dimension set — `[groups, cores per group,
representative mapping]` as in DCC Fig. 4 — plus the knobs that change the
program but not the data tiles:

* reduction:   "complete" (every output element is finished on one core),
               "host" (partial results on PIM, final reduction on the host —
               ATiM's rfactor / hierarchical reduction) or "group" (partials
               merged by a group-level accumulator, AttAcc).
* dataflow:    "os" output-stationary (reduction loop inside: each output
               register is read back once) or "is" input-stationary (input
               registers are written once) — Korean paper §3.3-3.4.
* ki, ko:      register blocking: input / output registers per PIM kernel.
* granularity: "broadcast" (one group-level command for all cores of the
               group, per-core data padded to equal offsets) or "core".
* irregular:   "expand" (fetch a contiguous index range) or "keep" (only the
               needed indices) for non-contiguous per-core index sets.
* lane_var:    the loop variable spread over the SIMD lanes (None: scalar).
* tasklets, wram_tile: UPMEM tasklets per DPU and WRAM caching tile (bytes).
* buffers:     Newton global buffers used per G_ACT (GWRITE / _2 / _4).
* pack:        0, or n >= 1: PIMFlow's packed Newton mapping with n channel
               groups (`backends/newton/packed.py`; its lowering reads no
               `parts`); pack_rest: the groups of a reduction's packed
               remainder chunk when it has full chunks too (0: pack).  Packed drafts are no rows of a `DraftTable`: the
               family offers them beside the generated space
               (`Family.extra_drafts`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..trace.ir import PimOp
from .dimsets import dimension_sets

REDUCTIONS = ("complete", "host", "group")
DATAFLOWS = ("os", "is")
GRANULARITIES = ("broadcast", "core")
IRREGULAR = ("expand", "keep")


@dataclass(frozen=True)
class DimPart:
    """How one dimension set is tiled: `groups` x `cores` data tiles along
    the value range of candidate mapping `rep` of the set."""
    groups: int
    cores: int
    rep: int = 0

    @property
    def tiles(self) -> int:
        return self.groups * self.cores


@dataclass(frozen=True)
class Draft:
    parts: tuple[DimPart, ...]
    reduction: str = "complete"
    dataflow: str = "os"
    ki: int = 1
    ko: int = 1
    granularity: str = "broadcast"
    irregular: str = "expand"
    lane_var: str | None = None
    tasklets: int = 1
    wram_tile: int = 0
    buffers: int = 1
    pack: int = 0
    pack_rest: int = 0

    def __post_init__(self):
        if self.reduction not in REDUCTIONS:
            raise ValueError(f"Draft.reduction {self.reduction!r} not in {REDUCTIONS}")
        if self.dataflow not in DATAFLOWS:
            raise ValueError(f"Draft.dataflow {self.dataflow!r} not in {DATAFLOWS}")
        if self.granularity not in GRANULARITIES:
            raise ValueError(f"Draft.granularity {self.granularity!r} not in {GRANULARITIES}")
        if self.irregular not in IRREGULAR:
            raise ValueError(f"Draft.irregular {self.irregular!r} not in {IRREGULAR}")
        for name in ("ki", "ko", "tasklets", "buffers"):
            if getattr(self, name) < 1:
                raise ValueError(f"Draft.{name} must be >= 1, got {getattr(self, name)}")
        if self.pack < 0 or self.pack_rest < 0 or (self.pack_rest and not self.pack):
            raise ValueError(f"Draft.pack / pack_rest must be >= 0 (0: not packed; pack_rest only with pack), got "
                             f"{self.pack} / {self.pack_rest}")
        for p in self.parts:
            if p.groups < 1 or p.cores < 1:
                raise ValueError(f"Draft part {p} must use >= 1 group and core")

    @property
    def groups_used(self) -> int:
        return math.prod(p.groups for p in self.parts)

    @property
    def cores_used(self) -> int:
        """Cores per group used."""
        return math.prod(p.cores for p in self.parts)

    def replace(self, **changes) -> "Draft":
        return replace(self, **changes)


DATAFLOW_WORDS = {"os": "output-stationary", "is": "input-stationary"}


def describe_draft(op: PimOp, draft: Draft) -> str:
    """A draft of `op` in words: groups x cores per dimension set and the knobs
    (the report's and `plans_text`'s `draft`)."""
    if draft.pack:              # a family's fixed mapping: no tiling of the sets (Newton's PIMFlow mapping)
        groups = f"{draft.pack} channel group(s)" + (f", {draft.pack_rest} for the packed remainder"
                                                     if draft.pack_rest and draft.pack_rest != draft.pack else "")
        return (f"PIMFlow's packed mapping ({groups}): output pixels packed per buffer load, the filter "
                f"repeated along the bank row | lanes along {draft.lane_var}")
    sets = dimension_sets(op)
    parts = []
    for s, p in zip(sets, draft.parts):
        name = str(s.mapping(p.rep)) if p.tiles > 1 else "/".join(s.vars)
        parts.append(f"{name}: {p.groups}g x {p.cores}c" if p.tiles > 1 else f"{name}: whole")
    knobs = [f"lanes along {draft.lane_var}" if draft.lane_var else "scalar cores"]
    if op.kind == "contraction":
        knobs.append(f"{DATAFLOW_WORDS[draft.dataflow]}, KI {draft.ki}, KO {draft.ko}")
    elif draft.ko > 1:
        knobs.append(f"KO {draft.ko}")
    knobs.append({"complete": "reduction complete on PIM", "host": "partial on PIM, final on host",
                  "group": "partial on PIM, final in the group accumulator"}[draft.reduction])
    if draft.granularity == "core":
        knobs.append("per-core commands")
    if draft.irregular != "expand":
        knobs.append(f"irregular index ranges: {draft.irregular}")
    if draft.tasklets > 1:
        knobs.append(f"{draft.tasklets} tasklets, WRAM tile {draft.wram_tile} B")
    if draft.buffers > 1:
        knobs.append(f"{draft.buffers} global buffers")
    return "; ".join(parts) + " | " + ", ".join(knobs)
