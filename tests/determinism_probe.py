"""Print one digest per backend of a small compile -- the chosen drafts, their command programs
and their simulated cycles -- for `tests/test_determinism.py`, which runs it in fresh processes
under different PYTHONHASHSEEDs (python -m tests.determinism_probe)."""
from __future__ import annotations

import hashlib
import sys

import numpy as np

BACKENDS = ("hbm-pim", "attacc", "newton", "upmem")


def _feed(h, value) -> None:
    """Every leaf of a pytree (records, reports) into `h`, in a fixed order."""
    import jax
    leaves, tree = jax.tree_util.tree_flatten(value)
    h.update(str(tree).encode())
    for leaf in leaves:
        a = np.asarray(leaf)
        h.update(f"{a.dtype}{a.shape}".encode() + np.ascontiguousarray(a).tobytes())


def digest(backend: str) -> tuple[str, int]:
    """(hex digest, PIM ops) of a GEMV + bias + ReLU and a row reduction compiled for `backend`."""
    import jax
    import jax.numpy as jnp

    from pimjax import pim_jit
    rng = np.random.default_rng(0)
    dt = jnp.int32 if backend == "upmem" else jnp.float16        # UPMEM's DPUs compute integers
    W = jnp.asarray(rng.integers(-8, 8, (96, 80)), dt)
    x = jnp.asarray(rng.integers(-8, 8, 80), dt)
    b = jnp.asarray(rng.integers(-8, 8, 96), dt)

    def f(W, x, b):
        return jax.nn.relu(W @ x + b), jnp.sum(W * W, axis=1)
    compiled = pim_jit(f, backend=backend, placement="prefer_pim").lower(W, x, b).compile()
    h = hashlib.sha256()
    pim = 0
    for p in compiled.plans:
        h.update(f"{p.index}:{p.placement}:{p.draft!r}".encode())
        if p.program is not None:
            pim += 1
            prog = p.program
            h.update(f"{prog.groups}:{prog.cores}:{prog.readback!r}".encode())
            for lay in prog.layouts:                # field by field: positions may be a lazy table
                h.update(f"{lay.name}:{lay.operand}:{lay.vars}:{lay.box}:{lay.index_map}:{lay.shape}:"
                         f"{lay.bands}:{lay.space}".encode())
                for a in (lay.start, lay.length, lay.positions):
                    h.update(np.ascontiguousarray(np.asarray(a)).tobytes())
            _feed(h, prog.commands)
            for a in prog.host_data:
                h.update(np.ascontiguousarray(a).tobytes())
        if p.choice is not None:
            _feed(h, p.choice.report)
    h.update(repr(sorted((k, v) for k, v in compiled.cost_analysis().items() if k != "ops")).encode())
    return h.hexdigest()[:16], pim


if __name__ == "__main__":
    for name in sys.argv[1:] or BACKENDS:
        d, n = digest(name)
        print(name, n, d, flush=True)
