"""DCC's Fig. 8 the artifact's way, with the PIM GEMVs timed by the "dcc" configuration.

DCC's end-to-end figure is not a simulation of the decoder: its artifact (SPIN-Research-Group/DCC @
7ffb80e, `src/run_inference.py --all`, `src/inference/{model,system,devices,config}.py`) adds up, per
generated token and decoder layer, each layer's time on the device that runs it -- the GPU on its tiled
occupancy model (`dcc_figures.artifact_layer_ns`), a PIM kernel looked up in one cube's table at heads
ceil(heads x batch / 5), the FFN share of the Full variants as a bandwidth split, the Full variants'
pipelining of QKV / projection with the attention -- and divides the GPU-only total by each system's.
This module is that arithmetic (generation stage only, as Fig. 8), ported line by line, with:

* QKV generation and projection on PIM (the "+DCC" systems) from the "dcc" AttAcc configuration
  (`experiments/data/dcc_figures_dccsim.json`, "fig8_gemv": DCC's per-cube GEMV shapes, the tuner's
  program), and
* the attention on PIM (score + softmax + context, DCC's fused ATTN kernel) from the port's ATTN generator
  ("inference" mode, `pimjax.backends.dcc.traces.gen_attacc_attn`, not checked against the fork's binary) on
  the same fork (`fig8_attention_rows`, cached as "fig8_attention"), or left out
  (`fig8(..., attention_rows=None)`: free, an upper bound on every PIM system's speedup).

    PYTHONPATH=$PWD python experiments/dcc_fig8_artifact.py      # the twelve settings, from the cache
"""
from __future__ import annotations

import math
import os
import sys
from functools import lru_cache

HERE = os.path.dirname(os.path.abspath(__file__))

# src/inference/config.py (make_pim_config, power_constraint False as run_inference.py's default, PIMType.BA)
PIM_CUBES = 5                                   # num_hbm=5
PIM_BW = 650.4e9 * (2 * 4 * 4 / 2) * PIM_CUBES  # MEM_BW_PER_HBM x BW_SCALE[False][BA] x num_hbm
SOFTMAX_BW = 670.4e9 * PIM_CUBES                # SOFTMAX_MEM_BW (= SOFTMAX_FLOPS)
INTERFACE_BW = 600e9                            # NVLINK3; X2G moves at half of it
NORM_US, ACT_US = 6.87, 8.29                    # devices.py xPU._mem_time: fixed cost of a norm / an activation
NORM_PER_BYTE, ACT_PER_BYTE = 0.0000016, 0.000000447    # µs per byte at 1555 GB/s, scaled by the bandwidth
SYSTEMS = ("GPU", "Attacc_base", "Attacc_base+DCC", "Attacc_full", "Attacc_full+DCC")


# DCC's Fig. 8 (SPIN-Research-Group/DCC @ 7ffb80e, src/run_inference.py --all): the settings it runs
# and how it times the layer's GEMVs on PIM.  (model, heads, hidden, head dim) from its config.py
FIG8_SETTINGS = {"models": ("GPT-13B", "LLAMA-33B"), "batch": (1, 4),
                 "lin_lout": ((128, 2048), (2048, 128), (2048, 2048))}
FIG8_MODELS = {"GPT-13B": (40, 5120, 128), "LLAMA-33B": (52, 6656, 128)}   # config.py make_model_config
FIG8_CUBES = 5        # config.py make_pim_config: num_hbm=5


def fig8_gemv_cases() -> list[dict]:
    """The per-cube GEMVs DCC times for Fig. 8's QKV generation and projection on PIM: its model.py
    (the `dcc` branch) splits them per head -- QKV a GEMV of input hidden and output 3 x head dim per
    head, projection input head dim and output hidden per head -- and devices.py
    `get_time_from_predictor` looks one cube's kernel up at heads ceil(heads x batch / 5): DCC's
    shape (1, ceil(H b / 5), input, output), one cube's time standing for all five.  The GPU runs
    the whole layer ((batch, 3 hidden, hidden) / (batch, hidden, hidden) FCs)."""
    out = []
    for model in FIG8_SETTINGS["models"]:
        heads, hidden, dh = FIG8_MODELS[model]
        for b in FIG8_SETTINGS["batch"]:
            nh = math.ceil(heads * b / FIG8_CUBES)
            out.append({"model": model, "batch": b, "phase": "qkv", "dcc_shape": (1, nh, hidden, 3 * dh),
                        "gpu_fc": (b, 3 * hidden, hidden)})
            out.append({"model": model, "batch": b, "phase": "proj", "dcc_shape": (1, nh, dh, hidden),
                        "gpu_fc": (b, hidden, hidden)})
    return out


def dcc_attention_baselines(heads: int, seq_len: int, batch: int = 1) -> list[list]:
    """DCC's baseline tilings of a GEMV / ATTN (batch, heads, 128, seq_len): the candidates its predictor
    counts as the baseline (src/predictor.py `test_performance`: g0 = min(16, heads), c1 = 4, c2 = 16; the
    two generate_configs_3D appends for batch*heads < 16, one tiling otherwise).  The baseline time is
    the faster of them."""
    from experiments.dcc_figures import HEAD_DIM
    bh = batch * heads
    g0 = min(16, bh)
    g2 = 16 // g0
    a = [[g0, 1, -(-bh // g0)], [1, 4, -(-HEAD_DIM // 4)], [g2, 16, math.ceil(seq_len / 16 / g2)]]
    b = [[g0, 1, -(-bh // g0)], [g2, 4, math.ceil(HEAD_DIM / 4 / g2)], [1, 16, -(-seq_len // 16)]]
    return [a] if a == b else [a, b]


def run_fig8_gemv(backend, case: dict, tuner=None) -> dict:
    """One `fig8_gemv_cases` case on `backend` (the "dcc" AttAcc configuration): the tuner's
    program of the per-cube GEMV (`mmtv` [1, heads, output, input], matrix resident; `tuned_ns`), its
    family baseline, and a local search in DCC's notation (`dcc_gemv_local_search`; `search_ns`),
    ns; `pim_ns` the faster, beside the artifact's GPU time of the layer's FC (`artifact_layer_ns`)."""
    from experiments.dcc_figures import artifact_layer_ns, dcc_gemv_local_search, dcc_pow2_start
    from pimjax import pim_jit
    from pimjax.kernels import FUNCTIONS, kernel_args
    from pimjax.search import Tuner
    _, nh, din, dout = case["dcc_shape"]
    f = pim_jit(FUNCTIONS["mmtv"], backend=backend, resident=(0,), placement="prefer_pim",
                tuner=tuner if tuner is not None else Tuner())
    df = f.trace(*kernel_args("mmtv", [1, nh, dout, din])).lower().compile().report().to_dataframe()
    pim = df[df.placement == "pim"]
    if len(pim) != 1:
        raise RuntimeError(f"fig8 {case}: the GEMV did not go to PIM ({list(df.reason)})")
    gpu = artifact_layer_ns("fc", *case["gpu_fc"], 1)
    tuned = float(pim.ns.iloc[0])
    # DCC searches its own tiling space with a predictor; a local search over its power-of-two part,
    # started with the groups on the heads and the cores on the input, stands in for it
    from pimjax.backends.dcc import TCK_NS
    cyc, tiling, n = dcc_gemv_local_search("attacc", case["dcc_shape"], dcc_pow2_start(case["dcc_shape"]))
    search = cyc * TCK_NS
    best = min(tuned, search)
    return {**case, "dcc_shape": list(case["dcc_shape"]), "gpu_fc": list(case["gpu_fc"]),
            "tuned_ns": tuned, "search_ns": search, "search_tiling": str(tiling), "search_timed": n,
            "pim_ns": best, "pimjax_base_ns": float(pim.baseline_ns.iloc[0]),
            "gpu_artifact_ns": gpu, "dcc_vs_gpu_artifact": gpu / best, "draft": str(pim.draft.iloc[0])}


FIG8_ATTN_STEP = 128        # contexts timed for Fig. 8's attention table; the rest interpolated linearly
FIG8_ATTN_SEARCH_AT = (512, 2048, 4096)   # contexts where the local search runs; its tilings re-timed elsewhere


def fig8_attention_rows(log=None) -> list[dict]:
    """Fig. 8's attention on one cube, as the artifact's table holds it (test_configs.py
    `custom_inference_sizes`: ATTN (1, ceil(H b / 5), 128, L), "inference" mode): per (model, batch) and
    context L every `FIG8_ATTN_STEP` tokens from 128 to 4096, DCC's baseline (`dcc_attention_baselines`,
    the faster) and DCC's choice (the faster of it and the tilings a local search finds at
    `FIG8_ATTN_SEARCH_AT`, re-timed at L), ns.  The port's ATTN generator is not checked against the
    fork's binary."""
    from experiments.dcc_figures import HEAD_DIM, dcc_gemv_local_search, dcc_pow2_start
    from pimjax.backends.dcc import TCK_NS
    from pimjax.backends.dcc.engine import dcc_cycles
    rows = []
    for model in FIG8_SETTINGS["models"]:
        heads = FIG8_MODELS[model][0]
        for b in FIG8_SETTINGS["batch"]:
            nh = math.ceil(heads * b / FIG8_CUBES)
            found = []
            for L in FIG8_ATTN_SEARCH_AT:
                shape = (1, nh, HEAD_DIM, L)
                _, t, _ = dcc_gemv_local_search("attacc", shape, dcc_pow2_start(shape), kernel="attn_inference")
                found.append([[g, c] for g, c, _ in t])
            for L in range(128, 4096 + 1, FIG8_ATTN_STEP):
                shape = (1, nh, HEAD_DIM, L)
                dims = [nh, HEAD_DIM, L]
                base = min(dcc_cycles("attacc", "attn_inference", shape, t)["total"]
                           for t in dcc_attention_baselines(nh, L))
                best, best_t = base, "baseline"
                for gc in found:
                    t = [[g, c, -(-d // (g * c))] for (g, c), d in zip(gc, dims)]
                    if any(g * c > d for (g, c), d in zip(gc, dims)) or t[1][2] < 16:
                        continue
                    cyc = dcc_cycles("attacc", "attn_inference", shape, t)["total"]
                    if cyc < best:
                        best, best_t = cyc, str(t)
                rows.append({"model": model, "batch": b, "heads_per_cube": nh, "L": L, "base_ns": base * TCK_NS,
                             "dcc_ns": best * TCK_NS, "dcc_tiling": best_t})
            if log:
                log(f"  fig8 attention {model} b{b}: {len(rows)} rows")
    return rows


def _gpu():
    from experiments.dcc_figures import dcc_gpu
    return dcc_gpu()


@lru_cache(maxsize=None)
def gpu_layer(typ: str, m: int, n, k, ops: int) -> tuple[float, str]:
    """(ns, bound) of one generation-stage layer on the artifact's GPU (`xPU._exec_time`)."""
    from experiments.dcc_figures import artifact_layer
    host = _gpu()
    if typ in ("norm", "act"):                  # xPU._mem_time's fitted lines; compute at 1 thread block
        size = 3 * m * (n if typ == "norm" else k) * 2           # Layer.get_size: NORM m n, ACT m k (k = 1)
        fixed, per = (NORM_US, NORM_PER_BYTE) if typ == "norm" else (ACT_US, ACT_PER_BYTE)
        mem = (per * (1555e9 / host.mem_bandwidth) * size + fixed) * 1e3
        flops = (5 if typ == "norm" else 8) * m * n * ops
        comp = flops / (host.peak_flops * 0.85 / host.sms) * 1e9
        return max(mem, comp), "memory" if mem >= comp else "compute"
    return artifact_layer(typ, m, n, k, ops, host)


def fig8_setting(model: str, batch: int, lin: int, lout: int, pim_gemv: dict, attention_ns=None) -> dict:
    """{system: ms per generated token (all layers)} of one Fig. 8 setting, the artifact's way.

    pim_gemv: {"qkv": ns, "proj": ns}, the per-cube GEMV times of this (model, batch) on PIM;
    attention_ns: callable (L, dcc) -> ns of DCC's ATTN kernel at context L on one cube (score, softmax
    and context fused), with DCC's choice (dcc True) or AttAcc's mapping (None: 0, the bound)."""
    heads, h, dh = FIG8_MODELS[model]
    ndec = {"GPT-13B": 40, "LLAMA-33B": 60}[model]          # config.py model_table
    ff = 4 if model == "GPT-13B" else 8 / 3
    host = _gpu()
    att = attention_ns if attention_ns is not None else (lambda L, dcc: 0.0)
    out = {}
    for system in SYSTEMS:
        pim = system != "GPU"
        dcc = system.endswith("+DCC")
        pipe = ff_par = system.startswith("Attacc_full")
        total = 0.0
        for stage in range(1, lout):
            L = lin + stage
            t = {}
            # QKV: per head on PIM with DCC (model.py dcc branch), else one FC on the GPU
            t["qkv"] = pim_gemv["qkv"] if dcc else gpu_layer("fc", batch, 3 * h, h, 1)[0]
            t["x2g"] = (batch * 3 * h * 2 + heads * batch * dh * 2) / (INTERFACE_BW / 2) * 1e9 if pim else 0.0
            if pim:
                t["score"], t["context"] = att(math.ceil(L / 16) * 16, dcc), 0.0
                flops = 5 * L * heads * batch
                t["softmax"] = max(flops / SOFTMAX_BW, 2 * L * heads * batch * 2 / SOFTMAX_BW) * 1e9
            else:
                t["score"] = gpu_layer("matmul", 1, L, dh, heads * batch)[0]
                t["softmax"] = gpu_layer("softmax", 1, L, 1, heads * batch)[0]
                t["context"] = gpu_layer("matmul", 1, dh, L, heads * batch)[0]
            t["proj"] = pim_gemv["proj"] if dcc else gpu_layer("fc", batch, h, h, 1)[0]
            t["norm"] = 2 * gpu_layer("norm", batch, h, 1, 1)[0]
            ffl = ([("fc", batch, ff * h, h), ("fc", batch, ff * h, h), ("fc", batch, h, ff * h)] if ff != 4
                   else [("fc", batch, ff * h, h), ("fc", batch, h, ff * h)])
            t["act"] = gpu_layer("act", batch, ff * h, 1, 1)[0]
            ff_t = []
            for typ, m, n, k in ffl:
                ns, bound = gpu_layer(typ, m, n, k, 1)
                if ff_par:                           # system.py _ff_parallel
                    scale = PIM_BW / host.mem_bandwidth
                    if bound == "compute":
                        ns *= host.peak_flops / (host.peak_flops + host.mem_bandwidth / 2 * 2 * scale)
                    else:
                        ns *= host.mem_bandwidth / (host.mem_bandwidth + host.mem_bandwidth * scale / batch)
                ff_t.append(ns)
            t["ff"] = sum(ff_t)
            if pim:                                  # system.py _pipeline
                mr = 1 / heads
                attn = t["score"] + t["context"] + t["softmax"]
                if not pipe:
                    t["x2g"] = t["x2g"] * mr if attn > t["x2g"] else t["x2g"] - attn * (1 - mr)
                else:
                    fc = t["qkv"] + t["proj"]
                    if attn > fc:
                        t["qkv"] *= mr
                        t["proj"] *= mr
                        t["x2g"] = t["x2g"] * mr if attn > t["x2g"] else t["x2g"] - attn * (1 - mr)
                    elif fc > t["x2g"]:
                        t["x2g"] *= mr
                        t["qkv"] -= attn * (1 - mr) * 3 / 4
                        t["proj"] -= attn * (1 - mr) / 4
                    else:
                        t["x2g"] -= attn * (1 - mr)
                        t["qkv"] *= mr
                        t["proj"] *= mr
                t["softmax"] = 0.0
            total += sum(t.values())
        out[system] = total / (lout - 1) * ndec / 1e6          # ms per token, all layers
    return out


def attention_table(rows):
    """{(model, batch): callable (L, dcc) -> ns} from `fig8_attention_rows`' rows, linear
    between the contexts timed."""
    import numpy as np
    out = {}
    for key in {(r["model"], r["batch"]) for r in rows}:
        mine = sorted((r for r in rows if (r["model"], r["batch"]) == key), key=lambda r: r["L"])
        Ls = np.array([r["L"] for r in mine], float)
        base = np.array([r["base_ns"] for r in mine])
        dcc = np.array([r["dcc_ns"] for r in mine])
        out[key] = (lambda Ls, base, dcc: lambda L, with_dcc: float(np.interp(L, Ls, dcc if with_dcc else base)))(
            Ls, base, dcc)
    return out


def fig8(pim_gemv_rows, attention_rows=None) -> "object":
    """A DataFrame: per Fig. 8 setting (`FIG8_SETTINGS`) each system's ms per token and its
    speedup over the GPU.  pim_gemv_rows: the cache's "fig8_gemv" rows (model, batch, phase, pim_ns);
    attention_rows: its "fig8_attention" rows (None: the attention free, an upper bound)."""
    import pandas as pd

    gemv = {(r["model"], r["batch"], r["phase"]): r["pim_ns"] for r in pim_gemv_rows}
    att = attention_table(attention_rows) if attention_rows is not None else {}
    rows = []
    for model in FIG8_SETTINGS["models"]:
        for b in FIG8_SETTINGS["batch"]:
            for lin, lout in FIG8_SETTINGS["lin_lout"]:
                ms = fig8_setting(model, b, lin, lout, {p: gemv[(model, b, p)] for p in ("qkv", "proj")},
                                  att.get((model, b)))
                rows.append({"model": model, "batch": b, "lin": lin, "lout": lout,
                             **{f"{s} ms": v for s, v in ms.items()},
                             **{f"{s} speedup": ms["GPU"] / v for s, v in ms.items() if s != "GPU"}})
    return pd.DataFrame(rows)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(HERE))
    import json
    with open(os.path.join(HERE, "data", "dcc_figures_dccsim.json")) as f:
        rows = json.load(f)["rows"]
    import pandas as pd
    for label, att in (("attention free", None), ("attention on DCC's fork", rows.get("fig8_attention"))):
        if label != "attention free" and att is None:
            continue
        df = fig8(rows["fig8_gemv"], att)
        with pd.option_context("display.width", 250, "display.max_columns", 20):
            print(label)
            print(df.filter(regex="model|batch|lin|lout|speedup").round(3).to_string())
        print("mean speedups:", df.filter(like="speedup").mean().round(3).to_dict())
