"""PIMFlow's CNN models and BERT-base (pimjax/models/cnn.py).

* sizes: the layer table traced from shapes against the published parameter counts and
  multiply-adds (torchvision's weights metadata, the MnasNet paper, BERT's sizes);
* per node: MACs / bytes derived from the node's own shapes, kinds, PIM candidates,
  the resolution option;
* the pipelining pattern finder against the block tables;
* values: `pim_jit(apply, backend="newton")` (placement "auto") against `jax.jit(apply)`
  on a reduced MobileNet-V2 (1x1 and depthwise convolutions), and the jnp layers
  against a direct numpy convolution.
"""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pimjax
from pimjax.models import cnn

CONV_KINDS = ("conv", "dwconv", "fc")


def _params(name, **kw):
    return sum(math.prod(s.shape) for s in cnn.param_shapes(cnn.get_cnn_config(name, **kw)).values())


@pytest.mark.parametrize("name", sorted(cnn.PUBLISHED))
def test_sizes_match_published(name):
    """Parameters and MACs at 224 x 224 from the traced table vs the published figures:
    torchvision's num_params (exact integers) within 0.1 %; MnasNet-A1's "3.9 M" (two
    significant figures) within 2 %; GMACs as published to 2 decimals within 2 %."""
    pub = cnn.PUBLISHED[name]
    table = cnn.cnn_layers(name)
    n = _params(name)
    assert n == pytest.approx(pub["params"], rel=0.02 if name == "mnasnet-a1" else 1e-3)
    macs = table.loc[table.kind.isin(CONV_KINDS), "macs"].sum()
    assert macs / 1e9 == pytest.approx(pub["gmacs"], rel=0.02)
    # every parameter is read by exactly one node, once (fp16: 2 bytes)
    assert table.weight_bytes.sum() == 2 * n


def test_bert_base_encoder():
    """BERT-base (d 768, FFN 3072, 12 layers): per layer Q, K, V, O with biases, two FFN
    matrices with biases, two LayerNorms; with the embeddings (30522 word pieces, 512
    positions, 2 segments, a LayerNorm) and the pooler it is BERT's published 110 M."""
    d, f, L, S = 768, 3072, 12, 64
    enc = L * (4 * d * d + 4 * d + 2 * d * f + f + d + 2 * 2 * d)
    assert _params("bert-base") == enc
    assert enc + (30522 + 512 + 2) * d + 2 * d + d * d + d == pytest.approx(110e6, rel=0.01)
    t = cnn.cnn_layers("bert-base")
    fc = t[t.kind == "fc"]
    assert len(fc) == 6 * L and fc.pim_candidate.all()
    assert fc.macs.sum() == L * S * (4 * d * d + 2 * d * f)
    # the attention products read no weight: not FC, not PIM candidates
    mm = t[t.op == "matmul"]
    assert len(mm) == 2 * L and (mm.kind == "other").all() and not mm.pim_candidate.any()
    assert cnn.cnn_layers("bert-base", seq_len=3).query("kind == 'fc'").W.eq(3).all()


@pytest.mark.parametrize("name", ["mobilenet-v2", "efficientnet-b0", "resnet-50"])
def test_node_figures_follow_from_shapes(name):
    t = cnn.cnn_layers(name)
    conv = t[t.kind.isin(("conv", "dwconv"))]
    assert (conv.macs == conv.Ho * conv.Wo * conv.F * conv.K ** 2 * conv.C // conv.groups).all()
    assert (conv.Ho == (conv.H + 2 * ((conv.K - 1) // 2) - conv.K) // conv.stride + 1).all()
    dw = t[t.kind == "dwconv"]
    assert (len(dw) > 0) == (name != "resnet-50")        # ResNet-50 has no depthwise convolution
    assert (dw.groups == dw.C).all() and (dw.C == dw.F).all()
    # PIMFlow §4.2.1: CONV except depthwise, and FC, are PIM candidates; nothing else
    assert (t.pim_candidate == t.kind.isin(("conv", "fc"))).all()
    # activations: every conv's output bytes are its output tensor (fp16)
    assert (conv.out_bytes == 2 * conv.Ho * conv.Wo * conv.F).all()
    # the GEMM view: `groups` GEMMs of M x K x N are the node's MACs (conv and FC alike)
    mm = t[t.kind != "other"]
    assert (mm.groups * mm.gemm_m * mm.gemm_k * mm.gemm_n == mm.macs).all()
    # topological order: inputs come before a node, consumers after it
    for r in t.itertuples():
        assert all(i < r.index for i in r.inputs) and all(c > r.index for c in r.consumers)


def test_resolution_option():
    """At 448 every spatial size doubles exactly (224 / 2^5 = 7 is odd only at the end),
    so every convolution's MACs are 4x those at 224; the classifier's are unchanged."""
    a, b = cnn.cnn_layers("mobilenet-v2", 224), cnn.cnn_layers("mobilenet-v2", 448)
    assert list(a.name) == list(b.name)
    conv = a.kind.isin(("conv", "dwconv"))
    assert (b.macs[conv] == 4 * a.macs[conv]).all()
    assert (b.macs[a.kind == "fc"] == a.macs[a.kind == "fc"]).all()
    assert a.loc[a.name == "stem", "Ho"].item() == 112 and b.loc[b.name == "stem", "Ho"].item() == 224


def test_mobilenet_v2_patterns_from_block_table():
    """Every inverted residual with an expansion is 1x1 -> DW -> 1x1 (ReLU6 between,
    skipped); the first (t = 1) block is DW -> 1x1 only."""
    blocks = [(t, n) for t, c, n, s in cnn.MOBILENET_V2]
    expanded = sum(n for t, n in blocks if t != 1)
    total = sum(n for _, n in blocks)
    table = cnn.cnn_layers("mobilenet-v2")
    found = cnn.find_patterns(table)
    count = {p: sum(1 for f in found if f.pattern == p) for p in cnn.PATTERNS}
    assert count == {"1x1-DW-1x1": expanded, "1x1-DW": expanded, "DW-1x1": total}
    for start, length, pattern in found:
        rows = table.iloc[start:start + length]
        main = rows[rows.op != "act"]
        want = ["1x1" if k == "conv" else "DW" for k in main.kind]
        assert "-".join(want) == pattern
        assert (main[main.kind == "conv"].K == 1).all()
        assert length == 2 * len(main) - 1           # one activation between consecutive nodes


def test_patterns_need_a_single_consumer():
    """EfficientNet-B0's squeeze-excite reads the depthwise output twice (pool and scale):
    no DW -> 1x1 there; its expanded blocks still give 1x1 -> DW.  ResNet-50 and VGG-16
    have no depthwise convolution."""
    expanded = sum(n for e, k, s, i, o, n in cnn.EFFICIENTNET_B0 if e != 1)
    found = cnn.find_patterns(cnn.cnn_layers("efficientnet-b0"))
    assert sorted({p.pattern for p in found}) == ["1x1-DW"] and len(found) == expanded
    assert cnn.find_patterns(cnn.cnn_layers("resnet-50")) == []
    # a second reader of the expansion's activation breaks the chain
    t = cnn.layer_records(cnn.get_cnn_config("mobilenet-v2", 32, blocks=2))
    i = next(r.index for r in t if r.name == "b1.expand.act")
    t[i] = t[i].__class__(**{**t[i].__dict__, "consumers": t[i].consumers + (len(t) - 1,)})
    starts = {(p.start, p.pattern) for p in cnn.find_patterns(t)}
    assert (i - 1, "1x1-DW") not in starts and (i - 1, "1x1-DW-1x1") not in starts
    assert (i + 1, "DW-1x1") in starts


def _direct_conv(x, w, stride, groups):
    """Reference NHWC / HWIO convolution, padding (k-1)//2, as loops over the kernel (float64)."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    k, _, cg, F = w.shape
    p = (k - 1) // 2
    xp = np.pad(x, ((0, 0), (p, p), (p, p), (0, 0)))
    Ho = (x.shape[1] + 2 * p - k) // stride + 1
    Wo = (x.shape[2] + 2 * p - k) // stride + 1
    fg = F // groups
    y = np.zeros((1, Ho, Wo, F))
    for f in range(F):
        g = f // fg
        for r in range(k):
            for s in range(k):
                patch = xp[0, r:r + stride * Ho:stride, s:s + stride * Wo:stride, g * cg:(g + 1) * cg]
                y[0, :, :, f] += patch @ w[r, s, :, f]
    return y


def test_first_block_against_direct_convolutions():
    """MobileNet-V2's stem and first block (3x3 stride 2, depthwise 3x3, 1x1, residual) in float32
    against loops over the kernel with the folded BN and ReLU6 applied by hand."""
    cfg = cnn.get_cnn_config("mobilenet-v2", 16, width=0.25, blocks=1, classes=4, dtype="float32")
    params = cnn.init(jax.random.key(3), cfg)
    x = cnn.random_input(jax.random.key(4), cfg)

    def stage(name, h, stride, groups, act):
        y = _direct_conv(h, params[f"{name}.w"], stride, groups)
        y = y * np.asarray(params[f"{name}.bn_scale"]) + np.asarray(params[f"{name}.bias"])
        return np.clip(y, 0, 6) if act else y

    h0 = stage("stem", x, 2, 1, True)
    h = stage("b0.dw", h0, 1, h0.shape[-1], True)
    h = stage("b0.project", h, 1, 1, False)
    assert h.shape == h0.shape          # at width 0.25 both are 8 channels: a residual (torchvision's rule)
    h = h + h0
    h = np.clip(_direct_conv(h, params["head.w"], 1, 1) * np.asarray(params["head.bn_scale"])
                + np.asarray(params["head.bias"]), 0, 6)
    ref = h.mean(axis=(1, 2)) @ np.asarray(params["fc.w"], np.float64) + np.asarray(params["fc.b"])
    y = np.asarray(jax.jit(cnn.make_apply(cfg))(params, x))
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


def _run_fp16(name, blocks):
    kw = dict(width=0.25, classes=10) if name != "bert-base" else dict(seq_len=4)
    cfg = cnn.get_cnn_config(name, 32, blocks=blocks, **kw)
    params = cnn.init(jax.random.key(0), cfg)
    assert all(p.dtype == jnp.float16 for p in params.values())
    y = jax.jit(cnn.make_apply(cfg))(params, cnn.random_input(jax.random.key(1), cfg))
    assert y.dtype == jnp.float16 and np.isfinite(np.asarray(y, np.float32)).all()
    assert y.shape == ((4, 768) if name == "bert-base" else (1, 10))


@pytest.mark.parametrize("name", cnn.CNN_MODELS)
def test_models_run_in_fp16(name):
    """Random fp16 weights give finite outputs of the documented shapes (two blocks: an
    XLA compile of a whole model takes 5-10 s here)."""
    _run_fp16(name, 2)


@pytest.mark.slow
@pytest.mark.parametrize("name", cnn.CNN_MODELS)
def test_full_depth_models_run_in_fp16(name):
    """Every block: the random weights' scaling keeps fp16 activations finite through the depth."""
    _run_fp16(name, None)


def test_unknown_model_names_the_valid_ones():
    with pytest.raises(ValueError, match="mobilenet-v2"):
        cnn.get_cnn_config("mobilenet")


def _pim_vs_jit(resolution, blocks, head):
    cfg = cnn.get_cnn_config("mobilenet-v2", resolution, width=0.25, blocks=blocks, classes=10, head=head)
    params = cnn.init(jax.random.key(0), cfg)
    x = cnn.random_input(jax.random.key(1), cfg)
    apply = cnn.make_apply(cfg)
    ref = np.asarray(jax.jit(apply)(params, x), np.float32)
    f = pimjax.pim_jit(apply, backend="newton")
    y = np.asarray(f(params, x), np.float32)
    # Newton computes in bf16 (README: the corpus holds within 6e-2 of the largest magnitude)
    np.testing.assert_array_less(np.abs(y - ref), 6e-2 * np.abs(ref).max())
    (compiled,) = f.compiles()
    on_pim = [p.op for p in compiled.plans if p.placement == "pim"]
    assert any(op.name == "conv_general_dilated" for op in on_pim), "no convolution ran on PIM"
    return compiled


@pytest.mark.slow
def test_mobilenet_v2_block_on_newton_matches_jit():
    """The stem (3x3, stride 2) and the first block (depthwise 3x3, 1x1, residual add at
    width 0.25) at 16 x 16, no head: 20-40 s here (a newton compile of a convolution is
    several seconds, mostly the cost model's walk over its drafts; with newton's concurrent GPU
    the mixed-parallel search tunes split shares too), so it runs with the slow cases."""
    _pim_vs_jit(16, 1, head=False)


@pytest.mark.slow
def test_mobilenet_v2_blocks_on_newton_match_jit():
    """Four blocks at 32 x 32 (expansion 1x1, stride-2 depthwise, a residual add) and the
    head (1x1 to 1280, pool, FC): ~70 s here."""
    _pim_vs_jit(32, 4, head=True)


@pytest.mark.parametrize("name", ["mobilenet-v2", "efficientnet-b0", "bert-base"])
def test_table_rows_match_the_pim_graph(name):
    """`match_graph`: each conv / FC / matmul node is one contraction op of pim_jit's graph,
    with the same number of output elements and the same loop extent product (MACs)."""
    cfg = cnn.get_cnn_config(name, 32, width=0.25, blocks=2, classes=10, seq_len=4)
    g = pimjax.make_graph(cnn.make_apply(cfg), cnn.param_shapes(cfg), cfg.input_spec())
    table = cnn.cnn_layers(cfg)
    m = cnn.match_graph(table, g)
    assert sorted(m) == list(table.index[table.macs > 0])
    for row, i in m.items():
        op = g.ops[i]
        assert math.prod(v.extent for v in op.loop_vars) == table.macs[row], table.name[row]
    with pytest.raises(ValueError):
        cnn.match_graph(cnn.cnn_layers(cnn.get_cnn_config(name, 32, width=0.25, blocks=1, seq_len=4)), g)
