"""The public training measurements of ``training_measurements.json``."""

from __future__ import annotations

import math

from simcore.specs import Efficiency
from simcore.validation.data_train import TRAIN_MEASUREMENTS, TRAIN_SKIPPED, load_points
from simcore.validation.points import evaluate_point


def test_train_measurements__every_point_kept_or_skipped_with_a_reason():
    raw = load_points()
    ids = {p["id"] for p in raw["points"]}
    kept = {m.id for m in TRAIN_MEASUREMENTS}
    assert kept | set(TRAIN_SKIPPED) == ids and not kept & set(TRAIN_SKIPPED)
    assert all(TRAIN_SKIPPED.values())
    gpus = {p["id"]: p["n_gpus"] for p in raw["points"]}
    for m in TRAIN_MEASUREMENTS:
        assert m.n_devices == gpus[m.id], m.id
        assert m.ref in raw["sources"] and raw["sources"][m.ref]["citation"] in m.source


def test_train_measurements__all_predict_a_finite_value():
    for m in TRAIN_MEASUREMENTS:
        latency_ns, _ = evaluate_point(m, Efficiency())
        assert math.isfinite(m.from_latency_ns(latency_ns)), m.id
