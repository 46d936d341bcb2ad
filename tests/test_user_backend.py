"""A backend defined outside the package (experiments/lpddr5x_pim.py, an
LPDDR5X-PIM on the hbm-pim family) works in every stage, and a backend no
family implements falls back to the host with the reason."""
from __future__ import annotations

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
    odd = get_backend("hbm-pim", channels=2).replace(name="mystery-pim", family="mystery")
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
    root = Path(__file__).resolve().parents[1] / "pimjax"
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
