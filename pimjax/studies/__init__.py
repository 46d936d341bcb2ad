"""Studies: questions asked of the whole compiler (`pim_jit`, the reports, the search) on
models and design spaces -- the top of the import graph; nothing in the library imports it
(but `pimjax.explore`, re-exported).  See README.md.

* `inference` -- the LLM decode loop timed per phase for GPU, AttAcc-Base, AttAcc-Full and
  pimjax (`decode`, `DecodeResult`, `SYSTEMS`), and the AttAcc system-model check
  (`attacc_end_to_end`)
* `serving`   -- LLM serving on GPU + PIM: request traces, continuous / static batching,
  paged KV caches in the PIM stacks (`serve`, `ServeResult`, `ServingObjective`)
* `dse`       -- design-space exploration (`explore`, `grid`, `evolve`)
* `pimflow`   -- PIMFlow's modelling (per-layer PIM / GPU times and energy of its CNNs, the
  modes of Algorithm 1): what `experiments/pimflow.py` tabulates and caches
"""
from .dse import explore
from .inference import SYSTEMS, DecodeResult, attacc_end_to_end, decode
from .serving import Requests, ServeResult, ServingObjective, batch_requests, poisson_requests, requests_from, serve

__all__ = ["SYSTEMS", "DecodeResult", "attacc_end_to_end", "decode", "serve", "ServeResult", "ServingObjective",
           "Requests", "poisson_requests", "requests_from", "batch_requests", "explore"]
