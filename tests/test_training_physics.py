"""Training physics (issue: training fidelity): one test per modelled effect."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import simcore
from simcore.engine.core import prepare
from simcore.model.presets import HARDWARE_FAMILIES, PRESETS
from simcore.model.specs import HardwareFamily, Model, SpecError, Topology, Workload

H100 = HARDWARE_FAMILIES["H100-SXM"]
A100 = HARDWARE_FAMILIES["A100-80G"]
LLAMA2_7B = PRESETS["Llama 2 7B"].model
LLAMA31_8B = PRESETS["Llama 3.1 8B"].model


def _space(tp=1, pp=1, dp=1, cp=1):
    return {"cp": (cp,), "tp": (tp,), "pp": (pp,), "dp": (dp,), "kv_shard_mode": ("head",),
            "ffn_shard_scope": ("TP",), "tp_placement": ("inner",), "cp_placement": ("inner",),
            "cp_ring_variant": ("kv",)}


def _row(model, wl, family=H100, **layout):
    return prepare(model, wl, space=_space(**layout), family=family).coeffs[0]


def _eval(model, wl, family=H100, **layout):
    ds = simcore.evaluate(model, wl, space=_space(**layout), family=family)
    return {k: ds[k].values.ravel()[0] for k in ("latency_ns", "comm_ns", "mem_bytes", "fits")}


# -- 1. overlap -------------------------------------------------------------------------------
def test_training__gradient_reduction_overlaps_backward():
    kw = dict(batch=64, s_kv=4096, micro_batch=1, zero_stage=2, precision="bf16")
    on = _eval(LLAMA2_7B, Workload("train", overlap_grad_reduce=True, **kw), dp=64)
    off = _eval(LLAMA2_7B, Workload("train", overlap_grad_reduce=False, **kw), dp=64)
    assert on["comm_ns"] < off["comm_ns"]
    # ZeRO-2 reduce-scatters after every micro-batch: each hides under its backward
    row = _row(LLAMA2_7B, Workload("train", overlap_grad_reduce=True, **kw), dp=64)
    assert row["tail_hide"] == pytest.approx(2 / 3)
    # framework defaults: DeepSpeed overlaps at ZeRO-3 only, Megatron's flag is off, FSDP on
    assert Workload("train", zero_stage=3).grad_overlap
    assert not Workload("train", zero_stage=2).grad_overlap
    assert not Workload("train", framework="megatron").grad_overlap
    assert Workload("train", framework="fsdp", zero_stage=3).grad_overlap


def test_training__zero3_gathers_are_prefetched_under_compute():
    wl = Workload("train", batch=64, s_kv=4096, micro_batch=1, zero_stage=3, precision="bf16")
    row = _row(LLAMA2_7B, wl, dp=64)
    assert row["ovl0_bytes"] > 0 and row["ovl1_bytes"] > 0  # on the wire, overlapping
    z2 = _row(LLAMA2_7B, replace(wl, zero_stage=2), dp=64)
    assert row["comm1_bytes"] == pytest.approx(z2["comm1_bytes"] * 0)  # nothing blocking


def test_training__eager_elementwise_bytes_counted_by_hand():
    # torchtitan's eager Llama: per layer and pass, two RMSNorms at 36 B per element
    # instead of 4, RoPE on Q and K at 20 instead of 4, the SwiGLU product 10 instead of 6
    m = LLAMA31_8B
    wl = Workload("train", batch=8, s_kv=4096, micro_batch=1, precision="bf16",
                  framework="fsdp", zero_stage=3, recompute="none")
    fused = _row(m, wl, dp=8)["b_elem"]
    eager = _row(m, replace(wl, eager_elementwise=True), dp=8)["b_elem"]
    T = 4096
    d_ff = m.ffn_active_params_per_layer / (3 * m.d_model)
    per_pass = T * (2 * 32 * m.d_model + 16 * (m.n_heads + m.n_kv_heads) * m.head_dim
                    + 4 * d_ff)
    assert eager - fused == pytest.approx(3 * per_pass)  # forward + backward (2 passes)
    e1 = _eval(m, wl, dp=8)["latency_ns"]
    e2 = _eval(m, replace(wl, eager_elementwise=True), dp=8)["latency_ns"]
    assert 1.05 < e2 / e1 < 1.4


def test_training__eager_loss_holds_fp32_logit_buffers_counted_by_hand():
    # PyTorch's eager cross_entropy(logits.float()) at the backward of the loss: 12 B per
    # logit element (fp32 log-softmax + fp32 gradients of its output and input) where a
    # fused loss keeps the 4 B fp32 softmax; memory only, the step time is unchanged
    m = LLAMA31_8B
    for tp, cp in ((1, 1), (2, 1), (1, 2)):
        wl = Workload("train", batch=8, s_kv=8192, micro_batch=2, precision="bf16",
                      framework="fsdp", zero_stage=3, recompute="op", sequence_parallel=False)
        dp = 8 // (tp * cp)
        wl = replace(wl, batch=2 * dp)
        fused = _eval(m, wl, tp=tp, cp=cp, dp=dp)
        eager = _eval(m, replace(wl, eager_loss=True), tp=tp, cp=cp, dp=dp)
        tokens = 2 * 8192 / cp
        assert eager["mem_bytes"] - fused["mem_bytes"] == pytest.approx(
            8.0 * tokens * m.vocab_size / tp, rel=1e-12)
        assert eager["latency_ns"] == fused["latency_ns"]


def test_training__contention_slows_the_compute_an_overlapped_collective_runs_under():
    # Calculon's processor usage: a collective of X ns under W ns of compute costs
    # max(X - W, u X) beyond W (free overlap at u = 0); more contention is never faster,
    # and a run with nothing overlapped does not feel it
    m = LLAMA31_8B
    fsdp = Workload("train", batch=16, s_kv=8192, micro_batch=2, precision="bf16",
                    framework="fsdp", zero_stage=3, recompute="op", sequence_parallel=False)
    fam = HARDWARE_FAMILIES["H100-SXM"]
    lat = []
    for u in (0.0, 0.1, 0.3, 0.6):
        eff = replace(simcore.Efficiency(), comm_contention=u)
        ds = simcore.evaluate(m, fsdp, space=_space(dp=8), family=fam, efficiency=eff)
        lat.append(float(ds.latency_ns.values.ravel()[0]))
    assert lat[0] < lat[1] < lat[2] < lat[3]
    # by hand on the coefficients: the prefetched gathers and the hidden gradient tail
    from simcore.engine.core import combine, pack_efficiency
    p = prepare(m, fsdp, space=_space(dp=8), family=fam)
    c, hw = p.coeffs[:1], p.hw_rows(0, 1).astype(np.float64)
    base = replace(simcore.Efficiency(), comm_contention=0.0)
    e0 = pack_efficiency(base, train=True)
    t0 = combine(c, hw, e0)["latency_ns"][0, 0]
    row = c[0]
    b = hw[0]
    from simcore.kernels.schema import HW
    b0, b1 = b[HW.bw_intra_gbs] * e0.network, b[HW.bw_inter_gbs] * e0.network_inter
    x_gather = row["ovl0_bytes"] / b0 + row["ovl1_bytes"] / b1 + row["ovl_alpha_ns"]
    assert x_gather > 0
    u = 0.1
    t1 = combine(c, hw, pack_efficiency(replace(base, comm_contention=u), train=True))[
        "latency_ns"][0, 0]
    extra = t1 - t0
    # every overlapped collective pays at most u of its own time once it hides
    tail = row["tail0_bytes"] / b0 + row["tail1_bytes"] / b1 + row["tail_alpha_ns"]
    assert 0 < extra <= u * (row["layer_mult"] * x_gather + tail) * (1 + 1e-9)
    # nothing overlapped: TP inference decode is untouched
    dec = Workload("decode", batch=8, s_kv=4096)
    a = simcore.evaluate(m, dec, space={"tp": (4,)}, family=fam, efficiency=base)
    b_ = simcore.evaluate(m, dec, space={"tp": (4,)}, family=fam,
                          efficiency=replace(base, comm_contention=0.5))
    assert float(a.latency_ns.values.ravel()[0]) == float(b_.latency_ns.values.ravel()[0])


@pytest.mark.parametrize("bad", [1.0, -0.1, float("nan"), True, "0.1", None])
def test_efficiency__contention_range(bad):
    with pytest.raises(SpecError, match="comm_contention"):
        simcore.Efficiency(comm_contention=bad)


def test_validation__torchtitan_2412_runs_use_the_eager_loss():
    from simcore.validation import MEASUREMENTS

    by_ref = {}
    for p in MEASUREMENTS:
        by_ref.setdefault(p.ref, set()).add(p.workload.eager_loss)
    assert by_ref["torchtitan_202412"] == {True}
    assert by_ref["torchtitan_asynctp_202506"] == {False}  # compiled loss by June 2025
    assert by_ref["trainy_h200_202506"] == {False}
    assert by_ref["mbridge_perf"] == {False}


def test_training__unfused_core_runs_at_the_matmul_rate():
    # Megatron-LM's unfused core is two batched 16-bit GEMMs (QK^T, AV) plus a fused
    # softmax: its FLOPs run at the matmul factor and the family's matmul share, a flash
    # core's at the attention kernel's factor
    wl = Workload("train", batch=8, s_kv=2048, micro_batch=1, precision="bf16",
                  attention="unfused", recompute="selective")
    row = _row(LLAMA2_7B, wl, family=A100, tp=8)
    assert row["core_gemm"] == 1.0
    assert _row(LLAMA2_7B, replace(wl, attention="flash"), family=A100, tp=8)["core_gemm"] == 0.0
    # FLOPs in matmul-rate units: the A100's matmul share shrinks them like the GEMMs'
    fl = _row(LLAMA2_7B, replace(wl, attention="flash"), family=A100, tp=8)
    per_pair_unfused = row["f_core"] * A100.topology.mm_ratio
    # the unfused core computes every score, flash the causal half; selective
    # recomputation reruns the unfused core's forward (4 passes), flash runs 1 + 2.5
    assert per_pair_unfused == pytest.approx(2 * 4 / 3.5 * fl["f_core"], rel=0.01)
    # the attention kernel's factor moves the flash core's time, not the unfused one's
    from simcore.model.specs import Efficiency

    fast, slow = Efficiency(train_attention=0.9), Efficiency(train_attention=0.2)
    sp = _space(tp=8)

    def step(w, e):
        ds = simcore.evaluate(LLAMA2_7B, w, space=sp, family=A100, efficiency=e)
        return float(ds.latency_ns.values.ravel()[0])

    assert step(wl, fast) == pytest.approx(step(wl, slow))
    flash = replace(wl, attention="flash")
    assert step(flash, fast) < step(flash, slow)


def test_training__tp_comm_overlap_hides_tp_collectives_under_compute():
    # Megatron's --tp-comm-overlap / userbuffers: the TP all-gathers and reduce-scatters
    # move from the blocking channel to the overlapping one (only the excess shows)
    wl = Workload("train", batch=16, s_kv=4096, micro_batch=1, precision="bf16",
                  framework="megatron", zero_stage=1, sequence_parallel=True)
    off = _row(LLAMA2_7B, wl, tp=8, dp=2)
    on = _row(LLAMA2_7B, replace(wl, tp_comm_overlap=True), tp=8, dp=2)
    assert off["comm0_bytes"] > 0 and on["comm0_bytes"] < off["comm0_bytes"]
    assert on["ovl0_bytes"] == pytest.approx(off["comm0_bytes"] - on["comm0_bytes"])
    e_off = _eval(LLAMA2_7B, wl, tp=8, dp=2)
    e_on = _eval(LLAMA2_7B, replace(wl, tp_comm_overlap=True), tp=8, dp=2)
    assert e_on["latency_ns"] < e_off["latency_ns"] and e_on["comm_ns"] < e_off["comm_ns"]
    # nothing to hide at TP 1
    one = _eval(LLAMA2_7B, replace(wl, tp_comm_overlap=True), tp=1, dp=16)
    assert one["latency_ns"] == pytest.approx(_eval(LLAMA2_7B, wl, tp=1, dp=16)["latency_ns"])
    with pytest.raises(SpecError, match="sequence_parallel=True"):
        replace(wl, sequence_parallel=False, tp_comm_overlap=True)


# -- 2. NICs and hierarchical collectives --------------------------------------------------
def test_training__nics_per_node_reverse_llama2_7b_layout_choice():
    """64 H100s: counting the 8 NICs per node makes TP1 DP64 beat TP2 DP32 (a flat ring
    over one NIC ranked TP2 DP32 first)."""
    wl = Workload("train", batch=512, s_kv=4096, micro_batch=1, zero_stage=1,
                  precision="bf16", framework="megatron", overlap_grad_reduce=True)
    t1 = _eval(LLAMA2_7B, wl, tp=1, dp=64)["latency_ns"]
    t2 = _eval(LLAMA2_7B, wl, tp=2, dp=32)["latency_ns"]
    assert t1 < t2
    # k = 8 members per node: the inter-node part carries 1/8 of the flat ring's bytes
    row = _row(LLAMA2_7B, wl, dp=64)
    p_dev = LLAMA2_7B.n_params - LLAMA2_7B.d_model  # all on one device (final norm aside)
    flat = 2 * 63 / 64 * p_dev * 4 / 2  # a ring's reduce-scatter of fp32 gradients
    assert row["tail1_bytes"] == pytest.approx(flat * (64 / 63) * (7 / 8) / 8, rel=1e-3)


def test_training__members_per_node_use_min_k_nics():
    """TP4 DP16: 2 DP members per node use 2 of the 8 NICs; with 2 NICs per node each
    NIC carries 4 devices' share, so the same 2 members get the node's whole bandwidth."""
    wl = Workload("train", batch=64, s_kv=2048, micro_batch=1, zero_stage=2, precision="bf16")
    two = HardwareFamily("2nic", H100.hardware, replace(H100.topology, nics_per_cube=2))
    eight = _row(LLAMA2_7B, wl, tp=4, dp=16)
    p_dev = eight["tail0_bytes"] / (1 / 2)  # intra reduce-scatter over k = 2: (k-1)/k
    assert eight["tail1_bytes"] == pytest.approx(p_dev * (7 / 8) / 2)
    assert _row(LLAMA2_7B, wl, two, tp=4, dp=16)["tail1_bytes"] == pytest.approx(
        p_dev * (7 / 8) / 8)


# -- 3. attention ------------------------------------------------------------------------------
def test_training__flash_attention_llama31_8b_8k_fits():
    wl = Workload("train", batch=8, s_kv=8192, micro_batch=1, zero_stage=3, precision="bf16",
                  recompute="none", sequence_parallel=False)
    flash = _eval(LLAMA31_8B, wl, dp=8)
    unfused = _eval(LLAMA31_8B, replace(wl, attention="unfused"), dp=8)
    assert unfused["mem_bytes"] > 300e9 and not unfused["fits"]
    assert flash["mem_bytes"] < 80e9 and flash["fits"]


def test_training__flash2_core_runs_at_the_family_fa2_ratio():
    """A FlashAttention-2-class core (PyTorch SDPA's flash backend, flash-attn 2) uses no
    Hopper warpgroup MMA: on H100 its FLOPs cost 1 / fa2_ratio (0.522) of the native
    kernel's; on A100 it is the native kernel. Nothing else moves."""
    wl = Workload("train", batch=8, s_kv=32768, micro_batch=1, zero_stage=3, precision="bf16",
                  recompute="none", sequence_parallel=False)
    ratio = H100.topology.fa2_ratio
    assert ratio == pytest.approx(329.483 / 631.338)
    native = _row(LLAMA31_8B, wl, dp=8)
    fa2 = _row(LLAMA31_8B, replace(wl, attention="flash2"), dp=8)
    assert fa2["f_core"] == pytest.approx(native["f_core"] / ratio)
    for k in ("f_lin", "f_ffn", "b_core", "mem_bytes"):
        assert fa2[k] == pytest.approx(native[k]), k
    slow = _eval(LLAMA31_8B, replace(wl, attention="flash2"), dp=8)
    assert slow["latency_ns"] > _eval(LLAMA31_8B, wl, dp=8)["latency_ns"] * 1.2
    assert (_eval(LLAMA31_8B, replace(wl, attention="flash2"), A100, dp=8)["latency_ns"]
            == _eval(LLAMA31_8B, wl, A100, dp=8)["latency_ns"])
    with pytest.raises(SpecError, match="'flash', 'flash2' or 'unfused'"):
        Workload("train", attention="fa2")


# -- 4. pipeline ---------------------------------------------------------------------------
def test_training__interleaved_1f1b_bubble_and_scatter_gather():
    model = PRESETS["Llama 2 70B"].model
    wl = Workload("train", batch=64, s_kv=4096, micro_batch=1, precision="bf16")
    plain = _row(model, wl, tp=4, pp=4, dp=1)
    inter = _row(model, replace(wl, virtual_stages=5), tp=4, pp=4, dp=1)
    lps = 80 / 4
    assert plain["layer_mult"] == pytest.approx(lps * (64 + 3))
    assert inter["layer_mult"] == pytest.approx(lps * (64 + 3 / 5))
    act = 4096 * 8192 * 2
    assert plain["pp_bytes"] == pytest.approx(2 * (64 + 2) * act / 4)


# -- 5. context parallelism --------------------------------------------------------------
def test_training__cp_shards_states_and_reduces_gradients_over_dp_cp():
    wl = Workload("train", batch=8, s_kv=8192, micro_batch=1, zero_stage=1, precision="bf16",
                  framework="megatron")
    cp2 = _row(LLAMA31_8B, wl, cp=2, dp=4)
    dp8 = _row(LLAMA31_8B, wl, dp=8)
    assert cp2["mem_weights_bytes"] == pytest.approx(dp8["mem_weights_bytes"])
    assert cp2["tail0_bytes"] == pytest.approx(dp8["tail0_bytes"])


# -- 6. mixed precision ------------------------------------------------------------------
def test_training__megatron_states_and_distributed_optimizer():
    model = Model("m", n_layers=2, d_model=1024, n_heads=8, n_kv_heads=8, d_ff=4096,
                  vocab_size=1024)
    wl = Workload("train", batch=8, s_kv=1024, micro_batch=1, precision="bf16",
                  framework="megatron")
    n = _row(model, wl, dp=1)["mem_weights_bytes"] / 18
    assert _row(model, replace(wl, zero_stage=1), dp=8)["mem_weights_bytes"] == pytest.approx(
        (6 + 12 / 8) * n)
    with pytest.raises(ValueError, match="distributed optimizer"):
        Workload("train", framework="megatron", zero_stage=3)


def test_training__megatron_states_follow_gradient_and_parameter_bytes():
    # Megatron: parameters + main gradients whole, 12 B of fp32 master + Adam over d;
    # bf16 gradients (grad_reduce_in_fp32=False) 2 B, FP8 primary weights 1 B
    model = Model("m", n_layers=2, d_model=1024, n_heads=8, n_kv_heads=8, d_ff=4096,
                  vocab_size=1024)
    wl = Workload("train", batch=8, s_kv=1024, micro_batch=1, precision="fp8",
                  framework="megatron", zero_stage=1)
    n = _row(model, replace(wl, zero_stage=0), dp=1)["mem_weights_bytes"] / 18
    for gb, w, per in ((4, "", 6 + 12 / 8), (2, "", 4 + 12 / 8), (2, "fp8", 3 + 12 / 8)):
        row = _row(model, replace(wl, grad_bytes=gb, weight_dtype=w), dp=8)
        assert row["mem_weights_bytes"] == pytest.approx(per * n), (gb, w)
    # the gradient reduce-scatter (tail) and the after-step parameter all-gather (comm,
    # never hidden) halve with them
    full = _row(model, wl, dp=8)
    lean = _row(model, replace(wl, grad_bytes=2, weight_dtype="fp8"), dp=8)
    assert lean["tail0_bytes"] == pytest.approx(full["tail0_bytes"] / 2)
    assert lean["comm0_bytes"] == pytest.approx(full["comm0_bytes"] / 2)


def test_training__fp8_saved_gemm_inputs_by_hand():
    # Transformer Engine keeps the FP8 copy of every GEMM input for the weight gradients:
    # QKV, FC1, FC2 and the output projection, whose 16-bit input the flash core also
    # keeps: 34 -> 29 bytes per token and hidden unit with sequence parallelism
    # (Korthikanti et al.'s count, flash attention: no scores)
    wl = Workload("train", batch=8, s_kv=4096, micro_batch=1, precision="fp8",
                  framework="megatron", zero_stage=1, sequence_parallel=True)
    m = LLAMA2_7B
    a16 = _row(m, wl, tp=4, dp=2)["mem_act_bytes"]
    a8 = _row(m, replace(wl, act_dtype="fp8"), tp=4, dp=2)["mem_act_bytes"]
    per_layer = 4096 * m.d_model / 4
    assert a16 - a8 == pytest.approx(m.n_layers * 5 * per_layer)
    # without sequence parallelism 2 of the 10 replicated bytes and 3 of the 24 sharded
    nosp = replace(wl, sequence_parallel=False)
    d = (_row(m, nosp, tp=4, dp=2)["mem_act_bytes"]
         - _row(m, replace(nosp, act_dtype="fp8"), tp=4, dp=2)["mem_act_bytes"])
    assert d == pytest.approx(m.n_layers * 4096 * m.d_model * (2 + 3 / 4))
    # an unfused core needs no 16-bit copy of its output: the sharded part drops to 19
    unf = replace(nosp, attention="unfused", recompute="selective")
    d = (_row(m, unf, tp=4, dp=2)["mem_act_bytes"]
         - _row(m, replace(unf, act_dtype="fp8"), tp=4, dp=2)["mem_act_bytes"])
    assert d == pytest.approx(m.n_layers * 4096 * m.d_model * (2 + 5 / 4))
    # full recomputation keeps only the layer inputs (16-bit): unchanged but for the
    # layer being recomputed
    full = replace(wl, recompute="full")
    d = (_row(m, full, tp=4, dp=2)["mem_act_bytes"]
         - _row(m, replace(full, act_dtype="fp8"), tp=4, dp=2)["mem_act_bytes"])
    assert d == pytest.approx(5 * per_layer)


@pytest.mark.parametrize("kw, match", [
    (dict(precision="bf16", act_dtype="fp8"), "precision='fp8'"),
    (dict(precision="fp8", weight_dtype="fp8", framework="fsdp", zero_stage=3),
     "framework='megatron'"),
    (dict(precision="fp8", weight_dtype="int4"), "not a training option"),
    (dict(precision="fp8", act_dtype="int4"), "not a training option"),
    (dict(precision="fp8", weight_dtype="fp8", framework="megatron", zero_stage=0),
     "distributed optimizer"),
    (dict(precision="fp8", weight_dtype="fp8", framework="megatron", zero_stage=1,
          offload="optimizer"), "offload='none'"),
    (dict(precision="fp8", act_dtype="fp8", recompute="op"), "recompute='op'"),
    (dict(precision="bf16", kv_dtype="fp8"), "inference-only"),
])
def test_training__fp8_storage_options_refuse_impossible_settings(kw, match):
    with pytest.raises(SpecError, match=match):
        Workload("train", batch=8, s_kv=1024, **kw)


def test_training__fsdp_states_keep_no_16_bit_copy():
    # FSDP's sharded fp32 parameters are the master (cast to 16 bits when gathered):
    # 16 N/G at full sharding plus the gathered largest layer's 16-bit params and grads,
    # where DeepSpeed's 16-bit formula counts 18 N/G; fp16, bf16 and fp8 alike
    model = LLAMA31_8B
    n = model.n_params - model.d_model  # the final norm is not counted
    layer = model.vocab_size * model.d_model
    for precision in ("fp16", "bf16", "fp8"):
        wl = Workload("train", batch=8, s_kv=2048, micro_batch=1, zero_stage=3,
                      precision=precision, framework="fsdp")
        assert _row(model, wl, dp=8)["mem_weights_bytes"] == pytest.approx(
            4 * layer + 16 * n / 8, rel=1e-9)
        ds = _row(model, replace(wl, framework="deepspeed"), dp=8)["mem_weights_bytes"]
        assert ds == pytest.approx(4 * layer + 18 * n / 8, rel=1e-9)
    fp32 = Workload("train", batch=8, s_kv=2048, micro_batch=1, zero_stage=3,
                    precision="fp32", framework="fsdp")
    assert _row(model, fp32, dp=8)["mem_weights_bytes"] == pytest.approx(
        8 * layer + 16 * n / 8, rel=1e-9)


def test_training__fp8_gemms_and_error_without_fp8():
    wl = Workload("train", batch=8, s_kv=4096, micro_batch=1, zero_stage=3, precision="bf16")
    bf16 = _row(LLAMA2_7B, wl, dp=8)
    fp8 = _row(LLAMA2_7B, replace(wl, precision="fp8"), dp=8)
    assert fp8["f_ffn"] == pytest.approx(bf16["f_ffn"] / H100.topology.fp8_ratio)
    assert fp8["f_core"] == pytest.approx(bf16["f_core"])  # attention stays bf16
    with pytest.raises(ValueError, match="fp8_ratio=0"):
        prepare(LLAMA2_7B, replace(wl, precision="fp8"), space=_space(dp=8), family=A100)


def test_training__fp8_casts_are_memory_bound_bytes_counted_by_hand():
    # Transformer Engine casts each GEMM's activation operand per forward pass and its
    # output gradient in the backward: read 2 B, write the FP8 copy and its transpose
    # (2 B); the QKV and FC1 inputs are cast inside the norm before them (writes only)
    wl = Workload("train", batch=8, s_kv=4096, micro_batch=1, zero_stage=3, precision="bf16")
    bf16 = _row(LLAMA2_7B, wl, dp=8)
    fp8 = _row(LLAMA2_7B, replace(wl, precision="fp8"), dp=8)
    d, ff, q = 4096, 11008, 32 * 128  # Llama 2 7B: MHA, 32 heads of 128
    fused = d + d  # QKV and gate/up inputs
    inputs = q + ff  # O and down inputs
    grads = 3 * q + d + 2 * ff + d  # QKV out (Q, K, V), O out, gate/up out, down out
    tokens = 4096
    fwd = 2 * fused + 4 * inputs
    assert fp8["b_elem"] - bf16["b_elem"] == pytest.approx(tokens * (fwd + 4 * grads))
    # full recomputation runs the forward (and its casts of the inputs) twice
    full = replace(wl, recompute="full")
    extra = (_row(LLAMA2_7B, replace(full, precision="fp8"), dp=8)["b_elem"]
             - _row(LLAMA2_7B, full, dp=8)["b_elem"])
    assert extra == pytest.approx(tokens * (2 * fwd + 4 * grads))
    # a fine-grained MoE layer (Qwen3-30B-A3B: 128 experts of 768, top 8, GQA 32/4 heads of
    # 128): the FC1 inputs are the k permuted copies (not fused into the norm), the FC2
    # inputs and gate/up gradients the experts' width, k copies of the FC2 gradient
    qwen = simcore.get_model("Qwen/Qwen3-30B-A3B")
    k, e_ff, dq, q3, kv = 8, 768, 2048, 32 * 128, 2 * 4 * 128
    moe_in = q3 + k * dq + k * e_ff
    moe_gr = (q3 + kv) + dq + 2 * k * e_ff + k * dq
    moe = replace(full, precision="fp8")
    diff = (_row(qwen, moe, dp=8)["b_elem"] - _row(qwen, full, dp=8)["b_elem"])
    # (the router's small GEMM rides in the layer-averaged FFN width: +0.2%)
    assert diff == pytest.approx(tokens * (2 * (2 * dq + 4 * moe_in) + 4 * moe_gr), rel=3e-3)
    # per GEMM FLOP it casts far more than a dense model: its GEMMs are narrow
    rows = {m: (_row(m, replace(wl, precision="fp8"), dp=8), _row(m, wl, dp=8))
            for m in (LLAMA31_8B, qwen)}
    per_flop = {m.name: (f["b_elem"] - b["b_elem"]) / f["f_ffn"] for m, (f, b) in rows.items()}
    assert per_flop[qwen.name] > 3 * per_flop[LLAMA31_8B.name]


def test_training__unfused_attention_computes_and_moves_every_score():
    # Megatron-LM's unfused core: QK^T and AV over all s x s scores (the causal mask sits in
    # the softmax), and the score matrix written, read + written by the softmax and read by
    # AV (4 x 2 bytes per score per pass); FlashAttention does the causal half only
    m = LLAMA2_7B
    wl = Workload("train", batch=8, s_kv=2048, micro_batch=1, recompute="none",
                  framework="megatron", zero_stage=1, precision="bf16")
    un = _row(m, replace(wl, attention="unfused"), dp=8)
    fl = _row(m, wl, dp=8)
    s, h, hd = 2048, 32, 128
    assert un["f_core"] == pytest.approx(3 * 4 * s * s * hd * h, rel=1e-12)  # 3 passes
    assert fl["f_core"] == pytest.approx(3.5 * 4 * s * (s + 1) / 2 * hd * h, rel=1e-12)
    kv = s * h * 2 * hd * 2  # K and V of the sequence, bf16
    qo = 2 * s * h * hd * 2
    assert un["b_core"] == pytest.approx(3 * (2 * kv + qo + 4 * 2 * h * s * s), rel=1e-12)


def test_matmul_ratio__a100_runs_its_gemms_at_its_measured_share():
    # A100 SXM 271.2 / 312 TFLOP/s (86.9%) against H100 SXM 794.5 / 989 (80.3%), the MAMF
    # table cited in presets.py: A100 GEMMs at 1.082x the Hopper-fitted fraction of peak,
    # attention unchanged; Hopper families and the default SiP at 1
    ratio = (271.2 / 312) / (794.5 / 989)
    assert A100.topology.mm_ratio == pytest.approx(ratio) and ratio == pytest.approx(1.082, abs=1e-3)
    assert H100.topology.mm_ratio == HARDWARE_FAMILIES["H200"].topology.mm_ratio == 1.0
    assert HARDWARE_FAMILIES["SiP"].topology.mm_ratio == 1.0
    wl = Workload("train", batch=8, s_kv=4096, micro_batch=1, zero_stage=3, precision="bf16")
    a, h = _row(LLAMA2_7B, wl, family=A100, dp=8), _row(LLAMA2_7B, wl, dp=8)
    for f in ("f_lin", "f_ffn", "f_head"):
        assert a[f] == pytest.approx(h[f] / ratio, rel=1e-12)
    assert a["f_core"] == h["f_core"]
    inf = Workload("prefill", s_q=2048, s_kv=2048)
    ai = prepare(LLAMA2_7B, inf, space=_space(), family=A100).coeffs[0]
    hi = prepare(LLAMA2_7B, inf, space=_space(), family=H100).coeffs[0]
    assert ai["f_ffn"] == pytest.approx(hi["f_ffn"] / ratio, rel=1e-12)
    with pytest.raises(SpecError, match="mm_ratio"):
        Topology(mm_ratio=0.0)


def test_training__zero1_is_reduce_scatter_plus_all_gather():
    wl = Workload("train", batch=8, s_kv=2048, micro_batch=1, zero_stage=1, precision="bf16",
                  grad_bytes=2)
    # on a ring (the A100's NVLink) the same bytes, half of them (the parameter
    # all-gather) blocking after the step
    z1 = _row(LLAMA2_7B, wl, family=A100, dp=8)
    z0 = _row(LLAMA2_7B, replace(wl, zero_stage=0), family=A100, dp=8)
    assert z1["tail0_bytes"] == pytest.approx(z0["tail0_bytes"] / 2)
    assert z1["comm0_bytes"] * z1["layer_mult"] == pytest.approx(z0["tail0_bytes"] / 2)
    # where the switch reduces (H100 NVLS) the all-reduce runs at the measured NVLS bus
    # bandwidth, 480 against the ring's 370 GB/s; the reduce-scatter + all-gather pair
    # gains nothing
    h1 = _row(LLAMA2_7B, wl, dp=8)
    h0 = _row(LLAMA2_7B, replace(wl, zero_stage=0), dp=8)
    assert h1["tail0_bytes"] == pytest.approx(z1["tail0_bytes"])
    assert h0["tail0_bytes"] == pytest.approx(z0["tail0_bytes"] * 370 / 480)


# -- 7. element-wise ----------------------------------------------------------------------
def test_training__elementwise_bytes():
    wl = Workload("train", batch=8, s_kv=2048, micro_batch=1, precision="bf16",
                  sequence_parallel=False)
    row = _row(LLAMA2_7B, wl, dp=8)
    d, f, T = 4096, 11008, 2048
    expect = 3 * 2 * T * (10 * d + 2 * (32 + 32) * 128 + 3 * f)
    assert row["b_elem"] == pytest.approx(expect, rel=1e-3)


# -- 8. offload ------------------------------------------------------------------------------
def test_training__offload_fits_530b_on_64_a100():
    from simcore.validation.data import MEGATRON_530B

    wl = Workload("train", batch=64, s_kv=2048, micro_batch=1, recompute="full",
                  zero_stage=1, precision="bf16")
    on = _eval(MEGATRON_530B, replace(wl, offload="optimizer"), A100, tp=8, pp=8)
    off = _eval(MEGATRON_530B, wl, A100, tp=8, pp=8)
    assert not off["fits"] and on["fits"]
    row = _row(MEGATRON_530B, replace(wl, offload="optimizer"), A100, tp=8, pp=8)
    assert row["fixed_ns"] > 0 and row["tail_mem_bytes"] == 0
    no_host = HardwareFamily("nohost", A100.hardware, Topology())
    with pytest.raises(ValueError, match="host_mem_gb"):
        prepare(MEGATRON_530B, replace(wl, offload="optimizer"), space=_space(tp=8),
                family=no_host)


# -- 9. FLOPs --------------------------------------------------------------------------------
def test_training__model_flops_exclude_the_embedding_gather():
    wl = Workload("train", batch=1, s_kv=2048, micro_batch=1, precision="bf16")
    row = _row(LLAMA2_7B, wl)
    m = LLAMA2_7B
    matmul = m.n_params - m.vocab_size * m.d_model  # untied: the head stays a matmul
    attn = 12 * m.n_layers * 2048 * 2048 * (1 - 2047 / 4096) * m.n_heads * m.head_dim
    assert row["model_flops"] == pytest.approx(6 * matmul * 2048 + attn)
    assert np.isfinite(row["model_flops"])


# -- recomputation: torchtitan's per-op selective checkpointing ------------------------------
def test_training__op_sac_keeps_every_other_matmul_output():
    """recompute="op": memory of the outputs it keeps (exact, per layer), time between
    Megatron-selective (nothing but attention recomputed) and full recomputation."""
    m = LLAMA31_8B
    wl = Workload("train", batch=16, s_kv=8192, micro_batch=2, zero_stage=3, precision="bf16",
                  recompute="op", sequence_parallel=False, framework="fsdp")
    op = _eval(m, wl, dp=8)
    sel = _eval(m, replace(wl, recompute="selective"), dp=8)
    full = _eval(m, replace(wl, recompute="full"), dp=8)
    assert sel["latency_ns"] < op["latency_ns"] < full["latency_ns"]
    assert full["mem_bytes"] < op["mem_bytes"] < sel["mem_bytes"]
    # per layer and token: input, Q, V, attention output, gate (d_ff) and down outputs
    d, kvd, f = m.d_model, m.n_kv_heads * m.head_dim, m.d_ff
    per_layer = 2 * 8192 * 2 * (4 * d + kvd + f)
    ds = simcore.evaluate(m, wl, space=_space(dp=8), family=H100)
    logits = 2 * 8192 * m.vocab_size * 4
    act = float(ds.mem_act_bytes.values.ravel()[0])
    assert act == pytest.approx(m.n_layers * per_layer + logits, rel=1e-12)
    # the recomputed matmuls: K and O (half the attention projections) and the up
    # projection (a third of a SwiGLU FFN) — forward FLOPs x (1 + 1/2) and x (1 + 1/3)
    row_op, row_sel = _row(m, wl, dp=8), _row(m, replace(wl, recompute="selective"), dp=8)
    assert row_op["f_lin"] / row_sel["f_lin"] == pytest.approx(3.5 / 3)
    assert row_op["f_ffn"] / row_sel["f_ffn"] == pytest.approx((3 + 1 / 3) / 3)
    # a GeLU FFN (two matrices) recomputes its second: half its forward FLOPs
    gelu = replace(m, gated_ffn=False, name="gelu")
    g_op, g_sel = _row(gelu, wl, dp=8), _row(gelu, replace(wl, recompute="selective"), dp=8)
    assert g_op["f_ffn"] / g_sel["f_ffn"] == pytest.approx(3.5 / 3)


def test_training__torchtitan_selective_is_op_sac_in_validation():
    from simcore.validation import MEASUREMENTS
    by_id = {p.id: p for p in MEASUREMENTS}
    assert by_id["tt2412-8b-8gpu-fsdp"].workload.recompute == "op"
    assert by_id["korthikanti-22b-selective"].workload.recompute == "selective"


# -- expert parallelism -----------------------------------------------------------------------
QWEN3_30B = simcore.model.presets.catalogue()["Qwen/Qwen3-30B-A3B"].model()
DEEPSEEK_V3 = simcore.model.presets.catalogue()["deepseek-ai/DeepSeek-V3"].model()


def _ep_space(tp=1, pp=1, dp=1, cp=1, ep=1):
    return {**_space(tp=tp, pp=pp, dp=dp, cp=cp), "ep": (ep,)}


def _ep_row(model, wl, family=H100, **layout):
    return prepare(model, wl, space=_ep_space(**layout), family=family).coeffs[0]


EP_WL = Workload("train", batch=64, s_kv=4096, micro_batch=1, zero_stage=1,
                 precision="bf16", framework="megatron", overlap_grad_reduce=True)


def test_training_ep__alltoall_volume_is_tokens_topk_dmodel_bytes():
    """Dispatch + combine, forward and backward: 4 all-to-alls per MoE layer of each rank's
    tokens x top_k x d_model x bytes, (ep - 1)/ep of which leaves the rank, one link
    latency per peer; 6 with full recompute."""
    m = QWEN3_30B
    wl = replace(EP_WL, zero_stage=0)  # no post-step all-gather riding on the layer terms
    msg = 4096 * m.top_k * m.d_model * 2  # one micro-batch of 4096 tokens, bf16
    row = _ep_row(m, wl, dp=8, ep=8)  # the EP group is one NVLink node
    assert row["comm0_bytes"] == pytest.approx(4 * msg * 7 / 8, rel=1e-12)
    assert row["comm1_bytes"] == row["comm2_bytes"] == 0.0
    assert row["comm_alpha_ns"] == pytest.approx(4 * 7 * H100.topology.alpha_intra_ns)
    full = _ep_row(m, replace(wl, recompute="full"), dp=8, ep=8)
    assert full["comm0_bytes"] == pytest.approx(6 * msg * 7 / 8, rel=1e-12)
    # across two nodes (8 per node, a NIC per GPU): 7/16 to node peers, 8/16 over InfiniBand
    two = _ep_row(m, replace(wl, batch=128), dp=16, ep=16)
    assert two["comm0_bytes"] == pytest.approx(4 * msg * 7 / 16, rel=1e-12)
    assert two["comm1_bytes"] == pytest.approx(4 * msg * 8 / 16, rel=1e-12)
    # ... leaving the node, each all-to-all pays NCCL's base latency once, its NVLink
    # latency per node peer and the network latency per peer on the other node
    t = H100.topology
    assert two["comm_alpha_ns"] == pytest.approx(
        4 * (t.coll_base_scaleout_ns + 7 * t.alpha_intra_scaleout_ns + 8 * t.alpha_inter_ns))
    # leading dense layers have no all-to-all: DeepSeek-V3's 58 MoE layers of 61
    ds = _ep_row(DEEPSEEK_V3, wl, dp=8, ep=8)
    ds_msg = 4096 * 8 * DEEPSEEK_V3.d_model * 2
    assert ds["comm0_bytes"] == pytest.approx(4 * ds_msg * 7 / 8 * 58 / 61, rel=1e-12)
    # with TP (and sequence parallelism) each rank dispatches its 1/tp of the tokens and
    # the routed experts need no TP collective; attention keeps its four
    tp2 = _ep_row(m, replace(wl, sequence_parallel=True), tp=2, dp=4, ep=8)
    attn_tp = 2 * 2 * (1 / 2) * 4096 * m.d_model * 2  # all-reduce volume x 2 passes
    assert tp2["comm0_bytes"] == pytest.approx(4 * msg / 2 * 7 / 8 + attn_tp, rel=1e-12)


def test_training_ep__a2a_overlap_moves_the_alltoall_under_compute():
    # moe_a2a_overlap: the same dispatch + combine bytes, accounted as overlapping the
    # layer's compute (only the excess is exposed): never slower, and faster when the
    # all-to-all was exposed
    m = QWEN3_30B
    wl = replace(EP_WL, zero_stage=0, batch=128)
    plain = _ep_row(m, wl, dp=16, ep=16)
    ovl = _ep_row(m, replace(wl, moe_a2a_overlap=True), dp=16, ep=16)
    for t in ("0", "1"):
        assert ovl[f"ovl{t}_bytes"] == pytest.approx(plain[f"comm{t}_bytes"], rel=1e-12)
        assert ovl[f"comm{t}_bytes"] == 0.0
    space = _ep_space(dp=16, ep=16)
    lat = {f: float(simcore.evaluate(m, replace(wl, moe_a2a_overlap=f), space=space,
                                     family=H100).latency_ns.values.ravel()[0])
           for f in (False, True)}
    assert lat[True] < lat[False]
    with pytest.raises(SpecError, match="moe_a2a_overlap"):
        Workload("train", moe_a2a_overlap="yes")


def test_moe__token_permutation_bytes_per_routed_copy():
    # per MoE layer and token: permute (read d, write k·d), unpermute + combine (read k·d,
    # write d), and the experts' GEMMs read and write k copies where the FFN op counts
    # one: 4·k·d elements of element-wise traffic per pass. Between top-8 and top-4 the
    # element-wise bytes differ by that and by the activation function's k-fold width.
    k8, k4 = QWEN3_30B, replace(QWEN3_30B, top_k=4, name="top-4")
    wl = replace(EP_WL, zero_stage=0)
    tokens, d, passes = 4096, k8.d_model, 3
    act = (k8.ffn_active_params_per_layer - k4.ffn_active_params_per_layer) / d
    diff = _ep_row(k8, wl, dp=8)["b_elem"] - _ep_row(k4, wl, dp=8)["b_elem"]
    assert diff == pytest.approx(passes * 2 * tokens * (act + 4 * (8 - 4) * d), rel=1e-9)
    # inference: one pass, at the activation dtype (the activation function's bytes sit
    # in the FFN op there)
    inf = Workload("prefill", s_q=1024, s_kv=1024)
    b = {m.top_k: prepare(m, inf, space=_space(), family=H100).coeffs[0]["b_elem"]
         for m in (k8, k4)}
    assert b[8] - b[4] == pytest.approx(4 * (8 - 4) * d * 2 * 1024, rel=1e-9)


def test_training_ep__per_rank_dispatch_sends_one_copy_per_destination_rank():
    """DeepEP-style dispatch (``moe_dispatch="per_rank"``) sends a token once to every rank
    holding one of its top-k experts: inside a node the all-to-all volume scales by the
    expected number of distinct ranks (uniform routing, k of E experts without
    replacement, E/ep per rank) over k. Across nodes a token crosses InfiniBand once per
    distinct remote node and is forwarded over NVLink to the ranks it needs there (not to
    the receiving GPU itself). Both counts are checked against random routings drawn
    here."""
    import numpy as np

    m = QWEN3_30B  # 128 experts, top 8
    wl = replace(EP_WL, zero_stage=0)
    rng = np.random.default_rng(0)
    tok = 4096 * m.d_model * 2  # one micro-batch of 4096 tokens, bf16, one copy each
    for ep in (2, 8, 16, 32):
        routes = np.argsort(rng.random((40_000, m.n_experts)), axis=1)[:, :m.top_k]
        ranks = routes // (m.n_experts // ep)
        nodes = ranks // 8  # 8 GPUs per H100 node
        distinct = np.mean([len(set(r)) for r in ranks])
        n_nodes = max(ep // 8, 1)
        remote = np.mean([len(set(n)) for n in nodes]) * (n_nodes - 1) / n_nodes
        batch = 8 * ep
        per_expert = _ep_row(m, replace(wl, batch=batch), dp=ep, ep=ep)
        per_rank = _ep_row(m, replace(wl, batch=batch, moe_dispatch="per_rank"), dp=ep, ep=ep)
        k = min(ep, 8)
        assert per_rank["comm0_bytes"] == pytest.approx(4 * tok * distinct * (k - 1) / k,
                                                        rel=0.01), ep
        assert per_rank["comm1_bytes"] == pytest.approx(4 * tok * remote, rel=0.01), ep
        if ep <= 8:  # one node: fewer copies than one per expert
            assert per_rank["comm0_bytes"] < per_expert["comm0_bytes"]
        else:  # across nodes: fewer over InfiniBand, more NVLink forwarding
            assert per_rank["comm1_bytes"] < per_expert["comm1_bytes"]
            assert per_rank["comm0_bytes"] > per_expert["comm0_bytes"]
        assert per_rank["comm_alpha_ns"] == per_expert["comm_alpha_ns"]  # same peers
    # one expert per rank (ep = E) in one node cannot deduplicate: k ranks, as per expert
    small = replace(m, n_experts=8, top_k=2)
    a = _ep_row(small, replace(wl, batch=64), dp=8, ep=8)
    b = _ep_row(small, replace(wl, batch=64, moe_dispatch="per_rank"), dp=8, ep=8)
    assert b["comm0_bytes"] == pytest.approx(a["comm0_bytes"], rel=1e-12)
    with pytest.raises(SpecError, match="moe_dispatch"):
        replace(wl, moe_dispatch="deepep")


def test_training_ep__round_robin_routing_counts_the_ranks_the_gate_picks():
    """``moe_routing="round_robin"`` is NeMo Automodel's FakeBalancedGate: token i of a rank
    routes to experts i·k … i·k + k − 1 (mod E). The dispatch volume follows the ranks and
    nodes those index lists land on, counted here from the gate's own index formula."""
    import numpy as np

    wl = replace(EP_WL, zero_stage=0, moe_dispatch="per_rank", moe_routing="round_robin")
    for model, ep in ((QWEN3_30B, 8), (QWEN3_30B, 16), (DEEPSEEK_V3, 64),
                      (replace(QWEN3_30B, n_experts=96, top_k=6), 32)):
        E, k = model.n_experts, model.top_k
        idx = np.arange(4096 * k).reshape(-1, k) % E  # the gate's indices for 4096 tokens
        ranks = idx // (E // ep)
        distinct = np.mean([len(set(r)) for r in ranks])
        n_nodes = max(ep // 8, 1)
        remote = (np.mean([len(set(r)) for r in ranks // 8]) * (n_nodes - 1) / n_nodes)
        row = _ep_row(model, replace(wl, batch=8 * ep), dp=ep, ep=ep)
        tok = 4096 * model.d_model * 2 * model.n_moe_layers / model.n_layers
        kc = min(ep, 8)
        assert row["comm0_bytes"] == pytest.approx(4 * tok * distinct * (kc - 1) / kc,
                                                   rel=1e-9), (model.name, ep)
        assert row["comm1_bytes"] == pytest.approx(4 * tok * remote, rel=1e-9), (model.name, ep)
    # Qwen3-30B-A3B at EP 8: 16 experts per rank, 8 consecutive ones: one rank per token
    row = _ep_row(QWEN3_30B, replace(wl, batch=64), dp=8, ep=8)
    assert row["comm0_bytes"] == pytest.approx(4 * 4096 * QWEN3_30B.d_model * 2 * 7 / 8)
    # routing does not change Megatron's per-expert dispatcher
    a = _ep_row(QWEN3_30B, replace(EP_WL, zero_stage=0, batch=128), dp=16, ep=16)
    b = _ep_row(QWEN3_30B, replace(EP_WL, zero_stage=0, batch=128, moe_routing="round_robin"),
                dp=16, ep=16)
    assert a["comm0_bytes"] == b["comm0_bytes"] and a["comm1_bytes"] == b["comm1_bytes"]
    with pytest.raises(SpecError, match="moe_routing"):
        replace(wl, moe_routing="balanced")


def test_training_ep__divides_expert_states_over_ep():
    """Expert weights, gradients and optimizer states split over EP; dense and attention
    states as before; the expert-data-parallel group (tp·cp·dp/ep) shards what is left."""
    m = QWEN3_30B
    experts = m.n_moe_layers * m.n_experts * m.routed_expert_params
    wl0 = replace(EP_WL, zero_stage=0)  # Megatron without the distributed optimizer: 18 B
    one = _ep_row(m, wl0, dp=8)["mem_weights_bytes"]
    eight = _ep_row(m, wl0, dp=8, ep=8)["mem_weights_bytes"]
    assert one - eight == pytest.approx(18 * experts * (1 - 1 / 8), rel=1e-9)
    # distributed optimizer: dense states over DP 16, expert states over EDP = 16/8 = 2
    dense = one / 18 - experts
    row = _ep_row(m, replace(EP_WL, batch=128), dp=16, ep=8)
    assert row["mem_weights_bytes"] == pytest.approx(
        (6 + 12 / 16) * dense + (6 + 12 / 2) * experts / 8, rel=1e-9)
    # expert gradients reduce over EDP only: with ep = dp nothing but the dense ones move
    ep8 = _ep_row(m, replace(EP_WL, zero_stage=0), dp=8, ep=8)
    # (an all-reduce inside the H100 node: in the switch, at 370/480 of the ring's time)
    assert ep8["tail0_bytes"] == pytest.approx(2 * 7 / 8 * dense * 4 * 370 / 480, rel=1e-9)
    ring = _ep_row(m, replace(EP_WL, zero_stage=0), family=A100, dp=8, ep=8)
    assert ring["tail0_bytes"] == pytest.approx(2 * 7 / 8 * dense * 4, rel=1e-9)
    # the expert FLOPs per device do not change (balanced routing: same total over EP)
    assert ep8["f_ffn"] == _ep_row(m, wl0, dp=8)["f_ffn"]


def test_training_ep__invalid_for_dense_models_and_bad_splits():
    wl = replace(EP_WL, sequence_parallel=True)
    assert _ep_row(LLAMA2_7B, wl, dp=8, ep=2)["valid"] == 0.0  # dense: no experts
    assert _ep_row(QWEN3_30B, wl, dp=8, ep=8)["valid"] == 1.0
    assert _ep_row(QWEN3_30B, wl, dp=6, ep=3)["valid"] == 0.0  # 3 does not divide 128
    assert _ep_row(QWEN3_30B, wl, dp=4, ep=8)["valid"] == 0.0  # more than TP x CP x DP
    assert _ep_row(QWEN3_30B, wl, tp=2, dp=4, ep=8)["valid"] == 1.0  # folded over TP too
    # Megatron requires sequence parallelism for MoE with TP
    no_sp = replace(EP_WL, sequence_parallel=False)
    assert _ep_row(QWEN3_30B, no_sp, tp=2, dp=4, ep=8)["valid"] == 0.0


@pytest.mark.parametrize("knob", ["bw_intra_gbs", "bw_inter_gbs", "bw_intersip_gbs"])
def test_training_ep__doubling_the_ep_link_never_slows_a_step(knob):
    wl = replace(EP_WL, batch=128, sequence_parallel=True)
    base = H100.hardware.as_dict()[knob]
    space = {**_space(), "tp": (1, 2), "pp": (1, 2), "dp": (8, 16, 32), "ep": (1, 2, 8, 16, 32)}
    ds = simcore.evaluate(QWEN3_30B, wl, space=space, family=H100,
                          hardware={knob: [base, 2 * base]})
    lat = ds.latency_ns.squeeze([k for k in ds.latency_ns.dims if ds.sizes[k] == 1])
    slow, fast = lat.isel({knob: 0}).values, lat.isel({knob: 1}).values
    ok = ~np.isnan(slow)
    ep = np.broadcast_to(ds.ep.values.reshape([-1 if d == "ep" else 1 for d in lat.dims
                                               if d != knob]), slow.shape)
    assert (ok & (ep > 1)).sum() >= 10
    assert (fast[ok] <= slow[ok] * (1 + 1e-12)).all()
    if knob != "bw_intersip_gbs":  # these EP groups all-to-all over this tier: strictly faster
        assert (fast[ok & (ep > 1)] < slow[ok & (ep > 1)]).any()


def test_training__ring_wait_counts_as_the_prefetch_window():
    """Regression (found by a property search): with CP and ZeRO-3, a faster attention core
    exposed more of the CP ring, which must not shrink the window the prefetched gathers and
    the gradient tail hide under; doubling FLOP/s once raised the best step time by 9.9%."""
    from simcore.engine.evaluate import evaluate_best
    from simcore.model.specs import Hardware

    m = Model("drawn", n_layers=1, d_model=64, n_heads=1, n_kv_heads=1, d_ff=64, vocab_size=1000)
    wl = Workload("train", batch=8, s_kv=1186, recompute="none", zero_stage=3)
    scale = 0.6751984523072503
    grid = {k: [v * scale] for k, v in Hardware().as_dict().items()}
    grid["peak_tflops_f16"] = [grid["peak_tflops_f16"][0], 2 * grid["peak_tflops_f16"][0]]
    space = {"cp": (1, 2, 4), "tp": (1, 2, 4, 8), "pp": (1, 2, 4), "dp": (1, 2)}
    r = evaluate_best(m, wl, space=space, hardware=grid).latency_ns.values.ravel()
    assert r[1] <= r[0] * (1 + 1e-12)


def test_training__in_switch_allreduce_only_for_true_allreduces():
    # a TP all-reduce (no sequence parallelism) of >= 2 MB inside an H100 node runs in the
    # NVSwitch (NVLS): at the measured 480 against the ring's 370 GB/s bus bandwidth;
    # sequence parallelism's reduce-scatter + all-gather pair moves (g - 1)/g each way on
    # either
    wl = Workload("train", batch=8, s_kv=2048, micro_batch=1, precision="bf16",
                  sequence_parallel=False)  # 2048 x 4096 x 2 B = 16.8 MB messages
    h, a = _row(LLAMA2_7B, wl, tp=8), _row(LLAMA2_7B, wl, family=A100, tp=8)
    assert a["comm0_bytes"] > 0
    assert h["comm0_bytes"] == pytest.approx(a["comm0_bytes"] * 370 / 480, rel=1e-12)
    # below 2 MB NCCL rings (its LL protocol), NVLS or not
    short = replace(wl, s_kv=128, s_q=128)  # 1 MB messages
    assert _row(LLAMA2_7B, short, tp=8)["comm0_bytes"] == pytest.approx(
        _row(LLAMA2_7B, short, family=A100, tp=8)["comm0_bytes"], rel=1e-12)
    assert h["comm_alpha_ns"] == a["comm_alpha_ns"]
    sp = replace(wl, sequence_parallel=True)
    assert _row(LLAMA2_7B, sp, tp=8)["comm0_bytes"] == pytest.approx(
        _row(LLAMA2_7B, sp, family=A100, tp=8)["comm0_bytes"], rel=1e-12)
    # a group across nodes stays hierarchical on the ring
    wide = Workload("train", batch=8, s_kv=2048, micro_batch=1, precision="bf16",
                    sequence_parallel=False)
    assert _row(LLAMA2_7B, wide, tp=16)["comm0_bytes"] == pytest.approx(
        _row(LLAMA2_7B, wide, family=A100, tp=16)["comm0_bytes"], rel=1e-12)


def test_training__wide_ffn_allreduce_in_switch():
    # the TP+CP FFN scope all-reduces the FFN's output (8,192 tokens x d x 2 B = 67 MB)
    # over the tp·cp = 8 devices of one node: on the H100, NVLS at 370/480 of the ring's
    # 2·7/8 factor, twice per layer (forward, backward); everything else is the same
    wl = Workload("train", batch=8, s_kv=8192, micro_batch=1, precision="bf16",
                  sequence_parallel=True)
    space = {**_space(tp=2, cp=4), "ffn_shard_scope": ("TP+CP",)}
    ring_h100 = HardwareFamily("H100 ring", H100.hardware, replace(H100.topology, nvls=False))

    def comm0(fam):
        return prepare(LLAMA2_7B, wl, space=space, family=fam).coeffs[0]["comm0_bytes"]

    full_act = 8192 * LLAMA2_7B.d_model * 2
    saved = 2 * full_act * 2 * 7 / 8 * (1 - 370 / 480)
    assert comm0(ring_h100) - comm0(H100) == pytest.approx(saved, rel=1e-9)


@pytest.mark.parametrize("recompute, tp, want", [
    ("none", 1, 30.0),       # 10 kernels a pass: forward, backward counted twice
    ("none", 2, 34.0),       # + 4 TP collectives (two per sub-block, forward and backward)
    ("full", 2, 46.0),       # + a recomputed forward and its 2 collectives
    ("selective", 4, 34.0),  # selective recompute reruns the core inside its kernel
])
def test_training__each_kernel_pays_its_fixed_device_cost(recompute, tp, want):
    from simcore.model.specs import Efficiency

    wl = Workload("train", batch=16, s_kv=4096, micro_batch=1, recompute=recompute,
                  precision="bf16")
    c = _row(LLAMA2_7B, wl, tp=tp, pp=2)
    assert c["n_ops"] == want and c["launch_ns"] == 0.0  # the host runs ahead: no launch time
    kw = dict(space=_space(tp=tp, pp=2), family=H100)
    zero = simcore.evaluate(LLAMA2_7B, wl, efficiency=Efficiency(op_latency_ns=0.0), **kw)
    some = simcore.evaluate(LLAMA2_7B, wl, efficiency=Efficiency(op_latency_ns=3000.0), **kw)
    # layer_mult = layers per stage x (micro-batches + bubble): every slot pays its kernels
    extra = float(some.latency_ns.squeeze() - zero.latency_ns.squeeze())
    assert extra == pytest.approx(c["layer_mult"] * want * 3000.0, rel=1e-9)
    assert float(some.overhead_ns.squeeze()) == pytest.approx(extra, rel=1e-9)
