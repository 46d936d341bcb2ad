"""What a plan is: `OpPlan` (one op's placement, draft and program), its host-side timing
(`host_bytes`, `in_place_ns`), the words a placement verdict uses, and `plans_text`.

The planning steps build on this module: `attention.py` (fused blocks), `mixed.py`
(PIMFlow's GPU + PIM modes) and `placement.py` (`predict_plans` / `verify_plans`).  Times
are ns (host roofline: `System.baseline`'s `HostModel`; PIM: a report's `total_ns`), sizes
bytes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import PimCompileError
from ..hw.core import Backend
from ..hw.peaks import system_line
from ..partition.draft import describe_draft
from ..trace.ir import PimGraph, PimOp
from ..trace.text import op_text


@dataclass
class OpPlan:
    """What happens to one op of the graph.

    placement: "pim" or "host"; reason: why (always filled).
    draft / program: the chosen draft and its command program (PIM ops);
    in a `Lowered`, the predicted best draft and no program.
    predicted_cycles: cost-model prediction for the draft (nan if none).
    host_ns: the op on the host roofline (the GPU-only baseline), ns.
    choice: the tuner's Choice (simulated report, drafts simulated); None
    in a `Lowered`.
    proposal: the tuner's Proposal (drafts and predictions) the compile
    stage verifies; None for ops that stay on the host whatever the figures.
    resident: operand indices whose placement is paid once.
    block: the op indices of a fused block (AttAcc attention) this plan runs.
    mixed_ns / gpu_share / split: on a system with a concurrent GPU
    (`System.cogpu`), the op's time in PIMFlow's mixed-parallel plan, the share
    of it on the GPU (1 host, 0 PIM, between: placement "md-dp") and an
    md-dp op's `plan.mixed.Split` (`plan.mixed.mixed_plans`); NaN / None
    elsewhere.  in_place: an append into a resident value (a KV cache),
    timed as the update alone (`in_place_ns`).
    """
    index: int
    op: PimOp
    placement: str
    reason: str
    host_ns: float
    draft: Any = None
    program: Any = None
    predicted_cycles: float = float("nan")
    choice: Any = None
    resident: tuple = ()
    block: tuple = ()
    proposal: Any = field(default=None, repr=False)
    mixed_ns: float = float("nan")
    gpu_share: float = float("nan")
    split: Any = None
    in_place: bool = False

    @property
    def draft_op(self) -> PimOp:
        """The op whose dimension sets the draft tiles (a block's first op)."""
        if not self.block:
            return self.op
        if self.choice is not None:
            return self.choice.program.meta["block_ops"][0]
        return self.proposal.op


def value_shapes(graph: PimGraph) -> dict:
    """{value id: shape tuple} of every value of `graph` (the tuner's and
    the lowering's `shapes`)."""
    return {i: v.shape for i, v in enumerate(graph.values)}


def value_dtypes(graph: PimGraph) -> dict:
    """{value id: dtype name} of every value of `graph`."""
    return {i: v.dtype for i, v in enumerate(graph.values)}


def host_bytes(graph: PimGraph, backend: Backend) -> dict:
    """{value id: bytes per element on the host roofline}: the value's own
    size, floats capped at the backend's element size (equal precision)."""
    cap = backend.core.elem_bytes
    out = {}
    for i, v in enumerate(graph.values):
        try:
            dt = np.dtype(v.dtype)
        except TypeError:                       # PRNG keys and other extended dtypes
            out[i] = cap
            continue
        out[i] = min(dt.itemsize, cap) if np.issubdtype(dt, np.floating) else dt.itemsize
    return out


def in_place_ns(graph: PimGraph, op: PimOp, upd: tuple, backend: Backend, eb: dict, host=None) -> float:
    """Host time of an append into a resident value (a KV cache): in place,
    the update read and written once and the index operands read (ns on the
    host roofline of `host`, default `System.baseline`; the GPU-only run
    updates its cache in place too)."""
    base, update, _ = upd
    size = lambda v: int(np.prod(graph.values[v].shape, dtype=np.int64)) * eb[v]   # noqa: E731
    moved = 2 * size(update) + sum(size(a.value) for a in op.operands if a.value not in (base, update))
    return float((host if host is not None else backend.system.baseline).time_ns(moved, 0))


def gpu_words(backend: Backend) -> str:
    """The GPU placement compares with, in words: its name and time model
    (`System.baseline`, `hw/gpu.py`)."""
    gpu = backend.system.baseline
    return f"{gpu.name} [{gpu.model} model]"


def predicted_placement(pred_ns: float, h_ns: float, placement: str, backend: Backend,
                         what: str = "PIM") -> tuple[str, str]:
    """(placement, reason) on the predicted figures (the `Lowered` view):
    `pred_ns` the predicted PIM time (ns, NaN when the tuner predicts none)
    against `h_ns` the op on the host roofline (ns)."""
    host = gpu_words(backend)
    if placement != "auto":
        pred = "no prediction" if np.isnan(pred_ns) else f"predicted {pred_ns:,.0f} ns"
        return "pim", f"placement={placement!r}: on PIM ({pred}; the {host} {h_ns:,.0f} ns)"
    if np.isnan(pred_ns):
        return "pim", (f"no predicted figure (the tuner predicts none here): PIM or host is decided on "
                       f"the simulated figures at compile (the {host} {h_ns:,.0f} ns)")
    if pred_ns < h_ns:
        return "pim", f"{what} (predicted {pred_ns:,.0f} ns) beats the {host} {h_ns:,.0f} ns"
    return "host", f"{host} {h_ns:,.0f} ns beats {what} (predicted {pred_ns:,.0f} ns)"


def refuse(op: PimOp, backend: Backend, why: str):
    """Raise the PimCompileError of `placement="pim"` for an op the backend
    cannot run: its primitive, source line, backend and why."""
    prim = op.host.primitive.name if op.host is not None else op.name
    raise PimCompileError(f"{prim} at {op.source or '?'} cannot run on {backend.name}: {why}")


def plans_text(graph: PimGraph, backend: Backend, plans: list[OpPlan]) -> str:
    """Per op its text, then where it runs and why; PIM ops with their draft
    and, once compiled, their program (else the predicted cycles)."""
    lines = [f"# {system_line(backend)}"]          # the system and the GPU "vs GPU" means
    for p in plans:
        lines.append(op_text(graph, p.op))
        if p.placement == "pim" or (p.placement == "host" and p.program is None and p.draft is not None):
            where = "PIM" if p.placement == "pim" else "host (predicted)"
            draft = describe_draft(p.draft_op, p.draft) if p.draft is not None else "draft chosen at compile"
            lines.append(f"    -> {where} ({backend.name}): {draft}")
            if p.program is not None:
                lines.append("       " + p.program.as_text(max_lines=8).replace("\n", "\n       "))
            else:
                pred = "none" if np.isnan(p.predicted_cycles) else f"{p.predicted_cycles:,.0f}"
                prop = p.proposal
                if prop is not None and not np.isnan(prop.predicted_sigma):
                    pred += f" (±{100 * np.expm1(prop.predicted_sigma):.0f} %"
                    pred += f"; extrapolating: {', '.join(prop.beyond)} beyond the training range)" \
                        if prop.extrapolating else ")"
                lines.append(f"       predicted cycles: {pred}; {p.reason}")
        elif p.placement == "fused":
            lines.append(f"    -> fused: {p.reason}")
        else:
            lines.append(f"    -> host: {p.reason}")
    return "\n".join(lines)


__all__ = ["OpPlan", "value_shapes", "value_dtypes", "host_bytes", "in_place_ns", "gpu_words",
           "predicted_placement", "refuse", "plans_text"]
