"""Attention as real code writes it, on AttAcc.

AttAcc's softmax unit (one per channel, `../shared/reference/attacc.md`)
scales the scores by a constant, runs a float32 softmax and writes FP16
probabilities.  So a score -> softmax -> context block fuses into one
program when its score epilogue is at most a constant scale (float
conversions around the softmax included), for any number of heads --
batch entries and the query heads of a grouped-query KV head are more
heads.  A mask (`jnp.where` on an array or an `iota`), an additive bias,
anything else in the score epilogue is no work for that unit: the block is
not fused, its score and context products are planned as ordinary GEMVs
(on PIM under "prefer_pim" / "pim", the epilogue applied at the host merge)
and max / exp / sum / div on the host; every op's reason says why the
block was not fused.  Each function is compared with `jax.jit` of itself
within the attacc tolerance of the corpus tests (3e-2 of the largest
magnitude).
"""
from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pimjax import PimCompileError, pim_jit
from pimjax.search.tuner import Tuner

TOL = 3e-2                      # tests/test_api.py TOL["attacc"]
H, L, D = 2, 16, 16
SCALE = 0.25                    # 1 / sqrt(D)


class _Flat:
    def predict(self, features):
        return np.ones(len(features))


def _tuner():
    return Tuner(model=_Flat(), top_k=1, include_baseline=False)


def _close(got, want):
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        scale = max(1.0, float(np.max(np.abs(w))))
        np.testing.assert_allclose(g, w, rtol=TOL, atol=TOL * scale)


def _rand(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed + len(shape) * 7 + shape[-1]).standard_normal(shape).astype(dtype)


def _qkv(dtype=np.float32, batch=()):
    return (_rand(*batch, H, D, seed=1, dtype=dtype), _rand(*batch, H, L, D, seed=2, dtype=dtype),
            _rand(*batch, H, L, D, seed=3, dtype=dtype))


def _ctx(s, V):
    return jnp.einsum("...n,...nd->...d", jax.nn.softmax(s, axis=-1), V)


# ---- fusable: a constant scale (on the scores, or folded nowhere: q / K scaled by their own op)
def scale_on_scores(q, K, V):
    return _ctx(jnp.einsum("hd,hnd->hn", q, K) * SCALE, V)


def scale_on_q(q, K, V):
    return _ctx(jnp.einsum("hd,hnd->hn", q * SCALE, K), V)


def scale_on_k(q, K, V):
    return _ctx(jnp.einsum("hd,hnd->hn", q, K / 4.0), V)


def f32_softmax(q, K, V):            # fp16 in, float32 softmax, fp16 probabilities (flax / gemma style)
    s = jnp.einsum("hd,hnd->hn", q, K).astype(jnp.float32) * SCALE
    p = jax.nn.softmax(s, axis=-1).astype(jnp.float16)
    return jnp.einsum("hn,hnd->hd", p, V)


def batch2(q, K, V):                 # [B, H, ...]: the batch folds into heads
    return _ctx(jnp.einsum("bhd,bhnd->bhn", q, K) * SCALE, V)


G = 2                                # query heads per KV head


def gqa(q, K, V):                    # q [B, Hkv, G, D], K / V [B, Hkv, L, D]
    s = jnp.einsum("bhgd,bhnd->bhgn", q, K) * SCALE
    return jnp.einsum("bhgn,bhnd->bhgd", jax.nn.softmax(s, axis=-1), V)


def gqa_repeat(q, K, V):             # the same through jnp.repeat of K / V (llama-style)
    B, Hk = K.shape[:2]
    q = q.reshape(B, Hk * G, D)
    Kr, Vr = jnp.repeat(K, G, axis=1), jnp.repeat(V, G, axis=1)
    return _ctx(jnp.einsum("bhd,bhnd->bhn", q, Kr) * SCALE, Vr)


# ---- not fusable: masks and biases in the score epilogue
def masked(q, K, V, mask):
    s = jnp.einsum("hd,hnd->hn", q, K) * SCALE
    return _ctx(jnp.where(mask, s, -1e9), V)


def masked_inf(q, K, V, mask):
    s = jnp.einsum("hd,hnd->hn", q, K) * SCALE
    return _ctx(jnp.where(mask, s, -jnp.inf), V)


def bias(q, K, V, b):
    return _ctx(jnp.einsum("hd,hnd->hn", q, K) * SCALE + b, V)


def causal(q, K, V):                 # the last L // 2 positions not yet written (decode)
    s = jnp.einsum("hd,hnd->hn", q, K) * SCALE
    pos = jax.lax.broadcasted_iota(jnp.int32, s.shape, 1)
    return _ctx(jnp.where(pos < L // 2, s, -jnp.inf), V)


def gqa_masked_f32(q, K, V, mask):   # everything at once: GQA, batch 2, mask, float32 softmax
    s = jnp.einsum("bhgd,bhnd->bhgn", q, K).astype(jnp.float32) * SCALE
    s = jnp.where(mask[:, None, None, :], s, jnp.finfo(jnp.float32).min)
    p = jax.nn.softmax(s, axis=-1).astype(jnp.float16)
    return jnp.einsum("bhgn,bhnd->bhgd", p, V)


def gemma(q, K, V, mask=None, soft_cap=None):
    """Gemma's attention (gemma/modules.py): q [B, T, N, H] scaled by
    query_pre_attn_scalar, K / V [B, S, Kv, H], GQA by reshaping q into
    [B, T, Kv, N // Kv, H], optional logit soft-capping and mask, softmax
    cast back to K's dtype."""
    B, T, N, Hd = q.shape
    kv = K.shape[2]
    q = (q * Hd ** -0.5).reshape(B, T, kv, N // kv, Hd)
    logits = jnp.einsum("BTKGH,BSKH->BTKGS", q, K)
    if soft_cap is not None:
        logits = jnp.tanh(logits / soft_cap) * soft_cap
    if mask is not None:
        logits = jnp.where(mask[:, :, None, None, :], logits, -2.3819763e38)
    probs = jax.nn.softmax(logits, axis=-1).astype(K.dtype)
    return jnp.einsum("BTKGS,BSKH->BTKGH", probs, V).reshape(B, T, N, Hd)


def _gemma_args(mask=False):
    q, K, V = _rand(2, 1, 4, D, seed=1), _rand(2, L, 2, D, seed=2), _rand(2, L, 2, D, seed=3)
    return (q, K, V) + ((_mask(2, 1, L),) if mask else ())


def _mask(*shape):
    m = np.random.default_rng(5).random(shape) > 0.3
    m[..., 0] = True                 # every row keeps one position
    return m


FUSABLE = {
    "scale_on_scores": (scale_on_scores, lambda: _qkv()),
    "scale_on_q": (scale_on_q, lambda: _qkv()),
    "scale_on_k": (scale_on_k, lambda: _qkv()),
    "f32_softmax": (f32_softmax, lambda: _qkv(np.float16)),
    "batch2": (batch2, lambda: _qkv(batch=(2,))),
    "gqa": (gqa, lambda: (_rand(2, H, G, D, seed=1), _rand(2, H, L, D, seed=2), _rand(2, H, L, D, seed=3))),
    "gemma": (gemma, _gemma_args),
    "gqa_repeat": (gqa_repeat, lambda: (_rand(2, H, G, D, seed=1), _rand(2, H, L, D, seed=2),
                                        _rand(2, H, L, D, seed=3))),
}
UNFUSABLE = {
    "masked": (masked, lambda: _qkv() + (_mask(H, L),)),
    "masked_inf": (masked_inf, lambda: _qkv() + (_mask(H, L),)),
    "bias": (bias, lambda: _qkv() + (_rand(H, L, seed=4),)),
    "causal": (causal, lambda: _qkv()),
    "gemma_masked_softcap": (lambda q, K, V, m: gemma(q, K, V, m, soft_cap=50.0), lambda: _gemma_args(True)),
    "gqa_masked_f32": (gqa_masked_f32, lambda: (_rand(2, H, G, D, seed=1, dtype=np.float16),
                                                _rand(2, H, L, D, seed=2, dtype=np.float16),
                                                _rand(2, H, L, D, seed=3, dtype=np.float16), _mask(2, L))),
}


def _compile(fn, args, placement):
    return pim_jit(fn, backend="attacc", tuner=_tuner(), placement=placement,
                   channels=2).lower(*args).compile()


def _run(compiled, args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return compiled(*args)


@pytest.mark.parametrize("name", sorted(FUSABLE))
def test_fusable_attention_is_one_attacc_program(name):
    fn, make = FUSABLE[name]
    args = make()
    compiled = _compile(fn, args, "prefer_pim")
    rep = compiled.report()
    blocks = [p for p in compiled.plans if p.block]
    assert len(blocks) == 1 and blocks[0].placement == "pim" and blocks[0].program is not None
    assert [o.name for o in rep.ops if o.placement == "pim"] == ["attention"]
    assert sum(o.placement == "fused" for o in rep.ops) == len(blocks[0].block) - 1
    _close(_run(compiled, args), jax.jit(fn)(*args))


@pytest.mark.parametrize("name", sorted(UNFUSABLE))
@pytest.mark.parametrize("placement", ["auto", "prefer_pim"])
def test_unfusable_attention_runs_as_gemvs_and_says_why(name, placement):
    """Not fused: the score and context products are plain contractions
    (on PIM under prefer_pim), the softmax on the host, and each op of the
    block says why it was not fused; "auto" never raises."""
    fn, make = UNFUSABLE[name]
    args = make()
    compiled = _compile(fn, args, placement)
    plans = compiled.plans
    assert not any(p.block for p in plans) and not any(p.placement == "fused" for p in plans)
    unfused = [p for p in plans if "not fused as an attention block" in p.reason]
    assert len(unfused) >= 6
    assert all("not a scale by a constant" in p.reason for p in unfused)
    products = [p for p in unfused if p.op.kind == "contraction"]
    assert len(products) == 2                       # score and context
    softmax = [p for p in unfused if p.op.kind != "contraction"]
    assert all(p.placement == "host" for p in softmax if p.op.kind == "elementwise" or
               p.op.combiner == "max")
    if placement == "prefer_pim":
        assert all(p.placement == "pim" and p.program is not None for p in products)
        assert {o.name for o in compiled.report().ops if o.placement == "pim"} >= {"dot_general"}
    _close(_run(compiled, args), jax.jit(fn)(*args))


def test_auto_placement_of_fusable_attention_runs():
    fn, make = FUSABLE["f32_softmax"]
    args = make()
    compiled = _compile(fn, args, "auto")
    assert all(p.reason for p in compiled.plans)
    _close(_run(compiled, args), jax.jit(fn)(*args))


def test_pim_placement_fuses_or_names_the_op_it_cannot_run():
    fn, make = FUSABLE["batch2"]
    args = make()
    compiled = _compile(fn, args, "pim")
    assert [p.placement for p in compiled.plans if p.block] == ["pim"]
    _close(_run(compiled, args), jax.jit(fn)(*args))
    # a mask: the products could run on PIM, the softmax's max cannot
    fn, make = UNFUSABLE["masked"]
    with pytest.raises(PimCompileError, match="reduce_max.*not fused as an attention block.*no max"):
        _compile(fn, make(), "pim")
    # q scaled by its own elementwise op: that op cannot run on AttAcc's GEMV units
    fn, make = FUSABLE["scale_on_q"]
    with pytest.raises(PimCompileError, match="mul .*no elementwise op"):
        _compile(fn, make(), "pim")


def test_gqa_stores_each_kv_head_once():
    """The query heads of one KV head read one stored copy of K and V: the
    same draft (the backend's baseline) of the GQA block and of the block
    with K / V materialised per query head runs the same MACs, and the GQA
    program writes K and V G times fewer bytes (1 channel: the baseline
    keeps a KV head's query heads on one unit)."""
    from pimjax import make_graph
    from pimjax.backends import baseline
    from pimjax.backends.attacc.attention import lower_attention
    from pimjax.hw import get_backend
    from pimjax.lower.patterns import match_attention
    from pimjax.sim.execute import execute
    be = get_backend("attacc", channels=1)

    def materialised(q, K, V):           # K / V [B, Hkv, G, L, D]
        s = jnp.einsum("bhgd,bhgnd->bhgn", q, K) * SCALE
        return jnp.einsum("bhgn,bhgnd->bhgd", jax.nn.softmax(s, axis=-1), V)

    q, K, V = FUSABLE["gqa"][1]()
    Kr, Vr = (np.repeat(a[:, :, None], G, axis=2) for a in (K, V))
    progs = []
    for fn, args in ((gqa, (q, K, V)), (materialised, (q, Kr, Vr))):
        g = make_graph(fn, *args)
        (block,) = match_attention(g)
        ops = [g.ops[i] for i in block]
        shapes = {i: v.shape for i, v in enumerate(g.values)}
        prog = lower_attention(ops, baseline(ops[0], be), be, shapes)
        _close(execute(prog, *args), jax.jit(fn)(*args))
        progs.append(prog)
    shared, copied = (p.stats for p in progs)
    assert shared.commands["MACAB"] == copied.commands["MACAB"] > 0
    assert shared.rearrange_bytes * G == copied.rearrange_bytes
