"""NeuroShard as a TorchRec `ShardingPlanner`: plan any model's embedding tables from inside TorchRec.

    from neuroshard.torchrec.planner import NeuroShardPlanner   # or ns.NeuroShardPlanner
    planner = NeuroShardPlanner(topology, models=ns.CostModels.load("results/quick/models", 4),
                                constraints={"t0": ParameterConstraints(pooling_factors=[12.0])})
    plan = planner.collective_plan(model, sharders, pg)      # rank 0 plans, every rank gets the plan
    model = DistributedModelParallel(model, plan=plan, sharders=sharders)

What TorchRec knows is read from TorchRec: the tables (every module a given
sharder shards, e.g. each `EmbeddingBagCollection`, at any module path; rows,
dims and names from their configs), the pooling factors
(`ParameterConstraints.pooling_factors`; 1.0 with a warning where none is
given), the allowed sharding types, the devices and each one's memory
(`Topology`, per rank). Locality bins come from `table_stats` ({table name:
17 bins}, or a JSON file of it), else `types.DEFAULT_BINS` with a warning.

Constraints act inside the search (`types.constraints`), for every algorithm:
a table whose `ParameterConstraints.sharding_types` exclude column-wise is
never split; `ranks={name: [ranks]}` limits the devices of a table's shards;
`colocate=[[name, name], ...]` puts tables whole on one device together (a
request TorchRec's planner has no way to say). A table limited to
data-parallel is replicated on every rank (TorchRec's dense kernel, its
memory taken from every device) and left out of the search; its cost is not
in the plan's estimate (a warning says so). With cost models for TorchRec's
runtime (`CostModels.for_runtime("torchrec")`) fitted on row-wise and
data-parallel plans, NeuroShard also chooses row-wise and data-parallel
tables where the model says they pay (`planner.search.sharding_types`),
among the types each table's `sharding_types` allow and its sharder offers
for the topology's device; so it does with paper-runtime models that have a
collective model, and with its fits over host groups and a topology of
several hosts (`local_world_size`), table-row-wise tables too. They are
emitted as TorchRec's `row_wise`, `table_row_wise` and `data_parallel`
shardings and counted by TorchRec's storage estimator.

Memory is counted as TorchRec counts it (`memory="torchrec"`, the default):
each shard's storage by TorchRec's own `EmbeddingStorageEstimator` for the
given sharders (weights, input and output buffers, and the optimizer state
of `apply_optimizer_in_backward`) against each device's capacity less the
storage reservation (`reserve`, a share as in TorchRec's
`FixedPercentageStorageReservation`). Beyond TorchRec's count, the optimizer
state a sharder's `fused_params` name (`{"optimizer": EmbOptimType.ADAM}`,
the usual way to train with the fused kernels, which TorchRec's estimator
does not count) is added (`OPTIMIZER_STATE`). The search places tables by
their weights; the cap it gets per device is its capacity less an even
share of what is counted beyond the weights, and the plan is checked with
the full count (the cap of a device over it shrinks and the search reruns).
`memory="weights"` counts fp32 weights only, as the rest of the suite
does. Anything that cannot be placed is TorchRec's `PlannerError` naming
the devices' memory as the topology gives it and the table.

Any registered algorithm can plan (`alg=`): NeuroShard (default),
NeuroShard+, the greedy baselines, TorchRec's own planner. The plan is
turned into one `ParameterSharding` per table (table-wise, column-wise with
equal shards, or data-parallel; `torchrec.export`) under each module's path.
Imports torchrec: load it lazily (`neuroshard.NeuroShardPlanner` does).
"""

from __future__ import annotations

import json
import logging
import math
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from torchrec.distributed.planner.enumerators import EmbeddingEnumerator
from torchrec.distributed.planner.shard_estimators import EmbeddingStorageEstimator
from torchrec.distributed.planner.types import PlannerError, PlannerErrorType, Shard
from torchrec.distributed.sharding_plan import (
    column_wise,
    construct_module_sharding_plan,
    data_parallel,
    row_wise,
    table_row_wise,
    table_wise,
)
from torchrec.distributed.types import ShardingPlan, ShardingPlanner

from neuroshard.planner.registry import get_sharder
from neuroshard.planner.shard import ShardResult, shard
from neuroshard.problem import Problem
from neuroshard.types.constraints import TableConstraints
from neuroshard.types.errors import (
    ConfigError,
    InputError,
    NeuroShardError,
    OutOfMemoryError,
)
from neuroshard.types.plan import ROW_WISE, SPREAD_KINDS, TABLE_ROW_WISE, Plan, Spread, plan_pieces
from neuroshard.types.tables import (
    DEFAULT_BINS,
    NUM_BINS,
    ShardTable,
    TableConfig,
    can_split,
)

logger = logging.getLogger(__name__)

TABLE_WISE, COLUMN_WISE, DATA_PARALLEL = "table_wise", "column_wise", "data_parallel"
MEMORY_MODES = ("torchrec", "weights")
BATCH_SIZE = 512  # per rank, TorchRec's planner default
_MAX_REPLANS = 6
# Optimizer state of the fused kernels (fbgemm's `EmbOptimType` values) in fp32 values: per weight, and per row
# of each shard (the row-wise optimizers keep one value per row); an optimizer not listed counts one per weight.
OPTIMIZER_STATE = {
    "sgd": (0.0, 0.0), "exact_sgd": (0.0, 0.0),
    "adam": (2.0, 0.0), "lamb": (2.0, 0.0),
    "partial_row_wise_adam": (1.0, 1.0), "partial_row_wise_lamb": (1.0, 1.0),
    "exact_adagrad": (1.0, 0.0), "lars_sgd": (1.0, 0.0),
    "exact_row_wise_adagrad": (0.0, 1.0), "row_wise_adagrad": (0.0, 1.0),
    "exact_row_wise_weighted_adagrad": (0.0, 1.0), "ensemble_row_wise_adagrad": (0.0, 1.0),
    "ema_in_place_row_wise_adagrad": (0.0, 1.0), "none": (0.0, 0.0),
}


@dataclass
class PlannedTable:
    """One table of the model as the planner sees it: where it lives, what it is, how TorchRec counts it."""

    path: str  # the module path of its collection ("" for the model itself)
    name: str
    table: TableConfig
    splittable: bool  # column-wise allowed by the sharder and the constraints
    kernel: str  # the compute kernel of its shards
    option: object  # TorchRec's table-wise (or data-parallel) ShardingOption (its storage estimated)
    replicated: bool = False  # data-parallel: on every rank, outside the search
    state: tuple[float, float] = (0.0, 0.0)  # optimizer state TorchRec does not count: per weight, per row
    spread_kinds: tuple[str, ...] = ()  # the row-wise / data-parallel kinds the search may give it


class NeuroShardPlanner(ShardingPlanner):
    """A TorchRec `ShardingPlanner` that plans with NeuroShard's search and cost models (module doc).

    `topology`: TorchRec's `Topology` (its world size must be the comm models' device count; each rank's
    memory is its own); `models`: `CostModels` (or a models directory with compute.pt and
    comm_<n>_fw/bw.pt), needed by the algorithms that use cost models; `batch_size`: per rank, for
    TorchRec's memory count and the costs (the global batch is every rank's; left out, TorchRec's 512 for
    the memory and the batch of the models' data for the costs); `constraints`: TorchRec's
    {table name: ParameterConstraints}; `ranks`:
    {table name: the ranks its shards may use}; `colocate`: groups of table names placed whole on one
    rank together; `table_stats`: {table name: 17 locality bins} or a JSON file of it; `alg` and
    `**options`: any registered algorithm and its options; `memory`: "torchrec" or "weights"; `reserve`:
    the share of each device's memory kept free. After `plan`, `last_result` holds the planner's
    `ShardResult` (plan, simulated cost, warnings; over the searched tables, the data-parallel ones left
    out) and `last_seconds` the planning time without the cost models' loading.
    """

    def __init__(self, topology, models=None, batch_size: int | None = None, constraints: dict | None = None,
                 table_stats=None, alg: str = "neuroshard", memory: str = "torchrec", reserve: float = 0.1,
                 seed: int = 0, ranks: dict | None = None, colocate=None, **options) -> None:
        if memory not in MEMORY_MODES:
            raise ConfigError("memory", f"must be one of {', '.join(MEMORY_MODES)}, got {memory!r}")
        if not 0.0 <= reserve < 1.0:
            raise ConfigError("reserve", f"must be in [0, 1), got {reserve!r}")
        get_sharder(alg)  # an unknown algorithm is an error here, not at plan time
        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int)
                                       or batch_size < 1):
            raise ConfigError("batch_size", f"per-rank batch must be an integer >= 1, got {batch_size!r}")
        self._topology = topology
        self._batch_size = batch_size or BATCH_SIZE
        # the costs: at the user's batch (every rank's), else at the batch of the cost models' data
        self._cost_batch = None if batch_size is None else batch_size * topology.world_size
        self._constraints = dict(constraints or {})
        for name, cons in self._constraints.items():  # TorchRec's storage count would fail on these deep inside
            factors = list(cons.pooling_factors or [])
            if not all(isinstance(f, (int, float)) and math.isfinite(f) and f >= 0 for f in factors):
                raise ConfigError(f"constraints[{name!r}].pooling_factors", f"must be finite numbers >= 0, got "
                                                                            f"{factors}")
        self._ranks = _check_ranks(ranks, topology.world_size)
        self._colocate = _check_groups(colocate)
        self._stats = _read_table_stats(table_stats)
        self._alg, self._memory, self._reserve, self._seed, self._options = alg, memory, reserve, seed, options
        if isinstance(models, (str, Path)):
            from neuroshard.planner.costs.cost_models import CostModels

            models = CostModels.load(models, topology.world_size)
        if models is not None and models.ndevices != topology.world_size:
            raise ConfigError("models", f"the comm models are for {models.ndevices} devices, the topology has "
                                        f"{topology.world_size}")
        self._models = models
        self.last_result: ShardResult | None = None
        self.last_seconds: float | None = None

    # ------------------------------------------------------------------ TorchRec's interface

    def collective_plan(self, module, sharders, pg=None) -> ShardingPlan:
        """Plan on rank 0 of `pg` (the default group when None) and broadcast the plan to every rank."""
        import torch.distributed as dist

        if not dist.is_initialized():
            return self.plan(module, sharders)
        group = pg if pg is not None else dist.group.WORLD
        src = dist.get_global_rank(group, 0) if pg is not None else 0
        box = [self.plan(module, sharders) if dist.get_rank(group) == 0 else None]
        dist.broadcast_object_list(box, src=src, group=group)
        return box[0]

    def plan(self, module, sharders) -> ShardingPlan:
        """The `ShardingPlan` of every table the sharders shard in `module`."""
        t0 = time.perf_counter()
        tables, by_type = self._tables(module, sharders)
        if not tables:
            raise PlannerError("NeuroShardPlanner found no table to shard: none of the modules has a sharder "
                               f"among {[type(s).__name__ for s in sharders]}", PlannerErrorType.OTHER)
        names = {t.name for t in tables}
        unknown = [n for n in [*self._ranks, *(n for g in self._colocate for n in g)] if n not in names]
        if unknown:
            raise ConfigError("ranks" if unknown[0] in self._ranks else "colocate",
                              f"no table {unknown[0]!r} in the model (tables: {', '.join(sorted(names))})")
        searched = [t for t in tables if not t.replicated]
        result = self._search(tables, searched)
        self.last_result, self.last_seconds = result, time.perf_counter() - t0
        return self._sharding_plan(module, tables, searched, result.plan, by_type)

    # ------------------------------------------------------------------ the steps

    def _tables(self, module, sharders) -> tuple[list[PlannedTable], dict]:
        """The tables of `module` (TorchRec's enumeration with its storage estimate) and the sharder per module
        type."""
        constraints = self._enumeration_constraints(module, sharders)
        estimator = EmbeddingStorageEstimator(self._topology, constraints)
        enumerator = EmbeddingEnumerator(self._topology, self._batch_size, constraints, estimator=[estimator])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # TorchRec's deprecation notes
            options = enumerator.enumerate(module, sharders)
        self._estimator, self._sharder_data = estimator, enumerator._sharder_data_map
        offered = {type(sub): set(sharder.sharding_types(self._topology.compute_device))
                   for sharder in sharders for _, sub in module.named_modules()
                   if type(sub) is sharder.module_type}
        state_of = _optimizer_state(sharders)
        by_key: dict[tuple[str, str], list] = {}
        for opt in options:
            by_key.setdefault((opt.path, opt.name), []).append(opt)
        tables, unknown_pooling, unknown_bins, replicated = [], [], [], []
        for (path, name), opts in by_key.items():
            types = {o.sharding_type for o in opts}
            if TABLE_WISE in types:
                pick = [o for o in opts if o.sharding_type == TABLE_WISE]
                kernels = [o.compute_kernel for o in pick]
                kernel = "fused" if "fused" in kernels else kernels[0]
            elif DATA_PARALLEL in types:
                pick = [o for o in opts if o.sharding_type == DATA_PARALLEL]
                kernel = pick[0].compute_kernel
                replicated.append(name)
            else:
                raise PlannerError(f"table {name} ({path or 'the model'}): NeuroShardPlanner plans table-wise, "
                                   f"column-wise and data-parallel shards, its constraints allow {sorted(types)}",
                                   PlannerErrorType.STRICT_CONSTRAINTS)
            option = next(o for o in pick if o.compute_kernel == kernel)
            rows, dim = (int(x) for x in option.tensor.shape)
            cons = self._constraints.get(name)
            if cons is not None and cons.pooling_factors:
                pooling = float(sum(cons.pooling_factors))
            else:
                pooling = 1.0
                unknown_pooling.append(name)
            bins = self._stats.get(name)
            if bins is None:
                bins = DEFAULT_BINS
                unknown_bins.append(name)
            splittable = COLUMN_WISE in types and can_split(dim)
            # the state of fused_params' optimizer, unless TorchRec counts one (apply_optimizer_in_backward)
            counted = getattr(option.tensor, "_optimizer_classes", [None])[0] is not None
            state = (0.0, 0.0) if counted or kernel == "dense" else state_of.get(option.module[1].__class__,
                                                                                  (0.0, 0.0))
            asked = None if cons is None else cons.sharding_types
            kinds = tuple(k for k in SPREAD_KINDS if k in offered.get(type(option.module[1]), set())
                          and (asked is None or k in asked))
            tables.append(PlannedTable(path, name, TableConfig(rows, pooling, tuple(bins), dim), splittable, kernel,
                                       option, replicated=name in replicated, state=state, spread_kinds=kinds))
        if unknown_pooling:
            logger.warning("NeuroShardPlanner: no ParameterConstraints.pooling_factors for %s: pooling factor 1.0 "
                           "assumed", ", ".join(unknown_pooling))
        if unknown_bins:
            logger.warning("NeuroShardPlanner: no locality stats (table_stats) for %s: the default bins assumed",
                           ", ".join(unknown_bins))
        if replicated:
            logger.warning("NeuroShardPlanner: %s data-parallel (replicated on every rank; their cost is not in the "
                           "cost models' estimate)", ", ".join(replicated))
        return tables, {s.module_type: s for s in sharders}

    def _enumeration_constraints(self, module, sharders) -> dict:
        """The user's constraints, each table's sharding types narrowed to table-wise and column-wise (all the
        search makes) or, for a table limited to data-parallel, to that; the kernel to the fused one (the
        dense one for data-parallel) unless the user chose: TorchRec then enumerates and estimates only the
        options a plan can use."""
        from dataclasses import replace

        from torchrec.distributed.planner.types import ParameterConstraints

        kinds = {s.module_type: s for s in sharders}
        out = dict(self._constraints)
        for _, sub in module.named_modules():
            sharder = kinds.get(type(sub))
            if sharder is None:
                continue
            for name in sharder.shardable_parameters(sub):
                cons = out.get(name) or ParameterConstraints()
                types = [t for t in (cons.sharding_types or [TABLE_WISE, COLUMN_WISE]) if t in (TABLE_WISE,
                                                                                                COLUMN_WISE)]
                if not types and DATA_PARALLEL in (cons.sharding_types or []):
                    out[name] = replace(cons, sharding_types=[DATA_PARALLEL],
                                        compute_kernels=cons.compute_kernels or ["dense"])
                else:
                    out[name] = replace(cons, sharding_types=types or cons.sharding_types,
                                        compute_kernels=cons.compute_kernels or ["fused"])
        return out

    def _capacity(self) -> list[float]:
        """Each device's bytes for the tables: its HBM (its DDR on CPU) less the reservation."""
        return [m * (1.0 - self._reserve) for m in self._device_memory()]

    def _device_memory(self) -> list[float]:
        """Each device's memory (bytes) as the topology gives it."""
        kind = "hbm" if self._topology.compute_device != "cpu" else "ddr"
        return [float(getattr(d.storage, kind)) for d in self._topology.devices]

    def _table_constraints(self, searched: list[PlannedTable]) -> TableConstraints:
        """The search's constraints over the searched tables (by position)."""
        index = {t.name: i for i, t in enumerate(searched)}
        replicated = [n for n in [*self._ranks, *(n for g in self._colocate for n in g)] if n not in index]
        if replicated:
            raise ConfigError("ranks" if replicated[0] in self._ranks else "colocate",
                              f"table {replicated[0]!r} is data-parallel (on every rank): it takes no ranks or "
                              "co-location")
        return TableConstraints(whole=tuple(i for i, t in enumerate(searched) if not t.splittable),
                                devices=tuple((index[n], tuple(r)) for n, r in self._ranks.items()),
                                colocate=tuple(tuple(index[n] for n in g) for g in self._colocate),
                                kinds=tuple((i, t.spread_kinds) for i, t in enumerate(searched)))

    def _search(self, tables: list[PlannedTable], searched: list[PlannedTable]) -> ShardResult:
        """Plan the searched tables with the algorithm under per-device weights caps (each device's capacity
        less the replicated tables and, with memory="torchrec", an even share of what is counted beyond the
        weights); shrink the cap of a device over the full count until every device fits."""
        capacity = self._capacity()
        world = self._topology.world_size
        replicated = [t for t in tables if t.replicated]
        copies = sum(self._storage(t, [t.table.dim])[0] for t in replicated)  # on every rank
        caps = [c - copies for c in capacity]
        if min(caps) <= 0:
            raise self._no_fit(tables, f"the data-parallel tables ({', '.join(t.name for t in replicated)}) need "
                                       f"{copies / 2**30:.4g} GB on every rank")
        if self._memory == "torchrec":
            # what is counted beyond the weights (buffers, optimizer state), spread evenly to start with
            extra = sum(self._storage(t, [t.table.dim])[0] - _weight_bytes(t.table.row, t.table.dim)
                        for t in searched)
            caps = [c - extra / world for c in caps]
            if min(caps) <= 0:
                raise self._no_fit(tables, "the buffers and optimizer state alone fill the devices")
        if not searched:
            return ShardResult(self._alg, Plan((), ((),) * world), None, None, [], 0.0, [], [])
        shard_tables = [ShardTable(i, i, t.table) for i, t in enumerate(searched)]
        constraints = self._table_constraints(searched)
        options = dict(self._options)
        for _ in range(_MAX_REPLANS):
            problem = Problem(ndevices=world, max_mem=tuple(c / 2**30 for c in caps), seed=self._seed,
                              constraints=constraints, batch_size=self._cost_batch,
                              local_world_size=self._topology.local_world_size or None)
            try:
                result = shard(shard_tables, problem, models=self._models, alg=self._alg, **options)
            except OutOfMemoryError as e:
                table = None if e.table is None else searched[e.table].name
                left = "" if self._memory == "weights" and not copies else \
                    f" (beside what else is counted, the weights have {_gb_list(caps)} GB per device)"
                bound = "" if constraints.empty else " within the constraints"
                raise self._no_fit(tables, f"{self._alg} found no placement{bound}{left}", table) from None
            except ConfigError:
                raise
            except NeuroShardError as e:
                raise PlannerError(f"NeuroShardPlanner ({self._alg}): {_named(e, searched)}",
                                   PlannerErrorType.OTHER) from None
            if self._memory == "weights":
                return result
            used = [u + copies for u in self.device_storage(searched, result.plan)]
            over = [u / c for u, c in zip(used, capacity)]
            if max(over) <= 1.0:
                return result
            caps = [c * 0.98 / o if o > 1.0 else c for c, o in zip(caps, over)]
        raise self._no_fit(tables, f"TorchRec's count of the last plan: {_gb_list(used)} GB per device")

    def _storage(self, t: PlannedTable, widths: Sequence[int]) -> list[float]:
        """The bytes on the compute device of `t`'s shards of these widths (`_estimate`); a data-parallel table
        outside the search: its enumerated replicas."""
        if t.replicated:
            return self._estimate(t)
        offsets = [sum(widths[:k]) for k in range(len(widths))]
        return self._estimate(t, TABLE_WISE if len(widths) == 1 else COLUMN_WISE,
                              [Shard(size=[t.table.row, w], offset=[0, o]) for w, o in zip(widths, offsets)])

    def _spread_storage(self, t: PlannedTable, spread: Spread) -> list[float]:
        """The bytes on each of `spread.ranks` of `t` sharded row-wise or table-row-wise (TorchRec's blocks) or
        data-parallel (a replica on the dense kernel) (`_estimate`)."""
        rows, dim = t.table.row, t.table.dim
        if spread.kind != DATA_PARALLEL:
            blocks = spread.rows_on(rows)
            return self._estimate(t, spread.kind, [Shard(size=[b, dim], offset=[sum(blocks[:j]), 0])
                                                   for j, b in enumerate(blocks)])
        return self._estimate(t, DATA_PARALLEL, [Shard(size=[rows, dim], offset=[0, 0]) for _ in spread.ranks],
                              kernel="dense")

    def _estimate(self, t: PlannedTable, sharding_type: str | None = None, shards=None,
                  kernel: str | None = None) -> list[float]:
        """Per shard, the bytes TorchRec's storage estimator counts for `t` sharded `sharding_type` into `shards`
        (on `kernel`; left out: its enumerated option as it is), plus the optimizer state of the sharder's fused
        parameters that TorchRec does not count (`t.state`, per weight and per row of each shard; none on the
        dense kernel, whose optimizer is the dense one)."""
        import copy

        opt = copy.copy(t.option)
        if sharding_type is not None:
            opt.sharding_type, opt.shards = sharding_type, shards
        if kernel is not None:
            opt.compute_kernel = kernel
        self._estimator.estimate([opt], self._sharder_data)
        kind = "hbm" if self._topology.compute_device != "cpu" else "ddr"
        per_weight, per_row = (0.0, 0.0) if opt.compute_kernel == "dense" else t.state
        return [float(getattr(s.storage, kind)) + 4.0 * s.size[0] * (per_weight * s.size[1] + per_row)
                for s in opt.shards]

    def device_storage(self, tables: list[PlannedTable], plan: Plan) -> list[float]:
        """Bytes per device of `plan` (over `tables`, none of them replicated outside the search) as counted
        for the plan (TorchRec's storage estimator per shard, and the optimizer state it does not count)."""
        used = [0.0] * plan.ndevices
        for s in plan.spread:
            for r, b in zip(s.ranks, self._spread_storage(tables[s.table], s)):
                used[r] += b
        for t, pieces in zip(tables, plan_pieces([ShardTable(i, i, x.table) for i, x in enumerate(tables)], plan)):
            if not pieces:  # spread
                continue
            width = min(p.dim for p in pieces)
            devices = [p.device for p in pieces for _ in range(p.dim // width)]
            for d, b in zip(devices, self._storage(t, [width] * len(devices))):
                used[d] += b
        return used

    def _no_fit(self, tables: list[PlannedTable], why: str, table: str | None = None) -> PlannerError:
        memory = self._device_memory()
        need = [self._storage(t, [t.table.dim])[0] if self._memory == "torchrec" else
                _weight_bytes(t.table.row, t.table.dim) for t in tables]
        big = max(range(len(tables)), key=lambda i: need[i])
        devices = (f"{len(memory)} devices of {memory[0] / 2**30:.4g} GB each" if len(set(memory)) == 1 else
                   f"{len(memory)} devices of {_gb_list(memory)} GB")
        named = "" if table is None else f"; {table!r} could not be placed"
        return PlannerError(
            f"NeuroShardPlanner ({self._alg}) cannot place {len(tables)} tables on {devices} (the topology's, "
            f"{100 * self._reserve:g}% reserved; {self._memory} count): they need {sum(need) / 2**30:.4g} GB in "
            f"all, the largest ({tables[big].name}) {need[big] / 2**30:.4g} GB{named}; {why}",
            PlannerErrorType.INSUFFICIENT_STORAGE)

    def _sharding_plan(self, module, tables: list[PlannedTable], searched: list[PlannedTable], plan: Plan,
                       by_type: dict) -> ShardingPlan:
        """One `ParameterSharding` per table, grouped into each collection's module plan."""
        world = self._topology.world_size
        local = self._topology.local_world_size or world
        device = self._topology.compute_device
        modules = dict(module.named_modules())
        per_module: dict[str, dict] = {}
        kernels: dict[tuple[str, str], str] = {}
        pieces = plan_pieces([ShardTable(i, i, t.table) for i, t in enumerate(searched)], plan)
        for i, (t, ps) in enumerate(zip(searched, pieces)):
            spread = plan.spread_of(i)
            if spread is not None and spread.kind == ROW_WISE:
                gen = row_wise(compute_kernel=t.kernel)
            elif spread is not None and spread.kind == TABLE_ROW_WISE:
                gen = table_row_wise(host_index=spread.ranks[0] // local)
                kernels[(t.path, t.name)] = t.kernel  # table_row_wise() has no kernel argument
            elif spread is not None:
                gen = data_parallel()
            elif len(ps) == 1:
                gen = table_wise(rank=ps[0].device, compute_kernel=t.kernel)
            else:
                width = min(p.dim for p in ps)
                gen = column_wise(ranks=[p.device for p in ps for _ in range(p.dim // width)],
                                  compute_kernel=t.kernel)
            per_module.setdefault(t.path, {})[t.name] = gen
        for t in tables:
            if t.replicated:
                per_module.setdefault(t.path, {})[t.name] = data_parallel()
        out = {}
        for path, per_table in per_module.items():
            sub = modules[path]
            sharder = by_type.get(type(sub))
            out[path] = construct_module_sharding_plan(sub, per_table, sharder=sharder, local_size=local,
                                                       world_size=world, device_type=device)
            for name in per_table:
                if (path, name) in kernels:
                    out[path][name].compute_kernel = kernels[(path, name)]
        return ShardingPlan(out)


def _optimizer_state(sharders) -> dict:
    """{module type: (state per weight, per row)} of the optimizer each sharder's `fused_params` name (none
    where it names none)."""
    out = {}
    for s in sharders:
        opt = (getattr(s, "fused_params", None) or {}).get("optimizer")
        if opt is None:
            continue
        key = str(getattr(opt, "value", opt)).lower()
        out[s.module_type] = OPTIMIZER_STATE.get(key, (1.0, 0.0))
    return out


def _check_ranks(ranks, world: int) -> dict[str, tuple[int, ...]]:
    """{table name: ranks}, each a non-empty list of ranks of the topology; ConfigError naming the table."""
    out = {}
    for name, rs in (ranks or {}).items():
        rs = list(rs) if isinstance(rs, (list, tuple, set, frozenset)) else None
        if not rs or not all(isinstance(r, int) and not isinstance(r, bool) and 0 <= r < world for r in rs):
            raise ConfigError(f"ranks[{name!r}]", f"expected a non-empty list of ranks in 0..{world - 1}, got "
                                                  f"{ranks[name]!r}")
        out[str(name)] = tuple(sorted(set(rs)))
    return out


def _check_groups(colocate) -> list[tuple[str, ...]]:
    """Groups of table names, each of two or more, no name in two; ConfigError naming the group."""
    out, seen = [], set()
    for group in colocate or []:
        names = list(group) if isinstance(group, (list, tuple)) else None
        if not names or len(names) < 2 or not all(isinstance(n, str) for n in names):
            raise ConfigError("colocate", f"each group is a list of two or more table names, got {group!r}")
        twice = [n for n in names if n in seen]
        if twice:
            raise ConfigError("colocate", f"table {twice[0]!r} is in two groups")
        seen.update(names)
        out.append(tuple(names))
    return out


def _named(e: Exception, searched: list[PlannedTable]) -> str:
    """An error from the search with its table indices ("table 3") given as the model's table names."""
    import re

    return re.sub(r"\btable (\d+)\b", lambda m: f"table {searched[int(m.group(1))].name!r}"
                  if int(m.group(1)) < len(searched) else m.group(0), str(e))


def _weight_bytes(rows: int, dim: int) -> float:
    return 4.0 * rows * dim


def _gb_list(xs) -> str:
    return "[" + ", ".join(f"{x / 2**30:.3g}" for x in xs) + "]"


def _read_table_stats(stats) -> dict[str, tuple[float, ...]]:
    """{table name: bins} from a dict or a JSON file of one, each 17 non-negative numbers."""
    if stats is None:
        return {}
    path = None
    if isinstance(stats, (str, Path)):
        path = Path(stats)
        try:
            stats = json.loads(path.read_text())
        except FileNotFoundError:
            raise InputError(path, "table stats file not found") from None
        except (OSError, json.JSONDecodeError) as e:
            raise InputError(path, f"not a JSON object of table name -> bins ({e})") from None
    if not isinstance(stats, dict):
        raise InputError(path or "table_stats", "expected {table name: 17 locality bins}")
    out = {}
    for name, bins in stats.items():
        if not isinstance(bins, (list, tuple)) or len(bins) != NUM_BINS or \
                not all(isinstance(b, (int, float)) and b >= 0 for b in bins):
            raise InputError(path or "table_stats", f"table {name!r}: expected {NUM_BINS} non-negative bins, "
                                                    f"got {bins!r}")
        out[str(name)] = tuple(float(b) for b in bins)
    return out
