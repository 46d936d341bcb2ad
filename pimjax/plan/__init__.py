"""Planning and placement, between the search and the API: which arguments stay in PIM
memory (`residency`), and per op of a traced graph where it runs, with which draft and
program, and why (`predict_plans` for `Lowered`, `verify_plans` for `Compiled`; fused
attention blocks; PIMFlow's GPU + PIM modes).  See README.md."""
from .mixed import Split, mixed_plans, run_split
from .placement import plan, predict_plans, verify_plans
from .plans import OpPlan, host_bytes, plans_text
from .residency import Residency, append_update

__all__ = ["OpPlan", "host_bytes", "plans_text", "Residency", "append_update", "plan",
           "predict_plans", "verify_plans", "Split", "mixed_plans", "run_split"]
