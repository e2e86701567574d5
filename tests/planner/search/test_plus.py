"""NeuroShard+: hand-known optima, never above a baseline or NeuroShard, options and the registry."""

import numpy as np
import pytest

from neuroshard.planner import registry
from neuroshard.planner.registry import (
    ShardingContext,
    algorithm_names,
    get_sharder,
    is_plain,
)
from neuroshard.planner.search import plus as plus_module
from neuroshard.planner.search.beam import SearchConfig, make_space, search
from neuroshard.planner.search.local_search import Objective, State, descend
from neuroshard.planner.search.plus import PlusConfig, search_plus
from neuroshard.planner.shard import shard
from neuroshard.planner.simulator import simulate, validate_plan
from neuroshard.problem import Problem
from neuroshard.types.errors import ConfigError, OutOfMemoryError
from neuroshard.types.plan import Plan, merge_colocated_halves
from neuroshard.types.tables import ShardTable, TableConfig
from tests.planner.search.test_beam import (
    BINS,
    linear_models,
    random_models,
    random_task,
)

NO_SPLITS = SearchConfig(max_length=0)


def tables_of_dims(dims, rows=1000):
    return [ShardTable(i, i, TableConfig(rows, 1.0, BINS, d)) for i, d in enumerate(dims)]


def test_finds_the_balanced_partition_the_greedy_misses():
    # compute = 0.5 ms + 0.01 ms per dim, no comm. Dims 12,12,8,8,8 on 2 devices (the classic
    # counterexample to largest-first greedy): the grid search ends at {12,8,8} | {12,8} = 28,
    # the optimum is {12,12} | {8,8,8} = 24 on each device.
    models = linear_models(2)
    tables = tables_of_dims([12, 12, 8, 8, 8])
    assert search(tables, Problem(2, 1.0), models, NO_SPLITS).cost == pytest.approx(0.5 + 0.28)
    res = search_plus(tables, Problem(2, 1.0), models, NO_SPLITS, PlusConfig(plus_splits=False))
    assert res.cost == pytest.approx(0.5 + 0.24)
    assert sorted(sorted(tables[i].dim for i in s) for s in res.plan.shards) == [[8, 8, 8], [12, 12]]
    assert res.refined and res.neuroshard_cost == pytest.approx(0.78)


def test_splits_a_table_on_the_bottleneck_when_that_balances():
    # one 64-dim table and two 16s on 2 devices, splits left to the local search only: 64 -> 32 + 32
    models = linear_models(2)
    tables = tables_of_dims([64, 16, 16])
    res = search_plus(tables, Problem(2, 1.0), models, NO_SPLITS, PlusConfig(plus_baselines="none"))
    assert res.cost == pytest.approx(0.5 + 0.48)
    assert res.plan.column_steps == (0,)
    assert simulate(tables, res.plan, models, Problem(res.plan.ndevices, 1.0)).dims == [48, 48]


def test_descents_from_the_starts_take_gains_of_a_tenth_of_a_percent_the_last_descent_any():
    # dims 4000, 4000, 4, 4 on 2 devices from {4000, 4, 4} | {4000}: 0.5 + 40.08 = 40.58 ms; moving a 4 over
    # gives 40.54 ms, a gain of 0.099%: below _COARSE_GAIN (0.1%), above _MIN_GAIN (0.01%)
    models = linear_models(2)
    tables = tables_of_dims([4000, 4000, 4, 4])
    prob = make_space(tables, Problem(2, 1.0), models, NO_SPLITS)
    objective = Objective(prob.scorer, models.noise_model, robust=False, lam=0.0)
    start = State(prob, Plan((), ((0, 2, 3), (1,))), objective)
    assert start.cost()[0] == pytest.approx(40.58)
    coarse, moves = descend(start, 10, False, gain=plus_module._COARSE_GAIN)
    assert moves == 0 and coarse.cost()[0] == pytest.approx(40.58)
    fine, moves = descend(start, 10, False)
    assert moves == 1 and fine.cost()[0] == pytest.approx(40.54)
    assert sorted(sorted(tables[i].dim for i in s) for s in fine.plan().shards) == [[4, 4000], [4, 4000]]


@pytest.mark.parametrize("n", [2, 4])
def test_no_plan_keeps_two_halves_of_a_table_on_one_device(n):
    rng = np.random.default_rng(7 + n)
    models = random_models(n, n)
    for _ in range(3):
        tables = random_task(rng, 12)
        for alg in ("neuroshard", "neuroshard_plus"):
            plan = shard(tables, Problem(n, 4.0), models=models, alg=alg).plan
            assert merge_colocated_halves(tables, plan) == plan, alg


def test_memory_is_respected():
    # as above, but the 8-dim tables take 0.2 GB each and the 12s 0.1 GB: {8,8,8} does not fit 0.55 GB,
    # so the best plan is {12,8,8} | {12,8} = 28 | 20
    gb = 2**28
    tables = [ShardTable(i, i, TableConfig(int(size * gb / d), 1.0, BINS, d))
              for i, (d, size) in enumerate([(12, 0.1), (12, 0.1), (8, 0.2), (8, 0.2), (8, 0.2)])]
    models = linear_models(2)
    res = search_plus(tables, Problem(2, 0.55), models, NO_SPLITS, PlusConfig(plus_splits=False))
    validate_plan(tables, res.plan, Problem(2, 0.55))
    assert res.cost == pytest.approx(0.5 + 0.28)


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_never_above_any_baseline_or_neuroshard(n):
    rng = np.random.default_rng(40 + n)
    models = random_models(n, n)
    baselines = [a for a in algorithm_names() if a not in ("neuroshard", "neuroshard_plus") and is_plain(a)]
    for k in range(3):
        tables = random_task(rng, int(rng.integers(3, 25)))
        mem = 1.5 * sum(t.size_gb for t in tables) / n + max(t.size_gb for t in tables)
        got = shard(tables, Problem(n, mem, k), models, alg="neuroshard_plus", max_length=3)
        assert got.cost_ms <= shard(tables, Problem(n, mem), models, alg="neuroshard", max_length=3).cost_ms
        for alg in baselines:
            assert got.cost_ms <= shard(tables, Problem(n, mem, k), models, alg=alg).cost_ms, alg


def test_beats_neuroshard_on_average_on_seeded_tasks():
    rng = np.random.default_rng(8)
    models = random_models(4, 8)
    ns, plus = [], []
    for _ in range(4):
        tables = random_task(rng, 16)
        ns.append(search(tables, Problem(4, 2.0), models, SearchConfig(max_length=2)).cost)
        plus.append(search_plus(tables, Problem(4, 2.0), models, SearchConfig(max_length=2)).cost)
    assert np.mean(plus) < np.mean(ns)


def test_deterministic_and_options_reach_it_through_the_registry():
    rng = np.random.default_rng(3)
    models = random_models(3, 3)
    tables = random_task(rng, 12)
    a = search_plus(tables, Problem(3, 2.0), models, SearchConfig(max_length=2, beam_k=3), PlusConfig(plus_max_moves=3))
    b = search_plus(tables, Problem(3, 2.0), models, SearchConfig(max_length=2, beam_k=3), PlusConfig(plus_max_moves=3))
    assert a.plan == b.plan and a.cost == b.cost
    ctx = ShardingContext(models, options={"max_length": 2, "plus_max_moves": 3, "beam_k": 3, "other": 1})
    assert get_sharder("neuroshard_plus")(tables, Problem(3, 2.0), ctx) == a.plan
    # the options change the search (here: local searches cut short at 3 moves each end above the full ones)
    default = search_plus(tables, Problem(3, 2.0), models, SearchConfig(max_length=2))
    assert default.cost < a.cost and a.moves < default.moves
    # no local search: the best start
    none = search_plus(tables, Problem(3, 2.0), models, SearchConfig(max_length=2), PlusConfig(plus_max_moves=0))
    assert not none.refined and none.cost == min(none.start_costs.values())


def test_no_plan_fits_is_an_out_of_memory_error():
    tables = [ShardTable(0, 0, TableConfig(2**28, 1.0, BINS, 4))]  # 4 GB, cannot be split
    with pytest.raises(OutOfMemoryError, match="neuroshard_plus found no plan"):
        search_plus(tables, Problem(2, 1.0), linear_models(2))


def test_bad_options_are_clear_errors():
    with pytest.raises(ConfigError, match="plus_starts"):
        PlusConfig(plus_starts=0)
    with pytest.raises(ConfigError, match="plus_tabu"):
        PlusConfig.from_options({"plus_tabu": -1})
    with pytest.raises(ConfigError, match="unknown sharder nope"):
        PlusConfig(plus_baselines="dim_greedy,nope")
    assert PlusConfig(plus_baselines="none").baselines() == []
    assert PlusConfig(plus_baselines="dim_greedy").baselines() == ["dim_greedy"]


def test_registered_after_the_other_algorithms_and_skips_learned_sharders(monkeypatch):
    names = algorithm_names()
    assert names.index("neuroshard_plus") == names.index("autoshard") + 1
    assert is_plain("dim_greedy") and not is_plain("dreamshard") and not is_plain("torchrec")

    def learned(tables, problem, ctx):
        raise AssertionError("a learned sharder must not be run as a baseline")

    monkeypatch.setitem(registry._REGISTRY, "policy_net", learned)
    monkeypatch.setitem(registry._OPTIONS, "policy_net", "policy_net_path")
    assert not is_plain("policy_net")
    assert "policy_net" not in PlusConfig().baselines()
    rng = np.random.default_rng(2)
    search_plus(random_task(rng, 6), Problem(2, 2.0), random_models(2, 2), SearchConfig(max_length=1))
