"""Check the compute model on row-wise shards (row blocks of real tables) against FBGEMM measurements.

Each shard's estimate comes from the blocks' own statistics (read from their
ids), from the uniform 1/k assumption, and as the planners price it (the
block's lookups from its table's row_lookups, the table's locality).

    python tools/row_block_check.py --data_dir results/quick/dataset --models results/quick/models \\
        --compute_data results/quick/compute_data --out_path results/quick/row_block_check.json

Times each shard of row blocks --repeats times in interleaved rounds with the
compute collection's settings (its config.json: warm-up, iterations, clock),
prints the MAPE of the three estimates beside the noise floor (two repeats against
each other) and writes every shard's numbers as JSON (`eval.row_block_check`).
"""

from __future__ import annotations

import argparse

import torch
from tqdm import tqdm

from neuroshard.checks import check_int, parse_int_list
from neuroshard.cli import add_progress_arg, run_main
from neuroshard.eval.row_block_check import row_block_check
from neuroshard.formats.dataset import read_dataset
from neuroshard.formats.io import write_json_atomic
from neuroshard.measure.compute_collect import ComputeCollectConfig
from neuroshard.planner.costs.cost_models import CostModels
from neuroshard.problem import Problem
from neuroshard.settings import add_flag, parse_flags


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_flag(p, "data_dir", required=True, help="dataset dir (table_configs.json + data.pt)")
    add_flag(p, "models", required=True)
    Problem.add_args(p, skip=("seed", "max_mem", "local_world_size"), defaults={"ndevices": 4},
                     helps={"ndevices": "the comm models' device count (the check reads the compute model only)"})
    p.add_argument("--compute_data", required=True, help="the compute data dir the model trained on (its "
                                                          "config.json gives warm-up, iterations and clock)")
    add_flag(p, "out_path", help="write the result as JSON here")
    p.add_argument("--samples", type=int, default=40, help="shards of row blocks to time (default: 40)")
    p.add_argument("--ks", default="2,4", help="row blocks per table, drawn per table (default: 2,4)")
    p.add_argument("--block_dims", default="16,32,64", help="dims, drawn per block (default: 16,32,64)")
    p.add_argument("--blocks_per_shard", type=int, default=4, help="blocks per shard: 1..N (default: 4)")
    p.add_argument("--min_rows", type=int, default=1000, help="only tables with this many rows (default: 1000)")
    add_flag(p, "repeats", 2, help="measurements of each shard, 2 or more, in interleaved rounds")
    add_flag(p, "seed")
    add_progress_arg(p)
    args = parse_flags(p, argv, __file__)
    for flag in ("samples", "blocks_per_shard", "min_rows", "repeats", "ndevices"):
        check_int(f"--{flag}", getattr(args, flag), 1)
    ks, dims = parse_int_list(args.ks, "--ks"), parse_int_list(args.block_dims, "--block_dims")
    collect = ComputeCollectConfig.recorded(args.compute_data)
    if collect.clock == "cpu":
        torch.set_num_threads(1)  # the CPU clock counts one thread's work
    dataset = read_dataset(args.data_dir)
    models = CostModels.load(args.models, args.ndevices)
    with tqdm(total=args.samples * args.repeats, desc="row-block shards", unit="shard",
              disable=True if args.no_progress else None) as bar:
        out = row_block_check(dataset, models, collect, samples=args.samples, ks=ks, dims=dims,
                              max_tables=args.blocks_per_shard, min_rows=args.min_rows, repeats=args.repeats,
                              seed=args.seed, progress=lambda done: bar.update(done - bar.n))
    floor = out["noise_floor"]["mean"]
    print(f"{out['samples']} shards of {out['blocks']} row blocks, {args.repeats} repeats each")
    print(f"noise floor (repeat vs repeat): {100 * floor:.1f}%")
    for name in ("block_stats", "uniform", "row_lookups"):
        m = out["mape"][name]
        print(f"compute model, {name:<11}: MAPE {100 * m:5.1f}% ({m / floor:.2f}x the floor), "
              f"Spearman {out['spearman'][name]:.3f}")
    q = out["pooling_over_uniform"]
    print(f"blocks' pooling factor / uniform's: min {q['min']:.2f}, median {q['median']:.2f}, max {q['max']:.2f}")
    if args.out_path:
        write_json_atomic(args.out_path, {**out, "data_dir": args.data_dir, "models": args.models,
                                          "compute_data": args.compute_data})
    return 0


if __name__ == "__main__":
    run_main(main)
