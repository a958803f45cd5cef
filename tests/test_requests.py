"""The request-level serving simulator (``simcore.kernels.requests``) against its
plain-Python discrete-event twin (``requests_ref``) on hypothesis-drawn traces: the same
per-request times, bit for bit, and the scheduler's invariants."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore.kernels import requests as kernel
from simcore.kernels import requests_ref as twin

#: each piece and its twin share a name
PIECES = ("segment", "table_ns", "decode_part_ns", "prefill_part_ns", "step_ns", "blocks_for",
          "spec_emit", "simulate_instance", "simulate_round_robin", "kv_transfer_done")


def _grid(draw, lo: float, n: int) -> np.ndarray:
    steps = draw(st.lists(st.floats(1.25, 4.0), min_size=n - 1, max_size=n - 1))
    return lo * np.cumprod([1.0, *steps])


@st.composite
def tables(draw) -> kernel.StepTables:
    """Cost tables growing in every direction (as the engine's do), in ns."""
    pb = _grid(draw, 1.0, draw(st.integers(2, 4)))
    pt = _grid(draw, 8.0, draw(st.integers(2, 5)))
    db = _grid(draw, 1.0, draw(st.integers(2, 4)))
    dc = _grid(draw, 16.0, draw(st.integers(2, 4)))
    a, b, c = (draw(st.floats(1e3, 1e7)) for _ in range(3))
    pre = a + b * pb[:, None] * pt[None, :] / 64 + c * pb[:, None] * (pt[None, :] / 64) ** 2
    d0, d1, d2 = (draw(st.floats(1e3, 1e7)) for _ in range(3))
    dec = d0 + d1 * db[:, None] / 8 + d2 * db[:, None] * dc[None, :] / 4096
    return kernel.StepTables(pb, pt, pre, db, dc, dec)


@st.composite
def traces(draw) -> dict:
    n = draw(st.integers(1, 24))
    gaps = draw(st.lists(st.sampled_from([0.0, 1e3, 1e5, 1e6, 1e7, 3e7]), min_size=n, max_size=n))
    prompt = np.array(draw(st.lists(st.integers(1, 160), min_size=n, max_size=n)), np.int64)
    cached = np.array([draw(st.integers(0, int(p) - 1)) for p in prompt], np.int64)
    return dict(arrival_ns=np.cumsum(gaps), prompt=prompt, cached=cached,
                max_new=np.array(draw(st.lists(st.integers(1, 30), min_size=n, max_size=n)),
                                 np.int64),
                tables=draw(tables()), token_budget=draw(st.integers(1, 300)),
                max_seqs=draw(st.integers(1, 12)), n_blocks=draw(st.integers(1, 80)),
                block_size=draw(st.sampled_from([1, 2, 4, 16])))


def assert_same_runs(got, want) -> None:
    """A kernel driver's and its twin's results are the same, bit for bit: per request
    the first and last token's time, the start and the preemptions, and the steps run."""
    for name, a, b in zip(("first_ns", "last_ns", "start_ns", "preemptions"), got[:4],
                          want[:4], strict=True):
        assert np.array_equal(np.asarray(a), np.asarray(b)), name
    assert got[4] == want[4]


def test_pieces__every_jitted_function_has_a_twin():
    for name in PIECES:
        assert callable(getattr(kernel, name)) and callable(getattr(twin, name)), name


@given(tables(), st.floats(0.5, 600.0), st.floats(1.0, 9000.0))
def test_table_ns__matches_twin(tab, x, y):
    assert kernel.table_ns(tab.pre_batch, tab.pre_tokens, tab.pre_ns, x, y) == \
        twin.table_ns(list(tab.pre_batch), list(tab.pre_tokens), tab.pre_ns, x, y)


@given(tables(), st.integers(0, 64), st.integers(1, 5000), st.integers(0, 4000),
       st.integers(0, 3000))
def test_step_ns__matches_twin(tab, n_dec, ctx, tokens, prefix):
    if n_dec == 0 and tokens == 0:
        tokens = 1
    ctx_sum = float(n_dec * ctx)
    pairs = tokens * prefix + tokens * (tokens + 1) / 2.0
    assert kernel.step_ns(tab, n_dec, ctx_sum, tokens, pairs) == \
        twin.step_ns(tab, n_dec, ctx_sum, tokens, pairs)


@given(traces())
def test_simulate_instance__kernel_matches_discrete_event_twin(case):
    got = kernel.simulate_instance(**case)
    want = twin.simulate_instance(**case)
    assert_same_runs(got, want)


@settings(max_examples=40)
@given(traces(), st.integers(1, 12), st.booleans(), st.booleans(), st.integers(100, 10_000))
def test_simulate_instance__multi_step_and_async_output_kernel_matches_twin(case, multi_step,
                                                                            async_output, first,
                                                                            extra):
    """vLLM's multi-step scheduling (decode blocks of ``multi_step`` steps) and asynchronous
    output processing, under either policy, with the drawn cache or a roomy one: kernel ==
    twin, bit for bit."""
    if extra % 2:
        case = dict(case, max_new=case["max_new"] * 3, n_blocks=case["n_blocks"] + extra)
    kw = dict(prefill_first=first, multi_step=multi_step, async_output=async_output)
    got = kernel.simulate_instance(**case, **kw)
    want = twin.simulate_instance(**case, **kw)
    assert_same_runs(got, want)
    fits = kernel.blocks_for(case["prompt"] + case["max_new"] - 1, case["block_size"]) \
        <= case["n_blocks"]
    assert np.array_equal(got[0] >= 0, fits)  # every request that can fit is served
    assert np.all(got[1][fits] >= got[0][fits])


def test_simulate_instance__multi_step_and_async_output_by_hand():
    """Two requests at t = 0 (prompts of 16, 5 and 12 tokens to sample), prefill-first, a
    2-sequence prefill of 2 ms, every decode step 1 ms whatever its batch, blocks of 4:
    the prefill ends at 2 ms with both first tokens; block 1 (2-6 ms) samples 4 more of
    each (request 0 done: 5 tokens, last at 6 ms); block 2 (6-10 ms) request 1 alone,
    4 more (9); block 3 (10-14 ms) its last 3, seen at 14 ms (13 steps in all). Without
    async output TTFT 2 ms both, TPOT (6-2)/4 = 1 ms and (14-2)/11 ms; with it the first
    tokens reach the client at the first sub-step's end (3 ms): TPOT 0.75 and 1 ms.
    Single steps with async output (multi_step 1): each step's tokens seen one step late,
    the last one at once (the instance then idles): request 0's 5th token sampled at 6 ms
    is seen at 7 ms, request 1's last at 13 ms."""
    tab = kernel.StepTables(np.array([1.0, 2.0]), np.array([16.0, 4096.0]),
                            np.array([[1e6, 2e6], [2e6, 4e6]]), np.array([1.0, 64.0]),
                            np.array([16.0, 4096.0]), np.array([[1e6, 1e6], [1e6, 1e6]]))
    case = dict(arrival_ns=np.zeros(2), prompt=np.array([16, 16]), cached=np.zeros(2, np.int64),
                max_new=np.array([5, 12]), tables=tab, token_budget=2048, max_seqs=16,
                n_blocks=1000, block_size=16, prefill_first=True)
    for (ms, asy), (first, last, steps) in {
            (1, False): ([2e6, 2e6], [6e6, 13e6], 12),
            (4, False): ([2e6, 2e6], [6e6, 14e6], 13),
            (4, True): ([3e6, 3e6], [6e6, 14e6], 13),
            (1, True): ([3e6, 3e6], [7e6, 13e6], 12)}.items():
        got = kernel.simulate_instance(**case, multi_step=ms, async_output=asy)
        assert list(got[0]) == first and list(got[1]) == last and got[4] == steps, (ms, asy)
        want = twin.simulate_instance(**case, multi_step=ms, async_output=asy)
        assert list(want[0]) == first and list(want[1]) == last and want[4] == steps
    ttft = np.array([3e6, 3e6])
    tpot = (np.array([6e6, 14e6]) - ttft) / (case["max_new"] - 1)
    np.testing.assert_array_equal(tpot, [0.75e6, 1e6])


@given(traces(), st.integers(1, 5))
def test_simulate_round_robin__kernel_matches_twin(case, instances):
    got = kernel.simulate_round_robin(**case, instances=instances)
    want = twin.simulate_round_robin(**case, instances=instances)
    assert_same_runs(got, want)


@given(traces(), st.integers(100, 10_000))
def test_simulate_instance__decode_stretches_match_single_steps(case, extra):
    """Long generations with a roomy cache: the kernel steps decode-only stretches in one
    go (decode_stretch); the twin steps one by one."""
    case = dict(case, max_new=case["max_new"] * 10, n_blocks=case["n_blocks"] + extra)
    got = kernel.simulate_instance(**case)
    want = twin.simulate_instance(**case)
    for a, b in zip(got[:4], want[:4], strict=True):
        assert np.array_equal(np.asarray(a), np.asarray(b))


@given(traces())
def test_simulate_instance__invariants(case):
    first, last, start, _, steps = kernel.simulate_instance(**case)
    fits = kernel.blocks_for(case["prompt"] + case["max_new"] - 1, case["block_size"]) \
        <= case["n_blocks"]
    served = first >= 0
    assert np.array_equal(served, fits)  # every request that can fit is served, others dropped
    arr = case["arrival_ns"]
    assert np.all(start[served] >= arr[served])
    assert np.all(first[served] > start[served]) and np.all(last[served] >= first[served])
    # one token per request per step at most: the last token needs max_new steps
    assert steps >= (case["max_new"][served].max() if served.any() else 0)


@given(tables(), st.integers(2, 400), st.integers(1, 50))
def test_simulate_instance__one_request_alone_takes_its_unloaded_times(tab, isl, osl):
    """A lone request: TTFT is the prefill of its prompt (chunks of the budget), then
    osl - 1 decode steps at growing contexts."""
    first, last, *_ = kernel.simulate_instance(
        np.array([5.0]), np.array([isl]), np.array([0]), np.array([osl]), tab, 10_000, 8,
        10_000, 16)
    assert first[0] - 5.0 == pytest.approx(twin.prefill_part_ns(tab, isl, isl * (isl + 1) / 2))
    dec = sum(twin.decode_part_ns(tab, 1, float(isl + j + 1)) for j in range(osl - 1))
    assert last[0] - first[0] == pytest.approx(dec, rel=1e-12)


def test_simulate_instance__small_cache_preempts_and_still_finishes():
    tab = kernel.StepTables(np.array([1.0, 2.0]), np.array([16.0, 4096.0]),
                            np.array([[1e6, 2e6], [2e6, 4e6]]), np.array([1.0, 64.0]),
                            np.array([16.0, 4096.0]), np.array([[1e6, 2e6], [3e6, 6e6]]))
    n = 12
    case = dict(arrival_ns=np.zeros(n), prompt=np.full(n, 40), cached=np.zeros(n, np.int64),
                max_new=np.full(n, 40), tables=tab, token_budget=512, max_seqs=16,
                n_blocks=30, block_size=16)
    first, last, _, pre, _ = kernel.simulate_instance(**case)
    assert (first > 0).all() and pre.sum() > 0
    ref = twin.simulate_instance(**case)
    assert np.array_equal(last, ref[1]) and np.array_equal(pre, ref[3])


@given(st.lists(st.tuples(st.floats(0, 1e9), st.floats(0, 1e8), st.floats(0, 1e8)),
                min_size=1, max_size=20), st.integers(1, 128), st.booleans())
def test_kv_transfer_done__matches_twin_and_bounds(rows, n_layers, layerwise):
    ready = np.sort(np.array([r[0] for r in rows]))
    span = np.array([r[1] for r in rows])
    whole = np.array([r[2] for r in rows])
    got = kernel.kv_transfer_done(ready, span, whole, n_layers, layerwise)
    assert np.array_equal(got, twin.kv_transfer_done(ready, span, whole, n_layers, layerwise))
    assert np.all(got >= ready + whole / n_layers)  # the last layer leaves after the prefill
    if not layerwise:
        assert np.all(got >= ready + whole)


@settings(max_examples=60)
@given(traces(), st.integers(1, 64), st.booleans(), st.integers(1, 3))
def test_simulate__long_prefill_cap_kernel_matches_twin(case, cap, roomy, instances):
    """vLLM V1's ``long_prefill_token_threshold`` (``prefill_cap``): a request gets at most
    ``cap`` of its prompt tokens a step, decodes untouched; kernel == twin, bit for bit,
    on one instance and dealt round-robin, with the drawn cache or a roomy one (where
    the decode stretches run)."""
    if roomy:
        case = dict(case, n_blocks=case["n_blocks"] + 10_000)
    got = kernel.simulate_round_robin(**case, instances=instances, prefill_cap=cap)
    want = twin.simulate_round_robin(**case, instances=instances, prefill_cap=cap)
    assert_same_runs(got, want)


def test_simulate_instance__long_prefill_cap_by_hand():
    """One 1,000-token prompt at t = 0, a 4,096-token budget, a flat 1 ms step: whole it
    is prefilled in one step (first token at 1 ms); capped at 256 tokens a step in four
    (256 + 256 + 256 + 232: first token at 4 ms); a cap above the prompt changes nothing."""
    tab = kernel.StepTables(np.array([1.0, 2.0]), np.array([8.0, 4096.0]), np.full((2, 2), 1e6),
                            np.array([1.0, 2.0]), np.array([16.0, 4096.0]), np.full((2, 2), 1e6))
    case = dict(arrival_ns=np.zeros(1), prompt=np.array([1000], np.int64),
                cached=np.zeros(1, np.int64), max_new=np.array([3], np.int64), tables=tab,
                token_budget=4096, max_seqs=8, n_blocks=1000, block_size=16)
    for cap, first in ((0, 1e6), (256, 4e6), (2000, 1e6)):
        f, last, _, _, steps = kernel.simulate_instance(**case, prefill_cap=cap)
        assert f[0] == first and last[0] == first + 2e6, cap
        assert twin.simulate_instance(**case, prefill_cap=cap)[0][0] == first
