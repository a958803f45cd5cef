"""Fit the :class:`~simcore.model.specs.Efficiency` factors to the measurements, and check them
out of sample (leave one source out).

The fitted values live as constants in :mod:`simcore.validation.fitted`; this module is
how they were obtained and how to redo it after the cost model changes::

    python -m simcore.validation.fit

Method: one :class:`~simcore.model.specs.Efficiency` for all points together (at most
:data:`MAX_FACTORS` factors, never per point). Every point is prepared once (the
coefficients do not depend on the efficiency) and re-combined with candidate factors by
the engine's own kernel: all training points in one call, all inference points in
another, so a candidate costs about a millisecond. The objective is the mean absolute
percentage error. The search is a coordinate pattern search inside each factor's
declared range (:data:`FACTORS`): fractions move in steps from 0.05 down to 0.001, times
in relative steps from 50% down to 0.1%, from the base values, restarted from the best
point until no step improves. Factors that move no prediction keep their base value.

:func:`leave_one_source_out` refits without each source in turn and predicts that
source with the refitted factors: the honest error for data simcore was not fitted to.
Each refit starts from :data:`NEUTRAL_START` (every fitted factor at the middle of its
declared range), never from the all-data optimum, which already saw the held-out source.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..model.specs import Efficiency
from .points import Measurement, run_steps

__all__ = ["FACTORS", "MAX_FACTORS", "NEUTRAL_START", "FitResult", "LosoResult",
           "fast_predictor", "fit_efficiency", "leave_one_source_out", "source_of"]

#: At most this many factors are fitted, for all points together.
MAX_FACTORS = 10

#: Fittable factors → (kind, low, high): ``"fraction"`` factors are achievable fractions
#: of a peak, ``"time"`` factors fixed costs in ns. Not here: ``hbm_usable`` only decides
#: memory fit and is fixed at 0.90; ``network_inter`` is held at 0.95, the top of its
#: range (0.20-0.95), where every fit that had it free put it, all points and each
#: leave-one-source-out refit alike; ``network_sip`` follows it (both are the scale-out
#: network on GPU clusters); ``step_overhead_ns`` (the framework's floor per inference
#: step) is held at 0, its lower bound, where every fit since the per-launch and
#: per-sequence costs joined put it; ``comm_contention`` is held at 0.15, Calculon's
#: processor usage of NVLink (see :mod:`simcore.validation.fitted`); ``memory`` (0.8416)
#: and ``op_latency_ns`` (3,923 ns) are held at the medians of the silicon GEMV tables of
#: aiconfigurator (a measurement, never a fit), which frees the slot of ``train_memory``,
#: the HBM factor of training steps. The inference
#: ``attention`` factor is fitted since the long-context whole runs (Qwen2.5 speed,
#: 30K-129K tokens) joined: before them it sat at its upper bound and followed ``compute``.
FACTORS: dict[str, tuple[str, float, float]] = {
    "compute": ("fraction", 0.30, 0.95),
    "network": ("fraction", 0.20, 0.95),
    "train_compute": ("fraction", 0.30, 0.95),
    "train_memory": ("fraction", 0.30, 0.95),
    "train_attention": ("fraction", 0.20, 0.95),
    "attention": ("fraction", 0.20, 0.95),
    "lowp_compute": ("fraction", 0.20, 0.95),
    "roofline_overlap": ("fraction", 0.0, 1.0),
    "seq_overhead_ns": ("time", 0.0, 100_000.0),
}


#: The neutral start of the leave-one-source-out refits: every factor of :data:`FACTORS`
#: at the middle of its declared range (fractions 0.5-0.625, ``seq_overhead_ns`` 50 us),
#: derived from the ranges alone, so no value in it was read off a fit; the held factors
#: (``memory``, ``op_latency_ns``, ``hbm_usable``, ``network_inter``, ``network_sip``,
#: ``step_overhead_ns``, ``comm_contention``) keep their held values, as in every fit.
#: A refit from here knows nothing of the source it leaves out; one from the all-data
#: optimum (``start="fitted"``) starts where that source already pulled the factors.
NEUTRAL_START: Efficiency = replace(
    Efficiency(), **{n: (lo + hi) / 2 for n, (_, lo, hi) in FACTORS.items()})


@dataclass(frozen=True)
class FitResult:
    """Outcome of :func:`fit_efficiency`."""

    efficiency: Efficiency
    mean_abs_error: float
    max_abs_error: float
    fitted: tuple[str, ...]
    n_points: int


def source_of(point: Measurement) -> str:
    """The source a point is grouped by for leave-one-source-out (its short ``ref``)."""
    return point.ref


def fast_predictor(points: Sequence[Measurement]) -> Callable[..., Any]:
    """A function efficiency → predictions (each in its point's unit), for many candidates.

    Identical numerics to :func:`simcore.validation.predict` (same coefficients, same
    kernel), without rebuilding the labelled Dataset per call. ``run(eff, fits=True)``
    returns (predictions, whether every step of each point's run fits in memory).
    """
    from ..engine.core import combine, pack_efficiency, prepare

    # one row per step of each point's run (run_steps); a point's latency is the
    # weighted sum of its rows. Rows are grouped by (training or not, hardware row), so
    # each group is one kernel call over its layouts on its one hardware point.
    groups: dict[tuple[bool, float, bytes], list[tuple[int, float, np.ndarray, np.ndarray]]] = {}
    for i, pt in enumerate(points):
        for wl, weight in run_steps(pt):
            p = prepare(pt.model, wl, space=pt.space_for(wl.mode), family=pt.family)
            if not p.valid[0]:
                raise ValueError(f"measurement {pt.id!r}: layout {pt.layout_label} is invalid "
                                 f"in simcore for {pt.model.name}")
            hw = np.ascontiguousarray(p.hw_rows(0, 1), dtype=np.float64)
            key = (wl.mode == "train", p.topology.hbm_ratio, hw.tobytes())
            groups.setdefault(key, []).append((i, float(weight), p.coeffs[:1], hw))
    packed = []
    for (train, hbm_ratio, _), rows in groups.items():
        idx = np.array([r[0] for r in rows])
        weights = np.array([r[1] for r in rows])
        coeffs = np.concatenate([r[2] for r in rows])
        packed.append((train, hbm_ratio, idx, weights, coeffs, rows[0][3]))
    n = len(points)

    def run(eff: Efficiency, *, fits: bool = False) -> Any:
        lat = np.zeros(n)
        fit = np.ones(n, dtype=bool)
        for train, hbm_ratio, idx, weights, coeffs, hw in packed:
            out = combine(coeffs, hw, pack_efficiency(eff, train=train, hbm_ratio=hbm_ratio))
            np.add.at(lat, idx, weights * out["latency_ns"][0])  # the group's rows on its hardware
            if fits:
                np.logical_and.at(fit, idx, out["fits"][0])
        values = np.array([pt.from_latency_ns(float(v)) for pt, v in zip(points, lat, strict=True)])
        return (values, fit) if fits else values

    return run


def _errors(pred: np.ndarray, measured: np.ndarray) -> np.ndarray:
    return np.abs(pred / measured - 1.0)


def _value(eff: Efficiency, name: str) -> float:
    v = getattr(eff, name)
    if v is None:  # an unset factor starts from the one it falls back to
        v = getattr(eff, {"train_attention": "train_compute", "lowp_compute": "compute",
                         "attention": "compute"}[name])
    return float(v)


def fit_efficiency(
    points: Sequence[Measurement],
    *,
    base: Efficiency | None = None,
    fixed: Sequence[str] = (),
    factors: Sequence[str] | None = None,
    bounds: tuple[float, float] | None = None,
    coarse_step: float = 0.05,
    fine_step: float = 0.001,
) -> FitResult:
    """The single :class:`Efficiency` minimising the mean absolute percentage error.

    Parameters
    ----------
    points : sequence of Measurement
        Usually :data:`simcore.validation.MEASUREMENTS`.
    base : Efficiency, optional
        Start values, and the values kept for factors that are fixed or move nothing.
    fixed : sequence of str
        Factors held at their ``base`` value.
    factors : sequence of str, optional
        The candidates to fit (default all of :data:`FACTORS`); at most
        :data:`MAX_FACTORS` of them end up fitted.
    bounds : (low, high), optional
        Override the range of every fraction factor.
    coarse_step, fine_step : float
        First and last step of the fraction search (time factors use the same ratio of
        relative steps).

    Returns
    -------
    FitResult
    """
    if not points:
        raise ValueError("fit_efficiency needs at least one measurement; pass MEASUREMENTS")
    if bounds is not None and not 0.0 < bounds[0] < bounds[1] <= 1.0:
        raise ValueError(f"bounds must satisfy 0 < low < high <= 1, got {bounds!r}")
    names = list(FACTORS if factors is None else factors)
    unknown = sorted((set(fixed) | set(names)) - set(FACTORS))
    if unknown:
        raise ValueError(f"factors {unknown} are unknown; pass some of {list(FACTORS)}")
    base = base or Efficiency()
    run = fast_predictor(points)
    measured = np.array([p.measured for p in points])
    ranges = {n: (FACTORS[n][1], FACTORS[n][2]) if bounds is None or FACTORS[n][0] == "time"
              else bounds for n in names}

    # which factors move a prediction at all
    ref = run(base)
    active: list[str] = []
    for n in names:
        if n in fixed:
            continue
        lo, hi = ranges[n]
        v = _value(base, n)
        probe = replace(base, **{n: lo if v > (lo + hi) / 2 else hi})
        if not np.allclose(run(probe), ref, rtol=1e-12, atol=0.0):
            active.append(n)
    if len(active) > MAX_FACTORS:
        raise ValueError(f"{len(active)} factors move a prediction; fix some so at most "
                         f"{MAX_FACTORS} are fitted")

    def clip(n: str, v: float) -> float:
        lo, hi = ranges[n]
        return float(min(hi, max(lo, v)))

    def make(values: Sequence[float]) -> Efficiency:
        return replace(base, **dict(zip(active, values, strict=True)))

    def objective(values: Sequence[float]) -> float:
        return float(_errors(run(make(values)), measured).mean())

    best_v = [clip(n, _value(base, n)) for n in active]
    for i, n in enumerate(active):  # time factors need a non-zero start to move relatively
        if FACTORS[n][0] == "time" and best_v[i] == 0.0:
            best_v[i] = clip(n, 0.01 * ranges[n][1])
    best = objective(best_v)
    step = coarse_step
    while step >= fine_step - 1e-12:
        improved = True
        while improved:
            improved = False
            for i, n in enumerate(active):
                for sign in (-1.0, 1.0):
                    cand = list(best_v)
                    if FACTORS[n][0] == "time":
                        cand[i] = clip(n, cand[i] * (1.0 + sign * 10.0 * step))
                    else:
                        cand[i] = clip(n, round(cand[i] + sign * step, 6))
                    val = objective(cand)
                    if val < best - 1e-12:
                        best, best_v, improved = val, cand, True
        step /= 2
    rounded = [round(v, 3) if FACTORS[n][0] == "fraction" else float(round(v))
               for n, v in zip(active, best_v, strict=True)]
    eff = make(rounded)
    errs = _errors(run(eff), measured)
    return FitResult(eff, float(errs.mean()), float(errs.max()), tuple(active), len(points))


@dataclass(frozen=True)
class LosoResult:
    """Leave-one-source-out: each source predicted by factors fitted without it.

    ``predicted[id]`` is the out-of-sample prediction of each point; ``by_source`` maps a
    source to its mean absolute error and the factors fitted without it.
    """

    predicted: Mapping[str, float]
    errors: Mapping[str, float]
    by_source: Mapping[str, tuple[float, Efficiency]]

    @property
    def mean_abs_error(self) -> float:
        return float(np.mean([abs(e) for e in self.errors.values()]))


def leave_one_source_out(points: Sequence[Measurement], *,
                         start: str | Efficiency = "neutral",
                         **fit_kw: object) -> LosoResult:
    """Refit without each source and predict that source (see :func:`fit_efficiency`).

    Parameters
    ----------
    points : sequence of Measurement
        Usually :data:`simcore.validation.MEASUREMENTS`.
    start : {"neutral", "fitted"} or Efficiency
        Where each refit starts (its ``base``): ``"neutral"`` (default) is
        :data:`NEUTRAL_START`, the middle of every factor's range; ``"fitted"`` the
        all-data optimum ``Efficiency()``, whose figure leaks the held-out source (kept to
        compare with the figures recorded before 2026-12-06).
    **fit_kw
        Passed to :func:`fit_efficiency` (``factors``, ``fixed``, steps).

    Returns
    -------
    LosoResult
    """
    if not points:
        raise ValueError("leave_one_source_out needs measurements; pass MEASUREMENTS")
    if "base" in fit_kw:
        raise ValueError("leave_one_source_out takes start=, not base=; pass start=Efficiency(...)")
    if isinstance(start, Efficiency):
        base = start
    elif start == "neutral":
        base = NEUTRAL_START
    elif start == "fitted":
        base = Efficiency()
    else:
        raise ValueError(f"start must be 'neutral', 'fitted' or an Efficiency, got {start!r}")
    sources = sorted({source_of(p) for p in points})
    if len(sources) < 2:
        raise ValueError("leave-one-source-out needs points from at least two sources")
    predicted: dict[str, float] = {}
    errors: dict[str, float] = {}
    by_source: dict[str, tuple[float, Efficiency]] = {}
    for s in sources:
        train = [p for p in points if source_of(p) != s]
        test = [p for p in points if source_of(p) == s]
        res = fit_efficiency(train, base=base, **fit_kw)  # type: ignore[arg-type]
        pred = fast_predictor(test)(res.efficiency)
        errs = [float(v / p.measured - 1.0) for p, v in zip(test, pred, strict=True)]
        for p, v, e in zip(test, pred, errs, strict=True):
            predicted[p.id], errors[p.id] = float(v), e
        by_source[s] = (float(np.mean(np.abs(errs))), res.efficiency)
    return LosoResult(predicted, errors, by_source)


def main() -> int:  # pragma: no cover - offline tool
    from . import MEASUREMENTS

    res = fit_efficiency(MEASUREMENTS)
    print(f"fitted {', '.join(res.fitted)} on {res.n_points} points")
    print(res.efficiency)
    print(f"mean |error| {100 * res.mean_abs_error:.2f}%, max {100 * res.max_abs_error:.2f}%")
    loso = leave_one_source_out(MEASUREMENTS)
    print(f"leave-one-source-out mean |error| {100 * loso.mean_abs_error:.2f}% (refits from "
          "the neutral start)")
    for s, (e, _) in loso.by_source.items():
        print(f"  {s}: {100 * e:.1f}%")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
