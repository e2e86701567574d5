"""Generate sharding tasks over a dataset dir (DESIGN.md §2, §4).

    python tools/gen_tasks.py --data_dir data/dlrm_datasets --out_dir data/tasks/4_gpu
    python tools/gen_tasks.py --data_dir data/dlrm_synthetic --out_dir data/tasks/quick \
        --data_size 20 --T_range 10,30 --max_mem 1 --ndevices 4 --max_dim 64
    python tools/gen_tasks.py ... --seed 1 --out_dir data/tasks/train   # training tasks of the learned baselines
    python tools/gen_tasks.py ... --table_pool train --out_dir data/tasks/train  # disjoint table pools:
    python tools/gen_tasks.py ... --table_pool test --out_dir data/tasks/test    #   DreamShard's split

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

from neuroshard.checks import parse_range
from neuroshard.cli import run_main
from neuroshard.data.task_gen import TABLE_POOLS, TaskSpec, generate_tasks
from neuroshard.formats.dataset import read_table_configs
from neuroshard.formats.io import write_json_atomic
from neuroshard.formats.task_file import write_tasks

_D = TaskSpec()


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Generate sharding tasks (table ids + dims) over a dataset.",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--data_dir", default="data/dlrm_datasets", help="dataset dir (table_configs.json)")
    p.add_argument("--out_dir", "--out-dir", dest="out_dir", default="data/tasks/4_gpu",
                   help="output dir for data.txt and config.json")
    p.add_argument("--data_size", type=int, default=_D.data_size, help="number of tasks")
    p.add_argument("--T_range", default=",".join(map(str, _D.T_range)),
                   help="'lo,hi': tables per task, inclusive (a single number: exactly that many)")
    p.add_argument("--max_mem", type=float, default=_D.max_mem, help="memory per device (GB)")
    p.add_argument("--ndevices", type=int, default=_D.ndevices,
                   help="devices a task must fit: total size <= ndevices x max_mem")
    p.add_argument("--max_dim", type=int, default=_D.max_dim,
                   help="largest dim; dims are max_dim halving down to 4")
    p.add_argument("--max_tries", type=int, default=_D.max_tries,
                   help="draws per task before giving up with an error")
    p.add_argument("--seed", type=int, default=_D.seed, help="random seed")
    p.add_argument("--table_pool", choices=TABLE_POOLS, default=_D.table_pool,
                   help="draw tables from all of the dataset, or from one of two disjoint halves (DreamShard's "
                        "train/test table pools): training tasks of the learned baselines with 'train', "
                        "evaluation tasks with 'test'")
    p.add_argument("--pool_seed", type=int, default=_D.pool_seed, help="seed of the split into the two pools")
    return p.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    t_range = (parse_range(args.T_range, "--T_range") if "," in args.T_range
               else (parse_range(f"{args.T_range},{args.T_range}", "--T_range")))
    spec = TaskSpec(data_size=args.data_size, T_range=t_range, max_mem=args.max_mem,
                    max_dim=args.max_dim, ndevices=args.ndevices, seed=args.seed,
                    max_tries=args.max_tries, table_pool=args.table_pool, pool_seed=args.pool_seed)
    spec.validate()
    configs = read_table_configs(os.path.join(args.data_dir, "table_configs.json"))
    tasks = generate_tasks(configs, spec)
    write_tasks(os.path.join(args.out_dir, "data.txt"), tasks)
    write_json_atomic(os.path.join(args.out_dir, "config.json"),
                      {"data_dir": os.path.abspath(args.data_dir), **spec.to_json()})
    print(f"{len(tasks)} sharding tasks generated in {args.out_dir}")


if __name__ == "__main__":
    run_main(main)
