"""The Korean paper's GEMV template as a special case of the draft space.

Lee, Kim, Shin, "Code Generation and Data Layout Transformation Techniques
for Processing-in-Memory" (`pim-codegen-layout-ko.txt`).  A GEMV with X
inputs and Y outputs on NCH = XCH x YCH channels with NP = YP PIM units each
is tiled (§3.1, Fig. 4) as

    X = XCH * XO * XI        Y = YCH * YP * YO * YI

where a PIM kernel processes XI inputs (KI vector input registers of 16
lanes) and YI outputs (KO output registers).  In draft terms: the output set
`i` gets `YCH` groups x `YP` cores, the input set `k` gets `XCH` groups x 1
core, lanes run along `k`, ki = XI / lanes and ko = YI.

§3.3 minimises host<->PIM data movement per channel.  With register reuse
(§3.2) an input register is written only when its index changes and an
output register moved out only when final.  One command moves register r of
all YP units of a channel at once (HBM-PIM's all-bank GRF stores), so per
channel, in elements per unit,

    input-stationary  (XO outer):  XO*XI + XO*YO*YI = X/XCH + X*Y/(NCH*XI*YP)
                                                                -> maximise XCH
    output-stationary (YO outer):  YO*YI + YO*XO*XI = Y/(YCH*YP) + X*Y/(NCH*YP*YI)
                                                                -> maximise YCH

with XCH <= X/XI and YCH <= Y/(YI*YP) and the largest kernel XI = KI_max *
lanes, YI = KO_max (the paper's closing step).  The dataflow with the smaller
cost wins (ties would go to input-stationary; Table 1's four shapes are all
strictly input-stationary).  The "PIM-HBM" baseline distributes outputs
only: XCH = 1, YCH = NCH, YI = min(KO_max, Y / (NCH * NP)).
"""
from __future__ import annotations

from dataclasses import dataclass

from .draft import DimPart, Draft

SCHEDULE_KEYS = ("XCH", "YCH", "XO", "YO", "XI", "YI")


@dataclass(frozen=True)
class GemvSchedule:
    """One row of the paper's Table 1 (plus YP and the dataflow)."""
    XCH: int
    YCH: int
    XO: int
    YO: int
    XI: int
    YI: int
    YP: int
    dataflow: str  # "is" | "os"

    def row(self) -> tuple[int, ...]:
        return tuple(getattr(self, k) for k in SCHEDULE_KEYS)

    def data_movement(self, register_reuse: bool = True) -> int:
        """Elements moved host<->PIM per channel and unit (§3.2-3.3).

        Without register reuse every kernel writes its inputs and moves its
        outputs out (and back in for the next partial sum)."""
        if not register_reuse:
            return self.XO * self.YO * (self.XI + 2 * self.YI)
        if self.dataflow == "is":
            return self.XO * self.XI + self.XO * self.YO * self.YI
        return self.YO * self.YI + self.YO * self.XO * self.XI

    def to_draft(self, lanes: int = 16) -> Draft:
        """The equivalent draft of a GEMV `y[i] = sum_k W[i,k] x[k]` (sets i, k)."""
        return Draft((DimPart(self.YCH, self.YP, 0), DimPart(self.XCH, 1, 0)),
                     dataflow=self.dataflow, ki=self.XI // lanes, ko=self.YI, lane_var="k")


def schedule_from_draft(draft: Draft, X: int, Y: int, lanes: int = 16) -> GemvSchedule:
    """Read XCH/YCH/YP/XO/YO/XI/YI off a GEMV draft (sets ordered i, k)."""
    pi, pk = draft.parts
    if pk.cores != 1:
        raise ValueError("the Korean template puts all PIM units of a channel on the outputs")
    XI, YI = draft.ki * lanes, draft.ko
    return GemvSchedule(pk.groups, pi.groups, -(-X // (pk.groups * XI)), -(-Y // (pi.groups * pi.cores * YI)),
                        XI, YI, pi.cores, draft.dataflow)


def minimize_data_movement(X: int, Y: int, nch: int = 16, np_: int = 16, lanes: int = 16,
                           kmax: int = 8) -> GemvSchedule:
    """The paper's data-movement minimisation (§3.3): the "Compiler" row.

    X inputs, Y outputs, nch channels, np_ PIM units per channel, `lanes`
    elements per register, KI, KO <= kmax."""
    XI, YI = kmax * lanes, kmax

    def sched(xch: int, dataflow: str) -> GemvSchedule:
        ych = nch // xch
        return GemvSchedule(xch, ych, -(-X // (xch * XI)), -(-Y // (ych * np_ * YI)), XI, YI, np_, dataflow)

    xch_is = _largest_divisor_at_most(nch, max(1, X // XI))
    ych_os = _largest_divisor_at_most(nch, max(1, Y // (YI * np_)))
    cand_is = sched(xch_is, "is")
    cand_os = sched(nch // ych_os, "os")
    # ties go to input-stationary
    return cand_is if cand_is.data_movement() <= cand_os.data_movement() else cand_os


def pim_hbm_baseline(X: int, Y: int, nch: int = 16, np_: int = 16, lanes: int = 16,
                     kmax: int = 8) -> GemvSchedule:
    """The paper's "PIM-HBM" rows: outputs over all channels and units only."""
    XI = kmax * lanes
    YI = max(1, min(kmax, Y // (nch * np_)))
    return GemvSchedule(1, nch, -(-X // XI), -(-Y // (nch * np_ * YI)), XI, YI, np_, "os")


def _largest_divisor_at_most(n: int, bound: int) -> int:
    return max(d for d in range(1, n + 1) if n % d == 0 and d <= bound)
