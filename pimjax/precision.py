"""The precision policy: data wider than a backend's units, and values they cannot hold.

Policy ("nothing silently wrong"):

* Allowed by default: floating data wider than the units' type (float32 /
  float64 on fp16 units -- HBM-PIM, AttAcc -- or bf16 units -- Newton) runs on
  PIM converted to the units' type; that is what the hardware does with it.
  `Compiled` warns once (`PrecisionWarning`, naming each converted op and its
  dtypes) and the report states the conversion per op (`precision`, e.g.
  "float32 -> float16").  Data the units cannot hold exactly at all
  (integers on float units, floats on integer units, complex anywhere) never
  runs on PIM (`partition.verify.op_support`).
* `pim_jit(..., precision="strict")` refuses every conversion: an op that
  would run converted raises `PimCompileError` naming it, its source line and
  the dtypes.
* Every call checks the values a PIM op ran on (`check_values`): finite
  operands beyond the units' largest value (65504 in fp16) that would turn
  into inf, nonzero operands that round to 0 (below ~3e-8 in fp16), and
  inf / NaN results where `jax` gives another value (an fp16 running sum
  that overflowed: rows of +-60 000 summing to NaN where `jax.jit` gives 0).
  Each is a `PrecisionWarning` and the report's per-op `saturation`; the
  value is returned as the units computed it, never silently replaced.

Integer units (UPMEM) run only integer data of at most their width, so no
conversion happens there; nothing is checked.
"""
from __future__ import annotations

import weakref

import ml_dtypes
import numpy as np

PRECISIONS = ("convert", "strict")


def unit_dtype(backend) -> np.dtype | None:
    """The numpy dtype a backend's units compute in, for floating units
    (float16 / bfloat16 / float32); None for integer units."""
    name = backend.core.dtype
    if name.startswith("int"):
        return None
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def significant_bits(unit) -> int:
    """The significant bits of a floating type (the implicit one counted):
    float16 11, bfloat16 8, float32 24.  A value converted to it keeps a
    relative error up to 2**-bits; a sum whose terms cancel keeps that
    error relative to its terms' magnitude, not to its result."""
    return int(ml_dtypes.finfo(unit).nmant) + 1


def _float(dt) -> bool:
    try:
        dt = np.dtype(dt)
    except TypeError:
        return False
    return dt.kind == "f" or dt == np.dtype(ml_dtypes.bfloat16)


def conversion(dtypes, backend) -> str:
    """'' when every floating dtype in `dtypes` fits the backend's units, else
    the conversion in words ("float32 -> float16"): a dtype is converted when
    it is floating and not the units' type (wider, or another 16-bit format:
    float16 data on bf16 units loses mantissa, bf16 on fp16 loses range)."""
    unit = unit_dtype(backend)
    if unit is None:
        return ""
    wide = sorted({str(np.dtype(d)) for d in dtypes if _float(d) and np.dtype(d) != unit})
    return f"{', '.join(wide)} -> {unit}" if wide else ""


def op_dtypes(graph, op) -> list:
    """The dtypes of the data an op's PIM units compute on: the operands its
    body reads (a reduction's or contraction's epilogue runs at the host
    merge) and its results."""
    body = set(op.body_operands) if op.kind in ("reduction", "contraction") else set(range(len(op.operands)))
    return [graph.values[a.value].dtype for k, a in enumerate(op.operands) if a.index_map and k in body] + \
        [graph.values[r.value].dtype for r in op.results]


def _count(mask) -> int:
    return int(np.count_nonzero(mask))


def check_operand(x, unit: np.dtype) -> list[str]:
    """What converting one operand to `unit` does to it: finite values that
    overflow to inf, nonzero values that underflow to 0 (empty if nothing)."""
    a = np.asarray(x)
    if not _float(a.dtype) or a.dtype == unit or a.size == 0:
        return []
    info = ml_dtypes.finfo(unit)
    # the common case in three reductions: every magnitude inside the unit's range (a full cast of
    # a 64 MB weight per call costs more); the exact counts below only when one may not be
    hi = max(float(np.max(a)), -float(np.min(a)))       # NaN / inf: the exact path
    lo = float(np.min(np.abs(a), where=a != 0, initial=np.inf))
    if hi < float(info.max) and lo >= float(info.smallest_subnormal):
        return []
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        conv = np.asarray(a.astype(unit), np.float32)       # what the units hold
    out = []
    big = _count(np.isfinite(a) & np.isinf(conv))
    if big:
        out.append(f"{big} value(s) above {float(info.max):g} overflow {unit} (inf)")
    small = _count((a != 0) & (conv == 0))
    if small:
        out.append(f"{small} nonzero value(s) below {float(info.smallest_subnormal):.3g} underflow to 0 in {unit}")
    return out


class OperandChecks:
    """`check_operand` remembered per immutable operand (a jax.Array, a
    read-only numpy array: weights passed every call), so a resident 64 MB
    weight is scanned once, not per call (three passes: ~30-90 ms here);
    writeable numpy arrays are scanned every call (they may change in place)."""

    def __init__(self):
        self._seen: dict[int, tuple] = {}          # id -> (weakref, unit, events)

    def __call__(self, x, unit: np.dtype) -> list[str]:
        immutable = (type(x).__module__.startswith("jax") or
                     (isinstance(x, np.ndarray) and not x.flags.writeable))
        if not immutable:
            return check_operand(x, unit)
        hit = self._seen.get(id(x))
        if hit is not None and hit[0]() is x and hit[1] == unit:
            return hit[2]
        events = check_operand(x, unit)
        try:
            self._seen[id(x)] = (weakref.ref(x), unit, events)
        except TypeError:               # not weak-referenceable: not remembered
            pass
        if len(self._seen) > 256:       # drop entries whose arrays are gone
            self._seen = {k: v for k, v in self._seen.items() if v[0]() is not None}
        return events


def check_values(operands, result, unit: np.dtype, reference=None, checks=check_operand) -> list[str]:
    """Events of one PIM op's call: per operand what the conversion to `unit`
    loses (`check_operand`), and inf / NaN in `result` where jax's result
    differs.  reference: a callable giving the op's result by jax, consulted
    only when the result holds inf / NaN: a position counts when jax's
    differs there (a log of 0 is -inf for both; NaN where jax has inf
    counts).  Without a reference, every inf / NaN counts when every operand
    is finite, and none when an operand is not (it may carry into the
    result, as in jax: nothing to tell them apart).
    checks: the operand check (`check_operand`, or an `OperandChecks`)."""
    out = []
    for k, x in enumerate(operands):
        out += [f"operand {k}: {e}" for e in checks(x, unit)]
    res = np.asarray(result)
    if not _float(res.dtype) or res.size == 0:
        return out
    bad = ~np.isfinite(np.asarray(res, np.float32))
    if not bad.any():
        return out
    finite_in = all(bool(np.isfinite(np.max(x)) and np.isfinite(np.min(x))) for x in map(np.asarray, operands)
                    if _float(x.dtype) and x.size)     # only once the result is not finite
    # an inf elsewhere in an operand does not excuse an overflow here: the positions jax's result
    # tells apart still count (fuzz seed 33170: one row of an fp16 GEMM's input held inf, and
    # another row's fp16 sum overflowed to +inf and -inf, NaN where jax gives -inf, unflagged)
    if not finite_in and reference is None:
        return out
    if reference is not None:
        try:
            ref = np.asarray(reference(), np.float32).reshape(res.shape)
            got = np.asarray(res, np.float32)
            # jax's own inf / NaN there counts only when the units' differs (NaN from an overflowed
            # fp16 sum where jax's exp of a float32 sum is inf: fuzz seed 10074)
            bad &= ~((ref == got) | (np.isnan(ref) & np.isnan(got)))
        except Exception:      # noqa: BLE001 -- no reference: as without one
            if not finite_in:
                return out
    n = _count(bad)
    if n:
        top = float(ml_dtypes.finfo(unit).max)
        narrower = (f", or a result past the output's {res.dtype} range ({float(ml_dtypes.finfo(res.dtype).max):g})"
                    if float(ml_dtypes.finfo(res.dtype).max) < top else "")     # bf16 units, fp16 data
        src = "from finite operands " if finite_in else ""
        out.append(f"result: {n} inf / NaN value(s) {src}where jax's differ "
                   f"(the {unit} arithmetic overflowed, e.g. a running sum above {top:g}{narrower})")
    return out




# The relative tolerance a backend's results keep against jax, by the type its units compute in
# (and, for floating data, by the data's own type, which jax computes in): fp16 / bf16 accumulation
# of up to a few hundred terms (tests/test_api.py's TOL); float32 and integer units are exact up to
# float32 rounding.  Data, so a backend with another unit type states its own here.
UNIT_TOLERANCE = {"float16": 3e-2, "bfloat16": 6e-2, "float32": 1e-5, "float64": 1e-5,
                  "int8": 0.0, "int16": 0.0, "int32": 0.0, "int64": 0.0}


def tolerance(backend, dtypes=()) -> float:
    """The relative tolerance of `backend`'s results on data of `dtypes`
    (dtype names or numpy dtypes): the largest `UNIT_TOLERANCE` of its
    units' type (`Core.dtype`) and of the floating data types; a result is
    within it when |pim - jax| <= tol * (|jax| + scale), scale the
    magnitude of the values the op summed."""
    names = [backend.core.dtype] + [np.dtype(d).name for d in dtypes if _float(d)]
    return max(UNIT_TOLERANCE.get(n, 1e-5) for n in names)


__all__ = ["PRECISIONS", "UNIT_TOLERANCE", "tolerance", "unit_dtype", "significant_bits", "conversion", "op_dtypes", "check_operand", "check_values",
           "OperandChecks"]
