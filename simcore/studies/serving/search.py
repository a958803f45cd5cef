"""The serving search: enumerate deployments, keep those within the limits, rank them.

:func:`plan` runs in named steps: :func:`_request` checks the input; :func:`_price_layouts`
prices every layout in the budget with the serving model (:mod:`.model`);
:func:`_agg_candidates` replicates each layout over the budget; :func:`_disagg_candidates`
pairs prefill workers (:func:`_prefill_options`) with decode workers
(:func:`_decode_options`), rate-matched; :func:`_choose` ranks them (:func:`_rank`:
tokens/s per GPU first) and builds each mode's Pareto frontier of the
:data:`FRONTIER_OBJECTIVES`, or raises the :class:`~.model.InfeasibleError` that says
what binds.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, NoReturn

import numpy as np
import xarray as xr

from ...engine.evaluate import evaluate
from ...engine.metrics import METRICS, Metric, register_metric
from ...engine.pareto import pareto
from ...engine.space import PARALLEL_DIMS, full_space
from ...errors import DeviceBudgetError
from ...model.presets import get_family, load_model
from ...model.specs import HW_KNOBS, Efficiency, Hardware, HardwareFamily, Model
from .model import (
    InfeasibleError,
    LayoutCosts,
    PlanRows,
    ServingError,
    _dtype,
    _int_list,
    _limit,
    _moe_imbalance,
    _one_hardware,
    _positive_int,
    _runtime,
    _workload,
    contexts,
    disagg_metrics,
    expert_space,
    moe_choices,
    serving_costs,
    serving_space,
    sweep,
)

__all__ = [
    "DEFAULT_BATCHES",
    "DEFAULT_PREFILL_BATCHES",
    "FRONTIER_OBJECTIVES",
    "ROW_KEYS",
    "SERVING_METRICS",
    "ServingConfig",
    "ServingPlan",
    "layout_label",
    "plan",
]

#: Decode batches (concurrent requests per replica / decode worker) searched by default.
DEFAULT_BATCHES: tuple[int, ...] = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
#: Per attention-DP rank, the largest default decode batch: with the default batches an
#: expert-parallel instance of attention DP ``d`` also searches instance batches up to
#: ``d`` times this (:func:`wide_batches`), so wide instances are not capped at what one
#: GPU of a TP instance holds.
BATCH_PER_RANK = DEFAULT_BATCHES[-1]


def wide_batches(max_dp: int) -> tuple[int, ...]:
    """Decode batches beyond :data:`DEFAULT_BATCHES` for expert-parallel instances of
    attention DP up to ``max_dp``: 1.5 and 2 times each power-of-two multiple of
    :data:`BATCH_PER_RANK`, and ``max_dp`` times it.

    Examples
    --------
    >>> wide_batches(1), wide_batches(4)
    ((), (768, 1024, 1536, 2048))
    >>> wide_batches(72)[-3:]
    (24576, 32768, 36864)
    """
    top = BATCH_PER_RANK * max_dp
    out = {top} if max_dp > 1 else set()
    m = BATCH_PER_RANK
    while m < top:
        out.update(v for v in (m * 3 // 2, 2 * m) if v <= top)
        m *= 2
    return tuple(sorted(out))


#: Prefill batches (requests prefilled together by a disaggregated prefill worker).
DEFAULT_PREFILL_BATCHES: tuple[int, ...] = (1, 2, 4, 8)

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


# --- results ------------------------------------------------------------------------------

def layout_label(layout: Mapping[str, Any]) -> str:
    """Short name of a layout: ``TP4``, ``TP2·PP2``, ``TP8 kv=seq``, ``TP2·CP2 ring=kv``;
    a mixture-of-experts layout adds its attention data parallelism ``ADP<dp>`` and expert
    parallelism ``EP<ep>``: ``TP8·EP8`` (attention TP8, experts whole over the same 8
    GPUs), ``TP1·ADP16·EP16`` (16 attention replicas, experts over all 16 GPUs: "DEP16").

    Choices that cannot matter are left out (ring, FFN scope and placements when CP = 1;
    ADP and EP at 1).

    Examples
    --------
    >>> layout_label({"tp": 4, "cp": 1, "pp": 1, "dp": 1, "kv_shard_mode": "head"})
    'TP4'
    >>> layout_label({"tp": 2, "cp": 1, "pp": 1, "dp": 8, "ep": 16, "kv_shard_mode": "head"})
    'TP2·ADP8·EP16'
    """
    parts = [f"TP{layout['tp']}"]
    for dim, short in (("cp", "CP"), ("pp", "PP"), ("dp", "ADP"), ("ep", "EP")):
        if int(layout.get(dim, 1)) > 1:
            parts.append(f"{short}{layout[dim]}")
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
    #: the decode layout's attention data parallelism (its requests split over ``attn_dp``
    #: attention replicas; 1 but for a mixture-of-experts model's expert-parallel layouts)
    #: and expert parallelism (experts over ``ep`` of its TP x attention-DP GPUs)
    attn_dp: int = 1
    ep: int = 1
    #: the same of the prefill layout (aggregated: the one layout)
    prefill_attn_dp: int = 1
    prefill_ep: int = 1

    def as_row(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def key(self) -> tuple[Any, ...]:
        return (self.mode, self.layout, self.batch, self.prefill_batch)


ROW_KEYS: tuple[str, ...] = tuple(f.name for f in fields(ServingConfig))


@dataclass(frozen=True, eq=False)
class ServingPlan(PlanRows):
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
    #: every per-layout sweep searched, ``dataset`` first: the layouts without expert
    #: parallelism (:func:`~.model.serving_space`) and, for a mixture-of-experts model,
    #: the expert-parallel ones (:func:`~.model.expert_space`; ``dp`` is attention DP);
    #: each Dataset's ``layouts`` attr says which
    sweeps: tuple[xr.Dataset, ...] = ()
    #: attention-DP and EP degrees searched (``(1,)`` for a dense model)
    attn_dps: tuple[int, ...] = (1,)
    eps: tuple[int, ...] = (1,)
    #: the serving stack (``plan(runtime=)``; ``""``: simcore's default)
    runtime: str = ""
    #: the busiest EP rank's routed tokens over the mean (``plan(moe_imbalance=)``; 1:
    #: balanced) and the model's routed experts (1: dense, no routing to state)
    moe_imbalance: float = 1.0
    n_experts: int = 1

    ROW_SETS = ("best", "frontier", "candidates")  # rows(which) / best_of: PlanRows


# --- the planner ----------------------------------------------------------------------------

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
    attn_dp: int | Sequence[int] | str = "all",
    ep: int | Sequence[int] | str = "all",
    speculative: Any = None,
    runtime: str | None = None,
    moe_imbalance: float | str = 1.0,
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
    attn_dp, ep : int, sequence of int or "all"
        Mixture-of-experts models: attention data-parallel degrees (one instance's
        requests split over ``attn_dp`` attention replicas) and expert-parallel degrees
        (experts over ``ep`` of the instance's TP x attention-DP GPUs) to search
        (:func:`~.model.moe_choices`; ``"all"``, the default, every one the budget
        allows). Degree 1 of both searches the layouts without expert parallelism; the
        others :func:`~.model.expert_space` (no CP). A dense model searches 1 only
        (anything above is refused).
    speculative : Speculative, optional
        Speculative decoding (:mod:`.speculative`): each decode step drafts and verifies,
        TPOT is its time over the expected tokens per step; the proposer's weights, KV
        and prefill are counted.
    runtime : str, optional
        The serving stack (:data:`simcore.model.runtime.RUNTIMES`: ``"vllm"``,
        ``"sglang"``, ``"trtllm"``, ...), whose profile decides CUDA graphs in decode and
        the host time per step. Default ``""``: simcore's default stack (decode steps
        replay CUDA graphs, no host time per step).
    moe_imbalance : float or str
        ``Workload.moe_load_imbalance`` (>= 1 or a :data:`~simcore.model.workload.MOE_ROUTING`
        name): the busiest EP rank's routed tokens over the mean. Default 1; dense: 1 only.

    Returns
    -------
    ServingPlan

    Raises
    ------
    ServingError
        Bad input (non-positive ``gpus``/``isl``/``osl``/limits, unknown mode, a
        ``dtype`` the family has no matmul rate for (or the ``runtime`` does not run), a
        training ``runtime``, ``gpus`` beyond the family's system,
        ``osl`` 1 with a TPOT limit or with ``modes=("disagg",)``, ``attn_dp`` / ``ep``
        the model cannot take, ``moe_imbalance`` below 1 or not 1 on a dense model),
        before any work.
    InfeasibleError
        Nothing fits the budget (the message gives the smallest GPU count that fits) or
        nothing meets a limit (the message says which binds and by how much).
    """
    t0 = time.perf_counter()
    req = _request(model, family=family, gpus=gpus, isl=isl, osl=osl, max_ttft_ms=max_ttft_ms,
                   max_tpot_ms=max_tpot_ms, hardware=hardware, efficiency=efficiency,
                   batch=batch, prefill_batch=prefill_batch, exact_gpus=exact_gpus,
                   modes=modes, top=top, dtype=dtype, attn_dp=attn_dp, ep=ep,
                   runtime=runtime, moe_imbalance=moe_imbalance)
    costs = _price_layouts(req, speculative)
    lay = _Layouts.of(costs, req.batches, req.prefill_batches)
    candidates: list[ServingConfig] = []
    if "agg" in req.modes:
        candidates += _agg_candidates(req, lay)
    if "disagg" in req.modes:
        candidates += _disagg_candidates(req, lay)
    candidates = _dedupe(candidates)
    best, frontier = _choose(req, candidates, lay)
    return ServingPlan(model=req.model.name, family=req.family.name, gpus=req.gpus,
                       isl=req.isl, osl=req.osl, max_ttft_ms=req.max_ttft_ms,
                       max_tpot_ms=req.max_tpot_ms, exact_gpus=req.exact_gpus,
                       best=tuple(best), frontier=tuple(frontier), candidates=tuple(candidates),
                       dataset=costs[0].dataset, elapsed_s=time.perf_counter() - t0,
                       dtype=req.dtype, runtime=req.runtime,
                       moe_imbalance=req.moe_imbalance, n_experts=int(req.model.n_experts),
                       notes=req.notes + ((speculative.describe(),) if speculative else ()),
                       sweeps=tuple(c.dataset for c in costs), attn_dps=req.attn_dps,
                       eps=req.eps)


# --- step 1: the request ------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class _Request:
    """:func:`plan`'s input, checked: what to search, on what, within which limits."""

    model: Model
    family: HardwareFamily
    hardware: Hardware
    efficiency: Efficiency | None
    gpus: int
    exact_gpus: bool
    isl: int
    osl: int
    max_ttft_ms: float | None
    max_tpot_ms: float | None
    batches: tuple[int, ...]  # every decode batch of any sweep (what candidates index)
    prefill_batches: tuple[int, ...]
    modes: tuple[str, ...]
    top: int
    dtype: str
    notes: tuple[str, ...]
    runtime: str = ""
    moe_imbalance: float = 1.0
    attn_dps: tuple[int, ...] = (1,)
    eps: tuple[int, ...] = (1,)
    #: the decode and prefill batches of the layouts without expert parallelism
    #: (``batches`` less :func:`wide_batches`, ``prefill_batches`` less the attention-DP
    #: degrees); empty: the same
    base_batches: tuple[int, ...] = ()
    base_prefill_batches: tuple[int, ...] = ()

    @property
    def spaces(self) -> list[tuple[str, Any, tuple[int, ...], tuple[int, ...]]]:
        """The layout spaces to sweep, named, with their decode and prefill batches: the
        layouts without expert parallelism when degree 1 of both ``attn_dp`` and ``ep``
        is searched, the expert-parallel ones when an ``ep`` above 1 is."""
        out: list[tuple[str, Any, tuple[int, ...], tuple[int, ...]]] = []
        if 1 in self.attn_dps and 1 in self.eps:
            out.append(("no expert parallelism (dp 1, ep 1)", serving_space(self.gpus),
                        self.base_batches or self.batches,
                        self.base_prefill_batches or self.prefill_batches))
        big = tuple(e for e in self.eps if e > 1)
        if big:
            out.append(("expert parallel: attention DP (dp) x TP x PP x EP, no CP",
                        expert_space(self.gpus, self.attn_dps, big), self.batches,
                        self.prefill_batches))
        return out

    @property
    def where(self) -> str:
        """``8 H200 GPUs``: the budget, for messages."""
        return f"{self.gpus} {self.family.name} GPU{'s' if self.gpus > 1 else ''}"

    def meets(self, ttft_ms: float, tpot_ms: float) -> bool:
        """Whether a configuration meets both limits (osl 1's NaN TPOT is never compared:
        a TPOT limit with osl 1 is refused)."""
        return ((self.max_ttft_ms is None or ttft_ms <= self.max_ttft_ms)
                and (self.max_tpot_ms is None or tpot_ms <= self.max_tpot_ms))


def _request(model: Model | str, *, family: str | HardwareFamily | None, gpus: Any, isl: Any,
             osl: Any, max_ttft_ms: Any, max_tpot_ms: Any,
             hardware: Hardware | Mapping[str, Any] | None, efficiency: Efficiency | None,
             batch: Any, prefill_batch: Any, exact_gpus: bool, modes: Sequence[str], top: Any,
             dtype: str | None, attn_dp: Any = "all", ep: Any = "all",
             runtime: str | None = None, moe_imbalance: Any = 1.0) -> _Request:
    """Step 1 of :func:`plan`: every argument checked (cheap checks first, the budget
    against the family before any work), the model and family loaded."""
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
    stack = _runtime(runtime, prec)
    lam = _moe_imbalance(moe_imbalance, mdl)
    dps, eps = moe_choices(int(mdl.n_experts), gpus, attn_dp, ep)
    base_batches, base_p_batches = batches, p_batches
    if any(e > 1 for e in eps):  # an aggregated ADP instance prefills one request per rank
        p_batches = tuple(sorted(set(p_batches) | set(dps)))
        if batches == DEFAULT_BATCHES:  # and may hold BATCH_PER_RANK requests per rank
            batches = tuple(sorted(set(batches) | set(wide_batches(max(dps)))))
    return _Request(model=mdl, family=fam, hardware=hw, efficiency=efficiency, gpus=gpus,
                    exact_gpus=bool(exact_gpus), isl=isl, osl=osl, max_ttft_ms=ttft_lim,
                    max_tpot_ms=tpot_lim, batches=batches, prefill_batches=p_batches,
                    modes=modes, top=top, dtype=prec, notes=notes, runtime=stack,
                    moe_imbalance=lam, attn_dps=dps, eps=eps,
                    base_batches=base_batches, base_prefill_batches=base_p_batches)


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


# --- step 2: pricing the layouts -----------------------------------------------------------

def _price_layouts(req: _Request, speculative: Any = None) -> list[LayoutCosts]:
    """Step 2: the prefill and decode sweeps over every layout in the budget, priced by
    the serving model (:func:`~.model.serving_costs`), with speculative decoding when
    asked (:mod:`.speculative`), one per space of :attr:`_Request.spaces`; the request in
    each Dataset's attrs."""
    mean_ctx, end_ctx = contexts(req.isl, req.osl)
    out = []
    spaces = req.spaces  # a property that builds the spaces: once
    for what, space, batches, p_batches in spaces:
        common: dict[str, Any] = dict(gpus=req.gpus, space=space, hardware=req.hardware,
                                      family=req.family, efficiency=req.efficiency,
                                      dtype=req.dtype, runtime=req.runtime,
                                      moe_imbalance=req.moe_imbalance)
        try:
            pre = sweep(req.model, "prefill", batch=p_batches, s_kv=req.isl, **common)
            dec = sweep(req.model, "decode", batch=batches, s_kv=[mean_ctx, end_ctx],
                        **common)
        except DeviceBudgetError:  # nothing of this space fits at any batch searched
            continue
        if speculative is not None:
            from .speculative import spec_decode, spec_prefill
            pre = spec_prefill(req.model, speculative, pre, common=common, dtype=req.dtype)
            dec = spec_decode(req.model, speculative, dec, common=common, dtype=req.dtype)
        costs = serving_costs(pre, dec, isl=req.isl, osl=req.osl)
        costs.dataset.attrs.update(
            model=req.model.name, family=req.family.name, gpus=req.gpus, isl=req.isl,
            osl=req.osl, dtype=req.dtype, runtime=req.runtime,
            moe_imbalance=req.moe_imbalance, mean_context=mean_ctx, end_context=end_ctx,
            max_ttft_ms=req.max_ttft_ms if req.max_ttft_ms is not None else "",
            max_tpot_ms=req.max_tpot_ms if req.max_tpot_ms is not None else "",
            exact_gpus=int(req.exact_gpus),
            **{k: v for k, v in dec.attrs.items() if k.startswith("efficiency_")})
        if len(spaces) > 1 or req.eps != (1,):
            costs.dataset.attrs["layouts"] = what
        out.append(costs)
    if not out:
        _raise_no_fit(req)
    return out


#: :class:`_Layouts` columns over decode batches (padded where a sweep lacks a batch)
_BATCH_COLUMNS = frozenset({"mem_gb", "step_ns", "decode_fits", "agg_fits", "agg_ttft_ms",
                            "agg_tpot_ms", "agg_tokens_per_s", "agg_requests_per_s",
                            "agg_latency_ms"})


def _pad(v: np.ndarray, rows: list[int], n: int) -> np.ndarray:
    """``v`` (batch x layout) placed at ``rows`` of ``n`` rows; the rest NaN / False."""
    if len(rows) == n:
        return v
    full = np.full((n, v.shape[1]), False if v.dtype == bool else np.nan, dtype=v.dtype)
    full[rows] = v
    return full


@dataclass(frozen=True, eq=False)
class _Layouts:
    """The priced layouts as flat arrays (one column per layout, in each Dataset's
    stacked order, the sweeps one after the other): what the candidate steps index."""

    labels: list[str]
    dp: np.ndarray  # layout: attention DP (1 without expert parallelism)
    ep: np.ndarray  # layout
    n_devices: np.ndarray  # layout
    within: np.ndarray  # layout: within the budget
    max_batch: np.ndarray  # layout
    mem_gb: np.ndarray  # batch x layout
    step_ns: np.ndarray  # batch x layout
    decode_fits: np.ndarray  # batch x layout
    prefill_ns: np.ndarray  # prefill batch x layout
    prefill_fits: np.ndarray  # prefill batch x layout
    agg: dict[str, np.ndarray]  # name -> batch x layout: aggregated serving
    agg_prefill_ns: np.ndarray  # layout: an aggregated instance's prefill (batch dp)
    agg_prefill_fits: np.ndarray  # layout

    @classmethod
    def of(cls, parts: Sequence[LayoutCosts], batches: Sequence[int],
           prefill_batches: Sequence[int]) -> _Layouts:
        """The sweeps' layouts side by side, each on the decode ``batches`` and the
        ``prefill_batches`` (a batch a sweep did not search: NaN, not fitting)."""
        cols: dict[str, list[Any]] = {}
        for costs in parts:
            ds = costs.dataset
            rows = [list(batches).index(b) for b in ds.batch.values.tolist()]
            p_rows = [list(prefill_batches).index(b) for b in ds.prefill_batch.values.tolist()]
            for k, v in cls._one(costs).items():
                if k in _BATCH_COLUMNS:
                    v = _pad(v, rows, len(batches))
                elif k in ("prefill_ns", "prefill_fits"):
                    v = _pad(v, p_rows, len(prefill_batches))
                cols.setdefault(k, []).append(v)
        labels: list[str] = sum(cols.pop("labels"), [])
        own = ("agg_prefill_ns", "agg_prefill_fits")
        cat: dict[str, Any] = {k: np.concatenate(v, axis=-1) for k, v in cols.items()
                               if not k.startswith("agg_") or k in own}
        agg = {k[4:]: np.concatenate(v, axis=-1) for k, v in cols.items()
               if k.startswith("agg_") and k not in own}
        return cls(labels=labels, agg=agg, **cat)

    @staticmethod
    def _one(costs: LayoutCosts) -> dict[str, Any]:
        ds, agg = costs.dataset, costs.agg
        table = _layout_table(ds)
        own = [int(lay["dp"]) for lay in table]  # an aggregated instance's prefill batch
        pbs = ds.prefill_batch.values.tolist()
        k = np.array([pbs.index(d) for d in own], dtype=np.int64)
        cols = np.arange(len(own))
        pre_ns = _flat(costs.prefill_ns, "prefill_batch")
        pre_fits = _flat(ds.prefill_fits, "prefill_batch")
        return {
            "labels": [layout_label(lay) for lay in table],
            "dp": np.array(own, dtype=np.int64),
            "ep": np.array([int(lay["ep"]) for lay in table], dtype=np.int64),
            "n_devices": _flat(ds.n_devices).astype(np.int64),
            "within": _flat(ds.within_budget).astype(bool),
            "max_batch": _flat(ds.max_batch).astype(np.int64),
            "mem_gb": _flat(ds.decode_mem_per_gpu_gb, "batch"),
            "step_ns": _flat(costs.step_ns, "batch"),
            "decode_fits": _flat(ds.decode_fits, "batch"),
            "prefill_ns": pre_ns,
            "prefill_fits": pre_fits,
            "agg_prefill_ns": pre_ns[k, cols],
            "agg_prefill_fits": pre_fits[k, cols],
            "agg_fits": _flat(ds.agg_fits, "batch"),
            "agg_ttft_ms": _flat(ds.agg_ttft_ms.broadcast_like(ds.agg_tpot_ms), "batch"),
            "agg_tpot_ms": _flat(ds.agg_tpot_ms, "batch"),
            "agg_tokens_per_s": _flat(agg["tokens_per_s"], "batch"),
            "agg_requests_per_s": _flat(agg["requests_per_s"], "batch"),
            "agg_latency_ms": _flat(agg["request_latency_ns"], "batch") / 1e6,
        }


def _layout_table(ds: xr.Dataset) -> list[dict[str, Any]]:
    idx = ds.n_devices.stack(_layout=PARALLEL_DIMS).indexes["_layout"]
    return [dict(zip(PARALLEL_DIMS, (v.item() if hasattr(v, "item") else v for v in t),
                     strict=True)) for t in idx]


def _flat(da: xr.DataArray, lead: str | None = None) -> np.ndarray:
    dims = ([lead] if lead else []) + list(PARALLEL_DIMS)
    arr = da.transpose(*dims).values
    return arr.reshape((arr.shape[0], -1) if lead else (-1,))


# --- aggregated: one layout replicated over the budget -----------------------------------------

def _agg_candidates(req: _Request, lay: _Layouts) -> list[ServingConfig]:
    """Step 3: ``gpus // size`` replicas of each layout at each decode batch that fits and
    meets the TTFT limit (with ``exact_gpus``, sizes dividing the budget; with ``osl`` 1,
    the smallest such batch only: the batch changes nothing but memory)."""
    nd, agg = lay.n_devices, lay.agg
    afit, a_ttft, a_tpot = agg["fits"], agg["ttft_ms"], agg["tpot_ms"]
    a_tps, a_rps, a_lat = agg["tokens_per_s"], agg["requests_per_s"], agg["latency_ms"]
    ok = afit.copy()  # the sweep's budget mask is in agg_fits already
    if req.exact_gpus:
        ok &= (req.gpus % np.maximum(nd, 1) == 0)[None, :]
    if req.max_ttft_ms is not None:
        ok &= a_ttft <= req.max_ttft_ms
    if req.osl == 1:  # no decode step: the batch changes nothing but memory; keep the first
        ok &= np.cumsum(ok, axis=0) == 1
    per_user_ms = a_tpot if req.osl > 1 else a_ttft  # the time a user waits per token
    out = []
    for i, j in zip(*np.nonzero(ok), strict=True):
        reps = req.gpus // int(nd[j])
        label = lay.labels[j]
        out.append(ServingConfig(
            mode="agg", layout=f"{reps}×{label}", prefill_layout=label, decode_layout=label,
            replicas=reps, prefill_workers=None, decode_workers=None,
            batch=int(req.batches[i]), prefill_batch=int(lay.dp[j]),
            ttft_ms=float(a_ttft[i, j]), tpot_ms=float(a_tpot[i, j]),
            request_latency_ms=float(a_lat[i, j]),
            tokens_per_s_per_gpu=float(a_tps[i, j] / nd[j]),
            tokens_per_s_per_user=float(1e3 / per_user_ms[i, j]),
            tokens_per_s=float(a_tps[i, j] * reps), requests_per_s=float(a_rps[i, j] * reps),
            n_devices=reps * int(nd[j]), max_batch=int(lay.max_batch[j]),
            decode_mem_per_gpu_gb=float(lay.mem_gb[i, j]),
            meets_limits=req.meets(float(a_ttft[i, j]), float(a_tpot[i, j])),
            dtype=req.dtype or "default", attn_dp=int(lay.dp[j]), ep=int(lay.ep[j]),
            prefill_attn_dp=int(lay.dp[j]), prefill_ep=int(lay.ep[j])))
    return out


# --- disaggregated: prefill workers feed decode workers ----------------------------------------

def _prefill_options(req: _Request, lay: _Layouts,
                     sizes: Sequence[int]) -> list[tuple[int, int, int, float, float]]:
    """Prefill workers worth pairing: per layout size, the (rate max, TTFT min) Pareto set
    of (layout, prefill batch) within the TTFT limit, as (size, layout, prefill batch,
    prefill ns, requests per ns)."""
    nd = lay.n_devices
    options: list[tuple[int, int, int, float, float]] = []
    for s in sizes:
        pts = []
        for k, pb in enumerate(req.prefill_batches):
            sel = np.nonzero(lay.prefill_fits[k] & (nd == s))[0]
            for j in sel:
                ns = float(lay.prefill_ns[k, j])
                if req.max_ttft_ms is None or ns / 1e6 <= req.max_ttft_ms:
                    pts.append((pb / ns, ns, j, pb))
        pts.sort(key=lambda p: (-p[0], p[1]))
        best_ns = math.inf
        for rate, ns, j, pb in pts:
            if ns < best_ns:
                best_ns = ns
                options.append((s, int(j), int(pb), ns, rate))
    return options


def _decode_options(req: _Request, lay: _Layouts,
                    sizes: Sequence[int]) -> list[tuple[int, int, int, float]]:
    """Decode workers worth pairing: per (layout size, batch) the fastest fitting layout,
    as (size, layout, batch index, step ns)."""
    options: list[tuple[int, int, int, float]] = []
    for s in sizes:
        for i in range(len(req.batches)):
            sel = np.nonzero(lay.decode_fits[i] & (lay.n_devices == s))[0]
            if sel.size:
                j = int(sel[np.argmin(lay.step_ns[i, sel])])
                options.append((s, j, i, float(lay.step_ns[i, j])))
    return options


def _disagg_candidates(req: _Request, lay: _Layouts) -> list[ServingConfig]:
    """Step 4: ``y`` decode workers of each decode option and, for each prefill option,
    the fewest prefill workers ``x`` that keep up with them (rate matching; with
    ``exact_gpus``, as many as fill the budget), within ``x · size_p + y · size_d <=
    gpus``. Without ``exact_gpus`` a pair's TTFT and TPOT do not depend on ``y`` and its
    tokens/s per GPU only through the rounding of ``x``: a ``y`` is kept only when it
    raises the pair's tokens/s per GPU over every smaller ``y`` (the others lose to it on
    every objective), so a large budget costs arithmetic, not configurations."""
    sizes = sorted({int(s) for s in lay.n_devices if s <= req.gpus})
    p_opts = _prefill_options(req, lay, sizes)
    steps = max(req.osl - 1, 1)
    out = []
    for s_d, jd, i, ns_d in _decode_options(req, lay, sizes):
        b = int(req.batches[i])
        rate_d = b / (steps * ns_d)
        record = [0.0] * len(p_opts)
        for y in range(1, req.gpus // s_d + 1):
            for k, (s_p, jp, pb, ns_p, rate_p) in enumerate(p_opts):
                x = math.ceil(y * rate_d / rate_p * (1 - 1e-12))
                if req.exact_gpus:
                    rest = req.gpus - y * s_d
                    if rest < x * s_p or rest % s_p:
                        continue
                    x = rest // s_p
                total = x * s_p + y * s_d
                if total > req.gpus:
                    continue
                if not req.exact_gpus:  # only a y that beats every smaller y of the pair
                    per_gpu = min(x * rate_p, y * rate_d) / total
                    if per_gpu <= record[k] * (1 + 1e-12):
                        continue
                    record[k] = per_gpu
                m = disagg_metrics(prefill_ns=ns_p, prefill_batch=pb, prefill_workers=x,
                                   step_ns=ns_d, batch=b, decode_workers=y, osl=req.osl)
                ttft, tpot = ns_p / 1e6, ns_d / 1e6
                out.append(ServingConfig(
                    mode="disagg",
                    layout=f"{x}×{lay.labels[jp]} prefill + {y}×{lay.labels[jd]} decode",
                    prefill_layout=lay.labels[jp], decode_layout=lay.labels[jd], replicas=None,
                    prefill_workers=x, decode_workers=y, batch=b, prefill_batch=pb,
                    ttft_ms=ttft, tpot_ms=tpot,
                    request_latency_ms=float(m["request_latency_ns"]) / 1e6,
                    tokens_per_s_per_gpu=float(m["tokens_per_s"]) / total,
                    tokens_per_s_per_user=1e3 / tpot, tokens_per_s=float(m["tokens_per_s"]),
                    requests_per_s=float(m["requests_per_s"]), n_devices=total,
                    max_batch=int(lay.max_batch[jd]), decode_mem_per_gpu_gb=float(lay.mem_gb[i, jd]),
                    meets_limits=req.meets(ttft, tpot), dtype=req.dtype or "default",
                    attn_dp=int(lay.dp[jd]), ep=int(lay.ep[jd]),
                    prefill_attn_dp=int(lay.dp[jp]), prefill_ep=int(lay.ep[jp])))
    return out


# --- choosing: rank, best per mode, frontier -----------------------------------------------------

def _choose(req: _Request, candidates: list[ServingConfig],
            lay: _Layouts) -> tuple[list[ServingConfig], list[ServingConfig]]:
    """Step 5: the ``top`` best deployments of each mode meeting both limits, ranked, and
    each mode's frontier; raise what binds when none meets them."""
    best: list[ServingConfig] = []
    for mode in req.modes:
        best += _dedupe((c for c in candidates if c.mode == mode and c.meets_limits),
                        key=_deployment)[:req.top]
    best = _rank(best)
    if not best:
        _explain_infeasible(req, lay, candidates, p_cands_exist=bool(lay.prefill_fits.any()))
    frontier: list[ServingConfig] = []
    for mode in req.modes:
        frontier += _pareto_front([c for c in candidates if c.mode == mode])
    return best, frontier


# --- ranking --------------------------------------------------------------------------------

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


# --- nothing meets the limits: what binds ---------------------------------------------------

def _explain_infeasible(req: _Request, lay: _Layouts, candidates: Sequence[ServingConfig], *,
                        p_cands_exist: bool) -> NoReturn:
    """Raise the InfeasibleError that says what binds."""
    ttft_lim, tpot_lim, where = req.max_ttft_ms, req.max_tpot_ms, req.where
    fits_any = bool((lay.decode_fits.any(axis=0) & lay.agg_prefill_fits).any())
    if not fits_any or not p_cands_exist:
        _raise_no_fit(req)
    if ttft_lim is not None:
        floor = _ttft_floor(lay)
        if floor > ttft_lim:
            raise InfeasibleError(
                f"the lowest TTFT any layout reaches on {where} is {floor:.1f} ms > "
                f"--max-ttft-ms {ttft_lim:g} (by {floor - ttft_lim:.1f} ms); raise the limit "
                "or add GPUs", binding="max_ttft_ms", best=floor, limit=ttft_lim)
    if not candidates:
        exact = req.exact_gpus
        need = "at least one prefill and one decode worker" if req.modes == ("disagg",) else (
            "a layout size that divides the budget" if exact else "a deployment in the budget")
        raise InfeasibleError(
            f"no {'/'.join(req.modes)} deployment of {req.model.name} fits {where}"
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


def _raise_no_fit(req: _Request) -> NoReturn:
    """Nothing in the budget fits both a prefill and a decode: raise the InfeasibleError
    naming the smallest GPU count that fits (or that the batches searched are too large)."""
    name, isl, osl, fam = req.model.name, req.isl, req.osl, req.family
    small = _smallest_fitting(req)
    if small is None:
        raise InfeasibleError(
            f"{name} with {isl}+{osl} tokens per request fits no layout of "
            f"{fam.name} up to {fam.topology.n_devices} devices; pick a family with more "
            "HBM per device or shorten the request", binding="gpus")
    n, lab = small
    if n <= req.gpus:  # it fits, just not at the batches searched
        raise InfeasibleError(
            f"{name} fits on {req.where} at batch 1 ({lab}) but not at the batches "
            f"searched (smallest {req.batches[0]}); pass smaller batches", binding="batch",
            min_gpus=n)
    raise InfeasibleError(
        f"{name} with {isl}+{osl} tokens per request does not fit on {req.where}: the "
        f"smallest GPU count that fits is {n} ({lab} at batch 1); pass gpus >= {n}",
        binding="gpus", min_gpus=n)


def _ttft_floor(lay: _Layouts) -> float:
    """Lowest single-request TTFT (ms) of any fitting layout in the budget (one request
    per attention-DP rank of an expert-parallel layout)."""
    ok = lay.agg_prefill_fits & lay.within
    return float(lay.agg_prefill_ns[ok].min() / 1e6) if ok.any() else math.inf


def _smallest_fitting(req: _Request) -> tuple[int, str] | None:
    """Fewest devices of any layout holding weights + batch-1 KV (isl + osl) and a prefill."""
    space = full_space().with_(dp=(1,))
    common: dict[str, Any] = dict(space=space, hardware=req.hardware, family=req.family,
                                  efficiency=req.efficiency)
    stack = (req.dtype, req.runtime, req.moe_imbalance)
    dec = evaluate(req.model, _workload("decode", *stack, batch=1, s_kv=req.isl + req.osl),
                   **common)
    pre = evaluate(req.model, _workload("prefill", *stack, batch=1, s_kv=req.isl), **common)
    ok = (dec.fits & pre.fits).squeeze(list(HW_KNOBS))
    if not bool(ok.any()):
        return None
    n = dec.n_devices.where(ok)
    best = n.stack(_layout=PARALLEL_DIMS)
    j = int(best.fillna(np.inf).argmin("_layout"))
    lay = dict(zip(PARALLEL_DIMS, best.indexes["_layout"][j], strict=True))
    return int(best.values[j]), layout_label(lay)
