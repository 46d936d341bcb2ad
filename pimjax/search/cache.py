"""The tuning cache: decisions keyed by (op signature, shapes, dtypes,
backend fingerprint, options), in memory and optionally in a JSON file
written crash-safely (`pimjax.durable`; a corrupted file is reported with a
`CorruptStateWarning` and rebuilt, never a crash), bounded to `max_entries`."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
import warnings
from dataclasses import asdict

import numpy as np

from ..errors import user_stacklevel
from ..hw.core import Backend
from ..partition.draft import DimPart, Draft
from ..trace.ir import PimOp


def op_signature(op: PimOp) -> str:
    """A stable text of what an op computes (independent of value ids and
    source lines): kind, loop nest, index maps, body, epilogue."""
    parts = [op.kind, op.name,
             ",".join(f"{lv.name}<{lv.extent}" for lv in op.loop_vars),
             "red:" + ",".join(op.reduction_vars), str(op.combiner),
             ";".join(",".join(str(e) for e in a.index_map) for a in op.operands),
             "->" + ",".join(str(e) for e in op.result.index_map),
             repr(op.body), repr(op.epilogue), repr(op.fill)]
    return "|".join(parts)


def cache_key(op: PimOp, shapes: dict, backend: Backend, dtypes: dict | None = None,
              options: dict | None = None) -> str:
    """sha1 of (op signature, operand/result shapes and dtypes, backend, options)."""
    vids = [a.value for a in op.operands] + [r.value for r in op.results]
    blob = json.dumps({
        "op": op_signature(op),
        "shapes": [[int(d) for d in shapes[v]] for v in vids],
        "dtypes": [str((dtypes or {}).get(v, "")) for v in vids],
        "backend": backend_fingerprint(backend),
        "options": sorted((k, repr(v)) for k, v in (options or {}).items()),
    }, sort_keys=True)
    return hashlib.sha1(blob.encode()).hexdigest()


def backend_fingerprint(backend: Backend) -> str:
    """sha1 of every field of `backend` (timings, geometry, link, host):
    a swept or edited hardware is another cache entry.  Canonical across
    processes (sets sorted, arrays as lists), so a JSON cache file keeps
    its hits."""
    def canon(x):
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            return {f.name: canon(getattr(x, f.name)) for f in dataclasses.fields(x)}
        if isinstance(x, (set, frozenset)):
            return sorted(canon(v) for v in x)
        if isinstance(x, (list, tuple)):
            return [canon(v) for v in x]
        if isinstance(x, dict):
            return {str(k): canon(v) for k, v in sorted(x.items())}
        if isinstance(x, (str, bool, int, float)) or x is None:
            return x
        return np.asarray(x).tolist()
    return hashlib.sha1(json.dumps(canon(backend), sort_keys=True).encode()).hexdigest()


def draft_to_dict(d: Draft) -> dict:
    out = asdict(d)
    out["parts"] = [asdict(p) for p in d.parts]
    return out


def draft_from_dict(d: dict) -> Draft:
    d = dict(d)
    d["parts"] = tuple(DimPart(**p) for p in d["parts"])
    return Draft(**d)


class TuneCache:
    """Chosen drafts by cache key: in memory, and in a JSON file when `path`
    is given (written after every new entry), at most `max_entries` of them.

    Bound: above `max_entries` (default `MAX_ENTRIES`) the entries put
    longest ago are evicted, in memory and in the file (the file keeps its
    entries oldest first).  Several tuners may share one file (threads or
    processes): a write locks it (`durable.locked`: `flock` on
    `<path>.lock`), merges the entries already on disk with the ones this
    cache put, and replaces the file atomically (`durable.atomic_write`:
    temporary file, fsync, rename), so a process killed at any point leaves
    the previous file or the new one, and no writer loses another's entries.
    An entry that cannot be read (another pimjax version's draft) is dropped
    alone, with a `CorruptStateWarning`; a file that cannot be written warns
    and the cache carries on in memory."""

    MAX_ENTRIES = 4096

    def __init__(self, path: str | None = None, max_entries: int | None = None):
        self.path = path
        self.max_entries = int(max_entries or self.MAX_ENTRIES)
        if self.max_entries < 1:
            raise ValueError(f"TuneCache(max_entries={max_entries!r}): a positive number of entries")
        self.entries: dict[str, dict] = {}
        self._new: dict[str, dict] = {}          # put since the last write, oldest first
        self._lock = threading.Lock()
        if path:
            self.entries = self._read(warn=True)

    def _read(self, warn: bool) -> dict:
        """The valid entries of the file, oldest first ({} when it is absent or unreadable)."""
        from ..durable import CorruptStateWarning, read_json
        with warnings.catch_warnings():
            if not warn:
                warnings.simplefilter("ignore", CorruptStateWarning)
            data = read_json(self.path, "tuning cache")
        if data is None:
            return {}
        if not isinstance(data, dict):
            if warn:
                warnings.warn(f"pimjax tuning cache {self.path}: top level is not an object; recompiling "
                              "and rewriting it", CorruptStateWarning, stacklevel=user_stacklevel())
            return {}
        good = {}
        for k, v in data.items():
            try:
                draft_from_dict(v["draft"])
                good[k] = v
            except Exception:  # noqa: BLE001 - one stale entry is dropped, not the file
                pass
        if warn and len(good) < len(data):
            warnings.warn(f"pimjax tuning cache {self.path}: dropped {len(data) - len(good)} of {len(data)} "
                          "entries it cannot read (another version?)", CorruptStateWarning, stacklevel=user_stacklevel())
        return good

    def get(self, key: str) -> dict | None:
        return self.entries.get(key)

    def drop(self, key: str) -> None:
        """Forget an entry that turned out stale (it is re-tuned and re-put)."""
        self.entries.pop(key, None)
        self._new.pop(key, None)

    def put(self, key: str, record: dict) -> None:
        """Store `record` (a JSON-able dict with a "draft") under `key`, as the newest entry;
        written through to the file when there is one (the put has returned: it is on disk)."""
        with self._lock:
            self.entries.pop(key, None)
            self.entries[key] = record
            self._new.pop(key, None)
            self._new[key] = record
            self._new = self._bounded(self._new)    # an unwritable file: the newest still wait
            if self.path:
                try:
                    self._write()
                except OSError as err:
                    warnings.warn(f"pimjax tuning cache {self.path} cannot be written ({err}); "
                                  "keeping it in memory", RuntimeWarning, stacklevel=user_stacklevel())
            self.entries = self._bounded(self.entries)

    def _bounded(self, entries: dict) -> dict:
        """The newest `max_entries` of `entries` (oldest first)."""
        extra = len(entries) - self.max_entries
        return dict(list(entries.items())[extra:]) if extra > 0 else entries

    def _write(self) -> None:
        from ..durable import atomic_write, locked, sweep_temporaries
        with locked(self.path):
            sweep_temporaries(self.path)            # a killed writer's temporary file
            merged = self._read(warn=False)
            for k, v in self._new.items():          # ours are the newest: to the end
                merged.pop(k, None)
                merged[k] = v
            merged = self._bounded(merged)
            atomic_write(self.path, json.dumps(merged, indent=1, allow_nan=False))
        self._new = {}
        self.entries = merged

    def __len__(self) -> int:
        return len(self.entries)
