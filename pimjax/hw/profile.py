"""A GPU described by its own measurements: "vs GPU" from a per-op table of measured times.

`GpuProfile` holds measured points per op class -- products (m, n, k, batch, element bytes)
and maps / row reductions (outputs, reduction, element bytes, kind) -- and `profile_host(base,
profile)` returns a HostModel whose model is "profile": `hw.gpu.gemm_ns` / `elementwise_ns`
answer from the table, and from `base`'s analytic model where the table has nothing.

Lookup (`lookup`): a point of the table is its own time ("measured"); a shape that differs
from two measured points in one dimension only, between them, is interpolated linearly in
log(size) -> log(time) between the nearest two on that line ("interpolated"), so the time
lies between theirs (monotone between measured points); anything else is the analytic
model's ("model").  `profile_source` says which of the three an op got.

The table comes from `pimjax.hw.measured` rows (`GpuProfile.from_rows`: any public set or
the CSV `benchmarks/gpu_kernels.py --csv` writes on the user's own GPU).  Its times are the
kernel alone: subtract the method's floor first (`from_rows(..., floor_us=...)`) when the
rows carry one, as NeuSight's and LLMCompass's do.

    >>> from pimjax.hw import measured
    >>> from pimjax.hw.gpus import gpu
    >>> p = GpuProfile.from_rows(measured.load("llmcompass", gpu="a100", op="gemm"), name="A100 (LLMCompass)")
    >>> h = profile_host(gpu("a100", model="library"), p)
    >>> round(h.gemm_ns(64, 12288, 12288) / 1e3, 1), profile_source(h, "gemm", m=64, n=12288, k=12288)
    (190.0, 'measured')
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

KINDS = ("act", "norm", "softmax", "reduce", "copy")
_MEASURED_KIND = {"softmax": "softmax", "layernorm": "norm", "rmsnorm": "norm"}


@dataclass(frozen=True)
class GpuProfile:
    """Measured points of one GPU.  products: ((m, n, k, batch, elem_bytes), ...) with
    product_ns; rows: ((outputs, reduction, elem_bytes, kind index in KINDS), ...) with
    row_ns.  Tuples: hashable, so the profile is a static field of its HostModel."""
    name: str
    products: tuple = ()
    product_ns: tuple = ()
    rows: tuple = ()
    row_ns: tuple = ()

    def __post_init__(self):
        for pts, ns, what in ((self.products, self.product_ns, "products"), (self.rows, self.row_ns, "rows")):
            if len(pts) != len(ns):
                raise ValueError(f"GpuProfile {self.name!r}: {len(pts)} {what} but {len(ns)} times")
            if any(not (t > 0 and np.isfinite(t)) for t in ns):
                raise ValueError(f"GpuProfile {self.name!r}: every {what} time must be a positive number of ns")

    @classmethod
    def from_rows(cls, rows: dict, name: str, floor_us: float | np.ndarray = 0.0) -> "GpuProfile":
        """A profile of `pimjax.hw.measured.load`'s rows (one GPU's): gemm / bmm as products,
        softmax / layernorm / rmsnorm and maps as rows; other ops are left out.  floor_us:
        the measuring method's floor, subtracted from every time (a row at or under it is
        left out: it measured the method, not the kernel).  Repeated points: their median."""
        from . import measured as M
        floor = np.broadcast_to(np.asarray(floor_us, np.float64), rows["time_us"].shape)
        prods, rws = {}, {}
        for i, op in enumerate(rows["op"]):
            t = (float(rows["time_us"][i]) - float(floor[i])) * 1e3
            if t <= 0:
                continue
            e = M.ELEM_BYTES.get(rows["dtype"][i], 4)
            c = M.op_class(op)
            if c in ("gemm", "bmm"):
                key = (int(rows["m"][i]), int(rows["n"][i]), int(rows["k"][i]), max(1, int(rows["batch"][i])), e)
                prods.setdefault(key, []).append(t)
            elif c in ("softmax", "norm"):
                key = (int(rows["rows"][i]), int(rows["cols"][i]), e, KINDS.index(_MEASURED_KIND[op]))
                rws.setdefault(key, []).append(t)
            elif c == "map" and op in ("add", "mul", "sub", "div", "relu", "gelu", "tanh", "silu", "addu", "mulu"):
                rws.setdefault((int(rows["numel"][i]), 1, e, KINDS.index("act")), []).append(t)
        pk, rk = sorted(prods), sorted(rws)
        return cls(name, tuple(pk), tuple(float(np.median(prods[k])) for k in pk),
                   tuple(rk), tuple(float(np.median(rws[k])) for k in rk))


def lookup(points: tuple, times: tuple, query: tuple) -> tuple[float | None, str]:
    """(ns, how) of `query` among `points` [P, D] with `times` [P]: ("measured") a point's own
    time; ("interpolated") log-log linear between the nearest two points that differ from the
    query in one dimension only, one on each side; (None, "model") otherwise."""
    if not points:
        return None, "model"
    P = np.asarray(points, np.float64)
    T = np.asarray(times, np.float64)
    q = np.asarray(query, np.float64)
    same = P == q
    exact = np.nonzero(same.all(axis=1))[0]
    if len(exact):
        return float(np.median(T[exact])), "measured"
    best = None
    for d in range(P.shape[1]):
        line = np.nonzero(same[:, np.arange(P.shape[1]) != d].all(axis=1))[0]
        if len(line) < 2:
            continue
        x = P[line, d]
        lo, hi = line[x < q[d]], line[x > q[d]]
        if not len(lo) or not len(hi) or q[d] <= 0:
            continue
        a, b = lo[np.argmax(P[lo, d])], hi[np.argmin(P[hi, d])]
        span = np.log(P[b, d]) - np.log(P[a, d])
        if best is None or span < best[0]:
            w = (np.log(q[d]) - np.log(P[a, d])) / span
            best = (span, float(np.exp((1 - w) * np.log(T[a]) + w * np.log(T[b]))))
    return (best[1], "interpolated") if best else (None, "model")


def profile_host(base, profile: GpuProfile):
    """`base` (a HostModel on an analytic model) answering from `profile` where it can."""
    if not isinstance(profile, GpuProfile):
        raise TypeError(f"profile_host: a GpuProfile, got {type(profile).__name__}")
    if base.model == "profile":
        base = base.replace(model=base.profile_base)
    return base.replace(name=f"{profile.name} (measured profile; else {base.model})", model="profile",
                        profile=profile, profile_base=base.model)


def base_host(host):
    """The analytic host a "profile" host falls back on (its `profile_base` model, no table)."""
    return host.replace(model=host.profile_base, profile=None, profile_base="")


def _product_key(m, n, k, batch, elem_bytes):
    return (int(m), int(n), int(k), max(1, int(batch)), int(elem_bytes))


def _row_key(outputs, reduction, elem_bytes, kind):
    return (int(outputs), int(reduction), int(elem_bytes), KINDS.index(kind) if kind in KINDS else -1)


def profile_gemm_ns(host, m, n, k, batch=1, elem_bytes=2, operand_bytes=None) -> float:
    """ns of the product on a "profile" host: the table's, else the base model's (+ launch
    both ways: the table holds kernel times)."""
    t, _ = lookup(host.profile.products, host.profile.product_ns, _product_key(m, n, k, batch, elem_bytes))
    if t is None:
        return float(base_host(host).gemm_ns(m, n, k, batch, elem_bytes, operand_bytes))
    return t + float(host.launch_overhead_ns)


def elementwise_key(bytes_moved, outputs, reduction=1, kind="act") -> tuple:
    """The table key of a map / row reduction as `hw.gpu.elementwise_ns` describes it: the
    element size is bytes_moved / (2 x outputs x reduction) rounded to 1, 2 or 4 (in + out)."""
    elems = max(1, int(outputs) * max(1, int(reduction)))
    eb = min((1, 2, 4), key=lambda e: abs(e - bytes_moved / (2.0 * elems)))
    return _row_key(outputs, reduction, eb, kind)


def profile_elementwise_ns(host, bytes_moved, flops=0.0, *, outputs, reduction=1, kind="act") -> float:
    """ns of a map / row reduction on a "profile" host (as `profile_gemm_ns`; the key:
    `elementwise_key`)."""
    t, _ = lookup(host.profile.rows, host.profile.row_ns, elementwise_key(bytes_moved, outputs, reduction, kind))
    if t is None:
        return float(base_host(host).elementwise_ns(bytes_moved, flops, outputs=outputs, reduction=reduction, kind=kind))
    return t + float(host.launch_overhead_ns)


def profile_source(host, kind: str, **shape) -> str:
    """"measured", "interpolated" or "model": where a "profile" host's time of one op comes
    from.  kind: "gemm" (m, n, k, batch=1, elem_bytes=2), "conv" (always "model") or "elementwise" (outputs,
    reduction=1, kind="act", and elem_bytes=2 or the bytes_moved `hw.gpu.elementwise_ns` takes)."""
    if getattr(host, "model", None) != "profile":
        return "model"
    if kind == "conv":
        return "model"              # a profile holds no convolution: its base model times them (`hw.gpu.conv_ns`)
    if kind == "gemm":
        key = _product_key(shape["m"], shape["n"], shape["k"], shape.get("batch", 1), shape.get("elem_bytes", 2))
        return lookup(host.profile.products, host.profile.product_ns, key)[1]
    if kind == "elementwise":
        if "bytes_moved" in shape:
            key = elementwise_key(shape["bytes_moved"], shape["outputs"], shape.get("reduction", 1),
                                  shape.get("kind", "act"))
        else:
            key = _row_key(shape["outputs"], shape.get("reduction", 1), shape.get("elem_bytes", 2),
                           shape.get("kind", "act"))
        return lookup(host.profile.rows, host.profile.row_ns, key)[1]
    raise ValueError(f"profile_source kind {kind!r}: valid kinds are ['conv', 'elementwise', 'gemm']")


__all__ = ["GpuProfile", "base_host", "lookup", "elementwise_key", "profile_host", "profile_gemm_ns",
           "profile_elementwise_ns", "profile_source"]
