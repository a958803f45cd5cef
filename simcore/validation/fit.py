"""Fit the :class:`~simcore.specs.Efficiency` factors to the measurements (run once, offline).

The fitted values live as constants in :mod:`simcore.validation.fitted`; this module is
how they were obtained and how to redo it after the cost model changes::

    python -m simcore.validation.fit

Method: one :class:`~simcore.specs.Efficiency` for all points together. Every point is
prepared once (:func:`simcore.evaluate.prepare` — the coefficients do not depend on the
efficiency) and re-combined with candidate factors by the engine's own kernel, so a
candidate costs microseconds. The objective is the mean absolute percentage error; the
search is a coarse grid (step 0.05) over the factors that move at least one prediction,
refined by a coordinate pattern search down to 0.001, all inside ``bounds``. Factors that
move no prediction (``hbm_usable`` only decides memory fit) keep their base value.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace

import numpy as np

from ..specs import Efficiency
from .points import Measurement

__all__ = ["FitResult", "fit_efficiency", "fast_predictor"]


@dataclass(frozen=True)
class FitResult:
    """Outcome of :func:`fit_efficiency`."""

    efficiency: Efficiency
    mean_abs_error: float
    max_abs_error: float
    fitted: tuple[str, ...]
    n_points: int


def fast_predictor(points: Sequence[Measurement]) -> Callable[[Efficiency], np.ndarray]:
    """A function efficiency → predictions (each in its point's unit), for many candidates.

    Identical numerics to :func:`simcore.validation.predict` (same coefficients, same
    kernel), without rebuilding the labelled Dataset per call.
    """
    from ..engine import combine, pack_efficiency, prepare

    prepared = []
    for pt in points:
        p = prepare(pt.model, pt.workload, space=pt.space, family=pt.family)
        if not p.valid[0]:
            raise ValueError(f"measurement {pt.id!r}: layout {pt.layout_label} is invalid in "
                             f"simcore for {pt.model.name}")
        hw = p.hw_rows(0, 1).astype(np.float64)
        prepared.append((pt, np.ascontiguousarray(p.coeffs[:1]), hw, pt.workload.mode == "train"))

    def run(eff: Efficiency) -> np.ndarray:
        out = np.empty(len(prepared))
        for i, (pt, coeffs, hw, train) in enumerate(prepared):
            lat = combine(coeffs, hw, pack_efficiency(eff, train=train))["latency_ns"][0, 0]
            out[i] = pt.from_latency_ns(float(lat))
        return out

    return run


def _errors(pred: np.ndarray, measured: np.ndarray) -> np.ndarray:
    return np.abs(pred / measured - 1.0)


def fit_efficiency(
    points: Sequence[Measurement],
    *,
    base: Efficiency | None = None,
    fixed: Sequence[str] = (),
    bounds: tuple[float, float] = (0.30, 0.95),
    coarse_step: float = 0.05,
    fine_step: float = 0.001,
) -> FitResult:
    """The single :class:`Efficiency` minimising the mean absolute percentage error.

    Parameters
    ----------
    points : sequence of Measurement
        Usually :data:`simcore.validation.MEASUREMENTS`.
    base : Efficiency, optional
        Start values, and the values kept for factors no prediction depends on.
    fixed : sequence of str
        Factors held at their ``base`` value (not fitted).
    bounds : (low, high)
        Physically plausible range of every fitted factor.
    coarse_step, fine_step : float
        Grid step of the first pass; step at which the refinement stops.

    Returns
    -------
    FitResult
    """
    if not points:
        raise ValueError("fit_efficiency needs at least one measurement; pass MEASUREMENTS")
    lo, hi = bounds
    if not 0.0 < lo < hi <= 1.0:
        raise ValueError(f"bounds must satisfy 0 < low < high <= 1, got {bounds!r}")
    base = base or Efficiency()
    run = fast_predictor(points)
    measured = np.array([p.measured for p in points])
    names = [f.name for f in fields(Efficiency) if isinstance(getattr(base, f.name), float)
             and f.name not in ("op_latency_ns", "step_overhead_ns")]
    unknown = sorted(set(fixed) - set(names))
    if unknown:
        raise ValueError(f"fixed factors {unknown} are unknown; pass some of {names}")

    # which factors move a prediction at all
    ref = run(base)
    active = []
    for n in names:
        if n in fixed:
            continue
        probe = replace(base, **{n: lo if getattr(base, n) > (lo + hi) / 2 else hi})
        if not np.allclose(run(probe), ref, rtol=1e-12, atol=0.0):
            active.append(n)

    def objective(values: Sequence[float]) -> float:
        eff = replace(base, **dict(zip(active, values, strict=True)))
        return float(_errors(run(eff), measured).mean())

    grid = [round(float(v), 6) for v in np.arange(lo, hi + 1e-9, coarse_step)]
    best_v = [float(getattr(base, n)) for n in active]
    best = objective(best_v)
    for combo in itertools.product(grid, repeat=len(active)):
        val = objective(combo)
        if val < best - 1e-12:
            best, best_v = val, list(combo)

    step = coarse_step / 2
    while step >= fine_step - 1e-12:
        improved = True
        while improved:
            improved = False
            for i in range(len(active)):
                for sign in (-1.0, 1.0):
                    cand = list(best_v)
                    cand[i] = float(np.clip(round(cand[i] + sign * step, 6), lo, hi))
                    val = objective(cand)
                    if val < best - 1e-12:
                        best, best_v, improved = val, cand, True
        step /= 2

    eff = replace(base, **{n: round(float(v), 3) for n, v in zip(active, best_v, strict=True)})
    errs = _errors(run(eff), measured)
    return FitResult(eff, float(errs.mean()), float(errs.max()), tuple(active), len(points))


def main() -> int:  # pragma: no cover - offline tool
    from . import MEASUREMENTS

    res = fit_efficiency(MEASUREMENTS)
    print(f"fitted {', '.join(res.fitted)} on {res.n_points} points")
    print(res.efficiency)
    print(f"mean |error| {100 * res.mean_abs_error:.2f}%, max {100 * res.max_abs_error:.2f}%")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
