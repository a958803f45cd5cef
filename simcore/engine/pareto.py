"""Pareto frontiers of any Dataset, directions taken from the metric registry."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import xarray as xr

from ..errors import SimcoreInputError
from .core import pareto_mask
from .metrics import UnknownMetricError, get_metric

__all__ = ["pareto", "pareto_mask", "objective_directions"]


def _objectives(objectives: Sequence[str] | Mapping[str, str]) -> list[tuple[str, int]]:
    out = []
    items = objectives.items() if isinstance(objectives, Mapping) else (
        (o, None) for o in objectives)
    for name, direction in items:
        if direction is None:
            try:
                m = get_metric(name)
            except UnknownMetricError as exc:
                raise SimcoreInputError(f"objective {name!r}: {exc}") from None
            sign = m.sign
        elif direction in ("min", "max"):
            sign = 1 if direction == "min" else -1
        else:
            raise SimcoreInputError(
                f"objective {name!r}: direction must be 'min' or 'max', got {direction!r}")
        out.append((name, sign))
    if len(out) < 1:
        raise SimcoreInputError("pareto needs at least one objective")
    return out


def objective_directions(objectives: str | Sequence[str] | Mapping[str, str]) -> dict[str, str]:
    """Objectives (a comma list, names, or name -> direction) as name -> ``"min"|"max"``,
    directions from the metric registry; unknown names are a
    :class:`~simcore.errors.SimcoreInputError` listing the known ones.

    Examples
    --------
    >>> objective_directions("latency,cost_usd,tokens_per_s_per_gpu")
    {'latency': 'min', 'cost_usd': 'min', 'tokens_per_s_per_gpu': 'max'}
    """
    if isinstance(objectives, str):
        objectives = [o.strip() for o in objectives.split(",") if o.strip()]
    names = list(objectives.keys() if isinstance(objectives, Mapping) else objectives)
    if len(set(names)) != len(names):
        raise SimcoreInputError(f"objectives repeat a name: {names}")
    return {n: "min" if s == 1 else "max" for n, s in _objectives(objectives)}


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
            try:
                m = get_metric(name)
            except UnknownMetricError:
                m = None
            var = None if m is None else next((v for v in m.names if v in ds.data_vars), None)
            if var is None:
                raise SimcoreInputError(
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
