"""The GPU-only run as the libraries' kernels (`pimjax/sim/gpu_kernels.py`): which ops fuse,
what a fused kernel moves, and that the per-op shares add up.  Expected bytes are derived here
from the traced shapes, and expected times from the host model's own `elementwise_ns`."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pimjax
from pimjax.hw.gpus import gpu
from pimjax.sim.gpu_kernels import MAX_FUSED_ROW, fuses, gpu_kernels, op_gpu_ns
from pimjax.sim.host import host_time
from pimjax.trace.frontend import make_graph

S = jax.ShapeDtypeStruct
F16 = jnp.float16


def rms_norm(x, g):
    v = jnp.mean(x.astype(jnp.float32) ** 2, axis=-1, keepdims=True)
    return (x * jax.lax.rsqrt(v + 1e-6).astype(x.dtype)) * g[None, :]


def mlp(x, g, wg, wu, wd):
    h = rms_norm(x, g)
    return x + (jax.nn.silu(h @ wg) * (h @ wu)) @ wd


def attention(q, k, v):
    s = jnp.einsum("bhd,bhld->bhl", q, k) / 8.0
    return jnp.einsum("bhl,bhld->bhd", jax.nn.softmax(s, axis=-1), v)


def mlp_graph(t=8, d=512, f=1024):
    return make_graph(mlp, S((t, d), F16), S((d,), F16), S((d, f), F16), S((d, f), F16), S((f, d), F16))


LIB = gpu("a100", model="library")
OCC = gpu("a100", model="occupancy")


def test_the_papers_models_and_occupancy_run_every_op_as_its_own_kernel():
    g = mlp_graph()
    assert not fuses(OCC)
    ks = gpu_kernels(g, OCC)
    assert [k.ops for k in ks] == [(i,) for i in range(len(g.ops))]
    for k in ks:
        assert k.ns == pytest.approx(float(host_time(g.ops[k.ops[0]], OCC, dtype_bytes=2)))
    np.testing.assert_allclose(op_gpu_ns(g, OCC), [k.ns for k in ks])


def test_rms_norm_is_one_kernel_reading_x_and_g_and_writing_the_result():
    t, d = 8, 512
    g = make_graph(rms_norm, S((t, d), F16), S((d,), F16))
    assert len(g.ops) > 1                        # jnp's RMSNorm traces to several ops
    (k,) = gpu_kernels(g, LIB)
    assert k.kind == "norm" and k.ops == tuple(range(len(g.ops)))
    moved = (t * d + d + t * d) * 2              # x and g read once, y written once (FP16, dtype_bytes=2)
    # a norm is memory-bound: its arithmetic does not enter the time
    expect = LIB.elementwise_ns(moved, 0.0, outputs=t, reduction=d, kind="norm")
    assert k.ns == pytest.approx(expect, rel=1e-9)
    # one launch instead of one per op
    alone = sum(float(host_time(op, LIB, dtype_bytes=2)) for op in g.ops)
    assert k.ns < alone - (len(g.ops) - 1) * 0.5 * float(LIB.launch_overhead_ns)


def test_the_mlp_fuses_the_norm_and_runs_silu_mul_after_its_gemm():
    g = mlp_graph()
    ks = gpu_kernels(g, LIB)
    gemms = [k for k in ks if k.kind == "gemm"]
    assert len(gemms) == 3
    norm = [k for k in ks if k.kind == "norm"]
    assert len(norm) == 1 and len(norm[0].ops) == 3
    # SiLU(gate) * up reads a whole output-sized operand through a multiply: not a cuBLAS epilogue
    epi = [k for k in ks if k.kind == "act"]
    assert len(epi) == 1 and "logistic" in epi[0].name and epi[0].ops[0] in {k.ops[0] for k in gemms}
    # the residual add (beta * C) stays in the down projection's GEMM
    last = g.ops[-1]
    assert last.kind == "contraction" and "add" in last.fused
    assert sum(k.ops == (len(g.ops) - 1,) for k in ks) == 1
    # shares: every op's share, the kernels' total
    share = op_gpu_ns(g, LIB)
    assert share.shape == (len(g.ops),) and np.all(share > 0)
    assert share.sum() == pytest.approx(sum(k.ns for k in ks), rel=1e-12)


def test_softmax_is_one_kernel_between_the_two_products():
    g = make_graph(attention, S((2, 4, 64), F16), S((2, 4, 256, 64), F16), S((2, 4, 256, 64), F16))
    ks = gpu_kernels(g, LIB)
    assert [k.kind for k in ks] == ["gemm", "softmax", "gemm"]
    assert ks[1].ops == tuple(range(1, len(g.ops) - 1))


def test_a_whole_tensor_reduction_ends_its_kernel():
    n = 4 * MAX_FUSED_ROW

    def normalise(x):
        return x / jnp.sum(x)
    g = make_graph(normalise, S((n,), jnp.float32))
    ks = gpu_kernels(g, LIB)
    assert len(ks) == len(g.ops) and all(len(k.ops) == 1 for k in ks)


@settings(max_examples=20, deadline=None)
@given(t=st.integers(1, 64), d=st.sampled_from([64, 256, 1024, 4096]))
def test_fusing_never_costs_more_than_one_launch_per_op(t, d):
    """A fused norm moves less and launches once: never slower than its ops one by one."""
    g = make_graph(rms_norm, S((t, d), F16), S((d,), F16))
    fused = sum(k.ns for k in gpu_kernels(g, LIB))
    alone = sum(float(host_time(op, LIB, dtype_bytes=2)) for op in g.ops)
    assert fused <= alone


def test_the_report_lists_the_kernels_its_gpu_time_adds_up():
    d, f, t = 256, 512, 4
    k = jax.random.split(jax.random.PRNGKey(0), 5)
    args = [jax.random.normal(k[0], (t, d), F16), jnp.ones((d,), F16),
            jax.random.normal(k[1], (d, f), F16) * .05, jax.random.normal(k[2], (d, f), F16) * .05,
            jax.random.normal(k[3], (f, d), F16) * .05]
    be = pimjax.get_backend("attacc")
    be = be.replace(system=be.system.replace(gpu=LIB))
    lo = pimjax.pim_jit(mlp, backend=be, precision="convert").lower(*args)
    d_ = lo.cost_analysis()
    kernels = d_["gpu_kernels"]
    assert sum(x["ns"] for x in kernels) == pytest.approx(d_["gpu_ns"], rel=1e-9)
    assert {tuple(x["ops"]) for x in kernels if x["kind"] == "norm"} == {(0, 1, 2)}
    text = str(lo.report())
    assert "as one norm kernel" in text
    # issue 53: the op column shows what the trace fused into an op, and the table has a legend
    last = d_["ops"][-1]
    assert last["name"] == "dot_general" and tuple(last["fused"]) == ("add",)
    assert "dot_general+add" in text and "columns:" in text and "rearr/comp/rb/merge %:" in text
