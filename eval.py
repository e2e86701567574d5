"""Shard every task with one (or every) algorithm and measure the plans on real kernels and real all-to-all.

    python eval.py --alg neuroshard
    python eval.py --data_dir results/quick/dataset --task_path results/quick/tasks/data.txt \
        --compute_model results/quick/models/compute.pt --fw_comm_model results/quick/models/comm_4_fw.pt \
        --bw_comm_model results/quick/models/comm_4_bw.pt --alg all --ndevices 4 --max_mem 1 \
        --max_tasks 10 --out_dir results/quick/hw                 # 4 CPU ranks (gloo)
    python eval.py ... --gpu_devices 0,1,2,3 --max_mem 4          # 4 GPUs (NCCL)
    python eval.py ... --plans results/quick/sim/plans.json       # measure eval_simulator.py's plans
    python eval.py ... --end_to_end                               # also time the real step sequence

The plans are computed once, by the code eval_simulator.py uses
(`neuroshard.eval.plans.compute_plans`, which also gives each plan's
estimated cost), written to `<out_dir>/plans.json`, and measured by ONE
torchrun job: every rank builds its shard's FBGEMM op with the real lookups
and times forward+backward (ranks take turns), then the backward and the
forward all-to-all of the plan's dims; per-rank total = the sum, plan cost =
the max over ranks (see neuroshard/eval/hardware_rank.py). Out-of-memory plans are
reported and not run. Per task it prints the measured cost beside the
estimate, then `Average` and `Valid v / N` per algorithm as the upstream
script did, the comparison table across algorithms and the simulator's
accuracy (MAPE, Spearman, pairwise ordering agreement). Writes config.json,
plans.json, results.json/.csv, ranks.csv and summary.json/.csv/.md to --out_dir.
"""

from __future__ import annotations

import argparse
import os
import sys

from neuroshard.cli import run_main
from neuroshard.eval.plans import add_input_args
from neuroshard.planner.search import SearchConfig
from neuroshard.planner.search_plus import PlusConfig


def parse_args(argv=None) -> argparse.Namespace:
    from neuroshard.cli import add_device_arg
    from neuroshard.eval.hardware import DEFAULT_TIMEOUT_S, FW_SLEEP_MODES

    p = argparse.ArgumentParser(description="Benchmark sharding plans on hardware (measured costs).")
    add_input_args(p, data_help="dataset dir with table_configs.json and data.pt (the lookups the kernels run)")
    p.add_argument("--gpu_devices", default=None,
                   help="GPUs to use, one rank each, e.g. 0,1,2,3 (implies --device cuda)")
    p.add_argument("--ndevices", type=int, default=None,
                   help="number of ranks: CPU processes (default 4), or GPUs (default: all visible, "
                        "or those of --gpu_devices)")
    add_device_arg(p)
    p.add_argument("--out_dir", default="results/eval", help="output directory (default: results/eval)")
    p.add_argument("--plans", default=None,
                   help="measure the plans of this file (eval_simulator.py's plans.json for the same "
                        "--task_path) instead of computing them")
    g = p.add_argument_group("measurement")
    g.add_argument("--warmup", type=int, default=5, help="untimed iterations per measurement (default: 5)")
    g.add_argument("--iters", type=int, default=10, help="timed iterations per measurement, median kept (default: 10)")
    g.add_argument("--end_to_end", action="store_true",
                   help="also time the real step per iteration (fwd compute -> fwd all-to-all -> bwd all-to-all "
                        "-> bwd compute, all ranks at once) and report it beside the sum-of-parts cost")
    g.add_argument("--fw_sleep", choices=FW_SLEEP_MODES, default="skew",
                   help="forward all-to-all: 'skew' delays each rank by its measured compute+backward skew, "
                        "as the simulator assumes; 'none' starts all ranks together (default: skew)")
    g.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                   help=f"collective timeout in s; a hung rank ends the job after about this "
                        f"(default: {DEFAULT_TIMEOUT_S:g})")
    SearchConfig.add_args(p)
    PlusConfig.add_args(p)
    p.add_argument("--quiet", action="store_true", help="no per-task lines")
    p.add_argument("--no_progress", action="store_true", help="no progress bar while planning")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    from neuroshard.cli import resolve_device, resolve_ranks
    from neuroshard.eval import hardware as hw
    from neuroshard.eval import plans as ev
    from neuroshard.eval import results
    from neuroshard.formats import read_dataset, read_plans
    from neuroshard.types import InputError, NeuroShardError

    if not args.max_mem > 0:
        raise NeuroShardError(f"--max_mem must be > 0 GB, got {args.max_mem}")
    device, ndevices = resolve_ranks(resolve_device(args.device), args.ndevices, args.gpu_devices)
    cfg = hw.HardwareConfig(ndevices=ndevices, device=device, gpu_devices=args.gpu_devices, warmup=args.warmup,
                            iters=args.iters, fw_sleep=args.fw_sleep, end_to_end=args.end_to_end,
                            timeout=args.timeout, seed=args.seed)
    cfg.validate()
    # one-line error on a bad value, before any work
    options = {**SearchConfig.options_from_args(args), **PlusConfig.options_from_args(args)}
    # The ranks exchange [B/ndevices, sum(dims)] slices: check B before planning.
    batch = read_dataset(args.data_dir, validate=False).batch_size
    if batch % ndevices:
        raise InputError(args.data_dir, f"batch size {batch} is not a multiple of the {ndevices} ranks")

    fw_path = args.fw_comm_model or ev.default_comm_model_path(ndevices, "fw")
    bw_path = args.bw_comm_model or ev.default_comm_model_path(ndevices, "bw")
    inputs = ev.load_inputs(args.data_dir, args.task_path, args.compute_model, fw_path, bw_path, ndevices,
                            args.max_tasks)
    n = len(inputs.tasks)
    if args.plans:
        records = [r for r in read_plans(args.plans) if r.task < n]
        algs = list(dict.fromkeys(r.alg for r in records))
        if args.alg != "all":
            wanted = ev.resolve_algs(args.alg)
            records = [r for r in records if r.alg in wanted]
            algs = [a for a in wanted if a in algs]
        records = hw.check_plans(records, inputs.configs, inputs.tasks, ndevices, args.max_mem)
    else:
        algs = ev.resolve_algs(args.alg)
        records = ev.compute_plans(inputs.configs, inputs.tasks, algs, ndevices, args.max_mem, inputs.models,
                                   seed=args.seed, options=options, progress=not args.no_progress)

    def show(line: str) -> None:
        if not args.quiet:
            print(line, flush=True)

    config = {k: v for k, v in vars(args).items() if k not in ("quiet", "no_progress")}
    config.update(device=device, ndevices=ndevices, fw_comm_model=fw_path, bw_comm_model=bw_path, algs=algs,
                  num_tasks=n, batch_size=batch)
    runnable = len(hw.runnable(records))
    print(f"measuring {runnable} plans ({len(records) - runnable} not run) on {ndevices} {device} ranks "
          f"in one torchrun job", file=sys.stderr, flush=True)
    _, summary = hw.run_evaluation(records, args.data_dir, args.task_path, cfg, args.out_dir, algs, n,
                                   config=config, show=show)
    results.print_summary(summary)
    t = summary["hardware"]
    if t["plans_measured"]:
        per = f", then {t['per_plan_s']:.1f} s per plan" if t["per_plan_s"] is not None else ""
        print(f"hardware job: {t['plans_measured']} plans in {t['job_s']:.1f} s (first result after "
              f"{t['first_plan_s']:.1f} s{per})", file=sys.stderr)
    print(f"wrote {os.path.join(args.out_dir, results.SUMMARY_MD)} and the rest of the results", file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_main(main)
