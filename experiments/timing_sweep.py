"""A design-space sweep: how one op's PIM time depends on two DRAM timing
parameters, for the backend's baseline mapping and the tuned draft.

    python experiments/timing_sweep.py [--backend hbm-pim] [--kernel mmtv]
        [--shape 8 8 512 128] [--x tRCDRD 8 40] [--y tCCD_AB 2 8] [--n 24]

Both programs are lowered once and timed under every (x, y) pair of an
n x n grid by `pimjax.sim.cycles.sweep` (one call per program, the native
engine; each grid point is a `Timing` variant of the preset).  Writes
experiments/out/timing_sweep_<backend>_<kernel>.{csv,png} and prints the
corners of the grid and each parameter's sensitivity (cycles per cycle of
the parameter, at the preset value of the other).  The tuned draft is the
one the tuner picks at the preset timing: the sweep shows how far that
choice holds as the hardware changes.
"""
from __future__ import annotations

import argparse
import csv
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))


def grid_variants(timing, x: str, xs, y: str, ys):
    """[n_y * n_x] Timing variants, x fastest; stacked for `sweep`."""
    from pimjax.hw import stack_variants
    return stack_variants([timing.replace(**{x: float(a), y: float(b)}) for b in ys for a in xs])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="hbm-pim", choices=("hbm-pim", "attacc", "newton"))
    ap.add_argument("--kernel", default="mmtv", choices=("gemv", "mmtv", "va", "relu", "red"))
    ap.add_argument("--shape", type=int, nargs="+", default=[8, 8, 512, 128])
    ap.add_argument("--x", nargs=3, default=["tRCDRD", "8", "40"], metavar=("NAME", "LO", "HI"))
    ap.add_argument("--y", nargs=3, default=["tCCD_AB", "2", "8"], metavar=("NAME", "LO", "HI"))
    ap.add_argument("--n", type=int, default=24, help="grid points per axis")
    ap.add_argument("--out", default=os.path.join(HERE, "out"))
    args = ap.parse_args(argv)

    from pimjax.backends import baseline
    from pimjax.hw import get_backend
    from pimjax.hw.core import Timing
    from pimjax.kernels import kernel_op
    from pimjax.lower import lower
    from pimjax.search.tuner import Tuner
    from pimjax.sim.cycles import cycles, sweep

    names = {f for f in Timing.__dataclass_fields__}
    for name, lo, hi in (args.x, args.y):
        if name not in names:
            ap.error(f"unknown timing parameter {name!r}; one of {', '.join(sorted(names))}")
        if not 0 < float(lo) < float(hi):
            ap.error(f"{name}: need 0 < LO < HI, got {lo} {hi}")
    if args.x[0] == args.y[0]:
        ap.error("--x and --y must name two different parameters")
    if args.n < 2:
        ap.error("--n must be at least 2")

    be = get_backend(args.backend)
    op, shapes = kernel_op(args.kernel, args.shape)
    t0 = time.perf_counter()
    choice = Tuner("predict").choose(op, be, shapes)
    base_draft = baseline(op, be)
    if choice is None or base_draft is None:
        print(f"{args.backend} cannot run {args.kernel} {args.shape} on PIM", file=sys.stderr)
        return 2
    progs = {"baseline": lower(op, base_draft, be, shapes), "tuned": choice.program}
    t_tune = time.perf_counter() - t0

    (xn, xlo, xhi), (yn, ylo, yhi) = args.x, args.y
    xs, ys = np.linspace(float(xlo), float(xhi), args.n), np.linspace(float(ylo), float(yhi), args.n)
    variants = grid_variants(be.timing, xn, xs, yn, ys)
    t0 = time.perf_counter()
    rep = sweep(list(progs.values()), variants, be)              # [n * n, 2]
    t_sweep = time.perf_counter() - t0
    total = np.asarray(rep.total_cycles, np.float64).reshape(args.n, args.n, 2)   # [y, x, program]

    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, f"timing_sweep_{args.backend}_{args.kernel}")
    with open(stem + ".csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow([xn, yn, "baseline_cycles", "tuned_cycles", "speedup"])
        for j, yv in enumerate(ys):
            for i, xv in enumerate(xs):
                b, t = total[j, i]
                w.writerow([f"{xv:.4g}", f"{yv:.4g}", f"{b:.1f}", f"{t:.1f}", f"{b / t:.4f}"])

    preset = {k: float(cycles(p, be).total_cycles) for k, p in progs.items()}
    print(f"{args.backend} {args.kernel} {args.shape}: tuned draft {choice.draft} "
          f"({choice.simulated} of {choice.space} drafts simulated, {t_tune:.2f} s)")
    print(f"preset {xn}={float(getattr(be.timing, xn)):g} {yn}={float(getattr(be.timing, yn)):g}: "
          f"baseline {preset['baseline']:,.0f} cycles, tuned {preset['tuned']:,.0f} "
          f"({preset['baseline'] / preset['tuned']:.2f}x)")
    print(f"{args.n * args.n} timing variants x 2 programs swept in {t_sweep:.2f} s\n")
    print(f"{'corner':28} {'baseline':>12} {'tuned':>12} {'speedup':>8}")
    for (j, i) in ((0, 0), (0, -1), (-1, 0), (-1, -1)):
        b, t = total[j, i]
        print(f"{f'{xn}={xs[i]:g}, {yn}={ys[j]:g}':28} {b:12,.0f} {t:12,.0f} {b / t:7.2f}x")
    # sensitivity: the grid line through the point nearest the preset value of the other parameter
    jx = int(np.argmin(np.abs(ys - float(getattr(be.timing, yn)))))
    iy = int(np.argmin(np.abs(xs - float(getattr(be.timing, xn)))))
    for label, line, step in ((xn, total[jx, :, :], xs), (yn, total[:, iy, :], ys)):
        slope = [np.polyfit(step, line[:, k], 1)[0] for k in range(2)]
        print(f"d cycles / d {label}: baseline {slope[0]:,.1f}, tuned {slope[1]:,.1f}")
    try:
        _plot(stem + ".png", total, xs, ys, xn, yn, f"{args.backend} {args.kernel} {args.shape}")
        print(f"\nwrote {stem}.csv and {stem}.png")
    except ImportError:
        print(f"\nwrote {stem}.csv (matplotlib not installed: no plot)")
    return 0


def _plot(path, total, xs, ys, xn, yn, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), constrained_layout=True)
    extent = (xs[0], xs[-1], ys[0], ys[-1])
    panels = ((total[..., 0], "baseline, cycles", "viridis"), (total[..., 1], "tuned, cycles", "viridis"),
              (total[..., 0] / total[..., 1], "speed-up of the tuned draft", "magma"))
    for ax, (z, label, cmap) in zip(axes, panels):
        im = ax.imshow(z, origin="lower", aspect="auto", extent=extent, cmap=cmap)
        ax.set_xlabel(f"{xn} (cycles)")
        ax.set_ylabel(f"{yn} (cycles)")
        ax.set_title(label)
        fig.colorbar(im, ax=ax)
    fig.suptitle(title)
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
