"""The tuner: pick the fastest draft of an op, by simulated cycles.

`Tuner` composes the search strategies of `search.strategy` (`TopK`,
`Exhaustive`, `Evolutionary`), their one `Measurer` (lower + simulate) and
their one `Database` (tuning cache + label store) with the cost model:

* ``mode="predict"`` (default) -- DCC §IV-D: predict every draft with the
  learned cost model, lower and simulate the top-k (default 8) and the
  backend's baseline mapping, keep the fastest (`TopK`).  Spaces above
  ``threshold`` drafts use the evolutionary search instead, still checked
  against the baseline, so the pick is never slower than the baseline.
* ``mode="exhaustive"`` -- lower and simulate every draft that can win (the
  ground truth the predictor is judged against; `Exhaustive`, with the
  family's branch and bound).
* ``mode="evolutionary"`` -- ATiM §5.2.3's balanced evolutionary search
  alone (`Evolutionary`), as ATiM measures it.

`mode` is a name or a `Strategy` object.  In every mode the family's own
fixed mappings (`Family.extra_drafts`) are simulated too
(`strategy.with_extras`).

`choose` is two halves, which `pim_jit`'s stages call apart: `propose`
(partition and predict: the draft table, the cost model's cycles of every
draft and the predicted best -- no lowering, no simulation; `Lowered`) and
`verify` (lower and simulate the candidates above, keep the fastest;
`Compiled`).  `choose(...) == verify(propose(...))`.

Results are cached by (op signature, shapes, dtypes, backend, options) in
memory and, when a path is given, in a JSON file (a corrupted file is
reported with a warning and rebuilt, never a crash); a cached pick answers
only a tuner that would search no harder (`Tuner._trusts`), and only after
it simulates to what it claims, no slower than the baseline.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..errors import user_stacklevel
from ..hw.core import Backend, is_int
from ..lower import lower
from ..partition import drafts as make_drafts
from ..partition.draft import Draft
from ..partition.table import DraftTable
from ..sim.append import append_factor, charge
from ..sim.cycles import cycles_pooled
from ..trace.ir import PimOp
from .cache import cache_key, draft_from_dict
from .strategy import (
    STRATEGIES,
    Choice,
    Database,
    Evolutionary,
    Measurer,
    Strategy,
    Task,
    TopK,
    against_baseline,
    with_extras,
)


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


class Tuner:
    """Chooses drafts (see module docstring).

    mode: "predict" | "exhaustive" | "evolutionary", or a `Strategy` object
    (its `name` is the mode; a `TopK`'s k and include_baseline, an
    `Evolutionary`'s trials, seed and balanced replace the arguments of
    those names).  top_k: drafts simulated in predict mode.
    model: a CostModel (default: the shipped weights of the backend's
    family).  cache: a TuneCache or a JSON path or None (memory only).
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
    measurer: the `strategy.Measurer` every search lowers and simulates
    through (default: a plain one).
    """

    def __init__(self, mode: str | Strategy = "predict", top_k: int = 8, model=None, cache=None,
                 trials: int = 64, threshold: int = 200_000, seed: int = 0, balanced: bool = True,
                 include_baseline: bool = True, label_store=None, measurer: Measurer | None = None):
        name = mode.name if isinstance(mode, Strategy) else mode
        # a strategy object's own settings are the tuner's (the cache's trust, `model_source`, and the
        # callers that key on `top_k` / `trials` read them here)
        if isinstance(mode, TopK):
            top_k, include_baseline = mode.k, mode.include_baseline
        elif isinstance(mode, Evolutionary):
            trials, seed, balanced = mode.trials, mode.seed, mode.balanced
        if name not in STRATEGIES and not isinstance(mode, Strategy):
            raise ValueError(f"tuner mode {mode!r} not in {tuple(STRATEGIES)}")
        for arg, value in (("top_k", top_k), ("trials", trials), ("threshold", threshold)):
            if not is_int(value) or value < 1:
                raise ValueError(f"Tuner {arg} must be a positive int, got {value!r}")
        self.mode, self.top_k, self.trials, self.threshold = name, top_k, trials, threshold
        self.seed, self.balanced, self.include_baseline = seed, balanced, include_baseline
        # the mode's strategy, and the evolutionary search predict mode runs above `threshold`
        self.large = Evolutionary(trials=trials, seed=seed, balanced=balanced)
        self.strategy = mode if isinstance(mode, Strategy) else \
            TopK(k=top_k, include_baseline=include_baseline) if name == "predict" else \
            self.large if name == "evolutionary" else STRATEGIES[name]()
        self.measurer = measurer if measurer is not None else Measurer()
        self.database = Database(cache, label_store)
        self._models: dict[str, Any] = {}
        self._model = model
        # {(cache key, mode, threshold): (table, predicted cycles, mode)} of the latest predicted op spaces: a layer's
        # ops of one signature (LLaMA's q / k / v projections) are proposed together, before any of
        # them is verified and cached, and would each generate and predict the same space
        self._spaces: dict[str, tuple] = {}

    @property
    def cache(self):
        """The tuning cache (`cache.TuneCache`) of the tuner's database."""
        return self.database.cache

    @property
    def label_store(self):
        """The online label store of the tuner's database (None: off)."""
        return self.database.label_store

    # -- model ---------------------------------------------------------------
    def model_for(self, backend: Backend):
        from ..costmodel.configs import model_name
        name = model_name(backend)
        if self._model is not None:
            trained = getattr(self._model, "meta", {}).get("backend")
            if trained not in (None, name) and not getattr(self, "_warned", False):
                self._warned = True
                warnings.warn(f"the tuner's cost model was trained for {trained}, not {name}: its "
                              "ranking of these drafts means little", RuntimeWarning, stacklevel=user_stacklevel())
            return self._model
        # one model per backend family, on the backend's own features (the hardware vector), so a
        # user-defined backend of a family ranks with it; a configuration timed by a controller of
        # its own (DCC's forks) with its controller's model (`costmodel.configs`)
        if name not in self._models:
            from ..costmodel.train import load_for
            self._models[name] = load_for(name)
        return self._models[name]

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
        from ..costmodel.configs import model_name
        name = model_name(backend)
        if name != backend.family:
            return f"the {name} model (trained on its controller's labels); top {self.top_k} simulated"
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
        hit = self.database.get(key)
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
        hit = self.database.get(p.key)
        if hit is not None and self._trusts(hit):
            try:
                draft = draft_from_dict(hit["draft"])
                program = lower_fn(op, draft, backend, shapes, **lower_options)
            except Exception as err:  # noqa: BLE001 - a stale entry (another version's draft): re-tune
                warnings.warn(f"tuning cache entry for {op.name} no longer lowers ({type(err).__name__}: "
                              f"{err}); tuning again", RuntimeWarning, stacklevel=user_stacklevel())
                self.database.drop(p.key)
            else:
                predicted = hit.get("predicted")
                cached = Choice(draft, program, cycles_pooled(program, backend),
                                float("nan") if predicted is None else predicted,
                                0, hit.get("space", 0), hit.get("mode", self.mode), cached=True)
                checked, wrong = self._check_claim(hit, cached, op, backend, shapes, lower_options, lower_fn)
                if not wrong:
                    return _with_append(checked, p)
                warnings.warn(f"tuning cache entry for {op.name} is wrong ({wrong}); dropped, tuning again",
                              RuntimeWarning, stacklevel=user_stacklevel())
                self.database.drop(p.key)
        if p.table is None:           # proposed from a cache entry that is gone or stale: predict now
            p = self._predict_space(p)
            if p is None:
                return None
        task = self._task(op, p.table, backend, shapes, lower_options, lower_fn, p.predicted)
        strategy = self._strategy_for(len(p.table))
        choice = strategy.search(task, self.measurer, self.database)
        if strategy is not self.strategy:
            # predict mode's promise (never slower than the baseline) holds for large spaces too
            choice = against_baseline(choice, task, self.measurer, len(p.table), self.include_baseline)
        choice = with_extras(choice, task, self.measurer, self.mode)
        if choice is None:            # no draft lowers: the op stays on the host (not cached)
            return None
        self.database.put_choice(p.key, choice)
        return _with_append(choice, p)

    def _strategy_for(self, space: int) -> Strategy:
        """The strategy a space of `space` drafts gets: the mode's, but the
        evolutionary search for predict mode above `threshold`."""
        if self.mode == "predict" and space > self.threshold:
            return self.large
        return self.strategy

    def _task(self, op, table, backend, shapes, lower_options, lower_fn=lower, predicted=None) -> Task:
        """A `strategy.Task` of one op's table, the baseline predicted by this
        tuner's model when a strategy asks."""
        matrix = lower_options.get("matrix")
        return Task(op, table, backend, shapes, dict(lower_options), lower_fn, predicted,
                    lambda d: self._predict_one(op, d, backend, shapes, matrix=matrix))

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
        task = self._task(op, None, backend, shapes, lower_options, lower_fn)
        checked = against_baseline(cached, task, self.measurer, cached.space, self.include_baseline)
        if checked is not None and checked.draft != cached.draft:
            base = float(checked.report.total_cycles)
            return cached, (f"its {cached.mode} choice simulates to {sim:,.6g} cycles, slower than the "
                            f"baseline mapping's {base:,.6g}")
        return replace(checked, simulated=0), ""

    def _trusts(self, hit: dict) -> bool:
        """Whether a cached choice is at least as searched as this tuner would
        search: an exhaustive one always; otherwise one of the same mode that
        simulated as many drafts as the strategy this tuner would run spends
        (top_k / trials; capped by the drafts of the space that lower).  A
        1-trial evolutionary pick in a shared file does not answer a default
        tuner, nor a predicted one an exhaustive tuner."""
        mode, space = hit.get("mode"), int(hit.get("space", 0))
        if mode == "exhaustive":
            return True
        own = self._strategy_for(space)
        if own.effort is None or mode != own.name:
            return False
        # a search that ran out of drafts that lower searched all it could
        return int(hit.get("simulated", 0)) >= min(own.effort, space - int(hit.get("failed", 0)))

    # -- one strategy on a given table (tests, benchmarks) ----------------------------
    def run(self, strategy: Strategy, op: PimOp, table: DraftTable, backend: Backend, shapes: dict,
            lower_options: dict | None = None, lower_fn=lower, pred=None) -> Choice | None:
        """`strategy`'s pick among the drafts of `table` (None when none
        lowers), through this tuner's measurer and database; pred: the
        drafts' predicted cycles when known (else this tuner's model predicts
        them, unless the strategy is exhaustive)."""
        lower_options = lower_options or {}
        if pred is None and strategy.name != "exhaustive":
            pred = self._predict_table(op, table, backend, shapes, lower_options)
        task = self._task(op, table, backend, shapes, lower_options, lower_fn, pred)
        return strategy.search(task, self.measurer, self.database)

    def evolutionary(self, op, table, backend, shapes, lower_options=None, trials: int | None = None,
                     balanced: bool | None = None, per_round: int = 8, lower_fn=lower,
                     pred=None) -> Choice | None:
        """The balanced evolutionary search (`strategy.Evolutionary`) with this
        tuner's trials, seed and balance (or those given) on `table`."""
        search = Evolutionary(trials=self.trials if trials is None else trials, seed=self.seed,
                              balanced=self.balanced if balanced is None else balanced, per_round=per_round)
        return self.run(search, op, table, backend, shapes, lower_options, lower_fn, pred)
