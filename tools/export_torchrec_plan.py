"""Write a plan of the suite as a TorchRec ShardingPlan (torch.save) plus a readable JSON per table.

    python tools/export_torchrec_plan.py --plans results/quick/sim/plans.json --task 0 --alg neuroshard \
        --data_dir results/quick/dataset --task_path results/quick/tasks/data.txt --out plan.pt
    python tools/export_torchrec_plan.py --plans my_plan.json --tables my_tables.csv --out plan.pt
    python tools/export_torchrec_plan.py ... --torchrec_device cpu --module_path sparse.ebc

The plan is a record of a plans file (eval_simulator.py's plans.json, eval.py's
results.json, or tools/shard_tables.py's output), chosen by --task and --alg.
Its tables come from the dataset and task file (named `t<id>`; a table id
repeated in a task is `t<id>_1`, `t<id>_2`, ...) or from the user's table list
(--tables, named as there). Writes --out (load with `torch.load(path,
weights_only=False)` and pass as `DistributedModelParallel(module, plan=...)`,
see the README) and the same path with `.json`. Needs torchrec.
"""

from __future__ import annotations

import argparse
import sys

from neuroshard.cli import run_main
from neuroshard.settings import add_flag, parse_flags
from neuroshard.torchrec.export import ExportConfig


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Export a plan of the suite as a TorchRec ShardingPlan.")
    add_flag(p, "plans", required=True, help="plans file: plans.json, results.json or shard_tables.py's output")
    p.add_argument("--task", type=int, default=0, help="task index of the plan (default: 0)")
    add_flag(p, "alg", help="algorithm of the plan")
    add_flag(p, "data_dir", None, help="dataset dir (table_configs.json) of the task file")
    add_flag(p, "task_path", None, help="task file the plans were made for")
    add_flag(p, "tables", help="instead of --data_dir/--task_path: the user's table list given to "
                               "tools/shard_tables.py")
    add_flag(p, "out", "torchrec_plan.pt", help="TorchRec plan file; the JSON view goes beside it with the suffix "
                                                ".json")
    ExportConfig.add_args(p)
    return parse_flags(p, argv, __file__)


def main(argv=None) -> int:
    args = parse_args(argv)
    from neuroshard.formats.plan_file import read_plans
    from neuroshard.torchrec.export import find_record, plan_tables

    tables, names = plan_tables(args.data_dir, args.task_path, args.tables, args.task)
    what = args.tables if args.tables else f"task {args.task} of {args.task_path}"
    record = find_record(read_plans(args.plans), args.plans, args.task, args.alg, tables, what, names)
    written = ExportConfig.from_args(args).export(args.out, tables, record.plan, names)
    print(f"wrote {' and '.join(map(str, written))} ({args.alg}, task {args.task}, {len(tables)} tables, "
          f"{record.plan.ndevices} ranks)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_main(main)
