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
given), the allowed sharding types (a table limited to table-wise by its
`ParameterConstraints.sharding_types` is never split), the devices and their
memory (`Topology`). Locality bins come from `table_stats` ({table name: 17
bins}, or a JSON file of it), else `types.DEFAULT_BINS` with a warning.

Memory is counted as TorchRec counts it (`memory="torchrec"`, the default):
each shard's storage by TorchRec's own `EmbeddingStorageEstimator` for the
given sharders (weights, the optimizer state their fused parameters imply,
input and output buffers) against each device's capacity less the storage
reservation (`reserve`, a share as in TorchRec's
`FixedPercentageStorageReservation`). The search places tables by their
weights; the cap it gets is the capacity less an even share of what TorchRec
counts beyond the weights, and the plan is checked with the estimator (the
cap shrinks by the fullest device's excess and the search reruns while a
device is over). `memory="weights"`
counts fp32 weights only, as the rest of the suite does. Anything that
cannot be placed is TorchRec's `PlannerError` with the numbers.

Any registered algorithm can plan (`alg=`): NeuroShard (default),
NeuroShard+, the greedy baselines, TorchRec's own planner. The plan is
turned into one `ParameterSharding` per table (table-wise, or column-wise with
equal shards, `torchrec.export`) under each module's path. Imports
torchrec: load it lazily (`neuroshard.NeuroShardPlanner` does).
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
    table_wise,
)
from torchrec.distributed.types import ShardingPlan, ShardingPlanner

from neuroshard.planner.registry import get_sharder
from neuroshard.planner.shard import ShardResult, shard
from neuroshard.problem import Problem
from neuroshard.types.errors import (
    ConfigError,
    InputError,
    NeuroShardError,
    OutOfMemoryError,
)
from neuroshard.types.plan import ColumnPiece, Plan, plan_from_pieces, plan_pieces
from neuroshard.types.tables import (
    DEFAULT_BINS,
    NUM_BINS,
    ShardTable,
    TableConfig,
    can_split,
)

logger = logging.getLogger(__name__)

TABLE_WISE, COLUMN_WISE = "table_wise", "column_wise"
MEMORY_MODES = ("torchrec", "weights")
BATCH_SIZE = 512  # per rank, TorchRec's planner default
_MAX_REPLANS = 6


@dataclass
class PlannedTable:
    """One table of the model as the planner sees it: where it lives, what it is, how TorchRec counts it."""

    path: str  # the module path of its collection ("" for the model itself)
    name: str
    table: TableConfig
    splittable: bool  # column-wise allowed by the sharder and the constraints
    kernel: str  # the compute kernel of its shards
    option: object  # TorchRec's table-wise ShardingOption (its storage estimated)


class NeuroShardPlanner(ShardingPlanner):
    """A TorchRec `ShardingPlanner` that plans with NeuroShard's search and cost models (module doc).

    `topology`: TorchRec's `Topology` (its world size must be the comm models' device count);
    `models`: `CostModels` (or a models directory with compute.pt and comm_<n>_fw/bw.pt), needed by the
    algorithms that use cost models; `batch_size`: per rank, for TorchRec's memory count;
    `constraints`: TorchRec's {table name: ParameterConstraints}; `table_stats`: {table name: 17 locality
    bins} or a JSON file of it; `alg` and `**options`: any registered algorithm and its options;
    `memory`: "torchrec" or "weights"; `reserve`: the share of each device's memory kept free.
    After `plan`, `last_result` holds the planner's `ShardResult` (plan, simulated cost, warnings) and
    `last_seconds` the planning time without the cost models' loading.
    """

    def __init__(self, topology, models=None, batch_size: int | None = None, constraints: dict | None = None,
                 table_stats=None, alg: str = "neuroshard", memory: str = "torchrec", reserve: float = 0.1,
                 seed: int = 0, **options) -> None:
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
        self._constraints = dict(constraints or {})
        for name, cons in self._constraints.items():  # TorchRec's storage count would fail on these deep inside
            factors = list(cons.pooling_factors or [])
            if not all(isinstance(f, (int, float)) and math.isfinite(f) and f >= 0 for f in factors):
                raise ConfigError(f"constraints[{name!r}].pooling_factors", f"must be finite numbers >= 0, got "
                                                                            f"{factors}")
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
        shard_tables = [ShardTable(i, i, t.table) for i, t in enumerate(tables)]
        result = self._search(tables, shard_tables)
        self.last_result, self.last_seconds = result, time.perf_counter() - t0
        return self._sharding_plan(module, tables, result.plan, by_type)

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
        by_key: dict[tuple[str, str], list] = {}
        for opt in options:
            by_key.setdefault((opt.path, opt.name), []).append(opt)
        tables, unknown_pooling, unknown_bins = [], [], []
        for (path, name), opts in by_key.items():
            types = {o.sharding_type for o in opts}
            if TABLE_WISE not in types:
                raise PlannerError(f"table {name} ({path or 'the model'}): NeuroShardPlanner plans table-wise and "
                                   f"column-wise shards, its constraints allow {sorted(types)}",
                                   PlannerErrorType.STRICT_CONSTRAINTS)
            tw = [o for o in opts if o.sharding_type == TABLE_WISE]
            kernels = [o.compute_kernel for o in tw]
            kernel = "fused" if "fused" in kernels else kernels[0]
            option = next(o for o in tw if o.compute_kernel == kernel)
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
            tables.append(PlannedTable(path, name, TableConfig(rows, pooling, tuple(bins), dim), splittable, kernel,
                                       option))
        if unknown_pooling:
            logger.warning("NeuroShardPlanner: no ParameterConstraints.pooling_factors for %s: pooling factor 1.0 "
                           "assumed", ", ".join(unknown_pooling))
        if unknown_bins:
            logger.warning("NeuroShardPlanner: no locality stats (table_stats) for %s: the default bins assumed",
                           ", ".join(unknown_bins))
        return tables, {s.module_type: s for s in sharders}

    def _enumeration_constraints(self, module, sharders) -> dict:
        """The user's constraints, each table's sharding types narrowed to table-wise and column-wise (all the
        planner makes) and its kernel to the fused one unless the user chose: TorchRec then enumerates and
        estimates only the options a plan can use."""
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
                out[name] = replace(cons, sharding_types=types or cons.sharding_types,
                                    compute_kernels=cons.compute_kernels or ["fused"])
        return out

    def _capacity(self) -> list[float]:
        """Each device's bytes for the tables: its HBM (its DDR on CPU) less the reservation."""
        kind = "hbm" if self._topology.compute_device != "cpu" else "ddr"
        return [getattr(d.storage, kind) * (1.0 - self._reserve) for d in self._topology.devices]

    def _search(self, tables: list[PlannedTable], shard_tables: list[ShardTable]) -> ShardResult:
        """Plan with the algorithm under a weights cap; with memory="torchrec", shrink the cap until TorchRec's
        count fits every device."""
        cap = min(self._capacity())
        if self._memory == "torchrec":
            # what TorchRec counts beyond the weights (optimizer state, buffers), spread evenly to start with;
            # the cap then shrinks by how far the fullest device is over
            extra = sum(self._storage(t, [t.table.dim])[0] - _weight_bytes(t.table.row, t.table.dim) for t in tables)
            cap -= extra / self._topology.world_size
            if cap <= 0:
                raise self._no_fit(tables, 0.0, "the buffers and optimizer state alone fill the devices")
        max_mem = cap / 2**30
        options = dict(self._options)
        no_split = [i for i, t in enumerate(tables) if not t.splittable]
        for _ in range(_MAX_REPLANS):
            try:
                problem = Problem(ndevices=self._topology.world_size, max_mem=max_mem, seed=self._seed)
                result = shard(shard_tables, problem, models=self._models, alg=self._alg, **options)
            except OutOfMemoryError as e:
                raise self._no_fit(tables, max_mem, str(e)) from None
            except NeuroShardError as e:
                raise PlannerError(f"NeuroShardPlanner ({self._alg}): {e}", PlannerErrorType.OTHER) from None
            result = self._unsplit(result, no_split, shard_tables, problem)
            if self._memory == "weights":
                return result
            used = self.device_storage(tables, result.plan)
            over = max(u / c for u, c in zip(used, self._capacity()))
            if over <= 1.0:
                return result
            max_mem *= 0.98 / over
        raise self._no_fit(tables, max_mem, f"TorchRec's count of the last plan: {_gb_list(used)} GB per device")

    def _unsplit(self, result: ShardResult, no_split: list[int], tables: list[ShardTable],
                 problem: Problem) -> ShardResult:
        """`result` with every split of a table that may not be split undone (its pieces gathered on the device
        of its first piece) and simulated again; `result` itself when there is none."""
        pieces = plan_pieces(tables, result.plan)
        if all(len(pieces[i]) == 1 for i in no_split):
            return result
        from neuroshard.formats.plan_file import plan_view
        from neuroshard.planner.simulator import simulate, validate_plan

        fixed = [[ColumnPiece(0, tables[i].dim, p[0].device)] if i in no_split else p for i, p in enumerate(pieces)]
        plan = plan_from_pieces(tables, fixed, result.plan.ndevices)
        try:
            if self._models is not None:
                bd = simulate(tables, plan, self._models, problem)
            else:
                validate_plan(tables, plan, problem)
                bd = None
        except OutOfMemoryError as e:
            raise PlannerError(f"NeuroShardPlanner ({self._alg}): with the tables limited to table-wise kept "
                               f"whole, the plan does not fit: {e}", PlannerErrorType.INSUFFICIENT_STORAGE) from None
        return ShardResult(result.alg, plan, None if bd is None else bd.cost, bd, plan_view(tables, plan),
                           result.search_ms, result.tables, result.warnings)

    def _storage(self, t: PlannedTable, widths: Sequence[int]) -> list[float]:
        """TorchRec's estimate (bytes on the compute device) of `t`'s shards of these widths."""
        import copy

        opt = copy.copy(t.option)
        opt.sharding_type = TABLE_WISE if len(widths) == 1 else COLUMN_WISE
        offsets = [sum(widths[:k]) for k in range(len(widths))]
        opt.shards = [Shard(size=[t.table.row, w], offset=[0, o]) for w, o in zip(widths, offsets)]
        self._estimator.estimate([opt], self._sharder_data)
        kind = "hbm" if self._topology.compute_device != "cpu" else "ddr"
        return [float(getattr(s.storage, kind)) for s in opt.shards]

    def device_storage(self, tables: list[PlannedTable], plan: Plan) -> list[float]:
        """Bytes per device of `plan` as TorchRec counts them (its storage estimator, per shard)."""
        used = [0.0] * plan.ndevices
        for t, pieces in zip(tables, plan_pieces([ShardTable(i, i, x.table) for i, x in enumerate(tables)], plan)):
            width = min(p.dim for p in pieces)
            devices = [p.device for p in pieces for _ in range(p.dim // width)]
            for d, b in zip(devices, self._storage(t, [width] * len(devices))):
                used[d] += b
        return used

    def _no_fit(self, tables: list[PlannedTable], max_mem: float, why: str) -> PlannerError:
        cap = self._capacity()
        need = [self._storage(t, [t.table.dim])[0] if self._memory == "torchrec" else
                _weight_bytes(t.table.row, t.table.dim) for t in tables]
        big = max(range(len(tables)), key=lambda i: need[i])
        return PlannerError(
            f"NeuroShardPlanner ({self._alg}) cannot place {len(tables)} tables on {len(cap)} devices of "
            f"{min(cap) / 2**30:.4g} GB each after a {100 * self._reserve:g}% reservation ({self._memory} count): "
            f"they need {sum(need) / 2**30:.4g} GB in all, the largest ({tables[big].name}) "
            f"{need[big] / 2**30:.4g} GB; {why}", PlannerErrorType.INSUFFICIENT_STORAGE)

    def _sharding_plan(self, module, tables: list[PlannedTable], plan: Plan, by_type: dict) -> ShardingPlan:
        """One `ParameterSharding` per table, grouped into each collection's module plan."""
        world = self._topology.world_size
        local = self._topology.local_world_size or world
        device = self._topology.compute_device
        modules = dict(module.named_modules())
        per_module: dict[str, dict] = {}
        pieces = plan_pieces([ShardTable(i, i, t.table) for i, t in enumerate(tables)], plan)
        for t, ps in zip(tables, pieces):
            if len(ps) == 1:
                gen = table_wise(rank=ps[0].device, compute_kernel=t.kernel)
            else:
                width = min(p.dim for p in ps)
                gen = column_wise(ranks=[p.device for p in ps for _ in range(p.dim // width)],
                                  compute_kernel=t.kernel)
            per_module.setdefault(t.path, {})[t.name] = gen
        out = {}
        for path, per_table in per_module.items():
            sub = modules[path]
            sharder = by_type.get(type(sub))
            out[path] = construct_module_sharding_plan(sub, per_table, sharder=sharder, local_size=local,
                                                       world_size=world, device_type=device)
        return ShardingPlan(out)


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
