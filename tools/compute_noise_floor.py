"""Noise floor of compute cost data: re-measure collected shards and compare.

    python tools/compute_noise_floor.py --data_dir data/cost_data/compute \\
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
from pathlib import Path

from neuroshard.checks import check_output_file, parse_int_list
from neuroshard.cli import add_device_arg, add_progress_arg, resolve_devices, run_main
from neuroshard.formats.cost_data import NOISE_JSON, write_noise_floor
from neuroshard.formats.io import read_json
from neuroshard.measure.compute_collect import measure_noise_floor
from neuroshard.measure.pool import worker_devices
from neuroshard.measure.timing import CLOCKS
from neuroshard.settings import add_flag


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--data_dir", type=str, default="data/cost_data/compute", help="collected compute cost data")
    p.add_argument("--dataset_dir", type=str, default="data/dlrm_datasets", help="the dataset it was collected on")
    p.add_argument("--num_samples", type=int, default=200, help="shards to re-measure")
    p.add_argument("--repeats", type=int, default=2, help="fresh measurements per shard")
    add_device_arg(p)
    add_flag(p, "gpu_devices")
    p.add_argument("--num_workers", type=int, default=1, help="with --device cpu: benchmark processes "
                   "(use the count the data was collected with)")
    add_flag(p, "warmup", None, help="untimed iterations per shard; default: as recorded in <data_dir>/config.json")
    add_flag(p, "iters", None, help="timed iterations per shard (their median is kept); default: as recorded in "
                                    "<data_dir>/config.json")
    p.add_argument("--clock", choices=CLOCKS, default=None,
                   help="CPU kernel clock; default: as recorded in <data_dir>/config.json")
    p.add_argument("--seed", type=int, default=0, help="which shards are picked")
    p.add_argument("--out_path", type=str, default=None, help=f"default: <data_dir>/{NOISE_JSON}")
    add_progress_arg(p)
    args = p.parse_args(argv)

    if args.out_path is not None:
        check_output_file("--out_path", args.out_path)
    recorded = {}
    cfg_path = Path(args.data_dir) / "config.json"
    if cfg_path.exists():
        recorded = read_json(cfg_path)
    warmup = args.warmup if args.warmup is not None else recorded.get("warmup", 5)
    iters = args.iters if args.iters is not None else recorded.get("iters", 10)
    clock = args.clock or ("cpu" if recorded.get("clock") == "cpu" else "wall")
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
