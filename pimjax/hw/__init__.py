"""The multi-layer hardware abstraction and backend presets."""
from .core import Backend, Core, Energy, Group, HostModel, System, Timing

__all__ = ["Backend", "Core", "Energy", "Group", "HostModel", "System", "Timing"]
