"""DCC's simulator, ported (`pimjax/backends/dcc`), against DCC's own artifact, tiling by tiling.

For every row of a reference CSV (default `../shared/reference/dcc-artifact.csv`:
`backend,kernel,shape,tiling,n_tilings,trace_commands,cycles,role`) run the port
(`pimjax.backends.dcc.predict`: DCC's trace generator, then the Ramulator2 fork's channel controller)
or, with `--via-backend`, pimjax's Backend API: the row's tiling as a pimjax draft (`tiling.to_draft`)
of the pimjax kernel, lowered on `get_backend("attacc" / "hbm-pim", simulator="dcc")` and timed by
`pimjax.sim.cycles.cycles` (the "dcc" controller); a tiling pimjax cannot express as a draft (11
batch-4 GEMV rows whose batch*heads chunks straddle batch elements) cannot be run that way.
It prints ours against theirs in cycles (tCK 0.769 ns, HBM3 5.2 Gbps) with the relative error; per
group (backend, kernel, shape): rows, median and worst |error|, Spearman(ours, theirs) and whether our
fastest tiling is one of the artifact's fastest.  The last line is
"N rows, worst |error| X %, K outside ±T %; median Spearman S, same best B/G".
Writes the table to `experiments/out/dcc_reference.csv`.  Exits 1 when a row is outside the tolerance
(percent) or cannot be run, 2 when the file has no rows (after `--groups` / `--max-commands`) or lacks a
column.

    .venv/bin/python experiments/dcc_reference.py [--csv PATH] [--tolerance 10] [--groups attacc/red ...]
        [--coupled auto|never|always] [--max-commands 20000] [--jobs 2] [--via-backend] [--python-controller]

It runs the compiled controller (`pimjax/backends/dcc/native.py`): all 614 rows take a few minutes, through the
Backend API too.  `--coupled auto` (default) simulates tilings whose rounded-up channels / banks wrap with
all 16 channels behind the shared frontend (exact, ~16x slower), `never` the busiest channel alone (within
1.07 % on those rows).  `--python-controller`: the port's Python controller, the readable reference (~0.01-0.1 s
for a RED / VA row, up to ~60 s for the largest HBM-PIM GEMV, minutes for a coupled one).
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_CSV = os.path.join(ROOT, "..", "shared", "reference", "dcc-artifact.csv")
REQUIRED = ("backend", "kernel", "shape", "tiling", "cycles")


def _ranks(v):
    order = sorted(range(len(v)), key=lambda i: v[i])
    r = [0.0] * len(v)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2.0
        i = j + 1
    return r


def spearman(a, b) -> float:
    """Spearman rank correlation of two equal-length sequences (ties get mean ranks); nan when either
    is constant or has fewer than two values."""
    if len(a) < 2:
        return float("nan")
    ra, rb = _ranks(a), _ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = sum((x - ma) ** 2 for x in ra) ** 0.5
    vb = sum((y - mb) ** 2 for y in rb) ** 0.5
    return cov / (va * vb) if va and vb else float("nan")


def group_of(r: dict) -> tuple:
    return (r["backend"], r["kernel"], r["shape"].replace(" ", ""))


def selected(r: dict, groups) -> bool:
    """True when row `r` is in one of `groups` ("backend", "backend/kernel" or "backend/kernel/shape")."""
    if not groups:
        return True
    g = "/".join(group_of(r))
    return any(g == s or g.startswith(s.rstrip("/") + "/") for s in groups)


PYTHON_CONTROLLER = False
"""`--python-controller`: the port's Python controller (`controller.py`) instead of the compiled one
(`native.py`, the same cycles) for the single-channel rows."""


def run_row(r: dict, coupled="auto") -> int:
    """Our cycles (tCK 0.769 ns) for one CSV row, from the port (`predict`; single-channel rows on
    the compiled controller unless PYTHON_CONTROLLER)."""
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    from pimjax.backends.dcc import engine, predict
    shape = [int(x) for x in r["shape"].split(",")]
    if not PYTHON_CONTROLLER:
        return engine.dcc_cycles(r["backend"], r["kernel"], shape, json.loads(r["tiling"]), coupled=coupled)["total"]
    return predict(r["backend"], r["kernel"], shape, json.loads(r["tiling"]), coupled=coupled)


#: DCC's fork -> the pimjax preset whose simulator="dcc" configuration it is
PRESET = {"attacc": "attacc", "hbmpim": "hbm-pim"}


def backend_program(r: dict):
    """(backend, program) of one CSV row through pimjax's Backend API: its tiling as a draft
    (`tiling.to_draft`) of the pimjax kernel, lowered on `get_backend(PRESET[fork], simulator="dcc")`.
    Raises ValueError (to_draft's reason, or the lowering's) where pimjax cannot express or lower it."""
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    from pimjax.backends.dcc.tiling import lower_tiling
    from pimjax.hw import get_backend
    be = get_backend(PRESET[r["backend"]], simulator="dcc")
    shape = [int(x) for x in r["shape"].split(",")]
    return be, lower_tiling(r["kernel"], shape, json.loads(r["tiling"]), be, r["backend"])


def run_row_backend(r: dict, coupled="auto") -> int:
    """Our cycles (tCK 0.769 ns) for one CSV row through the Backend API (`backend_program`, then
    `pimjax.sim.cycles.cycles`).  `coupled` is the dcc controller's `engine.COUPLED`."""
    from pimjax.backends.dcc import engine
    from pimjax.sim.cycles import cycles
    be, program = backend_program(r)
    kept, engine.COUPLED = engine.COUPLED, coupled
    try:
        return int(round(float(cycles(program, be).total_cycles)))
    finally:
        engine.COUPLED = kept


def _work(args):
    r, coupled, via_backend = args
    t0 = time.time()
    try:
        return (run_row_backend if via_backend else run_row)(r, coupled), None, time.time() - t0
    except ValueError as e:
        return None, str(e), time.time() - t0


def check(rows: list[dict], tolerance: float, coupled="auto", jobs: int = 1, out=None, via_backend: bool = False):
    """Our cycles for every row, printed against theirs, then the per-group summary and the last line.
    `tolerance` in percent; `via_backend`: through pimjax's Backend API (`run_row_backend`), else the
    port (`run_row`).  Returns (table, number of rows outside the tolerance or failing, summary)."""
    out = sys.stdout if out is None else out
    args = [(r, coupled, via_backend) for r in rows]
    if jobs > 1:
        from multiprocessing import Pool
        with Pool(jobs) as p:
            res = p.map(_work, args, chunksize=1)
    else:
        res = [_work(a) for a in args]
    print(f"{'backend':7} {'kernel':6} {'shape':15} {'tiling':34} {'theirs':>8} {'ours':>8} {'error':>7}", file=out)
    table, bad = [], 0
    for r, (ours, err_msg, dt) in zip(rows, res):
        g = group_of(r)
        if ours is None:
            print(f"{g[0]:7} {g[1]:6} {g[2]:15} {r['tiling']:34} cannot be run: {err_msg}", file=out)
            bad += 1
            continue
        theirs = int(r["cycles"])
        err = (ours - theirs) / theirs * 100
        outside = abs(err) > tolerance
        bad += outside
        print(f"{g[0]:7} {g[1]:6} {g[2]:15} {r['tiling'].replace(' ', ''):34} {theirs:8d} {ours:8d} {err:+6.2f}%"
              f"  ({dt:.1f} s){'  <-- outside' if outside else ''}", file=out)
        table.append({"backend": g[0], "kernel": g[1], "shape": g[2], "tiling": r["tiling"], "theirs": theirs,
                      "ours": ours, "error_pct": err})
    groups = {}
    for t in table:
        groups.setdefault((t["backend"], t["kernel"], t["shape"]), []).append(t)
    print(f"\n{'backend':7} {'kernel':6} {'shape':15} {'rows':>5} {'median%':>8} {'worst%':>7} {'out':>4} "
          f"{'spearman':>8} same-best", file=out)
    sps, same = [], 0
    for g, ts in groups.items():
        ours = [t["ours"] for t in ts]
        theirs = [t["theirs"] for t in ts]
        err = sorted(abs(t["error_pct"]) for t in ts)
        n = len(err)
        med = err[n // 2] if n % 2 else (err[n // 2 - 1] + err[n // 2]) / 2
        s = spearman(ours, theirs)
        # same best: our fastest tiling is one of the artifact's fastest (ties in their cycles count)
        sb = theirs[min(range(n), key=lambda i: (ours[i], i))] == min(theirs)
        same += sb
        if s == s:
            sps.append(s)
        print(f"{g[0]:7} {g[1]:6} {g[2]:15} {n:5d} {med:8.2f} {err[-1]:7.2f} "
              f"{sum(e > tolerance for e in err):4d} {s:8.3f} {'yes' if sb else 'NO'}", file=out)
    sps.sort()
    msp = (sps[len(sps) // 2] if len(sps) % 2 else (sps[len(sps) // 2 - 1] + sps[len(sps) // 2]) / 2) \
        if sps else float("nan")
    worst = max((abs(t["error_pct"]) for t in table), default=float("nan"))
    summary = {"rows": len(table), "worst": worst, "outside": bad, "median_spearman": msp, "same_best": same,
               "groups": len(groups)}
    print(f"{len(table)} rows, worst |error| {worst:.2f} %, {bad} outside ±{tolerance:g} %; "
          f"median Spearman {msp:.3f}, same best {same}/{len(groups)}", file=out)
    return table, bad, summary


def read_rows(path: str) -> tuple[list[dict], list[str]]:
    """The CSV's rows (stripped strings) and header."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        fields = [h.strip() for h in (reader.fieldnames or [])]
        rows = [{k.strip(): (v or "").strip() for k, v in r.items() if k is not None} for r in reader]
    return rows, fields


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", default=DEFAULT_CSV)
    ap.add_argument("--tolerance", type=float, default=10.0, help="percent (default 10)")
    ap.add_argument("--groups", nargs="*", default=[],
                    help='only these groups: "backend", "backend/kernel" or "backend/kernel/shape" (e.g. attacc/red/4,4096)')
    ap.add_argument("--coupled", choices=["never", "auto", "always"], default="auto",
                    help="auto (default): tilings that wrap channels/banks are simulated with all 16 channels "
                         "(exact); never: the busiest channel alone")
    ap.add_argument("--max-commands", type=int, default=0,
                    help="only rows whose trace_commands is at most this (0: all rows)")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--python-controller", action="store_true",
                    help="the port's Python controller (the readable reference; ~15 min for all rows)")
    ap.add_argument("--via-backend", action="store_true",
                    help='through pimjax: get_backend("attacc" / "hbm-pim", simulator="dcc"), lower, cycles')
    ap.add_argument("--out", default=None,
                    help="the table (default experiments/out/dcc_reference.csv, _backend.csv with --via-backend)")
    args = ap.parse_args(argv)
    global PYTHON_CONTROLLER
    PYTHON_CONTROLLER = args.python_controller
    rows, fields = read_rows(args.csv)
    missing = [c for c in REQUIRED if c not in fields]
    rows = [r for r in rows if selected(r, args.groups)
            and (not args.max_commands or int(r.get("trace_commands") or 0) <= args.max_commands)]
    if missing or not rows:
        print(f"{args.csv}: " + (f"missing column(s) {missing}" if missing else "no rows selected"), file=sys.stderr)
        return 2
    coupled = {"never": False, "auto": "auto", "always": True}[args.coupled]
    table, bad, _ = check(rows, args.tolerance, coupled=coupled, jobs=args.jobs, via_backend=args.via_backend)
    if args.out is None:
        args.out = os.path.join(HERE, "out", "dcc_reference" + ("_backend" if args.via_backend else "") + ".csv")
    if table and args.out:
        os.makedirs(os.path.dirname(args.out), exist_ok=True)
        with open(args.out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(table[0]))
            w.writeheader()
            w.writerows(table)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
