"""GPU models against public measured op times (issue 49): per GPU x op class x dtype, the
median of model / measured and the share of rows in 0.8-1.25, above the method's floor, on
the rows the "library" model's constants were not fitted on (`pimjax.hw.gpu_check`, odd rows).
"Before" is the "occupancy" model (the presets' default), on at most --max-rows rows a cell.

    .venv/bin/python benchmarks/gpu_models_bench.py [--max-rows 400] [--markdown]
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pimjax.hw.gpu_check import BAND, class_table, verdict  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-rows", type=int, default=400, help="rows a cell for the scalar 'occupancy' model")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)
    after = class_table("library", split="odd")
    before = {(r["gpu"], r["class"], r["dtype"]): r for r in class_table("occupancy", split="odd",
                                                                           max_rows=args.max_rows)}
    head = ["gpu", "class", "dtype", "rows above floor", "occupancy median", "occupancy in band",
            "library median", "library in band", "library floor rows in 0.5-2"]
    lines = []
    for r in after:
        b = before.get((r["gpu"], r["class"], r["dtype"]), {})
        lines.append([r["gpu"], r["class"], r["dtype"], str(r["above"]), f"{b.get('median', float('nan')):.2f}",
                      f"{b.get('in_band', float('nan')):.2f}", f"{r['median']:.2f}", f"{r['in_band']:.2f}",
                      f"{r['floor_in_band']:.2f}"])
    held = [r for r in after if verdict(r)]
    ok = [r for r in held if verdict(r) == "yes"]
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for ln in lines:
            print("| " + " | ".join(ln) + " |")
    else:
        w = [max(len(h), *(len(ln[i]) for ln in lines)) for i, h in enumerate(head)]
        print("  ".join(h.rjust(w[i]) for i, h in enumerate(head)))
        for ln in lines:
            print("  ".join(c.rjust(w[i]) for i, c in enumerate(ln)))
    print(f"\nlibrary: {len(ok)} of {len(held)} GPU x class x dtype cells with >= 10 rows above the floor meet "
          f"median 0.9-1.1 and >= 90 % in {BAND[0]}-{BAND[1]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
