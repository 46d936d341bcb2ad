"""Design-space exploration: the hardware and the mapping searched together.

`sim.sweep` times *fixed* programs under timing variants.  A structural
change -- channels, stacks, units per channel, buffers, PIM level -- changes
which mapping is best (DCC's argument), so `explore` tunes every structural
point for itself and only then sweeps timing variants over that point's own
programs:

    from pimjax.studies.dse import grid
    points = grid("hbm-pim", channels=[16, 32, 64])
    df = pimjax.explore(f, W, x, backends=points)           # one row per point
    df = pimjax.explore(f, W, x, backends=points, timings={"channels=64": [t1, t2]},
                 results="sweep.jsonl")                       # resumable

Each row: the point's label, backend / variant, the function's total ns, PIM
energy (pJ), the GPU-only ns of the same memory system and the speedup over
it, the placement and chosen draft of every op, how many drafts were
simulated and the tuning seconds.  A timing variant adds a row with
`timing` = its index whose PIM ops are the point's programs re-timed
(`reused_programs` True), host ops unchanged.

Resuming: with `results=` every finished row is appended to that JSON-lines
file (never pickled) at once, keyed by the point's label,
`search.cache.backend_fingerprint` and a digest of the run's settings (the
function's name, the arguments' shapes and dtypes, tuner, placement,
resident); a later call with the same file and settings skips the points it
holds, and one with other settings runs them again.  The file is written
crash-safely (`pimjax.durable`: each point's rows in one locked append of
checksummed lines, fsynced): a process killed mid-write costs at most the
point it was writing, which runs again; torn lines are skipped with a
`CorruptStateWarning`.

Scale-out: `processes=N` compiles points in N spawned worker processes
(`concurrent.futures`); `shard=(i, n)` or `shard="jax"` (after
`jax.distributed.initialize`, one process per host) explores every n-th
point, so n processes or hosts split one space and may share a results file.

Serving: `fn` may be a `pimjax.studies.serving.ServingObjective` (a request
trace served on each point, `pimjax.studies.serve`): the rows gain its figures
(tokens_per_s, goodput_tokens_per_s at a p99 TPOT target, ...), and `evolve`
maximises them -- stacks x PIM level x GPU for throughput within latency.

Search, not only grids: `evolve(fn, *args, name=, axes=)` breeds points over
mixed structural ("channels") and timing ("timing.tRP") axes (crossover and
the tuner's one-knob-at-a-time mutation), each point explored as above.

Timing variants shard over devices with `mesh=` (`sim.sweep`'s).

Research use: `experiments/dse.ipynb` (sweeps computed by
`experiments/dse_sweeps.py`); throughput: `benchmarks/explore_bench.py`
(a LLaMA-2-7B decode layer point ≈ 1 CPU s, benchmarks/README.md).  Not
yet: 1 000 timing variants per LLaMA point cost ~5x the tuning (the
engine times every stream of every variant).
"""
from __future__ import annotations

import itertools
import time

import numpy as np

from ..errors import user_stacklevel
from ..hw.core import Backend, HostModel

MAXIMISE = ("speedup_gpu", "tokens_per_s", "goodput_tokens_per_s", "requests_per_s")   # evolve's objectives to maximise
COLUMNS = ("point", "backend", "variant", "timing", "total_ns", "pim_ns", "host_ns", "energy_pj", "gpu_ns",
           "speedup_gpu", "gpu", "gpu_model", "gpu_GBps", "pim_memory_GiB", "placements", "drafts",
           "simulated_drafts", "tuning_s", "reused_programs")


def hardware_columns(backend: Backend) -> dict:
    """What a row's speedup is against and what it ran on: gpu / gpu_model /
    gpu_GBps (`System.baseline`: the GPU of gpu_ns and speedup_gpu, its
    timing model and memory bandwidth) and pim_memory_GiB (groups x banks x
    `Core.pim_bank_bytes`)."""
    g = backend.system.baseline
    return {"gpu": g.name, "gpu_model": g.model, "gpu_GBps": float(np.asarray(g.mem_bandwidth).ravel()[0]) / 1e9,
            "pim_memory_GiB": backend.n_groups * backend.group.banks * backend.core.pim_bank_bytes / 2**30}


def fixed_gpu(gpu) -> HostModel:
    """The HostModel `explore(gpu=...)` holds fixed: a HostModel as is, or a
    card of `hw.gpus.GPU_SPECS` by name on its own memory, timed by the
    "library" model (`hw.gpus.gpu`)."""
    from ..hw.core import HostModel
    from ..hw.gpus import GPU_SPECS
    from ..hw.gpus import gpu as card
    if isinstance(gpu, HostModel):
        return gpu
    if isinstance(gpu, str) and gpu in GPU_SPECS:
        return card(gpu)
    raise ValueError(f"explore: gpu={gpu!r}: a GPU by name {sorted(GPU_SPECS)} (its own memory, the 'library' "
                     f"model; pimjax.hw.gpus.gpu(name, model, memory=) for others) or a HostModel; None keeps "
                     f"each point's own GPU (System.baseline, on that point's memory)")


def grid(name: str, **axes) -> dict[str, Backend]:
    """{label: backend} over the product of the preset options `axes`
    (each a list of values): `grid("newton", channels=[8, 16], buffers=[1, 4])`
    gives 4 structural points labelled "channels=8,buffers=1" and so on."""
    from ..hw.presets import get_backend
    keys = list(axes)
    for k in keys:
        if not isinstance(axes[k], (list, tuple)) or not axes[k]:
            raise ValueError(f"grid({name!r}, {k}=...): a non-empty list of values per axis, got {axes[k]!r}")
    out = {}
    for values in itertools.product(*(axes[k] for k in keys)):
        opts = dict(zip(keys, values))
        out[",".join(f"{k}={v}" for k, v in opts.items()) or name] = get_backend(name, **opts)
    return out


def _points(backends) -> list[tuple[str, Backend]]:
    if isinstance(backends, dict):
        items = list(backends.items())
    else:
        items = [(f"{b.name}/{b.variant}#{i}", b) for i, b in enumerate(backends)]
    for label, b in items:
        if not isinstance(b, Backend):
            raise TypeError(f"explore: point {label!r} is a {type(b).__name__}, not a pimjax Backend "
                            f"(build points with pimjax.studies.dse.grid or pimjax.hw.get_backend)")
    if len({label for label, _ in items}) != len(items):
        raise ValueError("explore: two points share a label")
    return items


def _is_objective(fn) -> bool:
    """An objective object (`evaluate(backend) -> dict`) rather than a function to compile."""
    return callable(getattr(fn, "evaluate", None)) and not getattr(fn, "__wrapped__", None)


def _settings_digest(fn, args, tuner, placement, resident) -> str:
    """8 hex digits naming what a results row depends on besides the backend:
    a row computed under other settings must not answer this run."""
    import hashlib

    import jax
    if _is_objective(fn) and callable(getattr(fn, "digest", None)):
        return fn.digest()
    leaves = [(tuple(getattr(x, "shape", ())), str(getattr(x, "dtype", type(x).__name__)))
              for x in jax.tree_util.tree_leaves(args)]
    text = repr((getattr(fn, "__module__", ""), getattr(fn, "__qualname__", repr(fn)), leaves, str(tuner),
                 placement, repr(resident)))
    return hashlib.sha1(text.encode()).hexdigest()[:8]


def _load(path: str | None) -> dict:
    """{(point, fingerprint): its rows} of a results file.  A point counts only with all its
    rows intact (each row carries `point_rows`, how many its point wrote at once): one torn by
    an interrupt runs again.  A point written twice (two processes sharing the file ran it)
    answers with its first complete copy.  Torn or corrupt lines are skipped with a
    `durable.CorruptStateWarning`."""
    from pimjax.durable import read_records  # absolute: this module moves to pimjax/studies/
    done: dict = {}
    if path is None:
        return done
    groups: dict = {}
    legacy: dict = {}
    for row in read_records(path, "explore results"):
        if "point" not in row or "fingerprint" not in row:
            continue
        key = (row["point"], row["fingerprint"])
        if key in done:
            continue
        n = row.pop("point_rows", None)
        if n is None:                                   # written before point_rows: taken as it is
            legacy.setdefault(key, []).append(row)
            continue
        got = groups.setdefault(key, {})
        got.setdefault(row.get("timing"), row)
        if len(got) == n:
            done[key] = sorted(got.values(), key=lambda r: -1 if r.get("timing") is None else r["timing"])
            del groups[key]
    cut = [k for k in groups if k not in done]
    if cut:                                             # lines intact, a point's last rows never written
        import warnings

        from pimjax.durable import CorruptStateWarning
        warnings.warn(f"pimjax explore results {path}: skipped {len(cut)} point(s) whose rows were cut short "
                      f"({', '.join(p for p, _ in cut[:3])}{', ...' if len(cut) > 3 else ''}); they run again",
                      CorruptStateWarning, stacklevel=user_stacklevel())
    return {**legacy, **done}


def _row(point: str, fp: str, backend: Backend, ca: dict, tuning_s: float, simulated: int,
         timing: int | None = None, reused: bool = False) -> dict:
    ops = ca["ops"]
    return {"point": point, "fingerprint": fp, "backend": backend.name, "variant": backend.variant,
            "timing": timing, "total_ns": ca["total_ns"], "pim_ns": ca["pim_ns"], "host_ns": ca["host_ns"],
            "energy_pj": ca["energy_pj"], "gpu_ns": ca["gpu_ns"], "speedup_gpu": ca["speedup_gpu"],
            **hardware_columns(backend),
            "placements": "; ".join(f"{o['index']}:{o['name']}@{o['placement']}" for o in ops),
            "drafts": "; ".join(f"{o['index']}:{o['draft']}" for o in ops if o["draft"]),
            "simulated_drafts": simulated, "tuning_s": tuning_s, "reused_programs": reused}


def _objective_row(obj, label, be, fp) -> dict:
    """One structural point of an objective object (`fn` with `evaluate(backend)
    -> dict`, e.g. `pimjax.studies.serving.ServingObjective`): its figures beside
    explore's columns (those it does not give are None)."""
    figures = obj.evaluate(be)
    row = {k: None for k in COLUMNS}
    row.update(point=label, fingerprint=fp, backend=be.name, variant=be.variant, placements=str(
        getattr(obj, "options", {}).get("placement", "")), drafts="", simulated_drafts=0, reused_programs=False,
        **hardware_columns(be))
    row.update(figures)
    return row


def _compile_point(fn, args, label, be, fp, variants, tuner, placement, mesh=None, resident="auto") -> list:
    """One structural point: tuned for itself, its timing variants on its
    programs; JSON-able row dicts (what a worker process sends back)."""
    from ..api import pim_jit
    from ..search.tuner import Tuner
    if _is_objective(fn):
        return [_objective_row(fn, label, be, fp)]
    t0 = time.perf_counter()
    compiled = pim_jit(fn, backend=be, tuner=Tuner(mode=tuner), placement=placement,
                       resident=resident).lower(*args).compile()
    tuning_s = time.perf_counter() - t0
    ca = compiled.cost_analysis()
    simulated = int(sum(p.choice.simulated for p in compiled.plans if p.choice is not None))
    new = [_row(label, fp, be, ca, tuning_s, simulated)]
    if variants:
        new += _timing_rows(label, fp, be, compiled, ca, variants, tuning_s, simulated, mesh)
    return new


def explore(fn, *args, backends, timings=None, tuner: str = "predict", placement: str = "auto",
            results: str | None = None, progress: bool = True, processes: int = 1, shard=None, mesh=None,
            resident="auto", gpu=None):
    """One row per (structural point, timing variant) of `fn(*args)` on
    every backend of `backends`, each point tuned for itself (see the
    module docstring).

    fn, args: the function and its arguments (arrays or ShapeDtypeStructs:
    nothing is executed) -- or an objective object with `evaluate(backend)
    -> dict` and no args, e.g. a serving run
    (`pimjax.studies.serving.ServingObjective`: tokens/s at a p99 TPOT
    target; its figures become extra columns).  backends: {label: Backend} (`grid`) or a list of
    Backends.  timings: {label: [Timing, ...]} -- timing / energy variants of
    that point, timed on its own programs (`sim.sweep`).  tuner: the Tuner
    mode each point is tuned with (a fresh Tuner per point: no point reuses
    another's choices).  results: a JSON-lines file to append rows to and
    resume from.  progress: a rich progress bar on a terminal, plain lines
    otherwise (`studies.progress`).  processes: points compiled
    in that many worker processes at once (`concurrent.futures`, spawned:
    `fn` must be importable, e.g. a module-level function).  shard: (index,
    count) -- this process explores points index, index + count, ... only
    (one share per process of a multi-process or multi-host run; "jax" takes
    `jax.process_index()` / `jax.process_count()` after
    `jax.distributed.initialize`); the processes can share one results file.
    mesh: a one-axis `jax.sharding.Mesh`: each point's timing variants are
    sharded over its devices (`sim.sweep(mesh=)`, the scan engine).
    resident: `pim_jit`'s resident spec (argument names or positions kept
    in PIM memory between calls; "auto" its default).
    gpu: the GPU every point is compared with (and that runs its ops off
    PIM): None (default) -- each point's own `System.baseline`, which the
    presets put on that point's memory, so it changes with the point (more
    stacks, a faster GPU) --, a GPU by name (`hw.gpus.GPU_SPECS`: "a100",
    "h100", ...; its own memory, the "library" model) or a HostModel, set as
    every point's `System.gpu`.  Each row names its GPU (columns gpu,
    gpu_model, gpu_GBps) and its PIM memory (pim_memory_GiB).
    Returns a pandas DataFrame (columns `COLUMNS`) of this process's points.
    """
    import pandas as pd

    from ..search.cache import backend_fingerprint
    items = _points(backends)
    if gpu is not None:
        g = fixed_gpu(gpu)
        items = [(label, be.replace(system=be.system.replace(gpu=g))) for label, be in items]
    if shard is not None:
        if shard == "jax":
            import jax
            shard = (jax.process_index(), jax.process_count())
        index, count = (int(v) for v in shard)
        if not 0 <= index < count:
            raise ValueError(f"explore: shard=({index}, {count}) needs 0 <= index < count")
        items = items[index::count]
    timings = dict(timings or {})
    if timings and _is_objective(fn):
        raise ValueError("explore: timings (timing variants of a point's programs) apply to a function, "
                         "not to an objective object such as a serving run")
    unknown = set(timings) - {label for label, _ in items}
    if unknown:
        raise ValueError(f"explore: timings for unknown points {sorted(unknown)}")
    done = _load(results)
    by_label: dict = {}
    todo = []
    settings = _settings_digest(fn, args, tuner, placement, resident)
    for label, be in items:
        fp = f"{backend_fingerprint(be)}-{settings}"
        if (label, fp) in done:
            by_label[label] = done[(label, fp)]
        else:
            todo.append((label, be, fp))

    def finished(new: list) -> None:
        by_label[new[0]["point"]] = new
        if results is not None:          # one locked, checksummed append per point (pimjax.durable)
            from pimjax.durable import append_records
            append_records(results, [dict(r, point_rows=len(new)) for r in new])

    jobs = [(fn, args, label, be, fp, timings.get(label, []), tuner, placement, mesh, resident)
            for label, be, fp in todo]
    if processes > 1 and len(jobs) > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed
        with ProcessPoolExecutor(max_workers=processes, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = [pool.submit(_compile_point, *job) for job in jobs]
            for fut in _progress(as_completed(futures), len(futures), progress):
                finished(fut.result())
    else:
        for job in _progress(jobs, len(jobs), progress):
            finished(_compile_point(*job))
    rows = [r for label, _ in items for r in by_label[label]]
    extra = list(dict.fromkeys(k for r in rows for k in r if k not in COLUMNS and k != "fingerprint"))
    cols = list(COLUMNS) + extra                  # an objective's own figures (serving: tokens_per_s, ...)
    return pd.DataFrame([{k: r.get(k) for k in cols} for r in rows], columns=cols)


def _progress(it, total: int, on: bool):
    from .progress import track  # rich on a terminal, plain lines otherwise
    return track(it, total, f"explore: {total} points", on) if on else it


def _timing_rows(label, fp, be, compiled, ca, variants, tuning_s, simulated, mesh=None) -> list:
    """The point's PIM programs timed under each timing variant: PIM ops at
    their swept ns and energy; host ops and md-dp ops (both parts) as
    compiled."""
    from ..hw.core import stack_variants
    from ..sim.cycles import sweep
    pim = [p for p in compiled.plans if p.placement == "pim"]
    # the point's row, built once (its placement / draft strings joined over every op cost ~60 us a row:
    # 0.06 s a point at 1 000 variants); each variant's row is a copy with its own figures
    base = _row(label, fp, be, ca, tuning_s, simulated, timing=None, reused=True)
    if not pim:
        return [dict(base, timing=i) for i in range(len(variants))]
    out = []
    rep = sweep([p.program for p in pim], stack_variants(variants), be, mesh=mesh)
    shape = (len(variants), len(pim))
    pim_ns = np.asarray(rep.total_ns, np.float64).reshape(shape).sum(axis=1)
    energy = np.asarray(rep.energy_pj, np.float64).reshape(shape).sum(axis=1)
    fixed = ca["total_ns"] - sum(float(p.choice.report.total_ns) for p in pim)
    fixed_pj = (ca["energy_pj"] or 0.0) - sum(float(p.choice.report.energy_pj) for p in pim)   # md-dp parts
    for i in range(len(variants)):
        total = fixed + float(pim_ns[i])
        r = dict(base, timing=i)
        r.update(total_ns=total, pim_ns=float(pim_ns[i]), energy_pj=fixed_pj + float(energy[i]),
                 speedup_gpu=ca["gpu_ns"] / total if total else None)
        out.append(r)
    return out


# ---------------------------------------------------------------------------
# evolutionary search over mixed structural and timing axes
# ---------------------------------------------------------------------------
def point_backend(name: str, genes: dict) -> Backend:
    """The backend of one design point: preset `name` with its options, then
    every "timing.<field>" / "energy.<field>" gene set on the result."""
    from ..hw.presets import get_backend
    opts = {k: v for k, v in genes.items() if "." not in k}
    be = get_backend(name, **opts)
    for k, v in genes.items():
        if "." in k:
            part, fld = k.split(".", 1)
            if part not in ("timing", "energy"):
                raise ValueError(f"axis {k!r}: dotted axes are 'timing.<field>' or 'energy.<field>'")
            sub = getattr(be, part)
            if fld not in {f for f in sub._dynamic_fields}:
                raise ValueError(f"axis {k!r}: {type(sub).__name__} has no field {fld!r}")
            be = be.replace(**{part: sub.replace(**{fld: v})})
    return be


def evolve(fn, *args, name: str, axes: dict, objective: str = "total_ns", population: int = 8,
           generations: int = 4, seed: int = 0, results: str | None = None, progress: bool = True, **explore_kw):
    """An evolutionary search over a design space too large to enumerate:
    `axes` maps preset options ("channels") and timing / energy fields
    ("timing.tRP") to their candidate values.  Each generation explores its
    new points (each tuned for itself, `explore`), keeps the better half by
    `objective` (a result column to minimise; "speedup_gpu" is maximised),
    and breeds the rest: uniform crossover of two parents and, as the tuner's
    evolutionary search moves one knob at a time (ATiM's balanced
    mutation), one axis stepped to a neighbouring value.  (`MAXIMISE` lists the
    objectives maximised.)  Returns every point explored (columns `COLUMNS` + the genes + "generation"), best
    first.  Deterministic for a seed; `results` resumes as in `explore`.
    `fn` may be an objective object (a serving run, `ServingObjective`, no
    args): objective "goodput_tokens_per_s" / "tokens_per_s" is maximised."""
    import pandas as pd
    keys = list(axes)
    for k in keys:
        if not isinstance(axes[k], (list, tuple)) or not axes[k]:
            raise ValueError(f"evolve: axis {k!r} needs a non-empty list of values")
    sign = -1.0 if objective in MAXIMISE else 1.0
    rng = np.random.default_rng(seed)
    space = int(np.prod([len(axes[k]) for k in keys]))
    label = lambda g: ",".join(f"{k}={axes[k][i]}" for k, i in zip(keys, g))      # noqa: E731
    seen: dict = {}            # genome -> (score, row, generation)

    def score(df) -> float:
        v = float(df.loc[df["timing"].isna(), objective].iloc[0])
        return sign * v if np.isfinite(v) else np.inf

    pop: list = []
    while len(pop) < min(population, space):
        g = tuple(int(rng.integers(len(axes[k]))) for k in keys)
        if g not in pop:
            pop.append(g)
    for gen in range(generations):
        new = [g for g in pop if g not in seen]
        if new:
            pts = {label(g): point_backend(name, {k: axes[k][i] for k, i in zip(keys, g)}) for g in new}
            df = explore(fn, *args, backends=pts, results=results, progress=progress, **explore_kw)
            for g in new:
                part = df[df["point"] == label(g)]
                seen[g] = (score(part), part, gen)
        if gen == generations - 1 or len(seen) == space:
            break
        ranked = sorted(seen, key=lambda g: seen[g][0])
        parents = ranked[:max(2, population // 2)]
        pop = list(parents)
        tries = 0
        while len(pop) < min(population, space) and tries < 50 * population:
            tries += 1
            a, b = (parents[int(i)] for i in rng.choice(len(parents), 2, replace=len(parents) < 2))
            child = [a[j] if rng.random() < 0.5 else b[j] for j in range(len(keys))]
            j = int(rng.integers(len(keys)))
            child[j] = int(np.clip(child[j] + rng.choice([-1, 1]), 0, len(axes[keys[j]]) - 1))
            child = tuple(child)
            if child not in pop:
                pop.append(child)
    rows = []
    for g, (_, part, gen) in sorted(seen.items(), key=lambda kv: kv[1][0]):
        for _, r in part.iterrows():
            rows.append({**r.to_dict(), **{k: axes[k][i] for k, i in zip(keys, g)}, "generation": gen})
    return pd.DataFrame(rows)
