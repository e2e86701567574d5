"""Metrics of cost-model predictions, by hand."""

import pytest

from neuroshard.train.metrics import rankdata, regression_metrics, spearman


def test_metrics_hand_values():
    m = regression_metrics([1.0, 2.0, 6.0], [1.0, 4.0, 4.0])
    assert m["mse"] == pytest.approx((0 + 4 + 4) / 3)
    assert m["mape"] == pytest.approx((0 + 0.5 + 0.5) / 3)
    assert rankdata([10, 20, 20, 5]).tolist() == [2.0, 3.5, 3.5, 1.0]
    assert spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
