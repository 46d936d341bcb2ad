"""pimjax's warnings point at the user's line: whatever depth of pimjax a call goes
through, `warnings.warn` gets the stack level of the first frame outside pimjax and jax."""
from __future__ import annotations

import runpy
import textwrap
import warnings

import pytest

from pimjax.errors import PrecisionWarning

SCRIPT = textwrap.dedent('''
    import numpy as np, jax, pimjax

    @pimjax.pim_jit(backend="hbm-pim", channels=4, placement="prefer_pim")
    def gemv(W, x):
        return W @ x

    W = np.ones((64, 256), np.float32)
    x = np.ones(256, np.float32)
    y = gemv(W, x)                      # CALL: float32 data on fp16 units, converted
    W[0, 0] = 1e6
    y = gemv(W, x)                      # OVERFLOW: a value past fp16's range
''')


def _line(tag: str) -> int:
    return next(i for i, ln in enumerate(SCRIPT.splitlines(), 1) if tag in ln)


def test_precision_warnings_name_the_users_file_and_line(tmp_path):
    path = tmp_path / "user_script.py"
    path.write_text(SCRIPT)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runpy.run_path(str(path), run_name="__main__")
    ours = [w for w in caught if issubclass(w.category, PrecisionWarning)]
    assert ours, [str(w.message) for w in caught]
    for w in ours:
        assert w.filename == str(path), (w.filename, str(w.message)[:120])
    lines = {w.lineno for w in ours}
    assert _line("# CALL") in lines and _line("# OVERFLOW") in lines, lines
    src = f"{path.name}:{_line('return W @ x')}"
    assert all(src in str(w.message) for w in ours), [str(w.message)[:200] for w in ours]   # the op's own line


def test_user_stacklevel_skips_pimjax_frames():
    from pimjax import errors

    def user():                              # a frame outside pimjax: the level counts to it
        return errors.user_stacklevel()
    assert user() == 1
    with pytest.warns(UserWarning) as rec:
        warnings.warn("here", UserWarning, stacklevel=user())
    assert rec[0].filename == __file__


def test_ops_of_pimjax_own_models_name_their_line_not_a_question_mark():
    """An op traced from code pimjax wrote (the demo's GPT layer) names its line in that file."""
    import inspect

    import pimjax
    from pimjax.demo import gpt_layer, gpt_layer_args
    params, x, k, v = gpt_layer_args(256, 4, 64)
    g = pimjax.make_graph(gpt_layer, params, x, k, v)
    lines, first = inspect.getsourcelines(gpt_layer)
    sources = [o.source for o in g.ops if o.kind != "layout"]
    assert sources and all(s.startswith("pimjax/demo.py:") for s in sources), sources
    assert all(first <= int(s.rsplit(":", 1)[1]) < first + len(lines) for s in sources), sources
