"""Inference of a trained cost model in numpy: what the tuner loads.

`model.CostModel` trains with Flax NNX and optax; at compile time the tuner
only needs the forward pass of the saved weights.  `Predictor` reads the
same msgpack file (`CostModel.save`) with `msgpack` alone and runs the MLP
with numpy, so choosing a draft neither imports Flax (0.6 s) nor builds an
NNX module nor compiles anything.  `CostModel.predict` calls the same
`member_logs`, so both give the same numbers bit for bit.

File layout (flax.serialization's msgpack: an ndarray is msgpack ext type 1
holding the packed tuple (shape, dtype name, C-order bytes); maps may have
integer keys):

    {"params": {"members": {k: {"layers": {i: {"kernel": [a, b], "bias": [b]}},
                                "out": {"kernel": [h, heads], "bias": [heads]}}}},
     "norm": {"x_mean": [F], "x_scale": [F], "y": [2] (mean, scale of log-cycles),
              "x_min": [F], "x_max": [F] (the training range of the raw features; optional),
              "bound": [2] (a residual model's clip of its correction, log-cycles; optional)},
     "meta": JSON string (format, n_features, hidden, hp, feature_names, ...)}
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from importlib import resources

import msgpack
import numpy as np

from .features import FEATURE_NAMES

FORMAT_VERSION = 1
_EXT_NDARRAY = 1          # flax.serialization._MsgpackExtType.ndarray
_EXT_NPSCALAR = 3


def _ext_hook(code: int, data: bytes):
    """Decode flax's ndarray / numpy-scalar ext types (never pickle)."""
    if code in (_EXT_NDARRAY, _EXT_NPSCALAR):
        shape, dtype, buf = msgpack.unpackb(data, raw=False)
        arr = np.frombuffer(buf, dtype=np.dtype(dtype)).reshape(shape)
        return arr[()] if code == _EXT_NPSCALAR else arr
    return msgpack.ExtType(code, data)


def read_blob(data: bytes) -> dict:
    """The saved pytree of a cost-model file (numpy leaves)."""
    return msgpack.unpackb(data, ext_hook=_ext_hook, raw=False, strict_map_key=False)


def gelu(x: np.ndarray) -> np.ndarray:
    """jax.nn.gelu(approximate=True) in float32:
    0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).

    The same float32 operations in the same order as that expression, on two
    buffers instead of one temporary per operation (the tuner predicts tens
    of thousands of drafts per op: the temporaries were most of the cost)."""
    c = np.float32(math.sqrt(2.0 / math.pi))
    t = np.multiply(np.float32(0.044715), x)
    t *= x
    t *= x
    t += x
    t *= c
    np.tanh(t, out=t)
    t += np.float32(1.0)
    h = np.multiply(np.float32(0.5), x)
    h *= t
    return h


_BLAS_THREADS = None      # (get, set) of the loaded OpenBLAS's thread count; False: none found


def _openblas_threads():
    """(get, set) of the OpenBLAS numpy is linked to, or None (another BLAS,
    or no /proc): found once, by the library's path in this process's maps."""
    global _BLAS_THREADS
    if _BLAS_THREADS is None:
        _BLAS_THREADS = False
        try:
            import ctypes
            with open("/proc/self/maps") as fh:
                paths = {ln.split()[-1] for ln in fh if "openblas" in ln.lower() and ".so" in ln}
            # numpy's own copy first (a wheel's numpy.libs/), whatever other OpenBLAS (scipy's) is loaded
            paths = sorted(paths, key=lambda p: ("numpy" not in p, p))
            for path in paths:
                lib = ctypes.CDLL(path)
                for prefix, suffix in (("scipy_openblas", "64_"), ("scipy_openblas", ""),
                                       ("openblas", "64_"), ("openblas", "")):
                    get = getattr(lib, f"{prefix}_get_num_threads{suffix}", None)
                    put = getattr(lib, f"{prefix}_set_num_threads{suffix}", None)
                    if get is not None and put is not None:
                        put.argtypes = [ctypes.c_int]
                        _BLAS_THREADS = (get, put)
                        break
                if _BLAS_THREADS:
                    break
        except OSError:       # no /proc (macOS) or a library ctypes cannot open: BLAS threads left as they are
            pass
    return _BLAS_THREADS or None


class one_blas_thread:
    """Run the MLP's matrix products on one OpenBLAS thread, restoring the
    count after.  The products are small ([n, 215] @ [215, 128]): OpenBLAS's
    worker threads spin-wait for each one, and on a loaded or oversubscribed
    machine (two cores, several processes) that made the tuner's predictions
    3-5x slower than one thread.  The products' last bits can differ from
    a multi-threaded run's (OpenBLAS blocks them differently); with one
    thread they do not depend on the machine's core count.  The shipped
    ranking is unchanged (the report hash is).  Without OpenBLAS (another
    BLAS, no /proc) it does nothing."""

    def __enter__(self):
        ctl = _openblas_threads()
        self._was = None
        if ctl is not None:
            self._was = int(ctl[0]())
            if self._was != 1:
                ctl[1](1)
        return self

    def __exit__(self, *exc):
        ctl = _openblas_threads()
        if ctl is not None and self._was not in (None, 1):
            ctl[1](self._was)
        return False


Layer = tuple[np.ndarray, np.ndarray]          # (kernel [a, b], bias [b]) float32


def base_log(X: np.ndarray, base: str | None) -> np.ndarray | float:
    """Natural log of a residual model's closed-form estimate: feature
    `base` of raw rows X [n, F] holds log2(1 + cycles); 0.0 without one.
    The estimate is floored at one cycle, as the labels are positive."""
    if base is None:
        return 0.0
    f = X[:, FEATURE_NAMES.index(base)].astype(np.float64)
    return np.log(np.maximum(np.exp2(f) - 1.0, 1.0))


def member_logs(members: list[tuple[list[Layer], Layer]], x: np.ndarray, y_mean: float, y_scale: float,
                offset=0.0, bound: tuple[float, float] | None = None) -> np.ndarray:
    """[K, n] log-cycles of every ensemble member on standardised features x [n, F].

    Each member gives log-cycles (a multi-head member: log of the sum of its
    phase heads).  offset: [n] log-cycles added to every member's output (a
    residual model's closed-form estimate, `base_log`), or 0.  bound: (lo,
    hi) in log-cycles, the range of the residual log(cycles / estimate) seen
    in training: a residual model's correction is clipped to it, so a case
    beyond the training range (a 28 672-row GEMV where training stopped at
    2 048) falls back on the estimate times a correction the training data
    supports, instead of whatever the network extrapolates to."""
    logs = []
    with one_blas_thread():
        outs = []
        for layers, (wo, bo) in members:
            h = x
            for w, b in layers:
                h = h @ w
                h += b
                h = gelu(h)
            outs.append(h @ wo + bo)
    for z in outs:
        z = z.astype(np.float64) * y_scale + y_mean                      # log-cycles [n, heads]
        if bound is not None:
            z = np.clip(z, bound[0], bound[1])
        z = z + np.reshape(offset, (-1, 1))
        if z.shape[1] > 1:                                               # total = sum of the phases
            zm = z.max(axis=1, keepdims=True)
            z = zm + np.log(np.exp(z - zm).sum(axis=1, keepdims=True))
        logs.append(z[:, 0])
    return np.stack(logs)


COVERAGE = 0.95         # the share of out-of-sample drafts a predicted +-2 sigma band is sized to hold


def sigma_floor(err: np.ndarray, spread: np.ndarray, coverage: float = COVERAGE) -> float:
    """A floor s >= 0 such that `coverage` of the drafts satisfy
    |err| <= 2 sqrt(spread^2 + s^2): the `coverage` quantile (numpy's
    "higher", an observed value) of the per-draft floors, so at most one
    draft above the smallest such s; an out-of-sample calibration of the
    ensemble's spread (split-conformal, on the residual scale).

    err [n]: log(simulated / predicted) of drafts the model had not been
    trained on (train.py: each model-driven round's picks, predicted by the
    model that picked them, before it sees their labels); spread [n]: the
    ensemble's standard deviation of log-cycles on them.  The ensemble alone
    is over-confident (its members share the data: +-2 spread held 40 % of the
    broad held-out drafts), so the uncertainty reported is
    sqrt(spread^2 + s^2)."""
    if not 0.0 < coverage < 1.0:
        raise ValueError(f"coverage must lie in (0, 1), got {coverage}")
    err, spread = np.abs(np.asarray(err, np.float64)), np.asarray(spread, np.float64)
    if err.size == 0:
        return 0.0
    need = np.sqrt(np.maximum(0.0, (err / 2.0) ** 2 - spread ** 2))      # per draft: the floor it needs
    return float(np.quantile(need, coverage, method="higher"))


# a feature counts as out of the training range when it lies more than this share of its
# training span (and at least EXTRAP_MIN, log2 units: 2.5 % of a size) beyond the span
EXTRAP_TOL = 0.05
EXTRAP_MIN = 0.035


def out_of_range(X: np.ndarray, x_min: np.ndarray, x_max: np.ndarray) -> np.ndarray:
    """[n, F] bool: features of raw rows X [n, F] outside the training range
    [x_min, x_max] (widened by EXTRAP_TOL of the span, at least EXTRAP_MIN)."""
    tol = np.maximum(EXTRAP_TOL * (x_max - x_min), EXTRAP_MIN).astype(np.float32)
    return (X < x_min - tol) | (X > x_max + tol)


def feature_rows(features, n_features: int) -> np.ndarray:
    """Feature rows as float32 [n, F] (one row [F] becomes [1, F]); a
    ValueError when the width is not `n_features`."""
    X = np.asarray(features, np.float32)
    if X.ndim == 1:
        X = X[None, :]
    if X.shape[1] != n_features:
        raise ValueError(f"features must have {n_features} columns, got {X.shape[1]}")
    return X


def member_arrays(params: dict, n_hidden: int) -> list[tuple[list[Layer], Layer]]:
    """The `member_logs` weights of a pure parameter dict
    ({"members": {k: {"layers": {i: ...}, "out": ...}}}, int or str keys)."""
    def get(d, i):
        return d[i] if i in d else d[str(i)]

    members = params["members"]
    out = []
    for k in range(len(members)):
        mk = get(members, k)
        layers = [(np.asarray(get(mk["layers"], i)["kernel"], np.float32),
                   np.asarray(get(mk["layers"], i)["bias"], np.float32)) for i in range(n_hidden)]
        out.append((layers, (np.asarray(mk["out"]["kernel"], np.float32), np.asarray(mk["out"]["bias"], np.float32))))
    return out


@dataclass(frozen=True)
class Predictor:
    """A trained cost model, inference only (numpy).

    members: `member_logs` weights; x_mean / x_scale: [F] feature
    standardisation; y_mean / y_scale: of the log-cycles; meta: the file's
    metadata (backend, training summary, ...)."""
    members: tuple
    x_mean: np.ndarray
    x_scale: np.ndarray
    y_mean: float
    y_scale: float
    n_features: int
    meta: dict

    x_min: np.ndarray | None = None         # [F] training range of the raw features (None: not saved)
    x_max: np.ndarray | None = None
    bound: tuple | None = None              # (lo, hi) residual log-cycles seen in training (None: unbounded)

    @property
    def fitted(self) -> bool:
        return bool(self.meta.get("fitted", False))

    def _logs(self, X: np.ndarray) -> np.ndarray:
        return member_logs(list(self.members), (X - self.x_mean) / self.x_scale, self.y_mean, self.y_scale,
                           base_log(X, self.meta.get("hp", {}).get("base")), self.bound)

    def predict(self, features) -> np.ndarray:
        """[n] predicted cycles of feature rows [n, F] (`features.features_table`)."""
        return np.exp(np.mean(self._logs(feature_rows(features, self.n_features)), axis=0))

    def predict_full(self, features) -> dict:
        """The prediction with how far to trust it, for feature rows [n, F]:

        cycles        [n] predicted cycles (= `predict`);
        sigma         [n] the uncertainty of log-cycles, a relative one
                      (0.05 ~ +-5 %): the ensemble's spread (the standard
                      deviation of the members' log-cycles) combined with the
                      out-of-sample floor measured in training
                      (`meta["sigma_floor"]`, `sigma_floor`; 0 in older weights),
                      sqrt(spread^2 + floor^2);
        spread        [n] the ensemble's spread alone;
        extrapolating [n] bool: some feature lies outside the training range
                      saved with the weights (`out_of_range`); False for all
                      when the file has no range (older weights);
        beyond        [n] list of the names of those features (at most 4)."""
        X = feature_rows(features, self.n_features)
        logs = self._logs(X)
        n = X.shape[0]
        if self.x_min is not None:
            oor = out_of_range(X, self.x_min, self.x_max)
            ext = oor.any(axis=1)
            beyond = [[FEATURE_NAMES[j] for j in np.nonzero(row)[0][:4]] if e else [] for row, e in zip(oor, ext)]
        else:
            ext, beyond = np.zeros(n, bool), [[] for _ in range(n)]
        spread = logs.std(axis=0)
        floor = float(self.meta.get("sigma_floor", 0.0))
        return {"cycles": np.exp(logs.mean(axis=0)), "sigma": np.sqrt(spread ** 2 + floor ** 2),
                "spread": spread, "extrapolating": ext, "beyond": beyond}

    @classmethod
    def from_bytes(cls, data: bytes, where: str = "<bytes>") -> "Predictor":
        """A Predictor of a file written by `CostModel.save` (ValueError naming
        `where` for anything else: a truncated or foreign file, a header that
        disagrees with the arrays)."""
        try:
            blob = read_blob(data)
            meta = json.loads(blob["meta"])
        except Exception as err:  # noqa: BLE001 - msgpack / json / key errors of a foreign file
            raise ValueError(f"{where}: not a pimjax cost model ({type(err).__name__}: {err})") from None
        check_meta(meta, where)
        try:
            y = np.asarray(blob["norm"]["y"], np.float64)
            model = cls(members=tuple(member_arrays(blob["params"], len(meta["hidden"]))),
                        x_mean=np.asarray(blob["norm"]["x_mean"], np.float32),
                        x_scale=np.asarray(blob["norm"]["x_scale"], np.float32),
                        y_mean=float(y[0]), y_scale=float(y[1]), n_features=int(meta["n_features"]), meta=meta,
                        **norm_ranges(blob["norm"]))
        except Exception as err:  # noqa: BLE001
            raise ValueError(f"{where}: a damaged cost model ({type(err).__name__}: {err})") from None
        widths = [w.shape[1] for w, _ in model.members[0][0]] if model.members else []
        if (model.x_mean.shape != (model.n_features,) or model.x_scale.shape != (model.n_features,)
                or widths != list(meta["hidden"]) or not np.all(model.x_scale > 0)):
            raise ValueError(f"{where}: header and arrays disagree (features {model.n_features}, "
                             f"hidden {meta['hidden']}; arrays: x_mean {model.x_mean.shape}, layers {widths})")
        return model

    @classmethod
    def load(cls, path: str) -> "Predictor":
        with open(path, "rb") as f:
            return cls.from_bytes(f.read(), path)


def norm_ranges(norm: dict) -> dict:
    """x_min / x_max / bound of a file's "norm" map (absent in older files)."""
    out = {}
    if "x_min" in norm and "x_max" in norm:
        out["x_min"] = np.asarray(norm["x_min"], np.float32)
        out["x_max"] = np.asarray(norm["x_max"], np.float32)
    if "bound" in norm:
        b = np.asarray(norm["bound"], np.float64)
        out["bound"] = (float(b[0]), float(b[1]))
    return out


def check_meta(meta: dict, where: str) -> None:
    """Refuse files of another format or trained on other features."""
    if meta.get("format") != FORMAT_VERSION:
        raise ValueError(f"{where}: cost model format {meta.get('format')} != {FORMAT_VERSION}")
    if meta.get("feature_names") is not None and tuple(meta["feature_names"]) != FEATURE_NAMES:
        raise ValueError(f"{where}: the model was trained on other features; retrain "
                         "(python -m pimjax.costmodel.train)")


def _weights_ref(backend_name: str):
    return resources.files("pimjax.costmodel") / "weights" / f"{backend_name}.msgpack"


def weights_path(backend_name: str) -> str:
    """Path of the shipped weights of a preset or model name (`configs.model_name`)."""
    return str(_weights_ref(backend_name))


def load_default(backend_name) -> Predictor:
    """The shipped model of a preset ("hbm-pim", "attacc", "newton", "upmem"),
    of a controller's configuration ("hbm-pim.dcc", "attacc.dcc":
    `configs.model_name`), or of a Backend (the model its configuration
    ranks with), inference only.  FileNotFoundError when none is shipped
    (`train.load_for` then trains one).

    >>> model = load_default("hbm-pim")                                  # doctest: +SKIP
    >>> model.predict(features_table(op, drafts(op, backend), backend))  # doctest: +SKIP
    """
    from .configs import model_name
    name = model_name(backend_name)
    ref = _weights_ref(name)
    if not ref.is_file():
        raise FileNotFoundError(f"no shipped cost model for backend {name!r} ({ref}); "
                                "run `python -m pimjax.costmodel.train --backend NAME`")
    return Predictor.from_bytes(ref.read_bytes(), str(ref))


def user_weights_dir() -> str:
    """Where models trained at first use are kept: $PIMJAX_COSTMODEL_WEIGHTS, else
    ~/.cache/pimjax/costmodel."""
    return os.environ.get("PIMJAX_COSTMODEL_WEIGHTS",
                          os.path.join(os.path.expanduser("~"), ".cache", "pimjax", "costmodel"))
