"""`cycles`: the time interpreter of PIM command programs.

A `jax.lax.scan` over the command records of each group (groups `vmap`-ped)
carrying per-bank state (open row, ACT time, last read / write, precharge
done), per-bank-group and per-group command state, the tFAW window of four
activations and the refresh deadline; the semantics are in `timing.py` and
are mirrored, slowly and obviously, by `reference.py`.  Timing parameters
are array leaves of `Timing`, so the scan `vmap`s over batches of programs
(padded to one length) and of timing variants; one compile per program
shape.

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

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from ..hw.core import Backend, Timing
from ..lower.program import Phase, Program, Records
from .report import BOUNDS, CycleReport
from .timing import (ACT_ALL, ALLBANK, BARRIER, CLASS_TABLE, COLUMN, DATA_BUS, FIXED, PRE_ALL, SIDE,
                     STAGGER, STREAM, WAIT, WRITE)

NEVER = -1.0e7  # "long ago" for last-command times (float32-exact integers below 2^24)
SCAN_FIELDS = ("op", "bank", "row", "n", "phase", "resident", "pre", "sync")


def _timing_vector(t: Timing) -> dict:
    return {f: jnp.asarray(getattr(t, f), jnp.float32) for f in t._dynamic_fields}


def _record_facts(rec: dict, banks: int, banks_per_bg: int) -> dict:
    """Per-record quantities that do not depend on the scan state, computed
    for the whole stream at once (outside the loop): timing-class flags,
    bank / bank-group one-hot masks, repeat count and report bucket."""
    n_bg = max(1, banks // banks_per_bg)
    flags = jnp.asarray(CLASS_TABLE)[rec["op"]]               # [R, N_FLAGS]
    valid = rec["n"] > 0
    f = lambda k: flags[:, k] == 1                              # noqa: E731
    b = jnp.clip(rec["bank"], 0, banks - 1)
    bg = b // banks_per_bg
    bucket = jnp.where(rec["resident"] == 1, 4,
                       jnp.where(rec["pre"] == 1, 0,
                                 jnp.where(rec["phase"] == Phase.READBACK, 3,
                                           jnp.where(rec["phase"] == Phase.REARRANGE, 1, 2))))
    return dict(
        valid=valid, n=rec["n"].astype(jnp.float32), row=rec["row"], bg=bg,
        oh=b[:, None] == jnp.arange(banks)[None, :], ohg=bg[:, None] == jnp.arange(n_bg)[None, :],
        is_col=f(COLUMN) & valid, write=f(WRITE), allbank=f(ALLBANK), data=f(DATA_BUS) & valid,
        act_all=f(ACT_ALL) & valid, pre_all=f(PRE_ALL) & valid, fixed=f(FIXED) & valid,
        stagger=f(STAGGER),
        side=f(SIDE) & valid, wait=f(WAIT) | (rec["sync"] == 1), stream=f(STREAM),
        barrier=f(BARRIER) & valid, ohk=bucket[:, None] == jnp.arange(5)[None, :])


def features_of(ops: np.ndarray) -> tuple[str, ...]:
    """Timing features a set of opcodes uses (static: the scan is built
    without the branches a program cannot take)."""
    flags = CLASS_TABLE[np.unique(np.asarray(ops))]
    out = []
    for name, k in (("act_all", ACT_ALL), ("pre_all", PRE_ALL), ("side", SIDE), ("fixed", FIXED),
                    ("barrier", BARRIER)):
        if flags[:, k].any():
            out.append(name)
    return tuple(out)


ALL_FEATURES = ("act_all", "pre_all", "side", "fixed", "barrier")


def scan_stream(rec: dict, t: dict, banks: int, banks_per_bg: int, refresh: bool,
                features: tuple[str, ...] = ALL_FEATURES) -> dict:
    """Time one group's record stream (semantics: `timing.py`).

    rec: [R] int arrays (SCAN_FIELDS); t: timing scalars (cycles).
    Returns per-stream sums: delta per bucket (pre, kernel-rearrange,
    kernel-compute, readback, resident), end time and command counts.

    The per-bank state is read and written through one-hot masks rather than
    gathers / scatters: under vmap those become elementwise selects that XLA
    fuses, which is what keeps a batched step cheap.  `features` names the
    timing classes the records use beyond plain / all-bank columns (see
    `features_of`); the step skips the others (they could not fire)."""
    n_bg = max(1, banks // banks_per_bg)
    f32 = jnp.float32
    state = dict(
        open_row=jnp.full(banks, -1, jnp.int32), t_act=jnp.full(banks, NEVER, f32),
        t_rd=jnp.full(banks, NEVER, f32), t_wr=jnp.full(banks, NEVER, f32),
        t_ready=jnp.zeros(banks, f32), bg_act=jnp.full(n_bg, NEVER, f32),
        last_act=f32(NEVER), faw=jnp.full(4, NEVER, f32), last_col=f32(NEVER),
        last_col_bg=jnp.int32(-1), last_allbank=jnp.bool_(False), last_rd=f32(NEVER),
        last_rd_bg=jnp.int32(-1), last_wr=f32(NEVER), last_wr_bg=jnp.int32(-1),
        last_side=f32(NEVER), side_bg=jnp.full(n_bg, NEVER, f32), t_issue=f32(NEVER),
        t_bar=f32(NEVER), t_end=f32(0.0),
        next_ref=jnp.where(t["tREF0"] > 0, t["tREF0"], t["tREFI"]),
        buckets=jnp.zeros(5, f32), counts=jnp.zeros(8, f32))
    wr_pre = t["tWL"] + t["tBL"] + t["tWR"]

    def step(s, x):
        valid, n, oh, ohg = x["valid"], x["n"], x["oh"], x["ohg"]
        is_col, write, allbank = x["is_col"], x["write"], x["allbank"]
        pre_ok = jnp.maximum(jnp.maximum(s["t_act"] + t["tRAS"], s["t_rd"] + t["tRTP_S"]),
                             s["t_wr"] + wr_pre)
        opened = s["open_row"] >= 0

        # 1. refresh at a record boundary
        do_ref = refresh & valid & (s["t_end"] >= s["next_ref"])
        r0 = jnp.maximum(s["next_ref"], jnp.max(jnp.where(opened, pre_ok, NEVER)))
        r_end = r0 + t["tRP"] + t["tRFC"]
        missed = jnp.floor((s["t_end"] - s["next_ref"]) / t["tREFI"])
        open_row = jnp.where(do_ref, -1, s["open_row"])
        opened = opened & ~do_ref
        t_ready = jnp.where(do_ref, jnp.maximum(s["t_ready"], r_end), s["t_ready"])
        next_ref = jnp.where(do_ref, s["next_ref"] + t["tREFI"] * (1.0 + missed), s["next_ref"])
        floor_t = jnp.where(do_ref, r_end, f32(0.0))
        # a barrier (WAIT class or a host sync point): nothing of this record
        # -- row commands included -- before every earlier record has ended
        wait = x["wait"]
        floor_t = jnp.where(wait, jnp.maximum(floor_t, s["t_end"]), floor_t)

        # 2. rows: implicit PRE + ACT for a column command to a closed / other row
        bg = x["bg"]
        row_b = jnp.sum(jnp.where(oh, open_row, 0))          # open_row[bank] without a gather
        is_open = jnp.any(oh & opened)
        need = is_col & (jnp.where(is_open, row_b, -1) != x["row"])
        pre_ok_b = jnp.max(jnp.where(oh, pre_ok, NEVER))
        ready_b = jnp.where(is_open, pre_ok_b + t["tRP"], jnp.max(jnp.where(oh, t_ready, NEVER)))
        ready_b = jnp.maximum(ready_b, floor_t)
        t_act = jnp.maximum(jnp.maximum(ready_b, jnp.max(jnp.where(ohg, s["bg_act"], NEVER)) + t["tRRD_L"]),
                            jnp.maximum(s["last_act"] + t["tRRD_S"], jnp.min(s["faw"]) + t["tFAW"]))

        # explicit all-bank ACT (ACTAB / G_ACT) and PREA
        act_all, pre_all = x["act_all"], x["pre_all"]
        t_actall = t_preall = f32(0.0)
        if "act_all" in features:
            ready_all = jnp.where(opened, pre_ok + t["tRP"], t_ready)
            t_actall = jnp.maximum(jnp.max(ready_all), jnp.maximum(floor_t, s["last_col"]))
            # staggered (per bank group, tFAW apart): the last group opens last
            t_actall = t_actall + jnp.where(x["stagger"], (n_bg - 1) * t["tFAW"], 0.0)
        if "pre_all" in features:
            last_col_pre = s["last_col"] + jnp.where(s["last_allbank"], t["tRTP_L"], 0.0)
            t_preall = jnp.maximum(jnp.max(jnp.where(opened, pre_ok, NEVER)),
                                   jnp.maximum(floor_t, last_col_pre))

        # 3. columns
        t_act_b = jnp.max(jnp.where(oh, s["t_act"], NEVER))
        rcd = jnp.where(write, t["tRCDWR"], t["tRCDRD"])
        col_ready = jnp.where(need, t_act + rcd, jnp.maximum(t_act_b + rcd, floor_t))
        spacing_prev = jnp.where(allbank & s["last_allbank"], t["tCCD_AB"],
                                 jnp.where(bg == s["last_col_bg"], t["tCCD_L"], t["tCCD_S"]))
        t0 = jnp.maximum(col_ready, s["last_col"] + spacing_prev)
        rd_to_wr = s["last_rd"] + t["tCL"] + t["tBL"] + t["tRTRS"] - t["tWL"]
        wr_to_rd = s["last_wr"] + t["tWL"] + t["tBL"] + jnp.where(bg == s["last_wr_bg"], t["tWTR_L"],
                                                                  t["tWTR_S"])
        t0 = jnp.where(write, jnp.maximum(t0, rd_to_wr), jnp.maximum(t0, wr_to_rd))
        t0 = jnp.where(wait, jnp.maximum(t0, s["t_end"]), t0)
        t0 = jnp.maximum(t0, s["t_bar"])
        spacing = jnp.where(allbank, t["tCCD_AB"], jnp.where(x["stream"], t["tCCD_S"], t["tCCD_L"]))
        t_last = t0 + (n - 1.0) * spacing
        col_end = jnp.where(allbank, t_last + t["tCCD_AB"],
                            t_last + jnp.where(write, t["tWL"] + t["tBL"], t["tCL"] + t["tBL"]))

        # side datapath (AttAcc data movement) and fixed latencies
        side, fixed = x["side"], x["fixed"]
        side_gap = jnp.maximum(t["tBL"], t["tCCD_S"])
        s0 = side_last = side_end = f0 = f32(0.0)
        if "side" in features:
            s0 = jnp.maximum(jnp.maximum(s["last_side"] + side_gap, floor_t),
                             jnp.maximum(jnp.max(jnp.where(ohg, s["side_bg"], NEVER)) + t["tCCD_L"], s["t_bar"]))
            s0 = jnp.where(wait, jnp.maximum(s0, s["t_end"]), s0)
            side_last = s0 + (n - 1.0) * jnp.maximum(side_gap, t["tCCD_L"])
            side_end = jnp.where(fixed, s0 + n, side_last + side_gap)
        fixed_plain = fixed & ~side
        if "fixed" in features:
            f0 = jnp.maximum(jnp.maximum(s["last_col"], s["t_end"]), jnp.maximum(floor_t, s["t_bar"]))

        end = jnp.where(is_col, col_end,
                        jnp.where(side, side_end,
                                  jnp.where(fixed_plain, f0 + n,
                                            jnp.where(act_all, t_actall + t["tRCDRD"],
                                                      jnp.where(pre_all, t_preall + t["tRP"], s["t_end"])))))
        end = jnp.where(valid, end, s["t_end"])
        delta = jnp.maximum(end - s["t_end"], 0.0)

        # state updates (one-hot selects)
        act_now = need
        rd_col, wr_col = is_col & ~write, is_col & write
        new = dict(s)
        new["open_row"] = jnp.where(act_all, x["row"],
                                    jnp.where(pre_all, -1, jnp.where(oh & is_col, x["row"], open_row)))
        new["t_act"] = jnp.where(oh & act_now, t_act, s["t_act"])
        if "act_all" in features:
            new["t_act"] = jnp.where(act_all, t_actall, new["t_act"])
        new["t_ready"] = jnp.where(pre_all, t_preall + t["tRP"], t_ready) if "pre_all" in features else t_ready
        new["bg_act"] = jnp.where(ohg & act_now, t_act, s["bg_act"])
        new["last_act"] = jnp.where(act_now, jnp.maximum(s["last_act"], t_act), s["last_act"])
        oldest = jnp.arange(4) == jnp.argmin(s["faw"])
        new["faw"] = jnp.where(act_now & oldest, t_act, s["faw"])
        new["t_rd"] = jnp.where(oh & rd_col, t_last, s["t_rd"])
        new["t_wr"] = jnp.where(oh & wr_col, t_last, s["t_wr"])
        new["last_col"] = jnp.where(is_col, t_last, s["last_col"])
        new["last_col_bg"] = jnp.where(is_col, bg, s["last_col_bg"])
        new["last_allbank"] = jnp.where(is_col, allbank, s["last_allbank"])
        new["last_rd"] = jnp.where(rd_col, t_last, s["last_rd"])
        new["last_rd_bg"] = jnp.where(rd_col, bg, s["last_rd_bg"])
        new["last_wr"] = jnp.where(wr_col, t_last, s["last_wr"])
        new["last_wr_bg"] = jnp.where(wr_col, bg, s["last_wr_bg"])
        if "side" in features:
            new["last_side"] = jnp.where(side, jnp.where(fixed, s0 + n - side_gap, side_last), s["last_side"])
            new["side_bg"] = jnp.where(ohg & side, new["last_side"], s["side_bg"])
        issued = jnp.where(is_col, t_last, jnp.where(side, new["last_side"],
                                                      jnp.where(fixed_plain, f0 + n - 1.0, NEVER)))
        if "barrier" in features:
            new["t_issue"] = jnp.maximum(s["t_issue"], issued)
            new["t_bar"] = jnp.where(x["barrier"], jnp.maximum(s["t_bar"], s["t_issue"] + 1.0), s["t_bar"])
        new["t_end"] = jnp.maximum(s["t_end"], end)
        new["next_ref"] = next_ref
        new["buckets"] = s["buckets"] + jnp.where(x["ohk"], delta, 0.0)
        n_acts = jnp.where(x["stagger"], f32(n_bg), f32(1.0))
        add = jnp.stack([act_now.astype(f32) + act_all.astype(f32) * n_acts,  # 0 ACT
                         jnp.where(rd_col & ~allbank, n, 0.0),                  # 1 RD columns
                         jnp.where(wr_col & ~allbank, n, 0.0),                  # 2 WR columns
                         jnp.where(is_col & allbank, n, 0.0),                   # 3 PIM columns
                         do_ref.astype(f32),                                    # 4 REF
                         jnp.where(x["data"], n, 0.0),                          # 5 data-bus bursts
                         jnp.where(valid & ~x["barrier"], jnp.where(is_col | side, n, 1.0), 0.0),  # 6 commands
                         pre_all.astype(f32) + (need & is_open).astype(f32)])   # 7 PRE
        new["counts"] = s["counts"] + add
        return new, None

    out, _ = jax.lax.scan(step, state, _record_facts(rec, banks, banks_per_bg), unroll=2)
    return {"buckets": out["buckets"], "end": out["t_end"], "counts": out["counts"]}


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
    st = program.stats
    S = rec["op"].shape[0]
    return {
        "rec": _compact({k: rec[k] for k in SCAN_FIELDS}),
        "res": _compact({k: res[k] for k in SCAN_FIELDS}),
        "scale": np.float32(program.groups if S == 1 else 1),
        "parallel": np.bool_(program.parallel_rearrangement),
        "pre_bytes": np.float32(st.get("rearrange_bytes", 0.0)),
        "merge_bytes": np.float32(st.get("readback_bytes", 0.0) + st.get("result_bytes", 0.0)),
        "merge_flops": np.float32(st.get("merge_flops", 0.0)),
        "merged": np.bool_(st.get("readback_bytes", 0.0) > 0 or st.get("merge_flops", 0.0) > 0),
        "cores": np.float32(program.cores),
    }


COARSE_UNTIL = 16384


def _bucket(n: int, coarse: bool = False) -> int:
    """Record lengths are padded to a power of two so that batches of
    different programs share compiled scans; `coarse` (the tuner's small
    batches): to a power of four up to COARSE_UNTIL records, since a compile
    costs seconds and scanning up to 4x padding of a short stream
    milliseconds."""
    p2 = max(64, 1 << (max(int(n), 1) - 1).bit_length())
    if coarse and p2 <= COARSE_UNTIL:
        return p2 if p2.bit_length() % 2 == 1 else 2 * p2      # 64 * 4^k
    return p2


def _compact(rec: dict) -> dict:
    """Drop records with n = 0 (padding, or resident placement left out of
    the steady state): they change nothing, and a shorter stream is a shorter
    scan.  Streams are re-padded to their longest (at least one record)."""
    live = rec["n"] > 0
    counts = live.sum(axis=1)
    R = max(1, int(counts.max()))
    out = {}
    for k, v in rec.items():
        packed = np.zeros((v.shape[0], R), v.dtype)
        for i in range(v.shape[0]):
            packed[i, :counts[i]] = v[i][live[i]]
        out[k] = packed
    return out


def pad_arrays(arrs: list[dict], coarse: bool = False) -> dict:
    """Stack program arrays, padding record streams (and missing streams)
    with NOP records, which take no time, to one [S, R] (R a power of two)."""
    out = {}
    # One length for both streams, so `_time` scans them as one vmapped scan
    # (an XLA compile of the scan costs seconds; two scan bodies cost twice
    # that, and two independent length buckets multiply the compiled shapes).
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
    for key in ("scale", "parallel", "pre_bytes", "merge_bytes", "merge_flops", "merged", "cores"):
        out[key] = np.stack([a[key] for a in arrs])
    return out


def _time(arr: dict, t: dict, energy, host, geo: tuple) -> CycleReport:
    """The CycleReport of one program from its arrays (pure jnp; vmappable
    over programs and over timing / energy / host leaves)."""
    banks, per_bg, refresh, features = geo
    scan = jax.vmap(lambda r: scan_stream(r, t, banks, per_bg, refresh, features))
    S, R = arr["rec"]["op"].shape
    R_res = arr["res"]["op"].shape[1]
    if R_res == 0:                          # no resident placement (pad_arrays)
        out, resident = scan(arr["rec"]), jnp.zeros((1,), jnp.float32)
    elif R_res == R:                        # one scan over the streams of both
        both = scan({f: jnp.concatenate([arr["rec"][f], arr["res"][f]]) for f in SCAN_FIELDS})
        out = jax.tree.map(lambda x: x[:S], both)
        resident = both["buckets"][S:, 4]
    else:
        out, resident = scan(arr["rec"]), scan(arr["res"])["buckets"][:, 4]
    return _combine(arr, out, resident, t, energy, host)


def _combine(arr: dict, out: dict, resident, t: dict, e, host) -> CycleReport:
    b = out["buckets"]                                     # [S, 5]
    pre, k_rearr, k_comp, rback = (b[:, i] for i in range(4))
    scale = arr["scale"]
    tck = t["tCK"]
    host_read = arr["pre_bytes"] / (host.mem_bandwidth * host.bandwidth_efficiency) * 1e9 / tck
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
    names = ("ACT", "RD", "WR", "PIM", "REF", "bursts", "commands", "PRE")
    return CycleReport(total_cycles=total, total_ns=total * tck, rearrangement=rearrangement,
                       compute=k_comp[g], readback=readback, merge=merge,
                       resident_cycles=jnp.where(arr["parallel"], jnp.max(resident),
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
def _time_jit(arr, t, energy, host, geo):
    return _time(arr, t, energy, host, geo)


@partial(jax.jit, static_argnames=("geo",))
def _time_batch(arr, t, energy, host, geo):
    return jax.vmap(lambda a: _time(a, t, energy, host, geo))(arr)


@partial(jax.jit, static_argnames=("geo",))
def _time_sweep(arr, t, energy, host, geo):
    per_variant = jax.vmap(lambda tt: jax.vmap(lambda a: _time(a, tt, energy, host, geo))(arr))
    return per_variant(t)


def cycles(program: Program, backend: Backend, *, include_resident: bool = False,
           refresh: bool = True) -> CycleReport:
    """Time of `program` on `backend` (see module docstring).

    include_resident: time the one-time placement of resident operands as
    ordinary rearrangement (first call); by default it is reported only as
    `resident_cycles` and the steady state starts with the data in place.

    Example:
        >>> rep = cycles(program, get_backend("hbm-pim"))      # doctest: +SKIP
        >>> rep.total_cycles, rep.breakdown()                   # doctest: +SKIP
    """
    if backend.core.programmable:   # DPUs run their own instruction streams: UPMEM's time model
        from .cycles_upmem import cycles_upmem
        return cycles_upmem(program, backend, include_resident=include_resident)
    model = CYCLE_MODELS.get(backend.name)
    if model is not None:
        return model(program, backend, include_resident=include_resident, refresh=refresh)
    arr = program_arrays(program, include_resident)
    return _time_jit(arr, _timing_vector(backend.timing), backend.energy, backend.system.host,
                     _geo(backend, refresh, [arr]))


SMALL_BATCH = 64
BATCH_SIZES = (4, 16, 64, 256)


def _batch_size(k: int) -> int:
    """Batches are padded (with copies of a member) to a few fixed sizes."""
    return next((b for b in BATCH_SIZES if b >= k), k)


def report_at(report: CycleReport, i: int) -> CycleReport:
    """Program `i`'s CycleReport out of a batched one (cycles_batch)."""
    return jax.tree.map(lambda x: x[i], report)


def cycles_pooled(program: Program, backend: Backend) -> CycleReport:
    """`cycles(program, backend)` through the batched scan, so it reuses the
    XLA compilations of the tuner's batches (a cold compile of the scan
    costs seconds); the same numbers."""
    if backend.core.programmable or backend.name in CYCLE_MODELS:
        return cycles(program, backend)
    return report_at(cycles_batch([program], backend), 0)


def cycles_batch(programs: list[Program], backend: Backend, *, refresh: bool = True,
                 batch: int = 256, coarse: bool | None = None) -> CycleReport:
    """CycleReports of many programs at once.  Programs are sorted by record
    count and timed in batches of similar length (each padded to a power of
    two, so batches share compiled scans); every field of the result has a
    leading [len(programs)] axis in the input order.

    coarse: pad lengths to powers of four (up to COARSE_UNTIL): fewer
    compiles, up to 4x the scanning.  Default: for a small set (at most
    SMALL_BATCH programs, e.g. the tuner's top-k); bulk labelling, which
    sizes its own batches, passes False."""
    arrs = [program_arrays(p) for p in programs]
    lengths = np.array([a["rec"]["op"].shape[1] for a in arrs])
    order = np.argsort(lengths, kind="stable")
    t = _timing_vector(backend.timing)
    geo = _geo(backend, refresh, arrs)
    parts = []
    start = 0
    while start < len(order):
        # grow the batch while the padded length stays within one power of
        # two; a small set of programs (the tuner's top-k) is one batch: an
        # XLA compile of another bucket costs seconds, scanning padding
        # records microseconds
        limit = _bucket(lengths[order[-1]] if len(order) <= SMALL_BATCH else lengths[order[start]])
        stop = start
        while stop < len(order) and stop - start < batch and lengths[order[stop]] <= limit:
            stop += 1
        idx = order[start:stop]
        group = [arrs[i] for i in idx]
        group += group[-1:] * (_batch_size(len(group)) - len(group))   # batch sizes share compiles too
        rep = _time_batch(pad_arrays(group, coarse=len(order) <= SMALL_BATCH if coarse is None else coarse),
                          t, backend.energy, backend.system.host, geo)
        parts.append((idx, jax.tree.map(lambda x: np.asarray(x)[:len(idx)], rep)))
        start = stop
    inverse = np.empty(len(programs), np.int64)
    inverse[np.concatenate([idx for idx, _ in parts])] = np.arange(len(programs))
    # merge on the host (numpy): eager jax concatenation / indexing would
    # compile for every new batch shape
    merged = jax.tree.map(lambda *xs: np.concatenate([np.asarray(x) for x in xs]), *[rep for _, rep in parts])
    return jax.tree.map(lambda x: x[inverse], merged)


def sweep(programs, timings: Timing, backend: Backend, *, mesh=None, refresh: bool = True) -> CycleReport:
    """Time programs under a batch of timing variants: fields [T, P].

    programs: a Program or a list of them (padded to one length).
    timings:  a `Timing` whose leaves have a leading [T] axis (see
              `pimjax.hw.stack_variants`).
    mesh:     optional `jax.sharding.Mesh` with one axis; the timing batch is
              sharded over its devices (multi-device / multi-host JAX).
    """
    progs = programs if isinstance(programs, (list, tuple)) else [programs]
    arrs = [program_arrays(p) for p in progs]
    arr = pad_arrays(arrs)
    t = _timing_vector(timings)
    if mesh is not None:
        from jax.sharding import NamedSharding, PartitionSpec
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


# backends with their own time model (UPMEM) register here
CYCLE_MODELS: dict = {}
