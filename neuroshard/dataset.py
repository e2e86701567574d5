"""DLRM datasets: per-table statistics, public-file processing, a synthetic generator,
and the aggregate locality statistics of the published `dlrm_datasets` stats files.

A dataset is a list of embedding tables, each with one batch of lookups
(`indices`, `offsets` of length B+1 starting at 0). From the lookups of a
table we derive its `TableConfig` (DESIGN.md §3):

* `row` = max(100, max index + 1);
* `pooling_factor` = mean lookups per sample;
* `bin_j` = fraction of the table's distinct indices whose access count falls
  in bin j: bin 0 = exactly once, bin j (1..15) = (2^(j-1), 2^j], bin 16 =
  more than 2^15. A table with no lookups has all bins 0.

The aggregate statistics (`LocalityStats`) pool the raw per-table counts over
all tables, as in the published `dlrm_datasets_*_locality_stats.txt`:
"Histogram of col sizes" = share of all distinct indices per bin, "Ratio of
index distribution" = share of all lookups that hit indices of each bin.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import NormalDist
from typing import Iterable, Sequence

import numpy as np
import torch

from neuroshard.types import NUM_BINS, InputError, TableConfig

MIN_ROWS = 100
# Upper edges of bins 0..15 (bin 16 is open): count c falls in the first bin whose edge >= c.
BIN_EDGES = np.array([2**j for j in range(NUM_BINS - 1)], dtype=np.int64)
BIN_LABELS = ["(0, 1]"] + [f"({2**(j - 1)}, {2**j}]" for j in range(1, NUM_BINS - 1)] + [
    f"({2**(NUM_BINS - 2)}+"]
INT32_MAX = 2**31 - 1


# --------------------------------------------------------------------------- per table


@dataclass(frozen=True)
class TableLocality:
    """Raw access counts of one table's lookups.

    `distinct[j]`: number of distinct indices whose access count is in bin j;
    `lookups[j]`: number of lookups that hit those indices (sum of their counts).
    `max_index` is -1 for a table without lookups.
    """

    num_lookups: int
    max_index: int
    distinct: np.ndarray
    lookups: np.ndarray

    @property
    def num_distinct(self) -> int:
        return int(self.distinct.sum())

    @property
    def row(self) -> int:
        return max(MIN_ROWS, self.max_index + 1)

    def config(self, batch_size: int) -> TableConfig:
        """The table's `TableConfig` for a batch of `batch_size` samples."""
        n = self.num_distinct
        bins = tuple(float(x) / n for x in self.distinct) if n else (0.0,) * NUM_BINS
        pf = self.num_lookups / batch_size if batch_size else 0.0
        return TableConfig(self.row, float(pf), bins)


def access_bins(counts: np.ndarray) -> np.ndarray:
    """Bin (0..16) of each access count (counts >= 1)."""
    return np.searchsorted(BIN_EDGES, counts, side="left")


def access_counts(indices: torch.Tensor) -> np.ndarray:
    """Access count of every distinct index of a 1-D integer tensor (order unspecified).

    Uses a bincount when the index range is dense enough (fast, one int64
    array of max+1 entries), else a sort-based unique. Indices must be >= 0.
    """
    n = indices.numel()
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    hi = int(indices.max())
    if hi + 1 <= 8 * n + 2**20:
        counts = torch.bincount(indices)
        counts = counts[counts > 0]
    else:
        counts = torch.unique(indices, return_counts=True)[1]
    return counts.numpy().astype(np.int64, copy=False)


def table_locality(indices: torch.Tensor) -> TableLocality:
    """Raw locality counts of one table's lookups (a 1-D int32/int64 tensor, values >= 0)."""
    indices = torch.as_tensor(indices)
    counts = access_counts(indices)
    bins = access_bins(counts)
    distinct = np.bincount(bins, minlength=NUM_BINS).astype(np.int64)
    # float64 weights are exact for sums below 2**53 lookups
    lookups = np.rint(np.bincount(bins, weights=counts, minlength=NUM_BINS)).astype(np.int64)
    max_index = int(indices.max()) if indices.numel() else -1
    return TableLocality(int(indices.numel()), max_index, distinct, lookups)


def compact(t: torch.Tensor, limit: int) -> torch.Tensor:
    """A fresh, contiguous copy of `t`, int32 when every value is <= `limit` < 2**31.

    Copies so that saving one table never drags the storage of a larger
    tensor it was sliced from; int32 halves the memory of the lookups.
    """
    if limit <= INT32_MAX:
        return t.to(torch.int32, copy=True).contiguous()
    return t.to(torch.int64, copy=True).contiguous()


# --------------------------------------------------------------------------- public file


def process_public(indices: torch.Tensor, offsets: torch.Tensor, lengths: torch.Tensor,
                   path: str = "<public file>", progress: bool = True):
    """Split the public layout into per-table lookups and compute each table's stats.

    `indices`: flat lookups of all tables one after another; `offsets`:
    length T*B+1; `lengths`: [T, B] (as returned by `formats.read_public_dlrm`,
    memory-mapped). Works table by table on slice views, so the only large
    extra memory is the compact (int32 where possible) copy of the lookups
    that goes into `data.pt`.
    Returns (configs, localities, per-table indices, per-table offsets from 0).
    """
    from tqdm import tqdm

    from neuroshard.formats import check_public_table

    num_tables, batch = lengths.shape
    configs, localities, out_idx, out_off = [], [], [], []
    for t in tqdm(range(num_tables), desc="tables", unit="table", disable=not progress):
        idx, off = check_public_table(path, t, indices, offsets, lengths)
        loc = table_locality(idx)
        configs.append(loc.config(batch))
        localities.append(loc)
        out_idx.append(compact(idx, loc.max_index))
        out_off.append(compact(off, idx.numel()))
        del idx, off
    return configs, localities, out_idx, out_off


# --------------------------------------------------------------------------- synthetic


@dataclass(frozen=True)
class SyntheticSpec:
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

    def validate(self) -> None:
        from neuroshard.types import NeuroShardError

        if self.num_tables < 1:
            raise NeuroShardError(f"--num_tables must be >= 1, got {self.num_tables}")
        if self.batch_size < 1:
            raise NeuroShardError(f"--batch_size must be >= 1, got {self.batch_size}")
        if not MIN_ROWS <= self.max_rows <= INT32_MAX:
            raise NeuroShardError(f"--max_rows must be in [{MIN_ROWS}, {INT32_MAX}], "
                                  f"got {self.max_rows}")
        if not self.mean_pooling > 0:
            raise NeuroShardError(f"mean pooling must be > 0, got {self.mean_pooling}")

    def to_json(self) -> dict:
        return asdict(self)


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
    reuse = np.exp(math.log(spec.reuse_lo) + u_reuse * math.log(spec.reuse_hi / spec.reuse_lo))
    skew = spec.skew_lo + (spec.skew_hi - spec.skew_lo) * u_skew
    return [SyntheticTable(int(r), float(p), float(s), float(m))
            for r, p, s, m in zip(rows, pfs, skew, reuse)]


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
    for t in tqdm(range(spec.num_tables), desc="tables", unit="table", disable=not progress):
        idx, off = synthetic_table(spec, t, params[t])
        loc = table_locality(idx)
        cfg = loc.config(spec.batch_size)
        # keep the drawn row count: a table does not shrink because its last
        # rows were not looked up in this one batch
        configs.append(TableConfig(max(cfg.row, params[t].rows), cfg.pooling_factor, cfg.bins))
        localities.append(loc)
        out_idx.append(idx)
        out_off.append(off)
    return configs, localities, out_idx, out_off


# --------------------------------------------------------------------------- aggregate stats


@dataclass
class LocalityStats:
    """Aggregate locality statistics in the layout of the published stats files.

    `col_hist[j]`: share of all distinct indices (over all tables) in bin j;
    `index_ratio[j]`: share of all lookups hitting indices in bin j.
    """

    name: str
    num_batches: int
    batch_size: int
    num_indices: int
    num_unique: int
    avg_col_size: float
    col_hist: list[float]
    index_ratio: list[float]

    def to_json(self) -> dict:
        return asdict(self)


def aggregate_locality(localities: Iterable[TableLocality], batch_size: int,
                       name: str = "dataset") -> LocalityStats:
    """Pool raw per-table counts into the published aggregate statistics."""
    distinct = np.zeros(NUM_BINS, dtype=np.int64)
    lookups = np.zeros(NUM_BINS, dtype=np.int64)
    n_idx = 0
    for loc in localities:
        distinct += loc.distinct
        lookups += loc.lookups
        n_idx += loc.num_lookups
    n_uniq = int(distinct.sum())
    col_hist = (distinct / n_uniq).tolist() if n_uniq else [0.0] * NUM_BINS
    ratio = (lookups / n_idx).tolist() if n_idx else [0.0] * NUM_BINS
    return LocalityStats(name, 1, batch_size, n_idx, n_uniq,
                         n_idx / n_uniq if n_uniq else 0.0, col_hist, ratio)


def format_locality_stats(stats: LocalityStats) -> str:
    """Text in the layout of the published `dlrm_datasets_*_locality_stats.txt` blocks."""
    edges = [0] + [2**j for j in range(NUM_BINS - 1)]
    lines = [stats.name,
             f"Locality stats after processing {stats.num_batches} batches of size {stats.batch_size}",
             f"Avg # of indices: {stats.num_indices}",
             f"Avg # of unique cols: {stats.num_unique}",
             f"Avg col size: {stats.avg_col_size:.1f}"]
    for title, hist in (("Histogram of col sizes:", stats.col_hist),
                        ("Ratio of index distribution at different column sizes:", stats.index_ratio)):
        lines.append(title)
        lines += [f"{label}: {v:.3f}" for label, v in zip(BIN_LABELS, hist)]
        lines.append(str(edges))
        cum = np.concatenate([[0.0], np.cumsum(hist)])
        lines.append(str([f"{c:.3f}" for c in cum]))
    return "\n".join(lines)


def histogram_l1(a: Sequence[float], b: Sequence[float]) -> float:
    """L1 distance between two 17-bin histograms."""
    return float(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)).sum())


_BATCH_RE = re.compile(r"Locality stats after processing (\d+) batches of size (\d+)$")


def parse_locality_stats(path) -> list[LocalityStats]:
    """Read all blocks of a published locality-stats file (first block first).

    Raises InputError naming the file, line and value on a malformed block.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise InputError(path, "not a text file") from None
    lines = text.splitlines()
    blocks: list[LocalityStats] = []
    i = 0

    def expect(prefix: str, cast):
        nonlocal i
        if i >= len(lines):
            raise InputError(path, f"unexpected end of file, expected '{prefix}'", i + 1)
        line = lines[i].strip()
        if not line.startswith(prefix):
            raise InputError(path, f"expected '{prefix}...', got {line!r}", i + 1)
        value = line[len(prefix):].strip()
        try:
            out = cast(value) if cast else value
        except ValueError:
            raise InputError(path, f"bad number {value!r} after '{prefix}'", i + 1) from None
        i += 1
        return out

    def histogram() -> list[float]:
        hist = [expect(f"{label}:", float) for label in BIN_LABELS]
        expect("[", None)   # bin edges
        expect("[", None)   # cumulative shares
        return hist

    while i < len(lines):
        if not lines[i].strip():
            i += 1
            continue
        name = lines[i].strip()
        i += 1
        m = _BATCH_RE.match(lines[i].strip()) if i < len(lines) else None
        if not m:
            got = repr(lines[i].strip()) if i < len(lines) else "end of file"
            raise InputError(path, "expected 'Locality stats after processing N batches of size B', "
                                   f"got {got}", i + 1)
        i += 1
        n_idx = expect("Avg # of indices:", float)
        n_uniq = expect("Avg # of unique cols:", float)
        avg = expect("Avg col size:", float)
        expect("Histogram of col sizes:", None)
        col = histogram()
        expect("Ratio of index distribution", None)
        ratio = histogram()
        blocks.append(LocalityStats(name, int(m.group(1)), int(m.group(2)), int(n_idx),
                                    int(n_uniq), avg, col, ratio))
    if not blocks:
        raise InputError(path, "no locality-stats block found")
    return blocks


def reference_block(path, block: int = 0) -> LocalityStats:
    """Block `block` (0 = first) of a published locality-stats file."""
    blocks = parse_locality_stats(path)
    if not 0 <= block < len(blocks):
        raise InputError(path, f"block {block} out of range: the file has {len(blocks)} blocks")
    return blocks[block]


def quantiles(values: Sequence[float], qs=(0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)) -> dict:
    """Named quantiles (min, p10, ..., max) plus mean of a list of numbers."""
    arr = np.asarray(values, dtype=np.float64)
    names = {0.0: "min", 1.0: "max"}
    out = {names.get(q, f"p{round(q * 100)}"): (float(np.quantile(arr, q)) if arr.size else 0.0)
           for q in qs}
    out["mean"] = float(arr.mean()) if arr.size else 0.0
    return out


def dataset_localities(indices: Sequence[torch.Tensor], progress: bool = False) -> list[TableLocality]:
    """Raw locality counts of every table of a dataset (from its lookups)."""
    from tqdm import tqdm

    return [table_locality(idx) for idx in tqdm(indices, desc="tables", unit="table",
                                                disable=not progress)]


def table_summary(configs: Sequence[TableConfig]) -> dict:
    """Quantiles of rows and pooling factors over the tables of a dataset."""
    pfs = [c.pooling_factor for c in configs]
    return {"num_tables": len(configs),
            "rows": quantiles([c.row for c in configs]),
            "pooling_factor": quantiles(pfs),
            "tables_pooling_below_1": int(sum(pf < 1 for pf in pfs))}


def format_table_summary(summary: dict) -> str:
    def row(name, q, fmt):
        return f"{name:<16}" + "  ".join(f"{k} {fmt(v)}" for k, v in q.items())

    return "\n".join([
        f"Tables: {summary['num_tables']}",
        row("rows:", summary["rows"], lambda v: f"{v:.4g}"),
        row("pooling factor:", summary["pooling_factor"], lambda v: f"{v:.3g}"),
        f"tables with pooling factor < 1: {summary['tables_pooling_below_1']}"])


def compare_to_reference(stats: LocalityStats, ref: LocalityStats) -> dict:
    """L1 distances of both histograms to a reference block."""
    return {"reference": ref.name, "reference_batch_size": ref.batch_size,
            "col_hist_l1": histogram_l1(stats.col_hist, ref.col_hist),
            "index_ratio_l1": histogram_l1(stats.index_ratio, ref.index_ratio)}


def format_comparison(stats: LocalityStats, ref: LocalityStats) -> str:
    """Both histograms next to the reference's, with their L1 distances."""
    cmp = compare_to_reference(stats, ref)
    lines = [f"Reference: {ref.name} (batch size {ref.batch_size}); "
             f"avg col size {stats.avg_col_size:.1f} vs {ref.avg_col_size:.1f}",
             f"{'bin':<16}{'col sizes':>18}{'index ratio':>22}",
             f"{'':<16}{'ours':>9}{'ref':>9}{'ours':>13}{'ref':>9}"]
    for j, label in enumerate(BIN_LABELS):
        lines.append(f"{label:<16}{stats.col_hist[j]:>9.3f}{ref.col_hist[j]:>9.3f}"
                     f"{stats.index_ratio[j]:>13.3f}{ref.index_ratio[j]:>9.3f}")
    lines.append(f"{'L1 distance':<16}{cmp['col_hist_l1']:>18.3f}{cmp['index_ratio_l1']:>22.3f}")
    return "\n".join(lines)
