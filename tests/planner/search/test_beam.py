import math

import numpy as np
import pytest
import torch

from neuroshard.planner.costs.cost_models import CostModels
from neuroshard.planner.costs.features import NUM_FEATURES
from neuroshard.planner.costs.nets import (
    CommCostModel,
    ComputeCostModel,
    feature_stats,
    table_features,
)
from neuroshard.planner.costs.scorer import get_scorer
from neuroshard.planner.registry import ShardingContext, get_sharder
from neuroshard.planner.search.beam import SearchConfig, grid_search, search
from neuroshard.planner.simulator import simulate, validate_plan
from neuroshard.problem import Problem
from neuroshard.types.errors import NeuroShardError, OutOfMemoryError
from neuroshard.types.plan import Plan, apply_column_steps, merge_colocated_halves
from neuroshard.types.tables import ShardTable, TableConfig, can_split

BINS = tuple([1 / 17] * 17)


# --------------------------------------------------------------------------- models and tasks


def random_config(rng) -> TableConfig:
    return TableConfig(int(10 ** rng.uniform(2, 6)), float(rng.uniform(1, 30)), tuple(rng.dirichlet(np.ones(17))))


def random_models(n, seed=0) -> CostModels:
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    configs = [random_config(rng).with_dim(int(d)) for _ in range(40) for d in (4, 8, 16, 32, 64, 128)]
    mean, std = feature_stats(table_features(configs))
    cm = ComputeCostModel(mean, std, target_scale=5.0).eval()
    fw = CommCostModel("fw", n, torch.full((2 * n,), 64.0), torch.full((2 * n,), 64.0), target_scale=2.0).eval()
    bw = CommCostModel("bw", n, torch.full((n,), 64.0), torch.full((n,), 64.0), target_scale=2.0).eval()
    return CostModels(cm, fw, bw)


def linear_models(n, per_dim=0.01, base=0.5) -> CostModels:
    """compute(shard) = base + per_dim * dim sum; no communication cost."""
    cm = ComputeCostModel(torch.zeros(NUM_FEATURES), torch.ones(NUM_FEATURES), target_scale=1.0)
    with torch.no_grad():
        for p in cm.parameters():
            p.zero_()
        cm.table_mlp[0].weight[0, 0] = 1.0
        cm.table_mlp[2].weight[0, 0] = 1.0
        cm.head[0].weight[0, 0] = 1.0
        cm.head[2].weight[0, 0] = per_dim
        cm.head[2].bias[0] = base
    comm = []
    for kind in ("fw", "bw"):
        n_in = 2 * n if kind == "fw" else n
        m = CommCostModel(kind, n, torch.zeros(n_in), torch.ones(n_in))
        with torch.no_grad():
            for p in m.parameters():
                p.zero_()
        comm.append(m.eval())
    return CostModels(cm.eval(), comm[0], comm[1])


def random_task(rng, T, dims=(8, 16, 32, 64, 128)) -> list[ShardTable]:
    return [ShardTable(i, i, random_config(rng).with_dim(int(rng.choice(dims)))) for i in range(T)]


# --------------------------------------------------------------------------- the slow reference


class Reference:
    """NeuroShard written the obvious way (DESIGN §8): loops, one device at a time, simulate() per placement."""

    def __init__(self, tables, n, max_mem, models, cfg: SearchConfig):
        self.tables, self.n, self.max_mem, self.models, self.cfg = list(tables), n, max_mem, models, cfg
        self.scorer = get_scorer(models)
        # one embedding per (table, dim) the search can reach, as NeuroShard computes them
        configs = [t.config.with_dim(d) for t in self.tables for d in self._dims(t.dim)]
        proj = self.scorer.project(self.scorer.embed(configs))
        self.proj = {}
        for k, c in enumerate(configs):
            self.proj[c] = proj[k]

    @staticmethod
    def _dims(d):
        out = [d]
        while can_split(out[-1]):
            out.append(out[-1] // 2)
        return out

    def single_cost(self, t: ShardTable) -> float:
        return float(self.scorer.cost_from_acc((self.scorer.acc0 + self.proj[t.config])[None])[0])

    def greedy(self, split, scale):
        """Shards (in placement order) or None if some table fits nowhere."""
        mean_dim = sum(t.dim for t in self.tables) / self.n
        order = sorted(range(len(split)), key=lambda i: (-self.single_cost(split[i]), i))
        shards = [[] for _ in range(self.n)]
        mem = [0] * self.n
        dims = [0] * self.n
        cost = [0.0] * self.n
        acc = [self.scorer.acc0.copy() for _ in range(self.n)]
        for i in order:
            t = split[i]
            size = t.config.row * t.dim
            best = None
            for d in range(self.n):
                if size * 4 <= self.max_mem * 2**30 - mem[d] * 4 and dims[d] + t.dim <= scale * mean_dim:
                    if best is None or (cost[d], mem[d]) < (cost[best], mem[best]):
                        best = d
            if best is None:
                return None
            shards[best].append(i)
            mem[best] += size
            dims[best] += t.dim
            acc[best] = acc[best] + self.proj[t.config]
            cost[best] = float(self.scorer.cost_from_acc(acc[best][None])[0])
        return shards

    def grid(self, steps):
        split = apply_column_steps(self.tables, steps)
        best = (math.inf, None)
        scales = list(self.cfg.scales())
        results = [self.greedy(split, s) for s in scales]
        if all(r is None for r in results) and self.cfg.dim_fallback:
            results = [None] * len(scales) + [self.greedy(split, math.inf)]
        for shards in results:
            if shards is not None:
                plan = Plan(tuple(steps), tuple(tuple(s) for s in shards))
                c = simulate(self.tables, plan, self.models, Problem(plan.ndevices, self.max_mem)).cost
                if c < best[0]:
                    best = (c, plan)
        return best

    def candidates(self, split):
        k = self.cfg.beam_n
        if len(split) <= k:
            return list(range(len(split)))
        by_size = sorted(range(len(split)), key=lambda i: (-split[i].config.row * split[i].dim, i))[:k]
        by_cost = sorted(range(len(split)), key=lambda i: (-self.single_cost(split[i]), i))[:k]
        return sorted(set(by_size) | set(by_cost))

    def search(self):
        best = self.grid(())
        beam = [()]
        for _ in range(self.cfg.max_length):
            children, seen = [], set()
            for steps in beam:
                split = apply_column_steps(self.tables, steps)
                for i in self.candidates(split):
                    if not can_split(split[i].dim):
                        continue
                    child = steps + (i,)
                    key = tuple(sorted((t.origin, t.dim) for t in apply_column_steps(self.tables, child)))
                    if key not in seen:
                        seen.add(key)
                        children.append(child)
            if not children:
                break
            scored = [(self.grid(c), c) for c in children]
            for (c, plan), _ in scored:
                if c < best[0]:
                    best = (c, plan)
            beam = [steps for (c, _), steps in sorted(scored, key=lambda x: x[0][0])[:self.cfg.beam_k]]
        return best


# --------------------------------------------------------------------------- fast path == reference


# (16 and 20 devices: the greedy keeps per-dim device keys, see planner/greedy.py)
@pytest.mark.parametrize("n,T,mem,seed", [(2, 6, 0.05, 0), (3, 9, 0.02, 1), (4, 12, 1.0, 2), (4, 8, 0.004, 3),
                                          (16, 30, 0.5, 4), (20, 24, 0.05, 5)])
def test_fast_search_matches_reference(n, T, mem, seed):
    rng = np.random.default_rng(seed)
    models = random_models(n, seed)
    tables = random_task(rng, T)
    cfg = SearchConfig(beam_k=2, beam_n=4, max_length=3)
    want_cost, want_plan = Reference(tables, n, mem, models, cfg).search()
    if want_plan is None:
        with pytest.raises(OutOfMemoryError):
            search(tables, Problem(n, mem), models, cfg)
        return
    got = search(tables, Problem(n, mem), models, cfg)
    assert got.plan == want_plan
    assert got.cost == pytest.approx(want_cost, rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("seed", range(8))
def test_fast_search_matches_reference_on_random_settings(seed):
    # device counts from 1 to 8, memory from very tight to loose, random beam settings, and a
    # constant compute model now and then (every choice is then decided by the tie rules)
    rng = np.random.default_rng(100 + seed)
    n = int(rng.choice([1, 2, 3, 4, 8]))
    mem = float(rng.choice([0.002, 0.01, 0.05, 1.0]))
    models = random_models(n, seed) if seed % 3 else linear_models(n, per_dim=float(rng.choice([0.0, 0.01])))
    tables = random_task(rng, int(rng.integers(1, 12)), dims=(4, 8, 16, 32, 64))
    cfg = SearchConfig(beam_k=int(rng.integers(1, 4)), beam_n=int(rng.integers(1, 6)),
                       max_length=int(rng.integers(0, 4)), grid_steps=int(rng.integers(1, 12)))
    want_cost, want_plan = Reference(tables, n, mem, models, cfg).search()
    try:
        got = search(tables, Problem(n, mem), models, cfg)
    except OutOfMemoryError:
        assert want_plan is None
        return
    assert got.plan == want_plan
    assert got.cost == pytest.approx(want_cost, rel=1e-5, abs=1e-6)


def test_fast_grid_search_matches_reference_with_paper_defaults():
    rng = np.random.default_rng(7)
    for n in (2, 4, 8):
        models = random_models(n, n)
        tables = random_task(rng, 3 * n + 2)
        cfg = SearchConfig()
        want_cost, want_plan = Reference(tables, n, 0.5, models, cfg).grid(())
        plan, cost = grid_search(tables, Problem(n, 0.5), models, cfg)
        assert plan == want_plan
        assert cost == pytest.approx(want_cost, rel=1e-5, abs=1e-6)


def test_full_default_search_matches_reference_on_one_task():
    rng = np.random.default_rng(11)
    models = random_models(3, 11)
    tables = random_task(rng, 7)
    cfg = SearchConfig()
    want_cost, want_plan = Reference(tables, 3, 1.0, models, cfg).search()
    got = search(tables, Problem(3, 1.0), models, cfg)
    assert got.plan == want_plan
    assert got.cost == pytest.approx(want_cost, rel=1e-5, abs=1e-6)


def test_ties_go_to_least_memory_used_then_lowest_device():
    # a constant compute model (every non-empty shard costs 1 ms): only the tie rules decide
    models = linear_models(3, per_dim=0.0, base=1.0)
    tables = [ShardTable(i, i, TableConfig(r, 1.0, BINS, 16)) for i, r in enumerate([100, 300, 200, 400])]
    plan, _ = grid_search(tables, Problem(3, 1.0), models, SearchConfig(grid_steps=1, grid_min=2.0, grid_max=2.0))
    # equal single costs: index order; each table goes to the cheapest device (empty ones cost 0,
    # lowest index first), then among equal costs to the one with the least memory used
    assert plan.shards == ((0, 3), (1,), (2,))


# --------------------------------------------------------------------------- behaviour


def test_every_returned_plan_is_valid_and_scored_like_the_simulator():
    rng = np.random.default_rng(5)
    for n in (2, 4, 8):
        models = random_models(n, 20 + n)
        for T in (1, 5, 17):
            tables = random_task(rng, T)
            res = search(tables, Problem(n, 2.0), models, SearchConfig(max_length=4))
            validate_plan(tables, res.plan, Problem(n, 2.0))
            assert res.cost == pytest.approx(simulate(tables, res.plan, models, Problem(n, 2.0)).cost, rel=1e-5,
                                             abs=1e-6)
            assert res.cost <= res.start_cost  # never worse than its own no-split start
            assert res.start_plan is not None and not res.start_plan.column_steps


def test_beam_finds_the_split_that_balances_two_devices():
    # compute cost grows with the dim sum; a 64-dim table beside two 16s cannot be balanced on
    # 2 devices unless it is split: {64} vs {16, 16} -> {32, 16} vs {32, 16}
    models = linear_models(2)
    tables = [ShardTable(i, i, TableConfig(1000, 1.0, BINS, d)) for i, d in enumerate([64, 16, 16])]
    res = search(tables, Problem(2, 1.0), models)
    assert res.start_cost == pytest.approx(0.5 + 0.64, rel=1e-6)
    assert res.plan.column_steps[0] == 0  # the first split is the big table
    bd = simulate(tables, res.plan, models, Problem(res.plan.ndevices, 1.0))
    assert bd.dims == [48, 48]
    assert res.cost == pytest.approx(0.5 + 0.48, rel=1e-6)
    assert res.plan.column_steps == (0,)  # further splits do not improve strictly


def test_split_rescues_a_table_too_big_for_one_device():
    rows = int(0.75 * 2**28 / 64) * 2  # 1.5 GB at dim 64: fits no 1 GB device until split
    tables = [ShardTable(0, 0, TableConfig(rows, 1.0, BINS, 64)), ShardTable(1, 1, TableConfig(100, 1.0, BINS, 16))]
    models = linear_models(2)
    with pytest.raises(OutOfMemoryError):
        grid_search(tables, Problem(2, 1.0), models)
    res = search(tables, Problem(2, 1.0), models)
    assert res.start_plan is None and math.isinf(res.start_cost)
    assert res.plan.column_steps[:1] == (0,)
    validate_plan(tables, res.plan, Problem(2, 1.0))


def test_no_plan_fits_is_an_out_of_memory_error():
    rows = 2**28  # 4 GB at dim 4, cannot be split
    tables = [ShardTable(0, 0, TableConfig(rows, 1.0, BINS, 4))]
    with pytest.raises(OutOfMemoryError, match="no placement"):
        search(tables, Problem(2, 1.0), linear_models(2))
    ctx = ShardingContext(models=linear_models(2))
    with pytest.raises(OutOfMemoryError):
        get_sharder("neuroshard")(tables, Problem(2, 1.0), ctx)


def test_dim_constraint_failure_falls_back_to_memory_only_greedy():
    # two 64-dim tables on 4 devices: 64 > 1.5 * mean dim (32) at every scale
    tables = [ShardTable(i, i, TableConfig(100, 1.0, BINS, 64)) for i in range(2)]
    models = linear_models(4)
    plan, _ = grid_search(tables, Problem(4, 1.0), models)
    validate_plan(tables, plan, Problem(4, 1.0))
    with pytest.raises(OutOfMemoryError):
        grid_search(tables, Problem(4, 1.0), models, SearchConfig(dim_fallback=False))


def test_deterministic_and_registered_with_options():
    rng = np.random.default_rng(9)
    models = random_models(4, 9)
    tables = random_task(rng, 20)
    a = search(tables, Problem(4, 1.0), models)
    b = search(tables, Problem(4, 1.0), models)
    assert a.plan == b.plan and a.cost == b.cost
    ctx = ShardingContext(models,
                          options={"beam_k": 3, "beam_n": 10, "max_length": 10, "grid_steps": 11, "other": 1})
    # the sharder's plan: the search's, with splits whose halves share a device undone
    assert get_sharder("neuroshard")(tables, Problem(4, 1.0), ctx) == merge_colocated_halves(tables, a.plan)
    ctx.options = {"max_length": 0}
    assert get_sharder("neuroshard")(tables, Problem(4, 1.0), ctx) == grid_search(tables, Problem(4, 1.0), models)[0]


def test_bad_options_and_missing_models_are_clear_errors():
    with pytest.raises(NeuroShardError, match="beam_k"):
        SearchConfig.from_options({"beam_k": 0})
    with pytest.raises(NeuroShardError, match="max_length"):
        SearchConfig(max_length=-1)
    with pytest.raises(NeuroShardError, match="cost models"):
        get_sharder("neuroshard")([], Problem(2, 1.0), ShardingContext())
    with pytest.raises(NeuroShardError, match="devices"):
        search(random_task(np.random.default_rng(0), 3), Problem(3, 1.0), linear_models(2))


def test_empty_task():
    res = search([], Problem(3, 1.0), linear_models(3))
    assert res.plan == Plan((), ((), (), ()))


# --------------------------------------------------------------------------- constraints while searching


def random_constraints(rng, T: int, n: int):
    """A third of the tables kept whole, a fifth limited to half the devices, two pairs co-located."""
    from neuroshard.types.constraints import TableConstraints

    tables = rng.permutation(T)
    pairs = tuple((int(tables[2 * k]), int(tables[2 * k + 1])) for k in range(2))
    rest = tables[4:]
    whole = tuple(int(t) for t in rest[: T // 3])
    devices = tuple((int(t), tuple(int(d) for d in rng.choice(n, size=max(1, n // 2), replace=False)))
                    for t in rest[T // 3: T // 3 + T // 5])
    return TableConstraints(whole=whole, devices=devices, colocate=pairs)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("alg", ["neuroshard", "neuroshard_plus"])
def test_the_search_keeps_the_constraints_on_devices_of_unequal_memory(seed, alg):
    from neuroshard.planner.shard import shard
    from neuroshard.planner.simulator import validate_plan
    from neuroshard.types.plan import plan_pieces

    rng = np.random.default_rng(900 + seed)
    n = int(rng.choice([2, 3, 5]))
    T = int(rng.integers(10, 30))
    tables = random_task(rng, T)
    need = sum(t.size_gb for t in tables)
    mem = tuple(max(2.0 * need / n * (0.5 + d % 2), 1.1 * max(t.size_gb for t in tables)) for d in range(n))
    cons = random_constraints(rng, T, n)
    problem = Problem(n, mem, seed, constraints=cons)
    res = shard(tables, problem, models=random_models(n, seed), alg=alg)
    validate_plan(tables, res.plan, problem)  # the memory of each device and every constraint
    pieces = plan_pieces(tables, res.plan)
    assert all(len(pieces[t]) == 1 for t in cons.whole)
    for a, b in cons.colocate:
        assert len(pieces[a]) == len(pieces[b]) == 1 and pieces[a][0].device == pieces[b][0].device
    for t, ds in cons.devices:
        assert {p.device for p in pieces[t]} <= set(ds)


@pytest.mark.parametrize("alg", ["neuroshard", "neuroshard_plus", "size_greedy"])
def test_no_piece_is_narrower_than_its_tables_narrowest(alg):
    """A 64-dim table with a narrowest piece of 32 (`TableConstraints.min_dim`): the search space halves it once,
    not down to 8; a 0.64 GB table on devices of 0.24 GB then fits no device (its halves have 0.32 GB) and no
    algorithm finds a plan, where quarters would fit (the greedy's oversize halving finds them without it)."""
    from neuroshard.planner.search.beam import make_space
    from neuroshard.planner.shard import shard
    from neuroshard.types.constraints import TableConstraints
    from neuroshard.types.tables import DEFAULT_BINS

    models = random_models(4, 5)
    big = [ShardTable(0, 0, TableConfig(2_500_000, 1.0, DEFAULT_BINS, 64)),
           ShardTable(1, 1, TableConfig(1000, 1.0, DEFAULT_BINS, 64))]
    cons = TableConstraints(min_dim=((0, 32),))
    space = make_space(big, Problem(4, 1.0, constraints=cons), models)
    assert space.dim[space.start[0]:space.start[0] + 2].tolist() == [64, 32]
    assert space.can_split[space.start[0]:space.start[0] + 2].tolist() == [True, False]
    assert space.can_split[space.start[1]:space.start[1] + 5].tolist() == [True] * 4 + [False]  # 64 .. 4
    with pytest.raises(OutOfMemoryError):
        shard(big, Problem(4, 0.24, constraints=cons), models=models, alg=alg)
    assert shard(big, Problem(4, 0.24), models=models, alg="size_greedy").plan.column_steps == (0, 0, 2)


def test_a_colocated_group_is_searched_as_one_unit():
    """Units and tables: the group's projection, size and dim are its tables' sums; plans convert both ways."""
    from neuroshard.planner.search.beam import make_space
    from neuroshard.types.constraints import TableConstraints

    rng = np.random.default_rng(3)
    tables = random_task(rng, 5, dims=(16,))
    models = random_models(2, 3)
    space = make_space(tables, Problem(2, 1.0, constraints=TableConstraints(colocate=((1, 3),))), models)
    free = make_space(tables, Problem(2, 1.0), models)
    assert space.units == [[0], [1, 3], [2], [4]]
    g = space.start[1]
    assert space.size[g] == free.size[free.start[1]] + free.size[free.start[3]]
    assert space.dim[g] == 32 and not space.can_split[g]
    np.testing.assert_allclose(space.proj[g], free.proj[free.start[1]] + free.proj[free.start[3]], rtol=1e-6)
    # unit 0 split once (its twin is unit position 4 -> table position 5); the group on device 1
    units_plan = Plan((0,), ((0, 2), (1, 3, 4)))
    tables_plan = space.from_units(units_plan)
    assert tables_plan == Plan((0,), ((0, 2), (1, 3, 4, 5)))
    assert space.to_units(tables_plan) == units_plan


def test_the_beam_splits_toward_a_packing_while_nothing_fits():
    # 4 devices of 100 elements; the last table (10 rows x 32 = 320 elements) fits only as four 8-column
    # pieces, three splits deep. The five small tables before it (1 row x 8) can be split too: among states
    # that all fit nowhere, an order by position would split those and never reach a plan within three rounds
    bins = (0.0,) * 17
    tables = [ShardTable(i, i, TableConfig(1, 1.0, bins, 8)) for i in range(5)]
    tables.append(ShardTable(5, 5, TableConfig(10, 1.0, bins, 32)))
    problem = Problem(4, 100.5 * 4 / 2**30)
    res = search(tables, problem, linear_models(4), SearchConfig(beam_k=1, max_length=3))
    pieces = apply_column_steps(tables, res.plan.column_steps)
    assert len(res.plan.column_steps) == 3 and sorted(t.dim for t in pieces if t.config.row == 10) == [8, 8, 8, 8]
    validate_plan(tables, res.plan, problem)


def test_a_task_too_full_for_the_greedy_is_packed_by_size():
    # two devices that five unsplittable tables (dim 4) of sizes 4, 4, 3, 3, 2 fill exactly. The greedy places
    # by compute, each table onto the device holding fewer (the first tie to the most memory left): 4 | 4, 3 | 3,
    # and the last 2 fits neither. Largest first onto the tightest fit packs 4 + 4 | 3 + 3 + 2
    bins = (0.0,) * 17
    tables = [ShardTable(i, i, TableConfig(r * 2**16, 1.0, bins, 4)) for i, r in enumerate((4, 4, 3, 3, 2))]
    problem = Problem(2, sum(t.size_gb for t in tables) / 2)
    models = linear_models(2)
    with pytest.raises(OutOfMemoryError):
        grid_search(tables, problem, models, SearchConfig(dim_fallback=False))
    plan, cost = grid_search(tables, problem, models)
    assert sorted(sorted(s) for s in plan.shards) == [[0, 1], [2, 3, 4]]
    validate_plan(tables, plan, problem)
    assert cost == pytest.approx(simulate(tables, plan, models, problem).cost)
    assert search(tables, problem, models).plan == plan
