"""One API surface and its reference (issue 53): what users call sits at the top level, and the
documentation site's API page names every public name.  No mkdocs needed: the page is read as text."""
from __future__ import annotations

import pathlib
import re

import pimjax
import pimjax.studies

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_the_studies_users_call_are_at_the_top_level():
    assert pimjax.serve is pimjax.studies.serve
    assert pimjax.decode is pimjax.studies.decode
    assert pimjax.explore is pimjax.studies.explore
    assert {"serve", "decode", "explore"} <= set(pimjax.__all__)


def test_every_public_name_is_resolvable():
    missing = [n for n in pimjax.__all__ if not hasattr(pimjax, n)]
    assert not missing, missing
    assert len(set(pimjax.__all__)) == len(pimjax.__all__), "a name twice in __all__"


def test_every_public_name_is_in_the_api_reference():
    page = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^::: pimjax\.(\w+)\s*$", page, re.M))
    assert documented, "the page lost its mkdocstrings directives"
    missing = sorted(set(pimjax.__all__) - documented)
    assert not missing, f"add `::: pimjax.<name>` for {missing} to docs/api.md"


# references that read as references (issue 53): history goes to git, not into these files
LINE_LIMIT = 1000


def test_the_reference_files_stay_short():
    long = {name: n for name in ("README.md", "benchmarks/README.md", "CHANGELOG.md")
            if (n := len((ROOT / name).read_text(encoding="utf-8").splitlines())) > LINE_LIMIT}
    assert not long, f"over {LINE_LIMIT} lines (condense; history is in git): {long}"
