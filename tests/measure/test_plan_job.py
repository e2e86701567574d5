"""Plan measurement (`measure.plan_job`): a real 2-rank gloo job over hand-made plans on a tiny dataset
(per-rank parts, a rank without tables, an out-of-memory record that is reported and not run, end-to-end
timing), merged into records and summarised, and a failing rank that ends the job with its message."""

import glob
import os
import time
from dataclasses import replace

import pytest

from neuroshard.data.synthetic import SyntheticSpec, generate_synthetic
from neuroshard.eval.hardware import merge_results
from neuroshard.eval.results import write_outputs
from neuroshard.eval.summary import hardware_summary as summarize
from neuroshard.formats.dataset import write_dataset
from neuroshard.formats.plan_file import plan_view, read_plans, write_plans
from neuroshard.formats.task_file import write_tasks
from neuroshard.measure import launch
from neuroshard.measure.launch import JobError
from neuroshard.measure.plan_job import HardwareConfig, measure_plans, runnable, shard_layout
from neuroshard.problem import Problem
from neuroshard.types.costs import CostBreakdown
from neuroshard.types.plan import Plan, Spread
from neuroshard.types.records import PlanRecord
from neuroshard.types.tables import Task


def _breakdown(cost: float, n: int = 2) -> CostBreakdown:
    """A breakdown whose plan cost is `cost` (rank 0 carries it all)."""
    return CostBreakdown([cost] + [0.0] * (n - 1), [0.0] * n, [0.0] * n)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("hw")
    configs, _, idx, off = generate_synthetic(SyntheticSpec(num_tables=5, batch_size=128, max_rows=3000, seed=0),
                                              progress=False)
    write_dataset(d / "ds", configs, idx, off)
    tasks = [Task((0, 1, 2, 3), (16, 8, 32, 16)), Task((4, 1), (8, 8))]
    write_tasks(d / "tasks.txt", tasks)
    records = [
        # table 2 (dim 32) split into two 16s: post-split tables 0..4 with dims 16, 8, 16, 16, 16
        PlanRecord(0, "a", plan=Plan((2,), ((0, 4), (1, 2, 3))), estimate=_breakdown(2.0)),
        PlanRecord(0, "b", status="oom", message="device 0 holds 9 GB > max_mem 1 GB"),
        PlanRecord(1, "a", plan=Plan((), ((0, 1), ())), estimate=_breakdown(1.0)),  # rank 1 empty
    ]
    for r in records:
        if r.plan is not None:
            r.view = plan_view(tasks[r.task].tables(configs), r.plan)
    write_plans(d / "plans.json", records)
    return d, configs, tasks


def test_shard_layout_applies_splits(tiny):
    _, configs, tasks = tiny
    split, shards, dims = shard_layout(tasks[0], configs, Plan((2,), ((0, 4), (1, 2, 3))))
    assert [t.dim for t in split] == [16, 8, 16, 16, 16]
    assert [t.table_id for t in shards[0]] == [0, 2]  # the split half keeps table 2's lookups
    assert dims == [32, 40]
    unpooled = [*configs[:2], replace(configs[2], pooled=False), *configs[3:]]
    with pytest.raises(ValueError, match=r"dataset table 2 is unpooled \(sequence\): the plan job exchanges pooled "
                                         "outputs only"):
        shard_layout(tasks[0], unpooled, Plan((2,), ((0, 4), (1, 2, 3))))


def test_the_job_runs_every_plan_with_a_plan():
    plain = PlanRecord(0, "a", plan=Plan((), ((0,), (1,))))
    spread = PlanRecord(3, "torchrec_full", plan=Plan((), ((0,), ()), (Spread(1, "row_wise", (0, 1)),)))
    assert runnable([plain, PlanRecord(1, "a", status="oom", message="x"), spread]) == [plain, spread]


def test_row_wise_and_data_parallel_tables_run_with_their_collectives(tiny, tmp_path):
    """Task 0 with table 0 row-wise and table 1 data-parallel over both ranks beside two table-wise tables; and
    every table spread (no all-to-all: the exchanges are the collectives alone)."""
    d, configs, tasks = tiny
    every = (0, 1)
    # tables 2 (dim 32) on rank 0 and 3 (dim 16) on rank 1; the spread tables are in no shard list
    mixed = Plan((), ((2,), (3,)), (Spread(0, "row_wise", every), Spread(1, "data_parallel", every)))
    spread = Plan((), ((), ()), (Spread(0, "row_wise", every), Spread(1, "data_parallel", every),
                                 Spread(2, "table_row_wise", every), Spread(3, "row_wise", every)))
    # and, in the same job, a plan without spread tables (the fixture's first)
    records = [PlanRecord(0, "mixed", plan=mixed), PlanRecord(0, "spread", plan=spread),
               read_plans(d / "plans.json")[0]]
    write_plans(tmp_path / "plans.json", records)
    cfg = HardwareConfig(problem=Problem(2), warmup=1, iters=2, end_to_end=True, timeout=30)
    a, b, plain = measure_plans(tmp_path / "plans.json", d / "ds", d / "tasks.txt", cfg)
    # the all-to-all carries tables 2 (dim 32) and 3 (dim 16) only; every rank computes its blocks and replica
    assert a.dims == [32, 16] and all(x > 0 for x in a.compute)
    for rank in range(2):
        fw, bw = a.collectives[rank]
        assert fw > 0 and bw > 0  # reduce-scatter; all-gather + all-reduce
        assert a.bw_comm[rank] > bw and a.fw_comm[rank] > fw  # with the all-to-all
        assert b.bw_comm[rank] == pytest.approx(b.collectives[rank][1])  # no all-to-all at all
        assert b.fw_comm[rank] == pytest.approx(b.collectives[rank][0])
    assert b.dims == [0, 0] and all(x > 0 for x in b.compute) and a.e2e.cost > 0 and b.e2e.cost > 0
    # merged into a result, the collectives are kept per rank
    [merged] = merge_results(records[:1], [[a]])
    assert merged.measured.collectives == a.collectives
    assert merged.measured.repeats[0].collectives == a.collectives  # and per repeat, for each round's speed
    # a plan without spread tables records no collectives
    assert plain.collectives is None and plain.dims == [32, 40]


def test_table_row_wise_tables_on_two_hosts_run_their_collectives_host_by_host(tiny, tmp_path):
    """4 ranks as two hosts of two: table 0 table-row-wise on ranks 0, 1, table 1 on ranks 2, 3, table 2
    row-wise over all four, table 3 whole on rank 0. Every rank runs the collectives of its host's group and
    the row-wise table's, and no rank of one host any of the other host's."""
    d, _, _ = tiny
    plan = Plan((), ((3,), (), (), ()), (Spread(0, "table_row_wise", (0, 1)), Spread(1, "table_row_wise", (2, 3)),
                                         Spread(2, "row_wise", (0, 1, 2, 3))))
    write_plans(tmp_path / "plans.json", [PlanRecord(0, "hosts", plan=plan)])
    cfg = HardwareConfig(problem=Problem(4, local_world_size=2), warmup=0, iters=1, timeout=60)
    [m] = measure_plans(tmp_path / "plans.json", d / "ds", d / "tasks.txt", cfg)
    assert m.dims == [16, 0, 0, 0]  # only table 3 goes through the all-to-all
    assert len(m.collectives) == 4 and all(fw > 0 and bw > 0 for fw, bw in m.collectives)


def test_two_rank_job_measures_each_plan_and_reports_oom(tiny):
    d, _, _ = tiny
    cfg = HardwareConfig(problem=Problem(2), warmup=1, iters=2, end_to_end=True, timeout=30)
    measured = measure_plans(d / "plans.json", d / "ds", d / "tasks.txt", cfg)
    assert [m.index for m in measured] == [0, 1]  # the out-of-memory record is not run
    a, b = measured
    assert a.dims == [32, 40] and a.ntables == [2, 3]
    for part in ("compute", "bw_comm", "fw_comm"):
        assert len(getattr(a, part)) == 2 and all(x > 0 for x in getattr(a, part)), part
    assert len(a.compute_iters[0]) == 2
    # a device without tables: no compute, but it still takes part in both exchanges
    assert b.dims == [16, 0] and b.compute[1] == 0.0 and b.compute[0] > 0
    assert all(x > 0 for x in b.bw_comm + b.fw_comm)
    # end-to-end: the slowest rank per iteration, median over iterations
    assert len(a.e2e.iters) == 2 and a.e2e.cost > 0

    results = merge_results(read_plans(d / "plans.json"), [[m] for m in measured])
    assert [(r.task, r.alg, r.status) for r in results] == [(0, "a", "ok"), (0, "b", "oom"), (1, "a", "ok")]
    r = results[0]
    total = [c + bw + fw for c, bw, fw in zip(a.compute, a.bw_comm, a.fw_comm)]
    assert r.measured.total == pytest.approx(total)
    assert r.cost == pytest.approx(max(total))
    assert r.estimated_cost == 2.0 and r.e2e_cost == a.e2e.cost
    assert results[1].cost is None and results[1].measured is None and "max_mem" in results[1].message

    summary = summarize(results, ["a", "b"], 2)
    rows = {row.alg: row for row in summary.algorithms}
    assert (rows["a"].valid, rows["b"].valid, rows["b"].oom) == (2, 0, 1)
    assert rows["a"].average == pytest.approx((results[0].cost + results[2].cost) / 2)
    write_outputs(d / "out", results, summary)
    for name in ("results.json", "results.csv", "ranks.csv", "summary.json", "summary.csv", "summary.md"):
        assert (d / "out" / name).stat().st_size > 0
    assert len((d / "out" / "ranks.csv").read_text().splitlines()) == 1 + 4  # header + 2 plans x 2 ranks


def test_failing_rank_ends_the_job_with_its_message(tiny, tmp_path, monkeypatch):
    d, _, _ = tiny
    monkeypatch.setenv("FAULTY_RANKS", "hardware:1:1:raise")
    cfg = HardwareConfig(problem=Problem(2), warmup=1, iters=1, timeout=10)
    t0 = time.monotonic()
    with pytest.raises(JobError, match=r"rank 1 \(plan 1, .*injected fault") as info:
        measure_plans(d / "plans.json", d / "ds", d / "tasks.txt", cfg, work_dir=str(tmp_path),
                      worker_module="tests.faulty_ranks")
    assert time.monotonic() - t0 < 90
    assert "after 1 of 2 plans" in str(info.value)
    [job_dir] = glob.glob(str(tmp_path / "hw_eval_job_*"))
    pids = [int(open(p).read()) for p in glob.glob(os.path.join(job_dir, "rank*.pid"))]
    assert len(pids) == 2 and not [p for p in pids if launch._pid_alive(p) and job_dir in launch._cmdline(p)]
