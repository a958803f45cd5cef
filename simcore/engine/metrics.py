"""The metric registry and direction-aware reducers: one mechanism everywhere.

A :class:`Metric` is a declarative value object (name, aliases, direction, key, fill).
The same registry drives the xarray reducer :func:`best` used by the engine and the
explorer, and every selector of the autotuner (:func:`metric_is_better`,
:func:`metric_value`, :func:`select_best`).

Examples
--------
>>> metric_is_better("latency", 8, 30)
True
>>> metric_is_better("throughput", 8, 30)
False
>>> metric_value({"FLOPS_per_gpu": 1.5e14}, "flops")
150000000000000.0
>>> metric_is_better("latency", float("nan"), 30)
False
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import numpy as np

__all__ = [
    "Metric",
    "METRICS",
    "register_metric",
    "get_metric",
    "metric_is_better",
    "metric_key",
    "metric_value",
    "select_best",
    "best",
    "known_metrics",
    "UnknownMetricError",
]

T = TypeVar("T")


class UnknownMetricError(ValueError, KeyError):
    """A metric name that is neither registered nor an alias."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class Metric:
    """A named objective.

    Parameters
    ----------
    name : str
        Canonical name, also the key in DeepSpeed's metrics.json.
    direction : {"min", "max"}
        ``"min"``: smaller is better (latency, cost); ``"max"``: larger is better.
    aliases : tuple of str
        Other names users may pass (``"flops"``, ``"FLOPS"``).
    key : str
        Variable name in a simcore Dataset (``latency_ns``); defaults to ``name``.
    unit : str
        Unit of the Dataset variable.
    """

    name: str
    direction: Literal["min", "max"]
    aliases: tuple[str, ...] = ()
    key: str = ""
    unit: str = ""

    def __post_init__(self) -> None:
        if self.direction not in ("min", "max"):
            raise ValueError(
                f"Metric.direction must be 'min' or 'max', got {self.direction!r}"
            )
        if not self.key:
            object.__setattr__(self, "key", self.name)

    @property
    def names(self) -> tuple[str, ...]:
        """Every name this metric answers to, canonical first."""
        out = [self.name, *self.aliases]
        if self.key not in out:
            out.append(self.key)
        return tuple(out)

    @property
    def sign(self) -> int:
        """+1 if smaller is better, -1 if larger is better (so ``sign * x`` is minimised)."""
        return 1 if self.direction == "min" else -1

    @property
    def fill(self) -> float:
        """The value that never wins (used for infeasible points)."""
        return math.inf if self.direction == "min" else -math.inf

    def is_better(self, candidate: Any, incumbent: Any) -> bool:
        """Whether ``candidate`` strictly beats ``incumbent``; None/NaN never wins."""
        c = _as_number(candidate)
        if c is None:
            return False
        i = _as_number(incumbent)
        if i is None:
            return True
        return c < i if self.direction == "min" else c > i


METRICS: dict[str, Metric] = {}
_LOOKUP: dict[str, Metric] = {}


def register_metric(metric: Metric, *, replace: bool = False) -> Metric:
    """Add a metric (user-defined objectives included) to the registry.

    Examples
    --------
    >>> _ = register_metric(Metric("energy_j", "min", aliases=("energy",)), replace=True)
    >>> get_metric("energy").direction
    'min'
    """
    for n in metric.names:
        owner = _LOOKUP.get(n)
        if owner is not None and owner.name != metric.name and not replace:
            raise ValueError(f"metric name {n!r} already belongs to {owner.name!r}")
    if metric.name in METRICS:
        for n in METRICS[metric.name].names:
            _LOOKUP.pop(n, None)
    METRICS[metric.name] = metric
    for n in metric.names:
        _LOOKUP[n] = metric
    return metric


for _m in (
    Metric("latency", "min", aliases=("latency_ns", "time", "step_time"), key="latency_ns",
           unit="ns"),
    Metric("throughput", "max", aliases=("throughput_tok_s", "samples_per_sec"),
           key="throughput_tok_s", unit="tokens/s"),
    Metric("FLOPS_per_gpu", "max", aliases=("flops", "FLOPS", "flops_per_gpu"),
           key="flops_per_device", unit="FLOP/s"),
    Metric("cost_score", "min", aliases=("cost",), unit="1"),
    Metric("mem_bytes", "min", aliases=("memory",), unit="B"),
    # the cost model's variables (simcore.hardware.costmodel.add_costs)
    Metric("cost_usd", "min", aliases=("dollars", "usd"), unit="USD"),
    Metric("power_w", "min", aliases=("power", "watts"), unit="W"),
    Metric("cost_usd_per_device", "min", unit="USD"),
    Metric("power_w_per_device", "min", unit="W"),
    Metric("tokens_per_s_per_gpu", "max", aliases=("tok_s_per_gpu", "tokens_per_s_per_device"),
           unit="tokens/s/device"),
):
    register_metric(_m)


def known_metrics() -> list[str]:
    """Every accepted metric name (canonical names and aliases)."""
    return sorted(_LOOKUP)


def get_metric(metric: str | Metric) -> Metric:
    """Resolve a name or alias; unknown names raise with the list of known ones."""
    if isinstance(metric, Metric):
        return metric
    if not isinstance(metric, str):
        raise UnknownMetricError(
            f"metric must be a name (str) or Metric, got {type(metric).__name__}"
        )
    try:
        return _LOOKUP[metric]
    except KeyError:
        raise UnknownMetricError(
            f"unknown metric {metric!r}; pass one of {known_metrics()} "
            "or register your own with simcore.engine.metrics.register_metric(Metric(...))"
        ) from None


def _as_number(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def metric_is_better(metric: str | Metric, candidate: Any, incumbent: Any) -> bool:
    """Whether ``candidate`` strictly beats ``incumbent`` for ``metric``.

    Latency (and any ``"min"`` metric) wins only when smaller, the others only when
    larger. A ``None``/NaN/non-numeric candidate never wins; a ``None``/NaN incumbent
    loses to any number.
    """
    return get_metric(metric).is_better(candidate, incumbent)


def metric_value(results: Mapping[str, Any] | None, metric: str | Metric) -> float | None:
    """Read ``metric`` from a results mapping (e.g. a DeepSpeed metrics.json).

    The exact key the user named is preferred; then the canonical name, then the
    aliases and the Dataset key. Missing, ``None`` and NaN values give ``None``.

    Examples
    --------
    >>> metric_value({"flops": 1.0, "FLOPS_per_gpu": 2.0}, "flops")
    1.0
    >>> metric_value({"FLOPS_per_gpu": 2.0}, "FLOPS")
    2.0
    >>> metric_value({"latency": None}, "latency") is None
    True
    """
    key = metric_key(results, metric)
    return None if key is None or results is None else _as_number(results[key])


def metric_key(results: Mapping[str, Any] | None, metric: str | Metric) -> str | None:
    """The key of ``results`` that :func:`metric_value` reads for ``metric`` (the exact
    name first, then the canonical name and aliases), or None when none is present.

    Examples
    --------
    >>> metric_key({"FLOPS_per_gpu": 2.0, "latency": 1.0}, "flops")
    'FLOPS_per_gpu'
    >>> metric_key({}, "latency") is None
    True
    """
    m = get_metric(metric)
    if not results:
        return None
    requested = metric.name if isinstance(metric, Metric) else metric
    for key in (requested, *m.names):
        if key in results:
            return key
    return None


def select_best(
    items: Iterable[T], metric: str | Metric, *, value: Any = None
) -> tuple[T | None, float | None]:
    """The item with the best metric value; first wins ties; ``(None, None)`` if none has one.

    ``value`` maps an item to its results mapping (default: the item itself) or, if it
    returns a number, to the value directly.
    """
    m = get_metric(metric)
    best_item: T | None = None
    best_val: float | None = None
    for item in items:
        got = value(item) if value is not None else item
        v = metric_value(got, metric) if isinstance(got, Mapping) else _as_number(got)
        if m.is_better(v, best_val):
            best_item, best_val = item, v
    return best_item, best_val


def best(
    ds: Any,
    metric: str | Metric = "latency",
    dims: Sequence[str] | None = None,
    *,
    feasible: str | None = "fits",
) -> Any:
    """Best point over ``dims`` of a Dataset, by ``metric``'s direction.

    Infeasible points (``feasible`` variable False) and NaN never win. The result holds
    every variable at the winning point, the winning coordinates as ``best_<dim>``
    variables, the flat winning index ``best_layout_index`` (C order over ``dims``),
    ``n_fits`` and ``any_fits`` (False where nothing fits: then numeric values are NaN,
    booleans False, ``best_<dim>`` -1 or "" and ``best_layout_index`` -1).

    Parameters
    ----------
    ds : xarray.Dataset
        Output of :func:`simcore.evaluate` (or any Dataset holding ``metric``'s key).
    metric : str or Metric
    dims : sequence of str, optional
        Dims to reduce; default: every parallel (layout) dim present.
    feasible : str or None
        Boolean variable marking feasible points.
    """
    import xarray as xr

    from .space import PARALLEL_DIMS

    m = get_metric(metric)
    key = m.key if m.key in ds.data_vars else (m.name if m.name in ds.data_vars else None)
    if key is None:
        raise UnknownMetricError(
            f"metric {m.name!r} (variable {m.key!r}) is not in this Dataset; it holds "
            f"{sorted(map(str, ds.data_vars))}"
        )
    if dims is None:
        dims = [d for d in PARALLEL_DIMS if d in ds.dims]
    dims = list(dims)
    missing = [d for d in dims if d not in ds.dims]
    if missing:
        raise ValueError(f"dims {missing} not in the Dataset; it has {list(ds.dims)}")
    if not dims:
        raise ValueError("best() needs at least one dim to reduce over")
    stacked = ds.stack(_layout=dims)
    val = stacked[key]
    ok = val.notnull()
    if feasible is not None and feasible in stacked:
        ok = ok & stacked[feasible]
    ok.attrs = {}
    score = xr.where(ok, val * m.sign, math.inf)
    idx = score.argmin("_layout")
    any_ok = ok.any("_layout")
    if idx.chunks is not None:  # vectorised indexing needs concrete indexers
        idx, any_ok = idx.compute(), any_ok.compute()
    picked = stacked.isel(_layout=idx)
    out = xr.Dataset(attrs=dict(ds.attrs, best_metric=m.name, best_direction=m.direction))
    for name, var in picked.data_vars.items():
        var = var.drop_vars(["_layout", *dims], errors="ignore")
        if var.dtype.kind == "b":
            var = var & any_ok
        elif var.dtype.kind in "fiu":
            var = var.where(any_ok)  # ints become float NaN where nothing fits
        out[name] = var
    for d in dims:
        coord = picked[d].drop_vars(["_layout", *dims], errors="ignore")
        fill: Any = "" if coord.dtype.kind in "OUS" else -1
        if coord.dtype.kind in "OUS":
            coord = coord.astype(object)
        out[f"best_{d}"] = coord.where(any_ok, fill)
    out["best_layout_index"] = idx.where(any_ok, -1).drop_vars(["_layout", *dims], errors="ignore")
    out["n_fits"] = ok.sum("_layout").drop_vars(["_layout", *dims], errors="ignore")
    out["any_fits"] = any_ok
    return out


def top_points(ds: Any, metric: str | Metric = "latency", n: int = 10, *,
               feasible: str | None = "fits") -> list[dict[str, Any]]:
    """The ``n`` best feasible points of a Dataset as rows (dicts), best first.

    Sorting is stable, so the first row is exactly what :func:`best` picks over all
    dims. Rows carry every coordinate and every variable at that point.
    """
    import xarray as xr

    m = get_metric(metric)
    key = m.key if m.key in ds.data_vars else m.name
    if key not in ds.data_vars:
        raise UnknownMetricError(
            f"metric {m.name!r} is not in this Dataset; it holds {sorted(map(str, ds.data_vars))}"
        )
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    val = ds[key]
    ok = val.notnull()
    if feasible is not None and feasible in ds:
        ok = ok & ds[feasible]
    val, ok = xr.broadcast(val, ok)
    dims = list(val.dims)
    score = (val * m.sign).where(ok).transpose(*dims).values.ravel()
    order = np.argsort(np.where(np.isnan(score), np.inf, score), kind="stable")
    n_ok = int(np.count_nonzero(~np.isnan(score)))
    rows = []
    shape = tuple(ds.sizes[d] for d in dims)
    for flat in order[: min(n, n_ok)]:
        pos = dict(zip(dims, np.unravel_index(int(flat), shape), strict=True))
        pt = ds.isel(pos)
        row: dict[str, Any] = {d: pt[d].item() for d in dims}
        for name, var in pt.data_vars.items():
            row[str(name)] = var.item() if var.ndim == 0 else var.values
        rows.append(row)
    return rows
