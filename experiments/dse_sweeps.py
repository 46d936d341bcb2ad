"""The design-space sweeps of `dse.ipynb` (issue #27), computed here and cached as JSON lines.

    .venv/bin/python experiments/dse_sweeps.py [--only levels,structure,families,transfer] [--processes 2]

Each sweep is `pimjax.explore` (every structural point tuned for itself: a fresh predict-mode Tuner)
writing its rows to `experiments/data/dse_<sweep>.jsonl` (resumable: an interrupted run goes on where
it stopped; delete a file to recompute it).  The notebook reads the files and recomputes one point of
each heavy sweep to check them (`check_sample`).

* levels:    AttAcc's PIM levels (bank / bank-group / buffer, power-constrained "pc" or not "npc"), one
             HBM3 stack, on LLaMA-2-7B decode attention (32 heads x 128, batch 1, L 512 and 2048, K / V
             resident), and on the shapes of the AttAcc simulator's own attention rows (`ATTACC_SIM`).
* structure: a LLaMA-2-7B decode layer (batch 1, L 2048) on AttAcc over stacks (1-5) x units per channel
             (the level: 64 bank / 16 bank-group / 2 buffer units) x GEMV buffer entries per unit (4-32).
* families:  "which backend for which model": three models on the four families, each with the same GPU
             (`GPU`) as the GPU-only baseline and the processor of the off-PIM ops.
* transfer:  the structure grid again, each point's PIM ops lowered with the drafts tuned at the preset
             point (`PRESET`) beside the point's own drafts, both simulated at the point.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
DATA = os.path.join(HERE, "data")

MODEL, CONTEXT = "llama2-7b", 2048
STACKS = (1, 2, 3, 4, 5)
LEVELS = {"bank": 64, "bg": 16, "buffer": 2}         # AttAcc level -> units per channel (attacc.md)
BUFFERS = (4, 8, 16, 32)                            # GEMV buffer entries (32 B) per unit; preset 16
PRESET = "stacks=1,units=64,buffer=16"              # the attacc preset's own structure (bank-pc, one stack)
LEVEL_CONTEXTS = (512, 2048)

# The public AttAcc simulator's attention rows (attacc.md "Figures": one stack, refresh on, PIM cycles of
# 0.769 ns); AttAcc's paper compares its levels on such runs (bank vs bank-group vs buffer, pc / npc).
ATTACC_SIM = (("bank-pc", 16, 128, 273), ("bank-pc", 16, 2048, 3810), ("bank-pc", 40, 512, 2786),
              ("bank-npc", 40, 2048, 8696), ("bg-pc", 16, 512, 3142), ("buffer-pc", 16, 128, 2094))

FAMILY_MODELS = ("llama2-7b", "gpt3-13b", "bert-base")


# ---------------------------------------------------------------------------
# functions (module level: `explore(processes=N)` spawns workers that import them)
# ---------------------------------------------------------------------------
def attention(q, k_cache, v_cache):
    """softmax(q K^T / sqrt(d)) V per head: q [B, H, d], caches [B, H, L, d] (the layer's attention)."""
    from pimjax.models.layers import decode_attention
    return decode_attention(q, k_cache, v_cache, 1)


def attention_args(heads: int, context: int, d: int = 128, batch: int = 1) -> tuple:
    import jax
    import jax.numpy as jnp
    S = jax.ShapeDtypeStruct
    cache = S((batch, heads, context, d), jnp.float16)
    return S((batch, heads, d), jnp.float16), cache, cache


def model_fn(name: str):
    """(fn, args, resident) of one decode step of an LLM layer (batch 1, L CONTEXT) or one CNN /
    encoder inference (`pimjax.models.cnn`, batch 1)."""
    from pimjax.models import cnn
    from pimjax.models.configs import get_config
    from pimjax.models.layers import layer_shapes, make_layer
    if name in cnn.CNN_MODELS:
        cfg = cnn.get_cnn_config(name)
        return cnn.make_apply(cfg), (cnn.param_shapes(cfg), cfg.input_spec()), "auto"
    cfg = get_config(name)
    return make_layer(cfg), layer_shapes(cfg, 1, CONTEXT), "auto"


def llama_layer(params, x, k_cache, v_cache, pos):
    """The LLaMA-2-7B decoder layer (`pimjax.models.layers.make_layer`)."""
    from pimjax.models.configs import get_config
    from pimjax.models.layers import make_layer
    return make_layer(get_config(MODEL))(params, x, k_cache, v_cache, pos)


def llama_args() -> tuple:
    from pimjax.models.configs import get_config
    from pimjax.models.layers import layer_shapes
    return layer_shapes(get_config(MODEL), 1, CONTEXT)


# ---------------------------------------------------------------------------
# design points
# ---------------------------------------------------------------------------
def structural_point(stacks: int, units: int, buffer: int):
    """AttAcc with `stacks` HBM3 stacks, `units` PIM units per channel (the level that has that many:
    64 bank, 16 bank-group, 2 buffer), power-constrained, and `buffer` GEMV buffer entries per unit."""
    from pimjax.hw import get_backend
    level = {u: lv for lv, u in LEVELS.items()}[units]
    be = get_backend("attacc", variant=f"{level}-pc", stacks=stacks)
    return be.replace(core=be.core.replace(n_input_regs=buffer))


def structure_grid() -> dict:
    return {f"stacks={s},units={u},buffer={b}": structural_point(s, u, b)
            for s in STACKS for u in LEVELS.values() for b in BUFFERS}


def area_proxy(be) -> dict:
    """Unit count and GEMV buffer bytes of a point (what the PIM logic costs in area, roughly)."""
    units = be.n_groups * be.cores_per_group
    return {"units": units, "buffer_kib": units * be.core.n_input_regs * be.core.reg_bytes / 1024}


def level_points(stacks: int = 1) -> dict:
    from pimjax.hw import get_backend
    from pimjax.hw.presets import ATTACC_VARIANTS
    return {v: get_backend("attacc", variant=v, stacks=stacks) for v in ATTACC_VARIANTS}


def family_points() -> dict:
    """The four families, each with the same GPU (an A100 on HBM3, DCC's GPU model: 312 TFLOP/s,
    3352 GB/s x 0.81) as the GPU-only baseline and as the processor of the ops left off PIM.  UPMEM's
    preset has no separate GPU: the same A100 is its host (assumption: UPMEM DIMMs beside that GPU)."""
    from pimjax.hw import get_backend
    from pimjax.hw.host import a100
    gpu = a100("hbm3")
    return {"hbm-pim": get_backend("hbm-pim", gpu=gpu), "attacc": get_backend("attacc", stacks=5, gpu=gpu),
            "newton": get_backend("newton", gpu=gpu), "upmem": get_backend("upmem", host=gpu)}


# ---------------------------------------------------------------------------
# analysis
# ---------------------------------------------------------------------------
def pareto(df, cols) -> np.ndarray:
    """Mask of the rows no other row beats in every column of `cols` (all minimised) and strictly in one."""
    x = df[list(cols)].to_numpy(np.float64)
    keep = np.ones(len(x), bool)
    for i in range(len(x)):
        dominated = np.all(x <= x[i], axis=1) & np.any(x < x[i], axis=1)
        keep[i] = not dominated.any()
    return keep


def path(name: str) -> str:
    return os.path.join(DATA, f"dse_{name}.jsonl")


def load(name: str):
    """The cached rows of a sweep as a DataFrame (FileNotFoundError naming the script otherwise)."""
    import pandas as pd
    if not os.path.exists(path(name)):
        raise FileNotFoundError(f"{path(name)} is missing: run python experiments/dse_sweeps.py --only {name}")
    from pimjax.durable import read_records
    return pd.DataFrame([{k: v for k, v in r.items() if k != "point_rows"}
                         for r in read_records(path(name), "explore results")])


# ---------------------------------------------------------------------------
# the sweeps
# ---------------------------------------------------------------------------
def run_levels(results=None, progress=True):
    import pandas as pd

    import pimjax
    out = []
    for context in LEVEL_CONTEXTS:
        pts = {f"llama L={context} {v}": be for v, be in level_points().items()}
        df = pimjax.explore(attention, *attention_args(32, context), backends=pts, resident=("k_cache", "v_cache"),
                            results=results, progress=progress)
        out.append(df.assign(case=f"LLaMA-2-7B attention, L {context}", context=context, heads=32))
    for variant, heads, context, _ in ATTACC_SIM:
        pts = {f"sim h={heads} L={context} {variant}": level_points()[variant]}
        df = pimjax.explore(attention, *attention_args(heads, context), backends=pts, resident=("k_cache", "v_cache"),
                            results=results, progress=progress)
        out.append(df.assign(case=f"simulator row h{heads} L{context}", context=context, heads=heads))
    return pd.concat(out, ignore_index=True)


def run_structure(results=None, progress=True, processes=1):
    import pimjax
    return pimjax.explore(llama_layer, *llama_args(), backends=structure_grid(), results=results,
                          progress=progress, processes=processes)


def run_families(results=None, progress=True):
    import pandas as pd

    import pimjax
    out = []
    for model in FAMILY_MODELS:
        fn, args, resident = model_fn(model)
        pts = {f"{model} on {fam}": be for fam, be in family_points().items()}
        df = pimjax.explore(fn, *args, backends=pts, resident=resident, results=results, progress=progress)
        out.append(df.assign(model=model, family=list(family_points())))
    return pd.concat(out, ignore_index=True)


def transfer_row(label: str, be, preset_plans: dict, args) -> dict:
    """One point's own tuned PIM ops beside the preset's drafts lowered and simulated at the point
    (steady state; ops whose preset draft does not fit the point are counted, not timed)."""
    import pimjax
    from pimjax.errors import PimCompileError
    from pimjax.lower import lower
    from pimjax.search.tuner import Tuner
    from pimjax.sim.cycles import cycles
    compiled = pimjax.pim_jit(llama_layer, backend=be, tuner=Tuner()).lower(*args).compile()
    tck = float(be.timing.tCK)
    own_ns = moved_ns = 0.0
    same = moved = unfit = 0
    for p in compiled.plans:
        if p.placement != "pim" or p.index not in preset_plans or p.proposal is None:
            continue
        q = preset_plans[p.index]
        pr = p.proposal
        lower_fn = pr.lower_fn or lower
        own = float(cycles(lower_fn(pr.op, p.draft, be, pr.shapes, **pr.lower_options), be).total_cycles) * tck
        if q.draft == p.draft:
            same += 1
            own_ns += own
            moved_ns += own
            continue
        try:
            program = lower_fn(pr.op, q.draft, be, pr.shapes, **pr.lower_options)
        except (PimCompileError, ValueError):
            unfit += 1
            continue
        moved += 1
        own_ns += own
        moved_ns += float(cycles(program, be).total_cycles) * tck
    return {"point": label, "own_ns": own_ns, "preset_draft_ns": moved_ns, "same_draft_ops": same,
            "other_draft_ops": moved, "unfit_ops": unfit, **area_proxy(be)}


def run_transfer(results=None, progress=True):
    import pandas as pd

    import pimjax
    from pimjax.search.tuner import Tuner
    args = llama_args()
    grid = structure_grid()
    preset = pimjax.pim_jit(llama_layer, backend=grid[PRESET], tuner=Tuner()).lower(*args).compile()
    preset_plans = {p.index: p for p in preset.plans if p.placement == "pim"}
    done = {}
    from pimjax.durable import append_records, read_records
    if results:
        done = {r["point"]: r for r in read_records(results, "transfer results")}
    rows = []
    for label, be in grid.items():
        if label not in done:
            done[label] = transfer_row(label, be, preset_plans, args)
            if results:
                append_records(results, [done[label]])
            if progress:
                print(f"transfer {label}: {done[label]['preset_draft_ns'] / max(done[label]['own_ns'], 1e-9):.3f}")
        rows.append(done[label])
    return pd.DataFrame(rows)


def check_sample(name: str, label: str, rtol: float = 1e-6):
    """Recompute one cached point of sweep `name` (a fresh explore, no results file) and compare
    its figures with the cached row: (cached row, recomputed row); AssertionError when they differ."""
    import pimjax
    cached = load(name)
    row = cached[(cached["point"] == label) & cached["timing"].isna()].iloc[0]
    if name == "structure":
        df = pimjax.explore(llama_layer, *llama_args(), backends={label: structure_grid()[label]}, progress=False)
    elif name == "levels":
        v = label.split()[-1]
        context = int(label.split("L=")[1].split()[0])
        heads = 32 if label.startswith("llama") else int(label.split("h=")[1].split()[0])
        df = pimjax.explore(attention, *attention_args(heads, context), backends={label: level_points()[v]},
                            resident=("k_cache", "v_cache"), progress=False)
    else:
        raise ValueError(f"check_sample: no recompute for sweep {name!r}")
    new = df.iloc[0]
    for col in ("total_ns", "energy_pj", "gpu_ns"):
        a, b = float(row[col]), float(new[col])
        assert abs(a - b) <= rtol * max(abs(a), 1.0), f"{name} {label}: cached {col} {a} != recomputed {b}"
    assert row["drafts"] == new["drafts"], f"{name} {label}: cached drafts differ from the recomputed ones"
    return row, new


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="levels,structure,families,transfer")
    ap.add_argument("--processes", type=int, default=1)
    a = ap.parse_args(argv)
    warnings.simplefilter("ignore")      # float32 norms' PrecisionWarning, once per point
    os.makedirs(DATA, exist_ok=True)
    for name in a.only.split(","):
        t0 = time.perf_counter()
        if name == "structure":
            df = run_structure(path(name), processes=a.processes)
        else:
            df = {"levels": run_levels, "families": run_families, "transfer": run_transfer}[name](path(name))
        print(f"{name}: {len(df)} rows, {time.perf_counter() - t0:.0f} s -> {path(name)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
