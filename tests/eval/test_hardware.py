"""The hardware evaluation run (`eval.hardware`): the summary and simulator-accuracy arithmetic by hand,
and repeats measured in interleaved rounds (a fake measurer stands in for the job)."""

import pytest

from neuroshard.eval.accuracy import simulator_accuracy
from neuroshard.eval.summary import hardware_summary as summarize
from neuroshard.formats.plan_file import read_plans
from neuroshard.measure.plan_job import HardwareConfig
from neuroshard.problem import Problem
from neuroshard.types.costs import CostBreakdown
from neuroshard.types.plan import Plan
from neuroshard.types.records import PlanMeasurement, PlanRecord
from tests.measure.test_plan_job import _breakdown

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
    assert acc.plans == 6
    # |e - m| / m: 0, .5, .25, .25, .2, 1/3
    assert acc.mape == pytest.approx((0 + 0.5 + 0.25 + 0.25 + 0.2 + 1 / 3) / 6)
    # task 0: x<y sim, x>y hw (disagree); x<z both; y<z both. task 1: x<y both; x<z both; y~z tied
    assert (acc.pairs, acc.pairs_tied) == (5, 1)
    assert acc.pair_agreement == pytest.approx(4 / 5)
    # identical plans tie too, whatever the estimates say
    same = [_result(0, "x", 1.0, 2.0, plan="q"), _result(0, "y", 2.0, 1.0, plan="q")]
    assert simulator_accuracy(same).pairs_tied == 1


def test_summary_compares_on_common_tasks_by_hand():
    results = [
        _result(0, "neuroshard", 9.0, 10.0), _result(1, "neuroshard", 9.0, 20.0),
        _result(0, "dim_greedy", 9.0, 15.0), _result(1, "dim_greedy", 9.0, 25.0),
        _result(0, "random", 9.0, 40.0),
        PlanRecord(1, "random", status="oom"),
    ]
    s = summarize(results, ["neuroshard", "random", "dim_greedy"], 2)
    rows = {r.alg: r for r in s.algorithms}
    assert s.common_tasks == 1
    assert rows["neuroshard"].average == 15.0 and rows["neuroshard"].mean_common == 10.0
    assert (rows["random"].valid, rows["random"].oom, rows["random"].average) == (1, 1, 40.0)
    assert rows["dim_greedy"].neuroshard_gain == pytest.approx((15 - 10) / 15)
    assert s.ranking == ["neuroshard", "dim_greedy", "random"]
    assert s.neuroshard_beats == {"random": True, "dim_greedy": True} and s.neuroshard_beats_every_greedy
    # the same table for the simulator's estimates of the same plans
    assert rows["dim_greedy"].estimated.mean_common == 9.0 and rows["neuroshard"].estimated.average == 9.0
    assert s.simulator_accuracy.plans == 5


def test_repeats_are_interleaved_rounds_and_give_intervals(tmp_path, monkeypatch):
    """A fake measurer stands in for the job: it records the order it is asked to measure in and
    answers 10 ms for "slow" plans and 8 ms for "fast" ones, plus a drift that grows with time."""
    from neuroshard.eval import hardware
    from neuroshard.measure import plan_job

    records = [PlanRecord(t, alg, plan=Plan((), ((0,), (1,)) if alg == "fast" else ((1,), (0,))),
                          estimate=_breakdown(1.0 if alg == "fast" else 2.0))
               for t in range(4) for alg in ("fast", "slow")]
    order = []

    def fake_measure(plans_path, data_dir, task_path, cfg, on_result=None, work_dir=None, worker_module=None):
        for i, rec in enumerate(read_plans(plans_path)):
            order.append((rec.task, rec.alg))
            ms = (8.0 if rec.alg == "fast" else 10.0) + 0.01 * len(order)  # drift
            on_result(PlanMeasurement(index=i, task=rec.task, alg=rec.alg, dims=[8, 8], ntables=[1, 1],
                                      compute=[ms, 1.0], bw_comm=[0.0, 0.0], fw_comm=[0.0, 0.0],
                                      fw_comm_nosleep=[0.0, 0.0], skew=[0.0, 0.0]))

    monkeypatch.setattr(plan_job, "measure_plans", fake_measure)
    cfg = HardwareConfig(problem=Problem(2, seed=5), repeats=3)
    results, summary = hardware.run_evaluation(records, "ds", "tasks.txt", cfg, tmp_path / "out", ["fast", "slow"],
                                               4, show=None)
    # three rounds, each measures every plan once, each in its own shuffled order
    rounds = [order[i * 8:(i + 1) * 8] for i in range(3)]
    assert all(sorted(r) == sorted((rec.task, rec.alg) for rec in records) for r in rounds)
    assert len({tuple(r) for r in rounds}) == 3
    assert [len(r.repeat_costs) for r in results] == [3] * 8
    fast = {row.alg: row for row in summary.algorithms}["fast"]
    slow = {row.alg: row for row in summary.algorithms}["slow"]
    assert slow.mean_common_ci[0] < slow.mean_common < slow.mean_common_ci[1]
    assert fast.mean_common == pytest.approx(8.0 + 0.01 * 12.5, abs=0.05)  # drift averages over the rounds
    # every pair differs by ~2 ms against a repeat spread of ~0.1 ms: all beyond the noise, all ordered right
    acc = summary.simulator_accuracy
    assert acc.pairs_beyond_noise == 4 and acc.pair_agreement_beyond_noise == 1.0
    assert not (tmp_path / "out" / ".partial").exists()


def test_measurement_order_keeps_a_tasks_plans_together_shuffled_per_round_and_seeded():
    from neuroshard.eval.hardware import measurement_order

    items = [PlanRecord(t, a) for t in range(4) for a in ("x", "y", "z")]
    order = measurement_order(items, 3, seed=7)
    assert len(order) == 36 and [r for _, r in order] == [0] * 12 + [1] * 12 + [2] * 12
    rounds = [[rec for rec, r in order if r == k] for k in range(3)]
    assert all(sorted(x, key=items.index) == items for x in rounds)  # every plan once per round
    for x in rounds:  # a task's three plans one after another: its paired comparisons seconds apart
        tasks = [rec.task for rec in x]
        assert all(len(set(tasks[i:i + 3])) == 1 for i in range(0, 12, 3))
    assert len({tuple((rec.task, rec.alg) for rec in x) for x in rounds}) > 1  # in another order
    assert len({tuple(rec.task for rec in x) for x in rounds}) > 1  # the tasks too
    assert len({tuple(rec.alg for rec in x[:3]) for x in rounds} | {tuple(rec.alg for rec in x[3:6])
                                                                    for x in rounds}) > 1  # and within a task
    assert measurement_order(items, 3, seed=7) == order  # deterministic
    assert measurement_order(items, 3, seed=8) != order
    assert measurement_order(items, 1, seed=7) == [(rec, 0) for rec in items]  # one round: as given
