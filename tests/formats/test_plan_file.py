"""`neuroshard.formats.plan_file`: plan views and plan files: round trip and one malformed case per check."""

import json

import pytest

from neuroshard.formats.plan_file import plan_view, read_plans, write_plans
from neuroshard.types.costs import CostBreakdown
from neuroshard.types.errors import InvalidPlanError
from neuroshard.types.plan import Plan, Spread
from neuroshard.types.records import PlanRecord
from neuroshard.types.tables import Task
from tests.formats import cfg, expect_error


def two_table_task():
    configs = [cfg(100), cfg(1000), cfg(10)]
    return Task((2, 1), (64, 16)).tables(configs)


def test_plan_view():
    tables = two_table_task()
    # Split table 0 (64 -> 32 + 32, the copy becomes table 2), then split table 2 again (-> 16 + 16, copy 3).
    plan = Plan((0, 2), ((0, 3), (1,), (2,)))
    assert plan_view(tables, plan) == [
        {"table": 0, "shards": [{"dim": 32, "device": 0}, {"dim": 16, "device": 2}, {"dim": 16, "device": 0}]},
        {"table": 1, "shards": [{"dim": 16, "device": 1}]},
    ]
    assert plan_view(tables, Plan((), ((), (1, 0)))) == [
        {"table": 0, "shards": [{"dim": 64, "device": 1}]},
        {"table": 1, "shards": [{"dim": 16, "device": 1}]},
    ]
    for bad, fragment in [(Plan((), ((0,), ())), r"\[1\] are placed on no device"),
                          (Plan((), ((0, 1), (1,))), "table 1 placed on devices 0 and 1"),
                          (Plan((), ((0, 1, 2),)), "table 2 out of range")]:
        with pytest.raises(InvalidPlanError, match=fragment):
            plan_view(tables, bad)


def test_plan_view_and_file_of_a_plan_with_spread_tables(tmp_path):
    tables = two_table_task()  # table 0: 10 rows x 64, table 1: 1000 rows x 16
    plan = Plan((), ((), (), ()), (Spread(0, "data_parallel", (0, 1, 2)), Spread(1, "row_wise", (0, 1, 2))))
    view = plan_view(tables, plan)
    assert view == [
        {"table": 0, "type": "data_parallel", "shards": [{"dim": 64, "rows": 10, "device": r} for r in range(3)]},
        {"table": 1, "type": "row_wise", "shards": [{"dim": 16, "rows": 334, "device": 0},
                                                    {"dim": 16, "rows": 334, "device": 1},
                                                    {"dim": 16, "rows": 332, "device": 2}]}]
    path = tmp_path / "plans.json"
    write_plans(path, [PlanRecord(0, "by_hand", plan=plan, view=view, num_tables=2)])
    assert read_plans(path)[0].plan == plan
    # checked against its tables: a spread table's dim is one rank's, not the sum over its ranks
    from neuroshard.formats.plan_file import plan_mismatch

    assert plan_mismatch(read_plans(path)[0], tables) is None


def test_plans_round_trip(tmp_path):
    tables = two_table_task()
    plan = Plan((0,), ((0,), (1, 2)))
    records = [
        PlanRecord(0, "dim_greedy", plan=plan, view=plan_view(tables, plan), search_ms=1.5, num_tables=2,
                   estimate=CostBreakdown([1.0, 0.5], [0.25, 0.25], [0.5, 0.5], dims=[8, 32])),
        PlanRecord(1, "dim_greedy", status="oom", message="out of memory", num_tables=2),
    ]
    path = tmp_path / "plans.json"
    write_plans(path, records)
    back = read_plans(path)
    assert back == records
    assert isinstance(back[0].plan, Plan) and back[0].estimated_cost == 1.75 and back[0].num_splits == 1
    text = path.read_text()
    assert '   {"table": 1, "shards": [{"dim": 16, "device": 1}]}' in text.splitlines()
    write_plans(path, [])
    assert read_plans(path) == []


@pytest.mark.parametrize("data, fragments", [
    ({"task": 0}, ["JSON list"]),
    ([{"alg": "x", "plan": None}], ["record 0", '"task"']),
    ([{"task": 0, "alg": "x", "plan": None, "status": "oom"}, {"task": 1, "alg": "x"}],
     ["record 1 (task 1)", 'missing "plan"']),
    ([{"task": 0, "alg": "x", "plan": {"column_steps": [], "shards": [[0, "1"]]}}],
     ["record 0", '"shards"', '"1"']),
    ([{"task": 0, "alg": "x", "plan": {"shards": [[0]]}}], ["record 0", '"column_steps"']),
    ([{"task": 0, "alg": "x", "plan": {"column_steps": [], "shards": [[]], "spread": [{"table": 0}]}}],
     ["record 0", '"kind"']),
    ([{"task": 0, "alg": "x", "plan": [1, 2]}], ["record 0", '"plan" must be an object']),
    ([{"task": 0, "plan": None}], ["record 0 (task 0)", '"alg"']),
    ([{"task": 0, "alg": "x", "plan": None}], ["record 0 (task 0)", '"status"']),
    ([{"task": 0, "alg": "x", "plan": None, "status": "ok"}], ["record 0 (task 0)", "status 'ok' with no plan"]),
])
def test_plans_malformed(tmp_path, data, fragments):
    path = tmp_path / "plans.json"
    path.write_text(json.dumps(data))
    expect_error(lambda: read_plans(path), path, *fragments)


def test_plans_invalid_json_names_line(tmp_path):
    path = tmp_path / "plans.json"
    path.write_text('[\n {"task": 0,\n  "plan": nul}\n]\n')
    expect_error(lambda: read_plans(path), path, "invalid JSON", line=3)
