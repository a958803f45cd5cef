"""The public training measurements of ``training_measurements.json``."""

from __future__ import annotations

import math

import pytest

from simcore.model.specs import Efficiency
from simcore.validation.data_train import TRAIN_MEASUREMENTS, TRAIN_SKIPPED, load_points
from simcore.validation.points import evaluate_point


def test_train_measurements__every_point_kept_or_skipped_with_a_reason():
    raw = load_points()
    ids = {p["id"] for p in raw["points"]}
    kept = {m.id for m in TRAIN_MEASUREMENTS}
    assert kept | set(TRAIN_SKIPPED) == ids and not kept & set(TRAIN_SKIPPED)
    assert all(TRAIN_SKIPPED.values())
    gpus = {p["id"]: p["n_gpus"] for p in raw["points"]}
    for m in TRAIN_MEASUREMENTS:
        assert m.n_devices == gpus[m.id], m.id
        assert m.ref in raw["sources"] and raw["sources"][m.ref]["citation"] in m.source


def test_train_measurements__all_predict_a_finite_value():
    for m in TRAIN_MEASUREMENTS:
        latency_ns, _ = evaluate_point(m, Efficiency())
        assert math.isfinite(m.from_latency_ns(latency_ns)), m.id


def test_measurement__mfu_hfu_and_tokens_per_gpu_agree():
    from dataclasses import replace

    m = next(x for x in TRAIN_MEASUREMENTS if x.id == "mpt-h100-70b-128")
    assert m.workload.recompute == "full"
    lat = 2.0e9
    mfu = replace(m, metric="mfu", unit="fraction", measured=0.4).from_latency_ns(lat)
    hfu = replace(m, metric="hfu", unit="fraction", measured=0.4).from_latency_ns(lat)
    tflops = replace(m, metric="model_tflops_per_gpu", unit="TFLOP/s",
                     measured=400.0).from_latency_ns(lat)
    assert hfu == pytest.approx(mfu * 4 / 3)
    assert mfu == pytest.approx(tflops * 1e12 / (m.family.hardware.peak_tflops_f16 * 1e12))
    tok = replace(m, metric="tokens_per_s_per_gpu", unit="tokens/s/GPU",
                  measured=1.0).from_latency_ns(lat)
    assert tok == pytest.approx(m.workload.batch * m.workload.s_kv / 2.0 / m.n_devices)


def test_train_measurements__moe_runs_with_expert_parallelism_are_kept():
    """The seven EP runs: their EP degree from the source, the models' stated sizes."""
    by_id = {m.id: m for m in TRAIN_MEASUREMENTS}
    stated = {"mb260201-qwen3-30b-a3b": (8, 30.5, 3.3), "mb260401-qwen3-30b-a3b": (16, 30.5, 3.3),
              "am-qwen3-30b-a3b-8": (8, 30.5, 3.3),
              "mb2511-qwen3-235b-a22b": (32, 235, 22), "mb260401-qwen3-235b-a22b": (32, 235, 22),
              "am-deepseek-v3-256": (64, 671, 37), "am-deepseek-v3-1024": (64, 671, 37)}
    for pid, (ep, total_b, active_b) in stated.items():
        m = by_id[pid]
        assert m.layout_dict["ep"] == ep and m.model.n_experts > 1
        assert m.model.n_params / 1e9 == pytest.approx(total_b, rel=0.02), pid
        assert m.model.n_active_params / 1e9 == pytest.approx(active_b, rel=0.05), pid
        assert "balanced routing" in m.notes
    assert by_id["am-deepseek-v3-256"].model.is_mla
    assert not any("expert parallelism" in why for why in TRAIN_SKIPPED.values())


def test_train_measurements__configs_read_from_the_sources():
    """Megatron-Bridge's FSDP column > 0 is Megatron-FSDP (full sharding); Automodel's MoE
    benchmark configs recompute every layer, dispatch with DeepEP (one copy per rank) and
    route with the FakeBalancedGate (``round_robin``); Megatron-Bridge's Qwen3-30B-A3B
    recipes of those releases dispatch with DeepEP / HybridEP and route at random (forced
    balance); its Qwen3-235B-A22B keeps the alltoall dispatcher; the 25.11 Qwen3-30B-A3B row, superseded by the same layout measured 1.77x faster two
    releases later, is skipped with that reason."""
    by_id = {m.id: m for m in TRAIN_MEASUREMENTS}
    fsdp = by_id["mb2511-llama3-8b"].workload
    assert (fsdp.framework, fsdp.zero_stage) == ("fsdp", 3)
    assert by_id["mb2511-llama3-70b"].workload.framework == "megatron"  # FSDP column 0
    for pid in ("am-qwen3-30b-a3b-8", "am-deepseek-v3-256", "am-deepseek-v3-1024"):
        w = by_id[pid].workload
        assert (w.recompute, w.moe_dispatch, w.moe_routing) == ("full", "per_rank",
                                                                "round_robin"), pid
    for pid in ("mb260201-qwen3-30b-a3b", "mb260401-qwen3-30b-a3b"):
        w = by_id[pid].workload
        assert (w.moe_dispatch, w.moe_routing) == ("per_rank", "random"), pid
    assert by_id["mb260401-qwen3-235b-a22b"].workload.moe_dispatch == "per_expert"
    assert by_id["am-llama31-70b-fsdp32-cp2"].workload.moe_dispatch == "per_expert"  # dense
    assert "mb2511-qwen3-30b-a3b" not in by_id
    assert TRAIN_SKIPPED["mb2511-qwen3-30b-a3b"].startswith("superseded: ")
    assert "9058" in TRAIN_SKIPPED["mb2511-qwen3-30b-a3b"]


def test_train_measurements__attention_kernel_and_pipeline_schedule_per_source():
    """torchtitan / Trainy (PyTorch SDPA's flash backend) and llm-foundry (flash-attn) run
    FlashAttention-2-class kernels, the Megatron-family sources the native one; pipelined
    torchtitan runs split the local batch into PP micro-batches (torchtitan's default);
    Llama 3's interleaved schedule gets 2 virtual stages (count not stated)."""
    by_id = {m.id: m for m in TRAIN_MEASUREMENTS}
    for m in TRAIN_MEASUREMENTS:
        fa2 = m.ref.startswith(("torchtitan", "trainy")) or m.ref == "llmfoundry_mpt"
        assert m.workload.attention == ("flash2" if fa2 else "flash"), m.id
        assert ("FlashAttention-2-class" in m.notes) == fa2, m.id
    tt = by_id["tt2412-405b-3d-1f1b"]  # local batch 32 over PP 8: 8 micro-batches of 4
    assert tt.workload.micro_batch == 4 and tt.workload.batch == 256
    assert by_id["tt2412-405b-3d-interleaved-1f1b"].workload.virtual_stages == 2
    assert by_id["tt2412-8b-8gpu-fsdp"].workload.micro_batch == 2  # no PP: the stated local batch
    for i in ("llama3-405b-8k", "llama3-405b-16k", "llama3-405b-16k-cp16-131k"):
        assert by_id[i].workload.virtual_stages == 2
    assert by_id["nemo-longseq-llama2-7b-1024k"].workload.virtual_stages == 1
