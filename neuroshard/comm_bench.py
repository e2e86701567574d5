"""All-to-all communication benchmark (DESIGN.md §5 "Communication").

Rank r holds pooled embeddings ``[B, dims[r]]``; the forward all-to-all turns
them into ``[B/n, sum(dims)]`` on every rank and the backward all-to-all sends
the gradient back. Both run as ONE flat ``dist.all_to_all_single`` with
element-count splits (the list form fails on gloo and hangs the peers, see
PLATFORM.md). gloo on CPU, NCCL on GPUs, the same code path.

Two halves live here:

* the **worker** (``python -m neuroshard.comm_bench --worker ...`` under
  torchrun): one torchrun job measures MANY samples, read from a JSON-lines
  file, so the expensive process start-up is paid once per job. Rank 0 gathers
  the per-rank medians and streams one JSON line per sample to a results file;
* the **launcher** (:class:`CommJob`): starts torchrun in its own process
  group on a free port (two jobs can run side by side), yields results as they
  arrive, and guarantees that a dead or hung rank ends the whole job within a
  bounded time with a message naming the rank and the cause, leaving no
  process behind.

Run one measurement by hand::

    python -m neuroshard.comm_bench --ndevices 4 --dims 64,256,128,32 --sleeps 0,3,0,1
    python -m neuroshard.comm_bench --ndevices 4 --dims 64,256,128,32 --check   # verify values
    python -m neuroshard.comm_bench --gpu_devices 0,1,2,3 --dims 512,256,768,128 --batch_size 65536

Units: times in ms, bandwidth in GB/s (1e9 bytes/s).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Iterator, Sequence

from neuroshard.types import InputError, NeuroShardError

BYTES_PER_ELEMENT = 4  # fp32 pooled embeddings
DEFAULT_TIMEOUT_S = 60.0  # process-group (collective) timeout
# Extra time the launcher grants beyond the collective timeout before it
# declares the job hung: the ranks' own timeout fires first and names the cause.
WATCHDOG_GRACE_S = 30.0
DEFAULT_STARTUP_TIMEOUT_S = 180.0  # torchrun + `import torch` x n on a loaded 2-core box
FAULT_KINDS = ("raise", "hang", "exit")

SAMPLES_FILE = "samples.jsonl"
RESULTS_FILE = "results.jsonl"
LOG_FILE = "torchrun.log"


class CommBenchError(NeuroShardError):
    """The all-to-all job failed: a rank raised, died or hung (message names it)."""


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


def _barrier(dist, device: str) -> None:
    if device.startswith("cuda"):
        import torch

        dist.barrier(device_ids=[torch.cuda.current_device()])
    else:
        dist.barrier()


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

    from neuroshard.timing import benchmark, median

    n = len(dims)
    b = batch_size // n
    x = torch.randn(batch_size, dims[rank], device=device)
    out = torch.empty(b * sum(dims), device=device)
    grad = torch.randn(b * sum(dims), device=device)  # already in the packed send layout
    grad_in = torch.empty(batch_size * dims[rank], device=device)
    sleep_s = sleep_ms / 1000.0

    def barrier():
        _barrier(dist, device)

    def forward_barrier():
        if state is not None:
            state["phase"] = "forward barrier"
        _barrier(dist, device)

    def backward_barrier():
        if state is not None:
            state["phase"] = "backward barrier"
        _barrier(dist, device)

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
        barrier()
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


def _is_peer_failure(exc: BaseException) -> bool:
    """True for errors that mean "a peer is gone or late" rather than a bug on this rank."""
    text = f"{type(exc).__name__} {exc}".lower()
    return any(k in text for k in ("timed out", "timeout", "closed by peer", "reset by peer",
                                   "broken pipe", "connection refused", "connection reset",
                                   "distbackenderror", "distnetworkerror", "socket"))


def _short_message(exc: BaseException, limit: int = 240) -> str:
    """First line of an exception, without gloo's source-location prefix and advice."""
    text = str(exc).strip()
    text = text.splitlines()[0] if text else ""
    text = re.sub(r"^\[[^\]]*\]\s*", "", text)
    text = text.split(". This is typically caused")[0]
    return text if len(text) <= limit else text[:limit] + "..."


def _start_orphan_watch(parent_pid: int | None) -> None:
    """Exit this rank if torchrun (our parent) or the launcher process disappears,
    so a SIGKILLed launcher never leaves ranks behind."""
    ppid = os.getppid()

    def watch():
        while True:
            time.sleep(1.0)
            if os.getppid() != ppid:
                os._exit(3)
            if parent_pid:
                try:
                    os.kill(parent_pid, 0)
                except ProcessLookupError:
                    os._exit(3)
                except PermissionError:
                    pass

    threading.Thread(target=watch, name="orphan-watch", daemon=True).start()


def _parse_fault(text: str | None):
    if not text:
        return None
    try:
        r, s, kind = text.split(":")
        fault = (int(r), int(s), kind)
    except ValueError:
        raise SystemExit(f"--fault must be RANK:SAMPLE:KIND, got {text!r}")
    if kind not in FAULT_KINDS:
        raise SystemExit(f"--fault kind must be one of {FAULT_KINDS}, got {kind!r}")
    return fault


def _inject(fault, rank: int, index: int) -> None:
    if fault is None or fault[0] != rank or fault[1] != index:
        return
    if fault[2] == "raise":
        raise RuntimeError(f"injected fault on rank {rank} at sample {index}")
    if fault[2] == "exit":
        os._exit(7)
    time.sleep(10**6)  # "hang": never reaches the collective


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


def start_rank(job_dir: str, parent_pid: int | None) -> int:
    """First thing a worker rank does: record its pid in `job_dir` (so the launcher
    can kill it) and exit by itself if torchrun or the launcher disappears. Returns RANK."""
    rank = int(os.environ["RANK"])
    with open(os.path.join(job_dir, f"rank{rank}.pid"), "w") as f:
        f.write(str(os.getpid()))
    _start_orphan_watch(parent_pid)
    return rank


def init_group(device: str, timeout: float) -> str:
    """Join the job's process group (NCCL on GPUs, gloo on CPU); returns this rank's device."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    if device == "cuda":
        local_rank = int(os.environ.get("LOCAL_RANK", os.environ["RANK"]))
        torch.cuda.set_device(local_rank)
        device, backend = f"cuda:{local_rank}", "nccl"
    else:
        device, backend = "cpu", "gloo"
    dist.init_process_group(backend=backend, timeout=timedelta(seconds=timeout))
    return device


def fail_rank(job_dir: str, rank: int, state: dict, exc: BaseException, prog: str = "comm_bench"):
    """Report a rank's failure to the launcher (``rank<r>.error``, stderr), then leave at once:
    a broken process group can hang in teardown. `state` holds the item index ("sample") and
    the phase the rank was in."""
    report = {"rank": rank, "sample": state.get("sample"), "phase": state.get("phase"),
              "type": type(exc).__name__, "message": _short_message(exc),
              "peer": _is_peer_failure(exc)}
    try:
        with open(os.path.join(job_dir, f"rank{rank}.error"), "w") as f:
            json.dump(report, f)
    except OSError:
        pass
    item = state.get("item", "sample")
    where = f"{item} {report['sample']}, " if report["sample"] is not None else ""
    print(f"{prog} rank {rank} failed ({where}{report['phase']}): "
          f"{report['type']}: {report['message']}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(1)


def worker_main(argv: Sequence[str] | None = None) -> None:
    """Entry point of one rank (run by torchrun)."""
    p = argparse.ArgumentParser(description="comm benchmark worker (run by torchrun)")
    p.add_argument("--worker", action="store_true")
    p.add_argument("--job_dir", required=True)
    p.add_argument("--batch_size", type=int, required=True)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S)
    p.add_argument("--check", action="store_true")
    p.add_argument("--parent_pid", type=int, default=None)
    p.add_argument("--fault", default=None, help="testing only: RANK:SAMPLE:raise|hang|exit")
    args = p.parse_args(argv)

    job_dir = args.job_dir
    rank = start_rank(job_dir, args.parent_pid)
    world = int(os.environ["WORLD_SIZE"])
    fault = _parse_fault(args.fault)
    state = {"sample": None, "phase": "start-up"}

    try:
        import torch
        import torch.distributed as dist

        state["phase"] = "process-group init"
        device = init_group(args.device, args.timeout)

        state["phase"] = "reading samples"
        box = [None]
        if rank == 0:
            with open(os.path.join(job_dir, SAMPLES_FILE)) as f:
                box[0] = [json.loads(line) for line in f if line.strip()]
        dist.broadcast_object_list(box, src=0)
        samples = box[0]
        for i, s in enumerate(samples):
            _validate_sample(s, world, args.batch_size, i)

        results = open(os.path.join(job_dir, RESULTS_FILE), "a") if rank == 0 else None
        for i, s in enumerate(samples):
            state["sample"] = i
            dims = [int(d) for d in s["dims"]]
            state["phase"] = "before forward"
            _inject(fault, rank, i)
            if args.check:
                state["phase"] = "check exchange"
                check_sample(dims, rank, args.batch_size, device)
            fw, bw = bench_sample(dims, float(s["sleeps"][rank]), rank, args.batch_size,
                                  args.warmup, args.iters, device, state=state)
            state["phase"] = "gathering medians"
            mine = torch.tensor([fw, bw], dtype=torch.float64, device=device)
            every = [torch.empty_like(mine) for _ in range(world)]
            dist.all_gather(every, mine)
            if results is not None:
                fws = [float(t[0]) for t in every]
                bws = [float(t[1]) for t in every]
                rec = {"i": i, "fw": fws, "bw": bws,
                       "algbw_fw": algbw_gbps(dims, args.batch_size, max(fws)),
                       "algbw_bw": algbw_gbps(dims, args.batch_size, max(bws))}
                if args.check:
                    rec["checked"] = True
                results.write(json.dumps(rec) + "\n")
                results.flush()
        state["phase"] = "shutdown"
        state["sample"] = None
        _barrier(dist, device)
        if results is not None:
            results.close()
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


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class TorchrunJob:
    """One torchrun job of a worker module whose rank 0 streams results as JSON lines.

    The worker is started as ``python -m <worker_module> --worker --job_dir DIR
    --device D --timeout S --parent_pid P [--fault F] <worker_args>`` on
    `ndevices` ranks. Each rank writes ``rank<r>.pid`` (:func:`start_rank`) and,
    on failure, ``rank<r>.error`` (:func:`fail_rank`); rank 0 appends one JSON
    object per finished item, ``{"i": index, ...}``, to ``results.jsonl``.
    Subclasses write their inputs into the job dir in :meth:`write_inputs`.

    Use as a context manager and iterate :meth:`records`. Any failure (a rank
    raising, dying or hanging; torchrun exiting early; no record within
    `stall_timeout` seconds, default ``timeout + WATCHDOG_GRACE_S``, or
    `startup_timeout` for the first) raises :class:`CommBenchError` naming the
    rank and cause; on exit every process of the job is gone.
    """

    item = "sample"  # what one result line is about, for messages
    job_prefix: str | None = None  # temp dir name prefix (default: "<module>_job_")

    def __init__(self, worker_module: str, worker_args: Sequence[str], ndevices: int, num_items: int, *,
                 device: str = "cpu", gpu_devices: str | None = None, timeout: float = DEFAULT_TIMEOUT_S,
                 startup_timeout: float = DEFAULT_STARTUP_TIMEOUT_S, stall_timeout: float | None = None,
                 work_dir: str | None = None, fault: str | None = None, keep_dir: bool = False,
                 error_type: type | None = None):
        if ndevices < 1:
            raise InputError("--ndevices", f"need at least 1 rank, got {ndevices}")
        if device == "cuda" and gpu_devices is not None:
            if len(gpu_devices.split(",")) != ndevices:
                raise InputError("--gpu_devices", f"{gpu_devices!r} names "
                                 f"{len(gpu_devices.split(','))} GPUs, expected {ndevices}")
        self.worker_module, self.worker_args = worker_module, list(worker_args)
        self.ndevices, self.num_items, self.device = ndevices, num_items, device
        self.gpu_devices, self.timeout, self.startup_timeout = gpu_devices, timeout, startup_timeout
        self.stall_timeout = stall_timeout if stall_timeout is not None else timeout + WATCHDOG_GRACE_S
        self.work_dir, self.fault, self.keep_dir = work_dir, fault, keep_dir
        self.error_type = error_type or CommBenchError
        self.job_dir: str | None = None
        self.proc: subprocess.Popen | None = None
        self._log = None
        self._failed = False

    # -- lifecycle

    def write_inputs(self, job_dir: str) -> None:
        """Hook: write the job's input files into `job_dir` before the ranks start."""

    def __enter__(self) -> "TorchrunJob":
        if self.work_dir is not None:
            os.makedirs(self.work_dir, exist_ok=True)
        prefix = self.job_prefix or self.worker_module.rsplit(".", 1)[-1] + "_job_"
        self.job_dir = tempfile.mkdtemp(prefix=prefix, dir=self.work_dir)
        self.write_inputs(self.job_dir)
        open(os.path.join(self.job_dir, RESULTS_FILE), "w").close()
        cmd = [sys.executable, "-m", "torch.distributed.run",
               f"--nproc_per_node={self.ndevices}", "--nnodes=1",
               "--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:0",  # free port per job
               f"--rdzv_id={uuid.uuid4().hex}", "--max_restarts=0",
               "-m", self.worker_module, "--worker",
               "--job_dir", self.job_dir, "--device", self.device, "--timeout", str(self.timeout),
               "--parent_pid", str(os.getpid()), *self.worker_args]
        if self.fault:
            cmd += ["--fault", self.fault]
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", "1")
        env["PYTHONUNBUFFERED"] = "1"
        # Ranks import the same neuroshard as this process, wherever it was started from.
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        if self.device == "cuda" and self.gpu_devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.gpu_devices
        self._log = open(os.path.join(self.job_dir, LOG_FILE), "w")
        # Own session/process group: the whole torchrun tree can be signalled at once.
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, env=env, start_new_session=True)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()
        if exc_type is not None:
            self._failed = True
        if self.job_dir and not self._failed and not self.keep_dir:
            shutil.rmtree(self.job_dir, ignore_errors=True)

    def close(self) -> None:
        """Stop torchrun and every rank (SIGTERM, then SIGKILL after a grace period)."""
        if self.proc is not None and self.proc.poll() is None:
            self._signal_group(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                self.proc.wait(timeout=10)
        # Ranks run in their own sessions (torchrun starts them so): kill any survivor.
        for pid in self._worker_pids():
            if _pid_alive(pid) and self.job_dir in _cmdline(pid):
                try:
                    os.killpg(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
        deadline = time.monotonic() + 10
        for pid in self._worker_pids():
            while _pid_alive(pid) and self.job_dir in _cmdline(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
        if self._log is not None:
            self._log.close()
            self._log = None

    def _signal_group(self, sig) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def _worker_pids(self) -> list[int]:
        pids = []
        if not self.job_dir or not os.path.isdir(self.job_dir):
            return pids
        for name in os.listdir(self.job_dir):
            if name.startswith("rank") and name.endswith(".pid"):
                try:
                    with open(os.path.join(self.job_dir, name)) as f:
                        pids.append(int(f.read().strip()))
                except (OSError, ValueError):
                    pass
        return pids

    # -- results

    def records(self) -> Iterator[dict]:
        """Yield each item's JSON record (in item order) as soon as rank 0 writes it."""
        path = os.path.join(self.job_dir, RESULTS_FILE)
        done, pos, buf = 0, 0, ""
        last = time.monotonic()
        stall_limit = self.stall_timeout
        with open(path, "rb") as f:
            while done < self.num_items:
                f.seek(pos)
                chunk = f.read()
                pos += len(chunk)
                buf += chunk.decode()
                *lines, buf = buf.split("\n")
                for line in lines:
                    if not line.strip():
                        continue
                    rec = json.loads(line)
                    if rec["i"] != done:
                        raise self.error_type(f"result for {self.item} {rec['i']} arrived, expected {done}")
                    done += 1
                    last = time.monotonic()
                    yield rec
                if done == self.num_items:
                    break
                rc = self.proc.poll()
                if rc is not None:
                    # A last result may have landed between the read and the poll.
                    if os.path.getsize(path) > pos:
                        continue
                    self._fail(f"torchrun exited with code {rc} after {done} of "
                               f"{self.num_items} {self.item}s")
                limit = self.startup_timeout if done == 0 else stall_limit
                if time.monotonic() - last > limit:
                    what = "start-up" if done == 0 else f"{self.item} {done}"
                    self.close()
                    self._fail(f"no result for {limit:.0f} s ({what}); job killed")
                time.sleep(0.02)
        try:
            rc = self.proc.wait(timeout=stall_limit)
        except subprocess.TimeoutExpired:
            self.close()
            self._fail(f"all {self.item}s measured but torchrun did not exit; job killed")
        if rc != 0:
            self._fail(f"all {self.item}s measured but torchrun exited with code {rc}")

    def _fail(self, what: str):
        self._failed = True
        self.close()
        raise self.error_type(f"{what}: {self.diagnose()} (logs: {self.job_dir})")

    def diagnose(self) -> str:
        """Name the failing rank(s) and the cause from the ranks' error reports."""
        reports = []
        for r in range(self.ndevices):
            path = os.path.join(self.job_dir, f"rank{r}.error")
            if os.path.exists(path):
                try:
                    with open(path) as f:
                        reports.append(json.load(f))
                except (OSError, ValueError):
                    pass
        reported = {rep["rank"] for rep in reports}

        def fmt(rep):
            where = f"{self.item} {rep['sample']}, " if rep["sample"] is not None else ""
            return f"rank {rep['rank']} ({where}{rep['phase']}): {rep['type']}: {rep['message']}"

        own = [rep for rep in reports if not rep["peer"]]
        peer = [rep for rep in reports if rep["peer"]]
        silent = [r for r in range(self.ndevices) if r not in reported]
        parts = [fmt(rep) for rep in own]
        if silent and (peer or not own):
            codes = self._exit_codes()
            desc = []
            for r in silent:
                code = codes.get(r)
                if code is None or (peer and code in (-signal.SIGTERM, -signal.SIGKILL)):
                    desc.append(f"rank {r} stopped responding (no report; hung or killed)")
                elif code < 0:
                    desc.append(f"rank {r} died from signal {-code}")
                else:
                    desc.append(f"rank {r} exited with code {code} without a report")
            parts = desc + parts
        if peer:
            ranks = ",".join(str(rep["rank"]) for rep in peer)
            parts.append(f"rank(s) {ranks} aborted waiting for peers ({fmt(peer[0])})")
        if not parts:
            parts.append("no rank reported an error; see the log")
        return "; ".join(parts)

    def _exit_codes(self) -> dict[int, int]:
        """Exit codes torchrun printed for ranks that it saw fail (not those it killed)."""
        try:
            with open(os.path.join(self.job_dir, LOG_FILE), errors="replace") as f:
                text = f.read()
        except OSError:
            return {}
        codes = {}
        for m in re.finditer(r"rank\s*:\s*(\d+)\s*\(local_rank[^)]*\)\s*\n\s*exitcode\s*:\s*(-?\d+)", text):
            codes[int(m.group(1))] = int(m.group(2))
        return codes


class CommJob(TorchrunJob):
    """One torchrun job measuring `samples` (``{"dims": [...], "sleeps": [...]}``).

    Use as a context manager; iterate :meth:`results` to get
    :class:`SampleResult` in sample order as they are measured. Failure
    handling is :class:`TorchrunJob`'s.
    """

    job_prefix = "comm_job_"

    def __init__(self, samples: Sequence[dict], ndevices: int, batch_size: int, *,
                 warmup: int = 5, iters: int = 10, device: str = "cpu",
                 gpu_devices: str | None = None, timeout: float = DEFAULT_TIMEOUT_S,
                 startup_timeout: float = DEFAULT_STARTUP_TIMEOUT_S, check: bool = False,
                 work_dir: str | None = None, fault: str | None = None,
                 keep_dir: bool = False):
        if ndevices < 1:
            raise InputError("--ndevices", f"need at least 1 rank, got {ndevices}")
        if batch_size < 1 or batch_size % ndevices:
            raise InputError("--batch_size", f"batch size {batch_size} must be a positive "
                             f"multiple of the number of ranks ({ndevices})")
        for i, s in enumerate(samples):
            if len(s["dims"]) != ndevices or len(s["sleeps"]) != ndevices:
                raise InputError("samples", f"sample {i} has {len(s['dims'])} dims and "
                                 f"{len(s['sleeps'])} sleeps, expected {ndevices}")
        self.samples = [{"dims": [int(d) for d in s["dims"]],
                         "sleeps": [float(t) for t in s["sleeps"]]} for s in samples]
        self.batch_size, self.warmup, self.iters, self.check = batch_size, warmup, iters, check
        args = ["--batch_size", str(batch_size), "--warmup", str(warmup), "--iters", str(iters)]
        if check:
            args.append("--check")
        super().__init__("neuroshard.comm_bench", args, ndevices, len(self.samples), device=device,
                         gpu_devices=gpu_devices, timeout=timeout, startup_timeout=startup_timeout,
                         work_dir=work_dir, fault=fault, keep_dir=keep_dir)

    def write_inputs(self, job_dir: str) -> None:
        with open(os.path.join(job_dir, SAMPLES_FILE), "w") as f:
            for s in self.samples:
                f.write(json.dumps(s) + "\n")

    def results(self) -> Iterator[SampleResult]:
        """Yield each sample's result as soon as rank 0 writes it."""
        for rec in self.records():
            yield SampleResult(rec["i"], rec["fw"], rec["bw"], rec["algbw_fw"], rec["algbw_bw"])


def run_samples(samples: Sequence[dict], ndevices: int, batch_size: int, **kw) -> list[SampleResult]:
    """Measure `samples` in one job and return all results (raises CommBenchError on failure)."""
    with CommJob(samples, ndevices, batch_size, **kw) as job:
        return list(job.results())


# --------------------------------------------------------------------------- CLI


def _int_list(text: str) -> list[int]:
    return [int(v) for v in text.split(",")]


def _float_list(text: str) -> list[float]:
    return [float(v) for v in text.split(",")]


def resolve_ranks(device: str, ndevices: int | None, gpu_devices: str | None) -> tuple[str, int]:
    """(device, number of ranks) from `--device`, `--ndevices` and `--gpu_devices`."""
    if gpu_devices:
        n = len([g for g in gpu_devices.split(",") if g.strip()])
        if device != "cuda":
            raise InputError("--gpu_devices", "GPUs were named but the device is cpu; "
                             "pass --device cuda (or leave --device out on a GPU machine)")
        if ndevices is not None and ndevices != n:
            raise InputError("--ndevices", f"{ndevices} ranks but --gpu_devices names {n} GPUs")
        return device, n
    if device == "cuda":
        import torch

        n = ndevices or torch.cuda.device_count()
        if n > torch.cuda.device_count():
            raise InputError("--ndevices", f"{n} ranks but only {torch.cuda.device_count()} GPUs")
        return device, n
    return device, ndevices or 4


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--worker" in argv:
        worker_main(argv)
        return
    from neuroshard.cli import add_device_arg, resolve_device

    p = argparse.ArgumentParser(
        prog="python -m neuroshard.comm_bench",
        description="Time the pooled-embedding all-to-all (forward with straggler sleeps, "
                    "backward gradient exchange) on a torchrun group: gloo on CPU, NCCL on GPUs.")
    add_device_arg(p)
    p.add_argument("--ndevices", type=int, default=None, help="number of ranks (CPU: default 4)")
    p.add_argument("--gpu_devices", default=None, help="GPUs to use, e.g. 0,1,2,3 (implies cuda)")
    p.add_argument("--dims", type=_int_list, required=True, help="per-rank dim sums, e.g. 64,256,128,32")
    p.add_argument("--sleeps", type=_float_list, default=None, help="per-rank start delays, ms")
    p.add_argument("--batch_size", type=int, default=None,
                   help="global batch B (default 4096 on CPU, 65536 on GPU); B %% ranks == 0")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                   help="collective timeout in s; a hung rank ends the job after about this")
    p.add_argument("--check", action="store_true", help="also verify exchanged values and gradients")
    args = p.parse_args(argv)
    device, n = resolve_ranks(resolve_device(args.device), args.ndevices or len(args.dims),
                              args.gpu_devices)
    sleeps = args.sleeps if args.sleeps is not None else [0.0] * n
    if len(args.dims) != n or len(sleeps) != n:
        raise InputError("--dims/--sleeps", f"need {n} values each (one per rank)")
    batch = args.batch_size or (65536 if device == "cuda" else 4096)
    res = run_samples([{"dims": args.dims, "sleeps": sleeps}], n, batch, warmup=args.warmup,
                      iters=args.iters, device=device, gpu_devices=args.gpu_devices,
                      timeout=args.timeout, check=args.check)[0]
    print(f"all-to-all  B={batch}  ranks={n}  device={device}  sum(dims)={sum(args.dims)}")
    print(f"{'rank':>4} {'dim':>6} {'sleep ms':>9} {'fw ms':>9} {'bw ms':>9}")
    for r in range(n):
        print(f"{r:>4} {args.dims[r]:>6} {sleeps[r]:>9.2f} {res.fw[r]:>9.3f} {res.bw[r]:>9.3f}")
    print(f"algbw: forward {res.algbw_fw:.3f} GB/s, backward {res.algbw_bw:.3f} GB/s"
          + ("  (values and gradients verified)" if args.check else ""))


if __name__ == "__main__":
    if "--worker" in sys.argv[1:]:
        worker_main()
    else:
        from neuroshard.cli import run_main

        run_main(main)
