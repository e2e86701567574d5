"""The report on the on-policy step: the plan data, the predicted band calibrated on it, NeuroShard+'s lambda
chosen on hardware, and the models' error before and after it on the evaluation's plans."""

from __future__ import annotations

from pathlib import Path

from neuroshard.formats.side_files import (
    LAMBDA_JSON,
    MODEL_ERROR_JSON,
    LambdaChoice,
    ModelErrorReport,
    PlanErrorReport,
    plan_error_json,
    read_side_file,
)
from neuroshard.pipeline.report.report_common import load_json, optional_side_file


def onpolicy_lines(out: Path) -> tuple[list[str], dict | None]:
    """Markdown on the on-policy step (eval/onpolicy.py): how much plan data, NeuroShard+'s lambda chosen on
    hardware, and the error of the models before and after it on the evaluation's measured plans
    (model_error.py); the figures for config.json. Nothing when the run had no on-policy step."""
    lam = optional_side_file(out / "plan_data" / LAMBDA_JSON, LambdaChoice)
    errors = optional_side_file(out / "hw" / MODEL_ERROR_JSON, ModelErrorReport)
    if lam is None and errors is None:
        return [], None
    pct = lambda x: "-" if x is None else f"{100 * x:.1f}%"  # noqa: E731
    lines = ["", "## On-policy cost data", "",
             "The plans of training tasks (never the evaluation tasks), made with the models of the random data, "
             "measured as the evaluation measures: their shards and exchanges are cost data where plans live; "
             "the models used from the policy steps on were retrained on both (steps 4e, 4f)."]
    for kind in ("compute", "comm"):
        cfg = load_json(out / "plan_data" / kind / "config.json")
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
