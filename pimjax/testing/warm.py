"""Compile pimjax's numba kernels into their on-disk cache before a test run.

pimjax's compiled loops (`numba.njit(cache=True)`: the record emitters, the native cycle engines, the
value interpreters, Newton's walk, DCC's controller) compile on first call and keep the machine code in
`__pycache__`.  On a clean clone nothing is cached, and pytest-xdist's workers each compile whatever
their first test touches: the same functions twice, at the same time, and a test that happens to be
first pays a minute (measured 2026-12-07, two busy cores: `tests/backends/newton` 153 s with a cold
cache, 91 s with a warm one).  `make test` runs this first, split over as many processes as it has
workers (`--part i --of n`), so each function is compiled once and the workers read it from disk.

    python -m pimjax.testing.warm --part 0 --of 2

Each part compiles, runs and times a small GEMV, an elementwise add + ReLU and a row reduction on its
share of `CONFIGS` (the presets and the named simulator configurations the tests use).  A failure is
printed and the part goes on: the test that hits the same error reports it properly.
"""
from __future__ import annotations

import argparse
import time
import traceback
import warnings

# (preset, options) of every configuration whose kernels differ: the default families, Newton's
# PIMFlow configurations and its fork's controller, and DCC's simulator for AttAcc and HBM-PIM
CONFIGS = (          # interleaved so that `--of 2` splits the compile time about evenly (Newton's is most)
    ("newton", {}),
    ("hbm-pim", {}),
    ("newton", {"config": "newton+gw"}),
    ("attacc", {}),
    ("newton", {"config": "newton++", "simulator": "pimflow"}),
    ("attacc", {"simulator": "dcc"}),
    ("upmem", {"dpus": 64}),
    ("hbm-pim", {"simulator": "dcc"}),
)


def _backend(preset: str, options: dict):
    from pimjax.hw.presets import get_backend, newton_config
    options = dict(options)
    config = options.pop("config", None)
    return newton_config(config, **options) if config else get_backend(preset, **options)


def warm_one(preset: str, options: dict) -> float:
    """Compile and run three small programs on one configuration; seconds taken."""
    import jax.numpy as jnp
    import numpy as np

    from pimjax.api import pim_jit
    from pimjax.errors import PimCompileError, PimTraceError
    t0 = time.perf_counter()
    be = _backend(preset, options)
    rng = np.random.default_rng(0)
    W = jnp.asarray(rng.standard_normal((256, 512)), jnp.float16)
    x = jnp.asarray(rng.standard_normal((512,)), jnp.float16)
    a = jnp.asarray(rng.standard_normal((4, 1024)), jnp.float16)
    programs = [(lambda W, x: W @ x, (W, x)),
                (lambda a, b: jnp.maximum(a + b, 0), (a, a)),
                (lambda a: jnp.sum(a, axis=-1), (a,))]
    for fn, args in programs:
        try:
            f = pim_jit(fn, backend=be, placement="prefer_pim")
            np.asarray(f(*args))
            f.lower(*args).compile().cost_analysis()
        except (PimCompileError, PimTraceError):
            pass                          # a kernel this configuration refuses (DCC's has no reduction on AttAcc)
        except Exception:                 # noqa: BLE001 -- said here; the test that hits it fails properly
            traceback.print_exc()
    return time.perf_counter() - t0


def main(argv=None) -> int:
    """Warm part `--part` of `--of` of `CONFIGS`; prints one line per configuration."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", type=int, default=0)
    ap.add_argument("--of", type=int, default=1)
    args = ap.parse_args(argv)
    if not 0 <= args.part < args.of:
        ap.error(f"--part must be in 0 .. {args.of - 1}")
    warnings.simplefilter("ignore")
    for preset, options in CONFIGS[args.part::args.of]:
        s = warm_one(preset, options)
        print(f"warm: {preset} {options or ''} {s:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
