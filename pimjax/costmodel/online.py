"""Online refinement (DCC §IV-D): the simulations the tuner runs anyway become
labels, and a copy of the shipped model is fine-tuned on them.  Opt-in.

    store = LabelStore("~/.cache/pimjax/labels.jsonl")
    tuner = Tuner(label_store=store)            # every verified top-k is appended
    ...                                          # compile as usual
    model = refine("hbm-pim", store, out="~/.cache/pimjax/hbm-pim.msgpack", seconds=20)
    tuner = Tuner(model=model)                   # ranks with the refined copy

* `LabelStore` -- JSON lines, one per simulated draft: {"family", "group",
  "x": [F features], "cycles"} (no pickle), each with its checksum
  (`pimjax.durable`).  Appends, compacted to the newest half past `max_bytes`.
  A line that cannot be read (a torn write, a corrupt byte, another pimjax's
  feature width) is skipped with a `CorruptStateWarning`;
  a file that cannot be read at all is reported with a warning, moved aside
  to `<path>.corrupt` and started again -- the tuning cache's rule
  (`search.cache`): never a crash, never silently wrong labels.
* `refine` -- the family's shipped weights loaded as a `CostModel`,
  `update`d on the store's rows of that family for at most `seconds`, saved
  to `out`, returned as a `Predictor` (with its spread and its training
  range, now including the refined rows).  It refuses to write over the
  shipped weights: they stay what `make train` reproduces.
"""
from __future__ import annotations

import os
import threading
import warnings

import numpy as np

from ..errors import user_stacklevel
from .features import F


class LabelStore:
    """Simulated drafts as cost-model labels, appended to a JSON-lines file
    (`pimjax.durable`: checksummed lines, one locked write per `append`) of
    at most `max_bytes` (default `MAX_BYTES`, 256 MiB, ~300 000 labels): an
    append that takes the file past it compacts the file to its newest labels
    within half of it (the oldest evicted, torn lines dropped;
    `durable.rewrite_records`, under the file's lock, so a concurrent append
    is not lost)."""

    MAX_BYTES = 256 << 20

    def __init__(self, path: str, max_bytes: int | None = None):
        self.path = os.path.expanduser(path)
        self.max_bytes = int(max_bytes or self.MAX_BYTES)
        if self.max_bytes < 1:
            raise ValueError(f"LabelStore(max_bytes={max_bytes!r}): a positive number of bytes")
        self._lock = threading.Lock()

    def append(self, family: str, group: str, X: np.ndarray, cycles) -> int:
        """Append rows X [n, F] with their simulated cycles [n] (rows whose
        cycles are not finite and > 0 are left out); returns rows written
        (on disk when it returns)."""
        from ..durable import append_records, encode_record, rewrite_records
        X = np.asarray(X, np.float32).reshape(-1, F)
        y = np.asarray(cycles, np.float64).reshape(-1)
        ok = np.isfinite(y) & (y > 0) & np.isfinite(X).all(axis=1)
        if not ok.any():
            return 0
        recs = [{"family": family, "group": group, "x": [float(v) for v in X[i]], "cycles": float(y[i])}
                for i in np.nonzero(ok)[0]]

        def newest(rows):           # the newest labels within half the bound
            room, keep = self.max_bytes // 2, 0
            for r in reversed(rows):
                room -= len(encode_record(r).encode("utf-8"))
                if room < 0:
                    break
                keep += 1
            return rows[len(rows) - keep:]
        with self._lock:
            try:
                append_records(self.path, recs)
                if os.path.getsize(self.path) > self.max_bytes:
                    rewrite_records(self.path, newest)
            except OSError as err:          # labels are a bonus: the compile carries on
                warnings.warn(f"pimjax label store {self.path} cannot be written ({err})", RuntimeWarning,
                              stacklevel=user_stacklevel())
                return 0
        return len(recs)

    def read(self, family: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(X [n, F] float32, cycles [n], group ids [n] int) of `family`'s
        readable rows.  Torn or corrupt lines are skipped with a
        `CorruptStateWarning`; a file none of whose lines is a label is
        moved to `<path>.corrupt` with a warning and counts as empty."""
        from ..durable import scan_records, warn_skipped
        empty = np.zeros((0, F), np.float32), np.zeros(0), np.zeros(0, np.int64)
        try:
            records, bad = scan_records(self.path)
        except OSError as err:
            self._set_aside(f"unreadable ({type(err).__name__}: {err})")
            return empty
        rows, good = [], 0
        for r in records:
            try:
                x = np.asarray(r["x"], np.float32)
                c = float(r["cycles"])
                if x.shape != (F,) or not (np.isfinite(c) and c > 0):
                    raise ValueError("width or label")
            except Exception:  # noqa: BLE001 - a foreign line is skipped, not the file
                bad += 1
                continue
            good += 1
            if r.get("family") == family:
                rows.append((x, c, str(r.get("group", ""))))
        if bad and not good:
            self._set_aside(f"corrupt: skipped {bad} torn or corrupt entries, none of its lines is a label")
            return empty
        if bad:
            warn_skipped("label store", self.path, bad, good)
        if not rows:
            return empty
        groups = {g: i for i, g in enumerate(dict.fromkeys(g for _, _, g in rows))}
        return (np.stack([x for x, _, _ in rows]), np.array([c for _, c, _ in rows]),
                np.array([groups[g] for _, _, g in rows], np.int64))

    def _set_aside(self, why: str) -> None:
        """Move the store aside under a name no earlier set-aside file holds
        (`<path>.corrupt`, then `.corrupt.1`, ...), so none is overwritten."""
        from ..durable import CorruptStateWarning
        dest, k = self.path + ".corrupt", 0
        while os.path.exists(dest):
            k += 1
            dest = f"{self.path}.corrupt.{k}"
        try:
            os.replace(self.path, dest)
        except OSError as err:
            warnings.warn(f"pimjax label store {self.path}: {why}; it cannot be moved aside ({err}): ignored",
                          CorruptStateWarning, stacklevel=user_stacklevel())
            return
        warnings.warn(f"pimjax label store {self.path}: {why}; moved to {dest} and started again",
                      CorruptStateWarning, stacklevel=user_stacklevel())


def refine(family: str, store: LabelStore, out: str, *, seconds: float = 30.0, steps: int = 500,
           min_rows: int = 8):
    """A copy of `family`'s shipped model fine-tuned on the store's labels
    for at most `seconds` (and `steps` Adam steps), saved to `out` and
    returned as a `Predictor`.  ValueError when `out` is the shipped
    weights file or the store holds fewer than `min_rows` rows of the
    family (nothing worth fine-tuning on: the shipped model is returned
    unchanged by the caller's choice, not silently here)."""
    from .model import CostModel, check_seconds
    from .predictor import Predictor, weights_path
    check_seconds(seconds)
    shipped = weights_path(family)
    out = os.path.expanduser(out)
    weights_dir = os.path.realpath(os.path.dirname(shipped))
    real = os.path.realpath(out)
    # no file of the shipped weights' folder (any family's), nor a link to one
    if os.path.dirname(real) == weights_dir or (os.path.exists(out) and any(
            os.path.samefile(out, os.path.join(weights_dir, n)) for n in os.listdir(weights_dir))):
        raise ValueError(f"refine never writes the shipped weights ({weights_dir}); give another `out`")
    X, y, g = store.read(family)
    if len(y) < min_rows:
        raise ValueError(f"the label store holds {len(y)} rows of {family} (< {min_rows}): nothing to refine on")
    model = CostModel.load(shipped)
    model.update(X, y, g, steps=steps, seconds=seconds)
    model.meta["refined"] = {"rows": int(len(y)), "groups": int(len(np.unique(g))), "store": store.path}
    model.save(out)               # atomic (a new file: a hard link elsewhere keeps its old contents)
    return Predictor.load(out)
