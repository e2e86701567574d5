"""A synthetic DLRM-like dataset whose aggregate locality is close to the published 2021 stats."""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import torch

from neuroshard.checks import check_float, check_int
from neuroshard.data.stats import INT32_MAX, MIN_ROWS, table_locality
from neuroshard.types.codec import Record


@dataclass(frozen=True)
class SyntheticSpec(Record):
    """Parameters of the synthetic DLRM-like dataset.

    Per table (each parameter from its own stratified uniform draw u, one
    draw per 1/num_tables stratum in random order, so a dataset of 100-odd
    tables always covers the whole range; all seeded by `seed`):

    * rows: log(rows) = log(100) + (log(max_rows) - log(100)) * u**`rows_power`
      (log-uniform for rows_power = 1; below 1 leans to larger tables);
    * pooling factor: a share `p_zero` of the tables is near zero (u *
      `zero_pf` lookups per sample); the rest log-normal with sigma
      `pf_sigma`, capped at `max_pooling`, then rescaled so that the mean
      over all tables is `mean_pooling` (15.8, the public 2021 set's mean);
    * per-sample lengths: Poisson with a Gamma(`length_shape`)-distributed
      rate (over-dispersed like real multi-hot features);
    * accessed rows: Zipf with exponent s = `skew_lo` + u * (`skew_hi` -
      `skew_lo`) over an "active" subset of the rows, scattered at random over
      the table. The active subset holds N / m rows (N = the table's lookups;
      m = log-uniform in [`reuse_lo`, `reuse_hi`] times (pooling /
      mean_pooling)**`reuse_pf_power`; at most all rows): as in hashed
      production tables most rows are cold within one batch, so a table's
      locality does not follow from its size, and busier features reuse
      their rows more.

    After them, two kinds of extra tables for plans beyond table-wise and
    column-wise (none by default, so the default dataset is unchanged; each
    kind from its own seeded stream, so the regular tables do not change
    either):

    * `large_tables` large tables, rows log-uniform in [`max_rows`,
      `large_rows`] (at dim 128 larger than one device of the quick preset),
      pooling log-uniform in [1, `mean_pooling`];
    * `hot_tables` small hot tables, rows log-uniform in [100, `hot_rows`],
      pooling uniform in [`hot_pooling` / 2, `hot_pooling`];

    their skew and reuse drawn as a regular table's.

    The defaults were tuned (a small evolution search over these knobs,
    averaged over seeds 0 and 1) so that the aggregate histograms come close
    to the first block of the published 2021 stats; tests/test_dataset.py
    states the tolerance for the default dataset.
    """

    num_tables: int = 150
    batch_size: int = 4096
    max_rows: int = 1_000_000
    seed: int = 0
    mean_pooling: float = 15.8
    p_zero: float = 0.27
    zero_pf: float = 1.0
    pf_sigma: float = 1.25
    max_pooling: float = 375.0
    length_shape: float = 1.0
    skew_lo: float = 0.35
    skew_hi: float = 1.2
    reuse_lo: float = 0.2
    reuse_hi: float = 9.4
    reuse_pf_power: float = 0.75
    rows_power: float = 0.62
    large_tables: int = 0
    large_rows: int = 4_000_000
    hot_tables: int = 0
    hot_rows: int = 10_000
    hot_pooling: float = 150.0

    @property
    def total_tables(self) -> int:
        """The regular tables and the extra ones."""
        return self.num_tables + self.large_tables + self.hot_tables

    def validate(self) -> None:
        check_int("--num_tables", self.num_tables, 1)
        check_int("--batch_size", self.batch_size, 1)
        check_int("--max_rows", self.max_rows, MIN_ROWS, INT32_MAX)
        check_int("--seed", self.seed)
        check_float("mean_pooling", self.mean_pooling, 0.0, lo_open=True)
        check_int("--large_tables", self.large_tables, 0)
        check_int("--large_rows", self.large_rows, self.max_rows, INT32_MAX)
        check_int("--hot_tables", self.hot_tables, 0)
        check_int("--hot_rows", self.hot_rows, MIN_ROWS, INT32_MAX)
        check_float("--hot_pooling", self.hot_pooling, 0.0, lo_open=True)



@dataclass(frozen=True)
class SyntheticTable:
    """Drawn parameters of one synthetic table."""

    rows: int
    pooling: float
    skew: float
    reuse: float


def _stratified(rng: np.random.Generator, n: int) -> np.ndarray:
    """n uniforms in (0, 1), one in each of the n equal strata, in random order.

    With 100-odd tables a few heavy-tailed draws would dominate the aggregate
    statistics; one draw per stratum keeps every dataset close to the target
    shape while the tables stay random.
    """
    return (rng.permutation(n) + rng.random(n)) / n


def synthetic_params(spec: SyntheticSpec) -> list[SyntheticTable]:
    """Per-table parameters of the synthetic dataset (see SyntheticSpec)."""
    n = spec.num_tables
    rng = np.random.default_rng(np.random.SeedSequence(spec.seed, spawn_key=(0,)))
    u_rows, u_pf, u_zero, u_skew, u_reuse = (_stratified(rng, n) for _ in range(5))
    lo, hi = math.log(MIN_ROWS), math.log(spec.max_rows)
    rows = np.rint(np.exp(lo + (hi - lo) * u_rows ** spec.rows_power)).astype(np.int64)
    zero = u_zero < spec.p_zero
    normal = NormalDist(0.0, spec.pf_sigma)
    pfs = np.where(zero, u_pf * spec.zero_pf,
                   np.minimum(spec.max_pooling, np.exp([normal.inv_cdf(u) for u in u_pf])))
    # Rescale the non-zero factors so the mean over all tables is mean_pooling.
    if (~zero).any():
        need = spec.mean_pooling * n - pfs[zero].sum()
        if need > 0:
            pfs[~zero] *= need / pfs[~zero].sum()
    reuse, skew = _reuses(spec, u_reuse), _skews(spec, u_skew)
    tables = [SyntheticTable(int(r), float(p), float(s), float(m)) for r, p, s, m in zip(rows, pfs, skew, reuse)]
    return tables + _extra_tables(spec, 1, spec.large_tables, (spec.max_rows, spec.large_rows),
                                  lambda u: math.exp(u * math.log(max(spec.mean_pooling, 1.0)))) \
        + _extra_tables(spec, 2, spec.hot_tables, (MIN_ROWS, spec.hot_rows),
                        lambda u: spec.hot_pooling * (0.5 + 0.5 * u))


def _extra_tables(spec: SyntheticSpec, stream: int, n: int, rows: tuple[int, int], pooling) -> list[SyntheticTable]:
    """`n` extra tables from their own seeded stream: rows log-uniform in `rows`, pooling `pooling(u)` of a
    stratified uniform u, skew and reuse as a regular table's."""
    if not n:
        return []
    rng = np.random.default_rng(np.random.SeedSequence(spec.seed, spawn_key=(2, stream)))
    u_rows, u_pf, u_skew, u_reuse = (_stratified(rng, n) for _ in range(4))
    lo, hi = math.log(rows[0]), math.log(rows[1])
    return [SyntheticTable(round(math.exp(lo + (hi - lo) * ur)), float(pooling(up)), float(s), float(m))
            for ur, up, s, m in zip(u_rows, u_pf, _skews(spec, u_skew), _reuses(spec, u_reuse))]


def _skews(spec: SyntheticSpec, u: np.ndarray) -> np.ndarray:
    """Zipf exponents of uniforms `u`: uniform in [skew_lo, skew_hi]."""
    return spec.skew_lo + (spec.skew_hi - spec.skew_lo) * u


def _reuses(spec: SyntheticSpec, u: np.ndarray) -> np.ndarray:
    """Row reuse of uniforms `u`: log-uniform in [reuse_lo, reuse_hi]."""
    return np.exp(math.log(spec.reuse_lo) + u * math.log(spec.reuse_hi / spec.reuse_lo))


def synthetic_table(spec: SyntheticSpec, t: int, p: SyntheticTable):
    """Lookups (indices int32, offsets of length B+1) of synthetic table t."""
    rng = np.random.default_rng(np.random.SeedSequence(spec.seed, spawn_key=(1, t)))
    rate = rng.gamma(spec.length_shape, p.pooling / spec.length_shape, size=spec.batch_size)
    lengths = rng.poisson(rate)
    offsets = np.zeros(spec.batch_size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    n = int(offsets[-1])
    reuse = p.reuse * (max(p.pooling, 1e-3) / spec.mean_pooling) ** spec.reuse_pf_power
    active = int(min(p.rows, max(1, round(n / reuse))))
    w = np.arange(1, active + 1, dtype=np.float64) ** -p.skew
    cdf = np.cumsum(w)
    cdf /= cdf[-1]
    ranks = np.searchsorted(cdf, rng.random(n), side="right")
    np.minimum(ranks, active - 1, out=ranks)  # guard against cdf[-1] rounding
    # the active rows, hottest first, scattered over the whole table
    rows = rng.permutation(p.rows)[:active] if active * 4 > p.rows else \
        rng.choice(p.rows, size=active, replace=False)
    indices = rows[ranks]
    return (torch.from_numpy(indices.astype(np.int32)),
            torch.from_numpy(offsets.astype(np.int32 if n <= INT32_MAX else np.int64)))


def generate_synthetic(spec: SyntheticSpec, progress: bool = True):
    """Build the synthetic dataset: (configs, localities, indices, offsets)."""
    from tqdm import tqdm

    spec.validate()
    params = synthetic_params(spec)
    configs, localities, out_idx, out_off = [], [], [], []
    for t in tqdm(range(spec.total_tables), desc="tables", unit="table", disable=not progress):
        idx, off = synthetic_table(spec, t, params[t])
        # the drawn row count stays: a table does not shrink because its last rows were not looked up in this
        # one batch
        loc = table_locality(idx, params[t].rows)
        configs.append(loc.config(spec.batch_size))
        localities.append(loc)
        out_idx.append(idx)
        out_off.append(off)
    return configs, localities, out_idx, out_off


