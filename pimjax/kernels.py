"""The DCC / ATiM kernel set as jnp functions, by name and shape.

    graph = kernel_graph("gemv", [4096, 4096])      # y = W @ x, W 4096 x 4096
    op = kernel_op("mmtv", [8, 40, 2048, 128])      # s = einsum(bhd, bhnd -> bhn)

Shapes are the leading sizes of the kernel's arguments (the convention of
`experiments/predictor_accuracy.py --cases`):

=========  ========================  =======================================
kernel     shape                     function
=========  ========================  =======================================
gemv       [M, N]                    y[M] = W[M, N] @ x[N]
mtv        [M, N]                    same as gemv (ATiM's name)
gemm       [M, K, N]                 C = A[M, K] @ B[K, N]
red        [E] or [B, E]             sum over the last axis
va         [E] or [B, E]             a + b
geva       [E]                       alpha * a + beta * b
relu       [E] or [B, E]             max(a, 0)
mmtv       [B, H, L, D]              y[b,h,n] = sum_d A[b,h,n,d] x[b,h,d]
attn       [B, H, L, D]              softmax(q K^T / sqrt(D)) V per head
ttv        [I, J, K]                 y[i,j] = sum_k A[i,j,k] x[k]
conv       [H, W, C, F, K]           NHWC 'SAME' convolution, batch 1, K x K
=========  ========================  =======================================

This is the one kernel catalogue: the cost model's training and held-out
cases (`pimjax.costmodel.kernels`), the demo and the benchmarks trace these
functions.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .trace.frontend import make_graph
from .trace.ir import PimGraph, PimOp


def _attention(q, K, V):
    # the scale as a constant of q's dtype (sqrt rounded once from float64: the same value as sqrt in q's dtype)
    s = jnp.einsum("bhd,bhnd->bhn", q, K) / q.dtype.type(np.sqrt(q.shape[-1]))
    p = jax.nn.softmax(s, axis=-1)
    return jnp.einsum("bhn,bhnd->bhd", p, V)


def _conv(x, k):
    return jax.lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def arg_shapes(kernel: str, shape) -> list[tuple]:
    """The argument shapes of `kernel` at `shape` (the table above)."""
    s = [int(v) for v in shape]
    if kernel in ("gemv", "mtv"):
        m, n = s
        return [(m, n), (n,)]
    if kernel == "gemm":
        m, k, n = s
        return [(m, k), (k, n)]
    if kernel in ("red", "relu"):
        return [tuple(s)]
    if kernel == "va":
        return [tuple(s), tuple(s)]
    if kernel == "geva":
        return [(), tuple(s), (), tuple(s)]
    if kernel == "mmtv":
        b, h, l, d = s
        return [(b, h, l, d), (b, h, d)]
    if kernel == "attn":
        b, h, l, d = s
        return [(b, h, d), (b, h, l, d), (b, h, l, d)]
    if kernel == "ttv":
        i, j, k = s
        return [(i, j, k), (k,)]
    if kernel == "conv":
        h, w, c, f, k = s
        return [(1, h, w, c), (k, k, c, f)]
    raise ValueError(f"unknown kernel {kernel!r}; expected one of {sorted(FUNCTIONS)}")


FUNCTIONS = {
    "gemv": lambda W, x: W @ x,
    "mtv": lambda W, x: W @ x,
    "gemm": lambda A, B: A @ B,
    "red": lambda a: jnp.sum(a, axis=-1, dtype=a.dtype),   # no float32 upcast of fp16
    "va": lambda a, b: a + b,
    "geva": lambda alpha, a, beta, b: alpha * a + beta * b,
    "relu": lambda a: jnp.maximum(a, jnp.zeros((), a.dtype)),
    "mmtv": lambda A, x: jnp.einsum("bhnd,bhd->bhn", A, x),
    "attn": _attention,
    "ttv": lambda A, x: jnp.einsum("ijk,k->ij", A, x),
    "conv": _conv,
}


def kernel_args(kernel: str, shape, dtype=jnp.float16) -> list:
    """ShapeDtypeStructs of the kernel's arguments."""
    return [jax.ShapeDtypeStruct(s, dtype) for s in arg_shapes(kernel, shape)]


def kernel_graph(kernel: str, shape, dtype=jnp.float16) -> PimGraph:
    """The PimGraph of a named kernel at `shape`."""
    return make_graph(FUNCTIONS[kernel], *kernel_args(kernel, shape, dtype))


def kernel_op(kernel: str, shape, dtype=jnp.float16) -> tuple[PimOp, dict]:
    """(the kernel's PIM op, value shapes) for single-op kernels (not attn)."""
    graph = kernel_graph(kernel, shape, dtype)
    ops = [op for op in graph.ops if op.kind in ("contraction", "reduction", "elementwise")]
    if len(ops) != 1:
        raise ValueError(f"{kernel} traces to {len(ops)} PIM ops; use kernel_graph")
    return ops[0], {i: v.shape for i, v in enumerate(graph.values)}
