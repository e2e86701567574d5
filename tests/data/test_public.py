"""The public DLRM file: a tiny file in the public layout, processed into per-table stats by hand."""

import numpy as np
import pytest
import torch

from neuroshard.data.public import process_public
from neuroshard.formats.dataset import (
    read_dataset,
    read_public_dlrm,
    write_dataset,
    write_public_dlrm,
)
from neuroshard.types.errors import InputError

# ---------------------------------------------------------------- a tiny file in the public layout
# 4 tables x batch 4:
#   t0: no lookups                                   -> row 100, pf 0, all bins 0
#   t1: [3] [3, 7] [] [9]  (rows < 100)              -> row 100, pf 1, 3 distinct: 7, 9 once; 3 twice
#   t2: 5 x 40 (hot), 1000 x 2, 2000 x 1             -> row 2001, pf 43/4, bins 0, 1, 6 (40 in (32, 64])
#   t3: 0 x 32769 (> 2^15), 150 x 1                  -> row 151, pf 32770/4, bins 0 and 16
TINY_LENGTHS = [[0, 0, 0, 0], [1, 2, 0, 1], [10, 10, 10, 13], [32769, 0, 0, 1]]
TINY_TABLES = [[], [3, 3, 7, 9], [5] * 40 + [1000, 2000, 1000], [0] * 32769 + [150]]


def _bins(**fractions):
    b = [0.0] * 17
    for k, v in fractions.items():
        b[int(k[1:])] = v
    return b


TINY_EXPECTED = [  # (row, pooling_factor, bins)
    (100, 0.0, _bins()),
    (100, 1.0, _bins(b0=2 / 3, b1=1 / 3)),
    (2001, 10.75, _bins(b0=1 / 3, b1=1 / 3, b6=1 / 3)),
    (151, 8192.5, _bins(b0=1 / 2, b16=1 / 2)),
]


def tiny_public():
    """(indices, offsets, lengths) of the tiny file, int64 as in the public release."""
    lengths = torch.tensor(TINY_LENGTHS, dtype=torch.int64)
    indices = torch.tensor([i for t in TINY_TABLES for i in t], dtype=torch.int64)
    offsets = torch.zeros(lengths.numel() + 1, dtype=torch.int64)
    offsets[1:] = torch.cumsum(lengths.flatten(), 0)
    return indices, offsets, lengths


def write_tiny_public(path):
    write_public_dlrm(path, *tiny_public())
    return path


def check_tiny_configs(configs):
    assert len(configs) == len(TINY_EXPECTED)
    for c, (row, pf, bins) in zip(configs, TINY_EXPECTED):
        assert c.row == row
        assert c.pooling_factor == pytest.approx(pf)
        assert c.bins == pytest.approx(bins)
        assert c.dim is None


# ---------------------------------------------------------------- per-table statistics


# ---------------------------------------------------------------- public layout


@pytest.mark.parametrize("name", ["tiny.pt", "tiny.pt.gz"])
def test_process_public_file_by_hand(tmp_path, name):
    path = write_tiny_public(tmp_path / name)
    configs, locs, indices, offsets = process_public(*read_public_dlrm(path), path=str(path),
                                                       progress=False)
    check_tiny_configs(configs)
    for t, lengths in enumerate(TINY_LENGTHS):
        assert indices[t].dtype == torch.int32 and indices[t].tolist() == TINY_TABLES[t]
        assert offsets[t].tolist() == [0] + np.cumsum(lengths).tolist()  # re-based to 0
    out = tmp_path / "ds"
    write_dataset(out, configs, indices, offsets)
    ds = read_dataset(out)
    assert ds.batch_size == 4 and [i.tolist() for i in ds.indices] == TINY_TABLES


def test_process_public_rejects_inconsistent_lengths(tmp_path):
    indices, offsets, lengths = tiny_public()
    lengths[1, 0] += 1
    lengths[1, 1] -= 1  # same total, different samples
    with pytest.raises(InputError, match="table 1, sample 0"):
        process_public(indices, offsets, lengths, path="bad.pt", progress=False)
