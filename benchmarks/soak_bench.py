"""Long runs stay flat (issue #44): compiled functions called many times, memory, open files
and cache folders measured at the start and the end.

    .venv/bin/python benchmarks/soak_bench.py [--calls 100000] [--backend hbm-pim]

Three `pim_jit` functions compiled once (placement "prefer_pim", a tuning cache file in a
temporary folder), then called round-robin, `--calls` calls in all:
* GEMV: W [512, 256] fp16 @ x [256];
* attention step with a growing KV cache: 4 heads x 64, a 128-slot cache; each call appends the
  new token's K / V at the next position (`lax.dynamic_update_slice`, wrapping round) and the
  returned caches are the next call's;
* CNN layer: a 3 x 3 convolution, 8 -> 16 channels on 12 x 12, then ReLU.

Reported: resident memory (RSS, /proc/self/statm) after the first 1 000 calls and at the end
(target: within 5 %), open file descriptors (/proc/self/fd) and the sizes of the cache folders
pimjax writes (JAX's persistent compilation cache folder of `enable_xla_cache`, in a temporary
PIMJAX_CACHE_DIR of its own; numba's cache files under pimjax/; the tuning cache file) after
the first call of each function (compiled and warm) and at the end, and ms per call.
Exit status 1 when RSS grew by more than 5 % or a descriptor leaked.
"""
from __future__ import annotations

import argparse
import gc
import glob
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)        # this checkout's pimjax, not an installed one


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def folder_bytes(paths) -> int:
    total = 0
    for p in paths:
        if os.path.isfile(p):
            total += os.path.getsize(p)
        for dirpath, _, files in os.walk(p):
            total += sum(os.path.getsize(os.path.join(dirpath, f)) for f in files
                         if os.path.exists(os.path.join(dirpath, f)))
    return total


def functions(backend: str, cache: str):
    """[(name, compiled pim_jit function, args, next_args(out, args, i))]."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax

    from pimjax import pim_jit
    rng = np.random.default_rng(0)
    W = rng.standard_normal((512, 256)).astype(np.float16)
    x = rng.standard_normal(256).astype(np.float16)
    gemv = pim_jit(lambda W, x: W @ x, backend=backend, placement="prefer_pim", cache=cache)

    H, HD, T = 4, 64, 128

    def attention(q, k_new, v_new, k_cache, v_cache, pos):
        k_cache = lax.dynamic_update_slice(k_cache, k_new[:, None, :], (0, pos, 0))
        v_cache = lax.dynamic_update_slice(v_cache, v_new[:, None, :], (0, pos, 0))
        s = jnp.einsum("hd,hnd->hn", q, k_cache) / 8.0
        return jnp.einsum("hn,hnd->hd", jax.nn.softmax(s, axis=-1), v_cache), k_cache, v_cache
    q, kn, vn = (rng.standard_normal((H, HD)).astype(np.float16) for _ in range(3))
    kc, vc = (np.zeros((H, T, HD), np.float16) for _ in range(2))
    attn = pim_jit(attention, backend=backend, placement="prefer_pim", cache=cache)

    def attn_next(out, args, i):
        _, k_cache, v_cache = out
        return (args[0], args[1], args[2], k_cache, v_cache, np.int32((i + 1) % T))

    img = rng.standard_normal((1, 12, 12, 8)).astype(np.float16)
    ker = (rng.standard_normal((3, 3, 8, 16)) / 8).astype(np.float16)
    conv = pim_jit(lambda x, k: jax.nn.relu(lax.conv_general_dilated(
        x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))), backend=backend,
        placement="prefer_pim", cache=cache)
    same = lambda out, args, i: args          # noqa: E731
    return [("GEMV 512x256", gemv, (W, x), same),
            ("attention step, KV cache 4x128x64", attn, (q, kn, vn, kc, vc, np.int32(0)), attn_next),
            ("CNN layer 3x3 8->16 on 12x12", conv, (img, ker), same)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=100_000)
    ap.add_argument("--backend", default="hbm-pim")
    a = ap.parse_args()
    import warnings
    warnings.simplefilter("ignore")             # the fp16 conversion notes, once per function
    tmp = tempfile.mkdtemp(prefix="pimjax-soak-")
    os.environ["PIMJAX_CACHE_DIR"] = tmp        # its own XLA cache folder: no other process writes there
    os.environ["PIMJAX_XLA_CACHE"] = "1"
    from pimjax.api import enable_xla_cache
    cache = os.path.join(tmp, "tune.json")
    xla = enable_xla_cache()
    caches = {"xla": [xla] if xla else [], "numba": glob.glob(os.path.join(ROOT, "pimjax", "**", "__pycache__"),
                                                               recursive=True), "tuning": [cache]}
    fns = functions(a.backend, cache)
    state = [args for _, _, args, _ in fns]
    per = [0.0] * len(fns)
    for k, (_, f, _, nxt) in enumerate(fns):    # compile and warm: one call each
        out = f(*state[k])
        state[k] = nxt(out, state[k], 0)
    gc.collect()
    start = {"fds": open_fds(), **{n: folder_bytes(p) for n, p in caches.items()}, "rss": rss_mb()}
    marks = {}
    t_all = time.perf_counter()
    for i in range(a.calls):
        k = i % len(fns)
        f, nxt = fns[k][1], fns[k][3]
        t = time.perf_counter()
        out = f(*state[k])
        per[k] += time.perf_counter() - t
        state[k] = nxt(out, state[k], i // len(fns) + 1)
        if i + 1 == min(1000, a.calls):
            gc.collect()
            marks["rss_1000"] = rss_mb()
        if (i + 1) % 10_000 == 0:
            print(f"  {i + 1} calls, RSS {rss_mb():.1f} MB, {time.perf_counter() - t_all:.0f} s",
                  file=sys.stderr, flush=True)
    gc.collect()
    end = {"fds": open_fds(), **{n: folder_bytes(p) for n, p in caches.items()}, "rss": rss_mb()}
    wall = time.perf_counter() - t_all
    growth = (end["rss"] - marks["rss_1000"]) / marks["rss_1000"]
    print(f"{a.calls} calls on {a.backend} ({wall:.0f} s)\n")
    print("| function | calls | ms / call |")
    print("|---|---:|---:|")
    for k, (name, *_rest) in enumerate(fns):
        n = len(range(k, a.calls, len(fns)))
        print(f"| {name} | {n} | {1e3 * per[k] / max(n, 1):.2f} |")
    print("\n| measure | start | after 1 000 calls | end | change |")
    print("|---|---:|---:|---:|---:|")
    print(f"| RSS (MB) | {start['rss']:.1f} | {marks['rss_1000']:.1f} | {end['rss']:.1f} | "
          f"{100 * growth:+.2f} % (vs 1 000) |")
    print(f"| open file descriptors | {start['fds']} | | {end['fds']} | {end['fds'] - start['fds']:+d} |")
    for n in caches:
        print(f"| {n} cache bytes | {start[n]} | | {end[n]} | {end[n] - start[n]:+d} |")
    return 0 if growth <= 0.05 and end["fds"] <= start["fds"] else 1


if __name__ == "__main__":
    sys.exit(main())
