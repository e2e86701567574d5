"""On-policy cost data (`eval.onpolicy`): measured plans become compute and comm samples by hand, training
tasks never overlap evaluation tasks, and NeuroShard+'s weight is the smallest unless the hardware finds another's
plans significantly cheaper."""

import math

import numpy as np
import pytest

from neuroshard.eval.onpolicy import (
    augmented_index,
    check_disjoint,
    choose_lambda,
    lambda_label,
    plan_samples,
)
from neuroshard.problem import Problem
from neuroshard.types.costs import CostBreakdown, RepeatParts
from neuroshard.types.errors import InputError
from neuroshard.types.plan import Plan, Spread
from neuroshard.types.records import PlanRecord
from neuroshard.types.tables import TableConfig, Task

BINS = tuple([0.0] * 16 + [1.0])
CONFIGS = [TableConfig(100 + i, 1.0, BINS) for i in range(5)]  # 5 dataset tables


def _measured(compute_reps, skews, dims):
    reps = [RepeatParts(c, [1.0] * len(c), [2.0] * len(c), skew=s) for c, s in zip(compute_reps, skews)]
    return CostBreakdown([sum(x) / len(x) for x in zip(*compute_reps)], [1.0] * len(dims), [2.0] * len(dims),
                         dims=dims, skew=[0.0] * len(dims), repeats=reps)


def test_augmented_index_is_dim_major():
    dims = [32, 16, 8, 4]
    assert augmented_index(3, 32, 5, dims) == 3 and augmented_index(3, 8, 5, dims) == 13
    assert augmented_index(0, 4, 5, dims) == 15 and augmented_index(0, 12, 5, dims) is None


def test_measured_plans_become_samples_by_hand():
    # task: tables 3 (dim 32) and 1 (dim 8); table 0 is split: two dim-16 halves of table 3
    task = Task((3, 1), (32, 8))
    plan = Plan((0,), ((0,), (1, 2)))  # post-split: 0 = t3/16, 1 = t1/8, 2 = t3/16
    rec = PlanRecord(0, "neuroshard", plan=plan,
                     measured=_measured([[5.0, 7.0], [5.5, 6.5]], [[0.0, 1.0], [0.5, 0.0]], [16, 24]))
    compute, comm, shares = plan_samples([rec, PlanRecord(0, "random", status="oom")], [task], CONFIGS, max_dim=32)
    # dim set 32, 16, 8, 4: t3/16 -> 1 * 5 + 3 = 8; t1/8 -> 2 * 5 + 1 = 11
    assert compute == [((8,), 5.0), ((11, 8), 7.0), ((8,), 5.5), ((11, 8), 6.5)]
    assert [(c.dims, c.sleeps, c.fw, c.bw) for c in comm] == [([16, 24], [0.0, 1.0], [2.0, 2.0], [1.0, 1.0]),
                                                             ([16, 24], [0.5, 0.0], [2.0, 2.0], [1.0, 1.0])]
    # an empty rank has no compute sample; its exchange still is one
    empty = PlanRecord(0, "x", plan=Plan((), ((0, 1), ())),
                       measured=_measured([[9.0, 0.0]], [[0.0, 0.0]], [40, 0]))
    compute, comm, shares = plan_samples([empty], [task], CONFIGS, max_dim=32)
    assert compute == [((3, 11), 9.0)] and len(comm) == 1 and shares == []


def test_spread_tables_shares_are_listed_after_the_augmented_tables():
    # table 0 of the task (dataset table 3, 103 rows, dim 32) row-wise over ranks 0 and 1: TorchRec's blocks of
    # 52 and 51 rows, each with its rows' share of the lookups (no row_lookups); table 1 (t1/8) whole on rank 0
    task = Task((3, 1), (32, 8))
    plan = Plan((), ((1,), ()), (Spread(0, "row_wise", (0, 1)),))
    reps = [RepeatParts([3.0, 1.0], [1.0, 1.0], [2.0, 2.0], skew=[0.0, 0.0], collectives=[[0.5, 0.25], [0.5, 0.25]])]
    rec = PlanRecord(0, "torchrec_full", plan=plan, measured=CostBreakdown(
        [3.0, 1.0], [1.0, 1.0], [2.0, 2.0], dims=[8, 0], skew=[0.0, 0.0], repeats=reps))
    known = [TableConfig(7, 1.0, BINS, dim=4)]  # a share the data dir already lists stays first
    compute, comm, shares = plan_samples([rec], [task], CONFIGS, max_dim=32, known=known)
    block = lambda rows: TableConfig(rows, rows / 103, BINS, dim=32)  # noqa: E731
    assert shares == known + [block(52), block(51)]
    # augmented: 4 dims x 5 tables = 20 entries; t1/8 -> 2 * 5 + 1 = 11; the blocks 21 and 22
    assert compute == [((11, 21), 3.0), ((22,), 1.0)]
    # the all-to-all's samples without the collectives timed apart: forward 2 - 0.5, backward 1 - 0.25
    assert [(c.dims, c.fw, c.bw) for c in comm] == [([8, 0], [1.5, 1.5], [0.75, 0.75])]


def test_training_tasks_never_overlap_evaluation_tasks():
    train, evaluate = [Task((0, 1), (8, 8)), Task((2,), (16,))], [Task((2,), (16,)), Task((4,), (8,))]
    with pytest.raises(InputError, match=r"train.txt: 1 task\(s\) \(lines \[2\]\) are evaluation tasks of eval.txt"):
        check_disjoint(train, evaluate, "train.txt", "eval.txt")
    check_disjoint(train[:1], evaluate, "train.txt", "eval.txt")


def test_lambda_is_the_smallest_unless_another_is_significantly_cheaper():
    def recs(lam, costs):  # costs[task] = [round 1, round 2]
        return [PlanRecord(t, lambda_label(lam), plan=Plan((), ((t,),)),
                           measured=CostBreakdown([sum(c) / 2], [0.0], [0.0]), repeat_costs=list(c))
                for t, c in enumerate(costs)]

    base = recs(0.0, [[10, 10]] * 4)
    steady = recs(1.0, [[9, 9]] * 4)  # 1 ms cheaper on every task and round: the interval is [-1, -1]
    noisy = recs(2.0, [[5, 5], [5, 5], [13, 13], [12, 12]])  # mean 8.75, but 2 of 4 tasks dearer: n.s.
    chosen = choose_lambda(base + steady + noisy, 4)
    assert chosen.chosen == 1.0 and chosen.default == 0.0 and chosen.tasks == 4
    assert chosen.mean_ms == {"0": 10.0, "1": 9.0, "2": 8.75}
    assert chosen.vs_default_ms["1"]["lo"] == chosen.vs_default_ms["1"]["hi"] == -1.0
    lo, hi = chosen.vs_default_ms["2"]["lo"], chosen.vs_default_ms["2"]["hi"]
    assert chosen.vs_default_ms["2"]["mean"] == -1.25 and lo < 0 < hi
    # only the noisy one: the cheapest mean is not enough, the smallest lambda stays
    assert choose_lambda(base + noisy, 4).chosen == 0.0
    # two significantly cheaper: the cheaper mean; equal means: the smaller lambda
    assert choose_lambda(base + steady + recs(3.0, [[8, 8]] * 4), 4).chosen == 3.0
    assert choose_lambda(base + steady + recs(3.0, [[9, 9]] * 4), 4).chosen == 1.0
    assert choose_lambda(base, 4).chosen == 0.0
    assert choose_lambda([], 4) is None


def test_plan_error_divides_out_the_machine_speed_then_calibrates():
    from neuroshard.eval.onpolicy import plan_error
    from neuroshard.planner.costs.uncertainty import calibrate_plan_sd, plan_normals
    from neuroshard.planner.simulator import simulate
    from tests.planner.test_simulator import hand_models

    tasks = [Task((0, 1), (8, 16)), Task((2, 3, 4), (8, 8, 16))]
    plans = [Plan((), ((0,), (1,))), Plan((), ((0, 1), (2,)))]
    models = hand_models()
    bds = [simulate(t.tables(CONFIGS), p, models, Problem(p.ndevices, 1.0)) for t, p in zip(tasks, plans)]
    est = [bd.cost for bd in bds]
    # measured 1.5x slower throughout (every rank's compute too: no per-rank error), one plan off by a
    # further 10% in one of its repeats
    got = [[1.5 * est[0], 1.5 * est[0]], [1.5 * est[1], 1.65 * est[1]]]
    records = [PlanRecord(i, "neuroshard", plan=p, repeat_costs=c,
                          measured=_measured([[1.5 * x for x in bd.compute]], [[0.0, 0.0]], [8, 8]))
               for i, (p, c, bd) in enumerate(zip(plans, got, bds))]
    pe = plan_error(records + [PlanRecord(0, "random", status="oom")], tasks, CONFIGS, models, Problem(2, 1.0))
    assert pe.measurements == 4 and pe.speed == pytest.approx(1.5)  # the median ratio
    assert pe.rank == pytest.approx(0.0, abs=1e-9) and pe.ranks == 4
    # after dividing by 1.5: three measurements on their point, one 10% above it
    centred = [[est[0], est[0]], [est[1], 1.1 * est[1]]]
    point = [np.array([e]) for e in est]
    assert (pe.sd, pe.coverage_before, pe.coverage_after) == pytest.approx(calibrate_plan_sd(point, centred))
    # 3 of 4 on the point is not 80%: the band must reach the fourth, 10% above (p x q90(z) >= 0.1)
    q90 = np.quantile(plan_normals(), 0.9)
    assert pe.coverage_before == pytest.approx(0.75) and pe.coverage_after == 1.0
    assert pe.sd == pytest.approx(math.ceil(0.1 / q90 / 0.0025 - 1e-9) * 0.0025)


def test_plan_error_is_taken_under_the_heldout_models_when_given():
    from dataclasses import replace

    from neuroshard.eval.onpolicy import plan_error, rank_error
    from neuroshard.planner.costs.nets import linear_compute_model
    from neuroshard.planner.simulator import simulate
    from tests.planner.test_simulator import hand_models

    tasks = [Task((0, 1), (8, 16)), Task((2, 3, 4), (8, 8, 16))]
    plans = [Plan((), ((0,), (1,))), Plan((), ((0, 1), (2,)))]
    fitted = hand_models()  # measured exactly as it says: in sample, no error of any kind
    bds = [simulate(t.tables(CONFIGS), p, fitted, Problem(2, 1.0)) for t, p in zip(tasks, plans)]
    records = [PlanRecord(i, "neuroshard", plan=p, repeat_costs=[bd.cost, bd.cost],
                          measured=_measured([bd.compute, bd.compute], [[0.0, 0.0]] * 2, [8, 8]))
               for i, (p, bd) in enumerate(zip(plans, bds))]
    inside = plan_error(records, tasks, CONFIGS, fitted, Problem(2, 1.0))
    assert inside.speed == pytest.approx(1.0) and inside.sd == 0.0 and inside.rank == pytest.approx(0.0, abs=1e-9)
    # models never trained on these plans price compute at 0.5 + 0.03 x dims: their ranks' compute is off by
    # different ratios (a per-rank error), and the plans' costs by a speed of their own
    other = replace(fitted, compute=linear_compute_model(0.03, 0.5))
    out = plan_error(records, tasks, CONFIGS, fitted, Problem(2, 1.0), heldout=other)
    assert out.rank == pytest.approx(rank_error(records, tasks, CONFIGS, other, Problem(2, 1.0))[0])
    assert out.rank > 0.01 and abs(out.speed - 1.0) > 0.1
    # the held-out models' error, not that of the models it is written into
    back = plan_error(records, tasks, CONFIGS, other, Problem(2, 1.0), heldout=fitted)
    assert (back.sd, back.speed) == (0.0, pytest.approx(1.0)) and back.rank == pytest.approx(0.0, abs=1e-9)


def test_rank_error_pools_what_a_plans_ranks_do_not_share():
    from neuroshard.eval.onpolicy import rank_error
    from neuroshard.planner.simulator import simulate
    from tests.planner.test_simulator import hand_models

    tasks = [Task((0, 1), (8, 16)), Task((2, 3, 4), (8, 8, 16))]
    plans = [Plan((), ((0,), (1,))), Plan((), ((0, 1), (2,)))]
    models = hand_models()
    est = [simulate(t.tables(CONFIGS), p, models, Problem(p.ndevices, 1.0)).compute for t, p in zip(tasks, plans)]
    # plan 0: its ranks measured e^0.1 and e^-0.1 times their estimates (deviations +-0.1 about the mean 0);
    # plan 1: both 2x (a shared error: deviations 0); pooled: 0.02 over 4 ranks - 2 plans
    measured = [[est[0][0] * math.exp(0.1), est[0][1] * math.exp(-0.1)], [2 * est[1][0], 2 * est[1][1]]]
    records = [PlanRecord(i, "neuroshard", plan=p, measured=_measured([m], [[0.0, 0.0]], [8, 8]))
               for i, (p, m) in enumerate(zip(plans, measured))]
    sd, ranks, noise = rank_error(records, tasks, CONFIGS, models, Problem(2, 1.0))
    assert ranks == 4 and sd == pytest.approx(math.sqrt(0.02 / 2)) and noise is None  # no repeats: no noise known
    # a rank without tables (measured 0) leaves the plan with one rank: nothing to pool
    lone = [PlanRecord(0, "neuroshard", plan=plans[0], measured=_measured([[1.0, 0.0]], [[0.0, 0.0]], [8, 0]))]
    assert rank_error(lone, tasks, CONFIGS, models, Problem(2, 1.0)) == (0.0, 0, None)


def test_rank_error_takes_out_the_ranks_own_measurement_noise():
    from neuroshard.eval.onpolicy import rank_error
    from neuroshard.planner.simulator import simulate
    from tests.planner.test_simulator import hand_models

    tasks = [Task((0, 1), (8, 16)), Task((2, 3, 4), (8, 8, 16))]
    plans = [Plan((), ((0,), (1,))), Plan((), ((0, 1), (2,)))]
    models = hand_models()
    est = [simulate(t.tables(CONFIGS), p, models, Problem(p.ndevices, 1.0)).compute for t, p in zip(tasks, plans)]
    # plan 0 measured twice: rank 0 at e^0.15 then e^0.05 of its estimate, rank 1 at e^-0.15 then e^-0.05.
    # Their means (e^+-0.1 x cosh 0.05; the cosh is shared) deviate +-0.1 from the plan's mean: 0.02.
    # The repeats' log ratios, +0.1 and -0.1, deviate +-0.1 over 1 degree of freedom: 0.02 holds twice one
    # measurement's variance, so noise^2 = 0.01 (10%). Plan 1, measured once: 2x on both ranks.
    reps0 = [[est[0][0] * math.exp(0.15), est[0][1] * math.exp(-0.15)],
             [est[0][0] * math.exp(0.05), est[0][1] * math.exp(-0.05)]]
    records = [PlanRecord(0, "neuroshard", plan=plans[0], measured=_measured(reps0, [[0.0, 0.0]] * 2, [8, 16])),
               PlanRecord(1, "neuroshard", plan=plans[1],
                          measured=_measured([[2 * est[1][0], 2 * est[1][1]]], [[0.0, 0.0]], [16, 16]))]
    sd, ranks, noise = rank_error(records, tasks, CONFIGS, models, Problem(2, 1.0))
    # the pool, 0.02 over 2 degrees of freedom, expects noise 0.01 / 2 repeats (plan 0) + 0.01 / 1 (plan 1)
    # = 0.015 of it: the model's own variance is (0.02 - 0.015) / 2 = 0.0025
    assert ranks == 4 and noise.independent_sd == pytest.approx(0.1) and sd == pytest.approx(0.05)
    # the ratios' mean, 0, is all the own noise explains (2 x 0.01 / 2 ranks = 0.01 > 0): nothing shared
    assert noise.common_sd == 0.0 and noise.plans == 1
    # noise beyond the whole pool: rank 0 at e^0.4 then e^-0.4 (rank 1 the opposite) averages to cosh 0.4 on
    # both ranks, deviations 0; the repeats' ratios +-0.8 give noise^2 = 1.28 / 2: the model's error is 0
    loud = [[est[0][0] * math.exp(0.4), est[0][1] * math.exp(-0.4)],
            [est[0][0] * math.exp(-0.4), est[0][1] * math.exp(0.4)]]
    rec = [PlanRecord(0, "neuroshard", plan=plans[0], measured=_measured(loud, [[0.0, 0.0]] * 2, [8, 16]))]
    sd, ranks, noise = rank_error(rec, tasks, CONFIGS, models, Problem(2, 1.0))
    assert sd == 0.0 and ranks == 2 and noise.independent_sd == pytest.approx(0.8)


def test_plan_error_records_the_plan_jobs_compute_noise_and_draws_the_floor():
    from dataclasses import replace

    from neuroshard.eval.onpolicy import plan_error
    from neuroshard.planner.costs.uncertainty import NoiseModel, share_in_band
    from neuroshard.planner.simulator import plan_cost_samples, simulate
    from tests.planner.test_simulator import hand_models

    tasks = [Task((0, 1), (8, 16))]
    plan = Plan((), ((0,), (1,)))
    models = replace(hand_models(), noise=NoiseModel(compute=0.3))  # the collection's floor: 30%
    est = simulate(tasks[0].tables(CONFIGS), plan, models, Problem(plan.ndevices, 1.0)).compute
    # measured twice: rank 0 at e^0.4 then e^0 of its estimate, rank 1 at e^0.2 then e^0. The ratios' logs
    # 0.4, 0.2: deviations +-0.1 over 1 degree of freedom hold twice the own variance, so own^2 = 0.01 (10%);
    # their mean 0.3 holds twice the shared variance plus the own variance / 2 ranks: (0.09 - 0.01) / 2 = 0.04
    # (20%). One compute measurement of the plan job: sqrt(0.01 + 0.04) = sqrt(0.05)
    reps = [[est[0] * math.exp(0.4), est[1] * math.exp(0.2)], [est[0], est[1]]]
    rec = PlanRecord(0, "neuroshard", plan=plan, repeat_costs=[10.0, 9.0],
                     measured=_measured(reps, [[0.0, 0.0]] * 2, [8, 16]))
    pe = plan_error([rec], tasks, CONFIGS, models, Problem(2, 1.0))
    assert (pe.compute_noise, pe.compute_common) == pytest.approx((0.1, 0.2))
    assert pe.compute_sd == pytest.approx(math.sqrt(0.05))
    # recorded, not drawn: the band before any widening is the floor's (and the per-rank error's)
    drawn = replace(models, noise=replace(models.noise_model, rank=pe.rank))
    smp = plan_cost_samples(tasks[0].tables(CONFIGS), plan, drawn, Problem(plan.ndevices, 1.0))
    assert pe.coverage_before == share_in_band([smp], [[c / pe.speed for c in (10.0, 9.0)]])
    # without the repeats there is nothing to split
    once = replace(rec, measured=_measured(reps[:1], [[0.0, 0.0]], [8, 16]))
    assert plan_error([once], tasks, CONFIGS, models, Problem(2, 1.0)).compute_sd is None


def test_model_error_reads_each_rounds_speed_from_the_anchors_under_each_set():
    from dataclasses import replace

    from neuroshard.eval.onpolicy import model_error
    from neuroshard.planner.costs.nets import linear_compute_model
    from neuroshard.planner.simulator import simulate
    from tests.planner.test_simulator import hand_models

    tasks = [Task((0, 1), (8, 16)), Task((2, 3, 4), (8, 8, 16))]
    plans = [Plan((), ((0,), (1,))), Plan((), ((0, 1), (2,)))]
    true = hand_models()
    speeds = (1.5, 1.2)  # the machine ran every part 1.5x the models in round 1, 1.2x in round 2

    def measured(tables, plan, **named):
        bd = simulate(tables.tables(CONFIGS), plan, true, Problem(2, 1.0))
        reps = [RepeatParts([s * c for c in bd.compute], [s * b for b in bd.bw_comm], [s * f for f in bd.fw_comm])
                for s in speeds]
        return PlanRecord(plan=plan, repeat_costs=[s * bd.cost for s in speeds], measured=replace(bd, repeats=reps),
                          **named)

    records = [measured(t, p, task=i, alg="neuroshard") for i, (t, p) in enumerate(zip(tasks, plans))]
    # the anchors: the same plans as if of other tasks, naming their tables
    anchors = [measured(t, p, task=0, alg="anchor:neuroshard", table_ids=t.table_ids, dims=t.dims)
               for t, p in zip(tasks, plans)]
    other = replace(true, compute=linear_compute_model(0.03, 0.5))
    _, got = model_error(records, tasks, CONFIGS, {"true": true, "other": other}, Problem(2, 1.0), anchors)
    # under the models the machine followed, each round's factors are its speed and the plans sit on their moved
    # estimates: no error, and a perfect model's floor of 0 (the speed taken out, the rounds agree)
    assert [f["cost"] for f in got["true"].factors] == pytest.approx(speeds)
    assert got["true"].mape == pytest.approx(0.0, abs=1e-9) and got["true"].floor == pytest.approx(0.0, abs=1e-9)
    assert got["true"].measurements == 4 and got["true"].anchors == 2
    # other models price the plans' compute apart from how the machine ran them: an error the speed does not take out
    assert got["other"].mape > 0.01
