"""Every pointer to a pimjax file in pimjax's own text names a file that exists.

A pointer is a path in a docstring, comment or README under `pimjax/` that starts with a pimjax
package folder (`lower/...`, `sim/...`, `backends/<family>/...`, optionally behind `pimjax/`) and
ends in `.py` or `.md`.  A citation of another project's file (`src/config.py` of a reference
simulator) starts with no pimjax folder and is not a pointer; a bare file name (`lower.py` in a
family's README) is relative to its folder and not checked here.
"""
from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1] / "pimjax"
PACKAGES = sorted(p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists())
POINTER = re.compile(r"(?<![\w./-])((?:pimjax/)?(?:%s)/(?:[\w.-]+/)*[\w-]+\.(?:py|md))" % "|".join(PACKAGES))


def missing_pointers(lines, where: str = "") -> list[str]:
    """'where:line: path' of each pointer in `lines` (text lines) whose pimjax file does not exist."""
    bad = []
    for i, line in enumerate(lines, 1):
        for m in POINTER.finditer(line):
            ref = m.group(1)
            rel = ref[len("pimjax/"):] if ref.startswith("pimjax/") else ref
            if not (ROOT / rel).exists():
                bad.append(f"{where}:{i}: {ref}")
    return bad


def test_no_pointer_names_a_missing_file():
    bad = []
    for path in sorted(ROOT.rglob("*")):
        if path.suffix in (".py", ".md") and "__pycache__" not in path.parts:
            bad += missing_pointers(path.read_text().splitlines(), str(path.relative_to(ROOT)))
    assert not bad, "pointers to pimjax files that do not exist:\n" + "\n".join(bad)


def test_the_check_sees_a_stale_pointer():
    """It fails on a path to a missing file, passes one to a file that exists, and ignores
    citations of other projects' files."""
    assert missing_pointers(["see `lower/attacc.py`"]) == [":1: lower/attacc.py"]
    assert missing_pointers(["see `pimjax/sim/exec_attacc.py`"]) == [":1: pimjax/sim/exec_attacc.py"]
    assert missing_pointers(["`sim/cycles.py`, `pimjax/lower/program.py`, `backends/newton/lower.py`"]) == []
    assert missing_pointers(["(`src/config.py` of the reference)", "../shared/reference/attacc.md"]) == []
