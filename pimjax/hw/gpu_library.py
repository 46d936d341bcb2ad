"""The "library" GPU model: the kernels cuBLAS / rocBLAS and PyTorch run, held to measured times.

`pimjax/hw/gpu.py` dispatches here for `HostModel.model == "library"`.  Every function takes
numpy arrays (or scalars) and broadcasts, so a whole measured set is timed in one call
(`pimjax.hw.gpu_check`).  Units: ns, bytes, FLOP.

* a product (GEMM, batched GEMM; m x k . k x n, `batch` of them): the library's threadblock
  tiles (`LIB_TILES`), a block per output tile, waves of one block per SM; each wave costs its
  tile's arithmetic at the SM's share of the dtype's rate (`dtype_flops` x flops_efficiency)
  plus `wave_overhead_ns` (the tile's pipeline fill and epilogue); the fastest tile is the pick.
  A single product may also split k (`SPLIT_K`) and sum the partial tiles; a batched one keeps
  the large tile (a smaller one at (I / I_max)^`batched_tile_alpha` of the rate, I its FLOP per
  loaded element); a tiled product (m and n > 1) whose m, n or k is not a multiple of
  `ALIGN_BYTES` runs at `unaligned_efficiency` of the rate.  The operands stream from memory
  once at bandwidth x bandwidth_efficiency; the kernel takes the longer of the two, plus the
  launch.
* a map: the longer of its bytes at bandwidth x bandwidth_efficiency and its arithmetic at the
  FP32 vector rate (`vector_flops`: the CUDA cores; AMD CDNA's vector ALUs, half its matrix
  rate), both scaled by the SMs a kernel of few blocks occupies (`MAP_ELEMS_PER_BLOCK` outputs a
  block).  A measured `pow` costs `HostModel.pow_flops` FP32 operations an element, a fit per
  vendor's math library: ROCm's powf makes MI100 / MI210 pows compute-bound (56-66 G elements/s
  against 105-166 for an add), CUDA's stays under the bytes (`gpu_check` charges it to the
  measured sets' pows; a traced graph's maps pass their own FLOPs, its pows not known to be
  powf rather than multiplications);
* a row softmax / norm: a block per row.  layer_norm reads its row twice (the statistics pass,
  then the normalising pass); softmax as ATen dispatches it by row length: rows of <= 1024
  elements and 4 KB read once (the warp-persistent kernel), longer rows by a block kernel of
  three passes.  A re-read comes from the L2 while the rows in flight on the SMs fit it
  (`row_extra_reads`).  Its bytes stream at bandwidth x row_bandwidth_efficiency (the row
  kernels reach another share of the memory than the vectorised maps: L4's norms 0.92, its
  maps 0.78); a row kernel is also bound by its blocks' latency, `row_passes` x (row_pass_ns +
  elements x row_elem_ns) of SM time a row (`row_latency_ns`, whole rows an SM): the fits give
  ROCm's block softmax (three passes) 0.6 us + 1.5 / 1.2 ns an element of CU time a row on the
  MI100 / MI210, whatever their memories, and a norm row (two passes) 0.4 us + 0.8 ns an element
  on the P100 and MI210 alike (`hw/measured/fits.json`).
* a convolution as cuDNN's benchmark mode runs it (`conv_ns`): the fastest of the algorithms modelled
  (`conv_algorithms_ns`): the implicit GEMM of its im2col view (1 x 1: the plain GEMM), the nonfused
  Winograd F(4x4, 3x3) (batched products between transform kernels), a depthwise direct kernel; each built
  from `gemm_ns` / `elementwise_ns`, three slowdowns fitted on NeuSight's even convolution rows
  (`gpu_check.fit_conv`).  A traced convolution (`sim.host.op_conv_shape`) reaches it through
  `hw.gpu.conv_ns`: pimjax's reports and the PIMFlow study time it so on this model;
* attention as vLLM runs it (`attention_ns`): decode as FlashDecoding (one kernel reading each
  KV head's cache once, split along the keys to fill the SMs, and a kernel combining the splits),
  prefill as FlashAttention (one kernel; scores never written; its products at the tensor rate).

`HostModel.launch_overhead_ns` is the launch and framework floor: a GPU's own launch for
pimjax's reports (`LIB_LAUNCH_NS`), a measurement method's floor when held to measured sets
(`gpu_check`).  The efficiencies (flops, bandwidth, unaligned, row bandwidth), `wave_overhead_ns`,
`batched_tile_alpha`, `row_pass_ns` and `row_elem_ns` are fits per GPU, `pow_flops` a fit per math
library (`hw/measured/fits.json`, fitted on the even rows of the measured sets, checked on the
odd); `L2_REREAD_SPEEDUP` one fit for every GPU, on the same even rows.  The vector rates are the
datasheets' (`hw/gpus.GPU_ARCH`).
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
    (`peak_flops`), 1 -> twice it (INT8 tensor ops: A100 / H100 datasheets, 624 / 1 979 TOPS; on GeForce Turing,
    whose `peak_flops` is the half-rate FP32-accumulate one, `hw.gpus`' RTX 2060, INT8 is 4 x it)."""
    eb = _f(elem_bytes)
    fp32 = _f(host.simt_flops) if float(np.max(_f(host.simt_flops))) > 0 else _f(host.peak_flops) / 2
    return np.where(eb >= 4, fp32, np.where(eb <= 1, 2 * _f(host.peak_flops), _f(host.peak_flops)))


ALIGN_BYTES = 16                # a tiled product's m, n and k must be multiples of 16 bytes for the vectorised (128-bit
                                #   load) kernels of cuBLAS / rocBLAS; others run at host.unaligned_efficiency of the rate
SPLIT_K = (1, 2, 4, 8, 16)     # split-K slices a single product's k may be cut into (cuBLAS / CUTLASS split-K
                                #   kernels: k sliced over more blocks when the output tiles leave SMs idle, the
                                #   partial tiles then summed)


def _tile_waves_ns(host, m, n, k, b, eb, batched):
    """ns of the busy waves of the fastest `LIB_TILES` tile (module docstring), no launch:
    a single product (`batched` False) also tries each `SPLIT_K` slicing of k, its partial tiles
    (split x m x n FP32 sums) written and read back at the bandwidth; a batched one pays
    `host.batched_tile_alpha` on its smaller tiles instead (`HostModel`)."""
    per_sm = dtype_flops(host, eb) * _f(host.flops_efficiency) / host.sms
    wave, bw = _f(host.wave_overhead_ns), _f(host.mem_bandwidth) * _f(host.bandwidth_efficiency)
    i_max = max(tm * tn / (tm + tn) for tm, tn in LIB_TILES)
    t = np.full(np.broadcast(m, n, k, b, eb, batched).shape, np.inf)
    for tm, tn in LIB_TILES:
        rate = per_sm * np.where(batched, (tm * tn / (tm + tn) / i_max) ** _f(host.batched_tile_alpha), 1.0)
        for s in SPLIT_K:
            if s > 1 and not np.any(~np.asarray(batched)):
                continue                # every product batched: no split to try
            waves = np.ceil(b * np.ceil(m / tm) * np.ceil(n / tn) * s / host.sms)
            partials = (s > 1) * 2.0 * s * b * m * n * 4 / bw * 1e9      # FP32 partial tiles written, read back
            ts = waves * (2.0 * tm * tn * np.ceil(k / s) / rate * 1e9 + wave) + partials
            t = np.minimum(t, np.where(batched & (s > 1), np.inf, ts))
    return t


def gemm_ns(host, m, n, k, batch=1, elem_bytes=2):
    """ns of `batch` (m x k) . (k x n) products (arrays broadcast): the fastest `LIB_TILES`
    tile's waves (`_tile_waves_ns`: split-K for a single product, the batched kernels' tile
    penalty for batch > 1 with m and n > 1 -- a batched GEMV, m or n = 1, streams like one;
    a tiled product (m and n > 1) not `ALIGN_BYTES`-aligned at host.unaligned_efficiency of the rate)
    against the operands' streaming, plus the launch (module docstring)."""
    m, n, k, b, eb = (_f(x) for x in (m, n, k, batch, elem_bytes))
    t_cmp = _tile_waves_ns(host, m, n, k, b, eb, (b > 1) & (m > 1) & (n > 1))
    vec = np.maximum(ALIGN_BYTES // eb, 1)
    # a GEMV (m or n = 1) runs cuBLAS's gemv kernels, not the tiled ones: no alignment to lose
    aligned = (m <= 1) | (n <= 1) | ((m % vec == 0) & (n % vec == 0) & (k % vec == 0))
    t_cmp = t_cmp / np.where(aligned, 1.0, _f(host.unaligned_efficiency))
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
    >= 2.1: a row of a whole number of 16-byte vectors, under `SOFTMAX_SMEM_BYTES`), reading it
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
    barrier, and its loop's dependent loads; an SM runs whole rows (fewer rows than SMs: one
    row's time).  Both constants are fits per card (`hw/measured/fits.json`); 0 on a host that
    gives none."""
    passes = row_passes(kind, reduction, row_bytes)
    per_row = passes * (_f(host.row_pass_ns) + _f(reduction) * _f(host.row_elem_ns))
    return np.ceil(_f(outputs) / host.sms) * per_row


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
    # the norms' and softmaxes' own share (fitted on them); other reductions (sums, pools) stream as maps
    eff = _f(host.bandwidth_efficiency) if kind not in ("norm", "softmax") else \
        np.where((reduction > 1) & (row_eff > 0), row_eff, _f(host.bandwidth_efficiency))
    t_mem = (nbytes + extra) / (_f(host.mem_bandwidth) * eff * util) * 1e9
    t_cmp = flops / (vector_flops(host) * util) * 1e9
    t_lat = np.where(reduction > 1, row_latency_ns(host, kind, outputs, reduction, row_bytes), 0.0)
    return np.maximum(np.maximum(t_mem, t_cmp), t_lat) + _f(host.launch_overhead_ns)


CONV_KERNEL_GAP_NS = LIB_LAUNCH_NS
                                # each kernel of a convolution after its first: one more back-to-back launch on the
                                #   stream (`LIB_LAUNCH_NS`); the op's own launch is `launch_overhead_ns`
IMPLICIT_GEMM_SLOWDOWN = 1.05   # fit: cuDNN's precomputed-index implicit GEMM (the scudnn_128x{32,64,128} kernels after
                                #   a computeOffsets kernel) takes 1.05 x the time of the explicit GEMM of its im2col
                                #   view (`gemm_ns`): the gather addressing in its inner loop.  Of 0.9-1.4 in steps of
                                #   0.05, jointly with the next two, the best mean share in 0.8-1.25 over the even
                                #   rows of NeuSight's FP32 3 x 3 convolutions on five cards (`gpu_check.fit_conv`);
                                #   checked on the odd rows.  It moves between 0.9 and 1.15 with the cards' product
                                #   constants it is fitted under (`fits.json`, fitted with the convolutions in turn):
                                #   no fixed point; the conv cells' shares in band move by <= 0.02 across it
WINOGRAD_GEMM_SLOWDOWN = 1.6    # fit (the same grid search, 1.2-2.2 in steps of 0.1): the 36 batched products of
                                #   cuDNN's nonfused Winograd F(4x4, 3x3) (an sgemm per Winograd-domain point, between
                                #   its winogradForward{Data,Filter,Output}4x4 kernels) take 1.6 x `gemm_ns`'s time
WINOGRAD_TRANSFORM_SCALE = 0.3  # fit (0-1 in steps of 0.1): the three transform kernels take 0.3 x the time of
                                #   streaming their operands from memory (`elementwise_ns`); below 1, so they do not
                                #   stream all of the 2.25 x larger transformed tensors (36 / 16 points a tile) from
                                #   memory (part staying in the L2 between kernels would do it; not measured)
WINOGRAD_NONFUSED_TILE = 4      # F(4x4, 3x3), the m = 4 output tile of Lavin & Gray, "Fast Algorithms for
                                #   Convolutional Neural Networks" (CVPR 2016): (4 + 2)^2 = 36 products for 16 outputs
                                #   (4 x fewer multiplies than the direct 144); NeuSight's kernel names say 4x4
WINOGRAD_MIN_ELEM_BYTES = 4     # the nonfused Winograd is modelled for FP32 convolutions only: its slowdowns are fitted on
                                #   NeuSight's FP32 rows (SIMT products, where its 4 x fewer multiplies pay); FP16 on
                                #   tensor cores runs the implicit GEMM -- Turing FP16 profiles name only the
                                #   s1688cudnn implicit-GEMM kernels (`hw.gpu.PIMFLOW_CUDNN_TILES`' sources), and
                                #   daadaada/turingas#7 finds no FP16 Winograd 3 x 3 among cuDNN's kernels
DEPTHWISE_KERNELS = 1           # a depthwise convolution (groups == c) runs one direct kernel (PyTorch's
                                #   conv_depthwise2d / cuDNN's grouped direct kernel), no MMA tile (`gpu.py`)


def conv_parts_ns(host, n, h, w, c, f, kh, kw, stride=1, pad=0, groups=1, elem_bytes=2):
    """The unscaled pieces of `conv_algorithms_ns` (arrays broadcast, ns, no launch): {"gemm": the im2col
    view's GEMM, "winograd_products": the F(4x4, 3x3) products, "winograd_transforms": its three transform
    kernels' streaming, "direct": the depthwise kernel} and the masks {"one_by_one", "depthwise", "winograd"}
    of where each applies.  `gpu_check.fit_conv` scales them to fit the three constants."""
    n, h, w, c, f, kh, kw, stride, pad, g, eb = (_f(x) for x in (n, h, w, c, f, kh, kw, stride, pad, groups,
                                                                  elem_bytes))
    if np.any(stride < 1) or np.any(g < 1) or np.any(c % g) or np.any(f % g):
        raise ValueError("conv_ns: stride and groups must be >= 1 and groups must divide c and f; got "
                         f"stride={stride}, groups={g}, c={c}, f={f}")
    oh = np.floor((h + 2 * pad - kh) / stride) + 1
    ow = np.floor((w + 2 * pad - kw) / stride) + 1
    if np.any(oh < 1) or np.any(ow < 1):
        raise ValueError(f"conv_ns: the kernel ({kh} x {kw}) is larger than the padded input ({h} x {w}, pad {pad})")
    host = host.replace(launch_overhead_ns=0.0)
    pix = n * oh * ow
    a2 = (WINOGRAD_NONFUSED_TILE + 2.0) ** 2
    tiles = n * np.ceil(oh / WINOGRAD_NONFUSED_TILE) * np.ceil(ow / WINOGRAD_NONFUSED_TILE)
    transforms = (elementwise_ns(host, (n * h * w * c + a2 * tiles * c) * eb, outputs=a2 * tiles * c)
                  + elementwise_ns(host, (kh * kw + a2) * f * c * eb, outputs=a2 * f * c)
                  + elementwise_ns(host, (a2 * tiles * f + pix * f) * eb, outputs=pix * f))
    return {"gemm": gemm_ns(host, pix, f / g, c / g * kh * kw, g, eb),
            "winograd_products": gemm_ns(host, tiles, f, c, a2, eb), "winograd_transforms": transforms,
            "direct": elementwise_ns(host, (n * h * w * c + f / g * kh * kw * c + pix * f) * eb,
                                     flops=2.0 * pix * f * kh * kw, outputs=pix * f),
            "one_by_one": (kh == 1) & (kw == 1), "depthwise": (g == c) & (g > 1),
            "winograd": (kh == 3) & (kw == 3) & (stride == 1) & (g == 1) & (eb >= WINOGRAD_MIN_ELEM_BYTES)}


def conv_combine(parts, implicit=None, winograd_gemm=None, winograd_transform=None):
    """{algorithm: ns} from `conv_parts_ns`'s pieces and the three constants (None: the module's fits)."""
    implicit = IMPLICIT_GEMM_SLOWDOWN if implicit is None else implicit
    winograd_gemm = WINOGRAD_GEMM_SLOWDOWN if winograd_gemm is None else winograd_gemm
    winograd_transform = WINOGRAD_TRANSFORM_SCALE if winograd_transform is None else winograd_transform
    p = parts
    ig = np.where(p["one_by_one"], p["gemm"], p["gemm"] * implicit + CONV_KERNEL_GAP_NS)
    wino = p["winograd_products"] * winograd_gemm + p["winograd_transforms"] * winograd_transform \
        + 3 * CONV_KERNEL_GAP_NS
    direct = p["direct"] + (DEPTHWISE_KERNELS - 1) * CONV_KERNEL_GAP_NS
    return {"implicit_gemm": np.where(p["depthwise"], np.inf, ig),
            "winograd_nonfused": np.where(p["winograd"], wino, np.inf),
            "depthwise": np.where(p["depthwise"], direct, np.inf)}


def conv_algorithms_ns(host, n, h, w, c, f, kh, kw, stride=1, pad=0, groups=1, elem_bytes=2):
    """{algorithm: ns} of a convolution (NCHW input n x c x h x w, f filters of c / groups x kh x kw) under each of
    the algorithms modelled, np.inf where an algorithm does not apply (arrays broadcast); the op's launch
    (`launch_overhead_ns`) is not in them (`conv_ns` adds it once).

    * "implicit_gemm": the product m = n x output pixels, n = f / groups, k = c / groups x kh x kw (`groups` of
      them, `gemm_ns`) x `IMPLICIT_GEMM_SLOWDOWN`, plus the computeOffsets kernel (`CONV_KERNEL_GAP_NS`); a
      1 x 1 convolution is the plain GEMM of its pixels (one kernel, no slowdown).
    * "winograd_nonfused" (3 x 3, stride 1, groups 1, FP32: `WINOGRAD_MIN_ELEM_BYTES`): F(4x4, 3x3)
      (`WINOGRAD_NONFUSED_TILE`): 36 batched (n x tiles) x c . c x f products (`gemm_ns` x
      `WINOGRAD_GEMM_SLOWDOWN`) between the input, filter and output transforms, each a kernel streaming
      its operands (`elementwise_ns` x `WINOGRAD_TRANSFORM_SCALE`).
    * "depthwise" (groups == c > 1): one direct kernel, memory-bound: the input, the filters and the output
      once, its 2 x kh x kw FLOP an output at the FP32 rate (`elementwise_ns`); the only algorithm of a
      depthwise convolution.

    Not modelled: cuDNN's fused Winograd F(2x2, 3x3) (its time on NeuSight's rows follows no product of
    `gemm_ns`; the rows it ran are timed by the two above) and FFT / FFT-tiling (no measured large kernel)."""
    return conv_combine(conv_parts_ns(host, n, h, w, c, f, kh, kw, stride, pad, groups, elem_bytes))


CONV_KERNELS = {"implicit_gemm": 2, "winograd_nonfused": 4, "depthwise": DEPTHWISE_KERNELS}
                                # kernels each algorithm launches (a 1 x 1 implicit GEMM: 1), as NeuSight's
                                #   `kernels=N` counts them


def conv_fastest(times: dict):
    """(ns, name) of the fastest algorithm of {algorithm: ns} (`conv_combine`, arrays broadcast):
    cuDNN's benchmark mode's pick, the first in `times`' order among equal times."""
    t = np.stack(np.broadcast_arrays(*times.values()))
    return t.min(axis=0), np.array(list(times))[np.argmin(t, axis=0)]


def conv_ns(host, n, h, w, c, f, kh, kw, stride=1, pad=0, groups=1, elem_bytes=2):
    """ns of a convolution (NCHW input n x c x h x w, f filters of c / groups x kh x kw, stride, zero padding
    `pad`) as cuDNN's benchmark mode runs it: the fastest of the algorithms `conv_algorithms_ns` models, plus
    the op's launch.  Scalars or arrays (broadcast)."""
    t = conv_algorithms_ns(host, n, h, w, c, f, kh, kw, stride, pad, groups, elem_bytes)
    return conv_fastest(t)[0] + _f(host.launch_overhead_ns)


def conv_algorithm(host, n, h, w, c, f, kh, kw, stride=1, pad=0, groups=1, elem_bytes=2):
    """The name of the algorithm `conv_ns` picks for each convolution (array of str, broadcast)."""
    return conv_fastest(conv_algorithms_ns(host, n, h, w, c, f, kh, kw, stride, pad, groups, elem_bytes))[1]


__all__ = ["LIB_TILES", "conv_fastest", "CONV_KERNEL_GAP_NS", "IMPLICIT_GEMM_SLOWDOWN", "WINOGRAD_GEMM_SLOWDOWN",
           "WINOGRAD_TRANSFORM_SCALE", "WINOGRAD_NONFUSED_TILE", "WINOGRAD_MIN_ELEM_BYTES", "DEPTHWISE_KERNELS", "CONV_KERNELS",
           "conv_parts_ns", "conv_combine", "conv_algorithms_ns", "conv_algorithm",
           "conv_ns", "MAP_ELEMS_PER_BLOCK", "NORM_BLOCK_THREADS", "SOFTMAX_WARP_MAX",
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
