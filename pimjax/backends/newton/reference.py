"""PIMFlow's own PIM simulator's configuration and mapping, as pimjax programs.

`../shared/reference/pimflow.csv` holds the cycles of PIMFlow's public
artifact (its command generator `pim/main.cc` and its Ramulator fork, GDDR6
on 16 PIM channels of 32) for CNN layers under its four Newton
configurations.  `reference_program(row)` builds what the artifact ran as a
pimjax program: the layer (NHWC convolution, padding (K - 1) // 2, or an FC
layer when H = W = 1) with the filter in the banks (resident, placed in
advance as PIMFlow §2.2), mapped by the artifact's packed mapping
(`packed.py`) with the channel-group count its `policy_auto` keeps (the
fewest G_ACTs on the first channel, ties to the shorter stream), on
`newton_config(config, simulator="pimflow")` (the fork's timing
semantics, `hw.presets.newton`).  `reference_cycles` times it the way the
artifact reports it: the slowest channel's DRAM cycles (the host merge of
the read-back results is not part of the fork's figure), and the command
counts of that channel (G_ACT counted as the fork issues it: G_ACT0..3, one
per bank group).
"""
from __future__ import annotations

import numpy as np

from ...partition.draft import Draft
from .packed import packed_drafts, packed_plan

PIMFLOW_PIM_CHANNELS = 16      # reference/pimflow.md: the artifact's runs use 16 PIM channels of 32
PIMFLOW_TOTAL_CHANNELS = 32
COUNTS = ("GWRITE", "G_ACT", "COMP", "READRES")


def layer_graph(row: dict):
    """(op, shapes) of a reference row's layer: H x W x C input (NHWC, batch 1,
    bf16 values are irrelevant to timing: float16 as the CNN tables), F
    filters of K x K with `stride`, padding (K - 1) // 2; H = W = K = 1 is an
    FC layer x [1, C] @ w [C, F].  Operand 1 is the filter."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    from ...trace.frontend import make_graph
    H, W, C, F, K, s = (int(row[k]) for k in ("H", "W", "C", "F", "K", "stride"))
    if min(H, W, C, F, K, s) < 1:
        raise ValueError(f"reference row {row.get('layer', row)!r}: H, W, C, F, K and stride must be >= 1")
    f16 = jnp.float16
    if H == W == K == 1:
        graph = make_graph(lambda x, w: x @ w, jax.ShapeDtypeStruct((1, C), f16), jax.ShapeDtypeStruct((C, F), f16))
    else:
        p = (K - 1) // 2

        def conv(x, w):
            return lax.conv_general_dilated(x, w, (s, s), [(p, p), (p, p)], dimension_numbers=("NHWC", "HWIO", "NHWC"))
        graph = make_graph(conv, jax.ShapeDtypeStruct((1, H, W, C), f16), jax.ShapeDtypeStruct((K, K, C, F), f16))
    ops = [o for o in graph.ops if o.kind == "contraction"]
    if len(ops) != 1:
        raise ValueError(f"reference row {row.get('layer')!r}: traced to {len(ops)} contractions")
    op = ops[0]
    shapes = {i: v.shape for i, v in enumerate(graph.values)}
    return op, shapes


def filter_operand(op) -> int:
    """The filter's operand index (the traced graph's second argument)."""
    for k, a in enumerate(op.operands):
        if a.value == 1:
            return k
    raise ValueError(f"{op.name}: no operand reads the filter")


def backend_for(row: dict):
    """The artifact's system for a row: `newton_config(config)` on 16 PIM
    channels of 32 with the fork's timing semantics; the row's `buffers` and
    `gwrite_hiding` columns are checked against the configuration."""
    from ...hw.presets import NEWTON_CONFIGS, newton_config
    name = str(row["config"]).strip()
    if name not in NEWTON_CONFIGS:
        raise ValueError(f"reference row config {name!r}: valid names are {sorted(NEWTON_CONFIGS)}")
    cfg = NEWTON_CONFIGS[name]
    for col, want in (("buffers", cfg["buffers"]), ("gwrite_hiding", int(cfg["gwrite_hiding"]))):
        if col in row and str(row[col]).strip() != "" and int(row[col]) != int(want):
            raise ValueError(f"reference row {row.get('layer')!r}: {col}={row[col]} but {name} has {want}")
    return newton_config(name, channels=PIMFLOW_PIM_CHANNELS, total_channels=PIMFLOW_TOTAL_CHANNELS,
                         simulator="pimflow")


def artifact_draft(op, backend, shapes, matrix: int) -> Draft:
    """The packed draft the artifact's `policy_auto` keeps: per part of the
    reduction (full chunks, packed remainder), of n in {1, 2, 4} (<= buffers)
    the fewest G_ACTs on channel 0, ties to its shorter stream."""
    drafts = packed_drafts(op, backend, shapes, matrix=matrix)
    if not drafts:
        raise ValueError(f"{op.name}: the packed mapping cannot run this layer")
    choice = []
    for k in range(len(packed_plan(op, drafts[0], backend, shapes, matrix).parts)):
        best, key = None, None
        for d in drafts:
            part = packed_plan(op, d, backend, shapes, matrix).parts[k]
            pl = packed_plan(op, d, backend, shapes, matrix)
            loads = len(pl.group_loads(part, 0))
            runs = pl.channel_runs(part, 0)
            st = pl.run_length(part)
            units = sum(min(st, pl.units(part) - int(j) * st) for j in runs)
            cand = (loads * len(runs), loads * (1 + len(runs) + 2 * units))
            if key is None or cand < key:
                best, key = part.n, cand
        choice.append(best)
    pack, rest = choice[0], (choice[1] if len(choice) > 1 else 0)
    return next(d for d in drafts if d.pack == pack and d.pack_rest == rest)


def reference_program(row: dict):
    """(program, backend) of a reference row (module docstring)."""
    from ...lower import lower
    op, shapes = layer_graph(row)
    backend = backend_for(row)
    m = filter_operand(op)
    draft = artifact_draft(op, backend, shapes, m)
    return lower(op, draft, backend, shapes, matrix=m, resident=(m,)), backend


def reference_cycles(row: dict) -> dict:
    """Our figures for a reference row: {"cycles": the slowest channel's DRAM
    cycles (total - host merge), "GWRITE" / "G_ACT" / "COMP" / "READRES":
    that channel's commands (G_ACT x bank groups), "channel_groups": n}."""
    from ...sim.cycles import cycles
    program, backend = reference_program(row)
    rep = cycles(program, backend)
    out = {"cycles": float(np.asarray(rep.total_cycles)) - float(np.asarray(rep.merge))}
    rec = program.commands
    op_ = np.asarray(rec.op)
    n_ = np.asarray(rec.n)
    from ...lower.program import Op
    per = {"GWRITE": [], "G_ACT": [], "COMP": [], "READRES": []}
    for s in range(op_.shape[0]):
        gw = op_[s] == Op.GWRITE
        starts = gw & ~np.concatenate([[False], gw[:-1]])        # a load is a run of GWRITE columns
        per["GWRITE"].append(int(starts.sum()))
        per["G_ACT"].append(int((op_[s] == Op.G_ACT).sum()) * backend.group.bank_groups)
        per["COMP"].append(int(n_[s][op_[s] == Op.COMP].sum()))
        per["READRES"].append(int((op_[s] == Op.READRES).sum()))
    # the slowest channel: the fork's figure is the channel that ends last; ours share one clock,
    # so take the channel with the most commands (the artifact's first channel)
    busiest = int(np.argmax([per["COMP"][s] + per["G_ACT"][s] for s in range(op_.shape[0])]))
    out.update({k: v[busiest] for k, v in per.items()})
    out["channel_groups"] = (int(program.draft.pack), int(program.draft.pack_rest or program.draft.pack))
    return out
