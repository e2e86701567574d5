"""Shard every task with one (or every) algorithm and estimate the plans' costs with the simulator.

    python eval_simulator.py --alg neuroshard
    python eval_simulator.py --data_dir data/dlrm_datasets --task_path data/tasks/4_gpu/data.txt \
        --compute_model models/compute.pt --fw_comm_model models/comm_4_fw.pt \
        --bw_comm_model models/comm_4_bw.pt --ndevices 4 --max_mem 4 --alg all --out_dir results/sim

Per task it prints the plan and its estimated cost, then the mean cost over
the valid tasks and `Valid v / N`, as the upstream script did. `--alg all`
runs every registered algorithm on the same tasks and adds the comparison
table (mean cost over the tasks valid for all of them, NeuroShard's gain over
each). With `--out_dir`, it writes config.json, plans.json (plans with a
readable per-table view), results.json/.csv and summary.json/.csv/.md there.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

from neuroshard.cli import add_device_arg, add_progress_arg, add_quiet_arg, run_main
from neuroshard.eval.planning import add_input_args, add_runtime_args
from neuroshard.planner.registry import add_sharder_args, sharder_options
from neuroshard.problem import Problem
from neuroshard.settings import add_flag, parse_flags


def parse_args(argv=None) -> argparse.Namespace:
    from neuroshard.eval.refine import RefineConfig
    from neuroshard.measure.plan_job import HardwareConfig

    p = argparse.ArgumentParser(description="Benchmark sharding with the simulator (estimated costs, no hardware "
                                            "unless --refine).")
    add_input_args(p)
    add_flag(p, "out_dir", help="write plans, results and the summary here (default: print only)")
    add_runtime_args(p)
    add_sharder_args(p)
    RefineConfig.add_args(p)
    add_device_arg(p)
    # how --refine measures its candidates (eval.py's measurement, one measurement per --refine_repeats round)
    HardwareConfig.add_args(p, skip=("repeats", "end_to_end", "launch"))
    add_quiet_arg(p)
    add_progress_arg(p)
    return parse_flags(p, argv, __file__)


def main(argv=None) -> int:
    args = parse_args(argv)
    from neuroshard.eval import planning as ev
    from neuroshard.eval import results
    from neuroshard.eval.refine import RefineConfig, refine_records
    from neuroshard.eval.summary import REFERENCE_ALG, summarize
    from neuroshard.types.errors import ConfigError

    problem = Problem.from_args(args)
    refine = RefineConfig.from_args(args)
    if refine.refine and args.runtime != "paper":
        raise ConfigError("--refine", "measures the paper's execution on hardware; not with --runtime torchrec")
    hw = None
    if refine.refine:  # how the candidates are measured: eval.py's settings, checked before any work
        from neuroshard.cli import resolve_devices, resolve_ranks
        from neuroshard.measure.plan_job import HardwareConfig as Hw

        device, n = resolve_ranks(resolve_devices(args.device, args.gpu_devices), args.ndevices, args.gpu_devices)
        problem = Problem.from_args(args, ndevices=n)
        hw = Hw.from_args(args, problem=problem, device=device)
    options = sharder_options(args, None)  # one-line error on a bad value, before any work
    algs = ev.resolve_algs(args.alg, options)
    refine.check_algs(algs)
    ev.check_learned_policies(algs, options, problem)
    inputs = ev.inputs_from_args(args, problem)
    inputs = ev.with_runtime(args, inputs)
    n = len(inputs.tasks)
    options = sharder_options(args, inputs.batch_size)

    def show(rec):
        if not args.quiet:
            from tqdm import tqdm
            tqdm.write(ev.format_record(rec, n), file=sys.stdout)

    records = ev.compute_plans(inputs.configs, inputs.tasks, algs, problem, inputs.models, options=options,
                               progress=not args.no_progress, on_record=show)
    if args.runtime != "paper":
        records, algs = ev.label_runtime(records, algs, args.runtime)
    if refine.refine:
        work = os.path.join(args.out_dir, "refine") if args.out_dir else tempfile.mkdtemp(prefix="refine_")
        records = refine_records(records, inputs.tasks, inputs.configs, inputs.models, refine, hw, args.data_dir,
                                 args.task_path, work, problem, options,
                                 show=None if args.quiet else print)
    # under another runtime the reference is NeuroShard searched for it (e.g. neuroshard[torchrec])
    summary = summarize(records, algs, n, reference=ev.runtime_label(REFERENCE_ALG, args.runtime))
    results.print_summary(summary)
    if args.out_dir:
        config = {k: v for k, v in vars(args).items() if k not in ("quiet", "no_progress")}
        config.update(problem.to_json())
        config.update(fw_comm_model=inputs.fw_comm_model, bw_comm_model=inputs.bw_comm_model, algs=algs,
                      calibration_factors=inputs.calibration,
                      num_tasks=n, batch_size=inputs.batch_size)
        results.write_outputs(args.out_dir, records, summary, config)
        print(f"wrote {os.path.join(args.out_dir, results.SUMMARY_MD)} and the rest of the results", file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_main(main)
