"""The report on the models' accuracy: the simulator's estimates against the measured plans (the section
"Simulator vs hardware") and each cost model's test error beside its noise floor (the section "Cost models")."""

from __future__ import annotations

from pathlib import Path

from neuroshard.eval.accuracy import Accuracy
from neuroshard.pipeline.report.report_common import load_json
from neuroshard.pipeline.report.report_spread import collective_lines


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


def model_table(out: Path) -> tuple[str, list[dict]]:
    """Markdown: test MSE, MAPE, Spearman of each cost model next to its measured noise floor, and the
    compute model on tables it never saw (the held-out-table check), if it ran."""
    rows = []
    # the per-count comm models (comm_<n>_fw, _bw); those for any world size are `world_lines`'
    for name, path in (("compute", out / "models" / "compute_metrics.json"),
                       *[(f"comm {k}", p) for p in sorted((out / "models").glob("comm_*_*_metrics.json"))
                         for k in [p.name.split("_")[2]]]):
        m = load_json(path)
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
    lines += world_lines(out / "models")
    held = load_json(out / "models" / "compute_heldout.json")
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


def world_lines(models: Path) -> list[str]:
    """The comm models for any world size (step 4k) where the run trained them: each model's test MAPE per
    world size it trained on and its MAPE on each held-out size, against that size's noise floor (nothing
    otherwise)."""
    pct = lambda x: "-" if x is None else f"{100 * x:.1f}%"  # noqa: E731

    def against(row: dict) -> str:
        if row.get("over_floor") is None:
            return pct(row["mape"])
        ci = row.get("over_floor_interval")
        return f"{pct(row['mape'])} vs {pct(row['floor'])} ({row['over_floor']:.2f}x" + (
            f" [{ci['low']:.2f}, {ci['high']:.2f}])" if ci else ")")

    lines = []
    for kind, name in (("fw", "forward"), ("bw", "backward")):
        m = load_json(models / f"comm_{kind}_metrics.json")
        if not m:
            continue
        tested = "; ".join(f"{k} ranks {against(row)}" for k, row in m["by_size"].items())
        held = "; ".join(f"{row['ndevices']} ranks {against(row)}" for row in m.get("checks") or [])
        lines.append(f"- {name}: test split {tested}" + (f"; held out (never trained on): {held}" if held else ""))
    if not lines:
        return []
    return ["", "Comm models for any world size (step 4k, `models/comm_fw.pt`, `comm_bw.pt`; an extra artifact: "
                "the run plans with its own count's models; `CostModels.load(run / \"models\", n)` binds them to n "
                "ranks), MAPE vs each size's noise floor (the ratio, with its 95% interval where the floor keeps "
                "its values):", "", *lines]
