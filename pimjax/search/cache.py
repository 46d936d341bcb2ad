"""The tuning cache: decisions keyed by (op signature, shapes, dtypes,
backend fingerprint, options), in memory and optionally in a JSON file (a
corrupted file is reported with a warning and rebuilt, never a crash)."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import threading
import warnings
from dataclasses import asdict

import numpy as np

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
    is given (written after every new entry).

    Several tuners may share one file (threads or processes): a write locks
    the file (`fcntl.flock` on `<path>.lock`), merges the entries already on
    disk with this cache's, and replaces the file through its own temporary
    file.  An entry that cannot be read (another pimjax version's draft) is
    dropped alone, with a warning; a file that cannot be written warns and
    the cache carries on in memory."""

    def __init__(self, path: str | None = None):
        self.path = path
        self.entries: dict[str, dict] = {}
        self._lock = threading.Lock()
        if path:
            self.entries = self._read(warn=True)

    def _read(self, warn: bool) -> dict:
        """The valid entries of the file ({} when it is absent or unreadable)."""
        def say(msg):
            if warn:
                warnings.warn(f"pimjax tuning cache {self.path}: {msg}", RuntimeWarning, stacklevel=3)
        try:
            with open(self.path) as f:
                data = json.load(f)
            if not isinstance(data, dict):
                raise ValueError("top level is not an object")
        except FileNotFoundError:
            return {}
        except Exception as err:  # noqa: BLE001 - any corruption means: start over
            say(f"unreadable ({err}); recompiling and rewriting it")
            return {}
        good = {}
        for k, v in data.items():
            try:
                draft_from_dict(v["draft"])
                good[k] = v
            except Exception:  # noqa: BLE001 - one stale entry is dropped, not the file
                pass
        if len(good) < len(data):
            say(f"dropped {len(data) - len(good)} of {len(data)} entries it cannot read (another version?)")
        return good

    def get(self, key: str) -> dict | None:
        return self.entries.get(key)

    def drop(self, key: str) -> None:
        """Forget an entry that turned out stale (it is re-tuned and re-put)."""
        self.entries.pop(key, None)

    def put(self, key: str, record: dict) -> None:
        with self._lock:
            self.entries[key] = record
            if self.path:
                try:
                    self._write()
                except OSError as err:
                    warnings.warn(f"pimjax tuning cache {self.path} cannot be written ({err}); "
                                  "keeping it in memory", RuntimeWarning, stacklevel=2)

    def _write(self) -> None:
        import fcntl
        import tempfile
        folder = os.path.dirname(os.path.abspath(self.path))
        with open(f"{self.path}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            merged = {**self._read(warn=False), **self.entries}
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=os.path.basename(self.path) + ".", suffix=".tmp")
            try:
                with os.fdopen(fd, "w") as f:
                    json.dump(merged, f, indent=1, sort_keys=True, allow_nan=False)
                os.replace(tmp, self.path)
            except BaseException:
                if os.path.exists(tmp):
                    os.unlink(tmp)
                raise
        self.entries = merged

    def __len__(self) -> int:
        return len(self.entries)
