"""Collect compute cost data: FBGEMM forward+backward times of random shards (DESIGN.md §5).

    python collect_compute_cost_data.py --dataset_dir data/dlrm_datasets \\
        --out_dir data/cost_data/compute --data_size 2000 --num_workers 1

Writes to --out_dir: table_configs.json (every dataset table once per dim),
data.txt (one `ids cost_ms` line per shard, appended as results arrive),
errors.txt (shards that failed, with the reason) and config.json. Rerun the
same command to continue an interrupted run: --data_size counts all samples.
On GPUs: --gpu_devices 0,1 (one worker per GPU). Then
tools/compute_noise_floor.py tells how repeatable the measurements are.
"""

import argparse
import os
import sys

from neuroshard.bench.compute_collect import ComputeCollectConfig, collect
from neuroshard.bench.pool import worker_devices
from neuroshard.cli import add_device_arg, parse_int_list, resolve_devices, run_main


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--data_size", type=int, default=100_000,
                   help="total samples wanted in --out_dir (samples already there count)")
    p.add_argument("--gpu_devices", type=str, default=None,
                   help="comma list of GPUs, one worker each (implies --device cuda)")
    p.add_argument("--max_tables", type=int, default=15, help="tables per shard: uniform in 1..max_tables")
    p.add_argument("--max_mem", type=float, default=4.0, help="memory cap of one shard (GB)")
    p.add_argument("--max_dim", type=int, default=128, help="largest dim; the dim set halves down to 4")
    p.add_argument("--dataset_dir", type=str, default="data/dlrm_datasets",
                   help="dataset dir (tools/gen_dlrm_data.py) whose tables and lookups are benchmarked")
    p.add_argument("--out_dir", type=str, default="data/cost_data/compute",
                   help="compute cost data dir to create or continue")
    add_device_arg(p)
    p.add_argument("--num_workers", type=int, default=1,
                   help="with --device cpu: benchmark processes, one thread each. More workers collect "
                        "faster but share the last-level cache and memory bandwidth, which changes "
                        "and adds noise to the times; keep it at or below the number of idle cores")
    p.add_argument("--warmup", type=int, default=5, help="untimed iterations per shard")
    p.add_argument("--iters", type=int, default=10, help="timed iterations per shard (their median is kept)")
    p.add_argument("--clock", choices=["cpu", "wall"], default="cpu",
                   help="CPU kernels: cpu = CPU time of the benchmark thread (leaves out time spent "
                        "descheduled, so a busy shared machine disturbs it far less; equals wall time on "
                        "an idle one), wall = elapsed time. GPUs always use CUDA events")
    p.add_argument("--seed", type=int, default=0, help="the shard stream and the split of the tables into halves")
    p.add_argument("--half_share", type=float, default=0.0,
                   help="share of the shards whose tables all come from one half of the dataset's tables (a "
                        "seeded split; every table stays equally likely overall), so that tools/heldout_check.py "
                        "can train on one half and test on tables the model never saw")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    args = p.parse_args(argv)

    device = resolve_devices(args.device, args.gpu_devices)
    gpus = parse_int_list(args.gpu_devices, "--gpu_devices") if device == "cuda" else []
    devices = worker_devices(device, gpus, args.num_workers)
    cfg = ComputeCollectConfig(max_tables=args.max_tables, max_mem=args.max_mem, max_dim=args.max_dim,
                               warmup=args.warmup, iters=args.iters, seed=args.seed, clock=args.clock,
                               device=device, half_share=args.half_share)
    summary = collect(args.dataset_dir, args.out_dir, cfg, args.data_size, devices, progress=not args.quiet)
    rate = summary.new / summary.elapsed_s if summary.elapsed_s else 0.0
    print(f"{summary.new} new samples ({summary.failed} failed) in {summary.elapsed_s:.1f} s "
          f"({rate:.2f} samples/s, {len(devices)} workers); {summary.total} in "
          f"{os.path.join(args.out_dir, 'data.txt')}", file=sys.stderr)
    if summary.new:
        print(f"share of worker time inside timed kernel iterations: {100 * summary.workers.kernel_share:.1f}%",
              file=sys.stderr)


if __name__ == "__main__":
    run_main(main)
