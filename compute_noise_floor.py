"""Noise floor of compute cost data: re-measure collected shards and compare.

    python compute_noise_floor.py --data_dir data/cost_data/compute \\
        --dataset_dir data/dlrm_datasets --num_samples 200

Re-measures a random subset of the shards in --data_dir twice (all shards
once, then all again, so slow spells of the machine hit both rounds) with
the warm-up, iterations and clock recorded in its config.json, and reports the
relative difference |fresh - stored| / stored and |fresh2 - fresh1| / fresh1
(median and mean; the mean is the MAPE a model predicting the re-measurement
exactly would score). No cost model can be more accurate than this.
Writes --out_path (default <data_dir>/noise_floor.json).
"""

import argparse
import sys

from neuroshard.checks import check_output_file, parse_int_list
from neuroshard.cli import add_device_arg, add_progress_arg, resolve_devices, run_main
from neuroshard.formats.cost_data import NOISE_JSON, write_noise_floor
from neuroshard.measure.compute_collect import ComputeCollectConfig, measure_noise_floor
from neuroshard.measure.pool import worker_devices
from neuroshard.settings import add_flag, parse_flags


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_flag(p, "data_dir", "data/cost_data/compute", help="collected compute cost data")
    add_flag(p, "dataset_dir", help="the dataset it was collected on")
    add_flag(p, "num_samples", 200, help="shards to re-measure")
    add_flag(p, "repeats", 2, help="fresh measurements per shard")
    add_device_arg(p)
    add_flag(p, "gpu_devices")
    add_flag(p, "num_workers", help="with --device cpu: benchmark processes (use the count the data was collected "
                                    "with)")
    add_flag(p, "warmup", None, help="untimed iterations per shard; default: as recorded in <data_dir>/config.json")
    add_flag(p, "iters", None, help="timed iterations per shard (their median is kept); default: as recorded in "
                                    "<data_dir>/config.json")
    add_flag(p, "clock", None, help="CPU kernel clock; default: as recorded in <data_dir>/config.json")
    add_flag(p, "seed", help="which shards are picked")
    add_flag(p, "out_path", help=f"default: <data_dir>/{NOISE_JSON}")
    add_progress_arg(p)
    args = parse_flags(p, argv, __file__)

    if args.out_path is not None:
        check_output_file("--out_path", args.out_path)
    recorded = ComputeCollectConfig.recorded(args.data_dir)  # how the samples were measured
    warmup = args.warmup if args.warmup is not None else recorded.warmup
    iters = args.iters if args.iters is not None else recorded.iters
    clock = args.clock or ("cpu" if recorded.clock == "cpu" else "wall")  # GPU data: CUDA events, else wall
    device = resolve_devices(args.device, args.gpu_devices)
    gpus = parse_int_list(args.gpu_devices, "--gpu_devices") if device == "cuda" else []
    devices = worker_devices(device, gpus, args.num_workers)
    report = measure_noise_floor(args.data_dir, args.dataset_dir, args.num_samples, devices, warmup, iters,
                                 seed=args.seed, repeats=args.repeats, clock=clock,
                                 progress=not args.no_progress)
    out_path = write_noise_floor(args.data_dir, report, args.out_path)
    for key, label in (("fresh_vs_stored", "re-measured vs stored"), ("fresh_vs_fresh", "two fresh repeats")):
        if key in report["targets"]["cost"]:
            r = report["targets"]["cost"][key]
            print(f"{label:>22}: median {100 * r['median']:.2f}%  mean {100 * r['mean']:.2f}%  "
                  f"p90 {100 * r['p90']:.2f}%  (n={r['n']})")
    print(f"wrote {out_path}", file=sys.stderr)


if __name__ == "__main__":
    run_main(main)
