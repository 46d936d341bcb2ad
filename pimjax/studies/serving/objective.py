"""A serving run as an objective of `pimjax.explore` / `pimjax.studies.dse.evolve`.

    from pimjax.studies.dse import grid, evolve
    obj = ServingObjective("llama2-70b", reqs, tpot_p99_ms=50.0, tp=8, placement="pimjax")
    df = pimjax.explore(obj, backends=grid("attacc", system=["attacc"], stacks=[3, 5, 8],
                                            variant=["bank-pc", "bg-pc"], gpu=["attacc", "occupancy"]))
    df.sort_values("goodput_tokens_per_s", ascending=False)

Each design point (a Backend: stacks x PIM level x GPU model) is served with
the same trace and options, each tuned for itself; the row carries the
serving figures (`ROW_KEYS`) beside `explore`'s columns.  The objective to
maximise is `goodput_tokens_per_s`: the output tokens per second of the
requests whose time per output token is within `tpot_p99_ms`, when the run's
p99 TPOT meets that target, else 0 (`tokens_per_s` is the raw throughput).
"""
from __future__ import annotations

import time

import numpy as np

ROW_KEYS = ("tokens_per_s", "requests_per_s", "goodput_tokens_per_s", "meets_slo", "tpot_ms_p99", "ttft_ms_p99",
            "latency_ms_p99", "mean_batch", "peak_kv_occupancy", "preemptions", "kv_blocks")


class ServingObjective:
    """`serve(cfg, backend=<the point>, requests, **options)` per design point.

    cfg: model config or name; requests: the trace; tpot_p99_ms: the
    latency target (ms per output token at the 99th percentile); options:
    `serve`'s (placement, scheduler, max_batch, tp, ...; progress is off).
    Used by `pimjax.explore` in place of a function (`explore(obj,
    backends=...)`, no arguments).
    """

    def __init__(self, cfg, requests, *, tpot_p99_ms: float, **options):
        if not (np.isfinite(tpot_p99_ms) and tpot_p99_ms > 0):
            raise ValueError(f"ServingObjective: tpot_p99_ms must be > 0 (ms), got {tpot_p99_ms!r}")
        from .service import OPTIONS
        other = sorted(set(options) - set(OPTIONS) - {"scheduler"})
        if other:
            raise ValueError(f"ServingObjective: {other} are not serve options (each design point is a Backend; "
                             f"set the preset's options through the grid); valid: {sorted(OPTIONS) + ['scheduler']}")
        self.cfg, self.requests, self.tpot_p99_ms = cfg, requests, float(tpot_p99_ms)
        self.options = dict(options, progress=False)
        self.__qualname__ = f"serve[{getattr(cfg, 'name', cfg)}]"
        self.__module__ = __name__

    def __repr__(self) -> str:
        return (f"ServingObjective({getattr(self.cfg, 'name', self.cfg)}, {len(self.requests)} requests, "
                f"p99 TPOT <= {self.tpot_p99_ms} ms, {sorted(self.options.items())})")

    def digest(self) -> str:
        """What a results row depends on besides the backend (for `explore`'s resume)."""
        import hashlib
        r = self.requests
        blob = repr((getattr(self.cfg, "name", self.cfg), self.tpot_p99_ms,
                     sorted((k, repr(v)) for k, v in self.options.items()),
                     r.arrival_s.tobytes().hex()[:64], int(r.prompt_len.sum()), int(r.output_len.sum()), len(r)))
        return hashlib.sha1(blob.encode()).hexdigest()[:8]

    def evaluate(self, backend) -> dict:
        """The serving figures of one backend (`ROW_KEYS` plus total_ns: the
        makespan in ns, kv_capacity_tokens and weights_share: `ServeResult.hardware`'s;
        explore adds the GPU and the PIM memory)."""
        from .service import serve
        t0 = time.perf_counter()
        res = serve(self.cfg, backend, self.requests, **self.options)
        s = res.summary(tpot_slo_ms=self.tpot_p99_ms)
        meets = bool(s["tpot_ms_p99"] <= self.tpot_p99_ms)
        row = {k: (float(s[k]) if k in s else None) for k in ROW_KEYS}
        row["meets_slo"] = meets
        row["goodput_tokens_per_s"] = float(s["goodput_tokens_per_s"]) if meets else 0.0
        row["kv_blocks"] = res.layout.total_blocks
        h = res.hardware
        row["kv_capacity_tokens"], row["weights_share"] = h["kv_capacity_tokens"], h["weights_share"]
        row["total_ns"] = float(s["makespan_s"]) * 1e9
        row["tuning_s"] = time.perf_counter() - t0
        return row
