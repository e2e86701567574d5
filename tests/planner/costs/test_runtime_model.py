"""The TorchRec runtime cost model (`planner.costs.runtime_model`): its terms of a hand-made plan computed by
hand, the non-negative fit, the model file, and the simulator and the search under it."""

import json
from dataclasses import replace

import numpy as np
import pytest

import neuroshard as ns
from neuroshard.numerics import mape
from neuroshard.planner.costs.runtime_model import (
    FEATURES,
    TorchRecRuntimeModel,
    balanced_weights,
    default_path,
    features,
    fit,
    fit_speeds,
    plan_groups,
    plan_parts,
)
from neuroshard.planner.costs.scorer import get_scorer
from neuroshard.planner.search.beam import search
from neuroshard.planner.simulator import simulate
from neuroshard.problem import Problem
from neuroshard.types.errors import ConfigError, InputError, NeuroShardError
from neuroshard.types.plan import Plan, Spread
from neuroshard.types.tables import ShardTable, TableConfig
from tests.planner.test_simulator import BINS, hand_models

BATCH = 1_000_000  # ids and outputs in millions: 1 id per unit of pooling


def hand_tables():
    # dims 16, 8, 4; pooling 2, 3, 4
    return [ShardTable(i, i, TableConfig(1000, p, BINS, d)) for i, (d, p) in enumerate(((16, 2.0), (8, 3.0),
                                                                                         (4, 4.0)))]


# table 0 halved (post-split 0 and 3, dim 8 each) on ranks 0 and 1; table 1 on rank 0, table 2 on rank 1
HAND_PLAN = Plan((0,), ((0, 1), (3, 2)))
# by hand, compute = 0.5 + 0.01 x dims per (rank, group): table-wise 0.58 (rank 0), 0.54 (rank 1);
# column-wise 0.58, 0.58. ids: table-wise 3, 4; column-wise 2, 2. outputs: table-wise 8, 4; column-wise 8, 8.
# Both ranks run a kernel of each group: 4 kernels
HAND_FEATURES = {"one": 1, "groups": 2, "compute_max": 0.58 + 0.58, "compute_mean": (0.58 + 0.54 + 0.58 + 0.58) / 2,
                 "ids_max": 4 + 2, "ids_mean": (3 + 4 + 2 + 2) / 2, "out_max": 8 + 8, "dims": (16 + 8 + 4) / 2,
                 "reduce": 0.0, "allreduce": 0.0, "reduce_host": 0.0, "kernels": 4}
COEF = (10.0, 2.0, 1.0, 0.0, 0.5, 0.0, 0.1, 0.2, 0.3, 0.4, 0.6, 0.7)


def runtime_models(coef=COEF, n=2):
    return replace(hand_models(n), runtime=TorchRecRuntimeModel(n, BATCH, coef))


def test_plan_groups_follow_the_export():
    assert plan_groups(hand_tables(), HAND_PLAN) == [1, 0, 0, 1]
    assert plan_groups(hand_tables(), Plan((), ((0, 1), (2,)))) == [0, 0, 0]


def test_features_of_a_hand_made_plan():
    parts = plan_parts(get_scorer(hand_models(2)), hand_tables(), HAND_PLAN, BATCH)
    np.testing.assert_allclose(parts.compute[0], [[0.58, 0.58, 0, 0, 0], [0.54, 0.58, 0, 0, 0]], rtol=1e-6)
    np.testing.assert_allclose(parts.ids[0], [[3, 2, 0, 0, 0], [4, 2, 0, 0, 0]])
    np.testing.assert_array_equal(parts.count[0], [[1, 1, 0, 0, 0], [1, 1, 0, 0, 0]])
    x = features(parts)[0]
    np.testing.assert_allclose(x, [HAND_FEATURES[f] for f in FEATURES], rtol=1e-6)


def test_features_of_row_wise_and_data_parallel_tables_by_hand():
    # table 0 (dim 16, pooling 2) table-wise on rank 0; table 1 (1000 rows, dim 8, pooling 3) row-wise: 500 rows
    # and 1.5 lookups a sample on each rank, B x 8 partial sums sent; table 2 (1000 x 4, pooling 4) data-parallel:
    # the whole table on each rank over half the batch, 1000 x 4 elements all-reduced
    plan = Plan((), ((0,), ()), (Spread(1, "row_wise", (0, 1)), Spread(2, "data_parallel", (0, 1))))
    parts = plan_parts(get_scorer(hand_models(2)), hand_tables(), plan, BATCH)
    np.testing.assert_allclose(parts.compute[0], [[0.66, 0, 0.58, 0.54, 0], [0, 0, 0.58, 0.54, 0]], rtol=1e-6)
    np.testing.assert_allclose(parts.ids[0], [[2, 0, 1.5, 0, 0], [0, 0, 1.5, 0, 0]])
    np.testing.assert_allclose(parts.out[0], [[16, 0, 8, 0, 0], [0, 0, 8, 0, 0]])
    x = dict(zip(FEATURES, features(parts)[0]))
    # one all-to-all kernel: table 0's on rank 0 (the spread groups run on every rank: `groups` counts them)
    want = {"one": 1, "groups": 3, "compute_max": 0.66 + 0.58 + 0.54, "compute_mean": (0.66 + 2 * 0.58 + 2 * 0.54) / 2,
            "ids_max": 2 + 1.5, "ids_mean": (2 + 1.5 + 1.5) / 2, "out_max": 16, "dims": 16 / 2, "reduce": 8,
            "allreduce": 0.004, "reduce_host": 0.0, "kernels": 1}
    assert x == pytest.approx(want, rel=1e-6)
    # a model fitted on such plans prices them; one fitted without them refuses, naming the table
    seen = replace(hand_models(2), runtime=TorchRecRuntimeModel(2, BATCH, COEF, types=("row_wise", "data_parallel")))
    problem = Problem(2, 1.0)
    assert simulate(hand_tables(), plan, seen, problem).cost == pytest.approx(
        sum(c * want[f] for c, f in zip(COEF, FEATURES)), rel=1e-6)
    with pytest.raises(NeuroShardError, match="table 2 is data_parallel: the TorchRec runtime model was fitted on no "
                                              "data_parallel plans"):
        simulate(hand_tables(), plan, replace(seen, runtime=replace(seen.runtime, types=("row_wise",))), problem)


def test_features_of_table_row_wise_tables_on_two_hosts_by_hand():
    # 4 ranks as two hosts of two. Table 0 (1000 rows, dim 16, pooling 2) table-row-wise on host (0, 1): 500 rows
    # and 1 lookup a sample on each, B x 16 partial sums sent to the host's reduce-scatter; table 1 (dim 8,
    # pooling 3) table-row-wise on host (2, 3): 1.5 lookups, B x 8; table 2 (dim 4, pooling 4) row-wise over all
    # four: 250 rows and 1 lookup on each, B x 4
    plan = Plan((), ((), (), (), ()), (Spread(0, "table_row_wise", (0, 1)), Spread(1, "table_row_wise", (2, 3)),
                                       Spread(2, "row_wise", (0, 1, 2, 3))))
    parts = plan_parts(get_scorer(hand_models(4)), hand_tables(), plan, BATCH)
    # kernels (0.5 + 0.01 x dims): 0.66 for table 0's blocks, 0.58 for table 1's, 0.54 for table 2's
    np.testing.assert_allclose(parts.compute[0], [[0, 0, 0.54, 0, 0.66]] * 2 + [[0, 0, 0.54, 0, 0.58]] * 2, rtol=1e-6)
    np.testing.assert_allclose(parts.ids[0], [[0, 0, 1, 0, 1]] * 2 + [[0, 0, 1, 0, 1.5]] * 2)
    np.testing.assert_allclose(parts.out[0], [[0, 0, 4, 0, 16]] * 2 + [[0, 0, 4, 0, 8]] * 2)
    x = dict(zip(FEATURES, features(parts)[0]))
    want = {"one": 1, "groups": 2, "compute_max": 0.54 + 0.66, "compute_mean": (4 * 0.54 + 2 * 0.66 + 2 * 0.58) / 4,
            "ids_max": 1 + 1.5, "ids_mean": (4 * 1 + 2 * 1 + 2 * 1.5) / 4, "out_max": 0, "dims": 0, "reduce": 4,
            "allreduce": 0, "reduce_host": 16, "kernels": 0}
    assert x == pytest.approx(want, rel=1e-6)
    # a model fitted on such plans over hosts of 2 prices them; one fitted over hosts of 4 (or on no such plans)
    # refuses them, naming the table
    fitted = TorchRecRuntimeModel(4, BATCH, COEF, types=("row_wise", "table_row_wise"), local_world_size=2)
    problem = Problem(4, 1.0, local_world_size=2)
    assert simulate(hand_tables(), plan, replace(hand_models(4), runtime=fitted), problem).cost == pytest.approx(
        sum(c * want[f] for c, f in zip(COEF, FEATURES)), rel=1e-6)
    with pytest.raises(NeuroShardError, match="table 0 is table_row_wise over 2 ranks: the TorchRec runtime model "
                                              "was fitted on hosts of 4"):
        simulate(hand_tables(), plan, replace(hand_models(4), runtime=replace(fitted, local_world_size=4)), problem)
    with pytest.raises(NeuroShardError, match="table 0 is table_row_wise: .*fitted on no table_row_wise plans .*"
                                              "--local_world_size K"):
        simulate(hand_tables(), plan, replace(hand_models(4), runtime=TorchRecRuntimeModel(4, BATCH, COEF,
                                                                                           types=("row_wise",))),
                 problem)
    with pytest.raises(ValueError, match="ranks per host are given exactly when table-row-wise samples"):
        TorchRecRuntimeModel(4, BATCH, COEF, types=("table_row_wise",))


def test_an_empty_group_costs_nothing():
    parts = plan_parts(get_scorer(hand_models(2)), hand_tables(), Plan((), ((0, 1), (2,))), BATCH)
    x = dict(zip(FEATURES, features(parts)[0]))
    assert x["groups"] == 1 and x["compute_max"] == pytest.approx(0.5 + 0.24, rel=1e-6)  # rank 0: dims 16 + 8
    assert x["kernels"] == 2  # one table-wise kernel on each rank, none column-wise


def test_simulate_under_the_runtime_gives_its_estimate():
    bd = simulate(hand_tables(), HAND_PLAN, runtime_models(), Problem(HAND_PLAN.ndevices, 1.0))
    expected = sum(c * HAND_FEATURES[f] for c, f in zip(COEF, FEATURES))  # 10 + 4 + 1.16 + 3 + 1.6 + 2.8 + 2.8
    assert expected == pytest.approx(25.36)
    assert bd.cost == pytest.approx(expected, rel=1e-6) and bd.runtime.name == "torchrec"
    assert sum(bd.runtime.terms.values()) == pytest.approx(expected, rel=1e-6)
    np.testing.assert_allclose(bd.compute, [1.16, 1.12], rtol=1e-6)
    assert bd.fw_comm == [0.0, 0.0] and bd.dims == [16, 12]
    # the breakdown keeps the estimate through its JSON form
    from neuroshard.types.costs import CostBreakdown
    assert CostBreakdown.from_json(json.loads(json.dumps(bd.to_json()))).cost == pytest.approx(expected, rel=1e-6)


def test_search_scores_placements_as_the_simulator_does():
    rng = np.random.default_rng(0)
    tables = [ShardTable(i, i, TableConfig(1000, float(rng.uniform(1, 20)), BINS, int(d)))
              for i, d in enumerate(rng.choice([8, 16, 32, 64, 128], size=12))]
    models = runtime_models(coef=(5.0, 0.5, 1.0, 0.5, 0.2, 0.1, 0.01, 0.0, 0.0, 0.0, 0.0, 0.0), n=4)
    res = search(tables, Problem(4, 1.0), models)
    assert res.cost == pytest.approx(simulate(tables, res.plan, models, Problem(res.plan.ndevices, 1.0)).cost, rel=1e-6)
    # a group costs 100 ms: no plan with a column-wise group can win
    costly = runtime_models(coef=(5.0, 100.0, 1.0, 0.5, 0.2, 0.1, 0.01, 0.0, 0.0, 0.0, 0.0, 0.0), n=4)
    assert search(tables, Problem(4, 1.0), costly).plan.column_steps == ()


def test_shard_takes_the_runtime():
    tables = hand_tables()
    with_rt = ns.shard(tables, ns.Problem(2, 1.0), models=runtime_models(), alg="size_lookup_greedy",
                       runtime="torchrec")
    assert with_rt.breakdown.runtime is not None
    paper = ns.shard(tables, ns.Problem(2, 1.0), models=runtime_models(), alg="size_lookup_greedy", runtime="paper")
    assert paper.breakdown.runtime is None
    with pytest.raises(ConfigError, match="runtime model"):
        ns.shard(tables, ns.Problem(2, 1.0), models=hand_models(2), alg="neuroshard", runtime="torchrec")
    with pytest.raises(ConfigError, match="neuroshard_plus"):
        ns.shard(tables, ns.Problem(2, 1.0), models=runtime_models(), alg="neuroshard_plus")


def test_fit_recovers_known_weights():
    rng = np.random.default_rng(1)
    x = np.column_stack([np.ones(40), rng.uniform(0, 5, size=(40, len(FEATURES) - 1))])
    y = x @ np.array(COEF)
    np.testing.assert_allclose(fit(x, y), COEF, atol=1e-8)
    with pytest.raises(ValueError, match="> 0"):
        fit(x[:2], np.array([1.0, 0.0]))


def test_fit_speeds_recovers_the_weights_and_each_collections_speed():
    # the second collection's steps took 0.6x, the third's 1.5x what the weights give: one fit recovers both
    rng = np.random.default_rng(2)
    x = np.column_stack([np.ones(60), rng.uniform(0, 5, size=(60, len(FEATURES) - 1))])
    groups = np.repeat([0, 1, 2], 20)
    y = (x @ np.array(COEF)) * np.array([1.0, 0.6, 1.5])[groups]
    coef, speed = fit_speeds(x, y, groups)
    np.testing.assert_allclose(speed, [1.0, 0.6, 1.5], rtol=1e-6)
    np.testing.assert_allclose(coef, COEF, rtol=1e-5, atol=1e-6)
    # one set of weights for all three cannot match them
    assert mape(x @ fit(x, y), y) > 0.05
    # one group: the plain fit
    np.testing.assert_allclose(fit_speeds(x[:20], y[:20], groups[:20])[0], fit(x[:20], y[:20]))
    with pytest.raises(ValueError, match="one group index"):
        fit_speeds(x, y, groups[:5])


def test_balanced_weights_give_each_collection_the_same_total():
    # 6, 3 and 1 samples: each collection weighs 10 / 3 in all, the samples together 10
    w = balanced_weights(np.array([0] * 6 + [1] * 3 + [2]))
    np.testing.assert_allclose(w, [10 / 18] * 6 + [10 / 9] * 3 + [10 / 3])
    np.testing.assert_allclose(balanced_weights(np.array([1, 1, 1])), [1.0, 1.0, 1.0])  # one collection: as before


def test_a_weight_counts_a_sample_that_many_times():
    # weights 2, 1, 3: the same fit as those samples repeated 2, 1 and 3 times, with and without speeds; the
    # data are not a linear model's, so where each sample's error counts moves the fit
    rng = np.random.default_rng(3)
    x = np.column_stack([np.ones(9), rng.uniform(0, 5, size=(9, len(FEATURES) - 1))])
    y = rng.uniform(20, 80, size=9)
    groups = np.repeat([0, 1, 2], 3)
    w = np.tile([2, 1, 3], 3)
    rep = np.repeat(np.arange(9), w)
    np.testing.assert_allclose(fit(x, y, w), fit(x[rep], y[rep]), atol=1e-9)
    assert not np.allclose(fit(x, y, w), fit(x, y), atol=1e-6)
    coef, speed = fit_speeds(x, y, groups, weights=w)
    coef_rep, speed_rep = fit_speeds(x[rep], y[rep], groups[rep])
    np.testing.assert_allclose(coef, coef_rep, atol=1e-9)
    np.testing.assert_allclose(speed, speed_rep, rtol=1e-9)
    with pytest.raises(ValueError, match="finite weights > 0"):
        fit(x, y, np.zeros(9))


def test_model_file_round_trip_and_errors(tmp_path):
    m = TorchRecRuntimeModel(4, 4096, COEF, samples=12, fit_mape=3.0, test_mape=5.0, source={"x": "y"})
    path = default_path(tmp_path, 4)
    assert path.name == "torchrec_runtime_4.json"
    m.save(path)
    assert TorchRecRuntimeModel.load(path, 4) == m
    with pytest.raises(InputError, match="for 4 ranks"):
        TorchRecRuntimeModel.load(path, 8)
    with pytest.raises(InputError, match="no TorchRec runtime model"):
        TorchRecRuntimeModel.load(tmp_path / "missing.json")
    bad = json.loads(path.read_text())
    bad["coef"][2] = -1.0
    path.write_text(json.dumps(bad))
    with pytest.raises(InputError, match="non-negative"):
        TorchRecRuntimeModel.load(path)
    with pytest.raises(ConfigError, match="for 4 ranks"):
        replace(hand_models(2), runtime=m)
    # a model written before the row-wise and data-parallel terms reads with them at 0 and prices neither
    old = {**json.loads(json.dumps(m.to_json())), "features": list(FEATURES[:8]), "coef": list(COEF[:8])}
    old.pop("types")
    path.write_text(json.dumps(old))
    back = TorchRecRuntimeModel.load(path)
    assert back.coef == COEF[:8] + (0.0,) * 4 and back.types == ()
    # one written before table-row-wise groups of their own reads with reduce_host at 0 and no table-row-wise
    old = {**json.loads(json.dumps(m.to_json())), "features": list(FEATURES[:10]), "coef": list(COEF[:10]),
           "types": ["row_wise", "table_row_wise"]}
    path.write_text(json.dumps(old))
    back = TorchRecRuntimeModel.load(path)
    assert back.coef == COEF[:10] + (0.0, 0.0) and back.types == ("row_wise",) and back.local_world_size is None
    # one written before the kernel count reads with it at 0: it prices every plan as it did
    old = {**json.loads(json.dumps(m.to_json())), "features": list(FEATURES[:11]), "coef": list(COEF[:11])}
    path.write_text(json.dumps(old))
    assert TorchRecRuntimeModel.load(path).coef == COEF[:11] + (0.0,)
    # the ranks per host travel with the file
    hosts = TorchRecRuntimeModel(4, 4096, COEF, types=("table_row_wise",), local_world_size=2)
    hosts.save(path)
    assert TorchRecRuntimeModel.load(path, 4) == hosts
