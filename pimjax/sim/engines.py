"""Which engine times DRAM-command programs, and the check every time model
makes first (a program is timed only on the backend it was lowered for).
A leaf module: the time models of `sim.cycles` and of the backend families
(`pimjax/backends/upmem/cycles.py`) both import it."""
from __future__ import annotations

import os

import jax
import numpy as np

from ..hw.core import Backend, Timing

ENGINES = ("native", "scan")
DEFAULT_ENGINE = os.environ.get("PIMJAX_CYCLES_ENGINE", "native")
"""Which engine times DRAM-command programs: "native" (`sim.native`, a
compiled event loop on the host's cores, 10-50x faster on a CPU) or "scan"
(`scan_lanes`, the vectorised JAX model: any JAX device, `jax.sharding`).
Both implement `timing.py` and equal the reference model to the cycle."""


def resolve_engine(engine: str | None, timing: Timing | None = None) -> str:
    """The engine to use: `engine`, or DEFAULT_ENGINE -- except under a JAX
    transformation of the timing (`jax.vmap` / `jax.jit` over `cycles` with
    traced Timing leaves), which only the scan engine can follow."""
    traced = timing is not None and any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(timing))
    if engine is None:
        engine = "scan" if traced else DEFAULT_ENGINE
    if engine not in ENGINES:
        raise ValueError(f"unknown cycle engine {engine!r}; one of {', '.join(ENGINES)}")
    if traced and engine == "native":
        raise ValueError("the native cycle engine runs on concrete timings; under jax.vmap / jax.jit over the "
                         "Timing use engine='scan' (or None), or pimjax.sim.cycles.sweep for a batch of variants")
    return engine


def check_programs(programs, backend: Backend) -> None:
    """A program's records are one backend's commands (a timing class per
    opcode of that backend): timing them on another backend gives numbers
    that mean nothing, so it is an error."""
    if not len(programs):
        raise ValueError("no programs to time")
    wrong = sorted({p.backend_name for p in programs} - {backend.name})
    if wrong:
        raise ValueError(f"program(s) lowered for {', '.join(wrong)} cannot be timed on {backend.name}; "
                         f"lower them for {backend.name} first")


def check_banks(programs, backend: Backend) -> None:
    """The DRAM engines keep state per bank of the group: a record naming a
    bank the group lacks would read another bank's state (the native engine
    does not bounds-check), so it is an error naming the program's family."""
    banks = backend.group.banks
    for p in programs:
        b = np.asarray(p.commands.bank)
        if b.size and int(b.max()) >= banks:
            raise ValueError(f"a {p.family or p.backend_name} program addresses bank {int(b.max())}, but "
                             f"{backend.name}'s groups have {banks} banks (bank_groups x banks_per_bank_group): "
                             "its lowering does not support this bank organisation")
