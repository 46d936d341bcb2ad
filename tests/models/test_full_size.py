"""Full-size layers from ShapeDtypeStructs: nothing materialised, compiled and simulated."""
import numpy as np
import pytest

from pimjax import pim_jit
from pimjax.models.configs import get_config
from pimjax.models.layers import layer_shapes, make_layer


@pytest.mark.slow
@pytest.mark.parametrize("backend,opts", [("attacc", {"stacks": 5}), ("hbm-pim", {}), ("newton", {})])
def test_llama2_7b_layer_places_gemvs_and_attention_on_pim(backend, opts):
    """LLaMA-2 7B, fp16, called as model code calls it -- `layer(params, x, k_cache, v_cache, pos)`,
    params a dict, the caches appended at `pos` -- with pim_jit's defaults (resident="auto"), batch 1,
    context 512: every weight GEMV and the attention's contractions run on PIM (on newton, whose GPU
    runs beside PIM, some GEMVs split with at most half of their rows on the GPU), and the layer
    beats the GPU on the same memory system."""
    cfg = get_config("llama2-7b")
    args = layer_shapes(cfg, 1, 512)
    compiled = pim_jit(make_layer(cfg), backend=backend, **opts).lower(*args).compile()
    rep = compiled.report()
    assert set(rep.resident) == {"params", "k_cache", "v_cache"}
    assert "KV cache" in rep.resident["k_cache"]
    contractions = [(o, p) for o, p in zip(rep.ops, compiled.plans) if p.op.kind == "contraction"]
    assert len(contractions) == 3 + 1 + 3 + 2         # QKV, projection, FFN, score and context
    # on PIM, or (newton's concurrent GPU, PIMFlow's MD-DP) split with most of it on PIM
    assert all(o.placement in ("pim", "fused") or (o.placement == "md-dp" and o.gpu_share <= 0.5)
               for o, _ in contractions), [(o.name, o.placement, o.reason) for o, _ in contractions]
    assert rep.gpu_ns / rep.total_ns > 1


@pytest.mark.slow
def test_llama2_70b_layer_compiles_from_shapes():
    """The 70B layer (GQA: 64 query heads over 8 KV heads) lowers and simulates without weights."""
    cfg = get_config("llama2-70b")
    args = layer_shapes(cfg, 1, 256)
    f = pim_jit(make_layer(cfg, append=False), backend="attacc", stacks=5,
                resident=("params", "k_cache", "v_cache"))
    rep = f.lower(*args).compile().report()
    assert np.isfinite(rep.total_ns) and rep.gpu_ns / rep.total_ns > 1
    # the 8192 x 28672 FFN GEMVs ran as PIM programs
    assert sum(o.placement == "pim" and o.name == "dot_general" for o in rep.ops) >= 7
