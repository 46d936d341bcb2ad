"""A traced convolution on the GPU side (`sim.host.op_conv_shape`, `hw.gpu.conv_ns`): its
parameters are read back from the traced contraction, the "library" model times it as cuDNN's
pick (`gpu_library.conv_ns`), every other model keeps the im2col product it had, and the
GPU-only run names the algorithm.  Expected parameters come from the lax call's own arguments."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax

from pimjax.hw import gpu_library
from pimjax.hw.gpu import conv_algorithm, conv_view, gemm_ns, gpu_time
from pimjax.hw.gpus import gpu
from pimjax.hw.profile import GpuProfile, profile_host
from pimjax.sim.gpu_kernels import conv_pick, gpu_kernels
from pimjax.sim.host import host_time, host_time_source, op_conv_shape, op_gemm_shape, op_kernel
from pimjax.trace.frontend import make_graph

S = jax.ShapeDtypeStruct
F16 = jnp.float16
LIB = gpu("t4", model="library")
OCC = gpu("t4", model="occupancy")


def conv_graph(n, h, w, c, f, k, stride, pad, depthwise, bias=False):
    groups = c if depthwise else 1

    def fn(x, wt, *b):
        y = lax.conv_general_dilated(x, wt, (stride, stride), [(pad, pad), (pad, pad)],
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=groups)
        return jax.nn.relu(y + b[0][None, None, None, :]) if b else y
    args = [S((n, h, w, c), F16), S((k, k, c // groups, f), F16)] + ([S((f,), F16)] if bias else [])
    return make_graph(fn, *args), groups


def conv_op(g):
    return next(op for op in g.ops if op.kind == "contraction")


def shapes_of(g):
    return {i: v.shape for i, v in enumerate(g.values)}


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 2), h=st.integers(5, 20), w=st.integers(5, 20), c=st.sampled_from([3, 8, 16]),
       mult=st.sampled_from([1, 2]), k=st.sampled_from([3, 5]), stride=st.integers(1, 2), pad=st.integers(0, 2),
       depthwise=st.booleans())
def test_a_traced_convolution_reads_back_as_the_lax_call(n, h, w, c, mult, k, stride, pad, depthwise):
    f = c if depthwise else c * mult
    g, groups = conv_graph(n, h, w, c, f, k, stride, pad, depthwise)
    op = conv_op(g)
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    got = op_conv_shape(op)
    # the rows and columns the windows read: the padded input, less what no window reaches
    assert got == {"n": n, "h": (oh - 1) * stride + k, "w": (ow - 1) * stride + k, "c": c, "f": f, "kh": k, "kw": k,
                   "stride": stride, "groups": groups}
    # the models without a convolution entry time the same im2col product as before
    assert conv_view(**got) == op_gemm_shape(op)


def test_a_one_by_one_convolution_and_a_plain_product_are_not_convolutions():
    g, _ = conv_graph(1, 8, 8, 16, 32, 1, 1, 0, False)
    assert op_conv_shape(conv_op(g)) is None and op_kernel(conv_op(g), shapes_of(g), 2)[0] == "gemm"
    mm = make_graph(lambda a, b: a @ b, S((8, 16), F16), S((16, 4), F16))
    assert op_conv_shape(mm.ops[0]) is None


@pytest.mark.parametrize("depthwise", [False, True])
def test_the_library_model_times_a_traced_convolution_as_cudnn_and_the_others_as_its_im2col_product(depthwise):
    n, h, w, c, f, k, pad = 1, 28, 28, 32, 32, 3, 1
    g, groups = conv_graph(n, h, w, c, f, k, 1, pad, depthwise)
    op, sh = conv_op(g), shapes_of(g)
    # the traced graph pads its input in an op of its own: the convolution reads the padded input
    want = float(gpu_library.conv_ns(LIB, n, h + 2 * pad, w + 2 * pad, c, f, k, k, 1, 0, groups, 2))
    assert host_time(op, LIB, sh, 2) == pytest.approx(want, rel=1e-12)
    assert gpu_time(LIB, "conv", **op_conv_shape(op)) == pytest.approx(want, rel=1e-12)
    assert host_time(op, OCC, sh, 2) == pytest.approx(gemm_ns(OCC, **op_gemm_shape(op), elem_bytes=2), rel=1e-12)
    assert conv_algorithm(OCC, **op_conv_shape(op)) == "im2col_gemm"
    # a measured profile holds no convolution: its base model fills it, and says so
    view = op_gemm_shape(op)              # a measured GEMM of the im2col view's shape does not time the convolution
    prof = profile_host(LIB, GpuProfile("t", ((view["m"], view["n"], view["k"], view["batch"], 2),), (1.0,)))
    assert host_time(op, prof, sh, 2) == pytest.approx(want, rel=1e-12)
    assert host_time_source(op, prof, sh, 2) == "model"


def test_the_gpu_only_run_names_cudnns_algorithm_and_keeps_the_epilogue_in_the_kernel():
    g, _ = conv_graph(1, 56, 56, 64, 64, 3, 1, 1, False, bias=True)
    ks = [k for k in gpu_kernels(g, LIB) if k.kind == "conv"]
    assert len(ks) == 1
    args = op_kernel(conv_op(g), shapes_of(g), 2)[1]
    args.pop("elem_bytes")
    assert ks[0].name == f"conv_general_dilated [{conv_algorithm(LIB, **args, elem_bytes=2)}]"
    # bias + ReLU run in the convolution's epilogue (cuDNN's fused bias-activation), no map of their own
    assert not [k for k in gpu_kernels(g, LIB) if k.ops == ks[0].ops and k.kind == "act"]


@pytest.mark.parametrize("c, f, groups, k, stride", [(16, 32, 4, 3, 1), (16, 32, 4, 3, 2), (8, 4, 4, 3, 1),
                                                      (8, 16, 8, 3, 1), (8, 4, 4, 1, 1), (8, 4, 4, 1, 2)])
def test_a_grouped_convolution_reads_back_its_groups_not_a_window_over_the_channels(c, f, groups, k, stride):
    """The input's channel index Cg * g + c (and the filter's Fo * g + fo) is no spatial window: a
    grouped convolution reads back as the lax call, or (1 x 1) not at all, never as the channels'
    window, and its im2col view stays `op_gemm_shape` (c 8, f 4, groups 4 had read as a 2-wide
    window of stride 2 over the channels, batch 1 instead of 4)."""
    n, h, w = 2, 9, 9

    def fn(x, wt):
        return lax.conv_general_dilated(x, wt, (stride, stride), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                        feature_group_count=groups)
    op = conv_op(make_graph(fn, S((n, h, w, c), F16), S((k, k, c // groups, f), F16)))
    got = op_conv_shape(op)
    if k == 1:
        assert got is None
        return
    o = (h - k) // stride + 1
    assert got == {"n": n, "h": (o - 1) * stride + k, "w": (o - 1) * stride + k, "c": c, "f": f, "kh": k, "kw": k,
                   "stride": stride, "groups": groups}
    assert conv_view(**got) == op_gemm_shape(op)


def test_a_strided_dimension_of_kernel_one_is_left_to_the_im2col_view():
    """A 3 x 1 kernel at stride 2 reads every other column without a window there: not a
    convolution `conv_ns` models (its input bytes would miss the skipped columns)."""
    g = make_graph(lambda x, w: lax.conv_general_dilated(x, w, (2, 2), [(1, 1), (0, 0)],
                                                         dimension_numbers=("NHWC", "HWIO", "NHWC")),
                   S((1, 16, 16, 8), F16), S((3, 1, 8, 8), F16))
    op = conv_op(g)
    assert op_conv_shape(op) is None and op_kernel(op, shapes_of(g), 2)[0] == "gemm"


def test_a_conv_kernel_names_cudnns_pick_only_where_the_gpu_model_has_one():
    """`conv_pick`: the library model's algorithm; None on a model that times the im2col product
    (occupancy, unfused; a profile host on occupancy, fused, labelled im2col_gemm) and for a non-conv kernel."""
    g, _ = conv_graph(1, 28, 28, 32, 32, 3, 1, 1, True)
    args = op_kernel(conv_op(g), shapes_of(g), 2)[1]
    picks = {k.kind: conv_pick(k) for k in gpu_kernels(g, LIB)}
    assert picks == {"copy": None, "conv": conv_algorithm(LIB, **args)} and picks["conv"] == "depthwise"
    prof = profile_host(OCC, GpuProfile("t", ((1, 1, 1, 1, 2),), (1.0,)))
    for host in (OCC, prof):
        (conv,) = [k for k in gpu_kernels(g, host) if k.kind == "conv"]
        assert conv_pick(conv) is None
