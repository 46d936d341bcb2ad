"""A struct-of-arrays table of drafts.

Draft spaces reach 10^5 entries (4-set ops on a 64 x 8 mesh times the knob
space), so the generator, the pruning rules, the verifier and the cost
model's features work on columns; `Draft` objects are built only when an
entry is read.  A `DraftTable` is a read-only sequence of `Draft`s.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Iterator, Sequence

import numpy as np

from .draft import DATAFLOWS, GRANULARITIES, IRREGULAR, REDUCTIONS, DimPart, Draft

# knob columns and how their integer codes decode
_CODED = {"reduction": REDUCTIONS, "dataflow": DATAFLOWS, "granularity": GRANULARITIES,
          "irregular": IRREGULAR}
KNOB_COLUMNS = ("reduction", "dataflow", "ki", "ko", "granularity", "irregular", "tasklets",
                "wram_tile", "buffers")


@dataclass(frozen=True, eq=False)
class DraftTable(Sequence[Draft]):
    """Drafts as columns.

    groups, cores, reps, tile: [n, S] int arrays (S dimension sets); `tile` is
    the per-core data-tile length t = ceil(L / (g c)) of each set.
    lane: [n] index into `lane_vars`.  The knob columns are [n] int arrays;
    coded ones index REDUCTIONS / DATAFLOWS / GRANULARITIES / IRREGULAR.
    """
    lane_vars: tuple
    groups: np.ndarray
    cores: np.ndarray
    reps: np.ndarray
    tile: np.ndarray
    lane: np.ndarray
    reduction: np.ndarray
    dataflow: np.ndarray
    ki: np.ndarray
    ko: np.ndarray
    granularity: np.ndarray
    irregular: np.ndarray
    tasklets: np.ndarray
    wram_tile: np.ndarray
    buffers: np.ndarray

    def __len__(self) -> int:
        return int(self.lane.shape[0])

    def __getitem__(self, idx):
        if isinstance(idx, (int, np.integer)):
            i = int(idx)
            if i < 0:
                i += len(self)
            return self._draft(i)
        return self.take(np.arange(len(self))[idx])

    def __iter__(self) -> Iterator[Draft]:
        for i in range(len(self)):
            yield self._draft(i)

    def _draft(self, i: int) -> Draft:
        parts = tuple(DimPart(int(g), int(c), int(r))
                      for g, c, r in zip(self.groups[i], self.cores[i], self.reps[i]))
        kw = {}
        for name in KNOB_COLUMNS:
            v = int(getattr(self, name)[i])
            kw[name] = _CODED[name][v] if name in _CODED else v
        return Draft(parts, lane_var=self.lane_vars[int(self.lane[i])], **kw)

    def take(self, index) -> "DraftTable":
        """Rows `index` (int array or boolean mask) as a new table."""
        index = np.asarray(index)
        cols = {f.name: getattr(self, f.name)[index] for f in fields(self) if f.name != "lane_vars"}
        return DraftTable(self.lane_vars, **cols)

    def column(self, name: str) -> np.ndarray:
        return getattr(self, name)

    def index(self, draft: Draft) -> int:
        """Row of `draft` (ValueError when absent)."""
        for i, d in enumerate(self):
            if d == draft:
                return i
        raise ValueError(f"{draft} is not in the table")

    @property
    def groups_used(self) -> np.ndarray:
        return np.prod(self.groups, axis=1)

    @property
    def cores_used(self) -> np.ndarray:
        return np.prod(self.cores, axis=1)


def encode(value: str, name: str) -> int:
    return _CODED[name].index(value)


def from_drafts(drafts: Sequence[Draft], lane_vars: tuple, tiles: np.ndarray) -> DraftTable:
    """Build a table from Draft objects (tests and baselines)."""
    n = len(drafts)
    S = len(drafts[0].parts) if n else 0
    g = np.array([[p.groups for p in d.parts] for d in drafts], dtype=np.int64).reshape(n, S)
    c = np.array([[p.cores for p in d.parts] for d in drafts], dtype=np.int64).reshape(n, S)
    r = np.array([[p.rep for p in d.parts] for d in drafts], dtype=np.int64).reshape(n, S)
    cols = {}
    for name in KNOB_COLUMNS:
        vals = [getattr(d, name) for d in drafts]
        cols[name] = np.array([encode(v, name) if name in _CODED else v for v in vals], dtype=np.int64)
    lane = np.array([lane_vars.index(d.lane_var) for d in drafts], dtype=np.int64)
    return DraftTable(lane_vars, g, c, r, np.asarray(tiles, dtype=np.int64).reshape(n, S), lane, **cols)
