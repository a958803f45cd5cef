"""Plain-python twin of :mod:`simcore.kernels.common` (the test oracle), and the layout
record and roofline rule the inference and training twins share.

Straight from the specs, no packing; each piece shares its name with the kernel piece it
mirrors (``simcore.kernels.twin_table``).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import collectives_ref as coll

__all__ = ["TIERS", "Layout", "keys_in_window", "moe_permute_bytes", "moe_permute_elems",
           "op_time", "placement", "strides", "tier_alpha_ns", "tier_base_ns", "window_keys"]

TIERS = ("intra", "inter", "intersip")


@dataclass
class Layout:
    """One parallel layout, as the labelled layer spells it."""

    cp: int = 1
    tp: int = 1
    pp: int = 1
    dp: int = 1
    kv_shard_mode: str = "head"
    ffn_shard_scope: str = "TP"
    tp_placement: str = "inner"
    cp_placement: str = "inner"
    cp_ring_variant: str = "qoml"
    ep: int = 1


def strides(lay: Layout) -> dict[str, int]:
    """Device stride of each group: the product of the sizes of the groups nested inside it
    (TP and CP innermost or outermost per their placement; PP outside DP)."""
    if lay.cp_placement == "inner":
        order = ["tp", "cp", "dp", "pp"] if lay.tp_placement == "inner" else ["cp", "tp", "dp", "pp"]
    else:
        order = ["tp", "dp", "pp", "cp"] if lay.tp_placement == "inner" else ["dp", "pp", "cp", "tp"]
    out, acc = {}, 1
    for g in order:
        out[g] = acc
        acc *= getattr(lay, g)
    return out


def placement(lay: Layout, topology) -> tuple:
    """``(strides, tier_tp, tier_cp, tier_pp, tier_dp, tier_tpcp)``: the strides of the
    TP / CP / PP / DP groups and the tier (0 intra, 1 inter, 2 inter-SiP) each group, and
    the TP x CP group, spans."""
    st = strides(lay)

    def tier(span: int) -> int:
        return coll.tier_of(span, topology.pes_per_cube, topology.pes_per_sip)

    spans = {g: coll.group_span(getattr(lay, g), st[g]) for g in ("tp", "cp", "pp", "dp")}
    return ((st["tp"], st["cp"], st["pp"], st["dp"]), tier(spans["tp"]), tier(spans["cp"]),
            tier(spans["pp"]), tier(spans["dp"]), tier(max(spans["tp"], spans["cp"])))


def tier_alpha_ns(topology, tier: int) -> float:
    """Link latency (ns) of a tier by its name in :data:`TIERS`."""
    return getattr(topology, f"alpha_{TIERS[tier]}_ns")


def tier_base_ns(topology, tier: int) -> float:
    """NCCL's base latency of one operation whose group leaves the cube (0 inside it)."""
    return topology.coll_base_scaleout_ns if TIERS[tier] != "intra" else 0.0


def op_time(t_c: float, t_m: float, overlap: float) -> tuple[float, str]:
    """One roofline op from its compute and HBM times: the longer side plus what of the
    shorter does not hide under it (``overlap`` of it does), and the bound side."""
    return t_c + t_m - overlap * min(t_c, t_m), "compute" if t_c > t_m else "memory"


def moe_permute_elems(top_k: int) -> int:
    """Elements of width d_model moved per token and MoE layer beyond a dense layer's:
    permute (read 1, write k copies), unpermute + combine (read k, write 1), and the
    experts' GEMMs reading and writing k copies where the FFN op counts one."""
    k = top_k
    return (1 + k) + (k + 1) + 2 * (k - 1)


def moe_permute_bytes(k: int, d: int, nbytes: float, rows: float) -> float:
    """HBM bytes of MoE token permutation per MoE layer for ``rows`` tokens of width ``d``
    at ``nbytes`` per element."""
    return moe_permute_elems(k) * d * nbytes * rows


#: an EP group this large or smaller, without attention DP, all-reduces its experts'
#: outputs over TP (:data:`simcore.kernels.common.EP_ALLREDUCE_MAX`, TensorRT-LLM blog 4)
EP_ALLREDUCE_MAX = 8


def ep_alltoall(dp, ep) -> bool:
    """An EP MoE layer's all-to-all dispatch / combine: with attention DP or EP > 8."""
    return ep > 1 and (dp > 1 or ep > EP_ALLREDUCE_MAX)


def busiest_share(model, workload, ep) -> float:
    """The busiest EP rank's routed copies over the mean: ``moe_load_imbalance`` capped at
    ep·min(k, E/ep)/k (every copy a token can send to one rank); 1 without EP."""
    if ep <= 1 or model.n_experts <= 1:
        return 1.0
    cap = ep * min(model.top_k, model.n_experts / ep) / model.top_k
    return min(workload.moe_load_imbalance, cap)


def keys_in_window(first: int, last: int, window: int) -> float:
    """Keys the queries at positions ``first..last`` (1-based) attend to when each sees at
    most ``window`` keys: the sum of ``min(p, window)``."""
    if last < first:
        return 0.0
    total = 0.0
    top = min(last, window)
    if first <= top:  # queries that see their whole prefix
        total += (first + top) * (top - first + 1) / 2
    if last > window:  # queries that see a full window
        total += (last - max(first - 1, window)) * window
    return total


def window_keys(n: int, w: int) -> float:
    """Keys the first ``n`` queries of a sequence attend to under a ``w``-token sliding
    window."""
    return keys_in_window(1, n, w)


def attention_kernel_rate(workload, topology) -> float:
    """The attention core's rate over the native fused kernel's: ``fa2_ratio`` for a
    FlashAttention-2-class kernel (``attention="flash2"``), else 1."""
    return topology.fa2_ratio if workload.attention == "flash2" else 1.0
