"""Training data for the cost model: drafts over many shapes per kernel,
labelled with simulated cycles.

A *record* is one labelled draft, a JSON object (one per line, the JSON-lines
convention of tuning records):

    {"backend": "hbm-pim", "kernel": "gemv", "shape": [512, 256],
     "row": {"groups": [...], "cores": [...], "reps": [...], "tile": [...],
             "lane": 0, "reduction": 0, ..., "buffers": 1},
     "cycles": 12345.0, "phases": [rearr, compute, readback, merge],
     "source": "random" | "estimate" | "model"}

`row` is the draft's row of its case's `DraftTable` (codes, not names), so a
record set can be re-featurised after a feature change without simulating
again.  Labels come from `sim.cycles` (steady state, DRAM command-clock
cycles); drafts that fail to lower are recorded with cycles = null.

Sampling per case: uniformly random drafts, plus the drafts the closed-form
estimate ranks best (so near-optimal drafts are in the data), plus — in a
second round driven by `train.py` — the drafts a first model ranks best
(the tuner's own hard cases: its top-k).  Shapes come from a seeded RNG and
never include the held-out evaluation shapes (`HELD_OUT`).
"""
from __future__ import annotations

import dataclasses
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ..backends import family_of, own_time_model
from ..errors import PimCompileError
from ..hw.core import Backend
from ..partition import DraftTable
from ..partition.table import KNOB_COLUMNS
from .broad import backend_of, hw_key
from .features import FEATURE_NAMES, features_table
from .kernels import Case, case_drafts, default_cases, lower_case, make_case, supported_kernels

CACHE_DIR = os.environ.get("PIMJAX_COSTMODEL_CACHE", "/tmp/costmodel")
ROW_COLUMNS = ("groups", "cores", "reps", "tile", "lane") + KNOB_COLUMNS

# evaluation shapes of experiments/predictor_accuracy.py: never trained on
HELD_OUT: dict[tuple[str, str], set] = {}


def held_out(backend: str, kernel: str) -> set:
    """The held-out shapes of `kernel` on a family or model name (`configs.model_name`):
    a controller's model is judged on its family's held-out shapes, so it never trains on them."""
    from .configs import split
    key = (split(backend)[0], kernel)
    if key not in HELD_OUT:
        HELD_OUT[key] = {tuple(c["shape"]) for c in default_cases() if c["backend"] == key[0]
                         and c["kernel"] == kernel}
    return HELD_OUT[key]


# --------------------------------------------------------------------------
# shapes
# --------------------------------------------------------------------------
def _size(rng, lo: int, hi: int) -> int:
    """A size in [2^lo, 2^hi]: mostly powers of two, sometimes 3/5/7 x 2^k or
    an odd size (padding and uneven tiles matter)."""
    k = int(rng.integers(lo, hi + 1))
    r = rng.random()
    if r < 0.55:
        v = 1 << k
    elif r < 0.85:
        v = int(rng.choice([3, 5, 7])) << max(0, k - 2)
    else:
        v = int(rng.integers(1 << max(0, k - 1), (1 << k) + 1))
    return max(1, v)


MAX_ELEMENTS = 1 << 18      # training shapes: at most this many elements in the largest tensor


def sample_shape(kernel: str, backend: str, rng) -> tuple[int, ...]:
    """A moderate random shape for `kernel`: the largest tensor has at most
    `MAX_ELEMENTS` elements, which keeps the slowest drafts' programs under
    ~10^5 records (labelling thousands of drafts takes minutes)."""
    cap = MAX_ELEMENTS
    if kernel == "gemv":
        while True:
            s = (_size(rng, 4, 11), _size(rng, 4, 11))
            if s[0] * s[1] <= cap:
                return s
    if kernel in ("mmtv", "attn"):
        B = int(rng.choice([1, 1, 2, 4, 8]))
        H = int(rng.choice([1, 2, 4, 8, 12, 16, 32, 40]))
        L = _size(rng, 4, 10)
        D = int(rng.choice([16, 32, 64, 64, 128]))
        while B * H * L * D > cap:
            if H > 1:
                H = max(1, H // 2)
            elif L > 16:
                L = max(16, L // 2)
            else:
                B = max(1, B // 2)
        return (B, H, L, D)
    if kernel in ("va", "relu", "red"):
        if rng.random() < 0.5:
            return (_size(rng, 5, 16),)
        while True:
            s = (int(rng.choice([2, 3, 4, 8, 16, 32, 64, 128])), _size(rng, 4, 12))
            if s[0] * s[1] <= cap:
                return s
    if kernel == "gemm":
        return (_size(rng, 3, 6), _size(rng, 4, 8), _size(rng, 4, 7))
    if kernel == "conv":
        H = int(rng.choice([4, 7, 8, 14, 16]))
        return (H, H, int(rng.choice([4, 8, 16, 32])), int(rng.choice([8, 16, 32, 64])), int(rng.choice([1, 3])))
    raise ValueError(kernel)


# --------------------------------------------------------------------------
# labelling
# --------------------------------------------------------------------------
def simulate(programs: list, backend: Backend, threads: int | None = None) -> np.ndarray:
    """[len(programs), 5] float64: total cycles and the phases (rearrangement,
    compute, readback, merge) of every program.

    `cycles_batch` pools the record streams of all programs and packs them
    into lanes of one scan, so pass many programs at once (`Labeller` pools
    them across cases).  threads: the native engine's threads (default: all
    cores; the `Labeller` runs it on one, beside the lowering)."""
    from ..sim.cycles import cycles, cycles_batch
    out = np.full((len(programs), 5), np.nan)
    if not programs:
        return out
    if own_time_model(backend):             # a family's own time model (UPMEM's), per program
        for i, p in enumerate(programs):
            r = cycles(p, backend)
            out[i] = [float(r.total_cycles), float(r.rearrangement), float(r.compute),
                      float(r.readback), float(r.merge)]
        return out
    r = cycles_batch(programs, backend, coarse=False, threads=threads)
    return np.stack([np.asarray(getattr(r, f), np.float64) for f in
                     ("total_cycles", "rearrangement", "compute", "readback", "merge")], axis=1)


def _slim(program):
    """The program without layouts / host data (all `cycles` reads are the
    records, stats and flags), so pools of thousands fit in memory."""
    return dataclasses.replace(program, layouts=(), host_data=())


class Labeller:
    """Pools lowered programs across cases and simulates them in full
    batches (`simulate`); `flush` returns the (tag, 5-vector) of each.

    A full batch is simulated on a worker thread while the caller lowers
    the next one (the native engine's loops and the scan's XLA both release
    the GIL): at most one batch simulates while the next fills."""

    def __init__(self, backend: Backend, max_records: int | None = None):
        from ..sim.engines import DEFAULT_ENGINE
        self.backend = backend
        # the compiled engine wants batches that stay in cache (pending programs and their
        # pooled streams, ~90 MB at 1M records; 8M measured 25 % slower on a GEMV 4096^2
        # exhaustive search); the scan wants long batches to fill its lanes
        self.max_records = max_records or (1_000_000 if DEFAULT_ENGINE == "native" else 8_000_000)
        self.pending: list = []
        self.tags: list = []
        self.records = 0
        self.done: list = []
        self._pool: ThreadPoolExecutor | None = None
        self._running: tuple | None = None          # (tags, future) of the batch on the worker

    def add(self, tag, program) -> None:
        """Queue one program (None: it failed to lower; labelled NaN)."""
        if program is None:
            self.done.append((tag, np.full(5, np.nan)))
            return
        self.pending.append(_slim(program))
        self.tags.append(tag)
        self.records += int(np.prod(program.commands.shape))
        if self.records >= self.max_records:
            self._run()

    def _collect(self) -> None:
        """Wait for the batch on the worker, if any, and keep its labels."""
        if self._running is not None:
            tags, future = self._running
            self._running = None
            self.done += list(zip(tags, future.result()))

    def _run(self) -> None:
        self._collect()
        if not self.pending:
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="labeller")
        self._running = (self.tags, self._pool.submit(simulate, self.pending, self.backend, 1))
        self.pending, self.tags, self.records = [], [], 0

    def ready(self) -> list:
        """The (tag, 5-vector) labels finished so far, without waiting for
        the batch on the worker."""
        if self._running is not None and self._running[1].done():
            self._collect()
        out, self.done = self.done, []
        return out

    def flush(self) -> list:
        """Simulate what is pending, wait for it, and return every label not
        returned yet."""
        self._run()
        self._collect()
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        return self.ready()


def label(case: Case, table: DraftTable, idx, backend: Backend, progress=None) -> np.ndarray:
    """[len(idx), 5] simulated (total, phases...) of drafts `idx` of `table`;
    NaN rows for drafts that fail to lower (PimCompileError / ValueError).
    progress(k, len(idx)): called every 200 drafts lowered."""
    lab = Labeller(backend)
    for k, i in enumerate(idx):
        lab.add(k, try_lower(case, table[int(i)], backend))
        if progress is not None and (k + 1) % 200 == 0:
            progress(k + 1, len(idx))
    out = np.full((len(idx), 5), np.nan)
    for k, v in lab.flush():
        out[k] = v
    return out


def try_lower(case: Case, draft, backend: Backend):
    """The case's program under `draft`, or None when the draft does not lower."""
    try:
        return lower_case(case, draft, backend)
    except (PimCompileError, ValueError, NotImplementedError):
        return None


def row_of(table: DraftTable, i: int) -> dict:
    return {c: (np.asarray(getattr(table, c))[i].tolist()) for c in ROW_COLUMNS}


def table_from_rows(rows: list[dict], lane_vars: tuple) -> DraftTable:
    """A DraftTable of recorded rows (the inverse of `row_of`)."""
    cols = {}
    for c in ROW_COLUMNS:
        a = np.array([r[c] for r in rows], np.int64)
        cols[c] = a.reshape(len(rows), -1) if c in ("groups", "cores", "reps", "tile") else a.reshape(len(rows))
    return DraftTable(lane_vars, **cols)


# --------------------------------------------------------------------------
# record files (JSON lines)
# --------------------------------------------------------------------------
def records_path(backend: str, cache_dir: str | None = None) -> str:
    return os.path.join(cache_dir or CACHE_DIR, f"records-{backend}.jsonl")


def read_records(path: str) -> list[dict]:
    """The labelled records of a records file in file order ([] when absent); torn or
    corrupt lines (an interrupted run) are skipped with a `durable.CorruptStateWarning`."""
    from ..durable import read_records as read
    return read(path, "cost-model records")


def append_records(path: str, records: list[dict]) -> None:
    """Append records (JSON-able dicts) to a records file: one locked, checksummed,
    fsynced append (`pimjax.durable.append_records`)."""
    from ..durable import append_records as append
    append(path, records)


def _case_key(backend: str, kernel: str, shape, hw: dict | None = None) -> str:
    """A case's key: backend, kernel, shape and, on a structural variant, its
    preset options (`broad.hw_key`; the preset's own key has no suffix, so
    record files written before variants existed keep their keys)."""
    key = f"{backend}|{kernel}|{'x'.join(map(str, shape))}"
    return key + (f"|{hw_key(hw)}" if hw else "")


# --------------------------------------------------------------------------
# generation
# --------------------------------------------------------------------------
@dataclass
class Plan:
    """How many cases and drafts to label for one backend (round 1; the
    model-driven rounds add `train.py --model-top` drafts per case).
    Kernels with more dimension sets (mmtv, attn) get `multi_set_factor`
    times more shapes: their spaces vary along more axes."""
    shapes_per_kernel: int = 40
    random_per_case: int = 16
    estimate_per_case: int = 4
    multi_set_factor: float = 1.5
    # small spaces (elementwise ops, reductions: tens to hundreds of drafts)
    # are sampled densely: their best drafts differ by a few percent, which
    # a model that saw 16 of them cannot rank
    dense_below: int = 600
    dense_drafts: int = 64
    max_drafts: int = 400_000          # skip shapes whose draft space is larger


def plan_of(backend: Backend | str) -> Plan:
    """The round-1 `Plan` of a backend (or family or model name, `configs.model_name`): its
    family's `TrainingShapes.shapes_per_kernel`, the other counts the defaults."""
    if isinstance(backend, str):
        from .configs import split
        backend = split(backend)[0]
    return Plan(shapes_per_kernel=family_of(backend).training_shapes.shapes_per_kernel)


def training_cases(backend: str, plan: Plan | None = None, seed: int = 0) -> list[tuple[str, tuple]]:
    """The (kernel, shape) training cases of `backend`, a family or model name (deterministic in
    `seed`; never a held-out shape, `held_out`)."""
    plan = plan or plan_of(backend)
    rng = np.random.default_rng([seed, sum(map(ord, backend))])
    out = []
    for kernel in supported_kernels(backend):
        seen = set(held_out(backend, kernel))
        shapes = []
        tries = 0
        want = int(round(plan.shapes_per_kernel * (plan.multi_set_factor if kernel in ("mmtv", "attn") else 1)))
        while len(shapes) < want and tries < 50 * want:
            tries += 1
            s = sample_shape(kernel, backend, rng)
            if s in seen:
                continue
            seen.add(s)
            shapes.append(s)
        out += [(kernel, s) for s in shapes]
    return out


def generate(backend: Backend, cases: list[tuple[str, tuple]], plan: Plan, *, seed: int = 0,
             path: str | None = None, model=None, model_top: int = 0, prior: list[dict] | None = None,
             progress=None, time_budget: float | None = None) -> list[dict]:
    """Label the drafts this call selects for every case; return their
    records, case by case in selection order.

    The record file `path` is a pure memo: a selected draft already labelled
    there is read instead of simulated, and new labels are appended, but
    which drafts are selected never depends on what the file holds.  So a
    run from an empty file and one from a file left by other runs return
    the same records (`make train` reproduces the shipped weights).

    Round 1 (model None): `plan.random_per_case` uniform drafts and the
    `plan.estimate_per_case` best by the closed-form time estimate.
    Round 2 (model given): the `model_top` drafts the model ranks best that
    are not among `prior` (the records earlier rounds of this run returned).
    time_budget: stop starting new cases after this many seconds (the
    skipped cases return nothing)."""
    name = backend.name
    path = path or records_path(name)
    memo: dict[str, dict[str, dict]] = {}
    for r in read_records(path):            # a later record of the same draft wins (relabelled)
        memo.setdefault(_case_key(r["backend"], r["kernel"], r["shape"], r.get("hw")), {})[
            json.dumps(r["row"], sort_keys=True)] = r
    taken: dict[str, set] = {}
    for r in prior or ():
        taken.setdefault(_case_key(r["backend"], r["kernel"], r["shape"], r.get("hw")), set()).add(
            json.dumps(r["row"], sort_keys=True))
    est_col = FEATURE_NAMES.index("est_t_total")
    t_start = time.time()
    slots: list[list] = []                  # per case: its records in selection order, None until labelled
    labellers: dict[str, Labeller] = {}
    preset = backend

    def fill(done: list) -> None:
        for (ci, j), rec in _write(done, path):
            slots[ci][j] = rec

    for ci, item in enumerate(cases):
        kernel, shape = item[0], item[1]
        hw = dict(item[2]) if len(item) > 2 and item[2] else {}
        backend = backend_of(name, hw) if hw else preset
        labeller = labellers.setdefault(hw_key(hw), Labeller(backend))
        key = _case_key(name, kernel, shape, hw)
        slots.append([])
        if time_budget is not None and time.time() - t_start > time_budget:
            continue
        case = make_case(backend, kernel, shape)
        table = case_drafts(case, backend)
        n = len(table)
        if n == 0 or n > plan.max_drafts:
            continue
        rng = np.random.default_rng([seed, ci, n, 1 if model is None else 2])
        want: list[tuple[int, str]] = []
        if model is None:
            k = plan.random_per_case if n > plan.dense_below else max(plan.random_per_case, plan.dense_drafts)
            want += [(int(i), "random") for i in rng.choice(n, min(n, k), replace=False)]
            if plan.estimate_per_case:
                est = features_table(case.target, table, backend, case.shapes)[:, est_col]
                want += [(int(i), "estimate") for i in np.argsort(est, kind="stable")[:plan.estimate_per_case]]
        else:
            X = features_table(case.target, table, backend, case.shapes)
            pred = model.predict(X)
            order = np.argsort(pred, kind="stable")
            want += [(int(i), "model") for i in order[: model_top * 4]]
        picked, seen = [], set(taken.get(key, ()))
        for i, src in want:
            k = json.dumps(row_of(table, i), sort_keys=True)
            if k in seen:
                continue
            if model is not None and len(picked) >= model_top:
                break
            seen.add(k)
            picked.append((i, src, k))
        known = memo.get(key, {})
        slots[ci] = [None] * len(picked)
        fresh = 0
        for j, (i, src, k) in enumerate(picked):
            meta = {"backend": name, "kernel": kernel, "shape": list(shape), "row": row_of(table, i),
                    "source": src}
            if hw:
                meta["hw"] = hw
            if k in known:
                slots[ci][j] = dict(meta, cycles=known[k].get("cycles"), phases=known[k].get("phases"))
            else:
                fresh += 1
                labeller.add((ci, j, meta), try_lower(case, table[i], backend))
        fill(labeller.ready())              # batches done so far; the worker runs on
        if progress is not None:
            progress(ci + 1, len(cases), f"{kernel} {list(shape)}{' ' + hw_key(hw) if hw else ''}: "
                                         f"{n} drafts, {len(picked)} picked, {fresh} queued")
    for lab in labellers.values():
        fill(lab.flush())
    return [r for case_slots in slots for r in case_slots]


def relabel(backend: Backend, path: str, progress=None) -> tuple[int, int]:
    """Simulate every record of the file `path` again with the current
    lowering and cycle model and rewrite the file (atomically; the drafts and
    their order stay, only `cycles` / `phases` change).  For a change of the
    time model: the drafts were chosen by an earlier model, but they are
    still a valid sample of the space, and their labels must agree with what
    `sim.cycles` says now.  Returns (records, labels that changed by more
    than one cycle)."""
    recs = read_records(path)
    by_case: dict[str, list[int]] = {}
    for k, r in enumerate(recs):
        if r["backend"] == backend.name:
            by_case.setdefault(_case_key(r["backend"], r["kernel"], r["shape"], r.get("hw")), []).append(k)
    from ..partition.generate import lane_candidates
    labellers: dict[str, Labeller] = {}
    for ci, ks in enumerate(by_case.values()):
        r0 = recs[ks[0]]
        be = backend_of(backend.name, r0["hw"]) if r0.get("hw") else backend
        labeller = labellers.setdefault(hw_key(r0.get("hw")), Labeller(be))
        case = make_case(be, r0["kernel"], r0["shape"])
        table = table_from_rows([recs[k]["row"] for k in ks], lane_candidates(case.op, be))
        for j, k in enumerate(ks):
            labeller.add(k, try_lower(case, table[j], be))
        if progress is not None:
            progress(ci + 1, len(by_case), f"{r0['kernel']} {r0['shape']}")
    changed = 0
    for k, v in [kv for lab in labellers.values() for kv in lab.flush()]:
        ok = bool(np.isfinite(v[0]))
        old = recs[k].get("cycles")
        new = float(v[0]) if ok else None
        changed += (old is None) != (new is None) or (new is not None and abs(new - old) > 1.0)
        recs[k] = dict(recs[k], cycles=new, phases=[float(x) for x in v[1:]] if ok else None)
    from ..durable import atomic_write, encode_record
    atomic_write(path, "".join(encode_record(r) for r in recs))
    return len(recs), int(changed)


def _write(done: list, path: str) -> list[tuple]:
    """Append the labelled ((ci, j, meta), 5-vector) pairs to `path`; return
    ((ci, j), record) pairs."""
    out = []
    for (ci, j, meta), v in done:
        ok = bool(np.isfinite(v[0]))
        out.append(((ci, j), dict(meta, cycles=float(v[0]) if ok else None,
                                  phases=[float(x) for x in v[1:]] if ok else None)))
    if out:                  # `generate` calls this after every case, mostly with nothing new
        append_records(path, [r for _, r in out])
    return out


def featurise(records: list[dict], backend: Backend, phases: bool = False):
    """(X [N, F] float32, cycles [N] float64, group [N] int, case keys) of the
    labelled records (failed lowerings dropped); `group` numbers the cases,
    so ranking pairs stay within one (kernel, shape).  phases=True appends
    the [N, 4] phase cycles (rearrangement, compute, readback, merge)."""
    by_case: dict[str, list[dict]] = {}
    for r in records:
        if r.get("cycles") is None or r["backend"] != backend.name:
            continue
        by_case.setdefault(_case_key(r["backend"], r["kernel"], r["shape"], r.get("hw")), []).append(r)
    Xs, ys, gs, keys, ps = [], [], [], [], []
    for g, (key, recs) in enumerate(sorted(by_case.items())):
        be = backend_of(backend.name, recs[0]["hw"]) if recs[0].get("hw") else backend   # a variant's own hardware
        case = make_case(be, recs[0]["kernel"], recs[0]["shape"])
        from ..partition.generate import lane_candidates
        table = table_from_rows([r["row"] for r in recs], lane_candidates(case.op, be))
        Xs.append(features_table(case.target, table, be, case.shapes))
        ys.append(np.array([r["cycles"] for r in recs], np.float64))
        ps.append(np.array([r["phases"] for r in recs], np.float64).reshape(len(recs), 4))
        gs.append(np.full(len(recs), g, np.int64))
        keys.append(key)
    if not Xs:
        from .features import F
        out = (np.zeros((0, F), np.float32), np.zeros(0), np.zeros(0, np.int64), [])
        return out + (np.zeros((0, 4)),) if phases else out
    out = (np.concatenate(Xs), np.concatenate(ys), np.concatenate(gs), keys)
    return out + (np.concatenate(ps),) if phases else out
