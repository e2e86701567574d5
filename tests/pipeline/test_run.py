"""End-to-end smoke test of the pipeline driver at the tiny preset, and its skip logic."""

import json
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from neuroshard.eval.round_calibration import round_factors
from neuroshard.formats.cost_data import read_comm_data, read_compute_data
from neuroshard.formats.dataset import read_dataset
from neuroshard.formats.plan_file import read_plans
from neuroshard.formats.task_file import read_tasks
from neuroshard.pipeline.run import run_steps
from neuroshard.pipeline.steps import Step
from neuroshard.types.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
# the original release's README runs steps 1 and 2 as `python3 tools/<script>` (DESIGN.md §11)
UPSTREAM_TOOL_PATHS = {"gen_dlrm_data.py", "gen_tasks.py"}


def _driver(out: Path, *extra):
    return subprocess.run([sys.executable, "-m", "neuroshard.pipeline", "--preset", "tiny", "--out_dir", str(out),
                           *extra], cwd=ROOT, capture_output=True, text=True, timeout=600)


def config_of(out):
    return json.loads((out / "config.json").read_text())


@pytest.mark.heavy(120)
def test_tiny_pipeline_writes_every_artifact_and_skips_on_rerun(tmp_path):
    out = tmp_path / "run"
    r = _driver(out)
    assert r.returncode == 0, r.stderr[-2000:]
    # every step printed its command before running it
    for script in ("gen_dlrm_data.py", "gen_tasks.py", "collect_compute_cost_data.py",
                   "collect_comm_cost_data.py", "train_compute_cost_model.py", "heldout_check.py",
                   "train_comm_cost_model.py", "train_dreamshard.py", "train_autoshard.py", "eval_simulator.py",
                   "eval.py", "collect_plan_cost_data.py", "model_error.py"):
        assert f"$ python {script}" in r.stdout
    ds = read_dataset(out / "dataset")
    assert len(ds.configs) == 16 and ds.batch_size == 256
    assert len(read_tasks(out / "tasks" / "data.txt", num_tables=16)) == 3
    configs, samples = read_compute_data(out / "compute_data")
    assert len(samples) == 100 and all(s.cost > 0 and s.batch is None for s in samples)
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
    # every algorithm, and the cost-model ablation's cells (with the estimator step 4j fitted)
    algs = ["neuroshard", "random", "dim_greedy", "lookup_greedy", "size_greedy", "size_lookup_greedy",
            "torchrec", "dreamshard", "autoshard", "neuroshard_plus", "neuroshard_fitted", "torchrec_fitted",
            "torchrec_neural"]
    for where in ("sim", "hw"):
        summary = json.loads((out / where / "summary.json").read_text())
        assert [row["alg"] for row in summary["algorithms"]] == algs
        assert all(row["tasks"] == 2 for row in summary["algorithms"])
    assert len(read_plans(out / "sim" / "plans.json")) == 2 * len(algs)
    hw = json.loads((out / "hw" / "results.json").read_text())
    measured = [r for r in hw if r.get("measured")]
    assert measured and all(r["measured"]["cost"] > 0 for r in measured)
    assert all(len(r["repeat_costs"]) == 2 for r in measured)  # the tiny preset measures every plan twice
    # step 3e: the collectives of spread tables timed on the 2 ranks and their model, which steps 5 and 6 price with
    collectives = json.loads((out / "models" / "collectives_2.json").read_text())
    assert set(collectives["fits"]) == {"reduce_scatter", "all_gather", "all_reduce"}
    assert json.loads((out / "sim" / "config.json").read_text())["collective_model"].endswith("collectives_2.json")
    # and step 6f re-prices the measured plans with it: a NeuroShard plan may make a table row-wise there
    assert "model_error.py" in r.stdout and f"--collective_model {out / 'models' / 'collectives_2.json'}" in \
        r.stdout.split("$ python model_error.py", 1)[1].splitlines()[0]
    held = json.loads((out / "models" / "compute_heldout.json").read_text())
    assert set(held["mape"]) == {"in_distribution", "unseen_tables", "mixed"}
    report = (out / "report.md").read_text()
    assert "| neuroshard |" in report and "## Cost models" in report and "## Simulator vs hardware" in report
    assert "Held-out-table check" in report and "[95% CI]" in report
    assert "The collectives of row-wise, table-row-wise and data-parallel tables on the paper's runtime (step 3e" \
        in report
    assert "| dreamshard |" in report and "## Learned baselines" in report
    estimator = json.loads((out / "models" / "onpolicy" / "torchrec_estimator_2.json").read_text())
    assert estimator["format"] == "neuroshard.torchrec_estimator.v1" and estimator["fit"]["compute"]["test_samples"]
    assert "## Cost model against search" in report and "| NeuroShard's search |" in report
    assert "- search, fitted costs: `neuroshard_fitted` against `torchrec_fitted`:" in report
    assert set(config_of(out)["ablation"]["cells"]) == {"neuroshard", "neuroshard_fitted", "torchrec_neural",
                                                         "torchrec_fitted", "torchrec"}
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
    # and step 4d's plans of training tasks measured again by the plan job just before and after step 6
    for when in ("before", "after"):
        anchored = read_plans(out / "hw" / f"anchors_{when}" / "results.json")
        assert anchored and all(len(a.repeat_costs) == 1 and a.task < 2 for a in anchored if a.measured)
    assert "Plan-level speed: the " in report
    # and one plan of each of step 2d's 4 anchor tasks (step 5e's, the algorithms rotated over the tasks) measured
    # in every round of step 6b: the rounds' speed, each measurement against it
    rounds = json.loads((out / "hw" / "round_calibration.json").read_text())
    assert rounds["anchors"] == 4 and len(rounds["factors"]) == 2 and rounds["measurements"] == 2 * len(measured)
    anchors = read_plans(out / "hw" / "round_anchors.json")  # their measurements, to read the speed again from
    assert len(anchors) == 4 and all(len(a.repeat_costs) == 2 for a in anchors)
    assert sorted(a.task for a in anchors) == [0, 1, 2, 3] and len({a.alg for a in anchors}) > 1
    assert len(read_plans(out / "anchor_sim" / "plans.json")) > 4
    for got, want in zip(round_factors(anchors, 2), rounds["factors"], strict=True):
        assert got == pytest.approx(want)
    assert "Per-round calibration: 4 plans of anchor tasks (step 5e's" in report
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
    # step 4g: the band calibrated on those plans under the retrained models, kept by the fw model too
    calibrated = json.loads((out / "models" / "onpolicy" / "plan_error_2.json").read_text())["plan_error"]
    plan_measured = [r for r in read_plans(out / "plan_data" / "hw" / "results.json") if r.measured]
    assert calibrated["measurements"] == sum(len(r.repeat_costs) for r in plan_measured) > 0
    assert 0.0 <= calibrated["sd"] <= 0.5 and calibrated["speed"] > 0
    assert calibrated["coverage_after"] >= min(0.8, calibrated["coverage_before"])
    assert fw_ckpt["extra"]["plan_error"] == calibrated
    assert "$ python calibrate_band.py" in r.stdout and "plan-level error sd" in report
    assert f"--compute_model {out / 'models' / 'onpolicy' / 'compute.pt'}" in r.stdout
    model_error = json.loads((out / "hw" / "model_error.json").read_text())
    err = model_error["accuracy"]
    assert set(err) == {"random", "onpolicy", "fitted"} and err["onpolicy"]["plans"] == len(measured)
    # each set after the per-round calibration too: the onpolicy set's is the evaluation's own, read again
    rounds = json.loads((out / "hw" / "round_calibration.json").read_text())
    assert set(model_error["round_calibrated"]) == set(err)
    assert model_error["round_calibrated"]["onpolicy"]["mape"] == pytest.approx(rounds["mape"], rel=1e-6)
    assert "After the per-round calibration, each set's rounds' factors" in report
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
    # every step of the tiny run, steps 2d, 3e, 3f@4, 3g@4, 3h@4, 4j, 4k, 4l and 5e among them
    assert again.stdout.count("up to date, skipped") == 29


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


def steps_of(*argv, out=Path("r")) -> dict:
    """The steps of the run the pipeline's flags describe, by name (`6b:paper`, `3c`)."""
    from neuroshard.pipeline.run import parse_args, run_of
    from neuroshard.pipeline.steps import build_steps

    return {s.name: s for s in build_steps(run_of(parse_args(list(argv)), out))}


def flags_of(step) -> dict:
    return dict(zip(step.argv[1::2], step.argv[2::2]))


def test_torchrec_training_is_an_opt_in_last_phase():
    out = Path("results/quick")
    assert not any(k.startswith("7") for k in steps_of("--preset", "quick", out=out))
    steps = steps_of("--preset", "quick", "--seed", "2", "--torchrec_train", out=out)
    # 7a of both sets, the runtime data, runs before the model is fitted to both collections; then NeuroShard's
    # plans for that first fit over the second set's training tasks (7c) and the fit again with them (7d)
    assert list(steps)[-11:] == ["7a:paper", "7a:oversize", "7b", "7c:oversize", "7d", "7e:paper", "7e:oversize",
                                 "7f:paper", "7f:oversize", "7g:paper", "7g:oversize"]
    collect, fit, plan, train, check = (steps[k] for k in ("7a:paper", "7b", "7e:paper", "7f:paper", "7g:paper"))
    assert collect.argv[0] == "collect_torchrec_cost_data.py" and "train_tasks" in collect.argv[collect.argv.index(
        "--task_path") + 1]
    more = flags_of(steps["7a:oversize"])
    assert steps["7a:oversize"].argv[0] == collect.argv[0] and more["--data_dir"] == str(out / "oversize" / "dataset")
    assert more["--task_path"] == str(out / "oversize" / "train_tasks" / "data.txt")
    assert more["--eval_task_path"] == str(out / "oversize" / "tasks" / "data.txt")
    assert more["--out_dir"] == str(out / "oversize" / "torchrec_data")
    assert more["--collective_model"] == str(out / "models" / "collectives_4.json")  # its NeuroShard plans spread
    for key in ("--max_tasks", "--random_plans", "--spread_share", "--alg", "--iters"):  # 7a's collection otherwise
        assert more[key] == flags_of(collect)[key]
    model = out / "models" / "onpolicy" / "torchrec_runtime_4.json"
    first = out / "models" / "onpolicy" / "torchrec_runtime_4_first.json"
    assert fit.outputs == [first] and flags_of(fit)["--out_path"] == str(first)
    fitted = flags_of(fit)
    assert fitted["--results"] == str(out / "torchrec_data" / "results.json")
    assert fitted["--extra_results"] == more["--out_dir"] + "/results.json" and Path(fitted["--extra_results"]) in \
        fit.inputs
    assert fitted["--extra_data_dir"] == more["--data_dir"] and fitted["--extra_task_path"] == more["--task_path"]
    # 7c: NeuroShard planned with the first fit and the greedy beside it, on 7a:oversize's tasks, 2 rounds; 7d fits
    # again
    onpolicy, refit = flags_of(steps["7c:oversize"]), flags_of(steps["7d"])
    assert steps["7c:oversize"].argv[0] == collect.argv[0] and first in steps["7c:oversize"].inputs
    assert onpolicy["--alg"] == "neuroshard,size_lookup_greedy" and onpolicy["--random_plans"] == "0"
    assert onpolicy["--runtime"] == "torchrec" and onpolicy["--runtime_model"] == str(first)
    assert onpolicy["--repeats"] == "2" and "--dp_min_pooling" not in onpolicy and "--spread_share" not in onpolicy
    for key in ("--data_dir", "--task_path", "--eval_task_path", "--max_tasks", "--collective_model"):
        assert onpolicy[key] == more[key]
    assert onpolicy["--out_dir"] == str(out / "oversize" / "torchrec_onpolicy")
    assert steps["7d"].outputs == [model] and refit["--out_path"] == str(model)
    assert refit["--extra_results"] == f"{more['--out_dir']}/results.json,{onpolicy['--out_dir']}/results.json"
    assert refit["--extra_data_dir"] == f"{more['--data_dir']},{more['--data_dir']}"
    assert refit["--extra_task_path"] == f"{more['--task_path']},{more['--task_path']}"
    assert {k: v for k, v in refit.items() if not k.startswith(("--extra", "--out"))} == \
        {k: v for k, v in fitted.items() if not k.startswith(("--extra", "--out"))}
    # off: 7b's fit is the model
    from dataclasses import replace

    from neuroshard.pipeline.run import parse_args, run_of
    from neuroshard.pipeline.steps import build_steps

    run = run_of(parse_args(["--preset", "quick", "--torchrec_train"]), out)
    off = {s.name: s for s in build_steps(replace(run, preset=replace(run.preset, torchrec_onpolicy_rounds=0)))}
    assert "7c:oversize" not in off and "7d" not in off and off["7b"].outputs == [model]
    flags = flags_of(plan)
    assert flags["--alg"] == "neuroshard" and flags["--runtime"] == "torchrec"
    assert flags["--runtime_model"] == str(model)
    # 7g:oversize: the check of the model on 7f:oversize's plans, their tasks' tables the second dataset's
    checked, new_set = flags_of(steps["7g:oversize"]), flags_of(steps["7f:oversize"])
    assert checked["--model"] == str(model) and checked["--check_data_dir"] == new_set["--data_dir"]
    assert checked["--check_results"] == new_set["--out_dir"] + "/results.json" == str(steps["7g:oversize"].inputs[0])
    assert checked["--check_task_path"] == new_set["--task_path"]
    assert {k: v for k, v in checked.items() if not k.startswith(("--check", "--out"))} == \
        {k: v for k, v in flags_of(check).items() if not k.startswith(("--check", "--out"))}
    assert plan.argv.count("--alg") == 1
    assert train.argv[0] == "eval_torchrec.py"
    flags = flags_of(train)
    assert flags["--plans"] == f"{out / 'sim_torchrec' / 'plans.json'},{out / 'sim' / 'plans.json'}"
    assert flags["--ndevices"] == "4" and flags["--max_tasks"] == "3" and flags["--repeats"] == "4"
    assert flags["--seed"] == "2" and train.outputs == [out / "torchrec" / "summary.json"]
    # per-round calibration: 4 of step 7a's plans, which the runtime model is fitted to, trained again in every
    # round: the machine's speed against the hour the model was fitted at
    assert flags["--round_anchors"] == str(out / "torchrec_data" / "results.json")
    assert flags["--anchors_per_round"] == "4" and out / "torchrec_data" / "results.json" in train.inputs
    flags = flags_of(check)
    assert flags["--model"] == str(model) and flags["--check_results"] == str(out / "torchrec" / "results.json")
    assert "--results" not in flags
    # the tasks with a table larger than a device: planned for TorchRec's runtime, trained beside the others
    oversize_plan, oversize_train = steps["7e:oversize"].argv, flags_of(steps["7f:oversize"])
    assert oversize_plan[oversize_plan.index("--runtime_model") + 1] == str(model)
    assert oversize_plan[oversize_plan.index("--data_dir") + 1] == str(out / "oversize" / "dataset")
    assert oversize_train["--plans"] == f"{out / 'oversize' / 'sim_torchrec' / 'plans.json'}," \
                                      f"{out / 'oversize' / 'sim' / 'plans.json'}"
    assert oversize_train["--alg"] == "all,torchrec_full" and oversize_train["--max_tasks"] == "3"
    assert oversize_train["--reference"] == "neuroshard[torchrec]"  # NeuroShard over every type is the one judged


def test_tasks_beyond_the_paper_space_get_their_dataset_tasks_and_evaluation():
    from tests.test_flags import parsed_options

    steps = steps_of("--preset", "quick")
    oversize = [steps[k] for k in ("1:oversize", "2a:oversize", "5c:oversize", "6b:oversize")]

    def flag(step, name):
        return step.argv[step.argv.index(name) + 1]

    data, tasks, sim, hw = oversize
    assert flag(data, "--large_tables") == "8" and flag(data, "--hot_tables") == "8"
    assert flag(data, "--out_dir") == str(Path("r") / "oversize" / "dataset")
    assert flag(tasks, "--oversize") == "1" and flag(tasks, "--hot") == "1"
    assert flag(tasks, "--data_dir") == flag(data, "--out_dir") and flag(tasks, "--data_size") == "4"
    for step in (sim, hw):  # every algorithm of the evaluation and TorchRec's full planner, on the second dataset's
        assert flag(step, "--alg") == flag(steps["5c:paper"], "--alg") + ",torchrec_full"  # (priced by step 3e's model)
        assert flag(step, "--max_tasks") == "4" and flag(step, "--collective_model").endswith("collectives_4.json")
        assert flag(step, "--data_dir") == flag(data, "--out_dir")
        assert flag(step, "--task_path") == str(Path("r") / "oversize" / "tasks" / "data.txt")
    assert flag(hw, "--plans") == str(Path("r") / "oversize" / "sim" / "plans.json")
    assert flag(hw, "--repeats") == "2" and sim.late is not None
    # their own anchors in every round of 6b: plans of other tasks over the same dataset (the anchor tasks' seed)
    anchor_tasks, anchor_sim = steps["2d:oversize"], steps["5e:oversize"]
    assert flag(anchor_tasks, "--data_dir") == flag(data, "--out_dir") and flag(anchor_tasks, "--data_size") == "4"
    assert flag(anchor_tasks, "--seed") == "2000" and flag(tasks, "--seed") == "0"
    assert flag(anchor_tasks, "--hot") == "1"
    assert flag(anchor_sim, "--task_path") == str(Path("r") / "oversize" / "anchor_tasks" / "data.txt")
    assert flag(anchor_sim, "--alg") == flag(sim, "--alg") and flag(anchor_sim, "--max_tasks") == "4"
    anchored = str(Path("r") / "oversize" / "anchor_sim" / "plans.json")
    assert flag(hw, "--round_anchors") == anchored and flag(hw, "--anchors_per_round") == "4"
    assert Path(anchored) in hw.inputs and "--round_anchors" not in sim.argv
    # TorchRec's runtime data over the second dataset (7a) are plans of training tasks of their own (2c)
    train_tasks = steps["2c:oversize"]
    assert flag(train_tasks, "--data_dir") == flag(data, "--out_dir") and flag(train_tasks, "--hot") == "1"
    assert flag(train_tasks, "--seed") == flag(steps["2c:paper"], "--seed") and flag(train_tasks, "--data_size") == "16"
    assert flag(train_tasks, "--out_dir") == str(Path("r") / "oversize" / "train_tasks")
    oversize += [anchor_tasks, anchor_sim, train_tasks]
    trec = steps_of("--preset", "quick", "--torchrec_train")
    oversize += [trec[k] for k in ("7e:oversize", "7f:oversize", "7g:oversize", "7a:oversize", "7b", "7c:oversize",
                                   "7d")]
    options = parsed_options(sorted({ROOT / s.argv[0] for s in oversize}))
    for step in oversize:
        assert not [a for a in step.argv if a.startswith("--") and a not in options[step.argv[0]]]
    # off in the smoke preset, and on a public dataset (whose own tables would have to be larger than a device)
    assert not {"1:oversize", "2a:oversize", "2d:oversize", "2c:oversize", "5e:oversize", "5c:oversize",
                "6b:oversize"} & (steps_of("--preset", "tiny").keys() | steps_of("--preset", "quick", "--data",
                                                                                      "x.pt").keys())


def test_the_new_set_compares_the_size_and_lookup_greedy_whatever_the_presets_algorithms():
    study = steps_of("--preset", "study")
    assert "size_lookup_greedy" not in flags_of(study["5c:paper"])["--alg"].split(",")
    for key in ("5e:oversize", "5c:oversize", "6b:oversize"):
        assert flags_of(study[key])["--alg"] == \
            flags_of(study["5c:paper"])["--alg"] + ",size_lookup_greedy,torchrec_full"
    quick = steps_of("--preset", "quick")  # named once where the preset has it
    assert flags_of(quick["5c:oversize"])["--alg"].split(",").count("size_lookup_greedy") == 1


def test_the_compute_models_and_the_fitted_estimator_also_train_on_the_second_datasets_tables():
    steps = steps_of("--preset", "quick")

    def flag(step, name):
        return step.argv[step.argv.index(name) + 1]

    data = str(Path("r") / "oversize" / "compute_data")
    collect = steps["3a:oversize"]
    assert flag(collect, "--dataset_dir") == flag(steps["1:oversize"], "--out_dir")
    assert flag(collect, "--out_dir") == data
    assert flag(collect, "--data_size") == "150"
    # timed as the first dataset's shards are: every other collection flag is step 3a's
    first = dict(zip(steps["3a:paper"].argv[1::2], steps["3a:paper"].argv[2::2]))
    second = dict(zip(collect.argv[1::2], collect.argv[2::2]))
    assert {k: v for k, v in first.items() if k not in ("--dataset_dir", "--out_dir", "--data_size")} == \
        {k: v for k, v in second.items() if k not in ("--dataset_dir", "--out_dir", "--data_size")}
    assert flag(steps["4a"], "--extra_data_dirs") == data and Path(data) in steps["4a"].inputs
    # the models retrained on the on-policy data also read the second dataset's measured plans (4d): the plans
    # of 4 of its training tasks by the planners that make row-wise and data-parallel tables, spread tables and all
    plans = Path("r") / "oversize" / "plan_data" / "compute"
    for key in ("4e", "4j"):
        assert flag(steps[key], "--extra_data_dirs") == f"{data},{plans}" and plans in steps[key].inputs
    onpolicy = steps["4d:oversize"]
    assert flag(onpolicy, "--data_dir") == str(Path("r") / "oversize" / "dataset")
    assert flag(onpolicy, "--task_path") == str(Path("r") / "oversize" / "train_tasks" / "data.txt")
    assert flag(onpolicy, "--eval_task_path") == str(Path("r") / "oversize" / "tasks" / "data.txt")
    assert flag(onpolicy, "--alg") == "torchrec_full,size_lookup_greedy,neuroshard"
    assert flag(onpolicy, "--max_tasks") == "4" and flag(onpolicy, "--out_dir") == str(plans.parent)
    assert flag(onpolicy, "--compute_model") == flag(steps["4d:paper"], "--compute_model")  # the random data's models
    assert "--extra_data_dirs" not in steps["4b"].argv  # unseen tables are the first dataset's
    tiny = steps_of("--preset", "tiny")
    assert not {"3a:oversize", "4d:oversize"} & tiny.keys() and "--extra_data_dirs" not in tiny["4a"].argv


def test_refine_flag_puts_neuroshard_plus_refinement_into_the_planning_step():
    def planning(*argv):
        return steps_of(*argv)["5c:paper"].argv

    # the study spends its minutes on tasks, not on refinement; --refine K puts it back
    assert "--refine" not in planning("--preset", "study") and "--refine" not in planning("--preset", "quick")
    flags = dict(zip(planning("--preset", "study", "--refine", "4")[1::2],
                     planning("--preset", "study", "--refine", "4")[2::2]))
    assert flags["--refine"] == "4" and flags["--refine_algs"] == "neuroshard_plus"
    assert flags["--refine_repeats"] == "2" and flags["--device"] == "cpu"
    # candidates measured as the evaluation measures plans
    assert flags["--warmup"] == "3" and flags["--iters"] == "7"
    assert "--refine" not in planning("--preset", "study", "--refine", "0")
    with pytest.raises(ConfigError, match="--refine"):
        steps_of("--preset", "study", "--refine", "-1")


def test_prediction_powered_verdicts_plan_unmeasured_tasks_as_the_measured_are_planned():
    from neuroshard.pipeline.steps import UNMEASURED_SEED

    study = steps_of("--preset", "study")
    gen = flags_of(study["2b:paper"])
    assert gen["--data_size"] == "440" and gen["--seed"] == str(UNMEASURED_SEED) != "0"
    assert gen["--out_dir"] == str(Path("r") / "tasks_unmeasured")
    measured, unmeasured = (flags_of(study[k]) for k in ("5c:paper", "5d:paper"))
    # the same planning (models, calibration, algorithms, policies, seed) on the other tasks
    differ = {k for k in measured.keys() | unmeasured.keys() if measured.get(k) != unmeasured.get(k)}
    assert differ == {"--task_path", "--max_tasks", "--out_dir"}
    assert unmeasured["--task_path"] == gen["--out_dir"] + "/data.txt" and unmeasured["--max_tasks"] == "440"
    assert study["5d:paper"].late is not None  # NeuroShard+'s lambda chosen on the training tasks, as 5c's
    hw = study["6b:paper"].argv
    assert hw[hw.index("--unmeasured_plans") + 1] == str(Path("r") / "sim_unmeasured" / "plans.json")
    assert hw[hw.index("--unmeasured_task_path") + 1] == unmeasured["--task_path"]
    # refined plans are chosen by measurement, which the unmeasured tasks do not get: plain verdicts
    refined = steps_of("--preset", "study", "--refine", "2")
    assert "2b:paper" not in refined and "5d:paper" not in refined
    assert "--unmeasured_plans" not in refined["6b:paper"].argv
    assert "5d:paper" in steps_of("--preset", "quick") and "5d:paper" not in steps_of("--preset", "tiny")


def test_task_seed_moves_every_task_set_and_nothing_else():
    """--task_seed 5: each gen_tasks step draws with its set's seed + 5 (evaluation 0, training 1, unmeasured
    1000, anchors 2000), the new set's as the first dataset's; every other step's command is unchanged."""
    base = steps_of("--preset", "study", "--torchrec_train")
    fresh = steps_of("--preset", "study", "--torchrec_train", "--task_seed", "5")
    want = {"2a:paper": "5", "2b:paper": "1005", "2c:paper": "6", "2a:oversize": "5", "2d:oversize": "2005",
            "2d:paper": "2005", "2c:oversize": "6"}
    assert {k: flags_of(fresh[k])["--seed"] for k in want} == want
    assert {k: flags_of(base[k])["--seed"] for k in want} == {"2a:paper": "0", "2b:paper": "1000", "2c:paper": "1",
                                                              "2a:oversize": "0", "2d:oversize": "2000",
                                                              "2d:paper": "2000", "2c:oversize": "1"}
    assert all(fresh[k].argv == base[k].argv for k in base if k not in want) and fresh.keys() == base.keys()
    with pytest.raises(ConfigError, match="--task_seed"):
        steps_of("--preset", "quick", "--task_seed", "-1")


def test_the_evaluations_round_anchors_are_plans_of_tasks_nothing_trained_on():
    from neuroshard.pipeline.steps import ANCHOR_TASK_SEED, EVAL_TASK_SEED, TRAIN_TASK_SEED, UNMEASURED_SEED

    study = steps_of("--preset", "study")
    gen = flags_of(study["2d:paper"])
    assert gen["--data_size"] == "24" and gen["--out_dir"] == str(Path("r") / "anchor_tasks")
    assert gen["--seed"] == str(ANCHOR_TASK_SEED) and ANCHOR_TASK_SEED not in (EVAL_TASK_SEED, TRAIN_TASK_SEED,
                                                                                UNMEASURED_SEED)
    assert flags_of(study["2d:oversize"])["--seed"] == gen["--seed"]  # the new set's anchor tasks: the same seed
    # planned as the evaluation's tasks are (models, calibration, algorithms, policies, NeuroShard+'s lambda)
    evaluated, anchored = flags_of(study["5c:paper"]), flags_of(study["5e:paper"])
    differ = {k for k in evaluated.keys() | anchored.keys() if evaluated.get(k) != anchored.get(k)}
    assert differ == {"--task_path", "--max_tasks", "--out_dir", "--quiet"} and study["5e:paper"].late is not None
    assert anchored["--task_path"] == gen["--out_dir"] + "/data.txt" and anchored["--max_tasks"] == "24"
    # and step 6b measures one plan of each in every round: no on-policy plan, which the models were refitted to
    hw = flags_of(study["6b:paper"])
    plans = Path("r") / "anchor_sim" / "plans.json"
    assert hw["--round_anchors"] == str(plans) and hw["--anchors_per_round"] == "24"
    assert plans in study["6b:paper"].inputs
    assert "--round_anchors" not in study["6a"].argv and "--round_anchors" not in study["5c:paper"].argv


def test_steps_are_numbered_in_the_order_they_run_and_each_script_is_a_step_script_at_the_root():
    from neuroshard.pipeline.steps import STEPS

    keys = [s.key for s in STEPS]
    assert keys == sorted(keys, key=lambda k: (int(k[0]), k[1:])) and len(set(keys)) == len(keys)
    assert keys[:5] == ["1", "2a", "2b", "2c", "2d"] and all(len(k) <= 2 for k in keys)  # no suffix digits
    root_scripts = {p.name for p in ROOT.glob("*.py")} - {"setup.py"}
    # the rule of where scripts live: every step script at the root, every root script a step, tools/ none but
    # the original release's two paths of steps 1 and 2, which run the root script's own main
    assert {s.script for s in STEPS} == root_scripts
    assert {s.script for s in STEPS} & {p.name for p in (ROOT / "tools").glob("*.py")} == UPSTREAM_TOOL_PATHS
    for name in UPSTREAM_TOOL_PATHS:
        main = runpy.run_path(str(ROOT / "tools" / name), run_name="path_check")["main"]
        assert Path(main.__code__.co_filename).resolve() == ROOT / name


def test_every_step_command_parses_with_its_script():
    """Each step's flags are flags of its script (the pipeline cannot drift from the scripts it runs), with
    hosts too; the late flag too (NeuroShard+'s lambda, known once the on-policy step ran)."""
    from tests.test_flags import parsed_options

    steps = steps_of("--preset", "tiny", "--torchrec_train")
    hosts = steps_of("--preset", "tiny", "--torchrec_train", "--ndevices", "4", "--local_world_size", "2")
    world = {k: s for k, s in steps_of("--preset", "study").items() if k[:2] in ("3f", "3g", "3h", "4k", "4l")}
    options = parsed_options(sorted({ROOT / s.argv[0] for s in [*steps.values(), *world.values()]}))
    for step in [*steps.values(), *hosts.values(), *world.values()]:
        unknown = [a for a in step.argv if a.startswith("--") and a not in options[step.argv[0]]]
        assert not unknown, f"step {step.key}: {step.argv[0]} has no {unknown}"
    assert all("--plus_lambda" in options[s.argv[0]] for s in steps.values() if s.late is not None)


def test_hosts_reach_the_steps_that_time_plan_or_run_on_them():
    """--local_world_size: the collectives over each host's group (3e), every step that plans or measures plans
    on the paper runtime or trains them in TorchRec, and TorchRec's runtime data (7a: its random plans have
    table-row-wise tables on the hosts); not the task generator, the other collections nor the models'
    training."""
    out = Path("results/quick")
    steps = steps_of("--preset", "quick", "--local_world_size", "2", "--torchrec_train", out=out)
    assert {k for k, s in steps.items() if "--local_world_size" in s.argv} == {
        "3e", "4d:paper", "4d:oversize", "5c:paper", "5d:paper", "5e:oversize", "5e:paper", "6a", "6b:paper", "6c",
        "5c:oversize", "6b:oversize", "7a:paper", "7a:oversize", "7c:oversize", "7e:paper", "7f:paper", "7e:oversize",
        "7f:oversize"}
    assert flags_of(steps["3e"])["--local_world_size"] == "2"
    assert flags_of(steps["6b:paper"])["--local_world_size"] == "2"
    # one host, the default, is no flag at all: the run's commands (and so its stamps) are as before
    assert not any("--local_world_size" in s.argv for s in steps_of("--preset", "quick", "--torchrec_train",
                                                                     out=out).values())


def test_only_takes_steps_and_phases_and_list_prints_the_table(capsys):
    from neuroshard.pipeline.run import main, parse_args, run_of, select
    from neuroshard.pipeline.steps import build_steps

    steps = build_steps(run_of(parse_args(["--preset", "quick"]), Path("r")))
    assert select(steps, "5c,6b") == {"5c:paper", "5c:oversize", "6b:paper", "6b:oversize"}
    assert select(steps, "6b:oversize") == {"6b:oversize"} and select(steps, "1") == {"1:paper", "1:oversize"}
    assert select(steps, "5") == {"5a", "5b", "5c:paper", "5c:oversize", "5d:paper", "5e:paper", "5e:oversize"}
    assert select(steps, "oversize,3c") == {s.name for s in steps if s.task_set == "oversize"} | {"3c"}
    trec = build_steps(run_of(parse_args(["--preset", "quick", "--torchrec_train"]), Path("r")))
    assert select(trec, "7") == {"7a:paper", "7a:oversize", "7c:oversize", "7b", "7d", "7e:paper", "7f:paper",
                                 "7g:paper", "7e:oversize", "7f:oversize", "7g:oversize"}
    assert select(trec, "7a:oversize") == {"7a:oversize"}
    with pytest.raises(ConfigError, match="unknown step 9"):
        select(steps, "9")
    assert main(["--preset", "tiny", "--list", "--out_dir", "r"]) == 0
    listed = capsys.readouterr().out
    assert "2c:paper  training tasks" in listed and "gen_tasks.py: r/dataset -> r/train_tasks/data.txt" in listed
    # the table of steps x sets: the tiny preset has the paper's tasks only; a step run once says so
    assert listed.splitlines()[0].split() == ["step", "paper"] and "3c    comm cost data" in listed
    assert main(["--preset", "quick", "--list", "--out_dir", "r"]) == 0
    table = capsys.readouterr().out.split("\n\n")[0].splitlines()
    assert table[0].split() == ["step", "paper", "oversize"]
    assert table[1].split() == ["1", "dataset", "x", "x"] and ["2b"] == table[3].split()[:1]
    assert table[3].split()[-2:] == ["x", "-"] and [r.split()[-1] for r in table if r.startswith("3c")] == ["once"]


def test_only_takes_the_keys_of_before_the_task_sets_with_a_warning(capsys):
    from neuroshard.pipeline.run import parse_args, run_of, select
    from neuroshard.pipeline.steps import build_steps

    steps = build_steps(run_of(parse_args(["--preset", "quick", "--torchrec_train"]), Path("r")))
    assert select(steps, "6h,4d2") == {"6b:oversize", "4d:oversize"}
    err = capsys.readouterr().err
    assert "warning: --only 6h is deprecated; use 6b:oversize" in err and "use 4d:oversize" in err
    # an old key that names another step now keeps its new meaning, with a note of the old one
    assert select(steps, "7d") == {"7d"}
    assert "before the task sets, 7d was what is now 7f:paper" in capsys.readouterr().err
