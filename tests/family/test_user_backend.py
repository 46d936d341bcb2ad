"""A backend defined outside the package (experiments/lpddr5x_pim.py, an
LPDDR5X-PIM on the hbm-pim family) works in every stage, and a backend no
family implements falls back to the host with the reason."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.lpddr5x_pim import cycles_of, lpddr5x_pim, lpddr5x_timing
from pimjax import PimCompileError, make_graph, pim_jit
from pimjax.backends import family_of, has_family
from pimjax.hw import get_backend
from pimjax.hw.core import stack_variants
from pimjax.lower import lower
from pimjax.partition import drafts
from pimjax.sim.cycles import cycles, sweep
from pimjax.sim.execute import execute
from tests.corpus import CORPUS
from tests.test_api import TOL, _close, tuner


@pytest.fixture(scope="module")
def lp():
    return lpddr5x_pim(channels=2)


def test_the_example_follows_geniepims_numbers(lp):
    """The GeniePIM ns figures become whole cycles of the 1.25 ns clock, and
    the structure is the config's: 16 one-bank units per channel, 2 KB rows."""
    t = lpddr5x_timing()
    for field, ns in (("tRP", 21.0), ("tRCDRD", 18.0), ("tRAS", 42.0), ("tCCD_L", 4.266667), ("tWTR_L", 12.0)):
        cyc = float(getattr(t, field))
        assert (cyc - 1) * 1.25 < ns <= cyc * 1.25 + 1e-6, field
    # read -> write turnaround as the engines compute it equals GeniePIM's tRTW
    assert float(t.tCL + t.tBL + t.tRTRS - t.tWL) == cycles_of(18.13333333)
    assert lp.family == "hbm-pim" and lp.name == "lpddr5x-pim"
    assert lp.cores_per_group == 16 and lp.core.banks_per_core == 1 and lp.group.banks == 16
    assert lp.core.cols * lp.core.col_bytes == 2048


def test_every_stage_runs_on_the_user_backend(lp):
    W = np.random.default_rng(0).standard_normal((256, 96)).astype(np.float32)
    x = np.random.default_rng(1).standard_normal(96).astype(np.float32)
    g = make_graph(lambda W, x: W @ x, W, x)
    op = g.ops[0]
    shapes = {i: v.shape for i, v in enumerate(g.values)}
    table = drafts(op, lp, shapes=shapes)
    assert len(table) > 0
    program = lower(op, table[len(table) // 2], lp, shapes)
    assert program.backend_name == "lpddr5x-pim" and program.family == "hbm-pim"
    # every record addresses a bank the channel has
    assert int(np.asarray(program.commands.bank).max()) < lp.group.banks
    y = execute(program, W, x)
    np.testing.assert_allclose(np.asarray(y, np.float64), W.astype(np.float64) @ x, rtol=3e-2,
                               atol=3e-2 * float(np.abs(W @ x).max()))
    rep = cycles(program, lp)
    assert float(rep.total_cycles) > 0
    assert float(rep.total_ns) == pytest.approx(float(rep.total_cycles) * 1.25)
    # a slower tRCD never makes the program faster, and the sweep's first variant is `cycles`
    t = lp.timing
    variants = stack_variants([t, t.replace(tRCDRD=t.tRCDRD + 8.0)])
    swept = sweep([program], variants, lp)
    total = np.asarray(swept.total_cycles).reshape(-1)
    assert total[0] == pytest.approx(float(rep.total_cycles))
    assert total[1] >= total[0]


@pytest.mark.slow
def test_corpus_equals_jax_jit_on_the_user_backend(lp):
    """The 30-function corpus through pim_jit (every supported op on PIM)
    against jax.jit, within the hbm-pim family's fp16 tolerance."""
    on_pim = 0
    for name, fn, make in CORPUS:
        args = make()
        compiled = pim_jit(fn, backend=lp, tuner=tuner(), placement="prefer_pim").lower(*args).compile()
        _close(compiled(*args), jax.jit(fn)(*args), TOL["hbm-pim"])
        rep = compiled.report()
        assert rep.backend == "lpddr5x-pim"
        on_pim += sum(o.placement == "pim" for o in rep.ops)
        assert all(o.reason for o in rep.ops), name
    assert on_pim >= len(CORPUS) // 2


def test_the_tuner_uses_the_familys_model_and_says_so(lp):
    W = np.random.default_rng(2).standard_normal((512, 128)).astype(np.float16)
    x = np.random.default_rng(3).standard_normal(128).astype(np.float16)
    f = pim_jit(lambda W, x: W @ x, backend=lp, placement="prefer_pim")
    compiled = f.lower(W, x).compile()
    rep = compiled.report()
    assert rep.ops[0].placement == "pim"
    assert "hbm-pim" in rep.cost_model and "lpddr5x-pim" in rep.cost_model
    assert "cost model" in str(rep)
    _close(compiled(W, x), jax.jit(lambda W, x: W @ x)(W, x), TOL["hbm-pim"])


def test_a_backend_no_family_implements_falls_back_to_the_host():
    # built by hand (the constructor: a family may register after its backends are built);
    # `Backend.replace(family=...)` refuses an unregistered family (test below)
    odd = dataclasses.replace(get_backend("hbm-pim", channels=2), name="mystery-pim", family="mystery")
    assert not has_family(odd)
    W = np.ones((64, 32), np.float32)
    x = np.ones(32, np.float32)
    compiled = pim_jit(lambda W, x: W @ x, backend=odd, tuner=tuner(), placement="prefer_pim").lower(W, x).compile()
    plan = compiled.plans[0]
    assert plan.placement == "host" and "mystery" in plan.reason and "hbm-pim" in plan.reason
    np.testing.assert_allclose(np.asarray(compiled(W, x)), W @ x)
    g = make_graph(lambda W, x: W @ x, W, x)
    with pytest.raises(PimCompileError, match="no backend family implements"):
        lower(g.ops[0], drafts(g.ops[0], get_backend("hbm-pim", channels=2))[0], odd)
    with pytest.raises(PimCompileError, match="mystery"):
        family_of(odd)


def test_replace_with_a_misspelt_family_is_an_error_listing_the_registered_ones():
    be = get_backend("hbm-pim", channels=2)
    with pytest.raises(ValueError, match=r"family='lpddr'.*registered families: \['attacc', 'hbm-pim', 'newton', "
                                         r"'upmem'\]"):
        be.replace(family="lpddr")
    with pytest.raises(ValueError, match="did you mean 'hbm-pim'"):
        be.replace(family="hbm_pim")
    assert be.replace(family="attacc").family == "attacc"        # a registered family is taken


def test_a_renamed_preset_keeps_its_family():
    be = get_backend("attacc", channels=2).replace(name="my-attacc")
    assert be.family == "attacc" and family_of(be).name == "attacc"
    q = np.random.default_rng(4).standard_normal((1, 2, 16)).astype(np.float32)
    K = np.random.default_rng(5).standard_normal((1, 2, 32, 16)).astype(np.float32)
    fn = lambda q, K: jnp.einsum("bhd,bhnd->bhn", q, K)       # noqa: E731
    compiled = pim_jit(fn, backend=be, tuner=tuner(), placement="prefer_pim").lower(q, K).compile()
    assert compiled.plans[0].placement == "pim"
    _close(compiled(q, K), jax.jit(fn)(q, K), TOL["attacc"])


def test_generic_code_never_tests_a_backend_name():
    """Outside the backend folders and the presets, no module compares a
    backend's name (or a Program's backend_name) with a literal: identity is
    resolved through the family registry."""
    root = Path(__file__).resolve().parents[2] / "pimjax"
    names = "|".join(("hbm-pim", "attacc", "newton", "upmem"))
    literal = rf"""["'](?:{names})["']"""
    pattern = re.compile(rf"""(==|!=)\s*{literal}|{literal}\s*(==|!=)|\bin\s*[(\[{{]\s*{literal}"""
                         r"""|(backend\.name|be\.name|backend_name|\.family)\s*(==|!=)\s*["']""")
    offenders = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("backends/") or rel.startswith("hw/"):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line) and not line.strip().startswith("for "):     # iterating is not testing
                offenders.append(f"{rel}:{n}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def _generic_modules():
    """(path relative to pimjax/, module name, parsed AST) of every module of
    generic code: all of `pimjax` but the family folders
    (`backends.FAMILY_MODULES`) and the hardware presets (`hw/`)."""
    import ast

    from pimjax.backends import FAMILY_MODULES
    root = Path(__file__).resolve().parents[2] / "pimjax"
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("hw/") or any(rel.startswith(f"backends/{m}/") for m in FAMILY_MODULES):
            continue
        parts = ["pimjax"] + rel[:-3].split("/")
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield rel, ".".join(parts), path.name == "__init__.py", ast.parse(path.read_text())


def _imported(node, module: str, is_package: bool) -> list[str]:
    """The absolute module names an Import / ImportFrom node of `module`
    names (a `from X import y` names X and X.y: y may be a submodule)."""
    import ast
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = module.split(".") if is_package else module.split(".")[:-1]
    if node.level:
        base = base[: len(base) - (node.level - 1)]
        src = ".".join(base + ([node.module] if node.module else []))
    else:
        src = node.module or ""
    return [src] + [f"{src}.{a.name}" for a in node.names]


# Studies that reproduce one family's paper on that family's own artifact, not code that must serve every
# family: each may import its one family's modules (and no other's).  PIMFlow's study times the artifact's
# packed Newton mapping on its Ramulator fork (`backends/newton/packed.py`).
FAMILY_STUDIES = {"studies/pimflow.py": "newton"}


def test_family_studies_exist():
    """The exemption list names real files, so it cannot outlive what it exempts."""
    root = Path(__file__).resolve().parents[2] / "pimjax"
    from pimjax.backends import FAMILY_MODULES
    for rel, fam in FAMILY_STUDIES.items():
        assert (root / rel).is_file(), rel
        assert fam in FAMILY_MODULES, fam


def test_generic_code_never_imports_a_family_module():
    """Generic code reaches a family only through the registry (`family_of`):
    no import -- module-level or inside a function, absolute or relative --
    of `pimjax.backends.<family>` or anything under it."""
    import ast

    from pimjax.backends import FAMILY_MODULES
    offenders = []
    for rel, module, is_package, tree in _generic_modules():
        own = FAMILY_STUDIES.get(rel)
        families = tuple(f"pimjax.backends.{m}" for m in FAMILY_MODULES if m != own)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                bad = [n for n in _imported(node, module, is_package)
                       if any(n == f or n.startswith(f + ".") for f in families)]
                if bad:
                    offenders.append(f"{rel}:{node.lineno}: imports {bad[0]}")
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) \
                    == "import_module" and node.args and isinstance(node.args[0], ast.Constant) \
                    and any(str(node.args[0].value).startswith(f) for f in families):
                offenders.append(f"{rel}:{node.lineno}: import_module({node.args[0].value!r})")
    assert not offenders, "\n".join(offenders)


def test_the_import_scan_sees_a_family_import():
    """The scan above catches each way of importing a family module (a check
    that could not fail would prove nothing)."""
    import ast
    caught = []
    for src, module, pkg in (("from ..backends.newton.counts import COUNTS", "pimjax.costmodel.features", False),
                             ("from ...backends import upmem", "pimjax.costmodel.sub.x", False),
                             ("import pimjax.backends.attacc.lower", "pimjax.search.tuner", False),
                             ("from .backends.hbm_pim import FAMILY", "pimjax", True)):
        node = ast.parse(src).body[0]
        caught.append(any(n.startswith("pimjax.backends.") and n.split(".")[2] in
                          ("newton", "upmem", "attacc", "hbm_pim") for n in _imported(node, module, pkg)))
    assert caught == [True, True, True, True]
    node = ast.parse("from ..backends import family_of").body[0]
    assert not any(n.split(".")[2:3] in (["newton"], ["upmem"]) for n in _imported(node, "pimjax.search.x", False))


# modules whose family-name literals are preset names a user types, not dispatch: the demo's cases, and the
# fuzzer's shipped presets at small sizes (`get_backend(name, channels=...)`, as a user calls them)
PRESET_USERS = {"demo.py", "testing/check.py"}


def _family_literals(tree, names: set) -> list[tuple[int, str]]:
    """(line, what) of family names used as data in `tree`: a dict key, a
    subscript (`X["newton"]`), or a literal collection listing every
    registered family (what `families()` gives)."""
    import ast

    def name(node):
        return node.value if isinstance(node, ast.Constant) and node.value in names else None
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            out += [(k.lineno, f"dict key {name(k)!r}") for k in node.keys if k is not None and name(k)]
        elif isinstance(node, ast.Subscript) and name(node.slice):
            out.append((node.lineno, f"subscript [{name(node.slice)!r}]"))
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            if {name(e) for e in node.elts} >= names:
                out.append((node.lineno, "a literal list of every family (use backends.families())"))
    return out


def test_generic_code_keys_nothing_by_family_name():
    """No dict keyed by a family's name, no lookup by one, no hand-written
    list of the families in generic code: what varies by family is data on
    its `Family` (e.g. `training_shapes`), reached through `family_of`."""
    from pimjax.backends import families
    names = set(families())
    offenders = [f"{rel}:{line}: {what}" for rel, _, _, tree in _generic_modules() if rel not in PRESET_USERS
                 for line, what in _family_literals(tree, names)]
    assert not offenders, "\n".join(offenders)
    # and the scan sees each form
    import ast
    probe = ast.parse('A = {"newton": 1}\nB = x["upmem"]\nC = ("hbm-pim", "attacc", "newton", "upmem")\nD = {"x": "newton"}')
    assert [line for line, _ in _family_literals(probe, names)] == [1, 2, 3]


def test_search_and_costmodel_ask_the_family_not_programmable():
    """`core.programmable` is hardware (a feature of the cost model's
    hardware vector), never a stand-in for "is UPMEM": no branch in the
    search or the cost model tests it; they ask the family
    (`backends.own_time_model`, `Family.estimates`)."""
    import ast
    offenders = []
    for rel, _, _, tree in _generic_modules():
        if not rel.startswith(("search/", "costmodel/")):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.If, ast.IfExp, ast.While)):
                if any(isinstance(n, ast.Attribute) and n.attr == "programmable" for n in ast.walk(node.test)):
                    offenders.append(f"{rel}:{node.lineno}")
    assert not offenders, "\n".join(offenders)
