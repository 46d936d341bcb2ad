"""Measured GPU op latencies from public sources, to hold pimjax's GPU models to.

One CSV per source beside this file (`README.md` lists them; `benchmarks/measured_import.py`
writes them from the sources' repositories).  Every file opens with ``#`` lines naming its
repository, paths, commit, units and notes, then the columns

    gpu, op, dtype, batch, m, n, k, rows, cols, numel, conv, time_us, context

(an empty cell: not applicable).  Shapes: a ``gemm`` is one (m x k) . (k x n) product, a
``bmm`` `batch` of them; ``softmax`` / ``layernorm`` fold `cols` elements into each of `rows`
outputs; a map (``add``, ``gelu``, ...) has `numel` outputs; ``conv`` a ``n=..;h=..;...``
string.  time_us: microseconds per call of the op as the source measured it (its method, and
so its launch / framework floor, is in the file's notes).

    >>> rows = load("llmcompass", gpu="a100", op="gemm")
    >>> int(rows["m"][0]), int(rows["n"][0]), int(rows["k"][0]), float(rows["time_us"][0])
    (64, 12288, 12288, 190.0)
"""
from __future__ import annotations

import csv
import functools
import json
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
COLUMNS = ("gpu", "op", "dtype", "batch", "m", "n", "k", "rows", "cols", "numel", "conv", "time_us", "context")
ELEM_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "int8": 1}     # bytes per element of the dtype column's names
INT_COLUMNS = ("batch", "m", "n", "k", "rows", "cols", "numel")     # 0 = not applicable
TEXT_COLUMNS = ("gpu", "op", "dtype", "conv", "context")

# the op classes a GPU model times (`pimjax.hw.gpu`), by the ops of the files
OP_CLASS = {"gemm": "gemm", "bmm": "bmm", "conv": "conv", "dwconv": "conv", "softmax": "softmax",
            "layernorm": "norm", "rmsnorm": "norm", "allreduce": "allreduce", "attention": "attention"}
MAP_OPS = ("add", "mul", "sub", "div", "pow", "addu", "mulu", "subu", "divu", "powu", "relu", "gelu", "tanh",
           "silu", "rsqrt", "where", "masked_fill", "maximum", "copy", "dropout", "embedding")


def op_class(op: str) -> str:
    """The kernel class of a measured op: gemm, bmm, conv, softmax, norm, map, allreduce,
    attention, or "other" (a whole model, a bookkeeping node)."""
    if op in OP_CLASS:
        return OP_CLASS[op]
    return "map" if op in MAP_OPS else "other"


def sources() -> dict[str, str]:
    """{source name: file path} of every shipped file ("llmcompass", "neusight_ops_v100", ...)."""
    return {f[:-4]: os.path.join(HERE, f) for f in sorted(os.listdir(HERE)) if f.endswith(".csv")}


def header(source: str) -> dict[str, str]:
    """The `#` lines of a source's file as {key: text} (source, path, commit, units, notes)."""
    out = {}
    with open(_path(source), encoding="utf-8") as fh:
        for line in fh:
            if not line.startswith("#"):
                break
            key, _, text = line[1:].strip().partition(":")
            out[key.strip()] = text.strip()
    return out


def _path(source: str) -> str:
    known = sources()
    if source not in known:
        raise ValueError(f"measured source {source!r}: valid sources are {sorted(known)}")
    return known[source]


def _read(source: str) -> dict:
    return _read_file(_path(source), source)


def read(path: str) -> dict[str, np.ndarray]:
    """Rows of any file in this format (e.g. the one `benchmarks/gpu_kernels.py --csv` writes on
    the user's own GPU), as `load` returns them; "source" is the file's name."""
    return _read_file(os.path.abspath(path), os.path.splitext(os.path.basename(path))[0])


@functools.lru_cache(maxsize=32)
def _read_file(path: str, source: str) -> dict:
    with open(path, encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(line for line in fh if not line.startswith("#"))
        if tuple(reader.fieldnames or ()) != COLUMNS:
            raise ValueError(f"measured file {path}: columns {reader.fieldnames} are not {list(COLUMNS)}")
        rows = list(reader)
    out = {c: np.array([r[c] for r in rows], dtype=object) for c in TEXT_COLUMNS}
    for c in INT_COLUMNS:
        out[c] = np.array([int(r[c]) if r[c] else 0 for r in rows], np.int64)
    out["time_us"] = np.array([float(r["time_us"]) for r in rows], np.float64)
    out["source"] = np.full(len(rows), source, dtype=object)
    for a in out.values():
        a.flags.writeable = False
    return out


def load(source: str | None = None, *, gpu: str | None = None, op: str | None = None,
         dtype: str | None = None, cls: str | None = None) -> dict[str, np.ndarray]:
    """The rows of `source` (None: every shipped file) as {column: array [R]}, filtered by
    gpu, op, dtype and op class (`op_class`); an extra "source" column names each row's file.
    Integer columns hold 0 where the file's cell is empty; time_us is in microseconds."""
    names = list(sources()) if source is None else [source]
    parts = [_read(s) for s in names]
    cols = {c: np.concatenate([p[c] for p in parts]) for c in (*COLUMNS, "source")}
    keep = np.ones(len(cols["time_us"]), bool)
    for col, want in (("gpu", gpu), ("op", op), ("dtype", dtype)):
        if want is not None:
            keep &= cols[col] == want
    if cls is not None:
        keep &= np.array([op_class(o) == cls for o in cols["op"]], bool)
    return {c: a[keep] for c, a in cols.items()}


def to_dataframe(rows: dict):
    """`load`'s rows as a pandas DataFrame (pandas is a test / notebook extra)."""
    import pandas as pd
    return pd.DataFrame({c: np.asarray(a) for c, a in rows.items()})


FITS_PATH = os.path.join(HERE, "fits.json")      # the library model's constants per card (`hw.gpu_check.fit` writes it)
FIT_FIELDS = ("flops_efficiency", "wave_overhead_ns", "batched_tile_alpha", "unaligned_efficiency",
              "bandwidth_efficiency", "row_bandwidth_efficiency", "row_pass_ns", "row_elem_ns")
LIBRARY_FIT_FIELDS = ("pow_flops",)     # fitted per vendor's math library ("cuda", "rocm")


_FITS_CACHE: dict = {}                  # {(mtime_ns, size): fits.json parsed}: its one current version


def _fits_doc() -> dict:
    """fits.json parsed ({} when absent): read once per version of the file (its mtime and size
    key the cache), so `fits` / `library_fits` -- called on every `hw.gpus.gpu` -- do not re-read
    it, and a refit (`gpu_check --fit`) is seen at once."""
    try:
        st = os.stat(FITS_PATH)
    except FileNotFoundError:
        return {}
    key = (st.st_mtime_ns, st.st_size)
    if key not in _FITS_CACHE:
        _FITS_CACHE.clear()
        with open(FITS_PATH, encoding="utf-8") as fh:
            _FITS_CACHE[key] = json.load(fh)
    return _FITS_CACHE[key]


def fits() -> dict:
    """{gpu: {constant: value}} (`FIT_FIELDS`) as fitted on the even rows of each card's measured
    sets (`fits.json`, written by `python -m pimjax.hw.gpu_check --fit`); {} when the file is absent."""
    return {g: {k: v[k] for k in FIT_FIELDS if k in v} for g, v in _fits_doc().get("gpus", {}).items()}


def library_fits() -> dict:
    """{library: {pow_flops}}: the library model's constants fitted per vendor's math library
    ("cuda", "rocm") on the even rows of its cards (`fits.json`'s "libraries"); {} when absent."""
    return {lib: {k: v[k] for k in LIBRARY_FIT_FIELDS} for lib, v in _fits_doc().get("libraries", {}).items()}


__all__ = ["COLUMNS", "ELEM_BYTES", "OP_CLASS", "MAP_OPS", "FITS_PATH", "FIT_FIELDS", "LIBRARY_FIT_FIELDS", "op_class",
           "sources", "header",
           "load", "read", "to_dataframe", "fits", "library_fits"]
