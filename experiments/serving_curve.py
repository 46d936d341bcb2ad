"""LLaMA-2 70B served on 8 A100s + AttAcc stacks: the throughput-latency curve of GPU alone,
AttAcc-style GPU + PIM and pimjax's tuned placements, and the batch size at which PIM attention
stops paying (issue 43).  Writes `experiments/data/serving_curve.json`, which
`experiments/serving.ipynb` plots (the notebook does not recompute it: ~10 minutes here).

    .venv/bin/python experiments/serving_curve.py [--requests 600] [--rates 1,2,4,...] [--quick]

The system (one tensor-parallel shard of 8): `get_backend("attacc", system="attacc")` -- one
AttAcc of 5 HBM3 stacks (80 channels, bank-level GEMV units, power-constrained) beside an A100
with HBM3 on AttAcc's own A100a model; TP 8 on NVLink3 (600 GB/s); AttAcc's kernels
(`gpu_kernels="fused"`); continuous batching, chunked prefill (decode first, 2048 tokens a
step), at most 128 requests in flight, paged KV (16-token blocks) preempting the youngest when
full; GPU and PIM overlapped by AttAcc's --pipeopt rule.  The trace: Poisson arrivals, prompts
uniform 128-2048, outputs uniform 32-512 tokens, seed 0.

Placements: "gpu" (everything on the GPU), "attacc-full" (AttAcc: attention on PIM with its
open-source mapping -- every query head with its own KV, as its simulator has no GQA -- and the
FFN split between GPU and PIM), "full+dcc" (tuned attention and QKV / projection, the FFN split
on the tuned programs) and "pimjax" (pim_jit's own placement: every op where its tuned program
beats the GPU; grouped-query KV stored once).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "data", "serving_curve.json")
PLACEMENTS = ("gpu", "attacc-full", "full+dcc", "pimjax")
SETUP = dict(system="attacc", tp=8, gpu_kernels="fused", overlap="pipeline", prefill="decode-first",
             max_tokens=2048, max_batch=128, kv_policy="preempt")
SUMMARY_KEYS = ("tokens_per_s", "requests_per_s", "tpot_ms_p50", "tpot_ms_p99", "ttft_ms_p50", "ttft_ms_p99",
                "latency_ms_p99", "mean_batch", "peak_kv_occupancy", "preemptions", "kv_waits")


def curve(rates, n, cache, progress=True) -> list[dict]:
    """One row per (placement, arrival rate): the summary figures of `serve`."""
    from pimjax.studies.serving import poisson_requests, serve, uniform
    rows = []
    for pl in PLACEMENTS:
        for rate in rates:
            reqs = poisson_requests(n, rate=rate, prompt=uniform(128, 2048), output=uniform(32, 512), seed=0)
            t0 = time.perf_counter()
            res = serve("llama2-70b", "attacc", reqs, placement=pl, cache=cache, progress=progress, **SETUP)
            s = res.summary()
            row = {"placement": pl, "rate": rate, **{k: float(s[k]) for k in SUMMARY_KEYS},
                   "kv_blocks": res.layout.total_blocks, "wall_s": time.perf_counter() - t0}
            rows.append(row)
            print(f"{pl:12} {rate:5.1f} req/s: {row['tokens_per_s']:7.0f} tok/s, "
                  f"p99 TPOT {row['tpot_ms_p99']:6.1f} ms, p99 TTFT {row['ttft_ms_p99']:8.0f} ms, batch {row['mean_batch']:5.1f}, "
                  f"preemptions {row['preemptions']:.0f} ({row['wall_s']:.0f} s)", flush=True)
    return rows


def crossover(batches, contexts, cache, progress=True) -> list[dict]:
    """Per (context, batch): one decode step of `batch` requests at `context`, per layer: the PIM
    attention (the slowest partition) and the GPU's batched attention, and each placement's time
    per output token -- where PIM attention stops paying.  decode_batch_<placement>: the requests
    its largest decode step held (fewer than `batch` when their KV did not fit: the rest waited,
    so that placement's TPOT is at the smaller batch)."""
    import numpy as np

    from pimjax.studies.serving import batch_requests, serve
    rows = []
    for L in contexts:
        for B in batches:
            row = {"context": L, "batch": B}
            for pl in PLACEMENTS:
                res = serve("llama2-70b", "attacc", batch_requests(B, L - 1, 2), placement=pl, cache=cache,
                            progress=progress, **dict(SETUP, max_batch=B, max_tokens=10**7))
                row[f"tpot_ms_{pl}"] = float(res.requests["tpot_ms"].mean())
                row[f"decode_batch_{pl}"] = int(res.steps["decodes"].max())     # fewer than B: the KV did not fit
                c = res.costs
                if pl in ("attacc-full", "pimjax"):
                    ctx = np.full(B, L, np.int64)
                    part = np.arange(B) % c.layout.partitions     # the engine's placement: least-loaded first
                    t = c.pim_times(ctx)
                    row[f"pim_attention_us_{pl}"] = float(np.bincount(part, weights=t).max()) / 1e3
                    row["gpu_attention_us"] = c.gpu_decode_attention(B, B * L) / 1e3
            rows.append(row)
            print(L, B, {k: round(v, 2) for k, v in row.items() if k not in ("context", "batch")}, flush=True)
    return rows


def main(argv=None) -> int:
    sys.path.insert(0, os.path.join(HERE, ".."))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=600)
    ap.add_argument("--rates", default="0.5,1,2,3,4,6,8,10")
    ap.add_argument("--batches", default="1,2,4,8,16,32,64,128,256,512,1024")
    ap.add_argument("--contexts", default="1024,2048")
    ap.add_argument("--cache", default=os.path.join(HERE, "out", "serving_tune_cache.json"))
    ap.add_argument("--quick", action="store_true", help="a few points only (a smoke test)")
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args(argv)
    rates = [float(r) for r in args.rates.split(",")]
    batches = [int(b) for b in args.batches.split(",")]
    contexts = [int(c) for c in args.contexts.split(",")]
    if args.quick:
        rates, batches, contexts, args.requests = rates[:2], batches[:3], contexts[:1], min(args.requests, 60)
    os.makedirs(os.path.dirname(args.cache), exist_ok=True)
    t0 = time.perf_counter()
    data = {"setup": {k: v for k, v in SETUP.items()}, "model": "llama2-70b", "backend": "attacc (system='attacc')",
            "trace": {"requests": args.requests, "prompt": [128, 2048], "output": [32, 512], "seed": 0},
            "curve": curve(rates, args.requests, args.cache),
            "crossover": crossover(batches, contexts, args.cache)}
    data["wall_s"] = time.perf_counter() - t0
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(data, f, indent=1)
    print(f"wrote {args.out} ({data['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
