"""Plain-python twin of :mod:`simcore.kernels.collectives` (the test oracle)."""

from __future__ import annotations

import math


def group_span(g: int, stride: int) -> int:
    """Consecutive devices a group of ``g`` members ``stride`` apart spans (1 for one)."""
    return g * stride if g > 1 else 1


def tier_of(span: int, pes_per_cube: int, pes_per_sip: int) -> int:
    for tier, size in enumerate((pes_per_cube, pes_per_sip)):
        if span <= size:
            return tier
    return 2


def allreduce_ns(nbytes: float, g: int, bw_gbs: float, alpha_ns: float) -> float:
    if g <= 1:
        return 0.0
    # reduce-scatter then all-gather: 2(g-1) steps of nbytes/g each
    steps = 2 * (g - 1)
    return steps * (nbytes / g) / bw_gbs + steps * alpha_ns


def allgather_ns(nbytes: float, g: int, bw_gbs: float, alpha_ns: float) -> float:
    if g <= 1:
        return 0.0
    steps = g - 1
    return steps * (nbytes / g) / bw_gbs + steps * alpha_ns


def p2p_ns(nbytes: float, bw_gbs: float, alpha_ns: float) -> float:
    return nbytes / bw_gbs + alpha_ns


# --- small-message / latency-optimal collectives (inference) -----------------------------


def phase_steps(g: float) -> float:
    """Steps of one reduce-scatter / all-gather: min(ring g-1, halving-doubling log2)."""
    if g <= 1:
        return 0.0
    return float(min(g - 1, math.ceil(math.log2(g) - 1e-12)))


# NVLink SHARP on 8 H100s: ring ~370 GB/s bus bandwidth, NVLS ~480 GB/s (NVIDIA/nccl-tests
# #212); NCCL uses NVLS from 2 MB up, a ring below (NVIDIA/nccl-tests #309)
_NVLS_RING_BUSBW, _NVLS_BUSBW, _NVLS_FROM_BYTES = 370.0, 480.0, 2 * 1024 * 1024


def in_switch_factor(ring_wire: float, nbytes: float) -> float:
    """Wire factor of an all-reduce inside a cube whose switch reduces: the 8-GPU ring's
    factor scaled by the measured bandwidth ratio, for messages NCCL sends that way."""
    if nbytes < _NVLS_FROM_BYTES:
        return ring_wire
    return min(ring_wire, 2 * 7 / 8 * _NVLS_RING_BUSBW / _NVLS_BUSBW)


def tree_depth(n: float) -> float:
    """Levels below the root of a binary tree over the ceil(n) cubes a group touches
    (NCCL's ``log2i(nNodes)``)."""
    return float(math.ceil(n).bit_length() - 1)


def scaleout_latency_ns(topology, intra_steps: float, net_steps: float, net_alpha: float) -> float:
    """NCCL's tuning model for one operation whose group crosses the cube: its base latency,
    ``intra_steps`` NVLink steps and ``net_steps`` network steps."""
    return (topology.coll_base_scaleout_ns + intra_steps * topology.alpha_intra_scaleout_ns
            + net_steps * net_alpha)


def allreduce_hier_ns(nbytes: float, g: float, stride: float, topology,
                      links: list[tuple[float, float]]) -> float:
    """Time of an all-reduce over g ranks at stride; ``links`` = (bw, alpha) per tier. In
    one cube: a ring's bytes (in the switch where ``topology.nvls``, ``in_switch_factor``)
    and halving-doubling steps; across cubes: reduce-scatter inside, all-reduce of the
    1/k shards across, all-gather inside, at NCCL's tree latency."""
    if g <= 1:
        return 0.0
    cube = topology.pes_per_cube
    tier = tier_of(round(g * stride), cube, topology.pes_per_sip)
    bw, alpha = links[tier]
    if tier == 0:
        wire = 2 * (g - 1) / g
        if topology.nvls:
            wire = in_switch_factor(wire, nbytes)
        return wire * nbytes / bw + 2 * phase_steps(g) * alpha
    per_cube = min(g, cube // stride) if stride < cube else 1
    groups = g / per_cube
    inside = 2 * (per_cube - 1) / per_cube * nbytes / links[0][0]
    across = 2 * (groups - 1) / groups * (nbytes / per_cube) / bw
    # one tree all-reduce: up and down the tree, each way through the cube's chain and
    # the levels of the tree over the cubes
    return inside + across + scaleout_latency_ns(topology, 2 * (per_cube - 1),
                                                 2 * tree_depth(groups), alpha)


# --- hierarchical collectives (training: groups spanning cubes) ------------------------------
def hier_collective_ns(nbytes: float, g: int, k: int, cube: int, nics: int,
                       intra: tuple[float, float], top: tuple[float, float],
                       allreduce: bool, base_ns: float = 0.0,
                       hop_ns: float | None = None) -> float:
    """One collective across cubes: intra-cube reduce-scatter, inter-cube ring of the
    shards over min(k, NICs) NICs, intra-cube all-gather; k members per cube;
    ``intra``/``top`` are (GB/s, alpha ns). Latency as NCCL's tree: ``base_ns`` once, per
    phase k - 1 hops of ``hop_ns`` (default: the intra alpha) and floor(log2 nodes)
    network steps."""
    nodes = g / k
    nics = min(nics, cube)
    phases = 2 if allreduce else 1
    hop = intra[1] if hop_ns is None else hop_ns
    nic_bw = top[0] * cube / nics  # one NIC serves cube/nics devices' bandwidth
    t = phases * ((k - 1) / k * nbytes / intra[0] + (k - 1) * hop)
    shard = nbytes / k
    t += phases * (nodes - 1) / nodes * shard * k / (min(k, nics) * nic_bw)
    return t + base_ns + phases * tree_depth(nodes) * top[1]


# --- all-to-all (expert parallelism) ---------------------------------------------------------
def alltoall_ns(nbytes: float, g: int, k: int, cube: int, nics: int,
                intra: tuple[float, float], top: tuple[float, float],
                scaleout: tuple[float, float] | None = None) -> float:
    """Pairwise-exchange all-to-all: each of g members (k per cube) holds ``nbytes`` and
    sends a 1/g slice to every peer, paying one link latency per peer; the k members of a
    cube share min(k, NICs) NICs for the slices leaving the cube. ``intra``/``top`` are
    (GB/s, alpha ns); ``scaleout`` = (base ns, in-cube hop ns) of an all-to-all across
    cubes (NCCL's base latency once, its NVLink latency per in-cube peer)."""
    if g <= 1:
        return 0.0
    piece = nbytes / g
    inside = (k - 1) * piece  # to the k - 1 peers in the same cube
    leaving = (g - k) * piece  # to the g - k peers elsewhere, per member
    base, hop = (0.0, intra[1]) if scaleout is None else scaleout
    return (base + inside / intra[0] + (k - 1) * hop
            + k * leaving / cube_top_bw(k, cube, nics, top[0]) + (g - k) * top[1])


def cube_top_bw(k: int, cube: int, nics: int, per_device_gbs: float) -> float:
    """Top-tier GB/s the k members of a cube share: min(k, NICs) NICs, each carrying
    cube/NICs devices' worth (NICs capped at the cube's devices)."""
    nics = min(nics, cube)
    return min(k, nics) * per_device_gbs * cube / nics


def node_dedup_alltoall_ns(token_bytes: float, g: int, k: int, cube: int, nics: int,
                           ranks: float, nodes: float, intra: tuple[float, float],
                           top: tuple[float, float],
                           scaleout: tuple[float, float] | None = None) -> float:
    """DeepEP / HybridEP all-to-all of one member's tokens (``token_bytes``, one copy each)
    over g members, k per cube: each token crosses the top tier once per remote node of
    the ``nodes`` it routes to, and is forwarded over the intra tier to each of the
    ``ranks`` distinct ranks it needs but the receiving device; one link latency per peer
    (``scaleout`` as in ``alltoall_ns``)."""
    if g <= 1:
        return 0.0
    n_nodes = g / k
    base, hop = (0.0, intra[1]) if scaleout is None else scaleout
    return (base + ranks * (k - 1) / k * token_bytes / intra[0] + (k - 1) * hop
            + k * nodes * (n_nodes - 1) / n_nodes * token_bytes / cube_top_bw(k, cube, nics,
                                                                               top[0])
            + (g - k) * top[1])
