"""The simulator's accuracy: the calibration of the predicted band, the leanings and the noise, by hand, and how
the report shows them."""

from neuroshard.eval.accuracy import band_coverage
from neuroshard.types.costs import CostBreakdown, CostSpread
from neuroshard.types.plan import Plan
from neuroshard.types.records import PlanRecord


def record(repeats, spread):
    est = CostBreakdown([10.0], [0.0], [0.0], spread=spread)
    return PlanRecord(task=0, alg="a", plan=Plan((), ((0,),)), estimate=est,
                      measured=CostBreakdown([10.0], [0.0], [0.0]), repeat_costs=list(repeats))


def test_band_coverage_counts_every_repeat_inside_q10_to_q90():
    band = CostSpread(mean=10.0, sd=1.0, q10=9.0, q90=11.0, samples=64)
    # 10 and 11 inside (edges count), 8 and 12 outside; the record without a spread is not counted
    share, n = band_coverage([record([8.0, 10.0], band), record([11.0, 12.0], band), record([10.0], None)])
    assert (share, n) == (0.5, 4)
    assert band_coverage([record([10.0], None)]) == (None, 0)


def test_the_expected_cost_mape_uses_the_predicted_distributions_mean():
    from neuroshard.eval.accuracy import simulator_accuracy

    # point estimate 10 ms, predicted mean 11 ms (the expected maximum of noisy ranks), measured 11 and 11
    band = CostSpread(mean=11.0, sd=1.0, q10=10.0, q90=12.0, samples=64)
    acc = simulator_accuracy([record([11.0, 11.0], band)])
    assert abs(acc.mape - 1 / 11) < 1e-9 and acc.mape_expected == 0.0
    assert (acc.calibration, acc.calibration_n) == (1.0, 2)
    assert simulator_accuracy([record([11.0], None)]).mape_expected is None


def test_rank_noise_reads_each_repeats_rank_totals_and_reaches_the_report():
    import math

    from neuroshard.eval.accuracy import Accuracy, simulator_accuracy
    from neuroshard.pipeline.report.report_models import accuracy_table
    from neuroshard.types.costs import RepeatParts

    # two ranks; totals (compute + bw + fw) 11, 9 then 10, 10: log ratios log 1.1, log 0.9
    reps = [RepeatParts([9.0, 7.0], [1.0, 1.0], [1.0, 1.0]), RepeatParts([8.0, 8.0], [1.0, 1.0], [1.0, 1.0])]
    measured = CostBreakdown([8.5, 7.5], [1.0, 1.0], [1.0, 1.0], repeats=reps)
    rec = PlanRecord(task=0, alg="a", plan=Plan((), ((0,), (1,))), estimate=CostBreakdown([8.0, 8.0], [1.0] * 2,
                     [1.0] * 2), measured=measured, repeat_costs=[11.0, 10.0])
    acc = simulator_accuracy([rec])
    lr = [math.log(1.1), math.log(0.9)]
    c = sum(lr) / 2
    ind2 = sum((x - c) ** 2 for x in lr) / 1 / 2
    assert acc.rank_noise.plans == 1
    assert abs(acc.rank_noise.independent_sd - math.sqrt(ind2)) < 1e-12
    assert abs(acc.rank_noise.common_sd - math.sqrt(max(0.0, (c * c - 2 * ind2 / 2) / 2))) < 1e-12
    assert Accuracy.from_json(acc.to_json()).rank_noise == acc.rank_noise
    text = accuracy_table(acc)
    assert f"varies by {100 * math.sqrt(ind2):.1f}% on its own" in text


def test_bias_by_alg_gives_each_algorithms_median_measured_over_estimated():
    from neuroshard.eval.accuracy import Accuracy, simulator_accuracy
    from neuroshard.pipeline.report.report_models import accuracy_table

    def rec(alg, task, measured_cost, fw, spread_mean=None):
        spread = None if spread_mean is None else CostSpread(spread_mean, 1.0, spread_mean - 1, spread_mean + 1, 64)
        # estimate: point cost 10 ms (compute 8 + fw 2), the forward exchange 2 ms
        return PlanRecord(task=task, alg=alg, plan=Plan((), ((0,),)),
                          estimate=CostBreakdown([8.0], [0.0], [2.0], spread=spread),
                          measured=CostBreakdown([8.0], [0.0], [fw]), repeat_costs=[measured_cost])

    records = [rec("search", 0, 12.0, 3.0, 11.0), rec("search", 1, 11.0, 2.5, 11.0), rec("search", 2, 13.0, 4.0, 11.0),
               rec("greedy", 0, 10.0, 2.0)]
    acc = simulator_accuracy(records)
    # search: cost 1.2, 1.1, 1.3 -> median 1.2; expected 12/11, 11/11, 13/11 -> 12/11; fw 1.5, 1.25, 2.0 -> 1.5
    assert acc.by_alg["search"]["cost"] == 1.2 and acc.by_alg["search"]["fw_comm"] == 1.5
    assert abs(acc.by_alg["search"]["expected"] - 12 / 11) < 1e-12
    assert acc.by_alg["greedy"] == {"cost": 1.0, "expected": None, "fw_comm": 1.0}
    assert Accuracy.from_json(acc.to_json()).by_alg == acc.by_alg
    assert "search 1.200 (expected cost 1.091, forward exchange 1.500); greedy 1.000 (expected cost -" in \
        accuracy_table(acc)


def test_bias_by_round_gives_each_rounds_median_over_the_plans_and_reaches_the_report():
    from neuroshard.eval.accuracy import Accuracy, bias_by_round, simulator_accuracy
    from neuroshard.pipeline.report.report_models import accuracy_table
    from neuroshard.types.costs import RepeatParts

    def rec(task, rounds):
        # estimate: compute 8 + bw 0 + fw 2 = 10 ms on one rank; each round measures (compute, fw)
        reps = [RepeatParts([c], [0.0], [f]) for c, f in rounds]
        measured = CostBreakdown([sum(c for c, _ in rounds) / len(rounds)], [0.0],
                                 [sum(f for _, f in rounds) / len(rounds)], repeats=reps)
        return PlanRecord(task=task, alg="a", plan=Plan((), ((0,),)), estimate=CostBreakdown([8.0], [0.0], [2.0]),
                          measured=measured, repeat_costs=[c + f for c, f in rounds])

    # round 1: costs 11, 10, 9 -> 1.0; compute 9/8, 8/8, 7/8 -> 1.0; fw 2/2 -> 1.0
    # round 2: costs 8, 9, 8 (a faster machine) -> 0.8; compute 6/8, 7/8, 6/8 -> 0.75; fw 2/2 -> 1.0
    records = [rec(0, [(9.0, 2.0), (6.0, 2.0)]), rec(1, [(8.0, 2.0), (7.0, 2.0)]), rec(2, [(7.0, 2.0), (6.0, 2.0)])]
    rounds = bias_by_round(records)
    assert rounds == [{"cost": 1.0, "compute": 1.0, "bw_comm": None, "fw_comm": 1.0},
                      {"cost": 0.8, "compute": 0.75, "bw_comm": None, "fw_comm": 1.0}]
    acc = simulator_accuracy(records)
    assert acc.by_round == rounds and Accuracy.from_json(acc.to_json()).by_round == rounds
    assert "round 1 1.000 (compute 1.000, bw -, fw 1.000); round 2 0.800 (compute 0.750, bw -, fw 1.000)" in \
        accuracy_table(acc)
    # one round says nothing about drift
    assert bias_by_round([rec(0, [(9.0, 2.0)])]) == []


def test_rank_spread_compares_the_largest_skew_estimated_and_measured_and_reaches_the_report():
    from neuroshard.eval.accuracy import Accuracy, rank_spread, simulator_accuracy
    from neuroshard.pipeline.report.report_models import accuracy_table

    def rec(alg, task, est_skew, got_skew):
        est = CostBreakdown([10.0, 10.0], [1.0, 1.0], [1.0, 1.0], skew=est_skew)
        got = CostBreakdown([10.0, 10.0], [1.0, 1.0], [1.0, 1.0], skew=got_skew)
        return PlanRecord(task=task, alg=alg, plan=Plan((), ((0,), (1,))), estimate=est, measured=got,
                          repeat_costs=[12.0])

    # largest skews, estimated / measured: 0.5 / 2.0 and 0.2 / 1.0 (neuroshard), 3.0 / 2.0 (greedy); the
    # record without a measured skew is left out
    records = [rec("neuroshard", 0, [0.0, 0.5], [2.0, 0.0]), rec("neuroshard", 1, [0.2, 0.0], [0.0, 1.0]),
               rec("greedy", 0, [3.0, 0.0], [0.0, 2.0]), rec("greedy", 1, [1.0, 0.0], None)]
    sp = rank_spread(records)
    assert (sp["plans"], sp["estimated"], sp["measured"]) == (3, 0.5, 2.0)
    assert abs(sp["mae"] - (1.5 + 0.8 + 1.0) / 3) < 1e-12 and abs(sp["under"] - 2 / 3) < 1e-12
    assert sp["by_alg"] == {"neuroshard": {"estimated": 0.35, "measured": 1.5},
                            "greedy": {"estimated": 3.0, "measured": 2.0}}
    assert rank_spread(records[3:]) is None
    acc = simulator_accuracy(records)
    assert acc.rank_spread == sp and Accuracy.from_json(acc.to_json()).rank_spread == sp
    text = accuracy_table(acc)
    assert "lie 0.50 ms apart in the estimates and 2.00 ms on the hardware (medians over 3 plans" in text
    assert "neuroshard 0.35 / 1.50 ms; greedy 3.00 / 2.00 ms" in text
