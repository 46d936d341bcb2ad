"""The serving simulator: traces, the scheduler on toy traces with times derived by
hand, KV capacity derived by hand, step costs against independent figures, bad input."""
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pimjax.hw.host import a100
from pimjax.hw.presets import get_backend
from pimjax.models.configs import get_config
from pimjax.search.tuner import Tuner
from pimjax.studies.serving import (
    Requests,
    batch_requests,
    fixed,
    lognormal,
    poisson_requests,
    requests_from,
    serve,
    uniform,
)
from pimjax.studies.serving.costs import (
    KVLayout,
    StepTime,
    TracedDense,
    kv_layout,
    make_gpu_attention,
    partition_backend,
)
from pimjax.studies.serving.engine import simulate
from tests.helpers import slow_params

GPT3_TP8 = get_config("gpt3-13b").tensor_parallel(8)
_TUNER = Tuner()


# --------------------------------------------------------------------------
# request traces
# --------------------------------------------------------------------------
def test_csv_and_dataframe_round_trip(tmp_path):
    r = poisson_requests(20, rate=3.0, prompt=uniform(10, 50), output=lognormal(20, 0.5, 2, 40), seed=3)
    path = tmp_path / "trace.csv"
    r.to_csv(str(path))
    back = requests_from(str(path))
    np.testing.assert_allclose(back.arrival_s, r.arrival_s)
    assert back.prompt_len.tolist() == r.prompt_len.tolist()
    assert requests_from(r.to_frame()).output_len.tolist() == r.output_len.tolist()


def test_poisson_is_seeded_and_has_its_rate():
    a = poisson_requests(4000, rate=5.0, prompt=fixed(7), output=uniform(3, 9), seed=11)
    b = poisson_requests(4000, rate=5.0, prompt=fixed(7), output=uniform(3, 9), seed=11)
    assert a.arrival_s.tolist() == b.arrival_s.tolist()
    gaps = np.diff(np.concatenate([[0.0], a.arrival_s]))
    assert gaps.mean() == pytest.approx(1 / 5.0, rel=0.05)            # exponential gaps of mean 1 / rate
    assert set(a.prompt_len.tolist()) == {7}
    assert a.output_len.min() == 3 and a.output_len.max() == 9


def test_lognormal_lengths_are_clipped_with_the_median():
    r = poisson_requests(4000, rate=1.0, prompt=lognormal(300, 0.7, 50, 1000), output=1, seed=0)
    assert r.prompt_len.min() >= 50 and r.prompt_len.max() <= 1000
    assert np.median(r.prompt_len) == pytest.approx(300, rel=0.06)


@pytest.mark.parametrize("field,kwargs,match", [
    ("prompt_len", dict(prompt=[5, -2, 3]), r"prompt_len\[1\] = -2"),
    ("output_len", dict(output=[1, 0, 3]), r"output_len\[1\] = 0"),
    ("prompt_len", dict(prompt=[5, 2.5, 3]), r"prompt_len\[1\] = 2.5 is not a whole"),
    ("arrival_s", dict(arrival=[0.0, 2.0, 1.0]), r"arrival_s out of order: request 2"),
    ("arrival_s", dict(arrival=[-1.0, 2.0, 3.0]), r"arrival_s\[0\] = -1.0 is negative"),
])
def test_bad_requests_name_the_field(field, kwargs, match):
    arrival = kwargs.get("arrival", [0.0, 1.0, 2.0])
    with pytest.raises(ValueError, match=match):
        Requests(arrival, kwargs.get("prompt", [5, 6, 7]), kwargs.get("output", [2, 2, 2]))


@pytest.mark.parametrize("kwargs,match", [
    (dict(prompt=-5, output=0), r"prompt=-5: LengthDist fixed\(-5\): lengths must be >= 1 token"),
    (dict(prompt=5, output=0), r"output=0: LengthDist fixed\(0\): lengths must be >= 1 token"),
    (dict(prompt=("uniform", 0, 8), output=2), r"uniform\(0, 8\): lengths must be >= 1"),
    (dict(prompt=("lognormal", 100, 1.0, 0), output=2), r"clip lo=0: lengths must be >= 1"),
])
def test_non_positive_lengths_are_errors_never_clipped(kwargs, match):
    with pytest.raises(ValueError, match=match):
        poisson_requests(3, rate=1.0, **kwargs)
    with pytest.raises(ValueError, match=">= 1 token"):
        uniform(-3, 4)


def test_requests_from_names_a_missing_column():
    with pytest.raises(ValueError, match=r"missing column\(s\) \['output_len'\]"):
        requests_from(pd.DataFrame({"arrival_s": [0.0], "prompt_len": [3]}))


def test_requests_from_maps_columns_and_draws_arrivals():
    sharegpt = pd.DataFrame({"conversation_id": ["a", "b", "c"], "input_tokens": [12, 300, 45],
                             "output_tokens": [5, 80, 9]})
    cols = {"prompt_len": "input_tokens", "output_len": "output_tokens"}
    r = requests_from(sharegpt, cols, rate=4.0, seed=3)
    assert r.prompt_len.tolist() == [12, 300, 45] and r.output_len.tolist() == [5, 80, 9]
    want = poisson_requests(3, rate=4.0, prompt=fixed(1), output=fixed(1), seed=3).arrival_s
    np.testing.assert_allclose(r.arrival_s, want)                           # poisson_requests' arrivals
    timed = sharegpt.assign(t=[0.0, 0.5, 0.7])
    assert requests_from(timed, {**cols, "arrival_s": "t"}).arrival_s.tolist() == [0.0, 0.5, 0.7]
    with pytest.raises(ValueError, match=r"missing column\(s\) \['arrival_s'\].*pass rate="):
        requests_from(sharegpt, cols)
    with pytest.raises(ValueError, match=r"\['prompt'\] is not one of ours"):
        requests_from(sharegpt, {"prompt": "input_tokens"})
    with pytest.raises(ValueError, match="rate= is for a source without them"):
        requests_from(timed, {**cols, "arrival_s": "t"}, rate=2.0)


# --------------------------------------------------------------------------
# the scheduler on a stub cost model (every time derived by hand)
# --------------------------------------------------------------------------
class StubCosts:
    """A prefill step costs `prefill_ms`, a decode-only step `decode_ms`, whatever is in it."""

    def __init__(self, blocks=10_000, block_size=1, partitions=1, prefill_ms=2.0, decode_ms=1.0):
        self.layout = KVLayout(channels=partitions, channel_bytes=0, weight_bytes=0.0, partition_channels=1,
                               partitions=partitions, kv_token_bytes=1, block_size=block_size,
                               block_bytes=block_size, blocks_per_partition=blocks)
        self.prefill_ns, self.decode_ns = prefill_ms * 1e6, decode_ms * 1e6
        self.calls = []

    def step(self, ctx, part, chunks):
        self.calls.append((ctx.tolist(), part.tolist(), list(chunks)))
        return StepTime(self.prefill_ns if chunks else self.decode_ns, 0.0, 0.0)


# r0 and r1 at t = 0, r2 at 1.5 ms; prompts of 4; outputs 4, 2, 2; at most 2 in flight
TOY = Requests([0.0, 0.0, 1.5e-3], [4, 4, 4], [4, 2, 2])


def _finish_ms(per):
    return (per["finish_ns"] / 1e6).tolist()


def test_toy_trace_static_by_hand():
    # static: {r0, r1} prefill 0-2 ms (first tokens at 2); decode steps 2-3 (r1 done), 3-4, 4-5 (r0
    # done; r1 rides along as padding); r2 (arrived at 1.5) waits for the batch: prefill 5-7, decode 7-8
    per, steps, _ = simulate(TOY, StubCosts(), scheduler="static", max_batch=2)
    assert _finish_ms(per) == pytest.approx([5.0, 3.0, 8.0])
    assert (per["first_ns"] / 1e6).tolist() == pytest.approx([2.0, 2.0, 7.0])
    assert [s[6] for s in steps] == [2, 2, 2, 2, 1, 1]                   # batch sizes: padding counted


def test_toy_trace_continuous_by_hand_and_sooner():
    # continuous, prefill first: prefill r0, r1 0-2; r2 waits for a slot: decode 2-3 (r1 leaves at 3);
    # r2 joins: prefill 3-5 (r0's decode waits); decode 5-6 (r2 done), decode 6-7 (r0 done)
    per, _, _ = simulate(TOY, StubCosts(), scheduler="continuous", max_batch=2)
    assert _finish_ms(per) == pytest.approx([7.0, 3.0, 6.0])
    assert (per["first_ns"] / 1e6).tolist() == pytest.approx([2.0, 2.0, 5.0])
    static, _, _ = simulate(TOY, StubCosts(), scheduler="static", max_batch=2)
    assert max(_finish_ms(per)) < max(_finish_ms(static))                # 7 ms < 8 ms


def _toy_result(per, steps, events, costs):
    from pimjax.studies.serving.service import ServeOptions, ServeResult, _event_frame, _request_frame, _step_frame
    return ServeResult("toy", "stub", _request_frame(TOY, per), _step_frame(steps, costs.layout),
                       _event_frame(events), costs.layout, ServeOptions(), 0.0, 0.0,
                       token_times=tuple(t / 1e9 for t in per["token_ns"]))


def test_goodput_under_three_slos_and_inter_token_latency_by_hand():
    # the continuous trace above: r0's tokens at 2, 3, 6, 7 ms (held back by r2's prefill 3-5), r1's at
    # 2, 3, r2's (arrived 1.5) at 5, 6.  TTFT 2 / 2 / 3.5 ms, TPOT 5/3 / 1 / 1, latency 7 / 3 / 4.5; the
    # makespan 7 ms; the inter-token gaps 1, 3, 1 | 1 | 1 ms
    costs = StubCosts()
    per, steps, events = simulate(TOY, costs, scheduler="continuous", max_batch=2)
    res = _toy_result(per, steps, events, costs)
    for got, want in zip(res.token_times, [[2e-3, 3e-3, 6e-3, 7e-3], [2e-3, 3e-3], [5e-3, 6e-3]]):
        assert got.tolist() == pytest.approx(want)
    assert res.itl_ms.tolist() == pytest.approx([1.0, 3.0, 1.0, 1.0, 1.0])
    s = res.summary()
    assert (s["itl_ms_p50"], s["itl_ms_mean"]) == pytest.approx((1.0, 1.4))
    assert (s["itl_ms_p90"], s["itl_ms_p99"]) == pytest.approx((2.2, 2.92))      # 1 + 0.6 / 0.96 x (3 - 1)
    assert "goodput_requests_per_s" not in s
    span = 7e-3
    cases = [(dict(ttft_slo_ms=3.0), 2, 4 + 2),              # r2's 3.5 ms TTFT misses
             (dict(tpot_slo_ms=1.5), 2, 2 + 2),              # r0's 5/3 ms TPOT misses
             (dict(e2e_slo_ms=4.0), 1, 2),                   # only r1 ends within 4 ms
             (dict(ttft_slo_ms=3.0, tpot_slo_ms=1.5, e2e_slo_ms=5.0), 1, 2)]   # all three: r1 alone
    for slos, good, tokens in cases:
        s = res.summary(**slos)
        assert s["goodput_requests_per_s"] == pytest.approx(good / span), slos
        assert s["goodput_tokens_per_s"] == pytest.approx(tokens / span), slos
        assert s["slo_attained"] == pytest.approx(good / 3)
        assert all(s[k] == v for k, v in slos.items())
    with pytest.raises(ValueError, match="ttft_slo_ms must be > 0"):
        res.summary(ttft_slo_ms=-1)


def test_toy_trace_chunked_prefill_by_hand():
    # decode-first, a 6-token budget, 3 in flight: r0's 4 prompt tokens and 2 of r1's (0-2 ms, r0's
    # first token); r0 decodes, r1's last 2 and 3 of r2's (2-4: r1's first token); r0 and r1 decode,
    # r2's last one (4-6: r1 done, r2's first token); r0 and r2 decode (6-7: both done)
    per, steps, _ = simulate(TOY, StubCosts(), scheduler="continuous", prefill="decode-first", max_batch=3,
                             max_tokens=6)
    assert (per["first_ns"] / 1e6).tolist() == pytest.approx([2.0, 4.0, 6.0])
    assert _finish_ms(per) == pytest.approx([7.0, 6.0, 7.0])
    assert [(s[2], s[4]) for s in steps] == [(0, 6), (1, 5), (2, 1), (2, 0)]   # (decodes, prefill tokens)


def test_static_vs_continuous_on_the_real_cost_model():
    """The same toy trace on GPT-3 13B (TP 8 shard) GPU-only: the step times come from the
    cost model, the schedule is the one derived above, so the makespans are sums of steps."""
    res = {s: serve(GPT3_TP8, "attacc", TOY, scheduler=s, system="attacc", placement="gpu", max_batch=2,
                    progress=False, tuner=_TUNER) for s in ("static", "continuous")}
    c = res["continuous"].costs
    step = lambda ctx, chunks: c.step(np.array(ctx, np.int64), np.zeros(len(ctx), np.int64), chunks).ns  # noqa
    pre2, pre1 = step([], [(4, 0), (4, 0)]), step([], [(4, 0)])
    static = pre2 + step([5, 5], []) + step([6, 5], []) + step([7, 5], []) + pre1 + step([5], [])
    cont = pre2 + step([5, 5], []) + pre1 + step([6, 5], []) + step([7], [])
    assert res["static"].requests["finish_s"].max() * 1e9 == pytest.approx(static, rel=1e-9)
    assert res["continuous"].requests["finish_s"].max() * 1e9 == pytest.approx(cont, rel=1e-9)
    assert cont < static


def test_preemption_evicts_the_youngest_and_recomputes():
    # 1-token blocks, 12 blocks: r0 (prompt 4, output 6) and r1 (prompt 4, output 6) fit their prompts;
    # decodes grow both to 12 blocks, then r0's next token preempts r1 (the youngest)
    reqs = Requests([0.0, 0.0], [4, 4], [6, 6])
    costs = StubCosts(blocks=12)
    per, steps, events = simulate(reqs, costs, kv_policy="preempt", max_batch=2)
    kinds = [e[1] for e in events]
    assert "preempt" in kinds and {e[2] for e in events if e[1] == "preempt"} == {1}
    assert per["preemptions"].tolist() == [0, 1]
    assert all(s[9] <= 12 for s in steps)                                # never above the capacity
    # r1 recomputes prompt + generated tokens as one prefill
    recompute = [c for _, _, c in costs.calls if c and c[0][0] > 4]
    assert recompute and recompute[0][0][1] == 0


@settings(max_examples=60)
@given(st.data())
def test_random_traces_keep_the_invariants(data):
    n = data.draw(st.integers(1, 10))
    gaps = data.draw(st.lists(st.floats(0, 3e-3), min_size=n, max_size=n))
    prompts = data.draw(st.lists(st.integers(1, 30), min_size=n, max_size=n))
    outputs = data.draw(st.lists(st.integers(1, 12), min_size=n, max_size=n))
    reqs = Requests(np.cumsum(gaps), prompts, outputs)
    sched = data.draw(st.sampled_from(["continuous", "static"]))
    prefill = data.draw(st.sampled_from(["prefill-first", "decode-first"]))
    policy = data.draw(st.sampled_from(["wait", "preempt"])) if sched == "continuous" else "wait"
    max_batch = data.draw(st.integers(1, 4))
    max_tokens = data.draw(st.integers(max_batch, 48))
    bs = data.draw(st.integers(1, 4))
    need = max(-(-(p + o - 1) // bs) for p, o in zip(prompts, outputs))
    blocks = data.draw(st.integers(need, need * 3))
    per, steps, events = simulate(reqs, StubCosts(blocks=blocks, block_size=bs), scheduler=sched, prefill=prefill,
                                  max_batch=max_batch, max_tokens=max_tokens, kv_policy=policy)
    arr = reqs.arrival_s * 1e9
    assert np.isfinite(per["finish_ns"]).all()
    assert (per["admit_ns"] >= arr - 1e-6).all() and (per["first_ns"] > per["admit_ns"]).all()
    assert (per["finish_ns"] >= per["first_ns"]).all()
    t = np.array([s[0] for s in steps]), np.array([s[1] for s in steps])
    assert (t[0][1:] >= t[0][:-1] + t[1][:-1] - 1e-6).all()              # steps never overlap
    assert all(s[9] <= blocks for s in steps)                            # KV never above capacity
    assert all(s[6] <= max_batch for s in steps)
    if policy == "wait":
        assert not [e for e in events if e[1] == "preempt"]
        assert sum(s[2] for s in steps) == sum(o - 1 for o in outputs)    # one decode per later token
        assert sum(s[4] for s in steps) == sum(prompts)                  # every prompt token once
    if sched == "continuous" and prefill == "prefill-first":
        assert all(s[2] == 0 or s[3] == 0 for s in steps)                # a step prefills or decodes
    if sched == "static":                                                # nobody joins a running batch
        admits = sorted(set(per["admit_ns"].tolist()))
        for a, b in zip(admits, admits[1:]):
            assert b >= per["finish_ns"][per["admit_ns"] == a].max() - 1e-6


# --------------------------------------------------------------------------
# KV capacity, derived by hand
# --------------------------------------------------------------------------
KV_HEAVY = get_config("gpt3-13b").scaled(name="kv-heavy", d_model=512, n_heads=16, n_kv_heads=16, head_size=128,
                                         d_ff=1024, n_layers=32, vocab=1000, max_seq=4096)


def test_kv_capacity_by_hand():
    """A model whose KV is large beside its weights on ONE AttAcc HBM3 stack; requests of
    2048 prompt tokens and 2 output tokens, all at t = 0, reserved whole ("wait"): how many
    are admitted before one must wait."""
    be = get_backend("attacc", system="reference")                     # 1 stack = 16 channels
    # by hand: 16 channels x 64 banks x 16384 rows x 32 columns x 32 B (attacc.md) = 16 GiB
    capacity = 16 * 64 * 16384 * 32 * 32
    d, qd, f, L = 512, 16 * 128, 1024, 32
    per_layer = d * qd + 2 * d * qd + qd * d + 2 * d * f + (qd + 2 * qd + d + f + d) + 4 * d   # weights, biases, 2 LNs
    params = L * per_layer + 2 * d + 1000 * d + 4096 * d        # + final LN, tied embeddings, positions
    weights = 2 * params                                        # FP16
    kv_token = 2 * L * 16 * 128 * 2                             # K and V, 32 layers, 16 heads of 128, FP16
    block = 16 * kv_token                                       # 16-token blocks
    blocks = (capacity - weights) // block
    per_request = math.ceil((2048 + 2 - 1) / 16)                # the whole final context
    fits = blocks // per_request
    assert 20 < fits < 40
    res = serve(KV_HEAVY, be, batch_requests(fits + 3, 2048, 2), placement="gpu", kv_policy="wait",
                max_batch=1000, max_tokens=10**7, progress=False, tuner=_TUNER)
    assert res.layout.total_blocks == blocks
    assert res.steps["running"].max() == fits
    first_wait = res.events[res.events["kind"] == "kv_wait"].iloc[0]
    assert first_wait["request"] == fits and first_wait["t_s"] == 0.0
    assert res.steps["kv_occupancy"].max() == pytest.approx(fits * per_request / blocks)
    assert res.summary()["kv_waits"] == 1                      # the head of the queue waits; the rest queue behind it


def test_kv_layout_partitions_follow_attaccs_mapping():
    be = get_backend("attacc", system="attacc")                         # 5 stacks: 80 channels
    cfg = get_config("gpt3-13b")
    # TP 8: 5 KV heads per GPU, a channel each while they last: 16 requests of 5 channels
    assert [kv_layout(cfg, be, tp=8, max_batch=b).partition_channels for b in (1, 4, 8, 16, 64)] == [80, 20, 10, 5, 5]
    lay = kv_layout(cfg, be, tp=8, max_batch=4)
    assert lay.partitions == 4 and partition_backend(be, 20).n_groups == 20
    assert lay.weight_bytes == pytest.approx(2 * (40 * GPT3_TP8.layer_params()
                                                  + (cfg.n_params - 40 * cfg.layer_params()) / 8))


# --------------------------------------------------------------------------
# step costs against independent figures
# --------------------------------------------------------------------------
@pytest.mark.parametrize("model", ["roofline", "occupancy", "attacc"])
@pytest.mark.parametrize("name", ["gpt3-13b", "llama2-70b"])
def test_traced_dense_equals_the_layer_traced_at_that_batch(model, name):
    from pimjax.models.layers import layer_shapes, make_layer
    from pimjax.plan import host_bytes
    from pimjax.sim.host import host_time
    from pimjax.studies.inference import input_phases, op_phases
    from pimjax.trace.frontend import make_graph
    shard = get_config(name).tensor_parallel(8)
    host = a100("hbm3", model=model)
    be = get_backend("attacc", system="attacc", host=host, gpu=host)
    td = TracedDense(shard, be, host)
    for B in (1, 5):
        args = layer_shapes(shard, B, 64)
        g = make_graph(make_layer(shard, append=False), *args)
        shapes = {i: v.shape for i, v in enumerate(g.values)}
        eb = host_bytes(g, be)
        ph = op_phases(g, input_phases(g, args))
        want = [host_time(op, host, shapes, eb) for op, p in zip(g.ops, ph) if p != "attention"]
        np.testing.assert_allclose(td.ns(B), want, rtol=1e-9)


def test_gpu_attention_of_mixed_contexts_is_the_sum_of_requests_on_the_roofline():
    """Roofline: each op's bytes / FLOPs of B requests are their own summed; the batch-B trace
    at one context is the independent figure."""
    from pimjax.studies.inference import gpu_attention_ns
    host = a100("hbm3", model="roofline")
    be = get_backend("attacc", system="attacc", host=host, gpu=host)
    f = make_gpu_attention(GPT3_TP8, be, 16)
    assert f(4, 4 * 300) == pytest.approx(gpu_attention_ns(GPT3_TP8, 4, 300, be), rel=1e-9)
    assert f(1, 777) == pytest.approx(gpu_attention_ns(GPT3_TP8, 1, 777, be), rel=1e-9)


# --------------------------------------------------------------------------
# bad input to serve
# --------------------------------------------------------------------------
def test_a_prompt_beyond_the_capacity_names_the_request():
    be = get_backend("attacc", system="reference")
    reqs = Requests([0.0, 0.1], [100, 300_000], [2, 2])
    with pytest.raises(ValueError, match=r"requests.prompt_len\[1\] = 300000 tokens exceeds the KV capacity"):
        serve(KV_HEAVY, be, reqs, placement="gpu", progress=False, tuner=_TUNER)
    reqs = Requests([0.0], [100], [300_000])
    with pytest.raises(ValueError, match=r"requests.output_len\[0\] = 300000"):
        serve(KV_HEAVY, be, reqs, placement="gpu", progress=False, tuner=_TUNER)


@pytest.mark.parametrize("kwargs,match", [
    (dict(placement="tpu"), r"placement='tpu'; valid values"),
    (dict(max_batch=0), r"max_batch must be a positive int"),
    (dict(overlap="magic"), r"overlap='magic'"),
    (dict(ffn_pim_fraction=1.5), r"ffn_pim_fraction"),
    (dict(warp_speed=9), r"unknown option\(s\) 'warp_speed': not one of serve's"),
    (dict(placment="gpu"), r"'placment' \(did you mean 'placement'\?\)"),    # serve's own option
    (dict(stack=3), r"'stack' \(did you mean 'stacks'\?\).*the 'attacc' preset's"),   # the preset's
    (dict(precision="exact"), r"precision='exact'; valid values are \['convert', 'strict'\]"),
])
def test_bad_options_name_the_field(kwargs, match):
    with pytest.raises(ValueError, match=match):
        serve(GPT3_TP8, "attacc", batch_requests(1, 10, 2), progress=False, **kwargs)


def test_an_option_of_neither_serve_nor_a_backend_object_is_named():
    with pytest.raises(ValueError, match=r"'stacks'.*need a preset name, not a Backend"):
        serve(GPT3_TP8, get_backend("attacc"), batch_requests(1, 10, 2), progress=False, stacks=3)


def test_requests_are_required():
    with pytest.raises(TypeError, match="missing required argument 'requests'"):
        serve(GPT3_TP8, "attacc")


@pytest.mark.slow      # 60-120 s on 2 cores (the placement search on PIM); CI runs it
def test_conversions_are_recorded_in_the_result_not_warned():
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")                   # a PrecisionWarning would fail the test
        res = serve(GPT3_TP8, "attacc", batch_requests(2, 32, 3), system="attacc", placement="pimjax",
                    max_batch=2, progress=False, tuner=_TUNER)
    assert res.conversions and all("float32 -> float16" in c for c in res.conversions)
    assert res.options.precision == "convert"


def test_summary_names_the_gpu_the_memory_and_the_kv_capacity():
    import warnings

    from pimjax.studies.serving import CapacityWarning
    with warnings.catch_warnings():
        warnings.simplefilter("error", CapacityWarning)      # 3.2 GiB of 16: no warning
        res = serve(GPT3_TP8, "attacc", batch_requests(2, 32, 3), placement="gpu", progress=False, tuner=_TUNER)
    s = res.summary()
    lay = res.layout
    assert s["gpu"] == "A100-80GB (665.6 GB/s)" and s["gpu_model"] == "occupancy" and s["gpu_GBps"] == 665.6
    assert s["pim_memory_GiB"] == 16.0 and s["pim"] == "attacc/bank-pc" and s["tp"] == 1
    assert s["kv_capacity_tokens"] == lay.total_blocks * lay.block_size > 0
    assert s["weights_GiB"] == pytest.approx(lay.weight_bytes / 2**30)
    assert "16 GiB PIM memory" in s["hardware"] and f"KV capacity {s['kv_capacity_tokens']:,} tokens" in s["hardware"]
    assert "GPU A100-80GB (665.6 GB/s): occupancy model, 665.6 GB/s" in res.describe()


def test_weights_filling_the_memory_and_kv_waits_warn():
    from pimjax.studies.serving import CapacityWarning
    reqs = Requests(np.zeros(12), np.full(12, 1000), np.full(12, 200))   # 12 x 1 200 tokens > 7 056
    with pytest.warns(CapacityWarning) as caught:
        res = serve("llama2-7b", "attacc", reqs, placement="gpu", progress=False, tuner=_TUNER)
    text = " | ".join(str(w.message) for w in caught)
    assert "llama2-7b's weights (12.6 GiB per shard) fill 78 % of the PIM memory (16 GiB" in text
    assert "7,056 KV tokens remain" in text and "system='attacc'" in text
    assert "requests waited for KV space or were preempted" in text and res.summary()["kv_waits"] > 1


def test_rate_sweep_is_serve_at_each_rate():
    from pimjax.studies.serving import rate_sweep
    opts = dict(placement="gpu", max_batch=8, progress=False, tuner=_TUNER, system="attacc", tp=8)
    df = rate_sweep("gpt3-13b", "attacc", [5.0, 50.0], n=12, prompt=fixed(100), output=uniform(4, 12), seed=2,
                    ttft_slo_ms=50.0, tpot_slo_ms=20.0, **opts)
    assert df["rate"].tolist() == [5.0, 50.0]
    for _, row in df.iterrows():
        reqs = poisson_requests(12, rate=row["rate"], prompt=fixed(100), output=uniform(4, 12), seed=2)
        s = serve("gpt3-13b", "attacc", reqs, **opts).summary(20.0, ttft_slo_ms=50.0)
        assert row["goodput_requests_per_s"] == pytest.approx(s["goodput_requests_per_s"], rel=1e-12)
        assert row["ttft_ms_p99"] == pytest.approx(s["ttft_ms_p99"], rel=1e-12)
    assert df["requests_per_s"].iloc[1] > df["requests_per_s"].iloc[0]
    with pytest.raises(ValueError, match="rates must be > 0"):
        rate_sweep("gpt3-13b", "attacc", [0.0], **opts)
    with pytest.raises(ValueError, match="did you mean 'placement'"):
        rate_sweep("gpt3-13b", "attacc", [1.0], placment="gpu")


def test_llama3_serves():
    cfg = get_config("llama3-8b")
    res = serve(cfg, "attacc", batch_requests(2, 64, 3), system="attacc", placement="gpu", progress=False,
                tuner=_TUNER)
    # GQA: pimjax's placements store the 8 KV heads only: 32 layers x 2 x 8 x 128 x 2 bytes per token
    assert res.layout.kv_token_bytes == 32 * 2 * 8 * 128 * 2
    assert res.summary()["output_tokens"] == 6


def test_weights_beyond_the_memory_are_an_error():
    with pytest.raises(ValueError, match="do not fit the PIM memory"):
        serve("llama2-70b", "attacc", batch_requests(1, 10, 2), system="reference", placement="gpu",
              progress=False)


def test_gqa_attention_on_a_kernel_model_reads_each_kv_head_once():
    """LLaMA-2 70B's TP-8 shard (8 query heads on 1 KV head) on the occupancy model: two products of 8
    rows over the one cache (the traced GQA einsum's shapes) and the softmax of the 8 rows, by hand."""
    from pimjax.hw import gpu as G
    shard = get_config("llama2-70b").tensor_parallel(8)
    host = a100("hbm3", model="occupancy")
    L, B = 1008, 3                                       # a multiple of l_bucket: no interpolation
    want = (G.gemm_ns(host, 8, L, 128, 1 * B) + G.gemm_ns(host, 8, 128, L, 1 * B)
            + G.elementwise_ns(host, 2 * 8 * B * L * 2, 5.0 * 8 * B * L, outputs=8 * B, reduction=L, kind="softmax"))
    be = get_backend("attacc", system="attacc", host=host, gpu=host)
    assert make_gpu_attention(shard, be, 16)(B, B * L) == pytest.approx(want, rel=1e-12)
    mha = G.attention_ns(host, 8, 128, L, B)                                # every query head its own cache
    assert want < mha


# --------------------------------------------------------------------------
# explore with a serving objective; the notebook is its generator's
# --------------------------------------------------------------------------
def test_explore_takes_a_serving_objective():
    import pimjax
    from pimjax.studies.dse import grid
    from pimjax.studies.serving import ServingObjective
    reqs = poisson_requests(30, rate=20.0, prompt=fixed(200), output=fixed(20), seed=0)
    obj = ServingObjective("gpt3-13b", reqs, tpot_p99_ms=1e9, tp=8, placement="gpu", max_batch=8, tuner=_TUNER)
    df = pimjax.explore(obj, backends=grid("attacc", system=["attacc"], stacks=[3, 5]), progress=False)
    assert list(df["point"]) == ["system=attacc,stacks=3", "system=attacc,stacks=5"]
    assert df["meets_slo"].all() and (df["goodput_tokens_per_s"] == df["tokens_per_s"]).all()
    # the same trace served alone on each point gives the row's figures
    for _, row in df.iterrows():
        be = get_backend("attacc", system="attacc", stacks=int(row["point"][-1]))
        s = serve("gpt3-13b", be, reqs, tp=8, placement="gpu", max_batch=8, progress=False, tuner=_TUNER).summary()
        assert row["tokens_per_s"] == pytest.approx(s["tokens_per_s"], rel=1e-12)
    assert df["tokens_per_s"].iloc[1] > df["tokens_per_s"].iloc[0]           # 5 stacks' bandwidth: faster GEMVs
    strict = ServingObjective("gpt3-13b", reqs, tpot_p99_ms=1e-6, tp=8, placement="gpu", max_batch=8, tuner=_TUNER)
    row = strict.evaluate(get_backend("attacc", system="attacc"))
    assert not row["meets_slo"] and row["goodput_tokens_per_s"] == 0.0


def test_gqa_attention_on_attaccs_model_reads_the_cache_once_at_full_waves():
    """AttAcc's A100a model: a thread block per product.  With the SMs full (216 requests x 1 KV
    head = 2 waves of 108), one KV head per 8 query heads moves about 1/8 of the MHA bytes."""
    from pimjax.hw import gpu as G
    h = a100("hbm3", model="attacc")
    gqa = G.attention_ns(h, 8, 128, 2048, 216, softmax=False, kv_heads=1)
    mha = G.attention_ns(h, 8, 128, 2048, 216, softmax=False)
    assert 6.0 < mha / gqa < 8.5
    # one request: one block either way (util 1/108 for GQA, 8/108 for MHA, 1/8 of the bytes): the same
    one = G.attention_ns(h, 8, 128, 2048, 1, softmax=False, kv_heads=1)
    assert one == pytest.approx(G.attention_ns(h, 8, 128, 2048, 1, softmax=False), rel=0.10)


# the heaviest cases (30 s and more each on 2 cores) run with the slow ones (CI runs them)
@pytest.mark.parametrize("name,tp", slow_params([("llama2-7b", 1), ("llama2-13b", 2), ("llama2-70b", 8), ("gpt3-13b", 8),
                                                  ("gpt3-175b", 8)],
                                                 {("llama2-7b", 1), ("llama2-13b", 2), ("llama2-70b", 8), ("gpt3-175b", 8)}))
def test_every_model_serves_from_shapes(name, tp):
    """The issue's models on AttAcc's system (5 stacks per GPU): a short trace served with the
    attention on PIM; one token's KV per shard by hand (K and V, every layer, the shard's KV heads
    of 128, FP16; LLaMA-2 70B: 8 KV heads over 8 GPUs, one each)."""
    cfg = get_config(name)
    kv_heads = {"llama2-7b": 32, "llama2-13b": 20, "llama2-70b": 1, "gpt3-13b": 5, "gpt3-175b": 12}[name]
    reqs = poisson_requests(6, rate=50.0, prompt=fixed(100), output=fixed(4), seed=0)
    res = serve(cfg, "attacc", reqs, system="attacc", tp=tp, placement="base+dcc", max_batch=4, progress=False,
                tuner=_TUNER)
    assert res.layout.kv_token_bytes == 2 * cfg.n_layers * kv_heads * 128 * 2
    assert res.steps["decodes"].sum() == 6 * 3 and res.steps["prefill_tokens"].sum() == 600
    assert (res.requests["tpot_ms"] > 0).all() and (res.steps["pim_ms"] > 0).any()
