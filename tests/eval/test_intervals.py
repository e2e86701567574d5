"""Confidence intervals and verdicts on hand-made samples."""

import numpy as np
import pytest

from neuroshard.eval.intervals import (
    Interval,
    exceeds_repeat_noise,
    mean_interval,
    paired_difference,
    powered_difference,
    verdict,
)


def test_constant_costs_have_a_zero_width_interval():
    iv = mean_interval([[5.0, 5.0], [5.0, 5.0], [5.0, 5.0]])
    assert (iv.mean, iv.lo, iv.hi, iv.n_tasks, iv.n_repeats) == (5.0, 5.0, 5.0, 3, 2)


def test_interval_covers_the_mean_and_is_seeded():
    rng = np.random.default_rng(1)
    costs = rng.normal(10.0, 1.0, size=(20, 3))
    a, b = mean_interval(costs, seed=4), mean_interval(costs, seed=4)
    assert a == b and a.lo < costs.mean() < a.hi
    # the standard error of a mean of 60 draws of sd 1 is about 0.13: a 95% interval is about +-0.26
    assert 0.3 < a.hi - a.lo < 0.8


def test_a_known_difference_is_significant_and_identical_samples_are_not():
    rng = np.random.default_rng(2)
    base = rng.normal(20.0, 2.0, size=(15, 3))
    other = base * 1.10 + rng.normal(0.0, 0.2, size=base.shape)  # 10% slower, task by task
    diff = paired_difference(base, other)
    assert diff.mean == pytest.approx((other - base).mean()) and diff.lo > 0
    assert verdict(diff) == "beats"
    assert verdict(paired_difference(other, base)) == "loses to"
    same = paired_difference(base, base)
    assert (same.lo, same.hi) == (0.0, 0.0) and verdict(same) == "no significant difference"
    # a difference smaller than the task-to-task noise of the difference is not claimed
    noisy = base + rng.normal(0.05, 3.0, size=base.shape)
    assert verdict(paired_difference(base, noisy)) == "no significant difference"


def test_verdict_follows_the_interval_not_the_mean():
    assert verdict(Interval(mean=5.0, lo=-0.1, hi=10.0, n_tasks=3, n_repeats=1)) == "no significant difference"
    assert verdict(Interval(mean=0.2, lo=0.1, hi=0.3, n_tasks=3, n_repeats=1)) == "beats"
    assert verdict(Interval(mean=-0.2, lo=-0.3, hi=-0.1, n_tasks=3, n_repeats=1)) == "loses to"


def test_repeat_noise_by_hand():
    # means 10 and 11; variances 1 and 1 over 2 repeats: se = sqrt(1/2 + 1/2) = 1, 1.96 > 1 apart
    assert exceeds_repeat_noise([9.0, 11.0], [10.0, 12.0]) is False
    assert exceeds_repeat_noise([9.9, 10.1], [10.9, 11.1]) is True  # se = 0.141
    assert exceeds_repeat_noise([10.0], [11.0, 12.0]) is None


def test_shapes_must_match():
    with pytest.raises(ValueError):
        paired_difference([[1.0, 2.0]], [[1.0]])


def test_powered_difference_by_hand():
    base = [[10.0], [10.0], [10.0], [10.0]]
    other = [[11.0], [12.0], [13.0], [14.0]]  # measured differences y = 1, 2, 3, 4: mean 2.5
    f = [1.0, 2.0, 3.0, 4.0]  # predicted as measured: cov(y, f) / var(f) = 1
    g = [2.0, 2.0, 2.0, 2.0]  # 4 unmeasured tasks: weight 1 / (1 + 4 / 4) = 0.5
    iv, weight = powered_difference(base, other, f, g)
    # 2.5 - 0.5 x (mean f 2.5 - mean g 2.0) = 2.25: the measured tasks happened to be predicted high
    assert weight == pytest.approx(0.5) and iv.mean == pytest.approx(2.25)
    assert (iv.n_tasks, iv.n_repeats) == (4, 1)
    # predictions that go against the measurements get weight 0: the plain paired difference
    iv, weight = powered_difference(base, other, f[::-1], g)
    assert weight == 0.0 and iv == paired_difference(base, other)
    # no unmeasured task, or predictions that do not vary: the plain paired difference too
    assert powered_difference(base, other, f, []) == (paired_difference(base, other), 0.0)
    assert powered_difference(base, other, [3.0] * 4, g)[0] == paired_difference(base, other)
    with pytest.raises(ValueError, match="3 predictions for 4 measured tasks"):
        powered_difference(base, other, f[:3], g)


def test_powered_difference_ignores_a_simulator_biased_by_a_constant():
    """A simulator that over-predicts every difference by 5 ms moves nothing: only how far the measured
    tasks' predictions lie from the unmeasured tasks' corrects the mean."""
    rng = np.random.default_rng(3)
    y = rng.normal(1.0, 2.0, size=40)
    base = np.full((40, 2), 20.0)
    other = base + y[:, None] + rng.normal(0.0, 0.5, size=(40, 2))
    f = y + 5.0
    iv, weight = powered_difference(base, other, f, np.tile(f, 3))  # unmeasured predictions with f's mean
    assert weight > 0.5 and iv.mean == pytest.approx((other - base).mean())


def test_predictions_that_explain_the_task_noise_narrow_the_interval():
    rng = np.random.default_rng(4)
    u = rng.normal(0.5, 2.0, size=300)  # every task's true difference, 60 measured, 240 not
    base = np.full((60, 4), 20.0)
    other = base + u[:60, None] + rng.normal(0.0, 0.5, size=(60, 4))
    f, g = 2.0 * u[:60] + rng.normal(0, 0.3, 60), 2.0 * u[60:] + rng.normal(0, 0.3, 240)  # twice the difference
    plain = paired_difference(base, other)
    powered, weight = powered_difference(base, other, f, g)
    # the weight estimates 0.5 / (1 + 60 / 240) = 0.4; the interval narrows and still covers the true 0.5
    assert weight == pytest.approx(0.4, abs=0.03)
    assert powered.hi - powered.lo < 0.7 * (plain.hi - plain.lo) and powered.lo < 0.5 < powered.hi
