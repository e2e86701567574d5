"""The all-to-all measurement job: many samples on many ranks in one torchrun job (the comm collection's).

A sample is ``{"dims": per-rank dim sums, "sleeps": per-rank start delays
in ms}``. The launcher (`AllToAllJob`) writes the samples into the job dir
as JSON lines, ahead of the results (it may still be drawing them while
the job runs), so process start-up is paid once per job; on every rank the
rank loop (`measure.rank`) runs `AllToAllWorker`: rank 0 reads the samples
in blocks and broadcasts them, every rank times its forward and backward
exchange (`alltoall.bench_sample`), the per-rank medians are all-gathered
and each node's first rank writes one `SampleResult` line per sample.

    with AllToAllJob(samples, ndevices=4, batch_size=4096) as job:
        for res in job.results():      # SampleResult, in sample order, as measured
            ...

Units: ms, GB/s.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import ClassVar, Iterable, Iterator, Sequence

from neuroshard.measure.alltoall import algbw_gbps, bench_sample, check_sample
from neuroshard.measure.launch import (
    DEFAULT_STARTUP_TIMEOUT_S,
    DEFAULT_TIMEOUT_S,
    LaunchConfig,
    TorchrunJob,
)
from neuroshard.measure.rank import RankContext, RankWorker
from neuroshard.types.codec import Record, json_field
from neuroshard.types.errors import ConfigError

SAMPLES_FILE = "samples.jsonl"
SAMPLE_BLOCK = 64  # samples rank 0 hands out per broadcast


@dataclass(frozen=True)
class AllToAllSpec(Record):
    """The job's settings, as the ranks read them from the job file: the global batch, untimed and timed
    iterations per direction, whether to verify the exchanged values first, and how many samples come."""

    batch_size: int
    warmup: int
    iters: int
    check: bool
    num_samples: int



@dataclass
class SampleResult(Record):
    """Per-rank median ms of one sample, with the algorithm bandwidth (GB/s)."""

    index: int = json_field(key="i")
    fw: list[float] = json_field()
    bw: list[float] = json_field()
    algbw_fw: float = json_field()
    algbw_bw: float = json_field()
    checked: bool = json_field(False, omit=lambda v: not v)


# --------------------------------------------------------------------------- rank side


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

    def close(self) -> None:
        self.f.close()


class AllToAllWorker(RankWorker):
    """One rank of the job: times each sample's exchanges; each node's first rank records every rank's
    medians (node 0's records are the results)."""

    item = "sample"
    first_phase = "before forward"

    def __init__(self, ctx: RankContext):
        super().__init__(ctx)
        self.spec = AllToAllSpec(**ctx.spec)
        self.feed = SampleFeed(os.path.join(ctx.job_dir, SAMPLES_FILE)) if ctx.rank == 0 else None

    def read_block(self, done: int) -> list:
        left = self.spec.num_samples - done
        # well inside the collective timeout the other ranks wait in the broadcast with
        return self.feed.take(min(SAMPLE_BLOCK, left), float(self.ctx.local["timeout"]) / 2) if left > 0 else []

    def measure(self, k: int, sample) -> dict | None:
        import torch
        import torch.distributed as dist

        from neuroshard.measure.rank import local_lead

        ctx, spec, st = self.ctx, self.spec, self.ctx.state
        _validate_sample(sample, ctx.world, spec.batch_size, k)
        dims = [int(d) for d in sample["dims"]]
        if spec.check:
            st["phase"] = "check exchange"
            check_sample(dims, ctx.rank, spec.batch_size, ctx.device)
        fw, bw = bench_sample(dims, float(sample["sleeps"][ctx.rank]), ctx.rank, spec.batch_size, spec.warmup,
                              spec.iters, ctx.device, state=st)
        st["phase"] = "gathering medians"
        mine = torch.tensor([fw, bw], dtype=torch.float64, device=ctx.device)
        every = [torch.empty_like(mine) for _ in range(ctx.world)]
        dist.all_gather(every, mine)
        if not local_lead():
            return None
        fws, bws = [float(t[0]) for t in every], [float(t[1]) for t in every]
        return SampleResult(k, fws, bws, algbw_gbps(dims, spec.batch_size, max(fws)),
                            algbw_gbps(dims, spec.batch_size, max(bws)), checked=spec.check).to_json()

    def close(self) -> None:
        if self.feed is not None:
            self.feed.close()


# --------------------------------------------------------------------------- launcher


class AllToAllJob(TorchrunJob):
    """One torchrun job measuring `samples` (``{"dims": [...], "sleeps": [...]}``).

    Use as a context manager; iterate :meth:`results` to get
    :class:`SampleResult` in sample order as they are measured, and
    :meth:`sample` for the sample a result is about. Failure handling is
    :class:`launch.TorchrunJob`'s.

    `samples` is a list, or an iterable of `num_samples` samples that is
    drawn as the job runs, `lookahead` samples ahead of the results (one long
    job instead of one job per chunk: the nodes of a multi-node job start
    each job together, so they run one). On a node other than node 0 of
    `launch` the job takes no samples: node 0's rank 0 hands them out.
    `check`: verify each sample's exchanged values against a reference first.
    """

    job_prefix: ClassVar[str] = "comm_job_"

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
        spec = AllToAllSpec(batch_size=batch_size, warmup=warmup, iters=iters, check=check, num_samples=num_samples)
        super().__init__("alltoall", spec, ndevices, num_samples, device=device, gpu_devices=gpu_devices,
                         timeout=timeout, startup_timeout=startup_timeout, work_dir=work_dir, keep_dir=keep_dir,
                         launch=launch, worker_module=worker_module)

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
            yield SampleResult.from_json(rec)


def run_samples(samples: Sequence[dict], ndevices: int, batch_size: int, **kw) -> list[SampleResult]:
    """Measure `samples` in one job and return all results (raises launch.JobError on failure)."""
    with AllToAllJob(samples, ndevices, batch_size, **kw) as job:
        return list(job.results())
