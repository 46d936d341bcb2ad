"""The multi-layer PIM hardware abstraction (DCC §IV-A) as pytree dataclasses.

Three levels:

* `System` — the host (a roofline `HostModel`), the number of PIM devices,
  the host<->group link bandwidth and the host's on-chip staging buffer used
  for channel-parallel data rearrangement (DCC §IV-C).
* `Group`  — a channel / pseudo-channel / rank: its cores, the group-level
  units (AttAcc softmax + accumulator, Newton global buffers) and whether
  group-broadcast commands exist.
* `Core`   — a PIM unit with its bank(s): SIMD lanes, data type, registers or
  scratchpad, supported operations, bank geometry.

plus `Timing` (tCK and DRAM constraints, in command-clock cycles) and
`Energy` (per-command energies, pJ).

Counts and geometry are *static* (they change program shapes); timing,
clocks, bandwidths and energies are *array leaves*, so one compiled cycle
model can be `jax.vmap`-ped over a batch of `Timing` variants.  Every class
validates on construction and raises `ValueError` naming the field; use
`.replace(**changes)` to make variants (it validates again).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Any

import jax
import numpy as np

from .gpu import HOST_ENERGY_FIELDS  # the fields the GPU energy model reads (validated here)


# --------------------------------------------------------------------------
# pytree registration: static fields become aux data, the rest are leaves
# --------------------------------------------------------------------------
def _register(cls, static: tuple[str, ...]):
    names = tuple(f.name for f in fields(cls))
    dynamic = tuple(n for n in names if n not in static)

    def flatten_with_keys(obj):
        children = tuple((jax.tree_util.GetAttrKey(n), getattr(obj, n)) for n in dynamic)
        aux = tuple(getattr(obj, n) for n in static)
        return children, aux

    def flatten(obj):
        return tuple(getattr(obj, n) for n in dynamic), tuple(getattr(obj, n) for n in static)

    def unflatten(aux, children):
        # Bypass __init__/__post_init__: inside vmap/jit the leaves are
        # tracers (or sentinels) and must not be validated or converted.
        obj = object.__new__(cls)
        for n, v in zip(dynamic, children):
            object.__setattr__(obj, n, v)
        for n, v in zip(static, aux):
            object.__setattr__(obj, n, v)
        return obj

    jax.tree_util.register_pytree_with_keys(cls, flatten_with_keys, unflatten, flatten)
    cls._static_fields = static
    cls._dynamic_fields = dynamic
    return cls


def pytree_dataclass(*, static: tuple[str, ...] = ()):
    """Frozen dataclass registered as a pytree with `static` fields as aux data."""
    def wrap(cls):
        cls = dataclass(frozen=True)(cls)
        return _register(cls, static)
    return wrap


def _concrete(x) -> np.ndarray | None:
    """numpy view of a concrete value, None for tracers / abstract values."""
    if isinstance(x, jax.core.Tracer):
        return None
    try:
        return np.asarray(x)
    except Exception:  # noqa: BLE001 - abstract or opaque leaves are not validated
        return None


def as_float(x):
    """float for a concrete scalar; tracers and arrays with a batch axis stay
    as they are (a stack of one variant keeps its [1] axis), so a figure of a
    backend is a number for one backend and an array under `jax.vmap`."""
    if isinstance(x, jax.core.Tracer) or np.ndim(x) != 0:
        return x
    try:
        return float(x)
    except (TypeError, ValueError):
        return x


def is_int(x) -> bool:
    """An integer setting: Python or numpy ints, not bools (True is not 1 channel)."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _numeric(v: np.ndarray) -> bool:
    """Whether a concrete value can be compared (not an object / string array)."""
    return v.dtype.kind in "biuf"


def check_positive(obj, *names: str) -> None:
    for n in names:
        v = _concrete(getattr(obj, n))
        if v is not None and not np.all(v > 0):
            raise ValueError(f"{type(obj).__name__}.{n} must be positive, got {getattr(obj, n)!r}")


def check_non_negative(obj, *names: str) -> None:
    for n in names:
        v = _concrete(getattr(obj, n))
        if v is not None and not np.all(v >= 0):
            raise ValueError(f"{type(obj).__name__}.{n} must be non-negative, got {getattr(obj, n)!r}")


# The engines' arithmetic: the lax.scan cycle engine (and the sweeps, energies and report
# figures built on it) computes in float32, the native engine in float64.  A setting must be a
# float32 number, and a latency in cycles an integer float32 holds exactly (below 2**24).
F32_MAX = float(np.finfo(np.float32).max)
F32_TINY = float(np.finfo(np.float32).tiny)
CYCLES_MAX = 2 ** 24


def check_finite(obj, *names: str) -> None:
    """Reject inf / NaN, and magnitudes float32 (the scan engine's type) cannot
    hold: an infinite time or bandwidth turns a sweep's arithmetic into
    inf - inf = NaN instead of an error, and 1e40 is finite in float64 but
    inf in the scan."""
    for n in names:
        v = _concrete(getattr(obj, n))
        if v is not None and (not _numeric(v) or not np.all(np.isfinite(v))):
            raise ValueError(f"{type(obj).__name__}.{n} must be a finite number, got {getattr(obj, n)!r}")
        if v is not None and v.dtype.kind == "f" and not np.all(np.abs(v) <= F32_MAX):
            raise ValueError(f"{type(obj).__name__}.{n} = {getattr(obj, n)!r} overflows float32, the "
                             f"cycle engine's arithmetic (largest {F32_MAX:.3g})")


def check_cycles(obj, *names: str) -> None:
    """A latency in command-clock cycles must be below 2**24: the scan engine
    times in float32, which holds integers exactly only up to 2**24 (a
    1e9-cycle latency would absorb every later command's few cycles)."""
    for n in names:
        v = _concrete(getattr(obj, n))
        if v is not None and _numeric(v) and not np.all(v <= CYCLES_MAX):
            raise ValueError(f"{type(obj).__name__}.{n} = {getattr(obj, n)!r} cycles exceeds {CYCLES_MAX} "
                             "(2**24), the largest latency the float32 cycle engine holds to the cycle")


def check_not_tiny(obj, *names: str) -> None:
    """A positive divisor (a clock, a bandwidth) must be a normal float32:
    1 / 1e-40 overflows float32."""
    for n in names:
        v = _concrete(getattr(obj, n))
        if v is not None and _numeric(v) and not np.all(v >= F32_TINY):
            raise ValueError(f"{type(obj).__name__}.{n} = {getattr(obj, n)!r} is below float32's "
                             f"smallest normal number ({F32_TINY:.3g}): its inverse would overflow")


def check_int(obj, *names: str) -> None:
    """Static counts and sizes are ints: they are shapes and loop bounds of
    programs, and 32.5 columns is not a smaller 32."""
    for n in names:
        v = getattr(obj, n)
        if not is_int(v):
            raise ValueError(f"{type(obj).__name__}.{n} must be an int, got {v!r}")


def check_bool(obj, *names: str) -> None:
    for n in names:
        v = getattr(obj, n)
        if not isinstance(v, (bool, np.bool_)):
            raise ValueError(f"{type(obj).__name__}.{n} must be a bool, got {v!r}")


def check_type(obj, name: str, cls: type) -> None:
    """A level of the hierarchy is an instance of its class (a Timing where a
    Timing goes: `replace(timing=None)` would fail far away, in a scan)."""
    v = getattr(obj, name)
    if not isinstance(v, cls):
        raise ValueError(f"{type(obj).__name__}.{name} must be a {cls.__name__}, got {type(v).__name__}")


def check_power_of_two(obj, *names: str) -> None:
    for n in names:
        v = getattr(obj, n)
        # int(32.5) would be 32: a non-integer is refused, not truncated
        if not is_int(v) or v < 1 or v & (v - 1):
            raise ValueError(f"{type(obj).__name__}.{n} must be a power of two, got {v!r}")


class _Replace:
    def replace(self, **changes):
        """A validated copy with `changes` applied (dataclasses.replace)."""
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise ValueError(f"{type(self).__name__} has no field(s) {sorted(unknown)}")
        return dataclasses.replace(self, **changes)


# --------------------------------------------------------------------------
# the levels
# --------------------------------------------------------------------------
PIMFLOW_FIELDS = ("simt_flops", "l2_bandwidth", "mem_latency_ns", "sm_inflight_bytes")
# read by the "pimflow" GPU model only


LIBRARY_FIELDS = ("vector_flops", "pow_flops", "row_bandwidth_efficiency", "row_pass_ns", "row_elem_ns")
# read by the "library" GPU model only (`hw/gpu_library.py`; pow_flops by the maps of the measured sets it is
# held to, `hw/gpu_check.py`: a traced graph's maps pass their own FLOPs; 0 = not modelled)


@pytree_dataclass(static=("name", "staging_buffer_bytes", "model", "sms", "l1_bytes_per_sm", "l2_bytes",
                           "profile", "profile_base"))
class HostModel(_Replace):
    """The host (GPU / CPU) and its time model.

    time_ns is the roofline: max(bytes / (bw * eff_bw), flops / (peak * eff_flops)) + launch;
    the PIM programs' own host work (read-back, merge) is charged on it.  The
    baseline ops (`pimjax.sim.host.host_time`, `gemm_ns`, `attention_ns`,
    `elementwise_ns`) follow `model`, one of `pimjax.hw.gpu.GPU_MODELS`:
    "roofline", "dcc", "attacc" (AttAcc's A100a system model), "occupancy"
    (launch + SM occupancy) or "pimflow" (PIMFlow's Accel-Sim RTX 2060: launch,
    cuDNN tiles on the configured SMs, L2 and channels); `pimjax/hw/gpu.py`
    defines them.

    peak_flops: FLOP/s; mem_bandwidth: bytes/s; launch_overhead_ns: ns per kernel.
    staging_buffer_bytes: controllable on-chip memory used to reorganise data
    before channel-parallel writes (GPU shared memory; 0 for CPUs).
    sms: streaming multiprocessors (thread-block slots of the occupancy and
    attacc models; 0 = not modelled); l1_bytes_per_sm / l2_bytes: the cache
    capacities AttAcc's tiling search reads.

    Energy (`hw.gpu.gpu_energy_pj`; all 0 = no energy model, the default for a
    host that does not give one): e_mem_pj_per_byte, e_l2_pj_per_byte,
    e_l1_pj_per_byte: pJ per byte moved to / from the memory, through L2, through
    L1; e_reg_pj: pJ per register-file access; e_alu_pj_per_mac: pJ per MAC;
    static_power_w: W drawn whatever the kernel does, charged over the time.

    Read by the "pimflow" model only (0 = not modelled, the default; the model
    refuses a host without them): simt_flops: FLOP/s of the CUDA cores (kernels
    without tensor-core MMAs: depthwise convolutions, GEMVs, maps); l2_bytes:
    the L2 capacity (operands that fit are re-read from it, not from DRAM);
    l2_bandwidth: bytes/s the L2 returns; mem_latency_ns: one DRAM load round
    trip, charged once per kernel (its first loads) and as the floor of each
    k step of a tiled product; sm_inflight_bytes: the loads one SM can have
    outstanding (its L1 MSHRs x line): by Little's law an SM streams at most
    sm_inflight_bytes / mem_latency_ns, whatever the memory's channels.

    Read by the "library" model (`hw/gpu_library.py`): simt_flops is the FP32 rate an FP32
    GEMM runs at (the CUDA cores' FFMA; AMD CDNA's FP32 matrix rate); wave_overhead_ns: ns
    one wave of a tiled product's thread blocks costs beyond its arithmetic (the tile's
    pipeline fill and epilogue; fitted per GPU, `hw/measured/fits.json`); batched_tile_alpha:
    a strided-batched product's tile m x n runs at (I / I_max)^alpha of the largest tile's rate,
    I = m n / (m + n) (its library's batched kernels keep the large tile on a small m or n:
    fitted per GPU, its cuBLAS / rocBLAS heuristics differ by architecture);
    unaligned_efficiency: the share of the rate a tiled product runs at when m, n or k is not a
    multiple of 16 bytes (its library's vectorised-load kernels need them; fitted per GPU).  Its
    maps and row kernels: vector_flops: FLOP/s of the FP32 vector ALUs (the rate a map's arithmetic
    runs at; below simt_flops on AMD CDNA, whose FP32 GEMMs run on the matrix cores; 0: simt_flops);
    pow_flops: FP32 operations one element's `pow` costs in the vendor's math library (CUDA's
    libdevice, ROCm's OCML); row_bandwidth_efficiency: the share of mem_bandwidth a row
    kernel (norm, softmax) streams at (0: bandwidth_efficiency, the maps'); row_pass_ns /
    row_elem_ns: a row kernel's latency on one SM, per pass over its row and per element of it
    (`gpu_library.row_latency_ns`).

    model "profile" (`hw/profile.py`: a GPU described by its own measurements): profile is
    the `GpuProfile` of measured times it answers from, profile_base the analytic model
    (one of `hw.gpu.GENERIC_GPU_MODELS`) that fills what the table lacks.
    """
    name: str
    peak_flops: Any
    mem_bandwidth: Any
    flops_efficiency: Any
    bandwidth_efficiency: Any
    launch_overhead_ns: Any
    staging_buffer_bytes: int = 0
    model: str = "roofline"
    sms: int = 0
    l1_bytes_per_sm: int = 0
    l2_bytes: int = 0
    e_mem_pj_per_byte: Any = 0.0
    e_l2_pj_per_byte: Any = 0.0
    e_l1_pj_per_byte: Any = 0.0
    e_reg_pj: Any = 0.0
    e_alu_pj_per_mac: Any = 0.0
    static_power_w: Any = 0.0
    simt_flops: Any = 0.0
    l2_bandwidth: Any = 0.0
    mem_latency_ns: Any = 0.0
    sm_inflight_bytes: Any = 0.0
    wave_overhead_ns: Any = 0.0
    batched_tile_alpha: Any = 0.0
    unaligned_efficiency: Any = 1.0
    vector_flops: Any = 0.0
    pow_flops: Any = 0.0
    row_bandwidth_efficiency: Any = 0.0
    row_pass_ns: Any = 0.0
    row_elem_ns: Any = 0.0
    profile: Any = None
    profile_base: str = ""

    def __post_init__(self):
        from .gpu import GPU_MODELS
        check_int(self, "staging_buffer_bytes", "sms", "l1_bytes_per_sm", "l2_bytes")
        check_finite(self, *self._dynamic_fields)
        check_positive(self, "peak_flops", "mem_bandwidth", "flops_efficiency", "bandwidth_efficiency",
                       "unaligned_efficiency")
        check_non_negative(self, "launch_overhead_ns", "staging_buffer_bytes", "sms", "l1_bytes_per_sm",
                           "l2_bytes", *HOST_ENERGY_FIELDS, *PIMFLOW_FIELDS, "wave_overhead_ns", *LIBRARY_FIELDS,
                           "batched_tile_alpha")
        for n in ("flops_efficiency", "bandwidth_efficiency", "unaligned_efficiency", "row_bandwidth_efficiency"):
            v = _concrete(getattr(self, n))
            if v is not None and not np.all(v <= 1):
                raise ValueError(f"HostModel.{n} must be <= 1, got {getattr(self, n)!r}")
        if self.model not in GPU_MODELS:
            raise ValueError(f"HostModel.model {self.model!r}: valid models are {list(GPU_MODELS)}")
        if self.model in ("occupancy", "attacc", "library") and self.sms < 1:
            raise ValueError(f"HostModel.model {self.model!r} needs sms >= 1 (thread-block slots)")
        if self.model == "attacc" and (self.l1_bytes_per_sm < 1 or self.l2_bytes < 1):
            raise ValueError("HostModel.model 'attacc' needs l1_bytes_per_sm and l2_bytes (its tiling search)")
        if self.model == "profile":
            from .gpu import GENERIC_GPU_MODELS
            from .profile import GpuProfile
            if not isinstance(self.profile, GpuProfile) or self.profile_base not in GENERIC_GPU_MODELS:
                raise ValueError("HostModel.model 'profile' needs a GpuProfile (profile=) and the analytic model that "
                                 f"fills what it lacks (profile_base= one of {list(GENERIC_GPU_MODELS)}): "
                                 "use pimjax.hw.profile.profile_host(base, profile)")
        if self.model == "pimflow":
            missing = [n for n in ("sms", "l2_bytes", *PIMFLOW_FIELDS)
                       if (v := _concrete(getattr(self, n))) is not None and not np.all(v > 0)]
            if missing:
                raise ValueError(f"HostModel.model 'pimflow' needs {missing} > 0 (PIMFlow's Accel-Sim GPU: "
                                 "`hw.host.pimflow_rtx2060` sets them from its configuration)")

    # -- the baseline model (pimjax/hw/gpu.py) ------------------------------
    def gemm_ns(self, m, n, k, batch=1, elem_bytes=2, operand_bytes=None) -> float:
        """ns of `batch` (m x k) . (k x n) products on this host's model (`hw.gpu.gemm_ns`;
        operand_bytes: the operands' and result's real bytes, read by the "pimflow" model)."""
        from .gpu import gemm_ns
        return gemm_ns(self, m, n, k, batch, elem_bytes, operand_bytes)

    def conv_ns(self, n, h, w, c, f, kh, kw, stride=1, groups=1, elem_bytes=2, operand_bytes=None) -> float:
        """ns of a 2-D convolution on this host's model (`hw.gpu.conv_ns`: cuDNN's pick on
        "library", the im2col view's product elsewhere)."""
        from .gpu import conv_ns
        return conv_ns(self, n, h, w, c, f, kh, kw, stride, groups, elem_bytes, operand_bytes)

    def attention_ns(self, heads, d, L, batch=1, elem_bytes=2, softmax=True, kv_heads=None) -> float:
        """ns of a decode step's attention (score + softmax + context; `hw.gpu.attention_ns`;
        kv_heads: grouped-query attention's KV heads)."""
        from .gpu import attention_ns
        return attention_ns(self, heads, d, L, batch, elem_bytes, softmax, kv_heads)

    def elementwise_ns(self, bytes_moved, flops=0.0, *, outputs, reduction=1, kind="act") -> float:
        """ns of a map / row reduction on this host's model (`hw.gpu.elementwise_ns`)."""
        from .gpu import elementwise_ns
        return elementwise_ns(self, bytes_moved, flops, outputs=outputs, reduction=reduction, kind=kind)

    def describe(self) -> dict:
        """The host as plain numbers for report headers: name, model, GB/s,
        TFLOP/s, efficiencies, launch ns, SMs."""
        def num(x):
            a = np.asarray(x)
            return float(a) if a.ndim == 0 else a.tolist()
        return {"name": self.name, "model": self.model, "bandwidth_GBps": num(np.asarray(self.mem_bandwidth) / 1e9),
                "peak_TFLOPs": num(np.asarray(self.peak_flops) / 1e12),
                "bandwidth_efficiency": num(self.bandwidth_efficiency),
                "flops_efficiency": num(self.flops_efficiency),
                "launch_ns": num(self.launch_overhead_ns), "sms": self.sms}

    def memory_ns(self, bytes_moved):
        """ns to move `bytes_moved` bytes at the effective memory bandwidth (no launch)."""
        return bytes_moved / (self.mem_bandwidth * self.bandwidth_efficiency) * 1e9

    def time_ns(self, bytes_moved, flops):
        """Roofline time in ns for `bytes_moved` bytes and `flops` FLOPs."""
        t_mem = self.memory_ns(bytes_moved)
        t_cmp = flops / (self.peak_flops * self.flops_efficiency) * 1e9
        if any(isinstance(v, jax.core.Tracer) for v in (t_mem, t_cmp, self.launch_overhead_ns)):
            return jax.numpy.maximum(t_mem, t_cmp) + self.launch_overhead_ns     # inside jit / vmap
        # concrete numbers stay numpy: a jnp op outside jit is a dispatch, and its
        # first use an XLA compile (0.2-0.4 s of a cold pim_jit compile)
        return np.maximum(t_mem, t_cmp) + self.launch_overhead_ns


@pytree_dataclass(static=("n_devices", "groups_per_device"))
class System(_Replace):
    """System level: host, PIM devices and the host<->group link.

    link_bandwidth: bytes per ns between the host and ONE group (= GB/s), in
    the host->PIM direction (data rearrangement / writes).
    readback_bandwidth: bytes per ns from ONE group back to the host (PIM->host
    read-back).  Defaults to `link_bandwidth` at construction (symmetric
    links); UPMEM's measured DPU->CPU bandwidth is lower than CPU->DPU.  Note
    that after construction it is an independent leaf: `replace`-ing
    `link_bandwidth` alone does not change it.
    n_groups = n_devices * groups_per_device.

    Who reads the two bandwidths: the UPMEM time model (`backends/upmem/cycles.py`)
    and the cost-model features.  The DRAM cycle model of command-driven
    backends (HBM-PIM, AttAcc, Newton) never does: it times host transfers
    as DRAM column commands on the group's data bus, so their speed follows
    `Timing` (tBL / tCCD_S / tCK); `derived_peaks` derives those backends'
    external bandwidth the same way (`peaks.bus_bandwidth`).  Their presets
    set the leaves to that value at the preset timing, and a
    `Backend.replace(timing=...)` does not update them.

    gpu: the processor "vs GPU" compares with, which also runs the ops placed
    off PIM (`pimjax.api`: `host_time` of every op, placement, the GPU-only
    total), with its time model (`HostModel.model`).  None (default): `host`
    itself -- read it as `System.baseline`, never `None` (the presets always
    set `gpu`: with `host=` alone, to that host).  The presets set it to the GPU on the same memory system as their
    PIM units (`host.gpu_on`), so the comparison is fair; `host` stays the
    processor whose roofline times the PIM programs' own host work (read-back,
    merge) and that the cost-model features describe.

    cogpu: the GPU that runs *beside* the PIM units, at the same time, on the
    memory channels PIM does not use (PIMFlow §4.1's channel grouping: 16
    GPU-only + 16 PIM channels of 32), while `gpu` is the GPU-only baseline on
    every channel.  None (default): PIM and the GPU share their channels and
    run one after the other.  `pimjax.search.mixed` plans the GPU + PIM modes
    (MD-DP splits, pipelines) on it.
    """
    host: HostModel
    n_devices: int
    groups_per_device: int
    link_bandwidth: Any
    readback_bandwidth: Any = None
    gpu: Any = None
    cogpu: Any = None

    def __post_init__(self):
        if self.readback_bandwidth is None:
            object.__setattr__(self, "readback_bandwidth", self.link_bandwidth)
        check_type(self, "host", HostModel)
        if self.gpu is not None:
            check_type(self, "gpu", HostModel)
        if self.cogpu is not None:
            check_type(self, "cogpu", HostModel)
        check_int(self, "n_devices", "groups_per_device")
        check_finite(self, "link_bandwidth", "readback_bandwidth")
        check_positive(self, "n_devices", "groups_per_device", "link_bandwidth", "readback_bandwidth")

    @property
    def n_groups(self) -> int:
        return self.n_devices * self.groups_per_device

    @property
    def baseline(self) -> HostModel:
        """The processor "vs GPU" compares with: `gpu`, or `host` when None."""
        return self.gpu if self.gpu is not None else self.host


@pytree_dataclass(static=("cores_per_group", "units", "broadcast", "global_buffer_bytes",
                          "n_global_buffers", "bank_groups", "banks_per_bank_group",
                          "per_core_commands", "data_buses", "controller"))
class Group(_Replace):
    """Group level (a channel / pseudo-channel / rank).

    cores_per_group: PIM cores (units) per group.
    units: group-level units, subset of {"softmax", "accumulator", "global_buffer"}.
    broadcast: whether one command can drive every core of the group.
    per_core_commands: whether a PIM compute command can target one core
    (bank-level commands, DCC's fallback when offsets differ); HBM-PIM
    computes only in all-bank mode.
    global_buffer_bytes / n_global_buffers: Newton/AiM global buffer(s);
    global_buffer_bytes is the TOTAL capacity of all buffers of the group
    (each buffer holds global_buffer_bytes // n_global_buffers bytes).
    bank_groups x banks_per_bank_group: the group's DRAM banks (all of them,
    whether or not every bank has its own PIM unit).
    data_buses: independent host data buses of the group (2 on an AttAcc
    HBM3 channel, one per pseudo-channel; 1 elsewhere): a command-driven
    group moves data_buses x col_bytes per burst slot (`peaks.bus_bandwidth`).
    controller: whose command-timing semantics time the group's records:
    "dram" (pimjax's DRAM rule table, `hw.dram_rules`, every engine) or one
    its backend family declares (`Family.controllers`, e.g. newton's
    "pimflow": PIMFlow's Ramulator fork).
    """
    cores_per_group: int
    units: tuple[str, ...] = ()
    broadcast: bool = True
    global_buffer_bytes: int = 0
    n_global_buffers: int = 0
    bank_groups: int = 4
    banks_per_bank_group: int = 4
    per_core_commands: bool = True
    data_buses: int = 1
    controller: str = "dram"

    def __post_init__(self):
        check_type(self, "controller", str)
        check_int(self, "cores_per_group", "global_buffer_bytes", "n_global_buffers", "bank_groups",
                  "banks_per_bank_group", "data_buses")
        check_bool(self, "broadcast", "per_core_commands")
        object.__setattr__(self, "units", tuple(self.units))   # static aux data must hash
        check_positive(self, "cores_per_group", "bank_groups", "banks_per_bank_group", "data_buses")
        check_non_negative(self, "global_buffer_bytes", "n_global_buffers")
        bad = set(self.units) - {"softmax", "accumulator", "global_buffer"}
        if bad:
            raise ValueError(f"Group.units has unknown unit(s) {sorted(bad)}")
        if "global_buffer" in self.units and (self.global_buffer_bytes <= 0 or self.n_global_buffers <= 0):
            raise ValueError("Group.global_buffer_bytes and n_global_buffers must be positive with a global_buffer unit")
        if self.banks % self.cores_per_group:
            raise ValueError(f"Group.cores_per_group ({self.cores_per_group}) must divide the "
                             f"{self.banks} banks of the group")

    @property
    def banks(self) -> int:
        return self.bank_groups * self.banks_per_bank_group


@pytree_dataclass(static=("banks_per_core", "lanes", "dtype", "n_input_regs", "n_output_regs",
                          "reg_bytes", "scratchpad_bytes", "ops", "rows", "cols", "col_bytes",
                          "tasklets", "pipeline_depth", "programmable", "instruction_bytes",
                          "pim_rows", "readres_bytes"))
class Core(_Replace):
    """Core level: one PIM unit and its bank(s).

    lanes: SIMD lanes (elements per column access); dtype: "float16",
    "bfloat16" or "int32".  n_input_regs / n_output_regs / reg_bytes: the
    register file (HBM-PIM GRF_A / GRF_B, AttAcc GEMV buffer entries, Newton
    result latches).  scratchpad_bytes: WRAM on UPMEM (0 elsewhere).
    ops: supported operations (subset of OPS).  rows x cols x col_bytes: bank
    geometry per bank.  tasklets / pipeline_depth: UPMEM hardware threads and
    pipeline stages (1 elsewhere).
    programmable: True when the core runs its own instruction stream at
    `Timing.dpu_clock_ghz` (UPMEM DPU); False when every PIM operation is
    triggered by a DRAM column command from the host (HBM-PIM, AttAcc,
    Newton) and so is paced by the command clock `Timing.tCK`.
    instruction_bytes: per-core instruction memory (UPMEM IRAM; HBM-PIM CRF);
    0 when commands carry the operation.
    pim_rows: rows per bank that PIM commands can compute on (0 = all);
    HBM-PIM reserves the rows with address bit 12 set for its mode and
    register frames.
    readres_bytes: bytes of one result register that a read-back command
    (Newton READRES) puts on the channel's data bus; None = reg_bytes (the
    latch as it is).  0: the read-back takes a command slot and no bus time
    (PIMFlow's Ramulator fork, `newton(simulator="pimflow")`).
    """
    banks_per_core: int
    lanes: int
    dtype: str
    n_input_regs: int
    n_output_regs: int
    reg_bytes: int
    ops: frozenset
    rows: int
    cols: int
    col_bytes: int
    scratchpad_bytes: int = 0
    tasklets: int = 1
    pipeline_depth: int = 1
    programmable: bool = False
    instruction_bytes: int = 0
    pim_rows: int = 0
    readres_bytes: int | None = None

    OPS = frozenset({"add", "sub", "mul", "mac", "mad", "max", "min", "relu", "mov",
                     "gemv", "softmax", "exp", "div", "neg", "abs", "cmp", "select"})

    def __post_init__(self):
        check_int(self, "banks_per_core", "lanes", "n_input_regs", "n_output_regs", "reg_bytes", "rows",
                  "cols", "col_bytes", "scratchpad_bytes", "tasklets", "pipeline_depth", "instruction_bytes",
                  "pim_rows")
        check_bool(self, "programmable")
        check_positive(self, "banks_per_core", "lanes", "rows", "cols", "col_bytes",
                       "tasklets", "pipeline_depth")
        check_non_negative(self, "n_input_regs", "n_output_regs", "reg_bytes", "scratchpad_bytes",
                           "instruction_bytes", "pim_rows")
        if self.readres_bytes is not None:
            check_int(self, "readres_bytes")
            check_non_negative(self, "readres_bytes")
        if self.dtype not in ("float16", "bfloat16", "float32", "int32", "int64"):
            raise ValueError(f"Core.dtype {self.dtype!r} is not a supported PIM data type")
        object.__setattr__(self, "ops", frozenset(self.ops))
        bad = self.ops - self.OPS
        if bad:
            raise ValueError(f"Core.ops has unknown operation(s) {sorted(bad)}")
        check_power_of_two(self, "cols", "col_bytes")

    @property
    def readback_bus_bytes(self) -> int:
        """Bytes one result register puts on the data bus when read back
        (`readres_bytes`, or the register's own width)."""
        return self.reg_bytes if self.readres_bytes is None else self.readres_bytes

    @property
    def elem_bytes(self) -> int:
        return int(np.dtype(self.dtype).itemsize) if self.dtype != "bfloat16" else 2

    @property
    def bank_bytes(self) -> int:
        return self.rows * self.cols * self.col_bytes

    @property
    def pim_bank_bytes(self) -> int:
        """Bytes per bank PIM commands can use."""
        return (self.pim_rows or self.rows) * self.cols * self.col_bytes


@pytree_dataclass()
class Timing(_Replace):
    """tCK (ns) and DRAM timing constraints in command-clock cycles.

    Names follow Ramulator / the Samsung simulator.  `tCCD_AB` is the spacing
    of consecutive all-bank PIM column commands (AttAcc's MAC spacing, 4 on
    HBM-PIM where they are timed as tCCD_L).  UPMEM fields: `dpu_clock_ghz`,
    `dma_bytes_per_cycle` (MRAM<->WRAM, per DPU cycle) and
    `dma_latency_cycles`; unused elsewhere (set to 1 / 0).  `tREF0` is the
    first refresh deadline of the rank the program runs in (0 = tREFI); a
    controller that staggers refresh over its ranks gives rank 0 an earlier one.
    `tREFW`: a due refresh waits past a single-bank ACT that can issue
    within tREFW of the latest ACT, before the open banks may be precharged
    (a controller that lets queued commands go while the refresh's
    precharges are not issuable: DRAMSim2's, tRAS); 0 (default): the
    refresh holds every later command (Ramulator's priority queue).
    `gwrite_hiding` (0 / 1, not cycles): 1 switches off the G_ACT's wait for
    the global-buffer writes before it (`dram_rules` BUF_ACT; PIMFlow §4.1's
    GWRITE latency hiding, for PIM channels fed from separate GPU channels).
    """
    tCK: Any
    tCL: Any
    tWL: Any
    tBL: Any
    tRCDRD: Any
    tRCDWR: Any
    tRP: Any
    tRAS: Any
    tRC: Any
    tCCD_S: Any
    tCCD_L: Any
    tCCD_AB: Any
    tRRD_S: Any
    tRRD_L: Any
    tFAW: Any
    tWR: Any
    tRTP_S: Any
    tRTP_L: Any
    tWTR_S: Any
    tWTR_L: Any
    tRTRS: Any
    tREFI: Any
    tRFC: Any
    dpu_clock_ghz: Any = 1.0
    dma_bytes_per_cycle: Any = 1.0
    dma_latency_cycles: Any = 0.0
    tREF0: Any = 0.0
    tREFW: Any = 0.0
    gwrite_hiding: Any = 0.0

    def __post_init__(self):
        check_finite(self, *(f.name for f in fields(self)))
        hide = _concrete(self.gwrite_hiding)
        if hide is not None and not np.all((hide == 0) | (hide == 1)):
            raise ValueError(f"Timing.gwrite_hiding must be 0 or 1 (a switch), got {self.gwrite_hiding!r}")
        # column spacings are divisors of every peak and the cadence of every
        # MAC: at 0 a PIM kernel would be free (and derived_peaks divides by them)
        check_positive(self, "tCK", "tBL", "tCCD_S", "tCCD_L", "tCCD_AB", "dpu_clock_ghz",
                       "dma_bytes_per_cycle", "tREFI")
        check_non_negative(self, *(f.name for f in fields(self)))
        check_not_tiny(self, "tCK", "dpu_clock_ghz", "dma_bytes_per_cycle")
        check_cycles(self, *(f.name for f in fields(self)
                             if f.name not in ("tCK", "dpu_clock_ghz", "dma_bytes_per_cycle")))
        # a refresh must end before the next is due (`refresh=False`, not tREFI 0, switches
        # refresh off: a zero interval would make the deadline NaN)
        refi, rfc = _concrete(self.tREFI), _concrete(self.tRFC)
        if refi is not None and rfc is not None and not np.all(refi > rfc):
            raise ValueError(f"Timing.tREFI ({self.tREFI!r}) must exceed tRFC ({self.tRFC!r}): "
                             "refresh would leave the banks no time (pass refresh=False to time without it)")


@pytree_dataclass()
class Energy(_Replace):
    """Per-command energies in pJ (per group command unless noted)."""
    act: Any = 0.0          # one row activation (per bank)
    pre: Any = 0.0          # one precharge (per bank)
    rd: Any = 0.0           # one column read burst (per bank)
    wr: Any = 0.0           # one column write burst (per bank)
    pim_op: Any = 0.0       # one PIM unit operation on one column (per core)
    io_byte: Any = 0.0      # moving one byte between host and a group
    refresh: Any = 0.0      # one refresh (per group)

    def __post_init__(self):
        check_finite(self, *(f.name for f in fields(self)))
        check_non_negative(self, *(f.name for f in fields(self)))


@pytree_dataclass(static=("name", "variant", "group", "core", "notes", "family"))
class Backend(_Replace):
    """A PIM backend: system, group and core levels plus timing and energy.

    name: the backend's name (a preset's: "hbm-pim", "attacc", "newton",
        "upmem"; any string for a user-defined backend).
    variant: preset option string ("default", "bank-pc", ...).
    family: the backend family that programs it (`pimjax.backends`: its
        lowering, value interpreter, baseline and cost model); defaults to
        `name`.  `get_backend("hbm-pim").replace(name="my-pim")` keeps the
        family "hbm-pim", so every stage works on the renamed backend.
    """
    name: str
    variant: str
    system: System
    group: Group
    core: Core
    timing: Timing
    energy: Energy
    notes: tuple[str, ...] = ()
    family: str = ""

    def __post_init__(self):
        for n, cls in (("name", str), ("family", str)):
            check_type(self, n, cls)
        if not self.family:
            object.__setattr__(self, "family", self.name)
        for n, cls in (("system", System), ("group", Group), ("core", Core), ("timing", Timing),
                       ("energy", Energy)):
            check_type(self, n, cls)
        # Cross-level consistency: the cores of a group own all its banks.
        if self.core.banks_per_core * self.group.cores_per_group != self.group.banks:
            raise ValueError(
                f"Core.banks_per_core ({self.core.banks_per_core}) x Group.cores_per_group "
                f"({self.group.cores_per_group}) must equal the group's {self.group.banks} banks")

    def replace(self, **changes):
        """A validated copy with `changes` applied.  A `family` change must name
        a registered family (`pimjax.backends.families()`): a misspelt one
        would otherwise run every op on the host.  (A family of your own
        registers itself first: `pimjax.backends.register`.)"""
        if "family" in changes:
            from ..family import families
            fam = changes["family"]
            known = families()
            if fam not in known:
                import difflib
                near = difflib.get_close_matches(str(fam), known, n=1)
                hint = f" (did you mean {near[0]!r}?)" if near else ""
                raise ValueError(f"Backend.replace(family={fam!r}): no backend family of that name{hint}; "
                                 f"registered families: {known} (a family of your own: "
                                 f"pimjax.backends.register(Family(...)) first)")
        return super().replace(**changes)

    @property
    def n_groups(self) -> int:
        return self.system.n_groups

    @property
    def cores_per_group(self) -> int:
        return self.group.cores_per_group

    @property
    def n_cores(self) -> int:
        return self.n_groups * self.cores_per_group

    def __repr__(self) -> str:
        return (f"Backend({self.name}/{self.variant}: {self.n_groups} groups x "
                f"{self.cores_per_group} cores, {self.core.lanes} x {self.core.dtype} lanes)")


def stack_variants(variants):
    """Stack a sequence of pytrees with identical static fields along a new
    leading axis (for `jax.vmap` sweeps over timing / bandwidth / energy).

    Example::

        variants = [hbm.replace(timing=hbm.timing.replace(tRP=float(t))) for t in range(10, 18)]
        batch = stack_variants(variants)          # every leaf now has shape (8,)
        jax.vmap(lambda b: b.timing.tRP + b.timing.tRCDRD + b.timing.tCL)(batch)

    Raises ValueError when the static (shape-determining) fields differ.
    """
    variants = list(variants)
    if not variants:
        raise ValueError("stack_variants needs at least one variant")
    # each variant flattened once (structure and leaves together): checking the structures with
    # tree_structure and then stacking with tree.map flattened every variant twice, 60 ms for a
    # sweep's 1 000 timings
    flat = [jax.tree_util.tree_flatten(v) for v in variants]
    first = flat[0][1]
    for i, (_, tree) in enumerate(flat[1:], 1):
        if tree != first:
            raise ValueError(f"variant {i} differs from variant 0 in a static field "
                             "(counts / geometry / names); only leaves may vary in a sweep")
    return jax.tree_util.tree_unflatten(first, [_stack_leaf(*xs) for xs in zip(*(f[0] for f in flat))])


def _stack_leaf(*xs):
    """One leaf of `stack_variants`: stacked on the host (numpy's promotion
    over all variants: an int in one and a float in another gives floats)
    and put on the device once, in JAX's canonical dtype (one jnp.asarray
    per variant and leaf cost ~0.1 ms each: 1 000 timing variants took 3.8 s).
    Python scalars (a Timing's fields) go through one np.asarray of the
    list, the same dtype as stacking them one by one (bool < int < float),
    30x faster: 1 000 timings' 29 leaves 36 -> 1 ms."""
    if all(type(x) in (float, int, bool) for x in xs):
        out = np.asarray(xs)
    else:
        out = np.stack([np.asarray(x) for x in xs])
    want = jax.dtypes.canonicalize_dtype(out.dtype)
    if np.issubdtype(out.dtype, np.integer) and want != out.dtype and out.size:
        info = np.iinfo(want)
        if out.min() < info.min or out.max() > info.max:      # jnp.asarray would wrap it silently
            raise OverflowError(f"stack_variants: integer leaf values {out.min()}..{out.max()} do not fit "
                                f"{want} (64-bit types are off in JAX); give them as floats")
    return jax.numpy.asarray(out)


def batch_size(batch, what: str = "batch") -> int:
    """V, the leading axis every array leaf of `batch` shares (a pytree made by
    `stack_variants`).  Raises ValueError, naming `what`, when a leaf has no
    leading axis (an unstacked variant) or the leading sizes differ."""
    shapes = {np.shape(x)[:1] for x in jax.tree.leaves(batch)}
    if len(shapes) != 1 or () in shapes:
        raise ValueError(f"{what}: every leaf needs the same leading [V] axis of variants "
                         f"(pimjax.hw.stack_variants([...])); got leading shapes {sorted(shapes)}")
    return int(shapes.pop()[0])


def check_timing_batch(timings) -> Timing:
    """`timings` if it is a batch of `Timing` variants (leaves with one leading
    [T] axis), for a sweep of the DRAM cycle model; else a ValueError that
    says what to pass instead.

    A stacked whole `Backend` is refused: the DRAM model's sweep varies only
    timing (System, Energy and host are those of its `backend` argument), so
    taking `.timing` of it would silently drop the other variants.
    """
    if isinstance(timings, Timing):
        batch_size(timings, "timings")
        return timings
    if isinstance(timings, Backend):
        raise ValueError("timings must be a stacked Timing, got a Backend: pass "
                         "stack_variants([b.timing for b in variants]) (this sweep varies timing only; "
                         "UPMEM's sweep_upmem takes stacked whole backends)")
    if isinstance(timings, (list, tuple)):
        kinds = sorted({type(t).__name__ for t in timings})
        raise ValueError(f"timings must be one Timing with a leading [T] axis, got a {type(timings).__name__} "
                         f"of {len(timings)} {'/'.join(kinds) or 'items'}: stack them first, "
                         "pimjax.hw.stack_variants(timings)")
    raise ValueError(f"timings must be a Timing with a leading [T] axis (pimjax.hw.stack_variants), "
                     f"got {type(timings).__name__}")
