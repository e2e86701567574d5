"""gloo's collectives on CPU with glibc malloc's default thresholds and with the measuring processes' pinned ones.

    python benchmarks/bench_collective_regime.py --ndevices 4 --sizes 1,2,4,5,6,8 --calls 40

Runs one torchrun job per environment (glibc's defaults: the malloc variables removed; pinned:
`measure.process_env.measuring_env`), each timing `--op` on every size (millions of fp32 elements) `--calls`
times in a row on the same buffers (`measure.collectives.buffers`, a barrier before each call), as a plan's
collectives follow others of their size; a hung rank ends its job after `--timeout` s. Prints per size the
calls' median and largest ms (the ranks' mean) in both environments and how many of the default's calls took more
than 1.5x the pinned median. At times the CPU machine here switched, with the defaults, past about 4 M elements
and at a random call, into a regime about twice as slow (docs/EXPERIMENTS.md, the entry on malloc thresholds); at
other times both environments time the same.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
from statistics import median

from neuroshard.checks import check_float
from neuroshard.cli import run_main
from neuroshard.formats.io import write_json_atomic
from neuroshard.measure.process_env import MALLOC_ENV, measuring_env
from neuroshard.problem import Problem
from neuroshard.settings import add_flag
from neuroshard.types.errors import ConfigError, NeuroShardError

OPS = ("reduce_scatter", "all_gather", "all_reduce")


def rank_side(args) -> None:
    """One rank: every size's calls in a row, rank 0 printing one JSON line per size."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from neuroshard.measure.collectives import buffers, run_collective
    from neuroshard.measure.timing import benchmark

    # a dead or hung rank ends the others' next collective after --timeout, and torchrun then ends the job
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout))
    world = dist.get_world_size()
    for size in args.sizes.split(","):
        numel = int(float(size) * 1e6) // world * world
        inp, out = buffers(args.op, numel, world)
        ms = torch.tensor(benchmark(lambda: run_collective(args.op, inp, out), warmup=0, iters=args.calls,
                                    before_each=dist.barrier))
        dist.all_reduce(ms)
        if dist.get_rank() == 0:
            print(json.dumps({"numel": numel, "ms": (ms / world).tolist()}), flush=True)
    dist.destroy_process_group()


def run_job(args, env: dict) -> list[dict]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={args.ndevices}",
           os.path.abspath(__file__), "--rank_side", "--op", args.op, "--sizes", args.sizes, "--calls",
           str(args.calls), "--timeout", str(args.timeout)]
    # the agent in a process group of its own; its ranks get sessions of their own from torchrun, so an
    # interrupted benchmark asks the agent to stop them (SIGTERM) and kills it only if it does not end
    job = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=True)
    try:
        stdout, stderr = job.communicate()
    except BaseException:
        os.killpg(job.pid, signal.SIGTERM)
        try:
            job.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
        raise
    if job.returncode:
        raise NeuroShardError(f"the torchrun job failed (exit {job.returncode}): {stderr.strip()[-300:]}")
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    Problem.add_args(p, skip=("max_mem", "seed", "local_world_size"), defaults={"ndevices": 4},
                     helps={"ndevices": "gloo ranks on this machine"})
    p.add_argument("--op", choices=OPS, default="reduce_scatter", help="the collective (default: reduce_scatter)")
    p.add_argument("--sizes", default="1,2,4,5,6,8", help="full tensor sizes, millions of fp32 elements")
    p.add_argument("--calls", type=int, default=40, help="calls of each size, in a row (default: 40)")
    add_flag(p, "timeout")
    add_flag(p, "out_json")
    p.add_argument("--rank_side", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.rank_side:
        return rank_side(args)
    args.ndevices = Problem.from_args(args).ndevices
    if args.ndevices < 2:
        raise ConfigError("--ndevices", f"a collective needs at least 2 ranks, got {args.ndevices}")
    try:
        sizes = [float(s) for s in args.sizes.split(",")]
    except ValueError:
        raise ConfigError("--sizes", f"a comma list of numbers, got {args.sizes!r}") from None
    check_float("--timeout", args.timeout, 0, lo_open=True)
    if not sizes or min(sizes) <= 0 or args.calls < 1:
        raise ConfigError("--sizes", f"positive sizes and --calls >= 1, got {args.sizes!r}, {args.calls}")

    default = {k: v for k, v in measuring_env(os.environ).items() if k not in MALLOC_ENV}
    runs = {"glibc defaults": run_job(args, default), "pinned": run_job(args, measuring_env(os.environ))}
    print(f"{args.op} on {args.ndevices} gloo ranks, {args.calls} calls a size in a row, ms, the ranks' mean")
    print(f"{'M elements':>10} | {'default median':>14} {'max':>7} | {'pinned median':>13} {'max':>7} | "
          f"default > 1.5x pinned")
    rows = []
    for d, q in zip(runs["glibc defaults"], runs["pinned"]):
        ref = median(q["ms"])
        slow = sum(t > 1.5 * ref for t in d["ms"])
        rows.append({"numel": d["numel"], "default_ms": d["ms"], "pinned_ms": q["ms"]})
        print(f"{d['numel'] / 1e6:>10.2f} | {median(d['ms']):>14.1f} {max(d['ms']):>7.1f} | {ref:>13.1f} "
              f"{max(q['ms']):>7.1f} | {slow} of {len(d['ms'])}")
    if args.out_json:
        write_json_atomic(args.out_json, {"settings": vars(args), "sizes": rows})


if __name__ == "__main__":
    run_main(main)
