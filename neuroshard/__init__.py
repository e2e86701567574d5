"""NeuroShard: embedding table sharding with pre-trained neural cost models.

The planner as a library, in one import:

    import neuroshard as ns
    models = ns.CostModels.load("results/quick")    # all a run plans with; print(models.describe())
    configs = ns.read_dataset_configs("results/quick/dataset")
    tables = ns.tables_from_task(configs, ns.read_tasks("results/quick/tasks/data.txt")[0])
    # or your own tables: [ns.TableConfig(row=..., pooling_factor=..., bins=ns.DEFAULT_BINS, dim=64), ...]
    result = ns.shard(tables, ns.Problem(ndevices=4, max_mem=1.0), models=models, alg="neuroshard", beam_k=3)
    result.plan, result.cost_ms, result.breakdown, result.view, result.search_ms, result.warnings

Inside TorchRec, `ns.NeuroShardPlanner(topology, models=models)` is a `ShardingPlanner` for any model
(README "Use with TorchRec").

Every registered algorithm (`ns.algorithm_names()`) goes through the same
call; third-party sharders register with `@ns.register("name")` or through
the `neuroshard.sharders` entry-point group. Importing this package does not
import torch; loading cost models does.

Package layout (docs/DESIGN.md): `types/`, `problem.py`, `settings.py`, `checks.py` and `formats/` are
shared by all; `data/` (datasets, tasks); `planner/` (the cost models' inference in `costs/`, the searches in
`search/`, the simulator, the baselines, the registry; no torch); `measure/` (everything that runs on
hardware); `train/` (cost-model training); `learned/` (the DreamShard and AutoShard baselines); `eval/` (the
evaluations and their summaries); `torchrec/` (everything TorchRec: the planner, the baseline, the runtime
model, plan export, training); `pipeline/` runs it all and writes the report.
"""

from neuroshard.formats.dataset import read_dataset_configs
from neuroshard.formats.plan_file import read_plans, write_plans
from neuroshard.formats.task_file import read_tasks
from neuroshard.planner.costs.cost_models import CostModels
from neuroshard.planner.registry import (
    ShardingContext,
    algorithm_names,
    get_sharder,
    register,
)
from neuroshard.planner.shard import ShardResult, shard, tables_from_task
from neuroshard.problem import Problem
from neuroshard.types.constraints import TableConstraints
from neuroshard.types.costs import CostBreakdown
from neuroshard.types.errors import (
    ConfigError,
    InputError,
    InvalidPlanError,
    NeuroShardError,
    OutOfMemoryError,
)
from neuroshard.types.plan import Plan
from neuroshard.types.records import PlanRecord
from neuroshard.types.tables import DEFAULT_BINS, ShardTable, TableConfig, Task

__version__ = "0.2.0"


def __getattr__(name):
    # NeuroShardPlanner is TorchRec's ShardingPlanner: importing it imports torchrec, so only when asked for
    if name == "NeuroShardPlanner":
        from neuroshard.torchrec.planner import NeuroShardPlanner

        return NeuroShardPlanner
    raise AttributeError(f"module 'neuroshard' has no attribute {name!r}")

__all__ = [
    "CostModels", "Problem", "TableConstraints", "shard", "ShardResult", "tables_from_task", "read_dataset_configs",
    "read_tasks", "read_plans", "write_plans", "register", "algorithm_names", "get_sharder", "ShardingContext",
    "TableConfig", "Task", "ShardTable", "Plan", "PlanRecord", "CostBreakdown", "DEFAULT_BINS", "NeuroShardError",
    "InputError", "ConfigError", "OutOfMemoryError", "InvalidPlanError",
]
