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
activation / KV dtypes with fp8 / int8 matmul rates. Multi-head latent attention
(the latent cached, one head group for sharding, replicated down-projections, prefill
decompressed, decode absorbed) and sliding-window layers (layer averages of the tokens
cached and the pairs attended) come from per-model constants of ``ModelParams``.
``simcore.kernels.inference_ref`` is the plain-python twin.
"""

from __future__ import annotations

import math

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
from .common import OPS_LAYER, OPS_MOE, add_comm, moe_permute_bytes, placement, window_keys
from .common import tier_alpha_ns as _alpha
from .schema import COEF_DTYPE, FUSED_METRICS, HW, LAYOUT, N_BEST

__all__ = ["FUSED_METRICS", "N_BEST", "evaluate_grid", "fused_best", "layout_coeffs", "point"]

#: the old names of the shared pieces (now in :mod:`.common`), for callers not yet moved
_OPS_LAYER = OPS_LAYER
_OPS_MOE = OPS_MOE

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
#: expert-parallel capacity / imbalance factor: the busiest EP rank's share of routed
#: tokens over the mean (GShard / Switch capacity factor)
_EP_CAPACITY = 1.25


@jit()
def _coeff_row(lay, mp, wp, topo, out, acc):
    cp = lay[LAYOUT.cp]
    tp = lay[LAYOUT.tp]
    pp = lay[LAYOUT.pp]
    dp = lay[LAYOUT.dp]
    kvm = lay[LAYOUT.kv_shard_mode]
    ffs = lay[LAYOUT.ffn_shard_scope]
    tpp = lay[LAYOUT.tp_placement]
    cpp = lay[LAYOUT.cp_placement]
    ring = lay[LAYOUT.cp_ring_variant]
    ep = lay[LAYOUT.ep]

    L = mp.n_layers
    d = mp.d_model
    h = mp.n_heads
    kvh = mp.cache_heads  # KV heads of the cache (MLA: 1, the latent all heads share)
    cw = mp.cache_width  # cached elements per token, layer and cache head
    # precision: weights, activations (matmul inputs), KV cache; matmul rate vs the 16-bit
    # peak (messages: bmsg below)
    bw = wp.w_bytes if wp.w_bytes > 0.0 else mp.bytes_per_param
    ba = wp.a_bytes if wp.a_bytes > 0.0 else mp.bytes_per_param
    bkv = wp.kv_bytes if wp.kv_bytes > 0.0 else mp.bytes_per_kv
    rate = 1.0
    if wp.act_code == 1.0:
        rate = topo.fp8_ratio
    elif wp.act_code == 2.0:
        rate = topo.int8_ratio
    rate *= topo.mm_ratio  # the family's achievable matmul fraction relative to Hopper's
    E = mp.n_experts
    k = mp.top_k
    decode = wp.mode == 1.0
    B = wp.batch
    s_q = wp.s_q
    s_kv = wp.s_kv
    cube = int(topo.pes_per_cube)
    sip = int(topo.pes_per_sip)
    a0 = topo.alpha_intra_ns
    a1 = topo.alpha_inter_ns
    a2 = topo.alpha_intersip_ns

    fcp = float(cp)
    ftp = float(tp)
    fpp = float(pp)
    n_dev = cp * tp * pp * dp

    # -- validity --------------------------------------------------------------------
    valid = n_dev <= topo.n_devices and int(h) % tp == 0 and fpp <= L and float(dp) <= B
    if not decode and fcp > s_q:
        valid = False
    if fcp > s_kv:
        valid = False
    ikvh = int(kvh)
    if kvm == 0:  # head (duplicated beyond n_kv_heads)
        if tp <= ikvh:
            valid = valid and ikvh % tp == 0
        else:
            valid = valid and tp % ikvh == 0
    elif kvm == 2:  # head_seq
        valid = valid and tp > ikvh and tp % ikvh == 0

    # -- placement: strides and tiers --------------------------------------------------
    strides, tier_tp, tier_cp, tier_pp, tier_dp, tier_tpcp = placement(tp, cp, pp, dp, tpp, cpp,
                                                                        topo)
    stride_tp = strides[0]

    # -- tokens ------------------------------------------------------------------------
    Bd = math.ceil(B / dp)
    # decode with PP: min(pp, Bd) micro-batches in flight, each passes all L layers
    m_dec = min(fpp, float(Bd)) if decode else 1.0
    Bm = math.ceil(Bd / m_dec) if decode else Bd
    sq_loc = 1.0 if decode else s_q / fcp
    # continuous batching: other requests' prompt tokens ride in the same decode pass
    # (split like the batch over DP replicas and in-flight micro-batches)
    P_mix = wp.mix_tokens / float(dp) / m_dec if decode else 0.0
    T_lin = Bm * sq_loc + P_mix
    T_rep = Bm * s_q + P_mix
    causal = 1.0 - (s_q - 1.0) / (2.0 * s_kv)
    # attention widths per query head: score (q·k) and value; MLA decodes in the absorbed
    # form (against the latent), prefill and the mixed prompt tokens in the decompressed one
    qk = mp.qk_dim_dec if decode else mp.qk_dim
    vd = mp.v_dim_dec if decode else mp.v_dim
    adim = 0.5 * (qk + vd)
    mix_dim = (mp.qk_dim + mp.v_dim) / (qk + vd)  # decompressed over this mode's pair cost
    # sliding-window layers cache and attend to at most ``window`` tokens: layer averages
    # of the tokens cached (s_cache) and of the (query, key) pairs relative to full causal
    # attention (pair_frac); all layers global leaves both untouched
    s_cache = s_kv
    pair_frac = 1.0
    ctx_mix = wp.mix_ctx
    if mp.n_local > 0.0:
        W = mp.window
        l_share = mp.n_local / L
        g_share = (L - mp.n_local) / L
        if s_kv > W:
            s_cache = g_share * s_kv + l_share * W
            local = window_keys(s_kv, W) - window_keys(s_kv - s_q, W)
            pair_frac = g_share + l_share * local / (s_q * s_kv * causal)
        if ctx_mix > W:
            ctx_mix = g_share * ctx_mix + l_share * W

    # -- KV sharding -------------------------------------------------------------------
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
    kv_seq = (s_cache / fcp) * seq_frac * kvh_loc * cw * bkv  # one sequence, one layer
    kv_layer = Bm * kv_seq  # read per layer by one (micro-)batch
    kv_mem_layer = Bd * kv_seq  # held per layer: every sequence of the replica

    # -- roofline ops per layer (matmul FLOPs at the activation dtype's rate) ------------
    # MLA's down-projections (rep_params) are replicated: every TP rank holds and applies them
    attn_w = mp.qo_params / ftp + mp.kv_params / kvw_shard + mp.rep_params
    f_lin = (2.0 * T_lin * (mp.qo_params + mp.kv_params) / ftp / rate
             + 2.0 * T_lin * mp.rep_params / rate)
    b_lin = attn_w * bw + T_lin * d * ba * (2.0 + 2.0 / ftp)

    f_core = ((4.0 * Bm * s_q * s_kv * causal * pair_frac + 4.0 * P_mix * ctx_mix * mix_dim)
              * adim * h / (ftp * fcp))
    qo_traffic = T_lin * qh_loc * adim * ba * 2.0
    if decode:  # the mixed prompt tokens also write their K and V
        b_core = kv_layer + qo_traffic + P_mix * seq_frac * kvh_loc * cw * bkv
    elif mp.mla == 1.0:  # the latent written; the up-projection writes K and V per query
        # head, the core reads them for the keys each query attends to
        kv_dec = Bm * (s_kv / fcp) * seq_frac * qh_loc * (qk + vd) * ba
        b_core = kv_layer + kv_dec * (1.0 + fcp * causal * pair_frac) + qo_traffic
    else:  # the cache written; the keys attended read (windowed layers read fewer)
        b_core = kv_layer * (1.0 + fcp * causal * (pair_frac * s_kv / s_cache)) + qo_traffic

    wide_ffn = ffs == 1 and cp > 1
    # expert parallelism: the experts split over ep of the stage's TP x DP devices (each
    # expert sharded over mtp = tp·dp/ep of them); needs an MoE model, ep | experts, ep |
    # tp·dp, and the FFN sharded by TP only
    fep = float(ep)
    use_ep = ep > 1
    if use_ep:
        valid = (valid and E > 1.0 and int(E) % ep == 0 and (tp * dp) % ep == 0
                 and not wide_ffn)
    if wide_ffn:
        shard = ftp * fcp
        ffn_tokens = T_rep
    else:
        shard = ftp
        ffn_tokens = T_lin
    if E > 1.0:  # expected experts touched by ffn_tokens tokens under uniform top-k routing
        touched = E * (1.0 - (1.0 - k / E) ** ffn_tokens)
    else:
        touched = 1.0
    if use_ep:
        mtp = ftp * dp / fep
        t_grp = T_lin * dp  # the DP replicas' tokens meet in the MoE layer
        f_ffn = 2.0 * T_lin * (k * mp.expert_params * _EP_CAPACITY + mp.router_params) / ftp / rate
        local = (E / fep) * (1.0 - (1.0 - k / E) ** t_grp)
        ffn_read = local * mp.expert_params / mtp + mp.router_params / ftp
    else:
        mtp = shard
        f_ffn = 2.0 * ffn_tokens * mp.ffn_active_params / shard / rate
        ffn_read = (touched * mp.expert_params + mp.router_params) / shard
    b_ffn = ffn_read * bw + ffn_tokens * d * ba * 2.0
    # residual adds + norms outside the GEMMs: read and write the hidden state twice
    b_elem = 4.0 * T_lin * d * ba
    if E > 1.0:  # token permutation; with EP each TP rank permutes its 1/tp slice
        perm = T_lin / ftp if use_ep else ffn_tokens
        b_elem += moe_permute_bytes(k, d, ba, perm) * mp.moe_layers / L

    # -- LM head (last stage; TTFT needs the last position's logits only) ----------------
    f_head = 2.0 * Bm * d * mp.vocab_size / ftp / rate
    b_head = mp.vocab_size * d * bw / ftp + Bm * mp.vocab_size / ftp * 4.0

    # -- communication per layer (effective bytes per tier, link latency) ----------------
    for t in range(4):  # per-tier wire bytes and link latency (add_comm accumulates)
        acc[t] = 0.0
    # messages carry the GEMMs' outputs and the residual stream: 16-bit when the matmul
    # inputs are FP8 / INT8 (W8A8 GEMMs write 16-bit outputs, which the TP all-reduce sums)
    bmsg = ba if ba >= 2.0 else 2.0
    nvls = topo.nvls
    act = T_lin * d * bmsg
    n_ops = OPS_LAYER + (mp.norms - 2.0) + (OPS_MOE if E > 1.0 else 0.0)
    # attention output all-reduce over TP (hierarchical / halving-doubling, collectives.py)
    if tp > 1:
        allreduce_hier(acc, act, ftp, float(stride_tp), cube, sip, a0, a1, a2, nvls)
        n_ops += 1.0
    # FFN output
    if wide_ffn:
        g = ftp * fcp
        span = max(group_span(tp, strides[0]), group_span(cp, strides[1]))
        allreduce_hier(acc, T_rep * d * bmsg, g, span / g, cube, sip, a0, a1, a2, nvls)
        n_ops += 1.0
        if not decode:  # gather the replica's tokens across CP first
            add_comm(acc, tier_cp, allgather_factor(fcp) * T_rep * d * bmsg,
                     (fcp - 1.0) * _alpha(topo, tier_cp))
            n_ops += 1.0
    elif use_ep:
        # dispatch and combine all-to-all over the EP group: each TP rank sends its 1/tp
        # slice of the replica's tokens, k copies, (ep-1)/ep of them off the device; then
        # the TP ranks all-gather their slices' outputs
        span_ep = max(group_span(tp, strides[0]), group_span(dp, strides[3]))
        tier_ep = tier_of(span_ep, cube, sip)
        # dispatch sends the GEMM inputs (activation dtype), combine the experts' outputs
        a2a = T_lin / ftp * k * d * (ba + bmsg) * (fep - 1.0) / fep
        add_comm(acc, tier_ep, a2a, 2.0 * phase_steps(fep) * _alpha(topo, tier_ep))
        n_ops += 2.0
        if tp > 1:
            add_comm(acc, tier_tp, allgather_factor(ftp) * act,
                     phase_steps(ftp) * _alpha(topo, tier_tp))
            n_ops += 1.0
    elif tp > 1:
        allreduce_hier(acc, act, ftp, float(stride_tp), cube, sip, a0, a1, a2, nvls)
        n_ops += 1.0
    # split-K combine for sequence-sharded KV: gather Q, all-reduce partial O + (m, l)
    if kvm == 1:
        g = ftp
        tier_g = tier_tp
    elif kvm == 2:
        g = ftp / kvh
        tier_g = tier_of(int(g) * stride_tp, cube, sip)
    else:
        g = 1.0
        tier_g = 0
    if g > 1.0:
        q_bytes = T_lin * qh_loc * qk * bmsg  # Q and the partial O are 16-bit outputs
        o_bytes = T_lin * qh_loc * (vd * bmsg + 8.0)
        add_comm(acc, tier_g, allgather_factor(g) * q_bytes + allreduce_factor(g) * o_bytes,
                 3.0 * (g - 1.0) * _alpha(topo, tier_g))
        n_ops += 2.0

    # -- CP ring -------------------------------------------------------------------------
    ring_bytes = 0.0
    ring_alpha = 0.0
    if cp > 1:
        steps = fcp - 1.0
        if ring == 0:  # pass KV blocks
            per_step = kv_layer
        else:  # pass Q, and O with the softmax statistics m, l
            per_step = T_lin * qh_loc * (2.0 * adim * bmsg + 8.0)
        ring_bytes = steps * per_step
        ring_alpha = steps * _alpha(topo, tier_cp)

    # -- pipeline ------------------------------------------------------------------------
    lps = math.ceil(L / fpp)
    m = 1.0 if decode else float(Bd)
    # decode: a token passes every stage once, so the critical path is all L layers (the
    # m_dec micro-batches in flight raise throughput, not per-token latency);
    # prefill: m micro-batches through pp stages of lps layers (1F1B bubble)
    layer_mult = L if decode else lps * (m + fpp - 1.0) / m
    pp_bytes = 0.0
    pp_alpha = 0.0
    if pp > 1:
        pp_bytes = (fpp - 1.0) * (T_lin / m) * d * bmsg
        pp_alpha = (fpp - 1.0) * _alpha(topo, tier_pp)

    # -- memory per device ---------------------------------------------------------------
    ffn_w = mp.ffn_params / shard
    if use_ep:
        ffn_w = (E / fep) * mp.expert_params / mtp + mp.router_params / ftp
    w_layer = (attn_w + ffn_w + mp.norm_params) * bw
    emb = mp.embedding_params * bw / ftp
    if pp > 1:
        emb = mp.vocab_size * d * bw / ftp
    f_loc = mp.d_ff * min(k, E) / shard
    act_mem = T_lin * (4.0 * d + 2.0 * f_loc) * ba + Bm * mp.vocab_size / ftp * 4.0
    mem = lps * (w_layer + kv_mem_layer) + emb + act_mem

    tokens = B if decode else B * s_q
    # model FLOPs: the layers' matmuls per processed token (no embedding gather), the LM
    # head for the B positions that need logits, causal attention (windowed, and in the
    # decompressed form for MLA: the model's FLOPs, not the absorbed kernel's)
    body = mp.n_active_params - mp.embedding_params - d
    a_m = 0.5 * (mp.qk_dim + mp.v_dim)
    model_flops = (2.0 * body * B * s_q + 2.0 * d * mp.vocab_size * B
                   + 4.0 * L * B * s_q * s_kv * causal * pair_frac * h * a_m)
    if decode:  # the mixed prompt tokens
        model_flops += 2.0 * body * wp.mix_tokens + 4.0 * L * wp.mix_tokens * ctx_mix * h * a_m

    out.valid = 1.0 if valid else 0.0
    out.n_devices = n_dev
    out.mem_bytes = mem
    out.mem_weights_bytes = lps * w_layer + emb
    out.mem_kv_bytes = lps * kv_mem_layer
    out.mem_act_bytes = act_mem
    out.f_lin = f_lin
    out.b_lin = b_lin
    out.f_core = f_core
    out.b_core = b_core
    out.f_ffn = f_ffn
    out.b_ffn = b_ffn
    out.f_head = f_head
    out.b_head = b_head
    out.ring_bytes = ring_bytes
    out.ring_tier = tier_cp
    out.ring_alpha_ns = ring_alpha
    out.ring_overlap = 0.0 if decode else 1.0
    out.layer_mult = layer_mult
    out.pp_bytes = pp_bytes
    out.pp_tier = tier_pp
    out.pp_alpha_ns = pp_alpha
    out.tokens = tokens
    out.model_flops = model_flops
    out.comm0_bytes = acc[0]
    out.comm1_bytes = acc[1]
    out.comm2_bytes = acc[2]
    out.comm_alpha_ns = acc[3]
    out.tail0_bytes = 0.0
    out.tail1_bytes = 0.0
    out.tail2_bytes = 0.0
    out.tail_alpha_ns = 0.0
    out.tail_mem_bytes = 0.0
    out.b_elem = b_elem
    out.ovl0_bytes = 0.0
    out.ovl1_bytes = 0.0
    out.ovl2_bytes = 0.0
    out.ovl_alpha_ns = 0.0
    out.tail_hide = 0.0
    out.n_ops = n_ops
    out.step_ops = _OPS_STEP + 2.0 * (fpp - 1.0)
    out.step_count = _GRAPH_FLOOR if (decode and wp.cuda_graphs == 1.0) else 1.0
    out.step_seqs = Bd  # the replica's sequences (decode with PP: every micro-batch's)
    out.fixed_ns = 0.0
    # every kernel of the step launched from the host, unless decode replays a CUDA graph;
    # a served step that admits a prompt (mixed prefill + decode) runs eagerly, so of the
    # served steps the share admitting one (prompts admitted per step, at most 1) pay it
    eager = 1.0
    if decode and wp.cuda_graphs == 1.0:
        eager = 0.0
        if wp.mix_tokens > 0.0 and wp.mix_ctx > 0.0:
            eager = min(wp.mix_tokens / (2.0 * wp.mix_ctx), 1.0)
    out.launch_ns = eager * LAUNCH_NS * (layer_mult * n_ops + out.step_ops)
    lowp = 1.0 if wp.act_code != 0.0 else 0.0
    out.lowp_mm = lowp
    out.lowp_head = lowp
    out.core_gemm = 0.0


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
    family (``Topology.fp8_ratio`` / ``int8_ratio`` of 0).
    """
    for code, name, ratio in ((1.0, "fp8", topo.fp8_ratio), (2.0, "int8", topo.int8_ratio)):
        if wp.act_code == code and not ratio > 0.0:
            raise ValueError(
                f"Workload.act_dtype={name!r} needs a family with a {name.upper()} matmul rate "
                f"(Topology.{name}_ratio > 0, e.g. 'H100-SXM'); pass act_dtype='bf16' (or "
                f"weight_dtype={name!r} alone for weight-only quantisation)")
    out = np.empty(layouts.shape[0], dtype=COEF_DTYPE)
    _layout_coeffs(layouts, mp, wp, topo, out, np.zeros(4))
    return out


@jit(inline="always")
def _roof(f, b, P, M, ov):
    """One op's time: the longer of its compute and HBM times plus the part ``1 - ov`` of
    the shorter that does not hide under it; charged to the longer side."""
    tc = f / P
    tm = b / M
    if tc > tm:
        t = tc + (1.0 - ov) * tm
        return t, t, 0.0
    t = tm + (1.0 - ov) * tc
    return t, 0.0, t


@jit(inline="always")
def point(c, hw, eff):
    """One (hardware, layout) pair → the values of :data:`~.schema.OUTPUTS`.

    Per layer: the roofline ops (projections, attention core at its own efficiency,
    FFN), memory-bound element-wise bytes, the CP ring (hidden under the attention core
    where it overlaps), blocking collectives, collectives that overlap the layer's
    compute (prefetched all-gathers: only what outlasts the compute is exposed) and the
    kernel launches. Per step: the LM head, pipeline sends, the once-per-step
    collectives (hidden under ``tail_hide`` of the layers' compute, e.g. bucketed
    gradient reduction under the backward pass), the optimizer's HBM traffic,
    hardware-independent time (``fixed_ns``: PCIe offload), launches and the
    framework's per-step floor.
    """
    if c.valid == 0.0:
        nan = np.nan
        return nan, nan, nan, nan, nan, nan, nan, False
    P = hw[HW.peak_tflops_f16] * 1e3 * eff.compute
    PL = hw[HW.peak_tflops_f16] * 1e3 * eff.lowp  # FLOPs of lowp ops are in 16-bit-rate units
    P_mm = PL if c.lowp_mm == 1.0 else P
    P_head = PL if c.lowp_head == 1.0 else P
    # the attention core at its kernel's factor, or (unfused: batched GEMMs) the matmul one
    PA = hw[HW.peak_tflops_f16] * 1e3 * (eff.compute if c.core_gemm == 1.0 else eff.attention)
    M = hw[HW.bw_hbm_gbs] * eff.memory
    b0 = hw[HW.bw_intra_gbs] * eff.network
    b1 = hw[HW.bw_inter_gbs] * eff.network_inter
    b2 = hw[HW.bw_intersip_gbs] * eff.network_sip

    ov = eff.overlap
    t_lin, cl, ml = _roof(c.f_lin, c.b_lin, P_mm, M, ov)
    t_core, cc, mc = _roof(c.f_core, c.b_core, PA, M, ov)
    t_ffn, cf, mf = _roof(c.f_ffn, c.b_ffn, P_mm, M, ov)
    t_head, ch, mh = _roof(c.f_head, c.b_head, P_head, M, ov)
    t_elem = c.b_elem / M

    rt = c.ring_tier
    rbw = b0 if rt == 0.0 else (b1 if rt == 1.0 else b2)
    ring_t = c.ring_bytes / rbw + c.ring_alpha_ns
    u = eff.contention  # compute a collective running under it takes (Calculon)
    if c.ring_overlap == 1.0:
        exposed = ring_t - t_core
        if exposed < u * ring_t:
            exposed = u * ring_t
    else:
        exposed = ring_t
    comm_l = c.comm0_bytes / b0 + c.comm1_bytes / b1 + c.comm2_bytes / b2 + c.comm_alpha_ns
    # the window prefetched gathers and the gradient tail hide under: the layer's compute
    # and the ring wait it exposes (a faster core then never exposes more than it saves)
    t_work = t_lin + t_core + t_ffn + exposed
    t_ovl = c.ovl0_bytes / b0 + c.ovl1_bytes / b1 + c.ovl2_bytes / b2 + c.ovl_alpha_ns
    ovl = t_ovl - t_work
    free = 0.0  # compute the overlapping collectives leave free (hides the tail)
    if ovl < 0.0:
        free = -ovl
        ovl = 0.0
    if ovl < u * t_ovl:  # the compute it ran under slowed by the contention
        ovl = u * t_ovl
    pt = c.pp_tier
    pbw = b0 if pt == 0.0 else (b1 if pt == 1.0 else b2)
    t_pp = c.pp_bytes / pbw + c.pp_alpha_ns

    mult = c.layer_mult
    t_tail = c.tail0_bytes / b0 + c.tail1_bytes / b1 + c.tail2_bytes / b2 + c.tail_alpha_ns
    hidden = c.tail_hide * mult * free  # the part that hides, at contention u
    if hidden > t_tail:
        hidden = t_tail
    t_tail = t_tail - (1.0 - u) * hidden
    t_tail_mem = c.tail_mem_bytes / M
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
    compute = mult * (cl + cc + cf) + ch
    memory = mult * (ml + mc + mf) + mh + t_tail_mem + mult * t_elem
    comm = mult * (exposed + comm_l) + t_pp + t_tail + mult * ovl + c.fixed_ns
    sec = latency * 1e-9
    throughput = c.tokens / sec
    flops_dev = c.model_flops / c.n_devices / sec
    fits = c.mem_bytes <= hw[HW.pe_hbm_gb] * 1e9 * eff.hbm_usable
    return latency, throughput, flops_dev, compute, memory, comm, t_ops, fits


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
    fits = np.empty((n_hw, n_lay), dtype=np.bool_)
    for i in prange(n_hw):
        h = hw[i]
        for j in range(n_lay):
            r = point(coeffs[j], h, eff)
            lat[i, j] = r[0]
            thr[i, j] = r[1]
            fl[i, j] = r[2]
            comp[i, j] = r[3]
            mem[i, j] = r[4]
            comm[i, j] = r[5]
            over[i, j] = r[6]
            fits[i, j] = r[7]
    return lat, thr, fl, comp, mem, comm, over, fits


@jit(parallel=True)
def fused_best(coeffs, hw, eff, metric_code, sign):
    """Best layout per hardware row without materialising the (hw × layout) tensor.

    Minimises ``sign * OUTPUTS[metric_code]`` over fitting layouts (ties: first layout,
    as ``argmin`` does). Returns ``best_idx`` (-1 where nothing fits) and the outputs
    at the winner as an (n_hw, N_BEST) array (NaN where nothing fits) plus the count of
    fitting layouts per hardware row.
    """
    n_hw = hw.shape[0]
    n_lay = coeffs.shape[0]
    best_idx = np.full(n_hw, -1, dtype=np.int64)
    vals = np.full((n_hw, N_BEST), np.nan)
    n_fit = np.zeros(n_hw, dtype=np.int64)
    for i in prange(n_hw):
        h = hw[i]
        best_s = np.inf
        bi = -1
        nf = 0
        for j in range(n_lay):
            r = point(coeffs[j], h, eff)
            if not r[7]:
                continue
            nf += 1
            if metric_code == 0:
                s = sign * r[0]
            elif metric_code == 1:
                s = sign * r[1]
            else:
                s = sign * r[2]
            if s < best_s:
                best_s = s
                bi = j
        n_fit[i] = nf
        best_idx[i] = bi
        if bi >= 0:
            r = point(coeffs[bi], h, eff)
            vals[i, 0] = r[0]
            vals[i, 1] = r[1]
            vals[i, 2] = r[2]
            vals[i, 3] = r[3]
            vals[i, 4] = r[4]
            vals[i, 5] = r[5]
            vals[i, 6] = r[6]
    return best_idx, vals, n_fit


#: :func:`point` compiled as a function of its own (not inlined), for :func:`point_one`
_point_call = jit()(point.py_func)


@jit()
def point_one(coeffs, hw_row, eff):
    """:func:`point` for one coefficient record (``coeffs[0]``) and one hardware row,
    serially: the single-configuration fast path (no thread pool, no output arrays)."""
    return _point_call(coeffs[0], hw_row, eff)
