"""Sharding task generation (DESIGN.md §2, §4).

A task is T dataset tables (ids drawn uniformly, repeats allowed), each with a
dim drawn uniformly from the dim set (max_dim halving down to 4). T is drawn
uniformly from the inclusive range `T_range`. As upstream, the ids and dims
are redrawn until the task fits; here "fits" means each table fits one device
(`size <= max_mem`) and all tables fit the devices together
(`total <= ndevices * max_mem`). Upstream took a single total budget (its
default 15 GB = 4 devices x 4 GB - 1) and looped forever when nothing fitted;
here `max_tries` bounds the draws and the error says what to change.

Tasks for plans beyond table-wise and column-wise (`oversize`, `hot`): each
task has at least `oversize` tables larger than the largest device (then a
table may exceed one device, up to half of all the devices' memory) and at
least `hot` tables whose pooling factor is at least `hot_min_pooling`; drawn the
same way, redrawn until both hold. A dataset with such tables:
`gen_dlrm_data.py --large_tables/--hot_tables`.

Fitting the total budget does not guarantee that a bin packing exists; a
sharder that cannot place a table reports that task as out-of-memory.

`table_pool` (DreamShard's disjoint train/test table pools): "train" or
"test" draws the ids only from one half of the dataset's tables, the halves
fixed by a permutation seeded with `pool_seed` ("train" the first
floor(n/2) of it); "all" (the default) draws from every table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Sequence

import numpy as np

from neuroshard.checks import check_choice, check_float, check_int, check_max_dim, check_range
from neuroshard.problem import Problem
from neuroshard.settings import Settings, common, setting
from neuroshard.types.errors import NeuroShardError
from neuroshard.types.tables import TableConfig, Task, dim_set, size_gb

TABLE_POOLS = ("all", "train", "test")


def table_pool(num_tables: int, pool: str, pool_seed: int = 0) -> np.ndarray:
    """The dataset table ids a task may draw from: all, or one half of a seeded permutation."""
    if pool == "all":
        return np.arange(num_tables)
    perm = np.random.default_rng(pool_seed).permutation(num_tables)
    half = num_tables // 2
    return np.sort(perm[:half] if pool == "train" else perm[half:])


@dataclass(frozen=True)
class TaskSpec(Settings):
    """Settings of a task file (its flags are gen_tasks.py's; written as its config.json).

    `problem`: the devices a task must fit (and the seed of the draws);
    `T_range`: inclusive (lo, hi) number of tables.
    """

    TITLE: ClassVar[str] = "tasks"

    data_size: int = common("data_size", 100, help="number of tasks")
    T_range: tuple[int, int] = common("T_range", (10, 60), help="tables per task, inclusive (a single number: "
                                                               "exactly that many)")
    max_dim: int = common("max_dim")
    problem: Problem = Problem()
    max_tries: int = setting(1000, "draws per task before giving up with an error")
    table_pool: str = setting("all", "draw tables from all of the dataset, or from one of two disjoint halves "
                                     "(DreamShard's train/test table pools): training tasks of the learned "
                                     "baselines with 'train', evaluation tasks with 'test'", choices=TABLE_POOLS)
    pool_seed: int = setting(0, "seed of the split into the two pools")
    oversize: int = setting(0, "at least this many tables per task larger than one device, so that only a plan "
                               "that splits them can place them (0: every table fits one device, the paper's tasks)")
    hot: int = setting(0, "at least this many tables per task with a pooling factor of at least --hot_min_pooling")
    hot_min_pooling: float = setting(100.0, "the pooling factor from which a table counts as hot")

    def validate(self) -> None:
        check_int("--data_size", self.data_size, 1)
        check_range("--T_range", self.T_range, 1, cast=int)
        check_max_dim("--max_dim", self.max_dim)
        check_int("--max_tries", self.max_tries, 1)
        check_choice("--table_pool", self.table_pool, TABLE_POOLS)
        check_int("--oversize", self.oversize, 0)
        check_int("--hot", self.hot, 0)
        check_float("--hot_min_pooling", self.hot_min_pooling, 0.0, lo_open=True)


def generate_task(configs: Sequence[TableConfig], T: int, dims: Sequence[int], problem: Problem,
                  rng: np.random.Generator, max_tries: int, pool: np.ndarray | None = None, oversize: int = 0,
                  hot: int = 0, hot_min_pooling: float = 100.0) -> Task:
    """Draw one task of T tables that fits the problem's devices (see module doc; with devices of unequal
    memory, every table within the largest and the total within their sum; with `oversize`, at least that many
    tables beyond the largest device and each within half the sum; with `hot`, at least that many tables of
    pooling factor >= `hot_min_pooling`); NeuroShardError after max_tries draws.

    `pool`: the table ids to draw from (default: all)."""
    pool = np.arange(len(configs)) if pool is None else np.asarray(pool)
    rows = np.array([c.row for c in configs], dtype=np.int64)
    pooling = np.array([c.pooling_factor for c in configs], dtype=np.float64)
    dims_arr = np.asarray(dims, dtype=np.int64)
    max_mem = max(problem.caps)
    budget = problem.ndevices * problem.max_mem if problem.uniform else sum(problem.caps)
    table_cap = budget / 2 if oversize else max_mem
    best = None
    for _ in range(max_tries):
        ids = pool[rng.integers(len(pool), size=T)]
        ds = dims_arr[rng.integers(len(dims_arr), size=T)]
        sizes = [size_gb(int(r), int(d)) for r, d in zip(rows[ids], ds)]
        total, largest = sum(sizes), max(sizes)
        big = sum(s > max_mem for s in sizes)
        hits = int((pooling[ids] >= hot_min_pooling).sum())
        if largest <= table_cap and total <= budget and big >= oversize and hits >= hot:
            return Task(tuple(int(i) for i in ids), tuple(int(d) for d in ds))
        if best is None or total < best[0]:
            best = (total, largest)
    if oversize or hot:
        have = (f"{sum(size_gb(int(r), int(dims_arr.max())) > max_mem for r in rows[pool])} table(s) larger than "
                f"{max_mem:g} GB at dim {dims_arr.max()}, "
                f"{int((pooling[pool] >= hot_min_pooling).sum())} with pooling >= {hot_min_pooling:g}")
        raise NeuroShardError(
            f"no task of {T} tables with >= {oversize} table(s) beyond one device and >= {hot} hot table(s) fits "
            f"after {max_tries} tries (the dataset has {have}; every table <= {table_cap:g} GB, the total <= "
            f"{budget:g} GB); generate the dataset with --large_tables/--hot_tables, or lower --oversize/--hot")
    raise NeuroShardError(
        f"no task of {T} tables fits after {max_tries} tries: need every table <= --max_mem "
        f"{max_mem:g} GB and the total <= the devices' {budget:g} GB (smallest total "
        f"drawn {best[0]:.3g} GB, its largest table {best[1]:.3g} GB); raise --max_mem or "
        f"--ndevices, or lower --T_range / --max_dim")


def generate_tasks(configs: Sequence[TableConfig], spec: TaskSpec) -> list[Task]:
    """`spec.data_size` tasks over the dataset tables `configs`, deterministic for `spec.seed`."""
    spec.validate()
    if not configs:
        raise NeuroShardError("the dataset has no tables")
    pool = table_pool(len(configs), spec.table_pool, spec.pool_seed)
    if not len(pool):
        raise NeuroShardError(f"--table_pool {spec.table_pool}: the dataset's {len(configs)} table(s) leave it empty")
    rng = np.random.default_rng(spec.problem.seed)
    dims = dim_set(spec.max_dim)
    lo, hi = spec.T_range
    tasks = []
    for _ in range(spec.data_size):
        T = int(rng.integers(lo, hi + 1))
        tasks.append(generate_task(configs, T, dims, spec.problem, rng, spec.max_tries, pool, spec.oversize,
                                   spec.hot, spec.hot_min_pooling))
    return tasks
