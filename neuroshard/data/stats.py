"""Dataset statistics: per-table locality and the aggregate stats of the published `dlrm_datasets` files.

A dataset is a list of embedding tables, each with one batch of lookups
(`indices`, `offsets` of length B+1 starting at 0). From the lookups of a
table we derive its `TableConfig` (DESIGN.md §3):

* `row` = max(100, max index + 1);
* `pooling_factor` = mean lookups per sample;
* `bin_j` = fraction of the table's distinct indices whose access count falls
  in bin j: bin 0 = exactly once, bin j (1..15) = (2^(j-1), 2^j], bin 16 =
  more than 2^15. A table with no lookups has all bins 0;
* `row_lookups` = the share of the lookups in each of 64 equal ranges of
  the rows (ids cluster, so a row-wise block's lookups are not its
  share of the rows: `TableConfig.row_block`). None without lookups.

The aggregate statistics (`LocalityStats`) pool the raw per-table counts over
all tables, as in the published `dlrm_datasets_*_locality_stats.txt`:
"Histogram of col sizes" = share of all distinct indices per bin, "Ratio of
index distribution" = share of all lookups that hit indices of each bin.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import torch

from neuroshard.types.codec import Record
from neuroshard.types.errors import InputError
from neuroshard.types.tables import NUM_BINS, TableConfig

MIN_ROWS = 100
# equal ranges of a table's rows whose share of its lookups a config keeps (a block cut inside a range gets the part
# of its lookups its rows take, `TableConfig.lookup_share`); no more than MIN_ROWS, so a range holds a row or more
ROW_RANGES = 64
ROW_SHARE_DIGITS = 5  # their shares as written (64 of them rounded sum to 1 within 3.2e-4)
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
    `max_index` is -1 for a table without lookups. `row_lookups`: the share of
    the lookups in each of `ROW_RANGES` equal ranges of the rows
    (`TableConfig.row_lookups`; empty without lookups).
    """

    num_lookups: int
    max_index: int
    distinct: np.ndarray
    lookups: np.ndarray
    row_lookups: np.ndarray = field(default_factory=lambda: np.zeros(0))
    rows: int = 0  # the table's rows where known beyond its ids (a generator's drawn count), else 0

    @property
    def num_distinct(self) -> int:
        return int(self.distinct.sum())

    @property
    def row(self) -> int:
        return table_rows(self.max_index, self.rows)

    def config(self, batch_size: int) -> TableConfig:
        """The table's `TableConfig` for a batch of `batch_size` samples."""
        n = self.num_distinct
        bins = tuple(float(x) / n for x in self.distinct) if n else (0.0,) * NUM_BINS
        pf = self.num_lookups / batch_size if batch_size else 0.0
        shares = tuple(round(float(x), ROW_SHARE_DIGITS) for x in self.row_lookups) if self.num_lookups else None
        return TableConfig(self.row, float(pf), bins, row_lookups=shares)


def table_rows(max_index: int, rows: int = 0) -> int:
    """A table's rows: as many as its ids reach or `rows` where more are known, at least `MIN_ROWS`."""
    return max(MIN_ROWS, max_index + 1, rows)


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


def table_locality(indices: torch.Tensor, rows: int = 0) -> TableLocality:
    """Raw locality counts of one table's lookups (a 1-D int32/int64 tensor, values >= 0); `rows`: the table's
    rows where more are known than its ids reach (a table does not shrink because its last rows were not
    looked up in one batch)."""
    indices = torch.as_tensor(indices)
    counts = access_counts(indices)
    bins = access_bins(counts)
    distinct = np.bincount(bins, minlength=NUM_BINS).astype(np.int64)
    # float64 weights are exact for sums below 2**53 lookups
    lookups = np.rint(np.bincount(bins, weights=counts, minlength=NUM_BINS)).astype(np.int64)
    max_index = int(indices.max()) if indices.numel() else -1
    shares = np.zeros(0)
    if indices.numel():
        row = table_rows(max_index, rows)
        shares = np.bincount((indices.to(torch.int64) * ROW_RANGES // row).numpy(),
                             minlength=ROW_RANGES) / indices.numel()
    return TableLocality(int(indices.numel()), max_index, distinct, lookups, shares, rows)


# --------------------------------------------------------------------------- aggregate stats


@dataclass
class LocalityStats(Record):
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
        if cast is float and not (math.isfinite(out) and out >= 0):
            raise InputError(path, f"expected a finite number >= 0 after '{prefix}', got {value!r}", i + 1)
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
