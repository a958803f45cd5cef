import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simcore.engine.metrics import (
    Metric,
    UnknownMetricError,
    get_metric,
    known_metrics,
    metric_is_better,
    metric_value,
    register_metric,
    select_best,
)


def test_metric_is_better__latency_smaller_wins():
    assert metric_is_better("latency", 8, 30)
    assert not metric_is_better("latency", 30, 8)


def test_metric_is_better__throughput_and_flops_larger_win():
    assert metric_is_better("throughput", 30, 8)
    assert not metric_is_better("throughput", 8, 30)
    assert metric_is_better("FLOPS", 2.0, 1.0)
    assert metric_is_better("flops", 2.0, 1.0)


@pytest.mark.parametrize("metric", ["latency", "throughput", "FLOPS_per_gpu"])
@pytest.mark.parametrize("bad", [None, float("nan"), "n/a", True])
def test_metric_is_better__none_and_nan_never_win(metric, bad):
    assert not metric_is_better(metric, bad, 1.0)
    assert metric_is_better(metric, 1.0, bad)


def test_metric_is_better__zero_incumbent_is_a_value_not_missing():
    assert not metric_is_better("throughput", 0.0, 0.0)
    assert metric_is_better("latency", 0.0, 1.0)


def test_metric_value__flops_aliases_read_flops_per_gpu():
    res = {"latency": 10.0, "throughput": 3.0, "FLOPS_per_gpu": 1.2e14}
    assert metric_value(res, "flops") == 1.2e14
    assert metric_value(res, "FLOPS") == 1.2e14


def test_metric_value__exact_key_wins_over_alias():
    assert metric_value({"FLOPS": 5.0, "FLOPS_per_gpu": 1.0}, "FLOPS") == 5.0
    assert metric_value({"latency_ns": 5.0, "latency": 1.0}, "latency_ns") == 5.0


def test_metric_value__missing_and_nan_are_none():
    assert metric_value({}, "latency") is None
    assert metric_value(None, "latency") is None
    assert metric_value({"latency": float("nan")}, "latency") is None


def test_get_metric__unknown_lists_known():
    with pytest.raises(UnknownMetricError, match="FLOPS_per_gpu") as exc:
        get_metric("speed")
    assert isinstance(exc.value, ValueError) and isinstance(exc.value, KeyError)
    assert "speed" in str(exc.value)


def test_register_metric__user_defined_and_conflicts():
    register_metric(Metric("tokens_per_joule", "max", aliases=("efficiency_tpj",)), replace=True)
    assert "efficiency_tpj" in known_metrics()
    assert metric_is_better("efficiency_tpj", 2, 1)
    with pytest.raises(ValueError, match="already belongs"):
        register_metric(Metric("other", "min", aliases=("latency",)))
    with pytest.raises(ValueError, match="direction"):
        Metric("x", "up")


@given(st.lists(st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=False)), max_size=30),
       st.sampled_from(["latency", "throughput"]))
def test_select_best__matches_min_max_of_valid(values, metric):
    items = [{metric: v} for v in values]
    item, val = select_best(items, metric)
    valid = [v for v in values if v is not None and not math.isnan(v)]
    if not valid:
        assert item is None and val is None
        return
    want = min(valid) if metric == "latency" else max(valid)
    assert val == want
    first = next(i for i, v in enumerate(values) if v == want)  # ties: the first one wins
    assert item is items[first]
