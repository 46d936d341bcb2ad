"""The "library" GPU model: the kernels cuBLAS / rocBLAS and PyTorch run, held to measured times.

`pimjax/hw/gpu.py` dispatches here for `HostModel.model == "library"`.  Every function takes
numpy arrays (or scalars) and broadcasts, so a whole measured set is timed in one call
(`pimjax.hw.gpu_check`).  Units: ns, bytes, FLOP.

* a product (GEMM, batched GEMM; m x k . k x n, `batch` of them): the library's threadblock
  tiles (`LIB_TILES`), a block per output tile, waves of one block per SM; each wave costs its
  tile's arithmetic at the SM's share of the dtype's rate (`dtype_flops` x flops_efficiency)
  plus `wave_overhead_ns` (the tile's pipeline fill and epilogue); the fastest tile is the pick.
  The operands stream from memory once at bandwidth x bandwidth_efficiency; the kernel takes
  the longer of the two, plus the launch.
* a map: the longer of its bytes at bandwidth x bandwidth_efficiency and its arithmetic at the
  FP32 vector rate (`vector_flops`: the CUDA cores; AMD CDNA's vector ALUs, half its matrix
  rate), both scaled by the SMs a kernel of few blocks occupies (`MAP_ELEMS_PER_BLOCK` outputs a
  block).  A `pow` costs `HostModel.pow_flops` FP32 operations an element, a fit per vendor's
  math library: ROCm's powf makes MI100 / MI210 pows compute-bound (56-66 G elements/s against
  105-166 for an add), CUDA's stays under the bytes;
* a row softmax / norm: a block per row.  layer_norm reads its row twice (the statistics pass,
  then the normalising pass); softmax as ATen dispatches it by row length: rows of <= 1024
  elements and 4 KB read once (the warp-persistent kernel), longer rows by a block kernel of
  three passes.  A re-read comes from the L2 while the rows in flight on the SMs fit it
  (`row_extra_reads`).  Its bytes stream at bandwidth x row_bandwidth_efficiency (the row
  kernels reach another share of the memory than the vectorised maps: L4's norms 0.92, its
  maps 0.78); a row kernel is also bound by its blocks' latency, `row_passes` x (row_pass_ns +
  elements x row_elem_ns) of SM time a row (`row_latency_ns`): ROCm's block softmax takes
  ~2 us + 1 ns an element of CU time a row on both the MI100 and the MI210, whatever their
  memories, and short norm rows ~0.5 us on the P100 and MI210 alike.
* attention as vLLM runs it (`attention_ns`): decode as FlashDecoding (one kernel reading each
  KV head's cache once, split along the keys to fill the SMs, and a kernel combining the splits),
  prefill as FlashAttention (one kernel; scores never written; its products at the tensor rate).

`HostModel.launch_overhead_ns` is the launch and framework floor: a GPU's own launch for
pimjax's reports (`LIB_LAUNCH_NS`), a measurement method's floor when held to measured sets
(`gpu_check`).  The efficiencies, `wave_overhead_ns`, `row_pass_ns` and `row_elem_ns` are fits
per GPU, `pow_flops` a fit per math library (`hw/measured/fits.json`, fitted on the even rows
of the measured sets, checked on the odd); `L2_REREAD_SPEEDUP` one fit for every GPU, on the
same even rows.  The vector rates are the datasheets' (`hw/gpus.GPU_ARCH`).
"""
from __future__ import annotations

import numpy as np

LIB_TILES = ((128, 128), (128, 64), (64, 64), (64, 32), (32, 32))
                                # threadblock tiles (m x n) of the GEMM kernels cuBLAS / CUTLASS / rocBLAS
                                #   (Tensile) ship: CUTLASS's default 128 x 128 and the smaller ones their
                                #   kernel names carry for small products
MAP_ELEMS_PER_BLOCK = 128 * 4   # PyTorch's elementwise kernels (ATen native/cuda/thread_constants.h, recalled):
                                #   num_threads 128 (4 warps) x thread_work_size 4 = 512 outputs a block
NORM_BLOCK_THREADS = 128        # ATen layer_norm_kernel.cu (vectorized_layer_norm_kernel, the path of rows of a multiple
                                #   of 4 elements): a block of 128 threads (num_threads()) per row, which reads its row
                                #   twice (the Welford statistics loop, then the normalising loop)
SOFTMAX_WARP_MAX = (1024, 4096)
                                # ATen SoftMax.cu (host_softmax): a row of <= 1024 elements and <= 4096 bytes runs
                                #   the warp-persistent softmax (dispatch_softmax_forward), which holds the row in
                                #   registers: one read
THREADS_PER_SM = 2048           # resident threads an SM holds (Pascal, Volta, Ampere, Hopper: the CUDA occupancy
                                #   tables): the blocks of a row kernel in flight on an SM
SOFTMAX_BLOCK_BYTES = 16        # above that, cunn_SoftMaxForward (PyTorch 2.1, NeuSight's NVIDIA runs): a block of
                                #   min(1024, row / ILP) threads, ILP one float4 (16 bytes) a thread, three passes over
                                #   the row (max, sum of exp, write); max(THREADS_PER_SM x 16 B, 2 rows) of rows are in
                                #   flight on each SM
SOFTMAX_SMEM_BYTES = 48 * 1024  # the shared memory a block gets without opting in (CUDA's sharedMemPerBlock, 48 KB;
                                #   ROCm's LDS per workgroup is 64 KB: rows of 48-64 KB are taken as the CUDA case)
L2_REREAD_SPEEDUP = 2.5         # fit: an L2 re-read costs a memory read / 2.5 -- of 2-4 in steps of 0.5, the best mean
                                #   share in band over the even softmax and norm rows of the 19 GPU cells with >= 10
                                #   rows (checked on the odd ones, `gpu_check`); Jia et al., "Dissecting the NVIDIA
                                #   Volta GPU Architecture via Microbenchmarking" (2018), measure a V100's L2 at 2.9x
                                #   its memory bandwidth
LIB_LAUNCH_NS = 2000.0          # assumption: a kernel launch as a GPU executes back-to-back kernels of one
                                #   stream (~2 us, between CUDA graphs' ~1 us and an eager launch's ~4 us;
                                #   the measured sets' framework floors are stated beside them, `gpu_check`)


def _f(x):
    return np.asarray(x, np.float64)


def dtype_flops(host, elem_bytes):
    """FLOP/s of a product of `elem_bytes`-byte elements on `host`: 4 -> the FP32 rate
    (`simt_flops`; the FP16 rate / 2 where a host gives none), 2 -> the FP16 tensor rate
    (`peak_flops`), 1 -> twice it (INT8 tensor ops: A100 / H100 datasheets, 624 / 1 979 TOPS)."""
    eb = _f(elem_bytes)
    fp32 = _f(host.simt_flops) if float(np.max(_f(host.simt_flops))) > 0 else _f(host.peak_flops) / 2
    return np.where(eb >= 4, fp32, np.where(eb <= 1, 2 * _f(host.peak_flops), _f(host.peak_flops)))


def gemm_ns(host, m, n, k, batch=1, elem_bytes=2):
    """ns of `batch` (m x k) . (k x n) products (arrays broadcast): the fastest `LIB_TILES`
    tile's waves against the operands' streaming, plus the launch (module docstring)."""
    m, n, k, b, eb = (_f(x) for x in (m, n, k, batch, elem_bytes))
    per_sm = dtype_flops(host, eb) * _f(host.flops_efficiency) / host.sms
    wave = _f(host.wave_overhead_ns)
    t_cmp = np.full(np.broadcast(m, n, k, b, eb).shape, np.inf)
    for tm, tn in LIB_TILES:
        waves = np.ceil(b * np.ceil(m / tm) * np.ceil(n / tn) / host.sms)
        t_cmp = np.minimum(t_cmp, waves * (2.0 * tm * tn * k / per_sm * 1e9 + wave))
    t_mem = b * (m * k + k * n + m * n) * eb / (_f(host.mem_bandwidth) * _f(host.bandwidth_efficiency)) * 1e9
    return np.maximum(t_cmp, t_mem) + _f(host.launch_overhead_ns)


def row_extra_reads(host, kind, reduction, row_bytes):
    """Reads of each input row beyond the first, in memory reads (arrays broadcast), for a row
    of `reduction` elements and `row_bytes` bytes: 0 for a map; a norm's one re-read
    (`NORM_BLOCK_THREADS`); a softmax row 0 in ATen's warp-persistent kernel
    (`SOFTMAX_WARP_MAX`), else its block kernel's two re-reads.  A re-read comes from the L2
    (1 / `L2_REREAD_SPEEDUP` of a memory read) while the rows in flight on `host`'s SMs fit
    `host.l2_bytes` (`THREADS_PER_SM` threads of the kernel's blocks an SM), else from memory."""
    reduction, row_bytes = _f(reduction), _f(row_bytes)
    if kind == "norm":
        in_flight = host.sms * (THREADS_PER_SM / NORM_BLOCK_THREADS) * row_bytes
        return np.where(in_flight <= _f(host.l2_bytes), 1.0 / L2_REREAD_SPEEDUP, 1.0)
    if kind != "softmax":
        return np.zeros(np.broadcast(reduction, row_bytes).shape)
    in_flight = host.sms * np.maximum(THREADS_PER_SM * SOFTMAX_BLOCK_BYTES, 2.0 * row_bytes)
    l2 = in_flight <= _f(host.l2_bytes)
    smem = softmax_smem(reduction, row_bytes)
    return np.where(_softmax_warp(reduction, row_bytes) | smem, 0.0, np.where(l2, 2.0 / L2_REREAD_SPEEDUP, 2.0))


def softmax_smem(reduction, row_bytes):
    """Whether ATen's block softmax keeps the row in shared memory (cunn_SoftMaxForwardSmem, PyTorch
    >= 2.1: a row of a whole number of 16-byte vectors, `SOFTMAX_SMEM_BYTES` at most), reading it
    from memory once; else cunn_SoftMaxForward reads it in each of its three passes."""
    reduction, row_bytes = _f(reduction), _f(row_bytes)
    elem = row_bytes / np.maximum(reduction, 1.0)
    vec = np.maximum(np.round(SOFTMAX_BLOCK_BYTES / np.maximum(elem, 1.0)), 1.0)   # ILP: elements a float4
    return ~_softmax_warp(reduction, row_bytes) & (np.mod(reduction, vec) == 0) & (row_bytes < SOFTMAX_SMEM_BYTES)


def _softmax_warp(reduction, row_bytes):
    """Whether ATen runs a softmax row in its warp-persistent kernel (`SOFTMAX_WARP_MAX`)."""
    return (_f(reduction) <= SOFTMAX_WARP_MAX[0]) & (_f(row_bytes) <= SOFTMAX_WARP_MAX[1])


def row_passes(kind, reduction, row_bytes):
    """Passes a row kernel's block makes over its row, one block per row (arrays broadcast): a
    norm 2 (the statistics, then the normalising loop), a softmax in the block kernel 3 (max,
    sum of exp, write; in memory or, `softmax_smem`, in shared memory: the barriers and loops
    are the same); 0 where no block loops over the row (a map; the warp-persistent softmax,
    which loads its row at once into registers)."""
    shape = np.broadcast(_f(reduction), _f(row_bytes)).shape
    if kind == "norm":
        return np.full(shape, 2.0)
    if kind == "softmax":
        return np.where(_softmax_warp(reduction, row_bytes), 0.0, 3.0)
    return np.zeros(shape)


def row_latency_ns(host, kind, outputs, reduction, row_bytes):
    """ns a row kernel's blocks take by their latency, not their bytes (arrays broadcast):
    `outputs` rows spread over `host.sms` SMs, each row costing its SM `row_passes` x
    (`host.row_pass_ns` + `reduction` x `host.row_elem_ns`): a pass's block-wide reduction and
    barrier, and its loop's dependent loads.  Both constants are fits per card
    (`hw/measured/fits.json`); 0 on a host that gives none."""
    passes = row_passes(kind, reduction, row_bytes)
    per_row = passes * (_f(host.row_pass_ns) + _f(reduction) * _f(host.row_elem_ns))
    return _f(outputs) / host.sms * per_row


def vector_flops(host):
    """FLOP/s a map's arithmetic runs at on `host`: its FP32 vector ALUs (`host.vector_flops`;
    where a host gives none, the FP32 product rate, `dtype_flops(host, 4)`)."""
    v = _f(host.vector_flops)
    return np.where(v > 0, v, dtype_flops(host, 4))


def elementwise_ns(host, bytes_moved, flops=0.0, outputs=1, reduction=1, kind="act"):
    """ns of a map (reduction 1) or a row reduction of `reduction` elements into each of
    `outputs` (arrays broadcast): the longest of its bytes (kind "norm" / "softmax" read their
    input rows again, `row_extra_reads`; the input is half of `bytes_moved`, in + out of one
    shape), its `flops` at the vector rate (`vector_flops`) and its rows' latency
    (`row_latency_ns`), on the SMs its blocks occupy, plus the launch.  (A map whose bytes fit
    the L2 is not sped up: NeuSight's H100 adds of 12-50 MB run at its memory's rate, its L4's
    at 4-5 x it -- an L2-to-memory ratio per card that no datasheet here gives.)"""
    nbytes, flops, outputs, reduction = (_f(x) for x in (bytes_moved, flops, outputs, reduction))
    outputs, reduction = np.maximum(outputs, 1), np.maximum(reduction, 1)
    row_bytes = 0.5 * nbytes / outputs
    extra = row_extra_reads(host, kind, reduction, row_bytes) * 0.5 * nbytes
    blocks = np.where(reduction > 1, outputs, np.ceil(outputs / MAP_ELEMS_PER_BLOCK))
    util = np.minimum(1.0, blocks / host.sms)
    row_eff = _f(host.row_bandwidth_efficiency)
    eff = np.where((reduction > 1) & (row_eff > 0), row_eff, _f(host.bandwidth_efficiency))
    t_mem = (nbytes + extra) / (_f(host.mem_bandwidth) * eff * util) * 1e9
    t_cmp = flops / (vector_flops(host) * util) * 1e9
    t_lat = np.where(reduction > 1, row_latency_ns(host, kind, outputs, reduction, row_bytes), 0.0)
    return np.maximum(np.maximum(t_mem, t_cmp), t_lat) + _f(host.launch_overhead_ns)


WINOGRAD_TILES = (2,)          # cuDNN's Winograd for 3 x 3 stride-1 convolutions, F(2x2, 3x3) (Lavin & Gray, "Fast
                                #   Algorithms for Convolutional Neural Networks", CVPR 2016): its transforms around a
                                #   batched GEMM.  Offering F(4x4, 3x3) as well put NeuSight's FP32 convolutions at a
                                #   median 0.64-0.97 of measured (0.79-1.24 without it): not what these cards ran


def conv_ns(host, n, h, w, c, f, kh, kw, stride=1, pad=0, groups=1, elem_bytes=2):
    """ns of a convolution (NCHW input n x c x h x w, f filters of c / groups x kh x kw) as the
    fastest algorithm cuDNN's benchmark mode finds among the two modelled: the implicit GEMM
    (m = n x output pixels, n = f / groups, k = c / groups x kh x kw, `groups` products) and, for
    a 3 x 3 stride-1 convolution, Winograd F(t x t, 3 x 3) for t in `WINOGRAD_TILES`: (t + 2)^2
    products of (n x tiles) x c . c x f between three transform kernels that stream their
    operands (input, filter, output).  Scalars or arrays (broadcast)."""
    n, h, w, c, f, kh, kw, stride, pad, g, eb = (_f(x) for x in (n, h, w, c, f, kh, kw, stride, pad, groups,
                                                                  elem_bytes))
    oh = np.floor((h + 2 * pad - kh) / stride) + 1
    ow = np.floor((w + 2 * pad - kw) / stride) + 1
    launch = _f(host.launch_overhead_ns)
    host = host.replace(launch_overhead_ns=0.0)     # one launch (the op's floor) for the whole algorithm
    best = gemm_ns(host, n * oh * ow, f / g, c / g * kh * kw, g, eb)
    wino = (kh == 3) & (kw == 3) & (stride == 1) & (g == 1)
    for t in WINOGRAD_TILES:
        a2 = (t + 2.0) ** 2
        tiles = n * np.ceil(oh / t) * np.ceil(ow / t)
        prod = gemm_ns(host, tiles, f, c, a2, eb)
        into = elementwise_ns(host, (n * h * w * c + a2 * tiles * c) * eb, outputs=a2 * tiles * c)
        filt = elementwise_ns(host, (9.0 + a2) * f * c * eb, outputs=a2 * f * c)
        out = elementwise_ns(host, (a2 * tiles * f + n * oh * ow * f) * eb, outputs=n * oh * ow * f)
        best = np.where(wino, np.minimum(best, prod + into + filt + out), best)
    return best + launch


__all__ = ["LIB_TILES", "WINOGRAD_TILES", "conv_ns", "MAP_ELEMS_PER_BLOCK", "NORM_BLOCK_THREADS", "SOFTMAX_WARP_MAX",
           "THREADS_PER_SM", "SOFTMAX_BLOCK_BYTES", "L2_REREAD_SPEEDUP", "LIB_LAUNCH_NS", "dtype_flops", "gemm_ns",
           "elementwise_ns", "row_extra_reads", "softmax_smem", "row_passes", "SOFTMAX_SMEM_BYTES", "row_latency_ns", "vector_flops"]


FLASH_KEYS_PER_SPLIT = 256      # FlashDecoding (Dao et al., "Flash-Decoding for long-context inference", 2023) splits
                                #   the keys so that batch x KV heads x splits blocks fill the GPU; a split streams
                                #   at least one 256-key tile of the cache (assumption: vLLM's paged-attention v2
                                #   partitions are 512 tokens, FlashDecoding's tiles 128-256)


def attention_ns(host, heads, d, L, batch=1, elem_bytes=2, kv_heads=None, queries=1, causal=True):
    """ns of one layer's attention of `batch` sequences, `heads` query heads of dimension d over
    L keys (`kv_heads` KV heads, grouped-query attention; None: one per query head), `queries`
    query positions each (1: a decode step; L: a prefill).  Arrays broadcast.

    queries == 1 (FlashDecoding): one kernel of batch x kv_heads x splits blocks, splits = the
    keys in `FLASH_KEYS_PER_SPLIT` tiles up to what fills twice the SMs; it reads K and V once,
    q and the output; its arithmetic (4 x heads x L x d FLOP a sequence) at the dtype's rate;
    the SMs it occupies scale both; a second launch combines the splits when there are several.
    queries > 1 (FlashAttention): one kernel, its products (4 x heads x queries x L x d FLOP,
    half of them under a causal mask when queries == L) at the tensor rate, Q, K, V and the
    output read or written once; blocks of 128 queries per head fill the SMs."""
    heads, d, L, b, eb, q = (_f(x) for x in (heads, d, L, batch, elem_bytes, queries))
    kv = heads if kv_heads is None else _f(kv_heads)
    launch = _f(host.launch_overhead_ns)
    bw = _f(host.mem_bandwidth) * _f(host.bandwidth_efficiency)
    rate = dtype_flops(host, eb) * _f(host.flops_efficiency)
    flops = 4.0 * b * heads * q * L * d * np.where((q > 1) & causal & (q == L), 0.5, 1.0)
    nbytes = (2.0 * b * kv * L * d + 2.0 * b * heads * q * d) * eb
    splits = np.where(q > 1, 1.0, np.clip(np.minimum(np.ceil(L / FLASH_KEYS_PER_SPLIT),
                                                     np.ceil(2.0 * host.sms / (b * kv))), 1.0, None))
    blocks = np.where(q > 1, b * heads * np.ceil(q / 128.0), b * kv * splits)
    util = np.minimum(1.0, blocks / host.sms)
    t = np.maximum(nbytes / (bw * util), flops / (rate * util)) * 1e9 + launch
    return t + np.where(splits > 1, launch, 0.0)        # the combine kernel of a split decode
