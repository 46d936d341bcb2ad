"""Value interpretation of AttAcc programs (see `backends/attacc/lower.py`).

State of one channel: the bank columns the host wrote (NaN everywhere
else: a unit that reads a column no host-write record filled gets NaN), the
GEMV buffers [units, entries, 16] (NaN until WRGB / MVGB writes them), the
accumulators [units, 16], the softmax buffer [rows, 16] with a written
mask, and the host's read-back rows [rows, 16] (NaN until RDACC reads
them).  Nothing reaches the host except what RDACC records read; the host
merge (a segment sum over the read-back map, then the op's epilogue) runs
in float32.

Bank memory is kept as the list of written columns ("slots"), each a
16-wide row of one value buffer (`PREFIX`): a MAC step reads, per unit,
the slot its record fields and the level's addressing name (or the NaN
slot).  The expanded commands of the shared stream run in a `fori_loop`
over segments (`_segments`): a run of up to RUN MAC steps is one iteration
whose column reads, products and adder trees are one batched gather and
multiply, with only the FP16 accumulation in command order; every other
command is an iteration of its own.  Groups are `vmap`-ped.  Program shapes
are padded to power-of-two buckets and several programs of one op can run
in one call (`execute_batch`), so a sweep over drafts compiles a few
times, not once per draft.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from ...lower.merge import expand_runs, finish
from ...lower.program import Op, Program, side_cache
from ...sim.padding import fine, pow2
from .geometry import HOST_ONE, LANES, TREE, Geometry

_MAC_OPS = (Op.MACAB, Op.MACSB, Op.MACPB, Op.MACBK)
K_NONE, K_MAC, K_WRGB, K_MVGB, K_MVSB, K_SFM, K_RDACC = range(7)
K_TREE = 7                            # segment kind: a run of adder-tree-mode MACs (K_MAC: mac mode)
CHUNK = 16                            # programs per interpreter call
RUN = 32                              # MAC / RDACC steps one interpreter iteration runs
NAN_CODE, ZERO_CODE = -2, -1          # memory / host codes besides flat operand indices
ONE_CODE = -3
# The interpreter's value buffer: a row of 16 ones, of NaNs and of zeros
# (the codes -3, -2, -1), the operands flattened (code c at PREFIX + c),
# zeros up to the padded length V, then the "side rows" of bank columns
# whose 16 lanes are not one of those rows nor 16 consecutive operand
# values (they are gathered element by element when the buffer is packed).
# A bank column is then one 16-wide slice of the buffer at its row base.
PREFIX = 3 * LANES
NAN_BASE = (NAN_CODE - ONE_CODE) * LANES


def _bucket(n: int, lo: int = 8) -> int:
    """Padded table size: a power of two, at least `lo` (8 by default)."""
    return pow2(n, lo)


def _prepare(program: Program) -> dict:
    """Numpy tables of one program (cached beside it, `side_cache`)."""
    cached = side_cache(program).get("exec")
    if cached is not None:
        return cached
    meta = program.meta
    geo: Geometry = meta["geometry"]
    G, C = program.groups, program.cores
    rec = program.commands
    if rec.shape[0] != 1:
        raise NotImplementedError("attacc programs share one stream across groups")
    op_ = np.asarray(rec.op)
    shapes = meta["operand_shapes"]
    sizes = [int(np.prod(shapes[k], dtype=np.int64)) for k in range(len(program.op.operands))]
    offs = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)

    # 1. bank columns written by host-write records: one slot per column
    src = np.asarray(rec.src)
    wr = ((op_ == Op.WR) | (op_ == Op.WR_S)) & (src >= 0)
    cols = expand_runs(rec, wr)
    R = max([1] + [int(lay.positions[:, 1].max()) + 1 for lay in program.layouts if lay.space == "bank"]
            + [int(rec.row.max()) + 1])

    def key(bank, row, col):
        return (np.asarray(bank, np.int64) * R + np.asarray(row, np.int64)) * 32 + np.asarray(col, np.int64)

    wkeys = key(cols["bank"], cols["row"], cols["col"])
    uniq = np.unique(wkeys)
    nslot = len(uniq)
    slot_map = np.full(64 * R * 32, nslot, np.int64)                     # column -> slot (nslot: NaN)
    slot_map[uniq] = np.arange(nslot)
    owner = np.full(64 * R * 32, -1, np.int64)                           # column -> layout that wrote it
    owner[wkeys] = cols["src"]
    if offs[-1] >= 2**31 - PREFIX:
        raise ValueError(f"attacc value interpreter: operands of {offs[-1]} values exceed int32 codes")
    code = np.full((G, nslot + 1, LANES), NAN_CODE, np.int32)
    code[:, :nslot, :] = ZERO_CODE                                       # written padding is zero
    from ...lower.layout import global_index
    for lid in np.unique(cols["src"]):
        lay = program.layouts[int(lid)]
        flat, valid = global_index(lay)                                  # [G, C, N]
        pos = lay.positions
        pbank = np.asarray(geo.core_base(np.arange(C)))[:, None] + pos[None, :, 0]     # [C, N]
        k_ = key(pbank, pos[None, :, 1], pos[None, :, 2])
        ok = owner[k_] == int(lid)                                       # [C, N] columns this layout wrote
        sl = slot_map[k_]
        lane = np.broadcast_to(pos[None, :, 3], sl.shape)
        vals = np.where(valid, flat + offs[lay.operand], ZERO_CODE)      # [G, C, N]
        code[:, sl[ok], lane[ok]] = vals[:, ok]

    base, side = _slot_rows(code)

    # 2. the kernel's expanded commands
    kinds = {int(o): K_MAC for o in _MAC_OPS}
    kinds.update({int(Op.WRGB): K_WRGB, int(Op.MVGB): K_MVGB, int(Op.MVSB): K_MVSB,
                  int(Op.SFM): K_SFM, int(Op.RDACC): K_RDACC})
    e = expand_runs(rec, np.isin(op_, list(kinds)))
    kind = np.array([kinds[int(o)] for o in e["op"]], np.int32)
    t = e["t"]
    if geo.level == "buffer":
        bic, _, col = geo.address(e["col"])
    else:
        bic, col = e["bank"] % geo.banks_per_core, e["col"]
    bank = np.asarray(geo.core_base(np.arange(C)))[None, :] + np.asarray(bic)[:, None]    # [T, C]
    slot = slot_map[np.clip(key(bank, e["row"][:, None], np.asarray(col)[:, None]), 0, 64 * R * 32 - 1)]
    slot = np.where(kind[:, None] == K_MAC, slot, nslot)
    steps = dict(kind=kind, mode=e["aux"], u=e["reg"] + t, rs=np.maximum(e["reg_step"], 1),
                 arg=e["arg"], route=e["arg"] + t, sfm=e["aux"], sbrow=e["reg"] + t, hrow=e["arg"] + t)
    units = np.arange(C)
    on = (e["core"][:, None] < 0) | (units[None, :] == e["core"][:, None])   # [T, C] units a step drives
    rsrc, rdst = np.asarray(meta["route_src"]), np.asarray(meta["route_dst"])     # GEMV routes are lazy
    steps, slot, on, rsrc, rdst = _merge_unit_commands(steps, slot, on, rsrc, rdst, t)
    steps["on"] = on
    segs = _segments(steps["kind"], steps["mode"], steps["sbrow"], steps["hrow"])

    # 3. host data rows (WRGB): codes into the operand values
    hidx = program.host_data[0]
    k = meta["host_data_operands"][0]
    hcode = np.where(hidx >= 0, hidx + (offs[k] if k is not None else 0),
                     np.where(hidx == HOST_ONE, ONE_CODE, ZERO_CODE))
    hidx = _element_index(hcode).astype(np.int32)
    sfm = meta["sfm"]
    S = int(meta["sb_rows"])
    masks = np.stack([np.pad(m, ((0, max(0, S - m.shape[0])), (0, 0)))[:S] for m, _ in sfm]) if sfm else \
        np.zeros((0, S, LANES), bool)
    prep = dict(base=base, side=side, slot=slot, steps=steps, segs=segs, hidx=hidx, rsrc=rsrc, rdst=rdst,
                masks=masks, scales=np.array([s for _, s in sfm], np.float32), rb=meta["readback_map"],
                G=G, C=C, S=S, E=int(meta["gb_entries"]), size=int(np.prod(program.layouts[
                    program.readback.layout].shape, dtype=np.int64)), offs=offs)
    side_cache(program)["exec"] = prep
    return prep


def _merge_unit_commands(steps, slot, on, rsrc, rdst, t):
    """Merge commands that drive disjoint units and otherwise agree: the
    bank-level MACs of one run (per-core records c0: t = 0..n-1, c1: ...)
    and consecutive per-unit buffer loads / drains.  Commands on disjoint
    units commute, so the interpreter runs them as one step; per-core (DCC
    bank-level) programs then take as many interpreter steps as broadcast
    ones.  The records and their timing are unchanged."""
    kind = steps["kind"]
    T = len(kind)
    keep = np.ones(T, bool)
    rsrc_l, rdst_l = list(rsrc), list(rdst)
    nr = len(rsrc_l)
    mac_key: dict = {}
    last = -1
    for i in range(T):
        k = int(kind[i])
        if k == K_MAC and not on[i].all():
            key = (int(steps["mode"][i]), int(steps["u"][i]), int(steps["rs"][i]), int(steps["arg"][i]))
            j = mac_key.get(key)
            if j is not None and not (on[j] & on[i]).any():
                on[j] |= on[i]
                slot[j] = np.where(on[i], slot[i], slot[j])
                keep[i] = False
                continue
            if j is not None:                       # a unit repeats: the next run begins
                mac_key = {}
            mac_key[key] = i
            last = i
            continue
        mac_key = {}
        if k in (K_WRGB, K_MVGB, K_MVSB) and last >= 0 and int(kind[last]) == k:
            ra, rb = int(steps["route"][last]), int(steps["route"][i])
            ua = (rdst_l[ra] >= 0) if k == K_MVSB else (rsrc_l[ra] >= 0)
            ub = (rdst_l[rb] >= 0) if k == K_MVSB else (rsrc_l[rb] >= 0)
            if not (ua & ub).any():
                rsrc_l.append(np.where(ub, rsrc_l[rb], rsrc_l[ra]))
                rdst_l.append(np.where(ub, rdst_l[rb], rdst_l[ra]))
                steps["route"][last] = len(rsrc_l) - 1
                keep[i] = False
                continue
        last = i
    if len(rsrc_l) > nr:
        rsrc, rdst = np.stack(rsrc_l), np.stack(rdst_l)
    steps = {k_: v[keep] for k_, v in steps.items()}
    return steps, slot[keep], on[keep], rsrc, rdst


def _element_index(code: np.ndarray) -> np.ndarray:
    """Buffer index of each code (operand element or constant)."""
    code = np.asarray(code, np.int64)
    return np.where(code >= 0, PREFIX + code, (code - ONE_CODE) * LANES)


def _slot_rows(code: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row bases of bank columns.

    code: [G, slots, 16] lane codes.  Returns base [G, slots] int64: the
    buffer index of the column's 16 values when they are 16 consecutive
    operand values or one constant, else -1 - r for side row r; and the side
    rows' codes [n, 16].  (All columns of the attention step are regular.)"""
    first = code[..., :1].astype(np.int64)
    contiguous = (code >= 0).all(-1) & (code == first + np.arange(LANES)).all(-1)
    constant = (code < 0).all(-1) & (code == first).all(-1)
    base = np.where(contiguous | constant, _element_index(first[..., 0]), 0)
    irregular = ~(contiguous | constant)
    base[irregular] = -1 - np.arange(int(irregular.sum()))
    return base, code[irregular].astype(np.int64)


def _segments(kind: np.ndarray, mode: np.ndarray, sbrow: np.ndarray, hrow: np.ndarray) -> dict:
    """Interpreter iterations: MAC steps in runs of at most RUN consecutive
    steps of one mode, RDACC steps in runs of at most RUN consecutive reads
    of distinct accumulator rows into distinct host rows, every other step
    alone.

    A MAC run reads the GEMV buffers but does not write them, so its
    products and adder-tree sums are independent of each other and run as
    one [RUN, units, 16] batch; only the accumulator's FP16 additions stay
    in command order.  The reads of an RDACC run commute (a row read twice
    would read NaN the second time, so it starts a new run).  Returns kind /
    start / len arrays [n_segments]."""
    T = len(kind)
    mac = kind == K_MAC
    idx = np.arange(T)
    brk = np.ones(T, bool)
    brk[1:] = ~mac[1:] | ~mac[:-1] | (mode[1:] != mode[:-1])
    first = np.maximum.accumulate(np.where(brk, idx, 0))        # start of each step's maximal run
    brk |= mac & ((idx - first) % RUN == 0)
    rd = kind == K_RDACC
    seen: tuple[set, set] = (set(), set())
    for i in np.flatnonzero(rd):                    # a few hundred reads: a plain loop
        s_, h_ = int(sbrow[i]), int(hrow[i])
        if i > 0 and rd[i - 1] and len(seen[0]) < RUN and s_ not in seen[0] and h_ not in seen[1]:
            brk[i] = False
        else:
            seen = (set(), set())
        seen[0].add(s_)
        seen[1].add(h_)
    start = np.flatnonzero(brk)
    length = np.diff(np.append(start, T))
    seg_kind = np.where(mac[start], np.where(mode[start] == TREE, K_TREE, K_MAC), kind[start])
    return dict(kind=seg_kind.astype(np.int32), start=start.astype(np.int32), len=length.astype(np.int32))


def _pad_to(x: np.ndarray, shape: tuple, fill) -> np.ndarray:
    pads = [(0, n - s) for s, n in zip(x.shape, shape)]
    return np.pad(x, pads, constant_values=fill)


# One size class for small programs: a set of table dimensions all within these pads to them, so
# that the many small ops of a model (and a fuzzer's random programs) share one compiled
# interpreter, where per-dimension buckets gave nearly every op its own: tracing and compiling the
# interpreter takes ~2 s, running a small program at this size ~1-2 ms (benchmarks/execute_bench.py).
# E (the backend's buffer rows) is not padded: it is the same for every program of a backend.
SMALL = dict(G=2, C=64, NS=4096, SIDE=8192, T=1024, NSEG=128, NH=128, NR=1024, S=512, K=4, H=512, size=8192,
             V=32768)


def _dims(preps: list[dict]) -> dict:
    """Power-of-two bucket of every table dimension (max over the programs),
    or the `SMALL` class where every dimension fits in it."""
    d = _buckets(preps)
    if all(d[k] <= v for k, v in SMALL.items()):
        return {**d, **SMALL}
    return d


def _buckets(preps: list[dict]) -> dict:
    return dict(G=_bucket(max(p["G"] for p in preps), 1), C=_bucket(max(p["C"] for p in preps), 1),
                NS=_bucket(max(p["base"].shape[1] for p in preps)),
                SIDE=_bucket(sum(p["side"].shape[0] for p in preps), 1),
                T=_bucket(max(len(p["steps"]["kind"]) for p in preps) + RUN, 16),
                NSEG=_bucket(max(len(p["segs"]["kind"]) for p in preps), 16),
                NH=_bucket(max(max(1, p["hidx"].shape[1]) for p in preps)),
                NR=_bucket(max(max(1, p["rsrc"].shape[0]) for p in preps)),
                S=_bucket(max(p["S"] for p in preps)),
                K=_bucket(max(max(1, p["masks"].shape[0]) for p in preps), 1),
                H=_bucket(max(max(1, p["rb"].shape[1]) for p in preps)),
                E=max(p["E"] for p in preps), size=_bucket(max(p["size"] for p in preps)),
                V=fine(max(int(p["offs"][-1]) for p in preps)))


def batch_dims(programs: list[Program], *more: dict) -> dict:
    """Padded table dimensions covering `programs` (and the dims in `more`):
    pass the result to `execute_batch(..., dims=...)` so batches of
    different ops share one compiled interpreter."""
    d = _dims([_prepare(p) for p in programs])
    for m in more:
        d = {k: max(v, m[k]) for k, v in d.items()}
    return d


def _stack(preps: list[dict], dims: dict | None = None) -> tuple[dict, dict]:
    """Pad the tables of several programs to shared power-of-two shapes."""
    if dims is not None:
        need = _buckets(preps)          # given dims (`batch_dims`) need only cover the programs
        if any(dims[k] < v for k, v in need.items()):
            raise ValueError(f"execute_batch dims {dims} are smaller than the programs need ({need})")
        need = dict(dims)
    else:
        need = _dims(preps)
    G, C, NS, T, NH, NR, S, K, H, NSEG = (need[k] for k in ("G", "C", "NS", "T", "NH", "NR", "S", "K", "H",
                                                             "NSEG"))
    out: dict = {k: [] for k in ("base", "slot", "hidx", "rsrc", "rdst", "masks", "scales", "rb", "nslot")}
    out["steps"] = {k: [] for k in preps[0]["steps"] if k != "on"}
    out["segs"] = {k: [] for k in preps[0]["segs"]}
    out["on"] = []
    if PREFIX + need["V"] + LANES * need["SIDE"] >= 2**31:
        raise ValueError("attacc value interpreter: the value buffer would exceed int32 row bases")
    side_rows = 0
    for p in preps:
        ns = p["base"].shape[1] - 1
        # side rows follow the padded operands, the batch's programs one after another
        base = np.where(p["base"] >= 0, p["base"], PREFIX + need["V"] + LANES * (side_rows - 1 - p["base"]))
        side_rows += p["side"].shape[0]
        # move the program's NaN slot to the padded table's last row
        base = np.concatenate([base[:, :ns], np.full((base.shape[0], NS - ns), NAN_BASE)], 1)
        out["base"].append(_pad_to(base, (G, NS), NAN_BASE).astype(np.int32))
        slot = np.where(p["slot"] >= ns, NS - 1, p["slot"])
        out["slot"].append(_pad_to(slot, (T, C), NS - 1))
        for k, v in p["steps"].items():
            if k == "on":
                out["on"].append(_pad_to(v, (T, C), False))
            else:
                out["steps"][k].append(_pad_to(np.asarray(v), (T,), K_NONE if k == "kind" else 0))
        for k, v in p["segs"].items():
            out["segs"][k].append(_pad_to(v, (NSEG,), K_NONE if k == "kind" else 0))
        out["hidx"].append(_pad_to(p["hidx"], (G, NH, LANES), int(_element_index(ZERO_CODE))))
        out["rsrc"].append(_pad_to(p["rsrc"].reshape(-1, p["C"]), (NR, C), -1))
        out["rdst"].append(_pad_to(p["rdst"].reshape(-1, p["C"]), (NR, C), -1))
        out["masks"].append(_pad_to(p["masks"], (K, S, LANES), False))
        out["scales"].append(_pad_to(p["scales"], (K,), 1.0))
        out["rb"].append(_pad_to(p["rb"], (G, H, LANES), -1))
    arrays = {k: np.stack(v) for k, v in out.items() if k not in ("steps", "segs", "nslot", "on")}
    arrays["on"] = np.stack(out["on"])
    arrays["steps"] = {k: np.stack(v).astype(np.int32) for k, v in out["steps"].items()}
    arrays["segs"] = {k: np.stack(v) for k, v in out["segs"].items()}
    arrays["n_segs"] = np.array([len(p["segs"]["kind"]) for p in preps], np.int32)
    return arrays, need


def _tree_sum(p, rnd):
    """Pairwise sum over the last axis of 16 (the unit's adder tree), each
    level rounded by `rnd`."""
    while p.shape[-1] > 1:
        h = p.shape[-1] // 2
        p = rnd(p[..., :h] + p[..., h:])
    return p[..., 0]


@partial(jax.jit, static_argnames=("C", "E", "S", "H", "size"))
def _run_many(tabs, vals, fp16, C: int, E: int, S: int, H: int, size: int):
    """[P, size] merged results of P stacked programs (lax.map: one at a time)."""
    return jax.lax.map(lambda a: _run(a[0], vals, a[0]["n_segs"], a[1], C, E, S, H, size), (tabs, fp16))


@dataclass(frozen=True)
class _Unit:
    """What every step of one program's interpretation reads: the program's padded
    tables `t` (`_stack`), the host values `vals`, the FP16 flag and the padded sizes
    (C units, E global-buffer rows, S accumulator rows, H host rows).  Fields may be
    tracers: this is only a bundle passed to the step functions below, never a jit key."""
    t: dict
    vals: jax.Array
    fp16: jax.Array
    C: int
    E: int
    S: int
    H: int

    def rnd(self, x):
        """x rounded to FP16 (nearest even) when `fp16` is set, else unchanged."""
        return jnp.where(self.fp16, x.astype(jnp.float16).astype(jnp.float32), x)


def _run(t, vals, n_segs, fp16, C: int, E: int, S: int, H: int, size: int):
    """[size] float32 merged result of one (padded) program.

    The program's segments (`_segments`) run in a `fori_loop` of `n_segs`
    iterations (the stream is shared by the groups, so the segment kind is
    not batched by the group `vmap` and `lax.switch` executes only its
    branch).  Arithmetic is float32; with `fp16` set every value entering
    the banks or buffers and the result of every product, adder-tree level,
    accumulation and softmax is rounded to FP16 (round to nearest even),
    i.e. FP16 arithmetic, so both modes share one compiled program."""
    u = _Unit(t, vals, fp16, C, E, S, H)
    hb = jax.vmap(lambda base, hidx: _run_group(u, n_segs, base, hidx))(t["base"], t["hidx"])  # [G, H, 16]
    flat = t["rb"].reshape(-1)
    seg = jnp.where(flat >= 0, flat, size)
    acc = jax.ops.segment_sum(hb.reshape(-1), seg, num_segments=size + 1)[:size]
    count = jax.ops.segment_sum(jnp.ones_like(seg), seg, num_segments=size + 1)[:size]
    return jnp.where(count > 0, acc, jnp.nan)


# values are rounded as the host's writes round them, after the gather
# (rounding is elementwise, so it commutes with it; only what is read is rounded)
def _columns(u: _Unit, base):
    """[..., 16] the bank columns at buffer row bases [...] (16-wide slices)."""
    dn = jax.lax.GatherDimensionNumbers(offset_dims=(base.ndim,), collapsed_slice_dims=(),
                                        start_index_map=(0,))
    return u.rnd(jax.lax.gather(u.vals, base[..., None], dn, slice_sizes=(LANES,), mode="clip"))


def _rows(a, start):
    """The RUN steps of a run: rows start .. start + RUN - 1 of a step table."""
    return jax.lax.dynamic_slice_in_dim(a, start, RUN, 0)


# Each piece of state is updated by its own `cond` / `switch` on the
# segment kind, from the state before the step (one kind acts per step).
# With a single switch over the whole state XLA copied the untouched
# pieces (1.9 MB per group batch) in every branch: the batch-8 attention
# loop took 0.58-0.78 s that way, 0.43-0.54 s this way.

def _mac_run(u: _Unit, acc, gb, start, n, base, tree: bool):
    """[C, 16] accumulators after RUN MAC steps: products and adder trees
    batched, the FP16 accumulation in command order."""
    t, xs, rnd, E = u.t, u.t["steps"], u.rnd, u.E
    lane_ids = jnp.arange(LANES)
    on = _rows(t["on"], start) & (jnp.arange(RUN) < n)[:, None]         # [RUN, C]
    col = _columns(u, base[_rows(t["slot"], start)])                    # [RUN, C, 16] the columns read
    un, rs, arg = _rows(xs["u"], start), _rows(xs["rs"], start), _rows(xs["arg"], start)
    if tree:
        e_tree = jnp.clip(arg + un % rs, 0, E - 1)
        slot = jnp.clip(un // rs, 0, LANES - 1)
        w = jnp.swapaxes(gb[:, e_tree], 0, 1)                           # [RUN, C, 16]
        dot = _tree_sum(rnd(col * w), rnd)                              # [RUN, C] the adder trees
        for r in range(RUN):
            hit = on[r][:, None] & (lane_ids == slot[r])[None, :]
            acc = jnp.where(hit, rnd(acc + dot[r][:, None]), acc)
    else:
        s_ = arg * LANES + un
        scal = gb[:, jnp.clip(s_ // LANES, 0, E - 1), s_ % LANES].T      # [RUN, C]
        prod = rnd(col * scal[:, :, None])                              # [RUN, C, 16]
        for r in range(RUN):
            acc = jnp.where(on[r][:, None], rnd(acc + prod[r]), acc)
    return acc


def _route(u: _Unit, x):
    """[C] source and destination of the one-step segment x's route (-1: unit not routed)."""
    r = jnp.clip(x["route"], 0, u.t["rsrc"].shape[0] - 1)
    return u.t["rsrc"][r], u.t["rdst"][r]


def _load(u: _Unit, gb, x, sb, sbw, hst):
    """WRGB / MVGB: [C, E, 16] buffers with the routed rows written."""
    S = u.S
    src, dst = _route(u, x)
    dst = jnp.clip(dst, 0, u.E - 1)
    from_host = hst[jnp.clip(src, 0, hst.shape[0] - 1)]
    srow = jnp.clip(src, 0, S - 1)
    from_sb = jnp.where(sbw[srow][:, None], sb[srow], jnp.full((), jnp.nan, jnp.float32))
    val = jnp.where(x["kind"] == K_WRGB, from_host, from_sb)          # [C, 16]
    units = jnp.arange(u.C)
    return gb.at[units, dst].set(jnp.where((src >= 0)[:, None], val, gb[units, dst]))


def _drain(u: _Unit, acc, x):
    """MVSB: the drained units' accumulators restart from zero."""
    return jnp.where((_route(u, x)[1] >= 0)[:, None], 0.0, acc)


def _mvsb(u: _Unit, sb, sbw, x, acc):
    """MVSB: the adder tree sums the command's units into the channel
    accumulator rows; the first MVSB of a row overwrites it."""
    S = u.S
    src, dst = _route(u, x)
    drained = dst >= 0
    drow = jnp.where(drained, jnp.clip(dst, 0, S - 1), S)
    contrib = jax.ops.segment_sum(jnp.where(drained[:, None], acc, 0.0), drow, num_segments=S + 1)[:S]
    hit = jax.ops.segment_sum(drained.astype(jnp.int32), drow, num_segments=S + 1)[:S] > 0
    first = jax.ops.segment_sum((drained & (src == 1)).astype(jnp.int32), drow,
                                num_segments=S + 1)[:S] > 0
    old = jnp.where(sbw[:, None] & ~first[:, None], sb, 0.0)
    return jnp.where(hit[:, None], u.rnd(old + u.rnd(contrib)), sb), sbw | hit


def _sfm(u: _Unit, sb, sbw, x, acc):
    """SFM: softmax over the masked rows (float32 inside the unit)."""
    masks, scales = u.t["masks"], u.t["scales"]
    ki = jnp.clip(x["sfm"], 0, masks.shape[0] - 1)
    mk = masks[ki]
    z = jnp.where(mk, sb * scales[ki], -jnp.inf)
    zmax = jnp.max(z)
    ex = jnp.where(mk, jnp.exp(z - jnp.where(jnp.isfinite(zmax), zmax, 0.0)), 0.0)
    p = ex / jnp.maximum(jnp.sum(ex), jnp.finfo(jnp.float32).tiny)
    return jnp.where(mk, u.rnd(p), sb), sbw


def _rdacc_rows(u: _Unit, start, n):
    """[RUN] accumulator rows read and host rows written by an RDACC run
    (rows past the run: S / H, dropped by the scatters)."""
    xs, S, H = u.t["steps"], u.S, u.H
    on = jnp.arange(RUN) < n
    srow = jnp.clip(_rows(xs["sbrow"], start), 0, S - 1)
    hrow = _rows(xs["hrow"], start)
    return srow, jnp.where(on, srow, S), jnp.where(on & (hrow >= 0) & (hrow < H), hrow, H)


def _rdacc_sb(u: _Unit, sb, sbw, start, n):
    """RDACC: the rows read by the host are free again."""
    _, read, _ = _rdacc_rows(u, start, n)
    return sb, sbw & ~jnp.zeros(u.S, bool).at[read].set(True, mode="drop")


def _rdacc_host(u: _Unit, hb, start, n, sb, sbw):
    """RDACC: the host's read-back rows receive the accumulator rows."""
    srow, _, hrow = _rdacc_rows(u, start, n)
    return hb.at[hrow].set(jnp.where(sbw[srow][:, None], sb[srow], jnp.full((), jnp.nan, jnp.float32)),
                           mode="drop")


def _keep(v, *_):
    return v


# per segment kind (K_NONE, K_MAC, K_WRGB, K_MVGB, K_MVSB, K_SFM, K_RDACC, K_TREE): the branch
# updating the accumulators and the one updating the accumulator rows
_ACC_BRANCH = (0, 1, 0, 0, 3, 0, 0, 2)
_SB_BRANCH = (0, 0, 0, 0, 1, 2, 3, 0)


def _segment_step(u: _Unit, base, hst, i, c):
    """One iteration of the segment loop: segment i applied to the group's state
    c = (gb [C, E, 16] global buffers, acc [C, 16] unit accumulators, sb [S, 16]
    accumulator rows, sbw [S] their written flags, hb [H, 16] host read-back rows)."""
    gb, acc, sb, sbw, hb = c
    segs, xs = u.t["segs"], u.t["steps"]
    kind, start, n = segs["kind"][i], segs["start"][i], segs["len"][i]
    x = {k: a[start] for k, a in xs.items()}                    # a one-step segment's fields
    keep = _keep
    gb2 = jax.lax.cond((kind == K_WRGB) | (kind == K_MVGB), partial(_load, u), keep, gb, x, sb, sbw, hst)
    acc2 = jax.lax.switch(jnp.array(_ACC_BRANCH, jnp.int32)[kind], [
        keep, lambda a_: _mac_run(u, a_, gb, start, n, base, tree=False),
        lambda a_: _mac_run(u, a_, gb, start, n, base, tree=True), lambda a_: _drain(u, a_, x)], acc)
    sb2, sbw2 = jax.lax.switch(jnp.array(_SB_BRANCH, jnp.int32)[kind], [
        lambda b_, w_: (b_, w_), lambda b_, w_: _mvsb(u, b_, w_, x, acc),
        lambda b_, w_: _sfm(u, b_, w_, x, acc), lambda b_, w_: _rdacc_sb(u, b_, w_, start, n)], sb, sbw)
    hb2 = jax.lax.cond(kind == K_RDACC, partial(_rdacc_host, u), keep, hb, start, n, sb, sbw)
    return gb2, acc2, sb2, sbw2, hb2


def _run_group(u: _Unit, n_segs, base, hidx):
    """[H, 16] host read-back rows of one group (one vmapped lane): the segment loop
    from empty buffers (NaN: unwritten) and zeroed accumulators."""
    C, E, S, H, f32 = u.C, u.E, u.S, u.H, jnp.float32
    hst = u.rnd(u.vals[hidx])
    init = (jnp.full((C, E, LANES), jnp.nan, f32), jnp.zeros((C, LANES), f32),
            jnp.zeros((S, LANES), f32), jnp.zeros(S, bool), jnp.full((H, LANES), jnp.nan, f32))
    return jax.lax.fori_loop(0, n_segs, lambda i, c: _segment_step(u, base, hst, i, c), init)[4]


def _aligned_empty(n: int) -> np.ndarray:
    """[n] float32, uninitialised, its data 64-byte aligned (so that
    `jax.device_put(..., may_alias=True)` on the CPU shares it, not copies)."""
    raw = np.empty(n + 16, np.float32)
    skip = (-raw.ctypes.data % 64) // 4
    return raw[skip:skip + n]


def _values(arrays, preps: list[dict], d: dict) -> jax.Array:
    """[PREFIX + V + 16 * SIDE] float32: the interpreter's value buffer (see
    PREFIX): constant rows, the operands flattened, zeros up to the padded
    length V, the side rows of the batch's programs.

    Packed in numpy into an aligned buffer the device array then shares:
    one copy of the operands (670 MB for the batch-8 attention step).
    XLA:CPU's concatenate of that much took 4 s, and a device copy of a
    numpy operand costs a fresh allocation each call."""
    V = d["V"]
    out = _aligned_empty(PREFIX + V + LANES * d["SIDE"])
    out[:PREFIX] = np.repeat(np.array([1.0, np.nan, 0.0], np.float32), LANES)
    o = PREFIX
    for a in arrays:
        flat = np.ravel(np.asarray(a))
        out[o:o + flat.size] = flat
        o += flat.size
    out[o:] = 0.0
    side = [p["side"] for p in preps if p["side"].size]
    if side:
        idx = _element_index(np.concatenate(side)).ravel()
        out[PREFIX + V:PREFIX + V + idx.size] = out[idx]
    return jax.device_put(out, may_alias=True)


def execute_batch(programs: list[Program], *arrays, arithmetic="backend", dims: dict | None = None) -> list:
    """Run several AttAcc programs of the same op on the same operands in one
    call; returns one result array per program (as `execute` does).

    arithmetic: "backend" (FP16), "wide" (float32) or one of them per program.
    dims: padded table dimensions (`batch_dims`); default: the batch's own.

    Example:
        >>> ys = execute_batch([lower(op, d, be) for d in drafts], W, x)   # doctest: +SKIP
    """
    modes = [arithmetic] * len(programs) if isinstance(arithmetic, str) else list(arithmetic)
    if len(modes) != len(programs) or any(m not in ("backend", "wide") for m in modes):
        raise ValueError(f"arithmetic must be 'backend' or 'wide' (per program), got {arithmetic!r}")
    preps = [_prepare(p) for p in programs]
    size = preps[0]["size"]
    if any(p["size"] != size for p in preps):
        raise ValueError("execute_batch needs programs of one op")
    P = len(programs)
    # fewer programs than a chunk (pim_jit runs one): a power-of-two chunk,
    # not CHUNK copies of a big program's tables to run masked
    chunk_size = CHUNK if P >= CHUNK else 1 << (P - 1).bit_length()
    pad = -P % chunk_size
    # one program's padded device tables do not depend on the values: kept in
    # its side cache (as `_prepare`'s tables are), a repeated call (pim_jit's) skips
    # the host-side stacking, which dominates for big programs
    key = ("exec_device", None if dims is None else tuple(sorted(dims.items())))
    cached = side_cache(programs[0]).get(key) if P == 1 else None
    if cached is None:
        tabs, d = _stack(preps, dims)
        # fixed chunks of CHUNK programs (the last padded with empty ones) so that
        # every call with the same dims reuses one compiled interpreter
        tabs = jax.tree.map(lambda a: np.concatenate([a, np.repeat(a[-1:], pad, 0)]) if pad else a, tabs)
        tabs["n_segs"][P:] = 0
        chunks = [jax.tree.map(lambda a: jnp.asarray(a[c0:c0 + chunk_size]), tabs)
                  for c0 in range(0, P + pad, chunk_size)]
        if P == 1:
            side_cache(programs[0])[key] = (chunks, d)
    else:
        chunks, d = cached
    vals = _values(arrays, preps, d)
    fp16 = np.concatenate([np.array([m == "backend" for m in modes]), np.zeros(pad, bool)])
    merged = []
    for k, chunk in enumerate(chunks):
        c0 = k * chunk_size
        merged.append(_run_many(chunk, vals, jnp.asarray(fp16[c0:c0 + chunk_size]),
                                d["C"], d["E"], d["S"], d["H"], d["size"]))
    merged = jnp.concatenate(merged)[:P, :size]
    out = []
    for p, acc in zip(programs, merged):
        lay = p.layouts[p.readback.layout]
        out.append(finish(p.op, acc.reshape(lay.shape), arrays, p.readback.epilogue_on_host,
                          p.meta["result_shape"], np.dtype(p.meta["result_dtype"])))
    return out


def execute_attacc(program: Program, arrays, arithmetic: str):
    return execute_batch([program], *arrays, arithmetic=arithmetic)[0]
