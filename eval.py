"""Shard every task with one (or every) algorithm and measure the plans on real kernels and real all-to-all.

    python eval.py --alg neuroshard
    python eval.py --data_dir results/quick/dataset --task_path results/quick/tasks/data.txt \
        --compute_model results/quick/models/compute.pt --fw_comm_model results/quick/models/comm_4_fw.pt \
        --bw_comm_model results/quick/models/comm_4_bw.pt --alg all --ndevices 4 --max_mem 1 \
        --max_tasks 10 --out_dir results/quick/hw                 # 4 CPU ranks (gloo)
    python eval.py ... --gpu_devices 0,1,2,3 --max_mem 4          # 4 GPUs (NCCL)
    python eval.py ... --plans results/quick/sim/plans.json       # measure eval_simulator.py's plans
    python eval.py ... --end_to_end                               # also time the real step sequence
    python eval.py ... --plans results/quick/sim/plans.json \
        --unmeasured_plans results/quick/sim_unmeasured/plans.json \
        --unmeasured_task_path results/quick/tasks_unmeasured/data.txt   # prediction-powered verdicts
    python eval.py ... --gpu_devices 0,1,2,3 --ndevices 8 --nnodes 2 --node_rank N \
        --rdzv_endpoint node0.example:29500 --plans results/sim/plans.json   # 2 machines: run on each, N = 0, 1

The plans are computed once, by the code eval_simulator.py uses
(`neuroshard.eval.planning.compute_plans`, which also gives each plan's
estimated cost), written to `<out_dir>/plans.json`, and measured by ONE
torchrun job: every rank builds its shard's FBGEMM op with the real lookups
and times forward+backward (ranks take turns), then the backward and the
forward all-to-all of the plan's dims; per-rank total = the sum, plan cost =
the max over ranks (see neuroshard/measure/plan_job.py). Out-of-memory plans are
reported and not run. Per task it prints the measured cost beside the
estimate, then `Average` and `Valid v / N` per algorithm as the upstream
script did, the comparison table across algorithms and the simulator's
accuracy (MAPE, Spearman, pairwise ordering agreement). Writes config.json,
plans.json, results.json/.csv, ranks.csv and summary.json/.csv/.md to --out_dir.

With --plans, every record is checked against the task file (a duplicate, a
task the file does not have, or plans made for another task file are errors)
and its estimate is simulated again, never read from the file.

Interrupted (a failure, kill -9 or Ctrl-C)? Rerun the same command: the plans
measured so far are kept in <out_dir>/.partial/ (measurement log, settings,
the jobs' rank logs) and only the others are measured; .partial/ is removed
once every plan is measured.
"""

from __future__ import annotations

import argparse
import os
import sys

from neuroshard.cli import run_main
from neuroshard.eval.planning import add_input_args
from neuroshard.planner.registry import add_sharder_args, sharder_options
from neuroshard.problem import Problem
from neuroshard.settings import add_flag, parse_flags


def parse_args(argv=None) -> argparse.Namespace:
    from neuroshard.cli import add_device_arg, add_progress_arg, add_quiet_arg
    from neuroshard.eval.refine import RefineConfig
    from neuroshard.measure.plan_job import HardwareConfig

    p = argparse.ArgumentParser(description="Benchmark sharding plans on hardware (measured costs).")
    add_input_args(p, data_help="dataset dir with table_configs.json and data.pt (the lookups the kernels run)")
    add_flag(p, "round_anchors", help="plans of tasks that are not evaluated (a plans.json naming its tables: the "
                                      "pipeline's step 5e plans tasks no model trained on) measured in every round "
                                      "of the evaluation: each round's speed against the models, by which that "
                                      "round's measurements are compared (round_calibration.json; the estimates are "
                                      "not changed)")
    add_flag(p, "anchors_per_round")
    p.add_argument("--plan_speed", default=None,
                   help="an eval.py --out_dir of other plans (e.g. training tasks' on-policy plans) measured just "
                        "before this run under the same --calibration: the models are scaled further by their "
                        "measured / estimated medians per part (compute, fw, bw), so the estimates and the 80%% "
                        "band are for the plan job's speed now; the pipeline does not pass it (eval/drift.py says "
                        "why) (default: unscaled)")
    add_device_arg(p)
    add_flag(p, "out_dir", "results/eval")
    add_flag(p, "plans", help="measure the plans of this file (eval_simulator.py's plans.json for the same "
                              "--task_path) instead of computing them")
    p.add_argument("--unmeasured_plans", default=None,
                   help="prediction-powered verdicts: eval_simulator.py's plans.json for tasks that are not measured "
                        "(--unmeasured_task_path, drawn by gen_tasks.py as --task_path's but with another "
                        "--seed), made with the same settings as --plans; their estimates, simulated again with "
                        "these models, tighten the hardware verdicts without biasing them (eval/intervals.py) "
                        "(default: verdicts from the measurements alone)")
    p.add_argument("--unmeasured_task_path", default=None, help="the task file of --unmeasured_plans")
    HardwareConfig.add_args(p)
    add_sharder_args(p)
    RefineConfig.add_args(p)
    add_quiet_arg(p)
    add_progress_arg(p)
    return parse_flags(p, argv, __file__)


def main(argv=None) -> int:
    args = parse_args(argv)
    from neuroshard.checks import check_int
    from neuroshard.cli import resolve_devices, resolve_ranks
    from neuroshard.eval import hardware as hw
    from neuroshard.eval import planning as ev
    from neuroshard.eval import results
    from neuroshard.eval.refine import RefineConfig, refine_records
    from neuroshard.formats.dataset import read_dataset
    from neuroshard.measure.launch import LaunchConfig
    from neuroshard.measure.plan_job import HardwareConfig, follow, runnable
    from neuroshard.types.errors import ConfigError, InputError

    launch = LaunchConfig.from_args(args)
    device, ndevices = resolve_ranks(resolve_devices(args.device, args.gpu_devices), args.ndevices, args.gpu_devices,
                                     launch.nnodes, launch.nproc_per_node)
    problem = Problem.from_args(args, ndevices=ndevices)
    cfg = HardwareConfig.from_args(args, problem=problem, device=device, launch=launch.for_world(ndevices))
    refine = RefineConfig.from_args(args)
    if refine.refine and (args.plans or launch.multi_node):
        raise ConfigError("--refine", "refines the plans eval.py makes on one machine: leave out --plans (refine "
                                      "with eval_simulator.py --refine instead) and the multi-node flags")
    launch = cfg.launch
    # Every lookup index is checked against its table's rows here, naming data.pt: the ranks would
    # otherwise find a bad one only after start-up. The ranks exchange [B/ndevices, sum(dims)] slices.
    batch = read_dataset(args.data_dir).batch_size
    if batch % ndevices:
        raise InputError(args.data_dir, f"batch size {batch} is not a multiple of the {ndevices} ranks")
    options = sharder_options(args, batch)  # one-line error on a bad value, before any work
    if not launch.writes_outputs:  # lend this node's ranks to node 0's job; node 0 plans and writes
        print(f"node {launch.node_rank}: lending {launch.nproc_per_node} ranks to node 0's job at "
              f"{launch.rdzv_endpoint}", file=sys.stderr, flush=True)
        done = follow(args.data_dir, cfg)
        print(f"node {launch.node_rank}: {done} plans measured with node 0 (node 0 writes the results)")
        return 0

    inputs = ev.inputs_from_args(args, problem)
    n = len(inputs.tasks)
    if args.plans:
        records, algs = ev.plans_from_file(args.plans, inputs, args.task_path, args.alg, problem)
    else:
        algs = ev.resolve_algs(args.alg, options)
        refine.check_algs(algs)
        ev.check_learned_policies(algs, options, problem)
        records = ev.compute_plans(inputs.configs, inputs.tasks, algs, problem, inputs.models, options=options,
                                   progress=not args.no_progress)

    unmeasured = None
    if args.unmeasured_plans or args.unmeasured_task_path:
        if not (args.unmeasured_plans and args.unmeasured_task_path):
            raise ConfigError("--unmeasured_plans", "needs both --unmeasured_plans and --unmeasured_task_path")
        unmeasured = ev.unmeasured_plans(args.unmeasured_plans, args.unmeasured_task_path, inputs, args.plans,
                                         args.task_path, algs, problem)

    def show(line: str) -> None:
        if not args.quiet:
            print(line, flush=True)

    if refine.refine:  # the measured best candidates; the evaluation below measures them afresh
        records = refine_records(records, inputs.tasks, inputs.configs, inputs.models, refine, cfg, args.data_dir,
                                 args.task_path, os.path.join(args.out_dir, "refine"), problem, options, show=show)

    config = {k: v for k, v in vars(args).items() if k not in ("quiet", "no_progress")}
    config.update(problem.to_json())
    config.update(device=device, fw_comm_model=inputs.fw_comm_model,
                  bw_comm_model=inputs.bw_comm_model, algs=algs, num_tasks=n, batch_size=batch,
                  calibration_factors=inputs.calibration, plan_speed_factors=inputs.plan_speed)
    measured = len(runnable(records))
    print(f"measuring {measured} plans x {args.repeats} ({len(records) - measured} not run) on {ndevices} {device} "
          f"ranks in one torchrun job (resumable: rerun the same command after an interruption)", file=sys.stderr,
          flush=True)
    if unmeasured is not None:
        config["unmeasured_tasks"] = len({r.task for r in unmeasured})
    anchors = ()
    if args.round_anchors:
        from neuroshard.eval.round_calibration import anchor_plans

        check_int("--anchors_per_round", args.anchors_per_round, 1)
        anchors = anchor_plans(args.round_anchors, inputs.configs, inputs.models, problem, args.anchors_per_round)
    _, summary = hw.run_evaluation(records, args.data_dir, args.task_path, cfg, args.out_dir, algs, n,
                                   config=config, show=show, unmeasured=unmeasured, anchors=anchors)
    results.print_summary(summary)
    t = summary.hardware
    if t.measurements:
        per = f", then {t.per_plan_s:.1f} s per plan" if t.per_plan_s is not None else ""
        print(f"hardware job: {t.measurements} measurements in {t.job_s:.1f} s (first result after "
              f"{t.first_plan_s:.1f} s{per})", file=sys.stderr)
    if t.measurements_resumed:
        print(f"{t.measurements_resumed} measurements were made by an earlier, interrupted run", file=sys.stderr)
    print(f"wrote {os.path.join(args.out_dir, results.SUMMARY_MD)} and the rest of the results", file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_main(main)
