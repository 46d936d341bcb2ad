"""Write the DCC research notebooks (`experiments/dcc_*.ipynb`) from the cell
sources below, without outputs.

    python experiments/make_notebooks.py          # rewrite them
    python experiments/make_notebooks.py --check  # exit 1 if a notebook differs from its source here

The notebooks hold little code: the systems, cases, paper numbers and
comparisons live in `experiments/dcc_figures.py` (tested in
tests/test_dcc_figures.py); `tests/test_notebooks.py` executes every
notebook.  Edit the cells here, not in the .ipynb.
"""
from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

SETUP = """\
import os, sys, time
ROOT = os.path.abspath("..") if os.path.basename(os.getcwd()) == "experiments" else os.getcwd()
sys.path.insert(0, ROOT)            # this checkout's pimjax and experiments/
import pandas as pd
import matplotlib.pyplot as plt
from experiments import dcc_figures as dcc
pd.set_option("display.width", 200); pd.set_option("display.max_colwidth", 120)
t_start = time.perf_counter()"""

SYSTEMS_MD = """\
**Systems.** DCC §V simulates an A100 beside PIM-enabled HBM3; its GPU model is 312 TFLOP/s FP16 and
3352 GB/s at 0.81 utilisation (five HBM3 cubes' worth of bandwidth; `dcc.md`) — in pimjax
`pimjax.hw.host.a100("hbm3")`, passed explicitly as every system's host here so that a change of a
preset's default host does not change these figures. DCC's trace generator models **one** HBM3 cube
(16 channels × 64 banks; `dcc.md`), so the PIM side is one cube:

* AttAcc: `get_backend("attacc", variant="bank-pc", stacks=1, host=a100("hbm3"))`.
* HBM-PIM: `get_backend("hbm-pim", channels=64, host=a100("hbm3"))` — Samsung's Aquabolt-XL (HBM2
  timing, 16 banks per pseudo-channel, one 16-lane FP16 unit per two banks): 64 pseudo-channels × 8
  units = 512 units, as many as DCC's HBM-PIM cube (16 channels × 64 banks, a unit per two banks).

**Residency** (DCC's kernel evaluation): the attention layer's GEMV keeps its matrix (the KV cache) in
PIM and the host writes the 128-element query per call; ATTN keeps K and V; RED / VA / RELU operands
come from the GPU and are rearranged into PIM every call. **Search**: the shipped predict-mode tuner
(the cost model's top-8 drafts and the backend's baseline lowered and simulated, the fastest kept), not
exhaustive search, to fit CI. **Averages** are geometric means over the cases."""


def fig67_cells() -> list[tuple[str, str]]:
    return [
        ("md", """\
# DCC Fig. 6 and Fig. 7: kernel speedups over the GPU and over the default mapping

DCC §V-A: AttAcc (Fig. 6: GEMV, RED, ATTN) and HBM-PIM (Fig. 7: GEMV, RED, VA, RELU), each with its
default mapping and with DCC's search, against the GPU, "varying the batch size, number of heads and
tensor sizes". The paper's text gives averages and a few single points, not the per-case bars, so we
compare averages. GEMV and ATTN use input (head) size 128 and 32 heads (Fig. 9's layer); the tensor
size is the output length (tokens). **Subset:** batch 1 and 4; GEMV outputs 512 and 2048, ATTN 512 and
1024, RED / VA / RELU lengths 1024, 2048, 4096 — the paper's full grids are not stated and a larger
grid does not fit the CI budget (ATTN at 4096 tokens alone compiles for about a minute)."""),
        ("md", SYSTEMS_MD),
        ("code", SETUP),
        ("md", "## Fig. 6: AttAcc"),
        ("code", """\
attacc = dcc.attacc_system()
print(attacc.name, attacc.variant, f"{attacc.n_groups} channels x {attacc.cores_per_group} units;",
      "host", attacc.system.host.name)
fig6 = dcc.sweep(attacc, dcc.fig6_cases())
fig6.drop(columns=["draft"]).round(3)"""),
        ("code", """\
fig, axes = plt.subplots(1, 2, figsize=(15, 3.8))
dcc.plot_cases(fig6, "Fig. 6 (pimjax): AttAcc over the GPU, per case", axes[0])
table6 = dcc.compare(dcc.summarise(fig6), dcc.PAPER_FIG6, dcc.WHY)
dcc.plot_compare(table6, "Fig. 6: DCC paper vs pimjax (averages)", axes[1])
plt.tight_layout(); dcc.save(fig, "dcc_fig6", fig6, table6); plt.show()
table6.round(3)"""),
        ("md", "## Fig. 7: HBM-PIM"),
        ("md", """\
pimjax's HBM-PIM baseline is the Samsung simulator's mapping (`pimjax.backends.baseline`). DCC's
HBM-PIM comparison point is AttAcc's data distribution (§V, comparison point 4); `attacc_ns` lowers
that distribution on HBM-PIM where it can run: RED. For GEMV it splits the query over the units of a
pseudo-channel, which HBM-PIM's broadcast register writes cannot do, and VA / RELU have no AttAcc
mapping (AttAcc has no units for them), so those rows say why in `attacc_note`."""),
        ("code", """\
hbm = dcc.hbm_pim_system()
print(hbm.name, f"{hbm.n_groups} pseudo-channels x {hbm.cores_per_group} units;", "host", hbm.system.host.name)
fig7 = dcc.sweep(hbm, dcc.fig7_cases(), attacc_distribution=True)
fig7.drop(columns=["draft"]).round(3)"""),
        ("code", """\
fig, axes = plt.subplots(1, 2, figsize=(15, 3.8))
dcc.plot_cases(fig7, "Fig. 7 (pimjax): HBM-PIM over the GPU, per case", axes[0])
table7 = dcc.compare(dcc.summarise(fig7), dcc.PAPER_FIG7, {**dcc.WHY, **dcc.WHY_FIG7})
dcc.plot_compare(table7, "Fig. 7: DCC paper vs pimjax (averages)", axes[1])
plt.tight_layout(); dcc.save(fig, "dcc_fig7", fig7, table7); plt.show()
table7.round(3)"""),
        ("md", """\
## Why the GPU comparisons differ: what DCC's own numbers imply about its GPU

`dcc.md` gives DCC's artifact's simulated cycles (0.769 ns) for a few cases. Dividing them into the
paper's speedups gives the GPU time the paper must have used, which we set beside the roofline of DCC's
stated GPU model (`a100("hbm3")`)."""),
        ("code", "dcc.implied_gpu_table().round(2)"),
        ("md", """\
DCC's trace generator models one cube, but §V's system has five PIM-enabled HBM3 devices. With AttAcc on
five cubes (`attacc_system(stacks=5)`, the same GPU) for a few Fig. 6 cases:"""),
        ("code", """\
five = dcc.sweep(dcc.attacc_system(stacks=5), [("gemv", 4, 2048), ("attn", 4, 512), ("red", 1, 4096)])
dcc.cubes_table(fig6, five).round(2)"""),
        ("md", """\
The baselines themselves also differ. DCC's artifact simulates AttAcc's RED baseline at (1, 4096) in 357
cycles and HBM-PIM's in 593 (`dcc.md`); ours, lowered and simulated with their breakdown:"""),
        ("code", """\
pd.DataFrame([dcc.baseline_breakdown(attacc, "red", 1, 4096), dcc.baseline_breakdown(hbm, "red", 1, 4096)]).round(1)"""),
        ("code", """\
print("misses and their modelling difference:")
for t in (table6, table7):
    for _, r in t[~t["within 25%"]].iterrows():
        print(f"- {r.kernel} {r.metric}: paper {r.paper:.2f}, ours {r.ours:.2f}. {r['why it differs']}")
print(f"notebook ran in {time.perf_counter() - t_start:.0f} s")"""),
    ]


def fig9_cells() -> list[tuple[str, str]]:
    return [
        ("md", """\
# DCC Fig. 9: DCC's gain over the default mapping as the batch grows

DCC §V-A: the GEMV of an attention layer with 32 heads and input size 128, various output sizes,
batch 1 → 8; DCC's speedup over HBM-PIM's and AttAcc's default mapping rises from 1.33 to 1.61
(HBM-PIM) and from 1.14 to 1.33 (AttAcc). **Subset:** output sizes 512 and 1024 (the paper's are not
stated), batches 1, 2, 4, 8; per batch the geometric mean over the output sizes."""),
        ("md", SYSTEMS_MD),
        ("code", SETUP),
        ("code", """\
systems = [dcc.attacc_system(), dcc.hbm_pim_system()]
fig9 = pd.concat([dcc.sweep(be, dcc.fig9_cases()) for be in systems], ignore_index=True)
fig9[["backend", "batch", "size", "pim_ns", "base_ns", "gpu_ns", "dcc_vs_base", "dcc_vs_gpu", "draft"]].round(3)"""),
        ("code", """\
t9 = dcc.fig9_table(fig9)
fig, ax = plt.subplots(figsize=(7, 3.5))
for b, g in t9.groupby("backend"):
    line, = ax.plot(g.batch, g.ours, "o-", label=f"pimjax {b}")
    known = g.dropna(subset=["paper"])
    ax.plot(known.batch, known.paper, "s--", color=line.get_color(), label=f"DCC paper {b} (end points)")
ax.set_xscale("log", base=2); ax.set_xlabel("batch"); ax.set_ylabel("speedup over the default mapping (x)")
ax.set_title("Fig. 9: GEMV, 32 heads, input 128"); ax.legend(fontsize=7)
dcc.save(fig, "dcc_fig9", fig9, t9); plt.show()
t9.round(3)"""),
        ("code", """\
for b, g in t9.groupby("backend"):
    g = g.set_index("batch")
    (p1, p8), (o1, o8) = g.paper[[1, 8]], g.ours[[1, 8]]
    hit = all(abs(o / p - 1) <= dcc.TOLERANCE for o, p in ((o1, p1), (o8, p8)))
    print(f"{b}: paper {p1:.2f} -> {p8:.2f} (x{p8 / p1:.2f}), ours {o1:.2f} -> {o8:.2f} (x{o8 / o1:.2f}); end points "
          + ("within 25 %" if hit else "miss") + f". Where the gains differ: {dcc.WHY_FIG9[b]}")
print(f"notebook ran in {time.perf_counter() - t_start:.0f} s")"""),
    ]


def table2_cells() -> list[tuple[str, str]]:
    return [
        ("md", """\
# DCC Table II: how often the predictor picks the optimal draft

DCC §V-D: for each case every draft is simulated (the true optimum) and the predictor's pick is
compared with it: #Best (the pick is optimal) and, over the misses, the geometric mean of optimum /
picked performance. `experiments/predictor_accuracy.py` computes the same table for pimjax's shipped
Flax cost model on held-out shapes (`pimjax.costmodel.evaluate`).

**Subset.** The full held-out set simulates every draft of ~90 cases (minutes to tens of minutes);
this notebook runs a stated subset that fits CI — per row the smallest held-out shapes: three of RED /
VA / RELU, one of GEMV and ATTN (`dcc.table2_cases`) — so its
totals are far below the paper's 167–304 cases per row, and the percentages carry that sampling
uncertainty. `python experiments/predictor_accuracy.py` runs the full set."""),
        ("code", SETUP),
        ("code", """\
cases = dcc.table2_cases()
pd.DataFrame(cases)"""),
        ("code", """\
results, table = dcc.table2_subset(cases)
table.round(4)"""),
        ("code", """\
side = dcc.table2_compare(table)
fig, axes = plt.subplots(1, 2, figsize=(12, 3.5))
for ax, col, label in ((axes[0], "best_frac", "#Best (fraction of cases)"),
                       (axes[1], "subopt", "suboptimal performance (misses)")):
    x = range(len(side))
    ax.bar([i - 0.2 for i in x], side[f"paper {col}"], 0.4, label="DCC paper")
    ax.bar([i + 0.2 for i in x], side[f"ours {col}"], 0.4, label="pimjax (subset)")
    ax.set_xticks(list(x), side.row, rotation=30, fontsize=7); ax.set_ylim(0.5, 1.02); ax.set_title(label)
axes[0].legend(fontsize=7); plt.tight_layout(); dcc.save(fig, "dcc_table2", table, side); plt.show()
side.round(4)"""),
        ("md", """\
**Where and why they differ.** The rows are different experiments: DCC's predictor is XGBoost ranking
its unpruned draft space, trained per kernel on shapes like the test shapes; pimjax's is a Flax model
ranking the pruned space (`pimjax.partition`), evaluated on held-out shapes it never saw, and a pick
less than one command-clock cycle from the optimum counts as best. Our subset is a few cases per row,
so one miss moves #Best by tens of percent. DCC's artifact (`dcc.md`) measured 15–19 % prediction error
and picks 1.00–1.12× slower than the best on its own splits; the `mape` column is ours."""),
        ("code", 'print(f"notebook ran in {time.perf_counter() - t_start:.0f} s")'),
    ]


def broad_cells() -> list[tuple[str, str]]:
    return [
        ("md", """\
# The cost model on shapes and hardware it never saw (issue #29)

`experiments/broad_accuracy.py` labels sampled drafts of the broad held-out set
(`pimjax.costmodel.broad.broad_cases("heldout")`: LLaMA-2 13B / 33B / 70B GEMVs up to 28 672 × 8 192,
decode attention, elementwise ops, VGG-16 convolutions, each on the preset and on structural hardware
variants no model was trained on) and compares the shipped models' predicted cycles with the simulated
ones. Labelling them takes tens of minutes, so this notebook plots the cached result
(`experiments/data/broad_accuracy.json`) and re-checks a sample: three cached drafts are featurised and
predicted again, and the smallest is lowered and simulated again."""),
        ("code", """\
import json, os, sys, time
ROOT = os.path.abspath("..") if os.path.basename(os.getcwd()) == "experiments" else os.getcwd()
sys.path.insert(0, ROOT)
import numpy as np
import pandas as pd
import matplotlib.pyplot as plt
t_start = time.perf_counter()
with open(os.path.join(ROOT, "experiments", "data", "broad_accuracy.json")) as f:
    data = json.load(f)
table = pd.DataFrame(data["table"])
table[table.kernel == "all"].round(3)"""),
        ("code", """\
df = pd.DataFrame(data["drafts"])
fig, ax = plt.subplots(figsize=(6, 5))
for (name, variant), d in df.groupby([df.backend, df.hw != ""]):
    ax.scatter(d.sim, d.pred, s=8, marker="x" if variant else "o", alpha=0.6,
               label=f"{name} {'variants' if variant else 'preset'}")
lim = [df[["sim", "pred"]].min().min() * 0.8, df[["sim", "pred"]].max().max() * 1.25]
ax.plot(lim, lim, "k-", lw=0.8)
for f in (0.85, 1.15):
    ax.plot(lim, [lim[0] * f, lim[1] * f], "k:", lw=0.6)
ax.set_xscale("log"); ax.set_yscale("log"); ax.set_xlim(lim); ax.set_ylim(lim)
ax.set_xlabel("simulated cycles"); ax.set_ylabel("predicted cycles"); ax.legend(fontsize=7)
ax.set_title("held-out shapes and hardware variants (dotted: +-15 %)"); plt.tight_layout(); plt.show()
table[table.kernel != "all"].round(3)"""),
        ("code", """\
# re-check a sample against the current code: the prediction from the cached draft, and one simulation
from pimjax.costmodel import dataset as ds
from pimjax.costmodel.broad import backend_of
from pimjax.costmodel.kernels import make_case
from pimjax.costmodel.predictor import load_default
from pimjax.partition.generate import lane_candidates
from pimjax.costmodel.features import features_table
sample = sorted((r for r in data["drafts"] if "record" in r), key=lambda r: r["sim"])[:3]
for r in sample:
    rec = r["record"]
    be = backend_of(rec["backend"], rec.get("hw"))
    case = make_case(be, rec["kernel"], rec["shape"])
    table1 = ds.table_from_rows([rec["row"]], lane_candidates(case.op, be))
    pred = load_default(rec["backend"]).predict(features_table(case.target, table1, be, case.shapes))[0]
    print(rec["backend"], rec["kernel"], rec["shape"], rec.get("hw", {}), f"predicted {pred:,.0f} (cached "
          f"{r['pred']:,.0f}), simulated {r['sim']:,.0f}")
    if r is sample[0]:
        sim = ds.label(case, table1, [0], be)[0, 0]
        assert abs(sim - r["sim"]) <= 1e-6 * r["sim"] + 1.0, (sim, r["sim"])
        print(f"  simulated again: {sim:,.0f}")"""),
        ("code", 'print(f"notebook ran in {time.perf_counter() - t_start:.0f} s")'),
    ]


NOTEBOOKS = {"dcc_fig6_fig7_kernels.ipynb": fig67_cells, "dcc_fig9_batch.ipynb": fig9_cells,
             "dcc_table2.ipynb": table2_cells, "costmodel_broad.ipynb": broad_cells}


def build(cells):
    import nbformat
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_markdown_cell(src) if kind == "md" else nbformat.v4.new_code_cell(src)
                for kind, src in cells]
    for i, c in enumerate(nb.cells):      # stable ids: regenerating gives the same file
        c["id"] = f"cell-{i}"
    return nb


def main(argv=None) -> int:
    import nbformat
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="exit 1 when a notebook differs from its source")
    args = ap.parse_args(argv)
    stale = []
    for name, cells in NOTEBOOKS.items():
        path = os.path.join(HERE, name)
        text = nbformat.writes(build(cells()))
        if args.check:
            if not os.path.exists(path) or open(path).read() != text:
                stale.append(name)
        else:
            with open(path, "w") as f:
                f.write(text)
    if stale:
        print("stale notebooks (run python experiments/make_notebooks.py):", ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
