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
| `external_bandwidth_GBps` | GB/s | n_groups x System.link_bandwidth (host -> PIM) |
| `readback_bandwidth_GBps` | GB/s | n_groups x System.readback_bandwidth (PIM -> host) |
| `internal_over_external` | ratio | internal / external bandwidth |
| `capacity_bytes` | B | n_groups x banks per group x rows x cols x col_bytes |

These are peaks (no row switches, refresh or command-bus limits); `sim.cycles` gives
achieved figures.  Values are Python floats for concrete backends and arrays under
`jax.vmap` / `jax.jit`.

Example::

    >>> from pimjax.hw import get_backend, derived_peaks
    >>> p = derived_peaks(get_backend("hbm-pim"))
    >>> p["pim_macs_per_cycle"], p["internal_bandwidth_GBps"], p["external_bandwidth_GBps"]
    (2048.0, 4096.0, 1024.0)
"""
from __future__ import annotations

import jax

from .core import Backend


def _num(x):
    """float for concrete scalars; leaves tracers and arrays with a batch axis alone."""
    if isinstance(x, jax.core.Tracer):
        return x
    try:
        return float(x)
    except (TypeError, ValueError):
        return x


def derived_peaks(backend: Backend) -> dict:
    """Peak compute, bandwidth and capacity of `backend` (see the module docstring for keys)."""
    t, c, g, s = backend.timing, backend.core, backend.group, backend.system
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
    external = n_groups * s.link_bandwidth
    return {
        "n_groups": n_groups,
        "n_cores": n_cores,
        "pim_clock_ghz": _num(clock_ghz),
        "pim_macs_per_cycle": _num(macs_per_cycle),
        "pim_macs_per_cycle_per_group": _num(macs_per_cycle_group),
        "pim_ops_per_s": _num(n_groups * ops_per_cycle_group * clock_ghz * 1e9),
        "pim_flops": _num(2 * macs_per_cycle * clock_ghz * 1e9),
        "internal_bandwidth_GBps": _num(internal_gbps),
        "external_bandwidth_GBps": _num(external),
        "readback_bandwidth_GBps": _num(n_groups * s.readback_bandwidth),
        "internal_over_external": _num(internal_gbps / external),
        "capacity_bytes": n_groups * g.banks * c.bank_bytes,
    }
