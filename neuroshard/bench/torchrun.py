"""The torchrun job launcher shared by the all-to-all benchmark and the hardware evaluation.

A job runs a worker module's entry point on `ndevices` ranks under torchrun
(`python -m torch.distributed.run`: gloo on CPU, NCCL on GPUs). Rank 0
streams one JSON line per finished item to `results.jsonl` in the job dir;
the launcher (`TorchrunJob`) yields them as they arrive and guarantees that
a dead or hung rank ends the whole job within a bounded time with a message
naming the rank and the cause (`JobError`), leaving no process behind.

The rank side of the protocol: `start_rank` (pid file, orphan watch),
`init_group` (the process group), `barrier`, and `fail_rank` (the error
report the launcher reads). Times in s.
"""

from __future__ import annotations

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
from datetime import timedelta
from typing import Iterator, Sequence

from neuroshard.types import ConfigError, NeuroShardError

DEFAULT_TIMEOUT_S = 60.0  # process-group (collective) timeout
# Extra time the launcher grants beyond the collective timeout before it
# declares the job hung: the ranks' own timeout fires first and names the cause.
WATCHDOG_GRACE_S = 30.0
DEFAULT_STARTUP_TIMEOUT_S = 180.0  # torchrun + `import torch` x n on a loaded 2-core box

RESULTS_FILE = "results.jsonl"
LOG_FILE = "torchrun.log"


class JobError(NeuroShardError):
    """A torchrun job failed: a rank raised, died or hung (the message names it)."""


# --------------------------------------------------------------------------- rank side


def barrier(dist, device: str) -> None:
    """A barrier on the job's process group (on NCCL, on this rank's GPU)."""
    if device.startswith("cuda"):
        import torch

        dist.barrier(device_ids=[torch.cuda.current_device()])
    else:
        dist.barrier()



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


# --------------------------------------------------------------------------- launcher


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
    --device D --timeout S --parent_pid P <worker_args>`` on
    `ndevices` ranks. Each rank writes ``rank<r>.pid`` (:func:`start_rank`) and,
    on failure, ``rank<r>.error`` (:func:`fail_rank`); rank 0 appends one JSON
    object per finished item, ``{"i": index, ...}``, to ``results.jsonl``.
    Subclasses write their inputs into the job dir in :meth:`write_inputs`.

    Use as a context manager and iterate :meth:`records`. Any failure (a rank
    raising, dying or hanging; torchrun exiting early; no record within
    `stall_timeout` seconds, default ``timeout + WATCHDOG_GRACE_S``, or
    `startup_timeout` for the first) raises :class:`JobError` naming the
    rank and cause; on exit every process of the job is gone.
    """

    item = "sample"  # what one result line is about, for messages
    job_prefix: str | None = None  # temp dir name prefix (default: "<module>_job_")

    def __init__(self, worker_module: str, worker_args: Sequence[str], ndevices: int, num_items: int, *,
                 device: str = "cpu", gpu_devices: str | None = None, timeout: float = DEFAULT_TIMEOUT_S,
                 startup_timeout: float = DEFAULT_STARTUP_TIMEOUT_S, stall_timeout: float | None = None,
                 work_dir: str | None = None, keep_dir: bool = False):
        if ndevices < 1:
            raise ConfigError("--ndevices", f"need at least 1 rank, got {ndevices}")
        if device == "cuda" and gpu_devices is not None:
            if len(gpu_devices.split(",")) != ndevices:
                raise ConfigError("--gpu_devices", f"{gpu_devices!r} names "
                                 f"{len(gpu_devices.split(','))} GPUs, expected {ndevices}")
        self.worker_module, self.worker_args = worker_module, list(worker_args)
        self.ndevices, self.num_items, self.device = ndevices, num_items, device
        self.gpu_devices, self.timeout, self.startup_timeout = gpu_devices, timeout, startup_timeout
        self.stall_timeout = stall_timeout if stall_timeout is not None else timeout + WATCHDOG_GRACE_S
        self.work_dir, self.keep_dir = work_dir, keep_dir
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
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", "1")
        env["PYTHONUNBUFFERED"] = "1"
        # Ranks import the same neuroshard as this process, wherever it was started from.
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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
                        raise JobError(f"result for {self.item} {rec['i']} arrived, expected {done}")
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
        raise JobError(f"{what}: {self.diagnose()} (logs: {self.job_dir})")

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
