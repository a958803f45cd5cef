"""The serving model: what one deployment costs.

The planner's physics, declared once and used by :func:`~simcore.studies.serving.plan`
and by anyone checking a configuration by hand:

* :func:`sweep` prices the prefill and the decode step of every layout in the budget with
  :func:`simcore.evaluate` (``batch`` and ``s_kv`` as sweep dimensions, ``gpus`` masked
  in the engine); :func:`serving_space` is its layout space (``dp = 1``: replicas and
  workers play DP's role);
* :func:`agg_metrics` is aggregated serving (continuous batching on one replica: the
  prefills of new requests interleave with the decode steps), :func:`disagg_metrics`
  disaggregated serving (prefill workers hand requests to decode workers; the system
  serves the slower side's rate, ``rate_matched`` when prefill keeps up);
* :func:`serving_costs` applies both to the sweeps: the per-layout serving Dataset.

The model: TTFT = prefill of the ``isl`` input tokens (at the prefill batch), no
queueing; TPOT = one decode step at batch ``b`` with the KV cache at the mean context
during generation, ``isl + osl // 2`` (:func:`contexts`); aggregated TPOT also carries the
prefills that interleave with the decode steps (``b`` prefills per ``osl - 1`` steps);
request latency = TTFT + (osl - 1) · TPOT; tokens/s per user = 1000 / TPOT_ms; tokens/s
counts output tokens. With ``osl`` 1 no decode step runs: no TPOT (NaN), the request
latency is the TTFT and tokens/s per user is 1000 / TTFT_ms. Memory: the decode layout
must hold the KV cache at the *end* of generation (``isl + osl`` tokens per request) for
the whole batch; an aggregated replica must also fit a batch-1 prefill.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import xarray as xr

from ...engine.evaluate import evaluate
from ...engine.space import Space, budget_sizes, full_space
from ...errors import SimcoreInputError
from ...model.specs import HW_KNOBS, Efficiency, Hardware, HardwareFamily, Model, Workload

__all__ = [
    "DTYPES",
    "InfeasibleError",
    "LayoutCosts",
    "ServingError",
    "agg_metrics",
    "budget_mask",
    "contexts",
    "disagg_metrics",
    "expert_space",
    "moe_choices",
    "serving_costs",
    "serving_space",
    "sweep",
]

#: Precisions the planner serves in (``dtype=``): weights, activations and KV cache alike
#: (fp4: NVFP4, on families with an FP4 rate).
DTYPES: tuple[str, ...] = ("fp16", "bf16", "fp8", "int8", "fp4")

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


class PlanRows:
    """``rows()`` and ``best_of()`` of a plan (steady-state or at a rate): the plan's row
    sets are :attr:`ROW_SETS` (attributes holding configurations with ``as_row()``),
    ``best`` first."""

    ROW_SETS: tuple[str, ...] = ("best", "candidates")
    best: tuple[Any, ...]  # declared by each plan (a dataclass field there)

    def rows(self, which: str = "best") -> list[dict[str, Any]]:
        """One of :attr:`ROW_SETS` (default ``best``) as dicts (keys carry units)."""
        if which not in self.ROW_SETS:
            names = [f"'{n}'" for n in self.ROW_SETS]
            raise ServingError(f"rows() takes {', '.join(names[:-1])} or {names[-1]}, "
                               f"got {which!r}")
        return [c.as_row() for c in getattr(self, which)]

    def best_of(self, mode: str) -> Any:
        """The best configuration of one mode (``"agg"`` or ``"disagg"``), if any."""
        return next((c for c in self.best if c.mode == mode), None)


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


# --- input checks -------------------------------------------------------------------------

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
    if not fam.topology.matmul_ratio(dtype) > 0:
        others = ", ".join(d for d in DTYPES if d != dtype and fam.topology.matmul_ratio(d) > 0)
        example = "B200 or GB200-NVL72" if dtype == "fp4" else "H100-SXM or H200"
        raise ServingError(f"dtype {dtype!r} needs a family with {dtype.upper()} matmuls "
                           f"(Topology.{dtype}_ratio > 0, e.g. {example}); {fam.name} "
                           f"has none: pass one of {others}")
    return str(dtype)


def _workload(mode: str, dtype: str = "", runtime: str = "", moe_imbalance: float = 1.0,
              **fields: int) -> Workload:
    """A serving workload; ``dtype`` sets the weight, activation and KV-cache dtypes.
    ``runtime`` (:data:`simcore.model.runtime.RUNTIMES`) decides CUDA graphs and the
    host time per step; without one, decode steps replay CUDA graphs, as vLLM, SGLang and
    TensorRT-LLM serve by default. ``moe_imbalance`` is ``Workload.moe_load_imbalance``
    (a mixture-of-experts model's busiest EP rank over the mean; 1: balanced)."""
    prec = {f: dtype for f in ("weight_dtype", "act_dtype", "kv_dtype")} if dtype else {}
    graphs = {"cuda_graphs": True} if mode == "decode" and not runtime else {}
    return Workload(mode, **fields, **prec, **graphs, runtime=runtime,  # type: ignore[arg-type]
                    moe_load_imbalance=moe_imbalance)


def _moe_imbalance(value: Any, model: Model) -> float:
    """``moe_imbalance`` checked (before any work): a number >= 1 or a
    :data:`~simcore.model.workload.MOE_ROUTING` name, and 1 for a dense model; one line
    otherwise.

    Examples
    --------
    >>> from simcore.model.presets import load_model
    >>> _moe_imbalance("no-eplb", load_model("Mixtral 8x7B")), _moe_imbalance(1, load_model("Llama 3.1 8B"))
    (2.564, 1.0)
    """
    from ...model.workload import MOE_IMBALANCE_HINT, check_moe_imbalance, moe_imbalance_value

    try:
        lam = moe_imbalance_value(value)
    except ValueError:
        raise ServingError(f"moe_imbalance (--moe-imbalance) {value!r}: "
                           f"{MOE_IMBALANCE_HINT}") from None
    try:
        check_moe_imbalance(lam, model)
    except ValueError as exc:
        raise ServingError(f"moe_imbalance {lam:g} (--moe-imbalance): {exc}") from None
    return lam


def _runtime(runtime: Any, dtype: str) -> str:
    """``runtime`` checked (before any work): a known serving stack (``None``: ``""``,
    simcore's default stack) that runs ``dtype``'s matmuls; one line otherwise."""
    from ...model.runtime import get_runtime, runtime_names

    if runtime is None:
        return ""
    try:
        rt = get_runtime(runtime)
    except ValueError as exc:
        raise ServingError(f"runtime (--runtime): {exc}") from None
    if not rt.serves:
        raise ServingError(f"runtime {rt.name!r} (--runtime) is {rt.stack}, a training stack "
                           f"(it runs {rt.modes()} only); pass a serving runtime: "
                           f"{', '.join(runtime_names(mode='decode'))}")
    try:
        _workload("decode", dtype, rt.name)
    except ValueError as exc:  # a precision the stack does not run
        raise ServingError(f"runtime {rt.name!r} (--runtime) with dtype {dtype!r} (--dtype): "
                           f"{exc}") from None
    return rt.name


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


def expert_space(gpus: int, attn_dp: Sequence[int], ep: Sequence[int]) -> Space:
    """The planner's expert-parallel layouts of a mixture-of-experts model: attention data
    parallelism ``dp`` (``attn_dp``: the instance's requests split over ``dp`` attention
    replicas, each holding the attention weights) x TP x PP with the routed experts split
    over ``ep`` of a stage's TP x DP devices (each expert sharded over tp·dp/ep of them;
    ``ep`` = tp·dp keeps every expert whole on one device: "DEP" / wide EP). No CP (the
    sequence split of long prefills stays with :func:`serving_space`'s layouts); the
    placement choices that mean nothing without CP at their first value. Layouts where
    ``ep`` does not divide tp·dp are masked by the engine."""
    base = full_space()
    d = base.dict
    keep = {dim: tuple(v for v in d[dim] if v <= gpus) or (1,) for dim in ("tp", "pp")}
    return base.with_(cp=(1,), dp=tuple(attn_dp), ep=tuple(ep), ffn_shard_scope=("TP",),
                      tp_placement=("inner",), cp_placement=("inner",),
                      cp_ring_variant=(d["cp_ring_variant"][0],), **keep)


def _choice_list(name: str, flag: str, value: Any) -> tuple[int, ...] | None:
    """``value`` as sorted distinct positive integers, or None for ``"all"`` / None."""
    if value is None or (isinstance(value, str) and value.strip().lower() == "all"):
        return None
    if isinstance(value, str):
        raise ServingError(f"{name} ({flag}) takes positive integers or 'all', got {value!r}")
    return _int_list(name, value, f"{flag}, or 'all'")


def moe_choices(experts: int, gpus: int, attn_dp: Any = "all",
                ep: Any = "all") -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The attention-DP and EP degrees the planner searches for a model with ``experts``
    routed experts on ``gpus`` devices: ``(attn_dps, eps)``, each sorted.

    ``"all"`` (or None) takes every attention-DP degree a budget-widened space offers
    (:func:`~simcore.engine.space.budget_sizes`: powers of two up to ``gpus`` and each
    ``gpus / 2^k``) and every ``ep`` dividing the experts and some TP x attention-DP
    within the budget; a dense model (``experts`` 1) searches ``(1,), (1,)``. Degree 1 of
    both is the planner's layout space without expert parallelism
    (:func:`serving_space`); the others are :func:`expert_space`. Bad values are a
    :class:`ServingError` naming what would work: ``attn_dp`` beyond the budget,
    ``attn_dp`` or ``ep`` above 1 on a dense model, an ``ep`` dividing no layout's
    devices or not the experts, attention DP above 1 with ``ep`` 1 only (that is
    replicas, which the planner searches anyway).

    Examples
    --------
    >>> moe_choices(256, 16)
    ((1, 2, 4, 8, 16), (1, 2, 4, 8, 16))
    >>> moe_choices(1, 16)
    ((1,), (1,))
    >>> moe_choices(256, 16, attn_dp=8, ep=[8, 16])
    ((8,), (8, 16))
    >>> moe_choices(256, 16, ep=1)  # no expert parallelism: no attention DP either
    ((1,), (1,))
    """
    dps = _choice_list("attn_dp", "--attn-dp", attn_dp)
    eps = _choice_list("ep", "--ep", ep)
    if int(experts) <= 1:
        for name, flag, vals in (("ep", "--ep", eps), ("attn_dp", "--attn-dp", dps)):
            if vals is not None and max(vals) > 1:
                raise ServingError(
                    f"{name} {','.join(map(str, vals))} ({flag}): the model is dense (no "
                    f"experts); {name} applies to mixture-of-experts models (a dense model's "
                    "data parallelism is its replicas, which the planner searches anyway)")
        return (1,), (1,)
    if dps is not None and dps[-1] > gpus:
        raise ServingError(f"attn_dp {','.join(map(str, dps))} (--attn-dp): beyond the budget "
                           f"of {gpus} GPUs; pass values <= {gpus} or 'all'")
    if dps is None and eps == (1,):  # no expert parallelism: attention DP is replicas
        return (1,), (1,)
    dps = dps or budget_sizes((1,), gpus)
    tps = [t for t in full_space().dict["tp"] if t <= gpus]
    devices = {t * d for t in tps for d in dps if t * d <= gpus}
    ok = tuple(v for v in range(1, min(int(experts), gpus) + 1)
               if int(experts) % v == 0 and any(n % v == 0 for n in devices))
    if eps is None:
        eps = ok
    else:
        bad = [v for v in eps if v not in ok]
        if bad:
            raise ServingError(
                f"ep {','.join(map(str, bad))} (--ep): ep must divide the {int(experts)} "
                f"experts and the TP x attention-DP devices of a layout within {gpus} GPUs; "
                f"pass some of {', '.join(map(str, ok))} or 'all'")
    if eps == (1,) and dps[-1] > 1:
        raise ServingError(
            f"attn_dp {','.join(map(str, dps))} (--attn-dp) with ep 1 only: attention data "
            "parallelism without expert parallelism is replicas, which the planner searches "
            "anyway; pass ep > 1 (--ep) or attn_dp 1")
    return tuple(dps), tuple(eps)


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
    runtime: str = "",
    moe_imbalance: float = 1.0,
) -> xr.Dataset:
    """:func:`simcore.evaluate` with ``s_kv`` and ``batch`` as dimensions and a device budget.

    ``simcore.evaluate(..., batch=, s_kv=, gpus=, exact_gpus=)`` (prefill: ``s_q =
    s_kv``), the values sorted, plus a ``within_budget`` variable marking layouts using
    at most ``gpus`` devices (exactly ``gpus`` with ``exact_gpus``); the engine masks the
    others (``fits`` and ``valid`` False, NaN outputs; never dropped). ``dtype`` (one of
    :data:`DTYPES` or ``""``) sets the weight, activation and KV-cache dtypes, ``runtime``
    the serving stack (:data:`simcore.model.runtime.RUNTIMES`; ``""``: CUDA graphs in
    decode, no host time per step), ``moe_imbalance`` a mixture-of-experts model's
    routing skew (``Workload.moe_load_imbalance``; 1: balanced). A budget
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
    ds = evaluate(model, _workload(mode, dtype, runtime, moe_imbalance), batch=list(batches),
                  s_kv=list(contexts),
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
                    dtype=dtype, runtime=runtime, moe_imbalance=float(moe_imbalance))
    return ds


# --- the serving model ----------------------------------------------------------------------

def agg_metrics(*, prefill_ns: Any, step_ns: Any, batch: Any, osl: int,
                prefill_batch: Any = 1) -> dict[str, Any]:
    """Aggregated (continuous batching) serving on one replica.

    The replica keeps ``batch`` requests in flight. Every ``osl - 1`` decode steps
    (``step_ns`` each) all ``batch`` requests finish and ``batch`` new prefills
    interleave with the steps, ``prefill_batch`` at a time (``prefill_ns`` each: one per
    attention-DP rank of an expert-parallel instance, else 1), so one cycle is
    ``(osl - 1) · step_ns + ceil(batch / prefill_batch) · prefill_ns`` and yields
    ``batch · osl`` tokens.
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
    rounds = -(-batch // prefill_batch)  # ceil; batch itself with one prefill at a time
    cycle_ns = steps * step_ns + rounds * prefill_ns
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
        "tpot_ns": step_ns + rounds * prefill_ns / steps,
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


def contexts(isl: int, osl: int) -> tuple[int, int]:
    """KV-cache lengths of a request: the mean during generation (``isl + osl // 2``,
    where TPOT is priced) and the end (``isl + osl``, what the decode memory must hold).

    Examples
    --------
    >>> contexts(4000, 1000)
    (4500, 5000)
    """
    return isl + osl // 2, isl + osl


def agg_prefill_batch(prefill: xr.Dataset) -> Any:
    """The prefill batch an aggregated instance prefills at: 1, or one request per
    attention-DP rank (the ``dp`` coordinate) where the sweep has ``dp`` > 1."""
    if int(prefill.dp.max()) <= 1:
        return 1
    missing = sorted(set(prefill.dp.values.tolist()) - set(prefill.prefill_batch.values.tolist()))
    if missing:
        raise ServingError(f"the prefill sweep needs the batches {missing} (one request per "
                           "attention-DP rank)")
    return prefill.dp


@dataclass(frozen=True, eq=False)
class LayoutCosts:
    """What each layout of the sweep costs when serving (see :func:`serving_costs`).

    ``dataset``: the per-layout serving Dataset (TTFT over prefill batches; decode step,
    aggregated metrics, memory and ``max_batch`` over decode batches; units in attrs).
    ``prefill_ns`` (layout x prefill batch) and ``step_ns`` (layout x decode batch, at
    the mean context): the engine's latencies in ns. ``agg``: :func:`agg_metrics` over
    layouts and decode batches.
    """

    dataset: xr.Dataset
    prefill_ns: xr.DataArray
    step_ns: xr.DataArray
    agg: dict[str, Any]


def serving_costs(prefill: xr.Dataset, decode: xr.Dataset, *, isl: int, osl: int) -> LayoutCosts:
    """The serving model over every layout: :func:`agg_metrics` and the memory rules.

    ``prefill`` is :func:`sweep` in prefill mode at ``s_kv = isl`` (one hardware point),
    ``decode`` in decode mode at both :func:`contexts` of ``(isl, osl)``. A layout fits
    decode at batch ``b`` if it holds the batch at both contexts; ``max_batch`` is the
    largest such batch of the sweep; an aggregated replica must also fit a batch-1
    prefill (one request per attention-DP rank with ``dp`` > 1: the prefill batch ``dp``,
    which the prefill sweep must hold). The Dataset carries no attrs (the planner adds
    the request's).
    """
    mean_ctx, end_ctx = contexts(isl, osl)
    pre = prefill.squeeze("s_kv", drop=True).squeeze(list(HW_KNOBS))
    dec_mean = decode.sel(s_kv=mean_ctx, drop=True).squeeze(list(HW_KNOBS))
    dec_end = decode.sel(s_kv=end_ctx, drop=True).squeeze(list(HW_KNOBS))
    pre = pre.rename(batch="prefill_batch")
    n_dev = dec_mean.n_devices
    decode_fits = dec_end.fits & dec_mean.fits
    own = agg_prefill_batch(pre)
    agg = agg_metrics(prefill_ns=pre.latency_ns.sel(prefill_batch=own, drop=True),
                      step_ns=dec_mean.latency_ns, batch=dec_mean.batch, osl=osl,
                      prefill_batch=own)
    agg_fits = decode_fits & pre.fits.sel(prefill_batch=own, drop=True)
    batches = dec_mean.batch.values.tolist()
    bvals = xr.DataArray(batches, dims="batch", coords={"batch": batches})
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
    return LayoutCosts(dataset=out, prefill_ns=pre.latency_ns, step_ns=dec_mean.latency_ns,
                       agg=agg)
