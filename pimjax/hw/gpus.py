"""GPUs by name, from their datasheets: the cards the public measurements were taken on
(`pimjax.hw.measured`) and the ones the papers compare with.

`GPU_SPECS` is data: one row per card, every figure the datasheet's (recalled from the vendors'
datasheets / whitepapers; the README of `hw/measured` names the exact card of each source).
`gpu(name, model)` turns a row into a `HostModel` timed by a GPU model of `hw/gpu.py`.

Fields: fp16: dense FP16 tensor / matrix FLOP/s with FP32 accumulation (the compute type of
PyTorch's FP16 GEMMs and convolutions in cuBLAS / cuDNN / rocBLAS: full rate on the data-centre
cards, half the FP16-accumulate rate on GeForce Turing; a card without tensor units: its FP32
rate, the units an FP32 accumulation runs on); fp32: the FP32 rate an FP32 GEMM runs at
(NVIDIA: the CUDA cores' FFMA -- PyTorch leaves TF32 off for matmuls; AMD CDNA: "FP32 Matrix",
the MFMA f32 rate rocBLAS's kernels use); bandwidth: bytes/s of the card's memory; sms: SMs (NVIDIA) / CUs (AMD);
l2: bytes; smem: shared memory (LDS) bytes per SM.

    >>> g = gpu("v100", model="library")
    >>> g.sms, round(g.mem_bandwidth / 1e9), round(g.simt_flops / 1e12, 1)
    (80, 900, 14.0)
"""
from __future__ import annotations

from .host import RTX2060_BOOST_GHZ, RTX2060_FP16_FMA_PER_TC, RTX2060_TENSOR_CORES

MB = 1024 * 1024
KB = 1024

# the RTX 2060's FP16 product rate: 240 tensor cores x 64 FMA x 2 FLOP x 1.68 GHz boost (`hw.host`'s RTX2060_*
# constants) = 51.6 TFLOP/s with FP16 accumulate, halved: PyTorch's / cuDNN's FP16 products accumulate in FP32, which
# GeForce Turing runs at half rate (the Turing whitepaper's GeForce table); PIMFlow's Accel-Sim configuration models
# the same 256 FP16 MACs a clock an SM.  Its INT8 is not halved (`gpu_library.dtype_flops`' 2 x this understates it)
RTX2060_FP16_FP32ACC = RTX2060_TENSOR_CORES * RTX2060_FP16_FMA_PER_TC * 2 * RTX2060_BOOST_GHZ * 1e9 / 2

GPU_SPECS = {
    # name: (label, fp16 FLOP/s, fp32 FLOP/s, bytes/s, SMs, L2 bytes, smem bytes / SM)
    "a100": ("A100-SXM4-80GB", 312e12, 19.5e12, 2039e9, 108, 40 * MB, 164 * KB),    # A100 datasheet (SXM4 80GB)
    "a100-40gb": ("A100-PCIe-40GB", 312e12, 19.5e12, 1555e9, 108, 40 * MB, 164 * KB),   # A100 datasheet (PCIe 40GB)
    "a100-80gb": ("A100-PCIe-80GB", 312e12, 19.5e12, 1935e9, 108, 40 * MB, 164 * KB),   # A100 datasheet (PCIe 80GB)
    "h100": ("H100-SXM5-80GB", 989.4e12, 66.9e12, 3.35e12, 132, 50 * MB, 228 * KB),   # H100 datasheet (SXM5)
    "h200": ("H200-SXM-141GB", 989.4e12, 66.9e12, 4.8e12, 132, 50 * MB, 228 * KB),    # H200 datasheet
    "v100": ("V100-PCIe-32GB", 112e12, 14e12, 900e9, 80, 6 * MB, 96 * KB),           # V100 datasheet (PCIe)
    "t4": ("T4", 65e12, 8.1e12, 320e9, 40, 4 * MB, 64 * KB),                         # T4 datasheet
    "l4": ("L4", 121e12, 30.3e12, 300e9, 58, 48 * MB, 100 * KB),                    # L4 datasheet (FP16 dense: 242 / 2)
    "p100": ("P100-PCIe-16GB", 9.3e12, 9.3e12, 732e9, 56, 4 * MB, 64 * KB),         # P100 datasheet (PCIe): no tensor
                                                                                     #   units; FP16 products accumulate
                                                                                     #   in FP32, on the FP32 FMA units
                                                                                     #   (the datasheet's 18.7 of packed
                                                                                     #   FP16 needs FP16 accumulation)
    "p4": ("Tesla P4", 5.5e12, 5.5e12, 192e9, 20, 2 * MB, 96 * KB),                 # P4 datasheet (GP104: no fast FP16)
    "rtx2060": ("RTX 2060", RTX2060_FP16_FP32ACC, 6.45e12, 336e9, 30, 3 * MB, 64 * KB),  # TU106 (RTX2060_FP16_FP32ACC)
    "mi100": ("MI100", 184.6e12, 46.1e12, 1228.8e9, 120, 8 * MB, 64 * KB),          # MI100 datasheet (FP32 Matrix 46.1)
    "mi210": ("MI210", 181e12, 45.3e12, 1638.4e9, 104, 8 * MB, 64 * KB),            # MI210 datasheet (FP32 Matrix 45.3)
    "mi250": ("MI250 (one GCD)", 181e12, 45.3e12, 1638.4e9, 104, 8 * MB, 64 * KB),  # MI250 datasheet / 2: one of its
                                                                                     #   two dies, the device PyTorch sees
}

# AMD CDNA's maps and row kernels run on its vector ALUs: the datasheet's "FP32 vector" rate, half the FP32
# matrix rate its GEMMs run at (the fp32 column); NVIDIA's on the CUDA cores, the fp32 column itself
AMD_VECTOR_FLOPS = {
    "mi100": 23.1e12,                    # MI100 datasheet: FP32 vector 23.1 TFLOPS
    "mi210": 22.6e12,                    # MI210 datasheet: FP32 vector 22.6 TFLOPS
    "mi250": 22.65e12,                   # MI250 datasheet: FP32 vector 45.3 TFLOPS, / 2 for one GCD
}
# what a map or row kernel runs on: (the vendor's math library and kernels, FP32 vector FLOP/s)
GPU_ARCH = {name: ("rocm", AMD_VECTOR_FLOPS[name]) if name in AMD_VECTOR_FLOPS else ("cuda", spec[2])
            for name, spec in GPU_SPECS.items()}

# a card without measured sets borrows the fitted "library" constants of a measured card of the same
# architecture and memory type (its tile pipeline and memory system): the RTX 2060 (TU106, GDDR6) those
# of the T4 (TU104, GDDR6), as issue 49 asks for PIMFlow's GPU
FITS_FROM = {"rtx2060": "t4"}


def gpu(name: str, model: str = "library", memory: float | None = None):
    """The `HostModel` of the card `name` (`GPU_SPECS`), timed by `model` (a GPU model of
    `hw/gpu.py`: "library" by default, the one held to the measured sets), on its own memory
    or on `memory` bytes/s.  Efficiencies and launch: the model's (`hw/host.GPU_MODEL_FACTORS`);
    on "library" a card of the measured sets gets its own fitted efficiencies and per-wave cost
    (`hw/measured/fits.json`; a card of `FITS_FROM` its sibling's), every card its vendor's
    math-library constants (`GPU_ARCH`; `measured.library_fits`), the launch stays
    `gpu_library.LIB_LAUNCH_NS`."""
    from .host import gpu_host, model_factors
    if name not in GPU_SPECS:
        raise ValueError(f"gpu({name!r}): valid GPUs are {sorted(GPU_SPECS)}")
    label, fp16, fp32, bw, sms, l2, smem = GPU_SPECS[name]
    if memory is not None:
        bw, label = float(memory), f"{label} ({float(memory) / 1e9:,.1f} GB/s)"
    vendor, vector = GPU_ARCH[name]
    host = gpu_host(label, fp16, bw, model_factors(model, "gpu"), model, sms, smem, smem, l2).replace(
        simt_flops=fp32, vector_flops=vector)
    if model == "library":
        from .measured import fits, library_fits
        host = host.replace(**fits().get(FITS_FROM.get(name, name), {}))   # the card's fitted constants (or its
                                                                            #   measured sibling's)
        host = host.replace(**library_fits().get(vendor, {}))             # its math library's (pow, row kernels)
    return host


__all__ = ["AMD_VECTOR_FLOPS", "FITS_FROM", "GPU_ARCH", "GPU_SPECS", "gpu"]
