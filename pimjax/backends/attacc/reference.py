"""The AttAcc simulator's own programs: one `attacc.csv` row lowered with
the reference's mapping (the AttAcc baseline draft), for validating the
cycle model against that simulator (`experiments/attacc_reference.py`,
`experiments/validate_reference.py`)."""
from __future__ import annotations

from ...hw.core import Backend
from ...lower.program import Program
from .attention import lower_attention
from .lower import lower_attacc


def _attention_fn(q, K, V):
    import jax
    import jax.numpy as jnp
    s = jnp.einsum("hd,hnd->hn", q, K) / jnp.sqrt(jnp.float32(q.shape[-1]))
    return jnp.einsum("hn,hnd->hd", jax.nn.softmax(s, axis=-1), V)


def reference_program(row: dict) -> tuple[Program, Backend]:
    """The program and backend of one `attacc.csv` row, lowered with the
    reference's own mapping (the attacc baseline draft), operands resident.

    row: {"variant": "bank-pc" | ..., "kernel": "attention" | "gemv",
          "shape": "h{heads}_d{dim}_L{length}" | "{M}x{N}",
          "channels": int, "refresh": "yes" | "no", ...}.
    The PIM figure to compare is `sim.cycles.cycles(program, backend).kernel_cycles`;
    with refresh "no" the backend's refresh interval is set beyond any run.
    An attention program lays every head's K / V on rows of its own and
    copies the trace generator's pair loop, whose second head runs the
    first head's context MACs (`trace_generator_pairs`): its timing is the
    reference's, its values are not the attention's for those heads.

    >>> prog, be = reference_program({"variant": "bank-pc", "kernel": "gemv", "shape": "256x256",
    ...                               "channels": 16, "refresh": "yes"})   # doctest: +SKIP
    """
    import re

    import jax
    import jax.numpy as jnp

    from ...hw import get_backend
    from ...lower.patterns import match_attention
    from ...trace import make_graph
    from .baseline import attacc_baseline as baseline

    backend = get_backend("attacc", variant=str(row["variant"]), channels=int(row["channels"]))
    if str(row.get("refresh", "yes")).lower() in ("no", "false", "0"):
        backend = backend.replace(timing=backend.timing.replace(tREFI=1.0e9, tREF0=0.0))
    kernel, shape = str(row["kernel"]), str(row["shape"])
    f32 = jnp.float32
    if kernel == "attention":
        m = re.fullmatch(r"h(\d+)_d(\d+)_L(\d+)", shape)
        if m is None:
            raise ValueError(f"attention shape {shape!r} is not h{{heads}}_d{{dim}}_L{{length}}")
        H, D, L = map(int, m.groups())
        g = make_graph(_attention_fn, jax.ShapeDtypeStruct((H, D), f32), jax.ShapeDtypeStruct((H, L, D), f32),
                       jax.ShapeDtypeStruct((H, L, D), f32))
        block = [g.ops[i] for i in match_attention(g)[0]]
        shapes = {i: v.shape for i, v in enumerate(g.values)}
        draft = baseline(block[0], backend)
        # the trace generator gives every head its own K / V partition (rows of its own)
        return lower_attention(block, draft, backend, shapes, resident=(1, 2), head_rows=True,
                               trace_generator_pairs=True), backend
    if kernel == "gemv":
        m = re.fullmatch(r"(\d+)x(\d+)", shape)
        if m is None:
            raise ValueError(f"gemv shape {shape!r} is not MxN")
        M, N = map(int, m.groups())
        g = make_graph(lambda W, x: W @ x, jax.ShapeDtypeStruct((M, N), f32), jax.ShapeDtypeStruct((N,), f32))
        op = g.ops[0]
        shapes = {i: v.shape for i, v in enumerate(g.values)}
        return lower_attacc(op, baseline(op, backend), backend, shapes, resident=(0,)), backend
    raise ValueError(f"unknown attacc.csv kernel {kernel!r}")
