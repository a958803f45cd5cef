"""Ring collectives and tier selection (numba, scalar; see ``collectives_ref`` for the twin).

Bandwidths are GB/s (= bytes/ns); times are ns. A group of size ``g`` at stride ``s``
spans ``g * s`` consecutive devices and runs at the bandwidth of the smallest tier
holding that span: 0 = intra-cube, 1 = inter-cube (within a SiP), 2 = inter-SiP.
"""

from __future__ import annotations

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
