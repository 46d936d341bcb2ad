"""DCC's tiling notation ``[[g, c, t], ...]`` and its power-of-two rounding.

One triple per kernel dimension (``src/generate_configs.py`` l.43, l.93): ``g`` groups (= channels) along
that dimension, ``c`` cores per group (= banks) along it, ``t`` the per-core chunk (elements).  The
dimensions are, for GEMV, ``[batch*heads, input (d_head), output (seq_len)]`` from the shape
``(batch, heads, d_head, seq_len)`` (l.123); for RED and VA ``[batch, length]`` from ``(batch, length)``
(l.101).  Every generator first applies ``match_alignment`` (l.147-163): each ``g`` / ``c`` is rounded up to
a power of two when the result is <= 16 / <= 64; ``t`` is not recomputed, and AttAcc's two baseline shapes
are exempt.

DCC = SPIN-Research-Group/DCC @ 7ffb80e4f33e357177dc8ab148953c0484e1e322.  No timing here (no cycles).
"""

#: (backend, kernel) pairs the artifact has generators for -> number of triples / shape entries
KERNELS = {("attacc", "gemv"): (3, 4), ("attacc", "red"): (2, 2),
           ("hbmpim", "gemv"): (3, 4), ("hbmpim", "red"): (2, 2), ("hbmpim", "va"): (2, 2)}


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
    """The dimensions the triples tile, in elements: GEMV ``[batch*heads, d_head, seq_len]`` from
    ``(batch, heads, d_head, seq_len)``; RED / VA ``[batch, length]`` from ``(batch, length)``."""
    s = [int(x) for x in shape]
    return [s[0] * s[1], s[2], s[3]] if kernel == "gemv" else s


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
                         f"({'batch, heads, d_head, seq_len' if kernel == 'gemv' else 'batch, length'}), got {shape}")
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
