"""TorchRec's planner as users get it (`torchrec_full` in eval_torchrec.py): every sharding type it enumerates.

`--alg torchrec` (`torchrec.sharder`) restricts TorchRec's `EmbeddingShardingPlanner`
to table-wise and column-wise, the space NeuroShard searches, and maps its plan
onto ours. A TorchRec user plans with all of it: here the planner runs with its
default proposers, enumerator, performance and storage estimators, storage
reservation and kernels, no sharding type or kernel constrained, on the same
GPU topology (`sharder.gpu_topology`: the ranks as GPUs of `max_mem` HBM each,
no host memory, so no UVM kernel), per-rank batch = global batch / ranks and
each table's pooling factor from its stats. It may choose data-parallel,
table-wise, column-wise, table-column-wise, row-wise and table-row-wise.

Its `ShardingPlan`, planned for cuda as a user would, is re-emitted for the
ranks that train it (`for_ranks`): the same sharding type, ranks and shards
(offsets and sizes) per table, placements on the training device, the fused
kernel for sharded tables and the dense one for data-parallel tables (the only
kernel TorchRec has for them); `sharder.sharding_layout` holds the two equal.
eval_torchrec.py plans it per task itself (TorchRec's planner needs the task's
tables and the run's memory); its layout reads back as the project's `Plan`
(`sharder.plan_from_layout`) where TorchRec's choices are in the plan space.
Needs torchrec (imported on the first call).
"""

from __future__ import annotations

import contextlib
import json
import logging
import warnings
from collections import Counter
from dataclasses import replace
from typing import Sequence

from neuroshard.planner.registry import ShardingContext, register
from neuroshard.problem import Problem
from neuroshard.torchrec.sharder import (
    TABLE_WISE,
    TorchRecConfig,
    embedding_bag_collection,
    gpu_topology,
    plain_constraints,
    plan_from_sharding_plan,
    require_torchrec,
    run_planner,
    sharding_layout,
    table_names,
)
from neuroshard.types.errors import InvalidPlanError
from neuroshard.types.plan import Plan
from neuroshard.types.tables import ShardTable

FULL_ALG = "torchrec_full"
FULL_TITLE = "TorchRec planner, all sharding types"
DATA_PARALLEL = "data_parallel"


def plan_torchrec_full(tables: Sequence[ShardTable], problem: Problem, cfg: TorchRecConfig):
    """TorchRec's `ShardingPlan` (module path "", tables named by `table_names`, cuda placements) of the tables on
    the problem's devices, with every default of its planner (module doc); `cfg.batch_size`: the global batch.
    A table the constraints keep whole is table-wise or data-parallel only. Raises OutOfMemoryError when
    TorchRec finds no plan within the devices' memory, NeuroShardError for its other failures."""
    cons = plain_constraints(problem, FULL_ALG)
    require_torchrec()
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints

    names = table_names(tables)
    constraints = {name: ParameterConstraints(pooling_factors=[float(t.config.pooling_factor)],
                                              sharding_types=[TABLE_WISE, DATA_PARALLEL] if cons.kept_whole(i)
                                              else None)
                   for i, (name, t) in enumerate(zip(names, tables))}
    batch = max(1, cfg.batch_size // problem.ndevices)
    # TorchRec's notes on its storage reservation and on data-parallel tables having no shards are about
    # TorchRec, not this plan, and its error log repeats what `run_planner` reports in one line; its stats
    # table (`stats=[]`) only reports, it does not change the plan
    with warnings.catch_warnings(), _quiet_logging():
        warnings.simplefilter("ignore")
        planner = EmbeddingShardingPlanner(topology=gpu_topology(problem), batch_size=batch,
                                           constraints=constraints, stats=[], debug=False)
        return run_planner(planner, embedding_bag_collection(tables, names), EmbeddingBagCollectionSharder(),
                           tables, problem)


@register(FULL_ALG, requires_package="torchrec", settings=(TorchRecConfig,), in_all=False)
def torchrec_full_sharder(tables, problem: Problem, ctx: ShardingContext | None = None) -> Plan:
    """TorchRec's planner as users get it, read back as the project's plan (`sharder.plan_from_layout`):
    table-wise, column-wise, row-wise, table-row-wise and data-parallel tables. InvalidPlanError for a choice
    the plan space has no name for (table-column-wise, grid shards); the paper runtime refuses row-wise and
    data-parallel tables, `--runtime torchrec` prices them."""
    cfg = TorchRecConfig.from_options(ctx.options if ctx is not None else None)
    if not tables:
        return Plan((), ((),) * problem.ndevices)
    sharding_plan = plan_torchrec_full(tables, problem, cfg)
    return plan_from_sharding_plan(sharding_plan, tables, table_names(tables), problem.ndevices)


torchrec_full_sharder.prepare = require_torchrec


@contextlib.contextmanager
def _quiet_logging():
    logging.disable(logging.ERROR)
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)


def for_ranks(sharding_plan, device_type: str, module_path: str, local_size: int | None = None):
    """The `ShardingPlan` (module "" of `sharding_plan`) re-emitted for training: module `module_path`, each
    shard placed on its rank's `device_type` device ("cpu", or "cuda" with `local_size` ranks per host), the
    fused kernel (dense for data-parallel); types, ranks and shards kept, checked."""
    from torch.distributed._shard.sharding_spec import EnumerableShardingSpec, ShardMetadata
    from torchrec.distributed.embedding_types import EmbeddingComputeKernel
    from torchrec.distributed.types import EmbeddingModuleShardingPlan, ShardingPlan

    planned = sharding_plan.plan[""]

    def placement(rank: int) -> str:
        return f"rank:{rank}/cpu" if device_type == "cpu" else f"rank:{rank}/cuda:{rank % (local_size or 1 << 30)}"

    module_plan = EmbeddingModuleShardingPlan()
    for name, ps in planned.items():
        spec = None if ps.sharding_spec is None else EnumerableShardingSpec(
            [ShardMetadata(shard_offsets=list(s.shard_offsets), shard_sizes=list(s.shard_sizes),
                           placement=placement(s.placement.rank())) for s in ps.sharding_spec.shards])
        kernel = EmbeddingComputeKernel.DENSE if ps.sharding_type == DATA_PARALLEL else EmbeddingComputeKernel.FUSED
        module_plan[name] = replace(ps, compute_kernel=kernel.value, sharding_spec=spec, cache_params=None)
    if sharding_layout(module_plan) != sharding_layout(planned):
        raise InvalidPlanError("TorchRec's plan changed when re-emitted for the training ranks")
    return ShardingPlan({module_path: module_plan})


def layout_summary(module_plan) -> dict:
    """What the planner chose, for the run's records: per table its sharding type, ranks and shard sizes
    (`sharding_layout`), and the tables per sharding type."""
    layout = sharding_layout(module_plan)
    return {"types": dict(Counter(v["sharding_type"] for v in layout.values())), "tables": layout}


def layout_key(module_plan) -> str:
    """A plan's identity for the measurement log: its layout as compact JSON."""
    return json.dumps(sharding_layout(module_plan), sort_keys=True, separators=(",", ":"))
