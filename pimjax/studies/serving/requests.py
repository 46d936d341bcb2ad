"""Request traces for the serving simulator: arrival time, prompt length, output length.

    reqs = poisson_requests(1000, rate=4.0, prompt=uniform(128, 2048), output=uniform(32, 512), seed=0)
    reqs = requests_from("trace.csv")            # or a pandas DataFrame
    reqs = batch_requests(8, prompt=128, output=2)   # 8 requests at t = 0, all alike
    reqs.to_frame()                              # DataFrame: arrival_s, prompt_len, output_len

Units: seconds for arrivals, tokens for lengths.  `output_len` counts every
generated token, the first one (from the prefill) included, so a request of
output_len N has N - 1 decode steps (as `pimjax.studies.decode`'s `tokens`).
Validation names the field: a length below 1, a non-integer length, a
negative or non-finite arrival, or arrivals out of order raise ValueError.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

COLUMNS = ("arrival_s", "prompt_len", "output_len")


# --------------------------------------------------------------------------
# length distributions
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class LengthDist:
    """A distribution of token counts (each >= 1: a length below 1 is a ValueError,
    never clipped up silently).

    kind: "fixed" (always `a`), "uniform" (integers a..b inclusive) or
    "lognormal" (round(exp(N(log a, b))): median a tokens, sigma b of the
    log), clipped to [lo, hi].
    """
    kind: str
    a: float
    b: float = 0.0
    lo: int = 1
    hi: int | None = None

    def __post_init__(self):
        if self.kind not in ("fixed", "uniform", "lognormal"):
            raise ValueError(f"LengthDist.kind {self.kind!r} not in ('fixed', 'uniform', 'lognormal')")
        if self.kind in ("fixed", "uniform") and (int(self.a) != self.a or int(self.b) != self.b):
            raise ValueError(f"LengthDist {self.kind}: lengths must be integers, got {self.a!r}, {self.b!r}")
        if self.kind in ("fixed", "uniform") and self.a < 1:
            what = f"fixed({self.a:g})" if self.kind == "fixed" else f"uniform({self.a:g}, {self.b:g})"
            raise ValueError(f"LengthDist {what}: lengths must be >= 1 token, got {self.a:g} "
                             f"(a request has at least one prompt token and one output token)")
        if self.lo < 1:
            raise ValueError(f"LengthDist clip lo={self.lo}: lengths must be >= 1 token")
        if self.kind == "uniform" and self.b < self.a:
            raise ValueError(f"LengthDist uniform({self.a}, {self.b}): hi < lo")
        if self.kind == "lognormal" and (self.a <= 0 or self.b < 0):
            raise ValueError(f"LengthDist lognormal(median={self.a}, sigma={self.b}): median > 0, sigma >= 0")
        if self.hi is not None and self.hi < self.lo:
            raise ValueError(f"LengthDist clip [{self.lo}, {self.hi}]: hi < lo")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """n lengths (int64 [n], tokens)."""
        if self.kind == "fixed":
            x = np.full(n, int(self.a), np.int64)
        elif self.kind == "uniform":
            x = rng.integers(int(self.a), int(self.b) + 1, size=n).astype(np.int64)
        else:
            x = np.rint(np.exp(rng.normal(np.log(self.a), self.b, size=n))).astype(np.int64)
        return np.clip(x, self.lo, self.hi if self.hi is not None else np.iinfo(np.int64).max)


def fixed(n: int) -> LengthDist:
    """Always `n` tokens."""
    return LengthDist("fixed", n, n)


def uniform(lo: int, hi: int) -> LengthDist:
    """Integers lo..hi inclusive, uniformly (tokens)."""
    return LengthDist("uniform", lo, hi)


def lognormal(median: float, sigma: float, lo: int = 1, hi: int | None = None) -> LengthDist:
    """round(exp(N(log median, sigma))) tokens, clipped to [lo, hi] (chat-like heavy tails)."""
    return LengthDist("lognormal", median, sigma, lo, hi)


def as_dist(spec, name: str) -> LengthDist:
    """A LengthDist from an int (fixed), a LengthDist, or a tuple ("uniform", lo, hi) /
    ("lognormal", median, sigma[, lo, hi]) / ("fixed", n); ValueError naming `name`."""
    if isinstance(spec, LengthDist):
        return spec
    try:
        if isinstance(spec, (int, np.integer)) and not isinstance(spec, bool):
            return fixed(int(spec))
        if isinstance(spec, tuple) and spec and spec[0] in ("fixed", "uniform", "lognormal"):
            return {"fixed": fixed, "uniform": uniform, "lognormal": lognormal}[spec[0]](*spec[1:])
    except ValueError as err:
        raise ValueError(f"{name}={spec!r}: {err}") from None
    raise ValueError(f"{name}: a length distribution is an int, pimjax.studies.serving.fixed / uniform / "
                     f"lognormal, or a tuple ('uniform', lo, hi) / ('lognormal', median, sigma); got {spec!r}")


# --------------------------------------------------------------------------
# the trace
# --------------------------------------------------------------------------
def _frozen(a: np.ndarray) -> np.ndarray:
    a = np.array(a)
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False)
class Requests:
    """A request trace, struct of arrays (read-only numpy, one entry per request).

    arrival_s: float64 [n] seconds, non-decreasing, >= 0; prompt_len: int64 [n]
    tokens >= 1; output_len: int64 [n] tokens >= 1 (the first, from the prefill,
    included).  Construct through `poisson_requests`, `requests_from` or
    `batch_requests`; the constructor validates (ValueError naming the field).
    """
    arrival_s: np.ndarray
    prompt_len: np.ndarray
    output_len: np.ndarray

    def __post_init__(self):
        arr = np.asarray(self.arrival_s, np.float64).reshape(-1)
        out = {}
        for f in ("prompt_len", "output_len"):
            raw = np.asarray(getattr(self, f)).reshape(-1)
            if raw.shape != arr.shape:
                raise ValueError(f"Requests.{f} has {raw.size} entries, arrival_s {arr.size}")
            if raw.size and not np.issubdtype(raw.dtype, np.integer):
                as_f = raw.astype(np.float64)
                bad = ~np.isfinite(as_f) | (as_f != np.rint(as_f))
                if bad.any():
                    i = int(np.argmax(bad))
                    raise ValueError(f"Requests.{f}[{i}] = {float(as_f[i])!r} is not a whole number of tokens")
            v = raw.astype(np.int64)
            if v.size and (v < 1).any():
                i = int(np.argmax(v < 1))
                raise ValueError(f"Requests.{f}[{i}] = {int(v[i])}: lengths must be >= 1 token")
            out[f] = v
        if arr.size:
            if not np.isfinite(arr).all():
                i = int(np.argmax(~np.isfinite(arr)))
                raise ValueError(f"Requests.arrival_s[{i}] = {float(arr[i])!r} is not finite")
            if (arr < 0).any():
                i = int(np.argmax(arr < 0))
                raise ValueError(f"Requests.arrival_s[{i}] = {float(arr[i])!r} is negative")
            d = np.diff(arr)
            if (d < 0).any():
                i = int(np.argmax(d < 0)) + 1
                raise ValueError(f"Requests.arrival_s out of order: request {i} arrives at {float(arr[i])!r} s, "
                                 f"before request {i - 1} at {float(arr[i - 1])!r} s (sort the trace by arrival)")
        object.__setattr__(self, "arrival_s", _frozen(arr))
        object.__setattr__(self, "prompt_len", _frozen(out["prompt_len"]))
        object.__setattr__(self, "output_len", _frozen(out["output_len"]))

    def __len__(self) -> int:
        return int(self.arrival_s.size)

    def to_frame(self):
        """pandas DataFrame (columns arrival_s, prompt_len, output_len; index request id)."""
        import pandas as pd
        df = pd.DataFrame({"arrival_s": self.arrival_s, "prompt_len": self.prompt_len,
                           "output_len": self.output_len})
        df.index.name = "request"
        return df

    def to_csv(self, path: str) -> None:
        """Write the trace as CSV (the columns of `to_frame`, no index), atomically
        (`pimjax.durable.atomic_write`)."""
        from ...durable import atomic_write
        atomic_write(path, self.to_frame().to_csv(index=False))

    @property
    def max_context(self) -> int:
        """The longest context any request reaches (prompt + output - 1 tokens)."""
        return int((self.prompt_len + self.output_len - 1).max()) if len(self) else 0

    def __repr__(self) -> str:
        if not len(self):
            return "Requests(0)"
        return (f"Requests({len(self)}: arrivals {self.arrival_s[0]:.3g}..{self.arrival_s[-1]:.3g} s, "
                f"prompt {self.prompt_len.min()}..{self.prompt_len.max()}, "
                f"output {self.output_len.min()}..{self.output_len.max()} tokens)")


def requests_from(source, columns: dict | None = None, *, rate: float | None = None, seed: int = 0) -> Requests:
    """A trace from a pandas DataFrame or a CSV path with columns `arrival_s`
    (seconds), `prompt_len` and `output_len` (tokens); other columns are
    ignored.

    columns: {our name: the source's column} for the ones named otherwise
    (e.g. a ShareGPT-style table of token counts: ``{"prompt_len":
    "input_tokens", "output_len": "output_tokens"}``).  rate: when the source
    has no arrival column, Poisson arrivals at `rate` requests/s (`seed`;
    as `poisson_requests`); with one it is an error.  ValueError naming a
    missing column, a mapping key that is not ours, or a bad field.

    >>> import pandas as pd
    >>> df = pd.DataFrame({"input_tokens": [12, 30], "output_tokens": [5, 9]})
    >>> requests_from(df, {"prompt_len": "input_tokens", "output_len": "output_tokens"}, rate=2.0).prompt_len.tolist()
    [12, 30]
    """
    import pandas as pd
    df = pd.read_csv(source) if isinstance(source, (str, bytes)) or hasattr(source, "__fspath__") else source
    if not isinstance(df, pd.DataFrame):
        raise ValueError(f"requests_from: a DataFrame or a CSV path, got {type(source).__name__}")
    columns = dict(columns or {})
    bad = sorted(set(columns) - set(COLUMNS))
    if bad:
        raise ValueError(f"requests_from: columns maps our names {list(COLUMNS)} to the source's; {bad} is not one "
                         f"of ours (e.g. columns={{'prompt_len': 'input_tokens'}})")
    name = {c: columns.get(c, c) for c in COLUMNS}
    need = [c for c in COLUMNS if not (c == "arrival_s" and rate is not None)]
    missing = [name[c] for c in need if name[c] not in df.columns]
    if missing:
        hint = "; no arrival times: pass rate= for Poisson arrivals" if name["arrival_s"] in missing else ""
        raise ValueError(f"requests_from: missing column(s) {missing}; a trace has {list(COLUMNS)} "
                         f"(got {list(df.columns)}; columns= maps ours to yours){hint}")
    if rate is not None:
        if name["arrival_s"] in df.columns:
            raise ValueError(f"requests_from: the source has arrival times ({name['arrival_s']!r}); rate= is for a "
                             f"source without them")
        if not (np.isfinite(rate) and rate > 0):
            raise ValueError(f"requests_from: rate must be > 0 requests/s, got {rate!r}")
        arrival = np.cumsum(np.random.default_rng(seed).exponential(1.0 / rate, size=len(df)))
    else:
        arrival = df[name["arrival_s"]].to_numpy()
    return Requests(arrival, df[name["prompt_len"]].to_numpy(), df[name["output_len"]].to_numpy())


def poisson_requests(n: int, rate: float, prompt=uniform(128, 2048), output=uniform(32, 512),
                     seed: int = 0, start_s: float = 0.0) -> Requests:
    """`n` requests with Poisson arrivals at `rate` requests per second
    (exponential gaps, the first at `start_s` + one gap) and lengths drawn from
    `prompt` / `output` (an int, `fixed` / `uniform` / `lognormal`, or a tuple:
    `as_dist`).  Deterministic for a seed.

    >>> r = poisson_requests(3, rate=2.0, prompt=128, output=("uniform", 4, 8), seed=1)
    >>> r.prompt_len.tolist()
    [128, 128, 128]
    """
    if not (isinstance(n, (int, np.integer)) and n >= 0):
        raise ValueError(f"poisson_requests: n must be a non-negative int, got {n!r}")
    if not (np.isfinite(rate) and rate > 0):
        raise ValueError(f"poisson_requests: rate must be > 0 requests/s, got {rate!r}")
    pd_, od = as_dist(prompt, "prompt"), as_dist(output, "output")
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0 / rate, size=n)
    return Requests(start_s + np.cumsum(gaps), pd_.sample(rng, n), od.sample(rng, n))


def batch_requests(n: int, prompt: int, output: int, arrival_s: float = 0.0) -> Requests:
    """`n` identical requests arriving together (a static batch: every request
    at the same context, as AttAcc's system model runs them)."""
    return Requests(np.full(n, float(arrival_s)), np.full(n, prompt), np.full(n, output))
