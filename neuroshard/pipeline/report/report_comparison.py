"""The report's comparison: the cost per algorithm with intervals and verdicts, the verdicts in words, the
power of the hardware verdicts and the headroom of a choice among the compared plans."""

from __future__ import annotations

import numpy as np

from neuroshard.eval.intervals import VERDICTS
from neuroshard.eval.results import fmt_ci, gain_cell
from neuroshard.eval.summary import Summary
from neuroshard.pipeline.report.report_common import rows_by_alg, signed_pct


def comparison_table(sim: Summary | None, hw: Summary | None) -> tuple[str, dict]:
    """Markdown: per algorithm the mean cost in the simulator and on hardware (over the tasks valid
    for every algorithm, with 95% intervals), NeuroShard's improvement over it with its interval and
    the verdict the interval supports, and the valid counts. Returns the table and the verdicts."""
    rows = {"sim": rows_by_alg(sim), "hw": rows_by_alg(hw)}
    algs = list(dict.fromkeys([*rows["sim"], *rows["hw"]]))
    lines = ["| algorithm | simulator ms [95% CI] | NeuroShard gain (sim) | verdict (sim) | hardware ms [95% CI] "
             "| NeuroShard gain (hw) | verdict (hw) | detectable (hw) | valid (sim) | valid (hw) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for a in algs:
        s, h = rows["sim"].get(a), rows["hw"].get(a)

        def mean(r):
            return "-" if r is None else fmt_ci(r.mean_common, r.mean_common_ci, 2)

        def gain(r):
            return "" if a == "neuroshard" or r is None else gain_cell(r)

        def word(r):
            return "" if a == "neuroshard" or r is None else (r.verdict or "-")

        def valid(r):
            return "-" if r is None else f"{r.valid} / {r.tasks}"

        def detectable(r):
            mdd = None if r is None or r.vs_reference is None else r.vs_reference.mdd
            return "" if a == "neuroshard" else "-" if mdd is None else f"≥ {100 * mdd:.1f}%"

        lines.append(f"| {a} | {mean(s)} | {gain(s)} | {word(s)} | {mean(h)} | {gain(h)} | {word(h)} "
                     f"| {detectable(h)} | {valid(s)} | {valid(h)} |")
    verdicts = {name: None if s is None else s.verdicts for name, s in (("simulator", sim), ("hardware", hw))}
    return "\n".join(lines) + "\n", verdicts


def powered(hw: Summary | None) -> bool:
    """Whether the hardware verdicts are prediction-powered (eval.py --unmeasured_plans)."""
    return hw is not None and any(r.vs_reference is not None and r.vs_reference.plain is not None
                                  for r in hw.algorithms)


def power_lines(hw: Summary | None, target: float = 0.03, study: tuple[int, int] | None = None) -> list[str]:
    """A line on the power of the hardware verdicts: the median task and repeat sds of the paired differences
    (eval/power.py) and how many tasks at this run's repeats would detect a `target` difference (beside
    `study`'s tasks x repeats, the study preset's, when given). Prediction-powered verdicts add a line: the
    task sd without the simulator's predictions, what the measurements alone would detect, and their plain
    intervals."""
    from neuroshard.eval.power import min_detectable, tasks_needed

    rows = [r for r in (hw.algorithms if hw else []) if r.vs_reference is not None and r.vs_reference.power]
    comps = [r.vs_reference.power for r in rows]
    if not comps:
        return []
    task_sd = float(np.median([c.task_sd for c in comps]))
    repeat_sd = float(np.median([c.repeat_sd for c in comps]))
    predicted_sd = float(np.median([c.predicted_sd for c in comps]))
    repeats, tasks, predicted = comps[0].repeats, comps[0].tasks, comps[0].predicted
    need = tasks_needed(task_sd, repeat_sd, repeats, target, predicted_sd=predicted_sd, predicted=predicted)
    sized = f" (`--preset study` runs {study[0]} x {study[1]})" if study else ""
    needs = f"needs {need} tasks" if need is not None else f"needs more than {predicted} unmeasured tasks first"
    beyond = " beyond what the simulator predicts" if predicted else ""
    mdd = min_detectable(task_sd, repeat_sd, tasks, repeats, predicted_sd=predicted_sd, predicted=predicted)
    out = [f"- power: the paired differences vary by {100 * task_sd:.1f}% from task to task{beyond} and by "
           f"{100 * repeat_sd:.1f}% between repeats (medians over the baselines); with {repeats} repeats, "
           f"{tasks} tasks detect about {100 * mdd:.1f}% (95%, 80% power) and a {100 * target:.0f}% difference "
           f"{needs}{sized}."]
    plain = [r for r in rows if r.vs_reference.plain is not None and r.mean_common] if predicted else []
    if plain:
        raw = float(np.median([c.raw_task_sd for c in comps if c.raw_task_sd is not None]))
        cells = "; ".join(f"{r.alg} {signed_pct(r.vs_reference.plain.mean / r.mean_common)} "
                          f"[{signed_pct(r.vs_reference.plain.lo / r.mean_common)}, "
                          f"{signed_pct(r.vs_reference.plain.hi / r.mean_common)}] (weight "
                          f"{r.vs_reference.weight:.2f})" for r in plain)
        out.append(f"- prediction-powered: the hardware verdicts use the simulator's estimates of the same "
                   f"algorithms' plans on {predicted} more tasks of the same generator, not measured "
                   f"(eval/intervals.py `powered_difference`): the measured mean difference less its weight x how "
                   f"far the measured tasks' predicted difference lies from the unmeasured tasks'. Without them the "
                   f"task-to-task sd is {100 * raw:.1f}% and {tasks} tasks detect about "
                   f"{100 * min_detectable(raw, repeat_sd, tasks, repeats):.1f}%; the measurements alone give "
                   f"NeuroShard's gain over {cells}.")
    return out


def headroom_lines(hw: Summary | None) -> list[str]:
    """A line on what choosing among the compared plans by measurement would gain over NeuroShard's
    (`power.selection_headroom`): the room a search or a hardware-in-the-loop choice has at this noise."""
    h = hw.headroom if hw is not None else None
    if h is None:
        return []
    return [f"- headroom: choosing each task's plan among the {h.algorithms} algorithms' by the mean of half of "
            f"the {h.repeats} rounds and judging it on the other half gains {signed_pct(h.gain)} "
            f"[{signed_pct(h.lo)}, {signed_pct(h.hi)}] over NeuroShard's plan ({h.tasks} tasks); chosen and judged "
            f"on the same rounds, {signed_pct(h.in_sample)}, which is selection on the noise. A gain level with zero "
            "says no choice among these plans, measured this often, beats NeuroShard's here (what `--refine` could "
            "win)."]


def verdict_lines(verdicts: dict) -> list[str]:
    """One line per evaluation: which baselines NeuroShard beats, loses to, or does not separate from,
    as the 95% intervals of the paired differences say (never the point estimate alone)."""
    out = []
    for where, v in verdicts.items():
        if not v:
            continue
        groups = {w: [a for a, x in v.items() if x == w] for w in VERDICTS}
        parts = []
        if groups["beats"]:
            parts.append("beats " + ("every baseline" if len(groups["beats"]) == len(v)
                                     else ", ".join(groups["beats"])))
        if groups["no significant difference"]:
            parts.append("shows no significant difference from " + ", ".join(groups["no significant difference"]))
        if groups["loses to"]:
            parts.append("loses to " + ", ".join(groups["loses to"]))
        out.append(f"- {where}: NeuroShard " + "; ".join(parts) + " (95% intervals of the paired differences).")
    return out
