"""Any plan of the suite as a TorchRec `ShardingPlan`, for `DistributedModelParallel(plan=...)`.

The plan is for an `EmbeddingBagCollection` with one table per task table,
named as the user named them (dataset tables: `t<id>`, see
`torchrec.sharder.table_names`); the unpooled (sequence) tables
(`TableConfig.pooled` False) are an `EmbeddingCollection`'s, their module
plan made with TorchRec's `EmbeddingCollectionSharder` (which offers no
table-row-wise sharding). Built with TorchRec's own constructors and the fused kernel:

* a table on one device -> `table_wise(rank=r)`;
* a column-split table -> `column_wise(ranks=[...])`: equal shards of its
  narrowest piece's width, in column order; a wider piece (our splits may be
  uneven: d/2 + d/4 + d/4) becomes that many adjacent shards on its device;
* a row-wise table -> `row_wise()` over every rank; a table-row-wise one ->
  `table_row_wise(host_index)` over its host's ranks (its ranks must be one
  host of `local_size`); a data-parallel one -> `data_parallel()` with the
  dense kernel (TorchRec replicates it as an ordinary parameter).

`write_torchrec_plan` (formats) saves it with `torch.save` (load it with
`torch.load(path, weights_only=False)`) beside a readable JSON per table
(sharding type, ranks, column offsets and sizes). Needs torchrec.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Sequence

from neuroshard.checks import check_choice, check_int
from neuroshard.formats.plan_file import plan_view
from neuroshard.settings import Settings, common, setting
from neuroshard.torchrec.sharder import embedding_bag_collection, require_torchrec
from neuroshard.types.errors import ConfigError, InputError, InvalidPlanError
from neuroshard.types.plan import DATA_PARALLEL, ROW_WISE, TABLE_ROW_WISE, Plan, plan_pieces
from neuroshard.types.records import PlanRecord
from neuroshard.types.tables import ShardTable

DEVICE_TYPES = ("cuda", "cpu")
TABLE_WISE, COLUMN_WISE = "table_wise", "column_wise"


def torchrec_sharding_plan(tables: Sequence[ShardTable], plan: Plan, names: Sequence[str],
                           device_type: str = "cuda", module_path: str = "", local_size: int | None = None,
                           sequence_path: str | None = None):
    """The TorchRec `ShardingPlan` of `plan` (its splits and placements checked first; memory is not).

    `names`: one per table, the collections' table names;
    `device_type`: "cuda" (placements `rank:r/cuda:<r % local_size>`) or "cpu";
    `module_path`: where the EmbeddingBagCollection sits in the model handed
    to DistributedModelParallel ("" when it is the model itself);
    `sequence_path`: where the EmbeddingCollection of the unpooled tables sits
    (default: `module_path` when every table is unpooled; a plan of both kinds
    needs it);
    `local_size`: ranks per host (default: all ranks on one host).
    """
    require_torchrec()
    from torchrec.distributed.embedding import EmbeddingCollectionSharder
    from torchrec.distributed.embedding_types import EmbeddingComputeKernel
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.sharding_plan import construct_module_sharding_plan
    from torchrec.distributed.types import ShardingPlan

    from neuroshard.torchrec.sharder import embedding_collection

    if len(names) != len(tables) or len(set(names)) != len(names):
        raise InvalidPlanError(f"need {len(tables)} distinct table names, got {list(names)}")
    if device_type not in DEVICE_TYPES:
        raise InvalidPlanError(f"device type must be one of {', '.join(DEVICE_TYPES)}, got {device_type!r}")
    n = plan.ndevices
    if local_size is not None and (local_size < 1 or n % local_size):
        raise ConfigError("--local_world_size", f"{local_size} ranks per host do not divide the plan's {n} ranks")
    plan_view(tables, plan)  # InvalidPlanError on illegal splits, or tables placed twice or never
    sequence = [t for t, x in enumerate(tables) if not x.config.pooled]
    pooled = [t for t in range(len(tables)) if t not in sequence]
    if sequence_path is None and sequence and pooled:
        raise ConfigError("--sequence_module_path", f"the plan has pooled and unpooled (sequence) tables "
                                                    f"({names[sequence[0]]}, ...): name where the "
                                                    "EmbeddingCollection of the unpooled ones sits")
    sequence_path = module_path if sequence_path is None else sequence_path
    if sequence and pooled and sequence_path == module_path:
        raise ConfigError("--sequence_module_path", f"{sequence_path!r} is the EmbeddingBagCollection's path too: "
                                                    "the two collections sit at two paths")
    fused = EmbeddingComputeKernel.FUSED.value
    local = local_size or n
    per_table, kinds = {}, {}
    for t, (name, pieces) in enumerate(zip(names, plan_pieces(tables, plan))):
        per_table[name], kinds[name] = table_sharding(pieces, plan.spread_of(t), local, fused, f"table {t} ({name})")
        if t in sequence and kinds[name] == TABLE_ROW_WISE:
            raise InvalidPlanError(f"table {t} ({name}) is unpooled and table_row_wise: TorchRec's "
                                   "EmbeddingCollectionSharder has no table-row-wise sharding")
    out = {}
    for path, at, build, sharder in ((module_path, pooled, embedding_bag_collection, EmbeddingBagCollectionSharder),
                                     (sequence_path, sequence, embedding_collection, EmbeddingCollectionSharder)):
        if not at:
            continue
        mine = [names[t] for t in at]
        out[path] = construct_module_sharding_plan(
            build([tables[t] for t in at], mine), {name: per_table[name] for name in mine}, sharder=sharder(),
            local_size=local, world_size=n, device_type=device_type)
        for name in mine:
            if kinds[name] != DATA_PARALLEL:  # TorchRec's kernel for it: dense
                out[path][name].compute_kernel = fused
    return ShardingPlan(out)


def table_sharding(pieces, spread, local: int, kernel: str, what: str, whole: str = TABLE_WISE,
                   split: str = COLUMN_WISE):
    """(TorchRec's ParameterSharding generator, the sharding type) of one table of a plan: its column `pieces`
    (`types.plan.plan_pieces`) or its `spread`, on hosts of `local` ranks, on `kernel`. A table whole is
    `whole` (table-wise; column-wise or table-column-wise as one shard), one split `split` (column-wise or
    table-column-wise: its shards as column-wise's, the caller names the type). The generators of
    table-row-wise and data-parallel tables take no kernel: the caller sets it on the ParameterSharding."""
    from torchrec.distributed.sharding_plan import column_wise, data_parallel, row_wise, table_row_wise, table_wise

    if spread is not None:
        if spread.kind == ROW_WISE:
            return row_wise(compute_kernel=kernel), ROW_WISE
        if spread.kind == DATA_PARALLEL:
            return data_parallel(), DATA_PARALLEL
        if len(spread.ranks) != local or spread.ranks[0] % local:
            raise InvalidPlanError(f"{what} is table_row_wise over ranks {list(spread.ranks)}, not one host of "
                                   f"{local} ranks")
        return table_row_wise(host_index=spread.ranks[0] // local), TABLE_ROW_WISE
    if len(pieces) == 1 and whole == TABLE_WISE:
        return table_wise(rank=pieces[0].device, compute_kernel=kernel), TABLE_WISE
    width = min(p.dim for p in pieces)
    ranks = [p.device for p in pieces for _ in range(p.dim // width)]
    return column_wise(ranks=ranks, compute_kernel=kernel), whole if len(pieces) == 1 else split


def torchrec_plan_json(sharding_plan, world_size: int) -> dict:
    """A readable view of a ShardingPlan: per module and table, the sharding type, kernel, ranks and shards."""
    modules = {}
    for path, module_plan in sharding_plan.plan.items():
        tables = []
        for name, ps in module_plan.items():
            shards = [{"rank": s.placement.rank(), "placement": str(s.placement),
                       "row_offset": s.shard_offsets[0], "col_offset": s.shard_offsets[1],
                       "rows": s.shard_sizes[0], "cols": s.shard_sizes[1]}
                      for s in (ps.sharding_spec.shards if ps.sharding_spec is not None else [])]  # DP: none
            tables.append({"table": name, "sharding_type": ps.sharding_type, "compute_kernel": ps.compute_kernel,
                           "ranks": list(ps.ranks or []), "shards": shards})
        modules[path] = tables
    return {"world_size": world_size, "modules": modules}


def export_torchrec_plan(path, tables: Sequence[ShardTable], plan: Plan, names: Sequence[str],
                         device_type: str = "cuda", module_path: str = "", local_size: int | None = None,
                         sequence_path: str | None = None) -> list:
    """Write `plan` as a TorchRec plan file `path` (torch.save) and its JSON view beside it; returns both paths."""
    from neuroshard.formats.sharding_file import write_torchrec_plan

    sharding_plan = torchrec_sharding_plan(tables, plan, names, device_type, module_path, local_size, sequence_path)
    return write_torchrec_plan(path, sharding_plan, torchrec_plan_json(sharding_plan, plan.ndevices))


def check_module_path(name: str, path: str) -> str:
    """A module path DistributedModelParallel can resolve: Python identifiers joined by dots
    ('sparse.ebc'), or '' for the model itself; ConfigError otherwise."""
    if path and not all(part.isidentifier() for part in path.split(".")):
        raise ConfigError(name, f"{path!r} is not a module path: dot-separated Python identifiers "
                                "(e.g. 'sparse.ebc'), or '' for the EmbeddingBagCollection itself")
    return path


@dataclass(frozen=True)
class ExportConfig(Settings):
    """How a plan becomes a TorchRec plan (the flags of tools/shard_tables.py and tools/export_torchrec_plan.py)."""

    TITLE: ClassVar[str] = "TorchRec plan export"

    torchrec_device: str = setting("cuda", "device type of the shard placements (cpu for gloo CPU ranks)",
                                   choices=DEVICE_TYPES)
    module_path: str = setting("", "path of the EmbeddingBagCollection in the model given to DistributedModelParallel, "
                                   "e.g. 'sparse.ebc' (default: '', the EmbeddingBagCollection itself)",
                               show_default=False)
    sequence_module_path: str | None = setting(None, "path of the EmbeddingCollection of the unpooled (kind "
                                                     "sequence) tables, e.g. 'sparse.ec' (default: --module_path "
                                                     "when every table is unpooled)", show_default=False)
    local_world_size: int | None = common("local_world_size", show_default=False)

    def __post_init__(self):
        check_choice("--torchrec_device", self.torchrec_device, DEVICE_TYPES)
        check_module_path("--module_path", self.module_path)
        if self.sequence_module_path is not None:
            check_module_path("--sequence_module_path", self.sequence_module_path)
        if self.local_world_size is not None:
            check_int("--local_world_size", self.local_world_size, 1)

    def export(self, path, tables: Sequence[ShardTable], plan: Plan, names: Sequence[str]) -> list:
        """`export_torchrec_plan` with these settings."""
        return export_torchrec_plan(path, tables, plan, names, self.torchrec_device, self.module_path,
                                    self.local_world_size, self.sequence_module_path)


def plan_tables(data_dir, task_path, tables_path, task: int) -> tuple[list[ShardTable], list[str]]:
    """The tables of a plan and their names: task `task` of a task file over a dataset (`t<id>` names),
    or the user's table list (`tables_path`, named as there)."""
    from neuroshard.formats.dataset import read_dataset_configs
    from neuroshard.formats.task_file import read_tasks
    from neuroshard.formats.user_tables import read_user_tables
    from neuroshard.planner.user_plan import user_shard_tables
    from neuroshard.torchrec.sharder import table_names

    if tables_path:
        if data_dir or task_path:
            raise ConfigError("--tables", "give either --tables or --data_dir with --task_path, not both")
        user = read_user_tables(tables_path, warn=False)
        return user_shard_tables(user.configs), user.names
    if not (data_dir and task_path):
        raise ConfigError("--data_dir", "name the plan's tables: --data_dir and --task_path, or --tables")
    configs = read_dataset_configs(data_dir)
    tasks = read_tasks(task_path, num_tables=len(configs))
    if not 0 <= task < len(tasks):
        raise ConfigError("--task", f"{task} is not a task of {task_path} (0..{len(tasks) - 1})")
    tables = tasks[task].tables(configs)
    return tables, table_names(tables)


def find_record(records: Sequence[PlanRecord], path, task: int, alg: str, tables: Sequence[ShardTable],
                what: str = "the tables given", names: Sequence[str] | None = None) -> PlanRecord:
    """The plan record of `task` and `alg` in a plans file, for `tables` (`what`: the task or table list
    they come from, in words; `names`: their names, checked against a view that names them); InputError
    if absent, without a plan, or made for other tables (`formats.plan_file.check_plan_tables`)."""
    from neuroshard.formats.plan_file import check_plan_tables

    found = [r for r in records if r.task == task and r.alg == alg]
    if not found:
        have = sorted({r.alg for r in records if r.task == task})
        raise InputError(path, f"no plan of {alg!r} for task {task} (algorithms there: {', '.join(have) or 'none'})")
    if found[0].plan is None:
        raise InputError(path, f"task {task} [{alg}] has no plan ({found[0].status}: {found[0].message})")
    check_plan_tables(found[0], tables, path, what)
    view = found[0].view
    if names is not None and isinstance(view, list) and len(view) == len(names):
        for i, (v, name) in enumerate(zip(view, names)):
            if isinstance(v, dict) and "name" in v and v["name"] != name:
                raise InputError(path, f"task {task} [{alg}]: not a plan of {what}: table {i} is {v['name']!r} "
                                       f"in the plan, {name!r} here (plans made for another table list?)")
    return found[0]
