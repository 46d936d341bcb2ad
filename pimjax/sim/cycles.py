"""`cycles`: the time interpreter of PIM command programs -- the entry points (`cycles`,
`cycles_batch`, `cycles_pooled`, `sweep`) over the engines: the scan (`scan.py`: a
`jax.lax.scan` over each group's records, many streams as the lanes of one scan) and the compiled
walk (`native.py`); `reference.py` is the slow, obvious loop both are checked against.
`cycles_batch` pools the streams of many programs into lanes (`_pack_lanes`); compiles are per
(lanes, length) bucket.

The per-group results combine into the program's time as

    rearrangement (host -> PIM before the kernel; max over groups when the
                   program rearranges channel-parallel through the host's
                   staging buffer, else their sum)
  + kernel        (max over groups; split into compute and the data
                   movement interleaved with it)
  + read-back     (max over groups)
  + host merge    (the host roofline: partial results + epilogue)
"""
from __future__ import annotations

import heapq
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from ..family import family_of, has_family, own_timer
from ..hw.core import Backend, Timing, check_timing_batch
from ..lower.program import Phase, Program, Records
from .engines import check_banks, check_programs, resolve_engine
from .padding import fine, pow2
from .report import CycleReport
from .scan import SCAN_FIELDS, features_of, scan_lanes, timing_vector


def _stream_arrays(records: Records, include_resident: bool) -> dict:
    """Scan inputs [S, R] from a Records: the `pre` flag of the leading
    rearrangement segment; resident records keep their flag (their time goes
    to its own bucket) unless `include_resident`, which times them as
    ordinary rearrangement."""
    arr = {f: np.asarray(getattr(records, f)) for f in ("op", "bank", "row", "n", "phase", "resident")}
    arr["sync"] = np.broadcast_to(np.asarray(records.sync), arr["op"].shape)
    if include_resident:
        arr["resident"] = np.zeros_like(arr["resident"])
    non_pre = (arr["phase"] != Phase.REARRANGE) & (arr["n"] > 0) & (arr["resident"] == 0)
    arr["pre"] = (np.cumsum(non_pre, axis=1) == 0).astype(np.int32)
    return {k: v.astype(np.int32) for k, v in arr.items()}


def program_arrays(program: Program, include_resident: bool = False, steady: bool = True) -> dict:
    """Everything `cycles` needs from a Program, as numpy arrays (a pytree
    that can be stacked across programs after padding with `pad_arrays`).

    steady: drop the resident placement from the stream (the steady state
    starts with resident operands already in place); it is timed separately.
    """
    rec = _stream_arrays(program.commands, include_resident)
    res = dict(rec)
    if steady and not include_resident:
        rec = dict(rec, n=np.where(rec["resident"] == 1, 0, rec["n"]))
        res["n"] = np.where(res["resident"] == 1, res["n"], 0)
    else:
        res["n"] = np.zeros_like(res["n"])
    return {"rec": _compact({k: rec[k] for k in SCAN_FIELDS}),
            "res": _compact({k: res[k] for k in SCAN_FIELDS}),
            **_program_scalars(program, include_resident)}


def _program_scalars(program: Program, include_resident: bool = False) -> dict:
    """The per-program numbers `_combine` reads besides the streams (SCALARS)."""
    st = program.stats
    S = program.commands.op.shape[0]
    return {
        "scale": np.float32(program.groups if S == 1 else 1),
        "parallel": np.bool_(program.parallel_rearrangement),
        # the host reads what it rearranges: a floor under the transfer (resident operands too)
        "pre_bytes": np.float32(st.rearrange_bytes + (st.resident_bytes if include_resident else 0.0)),
        "res_bytes": np.float32(0.0 if include_resident else st.resident_bytes),
        "merge_bytes": np.float32(st.readback_bytes + st.result_bytes),
        "merge_flops": np.float32(st.merge_flops),
        "merged": np.bool_(st.readback_bytes > 0 or st.merge_flops > 0),
        "cores": np.float32(program.cores),
    }


COARSE_UNTIL = 16384


def _bucket(n: int, coarse: bool = False) -> int:
    """Record lengths are padded to a power of two so that batches of
    different programs share compiled scans; `coarse` (the tuner's small
    batches): to a power of four up to COARSE_UNTIL records, since a compile
    costs seconds and scanning up to 4x padding of a short stream
    milliseconds.  Beyond MAX_STEPS (one stream longer than a lane block),
    to a multiple of a sixteenth of a power of two: there the padding is
    scanned, not compiled."""
    p2 = pow2(n, 64)
    if coarse and p2 <= COARSE_UNTIL:
        return p2 if p2.bit_length() % 2 == 1 else 2 * p2      # 64 * 4^k
    return fine(n) if n > MAX_STEPS else p2


def _compact(rec: dict) -> dict:
    """Drop records with n = 0 (padding, or resident placement left out of
    the steady state): they change nothing, and a shorter stream is a shorter
    scan.  Streams are re-padded to their longest (at least one record).
    The fields are compacted as one stacked [F, S, R] table (one mask, not
    one per field)."""
    live = rec["n"] > 0
    counts = live.sum(axis=1)
    if (counts == counts[0]).all() and live[:, :counts[0]].all():     # already compact: a slice
        return {k: v[:, :max(1, int(counts[0]))] for k, v in rec.items()}
    table = np.stack(list(rec.values()))
    if live.shape[0] == 1:                                              # one stream: a mask
        packed = table[:, :, live[0]]
    else:
        packed = np.zeros(table.shape[:2] + (max(1, int(counts.max())),), table.dtype)
        for i in range(live.shape[0]):
            packed[:, i, :counts[i]] = table[:, i, live[i]]
    return dict(zip(rec, packed))


def pad_arrays(arrs: list[dict], coarse: bool = False) -> dict:
    """Stack program arrays, padding record streams (and missing streams)
    with NOP records, which take no time, to one [S, R] (R a power of two)."""
    out = {}
    # One length for both streams, so `_scan_programs` scans them as lanes of
    # one scan (an XLA compile of the scan costs seconds; two scan bodies
    # cost twice that, and two length buckets multiply the compiled shapes).
    # Without any resident placement in the batch the resident stream is
    # empty ([.., 0]) and not scanned at all.
    any_res = any(bool((a["res"]["n"] > 0).any()) for a in arrs)
    R = _bucket(max(a[key]["op"].shape[1] for a in arrs for key in (("rec", "res") if any_res else ("rec",))),
                coarse)
    for key in ("rec", "res"):
        S = max(a[key]["op"].shape[0] for a in arrs)
        RK = R if (key == "rec" or any_res) else 0

        def pad(x):
            return np.pad(x[:, :RK], ((0, S - x.shape[0]), (0, RK - min(RK, x.shape[1]))))
        out[key] = {f: np.stack([pad(a[key][f]) for a in arrs]) for f in SCAN_FIELDS}
    for key in SCALARS:
        out[key] = np.stack([a[key] for a in arrs])
    return out


STREAM_BLOCK = 256
"""Streams per scan.  The step's state ([banks, N] per-bank tables and
[1, N] rows) stays in the CPU's L2 cache up to a few hundred streams;
larger sets are scanned in blocks of this many (`_scan_chunked`) and a
step of fewer pays a fixed per-fusion cost for little work."""


def _scan_chunked(streams: dict, t: dict, geo: tuple) -> dict:
    """`scan_lanes` of [N, R] streams, one per lane (t leaves [N]), in blocks of at most
    STREAM_BLOCK streams, one after another (`lax.map`)."""
    banks, per_bg, refresh, features = geo
    N = streams["op"].shape[0]
    if N <= STREAM_BLOCK:
        return scan_lanes(streams, t, banks, per_bg, refresh, features)
    C = -(-N // STREAM_BLOCK)
    pad = C * STREAM_BLOCK - N                              # NOP streams (n = 0), timing of the last

    def blocks(x, mode):
        x = jnp.pad(x, ((0, pad),) + ((0, 0),) * (x.ndim - 1), mode=mode)
        return x.reshape((C, STREAM_BLOCK) + x.shape[1:])
    out = jax.lax.map(lambda b: scan_lanes(b[0], b[1], banks, per_bg, refresh, features),
                      ({f: blocks(v, "constant") for f, v in streams.items()},
                       {k: blocks(v, "edge") for k, v in t.items()}))
    return jax.tree.map(lambda x: x.reshape((C * STREAM_BLOCK,) + x.shape[2:])[:N], out)


def _scan_programs(arr: dict, t: dict, geo: tuple):
    """Scan the record streams of P padded programs (`pad_arrays`, leading
    [P]) as one [P * S (+ P * S resident), R] block of streams; t: timing
    leaves, scalars or [P].  Returns the scan outputs with [P, S] leading
    axes and the resident-placement time per stream [P, S]."""
    banks, per_bg, refresh, features = geo
    P, S = arr["rec"]["op"].shape[:2]
    R_res = arr["res"]["op"].shape[2]
    t_stream = {k: jnp.repeat(jnp.broadcast_to(jnp.asarray(v, jnp.float32), (P,)), S) for k, v in t.items()}

    def flat(streams):
        return {f: streams[f].reshape(P * S, -1) for f in SCAN_FIELDS}

    def scan(streams, tt):
        return _scan_chunked(streams, tt, geo)

    if R_res == 0:                          # no resident placement in the batch (pad_arrays)
        out, resident = scan(flat(arr["rec"]), t_stream), jnp.zeros((P * S,), jnp.float32)
    else:                                   # pad_arrays gave both one length: one scan
        both = scan({f: jnp.concatenate([flat(arr["rec"])[f], flat(arr["res"])[f]]) for f in SCAN_FIELDS},
                    {k: jnp.concatenate([v, v]) for k, v in t_stream.items()})
        out = jax.tree.map(lambda x: x[:P * S], both)
        resident = both["buckets"][P * S:, 4]
    out = jax.tree.map(lambda x: x.reshape((P, S) + x.shape[1:]), out)
    return out, resident.reshape(P, S)


def _time_programs(arr: dict, t: dict, energy, host, geo: tuple) -> CycleReport:
    """CycleReports [P] of P padded programs (pure jnp); t: timing leaves,
    scalars or [P] (one timing variant per program)."""
    out, resident = _scan_programs(arr, t, geo)
    return _combine_programs(arr, out, resident, t, energy, host)


def _combine_programs(arr: dict, out: dict, resident, t: dict, energy, host) -> CycleReport:
    """`_combine` of P programs: out leaves [P, S, ...], resident [P, S],
    t leaves scalars or [P]."""
    P = resident.shape[0]
    t_prog = {k: jnp.broadcast_to(jnp.asarray(v, jnp.float32), (P,)) for k, v in t.items()}
    return jax.vmap(lambda a, o, r, tt: _combine(a, o, r, tt, energy, host))(arr, out, resident, t_prog)


def _combine(arr: dict, out: dict, resident, t: dict, e, host) -> CycleReport:
    b = out["buckets"]                                     # [S, 5]
    pre, k_rearr, k_comp, rback = (b[:, i] for i in range(4))
    scale = arr["scale"]
    tck = t["tCK"]
    host_read = host.memory_ns(arr["pre_bytes"]) / tck
    host_read_res = host.memory_ns(arr["res_bytes"]) / tck
    rearr_pre = jnp.where(arr["parallel"], jnp.maximum(jnp.max(pre), host_read), jnp.sum(pre) * scale)
    kernel = k_rearr + k_comp
    g = jnp.argmax(kernel)
    readback = jnp.max(rback)
    merge = jnp.where(arr["merged"], host.time_ns(arr["merge_bytes"], arr["merge_flops"]), 0.0) / tck
    rearrangement = rearr_pre + k_rearr[g]
    total = rearrangement + k_comp[g] + readback + merge
    counts = jnp.sum(out["counts"], axis=0) * scale
    energy = (counts[0] * e.act + counts[7] * e.pre + counts[1] * e.rd + counts[2] * e.wr
              + counts[3] * arr["cores"] * (e.pim_op + e.rd) + counts[4] * e.refresh
              + counts[5] * 32.0 * e.io_byte)
    safe = jnp.maximum(total, 1.0)
    util = jnp.stack([jnp.max(out["counts"][:, 6]) / safe,
                      jnp.max(out["counts"][:, 3]) * t["tCCD_AB"] / safe,
                      jnp.max(out["counts"][:, 5]) * t["tBL"] / safe,
                      rearrangement / safe, merge / safe])
    names = ("ACT", "RD", "WR", "PIM", "REF", "bursts", "commands", "PRE")   # ACT / PRE: per bank
    return CycleReport(total_cycles=total, total_ns=total * tck, rearrangement=rearrangement,
                       compute=k_comp[g], readback=readback, merge=merge,
                       resident_cycles=jnp.where(arr["parallel"], jnp.maximum(jnp.max(resident), host_read_res),
                                                 jnp.sum(resident) * scale),
                       kernel_cycles=jnp.max(kernel), bound=jnp.argmax(util), utilisation=util,
                       energy_pj=energy, counts={n: counts[i] for i, n in enumerate(names)})


def _geo(backend: Backend, refresh: bool, arrs) -> tuple:
    """Static scan configuration: geometry, refresh, and the timing features
    the programs' records use (union over `arrs`, program_arrays dicts)."""
    ops = np.concatenate([np.asarray(a["rec"]["op"]).ravel() for a in arrs] +
                         [np.asarray(a["res"]["op"]).ravel() for a in arrs])
    return (backend.group.banks, backend.group.banks_per_bank_group, bool(refresh), features_of(ops))


@partial(jax.jit, static_argnames=("geo",))
def _time_batch(arr, t, energy, host, geo):
    return _time_programs(arr, t, energy, host, geo)


@partial(jax.jit, static_argnames=("geo",))
def _time_sweep(arr, t, energy, host, geo):
    """[T, P] reports: every program under every timing variant, scanned as
    one block of T * P programs (one timing per program)."""
    T = next(iter(t.values())).shape[0]
    P = arr["cores"].shape[0]
    tiled = jax.tree.map(lambda x: jnp.tile(x, (T,) + (1,) * (x.ndim - 1)), arr)
    rep = _time_programs(tiled, {k: jnp.repeat(v, P) for k, v in t.items()}, energy, host, geo)
    return jax.tree.map(lambda x: x.reshape((T, P) + x.shape[1:]), rep)


def cycles(program: Program, backend: Backend, *, include_resident: bool = False,
           refresh: bool = True, engine: str | None = None) -> CycleReport:
    """Time of `program` on `backend` (see module docstring).

    include_resident: time the one-time placement of resident operands as
    ordinary rearrangement (first call); by default it is reported only as
    `resident_cycles` and the steady state starts with the data in place.
    engine: "native" or "scan" (default DEFAULT_ENGINE); the same numbers.

    Example:
        >>> rep = cycles(program, get_backend("hbm-pim"))      # doctest: +SKIP
        >>> rep.total_cycles, rep.breakdown()                   # doctest: +SKIP
    """
    check_programs([program], backend)
    engine = resolve_engine(engine, backend.timing)
    model = _own_model(backend)
    if model is not None:           # e.g. DPUs run their own instruction streams: UPMEM's time model
        return model(program, backend, include_resident=include_resident, refresh=refresh, engine=engine)
    check_banks([program], backend)
    t = timing_vector(backend.timing)
    if engine == "native" or _controller(backend) is not None:
        return report_at(_native_reports([program], t, backend, refresh, include_resident=include_resident), 0)
    arr = program_arrays(program, include_resident)
    rep = _time_batch(pad_arrays([arr]), t, backend.energy, backend.system.host, _geo(backend, refresh, [arr]))
    return report_at(rep, 0)


def _controller(backend: Backend):
    """The stream timer of the group's controller when it is not pimjax's
    DRAM model (`Group.controller`; the family's `controllers`, with
    `sim.native.time_streams`'s signature), else None.  Such a controller
    runs on the host (the native path): a JAX transform over its timing, or
    `engine="scan"`, is refused where it would be needed."""
    name = backend.group.controller
    if name == "dram":
        return None
    timer = family_of(backend).controllers.get(name) if has_family(backend) else None
    if timer is None:
        offered = sorted(family_of(backend).controllers) if has_family(backend) else []
        raise ValueError(f"{backend.name}: Group.controller={name!r} is not offered by its family (offered: "
                         f"['dram'] + {offered})")
    if any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(backend.timing)):
        raise ValueError(f"{backend.name}: the {name!r} controller times concrete timings on the host; under "
                         "jax.vmap / jax.jit over the Timing use pimjax.sim.cycles.sweep")
    return timer


def _own_model(backend: Backend):
    """The family's own time model (UPMEM's DPU pipeline) or the program
    controller `Group.controller` names (DCC's forks,
    `Family.program_controllers`), or None: the DRAM engines time the records
    (also for a backend no family implements)."""
    return own_timer(backend)


SMALL_BATCH = 64
BATCH_SIZES = (4, 16, 64, 256)
SWEEP_CHUNK = 4096
"""Programs per `_combine` dispatch of a large sweep (one more compile)."""
SCALARS = ("scale", "parallel", "pre_bytes", "res_bytes", "merge_bytes", "merge_flops", "merged", "cores")


def _batch_size(k: int, sizes: tuple = BATCH_SIZES) -> int:
    """Batches are padded to a few fixed sizes (they share compiles)."""
    return next((b for b in sizes if b >= k), k)


def report_at(report: CycleReport, i: int) -> CycleReport:
    """Program `i`'s CycleReport out of a batched one (cycles_batch)."""
    return jax.tree.map(lambda x: x[i], report)


def cycles_pooled(program: Program, backend: Backend) -> CycleReport:
    """`cycles(program, backend)` through the batched scan, so it reuses the
    XLA compilations of the tuner's batches (a cold compile of the scan
    costs seconds); the same numbers."""
    if _own_model(backend):
        return cycles(program, backend)
    return report_at(cycles_batch([program], backend), 0)


@partial(jax.jit, static_argnames=("geo", "n_streams"))
def _scan_block(lanes: dict, t: dict, geo: tuple, n_streams: int) -> dict:
    banks, per_bg, refresh, features = geo
    return scan_lanes(lanes, t, banks, per_bg, refresh, features, n_streams=n_streams)


_combine_batch = jax.jit(_combine_programs)
LANE_SIZES = (16, 32, 64, 128, 256)
MAX_STEPS = 8192
"""Longest scan of a lane block unless one stream is longer."""
MAX_BLOCK = 1 << 22
"""Lanes x steps of a block, at most (unless one stream is longer): bounds
its per-record arrays (13 floats of sums per record, 4 of inputs)."""


def _pack_lanes(lengths: np.ndarray, coarse: bool, lanes: int = STREAM_BLOCK) -> list[tuple[int, int, list]]:
    """Blocks of lanes for the streams of the given lengths (index into
    `lengths`; empty streams are left out): [(N lanes, T steps, [[stream,
    ...] per lane])].  A lane runs its streams back to back, so a block's
    scan is T >= the longest stream steps of N lanes; streams are dealt
    longest first to the least-loaded lane (LPT), and N is about total /
    longest (more lanes than that add per-step work without shortening the
    scan).  T is padded to a power of two (four if `coarse`), N to
    LANE_SIZES: blocks share compiled scans."""
    order = [int(k) for k in np.argsort(-lengths, kind="stable") if lengths[k] > 0]
    blocks = []
    while order:
        L0, M = int(lengths[order[0]]), int(sum(int(lengths[k]) for k in order))
        n = _batch_size(min(lanes, -(-M // L0), max(1, MAX_BLOCK // L0)), LANE_SIZES)
        T = _bucket(max(L0, min(-(-M // n), MAX_STEPS)), coarse)
        load = [(0, j) for j in range(n)]
        assign: list[list] = [[] for _ in range(n)]
        rest = []
        for k in order:
            used, j = heapq.heappop(load)
            if used + lengths[k] <= T:
                assign[j].append(k)
                used += int(lengths[k])
            else:
                rest.append(k)
            heapq.heappush(load, (used, j))
        blocks.append((n, T, assign))
        order = rest
    return blocks


SCAN_THREADS = max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                           else (os.cpu_count() or 1)))
"""Lane blocks scanned at once.  One XLA:CPU scan keeps one core busy (its
steps are a chain of small fusions); jax releases the GIL while it runs, so
two blocks on two threads take less wall time than one after the other
(benchmarks/README.md, "cycles": 0.56 s -> 0.47-0.50 s on its case)."""


def _split_blocks(blocks: list, parts: int) -> list:
    """Each block of n >= 32 lanes as up to `parts` blocks of n / k lanes
    (k <= parts a power of two, n / k >= 16) and the same length: the same
    lanes, scanned by k threads instead of one."""
    out = []
    for n, T, assign in blocks:
        k = 1
        while 2 * k <= parts and n // (2 * k) >= LANE_SIZES[0]:       # lane counts stay powers of two
            k *= 2
        m = n // k
        out += [(m, T, part) for part in (assign[j * m:(j + 1) * m] for j in range(k)) if any(part)]
    return out


def cycles_batch(programs: list[Program], backend: Backend, *, refresh: bool = True,
                 batch: int = STREAM_BLOCK, coarse: bool | None = None,
                 threads: int | None = None, engine: str | None = None) -> CycleReport:
    """CycleReports of many programs at once; every field has a leading
    [len(programs)] axis in the input order.

    The record streams of all programs (one per group, and one per group for
    the resident placement) are pooled and packed into lanes of at most
    `batch` lanes per scan (`_pack_lanes`, `scan_lanes`); the per-program
    reports are then combined in one vmapped call.

    coarse: pad lengths to powers of four (up to COARSE_UNTIL): fewer
    compiles, up to 4x the scanning.  Default: for a small set (at most
    SMALL_BATCH programs, e.g. the tuner's top-k).
    threads: lane blocks scanned concurrently (default SCAN_THREADS), or
    the native engine's threads; the numbers do not depend on it.
    engine: "native" (default DEFAULT_ENGINE: every stream timed by the
    compiled event loop, `sim.native`; `batch` and `coarse` do not apply) or
    "scan" (the lane-packed lax.scan); the same numbers."""
    check_programs(programs, backend)
    engine = resolve_engine(engine)
    if _own_model(backend):          # UPMEM's DPU model: one report per program, stacked
        reps = [cycles(p, backend, refresh=refresh, engine=engine) for p in programs]
        return jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *reps)
    check_banks(programs, backend)
    if engine == "native" or _controller(backend) is not None:
        return _native_reports(programs, timing_vector(backend.timing), backend, refresh, threads)
    arrs = [program_arrays(p) for p in programs]
    coarse = len(programs) <= SMALL_BATCH if coarse is None else coarse
    t = timing_vector(backend.timing)
    geo = _geo(backend, refresh, arrs)
    P, S = len(arrs), max(a["rec"]["op"].shape[0] for a in arrs)
    # the streams: (program, kind, stream) and live record count
    who = [(i, kind, s) for i, a in enumerate(arrs) for kind in ("rec", "res") for s in range(a[kind]["n"].shape[0])]
    lengths = np.array([int((arrs[i][kind]["n"][s] > 0).sum()) for i, kind, s in who], np.int64)
    buckets, counts = np.zeros((P, S, 5), np.float32), np.zeros((P, S, 8), np.float32)
    end, resident = np.zeros((P, S), np.float32), np.zeros((P, S), np.float32)
    threads = SCAN_THREADS if threads is None else max(1, int(threads))

    def block_inputs(n, T, assign):
        block = {f: np.zeros((n, T), np.int32) for f in SCAN_FIELDS}
        block["sid"] = np.full((n, T), -1, np.int32)
        ids = [k for lane in assign for k in lane]
        local = {k: m for m, k in enumerate(ids)}
        for j, lane in enumerate(assign):
            off = 0
            for k in lane:
                i, kind, s = who[k]
                L = int(lengths[k])                          # live records come first (`_compact`)
                for f in SCAN_FIELDS:
                    block[f][j, off:off + L] = arrs[i][kind][f][s, :L]
                block["sid"][j, off:off + L] = local[k]
                off += L
        return block, ids

    def scan(spec):
        block, ids = block_inputs(*spec)
        return ids, jax.tree.map(np.asarray, _scan_block(block, t, geo, _batch_size(len(ids), LANE_SIZES)))

    blocks = _pack_lanes(lengths, coarse, batch)
    if threads > 1:
        blocks = _split_blocks(blocks, threads)
    if threads > 1 and len(blocks) > 1:
        with ThreadPoolExecutor(threads) as pool:
            results = list(pool.map(scan, blocks))
    else:
        results = [scan(b) for b in blocks]
    for ids, out in results:
        for m, k in enumerate(ids):
            i, kind, s = who[k]
            if kind == "rec":
                buckets[i, s], end[i, s], counts[i, s] = out["buckets"][m], out["end"][m], out["counts"][m]
            else:
                resident[i, s] = out["buckets"][m, 4]
    return _combine_chunks(arrs, {"buckets": buckets, "end": end, "counts": counts}, resident, t, backend)


def _combine_chunks(arrs: list[dict], out: dict, resident: np.ndarray, t: dict, backend: Backend) -> CycleReport:
    """CycleReports [P] from the per-stream results of P programs (out
    leaves [P, S, ...], resident [P, S]; arrs: their `program_arrays` or
    `_program_scalars`, or those stacked: {SCALARS key: [P, ...]}):
    `_combine` in padded chunks of 256 programs (they share compiles), of
    SWEEP_CHUNK where there are more than 4 of those (a sweep's variants x
    programs: 1 000 variants of 14 programs took 55 dispatches of ~20 ms).
    t: timing leaves, scalars or [P]."""
    scal = arrs if isinstance(arrs, dict) else {k: np.stack([a[k] for a in arrs]) for k in SCALARS}
    P = len(next(iter(scal.values())))
    per_prog = {k for k, v in t.items() if np.ndim(v) > 0}
    chunk, sizes = (256, BATCH_SIZES) if P <= 4 * 256 else (SWEEP_CHUNK, BATCH_SIZES + (SWEEP_CHUNK,))
    parts = []
    for lo in range(0, P, chunk):
        hi = min(P, lo + chunk)
        pad = _batch_size(hi - lo, sizes) - (hi - lo)
        # padded with copies of the chunk's last row (one repeat, not a list of `pad` one-row slices)
        take = lambda x: np.concatenate([x[lo:hi], np.repeat(x[hi - 1:hi], pad, axis=0)]) if pad else x[lo:hi]  # noqa: E731
        tt = {k: take(np.asarray(v)) if k in per_prog else v for k, v in t.items()}
        rep = _combine_batch(jax.tree.map(take, scal), jax.tree.map(take, out), take(resident), tt,
                             backend.energy, backend.system.host)
        parts.append(jax.tree.map(lambda x: np.asarray(x)[:hi - lo], rep))
    return jax.tree.map(lambda *xs: np.concatenate(xs), *parts)


def _fields32(c: Records, include_resident: bool):
    """The [S, R] int32 fields `native.pack_program` reads (views, no copies
    where they already are int32; every field broadcast to [S, R], as numpy
    assignment would: the compiled loop does not check bounds)."""
    S, R = c.op.shape
    f = [np.asarray(getattr(c, k)) for k in ("op", "bank", "row", "n", "phase", "resident", "sync")]
    f = [np.broadcast_to(x if x.dtype == np.int32 else x.astype(np.int32), (S, R)) for x in f]
    split = not include_resident and bool((f[5] == 1).any())
    return f, split


def _pack_numpy(out: np.ndarray, off: int, c: Records, include_resident: bool, split: bool) -> None:
    """`native.pack_program` in numpy (the reference its test compares)."""
    S, R = c.op.shape
    block = out[:, off:off + S * R].reshape(len(SCAN_FIELDS), S, R)
    resident = np.asarray(c.resident) == 1
    for j, f in enumerate(("op", "bank", "row", "n", "phase")):
        block[j] = getattr(c, f)
    block[5] = 0 if include_resident else resident
    block[7] = np.broadcast_to(np.asarray(c.sync), (S, R))
    n = block[3]
    # the leading rearrangement: records before the first live non-rearrangement one
    block[6] = np.cumsum((block[4] != Phase.REARRANGE) & (n > 0) & ~(resident & ~include_resident),
                         axis=1) == 0
    if split:
        res = out[:, off + S * R:off + 2 * S * R].reshape(len(SCAN_FIELDS), S, R)
        res[...] = block
        res[3] = np.where(resident, n, 0)
        n[resident] = 0


_ARENA = threading.local()
ARENA_MAX = 1 << 24          # entries (64 MB) a thread keeps for reuse


def _arena(size: int) -> np.ndarray:
    """A 1-D int32 scratch buffer of at least `size` entries, kept per thread
    and reused: a fresh 32 MB table per 1 M-record batch paid its page
    faults again every batch (the Labeller times ~100 such batches for one
    exhaustive GEMV search)."""
    if size > ARENA_MAX:                   # a one-off big batch: not kept alive
        return np.empty(size, np.int32)
    buf = getattr(_ARENA, "buf", None)
    if buf is None or buf.size < size:
        buf = _ARENA.buf = np.empty(min(ARENA_MAX, max(size, 1 << 20)), np.int32)
    return buf


def _pool_streams(programs: list[Program], include_resident: bool = False, scratch: bool = False):
    """The record streams of P programs side by side, for the native engine,
    built straight from their Records in one compiled pass per program
    (`native.pack_program`; no compaction: the loop skips records with
    n = 0).  Per program its S streams, the steady state ("rec": resident
    placement dropped, as `program_arrays`) and, when it has resident
    records, their one-time placement ("res").  scratch: write into this
    thread's reusable buffer (valid until its next call on the thread).

    Returns rec [8, M] int32 (rows SCAN_FIELDS), starts / stops [K] and
    who [K] = (program, "rec" | "res", stream)."""
    from .native import pack_program
    parts = [(i, p.commands) + _fields32(p.commands, include_resident) for i, p in enumerate(programs)]
    sizes = [int(np.prod(c.op.shape)) * (2 if split else 1) for _, c, _, split in parts]
    total = sum(sizes)
    width = len(SCAN_FIELDS)
    rec = (_arena(width * total)[:width * total].reshape(width, total) if scratch
           else np.empty((width, total), np.int32))
    who, starts, stops = [], [], []
    off = 0
    for (i, c, f, split), size in zip(parts, sizes):
        S, R = c.op.shape
        pack_program(rec, off, *f, include_resident, split)
        for kind, base in (("rec", off), ("res", off + S * R))[:2 if split else 1]:
            for st in range(S):
                who.append((i, kind, st))
                starts.append(base + st * R)
                stops.append(base + st * R + R)
        off += size
    return rec, np.asarray(starts, np.int64), np.asarray(stops, np.int64), who


def _timing_key(seg: np.ndarray) -> bytes:
    """What the event loop's result depends on in a stream seg [8, R] (rows
    SCAN_FIELDS): its live records (n > 0: the loop skips the others), with
    their rows renamed by first appearance.  Why renaming keeps the timing:
    the loop compares rows only with each other (is the bank's open row the
    record's row?) and with 0 (row < 0: a buffer access, no row), so any
    one-to-one renaming of the rows >= 0 times alike: two channels reading
    the same pattern at other rows, or a stream and its copy with dead
    records left in, are timed once."""
    seg = seg[:, seg[3] > 0]
    rows = seg[2]
    real = rows >= 0
    if real.any():
        vals, first_at, which = np.unique(rows[real], return_index=True, return_inverse=True)
        rank = np.empty(len(vals), np.int32)
        rank[np.argsort(first_at, kind="stable")] = np.arange(len(vals), dtype=np.int32)
        seg = seg.copy()
        seg[2, real] = rank[which]
    return seg.tobytes()


def _distinct_streams(rec: np.ndarray, starts: np.ndarray, stops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first stream of each distinct timing [U], distinct index of every
    stream [K]) of the streams rec[:, starts[k]:stops[k]]: streams of equal
    `_timing_key` time alike under every timing."""
    seen: dict = {}
    first, inv = [], np.empty(len(starts), np.int64)
    for k, (a, b) in enumerate(zip(starts.tolist(), stops.tolist())):
        key = _timing_key(rec[:, a:b])
        u = seen.get(key)
        if u is None:
            u = seen[key] = len(first)
            first.append(k)
        inv[k] = u
    return np.asarray(first, np.int64), inv


def _native_outputs(programs: list[Program], table: np.ndarray, backend: Backend, refresh: bool,
                    threads: int | None = None, include_resident: bool = False):
    """Per-stream results of P programs under each of V timing rows
    (table [V, F], `native.timing_table`): out leaves [V, P, S, ...] float32
    and the resident placement time [V, P, S]."""
    from .native import time_streams
    from .native_variants import time_streams_sweep
    rec, starts, stops, who = _pool_streams(programs, include_resident, scratch=True)
    V, P, K = table.shape[0], len(programs), len(who)
    S = max(p.commands.op.shape[0] for p in programs)
    banks, per_bg = backend.group.banks, backend.group.banks_per_bank_group
    own = _controller(backend)
    if own is not None:  # the family's controller: every (variant, stream) pair, stream after stream
        tix = np.repeat(np.arange(V, dtype=np.int64), K)
        res = own(rec, np.tile(starts, V), np.tile(stops, V), tix, table, banks, per_bg, refresh, threads)
    elif V == 1:        # one timing (the tuner's path): each stream once, by the one-variant loop
        res = time_streams(rec, starts, stops, np.zeros(K, np.int64), table, banks, per_bg, refresh, threads)
    else:
        # a stream's result depends only on its records and the timing rows they read: equal streams (the
        # q / k / v projections of a layer, channels that run alike) are timed once; each distinct stream
        # runs under its distinct variants (`time_streams_sweep`: variants equal on the rows it reads are one
        # run) all at once (its records decoded once per block of variants)
        first, inv = _distinct_streams(rec, starts, stops)
        res = time_streams_sweep(rec, starts[first], stops[first], table, banks, per_bg, refresh, threads)
        # [V, U, ...] -> [V * K, ...], each stream given its distinct run
        res = {k: v[:, inv].reshape((V * K,) + v.shape[2:]) for k, v in res.items()}
    out = {"buckets": np.zeros((V, P, S, 5), np.float32), "end": np.zeros((V, P, S), np.float32),
           "counts": np.zeros((V, P, S, 8), np.float32)}
    resident = np.zeros((V, P, S), np.float32)
    if K:
        prog, stream = np.array([w[0] for w in who]), np.array([w[2] for w in who])
        is_rec = np.array([w[1] == "rec" for w in who])
        r = {k: v.reshape((V, K) + v.shape[1:]) for k, v in res.items()}
        for k in out:
            out[k][:, prog[is_rec], stream[is_rec]] = r[k][:, is_rec]
        resident[:, prog[~is_rec], stream[~is_rec]] = r["buckets"][:, ~is_rec, 4]
    return out, resident


def _native_reports(programs: list[Program], t: dict, backend: Backend, refresh: bool,
                    threads: int | None = None, include_resident: bool = False) -> CycleReport:
    """CycleReports [P] of P programs under one timing, by the native engine."""
    from .native import timing_table
    out, resident = _native_outputs(programs, timing_table(t), backend, refresh, threads, include_resident)
    scalars = [_program_scalars(p, include_resident) for p in programs]
    return _combine_chunks(scalars, jax.tree.map(lambda x: x[0], out), resident[0], t, backend)


def sweep(programs, timings: Timing, backend: Backend, *, mesh=None, refresh: bool = True,
          engine: str | None = None) -> CycleReport:
    """Time programs under a batch of timing variants: fields [T, P].

    programs: a Program or a list of them (padded to one length).
    timings:  a `Timing` whose leaves have a leading [T] axis (see
              `pimjax.hw.stack_variants`).
    mesh:     optional `jax.sharding.Mesh` with one axis; the timing batch is
              sharded over its devices (multi-device / multi-host JAX) and
              timed by the scan engine, which runs on every JAX device.
    engine:   without a mesh, "native" (default DEFAULT_ENGINE: every
              (variant, stream) pair timed by the compiled event loop) or
              "scan" (one vmapped lax.scan over the variants).
    """
    progs = programs if isinstance(programs, (list, tuple)) else [programs]
    check_programs(progs, backend)
    if _own_model(backend) is not None and family_of(backend).cycles is None:
        raise ValueError(f"{backend.name}: Group.controller={backend.group.controller!r} times programs with its own "
                         f"fixed timing table (a paper's simulator); there are no timing variants to sweep")
    if _own_model(backend):
        own = family_of(backend).sweep
        where = f"{own.__module__}.{own.__name__}" if own is not None else "pimjax.backends.family_of(backend).sweep"
        raise ValueError(f"{backend.name} has its own time model, whose variants are whole backends: use "
                         f"{where}(program, stack_variants([backend, ...]))")
    check_banks(progs, backend)
    t = timing_vector(check_timing_batch(timings))       # one leading [T] axis on every leaf
    if mesh is not None:
        if engine not in (None, "scan"):
            raise ValueError(f"a sweep over a device mesh runs on the scan engine (engine='scan' or None), got "
                             f"engine={engine!r}; the native engine runs on this host's cores (mesh=None)")
        engine = "scan"
    if resolve_engine(engine) == "native" or (mesh is None and _controller(backend) is not None):
        from .native import timing_table
        out, resident = _native_outputs(progs, timing_table(t), backend, refresh)
        T, P = out["end"].shape[:2]
        flat = lambda x: x.reshape((T * P,) + x.shape[2:])          # noqa: E731  [T, P] -> [T * P]
        scal = [_program_scalars(p) for p in progs]
        scal = {k: np.tile(np.stack([a[k] for a in scal]), (T,) + (1,) * (np.ndim(scal[0][k]))) for k in SCALARS}
        rep = _combine_chunks(scal, jax.tree.map(flat, out), flat(resident),
                              {k: np.repeat(np.asarray(v), P) for k, v in t.items()}, backend)
        rep = jax.tree.map(lambda x: x.reshape((T, P) + x.shape[1:]), rep)
        return rep if isinstance(programs, (list, tuple)) else jax.tree.map(lambda x: x[:, 0], rep)
    arrs = [program_arrays(p) for p in progs]
    arr = pad_arrays(arrs)
    if mesh is not None:
        from jax.sharding import NamedSharding, PartitionSpec
        if len(mesh.axis_names) != 1:
            raise ValueError(f"sweep shards the variants over a mesh of one axis; got axes {mesh.axis_names} "
                             "(jax.make_mesh((n,), ('variants',)))")
        axis = mesh.axis_names[0]
        n = len(mesh.devices.flat)
        T = next(iter(t.values())).shape[0]
        if T % n:
            raise ValueError(f"{T} timing variants do not divide over {n} devices")
        sh = NamedSharding(mesh, PartitionSpec(axis))
        t = {k: jax.device_put(v, sh) for k, v in t.items()}
    out = _time_sweep(arr, t, backend.energy, backend.system.host, _geo(backend, refresh, arrs))
    if not isinstance(programs, (list, tuple)):
        out = jax.tree.map(lambda x: x[:, 0], out)
    return out

