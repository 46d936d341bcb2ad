"""Samsung's PIMSimulator figures (`../shared/reference/hbm-pim.csv`, columns
explained in `hbm-pim.md`): every row -- GEMV, ADD and RELU on 64 pseudo-
channels, the `pim` (frame + kernel, operands resident), `readback` and
`nonpim` (the host streaming the operands) metrics -- against our cycles for
the simulator's own baseline mapping (`experiments/validate_reference.py
--csv`, which builds each row the same way), within the 10 % the project
claims for Samsung's simulator."""
from __future__ import annotations

import csv
import os

import pytest

from experiments import validate_reference

REF_CSV = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "reference", "hbm-pim.csv")
TOLERANCE = 0.10          # the task's acceptance: every row of Samsung's simulator within 10 %


def _ref_rows() -> list[dict]:
    if not os.path.exists(REF_CSV):
        pytest.skip("../shared/reference/hbm-pim.csv not beside the repository")
    with open(REF_CSV, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f, skipinitialspace=True))


def test_every_hbm_pim_reference_row_within_ten_percent():
    rows = _ref_rows()
    assert rows, "hbm-pim.csv has no rows"
    # every row is one this comparison covers: none is quietly left out
    assert all(r["backend"] == "hbm-pim" for r in rows), {r["backend"] for r in rows}
    assert {r["metric"] for r in rows} == {"pim", "readback", "nonpim"}
    errors = []
    for line, row in enumerate(rows, start=2):          # line 1 is the header
        ours = validate_reference.our_cycles(row)
        theirs = float(row["cycles"])
        errors.append((abs(ours - theirs) / theirs, line, row, ours))
    err, line, row, ours = max(errors, key=lambda e: e[0])
    assert err <= TOLERANCE, (
        f"worst row: line {line} {row['kernel']} {row['shape']} {row['metric']}: "
        f"ours {ours:.0f} vs Samsung's {row['cycles']} cycles ({err:.1%} > {TOLERANCE:.0%}); "
        + "; ".join(f"line {n} {r['kernel']} {r['shape']} {r['metric']} {e:.1%}" for e, n, r, _ in errors))
