"""Physics pieces shared by the inference and the training kernels.

Where the TP / CP / PP / DP groups sit on the system and which link tier each spans
(:func:`placement`, :func:`tier_alpha_ns`, :func:`tier_base_ns`), the per-tier accumulator of wire bytes and
link latency the collectives write (:func:`add_comm`), the keys a sliding-window layer
attends to (:func:`window_keys`), the HBM bytes of MoE token permutation
(:func:`moe_permute_bytes`) and the kernel launches of a decoder layer (:data:`OPS_LAYER`,
:data:`OPS_MOE`). ``simcore.kernels.common_ref`` is the plain-python twin; each piece and
its twin share a name (``simcore.kernels.twin_table``).
"""

from __future__ import annotations

import numpy as np

from ._numba import jit
from .collectives import group_span, tier_of

__all__ = ["OPS_LAYER", "OPS_MLA", "OPS_MOE", "add_comm", "moe_permute_bytes", "placement",
           "tier_alpha_ns", "tier_base_ns", "window_keys"]

#: kernel launches of one decoder layer with two norms: input norm, QKV GEMM, RoPE + KV
#: write, attention, O GEMM, residual + norm, gate/up GEMM, activation, down GEMM, residual;
#: each norm more or fewer (``ModelParams.norms``: a parallel block's one, GPT-J) adds or
#: removes one
OPS_LAYER = 10.0
#: extra launches of an MoE layer: router GEMM, top-k, token permute, un-permute + combine
OPS_MOE = 4.0
#: extra launches on the critical path of an MLA attention block (DeepSeek-V2/V3): the
#: q_a RMSNorm, the q up-projection GEMM and the absorbed-V batched matmul after the
#: attention kernel; the fused q_a/kv_a down-projection, the absorbed-K batched matmul
#: (beside RoPE + the latent cache write on a second stream), the attention kernel and
#: o_proj take the QKV GEMM's, RoPE's, attention's and O's places, and the kv_a norm runs
#: beside the q path (ai-dynamo/aiconfigurator aic-core/src/aiconfigurator_core/sdk/models/
#: deepseek.py @095f58a51c4ca8e61b66ec108d86f223f8d559ce, generation_ops: TensorRT-LLM's
#: MLA decode as downscale GEMM, q_a_layernorm, q_b GEMM, bmm_pre || rope_kvcache,
#: attention, bmm_post, o_proj)
OPS_MLA = 3.0
#: largest expert-parallel group whose MoE, without attention data parallelism (every TP
#: rank holds every token), combines its experts' outputs with one all-reduce over the TP
#: group instead of dispatch / combine all-to-alls: TensorRT-LLM's "for EP4/EP8
#: Reduce/Scatter is used, while for EP>8 All2All is used" (NVIDIA/TensorRT-LLM docs/
#: source/blogs/tech_blog/blog4_Scaling_Expert_Parallelism_in_TensorRT-LLM.md @1d263f15,
#: "Performance study", Figure 24), and aiconfigurator prices TensorRT-LLM's MoE without
#: attention DP as that all-reduce (aic-core moe_dispatch, @095f58a5)
EP_ALLREDUCE_MAX = 8

# placement codes -> order of groups (0 tp, 1 cp, 2 pp, 3 dp), innermost first; PP outside
# DP as Megatron-LM ("tp-cp-ep-dp-pp"), torchtitan and DeepSpeed place them
_ORDERS = np.array([
    [0, 1, 3, 2],  # tp, cp, dp, pp: TP inner, CP inner
    [1, 0, 3, 2],  # cp, tp, dp, pp: TP just outside CP, CP inner
    [0, 3, 2, 1],  # tp, dp, pp, cp: TP inner, CP outermost
    [3, 2, 1, 0],  # dp, pp, cp, tp: TP just outside CP, CP outside DP and PP
], dtype=np.int64)


@jit()
def tier_alpha_ns(topo, tier):
    """Link latency (ns) of a tier: 0 intra, 1 inter, 2 inter-SiP."""
    if tier == 0:
        return topo.alpha_intra_ns
    if tier == 1:
        return topo.alpha_inter_ns
    return topo.alpha_intersip_ns


@jit()
def tier_base_ns(topo, tier):
    """Base latency (ns) of one collective or send over a group spanning ``tier``: none
    inside a cube, ``coll_base_scaleout_ns`` (NCCL's per-operation base) across cubes."""
    if tier == 0:
        return 0.0
    return topo.coll_base_scaleout_ns


@jit()
def placement(tp, cp, pp, dp, tpp, cpp, topo):
    """Strides of the TP/CP/PP/DP groups (a 4-tuple) and the tier each spans (plus TP×CP;
    the KV split-K subgroup's tier is derived from these by the callers).

    Returns ``(strides, tier_tp, tier_cp, tier_pp, tier_dp, tier_tpcp)``; tiers are 0 intra
    (cube), 1 inter (SiP), 2 inter-SiP.
    """
    cube = int(topo.pes_per_cube)
    sip = int(topo.pes_per_sip)
    order = _ORDERS[tpp + 2 * cpp]
    # each group's stride: the product of the sizes of the groups inside it (scalars, not
    # an array: no numpy allocation to compile)
    s_tp = s_cp = s_pp = s_dp = 1
    acc = 1
    for j in range(4):
        g = order[j]
        if g == 0:
            s_tp = acc
            acc *= tp
        elif g == 1:
            s_cp = acc
            acc *= cp
        elif g == 2:
            s_pp = acc
            acc *= pp
        else:
            s_dp = acc
            acc *= dp
    strides = (s_tp, s_cp, s_pp, s_dp)
    tier_tp = tier_of(group_span(tp, strides[0]), cube, sip)
    tier_cp = tier_of(group_span(cp, strides[1]), cube, sip)
    tier_pp = tier_of(group_span(pp, strides[2]), cube, sip)
    tier_dp = tier_of(group_span(dp, strides[3]), cube, sip)
    tier_tpcp = tier_of(max(group_span(tp, strides[0]), group_span(cp, strides[1])), cube, sip)
    return strides, tier_tp, tier_cp, tier_pp, tier_dp, tier_tpcp


@jit()
def add_comm(acc, tier, nbytes_eff, alpha_ns):
    """Accumulate effective wire bytes into ``acc[tier]`` and latency (ns) into ``acc[3]``."""
    acc[tier] += nbytes_eff
    acc[3] += alpha_ns


@jit()
def window_keys(n, w):
    """Keys the first ``n`` queries of a sequence attend to in a layer with a sliding window
    of ``w`` tokens: ``sum(min(p, w) for p in 1..n)``."""
    if n <= w:
        return n * (n + 1.0) / 2.0
    return w * (w + 1.0) / 2.0 + (n - w) * w


@jit()
def moe_permute_bytes(k, d, nbytes, rows):
    """HBM bytes of MoE token permutation per MoE layer (one pass) for ``rows`` tokens:
    permute (read d, write k copies), unpermute + combine (read k copies, write d), and
    the experts' GEMM operands at k copies where the FFN op counts one: 4·k·d elements."""
    return 4.0 * k * d * nbytes * rows


@jit()
def ep_alltoall(dp, ep):
    """Whether an expert-parallel MoE layer dispatches and combines its tokens with
    all-to-alls: with attention DP (``dp`` > 1) or an EP group beyond ``EP_ALLREDUCE_MAX``;
    otherwise every TP rank holds every token and the experts' outputs are all-reduced
    over TP, as a dense FFN's (False too without EP)."""
    return ep > 1 and (dp > 1 or ep > EP_ALLREDUCE_MAX)


@jit()
def busiest_share(mp, wp, ep):
    """The busiest expert-parallel rank's routed token copies over the mean:
    ``Workload.moe_load_imbalance``, capped at what ``ep`` ranks allow (a token sends at
    most min(k, E/ep) copies to one rank, so no rank holds more than ep·min(k, E/ep)/k x
    the mean: 2 at EP 2 for Mixtral's top-2 of 8); 1 without EP or experts."""
    if ep <= 1.0 or mp.n_experts <= 1.0:
        return 1.0
    cap = ep * min(mp.top_k, mp.n_experts / ep) / mp.top_k
    return min(wp.moe_imbalance, cap)


@jit()
def attention_kernel_rate(wp, topo):
    """The attention core's rate relative to the family's native fused kernel
    (FlashAttention-3 / TensorRT-LLM / FlashInfer class on Hopper): ``Topology.fa2_ratio``
    for a FlashAttention-2-class kernel (``Workload.attention="flash2"``, vLLM 0.x's
    flash-attn 2), else 1. The core's FLOPs are divided by it (native-rate FLOPs)."""
    return topo.fa2_ratio if wp.attention == 2.0 else 1.0
