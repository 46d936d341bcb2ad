"""Residency: which values keep their PIM layout between calls (DCC §IV-E `pre_load`).

`residency(fn, args, graph, spec)` reads the traced function's arguments and says which
argument leaves are placed in PIM layout once (parameter containers, KV caches, or the leaves
a `resident=` spec names) and which are rearranged every call; `append_update` recognises the
host ops that write into a resident value at an offset (a KV cache's append).  Shapes are the
graph's `ValueInfo.shape`; nothing here times anything.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import jax
import numpy as np

from ..sim.append import Append
from ..trace.ir import PimGraph, PimOp

# host primitives that write a region of an array at an offset: the operand index of the
# update (DCC §IV-E `pre_load` "partial updates of tensors in PIM memory with address offset")
APPEND_PRIMITIVES = {"dynamic_update_slice": 1, "scatter": 2}


@dataclass(frozen=True)
class Residency:
    """Which values keep their PIM layout between calls (see `residency`).

    ids:      value ids whose placement is paid once: the resident argument
              leaves and the values made from them by appending.
    appends:  {value id: `sim.append.Append`} for the appended values (a
              KV cache after `dynamic_update_slice`): the fraction of its
              elements and the box a call writes.
    resident: {argument (or leaf path): why it is resident}.
    per_call: {argument (or leaf path): why it is rearranged every call}.
    """
    ids: frozenset = frozenset()
    appends: dict = field(default_factory=dict)
    resident: dict = field(default_factory=dict)
    per_call: dict = field(default_factory=dict)


def append_update(op: PimOp):
    """(base, update, result) value ids of a host op that writes `update`
    into a copy of `base` at an offset (`dynamic_update_slice`, `scatter`),
    else None."""
    if op.kind != "host" or op.host is None:
        return None
    k = APPEND_PRIMITIVES.get(op.host.primitive.name)
    if k is None or len(op.operands) <= k or len(op.results) != 1:
        return None
    return op.operands[0].value, op.operands[k].value, op.results[0].value


def _argument_leaves(fn, args, graph: PimGraph) -> list:
    """Per positional argument: (label, container, [(leaf label, value id)]).
    label: the parameter's name (`args[i]` past the named ones or when the
    signature is unknown); container: the type name of an argument that is
    a pytree node (None for a plain array); a leaf's label: the argument's
    plus its pytree path (`params['Wq']`)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = []
    for p in params:
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            break
        names.append(p.name)
    out, pos = [], 0
    for i, a in enumerate(args):
        label = names[i] if i < len(names) else f"args[{i}]"
        flat, tree = jax.tree_util.tree_flatten_with_path(a)
        ids = graph.inputs[pos:pos + len(flat)]
        pos += len(flat)
        leaves = [(label + jax.tree_util.keystr(path), vid) for (path, _), vid in zip(flat, ids)]
        out.append((label, None if jax.tree_util.treedef_is_leaf(tree) else type(a).__name__, leaves))
    return out


def residency(fn, args, graph: PimGraph, spec="auto") -> Residency:
    """Which argument leaves of `fn(*args)` (traced as `graph`) are resident:
    placed in PIM layout once (DCC §IV-E `pre_load`; their placement is
    `resident_cycles`, out of the steady state), and which are rearranged
    on every call.

    spec "auto" (pim_jit's default):
      * a parameter container is resident: an argument that is a pytree
        node rather than one array (a dict / list / tuple of arrays, a
        flax `nnx.State`, a haiku params dict, an equinox Module, a
        penzai model) -- how flax, haiku, equinox and penzai pass weights;
      * a KV cache is resident: a plain array argument that a
        `dynamic_update_slice` (or an `.at[...].set` scatter) writes at an
        offset, the written copy read by an op PIM can run (attention's
        scores or context) and returned (threaded to the next call); an
        argument patched for this call only is not a cache;
      * any other plain array argument (an activation `x`, a position) is
        rearranged on every call.
    spec a sequence of argument names, positions or leaf paths
      (`"params['Wq']"`): exactly those leaves (a KV cache among them
      still appends); `()` turns residency off.

    A resident value that an append writes at an offset stays resident
    (`appends`: what each call writes; the consuming PIM op pays the
    appended rows' share of its placement per call, `sim.append`)."""
    args_ = _argument_leaves(fn, args, graph)
    by_label = {}
    for i, (label, _, leaves) in enumerate(args_):
        by_label[i] = by_label[label] = [vid for _, vid in leaves]
        for leaf_label, vid in leaves:
            by_label.setdefault(leaf_label, [vid])
    why: dict[int, str] = {}                 # resident leaf value id -> reason
    if spec == "auto":
        for label, container, leaves in args_:
            if container:
                for _, vid in leaves:
                    why[vid] = (f"parameter container ({container} of {len(leaves)} "
                                f"array{'s' * (len(leaves) != 1)}): placed in PIM layout once")
    else:
        for r in spec:
            if r not in by_label:
                raise ValueError(f"resident argument {r!r} is not an argument of "
                                 f"{getattr(fn, '__name__', 'the function')}")
            for vid in by_label[r]:
                why[vid] = f"named in resident={tuple(spec)!r}: placed in PIM layout once"
    inputs = set(graph.inputs)
    appends: dict[int, Append] = {}
    # a cache is threaded through calls: the appended copy (or a later append
    # of it) is returned; an argument only patched for this call is not one
    next_append = {u[0]: u[2] for u in map(append_update, graph.ops) if u is not None}
    outputs = set(graph.outputs)

    def returned(v: int) -> bool:
        seen = set()
        while v not in outputs:
            if v not in next_append or v in seen:
                return False
            seen.add(v)
            v = next_append[v]
        return True

    for n, op in enumerate(graph.ops):
        upd = append_update(op)
        if upd is None:
            continue
        base, update, result = upd
        if (spec == "auto" and base in inputs and base not in why and _feeds_pim(graph, result)
                and returned(result)):
            why[base] = ""                   # a KV cache: reason below
        if base in why or base in appends:
            total = int(np.prod(graph.values[base].shape, dtype=np.int64))
            share = int(np.prod(graph.values[update].shape, dtype=np.int64)) / max(total, 1)
            box = tuple(graph.values[update].shape)
            if base in appends or len(box) != len(graph.values[base].shape):
                box = None                   # a chain of appends, or a scatter of another rank: not one box
            appends[result] = Append(min(1.0, share + (appends[base].fraction if base in appends else 0.0)), box)
            if base in why:
                kv = (f"KV cache: grows by appending at an offset ({op.host.primitive.name}, op {n}; "
                      f"{share:.3g} of it written per call)")
                why[base] = kv if not why[base] else f"{why[base]}; {kv}"
    resident, per_call = {}, {}
    for i, (label, container, leaves) in enumerate(args_):
        off = ("a plain array argument (an activation, new each call): rearranged into PIM layout "
               "on every call"
               if spec == "auto" else
               "resident=(): rearranged on every call" if not spec else
               f"not named in resident={tuple(spec)!r}: rearranged on every call")
        status = [(vid in why, why.get(vid, off)) for _, vid in leaves]
        if status and all(s == status[0] for s in status):
            (resident if status[0][0] else per_call)[label] = status[0][1]
            continue
        for (leaf_label, _), (on, reason) in zip(leaves, status):
            (resident if on else per_call)[leaf_label] = reason
    return Residency(frozenset(why) | frozenset(appends), appends, resident, per_call)


def _feeds_pim(graph: PimGraph, vid: int) -> bool:
    """Whether `vid` (or a further append to it) is read by an op PIM can
    run (not a host or layout op)."""
    for op in graph.consumers(vid):
        if op.kind not in ("host", "layout"):
            return True
        upd = append_update(op)
        if upd is not None and upd[0] == vid and _feeds_pim(graph, upd[2]):
            return True
    return False


__all__ = ["APPEND_PRIMITIVES", "Residency", "append_update", "residency"]
