"""Serving simulator speed (issue 43): 1 000 requests of LLaMA-2 70B (Poisson arrivals, prompts
uniform 128-2048, outputs uniform 32-512 tokens) on 8 A100s + AttAcc stacks (TP 8), continuous
batching of up to 64 requests.  Targets: <= 5 min cold, <= 60 s warm on this 2-core box.

    .venv/bin/python benchmarks/serve_bench.py [--placement pimjax] [--rate 4]

cold: a fresh process, no tuning cache, no serving tables, no XLA cache (every attention bucket
and the dense ladder compiled and simulated); warm (process): the same call again in that
process; warm (disk): a fresh process whose tuning cache and serving tables are on disk (the
JSON files the cold run wrote).  Each row: wall seconds of the whole `serve` call, of building
the step costs, of the scheduler, and the steps simulated per second.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def one(placement: str, rate: float, cache: str, repeat: int) -> list[dict]:
    """Run serve `repeat` times in this process; the timings of each."""
    sys.path.insert(0, os.path.join(HERE, ".."))
    import warnings
    warnings.simplefilter("ignore")
    from pimjax.studies.serving import poisson_requests, serve, uniform
    reqs = poisson_requests(1000, rate=rate, prompt=uniform(128, 2048), output=uniform(32, 512), seed=0)
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        res = serve("llama2-70b", "attacc", reqs, system="attacc", tp=8, placement=placement, max_batch=64,
                    cache=cache, progress=False)
        wall = time.perf_counter() - t0
        s = res.summary()
        out.append({"wall_s": wall, "compile_s": res.compile_s, "simulate_s": res.simulate_s,
                    "steps": len(res.steps), "buckets": res.costs.compiled_buckets,
                    "tokens_per_s": float(s["tokens_per_s"]), "tpot_ms_p99": float(s["tpot_ms_p99"])})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--placement", default="pimjax")
    ap.add_argument("--rate", type=float, default=4.0)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--cache", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--repeat", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(one(args.placement, args.rate, args.cache, args.repeat)))
        return 0
    tmp = tempfile.mkdtemp(prefix="serve_bench_")
    cache = os.path.join(tmp, "tune.json")
    env = dict(os.environ, PIMJAX_XLA_CACHE="0")

    def child(repeat: int) -> list[dict]:
        cmd = [sys.executable, os.path.abspath(__file__), "--child", "--placement", args.placement, "--rate",
               str(args.rate), "--cache", cache, "--repeat", str(repeat)]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        return json.loads(p.stdout.strip().splitlines()[-1])

    cold, warm_process = child(2)
    warm_disk, = child(1)
    print(f"serve: LLaMA-2 70B, 1000 requests at {args.rate} req/s, 8 x (A100 + AttAcc 5 stacks), "
          f"placement {args.placement!r}, {cold['buckets']} attention buckets, {cold['steps']} steps")
    print(f"{'run':18} {'wall s':>8} {'costs s':>8} {'scheduler s':>12} {'steps/s':>9} {'target':>8}")
    for name, r, target in (("cold", cold, 300), ("warm (process)", warm_process, 60), ("warm (disk)", warm_disk, 60)):
        ok = "ok" if r["wall_s"] <= target else "MISSED"
        print(f"{name:18} {r['wall_s']:8.1f} {r['compile_s']:8.1f} {r['simulate_s']:12.1f} "
              f"{r['steps'] / r['simulate_s']:9.0f} {'<= ' + str(target):>8} {ok}")
    print(f"(tokens/s {cold['tokens_per_s']:.0f}, p99 TPOT {cold['tpot_ms_p99']:.1f} ms; the runs agree: "
          f"{cold['tokens_per_s'] == warm_disk['tokens_per_s'] == warm_process['tokens_per_s']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
