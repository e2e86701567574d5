"""NeuroShard+ (`--alg neuroshard_plus`): NeuroShard's search, then local search from several starts.

Beyond the paper, with the same pre-trained cost models and simulator:

1. Starts. NeuroShard's own plan (beam search + greedy grid search), its
   no-split grid-search plan, and the plan of every registered plain sharder
   (`registry.is_plain`: no trained policy, no optional package — `random`,
   the greedy baselines, plug-ins; not TorchRec, whose planner takes seconds,
   nor DreamShard/AutoShard), each run through `planner.shard.shard`.
2. Descent from each of the `plus_starts` best distinct starts (variable
   neighbourhood descent on the simulated plan cost). The simple
   neighbourhood, scored in one batch: every move of one piece (a table or
   a split half) to another device; every swap of a piece on the bottleneck
   device (the one with the largest total) with a piece elsewhere; every
   trade of two devices' whole shards (the comm models are not symmetric in
   the devices); and, with `plus_splits`, every column split of a piece
   with the new half on another device (two halves on one device cost more
   than the whole table on hardware, see `types.merge_colocated_halves`,
   which also undoes such splits in the final plan), so splits are chosen
   by their effect on the plan cost. On big tasks only pieces on the bottleneck move or split. When no
   simple candidate lowers the cost, the compound neighbourhood (while the
   bottleneck holds few pieces): two pieces off the bottleneck to one
   device, for nothing or for one of its pieces, and one piece for two;
   then (up to 6 devices) every order of the shards on the devices. The
   best candidate is taken while it lowers the cost by at least 0.1%
   (`_COARSE_GAIN`), up to `plus_max_moves` moves; new splits only once
   the descent without them is done (a split cannot be undone). Then the
   best of these local optima is descended from again taking any gain
   above 0.01% (`_MIN_GAIN`). Small gains are mostly the objective's own
   sampling noise: a move that gains less than 0.1% under the search's
   fixed noise draws (`planner.costs.uncertainty`) often gains nothing under
   other draws, and such moves are many. The starts' descents win about
   equally often, so every start is still descended.
3. Tabu search across the plateau of the best local optimum
   (`plus_tabu` steps): the best simple candidate that does not raise the
   cost is taken even if it does not lower it either, but a piece just
   moved (or a device pair just traded) may not move back for a few
   steps, and a trade of two whole shards only if it lowers the cost (it
   opens no new move); each new best is descended from again. Tables of
   equal dims make such plateaus: a split whose halves balance the
   devices only after a second move. Steps that may raise the cost (as
   before) found 0.003% less under other draws than none, for 7% of
   NeuroShard+'s time.
4. The result is the plan with the lowest objective of all starts and all
   search results, so it is never above any baseline it ran, nor above
   NeuroShard's own plan, by that objective.

Against taking every gain above 0.01% from every start and four tabu
steps that may raise the cost (the search until this change), 2. and 3.
take 0.65-0.75x the time, and their plans cost 0.08% more by the search's
objective and 0.09% more under other draws (mean of 36 tasks; 17 worse,
16 better); with single models and the point cost
(`benchmarks/bench_search.py --parts baselines`), NeuroShard+ was 0.11%
and 0.31% below NeuroShard on 4 and 8 devices, against 0.15% and 0.38%.

The objective (`_Objective`): with `plus_robust` and models that carry an
uncertainty (an ensemble, or the measured noise of one measurement, see
`planner.costs.uncertainty`), the cost distribution's mean + `plus_lambda` x sd:
the expected measured cost with a margin for what the models do not know,
so that the search does not pick, among near-equal plans, those the models
under-predict most (a search that compares many candidates against the same
estimates otherwise does: the winner's curse). Otherwise the simulated point
cost (`simulate`), as before.

Candidate costs come from the search's per-device accumulators
(`SearchSpace`, `PlanScorer`): a candidate changes two devices, whose
compute costs are re-predicted from accumulator increments; the `_KEEP`
candidates with the lowest estimate (new compute costs, present comm costs)
get their comm costs from one call of the comm models
(`simulator.score_placements`). Everything is deterministic.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from typing import ClassVar, Sequence

import numpy as np

from neuroshard.checks import check_float, check_int
from neuroshard.planner.costs.cost_models import require_models
from neuroshard.planner.costs.scorer import single_threaded_blas
from neuroshard.planner.costs.uncertainty import cost_samples, robust_cost
from neuroshard.planner.registry import (
    ShardingContext,
    algorithm_names,
    is_plain,
    options_for,
    register,
    required_option,
)
from neuroshard.planner.search.beam import (
    SearchConfig,
    SearchSpace,
    beam_search,
    make_space,
)
from neuroshard.planner.simulator import score_placements, simulate
from neuroshard.problem import Problem
from neuroshard.settings import Settings, setting
from neuroshard.types.errors import (
    ConfigError,
    InputError,
    NeuroShardError,
    OutOfMemoryError,
)
from neuroshard.types.plan import Plan, merge_colocated_halves
from neuroshard.types.tables import ShardTable

NAME = "neuroshard_plus"
# A move must lower the plan cost by more than this fraction (float noise is not progress) ...
_MIN_GAIN = 1e-4
# ... and by more than this in the descents from the starts (module doc, 2.)
_COARSE_GAIN = 1e-3
# Above this many single-piece moves per round, only pieces on the bottleneck device move or split.
_MAX_MOVES_PER_ROUND = 20000
# Compound exchanges are tried only while (pairs of pieces on the bottleneck) x (pieces elsewhere)
# stays below this (they cost more than they find on devices that hold many pieces).
_MAX_COMPOUND = 2000
# Above this many device pairs, only the bottleneck trades its whole shard (with each other device).
_MAX_TRADES = 256
# Up to this many devices, a descent that is stuck tries every order of the shards on the devices.
_MAX_RELABEL_DEVICES = 6
# Candidates scored by the comm models per round: the best by a compute-only estimate.
_KEEP = 256
# Tabu search: a moved piece (or traded device pair) may not move again for this many steps.
_TENURE = 3


@dataclass(frozen=True)
class PlusConfig(Settings):
    """NeuroShard+ settings beyond SearchConfig's (which its inner NeuroShard search uses)."""

    TITLE: ClassVar[str] = "NeuroShard+ (--alg neuroshard_plus; beyond the paper)"

    plus_starts: int = setting(3, "neuroshard_plus: local search from this many of the best distinct starting plans")
    plus_max_moves: int = setting(200, "neuroshard_plus: most moves per local search (0: no local search)")
    plus_tabu: int = setting(2, "neuroshard_plus: tabu-search steps from the best local optimum the descents found "
                                "(moves that do not lower the cost, to cross a plateau; 0: none)")
    plus_splits: bool = setting(True, "neuroshard_plus: the local search may split tables, the new half on any "
                                      "device (0 to turn off)")
    plus_baselines: str = setting("auto", "neuroshard_plus: sharders to start from and never to be above: 'auto' "
                                          "(every registered one that needs no trained policy), 'none', or a comma "
                                          "list")
    plus_robust: bool = setting(True, "neuroshard_plus: minimise the cost distribution's mean + plus_lambda x sd "
                                      "(the models' ensemble members and the measured noise of one measurement: "
                                      "the expected measured cost, not the cost of the mean parts) when the models "
                                      "have an uncertainty; 0: the point cost")
    plus_lambda: float = setting(0.5, "neuroshard_plus: the weight of the cost's sd in the robust objective (the "
                                      "pipeline chooses it on the training tasks)")

    def __post_init__(self):
        check_float("--plus_lambda", self.plus_lambda, 0.0)
        check_int("--plus_starts", self.plus_starts, 1)
        check_int("--plus_max_moves", self.plus_max_moves, 0)
        check_int("--plus_tabu", self.plus_tabu, 0)
        self.baselines()  # names must be known

    def baselines(self) -> list[str]:
        """The sharders to run as starts (never NeuroShard itself, never this one)."""
        names = [a for a in algorithm_names() if a not in ("neuroshard", NAME)]
        text = self.plus_baselines.strip()
        if text == "auto":
            return [a for a in names if is_plain(a)]
        if text == "none":
            return []
        wanted = [a.strip() for a in text.split(",") if a.strip()]
        unknown = [a for a in wanted if a not in names]
        if unknown:
            raise ConfigError("--plus_baselines", f"unknown sharder {', '.join(unknown)}; choose from "
                                                  f"auto, none, {', '.join(names)}")
        return wanted


@dataclass
class PlusResult:
    """What NeuroShard+ found: the best plan, its simulated cost (ms) and where it came from."""

    plan: Plan
    cost: float
    source: str  # the start it came from ("neuroshard", "neuroshard_no_split" or a baseline's name)
    refined: bool  # True if the local search improved on that start
    start_costs: dict  # simulated cost of each start (inf: no plan)
    neuroshard_cost: float
    moves: int  # moves taken, all local searches together (tabu steps included)
    seconds: float
    candidates: list = field(default_factory=list)  # (cost, source, plan) of the `keep` best distinct plans seen


# --------------------------------------------------------------------------- local search


class _Extended:
    """Per-gid tables with one more, all-zero entry at the end (index -1 = "no piece")."""

    def __init__(self, space: SearchSpace):
        self.proj = np.vstack([space.proj, np.zeros((1, space.proj.shape[1]), dtype=space.proj.dtype)])
        self.size = np.append(space.size, 0)
        self.dim = np.append(space.dim, 0)


class _Objective:
    """What the local search minimises for placements: the point cost (the largest total of the models'
    mean parts: `simulator.score_placements`) or, `robust`, the cost distribution's mean + `lam` x sd
    (`planner.costs.uncertainty`: every ensemble member's parts with the measurement noise). Without an
    ensemble or a known noise the two are the same, and the point cost is used."""

    def __init__(self, scorer, noise, robust: bool, lam: float):
        self.scorer, self.noise, self.lam = scorer, noise, lam
        self.robust = robust and (scorer.members > 1 or not noise.zero)

    def __call__(self, compute: np.ndarray, dims: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(objective [M], per-device mean totals [M, n]) of placements: per-device compute ms (the
        members' [K, M, n] when robust, else the mean [M, n]) and dim sums [M, n]."""
        dims = np.asarray(dims, dtype=np.float64)
        if not self.robust:
            _, _, total, cost = score_placements(self.scorer, compute, dims)
            return cost, total
        bw, fw = self.scorer.comm_members(dims, compute)
        samples = cost_samples(compute, bw, fw, self.noise)
        return robust_cost(samples, self.lam), (compute + bw + fw).mean(axis=0)


class _State:
    """A placement under local search: post-split pieces (gids), column steps, per-device shards
    (in accumulation order) and per-device accumulators, compute ms (the members' mean, and each
    member's when the objective is robust), dim sums, memory, counts."""

    def __init__(self, space: SearchSpace, plan: Plan, objective: _Objective):
        self.space = space
        self.objective = objective
        self.ext = _Extended(space)
        plan = space.to_units(plan)
        gids = list(space.start)
        for i in plan.column_steps:  # as types.apply_column_steps: halve piece i, append its twin
            gids[i] += 1
            gids.append(gids[i])
        self.gids = gids
        self.steps = list(plan.column_steps)
        self.shards = [list(s) for s in plan.shards]
        self.dev = np.empty(len(gids), dtype=np.int64)
        for d, shard in enumerate(self.shards):
            self.dev[shard] = d
        n, A = space.n, space.proj.shape[1]
        self.acc = np.empty((n, A), dtype=space.proj.dtype)
        self.compute = np.zeros(n)
        self.member_compute = np.zeros((space.scorer.members, n))
        self.dims = np.zeros(n, dtype=np.int64)
        self.mem = np.zeros(n, dtype=np.int64)
        self.count = np.zeros(n, dtype=np.int64)
        for d in range(n):
            self._refresh(d)

    def _refresh(self, d: int) -> None:
        """Device d's sums from its shard, accumulated in shard order (as the simulator does)."""
        space, shard = self.space, self.shards[d]
        g = np.array([self.gids[i] for i in shard], dtype=np.int64)
        acc = space.scorer.acc0.copy()
        for row in space.proj[g]:
            acc += row
        self.acc[d] = acc
        self.count[d] = len(g)
        self.compute[d] = float(space.scorer.cost_from_acc(acc[None])[0]) if len(g) else 0.0
        if self.objective.robust:
            self.member_compute[:, d] = space.scorer.member_costs_from_acc(acc[None])[0] if len(g) else 0.0
        self.dims[d] = space.dim[g].sum()
        self.mem[d] = space.size[g].sum()

    def copy(self) -> "_State":
        new = object.__new__(_State)
        new.space, new.ext, new.gids, new.steps = self.space, self.ext, list(self.gids), list(self.steps)
        new.objective = self.objective
        new.shards = [list(s) for s in self.shards]
        for name in ("dev", *_PER_DEVICE):
            setattr(new, name, getattr(self, name).copy())
        return new

    def compute_for(self, rows) -> np.ndarray:
        """The objective's compute input of placements that keep this state's devices: `rows` copies of
        this state's (each member's [K, rows, n] when robust, else [rows, n])."""
        if self.objective.robust:
            return np.repeat(self.member_compute[:, None, :], rows, axis=1)
        return np.tile(self.compute, (rows, 1))

    def cost(self) -> tuple[float, np.ndarray]:
        """(plan objective ms, per-device totals ms)."""
        cost, total = self.objective(self.compute_for(1), self.dims[None])
        return float(cost[0]), total[0]

    def plan(self) -> Plan:
        """The state's plan over the task's tables."""
        return self.space.from_units(Plan(tuple(self.steps), tuple(tuple(s) for s in self.shards)))

    def fits(self) -> np.ndarray:
        """[n, n] bool: whether device a's whole shard may go to device b (b's memory, the devices its
        pieces may use)."""
        space = self.space
        ok = self.mem[:, None] <= space.cap[None, :]
        if space.allow is not None:
            for a, shard in enumerate(self.shards):
                if shard:
                    ok[a] &= space.allow[[self.gids[i] for i in shard]].all(axis=0)
        return ok


# a state's per-device arrays (the device is the first axis, the last for member_compute)
_PER_DEVICE = ("acc", "compute", "member_compute", "dims", "mem", "count")


@dataclass
class _Candidates:
    """Candidate changes of two devices each, `src` and `dst`. Pieces `out` [K, 2] go from src to dst,
    pieces `back` [K, 2] from dst to src (-1: none); `split` marks a split of piece out[:, 0] (on src)
    whose new half goes to dst; `whole` a trade of the two devices' whole shards (the comm models are
    not symmetric in the devices, so which device holds which shard matters). `acc` [K, 2, A]: src's
    and dst's accumulators after the change (`_score` overwrites them); `d_mem`, `d_dim`, `d_count`
    [K, 2]: the increments of their other sums."""

    src: np.ndarray
    dst: np.ndarray
    out: np.ndarray
    back: np.ndarray
    split: np.ndarray
    whole: np.ndarray
    acc: np.ndarray
    d_mem: np.ndarray
    d_dim: np.ndarray
    d_count: np.ndarray


def _pairs(pieces: np.ndarray) -> np.ndarray:
    """Every unordered pair of `pieces`, [K, 2]."""
    a, b = np.triu_indices(len(pieces), k=1)
    return np.stack([pieces[a], pieces[b]], axis=1)


def _one(pieces: np.ndarray) -> np.ndarray:
    """`pieces` as [K, 2] slots (the second empty)."""
    return np.stack([pieces, np.full(len(pieces), -1)], axis=1)


def _product(outs: np.ndarray, backs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every (out, back) combination of the rows of outs and backs."""
    return np.repeat(outs, len(backs), axis=0), np.tile(backs, (len(outs), 1))


def _candidates(state: _State, bottleneck: int, splits: bool, compound: bool) -> _Candidates | None:
    """Every move of one piece to another device, every swap of a piece on the bottleneck with one
    elsewhere, every trade of two devices' whole shards, and (with `splits`) every split of a piece
    with the new half on any device; on big tasks only pieces on the bottleneck move or split, and
    only the bottleneck trades. With `compound`, instead: two pieces off the bottleneck to one
    device, two for one and one for two (only while there are few such exchanges)."""
    space = state.space
    n = space.n
    if n == 1:
        return None
    gids = np.asarray(state.gids, dtype=np.int64)
    dev = state.dev
    P = len(gids)
    on_b = np.flatnonzero(dev == bottleneck)
    others = np.flatnonzero(dev != bottleneck)
    rows = []  # (src, dst, out, back, kind): kind 0 exchange, 1 split, 2 whole-shard trade

    def add(src, dst, out, back, kind=0):
        if len(out):
            rows.append((np.broadcast_to(src, len(out)), np.broadcast_to(dst, len(out)), out, back,
                         np.full(len(out), kind)))

    if not compound:
        # one piece moves (every piece, or on big tasks every piece on the bottleneck)
        movers = np.arange(P) if P * (n - 1) <= _MAX_MOVES_PER_ROUND else on_b
        i = np.repeat(movers, n - 1)
        src = dev[i]
        add(src, (src + np.tile(np.arange(1, n), len(movers))) % n, _one(i), np.full((len(i), 2), -1))
        # one for one between the bottleneck and another device (not two equal pieces)
        out, back = _product(_one(on_b), _one(others))
        keep = gids[out[:, 0]] != gids[back[:, 0]]
        add(bottleneck, dev[back[keep, 0]], out[keep], back[keep])
        # two devices trade their whole shards (any two, or on many devices the bottleneck and another)
        a, b = np.triu_indices(n, k=1)
        if len(a) > _MAX_TRADES:
            a, b = np.full(n - 1, bottleneck), np.delete(np.arange(n), bottleneck)
        add(a, b, np.full((len(a), 2), -1), np.full((len(a), 2), -1), kind=2)
        if splits:  # a piece (as for moves) halved, the new half on another device
            can = movers[space.can_split[gids[movers]]]
            i = np.repeat(can, n - 1)
            add(dev[i], (dev[i] + np.tile(np.arange(1, n), len(can))) % n, _one(i), np.full((len(i), 2), -1),
                kind=1)
    else:
        # two pieces off the bottleneck to one device (for none or one of its pieces), one for two
        pairs_b = _pairs(on_b)
        if len(pairs_b) * max(len(others), 1) > _MAX_COMPOUND:
            return None
        for d in range(n):
            if d != bottleneck:
                on_d = np.flatnonzero(dev == d)
                add(bottleneck, d, *_product(pairs_b, np.vstack([np.full((1, 2), -1), _one(on_d)])))
                add(bottleneck, d, *_product(_one(on_b), _pairs(on_d)))
    if not rows:
        return None
    src, dst, out, back, kind = (np.concatenate(c) for c in zip(*rows))

    # src loses the pieces `out` and gains `back`, dst the reverse, so dst's increments are minus src's;
    # a split's src keeps the first half (gains the second, loses the whole) and its dst gains the second
    g = np.append(gids, -1)  # -1: no piece, the zero entry of the extended tables
    g_out, g_back = g[out], g[back]
    split = kind == 1
    half = g_out[split, 0] + 1
    # the slots that hold a piece in some candidate (gathers of all-empty slots are skipped)
    slots = [(sign, side[:, k]) for sign, side in ((1, g_back), (-1, g_out)) for k in range(2)
             if (side[:, k] >= 0).any()]
    K = len(src)

    def both(table, res):
        """src's and dst's sums of `table` after the change added to res [K, 2, ...] (their present sums or
        zeros: the increments)."""
        src_d = np.zeros((K,) + table.shape[1:], dtype=table.dtype)
        for sign, idx in slots:
            if sign > 0:
                src_d += table[idx]
            else:
                src_d -= table[idx]
        res[:, 0] += src_d
        if len(half):  # a split's dst gains only the second half
            src_d[split] = 0
            second = table[half]
            res[split, 0] += second
            res[split, 1] += second
        res[:, 1] -= src_d
        return res

    ext = state.ext
    acc = both(ext.proj, state.acc[np.stack([src, dst], axis=1)])
    d_mem = both(ext.size, np.zeros((K, 2), dtype=ext.size.dtype))
    d_dim = both(ext.dim, np.zeros((K, 2), dtype=ext.dim.dtype))
    moved = (g_back >= 0).sum(1) - (g_out >= 0).sum(1)
    d_count = np.stack([moved + split, np.where(split, 1, -moved)], axis=1)
    whole = np.flatnonzero(kind == 2)
    if len(whole):  # src takes dst's sums and dst takes src's
        s, d = src[whole], dst[whole]
        acc[whole, 0], acc[whole, 1] = state.acc[d], state.acc[s]
        for arr, sums in ((d_mem, state.mem), (d_dim, state.dims), (d_count, state.count)):
            arr[whole, 0] = sums[d] - sums[s]
            arr[whole, 1] = sums[s] - sums[d]
    return _Candidates(src, dst, out, back, split, kind == 2, acc, d_mem, d_dim, d_count)


def _score(state: _State, cand: _Candidates, total: np.ndarray, keep: int) -> tuple[np.ndarray, np.ndarray]:
    """(plan objective [K], per-device mean totals [K, n]) of each candidate (ms); inf (and nan totals)
    where a device would exceed the memory cap. Only the `keep` candidates with the lowest estimate
    (new compute costs, the present comm costs) are scored by the comm models; the others get inf."""
    space = state.space
    K = len(cand.src)
    devs = np.stack([cand.src, cand.dst], axis=1)  # [K, 2]
    ok = ((state.mem[devs] + cand.d_mem) <= space.cap[devs]).all(axis=1)
    if space.allow is not None:  # every piece that changes device may use its new one
        ext_allow = np.vstack([space.allow, np.ones((1, space.n), dtype=bool)])  # row -1: no piece
        g = np.append(np.asarray(state.gids, dtype=np.int64), -1)
        ok &= ext_allow[g[cand.out], cand.dst[:, None]].all(axis=1)
        ok &= ext_allow[g[cand.back], cand.src[:, None]].all(axis=1)
        if cand.whole.any():
            fits = state.fits()
            w = np.flatnonzero(cand.whole)
            ok[w] &= fits[cand.src[w], cand.dst[w]] & fits[cand.dst[w], cand.src[w]]
    acc = cand.acc.reshape(-1, cand.acc.shape[-1])  # overwritten by the costs (the candidates' last use)
    count = state.count[devs] + cand.d_count
    robust = state.objective.robust
    if robust:  # each member's compute of the two devices [K, 2, members]; their mean for the estimate
        member_comp = space.scorer.member_costs_from_acc(acc, overwrite=True).astype(np.float64).reshape(K, 2, -1)
        member_comp[count == 0] = 0.0
        comp = member_comp.mean(axis=-1)
    else:
        comp = space.scorer.cost_from_acc(acc, overwrite=True).reshape(K, 2).astype(np.float64)
        comp[count == 0] = 0.0
    if np.count_nonzero(ok) > keep:
        est = np.tile(total, (K, 1))
        est[np.arange(K)[:, None], devs] = comp + (total - state.compute)[devs]
        est = np.where(ok, est.max(axis=1), np.inf)
        ok = np.zeros(K, dtype=bool)
        ok[np.argpartition(est, keep)[:keep]] = True
    idx = np.flatnonzero(ok)
    cost = np.full(K, np.inf)
    totals = np.full((K, space.n), np.nan)
    if len(idx):
        compute = state.compute_for(len(idx))
        dims = np.tile(state.dims.astype(np.float64), (len(idx), 1))
        rows = np.arange(len(idx))[:, None]
        if robust:
            compute[:, rows, devs[idx]] = member_comp[idx].transpose(2, 0, 1)
        else:
            compute[rows, devs[idx]] = comp[idx]
        dims[rows, devs[idx]] = state.dims[devs[idx]] + cand.d_dim[idx]
        cost[idx], totals[idx] = state.objective(compute, dims)
    return cost, totals


def _apply(state: _State, cand: _Candidates, m: int) -> None:
    src, dst = int(cand.src[m]), int(cand.dst[m])
    out = [int(x) for x in cand.out[m] if x >= 0]
    back = [int(x) for x in cand.back[m] if x >= 0]
    if cand.split[m]:  # piece out[0] becomes its first half in place; the twin is appended, on dst
        i = out[0]
        state.steps.append(i)
        state.gids[i] += 1
        state.gids.append(state.gids[i])
        state.shards[dst].append(len(state.gids) - 1)
        state.dev = np.append(state.dev, dst)
    elif cand.whole[m]:
        state.shards[src], state.shards[dst] = state.shards[dst], state.shards[src]
        state.dev[state.shards[src]] = src
        state.dev[state.shards[dst]] = dst
    else:
        for i in out:
            state.shards[src].remove(i)
        for k in back:
            state.shards[dst].remove(k)
        state.shards[src].extend(back)
        state.shards[dst].extend(out)
        state.dev[out] = dst
        state.dev[back] = src
    state._refresh(src)
    state._refresh(dst)


def _better(cost: float, cur_cost: float, gain: float = _MIN_GAIN) -> bool:
    """A plan cost lower by more than the fraction `gain` (by default more than float noise)."""
    return cost < cur_cost * (1 - gain)


def _descend(state: _State, max_moves: int, splits: bool, settled: bool = False,
             gain: float = _MIN_GAIN) -> tuple[_State, int]:
    """Variable-neighbourhood descent: the best simple candidate while one lowers the cost by the
    fraction `gain`; when none does, the best compound one; at most `max_moves` moves. `settled`: the
    state is a local optimum of the descent without splits, so if no split improves it at once,
    nothing will. Returns the state and the moves."""
    cost, total = state.cost()
    moves = 0
    compound = False
    while moves < max_moves:
        cand = _candidates(state, int(np.argmax(total)), splits, compound)
        improved = False
        if cand is not None:
            # the best candidate, by its cost from incremental sums (they differ from the new state's,
            # summed in shard order, in the last bits only: far below a move's least gain, _MIN_GAIN)
            costs, totals = _score(state, cand, total, _KEEP)
            m = int(np.argmin(costs))
            if _better(costs[m], cost, gain):
                state = state.copy()
                _apply(state, cand, m)
                cost, total, improved = float(costs[m]), totals[m], True
                moves += 1
        if not improved and settled and not moves:
            break
        if not improved and compound:  # last resort: the best assignment of the shards to the devices
            relabelled = _relabel(state, cost, gain)
            if relabelled is not None:
                state, improved = relabelled, True
                cost, total = state.cost()
                moves += 1
        if improved:
            compound = False
        elif compound:
            break
        else:
            compound = True
    return state, moves


def _relabel(state: _State, cost: float, gain: float = _MIN_GAIN) -> _State | None:
    """The state with its shards on the devices in the order that costs least, if that is lower
    than `cost` by the fraction `gain`; None otherwise, or on more than `_MAX_RELABEL_DEVICES` devices."""
    n = state.space.n
    if not 2 < n <= _MAX_RELABEL_DEVICES:  # on 2 devices the trades have tried the one other order
        return None
    perms = np.array(list(itertools.permutations(range(n))))  # perms[k][d]: the shard device d gets
    fits = state.fits()
    perms = perms[fits[perms, np.arange(n)].all(axis=1)]  # every device can hold the shard it gets
    if not len(perms):
        return None
    compute = state.member_compute[:, perms] if state.objective.robust else state.compute[perms]
    costs = state.objective(compute, state.dims[perms])[0]
    k = int(np.argmin(costs))
    if not _better(costs[k], cost, gain):
        return None
    new = state.copy()
    new.shards = [list(state.shards[p]) for p in perms[k]]
    for d, shard in enumerate(new.shards):
        new.dev[shard] = d
    for name in _PER_DEVICE:
        setattr(new, name, getattr(state, name)[..., perms[k]].copy() if name == "member_compute"
                else getattr(state, name)[perms[k]].copy())
    return new if _better(new.cost()[0], cost, gain) else None


def _tabu(state: _State, steps: int, max_moves: int, splits: bool) -> tuple[_State, int]:
    """Cross the plateau of the local optimum `state`: `steps` times take the best simple candidate
    that does not raise the cost (by more than `_MIN_GAIN`), except those that move a piece moved (or
    trade a device pair traded) in the last `_TENURE` steps unless they beat the best so far (tabu
    search); descend from every new best. Returns the best state and the moves taken."""
    n = state.space.n
    best = state
    best_cost, total = best.cost()
    cost = best_cost
    piece_until = np.full(len(state.gids) + 1, -1)  # the last step a piece is tabu (index -1: "none")
    pair_until = np.full((n, n), -1)
    moves = 0
    for t in range(steps):
        cand = _candidates(state, int(np.argmax(total)), splits, False)
        if cand is None or moves >= max_moves:
            break
        costs, totals = _score(state, cand, total, _KEEP)
        if len(piece_until) < len(state.gids) + 1:  # splits added pieces
            grown = np.full(len(state.gids) + 1, -1)
            grown[:len(piece_until) - 1] = piece_until[:-1]
            piece_until = grown
        tabu = (piece_until[cand.out] >= t).any(axis=1) | (piece_until[cand.back] >= t).any(axis=1)
        tabu |= cand.whole & (pair_until[cand.src, cand.dst] >= t)
        allowed = (costs <= cost * (1 + _MIN_GAIN)) & (~tabu | (costs < best_cost * (1 - _MIN_GAIN)))
        allowed &= ~cand.whole | (costs < cost * (1 - _MIN_GAIN))  # a trade only to gain: it opens no new move
        if not allowed.any():
            break
        order = np.argsort(costs, kind="stable")
        m = int(order[np.argmax(allowed[order])])
        piece_until[[x for x in (*cand.out[m], *cand.back[m]) if x >= 0]] = t + _TENURE
        if cand.whole[m]:
            pair_until[cand.src[m], cand.dst[m]] = pair_until[cand.dst[m], cand.src[m]] = t + _TENURE
        state = state.copy()
        _apply(state, cand, m)
        moves += 1
        cost, total = costs[m], totals[m]
        if _better(cost, best_cost):
            state, m2 = _descend(state, max_moves - moves, splits)
            moves += m2
            best = state
            best_cost, total = state.cost()
            cost = best_cost
    return best, moves


# --------------------------------------------------------------------------- NeuroShard+


def search_plus(tables: Sequence[ShardTable], problem: Problem, models, config: SearchConfig | None = None,
                plus: PlusConfig | None = None, options: dict | None = None, keep: int = 0) -> PlusResult:
    """NeuroShard+ (module doc); OutOfMemoryError when no start fits. The problem's seed and `options` are
    passed to the baselines. `keep`: also return the `keep` best distinct plans seen (starts and local
    optima, by the objective) as `candidates`, best first."""
    from neuroshard.planner.shard import shard

    t0 = time.perf_counter()
    plus = plus or PlusConfig()
    baselines = plus.baselines()
    for alg in baselines:  # a start named explicitly ('auto' names only plain ones) is never skipped silently
        needs = required_option(alg)
        if needs and not (options or {}).get(needs):
            raise ConfigError("--plus_baselines", f"{alg} needs its trained policy: give --{needs} "
                                                  f"(or leave {alg} out of --plus_baselines)")
    starts: dict[str, Plan] = {}
    with single_threaded_blas():
        space = make_space(tables, problem, models, config)
        try:
            res = beam_search(space, t0)
        except OutOfMemoryError:
            res = None
        else:
            starts["neuroshard"] = merge_colocated_halves(tables, res.plan)
            if res.start_plan is not None:
                starts["neuroshard_no_split"] = res.start_plan
    objective = _Objective(space.scorer, models.noise_model, plus.plus_robust, plus.plus_lambda)
    base_costs = {}  # the starts' simulated costs (the objective when it is the point cost)
    for alg in baselines:
        try:
            got = shard(tables, problem, models=models, alg=alg, simulated=not objective.robust,
                        **options_for(alg, options))
        except (ConfigError, InputError):  # a bad setting or policy file of a named start: not skipped
            raise
        except NeuroShardError:  # out of memory, or a sharder that cannot run here
            continue
        starts[alg] = got.plan
        if got.cost_ms is not None:
            base_costs[alg] = got.cost_ms
    if not starts:
        raise OutOfMemoryError(f"{NAME} found no plan of {len(tables)} tables on {problem.ndevices} devices of "
                               f"{problem.mem_text} (neither NeuroShard nor any baseline)",
                               max_mem=min(problem.caps))

    def cost_of(name: str, plan: Plan) -> float:
        """The objective of a plan, from scratch (the point cost is the simulator's)."""
        if objective.robust:
            with single_threaded_blas():
                return _State(space, plan, objective).cost()[0]
        return base_costs[name] if name in base_costs else simulate(tables, plan, models, problem).cost

    costs = {name: cost_of(name, plan) for name, plan in starts.items()}
    best_name = min(costs, key=lambda a: (costs[a], a != "neuroshard"))
    seen = [(c, name, starts[name]) for name, c in costs.items()]
    best_plan, best_cost, refined, moves = starts[best_name], costs[best_name], False, 0
    if plus.plus_max_moves:
        # descend from the best distinct starts taking gains of _COARSE_GAIN, from the best local optimum
        # again taking any gain, then tabu search from there (module doc)
        names = []
        for name in sorted(costs, key=lambda a: costs[a]):
            if len(names) < plus.plus_starts and all(starts[name] != starts[x] for x in names):
                names.append(name)
        with single_threaded_blas():
            found = []
            for name in names:
                # first without new splits (they cannot be undone), then with them
                state, m = _descend(_State(space, starts[name], objective), plus.plus_max_moves, False,
                                    gain=_COARSE_GAIN)
                if plus.plus_splits:
                    state, m2 = _descend(state, plus.plus_max_moves - m, True, settled=True, gain=_COARSE_GAIN)
                    m += m2
                found.append([state.cost()[0], name, state, m])
            best = min(found, key=lambda f: f[0])
            best[2], m2 = _descend(best[2], plus.plus_max_moves - best[3], plus.plus_splits)
            best[3] += m2
            if plus.plus_tabu and problem.ndevices > 1 and best[2].gids:
                best[2], m2 = _tabu(best[2], plus.plus_tabu, plus.plus_max_moves - best[3], plus.plus_splits)
                best[3] += m2  # (best[0], the descent's cost, is not read again)
            moves = sum(f[3] for f in found)
        for _, name, state, m in found:
            if m:
                plan = merge_colocated_halves(tables, state.plan())
                c = cost_of("", plan)
                seen.append((c, f"{name}+search", plan))
                if c < best_cost:
                    best_name, best_plan, best_cost, refined = name, plan, c, True
    ns_cost = costs.get("neuroshard", math.inf)
    start_costs = {a: costs.get(a, math.inf) for a in ["neuroshard", "neuroshard_no_split", *baselines]}
    candidates = []
    for c, source, plan in sorted(seen, key=lambda s: s[0]):
        if len(candidates) < keep and all(plan != p for _, _, p in candidates):
            candidates.append((c, source, plan))
    return PlusResult(plan=best_plan, cost=best_cost, source=best_name, refined=refined, start_costs=start_costs,
                      neuroshard_cost=ns_cost, moves=moves, seconds=time.perf_counter() - t0,
                      candidates=candidates)


@register(NAME, settings=(SearchConfig, PlusConfig), runs_others=True)
def neuroshard_plus(tables: Sequence[ShardTable], problem: Problem, ctx: ShardingContext) -> Plan:
    """NeuroShard+ under ctx's cost models: NeuroShard's search, every plain baseline, local search.

    Options (ctx.options): the fields of SearchConfig and PlusConfig. Raises OutOfMemoryError when
    no plan fits.
    """
    return _run(tables, problem, ctx).plan


def _run(tables, problem: Problem, ctx: ShardingContext, keep: int = 0) -> PlusResult:
    models = require_models(ctx.models if ctx is not None else None, NAME)
    if models.runtime is not None:
        raise ConfigError("--runtime", f"{NAME} searches the paper's execution only; plan for TorchRec's with "
                                       "neuroshard (--runtime torchrec)")
    options = dict(ctx.options or {})
    return search_plus(tables, problem, models, SearchConfig.from_options(options), PlusConfig.from_options(options),
                       options=options, keep=keep)


def _best_plans(tables, problem: Problem, ctx: ShardingContext, k: int) -> list[Plan]:
    """The k best distinct plans NeuroShard+ saw (its objective), its own choice first (for `--refine`)."""
    return [plan for _, _, plan in _run(tables, problem, ctx, keep=k).candidates]


neuroshard_plus.candidates = _best_plans
