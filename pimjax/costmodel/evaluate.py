"""DCC Table II: the predictor's choice against exhaustive simulation.

For every case (backend, kernel, shape) every draft of the pruned draft
space (`kernels.case_drafts`) is lowered and simulated; the true optimum is
the minimum simulated cycles.  The predictor ranks the same drafts (those
that lower).  A case counts as *#Best* when the predictor's argmin is less
than one command-clock cycle slower than the optimum (smaller differences
are fractions of a cycle from the host-time terms, below the resolution of
the DRAM time model; `best_strict` counts exact ties only).  Otherwise it
contributes optimum / chosen cycles to the *suboptimal performance*
(geometric mean over the misses, as DCC).  The tuner's view (`top_k`:
simulate the predicted top-k and keep the fastest) is reported next to it,
and so is the prediction error.

Exhaustive labels are cached per case under `cache_dir` (npz of the draft
rows and their cycles; recomputed when the draft space changes).  Spaces of
more than `PRUNE_ABOVE` drafts are labelled by branch and bound where the
family has a lower bound on a draft's cycles (`exhaustive`): the optimum,
#Best and top-k stay exact, the prediction error then covers the drafts
simulated (the optimum's neighbourhood, not the whole space).
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field

import numpy as np

from ..backends import families
from ..errors import user_stacklevel
from ..hw.core import Backend, is_int
from ..partition import DraftTable
from .dataset import CACHE_DIR, ROW_COLUMNS, label
from .features import features_table
from .kernels import case_drafts, default_cases, make_case, supported_kernels  # noqa: F401  (default_cases: re-exported)

TIE = 1e-6          # relative cycle difference treated as an exact tie
TIE_CYCLES = 1.0    # #Best: the choice is less than one command-clock cycle slower


@dataclass
class CaseResult:
    backend: str
    kernel: str
    shape: list
    drafts: int
    lowered: int                           # drafts simulated (lowered; skipped ones by the bound excluded)
    optimum: float = math.nan
    chosen: float = math.nan
    best: bool = False
    best_strict: bool = False
    rel: float = math.nan                  # optimum / chosen cycles (1 = optimal)
    topk_best: bool = False
    topk_rel: float = math.nan
    mape: float = math.nan                 # mean |pred - sim| / sim over the simulated drafts
    spearman: float = math.nan
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)


def _table_cols(table: DraftTable) -> dict:
    return {c: np.asarray(getattr(table, c)) for c in ROW_COLUMNS}


PRUNE_ABOVE = 4096  # drafts: larger spaces are labelled by branch and bound (exhaustive(prune=None))
PRUNE_CHUNK = 64    # drafts lowered and simulated between two updates of the best total


def _bound(case, table: DraftTable, backend: Backend):
    """The family's lower bound on each draft's cycles ([n]), or None (no
    bound for this op or family; an attention block lowers as a fused
    program, which a single op's bound does not price)."""
    from ..backends import family_of
    fn = family_of(backend).lower_bound
    if fn is None or case.kernel == "attn":
        return None
    return fn(case.op, table, backend, case.shapes, None)


def _cache_path(backend: Backend, case, cache_dir) -> str | None:
    """The npz of a case's exhaustive labels under `cache_dir` (False: none)."""
    if cache_dir is False:
        return None
    # per cost model (`configs.model_name`): a configuration timed by a controller of its own (DCC's forks)
    # has the same drafts as its family's preset and other cycles
    from .configs import model_name
    d = os.path.join(cache_dir or CACHE_DIR, "exhaustive", model_name(backend))
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, f"{case.kernel}-{'x'.join(map(str, case.shape))}.npz")


def _save_npz(path: str, **arrays) -> None:
    """`np.savez` to `path`, atomically (`pimjax.durable.atomic_write`)."""
    import io

    from ..durable import atomic_write
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    atomic_write(path, buf.getvalue())


def _load_npz(path: str | None) -> dict | None:
    """The arrays of a labels file, or None when absent or unreadable (then with a
    `CorruptStateWarning`: the labels are simulated again)."""
    if path is None or not os.path.exists(path):
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except Exception as err:  # noqa: BLE001 - any unreadable file means: label again
        import warnings

        from ..durable import CorruptStateWarning
        warnings.warn(f"pimjax exhaustive labels {path}: unreadable ({err}); simulating again",
                      CorruptStateWarning, stacklevel=user_stacklevel())
        return None


def exhaustive(backend: Backend, kernel: str, shape, cache_dir: str | None = None, progress=None,
               prune: bool | None = None):
    """(case, table, cycles [n]): every draft that can be optimal simulated.

    cycles: the simulated total, NaN where a draft fails to lower, +inf
    where branch and bound skipped it.  prune: label by branch and bound
    where the backend's family has a lower bound on a draft's cycles
    (`Family.lower_bound`): drafts go in increasing order of their bound,
    `PRUNE_CHUNK` at a time, and labelling stops at the first whose bound
    exceeds the best total simulated so far -- no later draft can be
    optimal, so the optimum is the exhaustive one.  None (default): prune
    spaces of more than `PRUNE_ABOVE` drafts (an LLM-sized UPMEM GEMV:
    576 of 12 432 drafts simulated), label smaller ones in full, so their
    prediction error covers every draft.  Skipped drafts are labelled on
    demand (`label_pruned`).  Labels are cached per case under `cache_dir`
    (False: no cache)."""
    case = make_case(backend, kernel, shape)
    table = case_drafts(case, backend)
    n = len(table)
    full = prune is False or (prune is None and n <= PRUNE_ABOVE)
    cols = _table_cols(table)
    path = _cache_path(backend, case, cache_dir)
    cached = _load_npz(path)
    if cached is not None:
        same = all(c in cached and cached[c].shape == cols[c].shape and np.array_equal(cached[c], cols[c])
                   for c in ROW_COLUMNS)
        if same and "cycles" in cached:
            cyc = np.asarray(cached["cycles"], np.float64)
            if not (full and np.isposinf(cyc).any()):    # full labels asked, pruned ones cached
                return case, table, cyc
    bound = None if full else _bound(case, table, backend)
    if bound is None:
        cyc = label(case, table, np.arange(n), backend, progress)[:, 0]
    else:
        cyc = np.full(n, np.inf)
        order = np.argsort(bound, kind="stable")
        best = np.inf
        for pos in range(0, n, PRUNE_CHUNK):
            chunk = order[pos:pos + PRUNE_CHUNK]
            # strictly above the best total (a margin for float rounding): cannot be optimal
            chunk = chunk[bound[chunk] <= best * (1 + 1e-6) + 1.0]
            if chunk.size == 0:
                break
            got = label(case, table, chunk, backend)[:, 0]
            cyc[chunk] = got
            if progress is not None:
                progress(pos + chunk.size, n)
            if np.isfinite(got).any():
                best = min(best, float(np.nanmin(got)))
    if path is not None:
        _save_npz(path, cycles=cyc, **cols)
    return case, table, cyc


def label_pruned(case, table: DraftTable, cyc: np.ndarray, idx, backend: Backend,
                 cache_dir: str | None = None) -> None:
    """Simulate the drafts of `idx` that `exhaustive` skipped (+inf in cyc),
    in place, and update the case's cached labels."""
    todo = np.asarray([int(i) for i in idx if np.isposinf(cyc[int(i)])], np.int64)
    if not todo.size:
        return
    cyc[todo] = label(case, table, todo, backend)[:, 0]
    path = _cache_path(backend, case, cache_dir)
    if path is not None:
        _save_npz(path, cycles=cyc, **_table_cols(table))


def evaluate_case(model, backend: Backend, kernel: str, shape, top_k: int = 8,
                  cache_dir: str | None = None, progress=None, prune: bool | None = None) -> CaseResult:
    """Table II numbers of one case (see module docstring).  prune: as
    `exhaustive`; the predictor ranks the skipped drafts too, and those it
    puts in its top-k are simulated then (so #Best and top-k are exact),
    while MAPE and Spearman cover the simulated drafts (`extra["pruned"]`
    counts the others)."""
    t0 = time.time()
    case, table, cyc = exhaustive(backend, kernel, shape, cache_dir, progress, prune)
    res = CaseResult(backend.name, kernel, list(case.shape), len(table), int(np.isfinite(cyc).sum()))
    if not res.lowered:
        res.seconds = time.time() - t0
        return res
    pred = model.predict(features_table(case.target, table, backend, case.shapes))
    while True:     # the predicted top-k, simulating skipped drafts until k are labelled (or none is left)
        cand = np.nonzero(~np.isnan(cyc))[0]
        top = cand[np.argsort(pred[cand], kind="stable")[:top_k]]
        if not np.isposinf(cyc[top]).any():
            break
        label_pruned(case, table, cyc, top, backend, cache_dir)
    res.extra["pruned"] = int(np.isposinf(cyc).sum())
    idx = np.nonzero(np.isfinite(cyc))[0]
    res.lowered = int(idx.size)
    c, p = cyc[idx], pred[idx]
    opt = float(c.min())
    chosen = float(cyc[top[0]])
    topk = float(cyc[top].min())
    res.optimum, res.chosen = opt, chosen
    res.best = chosen - opt < TIE_CYCLES or chosen <= opt * (1 + TIE)
    res.best_strict = chosen <= opt * (1 + TIE)
    res.rel = opt / chosen
    res.topk_best = topk - opt < TIE_CYCLES or topk <= opt * (1 + TIE)
    res.topk_rel = opt / topk
    res.mape = float(np.mean(np.abs(p - c) / c))
    if len(c) > 2:
        rc = np.argsort(np.argsort(c))
        rp = np.argsort(np.argsort(p))
        res.spearman = float(np.corrcoef(rc, rp)[0, 1])
    res.seconds = time.time() - t0
    return res


def table2(results: list[CaseResult]) -> list[dict]:
    """Rows per backend + kernel and an overall row: Total, #Best, the
    geometric-mean relative performance of the misses (and their count), the
    same for the tuner's top-k, and the mean prediction error."""
    rows = []
    keys = sorted({(r.backend, r.kernel) for r in results}, key=lambda k: (k[0], k[1]))
    for key in keys + [("all", "all")]:
        rs = [r for r in results if r.lowered and (key == ("all", "all") or (r.backend, r.kernel) == key)]
        if not rs:
            continue
        miss = [r.rel for r in rs if not r.best]
        miss_k = [r.topk_rel for r in rs if not r.topk_best]
        rows.append({
            "backend": key[0], "kernel": key[1], "total": len(rs), "best": sum(r.best for r in rs),
            "best_frac": sum(r.best for r in rs) / len(rs),
            "best_strict": sum(r.best_strict for r in rs),
            "subopt": float(np.exp(np.mean(np.log(miss)))) if miss else 1.0, "misses": len(miss),
            "worst": float(min(miss)) if miss else 1.0,
            "topk_best": sum(r.topk_best for r in rs),
            "topk_subopt": float(np.exp(np.mean(np.log(miss_k)))) if miss_k else 1.0,
            "mape": float(np.mean([r.mape for r in rs])),
            "drafts": int(np.sum([r.drafts for r in rs])),
        })
    return rows


RANKS = {"gemv": (2,), "mmtv": (4,), "attn": (4,), "va": (1, 2), "relu": (1, 2), "red": (1, 2),
         "gemm": (3,), "conv": (5,)}


def check_case(case) -> dict:
    """A `--cases` entry checked before any work: a dict with a known
    backend and kernel and a shape of the kernel's rank, positive sizes
    (ValueError saying what is wrong otherwise)."""
    if not isinstance(case, dict):
        raise ValueError(f"a case is an object {{backend, kernel, shape}}, got {case!r}")
    missing = [k for k in ("backend", "kernel", "shape") if k not in case]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}")
    b, k, shape = case["backend"], case["kernel"], case["shape"]
    if b not in families():
        raise ValueError(f"unknown backend {b!r}; expected one of {families()}")
    if k not in RANKS:
        raise ValueError(f"unknown kernel {k!r}; expected one of {sorted(RANKS)}")
    if not (isinstance(shape, list) and all(is_int(v) for v in shape)):
        raise ValueError(f"shape must be a list of integers, got {shape!r}")
    if len(shape) not in RANKS[k]:
        raise ValueError(f"{k} takes a shape of {' or '.join(map(str, RANKS[k]))} sizes, got {shape}")
    if min(shape) < 1:
        raise ValueError(f"sizes must be positive, got {shape}")
    return {"backend": b, "kernel": k, "shape": shape}


def supported(backend: str, kernel: str) -> bool:
    return kernel in supported_kernels(backend)
