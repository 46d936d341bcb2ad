"""pimjax.durable: atomic whole-file writes, checksummed appends that two writers
share without losing lines, readers that skip torn and corrupt entries with a named warning;
and the stores built on it (tuning cache, label store, explore results, serving tables) keep
their bound and evict their oldest entries."""
from __future__ import annotations

import json
import os
import threading
import warnings

import numpy as np
import pytest

from pimjax import durable
from pimjax.durable import CorruptStateWarning


def _records(n, tag="a"):
    return [{"tag": tag, "i": i, "payload": [i * 0.5, "é\n"]} for i in range(n)]


def test_append_and_read_round_trip_and_stay_json_lines(tmp_path):
    path = str(tmp_path / "sub" / "log.jsonl")
    assert durable.append_records(path, _records(5)) == 5
    assert durable.append_records(path, []) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert durable.read_records(path, "test log") == _records(5)
    for line in open(path, encoding="utf-8"):                     # each line is still one JSON object
        assert set(json.loads(line)) == {"_crc", "tag", "i", "payload"}
    assert durable.read_records(str(tmp_path / "absent.jsonl"), "test log") == []


def test_a_torn_tail_and_a_flipped_byte_are_skipped_with_a_count(tmp_path):
    path = str(tmp_path / "log.jsonl")
    durable.append_records(path, _records(4))
    raw = bytearray(open(path, "rb").read())
    lines = raw.split(b"\n")
    second = sum(len(x) + 1 for x in lines[:1])
    raw[second + 30] ^= 0x01                                      # one bit of line 2's payload
    open(path, "wb").write(bytes(raw) + durable.encode_record({"tag": "t", "i": 9}).encode()[:-7])
    with pytest.warns(CorruptStateWarning, match=r"log.jsonl: skipped 2 torn or corrupt entries of 5"):
        got = durable.read_records(path, "test log")
    assert got == [r for k, r in enumerate(_records(4)) if k != 1]
    # the next append ends the torn line first: the torn bytes never swallow a good record
    durable.append_records(path, _records(2, "b"))
    with pytest.warns(CorruptStateWarning, match="skipped 2"):
        got = durable.read_records(path, "test log")
    assert got[-2:] == _records(2, "b")


def test_a_line_without_checksum_is_a_legacy_record_and_a_misplaced_one_is_not():
    assert durable.decode_record('{"a": 1}') == {"a": 1}
    assert durable.decode_record('{"a": 1, "_crc": "00000000"}') is None
    assert durable.decode_record('[1, 2]') is None
    line = durable.encode_record({"a": 1})
    assert durable.decode_record(line[:-1]) == {"a": 1}
    assert durable.decode_record(line[:-1].replace('"a"', '"b"')) is None
    with pytest.raises(TypeError):
        durable.encode_record({})


def test_two_processes_appending_at_once_lose_nothing(tmp_path):
    path = str(tmp_path / "log.jsonl")
    pids = []
    for w in range(2):
        pid = os.fork()
        if pid == 0:                                  # child: 200 appends of 3 lines each
            try:
                for i in range(200):
                    durable.append_records(path, [{"w": w, "i": i, "k": k, "pad": "x" * 3000} for k in range(3)])
            finally:
                os._exit(0)
        pids.append(pid)
    for pid in pids:
        assert os.waitpid(pid, 0)[1] == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = durable.read_records(path, "test log")
    assert sorted((r["w"], r["i"], r["k"]) for r in got) == [(w, i, k) for w in range(2) for i in range(200)
                                                             for k in range(3)]


def test_compaction_under_concurrent_appends_keeps_every_append(tmp_path):
    path = str(tmp_path / "log.jsonl")
    durable.append_records(path, _records(10, "old"))
    stop = threading.Event()

    def append():
        i = 0
        while not stop.is_set() or i < 50:
            durable.append_records(path, [{"tag": "new", "i": i}])
            i += 1
    th = threading.Thread(target=append)
    th.start()
    for _ in range(20):
        durable.rewrite_records(path, lambda rows: [r for r in rows if r["tag"] == "new"])
    stop.set()
    th.join()
    got = durable.read_records(path, "test log")
    news = [r["i"] for r in got if r["tag"] == "new"]
    assert news == list(range(len(news))) and len(news) >= 50
    assert not [r for r in got if r["tag"] == "old"]


def test_atomic_write_replaces_whole_and_unreadable_json_warns(tmp_path):
    path = str(tmp_path / "a" / "f.json")
    durable.atomic_write(path, json.dumps({"x": 1}))
    durable.atomic_write(path, b'{"x": 2}')
    assert durable.read_json(path, "test file") == {"x": 2}
    assert [p for p in os.listdir(tmp_path / "a")] == ["f.json"]
    open(path, "w").write('{"x": ')
    with pytest.warns(CorruptStateWarning, match="test file .*f.json: unreadable"):
        assert durable.read_json(path, "test file") is None
    open(path + ".123abc.tmp", "w").write("left by a killed writer")
    with durable.locked(path):
        assert durable.sweep_temporaries(path) == 1
    assert not os.path.exists(path + ".123abc.tmp")


def test_state_nested_past_the_parsers_stack_is_skipped_with_a_warning(tmp_path):
    """A file (or a record) of 200 000 nested brackets makes json.loads raise RecursionError, not
    ValueError: the readers skip it with a CorruptStateWarning like every other corruption."""
    from pimjax.search.cache import TuneCache
    deep = "[" * 200_000 + "]" * 200_000
    path = str(tmp_path / "tune.json")
    open(path, "w").write(deep)
    with pytest.warns(CorruptStateWarning, match="tuning cache .*tune.json: unreadable \\(RecursionError"):
        cache = TuneCache(path)
    assert cache.entries == {}
    cache.put("k", _draft_record(1.0))                            # rebuilt: the file is usable again
    assert list(TuneCache(path).entries) == ["k"]
    log = str(tmp_path / "log.jsonl")
    durable.append_records(log, _records(2))
    with open(log, "a") as f:
        f.write('{"deep": ' + deep + "}\n")
    with pytest.warns(CorruptStateWarning, match="skipped 1 torn or corrupt entry of 3"):
        assert durable.read_records(log, "log") == _records(2)


# ---------------------------------------------------------------------------------------------
# the stores' bounds
# ---------------------------------------------------------------------------------------------
def _draft_record(cycles):
    from pimjax.hw import get_backend
    from pimjax.kernels import kernel_op
    from pimjax.partition import drafts
    from pimjax.search.cache import draft_to_dict
    op, shapes = kernel_op("gemv", [64, 64])
    return {"draft": draft_to_dict(drafts(op, get_backend("hbm-pim", channels=4), shapes=shapes)[0]),
            "cycles": float(cycles), "mode": "predict", "space": 1, "predicted": 1.0}


def test_tuning_cache_evicts_its_oldest_entries_past_its_bound(tmp_path):
    from pimjax.search.cache import TuneCache
    path = str(tmp_path / "tune.json")
    rec = _draft_record(1.0)
    a, b = TuneCache(path, max_entries=5), TuneCache(path, max_entries=5)
    for i in range(4):
        a.put(f"a{i}", dict(rec, cycles=float(i)))
    for i in range(3):
        b.put(f"b{i}", dict(rec, cycles=float(i)))               # merges a's four, keeps the newest 5
    assert list(b.entries) == ["a2", "a3", "b0", "b1", "b2"]
    a.put("a0", rec)                                              # a put again is the newest
    on_disk = list(json.load(open(path)))
    assert on_disk == ["a3", "b0", "b1", "b2", "a0"] and list(TuneCache(path, max_entries=5).entries) == on_disk
    mem = TuneCache(max_entries=2)
    for i in range(5):
        mem.put(str(i), rec)
    assert list(mem.entries) == ["3", "4"]
    with pytest.raises(ValueError, match="max_entries"):
        TuneCache(max_entries=-1)


def test_label_store_compacts_to_its_newest_labels(tmp_path):
    from pimjax.costmodel.features import F
    from pimjax.costmodel.online import LabelStore
    path = tmp_path / "labels.jsonl"
    X = np.full((2, F), 0.25, np.float32)
    LabelStore(str(path)).append("newton", "g", X, [101.0, 102.0])
    line = len(path.read_bytes()) // 2                              # every label the same size (cycles 1xx.0)
    path.unlink()
    store = LabelStore(str(path), max_bytes=10 * line)
    for k in range(6):                                             # 2 labels an append: 12 > 10 at the 6th
        assert store.append("newton", "g", X, [2.0 * k + 101, 2.0 * k + 102]) == 2
    assert store.read("newton")[1].tolist() == [108.0, 109.0, 110.0, 111.0, 112.0]     # the newest within half
    assert store.append("newton", "g", X[:1], [113.0]) == 1
    assert store.read("newton")[1].tolist() == [108.0, 109.0, 110.0, 111.0, 112.0, 113.0]


def test_explore_takes_a_point_only_with_all_its_rows(tmp_path):
    """A point's rows are one append; one torn after its first row (a kill inside the write)
    does not count as done, and a point written twice answers once."""
    from tests.crash_harness import dse
    _load = dse()._load
    path = str(tmp_path / "r.jsonl")
    whole = [{"point": "p", "fingerprint": "f", "timing": t, "total_ns": 1.0, "point_rows": 3}
             for t in (None, 0, 1)]
    durable.append_records(path, whole[:1])                         # the rest never made it
    durable.append_records(path, [dict(whole[0], point="q"), dict(whole[1], point="q"),
                                  dict(whole[2], point="q")])
    with pytest.warns(CorruptStateWarning, match=r"skipped 1 point\(s\) whose rows were cut short \(p\)"):
        assert list(_load(path)) == [("q", "f")]
    durable.append_records(path, whole)
    durable.append_records(path, whole)                             # a second process's copy
    done = _load(path)
    assert [r["timing"] for r in done[("p", "f")]] == [None, 0, 1]
    assert all("point_rows" not in r for rows in done.values() for r in rows)


def test_serving_table_cache_merges_processes_and_keeps_its_bound(tmp_path, monkeypatch):
    import importlib
    try:                                        # pimjax.studies.serving since issue 42 moved it
        TableCache = importlib.import_module("pimjax.studies.serving.costs").TableCache
    except ImportError:
        TableCache = importlib.import_module("pimjax.models.serving.costs").TableCache
    monkeypatch.setattr(TableCache, "_memory", {})
    monkeypatch.setattr(TableCache, "MAX_ENTRIES", 3)
    path = str(tmp_path / "tables.json")
    durable.atomic_write(path, json.dumps({"other": 1}))
    c = TableCache(path)
    for k in ("a", "b", "c"):
        c.put(k, k)
    assert list(c.entries) == ["a", "b", "c"]
    c.save()
    assert json.load(open(path)) == {"a": "a", "b": "b", "c": "c"}


_XLA_PROBE = """
import os, jax, jax.numpy as jnp
from pimjax.api import enable_xla_cache
path = enable_xla_cache()
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
for k in range(12):
    jax.jit(lambda x, k=k: jnp.sin(x) * k + jnp.cos(x * k))(jnp.ones(16 + k)).block_until_ready()
entries = [f for f in os.listdir(path) if f.endswith("-cache")]
print(len(entries), sum(os.path.getsize(os.path.join(path, f)) for f in entries))
"""


def test_the_xla_cache_folder_stays_within_its_bound(tmp_path):
    """`enable_xla_cache` bounds JAX's persistent cache (PIMJAX_XLA_CACHE_BYTES): 12 compilations
    of ~2.6 kB each into a 20 kB cache leave fewer entries, within the bound (JAX evicts)."""
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PIMJAX_XLA_CACHE="1", PIMJAX_CACHE_DIR=str(tmp_path), PIMJAX_XLA_CACHE_BYTES="20000")
    out = subprocess.run([sys.executable, "-c", _XLA_PROBE], cwd=root, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    entries, size = (int(v) for v in out.stdout.split())
    assert 0 < entries < 12 and size <= 20000


def test_a_function_keeps_the_compiles_of_its_latest_signatures(monkeypatch):
    """`PimFunction.COMPILES_KEPT` bounds the compiles kept per function: a third shape evicts the
    first, which compiles again when called (a new `Compiled`); values stay jnp's."""
    import jax.numpy as jnp

    from pimjax import pim_jit
    from pimjax.api import PimFunction
    monkeypatch.setattr(PimFunction, "COMPILES_KEPT", 2)
    f = pim_jit(lambda x: jnp.sum(x * x), backend="hbm-pim")
    xs = [np.arange(n, dtype=np.float32) for n in (8, 16, 24)]
    for x in xs:
        np.testing.assert_allclose(f(x), np.sum(x * x), rtol=1e-6)
    kept = f.compiles()
    assert len(kept) == 2 and [c.graph.values[c.graph.inputs[0]].shape for c in kept] == [(16,), (24,)]
    f(xs[0])
    assert [c.graph.values[c.graph.inputs[0]].shape for c in f.compiles()] == [(24,), (8,)]
