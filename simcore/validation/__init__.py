"""Validation of simcore against public measurements of real LLM training and inference.

A simulator is only worth what its numbers are worth. :data:`MEASUREMENTS` holds published
measurements (Megatron-LM training on A100 clusters; TensorRT-LLM, lmdeploy and
FasterTransformer inference on A100s), each with the model, hardware, parallel layout,
workload, measured value and its source. :func:`predict` reproduces one with
:func:`simcore.evaluate` on exactly the measured layout; :func:`validate` compares them
all, with the efficiency factors :data:`FITTED_EFFICIENCY` fitted once for all points
together (see :mod:`simcore.validation.fitted` for how).

The goal: mean absolute percentage error ≤ :data:`MEAN_ERROR_THRESHOLD` (10%) and no point
beyond :data:`POINT_ERROR_THRESHOLD` (25%). ``simcore validate`` prints the table.

Examples
--------
>>> from simcore.validation import MEASUREMENTS, validate, mean_abs_error
>>> rows = validate()
>>> len(rows) == len(MEASUREMENTS)
True
>>> round(100 * mean_abs_error(rows), 1)  # in sample, every point fitted
7.7
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..model.specs import Efficiency
from .data import MEASUREMENTS as _FIRST_24
from .data import UNMODELLED
from .data_infer import INFER_MEASUREMENTS, whole_run
from .data_moe import MOE_MEASUREMENTS, is_moe
from .data_train import TRAIN_MEASUREMENTS
from .fitted import FITTED_EFFICIENCY
from .holdout import holdout_rows, holdout_summary
from .points import KINDS, METRICS, Measurement, evaluate_point, megatron_flops_per_step, predict

__all__ = [
    "FITTED_EFFICIENCY",
    "KINDS",
    "MEAN_ERROR_THRESHOLD",
    "MEASUREMENTS",
    "METRICS",
    "POINT_ERROR_THRESHOLD",
    "UNMODELLED",
    "Measurement",
    "ValidationRow",
    "breakdown",
    "generation",
    "get_measurement",
    "holdout_rows",
    "holdout_summary",
    "max_abs_error",
    "mean_abs_error",
    "megatron_flops_per_step",
    "moe_rows",
    "predict",
    "validate",
    "validate_memory",
    "whole_run",
    "MemoryRow",
]

#: Every measurement simcore is validated against: the first 24 (``data.py``), the
#: training set (``data_train.py``), the inference set (``data_infer.py``) and the MoE
#: serving set (``data_moe.py``: expert / attention-data parallelism, MLA models).
MEASUREMENTS: tuple[Measurement, ...] = (*_FIRST_24, *TRAIN_MEASUREMENTS, *INFER_MEASUREMENTS,
                                         *MOE_MEASUREMENTS)

#: Target mean absolute percentage error over all points (peers: Calculon ~3.7%,
#: LLMCompass ~4.1%, GenZ ~5.8% geomean).
MEAN_ERROR_THRESHOLD = 0.10
#: No single point may err by more than this.
POINT_ERROR_THRESHOLD = 0.25


@dataclass(frozen=True)
class ValidationRow:
    """One measurement next to simcore's prediction.

    ``error`` is signed and relative: ``predicted / measured - 1`` (``+0.05`` = simcore
    predicts 5% more than was measured — slower for a latency, faster for a TFLOP/s).
    """

    id: str
    kind: str
    model: str
    hardware: str
    layout: str
    measured: float
    predicted: float
    unit: str
    error: float
    fits: bool
    source: str

    @property
    def abs_error(self) -> float:
        return abs(self.error)


@dataclass(frozen=True)
class MemoryRow:
    """A run's reported peak memory per GPU next to simcore's predicted memory.

    ``error`` = ``predicted / measured - 1``. Reported peaks are the framework's peak
    *reserved* memory (caching-allocator blocks, temporaries such as fp32 logits during
    the loss, communication buffers), so a prediction of the live model states and
    activations is expected to come out somewhat below.
    """

    id: str
    model: str
    layout: str
    measured_gib: float
    predicted_gib: float
    capacity_gib: float
    error: float
    source: str


def validate_memory(points: Iterable[Measurement] | None = None, *,
                    efficiency: Efficiency | None = None) -> list[MemoryRow]:
    """Predicted memory per GPU for every measurement that reports its peak memory.

    Examples
    --------
    >>> rows = validate_memory()
    >>> len(rows) >= 20 and all(r.predicted_gib > 0 for r in rows)
    True
    """
    from ..engine.evaluate import evaluate

    eff = FITTED_EFFICIENCY if efficiency is None else efficiency
    out = []
    for m in (MEASUREMENTS if points is None else points):
        if m.measured_mem_gib is None:
            continue
        ds = evaluate(m.model, m.workload, space=m.space, family=m.family, efficiency=eff)
        pred = float(ds.mem_bytes.values.ravel()[0]) / 2**30
        out.append(MemoryRow(m.id, m.model.name, m.layout_label, m.measured_mem_gib, pred,
                             m.family.hardware.pe_hbm_gb * 1e9 / 2**30,
                             pred / m.measured_mem_gib - 1.0, m.ref))
    return out


def get_measurement(id: str) -> Measurement:
    """The measurement with this id (from :data:`MEASUREMENTS` or :data:`UNMODELLED`).

    Examples
    --------
    >>> get_measurement("korthikanti-175b-full").measured
    18.13
    """
    for m in (*MEASUREMENTS, *UNMODELLED):
        if m.id == id:
            return m
    raise ValueError(f"no measurement {id!r}; pass one of {[m.id for m in MEASUREMENTS]}")


def validate(
    points: Iterable[Measurement] | None = None,
    *,
    efficiency: Efficiency | None = None,
    kinds: Sequence[str] | None = None,
) -> list[ValidationRow]:
    """Predict every measurement and compare.

    Parameters
    ----------
    points : iterable of Measurement, optional
        Default :data:`MEASUREMENTS`.
    efficiency : Efficiency, optional
        Default :data:`FITTED_EFFICIENCY`.
    kinds : sequence of {"train", "prefill", "decode"}, optional
        Keep only these kinds.

    Returns
    -------
    list of ValidationRow
        In the order of ``points``.

    Examples
    --------
    >>> rows = validate(kinds=["decode"])
    >>> {r.kind for r in rows}
    {'decode'}
    """
    pts = list(MEASUREMENTS if points is None else points)
    eff = FITTED_EFFICIENCY if efficiency is None else efficiency
    if not isinstance(eff, Efficiency):
        raise ValueError(f"efficiency must be a simcore.Efficiency, got {type(eff).__name__}")
    if kinds is not None:
        kinds = list(kinds)
        bad = [k for k in kinds if k not in KINDS]
        if bad:
            raise ValueError(f"unknown kinds {bad}; pass some of {list(KINDS)}")
        pts = [p for p in pts if p.kind in kinds]
    rows = []
    for p in pts:
        if not isinstance(p, Measurement):
            raise ValueError(f"validate takes Measurement objects, got {type(p).__name__}")
        latency_ns, fits = evaluate_point(p, eff)
        pred = p.from_latency_ns(latency_ns)
        rows.append(ValidationRow(p.id, p.kind, p.model.name, p.family.name, p.layout_label,
                                  float(p.measured), pred, p.unit, pred / p.measured - 1.0, fits,
                                  p.source))
    return rows


def generation(family: str) -> str:
    """Hardware generation of a family name: ``"A100-80G"`` → ``"A100"``."""
    return family.split("-")[0]


def breakdown(rows: Sequence[ValidationRow], *, sources: Mapping[str, str] | None = None
              ) -> dict[str, dict[str, tuple[float, int]]]:
    """Mean absolute error and count per kind, per source and per hardware generation.

    ``sources`` maps a point id to its source label (default: the measurement's short
    ``ref``, so that all rows of one table count as one source; the row's ``source``
    for points that are not in :data:`MEASUREMENTS` or :data:`UNMODELLED`).

    Examples
    --------
    >>> b = breakdown(validate())
    >>> sorted(b)
    ['hardware', 'kind', 'source']
    >>> b["source"]["llama3_paper"][1]  # one source, however many table rows it cites
    3
    """
    out: dict[str, dict[str, list[float]]] = {"kind": {}, "source": {}, "hardware": {}}
    if sources is None:
        sources = {m.id: m.ref for m in (*MEASUREMENTS, *UNMODELLED)}
    for r in rows:
        src = sources.get(r.id, r.source)
        for key, label in (("kind", r.kind), ("source", src), ("hardware", generation(r.hardware))):
            out[key].setdefault(label, []).append(r.abs_error)
    return {k: {lab: (sum(v) / len(v), len(v)) for lab, v in d.items()} for k, d in out.items()}


def moe_rows(rows: Sequence[ValidationRow]) -> list[ValidationRow]:
    """The rows of mixture-of-experts points (any source: ``data_moe``, ``data_infer``).

    Examples
    --------
    >>> rows = moe_rows(validate(kinds=["decode"]))
    >>> len(rows) >= 15 and all(get_measurement(r.id).model.n_experts > 1 for r in rows)
    True
    """
    return [r for r in rows if is_moe(get_measurement(r.id))]


def mean_abs_error(rows: Sequence[ValidationRow]) -> float:
    """Mean absolute percentage error of validation rows, as a fraction (0.05 = 5%)."""
    if not rows:
        raise ValueError("mean_abs_error needs at least one row; pass validate()")
    return sum(r.abs_error for r in rows) / len(rows)


def max_abs_error(rows: Sequence[ValidationRow]) -> float:
    """Largest absolute relative error of validation rows, as a fraction."""
    if not rows:
        raise ValueError("max_abs_error needs at least one row; pass validate()")
    return max(r.abs_error for r in rows)
