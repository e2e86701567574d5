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
(`PlanScorer.project`) and one placement costs O(64); the greedy runs all
grid scales of all children of a beam round as rows of one batch, one
vectorised NumPy step per table; rows that fail are dropped; placements
that several scales share are scored once, all in one call of the comm
models; children reached twice in a round are scored once. Ties in the
greedy are exact: costs are computed row by row (no BLAS), so equal shards
get bit-equal costs whichever batch they are in.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, fields
from typing import Sequence

import numpy as np

from neuroshard.checks import check_float, check_int
from neuroshard.planner.models import require_models
from neuroshard.planner.registry import ShardingContext, register
from neuroshard.planner.scorer import PlanScorer, get_scorer, single_threaded_blas
from neuroshard.planner.simulator import mem_cap_elements, score_placements
from neuroshard.types import ConfigError, NeuroShardError, OutOfMemoryError, Plan, ShardTable, can_split

# The rows of one batched greedy are chunked so its per-device arrays stay below this size.
_MAX_BATCH_BYTES = 64 * 2**20
# "No limit" for memory or dim budgets; small enough that subtracting sizes never wraps around.
_NO_LIMIT = np.iinfo(np.int64).max // 4


# Help text of each SearchConfig field, for its flag.
_HELP = {
    "beam_k": "beam width k",
    "beam_n": "split candidates per state: the n largest tables by size and by compute cost",
    "max_length": "beam search rounds (most splits)",
    "grid_steps": "greedy grid search: number of dim-limit scales, evenly spaced in [grid_min, grid_max]",
    "grid_min": "smallest dim-limit scale (a device may hold up to scale x the mean dim sum)",
    "grid_max": "largest dim-limit scale",
    "dim_fallback": "if every scale fails only because of the dim limit, run the greedy once more without it "
                    "(beyond the paper; 0 to turn off)",
}


@dataclass(frozen=True)
class SearchConfig:
    """NeuroShard search settings (paper defaults). Every field is a flag of the same name."""

    beam_k: int = 3
    beam_n: int = 10
    max_length: int = 10
    grid_steps: int = 11
    grid_min: float = 1.0
    grid_max: float = 1.5
    dim_fallback: bool = True

    def __post_init__(self):
        for name in ("beam_k", "beam_n", "grid_steps"):
            check_int(f"--{name}", getattr(self, name), 1)
        check_int("--max_length", self.max_length, 0)
        check_float("--grid_min", self.grid_min, 0.0, lo_open=True)
        if check_float("--grid_max", self.grid_max) < self.grid_min:
            raise ConfigError("--grid_max", f"must be >= --grid_min {self.grid_min:g}, got {self.grid_max:g}")

    @classmethod
    def from_options(cls, options: dict | None) -> "SearchConfig":
        """Pick this search's keys out of `ShardingContext.options` (other keys are ignored)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in (options or {}).items() if k in names and v is not None})

    def scales(self) -> np.ndarray:
        return np.linspace(self.grid_min, self.grid_max, self.grid_steps)

    @classmethod
    def add_args(cls, parser) -> None:
        """One flag per field (defaults from the dataclass), shared by every script that searches."""
        g = parser.add_argument_group("NeuroShard search (DESIGN §8; paper defaults)")
        for f in fields(cls):
            kind = {"int": int, "float": float, "bool": lambda text: bool(int(text))}[f.type]
            g.add_argument(f"--{f.name}", type=kind, default=f.default,
                           help=f"{_HELP[f.name]} (default: {int(f.default) if f.type == 'bool' else f.default})")

    @classmethod
    def options_from_args(cls, args) -> dict:
        """`ShardingContext.options` from the parsed flags, checked (one-line error on a bad value)."""
        options = {f.name: getattr(args, f.name) for f in fields(cls)}
        cls.from_options(options)
        return options


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


class _Problem:
    """Per-task precomputation: every table at every dim it can be split to, embedded once."""

    def __init__(self, tables: Sequence[ShardTable], ndevices: int, max_mem: float,
                 scorer: PlanScorer, cfg: SearchConfig):
        self.tables = list(tables)
        self.n = int(ndevices)
        self.cfg = cfg
        self.scorer = scorer
        configs, start, can = [], [], []
        for t in self.tables:
            start.append(len(configs))
            d = t.dim
            while True:
                configs.append(t.config.with_dim(d))
                can.append(can_split(d))
                if not can_split(d):
                    break
                d //= 2
        # a "gid" is one (table, split level); splitting gid g gives two gid g+1
        self.start = np.array(start, dtype=np.int64)
        self.can_split = np.array(can, dtype=bool)
        self.dim = np.array([c.dim for c in configs], dtype=np.int64)
        self.size = np.array([c.row * c.dim for c in configs], dtype=np.int64)  # fp32 elements
        emb = scorer.embed(configs)
        self.proj = scorer.project(emb)  # accumulator increment of each gid
        self.cost1 = scorer.cost_from_acc(scorer.acc0 + self.proj) if configs else np.zeros(0)
        self.cap = mem_cap_elements(max_mem)
        self.max_mem = max_mem
        total_dim = int(sum(t.dim for t in self.tables))
        mean_dim = total_dim / self.n
        # dim_sum + dim <= s * mean_dim, with integer sums, is dim_sum + dim <= floor(s * mean_dim)
        self.scales = cfg.scales()
        limits = [math.floor(s * mean_dim) for s in self.scales]
        if cfg.dim_fallback:
            limits.append(_NO_LIMIT)
        self.limits = np.array(limits, dtype=np.int64)
        self.states_scored = 0

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
        row_bytes = len(self.limits) * self.n * (self.proj.shape[1] * 8 + 40)
        per_chunk = max(1, _MAX_BATCH_BYTES // max(1, row_bytes))
        out: list[_Scored] = []
        for i in range(0, len(states), per_chunk):
            out.extend(self._grid_chunk(np.stack(states[i:i + per_chunk])))
        self.states_scored += len(states)
        return out

    def _grid_chunk(self, gids: np.ndarray) -> list[_Scored]:
        """The greedy at every scale for S states of P tables each (one batch), then each state's best."""
        S, P = gids.shape
        n, R, G = self.n, len(self.limits), len(self.scales)
        # greedy order per state: single-table compute cost desc, ties by index (stable sort)
        order = np.argsort(-self.cost1[gids], axis=1, kind="stable")
        gid_order = np.take_along_axis(gids, order, axis=1)

        # One row per (state, scale). Per-device arrays are row-major [rows, n], so "device d
        # of row b" is the flat index b * n + d.
        B = S * R
        row_state = np.repeat(np.arange(S), R)
        limit = np.tile(self.limits, S)
        mroom = np.full((B, n), self.cap, dtype=np.int64)  # memory left (fp32 elements)
        droom = np.repeat(limit[:, None], n, axis=1)  # dims left under the row's dim limit
        cost = np.zeros((B, n), dtype=self.proj.dtype)  # current compute ms (0: empty)
        acc = np.tile(self.scorer.acc0, (B * n, 1))  # compute-model accumulators
        dev_hist = np.zeros((P, B), dtype=np.int32)  # device chosen at each step, by original row
        ok = np.ones(B, dtype=bool)  # row has not failed

        rid = np.arange(B)  # original row of each current row (failed rows get compacted away)
        compacted = False
        n_failed = 0
        gid_cur = gid_order[row_state]  # per row and step: the table, its size and its dim
        sz_cur, dm_cur = self.size[gid_cur], self.dim[gid_cur]
        base = np.arange(B) * n
        mflat, dflat, cflat = mroom.ravel(), droom.ravel(), cost.ravel()
        proj, head = self.proj, self.scorer.cost_from_acc
        for j in range(P):
            g, sz, dm = gid_cur[:, j], sz_cur[:, j], dm_cur[:, j]
            fits = mroom >= sz[:, None]
            fits &= droom >= dm[:, None]
            key = np.where(fits, cost, np.inf)
            dev = key.argmin(axis=1)
            fi = base + dev
            kflat = key.ravel()
            best = kflat[fi]
            if n > 1 and np.count_nonzero(key == best[:, None]) > len(best):
                # some row has equal costs at its minimum: least memory used (most room left),
                # then lowest device (NumPy's min/max along a short axis are slow; argmin is not)
                kflat[fi] = np.inf
                tie = (kflat[base + key.argmin(axis=1)] == best) & (best < np.inf)
                t = np.flatnonzero(tie)
                if len(t):
                    kflat[fi[t]] = best[t]
                    dev[t] = np.where(key[t] == best[t, None], mroom[t], -1).argmax(axis=1)
                    fi[t] = base[t] + dev[t]
            if best.max() == np.inf:
                d = np.flatnonzero(best == np.inf)
                ok[rid[d]] = False
                n_failed += len(d)
                if n_failed == len(rid):
                    break
                # park failed rows: unlimited room, so they never fail again; their results are ignored
                mroom[d] = _NO_LIMIT
                droom[d] = _NO_LIMIT
                if 3 * n_failed >= len(rid):  # drop them once they are a third of the rows
                    keep = ok[rid]
                    rid, g, sz, dm, dev = rid[keep], g[keep], sz[keep], dm[keep], dev[keep]
                    gid_cur, sz_cur, dm_cur = gid_cur[keep], sz_cur[keep], dm_cur[keep]
                    mroom, droom, cost = mroom[keep], droom[keep], cost[keep]
                    mflat, dflat, cflat = mroom.ravel(), droom.ravel(), cost.ravel()
                    acc = acc[(np.flatnonzero(keep)[:, None] * n + np.arange(n)).ravel()]
                    base = np.arange(len(rid)) * n
                    fi = base + dev
                    compacted, n_failed = True, 0
            a = np.take(acc, fi, axis=0)
            a += np.take(proj, g, axis=0)
            acc[fi] = a
            cflat[fi] = head(a, overwrite=True)
            mflat[fi] -= sz
            dflat[fi] -= dm
            if compacted:
                dev_hist[j, rid] = dev
            else:
                dev_hist[j] = dev

        costs = np.full(B, np.inf)
        live = ok[rid]
        if live.any():
            compute = cost[live].astype(np.float64)
            dims = (limit[rid[live]][:, None] - droom[live]).astype(np.float64)
            uniq, inv = _distinct_rows(np.concatenate([compute, dims], axis=1))
            costs[rid[live]] = score_placements(self.scorer, uniq[:, :n], uniq[:, n:])[3][inv]
        costs = costs.reshape(S, R)
        out = []
        for s in range(S):
            c = costs[s, :G]
            r = int(np.argmin(c))  # first minimum: a later scale must be strictly better
            if not np.isfinite(c[r]) and R > G and np.isfinite(costs[s, G]):
                r = G
            if not np.isfinite(costs[s, r]):
                out.append(_Scored(math.inf))
                continue
            scale = float(self.scales[r]) if r < G else math.inf
            out.append(_Scored(float(costs[s, r]), scale, order[s].copy(), dev_hist[:, s * R + r].copy()))
        return out

    def plan(self, steps: Sequence[int], scored: _Scored) -> Plan:
        shards: list[list[int]] = [[] for _ in range(self.n)]
        for i, d in zip(scored.order, scored.devices):  # greedy order: simulate() accumulates the same way
            shards[int(d)].append(int(i))
        return Plan(tuple(int(s) for s in steps), tuple(tuple(s) for s in shards))


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


def _check_models(scorer: PlanScorer, ndevices: int) -> None:
    if scorer.ndevices != ndevices:
        raise NeuroShardError(f"the comm cost models are for {scorer.ndevices} devices, the task has {ndevices}")


def _oom(tables: Sequence[ShardTable], ndevices: int, max_mem: float) -> OutOfMemoryError:
    sizes = [t.size_gb for t in tables]
    big = int(np.argmax(sizes)) if sizes else None
    return OutOfMemoryError(
        f"neuroshard found no placement of {len(tables)} tables ({sum(sizes):.3g} GB, largest "
        f"{max(sizes, default=0):.3g} GB) on {ndevices} devices of {max_mem:g} GB",
        table=big, size=sizes[big] if sizes else None, max_mem=max_mem)


def grid_search(tables: Sequence[ShardTable], ndevices: int, max_mem: float, models,
                config: SearchConfig | None = None) -> tuple[Plan, float]:
    """Greedy grid search without splits: the best placement and its cost (ms); OutOfMemoryError if none."""
    with single_threaded_blas():
        return _grid_search(tables, ndevices, max_mem, models, config)


def _grid_search(tables, ndevices, max_mem, models, config):
    cfg = config or SearchConfig()
    scorer = get_scorer(models)
    _check_models(scorer, ndevices)
    prob = _Problem(tables, ndevices, max_mem, scorer, cfg)
    [res] = prob.grid_search([prob.start.copy()])
    if not math.isfinite(res.cost):
        raise _oom(tables, ndevices, max_mem)
    return prob.plan((), res), res.cost


def search(tables: Sequence[ShardTable], ndevices: int, max_mem: float, models,
           config: SearchConfig | None = None) -> SearchResult:
    """NeuroShard's beam search + greedy grid search; OutOfMemoryError when no state fits."""
    with single_threaded_blas():
        return _search(tables, ndevices, max_mem, models, config)


def _search(tables, ndevices, max_mem, models, config) -> SearchResult:
    t0 = time.perf_counter()
    cfg = config or SearchConfig()
    scorer = get_scorer(models)
    _check_models(scorer, ndevices)
    prob = _Problem(tables, ndevices, max_mem, scorer, cfg)

    start = prob.start.copy()
    [start_res] = prob.grid_search([start])
    best_steps: tuple[int, ...] = ()
    best = start_res
    beam = [((), start, start_res.cost)]
    history = [best.cost]
    rounds = 0
    for _ in range(cfg.max_length):
        children, seen = [], set()
        for steps, gids, _cost in beam:
            idx = prob.candidates(gids, cfg.beam_n)
            idx = idx[prob.can_split[gids[idx]]]
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
        scored = prob.grid_search([c for _, c in children])
        for (steps, _), res in zip(children, scored):
            if res.cost < best.cost:
                best, best_steps = res, steps
        history.append(best.cost)
        ranked = sorted(range(len(children)), key=lambda m: scored[m].cost)[:cfg.beam_k]
        beam = [(children[m][0], children[m][1], scored[m].cost) for m in ranked]

    if not math.isfinite(best.cost):
        raise _oom(tables, ndevices, max_mem)
    start_plan = prob.plan((), start_res) if math.isfinite(start_res.cost) else None
    return SearchResult(plan=prob.plan(best_steps, best), cost=best.cost, start_plan=start_plan,
                        start_cost=start_res.cost, scale=best.scale, states_scored=prob.states_scored,
                        rounds=rounds, seconds=time.perf_counter() - t0, history=history)


@register("neuroshard")
def neuroshard(tables: Sequence[ShardTable], ndevices: int, max_mem: float, ctx: ShardingContext) -> Plan:
    """NeuroShard (beam search over column splits + greedy grid search) under ctx's cost models.

    Options (ctx.options): the fields of SearchConfig. Raises OutOfMemoryError when no plan fits.
    """
    models = require_models(ctx.models if ctx is not None else None, "neuroshard")
    return search(tables, ndevices, max_mem, models, SearchConfig.from_options(ctx.options)).plan
