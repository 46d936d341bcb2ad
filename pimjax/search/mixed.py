"""Mixed-parallel GPU + PIM execution: PIMFlow's modes and its Algorithm 1 (PIMFlow §4.2).

PIMFlow runs the GPU and the PIM units *at the same time* on one memory whose
channels are grouped (`System.cogpu`: the GPU on the channels PIM does not use).
Each node of a topologically sorted graph runs in one of these modes:

* ``"gpu"`` -- wholly on the concurrent GPU;
* ``"pim"`` -- wholly offloaded to PIM (a PIM candidate: FC or CONV, not depthwise);
* ``"md-dp"`` -- multi-device data parallelism: a share r of the node's work
  (output rows or output channels) on the GPU and 1 - r on PIM at once; the
  node takes max(GPU part, PIM part) + the split's merge cost.  r is searched in
  10 % steps (`RATIOS`, PIMFlow §4.2.2: 11 samples with 0/100 and 100/0);
* ``"pipeline"`` -- a subgraph of consecutive nodes, each on its own device
  (1x1 CONV on PIM, depthwise CONV on the GPU), cut into `stages` chunks so
  that chunk c + 1 of one node overlaps chunk c of the next (§4.2.1, Fig. 5).

`execution_mode_search` is Algorithm 1: the best split of every candidate
(OPTIMAL_SPLIT, lines 1-7) recorded in T[i][1], every pipelining candidate
starting at node i and l nodes long (PIPELINE, lines 8-15) in T[i][l], then the
interval dynamic program of lines 23-28 over the recorded table.  (Line 28 as
printed reads ``min(T[i][i], ...)``; the recurrence the text describes, and
that this module solves, is T[i][l] = min(T[i][l], T[i][k] + T[i+k][l-k]).)

The search takes node times, not a graph: `NodeTimes` holds each node's
GPU time at every share and PIM time at every share, which the caller
measures or models (`pimjax.models.cnn`, tests).  Units: ns.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

RATIOS = np.round(np.linspace(0.0, 1.0, 11), 2)    # share of a node's work on the GPU (PIMFlow Table 2)
MODES = ("gpu", "pim", "md-dp", "pipeline")


@dataclass(frozen=True)
class NodeTimes:
    """One graph node's times, per share (`RATIOS`, the GPU's share).

    gpu_ns [11]: ns of the share RATIOS[i] of the node on the concurrent GPU
    (gpu_ns[0] = 0: nothing on the GPU).  pim_ns [11]: ns of the share
    1 - RATIOS[i] on PIM (pim_ns[10] = 0); NaN where PIM cannot run it (every
    entry but the last for a non-candidate).  merge_ns [11]: the cost of the
    split at that share (slicing the input, the halo, concatenating the
    outputs, moving data between the channel groups); 0 at both ends, and 0
    where PIMFlow's memory optimiser lays split tensors out contiguously.
    kind: "conv1x1" / "dwconv" / "conv" / "fc" / "other" (the pipelining
    patterns read it).  name: for the report.
    """
    name: str
    gpu_ns: np.ndarray
    pim_ns: np.ndarray
    merge_ns: np.ndarray = None
    kind: str = "other"

    def __post_init__(self):
        for f in ("gpu_ns", "pim_ns"):
            v = np.asarray(getattr(self, f), np.float64)
            if v.shape != RATIOS.shape:
                raise ValueError(f"NodeTimes({self.name!r}).{f}: one time per share of RATIOS "
                                 f"({len(RATIOS)}), got shape {v.shape}")
            object.__setattr__(self, f, v)
        m = np.zeros_like(RATIOS) if self.merge_ns is None else np.broadcast_to(
            np.asarray(self.merge_ns, np.float64), RATIOS.shape).copy()
        m[0] = m[-1] = 0.0
        object.__setattr__(self, "merge_ns", m)
        if self.gpu_ns[0] != 0 or self.pim_ns[-1] != 0:
            raise ValueError(f"NodeTimes({self.name!r}): gpu_ns[0] (no GPU share) and pim_ns[-1] (no PIM "
                             f"share) must be 0")
        if not np.isfinite(self.gpu_ns[-1]):
            raise ValueError(f"NodeTimes({self.name!r}): the node must run on the GPU (gpu_ns[-1] finite)")

    @property
    def candidate(self) -> bool:
        """A PIM candidate: PIM can run the whole node."""
        return bool(np.isfinite(self.pim_ns[0]))

    def split_ns(self) -> np.ndarray:
        """[11] the node's time at each share: max(GPU, PIM part) + merge
        (NaN where PIM cannot run its part)."""
        return np.maximum(self.gpu_ns, self.pim_ns) + self.merge_ns

    def share_ns(self, device: str, share: float) -> float:
        """ns of `share` of the node on `device` ("gpu" / "pim")."""
        i = int(round(share * 10)) if device == "gpu" else int(round((1.0 - share) * 10))
        return float((self.gpu_ns if device == "gpu" else self.pim_ns)[i])


@dataclass(frozen=True)
class NodeMode:
    """A node's place in the plan: mode, GPU share (md-dp; 1 gpu, 0 pim),
    the pipelined subgraph it belongs to (start, length; None otherwise) and
    its device there, and the time the plan charges to its segment."""
    name: str
    mode: str
    ratio: float
    segment: tuple | None = None
    device: str = ""
    segment_ns: float = 0.0


@dataclass(frozen=True)
class MixedPlan:
    """Algorithm 1's answer: a mode per node, the total, and the recorded
    table T (T[i, l]: best ns of the l nodes from i; inf where nothing was
    recorded or composed).  `split_share` is PIMFlow Table 2: the share of
    the PIM-candidate nodes at each GPU ratio."""
    nodes: tuple
    total_ns: float
    table: np.ndarray = field(repr=False)
    options: dict = field(default_factory=dict)

    def to_dataframe(self):
        import pandas as pd
        return pd.DataFrame([dict(node=n.name, mode=n.mode, gpu_share=n.ratio,
                                  segment=None if n.segment is None else f"{n.segment[0]}+{n.segment[1]}",
                                  device=n.device, segment_ns=n.segment_ns) for n in self.nodes])

    def split_share(self, candidates) -> dict:
        """{GPU ratio: share of the candidate nodes planned at it} over the
        nodes whose `candidates` flag is set (pipelined nodes count at their
        device's ratio: 0 on PIM, 1 on the GPU)."""
        picked = [n for n, c in zip(self.nodes, candidates) if c]
        out = {float(r): 0.0 for r in RATIOS}
        for n in picked:
            out[float(n.ratio)] += 1.0 / max(1, len(picked))
        return out


# ---------------------------------------------------------------------------
# the modes
# ---------------------------------------------------------------------------
def optimal_split(node: NodeTimes, md_dp: bool = True) -> tuple[float, float]:
    """OPTIMAL_SPLIT (Algorithm 1, lines 1-7): (GPU share, ns) of the node's
    best mode among all-GPU, all-PIM and (md_dp) every 10 % split."""
    t = node.split_ns()
    if not md_dp:
        t = np.where((RATIOS == 0) | (RATIOS == 1), t, np.nan)
    i = int(np.nanargmin(t))
    return float(RATIOS[i]), float(t[i])


def pipeline_ns(nodes: list[NodeTimes], devices: list[str], stages: int = 2) -> float:
    """do_pipeline: ns of `nodes` (consecutive, each consuming the previous
    one's output) on `devices` ("gpu" / "pim" per node), each cut into
    `stages` equal chunks.  A list schedule: chunk c of node j starts when
    chunk c of node j - 1 is done and its device has finished node j's
    earlier chunks and every chunk of the nodes before j it runs (each
    device takes its work node by node, chunks in order).  Chunk times are
    the nodes' share-1/stages times, so every launch and per-kernel fixed
    cost the node times hold is paid once per chunk."""
    if stages < 1 or 10 % stages:
        raise ValueError(f"pipeline stages={stages}: the shares are 10 % steps, so stages must divide 10")
    share = 1.0 / stages
    free = {"gpu": 0.0, "pim": 0.0}
    done_prev = [0.0] * stages
    for node, dev in zip(nodes, devices):
        dt = node.share_ns(dev, share)
        if not np.isfinite(dt):
            return float("inf")
        done = []
        for c in range(stages):
            start = max(done_prev[c], free[dev])
            free[dev] = start + dt
            done.append(free[dev])
        done_prev = done
    return float(max(done_prev))


PIPELINE_PATTERNS = (("conv1x1", "dwconv"), ("dwconv", "conv1x1"), ("conv1x1", "dwconv", "conv1x1"))
"""PIMFlow §5: the three pipelined subgraph patterns, 1x1-DW, DW-1x1 and 1x1-DW-1x1 (activations
skipped: the caller's node list holds the CONV / FC nodes)."""


def pipeline_devices(nodes: list[NodeTimes]) -> list[str]:
    """Each pipelined node's device: PIM for a candidate (the 1x1 CONVs), the
    GPU for the rest (depthwise CONV runs on the GPU only, PIMFlow §4.2.1)."""
    return ["pim" if n.candidate else "gpu" for n in nodes]


def execution_mode_search(nodes: list[NodeTimes], *, md_dp: bool = True, pipeline: bool = True,
                          offload: bool = True, stages: int = 2, patterns=PIPELINE_PATTERNS,
                          segments=None, pipe_nodes=None) -> MixedPlan:
    """Algorithm 1 (PIMFlow §4.2.2): the execution mode and task size of every
    node of a topologically sorted chain.

    nodes: per node its `NodeTimes`.  md_dp: allow 10 %-step splits;
    pipeline: allow pipelined subgraphs matching `patterns` (node kinds);
    offload: allow all-PIM (False: GPU only).  segments: the pipelining
    candidates as (start, length) pairs, when the caller knows which chains
    may be pipelined (`pimjax.models.cnn.find_patterns` checks that each
    node's output feeds only the next one, which node kinds alone cannot);
    None: every run of kinds matching `patterns`.  pipe_nodes: the nodes' times
    when pipelined (default `nodes`): a node split for MD-DP along one dimension
    (say output channels) may be cut into pipeline chunks along another (rows).
    The four mechanisms of PIMFlow's
    Fig. 9 are offload only (Newton+ / Newton++), md_dp (PIMFlow-md),
    pipeline (PIMFlow-pl) and both (PIMFlow).  Returns a `MixedPlan` whose
    table is T [N, N + 1] (T[i, l]: best ns of nodes i .. i + l - 1).
    """
    n = len(nodes)
    if pipe_nodes is not None and len(pipe_nodes) != n:
        raise ValueError(f"pipe_nodes: one per node ({n}), got {len(pipe_nodes)}")
    inf = float("inf")
    T = np.full((n, n + 1), inf)
    choice: dict = {}          # (i, l) -> ("single", ratio) | ("pipe", l) | ("cut", k)
    for i, node in enumerate(nodes):
        if offload and node.candidate:
            r, t = optimal_split(node, md_dp)
        else:
            r, t = 1.0, float(node.gpu_ns[-1])
        T[i, 1] = t
        choice[(i, 1)] = ("single", r)
    if pipeline and offload:            # a pipeline puts its candidates on PIM
        kinds = [nd.kind for nd in nodes]
        if segments is None:
            segments = [(i, len(pat)) for i in range(n) for pat in patterns
                        if i + len(pat) <= n and tuple(kinds[i:i + len(pat)]) == tuple(pat)]
        for i, l in segments:
            if not (l >= 2 and 0 <= i and i + l <= n):
                raise ValueError(f"pipeline segment ({i}, {l}): needs 2 or more nodes inside the chain of {n}")
            seg = (nodes if pipe_nodes is None else pipe_nodes)[i:i + l]
            t = pipeline_ns(seg, pipeline_devices(seg), stages)
            if t < T[i, l]:
                T[i, l] = t
                choice[(i, l)] = ("pipe", l)
    # lines 23-28: the interval DP over the recorded table (vectorised over i)
    for l in range(2, n + 1):
        m = n - l + 1
        best = T[:m, l].copy()
        arg = np.zeros(m, np.int64)
        for k in range(1, l):
            cand = T[:m, k] + T[k:k + m, l - k]
            better = cand < best
            best[better] = cand[better]
            arg[better] = k
        T[:m, l] = best
        for i in np.flatnonzero(arg):
            choice[(int(i), l)] = ("cut", int(arg[i]))
    modes: list = [None] * n
    stack = [(0, n)] if n else []
    while stack:                    # backtrack the recorded choices (a stack: chains can be long)
        i, l = stack.pop()
        how = choice[(i, l)]
        if how[0] == "cut":
            stack += [(i + how[1], l - how[1]), (i, how[1])]
        elif how[0] == "pipe":
            seg = nodes[i:i + l]
            for j, (nd, dev) in enumerate(zip(seg, pipeline_devices(seg))):
                modes[i + j] = NodeMode(nd.name, "pipeline", 1.0 if dev == "gpu" else 0.0, (i, l), dev,
                                        float(T[i, l]))
        else:
            r = how[1]
            mode = "gpu" if r == 1.0 else "pim" if r == 0.0 else "md-dp"
            modes[i] = NodeMode(nodes[i].name, mode, r, None, "", float(T[i, 1]))
    return MixedPlan(tuple(modes), float(T[0, n]) if n else 0.0, T,
                     dict(md_dp=md_dp, pipeline=pipeline, offload=offload, stages=stages))



# ---------------------------------------------------------------------------
# node times from pimjax's own models
# ---------------------------------------------------------------------------
def op_node_times(name: str, build, backend, tuner=None, *, kind: str = "fc", resident=(0,),
                  merge_ns=None, pim: bool = True, dtype_bytes=2, with_choices: bool = False,
                  dtypes=None, pim_whole: float | None = None, **lower_options):
    """A node's `NodeTimes` from pimjax's models: every share's GPU time on
    the backend's concurrent GPU (`System.cogpu`; `sim.host.host_time`) and
    every share's PIM time, tuned and simulated (`Tuner.choose`, the report's
    `total_ns`: kernel, read-back and host merge).

    build(share) -> (op, shapes): the node's op restricted to `share` (0 < share
    <= 1) of its work (`share_builder(op)`: its first rows).  resident: operand
    positions resident in PIM (the weights: placed once, not per call).
    pim=False: a node PIM cannot run (its PIM times NaN).  merge_ns: the
    split's cost per share (default 0: PIMFlow's memory optimiser lays the two
    parts out contiguously, §4.3.2).  dtype_bytes: `host_time`'s element
    sizes.  with_choices: also
    return {GPU ratio: the PIM part's `Choice`}.  dtypes: value id -> dtype
    (`Tuner.choose`'s).  pim_whole: the whole op's PIM ns when the caller has
    it (not tuned again).  lower_options: `Tuner.choose`'s (e.g. result_dtype)."""
    from ..sim.host import host_time
    from .tuner import Tuner
    cogpu = backend.system.cogpu
    if cogpu is None:
        raise ValueError(f"{backend.name}: no concurrent GPU (System.cogpu is None); mixed-parallel modes need "
                         f"a memory whose GPU-only channels run beside PIM (e.g. newton's total_channels > "
                         f"channels)")
    tuner = tuner if tuner is not None else Tuner()
    gpu = np.full(len(RATIOS), np.nan)
    gpu[0] = 0.0
    pimt = np.full(len(RATIOS), np.nan)
    pimt[-1] = 0.0
    choices = {}
    for i, r in enumerate(RATIOS):
        if r > 0:
            op, shapes = build(float(r))
            gpu[i] = float(host_time(op, cogpu, shapes, dtype_bytes))
        if r == 0 and pim and pim_whole is not None:
            pimt[0] = float(pim_whole)
        elif r < 1 and pim:
            op, shapes = build(float(np.round(1.0 - r, 2)))
            choice = tuner.choose(op, backend, shapes, dtypes, resident=tuple(resident), **lower_options)
            if choice is not None:
                pimt[i] = float(choice.report.total_ns)
                choices[float(r)] = choice
    node = NodeTimes(name, gpu, pimt, merge_ns, kind)
    return (node, choices) if with_choices else node


def split_var(op) -> str | None:
    """The loop variable MD-DP splits `op` along: the first output variable,
    in the result's dimension order, that indexes a result dimension alone
    and has extent > 1 -- an NHWC CONV's output rows H (PIMFlow §4.3.2: slices
    and concatenations along H are contiguous, so no copies), an FC / GEMV's
    outputs.  None when the op has no such variable."""
    return next((v for _, v in result_vars(op) if op.extents[v] > 1), None)


def split_vars(op) -> dict[str, str]:
    """The MD-DP split variants of `op` (PIMFlow §4.2.1; issue: "along output
    channels, or along the output's spatial rows with a halo"): {"rows": the
    first output variable indexing a result dimension alone (`split_var`: an
    NHWC CONV's H, a GEMV's outputs), "channels": the last such variable when
    it is another one (an NHWC CONV's output channels F, an FC's outputs)}
    -- only the variables with extent > 1."""
    vs = [v for _, v in result_vars(op) if op.extents[v] > 1]
    out = {}
    if vs:
        out["rows"] = vs[0]
        if vs[-1] != vs[0]:
            out["channels"] = vs[-1]
    return out


def choose_split(variants: dict) -> tuple[str, NodeTimes]:
    """(name, NodeTimes) of the split variant whose best split (`optimal_split`)
    is fastest; ties keep the first.  variants: {name: NodeTimes} of one node
    split different ways (e.g. `split_vars`' "rows" and "channels")."""
    if not variants:
        raise ValueError("choose_split: no variant")
    return min(variants.items(), key=lambda kv: optimal_split(kv[1])[1])


def result_vars(op) -> list[tuple[int, str]]:
    """(result dimension, output variable) of each result dimension that one
    output variable indexes alone, in dimension order."""
    outs = set(op.output_vars)
    return [(d, str(e)) for d, e in enumerate(op.result.index_map) if str(e) in outs]


def share_builder(op, var: str | None = None):
    """build(share) -> (op, shapes) for `op_node_times`: `op` over the first
    ceil(share x extent) iterations of `var` (default `split_var(op)`), with
    the operand and result shapes its index maps then imply (a CONV's input
    rows include the kernel's halo).  The other share is the rest of the
    range; both parts time alike by symmetry of the layout."""
    import math
    from dataclasses import replace

    from ..partition.verify import infer_shapes
    from ..trace.ir import LoopVar
    var = var or split_var(op)
    if var is None:
        raise ValueError(f"op {op.name}: no output variable to split along (MD-DP needs one)")
    full = op.extents[var]

    def build(share: float):
        n = max(1, min(full, math.ceil(share * full - 1e-9)))
        sub = replace(op, loop_vars=tuple(LoopVar(lv.name, n) if lv.name == var else lv for lv in op.loop_vars))
        return sub, infer_shapes(sub)
    return build
