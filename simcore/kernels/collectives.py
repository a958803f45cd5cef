"""Ring collectives and tier selection (numba, scalar; see ``collectives_ref`` for the twin).

Bandwidths are GB/s (= bytes/ns); times are ns. A group of size ``g`` at stride ``s``
spans ``g * s`` consecutive devices and runs at the bandwidth of the smallest tier
holding that span: 0 = intra-cube, 1 = inter-cube (within a SiP), 2 = inter-SiP.

Latency of a group that crosses the cube (tier 1 or 2): NCCL's tuning model
(``NVIDIA/nccl src/graph/tuning.cc`` @ 5067397c, lines 414-417 for the tree all-reduce):
a base latency once per operation (``Topology.coll_base_scaleout_ns``), each step inside a
cube at ``alpha_intra_scaleout_ns`` (NCCL's NVLink latency) and each network step at the
tier's alpha (NCCL's network latency); a tree phase over n cubes takes ``tree_depth(n)``
network steps. Inside one cube a collective pays ``alpha_intra_ns`` per step and no base.
"""

from __future__ import annotations

import math

from ._numba import jit

#: In-switch (NVLink SHARP) all-reduce inside one cube, as measured on 8 H100s: NCCL's
#: ring reaches ~370 GB/s bus bandwidth, NVLS ~480 GB/s (NCCL maintainer, NVIDIA/nccl-tests
#: issue #212), i.e. the ring's 2(g-1)/g wire factor at g = 8 times 370/480 (1.35); NCCL
#: picks NVLS from 2 MB messages up and a ring (LL protocol) below (NVIDIA/nccl-tests issue
#: #309, default tuning on one 8-GPU HGX node).
NVLS_FACTOR = 2.0 * 7.0 / 8.0 * 370.0 / 480.0
NVLS_MIN_BYTES = 2.0 * 1024.0 * 1024.0


@jit()
def group_span(g, stride):
    """Consecutive devices a group of ``g`` members ``stride`` apart spans; a one-member
    group spans its own device (its stride is not a distance anything travels)."""
    return g * stride if g > 1 else 1


@jit()
def tier_of(span: int, pes_per_cube: int, pes_per_sip: int) -> int:
    if span <= pes_per_cube:
        return 0
    if span <= pes_per_sip:
        return 1
    return 2


@jit()
def allreduce_factor(g: float) -> float:
    """Bytes-on-the-wire factor of a ring all-reduce: 2(g-1)/g."""
    return 2.0 * (g - 1.0) / g


@jit()
def in_switch_wire(ring_wire: float, nbytes: float, nvls: float) -> float:
    """Wire factor of an all-reduce inside one cube: ``ring_wire``, or, where the switch
    reduces (``nvls`` 1) and the message is at least ``NVLS_MIN_BYTES``, at most
    ``NVLS_FACTOR``."""
    if nvls == 1.0 and nbytes >= NVLS_MIN_BYTES:
        return min(ring_wire, NVLS_FACTOR)
    return ring_wire


@jit()
def allgather_factor(g: float) -> float:
    """All-gather / reduce-scatter: (g-1)/g."""
    return (g - 1.0) / g


@jit()
def allreduce_ns(nbytes: float, g: float, bw_gbs: float, alpha_ns: float) -> float:
    if g <= 1.0:
        return 0.0
    return allreduce_factor(g) * nbytes / bw_gbs + 2.0 * (g - 1.0) * alpha_ns


@jit()
def allgather_ns(nbytes: float, g: float, bw_gbs: float, alpha_ns: float) -> float:
    if g <= 1.0:
        return 0.0
    return allgather_factor(g) * nbytes / bw_gbs + (g - 1.0) * alpha_ns


@jit()
def p2p_ns(nbytes: float, bw_gbs: float, alpha_ns: float) -> float:
    return nbytes / bw_gbs + alpha_ns


# --- small-message / latency-optimal collectives (inference) -----------------------------
# Real libraries do not pay 2(g-1) hops at the slowest tier: recursive halving-doubling
# (Rabenseifner) moves the same bytes as a ring in ceil(log2 g) steps per phase, and a
# group that spans several cubes reduces hierarchically (reduce-scatter inside each cube,
# all-reduce of the 1/k shard across cubes, all-gather inside each cube). See DESIGN.md,
# Hardware model / Collectives; NCCL's tree and TensorRT-LLM's two-shot all-reduce.


@jit()
def phase_steps(g: float) -> float:
    """Latency steps of one reduce-scatter or all-gather phase over g ranks: the cheaper
    of a ring (g - 1) and recursive halving/doubling (ceil(log2 g))."""
    if g <= 1.0:
        return 0.0
    lg = 0.0
    p = 1.0
    while p < g:
        p *= 2.0
        lg += 1.0
    return min(g - 1.0, lg)


@jit()
def tree_depth(n):
    """Network steps of one tree phase over ``n`` cubes: floor(log2) of the cubes the
    group touches (NCCL's ``log2i(nNodes)``; 2 and 3 cubes take one step, 4 take two)."""
    cubes = math.ceil(n)
    depth = 0.0
    p = 2.0
    while p <= cubes:
        p *= 2.0
        depth += 1.0
    return depth


@jit()
def allreduce_hier(acc, nbytes, g, stride, topo):
    """All-reduce of ``nbytes`` over ``g`` ranks at ``stride``: effective wire bytes into
    ``acc[tier]`` and link latency into ``acc[3]``.

    Inside one cube: ring bytes 2(g-1)/g, 2·phase_steps(g) latencies of ``alpha_intra_ns``
    (the serving runtimes' own one-shot / two-shot all-reduce: fitted, not NCCL's); where
    the switch reduces (``topo.nvls`` 1: NVLink SHARP) a message of at least
    ``NVLS_MIN_BYTES`` costs at most ``NVLS_FACTOR`` (the measured NVLS bandwidth), same
    latencies. Across cubes, k members per cube: bytes of an intra-cube reduce-scatter and
    all-gather of N and an all-reduce of N/k over the g/k cubes at the tier the group
    spans (a ring over the cubes when k is 1); latency NCCL's tree all-reduce:
    ``coll_base_scaleout_ns`` + 2·((k - 1)·``alpha_intra_scaleout_ns`` +
    tree_depth(g/k)·the tier's alpha).
    """
    if g <= 1.0:
        return
    cube = int(topo.pes_per_cube)
    span = int(g * stride + 0.5)
    tier = tier_of(span, cube, int(topo.pes_per_sip))
    if tier == 0:
        acc[0] += in_switch_wire(allreduce_factor(g), nbytes, topo.nvls) * nbytes
        acc[3] += 2.0 * phase_steps(g) * topo.alpha_intra_ns
        return
    alpha = topo.alpha_inter_ns if tier == 1 else topo.alpha_intersip_ns
    k = 1.0
    if stride < cube:
        k = min(g, float(cube // stride))
    n = g / k
    if k > 1.0:
        acc[0] += 2.0 * allgather_factor(k) * nbytes
    acc[tier] += allreduce_factor(n) * nbytes / k
    acc[3] += topo.coll_base_scaleout_ns + 2.0 * ((k - 1.0) * topo.alpha_intra_scaleout_ns
                                                  + tree_depth(n) * alpha)


# --- hierarchical collectives (training: groups spanning cubes) ------------------------------
# A group of g members spanning cubes with k members per cube runs as an intra-cube
# reduce-scatter, an inter-cube collective of the 1/k shards (each cube drives
# min(k, NICs) NICs in parallel; one NIC carries cube/NICs devices' worth of the tier's
# per-device bandwidth) and an intra-cube all-gather; the inter-cube part has tree
# (log-depth) latency. Factors are bytes on the wire per byte of message, to be divided
# by each tier's per-device bandwidth.


@jit()
def members_per_cube(g: float, stride: float, cube: float) -> float:
    """Members of a group (size g, stride s) that share one cube."""
    if stride >= cube:
        return 1.0
    k = float(math.floor(cube / stride))
    if k < 1.0:
        k = 1.0
    return min(g, k)


@jit()
def cube_lanes(k: float, nics: float, cube: float) -> float:
    """Devices' worth of top-tier bandwidth that k members of a cube share: min(k, NICs)
    NICs, one NIC carrying cube/NICs devices' worth of the tier's per-device bandwidth
    (more NICs than PEs: each PE drives its share at most)."""
    nics = min(nics, cube)
    return min(k, nics) * cube / nics


@jit()
def hier_factors(g: float, k: float, nics: float, cube: float, allreduce: bool):
    """(intra factor, top-tier factor, intra hops, top-tier hops) of a hierarchical
    all-reduce (``allreduce``) or all-gather / reduce-scatter over g members, k per cube:
    per phase k - 1 hops inside the cube (NCCL's tree chains them) and ``tree_depth(g/k)``
    network steps."""
    m = 2.0 if allreduce else 1.0
    n = g / k
    f0 = m * (k - 1.0) / k
    f1 = m * (n - 1.0) / n / cube_lanes(k, nics, cube)
    return f0, f1, m * (k - 1.0), m * tree_depth(n)


@jit()
def alltoall_factors(g: float, k: float, nics: float, cube: float):
    """(intra factor, top-tier factor, intra latencies, top-tier latencies) of an all-to-all
    of a message of N bytes per member over g members, k of them per cube.

    Every member keeps 1/g of its message and sends 1/g to each peer, one link latency per
    peer (pairwise exchange): (k - 1)/g of N to its cube peers, (g - k)/g of N over the
    top tier, where the cube's k members share min(k, NICs) NICs (one NIC carries
    cube/NICs devices' worth of the tier's per-device bandwidth, as in ``hier_factors``).
    Within one cube (k = g) it is (g - 1)/g of N and g - 1 latencies on the intra tier.
    """
    if g <= 1.0:
        return 0.0, 0.0, 0.0, 0.0
    f0 = (k - 1.0) / g
    f1 = k * (g - k) / g / cube_lanes(k, nics, cube)
    return f0, f1, k - 1.0, g - k


@jit()
def node_dedup_alltoall_factors(g: float, k: float, nics: float, cube: float,
                                ranks: float, cubes: float):
    """``alltoall_factors`` for DeepEP / HybridEP, per token row (one token's bytes): a
    token crosses the top tier once per distinct remote cube of the ``cubes`` its experts
    live on, and reaches each of the ``ranks`` distinct ranks once over the intra tier
    (forwarded inside the destination cube, not to the receiving device itself, 1/k of
    the ranks); the same peers, so the same latencies as the pairwise exchange."""
    if g <= 1.0:
        return 0.0, 0.0, 0.0, 0.0
    n = g / k
    f0 = ranks * (k - 1.0) / k
    f1 = k / cube_lanes(k, nics, cube) * cubes * (n - 1.0) / n
    return f0, f1, k - 1.0, g - k
