"""DCC's simulator as a pimjax controller: `Group.controller = "dcc"` of
`get_backend("attacc", simulator="dcc")` and `get_backend("hbm-pim", simulator="dcc")`.

DCC's artifact does not time command programs: it times the trace its generator writes for a
tiling `[[g, c, t], ...]` of one of its kernels (GEMV, RED, VA) on one HBM3 cube (16 channels x 64
banks, 5.2 Gbps).  So this controller times a whole program, not its record streams
(`Family.program_controllers`): it reads the program's op and draft, turns them into DCC's
notation (`dcc_problem`: the kernel, DCC's shape, the tiling, as `tiling.from_draft` does for
pimjax's own kernels), and replays DCC's trace for it on the fork's controller (`traces`, then
`native`, the compiled `controller`), memoised per (fork, kernel, shape, tiling).  What `pim_jit` returns is unchanged:
the family's lowering and value interpreter compute it.

What a draft carries besides its tiling (dataflow, KI / KO, granularity, lanes, the reduction
strategy) has no counterpart in DCC's traces, which fix them; such drafts get their tiling's
cycles.  A draft or op DCC has no trace for is refused at lowering with the reason
(`dcc_lowering`, a `PimCompileError`; the tuner skips it, `pim_jit` keeps the op on the host):
an op other than a plain GEMV / batched GEMV, sum over the last axis or add of two equal-shaped
tensors (no epilogue), VA on AttAcc (its fork has no VA generator), a packed draft, a compound
dimension set, or a backend other than DCC's cube (`check_backend`).

The report: `total_cycles` is the fork's `memory_system_cycles`: of the busiest channel, or of all 16
behind the shared frontend where the tiling's channels wrap (`COUPLED`; cycle-exact on DCC's 614
artifact rows either way).  It splits at the first and last PIM command issued:
`rearrangement` (the host's input writes before it), `compute` (from the first to the last PIM
command, host writes interleaved with it included), `readback` (the result write-back and
barrier drain after it).  `merge` is 0 and `resident_cycles` 0: DCC's traces combine no partial
sums on the host and start with the matrix in the banks (`include_resident` changes nothing).
`counts` and `energy_pj` are the busiest channel's issued commands times the channels the trace
loads (an estimate where channels are loaded unequally; all channels' where coupled); `utilisation`
is rough.
Cycles are of the backend's tCK (0.769 ns).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import replace
from functools import lru_cache, wraps

import numpy as np

from ...errors import PimCompileError
from ...partition.dimsets import dimension_sets
from ...partition.draft import DimPart
from ...partition.verify import shared_register_sets
from ...sim.report import CycleReport
from ...trace.affine import AffineExpr
from .controller import channel_requests, simulate_channel, simulate_coupled
from .native import channel_arrays, channel_loads_of, simulate_channel_native, trace_arrays
from .tiling import validate
from .tiling import wraps as channels_wrap
from .timing import CMDS, CUSTOM_OPS, N_CH, TCK_PS, T
from .traces import channel_loads, gen_trace

CONTROLLER = "dcc"
"""`Group.controller` of the DCC configurations."""

COUPLED: bool | str = "auto"
""""auto" (default): all 16 channels behind the shared in-order frontend for tilings whose rounded-up
channels / banks wrap (`tiling.wraps`: channels then interact), the busiest channel alone otherwise
(exact then); False: the busiest channel only (within 1.07 % of the artifact on wrapping rows);
True: always all 16."""

NATIVE = True
"""True: time with the compiled controller (`native.py`, ~0.01-2 s per tiling); False: with the
Python one (`controller.py`, the readable reference; up to ~60 s per GEMV tiling).  The same cycles."""

CUBE_CHANNELS, CUBE_BANKS = N_CH, 64
# Timing field -> the fork's HBM3_5.2Gbps parameter (timing.T) it must equal
TIMING_FIELDS = {"tCL": "nCL", "tWL": "nCWL", "tBL": "nBL", "tRCDRD": "nRCDRD", "tRCDWR": "nRCDWR", "tRP": "nRP",
                 "tRAS": "nRAS", "tRC": "nRC", "tCCD_S": "nCCDS", "tCCD_L": "nCCDL", "tCCD_AB": "nCCDAB",
                 "tRRD_S": "nRRDS", "tRRD_L": "nRRDL", "tFAW": "nFAW", "tWR": "nWR", "tRTP_S": "nRTPS",
                 "tRTP_L": "nRTPL", "tWTR_S": "nWTRS", "tWTR_L": "nWTRL", "tREFI": "nREFI", "tRFC": "nRFC"}

# the fork's commands by report class
COMPUTE_CMDS = frozenset(["MACAB", "MACSB", "MACPB", "WB_ACC", "WB_RES", "ACC_RESET", "RELU"] + CUSTOM_OPS)
PIM_CMDS = COMPUTE_CMDS | {"ACTAB", "WRGB", "MVSB", "MVGB", "SFM"}
BURST_CMDS = frozenset({"RD", "WR", "WRGB", "MVSB", "MVGB"})


def check_backend(backend) -> None:
    """Raise ValueError unless `backend` is DCC's cube: 16 groups (channels) of 64 banks, one
    core per bank, and the fork's HBM3_5.2Gbps timing (tCK 0.769 ns; `TIMING_FIELDS`), which the
    controller's table (`timing.TIMING_TABLE`) holds: the Backend's timing is not read otherwise."""
    where = f"{backend.name}/{backend.variant} (Group.controller={CONTROLLER!r})"
    if backend.n_groups != CUBE_CHANNELS or backend.group.banks != CUBE_BANKS \
            or backend.cores_per_group != CUBE_BANKS:
        raise ValueError(f"{where}: DCC's simulator is one HBM3 cube of {CUBE_CHANNELS} channels x {CUBE_BANKS} "
                         f"banks, a core per bank; this backend has {backend.n_groups} groups x "
                         f"{backend.cores_per_group} cores ({backend.group.banks} banks)")
    t = backend.timing
    try:
        bad = [f"{f}={float(getattr(t, f)):g} (fork: {T[k]})" for f, k in TIMING_FIELDS.items()
               if float(getattr(t, f)) != T[k]]
        tck = float(t.tCK)
    except TypeError:       # a tracer: under jax.vmap / jit over the Timing
        raise ValueError(f"{where}: DCC's controller times its fork's fixed timing table on the host; it takes "
                         f"no traced Timing") from None
    if abs(tck * 1000.0 - TCK_PS) > 1.0:
        bad.append(f"tCK={tck:g} ns (fork: {TCK_PS / 1000:g} ns)")
    if bad:
        raise ValueError(f"{where}: DCC's controller times the fork's HBM3_5.2Gbps table, which this backend's "
                         f"timing does not match: {', '.join(bad)}")


def _plain(expr, var) -> bool:
    return expr == AffineExpr.var(var)


def dcc_problem(op, draft, fork: str) -> tuple[str, tuple, list]:
    """(DCC kernel, DCC shape, DCC tiling) of `draft` of `op` on DCC's `fork` ("attacc" or
    "hbmpim").  The kernel from the op's structure: a contraction of a matrix and a vector over one
    reduced variable, with up to two batch variables (``y[b,h,n] = sum_k A[b,h,n,k] x[b,h,k]``,
    plain ``W @ x`` too) is GEMV at ``(batch, heads, d_head = |k|, seq_len = |n|)``; a sum over the
    last variable of a 1-D or 2-D tensor is RED at ``(batch, length)``; ``a + b`` of two 1-D / 2-D
    tensors of the result's shape is VA.  Each draft part tiles one dimension set of one loop
    variable; the triple of a DCC dimension multiplies its variables' groups and cores (GEMV's
    batch and heads), ``t = ceil(dim / (g * c))`` (`tiling.from_draft`).

    Raises PimCompileError saying why for anything else (`validate`'s reasons included)."""
    why = _no_problem(op, draft)
    if why:
        raise PimCompileError(f"DCC's simulator cannot time this draft of {op.name}: {why}")
    kernel, shape, dims = _kernel_of(op)
    if isinstance(kernel, str) and kernel.startswith("!"):
        raise PimCompileError(f"DCC's simulator cannot time {op.name} ({op.kind}): {kernel[1:]}")
    part_of = {}
    for s, p in zip(dimension_sets(op), draft.parts):
        if len(s.vars) != 1:
            raise PimCompileError(f"DCC's simulator cannot time this draft of {op.name}: dimension set "
                                  f"{s.vars} spans several loop variables (DCC tiles each dimension itself)")
        part_of[s.vars[0]] = p
    ext = op.extents
    tiling = []
    for vs in dims:
        g = c = n = 1
        for v in vs:
            g *= part_of[v].groups
            c *= part_of[v].cores
            n *= ext[v]
        tiling.append([g, c, -(-n // (g * c))])
    try:
        tiling = validate(fork, kernel, shape, tiling)
    except ValueError as err:
        raise PimCompileError(f"DCC's simulator cannot time this draft of {op.name}: {err}") from None
    return kernel, tuple(shape), tiling


def _no_problem(op, draft) -> str:
    if draft.pack:
        return "a packed (PIMFlow) draft has no per-dimension tiling"
    if op.epilogue is not None:
        return "DCC's generators have no epilogue (a fused elementwise consumer)"
    if len(draft.parts) != len(dimension_sets(op)):
        return f"the draft has {len(draft.parts)} parts for {len(dimension_sets(op))} dimension sets"
    return ""


def _kernel_of(op):
    """(kernel, DCC shape, [loop vars per DCC dimension]) of `op`, or ("!why", None, None)."""
    names = [lv.name for lv in op.loop_vars]
    ext = op.extents
    acc = [a.index_map for a in op.operands]
    res = op.result.index_map
    body = op.body
    plain = all(len(e.vars) == 1 and _plain(e, e.vars[0]) for m in acc + [res] for e in m)
    if not plain:
        return "!its index maps are not plain loop variables", None, None
    if op.kind == "contraction":
        if op.combiner != "add" or len(op.reduction_vars) != 1 or len(acc) != 2 or \
                getattr(body, "name", None) != "mul":
            return "!not a GEMV (one reduced variable, a product of two operands, summed)", None, None
        (k,) = op.reduction_vars
        va, vb = ([e.vars[0] for e in m] for m in acc)
        mat, vec = (va, vb) if len(va) > len(vb) else (vb, va)
        out = [v for v in mat if v not in vec]
        batch = [v for v in vec if v != k]
        if len(mat) != len(names) or len(out) != 1 or k not in vec or len(batch) > 2 or \
                [e.vars[0] for e in res] != batch + out:
            return "!not a (batched) GEMV y[.., n] = sum_k A[.., n, k] x[.., k]", None, None
        b = ext[batch[0]] if len(batch) == 2 else 1
        h = ext[batch[-1]] if batch else 1
        return "gemv", (b, h, ext[k], ext[out[0]]), [batch, [k], out]
    if len(names) > 2:
        return "!DCC's RED and VA take (batch, length) tensors", None, None
    batch = names[:-1]
    if op.kind == "reduction":
        if op.combiner != "add" or tuple(op.reduction_vars) != (names[-1],) or len(acc) != 1:
            return "!not a sum over the last axis (DCC's RED)", None, None
        return "red", (ext[batch[0]] if batch else 1, ext[names[-1]]), [batch, names[-1:]]
    if op.kind == "elementwise":
        args = getattr(body, "args", ())
        full = [[e.vars[0] for e in m] for m in acc]
        if getattr(body, "name", None) != "add" or len(acc) != 2 or len(args) != 2 or \
                any(f != names for f in full) or [e.vars[0] for e in res] != names:
            return "!not an add of two tensors of the result's shape (DCC's VA)", None, None
        return "va", (ext[batch[0]] if batch else 1, ext[names[-1]]), [batch, names[-1:]]
    return f"!DCC's artifact has traces for GEMV, RED and VA only, not a {op.kind} op", None, None


def dcc_lowering(lower_fn, fork: str, values_draft=None):
    """`lower_fn` (a `Family.lower` or `lower_block`) that, on a backend whose `Group.controller`
    is "dcc", first refuses with a PimCompileError saying why what DCC's simulator cannot time
    (`check_backend`, `dcc_problem`; a block of several ops: DCC has no such trace).

    values_draft: (op, draft, backend, shapes) -> a draft the family lowers to the same values,
    or None.  Where the family will not lower a draft DCC can time (hbm-pim: DCC's fork loads
    each bank's own input, this family's input registers are written by group broadcast), the
    program is lowered from that draft instead and carries the requested one (`Program.draft`,
    which the "dcc" controller times): its records compute the values only.  `Program.meta`
    says so ("dcc_values_draft")."""
    @wraps(lower_fn)
    def lower(op, draft, backend, shapes=None, **options):
        if backend.group.controller != CONTROLLER:
            return lower_fn(op, draft, backend, shapes, **options)
        try:
            check_backend(backend)
        except ValueError as err:
            raise PimCompileError(str(err)) from None
        if isinstance(op, (list, tuple)):
            raise PimCompileError(f"DCC's simulator has no trace for a fused block of {len(op)} ops "
                                  f"(attention); its artifact's kernels are GEMV, RED and VA")
        dcc_problem(op, draft, fork)
        try:
            return lower_fn(op, draft, backend, shapes, **options)
        except PimCompileError as err:
            sub = values_draft(op, draft, backend, shapes) if values_draft is not None else None
            if sub is None or sub == draft:
                raise
            try:
                program = lower_fn(op, sub, backend, shapes, **options)
            except PimCompileError:
                raise err from None
            return replace(program, draft=draft, meta={**program.meta, "dcc_values_draft": sub,
                                                       "dcc_values_reason": str(err)})
    return lower


def broadcast_registers_draft(op, draft, backend, shapes=None):
    """`draft` without core splits of the dimension sets whose input registers a group writes by
    broadcast (`partition.verify.shared_register_sets`): a draft an hbm-pim family lowers to the
    same values (fewer cores), or None when `draft` splits none."""
    shared = shared_register_sets(op, backend, shapes, per_core=False)
    if not any(bool(s) and p.cores > 1 for s, p in zip(shared, draft.parts)):
        return None
    parts = tuple(DimPart(p.groups, 1, p.rep) if s else p for s, p in zip(shared, draft.parts))
    return replace(draft, parts=parts)


@lru_cache(maxsize=None)
def _run(fork: str, kernel: str, shape: tuple, tiling: tuple, refresh: bool, coupled, native: bool) -> tuple:
    """(total, rearrangement, compute, readback, {command: issued per loaded channel}, loaded channels)
    of one tiling: the busiest channel's commands, or with `coupled` all channels' over their number."""
    trace = gen_trace(fork, kernel, [list(t) for t in tiling])
    if coupled == "auto":
        coupled = channels_wrap(tiling)
    if native:                                  # the compiled controller (native.py), the same cycles
        arr = trace_arrays(trace)
        loads = [int(x) for x in channel_loads_of(arr)]
        ch = loads.index(max(loads))
        total, cnt, first, last = simulate_channel_native(
            fork, arr if coupled else channel_arrays(arr, ch), refresh=refresh, pim_commands=PIM_CMDS,
            coupled=bool(coupled))
        n = sum(1 for x in loads if x)
        counts = {CMDS[c]: (int(v) / n if coupled else int(v)) for c, v in enumerate(cnt) if v}
        first, last = (first, last + 1) if first >= 0 else (total, total)
    else:                                       # the Python controller (controller.py), the reference
        loads = channel_loads(trace)
        ch = loads.index(max(loads))
        detail = {}
        total = simulate_channel(fork, channel_requests(trace, ch), detail=detail, refresh=refresh)
        log = detail["log"]
        pim = [clk for clk, c in log if CMDS[c] in PIM_CMDS]
        first, last = (pim[0], pim[-1] + 1) if pim else (total, total)
        counts = dict(Counter(CMDS[c] for _, c in log))
        if coupled:
            total = simulate_coupled(fork, trace, refresh=refresh)
    last = min(last, total)
    first = min(first, last)
    return total, first, last - first, total - last, counts, sum(1 for x in loads if x)


def dcc_cycles(fork: str, kernel: str, shape, tiling, refresh: bool = True, coupled=None) -> dict:
    """DCC's fork `fork` on one tiling (memoised): {"total", "rearrangement", "compute",
    "readback"} in cycles of tCK 0.769 ns, "counts" ({fork command: issued on the busiest
    channel}) and "channels" (loaded channels).  ``total`` equals `predict(fork, kernel, shape,
    tiling, coupled=COUPLED)`; `coupled` (None: `COUPLED`) as `predict`'s.  The compiled controller
    unless `NATIVE` is False."""
    tiling = validate(fork, kernel, shape, tiling)
    total, rearr, comp, rback, counts, chans = _run(fork, kernel, tuple(int(x) for x in shape),
                                                     tuple(tuple(t) for t in tiling), bool(refresh),
                                                     COUPLED if coupled is None else coupled,
                                                     bool(NATIVE))
    return {"total": total, "rearrangement": rearr, "compute": comp, "readback": rback, "counts": dict(counts),
            "channels": chans}


def dcc_timer(fork: str):
    """The "dcc" program controller of a family whose DCC fork is `fork` ("attacc" or "hbmpim"):
    (program, backend, *, include_resident, refresh, engine) -> CycleReport (module docstring)."""
    def time_program(program, backend, *, include_resident: bool = False, refresh: bool = True,
                     engine: str | None = None) -> CycleReport:
        check_backend(backend)
        kernel, shape, tiling = dcc_problem(program.op, program.draft, fork)
        r = dcc_cycles(fork, kernel, shape, tiling, refresh)
        return _report(r, backend)
    time_program.__name__ = time_program.__qualname__ = f"dcc_{fork}_cycles"
    time_program.__doc__ = f"DCC's {fork} fork as a program controller (`pimjax.backends.dcc.engine`)."
    return time_program


def _report(r: dict, backend) -> CycleReport:
    f32 = np.float32
    cnt, n = r["counts"], r["channels"]
    total = float(r["total"])
    act = cnt.get("ACT", 0) + CUBE_BANKS * cnt.get("ACTAB", 0)
    pre = cnt.get("PRE", 0) + CUBE_BANKS * (cnt.get("PREA", 0))
    compute = sum(v for k, v in cnt.items() if k in COMPUTE_CMDS)
    bank_ops = compute - cnt.get("MACAB", 0) + CUBE_BANKS * cnt.get("MACAB", 0)
    bursts = sum(v for k, v in cnt.items() if k in BURST_CMDS)
    commands = sum(cnt.values())
    counts = {"ACT": act, "RD": cnt.get("RD", 0), "WR": cnt.get("WR", 0), "PIM": compute,
              "REF": cnt.get("REFab", 0), "bursts": bursts, "commands": commands, "PRE": pre}
    counts = {k: f32(v * n) for k, v in counts.items()}
    e = backend.energy
    energy = n * (act * float(e.act) + pre * float(e.pre) + cnt.get("RD", 0) * float(e.rd)
                  + cnt.get("WR", 0) * float(e.wr) + bank_ops * (float(e.pim_op) + float(e.rd))
                  + cnt.get("REFab", 0) * float(e.refresh) + bursts * 32.0 * float(e.io_byte))
    safe = max(total, 1.0)
    util = np.array([commands / safe, cnt.get("MACAB", 0) * T["nCCDAB"] / safe + (compute - cnt.get("MACAB", 0))
                     * T["nBL"] / safe, bursts * T["nBL"] / (2 * safe), r["rearrangement"] / safe, 0.0], f32)
    tck = float(backend.timing.tCK)
    return CycleReport(total_cycles=f32(total), total_ns=f32(total * tck), rearrangement=f32(r["rearrangement"]),
                       compute=f32(r["compute"]), readback=f32(r["readback"]), merge=f32(0.0),
                       resident_cycles=f32(0.0), kernel_cycles=f32(r["compute"]), bound=np.int32(np.argmax(util)),
                       utilisation=util, energy_pj=f32(energy), counts=counts)
