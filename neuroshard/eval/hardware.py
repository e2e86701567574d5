"""Hardware evaluation (DESIGN §10): every plan on real FBGEMM kernels and the real all-to-all.

The plans are computed once, in the parent, by the code that `eval_simulator.py`
uses (`eval.plans`), written to ``plans.json`` with `formats.write_plans`,
and handed to ONE torchrun job (gloo on CPU, NCCL on GPUs) that measures all
of them: what each rank does is `eval.hardware_rank`; the launcher, the
process-group set-up and the failure handling are `bench.torchrun`'s; the
measurements become the records' `measured` breakdown in
`eval.hardware_merge`. Per-rank total = compute + backward comm + forward
comm; plan cost = max over ranks. Times are in ms.

On several nodes (`HardwareConfig.launch`) eval.py runs on every node: node 0
plans, writes and measures as above; the others only lend their ranks to
its job (`follow`), reading their own copy of the dataset and writing
nothing but the job's scratch dir in the system temp dir.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from neuroshard.bench.torchrun import DEFAULT_STARTUP_TIMEOUT_S, WATCHDOG_GRACE_S, LaunchConfig, TorchrunJob
from neuroshard.checks import check_choice, check_float, check_int
from neuroshard.types import ConfigError, Plan, PlanRecord, Task, apply_column_steps

JOB_FILE = "job.json"
PARTIAL_DIR = ".partial"  # an unfinished evaluation: measurement log, settings, job folders
MEASUREMENTS = "measurements.jsonl"
# Settings that do not change what is measured: a resumed run may differ in them.
_FREE_SETTINGS = ("quiet", "no_progress", "out_dir", "timeout", "startup_timeout", "rdzv_endpoint", "rdzv_id",
                  "join_timeout")
WORKER_MODULE = "neuroshard.eval.hardware_rank"
DEFAULT_TIMEOUT_S = 120.0  # collective timeout: a hung rank ends the job after about this
FW_SLEEP_MODES = ("skew", "none")


@dataclass(frozen=True)
class HardwareConfig:
    """How the plans are measured.

    `ndevices` ranks on `device` ("cpu": gloo, one process per rank;
    "cuda": NCCL, one GPU per rank, `gpu_devices` picks them). `warmup` and
    `iters`: untimed and timed iterations of every measurement (median kept).
    `fw_sleep`: "skew" delays rank r's forward all-to-all by its measured
    compute+backward skew (the simulator's definition), "none" starts all
    ranks together. `end_to_end`: also time the real step sequence.
    `timeout`: collective timeout in s (a hung rank ends the job after about
    this long). `flush`: evict caches before each timed compute iteration.
    `repeats`: measurements of every plan, in rounds (every plan once per
    round, each round in a seeded shuffled order), so that a slow spell of
    the machine hits all algorithms alike. `launch`: where the `ndevices`
    ranks run (default: all on this machine).
    """

    ndevices: int = 4
    device: str = "cpu"
    gpu_devices: str | None = None
    warmup: int = 5
    iters: int = 10
    fw_sleep: str = "skew"
    end_to_end: bool = False
    timeout: float = DEFAULT_TIMEOUT_S
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT_S
    flush: bool = True
    seed: int = 0
    repeats: int = 1
    launch: LaunchConfig = LaunchConfig()

    def validate(self) -> None:
        check_int("--ndevices", self.ndevices, 1)
        self.launch.validate()
        self.launch.for_world(self.ndevices)
        check_choice("--device", self.device, ("cpu", "cuda"))
        check_int("--warmup", self.warmup, 0)
        check_int("--iters", self.iters, 1)
        check_choice("--fw_sleep", self.fw_sleep, FW_SLEEP_MODES)
        check_float("--timeout", self.timeout, 0.0, lo_open=True)
        check_int("--repeats", self.repeats, 1)

    def to_json(self) -> dict:
        return asdict(self)


def runnable(records: Sequence[PlanRecord]) -> list[PlanRecord]:
    """The plan records the job measures, in job order: those with a plan (others are reported only)."""
    return [rec for rec in records if rec.plan is not None]


def dataset_fingerprint(dataset) -> dict:
    """What every node's copy of the dataset must share with node 0's: batch, table count, table stats."""
    configs = json.dumps([[c.row, c.pooling_factor, list(c.bins)] for c in dataset.configs])
    return {"batch size": dataset.batch_size, "tables": len(dataset.configs),
            "table configs (sha1)": hashlib.sha1(configs.encode()).hexdigest()[:12]}


def shard_layout(task: Task, configs, plan: Plan):
    """(post-split tables, per-device table lists, per-device dim sums) of a plan for a task."""
    split = apply_column_steps(task.tables(configs), plan.column_steps)
    shards = [[split[i] for i in s] for s in plan.shards]
    return split, shards, [sum(t.dim for t in s) for s in shards]


# =========================================================================== the job


class HardwareJob(TorchrunJob):
    """One torchrun job measuring every runnable plan of a plan file; iterate `records()`.

    On a node other than node 0 of `cfg.launch`, `plans_path`, `task_path` and `num_plans` are
    None: node 0's rank 0 hands the plans and tasks to every rank."""

    item = "plan"
    job_prefix = "hw_eval_job_"

    def __init__(self, plans_path, data_dir, task_path, num_plans: int | None, cfg: HardwareConfig, *,
                 work_dir: str | None = None, keep_dir: bool = False, worker_module: str | None = None):
        cfg.validate()
        self.cfg = cfg
        self.job = {"data_dir": os.path.abspath(data_dir), "warmup": cfg.warmup, "iters": cfg.iters,
                    "fw_sleep": cfg.fw_sleep, "end_to_end": cfg.end_to_end, "flush": cfg.flush, "seed": cfg.seed}
        if plans_path is not None:
            self.job.update(plans=os.path.abspath(plans_path), task_path=os.path.abspath(task_path))
        # A plan takes one compute turn per rank, each bounded by the collective timeout
        # (the waiting ranks' barrier would fire first), plus the all-to-alls.
        stall = (cfg.ndevices + 2) * cfg.timeout + WATCHDOG_GRACE_S
        super().__init__(worker_module or WORKER_MODULE, [], cfg.ndevices, num_plans, device=cfg.device,
                         gpu_devices=cfg.gpu_devices, timeout=cfg.timeout, startup_timeout=cfg.startup_timeout,
                         stall_timeout=stall, work_dir=work_dir, keep_dir=keep_dir, launch=cfg.launch)

    def write_inputs(self, job_dir: str) -> None:
        with open(os.path.join(job_dir, JOB_FILE), "w") as f:
            json.dump(self.job, f)


def measure_plans(plans_path, data_dir, task_path, cfg: HardwareConfig, *,
                  on_result: Callable[[dict], None] | None = None, work_dir: str | None = None,
                  worker_module: str | None = None) -> list[dict]:
    """Measure every plan of `plans_path` (written by `formats.write_plans`) in one job.

    Returns one raw measurement per runnable plan (see `runnable`), in file
    order; `on_result(m)` is called as each arrives. Raises
    `torchrun.JobError` (naming the failing rank and cause) if any rank fails.
    """
    from neuroshard.formats import read_plans

    items = runnable(read_plans(plans_path))
    if not items and not cfg.launch.multi_node:  # (other nodes wait for the job: start it anyway)
        return []
    out = []
    with HardwareJob(plans_path, data_dir, task_path, len(items), cfg, work_dir=work_dir,
                     worker_module=worker_module) as job:
        for m in job.records():
            out.append(m)
            if on_result is not None:
                on_result(m)
    return out


def follow(data_dir, cfg: HardwareConfig, *, on_result: Callable[[dict], None] | None = None,
           worker_module: str | None = None) -> int:
    """A node other than node 0: lend this node's ranks to node 0's job until it ends (this node's
    `data_dir` must hold the same dataset as node 0's). Returns the number of plans measured."""
    if cfg.launch.writes_outputs:
        raise ConfigError("--node_rank", "node 0 runs the evaluation; follow() is for the other nodes")
    done = 0
    with HardwareJob(None, data_dir, None, None, cfg, worker_module=worker_module) as job:
        for m in job.records():
            done += 1
            if on_result is not None:
                on_result(m)
    return done


# =========================================================================== the whole run


def measurement_order(items: Sequence[PlanRecord], repeats: int, seed: int) -> list[tuple[PlanRecord, int]]:
    """(plan, repeat) in the order the job measures them: `repeats` rounds, each measuring every plan
    once, in an order shuffled per round (seeded), so drift and position effects hit all plans alike."""
    order = []
    for r in range(repeats):
        perm = np.random.default_rng([seed, r]).permutation(len(items)) if repeats > 1 else range(len(items))
        order += [(items[int(k)], r) for k in perm]
    return order


def _resume_identity(config: dict, cfg: HardwareConfig, worker_module: str | None) -> dict:
    """What must match for a rerun to continue an interrupted evaluation: every setting that changes what
    is measured (not where the output goes, the timeouts or the rendezvous address)."""
    def keep(d):
        return {k: keep(v) if isinstance(v, dict) else v for k, v in d.items() if k not in _FREE_SETTINGS}

    return keep({**config, "hardware": cfg.to_json(), "worker_module": worker_module})


def plan_identity(rec: PlanRecord, repeat: int = 0) -> str:
    """What a measurement in the log is of: the task, the algorithm, the plan itself and the repeat."""
    return json.dumps([rec.task, rec.alg, rec.plan_key, repeat], separators=(",", ":"))


def run_evaluation(records: Sequence[PlanRecord], data_dir, task_path, cfg: HardwareConfig, out_dir,
                   algs: Sequence[str], num_tasks: int, config: dict | None = None,
                   show: Callable[[str], None] | None = print,
                   worker_module: str | None = None) -> tuple[list[PlanRecord], dict]:
    """Measure every plan record with a plan in one job; write and return (results, summary).

    Records without a plan (out of memory, invalid) are reported, not run.
    Resumable: each measurement is appended (fsynced) to
    `<out_dir>/.partial/measurements.jsonl` as it arrives, so a rerun after a
    failure, a kill or Ctrl-C (with the same settings, checked against
    `.partial/config.json`) measures only the plans not measured yet. The job
    folders (ranks' logs) live in `.partial/jobs/`; a failed job's folder is
    kept there. When every plan is measured, the results are written and
    `.partial/` is removed. One evaluation per `out_dir` at a time.
    """
    from neuroshard.eval.hardware_merge import merge_results
    from neuroshard.eval.results import PLANS_JSON, format_measured, hardware_summary, write_outputs
    from neuroshard.formats import (append_line, check_run_config, format_measurement, open_append,
                                    read_measurements, write_json_atomic, write_plans)

    out = Path(out_dir)
    partial = out / PARTIAL_DIR
    partial.mkdir(parents=True, exist_ok=True)
    log_path = partial / MEASUREMENTS
    with open_append(log_path, exclusive=True) as log:  # also drops a torn last line of a killed run
        check_run_config(partial, _resume_identity(config or {}, cfg, worker_module))
        if config is not None:
            write_json_atomic(out / "config.json", config)
        write_plans(out / PLANS_JSON, records)
        done = read_measurements(log_path)
        items = runnable(records)
        rounds = measurement_order(items, cfg.repeats, cfg.seed)
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

        def arrived(m: dict) -> None:
            stamps.append(time.perf_counter())
            rec, r = todo[m["i"]]
            append_line(log, format_measurement(plan_identity(rec, r), m))
            done[plan_identity(rec, r)] = m
            if show is not None:
                [res] = merge_results([rec], [[m]])
                repeat = f" (repeat {r + 1}/{cfg.repeats})" if cfg.repeats > 1 else ""
                show(format_measured(res, num_tasks) + repeat)

        if todo or cfg.launch.multi_node:  # the other nodes wait for node 0's job: start it even if empty
            measure_plans(todo_path, data_dir, task_path, cfg, on_result=arrived, work_dir=str(partial / "jobs"),
                          worker_module=worker_module)
        results = merge_results(records, [[done[plan_identity(rec, r)] for r in range(cfg.repeats)]
                                          for rec in items])
        summary = hardware_summary(results, algs, num_tasks)
        # wall time: the whole job (start-up included) and per plan (time between results after the first)
        job_s = time.perf_counter() - stamps[0]
        per_plan = np.diff(stamps[1:])
        summary["hardware"] = {**cfg.to_json(), "measurements": len(todo), "measurements_resumed": resumed,
                               "job_s": job_s if todo else 0.0,
                               "first_plan_s": stamps[1] - stamps[0] if len(stamps) > 1 else None,
                               "per_plan_s": float(np.median(per_plan)) if len(per_plan) else None}
        write_outputs(out, results, summary, plans=False)
    shutil.rmtree(partial, ignore_errors=True)
    return results, summary
