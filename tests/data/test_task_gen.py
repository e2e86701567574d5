"""Task generation: T range, dim set, memory limits, determinism, bounded retries."""

from dataclasses import replace

import numpy as np
import pytest

from neuroshard.data.task_gen import TaskSpec, generate_tasks
from neuroshard.problem import Problem
from neuroshard.types.errors import NeuroShardError
from neuroshard.types.tables import TableConfig, dim_set, size_gb

BINS = (0.0,) * 17


def configs(rows):
    return [TableConfig(r, 1.0, BINS) for r in rows]


# rows spanning 100 .. 4M: the 4M-row table at dim 128 is 1.9 GB
ROWS = [100, 1000, 50_000, 300_000, 1_000_000, 4_000_000, 2_000, 700]


def test_tasks_respect_range_dims_and_memory():
    spec = TaskSpec(data_size=200, T_range=(3, 9), max_dim=64, problem=Problem(ndevices=2, max_mem=0.5, seed=3))
    cfgs = configs(ROWS)
    tasks = generate_tasks(cfgs, spec)
    assert len(tasks) == 200
    dims = set(dim_set(64))
    assert {len(t) for t in tasks} == set(range(3, 10))  # inclusive, every T drawn
    seen_dims, seen_ids = set(), set()
    for t in tasks:
        sizes = [size_gb(cfgs[i].row, d) for i, d in zip(t.table_ids, t.dims)]
        assert max(sizes) <= 0.5 and sum(sizes) <= 2 * 0.5
        assert set(t.dims) <= dims
        seen_dims |= set(t.dims)
        seen_ids |= set(t.table_ids)
    assert seen_dims == dims and seen_ids == set(range(len(ROWS)))


def test_tables_that_never_fit_are_never_drawn():
    # 4M rows x dim 4 = 0.06 GB fits, x dim 8 = 0.12 GB does not fit max_mem 0.1
    tasks = generate_tasks(configs(ROWS), TaskSpec(data_size=100, T_range=(5, 5), max_dim=128,
                                                   problem=Problem(ndevices=8, max_mem=0.1, seed=0)))
    for t in tasks:
        for i, d in zip(t.table_ids, t.dims):
            assert size_gb(ROWS[i], d) <= 0.1


def test_seed_determinism():
    spec = TaskSpec(data_size=20, T_range=(1, 30), problem=Problem(seed=7))
    assert generate_tasks(configs(ROWS), spec) == generate_tasks(configs(ROWS), spec)
    other = TaskSpec(data_size=20, T_range=(1, 30), problem=Problem(seed=8))
    assert generate_tasks(configs(ROWS), spec) != generate_tasks(configs(ROWS), other)


def test_no_fit_stops_with_clear_error():
    # every table is at least 4M x 4 x 4 B = 0.06 GB; ten of them never fit 2 x 0.01 GB
    spec = TaskSpec(data_size=1, T_range=(10, 10), max_tries=50, problem=Problem(ndevices=2, max_mem=0.01))
    with pytest.raises(NeuroShardError, match=r"no task of 10 tables fits after 50 tries.*--max_mem"):
        generate_tasks(configs([4_000_000]), spec)


@pytest.mark.parametrize("kwargs, flag", [
    (dict(data_size=0), "--data_size"),
    (dict(T_range=(5, 2)), "--T_range"),
    (dict(T_range=(0, 2)), "--T_range"),
    (dict(max_mem=0.0), "--max_mem"),
    (dict(max_dim=100), "--max_dim"),
    (dict(ndevices=0), "--ndevices"),
    (dict(max_tries=0), "--max_tries"),
])
def test_bad_spec(kwargs, flag):
    problem = {k: kwargs.pop(k) for k in ("max_mem", "ndevices") if k in kwargs}  # the problem checks its own
    with pytest.raises(NeuroShardError, match=flag):
        generate_tasks(configs(ROWS), TaskSpec(**kwargs, problem=Problem(**problem)))


def test_uniform_ids_and_dims():
    tasks = generate_tasks(configs([100] * 4), TaskSpec(data_size=300, T_range=(20, 20), max_dim=16))
    ids = np.concatenate([t.table_ids for t in tasks])
    dims = np.concatenate([t.dims for t in tasks])
    assert np.bincount(ids).min() > 0.2 * len(ids)   # 4 ids, 25% each
    for d in (4, 8, 16):
        assert abs((dims == d).mean() - 1 / 3) < 0.05


def test_table_pools_are_disjoint_halves_and_all_is_unchanged():
    from neuroshard.data.task_gen import table_pool

    train, test = set(table_pool(8, "train", 3).tolist()), set(table_pool(8, "test", 3).tolist())
    assert len(train) == 4 and len(test) == 4 and not train & test and train | test == set(range(8))
    assert table_pool(8, "train", 3).tolist() == table_pool(8, "train", 3).tolist()
    assert set(table_pool(8, "train", 4).tolist()) != train
    spec = TaskSpec(data_size=30, T_range=(2, 4), max_dim=16, problem=Problem(ndevices=2, max_mem=1.0, seed=0))
    cfgs = configs(ROWS)
    for pool, ids in (("train", train), ("test", test)):
        drawn = {i for t in generate_tasks(cfgs, replace(spec, table_pool=pool, pool_seed=3)) for i in t.table_ids}
        assert drawn <= ids
    # "all" draws exactly as before pools existed: the ids come from the same rng calls
    default = generate_tasks(cfgs, spec)
    assert default == generate_tasks(cfgs, replace(spec, table_pool="all"))
    with pytest.raises(NeuroShardError, match="--table_pool: must be one of all, train, test"):
        generate_tasks(cfgs, replace(spec, table_pool="half"))


def test_oversize_and_hot_tasks_have_both_and_fit_half_the_devices():
    # table 5 (4M rows) is the only one that can exceed a 0.5 GB device (at dim >= 64: 0.95 / 1.9 GB); table 1
    # is the only hot one
    cfgs = [TableConfig(r, 150.0 if i == 1 else 1.0, BINS) for i, r in enumerate(ROWS)]
    spec = TaskSpec(data_size=30, T_range=(3, 6), max_dim=128, problem=Problem(ndevices=4, max_mem=0.5, seed=2),
                    oversize=1, hot=1, hot_min_pooling=100.0)
    for t in generate_tasks(cfgs, spec):
        sizes = [size_gb(cfgs[i].row, d) for i, d in zip(t.table_ids, t.dims)]
        assert sum(s > 0.5 for s in sizes) >= 1 and 1 in t.table_ids
        assert max(sizes) <= 4 * 0.5 / 2 and sum(sizes) <= 4 * 0.5


def test_oversize_without_large_tables_names_the_flags():
    spec = TaskSpec(data_size=1, T_range=(3, 3), max_dim=8, problem=Problem(ndevices=2, max_mem=0.5),
                    oversize=1, max_tries=20)
    with pytest.raises(NeuroShardError, match=r"0 table\(s\) larger than 0.5 GB at dim 8.*--large_tables"):
        generate_tasks(configs(ROWS), spec)
