"""The package's imports run one way: family registry -> trace -> partition -> lower ->
sim -> backends -> costmodel -> search -> plan -> api / report -> studies.

Read from the source with `ast` (nothing is imported), every import counts: module level,
function-local (a function-local import is how a cycle hides) and under `TYPE_CHECKING`.  A
"unit" is a subpackage of `pimjax` or a top-level module (`api.py`); an import goes from the
unit of the importing file to the unit it names.
"""
from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1] / "pimjax"

# bottom first; a unit may import its own layer and the layers below.  "api" and "report" share a
# layer (the stages build reports).  `family` is the backend-family registry: `lower`, `sim` and
# the cost model dispatch through it, and it finds the family folders (`backends`) by name on
# first use, a plugin registry, so the families sit above the generic engines they use (`sim`).
LAYERS = (
    ("errors", "hw", "models", "precision", "durable", "family"),   # no pimjax imports but each other's
    ("trace",),
    ("kernels",),                               # the op corpus, traced
    ("partition",),
    ("lower",),
    ("sim",),
    ("backends",),
    ("costmodel",),
    ("search",),
    ("plan",),
    ("api", "report"),
    ("demo", "studies", "testing"),             # testing: the differential fuzzer over pim_jit
)
LAYER = {u: i for i, units in enumerate(LAYERS) for u in units}


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
        if a and b and a != b and LAYER[b] > LAYER[a]:
            bad.append(f"{path}:{line}: {me} ({a}, layer {LAYER[a]}) imports {target} ({b}, layer {LAYER[b]})")
    assert not bad, "imports against the layering:\n" + "\n".join(bad)


def cycles_of(graph: dict[str, set]) -> list[set]:
    """The cycles of a directed graph (node -> successors): its strongly connected components of
    more than one node, by Tarjan's algorithm."""
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
    return [c for c in sccs if len(c) > 1]


def test_no_package_cycle():
    """The unit graph has no cycle, the units of a shared layer included."""
    graph: dict[str, set] = {}
    for me, target, _, _, _ in IMPORTS:
        a, b = unit(me), unit(target)
        if a and b and a != b:
            graph.setdefault(a, set()).add(b)
    cycles = cycles_of(graph)
    assert not cycles, f"package cycles: {cycles}"


# circles a change may list here while it is being taken apart; none now: any circle fails
KNOWN_FILE_CIRCLES = ()


def file_graph(imports) -> dict[str, set]:
    """Module -> the pimjax modules it imports (a package's `__init__` is the package's name)."""
    graph: dict[str, set] = {}
    for me, target, *_ in imports:
        if me != target:
            graph.setdefault(me, set()).add(target)
    return graph


def test_no_file_circle():
    """No two files import each other, directly or round a longer circle: every import counts,
    function-local ones too (a function-local import is how a circle hides)."""
    cycles = [sorted(c) for c in cycles_of(file_graph(IMPORTS)) if c not in KNOWN_FILE_CIRCLES]
    assert not cycles, f"file circles: {cycles}"


def test_the_circle_check_sees_a_circle():
    """The check fails on a circle: a made-up import ir -> text beside the real text -> ir, and a
    circle of three."""
    fake = IMPORTS + [("pimjax.trace.ir", "pimjax.trace.text", (), 0, "fake")]
    assert {"pimjax.trace.ir", "pimjax.trace.text"} in cycles_of(file_graph(fake))
    three = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles_of(three) == [{"a", "b", "c"}]


def test_no_private_name_crosses_units():
    bad = []
    for me, target, names, line, path in IMPORTS:
        if unit(me) == unit(target):
            continue
        bad += [f"{path}:{line}: {me} imports {target}.{n}" for n in names
                if n.startswith("_")]
    assert not bad, "private names imported across units (give them a public owner):\n" + "\n".join(bad)


# private names a change may list here while it makes them public; none now
KNOWN_PRIVATE_IMPORTS = set()


def test_no_private_name_crosses_files():
    """A helper another file uses is public where it lives."""
    bad = []
    for me, target, names, line, path in IMPORTS:
        if me == target:
            continue
        bad += [f"{path}:{line}: {me} imports {target}.{n}" for n in names
                if n.startswith("_") and (me, f"{target}.{n}") not in KNOWN_PRIVATE_IMPORTS]
    assert not bad, "private names imported across files (make them public):\n" + "\n".join(bad)


def test_only_the_registry_imports_by_name():
    """A pimjax module imported by a computed name (importlib, __import__) is an import this walk
    cannot see: only the family registry does it, for the family folders (`family.PACKAGE`), which
    sit above it.  A literal relative name stays in its unit; a
    literal name outside pimjax (`jax`) is no pimjax import.  A name relative to the package
    itself (`import_module(name, __name__)`: a package's lazy attributes) stays in its unit."""
    users = []
    for path in sorted(ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
                arg = node.args[0] if node.args else None
                literal = isinstance(arg, ast.Constant) and isinstance(arg.value, str)
                own = len(node.args) > 1 and getattr(node.args[1], "id", "") == "__name__"   # relative to itself
                if name in ("import_module", "__import__") and not own and not (
                        literal and (arg.value.startswith(".") or not arg.value.startswith("pimjax"))):
                    users.append(str(path.relative_to(ROOT)))
    assert set(users) <= {"family/__init__.py"}, users
    from pimjax.family import PACKAGE
    assert unit(PACKAGE) == "backends" and LAYER["backends"] > LAYER["family"]


def test_models_are_plain_jnp():
    """`pimjax.models` imports no other part of pimjax (the studies import the compiler)."""
    assert not [(me, target) for me, target, *_ in IMPORTS
                if unit(me) == "models" and unit(target) not in ("models", "")]


def test_tests_mirror_the_package():
    """tests/ has a folder for every subpackage of pimjax, and one for every backend family."""
    tests = pathlib.Path(__file__).resolve().parent
    packages = [p for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()]
    families = [p for p in (ROOT / "backends").iterdir() if p.is_dir() and (p / "__init__.py").exists()]
    missing = [p.name for p in packages if not (tests / p.name / "__init__.py").exists()]
    missing += [f"backends/{p.name}" for p in families if not (tests / "backends" / p.name / "__init__.py").exists()]
    assert not missing, f"tests/ lacks a folder for: {missing}"
