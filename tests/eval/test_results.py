"""The comparison across algorithms (simulated costs) by hand; the measured-cost summary and the
simulator's accuracy are checked in test_hardware.py."""

import pytest

from neuroshard.eval.summary import summarize
from neuroshard.types.costs import CostBreakdown
from neuroshard.types.plan import Plan
from neuroshard.types.records import PlanRecord


def _rec(task, alg, cost, search_ms):
    return PlanRecord(task, alg, plan=Plan((), ((0,),)), estimate=CostBreakdown([cost], [0.0], [0.0]),
                      search_ms=search_ms)


def test_summary_uses_tasks_valid_for_every_algorithm():
    recs = [_rec(0, "neuroshard", 8.0, 3.0), _rec(0, "dim_greedy", 10.0, 1.0), _rec(1, "neuroshard", 4.0, 5.0),
            PlanRecord(1, "dim_greedy", status="oom", search_ms=1.0)]
    s = summarize(recs, ["neuroshard", "dim_greedy"], 2)
    ns, dg = s.algorithms
    assert s.common_tasks == 1
    assert ns.average == 6.0 and ns.mean_common == 8.0 and ns.valid == 2
    assert dg.average == 10.0 and dg.valid == 1 and dg.oom == 1
    assert dg.neuroshard_gain == pytest.approx(0.2)
    assert s.ranking == ["neuroshard", "dim_greedy"] and s.neuroshard_beats == {"dim_greedy": True}


def test_an_algorithm_that_planned_no_task_leaves_the_comparison_to_the_others():
    # a table-wise sharder on tasks with a table larger than a device: out of memory on both
    recs = [_rec(0, "neuroshard", 8.0, 3.0), _rec(0, "torchrec", 10.0, 1.0), _rec(1, "neuroshard", 4.0, 5.0),
            _rec(1, "torchrec", 5.0, 1.0), PlanRecord(0, "dreamshard", status="oom", search_ms=1.0),
            PlanRecord(1, "dreamshard", status="oom", search_ms=1.0)]
    s = summarize(recs, ["neuroshard", "torchrec", "dreamshard"], 2)
    ns, tr, ds = s.algorithms
    assert s.common_tasks == 2 and ns.mean_common == 6.0 and tr.mean_common == 7.5
    assert tr.neuroshard_gain == pytest.approx(0.2) and s.ranking == ["neuroshard", "torchrec"]
    assert ds.valid == 0 and ds.oom == 2 and ds.mean_common is None and ds.mean_common_ci is None
    assert "dreamshard" not in s.verdicts and ds.vs_reference is None
