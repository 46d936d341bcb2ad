"""The documentation (issue 53): one API surface (what users call sits at the top level) and its
reference (the site's API page names every public name, read as text: no mkdocs needed); the reference
files stay short; the site's notebook pages show an executed copy only when it is the committed notebook."""
from __future__ import annotations

import json
import pathlib
import re

import pytest

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


# references that read as references (issue 53): history goes to git, not into these files. Each limit is the
# file's size when it was condensed plus headroom: benchmarks/README.md one table of current figures per bench
# (538 lines), CHANGELOG.md a few lines per change (143 lines).
LINE_LIMITS = {"README.md": 1000, "benchmarks/README.md": 600, "CHANGELOG.md": 400}


def test_the_reference_files_stay_short():
    long = {name: f"{n} lines, limit {limit}" for name, limit in LINE_LIMITS.items()
            if (n := len((ROOT / name).read_text(encoding="utf-8").splitlines())) > limit}
    assert not long, (f"reference files over their limit: {long}; condense them (benchmarks/README.md keeps the "
                      "current figure of each measure, CHANGELOG.md a few lines per change; history is in git)")


def _hook(monkeypatch, tmp_path):
    """docs/hooks/notebooks.py, loaded by path (it is mkdocs' hook, not a pimjax module), on a
    scratch experiments/ folder."""
    pytest.importorskip("mkdocs")
    import importlib.util
    spec = importlib.util.spec_from_file_location("_docs_hook", ROOT / "docs" / "hooks" / "notebooks.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    (tmp_path / "out").mkdir()
    monkeypatch.setattr(hook, "EXPERIMENTS", tmp_path)
    return hook


def _nb(*sources, outputs=()):
    cells = [{"cell_type": "markdown", "id": "t", "metadata": {}, "source": "# Title"}]
    cells += [{"cell_type": "code", "id": f"c{i}", "metadata": {}, "source": s, "execution_count": None,
               "outputs": list(outputs)} for i, s in enumerate(sources)]
    return {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def test_the_site_renders_an_executed_notebook_only_when_it_is_the_committed_one(monkeypatch, tmp_path):
    hook = _hook(monkeypatch, tmp_path)
    figure = {"output_type": "stream", "name": "stdout", "text": "42\n"}
    (tmp_path / "a.ipynb").write_text(json.dumps(_nb("print(42)")))
    page = hook._page("a")                                          # no executed copy: the committed one
    assert "Not executed" in page["cells"][1]["source"] and not page["cells"][2]["outputs"]
    (tmp_path / "out" / "a.ipynb").write_text(json.dumps(_nb("print(42)", outputs=[figure])))
    page = hook._page("a")                                          # the executed copy of these cells
    assert "Rendered from the executed copy" in page["cells"][1]["source"]
    assert page["cells"][2]["outputs"] == [figure]
    (tmp_path / "out" / "a.ipynb").write_text(json.dumps(_nb("print(41)", outputs=[figure])))
    page = hook._page("a")                                          # an older run: not shown as this one
    assert "older run" in page["cells"][1]["source"] and not page["cells"][2]["outputs"]
    assert page["cells"][0]["source"] == "# Title"                  # the note goes under the title
