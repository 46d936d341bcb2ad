"""Graph clean-up passes over a topologically ordered op list.

- `dead_code`: drop ops whose results nobody reads (and are not outputs).
- `fuse`: three local rewrites, each merging a producer P into its *only*
  reader C (P's result not a graph output, since a fused op no longer
  materialises it), always placing the merged op at C's position so every
  operand is still defined before use:

  1. elementwise chain: P elementwise, C elementwise of the same shape
     (up to unit dims) reading P through a permutation -> C's body inlines
     P's body;
  2. epilogue: P contraction/reduction, C elementwise of P's shape (up to
     unit dims, e.g. a keepdims mean) reading it through a permutation
     -> C's body becomes P's epilogue (`Acc` = the reduced value);
  3. result layout: P contraction/reduction/elementwise, C a layout op that
     only permutes P's result or adds/drops unit dims (e.g. the transpose
     jnp.einsum emits after dot_general) -> P writes C's result directly.

A fused body or epilogue is kept at most `MAX_FUSED_DEPTH` expressions
deep: a longer elementwise chain (jax.jit takes 2 000 ops in a row) is
split into several fused ops of that depth rather than one expression whose
recursive walkers (re-indexing, hashing, lowering, printing) would exceed
Python's recursion limit.

Producer/consumer maps are built once and updated per rewrite, so the pass
is linear in the number of ops (PimGraph.producer/consumers are linear scans
and are not used here).
"""
from __future__ import annotations

from collections import defaultdict

from .affine import AffineExpr
from .builder import ZERO
from .ir import Acc, Access, Arg, Expr, PimOp, expr_depth, map_args

_VIEW_LAYOUTS = ("broadcast_in_dim", "transpose", "squeeze", "reshape")

# Deepest fused expression (body, or epilogue over a body).  Why 64: the expression walkers
# recurse a few Python frames per level (the dataclasses' hash / eq included), so 64 levels stay
# far below the default limit of 1 000; a fused body that deep (GELU is ~15) is far past the point
# where fusing more saves anything (each fused op still reads its operands once).
MAX_FUSED_DEPTH = 64


def dead_code(ops: list[PimOp], outputs, effectful: set[int]) -> list[PimOp]:
    """Ops that (transitively) contribute to `outputs`, plus effectful ones."""
    live = set(outputs)
    kept = []
    for idx in range(len(ops) - 1, -1, -1):
        op = ops[idx]
        if idx in effectful or any(r.value in live for r in op.results):
            kept.append(op)
            live.update(a.value for a in op.operands)
    kept.reverse()
    return kept


def _subst(e: AffineExpr, env: dict[str, AffineExpr]) -> AffineExpr:
    v = e.single_var
    if v is not None:
        return env.get(v, e)
    return e.substitute(env)


def _subst_map(imap, env):
    return tuple(_subst(e, env) for e in imap)


def _bijective_read(op: PimOp, vid: int, value_shape) -> tuple[AffineExpr, ...] | None:
    """The single index map through which `op` reads `vid` if all its reads
    agree and the map is a bijection between the value and `op`'s domain:
    distinct plain variables (a permutation), constant 0 only on unit dims of
    the value, and every unread loop variable of extent 1.  Else None."""
    found = None
    for a in op.operands:
        if a.value != vid:
            continue
        if found is not None and a.index_map != found:
            return None
        found = a.index_map
    if found is None:
        return None
    seen: set[str] = set()
    for e, size in zip(found, value_shape):
        v = e.single_var
        if v is None:
            if e.terms or e.const or size != 1:
                return None
        elif v in seen:
            return None
        else:
            seen.add(v)
    if any(lv.extent != 1 for lv in op.loop_vars if lv.name not in seen):
        return None
    return found


def _read_env(read, targets, op: PimOp) -> dict[str, AffineExpr]:
    """Variables of a bijective `read` -> `targets[d]`; unread (unit) loop
    variables of `op` -> 0."""
    env = {lv.name: ZERO for lv in op.loop_vars}
    for e, t in zip(read, targets):
        if e.terms:
            env[e.single_var] = t
    return env


class _Merger:
    """Re-indexes operands of merged ops into one de-duplicated list."""

    def __init__(self, base: tuple[Access, ...] = ()):
        self.accesses = list(base)
        self.index = {(a.value, a.index_map): k for k, a in enumerate(base)}

    def add(self, access: Access) -> int:
        key = (access.value, access.index_map)
        k = self.index.get(key)
        if k is None:
            k = self.index[key] = len(self.accesses)
            self.accesses.append(access)
        return k


def _prims(op: PimOp) -> tuple[str, ...]:
    return (op.name, *op.fused)


def _pull_elementwise(p: PimOp, c: PimOp, read: tuple[AffineExpr, ...]) -> PimOp | None:
    """Inline elementwise producer `p` into elementwise consumer `c`."""
    pres = p.result.index_map
    pvars = [e.single_var for e in pres]
    if None in pvars or sorted(pvars) != sorted(lv.name for lv in p.loop_vars):
        return None
    env = dict(zip(pvars, read))   # read[d] is a var of c, or 0 on a unit dim
    pvid = p.result.value
    merger = _Merger()
    cidx = {k: merger.add(a) for k, a in enumerate(c.operands) if a.value != pvid}
    try:
        pidx = {k: merger.add(Access(a.value, _subst_map(a.index_map, env)))
                for k, a in enumerate(p.operands)}
    except ValueError:
        return None
    pbody = map_args(p.body, lambda k: pidx[k])
    body = map_args(c.body, lambda k: pbody if c.operands[k].value == pvid else cidx[k])
    prims = _prims(p) + _prims(c)
    return PimOp(prims[0], "elementwise", c.loop_vars, tuple(merger.accesses), c.results,
                 body=body, source=p.source, fused=prims[1:])


def _push_epilogue(r: PimOp, c: PimOp, read: tuple[AffineExpr, ...]) -> PimOp | None:
    """Make elementwise consumer `c` the epilogue of contraction/reduction `r`."""
    env = _read_env(read, r.result.index_map, c)
    rvid = r.result.value
    merger = _Merger(r.operands)
    try:
        cidx = {k: merger.add(Access(a.value, _subst_map(a.index_map, env)))
                for k, a in enumerate(c.operands) if a.value != rvid}
        result = Access(c.result.value, _subst_map(c.result.index_map, env))
    except ValueError:
        return None
    acc: Expr = r.epilogue if r.epilogue is not None else Acc()
    epilogue = map_args(c.body, lambda k: acc if c.operands[k].value == rvid else cidx[k])
    return PimOp(r.name, r.kind, r.loop_vars, tuple(merger.accesses), (result,),
                 r.reduction_vars, r.combiner, r.body, epilogue, r.fill, r.source, None,
                 r.fused + _prims(c))


def _push_layout(p: PimOp, lay: PimOp, value_shape) -> PimOp | None:
    """Let `p` write the result of `lay`, a permutation / unit-dim view of it."""
    if (lay.kind != "layout" or lay.name not in _VIEW_LAYOUTS or len(lay.operands) != 1
            or lay.body != Arg(0) or lay.fill is not None):
        return None
    read = lay.operands[0].index_map
    where: dict[str, int] = {}
    for d, e in enumerate(read):
        v = e.single_var
        if v is None:
            if e.terms or value_shape[d] != 1:
                return None
        elif v in where:
            return None
        else:
            where[v] = d
    ext = lay.extents
    if any(ext[n] != 1 for n in ext if n not in where):
        return None       # a real broadcast: not a bijection
    if [e.single_var for e in lay.result.index_map] != [lv.name for lv in lay.loop_vars]:
        return None
    pres = p.result.index_map
    rmap = tuple(pres[where[lv.name]] if lv.name in where else ZERO for lv in lay.loop_vars)
    return PimOp(p.name, p.kind, p.loop_vars, p.operands, (Access(lay.result.value, rmap),),
                 p.reduction_vars, p.combiner, p.body, p.epilogue, p.fill, p.source, None,
                 p.fused + (lay.name,))


def fuse(ops: list[PimOp], outputs, shapes) -> list[PimOp]:
    """Apply the fusion rewrites of the module docstring; `shapes[vid]` is a
    value's shape."""
    slots: list[PimOp | None] = list(ops)
    producer: dict[int, int] = {}
    consumers: dict[int, set[int]] = defaultdict(set)
    for i, op in enumerate(ops):
        for r in op.results:
            producer[r.value] = i
        for a in op.operands:
            consumers[a.value].add(i)
    outs = set(outputs)

    def sole_reader(vid: int, i: int) -> bool:
        return vid not in outs and consumers[vid] == {i}

    def replace(old: int, new: int, merged: PimOp, dead_value: int) -> None:
        for a in slots[old].operands:
            consumers[a.value].discard(old)
            consumers[a.value].add(new)
        consumers.pop(dead_value, None)
        producer.pop(dead_value, None)
        for r in merged.results:
            producer[r.value] = new
        slots[old] = None
        slots[new] = merged

    def fusable(op, i, vid, kinds, depth):
        """(producer of value vid, op's bijective read of it) when that producer is of `kinds`, op is its
        sole reader and the fused body stays within MAX_FUSED_DEPTH (depth: the producer's depth); else
        (None, None)."""
        p = producer.get(vid)
        if p is None or slots[p].kind not in kinds or not sole_reader(vid, i):
            return None, None
        if depth(slots[p]) + expr_depth(op.body) > MAX_FUSED_DEPTH:
            return None, None
        read = _bijective_read(op, vid, shapes[vid])
        return (None, None) if read is None else (p, read)

    for i in range(len(slots)):
        op = slots[i]
        if op is None or op.kind not in ("elementwise", "layout"):
            continue
        if op.kind == "layout":
            vid = op.operands[0].value if len(op.operands) == 1 else None
            p = producer.get(vid)
            if (p is not None and sole_reader(vid, i)
                    and slots[p].kind in ("contraction", "reduction", "elementwise")):
                merged = _push_layout(slots[p], op, shapes[vid])
                if merged is not None:
                    replace(p, i, merged, vid)
            continue
        # 1. pull same-shape elementwise producers into this op
        for vid in dict.fromkeys(a.value for a in op.operands):
            p, read = fusable(op, i, vid, ("elementwise",), lambda q: expr_depth(q.body))
            merged = None if read is None else _pull_elementwise(slots[p], op, read)
            if merged is not None:
                replace(p, i, merged, vid)
                op = merged
        # 2. push this op into a contraction/reduction producer as its epilogue
        for vid in dict.fromkeys(a.value for a in op.operands):
            p, read = fusable(op, i, vid, ("contraction", "reduction"),
                              lambda q: max(expr_depth(q.body), expr_depth(q.epilogue)))
            merged = None if read is None else _push_epilogue(slots[p], op, read)
            if merged is not None:
                replace(p, i, merged, vid)
                break
    return [op for op in slots if op is not None]
