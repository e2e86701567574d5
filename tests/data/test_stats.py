"""Dataset statistics: per-table locality, aggregate stats and the published locality-stats files."""

from pathlib import Path

import numpy as np
import pytest
import torch

from neuroshard.data import stats
from neuroshard.types.errors import InputError
from tests.data.test_public import TINY_TABLES, _bins, tiny_public

# The published locality stats ship with the repository (reference/, MIT licensed).
REFERENCE = Path(__file__).resolve().parents[2] / "reference" / "dlrm_datasets_2021_locality_stats.txt"


def test_bin_edges():
    counts = np.array([1, 2, 3, 4, 5, 8, 9, 16, 17, 1024, 1025, 32768, 32769, 10**9])
    assert stats.access_bins(counts).tolist() == [0, 1, 2, 2, 3, 3, 4, 4, 5, 10, 11, 15, 16, 16]
    assert len(stats.BIN_LABELS) == 17 and stats.BIN_LABELS[0] == "(0, 1]" and stats.BIN_LABELS[-1] == "(32768+"


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_table_locality_dense_and_sparse(dtype):
    loc = stats.table_locality(torch.tensor([4, 4, 4, 1], dtype=dtype))
    assert loc.num_lookups == 4 and loc.max_index == 4 and loc.num_distinct == 2
    assert loc.distinct.tolist()[:3] == [1, 0, 1] and loc.lookups.tolist()[:3] == [1, 0, 3]
    # a huge sparse index range takes the sort-based path; same answer
    big = 2**31 - 2 if dtype == torch.int32 else 10**12
    sparse = stats.table_locality(torch.tensor([big, big, 7], dtype=dtype))
    assert sparse.row == big + 1 and sparse.distinct.tolist()[:2] == [1, 1]
    assert sparse.lookups.tolist()[:2] == [1, 2]


def test_empty_table_has_zero_bins():
    loc = stats.table_locality(torch.zeros(0, dtype=torch.int64))
    cfg = loc.config(batch_size=8)
    assert cfg.row == 100 and cfg.pooling_factor == 0.0 and cfg.bins == (0.0,) * 17
    assert cfg.row_lookups is None


def test_row_lookups_count_where_the_ids_fall():
    # 200 rows (max(100, 199 + 1)) in 64 ranges of 3.125 rows: ids 0, 1, 2 in range 0, 3 in range 0 (3 x 64 //
    # 200 = 0), 4 in range 1, 199 in range 63
    cfg = stats.table_locality(torch.tensor([0, 1, 2, 3, 4, 199, 199, 199])).config(batch_size=4)
    shares = cfg.row_lookups
    assert cfg.row == 200 and len(shares) == 64
    assert shares[0] == 0.5 and shares[1] == 0.125 and shares[63] == 0.375 and sum(shares[2:63]) == 0
    # a block over the first half of the rows serves the ids below 100: 5 of 8 lookups a batch of 4
    assert cfg.row_block(0, 100).pooling_factor == pytest.approx(2.0 * 5 / 8)
    # the table's known rows (more than its ids reach) set the ranges: of 300 rows, id 250 in range 53
    known = stats.table_locality(torch.tensor([1, 250]), rows=300).config(1)
    assert known.row == 300 and known.row_lookups[0] == 0.5 and known.row_lookups[53] == 0.5


def test_aggregate_stats_by_hand():
    _, _, lengths = tiny_public()
    locs = [stats.table_locality(torch.tensor(t, dtype=torch.int64)) for t in TINY_TABLES]
    st = stats.aggregate_locality(locs, batch_size=4, name="tiny")
    n = 4 + 43 + 32770
    assert (st.num_indices, st.num_unique) == (n, 8)
    assert st.avg_col_size == pytest.approx(n / 8)
    assert st.col_hist == pytest.approx(_bins(b0=4 / 8, b1=2 / 8, b6=1 / 8, b16=1 / 8))
    assert st.index_ratio == pytest.approx(_bins(b0=4 / n, b1=4 / n, b6=40 / n, b16=32769 / n))


def test_locality_text_round_trip(tmp_path):
    locs = [stats.table_locality(torch.tensor(t, dtype=torch.int64)) for t in TINY_TABLES]
    st = stats.aggregate_locality(locs, batch_size=4, name="tiny")
    text = stats.format_locality_stats(st)
    assert "Avg # of indices: 32817" in text and "(32768+: 0.125" in text
    path = tmp_path / "stats.txt"
    path.write_text(text + "\n\n" + text + "\n")
    blocks = stats.parse_locality_stats(path)
    assert len(blocks) == 2 and blocks[0].batch_size == 4 and blocks[0].num_unique == 8
    assert blocks[0].col_hist == pytest.approx(st.col_hist, abs=5e-4)
    assert blocks[1].index_ratio == pytest.approx(st.index_ratio, abs=5e-4)


def test_parse_published_reference():
    blocks = stats.parse_locality_stats(REFERENCE)
    first = blocks[0]
    assert len(blocks) == 17 and first.name == "fbgemm_t856_bs65536.pt"
    assert (first.batch_size, first.num_indices, first.num_unique) == (65536, 887017990, 128435723)
    assert first.col_hist[0] == 0.473 and first.index_ratio[-1] == 0.019
    assert stats.reference_block(REFERENCE, 1).name == "fbgemm_t856_bs65536_0.pt"
    with pytest.raises(InputError, match="block 17 out of range"):
        stats.reference_block(REFERENCE, 17)


@pytest.mark.parametrize("text, line, message", [
    ("", None, "no locality-stats block"),
    ("name\nLocality stats after processing x batches\n", 2, "Locality stats after processing N"),
    ("name\nLocality stats after processing 1 batches of size 4\nAvg # of indices: many\n", 3,
     "bad number 'many'"),
    ("name\nLocality stats after processing 1 batches of size 4\nAvg # of indices: 1\n", 4,
     "unexpected end of file"),
])
def test_parse_malformed_stats(tmp_path, text, line, message):
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(InputError, match=message) as err:
        stats.parse_locality_stats(path)
    assert err.value.line == line and str(path) in str(err.value)


def test_quantiles_and_summary():
    q = stats.quantiles([1, 2, 3, 4, 5])
    assert (q["min"], q["p50"], q["max"], q["mean"]) == (1, 3, 5, 3)
    s = stats.table_summary([stats.table_locality(torch.tensor(t, dtype=torch.int64)).config(4) for t in TINY_TABLES])
    assert s["num_tables"] == 4 and s["tables_pooling_below_1"] == 1 and s["rows"]["max"] == 2001


def test_default_bins_are_the_published_2021_histogram():
    from neuroshard.types.tables import DEFAULT_BINS, NUM_BINS

    assert len(DEFAULT_BINS) == NUM_BINS
    assert list(DEFAULT_BINS) == stats.reference_block(REFERENCE, 0).col_hist
