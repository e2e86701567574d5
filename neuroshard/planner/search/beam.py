"""NeuroShard search (DESIGN §8): beam search over column-wise splits, greedy grid search over placements.

* Greedy table-wise placement at scale s: tables by single-table compute
  cost, largest first (ties: lower post-split index first); each goes to the
  device with the smallest current compute cost among those with memory
  room and `dim_sum + dim <= s * mean_dim` (ties: least memory used, then
  lowest device index); that device's cost is re-predicted on its new set.
* Greedy grid search: the greedy for `grid_steps` scales evenly spaced in
  [grid_min, grid_max]; each successful placement is scored with the
  simulator's plan-cost function (`simulator.score_placements`); the best
  (first on ties) wins. Beyond the paper: if every scale fails only because
  of the dim constraint, the greedy is run once more without it, so a task
  is reported out of memory only when memory is what fails.
* Beam search: from the no-split state, each round splits each of the
  union of the `beam_n` largest tables by size and by single-table compute
  cost (ties: lower index) of each of the <= `beam_k` beam states, scores every
  child by grid search, keeps the `beam_k` best (stable on ties) and
  remembers the best state ever seen; stops after `max_length` rounds or when
  nothing can be split. Children reached twice in a round (split i then j,
  or j then i) are one state and are scored once.

Speed (a direct implementation, one model call per greedy step, takes
1.5-7 s per task): every table and each split half it can become (a "gid",
one per (table, split level)) is embedded once per task; the compute head's
first layer is linear, so each device keeps a running 64-d accumulator
(`PlanScorer.project`) and one placement costs O(64); the greedy
(`planner/search/placement.py`) runs all grid scales of all children of a beam round
as one batch, one vectorised NumPy step per table, with one row per group
of scales that still agree and per-dim device keys (see its docstring);
placements that several scales share are scored once, all in one call of
the comm models; children reached twice in a round are scored once. Ties in
the greedy are exact: costs are computed row by row (no BLAS), so equal
shards get bit-equal costs whichever batch they are in.

The sharders that run it (`neuroshard`, `neuroshard_fitted`) are registered in
`search.sharding_types`, which also chooses row-wise and data-parallel tables
around it under TorchRec's runtime.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import ClassVar, Sequence

import numpy as np

from neuroshard.checks import check_float, check_int
from neuroshard.planner.costs.scorer import PlanScorer, get_scorer, single_threaded_blas
from neuroshard.planner.search.placement import NO_LIMIT, pack_by_size, run_greedy, size_order, state_bytes
from neuroshard.planner.simulator import device_caps, score_placements
from neuroshard.problem import Problem
from neuroshard.settings import Settings, setting
from neuroshard.types.errors import ConfigError, NeuroShardError, OutOfMemoryError
from neuroshard.types.plan import Plan
from neuroshard.types.tables import ShardTable

# The states of one batched greedy are chunked so its arrays stay below this size (a bound: only the
# rows in use are touched); one chunk per beam round up to ~10,000 tables x 1,024 devices.
_MAX_BATCH_BYTES = 1024 * 2**20


@dataclass(frozen=True)
class SearchConfig(Settings):
    """NeuroShard search settings (paper defaults). Every field is a flag of the same name."""

    TITLE: ClassVar[str] = "NeuroShard search (DESIGN §8; paper defaults)"

    beam_k: int = setting(3, "beam width k")
    beam_n: int = setting(10, "split candidates per state: the n largest tables by size and by compute cost")
    max_length: int = setting(10, "beam search rounds (most splits)")
    grid_steps: int = setting(11, "greedy grid search: number of dim-limit scales, evenly spaced in [grid_min, "
                                  "grid_max]")
    grid_min: float = setting(1.0, "smallest dim-limit scale (a device may hold up to scale x the mean dim sum)")
    grid_max: float = setting(1.5, "largest dim-limit scale")
    dim_fallback: bool = setting(True, "if every scale fails only because of the dim limit, run the greedy once more "
                                       "without it, and if memory still fails, place by size alone (largest first, "
                                       "onto the most memory left or the tightest fit) (beyond the paper; 0 to turn "
                                       "off)")
    spread_rounds: int = setting(8, "where the models price row-wise and data-parallel tables (TorchRec's runtime "
                                    "model fitted on them, or on the paper's runtime --collective_model): rounds of "
                                    "the greedy choice of tables made row-wise or data-parallel "
                                    "(search.sharding_types; 0: table-wise and column-wise only, but for tables "
                                    "that fit no device)")

    def __post_init__(self):
        for name in ("beam_k", "beam_n", "grid_steps"):
            check_int(f"--{name}", getattr(self, name), 1)
        check_int("--max_length", self.max_length, 0)
        check_int("--spread_rounds", self.spread_rounds, 0)
        check_float("--grid_min", self.grid_min, 0.0, lo_open=True)
        if check_float("--grid_max", self.grid_max) < self.grid_min:
            raise ConfigError("--grid_max", f"must be >= --grid_min {self.grid_min:g}, got {self.grid_max:g}")

    def scales(self) -> np.ndarray:
        return np.linspace(self.grid_min, self.grid_max, self.grid_steps)


@dataclass
class _Scored:
    """Best grid-search placement of one split state (cost inf: nothing fits)."""

    cost: float
    scale: float = math.nan
    order: np.ndarray | None = None  # post-split table indices in greedy order
    devices: np.ndarray | None = None  # the device each of them went to


@dataclass
class SearchResult:
    """What the search found; `plan` is the best state's plan, costs in ms."""

    plan: Plan
    cost: float
    start_plan: Plan | None
    start_cost: float
    scale: float
    states_scored: int
    rounds: int
    seconds: float
    history: list = field(default_factory=list)  # best cost after each round
    candidates: list = field(default_factory=list)  # (cost, plan) of the `keep` best distinct states seen


class SearchSpace:
    """Per-task precomputation: every table at every dim it can be split to, embedded once.

    The search places *units*: each table, or each group of tables the problem's constraints co-locate
    (placed whole, together: one unit whose compute projection, size and dim are its tables' sums), in task
    order at its first table's position (`units`). Plans inside the search are over units; `plan` and
    `to_units` convert from and to the task's tables (without co-located groups the two are the same).
    A "gid" is one (unit, split level): `start[u]` is unit u's unsplit gid, gid + 1 its half;
    per gid: `dim`, `size` (fp32 elements), `proj` (compute-model accumulator increment),
    `cost1` (single-unit compute ms), `can_split` (never for a unit the constraints keep whole, nor below a
    table's narrowest piece: `TableConstraints.may_halve`), `allow`
    (the devices it may use, [G, n] bool; None without device constraints). `cap`: memory per device
    (elements, [n]).
    """

    def __init__(self, tables: Sequence[ShardTable], problem: Problem, scorer: PlanScorer, cfg: SearchConfig,
                 runtime=None, spread_parts=None):
        self.tables = list(tables)
        self.problem = problem
        self.n = problem.ndevices
        self.cfg = cfg
        self.scorer = scorer
        self.runtime = runtime  # a torchrec_runtime.TorchRecRuntimeModel: placements are scored by it
        # with the runtime model: the parts of the plan's row-wise and data-parallel tables, fixed while the
        # other tables are placed (`search.spread`)
        self.spread_parts = spread_parts
        cons = problem.table_constraints
        if not cons.empty:
            cons.check(len(self.tables), self.n)
        self.units = _units(len(self.tables), cons)
        self.unit_of = np.empty(len(self.tables), dtype=np.int64)
        for u, members in enumerate(self.units):
            self.unit_of[members] = u
        entries, start, can, allowed = [], [], [], []  # per gid: its tables' configs
        free = cons.empty
        for members in self.units:
            start.append(len(entries))
            devices = None if free else cons.group_devices(members, self.n)
            if devices is not None and len(devices) == self.n:
                devices = None  # every device: no constraint (and no mask to apply)
            whole = len(members) > 1 or (not free and cons.kept_whole(members[0]))
            d = self.tables[members[0]].dim
            while True:
                entries.append([self.tables[t].config.with_dim(d if len(members) == 1 else self.tables[t].dim)
                                for t in members])
                can.append(not whole and cons.may_halve(members[0], d))
                allowed.append(devices)
                if not can[-1]:
                    break
                d //= 2
        # a "gid" is one (unit, split level); splitting gid g gives two gid g+1
        self.start = np.array(start, dtype=np.int64)
        self.can_split = np.array(can, dtype=bool)
        self.dim = np.array([sum(c.dim for c in e) for e in entries], dtype=np.int64)
        self.size = np.array([sum(c.row * c.dim for c in e) for e in entries], dtype=np.int64)  # fp32 elements
        self.pool = np.array([sum(c.pooling_factor for c in e) for e in entries], dtype=np.float64)
        self.piece = np.ones(len(entries), dtype=np.int64)  # 1: a piece of a split table (column-wise)
        self.piece[self.start] = 0
        configs = [c for e in entries for c in e]
        emb = scorer.embed(configs)
        proj = scorer.project(emb)
        if len(configs) != len(entries):  # a co-located group's projection is its tables' sum
            proj = np.add.reduceat(proj, np.cumsum([0] + [len(e) for e in entries[:-1]]), axis=0)
        self.proj = proj  # accumulator increment of each gid
        self.cost1 = scorer.cost_from_acc(scorer.acc0 + self.proj) if configs else np.zeros(0)
        self.allow = None
        if any(a is not None for a in allowed):
            self.allow = np.ones((len(entries), self.n), dtype=bool)
            for g, a in enumerate(allowed):
                if a is not None:
                    self.allow[g] = False
                    self.allow[g, list(a)] = True
        self.cap = np.array(device_caps(problem), dtype=np.int64)
        total_dim = int(sum(t.dim for t in self.tables))
        mean_dim = total_dim / self.n
        # dim_sum + dim <= s * mean_dim, with integer sums, is dim_sum + dim <= floor(s * mean_dim)
        self.scales = cfg.scales()
        limits = [math.floor(s * mean_dim) for s in self.scales]
        if cfg.dim_fallback:
            limits.append(NO_LIMIT)
        self.limits = np.array(limits, dtype=np.int64)
        self.states_scored = 0

    # ---------------------------------------------------------------- units and tables

    @property
    def grouped(self) -> bool:
        """Some unit is a co-located group (plans over units differ from plans over tables)."""
        return len(self.units) != len(self.tables)

    def from_units(self, plan: Plan) -> Plan:
        """A plan over units as a plan over the task's tables: a group's position becomes its tables (on its
        device, in a row), a split's appended half keeps its order after the tables."""
        if not self.grouped:
            return plan
        U, T = len(self.units), len(self.tables)
        step = [int(self.units[i][0]) if i < U else T + i - U for i in plan.column_steps]
        shards = tuple(tuple(j for i in shard for j in (self.units[i] if i < U else [T + i - U]))
                       for shard in plan.shards)
        return Plan(tuple(step), shards)

    def to_units(self, plan: Plan) -> Plan:
        """A plan over the task's tables (its co-located groups on one device) as a plan over units."""
        if not self.grouped:
            return plan
        U, T = len(self.units), len(self.tables)
        steps = tuple(int(self.unit_of[i]) if i < T else U + i - T for i in plan.column_steps)
        shards, placed = [], set()
        for shard in plan.shards:
            out = []
            for j in shard:
                i = int(self.unit_of[j]) if j < T else U + j - T
                if i not in placed:
                    placed.add(i)
                    out.append(i)
            shards.append(tuple(out))
        return Plan(steps, tuple(shards))

    # ---------------------------------------------------------------- beam helpers

    def candidates(self, gids: np.ndarray, n: int) -> np.ndarray:
        """Post-split indices to try splitting: top-n by size ∪ top-n by single-table compute cost."""
        if len(gids) <= n:
            return np.arange(len(gids))
        top_size = np.argsort(-self.size[gids], kind="stable")[:n]
        top_cost = np.argsort(-self.cost1[gids], kind="stable")[:n]
        return np.union1d(top_size, top_cost)

    # ---------------------------------------------------------------- greedy grid search

    def grid_search(self, states: Sequence[np.ndarray]) -> list[_Scored]:
        """Best grid-search placement of each state (all states must have the same table count)."""
        if not states:
            return []
        per_state = state_bytes(self.n, len(states[0]), len(self.limits), self.proj.shape[1])
        per_chunk = max(1, _MAX_BATCH_BYTES // per_state)
        out: list[_Scored] = []
        for i in range(0, len(states), per_chunk):
            out.extend(self._grid_chunk(np.stack(states[i:i + per_chunk])))
        self.states_scored += len(states)
        return out

    def _grid_chunk(self, gids: np.ndarray) -> list[_Scored]:
        """The greedy at every scale for S states of P tables each (one batch), then each state's best."""
        S = len(gids)
        G = len(self.scales)
        # greedy order per state: single-table compute cost desc, ties by index (stable sort)
        order = np.argsort(-self.cost1[gids], axis=1, kind="stable")
        gid_order = np.take_along_axis(gids, order, axis=1)
        res = run_greedy(gid_order, self.limits, self.n, self.cap, self.size, self.dim, self.proj,
                         self.scorer.acc0, self.scorer.cost_from_acc, self.allow)
        costs = self._row_costs(gid_order, res)[res.row_of]
        out = []
        for s in range(S):
            c = costs[s, :G]
            r = int(np.argmin(c))  # first minimum: a later scale must be strictly better
            if not np.isfinite(c[r]) and costs.shape[1] > G and np.isfinite(costs[s, G]):
                r = G
            if not np.isfinite(costs[s, r]):
                out.append(_Scored(math.inf))
                continue
            scale = float(self.scales[r]) if r < G else math.inf
            out.append(_Scored(float(costs[s, r]), scale, order[s].copy(),
                               res.devices[:, res.row_of[s, r]].copy()))
        failed = [s for s in range(S) if not math.isfinite(out[s].cost)] if self.cfg.dim_fallback else []
        if failed:  # too full for the greedy by compute: by memory alone, largest first, scored by the models
            order = size_order(gids[failed], self.size)
            by_size = np.take_along_axis(gids[failed], order, axis=1)
            packed = pack_by_size(by_size, self.n, self.cap, self.size, self.dim, self.proj, self.scorer.acc0,
                                  self.scorer.cost_from_acc, self.allow)
            costs = self._row_costs(by_size, packed)[packed.row_of]
            for k, s in enumerate(failed):
                r = int(np.argmin(costs[k]))
                if np.isfinite(costs[k, r]):
                    out[s] = _Scored(float(costs[k, r]), math.inf, order[k].copy(),
                                     packed.devices[:, packed.row_of[k, r]].copy())
        return out

    def _row_costs(self, gid_order: np.ndarray, res) -> np.ndarray:
        """Each live row's plan cost of `res` (a `GreedyResult` of states `gid_order`), then inf (for row -1)."""
        row_cost = np.full(len(res.compute) + 1, np.inf)
        if len(res.compute) and self.runtime is not None:
            row_cost[:-1] = self._runtime_costs(gid_order, res)
        elif len(res.compute):
            uniq, inv = _distinct_rows(np.concatenate([res.compute.astype(np.float64),
                                                       res.dims.astype(np.float64)], axis=1))
            row_cost[:-1] = score_placements(self.scorer, uniq[:, :self.n], uniq[:, self.n:])[3][inv]
        return row_cost

    def _runtime_costs(self, gid_order: np.ndarray, res) -> np.ndarray:
        """Each placement's cost under the runtime model (`planner.costs.runtime_model`): its pieces' groups
        (a split table's pieces column-wise, the others table-wise), per rank and group their kernels, ids
        and outputs."""
        from neuroshard.planner.costs.runtime_model import features, group_parts

        state = np.zeros(len(res.compute), dtype=np.int64)
        for s in range(len(gid_order)):
            rows = res.row_of[s]
            state[rows[rows >= 0]] = s
        gids = gid_order[state]  # [R, P] in greedy order, as res.devices
        parts = group_parts(self.scorer, self.proj, gids, res.devices.T, self.piece[gids], self.pool[gids],
                            self.dim[gids], self.n, self.runtime.batch_size, self.spread_parts, res.compute)
        return self.runtime.predict(features(parts))

    def plan(self, steps: Sequence[int], scored: _Scored) -> Plan:
        """The plan (over the task's tables) of a scored state reached by `steps` (over units)."""
        shards: list[list[int]] = [[] for _ in range(self.n)]
        for i, d in zip(scored.order, scored.devices):  # greedy order: simulate() accumulates the same way
            shards[int(d)].append(int(i))
        return self.from_units(Plan(tuple(int(s) for s in steps), tuple(tuple(s) for s in shards)))


def _units(ntables: int, cons) -> list[list[int]]:
    """What the search places: each co-located group of `cons` as one unit at its first table's position,
    every other table alone (task order)."""
    group_of = {t: list(g) for g in cons.colocate for t in g}
    units, done = [], set()
    for t in range(ntables):
        if t not in done:
            members = group_of.get(t, [t])
            done.update(members)
            units.append(members)
    return units


_PIECES_COMPARED = 8  # the largest pieces that order infeasible states in the beam
_HASH_WEIGHTS: dict[int, np.ndarray] = {}


def _distinct_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct rows, index of each row's copy): several scales often give the same placement,
    which is then scored once. Rows are matched by a random projection, then checked exactly
    (np.unique(axis=0) is 10x slower for a few hundred rows)."""
    w = _HASH_WEIGHTS.get(x.shape[1])
    if w is None:
        w = _HASH_WEIGHTS[x.shape[1]] = np.random.default_rng(0).uniform(1.0, 2.0, size=x.shape[1])
    h = x @ w
    _, first, inv = np.unique(h, return_index=True, return_inverse=True)
    uniq = x[first]
    if not np.array_equal(uniq[inv], x):  # two different rows with the same projection
        uniq, inv = np.unique(x, axis=0, return_inverse=True)
    return uniq, inv.ravel()


def _check_models(scorer: PlanScorer, problem: Problem) -> None:
    if scorer.ndevices != problem.ndevices:
        raise NeuroShardError(f"the comm cost models are for {scorer.ndevices} devices, the task has "
                              f"{problem.ndevices}")


def _oom(tables: Sequence[ShardTable], problem: Problem) -> OutOfMemoryError:
    sizes = [t.size_gb for t in tables]
    big = int(np.argmax(sizes)) if sizes else None
    bound = "" if problem.table_constraints.empty else " within the table constraints"
    return OutOfMemoryError(
        f"neuroshard found no placement of {len(tables)} tables ({sum(sizes):.3g} GB, largest "
        f"{max(sizes, default=0):.3g} GB) on {problem.ndevices} devices of {problem.mem_text}{bound}",
        table=big, size=sizes[big] if sizes else None, max_mem=min(problem.caps))


def grid_search(tables: Sequence[ShardTable], problem: Problem, models,
                config: SearchConfig | None = None) -> tuple[Plan, float]:
    """Greedy grid search without splits: the best placement and its cost (ms); OutOfMemoryError if none."""
    with single_threaded_blas():
        space = make_space(tables, problem, models, config)
        [res] = space.grid_search([space.start.copy()])
        if not math.isfinite(res.cost):
            raise _oom(tables, problem)
        return space.plan((), res), res.cost


def search(tables: Sequence[ShardTable], problem: Problem, models,
           config: SearchConfig | None = None) -> SearchResult:
    """NeuroShard's beam search + greedy grid search; OutOfMemoryError when no state fits."""
    with single_threaded_blas():
        t0 = time.perf_counter()
        return beam_search(make_space(tables, problem, models, config), t0)


def make_space(tables: Sequence[ShardTable], problem: Problem, models,
               config: SearchConfig | None = None, spread_parts=None) -> SearchSpace:
    """The per-task precomputation of the search (every table at every split level, embedded once);
    `spread_parts`: see `SearchSpace`."""
    scorer = get_scorer(models)
    _check_models(scorer, problem)
    return SearchSpace(tables, problem, scorer, config or SearchConfig(), models.runtime, spread_parts)


def beam_search(space: SearchSpace, t0: float | None = None, keep: int = 0) -> SearchResult:
    """NeuroShard's beam search on a prepared problem (call under `single_threaded_blas`);
    OutOfMemoryError when no state fits. `t0`: perf_counter at the start, for `seconds`. `keep`: also
    return the `keep` cheapest states seen (any round, the start too) as `candidates`, cheapest first."""
    t0 = time.perf_counter() if t0 is None else t0
    cfg, tables = space.cfg, space.tables
    start = space.start.copy()
    [start_res] = space.grid_search([start])
    best_steps: tuple[int, ...] = ()
    best = start_res
    beam = [((), start, start_res.cost)]
    seen_states = [(start_res.cost, 0, (), start_res)] if keep else []  # (cost, order, steps, placement)
    history = [best.cost]
    rounds = 0
    for _ in range(cfg.max_length):
        children, seen = [], set()
        for steps, gids, _cost in beam:
            idx = space.candidates(gids, cfg.beam_n)
            idx = idx[space.can_split[gids[idx]]]
            if not len(idx):
                continue
            # all children of this state at once: piece i becomes the next split level, plus its twin
            kids = np.empty((len(idx), len(gids) + 1), dtype=gids.dtype)
            kids[:, :-1] = gids
            kids[np.arange(len(idx)), idx] += 1
            kids[:, -1] = gids[idx] + 1
            keys = np.sort(kids, axis=1)  # the multiset of (table, level) pieces
            for m, i in enumerate(idx):
                key = keys[m].tobytes()
                if key not in seen:
                    seen.add(key)
                    children.append((steps + (int(i),), kids[m]))
        if not children:
            break
        rounds += 1
        scored = space.grid_search([c for _, c in children])
        for (steps, _), res in zip(children, scored):
            if res.cost < best.cost:
                best, best_steps = res, steps
        if keep:  # the cheapest states so far (states reached in an earlier round are other piece sets)
            seen_states += [(res.cost, len(seen_states) + m, steps, res)
                            for m, ((steps, _), res) in enumerate(zip(children, scored)) if math.isfinite(res.cost)]
            seen_states = sorted(seen_states, key=lambda s: (s[0], s[1]))[:keep]
        history.append(best.cost)
        # cheapest first; among states that fit nowhere, those with the smallest pieces (largest first,
        # compared in turn): the beam splits toward a packing rather than at random among equally infeasible
        # states
        pieces = [tuple(np.sort(space.size[c])[::-1][:_PIECES_COMPARED].tolist())
                  if not math.isfinite(res.cost) else () for (_, c), res in zip(children, scored)]
        ranked = sorted(range(len(children)), key=lambda m: (scored[m].cost, pieces[m]))[:cfg.beam_k]
        beam = [(children[m][0], children[m][1], scored[m].cost) for m in ranked]

    if not math.isfinite(best.cost):
        raise _oom(tables, space.problem)
    start_plan = space.plan((), start_res) if math.isfinite(start_res.cost) else None
    candidates = [(c, space.plan(steps, res)) for c, _, steps, res in seen_states if math.isfinite(c)]
    return SearchResult(plan=space.plan(best_steps, best), cost=best.cost, start_plan=start_plan,
                        start_cost=start_res.cost, scale=best.scale, states_scored=space.states_scored,
                        candidates=candidates,
                        rounds=rounds, seconds=time.perf_counter() - t0, history=history)
