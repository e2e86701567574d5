"""Row blocks of a dataset's tables: the lookups a row-wise shard serves, from the dataset's real ids.

A row-wise table keeps rows [lo, hi) on one rank (`types.plan.row_blocks`:
TorchRec's blocks), and that rank serves only the lookups whose ids fall in
its range. Ids are not spread evenly over the rows (hot rows cluster), so a
block's lookups, pooling factor and locality are read from the ids, not
assumed to be 1/k of the table's. A block is a table in its own right: rows
= the block's, ids shifted to start at 0, one bag per sample (empty where the
sample looks up nothing in the range), so the FBGEMM benchmark and the
compute model take it as they take any table (`row_block_dataset`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple, Sequence

import torch

from neuroshard.data.stats import table_locality
from neuroshard.formats.dataset import Dataset
from neuroshard.types.plan import row_block_ranges
from neuroshard.types.tables import TableConfig


class RowBlock(NamedTuple):
    """Block `j` of dataset table `table_id` cut row-wise into `k` blocks."""

    table_id: int
    k: int
    j: int


def block_range(rows: int, k: int, j: int) -> tuple[int, int]:
    """Rows [lo, hi) of block j of a `rows`-row table cut into k (`types.plan.row_block_ranges`)."""
    if not 0 <= j < k:
        raise ValueError(f"block {j} of {k}: expected 0..{k - 1}")
    return row_block_ranges(rows, k)[j]


def block_lookups(indices: torch.Tensor, offsets: torch.Tensor, lo: int, hi: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids - lo, offsets) of the lookups in [lo, hi): the same bags, each keeping its ids in the range."""
    keep = (indices >= lo) & (indices < hi)
    ends = torch.cat([torch.zeros(1, dtype=torch.int64), keep.to(torch.int64).cumsum(0)])
    return (indices[keep] - lo).to(indices.dtype), ends[offsets.to(torch.int64)].to(offsets.dtype)


def block_config(dataset: Dataset, block: RowBlock) -> TableConfig:
    """The block's statistics from its own lookups: its rows, its pooling factor and locality bins."""
    return _block(dataset, block)[0]


def planned_block_config(config: TableConfig, k: int, j: int) -> TableConfig:
    """What the planners price of block j of k (`TableConfig.row_block`): the block's rows, the lookups that fall
    in them by the table's `row_lookups` (else its share of the rows), the table's locality."""
    return config.row_block(*block_range(config.row, k, j))


def uniform_block_config(config: TableConfig, k: int, j: int) -> TableConfig:
    """What a planner without the ids would assume: the block's rows, 1/k of the lookups (by the block's
    share of the rows), the table's locality."""
    return planned_block_config(replace(config, row_lookups=None), k, j)


def row_block_dataset(dataset: Dataset, blocks: Sequence[RowBlock]) -> Dataset:
    """A dataset whose table i is `blocks[i]` (rows, shifted ids, statistics from them). ValueError for a
    block that holds no rows (TorchRec leaves the last blocks of a short table empty)."""
    configs, indices, offsets = [], [], []
    for b in blocks:
        config, idx, off = _block(dataset, b)
        configs.append(config)
        indices.append(idx)
        offsets.append(off)
    return Dataset(configs, indices, offsets)


def _block(dataset: Dataset, block: RowBlock) -> tuple[TableConfig, torch.Tensor, torch.Tensor]:
    t, k, j = block
    if not 0 <= t < len(dataset):
        raise ValueError(f"dataset table {t} does not exist (the dataset has {len(dataset)} tables)")
    rows = dataset.configs[t].row
    lo, hi = block_range(rows, k, j)
    if hi <= lo:
        raise ValueError(f"table {t} ({rows} rows) cut into {k} row blocks leaves block {j} empty")
    idx, off = block_lookups(*dataset.lookups(t), lo, hi)
    stats = table_locality(idx).config(dataset.batch_size)
    return TableConfig(hi - lo, stats.pooling_factor, stats.bins), idx, off
