"""`pim_jit`: the staged API of `jax.jit` for PIM backends.

    f = pimjax.pim_jit(fn, backend="hbm-pim")
    y = f(params, x)                   # traced, lowered, compiled (searched), executed on PIM
    f.trace(params, x).lower().compile().report()

Stages (as `jax.jit(f).trace(...).lower().compile()`: `lower` is cheap,
`compile` is where the work is):

* `Traced`   -- `.graph`: the PimGraph of the function for these shapes;
  `.residency`: which arguments stay in PIM memory and why.
* `Lowered`  -- partition and predict, nothing lowered to a program and
  nothing simulated: per op its placement on the *predicted* figures
  (PIM or host, and why), its draft space and the cost model's predicted
  best draft (`Tuner.propose`); `.plans`, `.as_text()`, `.report()` and
  `.cost_analysis()` with the predicted figures.
* `Compiled` -- the search: per op the predicted top-k drafts (and the
  backend's baseline) lowered to programs and simulated, the fastest kept
  (`Tuner.verify`), and the final placement on the *simulated* figures;
  `.plans` (with the programs), `.as_text()`, `.report()` and
  `.cost_analysis()` with the simulated figures.  `__call__` runs every
  PIM op by executing its command program (`sim.execute`, the backend's
  arithmetic) and host ops with jax.

Calling the `PimFunction` runs trace -> lower -> compile -> call.

`cost_analysis()` -- one schema for `Lowered` and `Compiled`, a plain dict,
strict JSON (a figure that does not exist, or is not known on these
figures, is None).  Cycles count the PIM command clock (`clock_ghz` =
1 / tCK, GHz); times are ns (`cycles / clock_ghz` for PIM ops; host ops
on the GPU model of `backend.system.baseline` -- "the host roofline" below --,
the GPU on the same memory system in the presets, `pimjax/hw/gpu.py`);
energy pJ; bytes; GB/s = bytes / ns.

  figures        "predicted" (Lowered: the cost model's cycles of each PIM
                 op's predicted best draft) or "simulated" (Compiled: the
                 chosen programs simulated)
  backend, host  the backend preset and the host model names
  system         the PIM system and the GPU it is compared with
                 (`pimjax.hw.describe_system`: stacks / devices, channels,
                 internal and external GB/s; the GPU's name, model, GB/s,
                 efficiencies, launch ns)
  clock_ghz      the PIM command clock (GHz)
  pim_cycles     cycles of the ops placed on PIM (a fused block once);
                 None in the predicted figures when an op has no
                 prediction (the exhaustive tuner predicts none)
  pim_ns         the same in ns
  host_ns        the ops placed on the host, on the host roofline (ns)
  split_ns       the ops split between the GPU and PIM ("md-dp", both
                 parts at once; 0 without a concurrent GPU)
  total_ns       pim_ns + host_ns + split_ns
  gpu, gpu_model the GPU "vs GPU" compares with (`System.baseline`'s name)
                 and its time model (`pimjax.hw.gpu.GPU_MODELS`: "occupancy"
                 by default, "pimflow" for PIMFlow's Accel-Sim RTX 2060, ...)
  gpu_ns         the GPU-only run (ns): the sum of gpu_kernels
  gpu_kernels    the kernels the GPU-only run launches (`pimjax.sim.gpu_kernels`),
                 each {name, ops (op indices), kind ("gemm", "conv", "norm",
                 "softmax", "reduce", "act", "copy"), ns}; on the "library" and
                 "profile" models maps and row reductions fuse as XLA / vLLM fuse
                 them and a convolution's name carries cuDNN's algorithm,
                 elsewhere one kernel per op
  speedup_gpu    gpu_ns / total_ns
  resident_ns    one-time placement of resident operands, not in total_ns
                 (simulated only)
  resident       {argument (or leaf path, e.g. "params['Wq']"): why} of the
                 arguments placed in PIM layout once (see Residency below)
  per_call       {argument (or leaf path): why} of those rearranged every
                 call
  gpu_sources    on a GPU described by its own measurements
                 (`pimjax.hw.profile`): {op index (str): "measured",
                 "interpolated" or "model"} -- where each op's GPU time
                 came from; {} on the analytic GPU models
  energy_pj      energy of the PIM ops (simulated only)
  ops            per op, in plan order: index, name (its first jax
                 primitive), fused (the primitives traced into it after the
                 first, e.g. ["add", "max"]), placement ("pim",
                 "host", "fused", "md-dp"), reason, draft (in words), precision
                 (the op's data converted to the units' type, e.g.
                 "float32 -> float16"; "" when none), saturation (what
                 calls found the units' type did to its values: overflow,
                 underflow, inf / NaN; "" when nothing; `pimjax.precision`),
                 cycles, ns,
                 gpu_ns (the op's share of the GPU-only run's kernels), gpu_share (mixed
                 plans: the op's share on the GPU beside PIM), space (drafts in
                 its space), simulated_drafts (0 when predicted);
                 predicted only (None when simulated): uncertainty (the cost
                 model's sigma of log-cycles, its ensemble spread widened by
                 the out-of-sample floor: 0.05 ~ +-5 %) and
                 extrapolating (True when the draft's features lie outside
                 the model's training range: treat the figure with care);
                 simulated only (None, bound "", in the predicted
                 figures of a PIM op): the breakdown rearrangement_cycles /
                 compute_cycles / readback_cycles / merge_cycles /
                 resident_cycles (one-time placement) / append_cycles
                 (appended rows of resident operands, per call, part of
                 rearrangement_cycles), energy_pj, bound (what limits the op),
                 baseline_ns (the backend's baseline
                 mapping), speedup_baseline, to_pim_bytes /
                 from_pim_bytes (host link per call), link_GBps, link_pct,
                 internal_pct; both: speedup_gpu, operand_bytes (operands
                 read once and the result written once, at the backend's
                 element size), effective_GBps (operand_bytes / ns).
                 Host ops: cycles 0, ns = gpu_ns; fused ops: 0 (their
                 block's time is on the block's last op).

The cost model predicts a program that rearranges every operand per call,
so with resident weights the predicted figures overstate the steady
state (and leave out appends).

Placement: an op goes to PIM only where its simulated time on PIM (the
tuner's choice, data rearrangement included) beats the host roofline
(`Lowered` shows the same decision on the predicted time); ops
the backend cannot run stay on the host, and the report says why (a body
the cores lack, data their arithmetic cannot hold exactly -- integers on
fp16 / bf16 units, floats on UPMEM --, a 0-d op, a draft space that does
not lower).  `placement="pim"` turns each of those into a PimCompileError.
On a system whose GPU runs beside PIM on its own channels (`System.cogpu`,
newton's PIMFlow memory), "auto" then runs PIMFlow's Algorithm 1 over the
ops (`plan.mixed.mixed_plans`): each op on the GPU, on PIM, or split
between them at a 10 % ratio ("md-dp", both parts at once), or the whole
function on the GPU alone when that is faster.
An attention block a family fuses (AttAcc's softmax unit) is placed as
one op; a candidate it cannot fuse (a mask or bias in the scores) is
planned op by op -- its products as contractions, its softmax where the
backend can run it -- and each of its ops' reasons says why it was not
fused (`plan.attention.attention_blocks`).
The host roofline reads and writes every value at its own size, except
that floats wider than the backend's element are charged at the backend's
element (an fp16 PIM result is compared with the GPU at equal precision):
an int32 op left on the host of hbm-pim moves 4 B per element, an int8 op
on UPMEM's host 1 B.
Residency (`pim_jit(resident=...)`, `residency`): a resident argument's
rearrangement into PIM layout is paid once (DCC §IV-E `pre_load`): it is
reported as `resident_ns` and excluded from the steady-state time.  The
default `resident="auto"` follows how flax / haiku / equinox / penzai call
a model, the parameters one pytree argument: an argument that is a pytree
node (a dict / list / tuple of arrays, an `nnx.State`, an equinox Module)
is resident; a plain array argument written at an offset by
`lax.dynamic_update_slice` / `.at[...].set` whose result feeds an op PIM
can run and is returned (threaded to the next call) is a KV cache,
resident too; other plain array arguments
(activations) are rearranged every call.  No argument names are guessed
at.  A sequence of names, positions or leaf paths replaces the rule, `()`
turns it off.  An append into a resident value is resident with append:
the host writes only the update (in place; the GPU-only run's update is
charged the same), and each PIM op reading it pays per call the share of
its placement the appended rows take in the groups they land in
(`sim.append`; `append_cycles`).
Calling a `Compiled` with other shapes, dtypes or argument structure raises
a per-argument `TypeError`; calling the
`PimFunction` compiles for new shapes (cached by shape, dtype and weak
type, as jax does).  Keyword arguments are bound to their positions; an
unknown keyword or an argument leaf that is not an array is a TypeError
naming pim_jit and the argument.

Transforms: a `PimFunction` (or a `Compiled`) called with tracers composes
with jax.  Inside `jax.jit` it compiles for the tracers' shapes and dtypes
and runs the PIM programs through `jax.pure_callback` when the jitted
function executes: the values of an eager call.  Under `jax.vmap` the batch
becomes part of the traced shapes: a `custom_vmap` rule compiles
`jax.vmap(fn)` for the batched arguments (a GEMV mapped over its vector is
one GEMM program; `f.vmapped(in_batched)` is that pim_jit, `f.compiles()`
lists its compiles and reports); nested vmaps fold every batch axis in.
Autodiff: the primal runs on PIM and the derivatives are those of the
plain function run with jax (a `custom_jvp` whose tangents are `jax.jvp` of
`fn`): `jax.grad` / `jax.vjp` / `jax.jacrev` give the gradients of the jnp
reference at the inputs, not of the PIM arithmetic; `jax.jvp`,
`jax.jacfwd`, `jax.hessian` and `jax.linearize` take the primal from PIM
and the tangents from `jax.jvp` of the plain function.
The staged API under a transform: `f.trace` / `f.lower` take tracers as
their shapes and dtypes (`jax.ShapeDtypeStruct`s), so `f.lower(x)` inside
`jax.jit` lowers for the traced shapes; a `Lowered`, `Compiled` or report
is not a jax value (return it from the jitted function and jax says so).
Calling `pim_jit` (the decorator) under a transform is a TypeError saying
to decorate outside and call inside.
"""
from __future__ import annotations

import functools
import inspect
import os
import warnings
from typing import Callable, Sequence

import jax
import jax.custom_batching
import jax.numpy as jnp
import numpy as np

from .errors import PrecisionWarning, user_stacklevel
from .hw.core import Backend
from .hw.presets import get_backend
from .plan.mixed import run_split
from .plan.placement import predict_plans, verify_plans
from .plan.plans import OpPlan, plans_text, refuse
from .plan.residency import Residency, residency
from .precision import PRECISIONS, OperandChecks, check_values, conversion, op_dtypes, significant_bits, unit_dtype
from .search.tuner import Tuner
from .sim.execute import execute
from .trace.builder import dtype_name
from .trace.evaluate import evaluate_op
from .trace.frontend import make_graph
from .trace.ir import PimGraph, PimOp


def _positional(fn, args: tuple, kwargs: dict) -> tuple:
    """`args` with `kwargs` bound to their parameters' positions (the graph's
    inputs are the positional leaves; `resident` names map to positions).
    Keyword-only parameters cannot be inputs: a TypeError says so."""
    if not kwargs:
        return args
    try:
        sig = inspect.signature(fn)
    except ValueError as err:
        raise TypeError(f"keyword arguments need a function with a signature: {err}") from None
    params = sig.parameters
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        stray = [k for k in kwargs if k not in params or params[k].kind is inspect.Parameter.POSITIONAL_ONLY]
        if stray:       # before `bind`, which would name a missing positional instead
            raise TypeError(f"pim_jit({getattr(fn, '__name__', 'fn')}) got unexpected keyword argument(s) "
                            f"{', '.join(map(repr, stray))}; its parameters are {', '.join(params)}")
    bound = sig.bind(*args, **kwargs)
    if bound.kwargs:
        raise TypeError(f"argument(s) {', '.join(sorted(bound.kwargs))} cannot be passed by position "
                        "(keyword-only, or after a skipped default); pim_jit's inputs are positional — "
                        "close over constants instead")
    return tuple(bound.args)


XLA_CACHE_BYTES = 2 << 30
"""The persistent compilation cache's bound (bytes; PIMJAX_XLA_CACHE_BYTES overrides)."""


def enable_xla_cache(path: str | None = None) -> str | None:
    """Keep pimjax's expensive XLA compilations (the cycle scans: seconds
    each) on disk between runs: JAX's persistent compilation cache at `path`
    (default $PIMJAX_CACHE_DIR/xla or ~/.cache/pimjax/xla), for compilations
    over one second, at most `XLA_CACHE_BYTES` (2 GiB; PIMJAX_XLA_CACHE_BYTES,
    -1 unbounded): JAX evicts its least recently used entries past it, under a
    file lock.  Left alone when the user configured a cache dir
    already; switched off by PIMJAX_XLA_CACHE=0 (the test suite does: several
    processes writing one cache crashed once).  Returns the directory used."""
    if os.environ.get("PIMJAX_XLA_CACHE", "1") == "0":
        return None
    current = jax.config.jax_compilation_cache_dir
    if current:
        return current
    root = os.environ.get("PIMJAX_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "pimjax"))
    path = path or os.path.join(root, "xla")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:             # read-only home: no disk cache, still correct
        return None
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    jax.config.update("jax_compilation_cache_max_size", int(os.environ.get("PIMJAX_XLA_CACHE_BYTES",
                                                                           XLA_CACHE_BYTES)))
    return path


def _eager(method):
    """Run a stage eagerly even when called inside a transform's trace
    (`f.lower(x).compile()` inside jax.jit: jax.jit stages every jnp op it
    sees, and the partitioner and tuner need concrete numbers)."""
    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        with jax.ensure_compile_time_eval():
            return method(*args, **kwargs)
    return wrapper


def _stage_report(stage, figures: str):
    """A Lowered / Compiled stage's report on its figures, built once (`pimjax.report.build_report`)."""
    if stage._report is None:
        from .report import build_report
        stage._report = build_report(stage, figures=figures)
    return stage._report


class PimFunction:
    """A function compiled for a PIM backend per argument shapes (see module
    docstring).  Create with `pim_jit`.  Keeps the `Compiled` of its latest
    `COMPILES_KEPT` argument signatures (a call with an older one compiles
    again: the tuning cache, when given, answers it)."""

    COMPILES_KEPT = 64

    def __init__(self, fn: Callable, backend: str | Backend = "hbm-pim", resident: Sequence | str = "auto",
                 tuner: Tuner | str | None = None, cache: str | None = None, placement: str = "auto",
                 precision: str = "convert", **backend_options):
        if placement not in PLACEMENTS:
            raise ValueError(f"placement {placement!r} not in {PLACEMENTS}")
        if precision not in PRECISIONS:
            raise ValueError(f"precision {precision!r} not in {PRECISIONS}")
        if not callable(fn):       # jax.jit(pim_jit)(x), pim_jit(y): a value where the function goes
            raise TypeError(f"pim_jit needs a function, got a {type(fn).__name__}: apply pim_jit outside jax "
                            "transforms (f = pim_jit(fn, backend=...)) and call f inside them "
                            "(jax.jit(lambda x: f(x)), jax.vmap(f), jax.grad(...))")
        self.placement = placement
        self.precision = precision
        self.fn = fn
        self.backend = backend if isinstance(backend, Backend) else get_backend(backend, **backend_options)
        # "auto", one name or position, or a sequence of them ("W" is one name, not "W"'s letters)
        self.resident = resident if resident == "auto" else \
            (resident,) if isinstance(resident, (str, int)) else tuple(resident)
        if tuner is None or isinstance(tuner, str):
            tuner = Tuner(mode=tuner or "predict", cache=cache)
        self.tuner = tuner
        self._compiled: dict = {}
        self._batched: dict = {}        # {vmap pattern: pim_jit of jax.vmap(fn)} (`vmapped`)
        self._composed: dict = {}       # jax-composable runners per signature (`_transformed_call`)
        enable_xla_cache()
        try:
            self.__name__ = fn.__name__
        except AttributeError:
            pass

    def _signature(self, args) -> tuple:
        leaves, tree = jax.tree_util.tree_flatten(args)
        return (tree, tuple(_leaf_signature(x) for x in leaves))

    def trace(self, *args, **kwargs) -> "Traced":
        """Trace for these argument shapes (arrays or ShapeDtypeStructs);
        keyword arguments are bound to their positions."""
        args = _positional(self.fn, args, kwargs)
        _check_array_leaves(self, args)
        # under a transform (f.lower(x) inside jax.jit) the tracers stand for their shapes and dtypes
        args = jax.tree_util.tree_map(lambda x: _abstract(x) if isinstance(x, jax.core.Tracer) else x, args)
        return Traced(self, make_graph(self.fn, *args), args)

    def lower(self, *args, **kwargs) -> "Lowered":
        """Shortcut for `trace(*args).lower()`, as in JAX."""
        return self.trace(*args, **kwargs).lower()

    def vmapped(self, in_batched) -> "PimFunction":
        """The pim_jit of `jax.vmap(fn)` with `in_batched` (a pytree of bools
        like the positional arguments) mapped over their leading axis, same
        backend, tuner, placement and resident names; what a call under
        `jax.vmap` runs (cached per pattern)."""
        in_batched = tuple(in_batched)
        cache = self._batched
        key = jax.tree_util.tree_flatten(in_batched)
        key = (key[1], tuple(key[0]))
        f = cache.get(key)
        if f is None:
            axes = jax.tree_util.tree_map(lambda b: 0 if b else None, in_batched)
            f = cache[key] = PimFunction(jax.vmap(self.fn, in_axes=axes), self.backend, self.resident,
                                         self.tuner, placement=self.placement, precision=self.precision)
        return f

    def __call__(self, *args, **kwargs):
        args = _positional(self.fn, args, kwargs)
        leaves, tree = jax.tree_util.tree_flatten(args)
        _check_array_leaves(self, args)
        if any(isinstance(x, jax.core.Tracer) for x in leaves):
            return _transformed_call(self, leaves, tree)     # under jit / vmap / grad
        return self._compile_for(args)(*args)

    def _compile_for(self, args) -> "Compiled":
        """The Compiled for these arguments (arrays or ShapeDtypeStructs),
        compiled on the first call with their signature."""
        sig = self._signature(args)
        compiled = self._compiled.get(sig)
        if compiled is None:
            if len(self._compiled) >= self.COMPILES_KEPT:       # the bound: the oldest signature goes
                del self._compiled[next(iter(self._compiled))]
            # eagerly even when called inside a transform's trace (jax.jit stages
            # every jnp op it sees, and the tuner's arithmetic needs values)
            with jax.ensure_compile_time_eval():
                compiled = self._compiled[sig] = self.lower(*args).compile()
        return compiled

    def compiles(self) -> list:
        """Every `Compiled` this function keeps, one per argument signature
        (the latest `COMPILES_KEPT`), those of its `jax.vmap`-ped versions included (a call
        under `jax.vmap` compiles `jax.vmap(fn)` for the batched shapes):
        the reports of what calls inside transforms ran."""
        out = list(self._compiled.values())
        for f in self._batched.values():
            out += f.compiles()
        return out


PLACEMENTS = ("auto", "prefer_pim", "pim")


def pim_jit(fn: Callable | None = None, *, backend: str | Backend = "hbm-pim", resident: Sequence | str = "auto",
            tuner: Tuner | str | None = None, cache: str | None = None, placement: str = "auto",
            precision: str = "convert", **backend_options):
    """Compile `fn` (a jax.numpy function) for a PIM backend.

    backend: preset name or a Backend; backend_options go to `get_backend`.
    resident: which arguments stay in PIM memory between calls (their
    rearrangement into PIM layout is paid once, DCC's `pre_load`, reported
    as `resident_ns` and kept out of the steady-state time).  "auto" (the
    default): parameter containers (an argument that is a dict / list /
    tuple of arrays, a flax `nnx.State`, a haiku params dict, an equinox
    Module, ...) and KV caches (a plain array argument written at an offset
    by `lax.dynamic_update_slice` / `.at[...].set` whose result feeds an op
    PIM can run: each call pays only for the appended rows) are resident;
    plain array arguments (activations) are rearranged every call.  A
    sequence of argument names, positions or leaf paths (`"params['Wq']"`)
    replaces that choice; `()` turns residency off.  The report's
    `resident` / `per_call` say which and why (`pimjax.plan.residency`).
    tuner: a `Tuner` or its mode ("predict", "exhaustive", "evolutionary").
    cache: JSON file of tuning decisions (memory only when None).
    placement: "auto" (PIM only where it beats the host roofline; with a
    concurrent GPU, `System.cogpu`, PIMFlow's GPU / PIM / MD-DP modes),
    "prefer_pim" (every op the backend supports on PIM), "pim" (like
    prefer_pim, and an op the backend cannot run raises PimCompileError
    naming its primitive and source line).
    precision: "convert" (float32 / float64 data runs on fp16 / bf16 units
    converted to their type: one `PrecisionWarning` per compile names the
    ops, the report's per-op `precision` states each conversion) or
    "strict" (a conversion raises PimCompileError naming the op).  Either
    way every call checks the converted values and the PIM results:
    overflow to inf, underflow to 0, inf / NaN from finite operands are a
    `PrecisionWarning` and the report's per-op `saturation`
    (`pimjax.precision`).

    The result composes with jax.jit, jax.vmap (the batch folded into the
    compiled shapes) and autodiff (jax.grad, jvp, linearize: the primal on
    PIM, derivatives of `fn` run with jax); see the module docstring.

    Example:
        >>> f = pim_jit(lambda p, x: jax.nn.relu(p["W"] @ x), backend="hbm-pim")   # doctest: +SKIP
        >>> y = f({"W": W}, x); print(f.lower({"W": W}, x).compile().report())     # doctest: +SKIP
    """
    if fn is None:
        return lambda f: PimFunction(f, backend, resident, tuner, cache, placement, precision, **backend_options)
    return PimFunction(fn, backend, resident, tuner, cache, placement, precision, **backend_options)


class Traced:
    """A traced function: `.graph` (PimGraph), `.residency`, `.lower()`."""

    def __init__(self, owner: PimFunction, graph: PimGraph, args):
        self.owner, self.graph = owner, graph
        self._args = args
        self._residency = None
        self.in_tree = jax.tree_util.tree_structure(args)
        self.in_avals = [(v.shape, v.dtype) for v in (graph.values[i] for i in graph.inputs)]

    def as_text(self) -> str:
        return self.graph.as_text()

    @_eager
    def lower(self) -> "Lowered":
        """Partition and predict every op (cheap: no program is lowered and
        nothing is simulated; `Lowered.compile()` does that)."""
        res = self.residency
        return Lowered(self, predict_plans(self.graph, self.owner.backend, self.owner.tuner,
                                           res.ids, self.owner.placement, res.appends))

    @property
    def residency(self) -> Residency:
        """Which arguments are resident and why (`residency`, by the
        owner's `resident` spec), computed once."""
        if self._residency is None:
            self._residency = residency(self.owner.fn, self._args, self.graph, self.owner.resident)
        return self._residency

    def _resident_ids(self) -> set:
        """Value ids whose placement is paid once (`Residency.ids`)."""
        return set(self.residency.ids)


class Lowered:
    """Predicted drafts and placement, no programs yet (see module
    docstring): `.plans`, `.as_text()`, `.cost_analysis()` and `.report()`
    with the predicted figures, `.compile()`."""

    def __init__(self, traced: Traced, plans: list[OpPlan]):
        self.traced, self.plans = traced, plans
        self.backend = traced.owner.backend
        self._report = None
        self._verified = None          # compile()'s plans

    @property
    def graph(self) -> PimGraph:
        return self.traced.graph

    def as_text(self) -> str:
        """Per op: placement on the predicted figures and why, the predicted
        best draft and its predicted cycles."""
        return plans_text(self.graph, self.backend, self.plans)

    @_eager
    def report(self):
        """The per-op and total report on the *predicted* figures
        (`pimjax.report.Report`, `figures == "predicted"`)."""
        return _stage_report(self, "predicted")

    def cost_analysis(self) -> dict:
        """The predicted figures, in the schema of the module docstring
        (`"figures": "predicted"`).

        The cost model predicts a program that rearranges every operand per
        call (it is trained on such programs): with `resident` weights the
        prediction overstates the steady state; `Compiled.cost_analysis()`
        gives the simulated figures with the placement paid once."""
        return self.report().to_dict()

    @_eager
    def compile(self) -> "Compiled":
        """The search: lower the candidates of every op, simulate them, keep
        the fastest and place each op on the simulated figures.  Done once
        per `Lowered`: a second call reuses the verified plans."""
        if self._verified is None:
            owner = self.traced.owner
            self._verified = verify_plans(self.graph, self.backend, owner.tuner, self.plans, owner.placement)
        return Compiled(self, self._verified)


class Compiled:
    """Executable for fixed argument shapes: the verified plans (`.plans`,
    programs included), `.report()`, `.cost_analysis()` (simulated figures)."""

    def __init__(self, lowered: Lowered, plans: list[OpPlan] | None = None):
        self.lowered = lowered
        self.graph = lowered.graph
        self.backend = lowered.backend
        owner = lowered.traced.owner
        self.plans = plans if plans is not None else verify_plans(
            self.graph, self.backend, owner.tuner, lowered.plans, owner.placement)
        self._report = None
        # {op index: conversion in words} of the PIM ops, refused or warned once (`pimjax.precision`);
        # {op index: what a call's values lost}, filled by calls
        self.conversions = _conversions(self.graph, self.plans, self.backend, owner)
        self.saturation: dict[int, str] = {}
        # reads of each value by host ops and as an output: a numpy argument that one host op
        # reads goes to the device inside `host_op` (its copy freed there); one that several
        # read, once per call in `__call__`.  Fixed by the plans, so counted once here.
        uses: dict[int, int] = {}
        for p in self.plans:
            if p.placement not in ("fused", "pim"):
                for a in p.op.operands:
                    uses[a.value] = uses.get(a.value, 0) + 1
        for v in self.graph.outputs:
            uses[v] = uses.get(v, 0) + 1
        self._host_uses = uses

    def _check(self, args):
        """The argument leaves, or a TypeError naming every argument whose
        shape or dtype differs from the compiled ones (as a jax `Compiled`
        does; dtypes compared after jax's canonicalisation, so a float64
        numpy array passes for float32 when x64 is off)."""
        leaves, tree = jax.tree_util.tree_flatten(args)
        ins = self.graph.inputs
        if len(leaves) != len(ins):
            raise TypeError(f"compiled for {len(ins)} array arguments, got {len(leaves)}")
        expected = self.lowered.traced.in_tree
        if expected is not None and tree != expected:
            raise TypeError(f"compiled for arguments of structure {expected}, got {tree}")
        bad = []
        for vid, leaf in zip(ins, leaves):
            info = self.graph.values[vid]
            shape = tuple(np.shape(leaf))
            dtype = _canonical_dtype(leaf)
            if shape != tuple(info.shape) or dtype != info.dtype:
                bad.append(f"argument {info.name}: compiled for {info.dtype}{list(info.shape)}, "
                           f"got {dtype}{list(shape)}")
        if bad:
            raise TypeError("; ".join(bad))
        return leaves

    def __call__(self, *args, **kwargs):
        owner = self.lowered.traced.owner
        args = _positional(owner.fn, args, kwargs)
        leaves = self._check(args)
        if any(isinstance(x, jax.core.Tracer) for x in leaves):     # under jit / vmap / grad
            return _transformed_call(owner, leaves, jax.tree_util.tree_structure(args), self)
        graph = self.graph
        # numpy arguments stay numpy until a host op needs them: the PIM
        # executors read operands on the host side (a gather into bank
        # memory), so copying a 64 MB weight matrix into a jax array first
        # (3 ms) would be pure overhead
        env = {vid: _argument(leaf, graph.values[vid].dtype) for vid, leaf in zip(graph.inputs, leaves)}
        for vid, c in graph.constants.items():
            env[vid] = jnp.asarray(c)

        uses = self._host_uses

        def on_device(vid):
            if not isinstance(env[vid], jax.Array):
                env[vid] = to_device(env[vid])       # once per value, shared by later host ops
            return env[vid]
        for p in sorted(self.plans, key=lambda q: q.index):
            if p.placement == "fused":          # computed by its block's program
                continue
            if p.placement == "md-dp":          # PIMFlow's split: the GPU's rows and PIM's at once
                operands = [on_device(a.value) for a in p.op.operands]
                full = host_op(graph, p.op, operands)[0]
                info = graph.values[p.op.result.value]
                out = run_split(p.split, p.op, operands, full)
                # its PIM rows ran in the units' type too: checked like a PIM op's (fuzz seed 10267: an
                # fp16 result past 65504 on newton's bf16 units came back inf, unflagged); the whole
                # operands are scanned, the GPU's rows included (a superset: never silent)
                self._check_values(p, p.op, operands, out)
                env[p.op.result.value] = jnp.asarray(out).astype(info.dtype)
                continue
            if p.placement == "pim":
                fused = p.program.op             # the block's fused op for attention blocks
                operands = [env[a.value] for a in fused.operands]
                out = execute(p.program, *operands, arithmetic="backend")
                self._check_values(p, fused, operands, out)
                info = graph.values[fused.result.value]
                env[fused.result.value] = jnp.asarray(out).astype(info.dtype).reshape(info.shape)
            else:
                operands = [env[a.value] if uses[a.value] == 1 else on_device(a.value) for a in p.op.operands]
                for r, val in zip(p.op.results, host_op(graph, p.op, operands)):
                    env[r.value] = val
        outs = [on_device(v) for v in graph.outputs]
        if graph.out_tree is None:
            return outs[0] if len(outs) == 1 else tuple(outs)
        return jax.tree_util.tree_unflatten(graph.out_tree, outs)

    def _check_values(self, p: OpPlan, op: PimOp, operands: list, out) -> None:
        """Warn (PrecisionWarning) and record in the report's `saturation` what
        the units' type did to one PIM op's values this call (`check_values`)."""
        unit = unit_dtype(self.backend)
        if unit is None or any(isinstance(a, jax.core.Tracer) for a in [out, *operands]):
            return                      # values staged into a trace are checked when they run
        checks = self.__dict__.setdefault("_operand_checks", OperandChecks())
        events = check_values(operands, out, unit, checks=checks,
                              reference=lambda: evaluate_op(self.graph, op, [jnp.asarray(a) for a in operands])[0])
        if not events:
            return
        # distinct findings of every call so far (the latest last, at most 8)
        seen = [e for e in self.saturation.get(p.index, "").split(" | ") if e]
        text = " | ".join(([e for e in seen if e != "; ".join(events)] + ["; ".join(events)])[-8:])
        self.saturation[p.index] = text
        if self._report is not None:
            self._report.ops[[o.index for o in self._report.ops].index(p.index)].saturation = text
        warnings.warn(f"pim_jit({getattr(self.lowered.traced.owner.fn, '__name__', 'fn')}): "
                      f"{op.name} at {op.source or '?'} on {self.backend.name}: {'; '.join(events)}",
                      PrecisionWarning, stacklevel=user_stacklevel())

    @_eager
    def report(self):
        """The per-op and total report on the *simulated* figures
        (`pimjax.report.Report`, `figures == "simulated"`)."""
        return _stage_report(self, "simulated")

    def cost_analysis(self) -> dict:
        """The simulated figures, in the schema of the module docstring
        (`"figures": "simulated"`)."""
        return self.report().to_dict()

    def as_text(self) -> str:
        """The chosen drafts and their programs, and the simulated report."""
        return plans_text(self.graph, self.backend, self.plans) + "\n\n" + self.report().as_text()


def _conversions(graph: PimGraph, plans: list, backend: Backend, owner: PimFunction) -> dict[int, str]:
    """{op index: conversion} of the PIM-placed plans whose data is wider than
    the units (`precision.conversion`); precision="strict" refuses the first
    with a PimCompileError, "convert" warns once, naming them all."""
    out = {}
    for p in plans:
        if p.placement not in ("pim", "md-dp"):      # an md-dp op's PIM part converts as well
            continue
        op = p.program.op if p.program is not None else p.op
        conv = conversion(op_dtypes(graph, op), backend)
        if not conv:
            continue
        if owner.precision == "strict":
            wide, unit = conv.split(" -> ")
            refuse(p.op, backend, f"precision='strict': its {wide} data would run converted to {unit} on "
                                   f"the PIM units (cast it to {unit} yourself, or pass precision='convert')")
        out[p.index] = conv
    if out:
        name = getattr(owner.fn, "__name__", "fn")
        ops = ", ".join(f"{graph.ops[i].name} at {graph.ops[i].source or '?'} ({c})" for i, c in out.items())
        unit = unit_dtype(backend)
        bits = significant_bits(unit)
        # the range is checked per call; the precision cannot be: a sum whose terms cancel keeps an
        # error relative to its terms, not to its result (fuzz seed 38502: fp16 terms of 8.4e6 summing
        # to -2 749 in jax came to +3 456 on bf16 units), so the warning states it
        warnings.warn(f"pim_jit({name}) on {backend.name} runs {len(out)} op(s) on data converted to the "
                      f"units' type: {ops}. Values beyond its range become inf or 0 on PIM (checked per call: "
                      f"report 'saturation'), and every value keeps {unit}'s {bits} significant bits, so a "
                      "sum whose terms cancel is exact only to that precision of its terms; "
                      "precision='strict' refuses conversions", PrecisionWarning, stacklevel=user_stacklevel())
    return out


# --- transforms: pim_jit inside jax.jit / jax.vmap / jax.grad -----------------------------

def _check_array_leaves(owner: PimFunction, args: tuple):
    """A TypeError naming pim_jit and the argument for a leaf that is not an
    array (a string, an object): pim_jit traces every leaf as an array."""
    for path, leaf in jax.tree_util.tree_flatten_with_path(args)[0]:
        if isinstance(leaf, (jax.Array, np.ndarray, np.generic, bool, int, float, complex,
                             jax.core.Tracer, jax.ShapeDtypeStruct)):
            continue
        if hasattr(leaf, "shape") and hasattr(leaf, "dtype"):
            continue
        where = "args" + jax.tree_util.keystr(path)
        raise TypeError(f"pim_jit({getattr(owner.fn, '__name__', 'fn')}): argument {where} is a "
                        f"{type(leaf).__name__}, not an array; pim_jit traces every argument leaf as an "
                        f"array ({_leaf_hint(leaf, args[path[0].idx] if path else None)})")


def _leaf_hint(leaf, arg) -> str:
    """How to pass what a non-array leaf holds: a function (an activation in
    an equinox Module) is closed over or filtered out, a static value closed over."""
    if not callable(leaf):
        return "close over static values instead"
    hint = ("a function is not an array: close over it (pim_jit(lambda x: model(x))) or pass only the "
            "arrays")
    if any(c.__module__.split(".")[0] == "equinox" for c in type(arg).__mro__):      # an eqx.Module
        hint += (f"; for this equinox {type(arg).__name__}: arrays, static = eqx.partition(model, "
                 "eqx.is_array) and pim_jit(lambda arrays, x: eqx.combine(arrays, static)(x))(arrays, x), "
                 "or eqx.filter(model, eqx.is_array)")
    return hint


def _abstract(leaf) -> jax.ShapeDtypeStruct:
    """An argument leaf (tracer, array, Python scalar) as the ShapeDtypeStruct
    jax would trace it with (canonical dtype, weak type kept)."""
    if isinstance(leaf, jax.core.Tracer):
        aval = leaf.aval
        return jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=aval.weak_type)
    shape, dtype, weak = _leaf_signature(leaf)
    return jax.ShapeDtypeStruct(shape, jax.dtypes.canonicalize_dtype(dtype), weak_type=weak)


def _result_avals(compiled: "Compiled"):
    """The outputs of a Compiled as ShapeDtypeStructs, in its output pytree."""
    g = compiled.graph
    outs = [jax.ShapeDtypeStruct(tuple(g.values[v].shape), jnp.dtype(g.values[v].dtype)) for v in g.outputs]
    if g.out_tree is None:
        return outs[0] if len(outs) == 1 else tuple(outs)
    return jax.tree_util.tree_unflatten(g.out_tree, outs)


def _traces(leaves) -> set:
    """Names of the trace classes among the argument leaves' tracers and
    their parents (JVPTrace: forward-mode autodiff; LinearizeTrace: reverse
    mode; BatchTrace: vmap; DynamicJaxprTrace: jit)."""
    out = set()
    for x in leaves:
        t = getattr(x, "_trace", None)
        while t is not None:
            out.add(type(t).__name__)
            t = getattr(t, "parent_trace", None)
    return out


def _transformed_call(owner: PimFunction, leaves: list, tree, compiled: "Compiled | None" = None):
    """A call whose arguments hold tracers: compile for their shapes (unless
    `compiled` is given) and run the compiled PIM programs through
    `_composable` (see the module docstring).  Under jax.vmap the compile
    for the per-example shapes waits until a program of those shapes runs
    (usually never: the vmap rule compiles for the batched shapes)."""
    traces = _traces(leaves)
    if compiled is not None:
        runners = compiled.__dict__.setdefault("_composed", {})
        key, get = None, (lambda: compiled)
    else:
        avals = jax.tree_util.tree_unflatten(tree, [_abstract(x) for x in leaves])
        runners = owner._composed
        key = (tree, tuple(_leaf_signature(a) for a in jax.tree_util.tree_leaves(avals)))
        get = lambda: owner._compile_for(avals)   # noqa: E731
        if "BatchTrace" not in traces:
            compiled = get()                       # compile now: errors at the call, not in a callback
    run = runners.get(key)
    if run is None:
        # result shapes: the graph's outputs, or jax.eval_shape while not compiled
        outs = (_result_avals(compiled) if compiled is not None else
                jax.eval_shape(owner.fn, *jax.tree_util.tree_unflatten(tree, [_abstract(x) for x in leaves])))
        if len(runners) >= owner.COMPILES_KEPT:          # bounded as the compiles are
            del runners[next(iter(runners))]
        run = runners[key] = _composable(owner, tree, get, outs)
    return run(*leaves)


def _composable(owner: PimFunction, tree, get_compiled: Callable, out_avals):
    """The compiled function as a jax-composable callable of the flat
    argument leaves:

    * values: `jax.pure_callback` runs `get_compiled()` (the PIM programs)
      on the host, results shaped by `out_avals`;
    * `jax.vmap`: a `custom_vmap` rule calls `owner.vmapped(...)`, the
      pim_jit of `jax.vmap(fn)`: the batch is part of the traced shapes;
    * autodiff: a `custom_jvp` whose primal is the PIM run and whose
      tangents are `jax.jvp` of the user's function run with jax (the jnp
      reference).  Those tangents are linear and transposable, so reverse
      mode (jax.grad / vjp / jacrev: the vjp of the jnp reference at the
      inputs), forward mode (jvp / jacfwd / hessian) and jax.linearize all
      work, the primal on PIM."""
    def reference(*xs):
        return owner.fn(*jax.tree_util.tree_unflatten(tree, xs))

    def callback(*xs):
        return get_compiled()(*jax.tree_util.tree_unflatten(tree, xs))

    @jax.custom_batching.custom_vmap
    def run(*xs):
        return jax.pure_callback(callback, out_avals, *xs)

    @run.def_vmap
    def run_batched(_axis_size, in_batched, *xs):
        batched = owner.vmapped(jax.tree_util.tree_unflatten(tree, list(in_batched)))
        out = batched(*jax.tree_util.tree_unflatten(tree, xs))
        return out, jax.tree_util.tree_map(lambda _: True, out)

    @jax.custom_jvp
    def call(*xs):
        return run(*xs)

    @call.defjvp
    def jvp(primals, tangents):
        # the primal through `call` again: under a further forward-mode trace
        # (jax.hessian's outer jacfwd) it is one more custom_jvp call
        return call(*primals), jax.jvp(reference, primals, tangents)[1]
    return call


def _leaf_signature(x) -> tuple:
    """(shape, dtype, weak) of an argument leaf: what its trace depends on.
    Weak types matter as in jax: `f(x16, 2.0)` promotes to float16,
    `f(x16, np.float32(2))` to float32, so they are different compiles."""
    if isinstance(x, (bool, int, float, complex)):           # Python scalars are weakly typed
        return ((), str(jnp.asarray(x).dtype), True)
    if hasattr(x, "dtype"):
        return (tuple(np.shape(x)), str(x.dtype), bool(getattr(x, "weak_type", False)))
    return (tuple(np.shape(x)), str(jnp.asarray(x).dtype), False)


def _canonical_dtype(leaf) -> str:
    """The dtype name jax gives an argument leaf (float64 -> float32 with x64
    off; PRNG key dtypes by name)."""
    dtype = getattr(leaf, "dtype", None)
    if dtype is None:
        dtype = jnp.asarray(leaf).dtype
    if jnp.issubdtype(dtype, jax.dtypes.extended):
        return dtype_name(dtype)
    return dtype_name(jax.dtypes.canonicalize_dtype(dtype))


def host_op(graph: PimGraph, op: PimOp, operands: list) -> list:
    """Results of a host-placed op (`evaluate_op`), its numpy operands first
    copied to the device (`to_device`); those copies are dropped when it
    returns."""
    return evaluate_op(graph, op, [a if isinstance(a, jax.Array) else to_device(a) for a in operands])


def to_device(value: np.ndarray) -> jax.Array:
    """A numpy argument as a jax array for a host op (the host-to-device copy
    `jax.jit` makes of numpy arguments too).  `jax.device_put` copies once:
    `jnp.asarray` took 55-75 ms on a 64 MB matrix where it takes 30-39 ms
    (this VM's page faults make every fresh 64 MB buffer cost tens of ms);
    a pim_jit call of a host-placed GEMV 4096^2 with numpy arguments went
    from 52-68 ms to 37-42 ms (jax.jit: 34 ms).  What it leaves on the
    calling thread is freeing the copy at return, 5-7 ms for 64 MB."""
    return jax.device_put(value)


def _argument(leaf, dtype):
    """An argument leaf as the compiled input's dtype: jax arrays as jax
    arrays, anything else as a numpy array (no copy when the dtype already
    matches)."""
    if isinstance(leaf, jax.Array):
        return leaf if dtype_name(leaf.dtype) == dtype else leaf.astype(dtype)
    return np.asarray(leaf, dtype)


__all__ = ["pim_jit", "enable_xla_cache", "PimFunction", "Traced", "Lowered", "Compiled", "OpPlan"]
