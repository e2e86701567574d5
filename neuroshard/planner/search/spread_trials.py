"""The trials of the spread search priced together: a plan with some of its tables made row-wise, table-row-wise or
data-parallel, at the cost `simulate` gives that plan, with the work the trials of one round share done once.

A trial is `patched(tables, plan, spread)` (`search.sharding_types`): the plan's pieces in their canonical order
(`types.plan.plan_from_pieces`: each device's post-split tables sorted), less the pieces of the tables in
`spread`, and `spread` in table order. All the trials of a round start from one plan, so its canonical shard lists,
its post-split tables' configs and their embeddings, and each device's memory and dim sum are worked out once
(`SpreadTrials`); a trial takes its new spread tables' pieces out of them, adds the spread tables' shares, and
prices that with the simulator's own steps in the simulator's order: the validity checks of `validate_plan` and
`unpriced`, per device its shards then its spread shares accumulated one by one (`scorer.shard_accumulators`),
`score_placements`; under TorchRec's runtime `group_parts`, `spread_parts`, `features` and the model. Its cost
therefore has the bits `simulate` gives the patched plan, which `tests/planner/search/test_spread_trials.py`
holds. A trial whose kept tables have fewer than two distinct configs is simulated whole (a one-row batch takes
another BLAS path, whose last bits may differ).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from neuroshard.numerics import ordered_sums
from neuroshard.planner.costs.scorer import get_scorer
from neuroshard.planner.simulator import collective_parts, device_caps, score_placements, simulate, unpriced
from neuroshard.problem import Problem
from neuroshard.types.errors import InvalidPlanError, NeuroShardError, OutOfMemoryError
from neuroshard.types.plan import (
    DATA_PARALLEL,
    TABLE_ROW_WISE,
    ColumnPiece,
    Plan,
    Spread,
    apply_column_steps,
    check_spread,
    plan_from_pieces,
    plan_pieces,
)
from neuroshard.types.tables import ShardTable


def by_table(spread: Sequence[Spread]) -> tuple[Spread, ...]:
    """Spread entries in table order (a plan's canonical form)."""
    return tuple(sorted(spread, key=lambda s: s.table))


def patched(tables: Sequence[ShardTable], plan: Plan, spread: Sequence[Spread]) -> Plan:
    """`plan` with the tables of `spread` taken off their devices and spread instead."""
    pieces = plan_pieces(tables, plan)
    for s in spread:
        pieces[s.table] = []
    return plan_from_pieces(tables, pieces, plan.ndevices, by_table(spread))


class SpreadTrials:
    """Prices `patched(tables, plan, spread)` for the spread lists of one round's trials (module doc): `cost`
    returns the estimate `simulate` gives that plan, or None when it does not fit or is no valid plan."""

    def __init__(self, tables: Sequence[ShardTable], plan: Plan, models, problem: Problem):
        self.tables, self.plan, self.models, self.problem = list(tables), plan, models, problem
        self.n = n = problem.ndevices
        self.scorer = get_scorer(models)
        self.runtime = models.runtime
        base = patched(tables, plan, list(plan.spread))
        split = apply_column_steps(tables, base.column_steps)
        self.spread_before = {s.table for s in plan.spread}
        # the pieces in shard-list order: device, post-split index, task table, dim, fp32 elements
        self.dev = np.array([r for r, shard in enumerate(base.shards) for _ in shard], dtype=np.int64)
        self.idx = np.array([i for shard in base.shards for i in shard], dtype=np.int64)
        self.origin = np.array([split[i].origin for i in self.idx], dtype=np.int64)
        self.dim = np.array([split[i].exchange_dim for i in self.idx], dtype=np.int64)
        self.elements = np.array([int(split[i].config.row) * int(split[i].dim) for i in self.idx], dtype=np.int64)
        self.pieces_of: dict[int, np.ndarray] = {}
        for t in np.unique(self.origin).tolist():
            self.pieces_of[t] = (self.origin == t).nonzero()[0]
        self.dims = _sums(self.dev, self.dim, n)
        self.used = _sums(self.dev, self.elements, n)
        self.caps = np.array(device_caps(problem), dtype=np.int64)
        # the distinct configs of the pieces, each piece's (simulate embeds a plan's configs at once, deduplicated)
        configs = [t.config for t in split]
        ids: dict = {}
        self.config_id = np.array([ids.setdefault(configs[i], len(ids)) for i in self.idx], dtype=np.int64)
        self.config_count = np.bincount(self.config_id, minlength=len(ids))
        self.proj = self.scorer.project(self.scorer.embed(configs)) if configs else None
        if self.runtime is not None:
            pieces = np.bincount(self.origin, minlength=len(self.tables))
            self.group = (pieces[self.origin] > 1).astype(np.int64)  # column-wise: a table of several pieces
            self.pool = np.array([split[i].config.pooling_factor for i in self.idx], dtype=np.float64)
        self.constraints = problem.constraints if problem.constraints is not None and \
            not problem.constraints.empty else None
        if self.constraints is not None:
            self.constraints.check(len(self.tables), n)
            self.base_pieces = plan_pieces(tables, base)
        self.shares: dict[Spread, tuple] = {}

    # ---------------------------------------------------------------- one trial

    def cost(self, spread: Sequence[Spread]) -> float | None:
        """The estimate (ms) of `patched(tables, plan, spread)`, as `simulate` gives it; None when that plan does
        not fit or is not valid (OutOfMemoryError / InvalidPlanError there)."""
        spread = by_table(spread)
        if not self.spread_before <= {s.table for s in spread}:  # a spread table back in no shard: no plan
            return None
        gone = [s.table for s in spread if s.table not in self.spread_before]
        out = self.pieces_of_tables(gone)
        keep = np.ones(len(self.idx), dtype=bool)
        keep[out] = False
        kept = np.bincount(self.config_id[out], minlength=len(self.config_count))
        if np.count_nonzero(self.config_count - kept) < 2:  # a batch of one distinct config: simulate it whole
            return self._simulated(spread)
        try:
            self._check(spread, out)
        except (OutOfMemoryError, InvalidPlanError):
            return None
        dims = self.dims - _sums(self.dev[out], self.dim[out], self.n)
        if self.runtime is not None:
            return self._runtime_cost(spread, keep)
        return self._paper_cost(spread, keep, dims)

    def pieces_of_tables(self, tables: Sequence[int]) -> np.ndarray:
        """The positions (shard-list order) of the pieces of task tables `tables`."""
        parts = [self.pieces_of[t] for t in tables if t in self.pieces_of]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def _check(self, spread: tuple[Spread, ...], out: np.ndarray) -> None:
        """InvalidPlanError / OutOfMemoryError where `simulate` raises them for the trial (`unpriced`,
        `validate_plan`): a kind the models do not price, a spread entry that is no valid one, a table with
        fewer rows than its ranks, a table-row-wise table off the problem's hosts, a broken constraint, a device
        over its memory."""
        n = self.n
        plan = Plan((), ((),) * n, spread)
        unpriced(plan, self.models)
        check_spread(plan, len(self.tables))
        for s in spread:
            rows = int(self.tables[s.table].config.row)
            if s.kind != DATA_PARALLEL and rows < len(s.ranks):
                raise InvalidPlanError(f"table {s.table} has {rows} rows, fewer than its {len(s.ranks)} ranks")
            if s.kind == TABLE_ROW_WISE and self.problem.local_world_size is not None \
                    and s.ranks not in self.problem.hosts:
                raise InvalidPlanError(f"table {s.table}: ranks {list(s.ranks)} are not one host's")
        if self.constraints is not None:
            pieces = list(self.base_pieces)
            for s in spread:
                pieces[s.table] = [ColumnPiece(0, self.tables[s.table].dim, r) for r in s.ranks]
            broken = self.constraints.violation(pieces, {s.table: s.kind for s in spread})
            if broken is not None:
                raise InvalidPlanError(broken)
        used = self.used - _sums(self.dev[out], self.elements[out], n)
        for s in spread:
            t = self.tables[s.table]
            per = 2 if s.kind == DATA_PARALLEL else 1
            used[list(s.ranks)] += np.array([per * rows * int(t.dim) for rows in s.rows_on(int(t.config.row))],
                                            dtype=np.int64)
        if (used > self.caps).any():
            raise OutOfMemoryError("a device over its memory")

    # ---------------------------------------------------------------- the paper's runtime

    def _share(self, s: Spread) -> tuple[np.ndarray, np.ndarray]:
        """(ranks, compute-model increments) of the spread table's shares on the paper's runtime, in rank order
        (`simulator.spread_configs`), embedded as a plan's batch is (two distinct configs or more)."""
        got = self.shares.get(s)
        if got is None:
            from neuroshard.planner.simulator import spread_configs

            configs, of_rank = spread_configs(self.tables, [s], self.n)
            ranks = np.array([r for r, mine in enumerate(of_rank) for _ in mine], dtype=np.int64)
            order = [k for mine in of_rank for k in mine]
            configs = [configs[k] for k in order]
            # one more config of another dim: the batch goes the matrix way, as in a plan's
            other = configs[0].with_dim(int(configs[0].dim) + 4) if configs else None
            proj = self.scorer.project(self.scorer.embed(configs + [other]))[:len(configs)] if configs else \
                np.zeros((0, len(self.scorer.acc0)), dtype=self.scorer.acc0.dtype)
            got = self.shares[s] = (ranks, proj)
        return got

    def _paper_cost(self, spread: tuple[Spread, ...], keep: np.ndarray, dims: np.ndarray) -> float:
        # per device its shards in order, then its spread shares in table order (`simulator._paper_parts`)
        shares = [self._share(s) for s in spread]
        target = np.concatenate([self.dev[keep]] + [r for r, _ in shares])
        rows = np.concatenate([self.proj[self.idx[keep]]] + [p for _, p in shares])
        acc = ordered_sums(target, rows, self.n, self.scorer.acc0)
        count = np.bincount(target, minlength=self.n)
        compute = np.where(count > 0, self.scorer.cost_from_acc(acc).astype(np.float64), 0.0)[None, :]
        coll = collective_parts(self.models, self.tables, spread, self.n) if spread else None
        _, _, total, cost = score_placements(self.scorer, compute, dims.astype(np.float64)[None, :], coll)
        if not np.isfinite(total).all():
            raise NeuroShardError(f"the cost models gave a non-finite plan cost (per device: {total[0].tolist()}); "
                                  "check the model checkpoints")
        return float(cost[0])

    # ---------------------------------------------------------------- TorchRec's runtime

    def _runtime_cost(self, spread: tuple[Spread, ...], keep: np.ndarray) -> float:
        from neuroshard.planner.costs.runtime_model import features, group_parts, spread_parts

        runtime = self.runtime
        parts = group_parts(self.scorer, self.proj, self.idx[keep][None], self.dev[keep][None],
                            self.group[keep][None], self.pool[keep], self.dim[keep].astype(np.float64), self.n,
                            runtime.batch_size,
                            spread_parts(self.scorer, self.tables, spread, self.n, runtime.batch_size)
                            if spread else None)
        x = features(parts)[0]
        cost = float(runtime.predict(x[None])[0])
        if not math.isfinite(cost):
            raise NeuroShardError(f"the TorchRec runtime model gave a non-finite plan cost ({cost})")
        return cost

    # ---------------------------------------------------------------- the plain way

    def _simulated(self, spread: tuple[Spread, ...]) -> float | None:
        try:
            return simulate(self.tables, patched(self.tables, self.plan, spread), self.models, self.problem).cost
        except (OutOfMemoryError, InvalidPlanError):
            return None


def _sums(index: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Integer sums of `values` per `index` in 0..n-1 (exact)."""
    out = np.zeros(n, dtype=np.int64)
    np.add.at(out, index, values)
    return out
