"""Collect cost data of TorchRec's runtime: random plans and sharders' plans of TRAINING tasks, trained in TorchRec.

    python collect_torchrec_cost_data.py --data_dir results/quick/dataset \
        --task_path results/quick/train_tasks/data.txt --eval_task_path results/quick/tasks/data.txt \
        --compute_model results/quick/models/onpolicy/compute.pt \
        --fw_comm_model results/quick/models/onpolicy/comm_4_fw.pt --bw_comm_model results/quick/models/onpolicy/comm_4_bw.pt \
        --ndevices 4 --max_mem 1 --max_tasks 30 \
        --random_plans 3 --alg neuroshard,size_lookup_greedy,torchrec --out_dir results/quick/torchrec_data
    python train_torchrec_cost_model.py --data_dir results/quick/dataset \
        --task_path results/quick/train_tasks/data.txt --results results/quick/torchrec_data/results.json ...

Per task of --task_path (never one of --eval_task_path: an error): the plans of
each --alg (with --dp_min_pooling P, each again with its tables of pooling factor
at least P data-parallel) and --random_plans random plans (each table row-wise or data-parallel
with chance --spread_share, and with --local_world_size K, ranks per host, also
table-row-wise on a random host; then up to --max_splits column splits of random
other tables, each piece on a random device with room); ONE torchrun job
trains a DLRM with each plan under DistributedModelParallel (eval_torchrec.py's
measurement: the slowest rank's step after a barrier, and every rank's phase
times; with --local_world_size, TorchRec told of the hosts) and writes, in
--out_dir, results.json (each plan, its step times and phases), summary.md and
the plans as TorchRec ShardingPlans. Resumable: rerun the same command after an
interruption. See neuroshard/torchrec/runtime_data.py.
With --runtime torchrec (and --runtime_model, a first fit), --alg neuroshard
searches for TorchRec's runtime with that model, its plans labelled
neuroshard[torchrec]: on-policy data, the plans a search picks, for fitting the
model again (train_torchrec_cost_model.py --extra_results; name another --alg
beside it, e.g. size_lookup_greedy, as the fit sees only how plans trained
together differ).
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
    from neuroshard.eval.planning import add_input_args, add_runtime_args
    from neuroshard.planner.registry import add_sharder_args
    from neuroshard.torchrec.training import TorchRecTrainConfig

    p = argparse.ArgumentParser(description="Collect TorchRec runtime cost data: plans of training tasks, trained.")
    add_input_args(p, data_help="dataset dir with table_configs.json and data.pt (the lookups)")
    p.set_defaults(alg="neuroshard,size_lookup_greedy,torchrec")
    add_flag(p, "eval_task_path")
    p.add_argument("--random_plans", type=int, default=3, help="random plans per task (default: 3)")
    p.add_argument("--max_splits", type=int, default=6,
                   help="a random plan makes 0..this many column splits (default: 6)")
    p.add_argument("--spread_share", type=float, default=0.0,
                   help="the chance that a random plan makes a table row-wise or data-parallel (or, with "
                        "--local_world_size, table-row-wise), so the runtime model learns what those cost "
                        "(default: 0, none)")
    p.add_argument("--dp_min_pooling", type=float, default=None,
                   help="also train each --alg plan again with its tables of at least this pooling factor (that "
                        "can be replicated) data-parallel, labelled ALG+dp: the trade a search weighs for a hot "
                        "table (default: none)")
    add_runtime_args(p)
    add_device_arg(p)
    add_flag(p, "out_dir", "data/cost_data/torchrec")
    TorchRecTrainConfig.add_args(p)
    p.set_defaults(repeats=1)
    add_sharder_args(p)
    add_quiet_arg(p)
    add_progress_arg(p)
    return parse_flags(p, argv, __file__)


def main(argv=None) -> int:
    args = parse_args(argv)
    from neuroshard.checks import check_float, check_int
    from neuroshard.cli import resolve_devices, resolve_ranks
    from neuroshard.eval import onpolicy
    from neuroshard.eval.planning import inputs_from_args, label_runtime, resolve_algs, with_runtime
    from neuroshard.formats.task_file import read_tasks
    from neuroshard.planner.registry import sharder_options
    from neuroshard.torchrec import runtime_data
    from neuroshard.torchrec import training_eval as tt
    from neuroshard.torchrec.training import TorchRecTrainConfig
    from neuroshard.types.errors import InputError

    check_int("--random_plans", args.random_plans, 0)
    check_int("--max_splits", args.max_splits, 0)
    check_float("--spread_share", args.spread_share, 0.0, 1.0)
    if args.dp_min_pooling is not None:
        check_float("--dp_min_pooling", args.dp_min_pooling, 0.0, lo_open=True)
    device, ndevices = resolve_ranks(resolve_devices(args.device, args.gpu_devices), args.ndevices, args.gpu_devices)
    problem = Problem.from_args(args, ndevices=ndevices)
    cfg = TorchRecTrainConfig.from_args(args, problem=problem, device=device)
    inputs = with_runtime(args, inputs_from_args(args, problem))
    if inputs.batch_size is None:
        raise InputError(args.data_dir, "no data.pt: TorchRec training needs the dataset's lookups")
    batch = cfg.batch_size or inputs.batch_size
    if batch % ndevices:
        raise InputError(args.data_dir, f"batch size {batch} is not a multiple of the {ndevices} ranks")
    if args.eval_task_path:
        onpolicy.check_disjoint(inputs.tasks, read_tasks(args.eval_task_path, num_tables=len(inputs.configs)),
                                args.task_path, args.eval_task_path)
    options = sharder_options(args, batch)
    algs = resolve_algs(args.alg, options) if args.alg else []
    records = runtime_data.collection_records(inputs.configs, inputs.tasks, algs, inputs.models, problem,
                                              args.random_plans, args.max_splits, options, args.spread_share,
                                              args.dp_min_pooling)
    if not records:
        raise InputError(args.task_path, "no plan fits: nothing to train")
    if args.runtime != "paper":  # neuroshard's plans searched for this runtime: neuroshard[torchrec], on-policy data
        records, _ = label_runtime(records, algs, args.runtime)
    labels = list(dict.fromkeys(r.alg for r in records))
    config = {k: v for k, v in vars(args).items() if k not in ("quiet", "no_progress", "out_dir", "timeout")}
    config.update(problem.to_json())
    config.update(device=device, algs=algs)
    print(f"training {len(records)} plans of {len(inputs.tasks)} training tasks x {cfg.repeats} rounds on "
          f"{ndevices} {device} ranks ({cfg.warmup} + {cfg.iters} iterations each, batch {batch}) in one torchrun "
          f"job (resumable: rerun the same command after an interruption)", file=sys.stderr, flush=True)
    summary = tt.run_torchrec_eval(records, inputs.tasks, inputs.configs, args.data_dir, batch, cfg, args.out_dir,
                                   labels, labels[0], config=config, show=None if args.quiet else print,
                                   progress=not args.no_progress)
    print(f"TorchRec job: {summary['measurements']} plans trained in {summary['job_s']:.1f} s; wrote "
          f"{os.path.join(args.out_dir, tt.RESULTS_JSON)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_main(main)
