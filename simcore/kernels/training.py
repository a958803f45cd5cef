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
from .inference import (
    C_B_CORE,
    C_B_FFN,
    C_B_HEAD,
    C_B_LIN,
    C_COMM0,
    C_COMM_ALPHA,
    C_F_CORE,
    C_F_FFN,
    C_F_HEAD,
    C_F_LIN,
    C_LAYER_MULT,
    C_MEM,
    C_MEM_ACT,
    C_MEM_KV,
    C_MEM_STATIC,
    C_MODEL_FLOPS,
    C_NDEV,
    C_PP_ALPHA,
    C_PP_BYTES,
    C_PP_TIER,
    C_RING_ALPHA,
    C_RING_BYTES,
    C_RING_OVERLAP,
    C_RING_TIER,
    C_TAIL0,
    C_TAIL_ALPHA,
    C_TAIL_MEM,
    C_TOKENS,
    C_VALID,
    M_BW,
    M_D,
    M_E,
    M_EMB,
    M_EXPERT,
    M_FFN_ACTIVE,
    M_FFNW,
    M_H,
    M_HD,
    M_K,
    M_KVH,
    M_KVW,
    M_L,
    M_N_ACTIVE,
    M_NORM,
    M_QO,
    M_ROUTER,
    M_V,
    N_COEF,
    T_A0,
    T_NDEV,
    W_B,
    W_GRAD_BYTES,
    W_MICRO,
    W_PREC,
    W_RECOMPUTE,
    W_SKV,
    W_SP,
    W_ZERO,
    add_comm,
    placement,
)

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
    cp = lay[0]
    tp = lay[1]
    pp = lay[2]
    dp = lay[3]
    kvm = lay[4]
    ffs = lay[5]
    tpp = lay[6]
    cpp = lay[7]
    ring = lay[8]

    L = mp[M_L]
    d = mp[M_D]
    h = mp[M_H]
    kvh = mp[M_KVH]
    hd = mp[M_HD]
    bw = mp[M_BW]
    E = mp[M_E]
    k = mp[M_K]
    B = wp[W_B]
    s = wp[W_SKV]
    mb = wp[W_MICRO]
    rc = int(wp[W_RECOMPUTE])
    sp = wp[W_SP] == 1.0
    zs = int(wp[W_ZERO])
    gb = wp[W_GRAD_BYTES]
    prec = int(wp[W_PREC])

    fcp = float(cp)
    ftp = float(tp)
    fpp = float(pp)
    fdp = float(dp)
    n_dev = cp * tp * pp * dp
    ikvh = int(kvh)

    valid = n_dev <= topo[T_NDEV] and int(h) % tp == 0 and fpp <= L and fcp <= s
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
    attn_w = mp[M_QO] / ftp + mp[M_KVW] / min(ftp, kvh)
    f_lin = p_lin * 2.0 * T * (mp[M_QO] + mp[M_KVW]) / ftp
    b_lin = p_lin * (attn_w * bw + T * d * bw * (2.0 + 2.0 / ftp))

    kv_block = mb * (s / fcp) * kvh_loc * hd * 2.0 * bw
    qo = 2.0 * mb * (s / fcp) * (h / ftp) * hd * bw
    f_core = p_core * 4.0 * mb * s * s * causal * hd * h / (ftp * fcp)
    b_core = p_core * (kv_block * (1.0 + fcp * causal) + qo)

    wide = ffs == 1 and cp > 1
    shard = ftp * fcp if wide else ftp
    ffn_tokens = mb * s if wide else T
    touched = min(E, ffn_tokens * k) if E > 1.0 else 1.0
    f_ffn = p_lin * 2.0 * ffn_tokens * mp[M_FFN_ACTIVE] / shard
    b_ffn = p_lin * ((touched * mp[M_EXPERT] + mp[M_ROUTER]) / shard * bw
                     + 2.0 * ffn_tokens * d * bw)

    f_head = m * 3.0 * 2.0 * T * d * mp[M_V] / ftp
    b_head = m * (3.0 * mp[M_V] * d * bw / ftp + 2.0 * T * mp[M_V] / ftp * 4.0)

    # per layer, per micro-batch communication
    acc = out[C_COMM0:C_COMM_ALPHA + 1]  # add_comm accumulates in place
    acc[:] = 0.0
    act = T * d * bw
    n_half = 3.0 if rc == 2 else 2.0  # collectives per sub-block (attention, FFN)
    a_tp = topo[T_A0 + tier_tp]
    if tp > 1:
        add_comm(acc, tier_tp, n_half * allreduce_factor(ftp) * act,
                 n_half * 2.0 * (ftp - 1.0) * a_tp)
    if wide:
        g = ftp * fcp
        full_act = mb * s * d * bw
        add_comm(acc, tier_tpcp, n_half * allreduce_factor(g) * full_act,
                 n_half * 2.0 * (g - 1.0) * topo[T_A0 + tier_tpcp])
        add_comm(acc, tier_cp, n_half * allgather_factor(fcp) * full_act,
                 n_half * (fcp - 1.0) * topo[T_A0 + tier_cp])
    elif tp > 1:
        add_comm(acc, tier_tp, n_half * allreduce_factor(ftp) * act,
                 n_half * 2.0 * (ftp - 1.0) * a_tp)

    ffn_w = mp[M_FFNW] / shard
    layer_params = attn_w + ffn_w + mp[M_NORM]
    if zs == 3 and dp > 1:  # parameters gathered for forward, backward (and recompute)
        n_ag = 3.0 if rc == 2 else 2.0
        add_comm(acc, tier_dp, n_ag * allgather_factor(fdp) * layer_params * bw,
                 n_ag * (fdp - 1.0) * topo[T_A0 + tier_dp])

    ring_bytes = 0.0
    ring_alpha = 0.0
    if cp > 1:
        n_ring = p_core  # forward KV (+ recompute), backward KV and dKV
        if ring == 0:
            per_step = kv_block
        else:
            per_step = mb * (s / fcp) * (h / ftp) * (2.0 * hd * bw + 8.0)
        ring_bytes = n_ring * (fcp - 1.0) * per_step
        ring_alpha = n_ring * (fcp - 1.0) * topo[T_A0 + tier_cp]

    lps = math.ceil(L / fpp)
    layer_mult = lps * (m + fpp - 1.0)
    pp_bytes = 0.0
    pp_alpha = 0.0
    if pp > 1:
        n_p2p = 2.0 * (m + fpp - 2.0)
        pp_bytes = n_p2p * act
        pp_alpha = n_p2p * topo[T_A0 + tier_pp]

    # parameters on the busiest device
    emb = mp[M_V] * d / ftp if pp > 1 else mp[M_EMB] / ftp
    p_dev = lps * layer_params + emb

    tail = out[C_TAIL0:C_TAIL_ALPHA + 1]
    tail[:] = 0.0
    if dp > 1:
        grads = p_dev * gb
        a_dp = topo[T_A0 + tier_dp]
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
    logits = T * mp[M_V] / ftp * 4.0
    mem = states + act_mem + logits

    tokens = B * s
    model_flops = 6.0 * mp[M_N_ACTIVE] * tokens + 12.0 * L * B * s * s * causal * h * hd

    out[C_VALID] = 1.0 if valid else 0.0
    out[C_NDEV] = n_dev
    out[C_MEM] = mem
    out[C_MEM_STATIC] = states
    out[C_MEM_KV] = 0.0
    out[C_MEM_ACT] = act_mem + logits
    slow = 2.0 if prec == 2 else 1.0  # fp32 (TF32) matmuls run at half the 16-bit peak
    out[C_F_LIN] = slow * f_lin
    out[C_B_LIN] = b_lin
    out[C_F_CORE] = slow * f_core
    out[C_B_CORE] = b_core
    out[C_F_FFN] = slow * f_ffn
    out[C_B_FFN] = b_ffn
    out[C_F_HEAD] = slow * f_head
    out[C_B_HEAD] = b_head
    out[C_RING_BYTES] = ring_bytes
    out[C_RING_TIER] = tier_cp
    out[C_RING_ALPHA] = ring_alpha
    out[C_RING_OVERLAP] = 1.0
    out[C_LAYER_MULT] = layer_mult
    out[C_PP_BYTES] = pp_bytes
    out[C_PP_TIER] = tier_pp
    out[C_PP_ALPHA] = pp_alpha
    out[C_TOKENS] = tokens
    out[C_MODEL_FLOPS] = model_flops
    out[C_TAIL_MEM] = tail_mem


@jit()
def layout_coeffs(layouts, mp, wp, topo):
    """Training coefficient rows (n_layout, N_COEF) for integer layout rows (n_layout, 9)."""
    n = layouts.shape[0]
    out = np.empty((n, N_COEF))
    for i in range(n):
        _train_row(layouts[i], mp, wp, topo, out[i])
    return out
