import pytest

from neuroshard.types import (CostBreakdown, InputError, InvalidPlanError, Plan, Task, TableConfig,
                              apply_column_steps, can_split, dim_set, size_gb)

BINS = tuple([0.5, 0.5] + [0.0] * 15)


def test_size_gb_and_dim_set():
    assert size_gb(2**20, 256) == 1.0
    assert dim_set(128) == [128, 64, 32, 16, 8, 4]
    assert dim_set(4) == [4]
    with pytest.raises(ValueError):
        dim_set(48)
    assert can_split(8) and not can_split(4) and not can_split(12)


def test_table_config_json_round_trip():
    c = TableConfig(1000, 3.5, BINS, dim=16)
    d = c.to_json()
    assert d["row"] == 1000 and d["bin_1"] == 0.5 and d["dim"] == 16
    assert TableConfig.from_json(d) == c
    with pytest.raises(ValueError):
        TableConfig.from_json({**d, "dim": 6})
    with pytest.raises(ValueError):
        TableConfig.from_json({**d, "row": -3})


def test_apply_column_steps_appends_halves():
    configs = [TableConfig(100, 1.0, BINS), TableConfig(200, 2.0, BINS)]
    tables = Task((1, 0), (16, 8)).tables(configs)
    out = apply_column_steps(tables, [0, 0, 2])
    assert [t.dim for t in out] == [4, 8, 4, 4, 4]
    assert [t.origin for t in out] == [0, 1, 0, 0, 0]
    assert all(t.table_id == 1 for i, t in enumerate(out) if t.origin == 0)
    assert sum(t.dim for t in out if t.origin == 0) == 16
    with pytest.raises(InvalidPlanError):
        apply_column_steps(tables, [5])
    with pytest.raises(InvalidPlanError):
        apply_column_steps(tables, [1, 1])  # 8 -> 4 -> (2 is not a multiple of 4)


def test_plan_and_cost_breakdown():
    p = Plan((0,), ((0, 2), (1,)))
    assert Plan.from_json(p.to_json()) == p and p.ndevices == 2
    c = CostBreakdown([1.0, 2.0], [0.5, 0.5], [0.25, 1.0])
    assert c.total == [1.75, 3.5] and c.cost == 3.5
    assert c.to_json()["cost"] == 3.5


def test_input_error_names_file_and_line():
    assert str(InputError("a/b.txt", "bad value 'x'", line=3)) == "a/b.txt:3: bad value 'x'"
