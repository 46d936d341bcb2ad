"""PIMFlow (CNNs on a GPU + PIM memory) reproduced on pimjax's models: Fig. 9, Table 2, Fig. 12, Fig. 13.

The modelling (layer times, modes, energy: `pim_time`, `layer_times`, `run_modes`, `energy_model`, ...)
is `pimjax.studies.pimflow`; this script fills the caches, prints the tables and compares with the paper.

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
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from pimjax.studies.pimflow import (  # noqa: E402
    BERT_MODELS,
    GPU,
    GPU_BASELINES,
    INPUT_HW,
    MODELS,
    MODES,
    PIM_CHANNELS,
    PIMFLOW_CONFIG,
    STAGES,
    TOTAL_CHANNELS,
    backend_for,
    chain,
    energy_model,
    fused_into_product,
    layer_key,
    layer_op,
    layer_times,
    model_table,
    node_times,
    other_node_ns,
    pim_time,
    profile_layout_ns,
    run_modes,
)

CACHE = os.path.join(HERE, "data", "pimflow_layers.json")
LABELS = {"mobilenet-v2": "MBNetV2", "efficientnet-b0": "ENetB0", "mnasnet1_0": "MnasNet",
          "resnet-50": "ResNet50", "vgg-16": "VGG16"}
FIG13_CHANNELS = (8, 16, 24)          # PIM channels of 32 (Fig. 13 sweeps the division)
FIG13_MODELS = ("efficientnet-b0", "resnet-50")   # the two models Fig. 13's text discusses

LABELS.update({"bert-base-s3": "BERT 1x3", "bert-base-s64": "BERT 1x64"})


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


# --------------------------------------------------------------------------- the GPU baselines


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
                        t = other_node_ns(host, row, rows[fused[i]] if i in fused else None)
                        net, layers = net + t, layers + t
                        continue
                    key = layer_key(row) + (row["kind"], int(row["groups"]))
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
                layout=3,
                note="ns; gpu/pim lists over search.mixed.RATIOS (GPU share 0..1), PIM shares on "
                     f"{PIMFLOW_CONFIG}; newton+: the whole layer on Newton+; gpu_rows: a GPU-only node's row "
                     "shares beside PIM; one record list per (model, PIM channels, GPU model)")
    # the GPU model is in each entry's key: adding one (GPU_BASELINES) keeps the others' entries
    cached_meta = {k: v for k, v in (data.get("meta") or {}).items() if k != "gpus"}
    if data["layers"] and cached_meta != meta:
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


def headline(data: dict, models=MODELS, gpus=("pimflow", "library")) -> "pd.DataFrame":
    """The figures PIMFlow's text gives, the paper's beside ours under each GPU model of `gpus`
    (default: PIMFlow's own simulated RTX 2060 and the measured-checked one): PIMFlow's end-to-end
    and CONV speedups per model where given and their means, the mobile mean, Table 2's split share
    and BERT 1 x 64's extra speedup over Newton++.  miss_pp columns: ours - paper in points."""
    import pandas as pd
    rows = {}
    for gpu in gpus:
        vs = fig9_vs_paper(fig9(data, models, gpu)).set_index("model")
        inv = {LABELS[m]: m for m in models}
        col = {}
        for label, r in vs.iterrows():
            if label == "mean":
                col["PIMFlow e2e speedup, mean"] = (r.paper_e2e, r.ours_e2e)
                col["PIMFlow CONV speedup, mean"] = (r.paper_conv, r.ours_conv)
                continue
            m = inv[label]
            if m in PAPER["e2e_speedup"]:
                col[f"PIMFlow e2e speedup, {label}"] = (r.paper_e2e, r.ours_e2e)
                col[f"PIMFlow CONV speedup, {label}"] = (r.paper_conv, r.ours_conv)
        mobile = [m for m in ("efficientnet-b0", "mobilenet-v2", "mnasnet1_0") if m in models]
        if mobile:
            col["PIMFlow e2e speedup, mobile mean"] = (PAPER["mobile_mean"]["PIMFlow"], float(np.mean(
                [vs.loc[LABELS[m], "ours_e2e"] for m in mobile])))
        t2 = table2(data, models, gpu=gpu)
        col["Table 2: share of candidates split"] = (PAPER["table2_split"],
                                                     float(t2.ours[(t2.gpu_ratio > 0) & (t2.gpu_ratio < 1)].sum()))
        bt = bert(data, ("bert-base-s64",), gpu=gpu)
        if len(bt):
            col["BERT 1 x 64: PIMFlow over Newton++ (e2e)"] = (PAPER["bert_over_newtonpp"]["bert-base-s64"],
                                                               float(bt["PIMFlow over Newton++ (e2e)"].iloc[0]))
        rows[gpu] = col
    names = list(dict.fromkeys(k for col in rows.values() for k in col))
    out = pd.DataFrame({"paper": [next(c[k][0] for c in rows.values() if k in c) for k in names]}, index=names)
    for gpu, col in rows.items():
        out[f"ours ({gpu} GPU)"] = [col[k][1] if k in col else np.nan for k in names]
        out[f"miss_pp ({gpu})"] = 100 * (out[f"ours ({gpu} GPU)"] - out["paper"])
    return out


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


def search_check(models=MODELS, limit: int | None = None, log=print) -> "pd.DataFrame":
    """pimjax's own search against the artifact's mapping on every distinct PIM-candidate CONV of
    `models` (issue 49): artifact_ns, the best packed draft (`pim_time`'s) lowered and simulated
    with the filter resident, its host merge included; pimjax_ns, the tuner's pick (`Tuner.choose`,
    what `pim_jit` runs: its cost model's top 8, the packed drafts, the baseline) with the filter
    resident and either operand in the banks, the faster -- its merge included too.  The artifact's
    own figure leaves the host merge out (`pimflow.csv` is DRAM cycles only); comparing pim_jit's
    total with it is what made four layers look 16-85 % slower.  ratio = pimjax_ns / artifact_ns."""
    import pandas as pd

    from pimjax.lower import lower
    from pimjax.models import cnn
    from pimjax.search.tuner import Tuner
    from pimjax.sim.cycles import cycles
    backend = backend_for(PIMFLOW_CONFIG)
    tck = float(backend.timing.tCK)
    tuner, seen, rows = Tuner(), set(), []
    for m in models:
        table = cnn.cnn_layers(m)
        for row in table[table.pim_candidate & (table.kind == "conv")].to_dict("records"):
            key = tuple(int(row[k]) for k in ("H", "W", "C", "F", "K", "stride", "groups"))
            if key in seen or (limit is not None and len(rows) >= limit):
                continue
            seen.add(key)
            op, shapes = layer_op(row)
            _, _, draft = pim_time(op, shapes, backend)
            if draft is None:
                continue
            art = float(cycles(lower(op, draft, backend, shapes, resident=(1,), matrix=1), backend).total_cycles) * tck
            ours = min(float(tuner.choose(op, backend, shapes, resident=(1,), matrix=k).report.total_cycles) * tck
                       for k in (1, 0))
            rows.append(dict(model=m, layer=row["name"], shape="x".join(map(str, key[:6])), artifact_ns=art,
                             pimjax_ns=ours, ratio=ours / art))
            log(f"  {m} {row['name']} {rows[-1]['shape']}: artifact {art:,.0f} ns, pimjax {ours:,.0f} ns "
                f"({rows[-1]['ratio']:.3f})")
    df = pd.DataFrame(rows)
    log(f"{len(df)} layers, worst pimjax / artifact {df.ratio.max():.3f}, {int((df.ratio > 1.10).sum())} above 1.10")
    return df


# --------------------------------------------------------------------------- energy (Fig. 12)
ENERGY_CACHE = os.path.join(HERE, "data", "pimflow_energy.json")
ENERGY_MODELS = MODELS + tuple(BERT_MODELS)
# PIMFlow §6.1 "Energy consumption": energy saved against the GPU baseline, the mean over the five
# CNNs (Fig. 12's bars are not in the text), and Newton++ against Newton+
PAPER_ENERGY = {"saving_vs_gpu": {"Newton++": 0.18, "PIMFlow": 0.26}, "newtonpp_vs_newtonp": 0.17}


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
    ap.add_argument("--search-check", action="store_true", help="pimjax's search against the artifact's mapping "
                    "on every distinct candidate CONV of the five CNNs (host merge included on both sides)")
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
    if a.search_check:
        search_check(a.models)
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
