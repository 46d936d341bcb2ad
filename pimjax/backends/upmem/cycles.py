"""The UPMEM time model: host<->DPU transfers, the DPU kernel, host merge.

A `jax.lax.scan` over the program's records (one stream shared by every
rank and DPU, see `backends/upmem/lower.py`) with this state:

* per tasklet: the DPU cycle at which it can go on (`tk[24]`);
* the DPU's DMA engine busy time (MRAM <-> WRAM requests, one at a time);
* issued instructions; time per phase bucket (ns).

Rules (parameters from the Backend, derived where noted):

* host transfers (ns): a parallel transfer record moves `n` bytes to each
  DPU of every used rank, `aux` times: each call costs
  `link.call_ns + n * cores / bw_rank` per rank (bw_rank = System
  link_bandwidth host->DPU, readback_bandwidth DPU->host, GB/s = B/ns);
  the used ranks run `min(ranks, link.concurrent_ranks_*)` at a time (all
  of them by default, the preset's assumption), and the whole transfer is at
  least its bytes over the host's memory roofline (each byte is read or
  written by the host CPU: `HostModel.mem_bandwidth x bandwidth_efficiency`,
  the convention of the DRAM model's channel-parallel rearrangement).
  Serial records address one DPU at a time at `link.serial_*_gbps`; a
  broadcast writes the same bytes to every DPU of a rank at
  `link.broadcast_gbps` per rank.
* `LAUNCH` (boot): `link.launch_ns`; `BARRIER`: every tasklet waits for the
  slowest.
* `DPU_EXEC` of n instructions on tasklet k: the DPU pipeline has
  `pipeline_depth` = 14 stages and a tasklet's next instruction can enter
  when its previous one is 3 stages from leaving (PrIM), so one tasklet
  issues at most one instruction every `pipeline_depth - 3` = 11 cycles and
  the pipeline issues at most one per cycle overall: with >= 11 active
  tasklets it is full (1 instruction / cycle), with fewer the throughput is
  tasklets / 11.  Modelled as `tk[k] += 11 n` (the per-tasklet rate) and the
  kernel lasting at least `sum(n)` cycles (the pipeline's rate).
* `DMA_RD` / `DMA_WR` of n bytes on tasklet k: lasts `dma_latency_cycles
  + n / dma_bytes_per_cycle` (PrIM's MRAM model: latency plus 2 B/cycle);
  the tasklet sleeps until it completes while the other tasklets keep
  issuing (overlap of DMA with other tasklets' compute).  The DPU has one
  DMA engine, so the kernel lasts at least the sum of all DMA times.  Like
  the pipeline this is a per-tasklet rate plus a global bound, not a FIFO
  in record order: record order only approximates issue order, and a
  strict queue in that order delays early requests behind late ones.
* kernel = max(slowest tasklet, issued instructions, DMA busy) DPU cycles,
  converted at `dpu_clock_ghz`; host merge = the host roofline on the
  partials read back and the merge FLOPs (ATiM's final reduction) plus its
  launch overhead.

Report (`CycleReport`, DRAM command-clock cycles of tCK ns):
rearrangement = host -> DPU, compute = launch + kernel, readback = DPU ->
host, merge = host merge; resident operands' placement goes to
`resident_cycles` only.  `utilisation` over report.BOUNDS is read for UPMEM
as (DPU pipeline, MRAM DMA, -, host link, host).  Everything is jnp on
array leaves of `Timing`, `System` bandwidths, `HostModel` and `HostLink`,
so `sweep_upmem` vmaps it over batches of variants.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ...hw.core import Backend, batch_size
from ...lower.program import Op, Phase, Program
from ...sim.engines import check_programs, resolve_engine
from ...sim.report import CycleReport
from .lower import Sync, Xfer

# --------------------------------------------------------------------------
# host-link constants the Backend does not carry (array leaves: sweepable)
# --------------------------------------------------------------------------


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class HostLink:
    """UPMEM host<->DPU transfer parameters beyond System's per-rank bandwidths.

    serial_h2d_gbps / serial_d2h_gbps: one DPU at a time (GB/s).  PrIM's
        CPU-DPU microbenchmark (Gomez-Luna et al., IEEE Access 2022, serial
        transfers to 1 DPU) -- recalled, not in papers/: 0.33 / 0.12 GB/s.
    broadcast_gbps: dpu_broadcast_to, per rank.  PrIM, same study, 64 DPUs
        -- recalled: 16.88 GB/s.
    call_ns: fixed cost of one transfer call (dpu_push_xfer / dpu_copy_to):
        assumption, 5 us (no published figure; PrIM's bandwidth-vs-size
        curves show small transfers are latency-bound).
    launch_ns: dpu_launch (boot every DPU of the set + completion polling):
        assumption, 20 us (no published figure).
    concurrent_ranks_h2d / concurrent_ranks_d2h: ranks the host drives at
        once in a parallel transfer, per direction; default inf = every rank
        concurrently (the preset's assumption).
    """
    serial_h2d_gbps: Any = 0.33
    serial_d2h_gbps: Any = 0.12
    broadcast_gbps: Any = 16.88
    call_ns: Any = 5000.0
    launch_ns: Any = 20000.0
    concurrent_ranks_h2d: Any = float("inf")
    concurrent_ranks_d2h: Any = float("inf")

    def replace(self, **changes) -> "HostLink":
        import dataclasses
        return dataclasses.replace(self, **changes)


DEFAULT_LINK = HostLink()

SCAN_FIELDS = ("op", "n", "aux", "reg", "core", "phase", "resident")
N_TASKLET_SLOTS = 24          # UPMEM hardware threads (state width of the scan)


def dpu_params(backend: Backend, link: HostLink) -> dict:
    """Array leaves the scan reads (a pytree; vmappable)."""
    t = backend.timing

    def f(x):
        # numpy for concrete leaves: 23 jnp.asarray dispatches were most of a
        # program's time outside the compiled scan; traced leaves (sweep_upmem's vmap) stay jnp
        return jnp.asarray(x, jnp.float32) if isinstance(x, jax.core.Tracer) else np.float32(x)
    host = backend.system.host
    return dict(
        tCK=f(t.tCK), dpu_ghz=f(t.dpu_clock_ghz), dma_bpc=f(t.dma_bytes_per_cycle),
        dma_lat=f(t.dma_latency_cycles),
        bw_h2d=f(backend.system.link_bandwidth), bw_d2h=f(backend.system.readback_bandwidth),
        host_bw=f(host.mem_bandwidth) * f(host.bandwidth_efficiency) * 1e-9,     # B/ns
        host_flops=f(host.peak_flops) * f(host.flops_efficiency) * 1e-9,          # FLOP/ns
        host_launch=f(host.launch_overhead_ns),
        ser_h2d=f(link.serial_h2d_gbps), ser_d2h=f(link.serial_d2h_gbps), bcast=f(link.broadcast_gbps),
        call=f(link.call_ns), launch=f(link.launch_ns), conc_h2d=f(link.concurrent_ranks_h2d),
        conc_d2h=f(link.concurrent_ranks_d2h),
        e_rd=f(backend.energy.rd), e_wr=f(backend.energy.wr), e_act=f(backend.energy.act),
        e_op=f(backend.energy.pim_op), e_io=f(backend.energy.io_byte))


def program_arrays(program: Program, include_resident: bool = False, pad: bool = True) -> dict:
    """The inputs of a program's time model (numpy).  pad: the record stream
    padded with NOPs to a power-of-two length, so programs of similar size
    share a compile of the scan (the vectorised engine needs no padding)."""
    rec = {f: np.asarray(getattr(program.commands, f))[0].astype(np.int32) for f in SCAN_FIELDS}
    if include_resident:
        rec["resident"] = np.zeros_like(rec["resident"])
    if pad:
        R = rec["op"].size
        L = 1 << max(4, int(np.ceil(np.log2(max(R, 1)))))
        rec = {k: np.pad(v, (0, L - R)) for k, v in rec.items()}
    st = program.stats
    return {"rec": rec,
            "ranks": np.float32(program.groups), "cores": np.float32(program.cores),
            "merge_bytes": np.float32(st.readback_bytes + st.result_bytes),
            "merge_flops": np.float32(st.merge_flops),
            "merged": np.bool_(st.readback_bytes > 0 or st.merge_flops > 0)}


def record_terms(r: dict, ranks, cores, waves: tuple, p: dict, xp) -> dict:
    """What each record adds, one rule for both engines (xp: jnp on one
    record inside `_scan`'s step, numpy on every record at once in
    `_totals`).  r: op / n / aux / reg / resident / phase (n and aux float32);
    waves: (h2d, d2h) rank batches of a parallel transfer.

    Host transfers (ns): broadcast, rank-parallel (each rank batch at the
    per-rank bandwidth, bounded by the host's) or serial, times the `aux`
    repeats.  Kernel (DPU cycles): instruction batches, DMAs and barriers
    on the tasklet slot `reg`."""
    f32 = xp.float32
    op, n, aux, mode = r["op"], r["n"], r["aux"], r["reg"]
    h2d = op == Op.XFER_H2D
    xfer = h2d | (op == Op.XFER_D2H)
    bcast, serial = mode == Xfer.BROADCAST, mode == Xfer.SERIAL
    bw = xp.where(h2d, p["bw_h2d"], p["bw_d2h"])
    serial_bw = xp.where(h2d, p["ser_h2d"], p["ser_d2h"])
    per_rank = xp.where(bcast, n / p["bcast"], n * cores / bw)
    total_bytes = xp.where(bcast, n, n * cores) * ranks
    par_t = xp.maximum(per_rank * xp.where(h2d, *waves), total_bytes / p["host_bw"]) + p["call"]
    ser_t = (n / serial_bw + p["call"]) * ranks          # this DPU of every rank, one after another
    t_x = xp.where(serial, ser_t, par_t) * aux
    launch = (op == Op.LAUNCH) & (aux == Sync.LAUNCH)
    return dict(
        h2d=h2d, xfer=xfer,
        moved=xp.where(serial, n * ranks, total_bytes) * aux,
        calls=xp.where(xfer, aux * xp.where(serial, ranks, f32(1)), f32(0)),
        ex=op == Op.DPU_EXEC,
        dma=(op == Op.DMA_RD) | (op == Op.DMA_WR),
        barrier=(op == Op.LAUNCH) & (aux == Sync.BARRIER),
        d_time=p["dma_lat"] + n / p["dma_bpc"],
        bucket=xp.where(r["resident"] == 1, 4, xp.where(r["phase"] == Phase.READBACK, 2,
                                                         xp.where(r["phase"] == Phase.REARRANGE, 0, 1))),
        add_ns=xp.where(xfer, t_x, xp.where(launch, p["launch"], f32(0))))


def rank_waves(ranks, p: dict, xp) -> tuple:
    """Rank batches of a parallel transfer, (host->DPU, DPU->host)."""
    return ranks / xp.minimum(ranks, p["conc_h2d"]), ranks / xp.minimum(ranks, p["conc_d2h"])


def _scan(rec: dict, ranks, cores, p: dict, dispatch: float):
    """Run the records: returns per-bucket ns, kernel DPU cycles and counters."""
    f32 = jnp.float32
    state = dict(tk=jnp.zeros(N_TASKLET_SLOTS, f32), dma_busy=f32(0.0),
                 instr=f32(0.0), buckets=jnp.zeros(5, f32), xfer_bytes=jnp.zeros(2, f32),
                 dma_bytes=f32(0.0), calls=f32(0.0))
    waves = rank_waves(ranks, p, jnp)

    def step(s, r):
        n = r["n"].astype(f32)
        x = record_terms(dict(r, n=n, aux=r["aux"].astype(f32)), ranks, cores, waves, p, jnp)
        k = jnp.clip(r["reg"], 0, N_TASKLET_SLOTS - 1)
        ex, dma, d_time = x["ex"], x["dma"], x["d_time"]
        tk = s["tk"]
        d_end = tk[k] + d_time
        tk = jnp.where(ex, tk.at[k].add(n * dispatch), tk)
        tk = jnp.where(dma, tk.at[k].set(d_end), tk)
        tk = jnp.where(x["barrier"], jnp.full_like(tk, jnp.max(tk)), tk)
        new = dict(
            tk=tk,
            dma_busy=s["dma_busy"] + jnp.where(dma, d_time, 0.0),
            instr=s["instr"] + jnp.where(ex, n, 0.0),
            buckets=s["buckets"].at[x["bucket"]].add(x["add_ns"]),
            xfer_bytes=s["xfer_bytes"].at[jnp.where(x["h2d"], 0, 1)].add(
                jnp.where(x["xfer"] & (r["resident"] == 0), x["moved"], 0.0)),
            dma_bytes=s["dma_bytes"] + jnp.where(dma, n, 0.0),
            calls=s["calls"] + x["calls"])
        return new, None

    out, _ = jax.lax.scan(step, state, rec)
    kernel = jnp.maximum(jnp.maximum(jnp.max(out["tk"]), out["instr"]), out["dma_busy"])
    return out, kernel


def _totals(rec: dict, ranks, cores, p: dict, dispatch: float):
    """`_scan`'s final state and kernel cycles without a scan (numpy; the
    "native" engine of this model).

    Every state variable of the scan is a sum over records -- except the
    tasklet clocks tk, and those only grow by per-slot increments (an
    instruction batch adds n * dispatch, a DMA its duration) and are
    levelled to their maximum at each barrier.  So the clocks between two
    barriers are per-slot sums, and max(tk) at the end is the sum over the
    barrier-separated segments of each segment's largest per-slot sum.
    Per-record terms are float32 as in the scan; the sums are float64 (the
    scan accumulates in float32: the two agree to ~1e-6 relative)."""
    f32 = np.float32
    n = rec["n"].astype(f32)
    ranks, cores = f32(ranks), f32(cores)
    x = record_terms(dict(rec, n=n, aux=rec["aux"].astype(f32)), ranks, cores, rank_waves(ranks, p, np), p, np)
    ex, dma, d_time = x["ex"], x["dma"], x["d_time"]
    k = np.clip(rec["reg"], 0, N_TASKLET_SLOTS - 1)
    # tasklet clocks: per (segment, slot) sums, levelled at barriers
    seg = np.cumsum(x["barrier"])
    inc = np.where(ex, n * f32(dispatch), np.where(dma, d_time, f32(0))).astype(np.float64)
    sums = np.bincount(seg * N_TASKLET_SLOTS + k, weights=inc,
                       minlength=(int(seg[-1]) + 1 if len(seg) else 1) * N_TASKLET_SLOTS)
    tk_max = sums.reshape(-1, N_TASKLET_SLOTS).max(axis=1).sum()
    counted = x["xfer"] & (rec["resident"] == 0)
    h2d = x["h2d"]
    out = dict(dma_busy=d_time[dma].sum(dtype=np.float64), instr=n[ex].sum(dtype=np.float64),
               buckets=np.bincount(x["bucket"], weights=x["add_ns"].astype(np.float64), minlength=5),
               xfer_bytes=np.array([x["moved"][counted & h2d].sum(dtype=np.float64),
                                    x["moved"][counted & ~h2d].sum(dtype=np.float64)]),
               dma_bytes=n[dma].sum(dtype=np.float64),
               calls=x["calls"].sum(dtype=np.float64))
    kernel = max(tk_max, out["instr"], out["dma_busy"])
    return out, np.float64(kernel)


def _report(arr: dict, p: dict, dispatch: float) -> CycleReport:
    """CycleReport of one program's arrays under parameters `p` (pure jnp)."""
    out, kernel = _scan(arr["rec"], arr["ranks"], arr["cores"], p, dispatch)
    return _combine(out, kernel, arr, p, jnp)


def _combine(out: dict, kernel, arr: dict, p: dict, xp) -> CycleReport:
    """The CycleReport of a run's final state (`_scan` / `_totals`), with
    array module xp (jnp under jit / vmap, numpy for the vectorised engine)."""
    b = out["buckets"]
    tck = p["tCK"]
    kernel_ns = kernel / p["dpu_ghz"]
    merge_ns = xp.where(arr["merged"],
                         xp.maximum(arr["merge_bytes"] / p["host_bw"], arr["merge_flops"] / p["host_flops"])
                         + p["host_launch"], 0.0)
    rearr, comp, rback, merge = b[0] / tck, (b[1] + kernel_ns) / tck, b[2] / tck, merge_ns / tck
    total = rearr + comp + rback + merge
    safe = xp.maximum(total, 1e-9)
    dpus = arr["ranks"] * arr["cores"]
    util = xp.stack([out["instr"] / p["dpu_ghz"] / tck / safe,        # DPU pipeline busy
                      out["dma_busy"] / p["dpu_ghz"] / tck / safe,     # MRAM DMA busy
                      xp.float32(0.0),
                      (rearr + rback) / safe,                          # host link
                      merge / safe])                                   # host
    energy = dpus * (out["dma_bytes"] / 8.0 * p["e_rd"] + out["dma_bytes"] / 1024.0 * p["e_act"]
                     + out["instr"] * p["e_op"]) + (out["xfer_bytes"][0] + out["xfer_bytes"][1]) * p["e_io"]
    counts = {"instructions": out["instr"], "dma_bytes": out["dma_bytes"], "dma_cycles": out["dma_busy"],
              "kernel_dpu_cycles": kernel, "h2d_bytes": out["xfer_bytes"][0],
              "d2h_bytes": out["xfer_bytes"][1], "transfer_calls": out["calls"]}
    return CycleReport(total_cycles=total, total_ns=total * tck, rearrangement=rearr, compute=comp,
                       readback=rback, merge=merge, resident_cycles=b[4] / tck, kernel_cycles=comp,
                       bound=xp.argmax(util), utilisation=util, energy_pj=energy, counts=counts)


@partial(jax.jit, static_argnames=("dispatch",))
def _report_jit(arr, p, dispatch):
    return _report(arr, p, dispatch)


@partial(jax.jit, static_argnames=("dispatch",))
def _report_sweep(arr, p, dispatch):
    return jax.vmap(lambda q: _report(arr, q, dispatch))(p)


def dispatch_interval(backend: Backend) -> int:
    """Cycles between two instructions of one tasklet: pipeline_depth - 3
    (PrIM: the last three of the 14 stages overlap with the next
    instruction of the same tasklet) = 11 on UPMEM."""
    return max(1, backend.core.pipeline_depth - 3)


def _check(program: Program, backend, entry: str) -> None:
    """The program is this backend's, and the backend is one this model times
    (programmable cores): anything else gives numbers that mean nothing --
    a DRAM command stream read as DPU records, or HBM's tCK and host link
    put under a DPU pipeline."""
    if not isinstance(backend, Backend):
        raise ValueError(f"{entry} needs a Backend, got {type(backend).__name__}")
    check_programs([program], backend)
    if not backend.core.programmable:
        raise ValueError(f"{entry} times UPMEM (programmable DPU) backends, not {backend.name}, whose "
                         "cores are driven by DRAM commands: use pimjax.sim.cycles.cycles / sweep")


def cycles_upmem(program: Program, backend: Backend, *, include_resident: bool = False,
                 link: HostLink | None = None, engine: str | None = None, **_ignored) -> CycleReport:
    """Time of an UPMEM `program` on `backend` (see module docstring).

    link: HostLink overrides (serial / broadcast bandwidths, call and launch
    overheads, concurrent ranks).
    engine: "native" (default `sim.engines.DEFAULT_ENGINE`: the vectorised numpy
    form, `_totals`; float64 sums) or "scan" (the jitted lax.scan, which
    also runs under jax transformations and is used whenever a parameter is
    traced); they agree to ~1e-6 relative.

    Example:
        >>> rep = cycles_upmem(prog, get_backend("upmem"))       # doctest: +SKIP
        >>> rep.total_ns / 1e6                                    # ms  # doctest: +SKIP
    """
    _check(program, backend, "cycles_upmem")
    engine = resolve_engine(engine, backend.timing)
    p = dpu_params(backend, link or DEFAULT_LINK)
    traced = any(isinstance(x, jax.core.Tracer) for x in p.values())
    if engine == "native" and not traced:
        arr = program_arrays(program, include_resident, pad=False)
        out, kernel = _totals(arr["rec"], arr["ranks"], arr["cores"], p, dispatch_interval(backend))
        return _combine(out, kernel, arr, p, np)
    return _report_jit(program_arrays(program, include_resident), p, dispatch_interval(backend))


def sweep_upmem(program: Program, backends: Backend, *, link: HostLink | None = None,
                include_resident: bool = False) -> CycleReport:
    """Time `program` under a batch of hardware variants (one vmapped scan).

    backends: a Backend whose array leaves (Timing, System bandwidths, host
    roofline) have a leading [V] axis, e.g. `stack_variants([...])`; `link`
    may be batched the same way.  Every field of the result is [V, ...].

    Raises ValueError when the program was lowered for another backend, the
    backend is not an UPMEM one, or it is not a stacked batch (one Backend:
    use `cycles_upmem`, or stack_variants([backend])).
    """
    _check(program, backends, "sweep_upmem")
    V = batch_size(backends, "sweep_upmem backends (a single Backend is timed by cycles_upmem)")
    arr = program_arrays(program, include_resident)
    lk = link or DEFAULT_LINK
    lk = jax.tree.map(lambda x: jnp.broadcast_to(jnp.asarray(x, jnp.float32), (V,)), lk)
    p = jax.vmap(dpu_params)(backends, lk)
    return _report_sweep(arr, p, dispatch_interval(backends))


__all__ = ["HostLink", "DEFAULT_LINK", "cycles_upmem", "sweep_upmem", "dispatch_interval", "program_arrays"]
