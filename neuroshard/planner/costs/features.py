"""The cost models' per-table features, without torch: what the compute model, its training and the
planner's NumPy scorer all read a table as.

The batch enters as lookup volume: a shard at `r` times the reference batch (the batch the compute data
was collected at) reads `r` times the rows, so its tables are read with `r` times their pooling factors
(`batch_scaled`), in training (each sample at its own batch) and in planning (`CostModels.at_batch`)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

import numpy as np

from neuroshard.types.tables import NUM_BINS, TableConfig

TABLE_EMBED_DIM = 32
ACC_DTYPE = np.float32  # compute-model accumulators and compute costs (the models are float32 nets)
NUM_FEATURES = 4 + NUM_BINS  # see feature_matrix


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
        rows.append([float(c.dim), math.log10(c.row), c.pooling_factor, c.dim * c.pooling_factor, *c.bins])
    return np.asarray(rows, dtype=np.float32).reshape(len(rows), NUM_FEATURES)


def batch_scaled(configs: Sequence[TableConfig], ratio: float) -> list[TableConfig]:
    """The tables as the compute model reads them at `ratio` times its reference batch: pooling factors
    (lookups per sample) times `ratio`, so that the lookups of a whole batch are those of the reference
    batch's samples (module doc)."""
    if ratio == 1.0:
        return list(configs)
    return [replace(c, pooling_factor=c.pooling_factor * ratio) for c in configs]
