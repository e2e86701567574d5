"""NeuroShard as a TorchRec `ShardingPlanner`: plan any model's embedding tables from inside TorchRec.

    from neuroshard.torchrec.planner import NeuroShardPlanner   # or ns.NeuroShardPlanner
    planner = NeuroShardPlanner(topology, models="results/quick",   # a run's models: ns.CostModels.load
                                constraints={"t0": ParameterConstraints(pooling_factors=[12.0])})
    plan = planner.collective_plan(model, sharders, pg)      # rank 0 plans, every rank gets the plan
    model = DistributedModelParallel(model, plan=plan, sharders=sharders)

It holds TorchRec's planner contract (tests/torchrec/test_planner_contract.py
runs TorchRec's planner tests against both). What TorchRec knows is read from
TorchRec (`sharding_options`): the tables (every module a given sharder
shards, at any module path), the sharding types the sharder offers for the
topology's device and the constraints allow, each type's kernel, the pooling
factors (`ParameterConstraints.pooling_factors`; 1.0 with a warning where none
is given), the devices and each one's memory (`Topology`, per rank). Locality
bins come from `table_stats` ({table name: 17 bins}, or a JSON file of it),
else `types.DEFAULT_BINS` with a warning. Nothing to shard is an empty plan.

Every sharding type is planned where a table's offer allows it: table-wise,
column-wise and table-column-wise (equal shards; split only while the pieces
stay multiples of 4 and no narrower than `min_partition`; a table whole whose
types do not include table-wise is one column shard; table-column-wise pieces
on one host), row-wise, table-row-wise (one host's ranks) and data-parallel.
Constraints act inside the search (`types.constraints`), for every algorithm;
`ranks={name: [ranks]}` limits the devices of a table's shards;
`colocate=[[name, name], ...]` puts tables whole on one device together (a
request TorchRec's planner has no way to say).

Two kinds of table are decided before the search, *by memory*, as TorchRec
places what its estimate cannot tell apart: a table whose types leave nothing
to place on a device (only row-wise, table-row-wise or data-parallel: the kind
the cost models price, else row-wise before table-row-wise before
data-parallel; data-parallel, where another kind is allowed, only for a small
table: `simulator.replicable`), and a table larger than every device even in its narrowest
pieces that may be row-wise (or table-row-wise). A table-row-wise one goes to
the host with the most room. Their memory is taken from their ranks before the
others are placed. The plan's estimate covers them where the cost models price
their kind (the collective model on the paper runtime, the runtime model's
fitted types under TorchRec's); where not, it leaves them out and a warning
says their cost is not modelled. With cost models for TorchRec's runtime
(`CostModels.for_runtime("torchrec")`) fitted on row-wise and data-parallel
plans, the search itself also makes tables row-wise or data-parallel where the
model says they pay (`planner.search.sharding_types`), among the types each
table allows; so it does with paper-runtime models that have a collective
model, and with its fits over host groups and a topology of several hosts,
table-row-wise tables too.

Memory (`memory="torchrec"`, the default) is what a rank holds in training:
each shard's storage by TorchRec's own `EmbeddingStorageEstimator` for the
given sharders (weights at their `EmbeddingBagConfig.data_type`, input ids,
pooled outputs, an `apply_optimizer_in_backward` optimizer's state) and what
it leaves out or under-counts (`sharding_options.training_bytes`,
`step_bytes`): the state of the optimizer the sharder's `fused_params` name;
an in-backward optimizer's state as FBGEMM keeps it (fp32, row-wise per shard
row); outputs at fp32 whatever the weights; a data-parallel replica's gradient
and all-reduce buffer; on CPU ranks, a step's buffers (`CPU_STEP_BUFFERS`
times the ids and outputs TorchRec counts once). It is held against each
device's capacity less `reserve` (as TorchRec's
`FixedPercentageStorageReservation`). The search places tables by their fp32
weights under a cap per device (its capacity less the tables decided before
it and an even share of the rest of the count); the plan is checked with the
full count (a device over it gets a smaller cap and the search reruns).
`memory="weights"` counts the weights alone. `storage()` counts any
`ShardingPlan` so. What cannot be placed is TorchRec's `PlannerError` naming
the devices' memory and the table: INSUFFICIENT_STORAGE when the tables'
smallest options together exceed every device's memory together, else
STRICT_CONSTRAINTS.

Each `ParameterSharding` carries the fields TorchRec's planner carries from
the table's `ParameterConstraints` (`cache_params`, `enforce_hbm`,
`stochastic_rounding`, `bounds_check_mode`, `output_dtype`,
`key_value_params`). Any registered algorithm can plan (`alg=`): NeuroShard
(default), NeuroShard+, the greedy baselines, TorchRec's own planner. Imports
torchrec: load it lazily (`neuroshard.NeuroShardPlanner` does).
"""

from __future__ import annotations

import copy
import logging
import math
import time
from pathlib import Path
from typing import Sequence

from torchrec.distributed.planner.types import PlannerError, PlannerErrorType, Shard
from torchrec.distributed.sharding_plan import construct_module_sharding_plan
from torchrec.distributed.types import ShardingPlan, ShardingPlanner

from neuroshard.planner.registry import get_sharder
from neuroshard.planner.shard import ShardResult, shard
from neuroshard.planner.simulator import replicable, simulate
from neuroshard.problem import Problem
from neuroshard.torchrec.export import table_sharding
from neuroshard.torchrec.sharding_options import (
    COLUMN_WISE,
    TABLE_COLUMN_WISE,
    TABLE_WISE,
    PlannedTable,
    check_groups,
    check_ranks,
    plan_shards,
    read_table_stats,
    read_tables,
    step_bytes,
    training_bytes,
)
from neuroshard.types.constraints import TableConstraints
from neuroshard.types.errors import ConfigError, NeuroShardError, OutOfMemoryError
from neuroshard.types.plan import (
    DATA_PARALLEL,
    ROW_WISE,
    TABLE_ROW_WISE,
    Plan,
    Spread,
    host_groups,
    plan_from_pieces,
    plan_pieces,
)
from neuroshard.types.tables import ShardTable

logger = logging.getLogger(__name__)

MEMORY_MODES = ("torchrec", "weights")
BATCH_SIZE = 512  # per rank, TorchRec's planner default
_MAX_REPLANS = 6
_ESTIMATE_GB = 2.0**20  # the memory of a device in the plan's estimate: the planner counts memory itself
KIND_ORDER = (ROW_WISE, TABLE_ROW_WISE, DATA_PARALLEL)  # a table decided by memory: the least per rank first


class NeuroShardPlanner(ShardingPlanner):
    """A TorchRec `ShardingPlanner` that plans with NeuroShard's search and cost models (module doc).

    `topology`: TorchRec's `Topology` (its world size must be the comm models' count, if they have one; each rank's
    memory is its own); `models`: `CostModels`, or a pipeline run's folder (or its models folder) to load
    them from (`CostModels.load_run`: the on-policy models, the collective model, ...), needed by the
    algorithms that use cost models; `batch_size`: per rank, for TorchRec's memory count and the costs (the
    global batch is every rank's; left out, TorchRec's 512 for the memory and the batch of the models' data
    for the costs); `constraints`: TorchRec's {table name: ParameterConstraints}; `ranks`: {table name: the
    ranks its shards may use}; `colocate`: groups of table names placed whole on one rank together;
    `table_stats`: {table name: 17 locality bins} or a JSON file of it; `alg` and `**options`: any registered
    algorithm and its options; `memory`: "torchrec" or "weights"; `reserve`: the share of each device's
    memory kept free. After `plan`, `last_result` holds a `ShardResult` over every table (in `_tables`
    order): the plan (the tables decided before the search in its `spread`), the estimate over the tables
    whose sharding types the models price, the warnings; None after an empty plan. `last_seconds`: the
    planning time without the cost models' loading.
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
        self._ranks = check_ranks(ranks, topology.world_size)
        self._colocate = check_groups(colocate)
        self._stats = read_table_stats(table_stats)
        self._alg, self._memory, self._reserve, self._seed, self._options = alg, memory, reserve, seed, options
        if isinstance(models, (str, Path)):
            from neuroshard.planner.costs.cost_models import CostModels

            models = CostModels.load_run(models, topology.world_size)
        if models is not None:  # comm models for any world size priced at the topology's ranks
            models = models.for_world(topology.world_size)
        if models is not None and models.ndevices != topology.world_size:
            raise ConfigError("models", f"the comm models are for {models.ndevices} devices, the topology has "
                                        f"{topology.world_size}")
        if models is not None and self._cost_batch is None:
            try:
                models.global_batch
            except ConfigError:  # models that do not record their data's batch: TorchRec's, for the collectives
                self._cost_batch = self._batch_size * topology.world_size
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
        """The `ShardingPlan` of every table the sharders shard in `module` (empty when there is none)."""
        t0 = time.perf_counter()
        tables, by_type = self._tables(module, sharders)
        self.last_result = None
        if not tables:  # TorchRec's planner: no shardable parameters, an empty plan
            self.last_seconds = time.perf_counter() - t0
            return ShardingPlan({})
        names = {t.name for t in tables}
        unknown = [n for n in [*self._ranks, *(n for g in self._colocate for n in g)] if n not in names]
        if unknown:
            raise ConfigError("ranks" if unknown[0] in self._ranks else "colocate",
                              f"no table {unknown[0]!r} in the model (tables: {', '.join(sorted(names))})")
        fixed = self._decided(tables)
        result = self._search(tables, fixed)
        self.last_result, self.last_seconds = result, time.perf_counter() - t0
        return self._sharding_plan(module, tables, result.plan, by_type)

    # ------------------------------------------------------------------ the steps

    def _tables(self, module, sharders) -> tuple[list[PlannedTable], dict]:
        """The tables of `module` (`sharding_options.read_tables`, its notes logged) and the sharder per module
        type."""
        tables, self._estimator, self._sharder_data, notes = read_tables(
            module, sharders, self._topology, self._batch_size, self._constraints, self._stats)
        for note in notes:
            logger.warning("NeuroShardPlanner: %s", note)
        return tables, {s.module_type: s for s in sharders}

    def _problem(self, caps_gb, constraints: TableConstraints | None = None) -> Problem:
        return Problem(ndevices=self._topology.world_size, max_mem=tuple(caps_gb), seed=self._seed,
                       constraints=constraints, batch_size=self._cost_batch,
                       local_world_size=self._topology.local_world_size or None)

    def _priced(self) -> tuple[str, ...]:
        """The spread kinds the cost models price on this topology (`sharding_types.spread_kinds`)."""
        from neuroshard.planner.search.sharding_types import spread_kinds

        return () if self._models is None else spread_kinds(self._models, self._problem([1.0]))

    def _decided(self, tables: list[PlannedTable]) -> dict[int, Spread]:
        """{table index: its Spread} of the tables decided before the search (module doc): a table with nothing
        to place on a device, and one that fits no device in its narrowest pieces but may be row-wise or
        table-row-wise (neither named in `ranks` or `colocate`)."""
        priced, capacity = self._priced(), self._capacity()
        room = self._problem([c / 2**30 for c in capacity])
        named = {*self._ranks, *(n for g in self._colocate for n in g)}
        out = {}
        for i in sorted(range(len(tables)), key=lambda i: -tables[i].weight_bytes):
            t = tables[i]
            if not t.placeable:
                if t.name in named:
                    raise ConfigError("ranks" if t.name in self._ranks else "colocate",
                                      f"table {t.name!r} is {'/'.join(t.spread_kinds)} only (over every rank or a "
                                      "host): it takes no ranks or co-location")
                kinds = [k for k in KIND_ORDER if k in t.spread_kinds]
                if kinds != [DATA_PARALLEL] and not replicable(ShardTable(i, i, t.table), room):
                    kinds = [k for k in kinds if k != DATA_PARALLEL]  # no replica of a large table by choice
                out[i] = self._roomiest(tables, out, i, [next((k for k in kinds if k in priced), kinds[0])])
            elif t.name not in named and {ROW_WISE, TABLE_ROW_WISE} & set(t.spread_kinds) and \
                    self._narrowest(t) > max(capacity):
                out[i] = self._roomiest(tables, out, i, [ROW_WISE, TABLE_ROW_WISE])
        return out

    def _roomiest(self, tables: list[PlannedTable], fixed: dict[int, Spread], i: int, kinds) -> Spread:
        """Table i as the one of `kinds` it allows (over every rank; table-row-wise over each host in turn) that
        leaves the most room on the rank with the least, beside the `fixed` tables."""
        world = self._topology.world_size
        room = self._capacity()
        for j, s in fixed.items():
            for r, b in zip(s.ranks, self._spread_storage(tables[j], s)):
                room[r] -= b
        best = None
        for kind in (k for k in kinds if k in tables[i].spread_kinds):
            groups = host_groups(self._topology.local_world_size or world, world) if kind == TABLE_ROW_WISE else \
                [tuple(range(world))]
            for ranks in groups:
                s = Spread(i, kind, ranks)
                left = list(room)
                for r, b in zip(ranks, self._spread_storage(tables[i], s)):
                    left[r] -= b
                if best is None or min(left) > best[0]:
                    best = (min(left), s)
        return best[1]

    def _narrowest(self, t: PlannedTable) -> float:
        """Bytes of the table's narrowest piece on one device (whole, unless it may be split)."""
        width = t.dim
        while t.splittable and width % 8 == 0 and width // 2 >= (t.min_dim or 1):
            width //= 2
        return self._storage(t, [width])[0]

    def _capacity(self) -> list[float]:
        """Each device's bytes for the tables: its HBM (its DDR on CPU) less the reservation."""
        return [m * (1.0 - self._reserve) for m in self._device_memory()]

    def _device_memory(self) -> list[float]:
        """Each device's memory (bytes) as the topology gives it."""
        kind = "hbm" if self._topology.compute_device != "cpu" else "ddr"
        return [float(getattr(d.storage, kind)) for d in self._topology.devices]

    def _table_constraints(self, searched: list[PlannedTable]) -> TableConstraints:
        """The search's constraints over the searched tables (by position); a table that may be split only
        table-column-wise keeps its pieces on one host (the hosts taken in turn)."""
        index = {t.name: i for i, t in enumerate(searched)}
        world = self._topology.world_size
        hosts = host_groups(self._topology.local_world_size or world, world)
        devices = {index[n]: r for n, r in self._ranks.items()}
        one_host = [i for i, t in enumerate(searched) if t.splittable and COLUMN_WISE not in t.options
                    and TABLE_COLUMN_WISE in t.options and len(hosts) > 1]
        for k, i in enumerate(one_host):
            mine = devices.get(i, tuple(range(world)))
            host = max(hosts[k % len(hosts):] + hosts[:k % len(hosts)], key=lambda h: len(set(h) & set(mine)))
            devices[i] = tuple(r for r in mine if r in host)
        return TableConstraints(whole=tuple(i for i, t in enumerate(searched) if not t.splittable),
                                devices=tuple(devices.items()),
                                colocate=tuple(tuple(index[n] for n in g) for g in self._colocate),
                                kinds=tuple((i, t.spread_kinds) for i, t in enumerate(searched)),
                                min_dim=tuple((i, t.min_dim) for i, t in enumerate(searched) if t.min_dim))

    def _search(self, tables: list[PlannedTable], fixed: dict[int, Spread]) -> ShardResult:
        """`_search_around` the `fixed` tables; while nothing fits, the largest table left that may be row-wise
        or table-row-wise (and is not named in `ranks` or `colocate`) is made so by memory (`_roomiest`), as
        TorchRec would, and the search runs again (at most `_MAX_REPLANS` times)."""
        named = {*self._ranks, *(n for g in self._colocate for n in g)}
        for attempt in range(_MAX_REPLANS + 1):
            try:
                return self._search_around(tables, fixed)
            except PlannerError as e:
                if e.error_type not in (PlannerErrorType.INSUFFICIENT_STORAGE, PlannerErrorType.STRICT_CONSTRAINTS):
                    raise
                free = [i for i, t in enumerate(tables) if i not in fixed and t.name not in named
                        and {ROW_WISE, TABLE_ROW_WISE} & set(t.spread_kinds)]
                if not free or attempt == _MAX_REPLANS:
                    raise
                i = max(free, key=lambda i: (tables[i].weight_bytes, -i))
                fixed = {**fixed, i: self._roomiest(tables, fixed, i, [ROW_WISE, TABLE_ROW_WISE])}
                logger.warning("NeuroShardPlanner: no plan fits; %s made %s to make room", tables[i].name,
                               fixed[i].kind)

    def _search_around(self, tables: list[PlannedTable], fixed: dict[int, Spread]) -> ShardResult:
        """Plan the tables not `fixed` with the algorithm under per-device weights caps (each device's capacity
        less the fixed tables and, with memory="torchrec", an even share of what is counted beyond the
        weights); shrink the cap of a device over the full count until every device fits. The result is over
        every table (`_combined`)."""
        capacity = self._capacity()
        world = self._topology.world_size
        held = [0.0] * world  # the fixed tables' bytes per rank
        for i, s in fixed.items():
            for r, b in zip(s.ranks, self._spread_storage(tables[i], s)):
                held[r] += b
        caps = [c - h for c, h in zip(capacity, held)]
        if min(caps) <= 0:
            r = caps.index(min(caps))
            raise self._no_fit(tables, f"the tables sharded over every rank or a host "
                                       f"({', '.join(tables[i].name for i, s in fixed.items() if r in s.ranks)}) "
                                       f"need {held[r] / 2**30:.4g} GB on rank {r}")
        searched_at = [i for i in range(len(tables)) if i not in fixed]
        searched = [tables[i] for i in searched_at]
        # what is counted beyond the weights as the search sees them (fp32; buffers, optimizer state, a dtype of
        # fewer bytes), spread evenly to start with
        extra = sum(self._storage(t, [t.dim])[0] - _search_bytes(t) for t in searched)
        caps = [c - extra / world for c in caps]
        if min(caps) <= 0:
            raise self._no_fit(tables, "the buffers and optimizer state alone fill the devices")
        if not searched:
            return self._combined(tables, fixed, [], None)
        shard_tables = [ShardTable(i, i, t.table) for i, t in enumerate(searched)]
        constraints = self._table_constraints(searched)
        for _ in range(_MAX_REPLANS):
            problem = self._problem([c / 2**30 for c in caps], constraints)
            try:
                result = shard(shard_tables, problem, models=self._models, alg=self._alg, **self._options)
            except OutOfMemoryError as e:
                table = None if e.table is None else searched[e.table].name
                left = "" if self._memory == "weights" and not fixed else \
                    f" (beside what else is counted, the weights have {_gb_list(caps)} GB per device)"
                bound = "" if constraints.empty else " within the constraints"
                raise self._no_fit(tables, f"{self._alg} found no placement{bound}{left}", table) from None
            except ConfigError:
                raise
            except NeuroShardError as e:
                raise PlannerError(f"NeuroShardPlanner ({self._alg}): {_named(e, searched)}",
                                   PlannerErrorType.OTHER) from None
            if not extra:  # the search counted what the planner counts
                return self._combined(tables, fixed, searched_at, result)
            used = [u + h for u, h in zip(self.device_storage(searched, result.plan), held)]
            if max(u / c for u, c in zip(used, capacity)) <= 1.0:
                return self._combined(tables, fixed, searched_at, result)
            caps = [c * 0.98 / (u / m) if u > m else c for c, u, m in zip(caps, used, capacity)]
        raise self._no_fit(tables, f"the {self._memory} count of the last plan: {_gb_list(used)} GB per device")

    def _combined(self, tables: list[PlannedTable], fixed: dict[int, Spread], searched_at: list[int],
                  result: ShardResult | None) -> ShardResult:
        """The plan over every table: the search's (its tables at `searched_at`) and the fixed tables; its
        estimate over the tables whose kinds the models price (the search's own when nothing is fixed), a
        warning naming the others."""
        from neuroshard.formats.plan_file import plan_view
        from neuroshard.planner.costs import extrapolation

        world = self._topology.world_size
        every = [ShardTable(i, i, t.table) for i, t in enumerate(tables)]
        pieces, spread = [[] for _ in tables], [*fixed.values()]
        if result is not None:
            for i, p in zip(searched_at, plan_pieces(result.tables, result.plan)):
                pieces[i] = p
            spread += [Spread(searched_at[s.table], s.kind, s.ranks) for s in result.plan.spread]
        plan = plan_from_pieces(every, pieces, world, sorted(spread, key=lambda s: s.table))
        notes = [] if result is None else list(result.warnings)
        if not fixed and result is not None:
            return result
        cost, breakdown, seconds = None, None, 0.0 if result is None else result.search_ms
        if self._models is not None:
            priced = self._priced()
            left = [i for i, s in fixed.items() if s.kind not in priced]
            if left:
                left.sort(key=lambda i: tables[i].name)
                what = ", ".join(f"{tables[i].name} ({fixed[i].kind})" for i in left)
                notes.append(f"{what}: placed by memory; their cost is not modelled (the cost models price "
                             f"{', '.join(priced) or 'no row-wise, table-row-wise or data-parallel tables'}), "
                             "so the estimate leaves them out")
                logger.warning("NeuroShardPlanner: %s", notes[-1])
            keep = [i for i in range(len(tables)) if i not in left]
            sub = [ShardTable(k, k, tables[i].table) for k, i in enumerate(keep)]
            at = {i: k for k, i in enumerate(keep)}
            sub_plan = plan_from_pieces(sub, [pieces[i] for i in keep], world,
                                        [Spread(at[s.table], s.kind, s.ranks) for s in plan.spread
                                         if s.table in at])
            if sub:
                models = self._models.at_batch(self._cost_batch) if self._cost_batch else self._models
                breakdown = simulate(sub, sub_plan, models, self._problem([_ESTIMATE_GB] * world))
                cost = breakdown.cost
                notes += extrapolation.warnings(sub, sub_plan, breakdown, models, [tables[i].name for i in keep])
        return ShardResult(self._alg, plan, cost, breakdown, plan_view(every, plan), seconds, every, notes)

    def _storage(self, t: PlannedTable, widths: Sequence[int]) -> list[float]:
        """The bytes on the compute device of `t`'s shards of these widths, placed as the plan would make them
        (`_estimate`)."""
        offsets = [sum(widths[:k]) for k in range(len(widths))]
        return self._estimate(t, t.placed_type(len(widths)) if t.placeable else TABLE_WISE,
                              [Shard(size=[t.table.row, w], offset=[0, o]) for w, o in zip(widths, offsets)])

    def _spread_storage(self, t: PlannedTable, spread: Spread) -> list[float]:
        """The bytes on each of `spread.ranks` of `t` sharded row-wise or table-row-wise (TorchRec's blocks) or
        data-parallel (a replica on its kernel, the dense one unless the table's offer says otherwise)
        (`_estimate`)."""
        rows, dim = t.table.row, t.dim
        if spread.kind != DATA_PARALLEL:
            blocks = spread.rows_on(rows)
            return self._estimate(t, spread.kind, [Shard(size=[b, dim], offset=[sum(blocks[:j]), 0])
                                                   for j, b in enumerate(blocks)])
        return self._estimate(t, DATA_PARALLEL, [Shard(size=[rows, dim], offset=[0, 0]) for _ in spread.ranks])

    def _estimate(self, t: PlannedTable, sharding_type: str, shards, kernel: str | None = None,
                  count: str | None = None) -> list[float]:
        """Per shard, the bytes of `t` sharded `sharding_type` into `shards` (on `kernel`, else that type's;
        data-parallel on the dense one where the table does not offer it) in `count` (default the planner's
        memory mode; "estimator": TorchRec's count alone; module doc)."""
        count = count or self._memory
        if count == "weights":
            return [float(t.weight_size * s.size[0] * s.size[1]) for s in shards]
        opt = copy.copy(t.option(sharding_type))
        opt.sharding_type, opt.shards = sharding_type, shards
        if kernel is not None:
            opt.compute_kernel = kernel
        elif sharding_type == DATA_PARALLEL and sharding_type not in t.options:
            opt.compute_kernel = "dense"
        if count != "estimator" and opt.output_dtype is None and \
                "output_dtype" not in (self._sharder_data[opt.module_type_key].fused_params or {}):
            # the kernels output fp32 unless told otherwise; TorchRec counts the outputs at the weights' dtype
            from torchrec.modules.embedding_configs import DataType

            opt.output_dtype = DataType.FP32
        self._estimator.estimate([opt], self._sharder_data)
        kind = "hbm" if self._topology.compute_device != "cpu" else "ddr"
        counted = [float(getattr(s.storage, kind)) for s in opt.shards]
        if count == "estimator":
            return counted
        step = self._topology.compute_device == "cpu"
        return [c + training_bytes(opt, s, t) + (step_bytes(c, s, t) if step else 0.0)
                for c, s in zip(counted, opt.shards)]

    def storage(self, module, sharders, sharding_plan, count: str | None = None) -> list[float]:
        """Bytes per rank of a TorchRec `sharding_plan` of `module`'s tables (this planner's or any other's), as
        this planner counts memory (`count`: "torchrec", "weights", or "estimator" for TorchRec's storage
        estimate alone; default the planner's `memory`). ConfigError naming a table the plan leaves out."""
        if count not in (None, "estimator", *MEMORY_MODES):
            raise ConfigError("count", f"must be one of estimator, {', '.join(MEMORY_MODES)}, got {count!r}")
        tables, _ = self._tables(module, sharders)
        world = self._topology.world_size
        used = [0.0] * world
        for t in tables:
            found = plan_shards(sharding_plan, t.path, t.name, world)
            if found is None:
                raise ConfigError("sharding_plan", f"no sharding for table {t.name!r} ({t.path or 'the model'})")
            kind, kernel, placed = found
            shards = [Shard(size=size or [t.table.row, t.dim], offset=offset or [0, 0]) for _, size, offset in placed]
            for (r, _, _), b in zip(placed, self._estimate(t, kind, shards, kernel, count)):
                used[r] += b
        return used

    def _least(self, t: PlannedTable) -> float:
        """Bytes of the table's cheapest option in TorchRec's count, all its shards: each type it allows cut as
        TorchRec's enumerator cuts it on this topology."""
        from torchrec.distributed.sharding_plan import calculate_shard_sizes_and_offsets

        world = self._topology.world_size
        out = math.inf
        for kind in t.types:
            sizes, offsets = calculate_shard_sizes_and_offsets(t.option(kind).tensor, world,
                                                               self._topology.local_world_size or world, kind,
                                                               t.min_dim)
            out = min(out, sum(self._estimate(t, kind, [Shard(size=s, offset=o) for s, o in zip(sizes, offsets)])))
        return out

    def device_storage(self, tables: list[PlannedTable], plan: Plan) -> list[float]:
        """Bytes per device of `plan` (over `tables`) as the planner counts memory (`_estimate`)."""
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
        """TorchRec's PlannerError for a model that cannot be placed: INSUFFICIENT_STORAGE when the tables'
        smallest options together exceed the devices' capacity together (as TorchRec's planner tells), else
        STRICT_CONSTRAINTS."""
        memory = self._device_memory()
        need = [self._storage(t, [t.dim])[0] for t in tables]
        least = sum(self._least(t) if self._memory == "torchrec" else t.weight_bytes for t in tables)
        big = max(range(len(tables)), key=lambda i: need[i])
        devices = (f"{len(memory)} devices of {memory[0] / 2**30:.4g} GB each" if len(set(memory)) == 1 else
                   f"{len(memory)} devices of {_gb_list(memory)} GB")
        named = "" if table is None else f"; {table!r} could not be placed"
        kind = PlannerErrorType.INSUFFICIENT_STORAGE if least > sum(self._capacity()) else \
            PlannerErrorType.STRICT_CONSTRAINTS
        return PlannerError(
            f"NeuroShardPlanner ({self._alg}) cannot place {len(tables)} tables on {devices} (the topology's, "
            f"{100 * self._reserve:g}% reserved; {self._memory} count): they need {sum(need) / 2**30:.4g} GB in "
            f"all, the largest ({tables[big].name}) {need[big] / 2**30:.4g} GB{named}; {why}", kind)

    def _sharding_plan(self, module, tables: list[PlannedTable], plan: Plan, by_type: dict) -> ShardingPlan:
        """One `ParameterSharding` per table (`export.table_sharding`, its type and kernel the table's offer's,
        the fields of its constraints TorchRec carries), grouped into each collection's module plan."""
        world = self._topology.world_size
        local = self._topology.local_world_size or world
        modules = dict(module.named_modules())
        per_module: dict[str, dict] = {}
        kinds: dict[tuple[str, str], str] = {}
        pieces = plan_pieces([ShardTable(i, i, t.table) for i, t in enumerate(tables)], plan)
        for i, (t, ps) in enumerate(zip(tables, pieces)):
            spread = plan.spread_of(i)
            kind = spread.kind if spread is not None else t.placed_type(len(ps))
            gen, kind = table_sharding(ps, spread, local, t.kernel(kind), f"table {t.name}", kind, kind)
            per_module.setdefault(t.path, {})[t.name] = gen
            kinds[(t.path, t.name)] = kind
        by_name = {(t.path, t.name): t for t in tables}
        out = {}
        for path, per_table in per_module.items():
            sub = modules[path]
            out[path] = construct_module_sharding_plan(sub, per_table, sharder=by_type.get(type(sub)),
                                                       local_size=local, world_size=world,
                                                       device_type=self._topology.compute_device)
            for name in per_table:
                ps, t, kind = out[path][name], by_name[(path, name)], kinds[(path, name)]
                ps.sharding_type, ps.compute_kernel = kind, t.kernel(kind)
                for key, value in t.fused_fields().items():
                    setattr(ps, key, copy.deepcopy(value))
        return ShardingPlan(out)


def _named(e: Exception, searched: list[PlannedTable]) -> str:
    """An error from the search with its table indices ("table 3") given as the model's table names."""
    import re

    return re.sub(r"\btable (\d+)\b", lambda m: f"table {searched[int(m.group(1))].name!r}"
                  if int(m.group(1)) < len(searched) else m.group(0), str(e))


def _search_bytes(t: PlannedTable) -> float:
    """The table's bytes as the search counts them: fp32 weights (`types.tables.size_gb`)."""
    return 4.0 * t.table.row * t.table.dim


def _gb_list(xs) -> str:
    return "[" + ", ".join(f"{x / 2**30:.3g}" for x in xs) + "]"
