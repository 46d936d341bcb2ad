"""pimjax's warnings point at the user's line (issue 53): whatever depth of pimjax a call goes
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
