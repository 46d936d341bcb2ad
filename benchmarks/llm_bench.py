"""Full-size LLM decode: compile + simulation time, peak RSS and the per-token figures.

    .venv/bin/python benchmarks/llm_bench.py [--models gpt3-13b llama2-33b] [--prompt 2048]
                                             [--tokens 128] [--batch 1] [--stacks 5] [--l-bucket 16]

For each model, `pimjax.studies.inference` (one layer traced from
ShapeDtypeStructs, nothing materialised; attention compiled per new context
length) runs twice, each in a fresh process: *cold* with an empty tuner cache
(`pimjax.search.cache.TuneCache`, a JSON file in a temporary directory) and
*warm* with the cache the cold run filled.  Both processes see the machine's
persistent XLA / numba caches (pimjax's own compile caches, filled by any
earlier run), so "cold" is the tuner's cold start, not the first run on a new
machine.  Peak RSS is `resource.getrusage(RUSAGE_SELF).ru_maxrss` of each
process.  Printed beside: the per-token ms of every system (GPU, AttAcc-Base,
AttAcc-Full, Base+DCC, Full+DCC, pimjax) and pimjax's speedup over the GPU.
Targets (issue #25): cold <= 120 s, warm <= 20 s, peak RSS <= 4 GB.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from rich.console import Console
from rich.table import Table


def child(args) -> None:
    """One decode run in this process; prints one JSON line."""
    import resource

    from pimjax.models import get_config
    from pimjax.search.tuner import Tuner
    from pimjax.studies import decode
    t0 = time.perf_counter()
    res = decode(get_config(args.model), "attacc", stacks=args.stacks, batch=args.batch, prompt=args.prompt,
                 tokens=args.tokens, l_bucket=args.l_bucket, tuner=Tuner(cache=args.cache))
    wall = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024        # Linux: KiB
    print(json.dumps({"wall_s": wall, "rss_bytes": rss, "compile_s": res.compile_s, "tuning_s": res.tuning_s,
                      "verify_s": res.verify_s, "attention_compiles": len(res.attention),
                      "totals_ms": {k: v / 1e6 for k, v in res.totals().items()}}))


def run_child(args, model: str, cache: str) -> dict:
    cmd = [sys.executable, __file__, "--child", "--model", model, "--cache", cache,
           "--prompt", str(args.prompt), "--tokens", str(args.tokens), "--batch", str(args.batch),
           "--stacks", str(args.stacks), "--l-bucket", str(args.l_bucket)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["gpt3-13b", "llama2-33b"])
    ap.add_argument("--model", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--cache", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--prompt", type=int, default=2048)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--stacks", type=int, default=5)
    ap.add_argument("--l-bucket", type=int, default=16)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    console = Console(width=180)
    t = Table(title=f"LLM decode on attacc ({args.stacks} stacks), batch {args.batch}, prompt {args.prompt}, "
                    f"{args.tokens} output tokens")
    for col in ("model", "run", "wall s", "layer compile s", "drafts+predict s", "verify s", "attn compiles",
                "peak RSS GB", "GPU ms/tok", "AttAcc-Base", "AttAcc-Full", "Base+DCC", "Full+DCC", "pimjax",
                "pimjax vs GPU"):
        t.add_column(col, justify="left" if col in ("model", "run") else "right")
    for model in args.models:
        with tempfile.TemporaryDirectory() as tmp:
            cache = os.path.join(tmp, "tune.json")
            for run in ("cold", "warm"):
                console.print(f"[dim]{model}: {run} run...[/dim]")
                r = run_child(args, model, cache)
                ms = r["totals_ms"]
                t.add_row(model, run, f"{r['wall_s']:.1f}", f"{r['compile_s']:.1f}", f"{r['tuning_s']:.1f}",
                          f"{r['verify_s']:.1f}", str(r["attention_compiles"]), f"{r['rss_bytes'] / 1e9:.2f}",
                          f"{ms['gpu']:.3f}", f"{ms['attacc-base']:.3f}", f"{ms['attacc-full']:.3f}",
                          f"{ms['base+dcc']:.3f}", f"{ms['full+dcc']:.3f}", f"{ms['pimjax']:.3f}",
                          f"{ms['gpu'] / ms['pimjax']:.2f}x")
    console.print(t)


if __name__ == "__main__":
    main()
