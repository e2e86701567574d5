"""Generate sharding tasks over a dataset dir (DESIGN.md §2, §4).

    python gen_tasks.py --data_dir data/dlrm_datasets --out_dir data/tasks/4_gpu
    python gen_tasks.py --data_dir data/dlrm_synthetic --out_dir data/tasks/quick \
        --data_size 20 --T_range 10,30 --max_mem 1 --ndevices 4 --max_dim 64
    python gen_tasks.py ... --seed 1 --out_dir data/tasks/train   # training tasks of the learned baselines
    python gen_tasks.py ... --table_pool train --out_dir data/tasks/train  # disjoint table pools:
    python gen_tasks.py ... --table_pool test --out_dir data/tasks/test    #   DreamShard's split

Writes OUT_DIR/data.txt (one task per line: `ids dims`) and OUT_DIR/config.json.
Each task: T uniform in T_range (inclusive), table ids uniform over the
dataset (repeats allowed), dims uniform over max_dim, max_dim/2, ..., 4;
redrawn until every table fits one device (size <= --max_mem GB) and the task
fits all devices (total <= --ndevices x --max_mem GB), at most --max_tries
times per task.
"""

from __future__ import annotations

import argparse
import os

from neuroshard.cli import run_main
from neuroshard.data.task_gen import TaskSpec, generate_tasks
from neuroshard.formats.dataset import read_table_configs
from neuroshard.formats.io import write_json_atomic
from neuroshard.formats.task_file import write_tasks
from neuroshard.settings import add_flag, parse_flags


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Generate sharding tasks (table ids + dims) over a dataset.")
    add_flag(p, "data_dir", help="dataset dir (table_configs.json)")
    add_flag(p, "out_dir", "data/tasks/4_gpu", help="output dir for data.txt and config.json",
             aliases=("--out-dir",))
    TaskSpec.add_args(p, helps={"ndevices": "devices a task must fit: total size <= ndevices x max_mem (default: "
                                            "4)"})
    return parse_flags(p, argv, __file__)


def main(argv=None) -> None:
    args = parse_args(argv)
    if "," not in str(args.T_range):  # a single number: exactly that many tables
        args.T_range = f"{args.T_range},{args.T_range}"
    spec = TaskSpec.from_args(args)
    configs = read_table_configs(os.path.join(args.data_dir, "table_configs.json"))
    tasks = generate_tasks(configs, spec)
    write_tasks(os.path.join(args.out_dir, "data.txt"), tasks)
    write_json_atomic(os.path.join(args.out_dir, "config.json"),
                      {"data_dir": os.path.abspath(args.data_dir), **spec.to_json()})
    print(f"{len(tasks)} sharding tasks generated in {args.out_dir}")


if __name__ == "__main__":
    run_main(main)
