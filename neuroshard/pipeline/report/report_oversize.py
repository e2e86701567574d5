"""The report on the tasks beyond the paper's plan space (`oversize/`: a table larger than a device and a hot
table in every task), in the simulator, on hardware and trained with TorchRec."""

from __future__ import annotations

from pathlib import Path

from neuroshard.formats.plan_file import read_plans
from neuroshard.pipeline.report.report_common import load_json, load_summary
from neuroshard.pipeline.report.report_comparison import comparison_table, verdict_lines
from neuroshard.pipeline.report.report_drift import round_lines
from neuroshard.pipeline.report.report_spread import collective_check, spread_choices
from neuroshard.pipeline.report.report_torchrec import runtime_check_lines, torchrec_table
from neuroshard.types.records import PlanRecord


def unplanned_by(records: list[PlanRecord], alg: str, rival: str) -> list[int]:
    """The tasks `rival` planned and `alg` did not (a record without a plan, or not "ok", is not planned)."""
    def planned(a):
        return {r.task for r in records if r.alg == a and r.plan is not None and r.status == "ok"}
    return sorted(planned(rival) - planned(alg))


def oversize_lines(out: Path) -> tuple[list[str], dict | None]:
    """Markdown on the tasks beyond the paper's plan space (`oversize/`, the steps of the task set `oversize`):
    what the set is, who plans its tasks, and the comparison in the simulator and on hardware (None when the steps did not
    run)."""
    sim, hw = (load_summary(out / "oversize" / d / "summary.json") for d in ("sim", "hw"))
    if sim is None:
        return [], None
    data = load_json(out / "oversize" / "dataset" / "config.json") or {}
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
    rounds_md, rounds = round_lines(out / "oversize" / "hw", "6b:oversize",
                                    "plans of the second dataset's anchor tasks (step 5e:oversize's, never the "
                                    "evaluation's)")
    lines += [f"- {line}" for line in rounds_md]
    for rival, tasks in missed.items():
        lines.append(f"- Tasks {rival} planned and NeuroShard did not: {len(tasks)}"
                     + (f" ({', '.join(map(str, tasks))})" if tasks else "") + ".")
    trec_md, trec, _ = torchrec_table(out / "oversize" / "torchrec")
    if trec_md:
        lines += ["", "The first of these tasks trained with TorchRec (step 7f:oversize), where the plans may also be "
                      "row-wise and data-parallel: neuroshard[torchrec] searches every sharding type its runtime "
                      "model was fitted on, torchrec_full is TorchRec's planner as users get it.", "", trec_md]
        lines += runtime_check_lines(out / "oversize" / "torchrec" / "runtime_model_error.json", "7g:oversize")
    return lines, {"verdicts": verdicts, "planned_none": none, "unplanned_by_neuroshard": missed,
                   "round_calibration": rounds, "torchrec_train": trec}
