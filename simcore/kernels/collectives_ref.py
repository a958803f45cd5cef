"""Plain-python twin of :mod:`simcore.kernels.collectives` (the test oracle)."""

from __future__ import annotations


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
