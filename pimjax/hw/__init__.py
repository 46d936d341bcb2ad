"""The multi-layer hardware abstraction and backend presets."""
from .core import Backend, Core, Energy, Group, HostModel, System, Timing, stack_variants
from .host import a100, rtx2060, xeon_gold_5220r
from .peaks import derived_peaks
from .presets import get_backend, list_backends

__all__ = ["Backend", "Core", "Energy", "Group", "HostModel", "System", "Timing", "stack_variants",
           "a100", "rtx2060", "xeon_gold_5220r", "derived_peaks", "get_backend", "list_backends"]
