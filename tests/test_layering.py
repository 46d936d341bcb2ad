"""The package's imports run one way (issue 42): trace -> partition -> lower / backends -> sim ->
costmodel -> search -> plan -> api / report -> studies.

Read from the source with `ast` (nothing is imported), every import counts: module level,
function-local (a function-local import is how a cycle hides) and under `TYPE_CHECKING`.  A
"unit" is a subpackage of `pimjax` or a top-level module (`api.py`); an import goes from the
unit of the importing file to the unit it names.
"""
from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "pimjax"

# bottom first; a unit may import its own layer and the layers below.  "lower" and "backends"
# share a layer (the lowering dispatches to the families, the families use its helpers), as do
# "api" and "report" (the stages build reports)
LAYERS = (
    ("errors", "hw", "models", "precision", "durable"),   # no pimjax imports but each other's: data, plain jnp, files
    ("trace",),
    ("kernels",),                               # the op corpus, traced
    ("partition",),
    ("lower", "backends"),
    ("sim",),
    ("costmodel",),
    ("search",),
    ("plan",),
    ("api", "report"),
    ("demo", "studies", "testing"),             # testing: the differential fuzzer over pim_jit
)
LAYER = {u: i for i, units in enumerate(LAYERS) for u in units}
SHARED_LAYER_CYCLES = ({"lower", "backends"},)

# upward imports that exist today, each (importing module, imported module): the families'
# simulators use the generic simulator's engines and tables (issue 42 deliverable 2, the one
# timing engine, removes them).  An entry that no longer exists fails `test_known_exceptions_exist`,
# so the list only shrinks.
KNOWN_UPWARD = {
    ("pimjax.backends.attacc.execute", "pimjax.sim.padding"),
    ("pimjax.backends.hbm_pim.execute", "pimjax.sim.padding"),
    ("pimjax.backends.newton.execute", "pimjax.sim.padding"),
    ("pimjax.backends.newton.fork", "pimjax.sim.native"),
    ("pimjax.backends.newton.packed", "pimjax.sim.cycles"),
    ("pimjax.backends.newton.packed", "pimjax.sim.native"),
    ("pimjax.backends.newton.reference", "pimjax.sim.cycles"),
    ("pimjax.backends.upmem.cycles", "pimjax.sim.engines"),
    ("pimjax.backends.upmem.cycles", "pimjax.sim.report"),
}
# private names imported from another unit today (importing module, imported module, name)
KNOWN_PRIVATE = {
    ("pimjax.backends.newton.fork", "pimjax.sim.native", "_latencies"),
    ("pimjax.backends.newton.packed", "pimjax.sim.cycles", "_timing_vector"),
}


def unit(module: str) -> str:
    """The unit of a dotted module name ("pimjax.plan.mixed" -> "plan"); "" for `pimjax` itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def is_module(dotted: str) -> bool:
    """Whether a dotted name under pimjax is a module or package of the source tree."""
    path = ROOT.parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imports() -> list[tuple[str, str, tuple, int, str]]:
    """(importing module, imported module, names imported from it, line, file) of every import
    of a pimjax module anywhere in the package's source."""
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        parts = ["pimjax", *path.relative_to(ROOT).with_suffix("").parts]
        package = parts[:-1]                 # what a relative import starts from
        me = ".".join(parts if parts[-1] != "__init__" else parts[:-1])
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                out += [(me, a.name, (), node.lineno, str(path)) for a in node.names
                        if a.name.split(".")[0] == "pimjax"]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[:len(package) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                elif node.module and node.module.split(".")[0] == "pimjax":
                    target = node.module
                else:
                    continue
                # `from pimjax.plan import mixed`: the module; `from .plans import OpPlan`: the module named
                by_target: dict[str, list] = {}
                for a in node.names:
                    sub = f"{target}.{a.name}"
                    by_target.setdefault(sub if is_module(sub) else target, []).append(a.name)
                out += [(me, t, tuple(ns), node.lineno, str(path)) for t, ns in by_target.items()]
    return out


IMPORTS = imports()


def test_the_walk_sees_the_known_imports():
    """The AST walk finds module-level, function-local and relative imports (else every other
    test here would pass on nothing)."""
    pairs = {(a, b) for a, b, *_ in IMPORTS}
    assert ("pimjax.api", "pimjax.plan.placement") in pairs                   # module level, relative
    assert ("pimjax.api", "pimjax.report") in pairs                           # function-local
    assert ("pimjax.plan.mixed", "pimjax.search.mixed") in pairs              # two dots
    assert ("pimjax.studies.serving.costs", "pimjax.api") in pairs            # three dots, in a function


def test_every_unit_has_a_layer():
    units = {p.stem if p.is_file() else p.name for p in ROOT.iterdir()
             if (p.suffix == ".py" and p.stem != "__init__") or (p.is_dir() and (p / "__init__.py").exists())}
    assert units - set(LAYER) == set(), "place the new unit in LAYERS"
    assert set(LAYER) - units == set(), "LAYERS names a unit that no longer exists"


def test_imports_run_one_way():
    bad = []
    for me, target, _, line, path in IMPORTS:
        a, b = unit(me), unit(target)
        if a and not b:             # the package root re-exports every layer: importing it hides the dependency
            bad.append(f"{path}:{line}: {me} imports the package root ({target}); import the module that owns it")
        if a and b and a != b and LAYER[b] > LAYER[a] and (me, target) not in KNOWN_UPWARD:
            bad.append(f"{path}:{line}: {me} ({a}, layer {LAYER[a]}) imports {target} ({b}, layer {LAYER[b]})")
    assert not bad, "imports against the layering:\n" + "\n".join(bad)


def test_no_package_cycle():
    """Without the known upward imports the unit graph has no cycle but the one a shared layer
    declares (strongly connected components by Tarjan's algorithm)."""
    graph: dict[str, set] = {}
    for me, target, _, _, _ in IMPORTS:
        a, b = unit(me), unit(target)
        if a and b and a != b and (me, target) not in KNOWN_UPWARD:
            graph.setdefault(a, set()).add(b)
    index, low, stack, on, sccs = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            sccs.append(comp)
    for v in list(graph):
        if v not in index:
            visit(v)
    cycles = [c for c in sccs if len(c) > 1 and c not in SHARED_LAYER_CYCLES]
    assert not cycles, f"package cycles: {cycles}"


def test_no_private_name_crosses_units():
    bad = []
    for me, target, names, line, path in IMPORTS:
        if unit(me) == unit(target):
            continue
        bad += [f"{path}:{line}: {me} imports {target}.{n}" for n in names
                if n.startswith("_") and (me, target, n) not in KNOWN_PRIVATE]
    assert not bad, "private names imported across units (give them a public owner):\n" + "\n".join(bad)


@pytest.mark.parametrize("known", sorted(KNOWN_UPWARD) + sorted(KNOWN_PRIVATE), ids=str)
def test_known_exceptions_exist(known):
    """Each listed exception is still in the source: a fixed one is taken off the list."""
    if len(known) == 2:
        assert any((me, target) == known for me, target, *_ in IMPORTS)
    else:
        assert any((me, target) == known[:2] and known[2] in names for me, target, names, *_ in IMPORTS)


def test_models_are_plain_jnp():
    """`pimjax.models` imports no other part of pimjax (the studies import the compiler)."""
    assert not [(me, target) for me, target, *_ in IMPORTS
                if unit(me) == "models" and unit(target) not in ("models", "")]
