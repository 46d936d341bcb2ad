"""The multi-layer hardware abstraction and backend presets."""
from .core import Backend, Core, Energy, Group, HostModel, System, Timing, stack_variants
from .gpu import GPU_MODELS, allreduce_ns, attention_ns, elementwise_ns, gemm_ns, gpu_time
from .host import a100, gpu_on, paper_gpu, pimflow_rtx2060, rtx2060, xeon_gold_5220r
from .peaks import derived_peaks, describe_system, system_line
from .presets import get_backend, list_backends

__all__ = ["Backend", "Core", "Energy", "Group", "HostModel", "System", "Timing", "stack_variants",
           "a100", "rtx2060", "pimflow_rtx2060", "paper_gpu", "xeon_gold_5220r", "gpu_on", "GPU_MODELS", "gemm_ns", "attention_ns", "allreduce_ns",
           "elementwise_ns", "gpu_time", "derived_peaks", "describe_system", "system_line", "get_backend", "list_backends"]
