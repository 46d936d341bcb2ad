"""The notebooks' key figures held to committed values (`data/key_figures.json`).

A notebook's "Checks" section asserts properties that hold whatever the cycle model's details (speedups
compose, the search never loses to its baseline, ...).  Those cannot see a change that moves every
figure the same way, so each notebook also hands its headline figures to `check`, which compares them
with the values committed beside the notebook.  A deliberate change of the model re-records them:
`PIMJAX_KEY_FIGURES=write make test` (or one notebook's test), then review and commit the diff of
`data/key_figures.json` with the change that moved them.

The band (`RTOL`, 5 %) is wide enough for another CPU's rounding and for ties the tuner breaks either
way, and narrow enough that a changed constant or cost term shows.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

PATH = Path(__file__).parent / "data" / "key_figures.json"
RTOL = 0.05          # relative band around the committed figure (see the module docstring)
ENV = "PIMJAX_KEY_FIGURES"


def _load() -> dict:
    return json.loads(PATH.read_text()) if PATH.exists() else {}


def check(notebook: str, figures: dict[str, float], rtol: float = RTOL) -> dict[str, float]:
    """Assert each of `figures` (name -> value, finite floats) within `rtol` of the value committed
    for `notebook`, and that the names are the committed ones; with ``PIMJAX_KEY_FIGURES=write`` in
    the environment, record them instead.  Returns `figures`.

    Raises AssertionError naming every figure outside the band, a missing or an extra name."""
    figures = {str(k): float(v) for k, v in figures.items()}
    bad = [k for k, v in figures.items() if not math.isfinite(v)]
    if bad:
        raise AssertionError(f"{notebook}: key figures must be finite: {bad}")
    data = _load()
    if os.environ.get(ENV) == "write":
        data[notebook] = dict(sorted(figures.items()))
        PATH.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        return figures
    if notebook not in data:
        raise AssertionError(f"{notebook}: no committed key figures in {PATH.name}; record them with {ENV}=write")
    want = data[notebook]
    if set(want) != set(figures):
        raise AssertionError(f"{notebook}: key figures {sorted(figures)} differ from the committed "
                             f"{sorted(want)}; re-record with {ENV}=write if the change is meant")
    off = {k: (figures[k], want[k]) for k in want if not math.isclose(figures[k], want[k], rel_tol=rtol)}
    if off:
        lines = "; ".join(f"{k}: {v:.6g} (committed {w:.6g}, {v / w - 1:+.1%})" if w else f"{k}: {v:.6g} (committed 0)"
                          for k, (v, w) in off.items())
        raise AssertionError(f"{notebook}: {len(off)} key figure(s) outside +-{rtol:.0%} of the committed: {lines}; "
                             f"re-record with {ENV}=write if the change is meant")
    return figures
