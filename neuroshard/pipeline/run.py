"""Run the whole pipeline (DESIGN §2, steps 1-6) at a preset, then write the report.

    python -m neuroshard.pipeline --preset quick          # what `make demo` runs
    python -m neuroshard.pipeline --preset quick --force  # redo every step
    python -m neuroshard.pipeline --preset quick --seed 1  # fresh measurements -> results/quick-seed1
    python -m neuroshard.pipeline --preset quick --torchrec_train  # also step 7: the plans trained with TorchRec
    python -m neuroshard.pipeline --preset paper --data fbgemm_t856_bs65536.pt.gz --gpu_devices 0,1,2,3

Every step is a top-level script; the driver prints each command before it
runs it, so any step can be rerun by hand. A step is skipped when its outputs
exist and were made by the same command (a stamp in `<out>/steps/`); a
changed upstream step invalidates everything after it.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from neuroshard.checks import check_gpu_ids, check_int
from neuroshard.eval.drift import ANCHORS, DRIFT_COMM, DRIFT_COMPUTE
from neuroshard.formats.io import write_json_atomic
from neuroshard.settings import add_flag
from neuroshard.types import ConfigError, InputError, NeuroShardError

ROOT = Path(__file__).resolve().parents[2]
# gen_tasks.py's seed of the unmeasured tasks of prediction-powered verdicts (step 2b): not the evaluation's
# (0) nor the training tasks' (1)
UNMEASURED_SEED = 1000


@dataclass(frozen=True)
class Preset:
    """Sizes of one pipeline run. Times are for the 2-core CPU machine unless noted."""

    name: str
    ndevices: int
    max_mem: float  # GB per device
    max_dim: int
    # step 1: dataset (synthetic unless --data is given)
    num_tables: int
    batch_size: int
    max_rows: int
    # step 2: tasks
    num_tasks: int
    t_range: str
    # step 3: cost data
    compute_samples: int
    max_tables: int
    comm_samples: int
    comm_t_range: str
    sleep_range: str
    comm_batch_size: int
    warmup: int
    iters: int
    noise_samples: int  # shards / all-to-alls re-measured for the noise floors
    # step 4: training
    epochs: int
    # steps 4c-4e: the learned baselines, trained on their own tasks (same sizes, another seed)
    policy_tasks: int
    dreamshard_args: tuple[str, ...]
    autoshard_args: tuple[str, ...]
    # steps 5-6: evaluation
    eval_tasks: int
    eval_warmup: int
    eval_iters: int
    eval_repeats: int = 1  # measurements of every plan (interleaved rounds), for intervals
    half_share: float = 0.67  # compute shards from one half of the tables, for the held-out-table check
    # after step 6: collected shards / all-to-alls re-measured to see how far the machine drifted (eval.drift)
    drift_samples: int = 50
    gpu: bool = False
    # how the comm data's straggler spread is drawn in sleep_range (collect_comm_cost_data.py --spread_dist):
    # "log" samples near-simultaneous starts, where balanced plans' forward exchanges run. On the seed-0 study's
    # evaluation plans, at their measured start delays, the forward model trained on 500 uniform spreads (0-50
    # ms) under-estimated NeuroShard's and NeuroShard+'s exchanges by 20% and 19%, the baselines' by 4-12%;
    # trained on 500 log-uniform spreads (0.1-50 ms), by +4% and -4%, the baselines' by -1% to 0%.
    spread_dist: str = "uniform"
    # sim-to-real (issue 22): cost-model ensembles (members per model, 1: one model), and on-policy cost
    # data: the plans of `onpolicy_tasks` training tasks (0: off) by `onpolicy_algs`, NeuroShard+ once per
    # value of `plus_lambdas`, measured; the models retrained on both; NeuroShard+'s lambda chosen there
    ensemble: int = 1
    algs: str = "all"  # the algorithms of steps 5 and 6 (a learned baseline's policy is trained only if named)
    onpolicy_tasks: int = 0
    onpolicy_algs: str = "neuroshard,neuroshard_plus,size_lookup_greedy,random"
    plus_lambdas: str = "0,0.5,1"
    # each on-policy plan measured twice: the repeats tell how much of a rank's noise the plan's ranks share
    # (eval.power.rank_noise), which the predicted spread needs (planner.costs.uncertainty)
    onpolicy_repeats: int = 2
    # hardware in the loop in step 5 (eval/refine.py): the `refine` best candidates of `refine_algs`' plans by
    # the models measured `refine_repeats` times each, the measured best kept (0: off)
    refine: int = 0
    refine_algs: str = "neuroshard_plus"
    refine_repeats: int = 2
    # prediction-powered verdicts (steps 2b, 5b; eval/intervals.py powered_difference): the simulator's
    # estimates of the algorithms' plans on this many more tasks of the same generator (another seed), not
    # measured (0: off; off with --refine too: refined plans are chosen by measurement, the unmeasured are not)
    unmeasured_tasks: int = 0
    # step 7 (opt-in, --torchrec_train): the plans of the first tasks trained with TorchRec (eval_torchrec.py).
    # Rounds rather than iterations: on the 2-core machine (quick preset, 4 ranks) the median of 20 iterations
    # was known to +-4% while two rounds of the same plan differed by 20%.
    torchrec_tasks: int = 3
    torchrec_warmup: int = 3
    torchrec_iters: int = 10
    torchrec_repeats: int = 4
    # and (7a-7c) the TorchRec runtime model: random and sharders' plans of this many training tasks trained
    # in TorchRec, the model fitted to them, NeuroShard planned for TorchRec's runtime with it
    torchrec_data_tasks: int = 16
    torchrec_random_plans: int = 3


PRESETS = {
    # For the end-to-end smoke test: every step, seconds each.
    "tiny": Preset("tiny", ndevices=2, max_mem=1.0, max_dim=32, num_tables=16, batch_size=256, max_rows=20000,
                   num_tasks=3, t_range="4,8", compute_samples=100, max_tables=4, comm_samples=16,
                   comm_t_range="4,8", sleep_range="0,2", comm_batch_size=256, warmup=1, iters=2, noise_samples=4,
                   epochs=20, policy_tasks=4,
                   dreamshard_args=("--num_iterations", "2", "--bench_steps", "3", "--bench_training_steps", "20",
                                    "--rl_num_batches", "2", "--rl_batch_size", "4"),
                   autoshard_args=("--total_steps", "400", "--batch_size", "4", "--unroll_length", "50",
                                   "--num_cost_updates", "2", "--cost_batch_size", "32"),
                   eval_tasks=2, eval_warmup=1, eval_iters=2, eval_repeats=2, drift_samples=4, ensemble=2,
                   onpolicy_tasks=2, plus_lambdas="0,1", torchrec_tasks=2, torchrec_warmup=1, torchrec_iters=3,
                   torchrec_repeats=2, refine=2, refine_repeats=1),
    # `make demo`: the whole pipeline on CPU in about ten minutes, on the default synthetic
    # dataset of tools/gen_dlrm_data.py. The comm batch equals the dataset's, as eval.py uses it.
    # 600 tables, not fewer: the compute model generalises to unseen tables with the number of
    # distinct tables it trains on, not with the number of shards (held-out check, 1,000 shards:
    # unseen / seen MAPE 1.4-1.7x with 150 tables, 1.17-1.20x with 600; 3,000 shards of the 150
    # tables: still 1.6-1.9x).
    # Within 15 minutes with the sim-to-real steps, on a slow day too (one at 750/350 samples, 60 + 30
    # noise and drift samples, random among the algorithms and 3 on-policy tasks took 16.2 min, 15.7 min
    # with 2; the same steps took 13 min on a quiet day): 650 compute and 300 comm samples (the on-policy
    # data adds where plans live: 2 training tasks, each plan measured twice), the strongest baselines only
    # (dim_greedy, lookup_greedy and size_greedy lost to NeuroShard by 14-32% on hardware in every run, random
    # by 20-32%; `--preset paper` and `--alg all` keep them).
    "quick": Preset("quick", ndevices=4, max_mem=1.0, max_dim=128, num_tables=600, batch_size=4096,
                    max_rows=1_000_000, num_tasks=20, t_range="10,30", compute_samples=650, max_tables=10,
                    comm_samples=300, comm_t_range="10,30", sleep_range="0,50", comm_batch_size=4096, warmup=3,
                    iters=7, noise_samples=40, epochs=1000, policy_tasks=50, dreamshard_args=(),
                    autoshard_args=(), eval_tasks=10, eval_warmup=3, eval_iters=5, eval_repeats=2, drift_samples=20,
                    ensemble=3, onpolicy_tasks=2, spread_dist="log", unmeasured_tasks=40,
                    algs="neuroshard,neuroshard_plus,size_lookup_greedy,torchrec,dreamshard,autoshard"),
    # The paper's setting on the public dataset and GPUs (DESIGN §2 defaults: 4 GB per GPU,
    # T from 10 to 60, 100 tasks, batch 65536); run once with 4 and once with 8 GPUs.
    "paper": Preset("paper", ndevices=4, max_mem=4.0, max_dim=128, num_tables=856, batch_size=65536,
                    max_rows=0, num_tasks=100, t_range="10,60", compute_samples=100_000, max_tables=15,
                    comm_samples=20_000, comm_t_range="10,60", sleep_range="0,30", comm_batch_size=65536,
                    warmup=5, iters=10, noise_samples=500, epochs=1000, policy_tasks=100, dreamshard_args=(),
                    autoshard_args=(), eval_tasks=100, eval_warmup=5, eval_iters=10, eval_repeats=3, drift_samples=200,
                    gpu=True, ensemble=5, onpolicy_tasks=30),
}
# Hardware verdicts with power (issue 22): the quick preset's data and models, four algorithms (NeuroShard,
# NeuroShard+, the strongest baselines), 220 tasks x 2 interleaved rounds (below). First sized by eval/power.py from the
# calibrated 70-task seed-0 run (paired differences: task sd 9.0%, repeat sd 12.1%, medians over the
# baselines): 70 x 4 detected 3.6% and 3% needs 104 tasks (seeds 1 and 2 at 70 x 4: 118-150). That run took
# 37.6 minutes: data and models 11.6, planning 10.0, of which 9.3 refining NeuroShard+ on hardware (4
# candidates x 2 rounds per task), and measuring 15.9. The refinement kept NeuroShard+'s own plan in 68, 69
# and 65 of 70 tasks in the three 70-task runs, and NeuroShard+ was level with NeuroShard on hardware with and
# without it, so the study spends those minutes on 40 more tasks instead (`--refine 4` puts it back). Four
# runs at 110 x 4 took 39.7, 41.5, 45.5 and 50.6 minutes, five more 38.2, 40.3, 40.6, 39.1 and 37.4, as
# fast as the machine ran (step 6, the same 1,760 measurements, took 25-34 minutes), and detected 2.9-4.0%
# against the baselines. Without predictions the task sd dominated the detectable difference (task sd^2 >
# repeat sd^2 / 4), so tasks bought power and 4 rounds kept the plan-cost MAPE's repeat-noise floor low.
# 3,000 compute samples: the compute model is data-starved at 1,000. Trained on the seed-2 study's first 1,000,
# 2,000 and 3,000 random shards, its error on the 800 ranks of that study's evaluation plans (sd of log
# measured / estimated within a plan: what a plan's ranks do not share) was 13.4%, 10.5% and 10.1%, and the
# MAPE with the common factor taken out 10.1%, 8.5% and 7.8%; three ensemble members instead of one changed
# neither. Steps 2b and 5b plan 440 more tasks, not measured, for prediction-powered verdicts (152 s): in
# three fresh runs they cut the detectable difference against the baselines from 3.1-4.0% to 2.5-3.3%
# (README, Sim-to-real); the runs then took 42.0, 42.9 and 43.8 minutes, three more (646b6ea) 43.7, 43.0 and
# 43.8.
# With those predictions the repeat noise, not the task sd, bounds the power: in the three fresh 110 x 4 runs
# (seeds 0-2 at 5194f31, 4c3d7ab, fbfef74) the paired differences' task sd beyond the predictions was 3.2-7.0%
# against the baselines and their repeat sd 16.7-19.3% (repeat sd^2 / 4 > task sd^2), so at a fixed number of
# measurements more tasks in fewer rounds detect less: eval/power.py on those sds gives 2.87-3.20% at 110 x 4,
# 2.83-3.07% at 147 x 3 and 2.75-2.95% at 220 x 2 against TorchRec and AutoShard (2.32-2.55% and 2.32-2.43%
# against NeuroShard+). So the study measures 220 tasks x 2 rounds: the same 1,760 measurements, 110 more tasks
# to plan in step 5 (157 and 200 s for 220 tasks in two fresh runs, 75 s for 110 before). Two rounds are the
# fewest the intervals, the repeat noise and the cross-fitted headroom need; the price is the plan-cost MAPE's
# repeat-noise floor (a perfect model against the mean of 2 measurements instead of 4: about 8.7% instead of
# 6.1%; 7.5% and 8.6% in those two runs).
PRESETS["study"] = replace(PRESETS["quick"], name="study", num_tasks=220, eval_tasks=220, eval_repeats=2,
                           eval_iters=7,
                           compute_samples=3000, comm_samples=500, noise_samples=100, drift_samples=50,
                           onpolicy_tasks=6, algs="neuroshard,neuroshard_plus,torchrec,autoshard",
                           unmeasured_tasks=440)


@dataclass
class Step:
    key: str  # the README's step number, e.g. "3a"
    title: str
    argv: list[str]  # script and flags, relative to the repository root
    outputs: list[Path]
    # flags known only once an earlier step ran (e.g. NeuroShard+'s lambda chosen on hardware), appended
    late: Callable[[], list[str]] | None = None

    def command(self) -> list[str]:
        return self.argv + (self.late() if self.late is not None else [])


def chosen_lambda(path: Path) -> list[str]:
    """`--plus_lambda x` as chosen on hardware by the on-policy step (its lambda.json); nothing when it chose
    none (e.g. no NeuroShard+ plan fitted)."""
    from neuroshard.formats.io import read_json

    if not path.exists():
        raise NeuroShardError(f"{path} not found: run the on-policy step (4f) first")
    chosen = read_json(path).get("chosen")
    return [] if chosen is None else ["--plus_lambda", f"{chosen:g}"]


def build_steps(p: Preset, out: Path, data: str | None, gpu_devices: str | None, seed: int = 0,
                torchrec_train: bool = False) -> list[Step]:
    """The commands of one pipeline run, in order. `seed` seeds every measurement, training and
    evaluation step (the dataset and the tasks keep seed 0, so runs of several seeds share them).
    `torchrec_train`: add step 7, the plans trained with TorchRec (opt-in: minutes at the quick preset)."""
    n = p.ndevices
    ds, tasks, cdata, mdata = out / "dataset", out / "tasks", out / "compute_data", out / "comm_data"
    models = out / "models"
    compute_model, fw_model, bw_model = models / "compute.pt", models / f"comm_{n}_fw.pt", models / f"comm_{n}_bw.pt"
    # with on-policy data, the models retrained on it (models/onpolicy/) plan and are judged from step 4d on
    onpolicy, plan_data = p.onpolicy_tasks > 0, out / "plan_data"
    final = models / "onpolicy" if onpolicy else models
    f_compute, f_fw, f_bw = final / "compute.pt", final / f"comm_{n}_fw.pt", final / f"comm_{n}_bw.pt"
    ens = ["--ensemble", str(p.ensemble)] if p.ensemble > 1 else []
    dev = ["--gpu_devices", gpu_devices] if gpu_devices else ["--device", "cpu"]
    # One benchmark process per core for the compute collection on CPU.
    workers = [] if gpu_devices else ["--num_workers", str(min(2, os.cpu_count() or 1))]
    s = ["--seed", str(seed)]
    if data:
        gen = ["tools/gen_dlrm_data.py", "--data", data, "--out_dir", str(ds)]
    else:
        gen = ["tools/gen_dlrm_data.py", "--synthetic", "--num_tables", str(p.num_tables), "--batch_size",
               str(p.batch_size), "--max_rows", str(p.max_rows), "--seed", "0", "--out_dir", str(ds)]
    random_models = ["--compute_model", str(compute_model), "--fw_comm_model", str(fw_model),
                     "--bw_comm_model", str(bw_model)]
    models_flags = ["--compute_model", str(f_compute), "--fw_comm_model", str(f_fw), "--bw_comm_model", str(f_bw)]
    train_tasks, ds_policy, as_policy = out / "train_tasks", models / "dreamshard.pt", models / "autoshard.pt"
    policy_common = ["--data_dir", str(ds), "--task_path", str(train_tasks / "data.txt"), "--eval_task_path",
                     str(tasks / "data.txt"), *models_flags, "--ndevices", str(n), "--max_mem", str(p.max_mem),
                     *s, "--no_progress"]
    algs = None if p.algs == "all" else p.algs.split(",")
    learned = [a for a in ("dreamshard", "autoshard") if algs is None or a in algs]
    policies = {"dreamshard": ds_policy, "autoshard": as_policy}
    calib = out / "calibration"

    def evaluation(task_dir: Path, count: int) -> list[str]:
        """The flags steps 5 and 6 share, for the first `count` tasks of `task_dir`."""
        flags = ["--data_dir", str(ds), "--task_path", str(task_dir / "data.txt"), *models_flags, "--alg", p.algs,
                 "--ndevices", str(n), "--max_mem", str(p.max_mem), "--max_tasks", str(count), "--calibration",
                 str(calib), *s]
        return flags + [x for a in learned for x in (f"--{a}_policy", str(policies[a]))]

    def gen_tasks(dest: Path, count: int, seed: int) -> list[str]:
        """tools/gen_tasks.py for `count` tasks of the preset's kind into `dest`."""
        return ["tools/gen_tasks.py", "--data_dir", str(ds), "--out_dir", str(dest), "--data_size", str(count),
                "--T_range", p.t_range, "--max_mem", str(p.max_mem), "--ndevices", str(n), "--max_dim",
                str(p.max_dim), "--seed", str(seed)]

    # steps 5 and 5b plan with NeuroShard+'s lambda chosen on the training tasks' measured plans (step 4f)
    chosen = (lambda: chosen_lambda(plan_data / "lambda.json")) if onpolicy else None
    eval_common = evaluation(tasks, p.eval_tasks)
    # prediction-powered verdicts: the same planning on tasks that are not measured (another seed)
    unmeasured = p.unmeasured_tasks > 0 and not p.refine
    u_tasks, u_sim = out / "tasks_unmeasured", out / "sim_unmeasured"
    powered = ["--unmeasured_plans", str(u_sim / "plans.json"), "--unmeasured_task_path",
               str(u_tasks / "data.txt")] if unmeasured else []
    # --refine measures candidates as step 6 measures plans
    refine = ["--refine", str(p.refine), "--refine_algs", p.refine_algs, "--refine_repeats", str(p.refine_repeats),
              "--warmup", str(p.eval_warmup), "--iters", str(p.eval_iters), *dev] if p.refine else []
    comm_ranks = dev if gpu_devices else ["--ndevices", str(n)]
    comm_cfg = ["--T_range", p.comm_t_range, "--sleep_range", p.sleep_range, "--spread_dist", p.spread_dist,
                "--max_dim", str(p.max_dim), "--batch_size", str(p.comm_batch_size), "--warmup", str(p.warmup),
                "--iters", str(p.iters), *s]
    steps = [
        Step("1", "dataset", gen, [ds / "table_configs.json", ds / "data.pt"]),
        Step("2", "tasks", gen_tasks(tasks, p.num_tasks, 0), [tasks / "data.txt"]),
        *([Step("2b", "tasks for prediction-powered verdicts (not measured)",
                gen_tasks(u_tasks, p.unmeasured_tasks, UNMEASURED_SEED), [u_tasks / "data.txt"])]
          if unmeasured else []),
        Step("3a", "compute cost data",
             ["collect_compute_cost_data.py", "--dataset_dir", str(ds), "--out_dir", str(cdata), "--data_size",
              str(p.compute_samples), "--max_tables", str(p.max_tables), "--max_mem", str(p.max_mem),
              "--max_dim", str(p.max_dim), "--warmup", str(p.warmup), "--iters", str(p.iters), "--half_share",
              str(p.half_share), *s, *dev, *workers], [cdata / "data.txt"]),
        Step("3a-noise", "compute noise floor",
             ["tools/compute_noise_floor.py", "--data_dir", str(cdata), "--dataset_dir", str(ds), "--num_samples",
              str(p.noise_samples), *s, *dev, *workers], [cdata / "noise_floor.json"]),
        Step("3b", "comm cost data",
             ["collect_comm_cost_data.py", "--out_dir", str(mdata), "--data_size", str(p.comm_samples), *comm_cfg,
              *comm_ranks], [mdata / "data.txt"]),
        Step("3b-noise", "comm noise floor",
             ["collect_comm_cost_data.py", "--out_dir", str(mdata), "--noise_floor", str(p.noise_samples),
              *comm_cfg, *comm_ranks], [mdata / "noise_floor.json"]),
        Step("4a", "compute cost model",
             ["train_compute_cost_model.py", "--data_dir", str(cdata), "--epochs", str(p.epochs), "--out_path",
              str(compute_model), *ens, *s], [compute_model]),
        Step("4a-heldout", "compute model on unseen tables",
             ["tools/heldout_check.py", "--data_dir", str(cdata), "--epochs", str(p.epochs), "--out_path",
              str(models / "compute_heldout.json"), *s], [models / "compute_heldout.json"]),
        Step("4b", "comm cost models",
             ["train_comm_cost_model.py", "--data_dir", str(mdata), "--epochs", str(p.epochs), "--fw_out_path",
              str(fw_model), "--bw_out_path", str(bw_model), "--bw_linear", "1", *ens, *s], [fw_model, bw_model]),
        # The learned baselines train on their own tasks (seed 1; the evaluation tasks are seed 0,
        # and train_*.py refuses any task they share), against the simulator.
        Step("4c", "policy training tasks", gen_tasks(train_tasks, p.policy_tasks, 1), [train_tasks / "data.txt"]),
    ]
    if onpolicy:
        steps += [
            # The plans of training tasks, made with the random data's models, measured as eval.py measures:
            # on-policy cost data, and NeuroShard+'s lambda chosen on hardware (eval/onpolicy.py).
            Step("4f", "on-policy cost data",
                 ["collect_plan_cost_data.py", "--data_dir", str(ds), "--task_path", str(train_tasks / "data.txt"),
                  "--eval_task_path", str(tasks / "data.txt"), *random_models, "--alg", p.onpolicy_algs,
                  "--plus_lambdas", p.plus_lambdas, "--max_tasks", str(p.onpolicy_tasks), "--ndevices", str(n),
                  "--max_mem", str(p.max_mem), "--max_dim", str(p.max_dim), "--out_dir", str(plan_data),
                  "--warmup", str(p.eval_warmup), "--iters", str(p.eval_iters),
                  "--repeats", str(p.onpolicy_repeats), *s, *dev, "--quiet", "--no_progress"],
                 [plan_data / "compute" / "data.txt", plan_data / "comm" / "data.txt", plan_data / "lambda.json"]),
            Step("4g", "compute cost model, random + on-policy data",
                 ["train_compute_cost_model.py", "--data_dir", str(cdata), "--plan_data_dir",
                  str(plan_data / "compute"), "--epochs", str(p.epochs), "--out_path", str(f_compute), *ens, *s],
                 [f_compute]),
            Step("4h", "comm cost models, random + on-policy data",
                 ["train_comm_cost_model.py", "--data_dir", str(mdata), "--plan_data_dir", str(plan_data / "comm"),
                  "--epochs", str(p.epochs), "--fw_out_path", str(f_fw), "--bw_out_path", str(f_bw), "--bw_linear",
                  "1", *ens, *s],
                 [f_fw, f_bw]),
            # The retrained models' error on those plans beyond their predicted spread: the plan-level term
            # of the reported band, and the random data's models' per-rank compute error on them (out of
            # sample), recorded in the forward checkpoint (planner/costs/uncertainty.py).
            Step("4i", "band calibrated on the on-policy plans",
                 ["tools/calibrate_band.py", "--data_dir", str(ds), "--task_path", str(train_tasks / "data.txt"),
                  "--eval_task_path", str(tasks / "data.txt"), "--results", str(plan_data / "hw" / "results.json"),
                  "--models", str(final), "--rank_error_models", str(models), "--ndevices", str(n),
                  "--max_mem", str(p.max_mem)],
                 [final / f"plan_error_{n}.json"]),
        ]
    if "dreamshard" in learned:
        steps.append(Step("4d", "DreamShard policy", ["train_dreamshard.py", *policy_common, "--out_path",
                                                      str(ds_policy), *p.dreamshard_args], [ds_policy]))
    if "autoshard" in learned:
        steps.append(Step("4e", "AutoShard policy", ["train_autoshard.py", *policy_common, "--out_path",
                                                     str(as_policy), *p.autoshard_args], [as_policy]))

    def remeasure(key: str, title: str, dest: Path) -> list[Step]:
        """Collected shards and all-to-alls measured again (the same samples each time: same seed), into
        `dest`'s drift files: how much slower or faster the machine runs now than when they were recorded."""
        return [Step(f"{key}-compute", f"{title}: compute",
                     ["tools/compute_noise_floor.py", "--data_dir", str(cdata), "--dataset_dir", str(ds),
                      "--num_samples", str(p.drift_samples), "--repeats", "1", "--out_path",
                      str(dest / DRIFT_COMPUTE), *s, *dev, *workers], [dest / DRIFT_COMPUTE]),
                Step(f"{key}-comm", f"{title}: comm",
                     ["collect_comm_cost_data.py", "--out_dir", str(mdata), "--noise_floor", str(p.drift_samples),
                      "--noise_out", str(dest / DRIFT_COMM), *comm_cfg, *comm_ranks], [dest / DRIFT_COMM])]

    def anchors(when: str) -> list[Step]:
        """With on-policy data: step 4f's plans of training tasks measured again as step 6 measures plans, under
        step 6's models, just `when` ("before" or "after") it: the plan job's own speed (eval/drift.py). One
        round each: the median over the plans is what is read, and before and after agreed to 0.1-1.6% in the
        110-task studies, so a second round bought little for its 40 s (the study's 45 minutes are tight)."""
        if not onpolicy:
            return []
        dest = out / "hw" / ANCHORS[when]
        return [Step(f"6-anchors-{when}", f"plan-level speed {when} the evaluation",
                     ["eval.py", "--data_dir", str(ds), "--task_path", str(train_tasks / "data.txt"), *models_flags,
                      "--alg", "all", "--ndevices", str(n), "--max_mem", str(p.max_mem), "--max_tasks",
                      str(p.onpolicy_tasks), "--calibration", str(calib), *s, "--plans",
                      str(plan_data / "hw" / "plans.json"), "--out_dir", str(dest), "--warmup", str(p.eval_warmup),
                      "--iters", str(p.eval_iters), "--repeats", "1", *dev, "--quiet",
                      "--no_progress"], [dest / "summary.json"])]

    # Just before planning: the machine's speed now; steps 5 and 6 scale the models by it (--calibration).
    steps += remeasure("5-calibrate", "calibration", calib)
    steps += [
        Step("5", "simulator evaluation", ["eval_simulator.py", *eval_common, "--out_dir", str(out / "sim"), *refine],
             [out / "sim" / "summary.json"], late=chosen),
        *([Step("5b", "simulator on the unmeasured tasks",
                ["eval_simulator.py", *evaluation(u_tasks, p.unmeasured_tasks), "--out_dir", str(u_sim), "--quiet"],
                [u_sim / "summary.json"], late=chosen)] if unmeasured else []),
        *anchors("before"),
        # eval.py measures the plans eval_simulator.py made: planned once, by the same code. Not with
        # --plan_speed (the anchors' speed before it): in three fresh studies it made the estimates worse
        # (README, Sim-to-real).
        Step("6", "hardware evaluation",
             ["eval.py", *eval_common, "--plans", str(out / "sim" / "plans.json"), "--out_dir", str(out / "hw"),
              "--warmup", str(p.eval_warmup), "--iters", str(p.eval_iters), "--repeats", str(p.eval_repeats), *dev,
              *powered],
             [out / "hw" / "summary.json"]),
        *anchors("after"),
    ]
    # Right after it, the same samples again: how far the machine moved while the plans were planned and
    # measured (the report separates that drift from the models' own error; eval/drift.py).
    steps += remeasure("6-drift", "machine drift", out / "hw")
    if onpolicy:  # the measured plans re-simulated under the models before and after the on-policy data
        steps.append(Step("6-models", "model error on the measured plans, random vs on-policy data",
                          ["tools/model_error.py", "--data_dir", str(ds), "--task_path", str(tasks / "data.txt"),
                           "--results", str(out / "hw" / "results.json"), "--ndevices", str(n), "--max_mem",
                           str(p.max_mem), "--models", f"random={models}", "--models", f"onpolicy={final}",
                           "--out_path", str(out / "hw" / "model_error.json")], [out / "hw" / "model_error.json"]))
    if torchrec_train:
        rt_data, rt_model = out / "torchrec_data", final / f"torchrec_runtime_{n}.json"
        trt = ["--warmup", str(p.torchrec_warmup), "--iters", str(p.torchrec_iters), *s, *dev]
        no_alg = [a for k, a in enumerate(eval_common) if a != "--alg" and (k == 0 or eval_common[k - 1] != "--alg")]
        steps += [
            # TorchRec's runtime: plans of training tasks trained in TorchRec, a cost model fitted to them,
            # NeuroShard planned for it (labelled neuroshard[torchrec]).
            Step("7a", "TorchRec runtime cost data",
                 ["collect_torchrec_cost_data.py", "--data_dir", str(ds), "--task_path", str(train_tasks / "data.txt"),
                  "--eval_task_path", str(tasks / "data.txt"), *models_flags, "--ndevices", str(n), "--max_mem",
                  str(p.max_mem), "--max_tasks", str(p.torchrec_data_tasks), "--random_plans",
                  str(p.torchrec_random_plans), "--alg", "neuroshard,size_lookup_greedy,torchrec", *trt,
                  "--out_dir", str(rt_data), "--quiet", "--no_progress"], [rt_data / "results.json"]),
            Step("7b", "TorchRec runtime cost model",
                 ["train_torchrec_cost_model.py", "--data_dir", str(ds), "--task_path", str(train_tasks / "data.txt"),
                  "--samples", str(rt_data / "results.json"), *models_flags, "--ndevices", str(n), "--out_path",
                  str(rt_model)], [rt_model]),
            Step("7c", "NeuroShard for TorchRec's runtime",
                 ["eval_simulator.py", *no_alg, "--alg", "neuroshard", "--runtime", "torchrec", "--runtime_model",
                  str(rt_model), "--out_dir", str(out / "sim_torchrec"), "--quiet", "--no_progress"],
                 [out / "sim_torchrec" / "summary.json"]),
            # The simulator's plans of the first tasks, every algorithm and neuroshard[torchrec], trained with
            # DistributedModelParallel; then the runtime model's error on them.
            Step("7", "TorchRec training",
                 ["eval_torchrec.py", "--data_dir", str(ds), "--task_path", str(tasks / "data.txt"),
                  "--plans", f"{out / 'sim_torchrec' / 'plans.json'},{out / 'sim' / 'plans.json'}",
                  "--ndevices", str(n), "--max_tasks", str(p.torchrec_tasks), "--repeats", str(p.torchrec_repeats),
                  *trt, "--out_dir", str(out / "torchrec"), "--no_progress"], [out / "torchrec" / "summary.json"]),
            Step("7-models", "TorchRec runtime model on the evaluation tasks' plans",
                 ["train_torchrec_cost_model.py", "--data_dir", str(ds), "--task_path", str(train_tasks / "data.txt"),
                  "--model", str(rt_model), *models_flags, "--ndevices", str(n), "--out_path",
                  str(out / "torchrec" / "runtime_model_error.json"), "--check",
                  str(out / "torchrec" / "results.json"), "--check_task_path", str(tasks / "data.txt")],
                 [out / "torchrec" / "runtime_model_error.json"]),
        ]
    return steps


def _stamp_path(out: Path, step: Step) -> Path:
    return out / "steps" / f"{step.key}.json"


def _up_to_date(out: Path, step: Step, argv: list[str], upstream: list[dict]) -> dict | None:
    """The step's stamp if its outputs exist and were made by the same command, else None."""
    path = _stamp_path(out, step)
    if not path.exists() or not all(o.exists() for o in step.outputs):
        return None
    try:
        stamp = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return stamp if stamp.get("argv") == argv and stamp.get("upstream") == upstream else None


def run_steps(steps: list[Step], out: Path, force: bool, only: set[str] | None = None) -> list[dict]:
    """Run (or skip) each step; returns one record per step with its wall time."""
    records, upstream = [], []
    for step in steps:
        if only and step.key not in only:
            continue
        argv = step.command()
        shown = "python " + " ".join(shlex.quote(a) for a in argv)
        stamp = None if force else _up_to_date(out, step, argv, upstream)
        if stamp is not None:
            print(f"[{step.key}] {step.title}: up to date, skipped\n      {shown}", flush=True)
            # keep the time the step took when it ran, for the report
            records.append({"step": step.key, "title": step.title, "command": shown, "skipped": True,
                            "seconds": stamp.get("seconds", 0.0)})
        else:
            print(f"[{step.key}] {step.title}\n  $ {shown}", flush=True)
            t0 = time.perf_counter()
            rc = subprocess.call([sys.executable, *argv], cwd=ROOT)
            seconds = time.perf_counter() - t0
            if rc != 0:
                raise NeuroShardError(f"step {step.key} ({step.title}) failed with exit code {rc}; "
                                      f"rerun it by hand: {shown}")
            write_json_atomic(_stamp_path(out, step), {"argv": argv, "upstream": upstream,
                                                       "seconds": round(seconds, 2)})
            records.append({"step": step.key, "title": step.title, "command": shown, "skipped": False,
                            "seconds": round(seconds, 2)})
            print(f"[{step.key}] done in {seconds:.1f} s", flush=True)
        upstream = upstream + [{"step": step.key, "argv": argv}]
    return records


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="quick", help="sizes of the run (default: quick)")
    ap.add_argument("--out_dir", default=None, help="output folder (default: results/<preset>)")
    ap.add_argument("--data", default=None, help="public DLRM dataset file (.pt or .pt.gz) instead of synthetic data")
    add_flag(ap, "gpu_devices", help="GPUs to use, e.g. 0,1,2,3, one rank or worker each (default: CPU)")
    ap.add_argument("--ndevices", type=int, default=None, help="override the preset's device count")
    ap.add_argument("--refine", type=int, default=None,
                    help="override the preset's hardware in the loop in step 5: measure each task's K best "
                         "candidates of NeuroShard+ on hardware and keep the measured best (0: off)")
    ap.add_argument("--force", action="store_true", default=os.environ.get("FORCE", "") not in ("", "0"),
                    help="redo every step even if its outputs are up to date (also FORCE=1)")
    ap.add_argument("--only", default=None, help="comma list of steps to run, e.g. 5,6")
    ap.add_argument("--torchrec_train", action="store_true",
                    help="also run step 7: train the plans of the first tasks with TorchRec (DistributedModelParallel) "
                         "and compare step times (opt-in: about 10 min more at the quick preset on 2 cores)")
    ap.add_argument("--seed", type=int, default=0,
                    help="seed of every measurement, training and evaluation step (the dataset and tasks keep "
                         "seed 0); a seed other than 0 defaults to the folder results/<preset>-seed<N>, so "
                         "fresh runs of the quick preset can be compared")
    return ap.parse_args(argv)


def preset_from_args(args) -> Preset:
    """The preset named by --preset with the flags that override it (--gpu_devices, --ndevices, --refine)."""
    preset = PRESETS[args.preset]
    if args.gpu_devices:
        preset = replace(preset, ndevices=len(check_gpu_ids("--gpu_devices", args.gpu_devices)))
    if args.ndevices is not None:
        preset = replace(preset, ndevices=check_int("--ndevices", args.ndevices, 1))
    if args.refine is not None:
        preset = replace(preset, refine=check_int("--refine", args.refine, 0))
    if preset.gpu and not args.gpu_devices:
        raise NeuroShardError(f"preset {preset.name!r} is meant for GPUs: pass --gpu_devices (e.g. 0,1,2,3)")
    return preset


def main(argv=None) -> int:
    args = parse_args(argv)
    preset = preset_from_args(args)
    if args.preset == "paper" and not args.data:
        raise NeuroShardError("preset 'paper' needs the public dataset: pass --data fbgemm_t856_bs65536.pt.gz")
    if args.data and not os.path.isfile(args.data):
        raise InputError(args.data, "file not found (--data)")
    # Commands run from the repository root with paths relative to it, so the
    # printed commands can be pasted as they are.
    check_int("--seed", args.seed, 0)
    default = preset.name if args.seed == 0 else f"{preset.name}-seed{args.seed}"
    out = Path(args.out_dir or ROOT / "results" / default).resolve()
    if out.is_relative_to(ROOT):
        out = ROOT / out.relative_to(ROOT)
    data = os.path.abspath(args.data) if args.data else None
    steps = build_steps(preset, out.relative_to(ROOT) if out.is_relative_to(ROOT) else out, data, args.gpu_devices,
                        args.seed, args.torchrec_train)
    only = None
    if args.only is not None:
        only = {k.strip() for k in args.only.split(",") if k.strip()}
        unknown = sorted(only - {st.key for st in steps})
        if unknown or not only:
            raise ConfigError("--only", f"unknown step {', '.join(unknown) or repr(args.only)}; the steps are "
                                        f"{', '.join(st.key for st in steps)}")
    if out.exists() and not out.is_dir():
        raise ConfigError("--out_dir", f"{out} is a file")
    os.chdir(ROOT)
    out = out.relative_to(ROOT) if out.is_relative_to(ROOT) else out
    out.mkdir(parents=True, exist_ok=True)

    t0 = time.perf_counter()
    records = run_steps(steps, out, args.force, only)
    from neuroshard.pipeline.report import write_report

    study = PRESETS["study"]
    report = write_report(out, preset, records, time.perf_counter() - t0, (study.eval_tasks, study.eval_repeats))
    print(f"report: {report}")
    return 0


if __name__ == "__main__":
    from neuroshard.cli import run_main

    run_main(main)
