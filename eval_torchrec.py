"""Train every algorithm's plan with TorchRec (DistributedModelParallel) and compare the step times.

    python eval_torchrec.py --data_dir results/quick/dataset --task_path results/quick/tasks/data.txt \
        --plans results/quick/sim/plans.json --ndevices 4 --max_tasks 3 --out_dir results/quick/torchrec
    python eval_torchrec.py ... --alg neuroshard,size_lookup_greedy,torchrec --repeats 5 --iters 30
    python eval_torchrec.py ... --alg all,torchrec_full --max_mem 1     # and TorchRec's planner, all sharding types
    python eval_torchrec.py ... --gpu_devices 0,1,2,3                 # NCCL, one GPU per rank
    python eval_torchrec.py ... --round_anchors results/quick/torchrec_data/results.json  # the rounds' speed

Each plan of eval_simulator.py's plans.json becomes a TorchRec ShardingPlan
(fused kernel; written to <out_dir>/torchrec_plans/) and ONE torchrun job
trains a DLRM with each (torchrec's dense and over archs, the task's tables
in an EmbeddingBagCollection sharded by the plan, each rank fed its slice of
the dataset's real lookups, BCE loss, fused exact SGD for the embeddings),
timing every iteration's step (the slowest rank's, a barrier before each).
Plans are trained in --repeats rounds, each in a seeded shuffled order. Prints
and writes (summary.md / summary.json / results.json in --out_dir) each
algorithm's mean step time and its ratio to --reference's with 95% intervals,
the verdict the interval supports, and the noise floor (the same plan in two
rounds). `torchrec_full` in --alg adds TorchRec's planner as users get it
(every sharding type: row-wise, table-row-wise, data-parallel too; defaults
throughout), planned here per task for --ndevices GPUs of --max_mem GB and
trained on the same ranks; it has no plans.json record (torchrec_full.json
says what it chose). See neuroshard/torchrec/training.py,
neuroshard/torchrec/training_eval.py and neuroshard/torchrec/full_planner.py.

Interrupted? Rerun the same command: measurements so far are kept in
<out_dir>/.partial/ and only the others are made.
"""

from __future__ import annotations

import argparse
import os
import sys

from neuroshard.cli import run_main
from neuroshard.problem import Problem
from neuroshard.settings import add_flag, parse_flags


def parse_args(argv=None) -> argparse.Namespace:
    from neuroshard.cli import add_device_arg, add_progress_arg, add_quiet_arg
    from neuroshard.torchrec.training import TorchRecTrainConfig

    p = argparse.ArgumentParser(description="Train sharding plans with TorchRec and compare their step times.")
    add_flag(p, "data_dir", required=True, help="dataset dir with table_configs.json and data.pt (the lookups)")
    add_flag(p, "task_path", required=True)
    add_flag(p, "plans", required=True, help="eval_simulator.py's plans.json for the same --task_path, or a comma "
                                             "list of them (a plan of a task and algorithm already in an earlier "
                                             "file is skipped)")
    add_flag(p, "alg", "all", help="comma list of algorithms to train; 'all': every algorithm of --plans; "
                                   "'torchrec_full': TorchRec's planner with every sharding type, planned here per "
                                   "task (needs --max_mem), e.g. all,torchrec_full; with it, plans labelled "
                                   "torchrec_full in --plans are left out")
    p.add_argument("--reference", default="neuroshard",
                   help="the algorithm the others are compared with (default: neuroshard)")
    add_flag(p, "max_tasks", help="train the plans of the first N tasks only")
    add_flag(p, "round_anchors", help="per-round calibration: plans of tasks that are not evaluated, naming their "
                                      "tables (collect_torchrec_cost_data.py's results.json, as "
                                      "the pipeline gives, or an anchor_sim/plans.json); --anchors_per_round of them, "
                                      "taken over its tasks and algorithms, are trained in every round, spread over "
                                      "it (round_anchors.json: the rounds' speed for train_torchrec_cost_model.py "
                                      "--check_results)")
    add_flag(p, "anchors_per_round")
    # the plans' memory was their planner's business; only torchrec_full is planned here
    Problem.add_args(p, defaults={"max_mem": None},
                     helps={"max_mem": "memory per rank in GB (TorchRec's HBM per GPU) that torchrec_full is planned "
                                       "within: the memory the plans of --plans were made for",
                            "local_world_size": "ranks per host: torchrec_full plans for these hosts, a table-row-wise "
                                                "table's row blocks stay in its plan's host, and on one machine its "
                                                "ranks train as hosts of N (TorchRec's table-row-wise groups)"})
    add_device_arg(p)
    add_flag(p, "out_dir", "results/torchrec")
    TorchRecTrainConfig.add_args(p)
    add_quiet_arg(p)
    add_progress_arg(p)
    return parse_flags(p, argv, __file__)


def main(argv=None) -> int:
    args = parse_args(argv)
    from neuroshard.checks import check_int
    from neuroshard.cli import resolve_devices, resolve_ranks
    from neuroshard.formats.dataset import read_dataset
    from neuroshard.formats.plan_file import read_plans
    from neuroshard.formats.task_file import read_tasks
    from neuroshard.torchrec import training_eval as tt
    from neuroshard.torchrec.full_planner import FULL_ALG
    from neuroshard.torchrec.training import TorchRecTrainConfig
    from neuroshard.types.errors import ConfigError, InputError

    if args.max_tasks is not None:
        check_int("--max_tasks", args.max_tasks, 1)
    device, ndevices = resolve_ranks(resolve_devices(args.device, args.gpu_devices), args.ndevices, args.gpu_devices)
    named = [a.strip() for a in args.alg.split(",") if a.strip()]
    with_full = FULL_ALG in named
    if with_full and args.max_mem is None:
        raise ConfigError("--max_mem", f"{FULL_ALG} plans within the memory per rank: give the memory (GB) the "
                                       "plans of --plans were made for")
    # without torchrec_full nothing here plans, and the memory is not used
    problem = Problem.from_args(args, ndevices=ndevices,
                                **({} if args.max_mem is not None else {"max_mem": Problem().max_mem}))
    cfg = TorchRecTrainConfig.from_args(args, problem=problem, device=device)
    dataset = read_dataset(args.data_dir)  # every lookup index checked against its table's rows, naming data.pt
    batch = cfg.batch_size or dataset.batch_size
    if batch > dataset.batch_size:
        raise ConfigError("--batch_size", f"{batch} is more than the dataset's {dataset.batch_size} samples")
    if batch % ndevices:
        raise InputError(args.data_dir, f"batch size {batch} is not a multiple of the {ndevices} ranks")
    tasks = read_tasks(args.task_path, num_tables=len(dataset))
    others = [a for a in named if a != FULL_ALG]
    algs = None if "all" in others else others
    records = [] if algs == [] else tt.select_records(
        tt.merge_plan_files([read_plans(p) for p in args.plans.split(",")]), tasks, dataset.configs,
        None if algs is None else algs, args.max_tasks, ndevices, args.plans)
    if with_full and any(r.alg == FULL_ALG for r in records):
        # "all" took the files' plans of that name too (the paper runtime's evaluation plans it beside the others);
        # TorchRec's full planner plans here, for this runtime, and its plans take their place
        print(f"{FULL_ALG}: its plans in --plans are left out; TorchRec's full planner plans here", file=sys.stderr)
        records = [r for r in records if r.alg != FULL_ALG]
    algs = list(dict.fromkeys(r.alg for r in records)) if algs is None else [a for a in algs
                                                                             if any(r.alg == a for r in records)]
    full = []
    if with_full:
        n = len(tasks) if args.max_tasks is None else min(args.max_tasks, len(tasks))
        task_ids = sorted({r.task for r in records}) if records else list(range(n))
        full = tt.plan_full(task_ids, tasks, dataset.configs, problem, batch)
        for fp in full:
            if fp.sharding_plan is None:
                print(f"{FULL_ALG}: task {fp.task}: {fp.message}", file=sys.stderr)
        if not any(fp.sharding_plan is not None for fp in full):
            raise ConfigError("--max_mem", f"{FULL_ALG}: TorchRec found no plan within {problem.mem_text} per rank "
                                           f"for any of tasks {', '.join(map(str, task_ids))}")
        algs.append(FULL_ALG)
    anchors = ()
    if args.round_anchors:
        check_int("--anchors_per_round", args.anchors_per_round, 1)
        anchors = tt.anchor_records(args.round_anchors, dataset.configs, args.anchors_per_round, ndevices)
    if args.reference not in algs:
        raise ConfigError("--reference", f"{args.reference!r} has no plan to train (algorithms: {', '.join(algs)})")
    config = {k: v for k, v in vars(args).items() if k not in ("quiet", "no_progress", "out_dir", "timeout")}
    config.update(device=device, ndevices=ndevices, seed=problem.seed, algs=algs, plans=os.path.abspath(args.plans))
    cores = os.cpu_count() or 1
    if device == "cpu" and ndevices > cores:
        print(f"note: {ndevices} ranks on {cores} cores take turns on them: every step time holds scheduling waits "
              f"(the summary's noise floor says how much); rounds narrow the intervals more than iterations",
              file=sys.stderr)
    trained = len(records) + sum(fp.sharding_plan is not None for fp in full)
    print(f"training {trained} plans" + (f" and {len(anchors)} anchors" if anchors else "")
          + f" x {cfg.repeats} rounds on {ndevices} {device} ranks "
          f"({cfg.warmup} + {cfg.iters} iterations each, batch {batch}) in one torchrun job (resumable: rerun the "
          f"same command after an interruption)", file=sys.stderr, flush=True)
    summary = tt.run_torchrec_eval(records, tasks, dataset.configs, args.data_dir, batch, cfg, args.out_dir, algs,
                                   args.reference, config=config, show=None if args.quiet else print,
                                   progress=not args.no_progress, full=full, anchors=anchors)
    tt.print_summary(summary)
    print(f"TorchRec job: {summary['measurements']} measurements in {summary['job_s']:.1f} s; wrote "
          f"{os.path.join(args.out_dir, tt.SUMMARY_MD)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_main(main)
