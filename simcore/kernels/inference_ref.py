"""Plain-python reference twin of :mod:`simcore.kernels.inference` (the test oracle).

One (hardware, layout) point at a time, straight from the specs and the formulas in
DESIGN.md, with no packing and no two-stage factorisation. Slow and readable.
"""

from __future__ import annotations

import math

from . import collectives_ref as coll
from .common_ref import TIERS, Layout, keys_in_window, moe_permute_elems, op_time
from .common_ref import strides as _strides

#: the shared pieces' old homes (now :mod:`.common_ref`), for callers not yet moved
__all__ = ["Layout", "_strides", "evaluate_point", "keys_in_window", "moe_permute_elems",
           "op_time"]

_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "int4": 0.5}
#: host time to launch one kernel that is not replayed from a CUDA graph (ns; measured, ~5 us)
_HOST_LAUNCH_NS = 5000.0


def cache_heads(model) -> int:
    """KV heads of the inference cache: MLA caches one latent that every head shares."""
    return 1 if model.is_mla else model.n_kv_heads


def attention_widths(model, decode: bool) -> tuple[int, int]:
    """(score, value) width per query head. MLA decode runs absorbed (DeepSeek-V2 §2.1.2,
    FlashMLA): queries score against the latent and its RoPE key, values are the latent."""
    if decode and model.is_mla:
        return model.kv_lora_rank + model.qk_rope_head_dim, model.kv_lora_rank
    return model.head_dim, model.value_head_dim


def is_valid(model, workload, topology, lay: Layout) -> bool:
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


def evaluate_point(model, workload, hardware, topology, efficiency, lay: Layout) -> dict:
    """Latency, fit and breakdown of one (hardware, layout) point."""
    nan = float("nan")
    if not is_valid(model, workload, topology, lay):
        return dict(latency_ns=nan, throughput_tok_s=nan, flops_per_device=nan, compute_ns=nan,
                    memory_ns=nan, comm_ns=nan, overhead_ns=nan, fits=False, valid=False,
                    mem_bytes=None)
    decode = workload.mode == "decode"
    cp, tp, pp, dp = lay.cp, lay.tp, lay.pp, lay.dp
    d, h, kvh, hd = model.d_model, model.n_heads, cache_heads(model), model.head_dim
    vhd = model.value_head_dim
    wb = _BYTES.get(workload.weight_dtype, model.bytes_per_param)  # weights
    ab = _BYTES.get(workload.act_dtype, model.bytes_per_param)  # activations (matmul inputs)
    kvb = _BYTES.get(workload.kv_dtype, model.bytes_per_kv)
    mm_rate = {"fp8": topology.fp8_ratio, "int8": topology.int8_ratio}.get(workload.act_dtype, 1.0)
    B, s_q, s_kv = workload.batch, workload.s_q, workload.s_kv

    # FLOP per ns of the matmuls; FP8 / INT8 ones at their own factor
    mm_eff = efficiency.compute
    if workload.act_dtype in ("fp8", "int8") and efficiency.lowp_compute is not None:
        mm_eff = efficiency.lowp_compute
    # the family's achievable matmul fraction relative to Hopper's scales every matmul
    peak = hardware.peak_tflops_f16 * 1e12 * mm_eff / 1e9 * mm_rate * topology.mm_ratio
    attn_eff = efficiency.compute if efficiency.attention is None else efficiency.attention
    attn_peak = hardware.peak_tflops_f16 * 1e12 * attn_eff / 1e9
    hbm = hardware.bw_hbm_gbs * efficiency.memory  # bytes per ns
    net = efficiency.network
    net_inter = net if efficiency.network_inter is None else efficiency.network_inter
    net_sip = net_inter if efficiency.network_sip is None else efficiency.network_sip
    link = {
        "intra": (hardware.bw_intra_gbs * net, topology.alpha_intra_ns),
        "inter": (hardware.bw_inter_gbs * net_inter, topology.alpha_inter_ns),
        "intersip": (hardware.bw_intersip_gbs * net_sip, topology.alpha_intersip_ns),
    }
    strides = _strides(lay)

    def tier(span: int) -> str:
        return TIERS[coll.tier_of(span, topology.pes_per_cube, topology.pes_per_sip)]

    tp_link = link[tier(coll.group_span(tp, strides["tp"]))]
    cp_link = link[tier(coll.group_span(cp, strides["cp"]))]
    pp_link = link[tier(coll.group_span(pp, strides["pp"]))]

    seqs_replica = -(-B // dp)
    # decode with PP: min(pp, batch) micro-batches in flight; one micro-batch per pass
    in_flight = min(pp, seqs_replica) if decode else 1
    replica_batch = -(-seqs_replica // in_flight)
    q_local = 1 if decode else s_q / cp
    # continuous batching: prompt tokens of other requests in the same decode pass, split
    # over the replicas and the micro-batches in flight like the batch
    mixed = workload.prefill_tokens / dp / in_flight if decode else 0.0
    tokens_local = replica_batch * q_local + mixed
    tokens_replica = replica_batch * s_q + mixed
    qk, vd = attention_widths(model, decode)

    # local (sliding-window) layers cache and attend to at most `window` tokens; the
    # quantities below are averages over the layers
    L, n_loc, window = model.n_layers, model.n_local_layers, model.sliding_window

    def per_layer(global_value: float, local_value: float) -> float:
        return ((L - n_loc) * global_value + n_loc * local_value) / L

    def pairs(queries: int, context: int, local: bool) -> float:
        """(query, key) pairs of the last `queries` tokens of a `context`-token sequence."""
        if local:
            return keys_in_window(context - queries + 1, context, window)
        return queries * context - queries * (queries - 1) / 2

    cached = per_layer(s_kv, min(s_kv, window)) if n_loc else s_kv
    seq_pairs = per_layer(pairs(s_q, s_kv, False), pairs(s_q, s_kv, True)) if n_loc else (
        pairs(s_q, s_kv, False))
    ctx = workload.prefill_context
    mixed_ctx = per_layer(ctx, min(ctx, window)) if n_loc else ctx

    # KV layout on a TP rank
    if lay.kv_shard_mode == "head":
        kv_heads, seq_share, q_heads = (kvh / tp if tp <= kvh else 1), 1.0, h / tp
        kv_weight_ranks = min(tp, kvh)
    elif lay.kv_shard_mode == "seq":
        kv_heads, seq_share, q_heads, kv_weight_ranks = kvh, 1 / tp, h, tp
    else:
        kv_heads, seq_share, q_heads, kv_weight_ranks = 1, kvh / tp, h / kvh, kvh
    # cache bytes per token of context on this rank: K and V of its KV heads, or MLA's
    # latent and RoPE key (kv_lora_rank + qk_rope_head_dim elements, held whole per head group)
    if model.is_mla:
        token_kv = seq_share * (model.kv_lora_rank + model.qk_rope_head_dim) * kvb
    else:
        token_kv = seq_share * kv_heads * (hd + vhd) * kvb
    kv_bytes = replica_batch * (cached / cp) * token_kv
    kv_held = seqs_replica * (cached / cp) * token_kv

    # attention weights: MLA's down-projections to the query and KV latents are replicated
    # on every TP rank, its per-head up-projections shard with Q and O
    if model.is_mla:
        kv_w = 0
        rep_w = d * (model.q_lora_rank + model.kv_lora_rank + model.qk_rope_head_dim)
    else:
        kv_w = d * kvh * (hd + vhd)
        rep_w = 0
    qo_w = model.attn_params_per_layer - kv_w - rep_w
    attn_weights = qo_w / tp + kv_w / kv_weight_ranks + rep_w

    ops = {}  # name -> (flops, bytes)
    ops["attn_linear"] = (
        2 * tokens_local * ((model.attn_params_per_layer - rep_w) / tp + rep_w),
        attn_weights * wb + tokens_local * d * ab * (2 + 2 / tp),
    )
    qo_traffic = tokens_local * q_heads * (qk + vd) * ab
    if decode:  # read the cache
        kv_traffic = kv_bytes
    elif model.is_mla:  # write the latent; K and V decompressed per head, written and read
        dec_token = seq_share * q_heads * (hd + vhd) * ab
        kv_traffic = (kv_bytes + replica_batch * (s_kv / cp) * dec_token
                      + replica_batch * dec_token * seq_pairs / s_q)
    else:  # write the cache, read the keys each query attends to
        kv_traffic = kv_bytes + replica_batch * token_kv * seq_pairs / s_q
    # the mixed prompt tokens write their K, V and attend to prefill_context earlier tokens
    kv_traffic += mixed * token_kv
    # FlashAttention / paged decode attention, at the 16-bit rate and its own factor; the
    # mixed prompt tokens attend in the decompressed form
    core_flops = (replica_batch * seq_pairs * 2 * (qk + vd)
                  + mixed * mixed_ctx * 2 * (hd + vhd)) * h / (tp * cp)
    ops["attn_core"] = (core_flops, kv_traffic + qo_traffic)
    wide = lay.ffn_shard_scope == "TP+CP" and cp > 1
    ffn_ranks = tp * cp if wide else tp
    ffn_tokens = tokens_replica if wide else tokens_local
    if model.n_experts > 1:
        p_idle = 1 - model.top_k / model.n_experts  # an expert no token routes to
        experts_read = model.n_experts * (1 - p_idle ** ffn_tokens)
    else:
        experts_read = 1
    router = model.ffn_params_per_layer - model.n_experts * model.expert_params
    ep = lay.ep
    if ep > 1:
        ranks_per_expert = tp * dp / ep
        routed = model.top_k * model.expert_params * 1.25  # busiest rank: capacity 1.25
        p_idle = 1 - model.top_k / model.n_experts
        mine = model.n_experts / ep * (1 - p_idle ** (tokens_local * dp))
        ops["ffn"] = (
            2 * tokens_local * (routed + router) / tp,
            (mine * model.expert_params / ranks_per_expert + router / tp) * wb
            + 2 * tokens_local * d * ab,
        )
    else:
        ops["ffn"] = (
            2 * ffn_tokens * model.ffn_active_params_per_layer / ffn_ranks,
            (experts_read * model.expert_params + router) / ffn_ranks * wb
            + 2 * ffn_tokens * d * ab,
        )
    head = (2 * replica_batch * d * model.vocab_size / tp,
            model.vocab_size * d * wb / tp + replica_batch * model.vocab_size / tp * 4)
    elementwise = 4 * tokens_local * d * ab  # residual adds and norms: hidden state r/w twice
    if model.n_experts > 1:  # token permutation per MoE layer
        rows = tokens_local / tp if ep > 1 else ffn_tokens  # EP: each TP rank's 1/tp slice
        elementwise += (moe_permute_elems(model.top_k) * d * ab * rows
                        * model.n_moe_layers / model.n_layers)

    def roofline(flops: float, nbytes: float, rate: float = peak) -> tuple[float, str]:
        return op_time(flops / rate, nbytes / hbm, efficiency.roofline_overlap)

    # communication of one layer (not overlapped)
    comm = 0.0
    links = [link[t] for t in TIERS]
    cube, sip = topology.pes_per_cube, topology.pes_per_sip
    msg = max(ab, 2)  # messages carry 16-bit GEMM outputs even when the GEMM inputs are 8-bit
    act = tokens_local * d * msg
    nvls = topology.nvls
    # a layer's kernels: 10 with two norms, one more or fewer per norm
    launches = 10 + (model.n_norms_per_layer - 2) + (4 if model.n_experts > 1 else 0)
    if tp > 1:
        comm += coll.allreduce_hier_ns(act, tp, strides["tp"], cube, sip, links, nvls)
        launches += 1
    if wide:
        span = max(coll.group_span(tp, strides["tp"]), coll.group_span(cp, strides["cp"]))
        comm += coll.allreduce_hier_ns(tokens_replica * d * msg, tp * cp, span / (tp * cp), cube,
                                       sip, links, nvls)
        launches += 1
        if not decode:
            comm += coll.allgather_ns(tokens_replica * d * msg, cp, *cp_link)
            launches += 1
    elif ep > 1:
        ep_span = max(coll.group_span(tp, strides["tp"]), coll.group_span(dp, strides["dp"]))
        ep_bw, ep_alpha = link[tier(ep_span)]
        # dispatch at the activation dtype, combine of the experts' 16-bit outputs
        sent = tokens_local / tp * model.top_k * d * (ab + msg) * (ep - 1) / ep
        comm += sent / ep_bw + 2 * coll.phase_steps(ep) * ep_alpha
        launches += 2
        if tp > 1:
            comm += ((tp - 1) / tp * act / tp_link[0]
                     + coll.phase_steps(tp) * tp_link[1])
            launches += 1
    elif tp > 1:
        comm += coll.allreduce_hier_ns(act, tp, strides["tp"], cube, sip, links, nvls)
        launches += 1
    if lay.kv_shard_mode == "seq" or lay.kv_shard_mode == "head_seq":
        group = tp if lay.kv_shard_mode == "seq" else tp // kvh
        g_link = link[tier(group * strides["tp"])]
        q_b = tokens_local * q_heads * qk * msg
        o_b = tokens_local * q_heads * (vd * msg + 8)
        launches += 2 if group > 1 else 0  # a one-rank split-K combine launches nothing
        # the kernel folds one all-gather + one all-reduce into 3(g-1) link latencies
        comm += coll.allgather_ns(q_b, group, *g_link) + coll.allreduce_ns(o_b, group, *g_link)

    ring = 0.0
    if cp > 1:
        if lay.cp_ring_variant == "kv":
            block = kv_bytes
        else:
            block = tokens_local * q_heads * ((qk + vd) * msg + 8)
        ring = (cp - 1) * coll.p2p_ns(block, *cp_link)

    times = {name: roofline(*fb, rate=attn_peak if name == "attn_core" else peak)
             for name, fb in ops.items()}
    t_core = times["attn_core"][0]
    u = efficiency.comm_contention  # compute a collective running under it takes
    exposed = ring if decode else max(u * ring, ring - t_core)

    layers_per_stage = math.ceil(model.n_layers / pp)
    micro = 1 if decode else replica_batch
    path_layers = model.n_layers if decode else layers_per_stage * (micro + pp - 1) / micro
    t_pp = (pp - 1) * coll.p2p_ns(tokens_local / micro * d * msg, *pp_link) if pp > 1 else 0.0

    t_head, head_kind = roofline(*head)
    layer_time = sum(t for t, _ in times.values()) + exposed + comm
    t_elem = elementwise / hbm
    # launches: per layer on the path, once per step (embedding, final norm, head,
    # sampling, pipeline sends) and the framework's floor (a quarter with CUDA graphs)
    floor = 0.25 if (decode and workload.cuda_graphs) else 1.0
    # each launch from the host costs 5 us more, unless decode replays a CUDA graph; a
    # served step admitting a prompt runs eagerly: prompts admitted per step (the mixed-in
    # prompt tokens over a prompt's length, twice the mean prefill context), at most 1
    host_launch = _HOST_LAUNCH_NS
    if decode and workload.cuda_graphs:
        mixed = 0.0
        if workload.prefill_tokens > 0 and workload.prefill_context > 0:
            mixed = min(workload.prefill_tokens / (2 * workload.prefill_context), 1.0)
        host_launch = _HOST_LAUNCH_NS * mixed
    overhead = ((path_layers * launches + 4 + 2 * (pp - 1))
                * (efficiency.op_latency_ns + host_launch)
                + floor * efficiency.step_overhead_ns)
    latency = path_layers * (layer_time + t_elem) + t_head + t_pp + overhead
    # the scheduler's cost per sequence of the replica runs on the host one step ahead
    # (overlap scheduling): the step takes the longer of the two
    host = seqs_replica * efficiency.seq_overhead_ns
    if host > latency:
        overhead += host - latency
        latency = host
    compute = path_layers * sum(t for t, kind in times.values() if kind == "compute")
    memory = path_layers * (sum(t for t, kind in times.values() if kind == "memory") + t_elem)
    compute += t_head if head_kind == "compute" else 0.0
    memory += t_head if head_kind == "memory" else 0.0
    comm_total = path_layers * (exposed + comm) + t_pp

    # memory per device
    ffn_weights = model.ffn_params_per_layer / ffn_ranks
    if ep > 1:
        ffn_weights = model.n_experts / ep * model.expert_params / (tp * dp / ep) + router / tp
    layer_bytes = (attn_weights + ffn_weights + model.norm_params_per_layer) * wb
    emb = (model.vocab_size * d * wb / tp) if pp > 1 else (
        model.vocab_size * d * (1 if model.tied_embeddings else 2) * wb / tp)
    ffn_act = model.d_ff * min(model.top_k, model.n_experts) / ffn_ranks
    act_bytes = tokens_local * (4 * d + 2 * ffn_act) * ab + replica_batch * model.vocab_size / tp * 4
    mem = layers_per_stage * (layer_bytes + kv_held) + emb + act_bytes

    produced = B if decode else B * s_q
    # reported FLOPs: no embedding gather; LM head only where logits are needed (B rows)
    per_token = model.n_active_params - model.embedding_params - d
    # attention in the decompressed form (the model's FLOPs, whatever the kernel computes)
    pair_flops = 2 * (hd + vhd) * h * model.n_layers
    flops = (2 * per_token * B * s_q + 2 * d * model.vocab_size * B
             + pair_flops * B * seq_pairs)
    if decode:
        flops += (2 * per_token * workload.prefill_tokens
                  + pair_flops * workload.prefill_tokens * mixed_ctx)
    seconds = latency / 1e9
    return dict(
        latency_ns=latency,
        throughput_tok_s=produced / seconds,
        flops_per_device=flops / (cp * tp * pp * dp) / seconds,
        compute_ns=compute,
        memory_ns=memory,
        comm_ns=comm_total,
        overhead_ns=overhead,
        fits=mem <= hardware.pe_hbm_gb * 1e9 * efficiency.hbm_usable,
        valid=True,
        mem_bytes=mem,
        mem_weights_bytes=layers_per_stage * layer_bytes + emb,
        mem_kv_bytes=layers_per_stage * kv_held,
        mem_act_bytes=act_bytes,
    )
