"""Every corpus function: the graph evaluates to the function's value, and its
structure (op kinds, loop extents, reductions, fusion) is what PIM expects."""
from __future__ import annotations

import linecache
from collections import Counter

import jax
import numpy as np
import pytest

import pimjax
from pimjax.trace import Acc, Arg, Const, Prim, check_graph
from pimjax.trace.ir import expr_prims
from tests.corpus import CORPUS, NAMES

_GRAPHS: dict[str, pimjax.PimGraph] = {}


def graph(name: str) -> tuple[pimjax.PimGraph, tuple]:
    fn, factory = {n: (f, fac) for n, f, fac in CORPUS}[name]
    args = factory()
    if name not in _GRAPHS:
        _GRAPHS[name] = pimjax.make_graph(fn, *args)
    return _GRAPHS[name], args


def kinds(g) -> list[str]:
    return [op.kind for op in g.ops]


def only(g, kind: str):
    ops = g.ops_of_kind(kind)
    assert len(ops) == 1, g.as_text()
    return ops[0]


def red_extents(op) -> list[int]:
    return sorted(op.extents[v] for v in op.reduction_vars)


def map_text(op, k: int) -> str:
    return ",".join(str(e) for e in op.operands[k].index_map)


def test_corpus_is_large_and_unique():
    assert len(CORPUS) >= 30
    assert len(set(NAMES)) == len(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_evaluate_matches_function(name):
    g, args = graph(name)
    fn = {n: f for n, f, _ in CORPUS}[name]
    want = fn(*args)
    got = g.evaluate(*args)
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
    for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64),
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_graph_invariants_and_sources(name):
    g, _ = graph(name)
    check_graph(g)
    for op in g.ops:
        path, line = op.source.rsplit(":", 1)
        assert path.endswith("corpus.py"), op.source
        assert linecache.getline(path, int(line)).strip(), op.source


# --------------------------------------------------------------------------
# structure per corpus entry
# --------------------------------------------------------------------------
def test_gemv():
    g, _ = graph("gemv")
    assert kinds(g) == ["contraction"]
    op = g.ops[0]
    assert op.extents == {"i": 64, "k": 32}
    assert op.reduction_vars == ("k",) and op.combiner == "add"
    assert op.body == Prim("mul", (Arg(0), Arg(1))) and op.epilogue is None
    assert [g.value_name(a.value) for a in op.operands] == ["W", "x"]
    assert g.as_text() == "y[i] = sum_k W[i,k] * x[k]   i<64 k<32"


def test_gemv_bias_relu_is_one_fused_contraction():
    g, _ = graph("gemv_bias_relu")
    assert kinds(g) == ["contraction"]
    op = g.ops[0]
    assert op.epilogue == Prim("max", (Prim("add", (Acc(), Arg(2))), Const(0.0, "float32")))
    assert op.fused == ("add", "max")
    assert op.epilogue_operands == (2,)
    assert g.as_text() == "y[i] = relu(sum_k W[i,k] * x[k] + b[i])   i<64 k<32"


@pytest.mark.parametrize("name, extents, reduced", [
    ("gemm", {"i": 16, "j": 8, "k": 24}, [24]),
    ("batched_matmul", {"b": 4, "i": 8, "j": 8, "k": 16}, [16]),
    ("attn_scores", {"b": 2, "h": 4, "i": 16, "k": 8}, [8]),     # bhd,bhnd->bhn: sum over d
    ("attn_context", {"b": 2, "h": 4, "i": 8, "k": 16}, [16]),   # bhn,bhnd->bhd: sum over n
    ("ttv", {"i": 4, "j": 5, "k": 6}, [6]),
    ("mmtv", {"b": 4, "i": 8, "k": 16}, [16]),
])
def test_single_contractions(name, extents, reduced):
    g, _ = graph(name)
    assert kinds(g) == ["contraction"]
    assert g.ops[0].extents == extents
    assert red_extents(g.ops[0]) == reduced


@pytest.mark.parametrize("name, out_shape, reduced", [
    ("cinm_abcd", (2, 4, 7, 6), [3, 5]),   # abcd = aebf . dfce: sum over e, f
    ("cinm_ab", (4, 7), [5, 6]),           # ab = acd . dbc: sum over c, d
    ("cinm_abc", (4, 7, 5), [6]),          # abc = acd . db: sum over d
])
def test_cinm_contractions_write_einsum_layout_directly(name, out_shape, reduced):
    g, _ = graph(name)
    op = only(g, "contraction")
    assert kinds(g) == ["contraction"]   # einsum's output transpose is the result map
    assert g.values[op.result.value].shape == out_shape
    assert red_extents(op) == reduced
    assert "transpose" in op.fused or name == "cinm_ab"


def test_bf16_matmul_accumulates_in_f32():
    g, _ = graph("bf16_matmul")
    op = only(g, "contraction")
    assert g.values[op.result.value].dtype == "float32"
    assert all(isinstance(a, Prim) and a.name == "convert_element_type" for a in op.body.args)


def test_va_and_geva_are_single_elementwise_ops():
    g, _ = graph("va")
    assert kinds(g) == ["elementwise"] and g.ops[0].body == Prim("add", (Arg(0), Arg(1)))
    g, _ = graph("geva")
    assert kinds(g) == ["elementwise"]
    op = g.ops[0]
    assert Counter(expr_prims(op.body)) == Counter({"mul": 2, "add": 1})
    scalars = [a for a in op.operands if a.index_map == ()]
    assert sorted(g.value_name(a.value) for a in scalars) == ["a", "b"]
    # the input `y` keeps its name, so the output is called `out`
    assert g.value_name(g.outputs[0]) == "out"


@pytest.mark.parametrize("name, combiner, extents, reduced", [
    ("red_vector", "add", {"k": 256}, ("k",)),
    ("red_rows", "add", {"i": 16, "k": 32}, ("k",)),
    ("max_reduce", "max", {"i": 32, "k": 16}, ("k",)),
])
def test_reductions(name, combiner, extents, reduced):
    g, _ = graph(name)
    assert kinds(g) == ["reduction"]
    op = g.ops[0]
    assert op.combiner == combiner and op.extents == extents and op.reduction_vars == reduced


def test_text_of_max_reduction():
    g, _ = graph("max_reduce")
    assert g.as_text() == "y[i] = max_k A[k,i]   i<32 k<16"


def test_mean_is_reduction_with_division_epilogue():
    g, _ = graph("mean_rows")
    op = only(g, "reduction")
    assert op.epilogue == Prim("div", (Acc(), Const(32.0, "float32")))


def test_softmax_structure():
    g, _ = graph("softmax")
    assert kinds(g) == ["reduction", "elementwise", "reduction", "elementwise"]
    assert [op.combiner for op in g.ops] == ["max", None, "add", None]
    assert "exp" in expr_prims(g.ops[1].body)


def test_layernorm_fuses_keepdims_means():
    g, _ = graph("layernorm")
    assert kinds(g) == ["reduction", "elementwise", "reduction", "elementwise"]
    mean, _, var, _ = g.ops
    assert mean.epilogue is not None and "rsqrt" in expr_prims(var.epilogue)


def test_mlp2_names_pytree_leaves():
    g, _ = graph("mlp2")
    assert kinds(g) == ["contraction", "contraction"]
    assert [g.value_name(v) for v in g.inputs] == [
        "params_b1", "params_b2", "params_w1", "params_w2", "x"]
    assert g.ops[0].fused == ("add", "max") and g.ops[1].fused == ("add",)


def test_gelu_epilogue_fuses_the_whole_chain():
    g, _ = graph("gelu_mlp")
    op = only(g, "contraction")
    assert kinds(g) == ["contraction"]
    assert "tanh" in expr_prims(op.epilogue)
    assert "where acc = sum_k W[i,k] * x[k]" in g.as_text()


def test_nested_jit_and_remat_are_inlined():
    g, _ = graph("nested_calls")
    assert kinds(g) == ["contraction"]
    assert set(expr_prims(g.ops[0].epilogue)) == {"mul", "tanh"}


def test_leaky_relu_select():
    g, _ = graph("leaky_relu")
    assert kinds(g) == ["elementwise"]
    assert set(expr_prims(g.ops[0].body)) == {"select_n", "gt", "mul"}


def test_gpt_decode_attention_structure():
    g, _ = graph("gpt_decode_attention")
    count = Counter(kinds(g))
    assert count["contraction"] == 6      # q, k, v, scores, context, output projection
    assert count["reduction"] == 2        # softmax max and sum
    assert count["host"] == 0
    scores = [op for op in g.ops if op.kind == "contraction"][3]
    assert red_extents(scores) == [8]     # head dim
    assert scores.epilogue is not None    # the 1/sqrt(dh) scale is fused
    out = g.ops[-1]
    assert out.kind == "contraction" and out.fused == ("add",)   # residual add fused


def test_conv1x1_is_a_contraction_over_channels():
    g, _ = graph("conv1x1_nhwc")
    op = only(g, "contraction")
    assert kinds(g) == ["contraction"]
    assert op.extents == {"n": 2, "h": 5, "w": 5, "f": 16, "c": 8}
    assert op.reduction_vars == ("c",)


@pytest.mark.parametrize("name, result_map", [
    ("conv3x3_nhwc", "n,h,w,f"), ("conv3x3_nchw", "n,f,h,w")])
def test_conv3x3_is_pad_then_im2col(name, result_map):
    g, _ = graph(name)
    assert kinds(g) == ["layout", "contraction"]
    pad, conv = g.ops
    assert pad.name == "pad"
    assert conv.reduction_vars == ("kh", "kw", "c")
    assert red_extents(conv) == [3, 3, 3]
    assert ",".join(str(e) for e in conv.result.index_map) == result_map
    assert "h + kh" in map_text(conv, 0) and "w + kw" in map_text(conv, 0)


def test_depthwise_conv_uses_group_variable():
    g, _ = graph("depthwise_conv")
    op = only(g, "contraction")
    assert op.extents["g"] == 4 and "c" not in op.extents and "fo" not in op.extents
    assert op.reduction_vars == ("kh", "kw")


def test_grouped_conv_splits_features_and_fuses_relu():
    g, _ = graph("grouped_conv_relu")
    assert kinds(g) == ["contraction"]
    op = g.ops[0]
    assert op.extents["g"] == 2 and op.extents["fo"] == 3 and op.extents["c"] == 2
    assert str(op.result.index_map[3]) == "3*g + fo"
    assert map_text(op, 0).endswith("2*g + c")
    assert op.fused == ("add", "max")


def test_strided_dilated_conv_map():
    g, _ = graph("strided_dilated_conv")
    assert kinds(g) == ["layout", "contraction"]
    assert "2*h + 2*kh" in map_text(g.ops[1], 0)


def test_transposed_conv_uses_interior_padding():
    g, _ = graph("transposed_conv")
    pad = g.ops[0]
    assert pad.name == "pad" and any(e.exact and e.div == 2 for e in pad.operands[0].index_map)


def test_layout_ops():
    g, _ = graph("pad")
    assert kinds(g) == ["layout"]
    assert g.as_text() == "y[i,j] = where(inbounds(x[i - 1,j]), x[i - 1,j], 1.5)   i<6 j<7"
    g, _ = graph("interior_pad")
    assert [str(e) for e in g.ops[0].operands[0].index_map] == ["(i - 1) / 2", "j / 3"]
    g, _ = graph("concat")
    assert kinds(g) == ["layout"] and len(g.ops[0].operands) == 3
    g, _ = graph("slice")
    assert [str(e) for e in g.ops[0].operands[0].index_map] == ["2*i + 1", "3*j"]
    g, _ = graph("reshape")
    assert kinds(g) == ["layout", "elementwise"]
    assert any(e.div > 1 or e.mod for e in g.ops[0].operands[0].index_map)
    g, _ = graph("transpose")
    assert g.as_text() == "y[i,j,k] = x[j,k,i]   i<4 j<2 k<3"
    g, _ = graph("flip")
    assert kinds(g) == ["layout", "elementwise"] and g.ops[0].name == "rev"


def test_sort_and_argmax_are_host_ops():
    g, _ = graph("sort")
    assert kinds(g) == ["host", "elementwise"]
    host = g.ops[0]
    assert host.name == "sort" and "permutation" in host.host.reason
    assert g.as_text().splitlines()[0].startswith("t0 = sort(x)   [host: ")
    g, _ = graph("argmax")
    assert kinds(g) == ["host"] and "combiner" in g.ops[0].host.reason
