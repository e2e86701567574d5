import csv
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from neuroshard.eval.planning import resolve_algs, task_seed
from neuroshard.formats.dataset import write_table_configs
from neuroshard.formats.plan_file import read_plans
from neuroshard.formats.task_file import write_tasks
from neuroshard.planner.costs.cost_models import save_model
from neuroshard.planner.costs.nets import (
    CommCostModel,
    ComputeCostModel,
    feature_stats,
    table_features,
)
from neuroshard.planner.registry import algorithm_names
from neuroshard.types.errors import NeuroShardError
from neuroshard.types.tables import TableConfig, Task

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "eval_simulator.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("eval_simulator_under_test", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """A tiny dataset (12 tables), 4 tasks (the last cannot fit), and tiny random models for 2 devices."""
    d = tmp_path_factory.mktemp("sim")
    rng = np.random.default_rng(0)
    configs = [TableConfig(int(10 ** rng.uniform(2, 5)), float(rng.uniform(1, 20)),
                           tuple(rng.dirichlet(np.ones(17)))) for _ in range(11)]
    configs.append(TableConfig(2**27, 1.0, tuple([1 / 17] * 17)))  # 2 GB at dim 4: fits no 1 GB device
    (d / "data").mkdir()
    write_table_configs(d / "data" / "table_configs.json", configs)
    tasks = [Task((0, 1, 2, 3, 4), (64, 32, 16, 8, 128)), Task((5, 6, 7, 5), (32, 32, 64, 16)),
             Task(tuple(range(11)), tuple(int(x) for x in rng.choice([8, 16, 32, 64], 11))),
             Task((0, 11), (16, 4))]
    write_tasks(d / "tasks.txt", tasks)
    torch.manual_seed(0)
    aug = [c.with_dim(dim) for c in configs for dim in (4, 8, 16, 32, 64, 128)]
    mean, std = feature_stats(table_features(aug))
    save_model(ComputeCostModel(mean, std, target_scale=5.0), d / "compute.pt")
    n = 2
    save_model(CommCostModel("fw", n, torch.full((2 * n,), 64.0), torch.full((2 * n,), 64.0)), d / "fw.pt")
    save_model(CommCostModel("bw", n, torch.full((n,), 64.0), torch.full((n,), 64.0)), d / "bw.pt")
    save_model(CommCostModel("bw", 3, torch.full((3,), 64.0), torch.full((3,), 64.0)), d / "bw3.pt")
    return d


def _argv(d, *extra):
    return ["--data_dir", str(d / "data"), "--task_path", str(d / "tasks.txt"), "--compute_model",
            str(d / "compute.pt"), "--fw_comm_model", str(d / "fw.pt"), "--bw_comm_model", str(d / "bw.pt"),
            "--ndevices", "2", "--max_mem", "1", "--no_progress", *extra]


def test_one_algorithm_prints_plans_average_and_valid_count(workspace, capsys):
    assert _load_script().main(_argv(workspace, "--alg", "neuroshard")) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert sum(1 for x in lines if x.startswith("Task ")) == 4
    assert "Task 1/4 [neuroshard] Sharding steps:" in out and "Latency:" in out
    assert "Task 4/4 [neuroshard] Out of memory" in out
    assert lines[-1] == "Valid 3 / 4"
    assert lines[-2].startswith("Average: ")


def test_all_algorithms_write_the_comparison_and_plans(workspace, capsys):
    out_dir = workspace / "out_all"
    mod = _load_script()
    assert mod.main(_argv(workspace, "--alg", "all", "--out_dir", str(out_dir), "--max_tasks", "3",
                          "--max_length", "2", "--quiet")) == 0
    out = capsys.readouterr().out
    algs = resolve_algs("all")  # every registered algorithm but the learned ones (no policy given)
    assert algs[0] == "neuroshard" and len(algs) >= 2 and "dreamshard" in algorithm_names()
    for name in ("config.json", "plans.json", "results.json", "results.csv", "summary.json", "summary.csv",
                 "summary.md"):
        assert (out_dir / name).is_file(), name
    summary = json.loads((out_dir / "summary.json").read_text())
    assert [r["alg"] for r in summary["algorithms"]] == algs
    assert summary["tasks"] == 3
    ns = summary["algorithms"][0]
    assert ns["valid"] == 3 and ns["median_search_ms"] > 0
    for r in summary["algorithms"][1:]:
        if r["mean_common"]:
            want = (r["mean_common"] - ns["mean_common"]) / abs(r["mean_common"])
            assert r["neuroshard_gain"] == pytest.approx(want)
    md = (out_dir / "summary.md").read_text()
    assert md.startswith("| algorithm |") and "neuroshard gain" in md
    assert md in out  # the same table is printed
    with open(out_dir / "summary.csv") as fh:
        assert [row["alg"] for row in csv.DictReader(fh)] == algs
    plans = read_plans(out_dir / "plans.json")
    assert len(plans) == 3 * len(algs)
    for rec in plans:
        if rec.status == "ok":
            assert rec.plan is not None and rec.estimated_cost == max(rec.estimate.total)
            assert [v["table"] for v in rec.view] == list(range(rec.num_tables))
    config = json.loads((out_dir / "config.json").read_text())
    assert config["alg"] == "all" and config["algs"] == algs and config["beam_k"] == 3
    results = json.loads((out_dir / "results.json").read_text())
    assert {r["alg"] for r in results} == set(algs)


def test_bad_inputs_raise_clear_errors(workspace):
    mod = _load_script()
    with pytest.raises(NeuroShardError, match="unknown algorithm"):
        mod.main(_argv(workspace, "--alg", "nope"))
    with pytest.raises(NeuroShardError, match="beam_k"):
        mod.main(_argv(workspace, "--beam_k", "0"))
    bad = _argv(workspace)
    bad[bad.index("--bw_comm_model") + 1] = str(workspace / "bw3.pt")
    with pytest.raises(NeuroShardError, match="ndevices=3"):
        mod.main(bad)
    bad_tasks = workspace / "bad_tasks.txt"
    bad_tasks.write_text("0,1 16,x\n")
    bad = _argv(workspace)
    bad[bad.index("--task_path") + 1] = str(bad_tasks)
    with pytest.raises(NeuroShardError, match="bad_tasks.txt:1"):
        mod.main(bad)


def test_learned_sharder_without_its_policy_is_a_one_line_error(workspace):
    mod = _load_script()
    with pytest.raises(NeuroShardError, match="--dreamshard_policy: --alg dreamshard needs a trained policy"):
        mod.main(_argv(workspace, "--alg", "neuroshard,dreamshard"))
    with pytest.raises(NeuroShardError, match="autoshard policy checkpoint not found"):
        mod.main(_argv(workspace, "--alg", "autoshard", "--autoshard_policy", str(workspace / "none.pt")))


def test_script_reports_bad_input_in_one_line(workspace):
    argv = _argv(workspace)
    argv[argv.index("--task_path") + 1] = str(workspace / "missing.txt")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 1
    err = p.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "missing.txt" in err[0]


def test_task_seeds_differ_per_task_and_follow_the_seed():
    assert task_seed(0, 0) != task_seed(0, 1)
    assert task_seed(0, 5) == task_seed(0, 5)
    assert task_seed(1, 5) != task_seed(0, 5)
