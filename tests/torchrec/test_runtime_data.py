"""TorchRec runtime cost data (`torchrec.runtime_data`): random plans, the collection's records, reading
results.json back, and fitting the runtime model to samples whose step times are known."""

import json
import re
from dataclasses import replace

import numpy as np
import pytest

from neuroshard.eval.planning import label_runtime
from neuroshard.planner.costs.runtime_model import FEATURES
from neuroshard.planner.simulator import spread_room, validate_plan
from neuroshard.problem import Problem
from neuroshard.torchrec.runtime_data import (
    RuntimeSample,
    collection_records,
    fit_runtime_model,
    held_out_tasks,
    host_size,
    hot_variant,
    random_label,
    random_split_plan,
    read_extra_samples,
    read_full_samples,
    read_samples,
    round_check,
    sample_features,
)
from neuroshard.torchrec.training_eval import merge_plan_files
from neuroshard.types.constraints import TableConstraints
from neuroshard.types.errors import InputError, OutOfMemoryError
from neuroshard.types.plan import Plan, Spread, plan_pieces
from neuroshard.types.records import PlanRecord
from neuroshard.types.tables import ShardTable, TableConfig, Task
from tests.planner.test_simulator import BINS, hand_models

CONFIGS = [TableConfig(1000 * (i + 1), float(1 + i % 5), BINS) for i in range(12)]


def tasks(k=4):
    rng = np.random.default_rng(0)
    return [Task(tuple(int(t) for t in rng.choice(12, size=6, replace=False)),
                 tuple(int(d) for d in rng.choice([8, 16, 32, 64], size=6))) for _ in range(k)]


def test_random_split_plans_are_valid_seeded_and_bounded():
    tables = tasks(1)[0].tables(CONFIGS)
    plans = [random_split_plan(tables, Problem(3, 1.0, seed), max_splits=4) for seed in range(20)]
    for p in plans:
        validate_plan(tables, p, Problem(3, 1.0))
        assert len(p.column_steps) <= 4
    assert plans == [random_split_plan(tables, Problem(3, 1.0, seed), max_splits=4) for seed in range(20)]
    assert len({len(p.column_steps) for p in plans}) > 2  # 0..4 splits, not always the same count
    assert all(random_split_plan(tables, Problem(3, 1.0, s), max_splits=0).column_steps == () for s in range(5))


def test_random_plans_halve_a_table_larger_than_every_device_until_it_fits():
    # 12,000 x 64 = 768,000 elements on devices of 2 MB (524,288 elements each): whole it fits nowhere, its halves
    # (384,000 elements) do; the sharder's halvings become the plan's own column steps
    tables = [ShardTable(0, 0, TableConfig(12_000, 2.0, BINS, 64)), ShardTable(1, 1, TableConfig(1000, 1.0, BINS, 8)),
              ShardTable(2, 2, TableConfig(2000, 1.0, BINS, 16))]
    problem = Problem(2, 2**21 / 2**30)
    for seed in range(10):
        plan = random_split_plan(tables, problem.with_seed(seed), max_splits=2)
        pieces = validate_plan(tables, plan, problem)
        big = [t for t in pieces if t.origin == 0]
        assert len(big) >= 2 and all(t.config.row * t.dim <= 524_288 for t in big)


def test_random_plans_spread_tables_when_asked_and_place_the_rest_around_them():
    tables = tasks(1)[0].tables(CONFIGS)
    plans = [random_split_plan(tables, Problem(3, 1.0, seed), max_splits=4, spread_share=0.3) for seed in range(30)]
    kinds = [s.kind for p in plans for s in p.spread]
    assert set(kinds) == {"row_wise", "data_parallel"} and all(not p.spread for p in [
        random_split_plan(tables, Problem(3, 1.0, seed), max_splits=4) for seed in range(5)])
    for p in plans:
        validate_plan(tables, p, Problem(3, 1.0))  # spread tables whole, over every rank, the rest fits around them
        assert all(s.ranks == (0, 1, 2) and s.table not in p.column_steps for s in p.spread)
    # memory: a 3,000-row table of dim 64 replicated needs 768,000 bytes and as much for its dense gradient on each
    # device; with 2 MB devices the rest of the task must fit in what is left, else the plan is out of memory
    big = [ShardTable(0, 2, CONFIGS[2].with_dim(64)), ShardTable(1, 1, CONFIGS[1].with_dim(64))]  # + 1,024,000 B
    fits = Problem(2, 2**21 / 2**30)
    with pytest.raises(OutOfMemoryError):
        spread_room(big, [Spread(0, "data_parallel", (0, 1)), Spread(1, "data_parallel", (0, 1))], fits)
    room = spread_room(big, [Spread(0, "data_parallel", (0, 1))], fits)
    assert room.caps == pytest.approx(((2**21 - 1_536_000) / 2**30,) * 2)


def test_on_hosts_random_plans_also_draw_table_row_wise_tables_on_a_host():
    tables = tasks(1)[0].tables(CONFIGS)
    hosts = Problem(4, 1.0, local_world_size=2)
    plans = [random_split_plan(tables, hosts.with_seed(seed), max_splits=4, spread_share=0.3) for seed in range(30)]
    assert {s.kind for p in plans for s in p.spread} == {"row_wise", "data_parallel", "table_row_wise"}
    assert {s.ranks for p in plans for s in p.spread if s.kind == "table_row_wise"} == {(0, 1), (2, 3)}
    for p in plans:
        validate_plan(tables, p, hosts)
    # one host draws as before: the same plans with and without a host size equal to the ranks
    one = [random_split_plan(tables, Problem(4, 1.0, seed), max_splits=4, spread_share=0.3) for seed in range(10)]
    assert all(s.kind != "table_row_wise" for p in one for s in p.spread)
    assert one == [random_split_plan(tables, Problem(4, 1.0, seed, local_world_size=4), max_splits=4,
                                     spread_share=0.3) for seed in range(10)]


def test_collection_records_label_random_plans_per_task():
    recs = collection_records(CONFIGS, tasks(2), ["size_lookup_greedy"], hand_models(2), Problem(2, 1.0),
                              random_plans=2, max_splits=3)
    assert [(r.task, r.alg) for r in recs] == [(0, "size_lookup_greedy"), (0, random_label(0)), (0, random_label(1)),
                                              (1, "size_lookup_greedy"), (1, random_label(0)), (1, random_label(1))]
    assert all(r.plan is not None and r.num_tables == 6 for r in recs)


def test_each_sharders_plan_again_with_its_hot_tables_data_parallel():
    # CONFIGS' pooling factors are 1 + i % 5: tables 3, 4, 8, 9 have 4 or 5, the hot ones at 4
    ts = tasks(2)
    recs = collection_records(CONFIGS, ts, ["size_lookup_greedy"], hand_models(2), Problem(2, 1.0), random_plans=0,
                              max_splits=3, dp_min_pooling=4.0)
    assert [(r.task, r.alg) for r in recs] == [(0, "size_lookup_greedy"), (0, "size_lookup_greedy+dp"),
                                              (1, "size_lookup_greedy"), (1, "size_lookup_greedy+dp")]
    for plain, hot in zip(recs[::2], recs[1::2]):
        ids = ts[plain.task].table_ids
        want = [t for t, i in enumerate(ids) if i % 5 >= 3]
        assert want and [(s.table, s.kind, s.ranks) for s in hot.plan.spread] == \
            [(t, "data_parallel", (0, 1)) for t in want]
        tables = ts[plain.task].tables(CONFIGS)
        validate_plan(tables, hot.plan, Problem(2, 1.0))
        # the other tables' pieces stay where the sharder put them
        before, after = plan_pieces(tables, plain.plan), plan_pieces(tables, hot.plan)
        assert all(after[t] == ([] if t in want else before[t]) for t in range(len(tables)))
        assert hot.table_ids == plain.table_ids and hot.dims == plain.dims
    # a threshold above every table's pooling factor adds nothing
    assert [r.alg for r in collection_records(CONFIGS, ts, ["size_lookup_greedy"], hand_models(2), Problem(2, 1.0),
                                              random_plans=0, max_splits=3, dp_min_pooling=6.0)] == \
        ["size_lookup_greedy"] * 2


def test_a_hot_variant_that_does_not_fit_is_left_out():
    # table 0 (1,000 x 8, pooling 5) is hot; replicated it takes 2 x 8,000 elements on each device, within a
    # sixteenth of 260,000 (`simulator.replicable`), but device 0 also holds table 1 (3,900 x 64 = 249,600):
    # 265,600 elements, more than its 260,000; with 300,000 it fits
    bins = (1.0,) + (0.0,) * 16
    tables = [ShardTable(0, 0, TableConfig(1000, 5.0, bins, 8)), ShardTable(1, 1, TableConfig(3900, 1.0, bins, 64)),
              ShardTable(2, 2, TableConfig(3900, 1.0, bins, 64))]
    plan = Plan((), ((0, 1), (2,)))
    small, big = Problem(2, 260_000 * 4 / 2**30), Problem(2, 300_000 * 4 / 2**30)
    validate_plan(tables, plan, small)  # 257,600 on device 0
    assert hot_variant(tables, plan, small, 5.0) is None
    assert hot_variant(tables, plan, big, 5.0) == Plan((), ((1,), (2,)), (Spread(0, "data_parallel", (0, 1)),))
    assert hot_variant(tables, plan, big, 6.0) is None  # no hot table


def test_a_hot_table_its_constraints_keep_off_data_parallel_stays_where_the_plan_put_it():
    # tables 0 and 1 are hot (pooling 5); 0 may only be row-wise, so the variant replicates 1 alone; with both
    # kept whole there is no variant
    bins = (1.0,) + (0.0,) * 16
    tables = [ShardTable(t, t, TableConfig(1000, 5.0 if t < 2 else 1.0, bins, 8)) for t in range(3)]
    plan = Plan((), ((0, 1), (2,)))
    one = Problem(2, 1.0, constraints=TableConstraints(kinds=((0, ("row_wise",)),)))
    assert hot_variant(tables, plan, one, 5.0) == Plan((), ((0,), (2,)), (Spread(1, "data_parallel", (0, 1)),))
    assert hot_variant(tables, plan, Problem(2, 1.0, constraints=TableConstraints(whole=(0, 1))), 5.0) is None
    assert hot_variant(tables, plan, Problem(2, 1.0), 5.0) == \
        Plan((), ((), (2,)), (Spread(0, "data_parallel", (0, 1)), Spread(1, "data_parallel", (0, 1))))


def write_results(path, rows):
    path.write_text(json.dumps(rows))
    return path


def test_read_samples_and_its_errors(tmp_path):
    ts = tasks(2)
    plan = Plan((), ((0, 1, 2), (3, 4, 5)))
    row = {"task": 1, "alg": "random_split[0]", "plan": plan.to_json(), "step_ms": [10.0, 12.0],
           "rounds": [{"phases": [{"embedding_fw": 1.0}]}]}
    [s] = read_samples(write_results(tmp_path / "r.json", [row]), ts, CONFIGS)
    assert s.task == 1 and s.plan == plan and s.cost == 11.0 and s.phases == [{"embedding_fw": 1.0}]
    with pytest.raises(InputError, match="record 1: task 5"):
        read_samples(write_results(tmp_path / "r.json", [row, {**row, "task": 5}]), ts, CONFIGS)
    with pytest.raises(InputError, match="record 0: step times must be positive"):
        read_samples(write_results(tmp_path / "r.json", [{**row, "step_ms": [0.0]}]), ts, CONFIGS)
    with pytest.raises(InputError, match="record 0"):
        read_samples(write_results(tmp_path / "r.json", [{**row, "plan": Plan((), ((0, 1), (2,))).to_json()}]),
                     ts, CONFIGS)
    with pytest.raises(InputError, match="collect_torchrec_cost_data"):
        read_samples(tmp_path / "missing.json", ts, CONFIGS)
    # results that name their tables: checked against the task file given
    ids = [t.table_id for t in ts[1].tables(CONFIGS)]
    assert len(read_samples(write_results(tmp_path / "r.json", [{**row, "table_ids": ids}]), ts, CONFIGS)) == 1
    other = [i + 1 for i in ids]
    with pytest.raises(InputError, match=re.escape(f"record 0: its table_ids {other} are not task 1's {ids}")):
        read_samples(write_results(tmp_path / "r.json", [{**row, "table_ids": other}]), ts, CONFIGS)


def test_extra_samples_read_on_their_own_dataset_with_their_tasks_numbered_apart(tmp_path):
    from neuroshard.formats.dataset import write_table_configs
    from neuroshard.formats.task_file import write_tasks

    # a second dataset whose table 0 has 50,000 rows: its plans read on its own tables, task 1 becoming task 7
    configs = [TableConfig(50_000, 20.0, BINS)] + CONFIGS[1:]
    write_table_configs(tmp_path / "table_configs.json", configs)
    ts = [Task((0, 1, 2), (16, 8, 8)), Task((0, 3, 4), (32, 8, 8))]
    write_tasks(tmp_path / "tasks.txt", ts)
    row = {"task": 1, "alg": "random_split[0]", "plan": Plan((), ((0,), (1, 2))).to_json(), "step_ms": [10.0]}
    [s] = read_extra_samples(write_results(tmp_path / "r.json", [row]), tmp_path, tmp_path / "tasks.txt",
                             first_task=6)
    assert s.task == 7 and s.tables[0].config.row == 50_000 and s.tables[0].dim == 32 and s.cost == 10.0
    with pytest.raises(InputError, match="no such file"):
        read_extra_samples(tmp_path / "missing.json", tmp_path, tmp_path / "tasks.txt", first_task=0)


KNOWN_COEF = np.array([20.0, 3.0, 2.0, 1.0, 0.5, 0.2, 0.3, 0.1, 0.4, 0.6, 0.7, 0.8])


def random_samples(models):
    """Random plans (some spread) of 8 tasks on 2 ranks as samples, their step times still to set."""
    ts = tasks(8)
    recs = collection_records(CONFIGS, ts, [], models, Problem(2, 1.0), random_plans=4, max_splits=4,
                              spread_share=0.2)
    return [RuntimeSample(r.task, r.alg, ts[r.task].tables(CONFIGS), r.plan, [1.0], None) for r in recs]


def timed_by_collection(samples, models, collections, slow: float = 1.5):
    """The samples with the step times the known weights give, collection 1's `slow` times as long; their
    features and those step times."""
    x = sample_features(samples, models, 4096)
    y = (x @ KNOWN_COEF) * np.where(np.array(collections) == 1, slow, 1.0)
    return [replace(s, step_ms=[float(v)]) for s, v in zip(samples, y)], x, y


def test_fit_on_samples_with_known_step_times():
    """Step times made by known weights: the fit reproduces them, on held-out tasks too (MAPE ~0; with the
    hand-made linear compute model some terms are collinear, so the weights themselves are not unique)."""
    models = hand_models(2)
    samples = random_samples(models)
    y = sample_features(samples, models, 4096) @ KNOWN_COEF
    samples = [replace(s, step_ms=[float(v)]) for s, v in zip(samples, y)]
    res = fit_runtime_model(samples, models, 2, 4096, test_share=0.25, seed=0)
    assert len(res.test_tasks) == 2 and res.test_mape < 1e-6 and res.fit_mape < 1e-6
    np.testing.assert_allclose(sample_features(samples, models, 4096) @ np.array(res.model.coef), y, rtol=1e-6)
    assert set(res.terms) == set(FEATURES) and res.by_kind["random"]["plans"] == len(samples)
    assert res.model.types == ("row_wise", "data_parallel")  # the kinds its samples had
    assert res.model.local_world_size is None
    with pytest.raises(ValueError, match="for \\[2\\] devices"):
        fit_runtime_model(samples, models, 4, 4096)


def test_a_second_collection_at_another_speed_gets_its_own():
    """The plans of half the tasks trained at 1.5x the step times known weights give (another hour): with
    their collection named the fit recovers the speed and prices every plan exactly, held-out ones too; the
    model prices plans at the first collection's speed."""
    models = hand_models(2)
    samples = random_samples(models)
    collections = [int(s.task >= 4) for s in samples]
    samples, x, y = timed_by_collection(samples, models, collections)
    res = fit_runtime_model(samples, models, 2, 4096, test_share=0.25, seed=0, collections=collections)
    assert res.speeds == pytest.approx((1.0, 1.5), rel=1e-6)
    assert res.test_mape < 1e-4 and res.fit_mape < 1e-4 and res.to_json()["speeds"] == list(res.speeds)
    first = np.array(collections) == 0
    np.testing.assert_allclose(x[first] @ np.array(res.model.coef), y[first], rtol=1e-5)
    plain = fit_runtime_model(samples, models, 2, 4096, test_share=0.25, seed=0)
    assert plain.speeds == () and plain.fit_mape > 1.0 and "speeds" not in plain.to_json()
    with pytest.raises(ValueError, match="collection indices"):
        fit_runtime_model(samples, models, 2, 4096, collections=[0])


def test_held_out_tasks_are_drawn_per_collection():
    """A quarter of each collection's tasks, by hand: 8 tasks -> 2, 4 -> 1, and a collection of one task keeps
    it (nothing to fit its speed on otherwise); one collection draws as a plain seeded choice."""
    tasks = list(range(8)) + [8, 9, 10, 11] + [12]
    group = np.array([0] * 8 + [1] * 4 + [2])
    out = held_out_tasks(tasks, group, 0.25, seed=0)
    assert len([t for t in out if t < 8]) == 2 and len([t for t in out if 8 <= t < 12]) == 1 and 12 not in out
    assert out == held_out_tasks(tasks, group, 0.25, seed=0) and out == sorted(out)
    rng = np.random.default_rng(3)
    assert held_out_tasks(tasks[:8], group[:8], 0.25, seed=3) == sorted(int(t) for t in rng.choice(8, 2, False))


def test_a_task_several_collections_trained_is_held_out_of_each_or_none():
    """Collection 2 trained collection 1's tasks 8-11 again and tasks 16-19 of its own: a task number held out
    is held out of both, and collection 2's quarter (2 of 8) counts the shared tasks collection 1 held out
    before drawing from 16-19. Without shared tasks the draws are the plain per-collection ones."""
    tasks = list(range(16)) + list(range(8, 12)) + list(range(16, 20))
    group = np.array([0] * 8 + [1] * 8 + [2] * 8)
    for seed in range(6):
        out = held_out_tasks(tasks, group, 0.25, seed)
        assert len([t for t in out if t < 8]) == 2 and len([t for t in out if 8 <= t < 16]) == 2
        assert len([t for t in out if 8 <= t < 12 or t >= 16]) == 2  # collection 2's quarter, shared ones first
        assert out[:4] == held_out_tasks(tasks[:16], group[:16], 0.25, seed)
    # collection 2 a copy of collection 1: it holds out exactly collection 1's tasks, nothing more
    again = list(range(16)) + list(range(8, 16))
    assert held_out_tasks(again, group, 0.25, 1) == held_out_tasks(tasks[:16], group[:16], 0.25, 1)


def test_a_collection_whose_tasks_an_earlier_one_held_out_is_not_priced_held_out():
    """Collection 1 trained one of collection 0's held-out tasks again, 1.5x as slow: it has no plan left to fit
    its speed on, so its plans are not priced held out (at the reference speed they would be off by a third);
    the fit on every plan still gives it its speed."""
    models = hand_models(2)
    base = random_samples(models)
    held = held_out_tasks([s.task for s in base], np.zeros(len(base), dtype=np.int64), 0.25, seed=0)
    again = [s for s in base if s.task == held[0]]
    samples = base + again
    collections = [0] * len(base) + [1] * len(again)
    samples, _, _ = timed_by_collection(samples, models, collections)
    res = fit_runtime_model(samples, models, 2, 4096, test_share=0.25, seed=0, collections=collections)
    assert res.test_tasks == held and res.test_mape < 1e-4
    assert res.speeds == pytest.approx((1.0, 1.5), rel=1e-6)


def test_a_collection_of_few_tasks_is_priced_at_its_own_speed_held_out():
    """Seven tasks at unit speed and one trained at 1.5x: the held-out tasks never take the second collection's
    only task, so its speed is fitted and every held-out plan is priced exactly."""
    models = hand_models(2)
    samples = random_samples(models)
    collections = [int(s.task == 7) for s in samples]
    samples, _, _ = timed_by_collection(samples, models, collections)
    for seed in range(4):
        res = fit_runtime_model(samples, models, 2, 4096, test_share=0.25, seed=seed, collections=collections)
        assert 7 not in res.test_tasks and len(res.test_tasks) == 2
        assert res.speeds == pytest.approx((1.0, 1.5), rel=1e-6) and res.test_mape < 1e-4


def test_a_fit_on_hosts_records_their_size():
    ts = tasks(4)
    models = hand_models(4)
    recs = collection_records(CONFIGS, ts, [], models, Problem(4, 1.0, local_world_size=2), random_plans=4,
                              max_splits=2, spread_share=0.4)
    samples = [RuntimeSample(r.task, r.alg, ts[r.task].tables(CONFIGS), r.plan, [10.0 + k], None)
               for k, r in enumerate(recs)]
    assert any(sp.kind == "table_row_wise" for s in samples for sp in s.plan.spread)
    assert host_size(samples) == 2
    model = fit_runtime_model(samples, models, 4, 4096).model
    assert "table_row_wise" in model.types and model.local_world_size == 2
    wide = replace(samples[0], plan=replace(samples[0].plan, spread=(Spread(0, "table_row_wise", (0, 1, 2, 3)),)))
    with pytest.raises(ValueError, match=r"hosts of \[2, 4\] ranks"):
        host_size(samples + [wide])


def test_rounds_speed_comes_from_the_anchors_trained_in_them(tmp_path):
    """A model that predicts every step exactly at unit speed; the rounds ran at 1.2x and 0.9x it. With each
    round's factor from the anchors (read back from rows naming their tables), every measurement is matched:
    MAPE 0 (the raw error is 0.2 / 1.2 and 0.1 / 0.9), and a perfect model moved the same way scores 0 too."""
    ts = tasks(6)
    models = hand_models(2)
    recs = collection_records(CONFIGS, ts, [], models, Problem(2, 1.0), random_plans=3, max_splits=2)
    samples = [RuntimeSample(r.task, r.alg, ts[r.task].tables(CONFIGS), r.plan, [1.0], None) for r in recs]
    y = sample_features(samples, models, 4096) @ KNOWN_COEF
    model = fit_runtime_model([replace(s, step_ms=[float(v)]) for s, v in zip(samples, y)], models, 2, 4096).model
    timed = [replace(s, step_ms=[1.2 * float(v), 0.9 * float(v)]) for s, v in zip(samples, y)]
    rows = [{"task": s.task, "alg": "anchor:" + s.alg, "plan": s.plan.to_json(), "step_ms": s.step_ms,
             "table_ids": [t.table_id for t in s.tables], "dims": [t.dim for t in s.tables]} for s in timed[:2]]
    anchors = read_samples(write_results(tmp_path / "round_anchors.json", rows), None, CONFIGS)
    assert [a.tables for a in anchors] == [s.tables for s in timed[:2]]
    cal = round_check(model, timed[2:], anchors, models)
    assert [f["cost"] for f in cal.factors] == pytest.approx([1.2, 0.9])
    assert cal.anchors == 2 and cal.measurements == 2 * len(timed[2:])
    assert cal.mape == pytest.approx(0.0, abs=1e-6) and cal.raw_mape == pytest.approx((0.2 / 1.2 + 0.1 / 0.9) / 2)
    assert cal.floor == pytest.approx(0.0, abs=1e-9) and cal.spearman == pytest.approx(1.0)


def test_runtime_labels_and_merged_plan_files():
    a = [PlanRecord(0, "neuroshard"), PlanRecord(0, "torchrec")]
    labelled, algs = label_runtime(a, ["neuroshard", "torchrec"], "torchrec")
    assert [r.alg for r in labelled] == ["neuroshard[torchrec]", "torchrec"] and algs[0] == "neuroshard[torchrec]"
    # a runtime data collection's hot variants (collect_torchrec_cost_data.py --runtime torchrec --dp_min_pooling)
    variants, _ = label_runtime([PlanRecord(0, "neuroshard+dp"), PlanRecord(0, "torchrec+dp")], [], "torchrec")
    assert [r.alg for r in variants] == ["neuroshard[torchrec]+dp", "torchrec+dp"]
    merged = merge_plan_files([labelled, [PlanRecord(0, "neuroshard"), PlanRecord(0, "torchrec")]])
    assert [r.alg for r in merged] == ["neuroshard[torchrec]", "torchrec", "neuroshard"]


def test_the_full_planners_plans_read_back_as_samples(tmp_path):
    # task 0 of tasks(): six tables on 2 ranks; TorchRec's layout: t<id> of the first row-wise in its blocks,
    # the second data-parallel, the rest table-wise; a second plan with a type outside the plan space
    ts = tasks(1)
    tables = ts[0].tables(CONFIGS)
    from neuroshard.torchrec.sharder import table_names
    from neuroshard.types.plan import row_blocks

    names = table_names(tables)
    rows = tables[0].config.row
    first, second = row_blocks(rows, 2)
    layout = {names[0]: {"sharding_type": "row_wise", "ranks": [0, 1],
                         "shards": [[[0, 0], [first, tables[0].dim], 0], [[first, 0], [second, tables[0].dim], 1]]},
              names[1]: {"sharding_type": "data_parallel", "ranks": [0, 1], "shards": []},
              **{n: {"sharding_type": "table_wise", "ranks": [k % 2],
                     "shards": [[[0, 0], [t.config.row, t.dim], k % 2]]}
                 for k, (n, t) in enumerate(zip(names, tables)) if k >= 2}}
    grid = {**layout, names[2]: {**layout[names[2]], "sharding_type": "grid_shard"}}
    rec = {"task": 0, "alg": "torchrec_full", "status": "ok", "step_ms": [10.0, 12.0], "layout": {"tables": layout}}
    path = tmp_path / "torchrec_full.json"
    path.write_text(json.dumps([rec, {**rec, "layout": {"tables": grid}}, {**rec, "status": "oom", "step_ms": None}]))
    samples, outside = read_full_samples(path, ts, CONFIGS, 2)
    assert outside == 1 and len(samples) == 1 and samples[0].cost == 11.0
    plan = samples[0].plan
    assert [(s.table, s.kind) for s in plan.spread] == [(0, "row_wise"), (1, "data_parallel")]
    assert plan.shards == ((2, 4), (3, 5))
    with pytest.raises(InputError, match="record 0: step times must be positive"):
        path.write_text(json.dumps([{**rec, "step_ms": [0.0]}]))
        read_full_samples(path, ts, CONFIGS, 2)
