"""Serving planner: which deployment gives the most tokens/s per GPU within latency limits?

Given a model, ``gpus`` devices of one hardware family, the traffic (``isl`` input and
``osl`` output tokens per request) and limits on TTFT and TPOT, :func:`plan` searches

* **aggregated** serving: one layout replicated over the budget
  (``replicas = gpus // n_devices``), each replica continuously batching ``batch``
  requests: prefills of new requests interleave with the decode steps;
* **disaggregated** serving: ``x`` prefill workers and ``y`` decode workers, each side
  with its own layout, rate-matched so that prefill never starves decode
  (``x · prefill_batch / TTFT >= y · batch / ((osl - 1) · TPOT)`` requests/s) and
  ``x · size_p + y · size_d <= gpus``;

and returns the best configurations by output tokens/s per GPU that meet the limits and
the Pareto frontier of tokens/s per GPU vs tokens/s per user (directions from the metric
registry). Everything comes from the public engine API: :func:`simcore.evaluate` with
``batch`` and ``s_kv`` as sweep dimensions and the device budget ``gpus`` (masked in the
engine), over the whole layout space, then labelled arithmetic. ``dtype`` (fp16, bf16,
fp8, int8) sets the precision of the weights, the activations (so the matmul rate) and
the KV cache on both sides.

The serving model (see :func:`agg_metrics`, :func:`disagg_metrics`):

* TTFT = prefill of the ``isl`` input tokens (at the prefill batch), no queueing;
* TPOT = one decode step at batch ``b`` with the KV cache at the mean context during
  generation, ``isl + osl // 2``; aggregated TPOT also carries the prefills that
  interleave with the decode steps (``b`` prefills per ``osl - 1`` steps);
* request latency = TTFT + (osl - 1) · TPOT; tokens/s per user = 1000 / TPOT_ms;
  tokens/s counts output tokens;
* memory: the decode layout must hold the KV cache at the *end* of generation
  (``isl + osl`` tokens per request) for the whole batch; the largest such batch in the
  sweep is reported as ``max_batch``; an aggregated replica must also fit a batch-1
  prefill (its activations are not added on top of the decode KV cache).

Data parallelism is expressed as replicas / workers: the planner's layouts have
``dp = 1`` (in the engine DP only splits the batch, so a DP-``k`` layout is ``k``
replicas).

Examples
--------
>>> from simcore.studies.serving import plan
>>> p = plan("Llama 3.1 8B", family="H100-SXM", gpus=2, isl=1024, osl=128,
...          max_ttft_ms=500, max_tpot_ms=50, batch=(1, 16))
>>> row = p.rows()[0]
>>> row["mode"] in ("agg", "disagg") and row["tpot_ms"] <= 50 and row["n_devices"] <= 2
True
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import xarray as xr

from ..engine.evaluate import evaluate
from ..engine.metrics import METRICS, Metric, register_metric
from ..engine.pareto import pareto
from ..engine.space import PARALLEL_DIMS, Space, full_space
from ..errors import DeviceBudgetError, SimcoreInputError
from ..model.presets import HARDWARE_FAMILIES, PRESETS, get_family, load_model
from ..model.specs import HW_KNOBS, Efficiency, Hardware, HardwareFamily, Model, Workload

__all__ = [
    "DEFAULT_BATCHES",
    "DEFAULT_PREFILL_BATCHES",
    "DTYPES",
    "ServingConfig",
    "ServingError",
    "InfeasibleError",
    "ServingPlan",
    "add_arguments",
    "agg_metrics",
    "budget_mask",
    "disagg_metrics",
    "layout_label",
    "plan",
    "plot_frontier",
    "run",
    "serving_space",
    "sweep",
]

#: Decode batches (concurrent requests per replica / decode worker) searched by default.
DEFAULT_BATCHES: tuple[int, ...] = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
#: Prefill batches (requests prefilled together by a disaggregated prefill worker).
DEFAULT_PREFILL_BATCHES: tuple[int, ...] = (1, 2, 4, 8)

#: Precisions the planner serves in (``dtype=``): weights, activations and KV cache alike.
DTYPES: tuple[str, ...] = ("fp16", "bf16", "fp8", "int8")

#: The serving objectives, declared once; ``plan`` ranks and builds frontiers with them.
SERVING_METRICS: tuple[Metric, ...] = (
    Metric("tokens_per_s_per_gpu", "max", aliases=("tok/s/gpu",), unit="tokens/s/GPU"),
    Metric("tokens_per_s_per_user", "max", aliases=("tok/s/user",), unit="tokens/s/user"),
    Metric("ttft_ms", "min", aliases=("ttft",), unit="ms"),
    Metric("tpot_ms", "min", aliases=("tpot",), unit="ms"),
    Metric("request_latency_ms", "min", aliases=("e2e_latency_ms",), unit="ms"),
)
for _m in SERVING_METRICS:
    if _m.name not in METRICS:
        register_metric(_m)

#: The frontier's two objectives (directions come from the registry).
FRONTIER_OBJECTIVES = ("tokens_per_s_per_gpu", "tokens_per_s_per_user")

_UNITS = {
    "ttft_ms": "ms", "tpot_ms": "ms", "decode_step_ms": "ms", "agg_tpot_ms": "ms",
    "agg_ttft_ms": "ms",
    "agg_tokens_per_s_per_gpu": "tokens/s/GPU", "agg_tokens_per_s_per_user": "tokens/s/user",
    "decode_tokens_per_s_per_gpu": "tokens/s/GPU", "prefill_requests_per_s": "requests/s",
    "decode_mem_per_gpu_gb": "GB", "n_devices": "1", "max_batch": "requests",
    "batch": "requests", "prefill_batch": "requests", "s_kv": "tokens",
}


class ServingError(SimcoreInputError):
    """Bad input to the serving planner (the message says what would work); a
    :class:`~simcore.errors.SimcoreInputError`, so a ``ValueError``."""


class InfeasibleError(ServingError):
    """Valid input, but no deployment meets the budget or the limits.

    ``binding`` names what binds (``"gpus"``, ``"batch"``, ``"max_ttft_ms"``,
    ``"max_tpot_ms"``),
    ``best`` the best value any configuration reaches, ``limit`` the limit, and
    ``min_gpus`` (budget errors) the smallest GPU count that fits, if any.
    """

    def __init__(self, message: str, *, binding: str, best: float | None = None,
                 limit: float | None = None, min_gpus: int | None = None) -> None:
        super().__init__(message)
        self.binding = binding
        self.best = best
        self.limit = limit
        self.min_gpus = min_gpus


# --- validation ---------------------------------------------------------------------------

def _positive_int(name: str, value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ServingError(f"{name} must be a positive integer ({what}), got {value!r}")
    return int(value)


def _limit(name: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not (
            math.isfinite(value) and value > 0):
        raise ServingError(f"{name} must be a positive number of milliseconds or None (no "
                           f"limit), got {value!r}")
    return float(value)


def _int_list(name: str, values: int | Iterable[int], what: str) -> tuple[int, ...]:
    vals = [values] if isinstance(values, int | np.integer) else list(values)
    if not vals:
        raise ServingError(f"{name} needs at least one value ({what})")
    return tuple(sorted({_positive_int(name, v, what) for v in vals}))


def _dtype(dtype: Any, fam: HardwareFamily) -> str:
    """``dtype`` checked against :data:`DTYPES` and the family's matmul rates."""
    if dtype is None:
        return ""
    if dtype not in DTYPES:
        raise ServingError(f"dtype must be one of {', '.join(DTYPES)} or None (the model's own "
                           f"precision), got {dtype!r}")
    ratio = {"fp8": fam.topology.fp8_ratio, "int8": fam.topology.int8_ratio}.get(dtype, 1.0)
    if not ratio > 0:
        others = ", ".join(d for d in DTYPES if d != dtype and {
            "fp8": fam.topology.fp8_ratio, "int8": fam.topology.int8_ratio}.get(d, 1.0) > 0)
        raise ServingError(f"dtype {dtype!r} needs a family with {dtype.upper()} matmuls "
                           f"(Topology.{dtype}_ratio > 0, e.g. H100-SXM or H200); {fam.name} "
                           f"has none: pass one of {others}")
    return str(dtype)


def _workload(mode: str, dtype: str = "", **fields: int) -> Workload:
    """A serving workload; ``dtype`` sets the weight, activation and KV-cache dtypes.
    Decode steps replay CUDA graphs, as vLLM, SGLang and TensorRT-LLM serve by default."""
    prec = {f: dtype for f in ("weight_dtype", "act_dtype", "kv_dtype")} if dtype else {}
    graphs = {"cuda_graphs": True} if mode == "decode" else {}
    return Workload(mode, **fields, **prec, **graphs)  # type: ignore[arg-type]


def _one_hardware(hardware: Hardware | Mapping[str, Any] | None, fam: HardwareFamily) -> Hardware:
    if hardware is None:
        return fam.hardware
    if isinstance(hardware, Hardware):
        return hardware
    if not isinstance(hardware, Mapping):
        raise ServingError(f"hardware must be a Hardware or a mapping knob -> value, got "
                           f"{type(hardware).__name__}")
    unknown = set(hardware) - set(HW_KNOBS)
    if unknown:
        raise ServingError(f"unknown hardware knobs {sorted(unknown)}; known: {list(HW_KNOBS)}")
    point = fam.hardware.as_dict()
    for k, v in hardware.items():
        arr = np.atleast_1d(np.asarray(v, dtype=float))
        if arr.size != 1:
            raise ServingError(f"plan() takes one hardware point; {k!r} has {arr.size} values "
                               "(sweep a grid with simcore.studies.serving.sweep or simcore.evaluate)")
        point[k] = float(arr[0])
    return Hardware(**point)


# --- the sweep: batch and context as dimensions, a device budget ---------------------------

def budget_mask(n_devices: xr.DataArray, gpus: int | None, *, exact: bool = False) -> xr.DataArray:
    """True where a layout uses at most ``gpus`` devices (exactly ``gpus`` if ``exact``).

    Examples
    --------
    >>> import xarray as xr
    >>> n = xr.DataArray([1, 2, 4, 8, 16], dims="layout")
    >>> budget_mask(n, 4).values.tolist(), budget_mask(n, 4, exact=True).values.tolist()
    ([True, True, True, False, False], [False, False, True, False, False])
    """
    if gpus is None:
        return xr.ones_like(n_devices, dtype=bool)
    gpus = _positive_int("gpus", gpus, "the device budget")
    return (n_devices == gpus) if exact else (n_devices <= gpus)


def serving_space(gpus: int | None = None) -> Space:
    """The planner's layout space: the full space with ``dp = 1`` (replicas and workers
    play DP's role) and CP, TP, PP no larger than the budget."""
    base = full_space()
    d = base.dict
    keep = {dim: tuple(v for v in d[dim] if gpus is None or v <= gpus) or (1,)
            for dim in ("cp", "tp", "pp")}
    return base.with_(dp=(1,), **keep)


def sweep(
    model: Model | str,
    mode: str,
    *,
    batch: int | Sequence[int],
    s_kv: int | Sequence[int],
    gpus: int | None = None,
    exact_gpus: bool = False,
    space: str | Space | Mapping[str, Sequence[Any]] | None = "full",
    hardware: Hardware | Mapping[str, Any] | None = None,
    family: str | HardwareFamily | None = None,
    efficiency: Efficiency | None = None,
    dtype: str = "",
) -> xr.Dataset:
    """:func:`simcore.evaluate` with ``s_kv`` and ``batch`` as dimensions and a device budget.

    ``simcore.evaluate(..., batch=, s_kv=, gpus=, exact_gpus=)`` (prefill: ``s_q =
    s_kv``), the values sorted, plus a ``within_budget`` variable marking layouts using
    at most ``gpus`` devices (exactly ``gpus`` with ``exact_gpus``); the engine masks the
    others (``fits`` and ``valid`` False, NaN outputs; never dropped). ``dtype`` (one of
    :data:`DTYPES` or ``""``) sets the weight, activation and KV-cache dtypes. A budget
    on which nothing fits raises :class:`~simcore.errors.DeviceBudgetError`.

    Examples
    --------
    >>> ds = sweep("Llama 3.1 8B", "decode", batch=[1, 8], s_kv=[2048, 4096], gpus=2,
    ...            space="reduced", family="H100-SXM")
    >>> dict(ds.sizes)["batch"], dict(ds.sizes)["s_kv"], bool(ds.fits.where(ds.n_devices > 2, False).any())
    (2, 2, False)
    """
    if mode not in ("prefill", "decode"):
        raise ServingError(f"sweep mode must be 'prefill' or 'decode', got {mode!r}")
    batches = _int_list("batch", batch, "requests per step")
    contexts = _int_list("s_kv", s_kv, "context tokens")
    ds = evaluate(model, _workload(mode, dtype), batch=list(batches), s_kv=list(contexts),
                  gpus=gpus, exact_gpus=exact_gpus, space=space, hardware=hardware,
                  family=family, efficiency=efficiency)
    within = budget_mask(ds.n_devices, gpus, exact=exact_gpus)
    within.attrs = {"description": f"layout uses {'exactly' if exact_gpus else 'at most'} "
                                   f"{gpus} devices" if gpus else "no device budget"}
    ds["within_budget"] = within
    ds["batch"].attrs.update(units="requests", long_name="sequences per step")
    ds["s_kv"].attrs.update(units="tokens", long_name="context length")
    for k in ("batch", "s_kv", "s_q"):
        ds.attrs.pop(k, None)
    ds.attrs.update(gpus=gpus if gpus is not None else "", exact_gpus=int(exact_gpus),
                    dtype=dtype)
    return ds


# --- the serving model: declared once, used by plan() and by anyone checking a config -----

def agg_metrics(*, prefill_ns: Any, step_ns: Any, batch: Any, osl: int) -> dict[str, Any]:
    """Aggregated (continuous batching) serving on one replica.

    The replica keeps ``batch`` requests in flight. Every ``osl - 1`` decode steps
    (``step_ns`` each) all ``batch`` requests finish and ``batch`` new prefills
    (``prefill_ns`` each) interleave with the steps, so one cycle is
    ``(osl - 1) · step_ns + batch · prefill_ns`` and yields ``batch · osl`` tokens.
    A user sees TTFT = ``prefill_ns`` and TPOT = cycle / (osl - 1). With ``osl`` 1 no
    decode step runs: TPOT is NaN, the request latency is the TTFT and the replica
    serves one request per ``prefill_ns``. Works on scalars and arrays.

    Examples
    --------
    >>> m = agg_metrics(prefill_ns=100e6, step_ns=20e6, batch=4, osl=101)
    >>> round(m["tpot_ns"] / 1e6, 1), round(m["tokens_per_s"], 1)
    (24.0, 168.3)
    """
    steps = max(osl - 1, 0)
    cycle_ns = steps * step_ns + batch * prefill_ns
    if not steps:  # osl 1: the prefill's token is the only one, no decode step runs
        return {
            "ttft_ns": prefill_ns,
            "tpot_ns": step_ns * math.nan,
            "request_latency_ns": prefill_ns + 0 * cycle_ns,
            "requests_per_s": 1e9 / (prefill_ns + 0 * cycle_ns),
            "tokens_per_s": 1e9 / (prefill_ns + 0 * cycle_ns),
        }
    return {
        "ttft_ns": prefill_ns,
        "tpot_ns": step_ns + batch * prefill_ns / steps,
        "request_latency_ns": prefill_ns + cycle_ns,
        "requests_per_s": batch / cycle_ns * 1e9,
        "tokens_per_s": batch * osl / cycle_ns * 1e9,
    }


def disagg_metrics(*, prefill_ns: Any, prefill_batch: Any, prefill_workers: Any, step_ns: Any,
                   batch: Any, decode_workers: Any, osl: int) -> dict[str, Any]:
    """Disaggregated serving: prefill workers hand requests to decode workers.

    Prefill serves ``prefill_workers · prefill_batch / prefill_ns`` requests/s; decode,
    holding ``batch`` requests per worker for ``osl - 1`` steps, serves
    ``decode_workers · batch / ((osl - 1) · step_ns)``. The system serves the smaller;
    ``rate_matched`` says prefill keeps up (so decode runs at its full batch and TPOT is
    ``step_ns``). The KV transfer between the two is not modelled. With ``osl`` 1 there is
    no decode step: TPOT is NaN, the request latency is the TTFT and decode never limits
    the rate (the planner does not search disaggregated serving then).

    Examples
    --------
    >>> m = disagg_metrics(prefill_ns=0.05e9, prefill_batch=1, prefill_workers=2, step_ns=25e6,
    ...                    batch=100, decode_workers=1, osl=101)
    >>> float(m["requests_per_s"]), bool(m["rate_matched"]), float(m["tokens_per_s"])
    (40.0, True, 4040.0)
    """
    steps = max(osl - 1, 1)
    prefill_rps = prefill_workers * prefill_batch / prefill_ns * 1e9
    decode_rps = decode_workers * batch / (steps * step_ns) * 1e9
    if osl <= 1:  # no decode step: decode keeps up whatever its size
        decode_rps = decode_rps * math.inf
    rps = np.minimum(prefill_rps, decode_rps)
    return {
        "ttft_ns": prefill_ns,
        "tpot_ns": step_ns if osl > 1 else step_ns * math.nan,
        "request_latency_ns": prefill_ns + max(osl - 1, 0) * step_ns,
        "prefill_requests_per_s": prefill_rps,
        "decode_requests_per_s": decode_rps,
        "rate_matched": prefill_rps >= decode_rps if osl > 1 else prefill_rps > 0,
        "requests_per_s": rps,
        "tokens_per_s": rps * osl,
    }


# --- results ------------------------------------------------------------------------------

def layout_label(layout: Mapping[str, Any]) -> str:
    """Short name of a layout: ``TP4``, ``TP2·PP2``, ``TP8 kv=seq``, ``TP2·CP2 ring=kv``.

    Choices that cannot matter are left out (ring, FFN scope and placements when CP = 1).

    Examples
    --------
    >>> layout_label({"tp": 4, "cp": 1, "pp": 1, "dp": 1, "kv_shard_mode": "head"})
    'TP4'
    """
    parts = [f"TP{layout['tp']}"]
    for dim in ("cp", "pp", "dp"):
        if int(layout.get(dim, 1)) > 1:
            parts.append(f"{dim.upper()}{layout[dim]}")
    s = "·".join(parts)
    extra = []
    if layout.get("kv_shard_mode", "head") != "head":
        extra.append(f"kv={layout['kv_shard_mode']}")
    if int(layout.get("cp", 1)) > 1:
        extra.append(f"ring={layout.get('cp_ring_variant', 'kv')}")
        if layout.get("ffn_shard_scope", "TP") != "TP":
            extra.append(f"ffn={layout['ffn_shard_scope']}")
        for dim, short in (("tp_placement", "tp"), ("cp_placement", "cp")):
            if layout.get(dim, "inner") != "inner":
                extra.append(f"{short}={layout[dim]}")
    return " ".join([s, *extra])


@dataclass(frozen=True)
class ServingConfig:
    """One deployment and its serving metrics (a row of the plan)."""

    mode: str
    layout: str
    prefill_layout: str
    decode_layout: str
    replicas: int | None
    prefill_workers: int | None
    decode_workers: int | None
    batch: int
    prefill_batch: int
    ttft_ms: float
    tpot_ms: float
    request_latency_ms: float
    tokens_per_s_per_gpu: float
    tokens_per_s_per_user: float
    tokens_per_s: float
    requests_per_s: float
    n_devices: int
    max_batch: int
    decode_mem_per_gpu_gb: float
    meets_limits: bool
    #: weights, activations and KV cache precision (``plan(dtype=)``); ``"default"``: the
    #: model's own (16-bit for the presets)
    dtype: str = "default"

    def as_row(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def key(self) -> tuple[Any, ...]:
        return (self.mode, self.layout, self.batch, self.prefill_batch)


ROW_KEYS: tuple[str, ...] = tuple(f.name for f in fields(ServingConfig))


@dataclass(frozen=True, eq=False)
class ServingPlan:
    """What :func:`plan` found.

    ``best``: configurations meeting the budget and both limits, best tokens/s per GPU
    first (the top ``top`` of each mode). ``frontier``: each mode's Pareto set of tokens/s
    per GPU vs tokens/s per user among configurations that fit and meet the TTFT limit
    (TPOT is the frontier's other axis, so its limit is not applied; ``meets_limits``
    says which do). ``candidates``: every distinct such configuration. ``dataset``: the
    per-layout sweep (TTFT over prefill batches; decode step, aggregated metrics and
    memory over decode batches).
    """

    model: str
    family: str
    gpus: int
    isl: int
    osl: int
    max_ttft_ms: float | None
    max_tpot_ms: float | None
    exact_gpus: bool
    best: tuple[ServingConfig, ...]
    frontier: tuple[ServingConfig, ...]
    candidates: tuple[ServingConfig, ...]
    dataset: xr.Dataset
    elapsed_s: float
    dtype: str = ""
    #: what the plan left out or defined differently for this input, one sentence each
    #: (e.g. ``osl`` 1: no TPOT); the CLI prints them under its header
    notes: tuple[str, ...] = ()

    def rows(self, which: str = "best") -> list[dict[str, Any]]:
        """``best`` (default), ``frontier`` or ``candidates`` as dicts (keys carry units)."""
        if which not in ("best", "frontier", "candidates"):
            raise ServingError(f"rows() takes 'best', 'frontier' or 'candidates', got {which!r}")
        return [c.as_row() for c in getattr(self, which)]

    def best_of(self, mode: str) -> ServingConfig | None:
        """The best configuration of one mode (``"agg"`` or ``"disagg"``), if any."""
        return next((c for c in self.best if c.mode == mode), None)


# --- the planner ----------------------------------------------------------------------------

def _layout_table(ds: xr.Dataset) -> list[dict[str, Any]]:
    idx = ds.n_devices.stack(_layout=PARALLEL_DIMS).indexes["_layout"]
    return [dict(zip(PARALLEL_DIMS, (v.item() if hasattr(v, "item") else v for v in t),
                     strict=True)) for t in idx]


def _flat(da: xr.DataArray, lead: str | None = None) -> np.ndarray:
    dims = ([lead] if lead else []) + list(PARALLEL_DIMS)
    arr = da.transpose(*dims).values
    return arr.reshape((arr.shape[0], -1) if lead else (-1,))


def _pareto_front(configs: Sequence[ServingConfig]) -> list[ServingConfig]:
    """The Pareto set by :data:`FRONTIER_OBJECTIVES`; of configurations at the same point
    the best-ranked one (lowest TTFT, fewest GPUs, simplest layout) is kept."""
    if not configs:
        return []
    ds = xr.Dataset({k: ("config", np.array([getattr(c, k) for c in configs], dtype=float))
                     for k in FRONTIER_OBJECTIVES})
    mask = pareto(ds, objectives=FRONTIER_OBJECTIVES, feasible=None).values
    on = _dedupe((c for c, m in zip(configs, mask, strict=True) if m),
                 key=lambda c: tuple(_sig(getattr(c, k)) for k in FRONTIER_OBJECTIVES))
    return sorted(on, key=lambda c: (c.tokens_per_s_per_user, -c.tokens_per_s_per_gpu))


def _sig(x: float) -> str:
    return f"{x:.6g}"


def _rank(configs: Iterable[ServingConfig]) -> list[ServingConfig]:
    """Best first: tokens/s per GPU, then tokens/s per user, TTFT, fewer GPUs, simpler layout."""
    return sorted(configs, key=lambda c: (-c.tokens_per_s_per_gpu, -c.tokens_per_s_per_user,
                                          c.ttft_ms, c.n_devices, len(c.layout), c.key))


def _same_result(c: ServingConfig) -> tuple[Any, ...]:
    return (c.mode, c.batch, c.prefill_batch, c.n_devices, c.replicas, c.prefill_workers,
            c.decode_workers, *(_sig(v) for v in (c.tokens_per_s_per_gpu,
                                                  c.tokens_per_s_per_user, c.ttft_ms)))


def _dedupe(configs: Iterable[ServingConfig], key: Any = _same_result) -> list[ServingConfig]:
    """Ranked, keeping the first of configurations with the same ``key`` (by default: the
    same results, e.g. layouts whose extra choices change nothing on this budget)."""
    out: dict[Any, ServingConfig] = {}
    for c in _rank(configs):
        out.setdefault(key(c), c)
    return list(out.values())


def _deployment(c: ServingConfig) -> tuple[Any, ...]:
    """What a ``best`` row stands for: the decode side and batch (prefill variants that give
    the same decode deployment collapse to the best-ranked one)."""
    if c.mode == "agg":
        return (c.mode, c.layout, c.batch)
    return (c.mode, c.decode_layout, c.decode_workers, c.batch)


def _smallest_fitting(model: Model, isl: int, osl: int, hw: Hardware, fam: HardwareFamily,
                      efficiency: Efficiency | None, dtype: str = "") -> tuple[int, str] | None:
    """Fewest devices of any layout holding weights + batch-1 KV (isl + osl) and a prefill."""
    space = full_space().with_(dp=(1,))
    dec = evaluate(model, _workload("decode", dtype, batch=1, s_kv=isl + osl), space=space,
                   hardware=hw, family=fam, efficiency=efficiency)
    pre = evaluate(model, _workload("prefill", dtype, batch=1, s_kv=isl), space=space,
                   hardware=hw, family=fam, efficiency=efficiency)
    ok = (dec.fits & pre.fits).squeeze(list(HW_KNOBS))
    if not bool(ok.any()):
        return None
    n = dec.n_devices.where(ok)
    best = n.stack(_layout=PARALLEL_DIMS)
    j = int(best.fillna(np.inf).argmin("_layout"))
    lay = dict(zip(PARALLEL_DIMS, best.indexes["_layout"][j], strict=True))
    return int(best.values[j]), layout_label(lay)


def plan(
    model: Model | str,
    *,
    family: str | HardwareFamily | None = None,
    gpus: int,
    isl: int,
    osl: int,
    max_ttft_ms: float | None = None,
    max_tpot_ms: float | None = None,
    hardware: Hardware | Mapping[str, Any] | None = None,
    efficiency: Efficiency | None = None,
    batch: int | Sequence[int] = DEFAULT_BATCHES,
    prefill_batch: int | Sequence[int] = DEFAULT_PREFILL_BATCHES,
    exact_gpus: bool = False,
    modes: Sequence[str] = ("agg", "disagg"),
    top: int = 5,
    dtype: str | None = None,
) -> ServingPlan:
    """Best aggregated and disaggregated deployments of ``model`` on ``gpus`` devices.

    Parameters
    ----------
    model : Model or str
        A :class:`~simcore.model.specs.Model`, a preset name or a HuggingFace ``config.json``.
    family : str or HardwareFamily, optional
        Hardware family (``"H200"``, ...); default ``"SiP"``.
    gpus : int
        Device budget; layouts and deployments using more are masked.
    isl, osl : int
        Input and output tokens per request.
    max_ttft_ms, max_tpot_ms : float, optional
        Limits on time to first token and time per output token (None: no limit).
    hardware : Hardware or mapping knob -> value, optional
        One hardware point (knobs not given come from the family).
    efficiency : Efficiency, optional
    batch : int or sequence of int
        Decode batches (requests in flight per replica / decode worker) to search.
    prefill_batch : int or sequence of int
        Prefill batches of a disaggregated prefill worker (aggregated serving prefills
        one request at a time).
    exact_gpus : bool
        Use exactly ``gpus`` devices (aggregated: ``gpus`` a multiple of the layout's
        size; disaggregated: ``x · size_p + y · size_d == gpus``).
    modes : sequence of {"agg", "disagg"}
    top : int
        Best configurations kept per mode.
    dtype : {"fp16", "bf16", "fp8", "int8"}, optional
        Precision of the weights, the activations and messages (fp8 / int8 matmuls at the
        family's ``fp8_ratio`` / ``int8_ratio`` times the 16-bit peak) and the KV cache,
        on both prefill and decode (``Workload.weight_dtype`` / ``act_dtype`` /
        ``kv_dtype``). Default: the model's own precision (16-bit for the presets).

    Returns
    -------
    ServingPlan

    Raises
    ------
    ServingError
        Bad input (non-positive ``gpus``/``isl``/``osl``/limits, unknown mode, a
        ``dtype`` the family has no matmul rate for).
    InfeasibleError
        Nothing fits the budget (the message gives the smallest GPU count that fits) or
        nothing meets a limit (the message says which binds and by how much).
    """
    t0 = time.perf_counter()
    gpus = _positive_int("gpus", gpus, "the device budget")
    isl = _positive_int("isl", isl, "input tokens per request")
    osl = _positive_int("osl", osl, "output tokens per request")
    ttft_lim = _limit("max_ttft_ms", max_ttft_ms)
    tpot_lim = _limit("max_tpot_ms", max_tpot_ms)
    top = _positive_int("top", top, "configurations per mode")
    batches = _int_list("batch", batch, "decode requests in flight")
    p_batches = tuple(sorted(set(_int_list("prefill_batch", prefill_batch,
                                           "requests per prefill")) | {1}))
    modes = tuple(modes)
    if not modes or set(modes) - {"agg", "disagg"}:
        raise ServingError(f"modes must be some of ('agg', 'disagg'), got {modes!r}")
    modes, notes = _prefill_only(osl, modes, tpot_lim)
    try:
        mdl = load_model(model)
        fam = get_family(family)
    except (ValueError, FileNotFoundError) as exc:
        raise ServingError(str(exc)) from None
    _check_budget_size(gpus, fam)
    hw = _one_hardware(hardware, fam)
    prec = _dtype(dtype, fam)
    space = serving_space(gpus)
    common: dict[str, Any] = dict(gpus=gpus, space=space, hardware=hw, family=fam,
                                  efficiency=efficiency, dtype=prec)
    mean_ctx, end_ctx = isl + osl // 2, isl + osl
    try:
        pre = sweep(mdl, "prefill", batch=p_batches, s_kv=isl, **common)
        dec = sweep(mdl, "decode", batch=batches, s_kv=[mean_ctx, end_ctx], **common)
    except DeviceBudgetError:  # nothing fits in the budget at any batch searched
        _raise_no_fit(mdl, fam, hw, efficiency, gpus=gpus, isl=isl, osl=osl,
                      batch_min=batches[0], dtype=prec)
    pre = pre.squeeze("s_kv", drop=True).squeeze(list(HW_KNOBS))
    dec_mean = dec.sel(s_kv=mean_ctx, drop=True).squeeze(list(HW_KNOBS))
    dec_end = dec.sel(s_kv=end_ctx, drop=True).squeeze(list(HW_KNOBS))

    # -- the per-layout serving dataset --------------------------------------------------------
    pre = pre.rename(batch="prefill_batch")
    n_dev = dec_mean.n_devices
    decode_fits = dec_end.fits & dec_mean.fits
    agg = agg_metrics(prefill_ns=pre.latency_ns.sel(prefill_batch=1, drop=True),
                      step_ns=dec_mean.latency_ns, batch=dec_mean.batch, osl=osl)
    agg_fits = decode_fits & pre.fits.sel(prefill_batch=1, drop=True)
    bvals = xr.DataArray(list(batches), dims="batch", coords={"batch": list(batches)})
    max_batch = bvals.where(decode_fits).max("batch").fillna(0).astype(np.int64)
    out = xr.Dataset({
        "ttft_ms": pre.latency_ns / 1e6,
        "prefill_fits": pre.fits,
        "prefill_requests_per_s": pre.prefill_batch / pre.latency_ns * 1e9,
        "decode_step_ms": dec_mean.latency_ns / 1e6,
        "decode_fits": decode_fits,
        "decode_tokens_per_s_per_gpu": dec_mean.throughput_tok_s / n_dev,
        "decode_mem_per_gpu_gb": dec_end.mem_bytes / 1e9,
        "agg_ttft_ms": agg["ttft_ns"] / 1e6,
        "agg_tpot_ms": agg["tpot_ns"] / 1e6,
        "agg_tokens_per_s_per_gpu": agg["tokens_per_s"] / n_dev,
        "agg_tokens_per_s_per_user": 1e9 / (agg["tpot_ns"] if osl > 1 else agg["ttft_ns"]),
        "agg_fits": agg_fits,
        "max_batch": max_batch,
        "n_devices": n_dev,
        "within_budget": dec_mean.within_budget,
    })
    for name, var in out.variables.items():
        if name in _UNITS:
            var.attrs["units"] = _UNITS[str(name)]
    out.attrs.update(model=mdl.name, family=fam.name, gpus=gpus, isl=isl, osl=osl, dtype=prec,
                     mean_context=mean_ctx, end_context=end_ctx,
                     max_ttft_ms=ttft_lim if ttft_lim is not None else "",
                     max_tpot_ms=tpot_lim if tpot_lim is not None else "",
                     exact_gpus=int(exact_gpus),
                     **{k: v for k, v in dec.attrs.items() if k.startswith("efficiency_")})

    layouts = _layout_table(out)
    labels = [layout_label(lay) for lay in layouts]
    nd = _flat(n_dev).astype(np.int64)
    mb = _flat(max_batch).astype(np.int64)
    mem = _flat(out.decode_mem_per_gpu_gb, "batch")
    step = _flat(dec_mean.latency_ns, "batch")
    dfit = _flat(decode_fits, "batch")
    t_pre = _flat(pre.latency_ns, "prefill_batch")
    pfit = _flat(pre.fits, "prefill_batch")

    def meets(ttft: float, tpot: float) -> bool:
        return (ttft_lim is None or ttft <= ttft_lim) and (tpot_lim is None or tpot <= tpot_lim)

    candidates: list[ServingConfig] = []
    # -- aggregated ----------------------------------------------------------------------------
    if "agg" in modes:
        afit = _flat(agg_fits, "batch")
        a_ttft = _flat(out.agg_ttft_ms.broadcast_like(out.agg_tpot_ms), "batch")
        a_tpot = _flat(out.agg_tpot_ms, "batch")
        a_tps = _flat(agg["tokens_per_s"], "batch")
        a_rps = _flat(agg["requests_per_s"], "batch")
        a_lat = _flat(agg["request_latency_ns"], "batch") / 1e6
        ok = afit.copy()  # the sweep's budget mask is in agg_fits already
        if exact_gpus:
            ok &= (gpus % np.maximum(nd, 1) == 0)[None, :]
        if ttft_lim is not None:
            ok &= a_ttft <= ttft_lim
        if osl == 1:  # no decode step: the batch changes nothing but memory; keep the first
            ok &= np.cumsum(ok, axis=0) == 1
        for i, j in zip(*np.nonzero(ok), strict=True):
            reps = gpus // int(nd[j])
            candidates.append(ServingConfig(
                mode="agg", layout=f"{reps}×{labels[j]}", prefill_layout=labels[j],
                decode_layout=labels[j], replicas=reps, prefill_workers=None,
                decode_workers=None, batch=int(batches[i]), prefill_batch=1,
                ttft_ms=float(a_ttft[i, j]), tpot_ms=float(a_tpot[i, j]),
                request_latency_ms=float(a_lat[i, j]),
                tokens_per_s_per_gpu=float(a_tps[i, j] / nd[j]),
                tokens_per_s_per_user=float(1e3 / (a_tpot[i, j] if osl > 1 else a_ttft[i, j])),
                tokens_per_s=float(a_tps[i, j] * reps), requests_per_s=float(a_rps[i, j] * reps),
                n_devices=reps * int(nd[j]), max_batch=int(mb[j]),
                decode_mem_per_gpu_gb=float(mem[i, j]),
                meets_limits=meets(float(a_ttft[i, j]), float(a_tpot[i, j])),
                dtype=prec or "default"))

    # -- disaggregated -------------------------------------------------------------------------
    if "disagg" in modes:
        sizes = sorted({int(s) for s in nd if s <= gpus})
        # prefill: per size, the (rate max, TTFT min) Pareto set of (layout, prefill batch)
        p_cands: list[tuple[int, int, int, float, float]] = []  # size, layout, pb, ns, rate
        for s in sizes:
            pts = []
            for k, pb in enumerate(p_batches):
                sel = np.nonzero(pfit[k] & (nd == s))[0]
                for j in sel:
                    ns = float(t_pre[k, j])
                    if ttft_lim is None or ns / 1e6 <= ttft_lim:
                        pts.append((pb / ns, ns, j, pb))
            pts.sort(key=lambda p: (-p[0], p[1]))
            best_ns = math.inf
            for rate, ns, j, pb in pts:
                if ns < best_ns:
                    best_ns = ns
                    p_cands.append((s, int(j), int(pb), ns, rate))
        # decode: per (size, batch) the fastest fitting layout
        d_cands: list[tuple[int, int, int, float]] = []  # size, layout, batch index, ns
        for s in sizes:
            for i in range(len(batches)):
                sel = np.nonzero(dfit[i] & (nd == s))[0]
                if sel.size:
                    j = int(sel[np.argmin(step[i, sel])])
                    d_cands.append((s, j, i, float(step[i, j])))
        steps = max(osl - 1, 1)
        for s_d, jd, i, ns_d in d_cands:
            b = int(batches[i])
            rate_d = b / (steps * ns_d)
            for y in range(1, gpus // s_d + 1):
                for s_p, jp, pb, ns_p, rate_p in p_cands:
                    x = math.ceil(y * rate_d / rate_p * (1 - 1e-12))
                    if exact_gpus:
                        rest = gpus - y * s_d
                        if rest < x * s_p or rest % s_p:
                            continue
                        x = rest // s_p
                    total = x * s_p + y * s_d
                    if total > gpus:
                        continue
                    m = disagg_metrics(prefill_ns=ns_p, prefill_batch=pb, prefill_workers=x,
                                       step_ns=ns_d, batch=b, decode_workers=y, osl=osl)
                    ttft, tpot = ns_p / 1e6, ns_d / 1e6
                    candidates.append(ServingConfig(
                        mode="disagg", layout=f"{x}×{labels[jp]} prefill + {y}×{labels[jd]} decode",
                        prefill_layout=labels[jp], decode_layout=labels[jd], replicas=None,
                        prefill_workers=x, decode_workers=y, batch=b, prefill_batch=pb,
                        ttft_ms=ttft, tpot_ms=tpot,
                        request_latency_ms=float(m["request_latency_ns"]) / 1e6,
                        tokens_per_s_per_gpu=float(m["tokens_per_s"]) / total,
                        tokens_per_s_per_user=1e3 / tpot, tokens_per_s=float(m["tokens_per_s"]),
                        requests_per_s=float(m["requests_per_s"]), n_devices=total,
                        max_batch=int(mb[jd]), decode_mem_per_gpu_gb=float(mem[i, jd]),
                        meets_limits=meets(ttft, tpot), dtype=prec or "default"))

    candidates = _dedupe(candidates)
    best: list[ServingConfig] = []
    for mode in modes:
        best += _dedupe((c for c in candidates if c.mode == mode and c.meets_limits),
                        key=_deployment)[:top]
    best = _rank(best)
    if not best:
        _explain_infeasible(mdl, fam, hw, efficiency, out, candidates, gpus=gpus, isl=isl,
                            osl=osl, ttft_lim=ttft_lim, tpot_lim=tpot_lim, modes=modes,
                            exact=exact_gpus, p_cands_exist=bool(pfit.any()),
                            batch_min=batches[0], dtype=prec)
    frontier: list[ServingConfig] = []
    for mode in modes:
        frontier += _pareto_front([c for c in candidates if c.mode == mode])
    return ServingPlan(model=mdl.name, family=fam.name, gpus=gpus, isl=isl, osl=osl,
                       max_ttft_ms=ttft_lim, max_tpot_ms=tpot_lim, exact_gpus=bool(exact_gpus),
                       best=tuple(best), frontier=tuple(frontier), candidates=tuple(candidates),
                       dataset=out, elapsed_s=time.perf_counter() - t0, dtype=prec,
                       notes=notes)


def _prefill_only(osl: int, modes: tuple[str, ...],
                  tpot_lim: float | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``modes`` to search and notes for the output. With ``osl`` 1 a request's only token
    comes from its prefill: no decode step, so no TPOT to limit (refused) and nothing for
    disaggregated decode workers to do (dropped; refused if it is the only mode)."""
    if osl > 1:
        return modes, ()
    if tpot_lim is not None:
        raise ServingError(f"max_tpot_ms {tpot_lim:g} (--max-tpot-ms): with osl 1 there is no "
                           "decode step and so no TPOT to limit; drop the TPOT limit or pass "
                           "osl >= 2")
    if modes == ("disagg",):
        raise ServingError("modes ('disagg',) (--mode disagg): with osl 1 there is no decode "
                           "step, so disaggregated serving has nothing for decode workers to "
                           "do; pass modes ('agg',) (--mode agg) or osl >= 2")
    notes = ["osl 1: no decode step, so no TPOT (shown as - / null, never a limit); the "
             "request latency is the TTFT, tokens/s per user 1000 / TTFT, one row per layout "
             "at the smallest batch that fits"]
    if "disagg" in modes:
        notes.append("osl 1: disaggregated serving not searched (no decode step for decode "
                     "workers)")
    return tuple(m for m in modes if m != "disagg"), tuple(notes)


def _check_budget_size(gpus: int, fam: HardwareFamily) -> None:
    """Refuse a budget larger than the family's system (the search grows with it)."""
    most = fam.topology.n_devices
    if gpus > most:
        raise ServingError(f"gpus {gpus} (--gpus): one {fam.name} system holds at most {most} "
                           f"devices; pass gpus <= {most}")


def _explain_infeasible(model: Model, fam: HardwareFamily, hw: Hardware,
                        efficiency: Efficiency | None, ds: xr.Dataset,
                        candidates: Sequence[ServingConfig], *, gpus: int, isl: int, osl: int,
                        ttft_lim: float | None, tpot_lim: float | None, modes: Sequence[str],
                        exact: bool, p_cands_exist: bool, batch_min: int,
                        dtype: str = "") -> None:
    """Raise the InfeasibleError that says what binds."""
    where = f"{gpus} {fam.name} GPU{'s' if gpus > 1 else ''}"
    fits_any = bool((ds.decode_fits.any("batch") & ds.prefill_fits.sel(prefill_batch=1)).any())
    if not fits_any or not p_cands_exist:
        _raise_no_fit(model, fam, hw, efficiency, gpus=gpus, isl=isl, osl=osl,
                      batch_min=batch_min, dtype=dtype)
    if ttft_lim is not None:
        floor = _ttft_floor(ds)
        if floor > ttft_lim:
            raise InfeasibleError(
                f"the lowest TTFT any layout reaches on {where} is {floor:.1f} ms > "
                f"--max-ttft-ms {ttft_lim:g} (by {floor - ttft_lim:.1f} ms); raise the limit "
                "or add GPUs", binding="max_ttft_ms", best=floor, limit=ttft_lim)
    if not candidates:
        need = "at least one prefill and one decode worker" if modes == ("disagg",) else (
            "a layout size that divides the budget" if exact else "a deployment in the budget")
        raise InfeasibleError(
            f"no {'/'.join(modes)} deployment of {model.name} fits {where}"
            f"{' exactly' if exact else ''}: serving needs {need}; add GPUs"
            + (" or drop exact_gpus" if exact else ""), binding="gpus")
    if tpot_lim is not None:
        low = min(c.tpot_ms for c in candidates)
        if low > tpot_lim:
            cond = f" with TTFT <= {ttft_lim:g} ms" if ttft_lim is not None else ""
            raise InfeasibleError(
                f"the lowest TPOT any layout reaches on {where}{cond} is {low:.1f} ms > "
                f"--max-tpot-ms {tpot_lim:g} (by {low - tpot_lim:.1f} ms); raise the limit "
                "or add GPUs", binding="max_tpot_ms", best=low, limit=tpot_lim)
    raise InfeasibleError(  # pragma: no cover - candidates meet TTFT, TPOT handled above
        f"no configuration on {where} meets both limits", binding="max_tpot_ms")


def _raise_no_fit(model: Model, fam: HardwareFamily, hw: Hardware,
                  efficiency: Efficiency | None, *, gpus: int, isl: int, osl: int,
                  batch_min: int, dtype: str = "") -> NoReturn:
    """Nothing in the budget fits both a prefill and a decode: raise the InfeasibleError
    naming the smallest GPU count that fits (or that the batches searched are too large)."""
    where = f"{gpus} {fam.name} GPU{'s' if gpus > 1 else ''}"
    small = _smallest_fitting(model, isl, osl, hw, fam, efficiency, dtype)
    if small is None:
        raise InfeasibleError(
            f"{model.name} with {isl}+{osl} tokens per request fits no layout of "
            f"{fam.name} up to {fam.topology.n_devices} devices; pick a family with more "
            "HBM per device or shorten the request", binding="gpus")
    n, lab = small
    if n <= gpus:  # it fits, just not at the batches searched
        raise InfeasibleError(
            f"{model.name} fits on {where} at batch 1 ({lab}) but not at the batches "
            f"searched (smallest {batch_min}); pass smaller batches", binding="batch",
            min_gpus=n)
    raise InfeasibleError(
        f"{model.name} with {isl}+{osl} tokens per request does not fit on {where}: the "
        f"smallest GPU count that fits is {n} ({lab} at batch 1); pass gpus >= {n}",
        binding="gpus", min_gpus=n)


def _ttft_floor(ds: xr.Dataset) -> float:
    """Lowest single-request TTFT (ms) of any fitting layout in the budget."""
    t = ds.ttft_ms.sel(prefill_batch=1).where(ds.prefill_fits.sel(prefill_batch=1)
                                               & ds.within_budget)
    return float(t.min()) if bool(t.notnull().any()) else math.inf


# --- plot -------------------------------------------------------------------------------------

_MODE_STYLE = {"agg": ("C0", "o", "aggregated"), "disagg": ("C1", "s", "disaggregated")}


def plot_frontier(result: ServingPlan, path: str | os.PathLike[str] | None = None) -> Any:
    """Tokens/s per GPU vs tokens/s per user: every candidate, each mode's Pareto frontier,
    the best configuration of each mode and the TPOT limit; the legend sits below the
    axes. Saved atomically to ``path``
    (format from the suffix) with the Agg backend; returns the matplotlib Figure."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8.5, 5.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for mode, (color, marker, name) in _MODE_STYLE.items():
        pts = [c for c in result.candidates if c.mode == mode]
        if not pts:
            continue
        ax.scatter([c.tokens_per_s_per_user for c in pts], [c.tokens_per_s_per_gpu for c in pts],
                   s=9, color=color, alpha=0.25, marker=marker, linewidths=0)
        front = [c for c in result.frontier if c.mode == mode]
        ax.plot([c.tokens_per_s_per_user for c in front], [c.tokens_per_s_per_gpu for c in front],
                color=color, marker=marker, ms=4, lw=1.8,
                label=f"{name} frontier ({len(front)} of {len(pts)})")
        b = result.best_of(mode)
        if b is not None:
            ax.scatter([b.tokens_per_s_per_user], [b.tokens_per_s_per_gpu], s=220, marker="*",
                       color=color, edgecolors="k", zorder=5,
                       label=f"best {mode}: {b.layout}, batch {b.batch} — "
                             f"{b.tokens_per_s_per_gpu:.1f} tok/s/GPU")
    if result.max_tpot_ms is not None:
        ax.axvline(1e3 / result.max_tpot_ms, color="0.3", ls="--", lw=1,
                   label=f"TPOT limit {result.max_tpot_ms:g} ms (meets it to the right)")
    ax.set_xlabel("tokens/s per user (1000 / TPOT in ms)")
    ax.set_ylabel("output tokens/s per GPU")
    ttft = f"TTFT ≤ {result.max_ttft_ms:g} ms" if result.max_ttft_ms is not None else "no TTFT limit"
    ax.set_title(f"{result.model} on {result.gpus}× {result.family}: ISL {result.isl}, "
                 f"OSL {result.osl}, {ttft}", fontsize=10)
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncols=2,
              frameon=False)  # below the axes: never over a candidate
    if path is not None:
        path = Path(path)
        fmt = path.suffix.lstrip(".").lower() or "png"
        _atomic_write(path, lambda fh: fig.savefig(fh, format=fmt, dpi=120), binary=True)
    return fig


# --- output -----------------------------------------------------------------------------------

def _atomic_write(path: Path, write: Any, *, binary: bool = False) -> None:
    """Write through ``write(fh)`` to a temporary file beside ``path``, then rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual file mode
        fh: Any = os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8",
                                                                newline="")
        with fh:
            write(fh)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _json_value(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def format_rows(rows: Sequence[Mapping[str, Any]], fmt: str) -> str:
    """Rows as ``table``, ``json`` (a list of objects) or ``csv`` (header + one line each)."""
    if fmt == "json":
        return json.dumps([{k: _json_value(v) for k, v in r.items()} for r in rows], indent=2,
                          allow_nan=False) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(ROW_KEYS), lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if _json_value(r.get(k)) is None else r.get(k))
                        for k in ROW_KEYS})
        return buf.getvalue()
    if fmt == "table":
        from .report import table

        cols = [("mode", "mode"), ("layout", "deployment"), ("batch", "batch"),
                ("prefill_batch", "p_batch"), ("ttft_ms", "TTFT ms"), ("tpot_ms", "TPOT ms"),
                ("request_latency_ms", "latency ms"), ("tokens_per_s_per_gpu", "tok/s/GPU"),
                ("tokens_per_s_per_user", "tok/s/user"), ("n_devices", "GPUs"),
                ("max_batch", "max batch"), ("meets_limits", "meets")]
        return table([dict(r) for r in rows], cols) + "\n"
    raise ServingError(f"format must be table, json or csv, got {fmt!r}")


# --- command line (registered by the CLI owner as ``simcore serving``) ----------------------

def _cli_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return v


def _cli_ms(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected milliseconds (a number > 0), got {text!r}") from None
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"expected milliseconds (a number > 0), got {text!r}")
    return v


def _cli_int_list(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        if part.strip():
            out.append(_cli_int(part.strip()))
    if not out:
        raise argparse.ArgumentTypeError(f"expected positive integers like 1,8,64, got {text!r}")
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``simcore serving`` (see :func:`run`)."""
    parser.add_argument("--model", default="Llama 3.1 70B",
                        help=f"preset name ({', '.join(PRESETS)}) or a HuggingFace config.json "
                             "path (default: Llama 3.1 70B)")
    parser.add_argument("--family", default="H200",
                        help=f"hardware family: {', '.join(HARDWARE_FAMILIES)} (default: H200)")
    parser.add_argument("--gpus", type=_cli_int, required=True,
                        help="device budget: deployments using more GPUs are not considered")
    parser.add_argument("--exact-gpus", "--gpus-exact", dest="exact_gpus", action="store_true",
                        help="use exactly --gpus devices instead of at most")
    parser.add_argument("--dtype", choices=list(DTYPES), default=None,
                        help="precision of weights, activations and KV cache: fp8 / int8 run "
                             "the matmuls at the family's FP8 / INT8 rate (default: the "
                             "model's own, 16-bit for the presets)")
    parser.add_argument("--isl", type=_cli_int, default=4000,
                        help="input tokens per request (default 4000)")
    parser.add_argument("--osl", type=_cli_int, default=1000,
                        help="output tokens per request (default 1000)")
    parser.add_argument("--max-ttft-ms", type=_cli_ms, default=None,
                        help="limit on time to first token in ms (default: none)")
    parser.add_argument("--max-tpot-ms", type=_cli_ms, default=None,
                        help="limit on time per output token in ms (default: none)")
    parser.add_argument("--batch", type=_cli_int_list, nargs="+", default=None, metavar="B",
                        help="decode batches to search, e.g. --batch 1 8 64 or --batch 1,8,64 "
                             f"(default {','.join(map(str, DEFAULT_BATCHES))})")
    parser.add_argument("--prefill-batch", type=_cli_int_list, nargs="+", default=None,
                        metavar="B",
                        help="prefill batches of disaggregated prefill workers (default "
                             f"{','.join(map(str, DEFAULT_PREFILL_BATCHES))})")
    parser.add_argument("--mode", choices=["both", "agg", "disagg"], default="both",
                        help="aggregated, disaggregated or both (default both)")
    parser.add_argument("--top", type=_cli_int, default=5,
                        help="best configurations per mode (default 5)")
    parser.add_argument("--rows", choices=["best", "frontier"], default="best",
                        help="print the best configurations (default) or the Pareto frontier")
    parser.add_argument("--format", choices=["table", "json", "csv"], default="table",
                        help="how rows are printed (default table)")
    parser.add_argument("--out", type=Path, default=None, metavar="FILE",
                        help="also write the rows to FILE in --format; a .nc or .zarr FILE "
                             "gets the per-layout sweep Dataset instead")
    parser.add_argument("--plot", type=Path, default=None, metavar="FILE",
                        help="save the tokens/s per GPU vs tokens/s per user plot (.png, .svg, .pdf)")


def run(args: argparse.Namespace) -> int:
    """Run ``simcore serving``: 0 on success, 1 when nothing meets the budget or limits,
    2 on bad input (one line on stderr, no traceback)."""
    try:
        return _run(args)
    except InfeasibleError as exc:
        print(f"simcore serving: {exc}", file=sys.stderr)
        return 1
    except (ValueError, OSError) as exc:
        print(f"simcore serving: error: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    if args.plot is not None and args.plot.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise ServingError(f"--plot must end in .png, .svg or .pdf, got {str(args.plot)!r}")

    def flat(lists: list[list[int]] | None) -> list[int] | None:
        return None if lists is None else [b for part in lists for b in part]

    modes = ("agg", "disagg") if args.mode == "both" else (args.mode,)
    result = plan(args.model, family=args.family, gpus=args.gpus, isl=args.isl, osl=args.osl,
                  max_ttft_ms=args.max_ttft_ms, max_tpot_ms=args.max_tpot_ms,
                  batch=flat(args.batch) or DEFAULT_BATCHES,
                  prefill_batch=flat(args.prefill_batch) or DEFAULT_PREFILL_BATCHES,
                  exact_gpus=args.exact_gpus, modes=modes, top=args.top, dtype=args.dtype)
    rows = result.rows(args.rows)
    text = format_rows(rows, args.format)
    if args.format == "table":
        lim = ", ".join(f"{n} <= {v:g} ms" for n, v in (("TTFT", result.max_ttft_ms),
                                                         ("TPOT", result.max_tpot_ms))
                        if v is not None) or "no latency limits"
        n_lay = int(result.dataset.within_budget.sum())
        prec = f" in {result.dtype}" if result.dtype else ""
        print(f"{result.model}{prec} on {result.gpus} x {result.family}, ISL {result.isl} / OSL "
              f"{result.osl}, {lim}: {n_lay} layouts x {result.dataset.sizes['batch']} batches "
              f"searched in {result.elapsed_s:.1f} s; {len(result.candidates)} configurations")
        for note in result.notes:
            print(f"note: {note}")
        for mode in modes:
            b = result.best_of(mode)
            if b is not None:
                tpot = f", TPOT {b.tpot_ms:.1f} ms" if math.isfinite(b.tpot_ms) else ""
                print(f"best {mode}: {b.layout} at batch {b.batch}: "
                      f"{b.tokens_per_s_per_gpu:.1f} tokens/s/GPU, "
                      f"{b.tokens_per_s_per_user:.1f} tokens/s/user, TTFT {b.ttft_ms:.0f} ms"
                      f"{tpot}")
        print()
    else:
        for note in result.notes:  # stdout holds JSON / CSV only
            print(f"note: {note}", file=sys.stderr)
    sys.stdout.write(text)
    if args.out is not None:
        if args.out.suffix.lower() in (".nc", ".nc4", ".zarr"):
            from ..io import save_dataset

            save_dataset(result.dataset, args.out)
        else:
            _atomic_write(args.out, lambda fh: fh.write(text))
        print(f"wrote {args.out}", file=sys.stderr)
    if args.plot is not None:
        plot_frontier(result, args.plot)
        print(f"saved plot to {args.plot}", file=sys.stderr)
    return 0
