"""``--moe-imbalance`` on ``simcore serving`` and ``moe_imbalance=`` on the planner (issue 33
item 3): a mixture-of-experts plan with expert parallelism slows under routing skew, the
header states the routing, bad input is one line, exit 2."""

from __future__ import annotations

import math

import pytest
from test_runtime_cli_serving_tune import _one_error_line, _serve

from simcore.cli import main
from simcore.studies.serving import ServingError, plan
from simcore.studies.serving.rate import plan_at_rate
from simcore.studies.serving.speculative import Speculative

MIXTRAL = ["serving", "--model", "Mixtral 8x7B", "--family", "H100-SXM", "--gpus", "8",
           "--isl", "512", "--osl", "64", "--mode", "agg", "--top", "1", "--ep", "8"]
DENSE = ["serving", "--model", "Llama 3.1 8B", "--family", "H100-SXM", "--gpus", "1",
         "--isl", "512", "--osl", "64", "--mode", "agg", "--top", "1"]
PLAN = dict(family="H100-SXM", gpus=8, isl=512, osl=64, modes=("agg",), top=1, ep=8)


def test_serving_cli__no_eplb_slows_the_ep_plan_and_the_header_states_it(capsys):
    base, err_b = _serve(MIXTRAL, capsys)
    skew, err_s = _serve([*MIXTRAL, "--moe-imbalance", "no-eplb"], capsys)
    assert base["ep"] > 1 and skew["ep"] > 1
    assert skew["tpot_ms"] > base["tpot_ms"]
    assert skew["tokens_per_s_per_gpu"] < base["tokens_per_s_per_gpu"]
    assert "MoE routing: balanced" in err_b
    assert "MoE routing: busiest EP rank 2.564x the mean" in err_s
    # a dense model's header has no routing part
    _, err_d = _serve([*DENSE, "--batch", "1,8"], capsys)
    assert "assumed:" in err_d and "MoE routing" not in err_d


@pytest.mark.parametrize(("argv", "needle"), [
    ([*MIXTRAL, "--moe-imbalance", "0.5"], "argument --moe-imbalance: pass balanced, eplb"),
    ([*DENSE, "--batch", "1,8", "--moe-imbalance", "eplb"],
     "is dense (no experts); --moe-imbalance applies to mixture-of-experts models"),
    ([*DENSE, "--moe-imbalance", "eplb", "--rate", "2", "--max-ttft-ms", "1000"],
     "is dense (no experts)"),
])
def test_serving_cli__bad_moe_imbalance_is_one_line_exit_2(argv, needle, capsys):
    assert main(argv) == 2
    assert needle in _one_error_line(capsys, "serving")


def test_plan__moe_imbalance_moves_the_answer_as_the_cli_does():
    base = plan("Mixtral 8x7B", **PLAN)
    skew = plan("Mixtral 8x7B", moe_imbalance=2.564, **PLAN)
    named = plan("Mixtral 8x7B", moe_imbalance="no-eplb", **PLAN)
    assert (base.moe_imbalance, skew.moe_imbalance, named.moe_imbalance) == (1.0, 2.564, 2.564)
    assert skew.best[0].tpot_ms > base.best[0].tpot_ms
    assert named.best[0].tpot_ms == skew.best[0].tpot_ms
    assert skew.dataset.attrs["moe_imbalance"] == 2.564


@pytest.mark.parametrize("bad", [0.5, math.nan, math.inf, 5000, True, None, "skewed"])
def test_plan__bad_moe_imbalance_is_refused_before_any_work(bad):
    with pytest.raises(ServingError, match=rf"moe_imbalance \(--moe-imbalance\) {bad!r}: pass "
                                           "balanced, eplb, no-eplb or a number from 1 to 1024"):
        plan("Mixtral 8x7B", moe_imbalance=bad, **PLAN)
    with pytest.raises(ServingError, match="is dense"):
        plan("Llama 3.1 8B", family="H100-SXM", gpus=1, isl=512, osl=64, moe_imbalance=1.109)


def test_plan__speculative_decoding_carries_the_skew():
    kw = dict(PLAN, batch=[8, 64], speculative=Speculative(2, 0.7))
    base = plan("Mixtral 8x7B", **kw)
    skew = plan("Mixtral 8x7B", moe_imbalance="no-eplb", **kw)
    assert skew.best[0].ep > 1 and skew.best[0].tpot_ms > base.best[0].tpot_ms


def test_plan_at_rate__records_it_and_says_it_moves_nothing_without_ep():
    # one GPU holds no expert-parallel layout: the request simulation prices none, a note
    # says so (with EP layouts priced the skew moves them: tests/test_rate_planner_ep.py)
    p = plan_at_rate("Mixtral 8x7B", family="H100-SXM", gpus=1, rate_rps=1, duration_s=10,
                     isl=512, osl=64, max_ttft_ms=5000, modes=("agg",), top=1,
                     moe_imbalance="eplb", dtype="fp8")
    assert p.moe_imbalance == 1.109
    assert any(n.startswith("moe_imbalance 1.109 (--moe-imbalance) moves nothing here")
               for n in p.notes)
