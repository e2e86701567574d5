"""Extrapolation warnings: hand-made training ranges against hand-made plans, and the library call."""

from types import SimpleNamespace

from neuroshard.planner.costs.extrapolation import comm_ranges, compute_ranges, warnings
from neuroshard.types.costs import CostBreakdown
from neuroshard.types.plan import Plan
from neuroshard.types.tables import ShardTable, TableConfig

BINS = tuple([1.0] + [0.0] * 16)


def models_with(compute: dict, comm: dict):
    part = lambda ranges: SimpleNamespace(checkpoint_extra={"ranges": ranges})  # noqa: E731
    return SimpleNamespace(compute=part(compute), fw=part(comm), bw=part(comm))


def breakdown(n, skew):
    return CostBreakdown([1.0] * n, [0.0] * n, [0.0] * n, skew=skew)


COMPUTE = {"rows": [100, 1_000_000], "pooling": [1.0, 50.0], "dim": [4, 128], "shard_dim_sum": [4, 512],
           "shard_tables": [1, 10]}
COMM = {"dim_sum": [0, 512], "sleep": [0.0, 50.0]}


def test_the_ranges_of_training_data():
    configs = [TableConfig(100, 2.0, BINS, 8), TableConfig(5000, 0.5, BINS, 32), TableConfig(10, 9.0, BINS, 4)]
    assert compute_ranges(configs, [[0], [0, 1], [1, 1, 1]]) == {
        "rows": [100, 5000], "pooling": [0.5, 2.0], "dim": [8, 32], "shard_dim_sum": [8, 96],
        "shard_tables": [1, 3]}
    samples = [SimpleNamespace(dims=[8, 40], sleeps=[0.0, 3.5]), SimpleNamespace(dims=[16, 0], sleeps=[1.0, 0.0])]
    assert comm_ranges(samples) == {"dim_sum": [0, 40], "sleep": [0.0, 3.5]}


def test_every_feature_outside_the_ranges_is_named_per_table_and_device():
    tables = [ShardTable(0, 0, TableConfig(40_000_000, 2.0, BINS, 64)),  # rows beyond 1 M
              ShardTable(1, 1, TableConfig(1000, 80.0, BINS, 256)),  # pooling beyond 50, dim 256 > 128
              ShardTable(2, 2, TableConfig(1000, 2.0, BINS, 16))]
    # table 1 split in two 128-dim halves (inside the dim range): devices 0 (t0 + half) and 1 (t2 + half)
    plan = Plan((1,), ((0, 1), (2, 3)))
    got = warnings(tables, plan, breakdown(2, [0.0, 60.0]), models_with(COMPUTE, COMM), names=["a", "b", "c"])
    assert got == ["a: rows 40,000,000 (trained on 100-1,000,000): the compute estimate is extrapolated",
                   "b: pooling factor 80 (trained on 1-50): the compute estimate is extrapolated",
                   "device 1: forward comm: start delay 60.0 ms (trained on at most 50 ms): the estimate is "
                   "extrapolated"]
    # unsplit, table 1 is a 256-dim shard and device 1's dim sum is 272 > ... only the dim range is left
    whole = Plan((), ((0,), (1, 2)))
    got = warnings(tables, whole, breakdown(2, [0.0, 0.0]), models_with(COMPUTE, COMM))
    assert "table 1: a shard of dim 256 (trained on dims 4-128): the compute estimate is extrapolated" in got
    assert not any(w.startswith("device") for w in got)
    # a device with more tables and a larger dim sum than any training shard
    many = [ShardTable(i, i, TableConfig(1000, 2.0, BINS, 64)) for i in range(11)]
    got = warnings(many, Plan((), (tuple(range(11)), ())), breakdown(2, [0.0, 0.0]), models_with(COMPUTE, COMM))
    assert got == ["device 0: compute: dim sum 704 (trained on 4-512); compute: 11 tables (trained on at most 10); "
                   "comm: dim sum 704 (trained on 0-512): the estimate is extrapolated"]


def test_models_without_recorded_ranges_warn_nothing():
    tables = [ShardTable(0, 0, TableConfig(40_000_000, 2.0, BINS, 64))]
    assert warnings(tables, Plan((), ((0,),)), breakdown(1, [0.0]), models_with({}, {})) == []


def test_an_unpooled_table_is_checked_as_the_models_read_it():
    # unpooled, dim 64, 10 lookups a sample, bin_0 1.0: the compute model reads pooling factor
    # 10 x exp(-0.381 + 0.617 ln 10 + 1.574) = 10 x 13.649 = 136.5 (beyond 50), the comm models a dim sum of 640 (beyond 512); the
    # compute dim sum stays 64
    seq = [ShardTable(0, 0, TableConfig(1000, 10.0, BINS, 64, pooled=False))]
    got = warnings(seq, Plan((), ((0,), ())), breakdown(2, [0.0, 0.0]), models_with(COMPUTE, COMM))
    assert got == ["table 0: pooling factor 136.494 (trained on 1-50): the compute estimate is extrapolated",
                   "device 0: comm: dim sum 640 (trained on 0-512): the estimate is extrapolated"]
