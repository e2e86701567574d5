"""tools/export_torchrec_plan.py: a plan of a plans.json (tables from a dataset and task file) written as a
TorchRec plan that maps back to the same plan; wrong selections are one-line errors."""

import pytest

from neuroshard.eval.planning import plan_task
from neuroshard.formats.dataset import write_table_configs
from neuroshard.formats.plan_file import write_plans
from neuroshard.formats.sharding_file import read_torchrec_plan
from neuroshard.formats.task_file import write_tasks
from neuroshard.problem import Problem
from neuroshard.torchrec.sharder import plan_from_sharding_plan
from neuroshard.types.tables import DEFAULT_BINS, TableConfig, Task
from tests.test_tools import assert_raises_one_line, run

pytest.importorskip("torchrec")


@pytest.fixture
def suite(tmp_path):
    configs = [TableConfig(r, 2.0, DEFAULT_BINS) for r in (2**22, 1000, 50_000, 300)]
    write_table_configs(tmp_path / "table_configs.json", configs)
    tasks = [Task((0, 1, 1, 3), (64, 16, 32, 8)), Task((2, 3), (8, 8))]
    write_tasks(tmp_path / "data.txt", tasks)
    records = [plan_task(i, t.tables(configs), alg, Problem(2, 0.75), models=None)
               for i, t in enumerate(tasks) for alg in ("torchrec", "size_greedy")]
    write_plans(tmp_path / "plans.json", records)
    return tmp_path, configs, tasks, records


def test_exported_plan_maps_back_to_the_record(suite):
    d, configs, tasks, records = suite
    rec = records[0]  # task 0, torchrec: table 0 is 1 GB at dim 64 > 0.75 GB, so it was split
    assert rec.status == "ok" and rec.plan.column_steps
    res = run("export_torchrec_plan.py", "--plans", d / "plans.json", "--task", 0, "--alg", "torchrec",
              "--data_dir", d, "--task_path", d / "data.txt", "--out", d / "tr.pt", "--torchrec_device", "cpu")
    assert res.returncode == 0, res.stderr
    assert "wrote" in res.stderr and (d / "tr.json").is_file()
    plan = read_torchrec_plan(d / "tr.pt")
    names = ["t0", "t1", "t1_1", "t3"]  # table 1 appears twice in the task
    assert sorted(plan.plan[""]) == sorted(names)
    assert plan_from_sharding_plan(plan, tasks[0].tables(configs), names, 2) == rec.plan


def test_wrong_selection_is_a_one_line_error(suite):
    d, *_ = suite
    common = ["--plans", d / "plans.json", "--data_dir", d, "--task_path", d / "data.txt", "--out", d / "x.pt"]
    assert_raises_one_line("export_torchrec_plan", [*common, "--alg", "neuroshard"],
                           "no plan of 'neuroshard' for task 0 (algorithms there: size_greedy, torchrec)")
    assert_raises_one_line("export_torchrec_plan", [*common, "--task", 5], "--task: 5 is not a task of")
    assert_raises_one_line("export_torchrec_plan", ["--plans", d / "plans.json", "--out", d / "x.pt"],
                           "--data_dir and --task_path, or --tables")
    assert_raises_one_line("export_torchrec_plan", [*common[:-2], "--alg", "torchrec", "--out", d / "x.json"],
                           "suffix other than .json")
