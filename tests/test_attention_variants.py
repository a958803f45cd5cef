"""Attention variants in the kernels: multi-head latent attention (DeepSeek-V2/V3) and
sliding-window / local-global layers (Gemma 2/3, GPT-OSS).

References: DeepSeek-V2 (arXiv:2405.04434) §2.1 and Table 1, DeepSeek-V3
(arXiv:2412.19437) §4.2 hyper-parameters, FlashMLA (absorbed decode: MQA with one
latent KV head of width d_c + d_h^R, values the latent), Gemma 2 (arXiv:2408.00118) and
Gemma 3 (arXiv:2503.19786) local/global interleaving.
"""

import dataclasses

import numpy as np
import pytest

import simcore
from simcore.engine.core import build_coeffs
from simcore.engine.space import CHOICES, PARALLEL_DIMS
from simcore.model.presets import get_family, get_model
from simcore.model.specs import Workload

V3 = "deepseek-ai/DeepSeek-V3"
GEMMA3 = "google/gemma-3-27b-it"
GEMMA2 = "google/gemma-2-27b"
GPT_OSS = "openai/gpt-oss-120b"
H200 = get_family("H200")


def _coeffs(model, wl, **lay):
    """The coefficient record of one layout (defaults: 1 and the first choice)."""
    row = [CHOICES[d].index(lay.get(d, CHOICES[d][0])) if d in CHOICES else lay.get(d, 1)
           for d in PARALLEL_DIMS]
    return build_coeffs(np.array([row], dtype=np.int64), get_model(model), wl,
                        H200.topology)[0]


def _all_global(model):
    return dataclasses.replace(get_model(model), sliding_window=0, n_local_layers=0)


def _predict(model, wl, **lay):
    return simcore.predict(get_model(model), wl, {"tp": 8, **lay}, family=H200)


def test_kv_cache__deepseek_v3_latent_matches_the_paper():
    m = get_model(V3)
    # DeepSeek-V3 §4.2: d_c = 512, d_h^R = 64, d_h = 128, 128 heads, 61 layers
    assert (m.kv_lora_rank, m.qk_rope_head_dim, m.head_dim - m.qk_rope_head_dim) == (512, 64, 128)
    assert (m.n_heads, m.n_layers) == (128, 61)
    # DeepSeek-V2 Table 1: MLA caches (d_c + d_h^R)·l elements per token, = 9/2·d_h·l with
    # d_c = 4·d_h and d_h^R = d_h/2, against 2·n_h·d_h·l for multi-head attention
    elems = (512 + 64) * 61
    assert elems == 4.5 * 128 * 61 == 35_136
    assert elems / (2 * 128 * 128 * 61) == pytest.approx(9 / 512)  # 1.76% of MHA's
    assert m.kv_bytes_per_token == 70_272  # BF16: 70.3 kB per token
    for s in (4096, 32768, 131072):
        c = _coeffs(V3, Workload("decode", s_kv=s))
        assert c["mem_kv_bytes"] == m.kv_bytes(s) == 70_272 * s
        # FP8 KV: one byte per element
        f8 = _coeffs(V3, Workload("decode", s_kv=s, kv_dtype="fp8"))
        assert f8["mem_kv_bytes"] == 35_136 * s


def test_mla__tp_replicates_the_latent_sequence_sharding_splits_it():
    m = get_model(V3)
    wl = Workload("decode", batch=8, s_kv=32768)
    one = _coeffs(V3, wl)
    head = _coeffs(V3, wl, tp=8)
    seq = _coeffs(V3, wl, tp=8, kv_shard_mode="seq")
    head_seq = _coeffs(V3, wl, tp=8, kv_shard_mode="head_seq")
    # kv_shard_mode=head: the latent is shared by all heads, so every TP rank holds it whole
    assert head["valid"] == 1.0 and head["mem_kv_bytes"] == one["mem_kv_bytes"]
    # seq (and head_seq: one latent group, so the same split): 1/tp of the sequence per rank
    assert seq["mem_kv_bytes"] == one["mem_kv_bytes"] / 8
    assert head_seq["valid"] == 1.0 and head_seq["mem_kv_bytes"] == seq["mem_kv_bytes"]
    # the down-projections to the query and KV latents are replicated over TP, the
    # up-projections and O shard by head (vLLM ReplicatedLinear / ColumnParallelLinear)
    rep = m.d_model * (m.q_lora_rank + m.kv_lora_rank + m.qk_rope_head_dim)
    per_layer = ((m.attn_params_per_layer - rep) / 8 + rep + m.ffn_params_per_layer / 8
                 + m.norm_params_per_layer)
    want = (m.n_layers * per_layer + m.embedding_params / 8) * 2
    assert head["mem_weights_bytes"] == pytest.approx(want, rel=1e-12)


def test_mla__prefill_decompressed_decode_absorbed():
    m = get_model(V3)
    heads = m.n_heads / 8
    dec = _coeffs(V3, Workload("decode", batch=4, s_kv=8192), tp=8)
    # absorbed decode (DeepSeek-V2 §2.1.2, FlashMLA): per head and key, scores over the
    # latent + RoPE key (576) and values over the latent (512)
    assert dec["f_core"] == pytest.approx(2 * 4 * 8192 * heads * (576 + 512), rel=1e-12)
    # per step each layer reads the latent of the whole context, plus Q and O per head
    qo = 4 * heads * (576 + 512) * 2
    assert dec["b_core"] == pytest.approx(4 * 8192 * 576 * 2 + qo, rel=1e-12)
    assert dec["b_core"] * m.n_layers == pytest.approx(4 * m.kv_bytes(8192) + 61 * qo, rel=1e-12)
    # prefill attends in the decompressed form: q·k over 192, values over 128 per head
    pre = _coeffs(V3, Workload("prefill", s_kv=4096), tp=8)
    assert pre["f_core"] == pytest.approx(2 * 4096 * 4097 / 2 * heads * (192 + 128), rel=1e-12)
    # reported FLOPs use the decompressed form in both modes (the model's FLOPs)
    body = m.n_active_params - m.embedding_params - m.d_model
    want = 2 * body * 4 + 2 * m.d_model * m.vocab_size * 4 + 2 * 61 * 4 * 8192 * 128 * 320
    assert dec["model_flops"] == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("model, n_local, window", [(GEMMA3, 52, 1024), (GEMMA2, 23, 4096)])
def test_sliding_window__decode_at_128k_reads_a_fraction_of_the_kv(model, n_local, window):
    m = get_model(model)
    assert (m.n_local_layers, m.sliding_window) == (n_local, window)
    s, batch = 131072, 4
    wl = Workload("decode", batch=batch, s_kv=s)
    local, full = _coeffs(m, wl, tp=8), _coeffs(_all_global(m), wl, tp=8)
    ratio = ((m.n_layers - n_local) * s + n_local * window) / (m.n_layers * s)
    assert ratio < (0.17 if model == GEMMA3 else 0.52)
    assert local["mem_kv_bytes"] / full["mem_kv_bytes"] == pytest.approx(ratio, rel=1e-12)
    assert local["mem_kv_bytes"] * 8 == pytest.approx(batch * m.kv_bytes(s), rel=1e-12)
    qo = batch * (m.n_heads / 8) * 2 * m.head_dim * 2  # Q read, O written per head
    assert (local["b_core"] - qo) / (full["b_core"] - qo) == pytest.approx(ratio, rel=1e-12)
    assert local["f_core"] / full["f_core"] == pytest.approx(ratio, rel=1e-12)


def test_sliding_window__prefill_pairs_capped_per_local_layer():
    m = get_model(GEMMA3)
    s, w = 32768, m.sliding_window
    local = w * (w + 1) / 2 + (s - w) * w  # query p attends to min(p, w) keys
    full = s * (s + 1) / 2
    want = ((m.n_layers - m.n_local_layers) * full + m.n_local_layers * local) / m.n_layers
    wl = Workload("prefill", s_kv=s)
    c, g = _coeffs(m, wl, tp=8), _coeffs(_all_global(m), wl, tp=8)
    assert c["f_core"] / g["f_core"] == pytest.approx(want / full, rel=1e-12)
    flops_gap = 4 * m.n_layers * (full - want) * m.n_heads * m.head_dim
    assert g["model_flops"] - c["model_flops"] == pytest.approx(flops_gap, rel=1e-9)
    # a chunk of 4096 new tokens after 28672 cached ones: local layers see w keys each
    chunk = Workload("prefill", s_kv=s, s_q=4096)
    cc, gc = _coeffs(m, chunk, tp=8), _coeffs(_all_global(m), chunk, tp=8)
    g_pairs = 4096 * s - 4096 * 4095 / 2
    want = ((m.n_layers - m.n_local_layers) * g_pairs + m.n_local_layers * 4096 * w) / m.n_layers
    assert cc["f_core"] / gc["f_core"] == pytest.approx(want / g_pairs, rel=1e-12)


@pytest.mark.parametrize("model", [GEMMA3, GEMMA2, GPT_OSS])
def test_sliding_window__within_the_window_nothing_changes(model):
    m = get_model(model)
    for mode in ("decode", "prefill"):
        wl = Workload(mode, batch=2, s_kv=m.sliding_window)
        a, b = _coeffs(m, wl, tp=8), _coeffs(_all_global(m), wl, tp=8)
        assert a.tobytes() == b.tobytes()


def test_memory_fit__long_context_batch_grows_with_windows_and_latents():
    def largest_batch(model, s_kv, **lay):  # fits is monotone in the batch: bisect
        lo, hi = 0, 1024
        while lo < hi:
            mid = (lo + hi + 1) // 2
            ok = _predict(model, Workload("decode", batch=mid, s_kv=s_kv), **lay).fits
            lo, hi = (mid, hi) if ok else (lo, mid - 1)
        return lo

    # Gemma 3 27B on 8 H200 at 128K: the local layers hold a sixth of the all-global cache
    full, local = largest_batch(_all_global(GEMMA3), 131072), largest_batch(GEMMA3, 131072)
    assert full >= 8 and local >= 5.5 * full
    # DeepSeek-V3 with FP8 weights: the 576-wide latent fits where per-head K and V
    # (128 heads x (192 + 128)) could not hold one sequence; split by sequence over the 8
    # ranks it holds 8x the sequences of the replicated latent (less the weights' share)
    v3 = dataclasses.replace(get_model(V3), bytes_per_param=1)
    head, seq = largest_batch(v3, 131072), largest_batch(v3, 131072, kv_shard_mode="seq")
    assert head >= 4 and seq >= 7 * head
    per_head_kv = 61 * 128 * (192 + 128) * 2 * 131072 / 8  # one sequence, TP8 by head
    weights = _predict(v3, Workload("decode", s_kv=131072)).mem_weights_bytes
    assert weights + per_head_kv > H200.hardware.pe_hbm_gb * 1e9


@pytest.mark.parametrize("model", [V3, GEMMA3, GEMMA2, GPT_OSS])
def test_decode_latency__monotone_in_context(model):
    contexts = [256, 1024, 2048, 4096, 16384, 32768, 131072]
    lat = [_predict(model, Workload("decode", batch=8, s_kv=s)).latency_ns for s in contexts]
    assert lat == sorted(lat)
    if get_model(model).n_local_layers:  # never slower than all layers global
        full = [_predict(_all_global(model), Workload("decode", batch=8, s_kv=s)).latency_ns
                for s in contexts]
        assert all(a <= b for a, b in zip(lat, full, strict=True))
        assert lat[-1] < full[-1]


def test_training__windowed_and_latent_attention_flops():
    wl = Workload("train", batch=8, s_kv=8192, micro_batch=1)
    m = get_model(GEMMA3)
    s, w = 8192, m.sliding_window
    full = s * (s + 1) / 2
    pairs = ((m.n_layers - m.n_local_layers) * full
             + m.n_local_layers * (w * (w + 1) / 2 + (s - w) * w)) / m.n_layers
    c, g = _coeffs(m, wl, tp=8), _coeffs(_all_global(m), wl, tp=8)
    assert c["f_core"] / g["f_core"] == pytest.approx(pairs / full, rel=1e-12)
    gap = 12 * m.n_layers * 8 * (full - pairs) * m.n_heads * m.head_dim
    assert g["model_flops"] - c["model_flops"] == pytest.approx(gap, rel=1e-9)
    # MLA trains decompressed: 6·N·tokens + 3 passes x 2·(q·k 192 + values 128) per pair
    v2 = get_model("deepseek-ai/DeepSeek-V2-Lite")
    t = _coeffs(v2, wl, tp=8)
    mm = v2.n_active_params - v2.embedding_params + v2.vocab_size * v2.d_model
    want = 6 * mm * 8 * s + 6 * v2.n_layers * 8 * full * (192 + 128) * v2.n_heads
    assert t["model_flops"] == pytest.approx(want, rel=1e-12)
    assert t["valid"] == 1.0
