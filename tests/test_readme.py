"""The README's tour runs as written: its first python block, executed here, gives jax.jit's
numbers and the report it describes."""
from __future__ import annotations

import contextlib
import io
import pathlib
import re

import jax
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_the_readme_tour_runs_as_written():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    scope: dict = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, "README.md", "exec"), scope)                 # noqa: S102 -- our own README
    W, x, b = scope["W"], scope["x"], scope["b"]
    want = jax.jit(lambda W, x, b: jax.nn.relu(W @ x + b))(W, x, b)
    got = scope["y"]
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32), rtol=2e-2, atol=0.5)
    printed = out.getvalue()
    predicted = scope["lowered"].cost_analysis()
    compiled = scope["compiled"].cost_analysis()
    assert predicted["figures"] == "predicted" and compiled["figures"] == "simulated"
    # what the README says of the two stages: the prediction keeps the GEMV on the GPU, the simulation runs it on PIM
    assert predicted["ops"][0]["placement"] == "host" and "beats PIM (predicted" in printed
    assert compiled["ops"][0]["placement"] == "pim" and compiled["speedup_gpu"] > 1
    m = re.search(r"at ([0-9.]+)x the GPU", text)
    assert m and abs(compiled["speedup_gpu"] - float(m.group(1))) < 0.1, (compiled["speedup_gpu"], m)
