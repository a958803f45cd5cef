"""Brute-force O(n²) twin of :mod:`simcore.kernels.pareto`."""

from __future__ import annotations

import math


def pareto_mask(points) -> list[bool]:
    rows = [list(map(float, r)) for r in points]
    out = []
    for i, p in enumerate(rows):
        if any(math.isnan(x) for x in p):
            out.append(False)
            continue
        dominated = False
        for j, q in enumerate(rows):
            if j == i or any(math.isnan(x) for x in q):
                continue
            if all(a <= b for a, b in zip(q, p, strict=True)) and any(
                a < b for a, b in zip(q, p, strict=True)
            ):
                dominated = True
                break
        out.append(not dominated)
    return out
