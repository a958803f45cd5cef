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
* expert parallelism (MoE, ``ep`` > 1): routed experts whole on ep of the stage's
  TP x CP x DP devices; dispatch and combine all-to-all per MoE layer (2 forward,
  2 backward, +2 with full recompute) over the EP group's tiers; expert states and
  gradients over the expert-data-parallel group (tp·cp·dp/ep), dense ones over DP x CP;
  balanced routing;
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
from .inference import (
    _OPS_LAYER,
    _OPS_MOE,
    _alpha,
    add_comm,
    moe_permute_bytes,
    placement,
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
def activation_bytes_per_layer(s, b, d, a, t, recompute, sp, fp8, flash):
    """Korthikanti et al. 2022, Table 2 (16-bit activations) for one layer, one micro-batch.

    Per token and hidden unit: 10 bytes outside the TP shards without sequence
    parallelism (the two norm inputs 4, the QKV and FC1 inputs 4, two dropout masks 2)
    and 24 inside (Q, K, V 6, the attention output 2, the GeLU input 8, the FC2 input
    8), + 5·a·s/d of attention scores unless they are recomputed (or never stored, as
    with flash attention: ``recompute`` 1). ``fp8``: Transformer Engine's ``Linear``
    saves the FP8 cast of its input (1 byte instead of 2) for the weight gradient: the
    QKV and FC1 inputs take 2 bytes off the replicated part, FC2's 4 off the sharded
    one; the output projection's FP8 input is 1 more byte where a flash core keeps its
    16-bit output O for its own backward (``flash``: 24 → 21), 1 less where nothing else
    needs O (unfused: 24 → 19)."""
    if recompute == 2:  # full: only each layer's input is kept
        return 2.0 * s * b * d / (t if sp else 1.0)
    rep = 8.0 if fp8 else 10.0
    shard = 24.0
    if fp8:
        shard = 21.0 if flash else 19.0
    if sp:
        per = (rep + shard) / t
    else:
        per = rep + shard / t
    if recompute == 0:
        per += 5.0 * a * s / (d * t)
    return s * b * d * per


@jit()
def op_sac_bytes_per_layer(s, b, d, kv_w, f_w, gated, t, sp):
    """Per-operator selective checkpointing as torchtitan applies it (16-bit): a layer
    keeps its input, the outputs of its matmuls except every second one (Q, V, the
    attention output, the first FFN matmul and, gated, the down projection; K, O and the
    gated up projection are recomputed) and, under TP, the reduce-scattered outputs.
    ``kv_w``: local K/V width (KV heads on this rank x head_dim); ``f_w``: local width of
    the first FFN matmul per token (top_k x d_ff for MoE)."""
    width = d / (t if sp else 1.0) + 2.0 * d / t + kv_w + f_w
    if gated:
        width += d  # partial sums of the down projection: full width before the reduce
    if t > 1.0:
        width += 2.0 * d / t  # reduce-scatter outputs of attention and FFN
    return 2.0 * s * b * width


@jit()
def _coll(acc, nbytes, g, k, tier, topo, allreduce, count, in_switch):
    """Add ``count`` collectives of ``nbytes`` over g members (k per cube) spanning
    ``tier``: a ring inside a cube, hierarchical across cubes (see ``hier_factors``).
    ``allreduce``: an all-reduce, or a reduce-scatter + all-gather pair (sequence
    parallelism) of the same traffic; ``in_switch``: a true all-reduce, which a cube whose
    switch reduces (``topo.nvls``) runs in the switch (``collectives.in_switch_wire``)."""
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
    acc[3] += count * (h0 * topo.alpha_intra_ns + h1 * _alpha(topo, tier))


@jit()
def ep_groups(ep, tp, cp, dp, strides, cube):
    """The expert-parallel group and the expert-data-parallel group of a stage.

    The EP group is the first ``ep`` of the stage's TP x CP x DP devices, innermost group
    (smallest stride) first; the EDP group (the devices holding the same experts) is the
    rest. Returns ``(ok, span_ep, k_ep, span_edp, k_edp)``: ``ok`` is False when ``ep``
    does not split the groups evenly (it must be a product of whole inner groups times a
    divisor of the next one); ``k_*`` are members per cube."""
    sizes = (tp, cp, dp)
    st = (strides[0], strides[1], strides[3])
    order = [0, 1, 2]
    for a in range(3):  # by stride, innermost first
        for b in range(2 - a):
            if st[order[b]] > st[order[b + 1]]:
                order[b], order[b + 1] = order[b + 1], order[b]
    rem = ep
    ok = True
    span_ep = 1.0
    span_edp = 1.0
    k_ep = 1.0
    k_edp = 1.0
    for j in order:
        n = sizes[j]
        if n == 1:
            continue
        if rem >= n:
            ok = ok and rem % n == 0
            take = n
            rem = rem // n
        else:
            ok = ok and n % rem == 0
            take = rem
            rem = 1
        if take > 1:
            span_ep = max(span_ep, float(take * st[j]))
            k_ep *= members_per_cube(float(take), float(st[j]), cube)
        rest = n // take
        if rest > 1:
            span_edp = max(span_edp, float(n * st[j]))
            k_edp *= members_per_cube(float(rest), float(take * st[j]), cube)
    ok = ok and rem == 1
    return ok, span_ep, min(k_ep, cube), span_edp, min(k_edp, cube)


@jit()
def _block_span(o, k, E, per):
    """Groups of ``per`` consecutive experts that experts o … o + k − 1 (mod E) touch (E /
    per groups when per divides E; an uneven split has a last, partial block)."""
    last = o + k - 1
    if last < E:
        return float(last // per - o // per + 1)
    blocks = float((E - 1) // per + 1)
    return min(blocks, blocks - o // per + (last - E) // per + 1.0)  # wraps once


@jit()
def eager_elem_bytes(d, tok_res, rope_elems, ffn_elems, gated):
    """Extra HBM bytes per layer and pass of PyTorch-eager element-wise ops over fused ones,
    as torchtitan's Llama writes them (``torchtitan/models/norms.py`` ``RMSNorm`` and
    ``models/llama/model.py`` ``apply_rotary_emb`` / ``FeedForward`` at 9dec370): an RMSNorm
    upcasts, squares, means, scales, downcasts and multiplies by its weight, 36 bytes per
    element against a fused kernel's 4 (two per layer); RoPE upcasts Q and K, multiplies by
    the complex frequencies and downcasts, 20 against 4; the SwiGLU product ``silu(a) * b``
    is a second kernel, 10 bytes per FFN element against 6 (``ffn_elems`` counts gate, up
    and output: a third of them is the product's width)."""
    extra = tok_res * 2.0 * 32.0 * d + rope_elems * 16.0
    if gated == 1.0:
        extra += ffn_elems / 3.0 * 4.0
    return extra


@jit()
def fp8_cast_bytes(mp, T, tok_res, ffn_tokens, ftp, shard, ep_div, bw, fwd_passes):
    """HBM bytes per layer and micro-batch of Transformer Engine's FP8 casts: each
    forward pass casts every GEMM's activation operand, the backward every GEMM's output
    gradient; a cast reads the 16-bit tensor and writes an FP8 copy and its transpose
    (the weight-gradient operand): ``bw + 2`` bytes per element, 2 where the cast is
    fused into the norm before the GEMM (QKV, and FC1 of dense layers: the norm's own
    read and write are element-wise bytes already).

    Per token on one device, layer-averaged over dense and MoE layers: the QKV input
    (``d`` on the sequence-parallel shard), the O input (query width / tp), the FC1
    input (``d`` per routed copy; ``ep_div`` = tp when EP spreads a rank's T/tp tokens'
    copies), the FC2 input (``ffn_width`` / shard: every copy's expert width); the
    gradients of the QKV output (query + KV width / tp), the O output (``d``), the
    gate/up output and the FC2 output (``d`` per copy). MLA's projections are read as
    query and KV widths (an approximation).
    """
    d = mp.d_model
    s_m = mp.moe_layers / mp.n_layers
    k = mp.top_k if s_m > 0.0 else 1.0
    q_w = mp.qo_params / (2.0 * d) / ftp
    qkv_w = (mp.qo_params / 2.0 + mp.kv_params) / d / ftp
    ff = ffn_tokens * mp.ffn_width / shard
    up = (2.0 if mp.gated_ffn == 1.0 else 1.0) * ff
    routed = ffn_tokens * s_m * k / ep_div
    dense = ffn_tokens * (1.0 - s_m)
    fused = tok_res * d * (2.0 - s_m)
    inputs = T * q_w + routed * d + ff
    grads = T * qkv_w + T * d + up + (routed + dense) * d
    return fwd_passes * (2.0 * fused + (bw + 2.0) * inputs) + (bw + 2.0) * grads


@jit()
def ep_dispatch_copies(E, k, g, kc, round_robin):
    """Expected (ranks, cubes) that one token's k routed experts reach: E experts placed
    contiguously over g EP ranks, kc of them per cube (g / kc cubes).

    Random routing (k distinct experts drawn uniformly): g·(1 − C(E − E/g, k) / C(E, k))
    ranks, and the same with g / kc cubes. ``round_robin`` (NeMo Automodel's
    ``FakeBalancedGate``, its benchmarks' router): token i takes experts i·k … i·k + k − 1
    (mod E), so the average runs over the E start offsets (i·k) mod E."""
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
        tot_r += _block_span(o, ik, ie, per_r)
        tot_c += _block_span(o, ik, ie, per_c)
    return tot_r / ie, tot_c / ie


@jit()
def _grad_reduce(tail, step, params, G, k, tier, zs, m, gb, bw, topo):
    """The data-parallel gradient reduction of ``params`` over G members (see
    ``_train_row``): ZeRO 2-3 a reduce-scatter per micro-batch (ZeRO 2: + one all-gather
    of the updated parameters), ZeRO 1 one reduce-scatter + one all-gather, ZeRO 0 one
    all-reduce. ``gb``: bytes per gradient, ``bw``: per gathered parameter."""
    if G <= 1.0:
        return
    grads = params * gb
    if zs >= 2:  # gradients partitioned: reduce-scatter after every micro-batch
        _coll(tail, grads, G, k, tier, topo, False, m, False)
        if zs == 2:  # then all-gather the updated 16-bit parameters once
            _coll(step, params * bw, G, k, tier, topo, False, 1.0, False)
    elif zs == 1:  # reduce-scatter the gradients, all-gather the updated parameters
        _coll(tail, grads, G, k, tier, topo, False, 1.0, False)
        _coll(step, params * bw, G, k, tier, topo, False, 1.0, False)
    else:  # one all-reduce per step
        _coll(tail, grads, G, k, tier, topo, True, 1.0, True)


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
    ep = lay[LAYOUT.ep]

    L = mp.n_layers
    d = mp.d_model
    h = mp.n_heads
    kvh = mp.n_kv_heads  # MLA: the decompressed K and V, one head per query head
    hd = mp.head_dim
    adim = 0.5 * (mp.qk_dim + mp.v_dim)  # mean of the score and value widths per head
    bw = mp.bytes_per_param
    # FP8 primary weights (Megatron --fp8-param-gather): 1-byte parameter copies
    pw = 1.0 if wp.w_bytes == 1.0 else bw
    fp8_saved = wp.a_bytes == 1.0  # Transformer Engine keeps FP8 copies of GEMM inputs
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
    vs = wp.virtual_stages
    flash = wp.attention != 1.0  # flash or flash2 (no s^2 scores kept)
    fw = int(wp.framework)
    overlap = wp.grad_overlap == 1.0
    offload = int(wp.offload)
    cube = topo.pes_per_cube

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
    k_tp = members_per_cube(ftp, float(strides[0]), cube)
    # the gradient / ZeRO group: DP x CP (CP ranks hold the same parameters)
    g_sh = fdp * fcp
    k_sh = min(cube, members_per_cube(fdp, float(strides[3]), cube)
               * members_per_cube(fcp, float(strides[1]), cube))
    tier_sh = max(tier_dp, tier_cp) if cp > 1 else tier_dp
    wide = ffs == 1 and cp > 1

    # expert parallelism (Megatron-Core's MoE parallel folding with expert TP 1): the
    # routed experts split over ep of the stage's TP x CP x DP devices, each expert whole
    # on its rank; the tp·cp·dp/ep devices holding the same experts (expert data
    # parallelism) reduce their gradients and shard their states. MoE only, ep | experts,
    # the FFN sharded by TP only, sequence parallelism when tp > 1 (as Megatron requires)
    use_ep = ep > 1
    fep = float(ep)
    f_edp = 1.0
    k_ep = 1.0
    k_edp = 1.0
    tier_ep = 0
    tier_edp = 0
    if use_ep:
        ok, span_ep, k_ep, span_edp, k_edp = ep_groups(ep, tp, cp, dp, strides, cube)
        valid = (valid and ok and E > 1.0 and int(E) % ep == 0 and not wide
                 and (sp or tp == 1))
        f_edp = ftp * fcp * fdp / fep
        tier_ep = tier_of(int(span_ep), int(cube), int(topo.pes_per_sip))
        tier_edp = tier_of(int(span_edp), int(cube), int(topo.pes_per_sip))

    m = B / (fdp * mb)  # micro-batches per replica per step
    T = mb * s / fcp  # tokens per device per micro-batch
    causal = 1.0 - (s - 1.0) / (2.0 * s)
    pair_frac = 1.0  # attended (query, key) pairs over full causal attention, layer average
    if mp.n_local > 0.0 and s > mp.window:  # local layers attend to the last window tokens
        l_share = mp.n_local / L
        pair_frac = ((1.0 - l_share)
                     + l_share * window_keys(s, mp.window) / (s * s * causal))
    p_lin = 4.0 if rc == 2 else 3.0
    p_attn = p_lin  # passes over the attention projections, the FFN, element-wise ops
    p_ffn = p_lin
    p_elem = p_lin
    gated = mp.gated_ffn == 1.0
    if rc == 3:  # per-op SAC: every second matmul of a layer is recomputed
        p_attn = 3.5  # K and O of Q, K, V, O: half the projection FLOPs
        p_ffn = 3.0 + (1.0 / 3.0 if gated else 0.5)  # up of gate/up/down, or fc2 of fc1/fc2
        p_elem = 4.0  # norms, RoPE, activation, residual adds: all recomputed
    if flash:  # forward, backward at 2.5x (scores recomputed inside), + full recompute
        p_core = 4.5 if rc == 2 else 3.5
    else:
        p_core = 3.0 if rc == 0 else 4.0

    kvh_loc = kvh / ftp if ftp <= kvh else 1.0
    # MLA's down-projections (rep_params) are duplicated on every TP rank
    attn_w = mp.qo_params / ftp + mp.kv_params / min(ftp, kvh) + mp.rep_params
    f_lin = (p_attn * 2.0 * T * (mp.qo_params + mp.kv_params) / ftp
             + p_attn * 2.0 * T * mp.rep_params)
    b_lin = p_attn * (attn_w * bw + T * d * bw * (2.0 + 2.0 / ftp))

    kv_block = mb * (s / fcp) * kvh_loc * (mp.qk_dim + mp.v_dim) * bw
    qo = 2.0 * mb * (s / fcp) * (h / ftp) * adim * bw
    if flash:  # causal (and windowed) pairs only
        f_core = p_core * 4.0 * mb * s * s * causal * pair_frac * adim * h / (ftp * fcp)
        b_core = p_core * (kv_block * (1.0 + fcp * causal * pair_frac) + qo)
    else:
        # unfused (Megatron-LM's CoreAttention): batched matmuls over all s x s scores, the
        # causal mask applied in the softmax; the score matrix is written by QK^T, read and
        # written by the fused scale-mask-softmax and read by AV: 4 x bw bytes per score
        scores = mb * (h / ftp) * (s / fcp) * s
        f_core = p_core * 4.0 * mb * s * s * adim * h / (ftp * fcp)
        b_core = p_core * (kv_block * (1.0 + fcp) + qo + 4.0 * bw * scores)

    shard = ftp * fcp if wide else ftp
    ffn_tokens = mb * s if wide else T
    touched = min(E, ffn_tokens * k) if E > 1.0 else 1.0
    # EP: the same FLOPs per device (each rank's T/tp tokens, k copies, spread evenly over
    # the EP ranks: routing imbalance is not modelled); each rank reads its local experts
    # whole (of E/ep, those its T·k/tp routed copies touch)
    f_ffn = p_ffn * 2.0 * ffn_tokens * mp.ffn_active_params / shard
    if use_ep:
        local = min(E / fep, T * k / ftp)
        b_ffn = p_ffn * ((local * mp.expert_params + mp.router_params / ftp) * bw
                         + 2.0 * ffn_tokens * d * bw)
    else:
        b_ffn = p_ffn * ((touched * mp.expert_params + mp.router_params) / shard * bw
                         + 2.0 * ffn_tokens * d * bw)

    f_head = m * 3.0 * 2.0 * T * d * mp.vocab_size / ftp
    b_head = m * (3.0 * mp.vocab_size * d * bw / ftp + 2.0 * T * mp.vocab_size / ftp * 4.0)

    # element-wise, memory-bound: 2 norms (read + write), 2 residual adds (2 reads + 1
    # write) on the (SP-sharded) residual stream; RoPE on Q and K; the FFN activation
    # (SwiGLU reads 2 d_ff and writes d_ff, GeLU reads and writes d_ff)
    tok_res = T / ftp if sp else T
    ffn_elem = mp.ffn_active_params / d if d > 0.0 else 0.0  # ~3 d_ff gated, 2 d_ff GeLU
    b_elem = p_elem * bw * (tok_res * 10.0 * d + T * 2.0 * (h / ftp + kvh_loc) * hd
                           + ffn_tokens * ffn_elem / shard)
    if wp.eager == 1.0:  # PyTorch eager: unfused norms, RoPE and SwiGLU product
        b_elem += p_elem * eager_elem_bytes(d, tok_res, T * (h / ftp + kvh_loc) * hd,
                                            ffn_tokens * ffn_elem / shard, mp.gated_ffn)
    ep_div = ftp if use_ep else 1.0  # EP: a rank permutes its sequence-parallel T/tp slice
    if E > 1.0:  # token permutation, every pass over the FFN
        b_elem += p_ffn * moe_permute_bytes(k, d, bw, ffn_tokens / ep_div) * mp.moe_layers / L
    if prec == 3 and topo.fp8_ratio > 0.0:
        b_elem += fp8_cast_bytes(mp, T, tok_res, ffn_tokens, ftp, shard, ep_div, bw,
                                 p_lin - 2.0)

    # per layer, per micro-batch communication
    acc = np.zeros(4)  # per-tier wire bytes and link latency (add_comm accumulates)
    ovl = np.zeros(4)  # collectives that overlap the layer's compute (only the excess shows)
    act = T * d * bw
    # collectives per sub-block (attention, FFN); per-op SAC re-gathers the sequence-
    # parallel input of each recomputed matmul (half an all-reduce's traffic)
    n_half = 3.0 if rc == 2 else (2.5 if rc == 3 else 2.0)
    # TP communication overlap (Megatron's userbuffers --tp-comm-overlap): the
    # sequence-parallel all-gathers / reduce-scatters run pipelined with the adjacent
    # GEMMs, so only what outlasts the layer's compute shows
    tp_acc = ovl if wp.tp_overlap == 1.0 else acc
    # kernels per layer and micro-batch, each paying its fixed device-side cost
    # (Efficiency.op_latency_ns; the host launches them ahead of the device, so no launch
    # time): the forward's per pass over the element-wise ops (the backward counts twice,
    # a recomputed forward once more), one per TP collective and EP all-to-all
    n_ops = p_elem * (_OPS_LAYER + (mp.norms - 2.0)
                      + (_OPS_MOE * mp.moe_layers / L if E > 1.0 else 0.0))
    if tp > 1:
        n_ops += 2.0 * n_half
        _coll(tp_acc, act, ftp, k_tp, tier_tp, topo, True, n_half, not sp)
    ffn_tp = 1.0  # share of the layers whose FFN runs TP-sharded with its TP collectives
    if use_ep:  # dense layers and shared experts keep them; routed experts do not (ETP 1)
        ffn_tp = (L - mp.moe_layers + (mp.moe_layers if mp.shared_experts > 0.0 else 0.0)) / L
        # dispatch + combine all-to-all over the EP group per MoE layer: forward 2,
        # backward 2, +2 with full recompute; each rank's T/tp tokens, k copies
        n_a2a = (6.0 if rc == 2 else 4.0) * mp.moe_layers / L
        n_ops += n_a2a
        if wp.moe_per_rank == 1.0:  # DeepEP: once per destination rank, once per node
            # over the scale-out tier (forwarded inside the node over NVLink)
            c_rank, c_cube = ep_dispatch_copies(E, k, fep, k_ep, wp.moe_round_robin == 1.0)
            a0, a1, h0, h1 = node_dedup_alltoall_factors(fep, k_ep, topo.nics_per_cube, cube,
                                                         c_rank, c_cube)
            msg = T / ftp * d * bw  # one token row
        else:  # per routed expert (Megatron's alltoall dispatcher): k copies
            a0, a1, h0, h1 = alltoall_factors(fep, k_ep, topo.nics_per_cube, cube)
            msg = T / ftp * k * d * bw
        # Megatron-Core's EP overlap (moe_a2a_overlap): one micro-batch's dispatch and
        # combine run under another's compute
        a2a = ovl if wp.moe_a2a_overlap == 1.0 else acc
        a2a[0] += n_a2a * a0 * msg
        a2a[tier_ep] += n_a2a * a1 * msg
        a2a[3] += n_a2a * (h0 * topo.alpha_intra_ns + h1 * _alpha(topo, tier_ep))
    if wide:
        g = ftp * fcp
        full_act = mb * s * d * bw
        wire = allreduce_factor(g)
        if tier_tpcp == 0:
            wire = in_switch_wire(wire, full_act, topo.nvls)
        add_comm(acc, tier_tpcp, n_half * wire * full_act,
                 n_half * 2.0 * (g - 1.0) * _alpha(topo, tier_tpcp))
        add_comm(acc, tier_cp, n_half * allgather_factor(fcp) * full_act,
                 n_half * (fcp - 1.0) * _alpha(topo, tier_cp))
    elif tp > 1:
        _coll(tp_acc, act, ftp, k_tp, tier_tp, topo, True, n_half * ffn_tp, not sp)

    ffn_w = mp.ffn_params / shard
    exp_layer = 0.0  # local routed-expert weights per layer (EP), sharded over EDP
    if use_ep:
        ffn_w = mp.router_params / ftp  # router, shared experts, dense layers: by TP
        exp_layer = E / fep * mp.expert_params
    layer_dense = attn_w + ffn_w + mp.norm_params
    layer_params = layer_dense + exp_layer if use_ep else layer_dense
    # prefetched ZeRO-3 / FSDP parameter all-gathers overlap the compute too
    n_ag = 3.0 if rc == 2 else 2.0  # gathered for forward, backward (and recompute)
    if zs == 3 and g_sh > 1.0:
        _coll(ovl, layer_dense * pw, g_sh, k_sh, tier_sh, topo, False, n_ag, False)
    if zs == 3 and f_edp > 1.0:
        _coll(ovl, exp_layer * pw, f_edp, k_edp, tier_edp, topo, False, n_ag, False)

    ring_bytes = 0.0
    ring_alpha = 0.0
    if cp > 1:
        n_ring = 4.0 if rc == 2 else (3.0 if (rc == 0 or flash) else 4.0)
        if ring == 0:
            per_step = kv_block
        else:
            per_step = mb * (s / fcp) * (h / ftp) * (2.0 * adim * bw + 8.0)
        ring_bytes = n_ring * (fcp - 1.0) * per_step
        ring_alpha = n_ring * (fcp - 1.0) * _alpha(topo, tier_cp)

    lps = math.ceil(L / fpp)
    slots = m + (fpp - 1.0) / vs  # interleaved 1F1B: bubble (p - 1) / (v m)
    layer_mult = lps * slots
    pp_bytes = 0.0
    pp_alpha = 0.0
    if pp > 1:  # Megatron scatter/gather: each send carries 1/TP of the activation
        n_p2p = 2.0 * (vs * m + fpp - 2.0)
        pp_bytes = n_p2p * act / ftp
        pp_alpha = n_p2p * _alpha(topo, tier_pp)

    # parameters on the busiest device
    emb = mp.vocab_size * d / ftp if pp > 1 else mp.embedding_params / ftp
    p_dense = lps * layer_dense + emb  # over DP x CP
    p_exp = lps * exp_layer  # local experts (EP): over the EDP group
    p_dev = p_dense + p_exp if use_ep else p_dense

    tail = np.zeros(4)  # once-per-step wire bytes per tier and latency
    step = np.zeros(4)  # once-per-step collectives that cannot overlap (after the step)
    _grad_reduce(tail, step, p_dense, g_sh, k_sh, tier_sh, zs, m, gb, pw, topo)
    if use_ep:  # expert gradients over the expert-data-parallel group only
        _grad_reduce(tail, step, p_exp, f_edp, k_edp, tier_edp, zs, m, gb, pw, topo)
    hide = 0.0
    if overlap:  # bucketed: hides under the backward of the micro-batches it follows
        back = 2.0 / p_ffn
        hide = back * (m if zs >= 2 else 1.0) / slots
    opt_share = p_dev / g_sh if zs >= 1 else p_dev
    if use_ep and zs >= 1:
        opt_share = p_dense / g_sh + p_exp / f_edp
    tail_mem = 0.0 if offload >= 1 else opt_share * (ADAM_BYTES_PER_PARAM + gb)

    # model states (Megatron: 16-bit or FP8 weights, grad_bytes main grads, fp32 master
    # weights and Adam, /d with the distributed optimizer; DeepSpeed's per-stage formulas
    # otherwise); experts over EDP
    G = g_sh
    largest = max(layer_params, mp.vocab_size * d / ftp)
    if fw == 1:  # Megatron: weights + main grads whole, fp32 master + Adam (distributed: /d)
        states = (pw + gb + (12.0 if zs == 0 else 12.0 / G)) * p_dense
        if use_ep:  # routed experts over the expert-data-parallel group
            states += (pw + gb + (12.0 if zs == 0 else 12.0 / f_edp)) * p_exp
    else:
        whole, part = zero_state_bytes(zs, prec != 2, fw == 2)
        # ZeRO-3 holds the fully gathered largest layer (its parameters + gradients)
        states = whole * (largest if zs == 3 else p_dev) + part * p_dense / G
        if use_ep:  # routed experts sharded over the expert-data-parallel group
            states += part * p_exp / f_edp
    host = 0.0
    fixed = 0.0
    if offload >= 1:  # ZeRO-Offload: fp32 master, m, v and the 16-bit gradients on host
        p_gpu = p_dev / G if zs == 3 else p_dev
        if use_ep and zs == 3:
            p_gpu = p_dense / G + p_exp / f_edp
        states = 2.0 * p_gpu + (4.0 * largest if zs == 3 else 0.0)
        host = opt_share * 14.0
        pcie = topo.pcie_gbs if topo.pcie_gbs > 0.0 else 1.0
        fixed = opt_share * (2.0 + bw) / pcie  # gradients down, updated weights up
        if offload == 2:  # ZeRO-Infinity: parameters fetched for every pass
            states = 4.0 * largest
            host += 2.0 * p_gpu
            fixed += p_lin * m * p_gpu * bw / pcie
    valid = valid and host <= topo.host_mem_gb * 1e9

    rc_mem = 1 if (flash and rc == 0) else rc  # flash keeps no s^2 scores
    if rc == 3:
        act_layer = op_sac_bytes_per_layer(s / fcp, mb, d, kvh_loc * hd, mp.ffn_width / ftp,
                                           gated, ftp, sp)
    else:
        act_layer = activation_bytes_per_layer(s / fcp, mb, d, h, ftp, rc_mem, sp, fp8_saved,
                                               flash)
    inflight = min(fpp, m)
    if vs > 1.0 and pp > 1:  # interleaving holds more micro-batches on the first stage
        inflight = inflight * (1.0 + (fpp - 1.0) / (fpp * vs))
    act_mem = lps * inflight * act_layer
    if rc == 2:  # the layer being recomputed holds its full working set
        act_mem += activation_bytes_per_layer(s / fcp, mb, d, h, ftp, 1 if flash else 0, sp,
                                              fp8_saved, flash)
    # the loss's logit buffers at its peak: a fused / compiled loss keeps the fp32
    # softmax (4 B per element); PyTorch's eager cross_entropy(logits.float()) the fp32
    # log-softmax and the fp32 gradients of its output and input (12 B)
    logits = T * mp.vocab_size / ftp * (EAGER_LOSS_BYTES if wp.eager_loss == 1.0
                                        else FUSED_LOSS_BYTES)
    mem = states + act_mem + logits

    tokens = B * s
    # 6 N tokens over the matmul weights (the embedding gather is no matmul; a tied
    # embedding still is the LM head) + causal attention
    mm_params = mp.n_active_params - mp.embedding_params + mp.vocab_size * d
    model_flops = (6.0 * mm_params * tokens
                   + 12.0 * L * B * s * s * causal * pair_frac * h * adim)

    out.valid = 1.0 if valid else 0.0
    out.n_devices = n_dev
    out.mem_bytes = mem
    out.mem_weights_bytes = states
    out.mem_kv_bytes = 0.0
    out.mem_act_bytes = act_mem + logits
    slow = 2.0 if prec == 2 else 1.0  # fp32 (TF32) matmuls run at half the 16-bit peak
    mm = slow
    # fp8 GEMMs at train_compute x fp8_ratio (Efficiency.lowp_compute is inference's)
    out.lowp_mm = 0.0
    out.lowp_head = 0.0
    # an unfused core's QK^T and AV are batched 16-bit GEMMs: the matmul factor at the
    # family's matmul share; a fused / flash core runs at the attention kernel's factor
    out.core_gemm = 0.0 if flash else 1.0
    if prec == 3 and topo.fp8_ratio > 0.0:  # fp8 GEMMs; attention and head stay bf16
        mm = 1.0 / topo.fp8_ratio
    # the family's achievable matmul fraction relative to Hopper's (GEMMs, not attention)
    mm /= topo.mm_ratio
    out.f_lin = mm * f_lin
    out.b_lin = b_lin
    # a FlashAttention-2-class core (flash2) runs at the family's fa2_ratio of the native
    # kernel's rate (Hopper: no warpgroup MMA / TMA in FA2)
    if flash:
        out.f_core = (slow / topo.fa2_ratio if wp.attention == 2.0 else slow) * f_core
    else:
        out.f_core = slow / topo.mm_ratio * f_core
    out.b_core = b_core
    out.f_ffn = mm * f_ffn
    out.b_ffn = b_ffn
    out.f_head = slow / topo.mm_ratio * f_head
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
    # the non-overlappable once-per-step collectives ride on the blocking per-layer
    # terms, spread over the layer slots
    out.comm0_bytes = acc[0] + step[0] / layer_mult
    out.comm1_bytes = acc[1] + step[1] / layer_mult
    out.comm2_bytes = acc[2] + step[2] / layer_mult
    out.comm_alpha_ns = acc[3] + step[3] / layer_mult
    out.tail0_bytes = tail[0]
    out.tail1_bytes = tail[1]
    out.tail2_bytes = tail[2]
    out.tail_alpha_ns = tail[3]
    out.b_elem = b_elem
    out.ovl0_bytes = ovl[0]
    out.ovl1_bytes = ovl[1]
    out.ovl2_bytes = ovl[2]
    out.ovl_alpha_ns = ovl[3]
    out.tail_hide = hide
    out.n_ops = n_ops
    out.step_ops = 0.0
    out.step_count = 0.0
    out.step_seqs = 0.0
    out.fixed_ns = fixed
    out.launch_ns = 0.0


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
