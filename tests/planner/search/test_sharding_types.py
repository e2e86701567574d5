"""NeuroShard over every sharding type (`planner.search.sharding_types`): hand-set models under which a
data-parallel or row-wise table is known to pay, tables too large for any device, constraints."""

from dataclasses import replace

import pytest

import neuroshard as ns
from neuroshard.planner.costs.cost_models import CostModels
from neuroshard.planner.costs.nets import linear_compute_model
from neuroshard.planner.costs.runtime_model import FEATURES, TorchRecRuntimeModel
from neuroshard.planner.search.beam import SearchConfig, search
from neuroshard.planner.search.sharding_types import narrowest_elements, patched, spread_kinds, spread_search
from neuroshard.planner.simulator import simulate
from neuroshard.problem import Problem
from neuroshard.types.constraints import TableConstraints
from neuroshard.types.errors import InvalidPlanError, OutOfMemoryError
from neuroshard.types.plan import Spread
from neuroshard.types.tables import ShardTable, TableConfig
from tests.planner.test_simulator import BINS, diagonal_comm_model

EVERY = (0, 1, 2, 3)
EVERY_HOST = ((0, 1), (2, 3))


def models(types=("row_wise", "data_parallel"), n=4, hosts=None, **terms):
    """A kernel costs 0.1 + 0.001 x dims + 0.01 x dim x pooling ms; the runtime model's terms as given, with a
    batch of 1e6 so that a term in millions reads as the plain count; `hosts`: the ranks per host of its
    table-row-wise samples."""
    coef = tuple(float(terms.get(f, 0.0)) for f in FEATURES)
    base = CostModels(linear_compute_model(0.001, 0.1, 0.01), diagonal_comm_model("fw", n, 0.0, 0.0),
                      diagonal_comm_model("bw", n, 0.0, 0.0))
    return replace(base, runtime=TorchRecRuntimeModel(n, 1_000_000, coef, types=tuple(types), local_world_size=hosts))


def hot_task():
    # table 0: 100 rows of dim 4 (it cannot be column-split), looked up 200 times a sample: one rank running it
    # whole costs 0.1 + 0.004 + 8 ms; 7 cold tables
    return [ShardTable(0, 0, TableConfig(100, 200.0, BINS, 4))] + [
        ShardTable(i, i, TableConfig(1000, 1.0, BINS, 16)) for i in range(1, 8)]


def test_a_hot_small_table_goes_data_parallel_when_the_model_says_it_pays():
    # each rank runs the hot table over a quarter of the batch (2.1 ms), its 400 elements all-reduced for
    # 0.04 ms; row-wise would split its lookups the same way but pays 4 (B x dim) to the reduce-scatter; a cold
    # table's 16,000 elements would cost 1.6 ms to all-reduce, more than it saves
    m = models(compute_max=1.0, allreduce=100.0, reduce=1.0)
    tables, problem = hot_task(), Problem(4, 1.0)
    plan, cost = spread_search(tables, problem, m)
    assert plan.spread == (Spread(0, "data_parallel", EVERY),)
    assert cost == pytest.approx(simulate(tables, plan, m, problem).cost, rel=1e-9)
    plain = search(tables, problem, m).cost
    # by hand: the data-parallel group's kernel on each rank 0.1 + 0.004 + 0.01 x 4 x 50, its all-reduce
    # 100 x 0.0004, the table-wise group's busiest rank two cold tables 0.1 + 0.032 + 0.32; without spreading,
    # the hot table's rank alone costs more than 8.1
    assert cost == pytest.approx(2.104 + 0.04 + 0.452, rel=1e-6)
    assert plain >= 0.1 + 0.004 + 8.0
    # through the registered sharder and the library call: the same plan
    assert ns.shard(tables, problem, models=m, alg="neuroshard", runtime="torchrec").plan == plan
    # a model fitted on no data-parallel plans never chooses it: row-wise is what it may use
    rw_only = replace(m, runtime=replace(m.runtime, types=("row_wise",)))
    assert [s.kind for s in spread_search(tables, problem, rw_only)[0].spread] == ["row_wise"]
    # nor does a table the constraints keep whole, nor a search told not to look
    whole = replace(problem, constraints=TableConstraints(whole=(0,)))
    assert spread_search(tables, whole, m)[0].spread == ()
    # nor a kind the table's sharding types leave out (TorchRec's ParameterConstraints.sharding_types)
    rw_allowed = replace(problem, constraints=TableConstraints(kinds=((0, ("row_wise",)),)))
    rw_plan = spread_search(tables, rw_allowed, m)[0]
    assert [(s.table, s.kind) for s in rw_plan.spread] == [(0, "row_wise")]
    with pytest.raises(InvalidPlanError, match="table 0 may be row_wise, the plan makes it data_parallel"):
        simulate(tables, plan, m, rw_allowed)
    assert spread_search(tables, problem, m, SearchConfig(spread_rounds=0))[0].spread == ()


def test_two_hot_tables_go_data_parallel_together_where_neither_pays_alone():
    # each sharding-type group costs 3 ms more (its input distribution and exchanges); two hot tables, each
    # 8.104 ms whole on a rank, and 6 cold ones (0.276 ms each alone)
    m = models(compute_max=1.0, allreduce=100.0, reduce=1.0, groups=3.0)
    tables = [ShardTable(i, i, TableConfig(100, 200.0, BINS, 4)) for i in range(2)] + [
        ShardTable(i, i, TableConfig(1000, 1.0, BINS, 16)) for i in range(2, 8)]
    problem = Problem(4, 1.0)
    plain = search(tables, problem, m)
    # table-wise only: one group, its busiest rank a hot table's (the search puts a cold one beside it: 8.28)
    assert plain.cost == pytest.approx(3.0 + 8.104 + 0.176, rel=1e-6)
    # one hot table data-parallel does not pay: the other still sets the table-wise group's time, and the
    # data-parallel group adds its 3 ms, its kernel (0.1 + 0.004 + 2) and all-reduce (400 elements: 0.04)
    one = simulate(tables, patched(tables, plain.plan, [Spread(0, "data_parallel", EVERY)]), m, problem)
    assert one.cost == pytest.approx(2 * 3.0 + 8.28 + 2.104 + 0.04, rel=1e-6) and one.cost > plain.cost
    # both do: 2 groups, the data-parallel kernel 0.1 + 0.008 + 4 and all-reduce 0.08, the cold tables two a
    # rank (0.1 + 0.032 + 0.32)
    plan, cost = spread_search(tables, problem, m)
    assert plan.spread == (Spread(0, "data_parallel", EVERY), Spread(1, "data_parallel", EVERY))
    assert cost == pytest.approx(2 * 3.0 + 4.108 + 0.08 + 0.452, rel=1e-6)
    assert cost == pytest.approx(simulate(tables, plan, m, problem).cost, rel=1e-9)


def test_a_table_that_fits_no_device_is_row_wise_and_the_rest_placed_around_it():
    # 1 MB devices; table 0: 100,000 rows x 8, 400 KB even at its narrowest shard (dim 4) x ... = 1.6 MB
    mb = 2**20 / 2**30
    tables = [ShardTable(0, 0, TableConfig(100_000, 1.0, BINS, 8))] + [
        ShardTable(i, i, TableConfig(1000, 1.0, BINS, 32)) for i in range(1, 6)]
    assert narrowest_elements(tables[0]) * 4 > 2**20
    m = models(compute_max=1.0, reduce=0.1)
    problem = Problem(4, mb)
    plan, cost = spread_search(tables, problem, m, SearchConfig(spread_rounds=0))
    assert plan.spread == (Spread(0, "row_wise", EVERY),)
    bd = simulate(tables, plan, m, problem)  # 800 KB of it on each device, the other tables around it
    assert bd.cost == pytest.approx(cost, rel=1e-9) and max(bd.mem_gb) <= mb
    with pytest.raises(OutOfMemoryError):  # a model that cannot price row-wise has no plan for it
        spread_search(tables, problem, models(types=("data_parallel",), compute_max=1.0))


def paper_models(rs=(0.1, 1000.0), ag=(0.1, 1000.0), ar=(0.01, 100.0), n=4):
    """The paper's runtime: kernels as `models`, no all-to-all cost, the collectives linear in M elements, at a
    global batch of 4096."""
    from neuroshard.planner.costs.collective_model import CollectiveFit, CollectiveModel

    base = CostModels(linear_compute_model(0.001, 0.1, 0.01), diagonal_comm_model("fw", n, 0.0, 0.0),
                      diagonal_comm_model("bw", n, 0.0, 0.0))
    fits = {op: CollectiveFit("linear", list(c), 10) for op, c in (("reduce_scatter", rs), ("all_gather", ag),
                                                                   ("all_reduce", ar))}
    return replace(base, collectives=CollectiveModel(n, fits)).at_batch(4096)


def test_a_table_kept_whole_that_fits_no_device_is_row_wise_where_allowed():
    """A 100,000 x 8 table (3.2 MB) on devices of 2 MB: its halves' quarters would fit, but kept whole
    (TorchRec's table-wise and row-wise only) it fits no device: row-wise when its kinds allow it, else no plan;
    with a narrowest piece of 8 columns (`min_dim`) the same."""
    tables = [ShardTable(0, 0, TableConfig(100_000, 1.0, BINS, 8))] + [
        ShardTable(i, i, TableConfig(1000, 1.0, BINS, 32)) for i in range(1, 4)]
    m, mb = models(compute_max=1.0, reduce=0.1), 2e6 / 2**30
    for cons in (TableConstraints(whole=(0,), kinds=((0, ("row_wise",)),)),
                 TableConstraints(min_dim=((0, 8),), kinds=((0, ("row_wise",)),))):
        assert narrowest_elements(tables[0], cons, 0) == 800_000 > narrowest_elements(tables[0]) == 400_000
        plan, _ = spread_search(tables, Problem(4, mb, constraints=cons), m, SearchConfig(spread_rounds=0))
        assert plan.spread == (Spread(0, "row_wise", EVERY),)
    with pytest.raises(OutOfMemoryError):
        spread_search(tables, Problem(4, mb, constraints=TableConstraints(whole=(0,))), m)


def test_on_the_paper_runtime_the_collective_model_prices_the_same_choices():
    # the hot table data-parallel: each rank's kernel runs it over a quarter of the batch (pooling 50: 0.004 +
    # 2 ms), its 400 elements all-reduced (0.01 + 0.04 ms); row-wise would reduce-scatter and all-gather 4096 x 4
    # (16 ms each); the cold tables' 7 x 16 dims split and balanced, 28 a rank (0.001 x 28 + 0.01 x 28)
    m = paper_models()
    tables, problem = hot_task(), Problem(4, 1.0)
    plan, cost = spread_search(tables, problem, m)
    assert plan.spread == (Spread(0, "data_parallel", EVERY),)
    assert cost == pytest.approx(simulate(tables, plan, m, problem).cost, rel=1e-9)
    assert cost == pytest.approx(0.1 + 2.004 + 0.028 + 0.28 + 0.05, rel=1e-6)
    assert search(tables, problem, m).cost >= 0.1 + 0.004 + 8.0
    assert ns.shard(tables, problem, models=m, alg="neuroshard").plan == plan
    # without the all-reduce's fit data-parallel is not priced, and row-wise does not pay here
    rw = replace(m, collectives=replace(m.collectives, fits={k: v for k, v in m.collectives.fits.items()
                                                             if k != "all_reduce"}))
    assert spread_search(tables, problem, rw)[0].spread == ()
    # a table larger than every device even at its narrowest shard goes row-wise; without the model, no plan
    mb = 2**20 / 2**30
    big = [ShardTable(0, 0, TableConfig(100_000, 1.0, BINS, 8))] + [
        ShardTable(i, i, TableConfig(1000, 1.0, BINS, 32)) for i in range(1, 6)]
    plan, _ = spread_search(big, Problem(4, mb), m, SearchConfig(spread_rounds=0))
    assert plan.spread == (Spread(0, "row_wise", EVERY),)
    with pytest.raises(OutOfMemoryError):
        ns.shard(big, Problem(4, mb), models=replace(m, collectives=None), alg="neuroshard")


def host_models():
    """`paper_models` on 4 ranks without the all-reduce's fit (no data-parallel) and with fits over a host's 2
    ranks: a reduce-scatter or all-gather of 4096 x 4 costs 0.1 + 16.384 ms over every rank, 0.1 + 0.16384 and
    0.2 + 0.32768 over a host's."""
    from neuroshard.planner.costs.collective_model import CollectiveFit

    m = paper_models()
    fits = {k: v for k, v in m.collectives.fits.items() if k != "all_reduce"}
    fits |= {"reduce_scatter@2": CollectiveFit("linear", [0.1, 10.0], 10),
             "all_gather@2": CollectiveFit("linear", [0.2, 20.0], 10)}
    return replace(m, collectives=replace(m.collectives, fits=fits))


def test_with_hosts_a_hot_table_goes_table_row_wise_where_every_rank_would_cost_too_much():
    m = host_models()
    fits = m.collectives.fits
    tables, hosts = hot_task(), Problem(4, 1.0, local_world_size=2)
    plan, cost = spread_search(tables, hosts, m)
    assert Spread(0, "table_row_wise", (0, 1)) in plan.spread
    assert {s.kind for s in plan.spread} == {"table_row_wise"} and all(s.ranks in ((0, 1), (2, 3))
                                                                       for s in plan.spread)
    # the slowest rank: half the hot table's rows and lookups (0.01 x 4 x 100) with half of a cold table
    # (0.1 + 0.001 x (4 + 8) + 0.01 x (400 + 8)), and its host's two collectives
    assert cost == pytest.approx(simulate(tables, plan, m, hosts).cost, rel=1e-9)
    assert cost == pytest.approx(4.192 + 0.26384 + 0.52768, rel=1e-6)
    assert ns.shard(tables, hosts, models=m, alg="neuroshard").plan == plan
    # on one host table-row-wise is row-wise, whose collectives over every rank cost more than the hot table
    # whole on one device: 0.1 + 0.004 + 8
    plan, cost = spread_search(tables, Problem(4, 1.0), m)
    assert plan.spread == () and cost == pytest.approx(8.104, rel=1e-6)
    # without the host groups' fits it is not searched
    plan, _ = spread_search(tables, hosts, replace(m, collectives=replace(m.collectives, fits={
        k: v for k, v in fits.items() if "@" not in k})))
    assert plan.spread == ()


def test_under_torchrecs_runtime_a_hot_table_goes_table_row_wise_on_a_host_when_fitted_on_such_hosts():
    # a host's reduce-scatter costs 0.1 ms per M floats, every rank's 100: the hot table table-row-wise runs half
    # its rows and lookups on each rank of one host, 0.1 + 0.004 + 0.01 x 4 x 100 = 4.104, and sends B x 4
    # (4 M floats, 0.4 ms); the cold tables' table-wise group, two on its busiest rank: 0.1 + 0.032 + 0.32
    m = models(types=("row_wise", "table_row_wise"), hosts=2, compute_max=1.0, reduce=100.0, reduce_host=0.1)
    tables, hosts = hot_task(), Problem(4, 1.0, local_world_size=2)
    assert spread_kinds(m, hosts) == ("row_wise", "table_row_wise")
    plan, cost = spread_search(tables, hosts, m)
    assert [(s.table, s.kind) for s in plan.spread] == [(0, "table_row_wise")] and plan.spread[0].ranks in EVERY_HOST
    assert cost == pytest.approx(4.104 + 0.4 + 0.452, rel=1e-6)
    assert cost == pytest.approx(simulate(tables, plan, m, hosts).cost, rel=1e-9)
    assert ns.shard(tables, hosts, models=m, alg="neuroshard", runtime="torchrec").plan == plan
    # on one host, or on hosts of another size than the model was fitted on, it is not searched: the hot table's
    # rank alone costs at least 0.1 + 0.004 + 8
    for other in (Problem(4, 1.0), Problem(4, 1.0, local_world_size=2)):
        fitted = m if other.local_world_size is None else replace(m, runtime=replace(m.runtime, local_world_size=4))
        assert spread_kinds(fitted, other) == ("row_wise",)
        plan, cost = spread_search(tables, other, fitted)
        assert plan.spread == () and cost >= 8.104
