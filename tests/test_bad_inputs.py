"""Bad inputs to every script and tool, one row per case: each must exit non-zero with a one-line
error (no traceback), or, where the documented behaviour is to go on, say so and be right.

The cases run each script's own `main` through `cli.run_main`, in-process (what a user sees: the exit
code and stderr); a few at the end also run as real subprocesses.
"""

import json
import os
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
import torch

from neuroshard.data.split import table_halves
from neuroshard.data.synthetic import SyntheticSpec, generate_synthetic
from neuroshard.eval.planning import plan_task
from neuroshard.formats.cost_data import CommSample, write_comm_data, write_compute_data
from neuroshard.formats.dataset import write_dataset, write_table_configs
from neuroshard.formats.plan_file import write_plans
from neuroshard.formats.task_file import write_tasks
from neuroshard.formats.user_tables import read_user_tables
from neuroshard.measure.compute_collect import ShardSampler, augment_table_configs
from neuroshard.planner.costs.cost_models import CostModels, save_model
from neuroshard.planner.costs.nets import linear_comm_model, linear_compute_model
from neuroshard.planner.costs.runtime_model import FEATURES, TorchRecRuntimeModel
from neuroshard.planner.user_plan import shard_user_tables, user_plan_record
from neuroshard.problem import Problem
from neuroshard.types.costs import CostBreakdown
from neuroshard.types.plan import Plan, Spread
from neuroshard.types.records import PlanRecord
from neuroshard.types.tables import TableConfig, Task
from tests.scripts import ROOT, run_script


def _models(n: int) -> CostModels:
    return CostModels(linear_compute_model(0.01, 0.5),
                      linear_comm_model("fw", n, np.hstack([0.02 * np.eye(n), 0.5 * np.eye(n)]), np.full(n, 0.1)),
                      linear_comm_model("bw", n, 0.02 * np.eye(n), np.full(n, 0.1)))


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    """A workspace of good and bad inputs; paths relative to it."""
    d = tmp_path_factory.mktemp("bad")
    configs, _, idx, off = generate_synthetic(SyntheticSpec(num_tables=6, batch_size=64, max_rows=5000),
                                              progress=False)
    write_dataset(d / "ds", configs, idx, off)
    tasks = [Task((0, 1, 2), (16, 8, 32)), Task((3, 4), (8, 16))]
    write_tasks(d / "tasks.txt", tasks)
    (d / "empty.txt").write_text("\n")
    write_tasks(d / "tasks_ids.txt", [Task((0, 99), (8, 8))])
    write_tasks(d / "tasks_other.txt", [Task((5, 4, 3, 2), (8, 8, 8, 8)), Task((3, 4), (8, 16))])
    # table configs with a NaN, an infinite and a negative statistic
    for name, field, value in (("nan_pf", "pooling_factor", float("nan")), ("inf_pf", "pooling_factor",
                                                                              float("inf")),
                               ("neg_bin", "bin_3", -0.5)):
        (d / name).mkdir()
        raw = json.loads((d / "ds" / "table_configs.json").read_text())
        raw[1][field] = value
        (d / name / "table_configs.json").write_text(json.dumps(raw))
        (d / name / "data.pt").write_bytes((d / "ds" / "data.pt").read_bytes())
    # lookups beyond a table's rows: table 2 claims 100 rows
    (d / "ds_idx").mkdir()
    raw = json.loads((d / "ds" / "table_configs.json").read_text())
    raw[2]["row"] = 100
    (d / "ds_idx" / "table_configs.json").write_text(json.dumps(raw))
    (d / "ds_idx" / "data.pt").write_bytes((d / "ds" / "data.pt").read_bytes())
    # models for 2 devices, and broken checkpoints
    m = _models(2)
    save_model(m.compute, d / "compute.pt")
    save_model(m.fw, d / "comm_2_fw.pt")
    save_model(m.bw, d / "comm_2_bw.pt")
    save_model(_models(3).fw, d / "comm_3_fw.pt")
    (d / "text.pt").write_text("not a checkpoint\n")
    nan = linear_compute_model(0.01, 0.5)
    with torch.no_grad():
        nan.head[2].weight[0, 0] = float("nan")
    save_model(nan, d / "nan.pt")
    ck = torch.load(d / "compute.pt", weights_only=True)
    del ck["state_dict"]["feat_mean"]
    torch.save(ck, d / "missing_key.pt")
    ck = torch.load(d / "compute.pt", weights_only=True)
    ck["config"]["num_features"] = 7
    torch.save(ck, d / "wrong_features.pt")
    ck = torch.load(d / "comm_2_fw.pt", weights_only=True)
    ck["config"]["ndevices"] = 3
    torch.save(ck, d / "wrong_ndevices.pt")
    # cost data: good, negative cost, negative comm time
    aug = [c.with_dim(dim) for dim in (16, 8, 4) for c in configs]
    rng = np.random.default_rng(0)
    samples = [(tuple(int(i) for i in rng.integers(0, len(aug), size=3)), float(rng.uniform(1, 5)))
               for _ in range(40)]
    write_compute_data(d / "cdata", aug, samples)
    write_compute_data(d / "cdata_neg", aug, samples[:5] + [((0, 1), -2.0)])
    write_compute_data(d / "cdata_few", aug, samples[:2])
    write_compute_data(d / "cdata_wall", aug, samples[:5])  # timed on the wall clock, cdata on no stated one
    (d / "cdata_wall" / "config.json").write_text(json.dumps({"clock": "wall"}))
    comm = [CommSample([8, 16], [0.0, 1.0], [1.0, 2.0], [0.5, 0.7]) for _ in range(10)]
    write_comm_data(d / "mdata", comm)
    write_comm_data(d / "mdata_neg", comm + [CommSample([8, 16], [0.0, 1.0], [1.0, -2.0], [0.5, 0.7])])
    # plan files for eval.py --plans
    models = _models(2)
    recs = [plan_task(t, tasks[t].tables(configs), alg, Problem(2, 1.0), models) for t in range(2)
            for alg in ("neuroshard", "dim_greedy")]
    write_plans(d / "plans.json", recs)
    write_plans(d / "plans_empty.json", [])
    write_plans(d / "plans_dup.json", recs + recs[:1])
    write_plans(d / "plans_beyond.json", recs + [PlanRecord(5, "dim_greedy", plan=recs[0].plan)])
    raw = json.loads((d / "plans.json").read_text())
    (d / "plans_noalg.json").write_text(json.dumps([{k: v for k, v in raw[0].items() if k != "alg"}]))
    (d / "plans_null.json").write_text(json.dumps([{"task": 0, "alg": "x", "plan": None}]))
    spread = replace(recs[0], plan=Plan((), ((0, 2), ()), (Spread(1, "row_wise", (0, 1)),)), estimate=None)
    write_plans(d / "plans_spread.json", [spread])
    # issue 52: measured results (a NaN in one), a TorchRec runtime model and its results
    measured = [replace(r, measured=CostBreakdown([1.0, 1.2], [0.1, 0.1], [0.2, 0.2]), repeat_costs=[1.3, 1.3])
                for r in recs]
    write_plans(d / "results.json", measured)
    raw_m = json.loads((d / "results.json").read_text())
    raw_m[1]["measured"]["compute"][0] = float("nan")
    (d / "results_nan.json").write_text(json.dumps(raw_m))
    raw_m = json.loads((d / "results.json").read_text())
    raw_m[2]["repeat_costs"] = [1.0, float("inf")]
    (d / "results_inf.json").write_text(json.dumps(raw_m))
    coef = (1.0,) * len(FEATURES)
    TorchRecRuntimeModel(2, 64, coef, source={"samples": str(d / "trres.json"),
                                              "task_path": str(d / "tasks.txt")}).save(d / "trmodel.json")
    (d / "trres_empty.json").write_text("[]\n")
    raw_t = TorchRecRuntimeModel(2, 64, coef).to_json()
    (d / "trmodel_zero.json").write_text(json.dumps({**raw_t, "coef": [0.0] * len(coef)}))
    from neuroshard.planner.costs.collective_model import CollectiveFit, CollectiveModel

    CollectiveModel(4, {"all_reduce": CollectiveFit("linear", [0.1, 1.0], 8)}).save(d / "collectives_4.json")
    # issue 24: plans against other tables (same dims, other dims), old plans files without the task's identity
    write_tasks(d / "tasks_same_dims.txt", [Task((3, 4, 5), (16, 8, 32)), Task((0, 1), (8, 16))])
    # three tables of 0.6 device each on 2 devices: each fits, all fit by size, no placement fits
    write_tasks(d / "tasks_pack.txt", [Task((0, 0, 0), (16, 16, 16))])
    write_tasks(d / "tasks_other_dims.txt", [Task((0, 1, 2), (8, 8, 8)), Task((3, 4), (8, 16))])
    (d / "plans_old.json").write_text(json.dumps([{k: v for k, v in r.items() if k not in ("table_ids", "dims")}
                                                  for r in raw]))
    (d / "plans_bad_ids.json").write_text(json.dumps([{**raw[0], "table_ids": [0, "x", 2]}]))
    user = "name,rows,dim,pooling_factor\na,1000,16,2\nb,1000,8,2\nc,1000,32,2\n"
    (d / "user.csv").write_text(user)
    (d / "user_dims.csv").write_text(user.replace("b,1000,8,2", "b,1000,16,2"))
    (d / "user_names.csv").write_text(user.replace("b,1000,8,2", "bb,1000,8,2"))
    res = shard_user_tables(read_user_tables(d / "user.csv", warn=False).configs, Problem(2, 1.0), models=models,
                            alg="dim_greedy")
    write_plans(d / "user_plan.json", [user_plan_record(res, ["a", "b", "c"])])
    # learned policies: good, a weight deleted, a NaN weight, a NaN feature statistic, a bad setting
    from neuroshard.learned import autoshard as an
    from neuroshard.learned import dreamshard as dn

    torch.manual_seed(0)
    dn.DreamShardPolicy(dn.DreamShardNet(), {"ndevices": 2, "max_mem": 1.0}).save(d / "ds_policy.pt")
    ck = torch.load(d / "ds_policy.pt", weights_only=True)
    del ck["state_dict"][next(iter(ck["state_dict"]))]
    torch.save(ck, d / "ds_policy_missing.pt")
    ck = torch.load(d / "ds_policy.pt", weights_only=True)
    next(iter(ck["state_dict"].values())).view(-1)[0] = float("nan")
    torch.save(ck, d / "ds_policy_nan.pt")
    ck = torch.load(d / "ds_policy.pt", weights_only=True)
    ck["meta"]["ndevices"] = "two"
    torch.save(ck, d / "ds_policy_meta.pt")
    ck = torch.load(d / "ds_policy.pt", weights_only=True)
    key = next(iter(ck["state_dict"]))
    ck["state_dict"][key] = torch.zeros(3, 3, 3)
    torch.save(ck, d / "ds_policy_shape.pt")
    an.AutoShardPolicy(an.AutoShardNet(), {"ndevices": 2, "max_mem": 1.0, "feature_mean": [float("nan")] * 3,
                                           "feature_std": [1.0] * 3}).save(d / "as_policy_nan_meta.pt")
    # held-out check data (half-share compute data): good, no seed, a max_dim of another collection
    base = [TableConfig(int(10 ** rng.uniform(3, 5)), float(rng.uniform(1, 20)), (1.0,) + (0.0,) * 16)
            for _ in range(12)]
    aug16 = augment_table_configs(base, 16)
    sampler = ShardSampler(aug16, 5, 1.0, seed=0, halves=table_halves(12, seed=0), half_share=0.67)
    hs = [(ids, 0.5 + sum(aug16[i].dim * aug16[i].pooling_factor for i in ids) / 100)
          for ids in (sampler.sample() for _ in range(150))]
    for name, run_config in (("hdata", {"max_dim": 16, "seed": 0, "half_share": 0.67}),
                             ("hdata_noseed", {"max_dim": 16, "half_share": 0.67}),
                             ("hdata_maxdim", {"max_dim": 32, "seed": 0, "half_share": 0.67})):
        write_compute_data(d / name, aug16, hs)
        (d / name / "config.json").write_text(json.dumps(run_config))
    os.mkdir(d / "a_dir")
    (d / "a_file").write_text("x")
    # issue 85: prediction-powered verdicts whose unmeasured tasks gen_tasks.py drew with the measured tasks' seed
    # (0 both: the first two unmeasured tasks are the measured ones), each set planned by eval_simulator.py
    for name, size in (("ppi_measured", 2), ("ppi_same_seed", 3)):
        gen = ["--data_dir", "ds", "--out_dir", f"{name}/tasks", "--data_size", str(size), "--T_range", "2,3",
               "--ndevices", "2", "--max_mem", "1", "--max_dim", "16", "--seed", "0"]
        assert run_script("gen_tasks.py", gen, d).returncode == 0
        sim = _replace(EVAL_INPUTS, "--task_path", f"{name}/tasks/data.txt") + [
            "--alg", "dim_greedy", "--out_dir", f"{name}/sim", "--quiet", "--no_progress"]
        assert run_script("eval_simulator.py", sim, d).returncode == 0
    return d


EVAL_INPUTS = ["--data_dir", "ds", "--task_path", "tasks.txt", "--compute_model", "compute.pt",
               "--fw_comm_model", "comm_2_fw.pt", "--bw_comm_model", "comm_2_bw.pt", "--ndevices", "2",
               "--max_mem", "1"]
SIM = EVAL_INPUTS + ["--alg", "all", "--no_progress", "--quiet"]
HW = EVAL_INPUTS + ["--device", "cpu", "--warmup", "1", "--iters", "1", "--out_dir", "hw", "--quiet",
                    "--no_progress"]
TREC = ["--data_dir", "ds", "--task_path", "tasks.txt", "--plans", "plans.json", "--ndevices", "2", "--device", "cpu",
        "--out_dir", "trec", "--quiet", "--no_progress"]
COMPUTE = ["--dataset_dir", "ds", "--out_dir", "cout", "--data_size", "5", "--max_mem", "0.01", "--max_dim", "16",
           "--device", "cpu", "--no_progress"]
COMM = ["--device", "cpu", "--ndevices", "2", "--out_dir", "mout", "--data_size", "2", "--batch_size", "8",
        "--no_progress"]
TRAIN_C = ["--data_dir", "cdata", "--out_path", "m/compute.pt", "--epochs", "2"]
TRAIN_D = ["--data_dir", "ds", "--task_path", "tasks.txt", "--compute_model", "compute.pt", "--fw_comm_model",
           "comm_2_fw.pt", "--bw_comm_model", "comm_2_bw.pt", "--ndevices", "2", "--max_mem", "1", "--out_path",
           "pol/dreamshard.pt", "--num_iterations", "1", "--bench_steps", "2", "--bench_training_steps", "2",
           "--rl_num_batches", "1", "--rl_batch_size", "2", "--no_progress"]
EXPORT = ["--plans", "plans.json", "--task", "0", "--alg", "neuroshard", "--data_dir", "ds", "--task_path",
          "tasks.txt", "--out", "tr/plan.pt", "--torchrec_device", "cpu"]
HELD = ["--data_dir", "hdata", "--epochs", "2", "--no_progress"]
CAL = ["--data_dir", "ds", "--task_path", "tasks.txt", "--results", "results.json", "--models", ".",
       "--ndevices", "2", "--max_mem", "1"]
MERR = ["--data_dir", "ds", "--task_path", "tasks.txt", "--results", "results.json", "--model_set", "a=.",
        "--ndevices", "2", "--max_mem", "1", "--out_path", "merr.json"]
TRCHECK = EVAL_INPUTS[:-2] + ["--model", "trmodel.json", "--check_results", "trres.json", "--check_task_path",
                              "tasks.txt", "--out_path", "trcheck.json"]
TRAIN_M = ["--data_dir", "mdata", "--fw_out_path", "m/fw.pt", "--bw_out_path", "m/bw.pt", "--epochs", "2"]


def _replace(args, flag, value):
    args = list(args)
    args[args.index(flag) + 1] = value
    return args


# (id, script, argv, expected fragment of the last stderr line); exit code must be non-zero
CASES = [
    # ---- gen_dlrm_data.py
    ("gen num_tables 0", "gen_dlrm_data.py", ["--synthetic", "--num_tables", "0", "--out_dir", "o"],
     "--num_tables: must be >= 1"),
    ("gen batch 0", "gen_dlrm_data.py", ["--synthetic", "--batch_size", "0", "--out_dir", "o"],
     "--batch_size: must be >= 1"),
    ("gen max_rows 50", "gen_dlrm_data.py", ["--synthetic", "--max_rows", "50", "--out_dir", "o"],
     "--max_rows: must be >= 100"),
    ("gen missing file", "gen_dlrm_data.py", ["--data", "nope.pt", "--out_dir", "o"], "nope.pt: file not found"),
    ("gen text file", "gen_dlrm_data.py", ["--data", "empty.txt", "--out_dir", "o"], "cannot load torch file"),
    ("gen no source", "gen_dlrm_data.py", ["--out_dir", "o"], "one of the arguments --data --synthetic"),
    ("gen bad int", "gen_dlrm_data.py", ["--synthetic", "--num_tables", "x"], "invalid int value: 'x'"),
    ("gen large rows below max_rows", "gen_dlrm_data.py",
     ["--synthetic", "--large_tables", "2", "--large_rows", "5000", "--out_dir", "o"], "--large_rows: must be >="),
    ("gen hot tables negative", "gen_dlrm_data.py", ["--synthetic", "--hot_tables", "-1", "--out_dir", "o"],
     "--hot_tables: must be >= 0"),
    # ---- tools/dataset_stats.py
    ("stats missing dir", "tools/dataset_stats.py", ["nowhere"], "nowhere: directory not found"),
    ("stats nan config", "tools/dataset_stats.py", ["nan_pf"], "pooling_factor must be a finite number >= 0"),
    ("stats missing reference", "tools/dataset_stats.py", ["ds", "--published", "nope.txt"], "nope.txt"),
    ("stats malformed reference", "tools/dataset_stats.py", ["ds", "--published", "tasks.txt"],
     "expected 'Locality stats after processing"),
    ("stats reference block", "tools/dataset_stats.py",
     ["ds", "--published", str(ROOT / "reference" / "dlrm_datasets_2021_locality_stats.txt"), "--published_block",
      "99"], "block 99 out of range"),
    ("stats json to dir", "tools/dataset_stats.py", ["ds", "--json", "a_dir"], "a_dir"),
    # ---- gen_tasks.py
    ("tasks data_size 0", "gen_tasks.py", ["--data_dir", "ds", "--data_size", "0", "--out_dir", "t"],
     "--data_size: must be >= 1"),
    ("tasks oversize negative", "gen_tasks.py", ["--data_dir", "ds", "--oversize", "-1", "--out_dir", "t"],
     "--oversize: must be >= 0"),
    ("tasks oversize without large tables", "gen_tasks.py",
     ["--data_dir", "ds", "--oversize", "1", "--max_tries", "5", "--out_dir", "t"], "--large_tables/--hot_tables"),
    ("tasks hot_min_pooling 0", "gen_tasks.py", ["--data_dir", "ds", "--hot_min_pooling", "0", "--out_dir", "t"],
     "--hot_min_pooling: must be > 0"),
    ("tasks T_range reversed", "gen_tasks.py", ["--data_dir", "ds", "--T_range", "5,2", "--out_dir", "t"],
     "--T_range: lo 5 > hi 2"),
    ("tasks T_range text", "gen_tasks.py", ["--data_dir", "ds", "--T_range", "a,b", "--out_dir", "t"],
     "--T_range: expected 'lo,hi'"),
    ("tasks T_range 0", "gen_tasks.py", ["--data_dir", "ds", "--T_range", "0,3", "--out_dir", "t"],
     "--T_range: must be >= 1, got 0"),
    ("tasks max_mem 0", "gen_tasks.py", ["--data_dir", "ds", "--max_mem", "0", "--out_dir", "t"],
     "--max_mem: must be > 0"),
    ("tasks max_mem nan", "gen_tasks.py", ["--data_dir", "ds", "--max_mem", "nan", "--out_dir", "t"],
     "--max_mem: expected a finite number"),
    ("tasks max_mem inf", "gen_tasks.py", ["--data_dir", "ds", "--max_mem", "inf", "--out_dir", "t"],
     "--max_mem: expected a finite number"),
    ("tasks ndevices 0", "gen_tasks.py", ["--data_dir", "ds", "--ndevices", "0", "--out_dir", "t"],
     "--ndevices: must be >= 1"),
    ("tasks max_dim 48", "gen_tasks.py", ["--data_dir", "ds", "--max_dim", "48", "--out_dir", "t"],
     "--max_dim"),
    ("tasks max_tries 0", "gen_tasks.py", ["--data_dir", "ds", "--max_tries", "0", "--out_dir", "t"],
     "--max_tries: must be >= 1"),
    ("tasks missing data", "gen_tasks.py", ["--data_dir", "nowhere", "--out_dir", "t"],
     "table_configs.json: file not found"),
    ("tasks nan config", "gen_tasks.py", ["--data_dir", "nan_pf", "--out_dir", "t"], "table 1: pooling_factor"),
    ("tasks inf config", "gen_tasks.py", ["--data_dir", "inf_pf", "--out_dir", "t"], "table 1: pooling_factor"),
    ("tasks negative bin", "gen_tasks.py", ["--data_dir", "neg_bin", "--out_dir", "t"],
     "table 1: bin_3 must be a fraction in [0, 1]"),
    ("tasks too big", "gen_tasks.py", ["--data_dir", "ds", "--max_mem", "1e-9", "--out_dir", "t"],
     "fits after 1000 tries"),
    # ---- collect_compute_cost_data.py
    ("compute data_size -1", "collect_compute_cost_data.py", _replace(COMPUTE, "--data_size", "-1"),
     "--data_size: must be >= 0"),
    ("compute max_tables 0", "collect_compute_cost_data.py", COMPUTE + ["--max_tables", "0"],
     "--max_tables: must be >= 1"),
    ("compute max_mem 0", "collect_compute_cost_data.py", _replace(COMPUTE, "--max_mem", "0"),
     "--max_mem: must be > 0"),
    ("compute max_mem nan", "collect_compute_cost_data.py", _replace(COMPUTE, "--max_mem", "nan"),
     "--max_mem: expected a finite number"),
    ("compute max_dim 48", "collect_compute_cost_data.py", _replace(COMPUTE, "--max_dim", "48"), "--max_dim"),
    ("compute workers 0", "collect_compute_cost_data.py", COMPUTE + ["--num_workers", "0"],
     "--num_workers must be >= 1"),
    ("compute warmup -1", "collect_compute_cost_data.py", COMPUTE + ["--warmup", "-1"], "--warmup: must be >= 0"),
    ("compute iters 0", "collect_compute_cost_data.py", COMPUTE + ["--iters", "0"], "--iters: must be >= 1"),
    ("compute gpus without cuda", "collect_compute_cost_data.py", COMPUTE[:-3] + ["--gpu_devices", "0,1"],
     "--gpu_devices: GPUs 0,1 were named"),
    ("compute gpus text", "collect_compute_cost_data.py", COMPUTE + ["--gpu_devices", "a"],
     "--gpu_devices: expected a comma list of GPU ids"),
    ("compute device cuda", "collect_compute_cost_data.py", _replace(COMPUTE, "--device", "cuda"),
     "--device cuda: no CUDA device is visible"),
    ("compute missing dataset", "collect_compute_cost_data.py", _replace(COMPUTE, "--dataset_dir", "nowhere"),
     "nowhere: directory not found"),
    ("compute bad indices", "collect_compute_cost_data.py", _replace(COMPUTE, "--dataset_dir", "ds_idx"),
     "data.pt: table 2: index"),
    ("compute out_dir file", "collect_compute_cost_data.py", _replace(COMPUTE, "--out_dir", "a_file"), "a_file"),
    # ---- compute_noise_floor.py
    ("noise num_samples 0", "compute_noise_floor.py", ["--data_dir", "cdata", "--dataset_dir", "ds",
                                                             "--num_samples", "0", "--device", "cpu"],
     "--num_samples: must be >= 1"),
    ("noise num_samples -3", "compute_noise_floor.py", ["--data_dir", "cdata", "--dataset_dir", "ds",
                                                              "--num_samples", "-3", "--device", "cpu"],
     "--num_samples: must be >= 1"),
    ("noise repeats 0", "compute_noise_floor.py", ["--data_dir", "cdata", "--dataset_dir", "ds",
                                                         "--repeats", "0", "--device", "cpu"], "--repeats: must be >= 1"),
    ("noise missing data", "compute_noise_floor.py", ["--data_dir", "nowhere", "--dataset_dir", "ds",
                                                            "--device", "cpu"], "nowhere: directory not found"),
    ("noise out_path a directory", "compute_noise_floor.py", ["--data_dir", "cdata", "--dataset_dir", "ds",
                                                                    "--out_path", "cdata", "--device", "cpu"],
     "--out_path: cdata is a directory"),
    ("noise gpus without cuda", "compute_noise_floor.py", ["--data_dir", "cdata", "--dataset_dir", "ds",
                                                                 "--gpu_devices", "0"], "--gpu_devices: GPUs 0"),
    # ---- collect_comm_cost_data.py
    ("comm ndevices 0", "collect_comm_cost_data.py", _replace(COMM, "--ndevices", "0"),
     "--ndevices: need at least 1 rank, got 0"),
    ("comm ndevices -1", "collect_comm_cost_data.py", _replace(COMM, "--ndevices", "-1"),
     "--ndevices: need at least 1 rank"),
    ("comm batch not multiple", "collect_comm_cost_data.py", _replace(COMM, "--batch_size", "9"),
     "--batch_size: batch size 9 must be a multiple"),
    ("comm T_range", "collect_comm_cost_data.py", COMM + ["--T_range", "5,2"], "--T_range: lo 5 > hi 2"),
    ("comm sleep_range negative", "collect_comm_cost_data.py", COMM + ["--sleep_range=-1,2"],
     "--sleep_range: must be >= 0"),
    ("comm sleep_range nan", "collect_comm_cost_data.py", COMM + ["--sleep_range", "0,nan"],
     "--sleep_range: expected a finite number"),
    ("comm max_dim", "collect_comm_cost_data.py", COMM + ["--max_dim", "48"], "--max_dim"),
    ("comm iters 0", "collect_comm_cost_data.py", COMM + ["--iters", "0"], "--iters: must be >= 1"),
    ("comm timeout 0", "collect_comm_cost_data.py", COMM + ["--timeout", "0"], "--timeout: must be > 0"),
    ("comm timeout -5", "collect_comm_cost_data.py", COMM + ["--timeout", "-5"], "--timeout: must be > 0"),
    ("comm chunk 0", "collect_comm_cost_data.py", COMM + ["--chunk", "0"], "--chunk: must be >= 1"),
    ("comm data_size -1", "collect_comm_cost_data.py", _replace(COMM, "--data_size", "-1"),
     "--data_size: must be >= 0"),
    ("comm noise repeats 0", "collect_comm_cost_data.py",
     _replace(COMM, "--out_dir", "mdata") + ["--noise_floor", "3", "--noise_repeats", "0"],
     "--noise_repeats: must be >= 1"),
    ("comm noise_out a directory", "collect_comm_cost_data.py",
     _replace(COMM, "--out_dir", "mdata") + ["--noise_floor", "3", "--noise_out", "mdata"],
     "--noise_out: mdata is a directory"),
    ("comm noise -2", "collect_comm_cost_data.py", _replace(COMM, "--out_dir", "mdata") + ["--noise_floor", "-2"],
     "--noise_floor: must be >= 1"),
    ("comm gpus without cuda", "collect_comm_cost_data.py", ["--gpu_devices", "0,1", "--out_dir", "mout"],
     "--gpu_devices: GPUs 0,1 were named"),
    # ---- train_compute_cost_model.py
    ("train lr 0", "train_compute_cost_model.py", TRAIN_C + ["--lr", "0"], "--lr: must be > 0"),
    ("train lr nan", "train_compute_cost_model.py", TRAIN_C + ["--lr", "nan"], "--lr: expected a finite number"),
    ("train epochs 0", "train_compute_cost_model.py", _replace(TRAIN_C, "--epochs", "0"), "--epochs: must be >= 1"),
    ("train batch 0", "train_compute_cost_model.py", TRAIN_C + ["--batch_size", "0"], "--batch_size: must be >= 1"),
    ("train ratio 1.5", "train_compute_cost_model.py", TRAIN_C + ["--train_ratio", "1.5"],
     "--train_ratio: must be <= 1"),
    ("train ratios sum", "train_compute_cost_model.py", TRAIN_C + ["--train_ratio", "0.9", "--valid_ratio", "0.2"],
     "must leave a test split"),
    ("train num_samples 2", "train_compute_cost_model.py", TRAIN_C + ["--num_samples", "2"],
     "--num_samples: must be >= 3"),
    ("train patience 0", "train_compute_cost_model.py", TRAIN_C + ["--patience", "0"], "--patience: must be >= 1"),
    ("train out_path dir", "train_compute_cost_model.py", _replace(TRAIN_C, "--out_path", "a_dir"),
     "--out_path: " ),
    ("train out_path under file", "train_compute_cost_model.py", _replace(TRAIN_C, "--out_path", "a_file/m.pt"),
     "a_file is a file"),
    ("train missing data", "train_compute_cost_model.py", _replace(TRAIN_C, "--data_dir", "nowhere"),
     "nowhere: directory not found"),
    ("train extra missing", "train_compute_cost_model.py", TRAIN_C + ["--extra_data_dirs", "nowhere"],
     "nowhere: directory not found"),
    ("train extra empty entry", "train_compute_cost_model.py", TRAIN_C + ["--extra_data_dirs", "cdata_few,"],
     "--extra_data_dirs: expected a comma list of paths"),
    ("train extra timed apart", "train_compute_cost_model.py", TRAIN_C + ["--extra_data_dirs", "cdata_wall"],
     "config.json: timed on {'device': None, 'clock': 'wall'}"),
    ("train negative cost", "train_compute_cost_model.py", _replace(TRAIN_C, "--data_dir", "cdata_neg"),
     "negative cost_ms"),
    ("train too few", "train_compute_cost_model.py", _replace(TRAIN_C, "--data_dir", "cdata_few"),
     "need at least 3 samples"),
    ("train diverges", "train_compute_cost_model.py", TRAIN_C + ["--lr", "1e12", "--loss", "mse"],
     "training diverged"),
    # ---- train_comm_cost_model.py
    ("comm train negative time", "train_comm_cost_model.py", _replace(TRAIN_M, "--data_dir", "mdata_neg"),
     "negative fw -2.0"),
    ("comm train lr", "train_comm_cost_model.py", TRAIN_M + ["--lr", "-1"], "--lr: must be > 0"),
    ("comm train out dir", "train_comm_cost_model.py", _replace(TRAIN_M, "--fw_out_path", "a_dir"),
     "--fw_out_path: "),
    ("comm train diverges", "train_comm_cost_model.py", TRAIN_M + ["--lr", "1e12"], "training diverged"),
    # ---- eval_simulator.py
    ("sim ndevices 0", "eval_simulator.py", _replace(SIM, "--ndevices", "0"), "--ndevices: must be >= 1"),
    ("sim max_mem 0", "eval_simulator.py", _replace(SIM, "--max_mem", "0"), "--max_mem: must be > 0"),
    ("sim max_mem nan", "eval_simulator.py", _replace(SIM, "--max_mem", "nan"), "--max_mem: expected a finite"),
    ("sim max_mem inf", "eval_simulator.py", _replace(SIM, "--max_mem", "inf"), "--max_mem: expected a finite"),
    ("sim max_tasks 0", "eval_simulator.py", SIM + ["--max_tasks", "0"], "--max_tasks must be >= 1"),
    ("sim unknown alg", "eval_simulator.py", _replace(SIM, "--alg", "nope"), "--alg: unknown algorithm nope"),
    ("sim beam_k 0", "eval_simulator.py", SIM + ["--beam_k", "0"], "--beam_k: must be >= 1"),
    ("sim grid_min 0", "eval_simulator.py", SIM + ["--grid_min", "0"], "--grid_min: must be > 0"),
    ("sim grid_max < min", "eval_simulator.py", SIM + ["--grid_max", "0.5"], "--grid_max: must be >= --grid_min"),
    ("sim max_length -1", "eval_simulator.py", SIM + ["--max_length", "-1"], "--max_length: must be >= 0"),
    ("sim empty tasks", "eval_simulator.py", _replace(SIM, "--task_path", "empty.txt"), "no tasks in the file"),
    ("sim task id range", "eval_simulator.py", _replace(SIM, "--task_path", "tasks_ids.txt"),
     "table id 99 out of range"),
    ("sim nan config", "eval_simulator.py", _replace(SIM, "--data_dir", "nan_pf"), "table 1: pooling_factor"),
    ("sim text checkpoint", "eval_simulator.py", _replace(SIM, "--compute_model", "text.pt"),
     "text.pt: not a NeuroShard cost model checkpoint"),
    ("sim nan checkpoint", "eval_simulator.py", _replace(SIM, "--compute_model", "nan.pt"), "non-finite values"),
    ("sim missing key", "eval_simulator.py", _replace(SIM, "--compute_model", "missing_key.pt"),
     "missing 'feat_mean'"),
    ("sim wrong features", "eval_simulator.py", _replace(SIM, "--compute_model", "wrong_features.pt"),
     "malformed compute model checkpoint"),
    ("sim wrong ndevices", "eval_simulator.py", _replace(SIM, "--fw_comm_model", "wrong_ndevices.pt"),
     "malformed comm model checkpoint"),
    ("sim comm for 3", "eval_simulator.py", _replace(SIM, "--fw_comm_model", "comm_3_fw.pt"),
     "trained for ndevices=3, asked for 2"),
    ("sim compute as comm", "eval_simulator.py", _replace(SIM, "--fw_comm_model", "compute.pt"),
     "expected a comm cost model"),
    ("sim missing model", "eval_simulator.py", _replace(SIM, "--bw_comm_model", "nope.pt"),
     "nope.pt: model checkpoint not found"),
    ("sim model is dir", "eval_simulator.py", _replace(SIM, "--compute_model", "a_dir"), "is a directory"),
    # ---- eval.py
    ("hw ndevices 0", "eval.py", _replace(HW, "--ndevices", "0"), "--ndevices: need at least 1 rank, got 0"),
    ("hw gpus without cuda", "eval.py", HW + ["--gpu_devices", "0,1"], "--gpu_devices: GPUs 0,1 were named"),
    ("hw warmup -1", "eval.py", _replace(HW, "--warmup", "-1"), "--warmup: must be >= 0"),
    ("hw iters 0", "eval.py", _replace(HW, "--iters", "0"), "--iters: must be >= 1"),
    ("hw timeout 0", "eval.py", HW + ["--timeout", "0"], "--timeout: must be > 0"),
    ("hw max_mem -1", "eval.py", _replace(HW, "--max_mem", "-1"), "--max_mem: must be > 0"),
    ("hw fw_sleep", "eval.py", HW + ["--fw_sleep", "sometimes"], "invalid choice: 'sometimes'"),
    ("hw bad indices", "eval.py", _replace(HW, "--data_dir", "ds_idx"), "data.pt: table 2: index"),
    ("hw batch not multiple", "eval.py", _replace(HW, "--ndevices", "5"), "is not a multiple of the 5 ranks"),
    ("hw empty tasks", "eval.py", _replace(HW, "--task_path", "empty.txt"), "no tasks in the file"),
    ("hw plans empty", "eval.py", HW + ["--plans", "plans_empty.json"], "no plan records to measure"),
    ("hw plans duplicate", "eval.py", HW + ["--plans", "plans_dup.json"], "duplicates record 0"),
    ("hw plans beyond", "eval.py", HW + ["--plans", "plans_beyond.json"], "the task file tasks.txt has 2 tasks"),
    ("hw plans other tasks", "eval.py", _replace(HW, "--task_path", "tasks_other.txt") + ["--plans", "plans.json"],
     "do not match task 0 of tasks_other.txt"),
    ("hw plans no alg", "eval.py", HW + ["--plans", "plans_noalg.json"], '"alg" must be an algorithm name'),
    ("hw plans null", "eval.py", HW + ["--plans", "plans_null.json"], '"status" must be one of'),
    ("hw plans row-wise", "eval.py", HW + ["--plans", "plans_spread.json"],
     "table 1 is row_wise: the paper runtime's cost models price table-wise and column-wise shards only"),
    ("hw plans missing", "eval.py", HW + ["--plans", "nope.json"], "nope.json: file not found"),
    ("hw unmeasured tasks of the measured seed", "eval.py",
     _replace(HW, "--task_path", "ppi_measured/tasks/data.txt")
     + ["--alg", "dim_greedy", "--plans", "ppi_measured/sim/plans.json", "--unmeasured_plans",
        "ppi_same_seed/sim/plans.json", "--unmeasured_task_path", "ppi_same_seed/tasks/data.txt"],
     "error: ppi_same_seed/tasks/config.json: seed 0 is the measured tasks' seed: the same tasks"),
    ("hw plan_speed missing", "eval.py", HW + ["--plan_speed", "nowhere"],
     "nowhere/results.json: plan-speed file not found (--plan_speed"),
    ("hw node_rank 2 of 2", "eval.py", HW + ["--nnodes", "2", "--node_rank", "2", "--rdzv_endpoint",
                                             "127.0.0.1:29500"], "--node_rank: must be <= 1, got 2"),
    ("hw nnodes without endpoint", "eval.py", HW + ["--nnodes", "2"], "--rdzv_endpoint: needed with --nnodes 2"),
    ("hw bad endpoint", "eval.py", HW + ["--nnodes", "2", "--rdzv_endpoint", "host:99999"], "--rdzv_endpoint"),
    ("hw ranks do not fill nodes", "eval.py", HW + ["--nnodes", "2", "--nproc_per_node", "3", "--rdzv_endpoint",
                                                    "127.0.0.1:29500"], "2 ranks but --nproc_per_node 3 x --nnodes 2 makes 6"),
    # ---- collect_torchrec_cost_data.py
    ("trdata spread share 2", "collect_torchrec_cost_data.py", ["--data_dir", "ds", "--task_path", "tasks.txt",
                                                                "--spread_share", "2"],
     "--spread_share: must be <= 1, got 2"),
    ("trdata dp pooling 0", "collect_torchrec_cost_data.py", ["--data_dir", "ds", "--task_path", "tasks.txt",
                                                              "--dp_min_pooling", "0"],
     "--dp_min_pooling: must be > 0, got 0"),
    ("trdata runtime model missing", "collect_torchrec_cost_data.py", EVAL_INPUTS + ["--runtime", "torchrec",
                                                                                    "--runtime_model", "nowhere.json"],
     "nowhere.json"),
    # ---- eval_torchrec.py
    ("trec plans other ranks", "eval_torchrec.py", _replace(TREC, "--ndevices", "4"),
     "a plan for 2 devices, training on 4 ranks"),
    ("trec iters 0", "eval_torchrec.py", TREC + ["--iters", "0"], "--iters: must be >= 1"),
    ("trec repeats 0", "eval_torchrec.py", TREC + ["--repeats", "0"], "--repeats: must be >= 1"),
    ("trec over arch", "eval_torchrec.py", TREC + ["--over_arch", "64,8"], "--over_arch: expected at least two"),
    ("trec dense arch", "eval_torchrec.py", TREC + ["--dense_arch", "a,b"], "--dense_arch: expected a comma list"),
    ("trec batch too big", "eval_torchrec.py", TREC + ["--batch_size", "128"], "more than the dataset's 64 samples"),
    ("trec batch not multiple", "eval_torchrec.py", TREC + ["--batch_size", "33"], "not a multiple of the 2 ranks"),
    ("trec reference absent", "eval_torchrec.py", TREC + ["--alg", "dim_greedy"], "--reference: 'neuroshard' has "
                                                                                   "no plan"),
    ("trec bad indices", "eval_torchrec.py", _replace(TREC, "--data_dir", "ds_idx"), "data.pt: table 2: index"),
    ("comm join_timeout 0", "collect_comm_cost_data.py", COMM + ["--join_timeout", "0"],
     "--join_timeout: must be > 0"),
    ("comm nnodes 0", "collect_comm_cost_data.py", COMM + ["--nnodes", "0"], "--nnodes: must be >= 1, got 0"),
    # ---- issue 24: plans applied to the tables they were made for, and nothing else
    ("hw plans same dims other tables", "eval.py", _replace(HW, "--task_path", "tasks_same_dims.txt")
     + ["--plans", "plans.json"], "table 0 is dataset table 0 in the plan, dataset table 3 here"),
    ("hw plans bad table ids", "eval.py", HW + ["--plans", "plans_bad_ids.json"],
     '"table_ids" must be a list of non-negative integers'),
    ("hw old plans other dims", "eval.py", _replace(HW, "--task_path", "tasks_other_dims.txt")
     + ["--plans", "plans_old.json"], "table 0 has dim 16 in the plan, dim 8 here"),
    ("export same dims other tables", "tools/export_torchrec_plan.py",
     _replace(EXPORT, "--task_path", "tasks_same_dims.txt"),
     "not a plan of task 0 of tasks_same_dims.txt: table 0 is dataset table 0 in the plan, dataset table 3 here"),
    ("export other dims", "tools/export_torchrec_plan.py", _replace(EXPORT, "--task_path", "tasks_other_dims.txt"),
     "table 0 is dim 16 in the plan, dim 8 here"),
    ("export old plans other dims", "tools/export_torchrec_plan.py",
     _replace(_replace(EXPORT, "--task_path", "tasks_other_dims.txt"), "--plans", "plans_old.json"),
     "table 0 has dim 16 in the plan, dim 8 here"),
    ("export tables other dims", "tools/export_torchrec_plan.py",
     ["--plans", "user_plan.json", "--alg", "dim_greedy", "--tables", "user_dims.csv", "--out", "tr/u.pt"],
     "not a plan of user_dims.csv: table 1 is dim 8 in the plan, dim 16 here"),
    ("export tables other names", "tools/export_torchrec_plan.py",
     ["--plans", "user_plan.json", "--alg", "dim_greedy", "--tables", "user_names.csv", "--out", "tr/u.pt"],
     "table 1 is 'b' in the plan, 'bb' here"),
    ("export module_path", "tools/export_torchrec_plan.py", EXPORT + ["--module_path", "sparse..ebc."],
     "--module_path: 'sparse..ebc.' is not a module path"),
    ("export module_path dash", "tools/export_torchrec_plan.py", EXPORT + ["--module_path", "sparse.my-ebc"],
     "--module_path: 'sparse.my-ebc' is not a module path"),
    ("export out a directory", "tools/export_torchrec_plan.py", _replace(EXPORT, "--out", "a_dir"),
     "error: a_dir: is a directory, expected a file path"),
    ("shard_tables out a directory", "tools/shard_tables.py",
     ["--tables", "user.csv", "--ndevices", "2", "--max_mem", "1", "--alg", "dim_greedy", "--out", "a_dir"],
     "error: --out: a_dir is a directory, expected a file path"),
    ("shard_tables torchrec_out a directory", "tools/shard_tables.py",
     ["--tables", "user.csv", "--ndevices", "2", "--max_mem", "1", "--alg", "dim_greedy", "--out", "u.json",
      "--torchrec_out", "a_dir"], "error: --torchrec_out: a_dir is a directory, expected a file path"),
    # ---- issue 24: learned-policy checkpoints
    ("sim policy missing weight", "eval_simulator.py",
     _replace(SIM, "--alg", "dreamshard") + ["--dreamshard_policy", "ds_policy_missing.pt"],
     "malformed dreamshard policy checkpoint: missing weight"),
    ("sim policy nan weight", "eval_simulator.py",
     _replace(SIM, "--alg", "dreamshard") + ["--dreamshard_policy", "ds_policy_nan.pt"],
     "dreamshard policy checkpoint holds non-finite values in"),
    ("sim policy bad setting", "eval_simulator.py",
     _replace(SIM, "--alg", "dreamshard") + ["--dreamshard_policy", "ds_policy_meta.pt"],
     "ndevices must be an integer >= 1, got 'two'"),
    ("sim policy wrong shape", "eval_simulator.py",
     _replace(SIM, "--alg", "dreamshard") + ["--dreamshard_policy", "ds_policy_shape.pt"],
     "malformed dreamshard policy checkpoint (size mismatch"),
    ("sim policy of the other kind", "eval_simulator.py",
     _replace(SIM, "--alg", "autoshard") + ["--autoshard_policy", "ds_policy.pt"],
     "expected a autoshard policy checkpoint, found 'dreamshard_policy'"),
    ("sim autoshard nan statistic", "eval_simulator.py",
     _replace(SIM, "--alg", "autoshard") + ["--autoshard_policy", "as_policy_nan_meta.pt"],
     "holds non-finite or no values in 'feature_mean'"),
    ("sim plus start without its policy", "eval_simulator.py",
     _replace(SIM, "--alg", "neuroshard_plus") + ["--plus_baselines", "dreamshard"],
     "--plus_baselines: dreamshard needs its trained policy: give --dreamshard_policy"),
    ("sim plus start with a broken policy", "eval_simulator.py",
     _replace(SIM, "--alg", "neuroshard_plus") + ["--plus_baselines", "dreamshard", "--dreamshard_policy",
                                                  "ds_policy_nan.pt"], "holds non-finite values in"),
    # ---- issue 24: training that would train nothing, or write where it cannot
    ("dreamshard nothing fits", "train_dreamshard.py", _replace(TRAIN_D, "--max_mem", "1e-6"),
     "no training task fits 2 devices of 1e-06 GB"),
    ("dreamshard measures nothing", "train_dreamshard.py",
     _replace(_replace(TRAIN_D, "--task_path", "tasks_pack.txt"), "--max_mem", "0.00045"),
     "dreamshard training measured no plan"),
    ("autoshard measures nothing", "train_autoshard.py",
     _replace(_replace(TRAIN_D[:-11], "--task_path", "tasks_pack.txt"), "--max_mem", "0.00045")
     + ["--total_steps", "20", "--batch_size", "2", "--unroll_length", "5", "--num_cost_updates", "2",
        "--no_progress"], "autoshard training measured no plan"),
    ("dreamshard out_path dir", "train_dreamshard.py", _replace(TRAIN_D, "--out_path", "a_dir"),
     "--out_path: a_dir is a directory"),
    ("autoshard out_path under file", "train_autoshard.py", _replace(TRAIN_D[:-11], "--out_path", "a_file/x.pt")
     + ["--no_progress"], "--out_path: cannot create a_file/x.pt: a_file is a file"),
    # ---- issue 24: the held-out check
    ("heldout no seed", "heldout_check.py", _replace(HELD, "--data_dir", "hdata_noseed"),
     "config.json: missing 'seed'"),
    ("heldout max_dim of other data", "heldout_check.py", _replace(HELD, "--data_dir", "hdata_maxdim"),
     "max_dim 32 does not describe the 36 table configs"),
    ("heldout folds 100000", "heldout_check.py", HELD + ["--folds", "100000"],
     "--folds: 100000 folds of"),
    ("heldout folds 1", "heldout_check.py", HELD + ["--folds", "1"], "--folds: must be >= 2"),
    ("heldout num_samples 5", "heldout_check.py", HELD + ["--num_samples", "5"],
     "too few shards per group for the check"),
    # ---- the pipeline
    ("pipeline only 9", "neuroshard/pipeline/run.py", ["--preset", "tiny", "--only", "9", "--out_dir", "p"],
     "--only: unknown step 9"),
    ("pipeline ndevices 0", "neuroshard/pipeline/run.py", ["--preset", "tiny", "--ndevices", "0", "--out_dir", "p"],
     "--ndevices: must be >= 1"),
    ("pipeline paper cpu", "neuroshard/pipeline/run.py", ["--preset", "paper"], "meant for GPUs"),
    ("pipeline paper no data", "neuroshard/pipeline/run.py", ["--preset", "paper", "--gpu_devices", "0"],
     "needs the public dataset"),
    ("pipeline missing data", "neuroshard/pipeline/run.py", ["--preset", "tiny", "--data", "nope.pt", "--out_dir",
                                                              "p"], "nope.pt: file not found"),
    ("pipeline out_dir file", "neuroshard/pipeline/run.py", ["--preset", "tiny", "--out_dir", "a_file"],
     "--out_dir: "),
    ("pipeline preset", "neuroshard/pipeline/run.py", ["--preset", "huge"], "invalid choice: 'huge'"),
    # ---- issue 52: the newer surfaces
    ("calibrate_band nan results", "calibrate_band.py", _replace(CAL, "--results", "results_nan.json"),
     "measured \"compute\" holds nan; costs must be finite and non-negative"),
    ("calibrate_band inf repeat", "calibrate_band.py", _replace(CAL, "--results", "results_inf.json"),
     "\"repeat_costs\" must be a list of finite non-negative numbers"),
    ("calibrate_band plans not results", "calibrate_band.py", _replace(CAL, "--results", "plans.json"),
     "no measured plan among its 4 records"),
    ("calibrate_band other tasks", "calibrate_band.py", _replace(CAL, "--task_path", "tasks_same_dims.txt"),
     "not a plan of task 0 of tasks_same_dims.txt: table 0 is dataset table 0 in the plan, dataset table 3 here"),
    ("model_error nan results", "model_error.py", _replace(MERR, "--results", "results_nan.json"),
     "measured \"compute\" holds nan"),
    ("model_error plans not results", "model_error.py", _replace(MERR, "--results", "plans.json"),
     "no measured plan among its 4 records"),
    ("model_error other tasks", "model_error.py", _replace(MERR, "--task_path", "tasks_same_dims.txt"),
     "not a plan of task 0 of tasks_same_dims.txt"),
    ("model_error anchors not measured", "model_error.py", MERR + ["--round_anchors", "plans.json"],
     "plans.json: record 0: an anchor names its tables (table_ids, dims) and holds a plan and its measurements"),
    ("model_error anchors missing", "model_error.py", MERR + ["--round_anchors", "nowhere.json"], "nowhere.json"),
    ("trec alg typo", "eval_torchrec.py", TREC + ["--alg", "neuroshard,dim_gredy"], "--alg: no plan of dim_gredy"),
    ("trec other tasks", "eval_torchrec.py", _replace(TREC, "--task_path", "tasks_same_dims.txt"),
     "not a plan of task 0 of the task file"),
    ("trec model in-sample check", "train_torchrec_cost_model.py", TRCHECK, "the model was fitted on these"),
    ("trec model extra plans alone", "train_torchrec_cost_model.py", TRCHECK + ["--extra_results", "trres.json"],
     "--extra_results: give --extra_results, --extra_data_dir and --extra_task_path together"),
    ("trec model extra lists differ", "train_torchrec_cost_model.py",
     TRCHECK + ["--extra_results", "a.json,b.json", "--extra_data_dir", "ds", "--extra_task_path", "t.txt,u.txt"],
     "--extra_results: 2 collections, 1 --extra_data_dir and 2 --extra_task_path: one each"),
    ("trec model empty check", "train_torchrec_cost_model.py",
     _replace(_replace(TRCHECK, "--check_results", "trres_empty.json"), "--check_task_path", "tasks_other.txt"),
     "no plans to check"),
    ("sim collective model ranks", "eval_simulator.py", SIM + ["--collective_model", "collectives_4.json"],
     "collectives_4.json: fitted for 4 ranks, the plans are for 2"),
    ("sim collective model missing", "eval_simulator.py", SIM + ["--collective_model", "nowhere.json"],
     "nowhere.json: no collective model here (collect_collective_cost_data.py fits one)"),
    ("collectives one rank", "collect_collective_cost_data.py", ["--device", "cpu", "--ndevices", "1", "--out_dir",
                                                                 "cd", "--out_path", "cd.json"],
     "--ndevices: a collective needs at least 2 ranks, got 1"),
    ("collectives noise over data", "collect_collective_cost_data.py",
     ["--device", "cpu", "--ndevices", "2", "--data_size", "12", "--noise_samples", "13", "--out_dir", "cd",
      "--out_path", "cd.json"], "--noise_samples"),
    ("collectives too few", "collect_collective_cost_data.py",
     ["--device", "cpu", "--ndevices", "2", "--data_size", "5", "--out_dir", "cd", "--out_path", "cd.json"],
     "--data_size"),
    ("collectives one fold", "collect_collective_cost_data.py",
     ["--device", "cpu", "--ndevices", "2", "--folds", "1", "--out_dir", "cd", "--out_path", "cd.json"], "--folds"),
    ("collectives out_path dir", "collect_collective_cost_data.py",
     ["--device", "cpu", "--ndevices", "2", "--out_dir", "cd", "--out_path", "a_dir"], "--out_path"),
    ("trec anchors missing", "eval_torchrec.py", TREC + ["--round_anchors", "nowhere.json"], "nowhere.json"),
    ("trec anchors 0", "eval_torchrec.py", TREC + ["--round_anchors", "plans.json", "--anchors_per_round", "0"],
     "--anchors_per_round: must be >= 1"),
    ("trec model all zero", "eval_simulator.py", SIM + ["--runtime", "torchrec", "--runtime_model",
                                                        "trmodel_zero.json"], "every coefficient is 0"),
    ("collect lambdas without plus", "collect_plan_cost_data.py",
     EVAL_INPUTS + ["--alg", "dim_greedy", "--plus_lambdas", "0,1", "--device", "cpu", "--out_dir", "pc", "--quiet",
                    "--no_progress"], "--plus_lambdas: 0,1 weighs NeuroShard+'s objective, but --alg dim_greedy"),
    ("shard_tables batch under ranks", "tools/shard_tables.py",
     ["--tables", "user.csv", "--ndevices", "2", "--max_mem", "1", "--alg", "dim_greedy", "--batch_size", "3",
      "--out", "u.json"], "--batch_size: 3 is the global batch: it must split evenly over the 2 devices"),
    ("export local world size", "tools/export_torchrec_plan.py", EXPORT + ["--local_world_size", "3"],
     "--local_world_size: 3 ranks per host do not divide the plan's 2 ranks"),
    # ---- tools/alltoall_bench.py
    ("a2a dims text", "tools/alltoall_bench.py", ["--dims", "a,b"], "--dims: expected a comma list of integers"),
    ("a2a sleeps count", "tools/alltoall_bench.py", ["--dims", "8,8", "--sleeps", "1"], "need 2 values each"),
    ("a2a ndevices 0", "tools/alltoall_bench.py", ["--dims", "8,8", "--ndevices", "0"], "--ndevices: need at least 1"),
    ("a2a batch", "tools/alltoall_bench.py", ["--dims", "8,8,8", "--batch_size", "10"], "--batch_size"),
]


def run(script: str, argv, cwd) -> tuple[int, str]:
    """A script run as its command line runs it, in this process (`tests.scripts.run_script`): (exit code,
    stderr)."""
    res = run_script(script, argv, cwd)
    return res.returncode, res.stderr


@pytest.mark.parametrize("name, script, argv, fragment", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_a_one_line_error(ws, name, script, argv, fragment):
    code, err = run(script, argv, ws)
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert code not in (0, None), f"exit {code}: {err}"
    assert "Traceback" not in err
    assert lines and fragment in lines[-1], err
    if code == 1:  # run_main's own error line (argparse's usage errors exit 2 with "prog: error: ...")
        assert lines[-1].startswith("error: ") and len(lines[-1]) < 600


def test_the_count_of_cases():
    # the closing note of issue 12 quotes this number
    assert len(CASES) >= 100
    # issue 50 added 3 more, 1, 6; 51 2, 50 7, 52 15, 24 31, 23 (eval_torchrec.py) 9 (138 before); 51 2; 50 1, 1, 2;
    # 85 1
    assert len(CASES) == 220


def test_a_second_compute_collection_into_the_same_dir_is_refused(ws):
    """The single-writer lock: while one collection holds data.txt, a second one ends at once."""
    import fcntl

    out = ws / "locked"
    out.mkdir()
    with open(out / "data.txt", "a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        proc = subprocess.run([sys.executable, str(ROOT / "collect_compute_cost_data.py"),
                               *_replace(COMPUTE, "--out_dir", str(out))], cwd=ws, capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "another collection is writing to this directory" in proc.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("script, argv, fragment", [
    ("eval_simulator.py", _replace(SIM, "--compute_model", "text.pt"), "not a NeuroShard cost model checkpoint"),
    ("collect_comm_cost_data.py", _replace(COMM, "--ndevices", "0"), "--ndevices: need at least 1 rank, got 0"),
    ("eval.py", HW + ["--plans", "plans_dup.json"], "duplicates record 0"),
    ("train_compute_cost_model.py", TRAIN_C + ["--lr", "1e12", "--loss", "mse"], "training diverged"),
])
def test_real_command_lines(ws, script, argv, fragment):
    proc = subprocess.run([sys.executable, str(ROOT / script), *argv], cwd=ws, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and fragment in last


def test_empty_dataset_configs_warn_nothing_and_simulate_nothing(ws):
    """A table config list with no tables: the task file cannot name any table."""
    (ws / "no_tables").mkdir(exist_ok=True)
    write_table_configs(ws / "no_tables" / "table_configs.json", [])
    code, err = run("eval_simulator.py", _replace(SIM, "--data_dir", "no_tables"), ws)
    assert code == 1 and "table id 0 out of range (dataset has 0 tables)" in err


def test_tableconfig_rejects_bad_values_at_the_source():
    for kw, msg in ((dict(row=0), "row"), (dict(pooling_factor=float("nan")), "pooling_factor"),
                    (dict(bins=(2.0,) + (0.0,) * 16), "bin_0"), (dict(bins=(0.6, 0.6) + (0.0,) * 15), "sum to"),
                    (dict(dim=6), "dim")):
        args = {"row": 10, "pooling_factor": 1.0, "bins": (1.0,) + (0.0,) * 16, "dim": 8, **kw}
        with pytest.raises(ValueError, match=msg):
            TableConfig(**args)


def test_a_torn_last_line_is_reported_and_the_rest_is_used(ws):
    """The documented behaviour for a killed collector's torn last line: warn, skip it, go on."""
    (ws / "cdata_torn").mkdir(exist_ok=True)
    for name in ("table_configs.json", "data.txt"):
        (ws / "cdata_torn" / name).write_bytes((ws / "cdata" / name).read_bytes())
    with open(ws / "cdata_torn" / "data.txt", "a") as fh:
        fh.write("1,2,3 4.")  # no newline: the tail of a killed writer
    code, err = run("train_compute_cost_model.py", _replace(TRAIN_C, "--data_dir", "cdata_torn"), ws)
    assert code == 0 and "Traceback" not in err
    assert "data.txt:41: ignoring torn last line" in err
    metrics = json.loads((ws / "m" / "compute_metrics.json").read_text())
    assert metrics["num_samples"] == 40  # the 40 complete lines, not the torn 41st


def test_training_that_measures_nothing_writes_nothing(ws):
    """Issue 24: no training task fits -> a one-line error and no policy, curve or config; a checkpoint path
    that cannot be written is refused before any training."""
    code, err = run("train_dreamshard.py", _replace(TRAIN_D, "--out_path", "none/dreamshard.pt")[:-1]
                    + ["--max_mem", "1e-6", "--no_progress"], ws)
    assert code == 1 and "no training task fits" in err and not (ws / "none").exists()
    code, err = run("train_dreamshard.py", _replace(_replace(TRAIN_D, "--task_path", "tasks_pack.txt"),
                                                    "--max_mem", "0.00045"), ws)
    assert code == 1 and "measured no plan" in err and not (ws / "pol").exists()
    code, err = run("train_dreamshard.py", _replace(TRAIN_D, "--out_path", "a_dir"), ws)
    assert code == 1 and "--out_path: a_dir is a directory" in err and "dreamshard:" not in err


def test_a_finished_plan_collection_refuses_a_rerun_with_other_settings(ws):
    """Rerun into a finished collection with other settings would replace its samples: refused, naming what
    differs; the same settings run again (and a lambda.json the rerun no longer makes is not kept)."""
    argv = EVAL_INPUTS + ["--alg", "dim_greedy", "--max_tasks", "1", "--max_dim", "32", "--device", "cpu",
                          "--warmup", "1", "--iters", "1", "--out_dir", "pcol", "--quiet", "--no_progress"]
    code, err = run("collect_plan_cost_data.py", argv, ws)
    assert code == 0, err
    assert (ws / "pcol" / "comm" / "data.txt").exists() and (ws / "pcol" / "config.json").exists()
    (ws / "pcol" / "lambda.json").write_text("{}")  # as an earlier collection with --plus_lambdas left it
    code, err = run("collect_plan_cost_data.py", _replace(argv, "--alg", "dim_greedy,size_greedy"), ws)
    assert code == 1 and "settings differ from the existing run" in err
    assert 'alg: was "dim_greedy", now "dim_greedy,size_greedy"' in err
    code, err = run("collect_plan_cost_data.py", argv, ws)
    assert code == 0, err
    assert not (ws / "pcol" / "lambda.json").exists()
