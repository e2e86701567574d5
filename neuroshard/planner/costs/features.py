"""The cost models' per-table features, without torch: what the compute model, its training and the
planner's NumPy scorer all read a table as.

The batch enters as lookup volume: a shard at `r` times the reference batch (the batch the compute data
was collected at) reads `r` times the rows, so its tables are read with `r` times their pooling factors
(`batch_scaled`), in training (each sample at its own batch) and in planning (`CostModels.at_batch`).

An unpooled (sequence) table is read as a pooled one at `unpooled_ratio` times its pooling factor
(`compute_pooling`): the compute data holds pooled bags only, and FBGEMM's unpooled kernel (`PoolingMode.NONE`,
every looked-up row written out and its gradient read back) takes several times the pooled kernel's time on
the same table, the more so the more lookups per sample and the fewer of them reuse a row
(`benchmarks/bench_unpooled_compute.py` measures the ratio and fits `UNPOOLED_RATIO`; DESIGN §6). Kernel time
grows about linearly with the lookups, so more lookups stand for the slower kernel; where the product leaves
the pooling factors the model was trained on, `planner.costs.extrapolation` says so."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

import numpy as np

from neuroshard.types.tables import NUM_BINS, TableConfig

TABLE_EMBED_DIM = 32
ACC_DTYPE = np.float32  # compute-model accumulators and compute costs (the models are float32 nets)
NUM_FEATURES = 4 + NUM_BINS  # see feature_matrix
# unpooled over pooled forward+backward kernel time of one table on FBGEMM's CPU kernels:
# exp(a + b ln(max(pooling factor, 1)) + c bin_0), fitted by benchmarks/bench_unpooled_compute.py --fit
UNPOOLED_RATIO = (-0.381, 0.617, 1.574)


def unpooled_ratio(c: TableConfig) -> float:
    """The kernel time of `c` unpooled over its time pooled (`UNPOOLED_RATIO`; module doc)."""
    a, b, k = UNPOOLED_RATIO
    return math.exp(a + b * math.log(max(c.pooling_factor, 1.0)) + k * c.bins[0])


def compute_pooling(c: TableConfig) -> float:
    """The pooling factor the compute model reads `c` at: its own when pooled, `unpooled_ratio` times it when
    unpooled (module doc)."""
    return c.pooling_factor if c.pooled else c.pooling_factor * unpooled_ratio(c)


def feature_matrix(configs: Sequence[TableConfig]) -> np.ndarray:
    """Per-table features [N, F] (float32): dim, log10(row), pooling factor, dim×pooling, 17 bins.

    The dim×pooling product is the number of floats a table reads per sample,
    the first-order driver of TBE time; giving it directly spares the MLP
    from learning a product. Configs must carry a dim.
    """
    rows = []
    for c in configs:
        if c.dim is None:
            raise ValueError("table features need configs with a dim")
        pooling = compute_pooling(c)
        rows.append([float(c.dim), math.log10(c.row), pooling, c.dim * pooling, *c.bins])
    return np.asarray(rows, dtype=np.float32).reshape(len(rows), NUM_FEATURES)


def batch_scaled(configs: Sequence[TableConfig], ratio: float) -> list[TableConfig]:
    """The tables as the compute model reads them at `ratio` times its reference batch: pooling factors
    (lookups per sample) times `ratio`, so that the lookups of a whole batch are those of the reference
    batch's samples (module doc)."""
    if ratio == 1.0:
        return list(configs)
    return [replace(c, pooling_factor=c.pooling_factor * ratio) for c in configs]
