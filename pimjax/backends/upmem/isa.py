"""UPMEM's commands: timed by the family's own DPU model (`cycles.py`), so
they have no DRAM timing class."""
from ...lower.program import Op

TIMING_CLASSES: dict = {}
