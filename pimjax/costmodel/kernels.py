"""The kernels the predictor is trained and judged on (DCC Table II's GEMV,
RED, VA, RELU, MMTV and AttAcc's ATTN, plus Newton's GEMM / conv), built by
tracing small `jnp` functions with `pimjax.make_graph`.

A `Case` is one (backend, kernel, shape): the PIM op (or, for `attn`, the
six-op attention block that AttAcc lowers as one program), its tensor shapes
and its draft space.  `shape` follows the kernel's argument shapes:

    gemv [M, N]          y[M]      = W[M, N] @ x[N]
    mmtv [B, H, L, D]    y[B,H,L]  = sum_d A[B,H,L,D] x[B,H,D]
    attn [B, H, L, D]    o[B,H,D]  = softmax(q K^T / sqrt(D)) V
    va   [E] | [B, E]    a + b
    relu [E] | [B, E]    max(a, 0)
    red  [E] | [B, E]    sum over the last axis
    gemm [M, K, N]       A[M, K] @ B[K, N]
    conv [H, W, C, F, K] NHWC 'SAME' convolution, batch 1, K x K kernel

UPMEM cores compute integers only, so its cases trace int32 data.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..backends import families, family_of
from ..hw.core import Backend
from ..kernels import FUNCTIONS, arg_shapes
from ..partition import DraftTable, dimension_sets, drafts
from ..partition.verify import infer_shapes
from ..trace.frontend import make_graph

# the kernels the cost model is trained and judged on (their functions: the catalogue, `pimjax.kernels`)
KERNELS = ("gemv", "red", "va", "relu", "mmtv", "attn", "gemm", "conv")


def supported_kernels(backend) -> tuple:
    """The kernels the cost model of `backend` covers (a Backend, a family
    name or a model name, `configs.model_name`): its family's
    (`Family.kernels`), or those its controller times
    (`ControllerModel.kernels`); () when no family implements it."""
    from .configs import model_kernels
    return model_kernels(backend)


@dataclass(frozen=True, eq=False)
class Case:
    """One (backend, kernel, shape).

    op:     the PimOp the drafts tile (for attn: the score contraction).
    target: what `features` / `lower_case` take: the op, or for attn the
            tuple of the six block ops (score ... context).
    shapes: value id -> tensor shape of every value the target touches.
    """
    backend: str
    kernel: str
    shape: tuple[int, ...]
    op: object
    target: object
    shapes: dict


@lru_cache(maxsize=256)
def _trace(kernel: str, shape: tuple[int, ...], integer: bool):
    dt = np.int32 if integer else np.float32
    args = [np.zeros(s, dt) for s in arg_shapes(kernel, shape)]
    return make_graph(FUNCTIONS[kernel], *args)


def make_case(backend: Backend | str, kernel: str, shape) -> Case:
    """Trace `kernel` at `shape` for `backend` (name or Backend)."""
    name = backend if isinstance(backend, str) else backend.name
    shape = tuple(int(v) for v in shape)
    graph = _trace(kernel, shape, family_of(backend).integer)
    if kernel == "attn":
        from ..lower.patterns import match_attention
        blocks = match_attention(graph)
        if not blocks:
            raise ValueError(f"attn {shape}: no attention block found")
        block = tuple(graph.ops[i] for i in blocks[0])
        shapes = {}
        for o in block:
            shapes.update(infer_shapes(o))
        return Case(name, kernel, shape, block[0], block, shapes)
    pim = [o for o in graph.ops if o.kind in ("contraction", "reduction", "elementwise")]
    if len(pim) != 1:
        raise ValueError(f"{kernel} {shape}: expected one PIM op, got {[o.kind for o in graph.ops]}")
    op = pim[0]
    shapes = infer_shapes(op)
    # the traced values' real shapes (a padded conv input is a layout op's result)
    return Case(name, kernel, shape, op, op, shapes)


def case_drafts(case: Case, backend: Backend) -> DraftTable:
    """The draft space of `case` (pruned `drafts`); for attn only the drafts
    AttAcc can run as one program (sequence and head-dim sets in one channel)."""
    table = drafts(case.op, backend, shapes=case.shapes)
    if case.kernel == "attn" and len(table):
        table = table.take(attention_mask(case.op, table))
    return table


def attention_mask(score_op, table: DraftTable) -> np.ndarray:
    """[n] bool: drafts of an attention block's score op whose sequence and
    head-dim sets stay in one group (AttAcc's softmax runs per channel)."""
    sets = dimension_sets(score_op)
    red = set(score_op.reduction_vars)
    # the score op's sequence var: the last output var (result index map's last dim)
    seq = score_op.result.index_map[-1].single_var
    keep = np.ones(len(table), bool)
    for si, s in enumerate(sets):
        if seq in s.vars or red & set(s.vars):
            keep &= table.groups[:, si] == 1
    return keep


def lower_case(case: Case, draft, backend: Backend):
    """Lower one draft of `case` to a Program (PimCompileError when it cannot)."""
    if case.kernel == "attn":
        return family_of(backend).lower_block(case.target, draft, backend, case.shapes)
    from ..lower import lower
    return lower(case.op, draft, backend, case.shapes)


def default_cases() -> list[dict]:
    """The held-out evaluation cases (never used for training): per family
    (sorted) and kernel the shapes of its `TrainingShapes.heldout`, a modest
    set whose draft spaces stay affordable to simulate exhaustively
    (hundreds to a few thousand drafts; UPMEM's tasklet x WRAM-tile knobs
    make its GEMV / MMTV spaces 10^4+).  Dicts {backend, kernel, shape
    (a list)}."""
    return [{"backend": b, "kernel": k, "shape": list(s)} for b in families()
            for k, ss in family_of(b).training_shapes.heldout.items() for s in ss]
