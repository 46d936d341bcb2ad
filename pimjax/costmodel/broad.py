"""Cases that look like what users run: the shipped models' shapes on the
presets and on structural hardware variants.

`broad_cases(split)` is deterministic (no RNG): per backend the GEMV,
attention and elementwise shapes of the LLM configs (`models.configs`), the
stride-1 convolutions of the CNN tables (`models.cnn.cnn_layers`), batch and
head variants, each on the preset and on structural variants
(`dse.grid`-style preset options: channels, stacks, PIM level, buffers,
DPUs).  The two splits are disjoint by construction:

* ``"train"``   -- GPT-3 13B and LLaMA-2 7B shapes, ResNet-50 convolutions,
  the family's `TrainingShapes.train_hw` variants (`variants`);
* ``"heldout"`` -- LLaMA-2 13B / 33B / 70B shapes, VGG-16 convolutions,
  its `heldout_hw` variants (never trained on) and the preset; a shape
  the train split has for the same backend and kernel is left out.

A case is a dict {backend, kernel, shape, hw}: `hw` the preset options
({} = the preset), so `backend_of(case)` rebuilds the hardware.  Shapes up
to 28 672 x 8 192 (LLaMA-2 70B's FFN), non-powers of two (11 008, 13 824,
17 920, 6 656, 5 120).  Their draft spaces are too large to simulate
exhaustively in a training budget (a 28 672 x 8 192 GEMV lowers in about a
second per draft), so drafts are *sampled*: `SAMPLE` per case, random plus
the closed-form estimate's best (see `dataset.Plan`)."""
from __future__ import annotations

from functools import lru_cache

from ..hw.core import Backend

TRAIN_LLMS = ("gpt3-13b", "llama2-7b")
HELDOUT_LLMS = ("llama2-13b", "llama2-33b", "llama2-70b")
TRAIN_CNN, HELDOUT_CNN = "resnet-50", "vgg-16"


def _llm_shapes(name: str) -> dict[str, list[tuple]]:
    """Per kernel the shapes one decoder layer of config `name` runs."""
    from ..models.configs import CONFIGS
    c = CONFIGS[name]
    d, f, qd, kv, hd = c.d_model, c.d_ff, c.q_dim, c.kv_dim, c.head_dim
    gemv = [(qd, d), (kv, d), (d, qd), (f, d), (d, f)]
    # decode attention: the score (mmtv / attn) over a context, per KV head; batch 1 and 4
    ctx = (512, 2048) if c.max_seq <= 2048 else (1024, 4096)
    mmtv = [(1, c.n_kv_heads, ctx[0], hd), (4, c.n_kv_heads, ctx[1] // 4, hd), (1, c.n_heads, ctx[1], hd)]
    elem = [(d,), (4, d), (1, f), (16, d)]
    return {"gemv": gemv, "mmtv": mmtv, "attn": mmtv, "va": elem, "relu": elem, "red": elem}


def _cnn_shapes(name: str, limit: int = 8) -> list[tuple]:
    """Distinct stride-1, ungrouped convolutions of CNN `name` as conv
    kernel shapes [H, W, C, F, K], the smallest spatial sizes first (the
    larger ones' draft spaces take minutes to sample)."""
    from ..models.cnn import cnn_layers
    df = cnn_layers(name)
    df = df[(df["op"] == "conv") & (df["stride"] == 1) & (df["groups"] == 1) & df["K"].isin([1, 3])]
    out = sorted({(int(r.H), int(r.W), int(r.C), int(r.F), int(r.K)) for r in df.itertuples()},
                 key=lambda s: (s[0] * s[1] * s[2] * s[3] * s[4] ** 2, s))
    return out[:limit]


def variants(family: str, split: str) -> list[dict]:
    """The structural hardware variants (preset options) of `family` in
    `split` ("train" or "heldout"): its `TrainingShapes.train_hw` /
    `heldout_hw`, disjoint between the splits."""
    from ..backends import family_of
    if split not in ("train", "heldout"):
        raise ValueError(f"split must be 'train' or 'heldout', got {split!r}")
    ts = family_of(family).training_shapes
    return [dict(h) for h in (ts.train_hw if split == "train" else ts.heldout_hw)]


@lru_cache(maxsize=4)
def _cases(split: str) -> tuple:
    from ..backends import families, family_of
    if split not in ("train", "heldout"):
        raise ValueError(f"split must be 'train' or 'heldout', got {split!r}")
    llms = TRAIN_LLMS if split == "train" else HELDOUT_LLMS
    cnn = TRAIN_CNN if split == "train" else HELDOUT_CNN
    # held-out shapes are unseen shapes: none the train split has on that backend and kernel
    # (LLaMA-2 13B shares d_model 5120 and 40 heads with GPT-3 13B)
    trained = {(c["backend"], c["kernel"], tuple(c["shape"])) for c in _cases("train")} \
        if split == "heldout" else set()
    out = []
    for backend in families():
        kernels = family_of(backend).kernels
        shapes: dict[str, list] = {}
        for m in llms:
            for k, ss in _llm_shapes(m).items():
                shapes.setdefault(k, []).extend(ss)
        if "conv" in kernels:
            shapes["conv"] = _cnn_shapes(cnn)
        seen = set()
        hw = [{}] + variants(backend, split)
        for k in kernels:
            for i, s in enumerate(dict.fromkeys(shapes.get(k, []))):
                if family_of(backend).integer and k in ("gemv", "mmtv") and s[0] * s[-1] > (1 << 25):
                    continue          # int32 on DPUs (UPMEM): the 70B FFN is minutes per draft of MRAM DMA
                # every shape on the preset; on the variants a rotation, so each variant gets
                # every kernel but not every shape (the labelling budget)
                for j, opts in enumerate(hw):
                    if j and (i + j) % len(hw) != 0 and (i + j) % len(hw) != 1:
                        continue
                    key = (backend, k, s, tuple(sorted(opts.items())))
                    if key not in seen and (backend, k, s) not in trained:
                        seen.add(key)
                        out.append({"backend": backend, "kernel": k, "shape": list(s), "hw": dict(opts)})
    return tuple(out)


def broad_cases(split: str = "heldout") -> list[dict]:
    """The deterministic case list of `split` ("train" or "heldout"; see the
    module docstring): dicts {backend, kernel, shape, hw}."""
    return [dict(c, hw=dict(c["hw"])) for c in _cases(split)]


def hw_key(hw: dict | None) -> str:
    """Canonical text of preset options ('' for the preset): part of a
    record's case key."""
    return ",".join(f"{k}={v}" for k, v in sorted((hw or {}).items()))


@lru_cache(maxsize=64)
def _backend(name: str, key: str) -> Backend:
    from ..hw.presets import get_backend
    opts = {}
    for item in filter(None, key.split(",")):
        k, v = item.split("=", 1)
        opts[k] = int(v) if v.lstrip("-").isdigit() else v
    return get_backend(name, **opts)


def backend_of(name: str, hw: dict | None = None) -> Backend:
    """The Backend of preset `name` with options `hw` (memoised)."""
    return _backend(name, hw_key(hw))
