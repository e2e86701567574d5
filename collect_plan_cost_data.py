"""Collect cost data where plans live: the shards and all-to-alls of the plans sharders make on TRAINING tasks.

    python collect_plan_cost_data.py --data_dir results/quick/dataset --task_path results/quick/train_tasks/data.txt \
        --eval_task_path results/quick/tasks/data.txt --compute_model results/quick/models_random/compute.pt \
        --fw_comm_model results/quick/models_random/comm_4_fw.pt --bw_comm_model results/quick/models_random/comm_4_bw.pt \
        --ndevices 4 --max_mem 1 --max_tasks 20 --alg neuroshard,neuroshard_plus,size_lookup_greedy \
        --plus_lambdas 0,0.5,1 --repeats 2 --out_dir results/quick/plan_data
    python train_compute_cost_model.py --data_dir results/quick/compute_data --plan_data_dir results/quick/plan_data/compute ...

Plans every task of --task_path (never one of --eval_task_path: an error) with
each --alg and the given cost models, measures every plan on hardware exactly
as eval.py does (one torchrun job, --repeats rounds; resumable: rerun the same
command after an interruption), and writes, under --out_dir:

* compute/ — one `ids cost_ms` sample per rank's shard and repeat, over the
  augmented table list of the random compute data (same dataset, --max_dim);
* comm/ — one `dims sleeps fw bw` sample per plan and repeat (sleeps: the start
  delays its forward exchange ran with);
* hw/ — the plans and their measured results (eval.py's files);
* lambda.json — with --plus_lambdas: NeuroShard+ planned with each value of its
  robust objective's weight, and the value chosen: the smallest, unless another's
  plans were significantly cheaper on hardware (95% paired interval below zero).

Train the cost models on the random and these samples together with
--plan_data_dir (train_compute_cost_model.py, train_comm_cost_model.py).
"""

from __future__ import annotations

import argparse
import sys

from neuroshard.cli import add_device_arg, add_progress_arg, add_quiet_arg, run_main
from neuroshard.eval.planning import add_input_args
from neuroshard.planner.registry import add_sharder_args
from neuroshard.problem import Problem
from neuroshard.settings import add_flag, parse_flags


def parse_args(argv=None) -> argparse.Namespace:
    from neuroshard.measure.plan_job import HardwareConfig

    p = argparse.ArgumentParser(description="Collect on-policy cost data: plans of training tasks, measured.")
    add_input_args(p, data_help="dataset dir with table_configs.json and data.pt (the lookups the kernels run)")
    p.set_defaults(alg="neuroshard,neuroshard_plus,size_lookup_greedy,torchrec")
    add_flag(p, "eval_task_path")
    p.add_argument("--plus_lambdas", default="",
                   help="plan NeuroShard+ once per value of its robust objective's weight (e.g. 0,0.5,1) and choose "
                        "the smallest unless another's plans are significantly cheaper on hardware (lambda.json); "
                        "default: --plus_lambda only")
    add_flag(p, "max_dim", help="the dim set of the random compute data")
    add_device_arg(p)
    add_flag(p, "out_dir", "data/cost_data/plans")
    HardwareConfig.add_args(p, skip=("launch",))
    add_sharder_args(p)
    add_quiet_arg(p)
    add_progress_arg(p)
    return parse_flags(p, argv, __file__)


def main(argv=None) -> int:
    args = parse_args(argv)
    from neuroshard.checks import check_max_dim, parse_float_list
    from neuroshard.cli import resolve_devices, resolve_ranks
    from neuroshard.eval import onpolicy
    from neuroshard.eval.planning import inputs_from_args, resolve_algs
    from neuroshard.formats.dataset import read_dataset
    from neuroshard.formats.task_file import read_tasks
    from neuroshard.measure.plan_job import HardwareConfig
    from neuroshard.planner.registry import sharder_options
    from neuroshard.types.errors import ConfigError, InputError

    check_max_dim("--max_dim", args.max_dim)
    lambdas = parse_float_list(args.plus_lambdas, "--plus_lambdas", lo=0.0) if args.plus_lambdas else []
    device, ndevices = resolve_ranks(resolve_devices(args.device, args.gpu_devices), args.ndevices, args.gpu_devices)
    problem = Problem.from_args(args, ndevices=ndevices)
    cfg = HardwareConfig.from_args(args, problem=problem, device=device)
    batch = read_dataset(args.data_dir).batch_size
    if batch % ndevices:
        raise InputError(args.data_dir, f"batch size {batch} is not a multiple of the {ndevices} ranks")
    options = sharder_options(args, batch)
    algs = resolve_algs(args.alg, options)
    if lambdas and "neuroshard_plus" not in algs:
        raise ConfigError("--plus_lambdas", f"{args.plus_lambdas} weighs NeuroShard+'s objective, but --alg "
                                            f"{','.join(algs)} does not plan neuroshard_plus")
    inputs = inputs_from_args(args, problem)
    if args.eval_task_path:
        onpolicy.check_disjoint(inputs.tasks, read_tasks(args.eval_task_path, num_tables=len(inputs.configs)),
                                args.task_path, args.eval_task_path)

    def show(line: str) -> None:
        if not args.quiet:
            print(line, flush=True)

    config = {k: v for k, v in vars(args).items() if k not in ("quiet", "no_progress")}
    config.update(problem.to_json())
    config.update(device=device, algs=algs, batch_size=batch,
                  calibration_factors=inputs.calibration)
    written = onpolicy.collect(inputs, algs, lambdas, options, cfg, args.data_dir, args.task_path, args.out_dir,
                               args.max_dim, config=config, show=show, progress=not args.no_progress)
    print(f"{written['plans']} plans measured: {written['compute_samples']} compute samples in "
          f"{written['compute_dir']}, {written['comm_samples']} comm samples in {written['comm_dir']}")
    if "lambda" in written:
        lam = written["lambda"]
        means = ", ".join(f"{k}: {v:.3f} ms" for k, v in lam.mean_ms.items() if v is not None)
        print(f"neuroshard_plus on hardware by plus_lambda ({lam.tasks} tasks): {means}; chosen {lam.chosen:g}",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_main(main)
