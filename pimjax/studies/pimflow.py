"""PIMFlow's modelling (CNNs on a GPU + PIM memory, PIMFlow §4-§6) on pimjax's models: the
per-layer PIM and GPU times, the modes of Algorithm 1 over a model's layers, and their energy.

`experiments/pimflow.py` tabulates these (Fig. 9, Table 2, Fig. 12, Fig. 13), caches the layer
times and energies on disk and holds the paper's figures; this module computes, it reads and
writes no file.

System (`backend_for(config, P, gpu)` = `hw.presets.newton_config(config, channels=P,
total_channels=32, simulator="pimflow", gpu=gpu)`, PIMFlow §5 / Table 1): a 32-channel GDDR6
memory, P of the channels PIM-enabled (Newton units) and timed by PIMFlow's own Ramulator fork's
controller (`backends/newton/fork.py`), the RTX 2060 beside PIM on the 32 - P GPU-only channels
(`System.cogpu`); the GPU baseline runs on all 32 channels (`System.gpu`).  GPU models
(`GPU_BASELINES`): "pimflow", PIMFlow's Accel-Sim RTX 2060 (`hw.host.pimflow_rtx2060`, the
default, `GPU`), and pimjax's "occupancy" model.  config: Newton++ (4 global buffers + GWRITE
latency hiding) for every mode but Newton+ (one buffer, no hiding), as the paper's Fig. 9.

Per layer of each model (`pimjax.models.cnn.cnn_layers`, 224 x 224, batch 1, fp16;
`layer_times`):

* GPU time: the layer's op (`layer_op`: a CONV / DW CONV / FC traced alone) on the GPU model
  (`sim.host.host_time`; on "pimflow" as its per-layer profile, `profile_layout_ns`), every
  share of its output rows (and channels) on the concurrent GPU; other nodes stream their bytes
  (`other_node_ns`; on "pimflow" those TVM fuses into a product cost their extra bytes,
  `fused_into_product`).
* PIM time (`pim_time`): PIMFlow's packed mapping (`backends/newton/packed.py`), every
  channel-group choice timed exactly on the fork's controller (`packed.stream_cycles`) and the
  fastest kept.
* MD-DP splits along output rows (free) and output channels (one output copy); per node the
  variant whose best split is faster (`search.mixed.choose_split`).

Modes (`run_modes`: `search.mixed.execution_mode_search` = Algorithm 1 on the chain of CONV /
DW / FC nodes): Newton+, Newton++, PIMFlow-md (MD-DP in 10 % steps), PIMFlow-pl (pipelining of
`cnn.find_patterns`' subgraphs, `STAGES` stages) and PIMFlow (both).  Energy (`energy_model`):
the time-optimal plans' GPU work (`hw.gpu.gpu_energy_pj`) and PIM programs lowered and simulated
(`pim_energy`), GPU static power x end-to-end time.  Units: ns, pJ, bytes.
"""
from __future__ import annotations

import time

import numpy as np

MODELS = ("mobilenet-v2", "efficientnet-b0", "mnasnet1_0", "resnet-50", "vgg-16")
PIM_CHANNELS = 16                     # PIMFlow §6: 16 PIM-enabled of 32
TOTAL_CHANNELS = 32
STAGES = 2                            # pipeline stages (PIMFlow §4.2.1's example)
MODES = ("Newton+", "Newton++", "PIMFlow-md", "PIMFlow-pl", "PIMFlow")
MODE_FLAGS = {"Newton+": dict(md_dp=False, pipeline=False), "Newton++": dict(md_dp=False, pipeline=False),
              "PIMFlow-md": dict(md_dp=True, pipeline=False),
              "PIMFlow-pl": dict(md_dp=False, pipeline=True), "PIMFlow": dict(md_dp=True, pipeline=True)}

# PIMFlow §6.4: BERT-base's FC layers at 1 x 3 and 1 x 64 tokens (`pimjax.models.cnn`, seq_len)
BERT_MODELS = {"bert-base-s3": ("bert-base", dict(seq_len=3)), "bert-base-s64": ("bert-base", dict(seq_len=64))}

# PIMFlow's PIM configurations (`hw.presets.newton_config`): Newton+ (one global buffer, no GWRITE
# latency hiding) for the Newton+ column, Newton++ (4 buffers + hiding) for every other mode (§4.1, §6)
CONFIGS = ("newton+", "newton++")
PIMFLOW_CONFIG = "newton++"
# the operand kept in the banks (`lower(..., matrix=k)`): layer_op traces (x, w), so 0 = the input
# activations, 1 = the filter / FC weight; each layer (and share) takes the faster placement
PLACEMENTS = {1: "filter"}

GPU_BASELINES = ("occupancy", "pimflow", "library")   # pimjax's default GPU model, PIMFlow's Accel-Sim RTX 2060,
                                                      #   the measured-checked RTX 2060 (`checked_rtx2060`)
GPU = "pimflow"                             # the GPU the figures use unless told (`gpu=`): PIMFlow's own
INPUT_HW = 224                              # the models' input (cnn_layers' default resolution)

PRODUCT_KINDS = ("conv", "dwconv", "fc")
FUSABLE_OPS = ("act", "add", "mul")     # elementwise / broadcast nodes TVM's FuseOps joins to a product's epilogue


def model_table(model: str):
    """`cnn.cnn_layers` of `model` (one of MODELS, or a BERT_MODELS key: BERT-base at a token count)."""
    from ..models import cnn
    name, changes = BERT_MODELS.get(model, (model, {}))
    return cnn.cnn_layers(name, **changes)


def checked_rtx2060(channels: int):
    """The RTX 2060 on pimjax's measured-checked "library" model (`hw.gpus.gpu`: the card's datasheet
    compute, the fitted constants of its measured Turing sibling, the T4: `hw.gpus.FITS_FROM`) on
    `channels` of PIMFlow's GDDR6 channels (the bandwidth PIMFlow's own GPU has on them,
    `hw.host.pimflow_rtx2060`), so that only the kernels' timing differs from PIMFlow's GPU."""
    from ..hw.gpus import gpu
    from ..hw.host import pimflow_rtx2060
    return gpu("rtx2060", "library", memory=float(pimflow_rtx2060(channels).mem_bandwidth))


def backend_for(config: str, pim_channels: int = PIM_CHANNELS, gpu: str | None = None):
    """The PIMFlow system with `pim_channels` PIM channels of 32 under PIM configuration `config`;
    gpu: the GPU model of `System.gpu` / `System.cogpu` (None: `GPU`, "pimflow": PIMFlow's own
    Accel-Sim RTX 2060, `hw.host.pimflow_rtx2060`; "library": `checked_rtx2060`; "occupancy": the
    preset's default).  The PIM channels run PIMFlow's Ramulator fork's controller
    (`newton(simulator="pimflow")`)."""
    from ..hw.presets import newton_config
    gpu = gpu or GPU
    if gpu == "library":
        be = newton_config(config, channels=pim_channels, total_channels=TOTAL_CHANNELS, simulator="pimflow",
                           gpu=checked_rtx2060(TOTAL_CHANNELS))
        co = checked_rtx2060(TOTAL_CHANNELS - pim_channels) if TOTAL_CHANNELS > pim_channels else None
        return be.replace(system=be.system.replace(cogpu=co))
    return newton_config(config, channels=pim_channels, total_channels=TOTAL_CHANNELS, simulator="pimflow",
                         gpu=gpu)


def layer_op(row):
    """(op, shapes) of one CONV / DW CONV / FC layer of a `cnn_layers` row traced alone:
    NHWC input [1, H, W, C], HWIO weight [K, K, C / groups, F], stride and padding (K - 1) // 2
    as the model; FC: x [W, C] @ w [C, F] (the table reads a 2-D [M, C] as H = 1, W = M)."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    from ..trace.frontend import make_graph
    f16 = jnp.float16
    H, W, C, F, K, s, g = (int(row[k]) for k in ("H", "W", "C", "F", "K", "stride", "groups"))
    if row["kind"] == "fc":
        graph = make_graph(lambda x, w: x @ w, jax.ShapeDtypeStruct((W, C), f16), jax.ShapeDtypeStruct((C, F), f16))
    else:
        p = (K - 1) // 2

        def conv(x, w):
            return lax.conv_general_dilated(x, w, (s, s), [(p, p), (p, p)],
                                            dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=g)
        graph = make_graph(conv, jax.ShapeDtypeStruct((1, H, W, C), f16),
                           jax.ShapeDtypeStruct((K, K, C // g, F), f16))
    ops = [o for o in graph.ops if o.kind == "contraction"]
    if len(ops) != 1:
        raise ValueError(f"layer {row['name']}: traced to {len(ops)} contractions")
    return ops[0], {i: v.shape for i, v in enumerate(graph.values)}


def pim_time(op, shapes, backend, matrix: int | None = None):
    """(ns, knobs, draft) of `op` on a newton backend: the fastest of PIMFlow's packed drafts
    (`backends/newton/packed.py`: the artifact's mapping, every channel-group choice of every
    part -- the whole space, at most 9 drafts) with the filter in the banks and resident
    (PIMFlow §2.2), each timed exactly by the backend's controller (`packed.stream_cycles`: on
    `backend_for`'s systems PIMFlow's Ramulator fork, the slowest channel's DRAM cycles, as the
    artifact reports a layer).  knobs: the draft's (pack, pack_rest).  matrix: the operand in the
    banks; only the filter (operand 1 of `layer_op`'s (x, w)) is PIMFlow's -- another gives
    (nan, None, None), as does an op that cannot be packed."""
    from ..backends.newton.packed import packed_drafts, stream_cycles
    from ..errors import PimCompileError
    filt = next((k for k, a in enumerate(op.operands) if a.value == 1), None)
    if filt is None or (matrix is not None and matrix != filt):
        return float("nan"), None, None
    best = None
    for d in packed_drafts(op, backend, shapes, matrix=filt):
        try:
            cyc = stream_cycles(op, d, backend, shapes, filt)
        except PimCompileError:
            continue
        if best is None or cyc < best[0]:
            best = (cyc, d)
    if best is None:
        return float("nan"), None, None
    return float(best[0] * float(backend.timing.tCK)), (int(best[1].pack), int(best[1].pack_rest)), best[1]


def pim_time_placed(op, shapes, backend):
    """`pim_time` as the time cache records it: {"ns", "matrix" ("filter": PIMFlow keeps the filter
    in the banks; None where the op has no packed draft), "ns_by" {placement: ns}, "knobs"
    {placement: (pack, pack_rest)}}."""
    ns_by, knobs = {}, {}
    for k, name in PLACEMENTS.items():
        ns_by[name], knobs[name], _ = pim_time(op, shapes, backend, matrix=k)
    finite = {n: v for n, v in ns_by.items() if np.isfinite(v)}
    win = min(finite, key=finite.get) if finite else None
    return dict(ns=finite[win] if win else float("nan"), matrix=win, ns_by=ns_by, knobs=knobs)


def fused_into_product(rows: list[dict]) -> dict[int, int]:
    """{node: the node it follows in the same kernel} for the "other" nodes that PIMFlow's TVM
    build runs inside a product's epilogue kernel: an activation, add or multiply whose input is a
    CONV / DW CONV / FC -- or a node already fused into one -- that feeds nothing else.  cuDNN and
    cuBLAS calls are opaque to TVM, so their bias (folded batch norm) is a TVM kernel of its own and
    FuseOps joins the elementwise ops after it (conv + bias + ReLU6; project conv + bias + residual
    add; SE fc2 + bias + sigmoid + scale).  rows: `cnn_layers(...).to_dict("records")`."""
    fused: dict[int, int] = {}
    for i, r in enumerate(rows):
        if r["kind"] != "other" or r["op"] not in FUSABLE_OPS:
            continue
        for j in r["inputs"]:
            if j >= 0 and tuple(rows[j]["consumers"]) == (i,) and (rows[j]["kind"] in PRODUCT_KINDS or j in fused):
                fused[i] = j
                break
    return fused


def other_node_ns(host, row, fused_from: dict | None = None) -> float:
    """A non-contraction node on the GPU: its bytes streamed (pools reduce their window).
    fused_from: on the "pimflow" GPU model (and the checked RTX 2060 in its place), the row of the node whose epilogue kernel this node
    runs in (`fused_into_product`): no kernel of its own, only the bytes it adds to that kernel
    (what it reads and writes beyond the fused chain's value, read and written once there);
    ignored on the other models."""
    from ..hw.gpu import elementwise_ns
    if fused_from is not None and host.model in ("pimflow", "library"):
        extra = float(row["in_bytes"] + row["out_bytes"]) - 2.0 * float(fused_from["out_bytes"])
        return max(0.0, extra) / (float(host.mem_bandwidth) * float(host.bandwidth_efficiency)) * 1e9
    outputs = max(1, int(row["Ho"]) * int(row["Wo"]) * int(row["F"]))
    red = max(1, int(row["H"]) * int(row["W"]) // max(1, int(row["Ho"]) * int(row["Wo"]))) \
        if row["op"] == "pool" else 1
    return float(elementwise_ns(host, float(row["in_bytes"] + row["out_bytes"]), float(row["flops"]),
                                outputs=outputs, reduction=red, kind="act"))


def _variant_times(op, var, backend, memo, key):
    """{gpu: [11], pim: [11], matrix: [11]} of `op` split along loop variable `var`: share r of
    the iterations on the concurrent GPU, 1 - r on PIM (`search.mixed.share_builder`), each PIM
    share under its faster placement (`pim_time_placed`; matrix: the winner's name, None at r = 1)."""
    from ..search.mixed import RATIOS, share_builder
    build = share_builder(op, var)
    gpu, pim, mat = [0.0] * len(RATIOS), [0.0] * len(RATIOS), [None] * len(RATIOS)
    whole = (key, "whole", 1.0)
    if whole not in memo:
        o, sh = build(1.0)
        memo[whole] = pim_time_placed(o, sh, backend)
    for i, r in enumerate(RATIOS):
        if r > 0:
            gpu[i] = _share_gpu_ns(build, float(r), backend.system.cogpu)
        if r < 1:
            share = float(np.round(1.0 - r, 2))
            mk = (key, var, share) if share < 1 else whole
            if mk not in memo:
                o, sh = build(share)
                memo[mk] = pim_time_placed(o, sh, backend)
            pim[i], mat[i] = memo[mk]["ns"], memo[mk]["matrix"]
    return dict(gpu=gpu, pim=pim, matrix=mat)


def layer_key(row, pim_channels: int = PIM_CHANNELS) -> tuple:
    """The shape key the time cache's memo uses (layers of one shape share their PIM programs)."""
    return (row["kind"], int(row["H"]), int(row["W"]), int(row["C"]), int(row["F"]), int(row["K"]),
            int(row["stride"]), pim_channels)


def profile_layout_ns(host, op, shapes) -> float:
    """On the "pimflow" GPU model, the kernel PIMFlow's per-layer profiles add to a CONV / DW CONV
    (0 otherwise, and for an FC): layerwise.py compiles a PyTorch NCHW layer, and TVM's
    ConvertLayout to NHWC (`desired_layouts` there) puts a transform of its input before cuDNN --
    a TVM copy kernel of the input (op's first operand, 4-D; FP16: 2 B read and 2 B written per
    element).  Returns ns.  A whole-network run converts only
    the network's input (`gpu_totals`' e2e)."""
    from ..hw.gpu import elementwise_ns
    if host.model != "pimflow":
        return 0.0
    x = op.operands[op.body_operands[0]].value if op.body is not None else op.operands[0].value
    if len(shapes[x]) != 4:
        return 0.0
    n = int(np.prod(shapes[x]))
    return float(elementwise_ns(host, 4.0 * n, 0.0, outputs=n, kind="copy"))


def _share_gpu_ns(build, share: float, host) -> float:
    """ns on `host` of `share` of an op's iterations (`share_builder`'s build); on the "pimflow"
    model with its per-layer profile's input transform (`profile_layout_ns`)."""
    from ..sim.host import host_time
    op, shapes = build(share)
    return float(host_time(op, host, shapes, 2)) + profile_layout_ns(host, op, shapes)


def layer_times(model: str, pim_channels: int = PIM_CHANNELS, memo=None, variants=("rows", "channels"),
                log=print, gpu: str | None = None) -> list[dict]:
    """Per node of `model` (224 x 224): name, kind, op, candidate, gpu_ns (baseline GPU, all
    channels), cogpu_ns (beside PIM), and for PIM candidates per split variant (`split_vars`)
    its gpu / pim lists over `RATIOS` and merge_ns (ns).  gpu: the GPU model (`backend_for`;
    None: `GPU`).  On "pimflow" the nodes are timed as PIMFlow's artifact times
    them: a CONV / DW CONV as its per-layer profile (`profile_layout_ns` added), an activation /
    add / multiply TVM fuses into a product's epilogue as the bytes it adds there
    (`fused_into_product`); the PIM memo (`memo`) does not depend on the GPU model."""
    from ..hw.gpu import elementwise_ns
    from ..search.mixed import RATIOS, share_builder, split_vars
    from ..sim.host import host_time
    gpu = gpu or GPU
    backend = backend_for(PIMFLOW_CONFIG, pim_channels, gpu)
    plus = backend_for("newton+", pim_channels, gpu)
    memo = {} if memo is None else memo
    table = model_table(model)
    rows = table.to_dict("records")
    # PIMFlow's GPU runs TVM's fused kernels, and so does the checked RTX 2060 in its place
    fused = fused_into_product(rows) if gpu in ("pimflow", "library") else {}
    out = []
    t0 = time.perf_counter()
    for i, row in enumerate(rows):
        rec = dict(name=row["name"], kind=row["kind"], op=row["op"], K=int(row["K"]),
                   groups=int(row["groups"]), candidate=bool(row["pim_candidate"]))
        if row["kind"] == "other":
            src = rows[fused[i]] if i in fused else None
            rec["gpu_ns"] = other_node_ns(backend.system.gpu, row, src)
            rec["cogpu_ns"] = other_node_ns(backend.system.cogpu, row, src)
            out.append(rec)
            continue
        op, shapes = layer_op(row)
        rec["gpu_ns"] = float(host_time(op, backend.system.gpu, shapes, 2)) + \
            profile_layout_ns(backend.system.gpu, op, shapes)
        rec["cogpu_ns"] = float(host_time(op, backend.system.cogpu, shapes, 2)) + \
            profile_layout_ns(backend.system.cogpu, op, shapes)
        rows_var = split_vars(op).get("rows")
        if not rec["candidate"] and rows_var is not None:
            # a GPU-only node (a depthwise CONV) inside a pipelined subgraph runs as row chunks
            # beside PIM: its row shares on the concurrent GPU, what `pipeline_ns` charges a chunk
            build = share_builder(op, rows_var)
            rec["gpu_rows"] = dict(var=rows_var, gpu=[_share_gpu_ns(build, float(r), backend.system.cogpu)
                                                      if r > 0 else 0.0 for r in RATIOS])
        if rec["candidate"]:
            key = layer_key(row, pim_channels)
            vs = split_vars(op)
            # the Newton+ column: the whole layer on Newton+ (one buffer, no hiding), faster placement
            pk = (key, "whole", "newton+")
            if pk not in memo:
                memo[pk] = pim_time_placed(op, shapes, plus)
            rec["newton+"] = dict(ns=memo[pk]["ns"], matrix=memo[pk]["matrix"], ns_by=memo[pk]["ns_by"])
            rec["variants"] = {}
            for name in variants:
                if name not in vs:
                    continue
                v = _variant_times(op, vs[name], backend, memo, key)
                # channels: the two parts' outputs interleave along C in NHWC -- one copy of the output
                # on the concurrent GPU to concatenate them; rows: contiguous (PIMFlow §4.3.2), free
                merge = 0.0 if name == "rows" else float(elementwise_ns(
                    backend.system.cogpu, 2.0 * row["out_bytes"], 0.0,
                    outputs=int(row["Ho"]) * int(row["Wo"]) * int(row["F"]), kind="copy"))
                v["merge_ns"] = merge
                v["var"] = vs[name]
                rec["variants"][name] = v
            w = memo[(key, "whole", 1.0)]
            rec[PIMFLOW_CONFIG] = dict(ns=w["ns"], matrix=w["matrix"], ns_by=w["ns_by"])
            log(f"    {row['name']}: GPU beside PIM {rec['cogpu_ns']:,.0f} ns, PIM {w['ns']:,.0f} ns "
                f"({w['matrix']} in the banks; Newton+ {rec['newton+']['ns']:,.0f} ns) "
                f"({time.perf_counter() - t0:.0f} s)")
        out.append(rec)
    log(f"  {model} @ {pim_channels} PIM channels: {len(out)} nodes in {time.perf_counter() - t0:.0f} s")
    return out


def pim_bound(pim) -> np.ndarray:
    """[11] PIM times over `RATIOS` (index i: share 1 - i / 10 on PIM) with each share capped by
    every larger share's time: a share can always run as the larger share's program on its rows
    (the extra rows padded and dropped).  The shares' estimates walk only a few drafts with the
    whole op's knobs (`pim_time`'s `like`), which now and then map a share worse than the whole."""
    p = np.asarray(pim, np.float64).copy()
    p[:-1] = np.fmin.accumulate(p[:-1])        # fmin: a share without an estimate (NaN) caps nothing
    return p


def node_times(rec: dict, variant: str | None = None, config: str = PIMFLOW_CONFIG):
    """`NodeTimes` of one contraction node from its record: a candidate's split variant
    (`variant`, default the one whose best split is fastest), else GPU only.  config "newton+":
    whole layers only (GPU or the Newton+ PIM time; no shares)."""
    from ..search.mixed import RATIOS, NodeTimes, choose_split
    kind = {"dwconv": "dwconv", "fc": "fc"}.get(rec["kind"], "conv1x1" if rec["K"] == 1 else "conv")
    if config == "newton+" and rec.get("variants"):
        v = rec["variants"]["rows"]
        pim = np.where(RATIOS < 1, np.nan, 0.0)
        pim[0] = rec["newton+"]["ns"]
        gpu = np.where(RATIOS > 0, np.nan, 0.0)
        gpu[-1] = v["gpu"][-1]
        return NodeTimes(rec["name"], gpu, pim, None, kind), "rows"
    if not rec.get("variants"):
        if rec.get("gpu_rows"):           # GPU only, with its row shares (a pipelined DW CONV's chunks)
            gpu = np.asarray(rec["gpu_rows"]["gpu"], np.float64)
        else:
            gpu = np.where(RATIOS > 0, np.nan, 0.0)
            gpu[-1] = rec["cogpu_ns"]
        pim = np.where(RATIOS < 1, np.nan, 0.0)
        return NodeTimes(rec["name"], gpu, pim, None, kind), None
    vs = {name: NodeTimes(rec["name"], v["gpu"], pim_bound(v["pim"]), v["merge_ns"], kind)
          for name, v in rec["variants"].items()}
    if variant is not None and variant in vs:
        return vs[variant], variant
    name, nt = choose_split(vs)
    return nt, name


def chain(model: str, records: list[dict]):
    """(chain nodes, row variant nodes, their record indices, other ns on the concurrent GPU, other
    ns on the baseline GPU, pipeline segments in chain positions) of one model's records."""
    from ..models import cnn
    idx = [i for i, r in enumerate(records) if r["kind"] != "other"]
    pos = {i: j for j, i in enumerate(idx)}
    nodes = [node_times(records[i]) for i in idx]
    rows = [node_times(records[i], "rows")[0] for i in idx]
    plus = [node_times(records[i], config="newton+")[0] for i in idx]
    other_co = sum(r["cogpu_ns"] for r in records if r["kind"] == "other")
    other_gpu = sum(r["gpu_ns"] for r in records if r["kind"] == "other")
    segs = []
    table = model_table(model)
    for p in cnn.find_patterns(table):
        members = [i for i in range(p.start, p.start + p.length) if records[i]["kind"] != "other"]
        segs.append((pos[members[0]], len(members)))
    return nodes, rows, idx, other_co, other_gpu, sorted(set(segs)), plus


def run_modes(model: str, records: list[dict], modes=MODES, stages: int = STAGES, kind: str = "conv") -> dict:
    """{mode: {total_ns, conv_ns, plan}} and the GPU baseline {gpu_ns, gpu_conv_ns} of one model.
    conv_ns: the plan's time of the PIM-candidate CONV nodes (a pipelined segment holding one
    counts whole, its DW node included); the baseline's the same nodes on all 32 channels.
    kind: the node kind conv_ns counts ("fc" for BERT's FC layers)."""
    from ..search.mixed import execution_mode_search
    nodes, rows, idx, other_co, other_gpu, segs, plus = chain(model, records)
    out = {"GPU": dict(total_ns=sum(r["gpu_ns"] for r in records))}
    for mode in modes:
        flags = MODE_FLAGS[mode]
        # pipelined chunks are row slices (their row variant); MD-DP takes each node's better split;
        # Newton+ runs whole layers on its own configuration (one buffer, no hiding)
        chain_nodes = plus if mode == "Newton+" else [nd for nd, _ in nodes]
        plan = execution_mode_search(chain_nodes, stages=stages, segments=segs, pipe_nodes=rows, **flags)
        conv_segs, conv_ns, base_conv = set(), 0.0, 0.0
        for j, m in enumerate(plan.nodes):
            r = records[idx[j]]
            seg = m.segment or (j, 1)
            if r["kind"] == kind and seg not in conv_segs:
                conv_segs.add(seg)
                conv_ns += m.segment_ns
                base_conv += sum(records[idx[k]]["gpu_ns"] for k in range(seg[0], seg[0] + seg[1]))
        out[mode] = dict(total_ns=plan.total_ns + other_co, conv_ns=conv_ns, plan=plan)
        out["GPU"]["conv_" + mode] = base_conv
    return out


def pim_energy(op, shapes, backend, placement: str) -> dict:
    """The energy of the PIM program `pim_time` picks for `op` with `placement` in the banks
    ("filter"): the draft lowered (filter resident) and simulated (`sim.cycles` on the fork's
    controller, refresh included).  {"ns": `pim_time`'s (the time cache's figure), "pj":
    CycleReport.energy_pj, "sim_ns": its simulated DRAM time (the host merge left out), "knobs"}."""
    from ..lower import lower
    from ..sim.cycles import cycles
    mk = {v: k for k, v in PLACEMENTS.items()}[placement]
    ns, knobs, draft = pim_time(op, shapes, backend, matrix=mk)
    if draft is None:
        raise ValueError(f"pim_energy: no packed draft with the {placement} in the banks")
    rep = cycles(lower(op, draft, backend, shapes, resident=(1,), matrix=mk), backend)
    return dict(ns=float(ns), pj=float(rep.energy_pj), knobs=knobs,
                sim_ns=float(rep.total_cycles - rep.merge) * float(backend.timing.tCK))


def gpu_dynamic_pj(op, shapes, host) -> float:
    """Dynamic pJ of `op` on the GPU `host` (`sim.host.host_energy` without static power, which
    `energy_modes` charges over the whole run)."""
    from ..sim.host import host_energy
    return host_energy(op, host, shapes, 2, ns=0.0)


def other_node_pj(host, row) -> float:
    """Dynamic pJ of a non-contraction node: the bytes `other_node_ns` streams, FLOP / 2 MACs (AttAcc
    charges its elementwise layers flops / 2 x alu), a register access per byte (AttAcc)."""
    from ..hw.gpu import gpu_energy_pj
    b = float(row["in_bytes"] + row["out_bytes"])
    return gpu_energy_pj(host, b, float(row["flops"]) / 2.0, 0.0, reg_accesses=b)


def _bound_index(pim, i: int) -> int:
    """The share whose program gives `pim_bound(pim)[i]`: the first k <= i (k: larger PIM shares)
    with the smallest time -- its program is what runs (padded) at share index i."""
    p = np.asarray(pim, np.float64)[:i + 1]
    return int(np.nanargmin(p)) if np.isfinite(p).any() else i


def energy_model(model: str, records: list[dict], memo: dict | None = None, log=print) -> dict:
    """Energy of the GPU baseline and of every mode's plan (`run_modes`, time-optimal; energy
    plays no part in the choice) of one model at PIM_CHANNELS.

    Per node: GPU work = `gpu_dynamic_pj` of the op or share it runs (non-contraction nodes
    `other_node_pj`; a channel split's output copy as a copy kernel), PIM work = `pim_energy` of the
    program behind the plan's time (a share capped by a larger one's time runs that share's
    program, `pim_bound`), x stages for a pipelined chunk.  Static power: the GPU host's
    `static_power_w` x the run's end-to-end time (the GPU idles while PIM works); PIM's
    background power is not modelled (Energy has no such field).
    Returns {"GPU": {...}, mode: {...}} with total_ns, gpu_pj, pim_pj, static_pj, pj (their
    sum), "pim_items": {item key "name|config|split var|PIM share|placement": pim_energy record
    (+ "cached_ns", the time cache's figure)} and "whole_layers": {candidate name: gpu_pj (dynamic,
    beside PIM), gpu_ns, per configuration its whole-layer PIM pJ and ns}."""
    from ..hw.gpu import gpu_energy_pj
    from ..search.mixed import RATIOS, share_builder
    memo = {} if memo is None else memo
    kind = "fc" if model in BERT_MODELS else "conv"
    backends = {c: backend_for(c, gpu=GPU) for c in CONFIGS}
    sysm = backends[PIMFLOW_CONFIG].system
    gpu, cogpu = sysm.gpu, sysm.cogpu
    table = model_table(model).to_dict("records")
    res = run_modes(model, records, kind=kind)
    nodes, rows, idx, *_ = chain(model, records)
    items: dict = {}
    t0 = time.perf_counter()

    def pim_item(row, op, shapes, config, var, share, placement, cached_ns):
        key = layer_key(row)
        ik = f"{row['name']}|{config}|{var}|{share:.1f}|{placement}"
        mk = (key, config, var, round(share, 2), placement)
        if mk not in memo:
            be = backends[config]
            if share >= 1.0:
                memo[mk] = pim_energy(op, shapes, be, placement)
            else:
                wk = (key, config, "whole", 1.0, placement)
                if wk not in memo:
                    memo[wk] = pim_energy(op, shapes, be, placement)
                o, sh = share_builder(op, var)(float(share))      # `share` of the iterations
                memo[mk] = pim_energy(o, sh, be, placement)
        rec = {k: v for k, v in memo[mk].items() if k != "knobs"}
        if not np.isclose(rec["ns"], float(cached_ns), rtol=1e-9, atol=0.0):
            # the energy must be that of the program behind the plan's time, or it describes another plan
            raise ValueError(f"{ik}: the draft picked again times {rec['ns']:,.1f} ns, the time cache says "
                             f"{float(cached_ns):,.1f} ns: recompute the time cache (python experiments/pimflow.py "
                             "--recompute) before --energy")
        items[ik] = dict(rec, cached_ns=float(cached_ns))
        return rec["pj"]

    def pim_share(row, rec, op, shapes, var, i):
        """pJ of the PIM part at GPU ratio index i of split variant `var` (Newton++)."""
        v = rec["variants"][var]
        k = _bound_index(v["pim"], i)
        share = float(np.round(1.0 - RATIOS[k], 2))
        return pim_item(row, op, shapes, PIMFLOW_CONFIG, v["var"] if share < 1 else "whole", share,
                        v["matrix"][k], v["pim"][k])

    other_dyn = sum(other_node_pj(gpu, row) for row, r in zip(table, records) if r["kind"] == "other")
    ops = {}
    base_dyn = other_dyn
    for i in idx:
        ops[i] = layer_op(table[i])
        base_dyn += gpu_dynamic_pj(*ops[i], gpu)
    P = float(np.asarray(gpu.static_power_w))
    out = {"GPU": dict(total_ns=res["GPU"]["total_ns"], gpu_pj=base_dyn, pim_pj=0.0,
                       static_pj=P * res["GPU"]["total_ns"] * 1e3)}
    for mode in MODES:
        plan = res[mode]["plan"]
        g_pj, p_pj = other_dyn, 0.0
        for j, m in enumerate(plan.nodes):
            i = idx[j]
            rec, row = records[i], table[i]
            op, shapes = ops[i]
            if m.mode == "gpu":
                g_pj += gpu_dynamic_pj(op, shapes, cogpu)
            elif m.mode == "pim":
                config = "newton+" if mode == "Newton+" else PIMFLOW_CONFIG
                p_pj += pim_item(row, op, shapes, config, "whole", 1.0, rec[config]["matrix"], rec[config]["ns"])
            elif m.mode == "md-dp":
                name = nodes[j][1]
                v = rec["variants"][name]
                ri = int(round(m.ratio * 10))
                o, sh = share_builder(op, v["var"])(float(m.ratio))
                g_pj += gpu_dynamic_pj(o, sh, cogpu)
                if name == "channels":         # the output copy `layer_times` charges (merge_ns)
                    b = 2.0 * float(row["out_bytes"])
                    g_pj += gpu_energy_pj(cogpu, b, 0.0, 0.0, reg_accesses=b)
                p_pj += pim_share(row, rec, op, shapes, name, ri)
            elif m.mode == "pipeline":
                share = 1.0 / STAGES
                if m.device == "pim":       # the PIM chunk: GPU ratio 1 - share of its row variant
                    p_pj += STAGES * pim_share(row, rec, op, shapes, "rows", int(round((1.0 - share) * 10)))
                else:
                    var = rec["variants"]["rows"]["var"] if rec.get("variants") else \
                        (rec.get("gpu_rows") or {}).get("var")
                    if var is None:
                        raise ValueError(f"{model} {rec['name']}: a pipelined GPU node without row shares")
                    o, sh = share_builder(op, var)(share)
                    g_pj += STAGES * gpu_dynamic_pj(o, sh, cogpu)
            else:
                raise ValueError(f"energy_model: unknown node mode {m.mode!r}")
        tot = res[mode]["total_ns"]
        out[mode] = dict(total_ns=tot, gpu_pj=g_pj, pim_pj=p_pj, static_pj=P * tot * 1e3)
    for v in out.values():
        v["pj"] = v["gpu_pj"] + v["pim_pj"] + v["static_pj"]
    # every candidate wholly on PIM under each configuration (its faster placement) beside its
    # dynamic GPU energy on the GPU-only channels: the per-layer comparison no plan choice colours
    whole = {}
    for i in idx:
        rec = records[i]
        if not rec.get("variants"):
            continue
        op, shapes = ops[i]
        w = dict(gpu_pj=gpu_dynamic_pj(op, shapes, cogpu), gpu_ns=rec["cogpu_ns"])
        for config in CONFIGS:
            w[config] = pim_item(table[i], op, shapes, config, "whole", 1.0, rec[config]["matrix"], rec[config]["ns"])
            w[config + "_ns"] = rec[config]["ns"]
        whole[rec["name"]] = w
    out["whole_layers"] = whole
    out["pim_items"] = items
    log(f"  {model}: energy of {len(MODES)} modes, {len(items)} PIM programs simulated "
        f"({time.perf_counter() - t0:.0f} s)")
    return out
