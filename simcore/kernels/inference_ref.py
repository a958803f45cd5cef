"""Plain-python reference twin of :mod:`simcore.kernels.inference` (the test oracle).

One (hardware, layout) point at a time, straight from the specs (``Model``, ``Workload``,
``Topology``, ``Layout``) and the formulas in DESIGN.md, with no packing. Each physics
piece shares its name with the kernel piece it mirrors (``simcore.kernels.twin_table``)
and takes the same quantities, named alike: the specs in place of the packed bundles,
the layout's own labels (``"head"``, ``"TP+CP"``, ``"kv"``) in place of its codes. The
roofline pieces return (FLOPs at the 16-bit rate, HBM bytes), the memory pieces bytes,
and a collective the kernel adds to a per-tier accumulator returns ``(ns, launches)``
over ``links``, the (GB/s, alpha ns) of each tier. :func:`evaluate_point` sums the pieces
by name into the step time. Slow and readable.
"""

from __future__ import annotations

import math

from . import collectives_ref as coll
from .common_ref import (
    Layout,
    attention_kernel_rate,
    busiest_share,
    ep_alltoall,
    keys_in_window,
    moe_permute_bytes,
    moe_permute_elems,
    op_time,
    placement,
    tier_alpha_ns,
    tier_base_ns,
)
from .common_ref import strides as _strides

#: the shared pieces' old homes (now :mod:`.common_ref`), for callers not yet moved
__all__ = ["Layout", "_strides", "evaluate_point", "keys_in_window", "moe_permute_elems",
           "op_time"]

_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "int4": 0.5,
          "fp4": 0.5 + 1 / 16, "mxfp4": 0.5 + 1 / 32}  # 4-bit values + one scale byte a block
#: host time to launch one kernel that is not replayed from a CUDA graph (ns; measured, ~5 us)
_HOST_LAUNCH_NS = 5000.0


def cache_heads(model) -> int:
    """KV heads of the inference cache: MLA caches one latent that every head shares."""
    return 1 if model.is_mla else model.n_kv_heads


def _tier(span: int, topology) -> int:
    return coll.tier_of(span, topology.pes_per_cube, topology.pes_per_sip)


def _causal_pairs(s_q: float, s_kv: float) -> float:
    """(query, key) pairs of the last ``s_q`` tokens of an ``s_kv``-token sequence."""
    return s_q * s_kv - s_q * (s_q - 1) / 2


def _attention_params(model) -> tuple[float, float, float]:
    """Attention weights per layer by how TP shards them: (by query head, by KV head, not
    at all). MLA's down-projections to the query and KV latents are replicated on every
    TP rank, its per-head up-projections shard with Q and O."""
    d = model.d_model
    if model.is_mla:
        kv_w = 0
        rep_w = d * (model.q_lora_rank + model.kv_lora_rank + model.qk_rope_head_dim)
    else:
        kv_w = d * model.n_kv_heads * (model.head_dim + model.value_head_dim)
        rep_w = 0
    return model.attn_params_per_layer - kv_w - rep_w, kv_w, rep_w


def _router_params(model) -> float:
    return model.ffn_params_per_layer - model.n_experts * model.expert_params


def _token_kv(model, shard, bytes_per_kv: float) -> float:
    """Cache bytes per token of context on one rank: K and V of its KV heads, or MLA's
    latent and RoPE key (held whole per head group)."""
    kv_heads, seq_share = shard[0], shard[1]
    if model.is_mla:
        return seq_share * (model.kv_lora_rank + model.qk_rope_head_dim) * bytes_per_kv
    return seq_share * kv_heads * (model.head_dim + model.value_head_dim) * bytes_per_kv


# --- pieces: precision, placement of the tokens, attention geometry ------------------------
def precision(model, workload, topology) -> tuple:
    """(bytes per weight, activation, KV element and message element, matmul rate against
    the 16-bit peak); messages carry 16-bit GEMM outputs even when the inputs are 8-bit."""
    wb = _BYTES.get(workload.weight_dtype, model.bytes_per_param)
    ab = _BYTES.get(workload.act_dtype, model.bytes_per_param)
    kvb = _BYTES.get(workload.kv_dtype, model.bytes_per_kv)
    rate = {"fp8": topology.fp8_ratio, "int8": topology.int8_ratio, "fp4": topology.fp4_ratio,
            "mxfp4": topology.fp4_ratio}.get(workload.act_dtype, 1.0)
    return wb, ab, kvb, max(ab, 2), rate * topology.mm_ratio


#: bytes of a weight-only format's zero point per group beside its 16-bit scale, by
#: ``Workload.quant_zeros`` (``"packed"``: at the weight's own width)
_ZERO_BYTES = {"none": lambda width: 0.0, "packed": lambda width: width,
               "fp16": lambda width: 2.0}


def weight_only(workload, topology) -> tuple:
    """(scale bytes per weight, weight-streaming rate, matmul rate) of weight-only INT4 /
    INT8 weights with 16-bit activations (the rates relative to 16-bit weights'); (0, 1, 1)
    for every other format. Each group of ``quant_group`` weights keeps a 16-bit scale and
    the format's zero point (0: one per output channel, not counted)."""
    act16 = workload.act_dtype in ("", "bf16", "fp16")
    if workload.mode == "train" or not act16 or workload.weight_dtype not in ("int4", "int8"):
        return 0.0, 1.0, 1.0
    width = _BYTES[workload.weight_dtype]
    group = workload.quant_group
    scale = (2 + _ZERO_BYTES[workload.quant_zeros](width)) / group if group else 0.0
    stream = (topology.wo_int4_bw_ratio if workload.weight_dtype == "int4"
              else topology.wo_int8_bw_ratio)
    return scale, stream, topology.wo_mm_ratio


def layout_valid(lay: Layout, model, workload, topology) -> bool:
    """Whether the layout fits the system and divides the model, batch and sequence."""
    n_dev = lay.cp * lay.tp * lay.pp * lay.dp
    if n_dev > topology.n_devices:
        return False
    if model.n_heads % lay.tp or lay.pp > model.n_layers or lay.dp > workload.batch:
        return False
    if workload.mode != "decode" and lay.cp > workload.s_q:
        return False
    if lay.cp > workload.s_kv:
        return False
    if lay.ep > 1:  # experts over ep of the TP x DP devices; not with the TP+CP FFN
        if model.n_experts == 1 or model.n_experts % lay.ep or (lay.tp * lay.dp) % lay.ep:
            return False
        if lay.ffn_shard_scope == "TP+CP" and lay.cp > 1:
            return False
    kvh = cache_heads(model)
    if lay.kv_shard_mode == "head":
        return (kvh % lay.tp == 0) if lay.tp <= kvh else (lay.tp % kvh == 0)
    if lay.kv_shard_mode == "head_seq":
        return lay.tp > kvh and lay.tp % kvh == 0
    return True


def token_counts(dp: int, pp: int, cp: int, workload) -> tuple:
    """(sequences per replica, micro-batches in flight, sequences per pass, mixed prompt
    tokens per pass, tokens per device, tokens per replica). Decode with PP keeps
    min(pp, batch) micro-batches in flight; continuous batching mixes other requests'
    prompt tokens into a decode pass, split like the batch."""
    decode = workload.mode == "decode"
    seqs_replica = -(-workload.batch // dp)
    in_flight = min(pp, seqs_replica) if decode else 1
    seqs_pass = -(-seqs_replica // in_flight)
    q_local = 1 if decode else workload.s_q / cp
    mixed = workload.prefill_tokens / dp / in_flight if decode else 0.0
    return (seqs_replica, in_flight, seqs_pass, mixed, seqs_pass * q_local + mixed,
            seqs_pass * workload.s_q + mixed)


def attention_widths(model, decode: bool) -> tuple[int, int]:
    """(score, value) width per query head. MLA decode runs absorbed (DeepSeek-V2 §2.1.2,
    FlashMLA): queries score against the latent and its RoPE key, values are the latent."""
    if decode and model.is_mla:
        return model.kv_lora_rank + model.qk_rope_head_dim, model.kv_lora_rank
    return model.head_dim, model.value_head_dim


def attention_span(model, s_q: int, s_kv: int, mix_ctx: int) -> tuple:
    """(causal share of the s_q x s_kv pairs, tokens cached, pairs attended over full causal
    ones, context of the mixed prompt tokens), averaged over global and local
    (sliding-window) layers."""
    full = _causal_pairs(s_q, s_kv)
    L, n_loc, window = model.n_layers, model.n_local_layers, model.sliding_window
    if not n_loc:
        return full / (s_q * s_kv), s_kv, 1.0, mix_ctx

    def per_layer(global_value: float, local_value: float) -> float:
        return ((L - n_loc) * global_value + n_loc * local_value) / L

    local = keys_in_window(s_kv - s_q + 1, s_kv, window)
    return (full / (s_q * s_kv), per_layer(s_kv, min(s_kv, window)),
            per_layer(full, local) / full, per_layer(mix_ctx, min(mix_ctx, window)))


def kv_sharding(kvm: str, tp: int, model) -> tuple:
    """(KV heads, share of each sequence, query heads, ranks the K/V weights split over)
    per TP rank, by ``kv_shard_mode``."""
    kvh, h = cache_heads(model), model.n_heads
    if kvm == "head":
        return (kvh / tp if tp <= kvh else 1), 1.0, h / tp, min(tp, kvh)
    if kvm == "seq":
        return kvh, 1 / tp, h, tp
    return 1, kvh / tp, h / kvh, kvh


def kv_cache_bytes(model, tokens, shard, s_cache: float, cp: int, bytes_per_kv: float) -> tuple:
    """(cache bytes one pass reads, cache bytes a device holds) per layer."""
    per_seq = (s_cache / cp) * _token_kv(model, shard, bytes_per_kv)
    return tokens[2] * per_seq, tokens[0] * per_seq


# --- pieces: attention ---------------------------------------------------------------------
def attention_weights(model, tp: int, shard) -> float:
    """Attention parameters per device and layer."""
    qo_w, kv_w, rep_w = _attention_params(model)
    return qo_w / tp + kv_w / shard[3] + rep_w


def attention_projections(model, tokens, tp, attn_w, mm_rate, bytes_per_weight, bytes_per_act):
    """(FLOPs, bytes) of the QKV and O projections; the replicated part in full per rank."""
    rep_w = _attention_params(model)[2]
    t = tokens[4]
    flops = 2 * t * ((model.attn_params_per_layer - rep_w) / tp + rep_w) / mm_rate
    return flops, attn_w * bytes_per_weight + t * model.d_model * bytes_per_act * (2 + 2 / tp)


def attention_core_decode(model, tokens, shard, s_q, s_kv, pair_frac, ctx_mix, qk, vd, tp, cp,
                          bytes_per_act, bytes_per_kv, kv_read):
    """(FLOPs over the cached keys, FLOPs of the mixed prompt tokens, bytes) of decode
    attention: read the cache, Q and O; the mixed prompt tokens write their K and V and
    attend (decompressed) to ``ctx_mix`` earlier tokens."""
    _, _, seqs_pass, mixed, tokens_local, _ = tokens
    pairs = pair_frac * _causal_pairs(s_q, s_kv)
    hd_sum = model.head_dim + model.value_head_dim
    cached = seqs_pass * pairs * 2 * (qk + vd) * model.n_heads / (tp * cp)
    prompts = mixed * ctx_mix * 2 * hd_sum * model.n_heads / (tp * cp)
    qo = tokens_local * shard[2] * (qk + vd) * bytes_per_act
    return cached, prompts, kv_read + qo + mixed * _token_kv(model, shard, bytes_per_kv)


def attention_core_class(model, workload, topology, flops_cached, flops_mixed) -> tuple:
    """(FLOPs in the units of their rates, share at the matmul rate) of the decode core:
    MLA's absorbed decode over the cached latent runs as a GEMM-class kernel (FlashMLA:
    580 TFLOPS compute-bound on an H800, deepseek-ai/FlashMLA README @26d30779) at the
    matmul rate; the rest at the attention kernel's."""
    rate = attention_kernel_rate(workload, topology)
    gemm = flops_cached / topology.mm_ratio if model.is_mla else 0.0
    other = flops_mixed / rate + (0.0 if model.is_mla else flops_cached / rate)
    flops = gemm + other
    return flops, (gemm / flops if flops > 0 else 0.0)


def attention_core_prefill(model, tokens, shard, s_q, s_kv, pair_frac, qk, vd, tp, cp,
                           bytes_per_act, bytes_per_kv, kv_read):
    """(FLOPs, bytes) of prefill attention: write the cache, read the keys each query
    attends to (MLA: K and V decompressed per head, written and read), read Q, write O."""
    seqs_pass, tokens_local = tokens[2], tokens[4]
    pairs = pair_frac * _causal_pairs(s_q, s_kv)
    flops = seqs_pass * pairs * 2 * (qk + vd) * model.n_heads / (tp * cp)
    qo = tokens_local * shard[2] * (qk + vd) * bytes_per_act
    if model.is_mla:
        dec_token = shard[1] * shard[2] * (model.head_dim + model.value_head_dim) * bytes_per_act
        kv = kv_read + seqs_pass * (s_kv / cp) * dec_token + seqs_pass * dec_token * pairs / s_q
    else:
        kv = kv_read + seqs_pass * _token_kv(model, shard, bytes_per_kv) * pairs / s_q
    return flops, kv + qo


def cp_ring(ring: str, cp, tier_cp, kv_read, tokens, shard, qk, vd, bytes_per_msg, topology):
    """(bytes, link latency ns) of ring attention: cp - 1 blocks of KV or of Q, O, m, l."""
    if cp <= 1:
        return 0.0, 0.0
    block = kv_read if ring == "kv" else tokens[4] * shard[2] * ((qk + vd) * bytes_per_msg + 8)
    # each step a send: across cubes it pays NCCL's base latency as well as the link's
    return (cp - 1) * block, (cp - 1) * (tier_alpha_ns(topology, tier_cp)
                                         + tier_base_ns(topology, tier_cp))


def splitk_combine(links, kvm, tp, model, tokens, shard, qk, vd, bytes_per_msg, strides,
                   tier_tp, topology) -> tuple:
    """(ns, launches) of the split-K combine of sequence-sharded KV: the kernel folds one
    all-gather of Q and one all-reduce of O, m, l into 3(g-1) link latencies."""
    if kvm not in ("seq", "head_seq"):
        return 0.0, 0
    group = tp if kvm == "seq" else tp // cache_heads(model)
    if group <= 1:  # a one-rank split-K combine launches nothing
        return 0.0, 0
    g_tier = tier_tp if kvm == "seq" else _tier(group * strides[0], topology)
    g_link = links[g_tier]
    q_b = tokens[4] * shard[2] * qk * bytes_per_msg
    o_b = tokens[4] * shard[2] * (vd * bytes_per_msg + 8)
    return (coll.allgather_ns(q_b, group, *g_link) + coll.allreduce_ns(o_b, group, *g_link)
            + 2 * tier_base_ns(topology, g_tier)), 2


# --- pieces: FFN and MoE -------------------------------------------------------------------
def ffn_shard(ffs: str, tp: int, cp: int, tokens) -> tuple:
    """(ranks the FFN weights split over, tokens the FFN sees)."""
    if ffs == "TP+CP" and cp > 1:
        return tp * cp, tokens[5]
    return tp, tokens[4]


def experts_touched(n_experts, top_k, n_tokens) -> float:
    """Expected experts any of ``n_tokens`` tokens routes to (uniform top-k routing)."""
    if n_experts <= 1:
        return 1
    p_idle = 1 - top_k / n_experts  # an expert one token does not route to
    return n_experts * (1 - p_idle ** n_tokens)


def busiest_rank_experts(n_experts, top_k, n_tokens, ep) -> float:
    """Expected distinct local experts on the busiest of ``ep`` EP ranks (uniform routing,
    independent Binomial(E/ep, p) counts): the expectation of their maximum, summed over
    its distribution (``P(max > j) = 1 - F(j)^ep``)."""
    m = round(n_experts / ep)
    p = 1 - (1 - top_k / n_experts) ** n_tokens
    if ep <= 1 or p <= 0 or p >= 1:
        return n_experts / ep * min(max(p, 0.0), 1.0)
    pmf = [math.comb(m, j) * p ** j * (1 - p) ** (m - j) for j in range(m + 1)]
    cdf = [sum(pmf[:j + 1]) for j in range(m)]
    return sum(1 - min(c, 1.0) ** ep for c in cdf)


def ffn_gemms(model, ffn_ranks, ffn_tokens, mm_rate, bytes_per_weight, bytes_per_act):
    """(FLOPs, bytes) of the dense FFN or the experts sharded like it."""
    flops = 2 * ffn_tokens * model.ffn_active_params_per_layer / ffn_ranks / mm_rate
    touched = experts_touched(model.n_experts, model.top_k, ffn_tokens)
    read = (touched * model.expert_params + _router_params(model)) / ffn_ranks
    return flops, read * bytes_per_weight + 2 * ffn_tokens * model.d_model * bytes_per_act


def expert_gemms_ep(model, workload, tokens, ffn_tokens, tp, dp, ep, mm_rate, bytes_per_weight,
                    bytes_per_act):
    """(FLOPs, bytes) of the experts under expert parallelism: the busiest rank's routed
    tokens (``busiest_share`` x the mean), the weights of its experts the DP
    replicas' tokens touch."""
    E, k, t = model.n_experts, model.top_k, tokens[4]
    router = _router_params(model)
    mine = busiest_rank_experts(E, k, t * dp, ep)
    routed = k * model.expert_params * busiest_share(model, workload, ep)
    flops = 2 * t * (routed + router) / tp / mm_rate
    read = mine * model.expert_params / (tp * dp / ep) + router / tp
    return flops, read * bytes_per_weight + 2 * ffn_tokens * model.d_model * bytes_per_act


#: a routed expert's slice in a block-scaled FP8 grouped GEMM (ns per slice per
#: (1 - 1/r)^2; aiconfigurator's TensorRT-LLM 1.2.0rc5 H200 moe_perf table @095f58a5)
_EXPERT_SLICE_NS = 683.0


def expert_slice_ns(model, workload, tokens, ffn_ranks, ffn_tokens, tp, dp, ep) -> float:
    """Device time per layer (averaged over the layers) expert TP adds to FP8 grouped GEMMs:
    each touched expert a rank runs as a slice 1/r costs ``_EXPERT_SLICE_NS`` (1 - 1/r)^2."""
    if model.n_experts <= 1 or workload.act_dtype != "fp8" or workload.mode == "train":
        return 0.0
    E, k = model.n_experts, model.top_k
    if ep > 1:
        r, local = tp * dp / ep, busiest_rank_experts(E, k, tokens[4] * dp, ep)
    else:
        r, local = ffn_ranks, experts_touched(E, k, ffn_tokens)
    return _EXPERT_SLICE_NS * local * (1 - 1 / r) ** 2 * model.n_moe_layers / model.n_layers


def mla_decode_floor(model, workload) -> float:
    """An MLA decode attention op's extra device time per layer (the runtime's)."""
    if model.is_mla and workload.mode == "decode":
        return float(workload.mla_decode_ns)
    return 0.0


def elementwise_bytes(model, workload, tokens, ffn_tokens, tp, dp, ep, bytes_per_act) -> float:
    """Residual adds and norms (hidden state read and written twice), MoE token permutes:
    with the EP all-to-all each TP rank's 1/tp slice, with the EP all-reduce the copies a
    rank's experts receive (1/ep of every token's, at the busiest rank's share)."""
    nbytes = 4 * tokens[4] * model.d_model * bytes_per_act
    if model.n_experts > 1:
        rows = ffn_tokens
        if ep_alltoall(dp, ep):
            rows = tokens[4] / tp
        elif ep > 1:
            rows = tokens[4] / ep * busiest_share(model, workload, ep)
        nbytes += (moe_permute_bytes(model.top_k, model.d_model, bytes_per_act, rows)
                   * model.n_moe_layers / model.n_layers)
    return nbytes


def lm_head(model, tokens, tp, mm_rate, bytes_per_weight) -> tuple[float, float]:
    """(FLOPs, bytes) of the LM head for the last positions: weights, fp32 logits."""
    V, d, seqs = model.vocab_size, model.d_model, tokens[2]
    return 2 * seqs * d * V / tp / mm_rate, V * d * bytes_per_weight / tp + seqs * V / tp * 4


# --- pieces: collectives -------------------------------------------------------------------
def tp_allreduce(links, act_bytes, tp, strides, topology) -> tuple:
    """(ns, launches) of an all-reduce over TP."""
    if tp <= 1:
        return 0.0, 0
    return coll.allreduce_hier_ns(act_bytes, tp, strides[0], topology, links), 1


def ffn_tpcp_allreduce(links, model, tokens, bytes_per_msg, tp, cp, strides, tier_cp, decode,
                       topology) -> tuple:
    """(ns, launches): the replica's FFN output all-reduced over TP x CP, after (prefill)
    an all-gather of its tokens across CP."""
    nbytes = tokens[5] * model.d_model * bytes_per_msg
    span = max(coll.group_span(tp, strides[0]), coll.group_span(cp, strides[1]))
    ns = coll.allreduce_hier_ns(nbytes, tp * cp, span / (tp * cp), topology, links)
    if decode:
        return ns, 1
    return ns + coll.allgather_ns(nbytes, cp, *links[tier_cp]) + tier_base_ns(topology, tier_cp), 2


def moe_alltoall(links, model, workload, tokens, act_bytes, bytes_per_act, bytes_per_msg, tp,
                 dp, ep, strides, tier_tp, topology) -> tuple:
    """(ns, launches) of the MoE dispatch (activation dtype) and combine (16-bit outputs)
    over the EP group, then the TP ranks' all-gather of their slices. Each routed token
    goes to the r = tp·dp/ep ranks holding a shard of its expert: r - 1/ep copies off the
    device ((ep - 1)/ep when experts are whole, r = 1); the busiest rank receives
    ``busiest_share`` x the mean."""
    ep_span = max(coll.group_span(tp, strides[0]), coll.group_span(dp, strides[3]))
    ep_tier = _tier(ep_span, topology)
    ep_bw, ep_alpha = links[ep_tier]
    copies = tp * dp / ep - 1 / ep
    sent = (tokens[4] / tp * model.top_k * model.d_model * (bytes_per_act + bytes_per_msg) * copies
            * busiest_share(model, workload, ep))
    # dispatch and combine: two operations, each paying the base latency across cubes
    ns = sent / ep_bw + 2 * (coll.phase_steps(ep) * ep_alpha + tier_base_ns(topology, ep_tier))
    if tp <= 1:
        return ns, 2
    tp_bw, tp_alpha = links[tier_tp]
    return ns + ((tp - 1) / tp * act_bytes / tp_bw + coll.phase_steps(tp) * tp_alpha
                 + tier_base_ns(topology, tier_tp)), 3


# --- pieces: pipeline, memory, model FLOPs, launches -----------------------------------------
def pipeline_layers(model, pp, decode, tokens) -> tuple:
    """(layers per stage, layer slots on the critical path, micro-batches): decode passes
    every layer once per token; prefill runs one micro-batch per sequence through 1F1B."""
    lps = math.ceil(model.n_layers / pp)
    micro = 1 if decode else tokens[0]
    return lps, model.n_layers if decode else lps * (micro + pp - 1) / micro, micro


def pp_p2p(model, pp, tier_pp, tokens, micro, bytes_per_msg, topology) -> tuple:
    """(bytes, link latency ns) of the pp - 1 pipeline sends of one micro-batch."""
    if pp <= 1:
        return 0.0, 0.0
    return ((pp - 1) * tokens[4] / micro * model.d_model * bytes_per_msg,
            (pp - 1) * (tier_alpha_ns(topology, tier_pp) + tier_base_ns(topology, tier_pp)))


def weight_bytes(model, attn_w, ffn_ranks, tp, dp, ep, pp, bytes_per_weight) -> tuple:
    """(bytes of one layer's weights, of the embedding / LM head) per device."""
    ffn_w = model.ffn_params_per_layer / ffn_ranks
    if ep > 1:
        ffn_w = model.n_experts / ep * model.expert_params / (tp * dp / ep) + _router_params(model) / tp
    layer = (attn_w + ffn_w + model.norm_params_per_layer) * bytes_per_weight
    tables = 1 if (pp > 1 or model.tied_embeddings) else 2  # PP: the last stage's LM head
    return layer, model.vocab_size * model.d_model * tables * bytes_per_weight / tp


def activation_bytes(model, tokens, ffn_ranks, tp, bytes_per_act) -> float:
    """Hidden state, FFN intermediate and fp32 logits per device."""
    ffn_act = model.d_ff * min(model.top_k, model.n_experts) / ffn_ranks
    return (tokens[4] * (4 * model.d_model + 2 * ffn_act) * bytes_per_act
            + tokens[2] * model.vocab_size / tp * 4)


def model_flops(model, workload, pair_frac, ctx_mix) -> float:
    """Reported FLOPs per step: no embedding gather, the LM head only where logits are
    needed, attention decompressed (the model's FLOPs, whatever the kernel computes)."""
    B, s_q, d = workload.batch, workload.s_q, model.d_model
    per_token = model.n_active_params - model.embedding_params - d
    pair_flops = 2 * (model.head_dim + model.value_head_dim) * model.n_heads * model.n_layers
    flops = (2 * per_token * B * s_q + 2 * d * model.vocab_size * B
             + pair_flops * B * pair_frac * _causal_pairs(s_q, workload.s_kv))
    if workload.mode == "decode":
        p = workload.prefill_tokens
        flops += 2 * per_token * p + pair_flops * p * ctx_mix
    return flops


def layer_launches(model) -> float:
    """A layer's kernels: 10 with two norms, one more or fewer per norm, 4 more for MoE,
    3 more for MLA attention (q_a norm, q up-projection, absorbed-V matmul)."""
    return (10 + (model.n_norms_per_layer - 2) + (4 if model.n_experts > 1 else 0)
            + (3 if model.is_mla else 0))


def step_overheads(workload, pp, layer_mult, n_ops, seqs) -> tuple:
    """(launches per step, share of the framework floor, host launch ns, host ns the device
    waits for): embedding, final norm, head, sampling and the pipeline sends; a quarter of
    the floor with CUDA graphs; 5 us per launch from the host unless decode replays a
    graph, where served steps that admit a prompt (the mixed tokens over twice the mean
    context, at most 1) run eagerly; the serving loop's host time per step
    (``host_step_ns``) and a synchronous scheduler's per scheduled sequence
    (``host_seq_ns`` times the replica's ``seqs``)."""
    graphs = workload.mode == "decode" and workload.cuda_graphs
    step_ops = 4 + 2 * (pp - 1)
    eager = 1.0
    if graphs:
        p, ctx = workload.prefill_tokens, workload.prefill_context
        eager = min(p / (2 * ctx), 1.0) if (p > 0 and ctx > 0) else 0.0
    launch = _HOST_LAUNCH_NS * eager * (layer_mult * n_ops + step_ops)
    return (step_ops, 0.25 if graphs else 1.0, launch,
            workload.host_step_ns + workload.host_seq_ns * seqs)


# --- the point: the pieces summed by name ---------------------------------------------------
def hardware_rates(hardware, topology, efficiency, workload) -> tuple:
    """(matmul FLOP/ns at the 16-bit rate, attention-core FLOP/ns, HBM bytes/ns, links):
    ``links`` the (GB/s, alpha ns) of each tier; FP8 / INT8 / FP4 matmuls at their own factor
    (FP4 at the factor fitted on FP8 and INT8: an assumption)."""
    mm_eff = efficiency.compute
    lowp = ("fp8", "int8", "fp4", "mxfp4")
    if workload.act_dtype in lowp and efficiency.lowp_compute is not None:
        mm_eff = efficiency.lowp_compute
    attn_eff = efficiency.compute if efficiency.attention is None else efficiency.attention
    net = efficiency.network
    net_inter = net if efficiency.network_inter is None else efficiency.network_inter
    net_sip = net_inter if efficiency.network_sip is None else efficiency.network_sip
    links = [(hardware.bw_intra_gbs * net, topology.alpha_intra_ns),
             (hardware.bw_inter_gbs * net_inter, topology.alpha_inter_ns),
             (hardware.bw_intersip_gbs * net_sip, topology.alpha_intersip_ns)]
    return (hardware.peak_tflops_f16 * 1e3 * mm_eff, hardware.peak_tflops_f16 * 1e3 * attn_eff,
            hardware.bw_hbm_gbs * efficiency.memory * topology.hbm_ratio, links)


def evaluate_point(model, workload, hardware, topology, efficiency, lay: Layout) -> dict:
    """Latency, fit and breakdown of one (hardware, layout) point."""
    nan = float("nan")
    if not layout_valid(lay, model, workload, topology):
        return dict(latency_ns=nan, throughput_tok_s=nan, flops_per_device=nan, compute_ns=nan,
                    memory_ns=nan, comm_ns=nan, overhead_ns=nan, compute_alone_ns=nan,
                    memory_alone_ns=nan, fits=False, valid=False, mem_bytes=None)
    decode = workload.mode == "decode"
    cp, tp, pp, dp, ep = lay.cp, lay.tp, lay.pp, lay.dp, lay.ep
    s_q, s_kv = workload.s_q, workload.s_kv
    wb_held, ab, kvb, msg, mm_rate = precision(model, workload, topology)
    scale, stream, wo_mm = weight_only(workload, topology)
    wb_held += scale  # held: the group scales count; streamed at the format's own rate
    wb, mm_rate = wb_held / stream, mm_rate * wo_mm
    peak, attn_peak, hbm, links = hardware_rates(hardware, topology, efficiency, workload)
    st, tier_tp, tier_cp, tier_pp, _, _ = placement(lay, topology)
    tokens = token_counts(dp, pp, cp, workload)
    qk, vd = attention_widths(model, decode)
    _, s_cache, pair_frac, ctx_mix = attention_span(model, s_q, s_kv, workload.prefill_context)
    shard = kv_sharding(lay.kv_shard_mode, tp, model)
    kv_read, kv_held = kv_cache_bytes(model, tokens, shard, s_cache, cp, kvb)
    ffn_ranks, ffn_tokens = ffn_shard(lay.ffn_shard_scope, tp, cp, tokens)

    attn_w = attention_weights(model, tp, shard)
    ops: dict[str, tuple[float, float]] = {
        "attn_linear": attention_projections(model, tokens, tp, attn_w, mm_rate, wb, ab)}
    if decode:
        f_cached, f_mixed, core_b = attention_core_decode(
            model, tokens, shard, s_q, s_kv, pair_frac, ctx_mix, qk, vd, tp, cp, ab, kvb, kv_read)
        core_f, gemm = attention_core_class(model, workload, topology, f_cached, f_mixed)
    else:
        core_f, core_b = attention_core_prefill(model, tokens, shard, s_q, s_kv, pair_frac, qk,
                                                vd, tp, cp, ab, kvb, kv_read)
        core_f, gemm = core_f / attention_kernel_rate(workload, topology), 0.0
    ops["attn_core"] = (core_f, core_b)
    # the core's rate: its matmul-class share at the 16-bit matmul factor, the rest at the
    # attention kernel's (FLOPs / rate = the two shares' times)
    mm16 = hardware.peak_tflops_f16 * 1e3 * efficiency.compute
    attn_peak = 1.0 / (gemm / mm16 + (1.0 - gemm) / attn_peak) if gemm else attn_peak
    ops["ffn"] = (expert_gemms_ep(model, workload, tokens, ffn_tokens, tp, dp, ep, mm_rate, wb, ab)
                  if ep > 1 else ffn_gemms(model, ffn_ranks, ffn_tokens, mm_rate, wb, ab))
    t_elem = elementwise_bytes(model, workload, tokens, ffn_tokens, tp, dp, ep, ab) / hbm

    act = tokens[4] * model.d_model * msg
    if lay.ffn_shard_scope == "TP+CP" and cp > 1:
        ffn_out = ffn_tpcp_allreduce(links, model, tokens, msg, tp, cp, st, tier_cp, decode,
                                     topology)
    elif ep_alltoall(dp, ep):  # else an all-reduce over TP
        ffn_out = moe_alltoall(links, model, workload, tokens, act, ab, msg, tp, dp, ep, st,
                               tier_tp, topology)
    else:
        ffn_out = tp_allreduce(links, act, tp, st, topology)
    collectives = (tp_allreduce(links, act, tp, st, topology), ffn_out,
                   splitk_combine(links, lay.kv_shard_mode, tp, model, tokens, shard, qk, vd,
                                  msg, st, tier_tp, topology))
    comm = sum(ns for ns, _ in collectives)
    launches = layer_launches(model) + sum(n for _, n in collectives)
    ring_bytes, ring_alpha = cp_ring(lay.cp_ring_variant, cp, tier_cp, kv_read, tokens, shard,
                                     qk, vd, msg, topology)
    ring = ring_bytes / links[tier_cp][0] + ring_alpha

    def roofline(flops: float, nbytes: float, rate: float = peak) -> tuple[float, str]:
        return op_time(flops / rate, nbytes / hbm, efficiency.roofline_overlap)

    times = {name: roofline(*fb, rate=attn_peak if name == "attn_core" else peak)
             for name, fb in ops.items()}
    u = efficiency.comm_contention  # compute a collective running under it takes
    exposed = ring if decode else max(u * ring, ring - times["attn_core"][0])
    layers_per_stage, path_layers, micro = pipeline_layers(model, pp, decode, tokens)
    pp_bytes, pp_alpha = pp_p2p(model, pp, tier_pp, tokens, micro, msg, topology)
    t_pp = pp_bytes / links[tier_pp][0] + pp_alpha
    head_fb = lm_head(model, tokens, tp, mm_rate, wb)
    t_head, head_kind = roofline(*head_fb)
    step_ops, floor, host_launch, host_block = step_overheads(workload, pp, path_layers,
                                                              launches, tokens[0])
    overhead = ((path_layers * launches + step_ops) * efficiency.op_latency_ns + host_launch
                + floor * efficiency.step_overhead_ns + path_layers * (expert_slice_ns(
                    model, workload, tokens, ffn_ranks, ffn_tokens, tp, dp, ep)
                    + mla_decode_floor(model, workload)))
    layer_time = sum(t for t, _ in times.values()) + exposed + comm
    latency = path_layers * (layer_time + t_elem) + t_head + t_pp + overhead
    # the scheduler's cost per sequence of the replica runs on the host one step ahead
    # (overlap scheduling): the step takes the longer of the two
    host = tokens[0] * efficiency.seq_overhead_ns
    if host > latency:
        overhead += host - latency
        latency = host
    # a synchronous loop's host time: the device waits for it, host-bound or not
    overhead += host_block
    latency += host_block
    bound = {kind: sum(t for t, k in times.values() if k == kind) for kind in ("compute", "memory")}
    head = {"compute": 0.0, "memory": 0.0, head_kind: t_head}
    # each side alone: all FLOPs at their peak, all bytes at the HBM bandwidth
    compute_alone = path_layers * sum(
        f / (attn_peak if name == "attn_core" else peak) for name, (f, _) in ops.items()
    ) + head_fb[0] / peak
    memory_alone = path_layers * (sum(b for _, b in ops.values()) / hbm + t_elem) + head_fb[1] / hbm

    layer_bytes, emb = weight_bytes(model, attn_w, ffn_ranks, tp, dp, ep, pp, wb_held)
    act_bytes = activation_bytes(model, tokens, ffn_ranks, tp, ab)
    mem = layers_per_stage * (layer_bytes + kv_held) + emb + act_bytes
    seconds = latency / 1e9
    return dict(
        latency_ns=latency,
        throughput_tok_s=(workload.batch if decode else workload.batch * s_q) / seconds,
        flops_per_device=model_flops(model, workload, pair_frac, ctx_mix) / (cp * tp * pp * dp)
        / seconds,
        compute_ns=path_layers * bound["compute"] + head["compute"],
        memory_ns=path_layers * (bound["memory"] + t_elem) + head["memory"],
        comm_ns=path_layers * (exposed + comm) + t_pp,
        overhead_ns=overhead,
        compute_alone_ns=compute_alone,
        memory_alone_ns=memory_alone,
        fits=mem <= hardware.pe_hbm_gb * 1e9 * efficiency.hbm_usable,
        valid=True,
        mem_bytes=mem,
        mem_weights_bytes=layers_per_stage * layer_bytes + emb,
        mem_kv_bytes=layers_per_stage * kv_held,
        mem_act_bytes=act_bytes,
    )
