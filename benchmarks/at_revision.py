"""A pimjax module as it is at a git revision, loaded beside this tree's: what the benchmarks' `--before REV`
compares against (`native_loop_bench.py`, `newton_time_bench.py`)."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def source_at(rev: str, path: str) -> str | None:
    """The text of `path` (from the repository root) at `rev`; None where `rev` has no such file."""
    got = subprocess.run(["git", "show", f"{rev}:{path}"], capture_output=True, text=True, cwd=ROOT)
    return got.stdout if got.returncode == 0 else None


def module_at(rev: str, path: str, name: str, src: str | None = None):
    """pimjax's file `path` at `rev` (or the source `src`) imported as the module `name`, a sibling in the
    same package, so its relative imports resolve there (written beside the file for the import, then removed)."""
    if src is None:
        src = source_at(rev, path)
        if src is None:
            raise FileNotFoundError(f"{path} at {rev}")
    where = os.path.join(ROOT, os.path.dirname(path), name.rsplit(".", 1)[-1] + ".py")
    with open(where, "w") as f:
        f.write(src)
    try:
        spec = importlib.util.spec_from_file_location(name, where)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
    finally:
        os.remove(where)
    return mod
