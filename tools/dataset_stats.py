"""Aggregate locality statistics of a dataset dir, in the published stats layout.

    python tools/dataset_stats.py data/dlrm_synthetic
    python tools/dataset_stats.py data/dlrm_synthetic \
        --published reference/dlrm_datasets_2021_locality_stats.txt --json stats.json

Prints the number of indices, unique indices, mean lookups per unique index
and both 17-bin histograms ("Histogram of col sizes": share of distinct
indices by access count; "Ratio of index distribution": share of lookups by
the access count of the index they hit), computed from the lookups in
data.pt; then quantiles of rows and pooling factors; with --published, both
histograms next to a block of a published locality-stats file and their L1
distances.
"""

from __future__ import annotations

import argparse

from neuroshard.cli import run_main
from neuroshard.data.stats import (
    aggregate_locality,
    compare_to_reference,
    dataset_localities,
    format_comparison,
    format_locality_stats,
    format_table_summary,
    reference_block,
    table_summary,
)
from neuroshard.formats.dataset import read_dataset
from neuroshard.formats.io import write_json_atomic
from neuroshard.settings import parse_flags


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Print aggregate locality statistics of a dataset dir.",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("dataset_dir", help="dataset dir (table_configs.json + data.pt)")
    p.add_argument("--published", help="published locality-stats file to compare with "
                                       "(e.g. dlrm_datasets_2021_locality_stats.txt)")
    p.add_argument("--published_block", type=int, default=0,
                   help="which block of the published file (0 = first; in the 2021 file the "
                        "first block is the whole fbgemm_t856_bs65536.pt)")
    p.add_argument("--json", metavar="OUT", help="also write the statistics as JSON to OUT")
    p.add_argument("--progress", action="store_true", help="show a progress bar over tables")
    return parse_flags(p, argv, __file__)


def main(argv=None) -> None:
    args = parse_args(argv)
    ref = reference_block(args.published, args.published_block) if args.published else None
    ds = read_dataset(args.dataset_dir)
    stats = aggregate_locality(dataset_localities(ds.indices, progress=args.progress),
                               ds.batch_size, name=str(args.dataset_dir))
    summary = table_summary(ds.configs)
    print(format_locality_stats(stats))
    print()
    print(format_table_summary(summary))
    out = {"stats": stats.to_json(), "tables": summary}
    if ref is not None:
        print()
        print(format_comparison(stats, ref))
        out["reference"] = {**compare_to_reference(stats, ref), "path": args.published,
                            "block": args.published_block, "stats": ref.to_json()}
    if args.json:
        write_json_atomic(args.json, out)


if __name__ == "__main__":
    run_main(main)
