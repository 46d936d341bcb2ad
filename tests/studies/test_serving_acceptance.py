"""The serving simulator's accuracy acceptance: `serve` at batch 1 equals `decode`, and AttAcc's system model
(GPT-3 13B on 8 A100s, TP 8, with and without AttAcc stacks) per generated token."""
import math

import pytest

from pimjax.hw.host import a100
from pimjax.models.configs import get_config
from pimjax.search.tuner import Tuner
from pimjax.studies.inference import decode
from pimjax.studies.serving import SYSTEMS, batch_requests, serve

_TUNER = Tuner()
TCK = 0.769                                   # attacc.md: ns per cycle


def test_batch_one_equals_decode_for_every_system():
    """One request alone (max_batch 1: the whole PIM memory is its partition, as `decode`
    lays it out), traced kernels: every system's time per output token is decode's."""
    cfg = get_config("gpt3-13b").tensor_parallel(8)
    d = decode(cfg, "attacc", system="attacc", batch=1, prompt=500, tokens=40, tuner=_TUNER)
    tot = d.totals()
    for s in SYSTEMS:
        r = serve(cfg, "attacc", batch_requests(1, 500, 40), system="attacc", placement=s, max_batch=1,
                  tuner=_TUNER, progress=False)
        assert r.requests["tpot_ms"].iloc[0] == pytest.approx(tot[s] / 1e6, rel=0.01), s


# attacc.md, "The AttAcc system model end to end", batch 1: ms per generated token
PUBLIC = {("gpu", 128): 5.598, ("gpu", 512): 5.900, ("gpu", 2048): 7.111,
          ("attacc", 128): 4.826, ("attacc", 512): 4.830, ("attacc", 2048): 4.848}
PIM_CYCLES = {128: 297, 512: 1050, 2048: 3930}     # attacc.md: per-layer PIM attention at L = Lin + 1


# AttAcc's A100a as its system model describes it (scale-snu/attacc_simulator src/config.py,
# make_xpu_config(GPUType.A100a) and SCALING_FACTOR): the parameters its kernel times follow from,
# written here so that the expectation does not come from the GPU model under test (`hw.gpu`)
A100A_SMS = 108                         # NUM_CORE
A100A_FLOPS = 312e12                    # FLOPS_PER_DEVICE (FP16 tensor)
A100A_BW = 3352e9                       # OFF_MEM_BW_PER_DEVICE: 5 HBM3 stacks x 670.4 GB/s
A100A_L1 = 192 * 1024                   # L1_CAP_PER_CORE
A100A_L2 = 40 * 1024 * 1024             # L2_CAP_PER_DEVICE (L2 bandwidth infinite: no L2 time)
NVLINK3 = 600e9                         # INTERFACE_BW
COMPUTE_UTIL, MEM_UTIL = 0.8, 0.85      # MAX_COMPUTE_UTIL, MAX_OFF_MEM_BW_UTIL
EB = 2                                  # W16A16: bytes per element
TRANGE = (8, 16, 32, 64, 128, 192, 256, 320, 384, 448, 512)   # devices.py _get_optimal_tile


def _sm_util(blocks: int) -> float:
    """devices.py core_utilization: the last wave of thread blocks leaves SMs idle."""
    return blocks / (math.ceil(blocks / A100A_SMS) * A100A_SMS)


def _traffic(tm: int, tn: int, m: int, n: int, k: int, num_op: int) -> float:
    """devices.py _get_traffic_for_tile: bytes of A re-read per n tile, B per m tile, C once."""
    return (math.ceil(n / tn) * m * k + math.ceil(m / tm) * n * k + m * n) * EB * num_op


def _product_ns(m: int, n: int, k: int, num_op: int, fc: bool) -> float:
    """ns of num_op (m x k) . (k x n) products on AttAcc's A100a (devices.py `_exec_time` of an FC
    layer, fc=True: a thread block per L1 tile, or a MATMUL layer: a thread block per product):
    the L1 tile (tm, tn) minimising L2 traffic / SM utilisation^2 (L1 holds (tm + tn) x 32 + tm x tn
    elements), the L2 tile (multiples of it) minimising off-chip bytes (L2 holds (tm + tn) x k / 64 +
    tm x tn), then max(off-chip bytes / (bandwidth x 0.85 x util), 2 m n k / (peak x 0.8 x util))."""
    blocks = (lambda tm, tn: math.ceil(m / tm) * math.ceil(n / tn) * num_op) if fc else (lambda tm, tn: num_op)
    l1, best = None, math.inf
    for tm0 in TRANGE:                                  # the first minimum wins, as its strict "<"
        for tn0 in TRANGE:
            tm, tn = min(tm0, m), min(tn0, n)
            if (tm + tn) * 32 * EB + tm * tn * EB > A100A_L1:
                continue
            cost = _traffic(tm, tn, m, n, k, num_op) / _sm_util(blocks(tm, tn)) ** 2
            if cost < best:
                l1, best = (tm, tn), cost
    l2, best = None, math.inf
    for tm in [l1[0] * i for i in range(1, int(m / l1[0]) + 1)] + [m]:
        for tn in [l1[1] * i for i in range(1, int(n / l1[1]) + 1)] + [n]:
            tm, tn = min(tm, m), min(tn, n)
            if (tm + tn) * k / 64 * EB + tm * tn * EB > A100A_L2 and (tm, tn) != l1:
                continue
            access = (math.ceil(m / tm) * n * k + math.ceil(n / tn) * m * k + m * n) * EB
            if access < best:
                l2, best = (tm, tn), access
    util = _sm_util(blocks(*l1))
    t_mem = _traffic(*l2, m, n, k, num_op) / (A100A_BW * MEM_UTIL * util)
    t_cmp = 2.0 * m * n * k * num_op / (A100A_FLOPS * COMPUTE_UTIL * util)
    return max(t_mem, t_cmp) * 1e9


def _softmax_ns(rows: int, L: int) -> float:
    """A SOFTMAX layer of `rows` rows of L (a thread block per row): the row read and written
    once, 5 FLOP per element, at the SM-utilised bandwidth / peak."""
    util = _sm_util(rows)
    return max(2 * rows * L * EB / (A100A_BW * MEM_UTIL * util),
               5.0 * rows * L / (A100A_FLOPS * COMPUTE_UTIL * util)) * 1e9


def _fit_ns(us_per_byte_at_1555: float, fixed_us: float, nbytes: float) -> float:
    """devices.py _mem_time's ACT / NORM fits to measured PyTorch kernels on a 1555 GB/s A100."""
    return (us_per_byte_at_1555 * (1555e9 / A100A_BW) * nbytes + fixed_us) * 1e3


def _allreduce_ns(nbytes: float, gpus: int) -> float:
    """devices.py _io_time_energy (G2G): gpus - 1 steps of get_nvlink_time(bytes / gpus)."""
    chunk = nbytes / gpus
    step = max((6060 + 0.009 * chunk * (600e9 / NVLINK3)) * 1e-9, chunk / (NVLINK3 / 2))
    return step * (gpus - 1) * 1e9


def attacc_system_model(lin: int, batch: int) -> dict:
    """ms per token of AttAcc's `main.py --system dgx[-attacc] --pim bank --powerlimit --ffopt
    --pipeopt` for GPT-3 13B on 8 A100a, re-derived from its rules (src/system.py, src/model.py,
    src/devices.py): its layers' shapes (model.py `build`, one generation stage), its A100a
    kernels written out above from the A100a's parameters (not `hw.gpu`, which `serve` uses) and
    the per-layer PIM attention cycles attacc.md reports (at batch <= 16 each of a stack's heads
    has its own channel, so they depend on L alone)."""
    d, tp, n_layers, heads = 5120, 8, 40, 40
    hd, L, B = d // heads, lin + 1, batch
    qkv, prj = _product_ns(B, 3 * d // tp, d, 1, fc=True), _product_ns(B, d, d // tp, 1, fc=True)
    ff = _product_ns(B, 4 * d // tp, d, 1, fc=True) + _product_ns(B, d, 4 * d // tp, 1, fc=True)
    ar = 2 * _allreduce_ns(B * d * EB, tp)                                    # two comm_g2g
    norm = 2 * _fit_ns(0.0000016, 6.87, 3 * B * d * EB)                       # norm1, norm2: in1, in2, out
    act = _fit_ns(0.000000447, 8.29, 2 * B * 4 * d // tp * EB)                # gelu: in, out
    softmax = _softmax_ns(heads // tp * B, L)
    attn = _product_ns(1, L, hd, heads // tp * B, fc=False) + _product_ns(1, hd, L, heads // tp * B, fc=False)
    gpu = qkv + prj + ff + ar + norm + act + attn + softmax
    # AttAcc: attention on PIM; --pipeopt (_pipeline, level on): QKV / projection behind the attention
    # but for one head's share (5 heads per GPU); --ffopt (_ff_parallel): the memory-bound FFN split by
    # bandwidth, PIM's 670.4 GB/s x 9 (bank level, power-constrained) x 5 stacks over the GPU's 3352,
    # divided by the batch; the GPU <-> AttAcc transfers (X2G, NVLink / 2) as its rule leaves them
    att = PIM_CYCLES[lin] * TCK
    x2g = (B * 3 * d // tp * 2 + heads // tp * B * hd * 2) / 300e9 * 1e9
    first = 1 / (heads // tp)
    if att > qkv + prj:
        qkv, prj = qkv * first, prj * first
        x2g = x2g * first if att > x2g else x2g - att * (1 - first)
    elif qkv + prj > x2g:
        x2g, qkv, prj = x2g * first, qkv - att * (1 - first) * 0.75, prj - att * (1 - first) * 0.25
    else:
        x2g, qkv, prj = x2g - att * (1 - first), qkv * first, prj * first
    pim_bw = 670.4 * 9 * 5 / 3352
    attacc = qkv + prj + ff / (1 + pim_bw / B) + ar + norm + act + att + x2g
    return {"gpu": gpu * n_layers / 1e6, "attacc": attacc * n_layers / 1e6}


def test_the_rederivation_reproduces_the_public_rows():
    """The closed form above is AttAcc's model: it gives attacc.md's batch-1 rows (so its
    batch-4 / 8 figures are AttAcc's own semantics, the expectation for `serve`)."""
    for (system, lin), ms in PUBLIC.items():
        assert attacc_system_model(lin, 1)[system] == pytest.approx(ms, rel=0.002)


def _serve_attacc(system: str, lin: int, batch: int) -> float:
    """ms per generated token through `serve`: `batch` requests at Lin, two output tokens each
    (one decode step at context Lin + 1, as `--lout 2`), AttAcc's system semantics: its A100a
    model, its kernels (fused QKV, one NORM / ACT kernel), TP 8 on NVLink3, --pipeopt, and for
    AttAcc the attention on PIM (baseline mapping) with the FFN split (attacc-full)."""
    r = serve("gpt3-13b", "attacc", batch_requests(batch, lin, 2), system="attacc",
              host=a100("hbm3", model="attacc"), tp=8, placement="gpu" if system == "gpu" else "attacc-full",
              gpu_kernels="fused", overlap="pipeline", max_batch=batch, l_bucket=1, max_tokens=10**6,
              tuner=_TUNER, progress=False)
    return float(r.requests["tpot_ms"].mean())


@pytest.mark.parametrize("lin", [128, 512, 2048])
@pytest.mark.parametrize("system", ["gpu", "attacc"])
def test_attacc_public_rows_batch_one(system, lin):
    assert _serve_attacc(system, lin, 1) == pytest.approx(PUBLIC[(system, lin)], rel=0.10)


@pytest.mark.parametrize("batch", [4, 8])
@pytest.mark.parametrize("lin", [128, 512, 2048])
@pytest.mark.parametrize("system", ["gpu", "attacc"])
def test_attacc_system_model_batches_four_and_eight(system, lin, batch):
    # the GPU side is the same arithmetic as the re-derivation (measured: 1e-15 apart); the AttAcc side
    # differs by our simulated attention against attacc.md's cycles (measured: within 1.7 %).  Bands of
    # 1e-6 and 3 % (not the hold-out rows' 10 %) catch a 7 % change of AttAcc's bandwidth efficiency or
    # of its FFN split, which 10 % let through (issue 53's mutation record)
    rel = 1e-6 if system == "gpu" else 0.03
    assert _serve_attacc(system, lin, batch) == pytest.approx(attacc_system_model(lin, batch)[system], rel=rel)
