"""The records generic code and a family exchange through two `Family` hooks
(no family's code lives here; a family folder imports this module, never the
reverse).

* `TrainingShapes` (`Family.training_shapes`): what a family's cost model is
  trained and judged on -- data, read by `costmodel.kernels`, `.dataset`,
  `.broad` and `.train`.
* `ControllerModel` (`Family.controller_models`): a configuration timed by
  a controller of its own that has a cost model of its own -- data, read by
  `costmodel.configs`.
* `EstimateInputs` (`Family.estimates`' argument): one draft table's columns
  and the generic closed-form estimates, from which a family with a time
  model of its own (UPMEM's DPU pipeline, Newton's command stream) prices
  the drafts exactly; `costmodel.features` writes what the hook returns into
  the estimate features.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

# the held-out evaluation shapes families share (never trained on: `dataset.held_out`)
EVAL_GEMV = ((128, 128), (256, 256), (512, 128), (1000, 200), (4096, 64), (256, 1024))
EVAL_ELEM = ((3000,), (8192,), (262144,), (8, 1000), (12, 4096), (64, 64), (24, 1536), (100000,))
EVAL_MMTV = ((1, 4, 64, 32), (1, 8, 128, 64), (2, 4, 96, 64), (1, 12, 256, 64), (4, 2, 128, 128))


@dataclass(frozen=True, eq=False)
class TrainingShapes:
    """What a family's shipped cost model is trained and judged on.

    shapes_per_kernel: round-1 random training shapes per kernel
        (`costmodel.dataset.Plan.shapes_per_kernel`).
    heldout: {kernel: shapes} of the held-out evaluation cases
        (`costmodel.kernels.default_cases`; never trained on): modest spaces
        that stay affordable to simulate exhaustively.
    train_hw / heldout_hw: structural hardware variants (preset options) of
        `costmodel.broad`'s train and held-out splits; disjoint.
    members: ensemble members of the trained model (`costmodel.train`).
    broad_top: drafts per broad train case in each model-driven round
        (0: the broad cases are left out of training).
    """
    shapes_per_kernel: int = 40
    heldout: dict = field(default_factory=dict)
    train_hw: tuple = ()
    heldout_hw: tuple = ()
    members: int = 2
    broad_top: int = 2


@dataclass(frozen=True, eq=False)
class ControllerModel:
    """A configuration of a family whose programs one of its program
    controllers times (`Family.program_controllers`: a simulator of its own,
    e.g. DCC's Ramulator2 forks) and whose cost model is trained on that
    controller's labels: the family's model was trained on the default
    engines' cycles, which rank the drafts differently.

    options: the preset options that build the configuration
        (`get_backend(family, **options)`, e.g. {"simulator": "dcc"}).
    kernels: the kernels (`costmodel.kernels`) that controller times; the
        model is trained and judged on these only (a subset of `Family.kernels`).
    """
    options: dict = field(default_factory=dict)
    kernels: tuple = ()


@dataclass(frozen=True, eq=False)
class EstimateInputs:
    """One draft table's columns and generic estimates, for `Family.estimates`.

    n drafts, S dimension sets.  Arrays are [n] unless noted; cycles are DRAM
    command-clock cycles (tCK), the features' unit.

    op / backend / shapes / matrix: the op the drafts tile, the hardware,
        value id -> shape, and the contraction operand kept in the banks
        (None: the larger, `partition.verify.matrix_and_vector`).
    sets: `partition.dimension_sets(op)`; vector_vars: the loop variables of a
        contraction's vector operand (empty otherwise).
    groups / cores / reps / tile / used_tiles: [n, S] int64 per set: groups,
        cores per group, value-range code, per-core tile, tiles in use.
    lens: loop var -> [n] worst-core loop length.
    groups_used / cores_used: [n] groups and cores per group in use.
    reduction / dataflow / granularity / tasklets / wram_tile / buffers: [n]
        knob codes (`DraftTable` columns).
    footprint: [n] elements a core holds; instr: scalar instructions per
        iteration point of an in-order core (rough); tasklet_points / dma:
        [n] the generic tasklet and DMA counts.
    out_elems: elements of the op's result.
    t_rearr / t_compute: [n] the generic phase estimates in cycles (what a
        family keeps where its own does not settle).
    """
    op: Any
    backend: Any
    shapes: dict
    matrix: int | None
    sets: tuple
    vector_vars: frozenset
    groups: np.ndarray
    cores: np.ndarray
    reps: np.ndarray
    tile: np.ndarray
    used_tiles: np.ndarray
    lens: dict
    groups_used: np.ndarray
    cores_used: np.ndarray
    reduction: np.ndarray
    dataflow: np.ndarray
    granularity: np.ndarray
    tasklets: np.ndarray
    wram_tile: np.ndarray
    buffers: np.ndarray
    footprint: np.ndarray
    instr: float
    tasklet_points: np.ndarray
    dma: np.ndarray
    out_elems: float
    t_rearr: np.ndarray
    t_compute: np.ndarray


ESTIMATE_KEYS = frozenset({"t_rearr", "t_compute", "t_readback", "t_merge", "t_dpu", "readback_bytes", "counts"})
"""What `Family.estimates` may return ({key: [n] array}; "counts": {count
name: [n]} per-group command counts, names among `costmodel.features
.COUNT_COLUMNS`): each replaces the generic estimate of that name."""
