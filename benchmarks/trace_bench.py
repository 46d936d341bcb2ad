"""Graph-building cost of `pimjax.make_graph` next to `jax.make_jaxpr` alone.

Workload: one decode step of GPT-2 small (12 layers, d=768, 12 heads of 64,
1024-token context = 1023 cached + the new token, batch 1, tied 50257-token
LM head), written in plain jnp.  Arguments are ShapeDtypeStructs, so nothing
is allocated.  Prints the median of several runs after a warm-up, side by
side; the target is make_graph <= 3x make_jaxpr (frontend adds <= 2x).

    .venv/bin/python benchmarks/trace_bench.py [--runs 7]
"""
from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections import Counter

import jax
import jax.numpy as jnp

import pimjax

D, HEADS, LAYERS, CTX, VOCAB = 768, 12, 12, 1024, 50257
DH = D // HEADS


def layer_norm(x, g, b):
    mu = jnp.mean(x)
    var = jnp.mean(jnp.square(x - mu))
    return (x - mu) * jax.lax.rsqrt(var + 1e-5) * g + b


def attention(p, h, k_cache, v_cache):
    """h: [D]; caches: [CTX-1, HEADS, DH] -> ([D], new k, new v)."""
    qkv = p["w_qkv"] @ h + p["b_qkv"]
    q = qkv[:D].reshape(HEADS, DH)
    k = qkv[D:2 * D].reshape(1, HEADS, DH)
    v = qkv[2 * D:].reshape(1, HEADS, DH)
    K = jnp.concatenate([k_cache, k], axis=0)
    V = jnp.concatenate([v_cache, v], axis=0)
    s = jnp.einsum("hd,nhd->hn", q, K) / jnp.sqrt(jnp.float32(DH))
    a = jax.nn.softmax(s, axis=-1)
    ctx = jnp.einsum("hn,nhd->hd", a, V).reshape(D)
    return p["w_o"] @ ctx + p["b_o"], k, v


def block(p, x, k_cache, v_cache):
    att, k, v = attention(p, layer_norm(x, p["ln1_g"], p["ln1_b"]), k_cache, v_cache)
    x = x + att
    m = jax.nn.gelu(p["w_fc"] @ layer_norm(x, p["ln2_g"], p["ln2_b"]) + p["b_fc"])
    return x + p["w_proj"] @ m + p["b_proj"], k, v


def gpt2_decode_step(params, token, pos, k_caches, v_caches):
    """Logits [VOCAB] for the next token and the new per-layer k/v entries."""
    x = params["wte"][token] + params["wpe"][pos]
    new_kv = []
    for p, kc, vc in zip(params["layers"], k_caches, v_caches):
        x, k, v = block(p, x, kc, vc)
        new_kv.append((k, v))
    x = layer_norm(x, params["lnf_g"], params["lnf_b"])
    return params["wte"] @ x, new_kv


def example_args():
    def f32(*s):
        return jax.ShapeDtypeStruct(s, jnp.float32)
    layer = {"ln1_g": f32(D), "ln1_b": f32(D), "w_qkv": f32(3 * D, D), "b_qkv": f32(3 * D),
             "w_o": f32(D, D), "b_o": f32(D), "ln2_g": f32(D), "ln2_b": f32(D),
             "w_fc": f32(4 * D, D), "b_fc": f32(4 * D), "w_proj": f32(D, 4 * D),
             "b_proj": f32(D)}
    params = {"wte": f32(VOCAB, D), "wpe": f32(CTX, D), "lnf_g": f32(D), "lnf_b": f32(D),
              "layers": [dict(layer) for _ in range(LAYERS)]}
    i32 = jax.ShapeDtypeStruct((), jnp.int32)
    caches = [f32(CTX - 1, HEADS, DH) for _ in range(LAYERS)]
    return params, i32, i32, caches, list(caches)


def fresh(fn):
    """A new function object per call: jax caches traces by function
    identity, and a cached make_jaxpr would time a dictionary lookup.  (The
    jnp helpers' own inner jit caches stay warm, as in a real session.)"""
    return functools.wraps(fn)(lambda *a: fn(*a))


def seconds(stage) -> float:
    fn = fresh(gpt2_decode_step)
    t0 = time.perf_counter()
    stage(fn)
    return time.perf_counter() - t0


def measure(stages: dict, runs: int) -> dict[str, list[float]]:
    """Seconds per stage and run; stages interleaved within each run so that
    load from other processes hits all of them alike."""
    for stage in stages.values():
        stage(fresh(gpt2_decode_step))   # warm-up
    times: dict[str, list[float]] = {name: [] for name in stages}
    for _ in range(runs):
        for name, stage in stages.items():
            times[name].append(seconds(stage))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    runs = parser.parse_args().runs
    args = example_args()
    jaxpr = jax.make_jaxpr(gpt2_decode_step)(*args)
    graph = pimjax.make_graph(gpt2_decode_step, *args)
    times = measure({
        "jax.make_jaxpr": lambda fn: jax.make_jaxpr(fn)(*args),
        "pimjax.make_graph (fuse=False)": lambda fn: pimjax.make_graph(fn, *args, fuse=False),
        "pimjax.make_graph": lambda fn: pimjax.make_graph(fn, *args),
    }, runs)
    base = times["jax.make_jaxpr"]
    kinds = Counter(op.kind for op in graph.ops)
    print(f"GPT-2 small decode step: {LAYERS} layers, d={D}, {HEADS} heads, context {CTX}")
    print(f"top-level jaxpr eqns: {len(jaxpr.jaxpr.eqns)}; graph ops: {len(graph.ops)} "
          f"({', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))})")
    print(f"median of {runs} interleaved runs after warm-up; ratio = median of per-run ratios\n")
    print(f"| {'stage':<32} | {'ms':>8} | {'x make_jaxpr':>12} |")
    print(f"|{'-' * 34}|{'-' * 10}|{'-' * 14}|")
    for name, ts in times.items():
        ratio = statistics.median(t / b for t, b in zip(ts, base))
        print(f"| {name:<32} | {statistics.median(ts) * 1e3:8.1f} | {ratio:12.2f} |")
    total = statistics.median(t / b for t, b in zip(times["pimjax.make_graph"], base))
    print(f"\ngraph building adds {total - 1:.2f}x make_jaxpr on top of it (target <= 2x)")

if __name__ == "__main__":
    main()
