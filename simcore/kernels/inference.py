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

The model (DESIGN.md): per op ``max(FLOPs/peak, bytes/bw_hbm)``; TP all-reduces of the
activations; CP ring attention passing KV blocks (``kv``) or Q, O and the softmax
statistics (``qoml``), overlapped with attention compute in prefill; ``kv_shard_mode``
for TP beyond the KV heads; ``ffn_shard_scope`` TP or TP+CP; PP p2p and bubble; DP
splits the batch. ``simcore.kernels.inference_ref`` is the plain-python twin.
"""

from __future__ import annotations

import math

import numpy as np

from ._numba import jit, prange
from .collectives import allgather_factor, allreduce_factor, tier_of

# --- packed parameter vectors -------------------------------------------------------
M_L, M_D, M_H, M_KVH, M_HD, M_FF, M_V, M_E, M_K, M_BW, M_BKV = range(11)
M_QO, M_KVW, M_FFNW, M_EXPERT, M_ROUTER, M_FFN_ACTIVE, M_NORM, M_N_ACTIVE, M_EMB = range(11, 20)
N_MODEL = 20
W_MODE, W_B, W_SQ, W_SKV, W_MICRO, W_RECOMPUTE, W_SP, W_ZERO, W_GRAD_BYTES, W_PREC = range(10)
N_WORK = 10
PRECISION_CODES = {"fp16": 0, "bf16": 1, "fp32": 2}
T_CUBE, T_SIP, T_NDEV, T_A0, T_A1, T_A2 = range(6)
E_C, E_M, E_N, E_HBM = range(4)

MODE_CODES = {"prefill": 0, "decode": 1, "train": 2}
RECOMPUTE_CODES = {"none": 0, "selective": 1, "full": 2}

# --- coefficient row ----------------------------------------------------------------
(C_VALID, C_NDEV, C_MEM, C_F_LIN, C_B_LIN, C_F_CORE, C_B_CORE, C_F_FFN, C_B_FFN, C_F_HEAD,
 C_B_HEAD, C_COMM0, C_COMM1, C_COMM2, C_COMM_ALPHA, C_RING_BYTES, C_RING_TIER, C_RING_ALPHA,
 C_RING_OVERLAP, C_LAYER_MULT, C_PP_BYTES, C_PP_TIER, C_PP_ALPHA, C_TOKENS, C_MODEL_FLOPS,
 C_TAIL0, C_TAIL1, C_TAIL2, C_TAIL_ALPHA, C_TAIL_MEM, C_MEM_STATIC, C_MEM_KV, C_MEM_ACT) = range(33)
N_COEF = 33
#: memory parts per device: weights (inference) or ZeRO model states (training), KV cache,
#: activations (+ logits); they add up to ``C_MEM``.
MEM_PARTS = {"mem_weights_bytes": C_MEM_STATIC, "mem_kv_bytes": C_MEM_KV,
             "mem_act_bytes": C_MEM_ACT}

#: Outputs of :func:`point`, in order.
OUTPUTS = ("latency_ns", "throughput_tok_s", "flops_per_device", "compute_ns", "memory_ns",
           "comm_ns", "fits")
#: The numeric outputs (all but ``fits``) that :func:`fused_best` returns per winner.
N_BEST = len(OUTPUTS) - 1

# placement codes -> order of groups (0 tp, 1 cp, 2 pp, 3 dp), innermost first
_ORDERS = np.array([
    [0, 1, 2, 3],  # tp inner, cp inner
    [1, 0, 2, 3],  # tp outer (just outside CP), cp inner
    [0, 2, 3, 1],  # tp inner, cp outermost
    [2, 3, 1, 0],  # tp outside CP, CP outermost
], dtype=np.int64)


def pack_model(model) -> np.ndarray:
    """Model spec → float vector (indices ``M_*``)."""
    v = np.zeros(N_MODEL)
    v[M_L], v[M_D], v[M_H], v[M_KVH] = model.n_layers, model.d_model, model.n_heads, model.n_kv_heads
    v[M_HD], v[M_FF], v[M_V] = model.head_dim, model.d_ff, model.vocab_size
    v[M_E], v[M_K] = model.n_experts, model.top_k
    v[M_BW], v[M_BKV] = model.bytes_per_param, model.bytes_per_kv
    kvw = 2 * model.d_model * model.n_kv_heads * model.head_dim
    v[M_KVW] = kvw
    v[M_QO] = model.attn_params_per_layer - kvw
    v[M_FFNW] = model.ffn_params_per_layer
    v[M_EXPERT] = model.expert_params
    v[M_ROUTER] = model.ffn_params_per_layer - model.n_experts * model.expert_params
    v[M_FFN_ACTIVE] = model.ffn_active_params_per_layer
    v[M_NORM] = model.norm_params_per_layer
    v[M_N_ACTIVE] = model.n_active_params
    v[M_EMB] = model.embedding_params
    return v


def pack_workload(workload) -> np.ndarray:
    """Workload spec → float vector (indices ``W_*``); training fields are 0 for inference."""
    v = np.zeros(N_WORK)
    v[W_MODE] = MODE_CODES[workload.mode]
    v[W_B], v[W_SQ], v[W_SKV] = workload.batch, workload.s_q, workload.s_kv
    if workload.mode == "train":
        v[W_MICRO] = workload.micro_batch
        v[W_RECOMPUTE] = RECOMPUTE_CODES[workload.recompute]
        v[W_SP] = 1.0 if workload.sequence_parallel else 0.0
        v[W_ZERO] = workload.zero_stage
        v[W_GRAD_BYTES] = workload.grad_bytes
        v[W_PREC] = PRECISION_CODES[workload.precision]
    return v


def pack_topology(topology) -> np.ndarray:
    return np.array([topology.pes_per_cube, topology.pes_per_sip, topology.n_devices,
                     topology.alpha_intra_ns, topology.alpha_inter_ns, topology.alpha_intersip_ns],
                    dtype=np.float64)


def pack_efficiency(eff, *, train: bool = False) -> np.ndarray:
    """Efficiency spec → float vector; training steps use ``train_compute`` for matmuls."""
    compute = eff.train_compute if train else eff.compute
    return np.array([compute, eff.memory, eff.network, eff.hbm_usable], dtype=np.float64)


@jit()
def _alpha(topo, tier):
    return topo[T_A0 + tier]


@jit()
def placement(tp, cp, pp, dp, tpp, cpp, topo):
    """Strides of the TP/CP/PP/DP groups and the tier each spans (plus TP×CP and the
    KV split-K subgroup are derived from these by the callers)."""
    cube = int(topo[T_CUBE])
    sip = int(topo[T_SIP])
    sizes = (tp, cp, pp, dp)
    order = _ORDERS[tpp + 2 * cpp]
    strides = np.ones(4, dtype=np.int64)
    acc = 1
    for j in range(4):
        g = order[j]
        strides[g] = acc
        acc *= sizes[g]
    tier_tp = tier_of(tp * strides[0], cube, sip)
    tier_cp = tier_of(cp * strides[1], cube, sip)
    tier_pp = tier_of(pp * strides[2], cube, sip)
    tier_dp = tier_of(dp * strides[3], cube, sip)
    tier_tpcp = tier_of(max(tp * strides[0], cp * strides[1]), cube, sip)
    return strides, tier_tp, tier_cp, tier_pp, tier_dp, tier_tpcp


@jit()
def add_comm(acc, tier, nbytes_eff, alpha_ns):
    """Accumulate effective wire bytes into ``acc[tier]`` and latency into ``acc[3]``."""
    acc[tier] += nbytes_eff
    acc[3] += alpha_ns


@jit()
def _coeff_row(lay, mp, wp, topo, out):
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
    bkv = mp[M_BKV]
    E = mp[M_E]
    k = mp[M_K]
    decode = wp[W_MODE] == 1.0
    B = wp[W_B]
    s_q = wp[W_SQ]
    s_kv = wp[W_SKV]
    cube = int(topo[T_CUBE])
    sip = int(topo[T_SIP])

    fcp = float(cp)
    ftp = float(tp)
    fpp = float(pp)
    n_dev = cp * tp * pp * dp

    # -- validity --------------------------------------------------------------------
    valid = n_dev <= topo[T_NDEV] and int(h) % tp == 0 and fpp <= L and float(dp) <= B
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
    sq_loc = 1.0 if decode else s_q / fcp
    T_lin = Bd * sq_loc
    T_rep = Bd * s_q
    causal = 1.0 - (s_q - 1.0) / (2.0 * s_kv)

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
    kv_layer = Bd * (s_kv / fcp) * seq_frac * kvh_loc * hd * 2.0 * bkv

    # -- roofline ops per layer ----------------------------------------------------------
    attn_w = mp[M_QO] / ftp + mp[M_KVW] / kvw_shard
    f_lin = 2.0 * T_lin * (mp[M_QO] + mp[M_KVW]) / ftp
    b_lin = attn_w * bw + T_lin * d * bw * (2.0 + 2.0 / ftp)

    f_core = 4.0 * Bd * s_q * s_kv * causal * hd * h / (ftp * fcp)
    qo_traffic = Bd * sq_loc * qh_loc * hd * bw * 2.0
    if decode:
        b_core = kv_layer + qo_traffic
    else:
        b_core = kv_layer * (1.0 + fcp * causal) + qo_traffic

    wide_ffn = ffs == 1 and cp > 1
    if wide_ffn:
        shard = ftp * fcp
        ffn_tokens = T_rep
    else:
        shard = ftp
        ffn_tokens = T_lin
    f_ffn = 2.0 * ffn_tokens * mp[M_FFN_ACTIVE] / shard
    touched = min(E, ffn_tokens * k) if E > 1.0 else 1.0
    ffn_read = (touched * mp[M_EXPERT] + mp[M_ROUTER]) / shard
    b_ffn = ffn_read * bw + ffn_tokens * d * bw * 2.0

    # -- LM head (last stage; TTFT needs the last position's logits only) ----------------
    f_head = 2.0 * Bd * d * mp[M_V] / ftp
    b_head = mp[M_V] * d * bw / ftp + Bd * mp[M_V] / ftp * 4.0

    # -- communication per layer (effective bytes per tier, link latency) ----------------
    acc = out[C_COMM0:C_COMM_ALPHA + 1]  # add_comm accumulates in place
    acc[:] = 0.0
    act = T_lin * d * bw
    # attention output all-reduce over TP
    if tp > 1:
        add_comm(acc, tier_tp, allreduce_factor(ftp) * act,
                 2.0 * (ftp - 1.0) * _alpha(topo, tier_tp))
    # FFN output
    if wide_ffn:
        g = ftp * fcp
        add_comm(acc, tier_tpcp, allreduce_factor(g) * T_rep * d * bw,
                 2.0 * (g - 1.0) * _alpha(topo, tier_tpcp))
        if not decode:  # gather the replica's tokens across CP first
            add_comm(acc, tier_cp, allgather_factor(fcp) * T_rep * d * bw,
                     (fcp - 1.0) * _alpha(topo, tier_cp))
    elif tp > 1:
        add_comm(acc, tier_tp, allreduce_factor(ftp) * act,
                 2.0 * (ftp - 1.0) * _alpha(topo, tier_tp))
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
        q_bytes = Bd * sq_loc * qh_loc * hd * bw
        o_bytes = Bd * sq_loc * qh_loc * (hd * bw + 8.0)
        add_comm(acc, tier_g, allgather_factor(g) * q_bytes + allreduce_factor(g) * o_bytes,
                 3.0 * (g - 1.0) * _alpha(topo, tier_g))

    # -- CP ring -------------------------------------------------------------------------
    ring_bytes = 0.0
    ring_alpha = 0.0
    if cp > 1:
        steps = fcp - 1.0
        if ring == 0:  # pass KV blocks
            per_step = kv_layer
        else:  # pass Q, and O with the softmax statistics m, l
            per_step = Bd * sq_loc * qh_loc * (2.0 * hd * bw + 8.0)
        ring_bytes = steps * per_step
        ring_alpha = steps * _alpha(topo, tier_cp)

    # -- pipeline ------------------------------------------------------------------------
    lps = math.ceil(L / fpp)
    m = 1.0 if decode else float(Bd)
    # decode: a token passes every stage once, so the critical path is all L layers;
    # prefill: m micro-batches through pp stages of lps layers (1F1B bubble)
    layer_mult = L if decode else lps * (m + fpp - 1.0) / m
    pp_bytes = 0.0
    pp_alpha = 0.0
    if pp > 1:
        pp_bytes = (fpp - 1.0) * (T_lin / m) * d * bw
        pp_alpha = (fpp - 1.0) * _alpha(topo, tier_pp)

    # -- memory per device ---------------------------------------------------------------
    ffn_w = mp[M_FFNW] / shard
    w_layer = (attn_w + ffn_w + mp[M_NORM]) * bw
    emb = mp[M_EMB] * bw / ftp
    if pp > 1:
        emb = mp[M_V] * d * bw / ftp
    f_loc = mp[M_FF] * min(k, E) / shard
    act_mem = T_lin * (4.0 * d + 2.0 * f_loc) * bw + Bd * mp[M_V] / ftp * 4.0
    mem = lps * (w_layer + kv_layer) + emb + act_mem

    tokens = B if decode else B * s_q
    model_flops = 2.0 * mp[M_N_ACTIVE] * tokens + 4.0 * L * B * s_q * s_kv * causal * h * hd

    out[C_VALID] = 1.0 if valid else 0.0
    out[C_NDEV] = n_dev
    out[C_MEM] = mem
    out[C_MEM_STATIC] = lps * w_layer + emb
    out[C_MEM_KV] = lps * kv_layer
    out[C_MEM_ACT] = act_mem
    out[C_F_LIN] = f_lin
    out[C_B_LIN] = b_lin
    out[C_F_CORE] = f_core
    out[C_B_CORE] = b_core
    out[C_F_FFN] = f_ffn
    out[C_B_FFN] = b_ffn
    out[C_F_HEAD] = f_head
    out[C_B_HEAD] = b_head
    out[C_RING_BYTES] = ring_bytes
    out[C_RING_TIER] = tier_cp
    out[C_RING_ALPHA] = ring_alpha
    out[C_RING_OVERLAP] = 0.0 if decode else 1.0
    out[C_LAYER_MULT] = layer_mult
    out[C_PP_BYTES] = pp_bytes
    out[C_PP_TIER] = tier_pp
    out[C_PP_ALPHA] = pp_alpha
    out[C_TOKENS] = tokens
    out[C_MODEL_FLOPS] = model_flops
    out[C_TAIL0:C_TAIL_MEM + 1] = 0.0


@jit()
def layout_coeffs(layouts, mp, wp, topo):
    """Coefficient rows (n_layout, N_COEF) for integer layout rows (n_layout, 9)."""
    n = layouts.shape[0]
    out = np.empty((n, N_COEF))
    for i in range(n):
        _coeff_row(layouts[i], mp, wp, topo, out[i])
    return out


@jit(inline="always")
def _roof(f, b, P, M):
    tc = f / P
    tm = b / M
    if tc > tm:
        return tc, tc, 0.0
    return tm, 0.0, tm


@jit(inline="always")
def point(c, hw, eff):
    """One (hardware, layout) pair → the values of :data:`OUTPUTS`."""
    if c[C_VALID] == 0.0:
        nan = np.nan
        return nan, nan, nan, nan, nan, nan, False
    P = hw[2] * 1e3 * eff[E_C]
    M = hw[1] * eff[E_M]
    en = eff[E_N]
    b0 = hw[3] * en
    b1 = hw[4] * en
    b2 = hw[5] * en

    t_lin, cl, ml = _roof(c[C_F_LIN], c[C_B_LIN], P, M)
    t_core, cc, mc = _roof(c[C_F_CORE], c[C_B_CORE], P, M)
    t_ffn, cf, mf = _roof(c[C_F_FFN], c[C_B_FFN], P, M)
    t_head, ch, mh = _roof(c[C_F_HEAD], c[C_B_HEAD], P, M)

    rt = c[C_RING_TIER]
    rbw = b0 if rt == 0.0 else (b1 if rt == 1.0 else b2)
    ring_t = c[C_RING_BYTES] / rbw + c[C_RING_ALPHA]
    if c[C_RING_OVERLAP] == 1.0:
        exposed = ring_t - t_core
        if exposed < 0.0:
            exposed = 0.0
    else:
        exposed = ring_t
    comm_l = c[C_COMM0] / b0 + c[C_COMM1] / b1 + c[C_COMM2] / b2 + c[C_COMM_ALPHA]
    pt = c[C_PP_TIER]
    pbw = b0 if pt == 0.0 else (b1 if pt == 1.0 else b2)
    t_pp = c[C_PP_BYTES] / pbw + c[C_PP_ALPHA]

    t_tail = c[C_TAIL0] / b0 + c[C_TAIL1] / b1 + c[C_TAIL2] / b2 + c[C_TAIL_ALPHA]
    t_tail_mem = c[C_TAIL_MEM] / M

    mult = c[C_LAYER_MULT]
    t_layer = t_lin + t_core + t_ffn + exposed + comm_l
    latency = mult * t_layer + t_head + t_pp + t_tail + t_tail_mem
    compute = mult * (cl + cc + cf) + ch
    memory = mult * (ml + mc + mf) + mh + t_tail_mem
    comm = mult * (exposed + comm_l) + t_pp + t_tail
    sec = latency * 1e-9
    throughput = c[C_TOKENS] / sec
    flops_dev = c[C_MODEL_FLOPS] / c[C_NDEV] / sec
    fits = c[C_MEM] <= hw[0] * 1e9 * eff[E_HBM]
    return latency, throughput, flops_dev, compute, memory, comm, fits


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
            fits[i, j] = r[6]
    return lat, thr, fl, comp, mem, comm, fits


#: metric codes understood by :func:`fused_best` (index into :data:`OUTPUTS`).
FUSED_METRICS = {"latency_ns": 0, "throughput_tok_s": 1, "flops_per_device": 2}


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
            if not r[6]:
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
    return best_idx, vals, n_fit
