"""Labelled records: `relabel` simulates every cached record again and
rewrites only the labels; `generate` treats the record file as a pure memo."""
import json

import numpy as np

from pimjax.costmodel.broad import backend_of
from pimjax.costmodel.dataset import (
    Labeller,
    Plan,
    append_records,
    generate,
    label,
    read_records,
    relabel,
    row_of,
    simulate,
    table_from_rows,
)
from pimjax.costmodel.kernels import case_drafts, lower_case, make_case
from pimjax.hw.presets import get_backend
from pimjax.partition.generate import lane_candidates


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


class _ByEstimate:
    """A stand-in model for the model-driven round: ranks drafts by the
    closed-form estimate feature (deterministic, no training)."""
    def predict(self, X):
        from pimjax.costmodel.features import FEATURE_NAMES
        return np.asarray(X)[:, FEATURE_NAMES.index("est_t_total")]


def _rows(recs):
    return [(r["kernel"], tuple(r["shape"]), json.dumps(r["row"], sort_keys=True), r["source"], r["cycles"])
            for r in recs]


def test_generate_selects_the_same_drafts_whatever_the_cache_holds(tmp_path):
    """Two rounds (random + estimate, then the model's best not yet taken
    by this run) from an empty record file, and again from a file that
    already holds other drafts of the same cases (another seed's run): the
    same records in the same order; a draft the file holds is read, not
    simulated (a planted label comes back)."""
    be = get_backend("hbm-pim")
    cases = [("va", (1000,)), ("gemv", (256, 128)), ("va", (1000,), {"channels": 16})]
    plan = Plan(random_per_case=3, estimate_per_case=2, dense_below=0)

    def run(path):
        r1 = generate(be, cases, plan, seed=0, path=path)
        r2 = generate(be, cases, plan, seed=0, path=path, model=_ByEstimate(), model_top=2, prior=r1)
        return r1, r2

    empty = str(tmp_path / "empty.jsonl")
    r1, r2 = run(empty)
    key = lambda r: (r["kernel"], tuple(r["shape"]), tuple(sorted(r.get("hw", {}).items())))  # noqa: E731
    for c in cases:                    # 3 random + 2 estimate drafts, less the ones both picked
        k = (c[0], c[1], tuple(sorted(c[2].items())) if len(c) > 2 else ())
        assert 3 <= sum(key(r) == k for r in r1) <= 5
        assert sum(key(r) == k for r in r2) == 2
    # every returned label is its own draft's, on its own hardware (slots filled from the labeller)
    for r in r1 + r2:
        hb = backend_of("hbm-pim", r["hw"]) if r.get("hw") else be
        case = make_case(hb, r["kernel"], r["shape"])
        one = table_from_rows([r["row"]], lane_candidates(case.op, hb))
        assert label(case, one, [0], hb)[0, 0] == r["cycles"]
    assert {r["source"] for r in r2} == {"model"}
    taken = {key(r) + (json.dumps(r["row"], sort_keys=True),) for r in r1}
    assert not {key(r) + (json.dumps(r["row"], sort_keys=True),) for r in r2} & taken
    assert len(read_records(empty)) == len(r1) + len(r2)

    full = str(tmp_path / "full.jsonl")
    other = generate(be, cases, Plan(random_per_case=6, estimate_per_case=0, dense_below=0), seed=7, path=full)
    assert len(other) == 18
    f1, f2 = run(full)
    assert _rows(f1) + _rows(f2) == _rows(r1) + _rows(r2)

    planted = dict(r1[0], cycles=12345.0)          # the memo is read, not re-simulated
    append_records(full, [planted])
    assert generate(be, cases[:1], plan, seed=0, path=full)[0]["cycles"] == 12345.0
