"""Real GPU kernel times beside pimjax's GPU models (issue #25, item 2).

    # on a machine with a CUDA GPU (PyTorch and JAX with CUDA installed):
    python3 benchmarks/gpu_kernels.py --measure OUT.json
    # anywhere: the measured table beside the models (default file: benchmarks/data/gpu_kernels_h100.json)
    .venv/bin/python benchmarks/gpu_kernels.py [--data OUT.json] [--markdown]

What is measured (fp16, every case on fresh random data):

* the DCC kernel set at the paper's sizes (DCC §V, Fig. 6, 7, 9): the attention
  layer's per-head GEMV (`mmtv` [B, 32, L, 128]), attention (`attn`), row reduction
  (`red` [B, E]), vector add (`va`) and ReLU;
* decode attention: GPT-3 13B at tensor-parallel 8 (5 heads, L 2 049, d 128; the
  attacc.md end-to-end row), all 40 heads, LLaMA-2 7B (32 heads, L 4 096, batch 1 and
  16), as model code writes it (score einsum, softmax, context einsum: three kernels)
  and fused (PyTorch `scaled_dot_product_attention`);
* the LLM layers' weight GEMVs y = W x (GPT-3 13B QKV / projection / FFN, LLaMA-2 7B);
* calibration: the launch of a one-element kernel and a 1 GiB device copy;
* CNN convolutions (set "cnn"): every CONV / DW CONV shape of the five CNNs PIMFlow
  evaluates (`pimjax.models.cnn.cnn_layers` of mobilenet-v2, efficientnet-b0, mnasnet1_0,
  resnet-50, vgg-16 at 224 x 224, batch 1, deduplicated: 99 shapes, 1 x 1, 3 x 3, 7 x 7,
  depthwise 3 x 3 / 5 x 5), fp16 NHWC, no bias: cuDNN through PyTorch (channels_last,
  `cudnn.benchmark` on: the fastest algorithm, as TVM's cudnnFind in PIMFlow) and through
  XLA (`lax.conv_general_dilated` NHWC / HWIO);
* GEMMs (set "gemm"): BERT-base's FC layers at 3 and 64 tokens (PIMFlow §6.4) and the LLM
  layers' weight products at prefill (128 and 2 048 tokens);
* prefill attention (set "prefill"): a prompt of L tokens attending to itself (no mask), as
  three kernels (score, softmax, context) and fused (sdpa);
* normalisation and elementwise ops (set "norm"): LayerNorm over LLM / BERT rows, row
  softmax, and maps (ReLU, GELU, SiLU, add) at CNN activation and LLM prefill sizes.

Three clocks per case:

* ``graph`` -- PyTorch ops captured in a CUDA graph (R calls), replayed and timed
  with CUDA events: the kernels' GPU time with the least launch cost there is;
* ``stream`` -- the same R calls issued eagerly back to back in one stream, events
  around them: GPU time plus what PyTorch's eager launch path adds per kernel;
* ``jax`` -- `jax.jit` of the jnp function, R calls dispatched, one
  `block_until_ready`: what a jnp user sees per call.

Every clock cycles over enough copies of the operands (at least 4 x the L2 cache,
50 MB on an H100) that each call reads its operands from DRAM, as a decode step
does (the other layers' weights and caches evict them).  The measurement needs no
pimjax (the CNN shapes come from benchmarks/data/cnn_conv_shapes.json, written by
`--write-shapes` here from `cnn_layers`); the table step reads the JSON and times every
case on the GPU models of `pimjax/hw/gpu.py` for the measured GPU (`pimjax.hw.host.h100`).
Small cases (a CNN layer, a norm row) rotate over at most the 40 copies one timed batch
calls, so their operands may come from L2, as a network's activations do.

`class_ratios(data)` (`--classes`) gives, per kernel class a GPU model times (GEMV, GEMM,
convolution, depthwise convolution, decode / prefill attention, reduction / softmax,
normalisation, elementwise, launch / copy), the distribution of model / measured on every
GPU model, and "not measured" for a class the file has no case of.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

L2_BYTES = 50 * 1024 * 1024          # H100 SXM5: 50 MB L2 (NVIDIA H100 whitepaper); rotation target below
ROTATE_BYTES = 4 * L2_BYTES          # `measure` raises it to 4 x the L2 the measured GPU reports
MAX_COPIES = 64
HERE = os.path.dirname(os.path.abspath(__file__))
CNN_SHAPES = os.path.join(HERE, "data", "cnn_conv_shapes.json")
CNN_MODELS = ("mobilenet-v2", "efficientnet-b0", "mnasnet1_0", "resnet-50", "vgg-16")   # PIMFlow §5's five CNNs
BERT_BASE_FC = (("qkv", 768, 768), ("out", 768, 768), ("ffn1", 3072, 768), ("ffn2", 768, 3072))  # (name, N, K):
                                     #   BERT-base (Devlin et al. 2019): d 768, FFN 3072 (pimjax.models.cnn BERT_BASE)
LLM_FC = (("gpt3-13b qkv", 15360, 5120), ("gpt3-13b proj", 5120, 5120), ("gpt3-13b ffn1", 20480, 5120),
          ("gpt3-13b ffn2", 5120, 20480), ("llama2-7b qkv", 12288, 4096), ("llama2-7b up", 11008, 4096),
          ("llama2-7b down", 4096, 11008))   # (name, N, K): the decode GEMVs' weights (set "llm")
CLASSES = ("gemv", "gemm", "conv 1x1", "conv kxk", "dwconv", "decode attention", "prefill attention",
           "reduction / softmax", "normalisation", "elementwise", "launch / copy")


def cases() -> list[dict]:
    """The measured cases: name, kind and shape (see the module docstring)."""
    out = []
    for b in (1, 4, 8):
        for L in (512, 1024, 2048):
            out.append(dict(set="dcc", kind="mmtv", B=b, H=32, L=L, D=128))
    for b in (1, 4):
        for L in (512, 1024):
            out.append(dict(set="dcc", kind="attn", B=b, H=32, L=L, D=128))
    for k in ("red", "va", "relu"):
        for b in (1, 4):
            for e in (1024, 2048, 4096):
                out.append(dict(set="dcc", kind=k, B=b, E=e))
    for name, b, h, L in (("gpt3-13b tp8", 1, 5, 2049), ("gpt3-13b", 1, 40, 2049),
                          ("llama2-7b", 1, 32, 4096), ("llama2-7b b16", 16, 32, 4096)):
        out.append(dict(set="decode", kind="attn", name=name, B=b, H=h, L=L, D=128))
    for name, n, k in LLM_FC:
        out.append(dict(set="llm", kind="gemv", name=name, N=n, K=k))
    out.append(dict(set="calib", kind="launch"))
    out.append(dict(set="calib", kind="copy", bytes=1 << 30))
    # --- the classes the models time beyond GEMVs (issue 41): CNN layers, GEMMs, prefill, norms, maps
    for sh in cnn_conv_shapes():
        out.append(dict(set="cnn", kind="conv", **sh))
    for tokens in (3, 64):
        for name, n, k in BERT_BASE_FC:
            out.append(dict(set="gemm", kind="gemm", name=f"bert-base {name} x{tokens}", M=tokens, N=n, K=k))
    for tokens in (128, 2048):
        for name, n, k in LLM_FC:
            out.append(dict(set="gemm", kind="gemm", name=f"{name} x{tokens}", M=tokens, N=n, K=k))
    for name, h, L in (("gpt3-13b tp8", 5, 2048), ("llama2-7b", 32, 512), ("llama2-7b", 32, 2048),
                       ("bert-base", 12, 64)):
        out.append(dict(set="prefill", kind="prefill", name=f"prefill {name} L{L}", B=1, H=h, L=L,
                        D=64 if name == "bert-base" else 128))
    for t, e in ((1, 4096), (128, 4096), (2048, 4096), (2048, 5120), (64, 768)):
        out.append(dict(set="norm", kind="layernorm", T=t, E=e))
    for r, L in ((32 * 2048, 2048), (12 * 64, 64), (40, 2049)):
        out.append(dict(set="norm", kind="softmax", R=r, L=L))
    for op in ("relu", "gelu", "silu", "add"):
        for n in (112 * 112 * 96, 14 * 14 * 576, 2048 * 11008):
            out.append(dict(set="norm", kind="map", op=op, N=n))
    return out


def cnn_conv_shapes(path: str = CNN_SHAPES) -> list[dict]:
    """The deduplicated CONV / DW CONV shapes of PIMFlow's five CNNs (H, W, C, F, K,
    stride, groups; batch 1, 224 x 224), as `write_cnn_shapes` stored them (no pimjax
    needed on the measuring machine); [] when the file is missing."""
    if not os.path.exists(path):
        return []
    with open(path) as fh:
        return json.load(fh)["shapes"]


def derive_cnn_shapes(models=CNN_MODELS) -> list[dict]:
    """The same list from `pimjax.models.cnn.cnn_layers` (here, with pimjax): every
    CONV / DW CONV node's (H, W, C, F, K, stride, groups), first occurrence order."""
    from pimjax.models import cnn
    seen: dict = {}
    for m in models:
        for r in cnn.cnn_layers(m).to_dict("records"):
            if r["kind"] in ("conv", "dwconv"):
                key = tuple(int(r[k]) for k in ("H", "W", "C", "F", "K", "stride", "groups"))
                seen.setdefault(key, [])
                if m not in seen[key]:
                    seen[key].append(m)
    return [dict(zip(("H", "W", "C", "F", "K", "stride", "groups"), k), models=v) for k, v in seen.items()]


def write_cnn_shapes(path: str = CNN_SHAPES) -> None:
    """Store `derive_cnn_shapes()` for the measuring machine."""
    source = ("pimjax.models.cnn.cnn_layers, 224 x 224, batch 1: CONV / DW CONV nodes of " + ", ".join(CNN_MODELS)
              + " (deduplicated; written by benchmarks/gpu_kernels.py --write-shapes)")
    lines = ",\n  ".join(json.dumps(sh) for sh in derive_cnn_shapes())
    with open(path, "w") as fh:
        fh.write(f'{{"source": {json.dumps(source)},\n "shapes": [\n  {lines}\n ]}}\n')


def label(c: dict) -> str:
    if c.get("name"):
        return c["name"]
    if c["kind"] in ("mmtv", "attn"):
        return f"{c['kind']} {c['B']}x{c['H']}x{c['L']}x{c['D']}"
    if c["kind"] in ("red", "va", "relu"):
        return f"{c['kind']} {c['B']}x{c['E']}"
    if c["kind"] == "conv":
        dw = " dw" if c["groups"] > 1 else ""
        return f"conv{dw} {c['K']}x{c['K']}/{c['stride']} {c['H']}x{c['W']}x{c['C']}->{c['F']}"
    if c["kind"] == "layernorm":
        return f"layernorm {c['T']}x{c['E']}"
    if c["kind"] == "softmax":
        return f"softmax {c['R']}x{c['L']}"
    if c["kind"] == "map":
        return f"{c['op']} {c['N']}"
    return c["kind"]


def kernel_class(c: dict) -> str:
    """The class of GPU-model kernel a case measures (one of `CLASSES`)."""
    k = c["kind"]
    if k in ("gemv", "mmtv"):
        return "gemv"
    if k == "gemm":
        return "gemm"
    if k == "conv":
        return "dwconv" if c["groups"] > 1 else ("conv 1x1" if c["K"] == 1 else "conv kxk")
    if k == "attn":
        return "decode attention"
    if k == "prefill":
        return "prefill attention"
    if k in ("red", "softmax"):
        return "reduction / softmax"
    if k == "layernorm":
        return "normalisation"
    if k in ("va", "relu", "map"):
        return "elementwise"
    if k in ("launch", "copy"):
        return "launch / copy"
    raise ValueError(f"kernel_class: unknown case kind {k!r}")


# ---------------------------------------------------------------------------
# measuring (a CUDA machine; no pimjax import)
# ---------------------------------------------------------------------------
def _conv_pad(c: dict) -> int:
    return (c["K"] - 1) // 2          # torchvision's (k - 1) // 2, as cnn_layers


def _operands(c: dict, lib: str = "torch") -> list[tuple]:
    """Operand shapes of case c for "torch" (NCHW convolutions, made channels_last) or "jax" (NHWC / HWIO)."""
    k = c["kind"]
    if k == "conv":
        cin = c["C"] // c["groups"]
        if lib == "jax":
            return [(1, c["H"], c["W"], c["C"]), (c["K"], c["K"], cin, c["F"])]
        return [(1, c["C"], c["H"], c["W"]), (c["F"], cin, c["K"], c["K"])]
    if k == "gemm":
        return [(c["M"], c["K"]), (c["N"], c["K"])]
    if k == "prefill":
        return [(c["B"], c["H"], c["L"], c["D"])] * 3
    if k == "layernorm":
        return [(c["T"], c["E"]), (c["E"],), (c["E"],)]
    if k == "softmax":
        return [(c["R"], c["L"])]
    if k == "map":
        return [(c["N"],)] * (2 if c["op"] == "add" else 1)
    if k == "mmtv":
        return [(c["B"], c["H"], c["L"], c["D"]), (c["B"], c["H"], c["D"])]
    if k == "attn":
        return [(c["B"], c["H"], c["D"]), (c["B"], c["H"], c["L"], c["D"]), (c["B"], c["H"], c["L"], c["D"])]
    if k in ("red", "relu"):
        return [(c["B"], c["E"])]
    if k == "va":
        return [(c["B"], c["E"])] * 2
    if k == "gemv":
        return [(c["N"], c["K"]), (c["K"],)]
    if k == "launch":
        return [(1,)]
    if k == "copy":
        return [(c["bytes"] // 2,)]
    raise ValueError(k)


def _torch_fns(c: dict):
    """{variant: f(*operands)} in PyTorch for case c."""
    import torch
    import torch.nn.functional as F
    k = c["kind"]
    if k == "mmtv":
        return {"": lambda A, x: torch.einsum("bhnd,bhd->bhn", A, x)}
    if k == "attn":
        scale = 1.0 / math.sqrt(c["D"])

        def score(q, K, V):
            return torch.einsum("bhd,bhnd->bhn", q, K) * scale

        def unfused(q, K, V):
            p = torch.softmax(torch.einsum("bhd,bhnd->bhn", q, K) * scale, dim=-1)
            return torch.einsum("bhn,bhnd->bhd", p, V)

        def fused(q, K, V):
            return F.scaled_dot_product_attention(q[:, :, None, :], K, V)[:, :, 0, :]
        return {" unfused": unfused, " fused (sdpa)": fused, " score only": score}
    if k == "red":
        return {"": lambda a: a.sum(-1)}
    if k == "va":
        return {"": lambda a, b: a + b}
    if k == "relu":
        return {"": lambda a: torch.relu(a)}
    if k == "gemv":
        return {"": lambda W, x: torch.mv(W, x)}
    if k == "launch":
        return {"": lambda a: a + 1}
    if k == "copy":
        return {"": lambda a: a.clone()}
    if k == "conv":
        st, pad, g = c["stride"], _conv_pad(c), c["groups"]
        return {"": lambda x, w: F.conv2d(x, w, None, st, pad, 1, g)}
    if k == "gemm":
        return {"": lambda x, W: F.linear(x, W)}
    if k == "prefill":
        scale = 1.0 / math.sqrt(c["D"])

        def unfused_p(q, K, V):
            p = torch.softmax(torch.einsum("bhqd,bhkd->bhqk", q, K) * scale, dim=-1)
            return torch.einsum("bhqk,bhkd->bhqd", p, V)
        return {" unfused": unfused_p, " fused (sdpa)": lambda q, K, V: F.scaled_dot_product_attention(q, K, V)}
    if k == "layernorm":
        return {"": lambda x, w, b: F.layer_norm(x, (c["E"],), w, b)}
    if k == "softmax":
        return {"": lambda a: torch.softmax(a, dim=-1)}
    if k == "map":
        return {"": {"relu": torch.relu, "gelu": F.gelu, "silu": F.silu, "add": lambda a, b: a + b}[c["op"]]}
    raise ValueError(k)


def _torch_prepare(c: dict, ops: list) -> list:
    """Operands laid out as the measured library wants them: a convolution's input and
    filter channels_last (NHWC in memory: cuDNN's tensor-core layout, and TVM's in PIMFlow)."""
    if c["kind"] == "conv":
        import torch
        return [t.contiguous(memory_format=torch.channels_last) for t in ops]
    return ops


def _jax_fns(c: dict):
    import jax
    import jax.numpy as jnp
    k = c["kind"]
    if k == "mmtv":
        return lambda A, x: jnp.einsum("bhnd,bhd->bhn", A, x)
    if k == "attn":
        def attn(q, K, V):
            s = jnp.einsum("bhd,bhnd->bhn", q, K) / jnp.float16(math.sqrt(c["D"]))
            return jnp.einsum("bhn,bhnd->bhd", jax.nn.softmax(s, axis=-1), V)
        return attn
    if k == "red":
        return lambda a: jnp.sum(a, axis=-1, dtype=a.dtype)
    if k == "va":
        return lambda a, b: a + b
    if k == "relu":
        return lambda a: jnp.maximum(a, jnp.zeros((), a.dtype))
    if k == "gemv":
        return lambda W, x: W @ x
    if k == "launch":
        return lambda a: a + 1
    if k == "copy":
        return lambda a: a * jnp.float16(1)     # XLA elides a plain copy; a scale streams the same bytes
    if k == "conv":
        from jax import lax
        st, pad, g = c["stride"], _conv_pad(c), c["groups"]
        return lambda x, w: lax.conv_general_dilated(x, w, (st, st), [(pad, pad), (pad, pad)],
                                                     dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                                     feature_group_count=g)
    if k == "gemm":
        return lambda x, W: x @ W.T
    if k == "prefill":
        def attn_p(q, K, V):
            s = jnp.einsum("bhqd,bhkd->bhqk", q, K) / jnp.float16(math.sqrt(c["D"]))
            return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), V)
        return attn_p
    if k == "layernorm":
        def ln(x, w, b):
            x32 = x.astype(jnp.float32)
            mu = x32.mean(-1, keepdims=True)
            var = ((x32 - mu) ** 2).mean(-1, keepdims=True)
            return ((x32 - mu) * jax.lax.rsqrt(var + 1e-5) * w + b).astype(x.dtype)
        return ln
    if k == "softmax":
        return lambda a: jax.nn.softmax(a, axis=-1)
    if k == "map":
        return {"relu": jax.nn.relu, "gelu": jax.nn.gelu, "silu": jax.nn.silu, "add": lambda a, b: a + b}[c["op"]]
    raise ValueError(k)


def _copies(shapes) -> int:
    nbytes = sum(2 * math.prod(s) for s in shapes)
    return max(1, min(MAX_COPIES, math.ceil(ROTATE_BYTES / max(nbytes, 1))))


def measure_torch(c: dict, reps: int = 40, replays: int = 5) -> dict:
    import torch
    shapes = _operands(c)
    n = _copies(shapes)
    sets = [_torch_prepare(c, [torch.randn(s, device="cuda", dtype=torch.float16) for s in shapes])
            for _ in range(n)]
    out = {}
    for variant, f in _torch_fns(c).items():
        # warm-up (also selects cuBLAS / SDPA kernels)
        for ops in sets[:2]:
            f(*ops)
        torch.cuda.synchronize()
        # stream: eager, back to back
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for i in range(reps):
            f(*sets[i % n])
        e1.record()
        torch.cuda.synchronize()
        stream_ns = e0.elapsed_time(e1) * 1e6 / reps
        # graph: the same calls captured once, replayed
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for ops in sets[:2]:
                f(*ops)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for i in range(reps):
                f(*sets[i % n])
        g.replay()
        torch.cuda.synchronize()
        e0.record()
        for _ in range(replays):
            g.replay()
        e1.record()
        torch.cuda.synchronize()
        graph_ns = e0.elapsed_time(e1) * 1e6 / (reps * replays)
        out[variant] = {"graph_ns": graph_ns, "stream_ns": stream_ns, "copies": n}
        del g
    del sets
    torch.cuda.empty_cache()
    return out


def measure_jax(c: dict, reps: int = 40) -> dict:
    import jax
    import numpy as np
    shapes = _operands(c, "jax")
    n = _copies(shapes)
    rng = np.random.default_rng(0)
    sets = [[jax.device_put(rng.standard_normal(s, dtype=np.float32).astype(np.float16)) for s in shapes]
            for _ in range(n)]
    f = jax.jit(_jax_fns(c))
    for ops in sets[:2]:
        f(*ops).block_until_ready()
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        outs = [f(*sets[i % n]) for i in range(reps)]
        jax.block_until_ready(outs)
        best = min(best, (time.perf_counter() - t0) * 1e9 / reps)
    del sets, outs
    return {"jax_ns": best}


def measure(path: str) -> None:
    global ROTATE_BYTES
    import jax
    import torch
    torch.backends.cudnn.benchmark = True      # cuDNN's fastest algorithm per shape (cudnnFind, as TVM in PIMFlow)
    props = torch.cuda.get_device_properties(0)
    l2 = int(getattr(props, "L2_cache_size", 0) or 0)
    ROTATE_BYTES = 4 * max(L2_BYTES, l2)          # every call reads DRAM on a GPU with a larger L2 too
    info = {"gpu": torch.cuda.get_device_name(0),
            "sms": props.multi_processor_count, "l2_bytes": l2, "rotate_bytes": ROTATE_BYTES,
            "torch": torch.__version__, "jax": jax.__version__, "jax_devices": str(jax.devices()),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    try:
        import subprocess
        info["nvidia_smi"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,driver_version",
             "--format=csv,noheader"], capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception as e:  # noqa: BLE001 - a missing or failing nvidia-smi: the table does without it
        info["nvidia_smi"] = f"unavailable: {e}"
    rows = []
    t_start = time.perf_counter()
    for c in cases():
        row = dict(c)
        try:
            row["torch"] = measure_torch(c, reps=4 if c["kind"] == "copy" else 40)
        except Exception as e:  # noqa: BLE001 - one failed case must not lose the others
            row["torch_error"] = f"{type(e).__name__}: {e}"
        try:
            row.update(measure_jax(c, reps=4 if c["kind"] == "copy" else 40))
        except Exception as e:  # noqa: BLE001 - as torch's
            row["jax_error"] = f"{type(e).__name__}: {e}"
        rows.append(row)
        print(label(c), json.dumps({k: v for k, v in row.items() if k in ("torch", "jax_ns")}), flush=True)
        with open(path, "w") as fh:          # written after every case: a timeout keeps what was measured
            json.dump({"info": info, "rows": rows}, fh, indent=1)
    print(f"measured {len(rows)} cases in {time.perf_counter() - t_start:.1f} s", flush=True)


# ---------------------------------------------------------------------------
# the table (here; pimjax's models of the measured GPU)
# ---------------------------------------------------------------------------
def model_ns(host, c: dict) -> float | None:
    """ns of case `c` on `host`'s GPU model (pimjax.hw.gpu)."""
    from pimjax.hw import gpu
    k, eb = c["kind"], 2
    if k == "mmtv":
        return gpu.gemm_ns(host, 1, c["L"], c["D"], batch=c["B"] * c["H"])
    if k == "attn":
        return gpu.attention_ns(host, c["H"], c["D"], c["L"], batch=c["B"])
    if k == "red":
        return gpu.elementwise_ns(host, eb * c["B"] * (c["E"] + 1), c["B"] * c["E"], outputs=c["B"],
                                  reduction=c["E"], kind="reduce")
    if k in ("va", "relu"):
        n = c["B"] * c["E"]
        return gpu.elementwise_ns(host, eb * n * (3 if k == "va" else 2), n, outputs=n, kind="act")
    if k == "gemv":
        return gpu.gemm_ns(host, 1, c["N"], c["K"])
    if k == "launch":
        return gpu.elementwise_ns(host, 2 * eb, 1, outputs=1, kind="act")
    if k == "copy":
        return gpu.elementwise_ns(host, 2 * c["bytes"], 0, outputs=c["bytes"] // eb, kind="copy")
    if k == "conv":
        return _conv_model_ns(host, c)
    if k == "gemm":
        return gpu.gemm_ns(host, c["M"], c["N"], c["K"])
    if k == "prefill":
        bh, L, D = c["B"] * c["H"], c["L"], c["D"]
        return (gpu.gemm_ns(host, L, L, D, batch=bh)
                + gpu.elementwise_ns(host, 2 * eb * bh * L * L, 5.0 * bh * L * L, outputs=bh * L, reduction=L,
                                     kind="softmax")
                + gpu.gemm_ns(host, L, D, L, batch=bh))
    if k == "layernorm":
        t, e = c["T"], c["E"]
        return gpu.elementwise_ns(host, eb * (2 * t * e + 2 * e), 8.0 * t * e, outputs=t, reduction=e, kind="norm")
    if k == "softmax":
        r, L = c["R"], c["L"]
        return gpu.elementwise_ns(host, 2 * eb * r * L, 5.0 * r * L, outputs=r, reduction=L, kind="softmax")
    if k == "map":
        n = c["N"]
        return gpu.elementwise_ns(host, eb * n * (3 if c["op"] == "add" else 2), n, outputs=n, kind="act")
    return None


def _conv_model_ns(host, c: dict) -> float:
    """What pimjax charges the jnp convolution of case c: its traced contraction timed by
    `sim.host.host_time` on `host` (the op `pim_jit` would place), fp16."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    from pimjax import make_graph
    from pimjax.sim.host import host_time
    key = tuple(c[k] for k in ("H", "W", "C", "F", "K", "stride", "groups"))
    if key not in _CONV_OPS:
        st, pad, g = c["stride"], _conv_pad(c), c["groups"]
        graph = make_graph(lambda x, w: lax.conv_general_dilated(x, w, (st, st), [(pad, pad), (pad, pad)],
                                                                 dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                                                 feature_group_count=g),
                           *(jax.ShapeDtypeStruct(s, jnp.float16) for s in _operands(c, "jax")))
        op = next(o for o in graph.ops if o.kind == "contraction")
        _CONV_OPS[key] = (op, {i: v.shape for i, v in enumerate(graph.values)})
    op, shapes = _CONV_OPS[key]
    return float(host_time(op, host, shapes, 2))


_CONV_OPS: dict = {}


def host_of(info: dict, model: str):
    """pimjax's model of the GPU a measurement names (`info["gpu"]`, as
    PyTorch reports it): the H100 or the H200 (ValueError for any other:
    no model of it here)."""
    from pimjax.hw.host import h100, h200
    name = info["gpu"].split()
    for tag, make in (("H100", h100), ("H200", h200)):
        if tag in name:
            return make(model=model)
    raise ValueError(f"no pimjax model of {info['gpu']!r}: the kernel table knows the H100 and the H200")


def measured_ns(row: dict, clock: str = "graph") -> float | None:
    """The measured ns of a row on `clock`: "graph" / "stream" (PyTorch; the three-kernel
    variant of an attention) or "jax"; None when it was not measured."""
    if clock == "jax":
        return row.get("jax_ns")
    t = row.get("torch") or {}
    v = t.get(" unfused", t.get(""))
    return None if v is None else v.get(f"{clock}_ns")


def measured_rows(data: dict, clock: str = "graph") -> list[dict]:
    """A measured file's rows in `pimjax.hw.measured`'s columns (fp16; time_us on `clock`), for
    `--csv`: the products (GEMV, GEMM, the per-head GEMVs of `mmtv` as a batched product), the
    maps (va -> add, relu, the norm set's maps), layer norms and softmaxes.  Cases of other kinds
    (fused attention, convolutions, reductions, calibration) are left out: `GpuProfile` has no
    class for them."""
    out = []
    gpu = str(data.get("info", {}).get("gpu", "gpu")).lower().replace(" ", "-")
    for c in data["rows"]:
        t = measured_ns(c, clock)
        if t is None:
            continue
        k = c["kind"]
        row = dict(gpu=gpu, dtype="fp16", time_us=round(t / 1e3, 3), context=label(c))
        if k == "gemv":
            row.update(op="gemm", m=1, n=c["N"], k=c["K"])
        elif k == "gemm":
            row.update(op="gemm", m=c["M"], n=c["N"], k=c["K"])
        elif k == "mmtv":
            row.update(op="bmm", batch=c["B"] * c["H"], m=1, n=c["L"], k=c["D"])
        elif k in ("va", "relu"):
            row.update(op="add" if k == "va" else "relu", numel=c["B"] * c["E"])
        elif k == "map":
            row.update(op=c["op"], numel=c["N"])
        elif k == "layernorm":
            row.update(op="layernorm", rows=c["T"], cols=c["E"])
        elif k == "softmax":
            row.update(op="softmax", rows=c["R"], cols=c["L"])
        else:
            continue
        out.append(row)
    return out


def write_csv(data_path: str, out_path: str, clock: str = "graph") -> int:
    """Write `measured_rows` of the file `data_path` to `out_path` in `pimjax.hw.measured`'s
    format (its `#` header naming this script, the file and the clock); returns the row count.
    `pimjax.hw.profile.GpuProfile.from_rows(pimjax.hw.measured.read(out_path), ...)` reads it back."""
    import csv
    with open(data_path) as fh:
        data = json.load(fh)
    rows = measured_rows(data, clock)
    from pimjax.hw.measured import COLUMNS
    with open(out_path, "w", newline="", encoding="utf-8") as fh:
        info = data.get("info", {})
        fh.write(f"# source: benchmarks/gpu_kernels.py --measure on {info.get('gpu', '?')}\n")
        fh.write(f"# path: {os.path.basename(data_path)}\n# commit: {'0' * 40}\n")
        fh.write(f"# units: time_us is microseconds per kernel, the {clock} clock (gpu_kernels.py docstring)\n")
        fh.write(f"# notes: measured {info.get('date', '?')}; torch {info.get('torch', '?')}; fp16\n")
        w = csv.DictWriter(fh, fieldnames=COLUMNS, restval="")
        w.writeheader()
        w.writerows(rows)
    return len(rows)


def class_ratios(data: dict, clock: str = "graph", models=None) -> list[dict]:
    """Per kernel class (`CLASSES`) and GPU model: n, min, median, max of model / measured
    over the measured cases of that class (`data`: a measured JSON, {"info", "rows"}), on
    the measured GPU's models (`host_of`; default every model any GPU takes,
    `hw.gpu.GENERIC_GPU_MODELS`).  A class with no measured case gives one row with n 0 and
    status "not measured"; otherwise status "measured".  PIMFlow's "pimflow" model times a
    simulated RTX 2060 that no measurement here ran on: it is not in the table."""
    import statistics

    from pimjax.hw.gpu import GENERIC_GPU_MODELS
    models = tuple(GENERIC_GPU_MODELS if models is None else models)
    hosts = {m: host_of(data["info"], m) for m in models}
    by_class: dict = {k: [] for k in CLASSES}
    for r in data["rows"]:
        c = {k: v for k, v in r.items() if k not in ("torch", "jax_ns", "torch_error", "jax_error")}
        t = measured_ns(r, clock)
        if t:
            by_class[kernel_class(c)].append((c, t))
    out = []
    for cls in CLASSES:
        cases_ = by_class[cls]
        if not cases_:
            out.append(dict(cls=cls, model=None, n=0, status="not measured", min=None, median=None, max=None))
            continue
        for m, h in hosts.items():
            ratios = [model_ns(h, c) / t for c, t in cases_]
            out.append(dict(cls=cls, model=m, n=len(ratios), status="measured", min=min(ratios),
                            median=statistics.median(ratios), max=max(ratios)))
    return out


def class_table(path: str, clock: str = "graph", markdown: bool = False) -> None:
    """Print `class_ratios` of a measured file."""
    with open(path) as fh:
        data = json.load(fh)
    rows = class_ratios(data, clock)
    print(f"{data['info']['gpu']}: model / measured ({clock} clock) per kernel class")
    print("| class | model | n | min | median | max |" if markdown else "")
    if markdown:
        print("|---|---|---:|---:|---:|---:|")
    for r in rows:
        if r["status"] == "not measured":
            cells = [r["cls"], "every model", "0", "not measured", "", ""]
        else:
            cells = [r["cls"], r["model"], str(r["n"]), f"{r['min']:.2f}", f"{r['median']:.2f}", f"{r['max']:.2f}"]
        print(("| " + " | ".join(cells) + " |") if markdown else "  ".join(f"{x:>18s}" for x in cells))


def table(path: str, markdown: bool = False) -> None:
    from pimjax.hw.gpu import GENERIC_GPU_MODELS as GPU_MODELS
    with open(path) as fh:
        data = json.load(fh)
    info, rows = data["info"], data["rows"]
    hosts = {m: host_of(info, m) for m in GPU_MODELS}
    head = ["case", "graph µs", "stream µs", "jax µs"] + [f"{m} µs" for m in GPU_MODELS] + ["occupancy / graph"]
    lines = []
    for r in rows:
        c = {k: v for k, v in r.items() if k not in ("torch", "jax_ns", "torch_error", "jax_error")}
        torch_rows = r.get("torch", {"": {}})
        for variant, t in torch_rows.items():
            if variant == " score only":
                continue
            models = {m: model_ns(h, c) for m, h in hosts.items()}
            if variant == " fused (sdpa)":
                models = {m: None for m in models}      # the models time the three kernels model code runs
            if c["kind"] in ("attn", "prefill") and variant == " unfused":
                variant = ""
            g = t.get("graph_ns")
            occ = models["occupancy"]
            lines.append([label(c) + variant, _us(g), _us(t.get("stream_ns")),
                          _us(r.get("jax_ns")) if not variant else "", *[_us(models[m]) for m in GPU_MODELS],
                          f"{occ / g:.2f}" if (occ and g) else ""])
    title = f"{info['gpu']} ({info['sms']} SMs), torch {info['torch']}, jax {info['jax']}, {info['date']}"
    if markdown:
        print(f"{title}\n")
        print("| " + " | ".join(head) + " |")
        print("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
        for ln in lines:
            print("| " + " | ".join(ln) + " |")
        return
    from rich.console import Console
    from rich.table import Table
    t = Table(title=title)
    for h in head:
        t.add_column(h, justify="left" if h == "case" else "right")
    for ln in lines:
        t.add_row(*ln)
    Console().print(t)


def _us(ns) -> str:
    return "" if ns is None else f"{ns / 1e3:,.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measure", metavar="OUT.json", help="measure on this machine's CUDA GPU")
    ap.add_argument("--data", default=os.path.join(HERE, "data", "gpu_kernels_h100.json"))
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--classes", action="store_true", help="model / measured per kernel class (class_ratios)")
    ap.add_argument("--clock", default="graph", choices=("graph", "stream", "jax"), help="with --classes")
    ap.add_argument("--csv", metavar="OUT.csv", help="write --data's rows in pimjax.hw.measured's format (the "
                                                      "table of a measured-profile GPU, pimjax.hw.profile) and exit")
    ap.add_argument("--write-shapes", action="store_true",
                    help=f"write {CNN_SHAPES} from pimjax's cnn_layers and exit")
    args = ap.parse_args()
    if args.write_shapes:
        write_cnn_shapes()
        return
    if args.csv:
        print(f"{write_csv(args.data, args.csv, args.clock)} rows -> {args.csv}")
        return
    if args.list:
        for c in cases():
            print(label(c), c)
        return
    if args.classes:
        class_table(args.data, args.clock, args.markdown)
        return
    if args.measure:
        measure(args.measure)
        return
    table(args.data, args.markdown)


if __name__ == "__main__":
    sys.exit(main())
