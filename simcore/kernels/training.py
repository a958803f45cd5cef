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
* expert parallelism (MoE, ``ep`` > 1; Megatron-Core's MoE parallel folding): the
  stage's TP x CP x DP devices fold into expert TP (``expert_tp``, innermost) x EP x
  expert-data-parallel (tp·cp·dp / (expert_tp·ep)); routed experts E/ep per EP rank,
  each sharded over its expert-TP group; dispatch and combine all-to-all per MoE layer
  (2 forward, 2 backward, +2 with full recompute) over the EP group's tiers, and with
  expert TP the all-gather / reduce-scatter of the dispatched tokens over the expert-TP
  group around them; expert states and gradients over the expert-data-parallel group,
  dense ones over DP x CP; the busiest EP rank carries ``moe_load_imbalance`` x the mean
  routed tokens (1: balanced);
* memory per device: ZeRO model states (DeepSpeed's 16-bit formula for fp16, bf16 and
  fp8: Z0 = 20N, Z1 = 4N + 16N/G, Z2 = 2N + 18N/G, Z3 = 4L + 18N/G with N the
  parameters on the device and L its largest layer; fp32: 16N, 8N + 8N/G, 4N + 12N/G,
  8L + 16N/G; FSDP: the fp32 counting, its gathered layer at 16 bits; see
  :func:`zero_state_bytes`) plus activations after Korthikanti et al.
  2022 (Table 2) for the micro-batches in flight on the first stage.

Multi-head latent attention trains in the decompressed form (one K/V head per query
head; the down-projections duplicated on every TP rank); local (sliding-window) layers
attend to at most ``window`` keys per query (layer-averaged pairs).

``kv_shard_mode`` concerns the inference KV cache: training rows are valid only with
``"head"`` (the others are masked).
"""

from __future__ import annotations

import math

import numpy as np

from ._numba import jit
from .collectives import (
    allgather_factor,
    allreduce_factor,
    alltoall_factors,
    hier_factors,
    in_switch_wire,
    members_per_cube,
    node_dedup_alltoall_factors,
    tier_of,
)
from .common import (
    OPS_LAYER,
    OPS_MOE,
    add_comm,
    attention_kernel_rate,
    busiest_share,
    moe_permute_bytes,
    placement,
    tier_alpha_ns,
    tier_base_ns,
    window_keys,
)
from .schema import COEF_DTYPE, LAYOUT

#: Adam step bytes per parameter besides the gradient: read+write fp32 master, m, v
#: (3 × 4 B × 2) and write the 16-bit weights (2 B).
ADAM_BYTES_PER_PARAM = 26.0
#: The loss's logit buffers at its peak, bytes per logit element: a fused / compiled
#: loss's fp32 softmax, and PyTorch's eager ``cross_entropy(logits.float())`` (fp32
#: log-softmax, fp32 gradients of its output and its input) (``Workload.eager_loss``).
FUSED_LOSS_BYTES = 4.0
EAGER_LOSS_BYTES = 12.0


# --- the layout and its groups ------------------------------------------------------------
@jit()
def layout_valid(lay, mp, wp, topo):
    """True when a layout (the row's tuple) fits the system and divides the model and the batch: the
    devices it occupies, query heads and KV heads over TP (or TP over KV heads), layers
    over PP, tokens over CP, whole micro-batches per DP replica, head-sharded KV. Expert
    parallelism's own rules are :func:`expert_groups`'; host memory is checked with
    :func:`zero_offload`."""
    cp = lay[LAYOUT.cp]
    tp = lay[LAYOUT.tp]
    pp = lay[LAYOUT.pp]
    dp = lay[LAYOUT.dp]
    ikvh = int(mp.n_kv_heads)
    valid = (cp * tp * pp * dp <= topo.n_devices and int(mp.n_heads) % tp == 0
             and float(pp) <= mp.n_layers and float(cp) <= wp.s_kv)
    valid = (valid and lay[LAYOUT.kv_shard_mode] == 0
             and int(wp.batch) % (dp * int(wp.micro_batch)) == 0)
    if tp <= ikvh:
        return valid and ikvh % tp == 0
    return valid and tp % ikvh == 0


@jit()
def gradient_group(lay, strides, tier_dp, tier_cp, cube):
    """The group that reduces the gradients and shards the ZeRO states: DP x CP (CP ranks
    hold the same parameters). Returns ``(members, members per cube, tier)``."""
    fcp = float(lay[LAYOUT.cp])
    fdp = float(lay[LAYOUT.dp])
    k_sh = min(cube, members_per_cube(fdp, float(strides[3]), cube)
               * members_per_cube(fcp, float(strides[1]), cube))
    tier_sh = max(tier_dp, tier_cp) if lay[LAYOUT.cp] > 1 else tier_dp
    return fdp * fcp, k_sh, tier_sh


@jit()
def expert_blocks_spanned(start, k, n_experts, per):
    """Groups of ``per`` consecutive experts (E / per groups when per divides E; an uneven
    split has a last, partial group) that the k ≤ E experts start … start + k − 1 (mod E)
    fall in."""
    E = n_experts
    last = start + k - 1
    if last < E:
        return float(last // per - start // per + 1)
    blocks = float((E - 1) // per + 1)
    return min(blocks, blocks - start // per + (last - E) // per + 1.0)  # wraps once


@jit()
def ep_dispatch_copies(n_experts, top_k, ep, k_ep, round_robin):
    """Expected (ranks, cubes) that one token's k routed experts reach: E experts placed
    contiguously over g EP ranks, kc of them per cube (g / kc cubes).

    Random routing (k distinct experts drawn uniformly): g·(1 − C(E − E/g, k) / C(E, k))
    ranks, and the same with g / kc cubes. ``round_robin`` (NeMo Automodel's
    ``FakeBalancedGate``, its benchmarks' router): token i takes experts i·k … i·k + k − 1
    (mod E), so the average runs over the E start offsets (i·k) mod E."""
    E = n_experts
    k = top_k
    g = ep
    kc = k_ep
    if E < g or g <= 1.0:  # not a valid EP layout (masked): any finite value
        return 1.0, 1.0
    ie = int(E)
    ik = int(k)
    n = max(int(round(g / kc)), 1)  # whole cubes (an uneven group counts its nearest)
    per_r = ie // int(g)
    per_c = ie // n
    if not round_robin:
        miss_r = 1.0
        miss_c = 1.0
        for j in range(ik):
            miss_r *= max(E - per_r - j, 0.0) / (E - j)
            miss_c *= max(E - per_c - j, 0.0) / (E - j)
        return g * (1.0 - miss_r), n * (1.0 - miss_c)
    tot_r = 0.0
    tot_c = 0.0
    for j in range(ie):
        o = (j * ik) % ie
        tot_r += expert_blocks_spanned(o, ik, ie, per_r)
        tot_c += expert_blocks_spanned(o, ik, ie, per_c)
    return tot_r / ie, tot_c / ie

@jit()
def expert_subgroup(skip, n, tp, cp, dp, strides, cube):
    """A group of ``n`` devices of the stage's TP x CP x DP devices taken, innermost dim
    (smallest stride) first, after the ``skip`` innermost devices that inner groups hold
    (Megatron's expert rank order: expert TP, then EP, then expert DP). Returns
    ``(ok, span, members per cube)``; ``ok`` is False when the group does not split the
    dims evenly (each dim a product of whole inner groups times a divisor)."""
    sizes = (tp, cp, dp)
    st = (strides[0], strides[1], strides[3])
    order = [0, 1, 2]
    for a in range(3):  # by stride, innermost first
        for b in range(2 - a):
            if st[order[b]] > st[order[b + 1]]:
                order[b], order[b + 1] = order[b + 1], order[b]
    ok = True
    span = 1.0
    k = 1.0
    for j in order:
        size = sizes[j]
        if size == 1:
            continue
        if skip >= size:  # held whole by the inner groups
            ok = ok and skip % size == 0
            skip = skip // size
            continue
        ok = ok and size % skip == 0
        avail = size // skip
        stride = skip * st[j]
        skip = 1
        if n <= 1:
            continue
        if n >= avail:
            ok = ok and n % avail == 0
            take = avail
            n = n // avail
        else:
            ok = ok and avail % n == 0
            take = n
            n = 1
        if take > 1:
            span = max(span, float(take * stride))
            k *= members_per_cube(float(take), float(stride), cube)
    return ok and n == 1, span, min(k, cube)


@jit()
def expert_groups(lay, mp, wp, strides, topo):
    """Expert parallelism (Megatron-Core's MoE parallel folding): the stage's TP x CP x
    DP devices fold into expert TP (``wp.expert_tp``, innermost) x EP x expert DP; the
    routed experts split over the ep EP ranks, each sharded over its expert-TP group; the
    tp·cp·dp/(expert_tp·ep) devices holding the same expert shards (the
    expert-data-parallel group) reduce their gradients and shard their states. Expert TP
    (:func:`expert_subgroup` for each of the three groups).

    Returns ``(valid, edp members, EP members per cube, EP tier, EDP members per cube,
    EDP tier, expert-TP members per cube, expert-TP tier)``; valid needs an MoE model,
    ep | experts, expert_tp·ep | tp·cp·dp, the FFN sharded by TP only and sequence
    parallelism when tp > 1 (as Megatron requires)."""
    tp = lay[LAYOUT.tp]
    cp = lay[LAYOUT.cp]
    dp = lay[LAYOUT.dp]
    ep = lay[LAYOUT.ep]
    etp = int(wp.expert_tp)
    cube = topo.pes_per_cube
    etp = max(etp, 1)
    devs = tp * cp * dp
    ok = devs % (etp * ep) == 0
    rest = devs // (etp * ep) if ok else 1
    ok_t, span_etp, k_etp = expert_subgroup(1, etp, tp, cp, dp, strides, cube)
    ok_e, span_ep, k_ep = expert_subgroup(etp, ep, tp, cp, dp, strides, cube)
    ok_d, span_edp, k_edp = expert_subgroup(etp * ep, rest, tp, cp, dp, strides, cube)
    ok = ok and ok_t and ok_e and ok_d
    wide = lay[LAYOUT.ffn_shard_scope] == 1 and cp > 1
    valid = (ok and mp.n_experts > 1.0 and int(mp.n_experts) % ep == 0 and not wide
             and (wp.sequence_parallel == 1.0 or tp == 1))
    f_edp = float(tp) * float(cp) * float(dp) / (float(ep) * float(etp))
    tier_ep = tier_of(int(span_ep), int(cube), int(topo.pes_per_sip))
    tier_edp = tier_of(int(span_edp), int(cube), int(topo.pes_per_sip))
    tier_etp = tier_of(int(span_etp), int(cube), int(topo.pes_per_sip))
    return valid, f_edp, k_ep, tier_ep, k_edp, tier_edp, k_etp, tier_etp


@jit()
def work_per_device(lay, wp):
    """How a step's work splits over a device: ``(micro-batches per replica per step,
    tokens per micro-batch, residual-stream tokens (sequence parallelism shards them over
    TP), FFN tokens, ranks the FFN shards over, FFN over TP x CP)``; the FFN sharded over
    TP x CP (``ffn_shard_scope`` TP+CP) runs the whole sequence."""
    fcp = float(lay[LAYOUT.cp])
    ftp = float(lay[LAYOUT.tp])
    mb = wp.micro_batch
    m = wp.batch / (float(lay[LAYOUT.dp]) * mb)
    T = mb * wp.s_kv / fcp
    tok_res = T / ftp if wp.sequence_parallel == 1.0 else T
    wide = lay[LAYOUT.ffn_shard_scope] == 1 and lay[LAYOUT.cp] > 1
    if wide:
        return m, T, tok_res, mb * wp.s_kv, ftp * fcp, True
    return m, T, tok_res, T, ftp, False


# --- how often each op runs ---------------------------------------------------------------
@jit()
def recompute_passes(mp, wp):
    """Passes per micro-batch over each op under the recompute policy: forward 1,
    backward 2, + 1 per recomputed forward. Returns ``(linear, attention projections,
    FFN, element-wise, attention core, TP collectives per sub-block)``.

    ``full`` recomputes everything (4); per-op SAC every second matmul (Q, K, V, O: K and
    O; gate/up/down: up; fc1/fc2: fc2) and every element-wise op; a flash core's backward
    costs 2.5 forwards (scores recomputed inside); an unfused core is recomputed with
    selective and per-op checkpointing. Per-op SAC re-gathers the sequence-parallel input
    of each recomputed matmul (half an all-reduce's traffic)."""
    rc = int(wp.recompute)
    p_lin = 4.0 if rc == 2 else 3.0
    p_attn = p_lin
    p_ffn = p_lin
    p_elem = p_lin
    if rc == 3:  # per-op SAC: every second matmul of a layer is recomputed
        p_attn = 3.5  # K and O of Q, K, V, O: half the projection FLOPs
        p_ffn = 3.0 + (1.0 / 3.0 if mp.gated_ffn == 1.0 else 0.5)  # up, or fc2 of fc1/fc2
        p_elem = 4.0  # norms, RoPE, activation, residual adds: all recomputed
    if wp.attention != 1.0:  # flash: backward at 2.5x (scores recomputed inside)
        p_core = 4.5 if rc == 2 else 3.5
    else:
        p_core = 3.0 if rc == 0 else 4.0
    n_half = 3.0 if rc == 2 else (2.5 if rc == 3 else 2.0)
    return p_lin, p_attn, p_ffn, p_elem, p_core, n_half


@jit()
def attention_pairs(mp, s):
    """Attended (query, key) pairs of a length-``s`` sequence as ``(causal, pair_frac)``:
    causal attention's share of the s² pairs, and the layer average of the pairs attended
    over full causal attention (local layers see at most ``window`` keys)."""
    causal = 1.0 - (s - 1.0) / (2.0 * s)
    pair_frac = 1.0
    if mp.n_local > 0.0 and s > mp.window:  # local layers attend to the last window tokens
        l_share = mp.n_local / mp.n_layers
        pair_frac = ((1.0 - l_share)
                     + l_share * window_keys(s, mp.window) / (s * s * causal))
    return causal, pair_frac


# --- per layer and micro-batch: roofline ops ----------------------------------------------
@jit()
def kv_heads_per_rank(mp, tp):
    """K/V heads on one TP rank (replicated once TP exceeds the KV heads)."""
    return mp.n_kv_heads / tp if tp <= mp.n_kv_heads else 1.0


@jit()
def attention_weights(mp, tp):
    """Attention parameters of one layer on a TP rank: Q and O by query head, K and V by
    KV head, MLA's down-projections (``rep_params``) whole on every rank."""
    return mp.qo_params / tp + mp.kv_params / min(tp, mp.n_kv_heads) + mp.rep_params


@jit()
def attention_projections(mp, tokens, tp, bw, passes):
    """Forward + backward GEMMs of the attention projections (QKV, O) for ``T`` tokens:
    ``(FLOPs, HBM bytes)``; bytes are the rank's weights and the projections' inputs and
    outputs (``bw`` bytes per element)."""
    f_lin = (passes * 2.0 * tokens * (mp.qo_params + mp.kv_params) / tp
             + passes * 2.0 * tokens * mp.rep_params)
    b_lin = passes * (attention_weights(mp, tp) * bw + tokens * mp.d_model * bw * (2.0 + 2.0 / tp))
    return f_lin, b_lin


@jit()
def kv_block_bytes(mp, mb, s, cp, tp, bw):
    """Bytes of one CP rank's K and V block (its s / cp tokens, its TP rank's KV heads)."""
    return mb * (s / cp) * kv_heads_per_rank(mp, tp) * (mp.qk_dim + mp.v_dim) * bw


@jit()
def attention_core(mp, wp, cp, tp, bw, passes, causal, pair_frac):
    """The attention core (QK^T, softmax, AV), every pass: ``(FLOPs, HBM bytes)``.

    Flash (fused) cores compute the causal (and windowed) pairs only and read K and V
    per attended block; an unfused core (Megatron-LM's CoreAttention) runs batched
    matmuls over all s x s scores, the causal mask applied in the softmax, and writes the
    score matrix (QK^T), reads and writes it (fused scale-mask-softmax) and reads it (AV):
    4 x ``bw`` bytes per score."""
    mb = wp.micro_batch
    s = wp.s_kv
    h = mp.n_heads
    adim = 0.5 * (mp.qk_dim + mp.v_dim)  # mean of the score and value widths per head
    kv_block = kv_block_bytes(mp, mb, s, cp, tp, bw)
    qo = 2.0 * mb * (s / cp) * (h / tp) * adim * bw
    if wp.attention != 1.0:  # causal (and windowed) pairs only
        f_core = passes * 4.0 * mb * s * s * causal * pair_frac * adim * h / (tp * cp)
        b_core = passes * (kv_block * (1.0 + cp * causal * pair_frac) + qo)
        return f_core, b_core
    scores = mb * (h / tp) * (s / cp) * s
    f_core = passes * 4.0 * mb * s * s * adim * h / (tp * cp)
    b_core = passes * (kv_block * (1.0 + cp) + qo + 4.0 * bw * scores)
    return f_core, b_core


@jit()
def ffn_gemms(mp, tokens, ffn_tokens, shard, tp, ep, etp, imbalance, bw, passes):
    """Forward + backward GEMMs of the FFN (dense, or the routed and shared experts and
    the router) for ``ffn_tokens`` tokens over ``shard`` ranks: ``(FLOPs, HBM bytes)``.

    Without EP the weights read are those of the experts the tokens touch; with EP (``ep``
    > 1) the FLOPs per device stay (each rank's tokens / tp, k copies, spread over the EP
    ranks; with expert TP an expert-TP group's etp·tokens·k/tp copies on 1/etp of each
    expert), the routed experts' times ``imbalance`` on the busiest rank; each rank reads
    its local expert shards (of E/ep, those its group's copies touch, 1/etp of each)."""
    E = mp.n_experts
    d = mp.d_model
    f_ffn = passes * 2.0 * ffn_tokens * mp.ffn_active_params / shard
    if ep > 1.0:
        routed = mp.top_k * mp.expert_params * mp.moe_layers / mp.n_layers
        f_ffn += passes * 2.0 * ffn_tokens * (imbalance - 1.0) * routed / shard
        local = min(E / ep, etp * tokens * mp.top_k / tp)
        b_ffn = passes * ((local * mp.expert_params / etp + mp.router_params / tp) * bw
                          + 2.0 * ffn_tokens * d * bw)
        return f_ffn, b_ffn
    touched = min(E, ffn_tokens * mp.top_k) if E > 1.0 else 1.0
    b_ffn = passes * ((touched * mp.expert_params + mp.router_params) / shard * bw
                      + 2.0 * ffn_tokens * d * bw)
    return f_ffn, b_ffn


@jit()
def lm_head(mp, m, tokens, tp, bw):
    """The LM head over the step's ``m`` micro-batches, forward + backward:
    ``(FLOPs, HBM bytes)`` (its weights, and the fp32 logits written and read)."""
    f_head = m * 3.0 * 2.0 * tokens * mp.d_model * mp.vocab_size / tp
    b_head = m * (3.0 * mp.vocab_size * mp.d_model * bw / tp
                  + 2.0 * tokens * mp.vocab_size / tp * 4.0)
    return f_head, b_head


@jit()
def elementwise_bytes(mp, tokens, tok_res, ffn_tokens, shard, tp, bw, passes):
    """HBM bytes of the fused element-wise ops per layer, every pass: 2 norms (read +
    write) and 2 residual adds (2 reads + 1 write) on the ``tok_res`` (SP-sharded)
    residual-stream tokens, RoPE on Q and K, the FFN activation (SwiGLU reads 2 d_ff and
    writes d_ff, GeLU reads and writes d_ff)."""
    d = mp.d_model
    ffn_elem = mp.ffn_active_params / d if d > 0.0 else 0.0  # ~3 d_ff gated, 2 d_ff GeLU
    return passes * bw * (tok_res * 10.0 * d
                          + tokens * 2.0 * (mp.n_heads / tp + kv_heads_per_rank(mp, tp))
                          * mp.head_dim + ffn_tokens * ffn_elem / shard)


@jit()
def eager_elementwise_bytes(mp, tokens, tok_res, ffn_tokens, shard, tp, passes):
    """Extra HBM bytes per layer, every pass, of PyTorch-eager element-wise ops over fused
    ones, as torchtitan's Llama writes them (``torchtitan/models/norms.py`` ``RMSNorm``
    and ``models/llama/model.py`` ``apply_rotary_emb`` / ``FeedForward`` at 9dec370): an
    RMSNorm upcasts, squares, means, scales, downcasts and multiplies by its weight, 36
    bytes per element against a fused kernel's 4 (two per layer); RoPE upcasts Q and K,
    multiplies by the complex frequencies and downcasts, 20 against 4; the SwiGLU product
    ``silu(a) * b`` is a second kernel, 10 bytes per FFN element against 6 (the FFN's
    elements count gate, up and output: a third of them is the product's width)."""
    d = mp.d_model
    rope_elems = tokens * (mp.n_heads / tp + kv_heads_per_rank(mp, tp)) * mp.head_dim
    ffn_elem = mp.ffn_active_params / d if d > 0.0 else 0.0
    extra = tok_res * 2.0 * 32.0 * d + rope_elems * 16.0
    if mp.gated_ffn == 1.0:
        extra += ffn_tokens * ffn_elem / shard / 3.0 * 4.0
    return passes * extra


@jit()
def moe_permutes(mp, rows, bw, passes):
    """HBM bytes per layer (averaged over dense and MoE layers), every pass over the FFN,
    of MoE token permutation for ``rows`` tokens (see ``common.moe_permute_bytes``)."""
    return passes * moe_permute_bytes(mp.top_k, mp.d_model, bw, rows) * mp.moe_layers / mp.n_layers


@jit()
def fp8_cast_bytes(mp, tokens, tok_res, ffn_tokens, tp, shard, ep_div, bw, fwd_passes):
    """HBM bytes per layer and micro-batch of Transformer Engine's FP8 casts: each
    forward pass casts every GEMM's activation operand, the backward every GEMM's output
    gradient; a cast reads the 16-bit tensor and writes an FP8 copy and its transpose
    (the weight-gradient operand): ``bw + 2`` bytes per element, 2 where the cast is
    fused into the norm before the GEMM (QKV, and FC1 of dense layers: the norm's own
    read and write are element-wise bytes already).

    Per token on one device, layer-averaged over dense and MoE layers: the QKV input
    (``d`` on the sequence-parallel shard), the O input (query width / tp), the FC1
    input (``d`` per routed copy; ``ep_div`` = tp when EP spreads a rank's tokens / tp'
    copies), the FC2 input (``ffn_width`` / shard: every copy's expert width); the
    gradients of the QKV output (query + KV width / tp), the O output (``d``), the
    gate/up output and the FC2 output (``d`` per copy). MLA's projections are read as
    query and KV widths (an approximation).
    """
    d = mp.d_model
    s_m = mp.moe_layers / mp.n_layers
    k = mp.top_k if s_m > 0.0 else 1.0
    q_w = mp.qo_params / (2.0 * d) / tp
    qkv_w = (mp.qo_params / 2.0 + mp.kv_params) / d / tp
    ff = ffn_tokens * mp.ffn_width / shard
    up = (2.0 if mp.gated_ffn == 1.0 else 1.0) * ff
    routed = ffn_tokens * s_m * k / ep_div
    dense = ffn_tokens * (1.0 - s_m)
    fused = tok_res * d * (2.0 - s_m)
    inputs = tokens * q_w + routed * d + ff
    grads = tokens * qkv_w + tokens * d + up + (routed + dense) * d
    return fwd_passes * (2.0 * fused + (bw + 2.0) * inputs) + (bw + 2.0) * grads


# --- per layer and micro-batch: collectives -----------------------------------------------
@jit()
def group_collective(acc, nbytes, g, k, tier, topo, allreduce, count, in_switch):
    """Add ``count`` collectives of ``nbytes`` over g members (k per cube) spanning
    ``tier`` to ``acc`` (wire bytes per tier, link latency in ns): a ring inside a cube,
    hierarchical across cubes (see ``hier_factors``) at NCCL's latencies (the base once
    per collective, ``alpha_intra_scaleout_ns`` per hop inside the cube, the tier's alpha
    per network step). ``allreduce``: an all-reduce, or a reduce-scatter + all-gather pair
    (sequence parallelism) of the same traffic, two collectives; ``in_switch``: a true
    all-reduce, which a cube whose switch reduces (``topo.nvls``) runs in the switch
    (``collectives.in_switch_wire``). Otherwise one all-gather or one reduce-scatter."""
    if g <= 1.0 or count == 0.0:
        return
    if tier == 0:
        m = 2.0 if allreduce else 1.0
        wire = m * (g - 1.0) / g
        if allreduce and in_switch:
            wire = in_switch_wire(wire, nbytes, topo.nvls)
        add_comm(acc, 0, count * wire * nbytes, count * m * (g - 1.0) * topo.alpha_intra_ns)
        return
    f0, f1, h0, h1 = hier_factors(g, k, topo.nics_per_cube, topo.pes_per_cube, allreduce)
    acc[0] += count * f0 * nbytes
    acc[tier] += count * f1 * nbytes
    n_ops = 2.0 if (allreduce and not in_switch) else 1.0
    acc[3] += count * (n_ops * topo.coll_base_scaleout_ns + h0 * topo.alpha_intra_scaleout_ns
                       + h1 * tier_alpha_ns(topo, tier))


@jit()
def tp_collectives(acc, act, tp, k_tp, tier_tp, topo, count, sp):
    """``count`` TP collectives of the ``act``-byte activation into ``acc``: all-reduces,
    or with sequence parallelism (``sp``) reduce-scatter + all-gather pairs of equal
    volume (which the switch does not reduce)."""
    group_collective(acc, act, tp, k_tp, tier_tp, topo, True, count, not sp)


@jit()
def tp_cp_ffn_collectives(acc, mp, mb, s, tp, cp, tier_tpcp, tier_cp, topo, count):
    """The FFN sharded over TP x CP (``ffn_shard_scope`` TP+CP): ``count`` all-reduces of
    the whole sequence's activation over the TP x CP group (in the switch inside a cube
    that reduces) and all-gathers of it over CP, into ``acc``; a ring at the tier each
    group spans, which across cubes pays the base latency once per collective."""
    g = tp * cp
    full_act = mb * s * mp.d_model * mp.bytes_per_param
    wire = allreduce_factor(g)
    if tier_tpcp == 0:
        wire = in_switch_wire(wire, full_act, topo.nvls)
    add_comm(acc, tier_tpcp, count * wire * full_act,
             count * (2.0 * (g - 1.0) * tier_alpha_ns(topo, tier_tpcp)
                      + tier_base_ns(topo, tier_tpcp)))
    add_comm(acc, tier_cp, count * allgather_factor(cp) * full_act,
             count * ((cp - 1.0) * tier_alpha_ns(topo, tier_cp) + tier_base_ns(topo, tier_cp)))


@jit()
def tp_ffn_share(mp, ep):
    """Share of the layers whose FFN runs TP-sharded with its TP collectives: all, or
    with EP (expert TP 1: routed experts run whole) the dense layers and those with
    shared experts."""
    if ep <= 1.0:
        return 1.0
    L = mp.n_layers
    return (L - mp.moe_layers + (mp.moe_layers if mp.shared_experts > 0.0 else 0.0)) / L


@jit()
def moe_alltoalls_per_layer(mp, wp):
    """Dispatch + combine all-to-alls over the EP group per layer (averaged over dense and
    MoE layers): forward 2, backward 2, + 2 with full recompute."""
    return (6.0 if int(wp.recompute) == 2 else 4.0) * mp.moe_layers / mp.n_layers


@jit()
def moe_alltoall(acc, mp, wp, topo, tokens, tp, ep, k_ep, tier_ep, count):
    """``count`` MoE dispatch or combine all-to-alls over the EP group (``k_ep`` ranks per
    cube, spanning ``tier_ep``) of each rank's tokens / tp, into ``acc``: per routed
    expert, k copies (Megatron's alltoall dispatcher), or (``wp.moe_per_rank``, DeepEP)
    once per destination rank, once per node over the scale-out tier (forwarded inside
    the node over NVLink). Across cubes each pays NCCL's base latency once and its in-cube
    peers at ``alpha_intra_scaleout_ns``."""
    d = mp.d_model
    bw = mp.bytes_per_param
    cube = topo.pes_per_cube
    if wp.moe_per_rank == 1.0:
        c_rank, c_cube = ep_dispatch_copies(mp.n_experts, mp.top_k, ep, k_ep,
                                            wp.moe_round_robin == 1.0)
        a0, a1, h0, h1 = node_dedup_alltoall_factors(ep, k_ep, topo.nics_per_cube, cube,
                                                     c_rank, c_cube)
        msg = tokens / tp * d * bw  # one token row
    else:
        a0, a1, h0, h1 = alltoall_factors(ep, k_ep, topo.nics_per_cube, cube)
        msg = tokens / tp * mp.top_k * d * bw
    msg *= busiest_share(mp, wp, ep)  # the busiest rank's ingress (balanced: 1)
    acc[0] += count * a0 * msg
    acc[tier_ep] += count * a1 * msg
    hop = topo.alpha_intra_ns if tier_ep == 0 else topo.alpha_intra_scaleout_ns
    acc[3] += count * (tier_base_ns(topo, tier_ep) + h0 * hop + h1 * tier_alpha_ns(topo, tier_ep))


@jit()
def expert_tp_relayout(acc, mp, wp, topo, tokens, tp, ep, etp, k_etp, tier_etp, count):
    """The token re-layout between the EP and the expert-TP groups (Megatron-Core's
    ``MoEAlltoAllTokenDispatcher`` with expert TP > 1): after each dispatch all-to-all the
    etp ranks of an expert-TP group all-gather the token copies they received (each
    rank's tokens / tp, k copies, times the busiest rank's :func:`busiest_share`), before each
    combine they reduce-scatter the expert outputs; ``count`` of them (one per
    dispatch or combine), into ``acc``."""
    if etp <= 1.0 or count == 0.0:
        return
    rows = tokens / tp * mp.top_k * busiest_share(mp, wp, ep)
    gathered = etp * rows * mp.d_model * mp.bytes_per_param
    group_collective(acc, gathered, etp, k_etp, tier_etp, topo, False, count, False)


@jit()
def zero3_param_gathers(acc, params, g, k, tier, topo, wp, pw):
    """ZeRO-3 / FSDP all-gathers of a layer's ``params`` (``pw`` bytes each) over the g
    members sharding them, for the forward, the backward and a full recompute, into
    ``acc`` (prefetched: they overlap the layer's compute)."""
    n_ag = 3.0 if int(wp.recompute) == 2 else 2.0
    group_collective(acc, params * pw, g, k, tier, topo, False, n_ag, False)


@jit()
def cp_ring(lay, mp, wp, tp, bw, topo, tier_cp):
    """CP ring attention per layer and micro-batch: ``(bytes, link latency ns)`` of the
    cp − 1 steps of each pass (forward KV; backward KV and dKV; again when the core is
    recomputed), each passing the KV block (``cp_ring_variant`` ``kv``) or Q, O and the
    softmax statistics (``qoml``); each step a send, across cubes with the base latency.
    Overlapped with the attention core by the combine."""
    cp = float(lay[LAYOUT.cp])
    if cp <= 1.0:
        return 0.0, 0.0
    rc = int(wp.recompute)
    mb = wp.micro_batch
    s = wp.s_kv
    n_ring = 4.0 if rc == 2 else (3.0 if (rc == 0 or wp.attention != 1.0) else 4.0)
    if lay[LAYOUT.cp_ring_variant] == 0:
        per_step = kv_block_bytes(mp, mb, s, cp, tp, bw)
    else:
        adim = 0.5 * (mp.qk_dim + mp.v_dim)
        per_step = mb * (s / cp) * (mp.n_heads / tp) * (2.0 * adim * bw + 8.0)
    return (n_ring * (cp - 1.0) * per_step,
            n_ring * (cp - 1.0) * (tier_alpha_ns(topo, tier_cp) + tier_base_ns(topo, tier_cp)))


@jit()
def kernels_per_layer(mp, p_elem, n_half, n_a2a, tp, ep, etp):
    """Kernels per layer and micro-batch, each paying its fixed device-side cost
    (``Efficiency.op_latency_ns``; the host launches them ahead of the device, so no
    launch time): the forward's per pass over the element-wise ops (the backward counts
    twice, a recomputed forward once more), one per TP collective and EP all-to-all (and
    per expert-TP all-gather / reduce-scatter beside it)."""
    n_ops = p_elem * (OPS_LAYER + (mp.norms - 2.0)
                      + (OPS_MOE * mp.moe_layers / mp.n_layers if mp.n_experts > 1.0 else 0.0))
    if tp > 1.0:
        n_ops += 2.0 * n_half
    if ep > 1.0:
        n_ops += n_a2a
        if etp > 1.0:
            n_ops += n_a2a
    return n_ops


# --- the pipeline ---------------------------------------------------------------------------
@jit()
def pipeline_schedule(mp, pp, m, vs):
    """Interleaved 1F1B: ``(layers per stage, micro-batch slots, layer slots on the
    critical path)``; the slots are the m micro-batches plus the bubble (pp − 1) / v."""
    lps = math.ceil(mp.n_layers / pp)
    slots = m + (pp - 1.0) / vs  # interleaved 1F1B: bubble (p - 1) / (v m)
    return lps, slots, lps * slots


@jit()
def pipeline_p2p(act, tp, pp, vs, m, topo, tier_pp):
    """Pipeline sends per step: ``(bytes, link latency ns)`` of 2 (v·m + pp − 2) p2p
    transfers, each 1/TP of the ``act``-byte activation (Megatron's scatter/gather); across
    cubes each send pays the base latency too."""
    if pp <= 1.0:
        return 0.0, 0.0
    n_p2p = 2.0 * (vs * m + pp - 2.0)
    return n_p2p * act / tp, n_p2p * (tier_alpha_ns(topo, tier_pp) + tier_base_ns(topo, tier_pp))


# --- once per step: gradients and the optimizer --------------------------------------------
@jit()
def grad_reduce(tail, step, params, g, k, tier, zs, m, gb, pw, topo):
    """The data-parallel gradient reduction of ``params`` over g members: ZeRO 2-3 a
    reduce-scatter per micro-batch (ZeRO 2: + one all-gather of the updated parameters),
    ZeRO 1 one reduce-scatter + one all-gather, ZeRO 0 one all-reduce. Gradients go to
    ``tail`` (they may overlap the backward), the parameter all-gathers to ``step`` (after
    the step: never hidden). ``gb``: bytes per gradient, ``bw``: per gathered parameter."""
    if g <= 1.0:
        return
    grads = params * gb
    if zs >= 2:  # gradients partitioned: reduce-scatter after every micro-batch
        group_collective(tail, grads, g, k, tier, topo, False, m, False)
        if zs == 2:  # then all-gather the updated 16-bit parameters once
            group_collective(step, params * pw, g, k, tier, topo, False, 1.0, False)
    elif zs == 1:  # reduce-scatter the gradients, all-gather the updated parameters
        group_collective(tail, grads, g, k, tier, topo, False, 1.0, False)
        group_collective(step, params * pw, g, k, tier, topo, False, 1.0, False)
    else:  # one all-reduce per step
        group_collective(tail, grads, g, k, tier, topo, True, 1.0, True)


@jit()
def grad_reduce_overlap(wp, p_ffn, m, slots):
    """Share of the layer slots' compute the gradient reduction hides under when it
    overlaps the backward (bucketed): the backward of the micro-batches it follows (all
    of them at ZeRO 2-3, the last otherwise); 0 without overlap."""
    if wp.grad_overlap != 1.0:
        return 0.0
    back = 2.0 / p_ffn
    return back * (m if int(wp.zero_stage) >= 2 else 1.0) / slots


@jit()
def layer_params(mp, tp, ep, etp, shard):
    """Parameters of one layer on a device: ``(dense, routed experts)``; dense are the
    attention, the FFN over its ``shard`` ranks (with EP: the router, shared experts and
    dense layers by TP) and the norms; the local routed experts (EP) are E / ep experts,
    1/etp of each with expert TP."""
    if ep > 1.0:
        dense = attention_weights(mp, tp) + mp.router_params / tp + mp.norm_params
        return dense, mp.n_experts / ep * mp.expert_params / etp
    return attention_weights(mp, tp) + mp.ffn_params / shard + mp.norm_params, 0.0


@jit()
def stage_params(mp, layer_dense, layer_exp, lps, tp, pp):
    """Parameters on the busiest (first) stage's device: ``(dense, routed experts)``;
    dense adds the embedding (with PP: the embedding or the LM head, one vocabulary
    matrix by TP)."""
    emb = mp.vocab_size * mp.d_model / tp if pp > 1.0 else mp.embedding_params / tp
    return lps * layer_dense + emb, lps * layer_exp


@jit()
def optimizer_step(wp, p_dev, p_dense, p_exp, g_sh, g_edp, use_ep):
    """The Adam step on the device: ``(parameters it updates, HBM bytes)``; ZeRO 1-3
    shard them over the g_sh members (experts over the EDP group); HBM-bound
    (``ADAM_BYTES_PER_PARAM`` + the gradient), on the host with offload (0 bytes)."""
    zs = int(wp.zero_stage)
    opt_share = p_dev / g_sh if zs >= 1 else p_dev
    if use_ep and zs >= 1:
        opt_share = p_dense / g_sh + p_exp / g_edp
    if wp.offload >= 1.0:
        return opt_share, 0.0
    return opt_share, opt_share * (ADAM_BYTES_PER_PARAM + wp.grad_bytes)


# --- memory per device ----------------------------------------------------------------------
@jit()
def zero_state_bytes(stage, sixteen_bit, fsdp):
    """Model-state bytes per (model-parallel-sharded) parameter:
    ``(kept whole, partitioned over the data-parallel ranks)``.

    Total states = ``whole · N + partitioned · N / G``, except at ZeRO-3, where the
    whole part applies to the largest layer (gathered in full: its parameters and
    gradients) instead of ``N``. DeepSpeed, 16-bit mixed precision (fp16, bf16, fp8
    with 16-bit weights), its estimators' formula (``estimate_zero2/3_model_states_
    mem_needs``): Z0 (20, 0), Z1 (4, 16), Z2 (2, 18), Z3 (4, 18). fp32 (no 16-bit copy;
    the same counting with 4-byte parameters and gradients, 8 bytes of Adam states):
    Z0 (16, 0), Z1 (8, 8), Z2 (4, 12), Z3 (8, 16). FSDP keeps no 16-bit copy at any
    precision (its sharded fp32 parameters are the master, cast when gathered): the
    fp32 counting, with the gathered layer at 16 bits (Z3 (4, 16)) in mixed precision.
    """
    if sixteen_bit and not fsdp:
        if stage == 0:
            return 20.0, 0.0
        if stage == 1:
            return 4.0, 16.0
        if stage == 2:
            return 2.0, 18.0
        return 4.0, 18.0
    if stage == 0:
        return 16.0, 0.0
    if stage == 1:
        return 8.0, 8.0
    if stage == 2:
        return 4.0, 12.0
    return (4.0 if sixteen_bit else 8.0), 16.0


@jit()
def model_states(wp, p_dense, p_exp, p_dev, largest, g_sh, g_edp, pw, use_ep):
    """Model-state bytes per device. Megatron: weights (16-bit or FP8, ``pw``) + main
    grads whole, fp32 master weights + Adam (12 B; /g_sh with the distributed optimizer);
    DeepSpeed / FSDP: :func:`zero_state_bytes` (ZeRO-3 holds the fully gathered largest
    layer, its parameters + gradients). Routed experts over the EDP group."""
    zs = int(wp.zero_stage)
    gb = wp.grad_bytes
    if int(wp.framework) == 1:
        states = (pw + gb + (12.0 if zs == 0 else 12.0 / g_sh)) * p_dense
        if use_ep:  # routed experts over the expert-data-parallel group
            states += (pw + gb + (12.0 if zs == 0 else 12.0 / g_edp)) * p_exp
        return states
    whole, part = zero_state_bytes(zs, int(wp.precision) != 2, int(wp.framework) == 2)
    states = whole * (largest if zs == 3 else p_dev) + part * p_dense / g_sh
    if use_ep:  # routed experts sharded over the expert-data-parallel group
        states += part * p_exp / g_edp
    return states


@jit()
def zero_offload(wp, p_dev, p_dense, p_exp, largest, g_sh, g_edp, opt_share, bw, p_lin, m,
                 topo, use_ep):
    """ZeRO-Offload (``wp.offload`` 1; fp32 master, m, v and the 16-bit gradients on
    the host) and ZeRO-Infinity (2; parameters fetched for every pass): ``(device state
    bytes, host bytes, PCIe time ns per step)``."""
    zs = int(wp.zero_stage)
    p_gpu = p_dev / g_sh if zs == 3 else p_dev
    if use_ep and zs == 3:
        p_gpu = p_dense / g_sh + p_exp / g_edp
    states = 2.0 * p_gpu + (4.0 * largest if zs == 3 else 0.0)
    host = opt_share * 14.0
    pcie = topo.pcie_gbs if topo.pcie_gbs > 0.0 else 1.0
    fixed = opt_share * (2.0 + bw) / pcie  # gradients down, updated weights up
    if int(wp.offload) == 2:  # ZeRO-Infinity: parameters fetched for every pass
        states = 4.0 * largest
        host += 2.0 * p_gpu
        fixed += p_lin * m * p_gpu * bw / pcie
    return states, host, fixed


@jit()
def activation_bytes_per_layer(seq, mb, d, heads, tp, recompute, sp, fp8_saved, flash):
    """Korthikanti et al. 2022, Table 2 (16-bit activations) for one layer, one micro-batch.

    Per token and hidden unit: 10 bytes outside the TP shards without sequence
    parallelism (the two norm inputs 4, the QKV and FC1 inputs 4, two dropout masks 2)
    and 24 inside (Q, K, V 6, the attention output 2, the GeLU input 8, the FC2 input
    8), + 5·heads·seq/d of attention scores unless they are recomputed (or never stored,
    as with flash attention: ``recompute`` 1). ``fp8_saved``: Transformer Engine's ``Linear``
    saves the FP8 cast of its input (1 byte instead of 2) for the weight gradient: the
    QKV and FC1 inputs take 2 bytes off the replicated part, FC2's 4 off the sharded
    one; the output projection's FP8 input is 1 more byte where a flash core keeps its
    16-bit output O for its own backward (``flash``: 24 → 21), 1 less where nothing else
    needs O (unfused: 24 → 19)."""
    if recompute == 2:  # full: only each layer's input is kept
        return 2.0 * seq * mb * d / (tp if sp else 1.0)
    rep = 8.0 if fp8_saved else 10.0
    shard = 24.0
    if fp8_saved:
        shard = 21.0 if flash else 19.0
    if sp:
        per = (rep + shard) / tp
    else:
        per = rep + shard / tp
    if recompute == 0:
        per += 5.0 * heads * seq / (d * tp)
    return seq * mb * d * per


@jit()
def op_sac_bytes_per_layer(seq, mb, d, kv_width, ffn_width, gated, tp, sp):
    """Per-operator selective checkpointing as torchtitan applies it (16-bit): a layer
    keeps its input, the outputs of its matmuls except every second one (Q, V, the
    attention output, the first FFN matmul and, gated, the down projection; K, O and the
    gated up projection are recomputed) and, under TP, the reduce-scattered outputs.
    ``kv_w``: local K/V width (KV heads on this rank x head_dim); ``f_w``: local width of
    the first FFN matmul per token (top_k x d_ff for MoE)."""
    width = d / (tp if sp else 1.0) + 2.0 * d / tp + kv_width + ffn_width
    if gated:
        width += d  # partial sums of the down projection: full width before the reduce
    if tp > 1.0:
        width += 2.0 * d / tp  # reduce-scatter outputs of attention and FFN
    return 2.0 * seq * mb * width


@jit()
def activation_memory(mp, wp, cp, tp, pp, m, lps):
    """Activation bytes per device on the first stage: the micro-batches in flight
    (min(pp, m); more with interleaving) of its ``lps`` layers, each per
    :func:`activation_bytes_per_layer` (flash keeps no s² scores) or
    :func:`op_sac_bytes_per_layer`, + the full working set of the layer being recomputed
    (full recompute)."""
    rc = int(wp.recompute)
    flash = wp.attention != 1.0
    sp = wp.sequence_parallel == 1.0
    fp8_saved = wp.a_bytes == 1.0  # Transformer Engine keeps FP8 copies of GEMM inputs
    s = wp.s_kv / cp
    mb = wp.micro_batch
    d = mp.d_model
    h = mp.n_heads
    if rc == 3:
        act_layer = op_sac_bytes_per_layer(s, mb, d, kv_heads_per_rank(mp, tp) * mp.head_dim,
                                           mp.ffn_width / tp, mp.gated_ffn == 1.0, tp, sp)
    else:
        rc_mem = 1 if (flash and rc == 0) else rc  # flash keeps no s^2 scores
        act_layer = activation_bytes_per_layer(s, mb, d, h, tp, rc_mem, sp, fp8_saved, flash)
    inflight = min(pp, m)
    if wp.virtual_stages > 1.0 and pp > 1.0:  # interleaving: more in flight on stage 1
        inflight = inflight * (1.0 + (pp - 1.0) / (pp * wp.virtual_stages))
    act_mem = lps * inflight * act_layer
    if rc == 2:  # the layer being recomputed holds its full working set
        act_mem += activation_bytes_per_layer(s, mb, d, h, tp, 1 if flash else 0, sp,
                                              fp8_saved, flash)
    return act_mem


@jit()
def logit_bytes(mp, wp, tokens, tp):
    """The loss's logit buffers at its peak: a fused / compiled loss keeps the fp32
    softmax (``FUSED_LOSS_BYTES`` per element); PyTorch's eager
    ``cross_entropy(logits.float())`` the fp32 log-softmax and the fp32 gradients of its
    output and input (``EAGER_LOSS_BYTES``)."""
    return tokens * mp.vocab_size / tp * (EAGER_LOSS_BYTES if wp.eager_loss == 1.0
                                     else FUSED_LOSS_BYTES)


# --- rates and the step's model FLOPs --------------------------------------------------------
@jit()
def matmul_rates(wp, topo):
    """FLOP multipliers against the 16-bit peak of the factor each op runs at:
    ``(projections and FFN, attention core, LM head)``. fp32 (TF32) matmuls run at half
    the 16-bit peak; fp8 GEMMs (Transformer Engine) at ``fp8_ratio`` of it, the core and
    the head staying 16-bit; GEMMs at the family's matmul fraction relative to Hopper's
    (``mm_ratio``); a FlashAttention-2-class core (flash2) at ``fa2_ratio`` of the native
    kernel's rate; an unfused core's batched GEMMs at the matmul rate."""
    slow = 2.0 if int(wp.precision) == 2 else 1.0  # fp32 (TF32): half the 16-bit peak
    mm = slow
    if int(wp.precision) == 3 and topo.fp8_ratio > 0.0:  # fp8 GEMMs; attention, head bf16
        mm = 1.0 / topo.fp8_ratio
    mm /= topo.mm_ratio
    if wp.attention == 1.0:
        core = slow / topo.mm_ratio
    else:
        core = slow / attention_kernel_rate(wp, topo)
    return mm, core, slow / topo.mm_ratio


@jit()
def model_flops(mp, wp, causal, pair_frac):
    """Model FLOPs per step, whole system: 6 N per token over the matmul weights (the
    embedding gather is no matmul; a tied embedding still is the LM head) + causal (and
    windowed) attention."""
    B = wp.batch
    s = wp.s_kv
    adim = 0.5 * (mp.qk_dim + mp.v_dim)
    mm_params = mp.n_active_params - mp.embedding_params + mp.vocab_size * mp.d_model
    return (6.0 * mm_params * (B * s)
            + 12.0 * mp.n_layers * B * s * s * causal * pair_frac * mp.n_heads * adim)


# --- the row: the pieces summed by name -------------------------------------------------------
@jit()
def _train_row(row, mp, wp, topo, out):
    """One layout row of training coefficients into ``out`` (see the module docstring).
    The pieces take the row as a tuple (``lay``, indexed by ``schema.LAYOUT``): passed by
    value, with no reference counting per call."""
    lay = (row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[8], row[9])
    cp = lay[LAYOUT.cp]
    tp = lay[LAYOUT.tp]
    fcp = float(cp)
    ftp = float(tp)
    fpp = float(lay[LAYOUT.pp])
    fep = float(lay[LAYOUT.ep])
    use_ep = lay[LAYOUT.ep] > 1
    bw = mp.bytes_per_param
    pw = 1.0 if wp.w_bytes == 1.0 else bw  # FP8 primary weights: 1-byte parameter copies
    zs = int(wp.zero_stage)
    sp = wp.sequence_parallel == 1.0

    valid = layout_valid(lay, mp, wp, topo)
    strides, tier_tp, tier_cp, tier_pp, tier_dp, tier_tpcp = placement(
        tp, cp, lay[LAYOUT.pp], lay[LAYOUT.dp], lay[LAYOUT.tp_placement],
        lay[LAYOUT.cp_placement], topo)
    k_tp = members_per_cube(ftp, float(strides[0]), topo.pes_per_cube)
    g_sh, k_sh, tier_sh = gradient_group(lay, strides, tier_dp, tier_cp, topo.pes_per_cube)
    fetp = wp.expert_tp
    f_edp, k_ep, tier_ep, k_edp, tier_edp, k_etp, tier_etp = 1.0, 1.0, 0, 1.0, 0, 1.0, 0
    if use_ep:
        ok, f_edp, k_ep, tier_ep, k_edp, tier_edp, k_etp, tier_etp = expert_groups(
            lay, mp, wp, strides, topo)
        valid = valid and ok
    else:  # experts sharded over TP as a dense FFN: expert TP 1 or TP
        valid = valid and (fetp == 1.0 or fetp == ftp)
    m, T, _, _, shard, wide = work_per_device(lay, wp)
    p_lin, _, p_ffn, p_elem, _, n_half = recompute_passes(mp, wp)
    _layer_ops(lay, mp, wp, topo, out)

    # per layer and micro-batch collectives: blocking (acc) or overlapping the layer's
    # compute (ovl: only the excess shows); wire bytes per tier and link latency
    acc = np.zeros(4)
    ovl = np.zeros(4)
    act = T * mp.d_model * bw
    tp_acc = ovl if wp.tp_overlap == 1.0 else acc  # Megatron's --tp-comm-overlap
    n_a2a = moe_alltoalls_per_layer(mp, wp) if use_ep else 0.0
    if tp > 1:  # the attention block's
        tp_collectives(tp_acc, act, ftp, k_tp, tier_tp, topo, n_half, sp)
    if use_ep:  # dispatch + combine; Megatron-Core's moe_a2a_overlap hides them
        a2a_acc = ovl if wp.moe_a2a_overlap == 1.0 else acc
        moe_alltoall(a2a_acc, mp, wp, topo, T, ftp, fep, k_ep, tier_ep, n_a2a)
        expert_tp_relayout(a2a_acc, mp, wp, topo, T, ftp, fep, fetp, k_etp, tier_etp, n_a2a)
    if wide:
        tp_cp_ffn_collectives(acc, mp, wp.micro_batch, wp.s_kv, ftp, fcp, tier_tpcp, tier_cp,
                              topo, n_half)
    elif tp > 1:  # the FFN block's
        tp_collectives(tp_acc, act, ftp, k_tp, tier_tp, topo, n_half * tp_ffn_share(mp, fep),
                       sp)
    out.n_ops = kernels_per_layer(mp, p_elem, n_half, n_a2a, ftp, fep, fetp)
    layer_dense, layer_exp = layer_params(mp, ftp, fep, fetp, shard)
    if zs == 3:  # prefetched parameter all-gathers overlap the compute
        zero3_param_gathers(ovl, layer_dense, g_sh, k_sh, tier_sh, topo, wp, pw)
        zero3_param_gathers(ovl, layer_exp, f_edp, k_edp, tier_edp, topo, wp, pw)
    out.ring_bytes, out.ring_alpha_ns = cp_ring(lay, mp, wp, ftp, bw, topo, tier_cp)

    lps, slots, layer_mult = pipeline_schedule(mp, fpp, m, wp.virtual_stages)
    out.pp_bytes, out.pp_alpha_ns = pipeline_p2p(act, ftp, fpp, wp.virtual_stages, m, topo,
                                                 tier_pp)

    p_dense, p_exp = stage_params(mp, layer_dense, layer_exp, lps, ftp, fpp)
    p_dev = p_dense + p_exp if use_ep else p_dense
    tail = np.zeros(4)  # once-per-step gradient collectives (may overlap the backward)
    step = np.zeros(4)  # once-per-step collectives after the step (never hidden)
    grad_reduce(tail, step, p_dense, g_sh, k_sh, tier_sh, zs, m, wp.grad_bytes, pw, topo)
    if use_ep:  # expert gradients over the expert-data-parallel group only
        grad_reduce(tail, step, p_exp, f_edp, k_edp, tier_edp, zs, m, wp.grad_bytes, pw, topo)
    out.tail_hide = grad_reduce_overlap(wp, p_ffn, m, slots)
    opt_share, out.tail_mem_bytes = optimizer_step(wp, p_dev, p_dense, p_exp, g_sh, f_edp,
                                                   use_ep)

    largest = max(layer_dense + layer_exp if use_ep else layer_dense,
                  mp.vocab_size * mp.d_model / ftp)
    states = model_states(wp, p_dense, p_exp, p_dev, largest, g_sh, f_edp, pw, use_ep)
    host = 0.0
    out.fixed_ns = 0.0
    if wp.offload >= 1.0:
        states, host, out.fixed_ns = zero_offload(wp, p_dev, p_dense, p_exp, largest, g_sh,
                                                  f_edp, opt_share, bw, p_lin, m, topo, use_ep)
    act_mem = activation_memory(mp, wp, fcp, ftp, fpp, m, lps)
    logits = logit_bytes(mp, wp, T, ftp)
    out.valid = 1.0 if (valid and host <= topo.host_mem_gb * 1e9) else 0.0
    out.n_devices = cp * tp * lay[LAYOUT.pp] * lay[LAYOUT.dp]
    out.mem_bytes = states + act_mem + logits
    out.mem_weights_bytes = states
    out.mem_act_bytes = act_mem + logits
    out.ring_tier = tier_cp
    out.pp_tier = tier_pp
    out.layer_mult = layer_mult
    out.tokens = wp.batch * wp.s_kv
    causal, pair_frac = attention_pairs(mp, wp.s_kv)
    out.model_flops = model_flops(mp, wp, causal, pair_frac)
    _write_comm(out, acc, ovl, tail, step, layer_mult)


@jit()
def _layer_ops(lay, mp, wp, topo, out):
    """The roofline ops of a layer and micro-batch, every pass, into ``out``: the attention
    projections, the attention core, the FFN, the LM head (per step) with their FLOPs at
    the factor each runs at (:func:`matmul_rates`), and the element-wise bytes."""
    fcp = float(lay[LAYOUT.cp])
    ftp = float(lay[LAYOUT.tp])
    fep = float(lay[LAYOUT.ep])
    bw = mp.bytes_per_param
    m, T, tok_res, ffn_tokens, shard, _ = work_per_device(lay, wp)
    ep_div = ftp if fep > 1.0 else 1.0  # EP: a rank routes its sequence-parallel T/tp slice
    causal, pair_frac = attention_pairs(mp, wp.s_kv)
    p_lin, p_attn, p_ffn, p_elem, p_core, _ = recompute_passes(mp, wp)
    mm, core, head = matmul_rates(wp, topo)
    f_lin, out.b_lin = attention_projections(mp, T, ftp, bw, p_attn)
    f_core, out.b_core = attention_core(mp, wp, fcp, ftp, bw, p_core, causal, pair_frac)
    f_ffn, out.b_ffn = ffn_gemms(mp, T, ffn_tokens, shard, ftp, fep, wp.expert_tp,
                                 busiest_share(mp, wp, fep), bw, p_ffn)
    f_head, out.b_head = lm_head(mp, m, T, ftp, bw)
    out.f_lin = mm * f_lin
    out.f_core = core * f_core
    out.f_ffn = mm * f_ffn
    out.f_head = head * f_head
    out.core_gemm = 0.0 if wp.attention != 1.0 else 1.0  # unfused: batched GEMMs
    b_elem = elementwise_bytes(mp, T, tok_res, ffn_tokens, shard, ftp, bw, p_elem)
    if wp.eager == 1.0:  # PyTorch eager: unfused norms, RoPE and SwiGLU product
        b_elem += eager_elementwise_bytes(mp, T, tok_res, ffn_tokens, shard, ftp, p_elem)
    if mp.n_experts > 1.0:  # token permutation, every pass over the FFN
        b_elem += moe_permutes(mp, ffn_tokens / ep_div, bw, p_ffn)
    if int(wp.precision) == 3 and topo.fp8_ratio > 0.0:
        b_elem += fp8_cast_bytes(mp, T, tok_res, ffn_tokens, ftp, shard, ep_div, bw,
                                 p_lin - 2.0)
    out.b_elem = b_elem


@jit()
def _write_comm(out, acc, ovl, tail, step, layer_mult):
    """The per-tier collectives into ``out``, and the fields training leaves at their
    neutral values. The non-overlappable once-per-step collectives (``step``) ride on the
    blocking per-layer terms, spread over the layer slots."""
    out.comm0_bytes = acc[0] + step[0] / layer_mult
    out.comm1_bytes = acc[1] + step[1] / layer_mult
    out.comm2_bytes = acc[2] + step[2] / layer_mult
    out.comm_alpha_ns = acc[3] + step[3] / layer_mult
    out.tail0_bytes = tail[0]
    out.tail1_bytes = tail[1]
    out.tail2_bytes = tail[2]
    out.tail_alpha_ns = tail[3]
    out.ovl0_bytes = ovl[0]
    out.ovl1_bytes = ovl[1]
    out.ovl2_bytes = ovl[2]
    out.ovl_alpha_ns = ovl[3]
    out.mem_kv_bytes = 0.0
    out.ring_overlap = 1.0
    out.lowp_mm = 0.0  # fp8 GEMMs run at train_compute x fp8_ratio (f_lin, f_ffn)
    out.lowp_head = 0.0
    out.step_ops = 0.0
    out.step_count = 0.0
    out.step_seqs = 0.0
    out.launch_ns = 0.0
    out.host_block_ns = 0.0


def layout_coeffs(layouts, mp, wp, topo):
    """Training coefficient table (records of ``schema.COEF_DTYPE``) for integer layout rows.

    Raises ``ValueError`` for an fp8 workload on a family without fp8 and for offload on
    a family without host memory."""
    if wp.precision == 3.0 and topo.fp8_ratio <= 0.0:
        raise ValueError("Workload(precision='fp8') needs a family with FP8 matmuls "
                         "(Topology.fp8_ratio > 0, e.g. H100-SXM or H200); this family has "
                         "fp8_ratio=0: pass precision='bf16' or another family")
    if wp.offload > 0.0 and (topo.host_mem_gb <= 0.0 or topo.pcie_gbs <= 0.0):
        raise ValueError("Workload.offload needs host memory and a host link "
                         "(Topology.host_mem_gb > 0 and pcie_gbs > 0); this family has none: "
                         "pass offload='none' or a family such as A100-80G")
    out = np.empty(layouts.shape[0], dtype=COEF_DTYPE)
    _layout_coeffs(layouts, mp, wp, topo, out)
    return out


@jit()
def _layout_coeffs(layouts, mp, wp, topo, out):
    """Fill ``out`` (records of ``COEF_DTYPE``, one per layout row; allocated by the
    caller, as in ``inference._layout_coeffs``)."""
    for i in range(layouts.shape[0]):
        _train_row(layouts[i], mp, wp, topo, out[i])
