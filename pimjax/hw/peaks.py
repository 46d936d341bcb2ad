"""Derived peak figures of a backend, for reports and for checking presets against
published numbers.

`derived_peaks(backend)` returns a dict (all system-wide unless the key says otherwise):

| key | unit | definition |
|---|---|---|
| `n_groups`, `n_cores` | count | groups in the system; cores (PIM units / DPUs) in the system |
| `pim_clock_ghz` | GHz | clock PIM work is paced by: 1/tCK for command-driven cores, `dpu_clock_ghz` for programmable ones |
| `pim_macs_per_cycle` | MAC / pim cycle | command-driven: n_cores x lanes / tCCD_AB (one MAC per lane per all-bank column command); programmable: n_cores x lanes / 2 (one instruction per DPU cycle with >= 11 tasklets, a MAC = multiply + add) |
| `pim_macs_per_cycle_per_group` | MAC / pim cycle | the same for one group |
| `pim_ops_per_s` | op/s | lane operations per second: MAC/s for command-driven cores, instructions/s for programmable ones |
| `pim_flops` | FLOP/s | 2 x MAC/s (a MAC = 2 FLOP; integer ops on UPMEM are counted as FLOP) |
| `internal_bandwidth_GBps` | GB/s | bank bytes the PIM units can consume: command-driven: n_cores x col_bytes / (tCCD_AB x tCK); programmable: n_cores x dma_bytes_per_cycle x dpu_clock_ghz (MRAM->WRAM DMA) |
| `external_bandwidth_GBps` | GB/s | host -> PIM, n_groups x the per-group link: command-driven: `bus_bandwidth` = data_buses x col_bytes / (max(tBL, tCCD_S) x tCK), the bursts the DRAM cycle model times host writes with; programmable: System.link_bandwidth |
| `readback_bandwidth_GBps` | GB/s | PIM -> host: command-driven: the same as external (reads use the same bus); programmable: n_groups x System.readback_bandwidth |
| `internal_over_external` | ratio | internal / external bandwidth |
| `capacity_bytes` | B | n_groups x banks per group x rows x cols x col_bytes |

These are peaks (no row switches, refresh or command-bus limits); `sim.cycles` gives
achieved figures.  For command-driven backends the `System` bandwidth leaves are not
read here (nor by the DRAM cycle model): they are the presets' values at the preset
timing and go stale under `backend.replace(timing=...)`, while the bursts follow it.  Values are Python floats for concrete backends and arrays under
`jax.vmap` / `jax.jit`.

Example::

    >>> from pimjax.hw import get_backend, derived_peaks
    >>> p = derived_peaks(get_backend("hbm-pim"))
    >>> p["pim_macs_per_cycle"], p["internal_bandwidth_GBps"], p["external_bandwidth_GBps"]
    (2048.0, 4096.0, 1024.0)
"""
from __future__ import annotations

import jax
import numpy as np

from .core import Backend, Timing, as_float


def _maximum(a, b):
    """Elementwise max of numbers, arrays or tracers (numpy unless tracing)."""
    if isinstance(a, jax.core.Tracer) or isinstance(b, jax.core.Tracer):
        return jax.numpy.maximum(a, b)
    return np.maximum(a, b)


def bus_bandwidth(col_bytes: int, data_buses: int, timing: Timing):
    """Peak host<->group bandwidth of a command-driven group in bytes per ns (= GB/s).

    One `col_bytes` burst per data bus every max(tBL, tCCD_S) command cycles of
    tCK ns: tBL is the burst's occupancy of the bus, tCCD_S the spacing of the
    streamed column commands the DRAM cycle model times host transfers with.
    A float for concrete scalar timings, an array / tracer otherwise.

    >>> from pimjax.hw import get_backend
    >>> b = get_backend("hbm-pim")           # 32 B per 2 cycles of 1 ns
    >>> bus_bandwidth(b.core.col_bytes, b.group.data_buses, b.timing)
    16.0
    """
    spacing = _maximum(timing.tBL, timing.tCCD_S)
    return as_float(data_buses * col_bytes / (spacing * timing.tCK))


def link_bandwidths(backend: Backend) -> tuple:
    """(host -> group, group -> host) peak bandwidth of ONE group, bytes per ns.

    Command-driven cores: `bus_bandwidth` of the backend's timing both ways
    (host reads and writes are DRAM column commands on the same bus).
    Programmable cores (UPMEM): `System.link_bandwidth` / `readback_bandwidth`,
    the host<->DPU transfer rates the UPMEM time model uses.
    """
    if backend.core.programmable:
        return backend.system.link_bandwidth, backend.system.readback_bandwidth
    bw = bus_bandwidth(backend.core.col_bytes, backend.group.data_buses, backend.timing)
    return bw, bw


def derived_peaks(backend: Backend) -> dict:
    """Peak compute, bandwidth and capacity of `backend` (see the module docstring for keys)."""
    t, c, g = backend.timing, backend.core, backend.group
    n_groups = backend.n_groups
    n_cores = backend.n_cores
    if c.programmable:
        clock_ghz = t.dpu_clock_ghz
        ops_per_cycle_group = g.cores_per_group * c.lanes         # one instruction per cycle per core
        macs_per_cycle_group = ops_per_cycle_group / 2            # multiply + add instructions per MAC
        internal_gbps = n_cores * t.dma_bytes_per_cycle * clock_ghz
    else:
        clock_ghz = 1.0 / t.tCK
        macs_per_cycle_group = g.cores_per_group * c.lanes / t.tCCD_AB
        ops_per_cycle_group = macs_per_cycle_group
        internal_gbps = n_cores * c.col_bytes / (t.tCCD_AB * t.tCK)
    macs_per_cycle = n_groups * macs_per_cycle_group
    to_pim, from_pim = link_bandwidths(backend)
    external = n_groups * to_pim
    return {
        "n_groups": n_groups,
        "n_cores": n_cores,
        "pim_clock_ghz": as_float(clock_ghz),
        "pim_macs_per_cycle": as_float(macs_per_cycle),
        "pim_macs_per_cycle_per_group": as_float(macs_per_cycle_group),
        "pim_ops_per_s": as_float(n_groups * ops_per_cycle_group * clock_ghz * 1e9),
        "pim_flops": as_float(2 * macs_per_cycle * clock_ghz * 1e9),
        "internal_bandwidth_GBps": as_float(internal_gbps),
        "external_bandwidth_GBps": as_float(external),
        "readback_bandwidth_GBps": as_float(n_groups * from_pim),
        "internal_over_external": as_float(internal_gbps / external),
        "capacity_bytes": n_groups * g.banks * c.bank_bytes,
    }


def describe_system(backend: Backend) -> dict:
    """The PIM system and the processor it is compared with, as plain numbers
    for report headers: backend / variant, devices (stacks, chips, ranks),
    groups (channels / pCH / ranks) and cores, internal / external GB/s
    (`derived_peaks`), and the baseline GPU (`System.baseline`:
    `HostModel.describe()`, plus `same_memory`: its bandwidth equals the PIM
    system's external bandwidth, within 0.5 %, counting the GPU-only channels
    of a system with a concurrent GPU), and `cogpu`: the GPU that runs beside
    PIM on its own channels (`System.cogpu`; None without one), and
    `memory_GiB`: the bytes PIM commands reach (groups x `Group.banks` x
    `Core.pim_bank_bytes`), in GiB."""
    p = derived_peaks(backend)
    gpu = backend.system.baseline.describe()
    cogpu = backend.system.cogpu.describe() if backend.system.cogpu is not None else None
    ext = float(np.asarray(p["external_bandwidth_GBps"]).ravel()[0])
    memory = ext + (float(np.asarray(cogpu["bandwidth_GBps"]).ravel()[0]) if cogpu else 0.0)
    gbw = float(np.asarray(gpu["bandwidth_GBps"]).ravel()[0])
    return {"backend": f"{backend.name}/{backend.variant}", "devices": backend.system.n_devices,
            "groups_per_device": backend.system.groups_per_device, "groups": backend.n_groups,
            "cores": backend.n_cores, "internal_GBps": float(np.asarray(p["internal_bandwidth_GBps"]).ravel()[0]),
            "external_GBps": ext, "gpu": gpu, "same_memory": bool(abs(gbw - memory) <= 0.005 * memory),
            "cogpu": cogpu,
            "memory_GiB": backend.n_groups * backend.group.banks * backend.core.pim_bank_bytes / 2**30}


def system_line(backend: Backend) -> str:
    """`describe_system` in one line of text (the report header)."""
    d = describe_system(backend)
    g = d["gpu"]
    num = lambda x: float(np.asarray(x).ravel()[0])   # noqa: E731 - a stacked host shows its first variant
    return (f"PIM {d['backend']}: {d['devices']} device(s) x {d['groups_per_device']} groups = {d['groups']} "
            f"groups, {d['cores']} cores, {d['memory_GiB']:,.4g} GiB; internal {d['internal_GBps']:,.1f} GB/s, external "
            f"{d['external_GBps']:,.1f} GB/s | vs {g['name']}: {g['model']} model, "
            f"{num(g['bandwidth_GBps']):,.1f} GB/s x {num(g['bandwidth_efficiency']):.2f}, "
            f"{num(g['peak_TFLOPs']):,.1f} TFLOP/s x {num(g['flops_efficiency']):.2f}, launch "
            f"{num(g['launch_ns']):,.0f} ns" + (f", {g['sms']} SMs" if g["sms"] else "")
            + ("" if d["same_memory"] else " (NOT the PIM system's memory: the comparison is not like for like)")
            + (f" | beside PIM: {d['cogpu']['name']} on the GPU-only channels" if d["cogpu"] else ""))
