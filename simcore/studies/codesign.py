"""Co-design explorer: sweep hardware candidates, best fitting layout for each.

For a fixed model and workload, :func:`joint_explore` evaluates every (hardware, layout)
pair with the fused kernel, keeps the latency-minimum (or metric-best) fitting layout per
hardware candidate, marks the Pareto frontier on (metric, ``cost_score``) and ranks the
knobs by how much doubling each speeds up the fastest hardware, with one more row for the
scale-out network's latency halved (:data:`SCALEOUT_LATENCY_ROW`).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

import numpy as np
import xarray as xr

from ..engine.chunks import BYTES_PER_HW_POINT, EVALS_PER_SECOND, check_fits_in_memory, reduce_best
from ..engine.core import Prepared, check_budget, prepare
from ..engine.metrics import Metric, get_metric
from ..engine.pareto import objective_directions, pareto
from ..engine.space import HW_KNOB_DEFAULTS, PARALLEL_DIMS, Space, depth_grid
from ..errors import SimcoreInputError
from ..hardware.costmodel import CostModel, add_costs, get_cost_model
from ..model.presets import get_family
from ..model.specs import HW_KNOBS, Efficiency, Hardware, HardwareFamily, Model, Workload

__all__ = [
    "HW_KNOB_DEFAULTS",
    "HardwareCandidate",
    "JointScore",
    "SensitivityRow",
    "SCALEOUT_LATENCY_ROW",
    "JointExploreResult",
    "enumerate_hardware",
    "joint_explore",
    "sensitivity",
    "cost_score",
]


def cost_score(knobs: Mapping[str, Any],
               defaults: Mapping[str, float] | str | HardwareFamily | None = None) -> Any:
    """Σ knob / knob_default over the six knobs (6.0 at the defaults); works on arrays.

    ``defaults``: the knob values to divide by, or a hardware family (name or spec)
    whose hardware they are; default the SiP defaults. This is the one definition of
    ``cost_score``: the explorer's Dataset and :attr:`HardwareCandidate.cost_score` both
    call it with the family of the sweep.

    Examples
    --------
    >>> fam = get_family("H100-SXM")
    >>> cost_score(fam.hardware.as_dict(), fam)
    6.0
    """
    if defaults is None:
        defaults = HW_KNOB_DEFAULTS
    elif isinstance(defaults, str | HardwareFamily):
        defaults = get_family(defaults).hardware.as_dict()
    return sum(knobs[k] / defaults[k] for k in HW_KNOBS)


@dataclass(frozen=True)
class HardwareCandidate(Hardware):
    """A hardware point of the sweep; ``cost_score`` = Σ knob / the family's knob (6.0 at
    the family's hardware; ``family`` defaults to the SiP).

    Examples
    --------
    >>> HardwareCandidate().cost_score
    6.0
    >>> HardwareCandidate(**get_family("H100-SXM").hardware.as_dict(), family="H100-SXM").cost_score
    6.0
    """

    family: str = "SiP"

    @property
    def cost_score(self) -> float:
        return float(cost_score(self.as_dict(), self.family))


def enumerate_hardware(
    depth: str | int | Mapping[str, Sequence[float]] = "balanced",
    *,
    family: str | HardwareFamily | None = None,
) -> list[HardwareCandidate]:
    """Hardware candidates of a depth: ``two_stage`` (1), ``balanced`` (64), ``coarse``
    (729), an int ``n`` (n^6) or a custom grid (mapping knob → values), as multiples of
    the family's hardware (default: the SiP defaults).

    Examples
    --------
    >>> [len(enumerate_hardware(d)) for d in ("two_stage", "balanced", "coarse")]
    [1, 64, 729]
    """
    fam = get_family(family)
    grid = depth_grid(depth, defaults=fam.hardware.as_dict())
    return [HardwareCandidate(**dict(zip(HW_KNOBS, vals, strict=True)), family=fam.name)
            for vals in itertools.product(*(grid[k].tolist() for k in HW_KNOBS))]


@dataclass(frozen=True)
class JointScore:
    """One (hardware, best layout) pair and its metrics."""

    hardware: HardwareCandidate
    layout: dict[str, Any]
    latency_ns: float
    throughput_tok_s: float
    flops_per_device: float
    compute_ns: float
    memory_ns: float
    comm_ns: float
    mem_bytes: float
    n_devices: int
    cost_score: float
    cost_usd: float = float("nan")
    power_w: float = float("nan")
    cost_usd_per_device: float = float("nan")
    power_w_per_device: float = float("nan")
    tokens_per_s_per_gpu: float = float("nan")

    @property
    def total_latency_ns(self) -> float:
        """The original auto_hardware name of :attr:`latency_ns`."""
        return self.latency_ns

    def metric(self, metric: str | Metric) -> float:
        m = get_metric(metric)
        return float(getattr(self, m.key if hasattr(self, m.key) else m.name))

    def as_row(self) -> dict[str, Any]:
        return {**self.hardware.as_dict(), **self.layout, "cost_score": self.cost_score,
                **{k: getattr(self, k) for k in ("latency_ns", "throughput_tok_s",
                   "flops_per_device", "compute_ns", "memory_ns", "comm_ns", "mem_bytes",
                   "n_devices", *_COST_FIELDS)}}


#: JointScore fields filled when joint_explore is given a cost model.
_COST_FIELDS = ("cost_usd", "power_w", "cost_usd_per_device", "power_w_per_device",
                "tokens_per_s_per_gpu")


#: The sensitivity row that halves the scale-out network's latency instead of doubling a
#: knob: "what if the scale-out network had half the latency?". It halves the topology's
#: per-step network latencies (``Topology.alpha_inter_ns`` and ``alpha_intersip_ns``: NCCL's
#: network latency in the GPU families) and re-prepares the layouts (a topology constant
#: enters the first stage, not the swept knobs); NCCL's per-operation base latency
#: (``coll_base_scaleout_ns``, software) and the in-cube steps stay.
SCALEOUT_LATENCY_ROW = "scaleout_latency_halved"


@dataclass(frozen=True)
class SensitivityRow:
    """Doubling one knob on a hardware point, measured by the sweep's metric.

    ``baseline`` and ``doubled`` are the chosen metric (``metric``, in its own unit) of
    the metric-best layout before and after doubling; ``rel_speedup`` is the relative
    gain, direction-aware (``baseline/doubled - 1`` for a smaller-is-better metric,
    ``doubled/baseline - 1`` for a larger-is-better one), so it is ≥ 0 whenever doubling
    does not hurt. ``baseline_latency_ns`` / ``doubled_latency_ns`` are the latencies of
    those same layouts. The row named :data:`SCALEOUT_LATENCY_ROW` halves the scale-out
    network's latency instead; its ``doubled*`` fields hold the values with that change.
    """

    knob: str
    baseline_latency_ns: float
    doubled_latency_ns: float
    rel_speedup: float
    metric: str = "latency"
    baseline: float = float("nan")
    doubled: float = float("nan")


@dataclass
class JointExploreResult:
    """What :func:`joint_explore` found.

    ``all_scores``: one :class:`JointScore` per hardware candidate on which some layout
    fits (its best layout), sorted by the metric; ``pareto_scores``: the subset
    non-dominated on ``objectives`` (default (metric, cost_score); (metric, cost_usd)
    with a cost model); ``sensitivity``: one row per knob, ranked;
    ``total_joint``: (hardware × layout) pairs evaluated; ``dataset``: per-hardware best
    results as an ``xr.Dataset`` (with ``cost_score`` and ``pareto``); ``message``: why
    the result is empty, if it is.
    """

    model: str
    workload: Workload
    metric: str
    all_scores: list[JointScore]
    pareto_scores: list[JointScore]
    sensitivity: list[SensitivityRow]
    total_joint: int
    n_hardware: int
    n_layouts: int
    dataset: xr.Dataset
    message: str = ""
    extras: dict[str, Any] = field(default_factory=dict)
    objectives: dict[str, str] = field(default_factory=dict)
    cost_model: CostModel | None = None

    @property
    def empty(self) -> bool:
        return not self.all_scores

    @property
    def best(self) -> JointScore | None:
        return self.all_scores[0] if self.all_scores else None


def _scores(ds: xr.Dataset, family: str) -> tuple[list[JointScore], list[bool]]:
    """Fitting hardware points as JointScores (hw C-order) and their Pareto flags."""
    flat = ds.stack(_hw=list(HW_KNOBS))
    ok = flat.any_fits.values
    front = flat.pareto.values
    out = []
    cols = {name: flat[name].values for name in flat.data_vars}
    knob_vals = {k: flat[k].values for k in HW_KNOBS}
    for i in np.flatnonzero(ok):
        hw = HardwareCandidate(**{k: float(knob_vals[k][i]) for k in HW_KNOBS}, family=family)
        layout = {d: (cols[f"best_{d}"][i].item() if hasattr(cols[f"best_{d}"][i], "item")
                      else cols[f"best_{d}"][i]) for d in PARALLEL_DIMS}
        out.append(JointScore(
            hardware=hw, layout=layout,
            latency_ns=float(cols["latency_ns"][i]),
            throughput_tok_s=float(cols["throughput_tok_s"][i]),
            flops_per_device=float(cols["flops_per_device"][i]),
            compute_ns=float(cols["compute_ns"][i]), memory_ns=float(cols["memory_ns"][i]),
            comm_ns=float(cols["comm_ns"][i]), mem_bytes=float(cols["mem_bytes"][i]),
            n_devices=int(cols["n_devices"][i]), cost_score=float(cols["cost_score"][i]),
            **{k: float(cols[k][i]) for k in _COST_FIELDS if k in cols},
        ))
    return out, [bool(front[i]) for i in np.flatnonzero(ok)]


def sensitivity(
    model: Model | str,
    workload: Workload,
    *,
    hardware: Hardware | None = None,
    space: str | Space | Mapping[str, Sequence[Any]] | None = "reduced",
    family: str | HardwareFamily | None = None,
    efficiency: Efficiency | None = None,
    metric: str | Metric = "latency",
) -> list[SensitivityRow]:
    """Per-knob deltas: best latency at ``hardware`` vs with one knob doubled, and
    (:data:`SCALEOUT_LATENCY_ROW`) with the scale-out network's latency halved.

    ``rel_speedup = baseline / doubled - 1`` (≥ 0: doubling a knob never hurts). Rows are
    ranked by ``rel_speedup``, largest first. Empty if nothing fits at ``hardware``.
    """
    hw = hardware or get_family(family).hardware
    p = prepare(model, workload, space=space, hardware=hw, family=family, efficiency=efficiency)
    return sensitivity_of_prepared(p, hw, metric=metric)


def sensitivity_of_prepared(p: Prepared, hardware: Hardware, *,
                            metric: str | Metric = "latency") -> list[SensitivityRow]:
    """:func:`sensitivity` reusing prepared layout coefficients (one kernel call)."""
    m = get_metric(metric)
    found = p.doubling(hardware, m)
    if found is None:
        return []
    vals, lat = found
    # the scale-out latency halved: the same layouts prepared on the changed topology
    # (memory does not depend on latency: what fits at ``hardware`` still fits)
    halved = _scaleout_halved(p, hardware).doubling(hardware, m)
    names: tuple[str, ...] = HW_KNOBS
    if halved is not None:
        names = (*HW_KNOBS, SCALEOUT_LATENCY_ROW)
        vals, lat = np.append(vals, halved[0][0]), np.append(lat, halved[1][0])
    gain = vals[0] / vals[1:] - 1.0 if m.direction == "min" else vals[1:] / vals[0] - 1.0
    rows = [SensitivityRow(kn, float(lat[0]), float(lat[j + 1]), float(gain[j]), m.name,
                           float(vals[0]), float(vals[j + 1]))
            for j, kn in enumerate(names)]
    rows.sort(key=lambda r: -r.rel_speedup)
    return rows


def _scaleout_halved(p: Prepared, hardware: Hardware) -> Prepared:
    """``p``'s layouts prepared at ``hardware`` on its topology with the scale-out
    network's per-step latencies halved (:data:`SCALEOUT_LATENCY_ROW`)."""
    t = p.topology
    topo = replace(t, alpha_inter_ns=t.alpha_inter_ns / 2, alpha_intersip_ns=t.alpha_intersip_ns / 2)
    return prepare(p.model, p.workload, space=p.space, hardware=hardware,
                   family=HardwareFamily(p.family, hardware, topo), efficiency=p.efficiency,
                   gpus=p.gpus, exact_gpus=p.exact_gpus)


def _no_fit_message(p: Prepared) -> str:
    valid = p.valid
    usable = p.efficiency.hbm_usable
    max_hbm = float(p.knobs["pe_hbm_gb"].max())
    w = p.workload
    if not valid.any():
        return (f"{p.model.name}: no layout of the {p.space.name} space is valid on "
                f"{p.family} ({p.topology.n_devices} devices); widen the space or pick a "
                "larger family")
    need = float(p.column("mem_bytes")[valid].min()) / 1e9
    return (f"{p.model.name} ({w.mode}, batch={w.batch}, s_kv={w.s_kv}) fits on none of the "
            f"{p.n_hw} hardware candidates: the leanest valid layout needs {need:.1f} GB per "
            f"device, the most HBM swept is {max_hbm:g} GB ({usable:.0%} usable); sweep larger "
            "pe_hbm_gb (a custom depth), shorten s_kv / batch, use the full space, or a "
            "family with more devices")


#: Memory per hardware point of a :func:`joint_explore` result (Dataset, scores, Pareto),
#: measured about 1.5 kB; the estimate is conservative.
EXPLORE_BYTES_PER_HW_POINT = 2_000 + BYTES_PER_HW_POINT


def check_depth(depth: Any) -> str | int | Mapping[str, Sequence[float]]:
    """``depth`` with numpy integers as ints; a custom grid with repeated values refused.

    Examples
    --------
    >>> check_depth(np.int64(3))
    3
    >>> check_depth({"bw_hbm_gbs": [4000, 4000]})
    Traceback (most recent call last):
    ...
    simcore.errors.SimcoreInputError: grid for bw_hbm_gbs repeats 4000.0; give each value once
    """
    if isinstance(depth, np.integer):
        return int(depth)
    if isinstance(depth, Mapping):
        for knob, values in depth.items():
            vals = np.atleast_1d(np.asarray(values, dtype=float)) if not isinstance(
                values, str) else None
            if vals is None:
                raise SimcoreInputError(f"grid for {knob} must be numbers, got {values!r}")
            seen: set[float] = set()
            for v in vals.tolist():
                if v in seen:
                    raise SimcoreInputError(
                        f"grid for {knob} repeats {v}; give each value once")
                seen.add(v)
    return depth


def estimate_explore(n_hw: int, n_layouts: int) -> tuple[float, float]:
    """``(bytes, seconds)``: a conservative estimate of a sweep's memory and run time."""
    return float(n_hw) * EXPLORE_BYTES_PER_HW_POINT, n_hw * n_layouts / EVALS_PER_SECOND


def check_explore_size(n_hw: int, n_layouts: int) -> None:
    """Refuse a sweep whose result would not fit in memory (before any compute)."""
    from ..engine.chunks import available_memory

    need, _ = estimate_explore(n_hw, n_layouts)
    avail = available_memory() or need
    per_knob = max(1, int((0.5 * avail / EXPLORE_BYTES_PER_HW_POINT) ** (1 / 6)))
    check_fits_in_memory(
        need, f"a sweep of {n_hw:,} hardware points x {n_layouts:,} layouts",
        f"sweep fewer hardware points: a smaller depth (e.g. {per_knob} values per knob, "
        f"{per_knob ** 6:,} points) or a custom grid of the knobs that matter",
        n_evals=float(n_hw) * n_layouts)


def _names_of(objective: str) -> tuple[str, ...]:
    """A registered metric's names (canonical first), or just the objective itself."""
    try:
        return get_metric(objective).names
    except ValueError:
        return (objective,)


def _objectives_and_costs(
    m: Metric, objectives: str | Sequence[str] | Mapping[str, str] | None,
    cost_model: CostModel | Mapping[str, Any] | str | bool | None,
) -> tuple[dict[str, str], CostModel | None]:
    """The Pareto objectives with their directions, and the cost model they need: by
    default the metric and the price (``cost_usd`` with a cost model, else
    ``cost_score``); objectives naming a cost or power field bring the default cost model
    when none is given."""
    cm = get_cost_model(cost_model)
    if objectives is None:
        price = "cost_usd" if cm is not None else "cost_score"
        return {m.name: m.direction, price: "min"}, cm
    objs = objective_directions(objectives)
    if cm is None and any(_names_of(o)[0] in _COST_FIELDS for o in objs):
        cm = get_cost_model("default")
    return objs, cm


def joint_explore(
    model: Model | str,
    *,
    s_kv: int,
    mode: str = "decode",
    depth: str | int | Mapping[str, Sequence[float]] = "balanced",
    space: str | Space | Mapping[str, Sequence[Any]] | None = "reduced",
    metric: str | Metric = "latency",
    batch: int = 1, s_q: int = 0,
    family: str | HardwareFamily | None = None, efficiency: Efficiency | None = None,
    chunk_size: int | None = None, progress: bool = False, with_sensitivity: bool = True,
    client: Any = None, store: str | None = None,
    cost_model: CostModel | Mapping[str, Any] | str | bool | None = None,
    objectives: str | Sequence[str] | Mapping[str, str] | None = None,
    gpus: int | None = None,
    exact_gpus: bool = False,
    cuda_graphs: bool | None = None, runtime: str = "", moe_imbalance: float = 1.0,
) -> JointExploreResult:
    """Sweep hardware candidates; per candidate, the metric-best layout that fits.

    Parameters
    ----------
    model : Model or str
    s_kv : int
        Context length (prompt length for prefill).
    mode : {"decode", "prefill"}
    depth : {"two_stage", "balanced", "coarse"}, int or mapping
        Hardware sweep (see :func:`enumerate_hardware`).
    space : {"reduced", "full"}, Space or mapping
        Layout space.
    metric : str
        ``"latency"`` (default), ``"throughput"`` or ``"FLOPS"``.
    family : str or HardwareFamily, optional
        Topology and the default hardware the depth multiplies (and ``cost_score``
        divides by); default ``"SiP"``.
    client : dask.distributed.Client, optional
        Run the sweep on a dask cluster (see :mod:`simcore.engine.distributed`).
    store : str, optional
        A zarr store to checkpoint finished hardware chunks in; rerun with the same store
        after an interruption and only the missing chunks are computed.
    cost_model : CostModel, mapping, TOML/JSON path or "default", optional
        Adds ``cost_usd``, ``power_w`` (totals over the devices the best layout uses),
        ``cost_usd_per_device``, ``power_w_per_device`` and ``tokens_per_s_per_gpu`` to
        the Dataset and the scores (see :mod:`simcore.hardware.costmodel`). Objectives naming one
        of them use :data:`~simcore.hardware.costmodel.DEFAULT_COST_MODEL` when none is given.
    objectives : str, sequence or mapping, optional
        What the Pareto frontier is over, any number of them, directions from the metric
        registry (``"latency,cost_usd,power_w"``); default ``(metric, "cost_score")``,
        or ``(metric, "cost_usd")`` with a cost model.
    gpus : int, optional
        Device budget: per candidate only layouts using at most ``gpus`` devices compete
        (exactly ``gpus`` with ``exact_gpus``); see :func:`simcore.evaluate`.
    exact_gpus : bool
    cuda_graphs, runtime, moe_imbalance : bool or None, str, float
        Decode steps replay CUDA graphs (:attr:`simcore.Workload.cuda_graphs`), or (None)
        as the ``runtime`` profile says (:data:`simcore.model.runtime.RUNTIMES`; "": off);
        :attr:`simcore.Workload.moe_load_imbalance` (MoE routing skew; 1 = balanced).

    Examples
    --------
    >>> r = joint_explore("Llama 3.1 8B", s_kv=8192, depth="two_stage")
    >>> r.total_joint, len(r.all_scores), r.sensitivity[0].rel_speedup >= 0
    (1920, 1, True)
    """
    m = get_metric(metric)
    objs, cm = _objectives_and_costs(m, objectives, cost_model)
    if cuda_graphs and mode != "decode":
        raise SimcoreInputError(f"cuda_graphs: only decode steps replay CUDA graphs; pass "
                                f"cuda_graphs=False for mode={mode!r}")
    wl = Workload(mode, batch, s_kv, s_q, cuda_graphs=cast(bool, cuda_graphs), runtime=runtime,
                  moe_load_imbalance=moe_imbalance)
    fam = get_family(family)
    defaults = fam.hardware.as_dict()  # depths and cost_score are relative to the family
    depth = check_depth(depth)
    grid = depth_grid(depth, defaults=defaults)
    if cm is not None:  # an overflowing price is refused before the sweep, not shown as inf
        cm.check_finite(grid, n_devices=fam.topology.n_devices)
    p = prepare(model, wl, space=space, hardware=grid,
                family=fam, efficiency=efficiency, gpus=gpus, exact_gpus=exact_gpus)
    check_explore_size(p.n_hw, p.space.size)
    check_budget([p])
    ds = reduce_best(p, metric=m, chunk_size=chunk_size, progress=progress, client=client,
                     store=store)
    knob_da = {k: ds[k] for k in HW_KNOBS}
    ds["cost_score"] = cost_score(knob_da, fam).transpose(*HW_KNOBS)
    ds["cost_score"].attrs.update(
        description=f"sum of knob / {fam.name} default knob (6.0 at the family's hardware)",
        long_name="cost score", units="1")
    if cm is not None:
        ds = add_costs(ds, cm)
    missing = [o for o in objs if not any(n in ds.data_vars for n in _names_of(o))]
    if missing:
        raise SimcoreInputError(
            f"objectives {missing} are not in the explorer's Dataset; pass a cost model for "
            f"cost/power objectives or one of {sorted(map(str, ds.data_vars))}")
    ds["pareto"] = pareto(ds, objectives=objs, feasible="any_fits").transpose(*HW_KNOBS)
    ds["pareto"].attrs["objectives"] = ",".join(f"{k}:{v}" for k, v in objs.items())
    ds["pareto"].attrs["long_name"] = "on the Pareto frontier of " + ", ".join(objs)
    scores, on_front = _scores(ds, fam.name)
    # by the metric, then the cheaper hardware among equals
    order = sorted(range(len(scores)),
                   key=lambda i: (m.sign * scores[i].metric(m), scores[i].cost_score))
    front = [scores[i] for i in order if on_front[i]]
    scores = [scores[i] for i in order]
    sens: list[SensitivityRow] = []
    message = ""
    if not scores:
        message = _no_fit_message(p)
    elif with_sensitivity:
        sens = sensitivity_of_prepared(p, scores[0].hardware, metric=m)
    ds.attrs.update(depth=str(depth) if not isinstance(depth, Mapping) else "custom",
                    total_joint=p.n_hw * p.space.size)
    return JointExploreResult(
        model=p.model.name, workload=wl, metric=m.name, all_scores=scores, pareto_scores=front,
        sensitivity=sens, total_joint=p.n_hw * p.space.size, n_hardware=p.n_hw,
        n_layouts=p.space.size, dataset=ds, message=message, objectives=objs, cost_model=cm,
    )
