"""Dataset processing: per-table statistics, public layout, synthetic generator, locality stats."""

from pathlib import Path

import numpy as np
import pytest
import torch

from neuroshard import dataset as D
from neuroshard.formats import read_dataset, read_public_dlrm, write_dataset, write_public_dlrm
from neuroshard.types import InputError

# The published locality stats ship with the repository (reference/, MIT licensed).
REFERENCE = Path(__file__).resolve().parents[1] / "reference" / "dlrm_datasets_2021_locality_stats.txt"

# Tolerances of the default synthetic dataset (seed 0) against the first block of the 2021
# stats (the whole fbgemm_t856_bs65536.pt). Measured: col sizes 0.10, index ratio 0.19.
COL_HIST_L1_TOL = 0.15
INDEX_RATIO_L1_TOL = 0.25

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


def test_bin_edges():
    counts = np.array([1, 2, 3, 4, 5, 8, 9, 16, 17, 1024, 1025, 32768, 32769, 10**9])
    assert D.access_bins(counts).tolist() == [0, 1, 2, 2, 3, 3, 4, 4, 5, 10, 11, 15, 16, 16]
    assert len(D.BIN_LABELS) == 17 and D.BIN_LABELS[0] == "(0, 1]" and D.BIN_LABELS[-1] == "(32768+"


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_table_locality_dense_and_sparse(dtype):
    loc = D.table_locality(torch.tensor([4, 4, 4, 1], dtype=dtype))
    assert loc.num_lookups == 4 and loc.max_index == 4 and loc.num_distinct == 2
    assert loc.distinct.tolist()[:3] == [1, 0, 1] and loc.lookups.tolist()[:3] == [1, 0, 3]
    # a huge sparse index range takes the sort-based path; same answer
    big = 2**31 - 2 if dtype == torch.int32 else 10**12
    sparse = D.table_locality(torch.tensor([big, big, 7], dtype=dtype))
    assert sparse.row == big + 1 and sparse.distinct.tolist()[:2] == [1, 1]
    assert sparse.lookups.tolist()[:2] == [1, 2]


def test_empty_table_has_zero_bins():
    loc = D.table_locality(torch.zeros(0, dtype=torch.int64))
    cfg = loc.config(batch_size=8)
    assert cfg.row == 100 and cfg.pooling_factor == 0.0 and cfg.bins == (0.0,) * 17


# ---------------------------------------------------------------- public layout


@pytest.mark.parametrize("name", ["tiny.pt", "tiny.pt.gz"])
def test_process_public_file_by_hand(tmp_path, name):
    path = write_tiny_public(tmp_path / name)
    configs, locs, indices, offsets = D.process_public(*read_public_dlrm(path), path=str(path),
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
        D.process_public(indices, offsets, lengths, path="bad.pt", progress=False)


def test_aggregate_stats_by_hand():
    _, _, lengths = tiny_public()
    locs = [D.table_locality(torch.tensor(t, dtype=torch.int64)) for t in TINY_TABLES]
    st = D.aggregate_locality(locs, batch_size=4, name="tiny")
    n = 4 + 43 + 32770
    assert (st.num_indices, st.num_unique) == (n, 8)
    assert st.avg_col_size == pytest.approx(n / 8)
    assert st.col_hist == pytest.approx(_bins(b0=4 / 8, b1=2 / 8, b6=1 / 8, b16=1 / 8))
    assert st.index_ratio == pytest.approx(_bins(b0=4 / n, b1=4 / n, b6=40 / n, b16=32769 / n))


def test_locality_text_round_trip(tmp_path):
    locs = [D.table_locality(torch.tensor(t, dtype=torch.int64)) for t in TINY_TABLES]
    st = D.aggregate_locality(locs, batch_size=4, name="tiny")
    text = D.format_locality_stats(st)
    assert "Avg # of indices: 32817" in text and "(32768+: 0.125" in text
    path = tmp_path / "stats.txt"
    path.write_text(text + "\n\n" + text + "\n")
    blocks = D.parse_locality_stats(path)
    assert len(blocks) == 2 and blocks[0].batch_size == 4 and blocks[0].num_unique == 8
    assert blocks[0].col_hist == pytest.approx(st.col_hist, abs=5e-4)
    assert blocks[1].index_ratio == pytest.approx(st.index_ratio, abs=5e-4)


def test_parse_published_reference():
    blocks = D.parse_locality_stats(REFERENCE)
    first = blocks[0]
    assert len(blocks) == 17 and first.name == "fbgemm_t856_bs65536.pt"
    assert (first.batch_size, first.num_indices, first.num_unique) == (65536, 887017990, 128435723)
    assert first.col_hist[0] == 0.473 and first.index_ratio[-1] == 0.019
    assert D.reference_block(REFERENCE, 1).name == "fbgemm_t856_bs65536_0.pt"
    with pytest.raises(InputError, match="block 17 out of range"):
        D.reference_block(REFERENCE, 17)


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
        D.parse_locality_stats(path)
    assert err.value.line == line and str(path) in str(err.value)


# ---------------------------------------------------------------- synthetic generator


SMALL = dict(num_tables=12, batch_size=256, max_rows=50_000)


def test_synthetic_same_seed_same_files(tmp_path):
    for name, seed in (("a", 5), ("b", 5), ("c", 6)):
        configs, _, idx, off = D.generate_synthetic(D.SyntheticSpec(seed=seed, **SMALL), progress=False)
        write_dataset(tmp_path / name, configs, idx, off)
    for f in ("table_configs.json", "data.pt"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()
    assert (tmp_path / "a" / "data.pt").read_bytes() != (tmp_path / "c" / "data.pt").read_bytes()
    ds = read_dataset(tmp_path / "a")  # validates index ranges
    assert len(ds) == 12 and ds.batch_size == 256


def test_synthetic_parameters_cover_their_ranges():
    spec = D.SyntheticSpec(num_tables=20, seed=4)
    params = D.synthetic_params(spec)
    rows = [p.rows for p in params]
    assert 100 <= min(rows) < 1000 and spec.max_rows / 10 < max(rows) <= spec.max_rows
    # stratified: 27% of 20 tables = 5.4 -> 5 or 6 near-zero tables, never a run of luck
    assert sum(p.pooling < spec.zero_pf for p in params) in (5, 6)
    assert np.mean([p.pooling for p in params]) == pytest.approx(15.8)
    skews = [p.skew for p in params]
    assert min(skews) < spec.skew_lo + 0.05 and max(skews) > spec.skew_hi - 0.05


def test_default_synthetic_matches_published_locality():
    spec = D.SyntheticSpec()
    configs, locs, idx, off = D.generate_synthetic(spec, progress=False)
    rows = np.array([c.row for c in configs])
    pfs = np.array([c.pooling_factor for c in configs])
    assert rows.min() >= 100 and rows.max() <= spec.max_rows and rows.max() / rows.min() > 1000
    assert abs(pfs.mean() - 15.8) < 1.0 and pfs.max() > 50 and (pfs < 1).sum() >= 10
    assert all(i.dtype == torch.int32 for i in idx)
    st = D.aggregate_locality(locs, spec.batch_size)
    ref = D.reference_block(REFERENCE, 0)
    assert D.histogram_l1(st.col_hist, ref.col_hist) <= COL_HIST_L1_TOL
    assert D.histogram_l1(st.index_ratio, ref.index_ratio) <= INDEX_RATIO_L1_TOL


@pytest.mark.parametrize("kwargs, message", [
    (dict(num_tables=0), "--num_tables"), (dict(batch_size=0), "--batch_size"),
    (dict(max_rows=50), "--max_rows"), (dict(max_rows=2**31), "--max_rows")])
def test_synthetic_bad_spec(kwargs, message):
    from neuroshard.types import NeuroShardError

    with pytest.raises(NeuroShardError, match=message):
        D.generate_synthetic(D.SyntheticSpec(**kwargs), progress=False)


def test_quantiles_and_summary():
    q = D.quantiles([1, 2, 3, 4, 5])
    assert (q["min"], q["p50"], q["max"], q["mean"]) == (1, 3, 5, 3)
    s = D.table_summary([D.table_locality(torch.tensor(t, dtype=torch.int64)).config(4) for t in TINY_TABLES])
    assert s["num_tables"] == 4 and s["tables_pooling_below_1"] == 1 and s["rows"]["max"] == 2001
