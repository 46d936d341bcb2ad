"""benchmarks/gpu_kernels.py beyond GEMVs (issue 41): the cases of every kernel class the GPU
models use, and `class_ratios`' parsing and aggregation on a small synthetic file
(tests/hw/data/gpu_kernels_synthetic.json -- made-up times, not a measurement).

The expected ratios are derived here from the roofline's definition (bytes / (bandwidth x
0.81) vs FLOP / (peak x 0.8), + 36 ns) and the H100 datasheet numbers of `hw.host`."""
import json
import pathlib
import statistics
import sys

import pytest

from pimjax.hw.host import (
    A100_BW_EFFICIENCY,
    A100_FLOPS_EFFICIENCY,
    A100_LAUNCH_NS,
    H100_HBM3_BANDWIDTH,
    H100_PEAK_FP16_FLOPS,
)

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_kernels  # noqa: E402

SYNTHETIC = pathlib.Path(__file__).parent / "data" / "gpu_kernels_synthetic.json"
EB = 2


def roof(bytes_, flops):
    """The H100 roofline, from its parameters."""
    return max(bytes_ / (H100_HBM3_BANDWIDTH * A100_BW_EFFICIENCY),
               flops / (H100_PEAK_FP16_FLOPS * A100_FLOPS_EFFICIENCY)) * 1e9 + A100_LAUNCH_NS


def roofline_ns(c):
    """What the roofline charges case c, each operand read once, derived from its shape."""
    k = c["kind"]
    if k == "gemv":
        return roof((c["N"] * c["K"] + c["K"] + c["N"]) * EB, 2.0 * c["N"] * c["K"])
    if k == "gemm":
        M, N, K = c["M"], c["N"], c["K"]
        return roof((M * K + K * N + M * N) * EB, 2.0 * M * N * K)
    if k == "conv":
        H, W, C, F, Kk, g = c["H"], c["W"], c["C"], c["F"], c["K"], c["groups"]
        p = (Kk - 1) // 2
        x = (H + 2 * p) * (W + 2 * p) * C                   # the traced op reads the padded input
        w = Kk * Kk * (C // g) * F
        return roof((x + w + H * W * F) * EB, 2.0 * H * W * F * (C // g) * Kk * Kk)   # stride 1 cases
    if k == "prefill":
        bh, L, D = c["B"] * c["H"], c["L"], c["D"]
        score = roof(bh * (L * D + D * L + L * L) * EB, 2.0 * bh * L * L * D)
        soft = roof(2 * EB * bh * L * L, 5.0 * bh * L * L)
        ctx = roof(bh * (L * L + L * D + L * D) * EB, 2.0 * bh * L * D * L)
        return score + soft + ctx
    if k == "layernorm":
        return roof(EB * (2 * c["T"] * c["E"] + 2 * c["E"]), 8.0 * c["T"] * c["E"])
    if k == "map":
        return roof(EB * c["N"] * (3 if c["op"] == "add" else 2), c["N"])
    raise AssertionError(k)


@pytest.fixture(scope="module")
def synthetic():
    return json.loads(SYNTHETIC.read_text())


@pytest.mark.parametrize("clock", ["graph", "jax"])
def test_class_ratios_aggregate_per_class(synthetic, clock):
    rows = gpu_kernels.class_ratios(synthetic, clock=clock, models=("roofline",))
    assert [r["cls"] for r in rows] == list(gpu_kernels.CLASSES)        # one row per class and model
    by = {r["cls"]: r for r in rows}
    # the classes of the file: expected ratios derived here; the failed case is left out
    want: dict = {}
    for r in synthetic["rows"]:
        if "torch_error" in r:
            continue
        t = r["jax_ns"] if clock == "jax" else (r["torch"].get(" unfused") or r["torch"][""])["graph_ns"]
        c = {k: v for k, v in r.items() if k not in ("torch", "jax_ns")}
        want.setdefault(gpu_kernels.kernel_class(c), []).append(roofline_ns(c) / t)
    assert set(want) == {"gemv", "gemm", "conv 1x1", "dwconv", "prefill attention", "normalisation", "elementwise"}
    for cls, ratios in want.items():
        got = by[cls]
        assert got["status"] == "measured" and got["model"] == "roofline" and got["n"] == len(ratios)
        assert got["min"] == pytest.approx(min(ratios), rel=1e-9)
        assert got["median"] == pytest.approx(statistics.median(ratios), rel=1e-9)
        assert got["max"] == pytest.approx(max(ratios), rel=1e-9)
    for cls in set(gpu_kernels.CLASSES) - set(want):                    # decode attention, conv kxk (failed), ...
        assert by[cls]["status"] == "not measured" and by[cls]["n"] == 0 and by[cls]["median"] is None


def test_class_ratios_on_every_generic_model(synthetic):
    from pimjax.hw.gpu import GENERIC_GPU_MODELS
    rows = [r for r in gpu_kernels.class_ratios(synthetic) if r["status"] == "measured"]
    assert {r["model"] for r in rows} == set(GENERIC_GPU_MODELS)          # "pimflow" times no measured GPU
    assert all(0 < r["min"] <= r["median"] <= r["max"] for r in rows)


def test_measured_ns_reads_the_three_kernel_attention():
    row = {"torch": {" unfused": {"graph_ns": 3.0}, " fused (sdpa)": {"graph_ns": 1.0}}, "jax_ns": 5.0}
    assert gpu_kernels.measured_ns(row) == 3.0 and gpu_kernels.measured_ns(row, "jax") == 5.0
    assert gpu_kernels.measured_ns({"torch_error": "x"}) is None


def test_committed_files_report_their_gemv_classes_and_not_measured_for_the_rest():
    """Today's H100 / H200 files: GEMV, decode attention, reductions, maps and launch are measured;
    GEMM, convolutions, prefill attention and norms are "not measured"."""
    for name in ("gpu_kernels_h100.json", "gpu_kernels_h200.json"):
        data = json.loads((ROOT / "benchmarks" / "data" / name).read_text())
        status = {r["cls"]: r["status"] for r in gpu_kernels.class_ratios(data)}
        assert status["gemv"] == "measured"
        for cls in ("gemm", "conv 1x1", "conv kxk", "dwconv", "prefill attention", "normalisation"):
            assert status[cls] == "not measured"


def test_cnn_shapes_file_is_cnn_layers():
    """The shapes the measuring machine reads (no pimjax there) are cnn_layers' CONV / DW CONV
    nodes of the five CNNs, deduplicated; every class of convolution is among them."""
    from pimjax.models import cnn
    shapes = gpu_kernels.cnn_conv_shapes()
    assert shapes == gpu_kernels.derive_cnn_shapes()
    keys = {tuple(s[k] for k in ("H", "W", "C", "F", "K", "stride", "groups")) for s in shapes}
    assert len(keys) == len(shapes)
    for m in gpu_kernels.CNN_MODELS:
        for r in cnn.cnn_layers(m).to_dict("records"):
            if r["kind"] in ("conv", "dwconv"):
                assert tuple(int(r[k]) for k in ("H", "W", "C", "F", "K", "stride", "groups")) in keys
    classes = {gpu_kernels.kernel_class(dict(kind="conv", **s)) for s in shapes}
    assert classes == {"conv 1x1", "conv kxk", "dwconv"}


def test_cases_cover_every_class_with_unique_labels():
    cs = gpu_kernels.cases()
    labels = [gpu_kernels.label(c) for c in cs]
    assert len(labels) == len(set(labels))
    assert {gpu_kernels.kernel_class(c) for c in cs} == set(gpu_kernels.CLASSES)
    for c in cs:                                      # every case has operands for both libraries and a model time
        assert gpu_kernels._operands(c, "torch") and gpu_kernels._operands(c, "jax")


def test_model_side_times_every_new_case():
    """The table step times each new case on the measured GPU's models (a positive ns)."""
    from pimjax.hw.host import h100
    hosts = [h100(model=m) for m in ("roofline", "occupancy", "attacc")]
    for c in gpu_kernels.cases():
        if c["set"] in ("cnn", "gemm", "prefill", "norm") and (c["set"] != "cnn" or c["C"] <= 64):
            for h in hosts:
                assert gpu_kernels.model_ns(h, c) > 0, gpu_kernels.label(c)
