"""Decision accuracy: does simcore order the configurations of one job as they were measured?

A mean absolute error says how far each prediction lies from its measurement; a user
choosing a layout, a TP degree or a batch needs the *order* of the candidates right. Where
a source measures several configurations of the same job, every pair of them is a small
decision, and :func:`ranking_agreement` counts the share of those pairs that simcore
orders as measured.

A job (:func:`job_key`) is one source (the measurement's short ``ref``), one model, one
kind (train / prefill / decode), one metric and one hardware family: its points differ in
layout, batch, sequence length, precision, runtime settings or GPU count. Values are
compared in the metric's base unit (``METRICS[metric][unit]``), so a table that mixes ms
and s still forms one job. A pair counts only when its measured values differ by more than
:data:`RANKING_TIE` (2%, relative to the smaller): closer than that, a source's own
run-to-run noise could order them either way. A pair agrees when the predicted values lie
in the same order as the measured ones; an exact predicted tie does not agree. The order
is all that is compared, so the metric's direction (lower latency or higher throughput is
better) cannot change whether a pair agrees: the best of a pair agrees exactly when the
order does.

Examples
--------
>>> from simcore.validation import MEASUREMENTS, validate
>>> rows = validate()
>>> r = ranking_agreement(MEASUREMENTS, {row.id: row.predicted for row in rows})
>>> r.n_pairs > 100 and 0.5 < r.share <= 1.0
True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

from .points import METRICS, Measurement

__all__ = ["RANKING_TIE", "RankingAgreement", "job_key", "ranking_agreement"]

#: Measured values closer than this (relative to the smaller) are a tie and not counted.
RANKING_TIE = 0.02


def job_key(point: Measurement) -> tuple[str, str, str, str, str]:
    """The job a measurement belongs to: ``(ref, model name, kind, metric, hardware family)``.

    Examples
    --------
    >>> from simcore.validation import get_measurement
    >>> job_key(get_measurement("korthikanti-175b-full"))
    ('Korthikanti+22 T5', 'Megatron GPT 175B', 'train', 'latency', 'A100-80G')
    """
    return (point.ref, point.model.name, point.kind, point.metric, point.family.name)


@dataclass(frozen=True)
class RankingAgreement:
    """Outcome of :func:`ranking_agreement`.

    ``by_kind`` and ``by_job`` map a kind / a :func:`job_key` to ``(agreeing pairs, pairs)``;
    ``disagreements`` lists each disagreeing pair as ``(job, id_a, id_b)``.
    """

    n_agree: int
    n_pairs: int
    by_kind: Mapping[str, tuple[int, int]]
    by_job: Mapping[tuple[str, str, str, str, str], tuple[int, int]]
    disagreements: tuple[tuple[tuple[str, str, str, str, str], str, str], ...]

    @property
    def share(self) -> float:
        """Agreeing pairs over counted pairs (NaN when no pair counts)."""
        return self.n_agree / self.n_pairs if self.n_pairs else float("nan")

    def worst_jobs(self, n: int = 3) -> list[tuple[tuple[str, str, str, str, str], int, int]]:
        """The ``n`` jobs with the most disagreeing pairs: ``(job, disagreeing, pairs)``."""
        bad = [(job, pairs - agree, pairs) for job, (agree, pairs) in self.by_job.items()
               if pairs > agree]
        return sorted(bad, key=lambda t: (-t[1], -t[2], t[0]))[:n]


def ranking_agreement(points: Sequence[Measurement], predicted: Mapping[str, float], *,
                      tie: float = RANKING_TIE) -> RankingAgreement:
    """The share of measured pairs of one job that the predictions order as measured.

    Parameters
    ----------
    points : sequence of Measurement
        Grouped into jobs by :func:`job_key`; points without a prediction are skipped.
    predicted : mapping of str to float
        Prediction per point id, in the point's ``unit`` (e.g. ``ValidationRow.predicted``
        or :attr:`~simcore.validation.fit.LosoResult.predicted`).
    tie : float
        Measured values closer than this relative difference are not counted.

    Returns
    -------
    RankingAgreement

    Examples
    --------
    >>> from dataclasses import replace
    >>> from simcore.validation import get_measurement
    >>> a = get_measurement("korthikanti-175b-full")
    >>> b = replace(a, id="b", measured=2 * a.measured)
    >>> ranking_agreement([a, b], {a.id: 1.0, "b": 3.0}).share
    1.0
    >>> ranking_agreement([a, b], {a.id: 3.0, "b": 1.0}).share
    0.0
    """
    if not 0.0 <= tie < 1.0:
        raise ValueError(f"tie must be a relative difference in [0, 1), got {tie!r}")
    jobs: dict[tuple[str, str, str, str, str], list[tuple[str, float, float]]] = {}
    for p in points:
        if p.id not in predicted:
            continue
        scale = METRICS[p.metric][p.unit]
        jobs.setdefault(job_key(p), []).append(
            (p.id, float(p.measured) * scale, float(predicted[p.id]) * scale))
    by_job: dict[tuple[str, str, str, str, str], tuple[int, int]] = {}
    by_kind: dict[str, tuple[int, int]] = {}
    bad: list[tuple[tuple[str, str, str, str, str], str, str]] = []
    for job, members in jobs.items():
        agree = pairs = 0
        for (ia, ma, pa), (ib, mb, pb) in combinations(members, 2):
            if max(ma, mb) <= (1.0 + tie) * min(ma, mb):
                continue  # a measured tie
            pairs += 1
            if (pa - pb) * (ma - mb) > 0.0:
                agree += 1
            else:
                bad.append((job, ia, ib))
        if pairs:
            by_job[job] = (agree, pairs)
            a0, n0 = by_kind.get(job[2], (0, 0))
            by_kind[job[2]] = (a0 + agree, n0 + pairs)
    return RankingAgreement(sum(a for a, _ in by_job.values()),
                            sum(n for _, n in by_job.values()), by_kind, by_job, tuple(bad))
