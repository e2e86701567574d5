"""Throughput of compute cost collection: samples/s and where worker time goes, for 1 and 2 workers.

    python benchmarks/bench_compute_collection.py --dataset_dir data/dlrm_datasets --num_samples 60

Runs the real collector (`neuroshard.measure.compute_collect.collect`) into a
temporary directory once per worker count and prints samples/s and the
share of worker wall time (after process start-up) spent inside timed
kernel iterations; the rest is split into op construction, input
gathering, warm-up + cache flushes, and waiting for the next task (IPC).
"""

import argparse
import json
import sys
import tempfile

from neuroshard.checks import parse_int_list
from neuroshard.cli import run_main
from neuroshard.formats.io import write_json_atomic
from neuroshard.measure.compute_collect import ComputeCollectConfig, collect
from neuroshard.problem import Problem
from neuroshard.settings import add_flag, parse_flags


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_flag(p, "dataset_dir", help="dataset to benchmark on")
    add_flag(p, "num_samples", 60, help="samples per run")
    p.add_argument("--workers", type=str, default="1,2", help="worker counts to compare (default: 1,2)")
    add_flag(p, "out_json")
    Problem.add_args(p, skip=("ndevices", "local_world_size"))
    ComputeCollectConfig.add_args(p)
    args = parse_flags(p, argv, __file__)
    cfg = ComputeCollectConfig.from_args(args,
                                         max_mem=Problem.from_args(args).single_mem("the compute collection"))

    rows = []
    for n in parse_int_list(args.workers, "--workers"):
        with tempfile.TemporaryDirectory(prefix="bench_compute_") as tmp:
            summary = collect(args.dataset_dir, tmp, cfg, args.num_samples, ["cpu"] * n, progress=False)
        w = summary.workers
        wall = w.busy_s + w.idle_s
        startup = w.startup_s / n
        row = {"workers": n, "samples": summary.new, "failed": summary.failed, "elapsed_s": summary.elapsed_s,
               "samples_per_s": summary.new / summary.elapsed_s,
               "samples_per_s_after_startup": summary.new / max(1e-9, summary.elapsed_s - startup),
               "worker_startup_s": startup, "kernel_share": w.kernel_share,
               "build_share": w.build_s / wall, "inputs_share": w.inputs_s / wall,
               "warmup_flush_share": (w.bench_s - w.timed_s) / wall, "idle_share": w.idle_s / wall,
               "other_share": (w.busy_s - w.build_s - w.inputs_s - w.bench_s) / wall}
        rows.append(row)
        print(f"{n} worker(s): {row['samples_per_s']:.2f} samples/s ({row['samples_per_s_after_startup']:.2f} "
              f"after {startup:.1f} s start-up); worker time: timed kernels {100 * row['kernel_share']:.1f}%, "
              f"warm-up+flush {100 * row['warmup_flush_share']:.1f}%, build {100 * row['build_share']:.1f}%, "
              f"inputs {100 * row['inputs_share']:.1f}%, waiting {100 * row['idle_share']:.1f}%, "
              f"other {100 * row['other_share']:.1f}%", flush=True)
    if args.out_json:
        write_json_atomic(args.out_json, {"settings": vars(args), "runs": rows})
    else:
        json.dump(rows, sys.stdout, indent=1)
        print()


if __name__ == "__main__":
    run_main(main)
