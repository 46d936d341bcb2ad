"""A differential fuzzer: random `jnp` programs through `pim_jit` against `jax.jit`.

`program(draw)` builds a random `Program` (source text + argument specs) from
the primitives pimjax traces: dot_general with batch dimensions, reductions,
elementwise chains with broadcasts, reshapes / transposes, convolutions
(stride, padding, groups), attention (masks, GQA) and
`lax.dynamic_update_slice` into a cache; shapes include 1, primes and
non-powers of two, dtypes float16 / bfloat16 / float32 / int8 / int32, and
some arguments are pytrees (a dict of weights).  `draw` is any object with
`int(lo, hi)`, `choice(seq)`, `bool()`: `RandomDraw` (a seeded
`random.Random`: `make fuzz`) or `HypothesisDraw` (hypothesis' `data`: the
test suite, which shrinks a failure to its smallest program).

`check(program, backend, placement)` runs it through `pim_jit` and classifies
the result (`OUTCOMES`): the three allowed ones --

* "equal": within `pimjax.precision.tolerance` of `jax.jit` (or, where
  jax.jit's fused program rounds differently from jax op by op at fp16's
  range edge, of jax op by op: detail `EAGER`);
* "precision": different, with a `PrecisionWarning` naming an overflow,
  underflow or inf / NaN (the cause), or naming the conversion of the data
  to the units' type where jax, on every value rounded to that type
  (`at_unit_precision`), agrees with pimjax (a sum that cancels keeps the
  units' precision of its terms: fp16 data on Newton's bf16 units);
* "compile_error": a `PimCompileError` naming a primitive of the program;

and the failures: "mismatch" (different, nothing said), "unclear_error" (a
PimCompileError naming no op), "crash" (any other exception, or a result of
the wrong structure / shape / dtype), "hang" (past `timeout_s`).

Run `python -m pimjax.testing.fuzz N` (or `make fuzz N=...`) for a run with a
progress bar and a table of outcome x backend x placement counts; a failure
prints `Program.reproducer()`, a script that replays it.  `--counts FILE`
rewrites the counts and the seeds done after every program (atomically), and
`--counts FILE --resume` continues that run where it stopped (a 10 000-program
run may span several sittings); `--counts FILE --log LOG --recheck` runs the
failures it logged again once they are fixed, and moves them to their new
outcome in the file (`recheck`).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import math
import os
import random
import signal
import sys
import time
import traceback
import warnings

import numpy as np

BACKENDS = ("hbm-pim", "attacc", "newton", "upmem")
PLACEMENTS = ("prefer_pim", "auto")
# small systems: a fuzz program's op fits a few channels, and compiles stay fast
BACKEND_OPTIONS = {"hbm-pim": dict(channels=4), "attacc": dict(channels=2), "newton": dict(channels=2),
                   "upmem": dict(dpus=64)}
OK_OUTCOMES = ("equal", "precision", "compile_error")
FAIL_OUTCOMES = ("mismatch", "unclear_error", "crash", "hang")
OUTCOMES = OK_OUTCOMES + FAIL_OUTCOMES
EAGER = "equal to jax op by op"     # the detail of an "equal" that jax.jit's fused rounding differs from

# sizes a dimension draws from (index 0 first: hypothesis shrinks towards it): 1, primes,
# non-powers of two and a few powers of two
SIZES = (1, 2, 3, 4, 5, 7, 8, 6, 12, 13, 16, 17, 24, 31, 32, 48, 67, 100, 129, 257)
BIG = len(SIZES) - 1            # size(BIG): any size; size() without a bound stops at 48 (fast compiles)
SMALL = 15
FLOATS = ("float32", "float16", "bfloat16")
INTS = ("int32", "int8")
DTYPES = FLOATS + INTS


# --- drawing -------------------------------------------------------------------------------------
class RandomDraw:
    """Draws from a seeded `random.Random` (the `make fuzz` runs: seed i is program i)."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def int(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def choice(self, seq):
        return seq[self.rng.randrange(len(seq))]

    def bool(self) -> bool:
        return self.rng.random() < 0.5


class HypothesisDraw:
    """Draws through hypothesis' `st.data()` object, so a failure shrinks."""

    def __init__(self, data):
        from hypothesis import strategies as st
        self.data, self.st = data, st

    def int(self, lo: int, hi: int) -> int:
        return self.data.draw(self.st.integers(lo, hi))

    def choice(self, seq):
        return seq[self.data.draw(self.st.integers(0, len(seq) - 1))]

    def bool(self) -> bool:
        return self.data.draw(self.st.booleans())


def programs():
    """The hypothesis strategy of `Program`s (shrinks through its draws)."""
    from hypothesis import strategies as st
    return st.data().map(lambda data: program(HypothesisDraw(data)))


# --- programs ------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Arg:
    """One array leaf of the program's arguments: `path` is its place in the
    argument list (`("a0",)` a plain argument, `("p", "w1")` the leaf `w1` of
    the dict argument `p`); shape; dtype name; `kind` "normal" (uniform in
    [-1, 1] floats, [-4, 4] ints), "mask" (bool) or "index" (an int32 0-d in
    [0, hi]); `mag` scales "normal" values (beyond fp16's range, or
    int8 products that wrap, when large)."""
    path: tuple
    shape: tuple
    dtype: str
    kind: str = "normal"
    hi: int = 0
    mag: float = 1.0


@dataclasses.dataclass(frozen=True)
class Program:
    """A generated program: `source` defines `def program(<params>)`;
    `args` the leaves of its arguments (`make_args`); `kind` what it tests."""
    kind: str
    source: str
    params: tuple
    args: tuple

    @functools.cached_property
    def fn(self):
        """The program as a callable (the source executed with jax, jnp, lax;
        one function object per Program, so jax.jit's cache hits)."""
        import jax
        import jax.numpy as jnp
        from jax import lax
        env = {"jax": jax, "jnp": jnp, "lax": lax}
        exec(compile(self.source, f"<fuzz {self.kind}>", "exec"), env)   # noqa: S102 -- our own text
        return env["program"]

    def __getstate__(self):
        """Without the cached `fn` (a function made by exec does not pickle:
        `make fuzz --workers` sends programs between processes)."""
        return {k: v for k, v in self.__dict__.items() if k != "fn"}

    def make_args(self, seed: int = 0) -> tuple:
        """The arguments (numpy arrays; dicts for pytree parameters), values
        drawn from `seed`."""
        import ml_dtypes
        rng = np.random.default_rng(seed)
        out: dict = {}
        for a in self.args:
            if a.kind == "mask":
                v = rng.random(a.shape) < 0.7
                if v.ndim:
                    v[..., 0] = True                 # every row keeps a position (softmax of all -inf is NaN)
            elif a.kind == "index":
                v = np.asarray(rng.integers(0, a.hi + 1), np.int32)
            elif a.dtype in INTS:
                m = int(min(4 * a.mag, np.iinfo(a.dtype).max))
                v = rng.integers(-m, m + 1, a.shape).astype(a.dtype)
            else:
                dt = ml_dtypes.bfloat16 if a.dtype == "bfloat16" else a.dtype
                v = (a.mag * rng.uniform(-1, 1, a.shape)).astype(np.float32).astype(dt)
            if len(a.path) == 1:
                out[a.path[0]] = v
            else:
                out.setdefault(a.path[0], {})[a.path[1]] = v
        return tuple(out[p] for p in self.params)

    def reproducer(self, seed: int = 0, backend: str = "hbm-pim", placement: str = "prefer_pim") -> str:
        """A script that replays this program on one backend and placement."""
        return (f"# pimjax fuzz reproducer ({self.kind})\nimport jax, jax.numpy as jnp\nfrom jax import lax\n"
                f"from pimjax.testing.fuzz import Program, Arg, check\n\n{self.source}\n"
                f"prog = Program({self.kind!r}, {self.source!r}, {self.params!r}, {self.args!r})\n"
                f"print(check(prog, {backend!r}, {placement!r}, seed={seed}))\n")


class _Builder:
    """Accumulates a program's lines, parameters and argument leaves."""

    def __init__(self, draw, pytree: bool, mag: float = 1.0):
        self.draw, self.pytree, self.mag = draw, pytree, mag
        self.lines: list[str] = []
        self.args: list[Arg] = []
        self.params: list[str] = []
        self.n = 0

    def arg(self, shape, dtype, kind="normal", hi=0, weight=False) -> str:
        """A new argument leaf; weights go into the dict parameter `p` when
        the program takes a pytree."""
        k = len(self.args)
        if weight and self.pytree:
            if "p" not in self.params:
                self.params.append("p")
            self.args.append(Arg(("p", f"w{k}"), tuple(shape), dtype, kind, hi, self.mag))
            return f'p["w{k}"]'
        name = f"a{k}"
        self.params.append(name)
        self.args.append(Arg((name,), tuple(shape), dtype, kind, hi, self.mag))
        return name

    def let(self, expr: str) -> str:
        name = f"v{self.n}"
        self.n += 1
        self.lines.append(f"    {name} = {expr}")
        return name

    def size(self, hi: int = SMALL) -> int:
        return SIZES[self.draw.int(0, hi)]


def _jdt(dtype: str) -> str:
    return f"jnp.{dtype}"


UNARY_F = ("jnp.tanh({})", "jax.nn.relu({})", "-{}", "jnp.abs({})", "{} * {}", "jax.nn.sigmoid({})",
           "jnp.exp({})", "{} * 0.5", "jnp.maximum({}, 0.25)", "jax.nn.gelu({})", "jnp.sqrt(jnp.abs({}))")
UNARY_I = ("-{}", "jnp.abs({})", "{} * 2", "jnp.maximum({}, 1)", "{} + 3")
BINARY = ("{} + {}", "{} - {}", "{} * {}", "jnp.maximum({}, {})", "jnp.minimum({}, {})")


def _elementwise(b: _Builder, x: str, shape: tuple, dtype: str, steps: int) -> str:
    """A chain of `steps` unary / binary elementwise ops on x; a binary
    op's other operand is a new argument of the full shape or a broadcast
    one (a trailing-axes vector, a 1-sized axis)."""
    unary = UNARY_I if dtype in INTS else UNARY_F
    for _ in range(steps):
        if b.draw.bool() or not shape:
            op = b.draw.choice(unary)
            x = b.let(op.format(x, x) if op.count("{}") == 2 else op.format(x))
        else:
            form = b.draw.int(0, 2)
            if form == 0:
                y = b.arg(shape, dtype)
            elif form == 1:                             # trailing vector, broadcast by rank promotion
                y = b.arg(shape[-1:], dtype, weight=True)
                y = f"{y}[{', '.join(['None'] * (len(shape) - 1) + [':'])}]" if len(shape) > 1 else y
            else:                                      # a 1-sized axis
                ax = b.draw.int(0, len(shape) - 1)
                y = b.arg(tuple(1 if i == ax else s for i, s in enumerate(shape)), dtype)
            op = b.draw.choice(BINARY)
            x = b.let(op.format(x, y) if b.draw.bool() else op.format(y, x))
    return x


def _dot(b: _Builder, dtype: str):
    nb = b.draw.int(0, 2)
    batch = tuple(b.size(6) for _ in range(nb))
    big = BIG if not nb else SMALL                 # tiles past one bank's / channel's share, unbatched
    M, K, N = b.size(big), b.size(big), b.size(SMALL)
    gemv = b.draw.bool() and not nb
    lt, rt = b.draw.bool(), b.draw.bool()       # contraction axis first in lhs / last in rhs
    ls = batch + ((K, M) if lt else (M, K))
    A = b.arg(ls, dtype)
    if gemv:
        X = b.arg((K,), dtype)
        dn = f"((({0 if lt else 1},), (0,)), ((), ()))"
        out = (M,)
        y = b.let(f"lax.dot_general({A}, {X}, {dn})")
    else:
        rs = batch + ((N, K) if rt else (K, N))
        Bn = b.arg(rs, dtype, weight=True)
        bd = tuple(range(nb))
        dn = f"((({nb + (0 if lt else 1)},), ({nb + (1 if rt else 0)},)), ({bd!r}, {bd!r}))"
        out = batch + (M, N)
        y = b.let(f"lax.dot_general({A}, {Bn}, {dn})")
    return y, out


def _reduce(b: _Builder, x: str, shape: tuple, dtype: str):
    ops = ("jnp.sum", "jnp.max", "jnp.min") + (() if dtype in INTS else ("jnp.mean",))
    op = b.draw.choice(ops)
    axes = tuple(i for i in range(len(shape)) if b.draw.bool()) or (len(shape) - 1,)
    keep = b.draw.bool()
    y = b.let(f"{op}({x}, axis={axes!r}, keepdims={keep})")
    out = tuple((1 if i in axes else s) for i, s in enumerate(shape) if keep or i not in axes)
    return y, out


def _layout(b: _Builder, x: str, shape: tuple):
    """A reshape, transpose or broadcast of x."""
    form = b.draw.int(0, 2)
    if form == 0 and len(shape) >= 2:
        perm = list(range(len(shape)))
        for i in range(len(perm) - 1, 0, -1):          # Fisher-Yates through the draws (shrinks to identity)
            j = b.draw.int(0, i)
            perm[i], perm[j] = perm[j], perm[i]
        return b.let(f"jnp.transpose({x}, {tuple(perm)!r})"), tuple(shape[i] for i in perm)
    if form == 1:
        n = math.prod(shape)
        divs = [d for d in range(1, n + 1) if n % d == 0]
        d = b.draw.choice(divs)
        new = (d, n // d)
        return b.let(f"{x}.reshape({new!r})"), new
    k = b.size(5)
    return b.let(f"jnp.broadcast_to({x}[None], {(k,) + tuple(shape)!r})"), (k,) + tuple(shape)


def _conv(b: _Builder, dtype: str):
    g = b.draw.choice((1, 2, 3))
    cin, cout = g * b.size(4), g * b.size(4)
    N = b.draw.choice((1, 2))
    H, W = b.size(9), b.size(9)
    kh, kw = b.draw.int(1, 3), b.draw.int(1, 3)
    s = b.draw.int(1, 2)
    pad = b.draw.choice(('"VALID"', '"SAME"', "((1, 0), (0, 1))"))
    if pad == '"VALID"':
        H, W = max(H, kh), max(W, kw)
    nhwc = b.draw.bool()
    if nhwc:
        x = b.arg((N, H, W, cin), dtype)
        k = b.arg((kh, kw, cin // g, cout), dtype, weight=True)
        dn = '("NHWC", "HWIO", "NHWC")'
    else:
        x = b.arg((N, cin, H, W), dtype)
        k = b.arg((cout, cin // g, kh, kw), dtype, weight=True)
        dn = '("NCHW", "OIHW", "NCHW")'
    y = b.let(f"lax.conv_general_dilated({x}, {k}, ({s}, {s}), {pad}, feature_group_count={g}, "
              f"dimension_numbers={dn})")
    return y


def _attention(b: _Builder, dtype: str):
    B, Hk = b.draw.choice((1, 2)), b.draw.choice((1, 2, 3))
    G = b.draw.choice((1, 2, 4))
    D, S = b.size(12), b.size()
    q = b.arg((B, Hk * G, D), dtype)
    K = b.arg((B, Hk, S, D), dtype, weight=True)
    V = b.arg((B, Hk, S, D), dtype, weight=True)
    if G > 1:
        K, V = b.let(f"jnp.repeat({K}, {G}, axis=1)"), b.let(f"jnp.repeat({V}, {G}, axis=1)")
    s = b.let(f'jnp.einsum("bhd,bhnd->bhn", {q}, {K}) * {1 / math.sqrt(D):.6g}')
    mask = b.draw.int(0, 3)
    if mask == 1:
        m = b.arg((B, 1, S), "bool", kind="mask")
        s = b.let(f"jnp.where({m}, {s}, -1e9)")
    elif mask == 2:
        m = b.arg((S,), "bool", kind="mask")
        s = b.let(f"jnp.where({m}[None, None, :], {s}, -jnp.inf)")
    elif mask == 3:
        pos = b.let(f"lax.broadcasted_iota(jnp.int32, {s}.shape, 2)")
        s = b.let(f"jnp.where({pos} < {max(1, S // 2)}, {s}, -jnp.inf)")
    p = b.let(f"jax.nn.softmax({s}, axis=-1)")
    return b.let(f'jnp.einsum("bhn,bhnd->bhd", {p}, {V})'), (B, Hk * G, D)


def _update(b: _Builder, dtype: str):
    """A KV-cache step: write rows at a position (a constant or a data
    argument, at times past the end or negative: jax clamps the start), then a
    product with the cache."""
    S, D = b.size(), b.size(12)
    r = min(S, b.draw.choice((1, 1, 2, 3)))
    cache = b.arg((S, D), dtype)
    rows = b.arg((r, D), dtype)
    at = b.arg((), "int32", kind="index", hi=S) if b.draw.bool() else str(b.draw.int(-1, S))
    c = b.let(f"lax.dynamic_update_slice({cache}, {rows}, ({at}, 0))")
    x = b.arg((D,), dtype, weight=True)
    return c, b.let(f"{c} @ {x}")


def _mlp(b: _Builder, dtype: str):
    """Two products with an activation between (an MLP block), the second
    weight maybe transposed at the use."""
    B, D, H, O = b.size(6), b.size(BIG), b.size(), b.size(BIG)
    x = b.arg((B, D) if B > 1 else (D,), dtype)
    w1 = b.arg((D, H), dtype, weight=True)
    h = b.let(f"{x} @ {w1}")
    h = b.let(f"jax.nn.relu({h})" if dtype in FLOATS else f"jnp.maximum({h}, 0)")
    if b.draw.bool():
        w2 = b.arg((O, H), dtype, weight=True)
        return b.let(f"{h} @ {w2}.T")
    w2 = b.arg((H, O), dtype, weight=True)
    return b.let(f"{h} @ {w2}")


KINDS = ("dot", "elementwise", "reduce", "layout", "conv", "attention", "update", "mlp")
# value magnitudes (index 0 first): most programs in [-1, 1]; some past fp16's and int8's ranges
MAGNITUDES = (1.0, 1.0, 1.0, 8.0, 300.0)


def program(draw) -> Program:
    """A random program (see the module docstring); `draw` gives every choice."""
    kind = draw.choice(KINDS)
    float_only = kind in ("attention", "conv")
    dtype = draw.choice(FLOATS if float_only else DTYPES)
    b = _Builder(draw, pytree=draw.bool(), mag=draw.choice(MAGNITUDES))
    rets: list[str] = []
    if kind == "dot":
        y, shape = _dot(b, dtype)
        y = _elementwise(b, y, shape, dtype, draw.int(0, 2))
        if draw.bool():
            y, shape = _reduce(b, y, shape, dtype)
        rets.append(y)
    elif kind == "elementwise":
        shape = tuple(b.size(10) for _ in range(draw.int(1, 3)))
        x = b.arg(shape, dtype)
        rets.append(_elementwise(b, x, shape, dtype, draw.int(1, 4)))
    elif kind == "reduce":
        shape = tuple(b.size(10) for _ in range(draw.int(1, 3)))
        x = _elementwise(b, b.arg(shape, dtype), shape, dtype, draw.int(0, 1))
        rets.append(_reduce(b, x, shape, dtype)[0])
    elif kind == "layout":
        shape = tuple(b.size(9) for _ in range(draw.int(1, 3)))
        x, shape = _layout(b, b.arg(shape, dtype), shape)
        if draw.bool():                                  # a product of the rearranged value
            w = b.arg((shape[-1], b.size(9)), dtype, weight=True)
            rets.append(b.let(f"{x} @ {w}"))
        else:
            rets.append(_elementwise(b, x, shape, dtype, draw.int(1, 2)))
    elif kind == "conv":
        y = _conv(b, dtype)
        rets.append(b.let(f"jax.nn.relu({y})") if draw.bool() else y)
    elif kind == "mlp":
        rets.append(_mlp(b, dtype))
    elif kind == "attention":
        rets.append(_attention(b, dtype)[0])
    else:
        c, y = _update(b, dtype)
        rets += [y, c]                                   # the updated cache is returned (threaded)
    ret = rets[0] if len(rets) == 1 else "(" + ", ".join(rets) + ")"
    src = f"def program({', '.join(b.params)}):\n" + "\n".join(b.lines) + f"\n    return {ret}\n"
    return Program(kind, src, tuple(b.params), tuple(b.args))


# --- checking ------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Result:
    """One program on one backend and placement: the outcome (`OUTCOMES`)
    and the detail (the error, the largest difference, the warning)."""
    outcome: str
    detail: str = ""
    on_pim: int = 0             # ops the compiled program ran on PIM (fused or md-dp included)


class _Timeout(Exception):
    pass


@contextlib.contextmanager
def _deadline(seconds: float | None):
    if not seconds or not hasattr(signal, "SIGALRM") or signal.getsignal(signal.SIGALRM) not in (
            signal.SIG_DFL, None):
        yield
        return

    def on_alarm(*_):
        raise _Timeout(f"no result after {seconds:.0f} s")
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _scale(prog: Program, args) -> float:
    """The largest finite magnitude among the program's inputs and every
    value it names (in jax): an fp16 / bf16 sum's error is relative to its
    terms, not to a result that cancelled."""
    import jax
    import re
    names = re.findall(r"^    (v\d+) = ", prog.source, re.M)
    body = prog.source[:prog.source.rindex("    return ")] + f"    return [{', '.join(names)}]\n"
    every = dataclasses.replace(prog, source=body).fn
    best = [1.0]
    for x in jax.tree_util.tree_leaves((args, jax.jit(every)(*args))):
        x = np.asarray(x)
        if x.dtype.kind in "fiu" or x.dtype.name == "bfloat16":
            x = np.asarray(x, np.float64)
            x = x[np.isfinite(x)]
            if x.size:
                best.append(float(np.max(np.abs(x))))
    return max(best)


def _names_cause(messages: list[str]) -> bool:
    return any(("overflow" in m or "underflow" in m or "inf / NaN" in m) for m in messages)


CONVERTED = "converted to the units' type"      # the words of pim_jit's conversion PrecisionWarning
# call-like primitives whose body `at_unit_precision` evaluates equation by equation (a scan's or a
# while's body is not a call: bound whole, its inner values unrounded)
_INLINED = ("pjit", "jit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call",
            "custom_vjp_call_jaxpr", "remat", "checkpoint")


def at_unit_precision(fn, unit):
    """`fn` as jax computes it on units of type `unit` (a numpy dtype:
    float16, bfloat16): every floating value each primitive reads and
    writes rounded to `unit` and back to its own dtype, one primitive at a
    time (no fusion may skip a rounding).  Returns a callable with `fn`'s
    arguments and result structure.  The reference that tells a conversion's
    precision loss from a wrong result: pimjax converts an op's data to its
    units' type, computes there, and converts the result back."""
    import jax
    from jax.extend.core import Literal

    def rounded(x):
        a = np.asarray(x)
        if not jax.numpy.issubdtype(a.dtype, jax.numpy.floating) or a.dtype == unit:    # bf16 included
            return x
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            return jax.numpy.asarray(a.astype(unit).astype(a.dtype))

    def run(jaxpr, consts, args):
        env = dict(zip(jaxpr.constvars, consts))
        env.update(zip(jaxpr.invars, args))

        def read(v):
            return v.val if isinstance(v, Literal) else env[v]
        for e in jaxpr.eqns:
            ins = [rounded(read(v)) for v in e.invars]
            sub = next((e.params[k] for k in ("jaxpr", "call_jaxpr", "fun_jaxpr") if k in e.params), None)
            if e.primitive.name in _INLINED and sub is not None:
                outs = run(getattr(sub, "jaxpr", sub), getattr(sub, "consts", ()), ins)
            else:
                outs = e.primitive.bind(*ins, **e.params)
                outs = outs if e.primitive.multiple_results else [outs]
            env.update((v, rounded(x)) for v, x in zip(e.outvars, outs))
        return [read(v) for v in jaxpr.outvars]

    def f(*args):
        closed, shape = jax.make_jaxpr(fn, return_shape=True)(*args)
        out = run(closed.jaxpr, closed.consts, jax.tree_util.tree_leaves(args))
        return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(shape), out)
    return f


def compare(got, want, rtol: float, scale: float) -> str:
    """'' when every leaf of `got` has `want`'s structure, shape and dtype and
    |got - want| <= rtol * (|want| + scale) (NaN where jax has NaN; exact for
    integers), else what differs."""
    import jax
    gl, gt = jax.tree_util.tree_flatten(got)
    wl, wt = jax.tree_util.tree_flatten(want)
    if gt != wt:
        return f"structure {gt} != jax's {wt}"
    for k, (g, w) in enumerate(zip(gl, wl)):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"leaf {k}: {g.dtype}{list(g.shape)} != jax's {w.dtype}{list(w.shape)}"
        if w.dtype.kind in "biu":
            bad = g != w
        else:
            g64, w64 = np.asarray(g, np.float64), np.asarray(w, np.float64)
            with np.errstate(invalid="ignore"):
                bad = ~((np.abs(g64 - w64) <= rtol * (np.abs(w64) + scale)) | (g64 == w64) |
                        (np.isnan(g64) & np.isnan(w64)))
        if bad.any():
            i = tuple(int(j) for j in np.argwhere(bad)[0])
            return (f"leaf {k}: {int(bad.sum())} of {bad.size} differ; at {i} got {g[i]!r}, jax {w[i]!r} "
                    f"(rtol {rtol:g}, scale {scale:g})")
    return ""


def _ops_named(fn, args) -> set[str]:
    import jax
    names = set()

    def walk(jaxpr):
        for e in jaxpr.eqns:
            names.add(e.primitive.name)
            for p in e.params.values():
                if hasattr(p, "jaxpr"):
                    walk(p.jaxpr if hasattr(p.jaxpr, "eqns") else p.jaxpr.jaxpr)
    walk(jax.make_jaxpr(fn)(*args).jaxpr)
    return names


def check(prog: Program, backend: str, placement: str, seed: int = 0, tuner=None,
          timeout_s: float | None = 300.0, reference=None, reference2=None) -> Result:
    """Run `prog` through `pim_jit` on `backend` (`BACKEND_OPTIONS`) under
    `placement` and classify the result against `jax.jit` (module docstring).
    Two calls of one compiled function: the arguments of `seed` as numpy
    arrays, then those of `seed + 1` as jax arrays (a stale resident weight
    or a cached operand check shows there).  reference, reference2:
    (want, scale) of the two calls when already computed (`reference_of`)."""
    import jax
    from pimjax.api import pim_jit
    from pimjax.hw.presets import get_backend
    from pimjax.precision import tolerance, unit_dtype
    fn = prog.fn
    be = get_backend(backend, **BACKEND_OPTIONS[backend])
    rtol = tolerance(be, [a.dtype for a in prog.args if a.kind == "normal"])
    calls = [(prog.make_args(seed), reference),
             (jax.tree_util.tree_map(jax.numpy.asarray, prog.make_args(seed + 1)), reference2)]
    f = pim_jit(fn, backend=be, placement=placement, tuner=tuner)
    out = Result("equal")
    for k, (args, ref) in enumerate(calls):
        want, scale = ref if ref is not None else reference_of(prog, seed + k)
        r = _one_call(f, fn, args, want, rtol, scale, timeout_s, unit_dtype(be))
        if k:
            r = dataclasses.replace(r, detail=f"second call: {r.detail}" if r.detail else "")
        if r.outcome != "equal" or k == 0:
            out = r
        if r.outcome != "equal":
            break
    return out


def _one_call(f, fn, args, want, rtol, scale, timeout_s, unit=None) -> Result:
    import jax
    from pimjax.errors import PimCompileError, PrecisionWarning
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with _deadline(timeout_s):
                got = jax.block_until_ready(f(*args))
        except PimCompileError as e:
            msg = str(e)
            named = [n for n in _ops_named(fn, args) if n in msg]
            return Result("compile_error" if named else "unclear_error", msg.splitlines()[0][:300])
        except _Timeout as e:
            return Result("hang", str(e))
        except Exception as e:      # noqa: BLE001 -- every other exception is a failure to report
            tb = traceback.format_exception(type(e), e, e.__traceback__)
            where = [ln.strip() for ln in tb if "pimjax" in ln and "testing/fuzz" not in ln]
            return Result("crash", f"{type(e).__name__}: {str(e)[:300]} | {where[-1] if where else ''}")
    msgs = [str(w.message) for w in caught if issubclass(w.category, PrecisionWarning)]
    on_pim = sum(o.placement != "host" for c in f.compiles() for o in c.report().ops)
    diff = compare(got, want, rtol, scale)
    if not diff:
        return Result("equal", "", on_pim)
    if _names_cause(msgs):
        return Result("precision", f"{diff} | {msgs[-1][:200]}", on_pim)
    if "differ" not in diff:                        # wrong structure, shape or dtype
        return Result("crash", diff, on_pim)
    # jax.jit's fusions may round differently from jax op by op where an fp16 value passes 65504
    # (seed 10036: a score jax.jit turns into inf, then NaN, is finite op by op); both are jax
    with jax.disable_jit():      # jax arrays: a numpy argument's `a @ b` would be numpy's matmul
        eager = fn(*jax.tree_util.tree_map(jax.numpy.asarray, args))
    if not compare(got, eager, rtol, scale):
        return Result("equal", f"{EAGER}; jax.jit: {diff}", on_pim)
    # data converted to the units' type keeps that type's precision, and a sum whose terms cancel
    # keeps it relative to the terms (seed 38502: fp16 terms of 8.4e6 summing to -2 749 in jax, +3 456
    # on Newton's bf16 units); the stated conversion is the cause when jax at the units' precision agrees
    converted = [m for m in msgs if CONVERTED in m]
    if converted and unit is not None and not compare(got, at_unit_precision(fn, unit)(*args), rtol, scale):
        return Result("precision", f"{diff}; jax at {unit} precision agrees | {converted[-1][:200]}", on_pim)
    return Result("mismatch", diff + (f" | warned: {msgs[-1][:200]}" if msgs else ""), on_pim)


def reference_of(prog: Program, seed: int = 0):
    """(jax.jit's result, `_scale`) for the program's arguments of `seed`."""
    import jax
    fn, args = prog.fn, prog.make_args(seed)
    return jax.jit(fn)(*args), _scale(prog, args)


def check_all(prog: Program, seed: int = 0, backends=BACKENDS, placements=PLACEMENTS, tuner=None,
              timeout_s: float | None = 300.0) -> dict:
    """{(backend, placement): Result} for every pair; a program jax itself
    rejects gives {("jax", "-"): Result("invalid", ...)} (a generator bug)."""
    try:
        ref, ref2 = reference_of(prog, seed), reference_of(prog, seed + 1)
    except Exception as e:          # noqa: BLE001
        return {("jax", "-"): Result("invalid", f"{type(e).__name__}: {str(e)[:300]}")}
    return {(b, p): check(prog, b, p, seed, tuner, timeout_s, ref, ref2) for b in backends for p in placements}


# --- the command line ----------------------------------------------------------------------------
def flat_tuner():
    """A tuner whose stand-in model predicts equal cycles for every draft
    (top-1: the first draft), for runs that want speed over the cost model."""
    from pimjax.search.tuner import Tuner

    class Flat:
        def predict(self, features):
            return np.ones(len(features))
    return Tuner(model=Flat(), top_k=1, include_baseline=False)


def _worker(task):
    seed, backends, placements, tuner, timeout_s = task
    t = time.perf_counter()
    prog = program(RandomDraw(seed))
    res = check_all(prog, seed, backends, placements, flat_tuner() if tuner == "flat" else tuner, timeout_s)
    return seed, prog, res, time.perf_counter() - t


def _init_worker(cache_dir):
    _setup(cache_dir)


def _setup(cache_dir):
    import jax
    jax.config.update("jax_numpy_dtype_promotion", "strict")
    jax.config.update("jax_numpy_rank_promotion", "allow")
    if cache_dir:       # the executor's many small XLA programs: kept between runs
        os.makedirs(cache_dir, exist_ok=True)
        jax.config.update("jax_compilation_cache_dir", cache_dir)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


def _keyed(d: dict) -> list[str]:
    """{(outcome, backend, placement): n} as the counts file writes it: "outcome|backend|placement=n"."""
    return ["|".join(k) + f"={v}" for k, v in sorted(d.items())]


def _unkeyed(rows: list[str]) -> dict:
    out = {}
    for row in rows:
        key, n = row.rsplit("=", 1)
        out[tuple(key.split("|"))] = int(n)
    return out


def _ranges(seeds: set) -> list[list[int]]:
    """Sorted seeds as [first, last] runs (a 10 000-program run's file stays small)."""
    out: list[list[int]] = []
    for s in sorted(seeds):
        if out and s == out[-1][1] + 1:
            out[-1][1] = s
        else:
            out.append([s, s])
    return out


def _seeds(ranges: list[list[int]]) -> set[int]:
    """The seeds of `_ranges`' [first, last] runs."""
    return {s for lo, hi in ranges for s in range(lo, hi + 1)}


def _resumed(path: str, run: dict) -> dict | None:
    """The state of the run `path` records, to continue (None: no file yet).
    `n` may differ (a run continued to more programs).  A file of another run
    (another first seed, backends, placements or tuner), or one
    without the seeds it has done (written before `--resume` existed), is a
    ValueError naming the difference: its counts cannot be added to."""
    import json
    if not os.path.exists(path):
        return None
    with open(path) as fh:
        old = json.load(fh)
    if "done" not in old:
        raise ValueError(f"{path} does not record which programs it ran: it cannot be resumed")
    # the same programs (first seed, backends, placements, tuner); n may grow: a run continued further
    diff = [f"{k} {old.get(k)!r} (now {v!r})" for k, v in run.items() if k != "n" and old.get(k) != v]
    if diff:
        raise ValueError(f"{path} records another run: " + ", ".join(diff))
    return dict(done=_seeds(old["done"]), seconds=float(old["seconds"]), counts=_unkeyed(old["counts"]),
                on_pim=_unkeyed(old["on_pim"]), eager=_unkeyed(old["eager"]),
                rechecked=old.get("rechecked", []))


def recheck(counts_path: str, log_path: str, timeout_s: float | None = 300.0, say=print) -> int:
    """Run again, on the code as it is now, the failures `log_path` (the
    `--log` JSON lines) records for the run `counts_path` holds, and move
    each from its old outcome to the new one in that file's counts, listing
    it under "rechecked" ({seed, backend, placement, was, now, detail}): a
    run's record after the bugs it found were fixed.  A failure already
    rechecked is skipped; lines of other runs' seeds or backends are
    ignored; "on_pim" is kept (a fix of a value does not move an op).
    Returns the number of failures the counts still hold (0: none)."""
    import json
    from pimjax.durable import atomic_write, read_records
    with open(counts_path) as fh:
        rec = json.load(fh)
    done = _seeds(rec.get("done", []))
    counts = _unkeyed(rec["counts"])
    rechecked = list(rec.get("rechecked", []))
    seen = {(r["seed"], r["backend"], r["placement"]) for r in rechecked}
    todo = []
    for row in read_records(log_path, "fuzz failure log"):     # a torn line (a killed run) skipped, warned
        key = (row["seed"], row["backend"], row["placement"])
        if (row["seed"] in done and row["backend"] in rec["backends"] and
                row["placement"] in rec["placements"] and key not in seen):
            seen.add(key)
            todo.append(row)
    tuner = flat_tuner() if rec["tuner"] == "flat" else None
    for row in todo:
        seed, b, p = row["seed"], row["backend"], row["placement"]
        prog = program(RandomDraw(seed))
        r = check(prog, b, p, seed, tuner, timeout_s)
        old = (row["outcome"], b, p)
        if counts.get(old, 0) < 1:
            raise ValueError(f"{counts_path} holds no {row['outcome']} on {b} {p} for seed {seed} of {log_path}")
        counts[old] -= 1
        counts[(r.outcome, b, p)] = counts.get((r.outcome, b, p), 0) + 1
        rechecked.append(dict(seed=seed, backend=b, placement=p, was=row["outcome"], now=r.outcome,
                              detail=r.detail[:300]))
        say(f"seed {seed} {b} {p}: {row['outcome']} -> {r.outcome}")
    rec.update(counts=_keyed({k: v for k, v in counts.items() if v}), rechecked=rechecked)
    atomic_write(counts_path, json.dumps(rec))
    return sum(v for k, v in counts.items() if k[0] in FAIL_OUTCOMES)


def main(argv=None) -> int:
    """`python -m pimjax.testing.fuzz N [--seed S] [--workers W] ...`: run
    programs S .. S+N-1, print the outcome table; exit 1 on any failure."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", type=int, nargs="?", default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--placements", default=",".join(PLACEMENTS))
    ap.add_argument("--tuner", default="predict", help="'predict' (the shipped cost model) or 'flat'")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--cache-dir", default=os.path.join(os.path.expanduser("~"), ".cache", "pimjax", "fuzz-xla"))
    ap.add_argument("--log", default=None, help="append one line per failure (checksummed JSON, "
                    "pimjax.durable.append_records) to this file")
    ap.add_argument("--counts", default=None, help="keep the running counts (JSON) in this file, "
                                                    "rewritten atomically after every program")
    ap.add_argument("--resume", action="store_true", help="with --counts: continue the run that file "
                    "records (same first seed, backends, placements, tuner; N may be larger), skipping the "
                    "programs it has done and adding to its counts")
    ap.add_argument("--recheck", action="store_true", help="with --counts and --log: run the failures the "
                    "log records for that run again on the current code, and move them to their new outcome "
                    "in the counts file (listed under 'rechecked')")
    a = ap.parse_args(argv)
    if a.resume and not a.counts:
        ap.error("--resume needs --counts FILE (the run to continue)")
    if a.recheck:
        if not (a.counts and a.log):
            ap.error("--recheck needs --counts FILE and --log FILE (the run, and its failures)")
        _setup(a.cache_dir)
        try:
            return 1 if recheck(a.counts, a.log, a.timeout) else 0
        except (OSError, ValueError, KeyError) as e:      # a file of another run, or not a run's record
            ap.error(f"--recheck: {type(e).__name__}: {e}")
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table
    import json
    from pimjax.durable import append_records, atomic_write
    backends, placements = tuple(a.backends.split(",")), tuple(a.placements.split(","))
    tuner = None if a.tuner == "predict" else a.tuner
    run = dict(seed=a.seed, n=a.n, backends=list(backends), placements=list(placements), tuner=a.tuner)
    try:
        prior = _resumed(a.counts, run) if a.resume else None
    except ValueError as e:
        ap.error(str(e))
    done_seeds = set(prior["done"]) if prior else set()
    tasks = [(s, backends, placements, tuner, a.timeout) for s in range(a.seed, a.seed + a.n) if s not in done_seeds]
    console = Console()
    counts: dict = dict(prior["counts"]) if prior else {}
    pim_runs: dict = dict(prior["on_pim"]) if prior else {}
    eager_runs: dict = dict(prior["eager"]) if prior else {}
    failures = []
    before_s = prior["seconds"] if prior else 0.0
    if prior:
        console.print(f"resuming {a.counts}: {len(done_seeds)} of {a.n} programs done, {len(tasks)} to run")
    t0 = time.perf_counter()
    _setup(a.cache_dir)
    if a.workers > 1:
        import multiprocessing as mp
        pool = mp.get_context("spawn").Pool(a.workers, _init_worker, (a.cache_dir,), maxtasksperchild=200)
        results = pool.imap_unordered(_worker, tasks)
    else:
        pool, results = None, map(_worker, tasks)
    cols = (TextColumn("fuzz"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[rate]:.2f} prog/s  failures {task.fields[fails]}"))
    with Progress(*cols, console=console) as bar:
        job = bar.add_task("fuzz", total=a.n, completed=len(done_seeds), rate=0.0, fails=0)
        done = 0
        for seed, prog, res, _dt in results:
            done += 1
            done_seeds.add(seed)
            for (b, p), r in res.items():
                counts[(r.outcome, b, p)] = counts.get((r.outcome, b, p), 0) + 1
                pim_runs[(b, p)] = pim_runs.get((b, p), 0) + (r.on_pim > 0)
                if r.detail.startswith(EAGER):
                    eager_runs[(b, p)] = eager_runs.get((b, p), 0) + 1
                if r.outcome not in OK_OUTCOMES:
                    failures.append((seed, prog, b, p, r))
                    console.print(f"[red]FAIL[/] seed {seed} {prog.kind} {b} {p}: {r.outcome}: {r.detail}")
                    if a.log:       # checksummed lines: `--recheck` reads them back past a torn tail
                        append_records(a.log, [dict(seed=seed, kind=prog.kind, backend=b, placement=p,
                                                    outcome=r.outcome, detail=r.detail, source=prog.source)])
            bar.update(job, advance=1, rate=done / (time.perf_counter() - t0), fails=len(failures))
            if a.counts:            # a run stopped early keeps its figures, and `--resume` continues it
                atomic_write(a.counts, json.dumps(dict(
                    run, programs=len(done_seeds), done=_ranges(done_seeds),
                    seconds=before_s + time.perf_counter() - t0, workers=a.workers,
                    counts=_keyed(counts), on_pim=_keyed(pim_runs), eager=_keyed(eager_runs),
                    **({"rechecked": prior["rechecked"]} if prior and prior["rechecked"] else {}))))
    if pool is not None:
        pool.close()
    elapsed = before_s + time.perf_counter() - t0
    ran = len(done_seeds)
    table = Table(title=f"{ran} programs (seeds {a.seed}..{a.seed + a.n - 1}) in {elapsed:.0f} s: "
                        f"{ran / elapsed:.2f} programs/s, {a.workers} worker(s), tuner {a.tuner}"
                        + (" (resumed)" if prior else ""))
    table.add_column("backend")
    table.add_column("placement")
    shown = [o for o in OUTCOMES if o in OK_OUTCOMES or any(k[0] == o for k in counts)]
    for o in shown:
        table.add_column(o, justify="right")
    table.add_column("ran an op on PIM", justify="right")
    for b in backends:
        for p in placements:
            table.add_row(b, p, *(str(counts.get((o, b, p), 0)) for o in shown), str(pim_runs.get((b, p), 0)))
    eager = sum(v for k, v in eager_runs.items())
    if eager:
        table.caption = (f"{eager} 'equal' result(s) equal jax op by op where jax.jit's fused rounding differs: "
                         + ", ".join(f"{b} {p} {v}" for (b, p), v in sorted(eager_runs.items())))
    if counts.get(("invalid", "jax", "-")):
        table.add_row("jax", "-", f"{counts[('invalid', 'jax', '-')]} programs jax rejects (generator bugs)")
    console.print(table)
    for seed, prog, b, p, r in failures[:5]:
        console.print(f"--- seed {seed}, {b}, {p}: {r.outcome}\n{prog.reproducer(seed, b, p)}")
    # a resumed run's earlier sittings count too: their failures are in `counts`, not in `failures`
    return 1 if failures or any(k[0] in FAIL_OUTCOMES for k in counts) else 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["BACKENDS", "PLACEMENTS", "BACKEND_OPTIONS", "OUTCOMES", "OK_OUTCOMES", "FAIL_OUTCOMES", "Arg",
           "Program", "Result", "RandomDraw", "HypothesisDraw", "program", "programs", "check", "check_all",
           "compare", "reference_of", "at_unit_precision", "flat_tuner", "recheck", "main"]
