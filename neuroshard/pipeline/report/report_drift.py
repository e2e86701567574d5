"""The report on the machine's speed around the evaluation: its drift since the cost data (and since the
calibration before planning), the plan job's speed from the anchors measured just before and after, and the
per-round calibration from anchors measured in every round."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from neuroshard.eval.results import RESULTS_JSON
from neuroshard.formats.plan_file import read_plans
from neuroshard.formats.side_files import ROUND_ANCHORS_JSON, ROUND_CALIBRATION_JSON
from neuroshard.pipeline.report.report_common import load_json, optional_side_file
from neuroshard.types.records import PlanRecord


def drift_lines(hw_dir: Path, records: list[PlanRecord] | None) -> tuple[list[str], dict | None]:
    """Markdown lines on the machine's drift since the cost data was recorded (and, where the evaluation's
    models were calibrated before planning, since that calibration), and the figures (None when the drift
    steps did not run or nothing was measured). `records`: the evaluation's (`hw_dir`'s results.json), None
    without them."""
    from neuroshard.eval.drift import PARTS, drift_scaled_accuracy, read_drift

    drift = read_drift(hw_dir)
    if drift is None or records is None:
        return [], None
    config = load_json(hw_dir / "config.json")
    calib = config.get("calibration_factors") if isinstance(config, dict) else None
    speed = config.get("plan_speed_factors") if isinstance(config, dict) else None
    # the estimates include the calibration and the plan speed (--plan_speed); the change is from those
    change = {k: drift[k] / ((calib[k] if calib else 1.0) * (speed[k] if speed else 1.0)) for k in PARTS}
    scaled = drift_scaled_accuracy(records, change)
    if scaled["mape"] is None:
        return [], None
    n = drift["samples"]
    factors = lambda d: f"{d['compute']:.2f}x (compute), {d['fw_comm']:.2f}x (fw) and {d['bw_comm']:.2f}x (bw)"  # noqa: E731
    plan_speed = (f", and the plan job's speed measured just before the evaluation on other plans "
                  f"(`--plan_speed`: {factors(speed)})") if speed else ""
    if calib:
        lines = [f"Machine drift: just before planning, {n['compute']} compute shards and {n['fw_comm']} per-rank "
                 f"all-to-all times of the collected cost data were measured again; they took {factors(calib)} "
                 f"their recorded times (medians), and the simulator's models were scaled by these factors "
                 f"(`--calibration`): the estimates above include them{plan_speed}. Right after the evaluation the "
                 f"same samples took {factors(drift)}, so the machine changed by {factors(change)} from the "
                 f"estimates' speed. With the estimates scaled by that change (measured apart from the "
                 f"evaluation, not fitted to it), the plan-cost MAPE is {100 * scaled['mape']:.1f}% (Spearman "
                 f"{scaled['spearman']:.3f}); the difference is the drift during the evaluation, not the models' "
                 f"error."]
    else:
        lines = [f"Machine drift: right after the evaluation, {n['compute']} compute shards and {n['fw_comm']} "
                 f"per-rank all-to-all times of the collected cost data were measured again; they took "
                 f"{factors(drift)} their recorded times (medians). With the simulator's per-rank parts scaled by "
                 f"these factors (measured apart from the evaluation, not fitted to it), the plan-cost MAPE is "
                 f"{100 * scaled['mape']:.1f}% (Spearman {scaled['spearman']:.3f}); the difference from the "
                 f"unscaled figure above is the machine's drift, not the models' error."]
    return lines, {**drift, "calibration": calib, "plan_speed": speed, "scaled_plan_mape": scaled["mape"],
                   "scaled_spearman": scaled["spearman"]}


def anchor_lines(hw_dir: Path, records: list[PlanRecord] | None) -> tuple[list[str], dict | None]:
    """Markdown on the plan job's own speed, from the on-policy plans measured again just before and after the
    evaluation (`eval.drift.read_anchors`), and the figures (None when those steps did not run). `records`:
    the evaluation's, None without them."""
    from neuroshard.eval.accuracy import speed_ratios
    from neuroshard.eval.drift import drift_scaled_accuracy, read_anchors

    anchors = read_anchors(hw_dir)
    if anchors is None or records is None:
        return [], None
    config = load_json(hw_dir / "config.json")
    speed = config.get("plan_speed_factors") if isinstance(config, dict) else None
    # the anchors' speed against the evaluation's estimates, which include the anchors before it (--plan_speed)
    own, f = speed_ratios(records), anchors["factors"]
    if speed:
        f = {k: f[k] / speed[k] for k in f}
    scaled = drift_scaled_accuracy(records, f)
    if scaled["mape"] is None:
        return [], None
    before, after = anchors["before"], anchors["after"]
    x = lambda v: "-" if v is None else f"{v:.3f}x"  # noqa: E731
    parts = f"compute {x(f['compute'])}, fw {x(f['fw_comm'])}, bw {x(f['bw_comm'])}"
    lines = [f"Plan-level speed: the {anchors['plans']} on-policy plans of training tasks (step 4d, not the "
             f"evaluation's tasks), measured again as step 6b measures plans just before and just after it, took "
             f"{x(before['cost'])} and {x(after['cost'])} their estimates (medians; compute {x(before['compute'])} "
             f"and {x(after['compute'])}); the evaluation's plans took {x(own['cost'])} theirs (compute "
             f"{x(own['compute'])})."]
    if speed:
        lines[0] += (f" The evaluation's estimates include the speed before it (`--plan_speed`: the models "
                     f"scaled by compute {x(speed['compute'])}, fw {x(speed['fw_comm'])}, bw "
                     f"{x(speed['bw_comm'])}), a forecast from other plans made before any of its measurements. "
                     f"Scaled further by the square root of the change from before to after ({parts}), the "
                     f"plan-cost MAPE is {100 * scaled['mape']:.1f}% (Spearman {scaled['spearman']:.3f}).")
    else:
        lines[0] += (f" With the evaluation's estimates scaled by the anchors' speed ({parts}: measured on other "
                     f"plans, not fitted to these), the plan-cost MAPE is {100 * scaled['mape']:.1f}% (Spearman "
                     f"{scaled['spearman']:.3f}).")
    lines[0] += (" The anchors' estimates are in-sample (the models were retrained on their shards): they measure "
                 "the plan job's speed, not the models' accuracy.")
    return lines, {**anchors, "plan_speed": speed, "evaluation": own, "scaled_plan_mape": scaled["mape"],
                   "scaled_spearman": scaled["spearman"]}


def resampled_phrase(spread) -> str:
    """The phrase for a per-round calibration's ratio to its floor over the anchors resampled ("" without it)."""
    return f"; {spread[0]:.2f}-{spread[1]:.2f}x with the anchors resampled, 10th-90th percentile" if spread else ""


def round_lines(hw_dir: Path, step: str = "6b", anchors: str = "plans of anchor tasks (step 5e's: tasks never "
                "evaluated nor trained on)") -> tuple[list[str], dict | None]:
    """Markdown on the per-round calibration of a hardware step (`eval.round_calibration`: `anchors` measured in
    every round of `step`) and its figures; nothing when the evaluation had no anchors."""
    from neuroshard.eval.round_calibration import (
        COLLECTIVE_ANCHORS,
        RoundCalibration,
        calibrated_accuracy,
        split_new_types,
    )

    cal = optional_side_file(hw_dir / ROUND_CALIBRATION_JSON, RoundCalibration)
    if cal is None or cal.mape is None:
        return [], None
    pct = lambda v: "-" if v is None else f"{100 * v:.1f}%"  # noqa: E731
    speeds = ", ".join(f"{f['cost']:.3f}x" for f in cal.factors)

    def times(v, f, more=""):
        return f" (a perfect model moved the same way: {pct(f)}, {v / f:.2f}x{more})" if f else ""

    line = (f"Per-round calibration: {cal.anchors} {anchors} were measured in each of the {len(cal.factors)} "
            f"rounds of step {step}, spread over it; the plan job ran them at {speeds} their estimates (plan cost, "
            f"by round). Each of the {cal.measurements} measurements compared with its estimate moved by its "
            f"round's per-part factors: plan-cost MAPE **{pct(cal.mape)}** per "
            f"measurement{times(cal.mape, cal.floor, resampled_phrase(cal.ratio_spread))}, "
            f"{pct(cal.raw_mape)} unmoved; "
            f"**{pct(cal.mape_mean)}** for the plans' means{times(cal.mape_mean, cal.floor_mean)}"
            + (f", Spearman {cal.spearman:.3f}" if cal.spearman is not None else "")
            + (f"; the moved 80% band holds **{pct(cal.coverage)}** of the measurements" if cal.coverage is not None
               else "") + ".")
    results, anchor_file = hw_dir / RESULTS_JSON, hw_dir / ROUND_ANCHORS_JSON
    anchors = read_plans(anchor_file) if anchor_file.exists() else None
    if any("fw_collectives" in f or "bw_collectives" in f for f in cal.factors):
        by_round = lambda key: ", ".join(f"{f[key]:.3f}x" if key in f else "-" for f in cal.factors)  # noqa: E731
        line += (" The spread tables' collectives moved by the anchors' own collectives' speed, not their "
                 f"exchange's: forward {by_round('fw_collectives')}, backward {by_round('bw_collectives')} by round.")
    elif anchors is not None:
        spread = sum(1 for a in anchors if a.plan is not None and a.plan.spread)
        if 0 < spread < COLLECTIVE_ANCHORS:
            line += (f" The spread tables' collectives moved by their exchange's factor: {spread} of the anchors "
                     f"had spread tables, fewer than the {COLLECTIVE_ANCHORS} whose median a factor of their own "
                     "needs.")
    figures = cal.to_json()
    records = read_plans(results) if results.exists() and anchors is not None else []
    new, others = split_new_types(records)
    acc = calibrated_accuracy(new, anchors, len(cal.factors)) if new else None
    if acc is not None and acc.mape is not None:
        by_alg = Counter(r.alg for r in new)
        line += (" Among them, the plans with the new types (a table row-wise, table-row-wise or data-parallel; "
                 f"{', '.join(f'{a} {n}' for a, n in sorted(by_alg.items()))}), moved the same way: "
                 f"**{pct(acc.mape)}** per measurement{times(acc.mape, acc.floor, resampled_phrase(acc.ratio_spread))}"
                 " (`tools/combine_runs.py --accuracy` pools this over runs).")
        figures["new_types"] = acc.to_json()
        parts_line, parts = part_lines(new, others, acc.factors)
        line += parts_line
        figures["new_types"].update(parts)
    return [line], figures


def part_lines(new: list[PlanRecord], others: list[PlanRecord], factors: list[dict]) -> tuple[str, dict]:
    """The sentence and figures on where the new-type plans' error sits (`round_calibration.part_ratios`,
    `rank_compute_ratios`), beside the other plans' parts."""
    from neuroshard.eval.round_calibration import PART_NAMES, part_ratios, rank_compute_ratios

    mine, theirs, ranks = part_ratios(new, factors), part_ratios(others, factors), rank_compute_ratios(new, factors)
    listed = lambda ratios: ", ".join(f"{PART_NAMES[k]} {v:.2f}x" for k, v in ratios.items())  # noqa: E731
    line = (f" By part, measured over the moved estimate (median over measurements, summed over the ranks): "
            f"the new-type plans' {listed(mine)}"
            + (f"; the other plans' {listed(theirs)}" if theirs else "")
            + "; the new-type plans' compute by rank " + ", ".join("-" if v is None else f"{v:.2f}x" for v in ranks)
            + ".")
    return line, {"parts": mine, "other_parts": theirs, "compute_by_rank": ranks}
