"""Newton timing against PIMFlow's own simulator, layer by layer.

For every row of a reference CSV (default `../shared/reference/pimflow.csv`:
`layer,H,W,C,F,K,stride,config,buffers,gwrite_hiding,cycles,GWRITE,G_ACT,COMP,READRES`)
build the artifact's mapping as a pimjax program
(`pimjax.backends.newton.reference.reference_program`: the packed mapping with
the channel groups the artifact picks, the filter resident, on
`newton_config(config, simulator="pimflow")`), time it with `pimjax.sim.cycles`
and print ours against theirs: cycles of the slowest channel (DRAM clock,
tCK 8/7 ns) and that channel's GWRITE / G_ACT / COMP / READRES commands, with
the relative error of each.  Writes the table to
`experiments/out/pimflow_reference.csv`.  Exits 1 when a row's cycles or a
count it gives is outside the tolerance, 2 when the file has no rows or lacks
a column.

    .venv/bin/python experiments/pimflow_reference.py [--csv PATH] [--tolerance 0.10]
"""
from __future__ import annotations

import argparse
import csv
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_CSV = os.path.join(HERE, "..", "..", "shared", "reference", "pimflow.csv")
REQUIRED = ("layer", "H", "W", "C", "F", "K", "stride", "config", "cycles")
COUNTS = ("GWRITE", "G_ACT", "COMP", "READRES")


def check(rows: list[dict], tolerance: float, out=None) -> tuple[list[dict], int]:
    """Our figures for every row and the number of rows outside `tolerance`
    (a row that cannot be built counts as one, with its error printed to
    `out`, default stdout)."""
    out = sys.stdout if out is None else out
    sys.path.insert(0, os.path.join(HERE, ".."))
    from pimjax.backends.newton.reference import reference_cycles
    table, bad = [], 0
    print(f"{'layer':34} {'config':10} {'theirs':>9} {'ours':>9} {'error':>7}  counts (ours / theirs)", file=out)
    for r in rows:
        t0 = time.time()
        try:
            ours = reference_cycles(r)
        except (ValueError, KeyError) as e:
            print(f"{r.get('layer', '?'):34} {r.get('config', '?'):10} cannot be built: {e}", file=out)
            bad += 1
            continue
        theirs = float(r["cycles"])
        err = ours["cycles"] / theirs - 1.0
        errs = {k: ours[k] / float(r[k]) - 1.0 for k in COUNTS if str(r.get(k, "")).strip() not in ("", "None")
                and float(r[k]) > 0}
        worst = max([abs(err)] + [abs(v) for v in errs.values()])
        bad += worst > tolerance
        counts = " ".join(f"{k} {ours[k]}/{r[k]}" for k in COUNTS if k in errs)
        print(f"{r['layer'][:34]:34} {r['config']:10} {theirs:9.0f} {ours['cycles']:9.0f} {err:+7.1%}  {counts}"
              f"  ({time.time() - t0:.1f} s){'  <-- outside' if worst > tolerance else ''}", file=out)
        table.append({"layer": r["layer"], "config": r["config"], "theirs": theirs, "ours": ours["cycles"],
                      "error": err, **{f"{k}_ours": ours[k] for k in COUNTS},
                      **{f"{k}_theirs": r.get(k, "") for k in COUNTS}, "channel_groups": ours["channel_groups"]})
    return table, bad


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", default=DEFAULT_CSV)
    ap.add_argument("--tolerance", type=float, default=0.10)
    ap.add_argument("--out", default=os.path.join(HERE, "out", "pimflow_reference.csv"))
    args = ap.parse_args(argv)
    with open(args.csv, newline="") as f:
        reader = csv.DictReader(f)
        fields = [h.strip() for h in (reader.fieldnames or [])]
        # values past the header's columns (DictReader's None key) are not ours to read
        rows = [{k.strip(): (v or "").strip() for k, v in r.items() if k is not None} for r in reader]
    missing = [c for c in REQUIRED if c not in fields]
    if missing or not rows:
        print(f"{args.csv}: " + (f"missing column(s) {missing}" if missing else "no rows"), file=sys.stderr)
        return 2
    table, bad = check(rows, args.tolerance)
    if table and args.out:
        os.makedirs(os.path.dirname(args.out), exist_ok=True)
        with open(args.out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(table[0]))
            w.writeheader()
            w.writerows(table)
    worst = max((abs(t["error"]) for t in table), default=float("nan"))
    print(f"{len(rows)} rows, {bad} outside {args.tolerance:.0%}; worst cycle error {worst:.2%}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
