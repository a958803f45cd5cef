"""Training-step coefficients (numba). Twin: ``training_ref``.

Builds the same coefficient rows as :mod:`simcore.kernels.inference`, so the hardware
combine (:func:`~simcore.kernels.inference.point`, ``evaluate_grid``, ``fused_best``)
is shared. One row = one Megatron-style layout (TP × CP × PP × DP) training step:

* per layer and micro-batch: forward + backward (2×) roofline ops, plus recomputation
  (``full``: the whole forward again; ``selective``: the attention core again);
* TP collectives: 4 per layer (2 forward, 2 backward; sequence parallelism swaps each
  all-reduce for a reduce-scatter + all-gather of equal volume), 6 with full recompute;
* CP ring attention (forward KV, backward KV and dKV), overlapped with the attention core;
* 1F1B pipeline: the critical path is (m + pp − 1) micro-batch slots of a stage, with
  2(m + pp − 2) p2p transfers; m = batch / (dp · micro_batch);
* the data-parallel gradient reduction: one all-reduce per step for ZeRO 0–1; a
  reduce-scatter after every micro-batch for ZeRO 2–3 (partitioned gradients, as
  DeepSpeed does), plus one all-gather of the updated parameters for ZeRO 2 (ZeRO 3
  all-gathers parameters per layer instead); then the HBM-bound Adam step;
* memory per device: ZeRO model states (DeepSpeed's fp16 formula: Z0 = 20N/mp,
  Z1 = (4 + 16/G)N/mp, Z2 = (2 + 18/G)N/mp, Z3 = 20N/(G·mp)) plus activations after
  Korthikanti et al. 2022 (Table 2) for the micro-batches in flight on the first stage.

``kv_shard_mode`` concerns the inference KV cache: training rows are valid only with
``"head"`` (the others are masked).
"""

from __future__ import annotations

import math

import numpy as np

from ._numba import jit
from .collectives import allgather_factor, allreduce_factor
from .inference import _alpha, add_comm, placement
from .schema import COEF_DTYPE, LAYOUT

#: Adam step bytes per parameter besides the gradient: read+write fp32 master, m, v
#: (3 × 4 B × 2) and write the 16-bit weights (2 B).
ADAM_BYTES_PER_PARAM = 26.0


@jit()
def zero_states_per_param(stage, G, fp16):
    """Bytes of model states per (model-parallel-sharded) parameter (DeepSpeed's formula).

    fp16: 2-byte parameters and gradients, 16 bytes of optimizer state (20 at ZeRO-0);
    otherwise (bf16, fp32) 4 + 4 + 8 (16 at ZeRO-0). Stage 1 shards the optimizer
    state over G data-parallel ranks, stage 2 also the gradients, stage 3 also the
    parameters.
    """
    p = 2.0 if fp16 else 4.0
    opt = 16.0 if fp16 else 8.0
    if stage == 0:
        return p + p + opt
    if stage == 1:
        return p + p + opt / G
    if stage == 2:
        return p + (p + opt) / G
    return (p + p + opt) / G


@jit()
def activation_bytes_per_layer(s, b, d, a, t, recompute, sp):
    """Korthikanti et al. 2022, Table 2 (16-bit activations) for one layer, one micro-batch."""
    if recompute == 2:  # full: only each layer's input is kept
        return 2.0 * s * b * d / (t if sp else 1.0)
    if sp:
        if recompute == 1:
            return s * b * d * 34.0 / t
        return s * b * d / t * (34.0 + 5.0 * a * s / d)
    if recompute == 1:
        return s * b * d * (10.0 + 24.0 / t)
    return s * b * d * (10.0 + 24.0 / t + 5.0 * a * s / (d * t))


@jit()
def _train_row(lay, mp, wp, topo, out):
    cp = lay[LAYOUT.cp]
    tp = lay[LAYOUT.tp]
    pp = lay[LAYOUT.pp]
    dp = lay[LAYOUT.dp]
    kvm = lay[LAYOUT.kv_shard_mode]
    ffs = lay[LAYOUT.ffn_shard_scope]
    tpp = lay[LAYOUT.tp_placement]
    cpp = lay[LAYOUT.cp_placement]
    ring = lay[LAYOUT.cp_ring_variant]

    L = mp.n_layers
    d = mp.d_model
    h = mp.n_heads
    kvh = mp.n_kv_heads
    hd = mp.head_dim
    bw = mp.bytes_per_param
    E = mp.n_experts
    k = mp.top_k
    B = wp.batch
    s = wp.s_kv
    mb = wp.micro_batch
    rc = int(wp.recompute)
    sp = wp.sequence_parallel == 1.0
    zs = int(wp.zero_stage)
    gb = wp.grad_bytes
    prec = int(wp.precision)

    fcp = float(cp)
    ftp = float(tp)
    fpp = float(pp)
    fdp = float(dp)
    n_dev = cp * tp * pp * dp
    ikvh = int(kvh)

    valid = n_dev <= topo.n_devices and int(h) % tp == 0 and fpp <= L and fcp <= s
    valid = valid and kvm == 0 and int(B) % (dp * int(mb)) == 0
    if tp <= ikvh:
        valid = valid and ikvh % tp == 0
    else:
        valid = valid and tp % ikvh == 0

    strides, tier_tp, tier_cp, tier_pp, tier_dp, tier_tpcp = placement(tp, cp, pp, dp, tpp, cpp,
                                                                        topo)

    m = B / (fdp * mb)  # micro-batches per replica per step
    T = mb * s / fcp  # tokens per device per micro-batch
    causal = 1.0 - (s - 1.0) / (2.0 * s)
    p_lin = 4.0 if rc == 2 else 3.0
    p_core = 3.0 if rc == 0 else 4.0

    kvh_loc = kvh / ftp if ftp <= kvh else 1.0
    attn_w = mp.qo_params / ftp + mp.kv_params / min(ftp, kvh)
    f_lin = p_lin * 2.0 * T * (mp.qo_params + mp.kv_params) / ftp
    b_lin = p_lin * (attn_w * bw + T * d * bw * (2.0 + 2.0 / ftp))

    kv_block = mb * (s / fcp) * kvh_loc * hd * 2.0 * bw
    qo = 2.0 * mb * (s / fcp) * (h / ftp) * hd * bw
    f_core = p_core * 4.0 * mb * s * s * causal * hd * h / (ftp * fcp)
    b_core = p_core * (kv_block * (1.0 + fcp * causal) + qo)

    wide = ffs == 1 and cp > 1
    shard = ftp * fcp if wide else ftp
    ffn_tokens = mb * s if wide else T
    touched = min(E, ffn_tokens * k) if E > 1.0 else 1.0
    f_ffn = p_lin * 2.0 * ffn_tokens * mp.ffn_active_params / shard
    b_ffn = p_lin * ((touched * mp.expert_params + mp.router_params) / shard * bw
                     + 2.0 * ffn_tokens * d * bw)

    f_head = m * 3.0 * 2.0 * T * d * mp.vocab_size / ftp
    b_head = m * (3.0 * mp.vocab_size * d * bw / ftp + 2.0 * T * mp.vocab_size / ftp * 4.0)

    # per layer, per micro-batch communication
    acc = np.zeros(4)  # per-tier wire bytes and link latency (add_comm accumulates)
    act = T * d * bw
    n_half = 3.0 if rc == 2 else 2.0  # collectives per sub-block (attention, FFN)
    a_tp = _alpha(topo, tier_tp)
    if tp > 1:
        add_comm(acc, tier_tp, n_half * allreduce_factor(ftp) * act,
                 n_half * 2.0 * (ftp - 1.0) * a_tp)
    if wide:
        g = ftp * fcp
        full_act = mb * s * d * bw
        add_comm(acc, tier_tpcp, n_half * allreduce_factor(g) * full_act,
                 n_half * 2.0 * (g - 1.0) * _alpha(topo, tier_tpcp))
        add_comm(acc, tier_cp, n_half * allgather_factor(fcp) * full_act,
                 n_half * (fcp - 1.0) * _alpha(topo, tier_cp))
    elif tp > 1:
        add_comm(acc, tier_tp, n_half * allreduce_factor(ftp) * act,
                 n_half * 2.0 * (ftp - 1.0) * a_tp)

    ffn_w = mp.ffn_params / shard
    layer_params = attn_w + ffn_w + mp.norm_params
    if zs == 3 and dp > 1:  # parameters gathered for forward, backward (and recompute)
        n_ag = 3.0 if rc == 2 else 2.0
        add_comm(acc, tier_dp, n_ag * allgather_factor(fdp) * layer_params * bw,
                 n_ag * (fdp - 1.0) * _alpha(topo, tier_dp))

    ring_bytes = 0.0
    ring_alpha = 0.0
    if cp > 1:
        n_ring = p_core  # forward KV (+ recompute), backward KV and dKV
        if ring == 0:
            per_step = kv_block
        else:
            per_step = mb * (s / fcp) * (h / ftp) * (2.0 * hd * bw + 8.0)
        ring_bytes = n_ring * (fcp - 1.0) * per_step
        ring_alpha = n_ring * (fcp - 1.0) * _alpha(topo, tier_cp)

    lps = math.ceil(L / fpp)
    layer_mult = lps * (m + fpp - 1.0)
    pp_bytes = 0.0
    pp_alpha = 0.0
    if pp > 1:
        n_p2p = 2.0 * (m + fpp - 2.0)
        pp_bytes = n_p2p * act
        pp_alpha = n_p2p * _alpha(topo, tier_pp)

    # parameters on the busiest device
    emb = mp.vocab_size * d / ftp if pp > 1 else mp.embedding_params / ftp
    p_dev = lps * layer_params + emb

    tail = np.zeros(4)  # once-per-step wire bytes per tier and latency
    if dp > 1:
        grads = p_dev * gb
        a_dp = _alpha(topo, tier_dp)
        if zs >= 2:  # gradients partitioned: reduce-scatter after every micro-batch
            add_comm(tail, tier_dp, m * allgather_factor(fdp) * grads, m * (fdp - 1.0) * a_dp)
            if zs == 2:  # then all-gather the updated 16-bit parameters once
                add_comm(tail, tier_dp, allgather_factor(fdp) * p_dev * bw, (fdp - 1.0) * a_dp)
        else:  # ZeRO 0/1: one all-reduce (or reduce-scatter + all-gather) per step
            add_comm(tail, tier_dp, allreduce_factor(fdp) * grads, 2.0 * (fdp - 1.0) * a_dp)
    opt_share = p_dev / fdp if zs >= 1 else p_dev
    tail_mem = opt_share * (ADAM_BYTES_PER_PARAM + gb)

    states = zero_states_per_param(zs, fdp, prec == 0) * p_dev
    act_layer = activation_bytes_per_layer(s / fcp, mb, d, h, ftp, rc, sp)
    inflight = min(fpp, m)
    act_mem = lps * inflight * act_layer
    if rc == 2:  # the layer being recomputed holds its full working set
        act_mem += activation_bytes_per_layer(s / fcp, mb, d, h, ftp, 0, sp)
    logits = T * mp.vocab_size / ftp * 4.0
    mem = states + act_mem + logits

    tokens = B * s
    model_flops = 6.0 * mp.n_active_params * tokens + 12.0 * L * B * s * s * causal * h * hd

    out.valid = 1.0 if valid else 0.0
    out.n_devices = n_dev
    out.mem_bytes = mem
    out.mem_weights_bytes = states
    out.mem_kv_bytes = 0.0
    out.mem_act_bytes = act_mem + logits
    slow = 2.0 if prec == 2 else 1.0  # fp32 (TF32) matmuls run at half the 16-bit peak
    out.f_lin = slow * f_lin
    out.b_lin = b_lin
    out.f_core = slow * f_core
    out.b_core = b_core
    out.f_ffn = slow * f_ffn
    out.b_ffn = b_ffn
    out.f_head = slow * f_head
    out.b_head = b_head
    out.ring_bytes = ring_bytes
    out.ring_tier = tier_cp
    out.ring_alpha_ns = ring_alpha
    out.ring_overlap = 1.0
    out.layer_mult = layer_mult
    out.pp_bytes = pp_bytes
    out.pp_tier = tier_pp
    out.pp_alpha_ns = pp_alpha
    out.tokens = tokens
    out.model_flops = model_flops
    out.tail_mem_bytes = tail_mem
    out.comm0_bytes = acc[0]
    out.comm1_bytes = acc[1]
    out.comm2_bytes = acc[2]
    out.comm_alpha_ns = acc[3]
    out.tail0_bytes = tail[0]
    out.tail1_bytes = tail[1]
    out.tail2_bytes = tail[2]
    out.tail_alpha_ns = tail[3]
    out.b_elem = 0.0
    out.ovl0_bytes = 0.0
    out.ovl1_bytes = 0.0
    out.ovl2_bytes = 0.0
    out.ovl_alpha_ns = 0.0
    out.tail_hide = 0.0
    out.n_ops = 0.0
    out.step_ops = 0.0
    out.step_count = 0.0
    out.fixed_ns = 0.0


@jit()
def layout_coeffs(layouts, mp, wp, topo):
    """Training coefficient table (records of ``schema.COEF_DTYPE``) for integer layout rows."""
    n = layouts.shape[0]
    out = np.empty(n, dtype=COEF_DTYPE)
    for i in range(n):
        _train_row(layouts[i], mp, wp, topo, out[i])
    return out
