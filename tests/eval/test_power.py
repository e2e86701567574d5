"""The power of a hardware comparison (`eval.power`) by hand: minimum detectable differences, the tasks a
3% difference needs, the noise components of a paired comparison and the plan-level repeat noise."""

import math

import pytest

from neuroshard.eval.power import (
    components,
    min_detectable,
    plan_repeat_noise,
    rank_noise,
    tasks_needed,
    z_sum,
)


def test_z_sum_is_the_textbook_two_point_eight():
    assert z_sum() == pytest.approx(1.959964 + 0.841621, abs=1e-5)
    assert z_sum(alpha=0.05, power=0.5) == pytest.approx(1.959964, abs=1e-5)


def test_minimum_detectable_difference_and_tasks_needed_by_hand():
    # se = sqrt(0.05^2 / 20 + 0.08^2 / (20 * 2)) = sqrt(0.000125 + 0.00016) = 0.0168819
    assert min_detectable(0.05, 0.08, 20, 2) == pytest.approx(2.801585 * 0.0168819, rel=1e-5)
    # T >= (2.801585 / 0.03)^2 * (0.05^2 + 0.08^2 / 2) = 8721.0 * 0.0057 = 49.71 -> 50 tasks
    assert tasks_needed(0.05, 0.08, 2, 0.03) == 50
    assert tasks_needed(0.05, 0.08, 4, 0.03) == math.ceil((2.801585 / 0.03) ** 2 * (0.0025 + 0.0016))  # 36
    assert min_detectable(0.05, 0.08, 50, 2) <= 0.03 < min_detectable(0.05, 0.08, 49, 2)


def test_components_of_a_paired_comparison_by_hand():
    ref = [[10.0, 10.0], [10.0, 10.0], [10.0, 10.0]]
    other = [[11.0, 11.2], [10.5, 10.3], [12.0, 11.6]]
    # relative differences: [.10 .12] [.05 .03] [.20 .16]; within-task variances .0002 .0002 .0008 -> mean .0004
    # task means .11 .04 .18 -> variance .0049; minus the repeat part .0004 / 2 -> .0047
    c = components(ref, other)
    assert c.repeat_sd == pytest.approx(0.02) and c.task_sd == pytest.approx(math.sqrt(0.0047))
    assert (c.tasks, c.repeats) == (3, 2)
    assert c.mdd() == pytest.approx(min_detectable(math.sqrt(0.0047), 0.02, 3, 2))
    assert components([[10.0], [10.0]], [[11.0], [12.0]]) is None  # one round: no repeat noise to estimate


def test_components_with_predictions_by_hand():
    ref = [[10.0, 10.0], [10.0, 10.0], [10.0, 10.0]]
    other = [[11.0, 11.2], [10.5, 10.3], [12.0, 11.6]]  # task means .11 .04 .18, repeat variance .0004
    f = [0.22, 0.08, 0.36]  # predicted relative differences: twice the measured, exactly
    g = [0.1, 0.3, 0.2]  # 3 unmeasured tasks: weight 2 x ... = 0.5 / (1 + 3 / 3) = 0.25, their sd 0.1
    c = components(ref, other, (f, g))
    # residual task means .11 - .055 = .055, .02, .09: variance .001225; minus .0004 / 2 -> .001025
    assert c.task_sd == pytest.approx(math.sqrt(0.001025)) and c.raw_task_sd == pytest.approx(math.sqrt(0.0047))
    assert c.repeat_sd == pytest.approx(0.02) and c.predicted_sd == pytest.approx(0.025)
    assert c.predicted == 3
    # se^2 = .001025 / 3 + .0004 / 6 + .025^2 / 3
    assert c.mdd() == pytest.approx(z_sum() * math.sqrt(0.001025 / 3 + 0.0004 / 6 + 0.000625 / 3))
    assert components(ref, other, (f, [])) == components(ref, other)  # no unmeasured task: as without


def test_tasks_needed_with_unmeasured_tasks_by_hand():
    # the unmeasured term 0.02^2 / 400 = 1e-6 leaves (0.03 / 2.801585)^2 - 1e-6 = 1.1367e-4 for the rest
    room = (0.03 / 2.801585) ** 2 - 0.02 ** 2 / 400
    assert tasks_needed(0.05, 0.08, 4, 0.03, predicted_sd=0.02, predicted=400) == math.ceil(0.0041 / room)  # 37
    assert min_detectable(0.05, 0.08, 37, 4, predicted_sd=0.02, predicted=400) <= 0.03
    # an unmeasured term above the target alone: no number of measured tasks reaches it
    assert tasks_needed(0.05, 0.08, 4, 0.03, predicted_sd=0.5, predicted=10) is None


def test_plan_repeat_noise_by_hand():
    # |10 - 12| / 11 = 0.1818; |20 - 20| / 20 = 0; a plan measured once says nothing
    noise = plan_repeat_noise([[10.0, 12.0], [20.0, 20.0, 21.0], [5.0]])
    assert noise["plans"] == 2 and noise["repeats"] == 2
    assert noise["mean"] == pytest.approx((2 / 11) / 2) and noise["median"] == pytest.approx((2 / 11) / 2)
    assert noise["mape_floor"] == pytest.approx((2 / 11) / 2 / 2)  # / sqrt(2 * 2)
    assert plan_repeat_noise([[1.0], [2.0]]) is None


def test_rank_noise_by_hand():
    e = math.exp
    # plan A: log ratios (0.1, -0.1), mean 0; plan B: (0.3, 0.1), mean 0.2; deviations +-0.1 in both
    # independent: (0.01 + 0.01 + 0.01 + 0.01) / (1 + 1) / 2 = 0.01 -> 0.1
    # common: (mean(0, 0.04) - 2 * 0.01 / 2) / 2 = (0.02 - 0.01) / 2 = 0.005
    plans = [[[e(0.1), e(-0.1)], [1.0, 1.0]],
             [[2 * e(0.3), 3 * e(0.1)], [2.0, 3.0], [9.0, 9.0]],  # a third measurement is not used
             [[5.0, 5.0]],  # measured once: says nothing
             [[4.0], [5.0]]]  # one rank: nothing to split
    noise = rank_noise(plans)
    assert noise.plans == 2
    assert noise.independent_sd == pytest.approx(0.1)
    assert noise.common_sd == pytest.approx(math.sqrt(0.005))
    # ranks that move only together: no noise of their own
    together = rank_noise([[[1.1, 2.2, 3.3], [1.0, 2.0, 3.0]], [[1.0, 2.0, 3.0], [1.1, 2.2, 3.3]]])
    assert together.independent_sd == pytest.approx(0.0, abs=1e-12)
    assert together.common_sd == pytest.approx(math.log(1.1) / math.sqrt(2))
    assert rank_noise([[[1.0, 2.0]]]) is None


def test_selection_headroom_by_hand():
    import math

    from neuroshard.eval.power import selection_headroom

    # reference 10 ms everywhere; the other plan 9 then 11 ms on task 0 (noise), 8 ms on task 1 (truly cheaper)
    ref = [[10.0, 10.0], [10.0, 10.0]]
    other = [[9.0, 11.0], [8.0, 8.0]]
    h = selection_headroom([ref, other])
    # task 0: chosen by round 1 (9 < 10), judged on round 2: 1 - 11/10 = -0.1; chosen by round 2 (11 > 10):
    # the reference, gain 0; mean -0.05. Task 1: the other plan both ways, 1 - 8/10 = 0.2
    assert math.isclose(h.gain, (-0.05 + 0.2) / 2)
    half = 1.96 * math.sqrt(((-0.05 - 0.075) ** 2 + (0.2 - 0.075) ** 2) / 1) / math.sqrt(2)
    assert math.isclose(h.lo, 0.075 - half) and math.isclose(h.hi, 0.075 + half)
    # in sample: task 0 means tie at 10 (gain 0), task 1 gains 0.2
    assert math.isclose(h.in_sample, 0.1)
    assert (h.tasks, h.algorithms, h.repeats) == (2, 2, 2)
    # rounds split even / odd: with 4 rounds, a plan cheap only in rounds 1 and 3 is chosen by them and judged
    # on rounds 2 and 4
    h4 = selection_headroom([[[10.0] * 4] * 2, [[9.0, 11.0, 9.0, 11.0], [10.0] * 4]])
    assert math.isclose(h4.gain, (-0.1 / 2 + 0.0) / 2) and math.isclose(h4.in_sample, 0.0)
    assert selection_headroom([ref]) is None  # one algorithm
    assert selection_headroom([[[10.0], [10.0]], [[9.0], [9.0]]]) is None  # one round
