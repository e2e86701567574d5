"""TorchRec's planner as a sharder (`--alg torchrec`), restricted to the plan space NeuroShard searches.

TorchRec's `EmbeddingShardingPlanner` is what a practitioner would use instead
of NeuroShard. Here it plans the task's tables as one `EmbeddingBagCollection`
(built on the meta device: no weights are allocated) with:

* sharding types table-wise and column-wise only, the fused kernel;
* a topology of `ndevices` GPUs ("cuda") on one host, `max_mem` GB each, no
  storage reservation, and a storage estimate of the fp32 weights only
  (rows x columns x 4 bytes), so that "fits" means what it means for every
  other algorithm (`simulator.validate_plan`);
* per-rank batch = the global batch (`batch_size` option, the dataset's; default
  `DEFAULT_BATCH_SIZE`) / ndevices, and each table's pooling factor from its stats;
* column-wise shards that are halvings: `min_partition = dim / column_shards`
  (`column_shards` a power of two, default 2, lowered for a table whose
  narrower shards would not be multiples of 4; a dim-4 table is table-wise only).
  A table cut into 2^k equal shards is k levels of halving of every piece: the
  plan maps onto `column_steps` exactly (`types.plan_from_pieces`), shard ranks
  onto devices, and then goes through the same validation as every plan.

TorchRec reporting no plan (insufficient storage, or none of its proposals
partitions within memory) is an OutOfMemoryError, reported "oom". Shards of one
table that TorchRec puts on the same rank stay separate tables, as TorchRec
runs them. Importing this module does not import torch or torchrec (the
registry imports it); torchrec is imported on the first call, and a missing
torchrec is a one-line error saying how to install it.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import ClassVar, Sequence

from neuroshard.checks import check_int
from neuroshard.planner.costs.analytic import FittedEstimatorOptions, load_option
from neuroshard.planner.registry import ShardingContext, register
from neuroshard.problem import Problem
from neuroshard.settings import Settings, setting
from neuroshard.types.errors import (
    ConfigError,
    InvalidPlanError,
    NeuroShardError,
    OutOfMemoryError,
)
from neuroshard.types.plan import (
    DATA_PARALLEL,
    SPREAD_KINDS,
    ColumnPiece,
    Plan,
    Spread,
    plan_from_pieces,
    row_blocks,
    table_devices,
)
from neuroshard.types.tables import ShardTable, can_split

# The public DLRM dataset's batch (the paper's setting): the global batch assumed when the caller gives none.
DEFAULT_BATCH_SIZE = 65536
INSTALL_HINT = ("install it with `pip install --no-deps -r requirements-torchrec.txt` beside fbgemm-gpu-cpu "
                "(CPU; `make setup` does it), or `pip install fbgemm-gpu torchrec` matching your CUDA torch (GPU)")
TABLE_WISE, COLUMN_WISE = "table_wise", "column_wise"


def require_torchrec() -> None:
    """Import torchrec's planner, or raise a one-line NeuroShardError saying how to install it."""
    try:
        import torchrec.distributed.planner  # noqa: F401
    except ImportError as e:
        raise NeuroShardError(f"torchrec is not available ({type(e).__name__}: {e}); {INSTALL_HINT}") from None


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class TorchRecConfig(Settings):
    """Settings of the TorchRec planner run (its options; `torchrec_column_shards` is also a flag).

    `batch_size`: the global batch, summed over devices (TorchRec plans with
    batch_size // ndevices per rank; the evaluation passes the dataset's);
    `torchrec_column_shards`: the most equal shards a column-wise table is
    cut into (a power of two: 2 = halves, 4 = quarters).
    """

    TITLE: ClassVar[str] = "TorchRec planner (--alg torchrec)"

    batch_size: int = setting(DEFAULT_BATCH_SIZE, "", cli=False)
    torchrec_column_shards: int = setting(2, "column-wise sharding cuts a table into this many equal shards, a "
                                             "power of two (2: halves)")

    def __post_init__(self):
        check_int("batch_size", self.batch_size, 1)
        k = check_int("--torchrec_column_shards", self.torchrec_column_shards, 2)
        if k & (k - 1):
            raise ConfigError("--torchrec_column_shards", f"must be a power of two, got {k}")


def column_shards_for(dim: int, most: int) -> int:
    """The most equal column shards (a power of two <= `most`) whose width stays a multiple of 4; 1: none."""
    shards = 1
    while shards * 2 <= most and can_split(dim // shards) and dim % (shards * 2) == 0:
        shards *= 2
    return shards


def table_names(tables: Sequence[ShardTable]) -> list[str]:
    """Names of a task's tables: `t<dataset id>`, and `t<id>_<k>` for the k-th repeat of the same id."""
    seen: dict[int, int] = {}
    names = []
    for t in tables:
        k = seen.get(t.table_id, 0)
        seen[t.table_id] = k + 1
        names.append(f"t{t.table_id}" if k == 0 else f"t{t.table_id}_{k}")
    return names


# --------------------------------------------------------------------------- TorchRec objects


def embedding_bag_collection(tables: Sequence[ShardTable], names: Sequence[str], device: str = "meta"):
    """An `EmbeddingBagCollection` with one table per task table (sum pooling, one feature `<name>` each).

    On the meta device by default: the planner and the plan constructors need
    shapes only.
    """
    require_torchrec()
    import torch
    from torchrec.modules.embedding_configs import EmbeddingBagConfig, PoolingType
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    configs = [EmbeddingBagConfig(name=name, embedding_dim=t.dim, num_embeddings=t.config.row,
                                  feature_names=[name], pooling=PoolingType.SUM) for t, name in zip(tables, names)]
    return EmbeddingBagCollection(tables=configs, device=torch.device(device))


def embedding_collection(tables: Sequence[ShardTable], names: Sequence[str], device: str = "meta"):
    """An `EmbeddingCollection` (unpooled: every looked-up row is an output row) with one table per task table,
    one feature `<name>` each; on the meta device by default, as `embedding_bag_collection`."""
    require_torchrec()
    import torch
    from torchrec.modules.embedding_configs import EmbeddingConfig
    from torchrec.modules.embedding_modules import EmbeddingCollection

    configs = [EmbeddingConfig(name=name, embedding_dim=t.dim, num_embeddings=t.config.row, feature_names=[name])
               for t, name in zip(tables, names)]
    return EmbeddingCollection(tables=configs, device=torch.device(device))


def _weights_only_storage_estimator():
    """A TorchRec shard estimator that counts each shard's fp32 weights and nothing else."""
    from torchrec.distributed.planner.types import ShardEstimator, Storage

    class WeightsOnlyStorageEstimator(ShardEstimator):
        def __init__(self, topology=None, constraints=None):
            pass

        def estimate(self, sharding_options, sharder_data_map=None):
            for option in sharding_options:
                for shard in option.shards:
                    rows, cols = shard.size
                    shard.storage = Storage(hbm=rows * cols * 4, ddr=0)

    return WeightsOnlyStorageEstimator()


def plan_with_torchrec(tables: Sequence[ShardTable], problem: Problem, cfg: TorchRecConfig, perf_estimator=None):
    """TorchRec's `ShardingPlan` for the tables (module path "", tables named by `table_names`) on the
    problem's devices, each with its own memory; a table the constraints keep whole is table-wise only.

    Raises OutOfMemoryError when TorchRec finds no plan within the devices' memory; NeuroShardError for
    constraints TorchRec's `ParameterConstraints` cannot say (a table's devices, co-location).
    `perf_estimator(topology, constraints)`: the `ShardEstimator` the planner prices shards with (default
    TorchRec's own with its default coefficients; `torchrec.estimators` for the fitted and the neural).
    """
    cons = plain_constraints(problem, "torchrec")
    ndevices = problem.ndevices
    require_torchrec()
    from torchrec.distributed.embedding_types import EmbeddingComputeKernel
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import (
        EmbeddingShardingPlanner,
        ParameterConstraints,
    )
    from torchrec.distributed.planner.enumerators import EmbeddingEnumerator
    from torchrec.distributed.planner.shard_estimators import EmbeddingPerfEstimator
    from torchrec.distributed.planner.storage_reservations import (
        FixedPercentageStorageReservation,
    )

    names = table_names(tables)
    topology = gpu_topology(problem)
    constraints = {}
    for i, (name, t) in enumerate(zip(names, tables)):
        shards = 1 if cons.kept_whole(i) else column_shards_for(t.dim, cfg.torchrec_column_shards)
        while shards > 1 and not cons.may_halve(i, 2 * t.dim // shards):  # no piece below its narrowest
            shards //= 2
        constraints[name] = ParameterConstraints(
            sharding_types=[TABLE_WISE, COLUMN_WISE] if shards > 1 else [TABLE_WISE],
            compute_kernels=[EmbeddingComputeKernel.FUSED.value],
            min_partition=t.dim // shards if shards > 1 else None,
            pooling_factors=[float(t.config.pooling_factor)])
    batch = max(1, cfg.batch_size // ndevices)
    perf = EmbeddingPerfEstimator(topology=topology, constraints=constraints) if perf_estimator is None else \
        perf_estimator(topology, constraints)
    enumerator = EmbeddingEnumerator(
        topology=topology, batch_size=batch, constraints=constraints,
        estimator=[perf, _weights_only_storage_estimator()])
    planner = EmbeddingShardingPlanner(topology=topology, batch_size=batch, enumerator=enumerator,
                                       storage_reservation=FixedPercentageStorageReservation(percentage=0.0),
                                       constraints=constraints, stats=[], debug=False)
    return run_planner(planner, embedding_bag_collection(tables, names), EmbeddingBagCollectionSharder(), tables,
                       problem)


def plain_constraints(problem: Problem, alg: str):
    """The problem's table constraints, NeuroShardError naming `alg` for those TorchRec's `ParameterConstraints`
    cannot say (a table's devices, co-located tables)."""
    cons = problem.table_constraints
    if cons.devices or cons.colocate:
        raise NeuroShardError(f"{alg}: TorchRec's planner takes no per-table device lists or co-located tables "
                              "(its ParameterConstraints cannot say them)")
    return cons


def gpu_topology(problem: Problem):
    """TorchRec's `Topology` of the problem's devices as GPUs ("cuda") on its hosts (`Problem.local_world_size`;
    one host when left out), each with its own memory as HBM and no host memory: a plan fits in the devices'
    memory alone, as every algorithm's must."""
    require_torchrec()
    from torchrec.distributed.planner.types import KernelConfig, TopologyFactory, TrainerConfig

    caps = [int(m * 2**30) for m in problem.caps]
    topology = TopologyFactory.create_topology(
        TrainerConfig(world_size=problem.ndevices, local_world_size=problem.local_world_size or problem.ndevices,
                      hbm_cap_bytes=min(caps),
                      ddr_cap_bytes=0),
        kernel_config=KernelConfig(compute_device="cuda"))
    for device, cap in zip(topology.devices, caps):  # devices of unequal memory
        device.storage.hbm = cap
    return topology


def run_planner(planner, module, sharder, tables: Sequence[ShardTable], problem: Problem):
    """`planner.plan(module, [sharder])`; OutOfMemoryError when TorchRec finds no plan within the devices' memory,
    NeuroShardError (one line) for its other failures."""
    from torchrec.distributed.planner.types import PlannerError, PlannerErrorType

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # TorchRec's deprecation and shape notes, not about this plan
            return planner.plan(module, [sharder])
    except PlannerError as e:
        memory = {PlannerErrorType.INSUFFICIENT_STORAGE, PlannerErrorType.STRICT_CONSTRAINTS,
                  PlannerErrorType.PARTITION}
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        total = sum(t.size_gb for t in tables)
        if e.error_type in memory:
            raise OutOfMemoryError(
                f"TorchRec found no plan within max_mem {problem.mem_text} per device ({problem.ndevices} devices, "
                f"tables {total:.4g} GB in all, largest {max(t.size_gb for t in tables):.4g} GB): "
                f"{e.error_type.value}: {first}", max_mem=min(problem.caps)) from None
        raise NeuroShardError(f"TorchRec planner failed ({e.error_type.value}): {first}") from None


def plan_from_sharding_plan(sharding_plan, tables: Sequence[ShardTable], names: Sequence[str], ndevices: int,
                            module_path: str = "") -> Plan:
    """Our `Plan` for a TorchRec `ShardingPlan` of the tables' `EmbeddingBagCollection` (`plan_from_layout` of
    its layout). Raises InvalidPlanError for anything outside the plan space."""
    module_plan = sharding_plan.plan.get(module_path)
    if module_plan is None:
        raise InvalidPlanError(f"TorchRec plan has no module {module_path!r} (has {sorted(sharding_plan.plan)})")
    return plan_from_layout(sharding_layout(module_plan), tables, names, ndevices)


def sharding_layout(module_plan) -> dict:
    """Per table of a module's plan: its sharding type, ranks and shards ([row offset, col offset], [rows, cols],
    rank). A data-parallel table has no shards (a replica on every rank)."""
    out = {}
    for name, ps in module_plan.items():
        shards = [] if ps.sharding_spec is None else [
            [list(s.shard_offsets), list(s.shard_sizes), s.placement.rank()] for s in ps.sharding_spec.shards]
        out[name] = {"sharding_type": ps.sharding_type, "ranks": None if ps.ranks is None else list(ps.ranks),
                     "shards": shards}
    return out


def plan_from_layout(layout: dict, tables: Sequence[ShardTable], names: Sequence[str], ndevices: int) -> Plan:
    """Our `Plan` for a TorchRec plan's per-table layout ({name: {"sharding_type", "ranks", "shards":
    [[[row offset, col offset], [rows, cols], rank], ...]}}, as `sharding_layout` writes it).

    Table-wise -> the whole table on its rank; column-wise -> each shard a
    piece on its rank, cut from the table by halvings (`types.plan_from_pieces`);
    row-wise over every rank in TorchRec's blocks, table-row-wise over one
    host's ranks, data-parallel on every rank -> a spread table
    (`types.plan.Spread`). Raises InvalidPlanError for anything else (another
    sharding type, row blocks that are not TorchRec's, a rank out of range,
    shards that are not halvings).
    """
    pieces, spread = [], []
    for t, (table, name) in enumerate(zip(tables, names)):
        entry = layout.get(name)
        if entry is None:
            raise InvalidPlanError(f"TorchRec plan has no table {name!r}")
        kind, shards = entry["sharding_type"], entry["shards"]
        rows_total = int(table.config.row)
        if kind in SPREAD_KINDS:
            ranks = tuple(int(r) for r in (entry["ranks"] or range(ndevices)))
            if kind != DATA_PARALLEL:
                got = [int(size[0]) for _, size, _ in shards]
                if got != row_blocks(rows_total, len(ranks)) or [int(r) for _, _, r in shards] != list(ranks):
                    raise InvalidPlanError(f"table {name!r}: {kind} blocks {got} on ranks {list(ranks)} are not "
                                           f"TorchRec's blocks of its {rows_total} rows")
            spread.append(Spread(t, kind, ranks))
            pieces.append([])
            continue
        if kind not in (TABLE_WISE, COLUMN_WISE):
            raise InvalidPlanError(f"table {name!r}: sharding type {kind!r} is outside the plan space "
                                   f"({', '.join((TABLE_WISE, COLUMN_WISE) + SPREAD_KINDS)})")
        mine = []
        for (row0, col0), (rows, cols), rank in shards:
            if row0 != 0 or rows != rows_total:
                raise InvalidPlanError(f"table {name!r}: shard of rows [{row0}, {row0 + rows}) is not whole rows "
                                       f"(the table has {rows_total})")
            mine.append(ColumnPiece(int(col0), int(cols), int(rank)))
        pieces.append(mine)
    plan = plan_from_pieces(tables, pieces, ndevices, tuple(spread))
    table_devices(plan, len(tables) + len(plan.column_steps))  # spread ranks in range, each table placed once
    return plan


# --------------------------------------------------------------------------- the sharder


@register("torchrec", requires_package="torchrec", settings=(TorchRecConfig,))
def torchrec_sharder(tables, problem: Problem, ctx: ShardingContext | None = None) -> Plan:
    """TorchRec's EmbeddingShardingPlanner on the task, mapped to our plan (see the module docstring)."""
    cfg = TorchRecConfig.from_options(ctx.options if ctx is not None else None)
    ndevices = problem.ndevices
    if not tables:
        return Plan((), ((),) * ndevices)
    sharding_plan = plan_with_torchrec(tables, problem, cfg)
    return plan_from_sharding_plan(sharding_plan, tables, table_names(tables), ndevices)


# importing torchrec takes seconds: the evaluation does it before timing the first plan
torchrec_sharder.prepare = require_torchrec


@register("torchrec_fitted", requires_package="torchrec", requires_option="torchrec_estimator",
          settings=(TorchRecConfig, FittedEstimatorOptions))
def torchrec_fitted(tables, problem: Problem, ctx: ShardingContext | None = None) -> Plan:
    """TorchRec's planner with its estimator's coefficients fitted to the cost data (`torchrec.estimators`):
    TorchRec's search on the fitted analytic costs."""
    options = ctx.options if ctx is not None else {}
    cfg = TorchRecConfig.from_options(options)
    model = load_option(options, problem.ndevices, "torchrec_fitted")
    if not tables:
        return Plan((), ((),) * problem.ndevices)
    from neuroshard.torchrec.estimators import fitted_estimator

    sharding_plan = plan_with_torchrec(tables, problem, cfg, lambda topo, cons: fitted_estimator(model, topo, cons))
    return plan_from_sharding_plan(sharding_plan, tables, table_names(tables), problem.ndevices)


torchrec_fitted.prepare = require_torchrec


@register("torchrec_neural", requires_package="torchrec", settings=(TorchRecConfig,), in_all=False)
def torchrec_neural(tables, problem: Problem, ctx: ShardingContext | None = None) -> Plan:
    """TorchRec's planner pricing shards with the neural cost models (`torchrec.estimators`): TorchRec's search
    on the neural costs, as far as its per-shard interface allows."""
    from neuroshard.planner.costs.cost_models import require_models
    from neuroshard.torchrec.estimators import neural_estimator

    models = require_models(ctx.models if ctx is not None else None, "torchrec_neural")
    cfg = TorchRecConfig.from_options(ctx.options if ctx is not None else None)
    if not tables:
        return Plan((), ((),) * problem.ndevices)
    names = table_names(tables)
    estimator = neural_estimator(models, tables, names, problem.batch_size)
    sharding_plan = plan_with_torchrec(tables, problem, cfg, lambda topo, cons: estimator)
    return plan_from_sharding_plan(sharding_plan, tables, names, problem.ndevices)


torchrec_neural.prepare = require_torchrec
