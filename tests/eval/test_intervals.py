"""Confidence intervals and verdicts on hand-made samples."""

import numpy as np
import pytest

from neuroshard.eval.intervals import Interval, exceeds_repeat_noise, mean_interval, paired_difference, verdict


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
