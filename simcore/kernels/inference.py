"""Inference (prefill / decode) kernels over bare arrays.

Two stages, so the inner loop over (hardware × layout) is a handful of flops:

1. :func:`layout_coeffs` — per layout (integer row, see ``simcore.space.layout_table``)
   everything that does not depend on the hardware knobs: FLOPs and HBM bytes of each
   roofline op per layer, effective bytes on the wire per tier, link latencies, memory
   per device, validity, the pipeline multiplier.
2. :func:`point` — combines one coefficient row with one hardware row (the six knobs)
   into latency, fit and breakdown. :func:`evaluate_grid` runs it over the whole
   (hardware × layout) tensor; :func:`fused_best` reduces inside the loop and never
   materialises the tensor.

The model (DESIGN.md): per op the longer of ``FLOPs/peak`` and ``bytes/bw_hbm`` plus the
un-hidden part ``1 - roofline_overlap`` of the shorter; TP all-reduces of the
activations; CP ring attention passing KV blocks (``kv``) or Q, O and the softmax
statistics (``qoml``), overlapped with attention compute in prefill; ``kv_shard_mode``
for TP beyond the KV heads; ``ffn_shard_scope`` TP or TP+CP; PP p2p and bubble; DP
splits the batch (decode with PP: min(pp, batch) micro-batches in flight). Per layer and
per step kernel launches, the framework floor and its per-sequence cost (``n_ops``,
``step_ops``, ``step_count``, ``step_seqs``), residual/norm bytes (``b_elem``), hierarchical / halving-doubling TP
all-reduces, expected experts touched and expert parallelism (``ep``), separate weight /
activation / KV dtypes with fp8 / int8 / fp4 matmul rates. Multi-head latent attention
(the latent cached, one head group for sharding, replicated down-projections, prefill
decompressed, decode absorbed) and sliding-window layers (layer averages of the tokens
cached and the pairs attended) come from per-model constants of ``ModelParams``.

The first stage is an operation list: each piece prices one thing, is named after it
(:func:`attention_core_decode`, :func:`moe_alltoall`, :func:`pipeline_layers`,
:func:`weight_bytes`, ...) and returns a few named floats (a collective adds its wire
bytes per tier and link latency to the row's accumulator and returns its launches);
:func:`_coeff_row` sums them by name into a coefficient record. Pieces shared with
training live in :mod:`.common`. ``simcore.kernels.inference_ref`` is the plain-python
twin, piece by piece under the same names (``simcore.kernels.twin_table``).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ._numba import jit, prange
from .collectives import (
    allgather_factor,
    allreduce_factor,
    allreduce_hier,
    group_span,
    phase_steps,
    tier_of,
)
from .common import (
    OPS_LAYER,
    OPS_MLA,
    OPS_MOE,
    add_comm,
    attention_kernel_rate,
    busiest_share,
    ep_alltoall,
    moe_permute_bytes,
    placement,
    tier_alpha_ns,
    tier_base_ns,
    window_keys,
)
from .schema import COEF_DTYPE, FUSED_METRICS, HW, LAYOUT, N_BEST

__all__ = ["FUSED_METRICS", "N_BEST", "evaluate_grid", "fused_best", "layout_coeffs", "point"]

#: the old names of the shared pieces (now in :mod:`.common`), for callers not yet moved
_OPS_LAYER = OPS_LAYER
_OPS_MOE = OPS_MOE
_alpha = tier_alpha_ns

#: launches once per step: embedding gather, final norm, LM head, sampling
_OPS_STEP = 4.0
#: share of the framework's per-step floor left when decode steps replay CUDA graphs
_GRAPH_FLOOR = 0.25
#: host time to launch one kernel from the CPU (ns), paid by every kernel of a step that
#: is not replayed from a CUDA graph, on top of the fitted per-kernel cost
#: (``Efficiency.op_latency_ns``, what a kernel costs on the device either way). Measured,
#: not fitted: ~5 us per ``cudaLaunchKernel`` on the host (pegainfer, "From Launch Overhead
#: to CUDA Graph", susun-blog.com/blog/pegainfer-3-cuda-graph: "about 4-6 us"); a chain of
#: launches costs 6.3-7.5 us per kernel against 0.58 us per node replayed from a graph
#: (ahrefs/ocannl issue #488, standalone CUDA probe, median of 200 runs)
LAUNCH_NS = 5000.0
#: device time (ns) a routed expert's slice adds to a block-scaled FP8 grouped GEMM when
#: the expert is split over r ranks, per slice a rank runs and per (1 - 1/r)^2
#: (:func:`expert_slice_ns`). Measured, not fitted: TensorRT-LLM 1.2.0rc5's MoE layer on
#: an H200, DeepSeek-V3's shape (7168 x 2048, 256 experts, top-8), FP8 block scales,
#: balanced routing, 32 tokens: 0.50738 ms as MoE-TP8 x EP1 against 0.37348 ms as EP8
#: (the same weight bytes per rank): 133.9 us over 256 slices x (7/8)^2 (ai-dynamo/
#: aiconfigurator aic-core/src/aiconfigurator_core/systems/data/h200_sxm/moe/trtllm/
#: 1.2.0rc5/moe_perf.parquet @095f58a51c4ca8e61b66ec108d86f223f8d559ce). The same law
#: reproduces that table's 95 sliced layouts (5 shapes, r = 2-8, 8-128 tokens) to 3.8%
#: mean (16.1% priced as whole experts)
EXPERT_SLICE_NS = 683.0


# --- pieces: precision, placement of the tokens, attention geometry ------------------------


@jit()
def precision(mp, wp, topo):
    """Element widths and the matmul rate of the workload's dtypes.

    Returns ``(bytes_per_weight, bytes_per_act, bytes_per_kv, bytes_per_msg, mm_rate)``:
    bytes per weight, per activation (matmul input), per KV-cache element and per message
    element (the GEMMs' outputs and the residual stream: 16-bit when the matmul inputs are
    FP8 / INT8, whose GEMMs write 16-bit outputs the TP all-reduce sums), and the matmul
    rate relative to the 16-bit peak (FP8 / INT8 / FP4 at the family's ratio, times its
    achievable matmul fraction relative to Hopper's).
    """
    bytes_per_weight = wp.w_bytes if wp.w_bytes > 0.0 else mp.bytes_per_param
    bytes_per_act = wp.a_bytes if wp.a_bytes > 0.0 else mp.bytes_per_param
    bytes_per_kv = wp.kv_bytes if wp.kv_bytes > 0.0 else mp.bytes_per_kv
    bytes_per_msg = bytes_per_act if bytes_per_act >= 2.0 else 2.0
    rate = 1.0
    if wp.act_code == 1.0:
        rate = topo.fp8_ratio
    elif wp.act_code == 2.0:
        rate = topo.int8_ratio
    elif wp.act_code == 3.0:
        rate = topo.fp4_ratio
    rate *= topo.mm_ratio
    return bytes_per_weight, bytes_per_act, bytes_per_kv, bytes_per_msg, rate


@jit()
def weight_only(wp, topo):
    """Weight-only INT4 / INT8 weights (W4A16 / W8A16: 16-bit activations, the weights
    dequantised inside the GEMM: Marlin, AWQ / GPTQ kernels).

    Returns ``(scale_bytes, stream_ratio, mm_ratio)``: the bytes each weight's share of
    its group's 16-bit scale and zero point adds (``(2 + z) / quant_group``, z the zero
    point's bytes: none, the weight's own width packed, or 16-bit; 0 per output channel),
    the rate those GEMMs stream their weight bytes at relative to a 16-bit GEMM's
    (``Topology.wo_int4_bw_ratio`` / ``wo_int8_bw_ratio``) and the matmul rate they reach
    relative to the 16-bit one (``Topology.wo_mm_ratio``: the dequantisation). Anything
    else: ``(0, 1, 1)``.
    """
    if wp.wo_code == 0.0:
        return 0.0, 1.0, 1.0
    int4 = wp.wo_code == 2.0
    width = 0.5 if int4 else 1.0
    zero = 0.0
    if wp.quant_zeros == 1.0:
        zero = width
    elif wp.quant_zeros == 2.0:
        zero = 2.0
    scale_bytes = (2.0 + zero) / wp.quant_group if wp.quant_group > 0.0 else 0.0
    stream = topo.wo_int4_bw_ratio if int4 else topo.wo_int8_bw_ratio
    return scale_bytes, stream, topo.wo_mm_ratio


@jit()
def layout_valid(lay, mp, wp, topo):
    """Whether the layout is legal: fits the system, TP divides the heads, a layer per
    stage, a sequence per replica and a token per CP rank, the KV sharding mode matches
    TP against the cache heads, and expert parallelism (``ep`` | experts, ``ep`` | tp·dp,
    the FFN sharded by TP only) has an MoE model to split."""
    cp = lay[LAYOUT.cp]
    tp = lay[LAYOUT.tp]
    pp = lay[LAYOUT.pp]
    dp = lay[LAYOUT.dp]
    kvm = lay[LAYOUT.kv_shard_mode]
    ep = lay[LAYOUT.ep]
    fcp = float(cp)
    valid = (cp * tp * pp * dp <= topo.n_devices and int(mp.n_heads) % tp == 0
             and float(pp) <= mp.n_layers and float(dp) <= wp.batch)
    if wp.mode != 1.0 and fcp > wp.s_q:
        valid = False
    if fcp > wp.s_kv:
        valid = False
    ikvh = int(mp.cache_heads)
    if kvm == 0:  # head (duplicated beyond n_kv_heads)
        if tp <= ikvh:
            valid = valid and ikvh % tp == 0
        else:
            valid = valid and tp % ikvh == 0
    elif kvm == 2:  # head_seq
        valid = valid and tp > ikvh and tp % ikvh == 0
    if ep > 1:
        E = mp.n_experts
        wide_ffn = lay[LAYOUT.ffn_shard_scope] == 1 and cp > 1
        valid = (valid and E > 1.0 and int(E) % ep == 0 and (tp * dp) % ep == 0
                 and not wide_ffn)
    return valid


@jit()
def token_counts(dp, pp, cp, wp):
    """Sequences and tokens one device handles per pass: DP splits the batch; decode with
    PP keeps min(pp, batch) micro-batches in flight, each passing all layers; prefill
    splits the prompt over CP; continuous batching mixes other requests' prompt tokens
    into a decode pass (split like the batch).

    Returns ``(seqs_replica, in_flight, seqs_pass, mixed, tokens_local, tokens_replica)``:
    the replica's sequences, micro-batches in flight, sequences per pass, mixed prompt
    tokens per pass, tokens per device (CP-local) and per replica (all CP ranks').
    """
    decode = wp.mode == 1.0
    seqs_replica = math.ceil(wp.batch / dp)
    in_flight = min(float(pp), float(seqs_replica)) if decode else 1.0
    seqs_pass = math.ceil(seqs_replica / in_flight) if decode else seqs_replica
    q_local = 1.0 if decode else wp.s_q / float(cp)
    mixed = wp.mix_tokens / float(dp) / in_flight if decode else 0.0
    tokens_local = seqs_pass * q_local + mixed
    tokens_replica = seqs_pass * wp.s_q + mixed
    return seqs_replica, in_flight, seqs_pass, mixed, tokens_local, tokens_replica


@jit()
def attention_widths(mp, decode):
    """``(qk, vd)``: score (q·k) and value width per query head; MLA decodes in the absorbed
    form (against the latent), prefill and mixed prompt tokens in the decompressed one."""
    qk = mp.qk_dim_dec if decode else mp.qk_dim
    vd = mp.v_dim_dec if decode else mp.v_dim
    return qk, vd


@jit()
def attention_span(mp, s_q, s_kv, mix_ctx):
    """The keys the queries attend to, as layer averages.

    Returns ``(causal, s_cache, pair_frac, ctx_mix)``: the share of the ``s_q × s_kv``
    (query, key) pairs a causal mask keeps; the tokens cached per sequence (sliding-window
    layers cache at most ``window``); the attended pairs relative to full causal
    attention; and the context the mixed prompt tokens attend to. All layers global
    leaves the last three at ``s_kv``, 1 and ``mix_ctx``.
    """
    causal = 1.0 - (s_q - 1.0) / (2.0 * s_kv)
    s_cache = s_kv
    pair_frac = 1.0
    ctx_mix = mix_ctx
    if mp.n_local > 0.0:
        L = mp.n_layers
        W = mp.window
        l_share = mp.n_local / L
        g_share = (L - mp.n_local) / L
        if s_kv > W:
            s_cache = g_share * s_kv + l_share * W
            local = window_keys(s_kv, W) - window_keys(s_kv - s_q, W)
            pair_frac = g_share + l_share * local / (s_q * s_kv * causal)
        if ctx_mix > W:
            ctx_mix = g_share * ctx_mix + l_share * W
    return causal, s_cache, pair_frac, ctx_mix


@jit()
def kv_sharding(kvm, tp, mp):
    """How TP shards the KV cache (``kv_shard_mode`` 0 head, 1 seq, 2 head_seq).

    Returns ``(kvh_loc, seq_frac, qh_loc, kvw_shard)``: cache heads per rank (duplicated
    beyond the cache heads), the share of each sequence's tokens a rank holds, query heads
    per rank, and the ranks the K/V projection weights split over.
    """
    ftp = float(tp)
    kvh = mp.cache_heads
    h = mp.n_heads
    if kvm == 0:
        kvh_loc = kvh / ftp if ftp <= kvh else 1.0
        seq_frac = 1.0
        qh_loc = h / ftp
        kvw_shard = min(ftp, kvh)
    elif kvm == 1:
        kvh_loc = kvh
        seq_frac = 1.0 / ftp
        qh_loc = h
        kvw_shard = ftp
    else:
        kvh_loc = 1.0
        seq_frac = kvh / ftp
        qh_loc = h / kvh
        kvw_shard = kvh
    return kvh_loc, seq_frac, qh_loc, kvw_shard


@jit()
def kv_cache_bytes(mp, tokens, shard, s_cache, cp, bytes_per_kv):
    """``(kv_read, kv_held)``: KV-cache bytes per layer one pass reads (its sequences) and
    a device holds (every sequence of the replica), over the CP ranks and the TP shard."""
    seqs_replica = tokens[0]
    seqs_pass = tokens[2]
    kvh_loc, seq_frac, _, _ = shard
    kv_seq = (s_cache / float(cp)) * seq_frac * kvh_loc * mp.cache_width * bytes_per_kv
    return seqs_pass * kv_seq, seqs_replica * kv_seq


# --- pieces: attention ---------------------------------------------------------------------


@jit()
def attention_weights(mp, tp, shard):
    """Attention parameters per device and layer: Q/O (and MLA's up-projections) over TP,
    K/V over the ranks the KV heads split over, MLA's down-projections replicated."""
    return mp.qo_params / float(tp) + mp.kv_params / shard[3] + mp.rep_params


@jit()
def attention_projections(mp, tokens, tp, attn_w, mm_rate, bytes_per_weight, bytes_per_act):
    """``(flops, hbm_bytes)`` per layer of the QKV and O projections: matmul FLOPs at the
    activation dtype's rate (the replicated MLA down-projections in full on every rank),
    the weights read once, and the GEMMs' inputs and outputs."""
    tokens_local = tokens[4]
    ftp = float(tp)
    flops = (2.0 * tokens_local * (mp.qo_params + mp.kv_params) / ftp / mm_rate
             + 2.0 * tokens_local * mp.rep_params / mm_rate)
    nbytes = attn_w * bytes_per_weight + tokens_local * mp.d_model * bytes_per_act * (2.0 + 2.0 / ftp)
    return flops, nbytes


@jit()
def attention_core_decode(mp, tokens, shard, s_q, s_kv, causal, pair_frac, ctx_mix, qk, vd, tp,
                          cp, bytes_per_act, bytes_per_kv, kv_read):
    """``(flops_cached, flops_mixed, hbm_bytes)`` per layer of decode attention (paged /
    FlashDecoding): QKᵀ and AV over the cached keys (MLA absorbed) and, apart, the mixed
    prompt tokens' pairs (in the decompressed form); reads the cache, writes the mixed
    tokens' K and V, reads Q, writes O."""
    _, _, seqs_pass, mixed, tokens_local, _ = tokens
    kvh_loc, seq_frac, qh_loc, _ = shard
    adim = 0.5 * (qk + vd)
    mix_dim = (mp.qk_dim + mp.v_dim) / (qk + vd)  # decompressed over this mode's pair cost
    per_pair = adim * mp.n_heads / (float(tp) * float(cp))
    flops_cached = 4.0 * seqs_pass * s_q * s_kv * causal * pair_frac * per_pair
    flops_mixed = 4.0 * mixed * ctx_mix * mix_dim * per_pair
    qo_traffic = tokens_local * qh_loc * adim * bytes_per_act * 2.0
    nbytes = kv_read + qo_traffic + mixed * seq_frac * kvh_loc * mp.cache_width * bytes_per_kv
    return flops_cached, flops_mixed, nbytes


@jit()
def attention_core_class(mp, wp, topo, flops_cached, flops_mixed):
    """``(flops, gemm_share)`` of the decode attention core: its FLOPs in the units of the
    rates they run at, and the share of them that runs at the matmul rate.

    MLA's absorbed decode over the cached latent is a tensor-core GEMM-class kernel (an
    MQA whose 576-wide keys every query head of the rank shares: FlashMLA, which
    TensorRT-LLM, vLLM and SGLang run for DeepSeek on Hopper), priced at the matmul rate
    (``Topology.mm_ratio``): FlashMLA reaches 580 TFLOPS compute-bound on an H800 SXM5
    (deepseek-ai/FlashMLA README.md @26d3077949660d1fc6d72e259ed64e84f37a41c6), 0.59 of
    its 989 dense BF16 TFLOPS, a matmul-class share, where FlashAttention-class cores
    run near half that. Everything else (GQA / MHA decode, the mixed prompt tokens'
    decompressed attention) is the attention kernel's (:func:`attention_kernel_rate`)."""
    rate = attention_kernel_rate(wp, topo)
    if mp.mla == 1.0:
        gemm = flops_cached / topo.mm_ratio
        other = flops_mixed / rate
    else:
        gemm = 0.0
        other = (flops_cached + flops_mixed) / rate
    flops = gemm + other
    return flops, (gemm / flops if flops > 0.0 else 0.0)


@jit()
def attention_core_prefill(mp, tokens, shard, s_q, s_kv, causal, pair_frac, s_cache, qk, vd, tp,
                           cp, bytes_per_act, kv_read):
    """``(flops, hbm_bytes)`` per layer of prefill attention (FlashAttention): QKᵀ and AV
    over the causal (windowed) pairs of the CP-local queries; writes the cache and reads
    the keys attended (MLA: writes the latent, and its up-projection writes K and V per
    query head, which the core reads), reads Q, writes O."""
    seqs_pass = tokens[2]
    tokens_local = tokens[4]
    _, seq_frac, qh_loc, _ = shard
    fcp = float(cp)
    adim = 0.5 * (qk + vd)
    flops = 4.0 * seqs_pass * s_q * s_kv * causal * pair_frac * adim * mp.n_heads / (float(tp) * fcp)
    qo_traffic = tokens_local * qh_loc * adim * bytes_per_act * 2.0
    if mp.mla == 1.0:
        kv_dec = seqs_pass * (s_kv / fcp) * seq_frac * qh_loc * (qk + vd) * bytes_per_act
        nbytes = kv_read + kv_dec * (1.0 + fcp * causal * pair_frac) + qo_traffic
    else:  # windowed layers read fewer keys than they cache
        nbytes = kv_read * (1.0 + fcp * causal * (pair_frac * s_kv / s_cache)) + qo_traffic
    return flops, nbytes


@jit()
def cp_ring(ring, cp, tier_cp, kv_read, tokens, shard, qk, vd, bytes_per_msg, topo):
    """``(wire_bytes, alpha_ns)`` per layer of ring attention over CP: cp - 1 steps, each
    passing a KV block (``ring`` 0, ``kv``) or Q, O and the softmax statistics m, l
    (``ring`` 1, ``qoml``) to the neighbour on ``tier_cp``; each step a send, which across
    cubes pays the base latency too (``tier_base_ns``)."""
    if cp <= 1:
        return 0.0, 0.0
    steps = float(cp) - 1.0
    if ring == 0:
        per_step = kv_read
    else:
        per_step = tokens[4] * shard[2] * (2.0 * (0.5 * (qk + vd)) * bytes_per_msg + 8.0)
    return steps * per_step, steps * (tier_alpha_ns(topo, tier_cp) + tier_base_ns(topo, tier_cp))


@jit()
def splitk_combine(acc, kvm, tp, mp, tokens, shard, qk, vd, bytes_per_msg, strides, tier_tp,
                   topo):
    """Split-K combine of sequence-sharded KV (``kv_shard_mode`` seq / head_seq): gather Q
    and all-reduce the partial O with the softmax statistics over the ranks sharing a KV
    head (two collectives: across cubes each pays the base latency). Adds wire bytes per
    tier and link latency to ``acc``; returns the launches."""
    ftp = float(tp)
    if kvm == 1:
        g = ftp
        tier_g = tier_tp
    elif kvm == 2:
        g = ftp / mp.cache_heads
        tier_g = tier_of(int(g) * strides[0], int(topo.pes_per_cube), int(topo.pes_per_sip))
    else:
        g = 1.0
        tier_g = 0
    if g <= 1.0:
        return 0.0
    tokens_local = tokens[4]
    qh_loc = shard[2]
    q_bytes = tokens_local * qh_loc * qk * bytes_per_msg  # Q and the partial O are 16-bit
    o_bytes = tokens_local * qh_loc * (vd * bytes_per_msg + 8.0)
    add_comm(acc, tier_g, allgather_factor(g) * q_bytes + allreduce_factor(g) * o_bytes,
             3.0 * (g - 1.0) * tier_alpha_ns(topo, tier_g) + 2.0 * tier_base_ns(topo, tier_g))
    return 2.0


# --- pieces: FFN and MoE -------------------------------------------------------------------


@jit()
def ffn_shard(ffs, tp, cp, tokens):
    """``(ffn_ranks, ffn_tokens)``: the ranks the FFN weights split over and the tokens the
    FFN sees: TP and the CP-local tokens, or (``ffn_shard_scope`` TP+CP with CP) TP×CP
    and the replica's tokens."""
    if ffs == 1 and cp > 1:
        return float(tp) * float(cp), tokens[5]
    return float(tp), tokens[4]


@jit()
def experts_touched(n_experts, top_k, n_tokens):
    """Expected experts at least one of ``n_tokens`` tokens routes to under uniform top-k
    routing (1 for a dense FFN)."""
    if n_experts > 1.0:
        return n_experts * (1.0 - (1.0 - top_k / n_experts) ** n_tokens)
    return 1.0


@jit()
def busiest_rank_experts(n_experts, top_k, n_tokens, ep):
    """Expected distinct experts of its own that ``n_tokens`` tokens touch on the busiest
    of ``ep`` expert-parallel ranks (``n_experts / ep`` each), uniform top-k routing: each
    local expert is touched with probability ``p`` (:func:`experts_touched`), a rank's
    count is Binomial(m, p), the ranks independent, and the step waits for the largest:
    ``E[max] = sum over j < m of 1 - F(j)^ep``. The mean ``m p`` with one rank; at 4
    tokens DeepSeek-V3's 8 ranks of 32 experts have 3.8 touched on average and 6.6 on the
    busiest (a uniform-routing Monte Carlo gives 6.6)."""
    m = n_experts / ep
    p = 1.0 - (1.0 - top_k / n_experts) ** n_tokens
    if ep <= 1.0 or p <= 0.0:
        return m * p
    if p >= 1.0:
        return m
    mi = int(m + 0.5)
    lpmf = mi * math.log1p(-p)  # log P(count = 0), kept in logs: exp may underflow
    ratio = math.log(p) - math.log1p(-p)
    cdf = 0.0
    total = 0.0
    for j in range(mi):
        cdf += math.exp(lpmf)
        tail = 1.0 - min(cdf, 1.0) ** ep
        if tail < 1e-15:
            break
        total += tail
        lpmf += math.log((mi - j) / (j + 1.0)) + ratio
    return total


@jit()
def ffn_gemms(mp, ffn_ranks, ffn_tokens, mm_rate, bytes_per_weight, bytes_per_act):
    """``(flops, hbm_bytes)`` per layer of the dense FFN or the MoE experts sharded like it
    (TP or TP×CP): matmul FLOPs of the active parameters at the activation dtype's rate;
    the weights of the experts touched and the router read once, the input and output."""
    flops = 2.0 * ffn_tokens * mp.ffn_active_params / ffn_ranks / mm_rate
    touched = experts_touched(mp.n_experts, mp.top_k, ffn_tokens)
    read = (touched * mp.expert_params + mp.router_params) / ffn_ranks
    return flops, read * bytes_per_weight + ffn_tokens * mp.d_model * bytes_per_act * 2.0


@jit()
def expert_gemms_ep(mp, wp, tokens, ffn_tokens, tp, dp, ep, mm_rate, bytes_per_weight,
                    bytes_per_act):
    """``(flops, hbm_bytes)`` per layer of the MoE experts under expert parallelism: the
    experts split over ``ep`` of the stage's TP×DP devices (each expert sharded over
    tp·dp/ep of them); the busiest rank's routed tokens, :func:`busiest_share` x the mean
    (``Workload.moe_load_imbalance``, 1 = balanced); the weights of its local experts the
    DP replicas' tokens touch."""
    tokens_local = tokens[4]
    ftp = float(tp)
    fep = float(ep)
    E = mp.n_experts
    k = mp.top_k
    ranks_per_expert = ftp * dp / fep
    routed = k * mp.expert_params * busiest_share(mp, wp, fep)
    flops = 2.0 * tokens_local * (routed + mp.router_params) / ftp / mm_rate
    local = busiest_rank_experts(E, k, tokens_local * dp, fep)  # the replicas' tokens meet
    read = local * mp.expert_params / ranks_per_expert + mp.router_params / ftp
    return flops, read * bytes_per_weight + ffn_tokens * mp.d_model * bytes_per_act * 2.0


@jit()
def expert_slice_ns(mp, wp, tokens, ffn_ranks, ffn_tokens, tp, dp, ep):
    """Device time per layer (ns, averaged over the layers) that expert tensor parallelism
    adds to FP8 grouped GEMMs: each routed expert a rank runs is a slice 1/r of it (r =
    tp·dp/ep under EP, the FFN's ranks without), and a block-scaled FP8 grouped GEMM pays
    ``EXPERT_SLICE_NS`` x (1 - 1/r)^2 per slice beyond streaming its bytes (thin slices:
    more groups, each shorter; measured on TensorRT-LLM's MoE layer, where the same bytes
    as whole experts run up to 1.4x faster at r = 8). 0 for a dense FFN, whole experts
    (r = 1) or 16-bit / INT8 / FP4 matmuls."""
    if mp.n_experts <= 1.0 or wp.act_code != 1.0:
        return 0.0
    E = mp.n_experts
    r = float(tp) * dp / float(ep) if ep > 1 else ffn_ranks
    if r <= 1.0:  # whole experts: no slices (and no busiest-rank count to work out)
        return 0.0
    if ep > 1:
        local = busiest_rank_experts(E, mp.top_k, tokens[4] * dp, float(ep))
    else:
        local = experts_touched(E, mp.top_k, ffn_tokens)
    thin = 1.0 - 1.0 / r
    return EXPERT_SLICE_NS * local * thin * thin * mp.moe_layers / mp.n_layers


@jit()
def mla_decode_floor(mp, wp):
    """Device time per layer (ns) a decode step's MLA attention op takes beyond a GQA
    decode attention op at small batch (``Workload.mla_decode_ns``, the runtime's
    measured value: TensorRT-LLM's MLA generation op against its GQA one); 0 without
    MLA or outside decode."""
    if mp.mla == 1.0 and wp.mode == 1.0:
        return wp.mla_decode_ns
    return 0.0


@jit()
def elementwise_bytes(mp, wp, tokens, ffn_tokens, tp, dp, ep, bytes_per_act):
    """HBM bytes per layer outside the GEMMs: residual adds and norms read and write the
    hidden state twice; an MoE layer permutes its tokens, averaged over the layers: with
    the EP all-to-all (:func:`ep_alltoall`) each TP rank its 1/tp slice; where EP
    all-reduces every rank holds every token and permutes the copies its E/ep experts
    receive, 1/ep of them at :func:`busiest_share`."""
    tokens_local = tokens[4]
    d = mp.d_model
    nbytes = 4.0 * tokens_local * d * bytes_per_act
    if mp.n_experts > 1.0:
        rows = ffn_tokens
        if ep_alltoall(dp, ep):
            rows = tokens_local / float(tp)
        elif ep > 1:
            rows = tokens_local / float(ep) * busiest_share(mp, wp, float(ep))
        nbytes += moe_permute_bytes(mp.top_k, d, bytes_per_act, rows) * mp.moe_layers / mp.n_layers
    return nbytes


@jit()
def lm_head(mp, tokens, tp, mm_rate, bytes_per_weight):
    """``(flops, hbm_bytes)`` of the LM head once per step on the last stage (the last
    position's logits only): its matmul over TP and the fp32 logits written."""
    seqs_pass = tokens[2]
    ftp = float(tp)
    V = mp.vocab_size
    flops = 2.0 * seqs_pass * mp.d_model * V / ftp / mm_rate
    return flops, V * mp.d_model * bytes_per_weight / ftp + seqs_pass * V / ftp * 4.0


# --- pieces: collectives -------------------------------------------------------------------


@jit()
def tp_allreduce(acc, act_bytes, tp, strides, topo):
    """All-reduce of ``act_bytes`` over the TP group (hierarchical / halving-doubling,
    in-switch with NVLS, ``collectives.allreduce_hier``). Adds wire bytes per tier and
    link latency to ``acc``; returns the launches (0 without TP)."""
    if tp <= 1:
        return 0.0
    allreduce_hier(acc, act_bytes, float(tp), float(strides[0]), topo)
    return 1.0


@jit()
def ffn_tpcp_allreduce(acc, mp, tokens, bytes_per_msg, tp, cp, strides, tier_cp, decode, topo):
    """The FFN output of an FFN sharded over TP×CP: all-reduce the replica's tokens over
    TP×CP, after (prefill) gathering them across CP. Adds wire bytes per tier and link
    latency to ``acc``; returns the launches."""
    ftp = float(tp)
    fcp = float(cp)
    tokens_replica = tokens[5]
    g = ftp * fcp
    span = max(group_span(tp, strides[0]), group_span(cp, strides[1]))
    allreduce_hier(acc, tokens_replica * mp.d_model * bytes_per_msg, g, span / g, topo)
    if decode:
        return 1.0
    add_comm(acc, tier_cp, allgather_factor(fcp) * tokens_replica * mp.d_model * bytes_per_msg,
             (fcp - 1.0) * tier_alpha_ns(topo, tier_cp) + tier_base_ns(topo, tier_cp))
    return 2.0


@jit()
def moe_alltoall(acc, mp, wp, tokens, act_bytes, bytes_per_act, bytes_per_msg, tp, dp, ep,
                 strides, tier_tp, topo):
    """MoE dispatch and combine all-to-all over the EP group: each TP rank sends its 1/tp
    slice of the replica's tokens, k copies, each to the r = tp·dp/ep ranks holding a
    shard of its expert, r - 1/ep of them off the device ((ep-1)/ep when each expert is
    whole on one rank; an expert sharded over r ranks needs every routed token on each
    shard and reduces the r partial outputs); dispatch at the activation dtype, combine
    of the experts' outputs; the busiest rank receives (and returns) :func:`busiest_share`
    x the mean; then the TP ranks all-gather their slices' outputs; across cubes each of
    the three pays the base latency. Adds wire bytes per tier and link latency to
    ``acc``; returns the launches. Used where :func:`ep_alltoall` says so; otherwise the
    experts' outputs are all-reduced over TP (:func:`tp_allreduce`), as a dense FFN's."""
    ftp = float(tp)
    fep = float(ep)
    span_ep = max(group_span(tp, strides[0]), group_span(dp, strides[3]))
    tier_ep = tier_of(span_ep, int(topo.pes_per_cube), int(topo.pes_per_sip))
    copies = (fep - 1.0) / fep + (ftp * float(dp) / fep - 1.0)  # r - 1/ep off the device
    a2a = tokens[4] / ftp * mp.top_k * mp.d_model * (bytes_per_act + bytes_per_msg) * copies
    a2a *= busiest_share(mp, wp, fep)  # the busiest rank's ingress (balanced: 1)
    add_comm(acc, tier_ep, a2a, 2.0 * (phase_steps(fep) * tier_alpha_ns(topo, tier_ep)
                                       + tier_base_ns(topo, tier_ep)))
    if tp <= 1:
        return 2.0
    add_comm(acc, tier_tp, allgather_factor(ftp) * act_bytes,
             phase_steps(ftp) * tier_alpha_ns(topo, tier_tp) + tier_base_ns(topo, tier_tp))
    return 3.0


# --- pieces: pipeline, memory, model FLOPs, launches -----------------------------------------


@jit()
def pipeline_layers(mp, pp, decode, tokens):
    """``(layers_per_stage, layer_mult, micro)``: layers per stage, the layer slots on the
    critical path, and the micro-batches of a step. Decode: a token passes every stage
    once, so all layers (the micro-batches in flight raise throughput, not per-token
    latency); prefill: one micro-batch per sequence through pp stages (1F1B bubble)."""
    fpp = float(pp)
    layers_per_stage = math.ceil(mp.n_layers / fpp)
    micro = 1.0 if decode else float(tokens[0])
    layer_mult = mp.n_layers if decode else layers_per_stage * (micro + fpp - 1.0) / micro
    return layers_per_stage, layer_mult, micro


@jit()
def pp_p2p(mp, pp, tier_pp, tokens, micro, bytes_per_msg, topo):
    """``(wire_bytes, alpha_ns)`` per step of the pipeline sends: pp - 1 hops of one
    micro-batch's activations on ``tier_pp`` (across cubes each a send paying the base
    latency too)."""
    if pp <= 1:
        return 0.0, 0.0
    hops = float(pp) - 1.0
    return (hops * (tokens[4] / micro) * mp.d_model * bytes_per_msg,
            hops * (tier_alpha_ns(topo, tier_pp) + tier_base_ns(topo, tier_pp)))


@jit()
def weight_bytes(mp, attn_w, ffn_ranks, tp, dp, ep, pp, bytes_per_weight):
    """``(layer_bytes, embedding_bytes)``: weight bytes per device of one layer (attention,
    FFN or this rank's experts under EP, norms) and of the embedding / LM head over TP
    (with PP, the last stage's LM head)."""
    ftp = float(tp)
    ffn_w = mp.ffn_params / ffn_ranks
    if ep > 1:
        fep = float(ep)
        ffn_w = (mp.n_experts / fep) * mp.expert_params / (ftp * dp / fep) + mp.router_params / ftp
    layer = (attn_w + ffn_w + mp.norm_params) * bytes_per_weight
    if pp > 1:
        return layer, mp.vocab_size * mp.d_model * bytes_per_weight / ftp
    return layer, mp.embedding_params * bytes_per_weight / ftp


@jit()
def activation_bytes(mp, tokens, ffn_ranks, tp, bytes_per_act):
    """Activation bytes per device at the peak of a pass: the hidden state and the FFN's
    intermediate for the local tokens, and the fp32 logits of the last positions."""
    f_loc = mp.d_ff * min(mp.top_k, mp.n_experts) / ffn_ranks
    return (tokens[4] * (4.0 * mp.d_model + 2.0 * f_loc) * bytes_per_act
            + tokens[2] * mp.vocab_size / float(tp) * 4.0)


@jit()
def model_flops(mp, wp, causal, pair_frac, ctx_mix):
    """Model FLOPs per step, whole system: the layers' matmuls per processed token (no
    embedding gather), the LM head for the positions that need logits, causal attention
    (windowed, in the decompressed form for MLA: the model's FLOPs, not the absorbed
    kernel's), and in decode the mixed prompt tokens."""
    d = mp.d_model
    B = wp.batch
    body = mp.n_active_params - mp.embedding_params - d
    a_m = 0.5 * (mp.qk_dim + mp.v_dim)
    flops = (2.0 * body * B * wp.s_q + 2.0 * d * mp.vocab_size * B
             + 4.0 * mp.n_layers * B * wp.s_q * wp.s_kv * causal * pair_frac * mp.n_heads * a_m)
    if wp.mode == 1.0:
        flops += (2.0 * body * wp.mix_tokens
                  + 4.0 * mp.n_layers * wp.mix_tokens * ctx_mix * mp.n_heads * a_m)
    return flops


@jit()
def layer_launches(mp):
    """Kernel launches of one decoder layer before its collectives: ``OPS_LAYER`` with two
    norms, one more or fewer per norm, ``OPS_MOE`` more for an MoE layer, ``OPS_MLA`` more
    for MLA attention."""
    return (OPS_LAYER + (mp.norms - 2.0) + (OPS_MOE if mp.n_experts > 1.0 else 0.0)
            + (OPS_MLA if mp.mla == 1.0 else 0.0))


@jit()
def step_overheads(wp, pp, layer_mult, n_ops, seqs):
    """``(step_ops, step_count, launch_ns, host_block_ns)``: launches once per step
    (embedding, final norm, LM head, sampling, two per pipeline send), the share of the
    framework's per-step floor paid (a quarter when decode replays CUDA graphs), the host
    time to launch the kernels not replayed from a graph (``LAUNCH_NS`` each: every
    kernel, unless decode replays a graph; then the share of served steps that admit a
    prompt, which run eagerly: prompts admitted per step, at most 1), and the serving
    loop's host time the device waits for: per step (``Workload.host_step_ns``: a Python
    engine loop between steps; 0 where it overlaps) and a synchronous scheduler's per
    scheduled sequence times the replica's ``seqs`` (``Workload.host_seq_ns``; 0 where the
    scheduler runs a step ahead)."""
    graphs = wp.mode == 1.0 and wp.cuda_graphs == 1.0
    step_ops = _OPS_STEP + 2.0 * (float(pp) - 1.0)
    step_count = _GRAPH_FLOOR if graphs else 1.0
    eager = 1.0
    if graphs:
        eager = 0.0
        if wp.mix_tokens > 0.0 and wp.mix_ctx > 0.0:
            eager = min(wp.mix_tokens / (2.0 * wp.mix_ctx), 1.0)
    return (step_ops, step_count, eager * LAUNCH_NS * (layer_mult * n_ops + step_ops),
            wp.host_step_ns + wp.host_seq_ns * seqs)


# --- the row: the pieces summed by name -----------------------------------------------------


@jit()
def _coeff_row(lay, mp, wp, topo, out, acc):
    """One coefficient record ``out`` for one integer layout row, the pieces summed by
    name; ``acc`` (4 float64) collects the per-layer collectives' wire bytes per tier and
    link latency."""
    cp = lay[LAYOUT.cp]
    tp = lay[LAYOUT.tp]
    pp = lay[LAYOUT.pp]
    dp = lay[LAYOUT.dp]
    ep = lay[LAYOUT.ep]
    kvm = lay[LAYOUT.kv_shard_mode]
    decode = wp.mode == 1.0
    bytes_per_weight, bytes_per_act, bytes_per_kv, bytes_per_msg, mm_rate = precision(mp, wp, topo)
    # weight-only formats: the held bytes count the group scales; their GEMMs stream the
    # weights and run the matmuls at their own rates (as more bytes / FLOPs at the 16-bit
    # rates); the identity for every other format
    scale_bytes, wo_stream, wo_mm = weight_only(wp, topo)
    held_per_weight = bytes_per_weight + scale_bytes
    stream_per_weight = held_per_weight / wo_stream
    mm_rate_w = mm_rate * wo_mm
    strides, tier_tp, tier_cp, tier_pp, _, _ = placement(
        tp, cp, pp, dp, lay[LAYOUT.tp_placement], lay[LAYOUT.cp_placement], topo)
    tokens = token_counts(dp, pp, cp, wp)
    seqs_replica, _, _, _, tokens_local, _ = tokens
    qk, vd = attention_widths(mp, decode)
    causal, s_cache, pair_frac, ctx_mix = attention_span(mp, wp.s_q, wp.s_kv, wp.mix_ctx)
    shard = kv_sharding(kvm, tp, mp)
    kv_read, kv_held = kv_cache_bytes(mp, tokens, shard, s_cache, cp, bytes_per_kv)
    ffn_ranks, ffn_tokens = ffn_shard(lay[LAYOUT.ffn_shard_scope], tp, cp, tokens)

    # -- roofline ops per layer, the LM head once per step --------------------------------
    attn_w = attention_weights(mp, tp, shard)
    out.f_lin, out.b_lin = attention_projections(mp, tokens, tp, attn_w, mm_rate_w,
                                                 stream_per_weight, bytes_per_act)
    core_gemm = 0.0
    if decode:
        f_cached, f_mixed, out.b_core = attention_core_decode(
            mp, tokens, shard, wp.s_q, wp.s_kv, causal, pair_frac, ctx_mix, qk, vd, tp, cp,
            bytes_per_act, bytes_per_kv, kv_read)
        out.f_core, core_gemm = attention_core_class(mp, wp, topo, f_cached, f_mixed)
    else:
        out.f_core, out.b_core = attention_core_prefill(
            mp, tokens, shard, wp.s_q, wp.s_kv, causal, pair_frac, s_cache, qk, vd, tp, cp,
            bytes_per_act, kv_read)
        out.f_core = out.f_core / attention_kernel_rate(wp, topo)
    if ep > 1:
        out.f_ffn, out.b_ffn = expert_gemms_ep(mp, wp, tokens, ffn_tokens, tp, dp, ep, mm_rate_w,
                                               stream_per_weight, bytes_per_act)
    else:
        out.f_ffn, out.b_ffn = ffn_gemms(mp, ffn_ranks, ffn_tokens, mm_rate_w, stream_per_weight,
                                         bytes_per_act)
    out.b_elem = elementwise_bytes(mp, wp, tokens, ffn_tokens, tp, dp, ep, bytes_per_act)
    out.f_head, out.b_head = lm_head(mp, tokens, tp, mm_rate_w, stream_per_weight)

    # -- collectives per layer (wire bytes per tier and link latency into acc) ------------
    for t in range(4):
        acc[t] = 0.0
    act_bytes = tokens_local * mp.d_model * bytes_per_msg
    n_ops = layer_launches(mp)
    n_ops += tp_allreduce(acc, act_bytes, tp, strides, topo)  # the attention output
    if lay[LAYOUT.ffn_shard_scope] == 1 and cp > 1:  # the FFN output
        n_ops += ffn_tpcp_allreduce(acc, mp, tokens, bytes_per_msg, tp, cp, strides, tier_cp,
                                    decode, topo)
    elif ep_alltoall(dp, ep):  # else replicated tokens: all-reduce
        n_ops += moe_alltoall(acc, mp, wp, tokens, act_bytes, bytes_per_act, bytes_per_msg, tp,
                              dp, ep, strides, tier_tp, topo)
    else:
        n_ops += tp_allreduce(acc, act_bytes, tp, strides, topo)
    n_ops += splitk_combine(acc, kvm, tp, mp, tokens, shard, qk, vd, bytes_per_msg, strides,
                            tier_tp, topo)
    out.comm0_bytes = acc[0]
    out.comm1_bytes = acc[1]
    out.comm2_bytes = acc[2]
    out.comm_alpha_ns = acc[3]
    out.ring_bytes, out.ring_alpha_ns = cp_ring(lay[LAYOUT.cp_ring_variant], cp, tier_cp, kv_read,
                                                tokens, shard, qk, vd, bytes_per_msg, topo)
    out.ring_tier = tier_cp
    out.ring_overlap = 0.0 if decode else 1.0

    # -- pipeline, memory per device, work per step ---------------------------------------
    layers_per_stage, layer_mult, micro = pipeline_layers(mp, pp, decode, tokens)
    out.layer_mult = layer_mult
    out.pp_bytes, out.pp_alpha_ns = pp_p2p(mp, pp, tier_pp, tokens, micro, bytes_per_msg, topo)
    out.pp_tier = tier_pp
    layer_w, emb_w = weight_bytes(mp, attn_w, ffn_ranks, tp, dp, ep, pp, held_per_weight)
    act_mem = activation_bytes(mp, tokens, ffn_ranks, tp, bytes_per_act)
    out.mem_bytes = layers_per_stage * (layer_w + kv_held) + emb_w + act_mem
    out.mem_weights_bytes = layers_per_stage * layer_w + emb_w
    out.mem_kv_bytes = layers_per_stage * kv_held
    out.mem_act_bytes = act_mem
    out.valid = 1.0 if layout_valid(lay, mp, wp, topo) else 0.0
    out.n_devices = cp * tp * pp * dp
    out.tokens = wp.batch if decode else wp.batch * wp.s_q
    out.model_flops = model_flops(mp, wp, causal, pair_frac, ctx_mix)
    out.n_ops = n_ops
    out.step_ops, out.step_count, out.launch_ns, out.host_block_ns = step_overheads(
        wp, pp, layer_mult, n_ops, seqs_replica)
    out.launch_ns += layer_mult * (expert_slice_ns(mp, wp, tokens, ffn_ranks, ffn_tokens, tp, dp,
                                                   ep) + mla_decode_floor(mp, wp))
    out.step_seqs = seqs_replica  # the replica's sequences (decode with PP: every micro-batch's)
    out.lowp_mm = out.lowp_head = 1.0 if wp.act_code != 0.0 else 0.0
    _no_training_terms(out)
    out.core_gemm = core_gemm


@jit()
def _no_training_terms(out):
    """Zero the coefficients only a training step has (once-per-step collectives and
    optimizer traffic, overlapped collectives, host transfers)."""
    out.tail0_bytes = 0.0
    out.tail1_bytes = 0.0
    out.tail2_bytes = 0.0
    out.tail_alpha_ns = 0.0
    out.tail_mem_bytes = 0.0
    out.ovl0_bytes = 0.0
    out.ovl1_bytes = 0.0
    out.ovl2_bytes = 0.0
    out.ovl_alpha_ns = 0.0
    out.tail_hide = 0.0
    out.fixed_ns = 0.0


@jit()
def _layout_coeffs(layouts, mp, wp, topo, out, acc):
    """Fill ``out`` (records of ``COEF_DTYPE``, one per layout row) using ``acc`` (4
    float64) as the per-row work array: both allocated by the caller, so the first call
    compiles no numpy allocation."""
    for i in range(layouts.shape[0]):
        _coeff_row(layouts[i], mp, wp, topo, out[i], acc)


def layout_coeffs(layouts, mp, wp, topo):
    """Coefficient table (records of ``schema.COEF_DTYPE``) for integer layout rows.

    Raises ``ValueError`` when the workload's ``act_dtype`` has no matmul rate on this
    family (``Topology.fp8_ratio`` / ``int8_ratio`` / ``fp4_ratio`` of 0).
    """
    for code, name, ratio in ((1.0, "fp8", topo.fp8_ratio), (2.0, "int8", topo.int8_ratio),
                              (3.0, "fp4", topo.fp4_ratio)):
        if wp.act_code == code and not ratio > 0.0:
            example = "'B200'" if code == 3.0 else "'H100-SXM'"
            raise ValueError(
                f"Workload.act_dtype={name!r} needs a family with a {name.upper()} matmul rate "
                f"(Topology.{name}_ratio > 0, e.g. {example}); pass act_dtype='bf16' (or "
                f"weight_dtype={name!r} alone for weight-only quantisation)")
    out = np.empty(layouts.shape[0], dtype=COEF_DTYPE)
    _layout_coeffs(layouts, mp, wp, topo, out, np.zeros(4))
    return out


# --- second stage: one coefficient record x one hardware row -----------------------------
#
# Per hardware row the achievable rates are fixed, so their reciprocals (time per FLOP,
# per HBM byte, per wire byte on each tier) are computed once per row (:func:`row_rates`)
# and ``point`` multiplies by them: its inner loop has no division by a hardware value.
# The fused sweep reads the coefficients as a structure of arrays (:func:`coef_columns`,
# one contiguous column per coefficient, copied once per call) and scores every layout of
# a row in a loop without early exits, which the compiler vectorises; the first-best
# layout is then found by a short scan of the scores. Each (row, layout) pair goes
# through the same IEEE operations in every path (no fastmath: no reassociation, no
# fused multiply-add), so ``point_one``, ``evaluate_grid`` and ``fused_best`` agree bit
# for bit.


class RowRates(NamedTuple):
    """What :func:`point` needs of one hardware row: the reciprocals of its achievable
    rates and the memory that fits (:func:`row_rates`)."""

    ns_per_flop: float  #: 16-bit matmul rate (peak x ``compute``)
    ns_per_flop_lowp: float  #: FP8 / INT8 matmul rate, in 16-bit-rate FLOPs (x ``lowp``)
    ns_per_flop_attention: float  #: the attention kernel's rate (x ``attention``)
    ns_per_hbm_byte: float  #: HBM (x ``memory``)
    ns_per_byte_intra: float  #: tier 0 wire (x ``network``)
    ns_per_byte_inter: float  #: tier 1 wire (x ``network_inter``)
    ns_per_byte_intersip: float  #: tier 2 wire (x ``network_sip``)
    fit_bytes: float  #: usable HBM per device (x ``hbm_usable``)


@jit(inline="always")
def row_rates(hw, eff):
    """One hardware row (the six knobs) → :class:`RowRates` (once per row)."""
    flops_per_ns = hw[HW.peak_tflops_f16] * 1e3
    return RowRates(1.0 / (flops_per_ns * eff.compute), 1.0 / (flops_per_ns * eff.lowp),
                    1.0 / (flops_per_ns * eff.attention),
                    1.0 / (hw[HW.bw_hbm_gbs] * eff.memory),
                    1.0 / (hw[HW.bw_intra_gbs] * eff.network),
                    1.0 / (hw[HW.bw_inter_gbs] * eff.network_inter),
                    1.0 / (hw[HW.bw_intersip_gbs] * eff.network_sip),
                    hw[HW.pe_hbm_gb] * 1e9 * eff.hbm_usable)


@jit(inline="always")
def _roof(f, b, ns_per_flop, ns_per_byte, ov):
    """One op's time: the longer of its compute and HBM times plus the part ``1 - ov`` of
    the shorter that does not hide under it; charged to the longer side."""
    tc = f * ns_per_flop
    tm = b * ns_per_byte
    if tc > tm:
        t = tc + (1.0 - ov) * tm
        return t, t, 0.0
    t = tm + (1.0 - ov) * tc
    return t, 0.0, t


@jit(inline="always")
def per_second(amount, latency):
    """``amount`` per step of ``latency`` ns, per second (throughput, FLOP/s)."""
    return amount / (latency * 1e-9)


@jit(inline="always")
def point(c, k, eff):
    """One (hardware, layout) pair → the values of :data:`~.schema.OUTPUTS`.

    ``c`` is a coefficient record (or a :data:`CoefValues` tuple of the same fields),
    ``k`` the hardware row's :class:`RowRates`. Per layer: the roofline ops
    (projections, attention core at its own efficiency, FFN), memory-bound element-wise
    bytes, the CP ring (hidden under the attention core where it overlaps), blocking
    collectives, collectives that overlap the layer's compute (prefetched all-gathers:
    only what outlasts the compute is exposed) and the kernel launches. Per step: the LM
    head, pipeline sends, the once-per-step collectives (hidden under ``tail_hide`` of
    the layers' compute, e.g. bucketed gradient reduction under the backward pass), the
    optimizer's HBM traffic, hardware-independent time (``fixed_ns``: PCIe offload),
    launches and the framework's per-step floor.
    """
    if c.valid == 0.0:
        nan = np.nan
        return nan, nan, nan, nan, nan, nan, nan, nan, nan, False
    # FLOPs of lowp ops are in 16-bit-rate units
    t_flop_mm = k.ns_per_flop_lowp if c.lowp_mm == 1.0 else k.ns_per_flop
    t_flop_head = k.ns_per_flop_lowp if c.lowp_head == 1.0 else k.ns_per_flop
    # the attention core at its kernel's factor, the share ``core_gemm`` of it (unfused:
    # batched GEMMs; MLA's absorbed decode) at the matmul one
    g = c.core_gemm
    t_flop_core = g * k.ns_per_flop + (1.0 - g) * k.ns_per_flop_attention
    t_byte = k.ns_per_hbm_byte
    w0 = k.ns_per_byte_intra
    w1 = k.ns_per_byte_inter
    w2 = k.ns_per_byte_intersip

    ov = eff.overlap
    t_lin, cl, ml = _roof(c.f_lin, c.b_lin, t_flop_mm, t_byte, ov)
    t_core, cc, mc = _roof(c.f_core, c.b_core, t_flop_core, t_byte, ov)
    t_ffn, cf, mf = _roof(c.f_ffn, c.b_ffn, t_flop_mm, t_byte, ov)
    t_head, ch, mh = _roof(c.f_head, c.b_head, t_flop_head, t_byte, ov)
    t_elem = c.b_elem * t_byte

    rt = c.ring_tier
    rw = w0 if rt == 0.0 else (w1 if rt == 1.0 else w2)
    ring_t = c.ring_bytes * rw + c.ring_alpha_ns
    u = eff.contention  # compute a collective running under it takes (Calculon)
    if c.ring_overlap == 1.0:
        exposed = ring_t - t_core
        if exposed < u * ring_t:
            exposed = u * ring_t
    else:
        exposed = ring_t
    comm_l = c.comm0_bytes * w0 + c.comm1_bytes * w1 + c.comm2_bytes * w2 + c.comm_alpha_ns
    # the window prefetched gathers and the gradient tail hide under: the layer's compute
    # and the ring wait it exposes (a faster core then never exposes more than it saves)
    t_work = t_lin + t_core + t_ffn + exposed
    t_ovl = c.ovl0_bytes * w0 + c.ovl1_bytes * w1 + c.ovl2_bytes * w2 + c.ovl_alpha_ns
    ovl = t_ovl - t_work
    free = 0.0  # compute the overlapping collectives leave free (hides the tail)
    if ovl < 0.0:
        free = -ovl
        ovl = 0.0
    if ovl < u * t_ovl:  # the compute it ran under slowed by the contention
        ovl = u * t_ovl
    pt = c.pp_tier
    pw = w0 if pt == 0.0 else (w1 if pt == 1.0 else w2)
    t_pp = c.pp_bytes * pw + c.pp_alpha_ns

    mult = c.layer_mult
    t_tail = c.tail0_bytes * w0 + c.tail1_bytes * w1 + c.tail2_bytes * w2 + c.tail_alpha_ns
    hidden = c.tail_hide * mult * free  # the part that hides, at contention u
    if hidden > t_tail:
        hidden = t_tail
    t_tail = t_tail - (1.0 - u) * hidden
    t_tail_mem = c.tail_mem_bytes * t_byte
    t_ops = (mult * c.n_ops * eff.op_ns + c.step_ops * eff.op_ns + c.step_count * eff.step_ns
             + c.launch_ns)
    # the scheduler's per-sequence host work runs one step ahead, under the device's step
    # (overlap scheduling: SGLang's zero-overhead scheduler, TensorRT-LLM's overlap
    # scheduler); it shows only where it outlasts the step
    t_seq = c.step_seqs * eff.seq_ns

    t_layer = t_lin + t_core + t_ffn + exposed + comm_l
    latency = (mult * t_layer + t_head + t_pp + t_tail + t_tail_mem
               + mult * (t_elem + ovl) + c.fixed_ns + t_ops)
    if t_seq > latency:  # host-bound: the device waits for the scheduler
        t_ops += t_seq - latency
        latency = t_seq
    # a synchronous loop's host time: the device waits for it, host-bound or not
    t_ops += c.host_block_ns
    latency += c.host_block_ns
    compute = mult * (cl + cc + cf) + ch
    memory = mult * (ml + mc + mf) + mh + t_tail_mem + mult * t_elem
    # each side alone (not the roofline's attribution): every op's FLOPs at its peak, every
    # op's bytes at the HBM bandwidth (the fused scan reads only the latency and drops these)
    compute_alone = (mult * ((c.f_lin + c.f_ffn) * t_flop_mm + c.f_core * t_flop_core)
                     + c.f_head * t_flop_head)
    memory_alone = (mult * (c.b_lin + c.b_core + c.b_ffn + c.b_elem) + c.b_head) * t_byte \
        + t_tail_mem
    comm = mult * (exposed + comm_l) + t_pp + t_tail + mult * ovl + c.fixed_ns
    throughput = per_second(c.tokens, latency)
    flops_dev = per_second(c.model_flops / c.n_devices, latency)
    fits = c.mem_bytes <= k.fit_bytes
    return (latency, throughput, flops_dev, compute, memory, comm, t_ops, compute_alone,
            memory_alone, fits)


# The coefficients as a structure of arrays: ``cols[q]`` is the column of coefficient q of
# schema.COEFFICIENTS. Both functions are generated from that declaration (a new
# coefficient needs nothing here): a column per field, read back into a tuple of the
# same field names, which ``point`` reads as it reads a record.
_COEF_NAMES: tuple[str, ...] = COEF_DTYPE.names or ()
#: One layout's coefficients as a tuple with the record's field names.
CoefValues = NamedTuple("CoefValues", [(n, float) for n in _COEF_NAMES])  # type: ignore[misc]
_COLUMNS_SRC = (
    "def coef_columns(coeffs):\n"
    "    \"\"\"Coefficient records → (n_coefficients, n_layouts) columns (one copy).\"\"\"\n"
    "    cols = np.empty((N_COEF, coeffs.shape[0]))\n"
    "    for j in range(coeffs.shape[0]):\n"
    "        c = coeffs[j]\n"
    + "".join(f"        cols[{q}, j] = c.{n}\n" for q, n in enumerate(_COEF_NAMES))
    + "    return cols\n\n\n"
    "def coef_at(cols, j):\n"
    "    \"\"\"Layout ``j`` of :func:`coef_columns` as :data:`CoefValues`.\"\"\"\n"
    "    return CoefValues("
    + ", ".join(f"cols[{q}, j]" for q in range(len(_COEF_NAMES))) + ")\n")
_generated: dict = {"__name__": __name__, "np": np, "N_COEF": len(_COEF_NAMES),
                   "CoefValues": CoefValues}
exec(compile(_COLUMNS_SRC, "<simcore.kernels.inference: coefficient columns>", "exec"),
     _generated)
coef_columns = jit()(_generated["coef_columns"])
coef_at = jit(inline="always")(_generated["coef_at"])


#: :func:`point` compiled as a function of its own (not inlined): :func:`point_one` and
#: the winners of :func:`fused_best` (one compiled copy instead of one inlined per caller)
_point_call = jit()(point.py_func)


@jit(parallel=True)
def evaluate_grid(coeffs, hw, eff):
    """Full tensor: every output of :data:`OUTPUTS` as (n_hw, n_layout) arrays."""
    n_hw = hw.shape[0]
    n_lay = coeffs.shape[0]
    lat = np.empty((n_hw, n_lay))
    thr = np.empty((n_hw, n_lay))
    fl = np.empty((n_hw, n_lay))
    comp = np.empty((n_hw, n_lay))
    mem = np.empty((n_hw, n_lay))
    comm = np.empty((n_hw, n_lay))
    over = np.empty((n_hw, n_lay))
    comp_a = np.empty((n_hw, n_lay))
    mem_a = np.empty((n_hw, n_lay))
    fits = np.empty((n_hw, n_lay), dtype=np.bool_)
    for i in prange(n_hw):
        k = row_rates(hw[i], eff)
        for j in range(n_lay):
            r = point(coeffs[j], k, eff)
            lat[i, j] = r[0]
            thr[i, j] = r[1]
            fl[i, j] = r[2]
            comp[i, j] = r[3]
            mem[i, j] = r[4]
            comm[i, j] = r[5]
            over[i, j] = r[6]
            comp_a[i, j] = r[7]
            mem_a[i, j] = r[8]
            fits[i, j] = r[9]
    return lat, thr, fl, comp, mem, comm, over, comp_a, mem_a, fits


#: hardware rows per task of :func:`fused_best` (its scratch buffers are per task)
_ROWS_PER_TASK = 16


@jit(parallel=True)
def fused_best(coeffs, hw, eff, metric_code, sign):
    """Best layout per hardware row without materialising the (hw × layout) tensor.

    Minimises ``sign * OUTPUTS[metric_code]`` over fitting layouts (ties: first layout,
    as ``argmin`` does). Returns ``best_idx`` (-1 where nothing fits) and the outputs
    at the winner as an (n_hw, N_BEST) array (NaN where nothing fits) plus the count of
    fitting layouts per hardware row.

    Per row, every layout is scored in one loop over :func:`coef_columns` (vectorised:
    no early exit, the metric's numerator per layout read from a column: ``tokens`` for
    throughput, ``model_flops / n_devices`` for FLOPS per device, as ``point`` divides
    them), then a scan keeps the first best fitting one.
    """
    n_hw = hw.shape[0]
    n_lay = coeffs.shape[0]
    best_idx = np.full(n_hw, -1, dtype=np.int64)
    vals = np.full((n_hw, N_BEST), np.nan)
    n_fit = np.zeros(n_hw, dtype=np.int64)
    cols = coef_columns(coeffs)
    amount = np.empty(n_lay)  # what the metric counts per step (unused for latency)
    for j in range(n_lay):
        c = coeffs[j]
        amount[j] = c.tokens if metric_code == 1 else c.model_flops / c.n_devices
    n_tasks = (n_hw + _ROWS_PER_TASK - 1) // _ROWS_PER_TASK
    for task in prange(n_tasks):
        score = np.empty(n_lay)
        fit = np.empty(n_lay, dtype=np.bool_)
        for i in range(task * _ROWS_PER_TASK, min(n_hw, (task + 1) * _ROWS_PER_TASK)):
            k = row_rates(hw[i], eff)
            for j in range(n_lay):
                r = point(coef_at(cols, j), k, eff)
                v = r[0] if metric_code == 0 else per_second(amount[j], r[0])
                score[j] = sign * v
                fit[j] = r[9]
            best_s = np.inf
            bi = -1
            nf = 0
            for j in range(n_lay):
                if fit[j]:
                    nf += 1
                    if score[j] < best_s:
                        best_s = score[j]
                        bi = j
            n_fit[i] = nf
            best_idx[i] = bi
            if bi >= 0:
                r = _point_call(coeffs[bi], k, eff)
                vals[i, 0] = r[0]
                vals[i, 1] = r[1]
                vals[i, 2] = r[2]
                vals[i, 3] = r[3]
                vals[i, 4] = r[4]
                vals[i, 5] = r[5]
                vals[i, 6] = r[6]
                vals[i, 7] = r[7]
                vals[i, 8] = r[8]
    return best_idx, vals, n_fit


@jit()
def point_one(coeffs, hw_row, eff):
    """:func:`point` for one coefficient record (``coeffs[0]``) and one hardware row,
    serially: the single-configuration fast path (no thread pool, no output arrays)."""
    return _point_call(coeffs[0], row_rates(hw_row, eff), eff)
