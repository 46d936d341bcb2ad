"""Residency as models are called: weights passed as a pytree argument stay in
PIM layout between calls (pim_jit's default `resident="auto"`), a KV cache
written at an offset is resident and each call pays only for the appended
rows (DCC §IV-E `pre_load` with an offset), the report says which arguments
are resident and why, and `resident=` overrides the choice."""
from __future__ import annotations

import types
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from pimjax import pim_jit
from pimjax.sim.append import Append, append_factor
from pimjax.trace.affine import AffineExpr
from tests.test_api import TOL, _close

H, HD = 8, 128
D = H * HD          # 1024: a 1024 x 1024 fp16 GEMV beats the GPU roofline on PIM once its weights are resident


def layer(params, x, k_cache, v_cache, pos):
    """A decoder layer's decode step: projections, the new token's K / V
    appended to the caches at `pos`, attention over the caches, the output
    projection; returns the output and the updated caches."""
    q = (params["Wq"] @ x).reshape(H, HD)
    k = (params["Wk"] @ x).reshape(H, 1, HD)
    v = (params["Wv"] @ x).reshape(H, 1, HD)
    k_cache = lax.dynamic_update_slice(k_cache, k, (0, pos, 0))
    v_cache = lax.dynamic_update_slice(v_cache, v, (0, pos, 0))
    s = jnp.einsum("hd,hnd->hn", q, k_cache) / float(np.sqrt(HD))
    o = jnp.einsum("hn,hnd->hd", jax.nn.softmax(s, axis=-1), v_cache).reshape(D)
    return params["Wo"] @ o, k_cache, v_cache


def layer_args(ctx: int = 64, seed: int = 0):
    rng = np.random.default_rng(seed)
    params = {k: (rng.standard_normal((D, D)) / np.sqrt(D)).astype(np.float16) for k in ("Wq", "Wk", "Wv", "Wo")}
    x = rng.standard_normal(D).astype(np.float16)
    kc, vc = (rng.standard_normal((H, ctx, HD)).astype(np.float16) for _ in range(2))
    return params, x, kc, vc, np.int32(5)


def _weight_ops(compiled):
    """Plans of the GEMVs: the ops that read a weight of `params`."""
    weights = set(compiled.graph.inputs[:4])           # params' four leaves come first
    return [p for p in compiled.plans if any(a.value in weights for a in p.op.operands)]


@pytest.mark.parametrize("backend", ["hbm-pim", "attacc", "newton"])
def test_a_plain_call_keeps_weights_and_caches_resident(backend):
    """`f(params, x, k_cache, v_cache, pos)` as flax / haiku call a model
    (what a call compiles; its values: the tests below): the GEMVs run on
    PIM under the default placement with the weights placed once;
    `resident=()` rearranges every call, so each GEMV is slower (or goes back to the GPU)."""
    args = layer_args()
    compiled = pim_jit(layer, backend=backend).lower(*args).compile()
    gemvs = _weight_ops(compiled)
    assert len(gemvs) == 4 and all(p.placement == "pim" for p in gemvs), [p.reason for p in gemvs]
    ca = compiled.cost_analysis()
    assert set(ca["resident"]) == {"params", "k_cache", "v_cache"}
    assert "parameter container (dict of 4 arrays)" in ca["resident"]["params"]
    assert "KV cache" in ca["resident"]["k_cache"] and "dynamic_update_slice" in ca["resident"]["k_cache"]
    assert set(ca["per_call"]) == {"x", "pos"}
    assert ca["resident_ns"] > 0 and ca["total_ns"] < ca["gpu_ns"]
    text = compiled.report().as_text()
    assert "resident params" in text and "per call x" in text

    off = pim_jit(layer, backend=backend, resident=()).lower(*args).compile()
    oca = off.cost_analysis()
    # per call the weights are rearranged again: each GEMV either goes back to
    # the GPU (which model wins depends on the GPU model) or pays for it on PIM
    on, per = ({o["index"]: o for o in c["ops"]} for c in (ca, oca))
    for p in _weight_ops(off):
        o = per[p.index]
        assert (p.placement == "host" and ("beats PIM" in p.reason or "PIM disabled" in p.reason)) \
            or o["rearrangement_cycles"] > 0, p.reason
        assert o["ns"] > on[p.index]["ns"], (p.index, o["ns"], on[p.index]["ns"])
    assert oca["resident"] == {} and oca["resident_ns"] == 0
    assert set(oca["per_call"]) == {"params", "x", "k_cache", "v_cache", "pos"}
    assert ca["total_ns"] < oca["total_ns"]


def _attention(q, k_new, v_new, k_cache, v_cache, pos):
    k_cache = lax.dynamic_update_slice(k_cache, k_new[:, None, :], (0, pos, 0))
    v_cache = lax.dynamic_update_slice(v_cache, v_new[:, None, :], (0, pos, 0))
    s = jnp.einsum("hd,hnd->hn", q, k_cache)
    # a decode step hands the grown caches back (what makes them caches to "auto")
    return jnp.einsum("hn,hnd->hd", jax.nn.softmax(s, axis=-1), v_cache), k_cache, v_cache


def _attention_report(backend, ctx, resident, heads=4, hd=64):
    rng = np.random.default_rng(ctx)
    args = [rng.standard_normal(s).astype(np.float16) for s in ((heads, hd),) * 3 + ((heads, ctx, hd),) * 2]
    f = pim_jit(_attention, backend=backend, resident=resident, placement="prefer_pim")
    return f.lower(*args, np.int32(ctx // 2)).compile()


@pytest.mark.parametrize("backend", ["hbm-pim", "attacc"])
def test_a_decode_step_pays_for_the_appended_rows_not_the_cache(backend):
    """With the caches resident, doubling the context leaves the per-call
    append (one row per head) about where it was, while the per-call
    rearrangement of a non-resident cache grows with it."""
    on = {n: _attention_report(backend, n, "auto") for n in (64, 128)}
    off = {n: _attention_report(backend, n, ()) for n in (64, 128)}

    def scores(c, n):        # the op that reads the K cache (hbm-pim) or the fused block (attacc)
        first = next(p.index for p in on[n].plans if p.placement == "pim" and p.proposal.append)
        return next(p for p in c.plans if p.index == first)
    app = {n: scores(c, n).choice.append_cycles for n, c in on.items()}
    rearr = {n: float(scores(c, n).choice.report.rearrangement) for n, c in off.items()}
    assert all(a > 0 for a in app.values())
    assert app[128] <= 1.25 * app[64]                       # the appended rows, not the cache length
    assert rearr[128] >= 1.5 * rearr[64]                    # a per-call cache moves with its length
    assert app[64] < 0.25 * rearr[64]
    placed = {n: float(scores(c, n).choice.report.resident_cycles) for n, c in on.items()}
    assert placed[128] > placed[64] > app[64]               # the whole cache is placed once
    # the per-call data movement of the op (the appends and its other operands) hardly grows
    steady = {n: float(scores(c, n).choice.report.rearrangement) for n, c in on.items()}
    assert steady[128] - steady[64] < 0.25 * (rearr[128] - rearr[64])
    ops = on[64].cost_analysis()["ops"]
    dus = [o for o in ops if o["name"] == "dynamic_update_slice"]
    dus_off = [o for o in off[64].cost_analysis()["ops"] if o["name"] == "dynamic_update_slice"]
    # in place into the resident cache: the update's bytes, not the cache's (the GPU-only run alike)
    assert all(o["ns"] == o["gpu_ns"] < d["ns"] for o, d in zip(dus, dus_off)) and len(dus) == 2
    assert all(o["append_cycles"] >= 0 for o in ops if o["placement"] == "pim")


def _program(start, length, parallel=True, shape=(8, 16)):
    """A stand-in program: one resident operand [positions, features] laid
    out by (start, length) [G, C, 2] over the variables (n, d)."""
    layout = types.SimpleNamespace(operand=0, vars=("n", "d"), start=np.asarray(start), length=np.asarray(length),
                                   shape=shape, index_map=(AffineExpr.var("n"), AffineExpr.var("d")))
    op = types.SimpleNamespace(operands=(types.SimpleNamespace(value=7),))
    return types.SimpleNamespace(op=op, options={"resident": (0,)}, layouts=(layout,),
                                 parallel_rearrangement=parallel)


def test_append_factor_follows_the_groups_the_rows_land_in():
    """The appended rows cost the placement time of the groups that hold
    them: 4 groups x 2 cores over 8 positions x 16 features."""
    row = Append(1 / 8, (1, 16))
    shapes = {7: (8, 16)}
    # positions split over the groups (core c of group g holds position 2g + c): a new row lands in one
    # group, which placed 2 rows -> half its placement time
    by_pos = _program([[[2 * g + c, 0] for c in range(2)] for g in range(4)], np.full((4, 2, 2), [1, 16]))
    assert append_factor(by_pos, {7: row}, shapes) == pytest.approx(0.5)
    # features split (core c of group g holds features 4g + 2c .. + 2, every position): each group takes
    # a quarter of the row and placed a quarter of the cache -> the row's share, 1/8
    by_feat = _program([[[0, 4 * g + 2 * c] for c in range(2)] for g in range(4)], np.full((4, 2, 2), [8, 2]))
    assert append_factor(by_feat, {7: row}, shapes) == pytest.approx(1 / 8)
    # groups written in turn: the appended share of all the bytes whatever the layout
    serial = _program(by_pos.layouts[0].start, by_pos.layouts[0].length, parallel=False)
    assert append_factor(serial, {7: row}, shapes) == pytest.approx(1 / 8)
    # two rows at a dynamic offset, averaged over the 7 offsets: at the 4 even ones both rows are one
    # group's (all of its placement time), at the 3 odd ones they straddle two groups (half each)
    two = Append(2 / 8, (2, 16))
    assert append_factor(by_pos, {7: two}, shapes) == pytest.approx((4 * 1.0 + 3 * 0.5) / 7)
    # no box (a scatter of another rank): the fraction, spread like the whole
    assert append_factor(by_pos, {7: Append(1 / 8)}, shapes) == pytest.approx(1 / 8)
    assert append_factor(by_pos, {8: row}, shapes) == 0.0          # not an operand of the program


def test_resident_names_replace_the_automatic_choice():
    args = layer_args()
    kw = dict(backend="hbm-pim")
    named = pim_jit(layer, resident=("params", "k_cache"), **kw).trace(*args).residency
    assert set(named.resident) == {"params", "k_cache"} and "KV cache" in named.resident["k_cache"]
    assert "named in resident=" in named.resident["params"]
    assert "not named" in named.per_call["v_cache"]
    graph = pim_jit(layer, **kw).trace(*args).graph
    assert len(named.appends) == 1                        # only the named cache appends
    one = pim_jit(layer, resident=("params['Wq']", 3), **kw).trace(*args).residency
    assert set(one.resident) == {"params['Wq']", "v_cache"}
    assert {"params['Wk']", "params['Wv']", "params['Wo']", "x", "k_cache", "pos"} == set(one.per_call)
    auto = pim_jit(layer, **kw).trace(*args).residency
    assert auto.ids >= set(graph.inputs[:4]) and len(auto.appends) == 2
    assert all(a.fraction == pytest.approx(1 / 64) and a.extents == (H, 1, HD) for a in auto.appends.values())
    with pytest.raises(ValueError, match="not an argument"):
        pim_jit(layer, resident=("params['Wz']",), **kw).trace(*args).residency
    # a plain weight argument is an activation to "auto": name it (the README's `resident=("W",)`)
    plain = pim_jit(lambda W, x: W @ x, **kw).trace(args[0]["Wq"], args[1]).residency
    assert plain.resident == {} and set(plain.per_call) == {"W", "x"}


def test_framework_parameter_containers_are_resident():
    """equinox Modules, haiku params and flax nnx State are pytree nodes:
    resident under "auto"; the activation is not."""
    import equinox as eqx
    import haiku as hk
    from flax import nnx

    x = np.ones(16, np.float32)

    class Linear(eqx.Module):
        w: jax.Array
        b: jax.Array

        def __call__(self, x):
            return self.w @ x + self.b
    model = Linear(jnp.ones((8, 16)), jnp.zeros(8))
    res = pim_jit(lambda m, x: m(x)).trace(model, x).residency
    assert set(res.resident) == {"m"} and "Linear of 2 arrays" in res.resident["m"] and set(res.per_call) == {"x"}

    net = hk.transform(lambda x: hk.Linear(8)(x))                # apply(params, rng, x)
    params = net.init(jax.random.PRNGKey(0), x)
    res = pim_jit(net.apply).trace(params, jax.random.PRNGKey(1), x).residency
    assert set(res.resident) == {"params"} and "dict of 2 arrays" in res.resident["params"]
    assert set(res.per_call) == {"rng", "x"}

    graphdef, state = nnx.split(nnx.Linear(16, 8, rngs=nnx.Rngs(0)))
    res = pim_jit(lambda state, x: nnx.merge(graphdef, state)(x)).trace(state, x).residency
    assert set(res.resident) == {"state"} and "State" in res.resident["state"] and set(res.per_call) == {"x"}


@pytest.mark.parametrize("backend", [pytest.param("attacc", marks=pytest.mark.slow),
                                     pytest.param("newton", marks=pytest.mark.slow)])
def test_decoder_layer_values_equal_jax_jit(backend):
    """A plain call runs the resident programs: jax.jit's values (hbm-pim:
    the decode steps below)."""
    args = layer_args()
    f = pim_jit(layer, backend=backend)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = f(*args)
    _close(got, jax.jit(layer)(*args), TOL[backend])
    assert any(p.placement == "pim" for p in _weight_ops(f.compiles()[0]))


def test_repeated_decode_steps_compile_once_and_equal_jax_jit():
    """Calls with other positions and caches reuse the compile (cached by
    signature) and match jax.jit; the Lowered stage reports residency too."""
    args = layer_args(ctx=16)
    f = pim_jit(layer, backend="hbm-pim")
    params, x, kc, vc, _ = args
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f(*args)
    assert all(p.placement == "pim" for p in _weight_ops(f.compiles()[0]))
    for pos in (0, 15):
        got = f(params, x, kc, vc, np.int32(pos))
        want = jax.jit(layer)(params, x, kc, vc, np.int32(pos))
        _close(got, want, TOL["hbm-pim"])
        x, kc, vc = (np.asarray(a) for a in got)
    assert len(f.compiles()) == 1
    lowered = f.lower(*args).cost_analysis()
    assert lowered["figures"] == "predicted" and set(lowered["resident"]) == {"params", "k_cache", "v_cache"}


def test_caches_written_by_scatter_or_held_in_a_container_append():
    """`.at[:, pos].set(k)` (a scatter) makes a KV cache as well (its update
    is not one box of the cache's rank: the appended fraction); a cache
    inside a container is resident as a container and appends."""
    def scattered(q, k, k_cache, pos):
        k_cache = k_cache.at[:, pos].set(k)
        return jnp.einsum("hd,hnd->hn", q, k_cache), k_cache

    q = np.ones((4, 32), np.float16)
    res = pim_jit(scattered).trace(q, q, np.ones((4, 16, 32), np.float16), np.int32(2)).residency
    assert set(res.resident) == {"k_cache"} and "scatter" in res.resident["k_cache"]
    (app,) = res.appends.values()
    assert app.fraction == pytest.approx(1 / 16) and app.extents is None

    def patched(q, k, k_cache, pos):        # written for this call only, not returned: no cache
        k_cache = k_cache.at[:, pos].set(k)
        return jnp.einsum("hd,hnd->hn", q, k_cache)

    res = pim_jit(patched).trace(q, q, np.ones((4, 16, 32), np.float16), np.int32(2)).residency
    assert res.resident == {} and "k_cache" in res.per_call and not res.appends

    def in_dict(q, k, cache, pos):
        kc = lax.dynamic_update_slice(cache["k"], k[:, None, :], (0, pos, 0))
        return jnp.einsum("hd,hnd->hn", q, kc) + jnp.einsum("hd,hnd->hn", q, cache["v"])

    res = pim_jit(in_dict).trace(q, q, {"k": np.ones((4, 16, 32), np.float16),
                                        "v": np.ones((4, 16, 32), np.float16)}, np.int32(2)).residency
    assert set(res.resident) == {"cache['k']", "cache['v']"}           # reasons differ per leaf
    assert "parameter container" in res.resident["cache['k']"] and "KV cache" in res.resident["cache['k']"]
    assert "KV cache" not in res.resident["cache['v']"]
    (app,) = res.appends.values()
    assert app.extents == (4, 1, 32)
