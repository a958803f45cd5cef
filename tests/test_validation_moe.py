"""The MoE serving validation set (simcore.validation.data_moe): loading, catalogue
resolution, layouts, runtimes, and the MoE line of ``simcore validate``."""

import copy
import json

import pytest

from simcore import get_model
from simcore.cli import main
from simcore.model.runtime import runtime_names
from simcore.validation import MEASUREMENTS, mean_abs_error, moe_rows, validate
from simcore.validation.data_moe import (
    _PATH,
    MOE_MEASUREMENTS,
    load_moe_measurements,
    resolve_model,
)

#: In-sample mean |error| of the data_moe points with the factors fitted with them (the
#: target of issue 33 is 0.15; docs/validation.md, MoE serving points, says what is missing).
MOE_CEILING = 0.165


@pytest.fixture(scope="module")
def spec():
    with open(_PATH, encoding="utf-8") as fh:
        data = json.load(fh)
    return next(p["model"] for p in data["points"]
                if p["model"]["hf_id"] == "deepseek-ai/DeepSeek-V3")


def test_moe_points__load_at_least_fifteen_and_join_the_fitted_set():
    assert len(MOE_MEASUREMENTS) >= 15
    ids = {m.id for m in MEASUREMENTS}
    assert {m.id for m in MOE_MEASUREMENTS} <= ids
    assert all(m.model.n_experts > 1 for m in MOE_MEASUREMENTS)
    assert len({m.id for m in MOE_MEASUREMENTS}) == len(MOE_MEASUREMENTS)


def test_moe_points__each_names_a_known_runtime():
    known = set(runtime_names(mode="decode"))
    for m in MOE_MEASUREMENTS:
        assert m.workload.runtime in known, m.id
        for w, _ in m.steps:
            assert w.runtime == m.workload.runtime, m.id


def test_moe_points__mla_and_shared_expert_models_resolve_to_the_catalogue():
    deepseek = [m for m in MOE_MEASUREMENTS if "DeepSeek" in m.model.name]
    assert len(deepseek) >= 10
    for m in deepseek:
        assert m.model == get_model(m.model.name), m.id
        assert (m.model.kv_lora_rank, m.model.n_shared_experts, m.model.moe_d_ff,
                m.model.n_dense_layers) == (512, 1, 2048, 3), m.id
    qwen = {m.model.name for m in MOE_MEASUREMENTS if "Qwen3" in m.model.name}
    assert qwen == {"Qwen/Qwen3-235B-A22B"}  # the -FP8 checkpoint's base shape


def test_resolve_model__refuses_a_mismatching_architecture_with_its_reason(spec):
    model, why = resolve_model(spec)
    assert model is not None and model.name == "deepseek-ai/DeepSeek-V3" and why == ""
    bad = copy.deepcopy(spec)
    bad["architecture"]["moe_intermediate_size"] = 1536  # q_lora_rank, the old data error
    bad["architecture"]["attention"] = "MLA (kv_lora_rank 256, q_lora_rank 1536)"
    model, why = resolve_model(bad)
    assert model is None
    assert why == ("transcribed architecture differs from catalogue 'deepseek-ai/DeepSeek-V3': "
                   "moe_intermediate_size 1536 (catalogue 2048), kv_lora_rank 256 (catalogue 512)")
    model, why = resolve_model({"hf_id": "moonshotai/Kimi-K2.5", "architecture": {}})
    assert model is None and why == "model 'moonshotai/Kimi-K2.5' is not in simcore's catalogue"
    model, why = resolve_model({"hf_id": "deepseek-ai/DeepSeek-V3"})
    assert model is None and "no architecture transcribed" in why


def test_moe_points__attention_dp_and_expert_sharding_layouts():
    by_id = {m.id: m for m in MOE_MEASUREMENTS}
    # TensorRT-LLM's --tp 8 with attention DP: attention TP1 x DP8, experts EP8
    blog = by_id["trtllm-dsr1-h200-maxthr-adp8-ep8-1k2k-c1024:thr"].layout_dict
    assert (blog["tp"], blog["dp"], blog["ep"]) == (1, 8, 8)
    # an attention-DP decode worker: concurrency 1152 over 9 workers, 16 per rank
    adp = by_id["aic-dsv3-h200-trtllm-disagg-1024x1024-c1152-dec-adp8-ep8:tpot"]
    assert (adp.layout_dict["dp"], adp.workload.batch) == (8, 128)
    # a decode worker's max_batch_size caps its batch (recipe batch 8, not 30 / 3 = 10)
    assert by_id["aic-dsv3-h100-trtllm-disagg-1024x1024-c30-dec-tp16-ep16:tpot"].workload.batch == 8
    # config_id 83 ran EP8 (EP_SIZE=$TP), whatever the CSV's moe_ep_size column says
    assert by_id["aic-dsr1-h200-trtllm-1024x1024-c32-tp8-ep8-stp:tpot"].layout_dict["ep"] == 8
    # TP4 x expert-TP2 x EP2: each expert sharded over tp*dp/ep = 2 ranks
    qwen = by_id["aic-qwen3_235b_fp8-h100-trtllm-128x128-c16-tp4-moetp2-ep2:tpot"].layout_dict
    assert (qwen["tp"], qwen["ep"]) == (4, 2)
    # a disaggregated decode worker spans two nodes and runs plain decode steps
    dis = by_id["aic-dsv3-h100-trtllm-disagg-1024x1024-c6-dec-tp16-ep16:tpot"]
    assert dis.n_devices == 16 and dis.workload.prefill_tokens == 0


def test_moe_points__skipped_with_a_reason_and_every_one_fits():
    _, skipped = load_moe_measurements()
    reasons = dict(skipped)
    assert all(reasons.values())
    assert "GPU model not stated" == reasons["lmdeploy-dsv3-2node-tp16-2048x2048"]
    assert "speculative" in reasons["trtllm-dsr1-h200-minlat-tp8-ep4-mtp3-b1-1k2k"]
    # InferenceX's MTP config ran the 2026_03_25 TensorRT-LLM H200 rows
    assert "speculative" in reasons["aic-dsr1-h200-trtllm-1024x1024-c32-tp8-ep8"]
    assert "speculative" in reasons["aic-deepseek_r1-h200-trtllm-8192x1024-c4-tp8-ep8"]
    assert "Blackwell" in reasons["trtllm-dsr1fp4-b200-maxthr-adp8-ep8-1k2k-c3072-bf16kv"]
    rows = validate(MOE_MEASUREMENTS)
    assert all(r.fits for r in rows), [r.id for r in rows if not r.fits]  # they ran
    assert mean_abs_error(rows) <= MOE_CEILING


def test_cli_validate__prints_the_moe_line(capsys):
    assert main(["validate", "--kind", "decode", "--no-loso"]) == 0
    out = capsys.readouterr()
    text = out.out + out.err
    n = len(moe_rows(validate(kinds=["decode"])))
    assert "MoE points: mean |error| " in text and f"over {n} in sample (decode" in text
    assert " 4 x GPU model not stated: lmdeploy-dsv3-2node-tp16-2048x2048" in text
    assert "  skipped:" in text


@pytest.mark.parametrize("layout, n_gpus, why", [
    ({"tp": None}, 8, "attention TP / DP sizes not stated"),
    ({"tp": 4, "dp": 1}, 8, "TP4 x DP1 is not the instance's 8 GPUs"),
    ({"tp": 8, "dp": 1, "ep": 4, "moe_tp": 4}, 8, "EP4 x expert-TP4 is not the TP8 x DP1 ranks"),
])
def test_moe_layout__refused_with_its_reason(layout, n_gpus, why):
    from simcore.validation.data_moe import _layout

    assert _layout({"layout": layout, "n_gpus": n_gpus}) == (None, why)
