"""Multi-op patterns a backend lowers as one program.

`match_attention(graph)` finds score -> softmax -> context blocks:

    s = q . K        (contraction over the head dim; optional scalar epilogue)
    m = max_n s      (reduction max over the last dim of s)
    e = exp(s - m)   (elementwise)
    z = sum_n e      (reduction add)
    p = e / z        (elementwise)
    o = p . V        (contraction over the last dim of p)

with every intermediate used only inside the block.  The max, the sum and
the context reduce the same dim of s, e and p (the sequence), followed
through the elementwise ops' reads: jax folds an einsum's output transpose
into them (gemma's "BTKGH,BSKH->BTKGS" stores s as [B, K, S, T, G]), so
the sequence need not be s's last dim.  A match is a candidate: the
score's epilogue (a scale, a mask, a bias) is the backend's to judge
(`backends.attacc.attention.attention_op`).  AttAcc runs such a
block as one program per head group (`backends.attacc.attention.lower_attention`).
"""
from __future__ import annotations

from ..trace.ir import Acc, Arg, PimGraph, PimOp, Prim, strip_converts


def _is_prim(e, name: str, nargs: int) -> bool:
    e = strip_converts(e)
    return isinstance(e, Prim) and e.name == name and len(e.args) == nargs


def _arg_value(op: PimOp, e) -> int | None:
    """Graph value read by the operand expression `e` (None if not a read)."""
    e = strip_converts(e)
    return op.operands[e.index].value if isinstance(e, Arg) else None


def read_vars(op: PimOp, value: int) -> list | None:
    """The variables indexing each dim of `value` as `op` reads it (None
    for a dim read otherwise than by one plain variable), or None when
    `op` does not read `value`."""
    for acc in op.operands:
        if acc.value == value and acc.index_map:
            return [e.single_var for e in acc.index_map]
    return None


def reduced_dim(op: PimOp, value: int) -> int | None:
    """The one dim of `value` that `op` reads with a reduction variable
    (None unless exactly one is)."""
    rv = read_vars(op, value)
    dims = [i for i, v in enumerate(rv or ()) if v in op.reduction_vars]
    return dims[0] if len(dims) == 1 else None


def dim_map(op: PimOp, value: int) -> list | None:
    """For each dim of `op`'s result, the dim of `value` it reads with the
    same variable (None where none does); None unless the result and the
    read are indexed by plain variables (a transpose folded into a read is
    a permutation here)."""
    rv = read_vars(op, value)
    res = [e.single_var for e in op.result.index_map]
    if rv is None or None in rv or None in res:
        return None
    return [rv.index(v) if v in rv else None for v in res]


def score_seq_dim(block_ops) -> int:
    """The sequence dim of a matched block's score (the dim its max reduces)."""
    return reduced_dim(block_ops[1], block_ops[0].result.value)


def _max_epilogue_ok(op: PimOp) -> bool:
    ep = op.epilogue
    if ep is None:
        return True
    # max(-inf, acc): the identity of the max reduction
    return isinstance(ep, Prim) and ep.name == "max" and len(ep.args) == 2


def match_attention(graph: PimGraph) -> list[tuple[int, ...]]:
    """Blocks of op indices (score, max, exp, sum, div, context), in graph
    order, for every attention pattern whose intermediates have no other use
    (fp16 / bf16: (score, max, exp, convert, sum, div, context), jax's float32
    accumulation of the softmax sum).

    >>> import jax, jax.numpy as jnp, pimjax
    >>> f = lambda q, K, V: jax.nn.softmax(q @ K.T) @ V
    >>> g = pimjax.make_graph(f, jnp.ones(8), jnp.ones((16, 8)), jnp.ones((16, 8)))
    >>> match_attention(g)
    [(0, 1, 2, 3, 4, 5)]
    """
    producer = {}
    consumers: dict[int, list[int]] = {}
    for i, op in enumerate(graph.ops):
        for r in op.results:
            producer[r.value] = i
        for a in op.operands:
            consumers.setdefault(a.value, []).append(i)
    outputs = set(graph.outputs)

    def only_used_by(value: int, users: set[int]) -> bool:
        return value not in outputs and set(consumers.get(value, ())) <= users

    blocks = []
    for i_div, op in enumerate(graph.ops):
        if op.kind != "elementwise" or not _is_prim(op.body, "div", 2):
            continue
        num, den = (_arg_value(op, a) for a in strip_converts(op.body).args)
        if num is None or den is None or num not in producer or den not in producer:
            continue
        i_exp, i_sum = producer[num], producer[den]
        e_op, z_op = graph.ops[i_exp], graph.ops[i_sum]
        if not (z_op.kind == "reduction" and z_op.combiner == "add" and _only_converts(z_op.epilogue)):
            continue
        summed = _arg_value(z_op, z_op.body)
        # fp16 / bf16 softmax: jax sums a float32 copy of e (a convert op
        # between exp and sum) and converts the sum back (the epilogue)
        i_cvt = None if summed == num else _convert_of(graph, producer, summed, num)
        if summed != num and i_cvt is None:
            continue
        if not (e_op.kind == "elementwise" and _is_prim(e_op.body, "exp", 1)
                and _is_prim(strip_converts(e_op.body).args[0], "sub", 2)):
            continue
        s_v, m_v = (_arg_value(e_op, a) for a in strip_converts(strip_converts(e_op.body).args[0]).args)
        if s_v is None or m_v is None or s_v not in producer or m_v not in producer:
            continue
        i_score, i_max = producer[s_v], producer[m_v]
        s_op, m_op = graph.ops[i_score], graph.ops[i_max]
        if not (m_op.kind == "reduction" and m_op.combiner == "max" and _max_epilogue_ok(m_op)
                and _arg_value(m_op, m_op.body) == s_v):
            continue
        if not (s_op.kind == "contraction" and len(s_op.reduction_vars) == 1):
            continue
        # the max, the sum and the context reduce the same dim of s, e and p (the sequence),
        # followed through the elementwise reads (a transpose jax folded into them permutes dims)
        ds = reduced_dim(m_op, s_v)
        e_from_s, p_from_e = dim_map(e_op, s_v), dim_map(op, num)
        if ds is None or len(m_op.reduction_vars) != 1 or e_from_s is None or ds not in e_from_s:
            continue
        de = e_from_s.index(ds)
        if reduced_dim(z_op, summed) != de or p_from_e is None or de not in p_from_e:
            continue
        p_v = op.result.value
        ctx = [c for c in consumers.get(p_v, ())]
        if len(ctx) != 1 or graph.ops[ctx[0]].kind != "contraction":
            continue
        i_ctx = ctx[0]
        c_op = graph.ops[i_ctx]
        if len(c_op.reduction_vars) != 1 or reduced_dim(c_op, p_v) != p_from_e.index(de):
            continue
        cvt = () if i_cvt is None else (i_cvt,)
        block = (i_score, i_max, i_exp) + cvt + (i_sum, i_div, i_ctx)
        inner = set(block)
        if not (only_used_by(s_v, {i_max, i_exp}) and only_used_by(m_v, {i_exp})
                and only_used_by(num, {(i_cvt if cvt else i_sum), i_div}) and only_used_by(den, {i_div})
                and (not cvt or only_used_by(summed, {i_sum})) and only_used_by(p_v, {i_ctx})):
            continue
        if len(inner) == len(block):
            blocks.append(block)
    return sorted(blocks)


def _only_converts(expr) -> bool:
    """None, or dtype conversions of `Acc` (the sum converted back to fp16)."""
    return expr is None or isinstance(strip_converts(expr), Acc)


def _convert_of(graph: PimGraph, producer: dict, value: int | None, source: int) -> int | None:
    """Index of the elementwise op that makes `value` as a pure dtype
    conversion of `source` read element for element, else None."""
    i = producer.get(value)
    if i is None:
        return None
    op = graph.ops[i]
    if not (op.kind == "elementwise" and op.epilogue is None and isinstance(op.body, Prim)
            and isinstance(strip_converts(op.body), Arg) and _arg_value(op, op.body) == source):
        return None
    read = op.operands[strip_converts(op.body).index].index_map
    return i if read == op.result.index_map else None
