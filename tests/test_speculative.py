"""Speculative decoding (``simcore.studies.serving.speculative``): the expected tokens per
step against a discrete reference, the request kernel against its twin with speculation,
the engine-priced step's physics, and the command line's bad input."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_requests import assert_same_runs, tables, traces

from simcore.cli import main
from simcore.kernels import requests as kernel
from simcore.kernels import requests_ref as twin
from simcore.studies.serving import ServingError, plan, plan_at_rate
from simcore.studies.serving.speculative import Speculative, expected_tokens

LAYOUT_TP1 = dict(tp=1, cp=1, pp=1, dp=1, ep=1, kv_shard_mode="head", ffn_shard_scope="TP",
                  tp_placement="inner", cp_placement="inner", cp_ring_variant="kv")


def _enumerated_tokens(k: int, a: float) -> float:
    """Every outcome of ``k`` drafted tokens, each accepted with probability ``a``: the
    step keeps the accepted prefix and adds the target's own token."""
    mean = 0.0
    for outcome in itertools.product((True, False), repeat=k):
        p = math.prod(a if ok else 1.0 - a for ok in outcome)
        prefix = next((i for i, ok in enumerate(outcome) if not ok), k)
        mean += p * (prefix + 1)
    return mean


@given(st.integers(1, 10), st.floats(0.0, 0.99))
def test_expected_tokens__leviathan_eq1_matches_the_enumerated_outcomes(k, a):
    assert expected_tokens(k, a) == pytest.approx(_enumerated_tokens(k, a), rel=1e-12)


def test_expected_tokens__monte_carlo_agrees():
    rng = np.random.default_rng(0)
    k, a = 4, 0.7
    ok = rng.random((200_000, k)) < a
    prefix = np.where(ok.all(axis=1), k, np.argmin(ok, axis=1))
    assert float((prefix + 1).mean()) == pytest.approx(expected_tokens(k, a), rel=5e-3)


@given(st.integers(1, 8), st.floats(0.0, 0.95), st.integers(1, 500))
def test_spec_emit__spreads_the_expected_tokens_exactly(k, a, steps):
    gain = expected_tokens(k, a)
    emitted = [kernel.spec_emit(d, gain, 10**9) for d in range(steps)]
    assert emitted == [twin.spec_emit(d, gain, 10**9) for d in range(steps)]
    assert sum(emitted) == math.floor(gain * steps)  # floor(E·d) after d steps
    assert all(1 <= e <= k + 1 for e in emitted)
    assert kernel.spec_emit(5, gain, 1) == 1  # never past what the request still needs


@given(traces(), st.integers(1, 5), st.floats(0.0, 0.95))
def test_simulate_instance__speculating_kernel_matches_twin(case, k, a):
    gain = expected_tokens(k, a)
    got = kernel.simulate_instance(**case, spec_k=k, spec_gain=gain)
    want = twin.simulate_instance(**case, spec_k=k, spec_gain=gain)
    assert_same_runs(got, want)


@given(tables(), st.integers(2, 300), st.integers(2, 200), st.integers(1, 4),
       st.floats(0.0, 0.9))
def test_simulate_instance__a_lone_speculating_request_steps_its_expected_tokens(
        tab, isl, osl, k, a):
    """After its first token, a lone request's decode steps each verify k + 1 queries and
    emit floor(E·(d+1)) - floor(E·d) tokens: ceil-ish (osl - 1) / E steps in all."""
    gain = expected_tokens(k, a)
    first, last, *_ , steps = kernel.simulate_instance(
        np.array([0.0]), np.array([isl]), np.array([0]), np.array([osl]), tab, 10_000, 8,
        10_000, 16, k, gain)
    want_ns, ctx, left, d = 0.0, isl, osl - 1, 0
    while left:
        want_ns += twin.decode_part_ns(tab, 1, float(ctx + 1))
        e = twin.spec_emit(d, gain, left)
        ctx, left, d = ctx + e, left - e, d + 1
    assert last[0] - first[0] == pytest.approx(want_ns, rel=1e-12)
    assert d <= math.ceil((osl - 1) / gain) + 1


def test_speculative__bad_input_is_one_line():
    for k, a, match in ((0, 0.5, "spec-draft-len"), (3, 1.0, "spec-accept"),
                        (3, -0.1, "spec-accept"), (3, math.nan, "spec-accept"),
                        (True, 0.5, "spec-draft-len")):
        with pytest.raises(ServingError, match=match):
            Speculative(k, a)


@pytest.mark.parametrize("argv, match", [
    (["--spec-draft-len", "0", "--spec-accept", "0.5"], "spec-draft-len"),
    (["--spec-draft-len", "3", "--spec-accept", "1"], "spec-accept"),
    (["--spec-draft-len", "3"], "needs --spec-accept"),
    (["--spec-accept", "0.5"], "needs --spec-draft-len"),
    (["--spec-draft-len", "2", "--spec-accept", "0.5", "--spec-draft", "nope"], "nope"),
])
def test_main__bad_speculation_is_one_line_exit_2(argv, match, capsys):
    rc = main(["serving", "--model", "Llama 3.1 8B", "--family", "H100-SXM", "--gpus", "1",
               "--isl", "500", "--osl", "100", "--max-tpot-ms", "50", *argv])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and match in err


def _tpot(spec: Speculative | None, batch: int) -> tuple[float, float]:
    p = plan("Llama 3.1 8B", family="H100-SXM", gpus=1, isl=1000, osl=200, batch=[batch],
             modes=("agg",), speculative=spec)
    cell = p.dataset.sel(batch=batch, **LAYOUT_TP1)
    return float(cell.decode_step_ms), float(cell.agg_tokens_per_s_per_gpu)


def test_plan__acceptance_zero_costs_more_than_no_speculation():
    """A = 0: each step still drafts K tokens and verifies K + 1 queries, and emits one
    token: slower per token and fewer tokens/s than plain decoding."""
    plain, plain_tps = _tpot(None, 8)
    zero, zero_tps = _tpot(Speculative(3, 0.0), 8)
    assert zero > plain * 1.05 and zero_tps < plain_tps


def test_plan__high_acceptance_speeds_a_memory_bound_decode():
    """Batch 1 on an 8B model is memory-bound: a verify of 4 queries costs about one
    decode step, the MTP drafts little, and 3.4 tokens come out per step."""
    plain, _ = _tpot(None, 1)
    fast, _ = _tpot(Speculative(4, 0.8), 1)
    assert fast < plain / 2


def test_plan_at_rate__speculation_shortens_tpot_and_reports_it():
    kw = dict(family="H100-SXM", gpus=1, rate_rps=2, duration_s=40, isl=1000, osl=200,
              max_tpot_ms=100, modes=("agg",))
    plain = plan_at_rate("Llama 3.1 8B", **kw).candidates[0]
    spec = plan_at_rate("Llama 3.1 8B", speculative=Speculative(3, 0.8), **kw)
    fast = spec.candidates[0]
    assert fast.tpot_p50_ms < plain.tpot_p50_ms / 2
    assert fast.kv_blocks < plain.kv_blocks  # the MTP layer's weights and KV take HBM
    assert "speculative decoding" in spec.scheduler.describe()


@given(traces(), st.booleans(), st.integers(0, 3))
def test_simulate_instance__prefill_first_kernel_matches_twin(case, prefill_first, k):
    """vLLM V0's prefill-first scheduling (and with speculation): kernel == twin."""
    gain = expected_tokens(k, 0.6) if k else 1.0
    got = kernel.simulate_instance(**case, spec_k=k, spec_gain=gain, prefill_first=prefill_first)
    want = twin.simulate_instance(**case, spec_k=k, spec_gain=gain, prefill_first=prefill_first)
    for x, y in zip(got[:4], want[:4], strict=True):
        assert np.array_equal(np.asarray(x), np.asarray(y))
    assert got[4] == want[4]


@given(traces(), st.integers(100, 10_000))
def test_simulate_instance__prefill_first_stretches_match_single_steps(case, extra):
    case = dict(case, max_new=case["max_new"] * 10, n_blocks=case["n_blocks"] + extra)
    got = kernel.simulate_instance(**case, prefill_first=True)
    want = twin.simulate_instance(**case, prefill_first=True)
    for x, y in zip(got[:4], want[:4], strict=True):
        assert np.array_equal(np.asarray(x), np.asarray(y))


def test_plan__a_draft_model_on_a_budget_where_large_verifies_do_not_fit():
    """A draft model (catalogue id) on 70B / 8 H200: batches whose verify fits no layout
    are left out, not an error; the proposer's weights cost memory, so the largest batch
    that fits is no larger than without speculation."""
    kw = dict(family="H200", gpus=8, isl=2000, osl=200, max_tpot_ms=30, modes=("agg",),
              batch=(8, 64, 512))
    spec = plan("Llama 3.1 70B", speculative=Speculative(3, 0.7, "meta-llama/Llama-3.2-1B"),
                **kw)
    plain = plan("Llama 3.1 70B", **kw)
    assert spec.best and "meta-llama/Llama-3.2-1B" in spec.notes[-1]
    assert int(spec.dataset.max_batch.max()) <= int(plain.dataset.max_batch.max())


@given(traces(), st.integers(100, 10_000), st.integers(1, 4), st.floats(0.0, 0.95),
       st.booleans())
def test_simulate_instance__speculative_stretches_match_single_steps(case, extra, k, a, first):
    """Long generations with a roomy cache: the kernel steps speculative decode-only
    stretches in one go (spec_stretch); the twin steps one by one."""
    case = dict(case, max_new=case["max_new"] * 10, n_blocks=case["n_blocks"] + extra)
    gain = expected_tokens(k, a)
    got = kernel.simulate_instance(**case, spec_k=k, spec_gain=gain, prefill_first=first)
    want = twin.simulate_instance(**case, spec_k=k, spec_gain=gain, prefill_first=first)
    for x, y in zip(got[:4], want[:4], strict=True):
        assert np.array_equal(np.asarray(x), np.asarray(y))
    assert got[4] == want[4]


def test_scheduler__refuses_a_budget_below_one_verify_and_an_unknown_policy():
    from simcore.studies.serving.model import ServingError
    from simcore.studies.serving.simulate import Scheduler
    from simcore.studies.serving.speculative import Speculative

    with pytest.raises(ServingError, match="cannot hold one verify of 5 tokens"):
        Scheduler(token_budget=4, speculative=Speculative(4, 0.7))
    with pytest.raises(ServingError, match=r"policy \(--schedule\) must be one of"):
        Scheduler(policy="fifo")


def test_mtp__attention_dp_layouts_stay_in_the_plan():
    """The MTP layer's weights are read at a batch each layout holds: an attention-DP layout
    (valid from batch dp up) was priced at batch 1, NaN, and silently dropped (DeepSeek-V3
    on 16 H200 then answered 1xTP16·EP2 at 171 tokens/s/GPU instead of TP2·ADP8·EP16)."""
    r = plan("deepseek-ai/DeepSeek-V3", family="H200", gpus=16, isl=4000, osl=1000,
             attn_dp=[8], ep=[16], batch=[64, 128], speculative=Speculative(1, 0.8))
    assert r.best and all(c.attn_dp == 8 and c.ep == 16 for c in r.best)
    assert all(np.isfinite(c.tpot_ms) for c in r.best)


def test_plan__a_synchronous_loop_charges_its_host_time_once_per_speculative_step():
    """The proposer's passes run inside the engine's step: vLLM 0.10's host time per
    scheduled sequence (runtime vllm-0.10) lengthens a speculative step by the same amount
    as a plain decode step, not K + 1 times."""
    def step_ms(runtime, spec):
        p = plan("Llama 3.1 8B", family="H100-SXM", gpus=1, isl=1000, osl=200, batch=[8],
                 modes=("agg",), speculative=spec, runtime=runtime)
        return float(p.dataset.sel(batch=8, **LAYOUT_TP1).decode_step_ms)

    spec = Speculative(3, 0.6)
    plain = step_ms("vllm-0.10", None) - step_ms("vllm", None)
    assert plain == pytest.approx(8 * 12.8e-3, rel=1e-6)  # 8 sequences x 12.8 us, in ms
    # the speculative row is per output token: one step's host time over its tokens
    per_token = plain / spec.tokens_per_step
    assert step_ms("vllm-0.10", spec) - step_ms("vllm", spec) == pytest.approx(per_token,
                                                                              rel=1e-6)
