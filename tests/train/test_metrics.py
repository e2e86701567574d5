"""Metrics of cost-model predictions, by hand."""

import pytest

from neuroshard.train.metrics import rankdata, ratio_interval, regression_metrics, spearman


def test_metrics_hand_values():
    m = regression_metrics([1.0, 2.0, 6.0], [1.0, 4.0, 4.0])
    assert m["mse"] == pytest.approx((0 + 4 + 4) / 3)
    assert m["mape"] == pytest.approx((0 + 0.5 + 0.5) / 3)
    assert rankdata([10, 20, 20, 5]).tolist() == [2.0, 3.5, 3.5, 1.0]
    assert spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)


def test_the_ratio_to_the_floor_and_its_interval():
    # every error 0.1, every re-measurement 0.2 apart: 0.5 with nothing to resample
    flat = ratio_interval([0.1] * 5, [0.2] * 8)
    assert flat == pytest.approx({"ratio": 0.5, "low": 0.5, "high": 0.5, "level": 0.95})
    # errors 0.1 or 0.3 (mean 0.2) against a floor of 0.1 or 0.3 (mean 0.2): 1.0, and resampling either side
    # moves it both ways; the same seed gives the same interval
    spread = ratio_interval([0.1, 0.3] * 10, [0.1, 0.3] * 10)
    assert spread["ratio"] == pytest.approx(1.0) and spread["low"] < 0.9 and spread["high"] > 1.1
    assert ratio_interval([0.1, 0.3] * 10, [0.1, 0.3] * 10) == spread
    with pytest.raises(ValueError, match="positive floor"):
        ratio_interval([0.1], [0.0, 0.0])
    with pytest.raises(ValueError, match="0 errors"):
        ratio_interval([], [0.1])


def test_missing_targets_are_left_out_of_the_metrics():
    from neuroshard.train.metrics import regression_metrics

    m = regression_metrics([1.0, 2.0, 3.0], [1.0, float("nan"), 2.0])  # a padded rank has no target
    assert m["n"] == 2 and m["mape"] == 0.25 and m["mse"] == 0.5
