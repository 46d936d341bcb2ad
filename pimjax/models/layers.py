"""One decoder layer of a `ModelConfig` in plain jnp, for one decode step.

    layer = make_layer(get_config("llama2-7b"))
    y, k_cache, v_cache = layer(params, x, k_cache, v_cache, pos)

Written the way model code is: `params` a dict first, the new token's key and
value written into the cache with `lax.dynamic_update_slice` at `pos`, then
attention over the cache.  Shapes (fp16 throughout; norms and RoPE angles in
float32, as the reference implementations upcast them):

    params   dict of [out, in] weight matrices, [n] biases / norm scales
             (`param_shapes`; which phase each reads: `PARAM_PHASES`)
    x        [B, d_model]                 the token's hidden state, batch B
    k_cache  [B, n_kv_heads, L, head_dim] L = tokens so far, this one included
    v_cache  [B, n_kv_heads, L, head_dim]
    pos      int32 scalar = L - 1: where this token's key / value go (and its
             RoPE position)

`append=False` gives the form whose caches already hold this token's key and
value (row L - 1): it returns (y, k_new [B, n_kv_heads, head_dim], v_new) for the
caller to append, and the attention reads the cache arguments themselves -- so
`pim_jit(..., resident=("params", "k_cache", "v_cache"))` keeps the caches
resident in PIM memory, which an intermediate (the updated cache of the
`append=True` form) cannot be until residency follows a cache appended at an
offset.  Both forms compute the same layer.

Phases (DCC Fig. 8): "qkv" (the Q, K, V GEMVs), "attention" (score, softmax,
context), "proj" (the output projection), "ffn" (the feed-forward GEMVs and the
activation between them), "other" (norms, residuals, RoPE, the cache writes).
"""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .configs import ModelConfig

# parameter -> phase; the caches are "attention" (`decode.op_phases` reads these)
PARAM_PHASES = {"wq": "qkv", "wk": "qkv", "wv": "qkv", "bq": "qkv", "bk": "qkv", "bv": "qkv",
                "wo": "proj", "bo": "proj",
                "w_gate": "ffn", "w_up": "ffn", "w_down": "ffn", "b_up": "ffn", "b_down": "ffn",
                "ln1_g": "other", "ln1_b": "other", "ln2_g": "other", "ln2_b": "other"}
CACHE_PHASE = "attention"
PHASES = ("qkv", "attention", "proj", "ffn", "other")


def param_shapes(cfg: ModelConfig, dtype=jnp.float16) -> dict:
    """{name: jax.ShapeDtypeStruct} of one layer's parameters (weights [out, in])."""
    d, kv, f, qd = cfg.d_model, cfg.kv_dim, cfg.d_ff, cfg.q_dim
    shapes = {"ln1_g": (d,), "wq": (qd, d), "wk": (kv, d), "wv": (kv, d), "wo": (d, qd), "ln2_g": (d,)}
    if cfg.ffn == "swiglu":
        shapes.update(w_gate=(f, d), w_up=(f, d), w_down=(d, f))
    else:
        shapes.update(w_up=(f, d), w_down=(d, f))
    if cfg.norm == "layernorm":
        shapes.update(ln1_b=(d,), ln2_b=(d,))
    if cfg.bias:
        shapes.update(bq=(qd,), bk=(kv,), bv=(kv,), bo=(d,), b_up=(f,), b_down=(d,))
    return {k: jax.ShapeDtypeStruct(s, dtype) for k, s in shapes.items()}


def layer_shapes(cfg: ModelConfig, batch: int, context: int, dtype=jnp.float16) -> tuple:
    """(params, x, k_cache, v_cache, pos) as ShapeDtypeStructs for a decode step
    whose context (this token included) is `context` tokens."""
    cache = jax.ShapeDtypeStruct((batch, cfg.n_kv_heads, context, cfg.head_dim), dtype)
    return (param_shapes(cfg, dtype), jax.ShapeDtypeStruct((batch, cfg.d_model), dtype), cache, cache,
            jax.ShapeDtypeStruct((), jnp.int32))


def random_layer_args(cfg: ModelConfig, batch: int, context: int, seed: int = 0, dtype=np.float16):
    """Concrete (params, x, k_cache, v_cache, pos) for small configs (tests):
    weights scaled by 1/sqrt(fan-in), norm scales near 1."""
    rng = np.random.default_rng(seed)
    params = {}
    for k, s in param_shapes(cfg).items():
        if k.startswith("ln") and k.endswith("_g"):
            v = 1.0 + 0.1 * rng.standard_normal(s.shape)
        elif len(s.shape) == 1:
            v = 0.1 * rng.standard_normal(s.shape)
        else:
            v = rng.standard_normal(s.shape) / np.sqrt(s.shape[1])
        params[k] = v.astype(dtype)
    x = rng.standard_normal((batch, cfg.d_model)).astype(dtype)
    shape = (batch, cfg.n_kv_heads, context, cfg.head_dim)
    kc = rng.standard_normal(shape).astype(dtype)
    vc = rng.standard_normal(shape).astype(dtype)
    return params, x, kc, vc, np.int32(context - 1)


def _bc(v, like):
    """v [n] shaped to broadcast against like [..., n] (explicit: no rank promotion)."""
    return v.reshape((1,) * (like.ndim - v.ndim) + v.shape)


def _norm(cfg: ModelConfig, h, g, b):
    h32 = h.astype(jnp.float32)
    if cfg.norm == "layernorm":
        mu = jnp.mean(h32, axis=-1, keepdims=True)
        h32 = h32 - mu
    var = jnp.mean(h32 * h32, axis=-1, keepdims=True)
    out = (h32 * lax.rsqrt(var + 1e-5)).astype(h.dtype) * _bc(g, h)
    return out + _bc(b, h) if b is not None else out


def _linear(params, name: str, h):
    """h [B, in] @ W[out, in]^T (+ bias): the GEMV of a decode step."""
    y = h @ params["w" + name].T
    b = params.get("b" + name)
    return y + _bc(b, y) if b is not None else y


def _rope(t, pos, base: float = 10000.0):
    """Rotary embedding (rotate-half form, as LLaMA's HF code) of t [..., hd] at `pos`."""
    hd = t.shape[-1]
    inv = jnp.asarray(1.0 / base ** (np.arange(0, hd, 2) / hd), jnp.float32)
    ang = pos.astype(jnp.float32) * inv
    cos = jnp.concatenate([jnp.cos(ang)] * 2).astype(t.dtype)
    sin = jnp.concatenate([jnp.sin(ang)] * 2).astype(t.dtype)
    rot = jnp.concatenate([-t[..., hd // 2:], t[..., :hd // 2]], axis=-1)
    return t * _bc(cos, t) + rot * _bc(sin, t)


def decode_attention(q, k_cache, v_cache, group: int):
    """softmax(q K^T / sqrt(hd)) V per head; q [B, H, hd], caches [B, Hkv, L, hd]."""
    hd = q.shape[-1]
    scale = q.dtype.type(np.sqrt(hd))        # a constant of q's dtype (the attention kernel's form)
    if group == 1:
        s = jnp.einsum("bhd,bhld->bhl", q, k_cache) / scale
        return jnp.einsum("bhl,bhld->bhd", jax.nn.softmax(s, axis=-1), v_cache)
    B, H, _ = q.shape
    qg = q.reshape(B, H // group, group, hd)      # grouped-query attention: a KV head per group
    s = jnp.einsum("bkgd,bkld->bkgl", qg, k_cache) / scale
    o = jnp.einsum("bkgl,bkld->bkgd", jax.nn.softmax(s, axis=-1), v_cache)
    return o.reshape(B, H, hd)


def _ffn(cfg: ModelConfig, params: dict, h):
    """The feed-forward block on normalised h [..., d]: SwiGLU (LLaMA) or GELU (GPT-3)."""
    if cfg.ffn == "swiglu":
        u = jax.nn.silu(_linear(params, "_gate", h)) * _linear(params, "_up", h)
    else:
        u = jax.nn.gelu(_linear(params, "_up", h))
    return _linear(params, "_down", u)


def make_layer(cfg: ModelConfig, append: bool = True) -> Callable:
    """The decoder layer of `cfg` as `layer(params, x, k_cache, v_cache, pos)`
    (module docstring): returns (y [B, d], k_cache, v_cache) with this token's
    key / value written at `pos`; with `append=False` the caches already hold
    them and it returns (y, k_new [B, Hkv, hd], v_new)."""
    H, Hkv, hd = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    group = H // Hkv

    def layer(params, x, k_cache, v_cache, pos):
        B = x.shape[0]
        h = _norm(cfg, x, params["ln1_g"], params.get("ln1_b"))
        q = _linear(params, "q", h).reshape(B, H, hd)
        k = _linear(params, "k", h).reshape(B, Hkv, hd)
        v = _linear(params, "v", h).reshape(B, Hkv, hd)
        if cfg.rope:
            q, k = _rope(q, pos), _rope(k, pos)
        if append:
            zero = jnp.zeros((), jnp.int32)
            k_cache = lax.dynamic_update_slice(k_cache, k[:, :, None, :], (zero, zero, pos, zero))
            v_cache = lax.dynamic_update_slice(v_cache, v[:, :, None, :], (zero, zero, pos, zero))
        o = decode_attention(q, k_cache, v_cache, group).reshape(B, H * hd)
        x = x + _linear(params, "o", o)
        h = _norm(cfg, x, params["ln2_g"], params.get("ln2_b"))
        y = x + _ffn(cfg, params, h)
        return (y, k_cache, v_cache) if append else (y, k, v)

    layer.__name__ = f"{cfg.name.replace('-', '_')}_layer"
    return layer


def make_prefill(cfg: ModelConfig) -> Callable:
    """The same layer over a whole prompt (the prefill, run on the GPU):
    `prefill(params, x [B, L, d]) -> (y [B, L, d], k [B, Hkv, L, hd], v)` with
    causal attention (a position attends to itself and earlier ones)."""
    H, Hkv, hd = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    group = H // Hkv

    def prefill(params, x):
        B, L, _ = x.shape
        h = _norm(cfg, x, params["ln1_g"], params.get("ln1_b"))
        q = _linear(params, "q", h).reshape(B, L, H, hd).transpose(0, 2, 1, 3)
        k = _linear(params, "k", h).reshape(B, L, Hkv, hd).transpose(0, 2, 1, 3)
        v = _linear(params, "v", h).reshape(B, L, Hkv, hd).transpose(0, 2, 1, 3)
        if cfg.rope:
            pos = jnp.arange(L, dtype=jnp.float32)
            inv = jnp.asarray(1.0 / 10000.0 ** (np.arange(0, hd, 2) / hd), jnp.float32)
            ang = pos[:, None] * inv[None, :]
            cos = jnp.concatenate([jnp.cos(ang)] * 2, axis=-1).astype(x.dtype)[None, None]
            sin = jnp.concatenate([jnp.sin(ang)] * 2, axis=-1).astype(x.dtype)[None, None]
            rot = lambda t: jnp.concatenate([-t[..., hd // 2:], t[..., :hd // 2]], axis=-1)  # noqa: E731
            q = q * cos + rot(q) * sin
            k = k * cos + rot(k) * sin
        qg = q.reshape(B, Hkv, group, L, hd)
        s = jnp.einsum("bkgqd,bkld->bkgql", qg, k) / q.dtype.type(np.sqrt(hd))
        causal = jnp.tril(jnp.ones((L, L), bool))[None, None, None]
        s = jnp.where(causal, s, jnp.asarray(-jnp.inf, s.dtype))
        o = jnp.einsum("bkgql,bkld->bkgqd", jax.nn.softmax(s, axis=-1), v)
        o = o.reshape(B, H, L, hd).transpose(0, 2, 1, 3).reshape(B, L, H * hd)
        x = x + _linear(params, "o", o)
        h = _norm(cfg, x, params["ln2_g"], params.get("ln2_b"))
        return x + _ffn(cfg, params, h), k, v

    prefill.__name__ = f"{cfg.name.replace('-', '_')}_prefill"
    return prefill
