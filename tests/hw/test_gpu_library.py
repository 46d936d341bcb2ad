"""The "library" GPU model (`pimjax/hw/gpu_library.py`), the measured sets it is held to
(`pimjax/hw/measured`), the check (`pimjax/hw/gpu_check.py`) and the GPU described by its own
measurements (`pimjax/hw/profile.py`).  Expectations are derived here from the hosts' fields."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pimjax.hw import gpu_check, measured
from pimjax.hw import gpu_library as L
from pimjax.hw.gpus import GPU_SPECS, gpu
from pimjax.hw.profile import GpuProfile, lookup, profile_host, profile_source


# --- the measured sets -------------------------------------------------------------------------
def test_every_measured_file_names_its_source_commit_and_units():
    for name in measured.sources():
        h = measured.header(name)
        assert {"source", "path", "commit", "units", "notes"} <= set(h), (name, h)
        assert re.fullmatch(r"[0-9a-f]{40}", h["commit"]), name
        assert "/" in h["source"] and "us" in h["units"].replace("µ", "u"), name
        rows = measured.load(name)
        assert len(rows["time_us"]) > 0 and np.all(rows["time_us"] > 0), name
        assert set(rows["gpu"]) <= set(GPU_SPECS), (name, set(rows["gpu"]) - set(GPU_SPECS))


def test_llmcompass_gemm_rows_are_its_tflops():
    """LLMCompass's GEMM file gives ms and TFLOP/s: 2 m n k / time must be what its plot shows
    (the large A100 products run at 230-280 TFLOP/s of the 312 peak)."""
    r = measured.load("llmcompass", gpu="a100", op="gemm")
    big = (r["m"] >= 8192) & (r["n"] >= 8192)
    tflops = 2.0 * r["m"] * r["n"] * r["k"] / (r["time_us"] * 1e-6) / 1e12
    assert np.all((tflops[big] > 200) & (tflops[big] < 312))


def test_load_filters_and_refuses_unknown_sources():
    r = measured.load(gpu="v100", cls="map")
    assert set(r["gpu"]) == {"v100"} and all(measured.op_class(o) == "map" for o in r["op"])
    with pytest.raises(ValueError, match="valid sources"):
        measured.load("nonesuch")


# --- the library model, from its host's fields ----------------------------------------------------
def test_library_gemv_is_the_operands_at_the_fitted_bandwidth():
    h = gpu("h100").replace(launch_overhead_ns=0.0)
    n = k = 8192
    want = (n * k + k + n) * 2 / (float(h.mem_bandwidth) * float(h.bandwidth_efficiency)) * 1e9
    assert h.gemm_ns(1, n, k) == pytest.approx(want, rel=1e-12)


def test_library_gemm_waves_quantise_on_the_sms():
    """A compute-bound product whose 128 x 128 tiles fill exactly one wave of SMs costs one
    wave; one more tile row costs a second wave of the fastest tile that covers it."""
    h = gpu("v100").replace(launch_overhead_ns=0.0, mem_bandwidth=1e18)
    sms, k = h.sms, 4096
    per_sm = float(h.simt_flops) * float(h.flops_efficiency) / sms
    one = 2 * 128 * 128 * k / per_sm * 1e9 + float(h.wave_overhead_ns)
    m, n = 128 * (sms // 10), 128 * 10                      # sms tiles of 128 x 128
    assert h.gemm_ns(m, n, k, elem_bytes=4) == pytest.approx(one, rel=1e-9)
    assert h.gemm_ns(m + 128, n, k, elem_bytes=4) > h.gemm_ns(m, n, k, elem_bytes=4)


def _compute_only(name, **kw):
    """The card's library host with no launch and an endless memory: its products' tile waves alone."""
    return gpu(name).replace(launch_overhead_ns=0.0, mem_bandwidth=1e18, **kw)


def test_library_single_product_splits_k_when_its_tiles_leave_sms_idle():
    """One 32 x 32 tile of a long k: the fastest split (s blocks of k / s each, one wave while
    s <= SMs) plus its s partial tiles of FP32 sums written and read back."""
    h = _compute_only("v100", wave_overhead_ns=0.0)
    per_sm = float(h.simt_flops) * float(h.flops_efficiency) / h.sms
    bw = float(h.mem_bandwidth) * float(h.bandwidth_efficiency)
    m = n = 32
    k = 1 << 16
    want = min(2 * 32 * 32 * k / s / per_sm * 1e9 + (s > 1) * 2 * s * m * n * 4 / bw * 1e9 for s in L.SPLIT_K)
    assert h.gemm_ns(m, n, k, elem_bytes=4) == pytest.approx(want, rel=1e-12)
    assert want < 2 * 32 * 32 * k / per_sm * 1e9 / 2          # the split is taken: at least twice as fast


def test_library_split_k_partials_are_charged_per_product_of_a_batch():
    """A batch of GEMV-like products (m = 1: no tile penalty, may split k) at a finite bandwidth: the
    fastest split's waves plus its s x batch partial rows of FP32 sums written and read, against the
    operands' streaming -- doubling the batch doubles the partials."""
    h = gpu("v100").replace(launch_overhead_ns=0.0, wave_overhead_ns=0.0, mem_bandwidth=1e14)
    per_sm = float(h.simt_flops) * float(h.flops_efficiency) / h.sms
    bw = float(h.mem_bandwidth) * float(h.bandwidth_efficiency)
    m, n, k = 1, 32, 1 << 16
    for b in (2, 4):
        tiles = min(math.ceil(b * math.ceil(m / tm) * math.ceil(n / tn) * s / h.sms)
                    * 2 * tm * tn * math.ceil(k / s) / per_sm * 1e9 + (s > 1) * 2 * s * b * m * n * 4 / bw * 1e9
                    for tm, tn in L.LIB_TILES for s in L.SPLIT_K)
        stream = b * (m * k + k * n + m * n) * 4 / bw * 1e9
        assert h.gemm_ns(m, n, k, batch=b, elem_bytes=4) == pytest.approx(max(tiles, stream), rel=1e-12)
        assert tiles > stream            # the tile waves and their partials decide, not the streaming


def test_library_batched_product_keeps_its_large_tile_by_batched_tile_alpha():
    """batch > 1: a tile m x n runs at (I / I_max)^alpha of the rate (I = m n / (m + n)); with a
    large alpha a batch of thin products pads the 128 x 128 tile, with alpha 0 the small tile
    that fits wins; no split-K either way."""
    sms = gpu("a100-40gb").sms
    b, m, n, k = 4 * sms, 128, 16, 512
    for alpha in (0.0, 2.0, 8.0):
        h = _compute_only("a100-40gb", wave_overhead_ns=0.0, batched_tile_alpha=alpha)
        per_sm = float(h.simt_flops) * float(h.flops_efficiency) / h.sms
        i_max = max(tm * tn / (tm + tn) for tm, tn in L.LIB_TILES)
        want = min(math.ceil(b * math.ceil(m / tm) * math.ceil(n / tn) / sms) * 2 * tm * tn * k
                   / (per_sm * (tm * tn / (tm + tn) / i_max) ** alpha) * 1e9 for tm, tn in L.LIB_TILES)
        assert h.gemm_ns(m, n, k, batch=b, elem_bytes=4) == pytest.approx(want, rel=1e-12)
    padded = math.ceil(b / sms) * 2 * 128 * 128 * k / per_sm * 1e9       # alpha 8: the 128 x 128 tile, padded
    assert h.gemm_ns(m, n, k, batch=b, elem_bytes=4) == pytest.approx(padded, rel=1e-12)
    # a batched GEMV (m = 1) is not a tiled product: no penalty, as alpha 0
    assert h.gemm_ns(1, 4096, k, batch=b, elem_bytes=4) == \
        h.replace(batched_tile_alpha=0.0).gemm_ns(1, 4096, k, batch=b, elem_bytes=4)


def test_library_unaligned_product_runs_at_its_share_of_the_rate():
    """m, n, k multiples of 16 bytes: the vectorised kernels; one dimension off: the arithmetic
    at unaligned_efficiency of the rate."""
    h = _compute_only("p4", unaligned_efficiency=0.5)
    full = h.replace(unaligned_efficiency=1.0)
    for eb, (m, n, k) in ((4, (1024, 1024, 1025)), (2, (1024, 1028, 1024)), (4, (1023, 1024, 1024))):
        assert h.gemm_ns(m, n, k, elem_bytes=eb) == pytest.approx(2 * full.gemm_ns(m, n, k, elem_bytes=eb), rel=1e-12)
    assert h.gemm_ns(1024, 1024, 1024, elem_bytes=4) == full.gemm_ns(1024, 1024, 1024, elem_bytes=4)
    # a batch of tiled products too; a GEMV (m = 1) runs gemv kernels, no alignment to lose
    assert h.gemm_ns(1024, 1024, 1025, batch=2, elem_bytes=4) == \
        pytest.approx(2 * full.gemm_ns(1024, 1024, 1025, batch=2, elem_bytes=4), rel=1e-12)
    assert h.gemm_ns(1, 4097, 4097, elem_bytes=4) == full.gemm_ns(1, 4097, 4097, elem_bytes=4)


def test_library_dtype_rates_come_from_the_datasheet():
    h = gpu("a100-40gb")
    assert float(L.dtype_flops(h, 4)) == GPU_SPECS["a100-40gb"][2]
    assert float(L.dtype_flops(h, 2)) == GPU_SPECS["a100-40gb"][1]
    assert float(L.dtype_flops(h, 1)) == 2 * GPU_SPECS["a100-40gb"][1]


def _bytes_only(h):
    """`h` with its row kernels timed by their bytes alone, at the maps' bandwidth (no latency
    bound, no row bandwidth of their own) and no launch: the reads the dispatch makes."""
    return h.replace(launch_overhead_ns=0.0, row_bandwidth_efficiency=0.0, row_pass_ns=0.0, row_elem_ns=0.0)


def test_library_norm_reads_its_row_twice_the_second_time_from_the_l2_while_the_rows_fit():
    """A norm row is read twice: the re-read costs 1 / L2_REREAD_SPEEDUP of a memory read while
    the rows of its blocks in flight (THREADS_PER_SM / NORM_BLOCK_THREADS an SM) fit the L2."""
    h = _bytes_only(gpu("t4"))
    rows = 4096
    fits = h.l2_bytes / (h.sms * L.THREADS_PER_SM / L.NORM_BLOCK_THREADS)     # the longest row that fits, bytes

    def ratio(cols):          # the norm over a map moving the same bytes (one read, one write)
        nbytes = 2 * rows * cols * 4
        mp = h.elementwise_ns(nbytes, outputs=rows * cols, kind="act")
        assert mp == pytest.approx(nbytes / (float(h.mem_bandwidth) * float(h.bandwidth_efficiency)) * 1e9)
        return h.elementwise_ns(nbytes, outputs=rows, reduction=cols, kind="norm") / mp

    c_in = int(fits // 4)
    assert ratio(c_in) == pytest.approx(1 + 0.5 / L.L2_REREAD_SPEEDUP)
    assert ratio(c_in + 1) == pytest.approx(1.5)


def test_library_softmax_passes_follow_atens_dispatch_and_the_l2():
    """A softmax row of <= 1024 elements and 4 KB is read once (the warp kernel), and so is a row
    of whole 16-byte vectors under SOFTMAX_SMEM_BYTES (the shared-memory block kernel); another
    row three times, its two re-reads at L2_REREAD_SPEEDUP x the memory's speed while the rows in
    flight (max(2048 threads x 16 B, 2 rows) an SM) fit the L2, at the memory's speed beyond."""
    h = _bytes_only(gpu("v100"))
    rows = 8192

    def read(cols):
        return rows * cols * 4 / (float(h.mem_bandwidth) * float(h.bandwidth_efficiency)) * 1e9

    def sm(cols):
        return h.elementwise_ns(2 * rows * cols * 4, outputs=rows, reduction=cols, kind="softmax")

    assert sm(1024) == pytest.approx(2 * read(1024))                    # read once, written once
    assert sm(1028) == pytest.approx(2 * read(1028))                    # 257 float4s: the row in shared memory
    assert sm(1027) == pytest.approx((2 + 2 / L.L2_REREAD_SPEEDUP) * read(1027))
    fits = h.l2_bytes // (2 * h.sms)                                   # the longest row whose rows in flight fit
    assert h.sms * L.THREADS_PER_SM * L.SOFTMAX_BLOCK_BYTES < h.l2_bytes          # (so the 1027-element row's do)
    c_in, c_out = fits // 4 - 1, fits // 4 + 1                        # odd: not whole float4s
    assert c_in % 4 and c_out % 4
    assert sm(c_in) == pytest.approx((2 + 2 / L.L2_REREAD_SPEEDUP) * read(c_in))
    assert sm(c_out) == pytest.approx(4 * read(c_out))
    # a larger L2 keeps the long row's re-reads in it
    big = h.replace(l2_bytes=h.l2_bytes * 8)
    assert big.elementwise_ns(2 * rows * c_out * 4, outputs=rows, reduction=c_out, kind="softmax") < sm(c_out)
    # whole float4s but over the shared memory: three passes
    c_big = L.SOFTMAX_SMEM_BYTES // 4
    assert not L.softmax_smem(c_big, c_big * 4) and L.softmax_smem(c_big - 4, (c_big - 4) * 4)
    # fp16 rows: the warp kernel's 4 KB bound is 1024 elements for both dtypes (1024 x 2 B < 4 KB); a
    # float4 holds 8 of them
    assert float(L.row_extra_reads(h, "softmax", 1024, 2048)) == 0.0
    assert float(L.row_extra_reads(h, "softmax", 1025, 2050)) == pytest.approx(2 / L.L2_REREAD_SPEEDUP)
    assert float(L.row_extra_reads(h, "softmax", 1028, 2056)) == pytest.approx(2 / L.L2_REREAD_SPEEDUP)
    assert float(L.row_extra_reads(h, "softmax", 1032, 2064)) == 0.0


def test_library_row_kernels_stream_at_their_own_share_of_the_bandwidth():
    """A row kernel's bytes go at row_bandwidth_efficiency (a map's at bandwidth_efficiency);
    0 falls back to the maps' share."""
    h = _bytes_only(gpu("l4"))
    rows, cols = 4096, 1024                                   # a warp-kernel softmax row: read once
    nbytes = 2 * rows * cols * 4
    base = h.elementwise_ns(nbytes, outputs=rows, reduction=cols, kind="softmax")
    assert base == pytest.approx(nbytes / (float(h.mem_bandwidth) * float(h.bandwidth_efficiency)) * 1e9)
    eff = 0.5 * float(h.bandwidth_efficiency)
    own = h.replace(row_bandwidth_efficiency=eff)
    assert own.elementwise_ns(nbytes, outputs=rows, reduction=cols, kind="softmax") == pytest.approx(
        nbytes / (float(h.mem_bandwidth) * eff) * 1e9)
    assert own.elementwise_ns(nbytes, outputs=rows * cols, kind="act") == h.elementwise_ns(
        nbytes, outputs=rows * cols, kind="act")                              # maps keep theirs
    with pytest.raises(ValueError, match="row_bandwidth_efficiency"):
        h.replace(row_bandwidth_efficiency=1.5)


@pytest.mark.parametrize("kind,cols,passes", [("norm", 512, 2), ("norm", 3000, 2), ("softmax", 3000, 3),
                                              ("softmax", 1024, 0), ("act", 1, 0)])
def test_library_row_latency_is_its_passes_per_row_on_the_sms(kind, cols, passes):
    """A row kernel takes at least ceil(rows / SMs) x passes x (row_pass_ns + cols x row_elem_ns): the
    passes ATen's dispatch makes (norm 2; softmax's block kernel 3; its warp kernel and maps
    none); on a host with long latencies that bound is the time."""
    h = _bytes_only(gpu("mi210")).replace(row_pass_ns=5e4, row_elem_ns=50.0)
    rows = 2 * h.sms
    assert float(L.row_passes(kind, cols, cols * 4)) == passes
    want = rows / h.sms * passes * (5e4 + cols * 50.0)
    assert float(L.row_latency_ns(h, kind, rows, cols, cols * 4)) == pytest.approx(want)
    # an SM runs whole rows: one row, or one more than fills the SMs, costs a whole row's latency
    one = passes * (5e4 + cols * 50.0)
    assert float(L.row_latency_ns(h, kind, 1, cols, cols * 4)) == pytest.approx(one)
    assert float(L.row_latency_ns(h, kind, rows + 1, cols, cols * 4)) == pytest.approx(want + one)
    t = h.elementwise_ns(2 * rows * cols * 4, outputs=rows, reduction=cols, kind=kind)
    t_bytes = _bytes_only(gpu("mi210")).elementwise_ns(2 * rows * cols * 4, outputs=rows, reduction=cols, kind=kind)
    assert t == pytest.approx(max(want, t_bytes))
    if passes:
        assert want > t_bytes                                  # (the case tests the bound)


def test_library_map_arithmetic_runs_at_the_vector_rate_and_pow_at_its_library_cost():
    """A map's FLOPs go at the FP32 vector rate (AMD: the datasheet's vector rate, half its
    matrix rate; NVIDIA: the CUDA cores'); gpu_check charges a swept pow `pow_flops` an element,
    a traced model's pow (GPT-2's x^3, multiplications) none."""
    from pimjax.hw.gpus import GPU_ARCH
    for name in ("mi210", "v100"):
        h = _bytes_only(gpu(name))
        assert h.vector_flops == GPU_ARCH[name][1] and float(L.vector_flops(h)) == h.vector_flops
        n = 1 << 26
        flops = n * 400.0
        t = h.elementwise_ns(8.0 * n, flops, outputs=n, kind="act")
        assert t == pytest.approx(max(8.0 * n / (float(h.mem_bandwidth) * float(h.bandwidth_efficiency)),
                                      flops / h.vector_flops) * 1e9)
    assert gpu("mi210").vector_flops < gpu("mi210").simt_flops              # vector < matrix on CDNA
    assert float(L.vector_flops(gpu("v100").replace(vector_flops=0.0))) == gpu("v100").simt_flops
    # the check: the same pow row as a sweep and as a trace node
    h = gpu_check.host_for("mi210", "library").replace(launch_overhead_ns=0.0)
    assert h.pow_flops > 0
    n = 1 << 26
    rows = {c: np.zeros(2, np.int64) for c in measured.INT_COLUMNS}
    rows.update(numel=np.full(2, n), time_us=np.ones(2), gpu=np.full(2, "mi210", object),
                op=np.full(2, "powu", object), dtype=np.full(2, "fp32", object),
                source=np.array(["neusight_ops_mi210", gpu_check.TRACES], object), conv=np.full(2, "", object),
                context=np.full(2, "", object))
    sweep, trace = gpu_check.model_us(h, rows, "map")
    assert trace * 1e3 == pytest.approx(h.elementwise_ns(8.0 * n, outputs=n, kind="act"))
    assert sweep * 1e3 == pytest.approx(h.elementwise_ns(8.0 * n, n * h.pow_flops, outputs=n, kind="act"))
    assert sweep > trace


def test_map_bytes_count_the_operands_each_op_really_moves():
    """Bytes an element: output + full-size inputs, a bool mask (1 B) where the op has one, an
    out-of-place masked_fill's clone, an index_select's int64 index."""
    ops = ["add", "addu", "where", "maximum", "masked_fill", "masked_fill", "dropout", "embedding", "gelu"]
    ctx = ["", "", "", "", "m:masked_fill", "m:masked_fill_", "", "", ""]
    eb, mask, index = 4, 1, 8              # fp32 elements, a bool mask's byte, an int64 index
    want = [eb * (1 + 2),                  # add: out + two full inputs
            eb * (1 + 1),                  # addu: a Python scalar operand
            eb * (1 + 1) + mask,           # where(mask, x, 0-d): the mask beside the input
            eb * (1 + 1),                  # maximum(x, 0-d)
            2 * eb * (1 + 1) + mask,       # masked_fill: the clone (read + write), then read, mask, write
            eb * (1 + 1) + mask,           # masked_fill_: in place, no clone
            eb * (1 + 1) + mask,           # dropout: writes its mask
            eb * (1 + 1) + index,          # embedding: the table element and its index
            eb * (1 + 1)]                  # gelu
    got = gpu_check.map_bytes(np.array(ops, object), np.array(ctx, object), eb)
    assert list(got) == want
    assert list(gpu_check.map_bytes(np.array(["add", "where"], object), np.array(["", ""], object), 2)) == [6, 5]


def test_a_traced_no_op_is_neither_checked_nor_the_floor():
    """OPT's p=0 attention dropout and its logits' .contiguous() run no kernel (GPT-2's dropout does):
    `prepare` drops them and the floor is the percentile of the rows that do launch one."""
    ctx = ["opt_13 s=2048 b=1 train-fwd model.decoder.layers.0.self_attn:dropout", "opt_13 s=2048 b=2 inf contiguous_3",
           "gpt2_large s=1024 b=1 train-fwd transformer.drop"]
    assert list(gpu_check.runs_kernel({"context": np.array(ctx, object)})) == [False, False, True]
    # its bytes are any dropout's: out, in and the mask (it is skipped, not zeroed)
    assert list(gpu_check.map_bytes(np.array(["dropout"], object), np.array(ctx[:1], object), 4)) == [9]
    n = 40
    rows = {c: np.zeros(n, np.int64) for c in measured.INT_COLUMNS}
    t = np.linspace(12.0, 100.0, n)
    t[:4] = 6.6                                       # four no-ops, at the framework's dispatch alone
    rows.update(numel=np.full(n, 1 << 20), time_us=t, gpu=np.full(n, "h100", object), op=np.full(n, "copy", object),
                dtype=np.full(n, "fp32", object), source=np.full(n, "neusight_models", object),
                conv=np.full(n, "", object),
                context=np.array([ctx[1]] * 4 + ["gpt2_large s=1024 b=1 inf transformer.h.0:copy"] * (n - 4), object))
    cls, fl, keep = gpu_check.prepare(rows, "all")
    assert np.allclose(fl, np.percentile(t[4:], gpu_check.FLOOR_PERCENTILE)) and fl[0] > 6.6
    kernel = np.arange(n) >= 4
    assert list(keep) == list(kernel)
    # the split's parity is the rows' order in their file, no-ops counted: skipping them moves no other row
    assert list(gpu_check.prepare(rows, "odd")[2]) == list((np.arange(n) % 2 == 1) & kernel)
    assert list(gpu_check.prepare(rows, "even")[2]) == list((np.arange(n) % 2 == 0) & kernel)
    (row,) = gpu_check.class_table("library", gpus=("h100",), classes=("map",), split="all", rows=rows)
    assert row["rows"] == n - 4
    # a group of no-ops alone keeps a floor (its own percentile), though none of it is checked
    only = {c: a[:4] for c, a in rows.items()}
    _, fl4, keep4 = gpu_check.prepare(only, "all")
    assert np.allclose(fl4, 6.6) and not keep4.any()


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 65536), st.integers(2, 32768), st.sampled_from([2, 4]), st.sampled_from(["softmax", "norm"]),
       st.sampled_from(sorted(GPU_SPECS)), st.booleans())
def test_library_row_kernels_never_get_faster_with_longer_or_more_rows(rows, cols, eb, kind, name, longer):
    """More work never costs less: the warp kernel's bound, the block kernel's passes and the
    L2's capacity only add reads as a row grows -- but for the one step ATen takes the other
    way: a softmax row that becomes whole 16-byte vectors moves to the shared-memory kernel,
    which reads it once (`softmax_smem`; such a pair is compared on rows only).  (Rows of >= 2
    elements: a one-element "row" is timed as a map, its blocks 512 outputs each.)"""
    h = gpu(name).replace(launch_overhead_ns=0.0)
    if longer and kind == "softmax" and L.softmax_smem(cols + 1, (cols + 1) * eb) != L.softmax_smem(cols, cols * eb):
        longer = False
    r2, c2 = (rows, cols + 1) if longer else (rows + 1, cols)
    t = h.elementwise_ns(2 * rows * cols * eb, outputs=rows, reduction=cols, kind=kind)
    # equal times (a latency-bound pair, rows=2 cols=2 -> 3 x 2 on the A100) come out of different
    # float sums and may differ in the last bit, either way: a tie within 1e-12 is not a decrease
    assert h.elementwise_ns(2 * r2 * c2 * eb, outputs=r2, reduction=c2, kind=kind) >= t * (1 - 1e-12)
    assert t > 0


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4096), st.integers(1, 4096), st.integers(1, 4096), st.integers(1, 16),
       st.sampled_from([1, 2, 4]), st.sampled_from(sorted(GPU_SPECS)), st.integers(0, 3))
def test_library_gemm_never_gets_faster_with_more_work(m, n, k, b, eb, name, dim):
    """Doubling m, n, k or the batch never costs less -- at one alignment: doubling a dimension
    can make an unaligned product aligned, whose vectorised kernel is faster (as on the cards:
    `test_library_unaligned_product_runs_at_its_share_of_the_rate`), so the unaligned
    kernels' share is 1 here."""
    h = gpu(name).replace(unaligned_efficiency=1.0)
    shape = [m, n, k, b]
    bigger = list(shape)
    bigger[dim] *= 2
    assert h.gemm_ns(*bigger, elem_bytes=eb) >= h.gemm_ns(*shape, elem_bytes=eb) > 0


# --- the check -------------------------------------------------------------------------------------
def test_check_of_rows_the_model_itself_made_is_exact():
    """Rows whose times are the model's own (plus a floor) come out at 1.0, every one in band:
    the harness pairs each row with its own prediction and floor."""
    h = gpu_check.host_for("v100", "library")
    rng = np.random.default_rng(0)
    n = 40
    m, nn, k = (rng.integers(1, 3000, n) for _ in range(3))
    t_kernel = np.asarray(L.gemm_ns(h.replace(launch_overhead_ns=0.0), m, nn, k, 1, 4)) / 1e3
    floor = 30.0
    rows = {c: np.zeros(n, np.int64) for c in measured.INT_COLUMNS}
    rows.update(m=m, n=nn, k=k, batch=np.ones(n, np.int64), time_us=t_kernel + floor,
                gpu=np.full(n, "v100", object), op=np.full(n, "gemm", object), dtype=np.full(n, "fp32", object),
                source=np.full(n, "synthetic", object), conv=np.full(n, "", object), context=np.full(n, "", object))
    rows["time_us"][np.argmin(rows["time_us"])] = floor * 0.999        # the 1st percentile is the floor
    fl = gpu_check.floors(rows)
    assert np.allclose(fl, np.percentile(rows["time_us"], gpu_check.FLOOR_PERCENTILE))
    (row,) = gpu_check.class_table("library", gpus=("v100",), classes=("gemm",), split="all", rows=rows)
    above = rows["time_us"] > gpu_check.ABOVE * fl
    assert row["rows"] == n and row["above"] == int(above.sum())
    got = gpu_check.model_us(gpu_check.host_for("v100", "library", fl[0]), rows, "gemm")
    np.testing.assert_allclose(got[above], (t_kernel + fl[0])[above], rtol=1e-9)
    assert row["in_band"] == 1.0


def test_conv_as_implicit_gemm():
    assert gpu_check.conv_gemm("n=2;h=56;w=56;c=64;f=128;kh=3;kw=3;stride=1;pad=1;groups=1") == \
        {"m": 2 * 56 * 56, "n": 128, "k": 64 * 9, "batch": 1}
    assert gpu_check.conv_gemm("n=1;h=14;c=32;f=32;kh=3;kw=3;stride=2;pad=1;groups=32") == \
        {"m": 7 * 7, "n": 1, "k": 9, "batch": 32}


# --- convolutions as cuDNN's benchmark mode runs them -------------------------------------------------
def _conv_host():
    return gpu("t4").replace(launch_overhead_ns=7000.0)


def test_conv_one_by_one_is_the_plain_gemm_of_its_pixels_and_one_launch():
    h = _conv_host()
    n, hw, c, f = 8, 28, 96, 192
    want = L.gemm_ns(h, n * hw * hw, f, c, 1, 4)               # its launch is the op's one launch
    assert float(L.conv_ns(h, n, hw, hw, c, f, 1, 1, elem_bytes=4)) == pytest.approx(float(want), rel=1e-12)
    assert L.conv_algorithm(h, n, hw, hw, c, f, 1, 1, elem_bytes=4) == "implicit_gemm"


def test_conv_depthwise_is_one_memory_bound_direct_kernel_not_a_batched_gemm():
    h = _conv_host()
    n, hw, c, k, s = 4, 56, 144, 3, 2
    o = (hw + 2 * 1 - k) // s + 1
    t = L.conv_algorithms_ns(h, n, hw, hw, c, c, k, k, stride=s, pad=1, groups=c, elem_bytes=4)
    assert set(np.isfinite([float(v) for v in t.values()]).nonzero()[0]) == {list(t).index("depthwise")}
    nbytes = (n * hw * hw * c + c * k * k + n * o * o * c) * 4
    want = L.elementwise_ns(h.replace(launch_overhead_ns=0.0), nbytes, flops=2.0 * n * o * o * c * k * k,
                            outputs=n * o * o * c)
    assert float(t["depthwise"]) == pytest.approx(float(want), rel=1e-12)
    assert float(L.conv_ns(h, n, hw, hw, c, c, k, k, s, 1, c, 4)) == pytest.approx(float(want) + 7000.0, rel=1e-12)


def test_conv_winograd_only_for_3x3_stride_1_ungrouped_and_built_from_its_products_and_transforms():
    h = _conv_host()
    h0 = h.replace(launch_overhead_ns=0.0)
    n, hw, c, f = 16, 14, 256, 256
    t = L.conv_algorithms_ns(h, n, hw, hw, c, f, 3, 3, pad=1, elem_bytes=4)
    tiles = n * math.ceil(hw / 4) ** 2
    prod = L.gemm_ns(h0, tiles, f, c, 36, 4)
    tr = (L.elementwise_ns(h0, (n * hw * hw * c + 36 * tiles * c) * 4, outputs=36 * tiles * c)
          + L.elementwise_ns(h0, (9 + 36) * f * c * 4, outputs=36 * f * c)
          + L.elementwise_ns(h0, (36 * tiles * f + n * hw * hw * f) * 4, outputs=n * hw * hw * f))
    want = prod * L.WINOGRAD_GEMM_SLOWDOWN + tr * L.WINOGRAD_TRANSFORM_SCALE + 3 * L.CONV_KERNEL_GAP_NS
    assert float(t["winograd_nonfused"]) == pytest.approx(float(want), rel=1e-12)
    ig = L.gemm_ns(h0, n * hw * hw, f, 9 * c, 1, 4) * L.IMPLICIT_GEMM_SLOWDOWN + L.CONV_KERNEL_GAP_NS
    assert float(t["implicit_gemm"]) == pytest.approx(float(ig), rel=1e-12)
    assert float(L.conv_ns(h, n, hw, hw, c, f, 3, 3, pad=1, elem_bytes=4)) == \
        pytest.approx(min(float(want), float(ig)) + 7000.0, rel=1e-12)
    for kw in (dict(stride=2), dict(groups=2)):
        other = L.conv_algorithms_ns(h, n, hw, hw, c, f, 3, 3, pad=1, elem_bytes=4, **kw)
        assert np.isinf(other["winograd_nonfused"]) and np.isfinite(other["implicit_gemm"])
    assert np.isinf(L.conv_algorithms_ns(h, n, hw, hw, c, f, 5, 5, pad=2, elem_bytes=4)["winograd_nonfused"])
    # FP16 runs on the tensor cores' implicit GEMM (`WINOGRAD_MIN_ELEM_BYTES`): no Winograd to pick
    half = L.conv_algorithms_ns(h, n, hw, hw, c, f, 3, 3, pad=1, elem_bytes=2)
    assert np.isinf(half["winograd_nonfused"]) and str(L.conv_algorithm(h, n, hw, hw, c, f, 3, 3, 1, 1, 1, 2)) == \
        "implicit_gemm"


def test_conv_arrays_broadcast_to_the_rows_own_scalar_times():
    h = _conv_host()
    n = np.array([1, 8, 32]); c = np.array([3, 64, 512]); f = np.array([64, 64, 512]); k = np.array([3, 1, 3])
    got = L.conv_ns(h, n, 28, 28, c, f, k, k, 1, k // 2, 1, 4)
    want = [float(L.conv_ns(h, int(a), 28, 28, int(b), int(d), int(e), int(e), 1, int(e) // 2, 1, 4))
            for a, b, d, e in zip(n, c, f, k)]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_conv_refuses_impossible_shapes():
    h = _conv_host()
    with pytest.raises(ValueError, match="groups"):
        L.conv_ns(h, 1, 8, 8, 6, 8, 3, 3, 1, 1, groups=4)
    with pytest.raises(ValueError, match="larger than the padded input"):
        L.conv_ns(h, 1, 2, 2, 8, 8, 5, 5)


def test_conv_kernel_agreement_counts_the_kernels_of_the_models_own_picks():
    """Rows labelled with the kernels of the algorithm the model picks agree everywhere; relabelled, nowhere."""
    specs = [f"n={n};h={s};w={s};c={c};f={c};kh={k};kw={k};stride=1;pad={k // 2};groups=1"
             for n, s, c, k in ((32, 28, 256, 3), (64, 14, 512, 3), (16, 56, 128, 1), (8, 7, 64, 3))] * 10
    r = len(specs)
    rows = {c: np.zeros(r, np.int64) for c in measured.INT_COLUMNS}
    rows.update(gpu=np.full(r, "t4", object), op=np.full(r, "conv", object), dtype=np.full(r, "fp32", object),
                source=np.full(r, "synthetic", object), conv=np.array(specs, object),
                time_us=np.linspace(1000.0, 2000.0, r), context=np.full(r, "", object))
    rows["time_us"][0] = 1.0                                      # the floor, far below every other row
    col = gpu_check.conv_columns(rows)
    pick = L.conv_algorithm(gpu_check.host_for("t4", "library"), **col, elem_bytes=4)
    kern = np.array([L.CONV_KERNELS[a] for a in pick]) - ((pick == "implicit_gemm") & (col["kh"] == 1))
    rows["context"] = np.array([f"kernels={k}" if k > 1 else "" for k in kern], object)
    got = gpu_check.conv_kernel_agreement("t4", rows, split="all")
    assert got["rows"] == r - 1 and got["agree"] == 1.0
    rows["context"] = np.array([f"kernels={k + 1}" for k in kern], object)
    assert gpu_check.conv_kernel_agreement("t4", rows, split="all")["agree"] == 0.0


@pytest.mark.slow
def test_conv_constants_are_what_fit_conv_gives_on_the_even_rows():
    got = gpu_check.fit_conv()
    assert (got["implicit"], got["winograd_gemm"], got["winograd_transform"]) == \
        (L.IMPLICIT_GEMM_SLOWDOWN, L.WINOGRAD_GEMM_SLOWDOWN, L.WINOGRAD_TRANSFORM_SCALE)


def test_fit_takes_the_highest_share_and_breaks_equal_shares_by_the_median_closest_to_one():
    a, b, c = {"e": 0.5}, {"e": 0.7}, {"e": 0.9}
    assert gpu_check._best([(0.5, 0.0, a), (0.9, 0.3, b), (0.8, 0.1, c)]) == (0.9, b)
    assert gpu_check._best([(1.0, 0.2, a), (1.0, 0.05, b), (1.0, 0.1, c)]) == (1.0, b)
    assert gpu_check._best([(1.0, 0.1, a), (0.99, 0.0, b), (1.0, 0.1, c)]) == (1.0, a)     # first of equals
    # within a tie tolerance a share 1 point lower with a median nearer 1 wins; 3 points lower does not
    assert gpu_check._best([(0.93, 0.2, a), (0.92, 0.01, b)], tie=0.02) == (0.92, b)
    assert gpu_check._best([(0.93, 0.2, a), (0.90, 0.01, b)], tie=0.02) == (0.93, a)


def test_the_fine_flops_step_takes_a_rate_where_more_classes_meet_the_target_even_at_a_lower_score(monkeypatch):
    """`_refine_flops`: within `FINE_FLOPS` of the grid's pick, more classes meeting issue 49's target
    beat a higher score; at an equal count the higher score wins; a rate outside the span is never tried."""
    meets = {0.80: 1, 0.81: 2, 0.82: 2, 0.90: 3}          # 0.90 would meet more but lies outside the span
    score = {0.80: 0.93, 0.81: 0.92, 0.82: 0.925}
    tried = []

    def fake_meeting(rows, fl, cls, q, *a, **k):
        tried.append(q["flops_efficiency"])
        return meets.get(q["flops_efficiency"], 0)
    monkeypatch.setattr(gpu_check, "meeting", fake_meeting)
    monkeypatch.setattr(gpu_check, "_score", lambda r, f, c, q, *a, **k: (score.get(q["flops_efficiency"], 0.5), 0.0))
    s, q = gpu_check._refine_flops(None, None, None, {"flops_efficiency": 0.80}, "x", ("gemm",), 0.93)
    assert q["flops_efficiency"] == 0.82 and s == 0.925
    step, span = gpu_check.FINE_FLOPS
    assert max(abs(t - 0.80) for t in tried) <= span + 1e-9 and len(set(tried)) == round(2 * span / step) + 1
    meets.update({0.81: 1, 0.82: 1})                     # no rate meets more: the pick and its score stay
    assert gpu_check._refine_flops(None, None, None, {"flops_efficiency": 0.80}, "x", ("gemm",), 0.93) == \
        (0.93, {"flops_efficiency": 0.80})
    score[0.81] = 0.93                                    # an equal (count, score) keeps the pick too
    assert gpu_check._refine_flops(None, None, None, {"flops_efficiency": 0.80}, "x", ("gemm",), 0.93)[1] == \
        {"flops_efficiency": 0.80}
    tried.clear()                                         # at the grid's edge the step does not leave the grid
    lo = min(gpu_check.FIT_GRID["flops_efficiency"])
    gpu_check._refine_flops(None, None, None, {"flops_efficiency": lo}, "x", ("gemm",), 0.5)
    assert min(tried) == lo


@pytest.mark.slow
def test_fits_are_what_fit_gives_on_the_even_rows():
    """fits.json is reproducible: refitting one card gives its stored constants (15 s: the products'
    coordinate descent over four constants)."""
    stored = gpu_check.fits()["h100"]
    got = gpu_check.fit("h100")
    assert {k: got[k] for k in gpu_check.FIT_FIELDS} == stored


@pytest.mark.slow
def test_library_fits_are_what_fit_library_gives_on_the_even_rows():
    """The per-library pow cost is reproducible from the stored per-card constants."""
    rows = measured.load()
    cards = gpu_check.fits()
    for lib, stored in measured.library_fits().items():
        got = gpu_check.fit_library(lib, cards, rows)
        assert {k: got[k] for k in measured.LIBRARY_FIT_FIELDS} == stored


# --- the GPU described by its own measurements ----------------------------------------------------
def _profile():
    pts = ((64, 1024, 1024, 1, 2), (256, 1024, 1024, 1, 2), (1024, 1024, 1024, 1, 2), (64, 4096, 4096, 1, 2))
    ns = (9000.0, 11000.0, 30000.0, 40000.0)
    rows = ((4096, 4096, 2, 1), (65536, 1, 2, 0))
    return GpuProfile("test GPU", pts, ns, rows, (50000.0, 7000.0))


def test_profile_returns_its_own_times_at_its_points():
    p = _profile()
    h = profile_host(gpu("h100").replace(launch_overhead_ns=0.0), p)
    for pt, t in zip(p.products, p.product_ns):
        assert h.gemm_ns(*pt[:4], elem_bytes=pt[4]) == t
        assert profile_source(h, "gemm", m=pt[0], n=pt[1], k=pt[2], elem_bytes=pt[4]) == "measured"
    assert h.elementwise_ns(2 * 4096 * 4096 * 2, outputs=4096, reduction=4096, kind="norm") == 50000.0
    assert h.elementwise_ns(2 * 65536 * 2, outputs=65536, kind="act") == 7000.0


@settings(max_examples=80, deadline=None)
@given(st.integers(65, 1023))
def test_profile_interpolates_monotonically_between_its_points(m):
    h = profile_host(gpu("h100").replace(launch_overhead_ns=0.0), _profile())
    t = h.gemm_ns(m, 1024, 1024)
    t1 = h.gemm_ns(m + 1, 1024, 1024)
    lo, hi = (9000.0, 11000.0) if m < 256 else (11000.0, 30000.0)
    assert lo <= t <= hi and t <= t1
    assert profile_source(h, "gemm", m=m, n=1024, k=1024) == ("measured" if m == 256 else "interpolated")
    if m != 256:
        x0, x1 = (64, 256) if m < 256 else (256, 1024)
        w = (math.log(m) - math.log(x0)) / (math.log(x1) - math.log(x0))
        assert t == pytest.approx(math.exp((1 - w) * math.log(lo) + w * math.log(hi)), rel=1e-9)


def test_profile_falls_back_to_its_base_model_and_says_so():
    base = gpu("h100")
    h = profile_host(base, _profile())
    assert h.gemm_ns(3000, 3000, 3000) == base.gemm_ns(3000, 3000, 3000)
    assert profile_source(h, "gemm", m=3000, n=3000, k=3000) == "model"
    assert lookup((), (), (1, 2)) == (None, "model")
    assert "measured profile" in h.name and "library" in h.name


def test_profile_from_measured_rows_subtracts_the_floor():
    r = measured.load("llmcompass", gpu="a100", op="gemm")
    p = GpuProfile.from_rows(r, "A100", floor_us=10.0)
    i = 0
    key = (int(r["m"][i]), int(r["n"][i]), int(r["k"][i]), 1, 2)
    assert p.product_ns[p.products.index(key)] == pytest.approx((r["time_us"][i] - 10.0) * 1e3)
    with pytest.raises(ValueError, match="GpuProfile"):
        profile_host(gpu("h100"), p).replace(profile=None)


def test_report_says_which_gpu_times_the_profile_gave():
    """pim_jit against a measured-profile GPU: the report counts the ops whose GPU time is the
    table's and names the ones the analytic model filled."""
    import jax

    import pimjax
    from pimjax.hw import get_backend
    W = np.ones((256, 512), np.float16)
    x = np.ones(512, np.float16)
    prof = GpuProfile("my GPU", ((1, 256, 512, 1, 2),), (5000.0,))     # the GEMV measured, the relu not
    host = profile_host(gpu("h100"), prof)
    assert get_backend("hbm-pim", channels=4, gpu=host).system.baseline is host
    f = pimjax.pim_jit(lambda W, x: jax.nn.relu(W @ x), backend="hbm-pim", channels=4, gpu=host)
    rep = f.lower(W, x).compile().report()
    srcs = rep.to_dict()["gpu_sources"]
    kinds = {o.index: o.name for o in rep.ops}
    assert srcs and set(srcs.values()) <= {"measured", "interpolated", "model"}
    gemv = next(i for i, n in kinds.items() if n.startswith("dot_general"))
    assert srcs[str(gemv)] == "measured"
    text = str(rep)
    assert "GPU times from its measured profile: 1 op(s) measured" in text, text[-600:]
    assert rep.gpu_model == "profile" and "my GPU (measured profile; else library)" in rep.gpu


def test_a_card_without_measurements_borrows_its_measured_siblings_fits():
    from pimjax.hw.gpus import FITS_FROM
    for card, sibling in FITS_FROM.items():
        assert card not in gpu_check.fits() and sibling in gpu_check.fits()
        h, s = gpu(card), gpu(sibling)
        for k, v in gpu_check.fits()[sibling].items():
            if hasattr(h, k):
                assert getattr(h, k) == v == getattr(s, k)
        assert h.sms == GPU_SPECS[card][4] and h.peak_flops == GPU_SPECS[card][1]   # its own datasheet


def test_a_preset_asked_for_the_library_model_gets_the_fitted_card_on_its_memory():
    import pimjax
    be = pimjax.get_backend("attacc", gpu="library")
    g, ref = be.system.gpu, gpu("a100")
    assert g.model == "library"
    assert g.mem_bandwidth == pytest.approx(be.system.n_groups * be.system.link_bandwidth * 1e9)
    for k in ("bandwidth_efficiency", "flops_efficiency", "wave_overhead_ns", "simt_flops", "sms", "vector_flops",
              "pow_flops", "row_bandwidth_efficiency", "row_pass_ns", "row_elem_ns"):
        assert getattr(g, k) == getattr(ref, k), k


# --- attention as vLLM runs it ----------------------------------------------------------------
def test_flash_decoding_streams_the_kv_cache_once_at_the_fitted_bandwidth():
    h = gpu("a100")
    b, heads, kv, d, n = 64, 32, 8, 128, 4096            # b x kv blocks fill every SM twice: no split
    assert b * kv >= 2 * h.sms
    kv_bytes = 2.0 * b * kv * n * d * 2 + 2.0 * b * heads * d * 2
    expect = kv_bytes / (h.mem_bandwidth * h.bandwidth_efficiency) * 1e9 + h.launch_overhead_ns
    assert float(L.attention_ns(h, heads, d, n, b, kv_heads=kv)) == pytest.approx(expect, rel=1e-9)
    # the preset path (hw.gpu.attention_ns) takes it on the library model
    assert h.attention_ns(heads, d, n, b, kv_heads=kv) == pytest.approx(expect, rel=1e-9)
    # one sequence of 8 KV heads: split along the keys to fill the SMs, and a kernel combining the splits
    splits = min(np.ceil(n / L.FLASH_KEYS_PER_SPLIT), np.ceil(2 * h.sms / kv))
    one = (2.0 * kv * n * d * 2 + 2.0 * heads * d * 2) / (h.mem_bandwidth * h.bandwidth_efficiency) * 1e9
    util = min(1.0, kv * splits / h.sms)
    assert float(L.attention_ns(h, heads, d, n, 1, kv_heads=kv)) == \
        pytest.approx(one / util + 2 * h.launch_overhead_ns, rel=1e-9)


@given(b=st.integers(1, 64), n=st.integers(2, 8192), kv=st.sampled_from([1, 2, 4, 8, 32]))
@settings(max_examples=40, deadline=None)
def test_flash_decoding_never_beats_streaming_its_cache_and_grows_with_it_once_the_sms_are_full(b, n, kv):
    h = gpu("h100")
    t = float(L.attention_ns(h, 32, 128, n, b, kv_heads=kv))
    floor = 2.0 * b * kv * n * 128 * 2 / (h.mem_bandwidth * h.bandwidth_efficiency) * 1e9
    assert t >= floor + h.launch_overhead_ns
    if b * kv >= 2 * h.sms:          # every SM busy without splitting: more cache, more time; fewer heads, less
        assert float(L.attention_ns(h, 32, 128, 2 * n, b, kv_heads=kv)) > t
        if kv > 1:
            assert float(L.attention_ns(h, 32, 128, n, b, kv_heads=kv // 2)) < t


def test_flash_attention_prefill_is_its_causal_products_at_the_tensor_rate():
    h = gpu("a100")
    heads, d, n = 32, 128, 4096
    flops = 4.0 * heads * n * n * d / 2                  # causal: half the score / context products
    expect = flops / (h.peak_flops * h.flops_efficiency) * 1e9 + h.launch_overhead_ns
    assert float(L.attention_ns(h, heads, d, n, 1, queries=n)) == pytest.approx(expect, rel=1e-9)
    full = float(L.attention_ns(h, heads, d, n, 1, queries=n, causal=False))
    assert full - h.launch_overhead_ns == pytest.approx(2 * (expect - h.launch_overhead_ns), rel=1e-9)


def test_a_cell_meets_the_acceptance_at_its_bounds_and_not_beyond():
    lo, hi = gpu_check.ACCEPT_MEDIAN
    share = gpu_check.ACCEPT_IN_BAND
    assert gpu_check.meets(lo, share) and gpu_check.meets(hi, 1.0)
    assert not gpu_check.meets(hi * 1.001, 1.0) and not gpu_check.meets(lo * 0.999, 1.0)
    assert not gpu_check.meets(1.0, share - 0.001)


def test_verdict_reads_a_cell_only_with_enough_rows_above_the_floor():
    """A cell is judged only on >= ACCEPT_ROWS rows above the floor, and then on both conditions at their edges."""
    few = {"above": gpu_check.ACCEPT_ROWS - 1, "median": 1.0, "in_band": 1.0}
    assert gpu_check.verdict(few) == ""
    n = gpu_check.ACCEPT_ROWS
    lo, hi = gpu_check.ACCEPT_MEDIAN
    assert gpu_check.verdict({"above": n, "median": lo, "in_band": gpu_check.ACCEPT_IN_BAND}) == "yes"
    assert gpu_check.verdict({"above": n, "median": hi, "in_band": 1.0}) == "yes"
    assert gpu_check.verdict({"above": n, "median": hi * 1.001, "in_band": 1.0}) == "no"
    assert gpu_check.verdict({"above": n, "median": 1.0, "in_band": gpu_check.ACCEPT_IN_BAND - 0.001}) == "no"
