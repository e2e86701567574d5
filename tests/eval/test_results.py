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
