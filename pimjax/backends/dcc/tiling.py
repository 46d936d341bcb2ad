"""DCC's tiling notation ``[[g, c, t], ...]`` and its power-of-two rounding.

One triple per kernel dimension (``src/generate_configs.py`` l.43, l.93): ``g`` groups (= channels) along
that dimension, ``c`` cores per group (= banks) along it, ``t`` the per-core chunk (elements).  The
dimensions are, for GEMV, ``[batch*heads, input (d_head), output (seq_len)]`` from the shape
``(batch, heads, d_head, seq_len)`` (l.123); for RED and VA ``[batch, length]`` from ``(batch, length)``
(l.101).  Every generator first applies ``match_alignment`` (l.147-163): each ``g`` / ``c`` is rounded up to
a power of two when the result is <= 16 / <= 64; ``t`` is not recomputed, and AttAcc's two baseline shapes
are exempt.

``to_draft`` / ``from_draft`` turn a DCC tiling into a pimjax ``Draft`` of the matching pimjax kernel and
back, and ``lower_tiling`` lowers it with pimjax (issue 51, deliverable 1); they import pimjax's
``partition`` / ``lower`` when called, the rest of the module and of the port is standard library only.

DCC = SPIN-Research-Group/DCC @ 7ffb80e4f33e357177dc8ab148953c0484e1e322.  No timing here (no cycles).
"""
import math

#: (backend, kernel) pairs the artifact has generators for -> number of triples / shape entries
KERNELS = {("attacc", "gemv"): (3, 4), ("attacc", "red"): (2, 2),
           ("hbmpim", "gemv"): (3, 4), ("hbmpim", "red"): (2, 2), ("hbmpim", "va"): (2, 2),
           # the fused attention (score, softmax, context): Fig. 6's "kernel" and Fig. 8's "inference" mode
           ("attacc", "attn"): (3, 4), ("attacc", "attn_inference"): (3, 4)}
#: kernels whose triples tile [batch*heads, d_head, seq_len] (from a (batch, heads, d_head, seq_len) shape)
MATRIX_KERNELS = ("gemv", "attn", "attn_inference")


def match_alignment(Tl):
    """``generate_configs.py`` l.147-163, in place like the original: round every g (c) up to a power of
    two if the result is <= 16 (<= 64); the baselines ``[[16,1,t],[1,4,t],[1,16,t]]`` and
    ``[[16,1,t],[1,64,t]]`` (and any tiling of that shape) are returned unchanged.  Returns ``Tl``."""
    if len(Tl) == 3:
        if Tl[0][1] == 1 and Tl[1][0] == 1 and Tl[1][1] == 4 and Tl[2][0] == 1 and Tl[2][1] == 16:
            return Tl
    elif len(Tl) == 2:
        if Tl[0][1] == 1 and Tl[1][0] == 1 and Tl[1][1] == 64:
            return Tl
    limit = [16, 64]
    for i in range(len(Tl)):
        for j in range(2):
            v = Tl[i][j]
            v = 1 << (v - 1).bit_length() if v > 1 else 1
            if v <= limit[j]:
                Tl[i][j] = v
    return Tl


def wraps(tiling):
    """True when ``match_alignment`` makes the trace address > 16 channels or > 64 banks per channel, so
    that several logical channels / bank ranges land on one physical channel (unequal loads; the
    channels then interact through the shared in-order frontend)."""
    t = match_alignment([list(x) for x in tiling])
    g = c = 1
    for x in t:
        g *= x[0]; c *= x[1]
    return g > 16 or c > 64


def kernel_dims(kernel, shape):
    """The dimensions the triples tile, in elements: GEMV / ATTN ``[batch*heads, d_head, seq_len]`` from
    ``(batch, heads, d_head, seq_len)``; RED / VA ``[batch, length]`` from ``(batch, length)``."""
    s = [int(x) for x in shape]
    return [s[0] * s[1], s[2], s[3]] if kernel in MATRIX_KERNELS else s


def validate(backend, kernel, shape, tiling):
    """Check a (backend, kernel, shape, tiling) the artifact could simulate; returns the tiling as a list
    of ``[g, c, t]`` int lists.  Raises ``ValueError`` saying why not: a backend/kernel pair without a
    generator (e.g. VA on AttAcc), a shape or tiling of the wrong length, a non-positive or non-integer
    entry, more than 16 groups or 64 cores in all, or a tiling whose ``g*c*t`` does not cover a dimension."""
    key = (backend, kernel)
    if key not in KERNELS:
        have = ", ".join(f"{b}/{k}" for b, k in KERNELS)
        raise ValueError(f"DCC's artifact has no trace generator for {backend}/{kernel} (it has {have})")
    n_trip, n_shape = KERNELS[key]
    try:
        shape = [int(x) for x in shape]
    except (TypeError, ValueError):
        raise ValueError(f"shape {shape!r} is not a sequence of integers") from None
    if len(shape) != n_shape:
        raise ValueError(f"{kernel} takes a shape of {n_shape} entries "
                         f"({'batch, heads, d_head, seq_len' if kernel in MATRIX_KERNELS else 'batch, length'}), got {shape}")
    if any(x <= 0 for x in shape):
        raise ValueError(f"shape {shape} has a non-positive entry")
    try:
        trip = [list(x) for x in tiling]
    except TypeError:
        raise ValueError(f"tiling {tiling!r} is not a list of [g, c, t] triples") from None
    if len(trip) != n_trip:
        raise ValueError(f"{backend}/{kernel} takes {n_trip} [g, c, t] triples (one per dimension), "
                         f"got {len(trip)}: {tiling!r}")
    for i, x in enumerate(trip):
        if len(x) != 3:
            raise ValueError(f"triple {i} of {tiling!r} has {len(x)} entries, not 3 (g groups, c cores, t chunk)")
        for name, v in zip("gct", x):
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"triple {i} of {tiling!r}: {name} = {v!r} is not an integer")
            if v <= 0:
                raise ValueError(f"triple {i} of {tiling!r}: {name} = {v} must be positive")
    G = C = 1
    for g, c, _ in trip:
        G *= g; C *= c
    if G > 16 or C > 64:
        raise ValueError(f"tiling {tiling!r} uses {G} groups x {C} cores; DCC's search keeps "
                         f"prod(g) <= 16 channels and prod(c) <= 64 banks per channel")
    for i, ((g, c, t), d) in enumerate(zip(trip, kernel_dims(kernel, shape))):
        if g * c * t < d:
            raise ValueError(f"triple {i} {[g, c, t]} covers {g * c * t} < {d} elements of dimension {i}")
    return trip


# ----------------------------------------------------------------------------------------------
# DCC's tiling <-> a pimjax Draft (issue 51, deliverable 1).  pimjax is imported only here.
# ----------------------------------------------------------------------------------------------
#: DCC kernel -> the pimjax kernel (``pimjax.kernels.FUNCTIONS``) that computes it
PIMJAX_KERNEL = {"gemv": "mmtv", "red": "red", "va": "va"}
#: the pimjax loop variable DCC's 16-element column runs along (its generators: ``n_mac = 16``)
LANE_VAR = {"gemv": "k", "red": "k", "va": "j"}


def _ceil(a, b):
    return -(-a // b)


def pimjax_shape(kernel, shape):
    """The ``pimjax.kernels`` shape of DCC's ``shape``: GEMV ``(batch, heads, d_head, seq_len)`` ->
    mmtv ``[batch, heads, seq_len, d_head]`` (``einsum("bhnd,bhd->bhn")``); RED / VA unchanged."""
    s = [int(x) for x in shape]
    return [s[0], s[1], s[3], s[2]] if kernel == "gemv" else s


def _split_batch_heads(g, c, t, B, H):
    """(DimPart args for b, for h) of DCC's flattened batch*heads triple, or ValueError."""
    if B == 1:
        return (1, 1), (g, c)
    if t % H == 0 or t >= B * H:
        # every chunk holds whole batch elements (t = ceil(B*H/(g*c)) = ceil(B/(g*c))*H): h is not split
        return (g, c), (1, 1)
    if H % t:
        raise ValueError(f"triple 0 [g, c, t] = {[g, c, t]}: a chunk of {t} of batch*heads = {B}*{H} straddles "
                         f"batch elements (t neither divides nor is a multiple of heads = {H}); pimjax tiles batch "
                         f"and heads as separate dimension sets and cannot express it")
    # chunks lie inside one batch element: B batch tiles x H/t head tiles, split over groups and cores
    hb = H // t
    gb = math.gcd(g, B)
    cb = B // gb
    if c % cb or g // gb * (c // cb) != hb:
        raise ValueError(f"triple 0 [g, c, t] = {[g, c, t]}: its {g} groups x {c} cores ({g * c} tiles) do not "
                         f"factor into batch {B} x {hb} head chunks of {t} ({B * hb} tiles) over separate batch and "
                         f"heads dimension sets")
    return (gb, cb), (g // gb, c // cb)


def to_draft(kernel, shape, tiling, backend="hbmpim"):
    """DCC's ``[[g, c, t], ...]`` for ``kernel`` (``"gemv"``, ``"red"``, ``"va"``) at DCC's ``shape`` as a
    ``pimjax.partition.draft.Draft`` of the pimjax op (``PIMJAX_KERNEL[kernel]`` at ``pimjax_shape``), one
    ``DimPart(groups, cores)`` per dimension set in ``dimension_sets`` order: GEMV (mmtv) ``b, h, i (seq),
    k (d_head)``; RED ``i (batch), k (length)``; VA ``i, j``.  DCC's batch*heads triple is split over b and
    h.  ``reduction`` is ``"host"`` when the reduced dimension is split (DCC's traces write every core's
    partial result back and combine nothing on PIM), else ``"complete"``; the SIMD lanes run along the
    reduced dimension (GEMV, RED) or the length (VA), ``LANE_VAR``; the other knobs keep ``Draft``'s
    defaults.  ``t`` is implied: it must be ``ceil(dim / (g*c))``, as in every row of the artifact.

    Raises ``ValueError`` (saying why) for a tiling the artifact cannot run (``validate``) or pimjax will
    not express: a ``t`` other than ``ceil(dim/(g*c))`` (pimjax tiles evenly), ``g*c`` above the
    dimension (empty cores), or a batch*heads chunk that straddles batch elements."""
    from ...partition.draft import DimPart, Draft
    trip = validate(backend, kernel, shape, tiling)
    dims = kernel_dims(kernel, shape)
    for i, ((g, c, t), d) in enumerate(zip(trip, dims)):
        if g * c > d:
            raise ValueError(f"triple {i} {[g, c, t]}: {g * c} cores for {d} elements of dimension {i} (empty cores; "
                             f"DCC's search keeps g*c <= dim)")
        if t != _ceil(d, g * c):
            raise ValueError(f"triple {i} {[g, c, t]}: t = {t} is not ceil({d} / ({g}*{c})) = {_ceil(d, g * c)}; "
                             f"a pimjax Draft tiles a dimension evenly and carries no chunk size")
    if kernel == "gemv":
        s = [int(x) for x in shape]
        (gb, cb), (gh, ch) = _split_batch_heads(*trip[0], s[0], s[1])
        parts = (DimPart(gb, cb), DimPart(gh, ch), DimPart(trip[2][0], trip[2][1]), DimPart(trip[1][0], trip[1][1]))
        reduced = trip[1][0] * trip[1][1] > 1
    else:
        parts = tuple(DimPart(g, c) for g, c, _ in trip)
        reduced = kernel == "red" and trip[1][0] * trip[1][1] > 1
    # the 16 FP16 lanes of a 32-B column run along the reduced dimension (GEMV, RED) or the length (VA)
    return Draft(parts=parts, reduction="host" if reduced else "complete", lane_var=LANE_VAR[kernel])


def from_draft(kernel, shape, draft):
    """The DCC tiling ``[[g, c, t], ...]`` of a pimjax ``Draft`` of ``kernel`` at DCC's ``shape`` (the inverse
    of ``to_draft`` on its image): GEMV's b and h parts merge into the batch*heads triple (groups and
    cores multiply), each ``t = ceil(dim / (g*c))``.  Raises ``ValueError`` for a packed draft, a draft with
    the wrong number of parts, or a non-default representative mapping."""
    if kernel not in PIMJAX_KERNEL:
        raise ValueError(f"DCC's tiling notation covers {sorted(PIMJAX_KERNEL)}, not {kernel!r}")
    if draft.pack:
        raise ValueError("a packed (PIMFlow) draft has no per-dimension tiling")
    want = 4 if kernel == "gemv" else 2
    if len(draft.parts) != want:
        raise ValueError(f"a {kernel} draft has {want} parts (pimjax's dimension sets), got {len(draft.parts)}")
    if any(p.rep for p in draft.parts):
        raise ValueError("DCC tiles each dimension itself: only representative mapping 0 has a DCC tiling")
    p = draft.parts
    gc = [(p[0].groups * p[1].groups, p[0].cores * p[1].cores), (p[3].groups, p[3].cores),
          (p[2].groups, p[2].cores)] if kernel == "gemv" else [(x.groups, x.cores) for x in p]
    return [[g, c, _ceil(d, g * c)] for (g, c), d in zip(gc, kernel_dims(kernel, shape))]


def lower_tiling(kernel, shape, tiling, pimjax_backend, backend="hbmpim"):
    """Lower DCC's ``tiling`` of ``kernel`` at DCC's ``shape`` with pimjax (``pimjax.lower.lower`` of
    ``to_draft``'s draft on ``pimjax_backend``, a ``pimjax.Backend``): a ``pimjax.lower.Program``.
    ``backend`` names the DCC fork whose kernel set applies (``validate``).  Raises ``ValueError`` with
    the reason when pimjax will not lower it (e.g. more cores per group than the backend has: the default
    ``hbm-pim`` has 8 units per pseudo-channel where DCC's cube has 64 banks per channel)."""
    from ...errors import PimCompileError
    from ...kernels import kernel_op
    from ...lower import lower
    draft = to_draft(kernel, shape, tiling, backend)
    op, shapes = kernel_op(PIMJAX_KERNEL[kernel], pimjax_shape(kernel, shape))
    try:
        return lower(op, draft, pimjax_backend, shapes)
    except PimCompileError as err:
        raise ValueError(f"pimjax will not lower DCC tiling {tiling} of {kernel} {list(shape)} on "
                         f"{pimjax_backend.name}: {err}") from err
