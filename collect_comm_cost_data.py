"""Collect all-to-all communication cost data (DESIGN.md §5; data format §3).

Each sample: per-device dim sums (T tables spread by a random greedy) and
straggler sleeps; measured per-rank forward/backward all-to-all ms, appended to
OUT_DIR/data.txt as `dims sleeps fw bw`. Resumable: rerun the same command to
continue up to --data_size samples.

    # 4 CPU ranks (gloo), 1000 samples
    python collect_comm_cost_data.py --device cpu --ndevices 4 --data_size 1000 --out_dir data/cost_data/comm_4
    # 4 GPUs (NCCL)
    python collect_comm_cost_data.py --gpu_devices 0,1,2,3 --data_size 100000
    # noise floor: re-measure 100 recorded samples, report the relative difference
    python collect_comm_cost_data.py --device cpu --ndevices 4 --out_dir data/cost_data/comm_4 --noise_floor 100
    # 2 machines x 4 GPUs = 8 ranks: the same command on each machine, N = 0 and 1 (node 0 writes OUT_DIR)
    python collect_comm_cost_data.py --gpu_devices 0,1,2,3 --nnodes 2 --node_rank N \
        --rdzv_endpoint node0.example:29500 --data_size 100000 --out_dir data/cost_data/comm_8
"""

import argparse
import json
import sys

from neuroshard.cli import (
    add_device_arg,
    add_progress_arg,
    resolve_devices,
    resolve_ranks,
    run_main,
)
from neuroshard.formats.cost_data import NOISE_JSON, write_noise_floor
from neuroshard.measure.comm_collect import (
    CommCollectConfig,
    collect,
    follow,
    noise_floor,
    print_summary,
)
from neuroshard.measure.launch import DEFAULT_TIMEOUT_S, LaunchConfig
from neuroshard.problem import Problem
from neuroshard.settings import add_flag, parse_flags


def main(argv=None):
    from neuroshard.checks import check_output_file

    p = argparse.ArgumentParser(description="NeuroShard comm cost data collection")
    add_flag(p, "data_size", 999999999, help="total samples wanted in OUT_DIR/data.txt (existing ones count)")
    add_flag(p, "gpu_devices")
    add_device_arg(p)
    Problem.add_args(p, skip=("max_mem", "local_world_size"))  # the ranks: the devices whose exchanges are measured
    CommCollectConfig.add_args(p)
    p.add_argument("--chunk", type=int, default=250,
                   help="samples per torchrun job (start-up is paid once per job) (default: 250)")
    add_flag(p, "timeout", DEFAULT_TIMEOUT_S)
    add_flag(p, "out_dir", help="default: data/cost_data/comm_<ndevices>")
    p.add_argument("--noise_floor", type=int, default=0, metavar="N",
                   help="instead of collecting, re-measure N recorded samples and report the "
                        f"relative difference (fw, bw) to OUT_DIR/{NOISE_JSON}")
    p.add_argument("--noise_out", default=None, metavar="PATH",
                   help=f"with --noise_floor: write the report here instead of OUT_DIR/{NOISE_JSON} "
                        "(the pipeline's drift check after the hardware evaluation)")
    p.add_argument("--noise_repeats", type=int, default=1,
                   help="with --noise_floor: fresh measurements per sample (2 also compares two fresh repeats) "
                        "(default: 1)")
    add_flag(p, "check")
    add_progress_arg(p)
    LaunchConfig.add_args(p)
    args = parse_flags(p, argv, __file__)

    launch = LaunchConfig.from_args(args)
    device, n = resolve_ranks(resolve_devices(args.device, args.gpu_devices),
                              args.ndevices, args.gpu_devices, launch.nnodes, launch.nproc_per_node)
    launch = launch.for_world(n)
    cfg = CommCollectConfig.from_args(args, ndevices=n, device=device,
                                      batch_size=args.batch_size or (65536 if device == "cuda" else 4096))
    if not launch.writes_outputs:  # lend this node's ranks; node 0 draws, measures and writes
        res = follow(cfg, launch, gpu_devices=args.gpu_devices, timeout=args.timeout, progress=not args.no_progress)
        print(f"node {res['node']}: {res['measured']} samples measured with node 0 (node 0 writes them)")
        return
    out_dir = args.out_dir or f"data/cost_data/comm_{n}"
    if args.noise_floor:
        if args.noise_out is not None:
            check_output_file("--noise_out", args.noise_out)
        res = noise_floor(out_dir, cfg, args.noise_floor, seed=cfg.seed, repeats=args.noise_repeats,
                          gpu_devices=args.gpu_devices, timeout=args.timeout, progress=not args.no_progress,
                          launch=launch)
        path = write_noise_floor(out_dir, res, args.noise_out)
        print(f"wrote {path}", file=sys.stderr)
        print(json.dumps({k: v for k, v in res.items() if k != "samples"}, indent=2))
        return
    summary = collect(out_dir, cfg, args.data_size, chunk=args.chunk,
                      gpu_devices=args.gpu_devices, timeout=args.timeout, progress=not args.no_progress,
                      check=args.check, launch=launch)
    print_summary(summary)


if __name__ == "__main__":
    run_main(main)
