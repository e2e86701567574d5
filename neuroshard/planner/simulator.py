"""Plan validation and the simulated plan cost (DESIGN §7).

A plan's estimated cost comes from the three pre-trained cost models and
nothing else: per device, `compute[r]` from the compute model (0 for an
empty device), `bw[r]` from the backward comm model on the per-device dim
sums, `skew[r] = compute[r] + bw[r] - min_r(compute + bw)`, `fw[r]` from the
forward comm model on `dims + skew`; `total[r] = compute + bw + fw`; plan
cost = `max_r total[r]`. Times in ms, sizes in GB. A device's dim sum counts
what its tables send per sample (`TableConfig.exchange_dim`): a pooled table
its dim, an unpooled one its dim times its pooling factor.

`score_placements` is the one plan-cost function: `simulate` calls it for one
plan, the NeuroShard search for thousands of candidate placements at once,
and reports go through `simulate`. Per-device compute costs come from
`scorer.PlanScorer`, which keeps a running accumulator per device (see its
docstring), in the same order for the search and for `simulate`.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

import numpy as np

from neuroshard.checks import check_float
from neuroshard.planner.costs.scorer import PlanScorer, get_scorer, single_threaded_blas
from neuroshard.planner.costs.uncertainty import cost_samples, spread, widen
from neuroshard.problem import Problem
from neuroshard.types.costs import CostBreakdown, RuntimeEstimate
from neuroshard.types.errors import InvalidPlanError, NeuroShardError, OutOfMemoryError
from neuroshard.types.plan import (
    DATA_PARALLEL,
    KIND_COLLECTIVES,
    TABLE_ROW_WISE,
    ColumnPiece,
    Plan,
    Spread,
    apply_column_steps,
    plan_pieces,
    table_devices,
)
from neuroshard.types.tables import BYTES_PER_ELEMENT, ShardTable

# --------------------------------------------------------------------------- memory


def mem_cap_elements(max_mem: float) -> int:
    """Largest number of fp32 elements that fits in `max_mem` GB.

    Memory is checked in whole elements (rows × dim, exact integers) so that
    the search, the baselines' plans and the validator agree to the byte.
    """
    check_float("max_mem (GB)", max_mem, 0.0, lo_open=True)
    return int(math.floor(max_mem * 2**30 / BYTES_PER_ELEMENT))


def table_elements(table: ShardTable) -> int:
    return int(table.config.row) * int(table.dim)


def _gb(elements: int) -> float:
    return elements * BYTES_PER_ELEMENT / 2**30


# A data-parallel table runs TorchRec's dense kernel: its replica on every rank has a dense gradient of its size
# (the fused kernels update in place); and it is for small tables: on CPU ranks sharing one host's memory a
# replicated table is copied several more times (gradient buckets), so one is at most this share of a device.
DP_ELEMENTS_PER_WEIGHT = 2
DP_MAX_SHARE = 1 / 16


def device_elements(tables: Sequence[ShardTable], split: Sequence[ShardTable], plan: Plan) -> list[int]:
    """The fp32 elements each device of `plan` holds: its shards' weights, its row blocks of the row-wise and
    table-row-wise tables, and of each data-parallel table a replica and its dense gradient
    (`DP_ELEMENTS_PER_WEIGHT`). `split`: the post-split tables."""
    used = [sum(table_elements(split[i]) for i in shard) for shard in plan.shards]
    for s in plan.spread:
        t = tables[s.table]
        per = DP_ELEMENTS_PER_WEIGHT if s.kind == DATA_PARALLEL else 1
        for r, rows in zip(s.ranks, s.rows_on(int(t.config.row))):
            used[r] += per * rows * int(t.dim)
    return used


def replicable(table: ShardTable, problem: Problem) -> bool:
    """`table` may be data-parallel: its replica and gradient within `DP_MAX_SHARE` of the smallest device."""
    return DP_ELEMENTS_PER_WEIGHT * table_elements(table) <= DP_MAX_SHARE * min(device_caps(problem))


def spread_room(tables: Sequence[ShardTable], spread: Sequence[Spread], problem: Problem) -> Problem:
    """The problem with each device's memory less what the `spread` tables keep there (`device_elements`),
    for placing the other tables around them; OutOfMemoryError naming the device when they alone do not fit."""
    if not spread:
        return problem
    used = device_elements(tables, tables, Plan((), ((),) * problem.ndevices, tuple(spread)))
    left = [cap - _gb(u) for cap, u in zip(problem.caps, used)]
    if min(left) <= 0:
        r = int(np.argmin(left))
        raise OutOfMemoryError(f"device {r}: the row-wise and data-parallel tables "
                               f"{', '.join(str(s.table) for s in spread if r in s.ranks)} alone hold "
                               f"{_gb(used[r]):.4g} GB of its {problem.caps[r]:g} GB",
                               size=_gb(used[r]), max_mem=problem.caps[r])
    return replace(problem, max_mem=tuple(left))


def device_caps(problem: Problem) -> list[int]:
    """Each device's memory in fp32 elements (`mem_cap_elements` of its GB), each distinct size converted once
    (called per table by `replicable`, on problems of a thousand devices)."""
    if problem.uniform:
        return [mem_cap_elements(problem.max_mem)] * problem.ndevices
    elements = {m: mem_cap_elements(m) for m in set(problem.caps)}
    return [elements[m] for m in problem.caps]


def validate_plan(tables: Sequence[ShardTable], plan: Plan, problem: Problem) -> list[ShardTable]:
    """Check a plan against its task and problem and return the post-split tables.

    Raises InvalidPlanError when the plan has another number of devices than
    the problem, an illegal column step, a table index out of range, a
    post-split table placed twice or never, a table-row-wise table over
    ranks that are not one of the problem's hosts (when it names them), or
    breaks the problem's table
    constraints (`types.constraints`: a table kept whole, its devices, a
    co-located group); OutOfMemoryError (with the per-device GB used) when a
    device holds more than its memory.
    Memory follows each table's sharding type (`device_elements`).
    """
    if not isinstance(plan, Plan):
        raise InvalidPlanError(f"expected a Plan, got {type(plan).__name__}")
    ndevices = problem.ndevices
    if plan.ndevices != ndevices:
        raise InvalidPlanError(f"plan has {plan.ndevices} devices, the task has {ndevices}")
    split = apply_column_steps(tables, plan.column_steps)
    table_devices(plan, len(split))  # each post-split table on exactly one device
    for s in plan.spread:
        rows = int(tables[s.table].config.row)
        if s.kind != DATA_PARALLEL and rows < len(s.ranks):
            raise InvalidPlanError(f"table {s.table} has {rows} rows, fewer than the {len(s.ranks)} ranks it is "
                                   f"{s.kind} over")
        if s.kind == TABLE_ROW_WISE and problem.local_world_size is not None and s.ranks not in problem.hosts:
            raise InvalidPlanError(f"table {s.table} is table_row_wise over ranks {list(s.ranks)}, not one host's "
                                   f"(the problem's hosts: {', '.join(str(list(h)) for h in problem.hosts)})")
    if problem.constraints is not None and not problem.constraints.empty:
        problem.constraints.check(len(tables), ndevices)
        pieces = plan_pieces(tables, plan)
        for s in plan.spread:
            pieces[s.table] = [ColumnPiece(0, tables[s.table].dim, r) for r in s.ranks]
        broken = problem.constraints.violation(pieces, {s.table: s.kind for s in plan.spread})
        if broken is not None:
            raise InvalidPlanError(broken)
    caps = device_caps(problem)
    used = device_elements(tables, split, plan)
    over = [r for r in range(ndevices) if used[r] > caps[r]]
    if over:
        r = over[0]
        spread = [f"{tables[s.table].origin} ({s.kind})" for s in plan.spread if r in s.ranks]
        raise OutOfMemoryError(
            f"device {r} holds {_gb(used[r]):.4g} GB > its {problem.caps[r]:g} GB "
            + (f"with spread tables {', '.join(spread)} " if spread else "")
            + f"(used per device: {', '.join(f'{_gb(u):.3g}' for u in used)} GB)",
            size=_gb(used[r]), max_mem=problem.caps[r], used=[_gb(u) for u in used])
    return split


# --------------------------------------------------------------------------- plan cost


def score_placements(scorer: PlanScorer, compute: np.ndarray, dims: np.ndarray,
                     collectives: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, ...]:
    """The plan-cost function for M placements at once (DESIGN §7).

    `compute` [M, n]: per-device compute ms (0 for empty devices); `dims`
    [M, n]: per-device dim sums; `collectives`: the spread tables' (forward,
    backward) collective ms per device [n] (`collective_parts`), added to the
    exchanges (the backward ones also to when a device is ready for the
    forward all-to-all). Returns (bw, fw, total) [M, n] and cost [M] = max
    over devices of total, all in ms.
    """
    compute = np.asarray(compute, dtype=np.float64)
    if collectives is None:
        bw, fw = scorer.comm(dims, compute)
    else:
        bw, fw = scorer.comm(dims, compute + collectives[1])
        bw, fw = bw + collectives[1], fw + collectives[0]
    total = compute + bw + fw
    return bw, fw, total, total.max(axis=1)


def spread_configs(tables: Sequence[ShardTable], spread: Sequence[Spread],
                   ndevices: int) -> tuple[list, list[list[int]]]:
    """What each device's kernel runs of the spread tables on the paper's runtime, as the compute model takes
    it: (table configs, each device's indices into them, in spread order as the plan job builds its op). A
    row-wise or table-row-wise table's block on a rank: the block's rows with the lookups that fall in them
    (`TableConfig.row_block`; none for an empty block); a data-parallel replica: the whole table over the rank's
    B/k samples (`TableConfig.batch_share`)."""
    configs, of_rank = [], [[] for _ in range(ndevices)]
    for s in spread:
        t = tables[s.table]
        for r, (lo, hi) in zip(s.ranks, s.ranges_on(int(t.config.row))):
            if s.kind == DATA_PARALLEL:
                config = t.config.batch_share(len(s.ranks))
            elif hi > lo:
                config = t.config.row_block(lo, hi)
            else:
                continue
            of_rank[r].append(len(configs))
            configs.append(config)
    return configs, of_rank


def collective_parts(models, tables: Sequence[ShardTable], spread: Sequence[Spread],
                     ndevices: int) -> tuple[np.ndarray, np.ndarray]:
    """The spread tables' (forward, backward) collective ms per device [n] from the collective model
    (`planner.costs.collective_model`: its fit for the group's size) at the models' global batch
    (`types.plan.spread_collectives`)."""
    from neuroshard.types.plan import spread_collectives

    fw, bw = np.zeros(ndevices), np.zeros(ndevices)
    # the spread tables' dims, rows and output widths alone: the spread search prices hundreds of trials of
    # thousands of tables
    dims = {s.table: tables[s.table].dim for s in spread}
    rows = {s.table: int(tables[s.table].config.row) for s in spread}
    widths = {s.table: tables[s.table].exchange_dim for s in spread}
    for c in spread_collectives(dims, rows, spread, models.global_batch, widths):
        part = bw if c.backward else fw
        part[list(c.ranks)] += float(models.collectives.predict(c.op, c.numel, len(c.ranks)))
    return fw, bw


def _paper_parts(scorer, tables, split, plan: Plan, models):
    """(embeddings, each device's kernel indices into them, dims [1, n], collective parts or None) of a valid
    plan on the paper's runtime: its shards and, after them, its spread tables' shares (`spread_configs`)."""
    extra, of_rank = spread_configs(tables, plan.spread, plan.ndevices)
    emb = scorer.embed([t.config for t in split] + extra)
    shards = [list(shard) + [len(split) + i for i in mine] for shard, mine in zip(plan.shards, of_rank)]
    dims = np.array([[sum(split[i].exchange_dim for i in s) for s in plan.shards]], dtype=np.float64)
    coll = collective_parts(models, tables, plan.spread, plan.ndevices) if plan.spread else None
    return emb, shards, dims, coll


def simulate(tables: Sequence[ShardTable], plan: Plan, models, problem: Problem) -> CostBreakdown:
    """Estimated per-device costs (ms) of a plan under the cost models (DESIGN §7).

    `tables`: the task's tables before splits; `models`: a `CostModels`. Validates the
    plan against `problem` first: InvalidPlanError / OutOfMemoryError, never a score for a plan
    that does not fit. The breakdown also holds per-device `dims`, `skew`
    and `mem_gb`; with ensembles or a known measurement noise
    (`CostModels.noise_model`), each member's plan cost and the plan's cost
    distribution (`spread`, see `planner.costs.uncertainty`). With a runtime model
    (`CostModels.runtime`), the cost is that runtime's estimate
    (`planner.costs.runtime_model`).
    """
    with single_threaded_blas():
        return _simulate(tables, plan, _at_world(models, problem), problem)


def _simulate_runtime(scorer, tables, split, plan: Plan, runtime) -> CostBreakdown:
    """The breakdown under TorchRec's runtime (`planner.costs.runtime_model`): per device its kernels' ms (all
    groups), no per-device exchanges (they are in the runtime's terms), the runtime's estimate as the cost."""
    from neuroshard.planner.costs.runtime_model import features, plan_parts

    parts = plan_parts(scorer, tables, plan, runtime.batch_size, split)
    x = features(parts)[0]
    cost = float(runtime.predict(x[None])[0])
    if not math.isfinite(cost):
        raise NeuroShardError(f"the TorchRec runtime model gave a non-finite plan cost ({cost})")
    n = plan.ndevices
    return CostBreakdown(
        compute=parts.compute[0].sum(axis=1).tolist(), bw_comm=[0.0] * n, fw_comm=[0.0] * n,
        dims=[int(sum(split[i].exchange_dim for i in s)) for s in plan.shards],
        mem_gb=[_gb(u) for u in device_elements(tables, split, plan)],
        runtime=RuntimeEstimate("torchrec", cost, runtime.terms(x)))


def _member_samples(scorer, emb, shards, dims: np.ndarray, noise, coll=None) -> tuple[np.ndarray, np.ndarray]:
    """Each member's plan cost [K] and the plan's cost samples [1, J] (`uncertainty.cost_samples`: the
    members' parts with the noise of one measurement; without the plan-level error). `coll`: the spread
    tables' (forward, backward) collective ms per device, the same for every member."""
    mc = scorer.member_shard_costs(emb, shards)[:, None, :]  # [K, 1, n]
    if coll is None:
        mbw, mfw = scorer.comm_members(dims, mc)
    else:
        mbw, mfw = scorer.comm_members(dims, mc + coll[1])
        mbw, mfw = mbw + coll[1], mfw + coll[0]
    return (mc + mbw + mfw).max(axis=-1)[:, 0], cost_samples(mc, mbw, mfw, noise)


def plan_cost_samples(tables: Sequence[ShardTable], plan: Plan, models, problem: Problem) -> np.ndarray:
    """The cost samples [J] of a valid plan (`uncertainty.cost_samples`, without the plan-level error that
    `uncertainty.calibrate_plan_sd` calibrates from them); the point cost alone for one model and no noise."""
    with single_threaded_blas():
        paper = _at_world(models, problem).for_runtime("paper")  # the members' spread is the paper runtime's
        unpriced(plan, paper)
        scorer = get_scorer(paper)
        split = validate_plan(tables, plan, problem)
        emb, shards, dims, coll = _paper_parts(scorer, tables, split, plan, paper)
        return _member_samples(scorer, emb, shards, dims, paper.noise_model, coll)[1][0]


def _at_world(models, problem: Problem):
    """`models` pricing `problem`'s ranks: comm models for any world size bound to its count
    (`CostModels.for_world`), others as they are."""
    return models.for_world(problem.ndevices) if hasattr(models, "for_world") else models


def unpriced(plan: Plan, models) -> None:
    """InvalidPlanError naming the first spread table of `plan` that `models` cannot price (an evaluation records
    the plan as invalid): on the paper's runtime the collective model (`CostModels.collectives`) prices the
    collectives over every rank and over the host groups it was fitted on; TorchRec's runtime model prices the
    kinds it was fitted on."""
    if not plan.spread:
        return
    runtime = getattr(models, "runtime", None)
    if runtime is not None:
        runtime.check_types(plan)
        return
    collectives = getattr(models, "collectives", None)
    for s in plan.spread:
        if collectives is None:
            raise InvalidPlanError(f"table {s.table} is {s.kind}: the paper runtime's cost models price table-wise "
                                   "and column-wise shards only without a collective model (--collective_model; "
                                   "collect_collective_cost_data.py fits one)")
        k = len(s.ranks)
        missing = [op for op in KIND_COLLECTIVES[s.kind] if not collectives.has(op, k)]
        if k == collectives.ndevices and missing:
            raise InvalidPlanError(f"table {s.table} is {s.kind}: the collective model has no fit of "
                                   f"{', '.join(missing)}")
        if missing:
            how = f"; collect_collective_cost_data.py --local_world_size {k} times them" if k > 1 else ""
            raise InvalidPlanError(f"table {s.table} is {s.kind} over ranks {list(s.ranks)}: the collective model "
                                   f"has no fit of {', '.join(missing)} over groups of {k} ranks (it has "
                                   f"{', '.join(collectives.fits)}{how})")


def _simulate(tables, plan, models, problem: Problem) -> CostBreakdown:
    if not isinstance(plan, Plan):
        raise InvalidPlanError(f"expected a Plan, got {type(plan).__name__}")
    unpriced(plan, models)
    scorer = get_scorer(models)
    n = plan.ndevices
    if n != scorer.ndevices:
        raise NeuroShardError(f"plan has {n} devices but the comm models are for {scorer.ndevices}")
    split = validate_plan(tables, plan, problem)
    if models.runtime is not None:
        return _simulate_runtime(scorer, tables, split, plan, models.runtime)
    emb, shards, dims, coll = _paper_parts(scorer, tables, split, plan, models)
    compute = scorer.shard_costs(emb, shards)[None, :]
    bw, fw, total, _ = score_placements(scorer, compute, dims, coll)
    if not np.isfinite(total).all():
        raise NeuroShardError(f"the cost models gave a non-finite plan cost (per device: {total[0].tolist()}); "
                              "check the model checkpoints")
    ready = compute[0] + bw[0]
    mem = [_gb(u) for u in device_elements(tables, split, plan)]
    members, cost_spread = None, None
    noise = models.noise_model
    if scorer.members > 1 or not noise.zero or noise.plan:  # the distribution: members, noise, plan error
        member_costs, samples = _member_samples(scorer, emb, shards, dims, noise, coll)
        if scorer.members > 1:
            members = member_costs.tolist()
        [cost_spread] = spread(widen(samples, noise.plan))
    return CostBreakdown(
        compute=compute[0].tolist(), bw_comm=bw[0].tolist(), fw_comm=fw[0].tolist(),
        dims=[int(d) for d in dims[0]], skew=(ready - ready.min()).tolist(), mem_gb=mem, member_costs=members,
        spread=cost_spread, collectives=None if coll is None else np.stack(coll, axis=1).tolist())
