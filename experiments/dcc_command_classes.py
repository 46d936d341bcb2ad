"""The disagreement between DCC's simulator and pimjax's default configurations, command class by
command class (issue 51, item 4), for the DCC Fig. 6 / 7 notebook.

    python experiments/dcc_command_classes.py

Writes experiments/data/dcc_command_classes.json: `experiments.dcc_figures.command_class_table()`'s
rows (GEMV (1, 32, 128, 512), RED (1, 4096) on AttAcc and HBM-PIM, VA (1, 4096) on HBM-PIM, x host
writes / mode changes / MAC / all-bank / read-back / refresh) and the seconds taken; the notebook
`experiments/notebooks/dcc_fig6_fig7_kernels.py` reads it (≈ 4 s with numba's cache warm, a minute
cold).  `tests/test_dcc_figures.py` recomputes it in a slow test.
"""
from __future__ import annotations

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

OUT = os.path.join(HERE, "data", "dcc_command_classes.json")


def main() -> int:
    from experiments import dcc_figures as dcc
    t0 = time.perf_counter()
    df = dcc.command_class_table()
    out = {"rows": json.loads(df.to_json(orient="records")), "seconds": round(time.perf_counter() - t0, 1)}
    with open(OUT, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"{len(df)} rows -> {OUT} ({out['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
