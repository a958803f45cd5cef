"""The app's MoE routing selector (Explore, Compare and Serving pages), logic level: a
mixture-of-experts model's measured routing skew slows its EP layouts and is stated in
the page's "assumed:" line; a dense model ignores a stale value."""

from __future__ import annotations

import numpy as np
import pytest

from simcore.app import logic as L
from simcore.errors import SimcoreInputError
from simcore.model.workload import MOE_ROUTING

MOE = "Mixtral 8x7B"
DENSE = "Llama 3.1 8B"
DESIGNS = ["H100-SXM", "H200"]


def _compare(model, lam):
    m = L.load_model_input(model)
    r = L.run_compare(m, designs=DESIGNS, values="8192", fixed=64,
                      ep="8" if m.n_experts > 1 else None, moe_imbalance=lam)
    return r, L.compare_assumptions(r, m)


def _serving(model, lam):
    from simcore.studies.serving import assumptions_line

    m = L.load_model_input(model)
    r = L.run_serving(m, family="H200", gpus=8, isl=1024, osl=128,
                      ep="8" if m.n_experts > 1 else "all", moe_imbalance=lam)
    return max(x["tokens_per_s_per_gpu"] for x in L.serving_table(r)), assumptions_line(r)


def test_routing_options__moe_only_with_values():
    assert L.routing_options(L.load_model_input(DENSE)) == [] == L.routing_options(None)
    opts = L.routing_options(L.load_model_input(MOE))
    assert opts == ["balanced", "eplb", "no-eplb"] and set(opts) == set(MOE_ROUTING)
    assert [L.routing_label(o) for o in opts] == ["balanced (1x)", "eplb (1.109x)",
                                                  "no-eplb (2.564x)"]
    assert "TensorRT-LLM" in L.ROUTING_HELP and "DeepSeek-R1" in L.ROUTING_HELP
    assert "EP 32" in L.ROUTING_HELP and "8 experts a rank" in L.ROUTING_HELP


def test_run_compare__no_eplb_slows_moe_ep_and_is_stated():
    (bal, bal_line), (skew, skew_line) = (_compare(MOE, lam) for lam in (1.0, "no-eplb"))
    assert (bal.dataset.best_ep.values == 8).all() and (skew.dataset.best_ep.values == 8).all()
    assert (skew.dataset.latency_ns.values > bal.dataset.latency_ns.values).all()
    assert skew.workload.moe_load_imbalance == MOE_ROUTING["no-eplb"]
    assert "MoE routing: balanced" in bal_line
    assert "MoE routing: busiest EP rank 2.564x the mean (no-eplb" in skew_line


def test_run_serving__no_eplb_lowers_moe_tokens_per_gpu_and_is_stated():
    (bal, bal_line), (skew, skew_line) = (_serving(MOE, lam) for lam in (1.0, 2.564))
    assert skew < bal
    assert "MoE routing: balanced" in bal_line
    assert "busiest EP rank 2.564x the mean (no-eplb" in skew_line


def test_dense_model_ignores_a_stale_routing_value():
    (bal, bal_line), (stale, stale_line) = (_compare(DENSE, lam) for lam in (1.0, "no-eplb"))
    np.testing.assert_array_equal(stale.dataset.latency_ns.values, bal.dataset.latency_ns.values)
    assert stale.workload.moe_load_imbalance == 1.0 and stale_line == bal_line
    assert "MoE routing" not in stale_line
    assert _serving(DENSE, 2.564) == _serving(DENSE, 1.0)


def test_bad_routing_value_is_one_line():
    with pytest.raises(SimcoreInputError, match="moe_load_imbalance 0.5: pass balanced"):
        L.run_compare(MOE, designs=DESIGNS, values="8192", moe_imbalance=0.5)
    with pytest.raises(SimcoreInputError, match="moe_load_imbalance 'lopsided'"):
        L.run_serving(MOE, family="H200", gpus=8, isl=1024, osl=128, moe_imbalance="lopsided")



def test_run_explore__takes_the_routing_and_states_it():
    m = L.load_model_input(MOE)
    runs = [L.run_explore(m, s_kv=4096, mode="prefill", depth="two_stage", family="H100-SXM",
                          ep="8", moe_imbalance=v) for v in ("balanced", "no-eplb")]
    assert runs[1].best.latency_ns > runs[0].best.latency_ns
    assert "2.564x the mean" in L.explore_assumptions(runs[1], family="H100-SXM", model=m)
