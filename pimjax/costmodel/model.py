"""The learned cost model: a Flax NNX MLP over draft features predicting
log-cycles, trained with optax on MSE plus a pairwise ranking term.

`CostModel` follows TVM meta_schedule's protocol of exactly four methods:

* `update(features, labels, groups=None)` — fit, or continue fitting;
  `groups` ([n] ints) says which rows are drafts of the same op and shape,
  so ranking pairs never compare drafts of different ops;
* `predict(features) -> np.ndarray` — predicted cycles (not log);
* `save(path)` / `CostModel.load(path)` — msgpack
  (`flax.serialization.msgpack_serialize`) of the parameters, the feature
  / label normalisation and a JSON metadata string; never pickle.

Loss on a batch of `batch_groups` groups x `per_group` drafts (labels
y = log(cycles), standardised):

    MSE(pred, y) + rank_weight * sum_ij w_ij softplus(-(p_j - p_i) / tau) / sum w_ij

over pairs of one group with y_i < y_j - margin; w_ij = exp(-(y_i - min_g y)
/ temperature) emphasises pairs whose better draft is near the group's
best, which is what decides the argmin.

A residual model (`base="est_t_total"`, a closed-form estimate among the
features) learns log(cycles) - log(estimate) instead: the prediction is
the estimate times exp(network).  Where the estimate is exact (UPMEM,
`dpu.py`) the network only has to learn 0, and near-ties keep the
estimate's order instead of drowning in the network's percent-level error;
the ranking term compares the full predictions.

`predict` runs the network in numpy (no compile per batch size), with the
same arithmetic as the JAX forward used in training.
"""
from __future__ import annotations

import json
import time
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx, serialization

from ..hw.core import is_int
from .features import FEATURE_NAMES, F, is_time_estimate
from .predictor import FORMAT_VERSION, base_log, check_meta, feature_rows, member_arrays, member_logs, norm_ranges


class MLP(nnx.Module):
    """x [n, F] -> [n, n_out] (standardised log-cycles); GELU hidden layers."""

    def __init__(self, n_in: int, hidden: tuple[int, ...], rngs: nnx.Rngs, n_out: int = 1):
        sizes = (n_in,) + tuple(hidden)
        self.layers = nnx.List([nnx.Linear(a, b, rngs=rngs) for a, b in zip(sizes[:-1], sizes[1:])])
        self.out = nnx.Linear(sizes[-1], n_out, rngs=rngs)

    def __call__(self, x):
        for layer in self.layers:
            x = jax.nn.gelu(layer(x), approximate=True)
        return self.out(x)


class Ensemble(nnx.Module):
    """`members` MLPs with their own initialisations; x [n, F] -> [K, n, n_out].
    Averaging the members' log-cycles lowers the variance of the ranking."""

    def __init__(self, n_in: int, hidden: tuple[int, ...], members: int, seed: int, n_out: int = 1):
        self.members = nnx.List([MLP(n_in, hidden, nnx.Rngs(seed + 1000 * k), n_out) for k in range(members)])

    def __call__(self, x):
        return jnp.stack([m(x) for m in self.members])


PHASES = 4          # rearrangement, compute, readback, merge (sim.report.PHASES)


def check_positive_int(name: str, value) -> int:
    """`value` when it is an int >= 1, else ValueError naming `name`: a
    length of 0 or -5 steps would train nothing and still mark the model
    fitted (its weights then saved as if trained)."""
    if not is_int(value) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def check_seconds(value) -> float | None:
    """A training time cap in seconds: None (no cap) or a finite number > 0."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float, np.number))
                              or not np.isfinite(value) or value <= 0):
        raise ValueError(f"seconds must be None or a positive number, got {value!r}")
    return value


def check_labels(labels) -> np.ndarray:
    """Labels as float64 cycles, or ValueError unless every one is finite
    and > 0: their log is the target, and clamping a 0 or a negative count
    to 1e-9 cycles would teach the model a draft that takes no time."""
    y = np.asarray(labels, np.float64)
    bad = ~(np.isfinite(y) & (y > 0))
    if bad.any():
        raise ValueError(f"labels must be finite simulated cycles > 0; {int(bad.sum())} of {y.size} are not "
                         f"(first: {y.reshape(-1)[np.argmax(bad.reshape(-1))]!r})")
    return y


class CostModel:
    """Predicts cycles of drafts from `features.features_table` rows.

    hidden: MLP widths.  rank_weight / tau / margin / temperature: the
    ranking term (see module docstring).  base: None, or the feature name
    of a closed-form estimate the network corrects (a residual model).
    lr: Adam learning rate.
    steps / seconds: default training length of one `update` (whichever
    ends first).  seed: parameter init and batch sampling.  steps,
    members, batch_groups, per_group: ints >= 1; seed: int >= 0; seconds:
    None or > 0 (ValueError otherwise, not a 0-step "fitted" model).
    """

    def __init__(self, n_features: int = F, hidden: tuple[int, ...] = (128, 128, 128), *, seed: int = 0,
                 rank_weight: float = 10.0, tau: float = 0.02, margin: float = 0.01,
                 temperature: float = 0.1, lr: float = 2e-3, weight_decay: float = 1e-5,
                 steps: int = 4000, seconds: float | None = None, batch_groups: int = 32,
                 per_group: int = 16, heads: str = "total", phase_weight: float = 0.5, members: int = 1,
                 base: str | None = None, meta: dict | None = None, _abstract: bool = False):
        if heads not in ("total", "phases"):
            raise ValueError(f"heads must be 'total' or 'phases', got {heads!r}")
        if base is not None and (not is_time_estimate(base) or heads != "total" or int(n_features) != F):
            raise ValueError(f"base must be None or a closed-form time estimate among the features "
                             f"(est_t_*, of a heads='total' model over all {F} features), got base={base!r}, "
                             f"heads={heads!r}, n_features={n_features}")
        for name, value in (("steps", steps), ("members", members), ("batch_groups", batch_groups),
                            ("per_group", per_group)):
            check_positive_int(name, value)
        if not is_int(seed) or seed < 0:           # numpy's default_rng refuses negative seeds
            raise ValueError(f"seed must be a non-negative int, got {seed!r}")
        check_seconds(seconds)
        if not tau > 0 or not margin >= 0:         # tau divides the ranking term
            raise ValueError(f"the ranking term needs tau > 0 and margin >= 0, got tau={tau!r}, "
                             f"margin={margin!r}")
        self.n_features = int(n_features)
        self.hidden = tuple(int(h) for h in hidden)
        self.hp = dict(seed=int(seed), rank_weight=float(rank_weight), tau=float(tau), margin=float(margin),
                       temperature=float(temperature), lr=float(lr), weight_decay=float(weight_decay),
                       steps=int(steps), seconds=seconds, batch_groups=int(batch_groups),
                       per_group=int(per_group), heads=heads, phase_weight=float(phase_weight),
                       members=int(members), base=base)
        build = partial(Ensemble, self.n_features, self.hidden, int(members), int(seed),
                        PHASES if heads == "phases" else 1)
        # a loaded model gets its parameters from the file: an abstract net
        # skips the random initialisation (seconds of XLA compiles, cold)
        self.net = nnx.eval_shape(build) if _abstract else build()
        self.x_mean = np.zeros(self.n_features, np.float32)
        self.x_scale = np.ones(self.n_features, np.float32)
        self.y_mean, self.y_scale = 0.0, 1.0
        # the training range of the raw features and (residual models) of log(cycles / estimate),
        # the union over every `update`: saved with the weights, `Predictor.predict_full`'s
        # extrapolation flag and the clip of the network's correction
        self.x_min: np.ndarray | None = None
        self.x_max: np.ndarray | None = None
        self.bound: tuple | None = None
        self.fitted = False
        self.meta = dict(meta or {})
        self.history: list[dict] = []
        self._np_params = None

    # ------------------------------------------------------------------
    # protocol
    # ------------------------------------------------------------------
    def update(self, features, labels, groups=None, *, phases=None, steps: int | None = None,
               seconds: float | None = None, progress=None) -> dict:
        """Fit (first call: also the normalisation) or continue fitting.

        features: [n, F]; labels: [n] simulated cycles (finite, > 0, else
        ValueError); groups: [n] ints (rows of one op and shape share a
        value) or None (one group); rows with a non-finite feature are
        dropped.
        phases: optional [n, 4] cycles of the rearrangement / compute /
        readback / merge phases, an auxiliary target of a heads="phases"
        model (whose total is the sum of its phase predictions).
        steps / seconds: override the default length (None: the model's;
        otherwise a positive int / number of seconds).  progress(step,
        steps, loss) is called now and then.  Returns a summary dict
        (steps, seconds, initial / final loss, mse, rank)."""
        X = np.asarray(features, np.float32)
        y = np.log(check_labels(labels))
        steps = self.hp["steps"] if steps is None else check_positive_int("steps", steps)
        seconds = self.hp["seconds"] if seconds is None else check_seconds(seconds)
        if X.ndim != 2 or X.shape[1] != self.n_features or X.shape[0] != y.shape[0]:
            raise ValueError(f"features must be [n, {self.n_features}] with n labels, got {X.shape} "
                             f"and {y.shape}")
        ok = np.isfinite(y) & np.isfinite(X).all(axis=1)
        P = None
        if phases is not None and self.hp["heads"] == "phases":
            P = np.log(np.maximum(np.asarray(phases, np.float64), 1.0))
            if P.shape != (len(y), PHASES):
                raise ValueError(f"phases must be [n, {PHASES}], got {P.shape}")
            ok &= np.isfinite(P).all(axis=1)
            P = P[ok]
        X, y = X[ok], y[ok]
        b = np.broadcast_to(base_log(X, self.hp["base"]), y.shape)
        y = y - b                     # a residual model learns log(cycles / estimate)
        g = np.zeros(len(y), np.int64) if groups is None else np.asarray(groups, np.int64)[ok]
        if len(y) == 0:
            raise ValueError("update needs at least one row with finite features (and phases)")
        # the training range: widened by every update; a model fitted before ranges were recorded
        # (loaded without them) keeps none, so a fine-tune on a few rows does not clip and flag everything
        # else as beyond the range those rows span
        unknown = self.fitted and self.x_min is None
        if not unknown:
            lo, hi = X.min(axis=0), X.max(axis=0)
            self.x_min = lo if self.x_min is None else np.minimum(self.x_min, lo)
            self.x_max = hi if self.x_max is None else np.maximum(self.x_max, hi)
        if self.hp["base"] is not None and not (self.fitted and self.bound is None):
            r = (float(y.min()), float(y.max()))
            self.bound = r if self.bound is None else (min(self.bound[0], r[0]), max(self.bound[1], r[1]))
        if not self.fitted:
            # float64 statistics and a relative threshold: a feature constant in
            # the training set (the backend's own hardware features) must get
            # scale 1, not a float32 round-off "std" of ~1e-3 that would turn a
            # changed host or timing (a sweep, a new host model) into z ~ 1e3
            X64 = X.astype(np.float64)
            mean, sd = X64.mean(axis=0), X64.std(axis=0)
            self.x_mean = mean.astype(np.float32)
            self.x_scale = np.where(sd > 1e-4 * np.maximum(1.0, np.abs(mean)), sd, 1.0).astype(np.float32)
            self.y_mean = float(y.mean())
            # constant labels: scale 1; but a residual model's constant residual means an
            # exact estimate, and scale 1 would turn the network's noise into whole log units
            self.y_scale = float(y.std()) if y.std() > 1e-6 else (1e-6 if self.hp["base"] is not None else 1.0)
        Xn = (X - self.x_mean) / self.x_scale
        yn = ((y - self.y_mean) / self.y_scale).astype(np.float32)
        Pn = None if P is None else ((P - self.y_mean) / self.y_scale).astype(np.float32)
        # optax's schedules mix Python floats with int32 step counts, which the
        # tests' strict dtype promotion rejects: training runs under standard rules
        with jax.numpy_dtype_promotion("standard"):
            summary = self._fit(Xn, yn, Pn, b.astype(np.float32), g, steps, seconds, progress)
        self.fitted = True
        self._np_params = None
        self.history.append(summary)
        return summary

    def predict(self, features) -> np.ndarray:
        """[n] predicted cycles of feature rows [n, F] (numpy forward)."""
        return np.exp(np.mean(self.member_logs(features), axis=0))

    def member_logs(self, features) -> np.ndarray:
        """[members, n] log-cycles of every ensemble member on feature rows
        [n, F] (their mean is `predict`'s log, their spread the uncertainty)."""
        X = feature_rows(features, self.n_features)
        if self._np_params is None:
            self._np_params = member_arrays(nnx.to_pure_dict(nnx.state(self.net, nnx.Param)), len(self.hidden))
        return member_logs(self._np_params, (X - self.x_mean) / self.x_scale, self.y_mean, self.y_scale,
                           base_log(X, self.hp["base"]), self.bound)

    def save(self, path: str) -> None:
        """Write the model to `path` (msgpack; see module docstring), atomically
        (`pimjax.durable.atomic_write`: a reader sees the old file or the new one)."""
        from ..durable import atomic_write
        state = nnx.to_pure_dict(nnx.state(self.net, nnx.Param))
        meta = dict(self.meta, format=FORMAT_VERSION, n_features=self.n_features, hidden=list(self.hidden),
                    hp=self.hp, fitted=self.fitted, feature_names=list(FEATURE_NAMES)
                    if self.n_features == F else None, history=self.history)
        norm = {"x_mean": self.x_mean, "x_scale": self.x_scale,
                "y": np.array([self.y_mean, self.y_scale], np.float64)}
        if self.x_min is not None:
            norm.update(x_min=np.asarray(self.x_min, np.float32), x_max=np.asarray(self.x_max, np.float32))
        if self.bound is not None:
            norm["bound"] = np.array(self.bound, np.float64)
        blob = {"params": jax.tree.map(np.asarray, state),
                "norm": norm,
                "meta": json.dumps(meta, sort_keys=True)}
        atomic_write(path, serialization.msgpack_serialize(blob))

    @classmethod
    def load(cls, path: str) -> "CostModel":
        """A model written by `save`."""
        with open(path, "rb") as f:
            return cls._from_bytes(f.read(), path)

    # ------------------------------------------------------------------
    # internals
    # ------------------------------------------------------------------
    @classmethod
    def _from_bytes(cls, data: bytes, where: str = "<bytes>") -> "CostModel":
        blob = serialization.msgpack_restore(data)
        meta = json.loads(blob["meta"])
        check_meta(meta, where)
        hp = dict(meta["hp"])
        model = cls(meta["n_features"], tuple(meta["hidden"]), **hp, _abstract=True,
                    meta={k: v for k, v in meta.items() if k not in
                          ("format", "n_features", "hidden", "hp", "fitted", "feature_names", "history")})
        state = nnx.state(model.net, nnx.Param)
        nnx.replace_by_pure_dict(state, jax.tree.map(jnp.asarray, blob["params"]))
        nnx.update(model.net, state)
        model.x_mean = np.asarray(blob["norm"]["x_mean"], np.float32)
        model.x_scale = np.asarray(blob["norm"]["x_scale"], np.float32)
        model.y_mean, model.y_scale = (float(v) for v in np.asarray(blob["norm"]["y"]))
        r = norm_ranges(blob["norm"])
        model.x_min, model.x_max, model.bound = r.get("x_min"), r.get("x_max"), r.get("bound")
        model.fitted = bool(meta["fitted"])
        model.history = list(meta.get("history", []))
        return model

    def _fit(self, X: np.ndarray, y: np.ndarray, P, B: np.ndarray, g: np.ndarray, steps: int,
             seconds: float | None, progress) -> dict:
        hp = self.hp
        rng = np.random.default_rng(hp["seed"] + 7919 * len(self.history))
        # group index: rows of each group, contiguous after a stable sort
        order = np.argsort(g, kind="stable")
        _, starts, counts = np.unique(g[order], return_index=True, return_counts=True)
        G = len(starts)
        bg, m = min(hp["batch_groups"], max(1, G)), hp["per_group"]
        sched = optax.warmup_cosine_decay_schedule(0.0, hp["lr"], max(1, steps // 50), max(2, steps),
                                                   hp["lr"] * 0.02)
        tx = optax.adamw(sched, weight_decay=hp["weight_decay"])
        graphdef, params = nnx.split(self.net, nnx.Param)
        opt_state = tx.init(params)
        rw, tau, margin, temp = hp["rank_weight"], hp["tau"], hp["margin"], hp["temperature"]
        ys = self.y_scale          # pair margins and weights in natural-log cycles
        ym = self.y_mean
        phased = self.hp["heads"] == "phases"
        pw = self.hp["phase_weight"] if P is not None else 0.0
        if P is None:
            P = np.zeros((len(y), PHASES), np.float32)

        def loss_fn(params, xb, yb, pb, bb):
            net = nnx.merge(graphdef, params)
            z = net(xb.reshape(-1, xb.shape[-1]))                         # [K, bg * m, heads]
            K = z.shape[0]
            if phased:           # standardised log of the summed phases
                zp = z.reshape((K,) + yb.shape + (PHASES,))
                p = (jax.nn.logsumexp(zp * ys + ym, axis=-1) - ym) / ys
                aux = jnp.mean((zp - pb[None]) ** 2)
            else:
                p = z[..., 0].reshape((K,) + yb.shape)                     # [K, bg, m]
                aux = 0.0
            mse = jnp.mean((p - yb[None]) ** 2) + pw * aux
            ylog = yb * ys + bb                                            # the full log label (minus y_mean)
            better = (ylog[:, :, None] < ylog[:, None, :] - margin).astype(jnp.float32)  # i better than j
            w = jnp.exp(-(ylog - ylog.min(axis=1, keepdims=True)) / temp)[:, :, None] * better
            d = ((p[:, :, None, :] - p[:, :, :, None]) * ys                # p_j - p_i, in log units / tau
                 + (bb[:, None, :] - bb[:, :, None])[None]) / tau
            rank = jnp.sum(w[None] * jax.nn.softplus(-d)) / jnp.maximum(K * jnp.sum(w), 1e-6) * tau
            return mse + rw * rank, (mse, rank)

        @jax.jit
        def step(params, opt_state, xb, yb, pb, bb):
            (loss, (mse, rank)), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, xb, yb, pb, bb)
            updates, opt_state = tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, loss, mse, rank

        eval_fn = jax.jit(loss_fn)

        def batch():
            gi = rng.choice(G, bg, replace=G < bg)
            off = (rng.random((bg, m)) * counts[gi][:, None]).astype(np.int64)
            rows = order[starts[gi][:, None] + off]
            return X[rows], y[rows], P[rows], B[rows]

        xe, ye, pe, be = batch()
        first = float(eval_fn(params, xe, ye, pe, be)[0])
        t0 = time.time()
        losses = []
        done = 0
        for done in range(1, steps + 1):
            params, opt_state, loss, mse, rank = step(params, opt_state, *batch())
            if done % 200 == 0 or done == steps:
                losses.append((float(loss), float(mse), float(rank)))
                if progress is not None:
                    progress(done, steps, losses[-1][0])
                if seconds is not None and time.time() - t0 > seconds:
                    break
        nnx.update(self.net, params)
        last = float(eval_fn(params, xe, ye, pe, be)[0])
        tail = np.array(losses[-5:]) if losses else np.array([[last, last, 0.0]])
        return {"steps": done, "seconds": round(time.time() - t0, 2), "rows": int(len(y)), "groups": int(G),
                "loss_first": first, "loss_last": last, "loss": float(tail[:, 0].mean()),
                "mse": float(tail[:, 1].mean()), "rank": float(tail[:, 2].mean())}
