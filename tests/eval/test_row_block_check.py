"""The row-block check: real FBGEMM timings of row blocks of a synthetic dataset, estimates by hand."""

import math

import pytest

from neuroshard.data.row_blocks import RowBlock, block_config, block_range, uniform_block_config
from neuroshard.data.synthetic import SyntheticSpec, generate_synthetic
from neuroshard.eval.row_block_check import draw_shards, row_block_check
from neuroshard.formats.dataset import Dataset
from neuroshard.measure.compute_collect import ComputeCollectConfig
from neuroshard.planner.costs.cost_models import CostModels
from neuroshard.planner.costs.nets import linear_compute_model
from neuroshard.types.errors import ConfigError
from tests.planner.test_simulator import diagonal_comm_model

pytest.importorskip("fbgemm_gpu")


@pytest.fixture(scope="module")
def dataset():
    configs, _, idx, off = generate_synthetic(SyntheticSpec(num_tables=6, batch_size=64, max_rows=4000, seed=1),
                                              progress=False)
    return Dataset(configs, idx, off)


def test_shards_are_drawn_from_large_tables_seeded_and_never_empty(dataset):
    a = draw_shards(dataset, 5, (2, 4), (8, 16), 3, 1000, seed=0)
    assert a == draw_shards(dataset, 5, (2, 4), (8, 16), 3, 1000, seed=0)
    for shard in a:
        assert 1 <= len(shard) <= 3 and len({b.table_id for b, _ in shard}) == len(shard)
        for b, d in shard:
            assert dataset.configs[b.table_id].row >= 1000 and b.k in (2, 4) and d in (8, 16)
    with pytest.raises(ConfigError, match="no dataset table has"):
        draw_shards(dataset, 1, (2,), (8,), 1, 10**9, seed=0)


def test_the_check_measures_each_shard_and_prices_it_both_ways(dataset):
    # compute = 0.5 + 0.01 x dims + 0.001 x sum(dim x pooling) ms, so each estimate is known by hand
    models = CostModels(linear_compute_model(0.01, 0.5, 0.001), diagonal_comm_model("fw", 2, 0.0, 0.0),
                        diagonal_comm_model("bw", 2, 0.0, 0.0))
    out = row_block_check(dataset, models, ComputeCollectConfig(warmup=0, iters=1, clock="wall"), samples=3,
                          ks=(2,), dims=(8,), max_tables=2, min_rows=1000, repeats=2, seed=0)
    assert out["samples"] == 3 and out["settings"]["batch"] == 64
    for shard in out["shards"]:
        blocks = [(RowBlock(t, k, j), d) for t, k, j, d in shard["blocks"]]
        own = 0.5 + sum(0.01 * d + 0.001 * d * block_config(dataset, b).pooling_factor for b, d in blocks)
        uniform = 0.5 + sum(0.01 * d + 0.001 * d * uniform_block_config(dataset.configs[b.table_id], b.k, b.j)
                            .pooling_factor for b, d in blocks)
        assert shard["block_stats_ms"] == pytest.approx(own, rel=1e-5)
        assert shard["uniform_ms"] == pytest.approx(uniform, rel=1e-5)
        # the planners' pricing: the block's lookups from the table's row_lookups, whose 64 ranges give the
        # block's own share but for a range cut by the block (read as spread evenly over its rows)
        planned = 0.5 + sum(0.01 * d + 0.001 * d * dataset.configs[b.table_id].row_block(
            *block_range(dataset.configs[b.table_id].row, b.k, b.j)).pooling_factor for b, d in blocks)
        assert shard["row_lookups_ms"] == pytest.approx(planned, rel=1e-5)
        assert shard["row_lookups_ms"] == pytest.approx(own, rel=0.02)
        assert len(shard["measured_ms"]) == 2 and min(shard["measured_ms"]) > 0
    assert all(math.isfinite(v) for v in out["mape"].values()) and out["noise_floor"]["n"] == 3
    with pytest.raises(ConfigError, match="needs 2 or more"):
        row_block_check(dataset, models, ComputeCollectConfig(), repeats=1)
