"""Compute cost data collection (DESIGN.md §5): parallel, resumable, fault tolerant.

The parent process samples random shards over the augmented table list and
feeds them, one at a time, to a `pool.WorkerPool` (one worker per GPU, or N
single-threaded CPU processes), each running a `ShardBenchmark`. Only the
parent writes files, and only one collection may write a data dir at a time
(a lock on `data.txt`): `data.txt` gets one complete, fsynced line per
measured shard as results arrive, `errors.txt` one line per failed shard
(`ids reason`). A rerun with the same `out_dir` continues until `data_size`
samples exist; a killed or interrupted run loses at most the shards in flight.

The same pool re-measures collected shards for the noise floor
(`measure_noise_floor`, written in the schema of `measure.noise`).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import ClassVar, NamedTuple, Sequence

import numpy as np

from neuroshard.checks import check_choice, check_float, check_int, check_max_dim, parse_int_list
from neuroshard.data.split import table_halves
from neuroshard.formats.cost_data import (
    DATA_TXT,
    format_compute_sample,
    read_compute_data,
)
from neuroshard.formats.dataset import (
    TABLE_CONFIGS,
    read_dataset,
    read_table_configs,
    write_table_configs,
)
from neuroshard.formats.io import (
    RUN_CONFIG,
    append_line,
    check_run_config,
    open_append,
    read_json,
    read_lines_tolerant,
)
from neuroshard.measure.kernel import DEFAULT_ARENA_GB, BenchTable
from neuroshard.measure.noise import noise_report
from neuroshard.measure.pool import MeasurerFactory, WorkerPool, WorkerStats
from neuroshard.measure.timing import CLOCKS
from neuroshard.settings import Settings, common, setting
from neuroshard.types.errors import ConfigError, InputError, NeuroShardError
from neuroshard.types.tables import TableConfig, dim_set, size_gb

ERRORS_TXT = "errors.txt"
# Stop when this many shards in a row fail: something is wrong with every
# shard (setup, device), not with one.
MAX_CONSECUTIVE_FAILURES = 20
# Redraws of a shard's tables (for a fixed table count) before giving up on max_mem.
MAX_RESAMPLES = 10_000


# =========================================================================== augmented tables


def augment_table_configs(configs: Sequence[TableConfig], max_dim: int) -> list[TableConfig]:
    """Every dataset table once per dim of `dim_set(max_dim)`, dim-major (all tables at max_dim first).

    Augmented table i uses the lookups of dataset table `i % len(configs)`
    (the upstream layout, so upstream data dirs stay readable). Where a table's lookups fall over its rows
    (`row_lookups`) stays with the dataset: the compute model reads rows, lookups and locality, and the cost
    data keeps the upstream format.
    """
    return [replace(c, row_lookups=None).with_dim(d) for d in dim_set(max_dim) for c in configs]


def augmented_bench_tables(aug: Sequence[TableConfig], num_dataset_tables: int) -> list[BenchTable]:
    """BenchTables of the augmented list: rows, dim and kind of each, lookups of its dataset table (an unpooled
    dataset table is timed unpooled, as its data's `pooled` says the compute model reads it)."""
    return [BenchTable(c.row, c.dim, i % num_dataset_tables, pooled=c.pooled) for i, c in enumerate(aug)]


class ShardTask(NamedTuple):
    """What a benchmark worker measures: a shard (`ids` into the augmented table list) at a global `batch`
    (None: the dataset's)."""

    ids: tuple[int, ...]
    batch: int | None = None

    def label(self) -> str:
        """The shard as errors.txt and warnings name it."""
        ids = ",".join(map(str, self.ids))
        return ids if self.batch is None else f"{ids} @{self.batch}"


class ShardSampler:
    """Random shards per DESIGN §5: k ~ U{1..max_tables}, tables uniform over `aug` (repeats allowed),
    redrawn until the shard fits `max_mem` GB; with `batches`, each shard's batch drawn uniformly from them
    (`task`).

    With `half_share` > 0 (and `halves`: the half of each dataset table, see
    `data.split.table_halves`), that share of the shards draws all its tables
    from one half, picked at random; every table stays equally likely overall.
    The held-out-table check trains on one half's shards and tests on the
    other's (`train.heldout`).
    """

    def __init__(self, aug: Sequence[TableConfig], max_tables: int, max_mem: float, seed,
                 halves: np.ndarray | None = None, half_share: float = 0.0, batches: Sequence[int] = ()):
        if max_tables < 1:
            raise NeuroShardError(f"--max_tables must be >= 1, got {max_tables}")
        self.sizes = np.array([size_gb(c.row, c.dim) for c in aug])
        if not len(aug) or self.sizes.min() > max_mem:
            raise NeuroShardError(f"--max_mem {max_mem} GB: no table fits (smallest is "
                                  f"{self.sizes.min() if len(aug) else 0:.3f} GB)")
        self.max_tables = max_tables
        self.max_mem = max_mem
        self.rng = np.random.default_rng(seed)
        self.half_share = half_share
        self.batches = list(batches)
        if half_share > 0:
            half_of = halves[np.arange(len(aug)) % len(halves)]
            self.pools = [np.flatnonzero(half_of == h) for h in (0, 1)]

    def sample(self) -> list[int]:
        k = int(self.rng.integers(1, self.max_tables + 1))
        pool = None
        if self.half_share > 0 and self.rng.random() < self.half_share:
            pool = self.pools[int(self.rng.integers(2))]
        for _ in range(MAX_RESAMPLES):
            ids = self.rng.integers(0, len(self.sizes), size=k) if pool is None else \
                pool[self.rng.integers(0, len(pool), size=k)]
            if self.sizes[ids].sum() <= self.max_mem:
                return [int(i) for i in ids]
        raise NeuroShardError(f"could not draw {k} tables within --max_mem {self.max_mem} GB in "
                              f"{MAX_RESAMPLES} tries; raise --max_mem or lower --max_tables")

    def task(self) -> ShardTask:
        """A shard and its batch (None without `batches`: the dataset's; the shard is drawn first, so the
        shards are those of a run without batches)."""
        ids = tuple(self.sample())
        if not self.batches:
            return ShardTask(ids)
        batch = self.batches[int(self.rng.integers(len(self.batches)))]
        return ShardTask(ids, None if batch is None else int(batch))


# =========================================================================== the benchmark in a worker


class FbgemmMeasurer:
    """The pool's measure function in production: FBGEMM forward+backward of a shard (ms).

    Built in the worker (`make(device, seed)`), so only benchmark processes
    import FBGEMM and allocate the weight arena.
    """

    def __init__(self, dataset_dir, tables: Sequence[BenchTable], warmup: int, iters: int,
                 arena_gb: float = DEFAULT_ARENA_GB, clock: str = "wall"):
        self.args = (str(dataset_dir), list(tables), warmup, iters, arena_gb, clock)

    def __call__(self, device: str, seed: int):
        import torch

        from neuroshard.measure.kernel import ShardBenchmark

        dataset_dir, tables, warmup, iters, arena_gb, clock = self.args
        torch.set_num_threads(1)
        bench = ShardBenchmark(read_dataset(dataset_dir, validate=False), device, warmup, iters, seed=seed,
                               arena_gb=arena_gb, clock="wall" if device.startswith("cuda") else clock)
        bench.prefault()  # page faults at start-up rather than in the first shards' warm-up
        return partial(_measure, bench, tables)


def _measure(bench, tables: Sequence[BenchTable], task: ShardTask) -> tuple[float, dict]:
    try:
        r = bench.measure([tables[i] for i in task.ids], task.batch)
    except Exception:
        if bench.cuda:
            import torch

            torch.cuda.empty_cache()  # an out-of-memory shard must not poison the next ones
        raise
    return r.median_ms, {"build_s": r.build_s, "inputs_s": r.inputs_s, "bench_s": r.bench_s, "timed_s": r.timed_s}


# =========================================================================== collection


@dataclass(frozen=True)
class ComputeCollectConfig(Settings):
    """Settings that shape the compute measurements (recorded in `out_dir/config.json`; its fields are the
    collection's flags, but for the device, which the script resolves).

    Shards: k ~ U{1..max_tables} tables of the augmented list (dims from
    `max_dim` halving to 4), within `max_mem` GB (a device's memory:
    `Problem.max_mem`). `warmup`/`iters`: untimed
    and timed iterations per shard (median kept); `clock`: CPU kernels' clock
    ("cpu" or "wall", see `measure.timing.benchmark`; GPUs use CUDA events);
    `device`: "cpu" or "cuda"; `seed`: the shard stream (and the split of the
    tables into halves); `half_share`: the share of shards drawn from one half
    of the tables (see ShardSampler).
    """

    TITLE: ClassVar[str] = "what is measured"

    max_tables: int = setting(15, "tables per shard: uniform in 1..max_tables")
    max_mem: float = setting(4.0, "", cli=False)
    max_dim: int = common("max_dim")
    warmup: int = common("warmup", help="untimed iterations per shard")
    iters: int = common("iters", help="timed iterations per shard (their median is kept)")
    seed: int = common("seed", help="the shard stream and the split of the tables into halves")
    clock: str = common("clock", help="CPU kernels: cpu = CPU time of the benchmark thread (leaves out time spent "
                                      "descheduled, so a busy shared machine disturbs it far less; equals wall time "
                                      "on an idle one), wall = elapsed time. GPUs always use CUDA events")
    device: str = setting("cpu", "", cli=False)
    batch_sizes: str = setting("", "global batches to time shards at, one drawn per shard (comma list, each at "
                                   "most the dataset's batch: the first samples of it); default: the dataset's "
                                   "batch", omit=lambda v: not v)  # older data dirs stay resumable
    half_share: float = setting(0.0, "share of the shards whose tables all come from one half of the dataset's "
                                     "tables (a seeded split; every table stays equally likely overall), so that "
                                     "heldout_check.py can train on one half and test on tables the model "
                                     "never saw", omit=lambda v: not v)  # older data dirs stay resumable

    def validate(self) -> None:
        check_int("--max_tables", self.max_tables, 1)
        check_float("--max_mem", self.max_mem, 0.0, lo_open=True)
        check_max_dim("--max_dim", self.max_dim)
        check_int("--warmup", self.warmup, 0)
        check_int("--iters", self.iters, 1)
        check_int("--seed", self.seed)
        check_choice("--clock", self.clock, CLOCKS)
        check_choice("--device", self.device, ("cpu", "cuda"))
        check_float("--half_share", self.half_share, 0.0, 1.0)
        self.batches()

    def batches(self, dataset_batch: int | None = None) -> list[int]:
        """`batch_sizes` as integers (empty: the dataset's batch only); ConfigError for a bad list or, given
        the dataset's batch, a batch above it. The dataset's batch itself is written as None (the default)."""
        if not self.batch_sizes:
            return []
        out = parse_int_list(self.batch_sizes, "--batch_sizes")
        if not out or min(out) < 1:
            raise ConfigError("--batch_sizes", f"expected batches >= 1, got {self.batch_sizes!r}")
        if dataset_batch is not None:
            over = [b for b in out if b > dataset_batch]
            if over:
                raise ConfigError("--batch_sizes", f"{over[0]} is more than the dataset's batch {dataset_batch}: a "
                                                   "shard is timed on the first samples of the dataset's batch")
        return sorted(set(out))

    def run_config(self, batch_size: int) -> dict:
        """What config.json records: the settings that change the samples (not how many or where), with the
        dataset's batch; a GPU's clock is its CUDA events."""
        d = self.to_json()
        if self.device == "cuda":
            d["clock"] = "cuda_events"
        return {**d, "batch_size": batch_size}

    @classmethod
    def recorded(cls, data_dir) -> "ComputeCollectConfig":
        """The settings `data_dir`'s config.json recorded (`run_config`): what a re-measurement of its samples
        repeats; the class's defaults for a dir without one. InputError naming the file when it is malformed."""
        path = Path(data_dir) / RUN_CONFIG
        if not path.exists():
            return cls()
        try:
            return cls.from_json(read_json(path))
        except (KeyError, TypeError, ValueError) as e:
            raise InputError(path, f"not a compute collection's settings: {e}") from None


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


def _check_augmented(path: Path, aug: Sequence[TableConfig], dataset_dir, max_dim: int) -> bool:
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
    raise InputError(path, f"augmented table list differs from the one --dataset_dir {dataset_dir} with "
                           f"--max_dim {max_dim} gives ({diff}); use the same dataset and --max_dim, "
                           "or a new --out_dir")


def collect(dataset_dir, out_dir, cfg: ComputeCollectConfig, data_size: int, devices: Sequence[str],
            progress: bool = True, make_measurer: MeasurerFactory | None = None) -> CollectSummary:
    """Collect compute cost samples into `out_dir` until it holds `data_size` of them.

    `devices`: one entry per worker ("cpu" or "cuda:N"); `make_measurer`: the
    workers' measure function (default: `FbgemmMeasurer` on the dataset).
    """
    cfg.validate()
    check_int("--data_size", data_size, 0)
    out = Path(out_dir)
    dataset = read_dataset(dataset_dir)  # full validation once; workers skip it
    aug = augment_table_configs(dataset.configs, cfg.max_dim)
    out.mkdir(parents=True, exist_ok=True)
    data_fh = open_append(out / DATA_TXT, exclusive=True)  # one writer; also cuts a torn last line
    try:
        have_configs = _check_augmented(out / TABLE_CONFIGS, aug, dataset_dir, cfg.max_dim)
        check_run_config(out, cfg.run_config(dataset.batch_size))
        if not have_configs:
            write_table_configs(out / TABLE_CONFIGS, aug)
        with open_append(out / ERRORS_TXT) as err_fh:
            return _collect(out, dataset_dir, dataset, aug, cfg, data_size, devices, progress, make_measurer,
                            data_fh, err_fh)
    finally:
        data_fh.close()


def _collect(out: Path, dataset_dir, dataset, aug, cfg, data_size, devices, progress, make_measurer, data_fh,
             err_fh) -> CollectSummary:
    from tqdm import tqdm

    existing = len(read_compute_data(out)[1])
    prior_failures = len(read_lines_tolerant(out / ERRORS_TXT))
    todo = data_size - existing
    if todo <= 0:
        print(f"{out / DATA_TXT} already holds {existing} samples (--data_size {data_size})", file=sys.stderr)
        return CollectSummary(existing, 0, 0, 0.0, WorkerStats())
    # A resumed run draws from a new stream: seeding with how much exists
    # keeps it from replaying the shards of the run it continues.
    batches = [None if b == dataset.batch_size else b for b in cfg.batches(dataset.batch_size)]
    sampler = ShardSampler(aug, cfg.max_tables, cfg.max_mem, [cfg.seed, existing, prior_failures],
                           table_halves(len(dataset.configs), cfg.seed), cfg.half_share, batches)
    done, failed, streak = 0, 0, 0
    bar = tqdm(total=data_size, initial=existing, unit="sample", desc="compute samples",
               disable=not progress, smoothing=0.05, dynamic_ncols=True)

    def next_task(in_flight: int):
        return sampler.task() if done + in_flight < todo else None

    def on_ok(task_no, task, cost):
        nonlocal done, streak
        append_line(data_fh, format_compute_sample(task.ids, cost, task.batch))
        done += 1
        streak = 0
        bar.update(1)

    def on_error(task_no, task, reason):
        nonlocal failed, streak
        append_line(err_fh, f"{task.label()} {reason}")
        failed += 1
        streak += 1
        bar.set_postfix(failed=failed)
        tqdm.write(f"warning: shard {task.label()} failed: {reason} (logged in {out / ERRORS_TXT})", file=sys.stderr)
        if streak >= MAX_CONSECUTIVE_FAILURES:
            raise NeuroShardError(f"{streak} shards in a row failed (last: {reason}); see {out / ERRORS_TXT}")

    if make_measurer is None:
        # no shard exceeds max_mem, so a larger weight arena would never be used
        make_measurer = FbgemmMeasurer(dataset_dir, augmented_bench_tables(aug, len(dataset.configs)), cfg.warmup,
                                       cfg.iters, arena_gb=min(DEFAULT_ARENA_GB, cfg.max_mem), clock=cfg.clock)
    t0 = time.perf_counter()
    try:
        with WorkerPool(devices, make_measurer, seed=cfg.seed) as pool:
            pool.run(next_task, on_ok, on_error)
    finally:
        bar.close()
    return CollectSummary(existing, done, failed, time.perf_counter() - t0, pool.stats)


# =========================================================================== noise floor


def measure_noise_floor(data_dir, dataset_dir, num_samples: int, devices: Sequence[str], warmup: int, iters: int,
                        seed: int = 0, repeats: int = 2, progress: bool = True, clock: str = "wall",
                        make_measurer: MeasurerFactory | None = None) -> dict:
    """Re-measure `num_samples` random collected shards `repeats` times (rounds interleaved over shards).

    Returns the noise-floor report (`measure.noise` schema, target "cost").
    """
    from tqdm import tqdm

    check_int("--num_samples", num_samples, 1)
    check_int("--repeats", repeats, 1)
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
        sample = samples[int(pick[nxt[1]])]
        return ShardTask(sample.ids, sample.batch)

    def on_ok(task_no, task, cost):
        r, j = issued[task_no]
        fresh[r, j] = cost
        bar.update(1)

    def on_error(task_no, task, reason):
        bar.update(1)
        tqdm.write(f"warning: shard {task.label()} failed: {reason}", file=sys.stderr)

    if make_measurer is None:
        largest = max(sum(aug[i].size_gb for i in samples[int(p)].ids) for p in pick)
        make_measurer = FbgemmMeasurer(dataset_dir, augmented_bench_tables(aug, len(dataset.configs)), warmup,
                                       iters, arena_gb=min(DEFAULT_ARENA_GB, largest), clock=clock)
    t0 = time.perf_counter()
    try:
        with WorkerPool(devices, make_measurer, seed=seed) as pool:
            pool.run(next_task, on_ok, on_error)
    finally:
        bar.close()
    stored = np.array([samples[int(p)].cost for p in pick])
    shards = [{"ids": list(samples[int(p)].ids), "stored_ms": float(stored[j]),
               "fresh_ms": [float(x) for x in fresh[:, j]],
               **({"batch": samples[int(p)].batch} if samples[int(p)].batch is not None else {})}
              for j, p in enumerate(pick)]
    return noise_report("compute", {"cost": stored}, {"cost": fresh}, shards, data_dir=str(data_dir),
                        warmup=warmup, iters=iters, clock=clock, workers=len(devices), seed=seed,
                        elapsed_s=round(time.perf_counter() - t0, 2))
