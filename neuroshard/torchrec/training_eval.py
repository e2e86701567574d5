"""TorchRec training as a measurement (eval_torchrec.py): every algorithm's plan trained under
DistributedModelParallel, in shuffled rounds, with intervals and verdicts against a reference.

Each plan record (eval_simulator.py's plans.json) becomes a TorchRec
`ShardingPlan` (`torchrec.export`, fused kernel, the EmbeddingBagCollection
at `torchrec.training.MODULE_PATH`), written to `<out_dir>/torchrec_plans/`.
`torchrec_full` (TorchRec's planner with every sharding type, `torchrec.full_planner`)
has no plan record: it is planned here per task (`plan_full`) and its
ShardingPlan re-emitted for the ranks; a task it finds no plan for within
memory is recorded "oom" and left out of the common tasks. ONE torchrun job
(`torchrec.training`) trains a DLRM with each of them for `warmup` +
`iters` iterations and records every iteration's step time (the slowest
rank's, a barrier before each iteration). The plans are trained in
`repeats` rounds, each round every plan once, in a seeded shuffled order
(`eval.hardware.measurement_order`), so a slow spell of the machine hits all
algorithms alike. A plan's step time in a round is the median of its
iterations.

Summary (`summarize`): per algorithm, over the tasks every algorithm has a
plan for, the mean step time with its 95% bootstrap interval over tasks and
rounds (`eval.intervals`), and its ratio to the reference's step time, paired
by task and round: mean of (alg - ref) / ref, with its interval, the verdict
read from it, and the smallest difference the run can detect (`eval.power`).
The noise floor is the same plan measured in two rounds (`power.plan_repeat_noise`)
and the spread of iterations within one measurement.

Per-round calibration (`anchors`): a few plans of tasks that are not
evaluated (in the pipeline, step 7a's plans, which the runtime model was fitted
to: against them a round's ratio is the machine's speed against the hour of the
fit alone, and the evaluation's plans keep the model's own error) are trained
once in every round, spread over it; `round_anchors.json` holds their step times by round,
from which train_torchrec_cost_model.py --check_results reads each round's
speed against the runtime model (`round_calibration.step_accuracy`).

Resumable like eval.py: every measurement is appended to
`<out_dir>/.partial/measurements.jsonl` as it arrives; a rerun of the same
command trains only what is missing; `.partial/` goes once all are done.
Writes `results.json` (per plan record: the step time of each round and
every iteration), `torchrec_full.json` (per task: TorchRec's plan, its
sharding types, and the same times), `summary.json` and `summary.md`. Times in ms.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from neuroshard.eval.hardware import PARTIAL_DIR, measurement_order, plan_identity
from neuroshard.eval.intervals import mean_interval, verdict
from neuroshard.eval.power import components, plan_repeat_noise
from neuroshard.eval.round_calibration import ANCHOR_PREFIX, anchor_order, pick_anchors
from neuroshard.formats.side_files import ROUND_ANCHORS_JSON
from neuroshard.torchrec.full_planner import FULL_ALG, FULL_TITLE
from neuroshard.torchrec.training import MODULE_PATH, TorchRecStep, TorchRecTrainConfig
from neuroshard.types.errors import InputError, OutOfMemoryError
from neuroshard.types.records import PlanRecord, task_identity
from neuroshard.types.tables import TableConfig, Task

MEASUREMENTS = "measurements.jsonl"
PLANS_DIR = "torchrec_plans"
RESULTS_JSON, SUMMARY_JSON, SUMMARY_MD = "results.json", "summary.json", "summary.md"
FULL_JSON = "torchrec_full.json"
TITLES = {FULL_ALG: FULL_TITLE}  # what an algorithm is, where its name alone does not say
# one sentence for every report: why the numbers on this machine are noisy
NOISE_NOTE = ("On a CPU machine the ranks are processes that run at once on the same cores: with more ranks than "
              "cores they take turns, so a step's time also holds the time a rank waited to be scheduled, and "
              "anything else running on the machine lands in it too.")


def merge_plan_files(files: Sequence[Sequence[PlanRecord]]) -> list[PlanRecord]:
    """The records of several plans files, in order; a (task, algorithm) already given by an earlier file is
    skipped (e.g. the paper-runtime plans beside the TorchRec-runtime ones, `eval.planning.label_runtime`)."""
    seen, out = set(), []
    for records in files:
        keys = set()  # this file's: a duplicate within one file is left for `select_records` to report
        for rec in records:
            if (rec.task, rec.alg) not in seen:
                out.append(rec)
            keys.add((rec.task, rec.alg))
        seen |= keys
    return out


def select_records(records: Sequence[PlanRecord], tasks: Sequence[Task], configs: Sequence[TableConfig],
                   algs: Sequence[str] | None, max_tasks: int | None, ndevices: int, path) -> list[PlanRecord]:
    """The plan records to train: those with a plan, of the first `max_tasks` tasks and of `algs` (None:
    all), made for `ndevices` devices. InputError (naming `path`) for a task the task file does not have,
    a duplicate, a plan for another device count or for other tables than its task's (`plan_mismatch`);
    ConfigError for an algorithm of `algs` without a plan there."""
    from neuroshard.formats.plan_file import check_plan_tables
    from neuroshard.types.errors import ConfigError

    n = len(tasks) if max_tasks is None else min(max_tasks, len(tasks))
    seen = set()
    out = []
    for k, rec in enumerate(records):
        where = f"record {k} (task {rec.task}, {rec.alg})"
        if rec.task >= len(tasks):
            raise InputError(path, f"{where}: the task file has {len(tasks)} tasks")
        if (rec.task, rec.alg) in seen:
            raise InputError(path, f"{where}: a second record for the same task and algorithm")
        seen.add((rec.task, rec.alg))
        if rec.plan is None or rec.task >= n or (algs is not None and rec.alg not in algs):
            continue
        if rec.plan.ndevices != ndevices:
            raise InputError(path, f"{where}: a plan for {rec.plan.ndevices} devices, training on {ndevices} ranks")
        if rec.num_tables not in (None, len(tasks[rec.task])):
            raise InputError(path, f"{where}: a plan for {rec.num_tables} tables, task {rec.task} has "
                                   f"{len(tasks[rec.task])} (plans made for another task file?)")
        check_plan_tables(rec, tasks[rec.task].tables(configs), path, f"task {rec.task} of the task file")
        out.append(rec)
    missing = [a for a in algs or () if not any(r.alg == a for r in out)]
    if out and missing:
        there = ", ".join(dict.fromkeys(r.alg for r in records))
        raise ConfigError("--alg", f"no plan of {', '.join(missing)} for the first {n} tasks in {path} (its "
                                   f"algorithms: {there})")
    if not out:
        raise InputError(path, f"no plan to train for the first {n} tasks"
                               + ("" if algs is None else f" and algorithms {', '.join(algs)}"))
    return out


def anchor_records(path, configs: Sequence[TableConfig], k: int, ndevices: int) -> list[PlanRecord]:
    """The anchors of per-round calibration in training: `pick_anchors`' plans (the pipeline's step 5e
    plans.json, of tasks nothing trained on), labelled `ANCHOR_PREFIX` + algorithm, on the tables their records
    name. InputError naming the file and record for a plan for another device count."""
    out = []
    for where, rec, tables in pick_anchors(path, configs, k):
        if rec.plan.ndevices != ndevices:
            raise InputError(path, f"{where}: a plan for {rec.plan.ndevices} devices, training on {ndevices} ranks")
        out.append(PlanRecord(rec.task, ANCHOR_PREFIX + rec.alg, plan=rec.plan, num_tables=len(tables),
                              table_ids=rec.table_ids, dims=rec.dims))
    return out


def _tables_of(rec: PlanRecord, tasks: Sequence[Task], configs: Sequence[TableConfig]):
    """A record's tables: an anchor's are those it names (a training task's), the others their task's."""
    if rec.alg.startswith(ANCHOR_PREFIX):
        return Task(tuple(rec.table_ids), tuple(rec.dims)).tables(configs)
    return tasks[rec.task].tables(configs)


def _item(task: int, alg: str, tables, names, path) -> dict:
    return {"task": task, "alg": alg, "names": names, "table_ids": [t.table_id for t in tables],
            "dims": [t.dim for t in tables], "rows": [t.config.row for t in tables],
            "plan_path": str(Path(path).resolve())}


def export_plans(records: Sequence[PlanRecord], tasks: Sequence[Task], configs: Sequence[TableConfig],
                 plan_dir, device: str, local_size: int | None = None) -> list[dict]:
    """Each record's plan as a TorchRec ShardingPlan file in `plan_dir`, and the job's item for it (task,
    algorithm, table names, dataset ids, dims, rows, plan file); in record order, without `repeat`."""
    from neuroshard.torchrec.export import export_torchrec_plan
    from neuroshard.torchrec.sharder import table_names

    plan_dir = Path(plan_dir)
    plan_dir.mkdir(parents=True, exist_ok=True)
    items = []
    for rec in records:
        tables = _tables_of(rec, tasks, configs)
        names = table_names(tables)
        path, _ = export_torchrec_plan(plan_dir / f"task{rec.task}_{rec.alg}.pt", tables, rec.plan, names,
                                       device_type=device, module_path=MODULE_PATH, local_size=local_size)
        items.append(_item(rec.task, rec.alg, tables, names, path))
    return items


@dataclass
class FullPlan:
    """TorchRec's full planner on one task: its `ShardingPlan` (module "", planned for cuda), or None with the
    reason ("oom": no plan within memory); `search_ms`: the planner's wall time; `planned_for`: the devices
    in words ("4 GPUs of 1 GB each")."""

    task: int
    sharding_plan: object | None
    status: str = "ok"
    message: str | None = None
    search_ms: float = 0.0
    planned_for: str = ""
    alg: str = FULL_ALG

    @property
    def layout(self) -> dict | None:
        from neuroshard.torchrec.full_planner import layout_summary

        return None if self.sharding_plan is None else layout_summary(self.sharding_plan.plan[""])

    @property
    def splits(self) -> int:
        """Its column-split tables (column-wise or table-column-wise)."""
        types = (self.layout or {}).get("types", {})
        return types.get("column_wise", 0) + types.get("table_column_wise", 0)


def plan_full(task_ids: Sequence[int], tasks: Sequence[Task], configs: Sequence[TableConfig], problem,
              batch_size: int) -> list[FullPlan]:
    """TorchRec's full planner (`torchrec.full_planner`) on each task, for `problem`'s devices and memory and the
    global batch `batch_size`; a task without a plan within memory is recorded "oom" with TorchRec's reason."""
    from neuroshard.torchrec.full_planner import plan_torchrec_full
    from neuroshard.torchrec.sharder import TorchRecConfig

    cfg = TorchRecConfig(batch_size=batch_size)
    devices = f"{problem.ndevices} GPUs of {problem.mem_text}" + (" each" if problem.uniform else "") + (
        f" on {len(problem.hosts)} hosts of {problem.local_world_size}" if problem.local_world_size else "")
    out = []
    for k in task_ids:
        t0 = time.perf_counter()
        try:
            plan = plan_torchrec_full(tasks[k].tables(configs), problem, cfg)
            out.append(FullPlan(k, plan, search_ms=(time.perf_counter() - t0) * 1e3, planned_for=devices))
        except OutOfMemoryError as e:
            out.append(FullPlan(k, None, "oom", str(e), (time.perf_counter() - t0) * 1e3, devices))
    return out


def export_full_plans(full: Sequence[FullPlan], tasks: Sequence[Task], configs: Sequence[TableConfig], plan_dir,
                      device: str, world_size: int, local_size: int | None = None) -> list[dict]:
    """Each planned task's TorchRec plan re-emitted for the ranks (`full_planner.for_ranks`) as a plan file in
    `plan_dir` with its readable layout beside it, and the job's item for it; those with a plan, in order."""
    from neuroshard.torchrec.full_planner import for_ranks
    from neuroshard.torchrec.sharder import sharding_layout, table_names
    from neuroshard.formats.sharding_file import write_torchrec_plan

    plan_dir = Path(plan_dir)
    plan_dir.mkdir(parents=True, exist_ok=True)
    items = []
    for fp in full:
        if fp.sharding_plan is None:
            continue
        tables = tasks[fp.task].tables(configs)
        names = table_names(tables)
        ranked = for_ranks(fp.sharding_plan, device, MODULE_PATH, local_size)
        layout = sharding_layout(ranked.plan[MODULE_PATH])
        view = {"world_size": world_size, "modules": {MODULE_PATH: [
            {"table": n, "compute_kernel": ranked.plan[MODULE_PATH][n].compute_kernel, **layout[n]} for n in names]}}
        path, _ = write_torchrec_plan(plan_dir / f"task{fp.task}_{fp.alg}.pt", ranked, view)
        items.append(_item(fp.task, fp.alg, tables, names, path))
    return items


def measurement_key(entry, repeat: int) -> str:
    """What the measurement log keys a measurement by: a plan record's `plan_identity`, or for TorchRec's full
    planner the task, the algorithm, its plan's layout and the round."""
    if isinstance(entry, FullPlan):
        from neuroshard.torchrec.full_planner import layout_key

        return json.dumps([entry.task, entry.alg, layout_key(entry.sharding_plan.plan[""]), repeat],
                          separators=(",", ":"))
    return plan_identity(entry, repeat)


# =========================================================================== summary


def step_costs(entries: Sequence, steps: dict[str, TorchRecStep], repeats: int) -> dict:
    """{(task, alg): [the plan's step ms in round 0, 1, ...]} of plan records or `FullPlan`s, from the
    measurements keyed by `measurement_key`."""
    return {(e.task, e.alg): [steps[measurement_key(e, r)].cost for r in range(repeats)] for e in entries}


def summarize(costs: dict, reference: str, algs: Sequence[str], iteration_spread: float | None = None,
              seed: int = 0, splits: dict | None = None, median_se: float | None = None) -> dict:
    """The run's summary (JSON-able) from `costs[(task, alg)]` = step ms per round.

    Over the tasks every algorithm of `algs` has a plan for: per algorithm
    the mean step ms with its 95% interval (over tasks and rounds) and, for
    every other algorithm, its step time relative to the reference's, paired
    by task and round: mean of (alg - ref) / ref with its interval, the
    verdict ("<reference> beats / loses to / no significant difference"
    with the algorithm, from the interval) and the minimum detectable
    difference (None with fewer than 2 tasks or rounds; the verdict None from a single task and
    round). `noise`: how far two
    rounds of the same plan differ (`plan_repeat_noise`), and
    `iteration_spread` (the median relative spread of iterations within one
    measurement) and `median_se` (how well a measurement's median is known, `median_uncertainty`),
    as given. `splits[(task, alg)]`: the plan's column splits; each row then counts
    its plans with at least one (`split_plans`): in TorchRec such a plan runs a second sharding group.
    """
    tasks = sorted({t for t, _ in costs})
    common = [t for t in tasks if all((t, a) in costs for a in algs)]
    rows = []
    for a in algs:
        row = {"alg": a, "plans": sum(1 for t in tasks if (t, a) in costs), "tasks": len(common)}
        if splits is not None:
            row["split_plans"] = sum(1 for t in tasks if splits.get((t, a), 0) > 0)
        if common:
            iv = mean_interval([costs[t, a] for t in common], seed=seed)
            row.update(mean_ms=iv.mean, ci=[iv.lo, iv.hi])
        if a != reference and common:
            ref = [costs[t, reference] for t in common]
            oth = [costs[t, a] for t in common]
            rel = [[(o - r) / r for o, r in zip(ot, rt)] for ot, rt in zip(oth, ref)]
            d = mean_interval(rel, seed=seed)
            comp = components(ref, oth)
            # one task measured once has no spread to read a verdict from
            row.update(ratio=1 + d.mean, ratio_ci=[1 + d.lo, 1 + d.hi],
                       verdict=verdict(d) if d.n_tasks * d.n_repeats > 1 else None,
                       mdd=None if comp is None else comp.mdd())
        rows.append(row)
    repeat = plan_repeat_noise(list(costs.values()))
    return {"reference": reference, "common_tasks": common, "algorithms": rows,
            "noise": {"repeat": repeat, "iteration_spread": iteration_spread, "median_se": median_se}}


def iteration_spread(steps: Sequence[TorchRecStep]) -> float | None:
    """The median over measurements of (p90 - p10) / median of their iterations' step times."""
    spreads = [float((np.quantile(s.iters, 0.9) - np.quantile(s.iters, 0.1)) / s.cost) for s in steps
               if len(s.iters) >= 2 and s.cost > 0]
    return float(np.median(spreads)) if spreads else None


def median_uncertainty(steps: Sequence[TorchRecStep], seed: int = 0, resamples: int = 200) -> float | None:
    """The median over measurements of the bootstrap standard error of their median iteration, relative to
    it: how much more iterations could still narrow a measurement (against the spread between rounds)."""
    rng = np.random.default_rng(seed)
    out = []
    for s in steps:
        it = np.asarray(s.iters, dtype=np.float64)
        if len(it) >= 2 and s.cost > 0:
            medians = np.median(it[rng.integers(0, len(it), size=(resamples, len(it)))], axis=1)
            out.append(float(medians.std() / s.cost))
    return float(np.median(out)) if out else None


def full_summary(full: Sequence[FullPlan]) -> dict:
    """What TorchRec's full planner chose over its tasks: tables per sharding type, tasks using each type, the
    tasks it found no plan for (with its reason), its mean planning ms, and the devices it planned for."""
    tables, tasks_by_type = Counter(), Counter()
    for fp in full:
        if fp.sharding_plan is not None:
            types = fp.layout["types"]
            tables.update(types)
            tasks_by_type.update(types.keys())
    return {"planned": sum(fp.sharding_plan is not None for fp in full), "tables_by_type": dict(tables),
            "tasks_by_type": dict(tasks_by_type), "planned_for": full[0].planned_for if full else None,
            "no_plan": [{"task": fp.task, "status": fp.status, "message": fp.message} for fp in full
                        if fp.sharding_plan is None],
            "search_ms": float(np.mean([fp.search_ms for fp in full])) if full else None}


def flat_settings(training: dict) -> dict:
    """A training config's settings (`TorchRecTrainConfig.to_json`) with the problem's device count at the top
    (`ndevices`), as `summary_markdown` and the report read it."""
    return {"ndevices": (training.get("problem") or {}).get("ndevices"), **training}


def summary_markdown(summary: dict, config: dict | None = None) -> str:
    """The table (mean step ms [95% CI], ratio to the reference [95% CI], verdict, detectable difference)
    and the noise sentences."""
    ref = summary["reference"]
    pct = lambda x: "-" if x is None else f"{100 * x:.1f}%"  # noqa: E731
    lines = [f"| algorithm | step ms [95% CI] | vs {ref} [95% CI] | verdict | detectable | plans (with column "
             "splits) |", "|---|---|---|---|---|---|"]
    for r in summary["algorithms"]:
        mean = "-" if r.get("mean_ms") is None else f"{r['mean_ms']:.1f} [{r['ci'][0]:.1f}, {r['ci'][1]:.1f}]"
        if r["alg"] == ref:
            ratio, word, mdd = "1 (reference)", "", ""
        elif r.get("ratio") is None:
            ratio, word, mdd = "-", "-", "-"
        else:
            ratio = f"{r['ratio']:.3f} [{r['ratio_ci'][0]:.3f}, {r['ratio_ci'][1]:.3f}]"
            word = {"beats": f"{ref} beats it", "loses to": f"{ref} loses to it", None: "- (one measurement)",
                    "no significant difference": "no significant difference"}[r["verdict"]]
            mdd = "-" if r.get("mdd") is None else f"≥ {100 * r['mdd']:.1f}%"
        split = "" if r.get("split_plans") is None else f" ({r['split_plans']})"
        name = r["alg"] + (f" ({summary['titles'][r['alg']]})" if r["alg"] in summary.get("titles", {}) else "")
        lines.append(f"| {name} | {mean} | {ratio} | {word} | {mdd} | {r['plans']}{split} |")
    lines.append("")
    n = len(summary["common_tasks"])
    head = (f"Step time of one training iteration (forward, loss, backward with the fused embedding update, dense "
            f"optimizer step; the slowest rank's, after a barrier), the median of each measurement's iterations, "
            f"averaged over {n} tasks and the rounds; a ratio above 1 means a slower step than {ref}'s plan, paired "
            f"by task and round.")
    if config:
        head += (f" {config.get('ndevices')} {config.get('device')} ranks, batch {config.get('batch_size')}, "
                 f"{config.get('warmup')} + {config.get('iters')} iterations per measurement, "
                 f"{config.get('repeats')} rounds.")
    lines.append(head)
    full = summary.get("full_planner")
    if full:
        chose = ", ".join(f"{t} for {n} tables ({full['tasks_by_type'][t]} tasks)"
                          for t, n in sorted(full["tables_by_type"].items(), key=lambda kv: -kv[1]))
        lines.append("")
        lines.append(f"{FULL_ALG}: TorchRec's EmbeddingShardingPlanner with all its defaults and every sharding type, "
                     f"planned for {full['planned_for']} and re-emitted for the ranks "
                     f"(same types, ranks and shards; the dense kernel for data-parallel tables). Over the "
                     f"{full['planned']} tasks it planned it chose {chose or 'nothing'}"
                     + (f"; {len(full['no_plan'])} tasks had no plan within memory (not trained, so out of the "
                        f"common tasks)." if full["no_plan"] else "."))
    noise = summary["noise"]
    rep, spread = noise.get("repeat"), noise.get("iteration_spread")
    parts = []
    if rep:
        parts.append(f"the same plan trained in two rounds differed by {pct(rep['mean'])} on average (median "
                     f"{pct(rep['median'])}, {rep['plans']} plans)")
    if spread is not None:
        parts.append(f"within one measurement the iterations spread by {pct(spread)} (p90 - p10 over the median, "
                     f"median over measurements)")
    if parts:
        lines.append("")
        lines.append("Noise floor: " + "; ".join(parts) + ". " + NOISE_NOTE)
    se = noise.get("median_se")
    if se is not None and rep:
        lines.append("")
        lines.append(f"A measurement's median is known to ±{pct(se)} (bootstrap standard error over its iterations), "
                     f"while two rounds of the same plan differ by {pct(rep['mean'])}: "
                     + ("the rounds, not the iterations, limit the intervals; add rounds or tasks rather than "
                        "iterations." if se < rep["mean"] / 2 else "more iterations would still narrow the "
                                                                    "intervals."))
    return "\n".join(lines) + "\n"


# =========================================================================== the whole run


def run_torchrec_eval(records: Sequence[PlanRecord], tasks: Sequence[Task], configs: Sequence[TableConfig],
                      data_dir, batch_size: int, cfg: TorchRecTrainConfig, out_dir, algs: Sequence[str],
                      reference: str, config: dict | None = None, show: Callable[[str], None] | None = print,
                      progress: bool = True, full: Sequence[FullPlan] = (),
                      anchors: Sequence[PlanRecord] = ()) -> dict:
    """Train every record's plan, and every plan of TorchRec's full planner in `full` (`plan_full`; those without
    a plan are only recorded), `cfg.repeats` times in shuffled rounds in one job; write and return the summary.
    `anchors` (`anchor_records`): plans of other tasks trained once in every round, spread over it
    (`round_calibration.anchor_order`), their step times written to `ROUND_ANCHORS_JSON` for the rounds' speed.

    Resumable (module doc); `config` (the run's settings) must match an interrupted run's.
    """
    from tqdm import tqdm

    from neuroshard.formats.io import (
        append_line,
        check_run_config,
        open_append,
        write_json_atomic,
    )
    from neuroshard.torchrec.training import train_plans

    cfg.validate()
    out = Path(out_dir)
    partial = out / PARTIAL_DIR
    partial.mkdir(parents=True, exist_ok=True)
    log_path = partial / MEASUREMENTS
    with open_append(log_path, exclusive=True) as log:
        check_run_config(partial, {**(config or {}), "training": cfg.to_json(), "batch_size": batch_size})
        done: dict[str, TorchRecStep] = {}
        for line in log_path.read_text().splitlines():
            key, rec = json.loads(line)
            done[key] = TorchRecStep.from_json(rec)
        local = cfg.problem.local_world_size or (None if cfg.device == "cpu" else cfg.ndevices)
        planned = [fp for fp in full if fp.sharding_plan is not None]
        entries = [*records, *planned]
        items = export_plans([*records, *anchors], tasks, configs, out / PLANS_DIR, cfg.device, local) + \
            export_full_plans(planned, tasks, configs, out / PLANS_DIR, cfg.device, cfg.ndevices, local)
        by_id = {id(e): it for e, it in zip([*records, *anchors, *planned], items)}
        rounds = anchor_order(measurement_order(entries, cfg.repeats, cfg.problem.seed), anchors, cfg.repeats)
        todo = [(e, r) for e, r in rounds if measurement_key(e, r) not in done]
        if show is not None and len(todo) < len(rounds):
            show(f"{len(rounds) - len(todo)} of {len(rounds)} measurements were made by an earlier, interrupted run")
        job_items = [{**by_id[id(rec)], "repeat": r} for rec, r in todo]
        bar = tqdm(total=len(todo), desc="TorchRec training", unit="plan", disable=None if progress else True)
        t0 = time.perf_counter()

        def arrived(step: TorchRecStep) -> None:
            rec, r = todo[step.index]
            key = measurement_key(rec, r)
            append_line(log, json.dumps([key, step.to_json()], separators=(",", ":")))
            done[key] = step
            bar.update(1)
            if show is not None:
                bar.write(f"task {rec.task} [{rec.alg}] round {r + 1}/{cfg.repeats}: step {step.cost:.1f} ms "
                          f"(iterations {min(step.iters):.1f}-{max(step.iters):.1f}, build {step.build_s:.1f} s)")

        try:
            train_plans(job_items, data_dir, batch_size, cfg, on_result=arrived, work_dir=str(partial / "jobs"))
        finally:
            bar.close()
        job_s = time.perf_counter() - t0
        costs = step_costs(entries, done, cfg.repeats)
        steps = [done[measurement_key(e, r)] for e in entries for r in range(cfg.repeats)]
        splits = {(e.task, e.alg): e.splits if isinstance(e, FullPlan) else len(e.plan.column_steps)
                  for e in entries}
        summary = summarize(costs, reference, algs, iteration_spread(steps), seed=cfg.problem.seed, splits=splits,
                            median_se=median_uncertainty(steps, cfg.problem.seed))
        if full:
            summary["titles"] = {a: TITLES[a] for a in algs if a in TITLES}
            summary["full_planner"] = full_summary(full)
        summary["job_s"] = job_s if todo else 0.0
        summary["measurements"] = len(todo)
        summary["round_anchors"] = len(anchors)
        results = [{"task": rec.task, "alg": rec.alg, "plan": rec.plan.to_json(),
                    **{k: list(v) for k, v in task_identity(tasks[rec.task].tables(configs)).items()},
                    "step_ms": costs[rec.task, rec.alg],
                    "cost": float(np.mean(costs[rec.task, rec.alg])),
                    "rounds": [done[plan_identity(rec, r)].to_json() for r in range(cfg.repeats)]}
                   for rec in records]
        write_json_atomic(out / RESULTS_JSON, results)
        if anchors:
            write_json_atomic(out / ROUND_ANCHORS_JSON, [
                {"task": a.task, "alg": a.alg, "plan": a.plan.to_json(), "table_ids": list(a.table_ids),
                 "dims": list(a.dims), "step_ms": [done[plan_identity(a, r)].cost for r in range(cfg.repeats)],
                 "rounds": [done[plan_identity(a, r)].to_json() for r in range(cfg.repeats)]} for a in anchors])
        if full:
            write_json_atomic(out / FULL_JSON, [
                {"task": fp.task, "alg": fp.alg, "status": fp.status, "message": fp.message, "search_ms": fp.search_ms,
                 **{k: list(v) for k, v in task_identity(tasks[fp.task].tables(configs)).items()},
                 "layout": fp.layout,
                 **({} if fp.sharding_plan is None else {
                     "step_ms": costs[fp.task, fp.alg], "cost": float(np.mean(costs[fp.task, fp.alg])),
                     "rounds": [done[measurement_key(fp, r)].to_json() for r in range(cfg.repeats)]})}
                for fp in full])
        if config is not None:
            write_json_atomic(out / "config.json", {**config, "training": cfg.to_json(), "batch_size": batch_size})
        write_json_atomic(out / SUMMARY_JSON, summary)
        settings = {**flat_settings(cfg.to_json()), "batch_size": batch_size}
        (out / SUMMARY_MD).write_text(summary_markdown(summary, settings))
    shutil.rmtree(partial, ignore_errors=True)
    return summary


def print_summary(summary: dict, file=sys.stdout) -> None:
    print(summary_markdown(summary), file=file)


def train_measure(cfg: TorchRecTrainConfig, progress: bool = True):
    """A `Measure` of `eval.regret_search` by TorchRec training (`run_torchrec_eval`, `cfg` its settings, `repeats`
    the rounds): {(task, label): step ms of each round}; a finished stage (its results.json, of these plans, with
    the same settings) read back, else trained (resuming its log)."""
    from dataclasses import replace

    from neuroshard.formats.io import read_json

    def measure(inputs, records: list, rounds: int, stage: Path) -> dict:
        train = replace(cfg, repeats=rounds)
        config = {"regret_stage": str(inputs.task_path)}
        written = json.loads(json.dumps({**config, "training": train.to_json(), "batch_size": inputs.batch_size}))
        res, conf = Path(stage) / RESULTS_JSON, Path(stage) / "config.json"
        got = read_json(res) if res.exists() and conf.exists() and not (Path(stage) / PARTIAL_DIR).exists() \
            and read_json(conf) == written else None
        if got is None or [(g["task"], g["alg"], g["plan"], len(g["step_ms"])) for g in got] != \
                [(r.task, r.alg, r.plan.to_json(), rounds) for r in records]:
            labels = list(dict.fromkeys(r.alg for r in records))
            run_torchrec_eval(records, inputs.tasks, inputs.configs, inputs.data_dir, inputs.batch_size, train, stage,
                              labels, labels[0], config=config, show=None, progress=progress)
            got = read_json(res)
        return {(g["task"], g["alg"]): list(g["step_ms"]) for g in got}

    return measure
