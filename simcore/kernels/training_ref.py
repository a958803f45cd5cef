"""Plain-python reference twin of :mod:`simcore.kernels.training` (the test oracle).

Straight from the specs (``Model``, ``Workload``, ``Topology``, ``Layout``), no packing.
Each physics piece shares its name and argument order with the kernel piece it mirrors
(the specs in place of the packed bundles; the table is
``simcore.kernels.twin_table_training.TRAINING_TWINS``): the roofline pieces return
(FLOPs, HBM bytes), the memory pieces bytes, and a collective that the kernel adds to a
per-tier accumulator (wire bytes per tier, link latency) returns its time in ns over
``links``, the (GB/s, alpha ns) of each tier. :func:`evaluate_point` sums the pieces by
name into a step time with the rules the kernels' shared hardware combine applies.
"""

from __future__ import annotations

import math

from . import collectives_ref as coll
from .common_ref import (
    Layout,
    attention_kernel_rate,
    busiest_share,
    keys_in_window,
    moe_permute_elems,
    op_time,
    placement,
    tier_alpha_ns,
    tier_base_ns,
)
from .schema import hbm_factor

ADAM_BYTES_PER_PARAM = 26.0
#: The loss's logit buffers at its peak, bytes per logit element (fused; eager fp32).
FUSED_LOSS_BYTES, EAGER_LOSS_BYTES = 4.0, 12.0
#: DeepSpeed's model-state bytes per parameter, ``{width: {stage: (kept whole,
#: partitioned over G)}}``; at ZeRO-3 the whole part is the gathered largest layer's.
#: 16-bit (fp16, bf16, fp8) is DeepSpeed's estimators' formula; fp32 the same counting
#: (FSDP's at every precision: no 16-bit copy, the gathered layer at compute width).
ZERO_BYTES = {"16-bit": {0: (20, 0), 1: (4, 16), 2: (2, 18), 3: (4, 18)},
              "fp32": {0: (16, 0), 1: (8, 8), 2: (4, 12), 3: (8, 16)}}

__all__ = ["Layout", "evaluate_point"]


def _kv_heads(model) -> int:
    """K/V heads of training attention: MLA trains in the decompressed form, one K and V
    head per query head (the latent is an activation, not a cache)."""
    return model.n_heads if model.is_mla else model.n_kv_heads


def _attn_split(model) -> tuple[float, float]:
    """(K and V weights sharded by KV head, weights every TP rank holds whole) of one
    layer: MLA's down-projections to the query and KV latents are duplicated on every TP
    rank (Megatron-Core), its per-head up-projections shard with Q and O."""
    d = model.d_model
    if model.is_mla:
        return 0, d * (model.q_lora_rank + model.kv_lora_rank + model.qk_rope_head_dim)
    return d * _kv_heads(model) * (model.head_dim + model.value_head_dim), 0


# --- the layout and its groups ----------------------------------------------------------------
def layout_valid(lay: Layout, model, workload, topology) -> bool:
    """The layout fits the system and divides heads, layers, tokens and the batch."""
    if lay.cp * lay.tp * lay.pp * lay.dp > topology.n_devices:
        return False
    if model.n_heads % lay.tp or lay.pp > model.n_layers or lay.cp > workload.s_kv:
        return False
    if lay.kv_shard_mode != "head" or workload.batch % (lay.dp * workload.micro_batch):
        return False
    kvh = _kv_heads(model)
    return (kvh % lay.tp == 0) if lay.tp <= kvh else (lay.tp % kvh == 0)


def _per_cube(g: int, stride: int, cube: int) -> int:
    return 1 if stride >= cube else max(1, min(g, cube // stride))


def gradient_group(lay: Layout, strides, tier_dp: int, tier_cp: int, cube: int):
    """(members, members per cube, tier) of the DP x CP group (gradients, ZeRO shards)."""
    k = min(cube, _per_cube(lay.dp, strides[3], cube) * _per_cube(lay.cp, strides[1], cube))
    return lay.dp * lay.cp, k, max(tier_dp, tier_cp) if lay.cp > 1 else tier_dp


def ep_dispatch_copies(n_experts: int, top_k: int, ep: int, k_ep: int,
                       round_robin: bool) -> tuple[float, float]:
    """Mean (ranks, nodes) one token's routed experts live on: experts contiguous over the
    ep ranks, ``per_node`` EP ranks per node. Random: k distinct experts uniformly
    (inclusion-exclusion over one group's experts); round robin: token i takes experts
    i·k … i·k + k − 1 mod E (Automodel's FakeBalancedGate), averaged over the start
    offsets the tokens cycle through, by listing each token's ranks and nodes."""
    E, k = int(n_experts), int(top_k)
    if E < ep or ep <= 1:  # not a valid EP layout (masked)
        return 1.0, 1.0
    n_nodes = max(round(ep / k_ep), 1)
    if not round_robin:
        def reach(groups: int) -> float:
            return groups * (1 - math.comb(E - E // groups, k) / math.comb(E, k))
        return reach(int(ep)), reach(n_nodes)
    starts = [(i * k) % E for i in range(E)]
    ranks = [expert_blocks_spanned(o, k, E, E // int(ep)) for o in starts]
    nodes = [expert_blocks_spanned(o, k, E, E // n_nodes) for o in starts]
    return sum(ranks) / len(starts), sum(nodes) / len(starts)


def expert_blocks_spanned(start: int, k: int, n_experts: int, per: int) -> float:
    """Groups of ``per`` consecutive experts that experts start … start + k − 1 (mod E)
    fall in, by listing them."""
    return float(len({((start + j) % n_experts) // per for j in range(k)}))


def expert_subgroup(skip: int, n: int, tp: int, cp: int, dp: int, strides, cube: int):
    """(ok, span, members per cube) of n devices taken innermost dim first after the
    ``skip`` innermost ones (Megatron's expert order: expert TP, EP, expert DP): each dim
    is split into (held by inner groups, taken, left) factors, which must divide it."""
    dims = sorted(((size, st) for size, st in ((tp, strides[0]), (cp, strides[1]),
                                               (dp, strides[3])) if size > 1),
                  key=lambda x: x[1])
    parts = []
    for size, st in dims:
        inner = math.gcd(size, skip)  # the inner groups' share of this dim
        if skip % size and size % skip:
            return False, None, None
        skip //= inner
        avail = size // inner
        take = math.gcd(avail, n)
        if (n % avail if n >= avail else avail % n) and n > 1:
            return False, None, None
        n //= take
        if take > 1:
            parts.append((take, inner * st))
    if n != 1:
        return False, None, None
    span = max((take * st for take, st in parts), default=1)
    return True, span, min(math.prod(_per_cube(t, st, cube) for t, st in parts), cube)


def expert_groups(lay: Layout, model, workload, strides, topology):
    """(valid, EDP members, EP members per cube, EP tier, EDP members per cube, EDP
    tier, expert-TP members per cube, expert-TP tier) of expert parallelism (MoE only,
    ep | experts, expert_tp·ep | tp·cp·dp, the FFN by TP only, sequence parallelism with
    TP): the devices fold into expert TP x EP x expert DP, innermost first."""
    cube = topology.pes_per_cube
    etp = workload.expert_tp
    devs = lay.tp * lay.cp * lay.dp
    groups = [expert_subgroup(skip, n, lay.tp, lay.cp, lay.dp, strides, cube)
              for skip, n in ((1, etp), (etp, lay.ep),
                              (etp * lay.ep, max(devs // (etp * lay.ep), 1)))]
    ok = devs % (etp * lay.ep) == 0 and all(g[0] for g in groups)
    (_, etp_span, k_etp), (_, ep_span, k_ep), (_, edp_span, k_edp) = groups
    valid = (ok and model.n_experts > 1 and model.n_experts % lay.ep == 0
             and not (lay.ffn_shard_scope == "TP+CP" and lay.cp > 1)
             and (workload.sequence_parallel or lay.tp == 1))
    if not ok:
        return valid, None, None, None, None, None, None, None
    tier = coll.tier_of
    return (valid, devs / (lay.ep * etp), k_ep,
            tier(ep_span, cube, topology.pes_per_sip), k_edp,
            tier(edp_span, cube, topology.pes_per_sip), k_etp,
            tier(etp_span, cube, topology.pes_per_sip))


def work_per_device(lay: Layout, workload):
    """(micro-batches per step, tokens per micro-batch, residual-stream tokens, FFN
    tokens, FFN ranks, FFN over TP x CP) of one device."""
    mb, s = workload.micro_batch, workload.s_kv
    tokens = mb * s / lay.cp
    residual = tokens / lay.tp if workload.sequence_parallel else tokens
    wide = lay.ffn_shard_scope == "TP+CP" and lay.cp > 1
    return (workload.batch / (lay.dp * mb), tokens, residual, mb * s if wide else tokens,
            lay.tp * lay.cp if wide else lay.tp, wide)


# --- how often each op runs ---------------------------------------------------------------
def recompute_passes(model, workload):
    """(linear, attention projections, FFN, element-wise, attention core passes, TP
    collectives per sub-block) per micro-batch under the recompute policy."""
    rc = workload.recompute
    lin = 4.0 if rc == "full" else 3.0
    attn = ffn = elem = lin
    if rc == "op":  # every second matmul of a layer recomputed in backward
        attn = 3.5  # K and O of Q, K, V, O
        ffn = 3 + (1 / 3 if model.gated_ffn else 1 / 2)
        elem = 4  # every element-wise op recomputed
    if workload.attention in ("flash", "flash2"):
        core = 4.5 if rc == "full" else 3.5
    else:
        core = 3 if rc == "none" else 4
    per_block = 3 if rc == "full" else (2.5 if rc == "op" else 2)
    return lin, attn, ffn, elem, core, per_block


def attention_pairs(model, s: int) -> tuple[float, float]:
    """(causal share of the s² pairs, layer-averaged pairs over full causal): local
    (sliding-window) layers see at most ``sliding_window`` keys."""
    full = s * (s + 1) / 2
    pairs = full
    if model.n_local_layers:
        n_loc = model.n_local_layers
        pairs = ((model.n_layers - n_loc) * full
                 + n_loc * keys_in_window(1, s, model.sliding_window)) / model.n_layers
    return full / (s * s), pairs / full


# --- per layer and micro-batch: roofline ops ----------------------------------------------
def kv_heads_per_rank(model, tp: float) -> float:
    kvh = _kv_heads(model)
    return kvh / tp if tp <= kvh else 1


def attention_weights(model, tp: float) -> float:
    kv_w, rep_w = _attn_split(model)
    return ((model.attn_params_per_layer - kv_w - rep_w) / tp + kv_w / min(tp, _kv_heads(model))
            + rep_w)


def attention_projections(model, tokens: float, tp: float, bw: float, passes: float):
    _, rep_w = _attn_split(model)
    return (passes * 2 * tokens * ((model.attn_params_per_layer - rep_w) / tp + rep_w),
            passes * (attention_weights(model, tp) * bw + tokens * model.d_model * bw
                      * (2 + 2 / tp)))


def kv_block_bytes(model, mb: float, s: float, cp: float, tp: float, bw: float) -> float:
    return mb * (s / cp) * kv_heads_per_rank(model, tp) * (model.head_dim
                                                           + model.value_head_dim) * bw


def attention_core(model, workload, cp: float, tp: float, bw: float, passes: float,
                   causal: float, pair_frac: float):
    """Scores (head_dim) and values (v_head_dim) per pair and head; K and V read for the
    keys each query attends to. An unfused core computes every (query, key) score and
    masks in the softmax; its score matrix is written (QK^T), read + written (softmax)
    and read (AV) per pass."""
    mb, s, h = workload.micro_batch, workload.s_kv, model.n_heads
    width = model.head_dim + model.value_head_dim
    flash = workload.attention in ("flash", "flash2")
    pairs = s * s * causal * pair_frac if flash else s * s
    scores = 0.0 if flash else 4 * bw * mb * (h / tp) * (s / cp) * s
    return (passes * 2 * mb * pairs * width * h / (tp * cp),
            passes * (kv_block_bytes(model, mb, s, cp, tp, bw)
                      + mb * kv_heads_per_rank(model, tp) * width * bw * pairs / s
                      + mb * (s / cp) * (h / tp) * width * bw + scores))


def ffn_gemms(model, tokens: float, ffn_tokens: float, shard: float, tp: float, ep: float,
              etp: float, imbalance: float, bw: float, passes: float):
    """Weights read per pass: with EP the rank's local expert shards (1/etp of those its
    expert-TP group's etp·T·k/tp routed copies touch), the rest (router, shared, dense) by
    TP; the busiest EP rank computes ``imbalance`` x the mean routed copies."""
    router = model.ffn_params_per_layer - model.n_experts * model.expert_params
    flops = passes * 2 * ffn_tokens * model.ffn_active_params_per_layer / shard
    if ep > 1:
        routed_per_token = model.n_moe_layers / model.n_layers * model.top_k * model.expert_params
        flops += passes * 2 * ffn_tokens * routed_per_token * (imbalance - 1) / shard
        local = min(model.n_experts / ep, etp * tokens * model.top_k / tp)
        read = local * model.expert_params / etp + router / tp
    else:
        experts = (min(model.n_experts, ffn_tokens * model.top_k) if model.n_experts > 1
                   else 1)
        read = (experts * model.expert_params + router) / shard
    return flops, passes * (read * bw + 2 * ffn_tokens * model.d_model * bw)


def lm_head(model, m: float, tokens: float, tp: float, bw: float):
    v, d = model.vocab_size, model.d_model
    return (m * 3 * 2 * tokens * d * v / tp, m * (3 * v * d * bw / tp + 2 * tokens * v / tp * 4))


def elementwise_bytes(model, tokens, tok_res, ffn_tokens, shard, tp, bw, passes) -> float:
    """Norms + residual adds on the (``tok_res`` tokens of the) residual stream, RoPE on Q
    and K, the activation."""
    d = model.d_model
    return passes * bw * (tok_res * (2 * 2 * d + 2 * 3 * d)
                          + tokens * 2 * (model.n_heads / tp + kv_heads_per_rank(model, tp))
                          * model.head_dim
                          + ffn_tokens * model.ffn_active_params_per_layer / d / shard)


def eager_elementwise_bytes(model, tokens, tok_res, ffn_tokens, shard, tp, passes) -> float:
    """PyTorch eager (torchtitan's Llama without torch.compile): per element, an RMSNorm
    36 bytes against 4 fused (two per layer), RoPE on Q and K 20 against 4, the SwiGLU
    product 10 against 6 per FFN element."""
    d = model.d_model
    ffn = ffn_tokens * model.ffn_active_params_per_layer / d / shard
    return passes * (tok_res * 2 * 32 * d
                     + tokens * (model.n_heads / tp + kv_heads_per_rank(model, tp))
                     * model.head_dim * 16 + (ffn / 3 * 4 if model.gated_ffn else 0.0))


def moe_permutes(model, rows: float, bw: float, passes: float) -> float:
    return (passes * moe_permute_elems(model.top_k) * model.d_model * bw * rows
            * model.n_moe_layers / model.n_layers)


def fp8_cast_bytes(model, tokens, tok_res, ffn_tokens, tp, shard, ep_div, bw,
                   fwd_passes) -> float:
    """Transformer Engine casts each GEMM's activation operand in every forward pass and
    its output gradient once in the backward: read 16 bits, write FP8 + its transpose
    (only the writes where the cast is fused into the preceding norm)."""
    d = model.d_model
    kv_w, rep_w = _attn_split(model)
    moe_share = model.n_moe_layers / model.n_layers
    copies = model.top_k if moe_share else 1
    query = (model.attn_params_per_layer - kv_w - rep_w) / 2 / d / tp  # O input width
    width = model.ffn_active_params_per_layer / ((3 if model.gated_ffn else 2) * d)
    fc2_in = ffn_tokens * width / shard
    routed = ffn_tokens * moe_share * copies / ep_div
    dense_rows = ffn_tokens * (1 - moe_share)
    norm_fused = tok_res * d + tok_res * d * (1 - moe_share)
    act_in = tokens * query + routed * d + fc2_in
    grad_out = (tokens * (query + kv_w / d / tp) + tokens * d
                + (2 if model.gated_ffn else 1) * fc2_in + (routed + dense_rows) * d)
    return fwd_passes * (2 * norm_fused + (bw + 2) * act_in) + (bw + 2) * grad_out


# --- per layer and micro-batch: collectives (ns over ``links``) -----------------------------
def group_collective(links, nbytes, g, k, tier, topology, allreduce, count, in_switch) -> float:
    """``count`` collectives: a ring inside a cube, hierarchical across cubes (k members
    per cube) at NCCL's latencies; a true all-reduce (``in_switch``) inside a cube whose
    switch reduces runs at NVLS's measured bandwidth (``coll.in_switch_factor``); an
    all-reduce that is not one (``allreduce`` without ``in_switch``: sequence
    parallelism) is a reduce-scatter and an all-gather, two collectives."""
    if g <= 1 or count == 0:
        return 0.0
    if tier == 0:
        if allreduce and in_switch and topology.nvls:
            bw0, a0 = links[0]
            wire = coll.in_switch_factor(2 * (g - 1) / g, nbytes)
            return count * (wire * nbytes / bw0 + 2 * (g - 1) * a0)
        f = coll.allreduce_ns if allreduce else coll.allgather_ns
        return count * f(nbytes, g, *links[0])
    cube = topology.pes_per_cube

    def one(both_phases: bool) -> float:
        return coll.hier_collective_ns(nbytes, g, k, cube, topology.nics_per_cube or cube,
                                       links[0], links[tier], both_phases,
                                       topology.coll_base_scaleout_ns,
                                       topology.alpha_intra_scaleout_ns)

    if allreduce and not in_switch:
        return count * 2 * one(False)
    return count * one(allreduce)


def tp_collectives(links, act, tp, k_tp, tier_tp, topology, count, sp) -> float:
    """TP all-reduces, or sequence parallelism's reduce-scatter + all-gather pairs."""
    return group_collective(links, act, tp, k_tp, tier_tp, topology, True, count, not sp)


def tp_cp_ffn_collectives(links, model, mb, s, tp, cp, tier_tpcp, tier_cp, topology,
                          count) -> float:
    """The FFN over TP x CP: all-reduces over TP x CP, all-gathers over CP."""
    full_act = mb * s * model.d_model * model.bytes_per_param
    if tier_tpcp == 0:  # inside the cube: the ring, or in the switch
        t = group_collective(links, full_act, tp * cp, tp * cp, 0, topology, True, 1, True)
    else:  # a ring across cubes, with the base latency of an operation that leaves the cube
        t = coll.allreduce_ns(full_act, tp * cp, *links[tier_tpcp]) + tier_base_ns(topology,
                                                                                  tier_tpcp)
    gather = coll.allgather_ns(full_act, cp, *links[tier_cp]) + tier_base_ns(topology, tier_cp)
    return count * (t + gather)


def tp_ffn_share(model, ep) -> float:
    """Layers whose FFN runs TP-sharded: with EP (expert TP 1) dense and shared-expert ones."""
    if ep <= 1:
        return 1.0
    return (model.n_layers - (0 if model.n_shared_experts else model.n_moe_layers)) / model.n_layers


def moe_alltoalls_per_layer(model, workload) -> float:
    return (6 if workload.recompute == "full" else 4) * model.n_moe_layers / model.n_layers


def moe_alltoall(links, model, workload, topology, tokens, tp, ep, k_ep, tier_ep,
                 count) -> float:
    """DeepEP (per rank): a token crosses the scale-out tier once per remote node it
    routes to and is forwarded inside each node once per rank; Megatron's alltoall
    dispatcher: one copy per routed expert."""
    cube = topology.pes_per_cube
    nics = topology.nics_per_cube or cube
    # the busiest rank's rows (moe_load_imbalance x the mean)
    row = tokens / tp * model.d_model * model.bytes_per_param * busiest_share(model, workload, ep)
    # across cubes: NCCL's base latency once, its NVLink latency per in-cube peer
    scaleout = (None if tier_ep == 0 else
                (topology.coll_base_scaleout_ns, topology.alpha_intra_scaleout_ns))
    if workload.moe_dispatch == "per_rank":
        ranks, nodes = ep_dispatch_copies(model.n_experts, model.top_k, ep, k_ep,
                                          workload.moe_routing == "round_robin")
        t = coll.node_dedup_alltoall_ns(row, ep, k_ep, cube, nics, ranks, nodes, links[0],
                                        links[tier_ep], scaleout)
    else:
        t = coll.alltoall_ns(row * model.top_k, ep, k_ep, cube, nics, links[0], links[tier_ep],
                             scaleout)
    return count * t


def expert_tp_relayout(links, model, workload, topology, tokens, tp, ep, etp, k_etp, tier_etp,
                       count) -> float:
    """Expert TP > 1 (Megatron-Core's alltoall dispatcher): ``count`` all-gathers (after a
    dispatch) or reduce-scatters (before a combine) over the expert-TP group of the token
    copies a rank received: its tokens / tp, k each, x the busiest rank's imbalance."""
    if etp <= 1 or count == 0:
        return 0.0
    received = (tokens / tp * model.top_k * busiest_share(model, workload, ep) * model.d_model
                * model.bytes_per_param)
    return group_collective(links, etp * received, etp, k_etp, tier_etp, topology, False,
                            count, False)


def zero3_param_gathers(links, params, g, k, tier, topology, workload, pw) -> float:
    n = 3 if workload.recompute == "full" else 2
    return group_collective(links, params * pw, g, k, tier, topology, False, n, False)


def cp_ring(lay: Layout, model, workload, tp, bw, topology, tier_cp):
    """(bytes, link latency ns) of the ring; it reruns with the attention core: full
    recompute, or an unfused core that selective or per-op checkpointing recomputes."""
    cp = lay.cp
    if cp <= 1:
        return 0.0, 0.0
    mb, s, rc = workload.micro_batch, workload.s_kv, workload.recompute
    if lay.cp_ring_variant == "kv":
        block = kv_block_bytes(model, mb, s, cp, tp, bw)
    else:
        block = mb * (s / cp) * (model.n_heads / tp) * ((model.head_dim + model.value_head_dim)
                                                        * bw + 8)
    flash = workload.attention in ("flash", "flash2")
    n = (4 if (rc == "full" or (rc != "none" and not flash)) else 3) * (cp - 1)
    return n * block, n * (tier_alpha_ns(topology, tier_cp) + tier_base_ns(topology, tier_cp))


def kernels_per_layer(model, p_elem, n_half, n_a2a, tp, ep, etp) -> float:
    moe_share = model.n_moe_layers / model.n_layers if model.n_experts > 1 else 0.0
    n = p_elem * (10 + (model.n_norms_per_layer - 2) + 4 * moe_share)
    a2a = (n_a2a * (2 if etp > 1 else 1)) if ep > 1 else 0  # + expert-TP gathers
    return n + (2 * n_half if tp > 1 else 0) + a2a


# --- the pipeline ---------------------------------------------------------------------------
def pipeline_schedule(model, pp, m, vs):
    """(layers per stage, micro-batch slots with the interleaved bubble, layer slots)."""
    per_stage = math.ceil(model.n_layers / pp)
    per_slot = m + (pp - 1) / vs
    return per_stage, per_slot, per_stage * per_slot


def pipeline_p2p(act, tp, pp, vs, m, topology, tier_pp):
    """Megatron scatter/gather: a pipeline send carries 1/TP of the activation."""
    if pp <= 1:
        return 0.0, 0.0
    n = 2 * (vs * m + pp - 2)
    return n * act / tp, n * (tier_alpha_ns(topology, tier_pp) + tier_base_ns(topology, tier_pp))


# --- once per step: gradients and the optimizer ----------------------------------------------
def grad_reduce(links, params, g, k, tier, zs, m, gb, pw, topology):
    """(gradient reduction, parameter all-gather after the step) of ``params``, in ns."""
    def over(nbytes, allreduce):
        return group_collective(links, nbytes, g, k, tier, topology, allreduce, 1, allreduce)

    grads = params * gb
    if zs >= 2:  # reduce-scatter after every micro-batch
        return m * over(grads, False), over(params * pw, False) if zs == 2 else 0.0
    if zs == 1:
        return over(grads, False), over(params * pw, False)
    return over(grads, True), 0.0


def grad_reduce_overlap(workload, p_ffn, m, slots) -> float:
    """Share of the layer slots' compute an overlapped gradient reduction hides under."""
    if not workload.grad_overlap:
        return 0.0
    return 2 / p_ffn * (m if workload.zero_stage >= 2 else 1) / slots


def layer_params(model, tp, ep, etp, shard):
    """(dense, local routed experts: E/ep experts, 1/etp of each) parameters of one layer
    on a device."""
    if ep > 1:
        router = model.ffn_params_per_layer - model.n_experts * model.expert_params
        return (attention_weights(model, tp) + router / tp + model.norm_params_per_layer,
                model.n_experts / ep * model.expert_params / etp)
    return (attention_weights(model, tp) + model.ffn_params_per_layer / shard
            + model.norm_params_per_layer, 0.0)


def stage_params(model, layer_dense, layer_exp, lps, tp, pp):
    emb = model.vocab_size * model.d_model / tp if pp > 1 else model.embedding_params / tp
    return lps * layer_dense + emb, lps * layer_exp


def optimizer_step(workload, p_dev, p_dense, p_exp, g_sh, g_edp, use_ep):
    """(parameters the device updates, HBM bytes of the Adam step; 0 on the host)."""
    opt_share = (p_dense / g_sh + p_exp / g_edp) if workload.zero_stage >= 1 else p_dev
    return opt_share, 0.0 if workload.offload != "none" else opt_share * (ADAM_BYTES_PER_PARAM
                                                              + workload.grad_bytes)


# --- memory per device ----------------------------------------------------------------------
def zero_state_bytes(stage: int, sixteen_bit: bool, fsdp: bool) -> tuple[float, float]:
    whole, part = ZERO_BYTES["16-bit" if sixteen_bit and not fsdp else "fp32"][stage]
    if stage == 3 and fsdp and sixteen_bit:
        whole = 4  # FSDP gathers the layer's 16-bit parameters and gradients
    return whole, part


def model_states(workload, p_dense, p_exp, p_dev, largest, g_sh, g_edp, pw, use_ep) -> float:
    zs = workload.zero_stage
    if workload.framework == "megatron":
        # parameters + gradients whole, fp32 master weights + Adam (12 B) over the group
        gb = workload.grad_bytes
        return sum((pw + gb + (12 if zs == 0 else 12 / g)) * p
                   for p, g in ((p_dense, g_sh), (p_exp, g_edp)))
    whole, part = zero_state_bytes(zs, workload.precision != "fp32",
                                   workload.framework == "fsdp")
    # DeepSpeed: ZeRO-3 keeps only the fully gathered largest layer whole
    return (whole * (largest if zs == 3 else p_dev) + part * p_dense / g_sh
            + part * p_exp / g_edp)


def zero_offload(workload, p_dev, p_dense, p_exp, largest, g_sh, g_edp, opt_share, bw,
                 p_lin, m, topology, use_ep):
    """(device state bytes, host bytes, PCIe ns per step) with ZeRO-Offload / -Infinity."""
    zs = workload.zero_stage
    on_gpu = p_dense / g_sh + p_exp / g_edp if zs == 3 else p_dev
    states = 2 * on_gpu + (4 * largest if zs == 3 else 0)
    host = 14 * opt_share  # fp32 master, Adam m and v, 16-bit gradients
    t_host = opt_share * (2 + bw) / topology.pcie_gbs
    if workload.offload == "optimizer+params":
        states = 4 * largest
        host += 2 * on_gpu
        t_host += p_lin * m * on_gpu * bw / topology.pcie_gbs
    return states, host, t_host


def activation_bytes_per_layer(seq: float, mb: int, d: int, heads: int, tp: int,
                               recompute: str, sp: bool,
                               fp8_saved: bool = False, flash: bool = True) -> float:
    """Korthikanti et al. 2022, Table 2, bytes for one layer and mb-batch; with
    ``fp8_saved`` (Transformer Engine) every GEMM input is kept as a 1-byte FP8 copy:
    QKV and FC1 (10 → 8 outside the TP shards), FC2 and the output projection (24 → 21
    inside them with a flash core, which also keeps the 16-bit attention output for its
    backward; 24 → 19 unfused)."""
    sbh = seq * mb * d
    if recompute == "full":
        return 2 * sbh / (tp if sp else 1)
    attn_scores = 5 * heads * seq / d
    outside, inside = (8, 21 if flash else 19) if fp8_saved else (10, 24)
    if sp:
        per = (outside + inside) / tp
    else:
        per = outside + inside / tp
    if recompute != "selective":
        per += attn_scores / tp
    return sbh * per


def op_sac_bytes_per_layer(seq, mb, d, kv_width, ffn_width, gated, tp, sp) -> float:
    """torchtitan's per-op selective checkpointing, bytes for one layer and mb-batch:
    the layer input, the outputs of Q, V, attention, the first FFN matmul and (gated FFN)
    the down projection's partial sums; under TP the two reduce-scattered outputs."""
    width = d / (tp if sp else 1) + 2 * d / tp + kv_width + ffn_width
    if gated:
        width += d
    if tp > 1:
        width += 2 * d / tp
    return 2 * seq * mb * width


def activation_memory(model, workload, cp, tp, pp, m, lps) -> float:
    """The first stage's in-flight micro-batches of activations (+ the recomputed layer)."""
    rc, sp, v = workload.recompute, workload.sequence_parallel, workload.virtual_stages
    flash = workload.attention in ("flash", "flash2")
    fp8_saved = workload.act_dtype == "fp8"
    s, mb, d, h = workload.s_kv / cp, workload.micro_batch, model.d_model, model.n_heads
    if rc == "op":
        width = model.ffn_active_params_per_layer / ((3 if model.gated_ffn else 2) * d)
        layer = op_sac_bytes_per_layer(s, mb, d, kv_heads_per_rank(model, tp) * model.head_dim,
                                       width / tp, model.gated_ffn, tp, sp)
    else:  # flash attention keeps no s^2 scores
        kind = "selective" if (flash and rc == "none") else rc
        layer = activation_bytes_per_layer(s, mb, d, h, tp, kind, sp, fp8_saved, flash)
    in_flight = min(pp, m)
    if v > 1 and pp > 1:
        in_flight *= 1 + (pp - 1) / (pp * v)
    mem = lps * in_flight * layer
    if rc == "full":
        mem += activation_bytes_per_layer(s, mb, d, h, tp, "selective" if flash else "none",
                                          sp, fp8_saved, flash)
    return mem


def logit_bytes(model, workload, tokens, tp) -> float:
    """fp32 softmax kept by a fused loss; eager cross_entropy(logits.float()) at its
    backward: fp32 log-softmax + the fp32 gradients of its output and input."""
    return tokens * model.vocab_size / tp * (EAGER_LOSS_BYTES if workload.eager_loss
                                             else FUSED_LOSS_BYTES)


# --- rates and the step's model FLOPs --------------------------------------------------------
def matmul_rates(workload, topology):
    """FLOP multipliers (projections and FFN, attention core, LM head) against the
    16-bit peak of each op's efficiency factor: TF32 at half the rate, Transformer
    Engine's fp8 GEMMs at ``fp8_ratio``, GEMMs at the family's ``mm_ratio``, an FA2-class
    core at ``fa2_ratio``, an unfused core's batched GEMMs at the matmul rate."""
    slow = 2 if workload.precision == "fp32" else 1
    gemm = slow
    if workload.precision == "fp8" and topology.fp8_ratio > 0:
        gemm = 1 / topology.fp8_ratio
    if workload.attention == "unfused":
        core = slow / topology.mm_ratio
    else:
        core = slow / attention_kernel_rate(workload, topology)
    return gemm / topology.mm_ratio, core, slow / topology.mm_ratio


def model_flops(model, workload, causal, pair_frac) -> float:
    """6 N per token over the matmul weights + causal (windowed) attention, whole system."""
    B, s = workload.batch, workload.s_kv
    matmul = model.n_active_params - model.embedding_params + model.vocab_size * model.d_model
    pairs = s * s * causal * pair_frac
    return (6 * matmul * B * s
            + 6 * model.n_layers * B * pairs * (model.head_dim + model.value_head_dim)
            * model.n_heads)


# --- the step: the pieces summed by name ------------------------------------------------------
def _links(hardware, topology, efficiency) -> list[tuple[float, float]]:
    """(GB/s at the network efficiency, alpha ns) of the intra, inter and inter-SiP tiers."""
    net = efficiency.network
    inter = net if efficiency.network_inter is None else efficiency.network_inter
    nets = (net, inter, inter if efficiency.network_sip is None else efficiency.network_sip)
    bws = (hardware.bw_intra_gbs, hardware.bw_inter_gbs, hardware.bw_intersip_gbs)
    return [(bws[t] * nets[t], tier_alpha_ns(topology, t)) for t in range(3)]


def _layer_ops(model, workload, topology, lay: Layout):
    """``({op: (FLOPs at its rate, HBM bytes)}, LM head, element-wise bytes)``."""
    cp, tp, ep = lay.cp, lay.tp, lay.ep
    wb = model.bytes_per_param
    m, tokens, residual, ffn_tokens, ffn_ranks, _ = work_per_device(lay, workload)
    lin, attn, ffn, elem, core, _ = recompute_passes(model, workload)
    causal, pair_frac = attention_pairs(model, workload.s_kv)
    gemm, core_rate, head_rate = matmul_rates(workload, topology)

    def scaled(rate, op):
        return rate * op[0], op[1]

    ops = {"attn_linear": scaled(gemm, attention_projections(model, tokens, tp, wb, attn)),
           "attn_core": scaled(core_rate, attention_core(model, workload, cp, tp, wb, core,
                                                         causal, pair_frac)),
           "ffn": scaled(gemm, ffn_gemms(model, tokens, ffn_tokens, ffn_ranks, tp, ep,
                                         workload.expert_tp, busiest_share(model, workload, ep),
                                         wb, ffn))}
    head = scaled(head_rate, lm_head(model, m, tokens, tp, wb))
    ep_div = tp if ep > 1 else 1  # a rank handles its sequence-parallel 1/tp slice
    b_elem = elementwise_bytes(model, tokens, residual, ffn_tokens, ffn_ranks, tp, wb, elem)
    if workload.eager_elementwise:
        b_elem += eager_elementwise_bytes(model, tokens, residual, ffn_tokens, ffn_ranks, tp,
                                          elem)
    if model.n_experts > 1:  # token permutation per MoE layer and pass
        b_elem += moe_permutes(model, ffn_tokens / ep_div, wb, ffn)
    if workload.precision == "fp8":
        b_elem += fp8_cast_bytes(model, tokens, residual, ffn_tokens, tp, ffn_ranks, ep_div,
                                 wb, lin - 2)
    return ops, head, b_elem


def evaluate_point(model, workload, hardware, topology, efficiency, lay: Layout) -> dict:
    """Step time, fit and breakdown of one training (hardware, layout) point."""
    nan = float("nan")
    invalid = dict(latency_ns=nan, throughput_tok_s=nan, flops_per_device=nan, compute_ns=nan,
                   memory_ns=nan, comm_ns=nan, overhead_ns=nan, compute_alone_ns=nan,
                   memory_alone_ns=nan, fits=False, valid=False,
                   mem_bytes=None)
    if not layout_valid(lay, model, workload, topology):
        return invalid
    cp, tp, pp, ep = lay.cp, lay.tp, lay.pp, lay.ep
    wb, zs = model.bytes_per_param, workload.zero_stage
    pw = 1 if workload.weight_dtype == "fp8" else wb  # FP8 primary weights: 1-byte copies
    cube = topology.pes_per_cube
    links = _links(hardware, topology, efficiency)
    strides, t_tp, t_cp, t_pp, t_dp, t_tpcp = placement(lay, topology)
    g_sh, k_sh, t_sh = gradient_group(lay, strides, t_dp, t_cp, cube)
    etp = workload.expert_tp
    g_edp, k_ep, t_ep, k_edp, t_edp, k_etp, t_etp = 1, 1, 0, 1, 0, 1, 0
    if ep > 1:
        ok, g_edp, k_ep, t_ep, k_edp, t_edp, k_etp, t_etp = expert_groups(
            lay, model, workload, strides, topology)
        if not ok:
            return invalid
    elif etp not in (1, tp):  # experts over TP as a dense FFN: expert TP 1 or TP
        return invalid
    m, tokens, _, _, ffn_ranks, wide = work_per_device(lay, workload)
    lin, _, ffn_passes, elem_passes, _, per_block = recompute_passes(model, workload)
    ops, head, b_elem = _layer_ops(model, workload, topology, lay)

    # per layer: blocking collectives, those under the compute (TP overlap, EP overlap,
    # ZeRO-3 prefetch), the ring under the attention core
    act = tokens * model.d_model * wb
    k_tp = _per_cube(tp, strides[0], cube)
    n_a2a = moe_alltoalls_per_layer(model, workload) if ep > 1 else 0.0
    tp_time = tp_collectives(links, act, tp, k_tp, t_tp, topology, per_block,
                             workload.sequence_parallel)  # the attention block's
    if not wide:  # and the FFN block's
        tp_time += tp_time * tp_ffn_share(model, ep)
    a2a = (moe_alltoall(links, model, workload, topology, tokens, tp, ep, k_ep, t_ep, n_a2a)
           + expert_tp_relayout(links, model, workload, topology, tokens, tp, ep, etp,
                                k_etp, t_etp, n_a2a)
           if ep > 1 else 0.0)
    overlapped = ((tp_time if workload.tp_comm_overlap else 0.0)
                  + (a2a if workload.moe_a2a_overlap else 0.0))
    blocking = ((0.0 if workload.tp_comm_overlap else tp_time)
                + (0.0 if workload.moe_a2a_overlap else a2a))
    if wide:
        blocking += tp_cp_ffn_collectives(links, model, workload.micro_batch, workload.s_kv,
                                          tp, cp, t_tpcp, t_cp, topology, per_block)
    dense_layer, expert_layer = layer_params(model, tp, ep, etp, ffn_ranks)
    if zs == 3:
        overlapped += (zero3_param_gathers(links, dense_layer, g_sh, k_sh, t_sh, topology,
                                           workload, pw)
                       + zero3_param_gathers(links, expert_layer, g_edp, k_edp, t_edp,
                                             topology, workload, pw))
    ring_bytes, ring_alpha = cp_ring(lay, model, workload, tp, wb, topology, t_cp)
    ring = ring_bytes / links[t_cp][0] + ring_alpha if cp > 1 else 0.0
    kernels = kernels_per_layer(model, elem_passes, per_block, n_a2a, tp, ep, etp)

    # once per step
    per_stage, per_slot, slots = pipeline_schedule(model, pp, m, workload.virtual_stages)
    pp_bytes, pp_alpha = pipeline_p2p(act, tp, pp, workload.virtual_stages, m, topology, t_pp)
    t_pp = pp_bytes / links[t_pp][0] + pp_alpha if pp > 1 else 0.0
    dense, expert = stage_params(model, dense_layer, expert_layer, per_stage, tp, pp)
    params = dense + expert
    t_grad, after_step = grad_reduce(links, dense, g_sh, k_sh, t_sh, zs, m,
                                     workload.grad_bytes, pw, topology)
    if ep > 1:  # expert gradients over the expert-data-parallel group
        t_exp, after_exp = grad_reduce(links, expert, g_edp, k_edp, t_edp, zs, m,
                                       workload.grad_bytes, pw, topology)
        t_grad, after_step = t_grad + t_exp, after_step + after_exp
    hide = grad_reduce_overlap(workload, ffn_passes, m, per_slot)
    opt_params, opt_bytes = optimizer_step(workload, params, dense, expert, g_sh, g_edp, ep > 1)
    largest = max(dense_layer + expert_layer, model.vocab_size * model.d_model / tp)
    states = model_states(workload, dense, expert, params, largest, g_sh, g_edp, pw, ep > 1)
    t_host = 0.0
    if workload.offload != "none":
        states, host, t_host = zero_offload(workload, params, dense, expert, largest, g_sh,
                                            g_edp, opt_params, wb, lin, m, topology, ep > 1)
        if host > topology.host_mem_gb * 1e9:
            return invalid
    act_mem = activation_memory(model, workload, cp, tp, pp, m, per_stage)
    logits = logit_bytes(model, workload, tokens, tp)
    return _step_time(
        model, workload, hardware, efficiency, lay, hbm_ratio=topology.hbm_ratio, ops=ops,
        head=head, b_elem=b_elem, ring=ring, blocking=blocking, overlapped=overlapped, kernels=kernels, slots=slots,
        t_pp=t_pp, t_grad=t_grad, after_step=after_step, hide=hide, opt_bytes=opt_bytes,
        t_host=t_host, states=states, act_mem=act_mem, logits=logits)


def _step_time(model, workload, hardware, efficiency, lay, *, hbm_ratio, ops, head, b_elem, ring,
               blocking, overlapped, kernels, slots, t_pp, t_grad, after_step, hide, opt_bytes, t_host,
               states, act_mem, logits) -> dict:
    """The hardware combine: each op's roofline at its rate, the ring under the attention
    core, the overlapped collectives under the layer's compute and the exposed ring, the
    gradient reduction under the compute they leave free, the per-kernel cost."""
    peak = hardware.peak_tflops_f16 * 1e12 / 1e9
    attn_eff = (efficiency.train_compute if efficiency.train_attention is None
                else efficiency.train_attention)
    flash = workload.attention in ("flash", "flash2")
    rates = {"attn_linear": peak * efficiency.train_compute,
             "attn_core": peak * (attn_eff if flash else efficiency.train_compute),
             "ffn": peak * efficiency.train_compute}
    hbm = hardware.bw_hbm_gbs * hbm_factor(efficiency, True) * hbm_ratio

    def roofline(flops: float, nbytes: float, rate: float) -> tuple[float, str]:
        return op_time(flops / rate, nbytes / hbm, efficiency.roofline_overlap)

    times = {name: roofline(f, b, rates[name]) for name, (f, b) in ops.items()}
    work = sum(t for t, _ in times.values())
    u = efficiency.comm_contention  # compute a collective running under it takes
    exposed = max(u * ring, ring - times["attn_core"][0])
    window = work + exposed
    exposed_gather = max(u * overlapped, overlapped - window)
    if hide:  # only compute the prefetched all-gathers leave free hides the reduction
        free = max(0.0, window - overlapped)
        t_grad -= (1 - u) * min(t_grad, hide * slots * free)
    t_opt = opt_bytes / hbm
    t_head, head_kind = roofline(head[0], head[1], peak * efficiency.train_compute)
    t_elem = b_elem / hbm
    t_ops = slots * kernels * efficiency.op_latency_ns
    latency = (slots * (work + exposed + blocking + t_elem + exposed_gather) + t_head + t_pp
               + t_grad + t_opt + after_step + t_host + t_ops)
    compute = slots * sum(t for t, k in times.values() if k == "compute")
    memory = slots * sum(t for t, k in times.values() if k == "memory") + t_opt + slots * t_elem
    compute += t_head if head_kind == "compute" else 0.0
    memory += t_head if head_kind == "memory" else 0.0
    comm = (slots * (exposed + blocking + exposed_gather) + t_pp + t_grad + after_step + t_host)
    # each side alone: all FLOPs at their rate, all bytes at the HBM bandwidth
    compute_alone = (slots * sum(f / rates[name] for name, (f, _) in ops.items())
                     + head[0] / (peak * efficiency.train_compute))
    memory_alone = (slots * (sum(b for _, b in ops.values()) / hbm + t_elem) + head[1] / hbm
                    + t_opt)
    mem = states + act_mem + logits
    n_tokens = workload.batch * workload.s_kv
    flops = model_flops(model, workload, *attention_pairs(model, workload.s_kv))
    seconds = latency / 1e9
    return dict(
        latency_ns=latency, throughput_tok_s=n_tokens / seconds,
        flops_per_device=flops / (lay.cp * lay.tp * lay.pp * lay.dp) / seconds,
        compute_ns=compute, memory_ns=memory, comm_ns=comm, overhead_ns=t_ops,
        compute_alone_ns=compute_alone, memory_alone_ns=memory_alone,
        fits=mem <= hardware.pe_hbm_gb * 1e9 * efficiency.hbm_usable, valid=True, mem_bytes=mem,
        mem_weights_bytes=states, mem_kv_bytes=0.0, mem_act_bytes=act_mem + logits,
    )
