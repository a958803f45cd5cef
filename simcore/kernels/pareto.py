"""Pareto mask for N minimisation objectives (numba). Twin: ``pareto_ref``.

A point is on the frontier iff no other point is <= in every objective and < in at
least one. Rows holding NaN are never on the frontier. Points are visited in
lexicographic order, so every dominator of a point is visited before it and the
point needs comparing only against the frontier found so far: O(n log n + n·|F|).
"""

from __future__ import annotations

import numpy as np

from ._numba import jit


@jit()
def _dominates(a, b):
    strict = False
    for k in range(a.shape[0]):
        if a[k] > b[k]:
            return False
        if a[k] < b[k]:
            strict = True
    return strict


@jit()
def pareto_mask_sorted(points, order):
    n = points.shape[0]
    mask = np.zeros(n, dtype=np.bool_)
    front = np.empty(n, dtype=np.int64)
    n_front = 0
    for t in range(n):
        i = order[t]
        p = points[i]
        bad = False
        for k in range(p.shape[0]):
            if np.isnan(p[k]):
                bad = True
                break
        if bad:
            continue
        dominated = False
        for f in range(n_front):
            if _dominates(points[front[f]], p):
                dominated = True
                break
        if not dominated:
            mask[i] = True
            front[n_front] = i
            n_front += 1
    return mask


def pareto_mask(points: np.ndarray) -> np.ndarray:
    """Boolean mask of non-dominated rows of ``points`` (n, k), all objectives minimised."""
    pts = np.ascontiguousarray(points, dtype=np.float64)
    if pts.ndim != 2:
        raise ValueError(f"points must be 2-D (n_points, n_objectives), got shape {pts.shape}")
    if pts.shape[0] == 0:
        return np.zeros(0, dtype=bool)
    keys = np.where(np.isnan(pts), np.inf, pts)
    order = np.lexsort(keys.T[::-1]).astype(np.int64)
    return pareto_mask_sorted(pts, order)
