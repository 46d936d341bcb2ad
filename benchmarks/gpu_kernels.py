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
* calibration: the launch of a one-element kernel and a 1 GiB device copy.

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
pimjax; the table step reads the JSON and times every case on the GPU models of
`pimjax/hw/gpu.py` for the measured GPU (`pimjax.hw.host.h100`).
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
    for name, n, k in (("gpt3-13b qkv", 15360, 5120), ("gpt3-13b proj", 5120, 5120),
                       ("gpt3-13b ffn1", 20480, 5120), ("gpt3-13b ffn2", 5120, 20480),
                       ("llama2-7b qkv", 12288, 4096), ("llama2-7b up", 11008, 4096),
                       ("llama2-7b down", 4096, 11008)):
        out.append(dict(set="llm", kind="gemv", name=name, N=n, K=k))
    out.append(dict(set="calib", kind="launch"))
    out.append(dict(set="calib", kind="copy", bytes=1 << 30))
    return out


def label(c: dict) -> str:
    if c.get("name"):
        return c["name"]
    if c["kind"] in ("mmtv", "attn"):
        return f"{c['kind']} {c['B']}x{c['H']}x{c['L']}x{c['D']}"
    if c["kind"] in ("red", "va", "relu"):
        return f"{c['kind']} {c['B']}x{c['E']}"
    return c["kind"]


# ---------------------------------------------------------------------------
# measuring (a CUDA machine; no pimjax import)
# ---------------------------------------------------------------------------
def _operands(c: dict) -> list[tuple]:
    k = c["kind"]
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
    raise ValueError(k)


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
    raise ValueError(k)


def _copies(shapes) -> int:
    nbytes = sum(2 * math.prod(s) for s in shapes)
    return max(1, min(MAX_COPIES, math.ceil(ROTATE_BYTES / max(nbytes, 1))))


def measure_torch(c: dict, reps: int = 40, replays: int = 5) -> dict:
    import torch
    shapes = _operands(c)
    n = _copies(shapes)
    sets = [[torch.randn(s, device="cuda", dtype=torch.float16) for s in shapes] for _ in range(n)]
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
    shapes = _operands(c)
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
    import torch
    import jax
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
    except Exception as e:     # the table does without it
        info["nvidia_smi"] = f"unavailable: {e}"
    rows = []
    t_start = time.perf_counter()
    for c in cases():
        row = dict(c)
        try:
            row["torch"] = measure_torch(c, reps=4 if c["kind"] == "copy" else 40)
        except Exception as e:         # one failed case must not lose the others
            row["torch_error"] = f"{type(e).__name__}: {e}"
        try:
            row.update(measure_jax(c, reps=4 if c["kind"] == "copy" else 40))
        except Exception as e:
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
    return None


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


def table(path: str, markdown: bool = False) -> None:
    from pimjax.hw.gpu import GPU_MODELS
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
            if c["kind"] == "attn" and variant == " unfused":
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
    ap.add_argument("--data", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "data",
                                                   "gpu_kernels_h100.json"))
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    args = ap.parse_args()
    if args.list:
        for c in cases():
            print(label(c), c)
        return
    if args.measure:
        measure(args.measure)
        return
    table(args.data, args.markdown)


if __name__ == "__main__":
    sys.exit(main())
