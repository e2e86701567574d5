"""Build a dataset dir (`table_configs.json` + `data.pt`, DESIGN.md §3).

From the public DLRM dataset file (https://github.com/facebookresearch/dlrm_datasets):

    python gen_dlrm_data.py --data /path/to/fbgemm_t856_bs65536.pt.gz --out_dir data/dlrm_datasets

Synthetic DLRM-like tables, no download (the default `make demo` uses):

    python gen_dlrm_data.py --synthetic --out_dir data/dlrm_synthetic
    python gen_dlrm_data.py --synthetic --num_tables 300 --batch_size 8192 --seed 1 --out_dir data/big

With tables larger than a device and small hot ones besides (the tasks of plans beyond table-wise and
column-wise, `gen_tasks.py --oversize`):

    python gen_dlrm_data.py --synthetic --num_tables 100 --large_tables 8 --hot_tables 8 --out_dir data/spread

Check the result against the published locality statistics:

    python tools/dataset_stats.py data/dlrm_synthetic \
        --published reference/dlrm_datasets_2021_locality_stats.txt
"""

from __future__ import annotations

import argparse
import os
import time

from neuroshard.cli import add_progress_arg, run_main
from neuroshard.data.public import process_public
from neuroshard.data.synthetic import SyntheticSpec, generate_synthetic
from neuroshard.formats.dataset import read_public_dlrm, write_dataset
from neuroshard.formats.io import write_json_atomic
from neuroshard.settings import add_flag, parse_flags
from neuroshard.types.errors import NeuroShardError

_D = SyntheticSpec()


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Process the public DLRM dataset file, or generate a synthetic one, "
                    "into a dataset dir (table_configs.json + data.pt).")
    src = p.add_mutually_exclusive_group(required=True)
    add_flag(src, "data", help="public DLRM dataset file (.pt or .pt.gz); processed table by table (the full "
                               "856-table file needs ~4 GB RAM besides the memory-mapped file, and ~8 GB free in "
                               "$TMPDIR for a .gz)")
    src.add_argument("--synthetic", action="store_true",
                     help="generate DLRM-like tables instead: rows spread on a log scale over "
                          "[100, max_rows], heavy-tailed pooling factors (mean 15.8, some ~0), Zipf access with "
                          "varying skew; aggregate locality close to the published 2021 stats. "
                          "Defaults: ~9.7 M lookups, a 41 MB data.pt, ~2 s")
    add_flag(p, "out_dir", "data/dlrm_datasets", help="output dataset dir", aliases=("--out-dir",))
    g = p.add_argument_group("synthetic dataset (with --synthetic)")
    add_flag(g, "num_tables", _D.num_tables)
    add_flag(g, "batch_size", _D.batch_size, help="samples per table (the batch every benchmark uses)")
    g.add_argument("--max_rows", type=int, default=_D.max_rows, help="row cap per table (default: %(default)s)")
    add_flag(g, "seed", _D.seed)
    g.add_argument("--large_tables", type=int, default=_D.large_tables,
                   help="extra large tables, rows log-uniform in [max_rows, large_rows] (default: %(default)s)")
    g.add_argument("--large_rows", type=int, default=_D.large_rows, help="rows of the largest extra large table "
                                                                         "(default: %(default)s)")
    g.add_argument("--hot_tables", type=int, default=_D.hot_tables,
                   help="extra small hot tables, rows log-uniform in [100, hot_rows], pooling factor uniform in "
                        "[hot_pooling / 2, hot_pooling] (default: %(default)s)")
    g.add_argument("--hot_rows", type=int, default=_D.hot_rows, help="(default: %(default)s)")
    g.add_argument("--hot_pooling", type=float, default=_D.hot_pooling, help="(default: %(default)s)")
    add_progress_arg(p)
    return parse_flags(p, argv, __file__)


def main(argv=None) -> None:
    args = parse_args(argv)
    t0 = time.perf_counter()
    if args.synthetic:
        spec = SyntheticSpec(num_tables=args.num_tables, batch_size=args.batch_size,
                             max_rows=args.max_rows, seed=args.seed, large_tables=args.large_tables,
                             large_rows=args.large_rows, hot_tables=args.hot_tables, hot_rows=args.hot_rows,
                             hot_pooling=args.hot_pooling)
        spec.validate()
        configs, _, indices, offsets = generate_synthetic(spec, progress=not args.no_progress)
        config = {"source": "synthetic", **spec.to_json()}
        batch = spec.batch_size
    else:
        raw_indices, raw_offsets, lengths = read_public_dlrm(args.data)
        configs, _, indices, offsets = process_public(raw_indices, raw_offsets, lengths,
                                                      path=args.data, progress=not args.no_progress)
        del raw_indices, raw_offsets, lengths
        config = {"source": "public", "data": os.path.abspath(args.data)}
        batch = len(offsets[0]) - 1 if offsets else 0
    if not configs:
        raise NeuroShardError(f"{args.data}: the file has no tables")
    write_dataset(args.out_dir, configs, indices, offsets)
    write_json_atomic(os.path.join(args.out_dir, "config.json"), config)
    n = sum(int(i.numel()) for i in indices)
    print(f"wrote {len(configs)} tables, batch size {batch}, {n} indices to {args.out_dir} "
          f"in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    run_main(main)
