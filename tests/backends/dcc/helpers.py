"""Shared by the DCC tests: the artifact's rows (`../shared/reference/dcc-artifact.csv`)."""
from __future__ import annotations

import os

import pytest

from experiments import dcc_reference

REF_CSV = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "shared", "reference", "dcc-artifact.csv")


def artifact_rows() -> list[dict]:
    """Every row of the artifact's CSV (a skip where ../shared is not beside the repository)."""
    if not os.path.exists(REF_CSV):
        pytest.skip("../shared/reference/dcc-artifact.csv not beside the repository")
    rows, _ = dcc_reference.read_rows(REF_CSV)
    assert rows, "dcc-artifact.csv has no rows"
    return rows
