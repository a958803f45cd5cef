"""The engine: the one door into the numba kernels.

No module outside ``simcore/kernels/`` but this one imports the kernels. It validates
the specs, builds the per-layout coefficient table once (:func:`prepare` →
:class:`Prepared`) and offers labelled operations on it:

* :meth:`Prepared.combine` — every output over hardware rows × layouts (full tensor);
* :meth:`Prepared.best` — the metric-best fitting layout per hardware row (fused);
* :meth:`Prepared.doubling` — the metric at one hardware point and with each knob doubled;
* :meth:`Prepared.column` — a per-layout coefficient by name (``"mem_bytes"``, ...);
* one layout per physical configuration: a layout repeating an earlier one (the CP
  ring variant when ``cp == 1``, the TP placement when ``tp == 1``, ...:
  :func:`simcore.engine.space.physical_keys`) is marked not valid, as an illegal one is;
* a device budget (``prepare(..., gpus=N)``): layouts using more than ``N`` devices (or
  other than ``N`` with ``exact_gpus``) are marked not valid in the coefficient table
  itself, so every output, reduction and frontier treats them as points that do not
  fit (NaN outputs, ``fits`` False); :func:`check_budget` refuses a budget on which
  nothing fits, naming the smallest device count that does.

The kernel interface itself (coefficients, parameter bundles, outputs with units) is
declared in ``simcore/kernels/schema.py``; its names are re-exported here.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import DeviceBudgetError, SimcoreInputError
from ..hardware.families import require_matmul_rate
from ..kernels import schema
from ..model.presets import get_family, get_model
from ..model.specs import HW_KNOBS, Efficiency, Hardware, HardwareFamily, Model, Topology, Workload
from .metrics import Metric, get_metric
from .space import (
    CHOICES,
    Space,
    canonical_layouts,
    get_space,
    hardware_grid,
    layout_table,
    straddling_layouts,
)

__all__ = [
    "LAYOUT_OUTPUTS", "MEM_PARTS", "N_BEST", "OUTPUT_NAMES", "CoeffRecipe", "Prepared",
    "apply_budget", "build_coeffs", "check_budget", "check_gpus", "combine", "field_attrs",
    "point_one", "point_one_call", "fused_metric", "map_points", "grid_block", "pack_efficiency", "pareto_mask", "prepare",
    "space_coeffs",
]

#: Names of the per-point outputs, in kernel order (``fits`` last).
OUTPUT_NAMES: tuple[str, ...] = tuple(f.name for f in schema.OUTPUTS)
#: Numeric outputs the fused reduction returns per winner (all but ``fits``).
N_BEST: int = schema.N_BEST
#: Per-layout outputs (coefficient columns) and the memory parts among them.
LAYOUT_OUTPUTS: tuple[str, ...] = schema.LAYOUT_OUTPUTS
MEM_PARTS: tuple[str, ...] = schema.MEM_PARTS
field_attrs = schema.field_attrs
pack_efficiency = schema.pack_efficiency


#: The kernels each command's first call needs, as numba names them in the on-disk cache
#: (``<module>.<function>``): the first stage of the mode and the serial second stage
#: (``simcore evaluate``, ``simcore.predict``; what ``simcore._aot`` compiles), and
#: ``simcore validate``'s, which combines every point's coefficients in one grid.
FIRST_CALL_KERNELS: dict[str, tuple[str, ...]] = {
    "inference": ("inference._layout_coeffs", "inference.point_one"),
    "train": ("training._layout_coeffs", "inference.point_one"),
    "validate": ("inference._layout_coeffs", "training._layout_coeffs",
                 "inference.evaluate_grid"),
    "explore": ("inference._layout_coeffs", "inference.evaluate_grid", "inference.fused_best",
                "pareto.pareto_mask_sorted"),
    "compare": ("inference._layout_coeffs", "inference.fused_best"),
    "serving": ("inference._layout_coeffs", "inference.evaluate_grid",
                "pareto.pareto_mask_sorted"),
    # serving at a request rate (--rate / --trace): the request simulator, no Pareto mask
    "serving_rate": ("inference._layout_coeffs", "inference.evaluate_grid",
                     "requests.decode_part_ns", "requests.prefill_part_ns",
                     "requests.simulate_round_robin", "requests.kv_transfer_done"),
    "tune": ("training._layout_coeffs", "inference.evaluate_grid"),
}


def kernels_cached(kernels: Sequence[str] = FIRST_CALL_KERNELS["inference"]) -> bool:
    """Whether numba's on-disk cache holds ``kernels`` (``"inference.point_one"``, ...)
    for this install (if not, their first call compiles them: seconds)."""
    import importlib

    from ..kernels import _numba

    if not _numba.CACHE:
        return False
    for name in kernels:
        module, func = name.split(".")
        kernel = getattr(importlib.import_module(f"..kernels.{module}", __package__), func)
        kernel = getattr(kernel, "public", kernel)  # _numba.Kernel: Python calls go there
        cache = getattr(kernel, "_cache", None)
        # an installed package reads the wheel's folder, then the user's (kernels._numba)
        folders = getattr(cache, "simcore_paths", (getattr(cache, "_cache_path", None),))
        stamp = getattr(getattr(cache, "_cache_file", None), "_source_stamp", None)
        if not any(_has_index(folder, name, stamp) for folder in folders if folder):
            return False
    return True


def notice_before_compiling(kernels: Sequence[str], notice: Any) -> None:
    """Call ``notice()`` just before the first kernel runs, if ``kernels`` are not in the
    on-disk cache (their first call then compiles them); nothing if they are. Input errors
    found before any kernel runs are therefore not preceded by the notice."""
    from ..kernels import _numba

    if not kernels_cached(kernels):
        _numba.before_first_call(notice)


@functools.cache
def _api_compile_notice(mode: str) -> None:
    """The Python API's compile notice, checked once per process and mode: when the first
    kernels are not in the on-disk cache, a WARNING on the ``simcore`` logger just before
    the first kernel runs (Python shows it on stderr when no logging is configured). The
    CLI arms its own notice first; then this one stays quiet."""
    import logging

    from ..kernels import _numba

    if _numba._BEFORE_FIRST_CALL:  # the CLI's notice is armed
        return
    kernels = FIRST_CALL_KERNELS["train" if mode == "train" else "inference"]
    notice_before_compiling(kernels, lambda: logging.getLogger("simcore").warning(
        "simcore: compiling kernels (once, ~5 s; later processes load them from the cache)"))


def _has_index(folder: str, name: str, stamp: Any) -> bool:
    """Whether ``folder`` holds a cache index of kernel ``name`` for this CPU and stamp."""
    import os

    try:
        files = os.listdir(folder)
    except OSError:
        return False
    index = [f for f in files if f.startswith(name + "-") and f.endswith(".nbi")]
    return any(_index_matches_cpu(os.path.join(str(folder), f), stamp) for f in index)


def _index_matches_cpu(path: str, stamp: Any = None) -> bool:
    """Whether a numba cache index holds code for this machine's CPU (an index written on
    another CPU, e.g. a wheel built elsewhere, makes numba recompile) and, given ``stamp``,
    for these sources (an index under another stamp is stale: numba rewrites it). numba
    0.68 keys each entry by (signature, (target triple, CPU name, CPU features), ...); an
    index in another format is trusted (the answer only decides whether a notice is
    printed)."""
    import pickle

    try:
        with open(path, "rb") as fh:
            pickle.load(fh)  # the numba version that wrote it
            written, overloads = pickle.loads(fh.read())
        keys = list(overloads)
    except Exception:  # noqa: BLE001 - unknown or damaged index: numba decides, not us
        return True
    if stamp is not None and written != stamp:
        return False
    magic = _cpu_magic()
    return any(isinstance(k, tuple) and len(k) >= 2 and k[1] == magic for k in keys)


@functools.cache
def _cpu_magic() -> tuple:
    """numba's code-generation key for this machine, (triple, CPU name, CPU features), as
    its CPU codegen builds it (``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES`` override the
    host's), without creating a target context."""
    import llvmlite.binding as ll
    from numba.core import config

    name = getattr(config, "CPU_NAME", None) or ll.get_host_cpu_name()
    features = getattr(config, "CPU_FEATURES", None) or ll.get_host_cpu_features().flatten()
    return (ll.get_process_triple(), name, features)


def _readonly(row: np.ndarray) -> np.ndarray:
    """A read-only float64 hardware row: the one array type the serial kernel sees
    (``simcore.predict`` passes its cached rows read-only)."""
    row = np.array(row, dtype=np.float64)
    row.flags.writeable = False
    return row


def _kernels(train: bool) -> Any:
    if train:
        from ..kernels import training

        return training
    from ..kernels import inference

    return inference


def build_coeffs(layouts: np.ndarray, model: Model, workload: Workload,
                 topology: Topology) -> np.ndarray:
    """Per-layout coefficient table (structured, ``schema.COEF_DTYPE``); activations in a
    dtype the topology has no matmul rate for (fp4 on Hopper) are refused in one line."""
    if workload.mode != "train":
        require_matmul_rate(workload.act_dtype, topology)
    k = _kernels(workload.mode == "train")
    return k.layout_coeffs(np.ascontiguousarray(layouts, dtype=np.int64), _packed_model(model),
                           schema.pack_workload(workload), _packed_topology(topology))


def _packed_model(model: Model) -> schema.ModelParams:
    """``schema.pack_model``, cached per model (specs are frozen; ~8 µs a pack, paid by
    every workload point of a sweep otherwise); an unhashable model is packed anew."""
    try:
        return _pack_model_cached(model)
    except TypeError:
        return schema.pack_model(model)


@functools.lru_cache(maxsize=64)
def _pack_model_cached(model: Model) -> schema.ModelParams:
    return schema.pack_model(model)


@functools.lru_cache(maxsize=64)
def _packed_topology(topology: Topology) -> schema.TopologyParams:
    return schema.pack_topology(topology)


def check_gpus(gpus: Any, exact_gpus: Any = False) -> tuple[int | None, bool]:
    """A device budget as ``(gpus, exact_gpus)``: ``gpus`` None (no budget) or a positive
    integer (numpy integers accepted), ``exact_gpus`` a bool that needs ``gpus``; anything
    else a :class:`~simcore.errors.SimcoreInputError`.

    Examples
    --------
    >>> check_gpus(np.int64(8)), check_gpus(None)
    ((8, False), (None, False))
    >>> check_gpus(0)
    Traceback (most recent call last):
    ...
    simcore.errors.SimcoreInputError: gpus must be a positive integer (the device budget: layouts using more devices are masked), got 0
    """
    if isinstance(exact_gpus, np.bool_):
        exact_gpus = bool(exact_gpus)
    if not isinstance(exact_gpus, bool):
        raise SimcoreInputError(f"exact_gpus must be True or False, got {exact_gpus!r}")
    if gpus is None:
        if exact_gpus:
            raise SimcoreInputError("exact_gpus=True needs a budget: pass gpus=N as well")
        return None, False
    if isinstance(gpus, bool | np.bool_) or not isinstance(gpus, numbers.Integral) or gpus < 1:
        raise SimcoreInputError(f"gpus must be a positive integer (the device budget: layouts "
                                f"using more devices are masked), got {gpus!r}")
    return int(gpus), exact_gpus


def apply_budget(coeffs: np.ndarray, gpus: int | None, exact_gpus: bool = False) -> np.ndarray:
    """Mark the layouts outside the budget not valid (in place; returns ``coeffs``): more
    than ``gpus`` devices, or other than ``gpus`` with ``exact_gpus``. The kernels give a
    layout that is not valid NaN outputs and ``fits`` False, so a masked layout never
    wins a reduction or joins a frontier."""
    if gpus is None:
        return coeffs
    n = coeffs["n_devices"]
    keep = (n == gpus) if exact_gpus else (n <= gpus)
    coeffs["valid"] = np.where(keep, coeffs["valid"], 0.0)
    return coeffs


def space_coeffs(layouts: np.ndarray, model: Model, workload: Workload, topology: Topology,
                 gpus: int | None = None, exact_gpus: bool = False,
                 canonical: np.ndarray | None = None) -> np.ndarray:
    """The coefficient table of a layout space: :func:`build_coeffs`, with the layouts
    that repeat an earlier row's physical configuration (``canonical`` False, default
    :func:`~simcore.engine.space.canonical_layouts`) and those outside the device budget
    (:func:`apply_budget`) marked not valid. So a configuration is offered once: the
    repeats never win a reduction, join a frontier or count as fitting."""
    coeffs = build_coeffs(layouts, model, workload, topology)
    if canonical is None:
        canonical = canonical_layouts(layouts)
    keep = canonical & ~straddling_layouts(layouts, topology.pes_per_cube, topology.pes_per_sip)
    coeffs["valid"] = np.where(keep, coeffs["valid"], 0.0)
    return apply_budget(coeffs, gpus, exact_gpus)


@functools.lru_cache(maxsize=16)
def _space_table(space: Space) -> tuple[np.ndarray, np.ndarray]:
    """A space's layout rows and which of them are canonical (cached: shared by every
    :class:`Prepared` of the space, not to be written to; writeable, because numba
    compiles a read-only array as another type)."""
    layouts = layout_table(space)
    return layouts, canonical_layouts(layouts)


# --- exact pruning of the fused sweep ------------------------------------------------------
#
# How each coefficient enters ``point``'s latency and fit (kernels/inference.py), for
# :func:`dominated`. Every coefficient has a role; a coefficient without one turns the
# pruning off (and fails tests/test_evaluate.py), so a new kernel term cannot be pruned on
# wrong assumptions.
_ROLES: dict[str, str] = {
    # latency never falls when one of these grows (all are >= 0)
    **dict.fromkeys(("f_lin", "b_lin", "f_core", "b_core", "f_ffn", "b_ffn", "f_head",
                     "b_head", "b_elem", "comm0_bytes", "comm1_bytes", "comm2_bytes",
                     "comm_alpha_ns", "ring_alpha_ns", "pp_alpha_ns", "layer_mult",
                     "tail0_bytes", "tail1_bytes", "tail2_bytes", "tail_alpha_ns",
                     "tail_mem_bytes", "ovl0_bytes", "ovl1_bytes", "ovl2_bytes",
                     "ovl_alpha_ns", "fixed_ns", "launch_ns", "host_block_ns", "n_ops", "step_ops",
                     "step_count", "step_seqs"),
                    "cost"),
    # bytes on the tier named by the paired coefficient: a cost per tier
    "ring_bytes": "tiered:ring_tier", "pp_bytes": "tiered:pp_tier",
    "ring_tier": "tier", "pp_tier": "tier",
    # switches and per-workload constants: a dominator must have the same value
    **dict.fromkeys(("ring_overlap", "lowp_mm", "lowp_head", "core_gemm", "tokens",
                     "model_flops"), "equal"),
    "tail_hide": "gain",  # more of it hides more of the tail
    "mem_bytes": "fit", "n_devices": "devices", "valid": "valid",
    **dict.fromkeys(("mem_weights_bytes", "mem_kv_bytes", "mem_act_bytes"), "reported"),
}
#: the window the prefetched all-gathers and the gradient tail hide under (t_work): the
#: layer's compute and the CP ring wait it exposes
_WORK = ("f_lin", "b_lin", "f_core", "b_core", "f_ffn", "b_ffn", "ring_bytes", "ring_alpha_ns",
         "ring_tier", "ring_overlap")
_OVL = ("ovl0_bytes", "ovl1_bytes", "ovl2_bytes", "ovl_alpha_ns")
_TAIL = ("tail0_bytes", "tail1_bytes", "tail2_bytes", "tail_alpha_ns")


def dominated(coeffs: np.ndarray, metric_code: int, fit_bytes: float,
              eff: schema.EfficiencyParams) -> np.ndarray:
    """Per coefficient row: whether an earlier valid row is at least as good at every
    hardware point where the row fits memory ``fit_bytes`` or more (exact pruning).

    Row B dominates row A (B before A) when every cost coefficient of B is <= A's
    (per tier for tiered bytes, more ``tail_hide`` counts as less cost), the switches and
    workload constants are equal, B fits wherever A fits (B's memory <= A's, or B fits
    in ``fit_bytes``), for FLOPS per device B uses no more devices, and where ``point``
    is not monotone — a ring hidden under the attention core, collectives hidden under
    the layer's compute (ZeRO-3 all-gathers, an overlapped EP all-to-all, overlapped TP
    all-gathers / reduce-scatters) and exposed ring wait, a tail hidden under the backward — B's
    hiding inputs equal A's.
    Then B's latency is <= A's in floating point too (sums, products, quotients, maxima
    and minima of non-negative terms are monotone under rounding; an op's time is
    ``max(tc, tm) + (1 - overlap) · min(tc, tm)`` with ``0 <= overlap <= 1``), so A never is the first best
    layout: dropping every dominated row leaves each winner, its value and its index
    (ties go to the earlier row) unchanged. Found as the rows off the Pareto frontier of
    these columns plus the row index (``pareto_mask``). Nothing is pruned where a
    coefficient has no declared role or the efficiency has negative per-op costs.
    """
    names = coeffs.dtype.names or ()
    out = np.zeros(len(coeffs), dtype=bool)
    valid = np.flatnonzero(coeffs["valid"] == 1.0)
    if (set(names) != set(_ROLES) or len(valid) < 2 or eff.op_ns < 0.0 or eff.step_ns < 0.0
            or eff.seq_ns < 0.0 or not 0.0 <= eff.overlap <= 1.0):
        return out
    c = {n: np.asarray(coeffs[n][valid], dtype=np.float64) for n in names}
    off = np.full(len(valid), -np.inf)  # a column that constrains nobody
    cols: list[np.ndarray] = []
    for n, role in _ROLES.items():
        if role == "cost":
            cols.append(c[n])
        elif role.startswith("tiered:"):  # bytes on a tier compare only with the same tier
            tier = c[role.removeprefix("tiered:")]
            cols += [np.where(tier == t, c[n], 0.0) for t in np.unique(tier)]
        elif role == "equal":
            cols += [c[n], -c[n]]
    tail_on = np.any([c[n] > 0.0 for n in _TAIL], axis=0)
    cols.append(np.where(tail_on, -c["tail_hide"], off))
    cols.append(np.where(c["mem_bytes"] <= fit_bytes, off, c["mem_bytes"]))
    if metric_code == schema.FUSED_METRICS["flops_per_device"]:
        cols.append(c["n_devices"])
    # hiding: a dominator whose ring / all-gathers / tail hide under compute needs A's
    ring_on = (c["ring_overlap"] == 1.0) & ((c["ring_bytes"] > 0.0) | (c["ring_alpha_ns"] > 0.0))
    ovl_on = np.any([c[n] > 0.0 for n in _OVL], axis=0)
    hide_on = tail_on & (c["tail_hide"] > 0.0)
    for on, same in ((ring_on, ("f_core", "b_core")), (ovl_on, _WORK),
                     (hide_on, (*_WORK, *_OVL, "layer_mult"))):
        cols += [np.where(on, -c[n], off) for n in same]
    cols.append(np.where(hide_on, c["tail_hide"], off))
    from ..kernels.pareto import pareto_mask_sorted

    cols = [col for col in cols if col.min() != col.max()] + [valid.astype(np.float64)]
    # the columns with the most distinct values first: a comparison stops at the first
    # column where the frontier row is worse
    cols.sort(key=lambda col: -len(np.unique(col)))
    pts = np.stack(cols, axis=1)
    # visit rows by the sum of their scaled columns (a dominator's is no larger, in floating
    # point too), so the strong dominators join the frontier first and a dominated row
    # stops at one of them
    finite = np.where(np.isfinite(pts), np.abs(pts), 0.0).max(axis=0)
    total = np.sum(pts / np.where(finite > 0.0, finite, 1.0), axis=1)
    order = np.lexsort((valid, np.where(np.isnan(total), np.inf, total))).astype(np.int64)
    out[valid] = ~pareto_mask_sorted(pts, order) & ~np.isnan(pts).any(axis=1)  # NaN: kept
    return out


class _threads:
    """Run a kernel call single-threaded when it is small (the ``serial_below_points``
    option) or has one hardware row (the kernels parallelise over hardware rows)."""

    def __init__(self, n_hw: int, n_layouts: int) -> None:
        from ..options import OPTIONS

        self.serial = n_hw <= 1 or n_hw * n_layouts < OPTIONS["serial_below_points"]
        self.before = 0

    def __enter__(self) -> None:
        if self.serial:
            import numba

            self.before = numba.get_num_threads()
            numba.set_num_threads(1)

    def __exit__(self, *exc: object) -> None:
        if self.serial:
            import numba

            numba.set_num_threads(self.before)


def map_points(fn: Any, items: Sequence[Any], points_each: int, *,
               serial_each: bool | None = None) -> list[Any]:
    """``[fn(x) for x in items]``, the calls spread over threads when they are serial and
    many: each runs its kernels on one thread (``serial_each``; default: it has fewer
    than ``serial_below_points`` (hardware × layout) points, see :class:`_threads`) and
    together they have at least ``serial_below_points``. The kernels release the GIL, so
    a batch / s_kv sweep of small calls (the first stage of each point, then its second
    stage) uses every core instead of one. Results come in order and are identical (each
    call is the same serial computation); an exception is the first in order. Up to
    ``numba.get_num_threads()`` threads, only where numba's threading layer takes
    launches from several threads at once (``omp``, ``tbb``)."""
    from ..options import OPTIONS

    items = list(items)
    serial = OPTIONS["serial_below_points"]
    if serial_each is None:
        serial_each = points_each < serial
    if len(items) < 2 or not serial_each or points_each * len(items) < serial:
        return [fn(x) for x in items]
    import numba

    workers = min(len(items), numba.get_num_threads())
    if workers < 2 or not _concurrent_launches():
        return [fn(x) for x in items]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(workers, thread_name_prefix="simcore-points") as pool:
        return list(pool.map(fn, items))


@functools.cache
def _concurrent_launches() -> bool:
    """Whether numba's threading layer takes parallel launches from several threads at
    once (``omp`` and ``tbb`` do; ``workqueue`` aborts the process)."""
    import numba

    try:
        from numba.np.ufunc import parallel

        parallel._launch_threads()  # picks the layer (it is fixed from then on)
        return numba.threading_layer() in ("omp", "tbb")
    except Exception:  # noqa: BLE001 - another numba's internals: stay on one thread
        return False


def combine(coeffs: np.ndarray, hw: np.ndarray, eff: schema.EfficiencyParams
            ) -> dict[str, np.ndarray]:
    """Every output over ``hw`` rows (n, 6) × coefficient rows: name → (n_hw, n_layout)."""
    from ..kernels import inference

    hw = np.ascontiguousarray(hw, dtype=np.float64)
    with _threads(hw.shape[0], len(coeffs)):
        outs = inference.evaluate_grid(coeffs, hw, eff)
    return dict(zip(OUTPUT_NAMES, outs, strict=True))


def point_one(coeffs: np.ndarray, hw_row: np.ndarray, eff: schema.EfficiencyParams
              ) -> tuple[Any, ...]:
    """Every output of one coefficient record (``coeffs[0]``) on one hardware row, serially."""
    from ..kernels import inference

    return inference.point_one.public(coeffs, hw_row, eff)  # _numba.Kernel: its Python entry


def point_one_call(coeffs: np.ndarray, hw_row: np.ndarray, eff: schema.EfficiencyParams
                   ) -> Any:
    """:func:`point_one` for arguments of exactly these types, as a callable.

    The compiled entry point of that signature: calling it skips numba's type dispatch
    (working out each argument's type on every call: ~1.4 µs of a ~2 µs call), so pass
    it only arguments of the types given here (``simcore.predict`` keeps one per type
    key). Compiles or loads the kernel if needed; where numba's internals differ, the
    ordinary dispatcher.
    """
    from ..kernels import inference

    dispatcher = inference.point_one.public
    dispatcher(coeffs, hw_row, eff)  # compiled or loaded from the cache
    try:
        sig = tuple(dispatcher.typeof_pyval(a) for a in (coeffs, hw_row, eff))
        return dispatcher.overloads[sig].entry_point
    except Exception:  # noqa: BLE001 - another numba's internals: the ordinary call
        return dispatcher


def fused_metric(metric: str | Metric) -> tuple[Metric, int]:
    """Metric → (Metric, code understood by the fused kernel)."""
    m = get_metric(metric)
    if m.key not in schema.FUSED_METRICS:
        raise ValueError(
            f"the fused path reduces by {sorted(schema.FUSED_METRICS)} "
            f"(metrics latency, throughput, FLOPS_per_gpu); got {m.name!r}"
        )
    return m, schema.FUSED_METRICS[m.key]


def pareto_mask(points: np.ndarray) -> np.ndarray:
    """Non-dominated rows of an (n, k) array, every column minimised."""
    from ..kernels.pareto import pareto_mask as _mask

    return _mask(points)


def request_kernels() -> Any:
    """The request-level serving simulator, :mod:`simcore.kernels.requests` (its
    ``StepTables``, ``simulate_instance`` and ``kv_transfer_done``): the studies reach the
    kernels through the engine only."""
    from ..kernels import requests

    return requests


@dataclass(frozen=True)
class Prepared:
    """Validated specs and the per-layout coefficients, built once."""

    model: Model
    workload: Workload
    space: Space
    topology: Topology
    efficiency: Efficiency
    family: str
    knobs: dict[str, np.ndarray]
    layouts: np.ndarray
    coeffs: np.ndarray
    eff: schema.EfficiencyParams
    gpus: int | None = None
    exact_gpus: bool = False
    #: what the fused sweep visits, per (metric, smallest HBM, pruning): see ``_visit``
    _visits: dict[Any, Any] = field(default_factory=dict, init=False, repr=False,
                                    compare=False)

    # -- shapes and coordinates -----------------------------------------------------------
    @property
    def hw_shape(self) -> tuple[int, ...]:
        return tuple(len(self.knobs[k]) for k in HW_KNOBS)

    @property
    def n_hw(self) -> int:
        return math.prod(self.hw_shape)

    def layout_coords(self) -> dict[str, Any]:
        return {d: np.asarray(v, dtype=object if d in CHOICES else np.int64)
                for d, v in self.space.coords}

    def hw_coords(self) -> dict[str, np.ndarray]:
        return {k: self.knobs[k] for k in HW_KNOBS}

    def attrs(self) -> dict[str, Any]:
        w = self.workload
        return {
            "model": self.model.name,
            "mode": w.mode,
            "batch": w.batch,
            "s_q": w.s_q,
            "s_kv": w.s_kv,
            "family": self.family,
            "space": self.space.name,
            "n_system_devices": self.topology.n_devices,
            **({"gpus": self.gpus, "exact_gpus": int(self.exact_gpus)}
               if self.gpus is not None else {}),
            **({"moe_load_imbalance": float(w.moe_load_imbalance)}
               if getattr(self.model, "n_experts", 1) > 1 else {}),
            **{f"efficiency_{k}": v for k, v in vars(self.efficiency).items() if v is not None},
        }

    def hw_rows(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` of the flattened (C-order) hardware grid, shape (n, 6)."""
        if self.n_hw == 1:  # one hardware point (the common case): no index arithmetic
            return np.array([[self.knobs[k][0] for k in HW_KNOBS]])[start:stop]
        idx = np.unravel_index(np.arange(start, stop), self.hw_shape)
        return np.stack([self.knobs[k][i] for k, i in zip(HW_KNOBS, idx, strict=True)], axis=1)

    # -- labelled operations --------------------------------------------------------------
    def column(self, name: str) -> np.ndarray:
        """A per-layout coefficient (``"mem_bytes"``, ``"valid"``, ...) as a flat array."""
        names = schema.COEF_DTYPE.names or ()
        if name not in names:
            raise KeyError(f"no coefficient {name!r}; known: {', '.join(names)}")
        return self.coeffs[name]

    @property
    def valid(self) -> np.ndarray:
        """Per layout: a legal combination for this model and system."""
        return self.coeffs["valid"] == 1.0

    def layout_values(self) -> dict[str, np.ndarray]:
        """The per-layout outputs (:data:`LAYOUT_OUTPUTS`) as ``evaluate`` reports them,
        flat: ``valid`` bool, ``n_devices`` int64, the memory (``mem_bytes`` and its
        parts) NaN where the layout is not valid, anything else as the coefficient."""
        valid = self.valid
        out: dict[str, np.ndarray] = {}
        for name in LAYOUT_OUTPUTS:
            col = self.column(name)
            if name == "valid":
                out[name] = valid
            elif name == "n_devices":
                out[name] = col.astype(np.int64)
            elif name in ("mem_bytes", *MEM_PARTS):
                out[name] = np.where(valid, col, np.nan)
            else:
                out[name] = col
        return out

    def combine(self, hw: np.ndarray) -> dict[str, np.ndarray]:
        """Every output over hardware rows ``hw`` (n, 6) × all layouts."""
        return combine(self.coeffs, hw, self.eff)

    def _one_row(self, hw_row: np.ndarray) -> dict[str, np.ndarray]:
        """Every output of every layout at one hardware row, serially: ``point_one`` per
        valid layout (no parallel kernel to load or compile), NaN outputs and ``fits``
        False for the others, as the kernels give them."""
        n = len(self.coeffs)
        outs = {k: (np.zeros(n, dtype=bool) if k == "fits" else np.full(n, np.nan))
                for k in OUTPUT_NAMES}
        cols = list(outs.values())
        hw_row = _readonly(hw_row)  # the type predict passes: one specialisation to compile
        for j in np.flatnonzero(self.valid):
            for col, v in zip(cols, point_one(self.coeffs[j:j + 1], hw_row, self.eff),
                              strict=True):
                col[j] = v
        return outs

    def top_rows(self, metric: str | Metric = "latency", n: int = 10
                 ) -> tuple[list[dict[str, Any]], int]:
        """The ``n`` metric-best fitting layouts at a one-point hardware grid, best first,
        and how many layouts fit there.

        The rows are those of :func:`simcore.engine.metrics.top_points` over ``evaluate(...)``
        at that point — every knob and layout coordinate, every output and per-layout
        output, as Python scalars, in the same stable order (a tie keeps layout order) —
        computed by the serial kernel per valid layout, without building a Dataset
        (``simcore evaluate``).
        """
        if self.n_hw != 1:
            raise ValueError(f"top_rows needs a single hardware point, got {self.n_hw}; "
                             "use simcore.engine.metrics.top_points on simcore.evaluate(...)")
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        m, _ = fused_metric(metric)
        outs = self._one_row(self.hw_rows(0, 1)[0])
        val = outs[m.key]
        ok = outs["fits"] & ~np.isnan(val)
        order = np.argsort(np.where(ok, val * m.sign, np.inf), kind="stable")
        n_fit = int(np.count_nonzero(ok))
        per_layout = {**outs, **self.layout_values()}
        coords = self.layout_coords()
        knobs = {k: self.knobs[k][0].item() for k in HW_KNOBS}
        rows = []
        for flat in order[:min(n, n_fit)]:
            at = np.unravel_index(int(flat), self.space.shape)
            row: dict[str, Any] = dict(knobs)
            for (d, values), i in zip(coords.items(), at, strict=True):
                v = values[i]
                row[d] = v.item() if hasattr(v, "item") else v
            row.update({k: v[flat].item() for k, v in per_layout.items()})
            rows.append(row)
        return rows, n_fit

    def fitting_devices(self, *, budget: bool = True) -> np.ndarray:
        """Device counts (ascending) of the layouts that fit at the most generous point of
        the hardware grid (every knob at its largest value; more of a knob never un-fits):
        the layouts within the budget, or with ``budget=False`` every layout."""
        coeffs = self.coeffs
        if not budget and self.gpus is not None:
            coeffs = space_coeffs(self.layouts, self.model, self.workload, self.topology)
        coeffs = coeffs[coeffs["valid"] == 1.0]
        if not len(coeffs):
            return np.zeros(0, dtype=np.int64)
        row = np.array([[float(self.knobs[k].max()) for k in HW_KNOBS]])
        fits = combine(coeffs, row, self.eff)["fits"][0]
        return np.unique(coeffs["n_devices"][fits]).astype(np.int64)

    def _fit_limit(self, hbm_gb: float) -> float:
        """The memory that fits ``hbm_gb`` of HBM, as the kernel's ``fits`` computes it."""
        return float(np.float64(hbm_gb) * 1e9 * self.eff.hbm_usable)

    def _visit(self, code: int, hbm_gb: float, prune: bool | None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(live indices, their coefficient rows, pruned indices, pruned memory sorted),
        cached per (metric, smallest HBM, pruning)."""
        from ..options import OPTIONS

        valid = self.valid
        if prune is None:  # worth it only in a large sweep
            n_points = self.n_hw * int(np.count_nonzero(valid))
            prune = bool(OPTIONS["prune_dominated"]) and n_points >= OPTIONS["prune_min_points"]
        prune = bool(prune)
        key = (code, float(hbm_gb) if prune else None)
        got = self._visits.get(key)
        if got is None:
            skip = (dominated(self.coeffs, code, self._fit_limit(hbm_gb), self.eff) if prune
                    else np.zeros(len(valid), dtype=bool))
            live, pruned = np.flatnonzero(valid & ~skip), np.flatnonzero(skip)
            got = (live, self.coeffs[live], pruned, np.sort(self.coeffs["mem_bytes"][pruned]))
            self._visits[key] = got
        return got

    def live_layouts(self, metric: str | Metric = "latency", *, hbm_gb: float | None = None,
                     prune: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The layouts the fused sweep visits, and the valid ones it skips as dominated
        (ascending indices).

        Only valid layouts are visited (not valid: illegal, a repeat of an earlier
        configuration, outside the budget). With pruning (the ``prune_dominated``
        option, or ``prune``) a layout that an earlier one beats or ties at every
        hardware point with at least ``hbm_gb`` of HBM (default: the grid's smallest) is
        skipped too (:func:`dominated`).
        """
        _, code = fused_metric(metric)
        hbm = float(self.knobs["pe_hbm_gb"].min()) if hbm_gb is None else float(hbm_gb)
        live, _, pruned, _ = self._visit(code, hbm, prune)
        return live, pruned

    def best(self, hw: np.ndarray, metric: str | Metric = "latency", *,
             prune: bool | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per hardware row: (index of the metric-best fitting layout or -1, its
        :data:`N_BEST` outputs (NaN where nothing fits), the number of fitting layouts).

        The kernel visits only :meth:`live_layouts` (valid, and not dominated at these
        rows' HBM); winners, values and fitting counts are those over every layout."""
        from ..kernels import inference

        m, code = fused_metric(metric)
        hw = np.ascontiguousarray(hw, dtype=np.float64)
        hbm_col = hw[:, HW_KNOBS.index("pe_hbm_gb")]
        hbm = float(self.knobs["pe_hbm_gb"].min())
        if len(hw):
            hbm = min(hbm, float(hbm_col.min()))
        live, table, _, pruned_mem = self._visit(code, hbm, prune)
        with _threads(hw.shape[0], len(table)):
            idx, vals, n_fit = inference.fused_best(table, hw, self.eff, code, float(m.sign))
        idx = np.where(idx >= 0, live[np.maximum(idx, 0)], -1) if len(live) else idx
        if len(pruned_mem):  # the skipped layouts still count where they fit
            n_fit = n_fit + np.searchsorted(pruned_mem, hbm_col * 1e9 * self.eff.hbm_usable,
                                            side="right")
        return idx, vals, n_fit

    def best_chunk(self, start: int, stop: int, metric: str | Metric = "latency"
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`best` over rows ``start:stop`` of the hardware grid."""
        return self.best(self.hw_rows(start, stop), metric)

    def doubling(self, hardware: Hardware, metric: str | Metric = "latency"
                 ) -> tuple[np.ndarray, np.ndarray] | None:
        """The chosen metric of the best layout at ``hardware`` and with each knob doubled.

        Returns ``(values, latency_ns)``, each of length 7 (baseline, then one per knob in
        :data:`~simcore.model.specs.HW_KNOBS` order), or ``None`` if nothing fits at ``hardware``.
        """
        m, _ = fused_metric(metric)
        base = np.array([hardware.as_dict()[kn] for kn in HW_KNOBS])
        rows = np.tile(base, (len(HW_KNOBS) + 1, 1))
        for j in range(len(HW_KNOBS)):
            rows[j + 1, j] *= 2.0
        idx, vals, _ = self.best(rows, m)
        if idx[0] < 0:
            return None
        return vals[:, OUTPUT_NAMES.index(m.key)], vals[:, 0]


def prepare(
    model: Model | str,
    workload: Workload,
    *,
    space: str | Space | Mapping[str, Sequence[Any]] | None = "reduced",
    hardware: Hardware | Mapping[str, Any] | None = None,
    family: str | HardwareFamily | None = None,
    efficiency: Efficiency | None = None,
    gpus: int | None = None,
    exact_gpus: bool = False,
) -> Prepared:
    """Validate inputs and compute the per-layout coefficients (cheap, eager): the
    layouts repeating an earlier one's physical configuration and, with ``gpus``, those
    outside the device budget are masked (:func:`space_coeffs`)."""
    gpus, exact_gpus = check_gpus(gpus, exact_gpus)
    model = get_model(model)
    if not isinstance(workload, Workload):
        raise ValueError(f"workload must be a simcore.Workload, got {type(workload).__name__}")
    _api_compile_notice(workload.mode)
    fam = get_family(family)
    if hardware is None:
        hardware = fam.hardware
    knobs = hardware_grid(hardware)
    sp = _get_space(space, workload.mode, gpus, model.n_experts)
    eff = _default_efficiency() if efficiency is None else efficiency
    layouts, canonical = _space_table(sp)
    coeffs = space_coeffs(layouts, model, workload, fam.topology, gpus, exact_gpus, canonical)
    return Prepared(model, workload, sp, fam.topology, eff, fam.name, knobs, layouts, coeffs,
                    _packed_efficiency(eff, workload.mode == "train", fam.topology.hbm_ratio),
                    gpus, exact_gpus)


@functools.cache
def _default_efficiency() -> Efficiency:
    """``Efficiency()``, built once (a frozen spec: safe to share)."""
    return Efficiency()


@functools.lru_cache(maxsize=64)
def _packed_efficiency(eff: Efficiency, train: bool, hbm_ratio: float = 1.0
                       ) -> schema.EfficiencyParams:
    return schema.pack_efficiency(eff, train=train, hbm_ratio=hbm_ratio)


@functools.lru_cache(maxsize=64)
def _space_of(items: Any, named: Any, mode: str, gpus: int | None = None,
              experts: int = 1) -> Space:
    if items is None:
        return get_space(named, mode, gpus, experts)
    return get_space({k: tuple(v for _, v in vals) for k, vals in items}, mode)


def _get_space(space: Any, mode: str, gpus: int | None = None, experts: int = 1) -> Space:
    """:func:`~simcore.engine.space.get_space`, cached per (space, mode, gpus, experts): a
    mapping by its items with each value's type (so ``4`` and ``4.0`` stay apart); anything
    unhashable, or a mapping whose values are not sequences, goes to ``get_space`` as it
    is."""
    if isinstance(space, Space):
        return space
    try:
        if isinstance(space, Mapping):
            items = tuple((k, tuple((type(v), v) for v in vals)) for k, vals in space.items())
            return _space_of(items, None, mode)
        return _space_of(None, space, mode, gpus, experts)
    except TypeError:
        return get_space(space, mode, gpus, experts)


def _counts(sizes: np.ndarray, most: int = 12) -> str:
    shown = ", ".join(str(int(n)) for n in sizes[:most])
    return shown + (", ..." if len(sizes) > most else "")


def check_budget(preps: Sequence[Prepared]) -> None:
    """Refuse a device budget on which nothing fits.

    ``preps`` are the prepared points of one sweep (one per workload point), all with the
    same budget. When no layout within it fits at any of them (at the grid's most
    generous hardware point) but some layout outside it does, raise a
    :class:`~simcore.errors.DeviceBudgetError` saying the smallest device count that
    fits. Without a budget, or when nothing fits at any device count (the same result as
    without a budget: ``fits`` False everywhere), return quietly.
    """
    p0 = preps[0]
    if p0.gpus is None or any(p.fitting_devices().size for p in preps):
        return
    fitting = np.unique(np.concatenate([p.fitting_devices(budget=False) for p in preps]))
    if not fitting.size:
        return
    w = p0.workload
    what = (f"{p0.model.name} ({w.mode}, batch {w.batch}, s_kv {w.s_kv})" if len(preps) == 1
            else f"{p0.model.name} ({w.mode}, at any of the {len(preps)} batch/s_kv points)")
    n = int(fitting[0])
    devices = f"{p0.gpus} device{'s' if p0.gpus > 1 else ''}"
    if p0.exact_gpus:
        tail = (f"device counts that fit: {_counts(fitting)}; pass one of them as the "
                f"budget (or drop exact_gpus for at most {p0.gpus})" if n < p0.gpus else
                f"the smallest device count that fits is {n}; pass a budget of at least {n}")
        msg = f"{what}: no layout of exactly {devices} fits on {p0.family}; {tail}"
    else:
        msg = (f"{what}: no layout of at most {devices} fits on {p0.family}; the "
               f"smallest device count that fits is {n}; pass a budget of at least {n}")
    raise DeviceBudgetError(msg, gpus=p0.gpus, exact=p0.exact_gpus,
                            fitting=tuple(int(x) for x in fitting))


@dataclass(frozen=True)
class CoeffRecipe:
    """What a dask block needs to rebuild the coefficients: a compact layout table and
    the specs (~0.5 MB for the full space instead of the 8 MB coefficient table, so task
    graphs stay small whatever the space)."""

    layouts: np.ndarray
    model: Model
    workload: Workload
    topology: Topology
    gpus: int | None = None
    exact_gpus: bool = False

    @classmethod
    def of(cls, p: Prepared) -> CoeffRecipe:
        small = np.int16 if int(p.layouts.max(initial=0)) < 2**15 else np.int64
        return cls(p.layouts.astype(small), p.model, p.workload, p.topology, p.gpus,
                   p.exact_gpus)

    def coeffs(self) -> np.ndarray:
        return space_coeffs(self.layouts, self.model, self.workload, self.topology, self.gpus,
                            self.exact_gpus)


def grid_block(coeffs: np.ndarray | CoeffRecipe, eff: schema.EfficiencyParams,
               layout_shape: tuple[int, ...], *knob_blocks: np.ndarray) -> tuple[np.ndarray, ...]:
    """One block of the full tensor: broadcast knob blocks → every output, shaped
    (knob block shape) + ``layout_shape`` (the ``xr.apply_ufunc`` callback)."""
    if isinstance(coeffs, CoeffRecipe):
        coeffs = coeffs.coeffs()
    arrs = np.broadcast_arrays(*knob_blocks)
    shape = arrs[0].shape
    hw = np.stack([np.ascontiguousarray(a).ravel() for a in arrs], axis=1).astype(np.float64)
    outs = combine(coeffs, hw, eff)
    return tuple(outs[n].reshape(shape + layout_shape) for n in OUTPUT_NAMES)
