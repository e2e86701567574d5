"""The cost models' per-table features, without torch: what the compute model, its training and the
planner's NumPy scorer all read a table as."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from neuroshard.types.tables import NUM_BINS, TableConfig

TABLE_EMBED_DIM = 32
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
