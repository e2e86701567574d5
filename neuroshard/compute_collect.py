"""Compute cost data collection (DESIGN.md §5): parallel, resumable, fault tolerant.

The parent process samples random shards over the augmented table list and
feeds them, one at a time, to worker processes (one per GPU, or N
single-threaded CPU processes; `spawn` context), each running a
`ShardBenchmark`. Only the parent writes files: `data.txt` gets one complete,
fsynced line per measured shard as results arrive, `errors.txt` one line per
failed shard (`ids reason`). A rerun with the same `out_dir` continues until
`data_size` samples exist; a killed or interrupted run loses at most the
shards in flight.

The same worker pool re-measures collected shards for the noise floor
(`measure_noise_floor`).

Test hooks (environment, read by workers): `NEUROSHARD_TEST_FAIL_TASKS` and
`NEUROSHARD_TEST_CRASH_TASKS` (comma lists of task numbers of this run that
raise, or kill their worker), `NEUROSHARD_TEST_SAMPLE_DELAY_S` (sleep per task).
"""

from __future__ import annotations

import json
import math
import multiprocessing as mp
import os
import queue
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from neuroshard.compute_bench import CLOCKS, DEFAULT_ARENA_GB, BenchTable
from neuroshard.formats import (DATA_TXT, TABLE_CONFIGS, append_line, check_run_config, format_compute_sample,
                                open_append, read_compute_data, read_dataset, read_lines_tolerant,
                                read_table_configs, write_table_configs)
from neuroshard.types import InputError, NeuroShardError, TableConfig, dim_set, size_gb

ERRORS_TXT = "errors.txt"
NOISE_JSON = "noise_floor.json"
# Stop when this many shards in a row fail: something is wrong with every
# shard (setup, device), not with one.
MAX_CONSECUTIVE_FAILURES = 20
# Redraws of a shard's tables (for a fixed table count) before giving up on max_mem.
MAX_RESAMPLES = 10_000
_POLL_S = 0.5


# =========================================================================== augmented tables


def augment_table_configs(configs: Sequence[TableConfig], max_dim: int) -> list[TableConfig]:
    """Every dataset table once per dim of `dim_set(max_dim)`, dim-major (all tables at max_dim first).

    Augmented table i uses the lookups of dataset table `i % len(configs)`
    (the upstream layout, so upstream data dirs stay readable).
    """
    return [c.with_dim(d) for d in dim_set(max_dim) for c in configs]


def augmented_bench_tables(aug: Sequence[TableConfig], num_dataset_tables: int) -> list[BenchTable]:
    """BenchTables of the augmented list: rows and dim of each, lookups of its dataset table."""
    return [BenchTable(c.row, c.dim, i % num_dataset_tables) for i, c in enumerate(aug)]


class ShardSampler:
    """Random shards per DESIGN §5: k ~ U{1..max_tables}, tables uniform over `aug` (repeats allowed),
    redrawn until the shard fits `max_mem` GB."""

    def __init__(self, aug: Sequence[TableConfig], max_tables: int, max_mem: float, seed):
        if max_tables < 1:
            raise NeuroShardError(f"--max_tables must be >= 1, got {max_tables}")
        self.sizes = np.array([size_gb(c.row, c.dim) for c in aug])
        if not len(aug) or self.sizes.min() > max_mem:
            raise NeuroShardError(f"--max_mem {max_mem} GB: no table fits (smallest is "
                                  f"{self.sizes.min() if len(aug) else 0:.3f} GB)")
        self.max_tables = max_tables
        self.max_mem = max_mem
        self.rng = np.random.default_rng(seed)

    def sample(self) -> list[int]:
        k = int(self.rng.integers(1, self.max_tables + 1))
        for _ in range(MAX_RESAMPLES):
            ids = self.rng.integers(0, len(self.sizes), size=k)
            if self.sizes[ids].sum() <= self.max_mem:
                return [int(i) for i in ids]
        raise NeuroShardError(f"could not draw {k} tables within --max_mem {self.max_mem} GB in "
                              f"{MAX_RESAMPLES} tries; raise --max_mem or lower --max_tables")


# =========================================================================== workers


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


def _env_ints(name: str) -> set[int]:
    text = os.environ.get(name, "")
    return {int(x) for x in text.split(",") if x.strip()}


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    msg = text[0] if text else ""
    return f"{type(e).__name__}: {msg[:300]}"


def _worker_main(slot: int, device: str, dataset_dir: str, tables: list[BenchTable], warmup: int, iters: int,
                 arena_gb: float, clock: str, seed: int, tasks, results) -> None:
    """Worker process: take (task_no, ids) from `tasks`, put results on `results`, stop on None."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides how a Ctrl-C ends the run
    parent = os.getppid()
    try:
        import torch

        torch.set_num_threads(1)
        from neuroshard.compute_bench import ShardBenchmark

        bench = ShardBenchmark(read_dataset(dataset_dir, validate=False), device, warmup, iters, seed=seed,
                               arena_gb=arena_gb, clock=clock)
        bench.prefault()  # page faults at start-up rather than in the first shards' warm-up
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which stops the run
        results.put(("fatal", slot, None, None, _one_line(e)))
        return
    fail, crash = _env_ints("NEUROSHARD_TEST_FAIL_TASKS"), _env_ints("NEUROSHARD_TEST_CRASH_TASKS")
    delay = float(os.environ.get("NEUROSHARD_TEST_SAMPLE_DELAY_S", "0") or 0)
    results.put(("ready", slot, None, None, None))
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
            if task_no in crash:
                os._exit(3)
            if delay:
                time.sleep(delay)
            if task_no in fail:
                raise RuntimeError("poisoned sample (test hook)")
            r = bench.measure([tables[i] for i in ids])
        except Exception as e:  # noqa: BLE001 - one bad shard (e.g. out of memory) must not end the run
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
            results.put(("err", slot, task_no, ids, _one_line(e)))
        else:
            stats = {"samples": 1, "busy_s": time.perf_counter() - t0, "idle_s": idle, "build_s": r.build_s,
                     "inputs_s": r.inputs_s, "bench_s": r.bench_s, "timed_s": r.timed_s}
            results.put(("ok", slot, task_no, ids, (r.median_ms, stats)))
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
        self.task: Optional[tuple[int, list[int]]] = None  # in flight
        self.started = 0.0  # time.monotonic() at process start


class WorkerPool:
    """Benchmark worker processes fed one shard at a time; a dead worker is replaced (up to `max_restarts`).

    `devices`: one entry per worker ("cpu", "cuda:0", ...). Use as a context
    manager; `run` drives tasks until the source is exhausted.
    """

    def __init__(self, devices: Sequence[str], dataset_dir, tables: Sequence[BenchTable], warmup: int, iters: int,
                 seed: int = 0, max_restarts: Optional[int] = None, arena_gb: float = DEFAULT_ARENA_GB,
                 clock: str = "wall"):
        if not devices:
            raise NeuroShardError("need at least one worker")
        self.ctx = mp.get_context("spawn")
        self.results = self.ctx.Queue()
        self.slots = [_Slot(d) for d in devices]
        self.args = (str(dataset_dir), list(tables), warmup, iters, arena_gb, clock)
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
        slot.proc = self.ctx.Process(target=_worker_main, daemon=True, name=f"bench-worker-{i}",
                                     args=(i, slot.device, *self.args, self.seed + 1000 * self.restarts + i,
                                           slot.tasks, self.results))
        # A worker inherits an ignored SIGINT through exec, so a Ctrl-C while it
        # is still importing cannot kill it with a traceback; the parent handles Ctrl-C.
        main = threading.current_thread() is threading.main_thread()
        old = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
        try:
            slot.started = time.monotonic()
            slot.proc.start()
        finally:
            if main:
                signal.signal(signal.SIGINT, old)

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
            try:
                msg = self.results.get(timeout=_POLL_S)
            except queue.Empty:
                msg = None
            if msg is not None:
                self._handle(msg, next_task, on_ok, on_error)
            self._check_workers(next_task, on_ok, on_error)

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
            # handle what it (or another worker) sent before dying
            while True:
                try:
                    self._handle(self.results.get(timeout=0.05), next_task, on_ok, on_error)
                except queue.Empty:
                    break
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
        if not gpu_devices:
            raise NeuroShardError("--gpu_devices: no GPU given")
        return [f"cuda:{g}" for g in gpu_devices]
    if num_workers < 1:
        raise NeuroShardError(f"--num_workers must be >= 1, got {num_workers}")
    return ["cpu"] * num_workers


# =========================================================================== collection


@dataclass
class CollectSettings:
    """One collection run (DESIGN §5). `max_mem` in GB; `devices`: one entry per worker."""

    dataset_dir: str
    out_dir: str
    data_size: int
    max_tables: int = 15
    max_mem: float = 4.0
    max_dim: int = 128
    devices: list = field(default_factory=lambda: ["cpu"])
    warmup: int = 5
    iters: int = 10
    seed: int = 0
    clock: str = "cpu"  # "cpu" or "wall", see ShardBenchmark; GPUs always use CUDA events

    def validate(self) -> None:
        if self.data_size < 0:
            raise NeuroShardError(f"--data_size must be >= 0, got {self.data_size}")
        if self.max_tables < 1:
            raise NeuroShardError(f"--max_tables must be >= 1, got {self.max_tables}")
        if not self.max_mem > 0:
            raise NeuroShardError(f"--max_mem must be > 0 GB, got {self.max_mem}")
        if self.iters < 1 or self.warmup < 0:
            raise NeuroShardError(f"need --iters >= 1 and --warmup >= 0, got {self.iters}, {self.warmup}")
        if not self.devices:
            raise NeuroShardError("need at least one worker")
        if self.clock not in CLOCKS:
            raise NeuroShardError(f"--clock must be one of {', '.join(CLOCKS)}, got {self.clock!r}")
        try:
            dim_set(self.max_dim)
        except ValueError as e:
            raise NeuroShardError(f"--max_dim: {e}") from None

    def run_config(self, batch_size: int) -> dict:
        """What config.json records: the settings that change the samples (not how many or where)."""
        return {"max_tables": self.max_tables, "max_mem": self.max_mem, "max_dim": self.max_dim,
                "warmup": self.warmup, "iters": self.iters, "seed": self.seed, "device": self.device_kind,
                "clock": "cuda_events" if self.device_kind == "cuda" else self.clock, "batch_size": batch_size}

    @property
    def device_kind(self) -> str:
        return "cuda" if self.devices[0].startswith("cuda") else "cpu"


@dataclass
class CollectSummary:
    """Outcome of one `collect` call: samples found, added and failed; wall time (s); worker time breakdown."""

    existing: int
    new: int
    failed: int
    elapsed_s: float
    workers: WorkerStats

    @property
    def total(self) -> int:
        return self.existing + self.new


def _check_augmented(path: Path, aug: Sequence[TableConfig], s: CollectSettings) -> bool:
    """True if `path` exists and equals `aug`; InputError if it exists and differs."""
    if not path.exists():
        return False
    old = read_table_configs(path)
    if old == list(aug):
        return True
    if len(old) != len(aug):
        diff = f"it has {len(old)} tables, this run's has {len(aug)}"
    else:
        i = next(i for i, (a, b) in enumerate(zip(old, aug)) if a != b)
        diff = f"first difference at table {i}: {json.dumps(old[i].to_json())} vs {json.dumps(aug[i].to_json())}"
    raise InputError(path, f"augmented table list differs from the one --dataset_dir {s.dataset_dir} with "
                           f"--max_dim {s.max_dim} gives ({diff}); use the same dataset and --max_dim, "
                           "or a new --out_dir")


def collect(s: CollectSettings, progress: bool = True) -> CollectSummary:
    """Collect compute cost samples into `s.out_dir` until it holds `s.data_size` of them."""
    from tqdm import tqdm

    s.validate()
    out = Path(s.out_dir)
    dataset = read_dataset(s.dataset_dir)  # full validation once; workers skip it
    aug = augment_table_configs(dataset.configs, s.max_dim)
    have_configs = _check_augmented(out / TABLE_CONFIGS, aug, s)
    check_run_config(out, s.run_config(dataset.batch_size))
    if not have_configs:
        write_table_configs(out / TABLE_CONFIGS, aug)
    data_fh = open_append(out / DATA_TXT)  # also cuts a torn last line of a killed run
    err_fh = open_append(out / ERRORS_TXT)
    try:
        existing = len(read_compute_data(out)[1])
        prior_failures = len(read_lines_tolerant(out / ERRORS_TXT))
        todo = s.data_size - existing
        if todo <= 0:
            print(f"{out / DATA_TXT} already holds {existing} samples (--data_size {s.data_size})", file=sys.stderr)
            return CollectSummary(existing, 0, 0, 0.0, WorkerStats())
        # A resumed run draws from a new stream: seeding with how much exists
        # keeps it from replaying the shards of the run it continues.
        sampler = ShardSampler(aug, s.max_tables, s.max_mem, [s.seed, existing, prior_failures])
        done, failed, streak = 0, 0, 0
        bar = tqdm(total=s.data_size, initial=existing, unit="sample", desc="compute samples",
                   disable=not progress, smoothing=0.05, dynamic_ncols=True)

        def next_task(in_flight: int):
            return sampler.sample() if done + in_flight < todo else None

        def on_ok(task_no, ids, cost):
            nonlocal done, streak
            append_line(data_fh, format_compute_sample(ids, cost))
            done += 1
            streak = 0
            bar.update(1)

        def on_error(task_no, ids, reason):
            nonlocal failed, streak
            append_line(err_fh, f"{','.join(map(str, ids))} {reason}")
            failed += 1
            streak += 1
            bar.set_postfix(failed=failed)
            tqdm.write(f"warning: shard {','.join(map(str, ids))} failed: {reason} (logged in {out / ERRORS_TXT})",
                       file=sys.stderr)
            if streak >= MAX_CONSECUTIVE_FAILURES:
                raise NeuroShardError(f"{streak} shards in a row failed (last: {reason}); see {out / ERRORS_TXT}")

        t0 = time.perf_counter()
        try:
            tables = augmented_bench_tables(aug, len(dataset.configs))
            # no shard exceeds max_mem, so a larger weight arena would never be used
            arena_gb = min(DEFAULT_ARENA_GB, s.max_mem)
            with WorkerPool(s.devices, s.dataset_dir, tables, s.warmup, s.iters, seed=s.seed, arena_gb=arena_gb,
                            clock="wall" if s.device_kind == "cuda" else s.clock) as pool:
                pool.run(next_task, on_ok, on_error)
        finally:
            bar.close()
        return CollectSummary(existing, done, failed, time.perf_counter() - t0, pool.stats)
    finally:
        data_fh.close()
        err_fh.close()


# =========================================================================== noise floor


def _rel_diff_stats(a: np.ndarray, b: np.ndarray) -> dict:
    """|a - b| / b over pairs with b > 0: median, mean (the MAPE a perfect predictor of a would get), p90."""
    keep = b > 0
    r = np.abs(a[keep] - b[keep]) / b[keep]
    if not len(r):
        return {"median": math.nan, "mean": math.nan, "p90": math.nan, "n": 0}
    return {"median": float(np.median(r)), "mean": float(np.mean(r)), "p90": float(np.quantile(r, 0.9)),
            "n": int(len(r))}


def measure_noise_floor(data_dir, dataset_dir, num_samples: int, devices: Sequence[str], warmup: int, iters: int,
                        seed: int = 0, repeats: int = 2, progress: bool = True, clock: str = "wall") -> dict:
    """Re-measure `num_samples` random collected shards `repeats` times (rounds interleaved over shards).

    Returns relative differences: repeat 1 vs the stored measurement, and
    repeat 2 vs repeat 1 (two fresh measurements), plus the per-shard values.
    """
    from tqdm import tqdm

    data_dir = Path(data_dir)
    aug, samples = read_compute_data(data_dir)
    if not samples:
        raise InputError(data_dir / DATA_TXT, "no samples to re-measure")
    dataset = read_dataset(dataset_dir)
    expected = augment_table_configs(dataset.configs, aug[0].dim)
    if expected != aug:
        raise InputError(data_dir / TABLE_CONFIGS, f"augmented table list does not come from --dataset_dir "
                                                   f"{dataset_dir}")
    rng = np.random.default_rng(seed)
    pick = rng.choice(len(samples), size=min(num_samples, len(samples)), replace=False)
    fresh = np.full((repeats, len(pick)), np.nan)
    issued: list[tuple[int, int]] = []  # task number -> (round, column)
    it = iter((r, j) for r in range(repeats) for j in range(len(pick)))
    bar = tqdm(total=repeats * len(pick), unit="shard", desc="re-measure", disable=not progress)

    def next_task(in_flight):
        nxt = next(it, None)
        if nxt is None:
            return None
        issued.append(nxt)
        return list(samples[int(pick[nxt[1]])][0])

    def on_ok(task_no, ids, cost):
        r, j = issued[task_no]
        fresh[r, j] = cost
        bar.update(1)

    def on_error(task_no, ids, reason):
        bar.update(1)
        tqdm.write(f"warning: shard {','.join(map(str, ids))} failed: {reason}", file=sys.stderr)

    tables = augmented_bench_tables(aug, len(dataset.configs))
    try:
        largest = max(sum(aug[i].size_gb for i in samples[int(p)][0]) for p in pick)
        with WorkerPool(devices, dataset_dir, tables, warmup, iters, seed=seed,
                        arena_gb=min(DEFAULT_ARENA_GB, largest), clock=clock) as pool:
            pool.run(next_task, on_ok, on_error)
    finally:
        bar.close()
    stored = np.array([samples[int(p)][1] for p in pick])
    ok = ~np.isnan(fresh).any(0)
    report = {"data_dir": str(data_dir), "num_shards": int(ok.sum()), "repeats": repeats, "warmup": warmup,
              "iters": iters, "clock": clock, "workers": len(devices), "seed": seed,
              "fresh_vs_stored": _rel_diff_stats(fresh[0][ok], stored[ok])}
    if repeats >= 2:
        report["fresh_vs_fresh"] = _rel_diff_stats(fresh[1][ok], fresh[0][ok])
    report["shards"] = [{"ids": list(samples[int(p)][0]), "stored_ms": float(stored[j]),
                         "fresh_ms": [float(x) for x in fresh[:, j]]} for j, p in enumerate(pick)]
    return report

