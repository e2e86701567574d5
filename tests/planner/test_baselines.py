"""Baseline sharders: hand-computed placements, memory caps, infeasible tasks."""

import math

import numpy as np
import pytest

from neuroshard.planner import baselines
from neuroshard.planner.registry import ShardingContext, algorithm_names, get_sharder
from neuroshard.problem import Problem
from neuroshard.types.constraints import TableConstraints
from neuroshard.types.errors import OutOfMemoryError
from neuroshard.types.plan import Plan, apply_column_steps
from neuroshard.types.tables import TableConfig, Task

BINS = (0.0,) * 17
UNIT = 4 / 2**30  # GB per row*dim element (fp32)
GREEDY = ["dim_greedy", "lookup_greedy", "size_greedy", "size_lookup_greedy"]


def make_tables(spec):
    """spec: [(row, dim, pooling_factor)] -> the task's ShardTables (table i uses dataset table i)."""
    configs = [TableConfig(row, pf, BINS) for row, _, pf in spec]
    task = Task(tuple(range(len(spec))), tuple(d for _, d, _ in spec))
    return task.tables(configs)


# Five tables, written out so the placements below can be followed by hand.
#            row  dim  pf    size (row*dim units)  dim*pf  dim*pf*log10(row)
FIVE = [(1000, 64, 10),    # t0  64000             640     1920
        (2000, 32, 5),     # t1  64000             160      528.2
        (500, 64, 1),      # t2  32000              64      172.7
        (100, 16, 20),     # t3   1600             320      640
        (4000, 32, 2)]     # t4 128000              64      230.5


def shards(alg, spec, ndevices, max_mem=100.0, seed=0, constraints=None):
    problem = Problem(ndevices, max_mem, seed, constraints=constraints)
    plan = get_sharder(alg)(make_tables(spec), problem, ShardingContext())
    assert isinstance(plan, Plan) and plan.column_steps == ()
    return [list(s) for s in plan.shards]


def test_registry_has_all_baselines_in_design_order():
    names = algorithm_names()
    assert [n for n in names if n in GREEDY + ["random"]] == ["random"] + GREEDY
    assert get_sharder("dim_greedy") is baselines.dim_greedy


def test_dim_greedy_by_hand():
    # order (dim, size, index) desc: t0 (64), t2 (64, smaller), t4 (32, larger), t1 (32), t3 (16)
    # t0 -> d0 | t2 -> d1 | t4: sums 64/64, d1 uses less memory -> d1 (96)
    # t1 -> d0 (64 < 96) | t3: sums 96/96, d0 uses 128000 < 160000 -> d0
    assert shards("dim_greedy", FIVE, 2) == [[0, 1, 3], [2, 4]]


def test_size_greedy_by_hand_ties_on_index_then_device():
    # order: t4 (128000), then t1 before t0 (same key and size: larger index first), t2, t3
    # t4 -> d0 | t1 -> d1 | t0 -> d1 (64000 < 128000) | t2: 128000/128000, same memory -> d0 | t3 -> d1
    assert shards("size_greedy", FIVE, 2) == [[2, 4], [0, 1, 3]]


def test_lookup_greedy_by_hand_with_memory_cap():
    # no cap: t0 (640) -> d0, then t3, t1, t4, t2 all go to d1 (sum stays below 640)
    assert shards("lookup_greedy", FIVE, 2) == [[0], [1, 2, 3, 4]]
    # cap 200000 units: d1 holds t3+t1+t4 = 193600; t2 (32000) no longer fits there -> d0
    assert shards("lookup_greedy", FIVE, 2, max_mem=200000 * UNIT) == [[0, 2], [1, 3, 4]]


def test_size_lookup_greedy_by_hand_three_devices():
    # keys: t0 1920, t3 640, t1 528.2, t4 230.5, t2 172.7
    # t0 -> d0 | t3 -> d1 | t1 -> d2 | t4 -> d2 (528 < 640) -> 759 | t2 -> d1 (640 < 759)
    assert shards("size_lookup_greedy", FIVE, 3) == [[0], [2, 3], [1, 4]]
    key = baselines.size_lookup_key(make_tables(FIVE)[1])
    assert key == pytest.approx(32 * 5 * math.log10(2000))


def test_greedy_memory_exact_fit():
    # four tables of exactly a quarter of max_mem each fill two devices to the byte
    spec = [(2**20, 64, 1.0)] * 4  # 0.25 GB each
    plan = shards("size_greedy", spec, 2, max_mem=0.5)
    assert sorted(len(s) for s in plan) == [2, 2]


@pytest.mark.parametrize("alg", GREEDY + ["random"])
def test_infeasible_raises_with_numbers(alg):
    # five tables of 0.1875 GB, two devices of 0.4 GB: two fit per device, the fifth nowhere
    spec = [(3 * 2**20, 16, 1.0)] * 5
    with pytest.raises(OutOfMemoryError) as err:
        shards(alg, spec, 2, max_mem=0.4)
    e = err.value
    assert e.size == pytest.approx(0.1875) and e.max_mem == 0.4
    assert len(e.used) == 2 and all(u + e.size > 0.4 for u in e.used)
    assert "fits on no device" in str(e) and "0.4" in str(e)


@pytest.mark.parametrize("alg", GREEDY + ["random"])
def test_single_table_larger_than_device(alg):
    with pytest.raises(OutOfMemoryError) as err:
        shards(alg, [(100, 4, 1.0), (2**28, 8, 1.0)], 4, max_mem=1.0)
    assert err.value.table == 1 and err.value.size == pytest.approx(8.0)


@pytest.mark.parametrize("alg", GREEDY + ["random"])
def test_random_tasks_memory_never_exceeded(alg):
    rng = np.random.default_rng(0)
    placed = oom = 0
    for trial in range(60):
        T = int(rng.integers(1, 40))
        spec = [(int(10 ** rng.uniform(2, 7)), int(rng.choice([4, 8, 16, 32, 64, 128])),
                 float(rng.uniform(0, 50))) for _ in range(T)]
        tables = make_tables(spec)
        ndev, max_mem = int(rng.integers(1, 6)), float(rng.uniform(0.5, 8))
        try:
            plan = get_sharder(alg)(tables, Problem(ndev, max_mem, trial), ShardingContext())
        except OutOfMemoryError:
            oom += 1
            continue
        placed += 1
        assert len(plan.shards) == ndev
        pieces = apply_column_steps(tables, plan.column_steps)  # only tables larger than every device split
        assert not plan.column_steps or max(t.size_gb for t in tables) > max_mem
        assert sorted(i for s in plan.shards for i in s) == list(range(len(pieces)))
        for s in plan.shards:
            assert sum(pieces[i].size_gb for i in s) <= max_mem
    assert placed > 20 and oom > 0


def test_random_is_seeded_and_spreads():
    spec = [(1000, 16, 1.0)] * 40
    a = shards("random", spec, 4, seed=1)
    assert a == shards("random", spec, 4, seed=1)
    assert a != shards("random", spec, 4, seed=2)
    assert all(5 <= len(s) <= 15 for s in a)


def test_random_only_draws_devices_with_room():
    # t0 fills one device; t1 must land on the other one whatever the seed
    spec = [(2**28, 4, 1.0), (2**28, 4, 1.0)]  # 4 GB each
    for seed in range(20):
        plan = shards("random", spec, 2, max_mem=4.0, seed=seed)
        assert sorted(len(s) for s in plan) == [1, 1]


def test_size_greedy_by_hand_on_devices_of_unequal_memory():
    # as test_size_greedy_by_hand, but d1 holds only 100000 units: t4 -> d0 | t1 -> d1 | t0: d1 has 64000 and
    # 128000 would pass its cap -> d0 (192000) | t2: d1 (64000 < 192000), 96000 | t3 -> d1 (97600)
    assert shards("size_greedy", FIVE, 2, max_mem=(100.0, 100000 * UNIT)) == [[0, 4], [1, 2, 3]]


def test_dim_greedy_by_hand_with_allowed_devices_and_a_colocated_pair():
    # t2 may use d0 only; t1 and t3 go together (one unit: dim 48, size 65600, placed at t1's place).
    # order (dim, size, first index) desc: t0 (64), t2 (64), {t1,t3} (48), t4 (32)
    # t0 -> d0 | t2: only d0 -> d0 (128) | {t1,t3} -> d1 (48) | t4 -> d1 (80 < 128)
    cons = TableConstraints(devices=((2, (0,)),), colocate=((1, 3),))
    assert shards("dim_greedy", FIVE, 2, constraints=cons) == [[0, 2], [1, 3, 4]]
    for alg in GREEDY + ["random"]:
        plan = shards(alg, FIVE, 3, constraints=cons)
        where = {t: d for d, s in enumerate(plan) for t in s}
        assert where[2] == 0 and where[1] == where[3]


def test_a_constraint_that_leaves_no_room_names_the_table_and_its_devices():
    # t0 (64000 units) may use d1 only, which holds 50000
    cons = TableConstraints(devices=((0, (1,)),))
    with pytest.raises(OutOfMemoryError, match=r"table 0 .* fits on no device of its devices \[1\]"):
        shards("size_greedy", FIVE, 2, max_mem=(100.0, 50000 * UNIT), constraints=cons)


def test_a_table_larger_than_every_device_is_halved_until_its_pieces_fit():
    # t0: 1000 rows x 64 = 64000 elements on devices of 25000 elements: 64 -> 32 -> 16 columns (4 pieces of
    # 16000); t1 (1000 x 8) fits whole
    cap = 25000 * UNIT
    tables = make_tables([(1000, 64, 1.0), (1000, 8, 1.0)])
    problem = Problem(4, cap)
    steps = baselines.oversize_steps(tables, problem)
    # halve t0 (-> t0, t2 of 32 columns), then each half: t0 (-> t0, t3 of 16), t2 (-> t2, t4 of 16)
    assert steps == [0, 0, 2] and baselines.piece_owners(2, steps) == [0, 1, 0, 0, 0]
    for alg in [*GREEDY, "random"]:
        plan = get_sharder(alg)(tables, problem, ShardingContext())
        assert plan.column_steps == (0, 0, 2) and sorted(t for s in plan.shards for t in s) == [0, 1, 2, 3, 4]
    # pieces at the narrowest split still too large (1000 x 4 > 3000): left whole
    assert baselines.oversize_steps(tables, Problem(4, 3000 * UNIT)) == []
    # kept whole, or limited to some devices: left whole, so no device holds it
    for cons in (TableConstraints(whole=(0,)), TableConstraints(devices=((0, (0, 1)),))):
        assert baselines.oversize_steps(tables, Problem(4, cap, constraints=cons)) == []
        with pytest.raises(OutOfMemoryError, match="table 0"):
            get_sharder("size_greedy")(tables, Problem(4, cap, constraints=cons), ShardingContext())
