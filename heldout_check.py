"""Held-out-table check of the compute cost model: does it predict shards of tables it never saw?

    python heldout_check.py --data_dir results/quick/compute_data \\
        --out_path results/quick/models/compute_heldout.json

Needs compute data collected with --half_share (collect_compute_cost_data.py):
trains the compute model on the shards of one half of the dataset's tables (5
folds) and prints its test MAPE on left-out shards of those tables, on shards
of the other half (never seen), and on mixed shards; writes them as JSON (the
pipeline's report reads it). Training flags as train_compute_cost_model.py.
"""

import argparse

from neuroshard.checks import check_int
from neuroshard.cli import add_progress_arg, run_main
from neuroshard.formats.io import write_json_atomic
from neuroshard.settings import add_flag
from neuroshard.train.heldout import heldout_check
from neuroshard.train.loop import TrainConfig


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_flag(p, "data_dir", "data/cost_data/compute", help="compute cost data (with --half_share)")
    add_flag(p, "out_path", help="write the result as JSON here")
    p.add_argument("--folds", type=int, default=5, help="folds over the seen half's shards (default: 5)")
    TrainConfig.add_args(p)
    add_progress_arg(p)
    args = p.parse_args(argv)
    check_int("--folds", args.folds, 2)
    cfg = TrainConfig.from_args(args)
    res = heldout_check(args.data_dir, cfg, args.folds, progress=not args.no_progress)
    m = res["mape"]
    print(f"shards: {res['shards']}")
    print(f"test MAPE, tables seen in training: {100 * m['in_distribution']:.1f}%; tables never seen: "
          f"{100 * m['unseen_tables']:.1f}% ({res['unseen_vs_in']:.2f}x); mixed shards: {100 * m['mixed']:.1f}%")
    if args.out_path:
        write_json_atomic(args.out_path, res)


if __name__ == "__main__":
    run_main(main)
