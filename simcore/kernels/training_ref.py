"""Plain-python reference twin of :mod:`simcore.kernels.training` (the test oracle)."""

from __future__ import annotations

import math

from . import collectives_ref as coll
from .inference_ref import Layout, _strides, keys_in_window, moe_permute_elems, op_time

ADAM_BYTES_PER_PARAM = 26.0
#: DeepSpeed's model-state bytes per parameter, ``{width: {stage: (kept whole,
#: partitioned over G)}}``; at ZeRO-3 the whole part is the gathered largest layer's.
#: 16-bit (fp16, bf16, fp8) is DeepSpeed's estimators' formula; fp32 the same counting
#: (FSDP's at every precision: no 16-bit copy, the gathered layer at compute width).
ZERO_BYTES = {"16-bit": {0: (20, 0), 1: (4, 16), 2: (2, 18), 3: (4, 18)},
              "fp32": {0: (16, 0), 1: (8, 8), 2: (4, 12), 3: (8, 16)}}


def activations_per_layer(seq: float, micro: int, d: int, heads: int, tp: int, recompute: str,
                          sequence_parallel: bool, fp8_saved: bool = False,
                          flash: bool = True) -> float:
    """Korthikanti et al. 2022, Table 2, bytes for one layer and micro-batch; with
    ``fp8_saved`` (Transformer Engine) every GEMM input is kept as a 1-byte FP8 copy:
    QKV and FC1 (10 → 8 outside the TP shards), FC2 and the output projection (24 → 21
    inside them with a flash core, which also keeps the 16-bit attention output for its
    backward; 24 → 19 unfused)."""
    sbh = seq * micro * d
    if recompute == "full":
        return 2 * sbh / (tp if sequence_parallel else 1)
    attn_scores = 5 * heads * seq / d
    outside, inside = (8, 21 if flash else 19) if fp8_saved else (10, 24)
    if sequence_parallel:
        per = (outside + inside) / tp
    else:
        per = outside + inside / tp
    if recompute != "selective":
        per += attn_scores / tp
    return sbh * per


def op_sac_activations_per_layer(seq: float, micro: int, model, tp: int,
                                sequence_parallel: bool) -> float:
    """torchtitan's per-op selective checkpointing, bytes for one layer and micro-batch:
    the layer input, the outputs of Q, V, attention, the first FFN matmul and (gated FFN)
    the down projection's partial sums; under TP the two reduce-scattered outputs."""
    d, kvh, hd = model.d_model, _kv_heads(model), model.head_dim
    kv_heads = kvh / tp if tp <= kvh else 1
    up = model.ffn_active_params_per_layer / ((3 if model.gated_ffn else 2) * d)
    width = d / (tp if sequence_parallel else 1) + 2 * d / tp + kv_heads * hd + up / tp
    if model.gated_ffn:
        width += d
    if tp > 1:
        width += 2 * d / tp
    return 2 * seq * micro * width


def _kv_heads(model) -> int:
    """K/V heads of training attention: MLA trains in the decompressed form, one K and V
    head per query head (the latent is an activation, not a cache)."""
    return model.n_heads if model.is_mla else model.n_kv_heads


def expert_groups(lay: Layout, strides: dict[str, int], cube: int):
    """(EP group, EDP group) of a stage as lists of (members, stride) per parallel dim, or
    None when ep does not split TP x CP x DP evenly: the EP group takes the first ep of
    the stage's TP x CP x DP devices, innermost dim first; the EDP group (same experts) is
    the rest."""
    dims = sorted((d for d in ("tp", "cp", "dp") if getattr(lay, d) > 1),
                  key=lambda d: strides[d])
    left, ep_parts, edp_parts = lay.ep, [], []
    for d in dims:
        n = getattr(lay, d)
        take = n if left >= n else left
        if (left % n if left >= n else n % left):
            return None
        left //= take
        if take > 1:
            ep_parts.append((take, strides[d]))
        if n // take > 1:
            edp_parts.append((n // take, take * strides[d]))
    return (ep_parts, edp_parts) if left == 1 else None


def _group_shape(parts, cube: int) -> tuple[int, int, int]:
    """(members, span, members per cube) of a group made of (members, stride) parts."""
    size = math.prod(n for n, _ in parts)
    span = max((n * st for n, st in parts), default=1)
    k = math.prod(1 if st >= cube else max(1, min(n, cube // st)) for n, st in parts)
    return size, span, min(k, cube)


def is_valid(model, workload, topology, lay: Layout) -> bool:
    if lay.cp * lay.tp * lay.pp * lay.dp > topology.n_devices:
        return False
    if model.n_heads % lay.tp or lay.pp > model.n_layers or lay.cp > workload.s_kv:
        return False
    if lay.ep > 1:  # experts over ep of the stage's TP x CP x DP devices (MoE only)
        if model.n_experts == 1 or model.n_experts % lay.ep:
            return False
        if lay.ffn_shard_scope == "TP+CP" and lay.cp > 1:
            return False
        if lay.tp > 1 and not workload.sequence_parallel:  # Megatron requires SP here
            return False
        if expert_groups(lay, _strides(lay), topology.pes_per_cube) is None:
            return False
    if lay.kv_shard_mode != "head" or workload.batch % (lay.dp * workload.micro_batch):
        return False
    kvh = _kv_heads(model)
    return (kvh % lay.tp == 0) if lay.tp <= kvh else (lay.tp % kvh == 0)


def deepep_reach(n_experts: int, top_k: int, ep: int, per_node: int,
                 routing: str) -> tuple[float, float]:
    """Mean (ranks, nodes) one token's routed experts live on: experts contiguous over the
    ep ranks, ``per_node`` EP ranks per node. ``"random"``: k distinct experts uniformly
    (inclusion-exclusion over one group's experts); ``"round_robin"``: token i takes
    experts i·k … i·k + k − 1 mod E (Automodel's FakeBalancedGate), averaged over the start
    offsets the tokens cycle through, by listing each token's ranks and nodes."""
    E, k = n_experts, top_k
    n_nodes = max(round(ep / per_node), 1)
    if routing == "random":
        def reach(groups: int) -> float:
            return groups * (1 - math.comb(E - E // groups, k) / math.comb(E, k))
        return reach(ep), reach(n_nodes)
    starts = [(i * k) % E for i in range(E)]
    ranks = [len({((o + j) % E) // (E // ep) for j in range(k)}) for o in starts]
    nodes = [len({((o + j) % E) // (E // n_nodes) for j in range(k)}) for o in starts]
    return sum(ranks) / len(starts), sum(nodes) / len(starts)


def evaluate_point(model, workload, hardware, topology, efficiency, lay: Layout) -> dict:
    """Step time, fit and breakdown of one training (hardware, layout) point."""
    nan = float("nan")
    invalid = dict(latency_ns=nan, throughput_tok_s=nan, flops_per_device=nan, compute_ns=nan,
                   memory_ns=nan, comm_ns=nan, overhead_ns=nan, fits=False, valid=False,
                   mem_bytes=None)
    if not is_valid(model, workload, topology, lay):
        return invalid
    cp, tp, pp, dp = lay.cp, lay.tp, lay.pp, lay.dp
    d, h, kvh, hd = model.d_model, model.n_heads, _kv_heads(model), model.head_dim
    vhd = model.value_head_dim
    wb = model.bytes_per_param
    # FP8 primary weights: 1-byte parameter copies (states and parameter all-gathers)
    pw = 1 if workload.weight_dtype == "fp8" else wb
    fp8_saved = workload.act_dtype == "fp8"
    B, s, mb = workload.batch, workload.s_kv, workload.micro_batch
    rc, sp, zs = workload.recompute, workload.sequence_parallel, workload.zero_stage
    flash = workload.attention in ("flash", "flash2")
    v = workload.virtual_stages
    cube = topology.pes_per_cube
    nics = topology.nics_per_cube or cube

    peak = hardware.peak_tflops_f16 * 1e12 * efficiency.train_compute / 1e9
    attn_eff = (efficiency.train_compute if efficiency.train_attention is None
                else efficiency.train_attention)
    attn_peak = hardware.peak_tflops_f16 * 1e12 * attn_eff / 1e9
    if workload.attention == "flash2":  # FA2-class core: the family's fa2_ratio of native
        attn_peak *= topology.fa2_ratio
    gemm_peak = peak
    if workload.precision == "fp32":
        peak /= 2  # TF32 tensor cores: half the 16-bit rate
        attn_peak /= 2
        gemm_peak = peak
    elif workload.precision == "fp8":
        gemm_peak = peak * topology.fp8_ratio  # Transformer Engine: fp8 GEMMs only
    head_peak = peak * topology.mm_ratio  # GEMMs at the family's achievable matmul share
    gemm_peak *= topology.mm_ratio
    hbm = hardware.bw_hbm_gbs * efficiency.memory
    bws = (hardware.bw_intra_gbs, hardware.bw_inter_gbs, hardware.bw_intersip_gbs)
    alphas = (topology.alpha_intra_ns, topology.alpha_inter_ns, topology.alpha_intersip_ns)
    strides = _strides(lay)

    net = efficiency.network
    inter = net if efficiency.network_inter is None else efficiency.network_inter
    nets = (net, inter, inter if efficiency.network_sip is None else efficiency.network_sip)

    def tier(span: int) -> int:
        return coll.tier_of(span, topology.pes_per_cube, topology.pes_per_sip)

    def link_of(t: int) -> tuple[float, float]:
        return bws[t] * nets[t], alphas[t]

    def link(span: int) -> tuple[float, float]:
        return link_of(tier(span))

    def per_cube(g, stride):
        return 1 if stride >= cube else max(1, min(g, cube // stride))

    def collective(nbytes, g, k, t, allreduce, in_switch=True):
        """Ring inside a cube, hierarchical across cubes (k members per cube); a true
        all-reduce (``in_switch``; not sequence parallelism's reduce-scatter + all-gather)
        inside a cube whose switch reduces runs at NVLS's measured bandwidth
        (``coll.in_switch_factor``)."""
        if g <= 1:
            return 0.0
        if t == 0:
            if allreduce and in_switch and topology.nvls:
                bw0, a0 = link_of(0)
                wire = coll.in_switch_factor(2 * (g - 1) / g, nbytes)
                return wire * nbytes / bw0 + 2 * (g - 1) * a0
            f = coll.allreduce_ns if allreduce else coll.allgather_ns
            return f(nbytes, g, *link_of(0))
        return coll.hier_collective_ns(nbytes, g, k, cube, nics, link_of(0), link_of(t),
                                       allreduce)

    gspan = coll.group_span
    cp_link, pp_link = link(gspan(cp, strides["cp"])), link(gspan(pp, strides["pp"]))
    t_tp = tier(gspan(tp, strides["tp"]))
    t_dp, t_cp = tier(gspan(dp, strides["dp"])), tier(gspan(cp, strides["cp"]))
    # gradients and ZeRO shards over DP x CP
    g_sh = dp * cp
    k_sh = min(cube, per_cube(dp, strides["dp"]) * per_cube(cp, strides["cp"]))
    t_sh = max(t_dp, t_cp) if cp > 1 else t_dp

    def sharded(nbytes, allreduce):
        return collective(nbytes, g_sh, k_sh, t_sh, allreduce)

    # expert parallelism: routed experts whole on ep of the stage's TP x CP x DP devices;
    # the devices holding the same experts (EDP) reduce their gradients and shard states
    ep = lay.ep
    if ep > 1:
        ep_parts, edp_parts = expert_groups(lay, strides, cube)
        _, ep_span, k_ep = _group_shape(ep_parts, cube)
        g_edp, edp_span, k_edp = _group_shape(edp_parts, cube)
        t_ep, t_edp = tier(ep_span), tier(edp_span)
    else:
        g_edp, k_edp, t_edp = 1, 1, 0

    def expert_sharded(nbytes, allreduce):
        return collective(nbytes, g_edp, k_edp, t_edp, allreduce)

    micro_batches = B / (dp * mb)
    tokens = mb * s / cp
    # (query, key) pairs per sequence, averaged over the layers: local (sliding-window)
    # layers see at most `sliding_window` keys
    n_loc = model.n_local_layers
    pairs = s * (s + 1) / 2
    if n_loc:
        pairs = ((model.n_layers - n_loc) * pairs
                 + n_loc * keys_in_window(1, s, model.sliding_window)) / model.n_layers
    lin_passes = 4.0 if rc == "full" else 3.0
    attn_passes = ffn_passes = elem_passes = lin_passes
    if rc == "op":  # every second matmul of a layer recomputed in backward
        attn_passes = 3.5  # K and O of Q, K, V, O
        ffn_passes = 3 + (1 / 3 if model.gated_ffn else 1 / 2)
        elem_passes = 4  # every element-wise op recomputed
    if flash:
        core_passes = 4.5 if rc == "full" else 3.5
    else:
        core_passes = 3 if rc == "none" else 4

    # MLA: the down-projections to the query and KV latents are duplicated on every TP rank
    # (Megatron-Core), the per-head up-projections shard with Q and O
    if model.is_mla:
        kv_w = 0
        rep_w = d * (model.q_lora_rank + model.kv_lora_rank + model.qk_rope_head_dim)
    else:
        kv_w, rep_w = d * kvh * (hd + vhd), 0
    attn_weights = ((model.attn_params_per_layer - kv_w - rep_w) / tp + kv_w / min(tp, kvh)
                    + rep_w)
    kv_heads = kvh / tp if tp <= kvh else 1
    kv_block = mb * (s / cp) * kv_heads * (hd + vhd) * wb
    wide = lay.ffn_shard_scope == "TP+CP" and cp > 1
    ffn_ranks = tp * cp if wide else tp
    ffn_tokens = mb * s if wide else tokens
    experts = min(model.n_experts, ffn_tokens * model.top_k) if model.n_experts > 1 else 1
    router = model.ffn_params_per_layer - model.n_experts * model.expert_params
    # weights read by the FFN per pass: with EP the rank's local experts whole (those its
    # T·k/tp routed token copies touch), the rest (router, shared, dense) by TP
    if ep > 1:
        local = min(model.n_experts / ep, tokens * model.top_k / tp)
        ffn_read = local * model.expert_params + router / tp
    else:
        ffn_read = (experts * model.expert_params + router) / ffn_ranks

    # an unfused core computes every (query, key) score and masks in the softmax; its
    # score matrix is written (QK^T), read + written (softmax) and read (AV) per pass
    core_pairs = pairs if flash else s * s
    score_bytes = 0.0 if flash else 4 * wb * mb * (h / tp) * (s / cp) * s
    ops = {
        "attn_linear": (attn_passes * 2 * tokens * ((model.attn_params_per_layer - rep_w) / tp
                                                   + rep_w),
                        attn_passes * (attn_weights * wb + tokens * d * wb * (2 + 2 / tp))),
        # scores (head_dim) and values (v_head_dim) per pair and head; K and V read for the
        # keys each query attends to
        "attn_core": (core_passes * 2 * mb * core_pairs * (hd + vhd) * h / (tp * cp),
                      core_passes * (kv_block + mb * kv_heads * (hd + vhd) * wb * core_pairs / s
                                     + mb * (s / cp) * (h / tp) * (hd + vhd) * wb
                                     + score_bytes)),
        "ffn": (ffn_passes * 2 * ffn_tokens * model.ffn_active_params_per_layer / ffn_ranks,
                ffn_passes * (ffn_read * wb + 2 * ffn_tokens * d * wb)),
    }
    head = (micro_batches * 3 * 2 * tokens * d * model.vocab_size / tp,
            micro_batches * (3 * model.vocab_size * d * wb / tp
                             + 2 * tokens * model.vocab_size / tp * 4))
    # element-wise ops per layer: norms + residual adds on the residual stream (sharded by
    # sequence parallelism), RoPE on Q and K, the FFN activation function
    residual_tokens = tokens / tp if sp else tokens
    elem_bytes = elem_passes * wb * (
        residual_tokens * (2 * 2 * d + 2 * 3 * d)
        + tokens * 2 * (h / tp + kv_heads) * hd
        + ffn_tokens * model.ffn_active_params_per_layer / d / ffn_ranks)
    if workload.eager_elementwise:
        # PyTorch eager (torchtitan's Llama without torch.compile): per element, an RMSNorm
        # 36 bytes against 4 fused (two per layer), RoPE on Q and K 20 against 4, the
        # SwiGLU product 10 against 6 per FFN element
        elem_bytes += elem_passes * (
            residual_tokens * 2 * 32 * d + tokens * (h / tp + kv_heads) * hd * 16
            + (ffn_tokens * model.ffn_active_params_per_layer / d / ffn_ranks / 3 * 4
               if model.gated_ffn else 0.0))
    # with EP a rank handles its sequence-parallel 1/tp slice of the tokens' routed copies
    ep_share = 1 / tp if ep > 1 else 1
    if model.n_experts > 1:  # token permutation per MoE layer and pass
        elem_bytes += (ffn_passes * moe_permute_elems(model.top_k) * d * wb * ffn_tokens
                       * ep_share * model.n_moe_layers / model.n_layers)
    if workload.precision == "fp8":
        # Transformer Engine casts each GEMM's activation operand in every forward pass and
        # its output gradient once in the backward: read 16 bits, write FP8 + its transpose
        # (only the writes where the cast is fused into the preceding norm)
        moe_share = model.n_moe_layers / model.n_layers
        copies = model.top_k if moe_share else 1
        query = (model.attn_params_per_layer - kv_w - rep_w) / 2 / d / tp  # O input width
        width = model.ffn_active_params_per_layer / ((3 if model.gated_ffn else 2) * d)
        fc2_in = ffn_tokens * width / ffn_ranks
        routed = ffn_tokens * moe_share * copies * ep_share
        dense_rows = ffn_tokens * (1 - moe_share)
        norm_fused = residual_tokens * d + residual_tokens * d * (1 - moe_share)
        act_in = tokens * query + routed * d + fc2_in
        grad_out = (tokens * (query + kv_w / d / tp) + tokens * d
                    + (2 if model.gated_ffn else 1) * fc2_in + (routed + dense_rows) * d)
        elem_bytes += ((lin_passes - 2) * (2 * norm_fused + (wb + 2) * act_in)
                       + (wb + 2) * grad_out)

    def roofline(flops: float, nbytes: float, rate: float = peak) -> tuple[float, str]:
        return op_time(flops / rate, nbytes / hbm, efficiency.roofline_overlap)

    per_block = 3 if rc == "full" else (2.5 if rc == "op" else 2)
    comm = 0.0
    overlapped_a2a = 0.0
    act = tokens * d * wb
    tp_coll = per_block * collective(act, tp, per_cube(tp, strides["tp"]), t_tp, True,
                                     in_switch=not sp)
    # TP communication overlap: the TP collectives hide under the layer's compute
    overlapped_tp = 0.0
    if workload.tp_comm_overlap:
        overlapped_tp += tp_coll
    else:
        comm += tp_coll
    ffn_tp_layers = model.n_layers  # layers whose FFN runs TP-sharded (TP collectives)
    if ep > 1:
        # routed experts run whole (expert TP 1): only dense layers and shared experts keep
        # the FFN's TP collectives. Per MoE layer, dispatch + combine all-to-all over the EP
        # group in forward and backward (+ the recompute forward): each rank's tokens / tp,
        # top_k copies of d_model each
        ffn_tp_layers = model.n_layers - (0 if model.n_shared_experts else model.n_moe_layers)
        n_a2a = 6 if rc == "full" else 4
        if workload.moe_dispatch == "per_rank":
            # DeepEP: a token crosses the scale-out tier once per remote node it routes
            # to and is forwarded inside each node once per rank (not to itself)
            ranks, nodes = deepep_reach(model.n_experts, model.top_k, ep, k_ep,
                                        workload.moe_routing)
            a2a = coll.node_dedup_alltoall_ns(tokens / tp * d * wb, ep, k_ep, cube, nics,
                                              ranks, nodes, link_of(0), link_of(t_ep))
        else:  # Megatron's alltoall dispatcher: one copy per routed expert
            sent = tokens / tp * model.top_k * d * wb
            a2a = coll.alltoall_ns(sent, ep, k_ep, cube, nics, link_of(0), link_of(t_ep))
        a2a_time = n_a2a * a2a * model.n_moe_layers / model.n_layers
        if workload.moe_a2a_overlap:  # under another micro-batch's compute
            overlapped_a2a = a2a_time
        else:
            comm += a2a_time
    if wide:
        span = max(gspan(tp, strides["tp"]), gspan(cp, strides["cp"]))
        full_act = mb * s * d * wb
        if tier(span) == 0:  # inside the cube: the ring, or in the switch (collective)
            comm += per_block * collective(full_act, tp * cp, tp * cp, 0, True)
        else:
            comm += per_block * coll.allreduce_ns(full_act, tp * cp, *link(span))
        comm += per_block * coll.allgather_ns(full_act, cp, *cp_link)
    else:
        ffn_coll = tp_coll if ep == 1 else tp_coll * ffn_tp_layers / model.n_layers
        if workload.tp_comm_overlap:
            overlapped_tp += ffn_coll
        else:
            comm += ffn_coll
    if ep > 1:
        dense_params = attn_weights + router / tp + model.norm_params_per_layer
        expert_layer = model.n_experts / ep * model.expert_params
    else:
        dense_params = (attn_weights + model.ffn_params_per_layer / ffn_ranks
                        + model.norm_params_per_layer)
        expert_layer = 0.0
    layer_params = dense_params + expert_layer
    # ZeRO-3 / FSDP all-gathers, prefetched under the layer's compute, and an overlapped
    # EP all-to-all
    prefetch = overlapped_a2a + overlapped_tp
    if zs == 3:
        prefetch += (3 if rc == "full" else 2) * (sharded(dense_params * pw, False)
                                                  + expert_sharded(expert_layer * pw, False))

    ring = 0.0
    if cp > 1:
        if lay.cp_ring_variant == "kv":
            block = kv_block
        else:
            block = mb * (s / cp) * (h / tp) * ((hd + vhd) * wb + 8)
        # the ring reruns with the attention core: full recompute, or an unfused core that
        # selective or per-op checkpointing recomputes (core_passes 4)
        ring_passes = 4 if (rc == "full" or (rc != "none" and not flash)) else 3
        ring = ring_passes * (cp - 1) * coll.p2p_ns(block, *cp_link)

    # an unfused core's QK^T and AV are batched 16-bit GEMMs (the matmul rate at the
    # family's matmul share); a fused / flash core runs at the attention kernel's rate
    rates = {"attn_core": attn_peak if flash else head_peak, "attn_linear": gemm_peak,
             "ffn": gemm_peak}
    times = {name: roofline(*fb, rate=rates[name]) for name, fb in ops.items()}
    work = sum(t for t, _ in times.values())
    u = efficiency.comm_contention  # compute a collective running under it takes
    exposed = max(u * ring, ring - times["attn_core"][0])
    # prefetched gathers and the gradient tail hide under the layer's compute and the ring
    # wait it exposes
    window = work + exposed
    exposed_gather = max(u * prefetch, prefetch - window)
    layers_per_stage = math.ceil(model.n_layers / pp)
    per_slot = micro_batches + (pp - 1) / v
    slots = layers_per_stage * per_slot
    # Megatron scatter/gather: a pipeline send carries 1/TP of the activation
    t_pp = (2 * (v * micro_batches + pp - 2) * coll.p2p_ns(act / tp, *pp_link)
            if pp > 1 else 0.0)

    emb = model.vocab_size * d / tp if pp > 1 else model.embedding_params / tp
    dense = layers_per_stage * dense_params + emb  # reduced and sharded over DP x CP
    expert = layers_per_stage * expert_layer  # over the EDP group only
    params = dense + expert

    def reduction(p, over):
        """(gradient reduction, parameter all-gather after the step) of p parameters."""
        grads = p * workload.grad_bytes
        if zs >= 2:  # reduce-scatter after every micro-batch
            return micro_batches * over(grads, False), over(p * pw, False) if zs == 2 else 0.0
        if zs == 1:
            return over(grads, False), over(p * pw, False)
        return over(grads, True), 0.0

    t_grad, after_step = reduction(dense, sharded)  # after_step: never hidden
    if ep > 1:
        t_exp, after_exp = reduction(expert, expert_sharded)
        t_grad += t_exp
        after_step += after_exp
    if workload.grad_overlap:
        backward = 2 / ffn_passes
        share = (micro_batches if zs >= 2 else 1) / per_slot
        # only compute the prefetched all-gathers leave free hides the reduction (one
        # window cannot hide both; otherwise faster compute could expose more than it saves)
        free = max(0.0, window - prefetch)
        hidden = min(t_grad, backward * share * slots * free)
        t_grad -= (1 - u) * hidden
    opt_params = (dense / g_sh + expert / g_edp) if zs >= 1 else params
    t_opt = opt_params * (ADAM_BYTES_PER_PARAM + workload.grad_bytes) / hbm

    largest = max(layer_params, model.vocab_size * d / tp)
    if workload.framework == "megatron":
        # parameters + gradients whole, fp32 master weights + Adam (12 B) over the group
        gb = workload.grad_bytes
        states = sum((pw + gb + (12 if zs == 0 else 12 / g)) * p
                     for p, g in ((dense, g_sh), (expert, g_edp)))
    else:
        fp32 = workload.precision == "fp32"
        whole, part = ZERO_BYTES["fp32" if fp32 or workload.framework == "fsdp" else "16-bit"][zs]
        if zs == 3 and workload.framework == "fsdp" and not fp32:
            whole = 4  # FSDP gathers the layer's 16-bit parameters and gradients
        # DeepSpeed: ZeRO-3 keeps only the fully gathered largest layer whole; routed
        # experts are sharded over the expert-data-parallel group
        states = (whole * (largest if zs == 3 else params) + part * dense / g_sh
                  + part * expert / g_edp)
    host_bytes, t_host = 0.0, 0.0
    if workload.offload != "none":
        on_gpu = dense / g_sh + expert / g_edp if zs == 3 else params
        states = 2 * on_gpu + (4 * largest if zs == 3 else 0)
        host_bytes = 14 * opt_params  # fp32 master, Adam m and v, 16-bit gradients
        t_host = opt_params * (2 + wb) / topology.pcie_gbs
        t_opt = 0.0  # the optimizer step runs on the host
        if workload.offload == "optimizer+params":
            states = 4 * largest
            host_bytes += 2 * on_gpu
            t_host += lin_passes * micro_batches * on_gpu * wb / topology.pcie_gbs
    if host_bytes > topology.host_mem_gb * 1e9:
        return invalid

    t_head, head_kind = roofline(*head, rate=head_peak)
    t_elem = elem_bytes / hbm
    layer = work + exposed + comm
    # each kernel's fixed cost on the device: a layer's forward kernels per pass (twice in
    # the backward, again per recomputed forward), one per TP collective and all-to-all;
    # the host launches them ahead of the device (long kernels), so no launch time shows
    moe_share = model.n_moe_layers / model.n_layers if model.n_experts > 1 else 0.0
    kernels = elem_passes * (10 + (model.n_norms_per_layer - 2) + 4 * moe_share)
    if tp > 1:
        kernels += 2 * per_block
    if ep > 1:
        kernels += n_a2a * moe_share
    t_ops = slots * kernels * efficiency.op_latency_ns
    latency = (slots * (layer + t_elem + exposed_gather) + t_head + t_pp + t_grad + t_opt
               + after_step + t_host + t_ops)
    compute = slots * sum(t for t, k in times.values() if k == "compute")
    memory = slots * sum(t for t, k in times.values() if k == "memory") + t_opt + slots * t_elem
    compute += t_head if head_kind == "compute" else 0.0
    memory += t_head if head_kind == "memory" else 0.0
    comm_total = (slots * (exposed + comm + exposed_gather) + t_pp + t_grad + after_step
                  + t_host)

    if flash and rc == "none":
        act_kind = "selective"  # flash attention keeps no s^2 scores
    else:
        act_kind = rc
    in_flight = min(pp, micro_batches)
    if v > 1 and pp > 1:
        in_flight *= 1 + (pp - 1) / (pp * v)
    if rc == "op":
        act_layer = op_sac_activations_per_layer(s / cp, mb, model, tp, sp)
    else:
        act_layer = activations_per_layer(s / cp, mb, d, h, tp, act_kind, sp, fp8_saved, flash)
    act_mem = layers_per_stage * in_flight * act_layer
    if rc == "full":
        act_mem += activations_per_layer(s / cp, mb, d, h, tp,
                                         "selective" if flash else "none", sp, fp8_saved,
                                         flash)
    # fp32 softmax kept by a fused loss; eager cross_entropy(logits.float()) at its
    # backward: fp32 log-softmax + the fp32 gradients of its output and input
    logits = tokens * model.vocab_size / tp * (12 if workload.eager_loss else 4)
    mem = states + act_mem + logits

    n_tokens = B * s
    matmul_params = model.n_active_params - model.embedding_params + model.vocab_size * d
    flops = 6 * matmul_params * n_tokens + 6 * model.n_layers * B * pairs * (hd + vhd) * h
    seconds = latency / 1e9
    return dict(
        latency_ns=latency, throughput_tok_s=n_tokens / seconds,
        flops_per_device=flops / (cp * tp * pp * dp) / seconds,
        compute_ns=compute, memory_ns=memory, comm_ns=comm_total, overhead_ns=t_ops,
        fits=mem <= hardware.pe_hbm_gb * 1e9 * efficiency.hbm_usable, valid=True, mem_bytes=mem,
        mem_weights_bytes=states, mem_kv_bytes=0.0, mem_act_bytes=act_mem + logits,
    )
