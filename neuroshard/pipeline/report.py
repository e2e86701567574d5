"""The pipeline's report: `report.md`, plots and `config.json` in the run's folder.

Reads what the steps wrote (simulator and hardware `summary.json`, the cost
models' `*_metrics.json`, the plan records with search times) and puts the
paper-style comparison next to the cost-model accuracy.
"""

from __future__ import annotations

import json
import platform
from collections import Counter
from dataclasses import asdict
from importlib import metadata
from pathlib import Path

import numpy as np

from neuroshard.eval.intervals import VERDICTS
from neuroshard.eval.results import RESULTS_JSON, fmt_ci, gain_cell
from neuroshard.eval.summary import Accuracy, AlgorithmRow, Summary
from neuroshard.formats.io import atomic_write, write_json_atomic
from neuroshard.formats.plan_file import read_plans
from neuroshard.formats.side_files import (
    LAMBDA_JSON,
    MODEL_ERROR_JSON,
    ROUND_ANCHORS_JSON,
    ROUND_CALIBRATION_JSON,
    LambdaChoice,
    ModelErrorReport,
    PlanErrorReport,
    plan_error_json,
    read_side_file,
)
from neuroshard.types.records import PlanRecord


def _load(path: Path):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, json.JSONDecodeError):
        return None


def _load_summary(path: Path) -> Summary | None:
    data = _load(path)
    return None if data is None else Summary.from_json(data)


def library_versions() -> dict:
    out = {"python": platform.python_version(), "platform": platform.platform()}
    for pkg in ("torch", "fbgemm-gpu-cpu", "fbgemm-gpu", "numpy", "tqdm", "matplotlib"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return out


def _ms(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def _rows(summary: Summary | None) -> dict[str, AlgorithmRow]:
    return {} if summary is None else {r.alg: r for r in summary.algorithms}


def comparison_table(sim: Summary | None, hw: Summary | None) -> tuple[str, dict]:
    """Markdown: per algorithm the mean cost in the simulator and on hardware (over the tasks valid
    for every algorithm, with 95% intervals), NeuroShard's improvement over it with its interval and
    the verdict the interval supports, and the valid counts. Returns the table and the verdicts."""
    rows = {"sim": _rows(sim), "hw": _rows(hw)}
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


def _powered(hw: Summary | None) -> bool:
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
        cells = "; ".join(f"{r.alg} {_pct(r.vs_reference.plain.mean / r.mean_common)} "
                          f"[{_pct(r.vs_reference.plain.lo / r.mean_common)}, "
                          f"{_pct(r.vs_reference.plain.hi / r.mean_common)}] (weight "
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
            f"the {h.repeats} rounds and judging it on the other half gains {_pct(h.gain)} "
            f"[{_pct(h.lo)}, {_pct(h.hi)}] over NeuroShard's plan ({h.tasks} tasks); chosen and judged on the same "
            f"rounds, {_pct(h.in_sample)}, which is selection on the noise. A gain level with zero says no "
            "choice among these plans, measured this often, beats NeuroShard's here (what `--refine` could win)."]


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


def accuracy_table(acc: Accuracy) -> str:
    """Markdown: how well the simulator's estimates match the measured plan costs and parts."""
    pct = lambda x: "-" if x is None else f"{100 * x:.1f}%"  # noqa: E731
    num = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
    lines = ["| what | MAPE | Spearman | n |", "|---|---|---|---|",
             f"| plan cost | {pct(acc.mape)} | {num(acc.spearman)} | {acc.plans} |"]
    if acc.mape_expected is not None:
        lines.append(f"| plan cost, expected measured (the predicted distribution's mean) | {pct(acc.mape_expected)} "
                     f"| - | {acc.plans} |")
    noise = acc.repeat_noise
    if noise:
        lines.append(f"| plan cost, a perfect model (the repeat noise) | {pct(noise['mape_floor'])} | - | "
                     f"{noise['plans']} |")
    for part, m in acc.parts.items():
        lines.append(f"| per-rank {part} | {pct(m.mape)} | {num(m.spearman)} | {m.n} |")
    lines.append("")
    if noise:
        lines.append(f"Two measurements of the same plan differ by {pct(noise['mean'])} on average (median "
                     f"{pct(noise['median'])}, {noise['plans']} plans): a model that predicted every plan's true cost "
                     f"exactly would still score a plan-cost MAPE of about {pct(noise['mape_floor'])} against the "
                     f"mean of {noise['repeats']} measurements; the rest of the MAPE above is the models' (and the "
                     f"machine's drift, below).")
    rn = acc.rank_noise
    if rn:
        lines.append(f"Within a plan the ranks move together: one measurement of a rank's total varies by "
                     f"{pct(rn.independent_sd)} on its own and by {pct(rn.common_sd)} with all the plan's ranks "
                     f"(sds, from the repeats of {rn.plans} plans). The predicted spread draws the shared part once "
                     f"for all ranks when the models record it (on-policy plans measured twice, step 4d; "
                     f"planner/costs/uncertainty.py); drawn independently, it raises the expected maximum and narrows "
                     f"the band.")
    lines.append(f"The simulator orders two algorithms' plans for the same task as the hardware does in "
                 f"{pct(acc.pair_agreement)} of {acc.pairs} cases ({acc.pairs_tied} ties left out).")
    if acc.pairs_beyond_noise is not None:
        lines.append(f"Over the {acc.pairs_beyond_noise} pairs whose measured difference exceeds the repeat noise "
                     f"(|difference| > 1.96 standard errors of the repeats), it orders "
                     f"{pct(acc.pair_agreement_beyond_noise)} as the hardware does.")
    else:
        lines.append("(One measurement per plan: rerun eval.py with --repeats 2 or more for the agreement over "
                     "pairs that differ by more than the repeat noise.)")
    if acc.by_alg:
        lines.append("Measured over estimated, per algorithm (medians over its plans): "
                     + "; ".join(f"{alg} {num(b['cost'])} (expected cost {num(b['expected'])}, forward "
                                 f"exchange {num(b['fw_comm'])})" for alg, b in acc.by_alg.items())
                     + ". A search that picks the plans the models under-estimate (the winner's curse) runs "
                       "further above its estimates than the plans of algorithms that do not search the models.")
    sp = acc.rank_spread
    if sp:
        lines.append(f"The ranks' ready times (compute + backward exchange) lie {sp['estimated']:.2f} ms apart in "
                     f"the estimates and {sp['measured']:.2f} ms on the hardware (medians over {sp['plans']} plans; "
                     f"mean absolute error {sp['mae']:.2f} ms; the hardware's is the larger in "
                     f"{pct(sp['under'])}); per algorithm, estimated / measured: "
                     + "; ".join(f"{alg} {b['estimated']:.2f} / {b['measured']:.2f} ms"
                                 for alg, b in sp["by_alg"].items())
                     + ". Every rank's forward exchange waits for the last one ready, so a spread the models do "
                       "not see is paid in the forward exchange.")
    if acc.by_round:
        lines.append("Measured over estimated, per round of the measurement (each round measures every plan once, "
                     "in a shuffled order; medians over the plans): "
                     + "; ".join(f"round {i + 1} {num(b['cost'])} (compute {num(b['compute'])}, bw "
                                 f"{num(b['bw_comm'])}, fw {num(b['fw_comm'])})" for i, b in enumerate(acc.by_round))
                     + ". A change from round to round is the machine's speed moving during the evaluation, which "
                       "the calibration before planning cannot see: it moves the MAPE and the band, not the "
                       "verdicts (every algorithm is measured in every round).")
    if acc.calibration is not None:
        lines.append(f"Calibration: {pct(acc.calibration)} of the {acc.calibration_n} measurements lie inside the "
                     f"simulator's predicted 80% band (ensemble members x the measured noise of one measurement, "
                     f"planner/costs/uncertainty.py); 80% when the predicted spread is right, less when it is too "
                     f"narrow (or the estimates are biased).")
    return "\n".join(lines) + "\n"


def _side_file(path: Path, cls):
    """The side file's record, None when the step that writes it did not run."""
    return read_side_file(path, cls) if path.exists() else None


def onpolicy_lines(out: Path) -> tuple[list[str], dict | None]:
    """Markdown on the on-policy step (eval/onpolicy.py): how much plan data, NeuroShard+'s lambda chosen on
    hardware, and the error of the models before and after it on the evaluation's measured plans
    (model_error.py); the figures for config.json. Nothing when the run had no on-policy step."""
    lam = _side_file(out / "plan_data" / LAMBDA_JSON, LambdaChoice)
    errors = _side_file(out / "hw" / MODEL_ERROR_JSON, ModelErrorReport)
    if lam is None and errors is None:
        return [], None
    pct = lambda x: "-" if x is None else f"{100 * x:.1f}%"  # noqa: E731
    lines = ["", "## On-policy cost data", "",
             "The plans of training tasks (never the evaluation tasks), made with the models of the random data, "
             "measured as the evaluation measures: their shards and exchanges are cost data where plans live; "
             "the models used from the policy steps on were retrained on both (steps 4e, 4f)."]
    for kind in ("compute", "comm"):
        cfg = _load(out / "plan_data" / kind / "config.json")
        if cfg:
            lines.append(f"- {kind}: {cfg.get('samples')} samples from {cfg.get('plans')} measured plans "
                         f"({', '.join(cfg.get('algorithms', []))})")
    for path in sorted((out / "models" / "onpolicy").glob(plan_error_json("*"))):
        calibration = read_side_file(path, PlanErrorReport)
        pe = calibration.plan_error
        sample = "out of sample: the random data's models" if calibration.rank_error_models else "in sample"
        under = ("the random data's models (out of sample: never trained on their shards), for the retrained "
                 "models" if calibration.plan_level_heldout else
                 "the retrained models (in sample: the models were trained on their shards)")
        lines.append(f"- The predicted 80% band calibrated on these plans under {under} (step 4g, "
                     f"calibrate_band.py): machine "
                     f"speed then {pe.speed:.3f}x the models' (divided out), plan-level error sd "
                     f"**{pct(pe.sd)}**, in the band {pct(pe.coverage_before)} -> "
                     f"{pct(pe.coverage_after)} of {pe.measurements} measurements"
                     + (f"; the compute model's per-rank error the plan's other ranks do not share, drawn for "
                        f"every rank in the predicted spread: sd **{pct(pe.rank)}** ({pe.ranks} ranks, "
                        f"{sample}"
                        + (f"; net of the ranks' own measurement noise, {pct(pe.compute_noise)} per measurement "
                           f"from the plans measured twice" if pe.compute_noise else "")
                        + (f"; one compute measurement of the plan job varies by "
                           f"{pct(pe.compute_sd)} ({pct(pe.compute_common)} shared by the "
                           f"plan's ranks; two repeats minutes apart, so the spread draws the collection's "
                           f"wider noise floor)" if pe.compute_common is not None else "")
                        + ")" if pe.ranks else ""))
    if lam:
        means = ", ".join(f"{k}: {v:.2f} ms" if v is not None else f"{k}: -" for k, v in lam.mean_ms.items())
        diffs = "; ".join(f"{k}: {d['mean']:+.2f} ms [{d['lo']:+.2f}, {d['hi']:+.2f}]"
                          for k, d in lam.vs_default_ms.items())
        lines.append(f"- NeuroShard+'s `plus_lambda` chosen on hardware: **{lam.chosen:g}** (mean measured plan "
                     f"cost over {lam.tasks} training tasks: {means}); the smallest value, {lam.default:g}, unless "
                     f"another's plans cost significantly less (paired differences with it, 95% intervals over "
                     f"tasks and rounds: {diffs or '-'})")
    if errors:
        lines += ["", "The evaluation's measured plans, re-simulated under each set of models (model_error.py; "
                  "`fitted`: TorchRec's estimator fitted to the same cost data, when the ablation ran):",
                  "", "| models | plans | plan MAPE | expected cost MAPE | Spearman | pairs ordered beyond noise | "
                  "per-rank compute | bw comm | fw comm | ranks' ready spread, estimated / measured (median ms) | "
                  "in the 80% band |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for label, acc in errors.accuracy.items():
            part = lambda k: pct(acc.get("parts", {}).get(k, {}).get("mape"))  # noqa: E731
            sp = acc.get("rank_spread")
            spread = f"{sp['estimated']:.2f} / {sp['measured']:.2f}" if sp else "-"
            rho = acc.get("spearman")
            lines.append(f"| {label} | {acc.get('plans')} | {pct(acc.get('mape'))} | "
                         f"{pct(acc.get('mape_expected'))} | {'-' if rho is None else f'{rho:.3f}'} | "
                         f"{pct(acc.get('pair_agreement_beyond_noise'))} | {part('compute')} | "
                         f"{part('bw_comm')} | {part('fw_comm')} | {spread} | {pct(acc.get('calibration'))} |")
        rounds = [f"{label} **{rc['mape'] / rc['floor']:.3f}×** ({pct(rc['mape'])} against {pct(rc['floor'])})"
                  for label, rc in errors.round_calibrated.items() if rc.get("mape") and rc.get("floor")]
        if rounds:
            lines += ["", "After the per-round calibration, each set's rounds' factors read from the anchors "
                      "re-simulated under it, the per-measurement MAPE over a perfect model's floor: "
                      + "; ".join(rounds) + "."]
    return lines, {"lambda": None if lam is None else lam.to_json(),
                   "model_error": errors.accuracy if errors else None}


def drift_lines(hw_dir: Path, records: list[PlanRecord] | None) -> tuple[list[str], dict | None]:
    """Markdown lines on the machine's drift since the cost data was recorded (and, where the evaluation's
    models were calibrated before planning, since that calibration), and the figures (None when the drift
    steps did not run or nothing was measured). `records`: the evaluation's (`hw_dir`'s results.json), None
    without them."""
    from neuroshard.eval.drift import PARTS, drift_scaled_accuracy, read_drift

    drift = read_drift(hw_dir)
    if drift is None or records is None:
        return [], None
    config = _load(hw_dir / "config.json")
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
    from neuroshard.eval.drift import drift_scaled_accuracy, read_anchors
    from neuroshard.eval.summary import speed_ratios

    anchors = read_anchors(hw_dir)
    if anchors is None or records is None:
        return [], None
    config = _load(hw_dir / "config.json")
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


def round_lines(hw_dir: Path, step: str = "6b", anchors: str = "plans of anchor tasks (step 5f's: tasks never "
                "evaluated nor trained on)") -> tuple[list[str], dict | None]:
    """Markdown on the per-round calibration of a hardware step (`eval.round_calibration`: `anchors` measured in
    every round of `step`) and its figures; nothing when the evaluation had no anchors."""
    from neuroshard.eval.round_calibration import (
        COLLECTIVE_ANCHORS,
        RoundCalibration,
        calibrated_accuracy,
        split_new_types,
    )

    cal = _side_file(hw_dir / ROUND_CALIBRATION_JSON, RoundCalibration)
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


def refine_lines(records: list[PlanRecord] | None) -> tuple[list[str], dict | None]:
    """Markdown on hardware in the loop (`--refine`, eval/refine.py) as the evaluated plans (`records`, None
    without an evaluation) record it, and the figures (None when no plan was refined)."""
    from neuroshard.eval.refine import refine_summary

    got = refine_summary(records) if records is not None else {}
    if not got:
        return [], None
    lines = ["", "## Hardware in the loop", "",
             "`--refine`: each task's best distinct candidates by the models (with NeuroShard's own plan and the "
             "best plain baseline's) measured on hardware, the measured best kept when it beat the models' own "
             "choice by more than the rounds' noise explains (eval/refine.py); its seconds count as planning time, "
             "and the evaluation above measured the chosen plans afresh.", ""]
    for alg, s in got.items():
        chosen = ", ".join(f"{src} {n}" for src, n in sorted(s["chosen"].items(), key=lambda kv: -kv[1]))
        gain = "-" if s["selection_gain"] is None else f"{100 * s['selection_gain']:.1f}%"
        fresh = "-" if s["fresh_over_selection"] is None else f"{s['fresh_over_selection']:.3f}x"
        drift = ("" if s.get("drift") is None else
                 f", and the other algorithms' plans among the candidates {s['drift']:.3f}x theirs (the machine's "
                 f"drift between the two jobs; the rest is the noise that made the chosen ones look best)")
        lines.append(f"- {alg}: {s['tasks']} tasks, {s['candidates']:.1f} candidates and {s['seconds']:.1f} s each; "
                     f"chosen: {chosen}. By the selection's measurements the chosen candidate was {gain} below "
                     f"the models' own choice; measured afresh, the chosen plans cost {fresh} their selection "
                     f"cost (median){drift}.")
    return lines, got


def torchrec_table(folder: Path) -> tuple[str | None, dict | None, dict]:
    """eval_torchrec.py's results in `folder`: the markdown of its step times and ratios, its summary and the
    training settings (None, None, {} when it did not run)."""
    from neuroshard.torchrec.training_eval import flat_settings, summary_markdown

    summary, config = _load(folder / "summary.json"), _load(folder / "config.json")
    if not summary:
        return None, None, {}
    config = config or {}
    training = {**flat_settings(config.get("training", {})), "batch_size": config.get("batch_size")}
    return summary_markdown(summary, training), summary, training


def torchrec_lines(out: Path) -> tuple[list[str], dict | None]:
    """Markdown on phase 7 (the plans trained with TorchRec, `torchrec.training_eval`): the table of step times
    and ratios, and how noisy it is on this machine (None when the step did not run)."""
    import os

    table, summary, training = torchrec_table(out / "torchrec")
    if not summary:
        return [], None
    lines = ["Every algorithm's plan for the first tasks, exported as a TorchRec ShardingPlan (fused kernel; "
             "dense for data-parallel tables; torchrec_full is TorchRec's planner with every sharding type) and "
             "trained with DistributedModelParallel: a DLRM (torchrec's dense and over archs, the task's tables in "
             "an EmbeddingBagCollection; the interaction concatenates, as torchrec's DLRM class needs one "
             "embedding dim for all tables), each rank fed its slice of the dataset's real lookups, BCE loss, "
             "fused exact SGD. Plans are trained in rounds, each round in a shuffled order (`eval_torchrec.py`).",
             "", table]
    ranks, cores = training.get("ndevices"), os.cpu_count()
    if training.get("device") == "cpu" and ranks and cores:
        share = (f"{ranks} ranks shared {cores} cores, so at most {cores} of them ran at any moment"
                 if ranks > cores else f"{ranks} ranks ran on {cores} cores, one core each at most")
        lines.append(f"On this machine {share}; every all-to-all of a step waits for the rank the scheduler ran "
                     "last, so the scheduling and the machine's other load are part of each step time. Read a "
                     "verdict only from its interval, and compare the ratios with the noise floor above.")
    lines += runtime_check_lines(out / "torchrec" / "runtime_model_error.json")
    lines.append("")
    lines.append("A plan that mixes table-wise and column-split tables runs two sharding groups in TorchRec, "
                 "each with its own input distribution, kernels and all-to-alls; the cost models price one kernel "
                 "and two all-to-alls per device, so they do not see that overhead.")
    return lines, summary


def runtime_check_lines(path: Path, step: str = "7e") -> list[str]:
    """Markdown on the TorchRec runtime model's error on trained evaluation plans (step 7e; 7h on the second
    dataset's), per algorithm where there are several, and, where step 7d trained anchors in every round, the
    same error with each round's speed taken out; nothing without it."""
    check = (_load(path) or {}).get("check")
    if not check:
        return []
    pct = lambda v: "-" if v is None else f"{100 * v:.1f}%"  # noqa: E731
    line = (f"The TorchRec runtime model (`--runtime torchrec`, fitted on training tasks' plans) on these "
            f"{check['plans']} trained plans: step-time MAPE {check['mape']:.1f}%, predicted / measured "
            f"{check['ratio']:.3f} (step {step}).")
    algs = check.get("by_alg") or {}
    if len(algs) > 1:  # a search's plans priced lower than the others' flatter it by the difference
        line += " By algorithm, predicted / measured: " + ", ".join(
            f"{alg} {row['ratio']:.3f}" for alg, row in algs.items()) + "."
    cal = check.get("rounds")
    if cal and cal.get("mape") is not None:
        times = lambda v, f: f" (a perfect model: {pct(f)}, {v / f:.2f}x)" if f else ""  # noqa: E731
        speeds = ", ".join(f"{f['cost']:.3f}x" for f in cal["factors"])
        line += (f" Per-round calibration: {cal['anchors']} of the plans the runtime model was fitted to (step "
                 f"7a's), trained again in every round, ran at {speeds} the model's steps; each measurement "
                 f"against the model times its round's factor: MAPE **{pct(cal['mape'])}** per measurement"
                 f"{times(cal['mape'], cal.get('floor'))}{resampled_phrase(cal.get('ratio_spread'))}, "
                 f"{pct(cal['raw_mape'])} unmoved; **{pct(cal['mape_mean'])}** for the plans' means"
                 f"{times(cal['mape_mean'], cal.get('floor_mean'))}.")
    return ["", line]


def unplanned_by(records: list[PlanRecord], alg: str, rival: str) -> list[int]:
    """The tasks `rival` planned and `alg` did not (a record without a plan, or not "ok", is not planned)."""
    def planned(a):
        return {r.task for r in records if r.alg == a and r.plan is not None and r.status == "ok"}
    return sorted(planned(rival) - planned(alg))


def oversize_lines(out: Path) -> tuple[list[str], dict | None]:
    """Markdown on the tasks beyond the paper's plan space (`oversize/`, steps 1b, 2d, 6g, 6h): what the set is,
    who plans its tasks, and the comparison in the simulator and on hardware (None when the steps did not
    run)."""
    sim, hw = (_load_summary(out / "oversize" / d / "summary.json") for d in ("sim", "hw"))
    if sim is None:
        return [], None
    data = _load(out / "oversize" / "dataset" / "config.json") or {}
    plans = out / "oversize" / "sim" / "plans.json"
    records = read_plans(plans) if plans.exists() else []
    table, verdicts = comparison_table(sim, hw)
    none = [r.alg for r in sim.algorithms if not r.valid]
    missed = {rival: unplanned_by(records, "neuroshard", rival) for rival in ("torchrec", "torchrec_full")
              if any(r.alg == rival for r in records)}
    lines = [f"{sim.tasks} tasks over a second synthetic dataset: {data.get('num_tables', '?')} regular tables, "
             f"{data.get('large_tables', '?')} large ones (up to {data.get('large_rows', 0) / 1e6:.1f} M rows, at dim "
             "128 larger than one device) and "
             f"{data.get('hot_tables', '?')} small hot ones (pooling factor up to {data.get('hot_pooling', '?')}). "
             "Every task has at least one table larger than a device and one hot table (`gen_tasks.py --oversize 1 "
             "--hot 1`). On the paper's runtime NeuroShard splits the large tables in its search and, with the "
             "collective model of step 3e, may make tables row-wise or data-parallel; the others plan table-wise and "
             "column-wise: the greedy baselines halve a table until its pieces fit a device, "
             "DreamShard and AutoShard place whole tables only"
             + (f" (so {', '.join(none)} planned none of these tasks)" if none else "") + "; `torchrec_full` is "
             "TorchRec's planner as users get it, every sharding type (its row-wise and data-parallel tables priced by "
             "the collective model, when the run has one). The means are over the tasks valid for every algorithm "
             "that planned any.", "", table]
    lines += verdict_lines(verdicts)
    lines += spread_choices(records)
    measured = out / "oversize" / "hw" / "results.json"
    lines += collective_check(read_plans(measured) if measured.exists() else None)
    rounds_md, rounds = round_lines(out / "oversize" / "hw", "6h", "plans of the second dataset's anchor tasks "
                                    "(step 5e's, never the evaluation's)")
    lines += [f"- {line}" for line in rounds_md]
    for rival, tasks in missed.items():
        lines.append(f"- Tasks {rival} planned and NeuroShard did not: {len(tasks)}"
                     + (f" ({', '.join(map(str, tasks))})" if tasks else "") + ".")
    trec_md, trec, _ = torchrec_table(out / "oversize" / "torchrec")
    if trec_md:
        lines += ["", "The first of these tasks trained with TorchRec (step 7g), where the plans may also be "
                      "row-wise and data-parallel: neuroshard[torchrec] searches every sharding type its runtime "
                      "model was fitted on, torchrec_full is TorchRec's planner as users get it.", "", trec_md]
        lines += runtime_check_lines(out / "oversize" / "torchrec" / "runtime_model_error.json", "7h")
    return lines, {"verdicts": verdicts, "planned_none": none, "unplanned_by_neuroshard": missed,
                   "round_calibration": rounds, "torchrec_train": trec}


LEARNED = ("dreamshard", "autoshard")


def learned_table(out: Path, sim: Summary | None, hw: Summary | None) -> tuple[str, list[dict]]:
    """Markdown: each trained learned baseline's training (oracle, time, plans measured) and its
    held-out cost next to `random`'s, in the simulator and on hardware (gain = (random - it) / random)."""
    rows = []
    for name in LEARNED:
        cfg = _load(out / "models" / f"{name}_config.json")
        if not cfg:
            continue
        row = {"alg": name, "oracle": cfg.get("oracle"), "training_s": cfg.get("training_s"),
               "oracle_plans": cfg.get("oracle_plans"), "train_tasks": cfg.get("train_tasks"),
               "train_greedy_sim_ms": cfg.get("train_greedy_sim_ms"), "curve": cfg.get("curve_png")}
        for where, s in (("sim", sim), ("hw", hw)):
            by = _rows(s)
            mine = by[name].mean_common if name in by else None
            rnd = by["random"].mean_common if "random" in by else None
            row[f"{where}_ms"] = mine
            row[f"{where}_vs_random"] = (rnd - mine) / rnd if mine is not None and rnd else None
        rows.append(row)
    lines = ["| policy | oracle | training s | plans measured | training tasks (greedy, sim ms) | simulator ms "
             "| gain over random (sim) | hardware ms | gain over random (hw) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['alg']} | {r['oracle']} | {_ms(r['training_s'])} | {r['oracle_plans']} "
                     f"| {r['train_tasks']} ({_ms(r['train_greedy_sim_ms'])}) | {_ms(r['sim_ms'])} "
                     f"| {_pct(r['sim_vs_random'])} | {_ms(r['hw_ms'])} | {_pct(r['hw_vs_random'])} |")
    return "\n".join(lines) + "\n", rows


def model_table(out: Path) -> tuple[str, list[dict]]:
    """Markdown: test MSE, MAPE, Spearman of each cost model next to its measured noise floor, and the
    compute model on tables it never saw (the held-out-table check), if it ran."""
    rows = []
    for name, path in (("compute", out / "models" / "compute_metrics.json"),
                       *[(f"comm {k}", p) for p in sorted((out / "models").glob("comm_*_metrics.json"))
                         for k in [p.name.split("_")[2]]]):
        m = _load(path)
        if not m:
            continue
        test = m["metrics"]["test"]
        noise = m.get("noise_floor") or {}
        rows.append({"model": name, "samples": m.get("num_samples"), "mse": test["mse"], "mape": test["mape"],
                     "spearman": test["spearman"], "noise_floor": noise.get("mean"),
                     "noise_floor_median": noise.get("median"), "scatter": m.get("scatter"),
                     "mape_vs_noise": test["mape"] / noise["mean"] if noise.get("mean") else None,
                     "mape_vs_noise_interval": m.get("mape_over_floor")})
    pct = lambda x: "-" if x is None else f"{100 * x:.1f}%"  # noqa: E731
    lines = ["| model | samples | test MSE (ms²) | test MAPE | Spearman | noise floor: mean (median) | "
             "MAPE / noise floor |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = "-" if r["mape_vs_noise"] is None else f"{r['mape_vs_noise']:.2f}"
        ci = r["mape_vs_noise_interval"]
        if ci and r["mape_vs_noise"] is not None:
            ratio += f" ({ci['low']:.2f}-{ci['high']:.2f})"
        lines.append(f"| {r['model']} | {r['samples']} | {r['mse']:.4g} | {pct(r['mape'])} | {r['spearman']:.3f} | "
                     f"{pct(r['noise_floor'])} ({pct(r['noise_floor_median'])}) | {ratio} |")
    lines += ["", "The noise floor is |re-measured - recorded| / recorded over re-measured samples: its mean is the "
                  "MAPE a model that predicted the re-measurement exactly would score."]
    if any(r.get("mape_vs_noise_interval") for r in rows):
        lines += ["In brackets, the ratio's 95% interval with the test samples and the re-measured samples "
                  "resampled (the floor rests on a few hundred re-measurements at most)."]
    lines += collective_lines(out / "models", rows)
    held = _load(out / "models" / "compute_heldout.json")
    if held:
        m = held["mape"]
        lines += ["", "Held-out-table check (`heldout_check.py`): the compute model trained on the shards of "
                      f"one half of the dataset's tables ({held['folds']} folds), tested on",
                  "", "| shards of | count | test MAPE |", "|---|---|---|",
                  f"| tables seen in training (left-out shards) | {held['shards']['half0']} | "
                  f"{pct(m['in_distribution'])} |",
                  f"| tables never seen | {held['shards']['half1']} | {pct(m['unseen_tables'])} "
                  f"({held['unseen_vs_in']:.2f}x) |",
                  f"| both halves | {held['shards']['mixed']} | {pct(m['mixed'])} |"]
        rows.append({"model": "compute (held-out tables)", **held["mape"], "unseen_vs_in": held["unseen_vs_in"]})
    return "\n".join(lines) + "\n", rows


def _plots(out: Path, sim: Summary | None, hw: Summary | None) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    plots = out / "plots"
    plots.mkdir(exist_ok=True)
    algs = list(_rows(sim or hw))
    if algs:
        fig, ax = plt.subplots(figsize=(7, 3.5), dpi=120)
        x = np.arange(len(algs))
        for off, (label, s) in zip((-0.2, 0.2), (("simulator", sim), ("hardware", hw))):
            if s:
                by = _rows(s)
                means = np.array([by[a].mean_common if a in by and by[a].mean_common is not None else 0.0
                                  for a in algs])
                # the 95% interval of each mean as error bars (none where there is none)
                ci = np.array([by[a].mean_common_ci if a in by and by[a].mean_common_ci else [m, m]
                               for a, m in zip(algs, means)], dtype=float)
                yerr = np.clip(np.stack([means - ci[:, 0], ci[:, 1] - means]), 0.0, None)
                ax.bar(x + off, means, width=0.4, label=label, yerr=yerr, capsize=2, error_kw={"elinewidth": 0.8})
        ax.set_xticks(x, algs, rotation=20, fontsize=8)
        ax.set_ylabel("mean embedding cost (ms), 95% CI")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(plots / "cost_per_algorithm.png")
        plt.close(fig)
        made.append("plots/cost_per_algorithm.png")
    results = _load(out / "sim" / "results.json")
    if results:
        times = {}
        for r in results:
            if r.get("search_ms") is not None:
                times.setdefault(r["alg"], []).append(r["search_ms"])
        if times:
            fig, ax = plt.subplots(figsize=(7, 3.5), dpi=120)
            names = [a for a in algs if a in times] or sorted(times)
            ax.boxplot([times[a] for a in names])
            ax.set_xticks(range(1, len(names) + 1), names, rotation=20, fontsize=8)
            ax.set_yscale("log")
            ax.set_ylabel("search time per task (ms)")
            fig.tight_layout()
            fig.savefig(plots / "search_time.png")
            plt.close(fig)
            made.append("plots/search_time.png")
    return made


def ablation_lines(out: Path, records: list[PlanRecord] | None) -> tuple[list[str], dict | None]:
    """Markdown on the cost-model ablation (`eval.ablation`: search x cost model, measured) and the fitted
    estimator's own error; the figures for config.json. Nothing without the ablation's plans."""
    from neuroshard.eval.ablation import ablation

    result = ablation(records) if records else None
    if result is None:
        return [], None
    cell = lambda a: (f"{_ms(result.cells[a].mean)} [{_ms(result.cells[a].lo)}, {_ms(result.cells[a].hi)}]"  # noqa: E731
                      if a in result.cells else "–")
    lines = ["", "## Cost model against search", "",
             "NeuroShard's search and TorchRec's planner, each pricing plans with the pre-trained neural cost "
             "models and with TorchRec's own estimator whose coefficients were fitted by least squares to the same "
             f"cost data (step 4j); every cell's plans measured on hardware (mean ms over the {result.tasks} tasks "
             "all of them planned, 95% intervals).", "",
             "| search \\ cost model | neural | fitted analytic | TorchRec's defaults |", "|---|---|---|---|",
             f"| NeuroShard's search | {cell('neuroshard')} | {cell('neuroshard_fitted')} | – |",
             f"| TorchRec's planner | {cell('torchrec_neural')} | {cell('torchrec_fitted')} | {cell('torchrec')} |",
             "", "Effects (the second's cost over the first's, paired by task and round; positive: the first is "
             "cheaper):", ""]
    for e in result.effects:
        lines.append(f"- {e.name}: `{e.base}` against `{e.other}`: {_pct(e.gain)} [{_pct(e.gain_lo)}, "
                     f"{_pct(e.gain_hi)}], **{e.verdict}**")
    est = next(iter(sorted((out / "models").rglob("torchrec_estimator_*.json"))), None)
    fit = (_load(est) or {}).get("fit") if est else None
    if fit:
        c, m = fit["compute"], fit["comm"]
        lines.append(f"- The fitted estimator on held-out shards of its data: compute MAPE {100 * c['test_mape']:.1f}% "
                     f"(Spearman {c['test_spearman']:.3f}), exchanges {100 * m['mape']:.1f}%; on the evaluation's "
                     "measured plans: the `fitted` row of the model-error table.")
    return lines, {**result.to_json(), "fit": fit}


def collective_lines(models_dir: Path, rows: list[dict]) -> list[str]:
    """Markdown on the collective model of step 3e (the paper runtime's row-wise, table-row-wise and
    data-parallel tables): per collective and group its form and held-out MAPE beside the noise floor, appended
    to `rows`; nothing without one."""
    lines = []
    for path in sorted(models_dir.glob("collectives_*.json")):
        raw = _load(path) or {}
        for key, fit in (raw.get("fits") or {}).items():
            op, _, k = key.partition("@")
            group = f"{raw.get('ndevices')} ranks" if not k else f"each host's {k} of {raw.get('ndevices')} ranks"
            mape, floor = fit["test_mape"][fit["form"]], fit.get("noise_floor")
            rows.append({"model": f"{op} ({group})", "form": fit["form"], "samples": fit["samples"],
                         "mape": mape / 100, "noise_floor": None if floor is None else floor / 100})
            ratio = f"{mape / floor:.2f}" if floor else "-"
            lines.append(f"| {op} ({group}, {fit['form']}) | {fit['samples']} | - | "
                         f"{mape:.1f}% | - | {'-' if floor is None else f'{floor:.1f}%'} | {ratio} |")
    if not lines:
        return []
    return ["", "The collectives of row-wise, table-row-wise and data-parallel tables on the paper's runtime (step 3e, "
                "`collect_collective_cost_data.py`: each a linear, power or hinge law of the elements it moves, "
                "whichever predicted held-out samples best):", "",
            "| collective | samples | - | held-out MAPE | - | noise floor | MAPE / noise floor |",
            "|---|---|---|---|---|---|---|", *lines]


def spread_choices(records: list[PlanRecord] | None) -> list[str]:
    """One line: how many of each algorithm's plans have row-wise, table-row-wise or data-parallel tables, and
    how many such tables (nothing when no plan has one)."""
    plans, kinds = Counter(), {}
    for r in records or []:
        if r.plan is not None and r.plan.spread:
            plans[r.alg] += 1
            kinds.setdefault(r.alg, Counter()).update(s.kind for s in r.plan.spread)
    if not plans:
        return []
    parts = [f"{alg} in {n} plans ({', '.join(f'{c} {k}' for k, c in sorted(kinds[alg].items()))})"
             for alg, n in plans.items()]
    return [f"- Row-wise, table-row-wise and data-parallel tables: {'; '.join(parts)}."]


def collective_check(records: list[PlanRecord] | None) -> list[str]:
    """One line: the collective model against the measured collectives of the plans with row-wise or
    data-parallel tables (each rank's forward + backward collectives; nothing without such plans)."""
    pairs = [(sum(e), sum(m)) for r in records or [] if r.estimate is not None and r.measured is not None
             and r.estimate.collectives and r.measured.collectives
             for e, m in zip(r.estimate.collectives, r.measured.collectives) if sum(m) > 0]
    if not pairs:
        return []
    est, got = np.array(pairs).T
    plans = sum(1 for r in records if r.measured is not None and r.measured.collectives)
    err = 100 * np.mean(np.abs(est - got) / got)
    return [f"- The collectives of those plans ({plans} measured, {len(pairs)} ranks): estimated "
            f"{est.mean():.2f} ms a rank, measured {got.mean():.2f} ms (MAPE {err:.1f}%)."]


def write_report(out, preset, steps: list[dict], seconds: float, study: tuple[int, int] | None = None) -> Path:
    """Write report.md, plots/*.png and config.json into `out`; returns the report's path. `study`: the
    study preset's tasks x repeats, named beside the power line."""
    out = Path(out)
    sim, hw = (_load_summary(out / d / "summary.json") for d in ("sim", "hw"))
    cmp_md, verdicts = comparison_table(sim, hw)
    models_md, model_rows = model_table(out)
    plots = _plots(out, sim, hw)
    text = [f"# NeuroShard report — preset `{preset.name}`", "",
            f"{preset.problem.ndevices} devices, {preset.problem.mem_text}"
            f"{' each' if preset.problem.uniform else ''}; tasks of "
            f"{preset.t_range.replace(',', '–')} "
            f"tables. The steps took {sum(st['seconds'] for st in steps):.0f} s when they ran "
            f"(this run: {seconds:.0f} s; up-to-date steps are skipped). Every command is listed at the end.", "",
            "## Embedding cost per algorithm", "",
            "Mean cost (ms) over the tasks valid for every algorithm, with 95% bootstrap intervals over tasks "
            "(and repeated measurements on hardware); gain = (baseline − NeuroShard) / baseline, with the interval "
            "of the paired difference; the verdict is read from that interval." + (
                " On hardware both are prediction-powered: the measured difference corrected by the simulator's "
                "estimates on tasks that were not measured (see the power lines below)." if _powered(hw) else ""), "",
            cmp_md]
    text += verdict_lines(verdicts)
    text += power_lines(hw, study=study)
    text += headroom_lines(hw)
    drift = anchors = rounds = None
    results = out / "hw" / "results.json"
    records = read_plans(results) if results.exists() else None  # the evaluation's plans, read once
    planned = out / "sim" / "plans.json"
    text += spread_choices(read_plans(planned) if planned.exists() else None)
    text += collective_check(records)
    if hw and hw.simulator_accuracy:
        text += ["", "## Simulator vs hardware", "", accuracy_table(hw.simulator_accuracy)]
        lines, drift = drift_lines(out / "hw", records)
        text += lines
        lines, anchors = anchor_lines(out / "hw", records)
        text += lines
        lines, rounds = round_lines(out / "hw")
        text += ([""] + lines) if lines else []
    ablation_md, ablation_fig = ablation_lines(out, records)
    text += ablation_md
    refine_md, refine = refine_lines(records)
    text += refine_md
    oversize_md, oversize = oversize_lines(out)
    if oversize_md:
        text += ["", "## Tasks with a table larger than a device", ""] + oversize_md
    trec_lines, trec = torchrec_lines(out)
    if trec_lines:
        text += ["", "## TorchRec training (DistributedModelParallel)", ""] + trec_lines
    onpolicy_md, onpolicy = onpolicy_lines(out)
    text += onpolicy_md
    learned_md, learned_rows = learned_table(out, sim, hw)
    if learned_rows:
        text += ["", "## Learned baselines", "",
                 "DreamShard and AutoShard, re-implemented from their released code, trained on "
                 "their own tasks (never the evaluation tasks) against the oracle named here, then placing tables "
                 "greedily by the trained policy. Costs are the means over the tasks valid for every algorithm.", "",
                 learned_md]
        for r in learned_rows:
            curve = Path(r["curve"]) if r.get("curve") else None
            if curve is not None and curve.exists() and curve.resolve().is_relative_to(out.resolve()):
                text.append(f"![{r['alg']} training]({curve.resolve().relative_to(out.resolve())})")
    text += ["", "## Cost models", "", models_md, ""]
    for r in model_rows:
        if r.get("scatter"):
            text.append(f"![{r['model']}]({Path(r['scatter']).resolve().relative_to(out.resolve())})"
                        if Path(r["scatter"]).resolve().is_relative_to(out.resolve()) else f"- {r['scatter']}")
    text += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots]
    text += ["", "## Steps", "", "| step | what | seconds | command |", "|---|---|---|---|"]
    for s in steps:
        secs = f"{s['seconds']:.1f}" + (" (earlier run)" if s["skipped"] else "")
        text.append(f"| {s['step']} | {s['title']} | {secs} | `{s['command']}` |")
    report = out / "report.md"
    with atomic_write(report) as fh:
        fh.write("\n".join(text) + "\n")
    write_json_atomic(out / "config.json", {"preset": asdict(preset), "steps": steps, "wall_seconds": seconds,
                                            "versions": library_versions(), "models": model_rows,
                                            "learned": learned_rows, "verdicts": verdicts, "drift": drift,
                                            "anchors": anchors, "onpolicy": onpolicy, "refine": refine,
                                            "ablation": ablation_fig, "round_calibration": rounds,
                                            "torchrec_train": trec, "oversize": oversize})
    return report
