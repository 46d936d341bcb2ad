"""`CycleReport`: what `sim.cycles` returns (a pytree of arrays, so batches
and timing sweeps come back as arrays with leading batch axes)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

PHASES = ("rearrangement", "compute", "readback", "merge")
BOUNDS = ("command bus", "bank", "data bus", "host link", "host")
# the same utilisation slots in the UPMEM model (`backends/upmem/cycles.py`): DPU pipeline, MRAM DMA, unused
BOUNDS_UPMEM = ("DPU pipeline", "MRAM DMA", "-", "host link", "host")


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class CycleReport:
    """Time of one program (or a batch, with leading axes on every field).

    Units: `cycles` are PIM command-clock cycles (tCK ns each; for UPMEM the
    DRAM command clock as well, DPU time converted), `ns` nanoseconds.

    total_cycles / total_ns: end-to-end time.
    rearrangement, compute, readback, merge: breakdown in cycles (host->PIM
        data movement, PIM compute incl. its control frame, PIM->host
        read-back, host merge of partials + epilogue).  They sum to total.
    resident_cycles: the one-time placement of resident operands (not in total).
    kernel_cycles: compute plus the data movement interleaved with it (the
        "PIM" figure of the Samsung / AttAcc simulators: frame + kernel with
        operands resident, read-back excluded).
    bound: index into BOUNDS of the busiest resource.
    utilisation: [len(BOUNDS)] busy fraction of each resource.
    energy_pj: energy in pJ from per-command energies.
    counts: dict of per-command counts (ACT, RD, WR, PIM, REF, bytes...);
        ACT and PRE count banks (an all-bank activation of 16 banks is 16).
    """
    total_cycles: Any
    total_ns: Any
    rearrangement: Any
    compute: Any
    readback: Any
    merge: Any
    resident_cycles: Any
    kernel_cycles: Any
    bound: Any
    utilisation: Any
    energy_pj: Any
    counts: Any

    def breakdown(self) -> dict[str, float]:
        """{phase: cycles} as Python floats (single program)."""
        return {p: float(np.asarray(getattr(self, p))) for p in PHASES}

    def bound_name(self, programmable: bool = False) -> str:
        """The busiest resource by name (`programmable`: the report of an
        UPMEM program, whose slots are the DPU pipeline and the MRAM DMA)."""
        return (BOUNDS_UPMEM if programmable else BOUNDS)[int(np.asarray(self.bound))]

    def to_dict(self, programmable: bool = False) -> dict:
        """Plain-Python view (single program): units in the key names
        (`programmable`: name the bound and utilisation slots as UPMEM's)."""
        out = {"total_cycles": float(np.asarray(self.total_cycles)),
               "total_ns": float(np.asarray(self.total_ns)),
               "resident_cycles": float(np.asarray(self.resident_cycles)),
               "kernel_cycles": float(np.asarray(self.kernel_cycles)),
               "energy_pj": float(np.asarray(self.energy_pj)),
               "bound": self.bound_name(programmable)}
        out.update({f"{p}_cycles": v for p, v in self.breakdown().items()})
        out["utilisation"] = dict(zip(BOUNDS_UPMEM if programmable else BOUNDS,
                                      map(float, np.asarray(self.utilisation))))
        out["counts"] = {k: float(np.asarray(v)) for k, v in self.counts.items()}
        return out
