"""The hardware evaluation run (DESIGN §10): every plan record measured, resumably, in interleaved rounds.

The plans are computed once, in the parent, by the code that `eval_simulator.py`
uses (`eval.planning`), written to ``plans.json`` and measured by ONE
plan-measurement job (`measure.plan_job`: what each rank does, the launcher,
the failure handling). A plan measured R times (`--repeats`) gets the
per-rank mean of its R measurements as its `measured` breakdown and the R
plan costs as `repeat_costs` (`merge_results`). Records without a plan (out
of memory, invalid) are reported, not run. Times are in ms.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from neuroshard.eval.round_calibration import ANCHOR_PREFIX, anchor_order, calibrated_accuracy
from neuroshard.eval.summary import HardwareRun, Summary, hardware_summary
from neuroshard.formats.side_files import ROUND_ANCHORS_JSON, ROUND_CALIBRATION_JSON, write_side_file
from neuroshard.measure import plan_job
from neuroshard.measure.plan_job import HardwareConfig, runnable
from neuroshard.types.costs import CostBreakdown
from neuroshard.types.errors import NeuroShardError
from neuroshard.types.records import EndToEnd, PlanMeasurement, PlanRecord

PARTIAL_DIR = ".partial"  # an unfinished evaluation: measurement log, settings, job folders
MEASUREMENTS = "measurements.jsonl"
# Settings that do not change what is measured: a resumed run may differ in them.
_FREE_SETTINGS = ("quiet", "no_progress", "out_dir", "timeout", "startup_timeout", "rdzv_endpoint", "rdzv_id",
                  "join_timeout", "unmeasured_plans", "unmeasured_task_path", "unmeasured_tasks")


# =========================================================================== measurements into records


def merged_breakdown(measurements: Sequence[PlanMeasurement]) -> CostBreakdown:
    """One plan's repeated measurements as one breakdown: the per-rank mean of each part (total = sum of
    parts), the mean skew, forward time without delays and collectives, and each repeat's parts in `repeats`."""
    ms = list(measurements)

    def mean(part: str) -> list[float]:
        return np.mean([getattr(m, part) for m in ms], axis=0).tolist()

    return CostBreakdown(mean("compute"), mean("bw_comm"), mean("fw_comm"), dims=ms[0].dims, skew=mean("skew"),
                         ntables=ms[0].ntables, fw_comm_nosleep=mean("fw_comm_nosleep"),
                         repeats=[m.parts() for m in ms],
                         collectives=mean("collectives") if ms[0].collectives is not None else None)


def merge_results(records: Sequence[PlanRecord], measured: Sequence[Sequence[PlanMeasurement]]) -> list[PlanRecord]:
    """One result per plan record (every task x algorithm, run or not), in record order.

    `measured[k]`: the job's measurements (one per repeat) of the k-th runnable
    record (`runnable`). A measured plan gets `measured`, `repeat_costs` (and
    `e2e`) and status "ok"; the others keep their status and message.
    """
    items = runnable(records)
    if len(measured) != len(items) or not all(measured):
        raise NeuroShardError(f"measurements for {len(measured)} of {len(items)} runnable plans")
    by_id = {id(rec): ms for rec, ms in zip(items, measured)}
    results = []
    for rec in records:
        ms = by_id.get(id(rec))
        if ms is None:
            results.append(replace(rec, view=None))
            continue
        e2e = None
        if ms[0].e2e is not None:
            costs = [m.e2e.cost for m in ms]
            e2e = EndToEnd(np.mean([m.e2e.per_rank for m in ms], axis=0).tolist(), ms[0].e2e.iters,
                           float(np.mean(costs)), costs)
        results.append(replace(rec, status="ok", view=None, measured=merged_breakdown(ms), e2e=e2e,
                               repeat_costs=[m.cost for m in ms]))
    return results


# =========================================================================== the whole run


def measurement_order(items: Sequence[PlanRecord], repeats: int, seed: int) -> list[tuple[PlanRecord, int]]:
    """(plan, repeat) in the order the job measures them: `repeats` rounds, each measuring every plan once.
    Within a round the tasks come in a shuffled order and each task's plans one after another, in a shuffled
    order too (seeded per round): drift and position effects hit all plans alike, and the plans a paired
    comparison compares are measured seconds apart, so that a slow spell of the machine moves both: the noise
    of two measurements a few plans apart is correlated, that of two far apart hardly."""
    by_task: dict[int, list[int]] = {}  # each task's plans, in record order (tasks in first-seen order)
    for k, rec in enumerate(items):
        by_task.setdefault(rec.task, []).append(k)
    tasks = list(by_task)
    order = []
    for r in range(repeats):
        if repeats == 1:
            order += [(rec, r) for rec in items]
            continue
        rng = np.random.default_rng([seed, r])
        for i in rng.permutation(len(tasks)):
            plans = by_task[tasks[int(i)]]
            order += [(items[plans[int(j)]], r) for j in rng.permutation(len(plans))]
    return order


def resume_identity(config: dict, cfg: HardwareConfig, worker_module: str | None) -> dict:
    """What must match for a rerun to continue an interrupted evaluation: every setting that changes what
    is measured (not where the output goes, the timeouts or the rendezvous address)."""
    def keep(d):
        return {k: keep(v) if isinstance(v, dict) else v for k, v in d.items() if k not in _FREE_SETTINGS}

    return keep({**config, "hardware": cfg.to_json(), "worker_module": worker_module})


def plan_identity(rec: PlanRecord, repeat: int = 0) -> str:
    """What a measurement in the log is of: the task, the algorithm, the plan itself and the repeat."""
    return json.dumps([rec.task, rec.alg, rec.plan_key, repeat], separators=(",", ":"))


def measured_before(out_dir, items: Sequence[PlanRecord], config: dict, repeats: int) -> list[PlanRecord] | None:
    """The results of an evaluation that `run_evaluation` finished in `out_dir` with `config` (its config.json)
    on exactly these plan records (task, algorithm and plan, in order), each measured `repeats` times: a crash or
    a kill after the measuring job loses nothing. None otherwise (a rerun then measures them, resuming an
    interrupted job itself)."""
    from neuroshard.formats.io import read_json
    from neuroshard.formats.plan_file import read_plans

    out = Path(out_dir)
    res, conf = out / "results.json", out / "config.json"
    if not (res.exists() and conf.exists()) or (out / PARTIAL_DIR).exists():
        return None
    if read_json(conf) != json.loads(json.dumps(config)):
        return None
    got = read_plans(res)
    same = [(r.task, r.alg, r.plan_key) for r in got] == [(r.task, r.alg, r.plan_key) for r in items]
    return got if same and all(r.repeat_costs and len(r.repeat_costs) == repeats for r in got) else None


def run_evaluation(records: Sequence[PlanRecord], data_dir, task_path, cfg: HardwareConfig, out_dir,
                   algs: Sequence[str], num_tasks: int, config: dict | None = None,
                   show: Callable[[str], None] | None = print, worker_module: str | None = None,
                   unmeasured: Sequence[PlanRecord] | None = None,
                   anchors: Sequence[PlanRecord] = ()) -> tuple[list[PlanRecord], Summary]:
    """Measure every plan record with a plan in one job; write and return (results, summary).

    Records without a plan (out of memory, invalid) are reported, not run.
    Resumable: each measurement is appended (fsynced) to
    `<out_dir>/.partial/measurements.jsonl` as it arrives, so a rerun after a
    failure, a kill or Ctrl-C (with the same settings, checked against
    `.partial/config.json`) measures only the plans not measured yet. The job
    folders (ranks' logs) live in `.partial/jobs/`; a failed job's folder is
    kept there. When every plan is measured, the results are written and
    `.partial/` is removed. One evaluation per `out_dir` at a time. `unmeasured`: plan records of tasks
    that are not measured, whose estimates make the verdicts prediction-powered (`summary.hardware_summary`).
    `anchors`: estimated plans of training tasks (naming their tables) measured once in every round, spread
    over it: the rounds' speed for `round_calibration.json` (`eval.round_calibration`).
    """
    from neuroshard.eval.results import PLANS_JSON, format_measured, write_outputs
    from neuroshard.formats.io import (
        append_line,
        check_run_config,
        open_append,
        write_json_atomic,
    )
    from neuroshard.formats.plan_file import (
        format_measurement,
        read_measurements,
        write_plans,
    )

    out = Path(out_dir)
    partial = out / PARTIAL_DIR
    partial.mkdir(parents=True, exist_ok=True)
    log_path = partial / MEASUREMENTS
    with open_append(log_path, exclusive=True) as log:  # also drops a torn last line of a killed run
        check_run_config(partial, resume_identity(config or {}, cfg, worker_module))
        if config is not None:
            write_json_atomic(out / "config.json", config)
        write_plans(out / PLANS_JSON, records)
        done = read_measurements(log_path)
        items = runnable(records)
        anchor_items = [replace(a, alg=ANCHOR_PREFIX + a.alg) for a in runnable(anchors)]
        rounds = anchor_order(measurement_order(items, cfg.repeats, cfg.problem.seed), anchor_items, cfg.repeats)
        todo = [(rec, r) for rec, r in rounds if plan_identity(rec, r) not in done]
        resumed = len(rounds) - len(todo)
        if show is not None:
            for rec in records:
                if rec.plan is None:
                    show(format_measured(rec, num_tasks))
            if resumed:
                show(f"{resumed} of {len(rounds)} measurements were made by an earlier, interrupted run")
        todo_path = partial / "todo.json"
        write_plans(todo_path, [rec for rec, _ in todo])
        stamps = [time.perf_counter()]

        def arrived(m: PlanMeasurement) -> None:
            stamps.append(time.perf_counter())
            rec, r = todo[m.index]
            append_line(log, format_measurement(plan_identity(rec, r), m))
            done[plan_identity(rec, r)] = m
            if show is not None:
                [res] = merge_results([rec], [[m]])
                repeat = f" (repeat {r + 1}/{cfg.repeats})" if cfg.repeats > 1 else ""
                show(format_measured(res, num_tasks) + repeat)

        if todo or cfg.launch.multi_node:  # the other nodes wait for node 0's job: start it even if empty
            plan_job.measure_plans(todo_path, data_dir, task_path, cfg, on_result=arrived,
                                   work_dir=str(partial / "jobs"), worker_module=worker_module)
        results = merge_results(records, [[done[plan_identity(rec, r)] for r in range(cfg.repeats)]
                                          for rec in items])
        summary = hardware_summary(results, algs, num_tasks, unmeasured)
        if anchor_items:
            measured_anchors = merge_results(anchor_items, [[done[plan_identity(a, r)] for r in range(cfg.repeats)]
                                                            for a in anchor_items])
            write_plans(out / ROUND_ANCHORS_JSON, measured_anchors)  # the rounds' speed can be read again
            write_side_file(out / ROUND_CALIBRATION_JSON, calibrated_accuracy(results, measured_anchors,
                                                                                cfg.repeats))
        # wall time: the whole job (start-up included) and per plan (time between results after the first)
        job_s = time.perf_counter() - stamps[0]
        per_plan = np.diff(stamps[1:])
        summary.hardware = HardwareRun(cfg.to_json(), measurements=len(todo), measurements_resumed=resumed,
                                       job_s=job_s if todo else 0.0,
                                       first_plan_s=stamps[1] - stamps[0] if len(stamps) > 1 else None,
                                       per_plan_s=float(np.median(per_plan)) if len(per_plan) else None)
        write_outputs(out, results, summary, plans=False)
    shutil.rmtree(partial, ignore_errors=True)
    return results, summary
