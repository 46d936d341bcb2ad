"""SIGKILL harness for pimjax's crash-safe stores: `tests/test_crash.py` runs a few
kills, `benchmarks/crash_bench.py` 200 and prints the table.

A worker is a forked child of this process (pimjax is imported once, so a worker starts in a
millisecond) that writes one store in a loop: the tuning cache (`TuneCache.put`, a draft
record a key), the label store (`LabelStore.append`, 16 rows a call) or `explore`'s results
(`explore` over a grid of points with a cheap objective, resuming from the file).  Every
entry's content is derived from its id, so a reader can tell a right entry from a corrupted
one.  After each entry the worker writes "C <id>" to its own report file and fsyncs it before
it goes on; an `explore` worker also writes "S <point>" when it starts a point.

Each kill: one worker, or two at once on the same file, each SIGKILLed after a random delay;
then a restart -- the store read back by the product's own reader, as a new process would:
* lost: an entry reported complete that is missing or differs;
* corrupted used: an entry the reader returned that is not what its id says;
* torn skipped: entries the reader skipped (its `CorruptStateWarning` counts); a real kill
  lands inside a write(2) rarely, so with chance `tear` a kill also leaves the torn bytes such
  a kill would (`_inject_torn`, counted as torn injected);
* reruns: an `explore` worker that started a point an earlier worker had completed (resume
  failed); at the end of each results file a last `explore` runs in this process and must
  evaluate exactly the points the file lacks (`resume_wrong` counts the differences).
"""
from __future__ import annotations

import dataclasses
import os
import re
import signal
import time
import warnings

import numpy as np

STORES = ("tune_cache", "label_store", "explore")


def dse():
    """`explore`'s module: pimjax.studies.dse since issue 42 moved it, pimjax.dse before."""
    import importlib
    try:
        return importlib.import_module("pimjax.studies.dse")
    except ImportError:
        return importlib.import_module("pimjax.dse")
ROWS = 16                 # label rows an append
POINTS = 60               # explore points a results file


@dataclasses.dataclass
class Tally:
    kills: int = 0
    completed: int = 0
    lost: int = 0
    corrupted_used: int = 0
    torn_injected: int = 0
    torn_skipped: int = 0
    reruns: int = 0
    resume_wrong: int = 0


def _report(fd: int, text: str) -> None:
    os.write(fd, (text + "\n").encode())
    os.fsync(fd)


def _label_row(code: float) -> np.ndarray:
    """The features of label `code` (derived from the code alone)."""
    from pimjax.costmodel.features import F
    return ((code * np.arange(1, F + 1)) % 9973 / 7.0).astype(np.float32)


class _Objective:
    """An `explore` objective: a point's figures derived from its variant label ("p007")."""
    options = {"placement": ""}

    def __init__(self, on_start=None):
        self.on_start = on_start
        self.evaluated = []

    def digest(self) -> str:
        return "crash-harness"

    def evaluate(self, be) -> dict:
        self.evaluated.append(be.variant)
        if self.on_start:
            self.on_start(be.variant)
        return {"score": int(be.variant[1:]) * 1.5, "pad": "y" * 4000}


class Harness:
    """Kills workers of the three stores under `folder` and checks every restart."""

    def __init__(self, folder: str, seed: int = 0, max_delay_s: float = 0.2, tear: float = 0.25):
        from pimjax.hw import get_backend
        from pimjax.kernels import kernel_op
        from pimjax.partition import drafts
        from pimjax.search.cache import draft_to_dict
        self.folder = folder
        os.makedirs(folder, exist_ok=True)
        self.rng = np.random.default_rng(seed)
        self.max_delay_s = max_delay_s
        self.tear = tear                    # the chance a kill also leaves a torn write (`_inject_torn`)
        op, shapes = kernel_op("gemv", [64, 64])
        self.draft = draft_to_dict(drafts(op, get_backend("hbm-pim", channels=4), shapes=shapes)[0])
        base = get_backend("hbm-pim", channels=4)
        self.points = {f"p{i:03d}": base.replace(variant=f"p{i:03d}") for i in range(POINTS)}
        self._warm()
        self.tally = {s: Tally() for s in STORES}
        self.incarnation = 0
        self._skipped = {s: 0 for s in STORES}
        self._seen_tmp: set = set()
        self.results_file = 0
        self.completed: dict[str, set] = {s: set() for s in STORES}
        self._new_results_file()

    def _warm(self) -> None:
        """Every store's code run once here, so a forked worker imports nothing (pandas takes
        a second) and writes from its first millisecond."""
        import tempfile

        from pimjax.costmodel.features import F
        from pimjax.costmodel.online import LabelStore
        from pimjax.search.cache import TuneCache
        explore = dse().explore
        with tempfile.TemporaryDirectory() as tmp:
            TuneCache(os.path.join(tmp, "t.json")).put("0:0", self._tune_record("0:0"))
            LabelStore(os.path.join(tmp, "l.jsonl")).append("warm", "g", np.ones((1, F)), [1.0])
            explore(_Objective(), backends=dict(list(self.points.items())[:2]), results=os.path.join(tmp, "r"),
                    progress=False)

    # -- paths --------------------------------------------------------------------------
    def path(self, store: str) -> str:
        return os.path.join(self.folder, {"tune_cache": "tune.json", "label_store": "labels.jsonl",
                                          "explore": f"results{self.results_file}.jsonl"}[store])

    def _new_results_file(self) -> None:
        self.results_file += 1
        self.completed["explore"] = set()
        if hasattr(self, "_skipped"):
            self._skipped["explore"] = 0

    # -- the workers (forked children: never return) -----------------------------------
    def _tune_record(self, ident: str) -> dict:
        w, s = (int(v) for v in ident.split(":"))
        return {"draft": self.draft, "cycles": float(w * 100_000 + s), "predicted": float(s), "space": 1,
                "mode": "predict"}

    def _work(self, store: str, wid: int, report: int) -> None:
        path = self.path(store)
        if store == "tune_cache":
            from pimjax.search.cache import TuneCache
            cache = TuneCache(path, max_entries=10 ** 9)
            for s in range(10 ** 9):
                ident = f"{wid}:{s}"
                cache.put(ident, self._tune_record(ident))
                _report(report, f"C {ident}")
        elif store == "label_store":
            from pimjax.costmodel.online import LabelStore
            labels = LabelStore(path, max_bytes=1 << 40)
            for s in range(10 ** 9):
                codes = wid * 1e6 + s * 100 + np.arange(ROWS) + 1.0
                labels.append("crash", f"{wid}:{s}", np.stack([_label_row(c) for c in codes]), codes)
                _report(report, f"C {wid}:{s}")
        else:
            explore = dse().explore
            last = []

            def started(label):
                if last:
                    _report(report, f"C {last[0]}")   # its rows were appended before this point began
                _report(report, f"S {label}")
                last[:] = [label]
            explore(_Objective(started), backends=self.points, results=path, progress=False)
            if last:
                _report(report, f"C {last[0]}")

    def _spawn(self, store: str) -> tuple[int, str]:
        self.incarnation += 1
        wid = self.incarnation
        log = os.path.join(self.folder, f"report-{store}-{wid}.txt")
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        ready_r, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 0
            os.close(ready_r)
            os.write(ready_w, b"r")                 # forked and running: the kill clock starts
            os.close(ready_w)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    self._work(store, wid, fd)
            except BaseException:               # noqa: BLE001 - a child never unwinds into pytest
                import traceback
                traceback.print_exc()
                code = 1
            os._exit(code)
        os.close(fd)
        os.close(ready_w)
        os.read(ready_r, 1)
        os.close(ready_r)
        return pid, log

    # -- one kill and its restart ---------------------------------------------------------
    def kill(self, store: str, writers: int = 1) -> None:
        """Fork `writers` workers on `store`, SIGKILL each after a random delay, check the
        restart."""
        kids = [self._spawn(store) for _ in range(writers)]
        delays = sorted(self.rng.uniform(0.0, self.max_delay_s, size=writers))
        t0 = time.perf_counter()
        for (pid, _), d in zip(kids, delays):
            time.sleep(max(0.0, d - (time.perf_counter() - t0)))
            os.kill(pid, signal.SIGKILL)
        for pid, _ in kids:
            os.waitpid(pid, 0)
        t = self.tally[store]
        t.kills += writers
        starts = []
        for _, log in kids:
            with open(log) as f:
                for line in f.read().splitlines():
                    kind, ident = line.split(" ", 1)
                    if kind == "C":
                        self.completed[store].add(ident)
                        t.completed += 1
                    elif kind == "S":
                        starts.append(ident)
            os.unlink(log)
        if store == "explore":
            t.reruns += sum(1 for s in starts if s in self._explore_done_before)
        if self.rng.random() < self.tear:
            self._inject_torn(store)
        self.check(store)

    def _inject_torn(self, store: str) -> None:
        """What a kill inside write(2) leaves (rare for a real kill: the write takes ~50 us):
        a JSON-lines store gets a random prefix of a line, without its newline; the tuning
        cache a half-written temporary file that never got renamed."""
        from pimjax.durable import encode_record
        if store == "tune_cache":
            line = '{"0:0": {"draft": '
            target = f"{self.path(store)}.torn{self.tally[store].kills}.tmp"
        elif store == "label_store":
            line = encode_record({"family": "crash", "group": "torn", "x": [1.0] * 40, "cycles": 5.0})
            target = self.path(store)
        else:
            line = encode_record({"point": "p000", "fingerprint": "x", "score": -1.0, "point_rows": 1})
            target = self.path(store)
        cut = int(self.rng.integers(1, len(line) - 1))
        with open(target, "a+b") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() and store != "tune_cache":   # a real writer ends an earlier torn line first
                f.seek(f.tell() - 1)
                if f.read(1) != b"\n":
                    line = "\n" + line
                    cut += 1
            f.write(line[:cut].encode())
        self.tally[store].torn_injected += 1

    def _read(self, store: str):
        """The store as a restarted process reads it, and the torn entries its reader skipped."""
        from pimjax.durable import CorruptStateWarning
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if store == "tune_cache":
                from pimjax.search.cache import TuneCache
                got = TuneCache(self.path(store), max_entries=10 ** 9).entries
            elif store == "label_store":
                from pimjax.costmodel.online import LabelStore
                X, y, _ = LabelStore(self.path(store), max_bytes=1 << 40).read("crash")
                got = (X, y)
            else:
                got = dse()._load(self.path(store))
        torn = sum(int(m.group(1)) for w in caught if issubclass(w.category, CorruptStateWarning)
                   for m in [re.search(r"skipped (\d+)", str(w.message))] if m)
        return got, torn

    def check(self, store: str) -> None:
        t = self.tally[store]
        got, torn = self._read(store)
        if store == "tune_cache":           # the reader never sees a temporary file; the next writer removes it
            import glob
            tmps = set(glob.glob(self.path(store) + ".*.tmp"))
            torn = len(tmps - self._seen_tmp)
            self._seen_tmp = tmps
        else:       # a torn line stays in the file (until it is set aside whole): count each once
            torn, self._skipped[store] = max(0, torn - self._skipped[store]), torn
        t.torn_skipped += torn
        done = self.completed[store]
        if store == "tune_cache":
            t.corrupted_used += sum(1 for k, v in got.items() if v != self._tune_record(k))
            t.lost += sum(1 for k in done if got.get(k) != self._tune_record(k))
        elif store == "label_store":
            X, y = got
            t.corrupted_used += sum(1 for x, c in zip(X, y) if not np.array_equal(x, _label_row(c)))
            have = set(y.tolist())
            for ident in done:
                w, s = (int(v) for v in ident.split(":"))
                if not all(w * 1e6 + s * 100 + r + 1.0 in have for r in range(ROWS)):
                    t.lost += 1
        else:
            rows = {p: r for (p, _), r in got.items()}
            t.corrupted_used += sum(1 for p, r in rows.items()
                                    if len(r) != 1 or r[0].get("score") != int(p[1:]) * 1.5)
            t.lost += sum(1 for p in done if p not in rows)
            self._explore_done_before = set(rows)

    _explore_done_before: set = set()

    def finish_explore(self) -> None:
        """The resume check: a last `explore` on the current results file evaluates exactly
        the points it lacks and returns every point's right figures; then a new file."""
        _load, explore = dse()._load, dse().explore
        path = self.path("explore")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            before = {p for p, _ in _load(path)}
            obj = _Objective()
            df = explore(obj, backends=self.points, results=path, progress=False)
        t = self.tally["explore"]
        t.resume_wrong += len(set(obj.evaluated) ^ (set(self.points) - before))
        t.resume_wrong += len(set(obj.evaluated) & self.completed["explore"])
        t.corrupted_used += int((df["score"].to_numpy() != [int(p[1:]) * 1.5 for p in df["point"]]).sum())
        self._new_results_file()
        self._explore_done_before = set()

    def run(self, kills: int, progress=None) -> dict[str, Tally]:
        """`kills` kills spread over the three stores, one writer or two at once in turn
        (a two-writer round counts two kills); a results file is finished every 8 rounds."""
        n = 0
        rounds = 0
        while n < kills:
            store = STORES[rounds % 3]
            writers = 2 if (rounds // 3) % 2 and kills - n >= 2 else 1
            self.kill(store, writers)
            n += writers
            rounds += 1
            if store == "explore" and self.tally["explore"].kills % 8 < writers:
                self.finish_explore()
            if progress:
                progress(n, kills)
        if self.tally["explore"].kills:
            self.finish_explore()
        return self.tally
