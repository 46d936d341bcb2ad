"""UPMEM's commands: timed by the family's own DPU model (`cycles.py`), so
they have no DRAM timing class."""

TIMING_CLASSES: dict = {}
