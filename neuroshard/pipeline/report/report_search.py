"""The report on what the search gets from its cost models and from the hardware: the cost-model ablation
(search x cost model, measured) and hardware in the loop (`--refine`)."""

from __future__ import annotations

from pathlib import Path

from neuroshard.pipeline.report.report_common import fmt_ms, load_json, signed_pct
from neuroshard.types.records import PlanRecord


def ablation_lines(out: Path, records: list[PlanRecord] | None) -> tuple[list[str], dict | None]:
    """Markdown on the cost-model ablation (`eval.ablation`: search x cost model, measured) and the fitted
    estimator's own error; the figures for config.json. Nothing without the ablation's plans."""
    from neuroshard.eval.ablation import ablation

    result = ablation(records) if records else None
    if result is None:
        return [], None
    cell = lambda a: (f"{fmt_ms(result.cells[a].mean)} [{fmt_ms(result.cells[a].lo)}, "  # noqa: E731
                      f"{fmt_ms(result.cells[a].hi)}]" if a in result.cells else "–")
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
        lines.append(f"- {e.name}: `{e.base}` against `{e.other}`: {signed_pct(e.gain)} [{signed_pct(e.gain_lo)}, "
                     f"{signed_pct(e.gain_hi)}], **{e.verdict}**")
    est = next(iter(sorted((out / "models").rglob("torchrec_estimator_*.json"))), None)
    fit = (load_json(est) or {}).get("fit") if est else None
    if fit:
        c, m = fit["compute"], fit["comm"]
        lines.append(f"- The fitted estimator on held-out shards of its data: compute MAPE {100 * c['test_mape']:.1f}% "
                     f"(Spearman {c['test_spearman']:.3f}), exchanges {100 * m['mape']:.1f}%; on the evaluation's "
                     "measured plans: the `fitted` row of the model-error table.")
    return lines, {**result.to_json(), "fit": fit}


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
