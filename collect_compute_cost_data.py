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

from neuroshard.cli import add_device_arg, add_progress_arg, resolve_devices, run_main


def main(argv=None):
    from neuroshard.checks import parse_int_list
    from neuroshard.measure.compute_collect import ComputeCollectConfig, collect
    from neuroshard.measure.pool import worker_devices
    from neuroshard.settings import add_flag

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data_size", type=int, default=100_000,
                   help="total samples wanted in --out_dir (samples already there count) (default: 100000)")
    add_flag(p, "gpu_devices")
    p.add_argument("--dataset_dir", type=str, default="data/dlrm_datasets",
                   help="dataset dir (tools/gen_dlrm_data.py) whose tables and lookups are benchmarked")
    p.add_argument("--out_dir", type=str, default="data/cost_data/compute",
                   help="compute cost data dir to create or continue")
    add_device_arg(p)
    p.add_argument("--num_workers", type=int, default=1,
                   help="with --device cpu: benchmark processes, one thread each. More workers collect "
                        "faster but share the last-level cache and memory bandwidth, which changes "
                        "and adds noise to the times; keep it at or below the number of idle cores (default: 1)")
    ComputeCollectConfig.add_args(p)
    add_progress_arg(p)
    args = p.parse_args(argv)

    device = resolve_devices(args.device, args.gpu_devices)
    gpus = parse_int_list(args.gpu_devices, "--gpu_devices") if device == "cuda" else []
    devices = worker_devices(device, gpus, args.num_workers)
    cfg = ComputeCollectConfig.from_args(args, device=device)
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
