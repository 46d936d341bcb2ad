"""PIMFlow (CNNs on a GPU + PIM memory) reproduced on pimjax's models: Fig. 9, Table 2, Fig. 12, Fig. 13.

    python experiments/pimflow.py                  # use / extend the cache, print the tables
    python experiments/pimflow.py --energy         # also the Fig. 12 energy cache (from the time cache)
    python experiments/pimflow.py --recompute      # recompute every layer (a few minutes here)
    python experiments/pimflow.py --validate 4     # also check the PIM time on 4 layers against lowering +
                                                   #   full simulation, and against pimjax's own search

System (`backend_for(config, P, gpu)` = `hw.presets.newton_config(config, channels=P, total_channels=32,
simulator="pimflow", gpu=gpu)`, PIMFlow §5 / Table 1): a 32-channel GDDR6 memory, P of the channels
PIM-enabled (Newton units) and timed by PIMFlow's own Ramulator fork's controller
(`backends/newton/fork.py`), the RTX 2060 beside PIM on the 32 - P GPU-only channels (`System.cogpu`);
the GPU baseline runs on all 32 channels (`System.gpu`).  Two GPU models (`GPU_BASELINES`, each its own
cache entry): "pimflow", PIMFlow's Accel-Sim RTX 2060 (`hw.host.pimflow_rtx2060`, the default of the
figures, `GPU`), and pimjax's "occupancy" model.  config: PIMFlow's Newton++ (4 global buffers + GWRITE
latency hiding, which needs the GPU-only channels) for every mode but Newton+, whose column uses Newton+
(one buffer, no hiding), as the paper's Fig. 9.

Per layer of each model (`pimjax.models.cnn.cnn_layers`, 224 x 224, batch 1, fp16):

* GPU time: the layer's op (a CONV / DW CONV / FC traced alone with its stride and padding) on the
  GPU model (`sim.host.host_time`; on "pimflow" as its per-layer profile: `profile_layout_ns`),
  every share of its output rows (and of its output channels) on the concurrent GPU, the whole op on
  the baseline GPU; other nodes (activations, adds, pools) stream their bytes (`hw.gpu.elementwise_ns`;
  on "pimflow" those TVM fuses into a product cost their extra bytes, `fused_into_product`).
* PIM time (`pim_time`): every share of a PIM-candidate layer as PIMFlow's artifact runs it -- its
  packed mapping (`backends/newton/packed.py`: the filter resident in the banks, output pixels
  packed per buffer load, channel groups), every channel-group choice timed exactly on the fork's
  controller (`packed.stream_cycles`: the slowest channel's DRAM cycles, the artifact's figure, no
  host merge) and the fastest kept.  `reference.py` / `experiments/pimflow_reference.py` hold this
  mapping and controller to the artifact's own cycles (`../shared/reference/pimflow.csv`: every row
  within 0.22 %).  `validate` checks `pim_time` against lowering + full simulation of its draft and
  compares it with pimjax's own search (tilings and both placements).
* MD-DP splits: along output rows (PIMFlow §4.3.2: contiguous NHWC slices, the halo rows read
  by both parts, no merge copy) and along output channels (the concatenation along C is not
  contiguous in NHWC: charged one copy of the output on the concurrent GPU); per node the variant
  whose best split is faster (`search.mixed.choose_split`); pipelined nodes use the row times
  (PIMFlow's pipeline chunks are row slices).

Modes (`search.mixed.execution_mode_search` = Algorithm 1 on the chain of CONV / DW / FC nodes,
other nodes on the concurrent GPU in between): Newton+ (whole layers on Newton+, PIM where faster), PIMFlow-md
(MD-DP in 10 % steps), PIMFlow-pl (pipelining of `cnn.find_patterns`' 1x1-DW, DW-1x1, 1x1-DW-1x1
subgraphs, 2 stages) and PIMFlow (both); Newton++ (whole layers, like Newton+, on Newton++).
BERT-base (PIMFlow §6.4) at 1 x 3 and 1 x 64 tokens: `bert`.

Fig. 12 (energy; `--energy`, `compute_energy` -> `fig12`): the time-optimal plans above, their energy.
GPU work: `hw.gpu.gpu_energy_pj` on the bytes the GPU time model counts, constants in the GPU's
`HostModel` (AttAcc's GPU ENERGY_TABLE; its HBM memory path reused for GDDR6, an assumption); PIM
work: the program behind each plan's PIM time (the same draft, its time checked equal to the time
cache's) lowered and simulated (`CycleReport.energy_pj`, the preset's per-command energies).  GPU
static power: `HostModel.static_power_w` x each run's end-to-end time, 0 by default (no source gives
the RTX 2060's; PIMFlow's AccelWattch includes it; `breakeven_static_w` gives the static power at
which each mode's energy equals the GPU's).  PIM background power is not modelled.

Caches: experiments/data/pimflow_layers.json (JSON; keyed by model, PIM channel count and GPU model),
and experiments/data/pimflow_energy.json (the energies at 16 PIM channels on PIMFlow's GPU, from the
first).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

CACHE = os.path.join(HERE, "data", "pimflow_layers.json")
MODELS = ("mobilenet-v2", "efficientnet-b0", "mnasnet1_0", "resnet-50", "vgg-16")
LABELS = {"mobilenet-v2": "MBNetV2", "efficientnet-b0": "ENetB0", "mnasnet1_0": "MnasNet",
          "resnet-50": "ResNet50", "vgg-16": "VGG16"}
PIM_CHANNELS = 16                     # PIMFlow §6: 16 PIM-enabled of 32
TOTAL_CHANNELS = 32
FIG13_CHANNELS = (8, 16, 24)          # PIM channels of 32 (Fig. 13 sweeps the division)
FIG13_MODELS = ("efficientnet-b0", "resnet-50")   # the two models Fig. 13's text discusses
STAGES = 2                            # pipeline stages (PIMFlow §4.2.1's example)
MODES = ("Newton+", "Newton++", "PIMFlow-md", "PIMFlow-pl", "PIMFlow")
MODE_FLAGS = {"Newton+": dict(md_dp=False, pipeline=False), "Newton++": dict(md_dp=False, pipeline=False),
              "PIMFlow-md": dict(md_dp=True, pipeline=False),
              "PIMFlow-pl": dict(md_dp=False, pipeline=True), "PIMFlow": dict(md_dp=True, pipeline=True)}

# PIMFlow §6.4: BERT-base's FC layers at 1 x 3 and 1 x 64 tokens (`pimjax.models.cnn`, seq_len)
BERT_MODELS = {"bert-base-s3": ("bert-base", dict(seq_len=3)), "bert-base-s64": ("bert-base", dict(seq_len=64))}
LABELS.update({"bert-base-s3": "BERT 1x3", "bert-base-s64": "BERT 1x64"})


def model_table(model: str):
    """`cnn.cnn_layers` of `model` (one of MODELS, or a BERT_MODELS key: BERT-base at a token count)."""
    from pimjax.models import cnn
    name, changes = BERT_MODELS.get(model, (model, {}))
    return cnn.cnn_layers(name, **changes)


# PIMFlow's PIM configurations (`hw.presets.newton_config`): Newton+ (one global buffer, no GWRITE
# latency hiding) for the Newton+ column, Newton++ (4 buffers + hiding) for every other mode (§4.1, §6)
CONFIGS = ("newton+", "newton++")
PIMFLOW_CONFIG = "newton++"
# the operand kept in the banks (`lower(..., matrix=k)`): layer_op traces (x, w), so 0 = the input
# activations, 1 = the filter / FC weight; each layer (and share) takes the faster placement
PLACEMENTS = {1: "filter"}


def backend_for(config: str, pim_channels: int = PIM_CHANNELS, gpu: str | None = None):
    """The PIMFlow system with `pim_channels` PIM channels of 32 under PIM configuration `config`;
    gpu: the GPU model of `System.gpu` / `System.cogpu` (None: `GPU`, "pimflow": PIMFlow's own
    Accel-Sim RTX 2060, `hw.host.pimflow_rtx2060`; "occupancy": the preset's default).  The PIM
    channels run PIMFlow's Ramulator fork's controller (`newton(simulator="pimflow")`)."""
    from pimjax.hw.presets import newton_config
    return newton_config(config, channels=pim_channels, total_channels=TOTAL_CHANNELS, simulator="pimflow",
                         gpu=gpu or GPU)


# PIMFlow's numbers as its text states them (§1, §6.1; `../shared/papers/pimflow-cnn-gpu-pim.txt`).
# Fig. 9's bars are not in the text; only these are.  "speedup s" read as T_gpu / T = 1 + s
# (the paper does not define it; "82 %" as a time reduction would be a 5.6x speedup).
PAPER = {
    "conv_speedup": {"efficientnet-b0": 0.43, "vgg-16": 0.17},        # §6.1: PIMFlow, CONV layers
    "e2e_speedup": {"efficientnet-b0": 0.43 + 0.27, "vgg-16": 0.17 + 0.05},   # "+27 % and +5 % on top"
    "conv_mean": 0.30,          # PIMFlow, CONV layers, mean over the 5 models
    "conv_max_mobile": 0.48,    # "up to 48 % with ENetB0, MBNetV2 and MnasNet"
    "e2e_max": 0.82,            # §1: "up to 82 %" end to end (model not named)
    "e2e_mean": 0.34,           # §1: "34 % on average" against the GPU
    "mobile_mean": {"PIMFlow-md": 0.38, "PIMFlow-pl": 0.41, "PIMFlow": 0.43},  # §6.1, ENetB0/MBNetV2/MnasNet
    "table2": {0.0: 0.41, 0.1: 0.05, 0.2: 0.06, 0.3: 0.09, 0.4: 0.03, 0.5: 0.10, 0.6: 0.05, 0.7: 0.06,
               0.8: 0.08, 0.9: 0.06, 1.0: 0.0},                                       # Table 2
    "table2_split": 0.58,       # §6.1: "58 % of the PIM-candidate layers are split"
    # §6.4: "for small input (1x3) PIMFlow performs the same as Newton++ ... a 32 % extra speedup
    # over Newton++ for 1x64 input by executing FC layers in the MD-DP mode"
    "bert_over_newtonpp": {"bert-base-s3": 0.0, "bert-base-s64": 0.32},
}


# --------------------------------------------------------------------------- ops of one layer
def layer_op(row):
    """(op, shapes) of one CONV / DW CONV / FC layer of a `cnn_layers` row traced alone:
    NHWC input [1, H, W, C], HWIO weight [K, K, C / groups, F], stride and padding (K - 1) // 2
    as the model; FC: x [W, C] @ w [C, F] (the table reads a 2-D [M, C] as H = 1, W = M)."""
    import jax
    import jax.numpy as jnp
    from jax import lax
    import pimjax
    f16 = jnp.float16
    H, W, C, F, K, s, g = (int(row[k]) for k in ("H", "W", "C", "F", "K", "stride", "groups"))
    if row["kind"] == "fc":
        graph = pimjax.make_graph(lambda x, w: x @ w, jax.ShapeDtypeStruct((W, C), f16),
                                  jax.ShapeDtypeStruct((C, F), f16))
    else:
        p = (K - 1) // 2

        def conv(x, w):
            return lax.conv_general_dilated(x, w, (s, s), [(p, p), (p, p)],
                                            dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=g)
        graph = pimjax.make_graph(conv, jax.ShapeDtypeStruct((1, H, W, C), f16),
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
    from pimjax.backends.newton.packed import packed_drafts, stream_cycles
    from pimjax.errors import PimCompileError
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


PRODUCT_KINDS = ("conv", "dwconv", "fc")
FUSABLE_OPS = ("act", "add", "mul")     # elementwise / broadcast nodes TVM's FuseOps joins to a product's epilogue


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


def _other_ns(host, row, fused_from: dict | None = None) -> float:
    """A non-contraction node on the GPU: its bytes streamed (pools reduce their window).
    fused_from: on the "pimflow" GPU model, the row of the node whose epilogue kernel this node
    runs in (`fused_into_product`): no kernel of its own, only the bytes it adds to that kernel
    (what it reads and writes beyond the fused chain's value, read and written once there);
    ignored on the other models."""
    from pimjax.hw.gpu import elementwise_ns
    if fused_from is not None and host.model == "pimflow":
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
    from pimjax.search.mixed import RATIOS, share_builder
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


def _layer_key(row, pim_channels: int = PIM_CHANNELS) -> tuple:
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
    from pimjax.hw.gpu import elementwise_ns
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
    from pimjax.sim.host import host_time
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
    from pimjax.hw.gpu import elementwise_ns
    from pimjax.search.mixed import RATIOS, share_builder, split_vars
    from pimjax.sim.host import host_time
    gpu = gpu or GPU
    backend = backend_for(PIMFLOW_CONFIG, pim_channels, gpu)
    plus = backend_for("newton+", pim_channels, gpu)
    memo = {} if memo is None else memo
    table = model_table(model)
    rows = table.to_dict("records")
    fused = fused_into_product(rows) if gpu == "pimflow" else {}
    out = []
    t0 = time.perf_counter()
    for i, row in enumerate(rows):
        rec = dict(name=row["name"], kind=row["kind"], op=row["op"], K=int(row["K"]),
                   groups=int(row["groups"]), candidate=bool(row["pim_candidate"]))
        if row["kind"] == "other":
            src = rows[fused[i]] if i in fused else None
            rec["gpu_ns"] = _other_ns(backend.system.gpu, row, src)
            rec["cogpu_ns"] = _other_ns(backend.system.cogpu, row, src)
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
            key = _layer_key(row, pim_channels)
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


# --------------------------------------------------------------------------- the GPU baselines
GPU_BASELINES = ("occupancy", "pimflow")    # pimjax's default GPU model, PIMFlow's Accel-Sim RTX 2060
GPU = "pimflow"                             # the GPU the figures use unless told (`gpu=`): PIMFlow's own
INPUT_HW = 224                              # the models' input (cnn_layers' default resolution)


def gpu_totals(models=MODELS, gpus=GPU_BASELINES) -> "pd.DataFrame":
    """The GPU-only baseline of each model under each GPU model (no PIM work: seconds, not the
    layer cache's minutes).  One row per (model, gpu) with, in µs, on all 32 channels
    (`System.gpu`, the "vs GPU" baseline) and on the 16 GPU-only channels beside PIM
    (`System.cogpu`):

    * conv_us_32 / conv_us_16: the CONV / DW CONV / FC nodes as `layer_times` times them (on
      "pimflow" each as PIMFlow's per-layer profile: `profile_layout_ns` included) -- PIMFlow's
      `--conv_only` baseline (its README: 1 064 µs for MobileNet-V2 at 1 365 MHz);
    * e2e_us_32 / e2e_us_16: every node, as one network run (on "pimflow": the network's NCHW
      input converted once instead of every layer's, activations / adds / SE scales fused into
      their product's epilogue, `fused_into_product`) -- PIMFlow's "GPU CYCLE" (1 059 µs);
    * layers_us_32: every node as `layer_times` records them (`run_modes`' "GPU" total);
    * conv_16_over_32 / e2e_16_over_32: the slowdown of the GPU beside PIM (half the channels).

    gpus: GPU model names `backend_for` takes ("occupancy", "pimflow", "roofline", "dcc")."""
    import pandas as pd
    from pimjax.hw.gpu import elementwise_ns
    from pimjax.sim.host import host_time
    out, ops = [], {}
    for model in models:
        rows = model_table(model).to_dict("records")
        for g in gpus:
            system = backend_for(PIMFLOW_CONFIG, PIM_CHANNELS, g).system
            fused = fused_into_product(rows) if g == "pimflow" else {}
            rec = dict(model=model, gpu=g, gpu_name=system.gpu.name)
            for ch, host in ((TOTAL_CHANNELS, system.gpu), (TOTAL_CHANNELS - PIM_CHANNELS, system.cogpu)):
                conv = net = layers = 0.0
                for i, row in enumerate(rows):
                    if row["kind"] == "other":
                        t = _other_ns(host, row, rows[fused[i]] if i in fused else None)
                        net, layers = net + t, layers + t
                        continue
                    key = _layer_key(row) + (row["kind"], int(row["groups"]))
                    if key not in ops:
                        ops[key] = layer_op(row)
                    op, shapes = ops[key]
                    t = float(host_time(op, host, shapes, 2))
                    prof = profile_layout_ns(host, op, shapes)
                    conv, net, layers = conv + t + prof, net + t, layers + t + prof
                if g == "pimflow":          # the network's input, NCHW -> NHWC once (TVM ConvertLayout)
                    n = 3 * INPUT_HW * INPUT_HW
                    net += float(elementwise_ns(host, 4.0 * n, 0.0, outputs=n, kind="copy"))
                rec[f"conv_us_{ch}"], rec[f"e2e_us_{ch}"] = conv / 1e3, net / 1e3
                if ch == TOTAL_CHANNELS:
                    rec["layers_us_32"] = layers / 1e3
            rec["conv_16_over_32"] = rec["conv_us_16"] / rec["conv_us_32"]
            rec["e2e_16_over_32"] = rec["e2e_us_16"] / rec["e2e_us_32"]
            out.append(rec)
    return pd.DataFrame(out)


# --------------------------------------------------------------------------- the cache
def load_cache(path: str = CACHE) -> dict:
    """The cache: {"meta": settings, "layers": {cache_key: [layer_times records]}, "validation":
    [validate records]} (empty when the file does not exist)."""
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    return {"meta": {}, "layers": {}}


def save_cache(data: dict, path: str = CACHE) -> None:
    """Write the cache as JSON (through a temporary file: a killed run leaves the old one whole)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=0, sort_keys=True)
    os.replace(tmp, path)


def cache_key(model: str, pim_channels: int, gpu: str | None = None) -> str:
    """The cache's key of one model on the system with `pim_channels` PIM channels of 32, its GPU
    timed by GPU model `gpu` (default GPU: PIMFlow's own)."""
    return f"{model}@{pim_channels}/{gpu or GPU}"


def compute(models=MODELS, configs=None, recompute: bool = False, path: str = CACHE, log=print,
            gpus=GPU_BASELINES) -> dict:
    """Fill the cache: every model and BERT_MODELS at PIM_CHANNELS (both split variants) and
    FIG13_MODELS at FIG13_CHANNELS (row splits only), each under every GPU model of `gpus`;
    saved after each model."""
    data = load_cache(path)
    meta = dict(pim="PIMFlow's packed mapping (every channel-group choice), filter resident, timed by its "
                    "Ramulator fork's controller (newton(simulator='pimflow'))",
                total_channels=TOTAL_CHANNELS, configs=dict(plus="newton+", pimflow=PIMFLOW_CONFIG),
                gpus=list(GPU_BASELINES), layout=3,
                note="ns; gpu/pim lists over search.mixed.RATIOS (GPU share 0..1), PIM shares on "
                     f"{PIMFLOW_CONFIG}; newton+: the whole layer on Newton+; gpu_rows: a GPU-only node's row "
                     "shares beside PIM; one record list per (model, PIM channels, GPU model)")
    if data["layers"] and data.get("meta") != meta:
        # layers computed under other settings (or an older record layout) must not pass for these
        log(f"{path}: cached under other settings ({data.get('meta')}): every layer is recomputed")
        data["layers"] = {}
    data["meta"] = meta
    configs = configs if configs is not None else \
        [(m, PIM_CHANNELS, ("rows", "channels")) for m in tuple(models) + tuple(BERT_MODELS)] + \
        [(m, c, ("rows",)) for m in FIG13_MODELS for c in FIG13_CHANNELS if c != PIM_CHANNELS]
    memo: dict = {}                        # PIM times by layer shape: shared by the GPU models
    for gpu in gpus:
        for model, ch, variants in configs:
            k = cache_key(model, ch, gpu)
            if k in data["layers"] and not recompute:
                continue
            data["layers"][k] = layer_times(model, ch, memo, variants=variants, log=log, gpu=gpu)
            save_cache(data, path)
    return data


# --------------------------------------------------------------------------- modes
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
    from pimjax.search.mixed import RATIOS, NodeTimes, choose_split
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
    from pimjax.models import cnn
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
    from pimjax.search.mixed import execution_mode_search
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


def fig9(data: dict, models=MODELS, gpu: str | None = None) -> "pd.DataFrame":
    """Fig. 9: per model and mode, CONV-layer and end-to-end time normalised to the GPU baseline."""
    import pandas as pd
    rows = []
    for m in models:
        recs = data["layers"][cache_key(m, PIM_CHANNELS, gpu)]
        res = run_modes(m, recs)
        for mode in MODES:
            rows.append(dict(model=LABELS[m], mode=mode,
                             conv=res[mode]["conv_ns"] / res["GPU"]["conv_" + mode],
                             e2e=res[mode]["total_ns"] / res["GPU"]["total_ns"]))
    return pd.DataFrame(rows)


def fig9_vs_paper(df) -> "pd.DataFrame":
    """PIMFlow's end-to-end and CONV speedups (T_gpu / T - 1), ours beside the paper's where its
    text gives them; miss_pp: ours - paper in percentage points (NaN where the paper is silent)."""
    import pandas as pd
    inv = {v: k for k, v in LABELS.items()}
    rows = []
    for _, r in df[df["mode"] == "PIMFlow"].iterrows():
        m = inv[r["model"]]
        ours_e2e, ours_conv = 1.0 / r["e2e"] - 1.0, 1.0 / r["conv"] - 1.0
        pe, pc = PAPER["e2e_speedup"].get(m, np.nan), PAPER["conv_speedup"].get(m, np.nan)
        rows.append(dict(model=r["model"], ours_e2e=ours_e2e, paper_e2e=pe, miss_e2e_pp=100 * (ours_e2e - pe),
                         ours_conv=ours_conv, paper_conv=pc, miss_conv_pp=100 * (ours_conv - pc)))
    out = pd.DataFrame(rows)
    mean = dict(model="mean", ours_e2e=out["ours_e2e"].mean(), paper_e2e=PAPER["e2e_mean"],
                ours_conv=out["ours_conv"].mean(), paper_conv=PAPER["conv_mean"])
    mean["miss_e2e_pp"] = 100 * (mean["ours_e2e"] - mean["paper_e2e"])
    mean["miss_conv_pp"] = 100 * (mean["ours_conv"] - mean["paper_conv"])
    return pd.concat([out, pd.DataFrame([mean])], ignore_index=True)


def table2(data: dict, models=MODELS, mode: str = "PIMFlow-md", gpu: str | None = None) -> "pd.DataFrame":
    """Table 2: the share of the PIM-candidate layers (all models pooled) at each GPU ratio of
    `mode`'s plan, beside the paper's."""
    import pandas as pd
    from pimjax.search.mixed import RATIOS
    counts = {float(r): 0 for r in RATIOS}
    n = 0
    for m in models:
        recs = data["layers"][cache_key(m, PIM_CHANNELS, gpu)]
        res = run_modes(m, recs, modes=(mode,))
        _, _, idx, *_ = chain(m, recs)
        for j, node in enumerate(res[mode]["plan"].nodes):
            if recs[idx[j]]["candidate"]:
                counts[float(node.ratio)] += 1
                n += 1
    return pd.DataFrame(dict(gpu_ratio=list(counts), ours=[c / max(n, 1) for c in counts.values()],
                             paper=[PAPER["table2"][r] for r in counts]))


def split_variants(data: dict, models=MODELS, gpu: str | None = None) -> "pd.DataFrame":
    """Per model: candidate nodes whose best split is along rows / along channels."""
    import pandas as pd
    rows = []
    for m in models:
        recs = data["layers"][cache_key(m, PIM_CHANNELS, gpu)]
        picks = [node_times(r)[1] for r in recs if r.get("variants")]
        rows.append(dict(model=LABELS[m], rows=picks.count("rows"), channels=picks.count("channels")))
    return pd.DataFrame(rows)


def fig13(data: dict, models=FIG13_MODELS, channels=FIG13_CHANNELS, gpu: str | None = None) -> "pd.DataFrame":
    """Fig. 13: end-to-end time normalised to the GPU on all 32 channels, per PIM channel count
    (of 32), for Newton+ and PIMFlow (row splits)."""
    import pandas as pd
    rows = []
    for m in models:
        for c in channels:
            recs = data["layers"].get(cache_key(m, c, gpu))
            if recs is None:
                continue
            recs = [dict(r, variants={"rows": r["variants"]["rows"]}) if r.get("variants") else r for r in recs]
            res = run_modes(m, recs, modes=("Newton+", "PIMFlow"))
            for mode in ("Newton+", "PIMFlow"):
                rows.append(dict(model=LABELS[m], pim_channels=c, gpu_channels=TOTAL_CHANNELS - c, mode=mode,
                                 e2e=res[mode]["total_ns"] / res["GPU"]["total_ns"]))
    return pd.DataFrame(rows)


def bert(data: dict, models=tuple(BERT_MODELS), gpu: str | None = None) -> "pd.DataFrame":
    """PIMFlow §6.4 on BERT-base: per token count, the FC layers' and the end-to-end time of each
    mode normalised to the GPU, and PIMFlow's extra speedup over Newton++ (T_Newton++ / T_PIMFlow
    - 1; the paper: 0 at 1 x 3, 32 % at 1 x 64)."""
    import pandas as pd
    rows = []
    for m in models:
        recs = data["layers"].get(cache_key(m, PIM_CHANNELS, gpu))
        if recs is None:
            continue
        res = run_modes(m, recs, kind="fc")
        row = dict(model=LABELS[m])
        for mode in MODES:
            row[f"fc {mode}"] = res[mode]["conv_ns"] / res["GPU"]["conv_" + mode]
            row[f"e2e {mode}"] = res[mode]["total_ns"] / res["GPU"]["total_ns"]
        row["PIMFlow over Newton++ (fc)"] = res["Newton++"]["conv_ns"] / res["PIMFlow"]["conv_ns"] - 1.0
        row["PIMFlow over Newton++ (e2e)"] = res["Newton++"]["total_ns"] / res["PIMFlow"]["total_ns"] - 1.0
        row["paper: PIMFlow over Newton++"] = PAPER["bert_over_newtonpp"][m]
        rows.append(row)
    return pd.DataFrame(rows)


def validate(n_layers: int = 4, path: str = CACHE, log=print) -> list[dict]:
    """`pim_time` against lowering + full simulation on `n_layers` small PIM-candidate layers
    (MobileNet-V2's, smallest MACs first), and the artifact's mapping against pimjax's own search:
    est_ns (`pim_time`: the best packed draft by `packed.stream_cycles`), sim_ns (that draft
    lowered and simulated by `sim.cycles` on the fork's controller, the host merge left out as in
    the artifact), tuned_ns (the predict-mode tuner's pick -- its cost model's top 8 tilings, the
    packed drafts, the baseline -- with the filter and with the activations in the banks, the
    faster); rel_err = est / sim - 1, gap = tuned / est - 1 (negative: pimjax's search finds a
    faster program than PIMFlow's mapping).  Stored in the cache's "validation"."""
    from pimjax.lower import lower
    from pimjax.models import cnn
    from pimjax.search.tuner import Tuner
    from pimjax.sim.cycles import cycles
    backend = backend_for(PIMFLOW_CONFIG)
    tck = float(backend.timing.tCK)
    table = cnn.cnn_layers("mobilenet-v2")
    cands = table[table.pim_candidate & (table.kind == "conv")].sort_values("macs")
    out = []
    tuner = Tuner()
    for row in cands.head(n_layers).to_dict("records"):
        op, shapes = layer_op(row)
        t0 = time.perf_counter()
        est, _, draft = pim_time(op, shapes, backend)
        t1 = time.perf_counter()
        rep = cycles(lower(op, draft, backend, shapes, resident=(1,), matrix=1), backend)
        sim = float(rep.total_cycles - rep.merge) * tck
        t2 = time.perf_counter()
        tuned = {}
        for k, name in ((1, "filter"), (0, "input")):
            ch = tuner.choose(op, backend, shapes, resident=(1,), matrix=k)
            tuned[name] = float(ch.report.total_cycles - ch.report.merge) * tck
        win = min(tuned, key=tuned.get)
        t3 = time.perf_counter()
        rec = dict(name=row["name"], shape=[int(row[k]) for k in ("H", "W", "C", "F", "K", "stride")],
                   est_ns=est, sim_ns=sim, tuned_ns=tuned[win], tuned_matrix=win, rel_err=est / sim - 1.0,
                   gap=tuned[win] / est - 1.0, est_s=t1 - t0, sim_s=t2 - t1, tune_s=t3 - t2)
        log(f"  {rec['name']} {rec['shape']}: PIMFlow's mapping {est:,.0f} ns, lowered and simulated {sim:,.0f} ns "
            f"({100 * rec['rel_err']:+.2f} %); pimjax's search {tuned[win]:,.0f} ns with the {win} in the banks "
            f"({100 * rec['gap']:+.1f} %); {rec['est_s']:.2f} s vs {rec['sim_s'] + rec['tune_s']:.0f} s")
        out.append(rec)
    data = load_cache(path)
    data["validation"] = out
    save_cache(data, path)
    return out


# --------------------------------------------------------------------------- energy (Fig. 12)
ENERGY_CACHE = os.path.join(HERE, "data", "pimflow_energy.json")
ENERGY_MODELS = MODELS + tuple(BERT_MODELS)
# PIMFlow §6.1 "Energy consumption": energy saved against the GPU baseline, the mean over the five
# CNNs (Fig. 12's bars are not in the text), and Newton++ against Newton+
PAPER_ENERGY = {"saving_vs_gpu": {"Newton++": 0.18, "PIMFlow": 0.26}, "newtonpp_vs_newtonp": 0.17}


def pim_energy(op, shapes, backend, placement: str) -> dict:
    """The energy of the PIM program `pim_time` picks for `op` with `placement` in the banks
    ("filter"): the draft lowered (filter resident) and simulated (`sim.cycles` on the fork's
    controller, refresh included).  {"ns": `pim_time`'s (the time cache's figure), "pj":
    CycleReport.energy_pj, "sim_ns": its simulated DRAM time (the host merge left out), "knobs"}."""
    from pimjax.lower import lower
    from pimjax.sim.cycles import cycles
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
    from pimjax.sim.host import host_energy
    return host_energy(op, host, shapes, 2, ns=0.0)


def _other_pj(host, row) -> float:
    """Dynamic pJ of a non-contraction node: the bytes `_other_ns` streams, FLOP / 2 MACs (AttAcc
    charges its elementwise layers flops / 2 x alu), a register access per byte (AttAcc)."""
    from pimjax.hw.gpu import gpu_energy_pj
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
    `_other_pj`; a channel split's output copy as a copy kernel), PIM work = `pim_energy` of the
    program behind the plan's time (a share capped by a larger one's time runs that share's
    program, `pim_bound`), x stages for a pipelined chunk.  Static power: the GPU host's
    `static_power_w` x the run's end-to-end time (the GPU idles while PIM works); PIM's
    background power is not modelled (Energy has no such field).
    Returns {"GPU": {...}, mode: {...}} with total_ns, gpu_pj, pim_pj, static_pj, pj (their
    sum), "pim_items": {item key "name|config|split var|PIM share|placement": pim_energy record
    (+ "cached_ns", the time cache's figure)} and "whole_layers": {candidate name: gpu_pj (dynamic,
    beside PIM), gpu_ns, per configuration its whole-layer PIM pJ and ns}."""
    from pimjax.search.mixed import RATIOS, share_builder
    from pimjax.hw.gpu import gpu_energy_pj
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
        key = _layer_key(row)
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

    other_dyn = sum(_other_pj(gpu, row) for row, r in zip(table, records) if r["kind"] == "other")
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


def compute_energy(models=ENERGY_MODELS, path: str = ENERGY_CACHE, layers_path: str = CACHE,
                   recompute: bool = False, log=print) -> dict:
    """Fill the energy cache (JSON, keyed like the time cache) for `models` at PIM_CHANNELS from
    the time cache's plans; saved after each model.  Entries whose time-cache settings or GPU
    energy constants differ are recomputed."""
    layers = load_cache(layers_path)
    host = backend_for(PIMFLOW_CONFIG, gpu=GPU).system.gpu
    from pimjax.hw.core import HOST_ENERGY_FIELDS
    meta = dict(layers_meta=layers["meta"], stages=STAGES, layout=2,
                gpu_energy={f: float(np.asarray(getattr(host, f))) for f in HOST_ENERGY_FIELDS},
                note="pJ; ns; per mode: gpu_pj (dynamic), pim_pj (simulated programs), static_pj "
                     "(GPU static power x end-to-end time), pj (sum)")
    data = load_cache(path) if os.path.exists(path) else {"meta": {}, "models": {}}
    if data.get("meta") != meta:
        data = {"meta": meta, "models": {}}
    memo: dict = {}
    for m in models:
        k = cache_key(m, PIM_CHANNELS)
        if k in data["models"] and not recompute:
            continue
        data["models"][k] = energy_model(m, layers["layers"][k], memo, log=log)
        save_cache(data, path)
    return data


def fig12(energy: dict, models=ENERGY_MODELS) -> "pd.DataFrame":
    """Fig. 12: per model and mode, the energy normalised to the GPU baseline's (pj / GPU pj),
    with its parts (GPU dynamic, PIM, GPU static) as shares of the baseline's energy."""
    import pandas as pd
    rows = []
    for m in models:
        e = energy["models"].get(cache_key(m, PIM_CHANNELS))
        if e is None:
            continue
        base = e["GPU"]["pj"]
        for mode in ("GPU",) + MODES:
            rows.append(dict(model=LABELS[m], mode=mode, energy=e[mode]["pj"] / base,
                             gpu_dyn=e[mode]["gpu_pj"] / base, pim=e[mode]["pim_pj"] / base,
                             static=e[mode]["static_pj"] / base, time=e[mode]["total_ns"] / e["GPU"]["total_ns"]))
    return pd.DataFrame(rows)


def breakeven_static_w(energy: dict, models=ENERGY_MODELS) -> "pd.DataFrame":
    """The GPU static power (W) at which each mode's energy equals the GPU baseline's:
    P = (E_gpu_dyn - E_mode_dyn) / (T_mode - T_gpu) (pJ / ns = 1e3 W; static power accrues over each
    run's end-to-end time).  Below P a slower mode that saves dynamic energy saves energy; above P
    a faster mode that spends more saves energy; NaN where no static power makes them equal (the
    mode costs more dynamic energy and more time, or less of both)."""
    import pandas as pd
    rows = []
    for m in models:
        e = energy["models"].get(cache_key(m, PIM_CHANNELS))
        if e is None:
            continue
        g = e["GPU"]
        row = dict(model=LABELS[m])
        for mode in MODES:
            d_e = g["gpu_pj"] - (e[mode]["gpu_pj"] + e[mode]["pim_pj"])
            d_t = e[mode]["total_ns"] - g["total_ns"]
            p = d_e / d_t / 1e3 if d_t != 0 else float("nan")
            row[mode] = p if p > 0 else float("nan")
        rows.append(row)
    return pd.DataFrame(rows)


def layer_energy(energy: dict, models=ENERGY_MODELS) -> "pd.DataFrame":
    """Per model, the PIM-candidate layers wholly on PIM against the GPU beside PIM (dynamic
    energy): the median per-layer Newton++ / GPU and Newton++ / Newton+ energy ratios, the summed
    ones, and how many layers Newton++ runs on less energy than Newton+."""
    import pandas as pd
    rows = []
    for m in models:
        e = energy["models"].get(cache_key(m, PIM_CHANNELS))
        if e is None or not e.get("whole_layers"):
            continue
        w = pd.DataFrame(e["whole_layers"]).T.astype(float)
        rows.append(dict(model=LABELS[m], candidates=len(w),
                         median_pim_over_gpu=float((w[PIMFLOW_CONFIG] / w.gpu_pj).median()),
                         sum_pim_over_gpu=float(w[PIMFLOW_CONFIG].sum() / w.gpu_pj.sum()),
                         median_npp_over_np=float((w[PIMFLOW_CONFIG] / w["newton+"]).median()),
                         sum_npp_over_np=float(w[PIMFLOW_CONFIG].sum() / w["newton+"].sum()),
                         npp_lower=int((w[PIMFLOW_CONFIG] < w["newton+"]).sum())))
    return pd.DataFrame(rows)


def fig12_vs_paper(df) -> "pd.DataFrame":
    """The text's figures beside ours: the mean (over the five CNNs) energy saving against the GPU
    of Newton++ and PIMFlow (1 - E / E_gpu), and Newton++'s saving against Newton+."""
    import pandas as pd
    cnn = df[df.model.isin([LABELS[m] for m in MODELS])]
    piv = cnn.pivot(index="model", columns="mode", values="energy")
    rows = [dict(figure=f"{mode} saving vs GPU (mean of 5 CNNs)", ours=float((1.0 - piv[mode]).mean()),
                 paper=PAPER_ENERGY["saving_vs_gpu"][mode]) for mode in ("Newton++", "PIMFlow")]
    rows.append(dict(figure="Newton++ saving vs Newton+ (mean of 5 CNNs)",
                     ours=float((1.0 - piv["Newton++"] / piv["Newton+"]).mean()),
                     paper=PAPER_ENERGY["newtonpp_vs_newtonp"]))
    out = pd.DataFrame(rows)
    out["miss_pp"] = 100 * (out.ours - out.paper)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--recompute", action="store_true", help="recompute every cached model")
    ap.add_argument("--models", nargs="*", default=list(MODELS))
    ap.add_argument("--validate", type=int, default=0, help="layers to check against full simulation")
    ap.add_argument("--no-fig13", action="store_true", help="skip the channel sweep's extra configs")
    ap.add_argument("--no-bert", action="store_true", help="skip BERT-base (PIMFlow §6.4)")
    ap.add_argument("--energy", action="store_true", help="also fill the Fig. 12 energy cache (simulates "
                    "the PIM programs of every mode's plan)")
    a = ap.parse_args(argv)
    import pandas as pd
    pd.set_option("display.width", 200)
    configs = [(m, PIM_CHANNELS, ("rows", "channels")) for m in a.models + ([] if a.no_bert else list(BERT_MODELS))]
    if not a.no_fig13:
        configs += [(m, c, ("rows",)) for m in FIG13_MODELS for c in FIG13_CHANNELS if c != PIM_CHANNELS]
    data = compute(a.models, configs, a.recompute)
    if a.validate:
        validate(a.validate)
    for gpu in GPU_BASELINES:
        models = [m for m in MODELS if cache_key(m, PIM_CHANNELS, gpu) in data["layers"]]
        print(f"== GPU model {gpu!r}")
        df = fig9(data, models, gpu)
        print(df.pivot(index="model", columns="mode", values=["conv", "e2e"]).round(3))
        print(fig9_vs_paper(df).round(3))
        print(table2(data, models, gpu=gpu).round(3))
        print(split_variants(data, models, gpu))
        print(fig13(data, gpu=gpu).round(3))
        print(bert(data, gpu=gpu).round(3).T)
    if a.energy:
        e = compute_energy([m for m in ENERGY_MODELS if cache_key(m, PIM_CHANNELS) in data["layers"]])
        f12 = fig12(e)
        print(f12.pivot(index="model", columns="mode", values="energy").round(3))
        print(fig12_vs_paper(f12).round(3))
        print(layer_energy(e).round(3))
        print(breakeven_static_w(e).round(1))


if __name__ == "__main__":
    main()
