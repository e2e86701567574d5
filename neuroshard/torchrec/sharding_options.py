"""What TorchRec offers for each table of a model, as `NeuroShardPlanner` reads it: its sharding types, their
kernels, their storage, the fused parameters its plan must carry.

TorchRec's own `EmbeddingEnumerator` finds the tables (every module a given
sharder shards, at any path) and lists, per table, the sharding types the
sharder offers for the topology's device and its `ParameterConstraints` allow,
each with its shards' storage (`EmbeddingStorageEstimator`). Types are never
narrowed here: every type TorchRec would consider is kept (table-wise,
column-wise, table-column-wise, row-wise, table-row-wise, data-parallel). Only
the kernels are, where the user named none: per type one kernel, "fused" where
the sharder offers it (else its caching, then its UVM kernel, else its first),
"dense" for data-parallel; never "dense" off data-parallel, which TorchRec's
planner refuses (`INVALID_COMPUTE_KERNEL`). A table left with no option at all
is TorchRec's own error (the enumerator's), word for word.

Each table becomes a `PlannedTable`: its statistics as the cost models read
them (rows, the sum of its pooling factors, locality bins from `table_stats`
(`read_table_stats`), its dim, rounded up
to a multiple of 4 for the costs, its kind: pooled for an
`EmbeddingBagCollection`'s table, unpooled for an `EmbeddingCollection`'s,
as TorchRec's option says, `is_pooled`), its options by type, its weights'
bytes per value, the optimizer state TorchRec's storage count leaves out
(`OPTIMIZER_STATE`) or counts at the weights' dtype, its `min_partition`.
What a shard holds in training beyond TorchRec's count is `training_bytes`
and, on CPU ranks, `step_bytes` (measured by benchmarks/bench_train_memory.py).
The planner's checks of the user's `ranks` and `colocate` are here too. Imports
torchrec.
"""

from __future__ import annotations

import json
import logging
import math
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

from torchrec.distributed.planner.enumerators import GUARDED_COMPUTE_KERNELS, EmbeddingEnumerator
from torchrec.distributed.planner.shard_estimators import EmbeddingStorageEstimator, _get_optimizer_multipler
from torchrec.distributed.planner.types import ParameterConstraints, PlannerError, PlannerErrorType

from neuroshard.types.errors import ConfigError, InputError
from neuroshard.types.plan import DATA_PARALLEL, SPREAD_KINDS
from neuroshard.types.tables import DEFAULT_BINS, NUM_BINS, TableConfig, can_split

logger = logging.getLogger(__name__)

TABLE_WISE, COLUMN_WISE, TABLE_COLUMN_WISE = "table_wise", "column_wise", "table_column_wise"
PLACED = (TABLE_WISE, COLUMN_WISE, TABLE_COLUMN_WISE)  # the types whose shards the search places on devices
TYPES = PLACED + SPREAD_KINDS
KERNELS = ("fused", "fused_uvm_caching", "fused_uvm")  # preferred off data-parallel, in this order
DENSE = "dense"
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
# optimizers given through apply_optimizer_in_backward (class names) -> the fused kernel's optimizer TorchRec maps
# them to (`OPTIMIZER_STATE`)
IN_BACKWARD = {"SGD": "exact_sgd", "Adam": "adam", "RowWiseAdagrad": "exact_row_wise_adagrad",
               "Adagrad": "exact_adagrad"}
# How many times over a training step on a CPU rank holds the input ids and pooled outputs TorchRec's storage
# estimate counts once: the ids before and after their all-to-all, the outputs and their gradients on both sides
# of theirs, FBGEMM's sorted ids in the backward, and the freed buffers the allocator keeps within the step
# (benchmarks/bench_train_memory.py measures it; GPUs are not measured, so there TorchRec's count stands).
CPU_STEP_BUFFERS = 8
# the ParameterConstraints fields TorchRec's planner carries into each ParameterSharding (`to_sharding_plan`)
FUSED_FIELDS = ("cache_params", "enforce_hbm", "stochastic_rounding", "bounds_check_mode", "output_dtype",
                "key_value_params")


@dataclass
class PlannedTable:
    """One table of the model as the planner sees it: where it lives, what it is, what TorchRec offers for it."""

    path: str  # the module path of its collection ("" for the model itself)
    name: str
    table: TableConfig  # as the cost models read it (its dim a multiple of 4)
    options: dict  # sharding type -> TorchRec's ShardingOption of its kernel (storage estimated)
    dim: int  # the table's own dim
    state: tuple[float, float] = (0.0, 0.0)  # optimizer state TorchRec does not count: per weight, per row
    counted_state: float = 0.0  # state per weight TorchRec counts (at the weights' dtype): an in-backward optimizer
    in_backward_state: tuple[float, float] | None = None  # that optimizer's state in FBGEMM: per weight, per row
    min_dim: int | None = None  # ParameterConstraints.min_partition: the narrowest column shard
    weight_size: int = 4  # bytes per weight: its EmbeddingBagConfig.data_type's (2 for fp16 and bf16)

    @property
    def types(self) -> tuple[str, ...]:
        return tuple(t for t in TYPES if t in self.options)

    @property
    def placeable(self) -> bool:
        """The search may place it on devices (table-wise, or column pieces)."""
        return any(t in self.options for t in PLACED)

    @property
    def splittable(self) -> bool:
        """Column pieces allowed (column-wise or table-column-wise), its dim halvable into multiples of 4 no
        narrower than `min_dim`."""
        return (COLUMN_WISE in self.options or TABLE_COLUMN_WISE in self.options) and self.dim == self.table.dim \
            and can_split(self.dim) and self.dim // 2 >= (self.min_dim or 1)

    @property
    def spread_kinds(self) -> tuple[str, ...]:
        return tuple(k for k in SPREAD_KINDS if k in self.options)

    def placed_type(self, pieces: int) -> str:
        """The sharding type of the table in `pieces` column pieces: table-wise when whole and allowed, else
        column-wise, else table-column-wise."""
        order = (TABLE_WISE, COLUMN_WISE, TABLE_COLUMN_WISE) if pieces == 1 else (COLUMN_WISE, TABLE_COLUMN_WISE)
        return next(t for t in order if t in self.options)

    def kernel(self, sharding_type: str) -> str:
        return self.options[sharding_type].compute_kernel

    @property
    def weight_bytes(self) -> float:
        return float(self.weight_size * self.table.row * self.dim)

    def option(self, sharding_type: str):
        """TorchRec's option of that type, or (to estimate a type it does not offer) any of its options: a
        template, its shards those of a one-rank topology (`read_tables`); the estimates set its own."""
        return self.options.get(sharding_type) or next(iter(self.options.values()))

    def fused_fields(self) -> dict:
        """The ParameterConstraints fields its ParameterSharding carries (the same in every option)."""
        opt = next(iter(self.options.values()))
        return {f: getattr(opt, f, None) for f in FUSED_FIELDS}


def preferred_kernel(sharding_type: str, kernels) -> str | None:
    """The kernel of `sharding_type` among `kernels` (module doc); None when none may serve it."""
    kernels = list(kernels)
    if sharding_type == DATA_PARALLEL:
        return DENSE if DENSE in kernels else (kernels[0] if kernels else None)
    for k in KERNELS:
        if k in kernels:
            return k
    return next((k for k in kernels if k != DENSE), None)


def enumeration_constraints(module, sharders, constraints: dict, device: str) -> dict:
    """The user's constraints, each table's kernels narrowed to one per sharding type where the user named none
    (`preferred_kernel` over what its sharder offers for `device`), so that TorchRec enumerates and estimates one
    option per type; the sharding types as the user gave them."""
    guarded = {k.value for k in GUARDED_COMPUTE_KERNELS}
    kinds = {s.module_type: s for s in sharders}
    out = dict(constraints)
    for _, sub in module.named_modules():
        sharder = kinds.get(type(sub))
        if sharder is None:
            continue
        offered = sharder.sharding_types(device)
        for name in sharder.shardable_parameters(sub):
            cons = out.get(name) or ParameterConstraints()
            if cons.compute_kernels:
                continue
            types = [t for t in offered if t in (cons.sharding_types or TYPES)]
            picks = {preferred_kernel(t, [k for k in sharder.compute_kernels(t, device) if k not in guarded])
                     for t in types} - {None}
            if picks:
                out[name] = replace(cons, compute_kernels=sorted(picks))
    return out


class _NoEstimate:
    """An estimator that leaves the options as they are: `read_tables` estimates the shards it needs itself."""

    def estimate(self, sharding_options, sharder_data_map=None) -> None:
        pass


def one_rank(topology):
    """A one-rank copy of `topology` (its device type, the largest memory of each kind), for listing a model's
    options: which types and kernels TorchRec offers does not depend on the ranks, and TorchRec copies every
    option's shards, one per rank for most types, each time it lists them."""
    from torchrec.distributed.planner.types import Topology

    caps = {f"{k}_cap": max(int(getattr(d.storage, k)) for d in topology.devices) for k in ("hbm", "ddr", "ssd")}
    try:  # a copy, not a user's topology: without TorchRec's note that a topology is better made by its factory
        return Topology(world_size=1, compute_device=topology.compute_device, local_world_size=1,
                        created_by_factory=True, **caps)
    except TypeError:  # a TorchRec without that argument
        return Topology(world_size=1, compute_device=topology.compute_device, local_world_size=1, **caps)


def read_tables(module, sharders, topology, batch_size: int, constraints: dict, stats: dict):
    """The model's tables (`PlannedTable`, in TorchRec's enumeration order; their options listed by TorchRec's
    enumerator on a one-rank copy of the topology, `one_rank`), TorchRec's storage estimator for the topology
    and its sharder data (to estimate shards: `NeuroShardPlanner._estimate`), and the notes to log. PlannerError
    for what the planner does not plan (EmbeddingTower modules; a table whose only options are types it does
    not know, or the dense kernel off data-parallel); TorchRec's own RuntimeError for a table without any
    option."""
    enum_cons = enumeration_constraints(module, sharders, constraints, topology.compute_device)
    estimator = EmbeddingStorageEstimator(topology, enum_cons)
    enumerator = EmbeddingEnumerator(one_rank(topology), batch_size, enum_cons, estimator=[_NoEstimate()])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TorchRec's deprecation notes
        found = enumerator.enumerate(module, sharders)
    state_of = _optimizer_state(sharders)
    by_key: dict[tuple[str, str], list] = {}
    for opt in found:
        if opt.dependency is not None:
            raise PlannerError(f"NeuroShardPlanner does not plan EmbeddingTower modules ({opt.path}: its tables "
                               "stay on one host together, which the search does not model); plan them with "
                               "TorchRec's EmbeddingShardingPlanner", PlannerErrorType.OTHER)
        by_key.setdefault((opt.path, opt.name), []).append(opt)
    tables, unknown_pooling, unknown_bins = [], [], []
    for (path, name), opts in by_key.items():
        options = {}
        for t in TYPES:
            mine = {o.compute_kernel: o for o in opts if o.sharding_type == t}
            pick = preferred_kernel(t, mine)
            if pick is not None:
                options[t] = mine[pick]
        if not options:
            dense = all(o.compute_kernel == DENSE for o in opts if o.sharding_type in TYPES)
            got = sorted({f"{o.sharding_type}/{o.compute_kernel}" for o in opts})
            raise PlannerError(f"table {name} ({path or 'the model'}): NeuroShardPlanner has no option to plan "
                               f"among {got}" + (": the dense kernel serves data-parallel tables only" if dense
                                                 else ""), PlannerErrorType.INVALID_COMPUTE_KERNEL if dense
                               else PlannerErrorType.STRICT_CONSTRAINTS)
        first = next(iter(options.values()))
        rows, dim = (int(x) for x in first.tensor.shape)
        cons = constraints.get(name)
        if cons is not None and cons.pooling_factors:
            pooling = float(sum(cons.pooling_factors))
        else:
            pooling = 1.0
            unknown_pooling.append(name)
        bins = stats.get(name)
        if bins is None:
            bins = DEFAULT_BINS
            unknown_bins.append(name)
        # the state of fused_params' optimizer, unless TorchRec counts one (apply_optimizer_in_backward)
        in_backward = getattr(first.tensor, "_optimizer_classes", [None])[0]
        state = (0.0, 0.0) if in_backward is not None else state_of.get(first.module[1].__class__, (0.0, 0.0))
        counted_state = 0.0 if in_backward is None else _get_optimizer_multipler(in_backward, first.tensor.shape)
        fbgemm_state = None if in_backward is None else OPTIMIZER_STATE.get(IN_BACKWARD.get(in_backward.__name__))
        config = TableConfig(rows, pooling, tuple(bins), 4 * math.ceil(dim / 4), pooled=bool(first.is_pooled))
        tables.append(PlannedTable(path, name, config, options, dim, state=state,
                                   min_dim=None if cons is None else cons.min_partition,
                                   weight_size=first.tensor.element_size(), counted_state=float(counted_state),
                                   in_backward_state=fbgemm_state))
    notes = []
    if unknown_pooling:
        notes.append(f"no ParameterConstraints.pooling_factors for {', '.join(unknown_pooling)}: pooling factor "
                     "1.0 assumed")
    if unknown_bins:
        notes.append(f"no locality stats (table_stats) for {', '.join(unknown_bins)}: the default bins assumed")
    unpooled = [t.name for t in tables if not t.table.pooled]
    if unpooled:
        notes.append(unpooled_note(unpooled))
    return tables, estimator, enumerator._sharder_data_map, notes


def unpooled_note(names) -> str:
    """The one line that says how the unpooled (sequence) tables `names` are costed."""
    return (f"{', '.join(names)}: unpooled (sequence) tables: their exchange is costed at dim x pooling factor per "
            "sample, their compute by the pooled compute model at a measured unpooled/pooled kernel-time ratio "
            "times their pooling factor (planner.costs.features.unpooled_ratio; no compute data of unpooled "
            "kernels, about 35% off on held-out shards)")


def plan_shards(sharding_plan, path: str, name: str, world: int):
    """(sharding type, compute kernel, [(rank, size, offset)]) of table `name` of the collection at `path` in a
    TorchRec `ShardingPlan` (a data-parallel table: whole on every rank); None where the plan has no such table."""
    ps = (sharding_plan.plan.get(path) or {}).get(name)
    if ps is None:
        return None
    if ps.sharding_type == DATA_PARALLEL or ps.sharding_spec is None:
        return ps.sharding_type, ps.compute_kernel, [(r, None, None) for r in (ps.ranks or range(world))]
    return ps.sharding_type, ps.compute_kernel, [(s.placement.rank(), list(s.shard_sizes), list(s.shard_offsets))
                                                 for s in ps.sharding_spec.shards]


def training_bytes(opt, shard, t: PlannedTable) -> float:
    """What one shard of `t` holds in training beyond TorchRec's storage estimate (on the kernel of `opt`):
    the state of the optimizer the sharder's fused_params name (fp32 values; on the dense kernel of a
    data-parallel replica, that of a dense optimizer of the same kind); on the fused kernels, an in-backward
    optimizer's state as FBGEMM keeps it (fp32, a row-wise optimizer one value per row of each shard) less
    TorchRec's count of it (at the weights' dtype, a row-wise one per row of the whole table's width); on the
    dense kernel, the replica's gradient and the buffer DDP all-reduces it in, each the size of the weights."""
    rows, cols = shard.size
    per_weight, per_row = t.state
    out = 4.0 * rows * (per_weight * cols + per_row)
    if opt.compute_kernel == DENSE:
        out += 2.0 * t.weight_size * rows * cols
    elif t.in_backward_state is not None:
        per_weight, per_row = t.in_backward_state
        out += 4.0 * rows * (per_weight * cols + per_row) - t.counted_state * t.weight_size * rows * cols
    return out


def step_bytes(counted: float, shard, t: PlannedTable) -> float:
    """The buffers of a training step on a CPU rank that TorchRec's count of one shard (`counted`, bytes on
    DDR) leaves out: it counts the shard's input ids and pooled outputs once (beside its weights and an
    in-backward optimizer's state); a step holds them `CPU_STEP_BUFFERS` times over."""
    rows, cols = shard.size
    weights = t.weight_size * rows * cols
    io = counted - weights - math.ceil(weights * t.counted_state)
    return (CPU_STEP_BUFFERS - 1) * max(io, 0.0)


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


def read_table_stats(stats) -> dict[str, tuple[float, ...]]:
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


def check_ranks(ranks, world: int) -> dict[str, tuple[int, ...]]:
    """{table name: ranks}, each a non-empty list of ranks of the topology; ConfigError naming the table."""
    out = {}
    for name, rs in (ranks or {}).items():
        rs = list(rs) if isinstance(rs, (list, tuple, set, frozenset)) else None
        if not rs or not all(isinstance(r, int) and not isinstance(r, bool) and 0 <= r < world for r in rs):
            raise ConfigError(f"ranks[{name!r}]", f"expected a non-empty list of ranks in 0..{world - 1}, got "
                                                  f"{ranks[name]!r}")
        out[str(name)] = tuple(sorted(set(rs)))
    return out


def check_groups(colocate) -> list[tuple[str, ...]]:
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
