"""Closed-form UPMEM time: the phases of `lower_upmem`'s program under
`backends.upmem.cycles`'s rules, for every draft of a table at once, from the
draft alone (nothing is lowered or simulated).

`dpu_kernel_cycles` -- the kernel.  The UPMEM time model has no shared
state between tasklets except barriers: a tasklet's clock grows by
`dispatch` (11) cycles per instruction and by `dma_latency + bytes /
dma_bytes_per_cycle` per DMA it waits for, and the kernel lasts
max(slowest tasklet, all instructions (one per cycle), all DMA time (one
engine)).  So the kernel's cycles follow from how many caching tiles,
points and DMAs the lowering gives each tasklet and the whole DPU -- counts
that depend on the draft's worst-core loop lengths, tasklets, WRAM tile and
dataflow only.  The three kernel shapes of `backends/upmem/lower.py` are mirrored:

* elementwise: tiles of E = wram_tile / elem_bytes points round-robin
  over the tasklets (tasklet 0 has the most, and a full set of them
  unless it alone holds the last, partial tile);
* outputs bound to tasklets (contiguous blocks), the reduction cut into
  tiles, the vector re-read per output ("os") or only when it changes
  along a tasklet's sequence ("is");
* split reduction (fewer outputs than tasklets): reduction tiles
  round-robin (which tasklets draw the partial last chunk is counted per
  tasklet), private partials, a barrier, tasklet 0 merges.

One approximation, a DMA or two per tasklet: with several chunks an "is"
block re-reads the vector once per run of its outputs that share it and
per chunk (the lowering skips a re-read when two consecutive iterations
happen to use one tile).

`transfer_ns` -- host->DPU transfers, DPU->host read-back and the host
merge: one call per host- and MRAM-contiguous run of a DPU's tile (an
elementwise op replicates every operand over its output box, so a
broadcast or transposed operand moves in many short runs).

Checked against the lowering timed by the simulator
(`tests/backends/upmem/test_dpu.py`, random shapes and drafts of every UPMEM
kernel and of elementwise ops with broadcast, transposed and scalar
operands): the transfers and merge to float precision, the kernel to the
cycle except "is" blocks with several chunks (within 0.5 %; 0.1 % seen).
On the 7 272 labelled training drafts their sum is within 6.5e-5 of the
simulated total.

Why: UPMEM's launch and transfer calls are most of a small kernel's time,
so drafts of one tiling that differ only in tasklets or the WRAM tile
differ by 0.1-2 % in total -- below any learned model's error.  The cost
model uses the sum as its estimate feature and, for UPMEM, as the base of a
residual model (`CostModel(base="est_t_total")`).  The price: these
formulas follow `backends/upmem/lower.py` and `backends/upmem/cycles.py`; a change there
must be mirrored here, and the test says when it was not.
"""
from __future__ import annotations

import math

import numpy as np

from ...lower.layout import acc_space
from .lower import ACC_INIT, ARG_LOADS, BARRIER_COST, DMA_ALIGN, DMA_ISSUE, MERGE_PER_PARTIAL

WALK_MAX = 1 << 14    # tile elements up to which an irregular layout's runs are walked one by one


def _cdiv(a, b):
    return -(-np.asarray(a, np.int64) // np.maximum(np.asarray(b, np.int64), 1))


def _roundup(a, b):
    return _cdiv(a, b) * b


def _tile_points(wram_tile, consts: dict) -> tuple[np.ndarray, np.ndarray]:
    """([n] E, [n] pad_to): points per caching tile (wram_tile / elem_bytes),
    and the multiple MRAM pads the inner loop to -- the tile with "pad"
    boundaries, else the 8-byte DMA unit (`backends.upmem.lower._geometry`)."""
    eb = consts["elem_bytes"]
    E = np.maximum(np.asarray(wram_tile, np.int64) // eb, 1)
    return E, np.where(consts["boundary"] == "pad", E, DMA_ALIGN // eb)


def _loops(op) -> tuple[list, list, str]:
    """(output vars, reduction vars, the inner var) in the op's loop order,
    as `backends.upmem.lower._geometry` orders them: the inner var is the last
    reduction var (the last output var of an elementwise op), the loop the
    caching tiles cut and MRAM pads."""
    names = [lv.name for lv in op.loop_vars]
    red = [v for v in names if v in op.reduction_vars]
    out = [v for v in names if v not in op.reduction_vars]
    return out, red, (red[-1] if red else out[-1])


def _partial_count(n_t, pairs: np.ndarray, inv: np.ndarray, t: int) -> np.ndarray:
    """[n] how many of tasklet t's iterations t + j T (j in [0, n_t)) fall
    on the last chunk of the reduction, i.e. t + j T = nC - 1 (mod nC):
    with g = gcd(T, nC) there are none unless g divides r = nC - 1 - t,
    else j = (r / g) (T / g)^-1 (mod nC / g).  pairs [2, u]: the distinct
    (T, nC) of the rows, inv [n] each row's pair (a handful per table)."""
    first, period = np.empty(pairs.shape[1], np.int64), np.empty(pairs.shape[1], np.int64)
    for u, (tt, c) in enumerate(pairs.T.tolist()):
        c = max(c, 1)
        g, r = math.gcd(tt, c), (c - 1 - t) % c
        m = c // g
        first[u] = -1 if r % g else (r // g) * (pow(tt // g, -1, m) if m > 1 else 0) % m
        period[u] = m
    first, period = first[inv], period[inv]
    return np.where((first >= 0) & (first < n_t), (n_t - 1 - first) // period + 1, 0)


def dpu_kernel_cycles(op, lens: dict, tasklets, wram_tile, dataflow, backend, consts: dict,
                      vector_vars: set = frozenset()) -> np.ndarray:
    """[n] kernel DPU cycles (float64) of drafts with worst-core loop lengths
    `lens` (var -> [n] ints), `tasklets`, `wram_tile` (bytes) and `dataflow`
    (0 "os", 1 "is"), [n] each.  consts: `backends.upmem.lower.kernel_constants(op)`;
    vector_vars: the loop vars of a contraction's vector operand."""
    from .cycles import dispatch_interval
    t = backend.timing
    disp = float(dispatch_interval(backend))
    T = np.maximum(np.asarray(tasklets, np.int64), 1)
    eb, pc, tc = consts["elem_bytes"], consts["point_cost"], consts["tile_cost"]
    nb, init = consts["arrays"], ARG_LOADS + consts["scalars"]
    E, pad_to = _tile_points(wram_tile, consts)

    def dma(nbytes):                       # DPU cycles of one DMA of nbytes
        return float(t.dma_latency_cycles) + np.asarray(nbytes, np.float64) / float(t.dma_bytes_per_cycle)

    def tile_bytes(points):                # a tile's DMA: the static tile, or its aligned size
        if consts["boundary"] == "pad":
            return E * eb
        return np.maximum(_roundup(points * eb, DMA_ALIGN), DMA_ALIGN)

    out, red, inner = _loops(op)
    prod = lambda vs: np.prod([lens[v] for v in vs], axis=0).astype(np.int64) if vs else np.ones_like(T)  # noqa: E731
    n_in = lens[inner].astype(np.int64)
    Rin = _roundup(np.maximum(n_in, 1), pad_to)
    d_tile = dma(tile_bytes(E))

    if op.kind == "elementwise":
        O = prod(out[:-1])
        total = (O - 1) * Rin + n_in                      # the last real point + 1
        n_tiles = _cdiv(total, E)
        n0 = _cdiv(n_tiles, T)                            # tasklet 0's tiles
        last = total - (n_tiles - 1) * E                  # points of the last tile
        alone = (n_tiles - 1) % T == 0                    # tasklet 0 holds the last tile
        pts0 = (n0 - 1) * E + np.where(alone, last, E)
        per_tile_i = tc + (nb + 1) * DMA_ISSUE
        d_last = dma(tile_bytes(last))
        tk0 = disp * (init + n0 * per_tile_i + pc * pts0) + (nb + 1) * np.where(
            alone, (n0 - 1) * d_tile + d_last, n0 * d_tile)
        instr = T * init + n_tiles * per_tile_i + pc * total
        busy = (nb + 1) * ((n_tiles - 1) * d_tile + d_last)
        return np.maximum(np.maximum(tk0, instr), busy)

    O = prod(out)
    Rout = prod(red[:-1])
    nC = _cdiv(n_in, E)
    last = n_in - (nC - 1) * E
    d_last = dma(tile_bytes(last))
    d_c = (nC - 1) * d_tile + d_last                      # DMA cycles of one pass over the chunks
    has_v = nb > 1
    split = O < T
    # ---- split reduction: tiles round-robin, partials merged by tasklet 0 after a barrier
    N = O * Rout * nC
    it_i = tc + DMA_ISSUE * nb
    # tasklet t runs iterations t, t + T, ...: chunk (t + j T) mod nC of each; the busiest one
    # has the most iterations and, among those, the fewest partial last chunks
    pre = np.zeros(len(T))
    if split.any():
        key = int(nC.max()) + 1
        pairs, inv = np.unique(T * key + nC, return_inverse=True)
        pairs = np.stack([pairs // key, pairs % key])
    for t_ in range(int(T[split].max()) if split.any() else 0):
        n_t = np.where(t_ < T, _cdiv(N - t_, T), 0)
        p_t = np.where(n_t > 0, _partial_count(n_t, pairs, inv.reshape(-1), t_), 0)
        pts = (n_t - p_t) * E + p_t * last
        pre = np.maximum(pre, disp * (init + ACC_INIT * O + n_t * it_i + pc * pts)
                         + nb * ((n_t - p_t) * d_tile + p_t * d_last))
    out_b = np.maximum(_roundup(O * eb, DMA_ALIGN), DMA_ALIGN)
    merge_i = MERGE_PER_PARTIAL * (T - 1) * O + 2
    post = disp * (BARRIER_COST + merge_i) + dma(out_b)
    s_instr = T * (init + ACC_INIT * O + BARRIER_COST) + N * it_i + pc * O * Rout * n_in + merge_i
    s_busy = nb * O * Rout * d_c + dma(out_b)
    s_kernel = np.maximum(np.maximum(pre + post, s_instr), s_busy)
    # ---- outputs bound to tasklets: tasklet t owns blocks [t bpt, (t + 1) bpt) of ob outputs
    is_flow = np.asarray(dataflow) == 1
    ob = np.where(is_flow, np.maximum(1, np.minimum(E, _cdiv(O, T))), 1)
    n_blocks = _cdiv(O, ob)
    bpt = _cdiv(n_blocks, T)
    it_o = tc + DMA_ISSUE * (1 + has_v)
    # consecutive outputs that read one vector tile: the out vars after the last one the vector uses
    same, stopped = np.ones_like(T), np.zeros(len(T), bool)
    for v in reversed(out):
        if v in vector_vars:                    # a vector var of length 1 does not change the tile
            stopped = stopped | (lens[v] > 1)
        else:
            same = np.where(stopped, same, same * lens[v])
    w_b = np.maximum(_roundup(ob * eb, DMA_ALIGN), DMA_ALIGN)
    tk = np.zeros(len(T))
    o_busy = np.zeros(len(T))
    for t_ in range(int(T[~split].max()) if (~split).any() else 0):
        blk0 = np.minimum(t_ * bpt, n_blocks)
        blk1 = np.minimum(blk0 + bpt, n_blocks)
        nblk = np.where(t_ < T, blk1 - blk0, 0)
        o_a, o_b = np.minimum(blk0 * ob, O), np.minimum(blk1 * ob, O)
        n_o = np.where(t_ < T, o_b - o_a, 0)
        # the tasklet's last block holds fewer outputs when it is the op's last
        last_n = np.where(nblk > 0, o_b - (blk1 - 1) * ob, 0)
        if has_v:
            # "os": the vector tile with every iteration; "is": once per run of outputs sharing it,
            # per block and chunk -- along the tasklet's whole range when it has one chunk.  Runs
            # in block B: floor(((B + 1) ob - 1) / same) - floor(B ob / same) + 1, summed over the
            # tasklet's blocks in closed form, then the last block cut at its real end
            period = same // np.gcd(ob, same)
            runs_all = np.where(n_o > 0, (o_b - 1) // same - o_a // same + 1, 0)
            runs_blk = (blk1 * ob // same - blk0 * ob // same) + nblk - (blk1 // period - blk0 // period)
            runs_blk = runs_blk + np.where(nblk > 0, (o_b - 1) // same - (blk1 * ob - 1) // same, 0)
            v_reads = np.where(is_flow, np.where(Rout * nC == 1, runs_all, runs_blk * Rout), n_o * Rout)
        else:
            v_reads = np.zeros_like(T)
        writes = np.where(nblk > 0, (nblk - 1) * dma(w_b)
                          + dma(np.maximum(_roundup(last_n * eb, DMA_ALIGN), DMA_ALIGN)), 0.0)
        busy = (n_o * Rout + v_reads) * d_c + writes
        tk = np.maximum(tk, np.where(t_ < T, disp * (init + n_o * Rout * (nC * it_o + pc * n_in) + ACC_INIT * n_o)
                                     + busy, 0.0))
        o_busy = o_busy + np.where(t_ < T, busy, 0.0)
    o_instr = T * init + O * Rout * (nC * it_o + pc * n_in) + ACC_INIT * O
    o_kernel = np.maximum(np.maximum(tk, o_instr), o_busy)
    return np.where(split, s_kernel, o_kernel).astype(np.float64)


def _layout_runs(index_map, shape, layout_vars, lens: dict, inner: str, pad_to, n: int, eb: int):
    """([n] runs, [n] bytes) of a DPU's tile laid out in MRAM row-major over
    `layout_vars` (the inner loop var padded to a multiple of `pad_to` [n])
    and read from a row-major host tensor through `index_map`: a run is
    what `backends.upmem.lower._host_runs` finds element by element (contiguous in
    the host tensor and in MRAM) and one transfer call; bytes sums each
    run's 8-byte-aligned size.

    When the layout vars index the host dimensions in host order
    (coefficient 1) the runs have one length: a run grows from the
    innermost var outwards while the var's host stride is the run so far
    and every var inside covers its host dimension whole without MRAM
    padding.  Otherwise (a broadcast operand an elementwise op replicates
    over the output box, a transposed one, an affine index) runs vary -- a
    broadcast row's last element and the next row's first can be adjacent
    in the host -- and each distinct tile shape of up to WALK_MAX elements
    is walked element by element as the lowering does."""
    dims = [next((d for d, e in enumerate(index_map) if e.single_var == v), None) for v in layout_vars]
    plain = all(e.single_var is not None or not e.vars for e in index_map)
    padded = lens[inner] % pad_to != 0 if inner in layout_vars else np.zeros(n, bool)
    total = np.ones(n, np.int64)
    for v in layout_vars:
        total = total * lens[v]
    strides = [int(np.prod(shape[d + 1:], dtype=np.int64)) for d in range(len(shape))]
    run, alive = np.ones(n, np.int64), np.ones(n, bool)
    for v, d in zip(reversed(layout_vars), reversed(dims)):
        if not plain or d is None:
            break
        ok = alive & (run == strides[d])          # the next element along v follows the run
        run = np.where(ok, run * lens[v], run)
        whole = lens[v] >= shape[d]
        alive = ok & (whole & ~padded if v == inner else whole)
    runs = _cdiv(total, run)
    nbytes = runs * _roundup(run * eb, DMA_ALIGN)
    if plain and None not in dims and dims == sorted(dims):
        return runs, nbytes
    # walk tiles up to WALK_MAX elements; a larger one keeps the chain's count, an upper
    # bound that misses only the joins at its row ends (a tile that large moves in so
    # many calls that no near-tie turns on them)
    small = total <= WALK_MAX
    keys = np.stack([lens[v] for v in layout_vars] + [np.asarray(pad_to, np.int64) * np.ones(n, np.int64)])
    uniq, inv = np.unique(keys[:, small], axis=1, return_inverse=True)
    walked = np.array([_walk_runs(index_map, shape, layout_vars, dict(zip(layout_vars, col[:-1])), inner,
                                  int(col[-1]), eb) for col in uniq.T.tolist()], np.int64).reshape(-1, 2)
    runs[small], nbytes[small] = walked[inv.reshape(-1), 0], walked[inv.reshape(-1), 1]
    return runs, nbytes


def _walk_runs(index_map, shape, layout_vars, real: dict, inner: str, pad_to: int, eb: int) -> tuple[int, int]:
    """(runs, bytes) of one tile, element by element: the box is `real`
    with the inner var padded to `pad_to`; consecutive box positions join a
    run when both are real and their host offsets differ by one."""
    box = [(-(-real[v] // pad_to) * pad_to if v == inner else real[v]) for v in layout_vars]
    grids = np.meshgrid(*[np.arange(b) for b in box], indexing="ij") if box else []
    env = dict(zip(layout_vars, grids))
    inside = np.ones(box, bool)
    for v, g in env.items():
        inside &= g < real[v]
    lin = np.zeros(box, np.int64)
    stride = 1
    for expr, size in reversed(list(zip(index_map, shape))):
        idx = expr.evaluate(env)[0] if expr.vars else np.full(box, expr.const)
        lin = lin + np.broadcast_to(idx, box) * stride
        stride *= size
    lin, inside = lin.ravel(), inside.ravel()
    cont = (np.diff(lin) == 1) & inside[1:] & inside[:-1]
    starts = np.flatnonzero(np.concatenate([[True], ~cont]) & inside)
    if starts.size == 0:
        return 0, 0
    brk = np.flatnonzero(np.concatenate([~cont, [True]]))
    length = brk[np.searchsorted(brk, starts)] + 1 - starts
    return int(starts.size), int(_roundup(length * eb, DMA_ALIGN).sum())


def transfer_ns(op, lens: dict, shapes: dict, set_dpus: np.ndarray, sets, groups, cores, wram_tile,
                reduction, backend, consts: dict, link=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """([n] host->DPU, [n] DPU->host, [n] host merge) ns of UPMEM drafts,
    `lower_upmem`'s transfers under `backends.upmem.cycles`'s rules.

    Every host-contiguous run of a DPU's tile that is also contiguous in
    MRAM is one transfer call (a padded inner loop breaks the runs at each
    row); a call to every DPU of the used ranks costs `call_ns` plus its
    bytes over the per-rank link (bounded by the host's memory roofline),
    or over the broadcast bandwidth when every DPU holds the same tile.
    Partials (reduction "host") come back as one call per DPU's buffer and
    are merged on the host roofline.  lens: worst-core loop lengths;
    set_dpus [n, S]: groups x cores per dimension set; groups / cores [n]:
    ranks and DPUs per rank used; reduction [n] (1 = "host")."""
    from ...lower.program import Op
    from .cycles import DEFAULT_LINK, dpu_params, rank_waves, record_terms
    from .lower import Xfer
    p = dpu_params(backend, link or DEFAULT_LINK)
    host = backend.system.host
    eb = consts["elem_bytes"]
    n = len(groups)
    ranks, dpc = np.asarray(groups, np.float32), np.asarray(cores, np.float32)
    waves = rank_waves(ranks, p, np)

    def calls(nbytes, count, h2d: bool, bcast=False):
        """ns of `count` calls moving nbytes per DPU in all, by the simulator's own
        per-record rule (`cycles_upmem._record_terms`): a call's time is linear in its
        bytes (the per-rank link or the host roofline, whichever is slower) plus
        call_ns, so `count` calls of their mean size cost what the runs do"""
        count = np.broadcast_to(np.asarray(count, np.float32), ranks.shape)
        rec = dict(op=np.full(ranks.shape, Op.XFER_H2D if h2d else Op.XFER_D2H),
                   n=(np.asarray(nbytes, np.float32) / np.maximum(count, 1)).astype(np.float32), aux=count,
                   reg=np.where(bcast, Xfer.BROADCAST, Xfer.PARALLEL), resident=0, phase=0)
        return record_terms(rec, ranks, dpc, waves, p, np)["add_ns"].astype(np.float64)

    out, red, inner = _loops(op)
    pad_to = _tile_points(wram_tile, consts)[1] * np.ones(n, np.int64)
    many = ranks * dpc > 1
    h2d = calls(16.0, 1, True)                                   # the kernel's arguments
    scalars = op.scalar_operands
    for k in sorted(set(op.body_operands)):
        acc = op.operands[k]
        if k in scalars:
            h2d = h2d + calls(float(_roundup(eb, DMA_ALIGN)), 1, True, many)
            continue
        # an elementwise op lays every operand out over the whole output box (a broadcast
        # operand is replicated); otherwise over its own output vars, then reduction vars
        lvars = out if op.kind == "elementwise" else [v for v in out + red if v in acc.vars]
        runs, nbytes = _layout_runs(acc.index_map, shapes[acc.value], lvars, lens, inner, pad_to, n, eb)
        split = np.ones(n, np.int64)              # DPUs holding different tiles of the layout
        for si, s in enumerate(sets):
            if set(lvars) & set(s.vars):
                split = split * set_dpus[:, si]
        h2d = h2d + calls(nbytes.astype(np.float64), runs, True, many & (split == 1))
    # the result: partials as one buffer per DPU, else the output grid's runs
    outs = np.prod([lens[v] for v in out], axis=0).astype(np.int64) if out else np.ones(n, np.int64)
    ext = op.extents
    rcount, rbytes = _layout_runs(*acc_space(op), out, lens, inner, pad_to, n, eb)
    partials = np.asarray(reduction) == 1
    pbytes = _roundup(outs * eb, DMA_ALIGN).astype(np.float64)
    rbytes = rbytes.astype(np.float64)
    d2h = np.where(partials, calls(pbytes, 1, False), calls(rbytes, rcount, False))
    d2h_total = np.where(partials, pbytes, rbytes) * ranks * dpc
    out_elems = float(np.prod([ext[v] for v in out])) if out else 1.0
    epilogue = op.epilogue is not None
    merge_flops = np.where(partials, np.maximum(0.0, d2h_total / eb - out_elems), 0.0) + (out_elems if epilogue else 0.0)
    merge_bytes = np.where(partials | epilogue, d2h_total + out_elems * eb, 0.0)
    merged = (merge_bytes > 0) | (merge_flops > 0)
    merge = np.where(merged, host.time_ns(merge_bytes, merge_flops), 0.0)
    return h2d, d2h, merge
