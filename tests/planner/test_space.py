"""The plan space of a small task (`planner.space`): counted by hand up to device relabelling and identical tables,
with column halves, data-parallel and row-wise tables; canonical keys; neighbours."""

import pytest

from neuroshard.planner.simulator import validate_plan
from neuroshard.planner.space import (
    COLUMN_WISE,
    SpaceSpec,
    SpaceTooLarge,
    canonical_plan,
    enumerate_plans,
    neighbours,
    plan_key,
)
from neuroshard.problem import Problem
from neuroshard.types.plan import DATA_PARALLEL, ROW_WISE, Plan, Spread
from neuroshard.types.tables import ShardTable, TableConfig

FOUR = Problem(ndevices=4, max_mem=1.0)


def _table(i: int, table_id: int, rows: int = 1000, dim: int = 16) -> ShardTable:
    return ShardTable(i, table_id, TableConfig(rows, 2.0, tuple([1.0 / 17] * 17), dim))


def _tables(*ids: int) -> list[ShardTable]:
    return [_table(i, t) for i, t in enumerate(ids)]


def test_table_wise_placements_up_to_relabelling_counted_by_hand():
    # 5 distinct tables into at most 4 unlabelled devices: S(5,1) + S(5,2) + S(5,3) + S(5,4) = 1 + 15 + 25 + 10
    assert len(enumerate_plans(_tables(0, 1, 2, 3, 4), FOUR, SpaceSpec(kinds=()))) == 51
    # two of them the same dataset table at the same dim ({a, a, b, c, d}): 1 block 1; 2 blocks: the a's together
    # (S(4,2) = 7) or apart (b, c, d each with one of two a's, halved by the swap: 8/2 = 4): 11; 3 blocks: together
    # S(4,3) = 6, apart (3^3 - 2^3 = 19 with the third block non-empty, plus the one swap-symmetric, halved) 10: 16;
    # 4 blocks: together 1, apart (b, c, d make the 2 other blocks: 3 ways, or 2 of them do and the third joins an
    # a: 3 ways) 6: 7. 1 + 11 + 16 + 7 = 35
    assert len(enumerate_plans(_tables(0, 0, 2, 3, 4), FOUR, SpaceSpec(kinds=()))) == 35
    # the same dataset table at another dim is another table
    other = _tables(0, 0, 2, 3, 4)
    other[1] = _table(1, 0, dim=32)
    assert len(enumerate_plans(other, FOUR, SpaceSpec(kinds=()))) == 51
    # a device too small for two of the three tables together: their 2 plans with both on one device go (of 5)
    small = Problem(ndevices=4, max_mem=1.5 * _table(0, 0, rows=2_000_000).size_gb)
    big = [_table(i, i, rows=2_000_000) for i in range(3)]
    assert len(enumerate_plans(big, small, SpaceSpec(kinds=()))) == 5 - 4


def test_column_halves_data_parallel_and_row_wise_counted_by_hand():
    a_b = _tables(0, 1)
    # both whole: together or apart (2); A in halves on two devices, B whole: B beside a half or alone (2); B in
    # halves likewise (2); both in halves, each's halves apart: {a b}{a b}, {a b}{a}{b}, {a}{a}{b}{b} (3): 9
    assert len(enumerate_plans(a_b, FOUR, SpaceSpec((COLUMN_WISE,)))) == 9
    # + data-parallel: A replicated with B whole or in halves (2), B replicated likewise (2), both (1): 14
    assert len(enumerate_plans(a_b, FOUR, SpaceSpec((COLUMN_WISE, DATA_PARALLEL)))) == 14
    # row-wise blocks differ by rank, so the other table's device matters: both whole (2); A row-wise, B on any of
    # the 4 devices (4); B row-wise likewise (4); both row-wise (1): 11
    plans = enumerate_plans(a_b, FOUR, SpaceSpec((ROW_WISE,)))
    assert len(plans) == 11
    assert sum(1 for p in plans if len(p.spread) == 1 and p.spread[0].table == 0) == 4
    # row-wise only for a table larger than every device: none here, so the table-wise plans alone
    assert len(enumerate_plans(a_b, FOUR, SpaceSpec((ROW_WISE,), large_only=(ROW_WISE,)))) == 2
    # quarters too (split_depth 2): A in 4 pieces on the 4 devices with B whole (1) or B in halves (1) or quarters
    # (1), and the other way round (2 more, the both-in-quarters plan counted once): 9 + 5 = 14
    assert len(enumerate_plans(a_b, FOUR, SpaceSpec((COLUMN_WISE,), split_depth=2))) == 14


def test_every_plan_is_valid_canonical_and_distinct():
    tables = _tables(0, 1, 1)
    plans = enumerate_plans(tables, FOUR, SpaceSpec((COLUMN_WISE, DATA_PARALLEL)))
    keys = [plan_key(tables, p, FOUR) for p in plans]
    assert len(set(keys)) == len(plans)
    for p in plans:
        validate_plan(tables, p, FOUR)
        assert canonical_plan(tables, p, FOUR) == p
    # relabelling the devices, or swapping the two identical tables, is the same plan
    p = Plan((), ((0,), (1,), (2,), ()))
    relabelled = Plan((), ((), (2,), (0,), (1,)))
    swapped = Plan((), ((0,), (2,), (1,), ()))
    assert plan_key(tables, p, FOUR) == plan_key(tables, relabelled, FOUR) == plan_key(tables, swapped, FOUR)
    # a row-wise table pins the ranks: the table beside block 0 is another plan than the table beside block 3
    rw0 = Plan((), ((1,), (), (), (2,)), (Spread(0, ROW_WISE, (0, 1, 2, 3)),))
    rw3 = Plan((), ((), (), (1,), (2,)), (Spread(0, ROW_WISE, (0, 1, 2, 3)),))
    assert plan_key(tables, rw0, FOUR) != plan_key(tables, rw3, FOUR)


def test_hosts_relabel_only_within_their_symmetry():
    # two hosts of two ranks: a table-row-wise table on host 1 with the other table on rank 0 is the same plan
    # as on host 0 with the other table on rank 2 (hosts swapped), not as with it on rank 1
    hosts = Problem(ndevices=4, max_mem=1.0, local_world_size=2)
    tables = _tables(0, 1)
    from neuroshard.types.plan import TABLE_ROW_WISE
    a = Plan((), ((1,), (), (), ()), (Spread(0, TABLE_ROW_WISE, (2, 3)),))
    b = Plan((), ((), (), (1,), ()), (Spread(0, TABLE_ROW_WISE, (0, 1)),))
    c = Plan((), ((), (1,), (), ()), (Spread(0, TABLE_ROW_WISE, (2, 3)),))
    assert plan_key(tables, a, hosts) == plan_key(tables, b, hosts) != plan_key(tables, c, hosts)


def test_too_large_a_space_is_refused():
    with pytest.raises(SpaceTooLarge, match="more than 10 plans"):
        enumerate_plans(_tables(0, 1, 2, 3, 4), FOUR, SpaceSpec(kinds=()), limit=10)


def test_neighbours_are_one_move_away_and_stay_in_the_space():
    tables = _tables(0, 1)
    apart = Plan((), ((0,), (1,), (), ()))
    # table-wise only: the one other plan is both together (moving a table to an empty device is the same plan)
    assert [plan_key(tables, p, FOUR) for p in neighbours(tables, apart, FOUR, SpaceSpec(kinds=()))] == \
        [plan_key(tables, Plan((), ((0, 1), (), (), ())), FOUR)]
    # the neighbourhood graph of a space closes over it and reaches every plan from any plan
    three = _tables(0, 1, 2)
    spec = SpaceSpec((COLUMN_WISE,))
    space = {plan_key(three, p, FOUR): p for p in enumerate_plans(three, FOUR, spec)}
    seen, todo = set(), [next(iter(space))]
    while todo:
        k = todo.pop()
        if k in seen:
            continue
        seen.add(k)
        for q in neighbours(three, space[k], FOUR, spec):
            qk = plan_key(three, q, FOUR)
            assert qk in space and qk != k
            todo.append(qk)
    assert seen == set(space)
