"""HBM-PIM's SRF body compiler: an elementwise op's scalar body (epilogue applied) as the CRF
steps of one program -- a linear body `sum_k coef_k * operand_k + const` whose coefficients are
SRF values (`Coef`: a constant or a 0-d operand to a power of +-1), else a short sequence of
ADD / MUL steps over the GRFs (`compile_body`).  `lower.py` streams the steps over every operand
column; `body_error` says why a body is not something the units run.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from ...errors import PimCompileError
from ...trace.ir import Arg, Const, PimOp, Prim
from .isa import SRF_SLOTS, Crf


@dataclass(frozen=True)
class Coef:
    """A scalar factor c * s**power of a linear body: s the 0-d operand
    `arg` (power +-1), or a plain constant c (arg None, power 0)."""
    c: float
    arg: int | None = None
    power: int = 0

    def __mul__(self, o: "Coef") -> "Coef | None":
        if self.arg is not None and o.arg is not None:
            return None                          # s * t: two SRF values, not one
        arg, power = (self.arg, self.power) if self.arg is not None else (o.arg, o.power)
        return Coef(self.c * o.c, arg, power)

    def __add__(self, o: "Coef") -> "Coef | None":
        if (self.arg, self.power) != (o.arg, o.power):
            return None                          # 2 + s: not one SRF value
        return Coef(self.c + o.c, self.arg, self.power)

    def inverse(self) -> "Coef | None":
        return None if self.c == 0 else Coef(1.0 / self.c, self.arg, -self.power)

    def srf(self) -> tuple:
        """The SRF entry of Program.meta["srf"] (read by `exec_hbm_pim`)."""
        if self.arg is None:
            return ("const", self.c)
        if (self.c, self.power) == (1.0, 1):
            return ("arg", self.arg)
        return ("arg", self.arg, self.c, self.power)


_ONE, _MINUS_ONE = Coef(1.0), Coef(-1.0)


def _linear(e, scalar_ops: set[int]):
    """`e` as sum_k coef_k * operand_k + const, or None.

    Returns ({operand index: Coef}, Coef or None).  Scalars are literals
    and 0-d operands; a product of two scalar operands, or a sum of a literal
    and a scalar operand, is not one SRF value and gives None, as does any
    product of two tensors or a division by a tensor."""
    if isinstance(e, Arg):
        return ({}, Coef(1.0, e.index, 1)) if e.index in scalar_ops else ({e.index: _ONE}, None)
    if isinstance(e, Const):
        return {}, Coef(float(e.value))
    if not isinstance(e, Prim):
        return None
    name, args = e.name, e.args
    if name in ("convert_element_type", "copy", "copy_p", "reduce_precision") and len(args) == 1:
        return _linear(args[0], scalar_ops)
    if name == "neg" and len(args) == 1:
        return _scaled(_linear(args[0], scalar_ops), _MINUS_ONE)
    if len(args) != 2:
        return None
    p, q = (_linear(a, scalar_ops) for a in args)
    if p is None or q is None:
        return None
    if name == "add":
        return _sum(p, q)
    if name == "sub":
        q = _scaled(q, _MINUS_ONE)
        return None if q is None else _sum(p, q)
    if name == "mul":
        if not q[0]:
            return _scaled(p, q[1])
        return _scaled(q, p[1]) if not p[0] else None
    if name == "div" and not q[0] and q[1].arg is None:     # by a literal: times its inverse
        inv = q[1].inverse()
        return None if inv is None else _scaled(p, inv)
    return None


def _scaled(lin, s: "Coef | None"):
    if lin is None or s is None:
        return None
    terms = {k: c * s for k, c in lin[0].items()}
    const = None if lin[1] is None else lin[1] * s
    if any(c is None for c in terms.values()) or (lin[1] is not None and const is None):
        return None
    return terms, const


def _sum(p, q):
    terms = dict(p[0])
    for k, c in q[0].items():
        terms[k] = c if k not in terms else terms[k] + c
    if p[1] is None or q[1] is None:
        const = p[1] if q[1] is None else q[1]
    else:
        const = p[1] + q[1]
        if const is None:
            return None
    if any(c is None for c in terms.values()):
        return None
    return terms, const


def _linear_steps(lin, slot) -> list | None:
    """CRF steps of a linear body (`_linear`), or None when it is a plain
    sum / difference of tensors (FILL + ADD / SUB, hbm-pim.md) or has no
    tensor.  slot(Coef) -> SRF slot.

    The first term is FILLed, or MULS'ed by its factor, or ADDS'ed with
    the constant when its factor is 1; later terms ADD / SUB, or MAD by
    their factor; a constant left over is added last (SADD)."""
    terms, const = lin
    if not terms:
        return None
    if const is not None and const.arg is None and const.c == 0:
        const = None
    if const is None and all(c in (_ONE, _MINUS_ONE) for c in terms.values()):
        return None
    (k0, c0), *rest = sorted(terms.items())
    if c0 == _ONE and const is not None:
        steps, const = [(Crf.ADDS, k0, slot(const))], None
    elif c0 == _ONE:
        steps = [(Crf.FILL, k0, None)]
    else:
        steps = [(Crf.MULS, k0, slot(c0))]
    for k, c in rest:
        if c in (_ONE, _MINUS_ONE):
            steps.append((Crf.ADD if c == _ONE else Crf.SUB, k, None))
        else:
            steps.append((Crf.MAD, k, slot(c)))
    if const is not None:
        steps.append((Crf.SADD, None, slot(const)))
    return steps


def compile_body(body, scalar_ops: set[int]):
    """Left-deep CRF steps for an elementwise body.

    Returns ([(crf, operand or None, srf_slot or None)], srf entries), the
    first step a FILL / FILL_RELU / MULS / ADDS.  A linear body (scalar
    factors and constants, `3*a - b/2 + 1`) is one MULS / MAD chain
    (`_linear_steps`); products of tensors, ReLU and negation compose
    left-deep.  Raises PimCompileError for bodies the units cannot run."""
    srf: list = []

    def slot(coef: Coef) -> int:
        entry = coef.srf()
        if entry not in srf:
            srf.append(entry)
        return srf.index(entry)

    def scalar(e):
        lin = _linear(e, scalar_ops)
        return None if lin is None or lin[0] else lin[1]

    def is_bank(e):
        return isinstance(e, Arg) and e.index not in scalar_ops

    def walk(e):
        if is_bank(e):
            return [(Crf.FILL, e.index, None)]
        if isinstance(e, Prim):
            name, args = e.name, e.args
            lin = _linear(e, scalar_ops) if name in ("add", "sub", "mul", "div", "neg") else None
            steps = None if lin is None else _linear_steps(lin, slot)
            if steps is not None:
                return steps
            if name in ("convert_element_type", "copy", "copy_p", "reduce_precision") and len(args) == 1:
                return walk(args[0])
            if name == "max" and len(args) == 2 and any(isinstance(a, Const) and a.value == 0 for a in args):
                inner = args[0] if not isinstance(args[0], Const) else args[1]
                steps = walk(inner)
                if len(steps) == 1 and steps[0][0] == Crf.FILL:
                    return [(Crf.FILL_RELU, steps[0][1], None)]
                return steps + [(Crf.MOV_RELU, None, None)]
            if name in ("add", "sub", "mul") and len(args) == 2:
                a, c = args
                # acc (op) leaf, with commutativity for add / mul
                for acc_e, leaf, swapped in ((a, c, False), (c, a, True)):
                    if name == "sub" and swapped:
                        # leaf - acc
                        if is_bank(leaf):
                            return walk(acc_e) + [(Crf.RSUB, leaf.index, None)]
                        s = scalar(leaf)
                        if s is not None:
                            return _add_scalar(_scale(walk(acc_e), slot(_MINUS_ONE)), slot(s))
                        continue
                    if is_bank(leaf):
                        code = {"add": Crf.ADD, "sub": Crf.SUB, "mul": Crf.MUL}[name]
                        return walk(acc_e) + [(code, leaf.index, None)]
                    s = scalar(leaf)
                    if s is not None and name == "mul":
                        return _scale(walk(acc_e), slot(s))
                    if s is not None:
                        s = s if name == "add" else s * _MINUS_ONE
                        return _add_scalar(walk(acc_e), slot(s))
                raise PimCompileError(f"hbm-pim cannot run elementwise {name} of two computed values")
            if name == "neg" and len(args) == 1:
                return _scale(walk(args[0]), slot(_MINUS_ONE))
        raise PimCompileError(f"hbm-pim has no instruction for {getattr(e, 'name', e)}")

    steps = walk(body)
    if len(srf) > SRF_SLOTS:
        raise PimCompileError(f"hbm-pim: the body needs {len(srf)} scalars, the SRF holds {SRF_SLOTS}")
    return steps, srf


def _add_scalar(steps, s_slot):
    """acc + SRF[slot]: fold into a lone FILL as ADDS, else one more step
    (SADD, triggered by a column read like MOV_RELU)."""
    if len(steps) == 1 and steps[0][0] == Crf.FILL:
        return [(Crf.ADDS, steps[0][1], s_slot)]
    return steps + [(Crf.SADD, None, s_slot)]


def _scale(steps, s_slot):
    """acc * SRF[slot]: fold into the first FILL as MULS when possible."""
    if len(steps) == 1 and steps[0][0] == Crf.FILL:
        return [(Crf.MULS, steps[0][1], s_slot)]
    raise PimCompileError("hbm-pim: scaling a computed value needs a temporary register")


@functools.lru_cache(maxsize=1024)
def body_error(op: PimOp) -> str:
    """'' when the units can run the elementwise op's body, else why not."""
    try:
        compile_elementwise(op, op.scalar_operands)
    except PimCompileError as err:
        return str(err)
    return ""


def compile_elementwise(op: PimOp, scalar_ops: set[int]):
    """`compile_body` of the op's body with its epilogue applied."""
    body = op.body
    if op.epilogue is not None:
        from ...trace.ir import replace_acc
        body = replace_acc(op.epilogue, body)
    return compile_body(body, scalar_ops)
