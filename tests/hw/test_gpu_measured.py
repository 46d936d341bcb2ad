"""pimjax's GPU models against real kernel times measured on an H100 and
an H200 (`benchmarks/gpu_kernels.py`, data in
benchmarks/data/gpu_kernels_{h100,h200}.json)."""
import json
import pathlib
import sys

import pytest

from pimjax.hw import gpu
from pimjax.hw.host import H100_HBM3_BANDWIDTH, H100_PEAK_FP16_FLOPS, H100_SMS, H200_HBM3E_BANDWIDTH, h100, h200

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "benchmarks" / "data"
sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_kernels  # noqa: E402

# per GPU: its data file, its host model, the band of weight-GEMV model / measured on every model,
# and the occupancy model's band on every case.  The H100's GEMVs (52-210 MB of weights) stream at
# 2.49-2.76 TB/s, 74-82 % of its 3.35 TB/s, about the 0.81 the models charge.  On the H200 two of
# them (GPT-3 projection 5120 x 5120, LLaMA-2 down 4096 x 11008) reach only 2.96-3.23 TB/s, 62-67 % of
# its 4.8 TB/s, so the models are 0.75-0.89x on them; the other five 3.60-3.95 TB/s, LLaMA-2 up
# (11008 x 4096, the same 90 MB as down) and GPT-3 FFN2 (5120 x 20480) among them: a shape effect of
# the kernels cuBLAS picks, not size or row count alone, which no model charges.
GPUS = {"h100": ("gpu_kernels_h100.json", h100, (0.9, 1.1), (0.4, 1.35)),
        "h200": ("gpu_kernels_h200.json", h200, (0.7, 1.1), (0.35, 1.35))}


@pytest.fixture(scope="module", params=sorted(GPUS))
def gpu_data(request):
    fname, host, band, occ = GPUS[request.param]
    data = json.loads((DATA / fname).read_text())
    assert request.param.upper() in data["info"]["gpu"] and data["info"]["sms"] == H100_SMS
    assert gpu_kernels.host_of(data["info"], "roofline") == host(model="roofline")
    return DATA / fname, host, band, data["rows"], occ


@pytest.fixture(scope="module")
def measured(gpu_data):
    return gpu_data[3]


def _graph_ns(row):
    t = row["torch"]
    return (t[" unfused"] if row["kind"] == "attn" else t[""])["graph_ns"]


def test_h100_host_is_the_datasheet_gpu():
    h = h100(model="occupancy")
    assert (h.peak_flops, h.mem_bandwidth, h.sms) == (H100_PEAK_FP16_FLOPS, H100_HBM3_BANDWIDTH, H100_SMS)
    # a bandwidth-bound GEMV on the roofline: bytes / (bw x eff) + launch, derived here
    r = h100(model="roofline")
    n, k = 8192, 8192
    want = 2 * (n * k + n + k) / (r.mem_bandwidth * r.bandwidth_efficiency) * 1e9 + r.launch_overhead_ns
    assert gpu.gemm_ns(r, 1, n, k) == pytest.approx(want, rel=1e-9)
    with pytest.raises(ValueError, match="h100"):
        h100(memory="gddr6")
    # the H200: the same die and SM count on HBM3e, so a bandwidth-bound GEMV takes the bandwidth ratio
    h2 = h200(model="roofline")
    assert (h2.peak_flops, h2.mem_bandwidth, h2.sms) == (H100_PEAK_FP16_FLOPS, H200_HBM3E_BANDWIDTH, H100_SMS)
    assert (gpu.gemm_ns(h2, 1, n, k) - h2.launch_overhead_ns) / (want - r.launch_overhead_ns) == \
        pytest.approx(H100_HBM3_BANDWIDTH / H200_HBM3E_BANDWIDTH, rel=1e-9)


# the sets the committed H100 / H200 files measured (the CNN, GEMM, prefill and norm sets of issue 41
# came later: `class_ratios` says "not measured" for their classes until a run adds them)
MEASURED_SETS = ("dcc", "decode", "llm", "calib")


def test_every_case_was_measured(measured):
    known = [gpu_kernels.label(c) for c in gpu_kernels.cases() if c["set"] in MEASURED_SETS]
    assert [gpu_kernels.label(r) for r in measured if r["set"] in MEASURED_SETS] == known
    labels = {gpu_kernels.label(c) for c in gpu_kernels.cases()}
    for r in measured:
        assert gpu_kernels.label(r) in labels
        assert "torch_error" not in r and _graph_ns(r) > 0


def test_bandwidth_bound_gemvs_within_their_band_on_every_model(gpu_data):
    _, make, (lo, hi), measured, _ = gpu_data
    gemvs = [r for r in measured if r["kind"] == "gemv"]
    assert len(gemvs) == 7
    for m in gpu.GENERIC_GPU_MODELS:
        host = make(model=m)
        for r in gemvs:
            assert lo <= gpu_kernels.model_ns(host, r) / _graph_ns(r) <= hi, (m, r["name"])
            if 2 * r["N"] * r["K"] >= 100e6:           # the largest stream near the 0.81 on both GPUs
                assert gpu_kernels.model_ns(host, r) / _graph_ns(r) == pytest.approx(1.0, abs=0.1)


def test_occupancy_model_stays_within_its_recorded_band(gpu_data):
    """The default model on every measured kernel within its GPU's band of the
    GPU time (benchmarks/README.md records them: 0.42-1.31 on the H100, 0.36-1.27
    on the H200; few-head decode attention is the low end)."""
    _, make, _, measured, (lo, hi) = gpu_data
    host = make(model="occupancy")
    ratios = {gpu_kernels.label(r): gpu_kernels.model_ns(host, r) / _graph_ns(r) for r in measured}
    assert all(lo <= v <= hi for v in ratios.values()), {k: round(v, 2) for k, v in ratios.items()
                                                        if not lo <= v <= hi}
    # the launch-free roofline is far below small kernels: why occupancy is the default
    roof = make(model="roofline")
    small = [r for r in measured if r["kind"] in ("red", "va", "relu")]
    assert max(gpu_kernels.model_ns(roof, r) / _graph_ns(r) for r in small) < 0.1


def test_table_renders(gpu_data, capsys):
    path, _, _, measured, _ = gpu_data
    gpu_kernels.table(str(path), markdown=True)
    out = capsys.readouterr().out
    assert out.count("\n| ") >= len(measured)


def test_library_h100_card_holds_our_own_fp16_gemvs():
    """The `library` model's H100 card (`gpus.gpu("h100")`, the same SXM5 80 GB part; its constants fitted on
    NeuSight's FP32 rows) on our own seven fp16 weight GEMVs: each within issue 49's band, the median within its
    0.9-1.1 -- its streaming share is the maps' fit (0.92 since the traced no-ops left the floor), while cuBLAS's
    GEMVs reach 74-82 % of the 3.35 TB/s: the guard on the decode GEMMs of the hidden A100 / H100 sets."""
    from pimjax.hw.gpu_check import ACCEPT_MEDIAN, BAND
    from pimjax.hw.gpus import gpu as card
    data = json.loads((DATA / GPUS["h100"][0]).read_text())
    host = card("h100", model="library")
    ratios = [gpu_kernels.model_ns(host, r) / _graph_ns(r) for r in data["rows"] if r["kind"] == "gemv"]
    assert len(ratios) == 7
    assert all(BAND[0] <= x <= BAND[1] for x in ratios), ratios
    med = sorted(ratios)[3]
    assert ACCEPT_MEDIAN[0] <= med <= ACCEPT_MEDIAN[1], ratios
