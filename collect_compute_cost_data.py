"""Collect compute cost data: FBGEMM forward+backward times of random shards (DESIGN.md §5).

    python collect_compute_cost_data.py --dataset_dir data/dlrm_datasets \\
        --out_dir data/cost_data/compute --data_size 2000 --num_workers 1

Writes to --out_dir: table_configs.json (every dataset table once per dim),
data.txt (one `ids cost_ms` line per shard, appended as results arrive),
errors.txt (shards that failed, with the reason) and config.json. Rerun the
same command to continue an interrupted run: --data_size counts all samples.
On GPUs: --gpu_devices 0,1 (one worker per GPU). Then
compute_noise_floor.py tells how repeatable the measurements are.
"""

import argparse
import os
import sys

from neuroshard.cli import add_device_arg, add_progress_arg, resolve_devices, run_main
from neuroshard.settings import parse_flags


def main(argv=None):
    from neuroshard.checks import parse_int_list
    from neuroshard.measure.compute_collect import ComputeCollectConfig, collect
    from neuroshard.measure.pool import worker_devices
    from neuroshard.problem import Problem
    from neuroshard.settings import add_flag

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_flag(p, "data_size", 100_000, help="total samples wanted in --out_dir (samples already there count)")
    add_flag(p, "gpu_devices")
    add_flag(p, "dataset_dir", help="dataset dir (gen_dlrm_data.py) whose tables and lookups are benchmarked")
    add_flag(p, "out_dir", "data/cost_data/compute", help="compute cost data dir to create or continue")
    add_device_arg(p)
    add_flag(p, "num_workers", help="with --device cpu: benchmark processes, one thread each. More workers collect "
                                    "faster but share the last-level cache and memory bandwidth, which changes and "
                                    "adds noise to the times; keep it at or below the number of idle cores")
    Problem.add_args(p, skip=("ndevices", "local_world_size"))  # a shard fits one device's memory
    ComputeCollectConfig.add_args(p)
    add_progress_arg(p)
    args = parse_flags(p, argv, __file__)

    device = resolve_devices(args.device, args.gpu_devices)
    gpus = parse_int_list(args.gpu_devices, "--gpu_devices") if device == "cuda" else []
    devices = worker_devices(device, gpus, args.num_workers)
    cfg = ComputeCollectConfig.from_args(args, device=device,
                                         max_mem=Problem.from_args(args).single_mem("the compute collection"))
    summary = collect(args.dataset_dir, args.out_dir, cfg, args.data_size, devices, progress=not args.no_progress)
    rate = summary.new / summary.elapsed_s if summary.elapsed_s else 0.0
    print(f"{summary.new} new samples ({summary.failed} failed) in {summary.elapsed_s:.1f} s "
          f"({rate:.2f} samples/s, {len(devices)} workers); {summary.total} in "
          f"{os.path.join(args.out_dir, 'data.txt')}", file=sys.stderr)
    if summary.new:
        print(f"share of worker time inside timed kernel iterations: {100 * summary.workers.kernel_share:.1f}%",
              file=sys.stderr)


if __name__ == "__main__":
    run_main(main)
