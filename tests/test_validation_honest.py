"""Honest validation (issue 32 item 4): ranking agreement, leave-one-source-out from a
neutral start, and the record of the held constants."""

from dataclasses import replace

import pytest

from simcore.cli import main
from simcore.validation import get_measurement
from simcore.validation.ranking import RANKING_TIE, job_key, ranking_agreement


def _job(n, base_id="korthikanti-175b-full"):
    """``n`` synthetic points of one job, measured 1, 2, 4, ... (in the point's unit)."""
    a = get_measurement(base_id)
    return [replace(a, id=f"p{i}", measured=float(2 ** i)) for i in range(n)]


# --- ranking agreement -------------------------------------------------------------------

def test_ranking_agreement__perfect_order_is_100_percent():
    pts = _job(4)
    r = ranking_agreement(pts, {p.id: 10.0 * p.measured + 1.0 for p in pts})
    assert (r.n_agree, r.n_pairs) == (6, 6) and r.share == 1.0
    assert r.by_kind == {"train": (6, 6)} and r.disagreements == () and r.worst_jobs() == []


def test_ranking_agreement__reversed_order_is_0_percent():
    pts = _job(4)
    r = ranking_agreement(pts, {p.id: 1.0 / p.measured for p in pts})
    assert (r.n_agree, r.n_pairs) == (0, 6) and r.share == 0.0
    assert r.worst_jobs() == [(job_key(pts[0]), 6, 6)]


def test_ranking_agreement__measured_ties_are_not_counted():
    a, b = _job(2)
    tied = replace(b, measured=a.measured * (1.0 + RANKING_TIE / 2))
    r = ranking_agreement([a, tied], {a.id: 2.0, tied.id: 1.0})
    assert r.n_pairs == 0 and r.share != r.share  # NaN: nothing to order
    # a predicted tie of two measured-different points does not agree
    assert ranking_agreement([a, b], {a.id: 1.0, b.id: 1.0}).share == 0.0


def test_ranking_agreement__groups_by_job_and_compares_in_base_units():
    a, b = _job(2)
    other = replace(a, id="other-model", model=replace(a.model, name="another model"))
    r = ranking_agreement([a, b, other], {a.id: 1.0, b.id: 2.0, other.id: 0.5})
    assert r.n_pairs == 1  # the other model is another job
    # a latency in ms and one in s are one job: 1500 ms is longer than 1 s
    ms = replace(a, id="ms", unit="ms", measured=1500.0)
    s = replace(a, id="s", unit="s", measured=1.0)
    assert ranking_agreement([ms, s], {"ms": 1600.0, "s": 1.1}).share == 1.0
    assert ranking_agreement([ms, s], {"ms": 1000.0, "s": 1.1}).share == 0.0


def test_ranking_agreement__rejects_a_bad_tie():
    with pytest.raises(ValueError, match="tie"):
        ranking_agreement(_job(2), {}, tie=-0.1)


def test_cli_validate__no_loso_prints_ranking_agreement(capsys):
    assert main(["validate", "--no-loso", "--kind", "prefill"]) == 0
    out = capsys.readouterr().out
    assert "ranking agreement" in out and "measured pairs" in out
    assert "out-of-sample ranking agreement" not in out
