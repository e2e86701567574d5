"""Row blocks of a dataset's tables, by hand: their ranges, the lookups they keep and their statistics."""

import pytest
import torch

from neuroshard.data.row_blocks import (
    RowBlock,
    block_config,
    block_lookups,
    block_range,
    row_block_dataset,
    uniform_block_config,
)
from neuroshard.formats.dataset import Dataset
from neuroshard.types.tables import DEFAULT_BINS, TableConfig


def test_block_ranges_follow_torchrecs_blocks():
    assert [block_range(10, 4, j) for j in range(4)] == [(0, 3), (3, 6), (6, 9), (9, 10)]
    assert block_range(5, 4, 3) == (5, 5)  # TorchRec leaves it empty
    with pytest.raises(ValueError, match="block 4 of 4"):
        block_range(10, 4, 4)


def test_a_block_keeps_the_lookups_in_its_range_shifted_in_the_same_bags():
    # three bags: [0, 5], [7], [2, 9, 3]; rows [3, 8) keep 5 -> 2, 7 -> 4, 3 -> 0
    idx, off = block_lookups(torch.tensor([0, 5, 7, 2, 9, 3]), torch.tensor([0, 2, 3, 6]), 3, 8)
    assert idx.tolist() == [2, 4, 0] and off.tolist() == [0, 1, 2, 3]
    idx, off = block_lookups(torch.tensor([0, 5, 7, 2, 9, 3]), torch.tensor([0, 2, 3, 6]), 8, 10)
    assert idx.tolist() == [1] and off.tolist() == [0, 0, 0, 1]


def test_a_blocks_statistics_come_from_its_own_ids():
    # 10 rows, 4 bags; row 1 is hot (looked up 4 times), rows 6 and 8 once each
    indices = torch.tensor([1, 1, 6, 1, 8, 1])
    offsets = torch.tensor([0, 2, 3, 5, 6])
    config = TableConfig(10, 1.5, DEFAULT_BINS)
    ds = Dataset([config], [indices], [offsets])
    first, third = block_config(ds, RowBlock(0, 4, 0)), block_config(ds, RowBlock(0, 4, 2))
    # block 0 = rows [0, 3): row 1 four times -> 4 lookups over 4 bags, one distinct row in bin (2, 4]
    assert (first.row, first.pooling_factor) == (3, 1.0) and first.bins[2] == 1.0
    # block 2 = rows [6, 9): rows 6 and 8 once each -> 2 lookups, both distinct rows in bin (0, 1]
    assert (third.row, third.pooling_factor) == (3, 0.5) and third.bins[0] == 1.0
    # the uniform assumption gives each block its share of the rows: 3/10 of 1.5 lookups, the table's bins
    uniform = uniform_block_config(config, 4, 0)
    assert (uniform.row, uniform.pooling_factor, uniform.bins) == (3, pytest.approx(0.45), DEFAULT_BINS)
    blocks = row_block_dataset(ds, [RowBlock(0, 4, 2), RowBlock(0, 4, 0)])
    assert blocks.configs == [third, first] and blocks.batch_size == 4
    assert blocks.lookups(0)[0].tolist() == [0, 2] and blocks.lookups(0)[1].tolist() == [0, 0, 1, 2, 2]
    with pytest.raises(ValueError, match=r"table 0 \(5 rows\) cut into 4 row blocks leaves block 3 empty"):
        block_config(Dataset([TableConfig(5, 1.0, DEFAULT_BINS)], [indices % 5], [offsets]), RowBlock(0, 4, 3))
