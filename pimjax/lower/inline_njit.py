"""`njit_phases`: numba's `njit` whose inline helpers cost nothing.

Why.  The compiled event loops (`sim/native.py`'s `_stream` / `_stream_v`,
`backends/attacc/native.py`'s `gemv_stream`) are written as phases, each a
helper decorated `@njit(inline="always")`: numba inlines the helper's IR into
the loop before typing.  But it binds each argument by a copy (`helper_x =
x`), and a copy of an array costs a reference-count increment and, at the
copy's last use, a decrement (`NRT_incref` / `NRT_decref`, atomic calls that
LLVM's reference pruning leaves in these loops): `_stream` ran 1.7-3.0x and
`_stream_v` 2.3-12.6x slower (benchmarks/README.md, native_loop).  `ForwardCopies` runs right
after the inlining and forwards those copies (every use of `helper_x` reads
`x`), so the loop compiles as if written out.

A copy `a = b` is forwarded when `a` and `b` are each assigned once in the
function, `b` is a function argument, an expression's result or such a copy
(not a constant or global, whose literal type the copy would widen), and `b`'s
assignment lies in no loop that holds the copy (so no path from the copy to
a use of `a` passes through a new value of `b`).  The inliner's argument
copies meet this whenever the caller's variable is assigned once outside
the loop -- the state arrays of the loops above; others are left as they are.
The pass uses numba's documented compiler extension API (`CompilerBase`,
`DefaultPassBuilder`, `register_pass`); `tests/lower/test_inline_njit.py`
checks that it still forwards, and keeps a copy it must keep.
"""
from __future__ import annotations

from numba import njit
from numba.core import ir
from numba.core.compiler import CompilerBase, DefaultPassBuilder
from numba.core.compiler_machinery import FunctionPass, register_pass
from numba.core.controlflow import CFGraph
from numba.core.ir_utils import build_definitions, compute_cfg_from_blocks, replace_vars
from numba.core.untyped_passes import InlineInlinables


def _forwardable(func_ir: ir.FunctionIR) -> dict:
    """{copy target name: source Var} of the copies `ForwardCopies` may forward, sources resolved through
    chains of copies."""
    defs = build_definitions(func_ir.blocks)
    cfg: CFGraph = compute_cfg_from_blocks(func_ir.blocks)
    where = {}                                   # variable -> label of the block that assigns it
    for label, block in func_ir.blocks.items():
        for st in block.body:
            if isinstance(st, ir.Assign):
                where[st.target.name] = label
    loops_of = {label: [lp.body for lp in cfg.loops().values() if label in lp.body] for label in func_ir.blocks}
    fwd = {}
    for label, block in func_ir.blocks.items():
        for st in block.body:
            if not (isinstance(st, ir.Assign) and isinstance(st.value, ir.Var)):
                continue
            a, b = st.target.name, st.value.name
            if a == b or len(defs.get(a, ())) != 1 or len(defs.get(b, ())) != 1:
                continue
            src = defs[b][0]
            if not isinstance(src, (ir.Arg, ir.Expr, ir.Var)):
                continue
            if any(where.get(b) in body for body in loops_of[label]):
                continue
            fwd[a] = st.value
    out = {}
    for a, v in fwd.items():
        seen = {a}
        while v.name in fwd and v.name not in seen:     # a chain of copies: its first source
            seen.add(v.name)
            v = fwd[v.name]
        out[a] = v
    return out


@register_pass(mutates_CFG=False, analysis_only=False)
class ForwardCopies(FunctionPass):
    """Forward the argument copies of inlined helpers (module docstring)."""
    _name = "pimjax_forward_copies"

    def __init__(self):
        FunctionPass.__init__(self)

    def run_pass(self, state) -> bool:
        fwd = _forwardable(state.func_ir)
        if not fwd:
            return False
        replace_vars(state.func_ir.blocks, fwd)        # the copies become `x = x`: dropped
        for block in state.func_ir.blocks.values():
            block.body = [st for st in block.body
                          if not (isinstance(st, ir.Assign) and isinstance(st.value, ir.Var)
                                  and st.value.name == st.target.name)]
        state.func_ir._definitions = build_definitions(state.func_ir.blocks)
        return True


class PhasesCompiler(CompilerBase):
    """numba's nopython pipeline with `ForwardCopies` after the inlining of `inline="always"` helpers."""

    def define_pipelines(self):
        pm = DefaultPassBuilder.define_nopython_pipeline(self.state)
        pm.add_pass_after(ForwardCopies, InlineInlinables)
        pm.finalize()
        return [pm]


def njit_phases(**options):
    """`numba.njit(**options)` for a loop built from `inline="always"` helpers: compiled with
    `PhasesCompiler`, so an inlined helper's array arguments cost no reference counting."""
    return njit(pipeline_class=PhasesCompiler, **options)
