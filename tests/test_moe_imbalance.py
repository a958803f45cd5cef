"""Routing imbalance of a mixture-of-experts model (``Workload.moe_load_imbalance``, issue 33
item 3): the measured values it is named by, the inference step it slows, and
``--moe-imbalance`` on the command line."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from simcore import Workload, evaluate
from simcore.cli import main
from simcore.model.presets import load_model
from simcore.model.workload import MOE_ROUTING, moe_imbalance_value

MIXTRAL = ["evaluate", "--model", "Mixtral 8x7B", "--family", "H100-SXM", "--batch", "64",
           "--s-kv", "4096", "--ep", "8", "--top", "1", "--format", "json"]


def test_named_values__are_the_cited_measurements():
    # TensorRT-LLM blog 4, Table 1: imbalance ratio (max - mean) / mean 1.564 without
    # EPLB, 0.109 with it; the names hold max / mean
    assert MOE_ROUTING == {"balanced": 1.0, "eplb": 1.109, "no-eplb": 2.564}
    assert moe_imbalance_value(" No-EPLB ") == 2.564 and moe_imbalance_value("1.25") == 1.25
    for bad in ("0.9", "nan", "inf", "1025", "skewed", ""):
        with pytest.raises(ValueError, match="pass balanced, eplb, no-eplb or a number from 1"):
            moe_imbalance_value(bad)


def _latency(model, wl, ep):
    ds = evaluate(model, wl, family="H100-SXM", gpus=8,
                  space={"tp": (8 // ep,), "cp": (1,), "pp": (1,), "dp": (ep,), "ep": (ep,)})
    return float(ds.latency_ns.min())


def test_inference__skew_slows_the_expert_parallel_step_only():
    """The busiest EP rank's matmuls and all-to-all bytes scale with λ: latency grows
    with it under EP and does not move without EP or for a dense model."""
    mix, wl = load_model("Mixtral 8x7B"), Workload("prefill", batch=8, s_kv=4096)
    lat = [_latency(mix, replace(wl, moe_load_imbalance=v), ep=8) for v in (1.0, 1.109, 2.564)]
    assert lat[0] < lat[1] < lat[2]
    ds = evaluate(mix, replace(wl, moe_load_imbalance=1.109), family="H100-SXM", gpus=8)
    assert ds.attrs["moe_load_imbalance"] == 1.109  # the Dataset records it
    assert "moe_load_imbalance" not in evaluate("Llama 3.1 8B", wl, family="H100-SXM").attrs
    assert _latency(mix, replace(wl, moe_load_imbalance=2.564), ep=1) == _latency(mix, wl, ep=1)
    dense = load_model("Llama 3.1 8B")
    assert (_latency(dense, replace(wl, moe_load_imbalance=2.564), ep=1)
            == _latency(dense, wl, ep=1))


def test_skew__capped_at_what_the_layout_allows():
    """At EP 2 a top-2 token can send both copies to one rank: the busiest rank holds at
    most 2x the mean, so the no-eplb value (2.564) and any larger one price as 2."""
    mix, wl = load_model("Mixtral 8x7B"), Workload("prefill", batch=2, s_kv=4096)

    def lat(v):
        ds = evaluate(mix, replace(wl, moe_load_imbalance=v), family="H100-SXM", gpus=2,
                      space={"tp": (1,), "cp": (1,), "pp": (1,), "dp": (2,), "ep": (2,)})
        return float(ds.latency_ns.min())

    assert lat(1.0) < lat(1.5) < lat(2.0) == lat(2.564) == lat(10.0)


def test_explore__takes_the_skew(capsys):
    argv = ["explore", "--model", "Mixtral 8x7B", "--family", "H100-SXM", "--depth",
            "two_stage", "--ep", "8", "--mode", "prefill", "--s-kv", "4096", "--top", "1",
            "--format", "json"]
    lat = []
    for name in ("balanced", "no-eplb"):
        assert main([*argv, "--moe-imbalance", name]) == 0
        cap = capsys.readouterr()
        lat.append(json.loads(cap.out)[0]["latency_ms"])
        assert ("2.564x the mean" in cap.err) == (name == "no-eplb")
    assert lat[1] > lat[0]


def test_cli__moe_imbalance_moves_the_answer_and_the_header_states_it(capsys):
    assert main(MIXTRAL) == 0
    cap = capsys.readouterr()
    base = json.loads(cap.out)[0]
    assert "MoE routing: balanced (the busiest EP rank carries the mean" in cap.err
    assert main([*MIXTRAL, "--moe-imbalance", "no-eplb"]) == 0
    cap = capsys.readouterr()
    skewed = json.loads(cap.out)[0]
    assert "MoE routing: busiest EP rank 2.564x the mean (no-eplb: TensorRT-LLM" in cap.err
    assert skewed["latency_ms"] > base["latency_ms"]
    # with EP pinned to 1 the skew moves nothing, and the header says so
    assert main([*MIXTRAL[:-4], "--ep", "1", "--moe-imbalance", "no-eplb", "--format",
                 "json"]) == 0
    assert "no expert-parallel layout searched: it moves nothing" in capsys.readouterr().err
    # a dense model's header has no routing part
    assert main(["evaluate", "--top", "1", "--format", "json"]) == 0
    assert "MoE routing" not in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "needle"), [
    (["evaluate", "--moe-imbalance", "0.5"], "argument --moe-imbalance: pass balanced, eplb"),
    (["evaluate", "--moe-imbalance", "5000"], "a number from 1 to 1024"),
    (["evaluate", "--moe-imbalance", "eplb"], "is dense (no experts); --moe-imbalance applies"),
    (["compare", "H100-SXM", "H200", "--moe-imbalance", "2"], "is dense (no experts)"),
])
def test_cli__bad_moe_imbalance_is_one_line_exit_2(argv, needle, capsys):
    assert main(argv) == 2
    cap = capsys.readouterr()
    err = cap.err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert "Traceback" not in cap.err + cap.out
