"""The oracle the learned baselines train against: what the released code measured on GPUs.

DreamShard measured each rolled-out plan on N GPUs (kernels + all-to-all);
AutoShard timed each shard's kernel on one GPU. Here both ask one oracle,
a callable `oracle(items) -> list[CostBreakdown]` taking a batch of
(task tables, plan) pairs and returning each plan's per-device compute,
backward and forward comm (ms); each system keeps its own cost network and
learning loop, and the oracle only replaces the GPU measurement:

* `SimulatorOracle`: the project's trained cost models through
  `planner.simulator.simulate` (fast; the default);
* `HardwareOracle`: real FBGEMM kernels and the real all-to-all, through
  the code eval.py measures with (`measure.plan_job.measure_plans`, one
  torchrun job per batch). Plans of the learned policies have no column
  splits, so each item's tables are a task of dataset table ids and dims.

Both count their plans (`plans`) and time their calls (`seconds`).
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import Sequence

from neuroshard.measure.plan_job import HardwareConfig, measure_plans
from neuroshard.planner.simulator import simulate
from neuroshard.problem import Problem
from neuroshard.types.costs import CostBreakdown
from neuroshard.types.errors import NeuroShardError
from neuroshard.types.plan import Plan
from neuroshard.types.records import PlanRecord, task_identity
from neuroshard.types.tables import ShardTable, Task

ORACLES = ("simulator", "hardware")


class SimulatorOracle:
    """Plan costs from the pre-trained cost models (`simulate`, which validates each plan first)."""

    name = "simulator"

    def __init__(self, models, problem: Problem):
        self.models, self.problem = models, problem
        self.plans, self.seconds = 0, 0.0

    def __call__(self, items: Sequence[tuple[Sequence[ShardTable], Plan]]) -> list[CostBreakdown]:
        t0 = time.perf_counter()
        out = [simulate(tables, plan, self.models, self.problem) for tables, plan in items]
        self.plans += len(items)
        self.seconds += time.perf_counter() - t0
        return out


class HardwareOracle:
    """Plan costs measured on real kernels and all-to-all, one torchrun job per batch of plans.

    `data_dir`: the dataset with its lookups (data.pt); `cfg`: the ranks and
    iterations, as eval.py's flags give them. The plan files of each batch
    go to a temporary folder under `work_dir` (removed afterwards).
    """

    name = "hardware"

    def __init__(self, data_dir, cfg: HardwareConfig, work_dir: str | None = None,
                 worker_module: str | None = None):
        cfg.validate()
        self.data_dir, self.cfg, self.work_dir, self.worker_module = data_dir, cfg, work_dir, worker_module
        self.plans, self.seconds = 0, 0.0

    def __call__(self, items: Sequence[tuple[Sequence[ShardTable], Plan]]) -> list[CostBreakdown]:
        from neuroshard.formats.plan_file import write_plans
        from neuroshard.formats.task_file import write_tasks

        if not items:
            return []
        t0 = time.perf_counter()
        tasks, records = [], []
        for i, (tables, plan) in enumerate(items):
            if plan.column_steps or any(t.origin != k for k, t in enumerate(tables)):
                raise NeuroShardError("the hardware oracle measures plans of unsplit task tables only")
            tasks.append(Task(tuple(t.table_id for t in tables), tuple(t.dim for t in tables)))
            records.append(PlanRecord(task=i, alg="oracle", plan=plan, num_tables=len(tables),
                                      **task_identity(tables)))
        with tempfile.TemporaryDirectory(prefix="oracle_", dir=self.work_dir) as d:
            task_path, plans_path = os.path.join(d, "tasks.txt"), os.path.join(d, "plans.json")
            write_tasks(task_path, tasks)
            write_plans(plans_path, records)
            raw = measure_plans(plans_path, self.data_dir, task_path, self.cfg, work_dir=d,
                                worker_module=self.worker_module)
        if len(raw) != len(items):
            raise NeuroShardError(f"the hardware job measured {len(raw)} of {len(items)} plans")
        self.plans += len(items)
        self.seconds += time.perf_counter() - t0
        return [m.breakdown() for m in raw]
