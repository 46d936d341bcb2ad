"""PIMFlow's evaluated models in plain jnp: five CNNs and BERT-base, random weights, batch 1.

    cfg = get_cnn_config("mobilenet-v2")                  # 224 x 224, fp16
    params = init(jax.random.key(0), cfg)                 # {name: array}
    y = make_apply(cfg)(params, x)                        # x [1, 224, 224, 3] NHWC -> logits [1, 1000]
    table = cnn_layers("mobilenet-v2")                    # per node: shapes, MACs, bytes; no weights
    find_patterns(table)                                  # PIMFlow's pipelining candidates

Models (PIMFlow §5 evaluates "ENetB0, MBNetV2, MnasNet, ResNet50 and VGG16 as provided
by Torchvision", §6.4 BERT); every block table below is vendored from the cited source
(nothing is downloaded):

* "mobilenet-v2"   -- Sandler et al., MobileNetV2 (CVPR 2018) Table 2; torchvision
  `mobilenetv2.py` (`inverted_residual_setting`, last channel 1280, ReLU6).
* "efficientnet-b0" -- Tan & Le, EfficientNet (ICML 2019) Table 1; torchvision
  `efficientnet.py` (`_efficientnet_conf("efficientnet_b0")`: SiLU, squeeze-excite with
  max(1, block input channels // 4) channels, head 1280).
* "mnasnet1_0"     -- torchvision `mnasnet.py` `mnasnet1_0` (the model PIMFlow ran, its
  artifact's "mnasnet-1.0"): MnasNet-B1 of Tan et al., MnasNet (CVPR 2019) -- ReLU, no
  squeeze-excite, depths [32, 16, 24, 40, 80, 96, 192, 320], head 1280.
* "mnasnet-a1"     -- MnasNet-A1 (Tan et al. 2019, Fig. 7; the TF reference
  `mnasnet_models.py` `mnasnet_a1` block strings): squeeze-excite (ratio 0.25 of the
  block's input channels) in the 40-, 112- and 160-channel stages.
* "resnet-50"      -- He et al., ResNet (CVPR 2016) Table 1; torchvision `resnet.py`
  `resnet50` (v1.5: the stride on the 3x3 convolution of a bottleneck).
* "vgg-16"         -- Simonyan & Zisserman (ICLR 2015) Table 1 config D; torchvision
  `vgg.py` `vgg16` (no batch norm, biases, 7 x 7 adaptive average pool, 4096-4096-1000).
* "bert-base"      -- Devlin et al., BERT (NAACL 2019) §3: 12 layers, d 768, 12 heads,
  FFN 3072, GELU, post-LayerNorm; the encoder only (input: the embedding output
  [seq_len, 768]; PIMFlow §6.4's "1x64" input: seq_len 64).

Conventions: NHWC activations, HWIO weights, `lax.conv_general_dilated` (depthwise
through `feature_group_count`), explicit symmetric padding (k - 1) // 2 as torchvision
(MnasNet-A1's TF "same" padding differs only in where a stride-2 layer pads, not in
shapes or counts); batch norm folded for inference into a per-channel scale and bias
after the convolution (parameter count = torchvision's, whose BN has weight and bias);
global average pool and a [in, out] FC classifier.  fp16 by default.

Every layer is a *node*: a `jax.named_scope` around the primitives of one ONNX-like
node (a convolution with its folded BN, an activation, an add, a pool, an FC...).
`cnn_layers` traces `apply` from `jax.ShapeDtypeStruct`s (no weights) and reads the
nodes from the jaxpr: kinds, shapes, MACs and bytes come from the traced primitives,
not from a second hand-written table.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Callable, NamedTuple, Sequence

import jax
import jax.extend  # jax.extend.core: Jaxpr, ClosedJaxpr, Literal (the table reads the jaxpr)
import jax.numpy as jnp
import numpy as np
from jax import lax

# --------------------------------------------------------------------------- block tables

# MobileNetV2 (Sandler et al. 2018, Table 2 = torchvision inverted_residual_setting):
# expansion t, output channels c, repeats n, first stride s
MOBILENET_V2 = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))

# EfficientNet-B0 (Tan & Le 2019, Table 1 = torchvision _efficientnet_conf b0):
# expansion, kernel, first stride, input channels, output channels, repeats
EFFICIENTNET_B0 = ((1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2),
                   (6, 3, 2, 40, 80, 3), (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4),
                   (6, 3, 1, 192, 320, 1))

# torchvision mnasnet1_0 (MnasNet-B1) after the stem and its separable conv 32 -> 16:
# (input, output, kernel, first stride, expansion, repeats) = torchvision's _stack arguments
MNASNET1_0 = ((16, 24, 3, 2, 3, 3), (24, 40, 5, 2, 3, 3), (40, 80, 5, 2, 6, 3),
              (80, 96, 3, 1, 6, 2), (96, 192, 5, 2, 6, 4), (192, 320, 3, 1, 6, 1))

# MnasNet-A1 (TF reference mnasnet_a1 block strings "r2_k3_s22_e6_i16_o24" ...):
# (repeats, kernel, first stride, expansion, input, output, squeeze-excite ratio)
MNASNET_A1 = ((2, 3, 2, 6, 16, 24, 0.0), (3, 5, 2, 3, 24, 40, 0.25), (4, 3, 2, 6, 40, 80, 0.0),
              (2, 3, 1, 6, 80, 112, 0.25), (3, 5, 2, 6, 112, 160, 0.25), (1, 3, 1, 6, 160, 320, 0.0))

# ResNet-50 (He et al. 2016, Table 1): bottleneck widths and repeats per stage, expansion 4
RESNET_50 = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))

# VGG-16 (Simonyan & Zisserman 2015, config D): channels, "M" = 2x2 max pool
VGG_16 = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")

# BERT-base (Devlin et al. 2019): layers, d_model, heads, FFN
BERT_BASE = dict(layers=12, d_model=768, heads=12, d_ff=3072)

CNN_MODELS = ("mobilenet-v2", "efficientnet-b0", "mnasnet1_0", "mnasnet-a1", "resnet-50", "vgg-16", "bert-base")

# what the sources publish for 224 x 224, 1000 classes (tests check the traced table against
# these): torchvision's weights metadata (num_params; _ops = GMACs, which torchvision's docs
# call "GFLOPS") for the torchvision models; MnasNet-A1: Tan et al. 2019 Table 1 (3.9 M
# parameters, 312 M multiply-adds); BERT-base encoder: see tests (derived from BERT's sizes).
PUBLISHED = {"mobilenet-v2": dict(params=3_504_872, gmacs=0.30),
             "efficientnet-b0": dict(params=5_288_548, gmacs=0.39),
             "mnasnet1_0": dict(params=4_383_312, gmacs=0.31),
             "mnasnet-a1": dict(params=3.9e6, gmacs=0.312),
             "resnet-50": dict(params=25_557_032, gmacs=4.09),
             "vgg-16": dict(params=138_357_544, gmacs=15.47)}


@dataclass(frozen=True)
class CNNConfig:
    """One model instance.

    name: one of `CNN_MODELS`; resolution: input height = width (pixels; CNNs);
    width: channel multiplier (channels rounded to multiples of 8 as torchvision's
    `_make_divisible`; the 1280 heads of the mobile models are not reduced below 1280,
    as torchvision); blocks: keep only the first `blocks` blocks / stages' blocks
    (inverted residuals, bottlenecks, VGG convolutions, BERT layers) -- None: all;
    classes: classifier outputs; head: False drops the CNNs' head convolution, pool and
    classifier (apply returns the last block's feature map [1, H', W', C']); seq_len:
    BERT tokens; dtype: params and activations.
    """
    name: str
    resolution: int = 224
    width: float = 1.0
    blocks: int | None = None
    classes: int = 1000
    head: bool = True
    seq_len: int = 64
    dtype: str = "float16"

    def __post_init__(self):
        if self.name not in CNN_MODELS:
            raise ValueError(f"unknown model {self.name!r}; valid models: {list(CNN_MODELS)}")
        if self.resolution < 8:
            raise ValueError(f"{self.name}: resolution {self.resolution} < 8")

    @property
    def input_shape(self) -> tuple:
        """[1, H, W, 3] (NHWC) for the CNNs, [seq_len, 768] for BERT."""
        if self.name == "bert-base":
            return (self.seq_len, BERT_BASE["d_model"])
        return (1, self.resolution, self.resolution, 3)

    def input_spec(self) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct(self.input_shape, jnp.dtype(self.dtype))


def get_cnn_config(name: str, resolution: int = 224, **changes) -> CNNConfig:
    """The config of model `name` at `resolution` (other `CNNConfig` fields by keyword)."""
    return CNNConfig(name, resolution, **changes)


def _cfg(cfg) -> CNNConfig:
    return cfg if isinstance(cfg, CNNConfig) else get_cnn_config(cfg)


def _divisible(v: float, divisor: int = 8) -> int:
    """torchvision's `_make_divisible`: round to a multiple of 8, never below 90 % of v."""
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


# --------------------------------------------------------------------------- the builder

def _bc(v, like):
    """v [n] shaped to broadcast against like [..., n] (explicit: no rank promotion)."""
    return v.reshape((1,) * (like.ndim - v.ndim) + v.shape)


class _Net:
    """Parameter provider and node scopes shared by `init` and `apply`.

    With `params=None` it records parameter shapes (run under `jax.eval_shape`, so no
    array is made); otherwise it reads `params[name]`.  `ops` maps each node (a
    `jax.named_scope`) to its label (conv, act, add, pool, fc, ...)."""

    def __init__(self, cfg: CNNConfig, params: dict | None):
        self.cfg, self.params = cfg, params
        self.dtype = jnp.dtype(cfg.dtype)
        self.specs: dict[str, tuple] = {}      # name -> (shape, init rule, fan_in)
        self.ops: dict[str, str] = {}

    def ch(self, c: int) -> int:
        return c if self.cfg.width == 1.0 else _divisible(c * self.cfg.width)

    def param(self, name: str, shape: tuple, rule: str, fan_in: int = 1):
        if self.params is None:
            if name in self.specs:
                raise ValueError(f"duplicate parameter {name!r}")
            self.specs[name] = (tuple(shape), rule, fan_in)
            return jnp.zeros(shape, self.dtype)
        p = self.params[name]
        if tuple(p.shape) != tuple(shape):
            raise ValueError(f"parameter {name!r}: shape {tuple(p.shape)}, the model needs {tuple(shape)}")
        return p

    def node(self, name: str, op: str):
        if name in self.ops:
            raise ValueError(f"duplicate node {name!r}")
        self.ops[name] = op
        return jax.named_scope(name)

    # --- layers (each one node, an activation its own node as in ONNX graphs)

    def conv(self, name, x, cout, k, stride=1, groups=1, bn=True, bias=False, act=None):
        """x [1, H, W, C] -> [1, H', W', cout]; padding (k-1)//2; BN folded to scale + bias."""
        cin = x.shape[-1]
        fan_in = k * k * cin // groups
        with self.node(name, "conv"):
            w = self.param(f"{name}.w", (k, k, cin // groups, cout), "he" if act else "lecun", fan_in)
            p = (k - 1) // 2
            y = lax.conv_general_dilated(x, w, (stride, stride), ((p, p), (p, p)),
                                         dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                         feature_group_count=groups)
            if bn:
                y = y * _bc(self.param(f"{name}.bn_scale", (cout,), "scale"), y)
            if bn or bias:
                y = y + _bc(self.param(f"{name}.bias", (cout,), "bias"), y)
        return self.act(f"{name}.act", y, act) if act else y

    def act(self, name, x, kind):
        with self.node(name, "act"):
            if kind == "relu":
                return jax.nn.relu(x)
            if kind == "relu6":
                return jax.nn.relu6(x)
            if kind == "silu":
                return jax.nn.silu(x)
            if kind == "sigmoid":
                return jax.nn.sigmoid(x)
            if kind == "gelu":
                return jax.nn.gelu(x, approximate=False)
            raise ValueError(f"activation {kind!r}")

    def fc(self, name, x, out, act=None, bias=True):
        """x [M, in] @ W [in, out] (+ b): an FC (Gemm) node."""
        with self.node(name, "fc"):
            y = x @ self.param(f"{name}.w", (x.shape[-1], out), "he" if act else "lecun", x.shape[-1])
            if bias:
                y = y + _bc(self.param(f"{name}.b", (out,), "bias"), y)
        return self.act(f"{name}.act", y, act) if act else y

    def add(self, name, a, b):
        with self.node(name, "add"):
            return a + b

    def global_pool(self, name, x):
        """[1, H, W, C] -> [1, C] (mean, as torchvision's adaptive pool to 1 + flatten)."""
        with self.node(name, "pool"):
            return jnp.mean(x, axis=(1, 2))

    def max_pool(self, name, x, k, stride, pad):
        with self.node(name, "pool"):
            return lax.reduce_window(x, jnp.array(-jnp.inf, x.dtype), lax.max, (1, k, k, 1),
                                     (1, stride, stride, 1), ((0, 0), (pad, pad), (pad, pad), (0, 0)))

    def squeeze_excite(self, name, x, squeeze, act):
        """SE (Hu et al. 2018): pool -> FC squeeze -> act -> FC -> sigmoid -> scale x."""
        c = x.shape[-1]
        s = self.global_pool(f"{name}.pool", x)
        s = self.fc(f"{name}.fc1", s, squeeze, act=act)
        s = self.fc(f"{name}.fc2", s, c, act="sigmoid")
        with self.node(f"{name}.scale", "mul"):
            return x * s[:, None, None, :]

    def classifier(self, x):
        return self.fc("fc", self.global_pool("pool", x), self.cfg.classes)

    def blocks_kept(self, n_total: int) -> int:
        return n_total if self.cfg.blocks is None else min(self.cfg.blocks, n_total)


# --------------------------------------------------------------------------- the models

def _inverted_residual(net: _Net, name, x, cout, k, stride, expand, act, se_ch=0, se_act=None):
    """MBConv: [1x1 expand -> act] -> k x k depthwise -> act -> [SE] -> 1x1 project (+ x)."""
    cin = x.shape[-1]
    h = x
    mid = cin * expand
    if expand != 1:
        h = net.conv(f"{name}.expand", h, mid, 1, act=act)
    h = net.conv(f"{name}.dw", h, mid, k, stride, groups=mid, act=act)
    if se_ch:
        h = net.squeeze_excite(f"{name}.se", h, se_ch, se_act)
    h = net.conv(f"{name}.project", h, cout, 1)
    if stride == 1 and cin == cout:
        h = net.add(f"{name}.add", x, h)
    return h


def _mbconv_net(net: _Net, x, act: str, blocks: list, head_ch: int, separable: bool = False):
    """The MobileNet-V2 / EfficientNet / MnasNet skeleton: a 3 x 3 stride-2 stem
    to 32 channels, [MnasNet's separable 3 x 3 conv to 16], the MBConv blocks
    (cout, k, stride, expand, se) -- se(cin) gives a block's squeeze-excite
    channels (0: none) --, then [a 1 x 1 head conv to `head_ch` and the
    classifier]; every activation, SE's included, is `act`."""
    x = net.conv("stem", x, net.ch(32), 3, 2, act=act)
    if separable:       # torchvision: the separable conv 32 -> 16 (depthwise + pointwise, no residual)
        x = net.conv("sep.dw", x, x.shape[-1], 3, 1, groups=x.shape[-1], act=act)
        x = net.conv("sep.project", x, net.ch(16), 1)
    for b, (c, k, s, e, se) in enumerate(blocks[:net.blocks_kept(len(blocks))]):
        x = _inverted_residual(net, f"b{b}", x, net.ch(c), k, s, e, act, se(x.shape[-1]), act)
    if not net.cfg.head:
        return x
    x = net.conv("head", x, head_ch, 1, act=act)
    return net.classifier(x)


def _no_se(cin: int) -> int:
    return 0


def _mobilenet_v2(net: _Net, x):
    blocks = [(c, 3, s if i == 0 else 1, t, _no_se) for t, c, n, s in MOBILENET_V2 for i in range(n)]
    return _mbconv_net(net, x, "relu6", blocks, _divisible(1280 * max(1.0, net.cfg.width)))


def _efficientnet_b0(net: _Net, x):
    quarter = lambda cin: max(1, cin // 4)         # noqa: E731 - SE ratio 0.25 of the block's input
    blocks = [(c, k, s if i == 0 else 1, e, quarter) for e, k, s, _, c, n in EFFICIENTNET_B0 for i in range(n)]
    return _mbconv_net(net, x, "silu", blocks, _divisible(1280 * max(1.0, net.cfg.width)))


def _mnasnet1_0(net: _Net, x):
    blocks = [(c, k, s if i == 0 else 1, e, _no_se) for _, c, k, s, e, n in MNASNET1_0 for i in range(n)]
    return _mbconv_net(net, x, "relu", blocks, 1280, separable=True)


def _mnasnet_a1(net: _Net, x):
    def se_of(ratio):     # TF: int(input_filters * se_ratio)
        return (lambda cin: max(1, int(cin * ratio))) if ratio else _no_se
    blocks = [(c, k, s if i == 0 else 1, e, se_of(se)) for n, k, s, e, _, c, se in MNASNET_A1 for i in range(n)]
    return _mbconv_net(net, x, "relu", blocks, 1280, separable=True)


def _resnet_50(net: _Net, x):
    x = net.conv("stem", x, net.ch(64), 7, 2, act="relu")
    x = net.max_pool("stem.pool", x, 3, 2, 1)
    specs = [(w, s if i == 0 else 1, i == 0) for w, n, s in RESNET_50 for i in range(n)]
    for b, (w, s, first) in enumerate(specs[:net.blocks_kept(len(specs))]):
        w, out = net.ch(w), net.ch(4 * w)
        h = net.conv(f"b{b}.conv1", x, w, 1, act="relu")
        h = net.conv(f"b{b}.conv2", h, w, 3, s, act="relu")
        h = net.conv(f"b{b}.conv3", h, out, 1)
        if first:          # torchvision: a downsample (1x1 conv, stride, BN) on each stage's first block
            x = net.conv(f"b{b}.down", x, out, 1, s)
        x = net.act(f"b{b}.act", net.add(f"b{b}.add", x, h), "relu")
    return net.classifier(x) if net.cfg.head else x


def _adaptive_pool7(net: _Net, x):
    """torchvision's AdaptiveAvgPool2d((7, 7)) where it is a plain operation: identity at
    7 x 7, a mean over equal windows when 7 divides H, a repeat when H divides 7."""
    h = x.shape[1]
    if h == 7:
        return x
    with net.node("avgpool", "pool"):
        if h % 7 == 0:
            r = h // 7
            return x.reshape(1, 7, r, 7, r, x.shape[-1]).mean(axis=(2, 4)).astype(x.dtype)
        if 7 % h == 0:
            return jnp.repeat(jnp.repeat(x, 7 // h, axis=1), 7 // h, axis=2)
    raise ValueError(f"vgg-16: features end at {h} x {h}; the 7 x 7 adaptive pool is implemented only "
                     "where 7 divides the size or the size divides 7 (resolution 224, 32, 448, ...)")


def _vgg_16(net: _Net, x):
    n_conv = sum(1 for v in VGG_16 if v != "M")
    keep, i, p = net.blocks_kept(n_conv), 0, 0
    for v in VGG_16:
        if v == "M":
            x = net.max_pool(f"pool{p}", x, 2, 2, 0)
            p += 1
        elif i < keep:
            x = net.conv(f"conv{i}", x, net.ch(v), 3, bn=False, bias=True, act="relu")
            i += 1
    if not net.cfg.head:
        return x
    x = _adaptive_pool7(net, x)
    with net.node("flatten", "other"):
        x = x.reshape(1, -1)
    hidden = net.ch(4096)
    x = net.fc("fc0", x, hidden, act="relu")
    x = net.fc("fc1", x, hidden, act="relu")
    return net.fc("fc2", x, net.cfg.classes)


def _layer_norm(net: _Net, name, x):
    with net.node(name, "norm"):
        d = x.shape[-1]
        g = net.param(f"{name}.g", (d,), "scale")
        b = net.param(f"{name}.b", (d,), "bias")
        h = x.astype(jnp.float32)
        h = h - h.mean(-1, keepdims=True)
        h = h * lax.rsqrt((h * h).mean(-1, keepdims=True) + 1e-12)
        return h.astype(x.dtype) * _bc(g, x) + _bc(b, x)


def _bert_base(net: _Net, x):
    H, F = BERT_BASE["heads"], BERT_BASE["d_ff"]
    S, d = x.shape
    hd = d // H
    for i in range(net.blocks_kept(BERT_BASE["layers"])):
        n = f"l{i}"
        q, k, v = (net.fc(f"{n}.{t}", x, d) for t in "qkv")
        with net.node(f"{n}.scores", "matmul"):
            q, k = q.reshape(S, H, hd), k.reshape(S, H, hd)
            s = jnp.einsum("qhd,khd->hqk", q, k) / q.dtype.type(math.sqrt(hd))
        with net.node(f"{n}.softmax", "softmax"):
            p = jax.nn.softmax(s.astype(jnp.float32), axis=-1).astype(x.dtype)
        with net.node(f"{n}.context", "matmul"):
            o = jnp.einsum("hqk,khd->qhd", p, v.reshape(S, H, hd)).reshape(S, d)
        x = _layer_norm(net, f"{n}.ln1", net.add(f"{n}.add1", x, net.fc(f"{n}.o", o, d)))
        h = net.fc(f"{n}.ffn_up", x, F, act="gelu")
        x = _layer_norm(net, f"{n}.ln2", net.add(f"{n}.add2", x, net.fc(f"{n}.ffn_down", h, d)))
    return x


_FORWARD = {"mobilenet-v2": _mobilenet_v2, "efficientnet-b0": _efficientnet_b0, "mnasnet1_0": _mnasnet1_0,
            "mnasnet-a1": _mnasnet_a1, "resnet-50": _resnet_50, "vgg-16": _vgg_16, "bert-base": _bert_base}


# --------------------------------------------------------------------------- init / apply

def param_specs(cfg) -> dict:
    """{name: (shape, init rule, fan_in)} of `cfg`'s parameters, found by tracing the
    model's forward abstractly (no arrays)."""
    cfg = _cfg(cfg)
    net = _Net(cfg, None)
    jax.eval_shape(lambda x: _FORWARD[cfg.name](net, x), cfg.input_spec())
    return net.specs


def param_shapes(cfg) -> dict:
    """{name: jax.ShapeDtypeStruct} of `cfg`'s parameters (for tracing without weights)."""
    cfg = _cfg(cfg)
    return {k: jax.ShapeDtypeStruct(s, jnp.dtype(cfg.dtype)) for k, (s, _, _) in param_specs(cfg).items()}


def init(key, cfg) -> dict:
    """Random parameters {name: array [shape] of cfg.dtype}: conv / FC weights normal with
    std sqrt(2 / fan_in) before a ReLU-like activation (He), sqrt(1 / fan_in) otherwise, so
    activations stay O(1) through the depth in fp16; BN scales 1 + 0.1 N(0, 1); biases
    0.1 N(0, 1).  Weights [k, k, C / groups, F] (HWIO) for convolutions, [in, out] for FC."""
    cfg = _cfg(cfg)
    # numpy draws seeded from the key: one jax.random call per shape would compile once per
    # distinct shape (hundreds of XLA compiles for a CNN)
    rng = np.random.default_rng(np.asarray(jax.random.key_data(key)).ravel().tolist())
    out = {}
    for name, (shape, rule, fan_in) in sorted(param_specs(cfg).items()):
        z = rng.standard_normal(shape, dtype=np.float32)
        if rule == "he":
            v = z * math.sqrt(2.0 / fan_in)
        elif rule == "lecun":
            v = z * math.sqrt(1.0 / fan_in)
        elif rule == "scale":
            v = 1.0 + 0.1 * z
        else:
            v = 0.1 * z
        out[name] = jnp.asarray(v.astype(cfg.dtype))
    return out


def make_apply(cfg) -> Callable:
    """`apply(params, x)` of `cfg`: x [1, H, W, 3] NHWC -> logits [1, classes] (CNNs;
    the feature map [1, H', W', C'] with `head=False`);
    x [seq_len, 768] -> [seq_len, 768] (BERT's encoder)."""
    cfg = _cfg(cfg)

    def apply(params, x):
        return _FORWARD[cfg.name](_Net(cfg, params), x)

    apply.__name__ = cfg.name.replace("-", "_")
    return apply


def random_input(key, cfg):
    """A normal random input of `cfg.input_shape`."""
    cfg = _cfg(cfg)
    return jax.random.normal(key, cfg.input_shape, jnp.float32).astype(cfg.dtype)


# --------------------------------------------------------------------------- layer table

@dataclass(frozen=True)
class Layer:
    """One node of the traced model, in topological order.

    kind: "conv" | "dwconv" (groups = C > 1) | "fc" (a matmul with a weight) | "other";
    op: the node's label (conv, act, add, pool, fc, mul, norm, matmul, softmax, other);
    H, W, C: the node's first activation input, F, Ho, Wo its output (NHWC
    [1, H, W, C]; a 2-D [M, C] reads as H = 1, W = M; 3-D [A, B, C] as H = A, W = B);
    K: kernel height (1 for FC, 0 for other), stride, groups (conv; 1 otherwise);
    macs: multiply-accumulates of its contractions; flops: 2 macs plus one per element
    of every elementwise / reduction primitive (layout primitives cost none);
    weight_bytes: parameters it reads; in_bytes / out_bytes: activations it reads
    (produced by other nodes, or the model input) / writes (read by other nodes or
    returned); inputs / consumers: node indices (-1: the model input);
    pim_candidate: PIMFlow §4.2.1 -- CONV except depthwise and FC nodes;
    contraction: the node's position among the model's contractions (convolutions and
    dot_generals, in trace order; -1: none) -- the k-th contraction op of
    `pimjax.make_graph(apply, ...)` (`match_graph`).
    """
    index: int
    name: str
    op: str
    kind: str
    H: int
    W: int
    C: int
    Ho: int
    Wo: int
    F: int
    K: int
    stride: int
    groups: int
    macs: int
    flops: int
    weight_bytes: int
    in_bytes: int
    out_bytes: int
    inputs: tuple
    consumers: tuple
    pim_candidate: bool
    contraction: int = -1

    @property
    def act_bytes(self) -> int:
        return self.in_bytes + self.out_bytes

    @property
    def gemm(self) -> tuple[int, int, int]:
        """(M, K, N) of the node as `groups` GEMMs after im2col lowering (PIMFlow §2: a 1x1
        CONV is an FC layer): M = Ho Wo output pixels (FC: its rows), K = K^2 C / groups,
        N = F / groups; (0, 0, 0) for "other" nodes.  groups M K N = macs."""
        if self.kind == "other":
            return 0, 0, 0
        return self.Ho * self.Wo, self.K * self.K * self.C // self.groups, self.F // self.groups


_LAYOUT = {"reshape", "broadcast_in_dim", "convert_element_type", "transpose", "squeeze", "expand_dims",
           "slice", "concatenate", "pad", "copy", "copy_p", "dynamic_slice", "dynamic_update_slice",
           "gather", "select_n", "iota", "stop_gradient"}


def _sub_jaxprs(eqn):
    for v in eqn.params.values():
        for j in (v if isinstance(v, (tuple, list)) else (v,)):
            if isinstance(j, jax.extend.core.ClosedJaxpr):
                yield j.jaxpr
            elif isinstance(j, jax.extend.core.Jaxpr):
                yield j


def _size(aval) -> int:
    return int(np.prod(aval.shape, dtype=np.int64))


def _eqn_cost(eqn) -> tuple[int, int]:
    """(macs, flops) of one eqn, nested calls (jit, custom_jvp) summed."""
    subs = list(_sub_jaxprs(eqn))
    if subs:
        macs = flops = 0
        for j in subs[:1]:          # custom_jvp / custom_vjp: the primal jaxpr is the first
            for e in j.eqns:
                m, f = _eqn_cost(e)
                macs, flops = macs + m, flops + f
        return macs, flops
    name = eqn.primitive.name
    out = _size(eqn.outvars[0].aval)
    if name == "conv_general_dilated":
        rhs = eqn.invars[1].aval.shape
        spec = eqn.params["dimension_numbers"].rhs_spec     # (out feature, in feature, spatial...)
        per_out = int(np.prod([rhs[d] for d in spec[1:]]))
        return out * per_out, 2 * out * per_out
    if name == "dot_general":
        (lc, _), _ = eqn.params["dimension_numbers"]
        k = int(np.prod([eqn.invars[0].aval.shape[d] for d in lc]))
        return out * k, 2 * out * k
    if name in _LAYOUT:
        return 0, 0
    if name.startswith("reduce") or name in ("argmax", "argmin", "cumsum"):
        return 0, _size(eqn.invars[0].aval)
    return 0, out


def _hwc(shape) -> tuple[int, int, int]:
    if len(shape) == 4:
        return tuple(int(s) for s in shape[1:])
    if len(shape) == 3:
        return tuple(int(s) for s in shape)
    if len(shape) == 2:
        return 1, int(shape[0]), int(shape[1])
    return 1, 1, int(np.prod(shape, dtype=np.int64))


def layer_records(cfg) -> list[Layer]:
    """The node table of `cfg` (module docstring): `apply` traced by `jax.make_jaxpr` from
    `jax.ShapeDtypeStruct`s; each node is one named scope's run of primitives."""
    cfg = _cfg(cfg)
    shapes = param_shapes(cfg)
    net_box = {}

    def traced(params, x):
        net = net_box["net"] = _Net(cfg, params)
        return _FORWARD[cfg.name](net, x)

    closed = jax.make_jaxpr(traced)(shapes, cfg.input_spec())
    jaxpr = closed.jaxpr
    ops = net_box["net"].ops
    n_params = len(jax.tree_util.tree_leaves(shapes))
    param_vars = set(jaxpr.invars[:n_params])
    x_var = jaxpr.invars[n_params]

    # consecutive eqns of one scope form a node; an eqn outside every scope is its own node
    groups: list[tuple[str, list]] = []
    for n, e in enumerate(jaxpr.eqns):
        scope = str(e.source_info.name_stack).split("/")[0]
        if scope and groups and groups[-1][0] == scope:
            groups[-1][1].append(e)
        else:
            groups.append((scope or f"{e.primitive.name}@{n}", [e]))
    names = [g[0] for g in groups]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"{cfg.name}: nodes {dup[:5]} are not contiguous runs of primitives")

    producer = {x_var: -1}
    for i, (_, eqns) in enumerate(groups):
        for e in eqns:
            for v in e.outvars:
                producer[v] = i
    outvars = {v for v in jaxpr.outvars if not isinstance(v, jax.extend.core.Literal)}

    reads: list[list] = []
    consumers: list[set] = [set() for _ in groups]
    for i, (_, eqns) in enumerate(groups):
        seen = []
        for e in eqns:
            for v in e.invars:
                if isinstance(v, jax.extend.core.Literal) or v in param_vars:
                    continue
                p = producer.get(v)
                if p is not None and p != i and v not in seen:
                    seen.append(v)
                    if p >= 0:
                        consumers[p].add(i)
        reads.append(seen)

    read_outside = {v for r in reads for v in r}     # values some node reads from another

    def nbytes(v):
        return _size(v.aval) * v.aval.dtype.itemsize

    rows = []
    n_contractions = 0
    for i, (name, eqns) in enumerate(groups):
        macs = flops = 0
        wbytes = 0
        wseen = set()
        conv = dot = None
        for e in eqns:
            m, f = _eqn_cost(e)
            macs, flops = macs + m, flops + f
            for v in e.invars:
                if not isinstance(v, jax.extend.core.Literal) and v in param_vars and v not in wseen:
                    wseen.add(v)
                    wbytes += nbytes(v)
            if e.primitive.name == "conv_general_dilated" and conv is None:
                conv = e
            if e.primitive.name == "dot_general" and dot is None:
                dot = e
        contraction = -1
        if conv is not None or dot is not None:
            contraction = n_contractions
            n_contractions += sum(e.primitive.name in ("conv_general_dilated", "dot_general") for e in eqns)
        outs = [v for e in eqns for v in e.outvars if v in outvars or v in read_outside]
        out_v = outs[0] if outs else eqns[-1].outvars[0]
        in_v = reads[i][0] if reads[i] else None
        H, W, C = _hwc(in_v.aval.shape) if in_v is not None else (0, 0, 0)
        Ho, Wo, F = _hwc(out_v.aval.shape)
        op = ops.get(name, "other")
        K, stride, groups_ = 0, 1, 1
        if conv is not None:
            rhs = conv.invars[1].aval.shape
            K = int(rhs[0])
            stride = int(conv.params["window_strides"][0])
            groups_ = int(conv.params["feature_group_count"])
            C = int(conv.invars[0].aval.shape[-1])
            kind = "dwconv" if groups_ > 1 and groups_ == C else "conv"
        elif dot is not None and any(v in param_vars for v in dot.invars):
            K, kind = 1, "fc"
        else:
            kind = "other"
        rows.append(Layer(
            index=i, name=name, op=op, kind=kind, H=H, W=W, C=C, Ho=Ho, Wo=Wo, F=F, K=K, stride=stride,
            groups=groups_, macs=macs, flops=flops, weight_bytes=wbytes,
            in_bytes=sum(nbytes(v) for v in reads[i]), out_bytes=sum(nbytes(v) for v in outs),
            inputs=tuple(sorted(producer[v] for v in reads[i])), consumers=tuple(sorted(consumers[i])),
            pim_candidate=kind in ("conv", "fc"), contraction=contraction))
    return rows


def match_graph(table, graph) -> dict[int, int]:
    """{table row: index into graph.ops} for the rows holding a contraction, `graph` =
    `pimjax.make_graph(make_apply(cfg), param_shapes(cfg), cfg.input_spec())` of the
    same config: the k-th contraction op (a convolution or dot_general, its epilogue
    fused or not) is the node whose `contraction` is k.  ValueError when the counts or
    the output sizes disagree (a graph of another model or resolution)."""
    rows = [r for r in _rows(table) if r.contraction >= 0]
    ops = [i for i, op in enumerate(graph.ops) if op.kind == "contraction"]
    if len(ops) != (rows[-1].contraction + 1 if rows else 0):
        raise ValueError(f"the graph has {len(ops)} contractions, the table {len(rows)} nodes with one")
    out = {}
    for r in rows:
        i = ops[r.contraction]
        size = int(np.prod(graph.values[graph.ops[i].results[0].value].shape))
        if r.macs and size != r.Ho * r.Wo * r.F:
            raise ValueError(f"node {r.name}: output of {r.Ho * r.Wo * r.F} elements, graph op {i} {size}")
        out[r.index] = i
    return out


def to_dataframe(records: Sequence[Layer]):
    """The records as a pandas DataFrame (one row per node, `Layer`'s fields + act_bytes and
    gemm_m, gemm_k, gemm_n from `Layer.gemm`)."""
    import pandas as pd
    df = pd.DataFrame([asdict(r) for r in records], columns=[f.name for f in fields(Layer)])
    df["act_bytes"] = df["in_bytes"] + df["out_bytes"]
    gemm = [r.gemm for r in records]
    for i, c in enumerate(("gemm_m", "gemm_k", "gemm_n")):
        df[c] = [g[i] for g in gemm]
    return df


def cnn_layers(name, resolution: int = 224, **changes):
    """The layer table of model `name` (or a `CNNConfig`) at `resolution` as a DataFrame
    (`Layer`); costs no weights (traced from shapes)."""
    cfg = name if isinstance(name, CNNConfig) else get_cnn_config(name, resolution, **changes)
    return to_dataframe(layer_records(cfg))


# --------------------------------------------------------------------------- pipelining patterns

class Pattern(NamedTuple):
    """A pipelining candidate: table rows start .. start + length - 1 (activations between
    the matched nodes included), `pattern` one of `PATTERNS`."""
    start: int
    length: int
    pattern: str


PATTERNS = ("1x1-DW-1x1", "1x1-DW", "DW-1x1")


def _rows(table) -> list:
    if isinstance(table, (list, tuple)):
        return list(table)
    return [Layer(**{f.name: r[f.name] for f in fields(Layer)}) for r in table.to_dict("records")]


def find_patterns(table, patterns: Sequence[str] = PATTERNS) -> list[Pattern]:
    """PIMFlow §4.2.2 / §5's pipelining subgraphs in a layer table (DataFrame or records):
    consecutive nodes 1x1 CONV -> DW CONV (-> 1x1 CONV), with activation nodes between them
    skipped, each node's output read only by the next (a single consumer; the last node's
    output may have several).  "1x1" is a pointwise convolution (K 1, groups 1), "DW" a
    depthwise one.  Every match of every pattern is returned (a 1x1-DW-1x1 also yields its
    1x1-DW and DW-1x1), sorted by start; Algorithm 1 chooses among them."""
    rows = _rows(table)
    unknown = set(patterns) - set(PATTERNS)
    if unknown:
        raise ValueError(f"patterns {sorted(unknown)} not in {PATTERNS}")

    def sym(r):
        if r.kind == "dwconv":
            return "DW"
        if r.kind == "conv" and r.K == 1 and r.groups == 1:
            return "1x1"
        return None

    def next_main(i):
        """The node after row i along a single-consumer chain, activations skipped."""
        j = i
        while True:
            if len(rows[j].consumers) != 1 or rows[j].consumers[0] != j + 1:
                return None
            j += 1
            if rows[j].op != "act" or len(rows[j].inputs) != 1:
                return j

    out = []
    for i, r in enumerate(rows):
        chain = [i]
        while len(chain) < 3:
            j = next_main(chain[-1])
            if j is None or sym(rows[j]) is None:
                break
            chain.append(j)
        syms = [sym(rows[k]) for k in chain]
        for p in patterns:
            want = p.split("-")
            if syms[:len(want)] == want and None not in want:
                out.append(Pattern(i, chain[len(want) - 1] - i + 1, p))
    return sorted(out)
