"""TorchRec training as a measurement (`torchrec.training`, `torchrec.training_eval`): ONE real 2-rank gloo
job trains a DLRM with a table-wise plan, a plan with a column split, a plan leaving a rank without tables and
plans of every other sharding type (row-wise, table-row-wise, data-parallel, and table-wise, column-wise,
row-wise and data-parallel tables in one plan): finite positive step times, and every plan's losses equal the
unsharded model's; the parent's order, ratios, intervals and verdicts checked by hand."""

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from neuroshard.data.synthetic import SyntheticSpec, generate_synthetic
from neuroshard.formats.dataset import write_dataset
from neuroshard.problem import Problem
from neuroshard.torchrec.training import (
    MODULE_PATH,
    TorchRecStep,
    TorchRecTrainConfig,
    all_types_sharder,
    parse_layers,
    seeded_table_weights,
    train_plans,
)
from neuroshard.torchrec.training_eval import (
    anchor_records,
    export_plans,
    median_uncertainty,
    select_records,
    summarize,
    summary_markdown,
)
from neuroshard.types.errors import ConfigError, InputError
from neuroshard.types.plan import Plan, Spread
from neuroshard.types.records import PlanRecord
from neuroshard.types.tables import Task

pytest.importorskip("torchrec")
BATCH, LR = 64, 1.0  # a large step, so that an embedding left untrained moves the losses far beyond the tolerance
# float32 sums in another order (pooled outputs and gradients across ranks, shards' partial sums): the losses of
# a sharded model drift from the unsharded one's by ~1e-7 relative; an untrained embedding moves them by ~1e-3
LOSS_RTOL = 1e-5


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("trec")
    configs, _, idx, off = generate_synthetic(SyntheticSpec(num_tables=4, batch_size=BATCH, max_rows=2000, seed=0),
                                              progress=False)
    write_dataset(d / "ds", configs, idx, off)
    task = Task((0, 1, 2, 1), (16, 8, 32, 8))  # table 1 twice: two names, the same lookups
    records = [PlanRecord(0, "table_wise", plan=Plan((), ((0, 1), (2, 3))), num_tables=4),
               # table 2 (dim 32) in halves: post-split table 4 is its second half, on rank 0
               PlanRecord(0, "column", plan=Plan((2,), ((0, 4), (1, 2, 3))), num_tables=4)]
    return d, configs, task, records


def all_type_plans(task, configs, plan_dir) -> list[dict]:
    """Items of plans made with TorchRec's own generators for 2 CPU ranks (the fused kernel, dense for
    data-parallel, as eval_torchrec.py's plans): every table row-wise, every table table-row-wise, every table
    data-parallel, and one plan mixing table-wise, row-wise, column-wise and data-parallel tables."""
    from torchrec.distributed.sharding_plan import (
        column_wise,
        construct_module_sharding_plan,
        data_parallel,
        row_wise,
        table_row_wise,
        table_wise,
    )
    from torchrec.distributed.types import ShardingPlan

    from neuroshard.torchrec.sharder import embedding_bag_collection, table_names
    from neuroshard.formats.sharding_file import write_torchrec_plan

    tables = task.tables(configs)
    names = table_names(tables)
    plans = {"row_wise": {n: row_wise() for n in names},
             "table_row_wise": {n: table_row_wise(host_index=0) for n in names},
             "data_parallel": {n: data_parallel() for n in names},
             "mixed": {names[0]: table_wise(rank=1), names[1]: row_wise(), names[2]: column_wise(ranks=[0, 1]),
                       names[3]: data_parallel()}}
    items = []
    for alg, per_table in plans.items():
        module_plan = construct_module_sharding_plan(embedding_bag_collection(tables, names), per_table,
                                                     sharder=all_types_sharder(), local_size=2, world_size=2,
                                                     device_type="cpu")
        assert {ps.sharding_type for ps in module_plan.values()} >= ({alg} if alg != "mixed" else
                                                                      {"table_wise", "row_wise", "column_wise",
                                                                       "data_parallel"})
        for ps in module_plan.values():  # the generators pick the dense kernel unless told; training runs fused
            ps.compute_kernel = "dense" if ps.sharding_type == "data_parallel" else "fused"
        path, _ = write_torchrec_plan(plan_dir / f"{alg}.pt", ShardingPlan({MODULE_PATH: module_plan}),
                                      {"world_size": 2})
        items.append({"task": 0, "alg": alg, "names": names, "table_ids": list(task.table_ids),
                      "dims": [t.dim for t in tables], "rows": [t.config.row for t in tables],
                      "plan_path": str(path)})
    return items


@pytest.fixture(scope="module")
def trained(tiny, tmp_path_factory):
    """One 2-rank job: the two records' plans, a plan with an empty rank, and the plans of `all_type_plans`."""
    d, configs, task, records = tiny
    plan_dir = tmp_path_factory.mktemp("plans")
    # a plan that leaves rank 1 without tables (it still feeds its batch slice)
    empty = PlanRecord(0, "one_rank", plan=Plan((), ((0, 1, 2, 3), ())), num_tables=4)
    # the project's own plan with spread tables, through its export: table 1 row-wise, table 2 data-parallel
    spread = PlanRecord(0, "spread", plan=Plan((), ((0,), (3,)), (Spread(1, "row_wise", (0, 1)),
                                                                  Spread(2, "data_parallel", (0, 1)))), num_tables=4)
    items = export_plans(records + [empty, spread], [task], configs, plan_dir, "cpu") + \
        all_type_plans(task, configs, plan_dir)
    cfg = TorchRecTrainConfig(problem=Problem(2), warmup=1, iters=2, repeats=1, timeout=60, lr=LR)
    return items, cfg, train_plans([{**it, "repeat": 0} for it in items], d / "ds", BATCH, cfg)


@pytest.mark.heavy(15)
def test_two_rank_job_trains_every_plan_and_times_it(trained):
    """Three iterations of each plan, two timed: finite, positive, the slowest rank's."""
    items, _, steps = trained
    assert items[0]["names"] == ["t0", "t1", "t2", "t1_1"] and items[0]["table_ids"] == [0, 1, 2, 1]
    assert [(s.index, s.alg, s.repeat) for s in steps] == [(k, it["alg"], 0) for k, it in enumerate(items)]
    assert [s.alg for s in steps] == ["table_wise", "column", "one_rank", "spread", "row_wise", "table_row_wise",
                                      "data_parallel", "mixed"]
    for s in steps:
        assert len(s.iters) == 2 and all(math.isfinite(x) and x > 0 for x in s.iters)
        assert len(s.per_rank) == 2 and all(x > 0 for x in s.per_rank)
        # the slowest rank's step, iteration by iteration: at least every rank's median
        assert max(s.iters) >= max(s.per_rank) - 1e-9 and s.build_s > 0
        # every rank's phases: the four named ones, positive, and together within the rank's median step
        assert len(s.phases) == 2 and all(set(p) == set(TorchRecStep.PHASES) for p in s.phases)
        for p, step in zip(s.phases, s.per_rank):
            assert all(v >= 0 for v in p.values()) and p["embedding_fw"] > 0
            assert sum(p.values()) <= 1.5 * max(s.iters)
        assert TorchRecStep.from_json(json.loads(json.dumps(s.to_json()))) == s


def unsharded_losses(tiny, cfg, iters: int, train_embeddings: bool = True, ranks: int = 2) -> list[float]:
    """The same DLRM unsharded in this process: the same initial weights, the `ranks` ranks' batch slices as one batch,
    plain SGD on every parameter (the embeddings' exact SGD is SGD on their rows); the loss of each iteration."""
    import torch

    from neuroshard.formats.dataset import read_dataset
    from neuroshard.torchrec.sharder import embedding_bag_collection, table_names
    from neuroshard.torchrec.training import concat_dlrm, rank_batch, set_seeded_weights

    d, configs, task, _ = tiny
    tables = task.tables(configs)
    names = table_names(tables)
    ebc = embedding_bag_collection(tables, names, device="cpu")  # its weights are set below
    torch.manual_seed(cfg.problem.seed)  # the dense weights, as every rank draws them
    model = concat_dlrm(ebc, cfg.dense_features,
                        parse_layers(cfg.dense_arch, "dense_arch"), parse_layers(cfg.over_arch, "over_arch", last=1),
                        torch.device("cpu"))
    set_seeded_weights(model, names, cfg.problem.seed)
    dataset = read_dataset(d / "ds")
    parts = [rank_batch(dataset, task.table_ids, names, r, ranks, BATCH, cfg.dense_features, cfg.problem.seed)
             for r in range(ranks)]
    _, kjt, _ = rank_batch(dataset, task.table_ids, names, 0, 1, BATCH, cfg.dense_features, cfg.problem.seed)
    dense, labels = torch.cat([p[0] for p in parts]), torch.cat([p[2] for p in parts])
    params = [p for n, p in model.named_parameters() if train_embeddings or not n.startswith(MODULE_PATH + ".")]
    opt = torch.optim.SGD(params, lr=cfg.lr)
    out = []
    for _ in range(iters):
        opt.zero_grad()
        loss = torch.nn.BCEWithLogitsLoss()(model(dense, kjt), labels)
        loss.backward()
        opt.step()
        out.append(float(loss.detach()))
    return out


def test_every_sharding_type_trains_as_the_unsharded_model(tiny, trained):
    """Same seed, same data: every plan's loss at every iteration equals the unsharded model's (`LOSS_RTOL`), so
    each sharding type computes the same training step; data-parallel tables are trained (by the dense
    optimizer): with the embeddings frozen the losses part from these by far more than the tolerance."""
    _, cfg, steps = trained
    n = cfg.warmup + cfg.iters
    want = unsharded_losses(tiny, cfg, n)
    frozen = unsharded_losses(tiny, cfg, n, train_embeddings=False)
    assert want[0] == pytest.approx(frozen[0], rel=LOSS_RTOL)
    assert abs(want[-1] - frozen[-1]) > 100 * LOSS_RTOL * want[-1]
    for s in steps:
        assert len(s.losses) == n
        np.testing.assert_allclose(s.losses, want, rtol=LOSS_RTOL, err_msg=s.alg)


def test_the_sharder_offers_every_sharding_type_on_cpu():
    types = all_types_sharder().sharding_types("cpu")
    assert {"data_parallel", "table_wise", "column_wise", "table_column_wise", "row_wise",
            "table_row_wise"} <= set(types)
    assert len(types) == len(set(types)) and "grid_shard" not in types
    assert all_types_sharder({"learning_rate": 0.5}).fused_params == {"learning_rate": 0.5}


def test_seeded_weights_are_the_same_whichever_shard_asks():
    full = seeded_table_weights(3, 1, 10000, 16)
    assert full.shape == (10000, 16) and float(full.abs().max()) <= (1 / 10000) ** 0.5
    # a row-wise shard across a block edge, a column shard, and another table or seed
    assert (seeded_table_weights(3, 1, 10000, 16, 4000, 300, 4, 8) == full[4000:4300, 4:12]).all()
    assert not (seeded_table_weights(3, 2, 10000, 16) == full).all()
    assert not (seeded_table_weights(4, 1, 10000, 16) == full).all()


def test_summary_ratios_intervals_and_verdicts_by_hand():
    # 3 tasks x 2 rounds; b is exactly 1.5x a in every round, c equals a up to +-1%
    a = {0: [10.0, 12.0], 1: [20.0, 18.0], 2: [30.0, 33.0]}
    costs = {}
    for t, xs in a.items():
        costs[t, "a"] = xs
        costs[t, "b"] = [1.5 * x for x in xs]
        costs[t, "c"] = [x * (1.01 if k == 0 else 0.99) for k, x in enumerate(xs)]
    costs[3, "a"] = [5.0, 5.0]  # a task only a has: left out of the common tasks
    s = summarize(costs, "a", ["a", "b", "c"], iteration_spread=0.1, splits={(0, "b"): 2, (1, "b"): 0},
                  median_se=0.01)
    assert s["common_tasks"] == [0, 1, 2]
    rows = {r["alg"]: r for r in s["algorithms"]}
    assert rows["a"]["mean_ms"] == pytest.approx(123 / 6) and rows["a"]["plans"] == 4
    assert rows["a"]["ci"][0] <= rows["a"]["mean_ms"] <= rows["a"]["ci"][1]
    assert "ratio" not in rows["a"] and rows["a"]["split_plans"] == 0 and rows["b"]["split_plans"] == 1
    b = rows["b"]
    assert b["ratio"] == pytest.approx(1.5) and b["ratio_ci"] == pytest.approx([1.5, 1.5])
    assert b["verdict"] == "beats" and b["mdd"] == pytest.approx(0.0)  # the reference beats b
    c = rows["c"]
    assert c["ratio"] == pytest.approx(1.0) and c["ratio_ci"][0] < 1 < c["ratio_ci"][1]
    assert c["verdict"] == "no significant difference" and c["mdd"] > 0
    # the noise floor: two rounds of one plan, |c1 - c2| / mean
    rep = s["noise"]["repeat"]
    assert rep["plans"] == 10 and rep["median"] > 0
    md = summary_markdown(s)
    assert "a beats it" in md and "no significant difference" in md and "1.500 [1.500, 1.500]" in md
    assert "ranks" in md and "cores" in md  # the honest sentence on why it is noisy
    assert "known to ±1.0%" in md and "add rounds or tasks" in md
    # a measurement's median: constant iterations are known exactly, spread ones less well
    assert median_uncertainty([TorchRecStep(0, 0, "a", 0, [5.0] * 8, [5.0])]) == 0.0
    assert median_uncertainty([TorchRecStep(0, 0, "a", 0, [4.0, 6.0, 5.0, 9.0, 3.0], [5.0])]) > 0.05


def test_select_records_and_settings_errors(tiny):
    _, configs, task, records = tiny
    extra = PlanRecord(0, "oom", status="oom", message="too big")
    assert [r.alg for r in select_records(records + [extra], [task], configs, None, None, 2, "p.json")] == \
        ["table_wise", "column"]
    assert [r.alg for r in select_records(records, [task], configs, ["column"], None, 2, "p.json")] == ["column"]
    with pytest.raises(InputError, match="for 2 devices, training on 4 ranks"):
        select_records(records, [task], configs, None, None, 4, "p.json")
    with pytest.raises(InputError, match="second record"):
        select_records(records + records[:1], [task], configs, None, None, 2, "p.json")
    # an algorithm named without a plan (a typo) is an error, not dropped
    with pytest.raises(ConfigError,
                       match=r"--alg: no plan of size_lookup_gredy .* \(its algorithms: table_wise, column\)"):
        select_records(records, [task], configs, ["column", "size_lookup_gredy"], None, 2, "p.json")
    # plans that name other tables than their task's: made for another task file
    named = [replace(r, table_ids=task.table_ids, dims=task.dims) for r in records]
    assert select_records(named, [task], configs, None, None, 2, "p.json") == named
    with pytest.raises(InputError, match="not a plan of task 0 of the task file: table 0 is dataset table 0"):
        select_records(named, [Task((3, 1, 2, 1), task.dims)], configs, None, None, 2, "p.json")
    with pytest.raises(ConfigError, match="--over_arch"):
        TorchRecTrainConfig(over_arch="64,2").validate()
    with pytest.raises(ConfigError, match="--dense_arch"):
        parse_layers("64,x", "--dense_arch")


def test_anchors_are_taken_over_the_tasks_then_their_other_plans(tiny, tmp_path):
    _, configs, _, _ = tiny
    plan = Plan((), ((0,), (1,))).to_json()
    rows = [{"task": 3, "alg": "neuroshard", "plan": plan, "table_ids": [0, 1], "dims": [8, 8]},
            {"task": 3, "alg": "random_split[0]", "plan": plan, "table_ids": [0, 1], "dims": [8, 8]},
            {"task": 5, "alg": "torchrec", "plan": plan, "table_ids": [2, 3], "dims": [16, 8]}]
    (tmp_path / "r.json").write_text(json.dumps(rows))
    got = anchor_records(tmp_path / "r.json", configs, 4, 2)
    # one plan of each task first (task 5's from its own first on), then task 3's second
    assert [(a.task, a.alg, a.table_ids) for a in got] == [(3, "anchor:neuroshard", (0, 1)),
                                                           (5, "anchor:torchrec", (2, 3)),
                                                           (3, "anchor:random_split[0]", (0, 1))]
    assert len(anchor_records(tmp_path / "r.json", configs, 1, 2)) == 1
    # a plans.json's failed plan (no plan) is passed over: task 5, second in order, would take its second record
    failed = {"task": 5, "alg": "autoshard", "status": "oom", "plan": None, "table_ids": [2, 3], "dims": [16, 8]}
    (tmp_path / "p.json").write_text(json.dumps([rows[0], rows[2], failed, rows[1]]))
    assert [(a.task, a.alg) for a in anchor_records(tmp_path / "p.json", configs, 3, 2)] == \
        [(3, "anchor:neuroshard"), (5, "anchor:torchrec"), (3, "anchor:random_split[0]")]
    for bad, match in (([{**rows[0], "table_ids": [0, 9]}], "record 0"), ([{"task": 3, "plan": plan}], "record 0"),
                       ([], "no plan to take as an anchor"), ({"x": 1}, "expected a JSON list")):
        (tmp_path / "bad.json").write_text(json.dumps(bad))
        with pytest.raises(InputError, match=match):
            anchor_records(tmp_path / "bad.json", configs, 4, 2)
    with pytest.raises(InputError, match=r"record 0 \(task 3, neuroshard\): a plan for 2 devices, training on 4 ranks"):
        anchor_records(tmp_path / "r.json", configs, 4, 4)


def test_an_interrupted_run_trains_only_what_is_missing(tiny, tmp_path):
    """A rerun trains only the measurements its log lacks, plan records' and TorchRec's full planner's alike;
    the full planner's plans come out in torchrec_full.json and the summary, named for what they are."""
    from neuroshard.torchrec.training_eval import (
        FULL_JSON,
        MEASUREMENTS,
        measurement_key,
        plan_full,
        run_torchrec_eval,
    )

    d, configs, task, records = tiny
    out = tmp_path / "out"
    (out / ".partial").mkdir(parents=True)
    # TorchRec's planner, every sharding type, on 2 GPUs of 1 GB; a second task without a plan within memory
    big = Task((3,), (64,))
    full = plan_full([0, 1], [task, big], configs, Problem(2, 1e-6), BATCH)
    assert full[1].status == "oom" and "TorchRec found no plan" in full[1].message
    full = plan_full([0], [task], configs, Problem(2, 1.0), BATCH)
    assert full[0].status == "ok" and set(full[0].layout["types"]) <= {"row_wise", "table_wise", "data_parallel",
                                                                       "column_wise", "table_column_wise",
                                                                       "table_row_wise"}
    made = TorchRecStep(0, 0, "table_wise", 0, [5.0, 5.0], [5.0, 4.0], 1.0)  # what the killed run had written
    made_full = TorchRecStep(1, 0, "torchrec_full", 0, [7.0, 7.0], [7.0, 6.0], 1.0)
    (out / ".partial" / MEASUREMENTS).write_text(
        json.dumps([measurement_key(records[0], 0), made.to_json()]) + "\n"
        + json.dumps([measurement_key(full[0], 0), made_full.to_json()]) + "\n")
    cfg = TorchRecTrainConfig(problem=Problem(2), warmup=0, iters=2, repeats=1, timeout=60)
    # a training task's plan (tables 3 and 0), trained in the round beside them as an anchor
    (d / "train.json").write_text(json.dumps([{"task": 7, "alg": "neuroshard", "plan": Plan((), ((0,), (1,))).to_json(),
                                               "table_ids": [3, 0], "dims": [8, 16], "step_ms": [9.0]}]))
    anchors = anchor_records(d / "train.json", configs, 4, 2)
    summary = run_torchrec_eval(records, [task], configs, d / "ds", BATCH, cfg, out,
                                ["table_wise", "column", "torchrec_full"], "table_wise", config={"test": 1},
                                show=None, progress=False, full=full, anchors=anchors)
    assert summary["measurements"] == 2 and summary["round_anchors"] == 1 and not (out / ".partial").exists()
    (anchor,) = json.loads((out / "round_anchors.json").read_text())
    assert anchor["alg"] == "anchor:neuroshard" and anchor["table_ids"] == [3, 0] and anchor["step_ms"][0] > 0
    results = {r["alg"]: r for r in json.loads((out / "results.json").read_text())}
    assert set(results) == {"table_wise", "column"}  # plan records only: TorchRec's plans are no `Plan`
    assert results["table_wise"]["step_ms"] == [5.0] and results["column"]["step_ms"][0] > 0
    assert (out / "torchrec_plans" / "task0_column.pt").is_file() and (out / "summary.md").is_file()
    (row,) = json.loads((out / FULL_JSON).read_text())
    assert row["step_ms"] == [7.0] and row["layout"] == full[0].layout and row["table_ids"] == [0, 1, 2, 1]
    assert (out / "torchrec_plans" / "task0_torchrec_full.pt").is_file()
    rows = {r["alg"]: r for r in summary["algorithms"]}
    assert rows["torchrec_full"]["mean_ms"] == 7.0 and rows["torchrec_full"]["ratio"] == pytest.approx(1.4)
    assert summary["full_planner"]["tables_by_type"] == full[0].layout["types"]
    md = (out / "summary.md").read_text()
    assert "| torchrec_full (TorchRec planner, all sharding types) | 7.0" in md
    assert "planned for 2 GPUs of 1 GB each" in md


def test_two_hosts_train_table_row_wise_tables_as_the_unsharded_model(tiny, tmp_path):
    """4 gloo ranks as two hosts of 2: a table-row-wise table on each host (TorchRec's intra- and cross-host
    groups of 2) trains with the unsharded model's losses (without the hosts TorchRec has no second host for
    the plan's table 2, and building the model fails)."""
    from neuroshard.formats.sharding_file import read_torchrec_plan

    d, configs, task, _ = tiny
    rec = PlanRecord(0, "hosts", num_tables=4, plan=Plan((), ((0,), (), (3,), ()), (
        Spread(1, "table_row_wise", (0, 1)), Spread(2, "table_row_wise", (2, 3)))))
    items = export_plans([rec], [task], configs, tmp_path, "cpu", 2)
    plan = read_torchrec_plan(items[0]["plan_path"]).plan[MODULE_PATH]
    assert [(plan[n].sharding_type, plan[n].ranks) for n in ("t1", "t2")] == [("table_row_wise", [0, 1]),
                                                                              ("table_row_wise", [2, 3])]
    cfg = TorchRecTrainConfig(problem=Problem(4, local_world_size=2), warmup=1, iters=2, repeats=1, timeout=60, lr=LR)
    steps = train_plans([{**it, "repeat": 0} for it in items], d / "ds", BATCH, cfg)
    np.testing.assert_allclose(steps[0].losses, unsharded_losses(tiny, cfg, 3, ranks=4), rtol=LOSS_RTOL)
    assert len(steps[0].per_rank) == 4


def test_the_hosts_torchrec_sees_while_sharding(monkeypatch):
    import os

    from neuroshard.torchrec.training import hosts_env

    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "3")
    with hosts_env(2, 3, 4):  # one machine of 4 ranks as two hosts of 2: rank 3 is the second of its host
        assert (os.environ["LOCAL_WORLD_SIZE"], os.environ["LOCAL_RANK"]) == ("2", "1")
    assert (os.environ["LOCAL_WORLD_SIZE"], os.environ["LOCAL_RANK"]) == ("4", "3")
    with hosts_env(None, 3, 4):
        assert os.environ["LOCAL_WORLD_SIZE"] == "4"
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "3")
    with pytest.raises(ValueError, match="the problem has 2 ranks per host, torchrun ran 3 per machine"):
        with hosts_env(2, 0, 6):
            pass


def test_train_measure_reads_a_finished_stage_back_and_trains_a_changed_one(tiny, tmp_path, monkeypatch):
    """The regret measurement's stage (`train_measure`): a stage that run_torchrec_eval finished with the same
    settings and plans is read back without a job; other settings train it again (a stand-in writes its files)."""
    from neuroshard.eval.regret_search import SetInputs
    from neuroshard.torchrec import training_eval

    d, configs, task, records = tiny
    inputs = SetInputs("s", d / "ds", configs, BATCH, d / "tasks.txt", [task])
    cfg = TorchRecTrainConfig(problem=Problem(2), warmup=0, iters=2, timeout=60)
    calls = []

    def fake_eval(recs, tasks, cfgs, data_dir, batch, train, out, algs, reference, config=None, **kw):
        calls.append(train.repeats)
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text(json.dumps({**config, "training": train.to_json(), "batch_size": batch}))
        (out / "results.json").write_text(json.dumps([{"task": r.task, "alg": r.alg, "plan": r.plan.to_json(),
                                                       "step_ms": [1.0 + k] * train.repeats}
                                                      for k, r in enumerate(recs)]))

    monkeypatch.setattr(training_eval, "run_torchrec_eval", fake_eval)
    measure = training_eval.train_measure(cfg, progress=False)
    got = measure(inputs, records, 2, tmp_path / "final")
    assert got == {(0, "table_wise"): [1.0, 1.0], (0, "column"): [2.0, 2.0]} and calls == [2]
    assert measure(inputs, records, 2, tmp_path / "final") == got and calls == [2]  # read back
    measure(inputs, records, 3, tmp_path / "final")  # three rounds: other settings, trained again
    assert calls == [2, 3]
