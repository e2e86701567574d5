"""Held-out-table check of the compute cost model: does it predict shards of tables it never saw?

    python heldout_check.py --data_dir results/quick/compute_data \\
        --out_path results/quick/models/compute_heldout.json
    python heldout_check.py --data_dir compute_data_batches --heldout_batch 2048   # a batch it never saw

Needs compute data collected with --half_share (collect_compute_cost_data.py):
trains the compute model on the shards of one half of the dataset's tables (5
folds) and prints its test MAPE on left-out shards of those tables, on shards
of the other half (never seen), and on mixed shards; writes them as JSON (the
pipeline's report reads it). With --heldout_batch (data collected with
--batch_sizes): trains on every other batch and prints the MAPE on that batch's
shards beside the seen batches' and the noise floor. Training flags as
train_compute_cost_model.py.
"""

import argparse

from neuroshard.checks import check_int
from neuroshard.cli import add_progress_arg, run_main
from neuroshard.formats.io import write_json_atomic
from neuroshard.settings import add_flag, parse_flags
from neuroshard.train.compute_model import TRAIN_DEFAULTS
from neuroshard.train.heldout import heldout_batch_check, heldout_check
from neuroshard.train.loop import TrainConfig


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_flag(p, "data_dir", "data/cost_data/compute", help="compute cost data (with --half_share)")
    add_flag(p, "out_path", help="write the result as JSON here")
    add_flag(p, "folds", help="folds over the seen half's shards")
    p.add_argument("--heldout_batch", type=int, default=None,
                   help="instead: train on every batch of the data but this one, test on its shards")
    TrainConfig.add_args(p, defaults=TRAIN_DEFAULTS)
    add_progress_arg(p)
    args = parse_flags(p, argv, __file__)
    check_int("--folds", args.folds, 2)
    cfg = TrainConfig.from_args(args)
    if args.heldout_batch is not None:
        check_int("--heldout_batch", args.heldout_batch, 1)
        res = heldout_batch_check(args.data_dir, cfg, args.heldout_batch, progress=not args.no_progress)
        m = res["mape"]
        floor = "-" if res["noise_floor"] is None else f"{100 * res['noise_floor']:.1f}%"
        print(f"shards: {res['shards']}; batches {res['batches']}, reference {res['reference_batch']}")
        print(f"test MAPE, batch {args.heldout_batch} never seen: {100 * m['heldout_batch']:.1f}%; batches seen: "
              f"{100 * m['seen_batches']:.1f}%; noise floor {floor}")
        if args.out_path:
            write_json_atomic(args.out_path, res)
        return 0
    res = heldout_check(args.data_dir, cfg, args.folds, progress=not args.no_progress)
    m = res["mape"]
    print(f"shards: {res['shards']}")
    print(f"test MAPE, tables seen in training: {100 * m['in_distribution']:.1f}%; tables never seen: "
          f"{100 * m['unseen_tables']:.1f}% ({res['unseen_vs_in']:.2f}x); mixed shards: {100 * m['mixed']:.1f}%")
    if args.out_path:
        write_json_atomic(args.out_path, res)


if __name__ == "__main__":
    run_main(main)
