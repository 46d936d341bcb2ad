"""The fuzzer's program generator: random `jnp` programs (`program(draw)`: a `FuzzProgram`, its
source text and `ArgSpec`s) from the primitives pimjax traces -- dot_general with batch
dimensions, reductions, elementwise chains with broadcasts, reshapes / transposes, convolutions
(stride, padding, groups), attention (masks, GQA) and `lax.dynamic_update_slice` into a cache;
shapes include 1, primes and non-powers of two, dtypes float16 / bfloat16 / float32 / int8 /
int32, and some arguments are pytrees (a dict of weights).  `draw` is any object with
`int(lo, hi)`, `choice(seq)`, `bool()`: `RandomDraw` (a seeded `random.Random`: `make fuzz`) or
`HypothesisDraw` (hypothesis' `data`: the test suite, which shrinks a failure to its smallest
program).  The names differ from the IR's (`trace.ir.Arg`, `lower.Program`) on purpose.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import random

import numpy as np

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
    """The hypothesis strategy of `FuzzProgram`s (shrinks through its draws)."""
    from hypothesis import strategies as st
    return st.data().map(lambda data: program(HypothesisDraw(data)))


# --- programs ------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ArgSpec:
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
class FuzzProgram:
    """A generated program: `source` defines `def program(<params>)`;
    `args` the leaves of its arguments (`make_args`); `kind` what it tests."""
    kind: str
    source: str
    params: tuple
    args: tuple

    @functools.cached_property
    def fn(self):
        """The program as a callable (the source executed with jax, jnp, lax;
        one function object per FuzzProgram, so jax.jit's cache hits)."""
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
                f"from pimjax.testing.fuzz import FuzzProgram, ArgSpec, check\n\n{self.source}\n"
                f"prog = FuzzProgram({self.kind!r}, {self.source!r}, {self.params!r}, {self.args!r})\n"
                f"print(check(prog, {backend!r}, {placement!r}, seed={seed}))\n")


class _Builder:
    """Accumulates a program's lines, parameters and argument leaves."""

    def __init__(self, draw, pytree: bool, mag: float = 1.0):
        self.draw, self.pytree, self.mag = draw, pytree, mag
        self.lines: list[str] = []
        self.args: list[ArgSpec] = []
        self.params: list[str] = []
        self.n = 0

    def arg(self, shape, dtype, kind="normal", hi=0, weight=False) -> str:
        """A new argument leaf; weights go into the dict parameter `p` when
        the program takes a pytree."""
        k = len(self.args)
        if weight and self.pytree:
            if "p" not in self.params:
                self.params.append("p")
            self.args.append(ArgSpec(("p", f"w{k}"), tuple(shape), dtype, kind, hi, self.mag))
            return f'p["w{k}"]'
        name = f"a{k}"
        self.params.append(name)
        self.args.append(ArgSpec((name,), tuple(shape), dtype, kind, hi, self.mag))
        return name

    def let(self, expr: str) -> str:
        name = f"v{self.n}"
        self.n += 1
        self.lines.append(f"    {name} = {expr}")
        return name

    def size(self, hi: int = SMALL) -> int:
        return SIZES[self.draw.int(0, hi)]


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


def program(draw) -> FuzzProgram:
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
    return FuzzProgram(kind, src, tuple(b.params), tuple(b.args))
