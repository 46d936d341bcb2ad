"""Search strategies as objects, and what they share.

A strategy picks the fastest draft of one op's `DraftTable` by simulated
cycles.  Every strategy measures through one `Measurer` (lower a draft, time
the programs) and reads and writes one `Database` (the tuning cache and the
opt-in label store); `search.tuner.Tuner` composes them (which strategy a
space gets, the cache's trust, the baseline and the family's own mappings).

* `TopK` ("predict", DCC §IV-D) -- lower and simulate the `k` drafts the
  cost model predicts best (that lower) and the backend's baseline mapping.
* `Exhaustive` ("exhaustive") -- every draft that can win, lowered and
  simulated in bounded batches, pruned by the family's lower bound
  (`Family.lower_bound`: branch and bound, the same pick as every draft).
* `Evolutionary` ("evolutionary", ATiM §5.2.3) -- a population of drafts
  mutated one column at a time, the cost model ranking candidates, each
  round's best simulated; for the first 40 % of the trials the parents are
  drawn equally from drafts with and without a partial (rfactor)
  reduction, so are the uniform draws and the drafts each round measures
  (the best predicted of each strategy in turn), and ε decays linearly from
  0.5 to 0.05 (ε-greedy: that share of each round's candidates is drawn at
  random).

A draft whose lowering raises PimCompileError is skipped by every strategy
(the resource verifier is an estimate: a draft near a capacity limit can
pass it and still not fit); a search returns None only when no draft lowers.
"""
from __future__ import annotations

import itertools
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Callable

import numpy as np

from ..backends import baseline, family_of, has_family, own_time_model
from ..errors import PimCompileError
from ..hw.core import is_int
from ..lower import lower
from ..partition.draft import Draft
from ..partition.table import KNOB_COLUMNS, DraftTable
from ..sim.cycles import cycles, cycles_batch, report_at
from ..trace.ir import PimOp
from .cache import TuneCache, backend_fingerprint, draft_to_dict, op_signature

EXHAUSTIVE_BATCH = 256
"""Drafts the exhaustive search simulates at once (at most)."""
EXHAUSTIVE_RECORDS = 1 << 21
"""Records (every stream's slots, padding included) after which the
exhaustive search simulates the drafts it has lowered: 2 M records pool
into the native engine's reusable 64 MB scratch table (`cycles._arena`)."""
EXHAUSTIVE_PIPELINE = True
"""The exhaustive search simulates a batch on a worker thread while it
lowers the next (one process; False: one after the other on the caller's
thread, the same choice)."""
EXHAUSTIVE_BOUND = True
"""The exhaustive search skips the drafts whose lower bound (the family's
`lower_bound`) exceeds the best total found (False: every draft, the same
choice)."""
EXHAUSTIVE_FIRST = 8
"""With a bound, the first this many drafts (the smallest bounds) are
simulated at once, on the caller's thread: the best total they give starts
the pruning."""


@dataclass
class Choice:
    """The pick for one op.

    program / report: the chosen draft lowered and simulated (steady state).
    predicted_cycles: the cost model's prediction for it (nan if none).
    simulated: how many drafts were lowered and simulated to decide.
    space: drafts in the op's space.  cached: answered from the cache.
    baseline: the CycleReport of the backend's baseline mapping when the
    tuner simulated it (predict mode), else None.
    failed: drafts skipped because their lowering raised PimCompileError
    (not counted in `simulated`); failure: the first such message ("" if
    none).
    append_cycles: the per-call placement of appended resident operands
    (`sim.append`), included in `report` (and in `baseline`).
    pruned: drafts the exhaustive search never lowered because their lower
    bound exceeded the best total found (`Family.lower_bound`).
    """
    draft: Draft
    program: Any
    report: Any
    predicted_cycles: float
    simulated: int
    space: int
    mode: str
    cached: bool = False
    history: list = field(default_factory=list)
    baseline: Any = None
    failed: int = 0
    failure: str = ""
    append_cycles: float = 0.0
    pruned: int = 0


def first_message(errors) -> str:
    """The first lowering error's message ("" when none): `Choice.failure`."""
    return next((str(e) for e in errors if e is not None), "")


@dataclass(frozen=True, eq=False)
class Task:
    """One op's search: what every strategy reads.

    op / backend / shapes / lower_options: the op, the hardware, value id ->
    shape, and the lowering options.  table: the op's drafts.  lower_fn:
    (op, draft, backend, shapes, **options) -> Program (`lower`, or a block
    lowering).  predicted: [n] predicted cycles of the table's drafts (None:
    no prediction, the exhaustive search).  predict_one: draft -> predicted
    cycles of a draft outside the table (the baseline; None: nan).
    """
    op: PimOp
    table: DraftTable
    backend: Any
    shapes: dict
    lower_options: dict = field(default_factory=dict)
    lower_fn: Callable = lower
    predicted: Any = None
    predict_one: Callable | None = None

    def predict_draft(self, draft) -> float:
        """The cost model's cycles of `draft` (nan without a model)."""
        return float("nan") if self.predict_one is None else float(self.predict_one(draft))


# --------------------------------------------------------------------------
# what strategies share
# --------------------------------------------------------------------------
class Measurer:
    """Lowers drafts and times their programs: the one way every strategy
    measures.  Subclass it to memoise or time the measurements
    (`Tuner(measurer=...)`, `benchmarks/tune_bench.py`)."""

    def lower_each(self, op, drafts, backend, shapes, lower_options, lower_fn=lower) -> list:
        """Per draft, its program (`lower_fn`), or the PimCompileError its
        lowering raised: the resource verifier is an estimate, so a draft
        near a capacity limit may pass it and still not fit; that draft is
        skipped, not the search.  Other errors (bugs) propagate."""
        out = []
        for d in drafts:
            try:
                out.append(lower_fn(op, d, backend, shapes, **lower_options))
            except PimCompileError as err:
                out.append(err)
        return out

    def simulate(self, op, drafts, backend, shapes, lower_options, programs=None, lower_fn=lower):
        """Lower (with `lower_fn`) and simulate `drafts` (batched; `programs`:
        already lowered): (programs, totals [len(drafts)] in cycles,
        report(i) -> CycleReport of programs[i]).  A draft that does not
        lower has its PimCompileError for program and total +inf."""
        if programs is None:
            programs = self.lower_each(op, drafts, backend, shapes, lower_options, lower_fn)
        ok = [i for i, p in enumerate(programs) if not isinstance(p, PimCompileError)]
        at = {i: j for j, i in enumerate(ok)}          # draft -> its row among the lowered
        totals = np.full(len(programs), np.inf)
        if not ok:
            return programs, totals, lambda i: None
        lowered = [programs[i] for i in ok]
        if own_time_model(backend):            # a family's own time model (UPMEM's): one program at a time
            reports = [cycles(p, backend) for p in lowered]
            totals[ok] = [float(r.total_cycles) for r in reports]
            return programs, totals, lambda i: reports[at[i]]
        batched = cycles_batch(lowered, backend)
        totals[ok] = np.asarray(batched.total_cycles, np.float64)
        return programs, totals, lambda i: report_at(batched, at[i])

    def fastest(self, op, drafts, backend, shapes, lower_options, lower_fn=lower, max_records=None):
        """The fastest of `drafts` (the first of equals), lowered one at a time and simulated in
        batches of at most `max_records` records (default `EXHAUSTIVE_RECORDS`), only the best
        program outliving its batch: (index into drafts, its total in cycles, program, report,
        drafts simulated to a finite total), or None when none does.  For drafts each of which may be large (a
        fixed mapping of a whole layer on few groups: nine PIMFlow mappings of VGG16's 224 x 224 x 64
        CONV hold 1.8 GB of records each), where `simulate`'s one batch would hold them all."""
        max_records = EXHAUSTIVE_RECORDS if max_records is None else max_records
        best, count, batch = None, 0, []

        def flush():
            nonlocal best, count
            idx = [i for i, _ in batch]
            _, totals, report = self.simulate(op, [drafts[i] for i in idx], backend, shapes, lower_options,
                                              [p for _, p in batch])
            j = int(np.argmin(totals))
            count += int(np.isfinite(totals).sum())
            if np.isfinite(totals[j]) and (best is None or float(totals[j]) < best[1]):
                best = (idx[j], float(totals[j]), batch[j][1], report(j))
            batch.clear()

        records = 0
        for i, d in enumerate(drafts):
            p, = self.lower_each(op, [d], backend, shapes, lower_options, lower_fn)
            if isinstance(p, PimCompileError):
                continue
            size = int(np.prod(np.shape(p.commands.op)))
            if batch and records + size > max_records:
                flush()
                records = 0
            batch.append((i, p))
            records += size
        if batch:
            flush()
        return None if best is None else best + (count,)

    def first_lowering(self, op, table, order, k, backend, shapes, lower_options, lower_fn):
        """The first `k` drafts of `table` in `order` that lower: (their
        rows, their programs, the PimCompileErrors of those skipped before
        them).  Lowers no more than it keeps while none fails."""
        rows, programs, errors, pos = [], [], [], 0
        while len(rows) < k and pos < len(order):
            chunk = [int(i) for i in order[pos: pos + k - len(rows)]]
            pos += len(chunk)
            for i, p in zip(chunk, self.lower_each(op, [table[i] for i in chunk], backend, shapes,
                                                   lower_options, lower_fn)):
                if isinstance(p, PimCompileError):
                    errors.append(p)
                else:
                    rows.append(i)
                    programs.append(p)
        return rows, programs, errors


class Database:
    """The tuning cache (`cache.TuneCache`: decisions by key) and the opt-in
    label store (`costmodel.online.LabelStore`: simulated drafts as cost-model
    labels), behind one object.  It composes their own reads and writes
    (their file formats and crash safety are theirs).

    cache: a TuneCache, a JSON path or None (memory only).  label_store:
    None or a LabelStore."""

    def __init__(self, cache=None, label_store=None):
        self.cache = cache if isinstance(cache, TuneCache) else TuneCache(cache)
        self.label_store = label_store

    def get(self, key: str) -> dict | None:
        """The cached record of `key` (None when there is none)."""
        return self.cache.get(key)

    def drop(self, key: str) -> None:
        """Forget `key` (a stale or wrong entry)."""
        self.cache.drop(key)

    def put_choice(self, key: str, choice: Choice) -> None:
        """Cache `choice` under `key`: its draft, what it simulates to, the
        search that found it and how much it searched (`Tuner._trusts`)."""
        predicted = choice.predicted_cycles          # NaN (no prediction) is stored as null: strict JSON
        self.cache.put(key, {"draft": draft_to_dict(choice.draft), "simulated": int(choice.simulated),
                             "predicted": None if np.isnan(predicted) else predicted,
                             "cycles": float(choice.report.total_cycles), "space": choice.space,
                             "mode": choice.mode, "failed": int(choice.failed)})

    def store_labels(self, op, drafts, totals, backend, shapes: dict, matrix: int | None = None) -> None:
        """Append the simulated drafts' features and cycles to the label store
        when there is one (online refinement; the drafts of one op, backend
        and placement form a group); the features of the placement the
        programs ran (`matrix`)."""
        if self.label_store is None:
            return
        from ..costmodel.features import features
        ok = [i for i, t in enumerate(totals) if np.isfinite(t)]
        if not ok:
            return
        X = np.stack([features(op, drafts[i], backend, shapes, matrix=matrix) for i in ok])
        group = f"{op_signature(op)}|{backend_fingerprint(backend)}" + ("" if matrix is None else f"|matrix={matrix}")
        # under the model that ranks this backend (`costmodel.configs.model_name`): a controller's labels
        # (DCC's forks) are not its family's
        from ..costmodel.configs import model_name
        self.label_store.append(model_name(backend), group, X, np.asarray(totals, np.float64)[ok])


class Strategy:
    """A search over one op's drafts.  name: what `Choice.mode` and the cache
    call it.  effort: the drafts it simulates (a cached pick of its name
    that simulated at least as many answers it: `Tuner._trusts`; None: it
    trusts only its own kind of exhaustive answer)."""
    name = ""
    effort: int | None = None

    def search(self, task: Task, measurer: Measurer, database: Database | None = None) -> Choice | None:
        """The fastest draft found (None when no draft lowers)."""
        raise NotImplementedError


# --------------------------------------------------------------------------
# the strategies
# --------------------------------------------------------------------------
@dataclass
class TopK(Strategy):
    """Predict mode: the best predicted `k` drafts that lower (a draft that
    does not fit gives its place to the next) and, with `include_baseline`,
    the backend's baseline mapping, simulated in one batch; the fastest kept.
    The simulated drafts are labels for the database's label store."""
    k: int = 8
    include_baseline: bool = True
    name = "predict"

    @property
    def effort(self) -> int:
        return self.k

    def search(self, task: Task, measurer: Measurer, database: Database | None = None) -> Choice | None:
        op, table, backend, shapes, opts = task.op, task.table, task.backend, task.shapes, task.lower_options
        pred = task.predicted
        rows, programs, errors = measurer.first_lowering(op, table, np.argsort(pred, kind="stable"), self.k,
                                                         backend, shapes, opts, task.lower_fn)
        drafts, predicted = [table[i] for i in rows], [float(pred[i]) for i in rows]
        base = baseline(op, backend) if self.include_baseline else None
        if base is not None and base not in drafts:
            # the baseline may lie outside the pruned space (or a block's
            # `keep`); it joins the candidates when it lowers
            program, = measurer.lower_each(op, [base], backend, shapes, opts, task.lower_fn)
            if not isinstance(program, PimCompileError):
                drafts.append(base)
                programs.append(program)
                predicted.append(task.predict_draft(base))
        if not drafts:
            return None
        programs, totals, report = measurer.simulate(op, drafts, backend, shapes, opts, programs)
        if database is not None:
            database.store_labels(op, drafts, totals, backend, shapes, opts.get("matrix"))
        choice = _pick(drafts, programs, totals, report, predicted, self.name, len(table))
        if choice is None:
            return None
        choice = replace(choice, failed=len(errors), failure=first_message(errors))
        # the baseline's report from the same batch: the api's speedup over the
        # baseline mapping needs it, and timing it alone would compile another scan
        return choice if base not in drafts else replace(choice, baseline=report(drafts.index(base)))


def _pick(drafts, programs, totals, report, predicted, mode, space) -> Choice | None:
    """The fastest of the simulated drafts (None when none lowered: every
    total +inf); the others count as failed."""
    lowered = np.isfinite(totals)
    if not lowered.any():
        return None
    # the batch's own report of the winner: timing it again alone would
    # compile another scan (seconds) for the same numbers
    best = int(np.argmin(totals))
    errors = [p for p in programs if isinstance(p, PimCompileError)]
    return Choice(drafts[best], programs[best], report(best),
                  float(predicted[best]) if predicted is not None else float("nan"),
                  int(lowered.sum()), space, mode, failed=int((~lowered).sum()),
                  failure=first_message(errors))


@dataclass
class Exhaustive(Strategy):
    """Every draft of the table that can win, lowered and simulated, the
    fastest kept (the first of equals, in table order).

    Streamed: drafts are lowered one at a time and simulated in batches of at
    most `batch` drafts / `records` records, and only the best program so far
    outlives its batch.  Keeping every program of a GEMV 20480 x 5120 search
    alive held 3.2 GB (Newton) to 13.5 GB (HBM-PIM) of records, and
    first-touching that memory cost more than lowering and simulating it; a
    bounded batch reuses the same pages and the native engine's scratch
    table.  With `pipeline` a batch is simulated on a worker thread while the
    next one is lowered (both run compiled code that releases the GIL for
    most of their time); at most two batches are alive.

    Branch and bound (`bound`): where the backend's family gives a lower
    bound on each draft's simulated cycles (`Family.lower_bound`, from the
    table alone; drafts lowered by `lower`, not a block lowering), drafts go
    in increasing order of their bound, the first `first` are simulated at
    once to start the pruning, and the search stops at the first draft whose
    bound exceeds the best total simulated so far -- no later draft can win,
    so the pick is the exhaustive one (`Choice.pruned` counts the drafts it
    never lowered).

    Each knob None reads the module constant of its name
    (`EXHAUSTIVE_BOUND`, ...) when the search runs."""
    bound: bool | None = None
    batch: int | None = None
    records: int | None = None
    pipeline: bool | None = None
    first: int | None = None
    name = "exhaustive"
    effort = None

    def _knobs(self) -> tuple:
        pick = lambda mine, default: default if mine is None else mine  # noqa: E731
        return (pick(self.bound, EXHAUSTIVE_BOUND), pick(self.batch, EXHAUSTIVE_BATCH),
                pick(self.records, EXHAUSTIVE_RECORDS), pick(self.pipeline, EXHAUSTIVE_PIPELINE),
                pick(self.first, EXHAUSTIVE_FIRST))

    @staticmethod
    def lower_bound(task: Task, use: bool = True):
        """The family's lower bound on each draft's cycles ([n]) when `use`
        and the drafts are lowered by `lower` (a block lowering has its own
        costs), else None."""
        if not use or task.lower_fn is not lower or not has_family(task.backend):
            return None
        fn = family_of(task.backend).lower_bound
        return None if fn is None else fn(task.op, task.table, task.backend, task.shapes, task.lower_options)

    def search(self, task: Task, measurer: Measurer, database: Database | None = None) -> Choice | None:
        use_bound, max_batch, max_records, pipelined, n_first = self._knobs()
        op, table, backend, shapes, opts, lower_fn = (task.op, task.table, task.backend, task.shapes,
                                                      task.lower_options, task.lower_fn)
        best = None                       # (total, table index, draft, program, report)
        errors, simulated = [], 0
        drafts, programs, index, records = [], [], [], 0
        pool = ThreadPoolExecutor(1) if pipelined else None
        pending = None
        bound = self.lower_bound(task, use_bound)
        order = range(len(table)) if bound is None else np.argsort(bound, kind="stable")

        def simulate(ds, ps, ix):
            _, totals, report = measurer.simulate(op, ds, backend, shapes, opts, ps)
            j = min(range(len(ds)), key=lambda k: (float(totals[k]), ix[k]))
            return len(ds), float(totals[j]), ix[j], ds[j], ps[j], report(j)

        def take(result):
            nonlocal best, simulated
            count, total, i, d, p, rep = result
            simulated += count
            if best is None or (total, i) < best[:2]:    # ties keep the earlier draft of the table
                best = (total, i, d, p, rep)

        def flush():
            nonlocal pending, drafts, programs, index
            if pool is None:
                take(simulate(drafts, programs, index))
            else:
                if pending is not None:
                    take(pending.result())
                pending = pool.submit(simulate, drafts, programs, index)
            drafts, programs, index = [], [], []

        pruned = 0
        try:
            for n_done, i in enumerate(order):
                i = int(i)
                # strictly above the best total (float32 cycles; a margin for its rounding): cannot win
                if bound is not None and best is not None and bound[i] > best[0] * (1 + 1e-6) + 1.0:
                    pruned = len(table) - n_done
                    break
                d = table[i]
                p, = measurer.lower_each(op, [d], backend, shapes, opts, lower_fn)
                if isinstance(p, PimCompileError):
                    errors.append(p)
                    continue
                size = int(np.prod(np.shape(p.commands.op)))
                if drafts and (records + size > max_records or len(drafts) >= max_batch):
                    flush()
                    records = 0
                drafts.append(d)
                programs.append(p)
                index.append(i)
                records += size
                if bound is not None and best is None and pending is None and len(drafts) >= n_first:
                    take(simulate(drafts, programs, index))       # a best to prune against, now
                    drafts, programs, index, records = [], [], [], 0
            if drafts:
                flush()
            if pending is not None:
                take(pending.result())
        finally:
            if pool is not None:
                pool.shutdown(wait=True)
        if best is None:
            return None
        return Choice(best[2], best[3], best[4], float("nan"), simulated, len(table), self.name,
                      failed=len(errors), failure=first_message(errors), pruned=pruned)


@dataclass
class Evolutionary(Strategy):
    """ATiM's balanced evolutionary search (module docstring): the best draft
    found within `trials` simulations; a draft that does not lower is
    skipped and costs no trial.  seed: the RNG's.  balanced: ATiM's balance
    of rfactor and complete reductions early on.  per_round: drafts
    simulated per round.

    The genome of a draft is its row of the DraftTable; a mutation changes
    one column (one set's groups / cores / mapping, or one knob) by jumping
    to a draft that agrees on every other column."""
    trials: int = 64
    seed: int = 0
    balanced: bool = True
    per_round: int = 8
    name = "evolutionary"

    def __post_init__(self):
        if not is_int(self.trials) or self.trials < 1:
            raise ValueError(f"evolutionary search needs trials >= 1, got {self.trials!r}")

    @property
    def effort(self) -> int:
        return self.trials

    def search(self, task: Task, measurer: Measurer, database: Database | None = None) -> Choice | None:
        op, table, backend, shapes, opts = task.op, task.table, task.backend, task.shapes, task.lower_options
        trials, balanced, per_round, pred = self.trials, self.balanced, self.per_round, task.predicted
        rng = np.random.default_rng(self.seed)
        n = len(table)
        genes = _gene_matrix(table)
        neighbours = _neighbour_index(genes)
        rfactor = np.asarray(table.reduction) != 0              # "complete" is code 0
        classes = (np.flatnonzero(rfactor), np.flatnonzero(~rfactor))
        measured: dict[int, float] = {}
        failed: dict[int, Any] = {}                    # draft -> its PimCompileError (or None)
        history = []
        explore_until = int(0.4 * min(trials, n))      # ε reaches 0.05 within the trials that can run
        programs: dict[int, Any] = {}
        reports: dict[int, Any] = {}
        while len(measured) < min(trials, n - len(failed)):
            done = len(measured)
            early = done < explore_until
            eps = 0.5 - (0.5 - 0.05) * done / max(1, explore_until) if (balanced and early) else 0.05
            parents = _parents(measured, rfactor, rng, balanced and early)
            split = balanced and early and rfactor.any() and (~rfactor).any()
            cands = set()
            for _ in range(4 * per_round):
                if not parents or rng.random() < eps:
                    if split:      # early, the strategy first: a space with few rfactor drafts
                        pool = classes[int(rng.integers(2))]       # would otherwise start without any
                        cands.add(int(pool[int(rng.integers(len(pool)))]))
                    else:
                        cands.add(int(rng.integers(n)))
                else:
                    p = parents[int(rng.integers(len(parents)))]
                    col = int(rng.integers(genes.shape[1]))
                    group = neighbours[col](p)
                    cands.add(int(group[int(rng.integers(len(group)))]))
            cands = [c for c in cands if c not in measured and c not in failed]
            if not cands:
                cands = [int(c) for c in rng.permutation(n)
                         if int(c) not in measured and int(c) not in failed][:per_round]
            take = min(per_round, trials - done)
            cands = sorted(cands, key=lambda c: pred[c])
            if split:      # the round measures the best predicted of each strategy alike
                by_class = [[c for c in cands if rfactor[c]], [c for c in cands if not rfactor[c]]]
                cands = [c for pair in itertools.zip_longest(*by_class) for c in pair if c is not None]
            cands = cands[:take]
            progs, totals, report = measurer.simulate(op, [table[c] for c in cands], backend, shapes,
                                                      opts, lower_fn=task.lower_fn)
            for j, (c, p, t) in enumerate(zip(cands, progs, totals)):
                if not np.isfinite(t):                   # did not lower
                    failed[c] = p if isinstance(p, PimCompileError) else None
                    continue
                measured[c] = float(t)
                programs[c] = p
                reports[c] = partial(report, j)
                history.append(min(measured.values()))
        if not measured:
            return None
        best = min(measured, key=measured.get)
        return Choice(table[best], programs[best], reports[best](), float(pred[best]),
                      len(measured), n, self.name, history=history, failed=len(failed),
                      failure=first_message(failed.values()))


def _parents(measured: dict, rfactor: np.ndarray, rng, balanced: bool, k: int = 8) -> list[int]:
    """Top-k measured drafts; balanced: half with and half without rfactor."""
    if not measured:
        return []
    order = sorted(measured, key=measured.get)
    if not balanced:
        return order[:k]
    with_r = [i for i in order if rfactor[i]][: k // 2]
    without = [i for i in order if not rfactor[i]][: k // 2]
    return (with_r + without) or order[:k]


def _gene_matrix(table: DraftTable) -> np.ndarray:
    """[n, genes] int matrix: per set (groups, cores, rep) packed, then knobs."""
    cols = [table.groups * 100000 + table.cores * 100 + table.reps, table.lane[:, None]]
    cols += [np.asarray(table.column(c))[:, None] for c in KNOB_COLUMNS]
    return np.concatenate(cols, axis=1)


def _neighbour_index(genes: np.ndarray) -> list:
    """Per gene column, a function: draft -> the drafts that agree with it on
    every other gene (vectorised grouping with np.unique)."""
    out = []
    for col in range(genes.shape[1]):
        rest = np.delete(genes, col, axis=1)
        _, inverse = np.unique(rest, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        order = np.argsort(inverse, kind="stable")
        bounds = np.searchsorted(inverse[order], np.arange(inverse.max() + 2))

        def members(i, inverse=inverse, order=order, bounds=bounds):
            g = inverse[i]
            return order[bounds[g]:bounds[g + 1]]
        out.append(members)
    return out


# --------------------------------------------------------------------------
# what a search's pick is checked against
# --------------------------------------------------------------------------
def with_extras(choice: Choice | None, task: Task, measurer: Measurer, mode: str) -> Choice | None:
    """`choice` or the fastest of the family's own fixed mappings
    (`Family.extra_drafts`: Newton's PIMFlow packed mapping), whichever
    simulates in fewer cycles (a tie keeps `choice`).  Every mode simulates
    all of them: the cost model has not learnt them, so no prediction may
    rank them out.  Not for a block lowering (`lower_fn` other than
    `lower`), whose drafts are its first op's.  mode: a Choice's mode when
    only an extra lowers."""
    op, backend, shapes, opts = task.op, task.backend, task.shapes, task.lower_options
    fn = family_of(backend).extra_drafts if has_family(backend) else None
    if fn is None or task.lower_fn is not lower:
        return choice
    extras = [d for d in fn(op, backend, shapes, opts) if choice is None or d != choice.draft]
    if not extras:
        return choice
    best = measurer.fastest(op, extras, backend, shapes, opts, task.lower_fn)
    if best is None:
        return choice
    j, total, program, report, count = best
    if choice is not None and float(choice.report.total_cycles) <= total:
        return replace(choice, simulated=choice.simulated + count)
    if choice is None:
        return Choice(extras[j], program, report, float("nan"), count, len(task.table), mode)
    return replace(choice, draft=extras[j], program=program, report=report,
                   predicted_cycles=float("nan"), simulated=choice.simulated + count)


def against_baseline(choice: Choice | None, task: Task, measurer: Measurer, space: int,
                     include: bool = True) -> Choice | None:
    """`choice` (a search's pick, or None) or the backend's baseline mapping,
    whichever simulates in fewer cycles (a tie keeps `choice`), with
    Choice.baseline set.  `choice` comes back unchanged when `include` is
    off (the tuner's include_baseline), the backend has no baseline for the
    op, or the baseline does not lower.  The baseline is
    simulated alone (one more in `simulated`, not a trial of the search)
    unless it is the pick itself."""
    op, backend, shapes, opts = task.op, task.backend, task.shapes, task.lower_options
    base = baseline(op, backend) if include else None
    if base is None:
        return choice
    if choice is not None and choice.draft == base:
        return replace(choice, baseline=choice.report)
    program, = measurer.lower_each(op, [base], backend, shapes, opts, task.lower_fn)
    if isinstance(program, PimCompileError):
        return choice
    _, totals, report = measurer.simulate(op, [base], backend, shapes, opts, [program])
    rep = report(0)
    if choice is not None and float(choice.report.total_cycles) <= float(totals[0]):
        return replace(choice, simulated=choice.simulated + 1, baseline=rep)
    predicted = task.predict_draft(base)
    if choice is None:
        return Choice(base, program, rep, predicted, 1, space, "evolutionary", baseline=rep)
    return replace(choice, draft=base, program=program, report=rep, predicted_cycles=predicted,
                   simulated=choice.simulated + 1, baseline=rep)


STRATEGIES = {"predict": TopK, "exhaustive": Exhaustive, "evolutionary": Evolutionary}
"""Tuner mode name -> strategy class (`Tuner(mode=...)`)."""

__all__ = ["Choice", "Task", "Measurer", "Database", "Strategy", "TopK", "Exhaustive", "Evolutionary",
           "with_extras", "against_baseline", "first_message", "STRATEGIES"]
