from dataclasses import replace

import numpy as np
import pytest
import torch

from neuroshard.planner.costs.cost_models import CostModels
from neuroshard.planner.costs.nets import (
    CommCostModel,
    ComputeCostModel,
    feature_stats,
    linear_comm_model,
    linear_compute_model,
    table_features,
)
from neuroshard.planner.costs.scorer import PlanScorer, get_scorer
from neuroshard.planner.simulator import (
    mem_cap_elements,
    score_placements,
    simulate,
    validate_plan,
)
from neuroshard.problem import Problem
from neuroshard.types.errors import InvalidPlanError, NeuroShardError, OutOfMemoryError
from neuroshard.types.plan import Plan, Spread
from neuroshard.types.tables import ShardTable, TableConfig

BINS = tuple([1 / 17] * 17)


# --------------------------------------------------------------------------- hand-set models


def diagonal_comm_model(kind: str, n: int, a: float, b: float, c: float = 0.0) -> CommCostModel:
    """bw: out[r] = a * dims[r] + c; fw: out[r] = a * dims[r] + b * sleeps[r] + c (ms)."""
    weight = np.hstack([a * np.eye(n), b * np.eye(n)]) if kind == "fw" else a * np.eye(n)
    return linear_comm_model(kind, n, weight, np.full(n, c))


def hand_models(n=2) -> CostModels:
    return CostModels(linear_compute_model(0.01, 0.5), diagonal_comm_model("fw", n, 0.01, 0.5, 0.2),
                      diagonal_comm_model("bw", n, 0.02, 0.0, 0.1))


def random_models(n, seed=0, scale=5.0) -> CostModels:
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    configs = [random_config(rng).with_dim(int(d)) for _ in range(40) for d in (4, 8, 16, 32, 64, 128)]
    mean, std = feature_stats(table_features(configs))
    cm = ComputeCostModel(mean, std, target_scale=scale).eval()
    fw = CommCostModel("fw", n, torch.full((2 * n,), 64.0), torch.full((2 * n,), 64.0), target_scale=2.0).eval()
    bw = CommCostModel("bw", n, torch.full((n,), 64.0), torch.full((n,), 64.0), target_scale=2.0).eval()
    return CostModels(cm, fw, bw)


def random_config(rng) -> TableConfig:
    return TableConfig(int(10 ** rng.uniform(2, 6)), float(rng.uniform(1, 30)), tuple(rng.dirichlet(np.ones(17))))


def tables_of(dims, rows=1000) -> list[ShardTable]:
    return [ShardTable(i, i, TableConfig(rows, 1.0, BINS, d)) for i, d in enumerate(dims)]


# --------------------------------------------------------------------------- the breakdown by hand


def test_breakdown_matches_hand_computation():
    tables = tables_of([16, 32, 8])
    bd = simulate(tables, Plan((), ((0, 2), (1,))), hand_models(2), Problem(2, 1.0))
    # compute = 0.5 + 0.01 * dims; bw = 0.02 * dims + 0.1; skew = ready - min(ready);
    # fw = 0.01 * dims + 0.5 * skew + 0.2
    assert bd.dims == [24, 32]
    np.testing.assert_allclose(bd.compute, [0.74, 0.82], rtol=1e-6)
    np.testing.assert_allclose(bd.bw_comm, [0.58, 0.74], rtol=1e-6)
    np.testing.assert_allclose(bd.skew, [0.0, 0.24], atol=1e-6)
    np.testing.assert_allclose(bd.fw_comm, [0.44, 0.64], rtol=1e-6)
    np.testing.assert_allclose(bd.total, [1.76, 2.20], rtol=1e-6)
    assert bd.cost == pytest.approx(2.20, rel=1e-6)
    assert bd.mem_gb[1] == pytest.approx(1000 * 32 * 4 / 2**30)


def test_empty_device_costs_zero_compute_and_splits_are_applied():
    tables = tables_of([64, 16])
    # split table 0 into two 32s (indices 0 and 2); device 2 stays empty
    bd = simulate(tables, Plan((0,), ((0, 1), (2,), ())), hand_models(3), Problem(3, 1.0))
    assert bd.dims == [48, 32, 0]
    np.testing.assert_allclose(bd.compute, [0.98, 0.82, 0.0], rtol=1e-6)
    np.testing.assert_allclose(bd.bw_comm, [1.06, 0.74, 0.1], rtol=1e-6)
    ready = np.array([0.98 + 1.06, 0.82 + 0.74, 0.1])
    np.testing.assert_allclose(bd.skew, ready - ready.min(), atol=1e-6)


def test_an_unpooled_table_sends_dim_times_pooling_factor():
    # table 1 unpooled, dim 8, 3 lookups per sample: 24 floats per sample to the comm models; bw = 0.02 * dims + 0.1
    tables = [ShardTable(0, 0, TableConfig(1000, 1.0, BINS, 16)),
              ShardTable(1, 1, TableConfig(1000, 3.0, BINS, 8, pooled=False))]
    bd = simulate(tables, Plan((), ((0,), (1,))), hand_models(2), Problem(2, 1.0))
    assert bd.dims == [16, 24]
    np.testing.assert_allclose(bd.bw_comm, [0.42, 0.58], rtol=1e-6)
    pooled = simulate([tables[0], ShardTable(1, 1, replace(tables[1].config, pooled=True))], Plan((), ((0,), (1,))),
                      hand_models(2), Problem(2, 1.0))
    assert pooled.dims == [16, 8]


# --------------------------------------------------------------------------- fast copies equal the models


def test_numpy_scorer_agrees_with_torch_models():
    n = 4
    models = random_models(n, seed=3)
    scorer = get_scorer(models)
    assert scorer.uses_numpy
    rng = np.random.default_rng(0)
    configs = [random_config(rng).with_dim(int(rng.choice([8, 32, 128]))) for _ in range(12)]
    tables = [ShardTable(i, i, c) for i, c in enumerate(configs)]
    shards = ((0, 5, 7), (1, 2), (3, 4, 6, 8, 9), (10, 11))
    bd = simulate(tables, Plan((), shards), models, Problem(Plan((), shards).ndevices, 100.0))
    want_compute = models.compute.predict_sets(configs, [list(s) for s in shards])
    np.testing.assert_allclose(bd.compute, want_compute, rtol=1e-4, atol=1e-5)
    dims = np.array([[sum(configs[i].dim for i in s) for s in shards]], dtype=np.float32)
    want_bw = models.bw.predict(dims)[0]
    np.testing.assert_allclose(bd.bw_comm, want_bw, rtol=1e-4, atol=1e-5)
    ready = np.asarray(bd.compute) + np.asarray(bd.bw_comm)
    want_fw = models.fw.predict(dims, (ready - ready.min())[None].astype(np.float32))[0]
    np.testing.assert_allclose(bd.fw_comm, want_fw, rtol=1e-4, atol=1e-5)


def test_torch_fallback_gives_the_same_costs():
    models = random_models(2, seed=5)
    fast = PlanScorer(models.compute, models.fw, models.bw)
    slow = PlanScorer(models.compute, models.fw, models.bw)
    slow._table = slow._head = slow._fw = slow._bw = None  # as for a model layout it does not know
    rng = np.random.default_rng(1)
    configs = [random_config(rng).with_dim(16) for _ in range(5)]
    for scorer_a, scorer_b in [(fast, slow)]:
        ea, eb = scorer_a.embed(configs), scorer_b.embed(configs)
        np.testing.assert_allclose(ea, eb, rtol=1e-5, atol=1e-6)
        ca = scorer_a.shard_costs(ea, [[0, 1], [2, 3, 4]])
        cb = scorer_b.shard_costs(eb, [[0, 1], [2, 3, 4]])
        np.testing.assert_allclose(ca, cb, rtol=1e-4, atol=1e-5)
        dims = np.array([[40.0, 120.0]])
        for x, y in zip(scorer_a.comm(dims, ca[None]), scorer_b.comm(dims, cb[None])):
            np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5)


def test_batched_plan_cost_equals_simulate():
    models = random_models(3, seed=2)
    scorer = get_scorer(models)
    tables = tables_of([8, 16, 32, 64, 8])
    plans = [Plan((), ((0, 1), (2,), (3, 4))), Plan((3,), ((0, 5), (3, 2), (1, 4))),
             Plan((), ((0, 1, 2, 3, 4), (), ()))]
    bds = [simulate(tables, p, models, Problem(p.ndevices, 1.0)) for p in plans]
    compute = np.array([b.compute for b in bds])
    dims = np.array([b.dims for b in bds], dtype=np.float64)
    bw, fw, total, cost = score_placements(scorer, compute, dims)
    # float32 comm models: the batch size may change the last bits
    np.testing.assert_allclose(cost, [b.cost for b in bds], rtol=1e-6)
    np.testing.assert_allclose(fw, [b.fw_comm for b in bds], rtol=1e-6, atol=1e-7)


def test_equal_shards_get_bit_equal_costs_in_any_batch():
    models = random_models(2, seed=4)
    scorer = get_scorer(models)
    rng = np.random.default_rng(0)
    acc = scorer.acc0 + scorer.project(np.abs(rng.normal(size=(50, 32))))
    alone = np.array([scorer.cost_from_acc(acc[i:i + 1])[0] for i in range(50)])
    assert np.array_equal(scorer.cost_from_acc(acc), alone)
    assert np.array_equal(scorer.cost_from_acc(acc[7:40]), alone[7:40])


# --------------------------------------------------------------------------- validation


def test_validate_plan_rejects_broken_plans():
    tables = tables_of([16, 32, 8])
    ok = validate_plan(tables, Plan((1,), ((0, 3), (1, 2))), Problem(2, 1.0))
    assert [t.dim for t in ok] == [16, 16, 8, 16]
    cases = {
        "devices": Plan((), ((0, 1, 2),)),
        "range": Plan((), ((0, 1), (2, 3))),
        "twice": Plan((), ((0, 1), (1, 2))),
        "never": Plan((), ((0,), (2,))),
        "split": Plan((2, 2), ((0, 1), (2, 3, 4))),  # 8 -> 4 -> 2 is not a multiple of 4
        "split range": Plan((5,), ((0, 1), (2, 3))),
    }
    for name, plan in cases.items():
        with pytest.raises(InvalidPlanError):
            validate_plan(tables, plan, Problem(2, 1.0))
    with pytest.raises(InvalidPlanError, match="twice on device 0"):
        validate_plan(tables, Plan((), ((0, 0, 1, 2), ())), Problem(2, 1.0))
    with pytest.raises(InvalidPlanError):
        simulate(tables, "not a plan", hand_models(2), Problem(2, 1.0))


def test_memory_is_checked_exactly_and_reported_with_numbers():
    # 2**28 fp32 elements are exactly 1 GB
    t = [ShardTable(0, 0, TableConfig(2**22, 1.0, BINS, 64)), ShardTable(1, 1, TableConfig(4, 1.0, BINS, 4))]
    assert mem_cap_elements(1.0) == 2**28
    validate_plan(t, Plan((), ((0,), (1,))), Problem(2, 1.0))  # exactly at the cap fits
    with pytest.raises(OutOfMemoryError) as e:
        validate_plan(t, Plan((), ((0, 1), ())), Problem(2, 1.0))
    assert e.value.max_mem == 1.0 and e.value.used[0] > 1.0 and e.value.used[1] == 0.0
    assert "device 0" in str(e.value)
    with pytest.raises(OutOfMemoryError):
        simulate(t, Plan((), ((0, 1), ())), hand_models(2), Problem(2, 1.0))


def test_each_device_is_checked_against_its_own_memory():
    # 2**22 x 64 fp32 is 1 GB: it fits device 0 (1 GB), not device 1 (0.5 GB)
    t = [ShardTable(0, 0, TableConfig(2**22, 1.0, BINS, 64)), ShardTable(1, 1, TableConfig(4, 1.0, BINS, 4))]
    validate_plan(t, Plan((), ((0,), (1,))), Problem(2, (1.0, 0.5)))
    with pytest.raises(OutOfMemoryError, match=r"device 1 holds 1 GB > its 0.5 GB") as e:
        validate_plan(t, Plan((), ((1,), (0,))), Problem(2, (1.0, 0.5)))
    assert e.value.max_mem == 0.5


def test_plans_that_break_the_table_constraints_are_invalid():
    from neuroshard.types.constraints import TableConstraints

    tables = tables_of([16, 32, 8])
    split1 = Plan((1,), ((0, 3), (1, 2)))  # table 1 cut in two: one half on each device
    cases = [(TableConstraints(whole=(1,)), split1, "table 1 must stay whole, the plan splits it into 2 pieces"),
             (TableConstraints(devices=((1, (0,)),)), split1,
              r"table 1 may use devices \[0\], the plan puts a piece on device 1"),
             (TableConstraints(colocate=((0, 2),)), Plan((), ((0, 1), (2,))),
              r"tables \[0, 2\] must share a device, the plan puts them on devices \[0, 1\]")]
    for cons, plan, message in cases:
        validate_plan(tables, plan, Problem(2, 1.0))  # fine without the constraint
        with pytest.raises(InvalidPlanError, match=message):
            validate_plan(tables, plan, Problem(2, 1.0, constraints=cons))
    validate_plan(tables, Plan((), ((0, 2), (1,))), Problem(2, 1.0, constraints=cases[2][0]))


def test_models_for_another_device_count_are_refused():
    with pytest.raises(Exception, match="devices"):
        simulate(tables_of([8, 8, 8]), Plan((), ((0,), (1,), (2,))), hand_models(2), Problem(3, 1.0))


@pytest.mark.parametrize("wait_inputs", [False, True])
def test_numpy_scorer_matches_torch_with_the_forward_wait_term(wait_inputs):
    torch.manual_seed(3)
    n = 4
    fw = CommCostModel("fw", n, torch.full((2 * n,), 64.0), torch.full((2 * n,), 64.0), target_scale=2.0,
                       wait_term=True, wait_inputs=wait_inputs).eval()
    models = random_models(n)
    models = CostModels(models.compute, fw, models.bw)
    scorer = PlanScorer(models.compute, models.fw, models.bw)
    assert scorer.uses_numpy  # the NumPy copy reproduced the wait term, or it would have fallen back
    dims = np.array([[64.0, 128.0, 32.0, 0.0]])
    compute = np.array([[10.0, 3.0, 7.0, 0.0]])
    bw, fw_ms = scorer.comm(dims, compute)
    skew = (compute + bw) - (compute + bw).min()
    assert fw_ms[0] == pytest.approx(fw.predict(dims, skew.astype(np.float32))[0], rel=1e-4, abs=1e-4)


# --------------------------------------------------------------------------- spread tables


def test_memory_follows_each_tables_sharding_type():
    from neuroshard.planner.simulator import device_elements
    from neuroshard.types.plan import Spread

    # 4 devices. t0 1000 x 16 table-wise on 0; t1 1000 x 8 row-wise: 250 rows x 8 = 2000 on each;
    # t2 50 x 4 data-parallel: 200 and its dense gradient 200 on each; t3 7 x 8 table-row-wise over ranks 2, 3:
    # 4 x 8 and 3 x 8
    tables = [ShardTable(i, i, TableConfig(r, 1.0, BINS, d)) for i, (r, d) in enumerate(
        [(1000, 16), (1000, 8), (50, 4), (7, 8)])]
    plan = Plan((), ((0,), (), (), ()), (Spread(1, "row_wise", (0, 1, 2, 3)), Spread(2, "data_parallel", (0, 1, 2, 3)),
                                         Spread(3, "table_row_wise", (2, 3))))
    split = validate_plan(tables, plan, Problem(4, 1.0))
    assert device_elements(tables, split, plan) == [16000 + 2000 + 400, 2400, 2400 + 32, 2400 + 24]
    # device 0 holds 18,400 elements = 73,600 bytes: a cap just below it is out of memory, naming the spread tables
    cap = 18399 * 4 / 2**30
    with pytest.raises(OutOfMemoryError, match=r"device 0 holds .* with spread tables 1 \(row_wise\), 2 "
                                               r"\(data_parallel\)"):
        validate_plan(tables, plan, Problem(4, (cap, 1.0, 1.0, 1.0)))
    validate_plan(tables, plan, Problem(4, (18400 * 4 / 2**30, 1.0, 1.0, 1.0)))
    # data-parallel is for small tables: t2's 400 elements within a sixteenth of a device, t0's 32,000 not
    from neuroshard.planner.simulator import replicable

    room = Problem(4, 16 * 400 * 4 / 2**30)
    assert replicable(tables[2], room) and not replicable(tables[0], room)
    # row-wise over more ranks than the table has rows: a one-line error naming it
    tiny = tables[:3] + [ShardTable(3, 3, TableConfig(3, 1.0, BINS, 8))]
    with pytest.raises(InvalidPlanError, match="table 3 has 3 rows, fewer than the 4 ranks it is row_wise over"):
        validate_plan(tiny, Plan((), ((0,), (), (), ()), (Spread(1, "row_wise", (0, 1, 2, 3)),
                                                          Spread(2, "data_parallel", (0, 1, 2, 3)),
                                                          Spread(3, "row_wise", (0, 1, 2, 3)))), Problem(4, 1.0))


def test_spread_tables_break_whole_and_device_constraints_and_are_not_priced():
    from neuroshard.types.constraints import TableConstraints
    from neuroshard.types.plan import Spread

    tables = tables_of([16, 32, 8])
    plan = Plan((), ((0,), (2,)), (Spread(1, "row_wise", (0, 1)),))
    with pytest.raises(InvalidPlanError, match="table 1 must stay whole on one device, the plan shards it row_wise "
                                               "over 2 devices"):
        validate_plan(tables, plan, Problem(2, 1.0, constraints=TableConstraints(whole=(1,))))
    with pytest.raises(InvalidPlanError, match=r"table 1 may use devices \[1\], the plan puts a piece on device 0"):
        validate_plan(tables, plan, Problem(2, 1.0, constraints=TableConstraints(devices=((1, (1,)),))))
    with pytest.raises(NeuroShardError, match="table 1 is row_wise: the paper runtime's cost models price "
                                              "table-wise and column-wise shards only"):
        simulate(tables, plan, hand_models(2), Problem(2, 1.0))


# --------------------------------------------------------------------------- spread tables on the paper's runtime


def hand_collectives(n=2):
    """Reduce-scatter 0.1 + 1 ms per M elements, all-gather 0.2 + 2, all-reduce 0.3 + 0.5."""
    from neuroshard.planner.costs.collective_model import CollectiveFit, CollectiveModel

    return CollectiveModel(n, {"reduce_scatter": CollectiveFit("linear", [0.1, 1.0], 10),
                               "all_gather": CollectiveFit("linear", [0.2, 2.0], 10),
                               "all_reduce": CollectiveFit("linear", [0.3, 0.5], 10)})


def test_a_table_row_wise_table_is_priced_with_its_hosts_fits():
    from neuroshard.planner.costs.collective_model import CollectiveFit, CollectiveModel

    # a kernel costs 0.1 + 0.001 x dims + 0.01 x dim x pooling; no all-to-all; over a host's 2 ranks a
    # reduce-scatter costs 0.1 + 10 ms per M elements, an all-gather 0.2 + 20; over all 4 far more
    fits = {"reduce_scatter": CollectiveFit("linear", [1.0, 100.0], 10),
            "all_gather": CollectiveFit("linear", [1.0, 100.0], 10),
            "reduce_scatter@2": CollectiveFit("linear", [0.1, 10.0], 10),
            "all_gather@2": CollectiveFit("linear", [0.2, 20.0], 10)}
    m = replace(CostModels(linear_compute_model(0.001, 0.1, 0.01), diagonal_comm_model("fw", 4, 0.0, 0.0),
                           diagonal_comm_model("bw", 4, 0.0, 0.0)), collectives=CollectiveModel(4, fits)).at_batch(4096)
    tables = [ShardTable(0, 0, TableConfig(100, 200.0, BINS, 4)), ShardTable(1, 1, TableConfig(1000, 1.0, BINS, 16))]
    plan = Plan((), ((), (), (1,), ()), (Spread(0, "table_row_wise", (0, 1)),))
    bd = simulate(tables, plan, m, Problem(4, 1.0, local_world_size=2))
    # ranks 0 and 1: 50 rows each with half the lookups (pooling 100): 0.1 + 0.004 + 4; the host reduce-scatters
    # 4096 x 4 elements forward (0.1 + 0.16384) and all-gathers them backward (0.2 + 0.32768); rank 2 the cold
    # table, 0.1 + 0.016 + 0.16
    np.testing.assert_allclose(bd.compute, [4.104, 4.104, 0.276, 0.0], rtol=1e-6)
    np.testing.assert_allclose(bd.fw_comm, [0.26384, 0.26384, 0.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(bd.bw_comm, [0.52768, 0.52768, 0.0, 0.0], atol=1e-6)
    assert bd.cost == pytest.approx(4.104 + 0.26384 + 0.52768, rel=1e-6)
    assert bd.mem_gb[:2] == pytest.approx([50 * 4 * 4 / 2**30] * 2)
    # the same table row-wise over every rank: 25 rows a rank (pooling 50), rank 2's kernel with the cold table
    # (0.1 + 0.001 x 20 + 0.01 x (16 + 200)), and the 4-rank fits: 1 + 1.6384 each way
    rw = Plan((), ((), (), (1,), ()), (Spread(0, "row_wise", (0, 1, 2, 3)),))
    assert simulate(tables, rw, m, Problem(4, 1.0)).cost == pytest.approx(2.28 + 2 * 2.6384, rel=1e-6)
    # with hosts named, a table-row-wise table must span one of them
    with pytest.raises(InvalidPlanError, match=r"table 0 is table_row_wise over ranks \[0, 1, 2, 3\], not one "
                                               r"host's \(the problem's hosts: \[0, 1\], \[2, 3\]\)"):
        validate_plan(tables, Plan((), ((), (), (1,), ()), (Spread(0, "table_row_wise", (0, 1, 2, 3)),)),
                      Problem(4, 1.0, local_world_size=2))
    # a model without the host fits does not price it
    world = replace(m, collectives=CollectiveModel(4, {k: v for k, v in fits.items() if "@" not in k}))
    with pytest.raises(InvalidPlanError, match=r"table 0 is table_row_wise over ranks \[0, 1\]: the collective model "
                                               r"has no fit of reduce_scatter, all_gather over groups of 2 ranks "
                                               r"\(it has reduce_scatter, all_gather; "
                                               r"collect_collective_cost_data.py --local_world_size 2 times them\)"):
        simulate(tables, plan, world, Problem(4, 1.0, local_world_size=2))


def test_spread_tables_on_the_paper_runtime_by_hand():
    from neuroshard.planner.simulator import spread_configs

    tables = tables_of([16, 32, 8])
    every = (0, 1)
    plan = Plan((), ((0,), ()), (Spread(1, "row_wise", every), Spread(2, "data_parallel", every)))
    m = replace(hand_models(2), collectives=hand_collectives()).at_batch(1000)
    bd = simulate(tables, plan, m, Problem(2, 1.0))
    # compute 0.5 + 0.01 x dims of the kernel: rank 0 table 0, its block of table 1 and table 2's replica
    # (16 + 32 + 8), rank 1 the block and the replica (40)
    np.testing.assert_allclose(bd.compute, [1.06, 0.90], rtol=1e-6)
    # backward: the all-to-all of dims [16, 0] (0.02 x dims + 0.1), then table 1's all-gather of 1000 x 32
    # (0.2 + 0.064) and table 2's all-reduce of 1000 x 8 (0.3 + 0.004) on both ranks
    np.testing.assert_allclose(bd.bw_comm, [0.42 + 0.568, 0.1 + 0.568], rtol=1e-6)
    # ready 2.048 and 1.568: skew 0.48 on rank 0; the forward all-to-all 0.01 x dims + 0.5 x skew + 0.2, then
    # the reduce-scatter of 1000 x 32 (0.1 + 0.032)
    np.testing.assert_allclose(bd.skew, [0.48, 0.0], atol=1e-6)
    np.testing.assert_allclose(bd.fw_comm, [0.16 + 0.24 + 0.2 + 0.132, 0.2 + 0.132], rtol=1e-6)
    assert bd.cost == pytest.approx(1.06 + 0.988 + 0.732, rel=1e-6)
    np.testing.assert_allclose(bd.collectives, [[0.132, 0.568], [0.132, 0.568]], rtol=1e-6)
    # what the kernels run: a block's rows with their share of the lookups, a replica's local batch
    configs, of_rank = spread_configs(tables, plan.spread, 2)
    assert [(c.row, c.pooling_factor) for c in configs] == [(500, 0.5), (500, 0.5), (1000, 0.5), (1000, 0.5)]
    assert of_rank == [[0, 2], [1, 3]]
    # where the ids say three quarters of table 1's lookups fall in its first half, rank 0's block serves them
    skewed = list(tables)
    skewed[1] = ShardTable(1, 1, replace(tables[1].config, row_lookups=(0.375, 0.375, 0.25, 0.0)))
    configs, _ = spread_configs(skewed, plan.spread, 2)
    assert [(c.row, c.pooling_factor) for c in configs[:2]] == [(500, 0.75), (500, 0.25)]
    # without a collective model, or over fewer ranks than it was fitted on, such a plan is not priced
    with pytest.raises(InvalidPlanError, match="table 1 is row_wise: the paper runtime's cost models price "
                                               "table-wise and column-wise shards only without a collective model"):
        simulate(tables, plan, hand_models(2), Problem(2, 1.0))
    one = Plan((), ((0,), ()), (Spread(1, "table_row_wise", (1,)),))
    with pytest.raises(InvalidPlanError, match=r"table 1 is table_row_wise over ranks \[1\]: the collective "
                                               r"model has no fit of reduce_scatter, all_gather over groups of 1 "
                                               r"ranks \(it has reduce_scatter, all_gather, all_reduce\)"):
        simulate(tables, one, m, Problem(2, 1.0))
