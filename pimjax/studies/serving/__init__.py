"""LLM serving on a GPU + PIM system: a stream of requests, a scheduler, paged KV
caches in the PIM stacks, step times from compiled kernels.

* `requests` -- request traces (`Requests`; `poisson_requests`, `requests_from`,
  `batch_requests`; length distributions `fixed`, `uniform`, `lognormal`)
* `costs`    -- step times from compiled kernels and the KV layout (`StepCosts`,
  `build_costs`, `kv_layout`, `KVLayout`)
* `engine`   -- the scheduler: continuous / static batching, prefill-first /
  chunked, KV blocks with preemption (`simulate`)
* `service`  -- the entry point (`serve`, `ServeResult`, `ServeOptions`) and
  `rate_sweep` (goodput and latency against the request rate)
* `objective` -- a serving run as an `explore` objective (`ServingObjective`)
"""
from .costs import SYSTEMS, KVLayout, StepCosts, build_costs, kv_layout, weight_bytes
from .engine import simulate
from .objective import ServingObjective
from .requests import (
                       LengthDist,
                       Requests,
                       as_dist,
                       batch_requests,
                       fixed,
                       lognormal,
                       poisson_requests,
                       requests_from,
                       uniform,
)
from .service import CapacityWarning, ServeOptions, ServeResult, rate_sweep, serve

__all__ = ["LengthDist", "Requests", "as_dist", "batch_requests", "fixed", "lognormal", "poisson_requests",
           "requests_from", "uniform", "SYSTEMS", "KVLayout", "StepCosts", "build_costs", "kv_layout",
           "weight_bytes", "simulate", "CapacityWarning", "ServeOptions", "ServeResult", "rate_sweep", "serve", "ServingObjective"]
