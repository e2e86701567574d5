"""A fixed split of a dataset's tables into two halves, for checks on tables a model never saw."""

from __future__ import annotations

import numpy as np


def table_halves(num_tables: int, seed: int) -> np.ndarray:
    """The half (0 or 1) of each of `num_tables` dataset tables: a seeded shuffle, cut in the middle."""
    perm = np.random.default_rng([int(seed), 7717]).permutation(num_tables)
    halves = np.ones(num_tables, dtype=np.int64)
    halves[perm[:num_tables // 2]] = 0
    return halves


def sample_group(ids, halves: np.ndarray) -> str:
    """"half0" / "half1" when every table of a shard (augmented ids; table i uses dataset table
    i % len(halves)) lies in one half, else "mixed"."""
    got = {int(halves[i % len(halves)]) for i in ids}
    return f"half{got.pop()}" if len(got) == 1 else "mixed"
