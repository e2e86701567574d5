"""The pipeline's report: `report.md`, plots and `config.json` in the run's folder.

Reads what the steps wrote (simulator and hardware `summary.json`, the cost
models' `*_metrics.json`, the plan records with search times) and puts the
paper-style comparison next to the cost-model accuracy. `write_report` puts
the sections together; each family of them is a module here:

- `report_comparison`: the cost per algorithm, the verdicts, their power, the headroom;
- `report_spread`: the row-wise, table-row-wise and data-parallel tables and their collectives;
- `report_models`: the simulator against the hardware, and the cost models' table;
- `report_drift`: the machine's drift, the anchors' plan-level speed, the per-round calibration;
- `report_search`: the cost-model ablation, and hardware in the loop (`--refine`);
- `report_oversize`: the tasks with a table larger than a device;
- `report_torchrec`: the plans trained with TorchRec (phase 7);
- `report_onpolicy`: the on-policy cost data and the models' error before and after it;
- `report_learned`: DreamShard and AutoShard;
- `report_plots`: the figures;
- `report_common`: the readers of the steps' files and the number formats the others share.
"""

from __future__ import annotations

import platform
from dataclasses import asdict
from importlib import metadata
from pathlib import Path

from neuroshard.formats.io import atomic_write, write_json_atomic
from neuroshard.formats.plan_file import read_plans
from neuroshard.pipeline.report.report_common import load_summary
from neuroshard.pipeline.report.report_comparison import (
    comparison_table,
    headroom_lines,
    power_lines,
    powered,
    verdict_lines,
)
from neuroshard.pipeline.report.report_drift import anchor_lines, drift_lines, round_lines
from neuroshard.pipeline.report.report_learned import learned_table
from neuroshard.pipeline.report.report_models import accuracy_table, model_table
from neuroshard.pipeline.report.report_onpolicy import onpolicy_lines
from neuroshard.pipeline.report.report_oversize import oversize_lines
from neuroshard.pipeline.report.report_plots import write_plots
from neuroshard.pipeline.report.report_search import ablation_lines, refine_lines
from neuroshard.pipeline.report.report_spread import collective_check, spread_choices
from neuroshard.pipeline.report.report_torchrec import torchrec_lines


def library_versions() -> dict:
    """The versions of Python, the platform and the libraries that ran (for config.json)."""
    out = {"python": platform.python_version(), "platform": platform.platform()}
    for pkg in ("torch", "fbgemm-gpu-cpu", "fbgemm-gpu", "numpy", "tqdm", "matplotlib"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return out


def write_report(out, preset, steps: list[dict], seconds: float, study: tuple[int, int] | None = None) -> Path:
    """Write report.md, plots/*.png and config.json into `out`; returns the report's path. `study`: the
    study preset's tasks x repeats, named beside the power line."""
    out = Path(out)
    sim, hw = (load_summary(out / d / "summary.json") for d in ("sim", "hw"))
    cmp_md, verdicts = comparison_table(sim, hw)
    models_md, model_rows = model_table(out)
    plots = write_plots(out, sim, hw)
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
                "estimates on tasks that were not measured (see the power lines below)." if powered(hw) else ""), "",
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
