"""Hardware evaluation: a real 2-rank gloo job over hand-made plans on a tiny
dataset (per-rank parts, a rank without tables, an out-of-memory record that is
reported and not run, end-to-end timing), a failing rank, and the summary and
simulator-accuracy arithmetic by hand."""

import glob
import os
import time

import pytest

from neuroshard.bench import torchrun
from neuroshard.bench.torchrun import JobError
from neuroshard.data.synthetic import SyntheticSpec, generate_synthetic
from neuroshard.eval.hardware import HardwareConfig, measure_plans, shard_layout
from neuroshard.eval.hardware_merge import merge_results
from neuroshard.eval.results import hardware_summary as summarize
from neuroshard.eval.results import simulator_accuracy, write_outputs
from neuroshard.formats import plan_view, read_plans, write_dataset, write_plans, write_tasks
from neuroshard.types import CostBreakdown, Plan, PlanRecord, Task


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


def test_two_rank_job_measures_each_plan_and_reports_oom(tiny):
    d, _, _ = tiny
    cfg = HardwareConfig(ndevices=2, warmup=1, iters=2, end_to_end=True, timeout=30)
    measured = measure_plans(d / "plans.json", d / "ds", d / "tasks.txt", cfg)
    assert [m["i"] for m in measured] == [0, 1]  # the out-of-memory record is not run
    a, b = measured
    assert a["dims"] == [32, 40] and a["ntables"] == [2, 3]
    for part in ("compute", "bw_comm", "fw_comm"):
        assert len(a[part]) == 2 and all(x > 0 for x in a[part]), part
    assert len(a["compute_iters"][0]) == 2
    # a device without tables: no compute, but it still takes part in both exchanges
    assert b["dims"] == [16, 0] and b["compute"][1] == 0.0 and b["compute"][0] > 0
    assert all(x > 0 for x in b["bw_comm"] + b["fw_comm"])
    # end-to-end: the slowest rank per iteration, median over iterations
    assert len(a["e2e"]["iters"]) == 2 and a["e2e"]["cost"] > 0

    results = merge_results(read_plans(d / "plans.json"), [[m] for m in measured])
    assert [(r.task, r.alg, r.status) for r in results] == [(0, "a", "ok"), (0, "b", "oom"), (1, "a", "ok")]
    r = results[0]
    total = [c + bw + fw for c, bw, fw in zip(a["compute"], a["bw_comm"], a["fw_comm"])]
    assert r.measured.total == pytest.approx(total)
    assert r.cost == pytest.approx(max(total))
    assert r.estimated_cost == 2.0 and r.e2e_cost == a["e2e"]["cost"]
    assert results[1].cost is None and results[1].measured is None and "max_mem" in results[1].message

    summary = summarize(results, ["a", "b"], 2)
    rows = {row["alg"]: row for row in summary["algorithms"]}
    assert (rows["a"]["valid"], rows["b"]["valid"], rows["b"]["oom"]) == (2, 0, 1)
    assert rows["a"]["average"] == pytest.approx((results[0].cost + results[2].cost) / 2)
    write_outputs(d / "out", results, summary)
    for name in ("results.json", "results.csv", "ranks.csv", "summary.json", "summary.csv", "summary.md"):
        assert (d / "out" / name).stat().st_size > 0
    assert len((d / "out" / "ranks.csv").read_text().splitlines()) == 1 + 4  # header + 2 plans x 2 ranks


def test_failing_rank_ends_the_job_with_its_message(tiny, tmp_path, monkeypatch):
    d, _, _ = tiny
    monkeypatch.setenv("FAULTY_RANKS", "hardware:1:1:raise")
    cfg = HardwareConfig(ndevices=2, warmup=1, iters=1, timeout=10)
    t0 = time.monotonic()
    with pytest.raises(JobError, match=r"rank 1 \(plan 1, .*injected fault") as info:
        measure_plans(d / "plans.json", d / "ds", d / "tasks.txt", cfg, work_dir=str(tmp_path),
                      worker_module="tests.faulty_ranks")
    assert time.monotonic() - t0 < 90
    assert "after 1 of 2 plans" in str(info.value)
    [job_dir] = glob.glob(str(tmp_path / "hw_eval_job_*"))
    pids = [int(open(p).read()) for p in glob.glob(os.path.join(job_dir, "rank*.pid"))]
    assert len(pids) == 2 and not [p for p in pids if torchrun._pid_alive(p) and job_dir in torchrun._cmdline(p)]


_PLANS: dict = {}


def _result(task, alg, est, meas, plan="p"):
    """A measured record with estimated cost `est` and measured cost `meas` (one device); records get
    different plans unless they name the same `plan` key."""
    key = f"{plan}{task}{alg}" if plan == "p" else plan
    p = _PLANS.setdefault(key, Plan((), ((len(_PLANS),),)))
    return PlanRecord(task, alg, plan=p, estimate=CostBreakdown([est], [0.0], [0.0]),
                      measured=CostBreakdown([meas], [0.0], [0.0]))


def test_simulator_accuracy_by_hand():
    results = [
        _result(0, "x", 10.0, 10.0), _result(0, "y", 12.0, 8.0), _result(0, "z", 20.0, 16.0),
        _result(1, "x", 5.0, 4.0), _result(1, "y", 6.0, 5.0),
        _result(1, "z", 6.0, 9.0),  # same estimate as y: a tie, left out
        PlanRecord(1, "w", status="oom"),
    ]
    acc = simulator_accuracy(results)
    assert acc["plans"] == 6
    # |e - m| / m: 0, .5, .25, .25, .2, 1/3
    assert acc["mape"] == pytest.approx((0 + 0.5 + 0.25 + 0.25 + 0.2 + 1 / 3) / 6)
    # task 0: x<y sim, x>y hw (disagree); x<z both; y<z both. task 1: x<y both; x<z both; y~z tied
    assert (acc["pairs"], acc["pairs_tied"]) == (5, 1)
    assert acc["pair_agreement"] == pytest.approx(4 / 5)
    # identical plans tie too, whatever the estimates say
    same = [_result(0, "x", 1.0, 2.0, plan="q"), _result(0, "y", 2.0, 1.0, plan="q")]
    assert simulator_accuracy(same)["pairs_tied"] == 1


def test_summary_compares_on_common_tasks_by_hand():
    results = [
        _result(0, "neuroshard", 9.0, 10.0), _result(1, "neuroshard", 9.0, 20.0),
        _result(0, "dim_greedy", 9.0, 15.0), _result(1, "dim_greedy", 9.0, 25.0),
        _result(0, "random", 9.0, 40.0),
        PlanRecord(1, "random", status="oom"),
    ]
    s = summarize(results, ["neuroshard", "random", "dim_greedy"], 2)
    rows = {r["alg"]: r for r in s["algorithms"]}
    assert s["common_tasks"] == 1
    assert rows["neuroshard"]["average"] == 15.0 and rows["neuroshard"]["mean_common"] == 10.0
    assert (rows["random"]["valid"], rows["random"]["oom"], rows["random"]["average"]) == (1, 1, 40.0)
    assert rows["dim_greedy"]["neuroshard_gain"] == pytest.approx((15 - 10) / 15)
    assert s["ranking"] == ["neuroshard", "dim_greedy", "random"]
    assert s["neuroshard_beats"] == {"random": True, "dim_greedy": True} and s["neuroshard_beats_every_greedy"]
    # the same table for the simulator's estimates of the same plans
    assert rows["dim_greedy"]["mean_common_estimated"] == 9.0 and rows["neuroshard"]["average_estimated"] == 9.0
    assert s["simulator_accuracy"]["plans"] == 5


def test_repeats_are_interleaved_rounds_and_give_intervals(tmp_path, monkeypatch):
    """A fake measurer stands in for the job: it records the order it is asked to measure in and
    answers 10 ms for "slow" plans and 8 ms for "fast" ones, plus a drift that grows with time."""
    from neuroshard.eval import hardware

    records = [PlanRecord(t, alg, plan=Plan((), ((0,), (1,)) if alg == "fast" else ((1,), (0,))),
                          estimate=_breakdown(1.0 if alg == "fast" else 2.0))
               for t in range(4) for alg in ("fast", "slow")]
    order = []

    def fake_measure(plans_path, data_dir, task_path, cfg, on_result=None, work_dir=None, worker_module=None):
        for i, rec in enumerate(read_plans(plans_path)):
            order.append((rec.task, rec.alg))
            ms = (8.0 if rec.alg == "fast" else 10.0) + 0.01 * len(order)  # drift
            on_result({"i": i, "compute": [ms, 1.0], "bw_comm": [0.0, 0.0], "fw_comm": [0.0, 0.0],
                       "fw_comm_nosleep": [0.0, 0.0], "skew": [0.0, 0.0], "dims": [8, 8], "ntables": [1, 1]})

    monkeypatch.setattr(hardware, "measure_plans", fake_measure)
    cfg = HardwareConfig(ndevices=2, repeats=3, seed=5)
    results, summary = hardware.run_evaluation(records, "ds", "tasks.txt", cfg, tmp_path / "out", ["fast", "slow"],
                                               4, show=None)
    # three rounds, each measures every plan once, each in its own shuffled order
    rounds = [order[i * 8:(i + 1) * 8] for i in range(3)]
    assert all(sorted(r) == sorted((rec.task, rec.alg) for rec in records) for r in rounds)
    assert len({tuple(r) for r in rounds}) == 3
    assert [len(r.repeat_costs) for r in results] == [3] * 8
    fast = {row["alg"]: row for row in summary["algorithms"]}["fast"]
    slow = {row["alg"]: row for row in summary["algorithms"]}["slow"]
    assert slow["mean_common_ci"][0] < slow["mean_common"] < slow["mean_common_ci"][1]
    assert fast["mean_common"] == pytest.approx(8.0 + 0.01 * 12.5, abs=0.05)  # drift averages over the rounds
    # every pair differs by ~2 ms against a repeat spread of ~0.1 ms: all beyond the noise, all ordered right
    acc = summary["simulator_accuracy"]
    assert acc["pairs_beyond_noise"] == 4 and acc["pair_agreement_beyond_noise"] == 1.0
    assert not (tmp_path / "out" / ".partial").exists()
