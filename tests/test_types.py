import pytest

from neuroshard.types.costs import CostBreakdown, PlanError
from neuroshard.types.errors import InputError, InvalidPlanError
from neuroshard.types.plan import (
    ColumnPiece,
    Plan,
    Spread,
    SpreadCollective,
    apply_column_steps,
    column_offsets,
    merge_colocated_halves,
    plan_from_pieces,
    plan_pieces,
    row_blocks,
    spread_collectives,
    table_devices,
)
from neuroshard.types.tables import (
    ShardTable,
    TableConfig,
    Task,
    can_split,
    dim_set,
    size_gb,
)

BINS = tuple([0.5, 0.5] + [0.0] * 15)


def test_size_gb_and_dim_set():
    assert size_gb(2**20, 256) == 1.0
    assert dim_set(128) == [128, 64, 32, 16, 8, 4]
    assert dim_set(4) == [4]
    with pytest.raises(ValueError):
        dim_set(48)
    assert can_split(8) and not can_split(4) and not can_split(12)


def test_table_config_json_round_trip():
    c = TableConfig(1000, 3.5, BINS, dim=16)
    d = c.to_json()
    assert d["row"] == 1000 and d["bin_1"] == 0.5 and d["dim"] == 16
    assert TableConfig.from_json(d) == c
    with pytest.raises(ValueError):
        TableConfig.from_json({**d, "dim": 6})
    with pytest.raises(ValueError):
        TableConfig.from_json({**d, "row": -3})
    assert "row_lookups" not in d  # written only where the ids gave it
    skewed = TableConfig(1000, 3.5, BINS, row_lookups=(0.5, 0.25, 0.25, 0.0))
    assert TableConfig.from_json(skewed.to_json()) == skewed
    with pytest.raises(ValueError, match="row_lookups sum to 0.9, not 1"):
        TableConfig(1000, 3.5, BINS, row_lookups=(0.5, 0.4))
    with pytest.raises(ValueError, match=r"row_lookups must be 1 to row \(2\) shares in \[0, 1\]"):
        TableConfig(2, 3.5, BINS, row_lookups=(0.5, 0.25, 0.25))
    with pytest.raises(TypeError, match="row_lookups must be a list"):
        TableConfig.from_json({**d, "row_lookups": 0.5})


def test_a_row_block_takes_the_lookups_that_fall_in_its_rows():
    # 1000 rows in 4 ranges of 250: half the lookups in rows [0, 250), a quarter in each of the next two
    c = TableConfig(1000, 8.0, BINS, dim=16, row_lookups=(0.5, 0.25, 0.25, 0.0))
    first = c.row_block(0, 250)
    assert (first.row, first.pooling_factor, first.bins, first.dim, first.row_lookups) == (250, 4.0, BINS, 16, None)
    # a block cut inside a range takes the part of its lookups its rows hold: [0, 300) = 0.5 + 0.25 x 50 / 250
    assert c.row_block(0, 300).pooling_factor == pytest.approx(8.0 * 0.55)
    assert c.row_block(750, 1000).pooling_factor == 0.0
    # without the ids' spread a block takes its share of the rows
    assert TableConfig(1000, 8.0, BINS).row_block(0, 300).pooling_factor == pytest.approx(8.0 * 0.3)
    with pytest.raises(ValueError, match=r"row block \[900, 1100\) is not inside the table's 1000 rows"):
        c.row_block(900, 1100)


def test_apply_column_steps_appends_halves():
    configs = [TableConfig(100, 1.0, BINS), TableConfig(200, 2.0, BINS)]
    tables = Task((1, 0), (16, 8)).tables(configs)
    out = apply_column_steps(tables, [0, 0, 2])
    assert [t.dim for t in out] == [4, 8, 4, 4, 4]
    assert [t.origin for t in out] == [0, 1, 0, 0, 0]
    assert all(t.table_id == 1 for i, t in enumerate(out) if t.origin == 0)
    assert sum(t.dim for t in out if t.origin == 0) == 16
    with pytest.raises(InvalidPlanError):
        apply_column_steps(tables, [5])
    with pytest.raises(InvalidPlanError):
        apply_column_steps(tables, [1, 1])  # 8 -> 4 -> (2 is not a multiple of 4)


def test_plan_and_cost_breakdown():
    p = Plan((0,), ((0, 2), (1,)))
    assert Plan.from_json(p.to_json()) == p and p.ndevices == 2
    c = CostBreakdown([1.0, 2.0], [0.5, 0.5], [0.25, 1.0])
    assert c.total == [1.75, 3.5] and c.cost == 3.5
    assert c.to_json()["cost"] == 3.5


def test_input_error_names_file_and_line():
    assert str(InputError("a/b.txt", "bad value 'x'", line=3)) == "a/b.txt:3: bad value 'x'"


def _tables(*dims):
    return [ShardTable(i, i, TableConfig(100, 1.0, BINS, d)) for i, d in enumerate(dims)]


def test_column_offsets_follow_the_halving_steps():
    tables = _tables(16, 8)
    # step 0: table 0 keeps [0, 8), table 2 = [8, 16); step 0: table 0 keeps [0, 4), table 3 = [4, 8);
    # step 2: table 2 keeps [8, 12), table 4 = [12, 16)
    assert column_offsets(tables, [0, 0, 2]) == [0, 0, 8, 4, 12]
    assert column_offsets(tables, []) == [0, 0]
    with pytest.raises(InvalidPlanError):
        column_offsets(tables, [1, 1])


def test_plan_pieces_and_plan_from_pieces_are_inverse():
    tables = _tables(16, 8, 32)
    # post-split tables: 0 = t0[0,4), 1 = t1, 2 = t2[0,16), 3 = t0[8,16), 4 = t0[4,8), 5 = t2[16,32)
    plan = Plan((0, 0, 2), ((0, 1), (4, 2), (3, 5)))
    pieces = plan_pieces(tables, plan)
    assert pieces[0] == [ColumnPiece(0, 4, 0), ColumnPiece(4, 4, 1), ColumnPiece(8, 8, 2)]
    assert pieces[1] == [ColumnPiece(0, 8, 0)]
    assert pieces[2] == [ColumnPiece(0, 16, 1), ColumnPiece(16, 16, 2)]
    back = plan_from_pieces(tables, pieces, 3)
    # canonical form: table 0 cut depth-first (0 -> 0|3, then 0 -> 0|4), then table 2 (2 -> 2|5);
    # each device's tables sorted
    assert back == Plan((0, 0, 2), ((0, 1), (2, 4), (3, 5)))
    assert plan_pieces(tables, back) == pieces
    assert plan_from_pieces(tables, plan_pieces(tables, back), 3) == back


def test_plan_from_pieces_refuses_what_halvings_cannot_make():
    tables = _tables(16)
    with pytest.raises(InvalidPlanError, match="straddle"):
        plan_from_pieces(tables, [[ColumnPiece(0, 4, 0), ColumnPiece(4, 12, 1)]], 2)  # 12 columns: no halving
    with pytest.raises(InvalidPlanError, match="on no device"):
        plan_from_pieces(tables, [[ColumnPiece(0, 8, 0)]], 2)
    with pytest.raises(InvalidPlanError, match="not halvings"):
        plan_from_pieces(tables, [[ColumnPiece(0, 2, 0), ColumnPiece(2, 2, 0), ColumnPiece(4, 4, 0),
                                   ColumnPiece(8, 8, 1)]], 2)  # dim 2 is not a multiple of 4
    with pytest.raises(InvalidPlanError, match="device 2"):
        plan_from_pieces(tables, [[ColumnPiece(0, 16, 2)]], 2)
    with pytest.raises(InvalidPlanError, match="out of range"):
        plan_from_pieces(tables, [[ColumnPiece(0, 32, 0)]], 2)


def test_merge_colocated_halves_undoes_splits_that_stay_on_one_device():
    tables = _tables(16, 8, 32)
    # table 0 in quarters-and-a-half all on device 0: [0,4) + [4,8) -> [0,8), then [0,8) + [8,16) -> whole;
    # table 2's halves are on devices 1 and 2 and stay split
    pieces = [[ColumnPiece(0, 4, 0), ColumnPiece(4, 4, 0), ColumnPiece(8, 8, 0)], [ColumnPiece(0, 8, 1)],
              [ColumnPiece(0, 16, 1), ColumnPiece(16, 16, 2)]]
    merged = merge_colocated_halves(tables, plan_from_pieces(tables, pieces, 3))
    assert plan_pieces(tables, merged) == [[ColumnPiece(0, 16, 0)], [ColumnPiece(0, 8, 1)],
                                           [ColumnPiece(0, 16, 1), ColumnPiece(16, 16, 2)]]
    # [4,8) and [8,16) share a device but are not two halves of one cut: nothing changes
    apart = plan_from_pieces(tables, [[ColumnPiece(0, 4, 1), ColumnPiece(4, 4, 0), ColumnPiece(8, 8, 0)],
                                      [ColumnPiece(0, 8, 1)], [ColumnPiece(0, 32, 2)]], 3)
    assert merge_colocated_halves(tables, apart) is apart


def test_plan_error_records_round_trip_and_older_ones_have_no_rank_error():
    pe = PlanError(8, 0.05, 0.5, 0.8, 1.1, 0.13, 24, 0.03, 0.04)
    assert PlanError.from_json(pe.to_json()) == pe
    assert pe.compute_sd == pytest.approx(0.05)  # the own 3% and the shared 4% of one compute measurement
    older = {"measurements": 8, "sd": 0.05, "coverage_before": 0.5, "coverage_after": 0.8, "speed": 1.1}
    assert PlanError.from_json(older) == PlanError(8, 0.05, 0.5, 0.8, 1.1, 0.0, 0, 0.0, None)
    assert PlanError.from_json(older).compute_sd is None  # no noise measured
    assert PlanError.from_json({**older, "rank": 0.13, "ranks": 24}).compute_noise == 0.0  # before the noise
    # the own part alone, written before the shared part was measured: not the whole noise
    assert PlanError.from_json({**older, "compute_noise": 0.03}).compute_sd is None
    assert PlanError.from_json({**older, "compute_noise": 0.03, "compute_common": 0.0}).compute_sd == 0.03
    for bad in ({**older, "rank": 1.5}, {**older, "rank": "x"}, {**older, "ranks": -1}, {**older, "ranks": 2.0},
                {**older, "compute_noise": -0.1}, {**older, "compute_common": 1.5}):
        with pytest.raises(ValueError, match="\"rank\", \"compute_noise\", \"compute_common\" in \\[0, 1\\]"):
            PlanError.from_json(bad)


# --------------------------------------------------------------------------- table constraints


def test_table_constraints_by_hand():
    from neuroshard.types.constraints import TableConstraints
    from neuroshard.types.plan import ColumnPiece

    c = TableConstraints(whole=(3,), devices=((0, (2, 1)), (4, (1,))), colocate=((4, 5),))
    assert c.devices == ((0, (1, 2)), (4, (1,)))
    assert c.kept_whole(3) and c.kept_whole(5) and not c.kept_whole(0)
    assert c.allowed(0) == (1, 2) and c.allowed(1) is None
    assert c.group_devices((4, 5), 3) == (1,) and c.group_devices((1, 2), 3) == (0, 1, 2)
    assert c.group_devices((1, 2), None) is None
    c.check(6, 3)
    pieces = [[ColumnPiece(0, 8, 1)], [ColumnPiece(0, 8, 0)], [ColumnPiece(0, 8, 0)], [ColumnPiece(0, 8, 2)],
              [ColumnPiece(0, 8, 1)], [ColumnPiece(0, 8, 1)]]
    assert c.violation(pieces) is None
    pieces[5] = [ColumnPiece(0, 8, 0)]
    assert c.violation(pieces) == "tables [4, 5] must share a device, the plan puts them on devices [0, 1]"
    assert TableConstraints().empty and not c.empty


def test_a_tables_narrowest_piece_bounds_its_splits():
    """`min_dim` (TorchRec's min_partition): table 0 of dim 64 may be halved down to pieces of 16, not 8; a piece
    of 8 is a violation; table 1, not listed, splits while its halves' dims are multiples of 4."""
    from neuroshard.types.constraints import TableConstraints
    from neuroshard.types.errors import ConfigError
    from neuroshard.types.plan import ColumnPiece

    c = TableConstraints(min_dim=((0, 16),), whole=(2,))
    assert [c.may_halve(0, d) for d in (64, 32, 16)] == [True, True, False]
    assert [c.may_halve(1, d) for d in (64, 8, 12)] == [True, True, False]
    assert not c.may_halve(2, 64) and not c.empty
    halves = [ColumnPiece(0, 32, 0), ColumnPiece(32, 16, 1), ColumnPiece(48, 16, 0)]
    assert c.violation([halves, [ColumnPiece(0, 8, 1)], [ColumnPiece(0, 8, 1)]]) is None
    quarter = [ColumnPiece(0, 32, 0), ColumnPiece(32, 16, 1), ColumnPiece(48, 8, 0), ColumnPiece(56, 8, 1)]
    assert c.violation([quarter, [], []]) == "table 0 may be split into pieces of 16 columns or more, the plan " \
                                             "has one of 8"
    assert TableConstraints.from_json(c.to_json()) == c
    with pytest.raises(ConfigError, match="table 0: the narrowest piece dim must be >= 1, got 0"):
        TableConstraints(min_dim=((0, 0),))
    with pytest.raises(ConfigError, match="table 5: the task has 3 tables"):
        TableConstraints(min_dim=((5, 8),)).check(3, 2)


def test_table_constraints_errors_name_the_table():
    from neuroshard.types.constraints import TableConstraints
    from neuroshard.types.errors import ConfigError

    cases = [(dict(devices=((1, ()),)), "table 1: an empty device list"),
             (dict(colocate=((1,),)), r"co-location group \[1\]: needs two or more tables"),
             (dict(colocate=((1, 2), (2, 3))), r"table 2 is in two co-location groups"),
             (dict(devices=((1, (0,)), (2, (1,))), colocate=((1, 2),)), r"co-location group \[1, 2\]: its tables' "
                                                                         "device lists share no device")]
    for kw, message in cases:
        with pytest.raises(ConfigError, match=message):
            TableConstraints(**kw)
    with pytest.raises(ConfigError, match=r"table 7: the task has 3 tables \(0..2\)"):
        TableConstraints(whole=(7,)).check(3, 2)
    with pytest.raises(ConfigError, match="table 0: device 5 is not among the 2 devices"):
        TableConstraints(devices=((0, (5,)),)).check(3, 2)


# --------------------------------------------------------------------------- spread tables


def test_row_blocks_are_torchrecs_ceil_blocks():
    assert row_blocks(10, 4) == [3, 3, 3, 1]
    assert row_blocks(5, 4) == [2, 2, 1, 0]
    assert row_blocks(1000, 4) == [250] * 4
    assert row_blocks(7, 1) == [7]
    assert Spread(0, "data_parallel", (0, 1, 2)).rows_on(10) == [10, 10, 10]
    assert Spread(0, "table_row_wise", (2, 3)).rows_on(7) == [4, 3]
    assert Spread(0, "row_wise", (3, 1, 0, 2)).ranges_on(10) == [(0, 3), (3, 6), (6, 9), (9, 10)]
    assert Spread(0, "row_wise", (0, 1, 2, 3)).ranges_on(5) == [(0, 2), (2, 4), (4, 5), (5, 5)]
    assert Spread(0, "data_parallel", (0, 1)).ranges_on(10) == [(0, 10), (0, 10)]


def test_spread_tables_run_one_collective_per_group_and_pass():
    # batch 64; tables 0 and 2 row-wise over ranks 0, 1: 64 x (16 + 32) partial sums reduce-scattered forward,
    # their gradient all-gathered backward; table 1 data-parallel: 200 x 8 all-reduced; table 3 table-row-wise
    # over ranks 2, 3 (another host): its own pair, 64 x 4
    spread = [Spread(0, "row_wise", (0, 1)), Spread(1, "data_parallel", (0, 1, 2, 3)), Spread(2, "row_wise", (0, 1)),
              Spread(3, "table_row_wise", (2, 3))]
    got = spread_collectives([16, 8, 32, 4], [100, 200, 300, 50], spread, 64)
    assert got == [SpreadCollective("reduce_scatter", (0, 1), 3072, False),
                   SpreadCollective("all_gather", (0, 1), 3072, True),
                   SpreadCollective("all_reduce", (0, 1, 2, 3), 1600, True),
                   SpreadCollective("reduce_scatter", (2, 3), 256, False),
                   SpreadCollective("all_gather", (2, 3), 256, True)]
    assert spread_collectives([16], [100], [], 64) == []


def test_a_plan_with_spread_tables_round_trips_and_older_plans_read_the_same():
    plan = Plan((0,), ((0, 3), (), (), ()), (Spread(1, "row_wise", (0, 1, 2, 3)),
                                              Spread(2, "table_row_wise", (2, 3))))
    js = plan.to_json()
    assert js["spread"] == [{"table": 1, "kind": "row_wise", "ranks": [0, 1, 2, 3]},
                            {"table": 2, "kind": "table_row_wise", "ranks": [2, 3]}]
    assert Plan.from_json(js) == plan and plan.spread_of(2).kind == "table_row_wise" and plan.spread_of(0) is None
    plain = Plan((), ((0,), (1,)))
    assert plain.to_json() == {"column_steps": [], "shards": [[0], [1]]}  # the file shape of older releases
    assert Plan.from_json({"column_steps": [], "shards": [[0], [1]]}) == plain


def test_spread_tables_are_checked_by_table():
    # 4 tables, 4 devices; table 0 column-split (post-split 4 = its second half)
    base = ((0, 4), (), (), ())
    ok = Plan((0,), ((0, 4), (3,), (), ()), (Spread(1, "row_wise", (0, 1, 2, 3)),
                                              Spread(2, "data_parallel", (0, 1, 2, 3))))
    assert table_devices(ok, 5) == [0, None, None, 1, 0]
    twrw = Plan((), ((0,), (1,), (), ()), (Spread(2, "table_row_wise", (2, 3)), Spread(3, "table_row_wise", (0, 1))))
    assert table_devices(twrw, 4) == [0, 1, None, None]
    cases = [
        (Plan((0,), base, (Spread(1, "row_wise", (0, 1)), Spread(2, "data_parallel", (0, 1, 2, 3)),
                           Spread(3, "row_wise", (0, 1, 2, 3)))), r"table 1 \(row_wise\): TorchRec shards it over "
                                                                   r"every rank in order \(0..3\)"),
        (Plan((0,), base, (Spread(1, "row_wise", (0, 1, 2, 3)), Spread(2, "table_row_wise", (1, 2)),
                           Spread(3, "data_parallel", (0, 1, 2, 3)))), r"table 2 \(table_row_wise\): ranks \[1, 2\] "
                                                                       "are not one host"),
        (Plan((0,), base, (Spread(1, "grid", (0, 1, 2, 3)),)), "table 1: sharding type 'grid' is not one of"),
        (Plan((0,), base, (Spread(0, "row_wise", (0, 1, 2, 3)),)), "table 0 is row_wise and column-split at once"),
        (Plan((), ((0, 1), (2,), (3,), ()), (Spread(1, "row_wise", (0, 1, 2, 3)),)),
         "table 1 is row_wise and also placed on device 0"),
        (Plan((), ((0,), (2,), (), ()), (Spread(1, "row_wise", (0, 1, 2, 3)),)), r"tables \[3\] are placed on no"),
        (Plan((), ((0,), (2,), (3,), ()), (Spread(1, "row_wise", (0, 1, 2, 3)), Spread(1, "data_parallel",
                                                                                   (0, 1, 2, 3)))), "listed twice"),
        (Plan((), ((0,), (2,), (3,), ()), (Spread(7, "row_wise", (0, 1, 2, 3)),)), "spread table 7 out of range"),
        (Plan((), ((0,), (2,), (3,), ()), (Spread(1, "data_parallel", (0, 1, 2, 5)),)),
         r"ranks \[0, 1, 2, 5\] must be distinct devices of 0..3"),
    ]
    for plan, message in cases:
        with pytest.raises(InvalidPlanError, match=message):
            table_devices(plan, 4 + len(plan.column_steps))


def test_spread_tables_keep_out_of_the_pieces_and_survive_merging():
    tables = _tables(16, 8, 32)
    # table 0's halves both on device 0 (merged back), table 2 row-wise over both devices
    plan = Plan((0,), ((0, 3), (1,)), (Spread(2, "row_wise", (0, 1)),))
    pieces = plan_pieces(tables, plan)
    assert pieces == [[ColumnPiece(0, 8, 0), ColumnPiece(8, 8, 0)], [ColumnPiece(0, 8, 1)], []]
    assert merge_colocated_halves(tables, plan) == Plan((), ((0,), (1,)), (Spread(2, "row_wise", (0, 1)),))
    with pytest.raises(InvalidPlanError, match="table 2 is spread and has column pieces too"):
        plan_from_pieces(tables, [pieces[0], pieces[1], [ColumnPiece(0, 32, 0)]], 2, plan.spread)


def test_a_tables_kind_and_what_it_exchanges():
    """Pooled by default (its JSON unchanged); an unpooled (sequence) table sends every looked-up row: dim x
    pooling factor floats per sample, in its split pieces too; its row-wise collectives carry as much."""
    pooled = TableConfig(1000, 3.5, BINS, dim=16)
    seq = TableConfig(1000, 3.5, BINS, dim=16, pooled=False)
    assert pooled.pooled and "pooled" not in pooled.to_json()
    assert seq.to_json()["pooled"] is False and TableConfig.from_json(seq.to_json()) == seq != pooled
    assert TableConfig.from_json({**seq.to_json(), "pooled": True}) == pooled
    with pytest.raises(ValueError, match="pooled must be true or false, got 'no'"):
        TableConfig.from_json({**seq.to_json(), "pooled": "no"})
    assert (pooled.exchange_dim, seq.exchange_dim, seq.with_dim(8).exchange_dim) == (16, 56, 28)
    assert ShardTable(0, 0, seq).exchange_dim == 56 and not seq.batch_share(2).pooled
    # table 0 row-wise and unpooled: 64 x 56 partial rows; table 1 data-parallel and unpooled: its 100 x 16 weights
    got = spread_collectives([16, 16], [1000, 100], [Spread(0, "row_wise", (0, 1)),
                                                     Spread(1, "data_parallel", (0, 1))], 64, [56, 56])
    assert [c.numel for c in got] == [64 * 56, 64 * 56, 100 * 16]
