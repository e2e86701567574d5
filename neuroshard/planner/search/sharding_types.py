"""NeuroShard's sharders, over every sharding type: which tables go row-wise, table-row-wise or data-parallel, then
the beam + grid search (`search.beam`) over the others around them.

`neuroshard` (and `neuroshard_fitted`, the same search on the fitted
estimator) are registered here.

TorchRec's runtime model (`planner.costs.runtime_model`) prices row-wise and
data-parallel tables once it was fitted on plans that had them
(`TorchRecRuntimeModel.types`), and table-row-wise ones on hosts of the
size its samples had (`local_world_size`); on the paper's runtime the simulator prices
them with the collective model (`CostModels.collectives`: their row blocks
and local-batch replicas in each device's kernel, their collectives in the
exchanges). The choice of types is greedy, on top of NeuroShard's search:

1. a table that fits no device even cut into its narrowest column shards is
   row-wise (when the model prices row-wise; else the task does not fit);
2. NeuroShard's search places the others around it;
3. each round tries every candidate table as each kind the model prices,
   patched into the best plan so far (its pieces taken off their devices),
   and, per kind, the first 2, 4, 8, ... tables together, by their single
   trials' cost and by lookups (a kind's tables share one collective, or
   under TorchRec's runtime one group, whose fixed latency one table alone
   may not repay: `_bundles`);
   it keeps the cheapest trial if it lowers the estimate; at most
   `SearchConfig.spread_rounds` rounds;
4. with the chosen tables fixed, NeuroShard's search places the rest again
   (their memory and, under the runtime model, their cost parts known:
   `SearchSpace.spread_parts`; on the paper's runtime the rest is placed as
   if they were not there and the whole plan is simulated); the cheaper of
   the patched and the re-searched plan is kept.

Candidates: tables the constraints leave free (not kept whole, not limited to
some ranks, not co-located; data-parallel only for small tables,
`simulator.replicable`), at most `CANDIDATES` of them (the largest and the
most looked up), so that a round is a bounded number of plan estimates.
Row-wise and data-parallel tables use every rank, as TorchRec's training does.
Table-row-wise tables use one host's ranks (`Problem.local_world_size`; on one
host it is row-wise, and not searched); it is searched on the paper's runtime
where the collective model has fits over the hosts' groups. A candidate is
tried on at most two hosts, so that a round stays bounded however many hosts
there are: the host its pieces are on and the host whose slowest device is
fastest in the plan so far (`_trial_hosts`). Tables of one kind on one group of
ranks share its collective, so bundles are formed per kind and group.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

from neuroshard.planner.costs.analytic import FittedEstimatorOptions, load_option
from neuroshard.planner.costs.cost_models import CostModels, require_models
from neuroshard.planner.costs.scorer import get_scorer, single_threaded_blas
from neuroshard.planner.registry import ShardingContext, register
from neuroshard.planner.search.beam import SearchConfig, beam_search, make_space, search
from neuroshard.planner.search.spread_trials import SpreadTrials, by_table, patched
from neuroshard.planner.simulator import device_caps, replicable, simulate, spread_room
from neuroshard.problem import Problem
from neuroshard.types.constraints import TableConstraints
from neuroshard.types.errors import OutOfMemoryError
from neuroshard.types.plan import (
    DATA_PARALLEL,
    KIND_COLLECTIVES,
    ROW_WISE,
    TABLE_ROW_WISE,
    Plan,
    Spread,
    merge_colocated_halves,
    plan_from_pieces,
    plan_pieces,
)
from neuroshard.types.tables import ShardTable, can_split

CANDIDATES = 32  # per ranking (size, lookups): a round tries at most 2 x this many tables


def spread_kinds(models, problem: Problem | None = None) -> tuple[str, ...]:
    """The kinds the search may choose: row-wise and data-parallel over every rank, and table-row-wise over the
    problem's hosts (`Problem.local_world_size`, more than one host of two or more ranks). Under TorchRec's
    runtime those the runtime model was fitted on (table-row-wise on hosts of the size it was fitted on); on
    the paper's, those whose collectives the collective model prices (none without one)."""
    host = problem.local_world_size if problem is not None else None
    hosts = host is not None and host > 1
    runtime = getattr(models, "runtime", None)
    if runtime is not None:
        kinds = tuple(k for k in (ROW_WISE, DATA_PARALLEL) if k in runtime.types)
        return kinds + ((TABLE_ROW_WISE,) if hosts and runtime.local_world_size == host else ())
    collectives = getattr(models, "collectives", None)
    if collectives is None:
        return ()
    kinds = tuple(k for k in (ROW_WISE, DATA_PARALLEL) if all(collectives.has(op) for op in KIND_COLLECTIVES[k]))
    if hosts and all(collectives.has(op, host) for op in KIND_COLLECTIVES[TABLE_ROW_WISE]):
        kinds += (TABLE_ROW_WISE,)
    return kinds


def narrowest_elements(table: ShardTable, cons: TableConstraints | None = None, t: int | None = None) -> int:
    """The fp32 elements of the table's narrowest column shard (its dim halved while it can be; as table `t`
    of `cons`, while those allow: `TableConstraints.may_halve`)."""
    d = table.dim
    while can_split(d) if cons is None else cons.may_halve(t, d):
        d //= 2
    return int(table.config.row) * d


def free_tables(tables: Sequence[ShardTable], cons: TableConstraints, ndevices: int, kind: str) -> list[int]:
    """The tables the constraints let the search make `kind` over every rank (`TableConstraints.may_spread`)."""
    return [t for t in range(len(tables)) if cons.may_spread(t, kind, ndevices)]


def lookup_weight(table: ShardTable) -> float:
    """How much a table is looked up, by the elements its lookups read: pooling factor x dim."""
    return table.config.pooling_factor * table.dim


def candidates(tables: Sequence[ShardTable], free: Sequence[int]) -> list[int]:
    """At most 2 x `CANDIDATES` free tables: the largest, then the most looked up (lookups x dim)."""
    by_size = sorted(free, key=lambda t: (-tables[t].size_gb, t))[:CANDIDATES]
    by_lookups = sorted(free, key=lambda t: (-lookup_weight(tables[t]), t))[:CANDIDATES]
    return sorted(set(by_size) | set(by_lookups))


def sub_problem(tables: Sequence[ShardTable], spread: Sequence[Spread],
                problem: Problem) -> tuple[list[int], list[ShardTable], Problem]:
    """The tables left to place (their task indices and themselves, renumbered from 0) and their problem: each
    device's memory less the spread tables', the constraints of the others renumbered."""
    gone = {s.table for s in spread}
    keep = [t for t in range(len(tables)) if t not in gone]
    new = {t: k for k, t in enumerate(keep)}
    sub = [ShardTable(new[t], tables[t].table_id, tables[t].config) for t in keep]
    room = spread_room(tables, spread, problem)
    cons = problem.table_constraints
    if not cons.empty:
        cons = TableConstraints(whole=tuple(new[t] for t in cons.whole if t in new),
                                devices=tuple((new[t], ds) for t, ds in cons.devices if t in new),
                                colocate=tuple(tuple(new[t] for t in g) for g in cons.colocate),
                                kinds=tuple((new[t], ks) for t, ks in cons.kinds if t in new),
                                min_dim=tuple((new[t], d) for t, d in cons.min_dim if t in new))
        room = replace(room, constraints=cons)
    return keep, sub, room


def lift(tables: Sequence[ShardTable], keep: Sequence[int], sub: Sequence[ShardTable], plan: Plan,
         spread: Sequence[Spread]) -> Plan:
    """The plan of the placed tables `sub` (task tables `keep`) as a plan of every task table, with `spread`."""
    pieces = [[] for _ in tables]
    for k, p in zip(keep, plan_pieces(sub, plan)):
        pieces[k] = p
    return plan_from_pieces(tables, pieces, plan.ndevices, by_table(spread))


def place_around(tables: Sequence[ShardTable], spread: Sequence[Spread], problem: Problem, models,
                 config: SearchConfig) -> tuple[Plan, float]:
    """NeuroShard's search over the tables not in `spread`, with the spread tables' memory and parts fixed;
    (plan over every task table, estimated ms). OutOfMemoryError when the rest does not fit."""
    from neuroshard.planner.costs.runtime_model import spread_parts

    keep, sub, room = sub_problem(tables, spread, problem)
    if not sub:  # every table spread: nothing left to place
        plan = Plan((), ((),) * problem.ndevices, by_table(spread))
        return plan, simulate(tables, plan, models, problem).cost
    if spread and models.runtime is None:
        # the paper's runtime: a row-wise or data-parallel table's share is about the same on every rank, so the
        # rest is placed as if it were not there, and the whole plan is priced by the simulator (a table-row-wise
        # table's share falls on its host alone; the caller keeps the patched plan when that is cheaper)
        res = beam_search(make_space(sub, room, models, config))
        plan = lift(tables, keep, sub, res.plan, spread)
        return plan, simulate(tables, plan, models, problem).cost
    parts = None
    if spread:
        parts = spread_parts(get_scorer(models), tables, spread, problem.ndevices, models.runtime.batch_size)
    res = beam_search(make_space(sub, room, models, config, parts))
    return lift(tables, keep, sub, res.plan, spread), res.cost


def _tried(trials: SpreadTrials, trial: list[Spread]) -> tuple[float, list[Spread]] | None:
    """(estimated ms, `trial`) of the round's plan patched with the spread tables of `trial`; None when that
    does not fit or is not a valid plan."""
    cost = trials.cost(trial)
    return None if cost is None else (cost, trial)


def _bundles(tables: Sequence[ShardTable], trials: SpreadTrials, chosen: list[Spread],
             singles: Sequence[tuple]) -> list[tuple[float, list[Spread]]]:
    """Trials that spread several tables of one kind at once: per kind and group of ranks, the first 2, 4, 8, ...
    of its single trials (`singles`, from `_tried`) patched into `plan` together, in two orders: the cheapest
    single trials first, and the most looked-up tables (lookups x dim) first. The tables of a kind share one
    collective (`types.plan.spread_collectives`) and, in TorchRec's runtime, one group, whose fixed latency the
    first table of the kind pays alone: several tables can pay together where none pays by itself. A single trial's cost
    hides that: while another table keeps its device the slowest, taking one hot table off its device saves
    nothing, so the hot tables' single trials are not the cheapest; hence the second order."""
    added = [(cost, trial[-1]) for cost, trial in singles]  # each single trial's own table
    out, seen = [], set()
    for group in sorted({(s.kind, s.ranks) for _, s in added}):
        cheapest = [s for _, s in sorted(added, key=lambda x: (x[0], x[1].table)) if (s.kind, s.ranks) == group]
        hot = sorted(cheapest, key=lambda s: (-lookup_weight(tables[s.table]), s.table))
        for ranked in (cheapest, hot):
            m = 2
            while m <= len(ranked):
                key = (group, frozenset(s.table for s in ranked[:m]))
                if key not in seen:
                    seen.add(key)
                    trial = _tried(trials, chosen + ranked[:m])
                    if trial is not None:
                        out.append(trial)
                m *= 2
    return out


def _trial_hosts(tables: Sequence[ShardTable], plan: Plan, models, problem: Problem):
    """For the table-row-wise trials of one round: a function from a table to the hosts (rank tuples) to try it
    on, at most two: the host of its first piece in `plan` (none for a spread table) and the host whose slowest
    device is fastest in `plan`'s estimate."""
    hosts = problem.hosts
    local = len(hosts[0])
    est = simulate(tables, plan, models, problem)
    totals = [c + b + f for c, b, f in zip(est.compute, est.bw_comm, est.fw_comm)]
    idle = min(hosts, key=lambda h: (max(totals[r] for r in h), h))
    pieces = plan_pieces(tables, plan)

    def of(t: int) -> list[tuple[int, ...]]:
        mine = [hosts[pieces[t][0].device // local]] if pieces[t] else []
        return list(dict.fromkeys(mine + [idle]))

    return of


def spread_search(tables: Sequence[ShardTable], problem: Problem, models,
                  config: SearchConfig | None = None) -> tuple[Plan, float]:
    """NeuroShard with row-wise, table-row-wise and data-parallel tables (module doc): (plan, estimated ms).
    OutOfMemoryError when no plan fits."""
    config = config or SearchConfig()
    kinds = spread_kinds(models, problem)
    n = problem.ndevices
    every = tuple(range(n))
    with single_threaded_blas():
        cons = problem.table_constraints
        free = {kind: free_tables(tables, cons, n, kind) for kind in kinds}
        if DATA_PARALLEL in free:  # data-parallel is for small tables (simulator.replicable)
            free[DATA_PARALLEL] = [t for t in free[DATA_PARALLEL] if replicable(tables[t], problem)]
        biggest = max(device_caps(problem))
        forced = [Spread(t, ROW_WISE, every) for t in free.get(ROW_WISE, [])
                  if narrowest_elements(tables[t], cons, t) > biggest]
        plan, cost = place_around(tables, forced, problem, models, config)
        chosen = list(forced)
        if config.spread_rounds == 0:
            return plan, cost
        pool = candidates(tables, sorted({t for ts in free.values() for t in ts}))
        for _ in range(config.spread_rounds):
            taken = {s.table for s in chosen}
            hosts = _trial_hosts(tables, plan, models, problem) if TABLE_ROW_WISE in kinds else None
            trials = SpreadTrials(tables, plan, models, problem)
            singles = []
            for t in pool:
                if t in taken:
                    continue
                for kind in (k for k in kinds if t in free[k]):
                    for ranks in (hosts(t) if kind == TABLE_ROW_WISE else (every,)):
                        trial = _tried(trials, chosen + [Spread(t, kind, ranks)])
                        if trial is not None:
                            singles.append(trial)
            best = min(singles + _bundles(tables, trials, chosen, singles), key=lambda x: x[0], default=None)
            if best is None or not best[0] < cost:
                break
            cost, chosen = best
            plan = patched(tables, plan, chosen)
        if len(chosen) > len(forced):
            try:
                again, again_cost = place_around(tables, chosen, problem, models, config)
            except OutOfMemoryError:
                again_cost = math.inf
            if again_cost < cost:
                plan, cost = again, again_cost
        return plan, cost


@register("neuroshard", settings=(SearchConfig,))
def neuroshard(tables: Sequence[ShardTable], problem: Problem, ctx: ShardingContext) -> Plan:
    """NeuroShard (beam search over column splits + greedy grid search) under ctx's cost models; a split
    whose two halves the grid search put on one device is undone (`types.merge_colocated_halves`).

    Options (ctx.options): the fields of SearchConfig. Raises OutOfMemoryError when no plan fits.
    """
    models = require_models(ctx.models if ctx is not None else None, "neuroshard")
    config = SearchConfig.from_options(ctx.options)
    if spread_kinds(models, problem):
        return merge_colocated_halves(tables, spread_search(tables, problem, models, config)[0])
    return merge_colocated_halves(tables, search(tables, problem, models, config).plan)


def _best_plans(tables: Sequence[ShardTable], problem: Problem, ctx: ShardingContext, k: int) -> list[Plan]:
    """The k cheapest distinct states NeuroShard's beam search scored, its own plan first (for `--refine`)."""
    models = require_models(ctx.models if ctx is not None else None, "neuroshard")
    with single_threaded_blas():
        space = make_space(tables, problem, models, SearchConfig.from_options(ctx.options))
        plans = []
        for _, plan in beam_search(space, keep=k).candidates:
            plan = merge_colocated_halves(tables, plan)
            if plan not in plans:
                plans.append(plan)
        return plans


neuroshard.candidates = _best_plans


@register("neuroshard_fitted", requires_option="torchrec_estimator", settings=(SearchConfig, FittedEstimatorOptions))
def neuroshard_fitted(tables: Sequence[ShardTable], problem: Problem, ctx: ShardingContext) -> Plan:
    """NeuroShard's search on TorchRec's estimator fitted to the cost data (`planner.costs.analytic`) instead of
    the neural models: the search half of the cost-model ablation. Options: SearchConfig's fields and the
    fitted estimator's path."""
    options = ctx.options if ctx is not None else {}
    model = load_option(options, problem.ndevices, "neuroshard_fitted")
    models = CostModels.analytic_models(model).at_batch(problem.batch_size)
    return merge_colocated_halves(tables, search(tables, problem, models, SearchConfig.from_options(options)).plan)
