"""A plan's cost as a distribution (`planner.costs.uncertainty`) by hand: samples from ensemble members and
measurement noise, their summary, the robust objective and NeuroShard+'s use of it."""

import math

import numpy as np
import pytest

from neuroshard.planner.costs.cost_models import CostModels
from neuroshard.planner.costs.scorer import get_scorer
from neuroshard.planner.costs.uncertainty import (
    NO_NOISE,
    NoiseModel,
    cost_samples,
    normals,
    robust_cost,
    sd_from_noise_floor,
    shared_normals,
    spread,
)
from neuroshard.planner.search.local_search import Objective
from neuroshard.planner.search.plus import PlusConfig, search_plus
from neuroshard.planner.simulator import simulate
from neuroshard.problem import Problem
from neuroshard.types.costs import RankNoise
from neuroshard.types.plan import Plan
from tests.planner.costs.test_scorer import hand_ensemble
from tests.planner.test_simulator import hand_models, tables_of


def test_draws_are_fixed_and_the_noise_floor_converts_to_an_sd():
    assert np.array_equal(normals(4), normals(4)) and normals(4).shape == (32, 4)
    # |a - b| of two measurements with sd s has mean 2 s / sqrt(pi)
    assert sd_from_noise_floor(2 * 0.1 / math.sqrt(math.pi)) == pytest.approx(0.1)


def test_samples_without_noise_are_each_members_plan_cost():
    compute = np.array([[[1.0, 2.0]], [[3.0, 1.0]]])  # [K=2, M=1, n=2]
    zero = np.zeros_like(compute)
    np.testing.assert_allclose(cost_samples(compute, zero, zero), [[2.0, 3.0]])
    # one rank with noise: each draw is total + sd x z, sd = 10% of compute (z: the first of the rank's
    # three fixed draws, for its ready time; the second is its transfer's, the third its model error's)
    one = np.array([[[10.0]]])
    s = cost_samples(one, np.zeros_like(one), np.zeros_like(one), NoiseModel(compute=0.1))
    np.testing.assert_allclose(s[0], 10.0 + 1.0 * normals(3)[:, 0])


def test_a_plans_cost_is_the_last_ready_time_plus_the_largest_transfer():
    # 2 ranks: compute 10 and 6 ms, backward 1 ms each: ready at 11 and 7; rank 1 waits 4 ms for rank 0,
    # and each transfers 2 ms (fw 2 and 6): both totals 13 ms, the point cost
    compute, bw, fw = np.array([[[10.0, 6.0]]]), np.array([[[1.0, 1.0]]]), np.array([[[2.0, 6.0]]])
    z = normals(6)  # [S, 6]: ready draws of ranks 0, 1, transfer draws, model-error draws
    # the compute model's per-rank error alone (10%: 1 ms on rank 0, 0.6 ms on rank 1), drawn per rank
    got = cost_samples(compute, bw, fw, NoiseModel(rank=0.1))
    np.testing.assert_allclose(got[0], np.maximum(11.0 + 1.0 * z[:, 4], 7.0 + 0.6 * z[:, 5]) + 2.0)
    # the forward exchange's noise (5% of fw: 0.1 and 0.3 ms) moves the transfers only
    got = cost_samples(compute, bw, fw, NoiseModel(fw=0.05))
    np.testing.assert_allclose(got[0], 11.0 + np.maximum(2.0 + 0.1 * z[:, 2], 2.0 + 0.3 * z[:, 3]))


def test_the_per_rank_model_error_costs_balanced_plans_more_than_their_point_estimate():
    # two plans with the same point cost (12 ms): A's two ranks are ready together at 11 ms, B's rank 1 at
    # 6 ms (it waits 5 ms longer); the rank error (10% of compute) raises A's expected cost more
    zero = np.zeros((1, 1, 2))
    a = cost_samples(np.array([[[10.0, 10.0]]]), zero + 1.0, np.array([[[1.0, 1.0]]]), NoiseModel(rank=0.1))
    b = cost_samples(np.array([[[10.0, 5.0]]]), zero + 1.0, np.array([[[1.0, 6.0]]]), NoiseModel(rank=0.1))
    y = normals(6)[:, 4:]
    np.testing.assert_allclose(a[0], 12.0 + y.max(axis=1))  # the maximum of two draws
    np.testing.assert_allclose(b[0], np.maximum(11.0 + y[:, 0], 6.0 + 0.5 * y[:, 1]) + 1.0)
    assert a.mean() > b.mean() + 0.5  # 12.76 vs 12.12 with the fixed draws
    assert b.mean() == pytest.approx(12.0 + y[:, 0].mean(), abs=0.01)  # B: rank 0 decides every draw


def test_shared_noise_moves_the_ranks_together():
    two = np.array([[[10.0, 10.0]]])  # [K=1, M=1, n=2]: two equal ranks, compute sd 1 ms
    zero = np.zeros_like(two)
    # all of it shared: both ranks draw the same z, so the maximum is one rank's draw
    together = cost_samples(two, zero, zero, NoiseModel(compute=0.1, shared=1.0))
    np.testing.assert_allclose(together[0], 10.0 + shared_normals())
    # half shared: each rank's z is sqrt(1/2) (own + shared), the sd of a rank unchanged
    half = cost_samples(two, zero, zero, NoiseModel(compute=0.1, shared=0.5))
    z = math.sqrt(0.5) * (normals(6)[:, :2] + shared_normals()[:, None])
    np.testing.assert_allclose(half[0], 10.0 + z.max(axis=1))
    # independent ranks raise the expected maximum more than shared ones
    apart = cost_samples(two, zero, zero, NoiseModel(compute=0.1))
    assert apart.mean() > half.mean() > together.mean()  # 10.58 > 10.53 > 10.16 with the fixed draws
    assert RankNoise(4, 0.01, 0.03).shared == pytest.approx(0.9) and RankNoise(4, 0.0, 0.0).shared == 0.0


def test_spread_and_the_robust_objective_by_hand():
    samples = np.array([[10.0, 10.0, 10.0, 10.0], [8.0, 12.0, 8.0, 12.0]])  # equal means, different spread
    a, b = spread(samples)
    assert (a.mean, a.sd, b.mean) == (10.0, 0.0, 10.0)
    assert b.sd == pytest.approx(np.std([8, 12, 8, 12], ddof=1)) and (b.q10, b.q90) == (8.0, 12.0)
    np.testing.assert_allclose(robust_cost(samples, 0.0), [10.0, 10.0])
    # the robust objective picks the low-variance plan of two with the same mean
    robust = robust_cost(samples, 1.0)
    assert int(np.argmin(robust)) == 0 and robust[1] == pytest.approx(10.0 + b.sd)


def test_the_objective_of_placements_with_an_ensemble():
    models = hand_ensemble()
    scorer = get_scorer(models)
    # two placements of 2 devices with the same mean compute; the second's members disagree more
    dims = np.array([[24.0, 32.0], [24.0, 32.0]])
    compute = np.array([[[1.0, 1.0], [0.5, 0.5]], [[1.0, 1.0], [1.5, 1.5]]])  # [K, M, n]
    point = Objective(scorer, NO_NOISE, robust=False, lam=1.0)
    robust = Objective(scorer, NO_NOISE, robust=True, lam=1.0)
    assert robust.robust and not point.robust
    cost, total = robust(compute, dims)
    bw, fw = scorer.comm_members(dims, compute)
    member = (compute + bw + fw).max(axis=-1)  # [K, M]
    np.testing.assert_allclose(cost, member.mean(axis=0) + member.std(axis=0, ddof=1))
    np.testing.assert_allclose(total, (compute + bw + fw).mean(axis=0))
    assert cost[1] > cost[0]  # same mean compute, wider member spread: the robust cost is higher


def test_simulate_reports_the_cost_distribution_and_neuroshard_plus_minimises_it():
    tables = tables_of([16, 32, 8, 64, 16])
    models = hand_ensemble()
    plan = Plan((), ((0, 2), (1, 3, 4)))
    bd = simulate(tables, plan, models, Problem(plan.ndevices, 1.0))
    assert bd.spread.samples == 2 and bd.spread.mean == pytest.approx(np.mean(bd.member_costs))
    noisy = CostModels(models.compute, models.fw, models.bw, noise=NoiseModel(0.1, 0.1, 0.1))
    nb = simulate(tables, plan, noisy, Problem(plan.ndevices, 1.0))
    assert nb.spread.samples == 64 and nb.spread.q10 < nb.spread.mean < nb.spread.q90
    # one model without noise: no distribution, and NeuroShard+'s robust objective is the point cost
    assert simulate(tables, plan, hand_models(2), Problem(plan.ndevices, 1.0)).spread is None
    res = search_plus(tables, Problem(2, 1.0), noisy, plus=PlusConfig(plus_lambda=1.0))
    found = simulate(tables, res.plan, noisy, Problem(res.plan.ndevices, 1.0)).spread
    assert res.cost == pytest.approx(found.mean + found.sd, rel=1e-6)
    for start in ("neuroshard", "size_lookup_greedy"):  # never above a start it ran, by its objective
        assert res.cost <= res.start_costs[start] + 1e-9


def test_plan_error_widens_about_the_same_mean():
    from neuroshard.planner.costs.uncertainty import plan_normals, widen

    z = plan_normals()
    assert z.mean() == pytest.approx(0.0, abs=1e-12) and z.std() == pytest.approx(1.0)
    samples = np.array([[10.0, 10.0], [20.0, 40.0]])  # two plans, two samples each
    assert widen(samples, 0.0) is samples
    wide = widen(samples, 0.1)
    assert wide.shape == (2, 64)
    # plan 0: 10 + 0.1 x 10 x z, twice -> mean 10, sd 1; plan 1: mean 30, each sample + 3 z
    np.testing.assert_allclose(wide[0], np.tile(10.0 + z, 2))
    np.testing.assert_allclose(wide[1], np.concatenate([20.0 + 3.0 * z, 40.0 + 3.0 * z]))
    assert wide.mean(axis=1) == pytest.approx([10.0, 30.0])


def test_calibrated_plan_error_is_the_smallest_step_that_holds_80_percent():
    from neuroshard.planner.costs.uncertainty import (
        calibrate_plan_sd,
        plan_normals,
        share_in_band,
    )

    point = [np.array([100.0])]  # one model, no noise: the band is the point
    assert calibrate_plan_sd(point, [[100.0]]) == (0.0, 1.0, 1.0)  # already inside: no term
    got = [[100.0, 100.0, 100.0, 104.0, 96.0]]
    assert share_in_band(point, got) == pytest.approx(0.6)
    # 4 of 5 inside needs the band to reach 104 (100 p q90(z) >= 4) or 96 (-100 p q10(z) >= 4), p in steps of
    # 0.25%; the 10% and 90% quantiles of 100 + 100 p z are 100 + 100 p q10(z) and 100 + 100 p q90(z)
    q10, q90 = np.quantile(plan_normals(), [0.1, 0.9])
    need = min(4 / (100 * q90), 4 / (100 * -q10))
    sd, before, after = calibrate_plan_sd(point, got)
    assert sd == pytest.approx(math.ceil(need / 0.0025 - 1e-9) * 0.0025)
    assert before == pytest.approx(0.6) and after >= 0.8
    assert share_in_band(point, got, sd - 0.0025) < 0.8
    # out of reach: the cap, with what it reaches
    far = [[100.0, 1000.0, 1000.0, 1000.0, 1000.0]]
    assert calibrate_plan_sd(point, far)[0] == 0.5


def test_the_plan_error_widens_the_simulated_band_not_the_point_cost():
    from dataclasses import replace

    from neuroshard.planner.costs.uncertainty import plan_normals

    tables = tables_of([16, 32, 8])
    plan = Plan((), ((0, 2), (1,)))
    plain = simulate(tables, plan, hand_models(), Problem(plan.ndevices, 1.0))
    wide = simulate(tables, plan, replace(hand_models(), noise=NoiseModel(plan=0.1)), Problem(plan.ndevices, 1.0))
    assert wide.cost == plain.cost and wide.spread.mean == pytest.approx(plain.cost)
    q10, q90 = np.quantile(plain.cost + 0.1 * plain.cost * plan_normals(), [0.1, 0.9])
    assert (wide.spread.q10, wide.spread.q90) == pytest.approx((q10, q90))
