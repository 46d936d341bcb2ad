"""mkdocs hook: the research notebooks as pages, rendered by mkdocs-jupyter and never executed here.

Each `experiments/<name>.ipynb` becomes the page `notebooks/<name>.ipynb`.  Where `make test` left an executed
copy (`experiments/out/<name>.ipynb`, with its tables and plots) whose cells are the committed notebook's, that
copy is rendered, so a CI build (`.ci/run`: `make test`, then `make docs`) shows every figure; otherwise the
committed notebook (code and text, no outputs).  A first cell says which one the page shows.  The copies the
site renders are written to a temporary folder; nothing in the checkout changes.
"""
from __future__ import annotations

import datetime
import json
import pathlib
import tempfile

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXPERIMENTS = ROOT / "experiments"
_TMP: list[tempfile.TemporaryDirectory] = []


def _sources(nb: dict) -> list[tuple[str, str]]:
    return [(c["cell_type"], "".join(c["source"]) if isinstance(c["source"], list) else c["source"])
            for c in nb["cells"]]


def _page(name: str) -> dict:
    committed = json.loads((EXPERIMENTS / f"{name}.ipynb").read_text(encoding="utf-8"))
    executed_path = EXPERIMENTS / "out" / f"{name}.ipynb"
    note = ("*Not executed: the committed notebook carries no outputs. `make test` executes it and writes "
            f"`experiments/out/{name}.ipynb`; the site renders that copy when it is there.*")
    nb = committed
    if executed_path.is_file():
        executed = json.loads(executed_path.read_text(encoding="utf-8"))
        if _sources(executed) == _sources(committed):
            when = datetime.datetime.fromtimestamp(executed_path.stat().st_mtime, datetime.timezone.utc)
            nb = executed
            note = (f"*Rendered from the executed copy `experiments/out/{name}.ipynb` "
                    f"({when:%Y-%m-%d %H:%M} UTC); the source is `experiments/notebooks/{name}.py`.*")
        else:
            note = ("*Not executed: `experiments/out` holds an older run of this notebook (its cells differ "
                    "from the committed ones), so the committed notebook is shown without outputs.*")
    nb = dict(nb)
    nb["cells"] = list(nb["cells"])
    first_heading = next((i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "markdown"), -1)
    nb["cells"].insert(first_heading + 1, {"cell_type": "markdown", "id": "pimjax-docs-note", "metadata": {}, "source": note})
    return nb


@event_priority(100)     # before mkdocs-jupyter's on_files, which turns the .ipynb files into its pages
def on_files(files, config):
    tmp = tempfile.TemporaryDirectory(prefix="pimjax-docs-")
    _TMP.append(tmp)
    folder = pathlib.Path(tmp.name) / "notebooks"     # mkdocs-jupyter's `include` matches this path's tail
    folder.mkdir()
    for path in sorted(EXPERIMENTS.glob("*.ipynb")):
        out = folder / path.name
        out.write_text(json.dumps(_page(path.stem)), encoding="utf-8")
        files.append(File(f"notebooks/{path.name}", src_dir=tmp.name, dest_dir=config["site_dir"],
                          use_directory_urls=config["use_directory_urls"]))
    return files


def on_post_build(config):
    while _TMP:
        _TMP.pop().cleanup()
