"""gloo's collectives on CPU, calls of one size in a row: two forms of the reduce-scatter, or two malloc settings.

    python benchmarks/bench_collective_regime.py --sizes 1,2,4,5,6,8 --calls 40            # --compare form
    python benchmarks/bench_collective_regime.py --compare env --op all_gather

Runs one torchrun job per variant, each timing `--op` on every size (millions of fp32 elements) `--calls` times in
a row on the same buffers (`measure.collectives.buffers`, a barrier before each call), as a plan's collectives
follow others of their size; a hung rank ends its job after `--timeout` s. Prints per size the calls' median and
largest ms (the ranks' mean) of both variants, how many of the first's calls took more than 1.5x the second's
median, and each variant's largest growth of a rank's resident memory over the size's calls.

`--compare form` (the reduce-scatter; both in the measuring processes' environment, `measure.process_env`):
`dist.reduce_scatter_tensor` against `measure.collectives.run_collective`'s reduce-scatter (on gloo an all-reduce
of a copy and a copy of the rank's chunk). On gloo CPU ranks the first kept most of its input's bytes on one rank
or another, call after call; past a few GB the calls switched into a regime two to three times as slow
(docs/EXPERIMENTS.md, the entry on the reduce-scatter's memory). The growth comes at random: a run without it
still shows that the two cost the same.
`--compare env`: glibc malloc's default thresholds against the pinned ones, both with `run_collective`.
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
from neuroshard.settings import add_flag, parse_flags
from neuroshard.types.errors import ConfigError, NeuroShardError

OPS = ("reduce_scatter", "all_gather", "all_reduce")
BLOCK = 40  # calls between two reads of the ranks' memory


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
        if args.form == "tensor":
            def once():
                dist.reduce_scatter_tensor(out, inp)
        else:
            def once():
                run_collective(args.op, inp, out)
        before, calls, grown = resident_mb(), [], 0.0
        while len(calls) < args.calls:  # in blocks, the ranks' memory gathered after each (as a job's records)
            calls += benchmark(once, warmup=0, iters=min(BLOCK, args.calls - len(calls)), before_each=dist.barrier)
            every = [None] * world
            dist.all_gather_object(every, resident_mb() - before)
            grown = max(grown, *every)
        ms = torch.tensor(calls)
        dist.all_reduce(ms)
        if dist.get_rank() == 0:
            print(json.dumps({"numel": numel, "ms": (ms / world).tolist(), "rss_growth_mb": grown}), flush=True)
    dist.destroy_process_group()


def resident_mb() -> float:
    """This process's resident memory, MB (Linux: /proc/self/statm)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def run_job(args, env: dict, form: str = "suite") -> list[dict]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={args.ndevices}",
           os.path.abspath(__file__), "--rank_side", "--op", args.op, "--sizes", args.sizes, "--calls",
           str(args.calls), "--timeout", str(args.timeout), "--form", form]
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
    p.add_argument("--compare", choices=("form", "env"), default="form",
                   help="form: reduce_scatter_tensor against run_collective's reduce-scatter; env: glibc "
                        "malloc's default thresholds against the pinned ones (default: form)")
    p.add_argument("--form", choices=("tensor", "suite"), default="suite", help=argparse.SUPPRESS)
    add_flag(p, "timeout")
    add_flag(p, "out_json")
    p.add_argument("--rank_side", action="store_true", help=argparse.SUPPRESS)
    args = parse_flags(p, argv, __file__)
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

    if args.compare == "form" and args.op != "reduce_scatter":
        raise ConfigError("--op", f"--compare form compares two forms of the reduce-scatter, got {args.op!r}")
    pinned = measuring_env(os.environ)
    if args.compare == "form":
        names = ("reduce_scatter_tensor", "run_collective")
        runs = [run_job(args, pinned, "tensor"), run_job(args, pinned)]
    else:
        names = ("glibc defaults", "pinned")
        runs = [run_job(args, {k: v for k, v in pinned.items() if k not in MALLOC_ENV}), run_job(args, pinned)]
    print(f"{args.op} on {args.ndevices} gloo ranks, {args.calls} calls a size in a row, ms, the ranks' mean; "
          f"A: {names[0]}, B: {names[1]}")
    print(f"{'M elements':>10} | {'A median':>8} {'max':>7} | {'B median':>8} {'max':>7} | {'A > 1.5x B':>10} | "
          f"largest rank's memory growth, A and B (MB)")
    rows = []
    for a, b in zip(*runs):
        ref = median(b["ms"])
        slow = f"{sum(t > 1.5 * ref for t in a['ms'])} of {len(a['ms'])}"
        rows.append({"numel": a["numel"], names[0]: a, names[1]: b})
        print(f"{a['numel'] / 1e6:>10.2f} | {median(a['ms']):>8.1f} {max(a['ms']):>7.1f} | {ref:>8.1f} "
              f"{max(b['ms']):>7.1f} | {slow:>10} | {a['rss_growth_mb']:.0f}, "
              f"{b['rss_growth_mb']:.0f}")
    if args.out_json:
        write_json_atomic(args.out_json, {"settings": vars(args), "sizes": rows})


if __name__ == "__main__":
    run_main(main)
