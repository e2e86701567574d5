"""All-to-all communication benchmark (DESIGN.md §5 "Communication").

Rank r holds pooled embeddings ``[B, dims[r]]``; the forward all-to-all turns
them into ``[B/n, sum(dims)]`` on every rank and the backward all-to-all sends
the gradient back. Both run as ONE flat ``dist.all_to_all_single`` with
element-count splits (the list form fails on gloo and hangs the peers, see
PLATFORM.md). gloo on CPU, NCCL on GPUs, the same code path.

Two halves live here:

* the **worker** (``python -m neuroshard.bench.comm --worker ...`` under
  torchrun): one torchrun job measures MANY samples, read from a JSON-lines
  file, so the expensive process start-up is paid once per job. Rank 0 gathers
  the per-rank medians and streams one JSON line per sample to a results file;
* the **launcher** (:class:`CommJob`), a :class:`torchrun.TorchrunJob`: it
  yields results as they arrive, and a dead or hung rank ends the whole job
  within a bounded time with a message naming the rank and the cause.

Run one measurement by hand::

    python tools/alltoall_bench.py --ndevices 4 --dims 64,256,128,32 --sleeps 0,3,0,1
    python tools/alltoall_bench.py --ndevices 4 --dims 64,256,128,32 --check   # verify values
    python tools/alltoall_bench.py --gpu_devices 0,1,2,3 --dims 512,256,768,128 --batch_size 65536

Units: times in ms, bandwidth in GB/s (1e9 bytes/s).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

from neuroshard.bench.torchrun import (DEFAULT_STARTUP_TIMEOUT_S, DEFAULT_TIMEOUT_S, RESULTS_FILE, LaunchConfig,
                                       TorchrunJob, barrier, fail_rank, init_group, local_lead, start_rank)
from neuroshard.types import ConfigError

BYTES_PER_ELEMENT = 4  # fp32 pooled embeddings
SAMPLES_FILE = "samples.jsonl"
SAMPLE_BLOCK = 64  # samples rank 0 hands out per broadcast
WORKER_MODULE = "neuroshard.bench.comm"


# --------------------------------------------------------------------------- layout
# Pure tensor helpers (no torch.distributed): the flat buffers exchanged by the
# all-to-all and how to read them back. Tests drive them with a simulated
# all-to-all; the worker drives them with the real one.


def split_sizes(dims: Sequence[int], rank: int, batch_size: int) -> tuple[list[int], list[int]]:
    """Element counts (input splits, output splits) of rank `rank`'s forward all-to-all.

    Rank r sends ``B/n x dims[r]`` elements to every peer and receives
    ``B/n x dims[q]`` from each peer q. The backward exchange swaps the two lists.
    """
    n = len(dims)
    b = batch_size // n
    return [b * dims[rank]] * n, [b * d for d in dims]


def unpack_forward(flat, dims: Sequence[int], local_batch: int):
    """Received forward buffer -> ``[B/n, sum(dims)]`` (peer q's columns at its offset)."""
    import torch

    parts, off = [], 0
    for d in dims:
        parts.append(flat[off:off + local_batch * d].view(local_batch, d))
        off += local_batch * d
    return torch.cat(parts, dim=1)


def pack_backward(grad, dims: Sequence[int]):
    """Gradient ``[B/n, sum(dims)]`` -> flat send buffer, peer q's columns contiguous."""
    import torch

    return torch.cat([g.reshape(-1) for g in torch.split(grad, list(dims), dim=1)])


def unpack_backward(flat, batch_size: int, dim: int):
    """Received backward buffer -> ``[B, dims[r]]`` (peer q's rows are the q-th B/n block)."""
    return flat.view(batch_size, dim)


# --------------------------------------------------------------------------- check patterns


def pattern(rank: int, rows: int, cols: int, salt: float = 0.0, device="cpu"):
    """Deterministic fp32-exact test values, distinct per rank (< 2**24, so exact)."""
    import torch

    base = torch.arange(rows * cols, dtype=torch.float64, device=device) % 65521
    return (base + rank * 65536 + salt).to(torch.float32).view(rows, cols)


def expected_forward(dims: Sequence[int], rank: int, batch_size: int, device="cpu"):
    """What rank `rank` must hold after the forward exchange of :func:`pattern` inputs."""
    import torch

    b = batch_size // len(dims)
    return torch.cat([pattern(q, batch_size, d, device=device)[rank * b:(rank + 1) * b]
                      for q, d in enumerate(dims)], dim=1)


def expected_backward(dims: Sequence[int], rank: int, batch_size: int, device="cpu"):
    """Gradient rank `rank` must receive when each rank q's upstream gradient is
    ``pattern(q, B/n, sum(dims), salt=0.5)``."""
    import torch

    n, b, total = len(dims), batch_size // len(dims), sum(dims)
    off = sum(dims[:rank])
    return torch.cat([pattern(q, b, total, salt=0.5, device=device)[:, off:off + dims[rank]]
                      for q in range(n)], dim=0)


# --------------------------------------------------------------------------- collectives


def exchange_forward(x, dims: Sequence[int], rank: int, batch_size: int, out=None):
    """Forward all-to-all of the flat buffers: ``[B, dims[r]]`` -> flat ``[B/n * sum(dims)]``."""
    import torch
    import torch.distributed as dist

    in_splits, out_splits = split_sizes(dims, rank, batch_size)
    if out is None:
        out = torch.empty(sum(out_splits), dtype=x.dtype, device=x.device)
    dist.all_to_all_single(out, x.reshape(-1), out_splits, in_splits)
    return out


def exchange_backward(packed_grad, dims: Sequence[int], rank: int, batch_size: int, out=None):
    """Backward all-to-all: flat packed gradient -> flat ``[B * dims[r]]``."""
    import torch
    import torch.distributed as dist

    in_splits, out_splits = split_sizes(dims, rank, batch_size)
    if out is None:
        out = torch.empty(sum(in_splits), dtype=packed_grad.dtype, device=packed_grad.device)
    dist.all_to_all_single(out, packed_grad, in_splits, out_splits)
    return out


def _make_autograd_fn():
    import torch

    class PooledAllToAll(torch.autograd.Function):
        """``[B, dims[r]]`` -> ``[B/n, sum(dims)]`` with the gradient exchange as backward."""

        @staticmethod
        def forward(ctx, x, dims, rank, batch_size):
            ctx.meta = (tuple(dims), rank, batch_size)
            flat = exchange_forward(x.contiguous(), dims, rank, batch_size)
            return unpack_forward(flat, dims, batch_size // len(dims))

        @staticmethod
        def backward(ctx, grad):
            dims, rank, batch_size = ctx.meta
            flat = exchange_backward(pack_backward(grad.contiguous(), dims), dims, rank, batch_size)
            return unpack_backward(flat, batch_size, dims[rank]), None, None, None

    return PooledAllToAll


def pooled_all_to_all(x, dims: Sequence[int], rank: int, batch_size: int):
    """Differentiable pooled-embedding all-to-all (the same exchange the benchmark times)."""
    return _make_autograd_fn().apply(x, list(dims), rank, batch_size)


# --------------------------------------------------------------------------- one sample


def check_sample(dims: Sequence[int], rank: int, batch_size: int, device: str) -> None:
    """Exchange known patterns through :func:`pooled_all_to_all` and compare with the reference."""
    import torch

    n = len(dims)
    x = pattern(rank, batch_size, dims[rank], device=device).requires_grad_(True)
    y = pooled_all_to_all(x, dims, rank, batch_size)
    want = expected_forward(dims, rank, batch_size, device=device)
    if not torch.equal(y.detach(), want):
        bad = (y.detach() != want).nonzero()[:1].tolist()
        raise AssertionError(f"forward values differ from the reference (first at {bad})")
    y.backward(pattern(rank, batch_size // n, sum(dims), salt=0.5, device=device))
    want_g = expected_backward(dims, rank, batch_size, device=device)
    if not torch.equal(x.grad, want_g):
        bad = (x.grad != want_g).nonzero()[:1].tolist()
        raise AssertionError(f"backward gradient differs from the reference (first at {bad})")


def bench_sample(dims: Sequence[int], sleep_ms: float, rank: int, batch_size: int,
                 warmup: int, iters: int, device: str, state=None) -> tuple[float, float]:
    """Per-rank median forward and backward all-to-all ms of one sample.

    Forward: barrier (untimed), sleep `sleep_ms` (the straggler delay), all-to-all,
    closing barrier; the measured sleep is subtracted, so a rank that starts
    early pays for waiting on late ones. Backward: barrier (untimed), gradient
    all-to-all.
    """
    import torch
    import torch.distributed as dist

    from neuroshard.bench.timing import benchmark, median

    n = len(dims)
    b = batch_size // n
    x = torch.randn(batch_size, dims[rank], device=device)
    out = torch.empty(b * sum(dims), device=device)
    grad = torch.randn(b * sum(dims), device=device)  # already in the packed send layout
    grad_in = torch.empty(batch_size * dims[rank], device=device)
    sleep_s = sleep_ms / 1000.0

    def forward_barrier():
        if state is not None:
            state["phase"] = "forward barrier"
        barrier(dist, device)

    def backward_barrier():
        if state is not None:
            state["phase"] = "backward barrier"
        barrier(dist, device)

    def forward_once():
        if state is not None:
            state["phase"] = "forward sleep"
        t0 = time.perf_counter()
        if sleep_s > 0:
            time.sleep(sleep_s)
        slept = (time.perf_counter() - t0) * 1000.0
        if state is not None:
            state["phase"] = "forward all-to-all"
        exchange_forward(x, dims, rank, batch_size, out=out)
        barrier(dist, device)
        return slept  # time.sleep overshoots; subtract what was really slept

    def backward_once():
        if state is not None:
            state["phase"] = "backward all-to-all"
        exchange_backward(grad, dims, rank, batch_size, out=grad_in)

    fw = benchmark(forward_once, warmup=warmup, iters=iters, device=device, before_each=forward_barrier)
    bw = benchmark(backward_once, warmup=warmup, iters=iters, device=device, before_each=backward_barrier)
    return float(median(fw)), float(median(bw))


def algbw_gbps(dims: Sequence[int], batch_size: int, ms: float) -> float:
    """Algorithm bandwidth in GB/s: the mean per-rank send buffer (B x sum(dims) x 4 / n
    bytes, the nccl-tests alltoall "size") over the slowest rank's time `ms`."""
    if ms <= 0:
        return float("nan")
    size = batch_size * sum(dims) * BYTES_PER_ELEMENT / len(dims)
    return size / (ms / 1000.0) / 1e9


# --------------------------------------------------------------------------- worker


def _validate_sample(s: dict, ndevices: int, batch_size: int, index: int) -> None:
    dims, sleeps = s.get("dims"), s.get("sleeps")
    if not isinstance(dims, list) or len(dims) != ndevices:
        raise ValueError(f"sample {index}: expected {ndevices} dims, got {dims!r}")
    if not isinstance(sleeps, list) or len(sleeps) != ndevices:
        raise ValueError(f"sample {index}: expected {ndevices} sleeps, got {sleeps!r}")
    if any((not isinstance(d, int)) or d < 0 for d in dims):
        raise ValueError(f"sample {index}: dims must be non-negative integers, got {dims}")
    if any((not isinstance(t, (int, float))) or t < 0 for t in sleeps):
        raise ValueError(f"sample {index}: sleeps must be non-negative ms, got {sleeps}")
    if batch_size % ndevices:
        raise ValueError(f"batch size {batch_size} is not divisible by {ndevices} ranks")


class SampleFeed:
    """Rank 0's reader of the samples file, which the launcher may still be appending to."""

    def __init__(self, path: str):
        self.f = open(path, "rb")
        self.buf = b""

    def take(self, most: int, wait_s: float) -> list[dict]:
        """The next 1..`most` samples, waiting up to `wait_s` for the first to be written."""
        deadline = time.monotonic() + wait_s
        while True:
            self.buf += self.f.read()
            *lines, rest = self.buf.split(b"\n")
            lines = [ln for ln in lines if ln.strip()]
            if lines:
                take = lines[:most]
                self.buf = b"\n".join(lines[most:] + [rest])
                return [json.loads(ln) for ln in take]
            if time.monotonic() > deadline:
                raise TimeoutError(f"the launcher wrote no new sample for {wait_s:g} s")
            time.sleep(0.01)


def worker_main(argv: Sequence[str] | None = None) -> None:
    """Entry point of one rank (run by torchrun).

    Rank 0 reads the samples (from node 0's job dir, where the launcher writes
    them, possibly while the job runs) and hands them to every rank in blocks
    with a broadcast, together with node 0's settings, which every node
    follows. Each rank's medians are all-gathered; the first rank of every
    node writes the result lines into its node's job dir (node 0's are the ones
    its launcher keeps)."""
    p = argparse.ArgumentParser(description="comm benchmark worker (run by torchrun)")
    p.add_argument("--worker", action="store_true")
    p.add_argument("--job_dir", required=True)
    p.add_argument("--batch_size", type=int, required=True)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S)
    p.add_argument("--check", action="store_true")
    p.add_argument("--num_samples", type=int, default=None, help="samples the launcher writes (node 0)")
    p.add_argument("--parent_pid", type=int, default=None)
    args = p.parse_args(argv)

    job_dir = args.job_dir
    rank = start_rank(job_dir, args.parent_pid)
    world = int(os.environ["WORLD_SIZE"])
    state = {"sample": None, "phase": "start-up"}

    try:
        import torch
        import torch.distributed as dist

        state["phase"] = "process-group init"
        device = init_group(args.device, args.timeout)

        state["phase"] = "receiving settings from rank 0"
        box = [{"num_samples": args.num_samples, "batch_size": args.batch_size, "warmup": args.warmup,
                "iters": args.iters, "check": args.check} if rank == 0 else None]
        dist.broadcast_object_list(box, src=0)
        job = box[0]
        batch_size, total = job["batch_size"], job["num_samples"]
        feed = SampleFeed(os.path.join(job_dir, SAMPLES_FILE)) if rank == 0 else None
        results = open(os.path.join(job_dir, RESULTS_FILE), "a") if local_lead() else None
        i = 0
        while i < total:
            state["sample"], state["phase"] = i, "receiving samples from rank 0"
            # well inside the collective timeout the other ranks wait in the broadcast with
            box = [feed.take(min(SAMPLE_BLOCK, total - i), args.timeout / 2) if rank == 0 else None]
            dist.broadcast_object_list(box, src=0)
            for s in box[0]:
                state["sample"] = i
                _validate_sample(s, world, batch_size, i)
                dims = [int(d) for d in s["dims"]]
                state["phase"] = "before forward"
                if job["check"]:
                    state["phase"] = "check exchange"
                    check_sample(dims, rank, batch_size, device)
                fw, bw = bench_sample(dims, float(s["sleeps"][rank]), rank, batch_size,
                                      job["warmup"], job["iters"], device, state=state)
                state["phase"] = "gathering medians"
                mine = torch.tensor([fw, bw], dtype=torch.float64, device=device)
                every = [torch.empty_like(mine) for _ in range(world)]
                dist.all_gather(every, mine)
                if results is not None:
                    fws = [float(t[0]) for t in every]
                    bws = [float(t[1]) for t in every]
                    rec = {"i": i, "fw": fws, "bw": bws,
                           "algbw_fw": algbw_gbps(dims, batch_size, max(fws)),
                           "algbw_bw": algbw_gbps(dims, batch_size, max(bws))}
                    if job["check"]:
                        rec["checked"] = True
                    results.write(json.dumps(rec) + "\n")
                    results.flush()
                i += 1
        state["phase"] = "shutdown"
        state["sample"] = None
        barrier(dist, device)
        if results is not None:
            results.close()
        if feed is not None:
            feed.f.close()
        dist.destroy_process_group()
    except BaseException as exc:  # report, then leave at once: a broken group can hang in teardown
        fail_rank(job_dir, rank, state, exc)


# --------------------------------------------------------------------------- launcher


@dataclass
class SampleResult:
    """Per-rank median ms of one sample, with the algorithm bandwidth (GB/s)."""

    index: int
    fw: list[float]
    bw: list[float]
    algbw_fw: float
    algbw_bw: float


class CommJob(TorchrunJob):
    """One torchrun job measuring `samples` (``{"dims": [...], "sleeps": [...]}``).

    Use as a context manager; iterate :meth:`results` to get
    :class:`SampleResult` in sample order as they are measured, and
    :meth:`sample` for the sample a result is about. Failure handling is
    :class:`TorchrunJob`'s.

    `samples` is a list, or an iterable of `num_samples` samples that is
    drawn as the job runs, `lookahead` samples ahead of the results (one long
    job instead of one job per chunk: the nodes of a multi-node job start
    each job together, so they run one). On a node other than node 0 of
    `launch` the job takes no samples: node 0's rank 0 hands them out.
    """

    job_prefix = "comm_job_"

    def __init__(self, samples: Iterable[dict], ndevices: int, batch_size: int, *,
                 warmup: int = 5, iters: int = 10, device: str = "cpu",
                 gpu_devices: str | None = None, timeout: float = DEFAULT_TIMEOUT_S,
                 startup_timeout: float = DEFAULT_STARTUP_TIMEOUT_S, check: bool = False,
                 work_dir: str | None = None, keep_dir: bool = False, worker_module: str | None = None,
                 num_samples: int | None = None, lookahead: int | None = None, launch: LaunchConfig | None = None):
        if ndevices < 1:
            raise ConfigError("--ndevices", f"need at least 1 rank, got {ndevices}")
        if batch_size < 1 or batch_size % ndevices:
            raise ConfigError("--batch_size", f"batch size {batch_size} must be a positive "
                              f"multiple of the number of ranks ({ndevices})")
        if num_samples is None:
            samples = [self._checked(s, i, ndevices) for i, s in enumerate(samples)]
            num_samples = len(samples)
        self.samples_left = iter(samples)
        self._pending: dict[int, dict] = {}
        self._written = 0
        self.lookahead = num_samples if lookahead is None else max(1, lookahead)
        self.batch_size, self.warmup, self.iters, self.check = batch_size, warmup, iters, check
        args = ["--batch_size", str(batch_size), "--warmup", str(warmup), "--iters", str(iters),
                "--num_samples", str(num_samples)]
        if check:
            args.append("--check")
        super().__init__(worker_module or WORKER_MODULE, args, ndevices, num_samples, device=device,
                         gpu_devices=gpu_devices, timeout=timeout, startup_timeout=startup_timeout,
                         work_dir=work_dir, keep_dir=keep_dir, launch=launch)

    @staticmethod
    def _checked(s: dict, i: int, ndevices: int) -> dict:
        if len(s["dims"]) != ndevices or len(s["sleeps"]) != ndevices:
            raise ConfigError("samples", f"sample {i} has {len(s['dims'])} dims and "
                              f"{len(s['sleeps'])} sleeps, expected {ndevices}")
        return {"dims": [int(d) for d in s["dims"]], "sleeps": [float(t) for t in s["sleeps"]]}

    def write_inputs(self, job_dir: str) -> None:
        open(os.path.join(job_dir, SAMPLES_FILE), "w").close()
        self.top_up(0)

    def top_up(self, done: int) -> None:
        """Write samples until `lookahead` are ahead of the `done` results (node 0 only)."""
        if self.num_items is None:
            return
        want = min(self.num_items, done + self.lookahead)
        if self._written >= want:
            return
        with open(os.path.join(self.job_dir, SAMPLES_FILE), "a") as f:
            while self._written < want:
                s = self._checked(next(self.samples_left), self._written, self.ndevices)
                self._pending[self._written] = s
                f.write(json.dumps(s) + "\n")
                self._written += 1

    def sample(self, index: int) -> dict:
        """The sample of result `index` (node 0; each can be fetched once)."""
        return self._pending.pop(index)

    def results(self) -> Iterator[SampleResult]:
        """Yield each sample's result as soon as rank 0 writes it."""
        for rec in self.records():
            yield SampleResult(rec["i"], rec["fw"], rec["bw"], rec["algbw_fw"], rec["algbw_bw"])


def run_samples(samples: Sequence[dict], ndevices: int, batch_size: int, **kw) -> list[SampleResult]:
    """Measure `samples` in one job and return all results (raises torchrun.JobError on failure)."""
    with CommJob(samples, ndevices, batch_size, **kw) as job:
        return list(job.results())


if __name__ == "__main__":
    worker_main()
