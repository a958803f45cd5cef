"""Ring collectives and tier selection (numba, scalar; see ``collectives_ref`` for the twin).

Bandwidths are GB/s (= bytes/ns); times are ns. A group of size ``g`` at stride ``s``
spans ``g * s`` consecutive devices and runs at the bandwidth of the smallest tier
holding that span: 0 = intra-cube, 1 = inter-cube (within a SiP), 2 = inter-SiP.
"""

from __future__ import annotations

import math

from ._numba import jit


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
    k = math.floor(cube / stride)
    if k < 1.0:
        k = 1.0
    return min(g, k)


@jit()
def hier_factors(g: float, k: float, nics: float, cube: float, allreduce: bool):
    """(intra factor, top-tier factor, intra hops, top-tier hops) of a hierarchical
    all-reduce (``allreduce``) or all-gather / reduce-scatter over g members, k per cube."""
    m = 2.0 if allreduce else 1.0
    n = g / k
    nics = min(nics, cube)  # more NICs than PEs: each PE drives its share at most
    lanes = min(k, nics) * cube / nics
    f0 = m * (k - 1.0) / k
    f1 = m * (n - 1.0) / n / lanes
    h1 = m * math.ceil(math.log2(n)) if n > 1.0 else 0.0
    return f0, f1, m * (k - 1.0), h1
