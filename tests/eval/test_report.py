"""The report's comparison: intervals beside the means and verdict words read from the intervals."""

from neuroshard.eval.intervals import Interval
from neuroshard.eval.report import comparison_table, verdict_lines
from neuroshard.eval.summary import AlgorithmRow, Summary, VsReference


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

    from neuroshard.eval.report import torchrec_lines
    from neuroshard.eval.torchrec_train import summarize

    assert torchrec_lines(tmp_path) == ([], None)  # step 7 did not run: no section
    costs = {(t, a): [10.0 * (t + 1) * f, 10.5 * (t + 1) * f] for t in range(3) for a, f in (("neuroshard", 1.0),
                                                                                           ("greedy", 1.2))}
    (tmp_path / "torchrec").mkdir()
    (tmp_path / "torchrec" / "summary.json").write_text(json.dumps(summarize(costs, "neuroshard",
                                                                             ["neuroshard", "greedy"])))
    (tmp_path / "torchrec" / "config.json").write_text(json.dumps(
        {"training": {"ndevices": 4096, "device": "cpu", "warmup": 3, "iters": 20, "repeats": 2}, "batch_size": 4096}))
    lines, summary = torchrec_lines(tmp_path)
    text = "\n".join(lines)
    assert summary["reference"] == "neuroshard"
    assert "| greedy |" in text and "neuroshard beats it" in text and "1.200 [1.200, 1.200]" in text
    assert "two sharding groups" in text
    assert "4096 ranks shared" in text and "same plan trained in two rounds differed by 4.9%" in text


def test_power_line_from_the_median_noise_of_the_comparisons():
    from types import SimpleNamespace as N

    from neuroshard.eval.power import Components
    from neuroshard.eval.report import power_lines

    comps = [Components(0.08, 0.08, 10, 2), Components(0.06, 0.10, 10, 2), Components(0.10, 0.06, 10, 2)]
    hw = N(algorithms=[N(vs_reference=None)] + [N(vs_reference=N(power=c)) for c in comps])
    # medians 8% and 8%: 2.802 * sqrt(0.0064 / 10 + 0.0064 / 20) = 8.7%; (2.802 / 0.03)^2 * 0.0096 = 83.7 -> 84
    (line,) = power_lines(hw)
    assert "8.0% from task to task and by 8.0% between repeats" in line
    assert "10 tasks detect about 8.7%" in line and "3% difference needs 84 tasks" in line
    assert power_lines(N(algorithms=[N(vs_reference=None)])) == [] and power_lines(None) == []
