"""Time one pooled-embedding all-to-all by hand (forward with straggler sleeps, backward gradients).

    python tools/alltoall_bench.py --ndevices 4 --dims 64,256,128,32 --sleeps 0,3,0,1
    python tools/alltoall_bench.py --ndevices 4 --dims 64,256,128,32 --check   # verify values
    python tools/alltoall_bench.py --gpu_devices 0,1,2,3 --dims 512,256,768,128 --batch_size 65536
    # across 2 machines (8 ranks): the same command on each, N = 0 and 1; check a cluster before collecting
    python tools/alltoall_bench.py --gpu_devices 0,1,2,3 --nnodes 2 --node_rank N \
        --rdzv_endpoint node0.example:29500 --dims 64,64,64,64,64,64,64,64 --check

Runs one torchrun job (gloo on CPU, NCCL on GPUs) of the benchmark the comm
collector uses (`neuroshard.measure.alltoall_job`) and prints per-rank forward and
backward ms and the algorithm bandwidth (GB/s). On several machines every
node prints node 0's numbers (each node's first rank receives them too).
"""

from __future__ import annotations

import argparse

from neuroshard.checks import parse_int_list
from neuroshard.cli import add_device_arg, resolve_devices, resolve_ranks, run_main
from neuroshard.measure.alltoall_job import run_samples
from neuroshard.measure.launch import DEFAULT_TIMEOUT_S, LaunchConfig
from neuroshard.problem import Problem
from neuroshard.settings import add_flag, parse_flags
from neuroshard.types.errors import ConfigError


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_device_arg(p)
    Problem.add_args(p, skip=("max_mem", "seed", "local_world_size"),
                     helps={"ndevices": "number of ranks (default: one per --dims entry)"})
    add_flag(p, "gpu_devices")
    p.add_argument("--dims", required=True, help="per-rank dim sums, e.g. 64,256,128,32")
    p.add_argument("--sleeps", default=None, help="per-rank start delays in ms, e.g. 0,3,0,1 (default: 0)")
    add_flag(p, "batch_size", help="global batch B (default 4096 on CPU, 65536 on GPU); B % ranks == 0")
    add_flag(p, "warmup")
    add_flag(p, "iters")
    add_flag(p, "timeout", DEFAULT_TIMEOUT_S)
    add_flag(p, "check")
    LaunchConfig.add_args(p)
    args = parse_flags(p, argv, __file__)
    dims = parse_int_list(args.dims, "--dims")
    launch = LaunchConfig.from_args(args)
    device, n = resolve_ranks(resolve_devices(args.device, args.gpu_devices),
                              len(dims) if args.ndevices is None else args.ndevices, args.gpu_devices,
                              launch.nnodes, launch.nproc_per_node)
    sleeps = [0.0] * n if args.sleeps is None else [float(x) for x in args.sleeps.split(",")]
    if len(dims) != n or len(sleeps) != n:
        raise ConfigError("--dims/--sleeps", f"need {n} values each (one per rank), got {len(dims)} and "
                                             f"{len(sleeps)}")
    batch = args.batch_size or (65536 if device == "cuda" else 4096)
    res = run_samples([{"dims": dims, "sleeps": sleeps}], n, batch, warmup=args.warmup, iters=args.iters,
                      device=device, gpu_devices=args.gpu_devices, timeout=args.timeout, check=args.check,
                      launch=launch.for_world(n))[0]
    print(f"all-to-all  B={batch}  ranks={n}  device={device}  sum(dims)={sum(dims)}")
    print(f"{'rank':>4} {'dim':>6} {'sleep ms':>9} {'fw ms':>9} {'bw ms':>9}")
    for r in range(n):
        print(f"{r:>4} {dims[r]:>6} {sleeps[r]:>9.2f} {res.fw[r]:>9.3f} {res.bw[r]:>9.3f}")
    print(f"algbw: forward {res.algbw_fw:.3f} GB/s, backward {res.algbw_bw:.3f} GB/s"
          + ("  (values and gradients verified)" if args.check else ""))


if __name__ == "__main__":
    run_main(main)
