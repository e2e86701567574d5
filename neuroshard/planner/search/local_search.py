"""The local search of NeuroShard+ (`plus`): a placement under search, its neighbourhoods, their scoring,
and the descent, the reordering of the shards over the devices and the tabu search that use them.

The objective (`Objective`): with `plus_robust` and models that carry an
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
from dataclasses import dataclass

import numpy as np

from neuroshard.planner.costs.uncertainty import cost_samples, robust_cost
from neuroshard.planner.search.beam import SearchSpace
from neuroshard.planner.simulator import score_placements
from neuroshard.types.plan import Plan

# A move must lower the plan cost by more than this fraction (float noise is not progress); NeuroShard+'s
# descents from its starts take a coarser gain (`plus._COARSE_GAIN`)
_MIN_GAIN = 1e-4
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


class _Extended:
    """Per-gid tables with one more, all-zero entry at the end (index -1 = "no piece")."""

    def __init__(self, space: SearchSpace):
        self.proj = np.vstack([space.proj, np.zeros((1, space.proj.shape[1]), dtype=space.proj.dtype)])
        self.size = np.append(space.size, 0)
        self.dim = np.append(space.dim, 0)


class Objective:
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


class State:
    """A placement under local search: post-split pieces (gids), column steps, per-device shards
    (in accumulation order) and per-device accumulators, compute ms (the members' mean, and each
    member's when the objective is robust), dim sums, memory, counts."""

    def __init__(self, space: SearchSpace, plan: Plan, objective: Objective):
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

    def copy(self) -> "State":
        new = object.__new__(State)
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


def _candidates(state: State, bottleneck: int, splits: bool, compound: bool) -> _Candidates | None:
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


def _score(state: State, cand: _Candidates, total: np.ndarray, keep: int) -> tuple[np.ndarray, np.ndarray]:
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


def _apply(state: State, cand: _Candidates, m: int) -> None:
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


def descend(state: State, max_moves: int, splits: bool, settled: bool = False,
            gain: float = _MIN_GAIN) -> tuple[State, int]:
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


def _relabel(state: State, cost: float, gain: float = _MIN_GAIN) -> State | None:
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


def tabu_search(state: State, steps: int, max_moves: int, splits: bool) -> tuple[State, int]:
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
            state, m2 = descend(state, max_moves - moves, splits)
            moves += m2
            best = state
            best_cost, total = state.cost()
            cost = best_cost
    return best, moves
