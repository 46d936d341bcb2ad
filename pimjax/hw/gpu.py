"""GPU (host) time models: how long an op takes on the processor PIM is compared with.

A `HostModel` (core.py) names its model in `HostModel.model`; every function here
dispatches on it, so graph ops (`pimjax.sim.host.host_time`) and code without a graph
(an LLM model's layer table) time the same kernels the same way:

* ``"roofline"`` -- max(bytes / (bw x eff_bw), flops / (peak x eff_flops)) + launch,
  each operand read once (`HostModel.time_ns`).  The model pimjax used alone before.
* ``"dcc"`` -- DCC's GPU model (dcc.md: "312 TFLOP/s FP16 and 3352 GB/s x 0.81
  utilisation"): the same roofline, bandwidth utilisation 0.81, no compute
  utilisation factor and no fixed cost (the host's own fields carry them).
* ``"attacc"`` -- the AttAcc system model's A100a (scale-snu/attacc_simulator
  `src/devices.py` `xPU`, `src/config.py`), re-implemented step by step: an L1 tile
  (tm, tn) chosen from {8..512}^2 to minimise L2 traffic x (1 / SM utilisation)^2,
  an L2 tile that minimises off-chip traffic, off-chip bytes of that tiling at
  bandwidth x MAX_OFF_MEM_BW_UTIL (0.85) x SM utilisation, compute at peak x
  MAX_COMPUTE_UTIL (0.8) x SM utilisation, SM utilisation = thread blocks /
  (ceil(thread blocks / 108) x 108) with one thread block per product of a batched
  product (its MATMUL layers: attention, one per head) or per L1 tile (its FC
  layers); activations and norms from its measured-PyTorch fits; no launch cost.
* ``"occupancy"`` (the presets' default) -- real kernels on few heads / small GEMVs:
  the roofline's bytes and efficiencies, a kernel launch per op, and the SM
  occupancy of the thread blocks the kernel has (AttAcc's wave quantisation, on the
  thread-block mapping of ordinary CUDA kernels: a warp per output of a GEMV; a
  GEMM's block per output tile and k slice, with the tile (128 x 128 down to
  32 x 32) and the split-K factor that make it fastest -- with the operands counted
  once and no per-tile efficiency cost, the most-occupying tile wins (mostly 32 x 32
  on CNN layers): an optimistic bound on a library's pick, not yet checked against a
  measured GEMM; a block per row of a row reduction, 8 elements per thread of a
  map).  Constants and sources below.
* ``"library"`` -- the kernels cuBLAS / rocBLAS and PyTorch run (tile waves with a per-wave
  cost, the dtype's rate, softmax / norm rows read as ATen's kernels read them, a re-read
  from the L2 while the rows in flight fit it), its efficiencies fitted per GPU
  on public measured sets and checked on the rest: `pimjax/hw/gpu_library.py`,
  `pimjax/hw/gpu_check.py` (the per-class table).
* ``"profile"`` -- a GPU described by its own measured table (`pimjax/hw/profile.py`), the
  analytic model `profile_base` filling what the table lacks.
* ``"pimflow"`` -- PIMFlow's GPU as its artifact measures it: Accel-Sim (configuration
  SM75_RTX2060, `hw.host.pimflow_rtx2060`) running the TVM build of each layer
  (`target="cuda -libs=cudnn,cublas"`).  Every kernel costs the configured launch
  (5000 core cycles) and one DRAM round trip before its body.  A product is a library
  kernel -- cuDNN's tensor-core implicit GEMM, the fastest of its Turing CTA tiles
  (cudnnFind picks the fastest), each CTA on its SM's tensor units, k steps of 32 no
  faster than a DRAM round trip, the operands from DRAM once (again per tile when they
  overflow L2) and every tile load through L2; a GEMV-shaped product (cuBLAS GEMV,
  cuDNN's depthwise convolution: no MMA tile) on the CUDA cores -- followed by the TVM
  kernel its bias / folded batch norm, activation and residual add fuse into (cuDNN
  and cuBLAS calls are opaque to TVM's FuseOps, so nothing fuses into them; the
  epilogue reads the product's result from L2 when it fits, the L2 is write-through).
  Other ops are TVM kernels (`topi/cuda/injective.py`: 1024 threads a block, 2 FP16
  each, at most 256 blocks; pools: a thread per output) streaming at the SM-utilised
  bandwidth.  Graph-level fusion (an activation after a product costs nothing more)
  is the caller's: `pimjax.studies.pimflow` (`fused_into_product`).

Units: ns; bytes; FLOP.  Shapes: a product is `batch` independent (m x k) . (k x n)
products (AttAcc's m, n, k, numOp); m is the token / query side.  A 2-D convolution
(`conv_ns`) is cuDNN's pick on "library" (implicit GEMM, FP32's nonfused Winograd, depthwise:
`gpu_library.conv_ns`) and the product of its im2col view (`conv_view`) on every other model.

Example::

    >>> from pimjax.hw.host import a100
    >>> gpu = a100("hbm3", model="attacc")           # AttAcc's A100a
    >>> round(gemm_ns(gpu, 1, 2049, 128, batch=5) + gemm_ns(gpu, 1, 128, 2049, batch=5))
    40096
"""
from __future__ import annotations

import functools
import math

import numpy as np

HOST_ENERGY_FIELDS = ("e_mem_pj_per_byte", "e_l2_pj_per_byte", "e_l1_pj_per_byte", "e_reg_pj", "e_alu_pj_per_mac",
                      "static_power_w")   # the HostModel fields `gpu_energy_pj` reads (hw.core validates them)
GPU_MODELS = ("roofline", "dcc", "attacc", "occupancy", "library", "pimflow", "profile")
GENERIC_GPU_MODELS = ("roofline", "dcc", "attacc", "occupancy", "library")   # the models any GPU builder takes (`hw.host`);
                                                                  #   "pimflow" is PIMFlow's configured RTX 2060 only
FUSING_GPU_MODELS = ("library", "profile")   # the models of library kernels: a graph's maps and row reductions run
                                             #   fused, as XLA / vLLM / cuDNN run them (`sim/gpu_kernels.py`); the
                                             #   papers' models time every op as the papers did

# --------------------------------------------------------------------------
# "occupancy": the thread-block mapping of ordinary CUDA kernels
# --------------------------------------------------------------------------
OCC_THREADS_PER_BLOCK = 256     # CUDA C++ Best Practices Guide, "Thread and Block Heuristics": 128-256
                                #   threads per block is "a good initial range"; 256 = 8 warps
OCC_WARP = 32                   # CUDA Programming Guide: 32 threads per warp
OCC_ELEMS_PER_THREAD = 8        # CUDA Best Practices ("Coalesced Access"): 16 B vector accesses; 16 B = 8 FP16
OCC_GEMM_TILES = ((128, 128), (128, 64), (64, 128), (64, 64), (64, 32), (32, 64), (32, 32))
                                # FP16 tensor-op threadblock tiles (m x n): 128 x 128 CUTLASS's
                                #   default_gemm_configuration; the smaller ones the shapes cuBLAS's kernel
                                #   names carry (recalled: "..._128x64_...", "..._64x64_...",
                                #   "..._tilesize32x32x64_..."), which its heuristic picks for small products
OCC_SPLIT_K = (1, 2, 4, 8, 16)  # split-K slices (CUTLASS / cuBLAS "splitK"): each slice a block per output tile
OCC_TILE_K = 32                 # a slice holds at least one 32-deep k step of the tile
OCC_PARTIAL_BYTES = 4           # a split's FP32 partial sums, written by the slices and read by one reduction kernel
OCC_GEMM_MIN = 64               # assumption: a product whose m and n are both >= 64 runs as a tiled tensor-core
                                #   GEMM; a narrower one as a GEMV kernel (a warp per output, split-free)

# --------------------------------------------------------------------------
# "pimflow": the libraries' kernels on PIMFlow's Accel-Sim RTX 2060 (hardware constants: the HostModel)
# --------------------------------------------------------------------------
PIMFLOW_CUDNN_TILES = ((256, 128), (256, 64), (128, 128))
                                # cuDNN's Turing FP16 tensor-core convolution kernels as profiles name them:
                                #   turing_fp16_s1688cudnn_fp16_256x128_ldg8_relu_f2f_exp_small_nhwc_tn_v1,
                                #   ..._256x64_sliced1x2_..., ..._128x128_... (pytorch/pytorch#54324 on an RTX 2080,
                                #   ryujaehun/pytorch-gpu-benchmark#6, TensorRT tactic logs: trt_turing_h1688cudnn_
                                #   {256x64,256x128,128x128}); no smaller s1688 tile appears in them.  Either orientation
                                #   on the product: the names do not say which GEMM side is the 256
PIMFLOW_TILE_K = 32             # assumption: a CTA's k step (CUTLASS's Turing tensor-op threadblock k, 32)
PIMFLOW_TVM_THREADS = 1024      # TVM topi/cuda/injective.py (the PIMFlow_tvm fork): max_num_threads, 1024 on CUDA
PIMFLOW_TVM_MAX_BLOCKS = 256    #   ... max_block = 256 (bigger maps loop inside the blocks)
PIMFLOW_TVM_VECTOR = 2          #   ... vector_width = 2 for float16 (half2)

# --------------------------------------------------------------------------
# "attacc": constants of the AttAcc simulator (src/devices.py, src/config.py)
# --------------------------------------------------------------------------
ATTACC_TILES = (8, 16, 32, 64, 128, 192, 256, 320, 384, 448, 512)   # devices.py _get_optimal_tile: trange
ATTACC_L1_TK = 32                                                    # devices.py: l1_tk = 32
ATTACC_L2_TK_DIV = 64                                                # devices.py: "experimentally found" l2_tk = k / 64
ATTACC_ACT_NS_PER_BYTE_1555 = 0.000000447e3   # devices.py _mem_time, LayerType.ACT: 0.000000447 us/B at
ATTACC_ACT_FIXED_NS = 8.29e3                  #   1555 GB/s (scaled by 1555 GB/s / bandwidth) + 8.29 us
ATTACC_NORM_NS_PER_BYTE_1555 = 0.0000016e3    # devices.py, LayerType.NORM: 0.0000016 us/B (same scaling)
ATTACC_NORM_FIXED_NS = 6.87e3                 #   + 6.87 us
ATTACC_FIT_BANDWIDTH = 1555e9                 # devices.py: the A100-40GB bandwidth the ACT / NORM fits were taken on
NVLINK_STEP_NS = 6060.0           # devices.py _io_time_energy get_nvlink_time ("interpolation of real data on A100"):
NVLINK_NS_PER_BYTE = 0.009        #   6060 ns + 0.009 ns/B x (600 GB/s / link) per step, at least size / (link / 2)
NVLINK3_GBPS = 600.0              # config.py A100a INTERFACE_BW: NVLink3 600 GB/s (A100 whitepaper)


def _f(x) -> float:
    return float(np.asarray(x))


def wave_utilisation(blocks: int, sms: int) -> float:
    """Share of the SMs' time a kernel of `blocks` thread blocks keeps busy:
    blocks / (ceil(blocks / sms) x sms) (AttAcc devices.py `core_utilization`:
    the last wave of thread blocks leaves SMs idle; 5 blocks on 108 SMs = 0.046)."""
    blocks = max(1, int(blocks))
    return blocks / (math.ceil(blocks / sms) * sms)


# --------------------------------------------------------------------------
# AttAcc's tiling (devices.py _get_traffic_for_tile / _get_optimal_tile)
# --------------------------------------------------------------------------
def _attacc_traffic(tm, tn, m, n, k, num_op, eb):
    """[A, B, C] bytes of an (m x k) . (k x n) product tiled tm x tn (numpy-broadcast)."""
    return (np.ceil(n / tn) * m * k * eb * num_op, np.ceil(m / tm) * n * k * eb * num_op,
            np.full(np.broadcast(tm, tn).shape, m * n * eb * num_op, dtype=np.float64))


@functools.lru_cache(maxsize=4096)
def attacc_tiles(m: int, n: int, k: int, num_op: int, eb: int, fc: bool, sms: int, l1: int, l2: int):
    """(l1_tm, l1_tn, l2_tm, l2_tn) as AttAcc's `_get_optimal_tile` picks them."""
    best, best_cost = (0, 0), math.inf
    for tm0 in ATTACC_TILES:                      # the same order as the reference (first minimum wins)
        for tn0 in ATTACC_TILES:
            tm, tn = min(tm0, m), min(tn0, n)
            if (tm + tn) * ATTACC_L1_TK * eb + tm * tn * eb > l1:
                continue
            l2_access = sum(float(x) for x in _attacc_traffic(tm, tn, m, n, k, num_op, eb))
            blocks = math.ceil(m / tm) * math.ceil(n / tn) * num_op if fc else num_op
            cost = l2_access * (1.0 / wave_utilisation(blocks, sms)) ** 2
            if cost < best_cost:
                best, best_cost = (tm, tn), cost
    l1_tm, l1_tn = best
    l2_tk = k / ATTACC_L2_TK_DIV
    tms = np.minimum(np.array([l1_tm * i for i in range(1, int(m / l1_tm) + 1)] + [m], np.float64), m)
    tns = np.minimum(np.array([l1_tn * i for i in range(1, int(n / l1_tn) + 1)] + [n], np.float64), n)
    TM, TN = np.meshgrid(tms, tns, indexing="ij")         # row-major = the reference's loop order
    need = (TM + TN) * l2_tk * eb + TM * TN * eb
    ok = ~((need > l2) & ((TM != l1_tm) | (TN != l1_tn)))
    access = np.ceil(m / TM) * n * k * eb + np.ceil(n / TN) * m * k * eb + m * n * eb
    access = np.where(ok, access, np.inf)
    i = int(np.argmin(access))                             # first minimum, as the reference's strict "<"
    return l1_tm, l1_tn, int(TM.flat[i]), int(TN.flat[i])


def _attacc_gemm_ns(host, m, n, k, batch, eb, fc=None) -> float:
    if fc is None:
        fc = batch == 1      # AttAcc: weight layers (FC) are single products, attention (MATMUL) batched by head
    l1_tm, l1_tn, l2_tm, l2_tn = attacc_tiles(int(m), int(n), int(k), int(batch), int(eb), fc,
                                              host.sms, host.l1_bytes_per_sm, host.l2_bytes)
    off = sum(float(x) for x in _attacc_traffic(l2_tm, l2_tn, m, n, k, batch, eb))
    blocks = math.ceil(m / l1_tm) * math.ceil(n / l1_tn) * batch if fc else batch
    util = wave_utilisation(blocks, host.sms)
    t_mem = off / (_f(host.mem_bandwidth) * _f(host.bandwidth_efficiency) * util) * 1e9
    # AttAcc scales the FP16 peak by 2 / bytes (int(2 / dbyte) there: 0 for 4-byte data, a division by
    # zero); as a ratio it is the A100's own: TF32 half the FP16 rate, INT8 twice (whitepaper)
    flops_rate = _f(host.peak_flops) * _f(host.flops_efficiency) * util * (2.0 / eb)
    t_cmp = 2.0 * m * n * k * batch / flops_rate * 1e9
    return max(t_mem, t_cmp) + _f(host.launch_overhead_ns)


# --------------------------------------------------------------------------
# public entry points
# --------------------------------------------------------------------------
def gemm_ns(host, m: int, n: int, k: int, batch: int = 1, elem_bytes: int = 2,
            operand_bytes: float | None = None, layer: str | None = None) -> float:
    """ns of `batch` independent (m x k) . (k x n) products on `host`'s model.

    m: rows of the left operand (tokens / queries; 1 for a decode GEMV), n: outputs
    per row, k: the contraction, elem_bytes: bytes per element of every operand.
    A decode GEMV y = W x with W of N x K is gemm_ns(host, 1, N, K); an attention
    score of H heads over L keys of dimension d is gemm_ns(host, 1, L, d, batch=H).
    operand_bytes: the bytes the operands and result really occupy (a K x K
    convolution's input is about K^2 times smaller than its (m x k) im2col view);
    read by the "pimflow" model only (default: batch x (m k + k n + m n) x
    elem_bytes, as the other models count).
    layer: "fc" (a weight layer) or "matmul" (products of activations, a thread
    block each), read by the "attacc" model only; default: AttAcc's
    convention, a single product is FC and batched ones MATMUL.
    """
    m, n, k, batch, eb = int(m), int(n), int(k), int(batch), int(elem_bytes)
    model = host.model
    if layer not in (None, "fc", "matmul"):
        raise ValueError(f"gemm_ns: layer must be None, 'fc' or 'matmul', got {layer!r}")
    if model == "attacc":
        return _attacc_gemm_ns(host, m, n, k, batch, eb, None if layer is None else layer == "fc")
    if model == "pimflow":
        return _pimflow_gemm_ns(host, m, n, k, batch, eb, operand_bytes)
    if model == "library":
        from . import gpu_library
        return float(gpu_library.gemm_ns(host, m, n, k, batch, eb))
    if model == "profile":
        from .profile import profile_gemm_ns
        return profile_gemm_ns(host, m, n, k, batch, eb, operand_bytes)
    bytes_moved = batch * (m * k + k * n + m * n) * eb
    flops = 2.0 * batch * m * n * k
    if model in ("roofline", "dcc"):
        return float(host.time_ns(bytes_moved, flops))
    # occupancy: the kernel's thread blocks, its launch
    if m >= OCC_GEMM_MIN and n >= OCC_GEMM_MIN:
        return min(_tiled_ns(host, bytes_moved, flops, m, n, k, batch, tile, s)
                   for tile in OCC_GEMM_TILES for s in OCC_SPLIT_K if s == 1 or s * OCC_TILE_K <= k)
    blocks = batch * math.ceil(m * n / (OCC_THREADS_PER_BLOCK // OCC_WARP))   # a warp per output
    return _occupied_ns(host, bytes_moved, flops, blocks)


def conv_view(n: int, h: int, w: int, c: int, f: int, kh: int, kw: int, stride: int = 1, groups: int = 1) -> dict:
    """The im2col view of a 2-D convolution as `gemm_ns` reads it: {m, n, k, batch}.

    The convolution: an (unpadded) n x h x w x c input, f filters of c / groups x kh x kw, a
    `stride` in both spatial dimensions, `groups` groups (c == f == groups: depthwise).  Its
    view: the output pixels n x oh x ow against the f / groups filters of a group (m the smaller,
    n the larger, as `sim.host.op_gemm_shape` orders a traced contraction), k = c / groups x
    kh x kw, one product per group."""
    oh, ow = (h - kh) // stride + 1, (w - kw) // stride + 1
    pixels, per_group = n * oh * ow, f // groups
    return {"m": min(pixels, per_group), "n": max(pixels, per_group), "k": c // groups * kh * kw, "batch": groups}


def _conv_host(host):
    """The host whose model times a convolution: a "profile" host's base (a profile holds none)."""
    if host.model != "profile":
        return host
    from .profile import base_host
    return base_host(host)


def conv_ns(host, n: int, h: int, w: int, c: int, f: int, kh: int, kw: int, stride: int = 1, groups: int = 1,
            elem_bytes: int = 2, operand_bytes: float | None = None) -> float:
    """ns of a 2-D convolution on `host`'s model (shapes as `conv_view`: the input already
    padded, as a traced graph pads it in an op of its own; elem_bytes per element).

    The "library" model runs it as cuDNN's benchmark mode does (`gpu_library.conv_ns`: the
    fastest of the implicit GEMM, the nonfused Winograd F(4x4, 3x3) in FP32 and a depthwise direct
    kernel, fitted on NeuSight's measured convolutions); a "profile" host its base model's (a
    profile holds no convolution); every other model times it as the `gemm_ns` of its im2col view
    (`conv_view`), as those models were defined (operand_bytes: the real bytes of the input,
    filters and output, read by the "pimflow" model)."""
    host = _conv_host(host)
    if host.model == "library":
        from . import gpu_library
        return float(gpu_library.conv_ns(host, n, h, w, c, f, kh, kw, stride, 0, groups, elem_bytes))
    return gemm_ns(host, **conv_view(n, h, w, c, f, kh, kw, stride, groups), elem_bytes=elem_bytes,
                   operand_bytes=operand_bytes)


def conv_algorithm(host, n: int, h: int, w: int, c: int, f: int, kh: int, kw: int, stride: int = 1,
                   groups: int = 1, elem_bytes: int = 2) -> str:
    """The algorithm `conv_ns` times a convolution as on `host`'s model: on "library" (and a
    "profile" host on it) cuDNN's pick, `gpu_library.conv_algorithm`'s name ("implicit_gemm",
    "winograd_nonfused", "depthwise"); "im2col_gemm" on every other model."""
    host = _conv_host(host)
    if host.model == "library":
        from . import gpu_library
        return str(gpu_library.conv_algorithm(host, n, h, w, c, f, kh, kw, stride, 0, groups, elem_bytes))
    return "im2col_gemm"


def _tiled_ns(host, bytes_moved: float, flops: float, m: int, n: int, k: int, batch: int, tile: tuple,
              split: int) -> float:
    """ns of the product as a tensor-core GEMM of threadblock tile `tile` (tm, tn) with k split into
    `split` slices: a block per (output tile, slice).  A split writes split x m x n FP32 partial sums
    and a second kernel (one more launch) reads them back and writes the result -- why a library
    splits k only where the output tiles alone leave SMs idle.  The operands are counted once
    whatever the tile (L2 absorbs a smaller tile's re-reads: an assumption that favours small tiles).
    The library's pick is modelled as the fastest of these candidates (an optimistic bound)."""
    tm, tn = tile
    blocks = batch * math.ceil(m / tm) * math.ceil(n / tn) * split
    if split == 1:
        return _occupied_ns(host, bytes_moved, flops, blocks)
    partial = 2.0 * split * batch * m * n * OCC_PARTIAL_BYTES
    return _occupied_ns(host, bytes_moved + partial, flops, blocks) + _f(host.launch_overhead_ns)


def elementwise_ns(host, bytes_moved: float, flops: float = 0.0, *, outputs: int, reduction: int = 1,
                   kind: str = "act") -> float:
    """ns of a non-contraction kernel on `host`'s model.

    bytes_moved: operand + result bytes; flops: its arithmetic; outputs: result
    elements (independent work items); reduction: input elements folded into each
    output (1 for a map; L for a softmax / norm row of L).  kind: "act" (a map:
    GELU, add, ...), "norm" (a layer norm), "softmax" / "reduce" (row reductions)
    or "copy" (a layout change / host primitive);
    the "attacc" model reads it (its ACT and NORM layers are fits to measured
    PyTorch kernels, the rest stream at its SM-utilised bandwidth), and the "library"
    model (a norm's / softmax's passes, bandwidth and latency, `gpu_library.elementwise_ns`).
    """
    model = host.model
    if model in ("roofline", "dcc"):
        return float(host.time_ns(bytes_moved, flops))
    outputs, reduction = max(1, int(outputs)), max(1, int(reduction))
    if model == "pimflow":
        return _pimflow_tvm_ns(host, bytes_moved, flops, outputs, reduction)
    if model == "library":
        from . import gpu_library
        return float(gpu_library.elementwise_ns(host, bytes_moved, flops, outputs, reduction, kind))
    if model == "profile":
        from .profile import profile_elementwise_ns
        return profile_elementwise_ns(host, bytes_moved, flops, outputs=outputs, reduction=reduction, kind=kind)
    if model == "attacc":
        scale = ATTACC_FIT_BANDWIDTH / _f(host.mem_bandwidth)
        if kind == "act":
            return ATTACC_ACT_NS_PER_BYTE_1555 * scale * bytes_moved + ATTACC_ACT_FIXED_NS
        if kind == "norm":
            return ATTACC_NORM_NS_PER_BYTE_1555 * scale * bytes_moved + ATTACC_NORM_FIXED_NS
        # SOFTMAX layers: one thread block per row (numOp), streamed at the utilised bandwidth;
        # a copy (no AttAcc layer) streams on every SM
        util = 1.0 if kind == "copy" else wave_utilisation(outputs if reduction > 1 else 1, host.sms)
        t_mem = bytes_moved / (_f(host.mem_bandwidth) * _f(host.bandwidth_efficiency) * util) * 1e9
        t_cmp = flops / (_f(host.peak_flops) * _f(host.flops_efficiency) * util) * 1e9
        return max(t_mem, t_cmp) + _f(host.launch_overhead_ns)
    if reduction > 1:          # a warp per row up to a block per row (a row of >= 256 elements fills one)
        per_block = max(1, OCC_THREADS_PER_BLOCK // min(OCC_THREADS_PER_BLOCK, max(OCC_WARP, reduction)))
        blocks = math.ceil(outputs / per_block)
    else:
        blocks = math.ceil(outputs / (OCC_THREADS_PER_BLOCK * OCC_ELEMS_PER_THREAD))
    return _occupied_ns(host, bytes_moved, flops, blocks)


def attention_ns(host, heads: int, d: int, L: int, batch: int = 1, elem_bytes: int = 2,
                 softmax: bool = True, kv_heads: int | None = None) -> float:
    """ns of one decode step's attention for `heads` x `batch` queries over L keys
    of dimension d: the score GEMV, the softmax of each row and the context GEMV,
    as three kernels (what a traced jnp attention is: `host_time` of its ops agrees); on
    the "library" model FlashDecoding's fused kernel (`gpu_library.attention_ns`).

    softmax=False leaves the softmax out (AttAcc's "attention GEMVs" figure:
    attacc.md's 2 543 / 10 053 / 40 096 ns per layer are score + context).
    kv_heads: key / value heads (grouped-query attention, `heads` a multiple
    of it): each KV head's cache is read once for its group of g = heads /
    kv_heads queries, products of g rows (the traced GQA einsum's shapes);
    None: one per query head (multi-head attention).  On the "attacc" model
    the products are its MATMUL layers (a thread block per product, whatever
    their count: one KV head of one request is one block, not an FC layer).
    """
    kv = int(heads) if kv_heads is None else int(kv_heads)
    if kv < 1 or int(heads) % kv:
        raise ValueError(f"attention_ns: heads {heads} must be a multiple of kv_heads {kv_heads}")
    if host.model == "library" and softmax:
        # the library model runs attention as vLLM does: FlashDecoding's fused kernel
        from . import gpu_library
        return float(gpu_library.attention_ns(host, heads, d, L, batch, elem_bytes, kv_heads=kv))
    g = int(heads) // kv
    hb = int(heads) * int(batch)
    kb = kv * int(batch)
    t = gemm_ns(host, g, L, d, kb, elem_bytes, layer="matmul") + gemm_ns(host, g, d, L, kb, elem_bytes, layer="matmul")
    if softmax:
        # AttAcc's SOFTMAX layer: 5 FLOP per element, the row read and written once
        t += elementwise_ns(host, 2 * hb * L * elem_bytes, 5.0 * hb * L, outputs=hb, reduction=L,
                            kind="softmax")
    return t


def allreduce_ns(host, bytes_per_gpu: float, gpus: int, link_GBps: float = NVLINK3_GBPS) -> float:
    """ns of a tensor-parallel all-reduce of `bytes_per_gpu` (each GPU's partial
    result) over `gpus` GPUs on NVLink of `link_GBps`: AttAcc's measured-A100 fit
    (devices.py get_nvlink_time): (gpus - 1) steps of max(6060 + 0.009 x chunk x
    600 / link, chunk / (link / 2)) ns, chunk = bytes / gpus.  The same for every
    model (a measured figure; 0 for one GPU).  `host` is unused, for symmetry."""
    if gpus <= 1:
        return 0.0
    chunk = bytes_per_gpu / gpus
    bw = link_GBps * 1e9
    step = max((NVLINK_STEP_NS + NVLINK_NS_PER_BYTE * chunk * (600e9 / bw)), chunk / (bw / 2) * 1e9)
    return step * (gpus - 1)


def gpu_time(host, kind: str, **shape) -> float:
    """ns of one op on `host`'s model, by kind: "gemm" / "gemv" (gemm_ns's m, n, k,
    batch, elem_bytes; a "gemv" defaults m = 1), "conv" (conv_ns's n, h, w, c, f, kh, kw,
    stride, groups, elem_bytes), "attention" (attention_ns's heads,
    d, L, batch, elem_bytes, softmax) or "elementwise" (elementwise_ns's bytes_moved,
    flops, outputs, reduction, kind as `op`) or "allreduce" (allreduce_ns's
    bytes_per_gpu, gpus, link_GBps).

    >>> from pimjax.hw.host import a100
    >>> round(gpu_time(a100("hbm3", model="roofline"), "gemv", n=4096, k=4096))
    12400
    """
    if kind in ("gemm", "gemv"):
        if kind == "gemv":
            shape.setdefault("m", 1)
        return gemm_ns(host, **shape)
    if kind == "conv":
        return conv_ns(host, **shape)
    if kind == "attention":
        return attention_ns(host, **shape)
    if kind == "elementwise":
        if "op" in shape:
            shape["kind"] = shape.pop("op")
        return elementwise_ns(host, **shape)
    if kind == "allreduce":
        return allreduce_ns(host, **shape)
    raise ValueError(f"gpu_time kind {kind!r}: valid kinds are "
                     f"['allreduce', 'attention', 'conv', 'elementwise', 'gemm', 'gemv']")


def gpu_energy_pj(host, bytes_moved: float, macs: float, ns: float, reg_accesses: float | None = None) -> float:
    """pJ of one kernel on `host` (AttAcc's GPU energy, devices.py `_get_energy`, plus static power):

        bytes_moved x (e_mem + e_l2 + e_l1) + reg_accesses x e_reg + macs x e_alu + static_power_w x ns x 1e3

    bytes_moved: the operand traffic (each operand read once, the result written once:
    `sim.host.op_bytes`; a split-K pick's FP32 partials, which the occupancy time model adds,
    are not charged -- a lower bound), charged once at every level -- AttAcc's elementwise
    kernels do so; its GEMMs charge L2 / L1 the re-reads of their tiles, which the occupancy /
    roofline models do not count, so on a product this is the lower bound of the on-chip part.
    macs: multiply-accumulates (FLOP / 2, as AttAcc).  ns: the kernel's time (static power x
    time; W x ns = 1e3 pJ).  reg_accesses: register-file accesses (default 3 per MAC -- AttAcc's
    reg traffic m n k per operand of a product; an elementwise kernel passes its bytes, as AttAcc).
    Constants: the host's energy fields (`HostModel`); ValueError when they are all 0 (a host
    without an energy model, e.g. UPMEM's Xeon: no silent 0 pJ)."""
    if not any(_f(getattr(host, f)) for f in HOST_ENERGY_FIELDS):
        raise ValueError(f"host {getattr(host, 'name', host)!r} has no energy model (its HostModel energy fields "
                         f"{HOST_ENERGY_FIELDS} are all 0); give them values with a source, e.g. "
                         "`replace(host, e_mem_pj_per_byte=..., ...)` (hw/host.py cites AttAcc's for the GPUs)")
    reg = 3.0 * macs if reg_accesses is None else reg_accesses
    per_byte = _f(host.e_mem_pj_per_byte) + _f(host.e_l2_pj_per_byte) + _f(host.e_l1_pj_per_byte)
    return float(bytes_moved * per_byte + reg * _f(host.e_reg_pj) + macs * _f(host.e_alu_pj_per_mac)
                 + _f(host.static_power_w) * ns * 1e3)


def _occupied_ns(host, bytes_moved: float, flops: float, blocks: int) -> float:
    """The occupancy model: bandwidth and FLOP/s scaled by the SMs the blocks keep
    busy (wave quantisation), plus the launch."""
    util = wave_utilisation(blocks, host.sms)
    t_mem = bytes_moved / (_f(host.mem_bandwidth) * _f(host.bandwidth_efficiency) * util) * 1e9
    t_cmp = flops / (_f(host.peak_flops) * _f(host.flops_efficiency) * util) * 1e9
    return max(t_mem, t_cmp) + _f(host.launch_overhead_ns)


# --------------------------------------------------------------------------
# "pimflow": PIMFlow's Accel-Sim RTX 2060 (hw.host.pimflow_rtx2060)
# --------------------------------------------------------------------------
def _pimflow_kernel_ns(host, body_ns: float) -> float:
    """A kernel on Accel-Sim: the configured launch latency, one DRAM round trip (its
    first loads), then its body."""
    return _f(host.launch_overhead_ns) + _f(host.mem_latency_ns) + body_ns


def _pimflow_stream_ns(host, dram_bytes: float, flops: float, blocks: int, l2_bytes: float = 0.0) -> float:
    """Body of a CUDA-core kernel of `blocks` thread blocks: FLOP at the CUDA
    cores' rate scaled by the SMs the blocks keep busy (wave quantisation);
    DRAM bytes at the memory's bandwidth, or at what the busy SMs can keep in
    flight when that is less (Little's law: each SM at most
    `sm_inflight_bytes / mem_latency_ns`, so a kernel of few blocks is
    latency-bound and does not slow on fewer channels -- PIMFlow Fig. 3's
    GPU-only kernels on half the channels); L2 bytes at the L2's rate."""
    util = wave_utilisation(blocks, host.sms)
    per_sm = _f(host.sm_inflight_bytes) / (_f(host.mem_latency_ns) * 1e-9) if _f(host.mem_latency_ns) > 0 else 0.0
    bw = _f(host.mem_bandwidth) * _f(host.bandwidth_efficiency)
    bw = min(bw, util * host.sms * per_sm) if per_sm > 0 else bw * util
    t_mem = dram_bytes / bw * 1e9
    t_l2 = l2_bytes / _f(host.l2_bandwidth) * 1e9
    t_cmp = flops / (_f(host.simt_flops) * _f(host.flops_efficiency) * util) * 1e9
    return max(t_mem, t_l2, t_cmp)


def _pimflow_tvm_ns(host, bytes_moved: float, flops: float, outputs: int, reduction: int) -> float:
    """A TVM-generated kernel (map or reduction) on PIMFlow's GPU, its operands from DRAM."""
    if reduction > 1:      # TVM's pool schedules (the CNNs' reductions): a thread per output, 1024 a block
        blocks = math.ceil(outputs / PIMFLOW_TVM_THREADS)
    else:                  # injective: 2 FP16 per thread, 1024 threads a block, at most 256 blocks
        blocks = min(PIMFLOW_TVM_MAX_BLOCKS, math.ceil(outputs / (PIMFLOW_TVM_THREADS * PIMFLOW_TVM_VECTOR)))
    return _pimflow_kernel_ns(host, _pimflow_stream_ns(host, bytes_moved, flops, blocks))


def pimflow_epilogue_ns(host, out_bytes: float, outputs: int) -> float:
    """ns of the TVM kernel after a product on PIMFlow's GPU (its bias / folded batch
    norm, with any activation and residual add fused in): it reads the product's
    result -- from L2 when it fits there, the product having just written it -- and
    writes it to DRAM (the configured L2 is write-through).  out_bytes: the result's
    bytes; outputs: its elements."""
    resident = out_bytes <= host.l2_bytes
    blocks = min(PIMFLOW_TVM_MAX_BLOCKS, math.ceil(outputs / (PIMFLOW_TVM_THREADS * PIMFLOW_TVM_VECTOR)))
    dram = out_bytes * (1.0 if resident else 2.0)
    return _pimflow_kernel_ns(host, _pimflow_stream_ns(host, dram, float(outputs), blocks,
                                                       l2_bytes=2.0 * out_bytes))


def _pimflow_gemm_ns(host, m: int, n: int, k: int, batch: int, eb: int, operand_bytes) -> float:
    """The library kernel of a product and its TVM epilogue on PIMFlow's GPU."""
    out_bytes = batch * m * n * eb
    gemm_in = batch * (m * k + k * n) * eb              # the (m x k), (k x n) views (a conv's im2col)
    in_bytes = gemm_in if operand_bytes is None else max(0.0, float(operand_bytes) - out_bytes)
    flops = 2.0 * batch * m * n * k
    if min(m, n) == 1:
        # no MMA tile fills a product one wide: cuBLAS's GEMV (batch 1) / cuDNN's depthwise convolution
        # (batch = channels) on the CUDA cores, a warp per output (8-warp blocks)
        blocks = math.ceil(batch * m * n / (OCC_THREADS_PER_BLOCK // OCC_WARP))
        body = _pimflow_stream_ns(host, in_bytes + out_bytes, flops, blocks)
    else:
        per_sm = _f(host.peak_flops) * _f(host.flops_efficiency) / host.sms      # tensor FLOP/s of one SM
        lat = _f(host.mem_latency_ns)
        bw = _f(host.mem_bandwidth) * _f(host.bandwidth_efficiency)
        steps = math.ceil(k / PIMFLOW_TILE_K)
        body = math.inf
        for a, b in PIMFLOW_CUDNN_TILES:
            for tm, tn in ((a, b), (b, a)):
                ctas = batch * math.ceil(m / tm) * math.ceil(n / tn)
                step = max(2.0 * tm * tn * PIMFLOW_TILE_K / per_sm * 1e9, lat)    # a k step of one CTA
                t_cmp = math.ceil(ctas / host.sms) * steps * step               # one CTA per SM at a time
                l2 = batch * (m * k * math.ceil(n / tn) + k * n * math.ceil(m / tm)) * eb + out_bytes
                dram = in_bytes + out_bytes if in_bytes <= host.l2_bytes else l2     # re-reads miss an overflowed L2
                body = min(body, max(t_cmp, dram / bw * 1e9, l2 / _f(host.l2_bandwidth) * 1e9))
    return _pimflow_kernel_ns(host, body) + pimflow_epilogue_ns(host, out_bytes, batch * m * n)
