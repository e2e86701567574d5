import pytest
import torch

from neuroshard.data.synthetic import SyntheticSpec, generate_synthetic
from neuroshard.formats.dataset import Dataset
from neuroshard.measure.kernel import (
    BenchTable,
    IndexRangeError,
    ShardBenchmark,
    bench_tables,
    op_groups,
    spread_bench_tables,
)
from neuroshard.types.errors import NeuroShardError
from neuroshard.types.plan import Spread, apply_column_steps
from neuroshard.types.tables import Task


@pytest.fixture(scope="module")
def dataset():
    configs, _, indices, offsets = generate_synthetic(
        SyntheticSpec(num_tables=4, batch_size=32, max_rows=500, mean_pooling=3.0), progress=False)
    return Dataset(configs, indices, offsets)


@pytest.fixture(scope="module")
def bench(dataset):
    return ShardBenchmark(dataset, "cpu", warmup=1, iters=3, arena_gb=0.01)


def test_tiny_shard_gives_positive_median_and_per_iteration_times(dataset, bench):
    tables = [BenchTable(dataset.configs[t].row, 8, t) for t in (0, 2)]
    r = bench.measure(tables)
    assert r.median_ms > 0
    assert len(r.times_ms) == 3 and all(t > 0 for t in r.times_ms)
    assert sorted(r.times_ms)[1] == pytest.approx(r.median_ms)
    assert 0 < r.timed_s <= r.bench_s <= r.total_s


def test_empty_shard_costs_zero(bench):
    r = bench.measure([])
    assert r.median_ms == 0.0


def test_out_of_range_index_is_rejected_and_data_untouched(dataset, bench):
    idx = dataset.indices[1]
    before = idx.clone()
    top = int(idx.max())
    with pytest.raises(IndexRangeError) as e:
        bench.measure([BenchTable(dataset.configs[0].row, 4, 0), BenchTable(top, 4, 1)])
    msg = str(e.value)
    assert "shard table 1" in msg and "dataset table 1" in msg and str(top) in msg
    assert isinstance(e.value, ValueError) and isinstance(e.value, NeuroShardError)
    assert torch.equal(dataset.indices[1], before)  # FBGEMM never saw (and rewrote) them


def test_malformed_tables_are_rejected(bench, dataset):
    with pytest.raises(ValueError, match="multiple of 4"):
        bench.measure([BenchTable(dataset.configs[0].row, 6, 0)])
    with pytest.raises(ValueError, match="does not exist"):
        bench.measure([BenchTable(1000, 4, 99)])


def test_inputs_are_table_major_lookups_of_each_dataset_table(dataset, bench):
    # a task table split in two: both halves read the lookups of dataset table 3
    task = Task((3, 1), (16, 8))
    tables = bench_tables(apply_column_steps(task.tables(dataset.configs), [0]))
    assert [(t.table_id, t.dim) for t in tables] == [(3, 8), (1, 8), (3, 8)]
    indices, offsets, grad = bench.shard_inputs(tables)
    B = dataset.batch_size
    assert offsets.shape == (3 * B + 1,) and grad.shape == (B, 24)
    op = bench.build_op(tables)
    weights = op.split_embedding_weights()
    gen = torch.Generator().manual_seed(0)
    for w in weights:
        w.copy_(torch.randn(w.shape, generator=gen))
    out = op(indices, offsets)
    expected = torch.cat([
        torch.nn.functional.embedding_bag(dataset.indices[t.table_id].long(), w,
                                          dataset.offsets[t.table_id][:-1].long(), mode="sum")
        for t, w in zip(tables, weights)], dim=1)
    torch.testing.assert_close(out, expected)


def test_an_unpooled_table_runs_fbgemms_kernel_without_pooling(dataset, bench):
    """The same table pooled and unpooled (`PoolingMode.NONE`) on the real FBGEMM kernel: the unpooled op's output
    is every looked-up row ([lookups, dim], its gradient as wide), whose sums per sample are the pooled op's output;
    a backward step updates the same rows by the same amounts. A shard of both kinds and two unpooled dims runs
    three ops (pooled, then one per dim) and is timed as one."""
    pooled = BenchTable(dataset.configs[1].row, 8, 1)
    unpooled = BenchTable(dataset.configs[1].row, 8, 1, pooled=False)
    idx, off = dataset.indices[1].long(), dataset.offsets[1].long()
    outs, weights = [], []
    for t in (pooled, unpooled):
        indices, offsets, grad = bench.shard_inputs([t])
        assert grad.shape == ((dataset.batch_size, 8) if t.pooled else (idx.numel(), 8))
        op = bench.build_op([t])
        (w,) = op.split_embedding_weights()
        w.copy_(torch.randn(w.shape, generator=torch.Generator().manual_seed(0)))
        start = w.clone()
        out = op(indices, offsets)
        outs.append(out.detach())
        out.backward(torch.ones_like(out))  # every looked-up row gets -lr per lookup, in both kinds
        weights.append((start, w.detach().clone()))
    assert outs[1].shape == (idx.numel(), 8)
    torch.testing.assert_close(outs[1], weights[1][0][idx])  # the rows themselves
    sample = torch.repeat_interleave(torch.arange(dataset.batch_size), off[1:] - off[:-1])
    torch.testing.assert_close(torch.zeros_like(outs[0]).index_add(0, sample, outs[1]), outs[0])
    torch.testing.assert_close(weights[0][1] - weights[0][0], weights[1][1] - weights[1][0])
    # op groups by hand, and a mixed shard's time
    shard = [BenchTable(dataset.configs[0].row, 16, 0, pooled=False), pooled,
             BenchTable(dataset.configs[2].row, 8, 2, pooled=False), BenchTable(dataset.configs[3].row, 4, 3)]
    assert op_groups(shard) == [[shard[1], shard[3]], [shard[2]], [shard[0]]]
    assert bench.measure(shard).median_ms > 0
    with pytest.raises(ValueError, match="one op takes pooled tables, or unpooled ones of one dim"):
        bench.build_op([shard[0], shard[2]])
    with pytest.raises(ValueError, match="prepare builds one pooled op"):
        bench.prepare([unpooled])


def test_a_smaller_batch_is_the_first_samples_of_the_datasets(dataset, bench):
    # the first 10 of the 32 samples: each table's first 10 bags, their lookups, a [10, dims] gradient; the
    # pooled output is those samples' rows of the whole batch's output
    tables = [BenchTable(dataset.configs[t].row, 8, t) for t in (0, 2)]
    indices, offsets, grad = bench.shard_inputs(tables, 10)
    ends = [int(dataset.offsets[t][10]) for t in (0, 2)]
    assert offsets.shape == (2 * 10 + 1,) and grad.shape == (10, 16) and indices.numel() == sum(ends)
    assert int(offsets[10]) == ends[0] and int(offsets[-1]) == sum(ends)
    op = bench.build_op(tables)
    with torch.no_grad():
        full = op(*bench.shard_inputs(tables)[:2])
        part = op(indices, offsets)
    torch.testing.assert_close(part, full[:10])
    assert bench.measure(tables, 10).median_ms > 0
    for bad in (0, 33, 2.0):
        with pytest.raises(ValueError, match="batch must be an integer in 1..32"):
            bench.measure(tables, bad)


def test_cpu_clock_counts_this_threads_cpu_time(dataset):
    tables = [BenchTable(dataset.configs[t].row, 16, t) for t in range(4)]
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        r = ShardBenchmark(dataset, "cpu", warmup=1, iters=3, arena_gb=0.01, clock="cpu").measure(tables)
        assert r.median_ms > 0 and len(r.times_ms) == 3
        assert r.timed_s >= sum(r.times_ms) / 1e3 * 0.99  # CPU time never exceeds elapsed time
        if old > 1:
            torch.set_num_threads(2)
            with pytest.raises(ValueError, match="set_num_threads"):
                ShardBenchmark(dataset, "cpu", clock="cpu").measure(tables)
    finally:
        torch.set_num_threads(old)
    with pytest.raises(ValueError, match="clock"):
        ShardBenchmark(dataset, "cpu", clock="sundial")


def test_row_blocks_and_local_batches_add_up_to_the_whole_table(dataset, bench):
    """Table 0 row-wise over 2 ranks: the two blocks' pooled outputs (each block's weights the rows it holds)
    sum to the whole table's; data-parallel over 2 ranks: each rank pools its 16 samples and nothing else."""
    task = Task((0, 2), (8, 8))
    tables = task.tables(dataset.configs)
    rows, B = dataset.configs[0].row, dataset.batch_size
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(rows, 8, generator=gen)
    full = torch.nn.functional.embedding_bag(dataset.indices[0].long(), w, dataset.offsets[0][:-1].long(),
                                             mode="sum")

    def pooled(part):
        op = bench.build_op([part])
        lo = part.part[1] if part.part[0] == "rows" else 0
        with torch.no_grad():
            op.split_embedding_weights()[0].copy_(w[lo:lo + part.rows])
            return op(*bench.shard_inputs([part])[:2])

    halves = [spread_bench_tables(tables, [Spread(0, "row_wise", (0, 1))], r, B) for r in (0, 1)]
    half = -(-rows // 2)  # TorchRec's blocks: ceil(rows / 2) rows, the rest
    assert [(h[0].rows, h[0].part) for h in halves] == [(half, ("rows", 0, half)), (rows - half, ("rows", half, rows))]
    torch.testing.assert_close(pooled(halves[0][0]) + pooled(halves[1][0]), full)
    for r in (0, 1):
        [mine] = spread_bench_tables(tables, [Spread(0, "data_parallel", (0, 1))], r, B)
        assert mine.rows == rows and mine.part == ("bags", 16 * r, 16 * (r + 1))
        want = torch.zeros_like(full)
        want[16 * r:16 * (r + 1)] = full[16 * r:16 * (r + 1)]
        torch.testing.assert_close(pooled(mine), want)
    # a rank outside the spread table's ranks holds none of it; a block and a share run beside a whole table
    assert spread_bench_tables(tables, [Spread(0, "row_wise", (1,))], 0, B) == []
    assert bench.measure(bench_tables(tables[1:]) + halves[0] + [mine]).median_ms > 0
