"""Honest validation (issue 32 item 4): ranking agreement, leave-one-source-out from a
neutral start, and the record of the held constants."""

from dataclasses import fields, replace

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
    assert "held constants: 2 cited to a measurement, 3 chosen from fits" in out


# --- leave-one-source-out from a neutral start ----------------------------------------------

def test_neutral_start__is_the_middle_of_each_range_not_the_fitted_optimum():
    from simcore import Efficiency
    from simcore.validation import FITTED_EFFICIENCY
    from simcore.validation import fit as fit_mod
    from simcore.validation.fit import FACTORS, NEUTRAL_START

    for name, (_, lo, hi) in FACTORS.items():
        assert getattr(NEUTRAL_START, name) == pytest.approx((lo + hi) / 2)
        assert getattr(NEUTRAL_START, name) != getattr(FITTED_EFFICIENCY, name)
    for name in {f.name for f in fields(Efficiency)} - set(FACTORS):  # held ones stay
        assert getattr(NEUTRAL_START, name) == getattr(FITTED_EFFICIENCY, name)
    assert "NEUTRAL_START" in fit_mod.__doc__ and "middle of its" in fit_mod.__doc__
    assert "neutral" in fit_mod.leave_one_source_out.__doc__


def test_leave_one_source_out__neutral_start_differs_from_fitted_start():
    from simcore.validation import FITTED_EFFICIENCY, MEASUREMENTS
    from simcore.validation.fit import NEUTRAL_START, leave_one_source_out

    pts = [m for m in MEASUREMENTS if m.ref in ("lmdeploy A100", "kipply FT", "lmdeploy v0.1")]
    # compute alone is refitted; the other factors stay where the refit starts
    neutral = leave_one_source_out(pts, factors=["compute"], coarse_step=0.1, fine_step=0.01)
    fitted = leave_one_source_out(pts, start="fitted", factors=["compute"], coarse_step=0.1,
                                  fine_step=0.01)
    assert neutral.predicted != fitted.predicted
    for _, eff in neutral.by_source.values():
        assert eff.roofline_overlap == NEUTRAL_START.roofline_overlap
    for _, eff in fitted.by_source.values():
        assert eff.roofline_overlap == FITTED_EFFICIENCY.roofline_overlap
    again = leave_one_source_out(pts, start=NEUTRAL_START, factors=["compute"], coarse_step=0.1,
                                 fine_step=0.01)
    assert again.predicted == neutral.predicted


@pytest.mark.parametrize("kw, match", [({"start": "optimum"}, "start must be"),
                                       ({"base": None}, "start=")])
def test_leave_one_source_out__rejects_unknown_start(kw, match):
    from simcore.validation import MEASUREMENTS
    from simcore.validation.fit import leave_one_source_out

    with pytest.raises(ValueError, match=match):
        leave_one_source_out(MEASUREMENTS[:30], **kw)


# --- held constants ----------------------------------------------------------------------

def test_held__covers_every_unfitted_factor_with_declared_evidence():
    from simcore import Efficiency
    from simcore.validation.fit import FACTORS
    from simcore.validation.fitted import EVIDENCE, HELD

    assert set(HELD) == {f.name for f in fields(Efficiency)} - set(FACTORS)
    for kind, why in HELD.values():
        assert kind in EVIDENCE and why
    # a value read off fits says so in the record
    from pathlib import Path

    doc = (Path(__file__).parents[1] / "docs" / "validation.md").read_text()
    assert "Held constants and their evidence" in doc
    for name, (kind, _) in HELD.items():
        if kind == "fit":
            assert f"`{name}`" in doc.split("Held constants and their evidence")[1][:6000]
