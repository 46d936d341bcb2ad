"""Draft -> Program lowering (see README.md in this folder)."""
from .program import Op, Phase, Program, Readback, Records, TensorLayout

LOWERINGS = {}


def _register_all():
    from .hbm_pim import lower_hbm_pim
    LOWERINGS["hbm-pim"] = lower_hbm_pim
    from .upmem import lower_upmem; LOWERINGS["upmem"] = lower_upmem  # noqa: E702
    from .newton import lower_newton; LOWERINGS["newton"] = lower_newton  # noqa: E702
    from .attacc import lower_attacc; LOWERINGS["attacc"] = lower_attacc  # noqa: E702


def lower(op, draft, backend, shapes=None, **options) -> Program:
    """Lower one PimOp under `draft` to a command program for `backend`.

    shapes: value id -> shape (default: implied by the op's index maps).
    options: lowering switches (register_reuse, data_block_layout,
    channel_parallel, resident=(operand indices), ...), each on by default.
    """
    if not LOWERINGS:
        _register_all()
    fn = LOWERINGS.get(backend.name)
    if fn is None:
        raise NotImplementedError(f"no lowering for backend {backend.name!r}; have {sorted(LOWERINGS)}")
    return fn(op, draft, backend, shapes, **options)


__all__ = ["Op", "Phase", "Program", "Readback", "Records", "TensorLayout", "lower"]
