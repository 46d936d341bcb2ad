"""The fuzzer's checker: `check(program, backend, placement)` runs a generated program
(`generate.py`) through `pim_jit` and classifies the result against `jax.jit` (`OUTCOMES`).

The allowed outcomes:

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
"""
from __future__ import annotations

import contextlib
import dataclasses
import signal
import traceback
import warnings

import numpy as np

from .generate import FuzzProgram

BACKENDS = ("hbm-pim", "attacc", "newton", "upmem")
PLACEMENTS = ("prefer_pim", "auto")
# small systems: a fuzz program's op fits a few channels, and compiles stay fast
BACKEND_OPTIONS = {"hbm-pim": dict(channels=4), "attacc": dict(channels=2), "newton": dict(channels=2),
                   "upmem": dict(dpus=64)}
OK_OUTCOMES = ("equal", "precision", "compile_error")
FAIL_OUTCOMES = ("mismatch", "unclear_error", "crash", "hang")
OUTCOMES = OK_OUTCOMES + FAIL_OUTCOMES
EAGER = "equal to jax op by op"     # the detail of an "equal" that jax.jit's fused rounding differs from

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


def _scale(prog: FuzzProgram, args) -> float:
    """The largest finite magnitude among the program's inputs and every
    value it names (in jax): an fp16 / bf16 sum's error is relative to its
    terms, not to a result that cancelled."""
    import re

    import jax
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


def check(prog: FuzzProgram, backend: str, placement: str, seed: int = 0, tuner=None,
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
            where = [ln.strip() for ln in tb if "pimjax" in ln and "pimjax/testing/" not in ln]   # not the fuzzer's own frames
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


def reference_of(prog: FuzzProgram, seed: int = 0):
    """(jax.jit's result, `_scale`) for the program's arguments of `seed`."""
    import jax
    fn, args = prog.fn, prog.make_args(seed)
    return jax.jit(fn)(*args), _scale(prog, args)


def check_all(prog: FuzzProgram, seed: int = 0, backends=BACKENDS, placements=PLACEMENTS, tuner=None,
              timeout_s: float | None = 300.0) -> dict:
    """{(backend, placement): Result} for every pair; a program jax itself
    rejects gives {("jax", "-"): Result("invalid", ...)} (a generator bug)."""
    try:
        ref, ref2 = reference_of(prog, seed), reference_of(prog, seed + 1)
    except Exception as e:          # noqa: BLE001
        return {("jax", "-"): Result("invalid", f"{type(e).__name__}: {str(e)[:300]}")}
    return {(b, p): check(prog, b, p, seed, tuner, timeout_s, ref, ref2) for b in backends for p in placements}
