"""MoE serving physics of issue 33 (docs/design.md, MoE; docs/validation.md, MoE serving
points): expert tensor parallelism's cost in block-scaled FP8 grouped GEMMs
(``expert_slice_ns``), MLA's absorbed decode at the matmul rate
(``attention_core_class``) and the FP8 KV cache of aiconfigurator's TensorRT-LLM rows."""

import math

import numpy as np
import pytest

from simcore import get_model
from simcore.engine import single
from simcore.engine.core import build_coeffs
from simcore.kernels.inference import EXPERT_SLICE_NS, busiest_rank_experts
from simcore.model.presets import HARDWARE_FAMILIES
from simcore.model.specs import Workload
from simcore.validation.data_moe import MOE_MEASUREMENTS

R1 = get_model("deepseek-ai/DeepSeek-R1")
H200 = HARDWARE_FAMILIES["H200"]


def _row(model, wl, **layout):
    row = single._encode(layout, wl.mode)
    return build_coeffs(np.array([row]), model, wl, H200.topology)[0]


def _decode(act="fp8", **kw):
    return Workload("decode", batch=32, s_kv=2048, weight_dtype=act, act_dtype=act,
                    cuda_graphs=True, **kw)


def test_expert_slice__moe_tp8_pays_the_measured_law_per_slice():
    # CUDA graphs, no admitted prompt: no host launches, so launch_ns is the slice term
    row = _row(R1, _decode(), tp=8)
    touched = 256 * (1 - (1 - 8 / 256) ** 32)
    want = R1.n_layers * EXPERT_SLICE_NS * touched * (1 - 1 / 8) ** 2 * R1.n_moe_layers / R1.n_layers
    assert math.isclose(row["launch_ns"], want, rel_tol=1e-12)
    assert 4e6 < want < 6e6  # ~5 ms a step: MoE-TP8 measured 22-26% slower than EP8


def test_expert_slice__whole_experts_and_16bit_grouped_gemms_pay_nothing():
    assert _row(R1, _decode(), tp=8, ep=8)["launch_ns"] == 0.0  # r = 1: whole experts
    assert _row(R1, _decode(act="bf16"), tp=8)["launch_ns"] == 0.0
    dense = get_model("Llama 3.1 70B")
    assert _row(dense, _decode(), tp=8)["launch_ns"] == 0.0
    # expert TP 2 under EP 4 on 8 ranks pays (1 - 1/2)^2 of a slice per local expert the
    # busiest rank touches
    row = _row(R1, _decode(), tp=8, ep=4)
    local = busiest_rank_experts(256.0, 8.0, 32.0, 4.0)
    assert local > 256 / 4 * (1 - (1 - 8 / 256) ** 32)  # above the mean rank's
    assert math.isclose(row["launch_ns"], R1.n_moe_layers * EXPERT_SLICE_NS * local * 0.25,
                        rel_tol=1e-12)


def test_mla_decode__absorbed_core_at_the_matmul_rate_prompts_at_the_attention_rate():
    pure = _row(R1, _decode(), tp=8, ep=8)
    assert pure["core_gemm"] == 1.0
    mixed = _row(R1, _decode(prefill_tokens=1024, prefill_context=512), tp=8, ep=8)
    assert 0.0 < mixed["core_gemm"] < 1.0
    gqa = _row(get_model("Llama 3.1 70B"), _decode(), tp=8)
    assert gqa["core_gemm"] == 0.0
    # absorbed form: 2 (576 + 512) FLOPs per (head, cached key), the rank's 16 heads, in
    # matmul-rate units (H200: Topology.mm_ratio 1)
    width = R1.kv_lora_rank + R1.qk_rope_head_dim + R1.kv_lora_rank
    want = 2 * width * 32 * 2048 * R1.n_heads / 8 / H200.topology.mm_ratio
    assert math.isclose(pure["f_core"], want, rel_tol=1e-12)


@pytest.mark.parametrize("m", [m for m in MOE_MEASUREMENTS if m.id.startswith("aic-")],
                         ids=lambda m: m.id)
def test_aiconfigurator_trtllm_rows__fp8_kv_cache_unless_stated(m):
    want = "fp8" if m.workload.runtime == "trtllm" else ""
    for w, _ in m.steps or ((m.workload, 1.0),):
        assert w.kv_dtype == want, m.id
