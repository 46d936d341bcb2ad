"""Hand-built PimOps and small test backends for the partitioner tests
(independent of the jaxpr frontend and the presets)."""
import dataclasses

from pimjax.hw.core import Backend, Core, Energy, Group, HostModel, System, Timing
from pimjax.trace.affine import AffineExpr as A
from pimjax.trace.ir import Access, Arg, LoopVar, PimOp, Prim

V = A.var


def contraction(extents: dict, operands, result, reduction):
    """A mul-add contraction; operands/result as tuples of AffineExpr."""
    return PimOp("dot_general", "contraction", tuple(LoopVar(n, e) for n, e in extents.items()),
                 tuple(Access(k, m) for k, m in enumerate(operands)),
                 (Access(len(operands), result),), tuple(reduction), "add",
                 Prim("mul", (Arg(0), Arg(1))))


def gemv(M, N):
    return contraction({"i": M, "k": N}, [(V("i"), V("k")), (V("k"),)], (V("i"),), ["k"])


def mmtv(B, H, L, D):
    return contraction({"b": B, "h": H, "n": L, "d": D},
                       [(V("b"), V("h"), V("d")), (V("b"), V("h"), V("n"), V("d"))],
                       (V("b"), V("h"), V("n")), ["d"])


def conv1d(W, F, K, C, stride=1):
    """out[w, f] = sum_{kw, c} x[stride*w + kw, c] * k[kw, c, f]."""
    return contraction({"w": W, "f": F, "kw": K, "c": C},
                       [(A.linear({"w": stride, "kw": 1}), V("c")), (V("kw"), V("c"), V("f"))],
                       (V("w"), V("f")), ["kw", "c"])


def conv2d(H, W, C, F, K):
    return contraction({"h": H, "w": W, "f": F, "kh": K, "kw": K, "c": C},
                       [(A.linear({"h": 1, "kh": 1}), A.linear({"w": 1, "kw": 1}), V("c")),
                        (V("kh"), V("kw"), V("c"), V("f"))],
                       (V("h"), V("w"), V("f")), ["kh", "kw", "c"])


def vadd(N):
    return PimOp("add", "elementwise", (LoopVar("i", N),), (Access(0, (V("i"),)), Access(1, (V("i"),))),
                 (Access(2, (V("i"),)),), body=Prim("add", (Arg(0), Arg(1))))


def rowsum(M, N):
    return PimOp("reduce_sum", "reduction", (LoopVar("i", M), LoopVar("k", N)),
                 (Access(0, (V("i"), V("k"))),), (Access(1, (V("i"),)),), ("k",), "add", Arg(0))


def backend(groups=4, cores=4, lanes=16, regs=8, accumulator=False, broadcast=True,
            rows=16384, tasklets=1, scratchpad=0, dtype="float16", name="test"):
    host = HostModel("host", 1e12, 1e11, 1.0, 1.0, 0.0, 0)
    names = [f.name for f in dataclasses.fields(Timing)][:23]
    t = Timing(**{**dict.fromkeys(names, 1.0), "tREFI": 1000.0})   # unit timings; a refresh fits its interval
    units = ("accumulator",) if accumulator else ()
    return Backend(name, "default", System(host, 1, groups, 16.0),
                   Group(cores, units, broadcast, bank_groups=1, banks_per_bank_group=cores),
                   Core(1, lanes, dtype, regs, regs, 32, frozenset({"add", "mul", "mac", "max", "relu", "mov"}),
                        rows, 32, 32, scratchpad_bytes=scratchpad, tasklets=tasklets),
                   t, Energy())
