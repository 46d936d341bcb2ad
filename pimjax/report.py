"""The compile report: per op and for the whole function.

Per op: placement and reason, the chosen draft in words, cycles and ns with
the rearrangement / compute / read-back / merge breakdown, energy, and the
speedup over the GPU-only run and over the backend's baseline mapping.
Totals: PIM ops at their simulated time plus host ops on the GPU model of
`System.baseline` (the GPU on the PIM system's memory, `hw/gpu.py`), against
the GPU-only time of every op.  The header states the system (`system`,
`system_text`: `hw.describe_system` / `hw.system_line`).  `print(report)`
renders a rich table; `report.to_dict()` gives plain numbers,
`report.to_dataframe()` a pandas DataFrame (one row per op) for notebooks.

Derived figures (DESIGN.md "every report ... gives derived figures"): per
PIM op the bytes moved over the host link each way, the operand bytes (every
operand read once and the result written once, at the backend's element
size), the effective bandwidth operand bytes / total ns, the internal
bandwidth operand bytes / compute ns as a percentage of the backend's peak
(`hw.derived_peaks`: what the PIM units can consume), and the link bandwidth
achieved during rearrangement and read-back as a percentage of the peak.

Units: cycles of the PIM command clock (`clock_ghz` = 1 / tCK), ns, pJ,
bytes, GB/s (= bytes / ns).
"""
from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .backends import baseline, family_of
from .errors import PimCompileError
from .hw.peaks import derived_peaks, describe_system, system_line
from .lower import lower
from .partition.draft import describe_draft
from .precision import conversion, op_dtypes
from .sim.append import charge_append
from .sim.cycles import cycles_pooled
from .sim.gpu_kernels import conv_pick, gpu_kernels
from .sim.host import PRODUCT_KINDS, op_bytes
from .trace.ir import PimOp

PHASE_FIELDS = ("rearrangement", "compute", "readback", "merge")


@dataclass
class OpReport:
    index: int
    name: str                   # the op's (first) jax primitive
    placement: str
    reason: str
    fused: tuple = ()           # the primitives traced into it after the first (`PimOp.fused`, repeats once)
    draft: str = ""
    precision: str = ""         # data converted to the units' type ("float32 -> float16"), `pimjax.precision`
    saturation: str = ""        # what the units' type did to the values of a call (overflow, underflow)
    cycles: float = 0.0
    ns: float = 0.0
    rearrangement: float = 0.0
    compute: float = 0.0
    readback: float = 0.0
    merge: float = 0.0
    resident_cycles: float = 0.0
    append_cycles: float = 0.0         # appended rows of resident operands, per call (in rearrangement)
    energy_pj: float = 0.0
    gpu_ns: float = 0.0
    gpu_share: float = float("nan")     # mixed-parallel plans (System.cogpu): 1 GPU, 0 PIM, between md-dp
    baseline_ns: float = float("nan")
    bound: str = ""
    simulated_drafts: int = 0
    space: int = 0
    # predicted figures only (`Tuner._trust`): the cost model's sigma of log-cycles (relative; the
    # ensemble's spread widened by its out-of-sample floor, `Predictor.predict_full`), and
    # whether the draft lies outside the cost model's training range (NaN -> None: simulated / unknown)
    uncertainty: float = float("nan")
    extrapolating: Any = float("nan")
    operand_bytes: int = 0             # operands read once + the result written once (PIM elements)
    to_pim_bytes: int = 0              # host -> PIM per call (rearrangement + register writes)
    from_pim_bytes: int = 0            # PIM -> host per call (read-back)
    internal_peak_GBps: float = float("nan")
    to_pim_peak_GBps: float = float("nan")     # hw.derived_peaks: external / readback bandwidth
    from_pim_peak_GBps: float = float("nan")

    @property
    def speedup_gpu(self) -> float:
        return self.gpu_ns / self.ns if self.ns else float("nan")

    @property
    def speedup_baseline(self) -> float:
        return self.baseline_ns / self.ns if self.ns and self.placement == "pim" else float("nan")

    @property
    def effective_GBps(self) -> float:
        """Operand bytes over the op's end-to-end time (GB/s), PIM ops."""
        return self.operand_bytes / self.ns if self.ns and self.placement == "pim" else float("nan")

    def _ns_of(self, cycles: float) -> float:
        """Cycles of a phase of this op in ns (0 for an op without cycles)."""
        return cycles * self.ns / self.cycles if self.cycles else 0.0

    @property
    def internal_pct(self) -> float:
        """Operand bytes over the compute phase, % of the PIM units' peak bandwidth."""
        ns = self._ns_of(self.compute)
        if not ns or self.placement != "pim":
            return float("nan")
        return 100.0 * self.operand_bytes / ns / self.internal_peak_GBps

    def _link_ns(self) -> float:
        return self._ns_of(self.rearrangement + self.readback)

    @property
    def link_GBps(self) -> float:
        """Host-link bytes (both ways) over rearrangement + read-back time (GB/s)."""
        ns, moved = self._link_ns(), self.to_pim_bytes + self.from_pim_bytes
        return moved / ns if ns and moved and self.placement == "pim" else float("nan")

    @property
    def link_pct(self) -> float:
        """The link time at peak (bytes each way over its peak bandwidth, every
        group's link at once) as a % of the simulated rearrangement + read-back."""
        if np.isnan(self.link_GBps):
            return float("nan")
        at_peak = self.to_pim_bytes / self.to_pim_peak_GBps + self.from_pim_bytes / self.from_pim_peak_GBps
        return 100.0 * at_peak / self._link_ns()


@dataclass
class Report:
    """figures: "simulated" (a `Compiled`: the chosen programs simulated)
    or "predicted" (a `Lowered`: the cost model's cycles of the predicted
    best drafts; what only a simulation gives -- the breakdown, energy,
    resident placement, link bytes, the baseline -- is NaN, None in
    `to_dict`).

    resident / per_call: {argument (or leaf path): why} of the arguments
    placed in PIM layout once and of those rearranged every call
    (`pimjax.plan.residency`)."""
    backend: str
    host: str
    clock_ghz: float
    ops: list = field(default_factory=list)
    figures: str = "simulated"
    cost_model: str = ""          # which model ranked the drafts (`Tuner.model_source`)
    resident: dict = field(default_factory=dict)
    per_call: dict = field(default_factory=dict)
    system: dict = field(default_factory=dict)   # `hw.describe_system`: the PIM system and the GPU compared with
    system_text: str = ""                        # the same in one line (`hw.system_line`)
    gpu: str = ""                                # the GPU "vs GPU" (gpu_ns, speedup_gpu) used: System.baseline's name
    gpu_model: str = ""                          #   and its time model (`hw.gpu.GPU_MODELS`)
    gpu_sources: dict = field(default_factory=dict)  # on a measured-profile GPU (`hw.profile`): {op index:
                                                 #   "measured" / "interpolated" / "model"}; {} on other GPUs
    gpu_kernels: list = field(default_factory=list)  # the GPU-only run's kernels (`sim.gpu_kernels.GpuKernel`),
                                                 #   which gpu_ns adds up: ops fused as the GPU's libraries fuse them

    # -- totals ------------------------------------------------------------
    @property
    def total_ns(self) -> float:
        return float(sum(o.ns for o in self.ops))

    @property
    def gpu_ns(self) -> float:
        return float(sum(o.gpu_ns for o in self.ops))

    @property
    def pim_cycles(self) -> float:
        """Cycles of the PIM-placed ops (PIM command clock; a block once)."""
        return float(sum(o.cycles for o in self.ops if o.placement == "pim"))

    def _ns_on(self, placement: str) -> float:
        return float(sum(o.ns for o in self.ops if o.placement == placement))

    @property
    def pim_ns(self) -> float:
        return self._ns_on("pim")

    @property
    def host_ns(self) -> float:
        """The host-placed ops on the host roofline, ns."""
        return self._ns_on("host")

    @property
    def split_ns(self) -> float:
        """The ops split between the GPU and PIM ("md-dp": both parts at once), ns."""
        return self._ns_on("md-dp")

    @property
    def resident_ns(self) -> float:
        return float(sum(o.resident_cycles / self.clock_ghz for o in self.ops))

    @property
    def energy_pj(self) -> float:
        return float(sum(o.energy_pj for o in self.ops))

    def _op_rows(self) -> list[dict]:
        """The `cost_analysis()` op fields per op, NaN where a figure is unknown."""
        ops = []
        for o in self.ops:
            d = {k: getattr(o, k) for k in ("index", "name", "fused", "placement", "reason", "draft", "precision",
                                           "saturation", "cycles", "ns", "energy_pj", "gpu_ns", "gpu_share",
                                           "baseline_ns", "bound", "simulated_drafts", "space",
                                           "uncertainty", "extrapolating")}
            for k in ("rearrangement", "compute", "readback", "merge", "resident", "append"):
                d[f"{k}_cycles"] = getattr(o, k if k in PHASE_FIELDS else f"{k}_cycles")
            d["speedup_gpu"] = o.speedup_gpu
            d["speedup_baseline"] = o.speedup_baseline
            for k in ("operand_bytes", "to_pim_bytes", "from_pim_bytes", "effective_GBps", "internal_pct",
                      "link_GBps", "link_pct"):
                d[k] = getattr(o, k)
            ops.append(d)
        return ops

    def to_dataframe(self):
        """A pandas DataFrame, one row per op (plan order), the columns the op
        fields of `to_dict()` / `cost_analysis()` (same names and units);
        unknown figures are NaN rather than None.  The report's totals are in
        `df.attrs` (the top-level `to_dict()` fields).  Needs pandas (the
        `test` extra)."""
        try:
            import pandas as pd
        except ImportError as err:     # an optional dependency: say which and where it comes from
            raise ImportError("Report.to_dataframe needs pandas (pip install 'pimjax[test]' or pandas)") from err
        df = pd.DataFrame(self._op_rows(), columns=list(OP_FIELDS))
        df.attrs.update({k: v for k, v in self.to_dict().items() if k != "ops"})
        return df

    def to_dict(self) -> dict:
        """Plain numbers: the `cost_analysis()` schema of `Lowered` and
        `Compiled` alike (documented in `pimjax.api`'s docstring), strict
        JSON (a figure that does not exist, or is not known on these
        figures, is None); `cost_model` says which model ranked the drafts."""
        ops = [{k: _none_if_nan(v) for k, v in d.items()} for d in self._op_rows()]
        total = self.total_ns
        top = {"figures": self.figures, "backend": self.backend, "host": self.host, "clock_ghz": self.clock_ghz,
               "cost_model": self.cost_model, "system": self.system,
               "total_ns": total, "pim_cycles": self.pim_cycles, "pim_ns": self.pim_ns, "host_ns": self.host_ns,
               "split_ns": self.split_ns,
               "gpu": self.gpu, "gpu_model": self.gpu_model,
               "gpu_ns": self.gpu_ns, "speedup_gpu": self.gpu_ns / total if total else float("nan"),
               "resident_ns": self.resident_ns, "energy_pj": self.energy_pj}
        return {**{k: _none_if_nan(v) for k, v in top.items()}, "resident": dict(self.resident),
                "per_call": dict(self.per_call), "gpu_sources": {str(k): v for k, v in self.gpu_sources.items()},
                "gpu_kernels": [{"name": k.name, "ops": list(k.ops), "kind": k.kind, "ns": k.ns}
                                for k in self.gpu_kernels],
                "ops": ops}

    def table(self):
        from rich.table import Table
        t = Table(title=f"pimjax on {self.backend} (host {self.host}, {self.clock_ghz:.3g} GHz PIM clock; "
                        f"{self.figures} figures)" + (f"\n{self.system_text}" if self.system_text else ""))
        for col in ("#", "op", "on", "draft / reason", "cycles", "ns", "rearr/comp/rb/merge %",
                    "GB/s (int %peak)", "energy nJ", "vs GPU", "vs baseline"):
            t.add_column(col, justify="right" if col in ("#", "cycles", "ns", "GB/s (int %peak)", "energy nJ",
                                                        "vs GPU", "vs baseline") else "left")
        for o in self.ops:
            pct = ""
            if o.placement == "pim" and o.cycles and not np.isnan(o.compute):
                parts = [o.rearrangement, o.compute, o.readback, o.merge]
                pct = "/".join(f"{100 * p / o.cycles:.0f}" for p in parts)
            what = (o.draft or o.reason) if o.placement == "pim" else o.reason
            cyc = _count(o.cycles) if o.placement == "pim" else ""
            if cyc and not np.isnan(o.uncertainty):        # a predicted figure: its spread, and a warning
                cyc += f" ±{100 * np.expm1(o.uncertainty):.0f}%" + (" (extrapolating)" if o.extrapolating is True else "")
            t.add_row(str(o.index), "+".join((o.name,) + tuple(o.fused)), o.placement, what, cyc, _count(o.ns), pct,
                      _bandwidth(o), f"{o.energy_pj / 1e3:,.1f}" if o.energy_pj and not np.isnan(o.energy_pj) else "",
                      _times(o.speedup_gpu), _times(o.speedup_baseline))
        speedup = self.gpu_ns / self.total_ns if self.total_ns else float("nan")
        gpu = f" on {self.gpu} ({self.gpu_model} model)" if self.gpu else ""
        t.caption = (f"total {_count(self.total_ns)} ns vs GPU-only {self.gpu_ns:,.0f} ns{gpu} "
                     f"({_times(speedup) or 'n/a'}); resident placement {_count(self.resident_ns)} ns once")
        for label, why in self.resident.items():
            t.caption += f"\nresident {label}: {why}"
        for label, why in self.per_call.items():
            t.caption += f"\nper call {label}: {why}"
        if self.cost_model:
            t.caption += f"\ncost model: {self.cost_model}"
        t.caption += ("\ncolumns: op: its jax primitives, fused ones after '+'; cycles: the PIM command clock's; "
                      "rearr/comp/rb/merge %: the op's PIM cycles spent on rearrangement (host -> PIM writes), "
                      "compute, read-back and the host merge; GB/s (int %peak): operand bytes over the op's time, "
                      "and over its compute phase as a share of the PIM units' internal peak; vs GPU: the op's "
                      "GPU-only time over its time here; vs baseline: the backend's baseline mapping over the "
                      "chosen draft" + ("; cycles with ±: predicted, the cost model's spread"
                                        if self.figures == "predicted" else ""))
        if self.gpu_sources:
            n = {w: sum(v == w for v in self.gpu_sources.values()) for w in ("measured", "interpolated", "model")}
            filled = [str(i) for i, v in self.gpu_sources.items() if v == "model"]
            t.caption += (f"\nGPU times from its measured profile: {n['measured']} op(s) measured, "
                          f"{n['interpolated']} interpolated, {n['model']} filled by the analytic model"
                          + (f" (ops {', '.join(filled)})" if filled else ""))
        per_op = {}
        for k in self.gpu_kernels:
            for i in k.ops:
                per_op[i] = per_op.get(i, 0) + 1
        # the kernels that are not one op each: a fused group, or a GEMM's epilogue run after it
        fused = [k for k in self.gpu_kernels
                 if len(k.ops) > 1 or (per_op[k.ops[0]] > 1 and k.kind not in PRODUCT_KINDS)]
        if fused:
            n_ops = len({i for k in self.gpu_kernels for i in k.ops})
            t.caption += (f"\nGPU-only run: {len(self.gpu_kernels)} kernels for {n_ops} ops; fused: "
                          + "; ".join(f"ops {', '.join(map(str, k.ops))} as one {k.kind} kernel"
                                      if len(k.ops) > 1 else f"op {k.ops[0]}'s epilogue ({k.name}) as its own kernel"
                                      for k in fused))
        picks = [(k.ops[0], a) for k in self.gpu_kernels if (a := conv_pick(k))]
        if picks:
            t.caption += "\nGPU convolutions as cuDNN runs them: " + "; ".join(f"op {i} {a}" for i, a in picks)
        return t

    def as_text(self) -> str:
        """The table as plain text (what `print(report)` shows)."""
        return str(self)

    def __str__(self) -> str:
        from rich.console import Console
        buf = io.StringIO()
        Console(file=buf, width=160, force_terminal=False).print(self.table())
        return buf.getvalue()


OP_FIELDS = ("index", "name", "fused", "placement", "reason", "draft", "precision", "saturation", "cycles", "ns",
             "energy_pj", "gpu_ns", "gpu_share",
             "baseline_ns", "bound", "simulated_drafts", "space", "uncertainty", "extrapolating",
             "rearrangement_cycles", "compute_cycles",
             "readback_cycles", "merge_cycles", "resident_cycles", "append_cycles", "speedup_gpu",
             "speedup_baseline",
             "operand_bytes", "to_pim_bytes", "from_pim_bytes", "effective_GBps", "internal_pct",
             "link_GBps", "link_pct")


def _none_if_nan(v):
    return None if isinstance(v, float) and np.isnan(v) else v


def _bandwidth(o: OpReport) -> str:
    """Effective GB/s and the compute phase's share of the internal peak ("" off PIM)."""
    if np.isnan(o.effective_GBps):
        return ""
    pct = "" if np.isnan(o.internal_pct) else f" ({o.internal_pct:.0f}%)"
    return f"{o.effective_GBps:,.1f}{pct}"


def _count(x: float) -> str:
    """A cycle or ns figure for the table ("n/a" when not known: no prediction)."""
    return "n/a" if np.isnan(x) else f"{x:,.0f}"


def _times(x: float) -> str:
    """A speedup for the table ("" when it does not exist)."""
    return "" if np.isnan(x) else f"{x:.2f}x"


def link_bytes(program) -> tuple[int, int]:
    """(host -> PIM, PIM -> host) bytes of one call of `program`: rearrangement
    and register writes (resident placement excluded), and the read-back."""
    st = program.stats
    to_pim = int(st.rearrange_bytes) + int(st.register_bytes)
    return to_pim, int(st.d2h_bytes)


def _data_op(plan, backend, graph=None) -> PimOp:
    """The op whose operands and result a plan's program reads and writes
    (an attention block: q, K, V and the context)."""
    if not plan.block:
        return plan.op
    ops = plan.choice.program.meta["block_ops"] if plan.choice is not None else [graph.ops[i] for i in plan.block]
    return family_of(backend).block_operands(ops)


def build_report(stage, figures: str = "simulated") -> Report:
    """The report of a `Compiled` (figures="simulated": the chosen programs'
    simulated cycles, and the baselines simulated) or of a `Lowered`
    (figures="predicted": the predicted best drafts' predicted cycles;
    nothing is lowered or simulated)."""
    if figures not in ("simulated", "predicted"):
        raise ValueError(f"figures {figures!r} not in ('simulated', 'predicted')")
    be = stage.backend
    tck = float(be.timing.tCK)
    traced = stage.traced if hasattr(stage, "traced") else stage.lowered.traced
    res = traced.residency
    rep = Report(be.name, be.system.host.name, 1.0 / tck, figures=figures,
                 cost_model=traced.owner.tuner.model_source(be), resident=res.resident, per_call=res.per_call,
                 system=describe_system(be), system_text=system_line(be),
                 gpu=be.system.baseline.name, gpu_model=be.system.baseline.model)
    shapes = {i: v.shape for i, v in enumerate(stage.graph.values)}
    from .plan.plans import host_bytes
    eb = host_bytes(stage.graph, be)
    rep.gpu_kernels = list(gpu_kernels(stage.graph, be.system.baseline, shapes, eb))
    if be.system.baseline.model == "profile":        # which GPU times the measured table gave
        from .sim.host import host_time_source
        rep.gpu_sources = {p.index: host_time_source(p.op, be.system.baseline, shapes, eb) for p in stage.plans}
    peaks = derived_peaks(be)
    nan = float("nan")
    for p in stage.plans:
        o = OpReport(p.index, "attention" if p.block else p.op.name, p.placement, p.reason, gpu_ns=p.host_ns,
                     gpu_share=p.gpu_share,
                     fused=() if p.block else tuple(f for f in dict.fromkeys(p.op.fused) if f != p.op.name))
        if p.placement == "md-dp":         # PIMFlow's split: PIM's rows simulated, the GPU's beside them
            r = p.choice.report
            o.draft = (describe_draft(p.split.choice.program.op, p.draft)
                       + f" | PIM: {p.split.pim_rows} of {p.op.extents[p.split.var]} along {p.split.var}")
            o.cycles = float(r.total_cycles)
            o.ns = float(p.mixed_ns)
            o.rearrangement, o.compute = float(r.rearrangement), float(r.compute)
            o.readback, o.merge = float(r.readback), float(r.merge)
            o.resident_cycles = float(r.resident_cycles)
            o.energy_pj = float(r.energy_pj)
            o.simulated_drafts, o.space = p.choice.simulated, p.choice.space
        elif p.placement == "pim" and figures == "predicted":
            o.draft = describe_draft(p.draft_op, p.draft) if p.draft is not None else ""
            o.cycles = float(p.predicted_cycles)
            o.ns = o.cycles * tck
            o.rearrangement = o.compute = o.readback = o.merge = o.resident_cycles = o.energy_pj = nan
            o.append_cycles = nan
            o.space = p.proposal.space if p.proposal is not None else 0
            if p.proposal is not None:
                o.uncertainty = float(p.proposal.predicted_sigma)
                if p.proposal.extrapolating is not None:
                    o.extrapolating = bool(p.proposal.extrapolating)
            o.operand_bytes = op_bytes(_data_op(p, be, stage.graph), shapes, be.core.elem_bytes)
            o.to_pim_bytes = o.from_pim_bytes = nan
            o.internal_peak_GBps = float(peaks["internal_bandwidth_GBps"])
            o.to_pim_peak_GBps = float(peaks["external_bandwidth_GBps"])
            o.from_pim_peak_GBps = float(peaks["readback_bandwidth_GBps"])
        elif p.placement == "pim":
            r = p.choice.report
            o.draft = describe_draft(p.draft_op, p.draft)
            o.cycles = float(r.total_cycles)
            o.ns = float(r.total_ns)
            o.rearrangement, o.compute = float(r.rearrangement), float(r.compute)
            o.readback, o.merge = float(r.readback), float(r.merge)
            o.resident_cycles = float(r.resident_cycles)
            o.append_cycles = float(p.choice.append_cycles)
            if not np.isnan(p.mixed_ns):
                o.ns = float(p.mixed_ns)
            o.energy_pj = float(r.energy_pj)
            o.bound = r.bound_name(be.core.programmable)
            o.simulated_drafts, o.space = p.choice.simulated, p.choice.space
            o.operand_bytes = op_bytes(_data_op(p, be), shapes, be.core.elem_bytes)
            o.to_pim_bytes, o.from_pim_bytes = link_bytes(p.choice.program)
            o.internal_peak_GBps = float(peaks["internal_bandwidth_GBps"])
            o.to_pim_peak_GBps = float(peaks["external_bandwidth_GBps"])
            o.from_pim_peak_GBps = float(peaks["readback_bandwidth_GBps"])
            base = baseline_report(p, be, shapes)
            if base is not None:
                o.baseline_ns = float(base.total_ns)
        else:
            # host ops on the GPU model (beside PIM in a mixed plan); fused ops are in their block
            o.ns = p.host_ns if np.isnan(p.mixed_ns) else float(p.mixed_ns)
        _precision_fields(o, p, stage, be)
        rep.ops.append(o)
    return rep


def _precision_fields(o: OpReport, p, stage, be) -> None:
    """The op's `precision` (its conversion to the units' type; a `Compiled`
    knows them, a `Lowered`'s PIM ops are computed here) and `saturation`
    (what calls found, `Compiled.saturation`)."""
    conv = getattr(stage, "conversions", None)
    if conv is not None:
        o.precision = conv.get(p.index, "")
    elif p.placement == "pim":
        o.precision = conversion(op_dtypes(stage.graph, p.op), be)
    o.saturation = getattr(stage, "saturation", {}).get(p.index, "")


def baseline_report(plan_, backend, shapes: dict):
    """Cycles of the backend's baseline mapping for a PIM op or block (or None)."""
    if plan_.choice is not None and plan_.choice.baseline is not None:
        return plan_.choice.baseline        # simulated in the tuner's batch, same options
    d = baseline(plan_.draft_op, backend)
    if d is None:
        return None
    try:
        if plan_.block:
            prog = family_of(backend).lower_block(list(plan_.choice.program.meta["block_ops"]), d, backend,
                                                  shapes, resident=plan_.resident)
        else:
            prog = lower(plan_.op, d, backend, shapes, resident=plan_.resident)
    except PimCompileError:
        return None
    rep = cycles_pooled(prog, backend)
    if plan_.proposal is not None and plan_.proposal.append:
        rep, _ = charge_append(rep, prog, plan_.proposal.append, shapes, float(backend.timing.tCK))
    return rep
