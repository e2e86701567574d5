"""A pool of benchmark worker processes fed one task at a time (DESIGN §5: one worker per device).

The parent hands out tasks (a shard's table indices) and receives results;
only the parent writes files. Each worker builds its measure function once,
at start-up, from the pool's `make_measurer(device, seed)` (a picklable
callable, run in the worker: the FBGEMM benchmark in production,
`compute_collect.FbgemmMeasurer`), then calls `measure(ids) -> (cost_ms,
stats)` per task. A failing task is reported and the worker goes on; a dead
worker is replaced (up to `max_restarts`) and its task reported as failed.
Each worker answers on a pipe of its own: a worker killed while sending
(out of memory, a crash in a kernel) breaks only its own channel, never a
lock the other workers' results pass through. Workers are `spawn`ed,
single-threaded, and ignore Ctrl-C (the parent decides how the run ends);
an orphaned worker exits by itself.
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.connection as mp_conn
import os
import queue
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from neuroshard.measure.process_env import inherited_malloc_env
from neuroshard.types.errors import NeuroShardError

_POLL_S = 0.5

# make_measurer(device, seed) -> measure(ids) -> (cost_ms, stats): the work of one worker
MeasurerFactory = Callable[[str, int], Callable[[list], tuple]]


@dataclass
class WorkerStats:
    """Where workers' wall time went (s), summed over workers and samples.

    `busy_s`: handling tasks (of which `build_s` op construction, `inputs_s`
    gathering lookups, `bench_s` the warm-up + flush + timed loop, `timed_s`
    inside timed kernel iterations); `idle_s`: waiting for the next task
    (IPC, the parent's bookkeeping); `startup_s`: from process start to ready
    (imports, dataset loading, weight arena allocation), seen by the parent.
    """

    samples: int = 0
    busy_s: float = 0.0
    idle_s: float = 0.0
    startup_s: float = 0.0
    build_s: float = 0.0
    inputs_s: float = 0.0
    bench_s: float = 0.0
    timed_s: float = 0.0

    def add(self, other: dict) -> None:
        for k, v in other.items():
            setattr(self, k, getattr(self, k) + v)

    @property
    def kernel_share(self) -> float:
        """Share of worker wall time (after start-up) inside timed kernel iterations."""
        wall = self.busy_s + self.idle_s
        return self.timed_s / wall if wall > 0 else float("nan")


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    msg = text[0] if text else ""
    return f"{type(e).__name__}: {msg[:300]}"


def _reply(results, message) -> bool:
    """Send `message` to the parent; False when it no longer listens (it stopped or was stopped, e.g. by a
    signal sent to it alone): the worker then ends quietly, not with a traceback."""
    try:
        results.send(message)
    except (BrokenPipeError, ConnectionResetError, EOFError):
        return False
    return True


def _worker_main(slot: int, device: str, make_measurer: MeasurerFactory, seed: int, tasks, results) -> None:
    """Worker process: take (task_no, ids) from `tasks`, send results on its pipe `results`, stop on None or
    when the parent no longer listens."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides how a Ctrl-C ends the run
    parent = os.getppid()
    try:
        measure = make_measurer(device, seed)
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which stops the run
        _reply(results, ("fatal", slot, None, None, _one_line(e)))
        return
    if not _reply(results, ("ready", slot, None, None, None)):
        return
    t_wait = time.perf_counter()
    while True:
        try:
            task = tasks.get(timeout=1.0)
        except queue.Empty:
            if os.getppid() != parent:  # orphaned: the parent was killed
                return
            continue
        if task is None:
            return
        task_no, ids = task
        t0 = time.perf_counter()
        idle = t0 - t_wait
        try:
            cost, stats = measure(ids)
        except Exception as e:  # noqa: BLE001 - one bad shard (e.g. out of memory) must not end the run
            message = ("err", slot, task_no, ids, _one_line(e))
        else:
            stats = {**stats, "samples": 1, "busy_s": time.perf_counter() - t0, "idle_s": idle}
            message = ("ok", slot, task_no, ids, (cost, stats))
        if not _reply(results, message):
            return
        t_wait = time.perf_counter()


def _exit_reason(code: Optional[int]) -> str:
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (killed: out of memory?)" if -code == signal.SIGKILL else ""
        return f"worker died from {name}{hint}"
    return f"worker died with exit code {code}"


class _Slot:
    def __init__(self, device: str):
        self.device = device
        self.proc = None
        self.tasks = None
        self.conn = None  # the parent's end of the worker's result pipe
        self.task: Optional[tuple[int, list[int]]] = None  # in flight
        self.started = 0.0  # time.monotonic() at process start


class WorkerPool:
    """Benchmark worker processes fed one shard at a time; a dead worker is replaced (up to `max_restarts`).

    `devices`: one entry per worker ("cpu", "cuda:0", ...); `make_measurer`:
    see the module doc (worker i gets seed `seed + 1000 x restarts + i`). Use
    as a context manager; `run` drives tasks until the source is exhausted.
    """

    def __init__(self, devices: Sequence[str], make_measurer: MeasurerFactory, seed: int = 0,
                 max_restarts: Optional[int] = None):
        if not devices:
            raise NeuroShardError("need at least one worker")
        self.ctx = mp.get_context("spawn")
        self.slots = [_Slot(d) for d in devices]
        self.make_measurer = make_measurer
        self.seed = seed
        self.restarts = 0
        self.max_restarts = 2 * len(devices) if max_restarts is None else max_restarts
        self.stats = WorkerStats()
        self._task_no = 0
        self._delivering = 0  # a received result whose callback has not run yet

    def __enter__(self) -> "WorkerPool":
        for i in range(len(self.slots)):
            self._start(i)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(force=exc_type is not None)

    def _start(self, i: int) -> None:
        slot = self.slots[i]
        slot.tasks = self.ctx.Queue()
        slot.conn, send = self.ctx.Pipe(duplex=False)
        slot.proc = self.ctx.Process(target=_worker_main, daemon=True, name=f"bench-worker-{i}",
                                     args=(i, slot.device, self.make_measurer, self.seed + 1000 * self.restarts + i,
                                           slot.tasks, send))
        # A worker inherits an ignored SIGINT through exec, so a Ctrl-C while it
        # is still importing cannot kill it with a traceback; the parent handles Ctrl-C.
        main = threading.current_thread() is threading.main_thread()
        old = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
        try:
            slot.started = time.monotonic()
            with inherited_malloc_env():
                slot.proc.start()
        finally:
            if main:
                signal.signal(signal.SIGINT, old)
        send.close()  # the worker holds the only write end: its death reads as end of file here

    def close(self, force: bool = False) -> None:
        """Stop workers: politely when idle, at once (terminate) after an error or Ctrl-C."""
        for slot in self.slots:
            if slot.proc is None:
                continue
            if slot.proc.is_alive():
                if force:
                    slot.proc.terminate()
                else:
                    slot.tasks.put(None)
        for slot in self.slots:
            if slot.proc is None:
                continue
            slot.proc.join(timeout=10)
            if slot.proc.is_alive():
                slot.proc.kill()
                slot.proc.join()
            slot.proc = None
            slot.conn.close()
            slot.conn = None

    def run(self, next_task: Callable[[int], Optional[list[int]]],
            on_ok: Callable[[int, list[int], float], None],
            on_error: Callable[[int, list[int], str], None]) -> None:
        """Drive tasks until none is in flight and `next_task` has nothing more.

        `next_task(in_flight)` gives a shard's ids or None (nothing more for
        now); each one given gets the next task number (0, 1, ... over the
        pool's life), which `on_ok(task_no, ids, cost_ms)` and
        `on_error(task_no, ids, reason)` receive. Exceptions from the
        callbacks end the run (the context manager then stops the workers).
        """
        self._fill(next_task)
        while any(s.task is not None for s in self.slots):
            conns = [s.conn for s in self.slots if s.conn is not None and not s.conn.closed]
            for conn in mp_conn.wait(conns, timeout=_POLL_S):
                msg = self._receive(conn)
                if msg is not None:
                    self._handle(msg, next_task, on_ok, on_error)
            self._check_workers(next_task, on_ok, on_error)

    @staticmethod
    def _receive(conn):
        """The next message on a worker's pipe, or None once it is closed (the worker exited or died)."""
        try:
            return conn.recv()
        except (EOFError, OSError):
            conn.close()  # _check_workers reports the death and starts a replacement
            return None

    def _in_flight(self) -> int:
        return sum(s.task is not None for s in self.slots) + self._delivering

    def _fill(self, next_task) -> None:
        for slot in self.slots:
            if slot.task is None and slot.proc is not None:
                ids = next_task(self._in_flight())
                if ids is None:
                    return
                slot.task = (self._task_no, ids)
                self._task_no += 1
                slot.tasks.put(slot.task)

    def _handle(self, msg, next_task, on_ok, on_error) -> None:
        kind, i, task_no, ids, payload = msg
        slot = self.slots[i]
        if kind == "fatal":
            raise NeuroShardError(f"benchmark worker on {slot.device} could not start: {payload}")
        if kind == "ready":
            self.stats.startup_s += time.monotonic() - slot.started
            return
        if slot.task is None or slot.task[0] != task_no:
            return  # a result for a task already written off (its worker was declared dead)
        slot.task = None
        # Hand out the next shard before the callback's file I/O, so the worker
        # never waits on an fsync; until delivered, this result still counts
        # as outstanding for next_task.
        self._delivering = 1
        self._fill(next_task)
        try:
            if kind == "ok":
                cost, stats = payload
                self.stats.add(stats)
                on_ok(task_no, ids, cost)
            else:
                on_error(task_no, ids, payload)
        finally:
            self._delivering = 0
        self._fill(next_task)  # a failed shard needs a replacement

    def _check_workers(self, next_task, on_ok, on_error) -> None:
        for i, slot in enumerate(self.slots):
            if slot.proc is None or slot.proc.is_alive():
                continue
            proc, slot.proc = slot.proc, None  # no new task goes to this slot now
            # handle what it sent before dying
            while not slot.conn.closed and slot.conn.poll():
                msg = self._receive(slot.conn)
                if msg is not None:
                    self._handle(msg, next_task, on_ok, on_error)
            slot.conn.close()
            reason = _exit_reason(proc.exitcode)
            proc.join()
            lost, slot.task = slot.task, None
            if lost is not None:
                on_error(lost[0], lost[1], reason)
            if self.restarts >= self.max_restarts:
                raise NeuroShardError(f"{reason}; {self.restarts} workers replaced already, stopping")
            self.restarts += 1
            print(f"warning: {reason} (device {slot.device}); starting a replacement", file=sys.stderr)
            self._start(i)
            self._fill(next_task)


def worker_devices(device: str, gpu_devices: Sequence[int], num_workers: int) -> list[str]:
    """One device string per worker: a worker per listed GPU, or `num_workers` CPU workers."""
    if device == "cuda":
        if not gpu_devices:  # --device cuda alone: every visible GPU
            import torch

            gpu_devices = list(range(torch.cuda.device_count()))
        return [f"cuda:{g}" for g in gpu_devices]
    if num_workers < 1:
        raise NeuroShardError(f"--num_workers must be >= 1, got {num_workers}")
    return ["cpu"] * num_workers
