"""Labelled records: `relabel` simulates every cached record again and
rewrites only the labels."""
import json

import numpy as np

from pimjax.costmodel.dataset import Labeller, append_records, read_records, relabel, row_of, simulate
from pimjax.costmodel.kernels import case_drafts, lower_case, make_case
from pimjax.hw.presets import get_backend


def test_relabel_rewrites_stale_labels(tmp_path):
    be = get_backend("hbm-pim")
    case = make_case(be, "va", (1000,))
    table = case_drafts(case, be)
    idx = [0, len(table) // 2, len(table) - 1]
    truth = simulate([lower_case(case, table[i], be) for i in idx], be)
    recs = [{"backend": "hbm-pim", "kernel": "va", "shape": [1000], "row": row_of(table, i), "source": "random",
             "cycles": float(truth[k, 0]), "phases": [float(v) for v in truth[k, 1:]]} for k, i in enumerate(idx)]
    recs[1] = dict(recs[1], cycles=recs[1]["cycles"] * 0.5)           # a stale label
    recs[2] = dict(recs[2], cycles=None, phases=None)                 # once failed to lower
    path = str(tmp_path / "records-hbm-pim.jsonl")
    append_records(path, recs)
    n, changed = relabel(be, path)
    assert (n, changed) == (3, 2)
    out = read_records(path)
    assert [json.dumps(r["row"], sort_keys=True) for r in out] == [json.dumps(r["row"], sort_keys=True) for r in recs]
    np.testing.assert_allclose([r["cycles"] for r in out], truth[:, 0])
    np.testing.assert_allclose([r["phases"] for r in out], truth[:, 1:])


def test_labeller_batches_on_its_worker_give_simulate_labels():
    """Every program its own batch (max_records 1), simulated on the worker
    thread while the next is queued, plus a failed lowering: the labels of
    one `simulate` call, each under its own tag."""
    be = get_backend("hbm-pim")
    case = make_case(be, "va", (1000,))
    table = case_drafts(case, be)
    progs = [lower_case(case, table[i], be) for i in range(0, len(table), max(1, len(table) // 5))]
    truth = simulate(progs, be)
    lab = Labeller(be, max_records=1)
    early = []
    for k, p in enumerate(progs):
        lab.add(("draft", k), p)
        early += lab.ready()                 # whatever is done, never waiting
    lab.add("failed", None)
    labels = early + lab.flush()
    tags = [tag for tag, _ in labels]
    assert len(tags) == len(set(tags)) == len(progs) + 1         # every tag once, early or at the flush
    got = dict(labels)
    assert set(got) == {("draft", k) for k in range(len(progs))} | {"failed"}
    assert np.isnan(got.pop("failed")).all()
    np.testing.assert_array_equal(np.stack([got[("draft", k)] for k in range(len(progs))]), truth)
    assert lab.flush() == []
