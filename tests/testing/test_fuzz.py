"""The differential fuzzer (`pimjax.testing.fuzz`).  A fixed-seed
slice of random programs through `pim_jit` on the four backends under both
placements must give only the three allowed outcomes; the generator covers
what it claims; the classifier tells a mismatch from an agreement.  The
large runs are `make fuzz N=...` (benchmarks/README.md)."""
from __future__ import annotations

import collections
import pickle
import warnings

import jax
import ml_dtypes
import numpy as np
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from pimjax.durable import CorruptStateWarning
from pimjax.errors import PrecisionWarning
from pimjax.testing import check as fuzz_check
from pimjax.testing import fuzz


def test_generated_programs_are_valid_jax_and_cover_the_space():
    """300 seeded programs: jax traces every one (strict promotion, rank
    promotion raising: tests/conftest.py); every kind and dtype occurs,
    sizes 1 and primes occur, and some arguments are pytrees."""
    kinds, dtypes, sizes, pytrees = collections.Counter(), set(), set(), 0
    for seed in range(300):
        p = fuzz.program(fuzz.RandomDraw(seed))
        jax.make_jaxpr(p.fn)(*p.make_args(seed))
        kinds[p.kind] += 1
        dtypes |= {a.dtype for a in p.args}
        sizes |= {d for a in p.args for d in a.shape}
        pytrees += "p" in p.params
    assert set(kinds) == set(fuzz.KINDS)
    assert set(fuzz.DTYPES) <= dtypes
    assert {1, 3, 5, 7, 13, 17, 31} <= sizes and 12 in sizes
    assert 0 < pytrees < 300


def test_program_source_is_its_reproducer():
    p = fuzz.program(fuzz.RandomDraw(3))
    args = p.make_args(0)
    env: dict = {}
    exec(p.reproducer().split("\nprint(")[0], env)           # noqa: S102 -- the script up to its check call
    np.testing.assert_array_equal(np.asarray(jax.jit(env["prog"].fn)(*args), np.float32),
                                  np.asarray(jax.jit(p.fn)(*args), np.float32))
    assert env["prog"] == p
    assert pickle.loads(pickle.dumps(p)) == p           # workers send programs back (its cached fn left out)


def test_compare_tells_a_mismatch_from_agreement():
    w = np.array([1.0, -2.0, 0.0], np.float32)
    assert fuzz.compare(w + 0.01, w, rtol=3e-2, scale=1.0) == ""
    assert "1 of 3 differ" in fuzz.compare(w + np.array([0, 0, 0.5], np.float32), w, rtol=3e-2, scale=1.0)
    assert "float16" in fuzz.compare(w.astype(np.float16), w, rtol=3e-2, scale=1.0)     # a dtype jax did not give
    assert "structure" in fuzz.compare((w, w), w, rtol=3e-2, scale=1.0)
    i = np.array([1, 2], np.int32)
    assert fuzz.compare(i, i, 0.0, 1.0) == "" and "differ" in fuzz.compare(i + 1, i, 0.0, 1.0)


class _Stub:
    """Stands in for a pim_jit function: returns `out(*args)` or raises."""

    def __init__(self, out):
        self.out = out

    def __call__(self, *args):
        return self.out(*args)

    def compiles(self):
        return []


def test_check_classifies_each_outcome():
    """The classifier itself: a wrong value is a "mismatch", an exception a
    "crash", a PimCompileError naming the op "compile_error", one naming
    none "unclear_error"; the real pim_jit run is "equal"."""
    from pimjax import PimCompileError
    src = "def program(a0, a1):\n    v0 = a0 @ a1\n    return v0\n"
    p = fuzz.FuzzProgram("dot", src, ("a0", "a1"), (fuzz.ArgSpec(("a0",), (4, 8), "float16"),
                                                 fuzz.ArgSpec(("a1",), (8,), "float16")))
    r = fuzz.check(p, "hbm-pim", "prefer_pim", tuner=fuzz.flat_tuner())
    assert r.outcome == "equal" and r.on_pim == 1, r
    args = p.make_args(0)
    want, scale = fuzz.reference_of(p)

    def outcome(out):
        return fuzz_check._one_call(_Stub(out), p.fn, args, want, 3e-2, scale, None).outcome

    def raises(e):
        def f(*a):
            raise e
        return f
    assert outcome(lambda *a: jax.jit(p.fn)(*a)) == "equal"
    assert outcome(lambda *a: jax.jit(p.fn)(*a) + 1) == "mismatch"
    assert outcome(lambda *a: jax.jit(p.fn)(*a).astype(np.float32)) == "crash"        # jax gives float16
    assert outcome(raises(ValueError("boom"))) == "crash"
    assert outcome(raises(PimCompileError("dot_general at x.py:1 cannot run on hbm-pim"))) == "compile_error"
    assert outcome(raises(PimCompileError("cannot compile"))) == "unclear_error"
    # a stated conversion explains a difference only when jax at the units' precision gives it too
    unit = np.dtype(ml_dtypes.bfloat16)
    coarse = fuzz.at_unit_precision(p.fn, unit)

    def converted(out):
        def f(*a):
            warnings.warn(f"pim_jit(program) runs 1 op(s) on data {fuzz_check.CONVERTED}: dot_general",
                          PrecisionWarning)
            return out(*a)
        return fuzz_check._one_call(_Stub(f), p.fn, args, want, 1e-4, 0.0, None, unit).outcome
    assert fuzz.compare(coarse(*args), want, 1e-4, 0.0)         # bf16 rounding shows at this tolerance
    assert converted(coarse) == "precision"
    assert converted(lambda *a: coarse(*a) + 1) == "mismatch"


# the make-test slice: a fixed-seed handful (derandomize), the flat tuner (top-1 draft) for speed
@settings(max_examples=5, derandomize=True, deadline=None, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_fuzz_slice_gives_only_allowed_outcomes(data):
    prog = fuzz.program(fuzz.HypothesisDraw(data))
    note(prog.reproducer())
    res = fuzz.check_all(prog, tuner=fuzz.flat_tuner(), timeout_s=None)
    bad = {k: r for k, r in res.items() if r.outcome not in fuzz.OK_OUTCOMES}
    assert not bad, f"{bad}\n{prog.source}"


def test_a_stopped_run_resumes_where_it_stopped(tmp_path, capsys, monkeypatch):
    """`--resume` continues the run its counts file records: a run of 2
    programs continued to 3 runs only the third, and its counts are a
    3-program run's; a file of another run, or one that does not record its
    programs, is refused by name."""
    import json

    import pytest
    opts = ["--backends", "upmem", "--placements", "prefer_pim", "--cache-dir", ""]
    part, whole = tmp_path / "part.json", tmp_path / "whole.json"
    assert fuzz.main(["2", "--seed", "41", "--counts", str(part)] + opts) == 0
    assert json.loads(part.read_text())["done"] == [[41, 42]]
    ran = []
    worker = fuzz._worker
    monkeypatch.setattr(fuzz, "_worker", lambda task: ran.append(task[0]) or worker(task))
    assert fuzz.main(["3", "--seed", "41", "--counts", str(part), "--resume"] + opts) == 0
    assert ran == [43]
    monkeypatch.setattr(fuzz, "_worker", worker)
    assert fuzz.main(["3", "--seed", "41", "--counts", str(whole)] + opts) == 0
    got, want = json.loads(part.read_text()), json.loads(whole.read_text())
    assert got["done"] == want["done"] == [[41, 43]] and got["programs"] == 3
    assert got["counts"] == want["counts"] and got["on_pim"] == want["on_pim"]
    with pytest.raises(SystemExit):          # another first seed: not this run
        fuzz.main(["3", "--seed", "40", "--counts", str(part), "--resume"] + opts)
    assert "seed 41 (now 40)" in capsys.readouterr().err        # argparse's error, on stderr
    # a failure of an earlier sitting still fails the resumed run (exit status 1)
    failed = json.loads(whole.read_text())
    failed["counts"] = failed["counts"] + ["mismatch|upmem|prefer_pim=1"]
    whole.write_text(json.dumps(failed))
    assert fuzz.main(["3", "--seed", "41", "--counts", str(whole), "--resume"] + opts) == 1
    # --recheck: a failure the log records, run again on the code as it is, moves to its new outcome
    rec = json.loads(part.read_text())
    assert "equal|upmem|prefer_pim=3" in rec["counts"], rec     # upmem's integer units: no precision
    rec["counts"] = [c.replace("equal|upmem|prefer_pim=3", "equal|upmem|prefer_pim=2") for c in rec["counts"]] \
        + ["mismatch|upmem|prefer_pim=1"]
    part.write_text(json.dumps(rec))
    log = tmp_path / "fail.jsonl"
    log.write_text(json.dumps(dict(seed=42, kind="?", backend="upmem", placement="prefer_pim",
                                   outcome="mismatch", detail="", source="")) + "\n"
                   + json.dumps(dict(seed=99, kind="?", backend="upmem", placement="prefer_pim",
                                     outcome="mismatch", detail="", source="")) + "\n{torn")
    with pytest.warns(CorruptStateWarning, match="fuzz failure log .* skipped 1 torn"):     # "{torn"
        assert fuzz.main(["--counts", str(part), "--log", str(log), "--recheck"] + opts) == 0
    got = json.loads(part.read_text())
    assert got["counts"] == want["counts"], got                  # seed 99 is not this run's
    assert [(r["seed"], r["was"], r["now"]) for r in got["rechecked"]] == [(42, "mismatch", "equal")]
    with pytest.warns(CorruptStateWarning):
        assert fuzz.recheck(str(part), str(log)) == 0 and json.loads(part.read_text()) == got    # once only
    assert fuzz.main(["4", "--seed", "41", "--counts", str(part), "--resume"] + opts) == 0
    assert json.loads(part.read_text())["rechecked"] == got["rechecked"]       # kept by a later sitting
    log.write_text(json.dumps(dict(seed=44, kind="?", backend="upmem", placement="prefer_pim",
                                   outcome="crash", detail="", source="")) + "\n")
    with pytest.raises(SystemExit):          # the file holds no such failure: another run's log
        fuzz.main(["--counts", str(part), "--log", str(log), "--recheck"] + opts)
    assert "holds no crash on upmem prefer_pim for seed 44" in capsys.readouterr().err
    old = tmp_path / "old.json"
    old.write_text(json.dumps({k: v for k, v in want.items() if k != "done"}))
    with pytest.raises(SystemExit):
        fuzz.main(["3", "--seed", "41", "--counts", str(old), "--resume"] + opts)
    assert "cannot be resumed" in capsys.readouterr().err


def test_a_logged_failure_is_rechecked_end_to_end(tmp_path, monkeypatch):
    """A run that met a failure writes it to `--log` (checksummed lines,
    `durable.append_records`) and exits 1; once "fixed", `--recheck` reads
    the log back, runs that program again and the run's counts hold no
    failure any more (exit 0)."""
    import json

    from pimjax.durable import read_records
    opts = ["--backends", "upmem", "--placements", "prefer_pim", "--cache-dir", ""]
    counts, log = tmp_path / "run.json", tmp_path / "fail.jsonl"
    real = fuzz.check_all

    def broken(prog, seed=0, *a, **k):        # seed 42 "fails" as a bug would make it
        res = real(prog, seed, *a, **k)
        return {key: fuzz.Result("mismatch", "injected") if seed == 42 else r for key, r in res.items()}
    monkeypatch.setattr(fuzz, "check_all", broken)
    assert fuzz.main(["2", "--seed", "41", "--counts", str(counts), "--log", str(log)] + opts) == 1
    rows = read_records(str(log), "fuzz failure log")
    assert [(r["seed"], r["backend"], r["outcome"]) for r in rows] == [(42, "upmem", "mismatch")]
    assert "mismatch|upmem|prefer_pim=1" in json.loads(counts.read_text())["counts"]
    monkeypatch.setattr(fuzz, "check_all", real)         # the "fix"
    assert fuzz.main(["--counts", str(counts), "--log", str(log), "--recheck"] + opts) == 0
    rec = json.loads(counts.read_text())
    assert not any(c.startswith("mismatch") for c in rec["counts"]), rec
    assert [(r["seed"], r["was"]) for r in rec["rechecked"]] == [(42, "mismatch")]
    assert sum(int(c.rsplit("=", 1)[1]) for c in rec["counts"]) == 2      # one outcome per program still
