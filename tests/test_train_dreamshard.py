"""train_dreamshard.py end to end on a tiny dataset: checkpoint, curve and config written; the policy
then used by eval_simulator.py; evaluation tasks refused as training tasks; one plan batch measured
by the hardware oracle on 2 CPU ranks; bad flags refused before any work."""

import csv
import importlib.util
import json
from dataclasses import replace
from pathlib import Path

import pytest

from neuroshard.data.synthetic import SyntheticSpec, generate_synthetic
from neuroshard.data.task_gen import TaskSpec, generate_tasks
from neuroshard.formats.dataset import write_dataset
from neuroshard.formats.task_file import write_tasks
from neuroshard.planner.costs.cost_models import save_model
from neuroshard.planner.costs.nets import linear_compute_model
from neuroshard.problem import Problem
from neuroshard.types.errors import ConfigError, InputError
from tests.planner.test_simulator import diagonal_comm_model

ROOT = Path(__file__).resolve().parents[1]


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(f"{name}_under_test", ROOT / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """A 12-table synthetic dataset (with lookups), 3 evaluation tasks (seed 0), 5 training tasks
    (seed 1) and hand-set linear cost models for 2 devices."""
    d = tmp_path_factory.mktemp("learned")
    configs, _, idx, off = generate_synthetic(SyntheticSpec(num_tables=12, batch_size=128, max_rows=3000, seed=0),
                                              progress=False)
    write_dataset(d / "ds", configs, idx, off)
    spec = TaskSpec(data_size=3, T_range=(4, 8), max_dim=32, problem=Problem(ndevices=2, max_mem=1.0, seed=0))
    write_tasks(d / "eval.txt", generate_tasks(configs, spec))
    write_tasks(d / "train.txt", generate_tasks(configs, replace(spec, data_size=5, problem=spec.problem.with_seed(1))))
    save_model(linear_compute_model(0.05, 0.5), d / "compute.pt")
    save_model(diagonal_comm_model("fw", 2, 0.01, 0.5, 0.2), d / "fw.pt")
    save_model(diagonal_comm_model("bw", 2, 0.02, 0.0, 0.1), d / "bw.pt")
    return d


def common(d, out: str, *extra) -> list[str]:
    return ["--data_dir", str(d / "ds"), "--task_path", str(d / "train.txt"), "--eval_task_path",
            str(d / "eval.txt"), "--compute_model", str(d / "compute.pt"), "--fw_comm_model", str(d / "fw.pt"),
            "--bw_comm_model", str(d / "bw.pt"), "--ndevices", "2", "--max_mem", "1", "--out_path", str(d / out),
            "--no_progress", *extra]


def eval_sim(d, *extra) -> dict:
    out = d / "sim"
    argv = ["--data_dir", str(d / "ds"), "--task_path", str(d / "eval.txt"), "--compute_model", str(d / "compute.pt"),
            "--fw_comm_model", str(d / "fw.pt"), "--bw_comm_model", str(d / "bw.pt"), "--ndevices", "2",
            "--max_mem", "1", "--alg", "all", "--max_length", "1", "--quiet", "--no_progress", "--out_dir", str(out),
            *extra]
    assert load_script("eval_simulator").main(argv) == 0
    return json.loads((out / "summary.json").read_text())


def check_outputs(d, stem: str, kind: str, rows: int) -> dict:
    assert (d / f"{stem}.pt").is_file() and (d / f"{stem}_curve.png").stat().st_size > 1000
    with open(d / f"{stem}_curve.csv") as fh:
        curve = list(csv.DictReader(fh))
    assert len(curve) == rows and all(float(r["mean_measured_ms"]) > 0 for r in curve)
    config = json.loads((d / f"{stem}_config.json").read_text())
    assert config["algorithm"] == kind and config["train_tasks"] == 5 and config["oracle_plans"] > 0
    assert config["train_greedy_valid"] == 5 and config["train_greedy_sim_ms"] > 0
    return config


def test_train_then_evaluate_with_the_policy(workspace, capsys):
    d = workspace
    argv = common(d, "ds.pt", "--num_iterations", "2", "--bench_steps", "3", "--bench_training_steps", "10",
                  "--rl_num_batches", "2", "--rl_batch_size", "3")
    assert load_script("train_dreamshard").main(argv) == 0
    assert "dreamshard: trained in" in capsys.readouterr().out
    config = check_outputs(d, "ds", "dreamshard", rows=2)
    assert config["config"]["num_iterations"] == 2 and config["oracle"] == "simulator"
    summary = eval_sim(d, "--dreamshard_policy", str(d / "ds.pt"))
    rows = {r["alg"]: r for r in summary["algorithms"]}
    assert "dreamshard" in rows and "autoshard" not in rows and rows["dreamshard"]["valid"] == 3


def test_evaluation_tasks_are_refused_for_training(workspace):
    argv = common(workspace, "x.pt")
    argv[argv.index("--eval_task_path") + 1] = str(workspace / "train.txt")
    with pytest.raises(InputError, match="5 training task\\(s\\) .* are evaluation tasks"):
        load_script("train_dreamshard").main(argv)


def test_hardware_oracle_measures_the_rolled_out_plans(workspace):
    d = workspace
    argv = common(d, "ds_hw.pt", "--oracle", "hardware", "--device", "cpu", "--warmup", "1", "--iters", "1",
                  "--num_iterations", "1", "--bench_steps", "2", "--bench_training_steps", "5", "--rl_num_batches",
                  "1", "--rl_batch_size", "2")
    assert load_script("train_dreamshard").main(argv) == 0
    config = json.loads((d / "ds_hw_config.json").read_text())
    assert config["oracle"] == "hardware" and config["oracle_plans"] == 2 and config["oracle_s"] > 0


def test_bad_flag_is_refused_before_any_work(workspace):
    # the released `--entropy-weight` (declared int there, so it could not be passed) works as a float here
    with pytest.raises(ConfigError, match="^--entropy_weight: must be >= 0, got -1$"):
        load_script("train_dreamshard").main(common(workspace, "x.pt", "--entropy-weight", "-1"))
    with pytest.raises(ConfigError, match="--num_iterations: must be >= 1, got 0"):
        load_script("train_dreamshard").main(common(workspace, "x.pt", "--num_iterations", "0"))
