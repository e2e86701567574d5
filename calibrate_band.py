"""Calibrate the predicted 80% band on measured plans of training tasks: the models' plan-level error.

    python calibrate_band.py --data_dir results/quick/dataset \\
        --task_path results/quick/train_tasks/data.txt --eval_task_path results/quick/tasks/data.txt \\
        --results results/quick/plan_data/hw/results.json --models results/quick/models/onpolicy \\
        --heldout_models results/quick/models --ndevices 4 --max_mem 1

The plans that collect_plan_cost_data.py measured on TRAINING tasks (its
hw/results.json) are re-simulated under models never trained on their shards
(--heldout_models, the random data's; without it under --models itself, in
sample, which fits these plans far better than it will fit the evaluation's,
and the band then holds too few of the evaluation's measurements): each plan's
cost samples (the ensemble's members with the noise of one measurement,
planner/costs/uncertainty.py) against its measured costs. The machine's speed
at the time (the median of measured / expected cost) is divided out, then the
smallest plan-level error sd that puts 80% of the measurements inside the band
is found (eval/onpolicy.py plan_error), after measuring the compute model's
per-rank error that a plan's ranks do not share (eval/onpolicy.py rank_error;
net of the ranks' own measurement noise, which the spread draws apart, from
the plans measured twice), which the predicted spread draws for
every rank. The plan job's own noise of one compute measurement, from the
same plans measured twice, is printed beside the collection's noise floor
that the spread draws. Both errors are written into the forward
comm checkpoint of --models ("plan_error"): simulations with these models widen their
reported band by the plan-level term (the same relative size for every plan,
so the search's objective leaves it out), and the per-rank error raises the
expected cost of plans whose ranks finish together (NeuroShard+'s robust
objective, planner/costs/uncertainty.py). Writes the report to --out_path (JSON,
default <models>/plan_error_<n>.json) and prints one line.
"""

import argparse
import sys
from pathlib import Path

from neuroshard.checks import check_output_file
from neuroshard.cli import run_main
from neuroshard.formats.side_files import (
    PlanErrorReport,
    plan_error_json,
    write_side_file,
)
from neuroshard.problem import Problem
from neuroshard.settings import add_flag, parse_flags
from neuroshard.types.errors import InputError


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_flag(p, "data_dir", required=True, help="dataset dir with table_configs.json")
    add_flag(p, "task_path", required=True, help="the TRAINING task file the plans were made for")
    add_flag(p, "eval_task_path")
    add_flag(p, "results", required=True, help="collect_plan_cost_data.py's hw/results.json (measured plans)")
    add_flag(p, "models", required=True, help="folder with compute.pt, comm_<n>_fw.pt, comm_<n>_bw.pt (its forward "
                                              "checkpoint gets the \"plan_error\")")
    p.add_argument("--heldout_models", default=None,
                   help="folder of models NOT trained on these plans' shards (the random data's), whose plan-level "
                        "and per-rank error on them are the out-of-sample estimates written into --models "
                        "(default: --models itself, in sample, which fits these plans too well)")
    Problem.add_args(p, skip=("seed", "local_world_size"),
                     helps={"ndevices": "devices of the plans", "max_mem": "memory per device in GB the plans were "
                                                                           "made for"})
    add_flag(p, "out_path", help="JSON report (default: <models>/plan_error_<n>.json)")
    return parse_flags(p, argv, __file__)


def main(argv=None) -> int:
    args = parse_args(argv)
    from neuroshard.eval.onpolicy import check_disjoint, plan_error
    from neuroshard.formats.dataset import read_table_configs
    from neuroshard.formats.plan_file import read_measured_plans
    from neuroshard.formats.task_file import read_tasks
    from neuroshard.planner.costs.cost_models import (
        CostModels,
        noise_floor_sd,
        save_model,
    )

    problem = Problem.from_args(args)
    n = problem.ndevices
    folder = Path(args.models)
    models = CostModels.load(folder, n)  # InputError naming a missing folder or checkpoint
    paths = [folder / name for name in ("compute.pt", f"comm_{n}_fw.pt", f"comm_{n}_bw.pt")]
    out_path = Path(args.out_path) if args.out_path else folder / plan_error_json(n)
    check_output_file("--out_path", out_path)
    configs = read_table_configs(Path(args.data_dir) / "table_configs.json")
    tasks = read_tasks(args.task_path, num_tables=len(configs))
    if args.eval_task_path:
        check_disjoint(tasks, read_tasks(args.eval_task_path, num_tables=len(configs)), args.task_path,
                       args.eval_task_path)
    records = read_measured_plans(args.results, tasks, configs, args.task_path)
    heldout = CostModels.load(args.heldout_models, n) if args.heldout_models else None
    error = plan_error(records, tasks, configs, models, problem, heldout)
    if error is None:
        raise InputError(args.results, "no measured plan to calibrate the band on")
    save_model(models.fw, paths[1], extra={**models.fw.checkpoint_extra, "plan_error": error.to_json()})
    write_side_file(out_path, PlanErrorReport(str(args.results), str(args.task_path), [str(x) for x in paths],
                                              args.heldout_models, error, args.heldout_models is not None))
    floor = noise_floor_sd(models.compute)
    drawn = f"one compute measurement drawn from the collection's floor {100 * floor:.1f}%"
    if error.compute_sd is not None:
        drawn += (f" (the plan job's, from the plans measured twice, {100 * error.compute_sd:.1f}%, "
                  f"{100 * error.compute_common:.1f}% shared)")
    print(f"band calibrated on {error.measurements} measurements of training tasks' plans (machine speed "
          f"{error.speed:.3f}x the models'): per-rank compute error sd {100 * error.rank:.1f}% ({error.ranks} "
          f"ranks, net of measurement noise {100 * error.compute_noise:.1f}% per measurement), {drawn}, "
          f"plan-level error sd {100 * error.sd:.1f}%, in the 80% band "
          f"{100 * error.coverage_before:.1f}% -> {100 * error.coverage_after:.1f}%; written to {paths[1]}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_main(main)
