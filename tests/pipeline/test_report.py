"""The report's comparison: intervals beside the means and verdict words read from the intervals."""

import pytest

from neuroshard.eval.intervals import Interval
from neuroshard.eval.summary import AlgorithmRow, Summary, VsReference
from neuroshard.pipeline.report.report_comparison import comparison_table, verdict_lines


def _row(alg, mean, ci, gain=None, diff=None, verdict=None):
    row = AlgorithmRow(alg, valid=3, tasks=3, oom=0, invalid=0, average=mean, mean_common=mean, median_search_ms=None,
                       mean_search_ms=None, mean_splits=None, mean_common_ci=ci, neuroshard_gain=gain)
    if verdict:
        row.vs_reference = VsReference(Interval(diff["hi"] / 2 + diff["lo"] / 2, diff["lo"], diff["hi"], 3, 1), verdict,
                                       [diff["lo"] / mean, diff["hi"] / mean])
    return row


def _summary(rows, verdicts):
    return Summary(tasks=3, common_tasks=3, cost="cost", reference="neuroshard", algorithms=rows,
                   ranking=[], neuroshard_beats={}, verdicts=verdicts)


def test_verdict_words_follow_the_intervals():
    hw = _summary([
        _row("neuroshard", 10.0, [9.0, 11.0]),
        _row("greedy_a", 12.0, [11.0, 13.0], 1 / 6, {"lo": 1.0, "hi": 3.0}, "beats"),
        _row("greedy_b", 10.5, [9.0, 12.0], 0.5 / 10.5, {"lo": -0.5, "hi": 1.5}, "no significant difference"),
        _row("greedy_c", 9.0, [8.5, 9.5], -1 / 9, {"lo": -1.5, "hi": -0.5}, "loses to")],
        {"greedy_a": "beats", "greedy_b": "no significant difference", "greedy_c": "loses to"})
    table, verdicts = comparison_table(None, hw)
    assert "| greedy_b | - |  |  | 10.50 [9.00, 12.00] | +4.8% [-4.8%, +14.3%] | no significant difference |" in table
    assert "| greedy_a |" in table and "| beats |" in table and "| loses to |" in table
    [line] = verdict_lines(verdicts)
    assert line == ("- hardware: NeuroShard beats greedy_a; shows no significant difference from greedy_b; "
                    "loses to greedy_c (95% intervals of the paired differences).")
    sim_all = {"simulator": {"a": "beats", "b": "beats"}}
    assert verdict_lines(sim_all)[0].startswith("- simulator: NeuroShard beats every baseline (")


def test_torchrec_section_reads_step_7_and_says_how_noisy_it_is(tmp_path):
    import json

    from neuroshard.pipeline.report.report_torchrec import torchrec_lines
    from neuroshard.torchrec.training_eval import summarize

    assert torchrec_lines(tmp_path) == ([], None)  # step 7 did not run: no section
    costs = {(t, a): [10.0 * (t + 1) * f, 10.5 * (t + 1) * f] for t in range(3) for a, f in (("neuroshard", 1.0),
                                                                                           ("greedy", 1.2))}
    (tmp_path / "torchrec").mkdir()
    (tmp_path / "torchrec" / "summary.json").write_text(json.dumps(summarize(costs, "neuroshard",
                                                                             ["neuroshard", "greedy"])))
    (tmp_path / "torchrec" / "config.json").write_text(json.dumps(
        {"training": {"problem": {"ndevices": 4096}, "device": "cpu", "warmup": 3, "iters": 20, "repeats": 2},
         "batch_size": 4096}))  # eval_torchrec.py's config: the device count inside the problem
    lines, summary = torchrec_lines(tmp_path)
    text = "\n".join(lines)
    assert summary["reference"] == "neuroshard"
    assert "| greedy |" in text and "neuroshard beats it" in text and "1.200 [1.200, 1.200]" in text
    assert "two sharding groups" in text
    assert "4096 ranks shared" in text and "same plan trained in two rounds differed by 4.9%" in text
    assert "runtime model" not in text  # step 7g did not run
    # step 7g's check of the runtime model, with the rounds' speed from step 7f's anchors
    check = {"plans": 6, "mape": 12.5, "ratio": 1.1, "by_alg": {},
             "rounds": {"anchors": 4, "factors": [{"cost": 1.05}, {"cost": 0.95}], "measurements": 12, "mape": 0.06,
                        "raw_mape": 0.09, "mape_mean": 0.04, "floor": 0.05, "floor_mean": 0.025}}
    (tmp_path / "torchrec" / "runtime_model_error.json").write_text(json.dumps({"model": "m.json", "check": check}))
    text = "\n".join(torchrec_lines(tmp_path)[0])
    assert "on these 6 trained plans: step-time MAPE 12.5%, predicted / measured 1.100" in text
    assert "ran at 1.050x, 0.950x the model's steps" in text
    assert "MAPE **6.0%** per measurement (a perfect model: 5.0%, 1.20x), 9.0% unmoved" in text
    assert "**4.0%** for the plans' means (a perfect model: 2.5%, 1.60x)" in text
    check["rounds"]["ratio_spread"] = [0.9, 1.5]  # and how firm the ratio is over the anchors resampled
    (tmp_path / "torchrec" / "runtime_model_error.json").write_text(json.dumps({"model": "m.json", "check": check}))
    text = "\n".join(torchrec_lines(tmp_path)[0])
    assert "(a perfect model: 5.0%, 1.20x); 0.90-1.50x with the anchors resampled, 10th-90th percentile, 9.0% " \
        "unmoved" in text
    assert "By algorithm" not in text  # one algorithm or none: nothing more to say


def test_runtime_check_lines_per_algorithm_and_step(tmp_path):
    """Step 7g:oversize's check of the new set's plans: per algorithm, each predicted / measured ratio."""
    import json

    from neuroshard.pipeline.report.report_torchrec import runtime_check_lines

    row = lambda ratio: {"plans": 3, "mape": 4.0, "ratio": ratio}  # noqa: E731
    check = {"plans": 6, "mape": 4.0, "ratio": 0.97, "by_alg": {"neuroshard[torchrec]": row(0.95), "greedy": row(0.99)}}
    (tmp_path / "e.json").write_text(json.dumps({"model": "m.json", "check": check}))
    [_, line] = runtime_check_lines(tmp_path / "e.json", "7g:oversize")
    assert "on these 6 trained plans: step-time MAPE 4.0%, predicted / measured 0.970 (step 7g:oversize)." in line
    assert line.endswith("By algorithm, predicted / measured: neuroshard[torchrec] 0.950, greedy 0.990.")
    assert runtime_check_lines(tmp_path / "missing.json", "7g:oversize") == []


def test_power_line_from_the_median_noise_of_the_comparisons():
    from types import SimpleNamespace as N

    from neuroshard.eval.power import Components
    from neuroshard.pipeline.report.report_comparison import power_lines

    comps = [Components(0.08, 0.08, 10, 2), Components(0.06, 0.10, 10, 2), Components(0.10, 0.06, 10, 2)]
    hw = N(algorithms=[N(vs_reference=None)] + [N(vs_reference=N(power=c)) for c in comps])
    # medians 8% and 8%: 2.802 * sqrt(0.0064 / 10 + 0.0064 / 20) = 8.7%; (2.802 / 0.03)^2 * 0.0096 = 83.7 -> 84
    (line,) = power_lines(hw)
    assert "8.0% from task to task and by 8.0% between repeats" in line
    assert "10 tasks detect about 8.7%" in line and line.endswith("3% difference needs 84 tasks.")
    assert power_lines(hw, study=(70, 4))[0].endswith("needs 84 tasks (`--preset study` runs 70 x 4).")
    assert power_lines(N(algorithms=[N(vs_reference=None)])) == [] and power_lines(None) == []


def test_drift_lines_give_the_change_since_the_calibration(tmp_path):
    import json

    from neuroshard.formats.plan_file import read_plans, write_plans
    from neuroshard.pipeline.report.report_drift import drift_lines
    from neuroshard.types.costs import CostBreakdown
    from neuroshard.types.plan import Plan
    from neuroshard.types.records import PlanRecord
    from tests.eval.test_drift import _write

    # ranks: compute [1, 2], bw [1, 1], fw [1, 1] (estimate 4, already calibrated); after the evaluation the
    # machine runs compute 2.2x, fw 0.55x, bw 1.1x its recorded times, before it ran 1.1x, 1.1x, 1.1x: the
    # change is 2, 0.5, 1 -> totals [3.5, 5.5], cost 5.5 = measured (MAPE 0)
    _write(tmp_path, 2.2, 0.55, 1.1)
    rec = PlanRecord(0, "a", plan=Plan((), ((0,), (1,))), estimate=CostBreakdown([1.0, 2.0], [1.0, 1.0], [1.0, 1.0]),
                     repeat_costs=[5.5, 5.5])
    write_plans(tmp_path / "results.json", [rec])
    calib = {"compute": 1.1, "fw_comm": 1.1, "bw_comm": 1.1, "samples": {"compute": 2, "fw_comm": 4, "bw_comm": 4}}
    (tmp_path / "config.json").write_text(json.dumps({"calibration_factors": calib}))
    lines, fig = drift_lines(tmp_path, read_plans(tmp_path / "results.json"))
    assert fig["scaled_plan_mape"] == pytest.approx(0.0, abs=1e-9) and fig["calibration"] == calib
    assert "just before planning, 2 compute shards and 4 per-rank" in lines[0]
    assert "changed by 2.00x (compute), 0.50x (fw) and 1.00x (bw)" in lines[0]
    # without a calibration the factors themselves scale the estimate: [2.2 + 1.1 + 0.55, 4.4 + ...] -> 6.05
    (tmp_path / "config.json").write_text(json.dumps({}))
    lines, fig = drift_lines(tmp_path, read_plans(tmp_path / "results.json"))
    assert fig["calibration"] is None and fig["scaled_plan_mape"] == pytest.approx(0.55 / 5.5)
    assert lines[0].startswith("Machine drift: right after the evaluation")


def test_anchor_lines_scale_the_estimates_by_the_anchors_speed(tmp_path):
    from neuroshard.eval.drift import ANCHORS
    from neuroshard.formats.plan_file import read_plans, write_plans
    from neuroshard.pipeline.report.report_drift import anchor_lines
    from tests.eval.test_drift import _anchor

    # the anchors ran compute at 0.5x their estimate before and after (fw and bw 1x); the evaluation's plan:
    # estimate compute [1, 2] + bw [1, 1] + fw [1, 1] -> 4 ms; scaled: [0.5 + 2, 1 + 2] -> 3 ms = measured
    for name in ANCHORS.values():
        (tmp_path / name).mkdir()
        write_plans(tmp_path / name / "results.json", [_anchor(0, 0.5, 1.0, 3.0), _anchor(1, 0.5, 1.0, 3.0)])
    assert anchor_lines(tmp_path, None) == ([], None)  # no evaluation results
    write_plans(tmp_path / "results.json", [_anchor(0, 0.5, 1.0, 3.0)])
    lines, fig = anchor_lines(tmp_path, read_plans(tmp_path / "results.json"))
    assert fig["scaled_plan_mape"] == pytest.approx(0.0, abs=1e-12) and fig["plans"] == 2
    assert fig["evaluation"]["cost"] == 0.75 and fig["factors"]["compute"] == pytest.approx(0.5)
    assert "the 2 on-policy plans of training tasks" in lines[0]
    assert "took 0.750x and 0.750x their estimates (medians; compute 0.500x and 0.500x)" in lines[0]
    assert "the plan-cost MAPE is 0.0%" in lines[0]


def test_drift_and_anchor_lines_measure_the_change_from_the_plan_speed_the_estimates_include(tmp_path):
    import json

    from neuroshard.eval.drift import ANCHORS
    from neuroshard.formats.plan_file import read_plans, write_plans
    from neuroshard.pipeline.report.report_drift import anchor_lines, drift_lines
    from tests.eval.test_drift import _anchor, _write

    # the evaluation's estimate (compute [1, 2], bw [1, 1], fw [1, 1]: 4 ms) includes the calibration 1.1x and
    # the plan speed before it, compute 0.5x; the kernel samples after it ran compute 1.1x, fw 1.1x, bw 2.2x:
    # the change from the estimate's speed is compute 1.1 / (1.1 x 0.5) = 2, fw 1, bw 2
    # -> totals [2 + 2 + 1, 4 + 2 + 1] = 7 = measured (MAPE 0)
    _write(tmp_path, 1.1, 1.1, 2.2)
    write_plans(tmp_path / "results.json", [_anchor(0, 2.0, 1.0, 7.0)])
    calib = {"compute": 1.1, "fw_comm": 1.1, "bw_comm": 1.1, "samples": {"compute": 2, "fw_comm": 4, "bw_comm": 4}}
    speed = {"compute": 0.5, "fw_comm": 1.0, "bw_comm": 1.0, "plans": 2}
    (tmp_path / "config.json").write_text(json.dumps({"calibration_factors": calib, "plan_speed_factors": speed}))
    lines, fig = drift_lines(tmp_path, read_plans(tmp_path / "results.json"))
    assert fig["scaled_plan_mape"] == pytest.approx(0.0, abs=1e-9) and fig["plan_speed"] == speed
    assert "changed by 2.00x (compute), 1.00x (fw) and 2.00x (bw) from the estimates' speed" in lines[0]
    assert "(`--plan_speed`: 0.50x (compute), 1.00x (fw) and 1.00x (bw))" in lines[0]
    # the anchors: compute 0.5x before (the plan speed) and 2x after -> sqrt(0.5 x 2) / 0.5 = 2x the estimates
    # the evaluation's include: [2 + 1 + 1, 4 + 1 + 1] -> 6 ms against the measured 7
    for name, compute in zip(ANCHORS.values(), (0.5, 2.0)):
        (tmp_path / name).mkdir()
        write_plans(tmp_path / name / "results.json", [_anchor(0, compute, 1.0, 4.0)])
    lines, fig = anchor_lines(tmp_path, read_plans(tmp_path / "results.json"))
    assert fig["plan_speed"] == speed and fig["scaled_plan_mape"] == pytest.approx(1 / 7)
    assert "include the speed before it (`--plan_speed`: the models scaled by compute 0.500x" in lines[0]
    assert "before to after (compute 2.000x, fw 1.000x, bw 1.000x), the plan-cost MAPE is 14.3%" in lines[0]


def test_oversize_section_compares_the_algorithms_that_planned_and_counts_what_neuroshard_missed(tmp_path):
    import json

    from neuroshard.eval.summary import summarize
    from neuroshard.formats.plan_file import write_plans
    from neuroshard.pipeline.report.report_oversize import oversize_lines
    from neuroshard.types.costs import CostBreakdown
    from neuroshard.types.plan import Plan
    from neuroshard.types.records import PlanRecord

    assert oversize_lines(tmp_path) == ([], None)  # the steps did not run: no section

    def rec(task, alg, cost):
        if cost is None:
            return PlanRecord(task, alg, status="oom", message="fits on no device")
        return PlanRecord(task, alg, plan=Plan((), ((0,),)), estimate=CostBreakdown([cost], [0.0], [0.0]))

    # three tasks: NeuroShard 10, 20, no plan; TorchRec 12, 22, 30; DreamShard none
    records = [rec(0, "neuroshard", 10.0), rec(1, "neuroshard", 20.0), rec(2, "neuroshard", None),
               rec(0, "torchrec", 12.0), rec(1, "torchrec", 22.0), rec(2, "torchrec", 30.0),
               *(rec(t, "dreamshard", None) for t in range(3))]
    sim = tmp_path / "oversize" / "sim"
    sim.mkdir(parents=True)
    (tmp_path / "oversize" / "dataset").mkdir()
    write_plans(sim / "plans.json", records)
    (sim / "summary.json").write_text(json.dumps(summarize(records, ["neuroshard", "torchrec", "dreamshard"],
                                                           3).to_json()))
    (tmp_path / "oversize" / "dataset" / "config.json").write_text(json.dumps(
        {"num_tables": 100, "large_tables": 8, "large_rows": 4_000_000, "hot_tables": 8, "hot_pooling": 150.0}))
    lines, fig = oversize_lines(tmp_path)
    text = "\n".join(lines)
    assert "3 tasks over a second synthetic dataset: 100 regular tables, 8 large ones (up to 4.0 M rows" in text
    assert "(so dreamshard planned none of these tasks)" in text
    # the common tasks are 0 and 1 (DreamShard left out): 15 against 17 ms
    assert "| torchrec | 17.00 [" in text and "| dreamshard | - |" in text and "| 0 / 3 | - |" in text
    assert "- Tasks torchrec planned and NeuroShard did not: 1 (2)." in text
    assert fig["planned_none"] == ["dreamshard"] and fig["unplanned_by_neuroshard"] == {"torchrec": [2]}
    assert fig["torchrec_train"] is None and "step 7f" not in text and fig["round_calibration"] is None
    # with the new set's own anchors measured in every round of step 6b:oversize: the rounds' speed and the moved error
    from neuroshard.eval.round_calibration import RoundCalibration
    from neuroshard.formats.side_files import write_side_file

    (tmp_path / "oversize" / "hw").mkdir()
    write_side_file(tmp_path / "oversize" / "hw" / "round_calibration.json",
                    RoundCalibration(4, [{"cost": 0.9}, {"cost": 0.8}], 12, mape=0.1, raw_mape=0.2, floor=0.08,
                                     ratio_spread=[1.1, 1.6]))
    lines, fig = oversize_lines(tmp_path)
    text = "\n".join(lines)
    # the ratio 0.1 / 0.08 and its spread with the anchors resampled
    assert ("per measurement (a perfect model moved the same way: 8.0%, 1.25x; 1.10-1.60x with the anchors "
            "resampled, 10th-90th percentile), 20.0% unmoved") in text
    assert ("- Per-round calibration: 4 plans of the second dataset's anchor tasks (step 5e:oversize's, "
            "never the evaluation's) were measured in each of the 2 rounds of step 6b:oversize") in text
    assert "ran them at 0.900x, 0.800x their estimates" in text and "MAPE **10.0%** per measurement" in text
    assert fig["round_calibration"]["anchors"] == 4
    # with phase 7: the tasks trained in TorchRec, neuroshard[torchrec] against TorchRec's full planner
    from neuroshard.torchrec.training_eval import summarize as training_summary

    costs = {(t, a): [10.0 * f, 10.0 * f] for t in range(2) for a, f in (("neuroshard[torchrec]", 1.0),
                                                                         ("torchrec_full", 1.5))}
    (tmp_path / "oversize" / "torchrec").mkdir()
    (tmp_path / "oversize" / "torchrec" / "summary.json").write_text(json.dumps(
        training_summary(costs, "neuroshard[torchrec]", ["neuroshard[torchrec]", "torchrec_full"])))
    lines, fig = oversize_lines(tmp_path)
    text = "\n".join(lines)
    assert "trained with TorchRec (step 7f:oversize)" in text and "| torchrec_full" in text
    assert "1.500 [1.500, 1.500]" in text
    assert fig["torchrec_train"]["reference"] == "neuroshard[torchrec]"


def test_round_lines_price_the_plans_with_the_new_types_on_their_own(tmp_path):
    from dataclasses import replace

    from neuroshard.eval.round_calibration import RoundCalibration
    from neuroshard.formats.plan_file import write_plans
    from neuroshard.formats.side_files import write_side_file
    from neuroshard.pipeline.report.report_drift import round_lines
    from neuroshard.types.plan import Plan, Spread
    from tests.eval.test_round_calibration import _rescaled

    write_side_file(tmp_path / "round_calibration.json",
                    RoundCalibration(1, [{"cost": 1.0}, {"cost": 1.0}], 4, mape=0.05, raw_mape=0.05, floor=0.05))
    # one anchor run at its estimates in both rounds: factors 1.0; a row-wise plan (estimate 3.0) measured
    # 3.3 and 3.0: errors 0.3 / 3.3 and 0, MAPE 4.5%; floor d / sqrt(2), d = 0.3 / 3.15: 6.7%, ratio 0.675 (0.67x).
    # The table-wise plan (measured 6.0 twice) is left out
    rows = Plan((), ((0,), ()), (Spread(1, "row_wise", (0, 1)),))
    write_plans(tmp_path / "results.json", [replace(_rescaled("torchrec_full", 0, [3.3, 3.0]), plan=rows),
                                            _rescaled("neuroshard", 0, [6.0, 6.0])])
    lines, fig = round_lines(tmp_path)
    assert "new types" not in lines[0] and "new_types" not in fig  # no anchors' measurements: nothing to move by
    write_plans(tmp_path / "round_anchors.json", [_rescaled("anchor:neuroshard", 5, [3.0, 3.0])])
    lines, fig = round_lines(tmp_path)
    assert ("Among them, the plans with the new types (a table row-wise, table-row-wise or data-parallel; "
            "torchrec_full 1), moved the same way: **4.5%** per measurement (a perfect model moved the same way: 6.7%, "
            "0.67x)") in lines[0]
    assert fig["new_types"]["mape"] == pytest.approx(0.3 / 3.3 / 2)
    assert fig["new_types"]["floor"] == pytest.approx(0.3 / 3.15 / 2 ** 0.5)
    # where the error sits: the row-wise plan's parts at 3.3 / 3.0 and 3.0 / 3.0 of the estimate in the two
    # rounds (median 1.05), the table-wise plan's at 6.0 / 3.0 in both
    assert ("By part, measured over the moved estimate (median over measurements, summed over the ranks): the "
            "new-type plans' compute 1.05x, forward all-to-all 1.05x, backward all-to-all 1.05x; the other plans' "
            "compute 2.00x, forward all-to-all 2.00x, backward all-to-all 2.00x; the new-type plans' compute by "
            "rank 1.05x, 1.05x.") in lines[0]
    assert fig["new_types"]["compute_by_rank"] == pytest.approx([1.05, 1.05])
    assert "collectives moved by" not in lines[0]
    # rounds whose anchors had spread tables: their collectives' own speed is named
    write_side_file(tmp_path / "round_calibration.json", RoundCalibration(
        1, [{"cost": 1.0, "fw_collectives": 1.05, "bw_collectives": 1.2}, {"cost": 1.0, "bw_collectives": 0.9}], 4,
        mape=0.05, raw_mape=0.05, floor=0.05))
    lines, _ = round_lines(tmp_path)
    assert ("The spread tables' collectives moved by the anchors' own collectives' speed, not their exchange's: "
            "forward 1.050x, -, backward 1.200x, 0.900x by round.") in lines[0]
    # an anchor with spread tables but too few of them for a factor of their own: the report says so
    write_side_file(tmp_path / "round_calibration.json",
                    RoundCalibration(1, [{"cost": 1.0}, {"cost": 1.0}], 4, mape=0.05, raw_mape=0.05, floor=0.05))
    write_plans(tmp_path / "round_anchors.json", [_rescaled("anchor:neuroshard", 5, [3.0, 3.0]),
                                                  replace(_rescaled("anchor:torchrec_full", 6, [3.0, 3.0]), plan=rows)])
    lines, _ = round_lines(tmp_path)
    assert ("The spread tables' collectives moved by their exchange's factor: 1 of the anchors had spread tables, "
            "fewer than the 3 whose median a factor of their own needs.") in lines[0]


def test_collective_model_rows_and_the_spread_tables_chosen(tmp_path):
    from neuroshard.pipeline.report.report_spread import collective_check, collective_lines, spread_choices
    from neuroshard.planner.costs.collective_model import CollectiveFit, CollectiveModel
    from neuroshard.types.costs import CostBreakdown
    from neuroshard.types.plan import Plan, Spread
    from neuroshard.types.records import PlanRecord

    assert collective_lines(tmp_path, []) == []
    CollectiveModel(4, {"all_reduce": CollectiveFit("power", [0.0, 1.0], 80, {"linear": 12.0, "power": 6.0},
                                                    4.0),
                        "all_gather@2": CollectiveFit("linear", [0.1, 1.0], 40, {"linear": 9.0}, 12.0)}).save(
        tmp_path / "collectives_4.json")
    rows = []
    text = "\n".join(collective_lines(tmp_path, rows))
    assert "| all_reduce (4 ranks, power) | 80 | - | 6.0% | - | 4.0% | 1.50 |" in text
    assert "| all_gather (each host's 2 of 4 ranks, linear) | 40 | - | 9.0% | - | 12.0% | 0.75 |" in text
    assert rows == [{"model": "all_reduce (4 ranks)", "form": "power", "samples": 80, "mape": 0.06,
                     "noise_floor": 0.04},
                    {"model": "all_gather (each host's 2 of 4 ranks)", "form": "linear", "samples": 40, "mape": 0.09,
                     "noise_floor": 0.12}]
    every = (0, 1)
    recs = [PlanRecord(0, "neuroshard", plan=Plan((), ((0,), ()), (Spread(1, "row_wise", every),
                                                                  Spread(2, "data_parallel", every)))),
            PlanRecord(1, "neuroshard", plan=Plan((), ((0,), ()), (Spread(1, "row_wise", every),))),
            PlanRecord(0, "torchrec", plan=Plan((), ((0,), (1,))))]
    assert spread_choices(recs) == ["- Row-wise, table-row-wise and data-parallel tables: neuroshard in 2 plans "
                                    "(1 data_parallel, 2 row_wise)."]
    assert spread_choices(recs[2:]) == [] and spread_choices(None) == []
    # the collective model on the measured plans: per rank forward + backward, estimated 3 and 5 against 4 and 4
    two = [1.0, 1.0]
    rec = PlanRecord(0, "neuroshard", plan=recs[0].plan,
                     estimate=CostBreakdown(two, two, two, collectives=[[1.0, 2.0], [2.0, 3.0]]),
                     measured=CostBreakdown(two, two, two, collectives=[[1.0, 3.0], [1.0, 3.0]]))
    assert collective_check([rec, recs[2]]) == ["- The collectives of those plans (1 measured, 2 ranks): estimated "
                                                "4.00 ms a rank, measured 4.00 ms (MAPE 25.0%)."]
    assert collective_check(recs) == []


def test_model_table_gives_the_floor_ratio_its_interval_where_the_metrics_have_one(tmp_path):
    import json

    from neuroshard.pipeline.report.report_models import model_table

    (tmp_path / "models").mkdir()
    metrics = {"num_samples": 100, "metrics": {"test": {"mse": 1.0, "mape": 0.12, "spearman": 0.9}},
               "noise_floor": {"mean": 0.1, "median": 0.08}}
    path = tmp_path / "models" / "compute_metrics.json"
    path.write_text(json.dumps(metrics))
    text, rows = model_table(tmp_path)
    assert "| compute | 100 | 1 | 12.0% | 0.900 | 10.0% (8.0%) | 1.20 |" in text and "In brackets" not in text
    path.write_text(json.dumps({**metrics, "mape_over_floor": {"ratio": 1.2, "low": 0.95, "high": 1.5}}))
    text, rows = model_table(tmp_path)
    assert "| compute | 100 | 1 | 12.0% | 0.900 | 10.0% (8.0%) | 1.20 (0.95-1.50) |" in text
    assert "In brackets, the ratio's 95% interval" in text and rows[0]["mape_vs_noise"] == pytest.approx(1.2)


def test_model_table_adds_the_world_models_errors_per_size_and_on_the_held_out_ones(tmp_path):
    """Step 4k's metrics (`train_comm_cost_model.py --world 1`): each trained size's test MAPE against its floor,
    each held-out size's with the ratio's interval; not a row of the per-count table; nothing without them."""
    import json

    from neuroshard.pipeline.report.report_models import model_table

    models = tmp_path / "models"
    models.mkdir()
    assert "any world size" not in model_table(tmp_path)[0]
    size = {"samples": 10, "mape": 0.24, "floor": 0.3, "over_floor": 0.8}
    held = {"data_dir": "r/comm_data", "ndevices": 4, "samples": 500, "mape": 0.27, "floor": 0.25, "over_floor": 1.08,
            "over_floor_interval": {"ratio": 1.08, "low": 0.9, "high": 1.3, "level": 0.95}}
    (models / "comm_fw_metrics.json").write_text(json.dumps({
        "sizes": [2, 8], "by_size": {"2": size, "8": {**size, "floor": None, "over_floor": None}}, "checks": [held],
        "metrics": {"test": {"mse": 1.0, "mape": 0.2, "spearman": 0.9}}}))
    text, rows = model_table(tmp_path)
    assert rows == []
    assert "- forward: test split 2 ranks 24.0% vs 30.0% (0.80x); 8 ranks 24.0%; held out (never trained on): 4 " \
           "ranks 27.0% vs 25.0% (1.08x [0.90, 1.30])" in text.splitlines()
    assert "Comm models for any world size (step 4k" in text and "- backward" not in text
