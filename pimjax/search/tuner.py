"""The tuner: pick the fastest draft of an op, by simulated cycles.

Modes:

* ``"predict"`` (default) — DCC §IV-D: predict every draft with the learned
  cost model, lower and simulate the top-k (default 8), keep the fastest.
  Spaces above ``threshold`` drafts use the evolutionary search instead.
* ``"exhaustive"`` — lower and simulate every draft (the ground truth the
  predictor is judged against).
* ``"evolutionary"`` — ATiM §5.2.3's balanced evolutionary search: a
  population of drafts mutated one column at a time, the cost model ranking
  candidates, each round's best simulated; for the first 40 % of the trials
  the parents are drawn equally from drafts with and without a partial
  (rfactor) reduction, so are the uniform draws and the drafts each round
  measures (the best predicted of each strategy in turn), and ε decays
  linearly from 0.5 to 0.05 (ε-greedy: that share of each round's
  candidates is drawn at random).

`choose` is two halves, which `pim_jit`'s stages call apart: `propose`
(partition and predict: the draft table, the cost model's cycles of every
draft and the predicted best -- no lowering, no simulation; `Lowered`) and
`verify` (lower and simulate the candidates above, keep the fastest;
`Compiled`).  `choose(...) == verify(propose(...))`.

A draft whose lowering raises PimCompileError is skipped in every mode (the
resource verifier is an estimate: a draft near a capacity limit can pass it
and still not fit); `choose` returns None only when no draft lowers.  In
predict mode the backend's baseline mapping is simulated too, above
`threshold` as well, so the pick is never slower than the baseline.

Results are cached by (op signature, shapes, dtypes, backend, options) in
memory and, when a path is given, in a JSON file (a corrupted file is
reported with a warning and rebuilt, never a crash).
"""
from __future__ import annotations

import itertools
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import numpy as np

from ..errors import PimCompileError
from ..hw.core import Backend, is_int
from ..lower import lower
from ..partition import drafts as make_drafts
from ..backends import baseline, family_of, has_family, own_time_model
from ..partition.draft import Draft
from ..partition.table import DraftTable
from ..sim.append import append_factor, charge
from ..sim.cycles import cycles, cycles_batch, cycles_pooled, report_at
from ..trace.ir import PimOp
from .cache import TuneCache, cache_key, draft_from_dict, draft_to_dict


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

# --------------------------------------------------------------------------
# the tuner
# --------------------------------------------------------------------------
@dataclass
class Choice:
    """The tuner's pick for one op.

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


@dataclass
class Proposal:
    """`Tuner.propose`'s answer for one op: what `verify` needs, and the
    predicted figures (no program lowered, nothing simulated).

    draft / predicted_cycles: the predicted best draft and its predicted
    cycles (nan when none: the exhaustive tuner predicts nothing, a cache
    entry may hold no prediction).  table / predicted: the op's drafts and
    the predicted cycles of each (None when a cache entry answered, or in
    exhaustive mode for `predicted`).  lower_fn: `choose`'s (None: `lower`).
    space: drafts in the op's space.
    predicted_sigma / extrapolating / beyond: how far to trust
    predicted_cycles (`Predictor.predict_full` of the predicted best): the
    model's sigma of log-cycles (a relative uncertainty: the ensemble's
    spread widened by its out-of-sample floor), whether the
    draft's features leave the model's training range, and which ones (nan
    / None / () when there is no prediction or the model cannot tell).
    mode: the search `verify` runs ("predict", "evolutionary",
    "exhaustive"; a cache entry's mode).  cached: answered by the cache.
    append: {value id: `sim.append.Append`} of the resident operands that
    grow by appending (a KV cache): `verify` charges each call the appended
    rows' share of their placement (`sim.append`), after the draft is
    chosen on the steady state.
    """
    op: PimOp = field(repr=False)
    backend: Backend = field(repr=False)
    shapes: dict = field(repr=False)
    dtypes: dict | None = field(repr=False)
    lower_fn: Any = field(repr=False)
    keep: Any = field(repr=False)
    tag: str
    lower_options: dict
    key: str
    draft: Draft | None = None
    predicted_cycles: float = float("nan")
    table: Any = field(default=None, repr=False)
    predicted: Any = field(default=None, repr=False)
    space: int = 0
    predicted_sigma: float = float("nan")
    extrapolating: bool | None = None
    beyond: tuple = ()
    mode: str = ""
    cached: bool = False
    append: dict = field(default_factory=dict)


def _with_append(choice: "Choice | None", p: Proposal) -> "Choice | None":
    """`choice` with `p.append` charged to its report (`sim.append`); the
    baseline's report (its program is not kept) at the chosen program's
    share of the placement."""
    if choice is None or not p.append:
        return choice
    tck = float(p.backend.timing.tCK)
    factor = append_factor(choice.program, p.append, p.shapes)
    rep, cyc = charge(choice.report, factor, tck)
    base, _ = charge(choice.baseline, factor, tck)
    return replace(choice, report=rep, baseline=base, append_cycles=cyc)


def _first_message(errors) -> str:
    """The first lowering error's message ("" when none): `Choice.failure`."""
    return next((str(e) for e in errors if e is not None), "")


class Tuner:
    """Chooses drafts (see module docstring).

    mode: "predict" | "exhaustive" | "evolutionary".  top_k: drafts simulated
    in predict mode.  model: a CostModel (default: the shipped weights of the
    backend).  cache: a TuneCache or a JSON path or None (memory only).
    trials: simulations the evolutionary search may spend.  threshold:
    spaces larger than this use the evolutionary search in predict mode.
    include_baseline: predict mode also simulates the backend's baseline
    mapping (above `threshold` too), so a poor prediction or a short
    search never picks worse than the baseline.  The "evolutionary" mode
    itself does not: it is the search alone, as ATiM measures it.
    label_store: None (default) or a `costmodel.online.LabelStore`: opt-in
    online refinement (DCC §IV-D) -- the features and simulated cycles of
    every draft predict mode's top-k simulates are appended to it, for
    `costmodel.online.refine` to fine-tune a copy of the model on.
    """

    def __init__(self, mode: str = "predict", top_k: int = 8, model=None, cache=None,
                 trials: int = 64, threshold: int = 200_000, seed: int = 0, balanced: bool = True,
                 include_baseline: bool = True, label_store=None):
        if mode not in ("predict", "exhaustive", "evolutionary"):
            raise ValueError(f"tuner mode {mode!r} not in ('predict', 'exhaustive', 'evolutionary')")
        for name, value in (("top_k", top_k), ("trials", trials), ("threshold", threshold)):
            if not is_int(value) or value < 1:
                raise ValueError(f"Tuner {name} must be a positive int, got {value!r}")
        self.mode, self.top_k, self.trials, self.threshold = mode, top_k, trials, threshold
        self.seed, self.balanced, self.include_baseline = seed, balanced, include_baseline
        self.label_store = label_store
        self._models: dict[str, Any] = {}
        self._model = model
        # {(cache key, mode, threshold): (table, predicted cycles, mode)} of the latest predicted op spaces: a layer's
        # ops of one signature (LLaMA's q / k / v projections) are proposed together, before any of
        # them is verified and cached, and would each generate and predict the same space
        self._spaces: dict[str, tuple] = {}
        self.cache = cache if isinstance(cache, TuneCache) else TuneCache(cache)

    # -- model ---------------------------------------------------------------
    def model_for(self, backend: Backend):
        if self._model is not None:
            trained = getattr(self._model, "meta", {}).get("backend")
            if trained not in (None, backend.family) and not getattr(self, "_warned", False):
                self._warned = True
                warnings.warn(f"the tuner's cost model was trained for {trained}, not {backend.name}: its "
                              "ranking of these drafts means little", RuntimeWarning, stacklevel=3)
            return self._model
        # one shipped model per backend family, on the backend's own features (the hardware vector),
        # so a user-defined backend of a family ranks with it
        if backend.family not in self._models:
            from ..costmodel.predictor import load_default
            self._models[backend.family] = load_default(backend.family)
        return self._models[backend.family]

    def model_source(self, backend: Backend) -> str:
        """Which cost model ranks this backend's drafts, in words (for the
        report): the one passed in, or the shipped model of the backend's
        family on the backend's own features (a user-defined backend has no
        model of its own); exhaustive tuning simulates every draft instead."""
        if self.mode == "exhaustive":
            return "none: every draft simulated (exhaustive)"
        if self._model is not None:
            trained = getattr(self._model, "meta", {}).get("backend")
            return f"the model passed to the Tuner (trained for {trained})" if trained else \
                "the model passed to the Tuner"
        own = "" if backend.name == backend.family else \
            f" on {backend.name}'s own features (no model is trained for {backend.name})"
        return f"the {backend.family} family's shipped model{own}; top {self.top_k} simulated"

    def predict(self, op: PimOp, table: DraftTable, backend: Backend, shapes: dict,
                matrix: int | None = None) -> np.ndarray:
        """Predicted cycles of every draft of `table` ([n]).  matrix: the
        lowering option of that name (the operand kept in the banks), which
        the features must describe as the lowering will run it."""
        from ..costmodel.features import features_table
        return np.asarray(self.model_for(backend).predict(features_table(op, table, backend, shapes, matrix=matrix)))

    def _predict_table(self, op: PimOp, table: DraftTable, backend: Backend, shapes: dict,
                       lower_options: dict) -> np.ndarray:
        """`predict` with the lowering options the features must know (`matrix`), passed only
        when set: a subclass's `predict(op, table, backend, shapes)` keeps working."""
        matrix = lower_options.get("matrix")
        if matrix is None:
            return self.predict(op, table, backend, shapes)
        return self.predict(op, table, backend, shapes, matrix=matrix)

    def _predict_one(self, op: PimOp, draft, backend: Backend, shapes: dict, matrix: int | None = None) -> float:
        """Predicted cycles of one draft outside the table (the baseline)."""
        from ..costmodel.features import features
        return float(np.asarray(self.model_for(backend).predict(
            features(op, draft, backend, shapes, matrix=matrix)[None]))[0])

    # -- choosing: predict, then verify ----------------------------------------
    def choose(self, op: PimOp, backend: Backend, shapes: dict, dtypes: dict | None = None,
               lower_fn=None, keep=None, tag: str = "", **lower_options) -> Choice | None:
        """The fastest draft of `op` on `backend` (None when it has none):
        `verify(propose(...))`.

        lower_fn(op, draft, backend, shapes, **options) -> Program replaces
        `lower` (e.g. a multi-op block lowered from the drafts of its first
        op); keep(table) -> bool mask restricts the drafts it accepts; tag
        distinguishes such uses in the cache."""
        return self.verify(self.propose(op, backend, shapes, dtypes, lower_fn, keep, tag, **lower_options))

    def propose(self, op: PimOp, backend: Backend, shapes: dict, dtypes: dict | None = None,
                lower_fn=None, keep=None, tag: str = "", **lower_options) -> Proposal | None:
        """The predict half of `choose`: the op's drafts and the cost model's
        cycles for each (none in exhaustive mode), the predicted best, or a
        trusted cache entry; it lowers no program and simulates nothing.
        None when the op has no draft (after `keep`).  Arguments as `choose`."""
        key = cache_key(op, shapes, backend, dtypes, {**lower_options, "#tag": tag})
        base = Proposal(op, backend, shapes, dtypes, lower_fn, keep, tag, dict(lower_options), key)
        hit = self.cache.get(key)
        if hit is not None and self._trusts(hit):
            try:
                draft = draft_from_dict(hit["draft"])
            except Exception:  # noqa: BLE001 - unreadable here: `verify` warns, drops it and re-tunes
                pass
            else:
                predicted = hit.get("predicted")
                return replace(base, draft=draft, predicted_cycles=float("nan") if predicted is None else predicted,
                               space=int(hit.get("space", 0)), mode=hit.get("mode", self.mode), cached=True)
        return self._predict_space(base)

    def _predict_space(self, proposal: Proposal) -> Proposal | None:
        """`proposal` with the op's draft table, each draft's predicted cycles
        and the predicted best (None when the table is empty)."""
        # the key covers the op's signature, shapes, dtypes, backend and options: the same space
        # and predictions (a `keep` mask is a caller's function: not assumed equal, not reused)
        known = self._spaces.get((proposal.key, self.mode, self.threshold)) if proposal.keep is None else None
        table, pred, mode = known if known is not None else self._space(proposal)
        if table is None:
            return None
        if pred is None:                               # exhaustive: the ground truth, no prediction
            return replace(proposal, table=table, space=len(table), mode=mode)
        best = int(np.argsort(pred, kind="stable")[0])
        trust = self._trust(proposal.op, table[best], proposal.backend, proposal.shapes,
                            proposal.lower_options.get("matrix"))
        return replace(proposal, table=table, predicted=pred, draft=table[best],
                       predicted_cycles=float(pred[best]), space=len(table), mode=mode, **trust)

    def _space(self, proposal: Proposal) -> tuple:
        """(draft table, predicted cycles or None (exhaustive), search mode) of
        an op, remembered by its key; (None, None, "") when it has no draft."""
        op, backend, shapes = proposal.op, proposal.backend, proposal.shapes
        table = make_drafts(op, backend, shapes=shapes)
        if proposal.keep is not None and len(table):
            table = table.take(np.flatnonzero(proposal.keep(table)))
        if len(table) == 0:
            return None, None, ""
        mode = self.mode
        if mode == "predict" and len(table) > self.threshold:
            mode = "evolutionary"
        pred = None if self.mode == "exhaustive" else \
            self._predict_table(op, table, backend, shapes, proposal.lower_options)
        if proposal.keep is None:
            if len(self._spaces) >= self.SPACES_KEPT:
                self._spaces.pop(next(iter(self._spaces)))
            self._spaces[(proposal.key, self.mode, self.threshold)] = (table, pred, mode)
        return table, pred, mode

    SPACES_KEPT = 32
    """Predicted op spaces a Tuner keeps (`_predict_space`), the latest."""

    def _trust(self, op: PimOp, draft, backend: Backend, shapes: dict, matrix: int | None = None) -> dict:
        """The Proposal's predicted_sigma / extrapolating / beyond of one draft
        (`Predictor.predict_full`; {} for a model without it), its features
        of the placement the lowering runs (`matrix`)."""
        model = self.model_for(backend)
        if not hasattr(model, "predict_full"):
            return {}
        from ..costmodel.features import features
        full = model.predict_full(features(op, draft, backend, shapes, matrix=matrix)[None])
        return {"predicted_sigma": float(full["sigma"][0]), "extrapolating": bool(full["extrapolating"][0]),
                "beyond": tuple(full["beyond"][0])}

    def verify(self, proposal: Proposal | None) -> Choice | None:
        """The verify half of `choose`: lower and simulate the candidates of
        `proposal` (predict mode: its best predicted top_k and the baseline;
        the evolutionary search; exhaustive: every draft) and keep the
        fastest by simulated cycles; a cached choice is lowered and
        simulated alone.  The cache is read again here (an entry another op
        put since `propose` answers), and the choice is put in it.  None
        when `proposal` is None or no draft lowers."""
        if proposal is None:
            return None
        p = proposal
        op, backend, shapes, lower_options = p.op, p.backend, p.shapes, p.lower_options
        lower_fn = p.lower_fn or lower
        hit = self.cache.get(p.key)
        if hit is not None and self._trusts(hit):
            try:
                draft = draft_from_dict(hit["draft"])
                program = lower_fn(op, draft, backend, shapes, **lower_options)
            except Exception as err:  # noqa: BLE001 - a stale entry (another version's draft): re-tune
                warnings.warn(f"tuning cache entry for {op.name} no longer lowers ({type(err).__name__}: "
                              f"{err}); tuning again", RuntimeWarning, stacklevel=3)
                self.cache.drop(p.key)
            else:
                predicted = hit.get("predicted")
                cached = Choice(draft, program, cycles_pooled(program, backend),
                                float("nan") if predicted is None else predicted,
                                0, hit.get("space", 0), hit.get("mode", self.mode), cached=True)
                checked, wrong = self._check_claim(hit, cached, op, backend, shapes, lower_options, lower_fn)
                if not wrong:
                    return _with_append(checked, p)
                warnings.warn(f"tuning cache entry for {op.name} is wrong ({wrong}); dropped, tuning again",
                              RuntimeWarning, stacklevel=3)
                self.cache.drop(p.key)
        if p.table is None:           # proposed from a cache entry that is gone or stale: predict now
            p = self._predict_space(p)
            if p is None:
                return None
        table, pred = p.table, p.predicted
        if self.mode == "exhaustive":
            choice = self._exhaustive(op, table, backend, shapes, lower_options, lower_fn)
        elif self.mode == "evolutionary":
            choice = self.evolutionary(op, table, backend, shapes, lower_options, lower_fn=lower_fn, pred=pred)
        elif len(table) > self.threshold:
            # predict mode's promise (never slower than the baseline) holds for large spaces too
            choice = self._against_baseline(
                self.evolutionary(op, table, backend, shapes, lower_options, lower_fn=lower_fn, pred=pred),
                op, backend, shapes, lower_options, lower_fn, len(table))
        else:
            choice = self._top_k(op, table, backend, shapes, lower_options, lower_fn, pred=pred)
        choice = self._with_extras(choice, op, backend, shapes, lower_options, lower_fn, len(table))
        if choice is None:            # no draft lowers: the op stays on the host (not cached)
            return None
        predicted = choice.predicted_cycles          # NaN (no prediction) is stored as null: strict JSON
        self.cache.put(p.key, {"draft": draft_to_dict(choice.draft), "simulated": int(choice.simulated),
                               "predicted": None if np.isnan(predicted) else predicted,
                               "cycles": float(choice.report.total_cycles), "space": choice.space,
                               "mode": choice.mode, "failed": int(choice.failed)})
        return _with_append(choice, p)

    def _check_claim(self, hit: dict, cached: Choice, op, backend, shapes, lower_options,
                     lower_fn) -> tuple[Choice, str]:
        """(the cached choice with its baseline, '') when what the entry claims
        holds, else (cached, what is wrong).  A cache file is data anyone
        can edit: its cycles must be what the draft simulates to now (to
        1e-3: the engines are float32), and its draft no slower than the
        backend's baseline mapping (simulated here; the report needs it
        anyway), which every mode's search beats or keeps."""
        sim = float(cached.report.total_cycles)
        claimed = hit.get("cycles")
        if not isinstance(claimed, (int, float)) or isinstance(claimed, bool):
            return cached, f"its cycles {claimed!r} are not a number"
        if not abs(float(claimed) - sim) <= 1e-3 * max(abs(sim), 1.0):
            return cached, f"it claims {float(claimed):,.6g} cycles, its draft simulates to {sim:,.6g}"
        checked = self._against_baseline(cached, op, backend, shapes, lower_options, lower_fn,
                                         cached.space)
        if checked is not None and checked.draft != cached.draft:
            base = float(checked.report.total_cycles)
            return cached, (f"its {cached.mode} choice simulates to {sim:,.6g} cycles, slower than the "
                            f"baseline mapping's {base:,.6g}")
        return replace(checked, simulated=0), ""

    def _trusts(self, hit: dict) -> bool:
        """Whether a cached choice is at least as searched as this tuner would
        search: an exhaustive one always; otherwise one of the same mode that
        simulated as many drafts as this tuner's top_k / trials (capped by
        the drafts of the space that lower).  A 1-trial evolutionary pick in
        a shared file does not answer a default tuner, nor a predicted one an
        exhaustive tuner."""
        mode, space = hit.get("mode"), int(hit.get("space", 0))
        if mode == "exhaustive":
            return True
        own = self.mode
        if own == "predict" and space > self.threshold:      # predict mode searches large spaces
            own = "evolutionary"
        if own == "exhaustive" or mode != own:
            return False
        effort = self.top_k if own == "predict" else self.trials
        # a search that ran out of drafts that lower searched all it could
        return int(hit.get("simulated", 0)) >= min(effort, space - int(hit.get("failed", 0)))

    @staticmethod
    def _lower_each(op, drafts, backend, shapes, lower_options, lower_fn=lower) -> list:
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

    def _simulate(self, op, drafts, backend, shapes, lower_options, programs=None, lower_fn=lower):
        """Lower (with `lower_fn`) and simulate `drafts` (batched; `programs`:
        already lowered): (programs, totals [len(drafts)] in cycles,
        report(i) -> CycleReport of programs[i]).  A draft that does not
        lower has its PimCompileError for program and total +inf."""
        if programs is None:
            programs = self._lower_each(op, drafts, backend, shapes, lower_options, lower_fn)
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

    @staticmethod
    def _pick(drafts, programs, totals, report, predicted, mode, space) -> Choice | None:
        """The fastest of the simulated drafts (None when none lowered:
        every total +inf); the others count as failed."""
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
                      failure=_first_message(errors))

    def _first_lowering(self, op, table, order, k, backend, shapes, lower_options, lower_fn):
        """The first `k` drafts of `table` in `order` that lower: (their
        rows, their programs, the PimCompileErrors of those skipped before
        them).  Lowers no more than it keeps while none fails."""
        rows, programs, errors, pos = [], [], [], 0
        while len(rows) < k and pos < len(order):
            chunk = [int(i) for i in order[pos: pos + k - len(rows)]]
            pos += len(chunk)
            for i, p in zip(chunk, self._lower_each(op, [table[i] for i in chunk], backend, shapes,
                                                    lower_options, lower_fn)):
                if isinstance(p, PimCompileError):
                    errors.append(p)
                else:
                    rows.append(i)
                    programs.append(p)
        return rows, programs, errors

    def _top_k(self, op, table, backend, shapes, lower_options, lower_fn=lower, pred=None) -> Choice | None:
        """The fastest simulated of the best predicted top_k drafts that lower
        (and the baseline); `pred`: the drafts' predicted cycles, when known."""
        matrix = lower_options.get("matrix")
        pred = self._predict_table(op, table, backend, shapes, lower_options) if pred is None else pred
        # the best predicted top_k that lower: a draft that does not fit gives its place to the next
        rows, programs, errors = self._first_lowering(op, table, np.argsort(pred, kind="stable"), self.top_k,
                                                      backend, shapes, lower_options, lower_fn)
        drafts, predicted = [table[i] for i in rows], [float(pred[i]) for i in rows]
        base = baseline(op, backend) if self.include_baseline else None
        if base is not None and base not in drafts:
            # the baseline may lie outside the pruned space (or a block's
            # `keep`); it joins the candidates when it lowers
            program, = self._lower_each(op, [base], backend, shapes, lower_options, lower_fn)
            if not isinstance(program, PimCompileError):
                drafts.append(base)
                programs.append(program)
                predicted.append(self._predict_one(op, base, backend, shapes, matrix=matrix))
        if not drafts:
            return None
        programs, totals, report = self._simulate(op, drafts, backend, shapes, lower_options, programs)
        if self.label_store is not None:
            self._store_labels(op, drafts, totals, backend, shapes, lower_options.get("matrix"))
        choice = self._pick(drafts, programs, totals, report, predicted, "predict", len(table))
        if choice is None:
            return None
        choice = replace(choice, failed=len(errors), failure=_first_message(errors))
        # the baseline's report from the same batch: the api's speedup over the
        # baseline mapping needs it, and timing it alone would compile another scan
        return choice if base not in drafts else replace(choice, baseline=report(drafts.index(base)))

    def _store_labels(self, op, drafts, totals, backend: Backend, shapes: dict, matrix: int | None = None) -> None:
        """Append the simulated drafts' features and cycles to the label store
        (online refinement; the drafts of one op, backend and placement form a
        group); the features of the placement the programs ran (`matrix`)."""
        from ..costmodel.features import features
        from .cache import backend_fingerprint, op_signature
        ok = [i for i, t in enumerate(totals) if np.isfinite(t)]
        if not ok:
            return
        X = np.stack([features(op, drafts[i], backend, shapes, matrix=matrix) for i in ok])
        group = f"{op_signature(op)}|{backend_fingerprint(backend)}" + ("" if matrix is None else f"|matrix={matrix}")
        self.label_store.append(backend.family, group, X, np.asarray(totals, np.float64)[ok])

    def _exhaustive(self, op, table, backend, shapes, lower_options, lower_fn=lower) -> Choice | None:
        """Every draft of `table` that can win lowered and simulated, the
        fastest kept (the first of equals, in table order).  Streamed: drafts
        are lowered one at a time and simulated in batches of at most
        `EXHAUSTIVE_BATCH` drafts / `EXHAUSTIVE_RECORDS` records, and only the
        best program so far outlives its batch.  Keeping every program of a
        GEMV 20480 x 5120 search alive held 3.2 GB (Newton) to 13.5 GB
        (HBM-PIM) of records, and first-touching that memory (page faults)
        cost more than lowering and simulating it; a bounded batch reuses the
        same pages and the native engine's scratch table.  With
        `EXHAUSTIVE_PIPELINE` a batch is simulated on a worker thread while
        the next one is lowered (both run compiled code that releases the GIL
        for most of their time, as `costmodel.dataset.Labeller` does); at most
        two batches are alive.

        Branch and bound: where the backend's family gives a lower bound on
        each draft's simulated cycles (`Family.lower_bound`, from the table
        alone), drafts go in increasing order of their bound and the search
        stops at the first whose bound exceeds the best total simulated so
        far -- no later draft can win, so the pick is the exhaustive one
        (`Choice.pruned` counts the drafts it never lowered; `Choice.failed`
        counts lowering failures among the drafts it did lower)."""
        best = None                       # (total, table index, draft, program, report)
        errors, simulated = [], 0
        drafts, programs, index, records = [], [], [], 0
        pool = ThreadPoolExecutor(1) if EXHAUSTIVE_PIPELINE else None
        pending = None
        bound = self._lower_bound(op, table, backend, shapes, lower_options, lower_fn)
        order = range(len(table)) if bound is None else np.argsort(bound, kind="stable")

        def simulate(ds, ps, ix):
            _, totals, report = self._simulate(op, ds, backend, shapes, lower_options, ps)
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
                p, = self._lower_each(op, [d], backend, shapes, lower_options, lower_fn)
                if isinstance(p, PimCompileError):
                    errors.append(p)
                    continue
                size = int(np.prod(np.shape(p.commands.op)))
                if drafts and (records + size > EXHAUSTIVE_RECORDS or len(drafts) >= EXHAUSTIVE_BATCH):
                    flush()
                    records = 0
                drafts.append(d)
                programs.append(p)
                index.append(i)
                records += size
                if bound is not None and best is None and pending is None and len(drafts) >= EXHAUSTIVE_FIRST:
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
        return Choice(best[2], best[3], best[4], float("nan"), simulated, len(table), "exhaustive",
                      failed=len(errors), failure=_first_message(errors), pruned=pruned)

    def _lower_bound(self, op, table, backend, shapes, lower_options, lower_fn):
        """The family's lower bound on each draft's cycles ([n]) when
        `EXHAUSTIVE_BOUND` is on and the drafts are lowered by `lower` (a
        block lowering has its own costs), else None."""
        if not EXHAUSTIVE_BOUND or lower_fn is not lower or not has_family(backend):
            return None
        fn = family_of(backend).lower_bound
        return None if fn is None else fn(op, table, backend, shapes, lower_options)

    def _with_extras(self, choice, op, backend, shapes, lower_options, lower_fn, space) -> Choice | None:
        """`choice` or the fastest of the family's own fixed mappings
        (`Family.extra_drafts`: Newton's PIMFlow packed mapping), whichever
        simulates in fewer cycles (a tie keeps `choice`).  Every mode
        simulates all of them: the cost model has not learnt them, so no
        prediction may rank them out.  Not for a block lowering (`lower_fn`
        other than `lower`), whose drafts are its first op's."""
        fn = family_of(backend).extra_drafts if has_family(backend) else None
        if fn is None or lower_fn is not lower:
            return choice
        extras = [d for d in fn(op, backend, shapes, lower_options) if choice is None or d != choice.draft]
        if not extras:
            return choice
        programs, totals, report = self._simulate(op, extras, backend, shapes, lower_options, lower_fn=lower_fn)
        if not np.isfinite(totals).any():
            return choice
        j = int(np.argmin(totals))
        count = int(np.isfinite(totals).sum())
        if choice is not None and float(choice.report.total_cycles) <= float(totals[j]):
            return replace(choice, simulated=choice.simulated + count)
        if choice is None:
            return Choice(extras[j], programs[j], report(j), float("nan"), count, space, self.mode)
        return replace(choice, draft=extras[j], program=programs[j], report=report(j),
                       predicted_cycles=float("nan"), simulated=choice.simulated + count)

    def _against_baseline(self, choice, op, backend, shapes, lower_options, lower_fn, space) -> Choice | None:
        """`choice` (a search's pick, or None) or the backend's baseline
        mapping, whichever simulates in fewer cycles (a tie keeps `choice`),
        with Choice.baseline set.  `choice` comes back unchanged when
        include_baseline is off, the backend has no baseline for `op`, or
        the baseline does not lower.  The baseline is simulated alone (one
        more in `simulated`, not a trial of the search) unless it is the
        pick itself."""
        base = baseline(op, backend) if self.include_baseline else None
        if base is None:
            return choice
        if choice is not None and choice.draft == base:
            return replace(choice, baseline=choice.report)
        program, = self._lower_each(op, [base], backend, shapes, lower_options, lower_fn)
        if isinstance(program, PimCompileError):
            return choice
        _, totals, report = self._simulate(op, [base], backend, shapes, lower_options, [program])
        rep = report(0)
        if choice is not None and float(choice.report.total_cycles) <= float(totals[0]):
            return replace(choice, simulated=choice.simulated + 1, baseline=rep)
        predicted = self._predict_one(op, base, backend, shapes, matrix=lower_options.get("matrix"))
        if choice is None:
            return Choice(base, program, rep, predicted, 1, space, "evolutionary", baseline=rep)
        return replace(choice, draft=base, program=program, report=rep, predicted_cycles=predicted,
                       simulated=choice.simulated + 1, baseline=rep)

    # -- ATiM's balanced evolutionary search --------------------------------------
    def evolutionary(self, op, table, backend, shapes, lower_options=None, trials: int | None = None,
                     balanced: bool | None = None, per_round: int = 8, lower_fn=lower,
                     pred=None) -> Choice | None:
        """Best draft found within `trials` simulations (see module docstring),
        drafts lowered with `lower_fn`; None when no draft lowers.  A draft
        that does not lower is skipped and costs no trial.

        The genome of a draft is its row of the DraftTable; a mutation
        changes one column (one set's groups / cores / mapping, or one knob)
        by jumping to a draft that agrees on every other column.  pred: the
        drafts' predicted cycles when already known (`propose`)."""
        lower_options = lower_options or {}
        trials = self.trials if trials is None else trials
        if not is_int(trials) or trials < 1:
            raise ValueError(f"evolutionary search needs trials >= 1, got {trials!r}")
        balanced = self.balanced if balanced is None else balanced
        rng = np.random.default_rng(self.seed)
        n = len(table)
        pred = self._predict_table(op, table, backend, shapes, lower_options) if pred is None else pred
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
            parents = self._parents(measured, rfactor, rng, balanced and early)
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
            progs, totals, report = self._simulate(op, [table[c] for c in cands], backend, shapes,
                                                   lower_options, lower_fn=lower_fn)
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
                      len(measured), n, "evolutionary", history=history, failed=len(failed),
                      failure=_first_message(failed.values()))

    @staticmethod
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
    from ..partition.table import KNOB_COLUMNS
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
