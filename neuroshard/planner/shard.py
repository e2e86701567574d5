"""Shard a set of tables with any registered algorithm: the planner's library call.

    import neuroshard as ns
    models = ns.CostModels.load("results/quick")  # everything the run plans with
    tables = ns.tables_from_task(ns.read_dataset_configs("results/quick/dataset"), task)
    result = ns.shard(tables, ns.Problem(ndevices=4, max_mem=1.0), models=models, alg="neuroshard", beam_k=3)
    result.plan, result.cost_ms, result.breakdown, result.view, result.search_ms, result.warnings

Every algorithm goes through this one function; the evaluation scripts call
it per task. The returned plan has been validated (each table placed once,
legal splits, memory per device) and, when cost models are given, simulated.
"""

from __future__ import annotations

import functools
import inspect
import time
import warnings
from dataclasses import dataclass, field
from typing import Sequence

from neuroshard.planner.costs import extrapolation
from neuroshard.planner.registry import ShardingContext, check_options, get_sharder
from neuroshard.planner.simulator import simulate, validate_plan
from neuroshard.problem import Problem
from neuroshard.types.costs import CostBreakdown
from neuroshard.types.errors import ConfigError, InvalidPlanError, OutOfMemoryError
from neuroshard.types.plan import Plan
from neuroshard.types.tables import ShardTable, TableConfig, Task


@dataclass
class ShardResult:
    """A validated plan and, with cost models, its simulated cost.

    `plan`: column steps, then the post-split tables on each device;
    `cost_ms` and `breakdown`: the simulator's plan cost and per-device parts
    (None without models); `view`: one entry per input table with its shards'
    dims and devices; `search_ms`: wall time of the sharder; `warnings`: per
    table and device, where the estimate leaves the models' training data
    (`planner.costs.extrapolation`).
    """

    alg: str
    plan: Plan
    cost_ms: float | None
    breakdown: CostBreakdown | None
    view: list[dict]
    search_ms: float
    tables: list[ShardTable]
    warnings: list[str] = field(default_factory=list)


def tables_from_task(configs: Sequence[TableConfig], task: Task) -> list[ShardTable]:
    """A task's tables (dataset table ids with dims) as the planner's input."""
    return task.tables(configs)


def as_shard_tables(tables: Sequence[ShardTable | TableConfig]) -> list[ShardTable]:
    """ShardTables from ShardTables or from TableConfigs that carry a dim (table i uses id i)."""
    out = []
    for i, t in enumerate(tables):
        if isinstance(t, ShardTable):
            out.append(t)
        elif isinstance(t, TableConfig):
            if t.dim is None:
                raise InvalidPlanError(f"table {i} has no dim")
            out.append(ShardTable(i, i, t))
        else:
            raise TypeError(f"table {i}: expected a ShardTable or TableConfig, got {type(t).__name__}")
    return out


def _signature_before_problem(tables, ndevices: int, max_mem_gb: float, models=None, alg: str = "neuroshard",
                              seed: int = 0, runtime: str | None = None, simulated: bool = True, **options):
    """`shard`'s signature before `Problem` (77a2aaf): the devices, their memory and the seed loose."""


def _accepts_loose_devices(fn):
    """`shard` as it is, and as it was called before `Problem`: `shard(tables, ndevices, max_mem_gb, ...,
    seed=...)` (positional or by keyword) is that problem's call, with a DeprecationWarning naming the new one."""

    @functools.wraps(fn)
    def call(tables, *args, **kwargs):
        first = args[0] if args else None
        loose = isinstance(first, (int, float)) and not isinstance(first, bool)
        if not (loose or {"ndevices", "max_mem_gb"} & kwargs.keys()):
            return fn(tables, *args, **kwargs)
        old = inspect.signature(_signature_before_problem).bind(tables, *args, **kwargs).arguments
        old = {**old.pop("options", {}), **old}
        problem = Problem(old.pop("ndevices"), old.pop("max_mem_gb"), old.pop("seed", 0))
        given = f"ndevices={problem.ndevices}, max_mem{{}}={problem.max_mem}, seed={problem.seed}"
        warnings.warn(f"shard(tables, {given.format('_gb')}) is deprecated; use shard(tables, "
                      f"problem=ns.Problem({given.format('')}))", DeprecationWarning, stacklevel=2)
        return fn(problem=problem, **old)

    return call


@_accepts_loose_devices
def shard(tables: Sequence[ShardTable | TableConfig], problem: Problem, models=None, alg: str = "neuroshard",
          runtime: str | None = None, simulated: bool = True, **options) -> ShardResult:
    """Plan `tables` for `problem` (its devices, their memory, the seed of randomised algorithms, the
    constraints on its tables, the batch its costs are for) with the algorithm `alg`.

    `models`: a `CostModels` (needed by `neuroshard`, and for the simulated
    cost); `runtime`: "paper" or "torchrec"
    (the execution the plan is searched and costed for; default: the models'
    own, see `CostModels.for_runtime`); `simulated`: False to validate the
    plan only, without its simulated cost (for a caller that costs it
    otherwise); `options`: the algorithm's
    settings (e.g. `beam_k=3`; an option the algorithm does not take, or a
    bad value, is a ConfigError listing the valid ones). Raises
    OutOfMemoryError when no plan fits (or the algorithm returned one that
    does not), InvalidPlanError when it returned a plan that breaks the rules.
    """
    from neuroshard.formats.plan_file import plan_view

    tables = as_shard_tables(tables)
    if runtime is not None:
        if models is None and runtime != "paper":
            raise ConfigError("runtime", f"{runtime!r} needs cost models with a runtime model")
        models = models if models is None else models.for_runtime(runtime)
    sharder = get_sharder(alg)
    check_options(alg, options)
    if not isinstance(problem, Problem):
        raise TypeError(f"problem: expected a neuroshard.Problem, got {type(problem).__name__}")
    problem.table_constraints.check(len(tables), problem.ndevices)  # before any search: names the table
    if models is not None:  # comm models for any world size priced at this problem's ranks
        models = models.for_world(problem.ndevices)
    if models is not None and problem.batch_size is not None:
        models = models.at_batch(problem.batch_size)
    ctx = ShardingContext(models=models, options=dict(options))
    t0 = time.perf_counter()
    plan = sharder(list(tables), problem, ctx)
    search_ms = 1e3 * (time.perf_counter() - t0)
    try:
        if models is not None and simulated:
            breakdown = simulate(tables, plan, models, problem)  # validates the plan first
        else:
            validate_plan(tables, plan, problem)
            breakdown = None
    except OutOfMemoryError as e:
        raise OutOfMemoryError(f"{alg} returned a plan that does not fit: {e}", size=e.size, max_mem=e.max_mem,
                               used=e.used) from None
    except InvalidPlanError as e:
        raise InvalidPlanError(f"{alg} returned an invalid plan: {e}") from None
    notes = extrapolation.warnings(tables, plan, breakdown, models) if breakdown is not None else []
    return ShardResult(alg=alg, plan=plan, cost_ms=None if breakdown is None else breakdown.cost,
                       breakdown=breakdown, view=plan_view(tables, plan), search_ms=search_ms, tables=tables,
                       warnings=notes)
