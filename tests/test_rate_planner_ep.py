"""The request-level planner prices expert-parallel and attention-DP instances of a
mixture-of-experts model (``price_instances`` sweeps ``expert_space`` next to
``serving_space``), with finite step tables below the attention-DP degree and the KV
capacity of all the instance's attention replicas; a dense model prices what it did."""

from __future__ import annotations

import numpy as np
import pytest

from simcore.model.presets import get_family, load_model
from simcore.studies.serving.rate import plan_at_rate
from simcore.studies.serving.simulate import DECODE_BATCHES, Scheduler, price_instances

FAM = get_family("H100-SXM")
#: 512-token prompts, 64 output tokens: the grids plan_at_rate builds for them
PRICE = dict(family=FAM, hardware=FAM.hardware, efficiency=None, dtype="", max_devices=8,
             max_tokens=576, scheduler=Scheduler(), tokens=[512], contexts=[544])
RATE = dict(family="H100-SXM", gpus=8, rate_rps=5, duration_s=10, isl=512, osl=64,
            max_ttft_ms=2000, max_tpot_ms=100)


@pytest.fixture(scope="module")
def mixtral() -> dict[str, object]:
    return {i.label: i for i in price_instances(load_model("Mixtral 8x7B"), **PRICE)}


def test_moe_prices_ep_and_adp_layouts_with_finite_tables(mixtral):
    insts = list(mixtral.values())
    assert any(i.layout["ep"] > 1 for i in insts)
    assert any(i.layout["dp"] > 1 for i in insts)
    for i in insts:
        assert np.isfinite(i.tables.pre_ns).all() and np.isfinite(i.tables.dec_ns).all(), i.label
        assert i.kv_blocks >= 1
    # labels render attention DP and EP, as the steady-state rows do
    assert {"TP8·EP8", "TP1·ADP8·EP8", "TP2·ADP4·EP8"} <= set(mixtral)


def test_batches_below_attention_dp_cost_the_step_at_dp(mixtral):
    dep = mixtral["TP1·ADP8·EP8"]
    rows = list(dep.tables.dec_batch)
    at_dp = dep.tables.dec_ns[rows.index(8)]
    for b in (1, 2, 4):  # replicas without a sequence idle; the step still runs
        assert np.array_equal(dep.tables.dec_ns[rows.index(b)], at_dp)
    assert dep.decode_ns(1, 544) == dep.decode_ns(8, 544)
    assert np.array_equal(dep.tables.pre_ns[list(dep.tables.pre_batch).index(1)],
                          dep.tables.pre_ns[list(dep.tables.pre_batch).index(8)])


def test_adp_kv_capacity_counts_every_replica(mixtral):
    # 8 GPUs holding the KV 8 ways, by attention replica or by TP head: about the same
    # tokens (the ADP instance keeps the attention weights on every GPU: a little fewer)
    dep, tp8 = mixtral["TP1·ADP8·EP8"].kv_blocks, mixtral["TP8·EP8"].kv_blocks
    assert 0.9 * tp8 < dep < tp8
    assert mixtral["TP1·ADP2·EP2"].kv_blocks * 3 < mixtral["TP1·ADP4·EP4"].kv_blocks


def test_dense_model_prices_no_expert_parallelism():
    insts = price_instances(load_model("Llama 3.1 8B"), **PRICE)
    assert insts and all(i.layout["ep"] == 1 and i.layout["dp"] == 1 for i in insts)
    assert all(list(i.tables.dec_batch) == list(DECODE_BATCHES) for i in insts)


def test_routing_skew_slows_an_ep_instance(mixtral):
    skew = {i.label: i for i in price_instances(load_model("Mixtral 8x7B"),
                                                moe_imbalance=2.564, **PRICE)}
    for label in ("TP8·EP8", "TP1·ADP8·EP8"):
        assert skew[label].decode_ns(64, 544) > mixtral[label].decode_ns(64, 544)
    assert skew["TP8"].decode_ns(64, 544) == mixtral["TP8"].decode_ns(64, 544)


def test_plan_at_rate_searches_ep_and_the_skew_moves_it():
    def ep_layouts(p):
        return {lay for c in p.candidates for lay in (c.prefill_layout, c.decode_layout)
                if "EP" in lay}

    base = plan_at_rate("Mixtral 8x7B", **RATE)
    assert base.best and not base.notes and ep_layouts(base)  # balanced: EP simulated
    skew = plan_at_rate("Mixtral 8x7B", moe_imbalance=2.564, **RATE)
    assert skew.moe_imbalance == 2.564 and not skew.notes  # EP priced: no "moves nothing"
    # the skewed EP layouts lose their place to ones without expert parallelism
    assert len(ep_layouts(skew)) < len(ep_layouts(base))
    assert [c.layout for c in skew.candidates] != [c.layout for c in base.candidates]
    # the header states the routing the plan assumed
    from simcore.studies.serving.present import rate_summary_lines

    assert "MoE routing: balanced" in rate_summary_lines(base)[1]
    assert "MoE routing: busiest EP rank 2.564x the mean" in rate_summary_lines(skew)[1]


def test_adp_instance_holds_a_request_on_one_replica(mixtral):
    """A request's KV lives on one attention replica: an instance of dp replicas holds
    dp x one replica's blocks in all, but a single request only one replica's."""
    inst = next(i for i in mixtral.values() if i.layout["dp"] > 1)
    per = inst.replica_blocks
    assert per == inst.kv_blocks // inst.layout["dp"] and per < inst.kv_blocks
    assert inst.holds(per * inst.block_size) and not inst.holds((per + 1) * inst.block_size)
