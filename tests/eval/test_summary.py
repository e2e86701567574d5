"""The comparison's summary: the headroom of a choice among the plans and the prediction-powered verdicts, by hand."""

from neuroshard.types.costs import CostBreakdown
from neuroshard.types.plan import Plan
from neuroshard.types.records import PlanRecord


def test_headroom_pairs_the_algorithms_by_task_and_reaches_the_summary_and_report():
    from neuroshard.eval.summary import Summary, hardware_summary, summarize
    from neuroshard.pipeline.report.report_comparison import headroom_lines

    def headroom(records, algs):
        return summarize(records, algs, 3, cost_key="cost").headroom

    def rec(alg, task, repeats):
        est = CostBreakdown([10.0], [0.0], [0.0])
        return PlanRecord(task=task, alg=alg, plan=Plan((), ((0,),)), estimate=est,
                          measured=CostBreakdown([float(sum(repeats) / len(repeats))], [0.0], [0.0]),
                          repeat_costs=list(repeats))

    # the other algorithm is truly 20% cheaper on task 1 and level on task 0; task 2 has no plan of it
    records = [rec("neuroshard", 0, [10.0, 10.0]), rec("other", 0, [10.0, 10.0]),
               rec("neuroshard", 1, [10.0, 10.0]), rec("other", 1, [8.0, 8.0]), rec("neuroshard", 2, [5.0, 5.0])]
    h = headroom(records, ["neuroshard", "other"])
    assert abs(h.gain - 0.1) < 1e-12 and abs(h.in_sample - 0.1) < 1e-12 and h.tasks == 2
    assert headroom(records, ["other"]) is None  # no reference
    # plans measured a different number of rounds: no headroom
    assert headroom(records[:3] + [rec("other", 1, [8.0])], ["neuroshard", "other"]) is None
    hw = hardware_summary(records, ["neuroshard", "other"], 3)
    assert hw.headroom == h and Summary.from_json(hw.to_json()).headroom == h
    [line] = headroom_lines(hw)
    assert "among the 2 algorithms' by the mean of half of the 2 rounds" in line and "gains +10.0%" in line
    assert headroom_lines(None) == []


def test_prediction_powered_verdicts_use_the_unmeasured_tasks_estimates_and_reach_the_report():
    from neuroshard.eval.intervals import paired_difference, powered_difference
    from neuroshard.eval.summary import Summary, hardware_summary
    from neuroshard.pipeline.report.report_comparison import power_lines

    def rec(alg, task, estimate, repeats=None):
        measured = None if repeats is None else CostBreakdown([float(sum(repeats) / len(repeats))], [0.0], [0.0])
        return PlanRecord(task=task, alg=alg, plan=Plan((), ((0,),)), estimate=CostBreakdown([estimate], [0.0], [0.0]),
                          measured=measured, repeat_costs=None if repeats is None else list(repeats))

    # the other algorithm costs 10 + u ms on task u's neuroshard's 10 ms, predicted as 10 + 2u
    u = [0.5, 1.0, 1.5, 2.0, 0.0]
    records = [r for t, x in enumerate(u) for r in (rec("neuroshard", t, 10.0, [10.0, 10.2]),
                                                      rec("other", t, 10.0 + 2 * x, [10.0 + x, 10.1 + x]))]
    unmeasured = [r for t, x in enumerate([1.0, 2.0, 3.0, 0.5] * 5)
                  for r in (rec("neuroshard", t, 10.0), rec("other", t, 10.0 + 2 * x))]
    hw = hardware_summary(records, ["neuroshard", "other"], 5, unmeasured)
    vs = hw.row("other").vs_reference
    a = [[10.0, 10.2]] * 5
    b = [[10.0 + x, 10.1 + x] for x in u]
    want, weight = powered_difference(a, b, [2 * x for x in u], [2 * x for x in [1.0, 2.0, 3.0, 0.5] * 5])
    assert vs.diff_ms == want and vs.weight == weight and vs.plain == paired_difference(a, b)
    # weight 0.5 / (1 + 5 / 20) = 0.4; measured mean 0.95, predictions 2.0 here and 3.25 unmeasured: 1.45
    assert abs(weight - 0.4) < 1e-9 and abs(want.mean - 1.45) < 1e-9
    assert abs(hw.row("other").neuroshard_gain - 1.45 / 11.05) < 1e-9  # the powered gain, not 0.95 / 11.05
    assert vs.power.predicted == 20 and vs.power.raw_task_sd is not None
    assert Summary.from_json(hw.to_json()).row("other").vs_reference == vs
    # without unmeasured tasks the verdicts are the plain ones
    plain = hardware_summary(records, ["neuroshard", "other"], 5).row("other").vs_reference
    assert plain.diff_ms == vs.plain and plain.plain is None and plain.power.predicted == 0
    lines = power_lines(hw)
    assert "beyond what the simulator predicts" in lines[0] and "on 20 more tasks of the same generator" in lines[1]
    assert "other +8.6% [" in lines[1]  # 0.95 / 11.05 and "(weight 0.40)" in lines[1]
    assert len(power_lines(Summary.from_json(hardware_summary(records, ["neuroshard", "other"], 5).to_json()))) == 1
