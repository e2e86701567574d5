"""Plans for every task and algorithm, with their simulated costs (DESIGN §10).

`eval_simulator.py` is a thin wrapper around this module and `eval/results`,
and the hardware evaluation (`eval.py`) computes its plans with
`compute_plans` too, so both evaluate the same plans made by the same code.
Each plan comes from the library call `planner.shard.shard` and is kept as a
`types.PlanRecord`: "oom" when the sharder found no plan within the memory
cap (or returned one that exceeds it), "invalid" when it returned a plan
that breaks the rules. Both count as invalid tasks (upstream's `Valid v / N`).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from neuroshard.planner.models import CostModels
from neuroshard.planner.registry import algorithm_names
from neuroshard.planner.scorer import get_scorer
from neuroshard.planner.shard import shard
from neuroshard.types import (InvalidPlanError, NeuroShardError, OutOfMemoryError, PlanRecord, ShardTable,
                              TableConfig, Task)


@dataclass
class EvalInputs:
    """Everything an evaluation reads: dataset table configs, tasks, and the three cost models."""

    configs: list[TableConfig]
    tasks: list[Task]
    models: CostModels


def add_input_args(parser, data_help: str = "dataset dir with table_configs.json") -> None:
    """The flags naming what an evaluation reads, shared by eval_simulator.py and eval.py."""
    parser.add_argument("--data_dir", default="data/dlrm_datasets", help=data_help)
    parser.add_argument("--task_path", default="data/tasks/4_gpu/data.txt", help="task file (one task per line)")
    parser.add_argument("--compute_model", default="models/compute.pt", help="compute cost model checkpoint")
    for kind, name in (("fw", "forward"), ("bw", "backward")):
        parser.add_argument(f"--{kind}_comm_model", default=None,
                            help=f"{name} comm cost model checkpoint (default: models/comm_<ndevices>_{kind}.pt)")
    parser.add_argument("--alg", default="neuroshard",
                        help="sharding algorithm: neuroshard, random, dim_greedy, lookup_greedy, size_greedy, "
                             "size_lookup_greedy, neuroshard_plus (any registered name), a comma list, or 'all' "
                             "(default: neuroshard)")
    parser.add_argument("--max_mem", type=float, default=4.0, help="memory per device in GB (default: 4)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the randomised algorithms (default: 0)")
    parser.add_argument("--max_tasks", type=int, default=None, help="evaluate only the first N tasks")


def default_comm_model_path(ndevices: int, kind: str) -> str:
    """Where the pipeline puts the comm model for `ndevices` devices (`models/comm_<n>_<kind>.pt`)."""
    return os.path.join("models", f"comm_{ndevices}_{kind}.pt")


def load_inputs(data_dir, task_path, compute_model, fw_comm_model, bw_comm_model, ndevices: int,
                max_tasks: int | None = None) -> EvalInputs:
    """Read the dataset's table configs, the tasks (the first `max_tasks`) and the cost models.

    Only `table_configs.json` of the dataset is read: the simulator needs no lookups.
    """
    from neuroshard.formats import read_table_configs, read_tasks

    if ndevices < 1:
        raise NeuroShardError(f"--ndevices must be >= 1, got {ndevices}")
    if max_tasks is not None and max_tasks < 1:
        raise NeuroShardError(f"--max_tasks must be >= 1, got {max_tasks}")
    configs = read_table_configs(Path(data_dir) / "table_configs.json")
    tasks = read_tasks(task_path, num_tables=len(configs))
    if max_tasks is not None:
        tasks = tasks[:max_tasks]
    return EvalInputs(configs, tasks, CostModels.from_paths(compute_model, fw_comm_model, bw_comm_model, ndevices))


def resolve_algs(alg: str) -> list[str]:
    """`--alg` value -> algorithm names: "all" is every registered one; a comma list is allowed."""
    names = algorithm_names()
    if alg == "all":
        return names
    algs = [a.strip() for a in alg.split(",") if a.strip()]
    unknown = [a for a in algs if a not in names]
    if not algs or unknown:
        raise NeuroShardError(f"--alg: unknown algorithm {', '.join(unknown) or repr(alg)}; "
                              f"choose from all, {', '.join(names)}")
    return list(dict.fromkeys(algs))


def task_seed(seed: int, task: int) -> int:
    """The seed a sharder gets for task `task`: different per task, fixed by `--seed`."""
    return int(np.random.SeedSequence([int(seed), int(task)]).generate_state(1)[0])


def plan_task(task: int, tables: Sequence[ShardTable], alg: str, ndevices: int, max_mem: float,
              models: CostModels, seed: int = 0, options: dict | None = None) -> PlanRecord:
    """Run one sharder on one task (`planner.shard.shard`) and keep the outcome as a PlanRecord."""
    t0 = time.perf_counter()
    try:
        res = shard(tables, ndevices, max_mem, models=models, alg=alg, seed=seed, **(options or {}))
    except (OutOfMemoryError, InvalidPlanError) as e:
        return PlanRecord(task=task, alg=alg, status="oom" if isinstance(e, OutOfMemoryError) else "invalid",
                          message=str(e), search_ms=1e3 * (time.perf_counter() - t0), num_tables=len(tables))
    return PlanRecord(task=task, alg=alg, plan=res.plan, estimate=res.breakdown, search_ms=res.search_ms,
                      num_tables=len(tables), view=res.view)


def compute_plans(configs: Sequence[TableConfig], tasks: Sequence[Task], algs: Sequence[str], ndevices: int,
                  max_mem: float, models: CostModels, seed: int = 0, options: dict | None = None,
                  progress: bool = True, on_record: Callable[[PlanRecord], None] | None = None) -> list[PlanRecord]:
    """Plan records for every task (outer loop, with a progress bar) and algorithm (inner loop)."""
    from tqdm import tqdm

    get_scorer(models)  # build the fast model copies now, so the first task's search time is fair
    records = []
    # disable=None: no bar when stderr is not a terminal (logs, pipes)
    for i in tqdm(range(len(tasks)), desc="tasks", unit="task", disable=None if progress else True,
                  file=sys.stderr):
        tables = tasks[i].tables(configs)
        for alg in algs:
            rec = plan_task(i, tables, alg, ndevices, max_mem, models, task_seed(seed, i), options)
            records.append(rec)
            if on_record is not None:
                on_record(rec)
    return records


def format_record(rec: PlanRecord, num_tasks: int) -> str:
    """One line per task and algorithm, as upstream printed: the plan and its estimated cost."""
    head = f"Task {rec.task + 1}/{num_tasks} [{rec.alg}]"
    if rec.status != "ok":
        kind = "Out of memory" if rec.status == "oom" else "Invalid plan"
        return f"{head} {kind}: {rec.message}"
    shards = [list(s) for s in rec.plan.shards]
    return (f"{head} Sharding steps: {list(rec.plan.column_steps)}, shards: {shards} -> "
            f"Latency: {rec.estimated_cost:.4f} ms (search {rec.search_ms:.1f} ms)")
