"""Plain-python reference twin of :mod:`simcore.kernels.training` (the test oracle)."""

from __future__ import annotations

import math

from . import collectives_ref as coll
from .inference_ref import Layout, _strides

ADAM_BYTES_PER_PARAM = 26.0
#: DeepSpeed's model-state bytes per parameter: (fp16 formula, bf16/fp32 formula)
ZERO_BYTES = {0: (lambda G: 20.0, lambda G: 16.0),
              1: (lambda G: 4 + 16 / G, lambda G: 8 + 8 / G),
              2: (lambda G: 2 + 18 / G, lambda G: 4 + 12 / G),
              3: (lambda G: 20 / G, lambda G: 16 / G)}


def activations_per_layer(seq: float, micro: int, d: int, heads: int, tp: int, recompute: str,
                          sequence_parallel: bool) -> float:
    """Korthikanti et al. 2022, Table 2, bytes for one layer and micro-batch."""
    sbh = seq * micro * d
    if recompute == "full":
        return 2 * sbh / (tp if sequence_parallel else 1)
    attn_scores = 5 * heads * seq / d
    if sequence_parallel:
        return sbh * 34 / tp if recompute == "selective" else sbh / tp * (34 + attn_scores)
    if recompute == "selective":
        return sbh * (10 + 24 / tp)
    return sbh * (10 + 24 / tp + attn_scores / tp)


def is_valid(model, workload, topology, lay: Layout) -> bool:
    if lay.cp * lay.tp * lay.pp * lay.dp > topology.n_devices:
        return False
    if model.n_heads % lay.tp or lay.pp > model.n_layers or lay.cp > workload.s_kv:
        return False
    if lay.kv_shard_mode != "head" or workload.batch % (lay.dp * workload.micro_batch):
        return False
    kvh = model.n_kv_heads
    return (kvh % lay.tp == 0) if lay.tp <= kvh else (lay.tp % kvh == 0)


def evaluate_point(model, workload, hardware, topology, efficiency, lay: Layout) -> dict:
    """Step time, fit and breakdown of one training (hardware, layout) point."""
    nan = float("nan")
    if not is_valid(model, workload, topology, lay):
        return dict(latency_ns=nan, throughput_tok_s=nan, flops_per_device=nan, compute_ns=nan,
                    memory_ns=nan, comm_ns=nan, overhead_ns=nan, fits=False, valid=False,
                    mem_bytes=None)
    cp, tp, pp, dp = lay.cp, lay.tp, lay.pp, lay.dp
    d, h, kvh, hd = model.d_model, model.n_heads, model.n_kv_heads, model.head_dim
    wb = model.bytes_per_param
    B, s, mb = workload.batch, workload.s_kv, workload.micro_batch
    rc, sp, zs = workload.recompute, workload.sequence_parallel, workload.zero_stage

    peak = hardware.peak_tflops_f16 * 1e12 * efficiency.train_compute / 1e9
    attn_eff = (efficiency.train_compute if efficiency.train_attention is None
                else efficiency.train_attention)
    attn_peak = hardware.peak_tflops_f16 * 1e12 * attn_eff / 1e9
    if workload.precision == "fp32":
        peak /= 2  # TF32 tensor cores: half the 16-bit rate
        attn_peak /= 2
    hbm = hardware.bw_hbm_gbs * efficiency.memory
    bws = (hardware.bw_intra_gbs, hardware.bw_inter_gbs, hardware.bw_intersip_gbs)
    alphas = (topology.alpha_intra_ns, topology.alpha_inter_ns, topology.alpha_intersip_ns)
    strides = _strides(lay)

    net = efficiency.network
    nets = (net, net if efficiency.network_inter is None else efficiency.network_inter,
            net if efficiency.network_sip is None else efficiency.network_sip)

    def link(span: int) -> tuple[float, float]:
        t = coll.tier_of(span, topology.pes_per_cube, topology.pes_per_sip)
        return bws[t] * nets[t], alphas[t]

    tp_link, cp_link = link(tp * strides["tp"]), link(cp * strides["cp"])
    pp_link, dp_link = link(pp * strides["pp"]), link(dp * strides["dp"])

    micro_batches = B / (dp * mb)
    tokens = mb * s / cp
    causal = 1 - (s - 1) / (2 * s)
    lin_passes = 4 if rc == "full" else 3
    core_passes = 3 if rc == "none" else 4

    kv_w = 2 * d * kvh * hd
    attn_weights = (model.attn_params_per_layer - kv_w) / tp + kv_w / min(tp, kvh)
    kv_heads = kvh / tp if tp <= kvh else 1
    kv_block = mb * (s / cp) * kv_heads * hd * 2 * wb
    wide = lay.ffn_shard_scope == "TP+CP" and cp > 1
    ffn_ranks = tp * cp if wide else tp
    ffn_tokens = mb * s if wide else tokens
    experts = min(model.n_experts, ffn_tokens * model.top_k) if model.n_experts > 1 else 1
    router = model.ffn_params_per_layer - model.n_experts * model.expert_params

    ops = {
        "attn_linear": (lin_passes * 2 * tokens * model.attn_params_per_layer / tp,
                        lin_passes * (attn_weights * wb + tokens * d * wb * (2 + 2 / tp))),
        "attn_core": (core_passes * 4 * mb * s * s * causal * hd * h / (tp * cp),
                      core_passes * (kv_block * (1 + cp * causal)
                                     + 2 * mb * (s / cp) * (h / tp) * hd * wb)),
        "ffn": (lin_passes * 2 * ffn_tokens * model.ffn_active_params_per_layer / ffn_ranks,
                lin_passes * ((experts * model.expert_params + router) / ffn_ranks * wb
                              + 2 * ffn_tokens * d * wb)),
    }
    head = (micro_batches * 3 * 2 * tokens * d * model.vocab_size / tp,
            micro_batches * (3 * model.vocab_size * d * wb / tp
                             + 2 * tokens * model.vocab_size / tp * 4))

    def roofline(flops: float, nbytes: float, rate: float = peak) -> tuple[float, str]:
        t_c, t_m = flops / rate, nbytes / hbm
        return (t_c, "compute") if t_c > t_m else (t_m, "memory")

    per_block = 3 if rc == "full" else 2
    comm = 0.0
    act = tokens * d * wb
    comm += per_block * coll.allreduce_ns(act, tp, *tp_link)
    if wide:
        span = max(tp * strides["tp"], cp * strides["cp"])
        full_act = mb * s * d * wb
        comm += per_block * coll.allreduce_ns(full_act, tp * cp, *link(span))
        comm += per_block * coll.allgather_ns(full_act, cp, *cp_link)
    else:
        comm += per_block * coll.allreduce_ns(act, tp, *tp_link)
    layer_params = attn_weights + model.ffn_params_per_layer / ffn_ranks + model.norm_params_per_layer
    if zs == 3:
        comm += (3 if rc == "full" else 2) * coll.allgather_ns(layer_params * wb, dp, *dp_link)

    ring = 0.0
    if cp > 1:
        if lay.cp_ring_variant == "kv":
            block = kv_block
        else:
            block = mb * (s / cp) * (h / tp) * (2 * hd * wb + 8)
        ring = core_passes * (cp - 1) * coll.p2p_ns(block, *cp_link)

    times = {name: roofline(*fb, rate=attn_peak if name == "attn_core" else peak)
             for name, fb in ops.items()}
    exposed = max(0.0, ring - times["attn_core"][0])
    layers_per_stage = math.ceil(model.n_layers / pp)
    slots = layers_per_stage * (micro_batches + pp - 1)
    t_pp = 2 * (micro_batches + pp - 2) * coll.p2p_ns(act, *pp_link) if pp > 1 else 0.0

    emb = model.vocab_size * d / tp if pp > 1 else model.embedding_params / tp
    params = layers_per_stage * layer_params + emb
    grads = params * workload.grad_bytes
    if zs >= 2:  # reduce-scatter (costs what an all-gather does) after every micro-batch
        t_grad = micro_batches * coll.allgather_ns(grads, dp, *dp_link)
        if zs == 2:
            t_grad += coll.allgather_ns(params * wb, dp, *dp_link)
    else:
        t_grad = coll.allreduce_ns(grads, dp, *dp_link)
    t_opt = (params / dp if zs >= 1 else params) * (ADAM_BYTES_PER_PARAM + workload.grad_bytes) / hbm

    t_head, head_kind = roofline(*head)
    layer = sum(t for t, _ in times.values()) + exposed + comm
    latency = slots * layer + t_head + t_pp + t_grad + t_opt
    compute = slots * sum(t for t, k in times.values() if k == "compute")
    memory = slots * sum(t for t, k in times.values() if k == "memory") + t_opt
    compute += t_head if head_kind == "compute" else 0.0
    memory += t_head if head_kind == "memory" else 0.0
    comm_total = slots * (exposed + comm) + t_pp + t_grad

    states = ZERO_BYTES[zs][0 if workload.precision == "fp16" else 1](dp) * params
    act_mem = layers_per_stage * min(pp, micro_batches) * activations_per_layer(
        s / cp, mb, d, h, tp, rc, sp)
    if rc == "full":
        act_mem += activations_per_layer(s / cp, mb, d, h, tp, "none", sp)
    logits = tokens * model.vocab_size / tp * 4
    mem = states + act_mem + logits

    n_tokens = B * s
    flops = 6 * model.n_active_params * n_tokens + 12 * model.n_layers * B * s * s * causal * h * hd
    seconds = latency / 1e9
    return dict(
        latency_ns=latency, throughput_tok_s=n_tokens / seconds,
        flops_per_device=flops / (cp * tp * pp * dp) / seconds,
        compute_ns=compute, memory_ns=memory, comm_ns=comm_total, overhead_ns=0.0,
        fits=mem <= hardware.pe_hbm_gb * 1e9 * efficiency.hbm_usable, valid=True, mem_bytes=mem,
        mem_weights_bytes=states, mem_kv_bytes=0.0, mem_act_bytes=act_mem + logits,
    )
