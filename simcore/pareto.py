"""Pareto frontiers of any Dataset, directions taken from the metric registry."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import xarray as xr

from .engine import pareto_mask
from .metrics import get_metric

__all__ = ["pareto", "pareto_mask"]


def _objectives(objectives: Sequence[str] | Mapping[str, str]) -> list[tuple[str, int]]:
    out = []
    items = objectives.items() if isinstance(objectives, Mapping) else (
        (o, None) for o in objectives)
    for name, direction in items:
        if direction is None:
            m = get_metric(name)
            sign = m.sign
        elif direction in ("min", "max"):
            sign = 1 if direction == "min" else -1
        else:
            raise ValueError(f"objective {name!r}: direction must be 'min' or 'max', got {direction!r}")
        out.append((name, sign))
    if len(out) < 1:
        raise ValueError("pareto needs at least one objective")
    return out


def pareto(
    ds: xr.Dataset,
    *,
    objectives: Sequence[str] | Mapping[str, str] = ("latency", "cost_score"),
    feasible: str | None = "any_fits",
) -> xr.DataArray:
    """Boolean DataArray (same dims as the objectives) marking the Pareto frontier.

    ``objectives`` are Dataset variable names or registered metric names (``latency``
    resolves to ``latency_ns``); a mapping gives explicit directions
    (``{"latency_ns": "min", "throughput_tok_s": "max"}``). Points where ``feasible``
    is False or an objective is NaN are never on the frontier.

    Examples
    --------
    >>> import xarray as xr
    >>> ds = xr.Dataset({"latency_ns": ("x", [3.0, 1.0, 2.0]), "cost_score": ("x", [1.0, 3.0, 2.5])})
    >>> pareto(ds).values.tolist()
    [True, True, True]
    """
    objs = _objectives(objectives)
    arrays = []
    for name, sign in objs:
        var: str | None = name
        if var not in ds.data_vars:
            m = get_metric(name)
            var = next((v for v in m.names if v in ds.data_vars), None)
            if var is None:
                raise ValueError(
                    f"objective {name!r} not in the Dataset; it holds {sorted(map(str, ds.data_vars))}"
                )
        arrays.append((ds[var], sign))
    template = xr.broadcast(*[a for a, _ in arrays])
    dims = template[0].dims
    cols = [np.asarray(a.transpose(*dims).values, dtype=float).ravel() * s
            for a, (_, s) in zip(template, arrays, strict=True)]
    pts = np.stack(cols, axis=1)
    if feasible is not None and feasible in ds:
        ok = ds[feasible].broadcast_like(template[0]).transpose(*dims).values.ravel()
        pts = np.where(ok[:, None], pts, np.nan)
    mask = pareto_mask(pts).reshape(template[0].shape)
    return xr.DataArray(mask, dims=dims, coords=template[0].coords, name="pareto")
