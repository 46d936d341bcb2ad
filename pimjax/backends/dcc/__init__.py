"""DCC's simulator, ported: the cycles DCC's artifact reports for one (backend, kernel, shape, tiling),
and the "dcc" controller of `get_backend("attacc" / "hbm-pim", simulator="dcc")`.

A standard-library port of SPIN-Research-Group/DCC @ 7ffb80e4f33e357177dc8ab148953c0484e1e322:
its trace generators (``src/attacc_trace_gen``, ``src/hbmpim_trace_gen``, ``src/generate_configs.py``;
here ``traces``, ``tiling``) and the channel controller of its two Ramulator2 forks
(``src/Ramulator2/AttAcc``, ``src/Ramulator2/HBMPIM``; here ``controller``, with the organisation and
timing table as data in ``timing``; ``native`` is its single-channel loop compiled with numba, the same
cycles).  Against ``../shared/reference/dcc-artifact.csv`` it gives 609 of 614
rows cycle-exact in the default single-channel mode (worst 1.07 %) and all of them with
``coupled=True`` (see ``docs/dcc-simulator.md`` and ``experiments/dcc_reference.py``).

Not a family: both the attacc and the hbm-pim families offer it as their ``"dcc"`` program controller
(``engine.py``: a draft's DCC tiling, timed by the fork; ``Family.program_controllers``), chosen by
``Group.controller = "dcc"``.

Cycles are DRAM command-clock cycles, tCK = 0.769 ns (HBM3 at 5.2 Gbps).
"""
from .controller import channel_requests, simulate_channel, simulate_coupled
from .tiling import KERNELS, kernel_dims, match_alignment, validate, wraps
from .timing import N_CH, TCK_PS, TIMING_TABLE
from .traces import channel_loads, gen_trace

TCK_NS = TCK_PS / 1000.0   # 0.769 ns per cycle

__all__ = [
    "KERNELS",
    "TCK_NS",
    "TIMING_TABLE",
    "channel_loads",
    "channel_requests",
    "gen_trace",
    "kernel_dims",
    "match_alignment",
    "predict",
    "simulate_channel",
    "simulate_coupled",
    "validate",
    "wraps",
]


def predict(backend, kernel, shape, tiling, coupled=False, all_channels=False, refresh=True):
    """Cycles (tCK = 0.769 ns) DCC's artifact reports for one tiling: ``memory_system_cycles`` of the
    fork's simulation of the trace DCC generates.

    ``backend``: ``"attacc"`` or ``"hbmpim"``; ``kernel``: ``"gemv"``, ``"red"`` or ``"va"`` (VA only on
    HBM-PIM), or on AttAcc the fused attention ``"attn"`` / ``"attn_inference"`` (its generator's two modes;
    not checked against the fork: the artifact CSV has no ATTN row); ``shape``: GEMV / ATTN ``(batch, heads,
    d_head, seq_len)``, RED / VA ``(batch, length)``;
    ``tiling``: DCC's ``[[g, c, t], ...]``, one triple per dimension (``tiling.validate`` says what is
    accepted; a bad one raises ``ValueError``).

    By default only the busiest channel is simulated (channels are independent unless
    ``match_alignment`` makes several logical channels share one, see ``tiling.wraps``).
    ``coupled=True`` simulates all 16 channels behind the shared in-order frontend (exact, ~16x slower);
    ``coupled="auto"`` does so only for tilings that wrap.  ``all_channels=True`` simulates every loaded
    channel independently and returns the slowest.  ``refresh=False`` switches the forks'
    AllBankHBM3 refresh off (the artifact always refreshes).
    """
    tiling = validate(backend, kernel, shape, tiling)
    if coupled not in (False, True, "auto"):
        raise ValueError(f"coupled must be False, True or 'auto', not {coupled!r}")
    trace = gen_trace(backend, kernel, tiling)
    loads = channel_loads(trace)
    if coupled == "auto":
        coupled = wraps(tiling)          # channels shared by several logical groups: coupling can matter
    if coupled:
        return simulate_coupled(backend, trace, refresh=refresh)
    if all_channels:
        chans = [c for c in range(N_CH) if loads[c]]
    else:
        m = max(loads)
        chans = [loads.index(m)]
    best = 0
    for c in chans:
        best = max(best, simulate_channel(backend, channel_requests(trace, c), refresh=refresh))
    return best
