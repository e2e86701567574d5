"""Does the compute model price row-wise shards? Row blocks measured with FBGEMM against its estimates.

A rank of a row-wise plan runs one block of rows of each row-wise table,
serving the lookups whose ids fall in its range (`data.row_blocks`). Such a
block is a table to the kernel, so the compute model can price it from the
block's own statistics; the question is whether it does so within the
noise of a measurement, and whether the statistics must come from the ids
(locality makes blocks unequal) or 1/k of the table's would do.

`row_block_check` draws shards of row blocks (random dataset tables with at
least `min_rows` rows, each cut into k of `ks` blocks, one non-empty block,
a dim from `dims`), times each shard `repeats` times in interleaved rounds with
the compute collection's own settings (`ComputeCollectConfig.recorded`:
warm-up, iterations, clock; the dataset's batch), and compares with the compute model's
estimate from (a) the block's statistics read from its ids, (b) the
uniform assumption (`data.row_blocks.uniform_block_config`) and (c) what the
planners price: the block's lookups from the table's `row_lookups` (its ids'
spread over the rows) with the table's locality (`TableConfig.row_block`).
The noise floor is
the relative difference between two repeats (`measure.noise.rel_diff_stats`),
what a model that predicted one measurement exactly would score on the other.
"""

from __future__ import annotations

import numpy as np

from neuroshard.data.row_blocks import (
    RowBlock,
    block_range,
    planned_block_config,
    row_block_dataset,
    uniform_block_config,
)
from neuroshard.formats.dataset import Dataset
from neuroshard.measure.compute_collect import ComputeCollectConfig
from neuroshard.measure.kernel import BenchTable, ShardBenchmark
from neuroshard.measure.noise import rel_diff_stats
from neuroshard.numerics import mape
from neuroshard.planner.costs.scorer import get_scorer
from neuroshard.train.metrics import spearman
from neuroshard.types.errors import ConfigError


def draw_shards(dataset: Dataset, samples: int, ks, dims, max_tables: int, min_rows: int,
                seed: int) -> list[list[tuple[RowBlock, int]]]:
    """`samples` shards, each 1..`max_tables` (row block, dim) pairs of distinct tables, seeded."""
    big = [t for t, c in enumerate(dataset.configs) if c.row >= min_rows]
    if not big:
        raise ConfigError("--min_rows", f"no dataset table has {min_rows} rows or more "
                                        f"(the largest has {max(c.row for c in dataset.configs)})")
    rng = np.random.default_rng(seed)
    shards = []
    for _ in range(samples):
        m = int(rng.integers(1, min(max_tables, len(big)) + 1))
        shard = []
        for t in rng.choice(big, size=m, replace=False):
            k = int(rng.choice(ks))
            rows = dataset.configs[int(t)].row
            nonempty = [j for j in range(k) if block_range(rows, k, j)[1] > block_range(rows, k, j)[0]]
            shard.append((RowBlock(int(t), k, int(rng.choice(nonempty))), int(rng.choice(dims))))
        shards.append(shard)
    return shards


def row_block_check(dataset: Dataset, models, collect: ComputeCollectConfig, *, samples: int = 40,
                    ks=(2, 4), dims=(16, 32, 64), max_tables: int = 4, min_rows: int = 1000, repeats: int = 2,
                    seed: int = 0, progress=None) -> dict:
    """The check (module doc) as a JSON-ready dict: per shard its blocks, measurements and both estimates;
    the MAPEs, the Spearman of each estimate, the noise floor and the spread of the blocks' pooling factors
    against the uniform assumption. `progress`: a callable taking the number of measurements done."""
    if repeats < 2:
        raise ConfigError("--repeats", f"needs 2 or more to know the noise floor, got {repeats}")
    shards = draw_shards(dataset, samples, ks, dims, max_tables, min_rows, seed)
    blocks = sorted({b for shard in shards for b, _ in shard})
    where = {b: i for i, b in enumerate(blocks)}
    data = row_block_dataset(dataset, blocks)
    bench = ShardBenchmark(data, warmup=collect.warmup, iters=collect.iters, clock=collect.clock, seed=seed)
    measured = np.zeros((repeats, len(shards)))
    rng = np.random.default_rng(seed + 1)
    done = 0
    for r in range(repeats):  # interleaved rounds, each in its own order: a slow spell hits every shard alike
        for s in rng.permutation(len(shards)):
            tables = [BenchTable(data.configs[where[b]].row, d, where[b]) for b, d in shards[s]]
            measured[r, s] = bench.measure(tables).median_ms
            done += 1
            if progress is not None:
                progress(done)
    scorer = get_scorer(models)
    own, uniform, lookups = [], [], []
    for shard in shards:
        own_cfgs = [data.configs[where[b]].with_dim(d) for b, d in shard]
        uni_cfgs = [uniform_block_config(dataset.configs[b.table_id].with_dim(d), b.k, b.j) for b, d in shard]
        lookup_cfgs = [planned_block_config(dataset.configs[b.table_id].with_dim(d), b.k, b.j) for b, d in shard]
        for out, cfgs in ((own, own_cfgs), (uniform, uni_cfgs), (lookups, lookup_cfgs)):
            out.append(float(scorer.shard_costs(scorer.embed(cfgs), [list(range(len(cfgs)))])[0]))
    own_a, uni_a, look_a = np.array(own), np.array(uniform), np.array(lookups)
    mean = measured.mean(axis=0)

    def error(est):  # against each repeat, as a model is judged against one measurement
        return float(np.mean([mape(est, m) for m in measured]))

    pooling = [data.configs[where[b]].pooling_factor / max(uniform_block_config(
        dataset.configs[b.table_id], b.k, b.j).pooling_factor, 1e-12) for b in blocks]
    return {
        "samples": len(shards), "blocks": len(blocks), "repeats": repeats, "ks": list(ks), "dims": list(dims),
        "max_tables": max_tables, "min_rows": min_rows, "seed": seed,
        "settings": {"warmup": collect.warmup, "iters": collect.iters, "clock": collect.clock,
                     "batch": data.batch_size},
        "noise_floor": rel_diff_stats(measured[0], measured[1]),
        "mape": {"block_stats": error(own_a), "uniform": error(uni_a), "row_lookups": error(look_a)},
        "spearman": {"block_stats": spearman(own_a, mean), "uniform": spearman(uni_a, mean),
                     "row_lookups": spearman(look_a, mean)},
        "pooling_over_uniform": {"min": float(min(pooling)), "median": float(np.median(pooling)),
                                 "max": float(max(pooling))},
        "shards": [{"blocks": [[b.table_id, b.k, b.j, d] for b, d in shard], "measured_ms": measured[:, s].tolist(),
                    "block_stats_ms": own[s], "uniform_ms": uniform[s], "row_lookups_ms": lookups[s]}
                   for s, shard in enumerate(shards)],
    }
