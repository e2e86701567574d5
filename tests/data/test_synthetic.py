"""The synthetic dataset generator: determinism, parameter ranges, closeness to the published stats."""

import numpy as np
import pytest
import torch

from neuroshard.data import stats
from neuroshard.data.synthetic import (
    SyntheticSpec,
    generate_synthetic,
    synthetic_params,
)
from neuroshard.formats.dataset import read_dataset, write_dataset
from tests.data.test_stats import REFERENCE

# Tolerances of the default synthetic dataset (seed 0) against the first block of the 2021
# stats (the whole fbgemm_t856_bs65536.pt). Measured: col sizes 0.10, index ratio 0.19.
COL_HIST_L1_TOL = 0.15
INDEX_RATIO_L1_TOL = 0.25


# ---------------------------------------------------------------- synthetic generator


SMALL = dict(num_tables=12, batch_size=256, max_rows=50_000)


def test_synthetic_same_seed_same_files(tmp_path):
    for name, seed in (("a", 5), ("b", 5), ("c", 6)):
        configs, _, idx, off = generate_synthetic(SyntheticSpec(seed=seed, **SMALL), progress=False)
        write_dataset(tmp_path / name, configs, idx, off)
    for f in ("table_configs.json", "data.pt"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()
    assert (tmp_path / "a" / "data.pt").read_bytes() != (tmp_path / "c" / "data.pt").read_bytes()
    ds = read_dataset(tmp_path / "a")  # validates index ranges
    assert len(ds) == 12 and ds.batch_size == 256


def test_synthetic_parameters_cover_their_ranges():
    spec = SyntheticSpec(num_tables=20, seed=4)
    params = synthetic_params(spec)
    rows = [p.rows for p in params]
    assert 100 <= min(rows) < 1000 and spec.max_rows / 10 < max(rows) <= spec.max_rows
    # stratified: 27% of 20 tables = 5.4 -> 5 or 6 near-zero tables, never a run of luck
    assert sum(p.pooling < spec.zero_pf for p in params) in (5, 6)
    assert np.mean([p.pooling for p in params]) == pytest.approx(15.8)
    skews = [p.skew for p in params]
    assert min(skews) < spec.skew_lo + 0.05 and max(skews) > spec.skew_hi - 0.05


def test_default_synthetic_matches_published_locality():
    spec = SyntheticSpec()
    configs, locs, idx, off = generate_synthetic(spec, progress=False)
    rows = np.array([c.row for c in configs])
    pfs = np.array([c.pooling_factor for c in configs])
    assert rows.min() >= 100 and rows.max() <= spec.max_rows and rows.max() / rows.min() > 1000
    assert abs(pfs.mean() - 15.8) < 1.0 and pfs.max() > 50 and (pfs < 1).sum() >= 10
    assert all(i.dtype == torch.int32 for i in idx)
    st = stats.aggregate_locality(locs, spec.batch_size)
    ref = stats.reference_block(REFERENCE, 0)
    assert stats.histogram_l1(st.col_hist, ref.col_hist) <= COL_HIST_L1_TOL
    assert stats.histogram_l1(st.index_ratio, ref.index_ratio) <= INDEX_RATIO_L1_TOL


@pytest.mark.parametrize("kwargs, message", [
    (dict(num_tables=0), "--num_tables"), (dict(batch_size=0), "--batch_size"),
    (dict(max_rows=50), "--max_rows"), (dict(max_rows=2**31), "--max_rows"),
    (dict(large_rows=500_000), "--large_rows"), (dict(hot_tables=-1), "--hot_tables"),
    (dict(hot_pooling=0.0), "--hot_pooling")])
def test_synthetic_bad_spec(kwargs, message):
    from neuroshard.types.errors import NeuroShardError

    with pytest.raises(NeuroShardError, match=message):
        generate_synthetic(SyntheticSpec(**kwargs), progress=False)


def test_extra_tables_follow_the_regular_ones_unchanged():
    base = SyntheticSpec(num_tables=20, seed=4)
    spec = SyntheticSpec(num_tables=20, seed=4, large_tables=3, large_rows=3_000_000, hot_tables=2, hot_rows=5000,
                         hot_pooling=120.0)
    params, extra = synthetic_params(base), synthetic_params(spec)
    assert extra[:20] == params and len(extra) == 25 == spec.total_tables
    assert all(base.max_rows <= p.rows <= 3_000_000 for p in extra[20:23])
    assert all(100 <= p.rows <= 5000 and 60.0 <= p.pooling <= 120.0 for p in extra[23:])


def test_hot_tables_are_looked_up_as_drawn():
    spec = SyntheticSpec(num_tables=10, batch_size=512, max_rows=20_000, large_tables=1, large_rows=40_000,
                         hot_tables=2, hot_rows=300, hot_pooling=200.0)
    configs, _, idx, _ = generate_synthetic(spec, progress=False)
    params = synthetic_params(spec)
    assert len(configs) == 13
    for c, p, i in zip(configs[10:], params[10:], idx[10:]):
        assert c.row == p.rows and int(i.max()) < p.rows
    # Poisson lengths around the drawn factor: within 15% at 512 samples of >= 100 lookups each
    assert all(abs(c.pooling_factor / p.pooling - 1) < 0.15 for c, p in zip(configs[11:], params[11:]))
