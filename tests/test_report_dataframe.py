"""`Report.to_dataframe()`: one row per op with the `cost_analysis()` op
fields, NaN where `to_dict()` says None, the totals in `attrs`."""
from __future__ import annotations

import math

import jax
import numpy as np
import pytest

from pimjax import pim_jit
from pimjax.report import OP_FIELDS
from pimjax.search import Tuner

pd = pytest.importorskip("pandas")


def _same(a, b) -> bool:
    if b is None:
        return isinstance(a, float) and math.isnan(a)
    return a == pytest.approx(b) if isinstance(b, float) else a == b


@pytest.mark.parametrize("stage", ["simulated", "predicted"])
def test_to_dataframe_matches_cost_analysis(stage):
    rng = np.random.default_rng(0)
    W = rng.standard_normal((256, 128)).astype(np.float32)
    x = rng.standard_normal(128).astype(np.float32)
    # a PIM op (W @ x) and a host op (sort: no affine index map)
    f = pim_jit(lambda W, x: jax.numpy.sort(W @ x), backend="hbm-pim", channels=4,
                tuner=Tuner(top_k=2), placement="prefer_pim")
    lowered = f.lower(W, x)
    st = lowered.compile() if stage == "simulated" else lowered
    ca = st.cost_analysis()
    df = st.report().to_dataframe()
    assert list(df.columns) == list(OP_FIELDS) == list(ca["ops"][0])
    assert len(df) == len(ca["ops"]) == 2
    assert list(df["placement"]) == ["pim", "host"]
    for i, op in enumerate(ca["ops"]):
        for k, v in op.items():
            assert _same(df.iloc[i][k], v), (stage, i, k, df.iloc[i][k], v)
    assert df.attrs["figures"] == stage == ca["figures"]
    assert df.attrs["total_ns"] == pytest.approx(ca["total_ns"])
    assert df["ns"].sum() == pytest.approx(ca["total_ns"])
    # numeric columns stay numeric (NaN, not None, for unknown figures)
    assert df["baseline_ns"].dtype.kind == "f" and df["speedup_gpu"].dtype.kind == "f"
