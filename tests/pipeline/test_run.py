"""End-to-end smoke test of the pipeline driver at the tiny preset, and its skip logic."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from neuroshard.formats.cost_data import read_comm_data, read_compute_data
from neuroshard.formats.dataset import read_dataset
from neuroshard.formats.plan_file import read_plans
from neuroshard.formats.task_file import read_tasks
from neuroshard.pipeline.run import Step, run_steps
from neuroshard.types import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def _driver(out: Path, *extra):
    return subprocess.run([sys.executable, "-m", "neuroshard.pipeline", "--preset", "tiny", "--out_dir", str(out),
                           *extra], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_tiny_pipeline_writes_every_artifact_and_skips_on_rerun(tmp_path):
    out = tmp_path / "run"
    r = _driver(out)
    assert r.returncode == 0, r.stderr[-2000:]
    # every step printed its command before running it
    for script in ("tools/gen_dlrm_data.py", "tools/gen_tasks.py", "collect_compute_cost_data.py",
                   "collect_comm_cost_data.py", "train_compute_cost_model.py", "tools/heldout_check.py",
                   "train_comm_cost_model.py", "train_dreamshard.py", "train_autoshard.py", "eval_simulator.py",
                   "eval.py", "collect_plan_cost_data.py", "tools/model_error.py"):
        assert f"$ python {script}" in r.stdout
    ds = read_dataset(out / "dataset")
    assert len(ds.configs) == 16 and ds.batch_size == 256
    assert len(read_tasks(out / "tasks" / "data.txt", num_tables=16)) == 3
    configs, samples = read_compute_data(out / "compute_data")
    assert len(samples) == 100 and all(cost > 0 for _, cost in samples)
    assert len(configs) == 16 * 4  # dims 32, 16, 8, 4
    assert len(read_comm_data(out / "comm_data", ndevices=2)) == 16
    for name in ("compute", "comm_2_fw", "comm_2_bw"):
        m = json.loads((out / "models" / f"{name}_metrics.json").read_text())
        assert {"mse", "mape", "spearman"} <= set(m["metrics"]["test"])
        assert (out / "models" / f"{name}_test_scatter.png").stat().st_size > 1000
    # the learned baselines trained on their own tasks (seed 1), never the evaluation tasks (seed 0)
    train_tasks = read_tasks(out / "train_tasks" / "data.txt", num_tables=16)
    assert len(train_tasks) == 4 and not set(train_tasks) & set(read_tasks(out / "tasks" / "data.txt"))
    for name in ("dreamshard", "autoshard"):
        assert (out / "models" / f"{name}.pt").is_file() and (out / "models" / f"{name}_curve.png").is_file()
    algs = ["neuroshard", "random", "dim_greedy", "lookup_greedy", "size_greedy", "size_lookup_greedy",
            "torchrec", "dreamshard", "autoshard", "neuroshard_plus"]
    for where in ("sim", "hw"):
        summary = json.loads((out / where / "summary.json").read_text())
        assert [row["alg"] for row in summary["algorithms"]] == algs
        assert all(row["tasks"] == 2 for row in summary["algorithms"])
    assert len(read_plans(out / "sim" / "plans.json")) == 2 * len(algs)
    hw = json.loads((out / "hw" / "results.json").read_text())
    measured = [r for r in hw if r.get("measured")]
    assert measured and all(r["measured"]["cost"] > 0 for r in measured)
    assert all(len(r["repeat_costs"]) == 2 for r in measured)  # the tiny preset measures every plan twice
    held = json.loads((out / "models" / "compute_heldout.json").read_text())
    assert set(held["mape"]) == {"in_distribution", "unseen_tables", "mixed"}
    report = (out / "report.md").read_text()
    assert "| neuroshard |" in report and "## Cost models" in report and "## Simulator vs hardware" in report
    assert "Held-out-table check" in report and "[95% CI]" in report
    assert "| dreamshard |" in report and "## Learned baselines" in report
    # the drift steps re-measured collected data after the evaluation, and the report reads them
    for name in ("drift_compute.json", "drift_comm.json"):
        assert json.loads((out / "hw" / name).read_text())["num_samples"] > 0
    # and the calibration steps before planning; steps 5 and 6 planned and judged with the models scaled by them
    for name in ("drift_compute.json", "drift_comm.json"):
        assert json.loads((out / "calibration" / name).read_text())["num_samples"] > 0
    for where in ("sim", "hw"):
        factors = json.loads((out / where / "config.json").read_text())["calibration_factors"]
        assert factors["samples"] == {"compute": 4, "fw_comm": 8, "bw_comm": 8} and factors["compute"] > 0
    assert "Machine drift: just before planning, 4 compute shards and 8 per-rank" in report
    # and step 4f's plans of training tasks measured again by the plan job just before and after step 6
    for when in ("before", "after"):
        anchored = read_plans(out / "hw" / f"anchors_{when}" / "results.json")
        assert anchored and all(len(a.repeat_costs) == 1 and a.task < 2 for a in anchored if a.measured)
    assert "Plan-level speed: the " in report
    # step 6's estimates are not scaled by the anchors before it (--plan_speed is eval.py's option, off here)
    assert json.loads((out / "hw" / "config.json").read_text())["plan_speed_factors"] is None
    assert "--plan_speed" not in report
    for png in ("cost_per_algorithm.png", "search_time.png"):
        assert (out / "plots" / png).stat().st_size > 1000
    config = json.loads((out / "config.json").read_text())
    assert config["preset"]["name"] == "tiny" and config["versions"]["torch"].startswith("2.13")
    assert config["anchors"]["factors"]["compute"] > 0 and config["anchors"]["scaled_plan_mape"] >= 0

    # sim-to-real: ensembles of 2, on-policy data from 2 training tasks, the models retrained on it plan
    # from the policy steps on, NeuroShard+ with the lambda chosen on hardware, the error before and after
    import torch

    assert len(torch.load(out / "models" / "compute.pt", weights_only=False)["members"]) == 2
    lam = json.loads((out / "plan_data" / "lambda.json").read_text())
    assert lam["lambdas"] == [0.0, 1.0] and lam["tasks"] == 2 and lam["chosen"] in (0.0, 1.0)
    assert f"--plus_lambda {lam['chosen']:g}" in r.stdout
    # the smallest lambda unless the other's plans were significantly cheaper (eval/onpolicy.py choose_lambda)
    d = lam["vs_default_ms"]["1"]
    assert lam["default"] == 0.0 and lam["chosen"] == (1.0 if d["hi"] < 0 else 0.0)
    assert "the smallest value, 0, unless another's plans cost significantly less" in report
    assert (out / "plan_data" / "compute" / "data.txt").stat().st_size > 0
    # each on-policy plan measured twice: how much of a rank's noise the ranks share, kept by the fw model
    rank_noise = json.loads((out / "plan_data" / "comm" / "config.json").read_text())["rank_noise"]
    assert rank_noise["plans"] > 0 and rank_noise["independent_sd"] >= 0 and rank_noise["common_sd"] >= 0
    fw_ckpt = torch.load(out / "models" / "onpolicy" / "comm_2_fw.pt", weights_only=False)
    assert fw_ckpt["extra"]["rank_noise"] == rank_noise
    # step 4i: the band calibrated on those plans under the retrained models, kept by the fw model too
    calibrated = json.loads((out / "models" / "onpolicy" / "plan_error_2.json").read_text())["plan_error"]
    plan_measured = [r for r in read_plans(out / "plan_data" / "hw" / "results.json") if r.measured]
    assert calibrated["measurements"] == sum(len(r.repeat_costs) for r in plan_measured) > 0
    assert 0.0 <= calibrated["sd"] <= 0.5 and calibrated["speed"] > 0
    assert calibrated["coverage_after"] >= min(0.8, calibrated["coverage_before"])
    assert fw_ckpt["extra"]["plan_error"] == calibrated
    assert "$ python tools/calibrate_band.py" in r.stdout and "plan-level error sd" in report
    assert f"--compute_model {out / 'models' / 'onpolicy' / 'compute.pt'}" in r.stdout
    err = json.loads((out / "hw" / "model_error.json").read_text())["accuracy"]
    assert set(err) == {"random", "onpolicy"} and err["onpolicy"]["plans"] == len(measured)
    assert "## On-policy cost data" in report and "Calibration:" in report
    assert "Within a plan the ranks move together" in report
    # the ranks' ready spread, estimated and measured, under each set of models and in the evaluation's table;
    # and what a choice among the compared plans by measurement would gain (the headroom)
    assert all(err[k]["rank_spread"]["plans"] == len(measured) for k in err)
    assert "ms apart in the estimates and" in report and "ranks' ready spread, estimated / measured" in report
    assert "- headroom: choosing each task's plan among the" in report
    # hardware in the loop (step 5, --refine 2): NeuroShard+'s plans chosen among measured candidates, the
    # paper's NeuroShard left as the models chose; the evaluation carries the choice and measures it afresh
    sim_plans = read_plans(out / "sim" / "plans.json")
    refined = [p for p in sim_plans if p.refine is not None]
    assert refined and {p.alg for p in refined} == {"neuroshard_plus"}
    assert all(2 <= len(p.refine.candidates) <= 3 and p.refine.seconds > 0 for p in refined)
    assert all(len(c.measured_costs) == 1 for p in refined for c in p.refine.candidates)  # refine_repeats 1
    assert [p.refine for p in read_plans(out / "hw" / "results.json") if p.alg == "neuroshard_plus"] == \
        [p.refine for p in refined]
    assert "## Hardware in the loop" in report and "- neuroshard_plus: 2 tasks" in report
    assert config["refine"]["neuroshard_plus"]["tasks"] == 2

    again = _driver(out)
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout.count("up to date, skipped") == 25


def test_changed_step_reruns_itself_and_everything_after(tmp_path, capsys):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    write = "import sys; open(sys.argv[1], 'w').write(sys.argv[2])"
    steps = [Step("1", "first", ["-c", write, str(a), "x"], [a]), Step("2", "second", ["-c", write, str(b), "y"], [b])]
    assert [r["skipped"] for r in run_steps(steps, tmp_path, force=False)] == [False, False]
    assert [r["skipped"] for r in run_steps(steps, tmp_path, force=False)] == [True, True]
    assert [r["skipped"] for r in run_steps(steps, tmp_path, force=True)] == [False, False]
    steps[0].argv[-1] = "z"
    assert [r["skipped"] for r in run_steps(steps, tmp_path, force=False)] == [False, False]
    assert a.read_text() == "z"
    b.unlink()
    assert [r["skipped"] for r in run_steps(steps, tmp_path, force=False)] == [True, False]


def test_torchrec_training_is_an_opt_in_last_step():
    from neuroshard.pipeline.run import PRESETS, build_steps

    out = Path("results/quick")
    assert "7" not in [s.key for s in build_steps(PRESETS["quick"], out, None, None)]
    steps = build_steps(PRESETS["quick"], out, None, None, seed=2, torchrec_train=True)
    assert [s.key for s in steps[-5:]] == ["7a", "7b", "7c", "7", "7-models"]
    collect, fit, plan, train, check = steps[-5:]
    assert collect.argv[0] == "collect_torchrec_cost_data.py" and "train_tasks" in collect.argv[collect.argv.index(
        "--task_path") + 1]
    model = out / "models" / "onpolicy" / "torchrec_runtime_4.json"
    assert fit.outputs == [model]
    flags = dict(zip(plan.argv[1::2], plan.argv[2::2]))
    assert flags["--alg"] == "neuroshard" and flags["--runtime"] == "torchrec"
    assert flags["--runtime_model"] == str(model)
    assert plan.argv.count("--alg") == 1
    assert train.argv[0] == "eval_torchrec.py"
    flags = dict(zip(train.argv[1::2], train.argv[2::2]))
    assert flags["--plans"] == f"{out / 'sim_torchrec' / 'plans.json'},{out / 'sim' / 'plans.json'}"
    assert flags["--ndevices"] == "4" and flags["--max_tasks"] == "3" and flags["--repeats"] == "4"
    assert flags["--seed"] == "2" and train.outputs == [out / "torchrec" / "summary.json"]
    flags = dict(zip(check.argv[1::2], check.argv[2::2]))
    assert flags["--model"] == str(model) and flags["--check"] == str(out / "torchrec" / "results.json")
    assert "--samples" not in flags


def test_refine_flag_puts_neuroshard_plus_refinement_into_step_5():
    from neuroshard.pipeline.run import build_steps, parse_args, preset_from_args

    def step5(*argv):
        preset = preset_from_args(parse_args(list(argv)))
        [s] = [s for s in build_steps(preset, Path("results") / preset.name, None, None) if s.key == "5"]
        return s.argv

    # the study spends its minutes on tasks, not on refinement; --refine K puts it back
    assert "--refine" not in step5("--preset", "study") and "--refine" not in step5("--preset", "quick")
    argv = step5("--preset", "study", "--refine", "4")
    flags = dict(zip(argv[1::2], argv[2::2]))
    assert flags["--refine"] == "4" and flags["--refine_algs"] == "neuroshard_plus"
    assert flags["--refine_repeats"] == "2" and flags["--device"] == "cpu"
    # candidates measured as step 6 measures plans
    assert flags["--warmup"] == "3" and flags["--iters"] == "7"
    assert "--refine" not in step5("--preset", "study", "--refine", "0")
    with pytest.raises(ConfigError, match="--refine"):
        preset_from_args(parse_args(["--preset", "study", "--refine", "-1"]))


def test_prediction_powered_verdicts_plan_unmeasured_tasks_as_step_5_plans_the_measured():
    from neuroshard.pipeline.run import UNMEASURED_SEED, build_steps, parse_args, preset_from_args

    def steps(*argv):
        preset = preset_from_args(parse_args(list(argv)))
        return {s.key: s for s in build_steps(preset, Path("r"), None, None)}

    study = steps("--preset", "study")
    gen = dict(zip(study["2b"].argv[1::2], study["2b"].argv[2::2]))
    assert gen["--data_size"] == "440" and gen["--seed"] == str(UNMEASURED_SEED) != "0"
    assert gen["--out_dir"] == str(Path("r") / "tasks_unmeasured")
    measured, unmeasured = (dict(zip(study[k].argv[1::2], study[k].argv[2::2])) for k in ("5", "5b"))
    # the same planning (models, calibration, algorithms, policies, seed) on the other tasks
    differ = {k for k in measured.keys() | unmeasured.keys() if measured.get(k) != unmeasured.get(k)}
    assert differ == {"--task_path", "--max_tasks", "--out_dir"}
    assert unmeasured["--task_path"] == gen["--out_dir"] + "/data.txt" and unmeasured["--max_tasks"] == "440"
    assert study["5b"].late is not None  # NeuroShard+'s lambda chosen on the training tasks, as step 5's
    hw = study["6"].argv
    assert hw[hw.index("--unmeasured_plans") + 1] == str(Path("r") / "sim_unmeasured" / "plans.json")
    assert hw[hw.index("--unmeasured_task_path") + 1] == unmeasured["--task_path"]
    # refined plans are chosen by measurement, which the unmeasured tasks do not get: plain verdicts
    refined = steps("--preset", "study", "--refine", "2")
    assert "2b" not in refined and "5b" not in refined and "--unmeasured_plans" not in refined["6"].argv
    assert "5b" in steps("--preset", "quick") and "5b" not in steps("--preset", "tiny")
