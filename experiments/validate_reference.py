"""Check `sim.cycles` against figures measured on trusted PIM simulators.

    python experiments/validate_reference.py --csv ../shared/reference/hbm-pim.csv [--tolerance 0.10]

Reads a reference CSV (`backend,variant,kernel,shape,channels,refresh,metric,
cycles`; a file of PIMFlow's layer rows, `layer,H,W,C,F,K,stride,config,...`,
goes to `experiments/pimflow_reference.py`), builds each row's configuration (channel count, refresh on/off)
and the reference simulator's own mapping as a Draft, computes our cycles
and prints ours vs. theirs with the relative error per row.  Exits non-zero
when any row is outside the tolerance.

Kernels: `gemv` (shape `MxN`: M outputs x N inputs), elementwise `add`,
`mul`, `relu` (shape = element count), `attention` (`h{heads}_d{dim}_L{len}`,
AttAcc).  Metrics: `pim` (frame + kernel, operands resident), `readback`
(the host reading the partial results, timed as a run of its own like the
reference's: `readback_run`), `nonpim` (the host streaming all
operands from the same memory, no PIM).  A row that cannot be computed (a
bad field, an unknown kernel) is reported with its line and counts as a
failure; an empty file or a missing column exits with status 2.
"""
from __future__ import annotations

import argparse
import csv
import sys

import jax
import jax.numpy as jnp

from pimjax.backends import baseline
from pimjax.hw import get_backend
from pimjax.lower import lower
from pimjax.lower.host_stream import host_stream_program
from pimjax.sim.cycles import cycles
from pimjax.trace.frontend import make_graph

KERNELS = {
    "gemv": lambda W, x: W @ x,
    "add": lambda a, b: a + b,
    "mul": lambda a, b: a * b,
    "relu": lambda a: jnp.maximum(a, jnp.zeros((), a.dtype)),
}


def kernel_op(kernel: str, shape: str):
    """(PimOp, graph) of a reference kernel with its CSV shape (fp16)."""
    f16 = jnp.float16
    if kernel == "gemv":
        m, n = (int(v) for v in shape.lower().split("x"))
        args = (jax.ShapeDtypeStruct((m, n), f16), jax.ShapeDtypeStruct((n,), f16))
    elif kernel in ("add", "mul"):
        e = int(shape)
        args = (jax.ShapeDtypeStruct((e,), f16),) * 2
    elif kernel == "relu":
        args = (jax.ShapeDtypeStruct((int(shape),), f16),)
    else:
        raise ValueError(f"unknown kernel {kernel!r}; expected one of {sorted(KERNELS)} or attention")
    graph = make_graph(KERNELS[kernel], *args)
    pim_ops = [op for op in graph.ops if op.kind != "host"]
    if len(pim_ops) != 1:
        raise ValueError(f"{kernel} traced to {len(pim_ops)} ops")
    return pim_ops[0], graph


def backend_for(row: dict):
    name = row["backend"]
    channels = int(row["channels"])
    if name == "hbm-pim":
        return get_backend("hbm-pim", channels=channels)
    raise ValueError(f"no reference configuration for backend {name!r}; expected hbm-pim or attacc")


COLUMNS = ("backend", "variant", "kernel", "shape", "channels", "refresh", "metric", "cycles")
METRICS = ("pim", "readback", "nonpim")
REFRESH = {"yes": True, "true": True, "1": True, "on": True, "no": False, "false": False, "0": False, "off": False}


def _stripped(row: dict) -> dict:
    """A csv row with its names and values stripped (a short row reads None)."""
    return {(k or "").strip(): (v or "").strip() if isinstance(v, str) or v is None else v
            for k, v in row.items()}


def check_row(row: dict) -> dict:
    """The row with its fields stripped and checked (ValueError naming the
    field otherwise): every column present, a known metric and refresh
    value, a positive channel count and reference cycle count."""
    row = _stripped(row)
    missing = [c for c in COLUMNS if not row.get(c)]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}")
    if row["metric"] not in METRICS:
        raise ValueError(f"metric {row['metric']!r} not in {METRICS}")
    if row["refresh"].lower() not in REFRESH:
        raise ValueError(f"refresh {row['refresh']!r} not one of {sorted(REFRESH)}")
    if not row["channels"].isdigit() or int(row["channels"]) < 1:
        raise ValueError(f"channels {row['channels']!r} is not a positive integer")
    try:
        theirs = float(row["cycles"])
    except ValueError:
        raise ValueError(f"cycles {row['cycles']!r} is not a number") from None
    if not theirs > 0:
        raise ValueError(f"cycles {row['cycles']!r} must be positive")
    if row["backend"] == "hbm-pim" and row["variant"] != "default":
        raise ValueError(f"hbm-pim has one variant, 'default'; got {row['variant']!r}")
    return row


def readback_run(program):
    """The program with only its read-back records (the others become
    padding, n = 0): the host's read-back timed as a run of its own, from
    idle banks and the first refresh deadline.  The reference simulators
    measure the read-back that way (the Samsung harness runs the
    `readResult` transactions in a fresh simulator, so a 16 384-output
    read-back of 565 cycles meets no refresh), while `cycles` times it after
    the kernel, where a refresh deadline may fall inside it."""
    import dataclasses

    import numpy as np

    from pimjax.lower.program import Phase
    c = program.commands
    keep = np.asarray(c.phase) == int(Phase.READBACK)
    n = np.where(keep, np.asarray(c.n), 0).astype(np.asarray(c.n).dtype)
    return dataclasses.replace(program, commands=dataclasses.replace(c, n=n))


def our_cycles(row: dict) -> float:
    """Our cycles for one CSV row (in the reference's clock)."""
    row = check_row(row)
    refresh = REFRESH[row["refresh"].lower()]
    metric = row["metric"]
    if row["backend"] == "attacc":             # AttAcc builds its simulator's own sequences
        from pimjax.backends.attacc.reference import reference_program
        program, be = reference_program(row)
        if metric == "nonpim":                 # the host streams the same operands, no PIM
            return float(cycles(host_stream_program(program.op, be), be, refresh=refresh).total_cycles)
        if metric == "readback":
            return float(cycles(readback_run(program), be, refresh=refresh).readback)
        return float(cycles(program, be, refresh=refresh).kernel_cycles)
    be = backend_for(row)
    op, graph = kernel_op(row["kernel"], row["shape"])
    shapes = {i: v.shape for i, v in enumerate(graph.values)}
    if metric == "nonpim":
        rep = cycles(host_stream_program(op, be, shapes), be, refresh=refresh)
        return float(rep.total_cycles)
    draft = baseline(op, be)
    resident = tuple(k for k in range(len(op.operands)) if op.operands[k].index_map)
    program = lower(op, draft, be, shapes, resident=resident)
    if metric == "readback":              # a run of its own, as the reference measures it
        return float(cycles(readback_run(program), be, refresh=refresh).readback)
    return float(cycles(program, be, refresh=refresh).kernel_cycles)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", required=True, help="reference CSV (see ../shared/reference/*.csv)")
    ap.add_argument("--tolerance", type=float, default=0.10, help="max relative error per row")
    args = ap.parse_args(argv)
    if not 0 <= args.tolerance < 1:
        ap.error(f"--tolerance {args.tolerance} is a relative error: 0 <= tolerance < 1")
    try:
        with open(args.csv, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f, skipinitialspace=True)
            header = [c.strip() for c in (reader.fieldnames or [])]
            rows = list(reader)
    except UnicodeDecodeError as err:
        print(f"{args.csv}: not UTF-8 text ({err.reason}: byte 0x{err.object[err.start]:02x}); "
              "save the CSV as UTF-8", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"{args.csv}: cannot be read ({err.strerror or err})", file=sys.stderr)
        return 2
    except csv.Error as err:
        print(f"{args.csv}: not a CSV file ({err})", file=sys.stderr)
        return 2
    if {"layer", "config", "cycles"} <= set(header) and "backend" not in header:
        # PIMFlow's own simulator's layer rows (`../shared/reference/pimflow.csv`): their own script
        from experiments import pimflow_reference
        return pimflow_reference.main(["--csv", args.csv, "--tolerance", str(args.tolerance)])
    absent = [c for c in COLUMNS if c not in header]
    if absent:
        print(f"{args.csv}: no column(s) {', '.join(absent)}; the header must name {','.join(COLUMNS)}",
              file=sys.stderr)
        return 2
    if not rows:
        print(f"{args.csv}: no rows to validate", file=sys.stderr)
        return 2
    print(f"{'backend':8} {'variant':10} {'kernel':10} {'shape':18} {'ch':>3} {'ref':>4} "
          f"{'metric':9} {'theirs':>9} {'ours':>9} {'error':>7}")
    worst = 0.0
    failed = errors = 0
    for line, row in enumerate(rows, start=2):          # line 1 is the header
        row = _stripped(row)
        label = (f"{row.get('backend', ''):8} {row.get('variant', ''):10} {row.get('kernel', ''):10} "
                 f"{row.get('shape', ''):18} {row.get('channels', ''):>3} {row.get('refresh', ''):>4} "
                 f"{row.get('metric', ''):9}")
        try:
            ours = our_cycles(row)
        except Exception as err:  # noqa: BLE001 - one bad row is reported, the others still run
            errors += 1
            print(f"{label} line {line}: {type(err).__name__}: {err}")
            continue
        theirs = float(row["cycles"])
        err = (ours - theirs) / theirs
        worst = max(worst, abs(err))
        bad = abs(err) > args.tolerance
        failed += bad
        print(f"{label} {theirs:9.0f} {ours:9.0f} {err:+7.1%}{'  <-- outside tolerance' if bad else ''}")
    print(f"\n{len(rows)} rows, worst |error| {worst:.1%}, {failed} outside ±{args.tolerance:.0%}"
          + (f", {errors} could not be computed" if errors else ""))
    return 1 if failed or errors else 0


if __name__ == "__main__":
    sys.exit(main())
