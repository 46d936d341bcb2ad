"""A corpus of small jnp functions shared by the trace, partition and pim_jit
tests: `CORPUS` is a list of `(name, fn, example_args_factory)`; the factory
returns a fresh tuple of float32 numpy arrays (deterministic per name).

The functions cover the PIM workloads of the papers (PrIM/CINM kernels: GEMV,
VA, GEVA, RED, TTV, MMTV, CINM's contractions; attention products; convs of
PIMFlow), typical model blocks (MLP, softmax, layernorm, a GPT decode step)
and layout / host-only primitives.  Sizes are small so every test is fast.
"""
from __future__ import annotations

import zlib

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


def _arrays(name: str, *shapes, dtype=np.float32):
    rng = _rng(name)
    return tuple(rng.standard_normal(s).astype(dtype) for s in shapes)


# --------------------------------------------------------------------------
# PrIM / CINM kernels
# --------------------------------------------------------------------------
def gemv(W, x):
    return W @ x


def gemv_bias_relu(W, x, b):
    return jax.nn.relu(W @ x + b)


def gemm(A, B):
    return A @ B


def batched_matmul(A, B):
    return jnp.matmul(A, B)


def attn_scores(q, K):
    return jnp.einsum("bhd,bhnd->bhn", q, K)


def attn_context(p, V):
    return jnp.einsum("bhn,bhnd->bhd", p, V)


def ttv(A, x):
    return jnp.einsum("ijk,k->ij", A, x)


def mmtv(A, x):
    return jnp.einsum("bik,bk->bi", A, x)


def va(a, b):
    return a + b


def geva(a, x, b, y):
    return a * x + b * y


def red_vector(x):
    return jnp.sum(x)


def red_rows(A):
    return jnp.sum(A, axis=1)


def max_reduce(A):
    return jnp.max(A, axis=0)


def mean_rows(A):
    return jnp.mean(A, axis=-1)


def cinm_abcd(A, B):
    return jnp.einsum("aebf,dfce->abcd", A, B)


def cinm_ab(A, B):
    return jnp.einsum("acd,dbc->ab", A, B)


def cinm_abc(A, B):
    return jnp.einsum("acd,db->abc", A, B)


def bf16_matmul(A, B):
    return jnp.dot(A.astype(jnp.bfloat16), B.astype(jnp.bfloat16),
                   preferred_element_type=jnp.float32)


# --------------------------------------------------------------------------
# model blocks
# --------------------------------------------------------------------------
def softmax(x):
    return jax.nn.softmax(x, axis=-1)


def layernorm(x, g, b):
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), axis=-1, keepdims=True)
    return (x - mu) * lax.rsqrt(var + 1e-5) * g[None, :] + b[None, :]


def mlp2(params, x):
    h = jax.nn.relu(params["w1"] @ x + params["b1"])
    return params["w2"] @ h + params["b2"]


def gelu_mlp(W, x, b):
    return jax.nn.gelu(W @ x + b, approximate=True)


def leaky_relu(x):
    return jnp.where(x > 0, x, 0.1 * x)


@jax.jit
def _scaled(x, s):
    return x * s


@jax.checkpoint
def _remat_tanh(x):
    return jnp.tanh(x)


def nested_calls(W, x):
    return _remat_tanh(_scaled(W @ x, jnp.float32(0.5)))


def gpt_decode_attention(x, Wq, Wk, Wv, Wo, K, V):
    """One decode step of multi-head attention over a KV cache.

    x: [d]; W*: [d, d]; K, V: [n, H, dh] past keys/values (d = H * dh)."""
    n, H, dh = K.shape
    q = (Wq @ x).reshape(H, dh)
    k_new = (Wk @ x).reshape(1, H, dh)
    v_new = (Wv @ x).reshape(1, H, dh)
    Kc = jnp.concatenate([K, k_new], axis=0)
    Vc = jnp.concatenate([V, v_new], axis=0)
    s = jnp.einsum("hd,nhd->hn", q, Kc) / jnp.sqrt(jnp.float32(dh))
    p = jax.nn.softmax(s, axis=-1)
    ctx = jnp.einsum("hn,nhd->hd", p, Vc)
    return Wo @ ctx.reshape(H * dh) + x


# --------------------------------------------------------------------------
# convolutions
# --------------------------------------------------------------------------
def conv1x1_nhwc(x, k):
    return lax.conv_general_dilated(x, k, (1, 1), "VALID",
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"))


def conv3x3_nhwc(x, k):
    return lax.conv_general_dilated(x, k, (1, 1), "SAME",
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"))


def conv3x3_nchw(x, k):
    return lax.conv_general_dilated(x, k, (1, 1), "SAME",
                                    dimension_numbers=("NCHW", "OIHW", "NCHW"))


def depthwise_conv(x, k):
    return lax.conv_general_dilated(x, k, (1, 1), "SAME", feature_group_count=x.shape[-1],
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"))


def grouped_conv_relu(x, k, b):
    y = lax.conv_general_dilated(x, k, (1, 1), "VALID", feature_group_count=2,
                                 dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return jax.nn.relu(y + b[None, None, None, :])


def strided_dilated_conv(x, k):
    return lax.conv_general_dilated(x, k, (2, 2), ((2, 1), (1, 2)), rhs_dilation=(2, 2),
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"))


def transposed_conv(x, k):
    """lhs dilation (a transposed convolution) becomes interior padding."""
    return lax.conv_general_dilated(x, k, (1, 1), ((1, 1), (1, 1)), lhs_dilation=(2, 2),
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"))


# --------------------------------------------------------------------------
# layout and host-only
# --------------------------------------------------------------------------
def pad_fn(x):
    return jnp.pad(x, ((1, 2), (0, 3)), constant_values=1.5)


def interior_pad(x):
    return lax.pad(x, jnp.float32(0), ((1, 0, 1), (0, 2, 2)))


def concat_fn(a, b):
    return jnp.concatenate([a, b, a], axis=1)


def slice_fn(x):
    return x[1:7:2, ::3]


def reshape_fn(x):
    return x.reshape(4, 6) * 2.0


def transpose_fn(x):
    return jnp.transpose(x, (2, 0, 1))


def flip_fn(x):
    return jnp.flip(x, axis=0) + x


def sort_fn(x):
    return jnp.sort(x) * 2.0


def argmax_fn(A):
    return jnp.argmax(A, axis=1)


CORPUS = [
    ("gemv", gemv, lambda: _arrays("gemv", (64, 32), (32,))),
    ("gemv_bias_relu", gemv_bias_relu, lambda: _arrays("gemv_bias_relu", (64, 32), (32,), (64,))),
    ("gemm", gemm, lambda: _arrays("gemm", (16, 24), (24, 8))),
    ("batched_matmul", batched_matmul, lambda: _arrays("bmm", (4, 8, 16), (4, 16, 8))),
    ("attn_scores", attn_scores, lambda: _arrays("scores", (2, 4, 8), (2, 4, 16, 8))),
    ("attn_context", attn_context, lambda: _arrays("context", (2, 4, 16), (2, 4, 16, 8))),
    ("ttv", ttv, lambda: _arrays("ttv", (4, 5, 6), (6,))),
    ("mmtv", mmtv, lambda: _arrays("mmtv", (4, 8, 16), (4, 16))),
    ("va", va, lambda: _arrays("va", (128,), (128,))),
    ("geva", geva, lambda: _arrays("geva", (), (128,), (), (128,))),
    ("red_vector", red_vector, lambda: _arrays("red_vector", (256,))),
    ("red_rows", red_rows, lambda: _arrays("red_rows", (16, 32))),
    ("max_reduce", max_reduce, lambda: _arrays("max_reduce", (16, 32))),
    ("mean_rows", mean_rows, lambda: _arrays("mean_rows", (8, 32))),
    ("cinm_abcd", cinm_abcd, lambda: _arrays("cinm_abcd", (2, 3, 4, 5), (6, 5, 7, 3))),
    ("cinm_ab", cinm_ab, lambda: _arrays("cinm_ab", (4, 5, 6), (6, 7, 5))),
    ("cinm_abc", cinm_abc, lambda: _arrays("cinm_abc", (4, 5, 6), (6, 7))),
    ("bf16_matmul", bf16_matmul, lambda: _arrays("bf16", (8, 16), (16, 4))),
    ("softmax", softmax, lambda: _arrays("softmax", (4, 16))),
    ("layernorm", layernorm, lambda: _arrays("layernorm", (4, 32), (32,), (32,))),
    ("mlp2", mlp2, lambda: ({k: v for k, v in zip(("w1", "b1", "w2", "b2"), _arrays(
        "mlp2", (32, 16), (32,), (8, 32), (8,)))},) + _arrays("mlp2x", (16,))),
    ("gelu_mlp", gelu_mlp, lambda: _arrays("gelu_mlp", (32, 16), (16,), (32,))),
    ("leaky_relu", leaky_relu, lambda: _arrays("leaky", (8, 8))),
    ("nested_calls", nested_calls, lambda: _arrays("nested", (8, 4), (4,))),
    ("gpt_decode_attention", gpt_decode_attention, lambda: _arrays(
        "gpt", (32,), (32, 32), (32, 32), (32, 32), (32, 32), (15, 4, 8), (15, 4, 8))),
    ("conv1x1_nhwc", conv1x1_nhwc, lambda: _arrays("conv1x1", (2, 5, 5, 8), (1, 1, 8, 16))),
    ("conv3x3_nhwc", conv3x3_nhwc, lambda: _arrays("conv3x3", (1, 6, 6, 3), (3, 3, 3, 4))),
    ("conv3x3_nchw", conv3x3_nchw, lambda: _arrays("conv3x3c", (1, 3, 6, 6), (4, 3, 3, 3))),
    ("depthwise_conv", depthwise_conv, lambda: _arrays("dwconv", (1, 6, 6, 4), (3, 3, 1, 4))),
    ("grouped_conv_relu", grouped_conv_relu,
     lambda: _arrays("gconv", (1, 5, 5, 4), (3, 3, 2, 6), (6,))),
    ("strided_dilated_conv", strided_dilated_conv,
     lambda: _arrays("sdconv", (1, 9, 9, 2), (3, 3, 2, 3))),
    ("transposed_conv", transposed_conv, lambda: _arrays("tconv", (1, 4, 4, 2), (3, 3, 2, 3))),
    ("pad", pad_fn, lambda: _arrays("pad", (3, 4))),
    ("interior_pad", interior_pad, lambda: _arrays("ipad", (3, 4))),
    ("concat", concat_fn, lambda: _arrays("concat", (3, 2), (3, 4))),
    ("slice", slice_fn, lambda: _arrays("slice", (8, 9))),
    ("reshape", reshape_fn, lambda: _arrays("reshape", (2, 3, 4))),
    ("transpose", transpose_fn, lambda: _arrays("transpose", (2, 3, 4))),
    ("flip", flip_fn, lambda: _arrays("flip", (5, 3))),
    ("sort", sort_fn, lambda: _arrays("sort", (16,))),
    ("argmax", argmax_fn, lambda: _arrays("argmax", (6, 10))),
]

NAMES = [name for name, _, _ in CORPUS]
