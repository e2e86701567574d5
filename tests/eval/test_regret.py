"""Regret's statistics (`eval.regret`) on hand-made measurements: the naive figure's winner's curse and the
cross-fitted one without it, hits, the best against the runner-up, a cost model's ordering and own best."""

import math

import numpy as np
import pytest

from neuroshard.eval.regret import (
    ModelSpec,
    TaskSpace,
    crossfit_regret,
    hits,
    naive_regret,
    ordering,
    own_best,
    round_noise,
    runner_up,
    summarize,
    summary_markdown,
)
from neuroshard.types.plan import Plan


def test_naive_minimum_is_biased_and_the_cross_fitted_one_is_not():
    # two plans of the same true cost (10 ms); plan b had one lucky round. The naive best is b (mean 9.5), so a's
    # regret reads 10 / 9.5 - 1 = +5.3% although the two cost the same.
    a = [10.0, 10.0, 10.0, 10.0]
    b = [8.0, 10.0, 10.0, 10.0]
    assert naive_regret([a, b])[0] == pytest.approx(10 / 9.5 - 1)
    # cross-fitted: the even rounds (0, 2) choose b (9 < 10), the odd rounds (1, 3) judge: a 10, b 10 -> 0; the odd
    # rounds tie and choose a (the first), the even ones judge a against itself -> 0
    assert crossfit_regret([a, b]) == pytest.approx([0.0, (0.0 + (9 / 10 - 1)) / 2])
    # a true difference survives: a costs 10% more in every round
    assert crossfit_regret([[11.0] * 4, [10.0] * 4])[0] == pytest.approx(0.1)
    assert naive_regret([[11.0] * 4, [10.0] * 4])[0] == pytest.approx(0.1)


def test_cross_fitted_regret_is_unbiased_where_the_naive_one_is_not():
    # 30 plans of equal true cost, 4 rounds of 10% noise: the naive regret of plan 0 averages well above 0 (the
    # minimum of 30 noisy means), the cross-fitted one about 0 (below it only by the choice's own error)
    rng = np.random.default_rng(0)
    naive, cf = [], []
    for _ in range(400):
        c = 10.0 * (1 + 0.1 * rng.standard_normal((30, 4)))
        naive.append(naive_regret(c)[0])
        cf.append(crossfit_regret(c)[0])
    assert np.mean(naive) > 0.08
    assert abs(np.mean(cf)) < 0.015


def test_hits_and_the_runner_up_by_hand():
    best = [10.0, 10.0, 10.0, 10.0]
    close = [10.2, 10.1, 10.2, 10.1]  # +1.5% on average
    far = [12.0, 12.0, 12.0, 12.0]  # +20%
    c = [best, close, far]
    # noise 2%: within 1.645 x 0.02 / sqrt(2) = 2.3% of the best on the judging rounds is a hit
    assert list(hits(c, 0.02)) == [1.0, 1.0, 0.0]
    assert list(hits(c, 0.001)) == [1.0, 0.0, 0.0]
    ru = runner_up(c, 0.02)
    assert (ru.best, ru.runner_up) == (0, 1)
    assert ru.gap == pytest.approx(0.015)
    half = 1.96 * 0.02 / 2
    assert (ru.lo, ru.hi) == pytest.approx((0.015 - half, 0.015 + half))
    assert not ru.resolved and ru.stable
    assert runner_up(c, 0.005).resolved
    # the halves disagree: not stable
    assert not runner_up([[10.0, 11.0], [11.0, 10.0]], 0.01).stable
    assert runner_up([best], 0.01) is None


def test_round_noise_is_the_pooled_sd_of_one_rounds_difference_to_the_best():
    # task: best [10, 10], other [11, 12]: relative differences 0.1, 0.2 -> deviations +-0.05, 1 dof: var 0.005
    assert round_noise([[[11.0, 12.0], [10.0, 10.0]]]) == pytest.approx(math.sqrt(0.005))
    assert round_noise([[[11.0], [10.0]]]) == 0.0


def test_a_models_ordering_and_own_best_by_hand():
    costs = [[10.0, 10.0], [12.0, 12.0], [20.0, 20.0], [11.0, 11.0]]
    est = [1.0, 2.0, 3.0, None]  # the fourth plan it cannot price
    o = ordering(est, costs, noise=0.01)
    assert o["plans"] == 3 and o["spearman"] == pytest.approx(1.0)
    assert (o["pairs"], o["right"], o["beyond"], o["beyond_right"]) == (3, 3, 3, 3)
    wrong = ordering([3.0, 2.0, 1.0, None], costs, noise=0.01)
    assert wrong["spearman"] == pytest.approx(-1.0) and wrong["right"] == 0
    # with 15% noise only the 100% gap (plans 0 and 2) and 67% gap (1 and 2) are beyond 1.96 x 0.15 / sqrt(2)
    assert ordering(est, costs, noise=0.15)["beyond"] == 2
    assert own_best(est) == 0 and own_best([None, 2.0, 1.0]) == 2 and own_best([None]) is None


def _space(task, costs, algs, estimates=None):
    n = len(costs)
    return TaskSpace("paper", "s", task, [0], [8], [Plan((), ((k,),)) for k in range(n)], costs, algs, True, n,
                     estimates or {})


def test_summary_over_tasks():
    spaces = [
        _space(0, [[10.0, 10.0], [11.0, 11.0]], {"a": 1, "b": 0}, {"m": [2.0, 1.0]}),
        _space(1, [[10.0, 10.0], [12.0, 12.0]], {"a": 1, "b": 0}, {"m": [1.0, 2.0]}),
    ]
    s = summarize(spaces, [ModelSpec("m", "a model", ("a",))])["paper"]
    rows = {r["alg"]: r for r in s["algorithms"]}
    assert rows["a"]["naive"]["mean"] == pytest.approx(0.15) and rows["a"]["crossfit"]["mean"] == pytest.approx(0.15)
    assert rows["b"]["naive"]["mean"] == 0.0 and rows["b"]["hit_rate"] == 1.0 and rows["a"]["hit_rate"] == 0.0
    assert s["noise"] == 0.0 and s["resolved"] == 2 and s["stable"] == 2
    [m] = s["models"]
    # task 0: the model rates plan 1 best (regret +10%), task 1 plan 0 (0); its search's plan is a's: +10%, +20%
    assert m["own_best"]["naive"]["mean"] == pytest.approx(0.05)
    assert m["searches"]["a"]["naive"]["mean"] == pytest.approx(0.15)
    assert m["searches"]["a"]["shortfall"]["mean"] == pytest.approx(0.5)  # task 1: 2.0 / 1.0 - 1; task 0: 0
    assert m["right"] == 0.5
    text = summary_markdown({"paper": s})
    assert "| a | 2 |" in text and "a model" in text


def test_unpaired_noise_is_what_pairing_by_round_takes_out():
    from neuroshard.eval.regret import unpaired_noise

    # two plans of the same cost, both 20% slower in round 1: paired, their difference does not move; unpaired,
    # each measurement is 1/11 off its mean
    c = [[10.0, 12.0], [10.0, 12.0]]
    assert round_noise([c]) == pytest.approx(0.0)
    assert unpaired_noise([c]) == pytest.approx(math.sqrt(2 * 4 * (1 / 11) ** 2 / 2))
